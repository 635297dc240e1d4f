//! What a world is made of: its windows, its due queue's events, its store, its configuration, and what it reports.

use super::audit::Audit;
use super::damage::Damage;
use super::producers::Ledger;
#[allow(unused_imports)]
use super::world::*;
use crate::common::lambda_pool::{Kill, Rss};
use idempotent_submit::store::S3Store;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

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

    pub fn env(&self) -> Vec<(String, String)> {
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
    pub seaweedfs: bool,
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
    pub async fn bucket(&self) -> S3Store {
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
