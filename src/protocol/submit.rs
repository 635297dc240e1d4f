//! The submit state machine (docs/protocol.md walks through it step by step).
//!
//! A keyed submit writes its record first (`If-None-Match: *`), then the task
//! object and its ready marker in parallel, and answers: two round trips.
//! The record is written once and stays `creating`: whoever meets it before
//! its finish deadline (a later submit of the key, the sweeper) checks both
//! objects and writes what is missing, through [`Engine::finish`], a marker
//! only for a task no worker has touched. Past the deadline a record is
//! settled: its task object alone says what became of the submit.

use std::sync::Arc;
use std::time::Duration as StdDuration;

use bytes::Bytes;
use chrono::{DateTime, SubsecRound, Utc};
use serde_json::value::RawValue;
use uuid::Uuid;

use super::hash;
use super::names::{IdempotencyKey, Scope, TaskType, Tenant, Ttl, ValidationError};
use super::record::{
    Record, RecordStatus, TaskHead, TaskIdempotency, TaskLocation, TaskState, record_key,
    task_json, task_status,
};
use crate::clock::{Clock, Offset};
use crate::config::{ClockCheck, LATE_WRITE_MARGIN, MAX_CLOCK_OFFSET, Settings};
use crate::planted::Bug;
use crate::store::{ObjectMeta, PutMode, Store, StoreError};

/// How many times a submit starts over when the record changes under it
/// (deleted by the sweeper, replaced after expiry) before giving up.
const MAX_ROUNDS: usize = 6;

/// The input, serialized once: canonical bytes (sorted keys, compact), their
/// hash, and their size.
#[derive(Debug, Clone)]
pub struct Input {
    canonical: Box<RawValue>,
    hash: String,
}

impl Input {
    /// Canonicalizes `value`; refuses it when it is larger than `max_bytes`.
    pub fn new(value: &serde_json::Value, max_bytes: usize) -> Result<Self, SubmitError> {
        let bytes = hash::canonical_json(value);
        if bytes.len() > max_bytes {
            return Err(SubmitError::InputTooLarge {
                size: bytes.len(),
                limit: max_bytes,
            });
        }
        let hash = hash::input_hash(&bytes);
        // Canonical JSON is valid UTF-8 JSON by construction.
        let text = String::from_utf8(bytes)
            .map_err(|_| ValidationError::field("input", "is not valid UTF-8"))?;
        let canonical = RawValue::from_string(text)
            .map_err(|e| ValidationError::field("input", e.to_string()))?;
        Ok(Input { canonical, hash })
    }
}

/// A tenant's tasks get ids sealed to it (see [`Tenant::new_task_id`]).
fn new_task_id(req: &SubmitRequest) -> Uuid {
    req.tenant
        .as_ref()
        .map_or_else(Uuid::new_v4, Tenant::new_task_id)
}

/// The idempotency part of a request.
#[derive(Debug, Clone)]
pub struct KeySpec {
    pub key: IdempotencyKey,
    pub scope: Scope,
    pub ttl: Ttl,
}

/// A submit, parsed.
#[derive(Debug, Clone)]
pub struct SubmitRequest {
    pub task_type: TaskType,
    pub input: Input,
    pub idempotency: Option<KeySpec>,
    /// The caller's tenant under tenant isolation: folded into the key hash,
    /// stored in the record and in the task object's `idempotency`.
    pub tenant: Option<Tenant>,
}

/// What a successful submit answers.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Submitted {
    pub task_id: Uuid,
    pub task_key: String,
    pub task_type: String,
    /// The task object's current status; `missing` when it is gone.
    pub status: String,
    #[serde(with = "super::record::rfc3339")]
    pub created_at: DateTime<Utc>,
    /// `false`: this submit created the task (201). `true`: an earlier submit
    /// of the key did (200).
    pub replayed: bool,
    pub idempotency: Option<IdempotencyInfo>,
    /// This submit finished an interrupted earlier one (for metrics only).
    #[serde(skip)]
    pub recovered: bool,
}

impl Submitted {
    pub fn created(&self) -> bool {
        !self.replayed
    }
}

/// The key a submit was made with, as answered.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct IdempotencyInfo {
    pub key: String,
    pub scope: String,
    pub key_hash: String,
    #[serde(with = "super::record::rfc3339")]
    pub expires_at: DateTime<Utc>,
}

/// What differs between a replay and the record it met.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConflictKind {
    TaskType,
    Input,
}

/// Every way a submit can fail. Outcomes, not HTTP codes: the HTTP edge maps
/// them in one place.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    /// The request is malformed (400).
    #[error(transparent)]
    Invalid(#[from] ValidationError),
    /// The input is over the limit (413).
    #[error("input is {size} bytes; the limit is {limit}")]
    InputTooLarge { size: usize, limit: usize },
    /// The key is taken by a submit of another task type or input (422).
    /// Nothing was written.
    #[error("idempotency conflict: the key was used with another {}",
        match .kind { ConflictKind::TaskType => "task type", ConflictKind::Input => "input" })]
    Conflict { kind: ConflictKind, task_id: Uuid },
    /// A submit of this key may still be landing: it cannot be said yet
    /// whether its task exists. Retry after `retry_after`.
    #[error("the submit of this key is still undetermined; retry in {} s", .retry_after.as_secs())]
    Undetermined {
        task_id: Uuid,
        retry_after: StdDuration,
    },
    /// S3 failed after retries.
    #[error("storage: {0}")]
    Storage(StoreError),
    /// The submit's own deadline passed before it could finish.
    #[error("the operation deadline passed")]
    DeadlineExceeded,
    /// The object at `key` is not what the layout says it should be.
    #[error("corrupt object at {key}: {reason}")]
    Corrupt { key: String, reason: String },
    /// S3's clock cannot be told well enough to judge a deadline: no answer
    /// has dated it yet, or it stands more than 60 s from ours. Nothing
    /// deadline-bound was written.
    #[error("S3's clock is {}; nothing bound by a deadline is written",
        match .offset { Some(o) => format!("{o} off ours, over the 60 s allowed"), None => "unknown".to_owned() })]
    ClockOffset { offset: Option<Offset> },
}

impl SubmitError {
    /// Would the same request, sent again later, possibly succeed?
    pub fn is_retryable(&self) -> bool {
        match self {
            SubmitError::Undetermined { .. }
            | SubmitError::DeadlineExceeded
            | SubmitError::ClockOffset { .. } => true,
            SubmitError::Storage(e) => e.is_retryable() || *e == StoreError::Crashed,
            _ => false,
        }
    }

    /// The problem code of CONTRACT.md section 4, shared by the HTTP API, SQS
    /// rejections and the CLI.
    pub fn code(&self) -> &'static str {
        match self {
            SubmitError::Invalid(ValidationError::KeyRequired) => "idempotency_key_missing",
            SubmitError::Invalid(_) => "invalid_request",
            SubmitError::InputTooLarge { .. } => "input_too_large",
            SubmitError::Conflict { .. } => "idempotency_conflict",
            SubmitError::Undetermined { .. } => "submit_in_progress",
            e if e.is_retryable() => "storage_unavailable",
            _ => "storage_error",
        }
    }

    /// The hint for a retry, where there is one.
    pub fn retry_after(&self) -> Option<StdDuration> {
        match self {
            SubmitError::Undetermined { retry_after, .. } => Some(*retry_after),
            // A clock that far off is not fixed in a second; one that is
            // merely unknown is known after the next answer.
            SubmitError::ClockOffset { offset: Some(_) } => Some(StdDuration::from_secs(30)),
            e if e.is_retryable() => Some(StdDuration::from_secs(1)),
            _ => None,
        }
    }
}

/// A store call that did not succeed: the store's answer, or no attempt left
/// before the deadline.
#[derive(Debug)]
pub(crate) enum Failure {
    Store(StoreError),
    Deadline,
}

impl From<Failure> for SubmitError {
    fn from(f: Failure) -> Self {
        match f {
            Failure::Store(e) => SubmitError::Storage(e),
            Failure::Deadline => SubmitError::DeadlineExceeded,
        }
    }
}

/// Where [`Engine::finish`] starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Start {
    /// This submit has just written the record: neither object can exist
    /// yet (except by a lost answer of our own, which the task's 412 tells),
    /// so both are written at once.
    Claimed,
    /// Anyone else: read the task and check the marker first, and write only
    /// what is missing.
    Check,
}

/// What [`Engine::finish`] found and did.
#[derive(Debug)]
pub(crate) struct Finished {
    /// This call wrote the task object or the marker.
    pub wrote: bool,
    /// The task's status, when this call learned it.
    pub status: Option<String>,
}

/// The protocol over a store, a clock and settings.
#[derive(Clone)]
pub struct Engine {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) settings: Settings,
}

impl Engine {
    pub fn new(store: Arc<dyn Store>, clock: Arc<dyn Clock>, settings: Settings) -> Self {
        Engine {
            store,
            clock,
            settings,
        }
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    pub(crate) fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    /// S3's time minus ours, as far as S3's answers have told it: the bounds
    /// every deadline decision takes its safe side of (a write only while
    /// `now + high` is before the deadline; `missing` only once `now + low`
    /// is past it). An error, logged, when it is unknown or over 60 s.
    pub(crate) fn s3_offset(&self) -> Result<Offset, SubmitError> {
        self.judged_offset().map_err(|offset| {
            match offset {
                Some(o) => tracing::error!(
                    offset = %o,
                    "S3's clock stands over 60 s from ours: nothing bound by a deadline is written until the machine's clock is fixed"
                ),
                None => tracing::warn!(
                    "S3's clock is not known yet: nothing bound by a deadline is written"
                ),
            }
            SubmitError::ClockOffset { offset }
        })
    }

    /// The offset if it may be used; else what is known of it (`None`: not
    /// yet dated). Logs nothing.
    fn judged_offset(&self) -> Result<Offset, Option<Offset>> {
        if self.settings.clock_check == ClockCheck::TrustClock
            || self.settings.has_bug(Bug::TrustMachineClock)
        {
            let zero = chrono::Duration::zero();
            return Ok(Offset {
                low: zero,
                high: zero,
            });
        }
        match self.store.clock_offset() {
            Some(o) if o.magnitude() <= MAX_CLOCK_OFFSET => Ok(o),
            other => Err(other),
        }
    }

    /// Whether S3's latest possible time now is before `deadline`: a write
    /// may start.
    fn s3_before(&self, deadline: DateTime<Utc>) -> Result<bool, SubmitError> {
        Ok(self.now() + self.s3_offset()?.high < deadline)
    }

    /// The earliest S3 time that a local instant can have been.
    fn s3_at_least(&self, local: DateTime<Utc>) -> Result<DateTime<Utc>, SubmitError> {
        Ok(local + self.s3_offset()?.low)
    }

    /// S3's earliest possible time now.
    pub(crate) fn s3_earliest(&self) -> Result<DateTime<Utc>, SubmitError> {
        Ok(self.now() + self.s3_offset()?.low)
    }

    /// A known, too large offset refuses a submit before it writes anything.
    /// It is checked again first (a HEAD of the record, whatever its answer),
    /// so that a clock fixed since is seen. Unknown until the first answer,
    /// the record may be written (its time is S3's own `LastModified`);
    /// what follows it waits for the offset that answer brings.
    async fn refuse_if_clock_known_off(
        &self,
        rkey: &str,
        op_deadline: DateTime<Utc>,
    ) -> Result<(), SubmitError> {
        if matches!(self.judged_offset(), Err(Some(_))) {
            let _ = self.call(op_deadline, || self.store.head(rkey)).await;
            self.s3_offset()?;
        }
        Ok(())
    }

    /// One store request with retries: on 409 and retryable failures, with
    /// backoff, each attempt bounded by `attempt_timeout` and by what is left
    /// before `deadline`, and none started at or after `deadline` (by the
    /// injected clock).
    pub(crate) async fn call<T, F, Fut>(
        &self,
        deadline: DateTime<Utc>,
        mut f: F,
    ) -> Result<T, Failure>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, StoreError>>,
    {
        let policy = self.settings.retry;
        let mut last = StoreError::Unavailable("no attempt made".into());
        for attempt in 0..policy.max_attempts.max(1) {
            if attempt > 0 {
                tokio::time::sleep(policy.backoff(attempt)).await;
            }
            let now = self.now();
            if now >= deadline {
                return Err(Failure::Deadline);
            }
            // The timeout drops a hung request, so no attempt outlives the
            // call that made it, nor runs past the deadline: a slow S3 is
            // answered as our retryable error before API Gateway's own
            // integration limit cuts the caller off.
            let left = (deadline - now).to_std().unwrap_or_default();
            match tokio::time::timeout(policy.attempt_timeout.min(left), f()).await {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(e)) if e.is_retryable() => last = e,
                Ok(Err(e)) => return Err(Failure::Store(e)),
                Err(_) => last = StoreError::Unavailable("request timed out".into()),
            }
        }
        Err(Failure::Store(last))
    }

    /// Submits a task: a plain new task without a key, the idempotency
    /// protocol with one.
    pub async fn submit(&self, req: &SubmitRequest) -> Result<Submitted, SubmitError> {
        let op_deadline = self.now() + self.settings.operation_timeout;
        match &req.idempotency {
            None => self.submit_plain(req, op_deadline).await,
            Some(k) => self.submit_keyed(req, k, op_deadline).await,
        }
    }

    async fn submit_plain(
        &self,
        req: &SubmitRequest,
        op_deadline: DateTime<Utc>,
    ) -> Result<Submitted, SubmitError> {
        let now = self.now().trunc_subsecs(0);
        let loc = TaskLocation::new(new_task_id(req), self.settings.shard_prefix_len, now);
        let tenant_id = req.tenant.as_ref().map(Tenant::id);
        let task = task_json(
            &loc,
            req.task_type.as_str(),
            &req.input.canonical,
            now,
            TaskIdempotency {
                tenant: tenant_id.as_deref(),
                ..Default::default()
            },
        );
        let body = Bytes::copy_from_slice(task.get().as_bytes());
        let (task_key, marker_key) = (loc.task_key(), loc.marker_key());
        let (t, m) = tokio::join!(
            self.call(op_deadline, || self.store.put(
                &task_key,
                body.clone(),
                PutMode::Create
            )),
            self.call(op_deadline, || self.store.put(
                &marker_key,
                Bytes::new(),
                PutMode::Overwrite
            )),
        );
        match t {
            // A fresh UUID is never taken: a 412 is our own write whose
            // answer was lost.
            Ok(_) | Err(Failure::Store(StoreError::PreconditionFailed)) => {}
            Err(e) => return Err(e.into()),
        }
        m?;
        Ok(Submitted {
            task_id: loc.id,
            task_key,
            task_type: req.task_type.to_string(),
            status: "pending".into(),
            created_at: now,
            replayed: false,
            idempotency: None,
            recovered: false,
        })
    }

    async fn submit_keyed(
        &self,
        req: &SubmitRequest,
        k: &KeySpec,
        op_deadline: DateTime<Utc>,
    ) -> Result<Submitted, SubmitError> {
        let scope = k.scope.resolve(&req.task_type).to_owned();
        let planted;
        let hashed_key = if self.settings.has_bug(Bug::OneRecordPerScope)
            && let Ok(one) = IdempotencyKey::parse("planted")
        {
            planted = one;
            &planted
        } else {
            &k.key
        };
        let key_hash = hash::key_hash(&scope, hashed_key, req.tenant.as_ref());
        let tenant_id = req.tenant.as_ref().map(Tenant::id);
        let rkey = record_key(&scope, &key_hash);
        self.refuse_if_clock_known_off(&rkey, op_deadline).await?;
        let now = self.now().trunc_subsecs(0);
        // The record's life is in S3's time, as every reader judges it: from
        // S3's earliest time now. A cold process, which has no answer yet to
        // learn S3's clock from, writes its own clock's time (a clock over
        // 60 s off then has the task refused, and the life off by as much).
        let record_now = self
            .judged_offset()
            .map_or(now, |o| (now + o.low).trunc_subsecs(0));
        // The task id and write_id are chosen once and kept across retries:
        // that is how a retry recognizes its own earlier write.
        let loc = TaskLocation::new(new_task_id(req), self.settings.shard_prefix_len, now);
        let write_id = Uuid::new_v4();
        let task = task_json(
            &loc,
            req.task_type.as_str(),
            &req.input.canonical,
            now,
            TaskIdempotency {
                scope: Some(&scope),
                key_hash: Some(&key_hash),
                tenant: tenant_id.as_deref(),
            },
        );
        let mine = Record {
            key: k.key.to_string(),
            key_hash: key_hash.clone(),
            scope: Some(scope.clone()),
            task_id: loc.id,
            task_key: loc.task_key(),
            task_type: req.task_type.to_string(),
            input_hash: req.input.hash.clone(),
            status: Some(RecordStatus::Creating),
            created_at: record_now,
            expires_at: record_now + k.ttl.duration(),
            write_id: Some(write_id),
            tenant: tenant_id.clone(),
            pending_task: Some(task),
        };
        let body = mine.to_bytes();

        for _ in 0..MAX_ROUNDS {
            // 1. Claim the key.
            let sent_at = self.now();
            match self
                .call(op_deadline, || {
                    self.store.put(&rkey, body.clone(), PutMode::Create)
                })
                .await
            {
                Ok(_) => {
                    return self
                        .finish_as_owner(&rkey, &mine, self.s3_at_least(sent_at)?, op_deadline)
                        .await;
                }
                Err(Failure::Store(StoreError::PreconditionFailed)) => {}
                Err(e) => return Err(e.into()),
            }

            // 2. The key is taken: read what holds it.
            let obj = match self.call(op_deadline, || self.store.get(&rkey)).await {
                Ok(o) => o,
                // Deleted since (it had expired): claim it again.
                Err(Failure::Store(StoreError::NotFound)) => continue,
                Err(e) => return Err(e.into()),
            };
            let mut existing = Record::parse(&obj.body).map_err(|e| SubmitError::Corrupt {
                key: rkey.clone(),
                reason: e.to_string(),
            })?;
            // buquet's records do not name their scope; it is ours.
            existing.scope.get_or_insert_with(|| scope.clone());

            if existing.write_id == Some(write_id) {
                // Our own write: its answer was lost, and a retry met it.
                return self
                    .finish_as_owner(&rkey, &mine, obj.meta.last_modified, op_deadline)
                    .await;
            }

            // Expired by S3's earliest time, as the sweeper judges it: never
            // before its `expires_at` by S3's clock, whichever machine asks.
            if existing.is_expired(self.s3_earliest()?)
                && !self.settings.has_bug(Bug::ExpiryIgnored)
            {
                // An expired record counts as absent: replace it, but only if
                // it is still the one we read.
                let sent_at = self.now();
                let cond = PutMode::Update(obj.meta.etag.clone());
                match self
                    .call(op_deadline, || {
                        self.store.put(&rkey, body.clone(), cond.clone())
                    })
                    .await
                {
                    Ok(_) => {
                        return self
                            .finish_as_owner(&rkey, &mine, self.s3_at_least(sent_at)?, op_deadline)
                            .await;
                    }
                    Err(Failure::Store(StoreError::PreconditionFailed | StoreError::NotFound)) => {
                        continue;
                    }
                    Err(e) => return Err(e.into()),
                }
            }

            // 3. Same key: the same request, or a conflict.
            if existing.task_type != req.task_type.as_str() {
                return Err(SubmitError::Conflict {
                    kind: ConflictKind::TaskType,
                    task_id: existing.task_id,
                });
            }
            if existing.input_hash != req.input.hash {
                return Err(SubmitError::Conflict {
                    kind: ConflictKind::Input,
                    task_id: existing.task_id,
                });
            }
            return self
                .answer_existing(&rkey, &existing, &obj.meta, loc.id, op_deadline)
                .await;
        }
        Err(SubmitError::Storage(StoreError::Unavailable(
            "the idempotency record kept changing; gave up".into(),
        )))
    }

    /// We wrote the record: write its task object and marker, and answer 201.
    /// The record stays as written.
    async fn finish_as_owner(
        &self,
        rkey: &str,
        mine: &Record,
        written_not_before: DateTime<Utc>,
        op_deadline: DateTime<Utc>,
    ) -> Result<Submitted, SubmitError> {
        // Our estimate of the record's LastModified is the earliest S3 time
        // at which we sent it, which is never later: the deadline we keep is
        // never later than the real one.
        let deadline = written_not_before + self.settings.finish_window;
        let done = self
            .finish(rkey, mine, Start::Claimed, deadline, op_deadline)
            .await?;
        let status = self.status_after(mine, &done, op_deadline).await?;
        Ok(self.answer(mine, status, false, false))
    }

    /// The key holds a record of the same request: replay it, finishing it
    /// first if it was interrupted.
    async fn answer_existing(
        &self,
        rkey: &str,
        rec: &Record,
        meta: &ObjectMeta,
        my_task_id: Uuid,
        op_deadline: DateTime<Utc>,
    ) -> Result<Submitted, SubmitError> {
        // Our own task id on a record we did not recognize by write_id: we
        // wrote it (an earlier version's sweeper may have turned it ready).
        // It is still our 201.
        let replayed = rec.task_id != my_task_id;
        let finish_deadline = meta.last_modified + self.settings.finish_window;
        match rec.status {
            Some(RecordStatus::Ready) => {
                let status = self.read_status(&rec.task_key, op_deadline).await?;
                Ok(self.answer(
                    rec,
                    status.unwrap_or_else(|| "missing".into()),
                    replayed,
                    false,
                ))
            }
            // Whether S3's time may still be before the deadline needs its
            // offset: unknown or too large, the submit writes nothing and
            // answers nothing it cannot vouch for (the error).
            Some(RecordStatus::Creating)
                if rec.pending_task.is_some()
                    && (self.s3_before(finish_deadline)?
                        || self.settings.has_bug(Bug::IgnoreFinishDeadline)) =>
            {
                let done = self
                    .finish(rkey, rec, Start::Check, finish_deadline, op_deadline)
                    .await?;
                let status = self.status_after(rec, &done, op_deadline).await?;
                Ok(self.answer(rec, status, replayed, done.wrote))
            }
            // A `creating` record past its finish deadline, or one without
            // `status` (buquet's): nothing is written for it. Its task exists
            // or, once no late write can land any more, it is missing.
            _ => {
                let mut until =
                    meta.last_modified + self.settings.finish_window + LATE_WRITE_MARGIN;
                if self.settings.has_bug(Bug::MissingWithoutMargin) {
                    until -= LATE_WRITE_MARGIN;
                }
                match self.read_status(&rec.task_key, op_deadline).await? {
                    Some(status) => Ok(self.answer(rec, status, replayed, false)),
                    // `missing` only once S3's earliest possible time is past
                    // the last instant a late write can land.
                    None => {
                        let s3_now = self.s3_earliest()?;
                        if s3_now < until {
                            Err(SubmitError::Undetermined {
                                task_id: rec.task_id,
                                retry_after: (until - s3_now).to_std().unwrap_or_default(),
                            })
                        } else {
                            Ok(self.answer(rec, "missing".into(), replayed, false))
                        }
                    }
                }
            }
        }
    }

    /// Makes sure that a `creating` record's task object exists and, while
    /// no worker has touched that task, its ready marker too, writing only
    /// what is missing: the task with If-None-Match (412: it is already
    /// there), the marker by plain PUT, in parallel. No write is attempted at
    /// or after `finish_deadline`.
    ///
    /// From [`Start::Check`] it first reads the task and checks the marker
    /// (GET and HEAD, in parallel). The marker is written only for a task
    /// that this call creates, or whose object is byte for byte the record's
    /// `pending_task`: a task that a worker has claimed, run, retried or
    /// rescheduled has left that state, and a marker for it would stay in the
    /// index forever (buquet's workers delete a marker only when they claim
    /// its task). A marker written for a task that this call did not create
    /// (found by its read, or by its write's 412), or one that took a retry,
    /// is checked by reading the task again once it has landed
    /// ([`Engine::verify_marker`]): that closes the race with a worker that
    /// claimed the task between our read and our write. A marker found
    /// beside a task that a worker has taken since is removed.
    ///
    /// The one finishing path of the first submit, a later submit and the
    /// sweeper. It never writes the record.
    pub(crate) async fn finish(
        &self,
        rkey: &str,
        rec: &Record,
        start: Start,
        finish_deadline: DateTime<Utc>,
        op_deadline: DateTime<Utc>,
    ) -> Result<Finished, SubmitError> {
        let corrupt = |reason: String| SubmitError::Corrupt {
            key: rkey.to_owned(),
            reason,
        };
        let pending = rec
            .pending_task
            .as_ref()
            .ok_or_else(|| corrupt("a creating record without pending_task".into()))?;
        let head: TaskHead = serde_json::from_str(pending.get())
            .map_err(|e| corrupt(format!("pending_task: {e}")))?;
        if head.id != rec.task_id {
            return Err(corrupt(
                "pending_task.id is not the record's task_id".into(),
            ));
        }
        let task_key = rec.task_key.as_str();
        let loc = head.location();
        let marker_key = loc.marker_key();

        let (mut need_task, mut need_marker, mut status) = (true, true, None);
        if start == Start::Check {
            let (t, m) = tokio::join!(
                self.call(op_deadline, || self.store.get(task_key)),
                self.call(op_deadline, || self.store.head(&marker_key)),
            );
            let marker_found = match m {
                Ok(_) => true,
                Err(Failure::Store(StoreError::NotFound)) => false,
                Err(e) => return Err(e.into()),
            };
            let marker_missing = !marker_found && !self.settings.has_bug(Bug::FinishWithoutMarker);
            match t {
                Ok(obj) => {
                    need_task = false;
                    status = Some(task_status(&obj.body).unwrap_or_else(|| "unknown".into()));
                    // Untouched: the very bytes the record's submit wrote.
                    // Every worker transition rewrites the object.
                    let untouched = obj.body.as_ref() == pending.get().as_bytes();
                    need_marker = marker_missing
                        && (untouched || self.settings.has_bug(Bug::MarkerWhenHeadFindsNone));
                    // A marker in the record's minute for a task a worker has
                    // taken since is stale: left by a finisher that died
                    // before its re-read, or by an earlier version of this
                    // service. It would cost every idle worker a read per
                    // poll, forever.
                    if marker_found && !untouched && !TaskState::parse(&obj.body).is_ready_in(&loc)
                    {
                        self.remove_marker(&marker_key, op_deadline).await?;
                    }
                }
                Err(Failure::Store(StoreError::NotFound)) => need_marker = marker_missing,
                Err(e) => return Err(e.into()),
            }
        }
        if !need_task && !need_marker {
            return Ok(Finished {
                wrote: false,
                status,
            });
        }

        // Both writes stop at the finish deadline: past it nobody writes a
        // record's task or marker, which is what makes a task 412 mean
        // "created" and a deleted task stay deleted. The deadline is S3's
        // time; an attempt may start only while S3's latest possible time is
        // before it. Without a trusted offset, nothing is written.
        let offset = self.s3_offset()?;
        let local_finish_deadline = finish_deadline - offset.high;
        let write_deadline = if self.settings.has_bug(Bug::IgnoreFinishDeadline) {
            op_deadline
        } else {
            local_finish_deadline.min(op_deadline)
        };
        let task_mode = if self.settings.has_bug(Bug::OverwriteTask) {
            PutMode::Overwrite
        } else {
            PutMode::Create
        };
        let task_body = Bytes::copy_from_slice(pending.get().as_bytes());
        let (t, m) = tokio::join!(
            async {
                if need_task {
                    Some(
                        self.call(write_deadline, || {
                            self.store
                                .put(task_key, task_body.clone(), task_mode.clone())
                        })
                        .await,
                    )
                } else {
                    None
                }
            },
            async {
                if need_marker {
                    Some(self.put_marker(&marker_key, write_deadline).await)
                } else {
                    None
                }
            },
        );
        let refused = |f: Failure| match f {
            Failure::Deadline if self.now() >= local_finish_deadline => {
                let until = finish_deadline + LATE_WRITE_MARGIN;
                SubmitError::Undetermined {
                    task_id: rec.task_id,
                    retry_after: (until - (self.now() + offset.low))
                        .to_std()
                        .unwrap_or_default(),
                }
            }
            f => f.into(),
        };
        let mut created = false;
        match t {
            None => {}
            Some(Ok(_)) => {
                created = true;
                status = Some("pending".to_owned());
            }
            // Before the finish deadline, 412 can only mean that the task was
            // created (by us, or by another finisher): nobody deletes a task
            // that young, and nobody writes one after the deadline.
            Some(Err(Failure::Store(StoreError::PreconditionFailed))) => {}
            Some(Err(f)) => return Err(refused(f)),
        }
        let marker_attempts = match m {
            None => 0,
            Some(Ok(n)) => n,
            Some(Err(f)) => return Err(refused(f)),
        };
        // Our marker needs no re-read when this call created the task beside
        // it and the marker landed on its first attempt: both were sent at
        // once, and a worker that finds the task by listing `tasks/` needs
        // several round trips (list, read, claim) after the task lands before
        // its claim deletes a marker (the first submit's path: no round trip
        // added; docs/protocol.md, "the ready index stays true", says what
        // stays open).
        // Otherwise, a task found by our read or by our write's 412, or a
        // marker that took a retry, a worker may have claimed the task in
        // between: read the task again.
        let verify = need_marker && (!created || marker_attempts > 1);
        if verify && !self.settings.has_bug(Bug::MarkerUnverified) {
            status = self
                .verify_marker(task_key, &loc, &marker_key, op_deadline)
                .await?;
        }
        Ok(Finished {
            wrote: created || need_marker,
            status,
        })
    }

    /// The marker PUT (an empty object, unconditional: writing it twice is
    /// harmless), retried; how many attempts it took.
    async fn put_marker(&self, marker_key: &str, deadline: DateTime<Utc>) -> Result<u32, Failure> {
        let mut attempts = 0;
        self.call(deadline, || {
            attempts += 1;
            self.store.put(marker_key, Bytes::new(), PutMode::Overwrite)
        })
        .await?;
        Ok(attempts)
    }

    /// Reads the task after our marker for it landed, and removes the marker
    /// unless it is true: the task is `pending` and available in the
    /// marker's minute. A worker that claimed the task before our marker
    /// landed has deleted its marker already; ours would name a task it can
    /// no longer claim. A worker that claims it after our marker landed
    /// deletes the marker itself. Answers the task's status, `None` if the
    /// task is not there.
    async fn verify_marker(
        &self,
        task_key: &str,
        loc: &TaskLocation,
        marker_key: &str,
        op_deadline: DateTime<Utc>,
    ) -> Result<Option<String>, SubmitError> {
        let task = match self.call(op_deadline, || self.store.get(task_key)).await {
            Ok(obj) => Some(TaskState::parse(&obj.body)),
            Err(Failure::Store(StoreError::NotFound)) => None,
            Err(e) => return Err(e.into()),
        };
        if !task.as_ref().is_some_and(|t| t.is_ready_in(loc)) {
            self.remove_marker(marker_key, op_deadline).await?;
        }
        Ok(task.map(|t| t.status.unwrap_or_else(|| "unknown".into())))
    }

    /// Deletes a marker that names a task no worker can claim from it any
    /// more. Not bound by the finish deadline: a removal makes nothing
    /// appear.
    async fn remove_marker(
        &self,
        marker_key: &str,
        op_deadline: DateTime<Utc>,
    ) -> Result<(), SubmitError> {
        tracing::info!(
            marker = marker_key,
            "a worker has taken the task since: its marker is removed"
        );
        match self
            .call(op_deadline, || self.store.delete(marker_key, None))
            .await
        {
            Ok(()) | Err(Failure::Store(StoreError::NotFound)) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// The status to answer once [`Engine::finish`] is done: the one it
    /// learned, or a read when its task write met an existing task.
    async fn status_after(
        &self,
        rec: &Record,
        done: &Finished,
        op_deadline: DateTime<Utc>,
    ) -> Result<String, SubmitError> {
        match &done.status {
            Some(s) => Ok(s.clone()),
            None => Ok(self
                .read_status(&rec.task_key, op_deadline)
                .await?
                .unwrap_or_else(|| "missing".into())),
        }
    }

    /// The task's current status; `None` if it is not there.
    pub(crate) async fn read_status(
        &self,
        task_key: &str,
        op_deadline: DateTime<Utc>,
    ) -> Result<Option<String>, SubmitError> {
        match self.call(op_deadline, || self.store.get(task_key)).await {
            Ok(obj) => Ok(Some(
                task_status(&obj.body).unwrap_or_else(|| "unknown".into()),
            )),
            Err(Failure::Store(StoreError::NotFound)) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    fn answer(&self, rec: &Record, status: String, replayed: bool, recovered: bool) -> Submitted {
        Submitted {
            task_id: rec.task_id,
            task_key: rec.task_key.clone(),
            task_type: rec.task_type.clone(),
            status,
            created_at: rec.created_at,
            replayed,
            idempotency: Some(IdempotencyInfo {
                key: rec.key.clone(),
                scope: rec.scope.clone().unwrap_or_default(),
                key_hash: rec.key_hash.clone(),
                expires_at: rec.expires_at,
            }),
            recovered,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unavailable() -> SubmitError {
        SubmitError::Storage(StoreError::Unavailable("503".into()))
    }

    #[test]
    fn each_error_maps_to_its_problem_code_retryability_and_hint() {
        let id = Uuid::nil();
        let cases: Vec<(SubmitError, &str, bool, Option<u64>)> = vec![
            (
                SubmitError::Invalid(ValidationError::KeyRequired),
                "idempotency_key_missing",
                false,
                None,
            ),
            (
                SubmitError::Invalid(ValidationError::field("task_type", "bad")),
                "invalid_request",
                false,
                None,
            ),
            (
                SubmitError::InputTooLarge { size: 2, limit: 1 },
                "input_too_large",
                false,
                None,
            ),
            (
                SubmitError::Conflict {
                    kind: ConflictKind::Input,
                    task_id: id,
                },
                "idempotency_conflict",
                false,
                None,
            ),
            (
                SubmitError::Undetermined {
                    task_id: id,
                    retry_after: StdDuration::from_secs(42),
                },
                "submit_in_progress",
                true,
                Some(42),
            ),
            (
                SubmitError::DeadlineExceeded,
                "storage_unavailable",
                true,
                Some(1),
            ),
            (unavailable(), "storage_unavailable", true, Some(1)),
            (
                SubmitError::Storage(StoreError::Conflict),
                "storage_unavailable",
                true,
                Some(1),
            ),
            (
                SubmitError::Storage(StoreError::Crashed),
                "storage_unavailable",
                true,
                Some(1),
            ),
            (
                SubmitError::Storage(StoreError::Fatal("403".into())),
                "storage_error",
                false,
                None,
            ),
            (
                SubmitError::Storage(StoreError::PreconditionFailed),
                "storage_error",
                false,
                None,
            ),
            (
                SubmitError::Corrupt {
                    key: "k".into(),
                    reason: "r".into(),
                },
                "storage_error",
                false,
                None,
            ),
        ];
        for (e, code, retryable, hint) in cases {
            assert_eq!(e.code(), code, "{e:?}");
            assert_eq!(e.is_retryable(), retryable, "{e:?}");
            assert_eq!(e.retry_after().map(|d| d.as_secs()), hint, "{e:?}");
        }
    }

    #[test]
    fn a_replay_is_not_created_and_a_first_submit_is() {
        let mut s = Submitted {
            task_id: Uuid::nil(),
            task_key: String::new(),
            task_type: String::new(),
            status: "pending".into(),
            created_at: DateTime::<Utc>::default(),
            replayed: false,
            idempotency: None,
            recovered: false,
        };
        assert!(s.created());
        s.replayed = true;
        assert!(!s.created());
    }
}
