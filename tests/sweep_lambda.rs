//! The `sweep` handler on the sample events of events/.

use crate::common;

use std::sync::Arc;

use crate::common::event;
use chrono::Duration;
use idempotent_submit::lambda::{Metrics, schedule};
use idempotent_submit::store::{FaultyStore, Op};
use idempotent_submit::{ManualClock, Queue};
use lambda_runtime::{Context, LambdaEvent};
use serde_json::json;

async fn interrupted_bucket() -> (ManualClock, idempotent_submit::MemoryStore) {
    let w = common::World::new();
    w.interrupted_after_its_record("k", json!(1)).await;
    w.clock.advance(Duration::minutes(11));
    (w.clock, w.bucket)
}

/// The schedule's handler on `event`, which must succeed.
async fn scheduled(
    q: &Queue,
    event: serde_json::Value,
) -> idempotent_submit::protocol::SweepSummary {
    let metrics = Metrics::collecting("sweep");
    let event = LambdaEvent::new(event, Context::default());
    schedule::handle(q, &metrics, event).await.unwrap()
}

#[tokio::test]
async fn a_scheduled_event_runs_a_sweep_and_answers_its_summary() {
    let (clock, bucket) = interrupted_bucket().await;
    let q = Queue::with_clock(bucket.clone(), Arc::new(clock), common::settings());
    let s = scheduled(&q, event("sweep-scheduled.json")).await;
    assert_eq!(
        (s.scanned, s.finished, s.complete, s.dry_run),
        (1, 1, true, false)
    );
    let v = serde_json::to_value(&s).unwrap();
    let mut fields: Vec<_> = v.as_object().unwrap().keys().cloned().collect();
    fields.sort();
    assert_eq!(
        fields,
        [
            "complete",
            "dry_run",
            "errors",
            "expired_deleted",
            "finished",
            "scanned"
        ]
    );
    assert_eq!(
        bucket
            .keys()
            .iter()
            .filter(|k| k.starts_with("tasks/"))
            .count(),
        1
    );
}

#[tokio::test]
async fn a_dry_run_event_changes_nothing() {
    let (clock, bucket) = interrupted_bucket().await;
    let before = bucket.snapshot();
    let q = Queue::with_clock(bucket.clone(), Arc::new(clock), common::settings());
    let s = scheduled(&q, event("sweep-dry-run.json")).await;
    assert!(s.dry_run);
    assert_eq!(s.finished, 1, "it reports what it would finish");
    assert_eq!(bucket.snapshot(), before, "keys, bytes and ETags");
    // The real pass then does what the dry run said.
    let real = scheduled(&q, json!({})).await;
    assert_eq!((real.finished, real.reads), (s.finished, s.reads));
}

#[tokio::test]
async fn an_empty_event_is_a_plain_sweep() {
    let (clock, bucket) = interrupted_bucket().await;
    let q = Queue::with_clock(bucket, Arc::new(clock), common::settings());
    let s = scheduled(&q, json!({})).await;
    assert!(!s.dry_run && s.complete);
}

#[tokio::test]
async fn a_due_queue_batch_from_events_is_answered_with_a_partial_batch_response() {
    let clock = ManualClock::at_epoch();
    let bucket = common::memory_store(&clock);
    let f = FaultyStore::new(bucket.clone());
    let sweeper = idempotent_submit::lambda::Sweeper {
        queue: Queue::with_clock(f.clone(), Arc::new(clock), common::settings()),
        bucket: "local-queue".into(),
        metrics: Metrics::collecting("sweep"),
    };
    let out = idempotent_submit::lambda::handle_sweep(
        &sweeper,
        LambdaEvent::new(event("sweep-due-batch.json"), Context::default()),
    )
    .await
    .unwrap();
    assert_eq!(out, json!({"batchItemFailures": []}));
    // The test event is not read; the record (gone) is read once.
    let calls: Vec<_> = f.calls().into_iter().map(|c| (c.op, c.key)).collect();
    assert_eq!(
        calls,
        [(
            Op::Get,
            "idempotency/charge_customer/3f1c2a9e8b7d6c5b4a39281706f5e4d3c2b1a09f8e7d6c5b4a3928170615e4d3.json".to_owned()
        )]
    );
    let line = &sweeper.metrics.lines()[0];
    assert_eq!(
        (line["SweepIgnored"].as_u64(), line["SweepScanned"].as_u64()),
        (Some(1), Some(1))
    );
}
