use super::*;

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
            w.crashed(&key).await;
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

on_stores! { reads_stay_bounded_however_often_the_sweeper_runs:
    each_record_is_read_a_bounded_number_of_times_however_often_the_sweeper_runs => [s3(ListOrder::Bytes)];
    each_record_is_read_a_bounded_number_of_times_by_folders_on_a_store_that_lists_folders_first =>
        [folders_first(ListOrder::Any)];
    each_record_is_read_a_bounded_number_of_times_by_ranges_on_a_store_that_lists_folders_first =>
        [folders_first(ListOrder::Bytes)];
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

on_stores! { no_crossing_missed:
    no_threshold_crossing_is_missed_when_the_clock_moves_between_its_reads => [s3(ListOrder::Bytes)];
    no_threshold_crossing_is_missed_by_folders_on_a_store_that_lists_in_no_order => [no_order(5)];
    no_threshold_crossing_is_missed_by_folders_on_a_store_that_lists_folders_first =>
        [folders_first(ListOrder::Any)];
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
    let left = keys_under(&bucket, "idempotency/").await;
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
