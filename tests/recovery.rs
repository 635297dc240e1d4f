//! Crashes, lost answers, retries and the finish deadline, with the
//! fault-injecting store and the injectable clock; and request counts.

mod deadline;
mod ready_index;
mod requests;

use crate::common;

use std::sync::Arc;

use crate::common::World;
use chrono::{DateTime, Duration, SecondsFormat, Utc};
use futures::FutureExt;
use idempotent_submit::store::{Fault, FaultyStore, ObjectMeta, Op, PutMode, Store, StoreError};
use idempotent_submit::testing::protocol::{Record, RecordOutcome, RecordStatus, TaskLocation};
use idempotent_submit::{Clock, Queue, SubmitError};
use serde_json::{Value, json};

impl World {
    /// The record is still the one write its submit made (`creating`, with
    /// its `pending_task`, the same write_id and ETag), and its task and
    /// marker are both in the bucket.
    async fn assert_written_once(&self, written: &(Record, ObjectMeta)) {
        let (rec, meta) = self.record_meta("k").await;
        assert_eq!(rec.status, Some(RecordStatus::Creating));
        assert!(
            rec.pending_task.is_some(),
            "pending_task stays for the record's life"
        );
        assert_eq!(rec.task_id, written.0.task_id);
        assert_eq!(rec.write_id, written.0.write_id, "the same write");
        assert_eq!(meta.etag, written.1.etag, "the same write");
        assert_eq!((self.count("tasks/"), self.count("ready/")), (1, 1));
    }

    /// What buquet's worker does when it claims the task: a compare-and-swap
    /// of the task object from `pending` to `running`, then it deletes the
    /// task's marker.
    async fn worker_claims(&self) {
        let rec = self.record("k").await;
        let (task, etag) = self.task("k").await;
        self.bucket
            .put(&rec.task_key, claimed(&task), PutMode::Update(etag))
            .await
            .unwrap();
        for m in self.keys("ready/") {
            self.bucket.delete(&m, None).await.unwrap();
        }
    }

    /// What buquet's worker does when a claimed attempt fails and is retried:
    /// the task is `pending` again, available three minutes later, with a
    /// new marker in that minute. The new marker's key.
    async fn worker_retries(&self) -> String {
        let rec = self.record("k").await;
        let (mut task, etag) = self.task("k").await;
        let at: DateTime<Utc> = task["available_at"].as_str().unwrap().parse().unwrap();
        let later = at + Duration::minutes(3);
        task["status"] = json!("pending");
        task["retry_count"] = json!(1);
        task["available_at"] = json!(later.to_rfc3339_opts(SecondsFormat::Secs, true));
        task["lease_id"] = Value::Null;
        task["lease_expires_at"] = Value::Null;
        task["worker_id"] = Value::Null;
        task["last_error"] = json!("the handler failed");
        self.replace_json(&rec.task_key, &task, etag).await;
        let marker = TaskLocation::new(rec.task_id, 1, later).marker_key();
        self.bucket
            .put(&marker, bytes::Bytes::new(), PutMode::Overwrite)
            .await
            .unwrap();
        marker
    }
}

async fn submit(q: &Queue) -> Result<idempotent_submit::Submitted, SubmitError> {
    q.submit("t", json!({"n": 1})).idempotency_key("k").await
}

/// `task` as a worker's claim rewrites it: `running`, under a lease.
fn claimed(task: &Value) -> bytes::Bytes {
    let mut t = task.clone();
    t["status"] = json!("running");
    t["attempt"] = json!(1);
    t["lease_id"] = json!(uuid::Uuid::new_v4());
    t["lease_expires_at"] = json!("1970-01-01T00:05:00Z");
    t["worker_id"] = json!("worker-1");
    serde_json::to_vec(&t).unwrap().into()
}

/// Writes made through `f` to the task objects or the ready index.
fn queue_writes(f: &FaultyStore<impl Store + Clone>) -> Vec<(Op, String)> {
    f.calls()
        .into_iter()
        .filter(|c| c.op.is_write() && !c.key.starts_with("idempotency/"))
        .map(|c| (c.op, c.key))
        .collect()
}

/// What the bucket holds, byte for byte: `World::bucket`'s snapshot.
type Bucket = Vec<(
    String,
    bytes::Bytes,
    idempotent_submit::store::ETag,
    DateTime<Utc>,
)>;

/// `w` wrote nothing since the bucket was `before`: no write to a task or
/// the ready index went out, and every object is as it was, byte for byte.
fn assert_wrote_nothing(w: &World, before: &Bucket) {
    assert_eq!(queue_writes(&w.faulty), []);
    assert_eq!(&w.bucket.snapshot(), before, "byte for byte");
}

/// A submit in `w` that wrote its record and its task, and died before its
/// marker landed (the marker's first attempt failed; the process died
/// before the retry).
async fn dies_before_the_marker(w: &World) {
    w.fault_once(Op::Put, "ready/", common::unavailable("503"));
    w.fault_once(Op::PutCreate, "tasks/", Fault::CrashAfter);
    submit(&w.process()).await.unwrap_err();
    assert_eq!(w.count("tasks/"), 1);
    assert_eq!(w.count("ready/"), 0, "the crash came before the marker");
}

/// The same, then a new world over the same bucket, with a fresh call log.
async fn died_before_the_marker() -> World {
    let w = World::new();
    dies_before_the_marker(&w).await;
    w.next_process()
}

/// After a crash at some step, the next submit answers the crashed submit's
/// task id; exactly one task and one marker exist; the record stays as the
/// crashed submit wrote it, through the sweeper's event too.
async fn next_submit_recovers(w: &World) {
    let crashed = submit(&w.process()).await.unwrap_err();
    assert_eq!(crashed, SubmitError::Storage(StoreError::Crashed));
    assert!(w.faulty.crashed());
    let written = w.record_meta("k").await;
    let pending = written.0.clone();
    assert_eq!(pending.status, Some(RecordStatus::Creating));
    assert!(pending.pending_task.is_some());

    let next = submit(&w.restarted()).await.unwrap();
    assert_eq!(next.task_id, pending.task_id);
    assert!(next.replayed && next.recovered == (w.count("tasks/") == 1));
    assert_eq!(next.status, "pending");
    assert_eq!(w.count("tasks/"), 1);
    assert_eq!(w.count("ready/"), 1);
    w.assert_written_once(&written).await;
    // The record's event: both are there and the task untouched, so the
    // sweeper writes nothing.
    assert_eq!(w.sweep_event("k").await, RecordOutcome::Nothing);
    w.assert_written_once(&written).await;
    // And a third submit is a plain replay.
    let third = submit(&w.restarted()).await.unwrap();
    assert_eq!(third.task_id, pending.task_id);
    assert_eq!(w.count("tasks/"), 1);
}

#[tokio::test]
async fn a_crash_after_the_record_is_finished_by_the_next_submit() {
    let w = World::new();
    w.fault_once(Op::PutCreate, "idempotency/", Fault::CrashAfter);
    next_submit_recovers(&w).await;
}

#[tokio::test]
async fn a_crash_after_the_task_before_the_marker_is_finished_by_the_next_submit() {
    // The marker's first attempt fails, so the task lands first, then the
    // process dies before the marker's retry.
    let w = died_before_the_marker().await;
    let written = w.record_meta("k").await;
    let next = submit(&w.process()).await.unwrap();
    assert_eq!(next.task_id, written.0.task_id);
    assert!(next.recovered, "it wrote the missing marker");
    assert_eq!(next.status, "pending");
    assert_eq!(w.count("tasks/"), 1);
    assert_eq!(w.count("ready/"), 1);
    // The finisher read the task, found it untouched and the marker
    // missing, and wrote only the marker: no task write at all. Then it read
    // the task again, in case a worker claimed it before the marker landed.
    let ops: Vec<(Op, String)> = w
        .faulty
        .calls()
        .iter()
        .map(|c| (c.op, c.key.split('/').next().unwrap_or("").to_owned()))
        .collect();
    assert!(!ops.contains(&(Op::PutCreate, "tasks".into())), "{ops:?}");
    let put = ops
        .iter()
        .position(|o| *o == (Op::Put, "ready".into()))
        .expect("the marker written");
    assert_eq!(ops[put + 1..], [(Op::Get, "tasks".into())], "{ops:?}");
    assert_eq!(w.sweep_event("k").await, RecordOutcome::Nothing);
    w.assert_written_once(&written).await;
}

#[tokio::test]
async fn a_crash_before_the_marker_is_finished_by_the_sweeper_event_alone() {
    let w = World::new();
    w.fault_once(Op::Put, "ready/", Fault::CrashBefore);
    submit(&w.process()).await.unwrap_err();
    assert_eq!(w.count("ready/"), 0);
    let written = w.record_meta("k").await;
    // Nobody submits the key again: the sweeper writes what is missing (the
    // marker for certain; the task may or may not have landed before the
    // crash), and leaves the record as it is.
    assert_eq!(w.sweep_event("k").await, RecordOutcome::Finished);
    w.assert_written_once(&written).await;
}

#[tokio::test]
async fn a_submit_that_answered_leaves_the_record_creating_with_task_and_marker_in_place() {
    let w = World::new();
    let r = submit(&w.process()).await.unwrap();
    assert!(r.created());
    assert_eq!(r.status, "pending");
    assert_eq!(w.count("tasks/"), 1);
    assert_eq!(w.count("ready/"), 1);
    let rec = w.record("k").await;
    assert_eq!(rec.status, Some(RecordStatus::Creating));
    assert_eq!(rec.task_id, r.task_id);
    // No write of the record after the claim.
    let record_writes = w
        .faulty
        .calls()
        .iter()
        .filter(|c| c.key.starts_with("idempotency/") && c.op.is_write())
        .count();
    assert_eq!(record_writes, 1);
}

#[tokio::test]
async fn a_replay_while_creating_answers_the_task_and_writes_nothing() {
    let w = World::new();
    let first = submit(&w.restarted()).await.unwrap();
    w.clock.advance(Duration::seconds(5));
    let before = w.bucket.snapshot();
    let r = submit(&w.process()).await.unwrap();
    assert_eq!(r.task_id, first.task_id);
    assert!(r.replayed && !r.recovered);
    assert_eq!(r.status, "pending");
    assert_eq!(w.bucket.snapshot(), before, "byte for byte");
}

#[tokio::test]
async fn a_crash_before_the_record_leaves_nothing_and_the_next_submit_creates() {
    let w = World::new();
    w.faulty.at_call(1, Fault::CrashBefore);
    submit(&w.process()).await.unwrap_err();
    assert!(w.bucket.is_empty());
    let next = submit(&w.restarted()).await.unwrap();
    assert!(next.created());
}

/// A submit whose first create under `prefix` lands and loses its answer
/// (`why`); what it answered in the end.
async fn answer_lost_once(w: &World, prefix: &str, why: &str) -> idempotent_submit::Submitted {
    let lost = Fault::FailAfter(StoreError::Unavailable(why.into()));
    w.fault_once(Op::PutCreate, prefix, lost);
    submit(&w.process()).await.unwrap()
}

#[tokio::test]
async fn a_lost_answer_to_our_own_record_write_is_recognized_by_write_id() {
    let w = World::new();
    let r = answer_lost_once(&w, "idempotency/", "connection reset").await;
    assert!(r.created(), "our own write, retried, is still our 201");
    assert_eq!(w.count("tasks/"), 1);
    assert_eq!(w.count("ready/"), 1);
    assert_eq!(w.record("k").await.task_id, r.task_id);
}

#[tokio::test]
async fn a_lost_answer_to_the_task_write_still_creates_one_task() {
    let w = World::new();
    let r = answer_lost_once(&w, "tasks/", "timeout").await;
    assert!(r.created());
    assert_eq!(r.status, "pending");
    assert_eq!(w.count("tasks/"), 1);
    // Its retry met the task (412), so the task was read again after the
    // marker landed: still pending in the marker's minute, the marker stays.
    assert_eq!(w.count("ready/"), 1);
}

#[tokio::test]
async fn a_lost_answer_to_the_sweepers_marker_write_is_retried_and_the_record_is_never_written() {
    let w = died_before_the_marker().await;
    let written = w.record_meta("k").await;
    w.fault_once(
        Op::Put,
        "ready/",
        Fault::FailAfter(StoreError::Unavailable("timeout".into())),
    );
    let outcome = w.logged_sweep_event("k").await;
    assert_eq!(outcome, RecordOutcome::Finished);
    w.assert_written_once(&written).await;
    // After the record's GET and the task's GET and the marker's HEAD: the
    // marker PUT landed and lost its answer, so it was sent again (a marker
    // written twice is the same marker); then the task was read again, since
    // a worker may have claimed it meanwhile. Nothing else was written.
    let calls = w.faulty.calls();
    let after_check: Vec<(Op, Option<StoreError>)> = calls
        .iter()
        .skip(3)
        .map(|c| (c.op, c.error.clone()))
        .collect();
    assert_eq!(
        after_check,
        vec![
            (Op::Put, Some(StoreError::Unavailable("timeout".into()))),
            (Op::Put, None),
            (Op::Get, None),
        ],
        "{calls:#?}"
    );
    assert!(
        !calls
            .iter()
            .any(|c| c.op.is_write() && c.key.starts_with("idempotency/")),
        "{calls:#?}"
    );
}

#[tokio::test]
async fn conflicts_409_and_503s_are_retried() {
    let w = World::new();
    w.faulty.inject(
        Some(Op::PutCreate),
        "idempotency/",
        1,
        2,
        Fault::Fail(StoreError::Conflict),
    );
    w.fault_once(Op::Put, "ready/", common::unavailable("503 SlowDown"));
    w.fault_once(Op::PutCreate, "tasks/", common::unavailable("500"));
    let r = submit(&w.process()).await.unwrap();
    assert!(r.created());
    assert_eq!(w.count("tasks/"), 1);
    assert_eq!(w.count("ready/"), 1);
    // 3 requests, plus one retry for each of the 4 failures, plus one GET:
    // the marker needed a second attempt, so a worker may have claimed the
    // task before it landed, and the task is read again.
    assert_eq!(w.faulty.calls().len(), 3 + 4 + 1);
    let last = w.faulty.calls().last().cloned().unwrap();
    assert_eq!((last.op, last.key.starts_with("tasks/")), (Op::Get, true));
}

#[tokio::test]
async fn a_hung_request_is_abandoned_and_retried() {
    let w = World::new();
    w.fault_once(Op::PutCreate, "idempotency/", Fault::Hang);
    let r = submit(&w.process()).await.unwrap();
    assert!(r.created());
}

#[tokio::test]
async fn storage_that_keeps_failing_is_a_retryable_error_never_a_success() {
    let w = World::new();
    w.faulty
        .inject(None, "", 1, usize::MAX, common::unavailable("500"));
    let e = submit(&w.process()).await.unwrap_err();
    assert!(
        matches!(e, SubmitError::Storage(StoreError::Unavailable(_))),
        "{e:?}"
    );
    assert!(e.is_retryable());
    assert!(w.bucket.is_empty());
    assert_eq!(w.faulty.calls().len(), 5, "bounded: max_attempts");
}

#[tokio::test]
async fn a_412_is_never_retried_blindly() {
    let w = World::new();
    submit(&w.restarted()).await.unwrap();
    w.faulty.reset_log();
    submit(&w.process()).await.unwrap();
    let creates = w
        .faulty
        .calls()
        .iter()
        .filter(|c| c.op == Op::PutCreate)
        .count();
    assert_eq!(creates, 1);
}

/// A `creating` record whose submit died right after writing it.
async fn interrupted(w: &World) -> idempotent_submit::testing::protocol::Record {
    w.fault_once(Op::PutCreate, "idempotency/", Fault::CrashAfter);
    submit(&w.process()).await.unwrap_err();
    w.record("k").await
}
