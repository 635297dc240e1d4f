//! The submit state machine (docs/protocol.md walks through it step by step).
//!
//! A keyed submit writes its record first (`If-None-Match: *`), then the task
//! object and its ready marker in parallel, and answers: two round trips.
//! The record is written once and stays `creating`: whoever meets it before
//! its finish deadline (a later submit of the key, the sweeper) checks both
//! objects and writes what is missing, through [`Engine::finish`], a marker
//! only for a task no worker has touched. Past the deadline a record is
//! settled: its task object alone says what became of the submit.

use bytes::Bytes;
use chrono::{DateTime, SubsecRound, Utc};
use serde_json::value::RawValue;
use uuid::Uuid;

use super::engine::{Engine, Failure};
use super::error::{ConflictKind, SubmitError};
use super::finish::Start;
use super::hash;
use super::names::{IdempotencyKey, Scope, TaskType, Tenant, Ttl, ValidationError};
use super::options::{TaskFields, TaskOptions};
use super::record::{
    Record, RecordStatus, TaskIdempotency, TaskInput, TaskLocation, payload_key, record_key,
    task_json_with,
};
use crate::store::{ETag, ObjectMeta, PutMode, StoreError};

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

    /// The canonical JSON's length: what buquet's threshold is compared with.
    pub fn len(&self) -> usize {
        self.canonical.get().len()
    }

    /// Never: the shortest input, `null`, is 4 bytes.
    pub fn is_empty(&self) -> bool {
        self.canonical.get().is_empty()
    }

    /// `input_hash`: of the whole input, offloaded or not.
    pub fn hash(&self) -> &str {
        &self.hash
    }

    /// The canonical JSON (what the task object carries).
    pub fn as_json(&self) -> &str {
        self.canonical.get()
    }
}

/// A tenant's tasks get ids sealed to it (see [`Tenant::new_task_id`]).
fn new_task_id(req: &SubmitRequest) -> Uuid {
    req.tenant
        .as_ref()
        .map_or_else(Uuid::new_v4, Tenant::new_task_id)
}

/// What differs between the record `existing` holds and the request `req`
/// whose options hash to `options_hash`; `None`: the same request.
pub(super) fn conflict_with(
    existing: &Record,
    req: &SubmitRequest,
    options_hash: &Option<String>,
) -> Option<ConflictKind> {
    if existing.task_type != req.task_type.as_str() {
        Some(ConflictKind::TaskType)
    } else if existing.input_hash != req.input.hash {
        Some(ConflictKind::Input)
    } else if existing.write_id.is_some() && existing.options_hash != *options_hash {
        // Records of this service (they have a write_id) carry the
        // options' hash, or none for none; buquet's clients keep
        // no options and are compared on task type and input only.
        Some(ConflictKind::Options)
    } else {
        None
    }
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
    /// The task options, as sent (checked for bounds; the checks that need
    /// the submit's time are made when it is sent).
    pub options: TaskOptions,
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

/// A record as a reader judges it: by its age (in S3's time) and its task
/// object, never by a later write of the record (there is none).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Phase {
    /// `in_flight`: a write for it may still land (its finish deadline plus
    /// 15 minutes is ahead); `settled`: nothing can be written for it any
    /// more, and its task object alone says what became of the submit.
    pub phase: &'static str,
    /// The task object's status; `missing` when it is not there once the
    /// record is settled (or was `ready`); `None` while it may still come.
    pub task_status: Option<String>,
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

/// A submit's own object that did not serialize: an error, never an empty
/// body written.
fn unserializable(what: &str, e: serde_json::Error) -> SubmitError {
    SubmitError::Corrupt {
        key: what.to_owned(),
        reason: format!("could not be serialized: {e}"),
    }
}

impl Engine {
    /// Submits a task: a plain new task without a key, the idempotency
    /// protocol with one.
    pub async fn submit(&self, req: &SubmitRequest) -> Result<Submitted, SubmitError> {
        let op_deadline = self.now() + self.settings.operation_timeout;
        // Before anything is written (src/protocol/schema.rs).
        if let Err(e) = self.check_input(req, op_deadline).await {
            return self.answer_refused(req, e, op_deadline).await;
        }
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
        let fields = self.task_fields(req, now, None)?;
        let loc = TaskLocation::new(
            new_task_id(req),
            self.settings.shard_prefix_len,
            fields.available_at,
        );
        let tenant_id = req.tenant.as_ref().map(Tenant::id);
        let offload = fields.offloads(req.input.len());
        let task = task_json_with(
            &loc,
            req.task_type.as_str(),
            self.task_input(req, offload),
            now,
            &fields,
            TaskIdempotency {
                tenant: tenant_id.as_deref(),
                ..Default::default()
            },
        )
        .map_err(|e| unserializable("the task object", e))?;
        // Without a record, nothing else holds the input: its payload must
        // be in the bucket before a task names it (one more round trip, as
        // buquet's own submit takes).
        if offload {
            self.put_payload(loc.id, &req.input, op_deadline).await?;
        }
        let body = Bytes::copy_from_slice(task.get().as_bytes());
        let (task_key, marker_key) = (loc.task_key(), loc.marker_key());
        let (t, m) = tokio::join!(
            self.with_retries(op_deadline, || self.store.put(
                &task_key,
                body.clone(),
                PutMode::Create
            )),
            self.with_retries(op_deadline, || self.store.put(
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
        let key_hash = hash::key_hash(&scope, &k.key, req.tenant.as_ref());
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
        let expires_at = record_now + k.ttl.duration();
        let fields = self.task_fields(req, now, Some((record_now, expires_at)))?;
        let loc = TaskLocation::new(
            new_task_id(req),
            self.settings.shard_prefix_len,
            fields.available_at,
        );
        let write_id = Uuid::new_v4();
        let offload = fields.offloads(req.input.len());
        let task = task_json_with(
            &loc,
            req.task_type.as_str(),
            self.task_input(req, offload),
            now,
            &fields,
            TaskIdempotency {
                scope: Some(&scope),
                key_hash: Some(&key_hash),
                tenant: tenant_id.as_deref(),
            },
        )
        .map_err(|e| unserializable("the task object", e))?;
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
            expires_at,
            write_id: Some(write_id),
            tenant: tenant_id.clone(),
            options_hash: req.options.hash(),
            pending_task: Some(task),
            pending_input: offload.then(|| req.input.canonical.clone()),
        };
        let body = mine.to_bytes().map_err(|e| unserializable(&rkey, e))?;

        // What the next claim writes over: nothing (If-None-Match), or the
        // expired record just read (If-Match its ETag).
        let mut replace: Option<ETag> = None;
        // An offloaded input's payload goes beside the first claim, in the
        // same round trip; `Some(landed)` once it was sent.
        let mut payload: Option<bool> = None;
        let mut rounds = 0;
        while rounds < MAX_ROUNDS {
            // 1. Claim the key: create the record, or replace the expired one.
            let replacing = replace.is_some();
            let mode = replace.take().map_or(PutMode::Create, PutMode::Update);
            let with_payload = offload && payload != Some(true);
            if let Some(done) = self
                .claim(
                    &rkey,
                    &mine,
                    &body,
                    mode,
                    with_payload,
                    &mut payload,
                    req,
                    op_deadline,
                )
                .await?
            {
                return Ok(done);
            }
            if replacing {
                // Someone else replaced or deleted it first: start over.
                continue;
            }
            rounds += 1;

            // 2. The key is taken: read what holds it.
            let obj = match self
                .with_retries(op_deadline, || self.store.get(&rkey))
                .await
            {
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
                if payload == Some(false) {
                    self.put_payload(loc.id, &req.input, op_deadline).await?;
                }
                return self
                    .finish_as_owner(&rkey, &mine, obj.meta.last_modified, op_deadline)
                    .await;
            }

            // Expired by S3's earliest time, as the sweeper judges it: never
            // before its `expires_at` by S3's clock, whichever machine asks.
            // An expired record counts as absent: replace it, but only if it
            // is still the one we read.
            if existing.is_expired(self.s3_earliest()?) {
                replace = Some(obj.meta.etag.clone());
                continue;
            }

            // 3. Same key: the same request, or a conflict. Our payload, if
            // we sent one, belongs to no task: the key is another record's.
            // It is deleted beside the answer (the lifecycle rule on
            // `payloads/` removes it if this process dies first).
            let orphan = async {
                if payload.is_some() && existing.task_id != loc.id {
                    self.remove_orphan_payload(loc.id, op_deadline).await;
                }
            };
            if let Some(kind) = conflict_with(&existing, req, &mine.options_hash) {
                orphan.await;
                return Err(SubmitError::Conflict {
                    kind,
                    task_id: existing.task_id,
                });
            }
            let (answer, ()) = tokio::join!(
                self.answer_existing(&rkey, &existing, &obj.meta, loc.id, op_deadline),
                orphan
            );
            return answer;
        }
        Err(SubmitError::Storage(StoreError::Unavailable(
            "the idempotency record kept changing; gave up".into(),
        )))
    }

    /// Writes our record (`mode`: If-None-Match, or If-Match the expired
    /// record's ETag) and, if it landed, finishes as its owner: the answer.
    /// `None`: the key is held by another record (412), or the expired one
    /// we meant to replace is gone (404).
    ///
    /// With `with_payload`, the offloaded input's payload is written in
    /// parallel (`payload` records whether it landed): a request more, not a
    /// round trip. If the record landed and the payload did not, the payload
    /// is written again before the task (the record's `pending_input` lets
    /// any finisher do it too).
    #[allow(clippy::too_many_arguments)]
    async fn claim(
        &self,
        rkey: &str,
        mine: &Record,
        body: &Bytes,
        mode: PutMode,
        with_payload: bool,
        payload: &mut Option<bool>,
        req: &SubmitRequest,
        op_deadline: DateTime<Utc>,
    ) -> Result<Option<Submitted>, SubmitError> {
        let sent_at = self.now();
        let (r, p) = tokio::join!(
            self.with_retries(op_deadline, || {
                self.store.put(rkey, body.clone(), mode.clone())
            }),
            async {
                if with_payload {
                    Some(
                        self.put_payload(mine.task_id, &req.input, op_deadline)
                            .await,
                    )
                } else {
                    None
                }
            }
        );
        if let Some(p) = p {
            *payload = Some(p.is_ok());
        }
        match r {
            Ok(_) => {
                if *payload == Some(false) {
                    self.put_payload(mine.task_id, &req.input, op_deadline)
                        .await?;
                    *payload = Some(true);
                }
                Ok(Some(
                    self.finish_as_owner(rkey, mine, self.s3_at_least(sent_at)?, op_deadline)
                        .await?,
                ))
            }
            Err(Failure::Store(StoreError::PreconditionFailed | StoreError::NotFound)) => Ok(None),
            Err(e) => Err(e.into()),
        }
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
    pub(super) async fn answer_existing(
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
                if rec.pending_task.is_some() && self.s3_before(finish_deadline)? =>
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
                let until = meta.last_modified
                    + self.settings.finish_window
                    + self.settings.late_write_margin;
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

    /// The task's fields from the request's options at a submit made at
    /// `now` (our clock, whole seconds): relative times count from S3's time
    /// (`keyed`: the record's `created_at` and `expires_at`, which bounds
    /// when the task may become available), else from S3's earliest time
    /// now, within `IDEMPOTENCY_MAX_TTL_DAYS`. A task without a schedule is
    /// available at `now`, as it always was.
    fn task_fields(
        &self,
        req: &SubmitRequest,
        now: DateTime<Utc>,
        keyed: Option<(DateTime<Utc>, DateTime<Utc>)>,
    ) -> Result<TaskFields, SubmitError> {
        let o = &req.options;
        if o.is_empty() {
            return Ok(TaskFields::defaults(now));
        }
        let (s3_now, horizon) = keyed.unwrap_or_else(|| {
            let s3_now = self
                .judged_offset()
                .map_or(now, |off| (now + off.low).trunc_subsecs(0));
            (s3_now, s3_now + self.settings.max_ttl)
        });
        let mut fields = o.resolve(s3_now, horizon, keyed.is_some())?;
        if o.schedule_at.is_none() && o.delay_seconds.is_none() {
            fields.available_at = now;
        }
        Ok(fields)
    }

    fn task_input<'r>(&self, req: &'r SubmitRequest, offload: bool) -> TaskInput<'r> {
        if offload {
            TaskInput::Offloaded
        } else {
            TaskInput::Inline(&req.input.canonical)
        }
    }

    /// `payloads/{task_id}/input.json` with If-None-Match: 412 is our own
    /// earlier attempt (the task id is new and ours).
    async fn put_payload(
        &self,
        id: Uuid,
        input: &Input,
        op_deadline: DateTime<Utc>,
    ) -> Result<(), SubmitError> {
        let key = payload_key(id);
        let bytes = Bytes::copy_from_slice(input.canonical.get().as_bytes());
        match self
            .with_retries(op_deadline, || {
                self.store.put(&key, bytes.clone(), PutMode::Create)
            })
            .await
        {
            Ok(_) | Err(Failure::Store(StoreError::PreconditionFailed)) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Deletes the payload written beside a claim that lost: no task will
    /// ever name it. Best effort: a failure is logged, and the sweeper's
    /// scheduled pass removes what is left.
    async fn remove_orphan_payload(&self, id: Uuid, op_deadline: DateTime<Utc>) {
        let key = payload_key(id);
        match self
            .with_retries(op_deadline, || self.store.delete(&key, None))
            .await
        {
            Ok(()) | Err(Failure::Store(StoreError::NotFound)) => {}
            Err(e) => {
                tracing::warn!(payload = %key, error = ?e, "an orphan payload was not deleted; the scheduled pass will");
            }
        }
    }

    /// Judges `rec` (read with `meta`) as a replay would, without writing
    /// anything: one GET of its task.
    pub async fn phase(&self, rec: &Record, meta: &ObjectMeta) -> Result<Phase, SubmitError> {
        let op_deadline = self.now() + self.settings.operation_timeout;
        let until =
            meta.last_modified + self.settings.finish_window + self.settings.late_write_margin;
        // A `ready` record (earlier versions) was written once its task was.
        let settled = rec.status == Some(RecordStatus::Ready) || self.s3_earliest()? >= until;
        let status = self.read_status(&rec.task_key, op_deadline).await?;
        Ok(Phase {
            phase: if settled { "settled" } else { "in_flight" },
            task_status: match status {
                Some(s) => Some(s),
                None if settled => Some("missing".into()),
                None => None,
            },
        })
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
