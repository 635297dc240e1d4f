//! Due messages sent by the submitter (`RECORD_EVENTS=submitter`, for
//! buckets that send no S3 events: other providers, S3 Express, a bucket
//! whose notification belongs to someone else).
//!
//! Every submit that writes a record queues the record's due message itself
//! to the due queue, whose delay (`STALE_CREATING_AFTER_SECONDS`) hands it to
//! the sweeper once the record is stale: the message the bucket's S3 event
//! would have been. By default (`DUE_MESSAGE=before_claim`) the queue has
//! accepted the message before the record's PUT is sent, so no record ever
//! exists without its message; with `with_claim` it goes in the same round
//! as the PUT. The sweeper takes both kinds of message from the same queue
//! with the same outcomes (its one parser is in the due-queue adapter).
//!
//! A [`DueSender`] is the queue, cut down to the one call the protocol makes,
//! injected into the engine as the store and the clock are:
//! [`SqsDueSender`] (the `sqs` feature) for SQS, [`MemoryDueQueue`] for unit
//! tests, fault injection and the model test.
//!
//! | outcome of one message | what it means | what the protocol does |
//! | --- | --- | --- |
//! | `Ok(())` | queued: it reaches the sweeper after the queue's delay | nothing more |
//! | [`SendError::Unavailable`] | throttled, a server error, a timeout, no connection: it may or may not be queued | sends it again (a duplicate costs the sweeper one read) |
//! | [`SendError::Refused`] | the queue will keep refusing it (no such queue, access denied, a malformed request): not queued | counts and logs it |
//!
//! Under `before_claim` a message that is never queued writes nothing (the
//! submit answers retryably); under `with_claim` it leaves its record to the
//! next submit of its key if the submitting process also dies before its
//! task is written (docs/protocol.md, "Due messages from the submitter").

pub(crate) mod gather;
pub mod memory;
#[cfg(feature = "sqs")]
pub mod sqs;

use async_trait::async_trait;
use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;

pub use gather::DueMessages;
pub(crate) use gather::{Coalescer, Route};
pub use memory::{DueFault, MemoryDueQueue, SentRequest};
#[cfg(feature = "sqs")]
pub use sqs::{SqsDueQueue, SqsDueSender};

/// The most messages of one request (SQS's `SendMessageBatch` takes 10).
pub const MAX_PER_REQUEST: usize = 10;

/// When a submit's due message goes, against its record's PUT
/// (`DUE_MESSAGE`; docs/protocol.md, "Due messages from the submitter").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DueOrder {
    /// Accepted by the queue before the record's PUT is sent: no record
    /// exists without its message, and a send that fails writes nothing
    /// (the submit answers retryably). One round trip more than
    /// [`DueOrder::WithClaim`].
    #[default]
    BeforeClaim,
    /// Sent beside the record's first PUT: one round trip shorter, but a
    /// process that dies after its PUT and before the queue took the
    /// message leaves its record to the next submit of its key.
    WithClaim,
}

impl DueOrder {
    /// The value of `DUE_MESSAGE` that names it.
    pub fn as_str(&self) -> &'static str {
        match self {
            DueOrder::BeforeClaim => "before_claim",
            DueOrder::WithClaim => "with_claim",
        }
    }

    /// Reads a value of `DUE_MESSAGE` (trimmed, any case; empty is the
    /// default).
    pub fn parse(v: &str) -> Option<Self> {
        match v.trim().to_ascii_lowercase().as_str() {
            "" | "before_claim" => Some(DueOrder::BeforeClaim),
            "with_claim" => Some(DueOrder::WithClaim),
            _ => None,
        }
    }
}

/// What a due message's body says its `source` is.
pub const SOURCE: &str = "idempotent-submit";
/// What it says happened.
pub const EVENT: &str = "record_written";

/// One record's due message: "the record at `key` in `bucket` is written,
/// or about to be; look at it once it is stale". Its body is a small JSON
/// object ([`RecordDue::to_body`]); it names the record, not one write of it,
/// so a claim that is retried or replaces an expired record is covered by
/// the message sent with its first attempt.
///
/// `sent_at` is when the submit sent it, by the clock its S3 requests are
/// signed with (its S3 time, once it knows it). It bounds when the record
/// can still land: every claim of that submit starts before its operation
/// deadline, and S3 takes no request signed more than the late-write margin
/// (15 minutes) before its own time. So a message that finds no record is
/// handed back until `sent_at` + the operation deadline + the margin has
/// passed, and only then taken to mean that its submit died before any PUT
/// (docs/protocol.md, "Due messages from the submitter"). A message without
/// it (sent by an earlier version) finds its record or nothing, as before.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordDue {
    /// The bucket the record is in.
    pub bucket: String,
    /// The record's object key, `idempotency/{scope}/{hex}.json`.
    pub key: String,
    /// When its submit sent it (see above).
    pub sent_at: Option<DateTime<Utc>>,
}

#[derive(Serialize)]
struct Body<'a> {
    source: &'a str,
    event: &'a str,
    bucket: &'a str,
    key: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    sent_at: Option<String>,
}

impl RecordDue {
    /// The due message of the record at `key` in `bucket`, without a send
    /// time.
    pub fn new(bucket: impl Into<String>, key: impl Into<String>) -> Self {
        RecordDue {
            bucket: bucket.into(),
            key: key.into(),
            sent_at: None,
        }
    }

    /// The same message, sent at `at`.
    pub fn sent_at(mut self, at: DateTime<Utc>) -> Self {
        self.sent_at = Some(at);
        self
    }

    /// `{"source":"idempotent-submit","event":"record_written","bucket":…,"key":…,"sent_at":…}`,
    /// `sent_at` in RFC 3339 to the millisecond.
    pub fn to_body(&self) -> String {
        serde_json::to_string(&Body {
            source: SOURCE,
            event: EVENT,
            bucket: &self.bucket,
            key: &self.key,
            sent_at: self
                .sent_at
                .map(|at| at.to_rfc3339_opts(SecondsFormat::Millis, true)),
        })
        // A struct of strings always serializes.
        .unwrap_or_default()
    }

    /// Reads a body that says it is a due message of this service
    /// (`source` is [`SOURCE`]): `None` when it does not say so (it may be an
    /// S3 notification); `Some(Err(why))` when it says so but is malformed.
    pub fn from_json(v: &serde_json::Value) -> Option<Result<RecordDue, String>> {
        if v.get("source").and_then(serde_json::Value::as_str) != Some(SOURCE) {
            return None;
        }
        let event = v.get("event").and_then(serde_json::Value::as_str);
        if event != Some(EVENT) {
            return Some(Err(format!("a due message of event {event:?}")));
        }
        let field = |name: &str| v.get(name).and_then(serde_json::Value::as_str);
        let sent_at = match v.get("sent_at") {
            None => None,
            Some(t) => match t.as_str().map(DateTime::parse_from_rfc3339) {
                Some(Ok(t)) => Some(t.with_timezone(&Utc)),
                _ => return Some(Err("a due message whose sent_at is no RFC 3339 time".into())),
            },
        };
        Some(match (field("bucket"), field("key")) {
            (Some(b), Some(k)) if !b.is_empty() && !k.is_empty() => Ok(RecordDue {
                bucket: b.to_owned(),
                key: k.to_owned(),
                sent_at,
            }),
            _ => Err("a due message without bucket or key".into()),
        })
    }
}

/// Why a due message was not (known to be) queued.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// Throttling, a server error, a timeout or no connection: the message
    /// may or may not be queued. Worth another attempt.
    #[error("due queue unavailable: {0}")]
    Unavailable(String),
    /// The queue refuses it and will again (no such queue, access denied, a
    /// malformed request): not queued.
    #[error("due queue refused the message: {0}")]
    Refused(String),
}

impl SendError {
    /// Worth another attempt: the queue may take it then.
    pub fn is_retryable(&self) -> bool {
        matches!(self, SendError::Unavailable(_))
    }
}

/// The due queue, as the protocol uses it: messages that the queue hands to
/// the sweeper after its own delay.
///
/// Implementations promise:
/// - [`DueSender::send`] queues every message of `messages` (1 to
///   [`MAX_PER_REQUEST`]) in **one request** (a batch of 10 is one SQS
///   request), each with the queue's own delay (no per-message delay: the
///   queue's `DelaySeconds` is `STALE_CREATING_AFTER_SECONDS`, and the
///   doctor checks it);
/// - it answers one outcome per message, in order: `Ok` only for a message
///   the queue accepted; a request that failed as a whole answers its error
///   for every message;
/// - it never retries by itself (the engine does, within the submit's
///   operation deadline and each attempt's timeout), and never panics;
/// - its errors never carry credentials.
#[async_trait]
pub trait DueSender: Send + Sync + 'static {
    /// Queues `messages` in one request; one outcome per message, in order.
    async fn send(&self, messages: &[RecordDue]) -> Vec<Result<(), SendError>>;
}

#[async_trait]
impl<S: DueSender + ?Sized> DueSender for std::sync::Arc<S> {
    async fn send(&self, messages: &[RecordDue]) -> Vec<Result<(), SendError>> {
        (**self).send(messages).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_due_message_reads_back_as_itself_and_other_bodies_are_not_taken() {
        let m = RecordDue::new("b", "idempotency/t/ab.json");
        let body = m.to_body();
        assert_eq!(
            body,
            r#"{"source":"idempotent-submit","event":"record_written","bucket":"b","key":"idempotency/t/ab.json"}"#
        );
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(RecordDue::from_json(&v), Some(Ok(m.clone())));
        let at = DateTime::parse_from_rfc3339("2026-01-27T12:00:00.250Z")
            .unwrap()
            .with_timezone(&Utc);
        let sent = m.sent_at(at);
        assert_eq!(
            sent.to_body(),
            r#"{"source":"idempotent-submit","event":"record_written","bucket":"b","key":"idempotency/t/ab.json","sent_at":"2026-01-27T12:00:00.250Z"}"#
        );
        let v: serde_json::Value = serde_json::from_str(&sent.to_body()).unwrap();
        assert_eq!(RecordDue::from_json(&v), Some(Ok(sent)));
        let read = |s: &str| RecordDue::from_json(&serde_json::from_str(s).unwrap());
        assert_eq!(read(r#"{"Records":[]}"#), None);
        assert_eq!(read(r#"{"source":"aws:s3"}"#), None);
        for bad in [
            r#"{"source":"idempotent-submit"}"#,
            r#"{"source":"idempotent-submit","event":"record_deleted","bucket":"b","key":"k"}"#,
            r#"{"source":"idempotent-submit","event":"record_written","bucket":"b"}"#,
            r#"{"source":"idempotent-submit","event":"record_written","bucket":"","key":"k"}"#,
            r#"{"source":"idempotent-submit","event":"record_written","bucket":1,"key":"k"}"#,
            r#"{"source":"idempotent-submit","event":"record_written","bucket":"b","key":"k","sent_at":"yesterday"}"#,
            r#"{"source":"idempotent-submit","event":"record_written","bucket":"b","key":"k","sent_at":1}"#,
        ] {
            assert!(matches!(read(bad), Some(Err(_))), "{bad} was taken");
        }
    }

    #[test]
    fn only_an_unavailable_queue_is_worth_another_attempt() {
        assert!(SendError::Unavailable("503".into()).is_retryable());
        assert!(!SendError::Refused("403".into()).is_retryable());
    }
}
