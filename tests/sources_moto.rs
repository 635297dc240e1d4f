//! Event sources against real parts: moto's SNS publishing into its SQS
//! queues (raw delivery off and on), and moto's S3 notifications of an
//! ordinary bucket (unversioned, and versioned) to a queue, received from
//! moto's SQS and handed to `submit` as Lambda would, twice (a redelivery):
//! one task per message or write, none for a redelivery.

use crate::common;

use std::process::Command;

use crate::common::handler::Harness;
use crate::common::moto::queue_arn;
use crate::common::{moto_endpoint, moto_queue, moto_sqs, receive_all};
use idempotent_submit::store::{PutMode, S3Store, Store};
use idempotent_submit::testing::intake::sources::Sources;
use serde_json::{Value, json};

/// Messages received from moto's SQS queue `arn`, as the SQS event Lambda
/// hands over.
fn sqs_event(messages: &[aws_sdk_sqs::types::Message], arn: &str) -> Value {
    let records: Vec<Value> = messages
        .iter()
        .map(|m| {
            json!({
                "messageId": m.message_id, "receiptHandle": m.receipt_handle,
                "body": m.body, "attributes": {}, "messageAttributes": {},
                "eventSource": "aws:sqs", "eventSourceARN": arn, "awsRegion": "us-east-1"
            })
        })
        .collect();
    json!({ "Records": records })
}

fn harness(h: Harness, sources: Value) -> Harness {
    Harness {
        app: h
            .app
            .with_sources(Sources::parse(&sources.to_string()).unwrap()),
    }
}

/// A queue on moto and its ARN.
async fn queue(name: &str) -> (String, String) {
    let url = moto_queue(name, 0).await;
    let arn = queue_arn(&moto_sqs(), &url).await;
    (url, arn)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sns_through_sqs_raw_and_enveloped_makes_one_task_each_and_a_redelivery_none() {
    let n = fastrand::u32(..);
    let (env_url, env_arn) = queue(&format!("sns-env-{n}")).await;
    let (raw_url, raw_arn) = queue(&format!("sns-raw-{n}")).await;
    let message = json!({"order": format!("ORD-{n}"), "cents": 5}).to_string();
    let out = Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/sources/moto_sns.py"
        ))
        .args([
            &moto_endpoint(),
            &format!("orders-{n}"),
            &message,
            &env_arn,
            &raw_arn,
        ])
        .output()
        .expect("python3 runs tests/sources/moto_sns.py (make tools installs boto3)");
    common::assert_ran(&out, "tests/sources/moto_sns.py");
    let sent: Value = serde_json::from_slice(&out.stdout).unwrap();
    let h = harness(
        Harness::moto().await,
        json!([
            {"name": "orders", "match": {"sns": {"topic_arn": sent["topic_arn"]}}, "task_type": "ship_order"},
            {"name": "orders-raw", "match": {"sqs": {"queue_arn": raw_arn}}, "task_type": "ship_order",
             "key_pointer": "/message/order"}
        ]),
    );
    let enveloped = receive_all(&env_url, 30).await;
    let raw = receive_all(&raw_url, 30).await;
    assert_eq!((enveloped.len(), raw.len()), (1, 1));
    let envelope: Value = serde_json::from_str(enveloped[0].body().unwrap()).unwrap();
    assert_eq!(
        envelope["Type"], "Notification",
        "raw delivery off: SNS's envelope"
    );
    assert_eq!(
        raw[0].body(),
        Some(message.as_str()),
        "raw delivery on: the message"
    );
    for _ in 0..2 {
        assert!(h.sqs(sqs_event(&enveloped, &env_arn)).await.is_empty());
        assert!(h.sqs(sqs_event(&raw, &raw_arn)).await.is_empty());
    }
    let id = sent["message_id"].as_str().unwrap();
    assert_eq!(
        h.record_keys().await,
        [format!("orders-raw:ORD-{n}"), format!("orders:{id}")]
    );
    assert_eq!(h.count("tasks/").await, 2);
    assert_eq!(h.count("rejected/").await, 0);
}

/// The notification of `bucket`'s object-created writes under `incoming/`
/// to a new queue; the queue's URL and ARN.
async fn notify(bucket: &S3Store) -> (String, String) {
    let (url, arn) = queue(&format!("uploads-{}", bucket.bucket())).await;
    common::moto::notify_queue(bucket, "incoming/", &arn).await;
    (url, arn)
}

async fn s3_notifications_make_one_task_per_write(uploads: S3Store, identity: &str) {
    let (url, arn) = notify(&uploads).await;
    for body in ["a", "b"] {
        uploads
            .put("incoming/report 1.csv", body.into(), PutMode::Overwrite)
            .await
            .unwrap();
    }
    uploads
        .put("elsewhere/x", "x".into(), PutMode::Overwrite)
        .await
        .unwrap();
    let messages = receive_all(&url, 30).await;
    // S3's test event, then one message per write under the prefix.
    assert_eq!(messages.len(), 3, "{messages:?}");
    let h = harness(
        Harness::moto().await,
        json!([{"name": "uploads", "match": {"s3": {"bucket": uploads.bucket(), "prefix": "incoming/"}},
                "task_type": "scan_upload"}]),
    );
    for _ in 0..2 {
        assert!(h.sqs(sqs_event(&messages, &arn)).await.is_empty());
    }
    let keys = h.record_keys().await;
    assert_eq!(keys.len(), 2, "{keys:?}");
    let prefix = format!(
        "uploads:{}/incoming/report 1.csv{identity}",
        uploads.bucket()
    );
    assert!(keys.iter().all(|k| k.starts_with(&prefix)), "{keys:?}");
    assert_eq!(h.count("tasks/").await, 2);
    assert_eq!(h.count("rejected/").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_notifications_of_an_unversioned_bucket_make_one_task_per_write_by_sequencer() {
    s3_notifications_make_one_task_per_write(common::moto_store().await, "#").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_notifications_of_a_versioned_bucket_make_one_task_per_version() {
    s3_notifications_make_one_task_per_write(common::moto_store_versioned().await, "@").await;
}
