//! `RECORD_EVENTS=submitter`: every submit that writes a record sends the
//! record's due message itself, beside the record's PUT, and the sweeper
//! takes it as it takes the bucket's S3 event. In memory (the in-memory due
//! queue, with its faults) and on moto (its SQS, its real delays), with the
//! crash points of a first submit after its record in both modes.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration as StdDuration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use chrono::Duration;
use common::World;
use common::due::{BuquetAt, CrashPoint, Mode};
use idempotent_submit::clock::Clock;
use idempotent_submit::due_sender::memory::Queued;
use idempotent_submit::due_sender::{DueFault, DueOrder, MemoryDueQueue, RecordDue, SendError};
use idempotent_submit::intake::due::{DueBatch, DueMessage, handle_messages};
use idempotent_submit::protocol::Record;
use idempotent_submit::store::{
    ETag, ListPage, MemoryStore, Object, ObjectMeta, PutMode, PutResult, StoreError,
};
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

/// A bucket whose record PUTs do [`BeforeRecordPut`] first.
#[derive(Clone)]
struct RecordPuts {
    inner: MemoryStore,
    before: BeforeRecordPut,
}

#[async_trait]
impl Store for RecordPuts {
    fn clock_offset(&self) -> Option<idempotent_submit::clock::Offset> {
        self.inner.clock_offset()
    }
    async fn get(&self, key: &str) -> Result<Object, StoreError> {
        self.inner.get(key).await
    }
    async fn head(&self, key: &str) -> Result<ObjectMeta, StoreError> {
        self.inner.head(key).await
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
    async fn delete(&self, key: &str, if_match: Option<&ETag>) -> Result<(), StoreError> {
        self.inner.delete(key, if_match).await
    }
    async fn list(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        page: Option<String>,
        limit: usize,
    ) -> Result<ListPage, StoreError> {
        self.inner.list(prefix, start_after, page, limit).await
    }
}

impl Due {
    fn awaiting(&self) -> (Queue, Arc<AtomicUsize>) {
        let waited = Arc::new(AtomicUsize::new(0));
        let store = RecordPuts {
            inner: self.w.bucket.clone(),
            before: BeforeRecordPut::AwaitItsMessage(self.due.clone(), waited.clone()),
        };
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
    let q = d.queue_over(RecordPuts {
        inner: d.w.bucket.clone(),
        before: BeforeRecordPut::CountUnannounced(d.due.clone(), unannounced.clone()),
    });
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
    let q = with.queue_over(RecordPuts {
        inner: with.w.bucket.clone(),
        before: BeforeRecordPut::CountUnannounced(with.due.clone(), counted.clone()),
    });
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

/// A submit that dies after its record, sent at 0.990 s past a second
/// with a record PUT that lands `flight` later; the sweeper's batch when its
/// message is handed over, at the very instant its delay ends.
async fn delivered_on_time(d: &Due, flight: Duration) -> (DueBatch, Vec<Queued>) {
    d.w.clock.advance(Duration::milliseconds(990));
    let slow = RecordPuts {
        inner: d.w.bucket.clone(),
        before: BeforeRecordPut::Fly(d.w.clock.clone(), flight),
    };
    d.queue_over(CrashPoint::AfterRecord.in_front_of(slow))
        .submit("t", json!(1))
        .idempotency_key("k")
        .await
        .unwrap_err();
    let queued = d.due.queued();
    assert_eq!(queued.len(), 1);
    d.w.clock.set(queued[0].visible_at);
    d.drain_taken().await
}

/// The due message leaves with its record's PUT and SQS may take it before
/// S3 stamps the record; S3's time is known to a second. Delivered the
/// instant its delay ends, the record looks 599 s old by S3's earliest time
/// (its `LastModified` is the next second): finished at once, not handed
/// back (which would cost a second receive and GET, and a visibility
/// timeout of delay).
/// The same for a record PUT that took three seconds more than its message
/// (its retries), within the operation deadline: the message carries its
/// send time, and the PUT's lag is allowed for.
#[tokio::test]
async fn a_message_that_left_before_its_record_landed_finishes_it_at_its_first_delivery() {
    for lag in [Duration::milliseconds(20), Duration::seconds(3)] {
        let d = Due::new();
        let (b, _) = delivered_on_time(&d, lag).await;
        assert_eq!(
            (b.summary.finished, b.summary.early),
            (1, 0),
            "{lag}: {:?}",
            b.summary
        );
        assert!(b.retry.is_empty());
        assert_eq!(d.w.count("tasks/"), 1);
    }
}

/// The tolerance is bounded: a record that another claim wrote well after
/// the operation deadline of the message's own submit (here, a message
/// sent long before) is judged by its own age, handed back once while it
/// is young, and finished at the next delivery.
#[tokio::test]
async fn a_record_written_after_its_messages_operation_deadline_is_judged_by_its_own_age() {
    let d = Due::new();
    let sent = d.w.clock.now();
    d.w.clock.advance(Duration::seconds(40));
    d.w.queue_over(CrashPoint::AfterRecord.in_front_of(d.w.bucket.clone()))
        .submit("t", json!(1))
        .idempotency_key("k")
        .await
        .unwrap_err();
    let (rkey, _) = d.record();
    let m = DueMessage {
        id: "m".into(),
        body: RecordDue::new(BUCKET, rkey).sent_at(sent).to_body(),
    };
    d.w.clock
        .set(sent + common::settings().stale_creating_after);
    let b = handle_messages(&d.w.queue(), BUCKET, std::slice::from_ref(&m), false, None).await;
    assert_eq!((b.summary.finished, b.summary.early), (0, 1));
    assert_eq!(b.retry, ["m"]);
    d.w.clock.advance(Duration::seconds(720));
    let b = handle_messages(&d.w.queue(), BUCKET, &[m], false, None).await;
    assert_eq!((b.summary.finished, b.summary.early), (1, 0));
    assert_eq!(d.w.count("tasks/"), 1);
}

/// A submit that died before any PUT sent its message all the same: the
/// message finds no record and is handed back while the claim could still
/// land (the send time + the operation deadline + the late-write margin +
/// the 60 s a clock may be off), then acknowledged and counted. With the
/// queue's delay (600 s) and visibility timeout (720 s), two receives.
#[tokio::test]
async fn a_message_whose_submit_wrote_nothing_is_handed_back_until_its_claim_cannot_land() {
    let d = Due::new();
    let dies = idempotent_submit::store::FaultyStore::new(d.w.bucket.clone());
    dies.inject(
        Some(idempotent_submit::store::Op::PutCreate),
        "idempotency/",
        1,
        1,
        idempotent_submit::store::Fault::CrashBefore,
    );
    d.queue_over(dies)
        .submit("t", json!(1))
        .idempotency_key("k")
        .await
        .unwrap_err();
    assert_eq!(d.w.count("idempotency/"), 0);
    let queued = d.due.queued();
    assert_eq!(queued.len(), 1);
    let sent = queued[0].message.sent_at.unwrap();
    let queue = d.w.queue();
    let bound = queue.engine().claim_may_land(sent);
    assert_eq!(
        bound - sent,
        Duration::seconds(25) + Duration::minutes(15) + Duration::seconds(60)
    );
    let mut receives = 0;
    d.w.clock.set(queued[0].visible_at);
    let mut next = d.due.take_visible();
    let mut acknowledged = None;
    while let Some(m) = next.pop() {
        receives += 1;
        let msg = DueMessage {
            id: m.id.clone(),
            body: m.body.clone(),
        };
        let b = handle_messages(&queue, BUCKET, &[msg], false, None).await;
        if b.retry.is_empty() {
            acknowledged = Some((d.w.clock.now(), b.summary));
            break;
        }
        assert!(d.w.clock.now() < bound, "handed back past the bound");
        assert_eq!((b.summary.no_record_yet, b.summary.due_no_record), (1, 0));
        d.due.hand_back(m, Duration::seconds(720));
        d.w.clock.advance(Duration::seconds(720));
        next = d.due.take_visible();
    }
    let (at, summary) = acknowledged.expect("acknowledged in the end");
    assert!(at >= bound);
    assert_eq!((summary.no_record_yet, summary.due_no_record), (0, 1));
    assert_eq!(receives, 2);
    assert_eq!(d.w.count("tasks/"), 0, "nothing is written for it");
}

/// The third window of the old order: a claim whose PUT lands after its
/// message was read. The message was handed back, not acknowledged, so its
/// next delivery finishes the record.
#[tokio::test]
async fn a_record_put_that_lands_after_its_message_was_read_is_finished_at_the_next_delivery() {
    for order in [DueOrder::BeforeClaim, DueOrder::WithClaim] {
        let d = Due::sending(order);
        let release = Arc::new(tokio::sync::Notify::new());
        let q = d.queue_over(RecordPuts {
            inner: d.w.bucket.clone(),
            before: BeforeRecordPut::HoldThenDie(release.clone()),
        });
        let submit =
            tokio::spawn(async move { q.submit("t", json!(1)).idempotency_key("k").await });
        while d.due.queued().is_empty() {
            tokio::task::yield_now().await;
        }
        let queued = d.due.queued();
        d.w.clock.set(queued[0].visible_at);
        let (b, taken) = d.drain_taken().await;
        assert_eq!(b.summary.no_record_yet, 1, "{order:?}: {:?}", b.summary);
        assert_eq!(b.retry, [taken[0].id.clone()]);
        // The PUT lands now, and its process dies.
        release.notify_one();
        assert!(submit.await.unwrap().is_err());
        assert_eq!((d.w.count("idempotency/"), d.w.count("tasks/")), (1, 0));
        d.due.hand_back(taken[0].clone(), Duration::seconds(720));
        d.w.clock.advance(Duration::seconds(720));
        let b = d.drain().await;
        assert_eq!((b.summary.finished, b.summary.errors), (1, 0), "{order:?}");
        assert_eq!((d.w.count("tasks/"), d.w.count("ready/")), (1, 1));
    }
}

#[tokio::test]
async fn a_replay_and_a_conflict_send_a_message_too_which_finds_nothing_missing() {
    let d = Due::new();
    let q = d.queue();
    let first = q
        .submit("t", json!({"n": 1}))
        .idempotency_key("k")
        .await
        .unwrap();
    let again = q
        .submit("t", json!({"n": 1}))
        .idempotency_key("k")
        .await
        .unwrap();
    assert!(again.replayed);
    let conflict = q
        .submit("t", json!({"n": 2}))
        .idempotency_key("k")
        .await
        .unwrap_err();
    assert!(matches!(conflict, SubmitError::Conflict { .. }));
    // Each sent before it knew the key was taken: one request each.
    assert_eq!(d.due.requests().len(), 3);
    d.w.clock.advance(common::settings().stale_creating_after);
    let faulty = d.w.process();
    let messages: Vec<DueMessage> = d
        .due
        .take_visible()
        .into_iter()
        .map(|m| DueMessage {
            id: m.id,
            body: m.body,
        })
        .collect();
    assert_eq!(messages.len(), 3);
    let b = handle_messages(&faulty, BUCKET, &messages, false, None).await;
    // One record, read once for the three; nothing missing, nothing written.
    assert_eq!((b.summary.scanned, b.summary.finished), (1, 0));
    let calls = d.w.faulty.calls();
    assert!(calls.iter().all(|c| !c.op.is_write()), "{calls:?}");
    assert_eq!(
        calls.len(),
        3,
        "GET record, GET task, HEAD marker: {calls:?}"
    );
    assert_eq!(first.task_id, again.task_id);
}

#[tokio::test]
async fn with_claim_a_failed_send_is_retried_then_counted_and_the_submit_goes_on() {
    let d = Due::sending(DueOrder::WithClaim);
    let q = d.queue();
    let engine = q.engine().clone();
    // Two failures, then it lands: three requests, one message, nothing counted.
    d.due
        .inject(DueFault::Fail(SendError::Unavailable("503".into())), 2);
    assert!(
        q.submit("t", json!(1))
            .idempotency_key("a")
            .await
            .unwrap()
            .created()
    );
    assert_eq!((d.due.requests().len(), d.due.queued().len()), (3, 1));
    assert_eq!(engine.take_unsent_due_messages(), 0);
    // Refused: not retried; counted; the submit still creates its task.
    d.due
        .inject(DueFault::Fail(SendError::Refused("AccessDenied".into())), 1);
    assert!(
        q.submit("t", json!(2))
            .idempotency_key("b")
            .await
            .unwrap()
            .created()
    );
    assert_eq!((d.due.requests().len(), d.due.queued().len()), (4, 1));
    assert_eq!(engine.take_unsent_due_messages(), 1);
    // Unavailable at every attempt: five requests, then counted.
    d.due.inject(DueFault::Lost, 5);
    assert!(
        q.submit("t", json!(3))
            .idempotency_key("c")
            .await
            .unwrap()
            .created()
    );
    assert_eq!((d.due.requests().len(), d.due.queued().len()), (9, 1));
    assert_eq!(engine.take_unsent_due_messages(), 1);
    assert_eq!(engine.take_unsent_due_messages(), 0, "taken once");
    assert_eq!(d.w.count("tasks/"), 3);
}

/// Under before_claim a message the queue does not take writes nothing:
/// the submit answers retryably (503 `storage_unavailable`), the key stays
/// free, and the next submit of it creates the task.
#[tokio::test]
async fn before_claim_a_send_that_still_fails_writes_nothing_and_answers_retryably() {
    // Every attempt of the submit's retries (5), or the one a refusal
    // takes (it is not retried).
    for (fault, attempts) in [
        (DueFault::Fail(SendError::Unavailable("503".into())), 5),
        (DueFault::Lost, 5),
        (DueFault::Fail(SendError::Refused("AccessDenied".into())), 1),
    ] {
        let d = Due::new();
        let q = d.queue_over(d.w.faulty.clone());
        d.due.inject(fault.clone(), attempts);
        let e = q
            .submit("t", json!(1))
            .idempotency_key("a")
            .await
            .unwrap_err();
        assert!(
            matches!(e, SubmitError::Storage(StoreError::Unavailable(_))),
            "{fault:?}: {e:?}"
        );
        assert!(e.is_retryable(), "{fault:?}");
        let problem = idempotent_submit::intake::problem::Problem::from_submit(&e);
        assert_eq!(problem.status, 503, "{fault:?}");
        assert_eq!(problem.code, "storage_unavailable");
        assert!(problem.retry_after.is_some());
        assert!(
            d.w.faulty.calls().is_empty(),
            "{fault:?}: nothing sent to S3"
        );
        assert_eq!(q.engine().take_unsent_due_messages(), 1);
        // Retried: the message lands, then the claim.
        let s = q.submit("t", json!(1)).idempotency_key("a").await.unwrap();
        assert!(s.created(), "{fault:?}");
        assert_eq!((d.w.count("tasks/"), d.w.count("ready/")), (1, 1));
        assert_eq!(d.due.queued().len(), 1);
    }
}

#[tokio::test]
async fn a_send_that_never_answers_is_ended_by_its_attempt_timeout_and_sent_again() {
    let d = Due::new();
    d.due.inject(DueFault::Hang, 1);
    let s = d
        .queue()
        .submit("t", json!(1))
        .idempotency_key("a")
        .await
        .unwrap();
    assert!(s.created());
    assert_eq!((d.due.requests().len(), d.due.queued().len()), (2, 1));
}

#[tokio::test]
async fn a_message_whose_answer_was_lost_is_sent_again_and_its_duplicate_costs_one_read() {
    let d = Due::new();
    d.due.inject(DueFault::LandedAnswerLost, 1);
    d.dying("k", CrashPoint::AfterRecord).await;
    assert_eq!(d.due.queued().len(), 2);
    d.w.clock.advance(common::settings().stale_creating_after);
    let b = d.drain().await;
    assert_eq!((b.summary.scanned, b.summary.finished), (1, 1));
    assert_eq!(d.w.count("tasks/"), 1);
}

/// The window `DUE_MESSAGE=with_claim` leaves: the send failed, and then
/// the process died before its task was written. No message comes; the
/// next submit of the key finishes it. (Under before_claim the same send
/// writes nothing: the test above.)
#[tokio::test]
async fn with_claim_when_the_send_fails_and_the_process_then_dies_only_a_replay_finishes_it() {
    let d = Due::sending(DueOrder::WithClaim);
    d.due.inject(DueFault::Lost, 5);
    d.dying("k", CrashPoint::AfterRecord).await;
    let (_, rec) = d.record();
    assert!(d.due.queued().is_empty());
    d.w.clock.advance(common::settings().stale_creating_after);
    assert_eq!(d.drain().await.summary.scanned, 0);
    assert_eq!(d.w.count("tasks/"), 0);
    // The producer got no answer and retries, before the finish deadline.
    let s = d
        .queue()
        .submit("t", json!({"k": "k"}))
        .idempotency_key("k")
        .await
        .unwrap();
    assert_eq!(s.task_id, rec.task_id);
    assert!(s.recovered);
    assert_eq!((d.w.count("tasks/"), d.w.count("ready/")), (1, 1));
}

#[tokio::test]
async fn a_batch_sends_its_messages_ten_to_a_request_in_either_order() {
    for order in [DueOrder::BeforeClaim, DueOrder::WithClaim] {
        let d = Due::sending(order);
        let (q, waited) = d.awaiting();
        let items = (0..100).map(|i| {
            q.submit("t", json!({"i": i}))
                .idempotency_key(format!("k{i}"))
        });
        let results = q.submit_many(items).await;
        assert!(
            results
                .iter()
                .all(|r| r.as_ref().is_ok_and(|s| s.created()))
        );
        assert_eq!(
            waited.load(Ordering::SeqCst),
            0,
            "a PUT waited for its message"
        );
        let requests = d.due.requests();
        assert_eq!(requests.len(), 10);
        assert!(requests.iter().all(|r| r.messages.len() == 10));
        let mut named: Vec<String> = requests
            .iter()
            .flat_map(|r| r.messages.iter().map(|m| m.key.clone()))
            .collect();
        named.sort();
        named.dedup();
        assert_eq!(named.len(), 100);
    }
}

#[tokio::test]
async fn a_batch_with_keyless_and_invalid_items_sends_one_message_per_record_it_writes() {
    let d = Due::new();
    let (q, waited) = d.awaiting();
    let mut items = Vec::new();
    for i in 0..25 {
        items.push(
            q.submit("t", json!({"i": i}))
                .idempotency_key(format!("k{i}")),
        );
        if i % 5 == 0 {
            items.push(q.submit("t", json!({"keyless": i})));
            items.push(q.submit("not a type!", json!(i)).idempotency_key("x"));
        }
    }
    let results = q.submit_many(items).await;
    assert_eq!(results.iter().filter(|r| r.is_err()).count(), 5);
    assert_eq!(
        waited.load(Ordering::SeqCst),
        0,
        "a PUT waited for its message"
    );
    let sizes: Vec<usize> = d.due.requests().iter().map(|r| r.messages.len()).collect();
    assert_eq!(sizes, [10, 10, 5]);
}

#[tokio::test]
async fn a_due_message_that_names_no_record_of_this_bucket_is_acknowledged_counted_and_not_read() {
    let w = World::new();
    let q = w.process();
    let body = |bucket: &str, key: &str| RecordDue::new(bucket, key).to_body();
    let hex = "ab".repeat(32);
    let messages: Vec<DueMessage> = [
        body("other", &format!("idempotency/t/{hex}.json")),
        body(BUCKET, "tasks/0/x.json"),
        body(BUCKET, "idempotency/t/short.json"),
        body(BUCKET, &format!("idempotency/.hidden/{hex}.json")),
        r#"{"source":"idempotent-submit","event":"record_written"}"#.to_owned(),
    ]
    .into_iter()
    .enumerate()
    .map(|(i, body)| DueMessage {
        id: i.to_string(),
        body,
    })
    .collect();
    let b = handle_messages(&q, BUCKET, &messages, false, None).await;
    assert_eq!((b.summary.unrecognized, b.summary.scanned), (5, 0));
    assert!(b.retry.is_empty(), "never retried");
    assert!(w.faulty.calls().is_empty());
    // And one that does name a record of this bucket is read.
    let m = DueMessage {
        id: "ok".into(),
        body: body(BUCKET, &format!("idempotency/t/{hex}.json")),
    };
    let b = handle_messages(&q, BUCKET, &[m], false, None).await;
    assert_eq!((b.summary.unrecognized, b.summary.scanned), (0, 1));
}

// ---- on moto: its SQS, real delays ----

/// The submitter's messages through moto's SQS, with its real delay, to a
/// sweeper that judges S3's time by moto's `Date`: five submits that died
/// after their records, drained as their messages come, are each finished
/// at its first delivery, none handed back as early. (moto serves one
/// request at a time and takes the PUT first; the case of a message taken
/// before its record's stamp is the in-memory test above.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submitters_message_finishes_its_record_at_its_first_delivery() {
    let store = common::moto_store().await;
    let url = common::moto_queue(
        &format!("due-{}", store.bucket()),
        common::due::STALE_SECONDS,
    )
    .await;
    for i in 0..5 {
        let key = format!("arrival-{i}");
        common::due::interrupted_submit(
            &store,
            CrashPoint::AfterRecord,
            Mode::Submitter,
            &url,
            &key,
        )
        .await;
    }
    let sweeper = Queue::new(store.clone(), common::due::settings());
    let s = common::due::drain_until_finished(&url, &sweeper, store.bucket(), 5).await;
    assert_eq!((s.finished, s.early, s.errors), (5, 0, 0), "{s:?}");
}

/// Every crash point after the record, in both modes, on moto: finished by
/// the drained due queue (nobody submits again), then buquet's worker runs
/// the task once.
async fn finished_by_the_due_queue_then_run_once(point: CrashPoint, mode: Mode) {
    let store = common::moto_store_versioned().await;
    let url = match mode {
        Mode::Bucket => common::moto_due_queue(&store, common::due::STALE_SECONDS).await,
        Mode::Submitter => {
            common::moto_queue(
                &format!("due-{}", store.bucket()),
                common::due::STALE_SECONDS,
            )
            .await
        }
    };
    common::due::interrupted_submit(&store, point, mode, &url, "first").await;
    let (tasks, markers, _) = common::due::holdings(&store).await;
    assert_eq!(
        (tasks.len(), markers.len()),
        match point {
            CrashPoint::AfterRecord => (0, 0),
            CrashPoint::AfterTask => (1, 0),
            CrashPoint::TaskLost => (0, 1),
        }
    );
    let sweeper = Queue::new(store.clone(), common::due::settings());
    let s = common::due::drain_until_finished(&url, &sweeper, store.bucket(), 1).await;
    assert_eq!((s.finished, s.errors), (1, 0), "{point:?} {mode:?}: {s:?}");
    let (tasks, markers, task_id) = common::due::holdings(&store).await;
    assert_eq!((tasks.len(), markers.len()), (1, 1), "{point:?} {mode:?}");
    let at = BuquetAt {
        endpoint: &common::moto_endpoint(),
        bucket: store.bucket(),
        access_key_id: "test",
        secret_access_key: "test",
    };
    let run = common::due::buquet(&at, &["work", "remind", "1"]);
    assert_eq!(run["processed"], 1, "{run}");
    let task = common::due::buquet(&at, &["get", &task_id]);
    assert_eq!(task["status"], "completed", "{task}");
    let idle = common::due::buquet(&at, &["idle", "remind", "2"]);
    assert_eq!(idle["processed"], 0, "run once: {idle}");
}

macro_rules! in_both_modes {
    ($($name:ident: $point:expr;)*) => {
        $(mod $name {
            use super::*;
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn bucket() {
                finished_by_the_due_queue_then_run_once($point, Mode::Bucket).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn submitter() {
                finished_by_the_due_queue_then_run_once($point, Mode::Submitter).await;
            }
        })*
    };
}

in_both_modes! {
    on_moto_a_submit_that_died_after_its_record_is_finished_by_the_due_queue_and_run_once:
        CrashPoint::AfterRecord;
    on_moto_a_submit_that_died_after_its_task_is_finished_by_the_due_queue_and_run_once:
        CrashPoint::AfterTask;
    on_moto_a_submit_whose_task_put_was_lost_is_finished_by_the_due_queue_and_run_once:
        CrashPoint::TaskLost;
}

// ---- idem doctor knows the mode ----

/// `(check, status)` of each finding of a doctor's report.
fn findings(r: &serde_json::Value) -> Vec<(String, String)> {
    r["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["check"].as_str().unwrap().to_owned(),
                c["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_submitter_the_doctor_expects_no_notification_and_checks_the_due_queue_instead() {
    let store = common::moto_store_versioned().await;
    let bucket = store.bucket().to_owned();
    let url = common::moto_queue(&format!("due-{bucket}"), 600).await;
    let env = |url: &str| {
        vec![
            ("RECORD_EVENTS", "submitter".to_owned()),
            ("DUE_QUEUE_URL", url.to_owned()),
        ]
    };
    let run = |env: Vec<(&'static str, String)>| {
        let bucket = bucket.clone();
        async move {
            let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
            common::idem(&bucket, &env, &["doctor"]).await
        }
    };
    // A bucket without a notification: an error in bucket mode...
    let (code, r) = run(vec![]).await;
    assert_eq!(code, 5, "{r}");
    assert!(
        findings(&r).contains(&("notification".into(), "error".into())),
        "{r}"
    );
    // ...expected under submitter, with a reachable queue of the right delay.
    let (code, r) = run(env(&url)).await;
    assert_eq!(code, 0, "{r}");
    let f = findings(&r);
    assert!(f.contains(&("notification".into(), "ok".into())), "{r}");
    assert!(f.contains(&("due_queue".into(), "ok".into())), "{r}");
    // A delay that is not STALE_CREATING_AFTER_SECONDS, and a queue that is
    // not there, are errors.
    let mut other_stale = env(&url);
    other_stale.push(("STALE_CREATING_AFTER_SECONDS", "300".to_owned()));
    let (code, r) = run(other_stale).await;
    assert_eq!(code, 5, "{r}");
    assert!(
        findings(&r).contains(&("due_queue".into(), "error".into())),
        "{r}"
    );
    assert!(r.to_string().contains("its delay is 600 s"), "{r}");
    let gone = format!("{url}-gone");
    let (code, r) = run(env(&gone)).await;
    assert_eq!(code, 5, "{r}");
    assert!(
        findings(&r).contains(&("due_queue".into(), "error".into())),
        "{r}"
    );
    // Both the bucket and the submitter sending: a warning, not an error.
    common::moto_due_queue(&store, 600).await;
    let (code, r) = run(env(&url)).await;
    assert_eq!(code, 0, "{r}");
    assert!(
        findings(&r).contains(&("notification".into(), "warning".into())),
        "{r}"
    );
}
