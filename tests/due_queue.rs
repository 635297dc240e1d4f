//! The due queue end to end on moto: a record written to moto's S3, its
//! event notification received from moto's SQS, handed to the `sweep`
//! handler as an SQS event, and drained by `idem sweep --due-queue`.

use crate::common;

use std::sync::Arc;

use chrono::{Duration, Utc};
use idempotent_submit::lambda::{Metrics, Sweeper, handle_sweep};
use idempotent_submit::store::{Fault, FaultyStore, Op, S3Store, Store};
use idempotent_submit::testing::protocol::{Record, RecordStatus};
use idempotent_submit::{ManualClock, Queue};
use lambda_runtime::{Context, LambdaEvent};
use serde_json::{Value, json};

/// A submit of `key` that died right after writing its record.
async fn interrupted(store: &S3Store, key: &str) {
    let f = common::world::dying_at(
        store.clone(),
        Op::PutCreate,
        "idempotency/",
        Fault::CrashAfter,
    );
    Queue::new(f, common::settings())
        .submit("t", json!({"k": key}))
        .idempotency_key(key)
        .await
        .unwrap_err();
}

fn sweeper(store: &S3Store, clock: &ManualClock) -> Sweeper {
    Sweeper {
        queue: Queue::with_clock(store.clone(), Arc::new(clock.clone()), common::settings()),
        bucket: store.bucket().to_owned(),
        metrics: Metrics::collecting("sweep"),
    }
}

async fn only_record(store: &S3Store) -> (String, Record) {
    let k = common::first_under(common::all_keys(store).await, "idempotency/");
    let o = store.get(&k).await.unwrap();
    (k, Record::parse(&o.body).unwrap())
}

on_both_buckets!(a_record_event_from_moto_finishes_an_interrupted_submit_through_the_sweep_handler);
async fn a_record_event_from_moto_finishes_an_interrupted_submit_through_the_sweep_handler(
    versioning: common::Versioning,
) {
    let store = common::moto_store_with(versioning).await;
    let url = common::moto_due_queue(&store, 0).await;
    interrupted(&store, "a").await;
    let (rkey, rec) = only_record(&store).await;
    assert_eq!(rec.status, Some(RecordStatus::Creating));
    let written = store.get(&rkey).await.unwrap().meta.etag;

    // S3's test event first, then the record's event, its key URL-encoded.
    let messages = common::receive_all(&url, 60).await;
    assert_eq!(messages.len(), 2, "{messages:?}");
    assert!(messages[0].body().unwrap().contains("s3:TestEvent"));
    let body = messages[1].body().unwrap();
    assert!(body.contains("idempotency%2Ft%2F"), "{body}");

    // Handed over early (by the sweeper's clock): the record's message comes
    // back in batchItemFailures; the test event is acknowledged.
    let clock = ManualClock::new(Utc::now() + Duration::seconds(60));
    let mut with_foreign = messages.clone();
    let foreign = body.replace("idempotency%2Ft%2F", "tasks%2Fa%2F");
    with_foreign.push(
        aws_sdk_sqs::types::Message::builder()
            .message_id("foreign")
            .body(foreign)
            .build(),
    );
    let event = common::sqs_event(&with_foreign);
    let out = handle_sweep(
        &sweeper(&store, &clock),
        LambdaEvent::new(event.clone(), Context::default()),
    )
    .await
    .unwrap();
    let record_message = messages[1].message_id().unwrap();
    assert_eq!(
        out,
        json!({"batchItemFailures": [{"itemIdentifier": record_message}]})
    );
    assert_eq!(
        only_record(&store).await.1.status,
        Some(RecordStatus::Creating)
    );

    // Redelivered once it is stale: finished, the record left as written.
    clock.set(Utc::now() + Duration::seconds(660));
    let s = sweeper(&store, &clock);
    let out = handle_sweep(&s, LambdaEvent::new(event, Context::default()))
        .await
        .unwrap();
    assert_eq!(out, json!({"batchItemFailures": []}));
    let (_, rec) = only_record(&store).await;
    assert_eq!(rec.status, Some(RecordStatus::Creating));
    assert!(rec.pending_task.is_some());
    assert_eq!(
        store.get(&rkey).await.unwrap().meta.etag,
        written,
        "the record is written once"
    );
    assert!(store.get(&rec.task_key).await.is_ok(), "the task object");
    let keys = common::all_keys(&store).await;
    assert_eq!(keys.iter().filter(|k| k.starts_with("ready/")).count(), 1);
    let line = &s.metrics.lines()[0];
    assert_eq!(line["SweepFinished"], 1);
    assert_eq!(
        line["SweepIgnored"], 2,
        "the test event and the foreign key"
    );

    // The sweeper wrote no record, so no other event comes.
    let again = common::receive_all(&url, 60).await;
    assert!(again.is_empty(), "{again:?}");
    // The record's event delivered once more (delivery is at least once):
    // the record read, its task and marker checked, nothing written.
    redelivered_reads_and_writes_nothing(&store, &clock, &messages[1..], &rkey, &rec).await;
    assert_eq!(store.get(&rkey).await.unwrap().meta.etag, written);
}

/// The sweep function handles `again` (a record's event delivered once
/// more): it reads the record at `rkey`, and checks its task and its marker.
async fn redelivered_reads_and_writes_nothing(
    store: &S3Store,
    clock: &ManualClock,
    again: &[aws_sdk_sqs::types::Message],
    rkey: &str,
    rec: &Record,
) {
    let f = FaultyStore::new(store.clone());
    let q = Queue::with_clock(f.clone(), Arc::new(clock.clone()), common::settings());
    let s = Sweeper {
        queue: q,
        bucket: store.bucket().to_owned(),
        metrics: Metrics::collecting("sweep"),
    };
    let out = handle_sweep(
        &s,
        LambdaEvent::new(common::sqs_event(again), Context::default()),
    )
    .await
    .unwrap();
    assert_eq!(out, json!({"batchItemFailures": []}));
    let calls: Vec<(Op, String)> = f.calls().into_iter().map(|c| (c.op, c.key)).collect();
    assert_eq!(calls.len(), 3, "{calls:?}");
    assert_eq!(calls[0], (Op::Get, rkey.to_owned()));
    assert!(
        calls[1..].contains(&(Op::Get, rec.task_key.clone())),
        "{calls:?}"
    );
    assert!(
        calls[1..]
            .iter()
            .any(|(op, k)| *op == Op::Head && k.starts_with("ready/")),
        "{calls:?}"
    );
}

/// The report of an `idem` run with `STALE_CREATING_AFTER_SECONDS` at
/// `stale`, which must exit 0.
async fn idem(bucket: &str, stale: &str, args: &[&str]) -> Value {
    let (code, v) = common::idem(bucket, &[("STALE_CREATING_AFTER_SECONDS", stale)], args).await;
    assert_eq!(code, 0, "{v}");
    v
}

on_both_buckets!(idem_drains_the_due_queue_as_the_function_does);
async fn idem_drains_the_due_queue_as_the_function_does(versioning: common::Versioning) {
    let store = common::moto_store_with(versioning).await;
    let url = common::moto_due_queue(&store, 0).await;
    interrupted(&store, "a").await;
    let (rkey, _) = only_record(&store).await;
    let written = store.get(&rkey).await.unwrap().meta.etag;
    let args = ["sweep", "--due-queue", &url, "--wait-seconds", "0"];

    // A dry run reports and leaves every message in the queue.
    let mut dry = args.to_vec();
    dry.push("--dry-run");
    let v = idem(store.bucket(), "1", &dry).await;
    assert_eq!(
        (v["messages"].as_u64(), v["dry_run"].as_bool()),
        (Some(2), Some(true)),
        "{v}"
    );
    assert_eq!(
        only_record(&store).await.1.status,
        Some(RecordStatus::Creating)
    );

    // A record younger than STALE_CREATING_AFTER_SECONDS is left in the
    // queue for later.
    let v = idem(store.bucket(), "900", &args).await;
    assert_eq!(
        (v["messages"].as_u64(), v["retried"].as_u64()),
        (Some(2), Some(1)),
        "{v}"
    );
    assert_eq!(v["ignored"], 1, "the test event: {v}");

    // Once it is stale (and the message is visible again), it is finished.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let v = idem(store.bucket(), "1", &args).await;
    assert_eq!(
        (v["finished"].as_u64(), v["retried"].as_u64()),
        (Some(1), Some(0)),
        "{v}"
    );
    assert_eq!(
        only_record(&store).await.1.status,
        Some(RecordStatus::Creating)
    );
    assert_eq!(
        store.get(&rkey).await.unwrap().meta.etag,
        written,
        "the record is written once"
    );
    // The record's message alone: the sweeper wrote no record, so no event
    // of its own came while the queue was drained; the queue is empty now.
    assert_eq!(
        (v["messages"].as_u64(), v["scanned"].as_u64()),
        (Some(1), Some(1)),
        "{v}"
    );
    let v = idem(store.bucket(), "1", &args).await;
    assert_eq!(v["messages"], 0, "{v}");
}
