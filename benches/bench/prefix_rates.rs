//! Submits at scale against S3's per-prefix request rates
//! (`BENCH_ONLY=scale_submits`): a store model that charges every request
//! to its partition and answers 503 SlowDown past the partition's rate,
//! driven at 1,000 to 20,000 submits a second on a simulated clock.
//!
//! The model. S3 serves about 3,500 PUT/COPY/POST/DELETE and 5,500
//! GET/HEAD/LIST requests a second per partitioned prefix, and answers 503
//! SlowDown above that while it splits the prefix. How far S3 has split a
//! bucket is not visible; the model takes the two ends:
//! - [`Split::Folders`]: a bucket split down to every folder of the layout
//!   (docs/protocol.md): `idempotency/{scope}/`, `tasks/{shard}/`,
//!   `ready/{shard}/`. The best S3 gives a steady load after it has
//!   repartitioned; no split is finer than a folder the keys share.
//! - [`Split::Whole`]: a new bucket, one partition for every key.
//!
//! Each partition has a token bucket per class (PUT-class, GET-class)
//! refilled at its rate and holding [`BURST`] seconds of it; a request
//! finding it empty is refused (and charged nothing). Every request, refused
//! or not, takes [`HALF_TRIP`] each way. Time is tokio's paused clock: the
//! run takes the CPU it needs, not its simulated seconds, and the same
//! arrivals give the same figures but for the backoff's jitter (seeded) and
//! the task ids' shards (random UUIDs).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use idempotent_submit::{Queue, Submitted};
use serde_json::json;
use tokio::time::Instant;

use crate::prefix_model::{Audit, BURST, GET_RATE, HALF_TRIP, PUT_RATE, Split, audit, model};
use crate::report::Report;

/// The simulated seconds of arrivals at each offered load.
const WINDOW_SECS: u64 = 5;
/// Offered loads, submits a second.
const LOADS: [u64; 5] = [1_000, 2_000, 5_000, 10_000, 20_000];
/// The pace of the producer's own retry of its 503s, after the burst.
const RETRY_RATE: u64 = 1_000;

/// One workload: how the submits spread, on which bucket.
#[derive(Clone, Copy)]
struct Case {
    name: &'static str,
    split: Split,
    /// Task types, each its own scope; submits round-robin over them.
    types: usize,
}

const CASES: [Case; 3] = [
    Case {
        name: "one task type (hot prefix), split bucket",
        split: Split::Folders,
        types: 1,
    },
    Case {
        name: "64 task types, split bucket",
        split: Split::Folders,
        types: 64,
    },
    Case {
        name: "64 task types, new bucket (one partition)",
        split: Split::Whole,
        types: 64,
    },
];

/// One submit's answer and how long it took.
type Answer = (
    u64,
    Duration,
    Result<Submitted, idempotent_submit::SubmitError>,
);

/// Submits `keys` at `rate` a second from now, every one in its own task;
/// their answers.
async fn drive(q: &Arc<Queue>, keys: &[u64], rate: u64, types: usize) -> Vec<Answer> {
    let start = Instant::now();
    let handles: Vec<_> = keys
        .iter()
        .enumerate()
        .map(|(i, &k)| {
            let q = q.clone();
            let at = start + Duration::from_secs_f64(i as f64 / rate as f64);
            let ty = format!("type_{:03}", k as usize % types);
            tokio::spawn(async move {
                tokio::time::sleep_until(at).await;
                let t0 = Instant::now();
                let r = q
                    .submit(ty, json!({"n": k}))
                    .idempotency_key(format!("k{k}"))
                    .await;
                (k, t0.elapsed(), r)
            })
        })
        .collect();
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        if let Ok(a) = h.await {
            out.push(a);
        }
    }
    out
}

/// One row of the table.
struct Row {
    offered: u64,
    submits: usize,
    created: usize,
    goodput: f64,
    unavailable: usize,
    other_errors: usize,
    p50: Duration,
    p99: Duration,
    slowdowns: u64,
    hottest: (String, u64),
    finished_by_retry: usize,
    audit: Audit,
}

fn percentile(mut v: Vec<Duration>, p: f64) -> Duration {
    v.sort();
    if v.is_empty() {
        return Duration::ZERO;
    }
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// One case at one offered load: the burst, then the producer's retry of
/// each 503 (once, at [`RETRY_RATE`]), then the audit.
async fn run(case: Case, offered: u64) -> Row {
    fastrand::seed(49);
    let (q, limits, mem) = model(case.split);
    let keys: Vec<u64> = (0..offered * WINDOW_SECS).collect();
    let start = Instant::now();
    let answers = drive(&q, &keys, offered, case.types).await;
    let span = start.elapsed().as_secs_f64();
    let slowdowns = limits.slowdowns.load(Ordering::Relaxed);
    let hottest = limits.hottest();
    let created = answers
        .iter()
        .filter(|a| matches!(&a.2, Ok(s) if !s.replayed))
        .count();
    let failed: Vec<u64> = answers
        .iter()
        .filter(|a| matches!(&a.2, Err(e) if e.is_retryable()))
        .map(|a| a.0)
        .collect();
    let other_errors = answers
        .iter()
        .filter(|a| matches!(&a.2, Err(e) if !e.is_retryable()))
        .count();
    let latencies: Vec<Duration> = answers.iter().map(|a| a.1).collect();
    let retried = drive(&q, &failed, RETRY_RATE, case.types).await;
    let finished_by_retry = retried.iter().filter(|a| a.2.is_ok()).count();
    let ok: Vec<&Submitted> = answers
        .iter()
        .chain(retried.iter())
        .filter_map(|a| a.2.as_ref().ok())
        .collect();
    let audit = audit(&mem, &ok).await;
    Row {
        offered,
        submits: answers.len(),
        created,
        goodput: created as f64 / span,
        unavailable: failed.len(),
        other_errors,
        p50: percentile(latencies.clone(), 0.5),
        p99: percentile(latencies, 0.99),
        slowdowns,
        hottest,
        finished_by_retry,
        audit,
    }
}

/// Every case at every load, each on its own paused runtime (a thread of
/// its own: the bench's runtime is not paused).
fn rows(case: Case) -> Vec<Row> {
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("a paused runtime");
        LOADS
            .iter()
            .map(|&l| rt.block_on(run(case, l)))
            .collect::<Vec<_>>()
    })
    .join()
    .expect("the scale run")
}

/// The section: the model, then a table per case.
pub(crate) async fn scale_submits(r: &mut Report) {
    r.line("\n## Submits at scale: S3's per-prefix rates\n");
    r.line(format!(
        "A store model (benches/bench/prefix_model.rs, driven by prefix_rates.rs) over the in-memory store: every request is charged to its partition, a token bucket per partition and class refilled at {PUT_RATE:.0} PUT-class (PUT, DELETE) and {GET_RATE:.0} GET-class (GET, HEAD, LIST) requests a second and holding {BURST} s of it; a request finding it empty is answered 503 SlowDown (the adapter's `Unavailable`). Every request takes {} ms each way. A *split bucket* is partitioned at every folder of the layout (`idempotency/{{scope}}/`, `tasks/{{shard}}/`, `ready/{{shard}}/`: the best S3 reaches once it has repartitioned); a *new bucket* is one partition. Submits arrive evenly for {WINDOW_SECS} simulated seconds (tokio's paused clock), each a new key with the default retry policy (5 attempts, 25 ms to 1 s backoff, full jitter); the producer then resubmits each 503'd key once, at {RETRY_RATE}/s. Goodput: 201s a second from the first arrival to the last answer. Lost: a 201/200 whose task object is missing or whose record names another task. Doubled: a key with two task objects. All of it is simulated time: the figures do not depend on the machine or the build, only on the model.\n",
        HALF_TRIP.as_millis()
    ));
    for case in CASES {
        r.line(format!("\n### {}\n", case.name));
        r.line("| offered/s | submits | 201s | goodput/s | 503s returned | other errors | p50 | p99 | SlowDowns (requests) | hottest partition (requests admitted) | 503s finished by the producer's retry | lost | doubled |");
        r.line("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
        for row in rows(case) {
            r.line(format!(
                "| {} | {} | {} | {:.0} | {} | {} | {} ms | {} ms | {} | {} ({}) | {} | {} | {} |",
                row.offered,
                row.submits,
                row.created,
                row.goodput,
                row.unavailable,
                row.other_errors,
                row.p50.as_millis(),
                row.p99.as_millis(),
                row.slowdowns,
                if row.hottest.0.is_empty() {
                    "the bucket".to_owned()
                } else {
                    format!("`{}`", row.hottest.0)
                },
                row.hottest.1,
                row.finished_by_retry,
                row.audit.lost,
                row.audit.doubled,
            ));
        }
    }
}
