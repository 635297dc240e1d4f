//! SQS events, standard and FIFO (docs/operations.md, "The `submit` function").
//!
//! Every message is a `POST /tasks` body, or an event a source of `SOURCES`
//! takes (src/lambda/sources.rs). The answer lists exactly the messages to
//! retry (storage failures); a message that can never succeed is written to
//! `rejected/{yyyy}/{mm}/{dd}/{message_id}.json` and not retried.

use aws_lambda_events::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use futures::StreamExt;

use super::{App, Outcome};
use crate::intake::{Problem, SubmitBody};
use crate::protocol::{IfTaskFailed, ValidationError};

fn is_fifo(event: &SqsEvent) -> bool {
    event.records.iter().any(|m| {
        m.attributes.contains_key("MessageGroupId")
            || m.event_source_arn
                .as_deref()
                .is_some_and(|a| a.ends_with(".fifo"))
    })
}

/// Handles a batch; never fails (every failure is a listed message).
pub async fn handle(app: &App, event: SqsEvent) -> SqsBatchResponse {
    let records = &event.records;
    let results = if is_fifo(&event) {
        process_in_groups(app, records, fifo_groups(records)).await
    } else {
        process_all(app, records).await
    };
    let mut outcomes: Vec<Option<Outcome>> = vec![None; records.len()];
    for (i, o) in results {
        outcomes[i] = Some(o);
    }
    let mut resp = SqsBatchResponse::default();
    for (m, o) in records.iter().zip(outcomes) {
        if o == Some(Outcome::Retry) {
            let mut f = BatchItemFailure::default();
            f.item_identifier = m.message_id.clone().unwrap_or_default();
            resp.batch_item_failures.push(f);
        }
    }
    resp
}

/// The messages of each FIFO group (`MessageGroupId`), in the batch's
/// order, the groups in the order they first appear.
fn fifo_groups(records: &[SqsMessage]) -> Vec<Vec<usize>> {
    let mut groups: Vec<(&str, Vec<usize>)> = Vec::new();
    for (i, m) in records.iter().enumerate() {
        let g = m
            .attributes
            .get("MessageGroupId")
            .map_or("", String::as_str);
        match groups.iter_mut().find(|(k, _)| *k == g) {
            Some((_, v)) => v.push(i),
            None => groups.push((g, vec![i])),
        }
    }
    groups.into_iter().map(|(_, v)| v).collect()
}

/// Every message side by side.
async fn process_all(app: &App, records: &[SqsMessage]) -> Vec<(usize, Outcome)> {
    futures::stream::iter(0..records.len())
        .map(|i| async move { (i, process(app, &records[i]).await) })
        .buffer_unordered(app.sqs_concurrency.max(1))
        .collect()
        .await
}

/// The messages of one group in order, groups side by side. After a
/// failure, the group's later messages are listed untouched, so that SQS
/// redelivers them in order.
async fn process_in_groups(
    app: &App,
    records: &[SqsMessage],
    groups: Vec<Vec<usize>>,
) -> Vec<(usize, Outcome)> {
    let results: Vec<Vec<(usize, Outcome)>> = futures::stream::iter(groups)
        .map(|idx| async move {
            let mut out = Vec::with_capacity(idx.len());
            let mut failed = false;
            for i in idx {
                let o = if failed {
                    Outcome::Retry
                } else {
                    process(app, &records[i]).await
                };
                failed |= o == Outcome::Retry;
                out.push((i, o));
            }
            out
        })
        .buffer_unordered(app.sqs_concurrency.max(1))
        .collect()
        .await;
    results.into_iter().flatten().collect()
}

/// The key of a message: the body's, else [`message_identity`].
fn message_key(body: &SubmitBody, m: &SqsMessage) -> Option<String> {
    body.idempotency_key.clone().or_else(|| message_identity(m))
}

/// A message's own identity: the `Idempotency-Key` attribute, else the FIFO
/// deduplication id, else the message id.
fn message_identity(m: &SqsMessage) -> Option<String> {
    m.message_attributes
        .get("Idempotency-Key")
        .and_then(|a| a.string_value.clone())
        .or_else(|| m.attributes.get("MessageDeduplicationId").cloned())
        .or_else(|| m.message_id.clone())
}

/// The `If-Task-Failed` attribute (String: `replay` or `new_task`), for a
/// body that does not say: a producer that cannot change the body (another
/// system's JSON) can still ask for a new task after a failure.
fn if_task_failed_attribute(body: &mut SubmitBody, m: &SqsMessage) -> Result<(), ValidationError> {
    if body.if_task_failed.is_some() {
        return Ok(());
    }
    if let Some(v) = m
        .message_attributes
        .get("If-Task-Failed")
        .and_then(|a| a.string_value.as_deref())
    {
        body.if_task_failed = Some(IfTaskFailed::parse(v).map_err(|_| {
            ValidationError::field(
                "If-Task-Failed",
                format!("{v:?} is not one of replay, new_task"),
            )
        })?);
    }
    Ok(())
}

/// Submits one message of a batch: its outcome.
pub async fn process(app: &App, m: &SqsMessage) -> Outcome {
    let id = m.message_id.as_deref().unwrap_or("");
    let limit = app.queue.settings().max_input_bytes;
    let raw = m.body.as_deref().unwrap_or("");
    if raw.len() > limit + 64 * 1024 {
        let p = Problem::too_large(format!(
            "the body is far over the input limit of {limit} bytes"
        ));
        return reject(app, m, &p).await;
    }
    match super::sources::sqs_message(app, m, message_identity(m)).await {
        None => {}
        Some(Ok(o)) => return o,
        Some(Err((source, p))) => return reject_from(app, m, source.as_deref(), &p).await,
    }
    let mut body = match SubmitBody::parse(raw.as_bytes()) {
        Ok(b) => b,
        Err(e) => return reject(app, m, &Problem::invalid(e.to_string())).await,
    };
    if let Err(e) = if_task_failed_attribute(&mut body, m) {
        return reject(app, m, &Problem::invalid(e.to_string())).await;
    }
    let key = message_key(&body, m);
    let result = match body.into_submit(&app.queue, key, None) {
        Ok(b) => b.await,
        Err(e) => Err(e.into()),
    };
    app.metrics.submit(&result);
    match result {
        Ok(s) => {
            tracing::info!(message_id = id, task_id = %s.task_id, replayed = s.replayed, "submitted");
            Outcome::Submitted
        }
        Err(e) if e.kind().is_the_requests_fault() => {
            reject(app, m, &Problem::from_submit(&e)).await
        }
        Err(e) => {
            tracing::warn!(message_id = id, code = e.code(), error = %e, "submit failed; message will be retried");
            Outcome::Retry
        }
    }
}

/// A `POST /tasks` body that can never succeed: its rejected object as it
/// always was (no `source`).
async fn reject(app: &App, m: &SqsMessage, p: &Problem) -> Outcome {
    let mut doc = super::sources::rejected_message_doc(m, None, p);
    doc.remove("source");
    write_rejected(app, m, None, doc, p).await
}

/// An event of `SOURCES` that can never succeed, with the source that took
/// it (`null`: none did).
async fn reject_from(app: &App, m: &SqsMessage, source: Option<&str>, p: &Problem) -> Outcome {
    let doc = super::sources::rejected_message_doc(m, source, p);
    write_rejected(app, m, source, doc, p).await
}

/// Writes `doc` to `rejected/`, counted; listed for retry if that fails.
async fn write_rejected(
    app: &App,
    m: &SqsMessage,
    source: Option<&str>,
    doc: serde_json::Map<String, serde_json::Value>,
    p: &Problem,
) -> Outcome {
    let id = m.message_id.as_deref().unwrap_or("");
    match app.queue.write_rejected(id, doc).await {
        Ok(key) => {
            app.metrics.rejected();
            tracing::warn!(message_id = id, source, code = p.code, detail = %p.detail, rejected = %key, "message rejected");
            Outcome::Rejected
        }
        Err(e) => {
            tracing::warn!(message_id = id, error = ?e, "could not write the rejected message; it will be retried");
            Outcome::Retry
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn in_group(g: Option<&str>) -> SqsMessage {
        let mut m = SqsMessage::default();
        if let Some(g) = g {
            m.attributes.insert("MessageGroupId".into(), g.into());
        }
        m
    }

    #[test]
    fn fifo_groups_keep_the_batchs_order_within_and_between_them() {
        let records = [
            in_group(Some("b")),
            in_group(Some("a")),
            in_group(Some("b")),
            in_group(None),
            in_group(Some("a")),
        ];
        assert_eq!(fifo_groups(&records), vec![vec![0, 2], vec![1, 4], vec![3]]);
    }
}
