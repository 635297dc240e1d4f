//! Interop with the queue's own clients: buquet 0.1 from PyPI (its Python
//! client and worker) against the same moto bucket as our handler; the
//! worker and the Python submit on SeaweedFS too, versioned and not.

/// A table of interop stories, each as two tests: on moto's versioned
/// bucket (`Shared::new`) and on SeaweedFS, its bucket versioned or not as
/// named; each calls `story(shared, args…)`. A row's doc comment goes to
/// both.
macro_rules! on_moto_and_seaweedfs {
    ($(
        $(#[$doc:meta])*
        $moto:ident, $seaweedfs:ident ($versioning:ident) => $story:ident($($arg:expr),*);
    )+) => {$(
        $(#[$doc])*
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $moto() {
            $story(Shared::new().await $(, $arg)*).await;
        }

        $(#[$doc])*
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $seaweedfs() {
            let s = Shared::seaweedfs(common::Versioning::$versioning).await;
            $story(s $(, $arg)*).await;
        }
    )+};
}

mod completion;
mod keys;
mod markers;
mod options;
mod tail;

use crate::common;

use std::process::Command;
use std::sync::Arc;

use crate::common::chaos_proxy::ChaosProxy;
use chrono::{Duration, SubsecRound, Utc};
use idempotent_submit::lambda::{App, Metrics, Sweeper, handle_submit, handle_sweep};
use idempotent_submit::store::{PutMode, Store};
use idempotent_submit::{ManualClock, Queue, Settings};
use lambda_runtime::{Context, LambdaEvent};
use serde_json::{Value, json};

/// Our handler and buquet's clients on one moto bucket: versioned, as
/// buquet's workers require, unless the test says otherwise (or on a
/// SeaweedFS bucket).
struct Shared {
    bucket: String,
    store: idempotent_submit::S3Store,
    app: App,
    versioning: common::Versioning,
    /// Where buquet's clients reach the bucket, and with which key pair.
    endpoint: String,
    keys: (String, String),
}

impl Shared {
    async fn new() -> Self {
        Self::with_isolation(false).await
    }

    async fn with_isolation(tenant_isolation: bool) -> Self {
        Self::on(common::Versioning::On, tenant_isolation).await
    }

    async fn on(versioning: common::Versioning, tenant_isolation: bool) -> Self {
        let store = common::moto_store_with(versioning).await;
        let keys = ("test".to_owned(), "test".to_owned());
        Self::over(
            store,
            common::moto_endpoint(),
            keys,
            versioning,
            tenant_isolation,
        )
    }

    /// On a new SeaweedFS bucket.
    async fn seaweedfs(versioning: common::Versioning) -> Self {
        let store = common::seaweedfs_store_with(versioning).await;
        let sw = common::seaweedfs();
        let keys = (sw.access_key_id.clone(), sw.secret_access_key.clone());
        Self::over(store, sw.endpoint.clone(), keys, versioning, false)
    }

    fn over(
        store: idempotent_submit::S3Store,
        endpoint: String,
        keys: (String, String),
        versioning: common::Versioning,
        tenant_isolation: bool,
    ) -> Self {
        let bucket = store.bucket().to_owned();
        let app =
            common::lambda::app_over(store.clone(), None, tenant_isolation, Settings::default());
        Shared {
            bucket,
            store,
            app,
            versioning,
            endpoint,
            keys,
        }
    }

    /// Runs the buquet client; its JSON answer.
    fn buquet(&self, args: &[&str]) -> Value {
        self.buquet_via(&self.endpoint, args)
    }

    /// Runs the buquet client against `endpoint` (moto, or a proxy before it).
    fn buquet_via(&self, endpoint: &str, args: &[&str]) -> Value {
        let skip = self.versioning == common::Versioning::Off;
        common::due::buquet_answer(&self.buquet_run(endpoint, args, skip), args)
    }

    fn buquet_skipping_check(&self, args: &[&str], skip: bool) -> std::process::Output {
        self.buquet_run(&self.endpoint, args, skip)
    }

    fn buquet_run(&self, endpoint: &str, args: &[&str], skip: bool) -> std::process::Output {
        let mut cmd = Command::new("python3");
        cmd.env_remove("BUQUET_ALLOW_NO_VERSIONING");
        if skip {
            cmd.env("BUQUET_ALLOW_NO_VERSIONING", "1");
        }
        cmd.arg(format!(
            "{}/tests/interop/buquet_client.py",
            env!("CARGO_MANIFEST_DIR")
        ))
        .args(args)
        .env("BUQUET_ENDPOINT", endpoint)
        .env("BUQUET_BUCKET", &self.bucket)
        .env("AWS_ACCESS_KEY_ID", &self.keys.0)
        .env("AWS_SECRET_ACCESS_KEY", &self.keys.1)
        .env("AWS_REGION", "us-east-1")
        .output()
        .expect("python3 runs")
    }

    async fn post(&self, body: Value) -> (u64, Value) {
        let mut event = common::event("http-v2-post.json");
        event["body"] = json!(body.to_string());
        self.call(event).await
    }

    async fn call(&self, event: Value) -> (u64, Value) {
        let out = handle_submit(
            &self.app,
            LambdaEvent::new(event.clone(), Context::default()),
        )
        .await
        .unwrap();
        common::openapi::check(&event, &out);
        (
            out["statusCode"].as_u64().unwrap(),
            serde_json::from_str(out["body"].as_str().unwrap()).unwrap(),
        )
    }
}

impl Shared {
    async fn task_json(&self, id: &str) -> Value {
        common::task_json(&self.app.queue, id).await
    }

    async fn object_json(&self, key: &str) -> Value {
        serde_json::from_slice(&self.store.get(key).await.unwrap().body).unwrap()
    }
}
