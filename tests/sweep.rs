//! The sweeper: finishing (and writing nothing where nothing is missing),
//! expiry, dry runs, keeping its place, races, and reads per record that do
//! not grow with how often it runs.

use crate::common;

use std::collections::HashMap;
use std::sync::Arc;

use crate::common::World;
use chrono::Duration;
use futures::FutureExt;
use idempotent_submit::protocol::sweep::RecordOutcome;
use idempotent_submit::protocol::{RecordStatus, SweepOptions, SweepSummary};
use idempotent_submit::store::{Fault, FaultyStore, MemoryStore, Op, PutMode, Store, StoreError};
use idempotent_submit::{Clock, ManualClock, Queue};
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
    let w = World::new();
    w.queue()
        .submit("t", json!(1))
        .idempotency_key("a")
        .idempotency_ttl(Duration::hours(1))
        .await
        .unwrap();
    w.clock.advance(Duration::hours(2));
    // A new submit (after expiry) replaces the record just before the
    // sweeper's conditional delete reaches the bucket.
    let bucket = w.bucket.clone();
    let q = w.queue_over(common::Wrapped(common::Intercept {
        inner: w.bucket.clone(),
        hook: move |op: Op, key: &str| {
            if op == Op::Delete {
                let cur = bucket.get(key).now_or_never()?.ok()?;
                let mut v: serde_json::Value = serde_json::from_slice(&cur.body).ok()?;
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
    }));
    let s = q.engine().sweep(&SweepOptions::default()).await.unwrap();
    assert_eq!(s.expired_deleted, 0);
    assert_eq!(w.count("idempotency/"), 1);
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
    let w = World::new();
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
    let q = w.queue_over(f.clone());
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

#[tokio::test]
async fn each_record_is_read_a_bounded_number_of_times_however_often_the_sweeper_runs() {
    let span = Duration::days(3);
    let every_5 = reads_per_record(Duration::minutes(5), span).await;
    let every_1 = reads_per_record(Duration::minutes(1), span).await;
    // 864 and 4320 runs over three days; per record, the same few reads:
    // the stale threshold and 1 h, 2 h, ... 64 h of age at most.
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
    // The default TTL is 30 days (720 h); then 2^k hours past it: 1024 h,
    // 2048 h, 4096 h, 8192 h. A 365-day record (8760 h) is alive at 8192 h
    // and is deleted at the next doubling, 16384 h: under twice its TTL.
    let (reads, deleted) = hourly_reads_of_a_long_lived_record(Duration::days(365), 20_000).await;
    assert_eq!(reads, [720, 1024, 2048, 4096, 8192, 16384]);
    assert_eq!(deleted, Some(16384));
}

#[tokio::test]
async fn a_record_kept_for_the_default_ttl_is_read_once_and_deleted_then() {
    let (reads, deleted) = hourly_reads_of_a_long_lived_record(Duration::days(30), 2_000).await;
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
    // sequential round trips than requests.
    let calls = f.calls().len();
    let trips = f.round_trips();
    assert!(calls >= 32 * 5, "{calls}");
    assert!(trips <= 2 * 3 + 4, "{trips} round trips for {calls} calls");
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
    // 1,800 records, one per second of LastModified: any second that no
    // pass's window covers leaves the record that crosses its hour in it
    // unread until the next threshold (2 h).
    let (manual, bucket) = dense_bucket(&[("t", 1800)]).await;
    let clock = SteppingClock {
        manual: manual.clone(),
        armed: Arc::default(),
    };
    let q = Queue::with_clock(
        bucket.clone(),
        Arc::new(clock.clone()),
        short_ttl_settings(),
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
    let (manual, bucket) = dense_bucket(&[
        ("big", 2500),
        ("s1", 7),
        ("s2", 3),
        ("s3", 1),
        ("z.z-z", 40),
    ])
    .await;
    let total = 2500 + 7 + 3 + 1 + 40;
    manual.advance(Duration::days(31));
    let f = FaultyStore::new(bucket.clone());
    let clock: Arc<dyn Clock> = Arc::new(TickingClock(manual.clone()));
    let q = Queue::with_clock(f.clone(), clock, short_ttl_settings());
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
    assert_eq!(left, 0);
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
    // The big scope was split by the hex digits of its records' hashes.
    let split: std::collections::HashSet<String> = f
        .calls()
        .into_iter()
        .filter(|c| c.op == Op::List && c.key.len() == "idempotency/big/".len() + 1)
        .map(|c| c.key)
        .collect();
    assert!(split.len() >= 8, "{split:?}");
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
