//! The due queue on SQS: `SendMessage` for one message, `SendMessageBatch`
//! for 2 to 10. The one place where SQS's answers become [`SendError`]s.

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
