//! The submitter's due messages (`RECORD_EVENTS=submitter`; docs/protocol.md,
//! "Due messages from the submitter"), as the engine sends them: one per
//! keyed submit, started with its first claim (beside the record's PUT, never
//! after it), retried like a store request within the submit's operation
//! deadline, and, if it still fails, counted and logged while the submit goes
//! on: a live process finishes its own submit.
//!
//! The items of one batch ([`crate::Queue::submit_many`]) send theirs
//! together, ten to a `SendMessageBatch`: each item's first message waits in
//! the batch's [`Coalescer`] until ten are waiting or every other item of the
//! batch has sent its own or will send none (it has no key, was refused, or
//! ended), and the item whose message completes a group sends it. All items
//! reach their claim in the same instant (the batch starts them together and
//! nothing is awaited before a claim but a schema GET that they share), so
//! the groups go out beside the items' record PUTs: no round trip is added.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use tokio::sync::{Notify, oneshot};

use super::engine::{Engine, Failure};
use crate::due_sender::{DueSender, MAX_PER_REQUEST, RecordDue, SendError};
use crate::store::StoreError;

/// Where an engine's due messages go: the sender, the bucket they name, and
/// how many could not be sent (for the metrics).
pub struct DueMessages {
    sender: Arc<dyn DueSender>,
    bucket: String,
    unsent: AtomicU64,
}

impl DueMessages {
    pub fn new(sender: Arc<dyn DueSender>, bucket: impl Into<String>) -> Self {
        DueMessages {
            sender,
            bucket: bucket.into(),
            unsent: AtomicU64::new(0),
        }
    }

    pub fn bucket(&self) -> &str {
        &self.bucket
    }
}

/// How this engine's first due message goes out: alone, or with the other
/// items of its batch.
#[derive(Clone, Default)]
pub(crate) enum Route {
    #[default]
    Alone,
    Batch(Arc<Participant>),
}

type Reply = oneshot::Sender<Result<(), SendError>>;

#[derive(Default)]
struct Waiting {
    /// Items of the batch that have neither sent their first message nor
    /// said that they will send none.
    idle: usize,
    pending: Vec<(RecordDue, Reply)>,
}

/// The due messages of one batch, gathered into groups of ten.
pub(crate) struct Coalescer {
    due: Arc<DueMessages>,
    state: Mutex<Waiting>,
    changed: Notify,
}

/// One item of a batch: its first message goes through the batch.
pub(crate) struct Participant {
    batch: Arc<Coalescer>,
    /// Sent its first message, or will send none.
    spent: AtomicBool,
}

impl Coalescer {
    pub(crate) fn new(due: Arc<DueMessages>) -> Arc<Self> {
        Arc::new(Coalescer {
            due,
            state: Mutex::default(),
            changed: Notify::new(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Waiting> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new item of the batch, idle until it sends or says it will not.
    pub(crate) fn join(self: &Arc<Self>) -> Arc<Participant> {
        self.lock().idle += 1;
        Arc::new(Participant {
            batch: self.clone(),
            spent: AtomicBool::new(false),
        })
    }

    /// The messages to send now: a full group, or every one waiting once no
    /// item of the batch is idle.
    fn ready(w: &mut Waiting) -> Option<Vec<(RecordDue, Reply)>> {
        if w.pending.len() >= MAX_PER_REQUEST {
            Some(w.pending.drain(..MAX_PER_REQUEST).collect())
        } else if w.idle == 0 && !w.pending.is_empty() {
            Some(std::mem::take(&mut w.pending))
        } else {
            None
        }
    }

    /// One request for `group`; each message's outcome to its item.
    async fn flush(&self, group: Vec<(RecordDue, Reply)>) {
        let (messages, replies): (Vec<RecordDue>, Vec<Reply>) = group.into_iter().unzip();
        let mut outcomes = self.due.sender.send(&messages).await.into_iter();
        for reply in replies {
            let outcome = outcomes.next().unwrap_or_else(|| {
                Err(SendError::Unavailable(
                    "the sender answered fewer outcomes than messages".into(),
                ))
            });
            // An item that stopped waiting (its attempt timed out) sends its
            // own again.
            let _ = reply.send(outcome);
        }
    }
}

impl Participant {
    /// This item will send no (more) message through the batch.
    pub(crate) fn done(&self) {
        if !self.spent.swap(true, Ordering::SeqCst) {
            let mut w = self.batch.lock();
            w.idle = w.idle.saturating_sub(1);
            drop(w);
            self.batch.changed.notify_waiters();
        }
    }

    /// Sends `m` with the batch's other messages; `None` when this item has
    /// sent through the batch already (it sends alone then).
    async fn send(&self, m: RecordDue) -> Option<Result<(), SendError>> {
        if self.spent.swap(true, Ordering::SeqCst) {
            return None;
        }
        let (tx, mut rx) = oneshot::channel();
        {
            let mut w = self.batch.lock();
            w.idle = w.idle.saturating_sub(1);
            w.pending.push((m, tx));
        }
        self.batch.changed.notify_waiters();
        loop {
            let changed = self.batch.changed.notified();
            tokio::pin!(changed);
            // Registered before the state is read, so no change is missed.
            changed.as_mut().enable();
            match rx.try_recv() {
                Ok(outcome) => return Some(outcome),
                Err(oneshot::error::TryRecvError::Closed) => {
                    return Some(Err(SendError::Unavailable(
                        "the batch's request was dropped".into(),
                    )));
                }
                Err(oneshot::error::TryRecvError::Empty) => {}
            }
            let group = Coalescer::ready(&mut self.batch.lock());
            if let Some(group) = group {
                self.batch.flush(group).await;
                continue;
            }
            tokio::select! {
                outcome = &mut rx => {
                    return Some(outcome.unwrap_or_else(|_| {
                        Err(SendError::Unavailable("the batch's request was dropped".into()))
                    }));
                }
                () = changed => {}
            }
        }
    }
}

impl Drop for Participant {
    fn drop(&mut self) {
        self.done();
    }
}

impl Engine {
    /// Queues the due message of the record at `rkey` (under
    /// `RECORD_EVENTS=submitter`; nothing otherwise), with retries within
    /// `op_deadline`. A message that still fails is counted
    /// ([`Engine::take_unsent_due_messages`]) and logged; the submit goes on.
    pub(crate) async fn send_due(&self, rkey: &str, op_deadline: DateTime<Utc>) {
        let Some(due) = &self.due else { return };
        let message = RecordDue::new(due.bucket.clone(), rkey);
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
        match self.with_retries(op_deadline, attempt).await {
            Ok(()) => {}
            Err(e) => {
                due.unsent.fetch_add(1, Ordering::Relaxed);
                let error = match e {
                    Failure::Deadline => "the submit's operation deadline came first".to_owned(),
                    Failure::Store(e) => e.to_string(),
                };
                tracing::error!(
                    record = rkey,
                    error = %error,
                    "the record's due message was not sent: if this process dies before its task is written, only the next submit of its key finishes it"
                );
            }
        }
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
