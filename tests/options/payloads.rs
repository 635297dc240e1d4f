use super::*;

use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use bytes::Bytes;
use common::{Hooks, Wrapped};
use idempotent_submit::store::PutResult;
use idempotent_submit::{ManualClock, MemoryStore, Reset, Settings, StoreError};

#[tokio::test]
async fn an_offloaded_input_is_in_its_payload_the_task_names_it_and_the_hash_is_of_the_whole_input()
{
    let w = World::new();
    let input = big(200_000);
    let s = w
        .process()
        .submit("t", &input)
        .idempotency_key("k")
        .payload_refs(100 * 1024)
        .await
        .unwrap();
    let task = w.task("k").await.0;
    let payload = format!("payloads/{}/input.json", s.task_id);
    assert_eq!(task["input"], Value::Null);
    assert_eq!(task["input_ref"], payload);
    assert_eq!(w.json(&payload).await, input);
    let rec = w.record("k").await;
    let canonical = hash::canonical_json(&input);
    assert_eq!(rec.input_hash, hash::input_hash(&canonical));
    assert_eq!(
        rec.pending_input.as_ref().map(|r| r.get().as_bytes()),
        Some(canonical.as_slice()),
        "the record keeps the input for finishers"
    );
    // A request more than a plain submit, and no round trip more: the
    // payload goes beside the record, the task after both.
    let calls = w.faulty.calls();
    assert_eq!(calls.len(), 4, "{calls:?}");
    assert_eq!(w.faulty.round_trips(), 2, "{calls:?}");
    let rt = |prefix: &str| {
        calls
            .iter()
            .find(|c| c.key.starts_with(prefix))
            .unwrap()
            .round_trip
    };
    assert_eq!(rt("payloads/"), rt("idempotency/"));
    assert!(rt("tasks/") > rt("payloads/"));
    // Below the threshold, inline.
    w.process()
        .submit("t", big(10))
        .idempotency_key("small")
        .payload_refs(256 * 1024)
        .await
        .unwrap();
    assert!(w.task("small").await.0.get("input_ref").is_none());
    assert_eq!(w.keys("payloads/").len(), 1);
}

#[tokio::test]
async fn a_keyless_offloaded_submit_writes_its_payload_before_its_task() {
    let w = World::new();
    let s = w
        .process()
        .submit("t", big(100))
        .payload_refs(16)
        .await
        .unwrap();
    let calls = w.faulty.calls();
    let payload = calls
        .iter()
        .find(|c| c.key.starts_with("payloads/"))
        .unwrap();
    let task = calls.iter().find(|c| c.key.starts_with("tasks/")).unwrap();
    assert!(task.round_trip > payload.round_trip, "{calls:?}");
    assert_eq!(
        w.json(&format!("payloads/{}/input.json", s.task_id)).await,
        big(100)
    );
}

/// The record lands; the payload's PUT is refused twice (beside the
/// record, and once more before the task), and the submit gives up: as if
/// its process had died with the payload unwritten.
async fn died_before_its_payload(w: &World, input: &Value) {
    w.faulty
        .inject(Some(Op::PutCreate), "payloads/", 1, 2, forbidden());
    offloaded(&w.process(), input).await.unwrap_err();
}

#[tokio::test]
async fn a_submit_that_died_before_its_payload_landed_is_finished_by_the_sweeper_from_the_record() {
    let w = World::new();
    let input = big(1000);
    died_before_its_payload(&w, &input).await;
    assert_eq!(w.keys("idempotency/").len(), 1);
    assert!(w.keys("payloads/").is_empty());
    assert!(w.keys("tasks/").is_empty());
    // The sweeper has no producer to ask: the record holds the input.
    let outcome = w.sweep_event("k").await;
    assert_eq!(outcome, RecordOutcome::Finished, "{outcome:?}");
    let rec = w.record("k").await;
    assert_eq!(
        w.json(&format!("payloads/{}/input.json", rec.task_id))
            .await,
        input
    );
    let task = w.task("k").await.0;
    assert_eq!(
        task["input_ref"],
        format!("payloads/{}/input.json", rec.task_id)
    );
    assert_eq!(w.keys("ready/").len(), 1);
}

#[tokio::test]
async fn a_submit_that_died_after_its_record_is_finished_by_the_next_submit_of_the_key() {
    let w = World::new();
    let input = big(1000);
    died_before_its_payload(&w, &input).await;
    let rec = w.record("k").await;
    let s = offloaded(&w.restarted(), &input).await.unwrap();
    assert_eq!((s.task_id, s.replayed), (rec.task_id, true));
    // The replay's own payload (for the task id it did not get) is gone;
    // the record's is there.
    assert_eq!(
        w.keys("payloads/"),
        vec![format!("payloads/{}/input.json", rec.task_id)]
    );
    assert_eq!(w.keys("tasks/").len(), 1);
}

#[tokio::test]
async fn a_finisher_that_finds_the_task_writes_only_the_marker_not_the_payload_again() {
    // An offloaded submit whose task landed and whose marker did not. The
    // task names its payload, which is there: the sweeper that finishes the
    // record writes the marker alone, not the payload from `pending_input`
    // (a request, and a 412, for nothing).
    let w = World::new();
    w.faulty
        .inject(Some(Op::Put), "ready/", 1, usize::MAX, forbidden());
    offloaded(&w.process(), &big(1000)).await.unwrap_err();
    assert_eq!((w.keys("tasks/").len(), w.keys("payloads/").len()), (1, 1));
    assert!(w.keys("ready/").is_empty());
    w.clock.advance(common::settings().stale_creating_after);
    let sweeper = FaultyStore::new(w.bucket.clone());
    let outcome = Queue::with_clock(
        sweeper.clone(),
        Arc::new(w.clock.clone()),
        common::settings(),
    )
    .engine()
    .sweep_record(&w.record_key("k"), false, None)
    .await;
    assert_eq!(outcome, RecordOutcome::Finished, "{outcome:?}");
    assert_eq!(w.keys("ready/").len(), 1);
    let writes: Vec<(Op, String)> = sweeper
        .calls()
        .iter()
        .filter(|c| matches!(c.op, Op::Put | Op::PutCreate))
        .map(|c| (c.op, c.key.split('/').next().unwrap_or("").to_owned()))
        .collect();
    assert_eq!(writes, vec![(Op::Put, "ready".to_owned())]);
}

#[tokio::test]
async fn the_payload_written_beside_a_claim_that_lost_belongs_to_no_task_and_is_deleted() {
    let w = World::new();
    let input = big(1000);
    let q = w.process();
    let first = offloaded(&q, &input).await.unwrap();
    let replay = offloaded(&q, &input).await.unwrap();
    assert_eq!(replay.task_id, first.task_id);
    // A conflict's payload too.
    offloaded(&q, &big(999)).await.unwrap_err();
    assert_eq!(
        w.keys("payloads/"),
        vec![format!("payloads/{}/input.json", first.task_id)]
    );
}

#[tokio::test]
async fn a_lost_answer_to_the_payload_put_is_retried_and_its_412_is_our_own_write() {
    let w = World::new();
    w.fault_once(
        Op::PutCreate,
        "payloads/",
        Fault::FailAfter(idempotent_submit::StoreError::Unavailable("lost".into())),
    );
    let s = offloaded(&w.process(), &big(1000)).await.unwrap();
    assert!(!s.replayed);
    assert_eq!(
        w.json(&format!("payloads/{}/input.json", s.task_id)).await,
        big(1000)
    );
    assert_eq!(w.keys("tasks/").len(), 1);
}

/// A record PUT whose answer is lost, and before the submit retries it, the
/// record is finished by a due sweeper (`STALE_CREATING_AFTER_SECONDS` set
/// below the operation timeout, which the settings allow) and reset by an
/// operator: the submit's retry then meets a reset record of its own write.
struct ResetBeforeRetry {
    inner: MemoryStore,
    clock: ManualClock,
    settings: Settings,
    done: AtomicBool,
}

#[async_trait]
impl Hooks for ResetBeforeRetry {
    type Inner = MemoryStore;

    fn inner(&self) -> &MemoryStore {
        &self.inner
    }

    async fn put(&self, key: &str, body: Bytes, mode: PutMode) -> Result<PutResult, StoreError> {
        let put = self.inner.put(key, body, mode).await;
        if !key.starts_with("idempotency/") || self.done.swap(true, Ordering::SeqCst) {
            return put;
        }
        put.expect("the record lands");
        let other = Queue::with_clock(
            self.inner.clone(),
            Arc::new(self.clock.clone()),
            self.settings.clone(),
        );
        self.clock.advance(self.settings.stale_creating_after);
        let finished = other.engine().sweep_record(key, false, None).await;
        assert_eq!(finished, RecordOutcome::Finished);
        let reset = other.reset_key("t", "k", None).await;
        assert!(matches!(reset, Ok(Reset::Done { .. })), "{reset:?}");
        Err(StoreError::Unavailable("the answer was lost".into()))
    }
}

#[tokio::test]
async fn a_submit_that_meets_its_own_record_reset_leaves_the_payload_its_task_names() {
    let w = World::new();
    let settings = Settings {
        stale_creating_after: Duration::seconds(5),
        ..common::settings()
    };
    let store = Wrapped(ResetBeforeRetry {
        inner: w.bucket.clone(),
        clock: w.clock.clone(),
        settings: settings.clone(),
        done: AtomicBool::new(false),
    });
    let q = Queue::with_clock(store, Arc::new(w.clock.clone()), settings);
    let input = big(1000);
    // Answered as the record was before the reset: its task, written by
    // the sweeper, which names the payload this submit wrote.
    let s = offloaded(&q, &input).await.unwrap();
    let (task, _) = w.task("k").await;
    let payload = format!("payloads/{}/input.json", s.task_id);
    assert_eq!(task["input_ref"], payload);
    assert_eq!(w.json(&payload).await, input, "the task's input is there");
}
