//! The Rust API: `queue.submit(type, input).idempotency_key(k).idempotency_ttl(d).await`.

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use chrono::Duration;
use serde::Serialize;
use uuid::Uuid;

use crate::clock::{Clock, SystemClock};
use crate::config::{Config, ConfigError, RecordEvents, Settings};
use crate::due_sender::{DueOrder, DueSender};
use crate::protocol::hash;
use crate::protocol::options::{OptionValue, TaskOption};
use crate::protocol::record::{TaskLocation, record_key};
use crate::protocol::{
    DueMessages, Engine, IdempotencyKey, IfTaskFailed, Input, KeyRef, KeySpec, KeyView, Record,
    Reset, Scope, ScopeName, SubmitError, SubmitRequest, Submitted, TaskOptions, TaskRetryPolicy,
    TaskType, Tenant, Ttl, ValidationError,
};
use crate::store::{ObjectMeta, S3Store, Store, StoreError};

/// How many submits of one [`Queue::submit_many`] run at once: every item of
/// the largest batch the HTTP API takes (`MAX_BATCH_TASKS`), so that a batch
/// of new keys takes the two round trips of one submit; a longer list waits
/// for free slots. At most two S3 requests are in flight per submit.
pub const BATCH_FAN_OUT: usize = crate::config::MAX_BATCH_TASKS_LIMIT;

/// A queue in a bucket, seen through the idempotent submit protocol.
#[derive(Clone)]
pub struct Queue {
    engine: Engine,
}

impl Queue {
    /// A queue over any store, on the system clock.
    pub fn new(store: impl Store, settings: Settings) -> Self {
        Self::with_clock(store, Arc::new(SystemClock), settings)
    }

    /// A queue whose deadlines and expiries follow `clock`.
    pub fn with_clock(store: impl Store, clock: Arc<dyn Clock>, settings: Settings) -> Self {
        Queue {
            engine: Engine::new(Arc::new(store), clock, settings),
        }
    }

    /// The queue in S3 that `config` names, with clients built from the
    /// environment: the bucket's (with the key pair of
    /// `S3_CREDENTIALS_SECRET` when it is set, read once here) and, under
    /// `RECORD_EVENTS=submitter`, the due queue's at `DUE_QUEUE_URL`. An
    /// error names the variable it comes from; it never carries a secret.
    pub async fn from_config(config: &Config) -> Result<Self, ConfigError> {
        let store = s3_store(config).await?;
        let queue = Self::new(store, config.settings.clone());
        match (&config.record_events, &config.due_queue_url) {
            (RecordEvents::Bucket, _) => Ok(queue),
            #[cfg(feature = "sqs")]
            (RecordEvents::Submitter, Some(url)) => {
                let sender = crate::due_sender::SqsDueSender::from_env(url.clone()).await;
                Ok(
                    queue.with_due_sender_ordered(
                        sender,
                        config.bucket.clone(),
                        config.due_message,
                    ),
                )
            }
            (RecordEvents::Submitter, _) => Err(ConfigError {
                var: "RECORD_EVENTS",
                reason: if cfg!(feature = "sqs") {
                    "submitter needs DUE_QUEUE_URL".into()
                } else {
                    "submitter needs the `sqs` feature of the library (or a DueSender of your own: Queue::with_due_sender)".into()
                },
            }),
        }
    }

    /// This queue, sending every record's due message itself through
    /// `sender` (`RECORD_EVENTS=submitter`, for buckets that send no S3
    /// events: docs/protocol.md, "Due messages from the submitter"); the
    /// messages name `bucket`, the bucket of this queue's store.
    /// Each message is accepted by the queue before its record's PUT is
    /// sent ([`DueOrder::BeforeClaim`], `DUE_MESSAGE`'s default).
    pub fn with_due_sender(self, sender: impl DueSender, bucket: impl Into<String>) -> Self {
        self.with_due_sender_ordered(sender, bucket, DueOrder::default())
    }

    /// [`Queue::with_due_sender`], each message sent in `order` against its
    /// record's PUT (`DUE_MESSAGE`).
    pub fn with_due_sender_ordered(
        self,
        sender: impl DueSender,
        bucket: impl Into<String>,
        order: DueOrder,
    ) -> Self {
        let due = DueMessages::new(Arc::new(sender), bucket).in_order(order);
        Queue {
            engine: self.engine.with_due_messages(due),
        }
    }

    /// The protocol's engine under the queue: the tests' way past the
    /// facade, with the `testing` feature only (the crate's own doors use it
    /// inside the crate).
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The protocol's engine under the queue, for the crate's own doors.
    #[cfg(all(not(feature = "testing"), any(feature = "lambda", feature = "cli")))]
    pub(crate) fn engine(&self) -> &Engine {
        &self.engine
    }

    /// One sweeper pass over the bucket (docs/protocol.md, "The sweeper"):
    /// what the scheduled `sweep` function and `idem sweep` run.
    #[cfg(any(feature = "lambda", feature = "cli"))]
    pub(crate) async fn sweep(
        &self,
        opts: &crate::protocol::SweepOptions,
    ) -> Result<crate::protocol::SweepSummary, SubmitError> {
        self.engine.sweep(opts).await
    }

    /// This queue, its scheduled passes handing their continuations to
    /// `hand_on` (the `sweep` function's pass queue).
    #[cfg(feature = "lambda")]
    pub(crate) fn with_pass_hand_on(self, hand_on: Arc<dyn crate::protocol::HandOn>) -> Self {
        Queue {
            engine: self.engine.with_pass_hand_on(hand_on),
        }
    }

    /// One invocation's share of the scheduled pass, handing continuations
    /// on where this queue was given somewhere to hand them.
    #[cfg(feature = "lambda")]
    pub(crate) async fn sweep_share(
        &self,
        opts: &crate::protocol::SweepOptions,
    ) -> Result<crate::protocol::ShareOutcome, SubmitError> {
        self.engine
            .sweep_share(opts, self.engine.pass_hand_on())
            .await
    }

    /// The sweeper on the record a due message names (`key`), sent at
    /// `sent_at`: what the due queue's batches run, one record each.
    #[cfg(any(feature = "lambda", feature = "cli"))]
    pub(crate) async fn sweep_due_record(
        &self,
        key: &str,
        sent_at: Option<chrono::DateTime<chrono::Utc>>,
        dry_run: bool,
        deadline: Option<chrono::DateTime<chrono::Utc>>,
    ) -> crate::protocol::RecordOutcome {
        self.engine
            .sweep_due_record(key, sent_at, dry_run, deadline)
            .await
    }

    /// The clock the queue's deadlines follow.
    #[cfg(feature = "lambda")]
    pub(crate) fn clock(&self) -> &Arc<dyn Clock> {
        self.engine.clock()
    }

    /// The settings the queue runs with.
    pub fn settings(&self) -> &Settings {
        self.engine.settings()
    }

    /// Starts a submit; await it (or call [`SubmitBuilder::send`]).
    pub fn submit(&self, task_type: impl Into<String>, input: impl Serialize) -> SubmitBuilder<'_> {
        self.builder(
            task_type.into(),
            serde_json::to_value(input).map_err(|e| e.to_string()),
        )
    }

    /// [`Queue::submit`] of an input that is JSON already (a request body's):
    /// taken as it is. `submit` would serialize it into a second tree, a
    /// copy of every string and node of the input.
    pub fn submit_value(
        &self,
        task_type: impl Into<String>,
        input: serde_json::Value,
    ) -> SubmitBuilder<'_> {
        self.builder(task_type.into(), Ok(input))
    }

    fn builder(
        &self,
        task_type: String,
        input: Result<serde_json::Value, String>,
    ) -> SubmitBuilder<'_> {
        SubmitBuilder {
            queue: self,
            task_type,
            input,
            key: None,
            ttl: None,
            scope: Scope::TaskType,
            tenant: None,
            if_task_failed: None,
            options: Ok(TaskOptions::default()),
        }
    }

    /// Submits every item as if alone, [`BATCH_FAN_OUT`] at a time; one
    /// result per item, in the items' order. An item that fails leaves the
    /// others as they are (nothing is undone), and each item replays on its
    /// own key, so the whole list, or only its failed items, may be sent
    /// again.
    ///
    /// ```no_run
    /// # async fn demo(queue: idempotent_submit::Queue) {
    /// let results = queue
    ///     .submit_many((0..3).map(|i| {
    ///         queue
    ///             .submit("charge_customer", serde_json::json!({"order": i}))
    ///             .idempotency_key(format!("charge-{i}"))
    ///     }))
    ///     .await;
    /// assert_eq!(results.len(), 3);
    /// # }
    /// ```
    pub async fn submit_many<'q>(
        &self,
        items: impl IntoIterator<Item = SubmitBuilder<'q>>,
    ) -> Vec<Result<Submitted, SubmitError>> {
        use futures::StreamExt;
        // Under RECORD_EVENTS=submitter the items' due messages go ten to a
        // request (src/protocol/due.rs). Each item joins the batch when its
        // submit is made, and `buffered` makes the first BATCH_FAN_OUT before
        // it runs any: every item that runs at once is counted.
        let due = self.engine.due_batch();
        // `buffered` keeps the items' order and runs up to the fan-out at once.
        futures::stream::iter(items)
            .map(|b| b.send_on(self.engine.in_batch(&due)))
            .buffered(BATCH_FAN_OUT)
            .collect()
            .await
    }

    /// Writes `doc` (with its `rejected_at` added) to
    /// `rejected/{yyyy}/{mm}/{dd}/{id}.json`, the bucket's record of a
    /// message or event that can never succeed (docs/layout.md); the key
    /// written. An id that is not a plain path segment is hashed, so that a
    /// hand-made event cannot write outside `rejected/`. Retried like every
    /// write, until the operation deadline.
    pub async fn write_rejected(
        &self,
        id: &str,
        mut doc: serde_json::Map<String, serde_json::Value>,
    ) -> Result<String, SubmitError> {
        let now = self.engine.clock().now();
        let key = format!(
            "rejected/{}/{}.json",
            now.format("%Y/%m/%d"),
            rejected_id(id)
        );
        doc.insert(
            "rejected_at".into(),
            crate::protocol::rfc3339::format(&now).into(),
        );
        let body = Bytes::from(serde_json::Value::Object(doc).to_string());
        let deadline = now + self.settings().operation_timeout;
        self.engine
            .with_retries(deadline, || {
                self.engine
                    .store()
                    .put(&key, body.clone(), crate::store::PutMode::Overwrite)
            })
            .await?;
        Ok(key)
    }

    /// Reads a task object; `None` if there is none.
    pub async fn task(&self, task_id: Uuid) -> Result<Option<Bytes>, SubmitError> {
        let loc = TaskLocation::new(
            task_id,
            self.settings().shard_prefix_len,
            Default::default(),
        );
        self.get_optional(&loc.task_key())
            .await
            .map(|o| o.map(|(b, _)| b))
    }

    /// Reads the record of `key` in the scope named `scope` (a task type,
    /// `queue`, or a custom name); `None` if there is none.
    #[doc(hidden)]
    pub async fn record(
        &self,
        scope: &str,
        key: &str,
        tenant: Option<&Tenant>,
    ) -> Result<Option<(Record, ObjectMeta)>, SubmitError> {
        // The scope argument names the namespace directly (a task type,
        // `queue`, a custom name: one charset).
        let name = ScopeName::parse(scope)?.as_str().to_owned();
        let key = IdempotencyKey::parse(key)?;
        let rkey = record_key(&name, &hash::key_hash(&name, &key, tenant));
        let deadline = self.engine.now() + self.settings().operation_timeout;
        self.engine.read_record(&rkey, deadline).await
    }

    /// What a producer may see of its key's record (docs/protocol.md,
    /// "Looking up and resetting a key"): the task it maps to, the record's
    /// life and phase, the task's status. `None` when no live record holds
    /// the key (none, expired, or another tenant's). `scope` names the
    /// namespace as the submit used it: its task type, `queue`, or a custom
    /// scope.
    pub async fn lookup_key(
        &self,
        scope: &str,
        key: &str,
        tenant: Option<&Tenant>,
    ) -> Result<Option<KeyView>, SubmitError> {
        let at = KeyRef::parse(scope, key, tenant.cloned())?;
        self.engine.lookup_key(&at).await
    }

    /// Frees a key on purpose, at once: its record is replaced by a reset
    /// record, so that the next submit of the key creates a new task. The
    /// old task is left as it is (a reset cancels nothing). Refused
    /// ([`Reset::InProgress`]) while a task may still be written for the
    /// record.
    pub async fn reset_key(
        &self,
        scope: &str,
        key: &str,
        tenant: Option<&Tenant>,
    ) -> Result<Reset, SubmitError> {
        let at = KeyRef::parse(scope, key, tenant.cloned())?;
        self.engine.reset_key(&at).await
    }

    async fn get_optional(&self, key: &str) -> Result<Option<(Bytes, ObjectMeta)>, SubmitError> {
        let deadline = self.engine.now() + self.settings().operation_timeout;
        match self
            .engine
            .with_retries(deadline, || self.engine.store().get(key))
            .await
        {
            Ok(o) => Ok(Some((o.body, o.meta))),
            Err(crate::protocol::engine::Failure::Store(StoreError::NotFound)) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}

/// A submit being put together. Nothing is checked until it is awaited; then
/// every part is parsed and the first invalid one is reported.
#[must_use = "a submit does nothing until it is awaited"]
pub struct SubmitBuilder<'q> {
    queue: &'q Queue,
    task_type: String,
    input: Result<serde_json::Value, String>,
    key: Option<String>,
    ttl: Option<Duration>,
    scope: Scope,
    tenant: Option<String>,
    if_task_failed: Option<IfTaskFailed>,
    /// The task options so far; the first invalid one is kept to report.
    options: Result<TaskOptions, ValidationError>,
}

/// Whole seconds of `d`, as `option` holds them, or the option named.
fn whole_seconds(d: Duration, option: TaskOption) -> Result<OptionValue, ValidationError> {
    if d.subsec_nanos() != 0 {
        return Err(ValidationError::field(
            option.name(),
            "must be whole seconds",
        ));
    }
    u64::try_from(d.num_seconds())
        .map(OptionValue::Whole)
        .map_err(|_| ValidationError::field(option.name(), "must not be negative"))
}

impl<'q> SubmitBuilder<'q> {
    /// The same key always maps to the same task (within the record's life).
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// How long the key is remembered (default `IDEMPOTENCY_TTL_DAYS`).
    pub fn idempotency_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// The key's namespace: the task type (default), the queue, or a custom
    /// name.
    pub fn idempotency_scope(mut self, scope: Scope) -> Self {
        self.scope = scope;
        self
    }

    /// Sets one task option (its bounds are checked here, once: the
    /// options' table, src/protocol/options.rs); the first one refused is
    /// kept to report.
    fn option(mut self, option: TaskOption, value: Result<OptionValue, ValidationError>) -> Self {
        if let Ok(o) = &mut self.options
            && let Err(e) = value.and_then(|v| o.set(option, v))
        {
            self.options = Err(e);
        }
        self
    }

    /// Every task option at once (what the HTTP and SQS bodies carry).
    #[cfg(any(feature = "lambda", feature = "cli"))]
    pub(crate) fn options(mut self, options: TaskOptions) -> Self {
        self.options = Ok(options);
        self
    }

    /// How long a worker may run the task before it counts as timed out
    /// (buquet's `timeout_seconds`, default 300 s; whole seconds, 1 s to a
    /// day).
    pub fn timeout(self, timeout: Duration) -> Self {
        let option = TaskOption::TimeoutSeconds;
        self.option(option, whole_seconds(timeout, option))
    }

    /// How many times a failed task is retried (default 3; up to 100).
    pub fn max_retries(self, n: u32) -> Self {
        self.option(TaskOption::MaxRetries, Ok(OptionValue::Whole(n.into())))
    }

    /// The backoff between retries.
    pub fn retry_policy(self, policy: TaskRetryPolicy) -> Self {
        self.option(TaskOption::RetryPolicy, Ok(OptionValue::Policy(policy)))
    }

    /// The task becomes available (is claimed no earlier than) at `at`.
    pub fn schedule_at(self, at: chrono::DateTime<chrono::Utc>) -> Self {
        self.option(TaskOption::ScheduleAt, Ok(OptionValue::Time(at)))
    }

    /// The task becomes available `delay` after the submit, in S3's time
    /// (`delay_seconds`; whole seconds).
    pub fn delay(self, delay: Duration) -> Self {
        let option = TaskOption::DelaySeconds;
        self.option(option, whole_seconds(delay, option))
    }

    /// How many times a handler may reschedule the task before it fails
    /// (up to 10 000).
    pub fn max_reschedules(self, n: u32) -> Self {
        self.option(TaskOption::MaxReschedules, Ok(OptionValue::Whole(n.into())))
    }

    /// The task expires (is not run) once `ttl` has passed since the submit
    /// (buquet's `ttl_seconds`; not the key's life, which is
    /// [`SubmitBuilder::idempotency_ttl`]).
    pub fn task_ttl(self, ttl: Duration) -> Self {
        let option = TaskOption::TtlSeconds;
        self.option(option, whole_seconds(ttl, option))
    }

    /// The task expires (is not run) at `at` (buquet's `expires_at`).
    pub fn task_expires_at(self, at: chrono::DateTime<chrono::Utc>) -> Self {
        self.option(TaskOption::ExpiresAt, Ok(OptionValue::Time(at)))
    }

    /// Offloads an input whose compact JSON is longer than `threshold`
    /// bytes to `payloads/{task_id}/input.json`, as buquet's
    /// `use_payload_refs` does (its default threshold is 256 KiB).
    pub fn payload_refs(self, threshold: usize) -> Self {
        let threshold = u64::try_from(threshold).unwrap_or(u64::MAX);
        self.option(TaskOption::UsePayloadRefs, Ok(OptionValue::Flag(true)))
            .option(
                TaskOption::PayloadRefThresholdBytes,
                Ok(OptionValue::Whole(threshold)),
            )
    }

    /// What the submit does when its key's task ended failed or cancelled
    /// (default `IF_TASK_FAILED`, itself `replay` by default):
    /// [`IfTaskFailed::NewTask`] claims the key again for a new task, whose
    /// answer names the failed one in `replaces_task_id`.
    pub fn if_task_failed(mut self, policy: IfTaskFailed) -> Self {
        self.if_task_failed = Some(policy);
        self
    }

    /// Keeps this principal's keys apart from everyone else's.
    pub fn tenant(mut self, principal: impl Into<String>) -> Self {
        self.tenant = Some(principal.into());
        self
    }

    /// Parses the request without sending it.
    pub(crate) fn parse(self) -> Result<SubmitRequest, SubmitError> {
        let settings = self.queue.settings();
        let task_type = TaskType::parse(self.task_type)?;
        let value = self
            .input
            .map_err(|e| ValidationError::field("input", format!("cannot be serialized: {e}")))?;
        let input = Input::new(&value, settings.max_input_bytes)?;
        // Each option's bounds were checked where it was set; what is left is
        // the contradictions between them.
        let options = self.options?;
        options.check()?;
        let idempotency = match self.key {
            None if settings.require_key => return Err(ValidationError::KeyRequired.into()),
            None => None,
            Some(k) => {
                let scope = self.scope;
                let ttl = Ttl::new(self.ttl.unwrap_or(settings.default_ttl), settings.max_ttl)?;
                Some(KeySpec {
                    key: IdempotencyKey::parse(k)?,
                    scope,
                    ttl,
                })
            }
        };
        let tenant = self
            .tenant
            .as_deref()
            .map(Tenant::from_principal)
            .transpose()?;
        Ok(SubmitRequest {
            task_type,
            input,
            idempotency,
            options,
            tenant,
            if_task_failed: self.if_task_failed.unwrap_or(settings.if_task_failed),
        })
    }

    /// Sends the submit.
    pub async fn send(self) -> Result<Submitted, SubmitError> {
        let engine = self.queue.engine.clone();
        self.send_on(engine).await
    }

    /// Sends the submit through `engine` (one item of a batch).
    async fn send_on(self, engine: Engine) -> Result<Submitted, SubmitError> {
        let req = match self.parse() {
            Ok(r) => r,
            Err(e) => {
                engine.send_no_due();
                return Err(e);
            }
        };
        engine.submit(&req).await
    }
}

impl<'q> IntoFuture for SubmitBuilder<'q> {
    type Output = Result<Submitted, SubmitError>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send + 'q>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.send())
    }
}

/// The store that `config` names: a client configured from the environment
/// (the endpoint, `AWS_ENDPOINT_URL_S3`, included) with
/// `S3_FORCE_PATH_STYLE`, signing with the key pair of
/// `S3_CREDENTIALS_SECRET` when it is set (read here, once), else with the
/// credentials the SDK finds. An error names the variable; it never carries
/// the secret.
pub(crate) async fn s3_store(config: &Config) -> Result<S3Store, ConfigError> {
    let credentials = match &config.s3_credentials_secret {
        None => None,
        Some(id) => Some(secret_key_pair(id).await.map_err(|reason| ConfigError {
            var: "S3_CREDENTIALS_SECRET",
            reason,
        })?),
    };
    let client = crate::aws::s3_client(config.force_path_style, credentials).await;
    Ok(S3Store::new(client, config.bucket.clone()))
}

#[cfg(feature = "secrets")]
use crate::aws::secret::key_pair as secret_key_pair;

#[cfg(not(feature = "secrets"))]
async fn secret_key_pair(_id: &str) -> Result<aws_sdk_s3::config::Credentials, String> {
    Err("needs the `secrets` feature of the library".into())
}

/// A path segment for a message or event id: itself when it is plain, else
/// its hash.
fn rejected_id(id: &str) -> String {
    let plain = !id.is_empty()
        && id.len() <= 128
        && !id.starts_with('.')
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if plain {
        id.to_owned()
    } else {
        use sha2::Digest;
        format!(
            "sha256-{}",
            hex::encode(sha2::Sha256::digest(id.as_bytes()))
        )
    }
}
