//! The logic of `BENCH_ONLY=scale` (scale.rs writes its section): one day's
//! scheduled pass over a synthetic bucket (`idempotent_submit::store::
//! synthetic`), by the pass's own entry point (`Engine::sweep_share`): the
//! schedule's invocation, then one invocation at once for each continuation
//! it hands on (up to `PASS_CONCURRENCY`, 4 by default), each with the sweep
//! function's deadline, every request taking 30 ms of tokio's paused clock.
//! tests/scale.rs runs it small.

use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use idempotent_submit::Clock;
use idempotent_submit::store::{PutMode, Store};
use idempotent_submit::testing::protocol::sweep::{Continuation, HandOn, PayloadPlan};
use idempotent_submit::testing::protocol::{SweepOptions, SweepSummary};
use idempotent_submit::testing::synthetic::{
    Bodies, Family, Layout, Shape, SyntheticStore, TokioClock,
};
use idempotent_submit::{ListOrder, Queue, Settings};

/// A request's round trip from a function in the bucket's region.
pub(crate) const ROUND_TRIP: std::time::Duration = std::time::Duration::from_millis(30);
/// How long an invocation works: the sweep function's timeout
/// (template.yaml, 120 s) less the 10 s it stops before it.
pub(crate) const INVOCATION_SECS: i64 = 110;

/// The pass queue's stand-in: the continuations handed on, for the
/// driver to start an invocation for each.
#[derive(Default)]
struct Handed(std::sync::Mutex<Vec<Continuation>>);

impl Handed {
    fn take(&self) -> Vec<Continuation> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

#[async_trait::async_trait]
impl HandOn for Handed {
    async fn hand_on(&self, continuations: &[Continuation]) -> Result<(), String> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(continuations);
        Ok(())
    }
}

/// What one day's pass did.
#[derive(Debug, Default)]
pub(crate) struct Outcome {
    pub lists: u64,
    pub gets: u64,
    pub heads: u64,
    pub puts: u64,
    pub deletes: u64,
    /// Of `lists`: those of the records (under `idempotency/`).
    pub record_lists: u64,
    /// Keys the LISTs answered with, all prefixes.
    pub listed: u64,
    /// Invocations, and the most at once.
    pub invocations: u64,
    pub concurrency: u64,
    /// Invocations that found nothing to do (every slot held, or the pass
    /// over): continuations handed on in vain.
    pub idle: u64,
    /// S3's time from the pass's start to its end (the modelled requests;
    /// the CPU's time is not in it).
    pub s3_secs: f64,
    /// Every invocation's summary, added.
    pub summary: SweepSummary,
    /// Records listed (live and the day's past their TTL), and those past
    /// their TTL.
    pub records: u64,
    pub expired: u64,
    /// Orphan payloads the day's check is owed when it planned its tail
    /// (of the day's slices, or within the HEADs' day and an hour); of
    /// them, those it left; and orphans it deleted that were not owed.
    pub orphans_due: u64,
    pub orphans_left: u64,
    pub orphans_unowed: u64,
    /// Payloads deleted that a task names (a lost input): must be 0.
    pub named_payloads_deleted: u64,
    /// This machine's time for the whole run (the CPU's: the clock is
    /// paused).
    pub cpu_secs: f64,
}

/// The bucket's instant: the pass begins then.
fn pass_at() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-03-01T03:00:00Z")
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_default()
}

/// One day's pass over a synthetic bucket of `shape` under `order`, on a
/// runtime of its own whose clock is paused; `started` is called once the
/// bucket is built, before the first invocation (the bench's memory mark).
/// At most `max_invocations`.
pub(crate) fn day_pass(
    shape: Shape,
    order: ListOrder,
    max_invocations: u64,
    started: &(dyn Fn() + Sync),
) -> Outcome {
    std::thread::scope(|s| {
        s.spawn(|| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .start_paused(true)
                .build();
            match rt {
                Ok(rt) => rt.block_on(pass_on(shape, order, max_invocations, started)),
                Err(e) => panic!("a runtime: {e}"),
            }
        })
        .join()
        .unwrap_or_default()
    })
}

async fn pass_on(
    shape: Shape,
    order: ListOrder,
    max_invocations: u64,
    started: &(dyn Fn() + Sync),
) -> Outcome {
    let wall = std::time::Instant::now();
    let at = pass_at();
    let store = SyntheticStore::new(shape, at, order, ROUND_TRIP, Bodies::from_a_submit().await);
    // The last pass, complete, a day before.
    let checkpoint = serde_json::json!({
        "pass": (at - Duration::days(1)).format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        "complete": true,
        "ranges": [],
    });
    let body = serde_json::to_vec(&checkpoint).unwrap_or_default();
    let _ = store
        .put("sweeper/checkpoint.json", body.into(), PutMode::Overwrite)
        .await;
    let settings = Settings {
        list_order: order,
        ..Settings::default()
    };
    let mut out = Outcome::default();
    let begun = tokio::time::Instant::now();
    let clock = TokioClock::new(at + Duration::from_std(ROUND_TRIP).unwrap_or_default());
    let q = Queue::with_clock(store.clone(), Arc::new(clock.clone()), settings);
    let counts_before = counted(&store);
    started();
    let handed = Handed::default();
    let invoke = |continuation: Option<Continuation>| {
        let (q, clock, handed) = (&q, &clock, &handed);
        async move {
            let opts = SweepOptions {
                deadline: Some(clock.now() + Duration::seconds(INVOCATION_SECS)),
                continuation,
                ..SweepOptions::default()
            };
            // A share that fails hands its message back: SQS delivers it
            // again (the schedule's run waits for the next schedule).
            (
                continuation,
                q.engine().sweep_share(&opts, Some(handed)).await,
            )
        }
    };
    // The schedule's run, then one invocation for each continuation handed
    // on, as the pass queue's event source mapping starts them: at most
    // PASS_CONCURRENCY at once, the others waiting in the queue.
    let at_once = q.settings().pass_concurrency.max(2);
    let mut queued: std::collections::VecDeque<Continuation> = Default::default();
    let mut running = FuturesUnordered::new();
    running.push(invoke(None));
    out.invocations = 1;
    out.concurrency = 1;
    // Continuations are taken as they are handed on (a share fans out in
    // its first seconds, while it works), every 100 ms of the clock.
    let tick = std::time::Duration::from_millis(100);
    while !running.is_empty() || !queued.is_empty() {
        match tokio::time::timeout(tick, running.next()).await {
            Ok(Some((_, Ok(share)))) => {
                let s = &share.summary;
                if s.lists == 0 && s.reads == 0 && s.scanned == 0 {
                    out.idle += 1;
                }
                out.summary.add(&share.summary);
                if let Some(pass) = share.pass {
                    out.summary.complete = pass.complete;
                }
            }
            Ok(Some((again, Err(_)))) => {
                out.summary.errors += 1;
                queued.extend(again);
            }
            _ => {}
        }
        queued.extend(handed.take());
        progress(&out, begun);
        if out.invocations >= max_invocations && running.is_empty() {
            break;
        }
        while running.len() < at_once && out.invocations < max_invocations {
            let Some(c) = queued.pop_front() else { break };
            out.invocations += 1;
            running.push(invoke(Some(c)));
        }
        out.concurrency = out.concurrency.max(running.len() as u64);
    }
    out.s3_secs = begun.elapsed().as_secs_f64();
    let after = counted(&store);
    [
        out.lists,
        out.gets,
        out.heads,
        out.puts,
        out.deletes,
        out.record_lists,
        out.listed,
    ] = std::array::from_fn(|k| after[k] - counts_before[k]);
    let l = store.layout();
    out.named_payloads_deleted = store.named_payloads_deleted();
    account_orphans(&mut out, &store, q.settings(), at).await;
    out.records = l.counts.iter().sum();
    out.expired = l.expired_before.last().copied().unwrap_or(0);
    out.cpu_secs = wall.elapsed().as_secs_f64();
    out
}

/// A line on stderr every 25 invocations: how far a long case has got
/// (records listed by the shares that ended, S3's time so far), for a run
/// stopped before its end to say so.
fn progress(out: &Outcome, begun: tokio::time::Instant) {
    static LAST: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = out.invocations / 25;
    if LAST.swap(n, std::sync::atomic::Ordering::Relaxed) != n {
        eprintln!(
            "scale: {} invocations, {} records listed, {:.0} s of S3 time",
            out.invocations,
            out.summary.scanned,
            begun.elapsed().as_secs_f64()
        );
    }
}

/// The store's request counts: LIST, GET, HEAD, PUT, DELETE; the records'
/// LISTs, and the keys listed.
fn counted(store: &SyntheticStore) -> [u64; 7] {
    use std::sync::atomic::Ordering::Relaxed;
    let c = store.counts();
    [
        c.list.load(Relaxed),
        c.get.load(Relaxed),
        c.head.load(Relaxed),
        c.put.load(Relaxed),
        c.delete.load(Relaxed),
        c.list_records.load(Relaxed),
        c.listed.load(Relaxed),
    ]
}

/// The orphan payloads that the day's check deletes by the rule
/// (docs/protocol.md, "Offloaded inputs"), judged at `planned`, when the
/// pass planned its tail (every item judges ages then): old enough, and of
/// the check's slices or within its HEADs' reach past the orphan age. The
/// age counts the late-write margin twice, as `Engine::payload_orphan_after`
/// does: the record is sent beside its payload and may land a margin after
/// it, and a task written by its deadline a margin after that.
fn orphans_due(
    store: &SyntheticStore,
    s: &Settings,
    at: DateTime<Utc>,
    planned: DateTime<Utc>,
) -> Vec<u64> {
    let l = store.layout();
    let from = orphan_age(s);
    // A first check (the checkpoint has no cursor yet): the first slices.
    let plan = PayloadPlan::after(0, None, planned);
    let every = l.shape.orphan_every;
    (0..l.payloads / every)
        .map(|k| k * every + every - 1)
        .filter(|&p| {
            // Generated ages are the bucket's instant's.
            let age = l.age(Family::Payloads, p) + (planned - at);
            let slice = slice_of(l, p);
            age >= from && (plan.slices.contains(&slice) || age < from + plan.recheck_for)
        })
        .collect()
}

/// The age at which a payload no task names is an orphan, as
/// `Engine::payload_orphan_after` counts it.
fn orphan_age(s: &Settings) -> Duration {
    s.finish_window + s.late_write_margin * 2 + s.operation_timeout
}

/// The payload check's slice of generated payload `p`: its id's first byte.
fn slice_of(l: &Layout, p: u64) -> u32 {
    let key = l.key(Family::Payloads, p);
    u32::from_str_radix(&key["payloads/".len()..][..2], 16).unwrap_or(0)
}

/// When the pass planned its tail: the checkpoint's `payloads_until` once
/// the check completed (`None`: it did not).
async fn tail_planned(store: &SyntheticStore) -> Option<DateTime<Utc>> {
    let got = store.get("sweeper/checkpoint.json").await.ok()?;
    let checkpoint: serde_json::Value = serde_json::from_slice(&got.body).ok()?;
    serde_json::from_value(checkpoint["payloads_until"].clone()).ok()
}

/// The orphans due (judged at the tail's plan time, or at the pass's start
/// when the check did not complete) against those the pass deleted: how
/// many were due, left, and deleted though not due. A line on stderr says
/// each set's ages (hours past the orphan age at the plan time) and how
/// many are of the first check's slices, for a run that differs to show
/// where.
async fn account_orphans(
    out: &mut Outcome,
    store: &SyntheticStore,
    s: &Settings,
    at: DateTime<Utc>,
) {
    let l = store.layout();
    let planned = tail_planned(store).await;
    let when = planned.unwrap_or(at);
    let from = orphan_age(s);
    let slices = PayloadPlan::after(0, None, when).slices;
    let every = l.shape.orphan_every;
    let due = orphans_due(store, s, at, when);
    let deleted: Vec<u64> = store
        .payloads_deleted()
        .into_iter()
        .filter(|i| i % every == every - 1)
        .collect();
    let left: Vec<u64> = due
        .iter()
        .copied()
        .filter(|i| deleted.binary_search(i).is_err())
        .collect();
    let unowed: Vec<u64> = deleted
        .iter()
        .copied()
        .filter(|i| !due.contains(i))
        .collect();
    let describe = |set: &[u64]| -> String {
        let (mut in_slices, mut lo, mut hi) = (0, f64::MAX, f64::MIN);
        for &p in set {
            let slice = slice_of(l, p);
            let age = l.age(Family::Payloads, p) + (when - at) - from;
            let h = age.num_seconds() as f64 / 3600.0;
            in_slices += u64::from(slices.contains(&slice));
            lo = lo.min(h);
            hi = hi.max(h);
        }
        match set.len() {
            0 => "0".to_owned(),
            n => format!(
                "{n} ({in_slices} of the first slices; {lo:.1} h to {hi:.1} h past the orphan age)"
            ),
        }
    };
    eprintln!(
        "scale: the tail planned {} after the start; orphans due then {}, left {}, deleted though not due {}",
        planned.map_or(
            "never (the check did not complete)".to_owned(),
            |p| format!("{:.2} h", (p - at).num_seconds() as f64 / 3600.0)
        ),
        due.len(),
        describe(&left),
        describe(&unowed),
    );
    out.orphans_due = due.len() as u64;
    out.orphans_left = left.len() as u64;
    out.orphans_unowed = unowed.len() as u64;
}
