//! S3's clock, not ours: every deadline decision takes the safe side of what
//! S3's answers tell of its offset (docs/protocol.md, "S3's clock, not ours").

use chrono::{DateTime, Utc};

use super::engine::Engine;
use super::error::SubmitError;
use super::record::{Record, RecordStatus};
use super::request::Phase;
use crate::clock::Offset;
use crate::config::{ClockCheck, MAX_CLOCK_OFFSET};
use crate::store::ObjectMeta;

impl Engine {
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
    pub(super) fn judged_offset(&self) -> Result<Offset, Option<Offset>> {
        if self.settings.clock_check == ClockCheck::TrustClock {
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
    pub(super) fn s3_before(&self, deadline: DateTime<Utc>) -> Result<bool, SubmitError> {
        Ok(self.now() + self.s3_offset()?.high < deadline)
    }

    /// The earliest S3 time that a local instant can have been.
    pub(super) fn s3_at_least(&self, local: DateTime<Utc>) -> Result<DateTime<Utc>, SubmitError> {
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
    pub(super) async fn refuse_if_clock_known_off(
        &self,
        rkey: &str,
        op_deadline: DateTime<Utc>,
    ) -> Result<(), SubmitError> {
        if matches!(self.judged_offset(), Err(Some(_))) {
            let _ = self
                .with_retries(op_deadline, || self.store.head(rkey))
                .await;
            self.s3_offset()?;
        }
        Ok(())
    }

    /// The last instant a write for the record read with `meta` can land:
    /// its finish deadline, plus how late a signed request can still land.
    pub(super) fn late_writes_end(&self, meta: &ObjectMeta) -> DateTime<Utc> {
        meta.last_modified + self.settings.finish_window + self.settings.late_write_margin
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
}
