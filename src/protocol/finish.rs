//! Finishing a submit: making sure that a record's task object exists and,
//! while no worker has touched the task, its ready marker too (docs/protocol.md,
//! "Finishing" and "The ready index stays true").

use bytes::Bytes;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::engine::{Engine, Failure};
use super::error::SubmitError;
use super::record::{Record, TaskHead, TaskLocation, TaskState, payload_key, task_status};
use crate::store::{PutMode, StoreError};

/// Where [`Engine::finish`] starts.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Start<'a> {
    /// This submit has just written the record: neither object can exist
    /// yet (except by a lost answer of our own, which the task's 412 tells),
    /// so both are written at once. The task is the submit's own, as it put
    /// it in the record: nothing is read back from the record.
    Claimed(&'a NewTask),
    /// Anyone else: read the task and check the marker first, and write only
    /// what is missing.
    Check,
    /// A dry run of [`Start::Check`]: the same reads and the same judgement
    /// (the write window included), and no write at all, not even a stale
    /// marker's removal. [`Finished::wrote`] says whether `Check` would
    /// have written the task or the marker.
    Plan,
}

/// A task object a submit built: where it lives, and its bytes, the very
/// text of its record's `pending_task`.
#[derive(Debug, Clone)]
pub(crate) struct NewTask {
    pub loc: TaskLocation,
    pub body: Bytes,
}

/// The bytes of the task a finisher writes: the submit's own, or the text
/// of a record read back (copied only if the task has to be written).
enum TaskBody<'a> {
    Own(&'a Bytes),
    Record(&'a str),
}

impl TaskBody<'_> {
    fn as_bytes(&self) -> &[u8] {
        match self {
            TaskBody::Own(b) => b,
            TaskBody::Record(s) => s.as_bytes(),
        }
    }

    fn to_bytes(&self) -> Bytes {
        match self {
            TaskBody::Own(b) => Bytes::clone(b),
            TaskBody::Record(s) => Bytes::copy_from_slice(s.as_bytes()),
        }
    }
}

/// What a finisher has to write, and the task's status if it read it.
pub(super) struct Needs {
    task: bool,
    marker: bool,
    status: Option<String>,
}

impl Needs {
    /// A first submit's: nothing can exist yet.
    pub(super) fn everything() -> Self {
        Needs {
            task: true,
            marker: true,
            status: None,
        }
    }
}

/// When, in S3's time and in ours, a finisher's writes must stop, and what a
/// write refused by that deadline answers.
struct WriteWindow {
    task_id: Uuid,
    /// S3's time: the record's `LastModified` (or our earliest estimate of
    /// it) + `FINISH_WINDOW_SECONDS`.
    finish_deadline: DateTime<Utc>,
    /// The finish deadline on our clock, on its safe side (S3's latest).
    local_finish_deadline: DateTime<Utc>,
    /// No attempt starts at or after it: the finish deadline, or the
    /// operation's if that comes first.
    deadline: DateTime<Utc>,
    offset_low: chrono::Duration,
}

/// What [`Engine::write_missing`] did.
pub(super) struct Wrote {
    /// This call created the task object.
    created: bool,
    /// How many attempts the marker took (0: not written).
    marker_attempts: u32,
    /// The marker's answer came late beside the task's ([`marker_late`]).
    marker_late: bool,
}

/// Whether the marker just written (if any) needs the task read again. Not when this
/// call created the task beside it and the marker landed on its first
/// attempt, in time: both were sent at once, and a worker that finds the
/// task by listing `tasks/` needs several round trips (list, read, claim)
/// after the task lands before its claim deletes a marker (the first
/// submit's path: no round trip added; docs/protocol.md, "the ready index
/// stays true", says what stays open). Otherwise (a task found by our read
/// or by our write's 412, a marker that took a retry, or one answered late)
/// a worker may have claimed the task in between.
impl Wrote {
    pub(super) fn reread_needed(&self) -> bool {
        self.marker_attempts > 0 && (!self.created || self.marker_attempts > 1 || self.marker_late)
    }
}

/// A marker and a task sent together at `sent`, answered at `marker` and
/// `task`: the marker came late if its answer followed the task's by more
/// than the task's own round trip. A worker's claim comes several round
/// trips after the task lands; a marker answered within about one of the
/// task is in place before it. One held longer (a slow disk, a congested
/// link, a retry inside the SDK) may land after a claim, and a claimed
/// task's marker is stale: one GET tells. On a healthy link both answers
/// come within each other's jitter, so few submits pay that GET.
fn marker_late(sent: DateTime<Utc>, task: DateTime<Utc>, marker: DateTime<Utc>) -> bool {
    marker - task > task - sent
}

/// A record's `pending_task` and where its task lives; a record without
/// one, or whose task names another id, is corrupt.
pub(super) fn pending_task<'r>(
    rkey: &str,
    rec: &'r Record,
) -> Result<(&'r serde_json::value::RawValue, TaskLocation), SubmitError> {
    let corrupt = |reason: String| SubmitError::Corrupt {
        key: rkey.to_owned(),
        reason,
    };
    let pending = rec
        .pending_task
        .as_ref()
        .ok_or_else(|| corrupt("a creating record without pending_task".into()))?;
    let head: TaskHead =
        serde_json::from_str(pending.get()).map_err(|e| corrupt(format!("pending_task: {e}")))?;
    if head.id != rec.task_id {
        return Err(corrupt(
            "pending_task.id is not the record's task_id".into(),
        ));
    }
    Ok((pending, head.location()))
}

/// What [`Engine::finish`] found and did.
#[derive(Debug)]
pub(crate) struct Finished {
    /// This call wrote the task object or the marker.
    pub wrote: bool,
    /// The task's status, when this call learned it.
    pub status: Option<String>,
}

impl Engine {
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
        start: Start<'_>,
        finish_deadline: DateTime<Utc>,
        op_deadline: DateTime<Utc>,
    ) -> Result<Finished, SubmitError> {
        let (pending, loc) = match start {
            Start::Claimed(task) => (TaskBody::Own(&task.body), task.loc.clone()),
            Start::Check | Start::Plan => {
                let (raw, loc) = pending_task(rkey, rec)?;
                (TaskBody::Record(raw.get()), loc)
            }
        };
        let task_key = rec.task_key.as_str();
        let marker_key = loc.marker_key();

        // 1. Check (a first submit knows: nothing can exist yet).
        let needs = match start {
            Start::Claimed(_) => Needs::everything(),
            Start::Check | Start::Plan => {
                let writes = matches!(start, Start::Check);
                self.check(
                    task_key,
                    &marker_key,
                    pending.as_bytes(),
                    &loc,
                    op_deadline,
                    writes,
                )
                .await?
            }
        };
        if !needs.task && !needs.marker {
            return Ok(Finished {
                wrote: false,
                status: needs.status,
            });
        }

        // 2. Write what is missing, before the finish deadline.
        let window = self.write_window(rec.task_id, finish_deadline, op_deadline)?;
        if matches!(start, Start::Plan) {
            // What the writes would meet first: a window already shut.
            if self.now() >= window.deadline {
                return Err(self.refused(&window, Failure::Deadline));
            }
            return Ok(Finished {
                wrote: true,
                status: needs.status,
            });
        }
        if needs.task && matches!(start, Start::Check) {
            self.write_pending_payload(rec, &window).await?;
        }
        let wrote = self
            .write_missing(
                task_key,
                &pending.to_bytes(),
                &marker_key,
                &needs,
                window.deadline,
                |f| self.refused(&window, f),
            )
            .await?;
        let mut status = if wrote.created {
            Some("pending".to_owned())
        } else {
            needs.status
        };

        // 3. Re-read after a marker that a worker may have overtaken.
        if wrote.reread_needed() {
            status = self
                .verify_marker(task_key, &loc, &marker_key, op_deadline)
                .await?;
        }
        Ok(Finished {
            wrote: wrote.created || needs.marker,
            status,
        })
    }

    /// The sweeper's look at a `creating` record past its finish deadline:
    /// nothing is written for it any more, but a marker of its may be stale
    /// (one that landed late, or whose finisher died before its re-read,
    /// beside a worker's claim: docs/protocol.md, "The ready index stays
    /// true"). Reads the task and checks the marker (GET and HEAD, in
    /// parallel) and, when `removes`, removes a marker beside a task a worker
    /// has taken, as [`Start::Check`] does. The task's status; `None` if it is
    /// not there. A record without a (well-formed) `pending_task` names no
    /// marker: only its task is read.
    pub(crate) async fn check_past_deadline(
        &self,
        rkey: &str,
        rec: &Record,
        removes: bool,
        op_deadline: DateTime<Utc>,
    ) -> Result<Option<String>, SubmitError> {
        let Ok((pending, loc)) = pending_task(rkey, rec) else {
            return self.read_status(&rec.task_key, op_deadline).await;
        };
        let needs = self
            .check(
                &rec.task_key,
                &loc.marker_key(),
                pending.get().as_bytes(),
                &loc,
                op_deadline,
                removes,
            )
            .await?;
        Ok(needs.status)
    }

    /// The bounds of a finisher's writes. Both stop at the finish deadline:
    /// past it nobody writes a record's task or marker, which is what makes a
    /// task 412 mean "created" and a deleted task stay deleted. The deadline
    /// is S3's time; an attempt may start only while S3's latest possible
    /// time is before it. Without a trusted offset, nothing is written.
    fn write_window(
        &self,
        task_id: Uuid,
        finish_deadline: DateTime<Utc>,
        op_deadline: DateTime<Utc>,
    ) -> Result<WriteWindow, SubmitError> {
        let offset = self.s3_offset()?;
        let local_finish_deadline = finish_deadline - offset.high;
        Ok(WriteWindow {
            task_id,
            finish_deadline,
            local_finish_deadline,
            deadline: local_finish_deadline.min(op_deadline),
            offset_low: offset.low,
        })
    }

    /// A write that failed: past the finish deadline the submit is
    /// undetermined until no late write can land any more (a 201 or 200
    /// needs both objects); any other failure is its own error.
    fn refused(&self, window: &WriteWindow, f: Failure) -> SubmitError {
        match f {
            Failure::Deadline if self.now() >= window.local_finish_deadline => {
                let until = window.finish_deadline + self.settings.late_write_margin;
                SubmitError::Undetermined {
                    task_id: window.task_id,
                    retry_after: (until - (self.now() + window.offset_low))
                        .to_std()
                        .unwrap_or_default(),
                }
            }
            f => f.into(),
        }
    }

    /// An offloaded input is in its payload before any task names it: a
    /// worker that claims the task reads it from there. The first submit
    /// wrote it beside the record; a finisher that finds the task missing
    /// writes it from the record's `pending_input` (If-None-Match: 412 is the
    /// payload already there, under this record's own task id), so nobody
    /// needs the producer to send the input again.
    async fn write_pending_payload(
        &self,
        rec: &Record,
        window: &WriteWindow,
    ) -> Result<(), SubmitError> {
        let Some(input) = &rec.pending_input else {
            return Ok(());
        };
        let key = payload_key(rec.task_id);
        let bytes = Bytes::copy_from_slice(input.get().as_bytes());
        match self
            .with_retries(window.deadline, || {
                self.store.put(&key, bytes.clone(), PutMode::Create)
            })
            .await
        {
            Ok(_) | Err(Failure::Store(StoreError::PreconditionFailed)) => Ok(()),
            Err(f) => Err(self.refused(window, f)),
        }
    }

    /// `PUT task If-None-Match: *` and `PUT marker`, side by side, each only
    /// if `needs` says it is missing, each retried until `deadline`; a
    /// failure is answered as `refuse` maps it. A 412 on the task is a task
    /// already there: a finisher's before the finish deadline (nobody
    /// deletes a task that young, and nobody writes one after the
    /// deadline), a keyless submit's own earlier attempt (a fresh UUID).
    pub(super) async fn write_missing(
        &self,
        task_key: &str,
        task_body: &Bytes,
        marker_key: &str,
        needs: &Needs,
        deadline: DateTime<Utc>,
        refuse: impl Fn(Failure) -> SubmitError,
    ) -> Result<Wrote, SubmitError> {
        let sent = self.now();
        // Each answer with the instant it came.
        let (t, m) = tokio::join!(
            async {
                needs.task.then_some(())?;
                let r = self
                    .with_retries(deadline, || {
                        self.store.put(task_key, task_body.clone(), PutMode::Create)
                    })
                    .await;
                Some((r, self.now()))
            },
            async {
                needs.marker.then_some(())?;
                let r = self.put_marker(marker_key, deadline).await;
                Some((r, self.now()))
            },
        );
        let marker_late = match (&t, &m) {
            (Some((_, task_at)), Some((_, marker_at))) => marker_late(sent, *task_at, *marker_at),
            _ => false,
        };
        let created = match t {
            None => false,
            Some((Ok(_), _)) => true,
            Some((Err(Failure::Store(StoreError::PreconditionFailed)), _)) => false,
            Some((Err(f), _)) => return Err(refuse(f)),
        };
        let marker_attempts = match m {
            None => 0,
            Some((Ok(n), _)) => n,
            Some((Err(f), _)) => return Err(refuse(f)),
        };
        Ok(Wrote {
            created,
            marker_attempts,
            marker_late,
        })
    }

    /// Reads the task and checks the marker, in parallel: what is missing,
    /// and the task's status if it is there. A marker is owed only while the
    /// task is untouched; a stale marker found beside a taken task is
    /// removed (when `writes`: not by a dry run).
    async fn check(
        &self,
        task_key: &str,
        marker_key: &str,
        pending: &[u8],
        loc: &TaskLocation,
        op_deadline: DateTime<Utc>,
        writes: bool,
    ) -> Result<Needs, SubmitError> {
        let (t, m) = tokio::join!(
            self.with_retries(op_deadline, || self.store.get(task_key)),
            self.with_retries(op_deadline, || self.store.head(marker_key)),
        );
        let marker_found = match m {
            Ok(_) => true,
            Err(Failure::Store(StoreError::NotFound)) => false,
            Err(e) => return Err(e.into()),
        };
        match t {
            Ok(obj) => {
                // Untouched: the very bytes the record's submit wrote. Every
                // worker transition rewrites the object.
                let untouched = obj.body.as_ref() == pending;
                // A marker in the record's minute for a task a worker has
                // taken since is stale: left by a finisher that died before
                // its re-read, or by an earlier version of this service. It
                // would cost every idle worker a read per poll, forever.
                if writes
                    && marker_found
                    && !untouched
                    && !TaskState::parse(&obj.body).is_ready_in(loc)
                {
                    self.remove_marker(marker_key, op_deadline).await?;
                }
                Ok(Needs {
                    task: false,
                    marker: !marker_found && untouched,
                    status: Some(task_status(&obj.body).unwrap_or_else(|| "unknown".into())),
                })
            }
            Err(Failure::Store(StoreError::NotFound)) => Ok(Needs {
                task: true,
                marker: !marker_found,
                status: None,
            }),
            Err(e) => Err(e.into()),
        }
    }

    /// The marker PUT (an empty object, unconditional: writing it twice is
    /// harmless), retried; how many attempts it took.
    async fn put_marker(&self, marker_key: &str, deadline: DateTime<Utc>) -> Result<u32, Failure> {
        let mut attempts = 0;
        self.with_retries(deadline, || {
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
    pub(super) async fn verify_marker(
        &self,
        task_key: &str,
        loc: &TaskLocation,
        marker_key: &str,
        op_deadline: DateTime<Utc>,
    ) -> Result<Option<String>, SubmitError> {
        let task = match self
            .with_retries(op_deadline, || self.store.get(task_key))
            .await
        {
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
            .with_retries(op_deadline, || self.store.delete(marker_key, None))
            .await
        {
            Ok(()) | Err(Failure::Store(StoreError::NotFound)) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// The status to answer once [`Engine::finish`] is done: the one it
    /// learned, or a read when its task write met an existing task.
    pub(super) async fn status_after(
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wrote(created: bool, marker_attempts: u32, marker_late: bool) -> Wrote {
        Wrote {
            created,
            marker_attempts,
            marker_late,
        }
    }

    #[test]
    fn only_a_marker_beside_a_task_this_call_created_answered_in_time_on_the_first_attempt_goes_unchecked()
     {
        // The first submit's path: both sent at once, both landed at once.
        assert!(!wrote(true, 1, false).reread_needed());
        // The marker took a retry: a worker may have claimed the task since.
        assert!(wrote(true, 2, false).reread_needed());
        // The marker's answer came late beside the task's.
        assert!(wrote(true, 1, true).reread_needed());
        // A task this call did not create (found, or met by a 412).
        assert!(wrote(false, 1, false).reread_needed());
        // No marker written, nothing to check.
        assert!(!wrote(false, 0, false).reread_needed());
        assert!(!wrote(true, 0, true).reread_needed());
    }

    #[test]
    fn a_marker_is_late_when_its_answer_follows_the_tasks_by_more_than_the_tasks_round_trip() {
        let sent = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let ms = |n| sent + chrono::Duration::milliseconds(n);
        // Answered together, or the marker first: in time.
        assert!(!marker_late(sent, ms(20), ms(20)));
        assert!(!marker_late(sent, ms(20), ms(5)));
        // Up to one task round trip after the task's answer: in time.
        assert!(!marker_late(sent, ms(20), ms(40)));
        // Past it: late.
        assert!(marker_late(sent, ms(20), ms(41)));
        // A slow task stretches the bound with it, as a slow link does: a
        // marker held as long beside it is not told apart, and is left to
        // the scheduled pass's scan of the ready index (docs/protocol.md).
        assert!(!marker_late(sent, ms(900), ms(1500)));
        assert!(marker_late(sent, ms(20), ms(1500)));
    }
}
