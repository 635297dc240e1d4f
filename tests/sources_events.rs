//! The `submit` handler on the event sources' sample events of events/ (SAM
//! CLI's own shapes, scripts/source-events.sh), against moto: each makes one
//! task and its redelivery none; two sources that find the same key make two
//! tasks; every kind of bad input is refused with a rejected object naming
//! the source and the reason, and writes nothing else; a storage failure
//! fails a direct invocation and lists an SQS message.

use crate::common;

use crate::common::event;
use crate::common::handler::Harness;
use idempotent_submit::ManualClock;
use idempotent_submit::intake::sources::Sources;
use idempotent_submit::lambda::handle_submit;
use idempotent_submit::store::{Fault, FaultyStore, StoreError};
use lambda_runtime::{Context, LambdaEvent};
use serde_json::{Value, json};

/// The sources of the sample events.
fn sample_sources() -> Value {
    json!([
        {"name": "orders", "match": {"sns": {"topic_arn": "arn:aws:sns:us-east-1:123456789012:orders"}},
         "task_type": "ship_order"},
        {"name": "uploads", "match": {"s3": {"bucket": "uploads", "prefix": "incoming/"}},
         "task_type": "scan_upload"},
        {"name": "nightly", "match": {"eventbridge": {"source": "aws.events", "detail_type": "Scheduled Event"}},
         "task_type": "nightly_report", "input_pointer": "/event/resources"}
    ])
}

fn with_sources(h: Harness, sources: &Value) -> Harness {
    Harness {
        app: h
            .app
            .with_sources(Sources::parse(&sources.to_string()).unwrap()),
    }
}

impl Harness {
    /// The answer to `event`, of any shape, or the invocation's error.
    async fn invoke(&self, event: Value) -> Result<Value, String> {
        handle_submit(&self.app, LambdaEvent::new(event, Context::default()))
            .await
            .map_err(|e| e.to_string())
    }

    /// The keys of the records in the bucket, in order (tests/sources_moto.rs
    /// reads them too).
    pub(crate) async fn record_keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self
            .objects("idempotency/")
            .await
            .iter()
            .map(|r| r["key"].as_str().unwrap().to_owned())
            .collect();
        keys.sort();
        keys
    }
}

/// Each sample file, the key its task gets, its task type and its input.
fn samples() -> Vec<(&'static str, &'static str, &'static str, Value)> {
    let sns_key = "orders:95df01b4-ee98-5cb9-9903-4c221d41eb5e";
    let order = json!({"order": "ORD-123", "cents": 1999});
    let upload = "uploads:uploads/incoming/report 1.csv#0A1B2C3D4E5F678901";
    let nightly = "nightly:cdc73f9d-aea9-11e3-9d5a-835b769c0d9c";
    let rule = json!(["arn:aws:events:us-east-1:123456789012:rule/nightly-report"]);
    vec![
        (
            "sns-notification.json",
            sns_key,
            "ship_order",
            order.clone(),
        ),
        ("sqs-sns-envelope.json", sns_key, "ship_order", order),
        ("s3-put.json", upload, "scan_upload", Value::Null),
        ("sqs-s3-put.json", upload, "scan_upload", Value::Null),
        (
            "eventbridge-s3-object-created.json",
            upload,
            "scan_upload",
            Value::Null,
        ),
        (
            "eventbridge-scheduled.json",
            nightly,
            "nightly_report",
            rule.clone(),
        ),
        ("sqs-eventbridge.json", nightly, "nightly_report", rule),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_sample_event_makes_one_task_and_its_redelivery_none() {
    for (file, key, task_type, input) in samples() {
        let h = with_sources(Harness::moto().await, &sample_sources());
        for _ in 0..2 {
            let answer = h.invoke(event(file)).await.expect(file);
            if let Some(failures) = answer.get("batchItemFailures") {
                assert_eq!(failures, &json!([]), "{file}");
            }
        }
        assert_eq!(h.record_keys().await, [key], "{file}");
        let tasks = h.objects("tasks/").await;
        assert_eq!(tasks.len(), 1, "{file}");
        assert_eq!(tasks[0]["task_type"], task_type, "{file}");
        if input.is_null() {
            // S3's object, one shape whichever way it came.
            assert_eq!(tasks[0]["input"]["bucket"], "uploads", "{file}");
            assert_eq!(tasks[0]["input"]["key"], "incoming/report 1.csv", "{file}");
            assert_eq!(tasks[0]["input"]["size"], 1024, "{file}");
        } else {
            assert_eq!(tasks[0]["input"], input, "{file}");
        }
        assert_eq!(h.count("rejected/").await, 0, "{file}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_event_delivered_directly_and_through_sqs_is_one_task() {
    let h = with_sources(Harness::moto().await, &sample_sources());
    for file in [
        "sns-notification.json",
        "sqs-sns-envelope.json",
        "s3-put.json",
        "sqs-s3-put.json",
    ] {
        h.invoke(event(file)).await.expect(file);
    }
    assert_eq!(h.count("tasks/").await, 2);
    assert_eq!(h.record_keys().await.len(), 2);
}

#[tokio::test]
async fn two_sources_that_find_the_same_key_make_two_tasks() {
    let (h, _) = Harness::memory();
    let sources = json!([
        {"name": "shop", "match": {"sns": {"topic_arn": "arn:aws:sns:us-east-1:123456789012:orders"}},
         "task_type": "ship_order", "key_pointer": "/message/order"},
        {"name": "nightly", "match": {"eventbridge": {"source": "aws.events"}},
         "task_type": "ship_order", "key_pointer": "/message/order"}
    ]);
    let h = with_sources(h, &sources);
    let mut scheduled = event("eventbridge-scheduled.json");
    scheduled["detail"] = json!({"order": "ORD-123", "cents": 1999});
    h.invoke(event("sns-notification.json")).await.unwrap();
    h.invoke(scheduled).await.unwrap();
    assert_eq!(h.record_keys().await, ["nightly:ORD-123", "shop:ORD-123"]);
    assert_eq!(h.count("tasks/").await, 2);
}

/// `event` with its SNS message (direct or through SQS) replaced.
fn sns_with_message(file: &str, message: &str) -> Value {
    let mut e = event(file);
    let r = &mut e["Records"][0];
    if r.get("Sns").is_some() {
        r["Sns"]["Message"] = json!(message);
    } else {
        let mut body: Value = serde_json::from_str(r["body"].as_str().unwrap()).unwrap();
        body["Message"] = json!(message);
        r["body"] = json!(body.to_string());
    }
    e
}

/// Bad events: what each is, how it is changed, and what its rejected
/// object's error says.
fn bad_events(file: &str) -> Vec<(&'static str, Value, &'static str)> {
    let mut other_topic = event(file);
    let r = &mut other_topic["Records"][0];
    let text = serde_json::to_string(&*r)
        .unwrap()
        .replace(":orders", ":payments");
    *r = serde_json::from_str(&text).unwrap();
    vec![
        ("no source", other_topic, "matches no source"),
        (
            "no key",
            sns_with_message(file, r#"{"cents":1}"#),
            "finds nothing",
        ),
        (
            "a number key",
            sns_with_message(file, r#"{"order":17}"#),
            "finds a number",
        ),
        (
            "not JSON",
            sns_with_message(file, "ORD-123 shipped"),
            "not JSON",
        ),
        (
            "oversized",
            sns_with_message(
                file,
                &json!({"order": "ORD-9", "pad": "x".repeat(300_000)}).to_string(),
            ),
            "input_too_large",
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_events_are_rejected_naming_the_source_and_the_reason_and_write_nothing_else() {
    let sources = json!([
        {"name": "orders", "match": {"sns": {"topic_arn": "arn:aws:sns:us-east-1:123456789012:orders"}},
         "task_type": "ship_order", "key_pointer": "/message/order"}
    ]);
    for file in ["sns-notification.json", "sqs-sns-envelope.json"] {
        for (what, bad, says) in bad_events(file) {
            let h = with_sources(Harness::moto().await, &sources);
            let answer = h.invoke(bad).await.expect(what);
            if let Some(failures) = answer.get("batchItemFailures") {
                assert_eq!(failures, &json!([]), "{file} {what}: not retried");
            }
            let rejected = h.objects("rejected/").await;
            assert_eq!(rejected.len(), 1, "{file} {what}");
            let text = rejected[0]["error"].to_string();
            assert!(text.contains(says), "{file} {what}: {text}");
            let source = if what == "no source" {
                json!(null)
            } else {
                json!("orders")
            };
            assert_eq!(rejected[0]["source"], source, "{file} {what}");
            assert_eq!(
                h.keys().await.len(),
                1,
                "{file} {what}: only the rejected object"
            );
            assert_eq!(
                h.app
                    .metrics
                    .lines()
                    .iter()
                    .filter(|l| l["Rejected"] == 1)
                    .count(),
                1
            );
        }
    }
}

#[tokio::test]
async fn a_storage_failure_fails_a_direct_invocation_and_lists_an_sqs_message() {
    let clock = ManualClock::at_epoch();
    let bucket = common::memory_store(&clock);
    let f = FaultyStore::new(bucket.clone());
    f.inject(
        None,
        "",
        1,
        usize::MAX,
        Fault::Fail(StoreError::Unavailable("503".into())),
    );
    let h = with_sources(Harness::over(f, Some(&clock), false), &sample_sources());
    for file in [
        "sns-notification.json",
        "s3-put.json",
        "eventbridge-scheduled.json",
    ] {
        assert!(
            h.invoke(event(file)).await.is_err(),
            "{file}: the source retries"
        );
    }
    let answer = h.invoke(event("sqs-sns-envelope.json")).await.unwrap();
    assert_eq!(
        answer["batchItemFailures"][0]["itemIdentifier"],
        "19dd0b57-b21e-4ac1-bd88-01bbb068cb78"
    );
    assert!(common::all_keys(&bucket).await.is_empty());
}

#[tokio::test]
async fn this_services_own_bodies_and_s3s_test_event_read_as_ever_beside_sources() {
    let (h, _) = Harness::memory();
    let h = with_sources(h, &sample_sources());
    assert!(h.sqs(event("sqs-standard-batch.json")).await.is_empty());
    let (tasks, rejected) = (h.count("tasks/").await, h.count("rejected/").await);
    assert!(tasks > 0);
    let mut test_event = event("sqs-s3-put.json");
    test_event["Records"][0]["body"] = json!(
        json!({"Service": "Amazon S3", "Event": "s3:TestEvent", "Bucket": "uploads"}).to_string()
    );
    assert!(h.sqs(test_event).await.is_empty());
    assert_eq!(h.count("tasks/").await, tasks);
    assert_eq!(h.count("rejected/").await, rejected);
}

#[tokio::test]
async fn without_sources_the_source_events_are_refused_as_before() {
    let (h, _) = Harness::memory();
    for file in [
        "sns-notification.json",
        "s3-put.json",
        "eventbridge-scheduled.json",
    ] {
        let err = h.invoke(event(file)).await.expect_err(file);
        assert!(err.contains("SOURCES"), "{file}: {err}");
    }
    assert!(h.keys().await.is_empty());
}

#[tokio::test]
async fn records_mixing_sources_are_refused_whole_even_with_sources() {
    let (h, _) = Harness::memory();
    let h = with_sources(h, &sample_sources());
    let mut mixed = event("sns-notification.json");
    let s3 = event("s3-put.json")["Records"][0].clone();
    mixed["Records"].as_array_mut().unwrap().push(s3);
    let err = h.invoke(mixed).await.expect_err("refused whole");
    assert!(err.contains("aws:sns"), "{err}");
    let mut with_sqs = event("sqs-standard-batch.json");
    let sns = event("sns-notification.json")["Records"][0].clone();
    with_sqs["Records"].as_array_mut().unwrap().push(sns);
    assert!(h.invoke(with_sqs).await.is_err());
    assert!(h.keys().await.is_empty());
}
