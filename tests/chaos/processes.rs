//! The world's processes and their logs: the due queue drained into the sweeper, the scheduled pass, the killer and its rules, buquet's workers, and the counts read from logs and proxies.

use super::producers::{self};
#[allow(unused_imports)]
use super::world::*;
use crate::common::chaos_proxy::{ChaosProxy, Landing};
use crate::common::lambda_pool::{KillRule, Outcome, Pool};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The record keys a due message's body names: an S3 notification's
/// (URL-encoded) or the submitter's.
pub fn records_named(body: &str) -> Vec<String> {
    let body = body.replace("%2F", "/");
    let mut out = vec![];
    let mut rest = body.as_str();
    while let Some(i) = rest.find("idempotency/") {
        let tail = &rest[i..];
        match tail.find(".json") {
            Some(j) => {
                out.push(tail[..j + 5].to_owned());
                rest = &tail[j + 5..];
            }
            None => break,
        }
    }
    out
}

/// The schedule: a scheduled pass every `every`, unless held.
pub async fn schedule(
    sweep: Arc<Pool>,
    every: Duration,
    stats: Arc<SweepStats>,
    stop: Arc<AtomicBool>,
    held_until: Arc<Mutex<Option<Instant>>>,
) {
    while !stop.load(Ordering::SeqCst) {
        tokio::time::sleep(every).await;
        if held_until
            .lock()
            .unwrap()
            .is_some_and(|t| Instant::now() < t)
        {
            continue;
        }
        pass(&sweep, &stats).await;
    }
}

pub async fn pass(sweep: &Pool, stats: &SweepStats) -> Option<Value> {
    stats.passes.fetch_add(1, Ordering::SeqCst);
    match sweep
        .invoke(crate::common::event("sweep-scheduled.json"))
        .await
    {
        Outcome::Response(v) => {
            stats
                .finished_by_passes
                .fetch_add(v["finished"].as_u64().unwrap_or(0), Ordering::SeqCst);
            Some(v)
        }
        _ => {
            stats.passes_failed.fetch_add(1, Ordering::SeqCst);
            None
        }
    }
}

/// Kills a random process every so often: a busy one (mid-invocation)
/// three times in four when one is busy.
pub async fn killer(pools: Vec<Arc<Pool>>, every: (u64, u64), seed: u64, stop: Arc<AtomicBool>) {
    let mut rng = fastrand::Rng::with_seed(seed ^ 0x6b69_6c6c);
    while !stop.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(rng.u64(every.0..=every.1))).await;
        if stop.load(Ordering::SeqCst) {
            return;
        }
        // submit three times in four.
        let pool = if rng.u32(0..4) == 0 {
            &pools[1]
        } else {
            &pools[0]
        };
        let busy = pool.busy();
        let index = if !busy.is_empty() && rng.u32(0..4) != 0 {
            busy[rng.usize(..busy.len())]
        } else {
            rng.usize(..pool.size())
        };
        pool.kill(index);
    }
}

/// The moments the proxies' hook kills a function at: right after one of
/// its writes landed, before its answer comes back.
pub fn kill_rule(function: &str, seed: u64) -> KillRule {
    let rng = Mutex::new(fastrand::Rng::with_seed(seed ^ 0x686f_6f6b));
    let sweep = function == "sweep";
    Arc::new(move |l: &Landing<'_>, _before: u64| {
        if !(200..300).contains(&l.status) {
            return None;
        }
        let put = l.line.starts_with("PUT ");
        let path = l.line.split_whitespace().nth(1).unwrap_or("");
        let (p, moment) = if sweep {
            if put && (path.contains("/tasks/") || path.contains("/ready/")) {
                (80, "after a finishing write landed")
            } else if put && path.contains("/sweeper/checkpoint.json") {
                (50, "mid-pass, after its checkpoint claim landed")
            } else if l.line.starts_with("GET ") && path.contains("/idempotency/") {
                (10, "after reading a record")
            } else {
                return None;
            }
        } else if put && path.contains("/idempotency/") && l.if_none_match {
            (30, "after its record landed, before its task")
        } else if put && path.contains("/tasks/") && l.if_none_match {
            (20, "after its task landed, before its answer")
        } else if put && path.contains("/ready/") {
            (20, "after its marker landed, before its answer")
        } else if put && path.contains("/payloads/") {
            (50, "after its offloaded input landed")
        } else {
            return None;
        };
        (rng.lock().unwrap().u32(0..1000) < p).then(|| moment.to_owned())
    })
}

/// The shards worker `i` of `n` polls: every `n`th of the 16, from its
/// own. Each shard has one worker, as a deployment assigns them (buquet's
/// shard leases do it at run time): two workers on every shard listed each
/// shard twice a poll and raced for every task (the loser's GET wasted),
/// about half of moto's requests while the producers ran
/// (docs/reliability.md). A task still meets a worker as soon as one
/// would have polled its shard.
pub fn shards_of(i: usize, n: usize) -> String {
    (0..16u32)
        .filter(|s| *s as usize % n == i)
        .filter_map(|s| char::from_digit(s, 16))
        .collect()
}

/// A buquet 0.1 worker over `endpoint`, appending its runs to `runs`.
pub fn worker(
    cfg: &WorldConfig,
    bucket: &str,
    endpoint: &str,
    i: usize,
    runs: &Path,
) -> tokio::process::Child {
    let log = std::fs::File::create(cfg.dir.join(format!("worker-{i}.log"))).unwrap();
    tokio::process::Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/interop/chaos_worker.py"
        ))
        .arg(format!("chaos-worker-{i}"))
        .arg(runs)
        .arg(producers::TASK_TYPES.join(","))
        .arg(cfg.worker_max_poll_ms.to_string())
        .arg(shards_of(i, cfg.workers))
        .env_remove("BUQUET_ALLOW_NO_VERSIONING")
        .env("BUQUET_ENDPOINT", endpoint)
        .env("BUQUET_BUCKET", bucket)
        .env("AWS_ACCESS_KEY_ID", &cfg.store.key_pair.0)
        .env("AWS_SECRET_ACCESS_KEY", &cfg.store.key_pair.1)
        .env("AWS_REGION", "us-east-1")
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .expect("python3 runs (make test installs buquet in .venv)")
}

pub fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

/// Requests that reached the store through `proxies`.
pub fn reached(proxies: &[&ChaosProxy]) -> u64 {
    proxies
        .iter()
        .map(|p| {
            p.counts.requests.lock().unwrap().len() as u64 + p.counts.kind(2) + p.counts.kind(3)
        })
        .sum()
}

/// `GET /bucket/tasks/a/x.json HTTP/1.1` → `GET tasks/`; a listing →
/// `LIST tasks/` (its prefix's first segment).
pub fn request_kind(line: &str) -> String {
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or("?"), parts.next().unwrap_or(""));
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let mut segs = path.trim_start_matches('/').splitn(3, '/');
    let _bucket = segs.next();
    let first = segs.next().unwrap_or("");
    if first.is_empty() && method == "GET" {
        let prefix = query
            .split('&')
            .find_map(|q| q.strip_prefix("prefix="))
            .unwrap_or("")
            .replace("%2F", "/");
        let top = prefix.split('/').next().unwrap_or("");
        return format!("LIST {top}/");
    }
    if first.is_empty() {
        return format!("{method} (bucket)");
    }
    format!("{method} {first}/")
}

pub fn kinds_of(
    client: &str,
    proxies: &[&ChaosProxy],
    into: &mut std::collections::BTreeMap<(String, String), u64>,
) {
    for p in proxies {
        for line in p.counts.requests.lock().unwrap().iter() {
            *into
                .entry((client.to_owned(), request_kind(line)))
                .or_default() += 1;
        }
    }
}

pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// The one log line of every sweep, a due batch's or a scheduled pass's
/// (src/lambda/mod.rs, `report_sweep`).
pub const SUMMARY: &str = "sweep summary";

/// Sums `field` over the log lines of `logs` whose message is `message`.
pub fn sum_logged(logs: &[PathBuf], message: &str, field: &str) -> u64 {
    sum_logged_from(logs, message, None, field)
}

/// [`sum_logged`] of the lines of one `source` only (the sweep function
/// logs its due batches and its scheduled passes as one "sweep summary",
/// told apart by `source`).
pub fn sum_logged_from(logs: &[PathBuf], message: &str, source: Option<&str>, field: &str) -> u64 {
    let mut n = 0;
    for f in logs {
        for line in std::fs::read_to_string(f).unwrap_or_default().lines() {
            let Ok(v) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            if v["fields"]["message"] == message
                && source.is_none_or(|s| v["fields"]["source"] == s)
            {
                n += match &v["fields"][field] {
                    Value::Bool(b) => u64::from(*b),
                    other => other.as_u64().unwrap_or(0),
                };
            }
        }
    }
    n
}
