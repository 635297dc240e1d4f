//! 1. Requests per operation, by kind and price class.

use std::sync::Arc;

use chrono::Duration as ChronoDuration;
use idempotent_submit::store::{Fault, FaultyStore, Op, PutMode, Store};
use idempotent_submit::{Clock, ManualClock, MemoryStore, Queue, Settings};
use serde_json::json;

use crate::report::Report;

/// What buquet's worker does to every pending task it claims and runs: the
/// task turns `running` by compare-and-swap, its marker is deleted, and it
/// completes. Straight on the bucket: these requests are the queue's.
pub(crate) async fn worker_claims_every_task(mem: &MemoryStore) {
    for key in mem.keys().into_iter().filter(|k| k.starts_with("tasks/")) {
        let o = mem.get(&key).await.expect("a task");
        let mut t: serde_json::Value = serde_json::from_slice(&o.body).expect("a task's JSON");
        if t["status"] != "pending" {
            continue;
        }
        let id = t["id"].as_str().expect("an id").to_owned();
        let shard = t["shard"].as_str().expect("a shard").to_owned();
        let available: chrono::DateTime<chrono::Utc> = t["available_at"]
            .as_str()
            .and_then(|a| a.parse().ok())
            .expect("available_at");
        t["status"] = json!("completed");
        t["attempt"] = json!(1);
        mem.put(
            &key,
            bytes::Bytes::from(t.to_string()),
            PutMode::Update(o.meta.etag),
        )
        .await
        .expect("the worker's claim");
        let marker = format!("ready/{shard}/{:010}/{id}", available.timestamp() / 60);
        mem.delete(&marker, None)
            .await
            .expect("the claimed task's marker");
    }
}

/// One row: the operation, its (requests, round trips), and at most.
pub(crate) type Row = (&'static str, (usize, usize), (usize, usize));

/// The requests and round trips logged since the last reset.
pub(crate) fn count(f: &FaultyStore<MemoryStore>) -> (usize, usize) {
    (f.calls().len(), f.round_trips())
}

/// One bucket in memory, seen through the fault-injecting store that counts
/// its calls, and the queue over it, on one clock: the rows run on it one
/// after another, each on what the last left.
struct World {
    clock: ManualClock,
    mem: MemoryStore,
    f: FaultyStore<MemoryStore>,
    q: Queue,
}

impl World {
    fn new() -> Self {
        let clock = ManualClock::at_epoch();
        let mem = MemoryStore::new(Arc::new(clock.clone()) as Arc<dyn Clock>);
        let f = FaultyStore::new(mem.clone());
        let q = Queue::with_clock(f.clone(), Arc::new(clock.clone()), Settings::default());
        World { clock, mem, f, q }
    }

    /// A submit of `key` (input 1) by another process, which dies right
    /// after its first create-only PUT under `prefix`; under `tasks/` its
    /// marker's first attempt fails, so the task lands first and the
    /// process dies before the marker's retry.
    async fn died_at(&self, key: &str, prefix: &str) {
        let crash = FaultyStore::new(self.mem.clone());
        if prefix == "tasks/" {
            let lost = idempotent_submit::store::StoreError::Unavailable("503".into());
            crash.inject(Some(Op::Put), "ready/", 1, 1, Fault::Fail(lost));
        }
        crash.inject(Some(Op::PutCreate), prefix, 1, 1, Fault::CrashAfter);
        let clock = Arc::new(self.clock.clone());
        Queue::with_clock(crash, clock, Settings::default())
            .submit("t", json!(1))
            .idempotency_key(key)
            .await
            .unwrap_err();
    }

    /// The key of the bucket's first record.
    fn record(&self) -> String {
        self.mem
            .keys()
            .into_iter()
            .find(|k| k.starts_with("idempotency/"))
            .expect("a record")
    }
}

pub(crate) async fn requests(r: &mut Report) {
    let w = World::new();
    let mut rows = submit_rows(&w).await;
    rows.extend(interrupted_rows(&w).await);
    rows.extend(key_rows(&w).await);
    rows.extend(failed_key_rows(&w).await);
    rows.extend(crate::events::event_rows().await);
    print_rows(r, rows);
}

/// A key's first submit, its replays (before and after it settles), the
/// sweeper's event, a conflict, and a submit without a key.
async fn submit_rows(w: &World) -> Vec<Row> {
    let World { clock, mem, f, q } = w;
    let mut rows = Vec::new();
    f.reset_log();
    q.submit("t", json!(1)).idempotency_key("k").await.unwrap();
    rows.push(("new submit", count(f), (3, 2)));
    f.reset_log();
    q.submit("t", json!(1)).idempotency_key("k").await.unwrap();
    rows.push((
        "replay of a record that can still be finished",
        count(f),
        (4, 3),
    ));
    // A worker claims the task, as buquet's does: a CAS to running, then it
    // deletes the marker. The queue's requests, not ours: not counted.
    worker_claims_every_task(mem).await;
    clock.advance(Settings::default().stale_creating_after);
    f.reset_log();
    q.engine().sweep_record(&w.record(), false, None).await;
    rows.push((
        "the sweeper's event: a task the worker took",
        count(f),
        (3, 2),
    ));
    let s = Settings::default();
    clock.advance(s.finish_window + ChronoDuration::minutes(15));
    f.reset_log();
    q.submit("t", json!(1)).idempotency_key("k").await.unwrap();
    rows.push(("replay of a settled record", count(f), (3, 3)));
    f.reset_log();
    q.submit("t", json!(2))
        .idempotency_key("k")
        .await
        .unwrap_err();
    rows.push(("conflict", count(f), (2, 2)));
    f.reset_log();
    q.submit("t", json!(1)).await.unwrap();
    rows.push(("submit without a key", count(f), (2, 1)));
    rows
}

/// Replays that finish a submit that died after its record, or its task.
async fn interrupted_rows(w: &World) -> Vec<Row> {
    let World { f, q, .. } = w;
    let mut rows = Vec::new();
    // An interrupted submit, finished by the next one: it died after its
    // record, and then after its task.
    for (name, prefix, counts) in [
        (
            "replay that finishes a submit that died after its record",
            "idempotency/",
            (6, 4),
        ),
        (
            "replay that finishes a submit that died after its task",
            "tasks/",
            (6, 5),
        ),
    ] {
        let key = format!("died-{prefix}");
        w.died_at(&key, prefix).await;
        f.reset_log();
        q.submit("t", json!(1)).idempotency_key(&key).await.unwrap();
        rows.push((name, count(f), counts));
    }
    rows
}

/// A key's record looked up and reset, the reset key's next submit, a
/// reset of a record a moment old, and one of a record whose submit died
/// before its marker.
async fn key_rows(w: &World) -> Vec<Row> {
    let World { f, q, .. } = w;
    let mut rows = Vec::new();
    // A key's record looked up, and reset on purpose (`GET`/`DELETE
    // /idempotency-keys/{key}`): the settled `k`; then one in flight whose
    // task is not there yet, which a reset refuses.
    f.reset_log();
    q.lookup_key("t", "k", None)
        .await
        .unwrap()
        .expect("a record");
    rows.push(("key lookup (GET /idempotency-keys/{key})", count(f), (2, 2)));
    f.reset_log();
    q.reset_key("t", "k", None).await.unwrap();
    rows.push((
        "key reset (DELETE /idempotency-keys/{key})",
        count(f),
        (3, 3),
    ));
    // The reset key's next submit: it claims over the reset record as over
    // an expired one.
    f.reset_log();
    let again = q.submit("t", json!(2)).idempotency_key("k").await.unwrap();
    assert!(again.created());
    rows.push((
        "the next submit of a reset key (a new task)",
        count(f),
        (5, 4),
    ));
    // A reset of a record a moment old: answered at once (its task is
    // there), no wait for the late-write margin.
    q.submit("t", json!(1))
        .idempotency_key("young")
        .await
        .unwrap();
    f.reset_log();
    assert!(matches!(
        q.reset_key("t", "young", None).await.unwrap(),
        idempotent_submit::Reset::Done { .. }
    ));
    // Its record is in its finish window: the marker's HEAD goes beside the
    // task's GET.
    rows.push(("key reset of a record a moment old", count(f), (4, 3)));
    // A reset of a record whose submit died after its task, before its
    // marker: the reset finishes the record first (docs/protocol.md,
    // "Looking up and resetting a key", step 4).
    w.died_at("no-marker", "tasks/").await;
    f.reset_log();
    assert!(matches!(
        q.reset_key("t", "no-marker", None).await.unwrap(),
        idempotent_submit::Reset::Done { .. }
    ));
    rows.push((
        "key reset of a record whose submit died before its marker (the reset writes it first)",
        count(f),
        (8, 6),
    ));
    rows
}

/// A failed task's key replayed and reused, and a reset refused while a
/// record is in flight.
async fn failed_key_rows(w: &World) -> Vec<Row> {
    let World { mem, f, q, .. } = w;
    let mut rows = Vec::new();
    // A key whose task failed for good (buquet's worker gave up on it):
    // replayed by default, claimed over for a new task with
    // `if_task_failed: new_task` (one compare-and-swap).
    let failed = q
        .submit("t", json!(1))
        .idempotency_key("failed")
        .await
        .unwrap();
    // The worker claims it (its marker goes) and gives up on it.
    worker_claims_every_task(mem).await;
    let o = mem.get(&failed.task_key).await.expect("the task");
    let mut t: serde_json::Value = serde_json::from_slice(&o.body).expect("a task's JSON");
    t["status"] = json!("failed");
    mem.put(
        &failed.task_key,
        bytes::Bytes::from(t.to_string()),
        PutMode::Update(o.meta.etag),
    )
    .await
    .expect("the worker's failure");
    f.reset_log();
    q.submit("t", json!(1))
        .idempotency_key("failed")
        .await
        .unwrap();
    rows.push((
        "replay of a failed task's key (if_task_failed: replay, the default)",
        count(f),
        (4, 3),
    ));
    f.reset_log();
    let reused = q
        .submit("t", json!(1))
        .idempotency_key("failed")
        .if_task_failed(idempotent_submit::IfTaskFailed::NewTask)
        .await
        .unwrap();
    assert!(reused.created() && reused.replaces_task_id == Some(failed.task_id));
    rows.push((
        "failed-key reuse (if_task_failed: new_task, a new task)",
        count(f),
        (6, 5),
    ));
    w.died_at("in-flight", "idempotency/").await;
    // Its task's GET and its marker's HEAD together: the HEAD is spent
    // (the reset is refused), the round trip is not.
    f.reset_log();
    q.reset_key("t", "in-flight", None).await.unwrap();
    rows.push((
        "key reset refused (in flight, its task not there yet)",
        count(f),
        (3, 2),
    ));
    rows
}

fn print_rows(r: &mut Report, rows: Vec<Row>) {
    r.line("## S3 requests per operation\n");
    r.line("Counted by the fault-injecting store's call log (in-memory bucket, in which a worker claims the tasks as buquet's does); round trips are calls that did not overlap. The figures are upper bounds (docs/protocol.md, request counts). A submit that died after its task wrote no marker: its replay writes the marker and reads the task again, in case a worker claimed it in between. The event rows are events/'s samples (SAM CLI's shapes) through the `submit` handler with `SOURCES` (benches/bench/events.rs), each kind on a bucket of its own: an event costs what a `POST /tasks` of its key costs.\n");
    r.line("| operation | requests | sequential round trips | at most |");
    r.line("| --- | --- | --- | --- |");
    for (name, (calls, rts), (max_calls, max_rts)) in rows {
        r.line(format!(
            "| {name} | {calls} | {rts} | {max_calls} / {max_rts} |"
        ));
        r.target(
            format!("requests / round trips: {name}"),
            format!("{calls} / {rts}"),
            format!("≤ {max_calls} / {max_rts}"),
            calls <= max_calls && rts <= max_rts,
        );
    }
}
