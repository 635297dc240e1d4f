//! The scheduled pass: hygiene and a safety net. It lists ranges of
//! `idempotency/` side by side, reads a record only when its age crosses a
//! threshold, stops before its deadline keeping its place, and goes on next
//! run (the module docs of `sweep` say how).

use std::collections::VecDeque;

use chrono::{DateTime, Duration, Utc};
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use serde::{Deserialize, Serialize};

use super::ranges::{KeysRange, Range, after_keys_page, after_scope_page, resume_after};
use super::{
    CHECKPOINT_KEY, PAGE, RANGES_AT_ONCE, READS_AT_ONCE, RECORDS_PREFIX, RecordOutcome,
    SweepOptions, SweepSummary,
};
use crate::config::ListOrder;
use crate::protocol::engine::{Engine, Failure};
use crate::protocol::error::SubmitError;
use crate::store::{ETag, ListPage, ObjectMeta, PutMode, StoreError};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Checkpoint {
    /// When the pass before this one began (`None`: never).
    #[serde(default)]
    previous_pass: Option<DateTime<Utc>>,
    /// When this pass began: the upper end of the window every one of its
    /// records is judged against, in every run it takes.
    pass: DateTime<Utc>,
    /// The pass listed every range.
    #[serde(default)]
    complete: bool,
    /// What the pass still has to list.
    #[serde(default)]
    ranges: Vec<Range>,
    /// A run is working this pass until then.
    #[serde(default)]
    running_until: Option<DateTime<Utc>>,
    /// Where the last complete scan of the ready index ended (`None`:
    /// never): the next scan's window begins there (`markers.rs`).
    #[serde(default)]
    markers_until: Option<DateTime<Utc>>,
}

impl Checkpoint {
    /// A new pass at `pass`, after the complete one `before` (if any).
    fn new_pass(before: Option<&Checkpoint>, pass: DateTime<Utc>, order: ListOrder) -> Self {
        Checkpoint {
            previous_pass: before.map(|c| c.pass),
            pass,
            complete: false,
            ranges: vec![Range::first(order)],
            running_until: None,
            markers_until: before.and_then(|c| c.markers_until),
        }
    }
}

impl Checkpoint {
    /// Whether another run holds the pass at `now`: its lease runs past it.
    fn leased_at(&self, now: DateTime<Utc>) -> bool {
        self.running_until.is_some_and(|u| u > now)
    }
}

/// The pass a run works on: the unfinished one it finds (`true`: resumed),
/// whose ranges and window it keeps, or a new one opening at `started`,
/// whose window begins where the last complete pass did. An unfinished pass
/// begun under the other `LIST_ORDER` keeps its window and begins its
/// ranges again, as `order` lists them.
fn open_pass(
    saved: Option<Checkpoint>,
    started: DateTime<Utc>,
    order: ListOrder,
) -> (Checkpoint, bool) {
    match saved {
        Some(mut c) if !c.complete => {
            if !c.ranges.iter().all(|r| r.fits(order)) {
                tracing::info!(
                    "the pass was begun under the other LIST_ORDER: its ranges begin again"
                );
                c.ranges = vec![Range::first(order)];
            }
            (c, true)
        }
        Some(c) => (Checkpoint::new_pass(Some(&c), started, order), false),
        None => (Checkpoint::new_pass(None, started, order), false),
    }
}

/// How many keys the next listing asks for: a page, or what is left of a
/// run bounded by `max_records` (`scanned` is below it).
fn page_limit(max_records: Option<usize>, scanned: u64) -> usize {
    max_records.map_or(PAGE, |m| (m as u64 - scanned).min(PAGE as u64) as usize)
}

/// What one step of a pass (a page of one range) left behind.
pub(super) struct RangeStep {
    pub tally: SweepSummary,
    /// The ranges to go on with in this run (none: the range is done).
    pub next: Vec<Range>,
    /// The ranges that wait for the next run (after a retryable failure).
    pub wait: Vec<Range>,
}

impl Engine {
    /// Does the pass with window `(previous, pass]` read a record last
    /// written at `last_modified`? See the module docs.
    pub(super) fn due(
        &self,
        last_modified: DateTime<Utc>,
        previous: Option<DateTime<Utc>>,
        pass: DateTime<Utc>,
    ) -> bool {
        let age = pass - last_modified;
        let crossed = |t: Duration| t <= age && previous.is_none_or(|p| p - last_modified < t);
        let s = &self.settings;
        (crossed(s.stale_creating_after) && age < s.finish_window)
            || crossed(s.default_ttl)
            || (0..20)
                .map(|k| Duration::hours(1 << k))
                .filter(|t| *t > s.default_ttl)
                .take_while(|t| *t <= age)
                .any(crossed)
    }

    /// One run of the scheduled pass: see the module docs.
    pub async fn sweep(&self, opts: &SweepOptions) -> Result<SweepSummary, SubmitError> {
        let mut summary = SweepSummary {
            dry_run: opts.dry_run,
            ..SweepSummary::default()
        };
        // 1. Where the last run left the pass.
        let (saved, mut etag) = self.read_checkpoint(opts, &mut summary).await?;
        // 2. One clock reading, in S3's time (the records' LastModified is):
        // the new pass's instant, and the time the lease of another run is
        // judged against. A pass whose clock is off writes no checkpoint.
        let local_start = self.now();
        let started = self.s3_earliest()?;
        if saved.as_ref().is_some_and(|c| c.leased_at(started)) {
            summary.busy = true;
            return Ok(summary);
        }
        let (mut cp, resumed) = open_pass(saved, started, self.settings.list_order);
        summary.resumed = resumed;
        if !opts.dry_run {
            match self
                .claim_pass(&mut cp, etag.as_ref(), opts, local_start, started)
                .await?
            {
                Some(e) => etag = Some(e),
                None => {
                    summary.busy = true;
                    return Ok(summary);
                }
            }
        }

        // 3.-5. The ranges, side by side, each record judged against the
        // pass's one window.
        let todo = std::mem::take(&mut cp.ranges);
        let window = (cp.previous_pass, cp.pass);
        cp.ranges = self.list_ranges(todo, window, opts, &mut summary).await;
        summary.complete = cp.ranges.is_empty();
        cp.complete = summary.complete;
        // Once the records are done: the ready index's stale markers, over
        // the window since the last complete scan.
        if summary.complete
            && self
                .sweep_markers((cp.markers_until, cp.pass), opts, &mut summary)
                .await
        {
            cp.markers_until = Some(cp.pass);
        }
        cp.running_until = None;
        if !opts.dry_run {
            self.save_checkpoint(&cp, etag.as_ref()).await?;
        }
        // Once the records are done: payloads that no task names.
        if summary.complete
            && let Err(e) = self.sweep_payloads(opts, started, &mut summary).await
        {
            tracing::warn!(error = %e, "the payload listing stopped");
            summary.errors += 1;
        }
        Ok(summary)
    }

    /// `GET sweeper/checkpoint.json`: the pass it holds, if it is one, and
    /// the ETag a claim swaps it by.
    async fn read_checkpoint(
        &self,
        opts: &SweepOptions,
        summary: &mut SweepSummary,
    ) -> Result<(Option<Checkpoint>, Option<ETag>), SubmitError> {
        match self
            .with_retries(self.request_deadline(opts.deadline), || {
                self.store.get(CHECKPOINT_KEY)
            })
            .await
        {
            Ok(o) => match serde_json::from_slice::<Checkpoint>(&o.body) {
                Ok(cp) => Ok((Some(cp), Some(o.meta.etag))),
                // Not ours to read: say so, count it, and begin a new pass
                // over it (by compare-and-swap on what is there).
                Err(e) => {
                    tracing::error!(key = CHECKPOINT_KEY, error = %e, "the sweeper's checkpoint does not parse: a new pass begins");
                    summary.errors += 1;
                    Ok((None, Some(o.meta.etag)))
                }
            },
            Err(Failure::Store(StoreError::NotFound)) => Ok((None, None)),
            Err(e) => Err(e.into()),
        }
    }

    /// Claims the pass for this run by writing the checkpoint back with a
    /// lease (`If-Match` what was read): the new ETag, or `None` when
    /// another run wrote it since and has the pass.
    async fn claim_pass(
        &self,
        cp: &mut Checkpoint,
        etag: Option<&ETag>,
        opts: &SweepOptions,
        local_start: DateTime<Utc>,
        started: DateTime<Utc>,
    ) -> Result<Option<ETag>, SubmitError> {
        let run = opts
            .deadline
            .map_or(Duration::minutes(15), |d| d - local_start);
        cp.running_until = Some(started + run + self.settings.operation_timeout);
        match self
            .write_checkpoint(cp, etag, self.request_deadline(opts.deadline))
            .await
        {
            Ok(e) => Ok(Some(e)),
            // Changed since it was read, or gone (S3 answers 404 to If-Match
            // on a missing key, SeaweedFS 412): either way another hand was
            // on it, and this run leaves the pass; the next run reads it again.
            Err(Failure::Store(StoreError::PreconditionFailed | StoreError::NotFound)) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Lists `ranges` side by side (one at a time for a run bounded by
    /// `max_records`), none started past the run's deadline: the ranges
    /// left for the next run.
    async fn list_ranges(
        &self,
        ranges: Vec<Range>,
        window: (Option<DateTime<Utc>>, DateTime<Utc>),
        opts: &SweepOptions,
        summary: &mut SweepSummary,
    ) -> Vec<Range> {
        let mut todo: VecDeque<Range> = ranges.into();
        let mut later: Vec<Range> = Vec::new();
        let at_once = if opts.max_records.is_some() {
            1
        } else {
            RANGES_AT_ONCE
        };
        let mut running = FuturesUnordered::new();
        loop {
            while running.len() < at_once
                && opts.deadline.is_none_or(|d| self.now() < d)
                && opts.max_records.is_none_or(|m| summary.scanned < m as u64)
                && let Some(range) = todo.pop_front()
            {
                let limit = page_limit(opts.max_records, summary.scanned);
                running.push(self.sweep_range(range, window, limit, opts));
            }
            let Some(step) = running.next().await else {
                break;
            };
            summary.add(&step.tally);
            later.extend(step.wait);
            todo.extend(step.next);
        }
        later.extend(todo);
        later
    }

    /// Writes the checkpoint back at the end of a run (`If-Match` its
    /// claim), even past the run's deadline: that is what the stop margin is
    /// for.
    async fn save_checkpoint(
        &self,
        cp: &Checkpoint,
        etag: Option<&ETag>,
    ) -> Result<(), SubmitError> {
        match self
            .write_checkpoint(cp, etag, self.request_deadline(None))
            .await
        {
            Ok(_) => Ok(()),
            // Taken over after our lease ran out: its place wins.
            Err(Failure::Store(StoreError::PreconditionFailed | StoreError::NotFound)) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    async fn write_checkpoint(
        &self,
        cp: &Checkpoint,
        etag: Option<&ETag>,
        deadline: DateTime<Utc>,
    ) -> Result<ETag, Failure> {
        let cond = match etag {
            Some(e) => PutMode::Update(e.clone()),
            None => PutMode::Create,
        };
        // A checkpoint always serializes (times and strings); if it ever did
        // not, nothing is written rather than an empty checkpoint.
        let body = serde_json::to_vec(cp)
            .map(bytes::Bytes::from)
            .map_err(|e| Failure::Store(StoreError::Fatal(format!("the checkpoint: {e}"))))?;
        self.with_retries(deadline, || {
            self.store.put(CHECKPOINT_KEY, body.clone(), cond.clone())
        })
        .await
        .map(|p| p.etag)
    }

    /// Lists one page of `range` and reads its due records; returns what to
    /// go on with.
    async fn sweep_range(
        &self,
        range: Range,
        window: (Option<DateTime<Utc>>, DateTime<Utc>),
        limit: usize,
        opts: &SweepOptions,
    ) -> RangeStep {
        match range {
            Range::Scopes { after } => self.list_scopes(after, opts).await,
            Range::Keys {
                prefix,
                after,
                until,
                token,
            } => {
                let range = KeysRange {
                    prefix,
                    after,
                    until,
                };
                self.list_keys(range, token, window, limit, opts).await
            }
            Range::Dirs { token } => self.list_scope_dirs(token, opts).await,
            Range::Dir { prefix, token } => self.list_dir(prefix, token, window, limit, opts).await,
        }
    }

    /// The next scope after `after`: one key listed, its scope's range to
    /// list, and the scopes after it.
    async fn list_scopes(&self, after: Option<String>, opts: &SweepOptions) -> RangeStep {
        let tally = SweepSummary {
            lists: 1,
            ..SweepSummary::default()
        };
        // No request starts past the run's deadline.
        let page = match self
            .with_retries(self.request_deadline(opts.deadline), || {
                self.store.list(RECORDS_PREFIX, after.as_deref(), None, 1)
            })
            .await
        {
            Ok(p) => p,
            Err(e) => return self.range_failed(Range::Scopes { after }, e, tally),
        };
        RangeStep {
            tally,
            next: page
                .objects
                .first()
                .map_or_else(Vec::new, |first| after_scope_page(&first.key)),
            wait: vec![],
        }
    }

    /// One page of a range of records; the due ones are read.
    async fn list_keys(
        &self,
        range: KeysRange,
        token: Option<String>,
        window: (Option<DateTime<Utc>>, DateTime<Utc>),
        limit: usize,
        opts: &SweepOptions,
    ) -> RangeStep {
        let (mut tally, page) = self
            .list_records(&range.prefix, range.after.as_deref(), token, limit, opts)
            .await;
        let page = match page {
            Ok(p) => p,
            Err(e) => return self.range_failed(range.into_range(), e, tally),
        };
        // Keys past the range's upper end belong to other ranges.
        let objects: Vec<&ObjectMeta> = page
            .objects
            .iter()
            .filter(|m| range.until.as_deref().is_none_or(|u| m.key.as_str() <= u))
            .collect();
        let ended = page.next.is_none() || objects.len() < page.objects.len();
        tally.scanned += objects.len() as u64;
        let keys: Vec<&str> = objects.iter().map(|m| m.key.as_str()).collect();
        let mut next = after_keys_page(&range, &keys, ended, page.next.clone());
        let due: Vec<&ObjectMeta> = objects
            .iter()
            .copied()
            .filter(|m| self.due(m.last_modified, window.0, window.1))
            .collect();
        let stop_at = self.read_due(&due, opts, &mut tally).await;
        let wait = stop_at
            .map(|failed| vec![resume_after(&range, &keys, failed, &mut next)])
            .unwrap_or_default();
        RangeStep { tally, next, wait }
    }

    /// One page of records under `prefix` (either `LIST_ORDER`'s ranges),
    /// through the retry loop; the tally counts the LIST.
    pub(super) async fn list_records(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        token: Option<String>,
        limit: usize,
        opts: &SweepOptions,
    ) -> (SweepSummary, Result<ListPage, Failure>) {
        let tally = SweepSummary {
            lists: 1,
            ..SweepSummary::default()
        };
        let page = self
            .with_retries(self.request_deadline(opts.deadline), || {
                self.store.list(prefix, start_after, token.clone(), limit)
            })
            .await;
        (tally, page)
    }

    /// Reads the due records side by side, a chunk at a time, none started
    /// past the deadline; the key of the first one that has to be tried
    /// again, if any.
    pub(super) async fn read_due<'a>(
        &self,
        due: &[&'a ObjectMeta],
        opts: &SweepOptions,
        tally: &mut SweepSummary,
    ) -> Option<&'a str> {
        let mut stop_at: Option<&str> = None;
        for chunk in due.chunks(READS_AT_ONCE) {
            if opts.deadline.is_some_and(|d| self.now() >= d) {
                return chunk.first().map(|m| m.key.as_str());
            }
            let outcomes = futures::future::join_all(
                chunk
                    .iter()
                    .map(|m| self.sweep_record(&m.key, opts.dry_run, opts.deadline)),
            )
            .await;
            for (m, o) in chunk.iter().zip(&outcomes) {
                let o = match o {
                    // A pass leaves young records to their submit and their
                    // event.
                    RecordOutcome::Early => &RecordOutcome::Nothing,
                    o => o,
                };
                o.tally(tally);
                if stop_at.is_none() && o.try_again_later() {
                    stop_at = Some(m.key.as_str());
                }
            }
            if stop_at.is_some() {
                break;
            }
        }
        stop_at
    }

    pub(super) fn range_failed(&self, range: Range, e: Failure, tally: SweepSummary) -> RangeStep {
        let e = SubmitError::from(e);
        tracing::warn!(error = %e, "sweep could not list a range; it goes on next run");
        let mut tally = tally;
        tally.errors += 1;
        RangeStep {
            tally,
            next: vec![],
            wait: vec![range],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn an_unfinished_pass_is_resumed_with_its_window_and_ranges() {
        let mut cp = Checkpoint::new_pass(None, t("2026-01-02T00:00:00Z"), ListOrder::Bytes);
        cp.previous_pass = Some(t("2026-01-01T00:00:00Z"));
        cp.ranges = vec![Range::Scopes {
            after: Some("idempotency/s/ab.json".into()),
        }];
        let (open, resumed) = open_pass(
            Some(cp.clone()),
            t("2026-01-03T00:00:00Z"),
            ListOrder::Bytes,
        );
        assert!(resumed);
        assert_eq!(open.previous_pass, cp.previous_pass);
        assert_eq!(open.pass, cp.pass);
        assert_eq!(open.ranges, cp.ranges);
    }

    #[test]
    fn a_new_pass_opens_where_the_last_complete_one_began_or_at_the_beginning() {
        let mut done = Checkpoint::new_pass(None, t("2026-01-02T00:00:00Z"), ListOrder::Bytes);
        done.complete = true;
        done.ranges.clear();
        done.markers_until = Some(t("2026-01-01T00:00:00Z"));
        let now = t("2026-01-03T00:00:00Z");
        let (open, resumed) = open_pass(Some(done.clone()), now, ListOrder::Bytes);
        assert!(!resumed);
        assert_eq!(open.previous_pass, Some(t("2026-01-02T00:00:00Z")));
        // The ready index's window goes on from the last complete scan,
        // whichever pass that was in.
        assert_eq!(open.markers_until, Some(t("2026-01-01T00:00:00Z")));
        assert_eq!(open.pass, now);
        assert_eq!(open.ranges, vec![Range::Scopes { after: None }]);
        let (any, _) = open_pass(Some(done), now, ListOrder::Any);
        assert_eq!(any.ranges, vec![Range::Dirs { token: None }]);
        let (first, resumed) = open_pass(None, now, ListOrder::Bytes);
        assert!(!resumed);
        assert_eq!((first.previous_pass, first.pass), (None, now));
        assert_eq!(first.markers_until, None);
    }

    #[test]
    fn a_pass_begun_under_the_other_list_order_keeps_its_window_and_begins_its_ranges_again() {
        let mut cp = Checkpoint::new_pass(None, t("2026-01-02T00:00:00Z"), ListOrder::Bytes);
        cp.previous_pass = Some(t("2026-01-01T00:00:00Z"));
        cp.ranges = vec![Range::Scopes {
            after: Some("idempotency/s/ab.json".into()),
        }];
        let (open, resumed) =
            open_pass(Some(cp.clone()), t("2026-01-03T00:00:00Z"), ListOrder::Any);
        assert!(resumed);
        assert_eq!((open.previous_pass, open.pass), (cp.previous_pass, cp.pass));
        assert_eq!(open.ranges, vec![Range::Dirs { token: None }]);
    }

    #[test]
    fn a_lease_holds_the_pass_until_it_runs_out() {
        let now = t("2026-01-03T00:00:00Z");
        let mut cp = Checkpoint::new_pass(None, now, ListOrder::Bytes);
        assert!(!cp.leased_at(now));
        cp.running_until = Some(now + Duration::seconds(1));
        assert!(cp.leased_at(now));
        cp.running_until = Some(now);
        assert!(!cp.leased_at(now), "a lease ending now has run out");
    }

    #[test]
    fn a_bounded_run_asks_for_no_more_keys_than_it_has_left() {
        assert_eq!(page_limit(None, 5_000), PAGE);
        assert_eq!(page_limit(Some(10), 3), 7);
        assert_eq!(page_limit(Some(PAGE * 3), 0), PAGE);
    }
}
