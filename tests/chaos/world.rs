//! The world: one versioned bucket (moto's, or another store's), its due
//! queue (moto's SQS, fed by the bucket's notifications or by the
//! submitter), `submit` and `sweep` processes under the runtime API
//! stand-in (tests/common/lambda_pool.rs) each behind a fault proxy, the
//! producers, the due queue drained into `sweep` as the event source
//! mapping would, the scheduled pass every few seconds, kills of random
//! processes at random moments, and two buquet 0.1 workers counting every
//! run. [`run`] runs it, then the audit (audit.rs) on what it left.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use idempotent_submit::store::S3Store;
use serde_json::{Value, json};

use super::audit::{self, Audit, Evidence};
use super::damage::Damage;
use super::producers::{self, Door, Ledger, Producer, SharedLedger};
use crate::common::chaos_proxy::{ChaosProxy, KINDS, Landing};
use crate::common::lambda_pool::{Kill, KillRule, Outcome, Pool, PoolConfig, Rss};

/// The windows the functions run with, and the operating conditions of
/// this world (seconds): how late a request can land (the proxies' longest
/// spike and moto's queue stay under it), how late a due message can come
/// (the drainers' poll and redelivery), and the operation deadline. Given
/// to the functions through the testing build's override
/// (`TESTING_OPERATING_CONDITIONS`), checked there as AWS's are.
#[derive(Debug, Clone, Copy)]
pub struct Windows {
    pub stale: u64,
    pub finish: u64,
    pub late_write: u64,
    pub event_delivery: u64,
    pub operation: u64,
}

impl Windows {
    pub const SHORT: Windows = Windows {
        stale: 2,
        finish: 30,
        late_write: 4,
        // Under the finish window less the stale window (2 + 25 < 30). 8 s
        // was broken by a loaded machine (load 7 on 2 cores: 10.5 s late);
        // 15 s by four 300 s moto runs alone on the machine (15.3 s to
        // 17.6 s at most, a few messages of one minute each run: a batch
        // taken by a `sweep` that is killed comes back after 3 s, and again
        // if the next one is killed too, with the drainers' queue on top).
        event_delivery: 25,
        operation: 8,
    };

    fn env(&self) -> Vec<(String, String)> {
        vec![
            (
                "STALE_CREATING_AFTER_SECONDS".into(),
                self.stale.to_string(),
            ),
            ("FINISH_WINDOW_SECONDS".into(), self.finish.to_string()),
            (
                "TESTING_OPERATING_CONDITIONS".into(),
                format!(
                    "late_write={},event_delivery={},operation_timeout={}",
                    self.late_write, self.event_delivery, self.operation
                ),
            ),
        ]
    }

    /// How long after a submit starts nothing more can be written for it:
    /// its record is written within the operation deadline, its task within
    /// the finish window after that, and a late write lands within the
    /// margin.
    pub fn settled_after(&self) -> Duration {
        Duration::from_secs(self.operation + self.finish + self.late_write)
    }
}

/// Who sends a record's due message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Events {
    /// The bucket's S3 event notifications (moto's S3 into its SQS).
    Bucket,
    /// The `submit` function itself (`RECORD_EVENTS=submitter`, for stores
    /// that send no events: issue 27).
    Submitter,
}

/// The store the world's bucket is on, and the key pair it takes (moto
/// takes any). The functions and the workers sign with it; the due queue
/// is moto's SQS whatever the store: a moto server of the world's own
/// (`sqs`), not the one the other tests share, which serves one request
/// at a time (the world would starve their attempts, and they would break
/// its promise of how late a request lands).
#[derive(Debug, Clone)]
pub struct StoreSpec {
    pub name: String,
    pub endpoint: String,
    pub key_pair: (String, String),
    pub sqs: String,
    seaweedfs: bool,
}

impl StoreSpec {
    /// The world's own moto server, for its bucket and its due queue.
    pub fn moto() -> Self {
        let own = crate::common::moto::own_moto();
        StoreSpec {
            name: "moto".into(),
            endpoint: own.clone(),
            key_pair: ("test".into(), "test".into()),
            sqs: own,
            seaweedfs: false,
        }
    }

    /// The SeaweedFS server of this test run (tests/common/seaweedfs.rs),
    /// which checks signatures with its own key pair.
    pub fn seaweedfs() -> Self {
        let s = crate::common::seaweedfs();
        StoreSpec {
            name: "SeaweedFS".into(),
            endpoint: s.endpoint.clone(),
            key_pair: (s.access_key_id.clone(), s.secret_access_key.clone()),
            sqs: crate::common::moto::own_moto(),
            seaweedfs: true,
        }
    }

    /// A new versioned bucket on this store, and its client.
    async fn bucket(&self) -> S3Store {
        if self.seaweedfs {
            crate::common::seaweedfs_store_versioned().await
        } else {
            crate::common::moto::moto_store_at(&self.endpoint, crate::common::Versioning::On).await
        }
    }
}

#[derive(Debug, Clone)]
pub struct WorldConfig {
    pub seed: u64,
    /// How long the producers produce.
    pub produce: Duration,
    pub producers: usize,
    pub submit_envs: usize,
    pub sweep_envs: usize,
    /// The due queue's pollers (the event source mapping's concurrency).
    pub drainers: usize,
    /// Faults on the functions' links (per mille), latency spikes (per
    /// mille, longest ms).
    pub fault_per_mille: u64,
    pub spikes: (u64, u64),
    /// Random kills, one every so many ms (a range), and the kills from the
    /// proxies' hook; none if false.
    pub kills: bool,
    pub kill_every_ms: (u64, u64),
    pub windows: Windows,
    pub pass_every: Duration,
    /// False: no scheduled pass until every record's windows have closed
    /// (the last one, after them, cannot finish a record: each is past
    /// its finish deadline), so that the due path alone finishes what the
    /// audit finds finished (issue 47's proof under `before_claim`).
    pub passes_while_producing: bool,
    pub store: StoreSpec,
    pub events: Events,
    /// Under [`Events::Submitter`]: `DUE_MESSAGE=with_claim` (the message
    /// beside the record's PUT), else the default, `before_claim`.
    pub with_claim: bool,
    /// More settings for the functions (a store's: `LIST_ORDER=any`...).
    pub extra_env: Vec<(String, String)>,
    pub damage: Option<Damage>,
    pub submit_bin: PathBuf,
    pub sweep_bin: PathBuf,
    pub workers: usize,
    pub worker_max_poll_ms: u64,
    /// Where the processes' logs and the workers' run files go.
    pub dir: PathBuf,
    pub progress_every: Duration,
}

impl WorldConfig {
    /// The world of `make test` and `make chaos`: everything on, for
    /// `produce`, with the binaries cargo built for this test (or those in
    /// `CHAOS_BIN_DIR`).
    pub fn everything(seed: u64, produce: Duration) -> Self {
        let dir = std::env::var("CHAOS_BIN_DIR").ok();
        let bin = |name: &str, built: &str| {
            dir.as_ref()
                .map_or_else(|| PathBuf::from(built), |d| Path::new(d).join(name))
        };
        WorldConfig {
            seed,
            produce,
            producers: 6,
            submit_envs: 4,
            sweep_envs: 4,
            drainers: 3,
            fault_per_mille: 100,
            spikes: (50, 1500),
            kills: true,
            kill_every_ms: (600, 2500),
            windows: Windows::SHORT,
            // The world's backstop for a record its due message missed (a
            // claim that lands after its message was read: under
            // RECORD_EVENTS=submitter the message leaves with the first
            // claim, and a claim may land up to the operation deadline plus
            // the late-write margin later, 12 s here against a 2 s delay).
            // The world's short stale age makes such claims common, where
            // production's (600 s by default) needs one in flight for
            // minutes, so the world's pass meets them before their deadline
            // (run checks it can); 15 s could not: seed 3003 on SeaweedFS
            // left such a record past its 20 s deadline.
            pass_every: Duration::from_secs(5),
            passes_while_producing: true,
            store: StoreSpec::moto(),
            extra_env: vec![],
            events: Events::Bucket,
            with_claim: false,
            damage: None,
            submit_bin: bin("submit", env!("CARGO_BIN_EXE_submit")),
            sweep_bin: bin("sweep", env!("CARGO_BIN_EXE_sweep")),
            workers: 2,
            worker_max_poll_ms: 1000,
            dir: PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("chaos-{seed}")),
            progress_every: Duration::from_secs(5),
        }
    }
}

/// What the due queue's drainers and the scheduled passes did.
#[derive(Debug, Default)]
pub struct SweepStats {
    pub received: AtomicU64,
    pub acked: AtomicU64,
    pub handed_back: AtomicU64,
    /// Messages of batches whose `sweep` was killed or timed out.
    pub lost_to_kills: AtomicU64,
    /// Messages the world threw away (damage: a record's lost event).
    pub dropped: AtomicU64,
    pub sqs_requests: AtomicU64,
    pub passes: AtomicU64,
    pub passes_failed: AtomicU64,
    /// What the functions said they finished: due batches' and passes'.
    pub finished_by_passes: AtomicU64,
    /// For each due message `sweep` took: its SentTimestamp (ms since the
    /// epoch) and how long after its delay (ms), from the queue's
    /// SentTimestamp to the answer that took it.
    pub lateness_ms: Mutex<Vec<(f64, f64)>>,
    /// When a due message first named each record (received).
    pub first_named: Mutex<std::collections::HashMap<String, chrono::DateTime<chrono::Utc>>>,
}

impl SweepStats {
    /// Due messages `sweep` took: how many, p50, p99 and the most (ms
    /// after their delay), and how many later than `promise`.
    pub fn lateness(&self, promise: Duration) -> (usize, f64, f64, f64, usize) {
        let mut v: Vec<f64> = self
            .lateness_ms
            .lock()
            .unwrap()
            .iter()
            .map(|l| l.1)
            .collect();
        v.sort_by(|a, b| a.total_cmp(b));
        let q = |p: f64| {
            v.get(((v.len() as f64 - 1.0) * p).round() as usize)
                .copied()
                .unwrap_or(0.0)
        };
        let over = v
            .iter()
            .filter(|l| **l > promise.as_millis() as f64)
            .count();
        (
            v.len(),
            q(0.5),
            q(0.99),
            v.last().copied().unwrap_or(0.0),
            over,
        )
    }

    /// The due messages later than `promise`, by when they were sent: for
    /// each minute since the first message, (all sent in it, late).
    pub fn late_by_minute(&self, promise: Duration) -> Vec<(usize, usize)> {
        let v = self.lateness_ms.lock().unwrap().clone();
        let first = v.iter().map(|l| l.0).fold(f64::INFINITY, f64::min);
        let mut out: Vec<(usize, usize)> = vec![];
        for (sent, late) in v {
            let m = ((sent - first) / 60_000.0) as usize;
            if out.len() <= m {
                out.resize(m + 1, (0, 0));
            }
            out[m].0 += 1;
            if late > promise.as_millis() as f64 {
                out[m].1 += 1;
            }
        }
        out
    }
}

/// Everything a run measured and the audit's counts.
#[derive(Debug)]
pub struct Report {
    pub config: WorldConfig,
    pub produced_for: Duration,
    pub total: Duration,
    pub ledger: Ledger,
    pub kills: Vec<Kill>,
    pub rss: Vec<Rss>,
    pub faults_by_kind: Vec<(String, u64)>,
    pub spikes: u64,
    pub spike_ms: u64,
    /// Requests that reached the store: the functions', the workers',
    /// the drainers' SQS calls (not the audit's).
    pub store_requests_in_production: u64,
    pub store_requests_total: u64,
    /// Of those in production: the functions', the workers', the drainers'.
    pub requests_by_client: (u64, u64, u64),
    /// Every request forwarded, by client, method and prefix.
    pub requests_by_kind: Vec<((String, String), u64)>,
    pub sweep: SweepStats,
    /// From the functions' logs: records the due path finished, its
    /// errors and records it met past their deadline; the scheduled
    /// passes' finishes; submits that finished an interrupted one.
    pub finished_by_due: u64,
    pub due_errors: u64,
    pub due_past_deadline: u64,
    pub finished_by_passes_logged: u64,
    /// From the logs too: the function's answer to a schedule leaves out
    /// whether the pass was busy and the payloads and markers it deleted.
    pub passes_busy_logged: u64,
    pub payloads_deleted_logged: u64,
    pub markers_deleted_logged: u64,
    pub recovered_by_submits: u64,
    /// The machine's load average (1, 5, 15 min) when the world started
    /// and when its producers stopped.
    pub load: (String, String),
    pub starts: u64,
    pub exits: u64,
    pub init_errors: u64,
    pub audit: Audit,
    pub final_replays: u64,
}

/// The world's due queue on its moto's SQS, and a client of it.
#[derive(Clone)]
struct DueQueue {
    url: String,
    arn: String,
    sqs: aws_sdk_sqs::Client,
}

/// The due queue, with `delay` as its DelaySeconds; with bucket events,
/// the bucket's notification of every record write into it.
async fn due_queue(store: &StoreSpec, s3: &S3Store, delay: u64, events: Events) -> DueQueue {
    use crate::common::moto::{moto_due_queue_at, moto_queue_at, moto_sqs_at, queue_arn};
    let url = if events == Events::Bucket {
        moto_due_queue_at(&store.sqs, s3, delay as u32).await
    } else {
        moto_queue_at(&store.sqs, &format!("due-{}", s3.bucket()), delay as u32).await
    };
    let sqs = moto_sqs_at(&store.sqs);
    let arn = queue_arn(&sqs, &url).await;
    DueQueue { url, arn, sqs }
}

/// How long a received due message stays invisible: a `sweep` killed with
/// it lets it come back this soon (the world's event delivery margin covers
/// two of them after the delay).
const DUE_VISIBILITY: i32 = 3;

/// The event source mapping: receives from the due queue, invokes `sweep`
/// with each batch, deletes what it took; what it hands back, or what a
/// killed `sweep` held, comes back after the visibility timeout.
async fn drain(
    due: DueQueue,
    delay_ms: f64,
    sweep: Arc<Pool>,
    stats: Arc<SweepStats>,
    stop: Arc<AtomicBool>,
    drop_record: Arc<Mutex<Option<String>>>,
) {
    let DueQueue { url, arn, sqs } = due;
    while !stop.load(Ordering::SeqCst) {
        stats.sqs_requests.fetch_add(1, Ordering::SeqCst);
        let got = sqs
            .receive_message()
            .queue_url(&url)
            .max_number_of_messages(10)
            .wait_time_seconds(0)
            .visibility_timeout(DUE_VISIBILITY)
            .message_system_attribute_names(
                aws_sdk_sqs::types::MessageSystemAttributeName::SentTimestamp,
            )
            .send()
            .await;
        let mut msgs = match got {
            Ok(o) => o.messages.unwrap_or_default(),
            Err(_) => vec![],
        };
        if msgs.is_empty() {
            tokio::time::sleep(Duration::from_millis(300)).await;
            continue;
        }
        stats
            .received
            .fetch_add(msgs.len() as u64, Ordering::SeqCst);
        {
            let now = chrono::Utc::now();
            let mut named = stats.first_named.lock().unwrap();
            for m in &msgs {
                for key in records_named(m.body().unwrap_or("")) {
                    named.entry(key).or_insert(now);
                }
            }
        }
        // The world's damage: a record whose event is lost.
        let lost = drop_record.lock().unwrap().clone();
        if let Some(lost) = lost {
            let (gone, kept): (Vec<_>, Vec<_>) = msgs.into_iter().partition(|m| {
                m.body()
                    .is_some_and(|b| b.contains(&lost.replace('/', "%2F")) || b.contains(&lost))
            });
            for m in &gone {
                stats.dropped.fetch_add(1, Ordering::SeqCst);
                stats.sqs_requests.fetch_add(1, Ordering::SeqCst);
                let _ = sqs
                    .delete_message()
                    .queue_url(&url)
                    .receipt_handle(m.receipt_handle().unwrap_or_default())
                    .send()
                    .await;
            }
            msgs = kept;
            if msgs.is_empty() {
                continue;
            }
        }
        let records: Vec<Value> = msgs
            .iter()
            .map(|m| {
                json!({
                    "messageId": m.message_id(),
                    "receiptHandle": m.receipt_handle(),
                    "body": m.body(),
                    "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1769515200000"},
                    "messageAttributes": {},
                    "md5OfBody": m.md5_of_body(),
                    "eventSource": "aws:sqs",
                    "eventSourceARN": arn,
                    "awsRegion": "us-east-1"
                })
            })
            .collect();
        let outcome = sweep.invoke(json!({ "Records": records })).await;
        let listed: Vec<String> = match &outcome {
            Outcome::Response(v) => v["batchItemFailures"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|f| f["itemIdentifier"].as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default(),
            _ => {
                stats
                    .lost_to_kills
                    .fetch_add(msgs.len() as u64, Ordering::SeqCst);
                continue;
            }
        };
        let entries: Vec<aws_sdk_sqs::types::DeleteMessageBatchRequestEntry> = msgs
            .iter()
            .enumerate()
            .filter(|(_, m)| !listed.iter().any(|l| Some(l.as_str()) == m.message_id()))
            .map(|(i, m)| {
                aws_sdk_sqs::types::DeleteMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(m.receipt_handle().unwrap_or_default())
                    .build()
                    .expect("an entry")
            })
            .collect();
        let now_ms = chrono::Utc::now().timestamp_millis() as f64;
        {
            let mut late = stats.lateness_ms.lock().unwrap();
            for m in msgs
                .iter()
                .filter(|m| !listed.iter().any(|l| Some(l.as_str()) == m.message_id()))
            {
                let sent = m
                    .attributes()
                    .and_then(|a| {
                        a.get(&aws_sdk_sqs::types::MessageSystemAttributeName::SentTimestamp)
                    })
                    .and_then(|t| t.parse::<f64>().ok());
                if let Some(sent) = sent {
                    late.push((sent, now_ms - sent - delay_ms));
                }
            }
        }
        stats
            .handed_back
            .fetch_add(listed.len() as u64, Ordering::SeqCst);
        stats
            .acked
            .fetch_add(entries.len() as u64, Ordering::SeqCst);
        if !entries.is_empty() {
            stats.sqs_requests.fetch_add(1, Ordering::SeqCst);
            let _ = sqs
                .delete_message_batch()
                .queue_url(&url)
                .set_entries(Some(entries))
                .send()
                .await;
        }
    }
}

/// The record keys a due message's body names: an S3 notification's
/// (URL-encoded) or the submitter's.
fn records_named(body: &str) -> Vec<String> {
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
async fn schedule(
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

async fn pass(sweep: &Pool, stats: &SweepStats) -> Option<Value> {
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
async fn killer(pools: Vec<Arc<Pool>>, every: (u64, u64), seed: u64, stop: Arc<AtomicBool>) {
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
fn kill_rule(function: &str, seed: u64) -> KillRule {
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
fn shards_of(i: usize, n: usize) -> String {
    (0..16u32)
        .filter(|s| *s as usize % n == i)
        .filter_map(|s| char::from_digit(s, 16))
        .collect()
}

/// A buquet 0.1 worker over `endpoint`, appending its runs to `runs`.
fn worker(
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

fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

/// Requests that reached the store through `proxies`.
fn reached(proxies: &[&ChaosProxy]) -> u64 {
    proxies
        .iter()
        .map(|p| {
            p.counts.requests.lock().unwrap().len() as u64 + p.counts.kind(2) + p.counts.kind(3)
        })
        .sum()
}

/// `GET /bucket/tasks/a/x.json HTTP/1.1` → `GET tasks/`; a listing →
/// `LIST tasks/` (its prefix's first segment).
fn request_kind(line: &str) -> String {
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

fn kinds_of(
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

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// The one log line of every sweep, a due batch's or a scheduled pass's
/// (src/lambda/mod.rs, `report_sweep`).
const SUMMARY: &str = "sweep summary";

/// Sums `field` over the log lines of `logs` whose message is `message`.
fn sum_logged(logs: &[PathBuf], message: &str, field: &str) -> u64 {
    sum_logged_from(logs, message, None, field)
}

/// [`sum_logged`] of the lines of one `source` only (the sweep function
/// logs its due batches and its scheduled passes as one "sweep summary",
/// told apart by `source`).
fn sum_logged_from(logs: &[PathBuf], message: &str, source: Option<&str>, field: &str) -> u64 {
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

/// Runs the world `cfg` and audits it.
pub async fn run(cfg: WorldConfig) -> Report {
    // A record the due path missed meets a scheduled pass once stale and
    // before its finish deadline (two schedules: one may fail), a pass's
    // own time allowed for.
    assert!(
        !cfg.passes_while_producing
            || Duration::from_secs(cfg.windows.stale) + 2 * cfg.pass_every + Duration::from_secs(4)
                < Duration::from_secs(cfg.windows.finish),
        "the world's schedule ({:?}) cannot bring a missed record to a pass before its deadline",
        cfg.pass_every
    );
    let begun = Instant::now();
    let load_at_start = loadavg();
    let _ = std::fs::remove_dir_all(&cfg.dir);
    std::fs::create_dir_all(&cfg.dir).unwrap();
    println!(
        "[chaos] seed {} (CHAOS_SEED={} replays this run's draws), {} s of producing on {}, logs in {}",
        cfg.seed,
        cfg.seed,
        cfg.produce.as_secs(),
        cfg.store.name,
        cfg.dir.display()
    );
    let s3 = cfg.store.bucket().await;
    let bucket_name = s3.bucket().to_owned();
    let due = due_queue(&cfg.store, &s3, cfg.windows.stale, cfg.events).await;

    let mut env = cfg.windows.env();
    env.push(("BUCKET_NAME".into(), bucket_name.clone()));
    env.push(("AWS_ACCESS_KEY_ID".into(), cfg.store.key_pair.0.clone()));
    env.push(("AWS_SECRET_ACCESS_KEY".into(), cfg.store.key_pair.1.clone()));
    env.extend(cfg.extra_env.iter().cloned());
    if cfg.events == Events::Submitter {
        env.push(("RECORD_EVENTS".into(), "submitter".into()));
        env.push(("DUE_QUEUE_URL".into(), due.url.clone()));
        env.push(("AWS_ENDPOINT_URL_SQS".into(), cfg.store.sqs.clone()));
        let order = if cfg.with_claim {
            "with_claim"
        } else {
            "before_claim"
        };
        env.push(("DUE_MESSAGE".into(), order.into()));
    }
    let pool = |function: &str, bin: &Path, size: usize, timeout: u64, salt: u64| PoolConfig {
        function: function.into(),
        bin: bin.to_owned(),
        size,
        env: env.clone(),
        s3: cfg.store.endpoint.clone(),
        seed: cfg.seed ^ salt,
        fault_per_mille: cfg.fault_per_mille,
        spikes: cfg.spikes,
        timeout: Duration::from_secs(timeout),
        log_dir: cfg.dir.clone(),
    };
    // submit: API Gateway's 30 s; sweep: a scheduled run stops 10 s before
    // its deadline (and leases the pass for that long).
    let submit = Pool::start(pool("submit", &cfg.submit_bin, cfg.submit_envs, 30, 1)).await;
    let sweep = Pool::start(pool("sweep", &cfg.sweep_bin, cfg.sweep_envs, 20, 2)).await;
    if cfg.kills {
        submit.kill_when(kill_rule("submit", cfg.seed));
        sweep.kill_when(kill_rule("sweep", cfg.seed));
    }

    // The workers, on a healthy link that counts their requests.
    let worker_link = ChaosProxy::start(&cfg.store.endpoint, 0, cfg.seed).await;
    let runs: Vec<PathBuf> = (0..cfg.workers)
        .map(|i| cfg.dir.join(format!("runs-{i}.jsonl")))
        .collect();
    let mut workers: Vec<tokio::process::Child> = runs
        .iter()
        .enumerate()
        .map(|(i, r)| worker(&cfg, &bucket_name, &worker_link.endpoint, i, r))
        .collect();

    let stats = Arc::new(SweepStats::default());
    let stop_sweep = Arc::new(AtomicBool::new(false));
    let drop_record: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
    // Held (a day) until the windows close, when so told.
    let hold_passes: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(
        (!cfg.passes_while_producing).then(|| Instant::now() + Duration::from_secs(86_400)),
    ));
    let mut background = vec![];
    for _ in 0..cfg.drainers {
        background.push(tokio::spawn(drain(
            due.clone(),
            (cfg.windows.stale * 1000) as f64,
            sweep.clone(),
            stats.clone(),
            stop_sweep.clone(),
            drop_record.clone(),
        )));
    }
    background.push(tokio::spawn(schedule(
        sweep.clone(),
        cfg.pass_every,
        stats.clone(),
        stop_sweep.clone(),
        hold_passes.clone(),
    )));
    let stop_kills = Arc::new(AtomicBool::new(!cfg.kills));
    let killer_task = tokio::spawn(killer(
        vec![submit.clone(), sweep.clone()],
        cfg.kill_every_ms,
        cfg.seed,
        stop_kills.clone(),
    ));

    // The damage that happens while the world runs.
    if let Some(d) = cfg.damage {
        d.during(&s3, &cfg, &drop_record, &hold_passes).await;
    }

    // Produce.
    let ledger: SharedLedger = Arc::new(Mutex::new(Ledger::default()));
    let counter = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let until = started + cfg.produce;
    let producers: Vec<_> = (0..cfg.producers)
        .map(|i| {
            tokio::spawn(
                Producer {
                    index: i,
                    rng: fastrand::Rng::with_seed(cfg.seed.wrapping_add(i as u64 * 7919)),
                    ledger: ledger.clone(),
                    submit: submit.clone(),
                    until,
                    counter: counter.clone(),
                }
                .run(),
            )
        })
        .collect();
    let all_proxies = |extra: &ChaosProxy| {
        let mut v: Vec<&ChaosProxy> = submit.proxies().chain(sweep.proxies()).collect();
        v.push(extra);
        reached(&v)
    };
    let mut last = (Instant::now(), 0u64);
    while producers.iter().any(|p| !p.is_finished()) {
        tokio::time::sleep(Duration::from_millis(250)).await;
        if last.0.elapsed() >= cfg.progress_every {
            let now = all_proxies(&worker_link) + stats.sqs_requests.load(Ordering::SeqCst);
            let rate = (now - last.1) as f64 / last.0.elapsed().as_secs_f64();
            last = (Instant::now(), now);
            let l = ledger.lock().unwrap();
            let faults: u64 = submit
                .proxies()
                .chain(sweep.proxies())
                .map(|p| p.counts.faults.load(Ordering::SeqCst))
                .sum();
            println!(
                "[chaos] {:>4} s: {} submits sent, {} answered or taken, kills {}, faults {}, \
                 store {:.0} req/s, due messages {} received, runs {}",
                started.elapsed().as_secs(),
                l.items.len(),
                l.answers.len() + l.sqs_taken.len(),
                submit.kills().len() + sweep.kills().len(),
                faults,
                rate,
                stats.received.load(Ordering::SeqCst),
                runs.iter().map(|r| lines(r)).sum::<usize>(),
            );
        }
    }
    for p in producers {
        p.await.expect("a producer panicked");
    }
    let produced_for = started.elapsed();
    let load_at_stop = loadavg();
    let store_requests_in_production =
        all_proxies(&worker_link) + stats.sqs_requests.load(Ordering::SeqCst);
    let workers_requests = reached(&[&worker_link]);
    let mut by_kind = std::collections::BTreeMap::new();
    kinds_of(
        "submit",
        &submit.proxies().collect::<Vec<_>>(),
        &mut by_kind,
    );
    kinds_of("sweep", &sweep.proxies().collect::<Vec<_>>(), &mut by_kind);
    kinds_of("workers", &[&worker_link], &mut by_kind);
    let requests_by_kind: Vec<((String, String), u64)> = by_kind.into_iter().collect();
    let due_requests = stats.sqs_requests.load(Ordering::SeqCst);
    let requests_by_client = (
        store_requests_in_production - workers_requests - due_requests,
        workers_requests,
        due_requests,
    );
    stop_kills.store(true, Ordering::SeqCst);
    let _ = killer_task.await;
    submit.kill_when(Arc::new(|_, _| None));
    sweep.kill_when(Arc::new(|_, _| None));

    // The windows close, with the link still failing: every record's
    // finishing is the sweeper's by now.
    let last_send = ledger.lock().unwrap().last_send.unwrap_or(started);
    let closed = last_send + cfg.windows.settled_after() + Duration::from_secs(1);
    println!(
        "[chaos] producers stopped after {:.0} s; the windows close in {:.0} s",
        produced_for.as_secs_f64(),
        closed
            .saturating_duration_since(Instant::now())
            .as_secs_f64()
    );
    tokio::time::sleep_until(closed.into()).await;
    for p in submit.proxies().chain(sweep.proxies()) {
        p.heal();
    }
    // Orphan payloads are the scheduled pass's once they are that old, and
    // a stale marker once it has stood for the late-write margin (the
    // ready index's scan, src/protocol/sweep/markers.rs): one more pass
    // once the last marker that landed before the windows closed is that
    // old, healed, not held.
    *hold_passes.lock().unwrap() = None;
    tokio::time::sleep(Duration::from_secs(cfg.windows.late_write + 1)).await;
    let mut last_pass = None;
    let mut last_pass_at = None;
    // Until one completes (a run stops before its deadline keeping its
    // place; another holds the pass for its lease).
    for _ in 0..20 {
        last_pass_at = Some(chrono::Utc::now());
        last_pass = pass(&sweep, &stats).await;
        if last_pass.as_ref().is_some_and(|v| v["complete"] == true) {
            break;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    println!("[chaos] the last scheduled pass: {last_pass:?}");

    // Every key the bucket has a record of, submitted once more through the
    // batch door (the link healed): what the service says of it now.
    let final_replays = audit::replay_every_key(&s3, &submit, &ledger).await;

    if let Some(d) = cfg.damage {
        d.before_idle(&s3, &runs).await;
    }
    // The workers go idle: no run for a while.
    let mut seen = (Instant::now(), usize::MAX);
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let n: usize = runs.iter().map(|r| lines(r)).sum();
        if n != seen.1 {
            seen = (Instant::now(), n);
        } else if seen.0.elapsed() > Duration::from_secs(8) {
            break;
        }
    }
    if let Some(d) = cfg.damage {
        d.after_idle(&s3, &runs).await;
    }
    stop_sweep.store(true, Ordering::SeqCst);
    for t in background {
        let _ = t.await;
    }
    for w in &mut workers {
        let _ = w.start_kill();
        let _ = w.wait().await;
    }
    let store_requests_total =
        all_proxies(&worker_link) + stats.sqs_requests.load(Ordering::SeqCst);
    submit.stop().await;
    sweep.stop().await;

    // The audit.
    println!("[chaos] auditing the bucket");
    let mut logs = submit.logs();
    logs.extend(sweep.logs());
    logs.extend((0..cfg.workers).map(|i| cfg.dir.join(format!("worker-{i}.log"))));
    let ledger = Arc::try_unwrap(ledger)
        .map(|m| m.into_inner().unwrap())
        .unwrap_or_else(|_| panic!("the ledger is still shared"));
    let mut evidence =
        Evidence::collect(&s3, &ledger, &runs, &logs, &cfg.windows, last_pass_at).await;
    evidence.due_named = stats.first_named.lock().unwrap().clone();
    evidence.with_claim_window = cfg.events == Events::Submitter && cfg.with_claim;
    let audit = audit::audit(&evidence);

    let mut faults_by_kind: Vec<(String, u64)> = KINDS.iter().map(|k| (k.to_string(), 0)).collect();
    let (mut spikes, mut spike_ms) = (0, 0);
    for p in submit.proxies().chain(sweep.proxies()) {
        for (i, f) in faults_by_kind.iter_mut().enumerate() {
            f.1 += p.counts.kind(i);
        }
        spikes += p.counts.spikes.load(Ordering::SeqCst);
        spike_ms += p.counts.spike_ms.load(Ordering::SeqCst);
    }
    let (sweep_logs, submit_logs) = (sweep.logs(), submit.logs());
    let mut kills = submit.kills();
    kills.extend(sweep.kills());
    let mut rss = submit.rss();
    rss.extend(sweep.rss());
    Report {
        produced_for,
        total: begun.elapsed(),
        ledger,
        kills,
        rss,
        faults_by_kind,
        spikes,
        spike_ms,
        store_requests_in_production,
        store_requests_total,
        requests_by_client,
        requests_by_kind,
        finished_by_due: sum_logged_from(&sweep_logs, SUMMARY, Some("due batch"), "finished"),
        due_errors: sum_logged_from(&sweep_logs, SUMMARY, Some("due batch"), "errors"),
        due_past_deadline: sum_logged_from(
            &sweep_logs,
            SUMMARY,
            Some("due batch"),
            "past_deadline",
        ),
        finished_by_passes_logged: sum_logged_from(
            &sweep_logs,
            SUMMARY,
            Some("scheduled pass"),
            "finished",
        ),
        passes_busy_logged: sum_logged_from(&sweep_logs, SUMMARY, Some("scheduled pass"), "busy"),
        payloads_deleted_logged: sum_logged_from(
            &sweep_logs,
            SUMMARY,
            Some("scheduled pass"),
            "payloads_deleted",
        ),
        markers_deleted_logged: sum_logged_from(
            &sweep_logs,
            SUMMARY,
            Some("scheduled pass"),
            "markers_deleted",
        ),
        recovered_by_submits: sum_logged(&submit_logs, "submitted", "recovered")
            + sum_logged(&submit_logs, "batch item submitted", "recovered"),
        load: (load_at_start, load_at_stop),
        starts: submit.starts.load(Ordering::SeqCst) + sweep.starts.load(Ordering::SeqCst),
        exits: submit.exits.load(Ordering::SeqCst) + sweep.exits.load(Ordering::SeqCst),
        init_errors: submit.init_errors.load(Ordering::SeqCst)
            + sweep.init_errors.load(Ordering::SeqCst),
        sweep: Arc::try_unwrap(stats).unwrap_or_default(),
        audit,
        final_replays,
        config: cfg,
    }
}

/// Which door each item went through, for the figures.
pub fn by_door(l: &Ledger) -> Vec<(Door, usize)> {
    let mut v: Vec<(Door, usize)> = [Door::Http, Door::Batch, Door::Sqs]
        .into_iter()
        .map(|d| (d, l.items.iter().filter(|i| i.door == d).count()))
        .collect();
    v.sort();
    v
}
