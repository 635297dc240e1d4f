//! The sweeper's one record handler, for the events' path and the
//! scheduled pass alike: read the record, act on its current state.

use chrono::{DateTime, Utc};

use super::RecordOutcome;
use crate::protocol::engine::{Engine, Failure};
use crate::protocol::error::SubmitError;
use crate::protocol::finish::Start;
use crate::protocol::record::{Record, RecordStatus};
use crate::store::StoreError;

impl Engine {
    /// Reads the record at `key` and does what its state needs
    /// (docs/protocol.md, "The sweeper"): finish a stale `creating` record, delete an
    /// expired one, report an early or a late one. The one record handler of
    /// the event path and the scheduled pass.
    /// No request starts at or after `deadline` (nor after the operation
    /// timeout); a record cut short is [`RecordOutcome::Failed`], to retry.
    pub async fn sweep_record(
        &self,
        key: &str,
        dry_run: bool,
        deadline: Option<DateTime<Utc>>,
    ) -> RecordOutcome {
        self.sweep_record_by(key, dry_run, self.request_deadline(deadline))
            .await
    }

    /// The deadline of one request of the sweeper: the operation timeout
    /// from now, and never past the run's own `deadline`.
    pub(super) fn request_deadline(&self, deadline: Option<DateTime<Utc>>) -> DateTime<Utc> {
        let d = self.now() + self.settings.operation_timeout;
        deadline.map_or(d, |run| d.min(run))
    }

    pub(super) async fn sweep_record_by(
        &self,
        key: &str,
        dry_run: bool,
        op_deadline: DateTime<Utc>,
    ) -> RecordOutcome {
        let obj = match self.with_retries(op_deadline, || self.store.get(key)).await {
            Ok(o) => o,
            Err(Failure::Store(StoreError::NotFound)) => return RecordOutcome::Nothing,
            Err(e) => return self.failed(key, e.into()),
        };
        let rec = match Record::parse(&obj.body) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(record = key, error = %e, "corrupt idempotency record");
                return RecordOutcome::Corrupt;
            }
        };
        // Every judgement below is in S3's time, on its safe side: expired
        // and stale by S3's earliest possible time, past the deadline by its
        // latest. A clock too far off (or not known) leaves the record for a
        // later delivery.
        let offset = match self.s3_offset() {
            Ok(o) => o,
            Err(e) => return self.failed(key, e),
        };
        let now = self.now();
        let (earliest, latest) = (now + offset.low, now + offset.high);
        let meta = &obj.meta;
        if rec.is_expired(earliest) {
            // Whatever its status; only if nobody replaced it since we read it.
            if dry_run {
                return RecordOutcome::ExpiredDeleted;
            }
            return match self
                .with_retries(op_deadline, || self.store.delete(key, Some(&meta.etag)))
                .await
            {
                Ok(()) => RecordOutcome::ExpiredDeleted,
                Err(Failure::Store(StoreError::PreconditionFailed | StoreError::NotFound)) => {
                    RecordOutcome::Nothing
                }
                Err(e) => self.failed(key, e.into()),
            };
        }
        if rec.status != Some(RecordStatus::Creating) {
            return RecordOutcome::Nothing;
        }
        let finish_deadline = meta.last_modified + self.settings.finish_window;
        if latest >= finish_deadline {
            // Settled or settling: nothing is written for it any more. Only
            // a submit that never got its task is an error (it answers
            // `missing`); a record whose task is there is done.
            return match self.read_status(&rec.task_key, op_deadline).await {
                Ok(Some(_)) => RecordOutcome::Nothing,
                Ok(None) => {
                    tracing::warn!(record = key, task_id = %rec.task_id, "creating record past its finish deadline without its task");
                    RecordOutcome::PastDeadline
                }
                Err(e) => self.failed(key, e),
            };
        }
        if earliest - meta.last_modified < self.settings.stale_creating_after {
            return RecordOutcome::Early;
        }
        if dry_run {
            return RecordOutcome::Finished;
        }
        // Written once, the record stays as it is: the sweeper only writes
        // what its submit left missing.
        match self
            .finish(key, &rec, Start::Check, finish_deadline, op_deadline)
            .await
        {
            Ok(done) if done.wrote => RecordOutcome::Finished,
            Ok(_) => RecordOutcome::Nothing,
            Err(e) => self.failed(key, e),
        }
    }

    fn failed(&self, key: &str, e: SubmitError) -> RecordOutcome {
        tracing::warn!(record = key, error = %e, "sweep could not handle a record");
        RecordOutcome::Failed(e)
    }
}
