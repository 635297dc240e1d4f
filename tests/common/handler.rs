//! The `submit` handler in process, over a store: what it answers, as a
//! client reads it, and what it left in the bucket. A test file adds its
//! own helpers in an `impl Harness` block of its own.

use std::collections::HashMap;

use idempotent_submit::lambda::{App, handle_submit};
use idempotent_submit::testing::protocol::Record;
use idempotent_submit::{ManualClock, MemoryStore, Settings, Store};
use lambda_runtime::{Context, LambdaEvent};
use serde_json::Value;

pub struct Harness {
    pub app: App,
}

/// An HTTP answer: its status, its headers (names in lower case), its JSON
/// body.
pub struct Resp {
    pub status: u64,
    pub headers: HashMap<String, String>,
    pub body: Value,
}

impl Harness {
    /// Over `store`, on `clock` (the system's where none), with the tests'
    /// settings.
    pub fn over(store: impl Store, clock: Option<&ManualClock>, tenants: bool) -> Self {
        Self::with_settings(store, clock, tenants, super::settings())
    }

    pub fn with_settings(
        store: impl Store,
        clock: Option<&ManualClock>,
        tenants: bool,
        settings: Settings,
    ) -> Self {
        Harness {
            app: super::lambda::app_over(store, clock, tenants, settings),
        }
    }

    /// Over a new bucket of the moto server.
    pub async fn moto() -> Self {
        Self::over(super::moto_store().await, None, false)
    }

    /// Over a bucket in memory, and that bucket.
    pub fn memory() -> (Self, MemoryStore) {
        let clock = ManualClock::at_epoch();
        let store = super::memory_store(&clock);
        (Self::over(store.clone(), Some(&clock), false), store)
    }

    /// Two handlers over one bucket in memory: with tenant isolation, and
    /// without (as SQS and the CLI submit).
    pub fn isolated_and_plain() -> (Self, Self) {
        let clock = ManualClock::at_epoch();
        let store = super::memory_store(&clock);
        let isolated = Self::over(store.clone(), Some(&clock), true);
        (isolated, Self::over(store, Some(&clock), false))
    }

    /// The answer to `event`; an HTTP answer is checked against
    /// docs/openapi.yaml.
    pub async fn raw(&self, event: Value) -> Value {
        let is_http = event.get("Records").is_none();
        let answer = handle_submit(
            &self.app,
            LambdaEvent::new(event.clone(), Context::default()),
        )
        .await
        .unwrap();
        if is_http {
            super::openapi::check(&event, &answer);
        }
        answer
    }

    /// The answer to an HTTP `event`.
    pub async fn http(&self, event: Value) -> Resp {
        let v = self.raw(event).await;
        let headers = v["headers"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), v.as_str().unwrap().to_owned()))
            .collect();
        let body = serde_json::from_str(v["body"].as_str().unwrap()).unwrap();
        Resp {
            status: v["statusCode"].as_u64().unwrap(),
            headers,
            body,
        }
    }

    /// The message ids an SQS `event`'s answer lists for retry.
    pub async fn sqs(&self, event: Value) -> Vec<String> {
        let v = self.raw(event).await;
        v["batchItemFailures"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["itemIdentifier"].as_str().unwrap().to_owned())
            .collect()
    }

    /// Every key of the bucket.
    pub async fn keys(&self) -> Vec<String> {
        super::all_keys(self.app.queue.engine().store().as_ref()).await
    }

    /// The JSON objects under `prefix`, in the order of their keys.
    pub async fn objects(&self, prefix: &str) -> Vec<serde_json::Value> {
        let store = self.app.queue.engine().store();
        let mut out = Vec::new();
        for k in self.keys().await.iter().filter(|k| k.starts_with(prefix)) {
            out.push(serde_json::from_slice(&store.get(k).await.unwrap().body).unwrap());
        }
        out
    }

    /// The sum of the metric `name` over the lines the handler wrote.
    pub fn metric(&self, name: &str) -> u64 {
        let lines = self.app.metrics.lines();
        lines.iter().filter_map(|l| l[name].as_u64()).sum()
    }

    /// The record of the key `key` of `task_type` (its own scope), which
    /// must be there.
    pub async fn record_of(&self, task_type: &str, key: &str) -> Record {
        let record = self.app.queue.record(task_type, key, None).await.unwrap();
        record.unwrap_or_else(|| panic!("no record of {key}")).0
    }

    /// Whether the key `key` of `task_type` (its own scope) has a record.
    pub async fn has_record(&self, task_type: &str, key: &str) -> bool {
        let record = self.app.queue.record(task_type, key, None).await;
        record.unwrap().is_some()
    }

    /// How many tasks, markers and records the bucket holds.
    pub async fn objects_by_kind(&self) -> (usize, usize, usize) {
        let tasks = self.count("tasks/").await;
        (
            tasks,
            self.count("ready/").await,
            self.count("idempotency/").await,
        )
    }

    /// How many keys of the bucket start with `prefix`.
    pub async fn count(&self, prefix: &str) -> usize {
        self.keys()
            .await
            .iter()
            .filter(|k| k.starts_with(prefix))
            .count()
    }
}
