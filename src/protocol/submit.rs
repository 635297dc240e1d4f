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
use super::finish::{Needs, NewTask, Start};
use super::hash;
use super::names::{IdempotencyKey, IfTaskFailed, Scope, TaskType, Tenant, Ttl, ValidationError};
use super::options::{TaskFields, TaskOptions};
use super::record::{
    Record, RecordStatus, TaskIdempotency, TaskInput, TaskLocation, payload_key, raw_into_bytes,
    record_key, task_json_with,
};
use crate::due_sender::DueOrder;
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
        let canonical = hash::canonical_raw(value)
            .map_err(|e| ValidationError::field("input", format!("cannot be serialized: {e}")))?;
        let size = canonical.get().len();
        if size > max_bytes {
            return Err(SubmitError::InputTooLarge {
                size,
                limit: max_bytes,
            });
        }
        let hash = hash::input_hash(canonical.get().as_bytes());
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
        .map_or_else(super::names::new_id, Tenant::new_task_id)
}

/// What differs between the record `existing` holds and the request `req`
/// whose options hash to `options_hash`; `None`: the same request.
fn conflict_with(
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

/// A task status that frees its key to an `if_task_failed: new_task`
/// submit; `None`: no task (yet), which frees nothing.
fn frees(status: Option<&str>) -> bool {
    status.is_some_and(IfTaskFailed::frees)
}

/// The idempotency part of a request.
#[derive(Debug, Clone)]
pub struct KeySpec {
    pub(crate) key: IdempotencyKey,
    pub(crate) scope: Scope,
    pub(crate) ttl: Ttl,
}

/// A submit, parsed.
#[derive(Debug, Clone)]
pub struct SubmitRequest {
    pub(crate) task_type: TaskType,
    pub(crate) input: Input,
    pub(crate) idempotency: Option<KeySpec>,
    /// The task options, as sent (checked for bounds; the checks that need
    /// the submit's time are made when it is sent).
    pub(crate) options: TaskOptions,
    /// The caller's tenant under tenant isolation: folded into the key hash,
    /// stored in the record and in the task object's `idempotency`.
    pub(crate) tenant: Option<Tenant>,
    /// What to do when the key's task ended failed or cancelled.
    pub(crate) if_task_failed: IfTaskFailed,
}

/// What a successful submit answers.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Submitted {
    pub task_id: Uuid,
    pub task_key: String,
    pub task_type: String,
    /// The task object's current status; `missing` when it is gone.
    pub status: String,
    #[serde(with = "super::rfc3339")]
    pub created_at: DateTime<Utc>,
    /// `false`: this submit created the task (201). `true`: an earlier submit
    /// of the key did (200).
    pub replayed: bool,
    pub idempotency: Option<IdempotencyInfo>,
    /// The key's earlier task, which had ended failed or cancelled, when
    /// this task replaced it (`if_task_failed: new_task`); kept in the
    /// record, so that replays name it too.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replaces_task_id: Option<Uuid>,
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
    #[serde(with = "super::rfc3339")]
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

/// What a keyed submit writes, built once and kept across every retry (its
/// task id and write_id are how a retry recognizes its own earlier write).
#[derive(Clone)]
struct Claim<'r> {
    req: &'r SubmitRequest,
    rkey: String,
    /// The record as written, but for its `pending_task` and
    /// `pending_input`: `body` carries them.
    record: Record,
    body: Bytes,
    task: NewTask,
    /// The input, when it is offloaded to its payload.
    offloaded: Option<&'r Input>,
}

/// A task object just built, before it is written.
struct BuiltTask {
    loc: TaskLocation,
    json: Box<RawValue>,
    offloaded: bool,
}

/// What became of an offloaded input's payload, written beside the claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Payload {
    Unsent,
    Landed,
    /// Sent, and not landed: written again before the task once the record
    /// is ours.
    Failed,
}

/// The record that holds the key, as a claim that lost meets it.
// One a round, moved straight into its step: not worth a box.
#[allow(clippy::large_enum_variant)]
enum Held {
    /// None any more.
    Gone,
    /// Ours: an earlier attempt of this submit wrote it.
    Ours { last_modified: DateTime<Utc> },
    /// Past its `expires_at`.
    Expired { etag: ETag },
    /// Another submit's, live.
    Other { record: Record, meta: ObjectMeta },
    /// A reset record, met by a submit that began before the reset (or by
    /// the record's own submit): the key as it was when the submit began.
    Reset { record: Record },
}

/// When our record was written, as far as we know: the local time we sent
/// it at (made S3's earliest once the payload is settled, with what its
/// answers taught the clock), or its `LastModified`, read back.
#[derive(Debug, Clone, Copy)]
enum Written {
    SentAt(DateTime<Utc>),
    LastModified(DateTime<Utc>),
}

impl Engine {
    /// Submits a task: a plain new task without a key, the idempotency
    /// protocol with one.
    pub(crate) async fn submit(&self, req: &SubmitRequest) -> Result<Submitted, SubmitError> {
        let op_deadline = self.now() + self.settings.operation_timeout;
        // Before anything is written (src/protocol/schema.rs).
        let answer = match self.check_input(req, op_deadline).await {
            Err(e) => {
                self.send_no_due();
                self.answer_refused(req, e, op_deadline).await
            }
            Ok(()) => match &req.idempotency {
                None => {
                    // No record, so no due message (src/protocol/due.rs).
                    self.send_no_due();
                    self.submit_plain(req, op_deadline).await
                }
                Some(k) => self.submit_keyed(req, k, op_deadline).await,
            },
        };
        // A keyed submit refused before its claim sent nothing either.
        self.send_no_due();
        answer
    }

    /// A submit without a key: the task and its marker, in parallel (and
    /// its payload first, when the input is offloaded).
    async fn submit_plain(
        &self,
        req: &SubmitRequest,
        op_deadline: DateTime<Utc>,
    ) -> Result<Submitted, SubmitError> {
        let now = self.now().trunc_subsecs(0);
        let fields = self.task_fields(req, now, None)?;
        let tenant_id = req.tenant.as_ref().map(Tenant::id);
        let task = self.new_task(
            req,
            now,
            &fields,
            TaskIdempotency {
                tenant: tenant_id.as_deref(),
                ..Default::default()
            },
        )?;
        // Without a record, nothing else holds the input: its payload must
        // be in the bucket before a task names it (one more round trip, as
        // buquet's own submit takes).
        if task.offloaded {
            self.put_payload(task.loc.id, &req.input, op_deadline)
                .await?;
        }
        let task = NewTask {
            body: raw_into_bytes(task.json),
            loc: task.loc,
        };
        let status = self.put_task_and_marker(&task, op_deadline).await?;
        Ok(Submitted {
            task_id: task.loc.id,
            task_key: task.loc.task_key(),
            task_type: req.task_type.to_string(),
            status,
            created_at: now,
            replayed: false,
            idempotency: None,
            replaces_task_id: None,
            recovered: false,
        })
    }

    /// A new task without a record: `PUT task If-None-Match: *` and `PUT
    /// marker`, side by side, one round trip; the task's status. As a
    /// finisher does, it reads the task again when a worker may have claimed
    /// it before the marker landed (the task met by a 412, a marker that took
    /// a retry or was answered late), and removes the marker if one has:
    /// without a record, no sweeper ever looks at this task again.
    async fn put_task_and_marker(
        &self,
        task: &NewTask,
        op_deadline: DateTime<Utc>,
    ) -> Result<String, SubmitError> {
        let (task_key, marker_key) = (task.loc.task_key(), task.loc.marker_key());
        let wrote = self
            .write_missing(
                &task_key,
                &task.body,
                &marker_key,
                &Needs::everything(),
                op_deadline,
                SubmitError::from,
            )
            .await?;
        if !wrote.reread_needed() {
            return Ok("pending".into());
        }
        let status = self
            .verify_marker(&task_key, &task.loc, &marker_key, op_deadline)
            .await?;
        Ok(status.unwrap_or_else(|| "missing".into()))
    }

    /// The idempotency protocol (docs/protocol.md, "A submit with a key"):
    /// claim the key, read the record that holds it, replay it or refuse a
    /// conflict; over again when the record changes in between.
    async fn submit_keyed(
        &self,
        req: &SubmitRequest,
        k: &KeySpec,
        op_deadline: DateTime<Utc>,
    ) -> Result<Submitted, SubmitError> {
        let scope = k.scope.resolve(&req.task_type).to_owned();
        let key_hash = hash::key_hash(&scope, &k.key, req.tenant.as_ref());
        let rkey = record_key(&scope, &key_hash);
        self.refuse_if_clock_known_off(&rkey, op_deadline).await?;
        let mine = self.new_claim(req, k, scope, key_hash, rkey)?;
        // Under RECORD_EVENTS=submitter the record's due message is accepted
        // before the first claim's PUT is sent (before_claim), or goes out
        // beside it (with_claim), never after it: a process that dies once
        // its record has landed has sent it already. It names the record,
        // so it covers a claim retried or replacing an expired record too.
        // It is sent before the submit knows whether the key is taken: a
        // replay or a conflict sends one as well.
        match self.due_order() {
            Some(DueOrder::BeforeClaim) => {
                self.send_due(&mine.rkey, op_deadline).await?;
                self.claim_rounds(&mine, op_deadline).await
            }
            Some(DueOrder::WithClaim) => {
                let (answer, _unsent_is_counted) = tokio::join!(
                    self.claim_rounds(&mine, op_deadline),
                    self.send_due(&mine.rkey, op_deadline)
                );
                answer
            }
            None => self.claim_rounds(&mine, op_deadline).await,
        }
    }

    /// Steps 1 to 3, over again while the record changes under the claim.
    async fn claim_rounds(
        &self,
        mine: &Claim<'_>,
        op_deadline: DateTime<Utc>,
    ) -> Result<Submitted, SubmitError> {
        // What the next claim writes over: nothing (If-None-Match), or the
        // expired record just read (If-Match its ETag).
        let mut replace: Option<ETag> = None;
        // The claim that replaces a record whose task failed: ours, naming
        // that task (same task, same write_id).
        let mut reuse: Option<Claim<'_>> = None;
        let mut payload = Payload::Unsent;
        // S3's time, whole seconds, once the first claim was answered: what
        // a reset record's `reset_at` is compared with.
        // `None` inside: S3's clock was not known then (only a reset
        // record needs it).
        let mut first_answer: Option<Option<DateTime<Utc>>> = None;
        let mut rounds = 0;
        while rounds < MAX_ROUNDS {
            let mine = reuse.as_ref().unwrap_or(mine);
            // 1. Claim the key: create the record, or replace the expired one.
            let replacing = replace.is_some();
            let mode = replace.take().map_or(PutMode::Create, PutMode::Update);
            if let Some(done) = self.claim(mine, mode, &mut payload, op_deadline).await? {
                return Ok(done);
            }
            if replacing {
                // Someone else replaced or deleted it first: start over.
                continue;
            }
            rounds += 1;
            let first_answer = match first_answer {
                Some(t) => t,
                None => *first_answer.insert(self.s3_earliest().ok().map(|t| t.trunc_subsecs(0))),
            };

            // 2. The key is taken: read what holds it.
            // A claim over anything but the failed task's record replaces
            // no failed task: the plain claim (the same task and write_id).
            match self.read_held(mine, first_answer, op_deadline).await? {
                // Deleted since (it had expired): claim it again.
                Held::Gone => {
                    reuse = None;
                    continue;
                }
                // Our own write: its answer was lost, and a retry met it.
                Held::Ours { last_modified } => {
                    let written = Written::LastModified(last_modified);
                    return self
                        .finish_own(mine, &mut payload, written, op_deadline)
                        .await;
                }
                // Counts as absent: replaced, if it is still the one we read.
                // (A reuse that lost its If-Match race to another reuse,
                // whose record was then reset, lands here.)
                Held::Expired { etag } => {
                    reuse = None;
                    replace = Some(etag);
                }
                // 3. The same key: the same request, or a conflict; or, with
                // `if_task_failed: new_task`, a key whose task failed, claimed
                // over its record as if it had expired.
                Held::Other { record, meta } => {
                    let status = match mine.req.if_task_failed {
                        IfTaskFailed::Replay => None,
                        IfTaskFailed::NewTask => {
                            Some(self.read_status(&record.task_key, op_deadline).await?)
                        }
                    };
                    if status.as_ref().is_some_and(|s| frees(s.as_deref())) {
                        reuse = Some(self.replacing(mine, record.task_id)?);
                        replace = Some(meta.etag);
                        continue;
                    }
                    let sent = payload != Payload::Unsent;
                    return self
                        .replay_or_conflict(mine, &record, &meta, sent, status, op_deadline)
                        .await;
                }
                // Answered as the record was before the reset, and nothing
                // is written for it.
                Held::Reset { record } => {
                    let sent = payload != Payload::Unsent;
                    return self
                        .answer_before_reset(mine, &record, sent, op_deadline)
                        .await;
                }
            }
        }
        Err(SubmitError::Storage(StoreError::Unavailable(
            "the idempotency record kept changing; gave up".into(),
        )))
    }

    /// What a keyed submit writes, built once: the task object and the
    /// `creating` record that carries it.
    fn new_claim<'r>(
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
    fn replacing<'r>(&self, mine: &Claim<'r>, failed: Uuid) -> Result<Claim<'r>, SubmitError> {
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
    fn record_life(&self, now: DateTime<Utc>, ttl: &Ttl) -> (DateTime<Utc>, DateTime<Utc>) {
        let record_now = self
            .judged_offset()
            .map_or(now, |o| (now + o.low).trunc_subsecs(0));
        (record_now, record_now + ttl.duration())
    }

    /// The task object of a new submit, with the fields its options set.
    fn new_task(
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

    /// Step 1: writes our record (`mode`: If-None-Match, or If-Match the
    /// expired record's ETag) and, if it landed, finishes as its owner: the
    /// answer. `None`: the key is held by another record (412), or the
    /// expired one we meant to replace is gone (404).
    ///
    /// An offloaded input's payload is written beside the record until it
    /// has landed: a request more, not a round trip.
    async fn claim(
        &self,
        mine: &Claim<'_>,
        mode: PutMode,
        payload: &mut Payload,
        op_deadline: DateTime<Utc>,
    ) -> Result<Option<Submitted>, SubmitError> {
        let with_payload = mine.offloaded.filter(|_| *payload != Payload::Landed);
        let sent_at = self.now();
        let (r, p) = tokio::join!(
            self.with_retries(op_deadline, || {
                self.store.put(&mine.rkey, mine.body.clone(), mode.clone())
            }),
            async {
                match with_payload {
                    Some(input) => {
                        Some(self.put_payload(mine.task.loc.id, input, op_deadline).await)
                    }
                    None => None,
                }
            }
        );
        if let Some(p) = p {
            *payload = if p.is_ok() {
                Payload::Landed
            } else {
                Payload::Failed
            };
        }
        match r {
            Ok(_) => {
                let written = Written::SentAt(sent_at);
                Ok(Some(
                    self.finish_own(mine, payload, written, op_deadline).await?,
                ))
            }
            Err(Failure::Store(StoreError::PreconditionFailed | StoreError::NotFound)) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Step 2: the record that holds the key, and what it is to this
    /// submit, whose first claim was answered at `first_answer` (S3's
    /// earliest time then, whole seconds).
    ///
    /// A reset record is an expired record to a submit that began after the
    /// reset, and claimed over. One that began before it never claims over
    /// it: it is answered with the record's task, which is there (a reset is
    /// refused while a task may still be written), as if the reset had come
    /// after it. Which it is is judged in S3's time, by its first answer: a
    /// submit whose first claim was answered in a second before `reset_at`
    /// (S3's earliest time at the reset, whole seconds) began before the
    /// reset. The record's own submit (its `write_id`) began before the
    /// reset whatever the clock says, and is never let claim over it: its
    /// claim would bring the old record back.
    async fn read_held(
        &self,
        mine: &Claim<'_>,
        first_answer: Option<DateTime<Utc>>,
        op_deadline: DateTime<Utc>,
    ) -> Result<Held, SubmitError> {
        let obj = match self
            .with_retries(op_deadline, || self.store.get(&mine.rkey))
            .await
        {
            Ok(o) => o,
            Err(Failure::Store(StoreError::NotFound)) => return Ok(Held::Gone),
            Err(e) => return Err(e.into()),
        };
        let mut record = Record::parse(&obj.body).map_err(|e| SubmitError::Corrupt {
            key: mine.rkey.clone(),
            reason: e.to_string(),
        })?;
        if let Some(reset_at) = record.reset_at {
            let own = record.write_id == mine.record.write_id;
            // S3's clock unknown at the first answer: this submit cannot
            // show it began after the reset, so it is taken as begun before
            // (the safe side: it claims nothing).
            if !own && first_answer.is_some_and(|t| t >= reset_at) {
                return Ok(Held::Expired {
                    etag: obj.meta.etag,
                });
            }
            if record.scope.is_none() {
                record.scope.clone_from(&mine.record.scope);
            }
            return Ok(Held::Reset { record });
        }
        if record.write_id == mine.record.write_id {
            return Ok(Held::Ours {
                last_modified: obj.meta.last_modified,
            });
        }
        // Expired by S3's earliest time, as the sweeper judges it: never
        // before its `expires_at` by S3's clock, whichever machine asks.
        if record.is_expired(self.s3_earliest()?) {
            return Ok(Held::Expired {
                etag: obj.meta.etag,
            });
        }
        // buquet's records do not name their scope; it is ours.
        if record.scope.is_none() {
            record.scope.clone_from(&mine.record.scope);
        }
        Ok(Held::Other {
            record,
            meta: obj.meta,
        })
    }

    /// Our record is in the bucket (this claim's, or an earlier attempt's
    /// whose answer was lost): the payload if it has not landed yet (the
    /// record's `pending_input` lets any finisher write it too), then the
    /// task object and its marker, and the 201. The record stays as
    /// written.
    async fn finish_own(
        &self,
        mine: &Claim<'_>,
        payload: &mut Payload,
        written: Written,
        op_deadline: DateTime<Utc>,
    ) -> Result<Submitted, SubmitError> {
        if let (Payload::Failed, Some(input)) = (*payload, mine.offloaded) {
            self.put_payload(mine.task.loc.id, input, op_deadline)
                .await?;
            *payload = Payload::Landed;
        }
        // Our estimate of the record's LastModified is the earliest S3 time
        // at which we sent it, which is never later: the deadline we keep is
        // never later than the real one.
        let written_not_before = match written {
            Written::SentAt(sent_at) => self.s3_at_least(sent_at)?,
            Written::LastModified(t) => t,
        };
        let deadline = written_not_before + self.settings.finish_window;
        let start = Start::Claimed(&mine.task);
        let done = self
            .finish(&mine.rkey, &mine.record, start, deadline, op_deadline)
            .await?;
        let status = self.status_after(&mine.record, &done, op_deadline).await?;
        Ok(self.answer(&mine.record, status, false, false))
    }

    /// Step 3: the key is held by another record of its own request, or of
    /// another request. Our payload, if we sent one, belongs to no task: the
    /// key is that record's. It is deleted beside the answer (or before a
    /// conflict is answered; the scheduled pass removes it if this process
    /// dies first).
    async fn replay_or_conflict(
        &self,
        mine: &Claim<'_>,
        held: &Record,
        meta: &ObjectMeta,
        sent_payload: bool,
        known_status: Option<Option<String>>,
        op_deadline: DateTime<Utc>,
    ) -> Result<Submitted, SubmitError> {
        let my_task_id = mine.task.loc.id;
        let orphan = async {
            if sent_payload && held.task_id != my_task_id {
                self.remove_orphan_payload(my_task_id, op_deadline).await;
            }
        };
        if let Some(kind) = conflict_with(held, mine.req, &mine.record.options_hash) {
            orphan.await;
            return Err(SubmitError::Conflict {
                kind,
                task_id: held.task_id,
            });
        }
        let (answer, ()) = tokio::join!(
            self.answer_existing(
                &mine.rkey,
                held,
                meta,
                my_task_id,
                known_status,
                op_deadline
            ),
            orphan
        );
        answer
    }

    /// A submit that began before the key was reset meets the reset record:
    /// answered as the record was (its own 201, a replay, or a conflict),
    /// with the task's status. Nothing is written for it: its task is there,
    /// or will never be (the reset went ahead only then).
    async fn answer_before_reset(
        &self,
        mine: &Claim<'_>,
        held: &Record,
        sent_payload: bool,
        op_deadline: DateTime<Utc>,
    ) -> Result<Submitted, SubmitError> {
        let own = held.write_id == mine.record.write_id;
        if sent_payload && !own {
            self.remove_orphan_payload(mine.task.loc.id, op_deadline)
                .await;
        }
        if !own && let Some(kind) = conflict_with(held, mine.req, &mine.record.options_hash) {
            return Err(SubmitError::Conflict {
                kind,
                task_id: held.task_id,
            });
        }
        let status = self.read_status(&held.task_key, op_deadline).await?;
        let replayed = held.task_id != mine.task.loc.id;
        Ok(self.answer(
            held,
            status.unwrap_or_else(|| "missing".into()),
            replayed,
            false,
        ))
    }

    /// The key holds a record of the same request: replay it, finishing it
    /// first if it was interrupted. `known_status`: the task's status, when
    /// this submit has just read it.
    pub(super) async fn answer_existing(
        &self,
        rkey: &str,
        rec: &Record,
        meta: &ObjectMeta,
        my_task_id: Uuid,
        known_status: Option<Option<String>>,
        op_deadline: DateTime<Utc>,
    ) -> Result<Submitted, SubmitError> {
        // Our own task id on a record we did not recognize by write_id: we
        // wrote it (an earlier version's sweeper may have turned it ready).
        // It is still our 201.
        let replayed = rec.task_id != my_task_id;
        let finish_deadline = meta.last_modified + self.settings.finish_window;
        match rec.status {
            Some(RecordStatus::Ready) => {
                let status = match known_status {
                    Some(s) => s,
                    None => self.read_status(&rec.task_key, op_deadline).await?,
                };
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
            // `status` (buquet's): nothing is written for it.
            _ => {
                let status = self
                    .settled_status(rec, meta, known_status, op_deadline)
                    .await?;
                Ok(self.answer(rec, status, replayed, false))
            }
        }
    }

    /// The status of a record nothing is written for any more: its task's,
    /// or `missing` once no late write can land any more (until then, the
    /// submit is undetermined).
    async fn settled_status(
        &self,
        rec: &Record,
        meta: &ObjectMeta,
        known_status: Option<Option<String>>,
        op_deadline: DateTime<Utc>,
    ) -> Result<String, SubmitError> {
        let status = match known_status {
            Some(s) => s,
            None => self.read_status(&rec.task_key, op_deadline).await?,
        };
        if let Some(status) = status {
            return Ok(status);
        }
        // `missing` only once S3's earliest possible time is past the last
        // instant a late write can land.
        let until = self.late_writes_end(meta);
        let s3_now = self.s3_earliest()?;
        if s3_now < until {
            return Err(SubmitError::Undetermined {
                task_id: rec.task_id,
                retry_after: (until - s3_now).to_std().unwrap_or_default(),
            });
        }
        Ok("missing".into())
    }

    /// The last instant a write for the record read with `meta` can land:
    /// its finish deadline, plus how late a signed request can still land.
    pub(super) fn late_writes_end(&self, meta: &ObjectMeta) -> DateTime<Utc> {
        meta.last_modified + self.settings.finish_window + self.settings.late_write_margin
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
        if !o.schedules() {
            fields.available_at = now;
        }
        Ok(fields)
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
        let until = self.late_writes_end(meta);
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
            replaces_task_id: rec.replaces_task_id,
            recovered,
        }
    }
}

/// The input checked against its task type's published schema
/// (`VALIDATE_INPUT_SCHEMAS`, src/protocol/schema.rs), before anything is
/// written, and the answer to a submit that the check refused.
impl Engine {
    /// Checks `req`'s input against its task type's published schema, when
    /// `VALIDATE_INPUT_SCHEMAS` is on. Writes nothing.
    async fn check_input(
        &self,
        req: &SubmitRequest,
        op_deadline: DateTime<Utc>,
    ) -> Result<(), SubmitError> {
        if !self.settings.validate_input_schemas {
            return Ok(());
        }
        self.check_schema(req, op_deadline).await
    }

    /// The check: the process's cache of schemas, read through the one retry
    /// loop.
    #[cfg(feature = "schemas")]
    async fn check_schema(
        &self,
        req: &SubmitRequest,
        op_deadline: DateTime<Utc>,
    ) -> Result<(), SubmitError> {
        let read = |key: String, etag: Option<ETag>| async move {
            self.with_retries(op_deadline, || async {
                match &etag {
                    Some(etag) => self.store.get_if_none_match(&key, etag).await,
                    None => self.store.get(&key).await,
                }
            })
            .await
        };
        self.schemas
            .check(
                &req.task_type,
                req.input.as_json(),
                self.clock.as_ref(),
                self.settings.schema_cache_ttl,
                read,
            )
            .await
    }

    /// A build without a validator checks nothing: the submit is refused,
    /// never let through unchecked (`Config` refuses the setting at start
    /// already; this is a queue built on settings that ask for it anyway).
    #[cfg(not(feature = "schemas"))]
    async fn check_schema(
        &self,
        _req: &SubmitRequest,
        _op_deadline: DateTime<Utc>,
    ) -> Result<(), SubmitError> {
        Err(SubmitError::Storage(StoreError::Fatal(format!(
            "VALIDATE_INPUT_SCHEMAS: {}",
            crate::config::NO_SCHEMAS_BUILD
        ))))
    }

    /// The answer to a submit whose check failed with `refusal`. Without a
    /// key, or for anything but an invalid input, the refusal. With a key,
    /// the key's promise comes first: the record of the key is read (one GET,
    /// on this path only), and a live record is answered as the protocol
    /// answers it (a replay of the same request, finished if it was
    /// interrupted; a conflict with another request; a submit still
    /// undetermined), because the input was accepted when the record was
    /// written and the schema may have changed since. No record, or an
    /// expired one (the protocol would write a new task with this input):
    /// the refusal, and nothing is written.
    async fn answer_refused(
        &self,
        req: &SubmitRequest,
        refusal: SubmitError,
        op_deadline: DateTime<Utc>,
    ) -> Result<Submitted, SubmitError> {
        let (SubmitError::InputInvalid { .. }, Some(k)) = (&refusal, &req.idempotency) else {
            return Err(refusal);
        };
        let scope = k.scope.resolve(&req.task_type).to_owned();
        let key_hash = hash::key_hash(&scope, &k.key, req.tenant.as_ref());
        let rkey = record_key(&scope, &key_hash);
        let obj = match self
            .with_retries(op_deadline, || self.store.get(&rkey))
            .await
        {
            Ok(o) => o,
            Err(Failure::Store(StoreError::NotFound)) => return Err(refusal),
            // Whether the key holds a record cannot be told: a retry can.
            Err(e) => return Err(e.into()),
        };
        let mut existing = Record::parse(&obj.body).map_err(|e| SubmitError::Corrupt {
            key: rkey.clone(),
            reason: e.to_string(),
        })?;
        existing.scope.get_or_insert_with(|| scope.clone());
        // A reset record is no record: this submit would claim over it.
        if existing.is_reset() || existing.is_expired(self.s3_earliest()?) {
            return Err(refusal);
        }
        if let Some(kind) = conflict_with(&existing, req, &req.options.hash()) {
            return Err(SubmitError::Conflict {
                kind,
                task_id: existing.task_id,
            });
        }
        // A key whose task failed is free to a `new_task` submit, which
        // this one would have claimed: the refusal stands.
        let status = match req.if_task_failed {
            IfTaskFailed::Replay => None,
            IfTaskFailed::NewTask => {
                let s = self.read_status(&existing.task_key, op_deadline).await?;
                if frees(s.as_deref()) {
                    return Err(refusal);
                }
                Some(s)
            }
        };
        // A task id of nobody's: this submit wrote nothing, so the answer is
        // a replay.
        self.answer_existing(
            &rkey,
            &existing,
            &obj.meta,
            uuid::Uuid::nil(),
            status,
            op_deadline,
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(task_type: &str, input_hash: &str, options_hash: Option<&str>) -> Record {
        Record {
            key: "k".into(),
            key_hash: "sha256:00".into(),
            scope: Some("s".into()),
            task_id: Uuid::new_v4(),
            task_key: "tasks/0/x.json".into(),
            task_type: task_type.into(),
            input_hash: input_hash.into(),
            status: Some(RecordStatus::Creating),
            created_at: DateTime::<Utc>::default(),
            expires_at: DateTime::<Utc>::default(),
            write_id: Some(Uuid::new_v4()),
            tenant: None,
            options_hash: options_hash.map(str::to_owned),
            pending_task: None,
            pending_input: None,
            replaces_task_id: None,
            reset_at: None,
        }
    }

    /// A submit of task type `t` with the input `1`.
    fn request() -> SubmitRequest {
        SubmitRequest {
            task_type: TaskType::parse("t".to_owned()).unwrap(),
            input: Input::new(&serde_json::json!(1), 1024).unwrap(),
            idempotency: None,
            options: TaskOptions::default(),
            tenant: None,
            if_task_failed: IfTaskFailed::Replay,
        }
    }

    #[test]
    fn another_task_type_input_or_options_is_a_conflict_in_that_order() {
        let req = request();
        let input = req.input.hash().to_owned();
        let options = Some("sha256:op".to_owned());
        let same = record("t", &input, Some("sha256:op"));
        assert_eq!(conflict_with(&same, &req, &options), None);
        let other = |t, i, o| conflict_with(&record(t, i, o), &req, &options);
        assert_eq!(
            other("u", "sha256:other", None),
            Some(ConflictKind::TaskType)
        );
        assert_eq!(other("t", "sha256:other", None), Some(ConflictKind::Input));
        assert_eq!(other("t", &input, None), Some(ConflictKind::Options));
    }

    #[test]
    fn a_record_of_buquets_clients_keeps_no_options_and_is_compared_without_them() {
        let req = request();
        let options = Some("sha256:op".to_owned());
        let mut buquets = record("t", req.input.hash(), None);
        buquets.write_id = None;
        assert_eq!(conflict_with(&buquets, &req, &options), None);
        buquets.input_hash = "sha256:other".into();
        assert_eq!(
            conflict_with(&buquets, &req, &options),
            Some(ConflictKind::Input)
        );
    }

    #[test]
    fn an_inputs_hash_and_length_are_of_its_canonical_form_whatever_its_key_order() {
        let canonical = r#"{"a":[true,null],"b":1}"#;
        let a = Input::new(&serde_json::json!({"b": 1, "a": [true, null]}), 1024).unwrap();
        let spaced: serde_json::Value =
            serde_json::from_str(r#"{ "a": [true, null], "b": 1 }"#).unwrap();
        let b = Input::new(&spaced, 1024).unwrap();
        assert_eq!(a.hash(), b.hash());
        assert_eq!(a.hash(), hash::input_hash(canonical.as_bytes()));
        assert_eq!(a.len(), canonical.len());
        assert!(!a.is_empty());
        assert!(matches!(
            Input::new(&serde_json::json!("xx"), 3),
            Err(SubmitError::InputTooLarge { size: 4, limit: 3 })
        ));
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
            replaces_task_id: None,
            recovered: false,
        };
        assert!(s.created());
        s.replayed = true;
        assert!(!s.created());
    }
}
