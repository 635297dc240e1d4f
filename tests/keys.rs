//! A key's record looked up and reset on purpose (`Queue::lookup_key`,
//! `Queue::reset_key`; docs/protocol.md, "Looking up and resetting a key"),
//! in memory and with faults. The HTTP routes are tested in
//! `submit_handler.rs`, `idem key --reset` on moto in `cli.rs`.

mod dead_submit;
mod http;
mod real_stores;

use crate::common;

use std::sync::{Arc, Mutex};

use chrono::Duration;
use common::World;
use idempotent_submit::store::{Fault, Op, Store};
use idempotent_submit::testing::protocol::{KeyView, Reset};
use idempotent_submit::{Tenant, ValidationError};
use serde_json::json;

/// The record of `key` in scope `t`, as its submit wrote it: the bytes a
/// late or retried create-only PUT of that claim sends again.
async fn record_bytes(store: &impl Store, key: &str) -> (String, bytes::Bytes) {
    let rkey = idempotent_submit::testing::protocol::KeyRef::parse("t", key, None)
        .unwrap()
        .record_key();
    let body = store.get(&rkey).await.unwrap().body;
    (rkey, body)
}

fn tenant(p: &str) -> Tenant {
    Tenant::from_principal(p).unwrap()
}

#[tokio::test]
async fn a_lookup_shows_the_keys_task_its_phase_and_status_and_nothing_the_submit_would_write() {
    let w = World::new();
    let q = w.queue();
    let s = q
        .submit("charge", json!({"card": "4242"}))
        .idempotency_key("k")
        .await
        .unwrap();
    let p = w.process();
    let view: KeyView = p.lookup_key("charge", "k", None).await.unwrap().unwrap();
    assert_eq!(view.task_id, s.task_id);
    assert_eq!(
        (view.phase, view.task_status.as_str()),
        ("in_flight", "pending")
    );
    assert_eq!(view.expires_at, s.idempotency.as_ref().unwrap().expires_at);
    let shown = serde_json::to_value(&view).unwrap();
    let mut fields: Vec<&str> = shown
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.as_str())
        .collect();
    fields.sort_unstable();
    assert_eq!(
        fields,
        [
            "created_at",
            "expires_at",
            "key",
            "key_hash",
            "phase",
            "scope",
            "task_id",
            "task_status",
            "task_type"
        ]
    );
    // The input (4242) shows nowhere but by chance in an id or a hash.
    let mut rest = shown.clone();
    for id in ["task_id", "key_hash"] {
        rest.as_object_mut().unwrap().remove(id);
    }
    assert!(!rest.to_string().contains("4242"), "{shown}");
    // The record's GET, then its task's: two requests in two round trips.
    let ops: Vec<Op> = w.faulty.calls().iter().map(|c| c.op).collect();
    assert_eq!(ops, [Op::Get, Op::Get]);
    assert_eq!(w.faulty.round_trips(), 2);
}

#[tokio::test]
async fn no_record_an_expired_record_and_a_bad_scope_or_key_are_answered_as_the_submit_would() {
    let w = World::new();
    let q = w.queue();
    assert_eq!(q.lookup_key("t", "k", None).await.unwrap(), None);
    assert_eq!(q.reset_key("t", "k", None).await.unwrap(), Reset::NotFound);
    q.submit("t", json!(1))
        .idempotency_key("k")
        .idempotency_ttl(Duration::hours(1))
        .await
        .unwrap();
    w.clock.advance(Duration::hours(1));
    assert_eq!(q.lookup_key("t", "k", None).await.unwrap(), None);
    assert_eq!(q.reset_key("t", "k", None).await.unwrap(), Reset::NotFound);
    // Expired is absent: the reset wrote nothing.
    assert_eq!(w.count("idempotency/"), 1);
    for (scope, key, field) in [
        (".t", "k", "scope"),
        ("a/b", "k", "scope"),
        ("t", "", "idempotency_key"),
        ("t", "a\u{7}b", "idempotency_key"),
    ] {
        let e = q.lookup_key(scope, key, None).await.unwrap_err();
        assert!(
            matches!(e, idempotent_submit::SubmitError::Invalid(ValidationError::Field { field: f, .. }) if f == field),
            "{scope:?} {key:?}: {e}"
        );
    }
}

#[tokio::test]
async fn a_reset_is_answered_at_once_in_three_round_trips_and_frees_the_key_for_a_new_task_and_leaves_the_old_task_as_it_is()
 {
    let w = World::new();
    let q = w.queue();
    let first = q.submit("t", json!(1)).idempotency_key("k").await.unwrap();
    let (rkey, old_claim) = record_bytes(&w.bucket, "k").await;
    // At once: the record is a second old, its own submit's window open.
    w.faulty.reset_log();
    let reset = w.process().reset_key("t", "k", None).await.unwrap();
    assert_eq!(
        reset,
        Reset::Done {
            old_task_id: first.task_id
        }
    );
    // The record's GET; its task's GET and, the record still in its finish
    // window, its marker's HEAD; the PUT If-Match: three round trips.
    let mut ops: Vec<Op> = w.faulty.calls().iter().map(|c| c.op).collect();
    ops[1..3].sort_by_key(|op| format!("{op:?}"));
    assert_eq!(ops, [Op::Get, Op::Get, Op::Head, Op::PutUpdate]);
    assert_eq!(w.faulty.round_trips(), 3);
    // The reset record: the record as it was, expired at the reset, and
    // without the task it carried.
    let reset_record = w.json(&rkey).await;
    assert_eq!(reset_record["task_id"], first.task_id.to_string());
    assert_eq!(reset_record["reset_at"], reset_record["expires_at"]);
    assert!(reset_record.get("pending_task").is_none(), "{reset_record}");
    assert_eq!(q.lookup_key("t", "k", None).await.unwrap(), None);
    assert!(w.bucket.get(&first.task_key).await.is_ok());
    // The next submit of the key, even with another input, is new.
    let second = q.submit("t", json!(2)).idempotency_key("k").await.unwrap();
    assert!(!second.replayed);
    assert_ne!(second.task_id, first.task_id);
    assert_eq!(w.count("tasks/"), 2);
    assert!(w.bucket.get(&first.task_key).await.is_ok());
    late_old_claim_changes_nothing(&w.bucket, &q, &rkey, old_claim, &second, "memory").await;
}

/// A late or retried create-only PUT of the old claim (`old_claim`, the
/// record's bytes before the reset) meets an object, a 412: the key still
/// maps to `now`, the task of the submit after the reset.
async fn late_old_claim_changes_nothing(
    store: &impl Store,
    q: &idempotent_submit::Queue,
    rkey: &str,
    old_claim: bytes::Bytes,
    now: &idempotent_submit::Submitted,
    on: &str,
) {
    let late = store
        .put(rkey, old_claim, idempotent_submit::store::PutMode::Create)
        .await;
    assert!(
        matches!(
            late,
            Err(idempotent_submit::store::StoreError::PreconditionFailed)
        ),
        "{on}: {late:?}"
    );
    let view = q.lookup_key("t", "k", None).await.unwrap().unwrap();
    assert_eq!(view.task_id, now.task_id, "{on}");
}

#[tokio::test]
async fn a_reset_is_refused_while_a_task_may_still_be_written_for_the_record_and_deletes_nothing() {
    let w = World::new();
    // The submit died right after its record: its task is not there, and a
    // replay or the sweeper may still write it.
    w.interrupted_after_its_record("k", json!(1)).await;
    let q = w.queue();
    let Reset::InProgress {
        task_id,
        retry_after,
    } = q.reset_key("t", "k", None).await.unwrap()
    else {
        panic!("a reset went ahead while the task could still be written");
    };
    assert!(retry_after >= std::time::Duration::from_secs(1));
    assert_eq!(w.count("idempotency/"), 1);
    let view = q.lookup_key("t", "k", None).await.unwrap().unwrap();
    assert_eq!(view.task_id, task_id);
    assert_eq!(
        (view.phase, view.task_status.as_str()),
        ("in_flight", "missing")
    );
    // Once a finisher wrote the task, nobody can write it again: the reset
    // goes ahead at once, though the record's own submit might still send
    // its PUT (it would meet the reset record).
    let replay = q.submit("t", json!(1)).idempotency_key("k").await.unwrap();
    assert_eq!(replay.task_id, task_id);
    assert_eq!(
        q.reset_key("t", "k", None).await.unwrap(),
        Reset::Done {
            old_task_id: task_id
        }
    );
}

#[tokio::test]
async fn a_record_that_nobody_finished_can_be_reset_once_it_is_settled_and_its_task_never_comes() {
    let w = World::new();
    w.interrupted_after_its_record("k", json!(1)).await;
    let settings = common::settings();
    let q = w.queue();
    // Until no late write can land, the reset waits ...
    w.clock
        .advance(settings.finish_window + settings.late_write_margin - Duration::seconds(1));
    let Reset::InProgress { retry_after, .. } = q.reset_key("t", "k", None).await.unwrap() else {
        panic!("a reset went ahead before late writes stopped");
    };
    assert_eq!(retry_after, std::time::Duration::from_secs(1));
    // ... then goes ahead, and no task is ever written for the old record.
    w.clock.advance(Duration::seconds(1));
    let view = q.lookup_key("t", "k", None).await.unwrap().unwrap();
    assert_eq!(
        (view.phase, view.task_status.as_str()),
        ("settled", "missing")
    );
    let Reset::Done { old_task_id } = q.reset_key("t", "k", None).await.unwrap() else {
        panic!("a settled record was not reset");
    };
    assert_eq!(old_task_id, view.task_id);
    let summary = q.engine().sweep(&Default::default()).await.unwrap();
    assert_eq!(summary.finished, 0);
    let next = q.submit("t", json!(1)).idempotency_key("k").await.unwrap();
    assert_ne!(next.task_id, old_task_id);
    assert_eq!(w.count("tasks/"), 1);
}

/// The wait a refused reset names (docs/protocol.md, resetting a key, step
/// 3): `Retry-After` points at the record's own operation's end, then its
/// stale age, then its settling, each the first still ahead.
#[tokio::test]
async fn a_refused_reset_names_the_wait_until_its_records_own_submit_ends_then_its_stale_age_then_its_settling()
 {
    let w = World::new();
    w.interrupted_after_its_record("k", json!(1)).await;
    let s = common::settings();
    let q = w.queue();
    let mut waits = Vec::new();
    for step in [
        Duration::zero(),
        s.operation_timeout,
        s.stale_creating_after - s.operation_timeout,
    ] {
        w.clock.advance(step);
        let Reset::InProgress { retry_after, .. } = q.reset_key("t", "k", None).await.unwrap()
        else {
            panic!("a reset went ahead while the task could still be written");
        };
        waits.push(Duration::from_std(retry_after).unwrap());
    }
    assert_eq!(
        waits,
        [
            s.operation_timeout,
            s.stale_creating_after - s.operation_timeout,
            s.finish_window + s.late_write_margin - s.stale_creating_after,
        ]
    );
    assert_eq!(w.count("idempotency/"), 1);
}

#[tokio::test]
async fn a_reset_that_meets_a_record_replaced_since_its_read_writes_nothing() {
    let w = World::new();
    let q = w.queue();
    let first = q.submit("t", json!(1)).idempotency_key("k").await.unwrap();
    // Between the reset's read and its PUT, another reset and a new
    // submit of the key replace the record.
    let (clock, bucket) = (w.clock.clone(), w.bucket.clone());
    let raced = Arc::new(Mutex::new(false));
    let hook = {
        let raced = raced.clone();
        move |op: Op, key: &str| {
            if op == Op::PutUpdate && key.starts_with("idempotency/") && !*raced.lock().unwrap() {
                *raced.lock().unwrap() = true;
                let other = World::over(clock.clone(), bucket.clone()).queue();
                meanwhile(async move {
                    other.reset_key("t", "k", None).await.unwrap();
                    other
                        .submit("t", json!(2))
                        .idempotency_key("k")
                        .await
                        .unwrap();
                });
            }
            None
        }
    };
    let racing = w.queue_over(common::Wrapped(common::Intercept {
        inner: w.bucket.clone(),
        hook,
    }));
    assert_eq!(
        racing.reset_key("t", "k", None).await.unwrap(),
        Reset::Changed
    );
    let now = q.lookup_key("t", "k", None).await.unwrap().unwrap();
    assert_ne!(now.task_id, first.task_id);
    assert_eq!(w.count("tasks/"), 2);
}

/// Runs `f` on a runtime of its own, on another thread, to its end: a
/// store hook (which is not async) makes other processes act at that call.
fn meanwhile<F: std::future::Future<Output = ()> + Send>(f: F) {
    std::thread::scope(|s| {
        s.spawn(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(f)
        });
    });
}

#[tokio::test]
async fn a_reset_racing_a_replay_and_the_sweeper_leaves_one_task_for_the_old_record_and_frees_the_key()
 {
    let w = World::new();
    let settings = common::settings();
    // The submit died at its task's write: the sweeper and a replay both
    // come to finish it (its marker may be missing).
    w.submit_dying_at("k", json!(1), Op::PutCreate, "tasks/", Fault::CrashAfter)
        .await;
    w.clock
        .advance(settings.stale_creating_after + Duration::seconds(1));
    let record = w.keys("idempotency/")[0].clone();
    let (clock, bucket) = (w.clock.clone(), w.bucket.clone());
    let replayed = Arc::new(Mutex::new(None));
    let hook = {
        let replayed = replayed.clone();
        move |op: Op, key: &str| {
            if op == Op::PutUpdate
                && key.starts_with("idempotency/")
                && replayed.lock().unwrap().is_none()
            {
                let other = World::over(clock.clone(), bucket.clone()).queue();
                let record = record.clone();
                let replayed = replayed.clone();
                meanwhile(async move {
                    let (replay, swept) = tokio::join!(
                        other.submit("t", json!(1)).idempotency_key("k").send(),
                        other.engine().sweep_record(&record, false, None),
                    );
                    *replayed.lock().unwrap() = Some((replay.unwrap(), swept));
                });
            }
            None
        }
    };
    let racing = w.queue_over(common::Wrapped(common::Intercept {
        inner: w.bucket.clone(),
        hook,
    }));
    let Reset::Done { old_task_id } = racing.reset_key("t", "k", None).await.unwrap() else {
        panic!("the reset did not go ahead");
    };
    let (replay, _) = replayed.lock().unwrap().take().unwrap();
    assert_eq!(
        replay.task_id, old_task_id,
        "the replay answered the old task"
    );
    // One task for the old record, its marker written by whoever came
    // first, and the key free: the next submit is new.
    assert_eq!(w.count("tasks/"), 1);
    assert_eq!(w.count("ready/"), 1);
    let next = common::submit_key(&w.queue(), "k").await;
    assert!(!next.replayed && next.task_id != old_task_id);
    // Nothing more is ever written for the old record: a pass finds nothing
    // to finish, and the bucket holds the two tasks.
    w.clock.advance(settings.finish_window);
    let summary = w.queue().engine().sweep(&Default::default()).await.unwrap();
    assert_eq!(summary.finished, 0);
    assert_eq!(w.count("tasks/"), 2);
}

/// A queue with `CONDITIONAL_DELETE=off`, over `bucket`.
fn without_conditional_delete(w: &World) -> idempotent_submit::Queue {
    let settings = idempotent_submit::Settings {
        conditional_delete: false,
        ..common::settings()
    };
    idempotent_submit::Queue::with_clock(w.bucket.clone(), Arc::new(w.clock.clone()), settings)
}

#[tokio::test]
async fn where_the_store_ignores_if_match_on_delete_a_reset_still_frees_the_key_for_it_deletes_nothing()
 {
    use idempotent_submit::store::Behaviour;
    // MinIO: DELETE ignores If-Match. A reset is a compare-and-swap PUT,
    // which it honours, versioned or not.
    for versioned in [false, true] {
        let clock = idempotent_submit::ManualClock::at_epoch();
        let bucket = if versioned {
            common::memory_store_versioned(&clock)
        } else {
            common::memory_store(&clock)
        }
        .with_behaviour(Behaviour::minio());
        let w = World::over(clock, bucket);
        let q = without_conditional_delete(&w);
        let first = q.submit("t", json!(1)).idempotency_key("k").await.unwrap();
        assert_eq!(
            q.reset_key("t", "k", None).await.unwrap(),
            Reset::Done {
                old_task_id: first.task_id
            }
        );
        assert_eq!(q.lookup_key("t", "k", None).await.unwrap(), None);
        let second = q.submit("t", json!(1)).idempotency_key("k").await.unwrap();
        assert!(!second.replayed && second.task_id != first.task_id);
        assert_eq!(w.count("tasks/"), 2);
    }
}

#[tokio::test]
async fn a_reset_record_is_kept_until_no_late_put_of_the_old_claim_can_land_and_its_deletion_brings_no_old_version_back()
 {
    use idempotent_submit::store::Behaviour;
    use idempotent_submit::testing::protocol::RecordOutcome;
    let settings = common::settings();
    for (versioned, conditional_delete) in [(false, true), (true, true), (true, false)] {
        let clock = idempotent_submit::ManualClock::at_epoch();
        let bucket = if versioned {
            common::memory_store_versioned(&clock)
        } else {
            common::memory_store(&clock)
        };
        let bucket = if conditional_delete {
            bucket
        } else {
            bucket.with_behaviour(Behaviour::minio())
        };
        let w = World::over(clock, bucket);
        let q = idempotent_submit::Queue::with_clock(
            w.bucket.clone(),
            Arc::new(w.clock.clone()),
            idempotent_submit::Settings {
                conditional_delete,
                ..common::settings()
            },
        );
        q.submit("t", json!(1)).idempotency_key("k").await.unwrap();
        let rkey = w.record_key("k");
        assert!(matches!(
            q.reset_key("t", "k", None).await.unwrap(),
            Reset::Done { .. }
        ));
        // Until the old claim's last PUT could have landed, the sweeper
        // leaves the reset record where it is, and finishes nothing for it.
        w.clock.advance(
            settings.operation_timeout + settings.late_write_margin - Duration::seconds(1),
        );
        let swept = q.engine().sweep_record(&rkey, false, None).await;
        assert!(matches!(swept, RecordOutcome::Nothing), "{swept:?}");
        assert!(w.json(&rkey).await["reset_at"].is_string());
        w.clock.advance(Duration::seconds(1));
        let swept = q.engine().sweep_record(&rkey, false, None).await;
        assert!(
            matches!(swept, RecordOutcome::ExpiredDeleted),
            "{versioned} {conditional_delete}: {swept:?}"
        );
        // Deleting the reset record's version makes the one before it, the
        // old record, current again: it goes too, and the key stays free.
        assert!(
            w.bucket.get(&rkey).await.is_err(),
            "{versioned} {conditional_delete}"
        );
        assert_eq!(q.lookup_key("t", "k", None).await.unwrap(), None);
    }
}

#[tokio::test]
async fn a_tenant_can_neither_see_nor_reset_another_tenants_key() {
    let w = World::new();
    let q = w.queue();
    let a = tenant("iam:arn:aws:iam::1:user/a");
    let b = tenant("iam:arn:aws:iam::1:user/b");
    let s = common::submit_key_as(&q, "k", "iam:arn:aws:iam::1:user/a").await;
    assert_eq!(q.lookup_key("t", "k", Some(&b)).await.unwrap(), None);
    assert_eq!(q.lookup_key("t", "k", None).await.unwrap(), None);
    assert_eq!(
        q.reset_key("t", "k", Some(&b)).await.unwrap(),
        Reset::NotFound
    );
    assert_eq!(q.reset_key("t", "k", None).await.unwrap(), Reset::NotFound);
    let mine = q.lookup_key("t", "k", Some(&a)).await.unwrap().unwrap();
    assert_eq!(mine.task_id, s.task_id);
    assert!(!serde_json::to_string(&mine).unwrap().contains(&a.id()));
}

#[tokio::test]
async fn keys_with_slashes_percent_signs_spaces_and_non_ascii_are_looked_up_and_reset_as_submitted()
{
    let w = World::new();
    let q = w.queue();
    for key in ["a/b", "100%25", "two words", "café-☕", "%2F"] {
        let s = q
            .submit("t", json!(key))
            .idempotency_key(key)
            .await
            .unwrap();
        let view = q.lookup_key("t", key, None).await.unwrap().unwrap();
        assert_eq!((view.key.as_str(), view.task_id), (key, s.task_id));
        assert!(matches!(
            q.reset_key("t", key, None).await.unwrap(),
            Reset::Done { .. }
        ));
        assert_eq!(q.lookup_key("t", key, None).await.unwrap(), None);
    }
}

/// Resets the key `k` once, before the first GET of a record: as an
/// operator does between a submit's claim meeting the key held (its first
/// answer) and its read of the record, two seconds later.
struct ResetBeforeRead {
    inner: idempotent_submit::MemoryStore,
    clock: idempotent_submit::ManualClock,
    done: std::sync::atomic::AtomicBool,
}

#[async_trait::async_trait]
impl common::Hooks for ResetBeforeRead {
    type Inner = idempotent_submit::MemoryStore;

    fn inner(&self) -> &Self::Inner {
        &self.inner
    }

    async fn get(
        &self,
        key: &str,
    ) -> Result<idempotent_submit::store::Object, idempotent_submit::StoreError> {
        let first = !self.done.swap(true, std::sync::atomic::Ordering::SeqCst);
        if first && key.starts_with("idempotency/") {
            self.clock.advance(Duration::seconds(2));
            let operator = idempotent_submit::Queue::with_clock(
                self.inner.clone(),
                Arc::new(self.clock.clone()),
                common::settings(),
            );
            let reset = operator.reset_key("t", "k", None).await;
            assert!(matches!(reset, Ok(Reset::Done { .. })), "{reset:?}");
        }
        self.inner.get(key).await
    }
}

/// The answer to a submit of `input` under `k`, begun while the record of
/// another submit (of `1`) held the key and reset before it read it.
async fn submit_begun_before_a_reset(
    input: serde_json::Value,
) -> (
    idempotent_submit::Submitted,
    Result<idempotent_submit::Submitted, idempotent_submit::SubmitError>,
) {
    let (_w, first, q) = reset_before_the_read().await;
    let answer = q.submit("t", input).idempotency_key("k").await;
    (first, answer)
}

/// A world whose key `k` is answered (input `1`), that submit's answer, and
/// a queue over the world whose submits find the key reset just before
/// they read its record.
async fn reset_before_the_read() -> (
    World,
    idempotent_submit::Submitted,
    idempotent_submit::Queue,
) {
    let w = World::new();
    let first = w.queue().submit("t", json!(1)).idempotency_key("k").await;
    let q = w.queue_over(common::Wrapped(ResetBeforeRead {
        inner: w.bucket.clone(),
        clock: w.clock.clone(),
        done: Default::default(),
    }));
    (w, first.unwrap(), q)
}

#[tokio::test]
async fn a_submit_begun_before_a_reset_answers_as_the_record_was_a_conflict_for_another_input_a_replay_for_the_same()
 {
    let (first, other) = submit_begun_before_a_reset(json!(2)).await;
    assert!(
        matches!(
            other,
            Err(idempotent_submit::SubmitError::Conflict {
                kind: idempotent_submit::testing::protocol::ConflictKind::Input,
                task_id,
            }) if task_id == first.task_id
        ),
        "{other:?}"
    );
    let (first, same) = submit_begun_before_a_reset(json!(1)).await;
    let same = same.unwrap();
    assert_eq!(same.task_id, first.task_id);
    assert!(same.replayed, "another submit's task");
}

/// A submit that offloaded its input beside its claim, begun before a reset
/// and reading the reset record of another submit's record, answers as that
/// record was and deletes its payload: no task of its own will name it.
#[tokio::test]
async fn a_submit_begun_before_a_reset_deletes_the_payload_it_offloaded_for_a_task_it_never_writes()
{
    let (w, first, q) = reset_before_the_read().await;
    let other = q
        .submit("t", json!("an input longer than sixteen bytes"))
        .idempotency_key("k")
        .payload_refs(16)
        .await;
    assert!(
        matches!(
            other,
            Err(idempotent_submit::SubmitError::Conflict { task_id, .. })
                if task_id == first.task_id
        ),
        "{other:?}"
    );
    assert_eq!(w.keys("payloads/"), Vec::<String>::new());
}
