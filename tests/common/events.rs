//! The sample events of events/ and events made from what moto's SQS
//! received.

use serde_json::{Value, json};

/// The sample event `events/NAME`.
pub fn event(name: &str) -> Value {
    let path = format!("{}/events/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The body of S3's notification `event_name` (`ObjectCreated:Put`, ...)
/// of `key` in `bucket`, the key URL-encoded as S3 and moto send it, with
/// the object's own fields `object` beside it.
pub fn s3_notification(bucket: &str, key: &str, event_name: &str, mut object: Value) -> String {
    object["key"] = json!(key.replace('/', "%2F"));
    json!({"Records": [{
        "eventVersion": "2.1",
        "eventSource": "aws:s3",
        "awsRegion": "us-east-1",
        "eventTime": "2026-01-27T12:00:00.000Z",
        "eventName": event_name,
        "s3": {
            "s3SchemaVersion": "1.0",
            "bucket": {"name": bucket, "arn": format!("arn:aws:s3:::{bucket}")},
            "object": object,
        },
    }]})
    .to_string()
}

/// Every sample event of events/.
pub fn every_event() -> Vec<Value> {
    let dir = format!("{}/events", env!("CARGO_MANIFEST_DIR"));
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "json") {
            out.push(serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap());
        }
    }
    out
}

/// Messages received from moto's SQS as the SQS event Lambda would hand
/// over (`eventSource: aws:sqs`).
pub fn sqs_event(messages: &[aws_sdk_sqs::types::Message]) -> Value {
    let mut e = aws_lambda_events::sqs::SqsEvent::default();
    e.records = messages
        .iter()
        .map(|m| {
            let mut r = aws_lambda_events::sqs::SqsMessage::default();
            r.message_id = m.message_id.clone();
            r.receipt_handle = m.receipt_handle.clone();
            r.body = m.body.clone();
            r.event_source = Some("aws:sqs".into());
            r.event_source_arn = Some("arn:aws:sqs:us-east-1:123456789012:due".into());
            r
        })
        .collect();
    serde_json::to_value(e).unwrap()
}
