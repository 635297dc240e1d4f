//! A world in memory: a manual clock, a bucket, and the bucket behind the
//! fault injector; submits that die part-way (a crash, a failure the process
//! does not outlive); and what the tests read of it (the record of a key in
//! scope `t`, its task, the sweeper's handling of its event). A test file
//! adds the helpers only it needs in an `impl World` block of its own, under
//! names no other file uses (all the blocks are of this one type).

use std::sync::Arc;

use idempotent_submit::protocol::IdempotencyKey;
use idempotent_submit::protocol::{Record, RecordOutcome};
use idempotent_submit::store::{
    ETag, Fault, FaultyStore, MemoryStore, ObjectMeta, Op, Store, StoreError,
};
use idempotent_submit::{ManualClock, Queue, SubmitError};
use serde_json::Value;

use super::{memory_store, settings};

pub struct World {
    pub clock: ManualClock,
    /// The bucket, straight.
    pub bucket: MemoryStore,
    /// The same bucket behind the fault injector, with its call log: what
    /// `process()` calls through.
    pub faulty: FaultyStore<MemoryStore>,
}

impl World {
    pub fn new() -> Self {
        let clock = ManualClock::at_epoch();
        let bucket = memory_store(&clock);
        Self::over(clock, bucket)
    }

    /// The bucket's clock stands `skew` from the machine's (positive: S3 is
    /// ahead).
    pub fn skewed(skew: chrono::Duration) -> Self {
        let w = Self::new();
        w.bucket.set_skew(skew);
        w
    }

    /// A world on `bucket` at `clock`, with a fresh fault injector.
    pub fn over(clock: ManualClock, bucket: MemoryStore) -> Self {
        let faulty = FaultyStore::new(bucket.clone());
        World {
            clock,
            bucket,
            faulty,
        }
    }

    /// Another process on the same bucket and clock: no faults, a fresh
    /// call log.
    pub fn next_process(&self) -> Self {
        Self::over(self.clock.clone(), self.bucket.clone())
    }

    pub fn queue_over(&self, store: impl Store) -> Queue {
        Queue::with_clock(store, Arc::new(self.clock.clone()), settings())
    }

    /// A queue straight on the bucket.
    pub fn queue(&self) -> Queue {
        self.queue_over(self.bucket.clone())
    }

    /// A queue whose store calls go through the fault injector.
    pub fn process(&self) -> Queue {
        self.queue_over(self.faulty.clone())
    }

    /// The first `op` of `process()` on a key under `prefix` meets `fault`.
    pub fn fault_once(&self, op: Op, prefix: &str, fault: Fault) {
        self.faulty.inject(Some(op), prefix, 1, 1, fault);
    }

    /// A submit of `key` with `input` through a store on the bucket whose
    /// first `op` under `prefix` meets `fault`; its error.
    pub async fn submit_dying_at(
        &self,
        key: &str,
        input: Value,
        op: Op,
        prefix: &str,
        fault: Fault,
    ) -> SubmitError {
        let q = self.queue_over(dying_at(self.bucket.clone(), op, prefix, fault));
        q.submit("t", input)
            .idempotency_key(key)
            .await
            .expect_err("the submit dies")
    }

    /// A submit of `key` with `input` whose process died right after
    /// writing its record; the record's key.
    pub async fn interrupted_after_its_record(&self, key: &str, input: Value) -> String {
        self.submit_dying_at(key, input, Op::PutCreate, "idempotency/", Fault::CrashAfter)
            .await;
        self.record_key(key)
    }

    /// A fresh process (after a crash): straight to the bucket.
    pub fn restarted(&self) -> Queue {
        self.queue()
    }

    /// The keys of the bucket that start with `prefix`.
    pub fn keys(&self, prefix: &str) -> Vec<String> {
        self.bucket
            .keys()
            .into_iter()
            .filter(|k| k.starts_with(prefix))
            .collect()
    }

    /// How many keys of the bucket start with `prefix`.
    pub fn count(&self, prefix: &str) -> usize {
        self.keys(prefix).len()
    }

    /// The object at `key`, as JSON.
    pub async fn json(&self, key: &str) -> Value {
        serde_json::from_slice(&self.bucket.get(key).await.unwrap().body).unwrap()
    }

    /// Where the record of `key` (scope `t`, no tenant) is.
    pub fn record_key(&self, key: &str) -> String {
        let key = IdempotencyKey::parse(key).unwrap();
        let hash = idempotent_submit::protocol::hash::key_hash("t", &key, None);
        format!("idempotency/t/{}.json", hash.trim_start_matches("sha256:"))
    }

    /// The record of `key` and its metadata (its ETag tells one write from
    /// another).
    pub async fn record_meta(&self, key: &str) -> (Record, ObjectMeta) {
        self.restarted()
            .record("t", key, None)
            .await
            .unwrap()
            .expect("a record")
    }

    /// The record of `key`.
    pub async fn record(&self, key: &str) -> Record {
        self.record_meta(key).await.0
    }

    /// The task object of `key`'s record as it is in the bucket, and its
    /// ETag.
    pub async fn task(&self, key: &str) -> (Value, ETag) {
        let o = self
            .bucket
            .get(&self.record(key).await.task_key)
            .await
            .unwrap();
        (serde_json::from_slice(&o.body).unwrap(), o.meta.etag)
    }

    /// The sweeper handles the S3 event of `key`'s record as the due queue
    /// delivers it: `STALE_CREATING_AFTER_SECONDS` after the write.
    pub async fn sweep_event(&self, key: &str) -> RecordOutcome {
        self.clock.advance(settings().stale_creating_after);
        self.restarted()
            .engine()
            .sweep_record(&self.record_key(key), false, None)
            .await
    }

    /// The same, with the sweeper's calls logged by the fault injector.
    pub async fn logged_sweep_event(&self, key: &str) -> RecordOutcome {
        self.clock.advance(settings().stale_creating_after);
        self.process()
            .engine()
            .sweep_record(&self.record_key(key), false, None)
            .await
    }
}

/// `store` behind a fault injector whose first `op` on a key under `prefix`
/// meets `fault`: `Fault::CrashAfter` on `Op::PutCreate` of `idempotency/`
/// is a submit that died right after writing its record.
pub fn dying_at<S: Store + Clone>(store: S, op: Op, prefix: &str, fault: Fault) -> FaultyStore<S> {
    let f = FaultyStore::new(store);
    f.inject(Some(op), prefix, 1, 1, fault);
    f
}

/// A submit of `key` (task type `t`, input `1`) that died right after
/// writing its record: in flight, its task not written.
pub async fn died_after_record<S: Store + Clone>(store: S, key: &str) {
    let dying = dying_at(store, Op::PutCreate, "idempotency/", Fault::CrashAfter);
    Queue::new(dying, settings())
        .submit("t", serde_json::json!(1))
        .idempotency_key(key)
        .await
        .unwrap_err();
}

/// A retryable failure (a 503, a timeout) saying `why`.
pub fn unavailable(why: &str) -> Fault {
    Fault::Fail(StoreError::Unavailable(why.into()))
}
