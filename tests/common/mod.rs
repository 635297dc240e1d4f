//! Test harness, shared by the test files (`mod common;`) and, file by file,
//! the bench: the moto server and its buckets (moto.rs), the in-memory twin
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
pub mod events;
pub mod handler;
pub mod lambda;
pub mod lambda_pool;
pub mod moto;
pub mod openapi;
pub mod runtime_api;
pub mod seaweedfs;
// Fault injection needs the testing feature.
#[cfg(feature = "testing")]
pub mod due;
#[cfg(feature = "testing")]
pub mod world;

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

#[cfg(feature = "testing")]
#[allow(unused_imports)]
pub use world::World;

use std::sync::Arc;

use idempotent_submit::store::MemoryStore;
use idempotent_submit::{Clock, ManualClock, RetryPolicy, Settings};

pub fn memory_store(clock: &ManualClock) -> MemoryStore {
    MemoryStore::new(Arc::new(clock.clone()) as Arc<dyn Clock>)
}

/// The in-memory twin of a versioned bucket.
pub fn memory_store_versioned(clock: &ManualClock) -> MemoryStore {
    MemoryStore::versioned(Arc::new(clock.clone()) as Arc<dyn Clock>)
}

// Fault injection needs the testing feature.
#[cfg(feature = "testing")]
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

/// Every key in a bucket, whatever store holds it.
pub async fn all_keys(store: &dyn idempotent_submit::Store) -> Vec<String> {
    let mut out = Vec::new();
    let mut page = None;
    loop {
        let p = store.list("", None, page, 1000).await.expect("listing");
        out.extend(p.objects.into_iter().map(|o| o.key));
        match p.next {
            Some(n) => page = Some(n),
            None => return out,
        }
    }
}

/// A bucket whose writes first pass through `hook(op, key)`: it can act on
/// the bucket or the clock (another writer, a slow attempt), and fail the
/// write by answering an error. Fault injection: the testing feature.
#[cfg(feature = "testing")]
#[derive(Clone)]
pub struct Intercept<F> {
    pub inner: MemoryStore,
    pub hook: F,
}

#[cfg(feature = "testing")]
type HookResult = Option<idempotent_submit::StoreError>;

#[cfg(feature = "testing")]
#[async_trait::async_trait]
impl<F> idempotent_submit::Store for Intercept<F>
where
    F: Fn(idempotent_submit::store::Op, &str) -> HookResult + Clone + Send + Sync + 'static,
{
    fn clock_offset(&self) -> Option<idempotent_submit::clock::Offset> {
        self.inner.clock_offset()
    }
    async fn get(
        &self,
        key: &str,
    ) -> Result<idempotent_submit::store::Object, idempotent_submit::StoreError> {
        self.inner.get(key).await
    }
    async fn head(
        &self,
        key: &str,
    ) -> Result<idempotent_submit::store::ObjectMeta, idempotent_submit::StoreError> {
        self.inner.head(key).await
    }
    async fn put(
        &self,
        key: &str,
        body: bytes::Bytes,
        mode: idempotent_submit::store::PutMode,
    ) -> Result<idempotent_submit::store::PutResult, idempotent_submit::StoreError> {
        use idempotent_submit::store::{Op, PutMode};
        let op = match mode {
            PutMode::Create => Op::PutCreate,
            PutMode::Update(_) => Op::PutUpdate,
            PutMode::Overwrite => Op::Put,
        };
        if let Some(e) = (self.hook)(op, key) {
            return Err(e);
        }
        self.inner.put(key, body, mode).await
    }
    async fn delete(
        &self,
        key: &str,
        if_match: Option<&idempotent_submit::store::ETag>,
    ) -> Result<(), idempotent_submit::StoreError> {
        if let Some(e) = (self.hook)(idempotent_submit::store::Op::Delete, key) {
            return Err(e);
        }
        self.inner.delete(key, if_match).await
    }
    async fn list(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        page: Option<String>,
        limit: usize,
    ) -> Result<idempotent_submit::store::ListPage, idempotent_submit::StoreError> {
        self.inner.list(prefix, start_after, page, limit).await
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
