//! A world in memory: a manual clock, a bucket, and the bucket behind the
//! fault injector; and submits that die part-way (a crash, a failure the
//! process does not outlive). A test file adds its own helpers to `World` in
//! an `impl World` block of its own.

use std::sync::Arc;

use idempotent_submit::store::{Fault, FaultyStore, MemoryStore, Op, Store};
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

    /// How many keys of the bucket start with `prefix`.
    pub fn count(&self, prefix: &str) -> usize {
        self.bucket
            .keys()
            .iter()
            .filter(|k| k.starts_with(prefix))
            .count()
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
