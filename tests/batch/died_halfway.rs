use super::*;

// ---- a batch whose process died halfway ----

const ITEMS: usize = 8;

fn builders(q: &Queue) -> Vec<idempotent_submit::SubmitBuilder<'_>> {
    (0..ITEMS)
        .map(|i| {
            q.submit("t", json!({"i": i}))
                .idempotency_key(format!("k{i}"))
        })
        .collect()
}

/// What a batch's items were answered, and the bucket after, per item: its
/// record's task id if it has one.
async fn records(q: &Queue) -> Vec<Option<uuid::Uuid>> {
    let mut out = Vec::new();
    for i in 0..ITEMS {
        out.push(
            q.record("t", &format!("k{i}"), None)
                .await
                .unwrap()
                .map(|(r, _)| r.task_id),
        );
    }
    out
}

fn count(store: &MemoryStore, prefix: &str) -> usize {
    store
        .keys()
        .iter()
        .filter(|k| k.starts_with(prefix))
        .count()
}

/// Crash points across a batch of `ITEMS` new keys: before or after the
/// `nth` call of the whole batch.
fn crash_points() -> Vec<(usize, Fault)> {
    let mut v = Vec::new();
    for nth in [1, 2, 5, 9, 12, 17, 23] {
        v.push((nth, Fault::CrashBefore));
        v.push((nth, Fault::CrashAfter));
    }
    v
}

/// The batch through a store that dies at the crash point: what it
/// answered (a real crash answers nothing), and the bucket it left.
async fn crashed_batch(
    nth: usize,
    fault: Fault,
) -> (
    ManualClock,
    MemoryStore,
    Vec<Result<idempotent_submit::Submitted, SubmitError>>,
) {
    let clock = ManualClock::at_epoch();
    let faulty = common::faulty(&clock);
    faulty.at_call(nth, fault);
    let q = Queue::with_clock(faulty.clone(), Arc::new(clock.clone()), common::settings());
    let answered = q.submit_many(builders(&q)).await;
    assert!(faulty.crashed(), "crash point {nth} was reached");
    (clock, faulty.inner().clone(), answered)
}

/// A process started afresh on the crashed batch's bucket.
fn restart(clock: &ManualClock, store: &MemoryStore) -> Queue {
    Queue::with_clock(store.clone(), Arc::new(clock.clone()), common::settings())
}

/// After the crash each item is either finished (its record, its task and
/// its marker) or never started (no record): every record's task id has
/// exactly one task object and one marker.
fn each_item_finished_or_never_started(
    store: &MemoryStore,
    recs: &[Option<uuid::Uuid>],
    why: &str,
) {
    let started = recs.iter().flatten().count();
    assert_eq!(count(store, "idempotency/"), started, "{why}");
    assert_eq!(
        count(store, "tasks/"),
        started,
        "{why}: one task per started item"
    );
    assert_eq!(
        count(store, "ready/"),
        started,
        "{why}: one marker per started item"
    );
    let keys = store.keys();
    for id in recs.iter().flatten().map(|id| id.to_string()) {
        let task = keys
            .iter()
            .any(|k| k.starts_with("tasks/") && k.contains(&id));
        let marker = keys
            .iter()
            .any(|k| k.starts_with("ready/") && k.ends_with(&id));
        assert!(
            task && marker,
            "{why}: {id} has its task {task}, its marker {marker}"
        );
    }
}

/// A retry of the whole batch answers every item truthfully: an item that
/// had started, its record's task (200, replayed); one that had not, a new
/// task (201); an item answered before the crash, the same task again.
async fn retry_answers_every_item_truthfully(
    q: &Queue,
    store: &MemoryStore,
    before: &[Option<uuid::Uuid>],
    answered: &[Result<idempotent_submit::Submitted, SubmitError>],
    why: &str,
) {
    let retry = q.submit_many(builders(q)).await;
    for (i, r) in retry.iter().enumerate() {
        let s = r
            .as_ref()
            .unwrap_or_else(|e| panic!("{why}: item {i}: {e}"));
        match before[i] {
            Some(id) => {
                assert_eq!(s.task_id, id, "{why}: item {i}");
                assert!(s.replayed, "{why}: item {i}");
            }
            None => assert!(s.created(), "{why}: item {i}"),
        }
        if let Ok(a) = &answered[i] {
            assert_eq!(
                a.task_id, s.task_id,
                "{why}: item {i} answered before the crash"
            );
        }
        assert_eq!(s.status, "pending", "{why}: item {i}");
    }
    assert_eq!(count(store, "tasks/"), ITEMS, "{why}");
    assert_eq!(count(store, "ready/"), ITEMS, "{why}");
}

#[tokio::test]
async fn a_batch_that_died_halfway_is_finished_by_its_records_events_and_a_retry_answers_each_item()
{
    for (nth, fault) in crash_points() {
        let why = format!("{fault:?} at call {nth}");
        let (clock, store, answered) = crashed_batch(nth, fault).await;
        let restarted = restart(&clock, &store);
        let before = records(&restarted).await;
        // The records' events, STALE_CREATING_AFTER_SECONDS after the writes.
        clock.advance(common::settings().stale_creating_after);
        let record_keys: Vec<String> = store
            .keys()
            .into_iter()
            .filter(|k| k.starts_with("idempotency/"))
            .collect();
        for k in &record_keys {
            let o = restarted.engine().sweep_record(k, false, None).await;
            assert!(
                !o.try_again_later()
                    && !matches!(
                        o,
                        RecordOutcome::PastDeadline
                            | RecordOutcome::Corrupt
                            | RecordOutcome::Failed(_)
                    ),
                "{why}: {k}: {o:?}"
            );
        }
        each_item_finished_or_never_started(&store, &before, &why);
        assert_eq!(
            records(&restarted).await,
            before,
            "{why}: the sweeper kept every task id"
        );
        retry_answers_every_item_truthfully(&restarted, &store, &before, &answered, &why).await;
    }
}

#[tokio::test]
async fn a_batch_that_died_halfway_is_finished_by_a_retry_of_the_batch_alone() {
    for (nth, fault) in crash_points() {
        let why = format!("{fault:?} at call {nth}");
        let (clock, store, answered) = crashed_batch(nth, fault).await;
        let restarted = restart(&clock, &store);
        let before = records(&restarted).await;
        retry_answers_every_item_truthfully(&restarted, &store, &before, &answered, &why).await;
        each_item_finished_or_never_started(&store, &records(&restarted).await, &why);
    }
}

#[tokio::test]
async fn a_batch_through_the_http_handler_that_crashed_is_retryable_and_its_retry_answers_every_item()
 {
    let clock = ManualClock::at_epoch();
    let faulty = common::faulty(&clock);
    let h = memory_harness(&faulty, &clock);
    faulty.inject(Some(Op::PutCreate), "tasks/", 2, 1, Fault::CrashAfter);
    let body = json!({"tasks": (0..5).map(|i| item(&format!("c{i}"), i)).collect::<Vec<_>>()});
    let r = h.http(batch(body.clone())).await;
    // What the process answered as it died: no item a success it was not.
    if r.status == 200 {
        for x in results(&r) {
            assert!(
                x["status_code"].is_null()
                    || faulty
                        .inner()
                        .keys()
                        .iter()
                        .any(|k| k.contains(x["task_id"].as_str().unwrap()))
            );
        }
    } else {
        assert_eq!(r.status, 503);
    }
    let restarted = Harness::with_settings(
        faulty.inner().clone(),
        Some(&clock),
        false,
        common::settings(),
    );
    let again = restarted.http(batch(body)).await;
    let rs = results(&again);
    assert!(
        rs.iter()
            .all(|x| x["status_code"] == 201 || x["status_code"] == 200),
        "{}",
        again.body
    );
    assert_eq!(count(faulty.inner(), "tasks/"), 5);
    assert_eq!(count(faulty.inner(), "ready/"), 5);
    let ids: std::collections::HashSet<&str> =
        rs.iter().map(|x| x["task_id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 5);
}
