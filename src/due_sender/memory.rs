//! A due queue in memory, for unit tests, fault injection and the model
//! test: it keeps what it was sent, makes each message visible the queue's
//! delay after it was sent (by an injected clock), logs every request, and
//! fails chosen messages the ways SQS can.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use chrono::{DateTime, Duration, Utc};

use super::{DueSender, RecordDue, SendError};
use crate::clock::Clock;

/// What happens to one message of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DueFault {
    /// The queue answers this error and queues nothing.
    Fail(SendError),
    /// The message is queued, but its answer is lost: the sender sees
    /// [`SendError::Unavailable`] (a timeout after SQS took it).
    LandedAnswerLost,
    /// The request never reaches the queue: nothing is queued, and the
    /// sender sees [`SendError::Unavailable`] (lost in flight).
    Lost,
    /// The request never answers (the engine's timeout must end it);
    /// nothing is queued.
    Hang,
}

/// One message in the queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queued {
    /// Its message id: `m1`, `m2`, … in the order they were queued.
    pub id: String,
    /// Its body, as an SQS consumer reads it.
    pub body: String,
    /// The message, parsed back from its body.
    pub message: RecordDue,
    /// When the queue took it (the queue's clock).
    pub sent_at: DateTime<Utc>,
    /// When the queue hands it out: `sent_at` plus the queue's delay.
    pub visible_at: DateTime<Utc>,
}

/// One request the queue was sent, as the log keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentRequest {
    /// The messages the request carried.
    pub messages: Vec<RecordDue>,
    /// What it answered for each, in order.
    pub outcomes: Vec<Result<(), SendError>>,
    /// When it was sent (the queue's clock).
    pub at: DateTime<Utc>,
}

#[derive(Default)]
struct State {
    queued: Vec<Queued>,
    requests: Vec<SentRequest>,
    /// Faults for the next messages, one each, in order.
    faults: VecDeque<DueFault>,
    next_id: usize,
}

/// The in-memory due queue. Clones share one queue.
#[derive(Clone)]
pub struct MemoryDueQueue {
    state: Arc<Mutex<State>>,
    clock: Arc<dyn Clock>,
    delay: Duration,
}

impl std::fmt::Debug for MemoryDueQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryDueQueue")
            .field("delay", &self.delay)
            .finish()
    }
}

impl MemoryDueQueue {
    /// A queue whose messages become visible `delay` after they are sent, by
    /// `clock`.
    pub fn new(clock: Arc<dyn Clock>, delay: Duration) -> Self {
        MemoryDueQueue {
            state: Arc::default(),
            clock,
            delay,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The next `times` messages sent meet `fault`, after the faults already
    /// waiting.
    pub fn inject(&self, fault: DueFault, times: usize) {
        let mut s = self.lock();
        for _ in 0..times {
            s.faults.push_back(fault.clone());
        }
    }

    /// Every request so far, in order.
    pub fn requests(&self) -> Vec<SentRequest> {
        self.lock().requests.clone()
    }

    /// Every message in the queue, visible or not.
    pub fn queued(&self) -> Vec<Queued> {
        self.lock().queued.clone()
    }

    /// Takes the messages visible now (their delay is over), oldest first:
    /// what the sweeper would receive and then delete.
    pub fn take_visible(&self) -> Vec<Queued> {
        let now = self.clock.now();
        let mut s = self.lock();
        let (due, later) = std::mem::take(&mut s.queued)
            .into_iter()
            .partition(|q| q.visible_at <= now);
        s.queued = later;
        due
    }

    /// Puts a message back, visible again `after` from now (a message the
    /// sweeper handed back, after the queue's visibility timeout).
    pub fn hand_back(&self, mut q: Queued, after: Duration) {
        q.visible_at = self.clock.now() + after;
        self.lock().queued.push(q);
    }
}

#[async_trait]
impl DueSender for MemoryDueQueue {
    async fn send(&self, messages: &[RecordDue]) -> Vec<Result<(), SendError>> {
        let now = self.clock.now();
        let mut outcomes = Vec::with_capacity(messages.len());
        let mut hang = false;
        {
            let mut s = self.lock();
            for m in messages {
                let fault = s.faults.pop_front();
                let (queue_it, outcome) = match fault {
                    None => (true, Ok(())),
                    Some(DueFault::Fail(e)) => (false, Err(e)),
                    Some(DueFault::LandedAnswerLost) => (
                        true,
                        Err(SendError::Unavailable("the answer was lost".into())),
                    ),
                    Some(DueFault::Lost) => {
                        (false, Err(SendError::Unavailable("lost in flight".into())))
                    }
                    Some(DueFault::Hang) => {
                        hang = true;
                        (false, Err(SendError::Unavailable("no answer".into())))
                    }
                };
                if queue_it {
                    s.next_id += 1;
                    let id = format!("m{}", s.next_id);
                    s.queued.push(Queued {
                        id,
                        body: m.to_body(),
                        message: m.clone(),
                        sent_at: now,
                        visible_at: now + self.delay,
                    });
                }
                outcomes.push(outcome);
            }
            s.requests.push(SentRequest {
                messages: messages.to_vec(),
                outcomes: outcomes.clone(),
                at: now,
            });
        }
        if hang {
            std::future::pending::<()>().await;
        }
        outcomes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    #[tokio::test]
    async fn messages_become_visible_after_the_delay_and_faults_hit_the_next_ones_in_order() {
        let clock = ManualClock::at_epoch();
        let q = MemoryDueQueue::new(Arc::new(clock.clone()), Duration::seconds(600));
        q.inject(DueFault::Lost, 1);
        q.inject(DueFault::LandedAnswerLost, 1);
        let m = |k: &str| RecordDue::new("b", k);
        let out = q.send(&[m("a"), m("b"), m("c")]).await;
        assert_eq!(
            out.iter().map(Result::is_ok).collect::<Vec<_>>(),
            [false, false, true]
        );
        assert_eq!(q.requests().len(), 1);
        // "a" never reached the queue; "b" did, though its answer was lost.
        let keys = |v: Vec<Queued>| v.into_iter().map(|q| q.message.key).collect::<Vec<_>>();
        assert_eq!(keys(q.queued()), ["b", "c"]);
        clock.advance(Duration::seconds(599));
        assert!(q.take_visible().is_empty());
        clock.advance(Duration::seconds(1));
        let due = q.take_visible();
        assert_eq!(keys(due.clone()), ["b", "c"]);
        assert!(q.queued().is_empty());
        q.hand_back(due[0].clone(), Duration::seconds(30));
        clock.advance(Duration::seconds(30));
        assert_eq!(keys(q.take_visible()), ["b"]);
    }
}
