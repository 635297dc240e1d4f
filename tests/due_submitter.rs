//! `RECORD_EVENTS=submitter`: every submit that writes a record sends the
//! record's due message itself, beside the record's PUT, and the sweeper
//! takes it as it takes the bucket's S3 event. In memory (the in-memory due
//! queue, with its faults) and on moto (its SQS, its real delays), with the
//! crash points of a first submit after its record in both modes.

mod delivery;
mod doctor;
mod moto;
mod sends;

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration as StdDuration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use chrono::Duration;
use common::due::{BuquetAt, CrashPoint, Mode};
use common::{Hooks, World, Wrapped};
use idempotent_submit::clock::Clock;
use idempotent_submit::due_sender::memory::Queued;
use idempotent_submit::due_sender::{DueFault, DueOrder, MemoryDueQueue, RecordDue, SendError};
use idempotent_submit::intake::due::{DueBatch, DueMessage, handle_messages};
use idempotent_submit::protocol::Record;
use idempotent_submit::store::{MemoryStore, PutMode, PutResult, StoreError};
use idempotent_submit::{Queue, Store, SubmitError};
use serde_json::json;

const BUCKET: &str = "b";

/// A world in memory with a due queue whose delay is the stale age.
struct Due {
    w: World,
    due: MemoryDueQueue,
    order: DueOrder,
}

impl Due {
    /// `DUE_MESSAGE`'s default: each message accepted before its claim.
    fn new() -> Self {
        Self::sending(DueOrder::BeforeClaim)
    }

    fn sending(order: DueOrder) -> Self {
        let w = World::new();
        let stale = common::settings().stale_creating_after;
        let due = MemoryDueQueue::new(Arc::new(w.clock.clone()), stale);
        Due { w, due, order }
    }

    /// A submitter on `store` (the bucket, or something in front of it).
    fn queue_over(&self, store: impl Store) -> Queue {
        self.w
            .queue_over(store)
            .with_due_sender_ordered(self.due.clone(), BUCKET, self.order)
    }

    fn queue(&self) -> Queue {
        self.queue_over(self.w.bucket.clone())
    }

    /// A first submit of `key` that stops at `point`; its error.
    async fn dying(&self, key: &str, point: CrashPoint) -> SubmitError {
        self.queue_over(point.in_front_of(self.w.bucket.clone()))
            .submit("t", json!({"k": key}))
            .idempotency_key(key)
            .await
            .expect_err("the submit dies")
    }

    /// What the sweeper does with the messages visible now.
    async fn drain(&self) -> DueBatch {
        self.drain_taken().await.0
    }

    /// [`Due::drain`], and the messages it took.
    async fn drain_taken(&self) -> (DueBatch, Vec<Queued>) {
        let taken = self.due.take_visible();
        let messages: Vec<DueMessage> = taken
            .iter()
            .map(|q| DueMessage {
                id: q.id.clone(),
                body: q.body.clone(),
            })
            .collect();
        let b = handle_messages(&self.w.queue(), BUCKET, &messages, false, None).await;
        (b, taken)
    }

    fn record(&self) -> (String, Record) {
        let (k, body, _, _) = self
            .w
            .bucket
            .snapshot()
            .into_iter()
            .find(|(k, ..)| k.starts_with("idempotency/"))
            .expect("a record");
        (k, Record::parse(&body).unwrap())
    }
}

/// What a bucket does before each record PUT, for the tests below.
#[derive(Clone)]
enum BeforeRecordPut {
    /// Wait, up to two seconds, until the due queue holds the record's
    /// message: a submit that sent its message after its PUT (or not at
    /// all) makes its PUT wait the whole time, and is counted.
    AwaitItsMessage(MemoryDueQueue, Arc<AtomicUsize>),
    /// Let the message beside it go first, then fly `flight` (the clock
    /// moves) before landing: as when SQS takes the message before S3
    /// stamps the record.
    Fly(idempotent_submit::ManualClock, Duration),
    /// Count the PUTs sent while the due queue does not hold their
    /// record's message yet (no waiting).
    CountUnannounced(MemoryDueQueue, Arc<AtomicUsize>),
    /// Wait until `release` is notified, then land, and the process dies
    /// (a PUT that lands late, after its message was read).
    HoldThenDie(Arc<tokio::sync::Notify>),
}

/// A bucket whose record PUTs do [`BeforeRecordPut`] first (as the hooks of
/// a [`Wrapped`] store).
#[derive(Clone)]
struct RecordPuts {
    inner: MemoryStore,
    before: BeforeRecordPut,
}

/// `inner`, its record PUTs doing `before` first.
fn record_puts(inner: MemoryStore, before: BeforeRecordPut) -> Wrapped<RecordPuts> {
    Wrapped(RecordPuts { inner, before })
}

#[async_trait]
impl Hooks for RecordPuts {
    type Inner = MemoryStore;

    fn inner(&self) -> &MemoryStore {
        &self.inner
    }
    async fn put(&self, key: &str, body: Bytes, mode: PutMode) -> Result<PutResult, StoreError> {
        if key.starts_with("idempotency/") {
            match &self.before {
                BeforeRecordPut::AwaitItsMessage(due, waited_in_vain) => {
                    let end = Instant::now() + StdDuration::from_secs(2);
                    while !due.queued().iter().any(|q| q.message.key == key) {
                        if Instant::now() >= end {
                            waited_in_vain.fetch_add(1, Ordering::SeqCst);
                            break;
                        }
                        tokio::time::sleep(StdDuration::from_millis(1)).await;
                    }
                }
                BeforeRecordPut::Fly(clock, flight) => {
                    tokio::task::yield_now().await;
                    clock.advance(*flight);
                }
                BeforeRecordPut::CountUnannounced(due, unannounced) => {
                    if !due.queued().iter().any(|q| q.message.key == key) {
                        unannounced.fetch_add(1, Ordering::SeqCst);
                    }
                }
                BeforeRecordPut::HoldThenDie(release) => {
                    release.notified().await;
                    self.inner.put(key, body, mode).await?;
                    return Err(StoreError::Crashed);
                }
            }
        }
        self.inner.put(key, body, mode).await
    }
}

impl Due {
    fn awaiting(&self) -> (Queue, Arc<AtomicUsize>) {
        let waited = Arc::new(AtomicUsize::new(0));
        let store = record_puts(
            self.w.bucket.clone(),
            BeforeRecordPut::AwaitItsMessage(self.due.clone(), waited.clone()),
        );
        (self.queue_over(store), waited)
    }
}

/// The message one keyed submit sends: one request naming its record, its
/// body carrying the send time, visible after the queue's delay.
fn assert_one_message_for_the_record(d: &Due) {
    let (rkey, _) = d.record();
    let requests = d.due.requests();
    assert_eq!(requests.len(), 1);
    let sent = &requests[0].messages;
    assert_eq!(sent.len(), 1);
    assert_eq!(
        (sent[0].bucket.as_str(), sent[0].key.as_str()),
        (BUCKET, rkey.as_str())
    );
    // Sent at the submit's time (the world's S3 clock is its own).
    assert_eq!(sent[0].sent_at, Some(requests[0].at));
    let queued = d.due.queued();
    assert_eq!(queued.len(), 1);
    assert_eq!(
        queued[0].body,
        format!(
            r#"{{"source":"idempotent-submit","event":"record_written","bucket":"b","key":"{rkey}","sent_at":"{}"}}"#,
            requests[0]
                .at
                .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
        )
    );
    assert_eq!(
        queued[0].visible_at - queued[0].sent_at,
        common::settings().stale_creating_after
    );
}

#[tokio::test]
async fn with_claim_a_keyed_submit_queues_its_records_due_message_while_its_record_put_is_in_flight()
 {
    let d = Due::sending(DueOrder::WithClaim);
    let (q, waited) = d.awaiting();
    let s = q
        .submit("t", json!({"n": 1}))
        .idempotency_key("k")
        .await
        .unwrap();
    assert!(s.created());
    assert_eq!(
        waited.load(Ordering::SeqCst),
        0,
        "the PUT never saw its message"
    );
    assert_one_message_for_the_record(&d);
    // A submit without a key writes no record and sends nothing.
    q.submit("t", json!({"n": 2})).await.unwrap();
    assert_eq!(d.due.requests().len(), 1);
}

#[tokio::test]
async fn before_claim_the_record_put_is_sent_only_once_the_queue_holds_its_message() {
    let d = Due::new();
    let unannounced = Arc::new(AtomicUsize::new(0));
    let q = d.queue_over(record_puts(
        d.w.bucket.clone(),
        BeforeRecordPut::CountUnannounced(d.due.clone(), unannounced.clone()),
    ));
    let s = q
        .submit("t", json!({"n": 1}))
        .idempotency_key("k")
        .await
        .unwrap();
    assert!(s.created());
    assert_eq!(unannounced.load(Ordering::SeqCst), 0, "a PUT went first");
    assert_one_message_for_the_record(&d);
    // The same bucket under with_claim: its PUT goes beside the message,
    // and this bucket sees it before the queue holds it.
    let with = Due::sending(DueOrder::WithClaim);
    let counted = Arc::new(AtomicUsize::new(0));
    let q = with.queue_over(record_puts(
        with.w.bucket.clone(),
        BeforeRecordPut::CountUnannounced(with.due.clone(), counted.clone()),
    ));
    q.submit("t", json!({"n": 1}))
        .idempotency_key("k")
        .await
        .unwrap();
    assert_eq!(counted.load(Ordering::SeqCst), 1, "the check can fail");
}

#[tokio::test]
async fn a_process_that_dies_right_after_its_record_has_queued_its_message_already() {
    let d = Due::new();
    d.dying("k", CrashPoint::AfterRecord).await;
    let (rkey, _) = d.record();
    assert_eq!(d.w.count("tasks/"), 0);
    let queued = d.due.queued();
    assert_eq!(queued.len(), 1);
    assert_eq!(queued[0].message.key, rkey);
}

/// Each crash point of a first submit after its record, in memory: its own
/// due message, when the queue hands it over, finishes it; nothing is
/// submitted again. Exactly one task and one marker, the task the record
/// carries; the record as it was written.
async fn finished_by_its_own_message(point: CrashPoint) {
    let d = Due::new();
    d.dying("k", point).await;
    let (rkey, rec) = d.record();
    let (tasks, markers) = (d.w.count("tasks/"), d.w.count("ready/"));
    assert_eq!(
        (tasks, markers),
        match point {
            CrashPoint::AfterRecord => (0, 0),
            CrashPoint::AfterTask => (1, 0),
            CrashPoint::TaskLost => (0, 1),
        }
    );
    let written = d.w.bucket.get(&rkey).await.unwrap().meta.etag;
    // Not before it is due.
    d.w.clock
        .advance(common::settings().stale_creating_after - Duration::seconds(3));
    assert!(d.drain().await.summary.scanned == 0, "{point:?}");
    d.w.clock.advance(Duration::seconds(3));
    let b = d.drain().await;
    assert_eq!(
        (b.summary.scanned, b.summary.finished, b.summary.early),
        (1, 1, 0),
        "{point:?}: {:?}",
        b.summary
    );
    assert!(b.retry.is_empty());
    assert_eq!(d.w.count("tasks/"), 1, "{point:?}");
    assert_eq!(d.w.count("ready/"), 1, "{point:?}");
    let task = d.w.bucket.get(&rec.task_key).await.unwrap();
    let pending = serde_json::to_vec(&rec.pending_task.unwrap()).unwrap();
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&task.body).unwrap(),
        serde_json::from_slice::<serde_json::Value>(&pending).unwrap()
    );
    assert_eq!(d.w.bucket.get(&rkey).await.unwrap().meta.etag, written);
}

#[tokio::test]
async fn a_submit_that_died_after_its_record_is_finished_by_its_own_due_message() {
    finished_by_its_own_message(CrashPoint::AfterRecord).await;
}

#[tokio::test]
async fn a_submit_that_died_after_its_task_gets_its_marker_from_its_own_due_message() {
    finished_by_its_own_message(CrashPoint::AfterTask).await;
}

#[tokio::test]
async fn a_submit_whose_task_put_was_lost_gets_its_task_from_its_own_due_message() {
    finished_by_its_own_message(CrashPoint::TaskLost).await;
}
