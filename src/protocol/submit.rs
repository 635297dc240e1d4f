//! The submit state machine (docs/protocol.md walks through it step by step).
//!
//! A keyed submit writes its record first (`If-None-Match: *`), then the task
//! object and its ready marker in parallel, and answers: two round trips.
//! The record is written once and stays `creating`: whoever meets it before
//! its finish deadline (a later submit of the key, the sweeper) checks both
//! objects and writes what is missing, through `Engine::finish`, a marker
//! only for a task no worker has touched. Past the deadline a record is
//! settled: its task object alone says what became of the submit.
//!
//! Under `RECORD_EVENTS=submitter` a keyed submit sends its record's due
//! message itself (docs/protocol.md, "Due messages from the submitter"),
//! retried like a store request within its operation deadline: accepted
//! before its record's PUT (`DUE_MESSAGE=before_claim`: one that still fails
//! fails the submit, retryably, with nothing written), or beside it
//! (`with_claim`: one that still fails is counted and logged). It carries its
//! send time, so that the sweeper knows how long a record it does not find
//! yet may still land. How a batch's items share their requests is
//! src/due_sender/gather.rs; the engine's due state, src/protocol/engine.rs.

use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use chrono::{DateTime, Duration, SubsecRound, Utc};
use uuid::Uuid;

use super::claim::Claim;
use super::engine::{Engine, Failure};
use super::error::SubmitError;
use super::finish::{Needs, NewTask, Start};
use super::hash;
use super::names::{IfTaskFailed, Tenant};
use super::record::{Record, TaskIdempotency, payload_key, raw_into_bytes, record_key};
use super::replay::frees;
use super::request::{Input, KeySpec, SubmitRequest, Submitted};
use crate::due_sender::{DueOrder, RecordDue, Route, SendError};
use crate::store::{ETag, ObjectMeta, PutMode, StoreError};

/// How many times a submit starts over when the record changes under it
/// (deleted by the sweeper, replaced after expiry) before giving up.
const MAX_ROUNDS: usize = 6;

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

    /// Queues the due message of the record at `rkey` (under
    /// `RECORD_EVENTS=submitter`; nothing otherwise), with retries within
    /// `op_deadline`. A message that still fails is counted
    /// ([`Engine::take_unsent_due_messages`]) and logged; under
    /// [`DueOrder::BeforeClaim`] it is the submit's error (retryable: no
    /// record is written), under [`DueOrder::WithClaim`] the submit goes on.
    pub(crate) async fn send_due(
        &self,
        rkey: &str,
        op_deadline: DateTime<Utc>,
    ) -> Result<(), SubmitError> {
        let Some(due) = &self.due else { return Ok(()) };
        let message = RecordDue::new(due.bucket(), rkey).sent_at(self.signing_time());
        let first = AtomicBool::new(true);
        let attempt = || {
            let m = message.clone();
            let through_batch = first.swap(false, Ordering::Relaxed);
            async move {
                let batched = match (&self.due_route, through_batch) {
                    (Route::Batch(p), true) => p.send(m.clone()).await,
                    _ => None,
                };
                let outcome = match batched {
                    Some(o) => o,
                    None => due
                        .sender
                        .send(std::slice::from_ref(&m))
                        .await
                        .pop()
                        .unwrap_or_else(|| {
                            Err(SendError::Unavailable("the sender answered nothing".into()))
                        }),
                };
                outcome.map_err(|e| match e {
                    SendError::Unavailable(w) => StoreError::Unavailable(w),
                    SendError::Refused(w) => StoreError::Fatal(w),
                })
            }
        };
        let Err(e) = self.with_retries(op_deadline, attempt).await else {
            return Ok(());
        };
        due.unsent.fetch_add(1, Ordering::Relaxed);
        let error = match e {
            Failure::Deadline => "the submit's operation deadline came first".to_owned(),
            Failure::Store(e) => e.to_string(),
        };
        match due.order() {
            DueOrder::BeforeClaim => {
                tracing::error!(
                    record = rkey,
                    error = %error,
                    "the record's due message was not accepted: nothing is written, the submit answers retryably"
                );
                // Retryable whatever the queue said: nothing was written,
                // and the key is as free as it was.
                Err(SubmitError::Storage(StoreError::Unavailable(format!(
                    "the due queue did not accept the record's due message: {error}"
                ))))
            }
            DueOrder::WithClaim => {
                tracing::error!(
                    record = rkey,
                    error = %error,
                    "the record's due message was not sent: if this process dies before its task is written, only the next submit of its key finishes it"
                );
                Ok(())
            }
        }
    }

    /// The time a message sent now says it was sent: the clock this
    /// process's S3 requests are signed with. Once S3's answers have told
    /// its offset, S3's latest time now (the SDK signs with the skew it has
    /// learnt); before that, the machine's own clock, which the first
    /// claim's signature uses too (docs/protocol.md, "Due messages from the
    /// submitter").
    fn signing_time(&self) -> DateTime<Utc> {
        let ahead = self
            .judged_offset()
            .map_or(Duration::zero(), |o| o.high.max(Duration::zero()));
        self.now() + ahead
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
        let Some((mut record, meta)) = self.read_record(&mine.rkey, op_deadline).await? else {
            return Ok(Held::Gone);
        };
        if let Some(reset_at) = record.reset_at {
            let own = record.write_id == mine.record.write_id;
            // S3's clock unknown at the first answer: this submit cannot
            // show it began after the reset, so it is taken as begun before
            // (the safe side: it claims nothing).
            if !own && first_answer.is_some_and(|t| t >= reset_at) {
                return Ok(Held::Expired { etag: meta.etag });
            }
            if record.scope.is_none() {
                record.scope.clone_from(&mine.record.scope);
            }
            return Ok(Held::Reset { record });
        }
        if record.write_id == mine.record.write_id {
            return Ok(Held::Ours {
                last_modified: meta.last_modified,
            });
        }
        // Expired by S3's earliest time, as the sweeper judges it: never
        // before its `expires_at` by S3's clock, whichever machine asks.
        if record.is_expired(self.s3_earliest()?) {
            return Ok(Held::Expired { etag: meta.etag });
        }
        // buquet's records do not name their scope; it is ours.
        if record.scope.is_none() {
            record.scope.clone_from(&mine.record.scope);
        }
        Ok(Held::Other { record, meta })
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

    /// `payloads/{task_id}/input.json` with If-None-Match: 412 is our own
    /// earlier attempt (the task id is new and ours).
    async fn put_payload(
        &self,
        id: Uuid,
        input: &Input,
        op_deadline: DateTime<Utc>,
    ) -> Result<(), SubmitError> {
        let key = payload_key(id);
        let bytes = Bytes::copy_from_slice(input.as_json().as_bytes());
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
    pub(super) async fn remove_orphan_payload(&self, id: Uuid, op_deadline: DateTime<Utc>) {
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
}
