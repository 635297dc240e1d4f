//! What a submit writes, built once and kept across every retry: the
//! claim of a keyed submit (the `creating` record that carries its whole
//! task, and the input it offloads), the task object of any submit, and the
//! task's fields from its options at the submit's time. Nothing here is
//! sent: src/protocol/submit.rs sends it.

use bytes::Bytes;
use chrono::{DateTime, SubsecRound, Utc};
use serde_json::value::RawValue;
use uuid::Uuid;

use super::engine::Engine;
use super::error::SubmitError;
use super::finish::NewTask;
use super::names::{Tenant, Ttl};
use super::record::{
    Record, RecordStatus, TaskIdempotency, TaskInput, TaskLocation, raw_into_bytes, task_json_with,
};
use super::request::{Input, KeySpec, SubmitRequest};
use super::task_options::TaskFields;

/// A tenant's tasks get ids sealed to it (see [`Tenant::new_task_id`]).
fn new_task_id(req: &SubmitRequest) -> Uuid {
    req.tenant
        .as_ref()
        .map_or_else(super::names::new_id, Tenant::new_task_id)
}

/// A submit's own object that did not serialize: an error, never an empty
/// body written.
pub(super) fn unserializable(what: &str, e: serde_json::Error) -> SubmitError {
    SubmitError::Corrupt {
        key: what.to_owned(),
        reason: format!("could not be serialized: {e}"),
    }
}

/// What a keyed submit writes, built once and kept across every retry (its
/// task id and write_id are how a retry recognizes its own earlier write).
#[derive(Clone)]
pub(super) struct Claim<'r> {
    pub(super) req: &'r SubmitRequest,
    pub(super) rkey: String,
    /// The record as written, but for its `pending_task` and
    /// `pending_input`: `body` carries them.
    pub(super) record: Record,
    pub(super) body: Bytes,
    pub(super) task: NewTask,
    /// The input, when it is offloaded to its payload.
    pub(super) offloaded: Option<&'r Input>,
}

/// A task object just built, before it is written.
pub(super) struct BuiltTask {
    pub(super) loc: TaskLocation,
    pub(super) json: Box<RawValue>,
    pub(super) offloaded: bool,
}

impl Engine {
    /// What a keyed submit writes, built once: the task object and the
    /// `creating` record that carries it.
    pub(super) fn new_claim<'r>(
        &self,
        req: &'r SubmitRequest,
        k: &KeySpec,
        scope: String,
        key_hash: String,
        rkey: String,
    ) -> Result<Claim<'r>, SubmitError> {
        let now = self.now().trunc_subsecs(0);
        let (record_now, expires_at) = self.record_life(now, &k.ttl);
        let fields = self.task_fields(req, now, Some((record_now, expires_at)))?;
        let tenant_id = req.tenant.as_ref().map(Tenant::id);
        let task = self.new_task(
            req,
            now,
            &fields,
            TaskIdempotency {
                scope: Some(&scope),
                key_hash: Some(&key_hash),
                tenant: tenant_id.as_deref(),
            },
        )?;
        let record = Record {
            key: k.key.to_string(),
            key_hash,
            scope: Some(scope),
            task_id: task.loc.id,
            task_key: task.loc.task_key(),
            task_type: req.task_type.to_string(),
            input_hash: req.input.hash.clone(),
            status: Some(RecordStatus::Creating),
            created_at: record_now,
            expires_at,
            // With the task id, kept across retries: that is how a retry
            // recognizes its own earlier write.
            write_id: Some(super::names::new_id()),
            tenant: tenant_id,
            options_hash: req.options.hash(),
            // Carried by the record's bytes, not copied into it.
            pending_task: None,
            pending_input: None,
            replaces_task_id: None,
            reset_at: None,
        };
        let offloaded = task.offloaded.then_some(&req.input);
        let body = record
            .to_bytes_carrying(&task.json, offloaded.map(|i| &*i.canonical))
            .map_err(|e| unserializable(&rkey, e))?;
        Ok(Claim {
            req,
            rkey,
            record,
            body,
            // The task's PUT sends the very text the record carries.
            task: NewTask {
                body: raw_into_bytes(task.json),
                loc: task.loc,
            },
            offloaded,
        })
    }

    /// Our claim again, naming the failed task its task replaces: the same
    /// task and write_id (a retry still knows its own write), the record's
    /// bytes rebuilt with `replaces_task_id`.
    pub(super) fn replacing<'r>(
        &self,
        mine: &Claim<'r>,
        failed: Uuid,
    ) -> Result<Claim<'r>, SubmitError> {
        let mut next = mine.clone();
        next.record.replaces_task_id = Some(failed);
        let task: &RawValue = serde_json::from_slice(&mine.task.body)
            .map_err(|e| unserializable("the task object", e))?;
        next.body = next
            .record
            .to_bytes_carrying(task, mine.offloaded.map(|i| &*i.canonical))
            .map_err(|e| unserializable(&mine.rkey, e))?;
        Ok(next)
    }

    /// A new record's `created_at` and `expires_at` for a submit made at
    /// `now` (our clock). The record's life is in S3's time, as every reader
    /// judges it: from S3's earliest time now. A cold process, which has no
    /// answer yet to learn S3's clock from, writes its own clock's time (a
    /// clock over 60 s off then has the task refused, and the life off by as
    /// much).
    pub(super) fn record_life(
        &self,
        now: DateTime<Utc>,
        ttl: &Ttl,
    ) -> (DateTime<Utc>, DateTime<Utc>) {
        let record_now = self
            .judged_offset()
            .map_or(now, |o| (now + o.low).trunc_subsecs(0));
        (record_now, record_now + ttl.duration())
    }

    /// The task object of a new submit, with the fields its options set.
    pub(super) fn new_task(
        &self,
        req: &SubmitRequest,
        now: DateTime<Utc>,
        fields: &TaskFields,
        idempotency: TaskIdempotency<'_>,
    ) -> Result<BuiltTask, SubmitError> {
        let loc = TaskLocation::new(
            new_task_id(req),
            self.settings.shard_prefix_len,
            fields.available_at,
        );
        let offloaded = fields.offloads(req.input.len());
        let input = if offloaded {
            TaskInput::Offloaded
        } else {
            TaskInput::Inline(&req.input.canonical)
        };
        let json = task_json_with(
            &loc,
            req.task_type.as_str(),
            input,
            now,
            fields,
            idempotency,
        )
        .map_err(|e| unserializable("the task object", e))?;
        Ok(BuiltTask {
            loc,
            json,
            offloaded,
        })
    }

    /// The task's fields from the request's options at a submit made at
    /// `now` (our clock, whole seconds): relative times count from S3's time
    /// (`keyed`: the record's `created_at` and `expires_at`, which bounds
    /// when the task may become available), else from S3's earliest time
    /// now, within `IDEMPOTENCY_MAX_TTL_DAYS`. A task without a schedule is
    /// available at `now`, as it always was.
    pub(super) fn task_fields(
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
        if !o.schedules() {
            fields.available_at = now;
        }
        Ok(fields)
    }
}
