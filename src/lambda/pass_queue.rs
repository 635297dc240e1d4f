//! The pass queue: where a scheduled pass hands the rest of its work on
//! (`PASS_QUEUE_URL`; template.yaml's `PassQueue`, whose event source
//! mapping runs the `sweep` function on each continuation, at most
//! `PASS_CONCURRENCY` at once). Every call this crate makes to it.

use async_trait::async_trait;
use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::SendMessageBatchRequestEntry;

use crate::protocol::{Continuation, HandOn};

/// SQS's most messages a `SendMessageBatch`.
const PER_REQUEST: usize = 10;

/// The pass queue on SQS, by its URL.
#[derive(Clone, Debug)]
pub struct SqsHandOn {
    client: Client,
    queue_url: String,
}

impl SqsHandOn {
    /// Sends to the queue at `queue_url` through `client`.
    pub fn new(client: Client, queue_url: impl Into<String>) -> Self {
        SqsHandOn {
            client,
            queue_url: queue_url.into(),
        }
    }

    /// The queue at `queue_url` on a client configured from the
    /// environment, retried by the SDK.
    pub async fn from_env(queue_url: impl Into<String>) -> Self {
        let client = crate::aws::sqs_client(crate::aws::Retries::ByTheSdk).await;
        Self::new(client, queue_url)
    }
}

#[async_trait]
impl HandOn for SqsHandOn {
    async fn hand_on(&self, continuations: &[Continuation]) -> Result<(), String> {
        for chunk in continuations.chunks(PER_REQUEST) {
            let entries = chunk
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let body = serde_json::to_string(c).map_err(|e| e.to_string())?;
                    SendMessageBatchRequestEntry::builder()
                        .id(i.to_string())
                        .message_body(body)
                        .build()
                        .map_err(|e| e.to_string())
                })
                .collect::<Result<Vec<_>, String>>()?;
            let out = self
                .client
                .send_message_batch()
                .queue_url(&self.queue_url)
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(|e| aws_sdk_sqs::error::DisplayErrorContext(e).to_string())?;
            if !out.failed().is_empty() {
                return Err(format!(
                    "{} of {} continuations refused",
                    out.failed().len(),
                    chunk.len()
                ));
            }
        }
        Ok(())
    }
}
