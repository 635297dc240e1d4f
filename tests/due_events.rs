//! The sweeper's main path: record events from the due queue, in memory.
//! What each record state leads to, what a batch answers, and requests per
//! record write that do not grow with the bucket.

use std::collections::BTreeMap;

use crate::common::{World, unavailable};
use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use bytes::Bytes;
use chrono::Duration;
use idempotent_submit::intake::due::{DueBatch, DueMessage, handle_messages};
use idempotent_submit::lambda::{Metrics, Sweeper, handle_sweep};
use idempotent_submit::protocol::RecordStatus;
use idempotent_submit::store::{FaultyStore, MemoryStore, Op, PutMode, Store};
use lambda_runtime::{Context, LambdaEvent};
use serde_json::{Value, json};

const BUCKET: &str = "queue-bucket";

impl World {
    /// A submit of `key` that answered: its record is `creating`, its task
    /// and marker are in place.
    async fn answered(&self, key: &str, ttl: Duration) -> String {
        self.queue_over(self.bucket.clone())
            .submit("t", json!({"k": key}))
            .idempotency_key(key)
            .idempotency_ttl(ttl)
            .await
            .unwrap();
        self.record_key(key)
    }

    /// A submit of `key` that answered, whose record the sweeper of an
    /// earlier version then turned `ready`: a new write, without
    /// `pending_task`, under a new write_id.
    async fn turned_ready_by_an_earlier_version(&self, key: &str, ttl: Duration) -> String {
        let rkey = self.answered(key, ttl).await;
        let o = self.bucket.get(&rkey).await.unwrap();
        let mut v: Value = serde_json::from_slice(&o.body).unwrap();
        v["status"] = json!("ready");
        v["write_id"] = json!(uuid::Uuid::new_v4());
        v.as_object_mut().unwrap().remove("pending_task");
        self.bucket
            .put(
                &rkey,
                serde_json::to_vec(&v).unwrap().into(),
                PutMode::Update(o.meta.etag),
            )
            .await
            .unwrap();
        rkey
    }

    /// Hands `messages` to the sweeper over this bucket.
    async fn deliver(&self, messages: &[DueMessage]) -> DueBatch {
        let q = self.queue_over(self.bucket.clone());
        handle_messages(&q, BUCKET, messages, false, None).await
    }

    /// `rkey`'s event (message `m1`) handled through `f`.
    async fn deliver_through(&self, f: &FaultyStore<MemoryStore>, rkey: &str) -> DueBatch {
        let m = [msg("m1", notification(BUCKET, rkey))];
        handle_messages(&self.queue_over(f.clone()), BUCKET, &m, false, None).await
    }

    async fn status(&self, rkey: &str) -> Option<RecordStatus> {
        let o = self.bucket.get(rkey).await.ok()?;
        idempotent_submit::protocol::Record::parse(&o.body)
            .unwrap()
            .status
    }

    /// The record's ETag: the same ETag, the same write.
    async fn etag(&self, rkey: &str) -> idempotent_submit::store::ETag {
        self.bucket.get(rkey).await.unwrap().meta.etag
    }
}

/// The body S3 sends for a write of `key` (the key URL-encoded, as S3 and
/// moto send it).
fn notification(bucket: &str, key: &str) -> String {
    json!({"Records": [{
        "eventVersion": "2.1",
        "eventSource": "aws:s3",
        "awsRegion": "us-east-1",
        "eventTime": "2026-01-27T12:00:00.000Z",
        "eventName": "ObjectCreated:Put",
        "s3": {
            "s3SchemaVersion": "1.0",
            "bucket": {"name": bucket, "arn": format!("arn:aws:s3:::{bucket}")},
            "object": {"key": key.replace('/', "%2F"), "size": 512, "eTag": "0123"},
        },
    }]})
    .to_string()
}

fn msg(id: &str, body: String) -> DueMessage {
    DueMessage {
        id: id.into(),
        body,
    }
}

#[tokio::test]
async fn a_stale_interrupted_submit_is_finished_by_its_event_and_its_record_left_as_written() {
    let w = World::new();
    let rkey = w.interrupted_after_its_record("a", json!({"k": "a"})).await;
    let written = w.etag(&rkey).await;
    w.clock.advance(Duration::seconds(600));
    let b = w.deliver(&[msg("m1", notification(BUCKET, &rkey))]).await;
    assert!(b.retry.is_empty());
    assert_eq!((b.summary.scanned, b.summary.finished), (1, 1));
    assert_eq!(w.status(&rkey).await, Some(RecordStatus::Creating));
    assert_eq!(w.etag(&rkey).await, written, "the record is written once");
    assert_eq!((w.count("tasks/"), w.count("ready/")), (1, 1));
}

#[tokio::test]
async fn an_answered_submits_event_checks_both_objects_and_writes_nothing() {
    let w = World::new();
    let rkey = w.answered("a", Duration::days(30)).await;
    assert_eq!(w.status(&rkey).await, Some(RecordStatus::Creating));
    let before = w.bucket.snapshot();
    w.clock.advance(Duration::seconds(600));
    let f = FaultyStore::new(w.bucket.clone());
    let b = w.deliver_through(&f, &rkey).await;
    assert!(b.retry.is_empty());
    assert_eq!(
        (b.summary.scanned, b.summary.finished, b.summary.errors),
        (1, 0, 0)
    );
    assert_eq!(w.bucket.snapshot(), before, "byte for byte");
    // The record, then its task and marker side by side; no write.
    let ops: Vec<(Op, String)> = f
        .calls()
        .iter()
        .map(|c| (c.op, c.key.split('/').next().unwrap_or("").to_owned()))
        .collect();
    assert_eq!(ops.len(), 3, "{ops:?}");
    assert_eq!(ops[0], (Op::Get, "idempotency".into()));
    assert!(ops[1..3].contains(&(Op::Get, "tasks".into())));
    assert!(ops[1..3].contains(&(Op::Head, "ready".into())));
}

#[tokio::test]
async fn a_record_an_earlier_version_turned_ready_is_read_once_by_its_event_and_left_alone() {
    let w = World::new();
    let rkey = w
        .turned_ready_by_an_earlier_version("a", Duration::days(30))
        .await;
    let before = w.bucket.snapshot();
    w.clock.advance(Duration::seconds(600));
    let f = FaultyStore::new(w.bucket.clone());
    let b = w.deliver_through(&f, &rkey).await;
    assert!(b.retry.is_empty());
    assert_eq!((b.summary.scanned, b.summary.errors), (1, 0));
    let calls: Vec<(Op, String)> = f.calls().into_iter().map(|c| (c.op, c.key)).collect();
    assert_eq!(calls, [(Op::Get, rkey)]);
    assert_eq!(w.bucket.snapshot(), before);
}

/// `rkey`'s event while every `op` under `prefix` fails with a 503: it goes
/// back to the queue, counted an error, nothing written under `prefix`;
/// once the store heals, its redelivery finishes the record, still
/// `creating`.
async fn back_until_healed(w: &World, rkey: &str, op: Op, prefix: &str) {
    let f = FaultyStore::new(w.bucket.clone());
    f.inject(Some(op), prefix, 1, usize::MAX, unavailable("503"));
    let b = w.deliver_through(&f, rkey).await;
    assert_eq!(b.retry, ["m1"]);
    assert_eq!(b.summary.errors, 1);
    assert_eq!(w.count(prefix), 0);
    f.heal();
    let b = w.deliver_through(&f, rkey).await;
    assert!(b.retry.is_empty());
    assert_eq!(b.summary.finished, 1);
    assert_eq!(w.status(rkey).await, Some(RecordStatus::Creating));
}

#[tokio::test]
async fn a_record_whose_marker_is_missing_keeps_its_message_until_the_marker_is_written() {
    let w = World::new();
    let rkey = w.answered("a", Duration::days(30)).await;
    let written = w.etag(&rkey).await;
    let marker = w.keys("ready/")[0].clone();
    w.bucket.delete(&marker, None).await.unwrap();
    w.clock.advance(Duration::seconds(600));
    // The marker cannot be written this time: the message must come back.
    back_until_healed(&w, &rkey, Op::Put, "ready/").await;
    assert_eq!(w.etag(&rkey).await, written, "the record is written once");
    assert_eq!(
        w.bucket.keys().into_iter().filter(|k| *k == marker).count(),
        1
    );
}

#[tokio::test]
async fn an_early_event_goes_back_to_the_queue_and_changes_nothing() {
    let w = World::new();
    let rkey = w.interrupted_after_its_record("a", json!({"k": "a"})).await;
    // Early by more than the due path's tolerance (DUE_EARLY_TOLERANCE, 2 s).
    w.clock.advance(Duration::seconds(597));
    let before = w.bucket.keys();
    let b = w.deliver(&[msg("m1", notification(BUCKET, &rkey))]).await;
    assert_eq!(b.retry, ["m1"]);
    assert_eq!((b.summary.early, b.summary.errors), (1, 0));
    assert_eq!(w.bucket.keys(), before);
    assert_eq!(w.status(&rkey).await, Some(RecordStatus::Creating));
}

#[tokio::test]
async fn an_event_past_the_finish_deadline_is_counted_and_acknowledged() {
    let w = World::new();
    let rkey = w.interrupted_after_its_record("a", json!({"k": "a"})).await;
    w.clock.advance(Duration::seconds(2400));
    let b = w.deliver(&[msg("m1", notification(BUCKET, &rkey))]).await;
    assert!(b.retry.is_empty());
    assert_eq!((b.summary.errors, b.summary.past_deadline), (1, 1));
    assert_eq!(w.count("tasks/"), 0);
}

#[tokio::test]
async fn an_expired_record_named_by_an_event_is_deleted() {
    let w = World::new();
    let rkey = w.answered("a", Duration::hours(1)).await;
    w.clock.advance(Duration::hours(2));
    let b = w.deliver(&[msg("m1", notification(BUCKET, &rkey))]).await;
    assert!(b.retry.is_empty());
    assert_eq!(b.summary.expired_deleted, 1);
    assert_eq!(w.count("idempotency/"), 0);
}

#[tokio::test]
async fn a_storage_failure_sends_the_message_back_and_the_redelivery_finishes_it() {
    let w = World::new();
    let rkey = w.interrupted_after_its_record("a", json!({"k": "a"})).await;
    w.clock.advance(Duration::seconds(700));
    back_until_healed(&w, &rkey, Op::PutCreate, "tasks/").await;
    assert_eq!((w.count("tasks/"), w.count("ready/")), (1, 1));
}

#[tokio::test]
async fn test_events_foreign_keys_other_buckets_and_junk_are_acknowledged_without_a_read() {
    let w = World::new();
    let rkey = w.interrupted_after_its_record("a", json!({"k": "a"})).await;
    w.clock.advance(Duration::seconds(700));
    let f = FaultyStore::new(w.bucket.clone());
    let q = w.queue_over(f.clone());
    let messages = [
        msg(
            "test",
            json!({"Service": "Amazon S3", "Event": "s3:TestEvent", "Bucket": BUCKET}).to_string(),
        ),
        msg("task", notification(BUCKET, "tasks/a/x.json")),
        msg("other", notification("another-bucket", &rkey)),
        msg("junk", "not json".into()),
        msg(
            "sns",
            json!({"Records": [{"eventSource": "aws:sns"}]}).to_string(),
        ),
        msg("empty", "{}".into()),
    ];
    let b = handle_messages(&q, BUCKET, &messages, false, None).await;
    assert!(b.retry.is_empty(), "{:?}", b.retry);
    assert_eq!((b.summary.ignored, b.summary.unrecognized), (3, 3));
    assert_eq!((b.summary.scanned, b.summary.reads), (0, 0));
    assert!(f.calls().is_empty(), "{:?}", f.calls());
    assert_eq!(w.status(&rkey).await, Some(RecordStatus::Creating));
}

#[tokio::test]
async fn a_record_named_twice_in_a_batch_is_read_once_and_both_messages_are_answered() {
    let w = World::new();
    let stale = w.answered("r", Duration::days(30)).await;
    w.clock.advance(Duration::seconds(300));
    let early = w.interrupted_after_its_record("e", json!({"k": "e"})).await;
    w.clock.advance(Duration::seconds(300));
    let f = FaultyStore::new(w.bucket.clone());
    let q = w.queue_over(f.clone());
    let messages = [
        msg("r1", notification(BUCKET, &stale)),
        msg("r2", notification(BUCKET, &stale)),
        msg("e1", notification(BUCKET, &early)),
        msg("e2", notification(BUCKET, &early)),
    ];
    let b = handle_messages(&q, BUCKET, &messages, false, None).await;
    let mut retry = b.retry.clone();
    retry.sort();
    assert_eq!(retry, ["e1", "e2"]);
    assert_eq!(b.summary.scanned, 2);
    let record_gets = |k: &str| {
        f.calls()
            .iter()
            .filter(|c| c.op == Op::Get && c.key == k)
            .count()
    };
    assert_eq!((record_gets(&stale), record_gets(&early)), (1, 1));
    // The stale one's task checked once as well (with its marker).
    let task_gets = f
        .calls()
        .iter()
        .filter(|c| c.op == Op::Get && c.key.starts_with("tasks/"))
        .count();
    assert_eq!(task_gets, 1);
}

/// The requests that the events of `probe` records make, counted from the
/// store's call log, in a bucket of `size` other records.
async fn requests_for_events(size: usize) -> BTreeMap<String, usize> {
    let w = World::new();
    let template = w.answered("template", Duration::days(30)).await;
    let body: Bytes = w.bucket.get(&template).await.unwrap().body;
    for i in 0..size {
        let k = format!(
            "idempotency/t/{:064x}.json",
            i as u128 * 0x9e37_79b9_7f4a_7c15
        );
        w.bucket
            .put(&k, body.clone(), PutMode::Create)
            .await
            .unwrap();
    }
    let interrupted = w
        .interrupted_after_its_record("probe-interrupted", json!({"k": "probe-interrupted"}))
        .await;
    let answered = w.answered("probe-answered", Duration::days(30)).await;
    w.clock.advance(Duration::seconds(600));
    let f = FaultyStore::new(w.bucket.clone());
    let q = w.queue_over(f.clone());
    let messages = [
        msg("i", notification(BUCKET, &interrupted)),
        msg("a", notification(BUCKET, &answered)),
    ];
    let b = handle_messages(&q, BUCKET, &messages, false, None).await;
    assert!(b.retry.is_empty());
    assert_eq!((b.summary.finished, b.summary.reads), (1, 2));
    let mut by_op = BTreeMap::new();
    for c in f.calls() {
        let prefix = c.key.split('/').next().unwrap_or("").to_owned();
        *by_op.entry(format!("{:?} {prefix}", c.op)).or_default() += 1;
    }
    by_op
}

#[tokio::test]
async fn requests_per_record_event_stay_the_same_from_a_thousand_to_a_hundred_thousand_records() {
    let small = requests_for_events(1_000).await;
    let large = requests_for_events(100_000).await;
    assert_eq!(small, large);
    // The interrupted record: read, its task read and its marker checked
    // (neither there), both written. The answered record: read, its task
    // read and its marker checked (both there), nothing written. No record
    // write, no listing.
    let expected: BTreeMap<String, usize> = [
        ("Get idempotency", 2),
        ("Get tasks", 2),
        ("Head ready", 2),
        ("PutCreate tasks", 1),
        ("Put ready", 1),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    assert_eq!(large, expected);
    assert!(!large.keys().any(|k| k.starts_with("List")));
}

fn sqs_event(messages: &[(&str, String)]) -> Value {
    let records: Vec<SqsMessage> = messages
        .iter()
        .map(|(id, body)| {
            let mut m = SqsMessage::default();
            m.message_id = Some((*id).into());
            m.body = Some(body.clone());
            m.event_source = Some("aws:sqs".into());
            m.event_source_arn = Some("arn:aws:sqs:us-east-1:123456789012:due".into());
            m
        })
        .collect();
    let mut e = SqsEvent::default();
    e.records = records;
    serde_json::to_value(e).unwrap()
}

#[tokio::test]
async fn the_function_tells_a_due_batch_from_the_schedule_by_event_source() {
    let w = World::new();
    let stale = w.interrupted_after_its_record("s", json!({"k": "s"})).await;
    w.clock.advance(Duration::seconds(300));
    let early = w.interrupted_after_its_record("e", json!({"k": "e"})).await;
    w.clock.advance(Duration::seconds(300));
    let sweeper = Sweeper {
        queue: w.queue_over(w.bucket.clone()),
        bucket: BUCKET.into(),
        metrics: Metrics::collecting("sweep"),
    };
    let event = sqs_event(&[
        ("stale", notification(BUCKET, &stale)),
        ("early", notification(BUCKET, &early)),
    ]);
    let out = handle_sweep(&sweeper, LambdaEvent::new(event, Context::default()))
        .await
        .unwrap();
    assert_eq!(
        out,
        json!({"batchItemFailures": [{"itemIdentifier": "early"}]})
    );
    assert_eq!(w.status(&stale).await, Some(RecordStatus::Creating));
    assert_eq!(
        (w.count("tasks/"), w.count("ready/")),
        (1, 1),
        "the stale one's"
    );
    let line = &sweeper.metrics.lines()[0];
    assert_eq!(
        (line["SweepFinished"].as_u64(), line["SweepEarly"].as_u64()),
        (Some(1), Some(1))
    );

    // An S3 notification sent straight to the function is not a due batch,
    // nor a schedule: it is refused.
    let direct: Value = serde_json::from_str(&notification(BUCKET, &early)).unwrap();
    let err = handle_sweep(&sweeper, LambdaEvent::new(direct, Context::default()))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("aws:s3"), "{err}");

    // Anything without Records is the schedule: a pass and its summary.
    let out = handle_sweep(&sweeper, LambdaEvent::new(json!({}), Context::default()))
        .await
        .unwrap();
    assert_eq!(out["complete"], true);
}
