//! The store model of `BENCH_ONLY=scale_submits` (prefix_rates.rs, whose
//! docs say what it models): S3's per-prefix request rates over the
//! in-memory store, on tokio's clock; and the audit of a bucket against the
//! submits' answers. tests/prefix_rates.rs checks it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use idempotent_submit::clock::Clock;
use idempotent_submit::store::{MemoryStore, Op, Store, StoreError};
use idempotent_submit::{Queue, Settings, Submitted};
use tokio::time::Instant;

use super::wrap::{Call, Hooks, Wrapped};

/// PUT, COPY, POST, DELETE per second per partitioned prefix.
pub(crate) const PUT_RATE: f64 = 3500.0;
/// GET, HEAD (and LIST) per second per partitioned prefix.
pub(crate) const GET_RATE: f64 = 5500.0;
/// Seconds of its rate a partition's bucket holds: S3 publishes no burst
/// allowance, so a small one (a tenth of a second).
pub(crate) const BURST: f64 = 0.1;
/// Each way of a request: 30 ms a round trip, as the other sections.
pub(crate) const HALF_TRIP: Duration = Duration::from_millis(15);

/// How far S3 has split the bucket (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Split {
    Folders,
    Whole,
}

/// The partition a key's request is charged to: up to its second `/`
/// (`idempotency/{scope}/`, `tasks/{shard}/`, `ready/{shard}/`) under
/// [`Split::Folders`]; the bucket under [`Split::Whole`].
pub(crate) fn partition(split: Split, key: &str) -> &str {
    match split {
        Split::Whole => "",
        Split::Folders => {
            let mut slashes = key.match_indices('/');
            match slashes.nth(1) {
                Some((i, _)) => &key[..=i],
                None => key,
            }
        }
    }
}

/// A token bucket: tokens and when they were last topped up.
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// Every partition's buckets, and what it admitted and refused.
pub(crate) struct Limiter {
    split: Split,
    buckets: Mutex<HashMap<(String, bool), Bucket>>,
    admitted: Mutex<HashMap<String, u64>>,
    /// Partitions other producers keep empty (the tests' burst).
    held: Mutex<Vec<String>>,
    pub(crate) slowdowns: AtomicU64,
}

impl Limiter {
    pub(crate) fn new(split: Split) -> Self {
        Limiter {
            split,
            buckets: Mutex::new(HashMap::new()),
            admitted: Mutex::new(HashMap::new()),
            held: Mutex::new(Vec::new()),
            slowdowns: AtomicU64::new(0),
        }
    }

    /// Takes a token of `key`'s partition (a write's or a read's), or
    /// refuses.
    pub(crate) fn admit(&self, key: &str, write: bool) -> bool {
        let p = partition(self.split, key);
        let rate = if write { PUT_RATE } else { GET_RATE };
        let now = Instant::now();
        if self.is_held(p) {
            self.slowdowns.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        let b = buckets.entry((p.to_owned(), write)).or_insert(Bucket {
            tokens: rate * BURST,
            at: now,
        });
        let topped = b.tokens + rate * (now - b.at).as_secs_f64();
        b.tokens = topped.min(rate * BURST);
        b.at = now;
        if b.tokens < 1.0 {
            self.slowdowns.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        b.tokens -= 1.0;
        drop(buckets);
        let mut admitted = self.admitted.lock().unwrap_or_else(|e| e.into_inner());
        *admitted.entry(p.to_owned()).or_default() += 1;
        true
    }

    /// Until [`Limiter::release`], `key`'s partition has no token for
    /// anyone: other producers take them all.
    #[allow(dead_code)] // tests/prefix_rates.rs's: the bench holds none
    pub(crate) fn hold(&self, key: &str) {
        let p = partition(self.split, key).to_owned();
        self.held.lock().unwrap_or_else(|e| e.into_inner()).push(p);
    }

    /// Every held partition gets its tokens again.
    #[allow(dead_code)] // tests/prefix_rates.rs's
    pub(crate) fn release(&self) {
        self.held.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    fn is_held(&self, p: &str) -> bool {
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.iter().any(|h| h == p)
    }

    /// The partition that admitted the most requests, and how many.
    pub(crate) fn hottest(&self) -> (String, u64) {
        let admitted = self.admitted.lock().unwrap_or_else(|e| e.into_inner());
        admitted
            .iter()
            .max_by_key(|(p, n)| (**n, std::cmp::Reverse((*p).clone())))
            .map(|(p, n)| (p.clone(), *n))
            .unwrap_or_default()
    }
}

/// The in-memory store behind the partitions' rates and the round trip.
#[derive(Clone)]
pub(crate) struct Throttled {
    inner: MemoryStore,
    limits: Arc<Limiter>,
}

/// A refused request is S3's 503 SlowDown, which the S3 adapter maps to
/// `Unavailable` (src/store/s3.rs): what the protocol sees is the same.
#[async_trait::async_trait]
impl Hooks for Throttled {
    type Inner = MemoryStore;

    fn inner(&self) -> &MemoryStore {
        &self.inner
    }

    async fn before(&self, call: &Call<'_>) -> Result<(), StoreError> {
        tokio::time::sleep(HALF_TRIP).await;
        let write = matches!(
            call.op,
            Op::Put | Op::PutCreate | Op::PutUpdate | Op::Delete
        );
        if self.limits.admit(call.key, write) {
            return Ok(());
        }
        tokio::time::sleep(HALF_TRIP).await;
        Err(StoreError::Unavailable("503 SlowDown".into()))
    }

    async fn after(&self, _call: &Call<'_>, _ok: bool) {
        tokio::time::sleep(HALF_TRIP).await;
    }
}

/// The protocol's clock on tokio's (paused) one, from a fixed instant.
struct TokioClock {
    base: DateTime<Utc>,
    start: Instant,
}

impl Clock for TokioClock {
    fn now(&self) -> DateTime<Utc> {
        let d = chrono::Duration::from_std(self.start.elapsed()).unwrap_or_default();
        self.base + d
    }
}

/// A store of the model, its limiter, the memory store under it, and a
/// queue over it on the simulated clock.
/// (See prefix_rates.rs.)
pub(crate) fn model(split: Split) -> (Arc<Queue>, Arc<Limiter>, MemoryStore) {
    let base = DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_default();
    let clock: Arc<dyn Clock> = Arc::new(TokioClock {
        base,
        start: Instant::now(),
    });
    let mem = MemoryStore::new(clock.clone());
    let limits = Arc::new(Limiter::new(split));
    let store = Wrapped(Throttled {
        inner: mem.clone(),
        limits: limits.clone(),
    });
    let q = Queue::with_clock(store, clock, Settings::default());
    (Arc::new(q), limits, mem)
}

/// What the bucket holds, judged against the submits' answers.
#[derive(Default, Debug)]
pub(crate) struct Audit {
    /// A 201 or 200 whose task object is missing, or whose record names
    /// another task.
    pub(crate) lost: usize,
    /// Idempotency keys with more than one task object.
    pub(crate) doubled: usize,
}

/// Checks every successful answer against the bucket, and every task
/// object against the others.
pub(crate) async fn audit(mem: &MemoryStore, ok: &[&Submitted]) -> Audit {
    let mut a = Audit::default();
    let mut per_key: HashMap<String, usize> = HashMap::new();
    for k in mem.keys().into_iter().filter(|k| k.starts_with("tasks/")) {
        let Ok(o) = mem.get(&k).await else { continue };
        let v: serde_json::Value = serde_json::from_slice(&o.body).unwrap_or_default();
        if let Some(h) = v["idempotency"]["key_hash"].as_str() {
            *per_key.entry(h.to_owned()).or_default() += 1;
        }
    }
    a.doubled = per_key.values().filter(|n| **n > 1).count();
    for s in ok {
        let has_task = mem.head(&s.task_key).await.is_ok();
        let names_it = match &s.idempotency {
            Some(i) => {
                let hex = i.key_hash.trim_start_matches("sha256:");
                let rec = format!("idempotency/{}/{hex}.json", i.scope);
                match mem.get(&rec).await {
                    Ok(o) => String::from_utf8_lossy(&o.body).contains(&s.task_id.to_string()),
                    Err(_) => false,
                }
            }
            None => true,
        };
        if !has_task || !names_it {
            a.lost += 1;
        }
    }
    a
}
