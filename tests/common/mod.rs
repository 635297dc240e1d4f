//! Test harness, shared by the test files (a module of tests/suite.rs, and
//! `mod common;` in the two crates of their own) and, file by file, the
//! bench: the moto server and its buckets (moto.rs), the in-memory twin
//! and its worlds (world.rs), clocks (clocks.rs), the sample events
//! (events.rs), the Lambda side (lambda.rs, runtime_api.rs; lambda_pool.rs,
//! many processes of a function that can be killed; handler.rs, the
//! `submit` handler in process), the chaos proxy
//! and the OpenAPI check; a second S3 store, SeaweedFS (seaweedfs.rs).
//!
//! A test that needs S3 fails when no S3 can be had: it never skips.
#![allow(dead_code)]

pub mod chaos_proxy;
pub mod clocks;
pub mod due;
pub mod events;
pub mod handler;
pub mod lambda;
pub mod lambda_pool;
pub mod moto;
pub mod openapi;
pub mod runtime_api;
pub mod seaweedfs;
pub mod world;
pub mod wrap;

// A crate of its own (Cargo.toml) uses only some of these.
#[allow(unused_imports)]
pub use events::{event, sqs_event};
#[allow(unused_imports)]
pub use moto::{
    KeyVersions, Versioning, moto_due_queue, moto_endpoint, moto_queue, moto_secret, moto_sqs,
    moto_store, moto_store_versioned, moto_store_with, moto_versions, receive_all,
};
#[allow(unused_imports)]
pub use seaweedfs::{
    SeaweedFs, seaweedfs, seaweedfs_bucket, seaweedfs_store, seaweedfs_store_versioned,
    seaweedfs_store_with,
};
#[allow(unused_imports)]
pub use world::{World, unavailable};
#[allow(unused_imports)]
pub use wrap::{Call, Hooks, Wrapped};

use std::sync::Arc;

use idempotent_submit::store::{MemoryStore, Op};
use idempotent_submit::{Clock, ManualClock, RetryPolicy, Settings, StoreError};

pub fn memory_store(clock: &ManualClock) -> MemoryStore {
    MemoryStore::new(Arc::new(clock.clone()) as Arc<dyn Clock>)
}

/// The in-memory twin of a versioned bucket.
pub fn memory_store_versioned(clock: &ManualClock) -> MemoryStore {
    MemoryStore::versioned(Arc::new(clock.clone()) as Arc<dyn Clock>)
}

pub fn faulty(clock: &ManualClock) -> idempotent_submit::store::FaultyStore<MemoryStore> {
    idempotent_submit::store::FaultyStore::new(memory_store(clock))
}

/// Contract defaults, with retries that do not wait.
pub fn settings() -> Settings {
    Settings {
        retry: RetryPolicy::immediate(),
        ..Settings::default()
    }
}

/// A keyed submit of the tests' usual task (type `t`, input `1`), which
/// must succeed.
pub async fn submit_key(
    queue: &idempotent_submit::Queue,
    key: &str,
) -> idempotent_submit::Submitted {
    queue
        .submit("t", serde_json::json!(1))
        .idempotency_key(key)
        .await
        .unwrap()
}

/// [`submit_key`] by `tenant` (a principal, as the HTTP edge names it).
pub async fn submit_key_as(
    queue: &idempotent_submit::Queue,
    key: &str,
    tenant: &str,
) -> idempotent_submit::Submitted {
    let submit = queue.submit("t", serde_json::json!(1)).idempotency_key(key);
    submit.tenant(tenant).await.unwrap()
}

/// A fresh bucket on each real store the tests run on: moto's and
/// SeaweedFS's, each unversioned then versioned.
pub async fn real_buckets() -> [idempotent_submit::S3Store; 4] {
    [
        moto_store().await,
        moto_store_versioned().await,
        seaweedfs_store().await,
        seaweedfs_store_versioned().await,
    ]
}

/// Every key in a bucket, whatever store holds it.
pub async fn all_keys(store: &dyn idempotent_submit::Store) -> Vec<String> {
    keys_under(store, "").await
}

/// Every key under `prefix`, page after page.
pub async fn keys_under(store: &dyn idempotent_submit::Store, prefix: &str) -> Vec<String> {
    let objects = objects_under(store, prefix).await;
    objects.into_iter().map(|o| o.key).collect()
}

/// Every object under `prefix` as LIST tells it, page after page.
pub async fn objects_under(
    store: &dyn idempotent_submit::Store,
    prefix: &str,
) -> Vec<idempotent_submit::store::ObjectMeta> {
    let mut out = Vec::new();
    let mut page = None;
    loop {
        let p = store.list(prefix, None, page, 1000).await.expect("listing");
        out.extend(p.objects);
        match p.next {
            Some(n) => page = Some(n),
            None => return out,
        }
    }
}

/// The first of `keys` under `prefix` (a record's, a marker's), which must
/// be there.
pub fn first_under<K: AsRef<str>>(keys: impl IntoIterator<Item = K>, prefix: &str) -> String {
    let mut under = keys.into_iter().filter(|k| k.as_ref().starts_with(prefix));
    let first = under
        .next()
        .unwrap_or_else(|| panic!("a key under {prefix}"));
    first.as_ref().to_owned()
}

/// The task object of `id` as JSON, which must be there.
pub async fn task_json(queue: &idempotent_submit::Queue, id: &str) -> serde_json::Value {
    let id = id.parse().expect("a task id");
    let body = queue.task(id).await.unwrap().expect("the task object");
    serde_json::from_slice(&body).unwrap()
}

/// Everything a process wrote, its stdout then its stderr, as text.
pub fn output_text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Fails unless the process exited 0, saying `what` ran (and what it
/// needs) and everything it wrote.
pub fn assert_ran(out: &std::process::Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: {:?} {}",
        out.status,
        output_text(out)
    );
}

/// A bucket whose writes first pass through `hook(op, key)`: it can act on
/// the bucket or the clock (another writer, a slow attempt), and fail the
/// write by answering an error. A store as [`Wrapped`]`(Intercept { .. })`.
#[derive(Clone)]
pub struct Intercept<F> {
    pub inner: MemoryStore,
    pub hook: F,
}

#[async_trait::async_trait]
impl<F> Hooks for Intercept<F>
where
    F: Fn(Op, &str) -> Option<StoreError> + Send + Sync + 'static,
{
    type Inner = MemoryStore;

    fn inner(&self) -> &MemoryStore {
        &self.inner
    }

    async fn before(&self, call: &Call<'_>) -> Result<(), StoreError> {
        match call.op.is_write().then(|| (self.hook)(call.op, call.key)) {
            Some(Some(e)) => Err(e),
            _ => Ok(()),
        }
    }
}

/// Runs the built `idem` against `bucket` on moto (its S3 and SQS), with
/// `env` on top; its exit code and its JSON output.
pub async fn idem(bucket: &str, env: &[(&str, &str)], args: &[&str]) -> (i32, serde_json::Value) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("BUCKET_NAME", bucket)
        .env("AWS_ENDPOINT_URL", moto_endpoint())
        .env("S3_FORCE_PATH_STYLE", "true")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "us-east-1")
        .envs(env.iter().copied())
        .output()
        .await
        .expect("running idem");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {stdout:?} stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), v)
}

/// Ends the task at `task_key` with `status`, as buquet's worker (or its
/// cancel) does: the task object rewritten, `If-Match` on what it read.
pub async fn end_task(
    store: &(impl idempotent_submit::store::Store + ?Sized),
    task_key: &str,
    status: &str,
) {
    let o = store.get(task_key).await.unwrap();
    let mut task: serde_json::Value = serde_json::from_slice(&o.body).unwrap();
    task["status"] = serde_json::json!(status);
    store
        .put(
            task_key,
            task.to_string().into(),
            idempotent_submit::store::PutMode::Update(o.meta.etag),
        )
        .await
        .unwrap();
}

/// `(check, status)` of each finding of a doctor's report.
pub fn doctor_checks(report: &serde_json::Value) -> Vec<(String, String)> {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["check"].as_str().unwrap().to_owned(),
                c["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// Each test on an unversioned and on a versioned bucket: `on_both_buckets!(f)`
/// makes `f::unversioned` and `f::versioned`, each calling `f(versioning)`
/// (the caller's module imports `common`).
// Unused in the two crates of their own, which share this module.
#[allow(unused_macros)]
macro_rules! on_both_buckets {
    ($name:ident) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn unversioned() {
                super::$name(super::common::Versioning::Off).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn versioned() {
                super::$name(super::common::Versioning::On).await;
            }
        }
    };
}
