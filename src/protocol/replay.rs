//! What a keyed submit answers when the key is held (step 3 of
//! docs/protocol.md, "A submit with a key"): a conflict with another
//! request, or a replay of its own, finished first if it was interrupted;
//! the status of a record nothing is written for any more; and the answer a
//! record makes.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::claim::Claim;
use super::engine::Engine;
use super::error::{ConflictKind, SubmitError};
use super::finish::Start;
use super::names::IfTaskFailed;
use super::record::{Record, RecordStatus};
use super::request::{IdempotencyInfo, SubmitRequest, Submitted};
use crate::store::ObjectMeta;

/// What differs between the record `existing` holds and the request `req`
/// whose options hash to `options_hash`; `None`: the same request.
pub(super) fn conflict_with(
    existing: &Record,
    req: &SubmitRequest,
    options_hash: &Option<String>,
) -> Option<ConflictKind> {
    if existing.task_type != req.task_type.as_str() {
        Some(ConflictKind::TaskType)
    } else if existing.input_hash != req.input.hash() {
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
pub(super) fn frees(status: Option<&str>) -> bool {
    status.is_some_and(IfTaskFailed::frees)
}

impl Engine {
    /// Step 3: the key is held by another record of its own request, or of
    /// another request. Our payload, if we sent one, belongs to no task: the
    /// key is that record's. It is deleted beside the answer (or before a
    /// conflict is answered; the scheduled pass removes it if this process
    /// dies first).
    pub(super) async fn replay_or_conflict(
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
    pub(super) async fn answer_before_reset(
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
    pub(super) async fn settled_status(
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

    pub(super) fn answer(
        &self,
        rec: &Record,
        status: String,
        replayed: bool,
        recovered: bool,
    ) -> Submitted {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::names::TaskType;
    use crate::protocol::request::Input;
    use crate::protocol::task_options::TaskOptions;

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
}
