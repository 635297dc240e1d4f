//! The due messages of one engine, and of one batch: where they go, in
//! which order against the record's PUT (`DUE_MESSAGE`), how many could not
//! be sent, and how the items of one batch ([`crate::Queue::submit_many`])
//! send theirs together, ten to a `SendMessageBatch`.
//!
//! Each item's first message waits in the batch's [`Coalescer`] until ten
//! are waiting or every other item of the batch has sent its own or will
//! send none (it has no key, was refused, or ended), and the item whose
//! message completes a group sends it. All items reach their send in the
//! same instant (the batch starts them together and nothing is awaited
//! before it but a schema GET that they share), so a batch costs one round
//! for its messages, whatever its size: before its claims under
//! `before_claim`, beside them under `with_claim`.
//!
//! It knows the sender and nothing of the protocol: the engine decides when
//! to send (src/protocol/due.rs).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{Notify, oneshot};

use super::{DueOrder, DueSender, MAX_PER_REQUEST, RecordDue, SendError};

/// Where an engine's due messages go: the sender, the bucket they name, and
/// how many could not be sent (for the metrics).
pub struct DueMessages {
    pub(crate) sender: Arc<dyn DueSender>,
    bucket: String,
    order: DueOrder,
    pub(crate) unsent: AtomicU64,
}

impl DueMessages {
    /// Messages to `sender` naming records of `bucket`, accepted before
    /// each claim ([`DueOrder::BeforeClaim`], the default).
    pub fn new(sender: Arc<dyn DueSender>, bucket: impl Into<String>) -> Self {
        DueMessages {
            sender,
            bucket: bucket.into(),
            order: DueOrder::default(),
            unsent: AtomicU64::new(0),
        }
    }

    /// The same, sent in `order` against the record's PUT.
    pub fn in_order(mut self, order: DueOrder) -> Self {
        self.order = order;
        self
    }

    /// The bucket the messages name.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// When the message goes, against the record's PUT.
    pub fn order(&self) -> DueOrder {
        self.order
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
    pub(crate) async fn send(&self, m: RecordDue) -> Option<Result<(), SendError>> {
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
