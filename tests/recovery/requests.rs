use super::*;

// ---- request counts (guarantee 8) ----

fn trips(w: &World) -> Vec<(Op, usize)> {
    w.faulty
        .calls()
        .iter()
        .map(|c| (c.op, c.round_trip))
        .collect()
}

/// The requests of `w` with their round trips, which must be `requests` of
/// them in `round_trips` round trips.
fn trips_counted(w: &World, requests: usize, round_trips: usize) -> Vec<(Op, usize)> {
    let ops = trips(w);
    let counts = (ops.len(), w.faulty.round_trips());
    assert_eq!(counts, (requests, round_trips), "{ops:?}");
    ops
}

#[tokio::test]
async fn a_new_submit_is_two_round_trips_and_three_requests() {
    let w = World::new();
    submit(&w.process()).await.unwrap();
    let ops = trips_counted(&w, 3, 2);
    assert_eq!(ops[0], (Op::PutCreate, 1));
    assert!(ops[1..].contains(&(Op::PutCreate, 2)) && ops[1..].contains(&(Op::Put, 2)));
}

#[tokio::test]
async fn a_replay_of_a_settled_record_is_three_requests() {
    let w = World::new();
    submit(&w.restarted()).await.unwrap();
    // Past its finish deadline and the 15 minutes after it: nothing can be
    // written for it any more, and its task object alone answers.
    w.clock.advance(Duration::seconds(2400 + 15 * 60 + 1));
    let r = submit(&w.process()).await.unwrap();
    assert_eq!(r.status, "pending");
    assert_eq!(
        trips(&w),
        vec![(Op::PutCreate, 1), (Op::Get, 2), (Op::Get, 3)]
    );
}

#[tokio::test]
async fn a_replay_of_a_record_an_earlier_version_turned_ready_is_three_requests() {
    let w = World::new();
    submit(&w.restarted()).await.unwrap();
    // What the sweeper of an earlier version wrote once it had seen both
    // objects: `ready`, without `pending_task`, under a new write_id.
    let (rec, meta) = w.record_meta("k").await;
    let mut v: Value = serde_json::to_value(&rec).unwrap();
    v["status"] = json!("ready");
    v["write_id"] = json!(uuid::Uuid::new_v4());
    v.as_object_mut().unwrap().remove("pending_task");
    w.bucket
        .put(
            &w.record_key("k"),
            serde_json::to_vec(&v).unwrap().into(),
            PutMode::Update(meta.etag),
        )
        .await
        .unwrap();
    let before = w.bucket.snapshot();
    let r = submit(&w.process()).await.unwrap();
    assert_eq!((r.task_id, r.status.as_str()), (rec.task_id, "pending"));
    assert_eq!(
        trips(&w),
        vec![(Op::PutCreate, 1), (Op::Get, 2), (Op::Get, 3)]
    );
    assert_eq!(w.bucket.snapshot(), before);
}

#[tokio::test]
async fn a_replay_of_a_creating_record_is_four_requests_in_three_round_trips() {
    let w = World::new();
    submit(&w.restarted()).await.unwrap();
    submit(&w.process()).await.unwrap();
    let ops = trips_counted(&w, 4, 3);
    assert_eq!(ops[..2], [(Op::PutCreate, 1), (Op::Get, 2)]);
    assert!(ops[2..].contains(&(Op::Get, 3)) && ops[2..].contains(&(Op::Head, 3)));
}

#[tokio::test]
async fn a_replay_that_finishes_an_interrupted_submit_writes_only_what_is_missing() {
    let crashed = World::new();
    interrupted(&crashed).await;
    let w = crashed.next_process();
    let r = submit(&w.process()).await.unwrap();
    assert!(r.recovered && r.replayed);
    // PUT (412), GET record, GET task + HEAD marker (both 404), PUT task +
    // PUT marker: 6 requests in 4 round trips. No second read of the task:
    // this call created it, beside its marker, so no worker had it before.
    let ops = trips_counted(&w, 6, 4);
    assert!(ops[4..].contains(&(Op::PutCreate, 4)) && ops[4..].contains(&(Op::Put, 4)));
    assert_eq!(w.count("tasks/"), 1);
    assert_eq!(w.count("ready/"), 1);
}

#[tokio::test]
async fn an_answered_submits_event_checks_both_objects_in_three_requests_and_writes_nothing() {
    let w = World::new();
    submit(&w.restarted()).await.unwrap();
    let written = w.record_meta("k").await;
    let before = w.bucket.snapshot();
    let outcome = w.logged_sweep_event("k").await;
    assert_eq!(outcome, RecordOutcome::Nothing);
    // GET record, then GET task + HEAD marker in parallel: 3 requests in 2
    // round trips, and no PUT (the record is not promoted any more).
    let ops = trips_counted(&w, 3, 2);
    assert_eq!(ops[0], (Op::Get, 1));
    assert!(ops[1..].contains(&(Op::Get, 2)) && ops[1..].contains(&(Op::Head, 2)));
    assert_eq!(w.bucket.snapshot(), before, "byte for byte");
    w.assert_written_once(&written).await;
}

#[tokio::test]
async fn an_interrupted_submits_event_writes_both_objects_in_five_requests_and_not_the_record() {
    let crashed = World::new();
    interrupted(&crashed).await;
    let w = crashed.next_process();
    let written = w.record_meta("k").await;
    let outcome = w.logged_sweep_event("k").await;
    assert_eq!(outcome, RecordOutcome::Finished);
    // GET record, GET task + HEAD marker (both 404), PUT task + PUT marker:
    // 5 requests in 3 round trips, no record write. The task is not read
    // again: the sweeper created it beside its marker.
    let ops = trips_counted(&w, 5, 3);
    assert_eq!(ops[0], (Op::Get, 1));
    assert!(ops[1..3].contains(&(Op::Get, 2)) && ops[1..3].contains(&(Op::Head, 2)));
    assert!(ops[3..].contains(&(Op::PutCreate, 3)) && ops[3..].contains(&(Op::Put, 3)));
    w.assert_written_once(&written).await;
}

#[tokio::test]
async fn a_conflict_is_at_most_two_requests() {
    let w = World::new();
    submit(&w.restarted()).await.unwrap();
    w.process()
        .submit("t", json!({"n": 2}))
        .idempotency_key("k")
        .await
        .unwrap_err();
    let ops: Vec<Op> = w.faulty.calls().iter().map(|c| c.op).collect();
    assert_eq!(ops, vec![Op::PutCreate, Op::Get]);
}

#[tokio::test]
async fn a_submit_without_a_key_is_one_round_trip_of_two_requests() {
    let w = World::new();
    w.process().submit("t", json!(1)).await.unwrap();
    assert_eq!(w.faulty.calls().len(), 2);
    assert_eq!(w.faulty.round_trips(), 1);
}

/// A process on `w` whose retries back off: five attempts, a base delay of
/// 100 ms, at most 1 s.
fn backing_off(w: &World) -> Queue {
    let settings = idempotent_submit::Settings {
        retry: idempotent_submit::RetryPolicy {
            max_attempts: 5,
            base_delay: std::time::Duration::from_millis(100),
            max_delay: std::time::Duration::from_secs(1),
            attempt_timeout: std::time::Duration::from_secs(5),
        },
        ..common::settings()
    };
    Queue::with_clock(w.faulty.clone(), Arc::new(w.clock.clone()), settings)
}

#[tokio::test(start_paused = true)]
async fn retries_wait_between_attempts() {
    let w = World::new();
    w.faulty.inject(
        Some(Op::PutCreate),
        "idempotency/",
        1,
        4,
        common::unavailable("503 SlowDown"),
    );
    let q = backing_off(&w);
    let start = tokio::time::Instant::now();
    submit(&q).await.unwrap();
    // Four backoffs, each drawn from 0 up to 200, 400, 800 and 1000 ms
    // (full jitter): all four zero has a chance of about 1 in 10^10.
    let waited = start.elapsed();
    assert!(
        waited > std::time::Duration::ZERO && waited <= std::time::Duration::from_millis(2400),
        "{waited:?}"
    );
    assert_eq!(w.faulty.calls().len(), 4 + 3);
}

#[tokio::test(start_paused = true)]
async fn a_request_answered_at_its_first_attempt_waits_for_nothing() {
    // The backoff comes between attempts, never before the first: a submit
    // whose three requests all succeed at once spends no time asleep, however
    // long the policy's delays (each a draw from 0 up to 100 ms and more, so a
    // wait before a first attempt shows on tokio's paused clock).
    let w = World::new();
    let q = backing_off(&w);
    let start = tokio::time::Instant::now();
    submit(&q).await.unwrap();
    assert_eq!(start.elapsed(), std::time::Duration::ZERO);
    assert_eq!(w.faulty.calls().len(), 3);
}
