//! One pass over concurrent invocations (issue 49): shares of the pass by
//! leases in the checkpoint, continuations handed on, a dead invocation's
//! share taken over after its lease, a schedule firing during a pass, and
//! the payload slices by the checkpoint's cursor at any schedule. In
//! memory, on the manual clock.

use super::*;

use std::sync::Mutex;

use async_trait::async_trait;
use idempotent_submit::SubmitError;
use idempotent_submit::testing::protocol::sweep::{PAYLOAD_SLICES, PayloadPlan};
use idempotent_submit::testing::protocol::{Continuation, HandOn, ShareOutcome};

/// The pass queue's stand-in: the continuations handed on, for the driver
/// to start an invocation for each.
#[derive(Clone, Default)]
pub(super) struct Inbox(Arc<Mutex<Vec<Continuation>>>);

#[async_trait]
impl HandOn for Inbox {
    async fn hand_on(&self, continuations: &[Continuation]) -> Result<(), String> {
        self.0.lock().unwrap().extend_from_slice(continuations);
        Ok(())
    }
}

impl Inbox {
    pub(super) fn take(&self) -> Vec<Continuation> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

/// What the invocations of one pass did, together.
#[derive(Default, Debug)]
struct Driven {
    invocations: usize,
    busy: usize,
    /// Invocations that took no share of the pass.
    idle: usize,
    /// Continuations handed on, over every invocation.
    handed: usize,
    sum: SweepSummary,
    /// The pass summaries (one, for a pass that ended).
    passes: Vec<SweepSummary>,
    peak: u64,
}

impl Driven {
    fn add(&mut self, o: ShareOutcome) {
        self.invocations += 1;
        self.busy += usize::from(o.summary.busy);
        self.idle += usize::from(o.idle);
        self.handed += o.handed_on.len();
        self.sum.add(&o.summary);
        self.passes.extend(o.pass);
        if let Some((_, peak)) = o.pass_shares {
            self.peak = peak;
        }
    }
}

/// Runs a scheduled invocation, then every continuation it and the others
/// hand on, all those handed on in a round at once, each invocation ending
/// after `budget` records (its stand-in deadline): until none is handed on.
async fn drive(q: &Queue, inbox: &Inbox, budget: usize) -> Driven {
    let opts = |c: Option<Continuation>| SweepOptions {
        max_records: Some(budget),
        continuation: c,
        ..Default::default()
    };
    drive_with(q, inbox, opts).await
}

/// As [`drive`], each invocation run with the options `opts` makes for its
/// continuation (`None`: the schedule's).
async fn drive_with(
    q: &Queue,
    inbox: &Inbox,
    opts: impl Fn(Option<Continuation>) -> SweepOptions,
) -> Driven {
    let mut d = Driven::default();
    let first = q.engine().sweep_share(&opts(None), Some(inbox)).await;
    d.add(first.unwrap());
    for round in 0.. {
        assert!(round < 500, "the pass never ends: {d:?}");
        let batch = inbox.take();
        if batch.is_empty() {
            break;
        }
        // Each invocation's options (its deadline) made as it starts.
        let opts = &opts;
        let runs = batch.into_iter().map(|c| async move {
            let opts = opts(Some(c));
            q.engine().sweep_share(&opts, Some(inbox)).await
        });
        for o in futures::future::join_all(runs).await {
            d.add(o.unwrap());
        }
    }
    d
}

#[tokio::test]
async fn reads_cut_short_by_the_deadline_are_handed_on_and_the_continuations_alone_end_the_pass() {
    for order in [ListOrder::Any, ListOrder::Bytes] {
        let (manual, bucket) = dense_bucket(&[("a", 40), ("b", 40), ("c", 40)]).await;
        manual.advance(Duration::days(31));
        let settings = idempotent_submit::Settings {
            list_order: order,
            pass_concurrency: 2,
            ..short_ttl_settings()
        };
        // A clock that moves a second at each reading: every invocation's
        // deadline, a minute on, comes in the middle of its reads.
        let clock = TickingClock(manual.clone());
        let q = Queue::with_clock(bucket.clone(), Arc::new(clock), settings);
        let inbox = Inbox::default();
        let d = drive_with(&q, &inbox, |c| SweepOptions {
            deadline: Some(manual.now() + Duration::seconds(60)),
            continuation: c,
            ..Default::default()
        })
        .await;
        // No range waited for the next scheduled run: the pass ended
        // through its continuations, every record deleted.
        assert_eq!(left_records(&bucket), 0, "{order:?}: {d:?}");
        assert_eq!(d.passes.len(), 1, "{order:?}: {d:?}");
        assert_eq!(d.sum.errors, 0, "{order:?}: {d:?}");
        assert!(d.invocations > 3, "{order:?}: {d:?}");
    }
}

/// Scopes enough that a pass by folders holds more ranges than it lists at
/// once (32): 40 of 25 expired records, and one of 600.
fn many_scopes() -> Vec<(String, usize)> {
    let mut s: Vec<(String, usize)> = (0..40).map(|i| (format!("s{i:02}"), 25)).collect();
    s.push(("big".into(), 600));
    s
}

/// A bucket of `named` scopes' records, every one past its TTL, and a queue
/// over it with `order` and `concurrency`: a round trip of a millisecond, so
/// that the invocations of a round interleave.
async fn expired_bucket_queue(
    named: &[(&str, usize)],
    order: ListOrder,
    concurrency: usize,
) -> (MemoryStore, Queue) {
    let (manual, bucket) = dense_bucket(named).await;
    manual.advance(Duration::days(31));
    let f = FaultyStore::new(bucket.clone());
    f.set_latency(std::time::Duration::from_millis(1));
    let settings = idempotent_submit::Settings {
        list_order: order,
        pass_concurrency: concurrency,
        ..short_ttl_settings()
    };
    (bucket, Queue::with_clock(f, Arc::new(manual), settings))
}

async fn fanned_out_pass(order: ListOrder, concurrency: usize) {
    let scopes = many_scopes();
    let named: Vec<(&str, usize)> = scopes.iter().map(|(s, n)| (s.as_str(), *n)).collect();
    let total: usize = named.iter().map(|(_, n)| n).sum();
    let (bucket, q) = expired_bucket_queue(&named, order, concurrency).await;
    let inbox = Inbox::default();
    let d = drive(&q, &inbox, 150).await;
    // Every record listed and deleted exactly once over all invocations.
    assert_eq!(d.sum.scanned as usize, total, "{order:?}: {d:?}");
    assert_eq!(d.sum.expired_deleted as usize, total, "{order:?}: {d:?}");
    assert_eq!((d.sum.reads as usize, d.sum.errors), (total, 0));
    assert!(bucket.keys().iter().all(|k| !k.starts_with("idempotency/")));
    // One pass, one summary: the invocations' counts merged.
    assert_eq!(d.passes.len(), 1, "{d:?}");
    let pass = &d.passes[0];
    assert_eq!(
        (pass.scanned, pass.expired_deleted, pass.lists),
        (d.sum.scanned, d.sum.expired_deleted, d.sum.lists),
        "{order:?}"
    );
    assert!(d.invocations > 6, "{order:?}: {d:?}");
    // By folders, the pool holds a range a scope and fills every slot; by
    // byte order, small scopes are found one after another and the pool
    // stays short (a large scope splits by its record hashes: more ranges).
    let fills = order == ListOrder::Any;
    assert!(
        d.peak <= concurrency as u64 && (!fills || d.peak > 1),
        "{order:?}: {} at once",
        d.peak
    );
}

#[tokio::test]
async fn a_pass_spread_over_concurrent_invocations_lists_each_record_once_and_ends_in_one_summary()
{
    for order in [ListOrder::Any, ListOrder::Bytes] {
        fanned_out_pass(order, 3).await;
    }
}

#[tokio::test]
async fn a_pass_never_holds_more_invocations_than_its_concurrency_allows() {
    fanned_out_pass(ListOrder::Any, 2).await;
}

/// Every continuation handed on finds work: `records` expired records in
/// `scopes` scopes, invocations that each stop after `budget` records (their
/// stand-in deadline), those handed on in a round all at once.
async fn no_idle_invocations(order: ListOrder, concurrency: usize, scopes: usize, budget: usize) {
    let named: Vec<(String, usize)> = (0..scopes).map(|i| (format!("s{i:02}"), 30)).collect();
    let named: Vec<(&str, usize)> = named.iter().map(|(s, n)| (s.as_str(), *n)).collect();
    let total = scopes * 30;
    let (bucket, q) = expired_bucket_queue(&named, order, concurrency).await;
    let inbox = Inbox::default();
    let d = drive(&q, &inbox, budget).await;
    let case = format!("{order:?}, {concurrency} at once, {budget} a share: {d:?}");
    assert_eq!(d.sum.scanned as usize, total, "{case}");
    assert_eq!(left_records(&bucket), 0, "{case}");
    assert_eq!(d.passes.len(), 1, "{case}");
    // No invocation did nothing: each continuation handed on started one
    // that took a share, the last one's included (the tail's).
    assert_eq!((d.idle, d.busy), (0, 0), "{case}");
    assert_eq!(d.handed, d.invocations - 1, "{case}");
    // Each stopped after its budget: at least as many as that takes.
    assert!(d.invocations > total / budget, "{case}");
    assert!(d.peak > 1 && d.peak <= concurrency as u64, "{case}");
}

#[tokio::test]
async fn a_pass_hands_on_only_for_work_nobody_holds_so_no_continuation_finds_nothing_to_do() {
    for (order, concurrency, scopes, budget) in [
        (ListOrder::Any, 3, 12, 40),
        (ListOrder::Any, 4, 5, 25),
        (ListOrder::Bytes, 3, 12, 40),
        (ListOrder::Bytes, 2, 6, 70),
    ] {
        no_idle_invocations(order, concurrency, scopes, budget).await;
    }
}

/// The pass queue's stand-in that, the first time it is handed on to, lets
/// the clock run past the invocation's deadline and has another invocation
/// write the checkpoint first: the share's release, past its deadline, has
/// to read the checkpoint again.
struct LateHandOn {
    inbox: Inbox,
    clock: ManualClock,
    bucket: MemoryStore,
    fired: std::sync::atomic::AtomicBool,
}

#[async_trait]
impl HandOn for LateHandOn {
    async fn hand_on(&self, continuations: &[Continuation]) -> Result<(), String> {
        if !self.fired.swap(true, std::sync::atomic::Ordering::SeqCst) {
            self.clock.advance(Duration::hours(2));
            let key = "sweeper/checkpoint.json";
            let o = self.bucket.get(key).await.unwrap();
            let mut body = o.body.to_vec();
            body.push(b'\n');
            let mode = PutMode::Update(o.meta.etag);
            self.bucket.put(key, body.into(), mode).await.unwrap();
        }
        self.inbox.hand_on(continuations).await
    }
}

/// `many_scopes` expired, by folders, 3 at once.
async fn many_scopes_world() -> (ManualClock, MemoryStore, idempotent_submit::Settings) {
    let scopes = many_scopes();
    let named: Vec<(&str, usize)> = scopes.iter().map(|(s, n)| (s.as_str(), *n)).collect();
    let (manual, bucket) = dense_bucket(&named).await;
    manual.advance(Duration::days(31));
    let settings = idempotent_submit::Settings {
        list_order: ListOrder::Any,
        pass_concurrency: 3,
        ..short_ttl_settings()
    };
    (manual, bucket, settings)
}

#[tokio::test]
async fn a_share_whose_checkpoint_write_runs_past_its_deadline_releases_and_hands_on_without_an_error()
 {
    let (manual, bucket, settings) = many_scopes_world().await;
    let q = Queue::with_clock(bucket.clone(), Arc::new(manual.clone()), settings);
    let late = LateHandOn {
        inbox: Inbox::default(),
        clock: manual.clone(),
        bucket: bucket.clone(),
        fired: Default::default(),
    };
    let opts = SweepOptions {
        deadline: Some(manual.now() + Duration::hours(1)),
        ..Default::default()
    };
    // The share fans the pass out (a range a folder, 41), claims its part
    // and invites two continuations; then its deadline has passed and its
    // release meets a 412.
    let o = q.engine().sweep_share(&opts, Some(&late)).await.unwrap();
    assert!(!o.summary.complete && !o.idle && !o.hand_on_failed, "{o:?}");
    assert_eq!(o.summary.scanned, 0, "nothing listed past the deadline");
    let cp = checkpoint(&bucket).await;
    // Its share released: every range back in the pool, and one more
    // continuation invited for the slot it left.
    assert!(cp.get("shares").is_none(), "{cp}");
    assert_eq!(cp["ranges"].as_array().unwrap().len(), 41, "{cp}");
    assert_eq!(cp["invites"].as_array().unwrap().len(), 3, "{cp}");
    assert_eq!((o.handed_on.len(), late.inbox.take().len()), (3, 3));
}

#[tokio::test]
async fn a_share_whose_checkpoint_writes_keep_failing_is_an_error_its_message_is_handed_back_for() {
    let (manual, bucket, settings) = many_scopes_world().await;
    let f = FaultyStore::new(bucket.clone());
    let unavailable = Fault::Fail(StoreError::Unavailable("503".into()));
    f.inject(Some(Op::PutUpdate), "sweeper/", 1, usize::MAX, unavailable);
    let q = Queue::with_clock(f, Arc::new(manual.clone()), settings);
    let opts = SweepOptions {
        deadline: Some(manual.now() + Duration::hours(1)),
        ..Default::default()
    };
    let e = q
        .engine()
        .sweep_share(&opts, Some(&Inbox::default()))
        .await
        .unwrap_err();
    assert!(e.is_retryable(), "{e:?}");
    assert!(!matches!(e, SubmitError::DeadlineExceeded), "{e:?}");
}

/// A bucket of expired records under `scopes` (one a folder), a month on.
async fn expired_world(concurrency: usize) -> (ManualClock, MemoryStore, Queue, usize) {
    let scopes: Vec<(&str, usize)> = vec![("a", 30), ("b", 30), ("c", 30)];
    let total = 90;
    let (manual, bucket) = dense_bucket(&scopes).await;
    manual.advance(Duration::days(31));
    let settings = idempotent_submit::Settings {
        list_order: ListOrder::Any,
        pass_concurrency: concurrency,
        ..short_ttl_settings()
    };
    let q = Queue::with_clock(bucket.clone(), Arc::new(manual.clone()), settings);
    (manual, bucket, q, total)
}

#[tokio::test]
async fn a_dead_invocations_share_is_taken_over_once_its_lease_runs_out_and_the_pass_ends() {
    let (manual, bucket, q, total) = expired_world(1).await;
    // An invocation claims the pass and dies before its release lands.
    let f = FaultyStore::new(bucket.clone());
    f.inject(Some(Op::PutUpdate), "sweeper/", 1, 1, Fault::CrashBefore);
    let dying = Queue::with_clock(f, Arc::new(manual.clone()), q.settings().clone());
    let inbox = Inbox::default();
    let budget = SweepOptions {
        max_records: Some(40),
        ..Default::default()
    };
    let died = dying.engine().sweep_share(&budget, Some(&inbox)).await;
    assert!(died.is_err(), "{died:?}");
    let deleted_by_the_dead = total - left_records(&bucket);
    assert!(deleted_by_the_dead > 0);
    // Its lease: 15 minutes (no deadline) and an operation. Until it runs
    // out, a run (a schedule, or its own redelivered continuation) finds
    // the one slot held.
    let lease = Duration::minutes(15) + q.settings().operation_timeout;
    manual.advance(lease - Duration::seconds(1));
    let busy = q
        .engine()
        .sweep_share(&SweepOptions::default(), Some(&inbox))
        .await;
    assert!(busy.unwrap().summary.busy);
    manual.advance(Duration::seconds(1));
    let d = drive(&q, &inbox, 1000).await;
    assert_eq!(left_records(&bucket), 0);
    assert_eq!(d.passes.len(), 1, "{d:?}");
    // The dead share's counts never reached the pass: its ranges were
    // listed again, and what it had deleted was gone.
    let pass = &d.passes[0];
    assert_eq!(pass.expired_deleted as usize, total - deleted_by_the_dead);
    assert_eq!(pass.scanned as usize, total - deleted_by_the_dead);
}

fn left_records(bucket: &MemoryStore) -> usize {
    bucket
        .keys()
        .iter()
        .filter(|k| k.starts_with("idempotency/"))
        .count()
}

async fn checkpoint(bucket: &MemoryStore) -> serde_json::Value {
    serde_json::from_slice(&bucket.get("sweeper/checkpoint.json").await.unwrap().body).unwrap()
}

#[tokio::test]
async fn a_schedule_firing_during_a_pass_joins_it_and_never_opens_a_second_one() {
    let (manual, bucket, q, total) = expired_world(2).await;
    let inbox = Inbox::default();
    let budget = |n| SweepOptions {
        max_records: Some(n),
        ..Default::default()
    };
    // A first invocation stops after 20 records, handing on.
    let first = q
        .engine()
        .sweep_share(&budget(20), Some(&inbox))
        .await
        .unwrap();
    assert!(!first.summary.complete && !first.handed_on.is_empty());
    let pass = checkpoint(&bucket).await["pass"].clone();
    // The schedule fires a minute later (an hourly schedule, two runs in a
    // minute): it joins the unfinished pass, whose slots are held by the
    // continuations handed on (not yet come): it takes nothing, and writes
    // nothing.
    manual.advance(Duration::minutes(1));
    let before = checkpoint(&bucket).await;
    let joined = q
        .engine()
        .sweep_share(&budget(20), Some(&inbox))
        .await
        .unwrap();
    assert!(joined.summary.resumed && joined.idle, "{joined:?}");
    assert!(joined.handed_on.is_empty(), "{joined:?}");
    assert_eq!(
        checkpoint(&bucket).await,
        before,
        "the same pass, untouched"
    );
    // One more schedule, still during the pass, and the continuations, at
    // once, end it.
    let mut d = Driven::default();
    let handed: Vec<Option<Continuation>> = inbox.take().into_iter().map(Some).collect();
    let runs = std::iter::once(None).chain(handed).map(|c| {
        let opts = SweepOptions {
            continuation: c,
            ..Default::default()
        };
        let q = q.clone();
        async move { q.engine().sweep_share(&opts, None).await }
    });
    for o in futures::future::join_all(runs).await {
        d.add(o.unwrap());
    }
    assert_eq!(left_records(&bucket), 0);
    assert_eq!(d.passes.len(), 1, "{d:?}");
    let cp = checkpoint(&bucket).await;
    assert_eq!(
        (cp["pass"].clone(), cp["complete"].clone()),
        (pass.clone(), json!(true))
    );
    let sum = first.summary.scanned + d.sum.scanned;
    assert_eq!(sum as usize, total, "no record listed twice");
    assert_eq!(
        d.passes[0].scanned as usize, total,
        "the pass's one summary"
    );
    // A continuation of the ended pass finds it over and does nothing.
    let late = SweepOptions {
        continuation: serde_json::from_value(json!({"sweep_pass": pass})).ok(),
        ..Default::default()
    };
    let o = q.engine().sweep_share(&late, Some(&inbox)).await.unwrap();
    assert_eq!((o.summary.scanned, o.summary.busy), (0, false));
    assert_eq!(
        checkpoint(&bucket).await["pass"],
        cp["pass"],
        "no pass opened"
    );
}

/// Orphan payloads in every slice, a month old; then passes `gaps` apart
/// (after the first): each deletes exactly the orphans of the slices its
/// cursor takes (their ages are past the HEADs' reach), and the cursor in
/// the checkpoint moves on by the plan.
async fn slices_by_cursor(gaps: &[Duration]) {
    let w = World::new();
    let mut orphans = Vec::new();
    for slice in 0..PAYLOAD_SLICES {
        orphans.push(payload_of_slice(&w.bucket, slice).await);
    }
    w.clock.advance(Duration::days(40));
    let (mut cursor, mut last) = (0, None);
    for (i, gap) in std::iter::once(Duration::zero())
        .chain(gaps.iter().copied())
        .enumerate()
    {
        w.clock.advance(gap);
        let plan = PayloadPlan::after(cursor, last, w.clock.now());
        let s = w.sweep(false).await;
        assert!(s.complete, "{s:?}");
        assert_eq!(
            s.payloads_deleted,
            plan.slices.len() as u64,
            "pass {i} after {gap}: {plan:?}"
        );
        let left = w.keys("payloads/");
        for (slice, key) in orphans.iter().enumerate() {
            let taken = (slice as u32) < plan.slices.end;
            assert_eq!(!left.contains(key), taken, "slice {slice} after pass {i}");
        }
        (cursor, last) = (plan.next_slice(), Some(w.clock.now()));
        let cp = w.json("sweeper/checkpoint.json").await;
        assert_eq!(cp["payload_slice"], json!(cursor));
    }
}

#[tokio::test]
async fn the_payload_slices_follow_the_cursor_hourly_daily_after_missed_days_and_twice_a_minute() {
    slices_by_cursor(&[
        Duration::hours(1),
        Duration::hours(1),
        Duration::days(1),
        Duration::seconds(30),
        Duration::days(3),
        Duration::days(1),
    ])
    .await;
}
