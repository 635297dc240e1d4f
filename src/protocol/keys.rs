//! A key's record, looked up and reset on purpose (docs/protocol.md,
//! "Looking up and resetting a key").
//!
//! A lookup reads the record and then its task: two requests in two round
//! trips. It shows what a producer may know of its own key (the task it
//! maps to, the record's life and phase, the task's status) and never the
//! task it would write (`pending_task`), the input or the tenant's hash.
//!
//! A reset frees a key at once, at any age of its record: it replaces the
//! record (`If-Match` on the ETag it read) with a *reset record*, the record
//! as it was with `expires_at` set to the reset's time in S3's clock and a
//! `reset_at` field. It deletes nothing: a late or retried create-only PUT
//! of the old claim meets an object (412), so nothing brings the old record
//! back; the next submit of the key takes the reset record for an expired
//! one and claims over it (`If-Match`), with a new task. It cancels nothing:
//! the old task, if any, is left as it is. It refuses while the record is in
//! flight and its task is not there yet, because a finisher (the key's own
//! submit, a replay, the sweeper) may still create that task, and a task
//! written after the reset would belong to a key nobody holds. Once the task
//! object exists, nobody creates it again (every task write is
//! `If-None-Match: *`, and a marker is only ever written for the task that
//! is there); once the record is settled, nothing is written for it at all;
//! and no finisher writes anything for a reset record. Those two cases are
//! the only ones a reset goes ahead in, so after a reset is answered no task
//! is ever written for the record it reset. Its marker may be: a reset
//! record holds no pending task, so no finisher can write the marker of a
//! submit that died between its task and its marker once the reset has
//! landed, and a reset in the record's finish window finishes the record
//! first (the task in `tasks/`, never in the ready index, otherwise).

use std::time::Duration as StdDuration;

use chrono::{DateTime, SubsecRound, Utc};
use serde::Serialize;
use uuid::Uuid;

use super::engine::{Engine, Failure};
use super::error::SubmitError;
use super::finish::{Start, pending_task};
use super::hash;
use super::names::{IdempotencyKey, Scope, Tenant, ValidationError};
use super::record::{Record, RecordStatus, record_key};
use crate::store::{ObjectMeta, PutMode, StoreError};

/// A key as a lookup or a reset names it: the scope's name exactly as the
/// submit used it (its task type, `queue`, or a custom scope), the key, and
/// the caller's tenant under tenant isolation.
#[derive(Debug, Clone)]
pub struct KeyRef {
    scope: String,
    key: IdempotencyKey,
    tenant: Option<Tenant>,
}

impl KeyRef {
    /// With the rules of `POST /tasks`: a scope is a task type's or a
    /// scope's name (1 to 128 of `A-Z a-z 0-9 _ . -`, not starting with
    /// `.`), a key 1 to 255 characters without control characters.
    pub fn parse(scope: &str, key: &str, tenant: Option<Tenant>) -> Result<Self, ValidationError> {
        let scope = match Scope::parse(Some(scope)).map_err(|e| rename(e, "scope"))? {
            Scope::Custom(name) => name.as_str().to_owned(),
            _ => "queue".to_owned(),
        };
        Ok(KeyRef {
            scope,
            key: IdempotencyKey::parse(key)?,
            tenant,
        })
    }

    /// `sha256:` of the hashed material, as the submit computed it.
    pub fn key_hash(&self) -> String {
        hash::key_hash(&self.scope, &self.key, self.tenant.as_ref())
    }

    /// The record's object key.
    pub fn record_key(&self) -> String {
        record_key(&self.scope, &self.key_hash())
    }
}

/// The same error, naming the field the caller sent.
fn rename(e: ValidationError, field: &'static str) -> ValidationError {
    match e {
        ValidationError::Field { reason, .. } => ValidationError::Field { field, reason },
        other => other,
    }
}

/// What a lookup shows of a key's record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeyView {
    /// The key, as the producer sent it.
    pub key: String,
    /// The scope it lives in: a task type, `queue`, or a custom name.
    pub scope: String,
    /// `sha256:` of the scope, the key and the tenant, if any.
    pub key_hash: String,
    /// The task the key maps to.
    pub task_id: Uuid,
    /// Its task type.
    pub task_type: String,
    /// When the record was written (S3's time).
    #[serde(with = "super::rfc3339")]
    pub created_at: DateTime<Utc>,
    /// When the key is forgotten.
    #[serde(with = "super::rfc3339")]
    pub expires_at: DateTime<Utc>,
    /// `in_flight` (a write for the record may still land) or `settled`, in
    /// S3's time.
    pub phase: &'static str,
    /// The task's current status, or `missing` when there is no task object
    /// (with `in_flight`: not written yet, and it may still come).
    pub task_status: String,
}

/// What a reset came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reset {
    /// The record is a reset record now: the next submit of the key creates
    /// a new task. `old_task_id` is left as it is.
    Done {
        /// The task the key mapped to.
        old_task_id: Uuid,
    },
    /// No live record holds the key (none, expired, reset already, or
    /// another tenant's).
    NotFound,
    /// The record is in flight and its task is not there yet: nothing was
    /// written. Try again after `retry_after`.
    InProgress {
        /// The task the key maps to.
        task_id: Uuid,
        /// When a reset may succeed.
        retry_after: StdDuration,
    },
    /// The record changed between the read and the write (a new submit
    /// replaced it): nothing was written. Look it up again.
    Changed,
}

/// A live record of the key: read, and the caller's to see.
struct Held {
    record: Record,
    meta: ObjectMeta,
}

impl Engine {
    /// The key's record as its producer may see it; `None` when no live
    /// record holds it. Two requests: the record, then its task.
    pub async fn lookup_key(&self, at: &KeyRef) -> Result<Option<KeyView>, SubmitError> {
        let op_deadline = self.now() + self.settings.operation_timeout;
        let Some(held) = self.read_key(at, op_deadline).await? else {
            return Ok(None);
        };
        let phase = self.phase(&held.record, &held.meta).await?;
        Ok(Some(view(at, held.record, phase)))
    }

    /// Resets the key (see the module's docs): three requests, `GET`
    /// record, `GET` task, `PUT` reset record `If-Match` on the ETag just
    /// read, unless a task may still be written for the record; a record
    /// still in its finish window adds a `HEAD` of its marker beside the
    /// task's `GET`, and finishes the record first if the marker is missing.
    /// Logged, one line per reset.
    pub async fn reset_key(&self, at: &KeyRef) -> Result<Reset, SubmitError> {
        let op_deadline = self.now() + self.settings.operation_timeout;
        let Some(held) = self.read_key(at, op_deadline).await? else {
            return Ok(Reset::NotFound);
        };
        let rkey = at.record_key();
        // A submit that died after its task and before its marker leaves a
        // record that a finisher completes, but the reset record holds no
        // pending task: once it lands, no finisher can. So while the record
        // may still be finished, the reset looks for the marker beside its
        // read of the task, and finishes the record first if it is missing.
        let finish_deadline = held.meta.last_modified + self.settings.finish_window;
        let finishable = held.record.status == Some(RecordStatus::Creating)
            && held.record.pending_task.is_some()
            && self.s3_before(finish_deadline)?;
        let (phase, marker) = tokio::join!(
            self.phase(&held.record, &held.meta),
            self.marker_found(&rkey, &held.record, finishable, op_deadline),
        );
        let phase = phase?;
        // Refused while a task may still be written for the record: in
        // flight, and no task object yet. The record's own submit may still
        // be sending its create-only PUT (a retry, or one landing late):
        // that is no reason to wait any more, since it meets the reset
        // record and lands nothing.
        if phase.task_status.is_none() {
            return Ok(Reset::InProgress {
                task_id: held.record.task_id,
                retry_after: self.reset_retry_after(&held.meta)?,
            });
        }
        // Only a `pending` task can be untouched (a worker deletes the
        // marker when it claims): `finish` checks that again before it
        // writes.
        if marker? == Some(false) && phase.task_status.as_deref() == Some("pending") {
            let start = Start::Check;
            self.finish(&rkey, &held.record, start, finish_deadline, op_deadline)
                .await?;
        }
        // The reset's time: S3's earliest time now, in whole seconds, never
        // later than the reset record lands (docs/protocol.md says what a
        // submit makes of it).
        let reset_at = self.s3_earliest()?.trunc_subsecs(0);
        let mut reset = held.record.clone();
        reset.expires_at = reset_at;
        reset.reset_at = Some(reset_at);
        // The task is there, or will never be written: what a finisher would
        // need to write it goes.
        reset.pending_task = None;
        reset.pending_input = None;
        let body =
            bytes::Bytes::from(
                serde_json::to_vec(&reset).map_err(|e| SubmitError::Corrupt {
                    key: rkey.clone(),
                    reason: format!("the reset record could not be serialized: {e}"),
                })?,
            );
        let etag = &held.meta.etag;
        let written = self
            .with_retries(op_deadline, || {
                self.store
                    .put(&rkey, body.clone(), PutMode::Update(etag.clone()))
            })
            .await;
        let answer = match written {
            Ok(_) => Reset::Done {
                old_task_id: held.record.task_id,
            },
            // 412: another record holds the key now, or an earlier attempt
            // of this very PUT landed and its answer was lost (a re-read
            // tells); 404: gone since.
            Err(Failure::Store(StoreError::PreconditionFailed)) => {
                if self.landed_reset(&rkey, &reset, op_deadline).await? {
                    Reset::Done {
                        old_task_id: held.record.task_id,
                    }
                } else {
                    Reset::Changed
                }
            }
            Err(Failure::Store(StoreError::NotFound)) => Reset::NotFound,
            Err(e) => return Err(e.into()),
        };
        if let Reset::Done { old_task_id } = &answer {
            tracing::info!(
                principal_hash = at.tenant.as_ref().map(Tenant::id).as_deref().unwrap_or(""),
                key_hash = %held.record.key_hash,
                old_task_id = %old_task_id,
                "idempotency key reset"
            );
        }
        Ok(answer)
    }

    /// Whether the marker of `rec`'s pending task is there, if `look` (and
    /// `None` if not): one HEAD.
    async fn marker_found(
        &self,
        rkey: &str,
        rec: &Record,
        look: bool,
        op_deadline: DateTime<Utc>,
    ) -> Result<Option<bool>, SubmitError> {
        if !look {
            return Ok(None);
        }
        let marker = pending_task(rkey, rec)?.1.marker_key();
        match self
            .with_retries(op_deadline, || self.store.head(&marker))
            .await
        {
            Ok(_) => Ok(Some(true)),
            Err(Failure::Store(StoreError::NotFound)) => Ok(Some(false)),
            Err(e) => Err(e.into()),
        }
    }

    /// Whether the key holds the reset record `reset` itself (a retried PUT
    /// met its own earlier attempt).
    async fn landed_reset(
        &self,
        rkey: &str,
        reset: &Record,
        op_deadline: DateTime<Utc>,
    ) -> Result<bool, SubmitError> {
        match self
            .with_retries(op_deadline, || self.store.get(rkey))
            .await
        {
            Ok(obj) => Ok(Record::parse(&obj.body).is_ok_and(|now| {
                now.reset_at == reset.reset_at
                    && now.write_id == reset.write_id
                    && now.task_id == reset.task_id
            })),
            Err(Failure::Store(StoreError::NotFound)) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// The live record of `at`, if the caller may see it: none, an expired
    /// one and another tenant's all read as none.
    async fn read_key(
        &self,
        at: &KeyRef,
        op_deadline: DateTime<Utc>,
    ) -> Result<Option<Held>, SubmitError> {
        let Some((record, meta)) = self.read_record(&at.record_key(), op_deadline).await? else {
            return Ok(None);
        };
        // The tenant is folded into the record's path already; a record that
        // names another tenant (or one where the caller names none) is not
        // the caller's all the same.
        if record.tenant != at.tenant.as_ref().map(Tenant::id) {
            return Ok(None);
        }
        // A reset record is no record, whatever the clock says.
        if record.is_reset() || record.is_expired(self.s3_earliest()?) {
            return Ok(None);
        }
        Ok(Some(Held { record, meta }))
    }

    /// When a reset refused may succeed: once the record's own submit has
    /// ended (it wrote the task, or died), else by the record's stale age
    /// (the sweeper finishes it), and at the latest once it is settled.
    fn reset_retry_after(&self, meta: &ObjectMeta) -> Result<StdDuration, SubmitError> {
        let s3_now = self.s3_earliest()?;
        let own_end = meta.last_modified + self.settings.operation_timeout;
        let stale = meta.last_modified + self.settings.stale_creating_after;
        let next = [own_end, stale, self.late_writes_end(meta)]
            .into_iter()
            .find(|t| *t > s3_now)
            .unwrap_or(s3_now);
        Ok((next - s3_now)
            .to_std()
            .unwrap_or_default()
            .max(StdDuration::from_secs(1)))
    }
}

fn view(at: &KeyRef, rec: Record, phase: super::request::Phase) -> KeyView {
    KeyView {
        key: rec.key,
        scope: rec.scope.unwrap_or_else(|| at.scope.clone()),
        key_hash: rec.key_hash,
        task_id: rec.task_id,
        task_type: rec.task_type,
        created_at: rec.created_at,
        expires_at: rec.expires_at,
        phase: phase.phase,
        task_status: phase.task_status.unwrap_or_else(|| "missing".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scope_is_named_as_the_submit_used_it_and_checked_as_post_tasks_checks_it() {
        let k = KeyRef::parse("charge_customer", "k", None).unwrap();
        assert_eq!(k.scope, "charge_customer");
        assert_eq!(KeyRef::parse("queue", "k", None).unwrap().scope, "queue");
        for bad in ["", ".hidden", "a/b", "sp ace"] {
            let e = KeyRef::parse(bad, "k", None).unwrap_err();
            assert!(
                matches!(e, ValidationError::Field { field: "scope", .. }),
                "{bad:?}: {e}"
            );
        }
        let e = KeyRef::parse("t", "", None).unwrap_err();
        assert!(matches!(
            e,
            ValidationError::Field {
                field: "idempotency_key",
                ..
            }
        ));
    }

    #[test]
    fn a_keys_record_is_where_its_submit_wrote_it() {
        let key = IdempotencyKey::parse("k/1 %é").unwrap();
        let tenant = Tenant::from_principal("iam:arn:aws:iam::1:user/a").unwrap();
        let at = KeyRef::parse("t", "k/1 %é", Some(tenant.clone())).unwrap();
        assert_eq!(
            at.record_key(),
            record_key("t", &hash::key_hash("t", &key, Some(&tenant)))
        );
        assert_ne!(
            at.record_key(),
            KeyRef::parse("t", "k/1 %é", None).unwrap().record_key()
        );
    }
}
