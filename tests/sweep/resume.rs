use super::*;

#[tokio::test]
async fn a_pass_over_parallel_ranges_resumed_across_runs_misses_nothing_and_reads_each_record_once_or_twice()
 {
    let (_, bounded) = resumed_pass_misses_nothing(Behaviour::default(), ListOrder::Bytes).await;
    // The big scope was split: its ranges, bounded above, were kept
    // between runs.
    assert!(bounded >= 2, "{bounded}");
}

on_stores! { resumed_pass_misses_nothing:
    a_pass_by_ranges_over_a_store_that_lists_folders_first_misses_nothing_and_reads_each_record_once_or_twice =>
        [folders_first(ListOrder::Bytes)];
    a_pass_by_folders_over_a_store_that_lists_folders_first_misses_nothing_and_reads_each_record_once_or_twice =>
        [folders_first(ListOrder::Any)];
    a_pass_by_folders_over_a_store_that_lists_in_no_order_misses_nothing_and_reads_each_record_once_or_twice =>
        [no_order(1), no_order(2)];
}

#[tokio::test]
async fn a_pass_by_folders_resumed_across_runs_misses_nothing_and_reads_each_record_once_or_twice()
{
    let (f, _) = resumed_pass_misses_nothing(Behaviour::default(), ListOrder::Any).await;
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
async fn a_pass_by_ranges_over_a_store_that_lists_in_no_order_never_completes() {
    // The byte-order pass goes on past a scope's first page with
    // StartAfter, which a directory bucket refuses (the probe says
    // LIST_ORDER=any): every run stops there, counts an error, and the pass
    // is never complete.
    let (manual, bucket) = dense_bucket(&[("t", 1200), ("u", 20)]).await;
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
    assert!(left > 0, "the rest of the large scope is never listed");
}

/// Expired records in scopes that byte order and a folders-first order
/// put apart (`a`, `a-b`, `a.b`) and a big one, on a bucket that answers as
/// `behaviour` says, swept under `order` by short runs that each stop at
/// their deadline: every record is deleted, each read at most twice, and
/// every run but the first resumed the pass. The call log, and the most
/// ranges of the big scope bounded above (split) that the checkpoint kept
/// between runs.
async fn resumed_pass_misses_nothing(
    behaviour: Behaviour,
    order: ListOrder,
) -> (FaultyStore<MemoryStore>, usize) {
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
    // Ranges of 500 records: the big scope splits into three.
    let settings = idempotent_submit::Settings {
        list_order: order,
        pass_range_records: 500,
        ..short_ttl_settings()
    };
    let q = Queue::with_clock(f.clone(), clock, settings);
    let mut sum = SweepSummary::default();
    let mut runs = 0;
    let mut resumed = 0;
    let mut bounded = 0;
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
        if let Ok(cp) = bucket.get("sweeper/checkpoint.json").await {
            let text = String::from_utf8_lossy(&cp.body);
            bounded = bounded.max(text.matches("\"until\":\"idempotency/big/").count());
        }
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
    (f, bounded)
}

/// Live records over two full pages: every pass reads each once, and none
/// is deleted, so a range listed or read again shows in the counts.
#[tokio::test]
async fn a_failure_inside_a_split_page_waits_alone_and_its_rest_is_listed_and_read_exactly_once() {
    let (manual, bucket) = dense_bucket_expiring(&[("big", 2500)], "2030-01-01T00:00:00Z").await;
    manual.advance(Duration::days(31));
    let keys = keys_under(&bucket, "idempotency/big/").await;
    assert_eq!(keys.len(), 2500);
    let f = FaultyStore::new(bucket.clone());
    // Ranges of 500 records: the scope splits after its first page.
    let settings = idempotent_submit::Settings {
        pass_range_records: 500,
        ..common::settings()
    };
    let q = Queue::with_clock(f.clone(), Arc::new(manual.clone()), settings);
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
    let w = World::with_stale(&["a", "b"]).await;
    let (s, f) = w.sweep_failing(Op::List, "idempotency/t/").await;
    assert_eq!((s.errors, s.reads, s.complete), (1, 0, false), "{s:?}");
    f.heal();
    let s = w.sweep_over(f).await;
    assert_eq!((s.errors, s.finished, s.complete), (0, 2, true), "{s:?}");
}

#[tokio::test]
async fn a_payload_listing_that_fails_is_counted_and_leaves_the_records_pass_complete() {
    let w = World::with_stale(&["a"]).await;
    let (s, f) = w.sweep_failing(Op::List, "payloads/").await;
    assert_eq!((s.errors, s.finished, s.complete), (1, 1, true), "{s:?}");
    let listed_payloads = f
        .calls()
        .iter()
        .any(|c| c.op == Op::List && c.key.starts_with("payloads/"));
    assert!(listed_payloads);
}

#[tokio::test]
async fn a_run_that_finds_the_pass_claimed_by_another_does_nothing() {
    let w = World::with_stale(&["a"]).await;
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
async fn a_checkpoint_gone_under_a_run_is_read_again_and_the_run_stops_when_its_share_is_gone_whether_the_store_says_404_or_412()
 {
    for behaviour in [Behaviour::default(), Behaviour::seaweedfs()] {
        let clock = ManualClock::at_epoch();
        let w = World::over(
            clock.clone(),
            common::memory_store(&clock).with_behaviour(behaviour),
        );
        w.crashed("a").await;
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
        // The run reads it again (none: it opens a pass, create-only), and
        // its release finds its share gone: it stops, the pass not done.
        let s = w.sweep_over(racing.clone()).await;
        assert!(!s.busy && !s.complete, "{behaviour:?}: {s:?}");
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
    let w = World::with_stale(&["a"]).await;
    let q = w.queue_over(common::Wrapped(EmptyFirstPages {
        inner: w.bucket.clone(),
        seen: Arc::default(),
    }));
    let s = q.engine().sweep(&SweepOptions::default()).await.unwrap();
    assert_eq!((s.scanned, s.finished, s.complete), (1, 1, true), "{s:?}");
}
