//! What the mutation rerun of `sweep/` (issue 51) found no test for: each
//! test here fails with a mutant the suite let through (docs/testing.md's
//! rows name them). In memory, on the manual clock.

use super::*;

use async_trait::async_trait;
use idempotent_submit::SubmitError;
use idempotent_submit::testing::protocol::{Continuation, HandOn, ShareOutcome};

use crate::common::{Call, Hooks, Wrapped};

const CHECKPOINT: &str = "sweeper/checkpoint.json";

/// A store whose GETs of the checkpoint take `slow` of the clock each and
/// then fail (a 503): S3 too slow to answer before a deadline.
struct SlowCheckpoint {
    inner: MemoryStore,
    clock: ManualClock,
    slow: Duration,
}

#[async_trait]
impl Hooks for SlowCheckpoint {
    type Inner = MemoryStore;

    fn inner(&self) -> &MemoryStore {
        &self.inner
    }
    async fn before(&self, call: &Call<'_>) -> Result<(), StoreError> {
        if call.op == Op::Get && call.key == CHECKPOINT {
            self.clock.advance(self.slow);
            return Err(StoreError::Unavailable("503".into()));
        }
        Ok(())
    }
}

/// An empty bucket's queue with `settings`, its store's checkpoint GETs
/// as `slow` says (zero: as the store answers), and the bucket and clock.
fn queue(
    settings: idempotent_submit::Settings,
    slow: Option<Duration>,
) -> (Queue, MemoryStore, ManualClock) {
    let clock = ManualClock::at_epoch();
    let bucket = common::memory_store(&clock);
    let q = match slow {
        Some(slow) => {
            let store = Wrapped(SlowCheckpoint {
                inner: bucket.clone(),
                clock: clock.clone(),
                slow,
            });
            Queue::with_clock(store, Arc::new(clock.clone()), settings)
        }
        None => Queue::with_clock(bucket.clone(), Arc::new(clock.clone()), settings),
    };
    (q, bucket, clock)
}

/// A bucket of 40 scopes of two records each, and its clock 31 days on:
/// every record past its TTL, more scopes than a share keeps (32).
async fn forty_scopes_past_their_ttl() -> (ManualClock, MemoryStore) {
    let scopes: Vec<String> = (0..40).map(|i| format!("s{i:02}")).collect();
    let named: Vec<(&str, usize)> = scopes.iter().map(|s| (s.as_str(), 2)).collect();
    let (manual, bucket) = dense_bucket(&named).await;
    manual.advance(Duration::days(31));
    (manual, bucket)
}

/// The short TTL's settings under `order`, with `concurrency` slots.
fn settings(order: ListOrder, concurrency: usize) -> idempotent_submit::Settings {
    idempotent_submit::Settings {
        list_order: order,
        pass_concurrency: concurrency,
        ..short_ttl_settings()
    }
}

/// The pass queue's stand-in: what was handed on.
#[derive(Default)]
struct Sent(std::sync::Mutex<Vec<Continuation>>);

#[async_trait]
impl HandOn for Sent {
    async fn hand_on(&self, continuations: &[Continuation]) -> Result<(), String> {
        self.0.lock().unwrap().extend_from_slice(continuations);
        Ok(())
    }
}

async fn share(q: &Queue, opts: SweepOptions) -> Result<ShareOutcome, SubmitError> {
    q.engine().sweep_share(&opts, None).await
}

/// `share.rs` `sweep_share`: the summary's `dry_run` (the field, or the
/// whole summary, left at its default).
#[tokio::test]
async fn a_dry_run_share_says_in_its_summary_that_it_was_one_and_writes_nothing() {
    let (q, bucket, _) = queue(common::settings(), None);
    let o = share(
        &q,
        SweepOptions {
            dry_run: true,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert!(o.summary.dry_run, "{o:?}");
    assert!(bucket.keys().is_empty(), "{:?}", bucket.keys());
    let real = share(&q, SweepOptions::default()).await.unwrap();
    assert!(!real.summary.dry_run, "{real:?}");
}

/// `share.rs` `sweep_share`: `idle: true` until the first claim (an
/// invocation begun past its deadline claims nothing).
#[tokio::test]
async fn a_share_begun_past_its_deadline_is_idle_and_reads_and_writes_nothing() {
    let (q, bucket, clock) = queue(common::settings(), None);
    let o = share(
        &q,
        SweepOptions {
            deadline: Some(clock.now()),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert!(o.idle, "{o:?}");
    assert_eq!((o.summary.busy, o.summary.lists), (false, 0), "{o:?}");
    assert!(bucket.keys().is_empty(), "{:?}", bucket.keys());
}

/// `share.rs` `sweep_share`: the loop's `!past && !budget_spent` (`||`
/// claims with a budget spent before the first claim).
#[tokio::test]
async fn a_share_bounded_to_no_records_claims_nothing() {
    let (q, bucket, _) = queue(common::settings(), None);
    let o = share(
        &q,
        SweepOptions {
            max_records: Some(0),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert!(o.idle, "{o:?}");
    assert!(bucket.keys().is_empty(), "{:?}", bucket.keys());
}

/// `share.rs` `sweep_share`: a claim cut short by the invocation's own
/// deadline ends the share without an error (the guard `self.past(opts)`
/// made `false`).
#[tokio::test]
async fn a_share_whose_deadline_comes_while_it_reads_the_checkpoint_ends_without_an_error() {
    let (q, bucket, clock) = queue(short_ttl_settings(), Some(Duration::minutes(2)));
    let o = share(
        &q,
        SweepOptions {
            deadline: Some(clock.now() + Duration::minutes(1)),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert!(o.idle, "{o:?}");
    assert!(bucket.keys().is_empty(), "{:?}", bucket.keys());
}

/// `share.rs` `sweep_share`: a claim whose read outlasts one operation's
/// time, the invocation's deadline far off, is the store's failure: an
/// error, so that the message comes again (the guard made `true` ends it
/// as if its deadline had come).
#[tokio::test]
async fn a_share_whose_checkpoint_read_outlasts_its_operation_time_is_an_error() {
    let settings = idempotent_submit::Settings {
        operation_timeout: Duration::minutes(1),
        ..short_ttl_settings()
    };
    let (q, bucket, _) = queue(settings, Some(Duration::minutes(2)));
    let o = share(&q, SweepOptions::default()).await;
    assert!(matches!(o, Err(SubmitError::DeadlineExceeded)), "{o:?}");
    assert!(bucket.keys().is_empty(), "{:?}", bucket.keys());
}

/// `share.rs` `sweep_share`: `fan_out` only for an invocation that can hand
/// on (`alone && pool == 0 && hand_on.is_some() && concurrency > 1`; the
/// first `&&` or the last made `||` fans out one that cannot). Without a
/// hand-on an invocation keeps what it holds: it lists every scope it
/// found in the share that found them, where fanning out gives them back
/// and claims them again, share after share.
#[tokio::test]
async fn a_pass_without_a_hand_on_lists_the_scopes_it_found_in_the_share_that_found_them() {
    let (manual, bucket) = forty_scopes_past_their_ttl().await;
    let settings = settings(ListOrder::Any, 3);
    let q = Queue::with_clock(bucket.clone(), Arc::new(manual), settings);
    let o = share(&q, SweepOptions::default()).await.unwrap();
    assert_eq!(o.summary.expired_deleted, 80, "{o:?}");
    let (shares, _) = o.pass_shares.expect("the pass ended in this invocation");
    // One share of the records, one of the tail.
    assert_eq!(shares, 2, "{o:?}");
}

/// A store whose `n`th write of the checkpoint moves the clock on by
/// `jump` once it has landed: the invocation's deadline comes between its
/// release and its next claim.
struct LateAfterWrite {
    inner: MemoryStore,
    clock: ManualClock,
    n: usize,
    jump: Duration,
    writes: std::sync::atomic::AtomicUsize,
}

#[async_trait]
impl Hooks for LateAfterWrite {
    type Inner = MemoryStore;

    fn inner(&self) -> &MemoryStore {
        &self.inner
    }
    async fn after(&self, call: &Call<'_>, ok: bool) {
        let put = matches!(call.op, Op::Put | Op::PutCreate | Op::PutUpdate);
        if ok && put && call.key == CHECKPOINT {
            let seen = self
                .writes
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
                + 1;
            if seen == self.n {
                self.clock.advance(self.jump);
            }
        }
    }
}

/// `share.rs` `invite_rest`: `wanted > 0` (`< 0` never invites), and the
/// write of its invitations. An
/// invocation that released its share to claim again, and found its
/// deadline come before it could, hands on what is left in one more write.
#[tokio::test]
async fn a_share_whose_deadline_comes_after_its_release_hands_on_the_rest() {
    let (manual, bucket) = forty_scopes_past_their_ttl().await;
    let settings = settings(ListOrder::Any, 2);
    // The claim is the first write, the release that gives back what the
    // fan-out left (more than 32 scopes) the second.
    let store = Wrapped(LateAfterWrite {
        inner: bucket.clone(),
        clock: manual.clone(),
        n: 2,
        jump: Duration::hours(1),
        writes: Default::default(),
    });
    let q = Queue::with_clock(store, Arc::new(manual.clone()), settings);
    let sent = Sent::default();
    let opts = SweepOptions {
        deadline: Some(manual.now() + Duration::minutes(30)),
        ..Default::default()
    };
    let o = q.engine().sweep_share(&opts, Some(&sent)).await.unwrap();
    assert!(!o.summary.complete, "{o:?}");
    assert!(!o.handed_on.is_empty(), "{o:?}");
    assert_eq!(sent.0.lock().unwrap().len(), o.handed_on.len());
    // In the same write as the invitations each continuation takes up
    // (`invite_rest`'s `!invited.is_empty()`: without the `!` none is
    // written).
    let cp: serde_json::Value =
        serde_json::from_slice(&bucket.get(CHECKPOINT).await.unwrap().body).unwrap();
    let invites = cp["invites"].as_array().map_or(0, Vec::len);
    assert_eq!(invites, o.handed_on.len(), "{cp}");
}

/// `share.rs` `sweep_share`: `fan_out` only with another slot to hand on
/// to (`concurrency > 1`; `>=` fans out at a concurrency of 1). An
/// invocation alone in a pass of one slot keeps what it holds, as one
/// without a hand-on does, and hands nothing on.
#[tokio::test]
async fn a_pass_of_one_slot_lists_the_scopes_it_found_in_the_share_that_found_them() {
    let (manual, bucket) = forty_scopes_past_their_ttl().await;
    let settings = settings(ListOrder::Any, 1);
    let q = Queue::with_clock(bucket.clone(), Arc::new(manual), settings);
    let sent = Sent::default();
    let o = q
        .engine()
        .sweep_share(&SweepOptions::default(), Some(&sent))
        .await
        .unwrap();
    assert_eq!(o.summary.expired_deleted, 80, "{o:?}");
    assert!(o.handed_on.is_empty(), "{o:?}");
    // One share of the records, one of the tail.
    assert_eq!(o.pass_shares.map(|(n, _)| n), Some(2), "{o:?}");
}

/// The pass queue's stand-in that refuses every batch (SQS down): how many
/// it refused.
#[derive(Default)]
struct Refused(std::sync::atomic::AtomicU64);

#[async_trait]
impl HandOn for Refused {
    async fn hand_on(&self, _: &[Continuation]) -> Result<(), String> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Err("503".into())
    }
}

/// `share.rs` `send_on`: a hand-on that fails is one error of the share's
/// summary each time (`+= 1`; `*=` counts none, `-=` overflows), and the
/// share says it, so that its message is handed back. No test's hand-on
/// failed before.
#[tokio::test]
async fn a_share_whose_hand_on_fails_counts_each_failed_send_as_an_error_and_says_so() {
    let (manual, bucket) = forty_scopes_past_their_ttl().await;
    let settings = settings(ListOrder::Any, 2);
    let q = Queue::with_clock(bucket.clone(), Arc::new(manual), settings);
    let refused = Refused::default();
    let o = q
        .engine()
        .sweep_share(&SweepOptions::default(), Some(&refused))
        .await
        .unwrap();
    let sends = refused.0.load(std::sync::atomic::Ordering::SeqCst);
    assert!(sends > 0, "the share invited no continuation: {o:?}");
    assert!(o.hand_on_failed, "{o:?}");
    assert_eq!(o.summary.errors, sends, "{o:?}");
}

/// The kinds of the ranges the checkpoint in `bucket` holds, in its pool
/// and for later.
async fn range_kinds(bucket: &MemoryStore) -> Vec<String> {
    let body = bucket.get(CHECKPOINT).await.unwrap().body;
    let cp: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let all = ["ranges", "later"].map(|k| cp[k].as_array().cloned().unwrap_or_default());
    all.concat()
        .iter()
        .map(|r| r["kind"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// `share.rs` `refit_ranges` (made `()`): a pass begun under
/// `LIST_ORDER=bytes` and joined under `any` begins its ranges again as
/// `any` lists them (by folders and the store's tokens), keeping its
/// window, rather than going on with ranges that rely on the store's byte
/// order. No test changed `LIST_ORDER` during a pass before.
#[tokio::test]
async fn a_pass_joined_under_the_other_list_order_begins_its_ranges_again_as_that_order_lists() {
    let (manual, bucket) = forty_scopes_past_their_ttl().await;
    let under = |order| settings(order, 1);
    let clock = Arc::new(manual.clone());
    let bytes = Queue::with_clock(bucket.clone(), clock.clone(), under(ListOrder::Bytes));
    let any = Queue::with_clock(bucket.clone(), clock, under(ListOrder::Any));
    let budget = |n| SweepOptions {
        max_records: Some(n),
        ..Default::default()
    };
    let first = share(&bytes, budget(10)).await.unwrap();
    assert!(!first.summary.complete, "{first:?}");
    let kinds = range_kinds(&bucket).await;
    assert!(kinds.iter().any(|k| k == "keys"), "{kinds:?}");
    // Joined under `any`: nothing of `bytes`' ranges is left once it has
    // claimed (its own share ended by its budget).
    let joined = share(&any, budget(1)).await.unwrap();
    assert!(
        joined.summary.resumed && !joined.summary.complete,
        "{joined:?}"
    );
    let kinds = range_kinds(&bucket).await;
    assert!(!kinds.is_empty(), "{joined:?}");
    assert!(kinds.iter().all(|k| k == "dirs" || k == "dir"), "{kinds:?}");
    // And the pass ends under `any` with every expired record deleted once.
    let rest = share(&any, SweepOptions::default()).await.unwrap();
    assert!(rest.summary.complete, "{rest:?}");
    let deleted = [&first, &joined, &rest].map(|o| o.summary.expired_deleted);
    assert_eq!(deleted.iter().sum::<u64>(), 80, "{deleted:?}");
}

/// The pass the checkpoint in `bucket` holds (its instant), and the
/// checkpoint's bytes.
async fn pass_in(bucket: &MemoryStore) -> (DateTime<Utc>, bytes::Bytes) {
    let body = bucket.get(CHECKPOINT).await.unwrap().body;
    let cp: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let pass = cp["pass"].as_str().expect("a pass").parse().unwrap();
    (pass, body)
}

/// `share.rs` `claim_or_open`: a continuation joins only the pass it names
/// (the guard `c.pass != k.sweep_pass || c.complete`; with `&&` one whose
/// pass has ended joins whatever pass is open). A continuation received
/// after its pass ended and the next one began does nothing: it claims
/// nothing of the next pass and writes nothing.
#[tokio::test]
async fn a_continuation_of_an_ended_pass_claims_nothing_of_the_next_one() {
    let scopes: Vec<String> = (0..4).map(|i| format!("s{i}")).collect();
    let named: Vec<(&str, usize)> = scopes.iter().map(|s| (s.as_str(), 5)).collect();
    // Records that live through both passes: each pass lists all 20.
    let (manual, bucket) = dense_bucket_expiring(&named, "2030-01-01T00:00:00Z").await;
    let q = Queue::with_clock(
        bucket.clone(),
        Arc::new(manual.clone()),
        settings(ListOrder::Any, 2),
    );
    let first = share(&q, SweepOptions::default()).await.unwrap();
    assert!(first.summary.complete, "{first:?}");
    let (ended, _) = pass_in(&bucket).await;
    manual.advance(Duration::days(1));
    let next = share(
        &q,
        SweepOptions {
            max_records: Some(1),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert!(!next.summary.complete, "{next:?}");
    let (open, before) = pass_in(&bucket).await;
    assert_ne!(open, ended);
    let late = SweepOptions {
        continuation: Some(Continuation {
            sweep_pass: ended,
            invite: None,
        }),
        ..Default::default()
    };
    let o = share(&q, late).await.unwrap();
    assert_eq!(o.summary.scanned, 0, "{o:?}");
    assert_eq!(pass_in(&bucket).await, (open, before));
}

/// `folders.rs` `list_scope_dirs` and `list_dir` (and every other place a
/// pass lists): a pass counts each LIST it made in its summary's `lists`,
/// and each record listed in `scanned`, under either order.
#[tokio::test]
async fn a_pass_counts_each_list_it_made_and_each_record_it_listed_under_either_order() {
    for order in [ListOrder::Bytes, ListOrder::Any] {
        let (clock, bucket) = dense_bucket(&[("a", 1_500), ("b", 20)]).await;
        let watched = FaultyStore::new(bucket.clone());
        let settings = idempotent_submit::Settings {
            list_order: order,
            ..short_ttl_settings()
        };
        let q = Queue::with_clock(watched.clone(), Arc::new(clock.clone()), settings);
        let o = share(&q, SweepOptions::default()).await.unwrap();
        let pass = o.pass.expect("the pass ended in its one invocation");
        let lists = watched.calls().iter().filter(|c| c.op == Op::List).count();
        assert!(lists > 3, "{order:?}: {lists}");
        assert_eq!(pass.lists, lists as u64, "{order:?}: {pass:?}");
        // And each record it listed, once.
        assert_eq!(pass.scanned, 1_520, "{order:?}: {pass:?}");
    }
}

/// A store whose LISTs of exactly `prefix` (a folder's records, or the
/// scopes' folders) by a token fail with `error` the first `times` times;
/// it counts every LIST of `prefix`.
struct TokenFails {
    inner: MemoryStore,
    prefix: &'static str,
    error: StoreError,
    times: Arc<std::sync::atomic::AtomicUsize>,
    listed: Arc<std::sync::atomic::AtomicUsize>,
}

impl TokenFails {
    fn answer(&self, prefix: &str, by_token: bool) -> Result<(), StoreError> {
        use std::sync::atomic::Ordering::SeqCst;
        if prefix != self.prefix {
            return Ok(());
        }
        self.listed.fetch_add(1, SeqCst);
        let fail = by_token
            && self
                .times
                .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
                .is_ok();
        if fail {
            Err(self.error.clone())
        } else {
            Ok(())
        }
    }
}

#[async_trait]
impl Hooks for TokenFails {
    type Inner = MemoryStore;

    fn inner(&self) -> &MemoryStore {
        &self.inner
    }
    async fn list_dirs(
        &self,
        prefix: &str,
        page: Option<String>,
    ) -> Result<idempotent_submit::store::DirPage, StoreError> {
        self.answer(prefix, page.is_some())?;
        self.inner.list_dirs(prefix, page).await
    }
    async fn list(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        page: Option<String>,
        limit: usize,
    ) -> Result<idempotent_submit::store::ListPage, StoreError> {
        self.answer(prefix, page.is_some())?;
        self.inner.list(prefix, start_after, page, limit).await
    }
}

/// A pass under `LIST_ORDER=any` over `scopes`, whose LISTs of `prefix` by
/// a token fail `times` times with `error`, run until it ends: how many
/// LISTs of `prefix` it made, and how many records it listed. Its first
/// run counts the failure.
async fn lists_after_a_token_failure(
    scopes: &[(&str, usize)],
    prefix: &'static str,
    times: usize,
    error: StoreError,
) -> (usize, u64) {
    let (clock, bucket) = dense_bucket(scopes).await;
    let listed: Arc<std::sync::atomic::AtomicUsize> = Arc::default();
    let hooks = TokenFails {
        inner: bucket.clone(),
        prefix,
        error,
        times: Arc::new(times.into()),
        listed: listed.clone(),
    };
    let settings = idempotent_submit::Settings {
        list_order: ListOrder::Any,
        ..short_ttl_settings()
    };
    let store = Wrapped(hooks);
    let q = Queue::with_clock(store, Arc::new(clock.clone()), settings);
    let mut runs = vec![share(&q, SweepOptions::default()).await.unwrap()];
    assert_eq!(runs[0].summary.errors, 1, "{prefix}: {runs:?}");
    // The next scheduled runs, until the pass ends.
    while runs.last().is_some_and(|o| o.pass.is_none()) {
        assert!(runs.len() < 5, "{prefix}: the pass never ends: {runs:?}");
        runs.push(share(&q, SweepOptions::default()).await.unwrap());
    }
    let pass = runs.last().and_then(|o| o.pass.clone()).unwrap();
    let listed = listed.load(std::sync::atomic::Ordering::SeqCst);
    (listed, pass.scanned)
}

/// 1,001 scopes of a record each: two pages of `idempotency/`'s folders.
fn many_scopes() -> Vec<String> {
    (0..1_001).map(|i| format!("s{i:04}")).collect()
}

/// `folders.rs` `refused_or_failed`: under `LIST_ORDER=any` a page listed
/// from a kept token that fails for now (a 503 on every attempt), a
/// folder's or the scopes' folders', waits for the next run with its
/// token; only a token the store refuses for good begins the listing
/// again. The next run lists the second page alone, not the first again.
#[tokio::test]
async fn a_page_that_fails_for_now_waits_with_its_token_and_is_not_listed_from_the_beginning_again()
{
    let attempts = short_ttl_settings().retry.max_attempts as usize;
    let unavailable = || StoreError::Unavailable("503".into());
    let folder = [("a", 1_500), ("b", 20)];
    let got = lists_after_a_token_failure(&folder, "idempotency/a/", attempts, unavailable()).await;
    // The first page, the failed attempts, then the second page once; each
    // record listed once.
    assert_eq!(got, (1 + attempts + 1, 1_520), "a folder");
    let names = many_scopes();
    let scopes: Vec<(&str, usize)> = names.iter().map(|s| (s.as_str(), 1)).collect();
    let got = lists_after_a_token_failure(&scopes, "idempotency/", attempts, unavailable()).await;
    assert_eq!(got, (1 + attempts + 1, 1_001), "the scopes");
}

/// `folders.rs` `refused_or_failed`: a page listed from a kept token that
/// the store refuses for good (a 403: it keeps tokens only so long),
/// a folder's or the scopes' folders', begins that listing again from its
/// beginning, counted as an error, rather than waiting to be refused again.
#[tokio::test]
async fn a_page_whose_token_the_store_refuses_begins_its_listing_again() {
    let refused = || StoreError::Fatal("403 expired token".into());
    let folder = [("a", 1_500), ("b", 20)];
    let got = lists_after_a_token_failure(&folder, "idempotency/a/", 1, refused()).await;
    // The first page, the refused one, then both pages again: the first
    // page's records listed twice.
    assert_eq!(got, (1 + 1 + 2, 1_520 + 1_000), "a folder");
    let names = many_scopes();
    let scopes: Vec<(&str, usize)> = names.iter().map(|s| (s.as_str(), 1)).collect();
    let got = lists_after_a_token_failure(&scopes, "idempotency/", 1, refused()).await;
    assert_eq!(got.0, 1 + 1 + 2, "the scopes");
}

/// `markers.rs` `scan_markers`, `judge_folder` and `judge_markers`: a
/// backlog of the ready index (more than a page, so judged folder by
/// folder) whose one marker cannot be judged (its task's GET refused):
/// the failure is counted, every LIST is, and the scan is not complete,
/// so the next pass judges that marker again (its age crossed this
/// pass's window, and the next window begins where an incomplete scan's
/// did).
#[tokio::test]
async fn a_backlog_scan_with_a_marker_it_could_not_judge_is_incomplete_and_the_next_pass_judges_it()
{
    let clock = ManualClock::at_epoch();
    let bucket = common::memory_store(&clock);
    let mut markers = vec![];
    for _ in 0..1_100 {
        markers.push(task_with_marker(&bucket, "completed", clock.now(), true).await);
    }
    clock.advance(Duration::days(1));
    // The first marker's task: its GET refused once.
    let id = markers[0].rsplit('/').next().unwrap().to_owned();
    let task = format!("tasks/{}/{id}.json", &id[..1]);
    let f = FaultyStore::new(bucket.clone());
    f.inject(
        Some(Op::Get),
        &task,
        1,
        1,
        Fault::Fail(StoreError::Fatal("403".into())),
    );
    let q = Queue::with_clock(f.clone(), Arc::new(clock.clone()), common::settings());
    let first = q.engine().sweep(&SweepOptions::default()).await.unwrap();
    assert_eq!(
        (first.markers_deleted, first.errors),
        (1_099, 1),
        "{first:?}"
    );
    let lists = f.calls().iter().filter(|c| c.op == Op::List).count();
    assert_eq!(first.lists, lists as u64, "{first:?}");
    let left = |k: &String| bucket.keys().contains(k);
    assert!(left(&markers[0]));
    clock.advance(Duration::days(1));
    let next = q.engine().sweep(&SweepOptions::default()).await.unwrap();
    assert_eq!((next.markers_deleted, next.errors), (1, 0), "{next:?}");
    assert!(!left(&markers[0]));
}
