//! The daily pass under `LIST_ORDER=any` against `LIST_ORDER=bytes`, on the
//! same bucket: requests and S3 dollars per day at 10 million live records
//! (`BENCH_PASS_RECORDS` for another size).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use chrono::{DateTime, Duration, Utc};
use idempotent_submit::store::{FaultyStore, Op, PutMode, Store};
use idempotent_submit::testing::protocol::SweepOptions;
use idempotent_submit::{Clock, ListOrder, ManualClock, MemoryStore, Queue, Settings};
use serde_json::json;

use crate::report::Report;

/// S3 Standard: PUT, COPY, POST, LIST $5 per million; GET, HEAD $0.40.
const LIST_PUT_PER_MILLION: f64 = 5.0;
const GET_PER_MILLION: f64 = 0.4;

/// The scopes of a bucket of `live` records: 60 % one task type, 30 %
/// another, 10 % over a hundred more.
fn scopes(live: usize) -> Vec<(String, usize)> {
    let mut out = vec![
        ("charge_customer".to_owned(), live * 6 / 10),
        ("send_email".to_owned(), live * 3 / 10),
    ];
    out.extend((0..100).map(|i| (format!("task_type_{i:03}"), live / 1000)));
    out
}

/// A bucket of `live` records of a 30-day TTL written evenly over the 30
/// days before `now`, and the day's records past their TTL (written 30 to 31
/// days before); a complete pass one day before `now`. Only what the pass
/// at `now` reads has a record's body: the records past their TTL, and the
/// submits from their stale age to their finish window (their task and
/// marker written too: no worker runs, so the ready index's scan reads the
/// task of each marker old enough); the rest are listed and never read.
async fn bucket(live: usize, now: DateTime<Utc>) -> MemoryStore {
    let clock = ManualClock::new(now - Duration::days(31));
    let store = MemoryStore::new(Arc::new(clock.clone()) as Arc<dyn Clock>);
    let q = Queue::with_clock(store.clone(), Arc::new(clock.clone()), Settings::default());
    // An expired record's body, from a real submit's.
    q.submit("template", json!(0))
        .idempotency_key("template")
        .await
        .unwrap();
    let template = store
        .keys()
        .into_iter()
        .find(|k| k.starts_with("idempotency/"))
        .unwrap();
    let mut v: serde_json::Value =
        serde_json::from_slice(&store.get(&template).await.unwrap().body).unwrap();
    for k in store.keys() {
        store.delete(&k, None).await.unwrap();
    }
    v["expires_at"] = json!(
        (now - Duration::hours(1))
            .format("%Y-%m-%dT%H:%M:%SZ")
            .to_string()
    );
    let expired: Bytes = serde_json::to_vec(&v).unwrap().into();
    let span = Duration::days(31).num_seconds();
    let settings = Settings::default();
    let mut n: u64 = 0;
    for (scope, live_here) in scopes(live) {
        // A thirtieth more: the day's records past their TTL.
        let written = live_here + live_here / 30;
        for j in 0..written {
            n += 1;
            let age = Duration::seconds(span - (j as i64 * span) / written as i64);
            clock.set(now - age);
            if age >= settings.stale_creating_after && age < settings.finish_window {
                // A submit the pass reads: past its stale age and in its
                // finish window (docs/protocol.md, "The scheduled pass").
                q.submit(&*scope, json!(n))
                    .idempotency_key(format!("k{n}"))
                    .await
                    .unwrap();
                continue;
            }
            let hash = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(n.to_le_bytes()));
            let body = if age >= Duration::days(30) {
                expired.clone()
            } else {
                Bytes::from_static(b"{}")
            };
            store
                .put(
                    &format!("idempotency/{scope}/{hash}.json"),
                    body,
                    PutMode::Create,
                )
                .await
                .unwrap();
        }
    }
    let checkpoint = json!({
        "pass": (now - Duration::days(1)).format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        "complete": true,
        "ranges": [],
    });
    store
        .put(
            "sweeper/checkpoint.json",
            serde_json::to_vec(&checkpoint).unwrap().into(),
            PutMode::Overwrite,
        )
        .await
        .unwrap();
    clock.set(now);
    store
}

/// A round trip to S3 from a function in its region, as the other sections
/// assume it (the sweeper's LISTs and GETs).
const ROUND_TRIP: std::time::Duration = std::time::Duration::from_millis(30);

/// How long a scheduled invocation works: the sweep function's timeout
/// (template.yaml, 120 s) less the 10 s it stops before it.
const INVOCATION_SECS: f64 = 110.0;

/// What one pass did.
struct Pass {
    by_kind: BTreeMap<&'static str, u64>,
    reads: u64,
    deleted: u64,
    /// Its wall time with every request taking `ROUND_TRIP` (requests sent
    /// together overlap): tokio's paused clock, read after the pass; the
    /// CPU's time is not in it.
    remote_secs: f64,
    /// Its real time: the CPU's (the paused clock's waits take none).
    memory_secs: f64,
}

/// One day's pass over a fresh `live`-record bucket under `order`, on a
/// runtime of its own whose clock is paused: each request waits
/// `ROUND_TRIP` and the clock jumps to the next answer, so the remote wall
/// time is measured without being waited.
fn one_pass(live: usize, order: ListOrder) -> Pass {
    std::thread::scope(|s| {
        s.spawn(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .start_paused(true)
                .build()
                .unwrap()
                .block_on(pass_on(live, order))
        })
        .join()
        .unwrap()
    })
}

async fn pass_on(live: usize, order: ListOrder) -> Pass {
    let now = DateTime::parse_from_rfc3339("2026-03-01T03:00:00Z")
        .unwrap()
        .with_timezone(&Utc);
    let store = bucket(live, now).await;
    let f = FaultyStore::new(store.clone());
    f.set_latency(ROUND_TRIP);
    let clock = ManualClock::new(now);
    let q = Queue::with_clock(
        f.clone(),
        Arc::new(clock),
        Settings {
            list_order: order,
            ..Settings::default()
        },
    );
    let start = Instant::now();
    let paused = tokio::time::Instant::now();
    let s = q.engine().sweep(&SweepOptions::default()).await.unwrap();
    let memory_secs = start.elapsed().as_secs_f64();
    let remote_secs = paused.elapsed().as_secs_f64();
    assert!(s.complete && s.errors == 0, "{order:?}: {s:?}");
    let mut by_kind: BTreeMap<&'static str, u64> = BTreeMap::new();
    for c in f.calls() {
        let kind = match c.op {
            Op::List => "LIST",
            Op::Get => "GET",
            Op::Head => "HEAD",
            Op::PutCreate | Op::PutUpdate | Op::Put => "PUT",
            Op::Delete => "DELETE",
        };
        *by_kind.entry(kind).or_default() += 1;
    }
    Pass {
        by_kind,
        reads: s.reads,
        deleted: s.expired_deleted,
        remote_secs,
        memory_secs,
    }
}

fn dollars(by: &BTreeMap<&'static str, u64>) -> f64 {
    let n = |k| *by.get(k).unwrap_or(&0) as f64;
    (n("LIST") + n("PUT")) * LIST_PUT_PER_MILLION / 1e6
        + (n("GET") + n("HEAD")) * GET_PER_MILLION / 1e6
}

pub(crate) async fn list_order(r: &mut Report) {
    let live: usize = std::env::var("BENCH_PASS_RECORDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000_000);
    r.line("\n## The daily pass: `LIST_ORDER=any` against `LIST_ORDER=bytes`\n");
    r.line(format!(
        "One bucket, built the same way for each setting in memory (S3's answers): {live} live records of a 30-day TTL written evenly over 30 days in 102 scopes (60 % in one task type, 30 % in another, 10 % over a hundred more), the day's records past their TTL, the submits the pass reads whole (record, task, marker, no worker: from 10 minutes old, their stale age, to 40, their finish window; the ready index's scan reads the task of each of their markers 15 minutes old or more), and a complete pass one day before. One day's pass under each setting, every request counted by kind; dollars at S3 Standard's prices (LIST and PUT $5 per million, GET and HEAD $0.40, DELETE free). Wall time on S3: the same pass with every request taking {} ms (requests sent together overlap: a pass lists 32 ranges at once and reads 16 records at once per range), on tokio's paused clock, so measured and not waited (the CPU's time is not in it); invocations: that S3 time cut into invocations of {INVOCATION_SECS:.0} s of work (the sweep function's 120 s timeout less its 10 s margin), one after another; a pass that reaches an invocation's deadline hands the rest on at once, over up to `PASS_CONCURRENCY` invocations at a time, and the scale section below measures those invocations and their concurrency on synthetic buckets of 10^7 to 10^9 records. In memory: the pass's real time on this machine (the bench's optimized build, two cores), its CPU's alone.\n",
        ROUND_TRIP.as_millis()
    ));
    r.line("| `LIST_ORDER` | LIST | GET | HEAD | PUT | DELETE | S3 dollars per day | wall time on S3 | invocations | records read, deleted | in memory |");
    r.line("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for order in [ListOrder::Bytes, ListOrder::Any] {
        let p = one_pass(live, order);
        let n = |k| *p.by_kind.get(k).unwrap_or(&0);
        r.line(format!(
            "| `{}` | {} | {} | {} | {} | {} | ${:.4} | {:.0} s | {:.0} | {}, {} | {:.1} s |",
            match order {
                ListOrder::Bytes => "bytes",
                ListOrder::Any => "any",
            },
            n("LIST"),
            n("GET"),
            n("HEAD"),
            n("PUT"),
            n("DELETE"),
            dollars(&p.by_kind),
            p.remote_secs,
            (p.remote_secs / INVOCATION_SECS).ceil(),
            p.reads,
            p.deleted,
            p.memory_secs,
        ));
    }
    r.line(format!(
        "\nThe reads are the same under both (the same window and thresholds judge the same records); the LISTs differ by how the key space is cut: byte order splits a scope past 1,000 records by the hex digits of the record hash (down to 4,096 ranges a scope, some pages not full), `any` lists each scope's folder page by page (one LIST per 1,000 records, plus the folder listing). What `any` gives up is time: a scope's pages follow one another, so its largest scope ({} records here) sets the pass's length.",
        live * 6 / 10
    ));
}
