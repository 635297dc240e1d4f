//! What the mutation run of `sweep/tail.rs` (issue 51) found no test for:
//! each test here fails with a mutant the suite let through (docs/
//! testing.md's rows name them). In memory, on tokio's paused clock.

use super::*;

use super::tail::{Invocations, Paused, cursor, payload_bucket};

/// A tail whose one item can never move on: every LIST of `payloads/`
/// (the tail's first page) takes a minute, an invocation 3 s.
fn stuck_tail() -> Invocations {
    let clock = Paused::new();
    let bucket = MemoryStore::new(Arc::new(clock.clone()) as Arc<dyn Clock>);
    let slow = ("payloads/", 60_000);
    Invocations::with_slow_lists(&bucket, &clock, ListOrder::Bytes, slow)
}

#[tokio::test(start_paused = true)]
async fn a_tail_item_that_makes_no_progress_in_two_whole_invocations_is_given_up_and_the_pass_completes_without_moving_the_cursor()
 {
    let pass = stuck_tail();
    let r = pass.drive(Some(3)).await;
    assert_eq!(r.passes().len(), 1, "{:?}", r.cursors);
    assert!(r.outcomes.len() <= 10, "{} invocations", r.outcomes.len());
    // Complete, the payload cursor where it was (the next pass checks the
    // payloads again).
    assert_eq!(r.cursors.last(), Some(&(true, 0)), "{:?}", r.cursors);
}

/// A bucket of one orphan of the day's first slice, nine days on, and a
/// pass over it through `store` (made of the bucket and its clock): the
/// pass's summary, the checkpoint's `(complete, payload_slice)`, and
/// whether the orphan is still there.
async fn a_pass_over_an_orphan<S: Store + 'static>(
    store: impl FnOnce(MemoryStore, ManualClock) -> S,
) -> (SweepSummary, (bool, u64), bool) {
    let clock = ManualClock::at_epoch();
    let bucket = common::memory_store(&clock);
    let orphan = payload_of_slice(&bucket, 0).await;
    clock.advance(Duration::days(9));
    let s = store(bucket.clone(), clock.clone());
    let q = Queue::with_clock(s, Arc::new(clock.clone()), common::settings());
    let summary = q.engine().sweep(&SweepOptions::default()).await.unwrap();
    let left = bucket.keys().contains(&orphan);
    (summary, cursor(&bucket).await, left)
}

#[tokio::test]
async fn a_tail_item_whose_listing_is_refused_counts_one_error_and_holds_the_payload_cursor() {
    let (s, cursor, orphan_left) = a_pass_over_an_orphan(|bucket, _| {
        let f = FaultyStore::new(bucket);
        let refused = Fault::Fail(StoreError::Fatal("refused".into()));
        f.inject(Some(Op::List), "payloads/", 1, usize::MAX, refused);
        f
    })
    .await;
    assert_eq!(s.errors, 1, "{s:?}");
    assert_eq!(cursor, (true, 0), "the pass ended, the payload cursor held");
    assert!(orphan_left);
}

/// A store whose first LIST of `payloads/` takes two minutes of the clock
/// and then fails (a 503): one request that outlasts its operation time,
/// the run's deadline far off.
struct SlowFirstPage {
    inner: MemoryStore,
    clock: ManualClock,
    slowed: std::sync::atomic::AtomicBool,
}

#[async_trait::async_trait]
impl common::Hooks for SlowFirstPage {
    type Inner = MemoryStore;

    fn inner(&self) -> &MemoryStore {
        &self.inner
    }

    async fn before(&self, call: &common::Call<'_>) -> Result<(), StoreError> {
        let page = call.op == Op::List && call.key == "payloads/";
        if page && !self.slowed.swap(true, std::sync::atomic::Ordering::SeqCst) {
            self.clock.advance(Duration::minutes(2));
            return Err(StoreError::Unavailable("503".into()));
        }
        Ok(())
    }
}

#[tokio::test]
async fn a_tail_item_whose_request_outlasts_its_operation_time_goes_back_with_its_place_and_is_no_error()
 {
    let (s, cursor, orphan_left) = a_pass_over_an_orphan(|inner, clock| {
        common::Wrapped(SlowFirstPage {
            inner,
            clock,
            slowed: Default::default(),
        })
    })
    .await;
    assert_eq!(s.errors, 0, "{s:?}");
    assert_eq!(cursor, (true, 9), "the payload cursor moved by the plan");
    assert!(!orphan_left);
}

/// A store that counts its LISTs (of objects and of folders) and its HEADs
/// of payloads.
struct CountedLists {
    inner: MemoryStore,
    lists: Arc<std::sync::atomic::AtomicU64>,
    payload_heads: Arc<std::sync::atomic::AtomicU64>,
}

#[async_trait::async_trait]
impl common::Hooks for CountedLists {
    type Inner = MemoryStore;

    fn inner(&self) -> &MemoryStore {
        &self.inner
    }

    async fn before(&self, call: &common::Call<'_>) -> Result<(), StoreError> {
        let counter = match call.op {
            Op::List => &self.lists,
            Op::Head if call.key.starts_with("payloads/") => &self.payload_heads,
            _ => return Ok(()),
        };
        counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
}

#[tokio::test]
async fn a_pass_counts_every_list_of_its_payload_check_under_either_list_order() {
    // More than a page of payloads (the tail's slices and rounds), and one
    // page (checked at once against the task folders listed whole, three
    // pages of `tasks/0/`).
    let sizes = [(1_100, 2_000), (100, 2_000)];
    for (order, size) in [ListOrder::Bytes, ListOrder::Any]
        .into_iter()
        .flat_map(|o| sizes.map(|s| (o, s)))
    {
        let clock = ManualClock::at_epoch();
        let bucket = common::memory_store(&clock);
        payload_bucket(size, 7, &bucket, &clock).await;
        let (lists, payload_heads) = (Arc::default(), Arc::default());
        let store = CountedLists {
            inner: bucket.clone(),
            lists: Arc::clone(&lists),
            payload_heads: Arc::clone(&payload_heads),
        };
        let q = Queue::with_clock(
            common::Wrapped(store),
            Arc::new(clock.clone()),
            ordered(order),
        );
        let s = q.engine().sweep(&SweepOptions::default()).await.unwrap();
        let made = lists.load(std::sync::atomic::Ordering::SeqCst);
        assert_eq!(s.lists, made, "{order:?} {size:?}: {s:?}");
        if size.0 < 500 {
            // Every payload of the page has its task (none is due): the
            // listing of the task folders strikes them all, none is HEADed.
            let heads = payload_heads.load(std::sync::atomic::Ordering::SeqCst);
            assert_eq!(heads, 0, "{order:?}: payloads HEADed");
        }
    }
}

#[tokio::test]
async fn a_task_folder_listing_refused_in_a_round_of_candidates_is_an_error_and_the_pass_still_completes()
 {
    let clock = ManualClock::at_epoch();
    let bucket = common::memory_store(&clock);
    // More than a page of payloads: under `any` the day's slices are one
    // item, its task folder listed to strike its candidates.
    payload_bucket((120, 0), 5, &bucket, &clock).await;
    let f = FaultyStore::new(bucket.clone());
    let refused = Fault::Fail(StoreError::Fatal("refused".into()));
    f.inject(Some(Op::List), "tasks/0/", 1, usize::MAX, refused);
    let q = Queue::with_clock(f, Arc::new(clock.clone()), ordered(ListOrder::Any));
    let s = q.engine().sweep(&SweepOptions::default()).await.unwrap();
    assert!(s.errors > 0, "{s:?}");
    assert_eq!(cursor(&bucket).await, (true, 0), "the payload cursor held");
}

/// A store that refuses (a 403) every LIST of `prefix` past its first
/// `allowed`: a cursor that lists one page for ever ends in an error, not
/// a test that never ends.
struct ListsAtMost {
    inner: MemoryStore,
    prefix: &'static str,
    allowed: u64,
    lists: std::sync::atomic::AtomicU64,
}

#[async_trait::async_trait]
impl common::Hooks for ListsAtMost {
    type Inner = MemoryStore;

    fn inner(&self) -> &MemoryStore {
        &self.inner
    }

    async fn before(&self, call: &common::Call<'_>) -> Result<(), StoreError> {
        if call.op == Op::List && call.key == self.prefix {
            let n = self.lists.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            if n >= self.allowed {
                return Err(StoreError::Fatal("listed once too often".into()));
            }
        }
        Ok(())
    }
}

#[tokio::test]
async fn a_task_cursor_goes_on_past_a_page_of_keys_that_name_no_task_instead_of_listing_it_again() {
    let clock = ManualClock::at_epoch();
    let bucket = common::memory_store(&clock);
    // An orphan of slice 05 whose id sorts after every task of its slice,
    // and after those tasks in `tasks/0/` more than a page of keys that
    // name no task (another tool's objects): the cursor that looks for the
    // orphan's task lists from the orphan's own task key, finds a page of
    // foreign keys, and must go on from the last of them.
    let orphan = uuid::uuid!("05ffffff-ffff-4fff-bfff-ffffffffffff");
    let orphan_key = format!("payloads/{orphan}/input.json");
    let foreign = (0..1_001).map(|i| format!("tasks/0/05~foreign-{i:04}"));
    for key in std::iter::once(orphan_key.clone()).chain(foreign) {
        let body = b"{}".to_vec().into();
        bucket.put(&key, body, PutMode::Create).await.unwrap();
    }
    // More than a page of payloads: the day's slices are merged with their
    // task folders (`LIST_ORDER=bytes`), one cursor a folder.
    payload_bucket((120, 0), 7, &bucket, &clock).await;
    let store = ListsAtMost {
        inner: bucket.clone(),
        prefix: "tasks/0/05",
        allowed: 20,
        lists: Default::default(),
    };
    let q = Queue::with_clock(
        common::Wrapped(store),
        Arc::new(clock.clone()),
        ordered(ListOrder::Bytes),
    );
    let s = q.engine().sweep(&SweepOptions::default()).await.unwrap();
    assert_eq!(s.errors, 0, "{s:?}");
    assert!(s.complete, "{s:?}");
    assert!(
        bucket.get(&orphan_key).await.is_err(),
        "the orphan past the foreign keys is judged and deleted"
    );
    assert_eq!(
        common::keys_under(&bucket, "tasks/0/05~").await.len(),
        1_001
    );
}
