//! Crashes, lost answers, retries and the finish deadline, with the
//! fault-injecting store and the injectable clock; and request counts.

mod common;

use std::sync::Arc;

use chrono::Duration;
use idempotent_submit::protocol::{RecordOutcome, RecordStatus};
use idempotent_submit::store::{Fault, FaultyStore, MemoryStore, Op, Store, StoreError};
use idempotent_submit::{Clock, ManualClock, Queue, SubmitError};
use serde_json::json;

struct World {
    clock: ManualClock,
    faulty: FaultyStore<MemoryStore>,
}

impl World {
    fn new() -> Self {
        let clock = ManualClock::at_epoch();
        let faulty = common::faulty(&clock);
        World { clock, faulty }
    }

    /// A process whose store calls go through the fault injector.
    fn process(&self) -> Queue {
        Queue::with_clock(
            self.faulty.clone(),
            Arc::new(self.clock.clone()),
            common::settings(),
        )
    }

    /// A fresh process after a crash: straight to the bucket.
    fn restarted(&self) -> Queue {
        Queue::with_clock(
            self.faulty.inner().clone(),
            Arc::new(self.clock.clone()),
            common::settings(),
        )
    }

    fn bucket(&self) -> &MemoryStore {
        self.faulty.inner()
    }

    fn count(&self, prefix: &str) -> usize {
        self.bucket()
            .keys()
            .iter()
            .filter(|k| k.starts_with(prefix))
            .count()
    }

    async fn record(&self) -> idempotent_submit::protocol::Record {
        self.restarted()
            .record("t", "k", None)
            .await
            .unwrap()
            .unwrap()
            .0
    }

    fn record_key(&self) -> String {
        self.bucket()
            .keys()
            .into_iter()
            .find(|k| k.starts_with("idempotency/"))
            .expect("a record")
    }

    /// The sweeper handles the record's S3 event, as the due queue delivers
    /// it: `STALE_CREATING_AFTER_SECONDS` after the write.
    async fn sweep_event(&self) -> RecordOutcome {
        self.clock.advance(common::settings().stale_creating_after);
        self.restarted()
            .engine()
            .sweep_record(&self.record_key(), false, None)
            .await
    }
}

async fn submit(q: &Queue) -> Result<idempotent_submit::Submitted, SubmitError> {
    q.submit("t", json!({"n": 1})).idempotency_key("k").await
}

/// After a crash at some step, the next submit answers the crashed submit's
/// task id; exactly one task and one marker exist; the record stays
/// `creating` until the sweeper's event promotes it.
async fn next_submit_recovers(w: &World) {
    let crashed = submit(&w.process()).await.unwrap_err();
    assert_eq!(crashed, SubmitError::Storage(StoreError::Crashed));
    assert!(w.faulty.crashed());
    let pending = w.record().await;
    assert_eq!(pending.status, Some(RecordStatus::Creating));
    assert!(pending.pending_task.is_some());

    let next = submit(&w.restarted()).await.unwrap();
    assert_eq!(next.task_id, pending.task_id);
    assert!(next.replayed && next.recovered == (w.count("tasks/") == 1));
    assert_eq!(next.status, "pending");
    assert_eq!(w.count("tasks/"), 1);
    assert_eq!(w.count("ready/"), 1);
    assert_eq!(
        w.record().await.status,
        Some(RecordStatus::Creating),
        "a submit never promotes"
    );
    // The record's event: both are there, so the sweeper only promotes.
    assert_eq!(w.sweep_event().await, RecordOutcome::Promoted);
    let rec = w.record().await;
    assert_eq!(rec.status, Some(RecordStatus::Ready));
    assert!(rec.pending_task.is_none());
    assert_eq!(rec.task_id, pending.task_id);
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
    let w = World::new();
    // The marker's first attempt fails, so the task lands first, then the
    // process dies before the marker's retry.
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
    let w2 = World {
        clock: w.clock.clone(),
        faulty: FaultyStore::new(w.bucket().clone()),
    };
    let next = submit(&w2.process()).await.unwrap();
    assert_eq!(next.task_id, w.record().await.task_id);
    assert!(next.recovered, "it wrote the missing marker");
    assert_eq!(w.count("tasks/"), 1);
    assert_eq!(w.count("ready/"), 1);
    // The finisher read the task, found the marker missing, and wrote only
    // the marker: no task write at all.
    let ops: Vec<(Op, String)> = w2
        .faulty
        .calls()
        .iter()
        .map(|c| (c.op, c.key.split('/').next().unwrap_or("").to_owned()))
        .collect();
    assert!(!ops.contains(&(Op::PutCreate, "tasks".into())), "{ops:?}");
    assert!(ops.contains(&(Op::Put, "ready".into())), "{ops:?}");
    assert_eq!(w.sweep_event().await, RecordOutcome::Promoted);
    assert_eq!(w.record().await.status, Some(RecordStatus::Ready));
}

#[tokio::test]
async fn a_crash_before_the_marker_is_finished_by_the_sweeper_event_alone() {
    let w = World::new();
    w.faulty
        .inject(Some(Op::Put), "ready/", 1, 1, Fault::CrashBefore);
    submit(&w.process()).await.unwrap_err();
    assert_eq!(w.count("ready/"), 0);
    // Nobody submits the key again: the sweeper writes what is missing
    // (the task may or may not have landed before the crash), then promotes.
    let outcome = w.sweep_event().await;
    assert!(
        matches!(outcome, RecordOutcome::Finished | RecordOutcome::Promoted),
        "{outcome:?}"
    );
    assert_eq!(w.count("tasks/"), 1);
    assert_eq!(w.count("ready/"), 1);
    assert_eq!(w.record().await.status, Some(RecordStatus::Ready));
}

#[tokio::test]
async fn a_submit_that_answered_leaves_the_record_creating_with_task_and_marker_in_place() {
    let w = World::new();
    let r = submit(&w.process()).await.unwrap();
    assert!(r.created());
    assert_eq!(r.status, "pending");
    assert_eq!(w.count("tasks/"), 1);
    assert_eq!(w.count("ready/"), 1);
    let rec = w.record().await;
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
    let before = w.bucket().snapshot();
    let r = submit(&w.process()).await.unwrap();
    assert_eq!(r.task_id, first.task_id);
    assert!(r.replayed && !r.recovered);
    assert_eq!(r.status, "pending");
    assert_eq!(w.bucket().snapshot(), before, "byte for byte");
}

#[tokio::test]
async fn a_crash_before_the_record_leaves_nothing_and_the_next_submit_creates() {
    let w = World::new();
    w.faulty.at_call(1, Fault::CrashBefore);
    submit(&w.process()).await.unwrap_err();
    assert!(w.bucket().is_empty());
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
    assert_eq!(w.record().await.task_id, r.task_id);
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
}

#[tokio::test]
async fn a_lost_answer_to_the_sweepers_ready_write_is_checked_by_reading_the_record() {
    let w = World::new();
    submit(&w.restarted()).await.unwrap();
    w.faulty.inject(
        Some(Op::PutUpdate),
        "idempotency/",
        1,
        1,
        Fault::FailAfter(StoreError::Unavailable("timeout".into())),
    );
    w.clock.advance(common::settings().stale_creating_after);
    let outcome = w
        .process()
        .engine()
        .sweep_record(&w.record_key(), false, None)
        .await;
    assert_eq!(outcome, RecordOutcome::Promoted);
    assert_eq!(w.record().await.status, Some(RecordStatus::Ready));
    // The retried If-Match met the sweeper's own write (412), read the
    // record, and saw it ready.
    let calls = w.faulty.calls();
    let writes: Vec<(Op, Option<StoreError>)> = calls
        .iter()
        .skip(3)
        .map(|c| (c.op, c.error.clone()))
        .collect();
    assert_eq!(
        writes,
        vec![
            (
                Op::PutUpdate,
                Some(StoreError::Unavailable("timeout".into()))
            ),
            (Op::PutUpdate, Some(StoreError::PreconditionFailed)),
            (Op::Get, None),
        ],
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
    // 3 requests, plus one retry for each of the 4 failures.
    assert_eq!(w.faulty.calls().len(), 3 + 4);
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
    assert!(w.bucket().is_empty());
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
    w.record().await
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
    let before = w.bucket().keys();
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
    assert_eq!(w.bucket().keys(), before);
}

#[tokio::test]
async fn just_after_the_deadline_a_taskless_creating_record_is_undetermined_and_nothing_is_written()
{
    let w = World::new();
    let rec = interrupted(&w).await;
    w.clock.advance(Duration::seconds(2400 + 1));
    let before = w.bucket().keys();
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
    assert_eq!(w.bucket().keys(), before);
}

#[tokio::test]
async fn long_after_the_deadline_a_taskless_creating_record_answers_missing_and_writes_nothing() {
    let w = World::new();
    let rec = interrupted(&w).await;
    w.clock.advance(Duration::seconds(2400 + 15 * 60));
    let before = w.bucket().keys();
    let r = submit(&w.restarted()).await.unwrap();
    assert_eq!(r.task_id, rec.task_id);
    assert_eq!(r.status, "missing");
    assert!(r.replayed);
    assert_eq!(w.bucket().keys(), before);
    assert_eq!(
        w.record().await.status,
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
    let before = w.bucket().keys();
    let r = submit(&w.restarted()).await.unwrap();
    assert_eq!(r.status, "pending");
    assert_eq!(w.bucket().keys(), before);
}

#[tokio::test]
async fn a_task_deleted_after_the_deadline_is_never_written_again() {
    let w = World::new();
    submit(&w.process()).await.unwrap();
    let rec = w.record().await;
    w.clock.advance(Duration::hours(1));
    w.bucket().delete(&rec.task_key, None).await.unwrap();
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

/// A later submit of the interrupted record starts 10 s before its finish
/// deadline; its first write of kind `op` under `prefix` takes 20 s and fails,
/// so a retry would go after the deadline. Checks that it is refused: one
/// attempt only, undetermined until the deadline + 15 minutes.
async fn refused_at_the_deadline(w: &World, op: Op, prefix: &'static str) {
    let rec = w.record().await;
    w.clock.advance(Duration::seconds(2400 - 10));
    let clock = w.clock.clone();
    let slow = FaultyStore::new(common::Intercept {
        inner: w.bucket().clone(),
        hook: move |o: Op, key: &str| {
            (o == op && key.starts_with(prefix)).then(|| {
                clock.advance(Duration::seconds(20));
                StoreError::Unavailable("503 SlowDown".into())
            })
        },
    });
    let q = Queue::with_clock(
        slow.clone(),
        Arc::new(w.clock.clone()) as Arc<dyn Clock>,
        common::settings(),
    );
    let e = submit(&q).await.unwrap_err();
    // Refused 10 s past the deadline: undetermined until a late write can no
    // longer land, 15 minutes after the deadline. (A 200 needs both objects.)
    assert!(
        matches!(e, SubmitError::Undetermined { task_id, retry_after }
            if task_id == rec.task_id && retry_after.as_secs() == 15 * 60 - 10),
        "{e:?}"
    );
    let writes = slow
        .calls()
        .iter()
        .filter(|c| c.op == op && c.key.starts_with(prefix))
        .count();
    assert_eq!(writes, 1, "no retry after the deadline");
    assert_eq!(w.record().await.status, Some(RecordStatus::Creating));
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
async fn a_replay_of_a_ready_record_is_at_most_three_requests() {
    let w = World::new();
    submit(&w.restarted()).await.unwrap();
    assert_eq!(w.sweep_event().await, RecordOutcome::Promoted);
    submit(&w.process()).await.unwrap();
    assert_eq!(
        trips(&w),
        vec![(Op::PutCreate, 1), (Op::Get, 2), (Op::Get, 3)]
    );
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
    let w = World {
        clock: crashed.clock.clone(),
        faulty: FaultyStore::new(crashed.bucket().clone()),
    };
    let r = submit(&w.process()).await.unwrap();
    assert!(r.recovered && r.replayed);
    let ops = trips(&w);
    // PUT (412), GET record, GET task + HEAD marker (both 404), PUT task +
    // PUT marker: 6 requests in 4 round trips.
    assert_eq!(ops.len(), 6, "{ops:?}");
    assert_eq!(w.faulty.round_trips(), 4, "{ops:?}");
    assert!(ops[4..].contains(&(Op::PutCreate, 4)) && ops[4..].contains(&(Op::Put, 4)));
    assert_eq!(w.count("tasks/"), 1);
    assert_eq!(w.count("ready/"), 1);
}

#[tokio::test]
async fn the_sweeper_promotes_a_finished_record_in_three_requests_and_one_write() {
    let w = World::new();
    submit(&w.restarted()).await.unwrap();
    w.clock.advance(common::settings().stale_creating_after);
    let outcome = w
        .process()
        .engine()
        .sweep_record(&w.record_key(), false, None)
        .await;
    assert_eq!(outcome, RecordOutcome::Promoted);
    let ops = trips(&w);
    assert_eq!(ops.len(), 4, "{ops:?}");
    assert_eq!(ops[0], (Op::Get, 1));
    assert!(ops[1..3].contains(&(Op::Get, 2)) && ops[1..3].contains(&(Op::Head, 2)));
    assert_eq!(ops[3], (Op::PutUpdate, 3));
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
