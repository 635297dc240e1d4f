//! The scheduled pass: hygiene and a safety net. It lists ranges of
//! `idempotency/` side by side, reads a record only when its age crosses a
//! threshold, and stops before its deadline keeping its place (the module
//! docs of `sweep` say how; `share.rs`, how a share of a pass goes on).

use std::collections::VecDeque;

use chrono::{DateTime, Duration, Utc};
use futures::StreamExt;
use futures::stream::FuturesUnordered;

use super::ranges::{KeysRange, Range, after_keys_page, after_scope_page, resume_after};
use super::{
    PAGE, RANGES_AT_ONCE, READS_AT_ONCE, RECORDS_PREFIX, RecordOutcome, SweepOptions, SweepSummary,
};
use crate::protocol::engine::{Engine, Failure};
use crate::protocol::error::SubmitError;
use crate::store::{ListPage, ObjectMeta};

/// How many keys the next listing asks for: a page, or what is left of a
/// run bounded by `max_records` (`scanned` is below it).
fn page_limit(budget: Option<u64>, scanned: u64) -> usize {
    budget.map_or(PAGE, |m| (m - scanned).min(PAGE as u64) as usize)
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

    /// One run of the scheduled pass, alone (no continuation handed on):
    /// this invocation's share, and the pass's end when it comes in it. What
    /// `idem sweep` and the tests run; see [`Engine::sweep_share`].
    pub async fn sweep(&self, opts: &SweepOptions) -> Result<SweepSummary, SubmitError> {
        Ok(self.sweep_share(opts, None).await?.summary)
    }

    /// Lists `ranges` side by side (one at a time for a run bounded by a
    /// `budget` of records), none started past the run's deadline, nor,
    /// when this share fans the pass out, once it holds more ranges than it
    /// lists at once. What is left, and the ranges that met a retryable
    /// failure (they wait for the next scheduled run).
    pub(super) async fn list_ranges(
        &self,
        ranges: Vec<Range>,
        window: (Option<DateTime<Utc>>, DateTime<Utc>),
        opts: &SweepOptions,
        (budget, fan_out): (Option<u64>, bool),
        summary: &mut SweepSummary,
    ) -> (Vec<Range>, Vec<Range>) {
        let mut todo: VecDeque<Range> = ranges.into();
        let mut wait: Vec<Range> = Vec::new();
        let at_once = if budget.is_some() { 1 } else { RANGES_AT_ONCE };
        let mut running = FuturesUnordered::new();
        loop {
            while running.len() < at_once
                && !self.past(opts)
                && budget.is_none_or(|m| summary.scanned < m)
                && !(fan_out && todo.len() + running.len() > RANGES_AT_ONCE)
                && let Some(range) = todo.pop_front()
            {
                let limit = page_limit(budget, summary.scanned);
                running.push(self.sweep_range(range, window, limit, opts));
            }
            let Some(step) = running.next().await else {
                break;
            };
            // Once the run's deadline has come, a range that stopped goes on
            // in the next share, handed on at once (never started again
            // here: nothing starts past the deadline). Before it, a stop is a
            // failure, counted (a store that hung past an operation's time
            // says no error of its own), and waits for the next scheduled run.
            let mut tally = step.tally;
            if self.past(opts) {
                todo.extend(step.wait);
            } else {
                if !step.wait.is_empty() && tally.errors == 0 {
                    tally.errors += 1;
                }
                wait.extend(step.wait);
            }
            summary.add(&tally);
            todo.extend(step.next);
        }
        (todo.into(), wait)
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
            // A pass finds its scopes a page of folders at a time; a pass
            // begun by an earlier version goes on skipping from scope to
            // scope.
            Range::Scopes { after: None } => self.list_scope_dirs(None, opts).await,
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
            // The tail's items are a tail share's (`tail.rs`), never listed
            // as records: one here waits, unlisted, rather than looping.
            tail => RangeStep {
                tally: SweepSummary::default(),
                next: vec![],
                wait: vec![tail],
            },
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
        let per_range = self.settings.pass_range_records;
        let mut next = after_keys_page(&range, &keys, (ended, page.next.clone()), per_range);
        let due: Vec<&ObjectMeta> = objects
            .iter()
            .copied()
            .filter(|m| self.due(m.last_modified, window.0, window.1))
            .collect();
        let stop_at = self.read_due(&due, opts, &mut tally).await;
        let mut wait = Vec::new();
        if let Some(stopped) = stop_at {
            let again = resume_after(&range, &keys, stopped, &mut next);
            // Stopped by the invocation's deadline, not by a failure: the
            // range goes back to the pass's pool with the rest, for the
            // share this one hands on to, not to the next scheduled run.
            if self.past(opts) {
                next.push(again);
            } else {
                wait.push(again);
            }
        }
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
        let mut tally = tally;
        // No attempt could start before the deadline: not a failure of the
        // store (nor counted as one); `list_ranges` hands the range on.
        if !matches!(e, Failure::Deadline) {
            let e = SubmitError::from(e);
            tracing::warn!(error = %e, "sweep could not list a range; it goes on next run");
            tally.errors += 1;
        }
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

    /// Whether the pass of window `(previous, pass]` reads a record, the
    /// window's ends given as the record's ages in seconds, under the
    /// default settings (stale after 600 s, a finish window of 2,400 s, a
    /// default TTL of 30 days).
    fn read_in(previous: Option<i64>, pass: i64) -> bool {
        use std::sync::Arc;

        use crate::clock::ManualClock;
        use crate::config::Settings;
        use crate::store::MemoryStore;

        let clock = ManualClock::at_epoch();
        let store = Arc::new(MemoryStore::new(Arc::new(clock.clone())));
        let engine = Engine::new(store, Arc::new(clock), Settings::default());
        let written = DateTime::<Utc>::UNIX_EPOCH;
        let at = |secs| written + Duration::seconds(secs);
        engine.due(written, previous.map(at), at(pass))
    }

    #[test]
    fn a_record_is_read_by_the_one_pass_whose_window_its_age_crosses_a_threshold_in() {
        let h = 3_600;
        // Stale: read by the pass that crosses 600 s, at it exactly, and
        // not by the next.
        assert!(read_in(Some(599), 600));
        assert!(!read_in(Some(600), 601));
        assert!(!read_in(Some(0), 599));
        assert!(!read_in(None, 100));
        // Only while it can still be finished: younger than the finish
        // window (a task is written only before it ends).
        assert!(read_in(None, 2_399));
        assert!(!read_in(None, 2_400));
        assert!(!read_in(Some(500), 2_400));
        // The default TTL, 720 h.
        assert!(read_in(Some(720 * h - 1), 720 * h));
        assert!(!read_in(Some(720 * h), 1_000 * h));
        // Then each 2^k hours past it: 1,024 h, 2,048 h, ...
        assert!(read_in(Some(1_023 * h), 1_024 * h));
        assert!(!read_in(Some(1_024 * h), 2_047 * h));
        assert!(read_in(Some(2_047 * h), 2_048 * h));
    }

    #[test]
    fn a_bounded_run_asks_for_no_more_keys_than_it_has_left() {
        assert_eq!(page_limit(None, 5_000), PAGE);
        assert_eq!(page_limit(Some(10), 3), 7);
        assert_eq!(page_limit(Some(PAGE as u64 * 3), 0), PAGE);
    }
}
