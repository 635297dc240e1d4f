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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::Bytes;
    use chrono::Duration;

    use super::*;
    use crate::clock::{Clock, ManualClock};
    use crate::config::{LATE_WRITE_MARGIN, Settings};
    use crate::store::{ETag, MemoryStore, PutMode, Store};

    /// An engine whose bucket's clock stands `skew` from ours, with S3's
    /// offset learnt from one answer (`skew` whole seconds: the offset is
    /// known as `[skew, skew + 1 s]`).
    async fn engine_at(skew: i64, clock_check: ClockCheck) -> (Engine, ManualClock, MemoryStore) {
        let clock = ManualClock::at_epoch();
        let store = MemoryStore::new(Arc::new(clock.clone()));
        store.set_skew(Duration::seconds(skew));
        let _ = store.head("any").await;
        let settings = Settings {
            clock_check,
            ..Settings::default()
        };
        let engine = Engine::new(Arc::new(store.clone()), Arc::new(clock.clone()), settings);
        (engine, clock, store)
    }

    fn offset(o: Result<Offset, Option<Offset>>) -> Result<(i64, i64), Option<(i64, i64)>> {
        let secs = |o: Offset| (o.low.num_seconds(), o.high.num_seconds());
        o.map(secs).map_err(|e| e.map(secs))
    }

    #[tokio::test]
    async fn s3s_offset_is_used_up_to_60_s_either_way_and_refused_beyond_or_unknown() {
        let used = |skew| async move {
            offset(engine_at(skew, ClockCheck::S3Date).await.0.judged_offset())
        };
        assert_eq!(used(10).await, Ok((10, 11)));
        // [-60 s, -59 s]: at most 60 s away, used.
        assert_eq!(used(-60).await, Ok((-60, -59)));
        // [59 s, 60 s] is used, [60 s, 61 s] is not.
        assert_eq!(used(59).await, Ok((59, 60)));
        assert_eq!(used(60).await, Err(Some((60, 61))));
        let clock = ManualClock::at_epoch();
        let cold = Engine::new(
            Arc::new(MemoryStore::new(Arc::new(clock.clone()))),
            Arc::new(clock),
            Settings::default(),
        );
        assert_eq!(offset(cold.judged_offset()), Err(None));
        assert!(matches!(
            cold.s3_before(cold.now() + Duration::days(1)),
            Err(SubmitError::ClockOffset { offset: None })
        ));
    }

    #[tokio::test]
    async fn a_queue_that_trusts_its_clock_takes_no_offset_whatever_s3_answered() {
        let (engine, _, _) = engine_at(3600, ClockCheck::TrustClock).await;
        assert_eq!(offset(engine.judged_offset()), Ok((0, 0)));
        assert_eq!(engine.s3_earliest().unwrap(), engine.now());
    }

    #[tokio::test]
    async fn a_write_may_start_only_while_s3s_latest_time_is_before_the_deadline() {
        let (engine, clock, _) = engine_at(10, ClockCheck::S3Date).await;
        let now = clock.now();
        // S3's time is now + [10 s, 11 s].
        assert_eq!(engine.s3_earliest().unwrap(), now + Duration::seconds(10));
        assert_eq!(
            engine.s3_at_least(now - Duration::seconds(5)).unwrap(),
            now + Duration::seconds(5)
        );
        let before = |s| engine.s3_before(now + Duration::milliseconds(s)).unwrap();
        assert!(!before(10_500));
        assert!(!before(11_000));
        assert!(before(11_001));
    }

    #[tokio::test]
    async fn a_known_offset_over_60_s_refuses_until_an_answer_shows_the_clock_fixed() {
        let (engine, clock, store) = engine_at(120, ClockCheck::S3Date).await;
        let deadline = clock.now() + Duration::seconds(25);
        assert!(matches!(
            engine.refuse_if_clock_known_off("r", deadline).await,
            Err(SubmitError::ClockOffset { offset: Some(_) })
        ));
        store.set_skew(Duration::zero());
        assert!(
            engine
                .refuse_if_clock_known_off("r", deadline)
                .await
                .is_ok()
        );
    }

    fn record(status: RecordStatus) -> Record {
        serde_json::from_value(serde_json::json!({
            "key": "k", "key_hash": "sha256:00", "task_id": uuid::Uuid::nil(),
            "task_key": "tasks/0/t.json", "task_type": "t", "input_hash": "sha256:01",
            "status": status, "created_at": "1970-01-01T00:00:00Z",
            "expires_at": "1970-01-31T00:00:00Z",
        }))
        .unwrap()
    }

    fn meta(last_modified: DateTime<Utc>) -> ObjectMeta {
        ObjectMeta {
            key: "r".into(),
            etag: ETag("\"e\"".into()),
            last_modified,
            size: 0,
            version_id: None,
        }
    }

    #[tokio::test]
    async fn a_record_is_in_flight_until_s3s_earliest_time_reaches_its_last_late_write() {
        let (engine, clock, store) = engine_at(10, ClockCheck::S3Date).await;
        let s3_now = clock.now() + Duration::seconds(10);
        let window = engine.settings.finish_window + LATE_WRITE_MARGIN;
        let phase = |rec: Record, lm| {
            let engine = &engine;
            async move { engine.phase(&rec, &meta(lm)).await.unwrap() }
        };
        let creating = || record(RecordStatus::Creating);
        let p = phase(creating(), s3_now).await;
        assert_eq!((p.phase, p.task_status), ("in_flight", None));
        let p = phase(creating(), s3_now - window + Duration::seconds(1)).await;
        assert_eq!((p.phase, p.task_status), ("in_flight", None));
        let p = phase(creating(), s3_now - window).await;
        assert_eq!(p.phase, "settled");
        assert_eq!(p.task_status.as_deref(), Some("missing"));
        // A `ready` record is settled at any age.
        let p = phase(record(RecordStatus::Ready), s3_now).await;
        assert_eq!(p.phase, "settled");
        assert_eq!(p.task_status.as_deref(), Some("missing"));
        // A task there gives its status, settled or not.
        let task = Bytes::from_static(br#"{"status": "running"}"#);
        store
            .put("tasks/0/t.json", task, PutMode::Overwrite)
            .await
            .unwrap();
        let p = phase(creating(), s3_now).await;
        assert_eq!(
            (p.phase, p.task_status.as_deref()),
            ("in_flight", Some("running"))
        );
    }
}
