//! The sample events of events/ and events made from what moto's SQS
//! received.

use serde_json::Value;

/// The sample event `events/NAME`.
pub fn event(name: &str) -> Value {
    let path = format!("{}/events/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
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
