//! The submitter's due messages (`RECORD_EVENTS=submitter`; docs/protocol.md,
//! "Due messages from the submitter"), as the engine sends them: one per
//! keyed submit, retried like a store request within the submit's operation
//! deadline.
//!
//! - `DUE_MESSAGE=before_claim` (the default): the submit waits for the
//!   queue to accept the message before it sends its record's PUT, so no
//!   record exists without an accepted message. A message that still fails
//!   fails the submit, retryably, with nothing written: the key stays free.
//! - `with_claim`: the message goes beside the first claim's PUT, never
//!   after it, one round trip shorter; one that still fails is counted and
//!   logged while the submit goes on (a live process finishes its own
//!   submit; one that dies too leaves its record to a replay).
//!
//! Either way the message carries its send time, so that the sweeper knows
//! how long a record it does not find yet may still land. How a batch's
//! items share their requests is src/due_sender/gather.rs.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use chrono::{DateTime, Duration, Utc};

use super::engine::{Engine, Failure};
use super::error::SubmitError;
use crate::due_sender::{Coalescer, DueOrder, RecordDue, Route, SendError};
use crate::store::StoreError;

impl Engine {
    /// Under `RECORD_EVENTS=submitter` (nothing otherwise): how this
    /// engine's messages go against the record's PUT.
    pub(crate) fn due_order(&self) -> Option<DueOrder> {
        self.due.as_ref().map(|d| d.order())
    }

    /// Queues the due message of the record at `rkey` (under
    /// `RECORD_EVENTS=submitter`; nothing otherwise), with retries within
    /// `op_deadline`. A message that still fails is counted
    /// ([`Engine::take_unsent_due_messages`]) and logged; under
    /// [`DueOrder::BeforeClaim`] it is the submit's error (retryable: no
    /// record is written), under [`DueOrder::WithClaim`] the submit goes on.
    pub(crate) async fn send_due(
        &self,
        rkey: &str,
        op_deadline: DateTime<Utc>,
    ) -> Result<(), SubmitError> {
        let Some(due) = &self.due else { return Ok(()) };
        let message = RecordDue::new(due.bucket(), rkey).sent_at(self.signing_time());
        let first = AtomicBool::new(true);
        let attempt = || {
            let m = message.clone();
            let through_batch = first.swap(false, Ordering::Relaxed);
            async move {
                let batched = match (&self.due_route, through_batch) {
                    (Route::Batch(p), true) => p.send(m.clone()).await,
                    _ => None,
                };
                let outcome = match batched {
                    Some(o) => o,
                    None => due
                        .sender
                        .send(std::slice::from_ref(&m))
                        .await
                        .pop()
                        .unwrap_or_else(|| {
                            Err(SendError::Unavailable("the sender answered nothing".into()))
                        }),
                };
                outcome.map_err(|e| match e {
                    SendError::Unavailable(w) => StoreError::Unavailable(w),
                    SendError::Refused(w) => StoreError::Fatal(w),
                })
            }
        };
        let Err(e) = self.with_retries(op_deadline, attempt).await else {
            return Ok(());
        };
        due.unsent.fetch_add(1, Ordering::Relaxed);
        let error = match e {
            Failure::Deadline => "the submit's operation deadline came first".to_owned(),
            Failure::Store(e) => e.to_string(),
        };
        match due.order() {
            DueOrder::BeforeClaim => {
                tracing::error!(
                    record = rkey,
                    error = %error,
                    "the record's due message was not accepted: nothing is written, the submit answers retryably"
                );
                // Retryable whatever the queue said: nothing was written,
                // and the key is as free as it was.
                Err(SubmitError::Storage(StoreError::Unavailable(format!(
                    "the due queue did not accept the record's due message: {error}"
                ))))
            }
            DueOrder::WithClaim => {
                tracing::error!(
                    record = rkey,
                    error = %error,
                    "the record's due message was not sent: if this process dies before its task is written, only the next submit of its key finishes it"
                );
                Ok(())
            }
        }
    }

    /// The time a message sent now says it was sent: the clock this
    /// process's S3 requests are signed with. Once S3's answers have told
    /// its offset, S3's latest time now (the SDK signs with the skew it has
    /// learnt); before that, the machine's own clock, which the first
    /// claim's signature uses too (docs/protocol.md, "Due messages from the
    /// submitter").
    fn signing_time(&self) -> DateTime<Utc> {
        let ahead = self
            .judged_offset()
            .map_or(Duration::zero(), |o| o.high.max(Duration::zero()));
        self.now() + ahead
    }

    /// This submit will send no due message through its batch (it has no
    /// key, or was refused before its claim).
    pub(crate) fn send_no_due(&self) {
        if let Route::Batch(p) = &self.due_route {
            p.done();
        }
    }

    /// Due messages that could not be sent since the last call (the
    /// `DueMessageUnsent` metric).
    pub fn take_unsent_due_messages(&self) -> u64 {
        self.due
            .as_ref()
            .map_or(0, |d| d.unsent.swap(0, Ordering::Relaxed))
    }

    /// Whether this engine's submits send their records' due messages.
    pub fn sends_due_messages(&self) -> bool {
        self.due.is_some()
    }

    /// A batch's gathering of due messages, when they are sent at all.
    pub(crate) fn due_batch(&self) -> Option<Arc<Coalescer>> {
        self.due.as_ref().map(|d| Coalescer::new(d.clone()))
    }

    /// This engine, as one item of `batch`.
    pub(crate) fn in_batch(&self, batch: &Option<Arc<Coalescer>>) -> Engine {
        let mut e = self.clone();
        if let Some(b) = batch {
            e.due_route = Route::Batch(b.join());
        }
        e
    }
}
