//! The sweeper: finishing (and writing nothing where nothing is missing),
//! expiry, dry runs, keeping its place, races, and reads per record that do
//! not grow with how often it runs; in memory (as S3, and as stores that
//! list folders first or in no order), and on moto and SeaweedFS, under
//! both `LIST_ORDER`s.

/// The `Behaviour` × `LIST_ORDER` matrix of the in-memory tests: one test a
/// row, each running `check(behaviour, order)` on every store its row names
/// (below: [`s3`], [`folders_first`], [`no_order`],
/// [`no_conditional_delete`]).
macro_rules! on_stores {
    ($check:ident: $($test:ident => [$($store:expr),+ $(,)?];)+) => {$(
        #[tokio::test]
        async fn $test() {
            $(
                let (behaviour, order) = $store;
                $check(behaviour, order).await;
            )+
        }
    )+};
}

mod checkpoint;
mod collect;
mod finish;
mod mutants;
mod mutants_pass;
mod mutants_tail;
mod payload_merge;
mod payloads;
mod races;
mod reads;
mod real;
mod resume;
mod share;
mod tail;

use crate::common;

use std::collections::HashMap;
use std::sync::Arc;

use crate::common::World;
use chrono::{DateTime, Duration, Utc};
use futures::FutureExt;
use idempotent_submit::store::{
    Behaviour, Fault, FaultyStore, MemoryStore, Op, PutMode, Store, StoreError,
};
use idempotent_submit::testing::protocol::sweep::RecordOutcome;
use idempotent_submit::testing::protocol::{RecordStatus, SweepOptions, SweepSummary};
use idempotent_submit::{Clock, ListOrder, ManualClock, Queue};
use serde_json::json;

/// Every `op` on a key under `prefix` fails with a retryable 503 until
/// `heal`.
fn fail_until_healed(f: &FaultyStore<MemoryStore>, op: Op, prefix: &str) {
    f.inject(Some(op), prefix, 1, usize::MAX, common::unavailable("503"));
}

impl World {
    /// A submit of `key` that dies at `fault` (on the first call matching
    /// `op` and `prefix`).
    async fn interrupted_at(&self, key: &str, op: Op, prefix: &str, fault: Fault) -> uuid::Uuid {
        self.submit_dying_at(key, json!({"k": key}), op, prefix, fault)
            .await;
        self.record(key).await.task_id
    }

    /// The record of `key` is still the one write its submit made:
    /// `creating`, with its `pending_task`, under the ETag it was written
    /// with.
    async fn assert_still_its_first_write(
        &self,
        key: &str,
        written: &idempotent_submit::store::ETag,
    ) {
        let (rec, meta) = self.record_meta(key).await;
        assert_eq!(rec.status, Some(RecordStatus::Creating), "{key}");
        assert!(rec.pending_task.is_some(), "{key}");
        assert_eq!(&meta.etag, written, "{key}: the same write");
    }

    /// A submit of `key` whose process died right after writing its record:
    /// a `creating` record, as a crash leaves it. Its task id.
    async fn crashed(&self, key: &str) -> uuid::Uuid {
        self.interrupted_at(key, Op::PutCreate, "idempotency/", Fault::CrashAfter)
            .await
    }

    /// A world with a crashed submit of each of `keys`, 11 minutes on: their
    /// records stale, for a pass to finish.
    async fn with_stale(keys: &[&str]) -> World {
        let w = World::new();
        for k in keys {
            w.crashed(k).await;
        }
        w.clock.advance(Duration::minutes(11));
        w
    }

    /// A submit of `key` (input `1`) that lives `ttl`.
    async fn submit_living(&self, key: &str, ttl: Duration) {
        let q = self.queue();
        let submit = q.submit("t", json!(1)).idempotency_key(key);
        submit.idempotency_ttl(ttl).await.unwrap();
    }

    /// A submit of `key` with the input its crashed submit had: its task id.
    async fn submit_key(&self, key: &str) -> uuid::Uuid {
        let q = self.queue();
        let submit = q.submit("t", json!({"k": key})).idempotency_key(key);
        submit.await.unwrap().task_id
    }

    /// A queue on `store` at this world's clock, with `settings`.
    fn queue_with(&self, store: impl Store, settings: idempotent_submit::Settings) -> Queue {
        Queue::with_clock(store, Arc::new(self.clock.clone()), settings)
    }

    async fn sweep(&self, dry_run: bool) -> SweepSummary {
        self.queue()
            .engine()
            .sweep(&SweepOptions {
                dry_run,
                ..Default::default()
            })
            .await
            .unwrap()
    }

    /// A scheduled pass through the bucket, every `op` under `prefix`
    /// failing until the fault injector it returns is healed.
    async fn sweep_failing(
        &self,
        op: Op,
        prefix: &str,
    ) -> (SweepSummary, FaultyStore<MemoryStore>) {
        let f = FaultyStore::new(self.bucket.clone());
        fail_until_healed(&f, op, prefix);
        (self.sweep_over(f.clone()).await, f)
    }

    /// A scheduled pass through `store` (the bucket behind faults).
    async fn sweep_over(&self, store: impl Store) -> SweepSummary {
        self.queue_over(store)
            .engine()
            .sweep(&SweepOptions::default())
            .await
            .unwrap()
    }
}

/// The counts a dry run has to match: everything the real pass would do.
fn counts(s: &SweepSummary) -> [u64; 9] {
    [
        s.scanned,
        s.reads,
        s.finished,
        s.expired_deleted,
        s.expired_kept,
        s.payloads_deleted,
        s.markers_deleted,
        s.errors,
        u64::from(s.complete),
    ]
}

/// A task `status` available at `at`, under our shard of one digit, with
/// its marker in that minute (or none): the marker's key.
async fn task_with_marker(
    store: &impl Store,
    status: &str,
    at: DateTime<Utc>,
    task: bool,
) -> String {
    let id = uuid::Uuid::new_v4().hyphenated().to_string();
    if task {
        let body = json!({"id": id, "status": status, "available_at": at.to_rfc3339()});
        store
            .put(
                &format!("tasks/{}/{id}.json", &id[..1]),
                serde_json::to_vec(&body).unwrap().into(),
                PutMode::Create,
            )
            .await
            .unwrap();
    }
    let marker = format!(
        "ready/{}/{:010}/{id}",
        &id[..1],
        at.timestamp().div_euclid(60)
    );
    store
        .put(&marker, bytes::Bytes::new(), PutMode::Overwrite)
        .await
        .unwrap();
    marker
}

/// A payload under a new task id of `slice` (its first byte), as a dead
/// replay leaves it: no task names it.
async fn payload_of_slice(store: &impl Store, slice: u32) -> String {
    let mut b = *uuid::Uuid::new_v4().as_bytes();
    b[0] = slice as u8;
    let key = format!("payloads/{}/input.json", uuid::Uuid::from_bytes(b));
    store
        .put(&key, b"1".to_vec().into(), PutMode::Create)
        .await
        .unwrap();
    key
}

/// A payload of `slice` whose task is in the bucket under `shard` digits
/// of its id (another client's shard length, or ours).
async fn payload_with_its_task(store: &impl Store, slice: u32, shard: usize) -> String {
    let key = payload_of_slice(store, slice).await;
    let id = key.split('/').nth(1).unwrap().to_owned();
    store
        .put(
            &format!("tasks/{}/{id}.json", &id[..shard]),
            b"{}".to_vec().into(),
            PutMode::Create,
        )
        .await
        .unwrap();
    key
}

/// The test settings, the scheduled pass listing as `order` says.
fn ordered(order: ListOrder) -> idempotent_submit::Settings {
    idempotent_submit::Settings {
        list_order: order,
        ..common::settings()
    }
}

/// A clock that moves one second every time it is read: whatever reads it
/// twice sees two instants, as a real clock does.
#[derive(Clone)]
struct TickingClock(ManualClock);

impl Clock for TickingClock {
    fn now(&self) -> chrono::DateTime<chrono::Utc> {
        self.0.advance(Duration::seconds(1));
        self.0.now()
    }
}

/// A bucket holding one expired record per second of `LastModified`, `n`
/// of them under each of `scopes`, on a clock that ticks at every read.
async fn dense_bucket(scopes: &[(&str, usize)]) -> (ManualClock, MemoryStore) {
    // Ready, and expired from the start: whenever a pass reads one, it
    // deletes it.
    dense_bucket_expiring(scopes, "2026-01-27T13:00:00Z").await
}

/// Records of `scopes`, ready, expiring at `expires_at`, written a second
/// apart from the epoch on.
async fn dense_bucket_expiring(
    scopes: &[(&str, usize)],
    expires_at: &str,
) -> (ManualClock, MemoryStore) {
    let manual = ManualClock::at_epoch();
    let bucket = common::memory_store(&manual);
    let q = Queue::with_clock(bucket.clone(), Arc::new(manual.clone()), common::settings());
    q.submit("t", json!(1))
        .idempotency_key("template")
        .await
        .unwrap();
    let template_key = common::first_under(bucket.keys(), "idempotency/");
    let mut v: serde_json::Value =
        serde_json::from_slice(&bucket.get(&template_key).await.unwrap().body).unwrap();
    bucket.delete(&template_key, None).await.unwrap();
    v["expires_at"] = json!(expires_at);
    v["status"] = json!("ready");
    v.as_object_mut().unwrap().remove("pending_task");
    let body: bytes::Bytes = serde_json::to_vec(&v).unwrap().into();
    let mut i: u64 = 0;
    for (scope, n) in scopes {
        for _ in 0..*n {
            i += 1;
            let hash = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(i.to_le_bytes()));
            manual.advance(Duration::seconds(1));
            bucket
                .put(
                    &format!("idempotency/{scope}/{hash}.json"),
                    body.clone(),
                    PutMode::Create,
                )
                .await
                .unwrap();
        }
    }
    (manual, bucket)
}

/// A default TTL of an hour; an operation timeout long enough for a clock
/// that ticks at every read by every one of the records read side by side.
fn short_ttl_settings() -> idempotent_submit::Settings {
    idempotent_submit::Settings {
        default_ttl: Duration::hours(1),
        operation_timeout: Duration::minutes(10),
        ..common::settings()
    }
}

/// S3's answers, swept by ranges (`LIST_ORDER=bytes`) or by folders (`any`).
fn s3(order: ListOrder) -> (Behaviour, ListOrder) {
    (Behaviour::default(), order)
}

/// A store that lists folders first (SeaweedFS).
fn folders_first(order: ListOrder) -> (Behaviour, ListOrder) {
    (Behaviour::seaweedfs(), order)
}

/// A store that lists in no order (S3 Express One Zone; `seed` for its
/// shuffles), which only a pass by folders can sweep.
fn no_order(seed: u64) -> (Behaviour, ListOrder) {
    (Behaviour::s3_express(seed), ListOrder::Any)
}

/// A store that ignores If-Match on DELETE (MinIO).
fn no_conditional_delete() -> (Behaviour, ListOrder) {
    (Behaviour::minio(), ListOrder::Bytes)
}

/// The keys of `store` under `prefix`, listed through it (S3's order).
async fn keys_under(store: &dyn Store, prefix: &str) -> Vec<String> {
    let mut keys = common::all_keys(store).await;
    keys.retain(|k| k.starts_with(prefix));
    keys
}
