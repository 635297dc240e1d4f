//! The sweeper's one record handler, for the events' path and the
//! scheduled pass alike: read the record, act on its current state.

use chrono::{DateTime, Duration, Utc};

use super::RecordOutcome;
use crate::config::Settings;
use crate::protocol::engine::{Engine, Failure};
use crate::protocol::error::SubmitError;
use crate::protocol::finish::Start;
use crate::protocol::record::{Record, RecordStatus};
use crate::store::{ObjectMeta, StoreError};

/// What the sweeper owes a record it read, by the record's current state
/// (docs/protocol.md, "Record events").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owed {
    /// Past `expires_at`, whatever its status (a reset record: past
    /// `reset_at` plus the operation deadline and the late-write margin):
    /// deleted.
    Deletion,
    /// Gone to its task, `ready`, or without `status` (another client's).
    Nothing,
    /// `creating` past its finish deadline: nothing is written for it any
    /// more; only a missing task is worth a word.
    Settled,
    /// `creating`, younger than `STALE_CREATING_AFTER_SECONDS`: its own
    /// submit may still be at work.
    Early,
    /// `creating`, stale, before its finish deadline: checked, and what is
    /// missing written.
    Finishing { finish_deadline: DateTime<Utc> },
}

/// How much younger than `STALE_CREATING_AFTER_SECONDS` a record may look
/// when its due message reaches the sweeper and still be finished, not
/// handed back (docs/protocol.md, "Due messages from the submitter"). A
/// submitter's message is sent beside its record's PUT, not after it, so SQS
/// can take it a few milliseconds before S3 stamps the record; and S3's time
/// is known here to whole seconds (the `Date` of its answers, like
/// `LastModified`). Whenever a second boundary falls between the two, the
/// record looks a second too young at the instant the message is due: such
/// a message would be handed back once, costing a second receive and GET
/// and a visibility timeout (720 s) of delay. Two seconds covers that second
/// and the PUT's own flight; a PUT retried for longer than that has its
/// message handed back once, as any early message. Only the due queue's
/// path takes it: the scheduled pass judges ages as they are.
pub const DUE_EARLY_TOLERANCE: Duration = Duration::seconds(2);

/// Judges `rec`, last written at `last_modified`, in S3's time on its safe
/// side: expired and stale by S3's `earliest` possible time now (stale
/// `tolerance` early), past the deadline by its `latest`.
fn owed(
    rec: &Record,
    last_modified: DateTime<Utc>,
    (earliest, latest): (DateTime<Utc>, DateTime<Utc>),
    settings: &Settings,
    tolerance: Duration,
) -> Owed {
    // A reset record stays until no create-only PUT of the claim it
    // replaced can land any more: that claim's submit began before the
    // reset, so its last send is before `reset_at` plus the operation
    // deadline, and it lands within the late-write margin after that. A PUT
    // landing after a deletion would bring the old record back. Nothing is
    // ever finished for it.
    if let Some(reset_at) = rec.reset_at {
        let kept_until = reset_at + settings.operation_timeout + settings.late_write_margin;
        return if earliest >= kept_until {
            Owed::Deletion
        } else {
            Owed::Nothing
        };
    }
    if rec.is_expired(earliest) {
        return Owed::Deletion;
    }
    if rec.status != Some(RecordStatus::Creating) {
        return Owed::Nothing;
    }
    let finish_deadline = last_modified + settings.finish_window;
    if latest >= finish_deadline {
        Owed::Settled
    } else if earliest - last_modified < settings.stale_creating_after - tolerance {
        Owed::Early
    } else {
        Owed::Finishing { finish_deadline }
    }
}

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
        self.sweep_record_by(
            key,
            dry_run,
            self.request_deadline(deadline),
            Duration::zero(),
        )
        .await
    }

    /// [`Engine::sweep_record`] for a record named by a due message (the
    /// bucket's S3 event or the submitter's message): stale up to
    /// [`DUE_EARLY_TOLERANCE`] early. `sent_at` is the submitter's send time
    /// (`None` for S3's events, which follow their write): a record its
    /// submit wrote up to the operation deadline after the message is due
    /// when the message is (the queue's delay ran from the send), and no
    /// record at all is handed back while the claim may still land
    /// ([`Engine::claim_may_land`]).
    pub async fn sweep_due_record(
        &self,
        key: &str,
        sent_at: Option<DateTime<Utc>>,
        dry_run: bool,
        deadline: Option<DateTime<Utc>>,
    ) -> RecordOutcome {
        let op_deadline = self.request_deadline(deadline);
        let (rec, meta) = match self.read_swept(key, op_deadline).await {
            Ok(Some(read)) => read,
            Ok(None) => return self.no_record(key, sent_at),
            Err(outcome) => return outcome,
        };
        // The claim's own flight after its message, up to the operation
        // deadline, does not make its record early.
        let flight = sent_at.map_or(Duration::zero(), |at| {
            (meta.last_modified - at).clamp(Duration::zero(), self.settings.operation_timeout)
        });
        self.sweep_read(
            key,
            (rec, meta),
            dry_run,
            op_deadline,
            DUE_EARLY_TOLERANCE + flight,
        )
        .await
    }

    /// A due message that found no record: nothing to do for S3's events
    /// (the record is gone since); for a submitter's message, handed back
    /// while its claim may still land, then acknowledged and counted.
    fn no_record(&self, key: &str, sent_at: Option<DateTime<Utc>>) -> RecordOutcome {
        let Some(sent_at) = sent_at else {
            return RecordOutcome::Nothing;
        };
        let now = match self.s3_earliest() {
            Ok(t) => t,
            Err(e) => return self.failed(key, e),
        };
        if now < self.claim_may_land(sent_at) {
            RecordOutcome::NoRecordYet
        } else {
            tracing::info!(
                record = key,
                "a due message whose record never landed (its submit wrote nothing, or the record is gone since); acknowledged"
            );
            RecordOutcome::NoRecord
        }
    }

    /// Until when (S3's time) the claim of a submit whose due message says
    /// it was sent at `sent_at` may still land: every claim attempt starts
    /// before its operation deadline, S3 takes no request signed more than
    /// the late-write margin before its own time, and the signing clock may
    /// stand up to 60 s from S3's (the offset a submitter still writes with).
    pub fn claim_may_land(&self, sent_at: DateTime<Utc>) -> DateTime<Utc> {
        sent_at
            + self.settings.operation_timeout
            + self.settings.late_write_margin
            + crate::config::MAX_CLOCK_OFFSET
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
        tolerance: Duration,
    ) -> RecordOutcome {
        match self.read_swept(key, op_deadline).await {
            Ok(Some(read)) => {
                self.sweep_read(key, read, dry_run, op_deadline, tolerance)
                    .await
            }
            Ok(None) => RecordOutcome::Nothing,
            Err(outcome) => outcome,
        }
    }

    /// What a record just read needs, done.
    async fn sweep_read(
        &self,
        key: &str,
        (rec, meta): (Record, ObjectMeta),
        dry_run: bool,
        op_deadline: DateTime<Utc>,
        tolerance: Duration,
    ) -> RecordOutcome {
        // A clock too far off (or not known) leaves the record for a later
        // delivery.
        let offset = match self.s3_offset() {
            Ok(o) => o,
            Err(e) => return self.failed(key, e),
        };
        let now = self.now();
        let s3_now = (now + offset.low, now + offset.high);
        match owed(&rec, meta.last_modified, s3_now, &self.settings, tolerance) {
            Owed::Deletion if dry_run => self.deletion_owed(&meta),
            Owed::Deletion if self.settings.conditional_delete => {
                self.delete_expired(key, &meta, op_deadline).await
            }
            Owed::Deletion => self.delete_expired_version(key, meta, op_deadline).await,
            Owed::Nothing => RecordOutcome::Nothing,
            Owed::Settled => self.check_settled(key, &rec, dry_run, op_deadline).await,
            Owed::Early => RecordOutcome::Early,
            Owed::Finishing { finish_deadline } => {
                // Written once, the record stays as it is: the sweeper only
                // writes what its submit left missing. A dry run reads and
                // judges the same way and writes nothing.
                let start = if dry_run { Start::Plan } else { Start::Check };
                match self
                    .finish(key, &rec, start, finish_deadline, op_deadline)
                    .await
                {
                    Ok(done) if done.wrote => RecordOutcome::Finished,
                    Ok(_) => RecordOutcome::Nothing,
                    Err(e) => self.failed(key, e),
                }
            }
        }
    }

    /// `GET record`: `None` when it is gone; the outcome when it cannot be
    /// read or does not parse.
    async fn read_swept(
        &self,
        key: &str,
        op_deadline: DateTime<Utc>,
    ) -> Result<Option<(Record, ObjectMeta)>, RecordOutcome> {
        let obj = match self.with_retries(op_deadline, || self.store.get(key)).await {
            Ok(o) => o,
            Err(Failure::Store(StoreError::NotFound)) => return Ok(None),
            Err(e) => return Err(self.failed(key, e.into())),
        };
        match Record::parse(&obj.body) {
            Ok(rec) => Ok(Some((rec, obj.meta))),
            Err(e) => {
                tracing::warn!(record = key, error = %e, "corrupt idempotency record");
                Err(RecordOutcome::Corrupt)
            }
        }
    }

    /// `DELETE If-Match: <etag read>`: only if nobody replaced it since.
    async fn delete_expired(
        &self,
        key: &str,
        meta: &ObjectMeta,
        op_deadline: DateTime<Utc>,
    ) -> RecordOutcome {
        match self
            .with_retries(op_deadline, || self.store.delete(key, Some(&meta.etag)))
            .await
        {
            Ok(()) => RecordOutcome::ExpiredDeleted,
            Err(Failure::Store(StoreError::PreconditionFailed | StoreError::NotFound)) => {
                RecordOutcome::Nothing
            }
            Err(e) => self.failed(key, e.into()),
        }
    }

    /// What a deletion of the expired record read with `meta` comes to, as a
    /// dry run reports it: deleted, unless no DELETE of it is safe.
    fn deletion_owed(&self, meta: &ObjectMeta) -> RecordOutcome {
        if self.settings.conditional_delete || meta.version_id.is_some() {
            RecordOutcome::ExpiredDeleted
        } else {
            RecordOutcome::ExpiredKept
        }
    }

    /// `CONDITIONAL_DELETE=off`: the store may ignore `If-Match` on DELETE,
    /// so nothing is deleted on the strength of it. On a versioned bucket
    /// the version that was read is deleted (`DELETE ?versionId=`): a record
    /// that replaced it since is another version, never touched.
    ///
    /// Deleting the current version makes the one before it current again.
    /// Every version before it is dead: an older write of the same record,
    /// or a record the key was claimed over once it had expired, reset, or
    /// lost its failed task to a `new_task` submit. But a reset key's old
    /// record and a failed task's record are live by their `expires_at`,
    /// and one made current, if only until the sweeper's next request,
    /// would answer a submit with a task whose life is over. So the versions
    /// beneath go first and the read one last: list the key's versions,
    /// read again that the version is still the current one (then every
    /// other version listed is older), delete those, then it. If a record
    /// replaced it meanwhile, only the version read is deleted. On an
    /// unversioned bucket no DELETE is safe: the record is left to the
    /// lifecycle rule and counted (it counts as absent whether or not it is
    /// deleted).
    async fn delete_expired_version(
        &self,
        key: &str,
        meta: ObjectMeta,
        op_deadline: DateTime<Utc>,
    ) -> RecordOutcome {
        let Some(version) = meta.version_id else {
            tracing::info!(
                record = key,
                "an expired record is left for the lifecycle rule (CONDITIONAL_DELETE=off, unversioned)"
            );
            return RecordOutcome::ExpiredKept;
        };
        let listed = match self
            .with_retries(op_deadline, || self.store.list_versions(key))
            .await
        {
            Ok(listed) => listed,
            Err(e) => return self.failed(key, e.into()),
        };
        // The prefix is the record's whole key: only that key's versions.
        let beneath: Vec<String> = listed
            .into_iter()
            .filter(|(k, v)| k == key && *v != version)
            .map(|(_, v)| v)
            .collect();
        if !beneath.is_empty() {
            let still_current = match self.read_swept(key, op_deadline).await {
                Ok(Some((_, now))) => now.version_id.as_deref() == Some(version.as_str()),
                Ok(None) | Err(RecordOutcome::Corrupt) => false,
                Err(outcome) => return outcome,
            };
            if still_current {
                for v in &beneath {
                    if let Err(e) = self.delete_version(key, v, op_deadline).await {
                        return self.failed(key, e);
                    }
                }
            }
        }
        match self.delete_version(key, &version, op_deadline).await {
            Ok(()) => RecordOutcome::ExpiredDeleted,
            Err(e) => self.failed(key, e),
        }
    }

    /// `DELETE ?versionId=`, a version already gone counting as deleted.
    async fn delete_version(
        &self,
        key: &str,
        version: &str,
        op_deadline: DateTime<Utc>,
    ) -> Result<(), SubmitError> {
        match self
            .with_retries(op_deadline, || self.store.delete_version(key, version))
            .await
        {
            Ok(()) | Err(Failure::Store(StoreError::NotFound)) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// A record settled or settling: only a submit that never got its task
    /// is an error (it answers `missing`); a record whose task is there is
    /// done, once a stale marker beside it is removed (the pass reads every
    /// record once more when no late write can land any more, for this).
    async fn check_settled(
        &self,
        key: &str,
        rec: &Record,
        dry_run: bool,
        op_deadline: DateTime<Utc>,
    ) -> RecordOutcome {
        match self
            .check_past_deadline(key, rec, !dry_run, op_deadline)
            .await
        {
            Ok(Some(_)) => RecordOutcome::Nothing,
            Ok(None) => {
                tracing::warn!(record = key, task_id = %rec.task_id, "creating record past its finish deadline without its task");
                RecordOutcome::PastDeadline
            }
            Err(e) => self.failed(key, e),
        }
    }

    fn failed(&self, key: &str, e: SubmitError) -> RecordOutcome {
        tracing::warn!(record = key, error = %e, "sweep could not handle a record");
        RecordOutcome::Failed(e)
    }
}

#[cfg(test)]
mod tests {
    use chrono::Duration;
    use uuid::Uuid;

    use super::*;

    const T0: &str = "2026-01-27T12:00:00Z";

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(T0)
            .unwrap()
            .with_timezone(&Utc)
            + Duration::seconds(secs)
    }

    /// A record written at 0 that expires at `expires`, with `status`.
    fn written(status: Option<RecordStatus>, expires: i64) -> Record {
        Record {
            key: "k".into(),
            key_hash: "sha256:00".into(),
            scope: Some("s".into()),
            task_id: Uuid::nil(),
            task_key: "tasks/0/x.json".into(),
            task_type: "t".into(),
            input_hash: "sha256:11".into(),
            status,
            created_at: at(0),
            expires_at: at(expires),
            write_id: Some(Uuid::nil()),
            tenant: None,
            options_hash: None,
            pending_task: None,
            pending_input: None,
            replaces_task_id: None,
            reset_at: None,
        }
    }

    /// What the sweeper owes that record when S3's time is `now` ± `skew`.
    fn owed_at(rec: &Record, now: i64, skew: i64) -> Owed {
        owed(
            rec,
            at(0),
            (at(now - skew), at(now + skew)),
            &Settings::default(),
            Duration::zero(),
        )
    }

    #[test]
    fn a_due_message_finishes_a_record_up_to_the_tolerance_before_it_is_stale() {
        let s = Settings::default();
        let stale = s.stale_creating_after.num_seconds();
        let rec = written(Some(RecordStatus::Creating), 86_400);
        let due_at = |now: i64, millis: i64| {
            let earliest = at(now) + Duration::milliseconds(millis);
            owed(&rec, at(0), (earliest, earliest), &s, DUE_EARLY_TOLERANCE)
        };
        let finishing = Owed::Finishing {
            finish_deadline: at(s.finish_window.num_seconds()),
        };
        assert_eq!(due_at(stale - 2, 0), finishing);
        assert_eq!(due_at(stale - 3, 999), Owed::Early);
        // The scheduled pass takes no tolerance.
        assert_eq!(owed_at(&rec, stale - 1, 0), Owed::Early);
    }

    #[test]
    fn a_creating_record_is_early_then_finished_then_settled_by_its_age() {
        let s = Settings::default();
        let (stale, window) = (
            s.stale_creating_after.num_seconds(),
            s.finish_window.num_seconds(),
        );
        let rec = written(Some(RecordStatus::Creating), 86_400);
        assert_eq!(owed_at(&rec, stale - 1, 0), Owed::Early);
        assert_eq!(
            owed_at(&rec, stale, 0),
            Owed::Finishing {
                finish_deadline: at(window)
            }
        );
        assert_eq!(
            owed_at(&rec, window - 1, 0),
            Owed::Finishing {
                finish_deadline: at(window)
            }
        );
        assert_eq!(owed_at(&rec, window, 0), Owed::Settled);
    }

    #[test]
    fn stale_is_judged_by_s3s_earliest_time_and_past_the_deadline_by_its_latest() {
        let s = Settings::default();
        let (stale, window) = (
            s.stale_creating_after.num_seconds(),
            s.finish_window.num_seconds(),
        );
        let rec = written(Some(RecordStatus::Creating), 86_400);
        // S3's time may be a second earlier: not stale yet.
        assert_eq!(owed_at(&rec, stale, 1), Owed::Early);
        // S3's time may be a second later: past the deadline already.
        assert_eq!(owed_at(&rec, window - 1, 1), Owed::Settled);
    }

    #[test]
    fn an_expired_record_is_deleted_whatever_its_status_and_others_are_left() {
        for status in [
            Some(RecordStatus::Creating),
            Some(RecordStatus::Ready),
            None,
        ] {
            assert_eq!(owed_at(&written(status, 100), 100, 0), Owed::Deletion);
            // Expiry by S3's earliest time: never early.
            assert_ne!(owed_at(&written(status, 100), 100, 1), Owed::Deletion);
        }
        assert_eq!(
            owed_at(&written(Some(RecordStatus::Ready), 86_400), 0, 0),
            Owed::Nothing
        );
        assert_eq!(owed_at(&written(None, 86_400), 10_000, 0), Owed::Nothing);
    }
}
