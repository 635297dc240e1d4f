use super::*;

#[tokio::test]
async fn the_scheduled_pass_deletes_a_payload_no_task_names_once_no_task_can_be_written_for_it() {
    let w = World::new();
    let input = big(1000);
    let first = offloaded(&w.process(), &input).await.unwrap();
    // A replay whose process dies before it deletes its own payload.
    w.fault_once(Op::Delete, "payloads/", Fault::CrashBefore);
    offloaded(&w.process(), &input).await.unwrap_err();
    let live = format!("payloads/{}/input.json", first.task_id);
    let mut orphans: Vec<String> = w.keys("payloads/");
    orphans.retain(|k| *k != live);
    assert_eq!(orphans.len(), 1, "the dead replay left its payload");
    // A task of another client, under a two-digit shard, with its payload.
    let other = uuid::Uuid::new_v4().to_string();
    for (key, body) in [
        (
            format!("tasks/{}/{other}.json", &other[..2]),
            b"{}".to_vec(),
        ),
        (format!("payloads/{other}/input.json"), b"1".to_vec()),
    ] {
        w.bucket
            .put(&key, body.into(), PutMode::Create)
            .await
            .unwrap();
    }
    // As the scheduled function runs it: with a deadline for the run.
    let pass = || async {
        w.restarted()
            .engine()
            .sweep(&idempotent_submit::testing::protocol::SweepOptions {
                deadline: Some(w.clock.now() + Duration::minutes(10)),
                ..Default::default()
            })
            .await
            .unwrap()
    };
    // Young, it may still get its task: kept. So it is at 55 minutes: a
    // finisher may write its task until the finish window (40 minutes) is
    // over, and that write may land 15 minutes later.
    assert_eq!(pass().await.payloads_deleted, 0);
    w.clock.advance(Duration::minutes(55));
    assert_eq!(pass().await.payloads_deleted, 0);
    assert_eq!(w.keys("payloads/").len(), 3);
    // Past the finish window, the late-write margin and an operation's
    // length, it never can.
    w.clock.advance(Duration::minutes(65));
    let s = pass().await;
    assert_eq!(s.payloads_deleted, 1, "{s:?}");
    let mut left = w.keys("payloads/");
    left.sort();
    let mut expected = vec![live, format!("payloads/{other}/input.json")];
    expected.sort();
    assert_eq!(left, expected);
}

/// An input payload that no task names, as a dead replay leaves it: in the
/// bucket at the clock's time, under a new task id of a slice that no pass
/// of the next nine days takes (so only the HEADs look at it): the last,
/// since the cursor begins at the first and daily passes take nine a day.
async fn orphan_payload(w: &World) -> String {
    let slice = idempotent_submit::testing::protocol::sweep::PAYLOAD_SLICES - 1;
    let mut b = *uuid::Uuid::new_v4().as_bytes();
    b[0] = slice as u8;
    let key = format!("payloads/{}/input.json", uuid::Uuid::from_bytes(b));
    w.bucket
        .put(&key, b"1".to_vec().into(), PutMode::Create)
        .await
        .unwrap();
    key
}

async fn payload_pass(
    store: impl Store,
    w: &World,
) -> idempotent_submit::testing::protocol::SweepSummary {
    Queue::with_clock(store, Arc::new(w.clock.clone()), common::settings())
        .engine()
        .sweep(&idempotent_submit::testing::protocol::SweepOptions::default())
        .await
        .unwrap()
}

#[tokio::test]
async fn a_payload_whose_task_cannot_be_checked_is_counted_as_an_error_and_kept() {
    let w = World::new();
    let key = orphan_payload(&w).await;
    w.clock.advance(Duration::hours(2));
    let f = FaultyStore::new(w.bucket.clone());
    f.inject(Some(Op::Head), "tasks/", 1, usize::MAX, forbidden());
    let s = payload_pass(f.clone(), &w).await;
    assert_eq!((s.errors, s.payloads_deleted), (1, 0), "{s:?}");
    assert_eq!(w.keys("payloads/"), vec![key]);
    // Checked at the next pass (its window is a day and an hour), it goes.
    f.heal();
    w.clock.advance(Duration::hours(1));
    let s = payload_pass(f, &w).await;
    assert_eq!((s.errors, s.payloads_deleted), (0, 1), "{s:?}");
    assert!(w.keys("payloads/").is_empty());
}

#[tokio::test]
async fn a_payload_is_looked_at_for_a_day_and_an_hour_after_it_became_an_orphan_and_not_after() {
    // The pass lists payloads aged from the finish window, twice the
    // late-write margin and an operation's length (1 h 10 min 25 s) to a day and an hour
    // more (so that each daily pass's window meets the next one's); one
    // exactly that much past is no longer the HEADs' business, one a second
    // younger still is. (After that, the payload's slice's day takes it:
    // tests/sweep.rs; this one's is not in the next nine days.)
    let w = World::new();
    let old = orphan_payload(&w).await;
    w.clock.advance(Duration::seconds(1));
    orphan_payload(&w).await;
    w.clock.advance(
        Duration::minutes(70) + Duration::seconds(25) + Duration::hours(25) - Duration::seconds(1),
    );
    let s = payload_pass(w.bucket.clone(), &w).await;
    assert_eq!(s.payloads_deleted, 1, "{s:?}");
    assert_eq!(w.keys("payloads/"), vec![old]);
}

#[tokio::test]
async fn a_payload_whose_task_is_under_our_shard_costs_the_pass_one_head_and_an_orphan_four() {
    // The HEAD path asks for our own shard length first and stops at the
    // first task found: a live payload is one HEAD a pass, not four.
    let w = World::new();
    let orphan = orphan_payload(&w).await;
    let live = orphan_payload(&w).await;
    let id = live
        .trim_start_matches("payloads/")
        .trim_end_matches("/input.json")
        .to_owned();
    w.bucket
        .put(
            &format!("tasks/{}/{id}.json", &id[..1]),
            b"{}".to_vec().into(),
            PutMode::Create,
        )
        .await
        .unwrap();
    w.clock.advance(Duration::hours(2));
    let f = FaultyStore::new(w.bucket.clone());
    let s = payload_pass(f.clone(), &w).await;
    assert_eq!(s.payloads_deleted, 1, "{s:?}");
    let heads = |key: &str| {
        f.calls()
            .iter()
            .filter(|c| c.op == Op::Head && c.key.contains(key))
            .count()
    };
    let orphan_id = orphan
        .trim_start_matches("payloads/")
        .trim_end_matches("/input.json");
    assert_eq!((heads(&id), heads(orphan_id)), (1, 4));
    assert_eq!(w.keys("payloads/"), vec![live]);
}
