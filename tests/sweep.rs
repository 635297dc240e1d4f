//! The sweeper: finishing (and writing nothing where nothing is missing),
//! expiry, dry runs, keeping its place, races, and reads per record that do
//! not grow with how often it runs; in memory (as S3, and as stores that
//! list folders first or in no order), and on moto and SeaweedFS, under
//! both `LIST_ORDER`s.

use crate::common;

use std::collections::HashMap;
use std::sync::Arc;

use crate::common::World;
use chrono::{DateTime, Duration, Utc};
use futures::FutureExt;
use idempotent_submit::protocol::sweep::RecordOutcome;
use idempotent_submit::protocol::{RecordStatus, SweepOptions, SweepSummary};
use idempotent_submit::store::{
    Behaviour, Fault, FaultyStore, MemoryStore, Op, PutMode, Store, StoreError,
};
use idempotent_submit::{Clock, ListOrder, ManualClock, Queue};
use serde_json::json;

/// Every `op` on a key under `prefix` fails with a retryable 503 until
/// `heal`.
fn fail_until_healed(f: &FaultyStore<MemoryStore>, op: Op, prefix: &str) {
    f.inject(
        Some(op),
        prefix,
        1,
        usize::MAX,
        Fault::Fail(StoreError::Unavailable("503".into())),
    );
}

impl World {
    /// A submit of `key` that dies at `fault` (on the first call matching
    /// `op` and `prefix`).
    async fn interrupted_at(&self, key: &str, op: Op, prefix: &str, fault: Fault) -> uuid::Uuid {
        self.submit_dying_at(key, json!({"k": key}), op, prefix, fault)
            .await;
        self.record(key).await.task_id
    }

    /// The record of `key` is still the one write its submit made:
    /// `creating`, with its `pending_task`, under the ETag it was written
    /// with.
    async fn assert_still_its_first_write(
        &self,
        key: &str,
        written: &idempotent_submit::store::ETag,
    ) {
        let (rec, meta) = self.record_meta(key).await;
        assert_eq!(rec.status, Some(RecordStatus::Creating), "{key}");
        assert!(rec.pending_task.is_some(), "{key}");
        assert_eq!(&meta.etag, written, "{key}: the same write");
    }

    async fn sweep(&self, dry_run: bool) -> SweepSummary {
        self.queue()
            .engine()
            .sweep(&SweepOptions {
                dry_run,
                ..Default::default()
            })
            .await
            .unwrap()
    }

    /// A scheduled pass through `store` (the bucket behind faults).
    async fn sweep_over(&self, store: impl Store) -> SweepSummary {
        self.queue_over(store)
            .engine()
            .sweep(&SweepOptions::default())
            .await
            .unwrap()
    }
}

#[tokio::test]
async fn a_stale_creating_record_is_finished_with_its_task_and_marker() {
    let w = World::new();
    let id = w
        .interrupted_at("a", Op::PutCreate, "idempotency/", Fault::CrashAfter)
        .await;
    let written = w.record_meta("a").await.1.etag;
    w.clock.advance(Duration::minutes(11));
    let s = w.sweep(false).await;
    assert_eq!(
        (s.scanned, s.finished, s.errors, s.complete),
        (1, 1, 0, true)
    );
    w.assert_still_its_first_write("a", &written).await;
    assert_eq!(w.record("a").await.task_id, id);
    assert_eq!(w.count("tasks/"), 1);
    assert_eq!(w.count("ready/"), 1);
    // The next submit is a plain replay of the same task.
    let r = w
        .queue()
        .submit("t", json!({"k": "a"}))
        .idempotency_key("a")
        .await
        .unwrap();
    assert_eq!(r.task_id, id);
}

#[tokio::test]
async fn a_stale_record_whose_task_and_marker_are_there_is_read_and_left_as_written() {
    let w = World::new();
    w.queue()
        .submit("t", json!({"k": "a"}))
        .idempotency_key("a")
        .await
        .unwrap();
    let written = w.record_meta("a").await.1.etag;
    let outside_the_sweepers_place = |w: &World| {
        w.bucket
            .snapshot()
            .into_iter()
            .filter(|(k, ..)| !k.starts_with("sweeper/"))
            .collect::<Vec<_>>()
    };
    let before = outside_the_sweepers_place(&w);
    w.clock.advance(Duration::minutes(11));
    let s = w.sweep(false).await;
    assert_eq!((s.scanned, s.reads, s.finished, s.errors), (1, 1, 0, 0));
    w.assert_still_its_first_write("a", &written).await;
    assert_eq!(outside_the_sweepers_place(&w), before, "byte for byte");
    assert_eq!((w.count("tasks/"), w.count("ready/")), (1, 1));
}

#[tokio::test]
async fn a_young_creating_record_is_left_to_its_submit() {
    let w = World::new();
    w.interrupted_at("a", Op::PutCreate, "idempotency/", Fault::CrashAfter)
        .await;
    w.clock.advance(Duration::minutes(5));
    let s = w.sweep(false).await;
    assert_eq!((s.scanned, s.finished, s.errors), (1, 0, 0));
    assert_eq!(w.record("a").await.status, Some(RecordStatus::Creating));
    assert_eq!(w.count("tasks/"), 0);
}

#[tokio::test]
async fn a_creating_record_past_its_deadline_is_counted_and_left_alone() {
    let w = World::new();
    w.interrupted_at("a", Op::PutCreate, "idempotency/", Fault::CrashAfter)
        .await;
    let before = w.bucket.keys();
    w.clock.advance(Duration::seconds(2400));
    let key = w.bucket.keys().into_iter().next().unwrap();
    // Its event, late: counted as an error, acknowledged, nothing written.
    let o = w.queue().engine().sweep_record(&key, false, None).await;
    assert_eq!(o, RecordOutcome::PastDeadline);
    assert!(!o.try_again_later());
    // A pass does not even read it: it could not finish it anyway.
    let s = w.sweep(false).await;
    assert_eq!((s.reads, s.finished, s.errors), (0, 0, 0), "{s:?}");
    assert_eq!(w.count("tasks/"), 0);
    assert_eq!(w.record("a").await.status, Some(RecordStatus::Creating));
    assert_eq!(
        w.bucket
            .keys()
            .into_iter()
            .filter(|k| !k.starts_with("sweeper/"))
            .collect::<Vec<_>>(),
        before
    );
}

#[tokio::test]
async fn expired_records_are_deleted_whatever_their_status() {
    let w = World::new();
    w.queue()
        .submit("t", json!(1))
        .idempotency_key("ready")
        .idempotency_ttl(Duration::hours(1))
        .await
        .unwrap();
    // As the sweeper of an earlier version left it.
    let (rec, meta) = w.record_meta("ready").await;
    let mut v = serde_json::to_value(&rec).unwrap();
    v["status"] = json!("ready");
    v.as_object_mut().unwrap().remove("pending_task");
    w.bucket
        .put(
            &meta.key,
            serde_json::to_vec(&v).unwrap().into(),
            PutMode::Update(meta.etag),
        )
        .await
        .unwrap();
    assert_eq!(w.record("ready").await.status, Some(RecordStatus::Ready));
    w.interrupted_at("creating", Op::PutCreate, "idempotency/", Fault::CrashAfter)
        .await;
    w.queue()
        .submit("t", json!(1))
        .idempotency_key("young")
        .idempotency_ttl(Duration::hours(2))
        .await
        .unwrap();
    w.clock.advance(Duration::days(31));
    w.queue()
        .submit("t", json!(1))
        .idempotency_key("fresh")
        .await
        .unwrap();
    w.clock.advance(Duration::hours(1));
    let s = w.sweep(false).await;
    assert_eq!(s.expired_deleted, 3, "{s:?}");
    assert_eq!(s.finished, 0, "an expired creating record is not finished");
    assert_eq!(w.count("idempotency/"), 1);
    assert!(
        w.queue()
            .record("t", "fresh", None)
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test]
async fn a_dry_run_reports_and_changes_nothing() {
    let w = World::new();
    w.interrupted_at("a", Op::PutCreate, "idempotency/", Fault::CrashAfter)
        .await;
    w.queue()
        .submit("t", json!(1))
        .idempotency_key("b")
        .idempotency_ttl(Duration::hours(1))
        .await
        .unwrap();
    w.clock.advance(Duration::days(31));
    w.interrupted_at("c", Op::PutCreate, "idempotency/", Fault::CrashAfter)
        .await;
    w.clock.advance(Duration::minutes(11));
    let before = w.bucket.keys();
    let s = w.sweep(true).await;
    assert!(s.dry_run);
    // a and b expired (b's shorter TTL is judged at the default TTL's age);
    // c is stale and can still be finished.
    assert_eq!(
        (s.scanned, s.finished, s.expired_deleted),
        (3, 1, 2),
        "{s:?}"
    );
    assert_eq!(w.bucket.keys(), before);
}

/// The counts a dry run has to match: everything the real pass would do.
fn counts(s: &SweepSummary) -> [u64; 9] {
    [
        s.scanned,
        s.reads,
        s.finished,
        s.expired_deleted,
        s.expired_kept,
        s.payloads_deleted,
        s.markers_deleted,
        s.errors,
        u64::from(s.complete),
    ]
}

/// A task `status` available at `at`, under our shard of one digit, with
/// its marker in that minute (or none): the marker's key.
async fn task_with_marker(
    store: &impl Store,
    status: &str,
    at: DateTime<Utc>,
    task: bool,
) -> String {
    let id = uuid::Uuid::new_v4().hyphenated().to_string();
    if task {
        let body = json!({"id": id, "status": status, "available_at": at.to_rfc3339()});
        store
            .put(
                &format!("tasks/{}/{id}.json", &id[..1]),
                serde_json::to_vec(&body).unwrap().into(),
                PutMode::Create,
            )
            .await
            .unwrap();
    }
    let marker = format!(
        "ready/{}/{:010}/{id}",
        &id[..1],
        at.timestamp().div_euclid(60)
    );
    store
        .put(&marker, bytes::Bytes::new(), PutMode::Overwrite)
        .await
        .unwrap();
    marker
}

/// A payload under a new task id of `slice` (its first byte), as a dead
/// replay leaves it: no task names it.
async fn payload_of_slice(store: &impl Store, slice: u32) -> String {
    let mut b = *uuid::Uuid::new_v4().as_bytes();
    b[0] = slice as u8;
    let key = format!("payloads/{}/input.json", uuid::Uuid::from_bytes(b));
    store
        .put(&key, b"1".to_vec().into(), PutMode::Create)
        .await
        .unwrap();
    key
}

/// A payload of `slice` whose task is in the bucket under `shard` digits
/// of its id (another client's shard length, or ours).
async fn payload_with_its_task(store: &impl Store, slice: u32, shard: usize) -> String {
    let key = payload_of_slice(store, slice).await;
    let id = key.split('/').nth(1).unwrap().to_owned();
    store
        .put(
            &format!("tasks/{}/{id}.json", &id[..shard]),
            b"{}".to_vec().into(),
            PutMode::Create,
        )
        .await
        .unwrap();
    key
}

#[tokio::test]
async fn a_dry_run_reads_each_record_as_the_real_run_and_counts_what_it_then_does_writing_nothing()
{
    let w = World::new();
    // Expired by the time of the pass: a ready record, a creating one, and
    // an orphan payload the day's slices take.
    w.queue()
        .submit("t", json!(1))
        .idempotency_key("expired")
        .idempotency_ttl(Duration::hours(1))
        .await
        .unwrap();
    w.interrupted_at(
        "expired-creating",
        Op::PutCreate,
        "idempotency/",
        Fault::CrashAfter,
    )
    .await;
    let pass_at = w.clock.now() + Duration::days(31) + Duration::minutes(11);
    let slice = idempotent_submit::protocol::sweep::payload_slices(pass_at).start;
    payload_of_slice(&w.bucket, slice).await;
    // A marker beside a task a worker has run since.
    let stale = task_with_marker(&w.bucket, "completed", w.clock.now(), true).await;
    w.clock.advance(Duration::days(31));
    // Stale and still creating, as every record stays: one done, one
    // interrupted after its record, one without its marker, one without its
    // task.
    w.queue()
        .submit("t", json!({"k": "done"}))
        .idempotency_key("done")
        .await
        .unwrap();
    w.interrupted_at(
        "after-record",
        Op::PutCreate,
        "idempotency/",
        Fault::CrashAfter,
    )
    .await;
    let no_marker = w
        .queue()
        .submit("t", json!({"k": "no-marker"}))
        .idempotency_key("no-marker")
        .await
        .unwrap()
        .task_id;
    let marker = w
        .keys("ready/")
        .into_iter()
        .find(|k| k.ends_with(&no_marker.to_string()))
        .unwrap();
    w.bucket.delete(&marker, None).await.unwrap();
    w.interrupted_at("no-task", Op::PutCreate, "tasks/", Fault::CrashBefore)
        .await;
    assert_eq!((w.count("tasks/"), w.count("ready/")), (4, 4));
    w.clock.advance(Duration::minutes(11));
    assert_eq!(w.clock.now(), pass_at);

    let before = w.bucket.snapshot();
    let f = FaultyStore::new(w.bucket.clone());
    let dry = w
        .queue_over(f.clone())
        .engine()
        .sweep(&SweepOptions {
            dry_run: true,
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(dry.dry_run);
    assert_eq!(
        w.bucket.snapshot(),
        before,
        "keys, bytes and ETags as they were"
    );
    let writes: Vec<_> = f.calls().into_iter().filter(|c| c.op.is_write()).collect();
    assert!(writes.is_empty(), "{writes:?}");
    // It read what the real finish reads: the tasks and markers.
    assert!(
        f.calls()
            .iter()
            .any(|c| c.op == Op::Get && c.key.starts_with("tasks/"))
    );
    assert!(
        f.calls()
            .iter()
            .any(|c| c.op == Op::Head && c.key.starts_with("ready/"))
    );

    let real = w.sweep(false).await;
    assert_eq!(
        (
            real.finished,
            real.expired_deleted,
            real.payloads_deleted,
            real.markers_deleted
        ),
        (3, 2, 1, 1),
        "{real:?}"
    );
    assert_eq!(counts(&dry), counts(&real), "dry {dry:?}\nreal {real:?}");
    assert_eq!((w.count("tasks/"), w.count("ready/")), (6, 5));
    assert!(!w.keys("ready/").contains(&stale));
}

/// One orphan payload and one payload with its task (under a shard of one
/// to four digits, by turns) in every slice, written at the clock's time;
/// then a pass a day for a whole cycle, starting eight days later (past the
/// day and an hour in which the HEADs look at a payload): each day deletes the
/// orphans of its own slices and nothing else, and by the end every orphan
/// is gone and every payload with its task is there. A fresh orphan of the
/// day's slice, too young, is kept on its day.
async fn old_orphans_go_by_their_slices_day_on(behaviour: Behaviour, order: ListOrder) {
    use idempotent_submit::protocol::sweep::{PAYLOAD_CYCLE_DAYS, PAYLOAD_SLICES, payload_slices};
    let clock = ManualClock::at_epoch();
    let bucket = common::memory_store(&clock).with_behaviour(behaviour);
    let mut settings = ordered(order);
    settings.conditional_delete = behaviour.conditional_delete;
    let q = Queue::with_clock(bucket.clone(), Arc::new(clock.clone()), settings);
    let mut orphans: Vec<(u32, String)> = Vec::new();
    let mut live: Vec<String> = Vec::new();
    for slice in 0..PAYLOAD_SLICES {
        orphans.push((slice, payload_of_slice(&bucket, slice).await));
        live.push(payload_with_its_task(&bucket, slice, 1 + slice as usize % 4).await);
    }
    clock.advance(Duration::days(8));
    let payloads = || {
        let mut k = bucket
            .keys()
            .into_iter()
            .filter(|k| k.starts_with("payloads/"))
            .collect::<Vec<_>>();
        k.sort();
        k
    };
    let mut young = None;
    for day in 0..PAYLOAD_CYCLE_DAYS {
        let slices = payload_slices(clock.now());
        if day == 0 {
            young = Some(payload_of_slice(&bucket, slices.start).await);
        }
        let s = q.engine().sweep(&SweepOptions::default()).await.unwrap();
        let mut gone: Vec<&String> = orphans
            .iter()
            .filter(|(slice, _)| slices.contains(slice))
            .map(|(_, k)| k)
            .collect();
        // The fresh one is the HEADs', the next day.
        if day == 1 {
            gone.extend(young.as_ref());
        }
        assert_eq!(
            (s.payloads_deleted, s.errors),
            (gone.len() as u64, 0),
            "{behaviour:?} {order:?} day {day}: {s:?}"
        );
        let left = payloads();
        assert!(gone.iter().all(|k| !left.contains(k)), "day {day}");
        if day == 0 {
            assert!(
                left.contains(young.as_ref().unwrap()),
                "too young on its day"
            );
        }
        clock.advance(Duration::days(1));
    }
    let mut expected = live;
    expected.sort();
    assert_eq!(payloads(), expected, "{behaviour:?} {order:?}");
}

#[tokio::test]
async fn a_payload_orphaned_for_weeks_is_deleted_on_its_slices_day_and_one_with_its_task_never() {
    old_orphans_go_by_their_slices_day_on(Behaviour::default(), ListOrder::Bytes).await;
}

#[tokio::test]
async fn old_orphans_go_by_their_slices_day_by_folders_too() {
    old_orphans_go_by_their_slices_day_on(Behaviour::default(), ListOrder::Any).await;
}

#[tokio::test]
async fn old_orphans_go_by_their_slices_day_on_a_store_that_lists_folders_first() {
    old_orphans_go_by_their_slices_day_on(Behaviour::seaweedfs(), ListOrder::Bytes).await;
    old_orphans_go_by_their_slices_day_on(Behaviour::seaweedfs(), ListOrder::Any).await;
}

#[tokio::test]
async fn old_orphans_go_by_their_slices_day_on_a_store_that_lists_in_no_order() {
    old_orphans_go_by_their_slices_day_on(Behaviour::s3_express(7), ListOrder::Any).await;
}

#[tokio::test]
async fn old_orphans_go_by_their_slices_day_with_conditional_delete_off() {
    old_orphans_go_by_their_slices_day_on(Behaviour::minio(), ListOrder::Bytes).await;
}

/// A call and when it began.
type Began = (Op, String, chrono::DateTime<chrono::Utc>);

/// A store each of whose calls takes a minute of the engine's clock, and
/// that logs when each began.
#[derive(Clone)]
struct MinutePerCall {
    inner: MemoryStore,
    clock: ManualClock,
    began: Arc<std::sync::Mutex<Vec<Began>>>,
}

#[async_trait::async_trait]
impl common::Hooks for MinutePerCall {
    type Inner = MemoryStore;

    fn inner(&self) -> &MemoryStore {
        &self.inner
    }

    async fn before(&self, call: &common::Call<'_>) -> Result<(), StoreError> {
        self.began
            .lock()
            .unwrap()
            .push((call.op, call.key.to_owned(), self.clock.now()));
        self.clock.advance(Duration::minutes(1));
        Ok(())
    }
}

/// A scheduled pass over `w`'s bucket in which each call takes a minute,
/// stopped by a deadline `minutes` on: its summary, the deadline, and when
/// each call began.
async fn pass_by_the_minute(w: &World, minutes: i64) -> (SweepSummary, DateTime<Utc>, Vec<Began>) {
    let slow = MinutePerCall {
        inner: w.bucket.clone(),
        clock: w.clock.clone(),
        began: Arc::default(),
    };
    let deadline = w.clock.now() + Duration::minutes(minutes);
    let s = w
        .queue_over(common::Wrapped(slow.clone()))
        .engine()
        .sweep(&SweepOptions {
            deadline: Some(deadline),
            ..Default::default()
        })
        .await
        .unwrap();
    let began = slow.began.lock().unwrap().clone();
    (s, deadline, began)
}

#[tokio::test]
async fn the_payload_pass_makes_no_request_at_or_after_the_runs_deadline_and_the_next_goes_on() {
    let w = World::new();
    let later = w.clock.now() + Duration::days(9);
    let slice = idempotent_submit::protocol::sweep::payload_slices(later).start;
    let orphan = payload_of_slice(&w.bucket, slice).await;
    w.clock.set(later);
    // Time for the checkpoint, the records, the ready index's one page and
    // the first page of payloads/; not for the day's task listing that its
    // orphan needs.
    let (s, deadline, began) = pass_by_the_minute(&w, 6).await;
    assert!(began.iter().all(|(.., at)| *at < deadline), "{began:?}");
    assert!(
        began.iter().any(|(_, k, _)| k.starts_with("payloads/")),
        "the payload pass began: {began:?}"
    );
    assert_eq!((s.payloads_deleted, s.errors), (0, 0), "{s:?}");
    assert!(w.keys("payloads/").contains(&orphan));
    // The next run, unhurried, goes on.
    assert_eq!(w.sweep(false).await.payloads_deleted, 1);
    assert!(!w.keys("payloads/").contains(&orphan));
}

/// A ready index of more than a page (a backlog): 1,100 markers over the
/// 16 shards, a month old, a third of them true (their task pending in
/// their minute), a third beside a task a worker ran, a third without a
/// task. One pass deletes exactly the two stale thirds, listing the shard
/// folders side by side, and a second pass judges none of them again.
async fn a_long_ready_index_keeps_its_true_markers(behaviour: Behaviour, order: ListOrder) {
    let clock = ManualClock::at_epoch();
    let bucket = common::memory_store(&clock).with_behaviour(behaviour);
    let (mut true_ones, mut stale) = (vec![], 0);
    for i in 0..1_100 {
        let at = clock.now() + Duration::minutes(i % 7);
        match i % 3 {
            0 => true_ones.push(task_with_marker(&bucket, "pending", at, true).await),
            1 => {
                task_with_marker(&bucket, "completed", at, true).await;
                stale += 1;
            }
            _ => {
                task_with_marker(&bucket, "pending", at, false).await;
                stale += 1;
            }
        }
    }
    clock.advance(Duration::days(30));
    let f = FaultyStore::new(bucket.clone());
    let q = Queue::with_clock(f.clone(), Arc::new(clock.clone()), ordered(order));
    let s = q.engine().sweep(&SweepOptions::default()).await.unwrap();
    assert_eq!(
        (s.markers_deleted, s.errors, s.complete),
        (stale, 0, true),
        "{s:?}"
    );
    true_ones.sort();
    let mut left: Vec<String> = bucket
        .keys()
        .into_iter()
        .filter(|k| k.starts_with("ready/"))
        .collect();
    left.sort();
    assert_eq!(left, true_ones);
    let listed_by_folder = f
        .calls()
        .iter()
        .filter(|c| c.op == Op::List && c.key.len() > "ready/".len() && c.key.starts_with("ready/"))
        .count();
    assert!(listed_by_folder >= 16, "{listed_by_folder} folder listings");
    let gets = |f: &FaultyStore<MemoryStore>| {
        f.calls()
            .iter()
            .filter(|c| c.op == Op::Get && c.key.starts_with("tasks/"))
            .count()
    };
    assert_eq!(gets(&f), 1_100, "each marker's task read once");
    clock.advance(Duration::days(1));
    let s = q.engine().sweep(&SweepOptions::default()).await.unwrap();
    assert_eq!((s.markers_deleted, s.errors), (0, 0), "{s:?}");
    assert_eq!(gets(&f), 1_100, "none judged again");
}

#[tokio::test]
async fn a_long_ready_index_loses_its_stale_markers_and_keeps_its_true_ones() {
    a_long_ready_index_keeps_its_true_markers(Behaviour::default(), ListOrder::Bytes).await;
}

#[tokio::test]
async fn a_long_ready_index_is_scanned_alike_on_a_store_that_lists_folders_first() {
    a_long_ready_index_keeps_its_true_markers(Behaviour::seaweedfs(), ListOrder::Bytes).await;
    a_long_ready_index_keeps_its_true_markers(Behaviour::seaweedfs(), ListOrder::Any).await;
}

#[tokio::test]
async fn a_long_ready_index_is_scanned_alike_on_a_store_that_lists_in_no_order() {
    a_long_ready_index_keeps_its_true_markers(Behaviour::s3_express(7), ListOrder::Any).await;
}

#[tokio::test]
async fn a_shard_folder_that_cannot_be_listed_leaves_the_others_judged_and_is_judged_next_pass() {
    let clock = ManualClock::at_epoch();
    let bucket = common::memory_store(&clock);
    let (mut stale, mut in_3) = (0, 0);
    for _ in 0..1_100 {
        let m = task_with_marker(&bucket, "completed", clock.now(), true).await;
        stale += 1;
        in_3 += u64::from(m.starts_with("ready/3/"));
    }
    assert!(in_3 > 0);
    clock.advance(Duration::days(1));
    let f = FaultyStore::new(bucket.clone());
    f.inject(
        Some(Op::List),
        "ready/3/",
        1,
        1,
        Fault::Fail(StoreError::Fatal("listing refused".into())),
    );
    let q = Queue::with_clock(f.clone(), Arc::new(clock.clone()), common::settings());
    let left = || {
        bucket
            .keys()
            .into_iter()
            .filter(|k| k.starts_with("ready/"))
            .count() as u64
    };
    // The other fifteen folders judged and counted; the failure counted.
    let s = q.engine().sweep(&SweepOptions::default()).await.unwrap();
    assert_eq!((s.markers_deleted, s.errors), (stale - in_3, 1), "{s:?}");
    assert_eq!(left(), in_3);
    // The scan did not complete, so the next pass's window takes this
    // one's in too: the folder's markers are judged then.
    clock.advance(Duration::days(1));
    let s = q.engine().sweep(&SweepOptions::default()).await.unwrap();
    assert_eq!((s.markers_deleted, s.errors), (in_3, 0), "{s:?}");
    assert_eq!(left(), 0);
}

#[tokio::test]
async fn a_marker_scan_cut_short_by_the_runs_deadline_is_begun_again_by_the_next_pass() {
    let w = World::new();
    let stale = task_with_marker(&w.bucket, "completed", w.clock.now(), true).await;
    w.clock.advance(Duration::hours(1));
    // Time for the checkpoint, the records and the ready index's page, not
    // for the task read that judges its marker.
    let (s, deadline, began) = pass_by_the_minute(&w, 4).await;
    // No request but the checkpoint's write-back (its stop margin) at or
    // past the deadline, and no read of the marker's task.
    assert!(
        began
            .iter()
            .all(|(_, k, at)| *at < deadline || k.starts_with("sweeper/")),
        "{began:?}"
    );
    assert!(
        began
            .iter()
            .any(|(op, k, _)| *op == Op::List && k.starts_with("ready/")),
        "the scan began: {began:?}"
    );
    assert!(
        !began.iter().any(|(_, k, _)| k.starts_with("tasks/")),
        "{began:?}"
    );
    assert_eq!((s.markers_deleted, s.complete), (0, true), "{s:?}");
    assert!(w.keys("ready/").contains(&stale));
    // The next pass (a new window) judges it: the cut scan's window is its.
    w.clock.advance(Duration::minutes(10));
    assert_eq!(w.sweep(false).await.markers_deleted, 1);
    assert!(!w.keys("ready/").contains(&stale));
}

/// The day's payload pass over a bucket of `total` payloads (the bench's
/// row of the sweeper runs it at 10 million), of which only the day's
/// slices are built (1/256 of `total` in each, every 1000th an
/// orphan, the others with their task under our shard of one digit):
/// the requests it makes by kind, under `tasks/` and `payloads/`.
async fn slice_pass_requests(total: usize) -> (usize, usize, usize, usize, u64) {
    slice_pass_requests_under(total, ListOrder::Bytes).await
}

async fn slice_pass_requests_under(
    total: usize,
    order: ListOrder,
) -> (usize, usize, usize, usize, u64) {
    use idempotent_submit::protocol::sweep::{PAYLOAD_SLICES, payload_slices};
    let clock = ManualClock::at_epoch();
    let bucket = common::memory_store(&clock);
    let day = clock.now() + Duration::days(9);
    let per_slice = total / PAYLOAD_SLICES as usize;
    let mut orphans = 0;
    for slice in payload_slices(day) {
        for i in 0..per_slice {
            let mut b = *uuid::Uuid::new_v4().as_bytes();
            b[0] = slice as u8;
            let id = uuid::Uuid::from_bytes(b).to_string();
            let payload = format!("payloads/{id}/input.json");
            bucket
                .put(&payload, bytes::Bytes::from_static(b"1"), PutMode::Create)
                .await
                .unwrap();
            if i % 1000 == 999 {
                orphans += 1;
                continue;
            }
            let task = format!("tasks/{}/{id}.json", &id[..1]);
            bucket
                .put(&task, bytes::Bytes::from_static(b"{}"), PutMode::Create)
                .await
                .unwrap();
        }
    }
    clock.set(day);
    let f = FaultyStore::new(bucket.clone());
    let s = Queue::with_clock(f.clone(), Arc::new(clock.clone()), ordered(order))
        .engine()
        .sweep(&SweepOptions::default())
        .await
        .unwrap();
    assert_eq!(s.payloads_deleted, orphans, "{s:?}");
    let calls = f.calls();
    let n = |op: Op, prefix: &str| {
        calls
            .iter()
            .filter(|c| c.op == op && c.key.starts_with(prefix))
            .count()
    };
    (
        n(Op::List, "tasks/"),
        n(Op::List, "payloads/"),
        n(Op::Head, ""),
        n(Op::Delete, "payloads/"),
        orphans,
    )
}

#[tokio::test]
async fn under_list_order_any_more_than_a_page_of_payloads_is_listed_page_by_page_and_every_orphan_found()
 {
    // 150 payloads a slice: the day's 8 or 9 slices make more than a page.
    let (_, payload_lists, heads, deletes, orphans) =
        slice_pass_requests_under(256 * 1500, ListOrder::Any).await;
    let slices = orphans as usize;
    assert!((8..=9).contains(&slices), "{slices}");
    assert_eq!((deletes as u64, heads as u64), (orphans, 4 * orphans));
    // The folder page by page (prefixes that end in `/` only).
    assert_eq!(payload_lists, (slices * 1500).div_ceil(1000));
}

#[tokio::test]
async fn the_old_orphan_check_costs_a_page_per_thousand_tasks_of_the_days_slices_and_four_heads_an_orphan()
 {
    // 2.56 million payloads' worth: the day's 8 or 9 slices of 10,000.
    let (task_lists, payload_lists, heads, deletes, orphans) = slice_pass_requests(2_560_000).await;
    // The payloads with their task cost no HEAD: the tasks are listed.
    // Each orphan is confirmed by HEADs under every shard length before
    // it goes (a listing can miss a task that moves between shards).
    assert_eq!(heads as u64, 4 * orphans);
    assert_eq!(deletes as u64, orphans);
    // One listing of the folders of tasks/, then per slice its 9,990
    // tasks: ten pages of a thousand.
    let slices = orphans as usize / 10;
    assert!((8..=9).contains(&slices), "{slices}");
    assert_eq!(task_lists, 1 + slices * 10);
    // payloads/: a first page (more than a page: the 256 slices' folders
    // side by side), each of the day's slices ten pages, every other
    // folder (empty here) one.
    assert_eq!(payload_lists, 1 + slices * 10 + (256 - slices));
}

#[tokio::test]
async fn a_sweep_that_runs_out_of_time_keeps_its_place() {
    let w = World::new();
    for k in ["a", "b", "c", "d", "e"] {
        w.interrupted_at(k, Op::PutCreate, "idempotency/", Fault::CrashAfter)
            .await;
    }
    w.clock.advance(Duration::minutes(11));
    let q = w.queue();
    let opts = SweepOptions {
        max_records: Some(2),
        ..Default::default()
    };
    let first = q.engine().sweep(&opts).await.unwrap();
    assert_eq!(
        (first.scanned, first.finished, first.complete),
        (2, 2, false)
    );
    assert!(
        w.bucket
            .keys()
            .iter()
            .any(|k| k == "sweeper/checkpoint.json")
    );
    let second = q.engine().sweep(&opts).await.unwrap();
    assert_eq!(
        (second.scanned, second.finished, second.complete),
        (2, 2, false)
    );
    let third = q.engine().sweep(&opts).await.unwrap();
    assert_eq!(
        (third.scanned, third.finished, third.complete),
        (1, 1, true)
    );
    assert_eq!(w.count("tasks/"), 5);
}

#[tokio::test]
async fn a_sweep_stops_at_a_storage_failure_and_the_next_run_retries_that_record() {
    let w = World::new();
    w.interrupted_at("a", Op::PutCreate, "idempotency/", Fault::CrashAfter)
        .await;
    w.clock.advance(Duration::minutes(11));
    let f = FaultyStore::new(w.bucket.clone());
    fail_until_healed(&f, Op::PutCreate, "tasks/");
    let s = w.sweep_over(f.clone()).await;
    assert_eq!((s.errors, s.complete), (1, false));
    f.heal();
    let s = w.sweep_over(f).await;
    assert_eq!((s.finished, s.complete), (1, true));
}

#[tokio::test]
async fn a_record_replaced_between_the_sweepers_read_and_its_delete_survives() {
    let (s, left) =
        replaced_between_read_and_delete(common::memory_store, Behaviour::default(), true).await;
    assert_eq!((s.expired_deleted, s.expired_kept), (0, 0));
    assert_eq!(left, Some("2099-01-01T00:00:00Z".into()));
}

#[tokio::test]
async fn with_conditional_delete_off_a_versioned_bucket_loses_the_version_read_and_keeps_the_record_that_replaced_it()
 {
    let (s, left) =
        replaced_between_read_and_delete(common::memory_store_versioned, Behaviour::minio(), false)
            .await;
    assert_eq!(s.expired_deleted, 1, "the expired version is gone: {s:?}");
    assert_eq!(left, Some("2099-01-01T00:00:00Z".into()));
}

#[tokio::test]
async fn with_conditional_delete_off_an_unversioned_bucket_leaves_the_expired_record_counted_for_the_lifecycle_rule()
 {
    let (s, left) =
        replaced_between_read_and_delete(common::memory_store, Behaviour::minio(), false).await;
    assert_eq!((s.expired_deleted, s.expired_kept), (0, 1), "{s:?}");
    // No DELETE was sent: the expired record is there, as it was.
    assert_eq!(left, Some("2026-01-27T13:00:00Z".into()));
}

#[tokio::test]
async fn a_sweeper_that_trusted_if_match_on_a_store_that_ignores_it_would_delete_the_record_that_replaced_the_expired_one()
 {
    // What CONDITIONAL_DELETE=off is for: with it on, over a store that
    // deletes whatever is there, the live record goes and its key's promise
    // with it.
    let (s, left) =
        replaced_between_read_and_delete(common::memory_store, Behaviour::minio(), true).await;
    assert_eq!(s.expired_deleted, 1);
    assert_eq!(left, None, "the live record was deleted");
}

/// An expired record, and the sweeper's handling of it (as its event or a
/// pass would) whose deletion meets a new submit's replacement of it (the
/// replacement lands just before the DELETE): what the sweeper counted, and
/// the `expires_at` of the record left, if any.
async fn replaced_between_read_and_delete(
    store: fn(&ManualClock) -> MemoryStore,
    behaviour: Behaviour,
    conditional_delete: bool,
) -> (SweepSummary, Option<String>) {
    let clock = ManualClock::at_epoch();
    let w = World::over(clock.clone(), store(&clock).with_behaviour(behaviour));
    w.queue()
        .submit("t", json!(1))
        .idempotency_key("a")
        .idempotency_ttl(Duration::hours(1))
        .await
        .unwrap();
    w.clock.advance(Duration::hours(2));
    let rkey = w.record_key("a");
    // A new submit (after expiry) replaces the record just before the
    // sweeper's delete reaches the bucket.
    let bucket = w.bucket.clone();
    let intercept = common::Wrapped(common::Intercept {
        inner: w.bucket.clone(),
        hook: move |op: Op, key: &str| {
            if op == Op::Delete {
                let cur = bucket.get(key).now_or_never()?.ok()?;
                let mut v: serde_json::Value = serde_json::from_slice(&cur.body).ok()?;
                if v["expires_at"] == json!("2099-01-01T00:00:00Z") {
                    return None;
                }
                v["write_id"] = json!(uuid::Uuid::new_v4());
                v["expires_at"] = json!("2099-01-01T00:00:00Z");
                let body = serde_json::to_vec(&v).ok()?.into();
                bucket
                    .put(key, body, PutMode::Update(cur.meta.etag))
                    .now_or_never()?
                    .ok()?;
            }
            None
        },
    });
    let q = Queue::with_clock(
        intercept,
        Arc::new(w.clock.clone()),
        idempotent_submit::Settings {
            conditional_delete,
            ..common::settings()
        },
    );
    let mut s = SweepSummary::default();
    q.engine()
        .sweep_record(&rkey, false, None)
        .await
        .tally(&mut s);
    assert_eq!(s.reads, 1);
    let left = match w.queue().record("t", "a", None).await.unwrap() {
        Some((rec, _)) => Some(rec.expires_at.format("%Y-%m-%dT%H:%M:%SZ").to_string()),
        None => None,
    };
    (s, left)
}

#[tokio::test]
async fn with_conditional_delete_off_an_expired_record_and_an_expired_version_that_comes_back_are_both_deleted()
 {
    let clock = ManualClock::at_epoch();
    let w = World::over(
        clock.clone(),
        common::memory_store_versioned(&clock).with_behaviour(Behaviour::minio()),
    );
    let q = Queue::with_clock(
        w.bucket.clone(),
        Arc::new(w.clock.clone()),
        idempotent_submit::Settings {
            conditional_delete: false,
            ..common::settings()
        },
    );
    // Two lives of one key: the first replaced once it had expired.
    for _ in 0..2 {
        q.submit("t", json!(1))
            .idempotency_key("a")
            .idempotency_ttl(Duration::hours(1))
            .await
            .unwrap();
        w.clock.advance(Duration::hours(2));
    }
    let rkey = w.record_key("a");
    assert_eq!(w.bucket.versions(&rkey).len(), 2);
    let outcome = q.engine().sweep_record(&rkey, false, None).await;
    assert_eq!(outcome, RecordOutcome::ExpiredDeleted);
    // Both versions gone for good: nothing came back, no delete marker.
    assert!(
        w.bucket.versions(&rkey).is_empty(),
        "{:?}",
        w.bucket.versions(&rkey)
    );
    assert_eq!(w.count("idempotency/"), 0);
    // And the next submit of the key makes a new task.
    let r = q.submit("t", json!(1)).idempotency_key("a").await.unwrap();
    assert!(r.created());
}

#[tokio::test]
async fn a_sweeper_and_a_late_submit_finishing_together_leave_one_task_its_marker_and_the_record_as_written()
 {
    for _ in 0..20 {
        let w = World::new();
        let id = w
            .interrupted_at("a", Op::PutCreate, "idempotency/", Fault::CrashAfter)
            .await;
        let written = w.record_meta("a").await.1.etag;
        w.clock.advance(Duration::minutes(11));
        // Both go through a yielding store, so their requests interleave.
        let (sweeper, submitter) = (
            FaultyStore::new(w.bucket.clone()),
            FaultyStore::new(w.bucket.clone()),
        );
        let (qs, qu) = (w.queue_over(sweeper), w.queue_over(submitter));
        let opts = SweepOptions::default();
        let (s, r) = tokio::join!(
            qs.engine().sweep(&opts),
            qu.submit("t", json!({"k": "a"}))
                .idempotency_key("a")
                .into_future(),
        );
        let (s, r) = (s.unwrap(), r.unwrap());
        assert_eq!(r.task_id, id);
        assert_eq!(s.errors, 0);
        assert_eq!(w.count("tasks/"), 1);
        assert_eq!(w.count("ready/"), 1);
        w.assert_still_its_first_write("a", &written).await;
    }
}

/// Sweeps every `every` for `span` over a bucket of records of mixed ages,
/// statuses and TTLs; returns the reads (GETs) per record key.
async fn reads_per_record(every: Duration, span: Duration) -> HashMap<String, usize> {
    reads_per_record_on(Behaviour::default(), ListOrder::Bytes, every, span).await
}

/// [`reads_per_record`] on a bucket that answers as `behaviour` says, swept
/// under `order`.
async fn reads_per_record_on(
    behaviour: Behaviour,
    order: ListOrder,
    every: Duration,
    span: Duration,
) -> HashMap<String, usize> {
    let clock = ManualClock::at_epoch();
    let w = World::over(
        clock.clone(),
        common::memory_store(&clock).with_behaviour(behaviour),
    );
    let ttls = [
        Duration::hours(1),
        Duration::days(1),
        Duration::days(30),
        Duration::days(90),
    ];
    for i in 0..24 {
        let key = format!("k{i}");
        if i % 4 == 0 {
            w.interrupted_at(&key, Op::PutCreate, "idempotency/", Fault::CrashAfter)
                .await;
        } else {
            w.queue()
                .submit("t", json!({"k": key}))
                .idempotency_key(&key)
                .idempotency_ttl(ttls[i % 4])
                .await
                .unwrap();
        }
        w.clock.advance(Duration::minutes(7));
    }
    let f = FaultyStore::new(w.bucket.clone());
    let q = Queue::with_clock(f.clone(), Arc::new(w.clock.clone()), ordered(order));
    let mut t = Duration::zero();
    while t < span {
        w.clock.advance(every);
        t += every;
        let s = q.engine().sweep(&SweepOptions::default()).await.unwrap();
        assert!(s.complete);
    }
    let mut reads = HashMap::new();
    for c in f.calls() {
        if c.op == Op::Get && c.key.starts_with("idempotency/") {
            *reads.entry(c.key).or_default() += 1;
        }
    }
    reads
}

/// The test settings, the scheduled pass listing as `order` says.
fn ordered(order: ListOrder) -> idempotent_submit::Settings {
    idempotent_submit::Settings {
        list_order: order,
        ..common::settings()
    }
}

#[tokio::test]
async fn each_record_is_read_a_bounded_number_of_times_however_often_the_sweeper_runs() {
    reads_stay_bounded_however_often_the_sweeper_runs(Behaviour::default(), ListOrder::Bytes).await;
}

#[tokio::test]
async fn each_record_is_read_as_often_by_folders_on_a_store_that_lists_in_no_order() {
    let bytes = reads_per_record(Duration::minutes(5), Duration::days(3)).await;
    let any =
        reads_stay_bounded_however_often_the_sweeper_runs(Behaviour::s3_express(3), ListOrder::Any)
            .await;
    // Judged by the same window and thresholds: the same reads, record by
    // record.
    assert_eq!(bytes, any);
}

#[tokio::test]
async fn each_record_is_read_a_bounded_number_of_times_by_folders_on_a_store_that_lists_folders_first()
 {
    reads_stay_bounded_however_often_the_sweeper_runs(Behaviour::seaweedfs(), ListOrder::Any).await;
}

#[tokio::test]
async fn each_record_is_read_a_bounded_number_of_times_by_ranges_on_a_store_that_lists_folders_first()
 {
    reads_stay_bounded_however_often_the_sweeper_runs(Behaviour::seaweedfs(), ListOrder::Bytes)
        .await;
}

/// Every 5 and every 1 minute for three days: the same few reads per
/// record; the reads of the 5-minute schedule.
async fn reads_stay_bounded_however_often_the_sweeper_runs(
    behaviour: Behaviour,
    order: ListOrder,
) -> HashMap<String, usize> {
    let span = Duration::days(3);
    let every_5 = reads_per_record_on(behaviour, order, Duration::minutes(5), span).await;
    let every_1 = reads_per_record_on(behaviour, order, Duration::minutes(1), span).await;
    // 864 and 4320 runs over three days; per record, the same few reads:
    // the stale threshold, and 1 h, 2 h, ... 64 h of age at most.
    let max5 = every_5.values().copied().max().unwrap();
    let max1 = every_1.values().copied().max().unwrap();
    assert!(max5 <= 9, "{every_5:?}");
    assert!(max1 <= 9, "{every_1:?}");
    // Five times the runs, the same reads: up to one more per record (the
    // sweeper never writes a record, so every age counts from its one
    // write), where the first pass of one schedule still found a record
    // inside its finish window and the first pass of the other did not.
    let total5: usize = every_5.values().sum();
    let total1: usize = every_1.values().sum();
    assert!(
        total1.abs_diff(total5) <= every_5.len(),
        "{total1} vs {total5}"
    );
    every_5
}

/// The ages (in hours since the record's last write) at which hourly passes
/// read a record kept for `ttl`, up to `until` hours; and the age at which
/// one deleted it.
async fn hourly_reads_of_a_long_lived_record(ttl: Duration, until: i64) -> (Vec<i64>, Option<i64>) {
    let w = World::new();
    w.queue()
        .submit("t", json!({"k": 1}))
        .idempotency_key("long")
        .idempotency_ttl(ttl)
        .await
        .unwrap();
    // One pass past the stale threshold reads the record, finds its task
    // and marker there, and writes nothing: the record keeps its one write,
    // and the ages count from it.
    let first = w.record_meta("long").await.1;
    w.clock.advance(Duration::minutes(11));
    let s = w.sweep(false).await;
    assert_eq!((s.reads, s.finished), (1, 0), "{s:?}");
    w.assert_still_its_first_write("long", &first.etag).await;
    let written = first.last_modified;
    let f = FaultyStore::new(w.bucket.clone());
    let q = w.queue_over(f.clone());
    let (mut reads, mut deleted) = (Vec::new(), None);
    for age in 1..=until {
        w.clock.set(written + Duration::hours(age));
        let s = q.engine().sweep(&SweepOptions::default()).await.unwrap();
        assert!(s.complete && s.errors == 0, "{s:?}");
        if s.reads > 0 {
            reads.push(age);
        }
        if s.expired_deleted > 0 {
            deleted = Some(age);
            break;
        }
    }
    // The summaries' reads are the GETs the bucket saw.
    let gets = f
        .calls()
        .iter()
        .filter(|c| c.op == Op::Get && c.key.starts_with("idempotency/"))
        .count();
    assert_eq!(gets, reads.len());
    (reads, deleted)
}

#[tokio::test]
async fn a_record_kept_past_the_default_ttl_is_read_at_it_and_at_each_doubling_of_its_age() {
    // The default TTL, 30 days (720 h); then 2^k hours past it: 1024 h,
    // 2048 h, 4096 h, 8192 h. A 365-day record (8760 h) is alive at 8192 h
    // and is deleted at the next doubling, 16384 h: under twice its TTL.
    // Nothing in between: its marker is the ready index's scan's
    // (markers.rs), not a read of the record.
    let (reads, deleted) = hourly_reads_of_a_long_lived_record(Duration::days(365), 20_000).await;
    assert_eq!(reads, [720, 1024, 2048, 4096, 8192, 16384]);
    assert_eq!(deleted, Some(16384));
}

#[tokio::test]
async fn a_record_kept_for_the_default_ttl_is_read_once_and_deleted_then() {
    let (reads, deleted) = hourly_reads_of_a_long_lived_record(Duration::days(30), 2_000).await;
    // Its deletion, and no read before it.
    assert_eq!(reads, [720]);
    assert_eq!(deleted, Some(720));
}

#[tokio::test]
async fn a_record_kept_for_less_than_the_default_ttl_is_deleted_at_the_default_ttls_age() {
    let (reads, deleted) = hourly_reads_of_a_long_lived_record(Duration::days(2), 2_000).await;
    assert_eq!(reads, [720]);
    assert_eq!(deleted, Some(720));
}

#[tokio::test]
async fn a_pass_reads_and_finishes_records_side_by_side() {
    let w = World::new();
    for i in 0..32 {
        w.interrupted_at(
            &format!("k{i}"),
            Op::PutCreate,
            "idempotency/",
            Fault::CrashAfter,
        )
        .await;
    }
    w.clock.advance(Duration::minutes(11));
    let f = FaultyStore::new(w.bucket.clone());
    let s = w.sweep_over(f.clone()).await;
    assert_eq!((s.finished, s.complete), (32, true));
    // 32 records, 5 requests each (the record; its task and marker; both
    // written) in 3 round trips, in chunks of 16 at a time: far fewer
    // sequential round trips than requests. The payload pass after them
    // lists the folders of tasks/, then the day's slices side by side, then
    // payloads/.
    let calls = f.calls().len();
    let trips = f.round_trips();
    assert!(calls >= 32 * 5, "{calls}");
    assert!(trips <= 2 * 3 + 6, "{trips} round trips for {calls} calls");
}

/// A clock that moves one second every time it is read: whatever reads it
/// twice sees two instants, as a real clock does.
#[derive(Clone)]
struct TickingClock(ManualClock);

impl Clock for TickingClock {
    fn now(&self) -> chrono::DateTime<chrono::Utc> {
        self.0.advance(Duration::seconds(1));
        self.0.now()
    }
}

/// A bucket holding one expired record per second of `LastModified`, `n`
/// of them under each of `scopes`, on a clock that ticks at every read.
async fn dense_bucket(scopes: &[(&str, usize)]) -> (ManualClock, MemoryStore) {
    // Ready, and expired from the start: whenever a pass reads one, it
    // deletes it.
    dense_bucket_expiring(scopes, "2026-01-27T13:00:00Z").await
}

/// Records of `scopes`, ready, expiring at `expires_at`, written a second
/// apart from the epoch on.
async fn dense_bucket_expiring(
    scopes: &[(&str, usize)],
    expires_at: &str,
) -> (ManualClock, MemoryStore) {
    let manual = ManualClock::at_epoch();
    let bucket = common::memory_store(&manual);
    let q = Queue::with_clock(bucket.clone(), Arc::new(manual.clone()), common::settings());
    q.submit("t", json!(1))
        .idempotency_key("template")
        .await
        .unwrap();
    let template_key = bucket
        .keys()
        .into_iter()
        .find(|k| k.starts_with("idempotency/"))
        .unwrap();
    let mut v: serde_json::Value =
        serde_json::from_slice(&bucket.get(&template_key).await.unwrap().body).unwrap();
    bucket.delete(&template_key, None).await.unwrap();
    v["expires_at"] = json!(expires_at);
    v["status"] = json!("ready");
    v.as_object_mut().unwrap().remove("pending_task");
    let body: bytes::Bytes = serde_json::to_vec(&v).unwrap().into();
    let mut i: u64 = 0;
    for (scope, n) in scopes {
        for _ in 0..*n {
            i += 1;
            let hash = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(i.to_le_bytes()));
            manual.advance(Duration::seconds(1));
            bucket
                .put(
                    &format!("idempotency/{scope}/{hash}.json"),
                    body.clone(),
                    PutMode::Create,
                )
                .await
                .unwrap();
        }
    }
    (manual, bucket)
}

/// A default TTL of an hour; an operation timeout long enough for a clock
/// that ticks at every read by every one of the records read side by side.
fn short_ttl_settings() -> idempotent_submit::Settings {
    idempotent_submit::Settings {
        default_ttl: Duration::hours(1),
        operation_timeout: Duration::minutes(10),
        ..common::settings()
    }
}

#[tokio::test]
async fn no_threshold_crossing_is_missed_when_the_clock_moves_between_its_reads() {
    no_crossing_missed(Behaviour::default(), ListOrder::Bytes).await;
}

#[tokio::test]
async fn no_threshold_crossing_is_missed_by_folders_on_a_store_that_lists_in_no_order() {
    no_crossing_missed(Behaviour::s3_express(5), ListOrder::Any).await;
}

#[tokio::test]
async fn no_threshold_crossing_is_missed_by_folders_on_a_store_that_lists_folders_first() {
    no_crossing_missed(Behaviour::seaweedfs(), ListOrder::Any).await;
}

async fn no_crossing_missed(behaviour: Behaviour, order: ListOrder) {
    // 1,800 records, one per second of LastModified: any second that no
    // pass's window covers leaves the record that crosses its hour in it
    // unread until the next threshold (2 h).
    let (manual, bucket) = dense_bucket(&[("t", 1800)]).await;
    let bucket = bucket.with_behaviour(behaviour);
    let clock = SteppingClock {
        manual: manual.clone(),
        armed: Arc::default(),
    };
    let q = Queue::with_clock(
        bucket.clone(),
        Arc::new(clock.clone()),
        idempotent_submit::Settings {
            list_order: order,
            ..short_ttl_settings()
        },
    );
    let first = bucket
        .keys()
        .iter()
        .filter(|k| k.starts_with("idempotency/"))
        .count();
    let mut deleted = 0;
    // Passes every 97 s, each seeing the clock move a second between each
    // of its first readings, from when the first record is 59 minutes old
    // until the last is past its hour, and before the first reaches 2 h.
    manual.advance(Duration::minutes(29));
    for _ in 0..21 {
        clock.arm();
        let s = q.engine().sweep(&SweepOptions::default()).await.unwrap();
        assert!(s.complete && s.errors == 0, "{s:?}");
        deleted += s.expired_deleted;
        manual.advance(Duration::seconds(97));
    }
    let left: Vec<_> = bucket
        .keys()
        .into_iter()
        .filter(|k| k.starts_with("idempotency/"))
        .collect();
    assert!(
        left.is_empty(),
        "{} records never judged expired",
        left.len()
    );
    assert_eq!(deleted as usize, first, "each record deleted once");
}

/// A clock that, once armed, moves a second after each of its next four
/// readings: the first readings of a run are each a second apart.
#[derive(Clone)]
struct SteppingClock {
    manual: ManualClock,
    armed: Arc<std::sync::atomic::AtomicUsize>,
}

impl SteppingClock {
    fn arm(&self) {
        self.armed.store(4, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Clock for SteppingClock {
    fn now(&self) -> chrono::DateTime<chrono::Utc> {
        use std::sync::atomic::Ordering::SeqCst;
        let t = self.manual.now();
        if self
            .armed
            .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            self.manual.advance(Duration::seconds(1));
        }
        t
    }
}

#[tokio::test]
async fn a_pass_over_parallel_ranges_resumed_across_runs_misses_nothing_and_reads_each_record_once_or_twice()
 {
    let f = resumed_pass_misses_nothing(Behaviour::default(), ListOrder::Bytes).await;
    // The big scope was split by the hex digits of its records' hashes.
    let split: std::collections::HashSet<String> = f
        .calls()
        .into_iter()
        .filter(|c| c.op == Op::List && c.key.len() == "idempotency/big/".len() + 1)
        .map(|c| c.key)
        .collect();
    assert!(split.len() >= 8, "{split:?}");
}

#[tokio::test]
async fn a_pass_by_ranges_over_a_store_that_lists_folders_first_misses_nothing_and_reads_each_record_once_or_twice()
 {
    resumed_pass_misses_nothing(Behaviour::seaweedfs(), ListOrder::Bytes).await;
}

#[tokio::test]
async fn a_pass_by_folders_resumed_across_runs_misses_nothing_and_reads_each_record_once_or_twice()
{
    let f = resumed_pass_misses_nothing(Behaviour::default(), ListOrder::Any).await;
    // Only prefixes that end in `/`, and never StartAfter: nothing an
    // S3 Express bucket refuses.
    assert!(
        f.calls()
            .iter()
            .filter(|c| c.op == Op::List)
            .all(|c| c.key.ends_with('/')),
        "a listing by a prefix that does not end in /"
    );
}

#[tokio::test]
async fn a_pass_by_folders_over_a_store_that_lists_folders_first_misses_nothing_and_reads_each_record_once_or_twice()
 {
    resumed_pass_misses_nothing(Behaviour::seaweedfs(), ListOrder::Any).await;
}

#[tokio::test]
async fn a_pass_by_folders_over_a_store_that_lists_in_no_order_misses_nothing_and_reads_each_record_once_or_twice()
 {
    for seed in [1, 2] {
        resumed_pass_misses_nothing(Behaviour::s3_express(seed), ListOrder::Any).await;
    }
}

#[tokio::test]
async fn a_pass_by_ranges_over_a_store_that_lists_in_no_order_never_completes() {
    // The byte-order pass steps from scope to scope with StartAfter, which a
    // directory bucket refuses (the probe says LIST_ORDER=any): every run
    // stops there, counts an error, and the pass is never complete.
    let (manual, bucket) = dense_bucket(&[("t", 20), ("u", 20)]).await;
    let bucket = bucket.with_behaviour(Behaviour::s3_express(1));
    manual.advance(Duration::days(31));
    let q = Queue::with_clock(
        bucket.clone(),
        Arc::new(manual.clone()),
        short_ttl_settings(),
    );
    for _ in 0..3 {
        let s = q.engine().sweep(&SweepOptions::default()).await.unwrap();
        assert!(!s.complete && s.errors > 0, "{s:?}");
        manual.advance(Duration::hours(1));
    }
    let left = bucket
        .keys()
        .iter()
        .filter(|k| k.starts_with("idempotency/"))
        .count();
    assert!(left > 0, "one of the two scopes is never listed");
}

/// Expired records in scopes that byte order and a folders-first order
/// put apart (`a`, `a-b`, `a.b`) and a big one, on a bucket that answers as
/// `behaviour` says, swept under `order` by short runs that each stop at
/// their deadline: every record is deleted, each read at most twice, and
/// every run but the first resumed the pass. The call log.
async fn resumed_pass_misses_nothing(
    behaviour: Behaviour,
    order: ListOrder,
) -> FaultyStore<MemoryStore> {
    let scopes = [
        ("big", 2500),
        ("a", 30),
        ("a-b", 20),
        ("a.b", 10),
        ("s1", 7),
        ("s3", 1),
        ("z.z-z", 40),
    ];
    let (manual, bucket) = dense_bucket(&scopes).await;
    let bucket = bucket.with_behaviour(behaviour);
    let total: usize = scopes.iter().map(|(_, n)| n).sum();
    manual.advance(Duration::days(31));
    let f = FaultyStore::new(bucket.clone());
    let clock: Arc<dyn Clock> = Arc::new(TickingClock(manual.clone()));
    let settings = idempotent_submit::Settings {
        list_order: order,
        ..short_ttl_settings()
    };
    let q = Queue::with_clock(f.clone(), clock, settings);
    let mut sum = SweepSummary::default();
    let mut runs = 0;
    let mut resumed = 0;
    loop {
        runs += 1;
        assert!(runs < 1000, "the pass never completes");
        // A short invocation: it stops at its deadline, keeping its place.
        let opts = SweepOptions {
            deadline: Some(manual.now() + Duration::seconds(3000)),
            ..Default::default()
        };
        let s = q.engine().sweep(&opts).await.unwrap();
        if runs < 5 {
            eprintln!("{s:?}");
        }
        assert!(!s.busy);
        assert_eq!(s.errors, 0, "{s:?}");
        resumed += usize::from(s.resumed);
        sum.add(&s);
        if s.complete {
            break;
        }
    }
    assert!(
        runs > 2 && resumed == runs - 1,
        "{runs} runs, {resumed} resumed"
    );
    assert_eq!(sum.expired_deleted as usize, total, "{sum:?}");
    let left = bucket
        .keys()
        .iter()
        .filter(|k| k.starts_with("idempotency/"))
        .count();
    assert_eq!(left, 0, "records the pass missed");
    // A record cut short by a deadline is read again next run, never more.
    let mut reads: HashMap<String, usize> = HashMap::new();
    for c in f.calls() {
        if c.op == Op::Get && c.key.starts_with("idempotency/") {
            *reads.entry(c.key).or_default() += 1;
        }
    }
    assert_eq!(reads.len(), total);
    assert!(
        reads.values().all(|n| *n <= 2),
        "{:?}",
        reads.values().max()
    );
    let twice = reads.values().filter(|n| **n == 2).count();
    eprintln!("{behaviour:?} {order:?}: {runs} runs, {twice} of {total} records read twice");
    f
}

/// Live records over two full pages: every pass reads each once, and none
/// is deleted, so a range listed or read again shows in the counts.
#[tokio::test]
async fn a_failure_inside_a_split_page_waits_alone_and_its_rest_is_listed_and_read_exactly_once() {
    let (manual, bucket) = dense_bucket_expiring(&[("big", 2500)], "2030-01-01T00:00:00Z").await;
    manual.advance(Duration::days(31));
    let keys: Vec<String> = bucket
        .keys()
        .into_iter()
        .filter(|k| k.starts_with("idempotency/big/"))
        .collect();
    assert_eq!(keys.len(), 2500);
    let f = FaultyStore::new(bucket.clone());
    let q = Queue::with_clock(f.clone(), Arc::new(manual.clone()), common::settings());
    let run = |failing: Option<&str>| {
        f.heal();
        if let Some(k) = failing {
            fail_until_healed(&f, Op::Get, k);
        }
        let (q, f) = (q.clone(), f.clone());
        async move {
            let before = f.calls().len();
            let s = q.engine().sweep(&SweepOptions::default()).await.unwrap();
            let calls = f.calls()[before..].to_vec();
            let count = |op: Op| {
                calls
                    .iter()
                    .filter(|c| c.op == op && c.key.starts_with("idempotency/big/"))
                    .count()
            };
            let gets: Vec<String> = calls
                .iter()
                .filter(|c| c.op == Op::Get && c.key.starts_with("idempotency/big/"))
                .map(|c| c.key.clone())
                .collect();
            (s, count(Op::List), gets)
        }
    };
    let gets_of = |g: &[String]| g.iter().collect::<std::collections::BTreeSet<_>>().len();

    // Run 1: the first record of the first (full) page fails. Its chunk of
    // 16 is read; the rest of that page waits; the split ranges after it
    // go on now and read the other 1500.
    let (s, _, gets) = run(Some(&keys[0])).await;
    assert_eq!((s.errors, s.complete), (1, false), "{s:?}");
    assert_eq!(gets_of(&gets), 16 + 1500);
    assert!(gets.iter().all(|k| k <= &keys[15] || k > &keys[999]));

    // Run 2: the waiting page, bounded by its last key, is listed from its
    // start (one listing: a full page) and read up to record 500, which
    // fails now: its chunk (497 to 512) is read, the rest waits.
    let (s, lists, gets) = run(Some(&keys[499])).await;
    assert_eq!((s.errors, s.complete), (1, false), "{s:?}");
    assert_eq!(lists, 1, "{s:?}");
    assert_eq!(gets_of(&gets), 512);
    assert!(gets.iter().all(|k| k <= &keys[511]));

    // Run 3: from record 500 to the page's end, nothing past it: one
    // listing, 501 reads, and the pass is complete.
    let (s, lists, gets) = run(None).await;
    assert_eq!((s.errors, s.complete), (0, true), "{s:?}");
    assert_eq!(lists, 1, "{s:?}");
    assert_eq!(gets_of(&gets), 501);
    assert_eq!(gets.len(), 501);
    assert!(gets.iter().all(|k| k >= &keys[499] && k <= &keys[999]));
}

#[tokio::test]
async fn a_listing_that_fails_is_counted_and_its_range_is_listed_next_run() {
    let w = World::new();
    for k in ["a", "b"] {
        w.interrupted_at(k, Op::PutCreate, "idempotency/", Fault::CrashAfter)
            .await;
    }
    w.clock.advance(Duration::minutes(11));
    let f = FaultyStore::new(w.bucket.clone());
    fail_until_healed(&f, Op::List, "idempotency/t/");
    let s = w.sweep_over(f.clone()).await;
    assert_eq!((s.errors, s.reads, s.complete), (1, 0, false), "{s:?}");
    f.heal();
    let s = w.sweep_over(f).await;
    assert_eq!((s.errors, s.finished, s.complete), (0, 2, true), "{s:?}");
}

#[tokio::test]
async fn a_payload_listing_that_fails_is_counted_and_leaves_the_records_pass_complete() {
    let w = World::new();
    w.interrupted_at("a", Op::PutCreate, "idempotency/", Fault::CrashAfter)
        .await;
    w.clock.advance(Duration::minutes(11));
    let f = FaultyStore::new(w.bucket.clone());
    fail_until_healed(&f, Op::List, "payloads/");
    let s = w.sweep_over(f.clone()).await;
    assert_eq!((s.errors, s.finished, s.complete), (1, 1, true), "{s:?}");
    let listed_payloads = f
        .calls()
        .iter()
        .any(|c| c.op == Op::List && c.key.starts_with("payloads/"));
    assert!(listed_payloads);
}

#[tokio::test]
async fn a_run_that_finds_the_pass_claimed_by_another_does_nothing() {
    let w = World::new();
    w.interrupted_at("a", Op::PutCreate, "idempotency/", Fault::CrashAfter)
        .await;
    w.clock.advance(Duration::minutes(11));
    // Another run claims the pass and is still working it.
    let claimed = json!({
        "previous_pass": null,
        "pass": "2026-01-27T12:10:00Z",
        "complete": false,
        "ranges": [{"kind": "scopes"}],
        "running_until": "2099-01-01T00:00:00Z",
    });
    w.bucket
        .put(
            "sweeper/checkpoint.json",
            serde_json::to_vec(&claimed).unwrap().into(),
            PutMode::Create,
        )
        .await
        .unwrap();
    let s = w.sweep(false).await;
    assert!(s.busy && !s.complete);
    assert_eq!((s.scanned, s.reads), (0, 0));
    assert_eq!(w.count("tasks/"), 0);
}

/// A bucket whose first listing of each records range answers an empty page
/// that is not the last (S3 may).
#[tokio::test]
async fn a_checkpoint_gone_before_a_run_claims_it_leaves_that_run_idle_whether_the_store_says_404_or_412()
 {
    for behaviour in [Behaviour::default(), Behaviour::seaweedfs()] {
        let clock = ManualClock::at_epoch();
        let w = World::over(
            clock.clone(),
            common::memory_store(&clock).with_behaviour(behaviour),
        );
        w.interrupted_at("a", Op::PutCreate, "idempotency/", Fault::CrashAfter)
            .await;
        w.clock.advance(Duration::minutes(11));
        assert!(w.sweep(false).await.complete);
        w.clock.advance(Duration::days(1));
        // Someone removes the checkpoint between this run's read and its
        // claim (If-Match): S3 answers 404, SeaweedFS 412.
        let bucket = w.bucket.clone();
        let racing = FaultyStore::new(common::Wrapped(common::Intercept {
            inner: w.bucket.clone(),
            hook: move |op: Op, key: &str| {
                if op == Op::PutUpdate && key == "sweeper/checkpoint.json" {
                    bucket.delete(key, None).now_or_never();
                }
                None
            },
        }));
        let s = w.sweep_over(racing.clone()).await;
        assert!(s.busy && s.scanned == 0, "{behaviour:?}: {s:?}");
        let answer = racing
            .calls()
            .into_iter()
            .find(|c| c.op == Op::PutUpdate)
            .and_then(|c| c.error);
        assert!(
            matches!(
                answer,
                Some(StoreError::NotFound | StoreError::PreconditionFailed)
            ),
            "{answer:?}"
        );
        // The next run finds no checkpoint and begins a pass.
        let s = w.sweep(false).await;
        assert!(!s.busy && s.complete, "{s:?}");
    }
}

#[derive(Clone)]
struct EmptyFirstPages {
    inner: MemoryStore,
    seen: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
}

#[async_trait::async_trait]
impl common::Hooks for EmptyFirstPages {
    type Inner = MemoryStore;

    fn inner(&self) -> &MemoryStore {
        &self.inner
    }

    async fn list(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        page: Option<String>,
        limit: usize,
    ) -> Result<idempotent_submit::store::ListPage, StoreError> {
        if prefix.len() > "idempotency/".len()
            && page.is_none()
            && self.seen.lock().unwrap().insert(prefix.to_owned())
        {
            return Ok(idempotent_submit::store::ListPage {
                objects: vec![],
                next: Some(String::new()),
            });
        }
        self.inner.list(prefix, start_after, page, limit).await
    }
}

#[tokio::test]
async fn an_empty_page_with_a_continuation_token_is_not_the_end_of_a_range() {
    let w = World::new();
    w.interrupted_at("a", Op::PutCreate, "idempotency/", Fault::CrashAfter)
        .await;
    w.clock.advance(Duration::minutes(11));
    let q = w.queue_over(common::Wrapped(EmptyFirstPages {
        inner: w.bucket.clone(),
        seen: Arc::default(),
    }));
    let s = q.engine().sweep(&SweepOptions::default()).await.unwrap();
    assert_eq!((s.scanned, s.finished, s.complete), (1, 1, true), "{s:?}");
}

#[tokio::test]
async fn a_run_that_died_holding_the_pass_keeps_it_for_its_lease_then_loses_it() {
    let w = World::new();
    w.interrupted_at("a", Op::PutCreate, "idempotency/", Fault::CrashAfter)
        .await;
    w.clock.advance(Duration::minutes(11));
    // A run claims the pass (its lease: the run's 15 minutes plus one
    // operation's 25 s) and dies right after.
    let f = FaultyStore::new(w.bucket.clone());
    f.inject(Some(Op::PutCreate), "sweeper/", 1, 1, Fault::CrashAfter);
    let died = w
        .queue_over(f)
        .engine()
        .sweep(&SweepOptions::default())
        .await;
    assert!(died.is_err(), "{died:?}");
    let cp: serde_json::Value =
        serde_json::from_slice(&w.bucket.get("sweeper/checkpoint.json").await.unwrap().body)
            .unwrap();
    let lease: chrono::DateTime<chrono::Utc> =
        cp["running_until"].as_str().unwrap().parse().unwrap();
    assert_eq!(
        lease,
        w.clock.now() + Duration::minutes(15) + Duration::seconds(25)
    );
    // Until the lease runs out, every other run finds the pass taken.
    w.clock
        .advance(Duration::minutes(15) + Duration::seconds(24));
    let s = w.sweep(false).await;
    assert!(s.busy && s.scanned == 0, "{s:?}");
    // From the lease's last instant, the next run takes it over and
    // finishes the record.
    w.clock.advance(Duration::seconds(1));
    let s = w.sweep(false).await;
    assert!(!s.busy && s.complete, "{s:?}");
    assert_eq!(s.finished, 1, "{s:?}");
}

#[tokio::test]
async fn a_pass_with_a_record_budget_never_lists_past_it_however_many_ranges_wait() {
    for budget in [1, 3] {
        a_budgeted_pass(budget).await;
    }
}

async fn a_budgeted_pass(budget: usize) {
    let w = World::new();
    // Records under three scopes: several ranges wait at once.
    for tt in ["a", "b", "c"] {
        for k in ["1", "2"] {
            let f = common::world::dying_at(
                w.bucket.clone(),
                Op::PutCreate,
                "idempotency/",
                Fault::CrashAfter,
            );
            w.queue_over(f)
                .submit(tt, json!({"k": k}))
                .idempotency_key(k)
                .await
                .unwrap_err();
        }
    }
    w.clock.advance(Duration::minutes(11));
    let opts = SweepOptions {
        max_records: Some(budget),
        ..Default::default()
    };
    let (mut runs, mut finished) = (0, 0);
    loop {
        runs += 1;
        assert!(runs < 50, "the pass never completes");
        let f = FaultyStore::new(w.bucket.clone());
        let s = w.queue_over(f.clone()).engine().sweep(&opts).await.unwrap();
        assert!(
            s.scanned <= budget as u64,
            "budget {budget}, run {runs}: {s:?}"
        );
        // The summary counts the listings and record reads it made.
        let calls = f.calls();
        let count = |op: Op, prefix: &str| {
            calls
                .iter()
                .filter(|c| c.op == op && c.key.starts_with(prefix))
                .count() as u64
        };
        assert_eq!(s.lists, count(Op::List, ""), "run {runs}: {s:?}");
        assert_eq!(s.reads, count(Op::Get, "idempotency/"), "run {runs}: {s:?}");
        finished += s.finished;
        if s.complete {
            break;
        }
    }
    assert_eq!((finished, w.count("tasks/")), (6, 6));
}

#[test]
fn a_summary_adds_every_count_of_another() {
    let one = SweepSummary {
        scanned: 3,
        finished: 4,
        expired_deleted: 6,
        errors: 7,
        reads: 8,
        lists: 9,
        past_deadline: 10,
        early: 11,
        ignored: 12,
        unrecognized: 13,
        payloads_deleted: 14,
        markers_deleted: 15,
        ..Default::default()
    };
    let mut sum = one.clone();
    sum.add(&one);
    let twice = SweepSummary {
        scanned: 6,
        finished: 8,
        expired_deleted: 12,
        errors: 14,
        reads: 16,
        lists: 18,
        past_deadline: 20,
        early: 22,
        ignored: 24,
        unrecognized: 26,
        payloads_deleted: 28,
        markers_deleted: 30,
        ..Default::default()
    };
    assert_eq!(sum, twice);
}

#[test]
fn each_outcome_counts_one_read_and_its_own_count_once() {
    use idempotent_submit::SubmitError;
    let tally = |o: RecordOutcome| {
        let mut s = SweepSummary::default();
        o.tally(&mut s);
        o.tally(&mut s);
        (
            s.reads,
            s.finished,
            s.expired_deleted,
            s.early,
            s.past_deadline,
            s.errors,
        )
    };
    assert_eq!(tally(RecordOutcome::Nothing), (2, 0, 0, 0, 0, 0));
    assert_eq!(tally(RecordOutcome::Finished), (2, 2, 0, 0, 0, 0));
    assert_eq!(tally(RecordOutcome::ExpiredDeleted), (2, 0, 2, 0, 0, 0));
    assert_eq!(tally(RecordOutcome::Early), (2, 0, 0, 2, 0, 0));
    // A record past its finish deadline is an error of its own kind.
    assert_eq!(tally(RecordOutcome::PastDeadline), (2, 0, 0, 0, 2, 2));
    assert_eq!(tally(RecordOutcome::Corrupt), (2, 0, 0, 0, 0, 2));
    let unavailable = SubmitError::Storage(StoreError::Unavailable("503".into()));
    assert_eq!(
        tally(RecordOutcome::Failed(unavailable)),
        (2, 0, 0, 0, 0, 2)
    );
    // Cut short by the run's own deadline: it goes on next run, no error.
    assert_eq!(
        tally(RecordOutcome::Failed(SubmitError::DeadlineExceeded)),
        (2, 0, 0, 0, 0, 0)
    );
}

#[test]
fn only_a_young_record_or_a_retryable_failure_is_handed_back() {
    use idempotent_submit::SubmitError;
    let retry = |o: RecordOutcome| o.try_again_later();
    assert!(retry(RecordOutcome::Early));
    assert!(retry(RecordOutcome::Failed(SubmitError::Storage(
        StoreError::Unavailable("503".into())
    ))));
    // A failure that a later delivery cannot fix is not handed back: a
    // refused request, or a record still undetermined past its deadline.
    assert!(!retry(RecordOutcome::Failed(SubmitError::Storage(
        StoreError::Fatal("403".into())
    ))));
    assert!(!retry(RecordOutcome::Failed(SubmitError::Undetermined {
        task_id: uuid::Uuid::nil(),
        retry_after: std::time::Duration::from_secs(1),
    })));
    assert!(!retry(RecordOutcome::Finished));
    assert!(!retry(RecordOutcome::PastDeadline));
}

/// A checkpoint that does not parse is said and counted, never dropped
/// without a word; the pass begins anew over it and leaves one that parses.
#[tokio::test]
async fn an_unparseable_checkpoint_is_counted_as_an_error_and_a_new_pass_replaces_it() {
    let w = World::new();
    w.queue()
        .submit("t", json!({"k": 1}))
        .idempotency_key("a")
        .await
        .unwrap();
    w.bucket
        .put(
            idempotent_submit::protocol::sweep::CHECKPOINT_KEY,
            bytes::Bytes::from_static(b"{not a checkpoint"),
            PutMode::Overwrite,
        )
        .await
        .unwrap();
    w.clock.advance(Duration::minutes(11));
    let s = w.sweep(false).await;
    assert_eq!((s.errors, s.complete, s.scanned), (1, true, 1), "{s:?}");
    let saved = w
        .bucket
        .get(idempotent_submit::protocol::sweep::CHECKPOINT_KEY)
        .await
        .unwrap();
    let v: serde_json::Value =
        serde_json::from_slice(&saved.body).expect("a checkpoint that parses");
    assert!(v["pass"].is_string(), "{v}");
    // The next pass reads it: no error.
    w.clock.advance(Duration::days(1));
    assert_eq!(w.sweep(false).await.errors, 0);
}

// ---- on real stores: moto and SeaweedFS, each versioned and not, under
// both LIST_ORDERs ----

/// The store a real-store test runs on.
#[derive(Debug, Clone, Copy)]
enum Real {
    Moto,
    SeaweedFs,
}

async fn real_store(real: Real, versioning: common::Versioning) -> idempotent_submit::S3Store {
    match real {
        Real::Moto => common::moto_store_with(versioning).await,
        Real::SeaweedFs => common::seaweedfs_store_with(versioning).await,
    }
}

/// The test settings on a real store whose clock the test cannot move: the
/// injected clock stands for the store's (`ClockCheck::TrustClock`).
fn real_settings(order: ListOrder) -> idempotent_submit::Settings {
    let mut s = idempotent_submit::Settings {
        clock_check: idempotent_submit::ClockCheck::TrustClock,
        list_order: order,
        ..common::settings()
    };
    // moto serves one request at a time: sixteen reads at once wait their
    // turn longer than the in-memory tests' half second.
    s.retry.attempt_timeout = std::time::Duration::from_secs(10);
    s
}

/// Records of `scopes`, ready, expiring `expires_in` from now, written to
/// `store` as they are; their keys.
async fn expired_records(
    store: &idempotent_submit::S3Store,
    scopes: &[(&str, usize)],
    expires_in: Duration,
) -> Vec<String> {
    let clock = ManualClock::new(chrono::Utc::now());
    let q = Queue::with_clock(
        store.clone(),
        Arc::new(clock),
        real_settings(ListOrder::Bytes),
    );
    q.submit("t", json!(1))
        .idempotency_key("template")
        .await
        .unwrap();
    let template = common::all_keys(store)
        .await
        .into_iter()
        .find(|k| k.starts_with("idempotency/"))
        .unwrap();
    let mut v: serde_json::Value =
        serde_json::from_slice(&store.get(&template).await.unwrap().body).unwrap();
    store.delete(&template, None).await.unwrap();
    v["expires_at"] = json!(
        (chrono::Utc::now() + expires_in)
            .format("%Y-%m-%dT%H:%M:%SZ")
            .to_string()
    );
    v["status"] = json!("ready");
    v.as_object_mut().unwrap().remove("pending_task");
    let body: bytes::Bytes = serde_json::to_vec(&v).unwrap().into();
    let mut keys = Vec::new();
    let mut i: u64 = 0;
    for (scope, n) in scopes {
        for _ in 0..*n {
            i += 1;
            let hash = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(i.to_le_bytes()));
            keys.push(format!("idempotency/{scope}/{hash}.json"));
        }
    }
    let puts = keys.iter().map(|k| {
        let (store, body) = (store.clone(), body.clone());
        async move { store.put(k, body, PutMode::Create).await.unwrap() }
    });
    futures::StreamExt::collect::<Vec<_>>(futures::StreamExt::buffer_unordered(
        futures::stream::iter(puts),
        16,
    ))
    .await;
    keys
}

/// Expired records in scopes that byte order and a folders-first order put
/// apart, on `real`, swept a month later under `order` by runs of at most
/// 37 records (each resuming the pass where the last stopped): every record
/// deleted, none read more than twice.
async fn a_pass_in_small_runs_deletes_every_expired_record_on(
    real: Real,
    versioning: common::Versioning,
    order: ListOrder,
) {
    let store = real_store(real, versioning).await;
    let scopes = [("a", 30), ("a-b", 20), ("a.b", 20), ("a_b", 10), ("b", 40)];
    let keys = expired_records(&store, &scopes, Duration::hours(1)).await;
    let f = FaultyStore::new(store.clone());
    let clock = ManualClock::new(chrono::Utc::now() + Duration::days(31));
    let q = Queue::with_clock(f.clone(), Arc::new(clock), real_settings(order));
    let mut sum = SweepSummary::default();
    let mut runs = 0;
    loop {
        runs += 1;
        assert!(runs < 100, "the pass never completes: {sum:?}");
        let s = q
            .engine()
            .sweep(&SweepOptions {
                max_records: Some(37),
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(s.errors, 0, "{real:?} {versioning:?} {order:?}: {s:?}");
        sum.add(&s);
        if s.complete {
            break;
        }
    }
    assert!(runs > 3, "{runs} runs");
    let left: Vec<String> = common::all_keys(&store)
        .await
        .into_iter()
        .filter(|k| k.starts_with("idempotency/"))
        .collect();
    assert!(
        left.is_empty(),
        "{real:?} {versioning:?} {order:?}: {} records missed: {left:?}",
        left.len()
    );
    assert_eq!(sum.expired_deleted as usize, keys.len(), "{sum:?}");
    let mut reads: HashMap<String, usize> = HashMap::new();
    for c in f.calls() {
        if c.op == Op::Get && c.key.starts_with("idempotency/") {
            *reads.entry(c.key).or_default() += 1;
        }
    }
    assert_eq!(reads.len(), keys.len());
    assert!(
        reads.values().all(|n| *n <= 2),
        "{:?}",
        reads.values().max()
    );
}

/// Submits that died right after their record, in scopes that sort apart,
/// on `real`; a pass 11 minutes later under `order` finishes each: its task
/// and its marker written, the record left as written.
async fn a_pass_finishes_interrupted_submits_on(
    real: Real,
    versioning: common::Versioning,
    order: ListOrder,
) {
    let store = real_store(real, versioning).await;
    let clock = ManualClock::new(chrono::Utc::now());
    let settings = real_settings(order);
    let mut ids = Vec::new();
    for (scope, key) in [("a", "k1"), ("a-b", "k2"), ("a.b", "k3"), ("b", "k4")] {
        let dying = common::world::dying_at(
            store.clone(),
            Op::PutCreate,
            "idempotency/",
            Fault::CrashAfter,
        );
        let q = Queue::with_clock(dying, Arc::new(clock.clone()), settings.clone());
        q.submit("t", json!({"k": key}))
            .idempotency_key(key)
            .idempotency_scope(idempotent_submit::Scope::parse(Some(scope)).unwrap())
            .await
            .expect_err("the submit dies after its record");
        ids.push(key);
    }
    clock.advance(Duration::minutes(11));
    let q = Queue::with_clock(store.clone(), Arc::new(clock.clone()), settings);
    let s = q.engine().sweep(&SweepOptions::default()).await.unwrap();
    assert_eq!(
        (s.scanned, s.finished, s.errors, s.complete),
        (4, 4, 0, true),
        "{real:?} {versioning:?} {order:?}: {s:?}"
    );
    let keys = common::all_keys(&store).await;
    assert_eq!(keys.iter().filter(|k| k.starts_with("tasks/")).count(), 4);
    assert_eq!(keys.iter().filter(|k| k.starts_with("ready/")).count(), 4);
}

/// A dry pass through a call log on `store`: its summary, after checking
/// that it wrote nothing (no PUT, no DELETE) and left every key and ETag.
async fn dry_pass_writing_nothing(
    store: &idempotent_submit::S3Store,
    clock: &ManualClock,
    settings: &idempotent_submit::Settings,
) -> SweepSummary {
    let etags = |store: idempotent_submit::S3Store| async move {
        let mut all = Vec::new();
        let mut page = None;
        loop {
            let p = store.list("", None, page, 1000).await.unwrap();
            all.extend(p.objects.into_iter().map(|o| (o.key, o.etag.to_string())));
            match p.next {
                Some(n) => page = Some(n),
                None => break,
            }
        }
        all.sort();
        all
    };
    let before = etags(store.clone()).await;
    let f = FaultyStore::new(store.clone());
    let q = Queue::with_clock(f.clone(), Arc::new(clock.clone()), settings.clone());
    let s = q
        .engine()
        .sweep(&SweepOptions {
            dry_run: true,
            ..Default::default()
        })
        .await
        .unwrap();
    let writes: Vec<_> = f.calls().into_iter().filter(|c| c.op.is_write()).collect();
    assert!(writes.is_empty(), "{writes:?}");
    assert_eq!(etags(store.clone()).await, before);
    s
}

/// A bucket on `real` with every kind of record and payload a pass meets,
/// swept twice at each of two times, a dry run then the real pass: the
/// counts are equal. At 11 minutes: submits done (and still `creating`),
/// interrupted after their record, without their marker, without their
/// task, and expired records. Nine days later: orphan payloads of the
/// day's slices and of others, and payloads whose task is there under one
/// digit of shard and under two.
async fn a_dry_run_counts_what_the_real_pass_then_does_on(
    real: Real,
    versioning: common::Versioning,
    order: ListOrder,
) {
    let store = real_store(real, versioning).await;
    let start = chrono::Utc::now();
    let clock = ManualClock::new(start);
    let settings = real_settings(order);
    let q = Queue::with_clock(store.clone(), Arc::new(clock.clone()), settings.clone());
    q.submit("t", json!({"k": "done"}))
        .idempotency_key("done")
        .await
        .unwrap();
    let no_marker = q
        .submit("t", json!({"k": "no-marker"}))
        .idempotency_key("no-marker")
        .await
        .unwrap()
        .task_id
        .to_string();
    let marker = common::all_keys(&store)
        .await
        .into_iter()
        .find(|k| k.starts_with("ready/") && k.ends_with(&no_marker))
        .unwrap();
    store.delete(&marker, None).await.unwrap();
    for (key, op, prefix, fault) in [
        (
            "after-record",
            Op::PutCreate,
            "idempotency/",
            Fault::CrashAfter,
        ),
        ("no-task", Op::PutCreate, "tasks/", Fault::CrashBefore),
    ] {
        let dying = common::world::dying_at(store.clone(), op, prefix, fault);
        Queue::with_clock(dying, Arc::new(clock.clone()), settings.clone())
            .submit("t", json!({"k": key}))
            .idempotency_key(key)
            .await
            .expect_err("the submit dies");
    }
    expired_records(&store, &[("a", 3), ("b", 2)], Duration::minutes(5)).await;
    // Nine days on, at noon: the day whose slices the pass takes.
    let later = (start + Duration::days(9))
        .date_naive()
        .and_hms_opt(12, 0, 0)
        .unwrap()
        .and_utc();
    let slices = idempotent_submit::protocol::sweep::payload_slices(later);
    let outside = (slices.end) % idempotent_submit::protocol::sweep::PAYLOAD_SLICES;
    payload_of_slice(&store, slices.start).await;
    payload_of_slice(&store, slices.end - 1).await;
    let kept_outside = payload_of_slice(&store, outside).await;
    let mut live = vec![kept_outside];
    for shard in [1, 2] {
        live.push(payload_with_its_task(&store, slices.start, shard).await);
    }
    // A marker beside a task a worker has run, and one whose task never
    // came: too young for the ready index's scan at 11 minutes, both stale
    // nine days on.
    let stale = [
        task_with_marker(&store, "completed", start, true).await,
        task_with_marker(&store, "pending", start, false).await,
    ];

    clock.advance(Duration::minutes(11));
    let dry = dry_pass_writing_nothing(&store, &clock, &settings).await;
    let s = Queue::with_clock(store.clone(), Arc::new(clock.clone()), settings.clone())
        .engine()
        .sweep(&SweepOptions::default())
        .await
        .unwrap();
    let at = format!("{real:?} {versioning:?} {order:?}");
    assert_eq!(
        (s.finished, s.expired_deleted, s.payloads_deleted, s.errors),
        (3, 5, 0, 0),
        "{at}: {s:?}"
    );
    assert_eq!(counts(&dry), counts(&s), "{at}: dry {dry:?}\nreal {s:?}");

    let ready = |store: idempotent_submit::S3Store| async move {
        common::all_keys(&store)
            .await
            .into_iter()
            .filter(|k| k.starts_with("ready/"))
            .collect::<Vec<String>>()
    };
    let before = ready(store.clone()).await;
    clock.set(later);
    let dry = dry_pass_writing_nothing(&store, &clock, &settings).await;
    let s = Queue::with_clock(store.clone(), Arc::new(clock.clone()), settings.clone())
        .engine()
        .sweep(&SweepOptions::default())
        .await
        .unwrap();
    assert_eq!(
        (s.payloads_deleted, s.markers_deleted, s.errors),
        (2, 2, 0),
        "{at}: {s:?}"
    );
    assert_eq!(counts(&dry), counts(&s), "{at}: dry {dry:?}\nreal {s:?}");
    // The records' markers, true, and neither stale one.
    let markers = ready(store.clone()).await;
    assert_eq!(markers.len(), before.len() - 2, "{at}: {markers:?}");
    assert!(
        stale
            .iter()
            .all(|m| before.contains(m) && !markers.contains(m)),
        "{at}"
    );
    let mut left: Vec<String> = common::all_keys(&store)
        .await
        .into_iter()
        .filter(|k| k.starts_with("payloads/"))
        .collect();
    left.sort();
    live.sort();
    assert_eq!(left, live, "{at}");
}

macro_rules! on_real_stores {
    ($($test:ident: $helper:ident),* $(,)?) => {
        $(
            mod $test {
                use super::*;
                on_real_stores!(@one moto, Moto, Off, Bytes, $helper);
                on_real_stores!(@one moto_versioned, Moto, On, Bytes, $helper);
                on_real_stores!(@one moto_list_order_any, Moto, Off, Any, $helper);
                on_real_stores!(@one seaweedfs, SeaweedFs, Off, Bytes, $helper);
                on_real_stores!(@one seaweedfs_versioned, SeaweedFs, On, Bytes, $helper);
                on_real_stores!(@one seaweedfs_list_order_any, SeaweedFs, Off, Any, $helper);
                on_real_stores!(@one seaweedfs_versioned_list_order_any, SeaweedFs, On, Any, $helper);
            }
        )*
    };
    (@one $name:ident, $real:ident, $versioning:ident, $order:ident, $helper:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            super::$helper(
                Real::$real,
                common::Versioning::$versioning,
                ListOrder::$order,
            )
            .await;
        }
    };
}

on_real_stores!(
    a_pass_in_small_runs_deletes_every_expired_record_and_reads_each_once_or_twice:
        a_pass_in_small_runs_deletes_every_expired_record_on,
    a_pass_finishes_every_interrupted_submit_in_scopes_that_sort_apart:
        a_pass_finishes_interrupted_submits_on,
    a_dry_run_counts_what_the_real_pass_then_does_on_the_same_bucket:
        a_dry_run_counts_what_the_real_pass_then_does_on,
);
