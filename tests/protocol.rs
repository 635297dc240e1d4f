//! The protocol on every store: in memory, on moto and on SeaweedFS,
//! versioned and not: new, replay, conflict, scopes, canonical inputs,
//! expiry, plain submits, validation.

use crate::common;

use std::sync::Arc;

use chrono::Duration;
use idempotent_submit::store::Store;
use idempotent_submit::testing::protocol::{ConflictKind, RecordOutcome, RecordStatus};
use idempotent_submit::{
    Clock, ManualClock, Queue, Scope, SubmitError, Submitted, ValidationError,
};
use serde_json::{Value, json};

struct Env {
    queue: Queue,
    clock: ManualClock,
}

impl Env {
    fn store(&self) -> &Arc<dyn Store> {
        self.queue.engine().store()
    }

    async fn keys(&self) -> Vec<String> {
        common::all_keys(self.store().as_ref()).await
    }

    async fn count(&self, prefix: &str) -> usize {
        self.keys()
            .await
            .iter()
            .filter(|k| k.starts_with(prefix))
            .count()
    }

    /// Each record's S3 event reaches the sweeper, as the due queue
    /// delivers it (`STALE_CREATING_AFTER_SECONDS` after the write).
    async fn sweep_events(&self) {
        for k in self.keys().await {
            if k.starts_with("idempotency/") {
                // When the event comes: staleness after the write, by the
                // store's clock (moto's is the real one, a little ahead of
                // the test's).
                let written = self.store().head(&k).await.unwrap().last_modified;
                let due = written + self.queue.settings().stale_creating_after;
                if self.clock.now() < due {
                    self.clock.set(due);
                }
                let outcome = self.queue.engine().sweep_record(&k, false, None).await;
                assert!(
                    matches!(outcome, RecordOutcome::Finished | RecordOutcome::Nothing),
                    "{k}: {outcome:?}"
                );
            }
        }
    }

    /// A submit of `input` as `task_type` under `key`: its answer.
    async fn keyed_result(
        &self,
        task_type: &str,
        input: Value,
        key: &str,
    ) -> Result<Submitted, SubmitError> {
        self.queue
            .submit(task_type, input)
            .idempotency_key(key)
            .await
    }

    /// The same, answered.
    async fn keyed(&self, task_type: &str, input: Value, key: &str) -> Submitted {
        self.keyed_result(task_type, input, key).await.unwrap()
    }

    /// The same, refused: its error.
    async fn keyed_err(&self, task_type: &str, input: Value, key: &str) -> SubmitError {
        self.keyed_result(task_type, input, key).await.unwrap_err()
    }

    async fn task(&self, key: &str) -> Value {
        let o = self.store().get(key).await.unwrap();
        serde_json::from_slice(&o.body).unwrap()
    }
}

async fn a_new_key_creates_one_task_its_marker_and_a_record_written_once(env: Env) {
    let r = env
        .queue
        .submit(
            "charge_customer",
            json!({"order": "ORD-123", "cents": 1999}),
        )
        .idempotency_key("charge-ORD-123")
        .idempotency_ttl(Duration::days(30))
        .await
        .unwrap();
    assert!(r.created() && !r.replayed);
    assert_eq!(r.status, "pending");
    let shard = &r.task_id.to_string()[..1];
    assert_eq!(r.task_key, format!("tasks/{shard}/{}.json", r.task_id));
    let idem = r.idempotency.clone().unwrap();
    assert_eq!(idem.scope, "charge_customer");
    assert_eq!(idem.expires_at, r.created_at + Duration::days(30));
    assert!(idem.key_hash.starts_with("sha256:") && idem.key_hash.len() == 71);

    let task = env.task(&r.task_key).await;
    assert_eq!(task["id"], r.task_id.to_string());
    assert_eq!(task["task_type"], "charge_customer");
    assert_eq!(task["input"], json!({"cents": 1999, "order": "ORD-123"}));
    assert_eq!(task["idempotency"]["key_hash"], idem.key_hash.as_str());
    assert_eq!(env.count("ready/").await, 1);
    let marker = common::first_under(env.keys().await, "ready/");
    assert!(marker.ends_with(&r.task_id.to_string()));
    assert!(marker.starts_with(&format!(
        "ready/{shard}/{:010}/",
        r.created_at.timestamp() / 60
    )));

    let record = || async {
        env.queue
            .record("charge_customer", "charge-ORD-123", None)
            .await
            .unwrap()
            .unwrap()
    };
    let (rec, written) = record().await;
    assert_eq!(rec.status, Some(RecordStatus::Creating));
    assert_eq!(rec.task_id, r.task_id);
    assert!(rec.pending_task.is_some());
    assert_eq!(env.keys().await.len(), 3);

    // Its event finds both objects there: the record stays as written.
    env.sweep_events().await;
    let (rec, meta) = record().await;
    assert_eq!(rec.status, Some(RecordStatus::Creating));
    assert_eq!(rec.task_id, r.task_id);
    assert!(
        rec.pending_task.is_some(),
        "pending_task stays for the record's life"
    );
    assert_eq!(meta.etag, written.etag, "the record is written once");
    assert_eq!(env.keys().await.len(), 3);
}

async fn a_replay_answers_the_same_task_and_writes_nothing(env: Env) {
    let first = env.keyed("t", json!({"a": 1}), "k").await;
    let before = env.keys().await;
    let again = env.keyed("t", json!({"a": 1}), "k").await;
    assert!(again.replayed);
    assert_eq!(again.task_id, first.task_id);
    assert_eq!(again.task_key, first.task_key);
    assert_eq!(again.created_at, first.created_at);
    assert_eq!(again.idempotency, first.idempotency);
    assert_eq!(env.keys().await, before);
}

async fn a_replay_reports_the_tasks_current_status(env: Env) {
    let first = env.keyed("t", json!(1), "k").await;
    // A worker claims the task, and deletes its marker, as buquet's does.
    let mut task = env.task(&first.task_key).await;
    task["status"] = json!("running");
    env.store()
        .put(
            &first.task_key,
            serde_json::to_vec(&task).unwrap().into(),
            idempotent_submit::store::PutMode::Overwrite,
        )
        .await
        .unwrap();
    for k in env.keys().await {
        if k.starts_with("ready/") {
            env.store().delete(&k, None).await.unwrap();
        }
    }
    let before = env.keys().await;
    let again = env.keyed("t", json!(1), "k").await;
    assert_eq!(again.status, "running");
    // No marker for a task a worker has taken.
    assert_eq!(env.keys().await, before);
}

async fn a_settled_record_whose_task_is_gone_answers_missing_and_writes_nothing(env: Env) {
    let first = env.keyed("t", json!(1), "k").await;
    env.sweep_events().await;
    // An hour on, past its finish deadline and the 15 minutes after it, the
    // queue deletes the task.
    env.clock.advance(Duration::hours(1));
    env.store().delete(&first.task_key, None).await.unwrap();
    let before = env.keys().await;
    let again = env.keyed("t", json!(1), "k").await;
    assert_eq!(again.task_id, first.task_id);
    assert_eq!(again.status, "missing");
    assert_eq!(
        env.keys().await,
        before,
        "a deleted task is never written again"
    );
}

async fn a_record_an_earlier_version_turned_ready_whose_task_is_deleted_at_once_is_missing_at_once(
    env: Env,
) {
    // `ready` (which earlier versions of the sweeper wrote once they had
    // seen both objects) says the task was created: no late write can land,
    // so a task gone (an operator deleted it) is `missing` without waiting
    // out the deadline's 15 minutes.
    let first = env.keyed("t", json!(1), "k").await;
    let (rec, meta) = env.queue.record("t", "k", None).await.unwrap().unwrap();
    let mut v = serde_json::to_value(&rec).unwrap();
    v["status"] = json!("ready");
    v["write_id"] = json!(uuid::Uuid::new_v4());
    v.as_object_mut().unwrap().remove("pending_task");
    env.store()
        .put(
            &meta.key,
            serde_json::to_vec(&v).unwrap().into(),
            idempotent_submit::store::PutMode::Update(meta.etag),
        )
        .await
        .unwrap();
    env.store().delete(&first.task_key, None).await.unwrap();
    let again = env.keyed("t", json!(1), "k").await;
    assert_eq!(again.task_id, first.task_id);
    assert_eq!(again.status, "missing");
}

async fn another_input_under_the_same_key_is_a_conflict_and_writes_nothing(env: Env) {
    let first = env.keyed("t", json!({"a": 1}), "k").await;
    let before = env.keys().await;
    let e = env.keyed_err("t", json!({"a": 2}), "k").await;
    assert_eq!(
        e,
        SubmitError::Conflict {
            kind: ConflictKind::Input,
            task_id: first.task_id
        }
    );
    assert!(!e.is_retryable());
    assert_eq!(env.keys().await, before);
}

/// A submit of key `k` (input `1`) as `task_type` in `scope`.
async fn in_scope(q: &Queue, task_type: &str, scope: Scope) -> Result<Submitted, SubmitError> {
    let s = q.submit(task_type, json!(1)).idempotency_key("k");
    s.idempotency_scope(scope).await
}

async fn another_task_type_under_a_shared_scope_is_a_conflict(env: Env) {
    in_scope(&env.queue, "a", Scope::Queue).await.unwrap();
    let e = in_scope(&env.queue, "b", Scope::Queue).await.unwrap_err();
    assert!(
        matches!(
            e,
            SubmitError::Conflict {
                kind: ConflictKind::TaskType,
                ..
            }
        ),
        "{e:?}"
    );
}

async fn scopes_keep_keys_apart(env: Env) {
    let q = &env.queue;
    let a = q.submit("a", json!(1)).idempotency_key("k").await.unwrap();
    let b = q.submit("b", json!(1)).idempotency_key("k").await.unwrap();
    let g = in_scope(q, "a", Scope::Queue).await.unwrap();
    let c = in_scope(q, "a", Scope::custom("billing").unwrap()).await;
    let c = c.unwrap();
    let ids = [a.task_id, b.task_id, g.task_id, c.task_id];
    for (i, x) in ids.iter().enumerate() {
        for y in &ids[i + 1..] {
            assert_ne!(x, y);
        }
    }
    assert_eq!(g.idempotency.unwrap().scope, "queue");
    assert_eq!(c.idempotency.unwrap().scope, "billing");
    assert_eq!(env.count("idempotency/").await, 4);
    assert!(
        env.keys()
            .await
            .iter()
            .any(|k| k.starts_with("idempotency/billing/") && !k.contains(':'))
    );
    // A custom scope named like a task type shares that type's namespace.
    let same = q
        .submit("a", json!(1))
        .idempotency_key("k")
        .idempotency_scope(Scope::custom("a").unwrap())
        .await
        .unwrap();
    assert_eq!(same.task_id, a.task_id);
}

async fn key_order_and_whitespace_in_the_input_do_not_matter(env: Env) {
    let one: Value = serde_json::from_str(r#"{"b": {"y": 1, "x": [1, 2]}, "a": "s"}"#).unwrap();
    let two: Value = serde_json::from_str(r#"{"a":"s","b":{"x":[1,2],"y":1}}"#).unwrap();
    let first = env.keyed("t", one, "k").await;
    let again = env.keyed("t", two, "k").await;
    assert_eq!(first.task_id, again.task_id);
    assert!(again.replayed);
}

async fn an_expired_record_is_replaced_and_a_new_task_made(env: Env) {
    let first = env
        .queue
        .submit("t", json!(1))
        .idempotency_key("k")
        .idempotency_ttl(Duration::hours(1))
        .await
        .unwrap();
    env.clock.advance(Duration::hours(1) + Duration::seconds(1));
    // Even another input: an expired record counts as absent.
    let second = env.keyed("t", json!(2), "k").await;
    assert!(second.created());
    assert_ne!(second.task_id, first.task_id);
    let (rec, _) = env.queue.record("t", "k", None).await.unwrap().unwrap();
    assert_eq!(rec.task_id, second.task_id);
    assert_eq!(rec.status, Some(RecordStatus::Creating));
    assert_eq!(
        env.count("tasks/").await,
        2,
        "the old task is the queue's to keep"
    );
    let third = env.keyed("t", json!(2), "k").await;
    assert_eq!(third.task_id, second.task_id);
}

async fn submits_without_a_key_always_make_a_new_task(env: Env) {
    let a = env.queue.submit("t", json!(1)).await.unwrap();
    let b = env.queue.submit("t", json!(1)).await.unwrap();
    assert_ne!(a.task_id, b.task_id);
    assert!(a.created() && a.idempotency.is_none());
    assert_eq!(env.count("tasks/").await, 2);
    assert_eq!(env.count("ready/").await, 2);
    assert_eq!(env.count("idempotency/").await, 0);
    assert!(env.task(&a.task_key).await.get("idempotency").is_none());
}

async fn every_invalid_part_is_refused_before_anything_is_written(env: Env) {
    let q = &env.queue;
    let field = |e: SubmitError| match e {
        SubmitError::Invalid(ValidationError::Field { field, .. }) => field,
        other => panic!("expected a field error, got {other:?}"),
    };
    let key = |k: String| q.submit("t", json!(1)).idempotency_key(k);
    let ttl = |d: Duration| key("k".into()).idempotency_ttl(d);
    let refused = [
        (q.submit("", json!(1)).await, "task_type"),
        (q.submit("a/b", json!(1)).await, "task_type"),
        (q.submit(".x", json!(1)).await, "task_type"),
        (key("".into()).await, "idempotency_key"),
        (key("x".repeat(256)).await, "idempotency_key"),
        (key("a\tb".into()).await, "idempotency_key"),
        // A custom scope's name is checked where it is made: no unchecked
        // one can reach a submit.
        (
            Err(Scope::custom("no spaces").unwrap_err().into()),
            "idempotency_scope",
        ),
        (ttl(Duration::minutes(59)).await, "idempotency_ttl_seconds"),
        (ttl(Duration::days(366)).await, "idempotency_ttl_seconds"),
    ];
    for (r, want) in refused {
        assert_eq!(field(r.unwrap_err()), want);
    }
    let big = "x".repeat(262_144);
    let e = q.submit("t", json!(big)).await.unwrap_err();
    assert_eq!(
        e,
        SubmitError::InputTooLarge {
            size: 262_146,
            limit: 262_144
        }
    );
    assert!(env.keys().await.is_empty());
}

async fn a_required_key_that_is_missing_is_refused(env: Env) {
    let mut settings = common::settings();
    settings.require_key = true;
    let q = Queue::with_clock(env.store().clone(), Arc::new(env.clock.clone()), settings);
    let e = q.submit("t", json!(1)).await.unwrap_err();
    assert_eq!(e, SubmitError::Invalid(ValidationError::KeyRequired));
    assert!(q.submit("t", json!(1)).idempotency_key("k").await.is_ok());
}

async fn tenants_never_share_a_key(env: Env) {
    let q = &env.queue;
    let of_tenant = |t: &'static str| q.submit("t", json!(1)).idempotency_key("k").tenant(t);
    let a = of_tenant("user-a").await.unwrap();
    let b = of_tenant("user-b").await.unwrap();
    let plain = q.submit("t", json!(1)).idempotency_key("k").await.unwrap();
    assert_ne!(a.task_id, b.task_id);
    assert_ne!(a.task_id, plain.task_id);
    let a2 = of_tenant("user-a").await.unwrap();
    assert_eq!(a2.task_id, a.task_id);
    // The record keeps the principal's hash, never the principal.
    for k in env
        .keys()
        .await
        .into_iter()
        .filter(|k| k.starts_with("idempotency/"))
    {
        let body = env.store().get(&k).await.unwrap().body;
        assert!(!String::from_utf8_lossy(&body).contains("user-a"));
    }
}

/// The suite on a bucket of `$store` (memory, memory_versioned; on moto
/// or SeaweedFS, a `common::Versioning`).
macro_rules! suite {
    ($($name:ident),* $(,)?) => {
        suite!(@memory memory, memory_store, $($name),*);
        suite!(@memory memory_versioned, memory_store_versioned, $($name),*);
        suite!(@s3 moto, moto_store_with, Off, $($name),*);
        suite!(@s3 moto_versioned, moto_store_with, On, $($name),*);
        suite!(@s3 seaweedfs, seaweedfs_store_with, Off, $($name),*);
        suite!(@s3 seaweedfs_versioned, seaweedfs_store_with, On, $($name),*);
    };
    (@memory $module:ident, $store:ident, $($name:ident),*) => {
        mod $module {
            use super::*;
            $(
                #[tokio::test]
                async fn $name() {
                    let clock = ManualClock::at_epoch();
                    let store = common::$store(&clock);
                    let queue = Queue::with_clock(store, Arc::new(clock.clone()), common::settings());
                    super::$name(Env { queue, clock }).await;
                }
            )*
        }
    };
    (@s3 $module:ident, $store:ident, $versioning:ident, $($name:ident),*) => {
        mod $module {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    // S3 stamps LastModified with real time: start there.
                    // The tests move the clock minutes ahead of moto's, which
                    // cannot be moved: the injected clock stands for S3's.
                    let clock = ManualClock::new(chrono::Utc::now());
                    let store = common::$store(common::Versioning::$versioning).await;
                    let settings = idempotent_submit::Settings {
                        clock_check: idempotent_submit::ClockCheck::TrustClock,
                        ..common::settings()
                    };
                    let queue = Queue::with_clock(store, Arc::new(clock.clone()), settings);
                    super::$name(Env { queue, clock }).await;
                }
            )*
        }
    };
}

suite!(
    a_new_key_creates_one_task_its_marker_and_a_record_written_once,
    a_record_an_earlier_version_turned_ready_whose_task_is_deleted_at_once_is_missing_at_once,
    a_replay_answers_the_same_task_and_writes_nothing,
    a_replay_reports_the_tasks_current_status,
    a_settled_record_whose_task_is_gone_answers_missing_and_writes_nothing,
    another_input_under_the_same_key_is_a_conflict_and_writes_nothing,
    another_task_type_under_a_shared_scope_is_a_conflict,
    scopes_keep_keys_apart,
    key_order_and_whitespace_in_the_input_do_not_matter,
    an_expired_record_is_replaced_and_a_new_task_made,
    submits_without_a_key_always_make_a_new_task,
    every_invalid_part_is_refused_before_anything_is_written,
    a_required_key_that_is_missing_is_refused,
    tenants_never_share_a_key,
);
