//! Stale markers: `ready/{shard}/{minute}/{task_id}` objects that no worker
//! can claim a task from. A marker is true while its task is `pending` and
//! available in the marker's minute (docs/protocol.md, "The ready index
//! stays true"); buquet's workers delete the marker of the task they claim,
//! and re-read the task of every other marker on every poll, forever. This
//! service writes markers only beside untouched tasks and re-reads the task
//! whenever a worker may have claimed it meanwhile, but a few can still go
//! stale: a marker PUT dropped by its timeout that lands after the claim, a
//! finisher killed between its marker and its re-read, a marker answered
//! late beside a keyless task, and the marker of a task that was never
//! written (its submit failed, or its record's deadline passed first). Those
//! are the scheduled pass's, once its records are done:
//!
//! - it lists `ready/` (one LIST on a healthy queue, whose workers keep it
//!   short; a long one by its shard folders side by side);
//! - it judges each marker twice in its life, in the pass whose window its
//!   age (since the marker landed) crosses: the late-write margin, once the
//!   writes that raced it have landed too, and the orphan age, once no task
//!   can be written for it any more (its record's finish window and
//!   late-write margin, from the marker's own write at the earliest);
//! - a judged marker costs one GET of its task: it is deleted when the task
//!   is there and not ready in the marker's minute, or, at the orphan age,
//!   not there at all; else it stays.
//!
//! A marker is judged by its age, not by its record: keyless submits' and
//! other writers' markers are kept true alike, and a record costs the pass
//! nothing here (the record's last look read every record once more, three
//! reads each). The window is the checkpoint's `markers_until` (where the
//! last complete scan ended) to the pass: a scan the run's deadline cut
//! short is begun again by the next pass, over both windows.

use chrono::{DateTime, Duration, Utc};
use futures::StreamExt;
use uuid::Uuid;

use super::{PAGE, RANGES_AT_ONCE, READS_AT_ONCE, SweepOptions, SweepSummary};
use crate::protocol::engine::{Engine, Failure};
use crate::protocol::error::SubmitError;
use crate::protocol::record::{TaskLocation, TaskState};
use crate::store::{ObjectMeta, StoreError};

/// The workers' ready index.
pub const READY_PREFIX: &str = "ready/";

/// A marker key's task: `ready/{shard}/{minute}/{id}` with a shard of one
/// to four of the id's own hex digits, a ten-digit minute and a lowercase
/// hyphenated id. `None` for anything else (not ours to judge).
fn marker_task(key: &str) -> Option<TaskLocation> {
    let mut parts = key.strip_prefix(READY_PREFIX)?.split('/');
    let (shard, minute, id) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || minute.len() != 10 || !(1..=4).contains(&shard.len()) {
        return None;
    }
    let minute: i64 = minute.parse().ok()?;
    let parsed = Uuid::parse_str(id).ok()?;
    if parsed.hyphenated().to_string() != id || !id.starts_with(shard) {
        return None;
    }
    Some(TaskLocation {
        id: parsed,
        shard: shard.to_owned(),
        available_at: DateTime::from_timestamp(minute.checked_mul(60)?, 0)?,
    })
}

/// What a judged marker is owed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// True (its task is ready in its minute), or not yet known to be
    /// false (its task not written yet, before the orphan age).
    Stays,
    /// Beside a task a worker has taken: it names a task no worker can
    /// claim from it.
    Taken,
    /// Its task is not there, and no task can be written for it any more.
    Orphan,
}

/// The verdict on a marker at `loc`, `orphan` when its age has reached the
/// orphan age, given its task as read (`None`: not there).
fn verdict(task: Option<&TaskState>, loc: &TaskLocation, orphan: bool) -> Verdict {
    match task {
        Some(t) if t.is_ready_in(loc) => Verdict::Stays,
        Some(_) => Verdict::Taken,
        None if orphan => Verdict::Orphan,
        None => Verdict::Stays,
    }
}

/// How one scan judges markers: its window, in S3's time, and the two ages.
struct Judge {
    window: (Option<DateTime<Utc>>, DateTime<Utc>),
    settled: Duration,
    orphan: Duration,
}

impl Judge {
    /// Whether the marker last written at `landed` is judged by this scan,
    /// and whether at its orphan age.
    fn due(&self, landed: DateTime<Utc>) -> Option<bool> {
        let (previous, pass) = self.window;
        let age = pass - landed;
        let crossed = |t: Duration| t <= age && previous.is_none_or(|p| p - landed < t);
        if crossed(self.orphan) {
            Some(true)
        } else {
            crossed(self.settled).then_some(false)
        }
    }
}

impl Engine {
    /// Judges the markers whose age crossed one of the two ages in
    /// `window`, deleting the stale ones (a dry run counts them): `true`
    /// when every marker was listed and judged, so that the next scan's
    /// window begins at this one's end.
    pub(super) async fn sweep_markers(
        &self,
        window: (Option<DateTime<Utc>>, DateTime<Utc>),
        opts: &SweepOptions,
        summary: &mut SweepSummary,
    ) -> bool {
        let judge = Judge {
            window,
            settled: self.settings.late_write_margin,
            orphan: self.orphan_after(),
        };
        match self.scan_markers(&judge, opts, summary).await {
            Ok(true) => true,
            Ok(false) => {
                tracing::warn!(
                    "the run's deadline cut the marker scan short; the next pass goes on"
                );
                false
            }
            Err(e) => {
                tracing::warn!(error = %e, "the marker scan stopped; the next pass goes on");
                summary.errors += 1;
                false
            }
        }
    }

    async fn scan_markers(
        &self,
        judge: &Judge,
        opts: &SweepOptions,
        summary: &mut SweepSummary,
    ) -> Result<bool, SubmitError> {
        if self.past(opts) {
            return Ok(false);
        }
        // One page first: a ready index its workers keep short costs one LIST.
        let first = self
            .with_retries(self.request_deadline(opts.deadline), || {
                self.store.list(READY_PREFIX, None, None, PAGE)
            })
            .await?;
        summary.lists += 1;
        if first.next.is_none() {
            return self
                .judge_markers(first.objects, judge, opts, summary)
                .await;
        }
        // More than a page: a backlog. Its shard folders side by side, as
        // the records' ranges are, under either LIST_ORDER (prefixes that
        // end in `/`, and no order relied on); the first page's markers are
        // judged as their folder is listed.
        let Some(folders) = self.folders_under(READY_PREFIX, opts, summary).await? else {
            return Ok(false);
        };
        let tallies: Vec<Result<(bool, SweepSummary), SubmitError>> =
            futures::stream::iter(folders)
                .map(|folder| async move {
                    let mut tally = SweepSummary::default();
                    self.judge_folder(&folder, judge, opts, &mut tally)
                        .await
                        .map(|done| (done, tally))
                })
                .buffer_unordered(RANGES_AT_ONCE)
                .collect()
                .await;
        // The other folders' counts kept, whichever one failed, before the
        // failure is answered.
        let (mut complete, mut failed) = (true, None);
        for t in tallies {
            match t {
                Ok((done, tally)) => {
                    summary.add(&tally);
                    complete &= done;
                }
                Err(e) => failed = Some(e),
            }
        }
        failed.map_or(Ok(complete), Err)
    }

    /// Lists one shard folder page by page and judges each page: `false`
    /// when the run's deadline came first.
    async fn judge_folder(
        &self,
        folder: &str,
        judge: &Judge,
        opts: &SweepOptions,
        summary: &mut SweepSummary,
    ) -> Result<bool, SubmitError> {
        let mut page: Option<String> = None;
        loop {
            if self.past(opts) {
                return Ok(false);
            }
            let listed = self
                .with_retries(self.request_deadline(opts.deadline), || {
                    self.store.list(folder, None, page.clone(), PAGE)
                })
                .await?;
            summary.lists += 1;
            if !self
                .judge_markers(listed.objects, judge, opts, summary)
                .await?
            {
                return Ok(false);
            }
            match listed.next {
                Some(n) => page = Some(n),
                None => return Ok(true),
            }
        }
    }

    /// Judges the due markers of one page, [`READS_AT_ONCE`] at a time:
    /// `false` when one could not be judged (the deadline came, or the
    /// store failed: the next scan judges it again).
    async fn judge_markers(
        &self,
        objects: Vec<ObjectMeta>,
        judge: &Judge,
        opts: &SweepOptions,
        summary: &mut SweepSummary,
    ) -> Result<bool, SubmitError> {
        let due: Vec<(ObjectMeta, TaskLocation, bool)> = objects
            .into_iter()
            .filter_map(|o| {
                let loc = marker_task(&o.key)?;
                let orphan = judge.due(o.last_modified)?;
                Some((o, loc, orphan))
            })
            .collect();
        let outcomes: Vec<Result<bool, SubmitError>> = futures::stream::iter(due)
            .map(|(o, loc, orphan)| self.judge_marker(o, loc, orphan, opts))
            .buffer_unordered(READS_AT_ONCE)
            .collect()
            .await;
        let mut judged = true;
        for r in outcomes {
            match r {
                Ok(deleted) => summary.markers_deleted += u64::from(deleted),
                Err(SubmitError::DeadlineExceeded) => judged = false,
                Err(e) => {
                    tracing::warn!(error = %e, "a marker could not be judged");
                    summary.errors += 1;
                    judged = false;
                }
            }
        }
        Ok(judged)
    }

    /// Reads the task of the marker `o` and deletes the marker if it is
    /// stale (a dry run only counts it): `true` if it is (or would be) gone.
    async fn judge_marker(
        &self,
        o: ObjectMeta,
        loc: TaskLocation,
        orphan: bool,
        opts: &SweepOptions,
    ) -> Result<bool, SubmitError> {
        if self.past(opts) {
            return Err(SubmitError::DeadlineExceeded);
        }
        let deadline = self.request_deadline(opts.deadline);
        let task_key = loc.task_key();
        let task = match self
            .with_retries(deadline, || self.store.get(&task_key))
            .await
        {
            Ok(obj) => Some(TaskState::parse(&obj.body)),
            Err(Failure::Store(StoreError::NotFound)) => None,
            Err(e) => return Err(e.into()),
        };
        let why = match verdict(task.as_ref(), &loc, orphan) {
            Verdict::Stays => return Ok(false),
            Verdict::Taken => "its task has been taken",
            Verdict::Orphan => "its task was never written",
        };
        tracing::info!(marker = %o.key, why, dry_run = opts.dry_run, "a stale marker: removed");
        if opts.dry_run {
            return Ok(true);
        }
        // Unconditional, as every marker removal: markers are empty, so an
        // ETag tells none apart.
        match self
            .with_retries(deadline, || self.store.delete(&o.key, None))
            .await
        {
            Ok(()) | Err(Failure::Store(StoreError::NotFound)) => Ok(true),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "a1b2c3d4-0000-4000-8000-000000000000";

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + secs, 0).unwrap()
    }

    #[test]
    fn a_marker_names_its_task_only_in_the_ready_index_layout() {
        let loc = marker_task(&format!("ready/a/0029626900/{ID}")).unwrap();
        assert_eq!(loc.task_key(), format!("tasks/a/{ID}.json"));
        assert_eq!(loc.marker_key(), format!("ready/a/0029626900/{ID}"));
        for shard in ["a1", "a1b", "a1b2"] {
            let loc = marker_task(&format!("ready/{shard}/0029626900/{ID}")).unwrap();
            assert_eq!(loc.task_key(), format!("tasks/{shard}/{ID}.json"));
        }
        for key in [
            // Another shard than the id's, or one too long.
            format!("ready/b/0029626900/{ID}"),
            format!("ready/a1b2c/0029626900/{ID}"),
            // A minute not of ten digits.
            format!("ready/a/29629340/{ID}"),
            format!("ready/a/00296293xx/{ID}"),
            // Another spelling of the id, or none.
            format!("ready/a/0029626900/{}", ID.to_uppercase()),
            format!("ready/a/0029626900/{}", ID.replace('-', "")),
            "ready/a/0029626900/".to_owned(),
            // Deeper, or elsewhere.
            format!("ready/a/0029626900/{ID}/x"),
            format!("tasks/a/{ID}.json"),
        ] {
            assert!(marker_task(&key).is_none(), "{key}");
        }
    }

    #[test]
    fn a_marker_goes_beside_a_taken_task_and_without_one_only_at_the_orphan_age() {
        let loc = marker_task(&format!("ready/a/0029626900/{ID}")).unwrap();
        let task = |status: &str, available: &str| {
            TaskState::parse(
                format!(r#"{{"status":"{status}","available_at":"{available}"}}"#).as_bytes(),
            )
        };
        // 0029626900 is 2026-05-01T05:40Z's minute.
        let ready = task("pending", "2026-05-01T05:40:30Z");
        assert!(ready.is_ready_in(&loc));
        for orphan in [false, true] {
            assert_eq!(verdict(Some(&ready), &loc, orphan), Verdict::Stays);
            for taken in [
                task("running", "2026-05-01T05:40:30Z"),
                task("completed", "2026-05-01T05:40:30Z"),
                // Retried: pending again, in a later minute's marker.
                task("pending", "2026-05-01T05:43:00Z"),
            ] {
                assert_eq!(verdict(Some(&taken), &loc, orphan), Verdict::Taken);
            }
        }
        assert_eq!(verdict(None, &loc, false), Verdict::Stays);
        assert_eq!(verdict(None, &loc, true), Verdict::Orphan);
    }

    #[test]
    fn a_marker_is_judged_by_the_one_pass_whose_window_its_age_crosses_each_age_in() {
        let judge = |previous: Option<i64>, pass: i64| Judge {
            window: (previous.map(at), at(pass)),
            settled: Duration::seconds(900),
            orphan: Duration::seconds(3300),
        };
        // Landed at 0: too young at 899, settled at 900.
        assert_eq!(judge(Some(0), 899).due(at(0)), None);
        assert_eq!(judge(Some(899), 900).due(at(0)), Some(false));
        // Not again until its orphan age.
        assert_eq!(judge(Some(900), 3299).due(at(0)), None);
        assert_eq!(judge(Some(3299), 3300).due(at(0)), Some(true));
        assert_eq!(judge(Some(3300), 86_400).due(at(0)), None);
        // A daily pass that meets both ages at once judges it once, as an
        // orphan (the later age decides).
        assert_eq!(judge(Some(-1), 86_400).due(at(0)), Some(true));
        // The first scan ever judges every marker old enough.
        assert_eq!(judge(None, 86_400).due(at(0)), Some(true));
        assert_eq!(judge(None, 1000).due(at(0)), Some(false));
        assert_eq!(judge(None, 10).due(at(0)), None);
        // A marker written again is judged again, from its new write.
        assert_eq!(judge(Some(4000), 4900).due(at(4000)), Some(false));
    }
}
