//! 1b. Requests per event of each kind that `SOURCES` takes (events/'s
//! samples, SAM CLI's shapes), through the `submit` handler: a first
//! delivery, its redelivery, and a refusal. Each kind on a bucket of its own
//! (in memory, counted by the fault-injecting store), so that each first
//! delivery is a new task.

use std::sync::Arc;

use idempotent_submit::lambda::handle_submit;
use idempotent_submit::store::FaultyStore;
use idempotent_submit::testing::intake::sources::Sources;
use idempotent_submit::{Clock, ManualClock, MemoryStore, Queue, Settings};
use lambda_runtime::{Context, LambdaEvent};
use serde_json::{Value, json};

use crate::requests::{Row, count};

fn sample(name: &str) -> Value {
    let path = format!("{}/events/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&path).expect("a sample event"))
        .expect("a sample event's JSON")
}

/// The sources the samples are declared with.
fn sources() -> Sources {
    let declared = json!([
        {"name": "orders", "match": {"sns": {"topic_arn": "arn:aws:sns:us-east-1:123456789012:orders"}},
         "task_type": "ship_order"},
        {"name": "uploads", "match": {"s3": {"bucket": "uploads", "prefix": "incoming/"}},
         "task_type": "scan_upload"},
        {"name": "nightly", "match": {"eventbridge": {"source": "aws.events"}},
         "task_type": "nightly_report"},
        {"name": "partner", "match": {"sqs": {"queue_arn": "arn:aws:sqs:us-east-1:123456789012:partner"}},
         "task_type": "import_order", "key_pointer": "/message/order"}
    ]);
    Sources::parse(&declared.to_string()).expect("the bench's sources")
}

/// An SQS message of the `partner` queue, in another system's JSON.
fn partner_message() -> Value {
    let mut e = sample("sqs-eventbridge.json");
    let r = &mut e["Records"][0];
    r["eventSourceARN"] = json!("arn:aws:sqs:us-east-1:123456789012:partner");
    r["body"] = json!(json!({"order": "ORD-7", "lines": 3}).to_string());
    e
}

/// The requests and round trips of `event`'s first delivery and of its
/// redelivery, on a new bucket.
async fn twice(event: &Value) -> ((usize, usize), (usize, usize)) {
    let clock = ManualClock::at_epoch();
    let mem = MemoryStore::new(Arc::new(clock.clone()) as Arc<dyn Clock>);
    let f = FaultyStore::new(mem);
    let q = Queue::with_clock(f.clone(), Arc::new(clock), Settings::default());
    let app = crate::lambda::app(q, false).with_sources(sources());
    let mut counts = Vec::new();
    for _ in 0..2 {
        f.reset_log();
        handle_submit(&app, LambdaEvent::new(event.clone(), Context::default()))
            .await
            .expect("the event is taken");
        counts.push(count(&f));
    }
    (counts[0], counts[1])
}

pub(crate) async fn event_rows() -> Vec<Row> {
    // Each kind, and the name of its redelivery's row where it has one (a
    // redelivery is a replay of a record that can still be finished: the
    // same for every kind, so two rows show it).
    let kinds: [(&'static str, Value, Option<&'static str>); 8] = [
        (
            "EventBridge event, direct (new task)",
            sample("eventbridge-scheduled.json"),
            Some("EventBridge event redelivered (a replay)"),
        ),
        (
            "S3 Object Created through EventBridge (new task)",
            sample("eventbridge-s3-object-created.json"),
            None,
        ),
        (
            "SNS notification, direct (new task)",
            sample("sns-notification.json"),
            None,
        ),
        (
            "S3 notification, direct (new task)",
            sample("s3-put.json"),
            None,
        ),
        (
            "SQS message carrying an SNS notification (new task)",
            sample("sqs-sns-envelope.json"),
            Some("SQS message carrying an SNS notification redelivered (a replay)"),
        ),
        (
            "SQS message carrying an S3 notification (new task)",
            sample("sqs-s3-put.json"),
            None,
        ),
        (
            "SQS message carrying an EventBridge event (new task)",
            sample("sqs-eventbridge.json"),
            None,
        ),
        (
            "SQS message of a source's queue, another system's JSON (new task)",
            partner_message(),
            None,
        ),
    ];
    let mut rows = Vec::new();
    for (name, event, replay) in &kinds {
        let (first, again) = twice(event).await;
        rows.push((*name, first, (3, 2)));
        if let Some(replay) = replay {
            rows.push((*replay, again, (4, 3)));
        }
    }
    // An event no source takes: its rejected/ object, nothing else.
    let mut stray = sample("sns-notification.json");
    stray["Records"][0]["Sns"]["TopicArn"] = json!("arn:aws:sns:us-east-1:123456789012:payments");
    let (refused, _) = twice(&stray).await;
    rows.push((
        "SNS notification no source takes (its rejected/ object)",
        refused,
        (1, 1),
    ));
    rows
}
