//! Task options and offloaded inputs through the protocol: the fields they
//! set, what a key promises about them, the bounds, and every crash point of
//! an offloaded submit, with the fault-injecting store and the injectable
//! clock (buquet's own worker meets them in tests/interop.rs).

mod http;
mod orphans;
mod payloads;

use crate::common;
use crate::common::World;

use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use idempotent_submit::lambda::{App, Metrics, handle_submit};
use idempotent_submit::store::{Fault, FaultyStore, Op, PutMode, Store};
use idempotent_submit::testing::protocol::{RecordOutcome, TaskRetryPolicy, hash};
use idempotent_submit::{Clock, ConflictKind, Queue, SubmitError, ValidationError};
use lambda_runtime::{Context, LambdaEvent};
use serde_json::{Value, json};

fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

/// An input of `n` bytes or so.
fn big(n: usize) -> Value {
    json!({"doc": "x".repeat(n)})
}

/// A keyed submit (key `k`, type `t`) of `input` by `q`, its input
/// offloaded past 16 bytes.
async fn offloaded(q: &Queue, input: &Value) -> Result<idempotent_submit::Submitted, SubmitError> {
    q.submit("t", input)
        .idempotency_key("k")
        .payload_refs(16)
        .await
}

/// A refusal for good: S3's 403.
/// A submit of key `k` (input `{"n": 1}`) with no options, which succeeds.
/// The tests' keyed submit: type `t`, input `{"n": n}`, key `k`, before
/// its options.
fn keyed(q: &Queue, n: i64) -> idempotent_submit::SubmitBuilder<'_> {
    q.submit("t", json!({ "n": n })).idempotency_key("k")
}

async fn without_options(q: &Queue) -> idempotent_submit::Submitted {
    keyed(q, 1).await.unwrap()
}

fn forbidden() -> Fault {
    Fault::Fail(idempotent_submit::StoreError::Fatal("403".into()))
}

/// What a conflict conflicts on.
fn conflict_kind(e: SubmitError) -> ConflictKind {
    match e {
        SubmitError::Conflict { kind, .. } => kind,
        other => panic!("expected a conflict, got {other:?}"),
    }
}

fn field_of(e: SubmitError) -> &'static str {
    match e {
        SubmitError::Invalid(ValidationError::Field { field, .. }) => field,
        other => panic!("expected a 400 naming a field, got {other:?}"),
    }
}

#[tokio::test]
async fn a_task_carries_its_options_as_buquets_submit_sets_them_and_its_marker_is_in_its_minute() {
    let w = World::new();
    w.clock.advance(Duration::seconds(10));
    let policy = TaskRetryPolicy {
        initial_interval_ms: 500,
        max_interval_ms: 30_000,
        multiplier: 3.0,
        jitter_percent: 0.1,
    };
    let s = w
        .process()
        .submit("t", json!({"n": 1}))
        .idempotency_key("k")
        .timeout(Duration::minutes(30))
        .max_retries(10)
        .retry_policy(policy)
        .delay(Duration::seconds(90))
        .max_reschedules(4)
        .task_ttl(Duration::hours(1))
        .await
        .unwrap();
    let task = w.task("k").await.0;
    assert_eq!(task["id"], s.task_id.to_string());
    assert_eq!(task["timeout_seconds"], 1800);
    assert_eq!(task["max_retries"], 10);
    assert_eq!(
        task["retry_policy"],
        json!({"initial_interval_ms": 500, "max_interval_ms": 30000, "multiplier": 3.0, "jitter_percent": 0.1})
    );
    assert_eq!(task["max_reschedules"], 4);
    // 90 s after the submit, in S3's time; the task's own expiry an hour
    // after the submit (buquet counts it from the submit).
    assert_eq!(task["available_at"], "2026-01-27T12:01:40Z");
    assert_eq!(task["expires_at"], "2026-01-27T13:00:10Z");
    assert_eq!(task["created_at"], "2026-01-27T12:00:10Z");
    assert!(task.get("input_ref").is_none());
    // The marker is in the folder of available_at's minute (100 s: minute 1).
    assert_eq!(
        w.keys("ready/"),
        vec![format!(
            "ready/{}/{:010}/{}",
            &s.task_id.to_string()[..1],
            (1_769_515_200 + 100) / 60,
            s.task_id
        )]
    );
    assert!(w.record("k").await.options_hash.is_some());
}

#[tokio::test]
async fn a_task_without_options_keeps_buquets_defaults_and_its_record_has_no_options_hash() {
    let w = World::new();
    without_options(&w.process()).await;
    let task = w.task("k").await.0;
    assert_eq!(task["timeout_seconds"], 300);
    assert_eq!(task["max_retries"], 3);
    for absent in ["max_reschedules", "expires_at", "input_ref"] {
        assert!(task.get(absent).is_none(), "{absent} in {task}");
    }
    assert_eq!(w.record("k").await.options_hash, None);
}

#[tokio::test]
async fn a_retry_with_the_same_relative_delay_replays_and_other_options_are_a_conflict() {
    let w = World::new();
    let q = w.process();
    let a_minute_on = || {
        let submit = keyed(&q, 1);
        submit.delay(Duration::seconds(60))
    };
    let first = a_minute_on().await.unwrap();
    // Thirty seconds later the same delay gives another time; the hash is of
    // the delay as sent, so it replays.
    w.clock.advance(Duration::seconds(30));
    let again = a_minute_on().await.unwrap();
    assert_eq!((again.task_id, again.replayed), (first.task_id, true));
    let before = w.bucket.keys();
    for other in [
        keyed(&q, 1).delay(Duration::seconds(61)),
        keyed(&q, 1),
        keyed(&q, 1).delay(Duration::seconds(60)).max_retries(3),
    ] {
        match other.await.unwrap_err() {
            SubmitError::Conflict { kind, task_id } => {
                assert_eq!((kind, task_id), (ConflictKind::Options, first.task_id));
            }
            e => panic!("expected an options conflict, got {e:?}"),
        }
    }
    // The type and the input are still told first.
    let e = keyed(&q, 2).delay(Duration::seconds(61)).await;
    assert_eq!(conflict_kind(e.unwrap_err()), ConflictKind::Input);
    assert_eq!(w.bucket.keys(), before, "a conflict writes nothing");
}

#[tokio::test]
async fn a_record_of_this_service_without_options_conflicts_with_a_submit_that_has_some() {
    let w = World::new();
    let q = w.process();
    without_options(&q).await;
    let e = keyed(&q, 1).timeout(Duration::seconds(60)).await;
    assert_eq!(conflict_kind(e.unwrap_err()), ConflictKind::Options);
}

#[tokio::test]
async fn a_record_of_buquets_clients_is_compared_on_task_type_and_input_only() {
    let w = World::new();
    let q = w.process();
    let first = without_options(&q).await;
    // As buquet's clients write records: no write_id, status or options.
    let key = w.record_key("k");
    let mut rec = w.json(&key).await;
    for f in [
        "write_id",
        "status",
        "options_hash",
        "pending_task",
        "scope",
    ] {
        rec.as_object_mut().unwrap().remove(f);
    }
    w.bucket
        .put(
            &key,
            serde_json::to_vec(&rec).unwrap().into(),
            PutMode::Overwrite,
        )
        .await
        .unwrap();
    let s = keyed(&q, 1)
        .timeout(Duration::seconds(60))
        .max_retries(7)
        .await
        .unwrap();
    assert_eq!((s.task_id, s.replayed), (first.task_id, true));
}

#[tokio::test]
async fn a_schedule_beyond_the_records_life_and_an_expiry_before_availability_are_refused_and_write_nothing()
 {
    let w = World::new();
    let q = w.process();
    let cases = [
        (
            q.submit("t", 1)
                .idempotency_key("k")
                .idempotency_ttl(Duration::hours(1))
                .delay(Duration::hours(2)),
            "delay_seconds",
        ),
        (
            q.submit("t", 1)
                .idempotency_key("k")
                .idempotency_ttl(Duration::hours(1))
                .schedule_at(at("2026-01-27T13:00:00Z")),
            "schedule_at",
        ),
        (
            q.submit("t", 1)
                .delay(Duration::seconds(60))
                .task_ttl(Duration::seconds(60)),
            "ttl_seconds",
        ),
        (
            q.submit("t", 1)
                .schedule_at(at("2026-01-28T12:00:00Z"))
                .task_expires_at(at("2026-01-28T11:00:00Z")),
            "expires_at",
        ),
        (
            q.submit("t", 1)
                .schedule_at(at("2026-01-28T12:00:00Z"))
                .delay(Duration::seconds(1)),
            "delay_seconds",
        ),
        (
            q.submit("t", 1).timeout(Duration::milliseconds(1500)),
            "timeout_seconds",
        ),
        (q.submit("t", 1).max_retries(101), "max_retries"),
        (
            q.submit("t", 1).retry_policy(TaskRetryPolicy {
                multiplier: f64::NAN,
                ..Default::default()
            }),
            "retry_policy.multiplier",
        ),
        // Without a key, nothing further ahead than the longest record life.
        (q.submit("t", 1).delay(Duration::days(366)), "delay_seconds"),
    ];
    for (b, field) in cases {
        assert_eq!(field_of(b.await.unwrap_err()), field);
    }
    assert!(w.bucket.keys().is_empty());
    assert_eq!(w.faulty.call_count(), 0, "refused before any request");
}
