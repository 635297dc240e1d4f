//! Events of other systems' shapes, through the sources of `SOURCES`
//! (src/intake/sources/): SNS notifications and S3 notifications invoked
//! directly, EventBridge events (a rule's target), and SQS messages whose
//! body is an SNS notification, an S3 notification, an EventBridge event, or
//! any JSON of a queue a source declares.
//!
//! Through SQS, a message keeps the batch's rules (src/lambda/sqs.rs): a
//! storage failure is listed for retry, an event that can never succeed is
//! written to `rejected/`. Invoked directly there is no batch response: a
//! retryable failure fails the invocation, so that SNS, S3 or EventBridge
//! retries it; a permanent one is written to `rejected/` and counted.

use serde_json::{Map, Value, json};

use super::{App, Outcome};
use crate::intake::Problem;
use crate::intake::sources::delivery::{
    is_eventbridge_event, is_s3_notification, is_s3_test_event, is_sns_notification,
};
use crate::intake::sources::{Delivery, Mapped, Refusal};
use crate::protocol::{SubmitError, Submitted};

/// One item of an event (an SNS record, an S3 record, the EventBridge
/// event): its readings (most specific first), or why it has none.
struct Item {
    event: Value,
    /// The id its rejected object is named by.
    id: String,
    readings: Result<Vec<Delivery>, Refusal>,
}

/// What became of one item.
enum Step {
    Submitted(Box<Submitted>, String),
    /// Can never succeed: the source (if one matched) and the problem.
    Permanent(Option<String>, Problem),
    Retry(SubmitError),
}

fn sns_item(n: &Value) -> Item {
    let readings = Delivery::sns(n)
        .map(|d| vec![d])
        .ok_or_else(|| Refusal::no_source("an SNS notification without TopicArn"));
    Item {
        id: n
            .get("MessageId")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned(),
        event: n.clone(),
        readings,
    }
}

fn s3_item(r: &Value) -> Item {
    let readings = Delivery::s3_record(r)
        .map(|d| vec![d])
        .map_err(|e| Refusal {
            source_name: None,
            detail: e,
        });
    let id = readings
        .as_ref()
        .ok()
        .and_then(|d| d[0].identity.clone())
        .unwrap_or_default();
    Item {
        id,
        event: r.clone(),
        readings,
    }
}

fn eventbridge_item(e: &Value) -> Item {
    Item {
        id: e.get("id").and_then(Value::as_str).unwrap_or("").to_owned(),
        event: e.clone(),
        readings: Ok(Delivery::eventbridge(e)),
    }
}

/// The items of a body or an event of a known shape (`None`: none of
/// them), and what it is called in a refusal.
fn items_of(v: &Value) -> Option<(&'static str, Vec<Item>)> {
    if is_sns_notification(v) {
        Some(("an SNS notification", vec![sns_item(v)]))
    } else if is_eventbridge_event(v) {
        Some(("an EventBridge event", vec![eventbridge_item(v)]))
    } else if is_s3_notification(v) {
        let records = v.get("Records").and_then(Value::as_array);
        let items = records.into_iter().flatten().map(s3_item).collect();
        Some(("an S3 notification", items))
    } else {
        None
    }
}

/// Does any declared source take one of `item`'s readings?
fn taken(app: &App, item: &Item) -> bool {
    item.readings
        .as_ref()
        .is_ok_and(|r| app.sources.find(r).is_some())
}

/// Submits `item` through the first source that takes it.
async fn run(app: &App, item: &Item, what: &str) -> Step {
    let mapped: Result<Mapped, Refusal> = match &item.readings {
        Err(r) => Err(r.clone()),
        Ok(readings) => match app.sources.find(readings) {
            None => Err(Refusal::no_source(describe(what, readings))),
            Some((source, d)) => source.map(d),
        },
    };
    match mapped {
        Ok(m) => submit(app, m).await,
        Err(r) => Step::Permanent(r.source_name.clone(), Problem::invalid(r.to_string())),
    }
}

/// `what` with where it came from, for a refusal.
fn describe(what: &str, readings: &[Delivery]) -> String {
    match readings.last().map(|d| &d.origin) {
        Some(o) => format!("{what} of {o}"),
        None => what.to_owned(),
    }
}

async fn submit(app: &App, m: Mapped) -> Step {
    let source = m.source;
    let result = match m.body.into_submit(&app.queue, Some(m.key), None) {
        Ok(b) => b.await,
        Err(e) => Err(e.into()),
    };
    app.metrics.submit(&result);
    match result {
        Ok(s) => Step::Submitted(Box::new(s), source),
        Err(e) if e.kind().is_the_requests_fault() => {
            Step::Permanent(Some(source), Problem::from_submit(&e))
        }
        Err(e) => Step::Retry(e),
    }
}

/// The rejected object's document.
fn rejected_doc(
    field: &str,
    event: Value,
    source: Option<&str>,
    p: &Problem,
) -> Map<String, Value> {
    let mut doc = Map::new();
    doc.insert(field.into(), event);
    doc.insert("source".into(), json!(source));
    doc.insert("error".into(), p.body());
    doc
}

/// An SQS message through the sources; `None` when no source takes it and
/// it is no envelope of a known shape: then it is this service's own
/// `POST /tasks` body, read as ever. Without `SOURCES`, always `None`.
pub async fn sqs_message(
    app: &App,
    m: &aws_lambda_events::sqs::SqsMessage,
    identity: Option<String>,
) -> Option<Result<Outcome, (Option<String>, Problem)>> {
    if app.sources.is_empty() {
        return None;
    }
    let raw = m.body.as_deref().unwrap_or("");
    let parsed: Option<Value> = serde_json::from_str(raw).ok();
    if parsed.as_ref().is_some_and(is_s3_test_event) {
        tracing::info!(
            message_id = m.message_id.as_deref().unwrap_or(""),
            "S3 test event ignored"
        );
        return Some(Ok(Outcome::Ignored));
    }
    let envelope = parsed.as_ref().and_then(items_of);
    if let Some((what, items)) = &envelope
        && items.iter().any(|i| taken(app, i))
    {
        return Some(run_all(app, items, what, m.message_id.as_deref()).await);
    }
    // The message as it is, for a source of its queue.
    let arn = m.event_source_arn.as_deref().unwrap_or("");
    let message = serde_json::to_value(m).unwrap_or(Value::Null);
    let as_is = Item {
        id: m.message_id.clone().unwrap_or_default(),
        event: Value::Null,
        readings: Ok(vec![Delivery::sqs(arn, identity, message, raw)]),
    };
    if taken(app, &as_is) {
        let id = m.message_id.as_deref();
        return Some(run_all(app, std::slice::from_ref(&as_is), "an SQS message", id).await);
    }
    let (what, items) = envelope?;
    let carried = match items.first().map(|i| &i.readings) {
        Some(Ok(readings)) => describe(what, readings),
        _ => what.to_owned(),
    };
    let p = Problem::invalid(Refusal::no_source(format!("{carried}, through {arn},")).to_string());
    Some(Err((None, p)))
}

/// The items of one SQS message: retried if any must be (every item is
/// idempotent on its key), else refused if any can never succeed.
async fn run_all(
    app: &App,
    items: &[Item],
    what: &str,
    message_id: Option<&str>,
) -> Result<Outcome, (Option<String>, Problem)> {
    let mut refused = None;
    let mut retry = false;
    for item in items {
        match run(app, item, what).await {
            Step::Submitted(s, source) => {
                tracing::info!(message_id, source, task_id = %s.task_id, replayed = s.replayed, "submitted");
            }
            Step::Permanent(source, p) => refused = refused.or(Some((source, p))),
            Step::Retry(e) => {
                tracing::warn!(message_id, code = e.code(), error = %e, "submit failed; message will be retried");
                retry = true;
            }
        }
    }
    match (retry, refused) {
        (true, _) => Ok(Outcome::Retry),
        (false, Some(r)) => Err(r),
        (false, None) => Ok(Outcome::Submitted),
    }
}

/// Is `payload` an event this module takes when invoked directly: SNS's or
/// S3's `Records`, or an EventBridge event?
pub fn is_direct(payload: &Value) -> bool {
    is_eventbridge_event(payload) || direct_records(payload).is_some()
}

/// The `Records` of a direct SNS or S3 invocation (every record of one of
/// the two), and which.
fn direct_records(payload: &Value) -> Option<&'static str> {
    let records = payload.get("Records")?.as_array()?;
    let source = |r: &Value| {
        r.get("EventSource")
            .or_else(|| r.get("eventSource"))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let first = records.first().and_then(source)?;
    if !records
        .iter()
        .all(|r| source(r).as_deref() == Some(first.as_str()))
    {
        return None;
    }
    match first.as_str() {
        "aws:sns" => Some("aws:sns"),
        "aws:s3" => Some("aws:s3"),
        _ => None,
    }
}

/// A direct invocation: each item submitted once; those that can never
/// succeed written to `rejected/` and counted; any retryable failure (or a
/// rejected object that could not be written) fails the invocation, so the
/// source delivers it again (the items already submitted replay).
pub async fn handle_direct(app: &App, payload: Value) -> Result<Value, SubmitError> {
    let items: Vec<Item> = match direct_records(&payload) {
        Some("aws:sns") => records(&payload)
            .map(|r| sns_item(r.get("Sns").unwrap_or(&Value::Null)))
            .collect(),
        Some(_) => records(&payload).map(s3_item).collect(),
        None => vec![eventbridge_item(&payload)],
    };
    let what = match direct_records(&payload) {
        Some("aws:sns") => "an SNS notification",
        Some(_) => "an S3 notification",
        None => "an EventBridge event",
    };
    let mut results = Vec::with_capacity(items.len());
    let mut failure = None;
    for item in &items {
        match run(app, item, what).await {
            Step::Submitted(s, source) => {
                tracing::info!(id = %item.id, source, task_id = %s.task_id, replayed = s.replayed, "submitted");
                results
                    .push(json!({"source": source, "task_id": s.task_id, "replayed": s.replayed}));
            }
            Step::Permanent(source, p) => {
                let doc = rejected_doc("event", item.event.clone(), source.as_deref(), &p);
                let key = app.queue.write_rejected(&item.id, doc).await?;
                app.metrics.rejected();
                tracing::warn!(id = %item.id, source, code = p.code, detail = %p.detail, rejected = %key, "event rejected");
                results.push(json!({"source": source, "rejected": key, "code": p.code}));
            }
            Step::Retry(e) => {
                tracing::warn!(id = %item.id, code = e.code(), error = %e, "submit failed; the invocation fails so that the source retries");
                failure = Some(e);
            }
        }
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(json!({ "results": results })),
    }
}

fn records(payload: &Value) -> impl Iterator<Item = &Value> {
    payload
        .get("Records")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// The rejected object's document for an SQS message.
pub fn rejected_message_doc(
    m: &aws_lambda_events::sqs::SqsMessage,
    source: Option<&str>,
    p: &Problem,
) -> Map<String, Value> {
    let message = serde_json::to_value(m).unwrap_or(Value::Null);
    rejected_doc("message", message, source, p)
}
