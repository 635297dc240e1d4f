//! The `sweep` function's batches of the due queue: the SQS event's messages
//! handled as src/intake/due.rs handles them, answered with the SQS partial
//! batch response (the messages to deliver again).

use aws_lambda_events::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent};
use lambda_runtime::LambdaEvent;

use super::Metrics;
use crate::Queue;
use crate::intake::due::{DueMessage, handle_messages};

/// The `sweep` function on a batch of the due queue: the SQS partial batch
/// response, its summary logged and counted.
pub async fn handle(
    queue: &Queue,
    metrics: &Metrics,
    bucket: &str,
    event: LambdaEvent<SqsEvent>,
) -> SqsBatchResponse {
    let messages: Vec<DueMessage> = event
        .payload
        .records
        .into_iter()
        .map(|m| DueMessage {
            id: m.message_id.unwrap_or_default(),
            body: m.body.unwrap_or_default(),
        })
        .collect();
    let deadline = super::schedule::stop_at(queue, event.context.deadline());
    let batch = handle_messages(queue, bucket, &messages, false, deadline).await;
    super::report_sweep(
        metrics,
        &event.context.request_id,
        "due batch",
        &batch.summary,
        (messages.len(), batch.retry.len()),
    );
    let mut resp = SqsBatchResponse::default();
    for id in batch.retry {
        let mut f = BatchItemFailure::default();
        f.item_identifier = id;
        resp.batch_item_failures.push(f);
    }
    resp
}
