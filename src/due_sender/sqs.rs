//! The due queue on SQS, every call this crate makes to it: the submitter's
//! sends ([`SqsDueSender`]: `SendMessage` for one message,
//! `SendMessageBatch` for 2 to 10; the one place where SQS's answers become
//! [`SendError`]s), and the CLI's receives, deletes and releases and the
//! doctor's read of its delay ([`SqsDueQueue`]).

use async_trait::async_trait;
use aws_sdk_sqs::Client;
use aws_sdk_sqs::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_sqs::types::SendMessageBatchRequestEntry;

use super::{DueSender, MAX_PER_REQUEST, RecordDue, SendError};

/// A due queue on SQS, by its URL. Every message takes the queue's own
/// `DelaySeconds`.
#[derive(Clone, Debug)]
pub struct SqsDueSender {
    client: Client,
    queue_url: String,
}

impl SqsDueSender {
    /// Sends to the queue at `queue_url` through `client`.
    pub fn new(client: Client, queue_url: impl Into<String>) -> Self {
        SqsDueSender {
            client,
            queue_url: queue_url.into(),
        }
    }

    /// The queue's URL.
    pub fn queue_url(&self) -> &str {
        &self.queue_url
    }

    async fn send_one(&self, m: &RecordDue) -> Result<(), SendError> {
        self.client
            .send_message()
            .queue_url(&self.queue_url)
            .message_body(m.to_body())
            .send()
            .await
            .map(|_| ())
            .map_err(map_err)
    }

    async fn send_batch(&self, messages: &[RecordDue]) -> Vec<Result<(), SendError>> {
        let entries: Result<Vec<_>, _> = messages
            .iter()
            .enumerate()
            .map(|(i, m)| {
                SendMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .message_body(m.to_body())
                    .build()
            })
            .collect();
        let entries = match entries {
            Ok(e) => e,
            Err(e) => return vec![Err(SendError::Refused(e.to_string())); messages.len()],
        };
        let out = match self
            .client
            .send_message_batch()
            .queue_url(&self.queue_url)
            .set_entries(Some(entries))
            .send()
            .await
        {
            Ok(o) => o,
            Err(e) => return vec![Err(map_err(e)); messages.len()],
        };
        // An entry neither listed as sent nor as failed was not answered
        // for: it may or may not be queued.
        let mut outcomes =
            vec![Err(SendError::Unavailable("not in SQS's answer".into())); messages.len()];
        for s in out.successful() {
            if let Some(o) = s
                .id()
                .parse::<usize>()
                .ok()
                .and_then(|i| outcomes.get_mut(i))
            {
                *o = Ok(());
            }
        }
        for f in out.failed() {
            if let Some(o) = f
                .id()
                .parse::<usize>()
                .ok()
                .and_then(|i| outcomes.get_mut(i))
            {
                let why = format!("{}: {}", f.code(), f.message().unwrap_or(""));
                // SQS says whose fault an entry's failure was: the sender's
                // (a malformed entry) will fail again; its own may not.
                *o = Err(if f.sender_fault() {
                    SendError::Refused(why)
                } else {
                    SendError::Unavailable(why)
                });
            }
        }
        outcomes
    }
}

#[async_trait]
impl DueSender for SqsDueSender {
    async fn send(&self, messages: &[RecordDue]) -> Vec<Result<(), SendError>> {
        match messages {
            [] => Vec::new(),
            [one] => vec![self.send_one(one).await],
            many if many.len() <= MAX_PER_REQUEST => self.send_batch(many).await,
            many => vec![
                Err(SendError::Refused(format!(
                    "{} messages in one request; SQS takes at most {MAX_PER_REQUEST}",
                    many.len()
                )));
                many.len()
            ],
        }
    }
}

/// Any SDK failure as the protocol reads it.
fn map_err<E>(err: SdkError<E, aws_sdk_sqs::config::http::HttpResponse>) -> SendError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let text = || aws_sdk_sqs::error::DisplayErrorContext(&err).to_string();
    match &err {
        SdkError::ServiceError(se) => {
            let code = se.err().code().unwrap_or("");
            let status = se.raw().status().as_u16();
            let why = format!("{status} {code}: {}", se.err().message().unwrap_or(""));
            let retryable = status >= 500
                || status == 429
                || matches!(
                    code,
                    "RequestThrottled"
                        | "ThrottlingException"
                        | "KmsThrottled"
                        | "ServiceUnavailable"
                        | "InternalError"
                        | "InternalFailure"
                        | "RequestTimeout"
                );
            // Throttling and SQS's own failures may pass; a missing queue,
            // access denied or a malformed request will not.
            if retryable {
                SendError::Unavailable(why)
            } else {
                SendError::Refused(why)
            }
        }
        // No answer, or none readable: it may or may not be queued.
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => {
            SendError::Unavailable(text())
        }
        _ => SendError::Refused(text()),
    }
}

/// A message received from the due queue: its id, its body, and the handle
/// that deletes or releases it.
#[derive(Clone, Debug)]
pub struct Received {
    /// SQS's message id.
    pub id: String,
    /// The body, as sent.
    pub body: String,
    /// The receipt handle (none: the message cannot be deleted).
    pub handle: Option<String>,
}

/// The due queue as a consumer of it sees it (`idem sweep --due-queue`,
/// `idem doctor`): receives, deletes, releases, its delay. Errors are SQS's
/// own words, for the operator.
#[derive(Clone, Debug)]
pub struct SqsDueQueue {
    client: Client,
    url: String,
}

fn sqs_error<E: std::error::Error + 'static>(e: SdkError<E>) -> String {
    aws_sdk_sqs::error::DisplayErrorContext(e).to_string()
}

impl SqsDueQueue {
    /// The queue at `url`, through `client`.
    pub fn new(client: Client, url: impl Into<String>) -> Self {
        SqsDueQueue {
            client,
            url: url.into(),
        }
    }

    /// Up to ten messages, long-polled for `wait_seconds`.
    pub async fn receive(&self, wait_seconds: i32) -> Result<Vec<Received>, String> {
        let out = self
            .client
            .receive_message()
            .queue_url(&self.url)
            .max_number_of_messages(10)
            .wait_time_seconds(wait_seconds)
            .send()
            .await
            .map_err(sqs_error)?;
        Ok(out
            .messages
            .unwrap_or_default()
            .into_iter()
            .map(|m| Received {
                id: m.message_id.unwrap_or_default(),
                body: m.body.unwrap_or_default(),
                handle: m.receipt_handle,
            })
            .collect())
    }

    /// Deletes the messages of one receive by their receipt handles (at
    /// most ten).
    pub async fn delete(&self, handles: &[&str]) -> Result<(), String> {
        if handles.is_empty() {
            return Ok(());
        }
        let entries = handles
            .iter()
            .enumerate()
            .map(|(i, h)| {
                aws_sdk_sqs::types::DeleteMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(*h)
                    .build()
                    .map_err(|e| e.to_string())
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.client
            .delete_message_batch()
            .queue_url(&self.url)
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(sqs_error)?;
        Ok(())
    }

    /// Makes messages visible again at once, ten at a time (a dry run's).
    pub async fn release(&self, handles: &[String]) -> Result<(), String> {
        for chunk in handles.chunks(10) {
            let entries = chunk
                .iter()
                .enumerate()
                .map(|(i, h)| {
                    aws_sdk_sqs::types::ChangeMessageVisibilityBatchRequestEntry::builder()
                        .id(i.to_string())
                        .receipt_handle(h)
                        .visibility_timeout(0)
                        .build()
                        .map_err(|e| e.to_string())
                })
                .collect::<Result<Vec<_>, _>>()?;
            self.client
                .change_message_visibility_batch()
                .queue_url(&self.url)
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(sqs_error)?;
        }
        Ok(())
    }

    /// The queue's `DelaySeconds`, or why it cannot be read.
    pub async fn delay_seconds(&self) -> Result<u64, String> {
        use aws_sdk_sqs::types::QueueAttributeName::DelaySeconds;
        let out = self
            .client
            .get_queue_attributes()
            .queue_url(&self.url)
            .attribute_names(DelaySeconds)
            .send()
            .await
            .map_err(sqs_error)?;
        out.attributes()
            .and_then(|a| a.get(&DelaySeconds))
            .and_then(|d| d.parse().ok())
            .ok_or_else(|| "no DelaySeconds in its attributes".to_owned())
    }
}
