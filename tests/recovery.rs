//! Crashes, lost answers, retries and the finish deadline, with the
//! fault-injecting store and the injectable clock; and request counts.

use crate::common;

use std::sync::Arc;

use crate::common::World;
use chrono::{DateTime, Duration, SecondsFormat, Utc};
use futures::FutureExt;
use idempotent_submit::protocol::{Record, RecordOutcome, RecordStatus, TaskLocation};
use idempotent_submit::store::{Fault, FaultyStore, ObjectMeta, Op, PutMode, Store, StoreError};
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
        self.bucket
            .put(
                &rec.task_key,
                serde_json::to_vec(&task).unwrap().into(),
                PutMode::Update(etag),
            )
            .await
            .unwrap();
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

/// A submit that wrote its record and its task, and died before its marker
/// landed (the marker's first attempt failed; the process died before the
/// retry). A new world over the same bucket, with a fresh call log.
async fn died_before_the_marker() -> World {
    let w = World::new();
    w.faulty.inject(
        Some(Op::Put),
        "ready/",
        1,
        1,
        Fault::Fail(StoreError::Unavailable("503".into())),
    );
    w.faulty
        .inject(Some(Op::PutCreate), "tasks/", 1, 1, Fault::CrashAfter);
    submit(&w.process()).await.unwrap_err();
    assert_eq!(w.count("tasks/"), 1);
    assert_eq!(w.count("ready/"), 0, "the crash came before the marker");
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
    w.faulty
        .inject(Some(Op::PutCreate), "idempotency/", 1, 1, Fault::CrashAfter);
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
    w.faulty
        .inject(Some(Op::Put), "ready/", 1, 1, Fault::CrashBefore);
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

#[tokio::test]
async fn a_lost_answer_to_our_own_record_write_is_recognized_by_write_id() {
    let w = World::new();
    w.faulty.inject(
        Some(Op::PutCreate),
        "idempotency/",
        1,
        1,
        Fault::FailAfter(StoreError::Unavailable("connection reset".into())),
    );
    let r = submit(&w.process()).await.unwrap();
    assert!(r.created(), "our own write, retried, is still our 201");
    assert_eq!(w.count("tasks/"), 1);
    assert_eq!(w.count("ready/"), 1);
    assert_eq!(w.record("k").await.task_id, r.task_id);
}

#[tokio::test]
async fn a_lost_answer_to_the_task_write_still_creates_one_task() {
    let w = World::new();
    w.faulty.inject(
        Some(Op::PutCreate),
        "tasks/",
        1,
        1,
        Fault::FailAfter(StoreError::Unavailable("timeout".into())),
    );
    let r = submit(&w.process()).await.unwrap();
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
    w.faulty.inject(
        Some(Op::Put),
        "ready/",
        1,
        1,
        Fault::FailAfter(StoreError::Unavailable("timeout".into())),
    );
    w.clock.advance(common::settings().stale_creating_after);
    let outcome = w
        .process()
        .engine()
        .sweep_record(&w.record_key("k"), false, None)
        .await;
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
    w.faulty.inject(
        Some(Op::Put),
        "ready/",
        1,
        1,
        Fault::Fail(StoreError::Unavailable("503 SlowDown".into())),
    );
    w.faulty.inject(
        Some(Op::PutCreate),
        "tasks/",
        1,
        1,
        Fault::Fail(StoreError::Unavailable("500".into())),
    );
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
    w.faulty
        .inject(Some(Op::PutCreate), "idempotency/", 1, 1, Fault::Hang);
    let r = submit(&w.process()).await.unwrap();
    assert!(r.created());
}

#[tokio::test]
async fn storage_that_keeps_failing_is_a_retryable_error_never_a_success() {
    let w = World::new();
    w.faulty.inject(
        None,
        "",
        1,
        usize::MAX,
        Fault::Fail(StoreError::Unavailable("500".into())),
    );
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

// ---- the finish deadline ----

/// A `creating` record whose submit died right after writing it.
async fn interrupted(w: &World) -> idempotent_submit::protocol::Record {
    w.faulty
        .inject(Some(Op::PutCreate), "idempotency/", 1, 1, Fault::CrashAfter);
    submit(&w.process()).await.unwrap_err();
    w.record("k").await
}

#[tokio::test]
async fn a_marker_that_landed_without_its_task_gets_its_task_from_the_next_submit() {
    // The first submit sends its task and marker at once; the task's PUT is
    // refused, the marker lands. The next submit finds the marker and no
    // task: the task is what is missing, and it writes it (the marker, there
    // already, is not written again).
    let w = World::new();
    w.faulty.inject(
        Some(Op::PutCreate),
        "tasks/",
        1,
        1,
        Fault::Fail(StoreError::Fatal("403".into())),
    );
    submit(&w.process()).await.unwrap_err();
    assert_eq!((w.count("tasks/"), w.keys("ready/").len()), (0, 1));
    let rec = w.record("k").await;
    let before = w.faulty.calls().len();
    let r = submit(&w.process()).await.unwrap();
    assert_eq!(r.task_id, rec.task_id);
    assert_eq!(w.count("tasks/"), 1);
    assert_eq!(w.task("k").await.0["status"], "pending");
    let puts = |op: Op, prefix: &str| {
        w.faulty.calls()[before..]
            .iter()
            .filter(|c| c.op == op && c.key.starts_with(prefix))
            .count()
    };
    assert_eq!(
        (puts(Op::PutCreate, "tasks/"), puts(Op::Put, "ready/")),
        (1, 0)
    );
}

#[tokio::test]
async fn a_record_that_is_gone_at_every_read_is_given_up_after_six_rounds_as_retryable() {
    // Every claim meets a record (412) that is gone when read (404), as if a
    // sweeper deleted each one in between: the submit starts over six times,
    // then answers a retryable error, having written nothing. (The 412s stop
    // after 50, so a submit that never gave up would end with a task.)
    let w = World::new();
    w.faulty.inject(
        Some(Op::PutCreate),
        "idempotency/",
        1,
        50,
        Fault::Fail(StoreError::PreconditionFailed),
    );
    w.faulty.inject(
        Some(Op::Get),
        "idempotency/",
        1,
        usize::MAX,
        Fault::Fail(StoreError::NotFound),
    );
    let e = submit(&w.process()).await.unwrap_err();
    assert!(
        matches!(&e, SubmitError::Storage(StoreError::Unavailable(m)) if m.contains("kept changing")),
        "{e:?}"
    );
    assert!(e.is_retryable());
    let calls = w.faulty.calls();
    let count = |op: Op| {
        calls
            .iter()
            .filter(|c| c.op == op && c.key.starts_with("idempotency/"))
            .count()
    };
    assert_eq!((count(Op::PutCreate), count(Op::Get)), (6, 6));
    assert_eq!((w.count("tasks/"), w.count("idempotency/")), (0, 0));
}

#[tokio::test]
async fn a_creating_record_is_finished_just_before_its_deadline() {
    let w = World::new();
    let rec = interrupted(&w).await;
    // Just before, by more than the uncertainty of S3's clock: its `Date`
    // has whole seconds, so S3's time is known to within one.
    w.clock.advance(Duration::seconds(2400 - 2));
    let r = submit(&w.restarted()).await.unwrap();
    assert_eq!(r.task_id, rec.task_id);
    assert_eq!(w.count("tasks/"), 1);
}

#[tokio::test]
async fn within_the_uncertainty_of_s3s_clock_before_the_deadline_nothing_is_written() {
    let w = World::new();
    let rec = interrupted(&w).await;
    // One second before the deadline by our clock, S3's may already be past
    // it (its dates have whole seconds): the submit takes the safe side.
    w.clock.advance(Duration::seconds(2400 - 1));
    let before = w.bucket.keys();
    match submit(&w.restarted()).await.unwrap_err() {
        SubmitError::Undetermined {
            task_id,
            retry_after,
        } => {
            assert_eq!(task_id, rec.task_id);
            assert_eq!(retry_after.as_secs(), 15 * 60 + 1);
        }
        other => panic!("expected undetermined, got {other:?}"),
    }
    assert_eq!(w.bucket.keys(), before);
}

#[tokio::test]
async fn just_after_the_deadline_a_taskless_creating_record_is_undetermined_and_nothing_is_written()
{
    let w = World::new();
    let rec = interrupted(&w).await;
    w.clock.advance(Duration::seconds(2400 + 1));
    let before = w.bucket.keys();
    let e = submit(&w.restarted()).await.unwrap_err();
    match e {
        SubmitError::Undetermined {
            task_id,
            retry_after,
        } => {
            assert_eq!(task_id, rec.task_id);
            assert_eq!(retry_after.as_secs(), 15 * 60 - 1);
        }
        other => panic!("expected undetermined, got {other:?}"),
    }
    assert!(e.is_retryable());
    assert_eq!(w.bucket.keys(), before);
}

#[tokio::test]
async fn long_after_the_deadline_a_taskless_creating_record_answers_missing_and_writes_nothing() {
    let w = World::new();
    let rec = interrupted(&w).await;
    w.clock.advance(Duration::seconds(2400 + 15 * 60));
    let before = w.bucket.keys();
    let r = submit(&w.restarted()).await.unwrap();
    assert_eq!(r.task_id, rec.task_id);
    assert_eq!(r.status, "missing");
    assert!(r.replayed);
    assert_eq!(w.bucket.keys(), before);
    assert_eq!(
        w.record("k").await.status,
        Some(RecordStatus::Creating),
        "left as it is until it expires"
    );
}

#[tokio::test]
async fn past_the_deadline_a_creating_record_whose_task_exists_answers_its_status() {
    let w = World::new();
    // The submit answered; the sweeper never came.
    submit(&w.process()).await.unwrap();
    w.clock.advance(Duration::seconds(2400 + 1));
    let before = w.bucket.keys();
    let r = submit(&w.restarted()).await.unwrap();
    assert_eq!(r.status, "pending");
    assert_eq!(w.bucket.keys(), before);
}

#[tokio::test]
async fn a_task_deleted_after_the_deadline_is_never_written_again() {
    let w = World::new();
    submit(&w.process()).await.unwrap();
    let rec = w.record("k").await;
    w.clock.advance(Duration::hours(1));
    w.bucket.delete(&rec.task_key, None).await.unwrap();
    let r = submit(&w.restarted()).await.unwrap();
    assert_eq!(r.task_id, rec.task_id);
    assert_eq!(r.status, "missing");
    assert_eq!(w.count("tasks/"), 0);
}

#[tokio::test]
async fn an_expired_creating_record_is_replaced_not_finished() {
    let w = World::new();
    let rec = interrupted(&w).await;
    w.clock.advance(Duration::days(31));
    let r = submit(&w.restarted()).await.unwrap();
    assert!(r.created());
    assert_ne!(r.task_id, rec.task_id);
    assert_eq!(w.count("tasks/"), 1);
}

#[tokio::test]
async fn an_expired_record_deleted_before_its_replacement_lands_is_claimed_again_whether_the_store_says_404_or_412()
 {
    use idempotent_submit::store::Behaviour;
    for behaviour in [Behaviour::default(), Behaviour::seaweedfs()] {
        let clock = idempotent_submit::ManualClock::at_epoch();
        let w = World::over(
            clock.clone(),
            common::memory_store(&clock).with_behaviour(behaviour),
        );
        let old = w
            .restarted()
            .submit("t", json!({"n": 1}))
            .idempotency_key("k")
            .idempotency_ttl(Duration::hours(1))
            .await
            .unwrap();
        w.clock.advance(Duration::hours(2));
        // The sweeper deletes the expired record between this submit's read
        // of it and its If-Match: S3 answers 404, SeaweedFS 412.
        let bucket = w.bucket.clone();
        let racing = FaultyStore::new(common::Wrapped(common::Intercept {
            inner: w.bucket.clone(),
            hook: move |op: Op, key: &str| {
                if op == Op::PutUpdate && key.starts_with("idempotency/") {
                    bucket.delete(key, None).now_or_never();
                }
                None
            },
        }));
        let q = Queue::with_clock(
            racing.clone(),
            Arc::new(w.clock.clone()) as Arc<dyn Clock>,
            common::settings(),
        );
        let r = submit(&q).await.unwrap();
        assert!(r.created() && r.task_id != old.task_id, "{behaviour:?}");
        let answer = racing
            .calls()
            .into_iter()
            .find(|c| c.op == Op::PutUpdate)
            .and_then(|c| c.error);
        let expected = if behaviour == Behaviour::default() {
            StoreError::NotFound
        } else {
            StoreError::PreconditionFailed
        };
        assert_eq!(answer, Some(expected), "{behaviour:?}");
        assert_eq!(w.record("k").await.task_id, r.task_id);
        // The old task and the new one: a new life, a new task.
        assert_eq!(w.count("tasks/"), 2);
    }
}

/// A later submit whose every write of kind `op` under `prefix` takes `by`
/// (the clock moves on) and fails retryably: its error, and how many of those
/// writes it attempted.
async fn submit_with_slow_writes(
    w: &World,
    op: Op,
    prefix: &'static str,
    by: Duration,
) -> (SubmitError, usize) {
    let clock = w.clock.clone();
    let slow = FaultyStore::new(common::Wrapped(common::Intercept {
        inner: w.bucket.clone(),
        hook: move |o: Op, key: &str| {
            (o == op && key.starts_with(prefix)).then(|| {
                clock.advance(by);
                StoreError::Unavailable("503 SlowDown".into())
            })
        },
    }));
    let q = Queue::with_clock(
        slow.clone(),
        Arc::new(w.clock.clone()) as Arc<dyn Clock>,
        common::settings(),
    );
    let e = submit(&q).await.unwrap_err();
    let writes = slow
        .calls()
        .iter()
        .filter(|c| c.op == op && c.key.starts_with(prefix))
        .count();
    (e, writes)
}

/// A later submit of the interrupted record starts 10 s before its finish
/// deadline; its first write of kind `op` under `prefix` takes 20 s and fails,
/// so a retry would go after the deadline. Checks that it is refused: one
/// attempt only, undetermined until the deadline + 15 minutes.
async fn refused_at_the_deadline(w: &World, op: Op, prefix: &'static str) {
    let rec = w.record("k").await;
    w.clock.advance(Duration::seconds(2400 - 10));
    let (e, writes) = submit_with_slow_writes(w, op, prefix, Duration::seconds(20)).await;
    // Refused 10 s past the deadline: undetermined until a late write can no
    // longer land, 15 minutes after the deadline. (A 200 needs both objects.)
    assert!(
        matches!(e, SubmitError::Undetermined { task_id, retry_after }
            if task_id == rec.task_id && retry_after.as_secs() == 15 * 60 - 10),
        "{e:?}"
    );
    assert_eq!(writes, 1, "no retry after the deadline");
    assert_eq!(w.record("k").await.status, Some(RecordStatus::Creating));
}

#[tokio::test]
async fn a_finish_cut_short_by_the_operations_own_deadline_is_retryable_not_undetermined() {
    // A later submit of an interrupted record, long before its finish
    // deadline: its task write takes 30 s and fails, past the operation's 25
    // s, so no retry goes. Nothing forbids a write later: the answer is the
    // operation's own retryable error, not "undetermined until the finish
    // deadline and its late writes are over".
    let w = World::new();
    let rec = interrupted(&w).await;
    let (e, writes) =
        submit_with_slow_writes(&w, Op::PutCreate, "tasks/", Duration::seconds(30)).await;
    assert!(matches!(e, SubmitError::DeadlineExceeded), "{e:?}");
    assert!(e.is_retryable());
    assert_eq!(writes, 1, "no retry after the operation's deadline");
    let now = w.record("k").await;
    assert_eq!(
        (now.status, now.task_id),
        (Some(RecordStatus::Creating), rec.task_id)
    );
}

#[tokio::test]
async fn no_task_write_is_attempted_once_the_finish_deadline_has_passed_even_by_a_retry() {
    let w = World::new();
    interrupted(&w).await;
    refused_at_the_deadline(&w, Op::PutCreate, "tasks/").await;
    assert_eq!(w.count("tasks/"), 0);
}

#[tokio::test]
async fn no_marker_write_is_attempted_once_the_finish_deadline_has_passed_even_by_a_retry() {
    let w = World::new();
    // The task landed; the marker did not, and the submit died.
    w.faulty.inject(
        Some(Op::Put),
        "ready/",
        1,
        1,
        Fault::Fail(StoreError::Unavailable("503".into())),
    );
    w.faulty
        .inject(Some(Op::PutCreate), "tasks/", 1, 1, Fault::CrashAfter);
    submit(&w.process()).await.unwrap_err();
    assert_eq!(w.count("tasks/"), 1);
    refused_at_the_deadline(&w, Op::Put, "ready/").await;
    assert_eq!(w.count("ready/"), 0);
}

// ---- the queue's workers: the ready index stays true (guarantee 10) ----

#[tokio::test]
async fn a_replay_of_a_key_whose_task_a_worker_has_claimed_writes_no_marker_and_answers_its_status()
{
    let w = World::new();
    let first = submit(&w.restarted()).await.unwrap();
    w.worker_claims().await;
    assert!(w.keys("ready/").is_empty());
    let before = w.bucket.snapshot();
    let r = submit(&w.process()).await.unwrap();
    assert_eq!(r.task_id, first.task_id);
    assert_eq!(r.status, "running");
    assert!(r.replayed && !r.recovered);
    assert_eq!(queue_writes(&w.faulty), []);
    assert_eq!(w.bucket.snapshot(), before, "byte for byte");
    // The replay's 4 requests: PUT (412), GET record, GET task + HEAD
    // marker; the task is not the record's `pending_task` any more, so the
    // missing marker is not written.
    assert_eq!(w.faulty.calls().len(), 4);

    // Run to completion: a replay answers that, and writes nothing either.
    let (mut task, etag) = w.task("k").await;
    task["status"] = json!("completed");
    w.bucket
        .put(
            &r.task_key,
            serde_json::to_vec(&task).unwrap().into(),
            PutMode::Update(etag),
        )
        .await
        .unwrap();
    w.faulty.reset_log();
    let before = w.bucket.snapshot();
    let r = submit(&w.process()).await.unwrap();
    assert_eq!(r.status, "completed");
    assert_eq!(queue_writes(&w.faulty), []);
    assert_eq!(w.bucket.snapshot(), before, "byte for byte");
}

#[tokio::test]
async fn the_sweepers_event_for_a_record_whose_task_a_worker_has_claimed_writes_nothing() {
    let w = World::new();
    submit(&w.restarted()).await.unwrap();
    let written = w.record_meta("k").await;
    w.worker_claims().await;
    let before = w.bucket.snapshot();
    assert_eq!(w.logged_sweep_event("k").await, RecordOutcome::Nothing);
    assert_eq!(queue_writes(&w.faulty), []);
    assert_eq!(w.bucket.snapshot(), before, "byte for byte");
    // GET record, GET task + HEAD marker.
    assert_eq!(w.faulty.calls().len(), 3);
    assert!(w.keys("ready/").is_empty());
    assert_eq!(w.record_meta("k").await.1.etag, written.1.etag);
}

/// A store whose first marker PUT reaches the bucket just after a worker has
/// claimed the task (found by scanning `tasks/`, as buquet's worker does when
/// the index is empty): the claim lands between a finisher's read of the task
/// and its marker. The worker deletes the task's marker after its claim, but
/// there is none yet.
fn racing_a_worker(
    w: &World,
    task_key: &str,
    claimed_task: bytes::Bytes,
) -> FaultyStore<impl Store + Clone> {
    let bucket = w.bucket.clone();
    let task_key = task_key.to_owned();
    let fired = Arc::new(std::sync::atomic::AtomicBool::new(false));
    FaultyStore::new(common::Wrapped(common::Intercept {
        inner: w.bucket.clone(),
        hook: move |op: Op, key: &str| {
            if op == Op::Put
                && key.starts_with("ready/")
                && !fired.swap(true, std::sync::atomic::Ordering::SeqCst)
            {
                let cur = bucket.get(&task_key).now_or_never()?.ok()?;
                bucket
                    .put(
                        &task_key,
                        claimed_task.clone(),
                        PutMode::Update(cur.meta.etag),
                    )
                    .now_or_never()?
                    .ok()?;
            }
            None
        },
    }))
}

#[tokio::test]
async fn a_finisher_whose_marker_lands_after_a_worker_claimed_the_task_removes_its_marker() {
    for finisher in ["a replay", "the sweeper"] {
        let w = died_before_the_marker().await;
        let written = w.record_meta("k").await;
        let (task, _) = w.task("k").await;
        let f = racing_a_worker(&w, &written.0.task_key, claimed(&task));
        let q = Queue::with_clock(f.clone(), Arc::new(w.clock.clone()), common::settings());
        if finisher == "a replay" {
            let r = submit(&q).await.unwrap();
            assert_eq!(r.status, "running", "the status read after the marker");
        } else {
            w.clock.advance(common::settings().stale_creating_after);
            let outcome = q
                .engine()
                .sweep_record(&w.record_key("k"), false, None)
                .await;
            assert_eq!(outcome, RecordOutcome::Finished);
        }
        assert_eq!(w.task("k").await.0["status"], "running", "{finisher}");
        // Its marker landed, the task read again was no longer pending, and
        // the marker went: no marker names a task that cannot be claimed.
        assert!(
            w.keys("ready/").is_empty(),
            "{finisher}: {:?}",
            w.keys("ready/")
        );
        let writes = queue_writes(&f);
        assert_eq!(writes.len(), 2, "{finisher}: {writes:?}");
        assert_eq!((writes[0].0, writes[1].0), (Op::Put, Op::Delete));
        assert_eq!(writes[0].1, writes[1].1, "{finisher}: {writes:?}");
        let (rec, meta) = w.record_meta("k").await;
        assert_eq!(rec.status, Some(RecordStatus::Creating));
        assert_eq!(
            meta.etag, written.1.etag,
            "{finisher}: the record as written"
        );
    }
}

#[tokio::test]
async fn a_retried_task_gets_no_marker_of_ours_in_its_old_minute() {
    let w = World::new();
    submit(&w.restarted()).await.unwrap();
    let first = w.keys("ready/");
    w.worker_claims().await;
    let retried = w.worker_retries().await;
    assert_eq!(first.len(), 1);
    assert_ne!(first[0], retried, "another minute");
    let before = w.bucket.snapshot();
    let r = submit(&w.process()).await.unwrap();
    assert_eq!(r.status, "pending");
    assert_eq!(w.keys("ready/"), std::slice::from_ref(&retried));
    assert_eq!(w.logged_sweep_event("k").await, RecordOutcome::Nothing);
    assert_eq!(w.keys("ready/"), [retried]);
    assert_eq!(queue_writes(&w.faulty), []);
    assert_eq!(w.bucket.snapshot(), before, "byte for byte");
}

#[tokio::test]
async fn a_marker_left_for_a_task_a_worker_has_claimed_is_removed_by_the_next_finisher() {
    let w = World::new();
    submit(&w.restarted()).await.unwrap();
    let marker = w.keys("ready/").pop().unwrap();
    w.worker_claims().await;
    // Left by an earlier version of this service, which wrote a marker
    // whenever its HEAD found none, or by a finisher that died before it
    // read the task again.
    w.bucket
        .put(&marker, bytes::Bytes::new(), PutMode::Overwrite)
        .await
        .unwrap();
    let r = submit(&w.process()).await.unwrap();
    assert_eq!(r.status, "running");
    assert!(w.keys("ready/").is_empty());
    assert_eq!(queue_writes(&w.faulty), [(Op::Delete, marker)]);
}

/// A bucket where a worker claims the task the moment it lands (found by
/// scanning `tasks/`), and the first marker PUT waits for that claim, then
/// is answered `late` after the task's: the marker lands beside a task
/// already taken. (The in-memory store answers at once, so the wait is what
/// orders them.)
#[derive(Clone)]
struct ClaimBeforeMarker {
    bucket: idempotent_submit::store::MemoryStore,
    clock: idempotent_submit::ManualClock,
    late: Duration,
    claimed: Arc<tokio::sync::Notify>,
    waited: Arc<std::sync::atomic::AtomicBool>,
}

#[async_trait::async_trait]
impl common::Hooks for ClaimBeforeMarker {
    type Inner = idempotent_submit::store::MemoryStore;

    fn inner(&self) -> &idempotent_submit::store::MemoryStore {
        &self.bucket
    }

    async fn before(&self, call: &common::Call<'_>) -> Result<(), StoreError> {
        if call.op == Op::Put
            && call.key.starts_with("ready/")
            && !self.waited.swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            self.claimed.notified().await;
            self.clock.advance(self.late);
        }
        Ok(())
    }

    async fn after(&self, call: &common::Call<'_>, ok: bool) {
        if call.op == Op::PutCreate && call.key.starts_with("tasks/") && ok {
            let cur = self.bucket.get(call.key).await.unwrap();
            let task: Value = serde_json::from_slice(&cur.body).unwrap();
            self.bucket
                .put(call.key, claimed(&task), PutMode::Update(cur.meta.etag))
                .await
                .unwrap();
            // A permit kept if the marker has not asked yet.
            self.claimed.notify_one();
        }
    }
}

fn marker_held_past_a_claim(w: &World, late: Duration) -> FaultyStore<impl Store + Clone> {
    FaultyStore::new(common::Wrapped(ClaimBeforeMarker {
        bucket: w.bucket.clone(),
        clock: w.clock.clone(),
        late,
        claimed: Arc::default(),
        waited: Arc::default(),
    }))
}

#[tokio::test]
async fn a_first_submits_marker_answered_late_beside_its_task_is_checked_and_removed_after_a_claim()
{
    let w = World::new();
    let f = marker_held_past_a_claim(&w, Duration::seconds(1));
    let r = submit(&w.queue_over(f.clone())).await.unwrap();
    assert!(!r.replayed);
    assert_eq!(
        w.task("k").await.0["status"],
        "running",
        "the worker's claim"
    );
    // The marker came a second after the task: one GET of the task, which
    // the worker has taken, and the marker goes.
    assert_eq!(r.status, "running", "the status read after the marker");
    assert!(w.keys("ready/").is_empty(), "{:?}", w.keys("ready/"));
    let ops: Vec<Op> = f.calls().iter().map(|c| c.op).collect();
    assert_eq!(ops.len(), 5, "{ops:?}");
    assert_eq!(ops[3..], [Op::Get, Op::Delete], "{ops:?}");
}

#[tokio::test]
async fn a_first_submits_marker_answered_with_its_task_is_not_read_again_and_a_claim_between_is_left_to_the_records_event()
 {
    let w = World::new();
    let f = marker_held_past_a_claim(&w, Duration::zero());
    let r = submit(&w.queue_over(f.clone())).await.unwrap();
    // Both answered at once: the first submit's three requests, nothing
    // more (what docs/protocol.md leaves open). The claim slipped in between
    // all the same, so the marker is stale.
    assert_eq!(f.calls().len(), 3);
    assert_eq!(r.status, "pending");
    let marker = w.keys("ready/");
    assert_eq!(marker.len(), 1);
    assert_eq!(w.task("k").await.0["status"], "running");
    // The record's event removes it, as any finisher's check does.
    assert_eq!(w.sweep_event("k").await, RecordOutcome::Nothing);
    assert!(w.keys("ready/").is_empty());
}

#[tokio::test]
async fn a_keyless_submits_marker_answered_late_beside_a_claim_is_checked_and_removed() {
    // Without a record no sweeper looks at the task again: the submit's
    // own re-read is the only one.
    let w = World::new();
    let f = marker_held_past_a_claim(&w, Duration::seconds(1));
    let r = w
        .queue_over(f.clone())
        .submit("t", json!({"n": 1}))
        .await
        .unwrap();
    let task = w.keys("tasks/");
    assert_eq!(task.len(), 1);
    let t: Value = serde_json::from_slice(&w.bucket.get(&task[0]).await.unwrap().body).unwrap();
    assert_eq!(t["status"], "running", "the worker's claim");
    assert_eq!(r.status, "running", "the status read after the marker");
    assert!(w.keys("ready/").is_empty(), "{:?}", w.keys("ready/"));
    let ops: Vec<Op> = f.calls().iter().map(|c| c.op).collect();
    assert_eq!(ops.len(), 4, "{ops:?}");
    assert_eq!(ops[2..], [Op::Get, Op::Delete], "{ops:?}");
}

#[tokio::test]
async fn a_keyless_submits_marker_answered_with_its_task_is_not_read_again() {
    let w = World::new();
    let f = marker_held_past_a_claim(&w, Duration::zero());
    let r = w
        .queue_over(f.clone())
        .submit("t", json!({"n": 1}))
        .await
        .unwrap();
    // Two requests, one round trip: what docs/protocol.md leaves open.
    assert_eq!(f.calls().len(), 2);
    assert_eq!(r.status, "pending");
    assert_eq!(w.count("ready/"), 1);
}

#[tokio::test]
async fn a_keyless_submits_marker_that_took_a_retry_is_checked() {
    let w = World::new();
    w.faulty.inject(
        Some(Op::Put),
        "ready/",
        1,
        1,
        Fault::Fail(StoreError::Unavailable("503".into())),
    );
    let r = w.process().submit("t", json!({"n": 1})).await.unwrap();
    // Nobody took the task: the marker stays, after one GET.
    assert_eq!(r.status, "pending");
    assert_eq!(w.count("ready/"), 1);
    let ops: Vec<Op> = w.faulty.calls().iter().map(|c| c.op).collect();
    assert_eq!(ops.iter().filter(|o| **o == Op::Get).count(), 1, "{ops:?}");
    assert!(!ops.contains(&Op::Delete), "{ops:?}");
}

/// One scheduled pass as `q`'s process would run it.
async fn pass_of(q: Queue, dry_run: bool) -> idempotent_submit::protocol::SweepSummary {
    q.engine()
        .sweep(&idempotent_submit::protocol::SweepOptions {
            dry_run,
            ..Default::default()
        })
        .await
        .unwrap()
}

#[tokio::test]
async fn a_marker_that_lands_after_every_finisher_is_removed_by_the_pass_once_it_has_stood_for_the_late_write_margin()
 {
    let w = World::new();
    submit(&w.restarted()).await.unwrap();
    let written = w.record_meta("k").await;
    let marker = w.keys("ready/").pop().unwrap();
    // Its event and a first pass in its finish window: all there, untouched.
    assert_eq!(w.sweep_event("k").await, RecordOutcome::Nothing);
    assert_eq!(pass_of(w.restarted(), false).await.reads, 1);
    w.worker_claims().await;
    // A marker PUT given up on by its client lands later, after the claim:
    // S3 may apply a request up to 15 minutes after it was sent.
    w.clock.advance(Duration::minutes(5));
    w.bucket
        .put(&marker, bytes::Bytes::new(), PutMode::Overwrite)
        .await
        .unwrap();
    let landed = w.clock.now();
    // Until it has stood for the late-write margin (15 minutes), no pass
    // judges it.
    w.clock.set(landed + Duration::minutes(14));
    let s = pass_of(w.restarted(), false).await;
    assert_eq!((s.markers_deleted, s.errors), (0, 0), "{s:?}");
    assert_eq!(w.keys("ready/"), std::slice::from_ref(&marker));
    // Then the pass whose window its age crosses reads its task and removes
    // it. A dry run reads the same and removes nothing.
    w.clock.set(landed + Duration::minutes(16));
    let dry = pass_of(w.restarted(), true).await;
    assert_eq!((dry.markers_deleted, dry.errors), (1, 0), "{dry:?}");
    assert_eq!(w.keys("ready/"), std::slice::from_ref(&marker));
    let s = pass_of(w.restarted(), false).await;
    assert_eq!(
        (s.markers_deleted, s.errors, s.finished),
        (1, 0, 0),
        "{s:?}"
    );
    assert!(w.keys("ready/").is_empty(), "{:?}", w.keys("ready/"));
    // The task and the record as they were; the record not read at all.
    assert_eq!(s.reads, 0, "{s:?}");
    assert_eq!(w.task("k").await.0["status"], "running");
    assert_eq!(w.record_meta("k").await.1.etag, written.1.etag);
}

#[tokio::test]
async fn a_keyless_submits_marker_that_lands_after_a_claim_is_removed_by_the_pass() {
    // No record, no due message: before the scan, nothing ever looked at
    // such a marker again (the chaos world counted them).
    let w = World::new();
    let r = w.restarted().submit("t", json!({"n": 1})).await.unwrap();
    let marker = w.keys("ready/").pop().unwrap();
    let task_key = w.keys("tasks/").pop().unwrap();
    let (task, etag) = {
        let o = w.bucket.get(&task_key).await.unwrap();
        (
            serde_json::from_slice::<Value>(&o.body).unwrap(),
            o.meta.etag,
        )
    };
    w.bucket
        .put(&task_key, claimed(&task), PutMode::Update(etag))
        .await
        .unwrap();
    // The worker deleted the marker it claimed by; a late PUT of it lands.
    w.bucket.delete(&marker, None).await.unwrap();
    w.clock.advance(Duration::minutes(1));
    w.bucket
        .put(&marker, bytes::Bytes::new(), PutMode::Overwrite)
        .await
        .unwrap();
    w.clock.advance(Duration::minutes(16));
    let s = pass_of(w.restarted(), false).await;
    assert_eq!((s.markers_deleted, s.errors), (1, 0), "{s:?}");
    assert!(w.keys("ready/").is_empty());
    assert_eq!(
        w.keys("tasks/"),
        [task_key],
        "task {} left as it is",
        r.task_id
    );
}

#[tokio::test]
async fn a_marker_whose_task_was_never_written_goes_at_the_orphan_age_and_not_before() {
    let w = World::new();
    // A marker that landed without its task, and whose task no writer can
    // write any more once its record's finish window and late-write margin
    // have passed (from the marker's own write at the earliest).
    let id = uuid::Uuid::new_v4().hyphenated().to_string();
    let minute = w.clock.now().timestamp().div_euclid(60);
    let marker = format!("ready/{}/{minute:010}/{id}", &id[..1]);
    w.bucket
        .put(&marker, bytes::Bytes::new(), PutMode::Overwrite)
        .await
        .unwrap();
    let landed = w.clock.now();
    // At the late-write margin: its task may still come; it stays.
    w.clock.set(landed + Duration::minutes(16));
    let s = pass_of(w.restarted(), false).await;
    assert_eq!((s.markers_deleted, s.errors), (0, 0), "{s:?}");
    assert_eq!(w.keys("ready/"), std::slice::from_ref(&marker));
    // Past the finish window (40 min), the margin (15) and an operation's
    // length: gone.
    w.clock.set(landed + Duration::minutes(56));
    let s = pass_of(w.restarted(), false).await;
    assert_eq!((s.markers_deleted, s.errors), (1, 0), "{s:?}");
    assert!(w.keys("ready/").is_empty());
}

#[tokio::test]
async fn the_pass_leaves_the_marker_of_a_task_no_worker_has_taken_and_reads_only_its_task() {
    let w = World::new();
    submit(&w.restarted()).await.unwrap();
    let written = w.record_meta("k").await;
    let mut before = w.bucket.snapshot();
    // Both of the marker's ages in one pass (a daily pass's case), and past
    // the record's finish window: the record is not read.
    w.clock.set(written.1.last_modified + Duration::minutes(56));
    let s = pass_of(w.process(), false).await;
    assert_eq!((s.reads, s.markers_deleted, s.errors), (0, 0, 0), "{s:?}");
    // LISTs, the task's GET, and no write but the checkpoint's.
    let writes = w.faulty.calls().into_iter().filter(|c| c.op.is_write());
    assert!(writes.clone().all(|c| c.key.starts_with("sweeper/")));
    assert!(writes.count() > 0, "its checkpoint");
    let reads: Vec<(Op, String)> = w
        .faulty
        .calls()
        .into_iter()
        .filter(|c| !c.key.starts_with("sweeper/") && !c.op.is_write() && c.op != Op::List)
        .map(|c| (c.op, c.key.split('/').next().unwrap_or("").to_owned()))
        .collect();
    assert_eq!(reads, [(Op::Get, "tasks".into())]);
    let mut after = w.bucket.snapshot();
    after.retain(|(k, ..)| !k.starts_with("sweeper/"));
    before.retain(|(k, ..)| !k.starts_with("sweeper/"));
    assert_eq!(after, before, "byte for byte, but the checkpoint");
    // Judged once: a later pass reads nothing of it.
    w.clock.advance(Duration::hours(2));
    let s = pass_of(w.process(), false).await;
    let gets = w
        .faulty
        .calls()
        .into_iter()
        .filter(|c| c.op == Op::Get && c.key.starts_with("tasks/"))
        .count();
    assert_eq!((s.markers_deleted, gets), (0, 1), "{s:?}");
}

// ---- request counts (guarantee 8) ----

fn trips(w: &World) -> Vec<(Op, usize)> {
    w.faulty
        .calls()
        .iter()
        .map(|c| (c.op, c.round_trip))
        .collect()
}

#[tokio::test]
async fn a_new_submit_is_two_round_trips_and_three_requests() {
    let w = World::new();
    submit(&w.process()).await.unwrap();
    let ops = trips(&w);
    assert_eq!(ops.len(), 3, "{ops:?}");
    assert_eq!(w.faulty.round_trips(), 2, "{ops:?}");
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
    let ops = trips(&w);
    assert_eq!(ops.len(), 4, "{ops:?}");
    assert_eq!(w.faulty.round_trips(), 3, "{ops:?}");
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
    let ops = trips(&w);
    // PUT (412), GET record, GET task + HEAD marker (both 404), PUT task +
    // PUT marker: 6 requests in 4 round trips. No second read of the task:
    // this call created it, beside its marker, so no worker had it before.
    assert_eq!(ops.len(), 6, "{ops:?}");
    assert_eq!(w.faulty.round_trips(), 4, "{ops:?}");
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
    w.clock.advance(common::settings().stale_creating_after);
    let outcome = w
        .process()
        .engine()
        .sweep_record(&w.record_key("k"), false, None)
        .await;
    assert_eq!(outcome, RecordOutcome::Nothing);
    // GET record, then GET task + HEAD marker in parallel: 3 requests in 2
    // round trips, and no PUT (the record is not promoted any more).
    let ops = trips(&w);
    assert_eq!(ops.len(), 3, "{ops:?}");
    assert_eq!(w.faulty.round_trips(), 2, "{ops:?}");
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
    w.clock.advance(common::settings().stale_creating_after);
    let outcome = w
        .process()
        .engine()
        .sweep_record(&w.record_key("k"), false, None)
        .await;
    assert_eq!(outcome, RecordOutcome::Finished);
    // GET record, GET task + HEAD marker (both 404), PUT task + PUT marker:
    // 5 requests in 3 round trips, no record write. The task is not read
    // again: the sweeper created it beside its marker.
    let ops = trips(&w);
    assert_eq!(ops.len(), 5, "{ops:?}");
    assert_eq!(w.faulty.round_trips(), 3, "{ops:?}");
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

#[tokio::test(start_paused = true)]
async fn retries_wait_between_attempts() {
    let w = World::new();
    w.faulty.inject(
        Some(Op::PutCreate),
        "idempotency/",
        1,
        4,
        Fault::Fail(StoreError::Unavailable("503 SlowDown".into())),
    );
    let settings = idempotent_submit::Settings {
        retry: idempotent_submit::RetryPolicy {
            max_attempts: 5,
            base_delay: std::time::Duration::from_millis(100),
            max_delay: std::time::Duration::from_secs(1),
            attempt_timeout: std::time::Duration::from_secs(5),
        },
        ..common::settings()
    };
    let q = Queue::with_clock(w.faulty.clone(), Arc::new(w.clock.clone()), settings);
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
    let settings = idempotent_submit::Settings {
        retry: idempotent_submit::RetryPolicy {
            max_attempts: 5,
            base_delay: std::time::Duration::from_millis(100),
            max_delay: std::time::Duration::from_secs(1),
            attempt_timeout: std::time::Duration::from_secs(5),
        },
        ..common::settings()
    };
    let q = Queue::with_clock(w.faulty.clone(), Arc::new(w.clock.clone()), settings);
    let start = tokio::time::Instant::now();
    submit(&q).await.unwrap();
    assert_eq!(start.elapsed(), std::time::Duration::ZERO);
    assert_eq!(w.faulty.calls().len(), 3);
}
