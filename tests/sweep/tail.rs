//! The pass's tail spread over invocations (issue 49, docs/decisions.md,
//! "The pass's tail at 10^9"): a payload check longer than an invocation
//! goes on in the next ones from each item's place, every slice of the day's
//! plan is checked once, the payload cursor moves once, when the whole
//! check is done, and an invocation that dies in the tail loses nothing.
//! In memory on the manual clock, each request a second of it; and on moto.

use super::*;

use std::sync::Mutex;

use super::real::{Real, real_store};
use super::share::Inbox;
use idempotent_submit::Clock as _;
use idempotent_submit::testing::protocol::sweep::PayloadPlan;
use idempotent_submit::testing::protocol::{Continuation, ShareOutcome};

/// A listing as the store was asked for it: prefix, `StartAfter`, token.
pub(super) type Listed = (String, Option<String>, Option<String>);

/// A store each of whose requests takes [`STEP_MS`] of tokio's paused
/// clock (requests sent together overlap, as S3's do), logging its
/// listings.
#[derive(Clone)]
struct SecondPerCall {
    inner: MemoryStore,
    listed: Arc<Mutex<Vec<Listed>>>,
    /// The calls on the candidates' side objects (`sweeper/tail/`).
    sides: Arc<Mutex<Vec<Op>>>,
    /// A prefix whose LISTs take longer, and their time in milliseconds.
    slow_lists: (&'static str, u64),
}

/// A request's time: an invocation of half a minute makes at most 120 of
/// them one after the other.
const STEP_MS: u64 = 250;

/// The tests' manual clock, and tokio's paused time since the test began
/// on top: the pass's requests move it, the test's setting-up does not.
#[derive(Clone)]
pub(super) struct Paused {
    pub(super) manual: ManualClock,
    start: tokio::time::Instant,
}

impl Paused {
    pub(super) fn new() -> Self {
        Paused {
            manual: ManualClock::at_epoch(),
            start: tokio::time::Instant::now(),
        }
    }
}

impl Clock for Paused {
    fn now(&self) -> chrono::DateTime<chrono::Utc> {
        let run = tokio::time::Instant::now() - self.start;
        self.manual.now() + Duration::from_std(run).unwrap()
    }
}

#[async_trait::async_trait]
impl common::Hooks for SecondPerCall {
    type Inner = MemoryStore;

    fn inner(&self) -> &MemoryStore {
        &self.inner
    }

    async fn before(&self, call: &common::Call<'_>) -> Result<(), StoreError> {
        if call.key.starts_with("sweeper/tail/") {
            self.sides.lock().unwrap().push(call.op);
        }
        let (slow, slow_ms) = self.slow_lists;
        let ms = if call.op == Op::List && call.key.starts_with(slow) {
            slow_ms
        } else {
            STEP_MS
        };
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
        Ok(())
    }

    async fn list(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        page: Option<String>,
        limit: usize,
    ) -> Result<idempotent_submit::store::ListPage, StoreError> {
        let asked = (
            prefix.to_owned(),
            start_after.map(str::to_owned),
            page.clone(),
        );
        self.listed.lock().unwrap().push(asked);
        self.inner.list(prefix, start_after, page, limit).await
    }
}

/// What the bucket holds, by what the pass owes it.
pub(super) struct Payloads {
    /// Payloads a task names: none may go.
    pub(super) named: Vec<String>,
    /// Orphans of the day's slices: all go.
    pub(super) due: Vec<String>,
    /// Orphans of another slice two hours old (the HEAD path's): all go,
    /// on a store whose clock the tests move.
    pub(super) recent: Vec<String>,
    /// Old orphans of other slices: their slice's day is another.
    pub(super) not_today: Vec<String>,
}

/// `per_slice` payloads in each slice of a first check's plan (0 to 8),
/// their tasks under our one-digit shard but for every 500th, and
/// `extra_tasks` tasks of later slices in the same folder; 3 old
/// orphans of slice 200, and 3 of slice 201 two hours old; nine days on.
/// Their ids from a generator seeded with `seed`: the same bucket, so the
/// same pass, every run.
pub(super) async fn payload_bucket(
    (per_slice, extra_tasks): (usize, usize),
    seed: u64,
    store: &impl Store,
    clock: &ManualClock,
) -> Payloads {
    let mut ids = fastrand::Rng::with_seed(seed);
    let mut id_in = |first: u32| {
        let mut b = ids.u128(..).to_le_bytes();
        b[0] = first as u8;
        uuid::Builder::from_random_bytes(b).into_uuid()
    };
    let day = clock.now() + Duration::days(9);
    let mut p = Payloads {
        named: vec![],
        due: vec![],
        recent: vec![],
        not_today: vec![],
    };
    for slice in PayloadPlan::after(0, None, day).slices {
        for i in 0..per_slice {
            let id = id_in(slice);
            match i % 500 {
                499 => p.due.push(put_payload(store, id, false).await),
                _ => p.named.push(put_payload(store, id, true).await),
            }
        }
    }
    // Tasks without a payload (most inputs are not offloaded) in the same
    // one-digit folder, of the slices after the day's.
    for i in 0..extra_tasks {
        let id = id_in(9 + (i % 7) as u32);
        put_object(store, &format!("tasks/0/{id}.json")).await;
    }
    for _ in 0..3 {
        p.not_today
            .push(put_payload(store, id_in(200), false).await);
    }
    clock.set(day - Duration::hours(2));
    for _ in 0..3 {
        p.recent.push(put_payload(store, id_in(201), false).await);
    }
    clock.set(day);
    p
}

async fn put_object(store: &impl Store, key: &str) {
    let body = b"{}".to_vec().into();
    store.put(key, body, PutMode::Create).await.unwrap();
}

/// The payload of the task `id`, and (`named`) its task under our
/// one-digit shard: its key.
async fn put_payload(store: &impl Store, id: uuid::Uuid, named: bool) -> String {
    let key = format!("payloads/{id}/input.json");
    put_object(store, &key).await;
    if named {
        put_object(store, &format!("tasks/{}/{id}.json", &id.to_string()[..1])).await;
    }
    key
}

/// What the invocations of one pass did, with the checkpoint's payload
/// cursor after each round of them.
#[derive(Default, Debug)]
pub(super) struct Rounds {
    pub(super) outcomes: Vec<ShareOutcome>,
    pub(super) cursors: Vec<(bool, u64)>,
}

impl Rounds {
    pub(super) fn passes(&self) -> Vec<&SweepSummary> {
        self.outcomes
            .iter()
            .filter_map(|o| o.pass.as_ref())
            .collect()
    }

    fn idle(&self) -> usize {
        self.outcomes.iter().filter(|o| o.idle).count()
    }
}

/// The checkpoint's `(complete, payload_slice)`.
pub(super) async fn cursor(bucket: &MemoryStore) -> (bool, u64) {
    let cp: serde_json::Value =
        serde_json::from_slice(&bucket.get("sweeper/checkpoint.json").await.unwrap().body).unwrap();
    (
        cp["complete"].as_bool().unwrap_or(false),
        cp["payload_slice"].as_u64().unwrap_or(0),
    )
}

/// The pass queue's stand-in that starts each continuation at once.
struct Chan(tokio::sync::mpsc::UnboundedSender<Continuation>);

#[async_trait::async_trait]
impl idempotent_submit::testing::protocol::HandOn for Chan {
    async fn hand_on(&self, continuations: &[Continuation]) -> Result<(), String> {
        for c in continuations {
            self.0.send(*c).map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}

/// A pass's invocations over one bucket, each request a [`STEP_MS`].
pub(super) struct Invocations {
    bucket: MemoryStore,
    pub(super) q: Queue,
    clock: Paused,
    pub(super) listed: Arc<Mutex<Vec<Listed>>>,
    pub(super) sides: Arc<Mutex<Vec<Op>>>,
}

impl Invocations {
    pub(super) fn new(bucket: &MemoryStore, clock: &Paused, order: ListOrder) -> Self {
        Self::with_slow_lists(bucket, clock, order, ("tasks/0/", STEP_MS))
    }

    /// As [`Self::new`], each LIST of a prefix that begins with `slow`
    /// taking `ms`.
    pub(super) fn with_slow_lists(
        bucket: &MemoryStore,
        clock: &Paused,
        order: ListOrder,
        (slow, ms): (&'static str, u64),
    ) -> Self {
        let listed: Arc<Mutex<Vec<Listed>>> = Arc::default();
        let sides: Arc<Mutex<Vec<Op>>> = Arc::default();
        let store = common::Wrapped(SecondPerCall {
            inner: bucket.clone(),
            listed: listed.clone(),
            sides: sides.clone(),
            slow_lists: (slow, ms),
        });
        let mut settings = idempotent_submit::Settings {
            pass_concurrency: 4,
            ..ordered(order)
        };
        // A slow request still fits an attempt (it is cut by the run's
        // deadline alone).
        let attempt = settings.retry.attempt_timeout;
        settings.retry.attempt_timeout = attempt.max(std::time::Duration::from_millis(2 * ms));
        Invocations {
            bucket: bucket.clone(),
            q: Queue::with_clock(store, Arc::new(clock.clone()), settings),
            clock: clock.clone(),
            listed,
            sides,
        }
    }

    /// One invocation, `c` its continuation (`None`: the schedule's), with
    /// a deadline `secs` after it starts, handing on to `inbox`.
    pub(super) async fn one(
        &self,
        c: Option<Continuation>,
        secs: i64,
        inbox: &Inbox,
    ) -> ShareOutcome {
        let opts = SweepOptions {
            deadline: Some(self.clock.now() + Duration::seconds(secs)),
            continuation: c,
            ..Default::default()
        };
        self.q
            .engine()
            .sweep_share(&opts, Some(inbox))
            .await
            .unwrap()
    }

    /// How many times `prefix` was listed from its beginning.
    pub(super) fn begun(&self, prefix: &str) -> usize {
        let listed = self.listed.lock().unwrap();
        let from_start = |(p, a, t): &&Listed| p == prefix && a.is_none() && t.is_none();
        listed.iter().filter(from_start).count()
    }

    /// The schedule's invocation, then each continuation handed on as soon
    /// as it is, side by side, each with a deadline `secs` after it starts
    /// (none: `None`): until none is running.
    pub(super) async fn drive(&self, secs: Option<i64>) -> Rounds {
        self.drive_from(secs, vec![None]).await
    }

    /// As [`Self::drive`], from the invocations `start` (their
    /// continuations; `None`: the schedule's).
    pub(super) async fn drive_from(
        &self,
        secs: Option<i64>,
        start: Vec<Option<Continuation>>,
    ) -> Rounds {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let inbox = Chan(tx);
        let run = |c: Option<Continuation>| {
            let opts = SweepOptions {
                deadline: secs.map(|s| self.clock.now() + Duration::seconds(s)),
                continuation: c,
                ..Default::default()
            };
            let inbox = &inbox;
            async move { self.q.engine().sweep_share(&opts, Some(inbox)).await }
        };
        let mut running = futures::stream::FuturesUnordered::new();
        for c in start {
            running.push(run(c));
        }
        let mut r = Rounds::default();
        loop {
            // `biased`: the same order every run (tokio's select! picks at
            // random among ready branches), so the schedule is the test's.
            tokio::select! {
                biased;
                Some(c) = rx.recv() => running.push(run(Some(c))),
                Some(o) = futures::StreamExt::next(&mut running) => {
                    r.outcomes.push(o.unwrap());
                    r.cursors.push(cursor(&self.bucket).await);
                }
            }
            while let Ok(c) = rx.try_recv() {
                running.push(run(Some(c)));
            }
            assert!(r.outcomes.len() < 1000, "the pass never ends");
            if running.is_empty() {
                return r;
            }
        }
    }
}

pub(super) fn present(bucket: &MemoryStore, keys: &[String]) -> usize {
    let all: std::collections::HashSet<String> = bucket.keys().into_iter().collect();
    keys.iter().filter(|k| all.contains(*k)).count()
}

async fn a_tail_longer_than_an_invocation(order: ListOrder, seed: u64) {
    let clock = Paused::new();
    let bucket = MemoryStore::new(Arc::new(clock.clone()) as Arc<dyn Clock>);
    // Under `any` 18 pages of `payloads/`: the candidates' collection
    // takes more than an invocation of 3 s (12 requests, 2 of them the
    // claim's), and goes on from share to share by its side object.
    let per_slice = if order == ListOrder::Bytes {
        1_100
    } else {
        2_000
    };
    let p = payload_bucket((per_slice, 20_000), seed, &bucket, &clock.manual).await;
    let pass = Invocations::new(&bucket, &clock, order);
    let secs = if order == ListOrder::Bytes { 4 } else { 3 };
    let r = pass.drive(Some(secs)).await;
    // One pass, over many invocations, some at once, none idle.
    let passes = r.passes();
    assert_eq!(passes.len(), 1, "{order:?}: {:?}", r.cursors);
    assert!(r.outcomes.len() > 4, "{order:?}: {}", r.outcomes.len());
    assert_eq!(r.idle(), 0, "{order:?}");
    // Under `bytes` the day's nine slices are nine items, worked by
    // several invocations at once (under `any` one item for their folder
    // digit and one for the HEAD path); never more than the concurrency.
    let shares = r.outcomes.iter().find_map(|o| o.pass_shares).unwrap();
    let at_once = if order == ListOrder::Bytes {
        2..=4
    } else {
        1..=4
    };
    assert!(
        at_once.contains(&shares.1),
        "{order:?}: shares at once {shares:?}"
    );
    // The cursor stays until the whole check is done, then moves once, by
    // the plan's nine slices.
    let moved = |c: &&(bool, u64)| **c != (false, 0);
    let first_moved = r.cursors.iter().position(|c| moved(&c));
    let after: Vec<_> = r.cursors[first_moved.unwrap()..].to_vec();
    assert!(
        after.iter().all(|c| *c == (true, 9)),
        "{order:?}: {:?}",
        r.cursors
    );
    // Every orphan the rule names gone, each counted once; nothing else.
    assert_eq!(present(&bucket, &p.due), 0, "{order:?}");
    assert_eq!(present(&bucket, &p.recent), 0, "{order:?}");
    assert_eq!(present(&bucket, &p.named), p.named.len(), "{order:?}");
    assert_eq!(present(&bucket, &p.not_today), 3, "{order:?}");
    let due = (p.due.len() + p.recent.len()) as u64;
    assert_eq!(passes[0].payloads_deleted, due, "{order:?}");
    assert_eq!(passes[0].errors, 0, "{order:?}");
    // Each slice of the plan checked once: its payloads (bytes) listed
    // from place to place onwards, never back (a page cut short is listed
    // again from the same place), or its task folder (any) listed from its
    // beginning by one share, then from its token.
    let listed = pass.listed.lock().unwrap().clone();
    let of = |prefix: &str| -> Vec<(Option<String>, Option<String>)> {
        listed
            .iter()
            .filter(|(p, _, _)| p == prefix)
            .map(|(_, a, t)| (a.clone(), t.clone()))
            .collect()
    };
    match order {
        ListOrder::Bytes => {
            for slice in 0..9 {
                let places: Vec<Option<String>> = of(&format!("payloads/{slice:02x}"))
                    .into_iter()
                    .map(|(a, _)| a)
                    .collect();
                assert!(places.is_sorted(), "slice {slice}: {places:?}");
                assert!(
                    places.iter().any(|a| a.is_none()),
                    "slice {slice}: never begun"
                );
            }
        }
        ListOrder::Any => {
            let begun = of("tasks/0/").iter().filter(|(_, t)| t.is_none()).count();
            assert_eq!(begun, 1);
            // `payloads/` from its beginning: the tail's first page, and
            // the candidates' collection once, though it took shares.
            assert_eq!(pass.begun("payloads/"), 2);
            let sides = pass.sides.lock().unwrap().clone();
            assert!(sides.contains(&Op::Put), "{sides:?}");
            assert!(sides.contains(&Op::Get), "{sides:?}");
        }
    }
    // The collection's side objects gone with their rounds.
    assert_eq!(
        keys_under(&bucket, "sweeper/tail/").await,
        Vec::<String>::new()
    );
    // The next pass, a minute on, takes the next slice alone.
    clock.manual.advance(Duration::minutes(1));
    let next = pass.drive(None).await;
    assert_eq!(next.cursors.last(), Some(&(true, 10)), "{order:?}");
}

/// The seed of a bucket whose slice 8 (and 3) met, on 37fdfad's rule, a
/// share with too little of its invocation left (the claims' contention
/// took 2 of its 4 s) for a page with an orphan's six requests: given up
/// after one invocation, and after two at the same place when a deletion
/// was not counted as progress.
const STALLING_SEED: u64 = 14_639_323_354_824_828_021;

#[tokio::test(start_paused = true)]
async fn a_payload_check_longer_than_an_invocation_goes_on_in_the_next_ones_and_moves_the_cursor_once()
 {
    a_tail_longer_than_an_invocation(ListOrder::Bytes, STALLING_SEED).await;
}

#[tokio::test(start_paused = true)]
async fn under_list_order_any_a_task_folder_longer_than_an_invocation_is_listed_on_from_its_token()
{
    a_tail_longer_than_an_invocation(ListOrder::Any, 1).await;
}

/// a622792: under `any`, a task listing the deadline cuts inside a
/// request (begun before it, ending past it: the request's own deadline is
/// the run's) keeps what it found with its token. Each LIST of `tasks/0/`
/// takes 1.1 s against invocations of 5 s, so nearly every share's listing
/// ends inside one; the error path lost the found bits, and the next share
/// began the listing again.
#[tokio::test(start_paused = true)]
async fn under_list_order_any_a_task_listing_cut_inside_a_request_goes_on_from_its_token() {
    let clock = Paused::new();
    let bucket = MemoryStore::new(Arc::new(clock.clone()) as Arc<dyn Clock>);
    let p = payload_bucket((1_100, 20_000), 5, &bucket, &clock.manual).await;
    let pass = Invocations::with_slow_lists(&bucket, &clock, ListOrder::Any, ("tasks/0/", 1_100));
    let r = pass.drive(Some(5)).await;
    assert_eq!(r.passes().len(), 1, "{:?}", r.cursors);
    assert_eq!(cursor(&bucket).await, (true, 9));
    assert_eq!(present(&bucket, &p.due), 0);
    assert_eq!(present(&bucket, &p.named), p.named.len());
    // Its 30 pages over many shares, begun once.
    let pages = pass
        .listed
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.0 == "tasks/0/")
        .count();
    assert!(pages >= 30, "{pages}");
    assert_eq!(pass.begun("tasks/0/"), 1);
}

async fn an_invocation_dying_in_the_tail(order: ListOrder) {
    let clock = Paused::new();
    let bucket = MemoryStore::new(Arc::new(clock.clone()) as Arc<dyn Clock>);
    let p = payload_bucket((600, 0), 6, &bucket, &clock.manual).await;
    let settings = idempotent_submit::Settings {
        pass_concurrency: 4,
        ..ordered(order)
    };
    // The invocation dies right after its first deletion of a payload, in
    // the middle of its share of the tail's items.
    let f = FaultyStore::new(bucket.clone());
    f.inject(Some(Op::Delete), "payloads/", 1, 1, Fault::CrashAfter);
    let dying = Queue::with_clock(f, Arc::new(clock.clone()), settings.clone());
    let inbox = Inbox::default();
    let died = dying
        .engine()
        .sweep_share(&SweepOptions::default(), Some(&inbox))
        .await;
    assert!(died.is_err(), "{order:?}: {died:?}");
    // It deleted one, or a few: those on their way as it died.
    let gone =
        p.due.len() + p.recent.len() - present(&bucket, &p.due) - present(&bucket, &p.recent);
    assert!(gone >= 1 && gone < p.due.len() + 3, "{order:?}: {gone}");
    // The continuations it invited do the rest of the pool, and the pass
    // waits for the dead share's items.
    let q = Queue::with_clock(bucket.clone(), Arc::new(clock.clone()), settings);
    let handed = inbox.take();
    assert!(!handed.is_empty(), "{order:?}: it had fanned the tail out");
    for c in handed {
        let opts = SweepOptions {
            continuation: Some(c),
            ..Default::default()
        };
        let o = q.engine().sweep_share(&opts, Some(&inbox)).await.unwrap();
        assert!(!o.idle, "{order:?}: {o:?}");
    }
    assert!(inbox.take().is_empty());
    assert_eq!(cursor(&bucket).await, (false, 0), "{order:?}");
    // Once its lease runs out (no deadline: 15 minutes and an operation),
    // the next run takes its items over and ends the pass.
    clock
        .manual
        .advance(Duration::minutes(15) + q.settings().operation_timeout);
    let r = Invocations::new(&bucket, &clock, order).drive(None).await;
    assert_eq!(r.passes().len(), 1, "{order:?}");
    assert_eq!(cursor(&bucket).await, (true, 9), "{order:?}");
    assert_eq!(present(&bucket, &p.due), 0, "{order:?}");
    assert_eq!(present(&bucket, &p.recent), 0, "{order:?}");
    assert_eq!(present(&bucket, &p.named), p.named.len(), "{order:?}");
    assert_eq!(present(&bucket, &p.not_today), 3, "{order:?}");
}

#[tokio::test(start_paused = true)]
async fn an_invocation_dying_in_the_tail_loses_nothing_its_items_are_taken_over_after_its_lease() {
    for order in [ListOrder::Bytes, ListOrder::Any] {
        an_invocation_dying_in_the_tail(order).await;
    }
}

/// On moto and SeaweedFS: the tail of a pass over more than a page of
/// payloads spreads over the invocations its claims invite, and checks the
/// day's slices.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_moto_the_tail_spreads_over_invited_invocations_and_deletes_exactly_the_due_orphans() {
    the_tail_spreads_on(Real::Moto).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_seaweedfs_the_tail_spreads_over_invited_invocations_and_deletes_exactly_the_due_orphans()
 {
    the_tail_spreads_on(Real::SeaweedFs).await;
}

async fn the_tail_spreads_on(real: Real) {
    for order in [ListOrder::Bytes, ListOrder::Any] {
        let store = real_store(real, common::Versioning::Off).await;
        // The store's clock is real: the tests' stands for it, nine days
        // on, by which the payloads are old.
        let clock = ManualClock::new(chrono::Utc::now() - Duration::days(9));
        let p = payload_bucket((120, 0), 1, &store, &clock).await;
        clock.set(chrono::Utc::now() + Duration::days(9));
        let mut settings = idempotent_submit::Settings {
            clock_check: idempotent_submit::ClockCheck::TrustClock,
            pass_concurrency: 4,
            ..ordered(order)
        };
        settings.retry.attempt_timeout = std::time::Duration::from_secs(10);
        let q = Queue::with_clock(store.clone(), Arc::new(clock.clone()), settings);
        let inbox = Inbox::default();
        let mut outcomes = vec![
            q.engine()
                .sweep_share(&SweepOptions::default(), Some(&inbox))
                .await
                .unwrap(),
        ];
        let mut handed = inbox.take();
        while let Some(c) = handed.pop() {
            let opts = SweepOptions {
                continuation: Some(c),
                ..Default::default()
            };
            outcomes.push(q.engine().sweep_share(&opts, Some(&inbox)).await.unwrap());
            handed.extend(inbox.take());
        }
        let pass = outcomes.iter().find_map(|o| o.pass.clone());
        let pass = pass.unwrap_or_else(|| panic!("{order:?}: no pass ended"));
        assert!(outcomes.len() > 1, "{order:?}: the tail was handed on");
        let keys = keys_under(&store, "payloads/").await;
        let left = |ks: &[String]| ks.iter().filter(|k| keys.contains(k)).count();
        assert_eq!(left(&p.due), 0, "{order:?}: {pass:?}");
        assert_eq!(left(&p.named), p.named.len(), "{order:?}");
        // The store dates them all now: nine days old by the tests' clock,
        // the other slices' are not today's.
        assert_eq!(left(&p.not_today) + left(&p.recent), 6, "{order:?}");
        assert_eq!(pass.payloads_deleted, p.due.len() as u64, "{order:?}");
    }
}
