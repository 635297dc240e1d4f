//! A failed task's key claimed again for a new task (`if_task_failed:
//! new_task`; docs/protocol.md, "Reusing a failed task's key"): in memory
//! with faults and races, then on moto and SeaweedFS. The body field and the
//! SQS attribute are tested in `submit_handler.rs`, buquet's worker failing
//! the task for real in `interop.rs`.

use crate::common;

use common::World;
use futures::future::join_all;
use idempotent_submit::store::{Fault, Op, PutMode, Store, StoreError};
use idempotent_submit::{ConflictKind, IfTaskFailed, Queue, Reset, SubmitError, Submitted};
use serde_json::{Value, json};
use std::sync::atomic::{AtomicBool, Ordering};

/// A submit of key `k` with `input`, asking for a new task if the key's
/// task failed.
async fn resubmit(q: &Queue, input: Value) -> Result<Submitted, SubmitError> {
    q.submit("t", input)
        .idempotency_key("k")
        .if_task_failed(IfTaskFailed::NewTask)
        .await
}

/// The key's first task, submitted and then failed for good.
async fn failed_first(w: &World) -> Submitted {
    let first = common::submit_key(&w.queue(), "k").await;
    common::end_task(&w.bucket, &first.task_key, "failed").await;
    first
}

#[tokio::test]
async fn a_failed_tasks_key_is_replayed_by_default_and_claimed_for_a_new_task_in_six_requests_with_new_task()
 {
    let w = World::new();
    let first = failed_first(&w).await;
    let q = w.process();
    let replay = q.submit("t", json!(1)).idempotency_key("k").await.unwrap();
    assert!(replay.replayed);
    assert_eq!(
        (replay.task_id, replay.status.as_str()),
        (first.task_id, "failed")
    );
    assert_eq!(replay.replaces_task_id, None);

    w.faulty.reset_log();
    let new = resubmit(&q, json!(1)).await.unwrap();
    assert!(new.created());
    assert_ne!(new.task_id, first.task_id);
    assert_eq!(new.replaces_task_id, Some(first.task_id));
    assert_eq!(new.status, "pending");
    // The claim's 412, the record, its task, the claim over the record
    // (If-Match), then the new task and its marker side by side.
    let calls = w.faulty.calls();
    let ops: Vec<(usize, Op)> = calls.iter().map(|c| (c.round_trip, c.op)).collect();
    assert_eq!(
        ops[..4],
        [
            (1, Op::PutCreate),
            (2, Op::Get),
            (3, Op::Get),
            (4, Op::PutUpdate)
        ]
    );
    let mut last: Vec<&str> = calls[4..].iter().map(|c| &c.key[..6]).collect();
    last.sort_unstable();
    assert_eq!(last, ["ready/", "tasks/"]);
    assert_eq!(w.faulty.round_trips(), 5);
    // The old task is left as it ended; the record names the new one and
    // the one it replaces, so that every replay links it too.
    assert_eq!(w.count("tasks/"), 2);
    assert_eq!(w.json(&first.task_key).await["status"], "failed");
    let record = w.record("k").await;
    assert_eq!(
        (record.task_id, record.replaces_task_id),
        (new.task_id, Some(first.task_id))
    );
    let again = resubmit(&q, json!(1)).await.unwrap();
    assert!(again.replayed);
    assert_eq!(
        (again.task_id, again.replaces_task_id),
        (new.task_id, Some(first.task_id))
    );
    let task = w.json(&new.task_key).await;
    assert_eq!(task["input"], json!(1));
}

#[tokio::test]
async fn only_failed_and_cancelled_free_the_key_every_other_status_and_a_missing_task_are_replayed()
{
    for (status, frees) in [
        ("pending", false),
        ("running", false),
        ("completed", false),
        ("expired", false),
        ("archived", false),
        ("failed", true),
        ("cancelled", true),
    ] {
        let w = World::new();
        let q = w.queue();
        let first = q.submit("t", json!(1)).idempotency_key("k").await.unwrap();
        common::end_task(&w.bucket, &first.task_key, status).await;
        let again = resubmit(&q, json!(1)).await.unwrap();
        assert_eq!(again.created(), frees, "{status}");
        assert_eq!(again.task_id != first.task_id, frees, "{status}");
        assert_eq!(w.count("tasks/"), 1 + usize::from(frees), "{status}");
    }
    // A task gone from the bucket is no failure: `missing`, replayed, once
    // no late write of it can land.
    let w = World::new();
    let q = w.queue();
    let first = q.submit("t", json!(1)).idempotency_key("k").await.unwrap();
    w.bucket.delete(&first.task_key, None).await.unwrap();
    w.clock.advance(chrono::Duration::hours(1));
    let again = resubmit(&q, json!(1)).await.unwrap();
    assert!(again.replayed);
    assert_eq!(
        (again.task_id, again.status.as_str()),
        (first.task_id, "missing")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_new_task_submits_of_a_failed_key_make_exactly_one_new_task() {
    let w = World::new();
    let first = failed_first(&w).await;
    let processes: Vec<Queue> = (0..8).map(|_| w.next_process().queue()).collect();
    let answers: Vec<Submitted> = join_all(processes.iter().map(|q| resubmit(q, json!(1))))
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let created = answers.iter().filter(|a| a.created()).count();
    assert_eq!(created, 1, "{answers:#?}");
    let new = answers.iter().find(|a| a.created()).unwrap();
    for a in &answers {
        assert_eq!(
            (a.task_id, a.replaces_task_id),
            (new.task_id, Some(first.task_id))
        );
    }
    assert_eq!(w.count("tasks/"), 2);
    assert_eq!(w.record("k").await.task_id, new.task_id);
}

#[tokio::test]
async fn a_reuse_whose_answer_was_lost_is_still_its_own_201_naming_the_failed_task() {
    let w = World::new();
    let first = failed_first(&w).await;
    let faulty = common::world::dying_at(
        w.bucket.clone(),
        Op::PutUpdate,
        "idempotency/",
        Fault::FailAfter(StoreError::Unavailable("answer lost".into())),
    );
    let new = resubmit(&w.queue_over(faulty), json!(1)).await.unwrap();
    assert!(new.created(), "{new:?}");
    assert_eq!(new.replaces_task_id, Some(first.task_id));
    assert_eq!(w.count("tasks/"), 2);
    assert_eq!(w.record("k").await.task_id, new.task_id);
}

/// A store on which, right before this process's claim over the failed
/// task's record (its first `If-Match` record PUT), another process claims
/// the key over that record itself, and an operator resets the key.
struct BeatenThenReset {
    bucket: idempotent_submit::store::MemoryStore,
    other: Queue,
    done: AtomicBool,
}

#[async_trait::async_trait]
impl common::Hooks for BeatenThenReset {
    type Inner = idempotent_submit::store::MemoryStore;

    fn inner(&self) -> &Self::Inner {
        &self.bucket
    }

    async fn before(&self, call: &common::Call<'_>) -> Result<(), StoreError> {
        if call.op == Op::PutUpdate
            && call.key.starts_with("idempotency/")
            && !self.done.swap(true, Ordering::SeqCst)
        {
            let won = resubmit(&self.other, json!(2)).await.unwrap();
            assert!(won.created(), "{won:?}");
            let reset = self.other.reset_key("t", "k", None).await.unwrap();
            assert!(matches!(reset, Reset::Done { old_task_id } if old_task_id == won.task_id));
        }
        Ok(())
    }
}

// Found by the model test (a seed of `make soak`): the loser of the race
// claimed over the reset record still naming the failed task, so two
// records replaced one failed task.
#[tokio::test]
async fn a_reuse_that_lost_its_race_and_then_met_a_reset_record_claims_it_naming_no_failed_task() {
    let w = World::new();
    let first = failed_first(&w).await;
    let store = common::Wrapped(BeatenThenReset {
        bucket: w.bucket.clone(),
        other: w.queue(),
        done: AtomicBool::new(false),
    });
    let new = resubmit(&w.queue_over(store), json!(3)).await.unwrap();
    // Its If-Match PUT met the winner's record: 412. Then it read the reset
    // record, which it began after (the same S3 second), and claimed the key
    // over it as over an expired record: a new task, for the reset, not for
    // the failed task, which the winner already replaced.
    assert!(new.created(), "{new:?}");
    assert_eq!(new.replaces_task_id, None);
    let record = w.record("k").await;
    assert_eq!(
        (record.task_id, record.replaces_task_id),
        (new.task_id, None)
    );
    assert_eq!(w.json(&new.task_key).await["input"], json!(3));
    assert_eq!(w.json(&first.task_key).await["status"], "failed");
    assert_eq!(w.count("tasks/"), 3);
}

#[tokio::test]
async fn a_reuse_that_died_after_its_claim_is_finished_by_the_next_submit_or_by_the_sweeper() {
    for by_sweeper in [false, true] {
        let w = World::new();
        let first = failed_first(&w).await;
        let dying = common::world::dying_at(
            w.bucket.clone(),
            Op::PutUpdate,
            "idempotency/",
            Fault::CrashAfter,
        );
        resubmit(&w.queue_over(dying), json!(1))
            .await
            .expect_err("the process dies after its claim");
        let record = w.record("k").await;
        assert_ne!(record.task_id, first.task_id);
        assert_eq!(w.count("tasks/"), 1);
        if by_sweeper {
            w.sweep_event("k").await;
        } else {
            // Even a submit that would replay a failed task finishes the new
            // one: the key is the new record's now.
            let next = common::submit_key(&w.queue(), "k").await;
            assert!(next.replayed && next.recovered);
            assert_eq!(
                (next.task_id, next.replaces_task_id),
                (record.task_id, Some(first.task_id))
            );
        }
        assert_eq!(w.count("tasks/"), 2, "by the sweeper: {by_sweeper}");
        let task = w.json(&record.task_key).await;
        assert_eq!(task["status"], "pending");
    }
}

#[tokio::test]
async fn with_new_task_a_failed_key_takes_another_input_and_with_replay_that_is_a_conflict() {
    let w = World::new();
    let first = failed_first(&w).await;
    let q = w.queue();
    let refused = q.submit("t", json!(2)).idempotency_key("k").await;
    assert!(
        matches!(
            refused,
            Err(SubmitError::Conflict {
                kind: ConflictKind::Input,
                task_id
            }) if task_id == first.task_id
        ),
        "{refused:?}"
    );
    let new = resubmit(&q, json!(2)).await.unwrap();
    assert!(new.created());
    assert_eq!(w.json(&new.task_key).await["input"], json!(2));
    // The key is the new record's: its own input again is a replay, the
    // old one a conflict (its task is pending, not failed).
    assert!(resubmit(&q, json!(2)).await.unwrap().replayed);
    assert!(matches!(
        resubmit(&q, json!(1)).await,
        Err(SubmitError::Conflict { .. })
    ));
}

#[tokio::test]
async fn if_task_failed_new_task_by_deployment_frees_a_failed_key_unless_the_submit_asks_for_replay()
 {
    let w = World::new();
    let first = failed_first(&w).await;
    let q = Queue::with_clock(
        w.bucket.clone(),
        std::sync::Arc::new(w.clock.clone()),
        idempotent_submit::Settings {
            if_task_failed: IfTaskFailed::NewTask,
            ..common::settings()
        },
    );
    let replay = q
        .submit("t", json!(1))
        .idempotency_key("k")
        .if_task_failed(IfTaskFailed::Replay)
        .await
        .unwrap();
    assert_eq!((replay.task_id, replay.replayed), (first.task_id, true));
    let new = q.submit("t", json!(1)).idempotency_key("k").await.unwrap();
    assert!(new.created());
    assert_eq!(new.replaces_task_id, Some(first.task_id));
}

#[tokio::test]
async fn a_record_of_buquets_own_submit_whose_task_failed_is_claimed_over_too() {
    let w = World::new();
    let first = failed_first(&w).await;
    // buquet's record: no status, no write_id, no scope.
    let rkey = w.record_key("k");
    let mut record = w.json(&rkey).await;
    for field in ["status", "write_id", "scope", "pending_task"] {
        record.as_object_mut().unwrap().remove(field);
    }
    w.bucket
        .put(&rkey, record.to_string().into(), PutMode::Overwrite)
        .await
        .unwrap();
    let new = resubmit(&w.queue(), json!(1)).await.unwrap();
    assert!(new.created());
    assert_eq!(new.replaces_task_id, Some(first.task_id));
    assert_eq!(w.count("tasks/"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_s3_and_seaweedfs_racing_new_task_submits_of_a_failed_key_make_one_new_task_and_a_late_old_claim_changes_nothing()
 {
    for store in common::real_buckets().await {
        let bucket = store.bucket().to_owned();
        let q = Queue::new(store.clone(), common::settings());
        let first = q.submit("t", json!(1)).idempotency_key("k").await.unwrap();
        let rkey = idempotent_submit::protocol::KeyRef::parse("t", "k", None)
            .unwrap()
            .record_key();
        let old_claim = store.get(&rkey).await.unwrap().body;
        common::end_task(&store, &first.task_key, "cancelled").await;
        let processes: Vec<Queue> = (0..4)
            .map(|_| Queue::new(store.clone(), common::settings()))
            .collect();
        let answers: Vec<Submitted> = join_all(processes.iter().map(|q| resubmit(q, json!(1))))
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
        assert_eq!(
            answers.iter().filter(|a| a.created()).count(),
            1,
            "{bucket}: {answers:#?}"
        );
        let new = &answers[0];
        assert!(
            answers
                .iter()
                .all(|a| a.task_id == new.task_id && a.replaces_task_id == Some(first.task_id))
        );
        assert_ne!(new.task_id, first.task_id);
        let tasks = common::all_keys(&store)
            .await
            .into_iter()
            .filter(|k| k.starts_with("tasks/"))
            .count();
        assert_eq!(tasks, 2, "{bucket}");
        let late = store.put(&rkey, old_claim, PutMode::Create).await;
        assert!(
            matches!(late, Err(StoreError::PreconditionFailed)),
            "{bucket}: {late:?}"
        );
        let view = q.lookup_key("t", "k", None).await.unwrap().unwrap();
        assert_eq!(view.task_id, new.task_id, "{bucket}");
        assert_eq!(view.task_status, "pending", "{bucket}");
    }
}

/// The bucket of the version-delete test, read again after every DELETE:
/// each task a record live at that moment names, so that a record made
/// current by a delete, if only until the next request, is seen.
struct LiveAfterDelete {
    inner: idempotent_submit::store::MemoryStore,
    key: String,
    clock: idempotent_submit::ManualClock,
    seen: std::sync::Arc<std::sync::Mutex<Vec<uuid::Uuid>>>,
}

#[async_trait::async_trait]
impl common::Hooks for LiveAfterDelete {
    type Inner = idempotent_submit::store::MemoryStore;

    fn inner(&self) -> &Self::Inner {
        &self.inner
    }

    async fn after(&self, call: &common::Call<'_>, _ok: bool) {
        use idempotent_submit::Clock;
        use idempotent_submit::protocol::Record;
        if call.op != Op::Delete || call.key != self.key {
            return;
        }
        if let Ok(o) = self.inner.get(&self.key).await {
            let rec = Record::parse(&o.body).unwrap();
            if !rec.is_expired(self.clock.now()) {
                self.seen.lock().unwrap().push(rec.task_id);
            }
        }
    }
}

// Found by the model test (seeds of `make soak`, on a versioned store that
// ignores If-Match on DELETE). The sweeper deleted the expired (or reset)
// record of the new task by its version, which made the failed task's record
// current again, live by its `expires_at`: the key answered the failed task.
// Then it deleted such a version once it came back, which left a moment in
// which a submit still got it (and likewise a reset key's old record, when
// its reset record was deleted). The versions beneath now go first.
#[tokio::test]
async fn where_the_sweeper_deletes_by_version_no_older_record_is_ever_current_again_after_a_replacement_expires_or_is_reset()
 {
    use idempotent_submit::protocol::RecordOutcome;
    use idempotent_submit::store::Behaviour;
    let settings = common::settings();
    for reset in [false, true] {
        let clock = idempotent_submit::ManualClock::at_epoch();
        let bucket = common::memory_store_versioned(&clock).with_behaviour(Behaviour::minio());
        let w = World::over(clock, bucket);
        let seen = std::sync::Arc::default();
        let watched = common::Wrapped(LiveAfterDelete {
            inner: w.bucket.clone(),
            key: w.record_key("k"),
            clock: w.clock.clone(),
            seen: std::sync::Arc::clone(&seen),
        });
        let q = Queue::with_clock(
            watched,
            std::sync::Arc::new(w.clock.clone()),
            idempotent_submit::Settings {
                conditional_delete: false,
                ..common::settings()
            },
        );
        // The failed task's record lives 30 days; its replacement an hour.
        let first = q.submit("t", json!(1)).idempotency_key("k").await.unwrap();
        common::end_task(&w.bucket, &first.task_key, "failed").await;
        let new = q
            .submit("t", json!(2))
            .idempotency_key("k")
            .idempotency_ttl(chrono::Duration::hours(1))
            .if_task_failed(IfTaskFailed::NewTask)
            .await
            .unwrap();
        assert_eq!(new.replaces_task_id, Some(first.task_id));
        if reset {
            // The reset record sits over the new task's record, live for
            // the rest of its hour.
            assert!(matches!(
                q.reset_key("t", "k", None).await.unwrap(),
                Reset::Done { .. }
            ));
            w.clock
                .advance(settings.operation_timeout + settings.late_write_margin);
        } else {
            w.clock.advance(chrono::Duration::hours(1));
        }
        let swept = q
            .engine()
            .sweep_record(&w.record_key("k"), false, None)
            .await;
        assert!(
            matches!(swept, RecordOutcome::ExpiredDeleted),
            "reset {reset}: {swept:?}"
        );
        // No DELETE of the sweep left a live record current, not for a
        // moment: neither the failed task's nor the reset task's.
        assert_eq!(
            *seen.lock().unwrap(),
            Vec::<uuid::Uuid>::new(),
            "reset {reset}"
        );
        // Every version of the key's history went, and the key is free.
        assert!(
            w.bucket.get(&w.record_key("k")).await.is_err(),
            "reset {reset}"
        );
        assert!(
            w.bucket
                .list_versions(&w.record_key("k"))
                .await
                .unwrap()
                .is_empty(),
            "reset {reset}"
        );
        assert_eq!(q.lookup_key("t", "k", None).await.unwrap(), None);
        let next = q.submit("t", json!(3)).idempotency_key("k").await.unwrap();
        assert!(next.created() && next.task_id != first.task_id);
        assert_eq!(next.replaces_task_id, None);
    }
}
