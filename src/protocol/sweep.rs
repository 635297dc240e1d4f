//! The sweeper (CONTRACT.md section 6): finishes interrupted submits and
//! deletes expired records. It is woken two ways, and neither lists the
//! bucket on the finishing path.
//!
//! **Record events (the main path), [`Engine::sweep_record`].** Every record
//! write sends an S3 event to the due queue, which hands it to the sweeper
//! `STALE_CREATING_AFTER_SECONDS` later. The sweeper reads that one record
//! (one GET when there is nothing to do) and acts on its current state, so
//! its work per record write is the same however many records the bucket
//! holds. The message adapter is `lambda::due`.
//!
//! **The scheduled pass, [`Engine::sweep`].** Hygiene and a safety net, once
//! a day: it lists `idempotency/` and reads a record only in the pass during
//! which its age (since its last write) crosses a threshold, so each record
//! is read O(1) times over its life however often passes run:
//!
//! - `STALE_CREATING_AFTER_SECONDS`, while the record can still be finished
//!   (younger than the finish window): a record whose event never came;
//! - the default TTL, when most records expire;
//! - 1 h × 2^k beyond the default TTL, for records with longer TTLs (they go
//!   at most twice their TTL late; S3's lifecycle rule is the backstop, and an
//!   expired record counts as absent whether or not it is deleted). Records
//!   with shorter TTLs are deleted at the default TTL's age.
//!
//! A pass judges every record against one window, `(previous pass, pass]`,
//! where `pass` is the one clock reading at which the pass began: resumed
//! runs judge their records against the same window, so every crossing is
//! judged by exactly one pass. It lists ranges of the key space side by side:
//! one range per scope, found by a listing that skips from scope to scope,
//! and a range whose first page is full splits into sixteen by the next hex
//! digit of the record hash (down to three digits), so a large scope is
//! listed by many listings at once. It stops before the invocation's deadline
//! and keeps the ranges still to list in `sweeper/checkpoint.json`; the next
//! run goes on from there. A run claims the checkpoint by compare-and-swap
//! before it works, so two runs never work one pass at the same time.

use std::collections::VecDeque;

use chrono::{DateTime, Duration, Utc};
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use serde::{Deserialize, Serialize};

use super::record::{Record, RecordStatus};
use super::submit::{Engine, Failure, Start, SubmitError};
use crate::store::{ETag, ObjectMeta, PutMode, StoreError};

/// Where the sweeper keeps its place.
pub const CHECKPOINT_KEY: &str = "sweeper/checkpoint.json";
/// Where the records are.
pub const RECORDS_PREFIX: &str = "idempotency/";

/// Records one range reads (and finishes or deletes) at once.
const READS_AT_ONCE: usize = 16;
/// Ranges listed at once by a pass.
pub const RANGES_AT_ONCE: usize = 32;
/// Keys per listing page (S3's largest).
const PAGE: usize = 1000;
/// A range splits by the hex digits of the record hash down to this many.
const MAX_SPLIT_DIGITS: usize = 3;
const HEX: &[u8; 16] = b"0123456789abcdef";

/// How one scheduled pass runs.
#[derive(Debug, Clone, Default)]
pub struct SweepOptions {
    /// Report what would be done; change nothing (not even the checkpoint).
    pub dry_run: bool,
    /// Start no request at or after this time (by the engine's clock),
    /// keeping the place.
    pub deadline: Option<DateTime<Utc>>,
    /// Stop after this many listed records (tests, small batches); the pass
    /// then lists one range at a time.
    pub max_records: Option<usize>,
}

/// What a sweep did: a scheduled pass, or a batch of record events.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SweepSummary {
    /// Records listed (a pass) or named by events (the due queue).
    pub scanned: u64,
    /// Records for which something was missing (the task object, its
    /// marker) and the sweeper wrote it.
    pub finished: u64,
    pub expired_deleted: u64,
    /// Records that could not be handled: `creating` past the finish
    /// deadline, corrupt, or storage failures.
    pub errors: u64,
    /// The pass reached the end of every range (events: always true).
    pub complete: bool,
    pub dry_run: bool,
    /// Records read (GET) in this run.
    #[serde(skip)]
    pub reads: u64,
    /// Listings (LIST requests) made in this run.
    #[serde(skip)]
    pub lists: u64,
    /// Of `errors`: `creating` records past their finish deadline.
    #[serde(skip)]
    pub past_deadline: u64,
    /// Events whose record was still too young: handed back to the queue.
    #[serde(skip)]
    pub early: u64,
    /// Events acknowledged without a read: test events, keys outside
    /// `idempotency/`, other buckets.
    #[serde(skip)]
    pub ignored: u64,
    /// Messages that were not S3 notifications (logged and acknowledged).
    #[serde(skip)]
    pub unrecognized: u64,
    /// This run went on with a pass that an earlier run had to stop.
    #[serde(skip)]
    pub resumed: bool,
    /// Another run held the pass: this one did nothing.
    #[serde(skip)]
    pub busy: bool,
}

impl SweepSummary {
    /// Adds another run's counts to this one.
    pub fn add(&mut self, o: &SweepSummary) {
        self.scanned += o.scanned;
        self.finished += o.finished;
        self.expired_deleted += o.expired_deleted;
        self.errors += o.errors;
        self.reads += o.reads;
        self.lists += o.lists;
        self.past_deadline += o.past_deadline;
        self.early += o.early;
        self.ignored += o.ignored;
        self.unrecognized += o.unrecognized;
    }
}

/// What the sweeper did with one record it read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordOutcome {
    /// Nothing to do: nothing missing, `ready`, not ours (no `status`),
    /// gone, or (in a pass) `creating` and too young.
    Nothing,
    /// A `creating` record whose task object or marker was missing: the
    /// sweeper wrote what was.
    Finished,
    /// Past `expires_at`: deleted (If-Match).
    ExpiredDeleted,
    /// `creating` and younger than `STALE_CREATING_AFTER_SECONDS`: its event
    /// came early; try again later.
    Early,
    /// `creating` past its finish deadline: left as it is (an error).
    PastDeadline,
    /// Not a record of the layout: left as it is (an error).
    Corrupt,
    /// The store failed; worth trying again when retryable.
    Failed(SubmitError),
}

impl RecordOutcome {
    /// Should the event be delivered again (or the pass stop here)?
    pub fn retry(&self) -> bool {
        match self {
            RecordOutcome::Early => true,
            RecordOutcome::Failed(e) => {
                e.is_retryable() && !matches!(e, SubmitError::Undetermined { .. })
            }
            _ => false,
        }
    }

    /// Counts this outcome of one read into `s`.
    pub fn tally(&self, s: &mut SweepSummary) {
        s.reads += 1;
        match self {
            RecordOutcome::Nothing => {}
            RecordOutcome::Finished => s.finished += 1,
            RecordOutcome::ExpiredDeleted => s.expired_deleted += 1,
            RecordOutcome::Early => s.early += 1,
            RecordOutcome::PastDeadline => {
                s.past_deadline += 1;
                s.errors += 1;
            }
            // Cut short by the run's own deadline: not an error, it goes on
            // next run.
            RecordOutcome::Failed(SubmitError::DeadlineExceeded) => {}
            RecordOutcome::Corrupt | RecordOutcome::Failed(_) => s.errors += 1,
        }
    }
}

/// A part of the key space still to list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Range {
    /// Finding the scopes: the next key after `after` names the next scope.
    Scopes {
        #[serde(default)]
        after: Option<String>,
    },
    /// The records under `prefix` after `after`, up to `until` (included).
    Keys {
        prefix: String,
        #[serde(default)]
        after: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        until: Option<String>,
        /// A continuation token for an empty page that was not the last;
        /// only within a run.
        #[serde(skip)]
        token: Option<String>,
    },
}

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
}

impl Checkpoint {
    fn new_pass(previous_pass: Option<DateTime<Utc>>, pass: DateTime<Utc>) -> Self {
        Checkpoint {
            previous_pass,
            pass,
            complete: false,
            ranges: vec![Range::Scopes { after: None }],
            running_until: None,
        }
    }
}

/// What one unit of a pass (a page of one range) left behind.
struct Unit {
    tally: SweepSummary,
    /// The ranges to go on with in this run (none: the range is done).
    next: Vec<Range>,
    /// The ranges that wait for the next run (after a retryable failure).
    wait: Vec<Range>,
}

impl Engine {
    /// Reads the record at `key` and does what its state needs (CONTRACT.md
    /// section 6): finish a stale `creating` record, delete an
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
    fn request_deadline(&self, deadline: Option<DateTime<Utc>>) -> DateTime<Utc> {
        let d = self.now() + self.settings.operation_timeout;
        deadline.map_or(d, |run| d.min(run))
    }

    async fn sweep_record_by(
        &self,
        key: &str,
        dry_run: bool,
        op_deadline: DateTime<Utc>,
    ) -> RecordOutcome {
        let obj = match self.call(op_deadline, || self.store.get(key)).await {
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
                .call(op_deadline, || self.store.delete(key, Some(&meta.etag)))
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
        if latest >= finish_deadline
            && !self
                .settings
                .has_bug(crate::planted::Bug::IgnoreFinishDeadline)
        {
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

    /// Does the pass with window `(previous, pass]` read a record last
    /// written at `last_modified`? See the module docs.
    fn due(
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
        let (saved, mut etag) = match self
            .call(self.request_deadline(opts.deadline), || {
                self.store.get(CHECKPOINT_KEY)
            })
            .await
        {
            Ok(o) => (
                serde_json::from_slice::<Checkpoint>(&o.body).ok(),
                Some(o.meta.etag),
            ),
            Err(Failure::Store(StoreError::NotFound)) => (None, None),
            Err(e) => return Err(e.into()),
        };
        // One clock reading, in S3's time (the records' LastModified is):
        // the new pass's instant, and the time the lease of another run is
        // judged against. A pass whose clock is off writes no checkpoint.
        let local_start = self.now();
        let started = self.s3_earliest()?;
        if let Some(c) = &saved
            && c.running_until.is_some_and(|u| u > started)
        {
            summary.busy = true;
            return Ok(summary);
        }
        let mut cp = match saved {
            Some(c) if !c.complete && !c.ranges.is_empty() => {
                summary.resumed = true;
                c
            }
            // An unfinished pass saved without ranges (by the sweeper before
            // ranges): its window again from the start, so nothing it had
            // left is missed.
            Some(c) if !c.complete => {
                summary.resumed = true;
                Checkpoint::new_pass(c.previous_pass, c.pass)
            }
            Some(c) => Checkpoint::new_pass(Some(c.pass), started),
            None => Checkpoint::new_pass(None, started),
        };

        if !opts.dry_run {
            // Claim the pass: if another run wrote the checkpoint since we
            // read it, that run has it.
            let run = opts
                .deadline
                .map_or(Duration::minutes(15), |d| d - local_start);
            let lease = started + run + self.settings.operation_timeout;
            cp.running_until = Some(lease);
            match self
                .write_checkpoint(&cp, etag.as_ref(), self.request_deadline(opts.deadline))
                .await
            {
                Ok(e) => etag = Some(e),
                Err(Failure::Store(StoreError::PreconditionFailed)) => {
                    summary.busy = true;
                    return Ok(summary);
                }
                Err(e) => return Err(e.into()),
            }
        }

        let (window_from, window_to) = (cp.previous_pass, cp.pass);
        let mut todo: VecDeque<Range> = std::mem::take(&mut cp.ranges).into();
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
                let left = opts.max_records.map_or(PAGE, |m| {
                    (m as u64 - summary.scanned).min(PAGE as u64) as usize
                });
                running.push(self.sweep_unit(range, (window_from, window_to), left, opts));
            }
            let Some(unit) = running.next().await else {
                break;
            };
            summary.add(&unit.tally);
            later.extend(unit.wait);
            todo.extend(unit.next);
        }
        later.extend(todo);
        summary.complete = later.is_empty();
        cp.ranges = later;
        cp.complete = summary.complete;
        cp.running_until = None;
        if !opts.dry_run {
            match self
                // The place is saved even past the run's deadline: that is
                // what the stop margin is for.
                .write_checkpoint(&cp, etag.as_ref(), self.request_deadline(None))
                .await
            {
                Ok(_) => {}
                // Taken over after our lease ran out: its place wins.
                Err(Failure::Store(StoreError::PreconditionFailed | StoreError::NotFound)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(summary)
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
        let body = bytes::Bytes::from(serde_json::to_vec(cp).unwrap_or_default());
        self.call(deadline, || {
            self.store.put(CHECKPOINT_KEY, body.clone(), cond.clone())
        })
        .await
        .map(|p| p.etag)
    }

    /// Lists one page of `range` and reads its due records; returns what to
    /// go on with.
    async fn sweep_unit(
        &self,
        range: Range,
        window: (Option<DateTime<Utc>>, DateTime<Utc>),
        limit: usize,
        opts: &SweepOptions,
    ) -> Unit {
        let mut tally = SweepSummary::default();
        // No request starts past the run's deadline: no read, listing or
        // finish runs into the stop margin but for one attempt's timeout.
        let deadline = || self.request_deadline(opts.deadline);
        match range {
            Range::Scopes { after } => {
                tally.lists += 1;
                let page = match self
                    .call(deadline(), || {
                        self.store.list(RECORDS_PREFIX, after.as_deref(), None, 1)
                    })
                    .await
                {
                    Ok(p) => p,
                    Err(e) => return self.unit_failed(Range::Scopes { after }, e, tally),
                };
                let Some(first) = page.objects.first() else {
                    return Unit {
                        tally,
                        next: vec![],
                        wait: vec![],
                    };
                };
                let rest = &first.key[RECORDS_PREFIX.len()..];
                let next = match rest.split_once('/') {
                    Some((scope, _)) => {
                        let prefix = format!("{RECORDS_PREFIX}{scope}/");
                        // Past every key of this scope: '/' is followed by
                        // nothing above U+10FFFF.
                        let skip = format!("{prefix}\u{10FFFF}");
                        let skip = if skip.as_str() > first.key.as_str() {
                            skip
                        } else {
                            first.key.clone()
                        };
                        vec![
                            Range::Keys {
                                prefix,
                                after: None,
                                until: None,
                                token: None,
                            },
                            Range::Scopes { after: Some(skip) },
                        ]
                    }
                    // A key right under idempotency/ is not a record of the
                    // layout: step over it.
                    None => vec![Range::Scopes {
                        after: Some(first.key.clone()),
                    }],
                };
                Unit {
                    tally,
                    next,
                    wait: vec![],
                }
            }
            Range::Keys {
                prefix,
                after,
                until,
                token,
            } => {
                tally.lists += 1;
                let page = match self
                    .call(deadline(), || {
                        self.store
                            .list(&prefix, after.as_deref(), token.clone(), limit)
                    })
                    .await
                {
                    Ok(p) => p,
                    Err(e) => {
                        let range = Range::Keys {
                            prefix,
                            after,
                            until,
                            token: None,
                        };
                        return self.unit_failed(range, e, tally);
                    }
                };
                // Keys past the range's upper end belong to other ranges.
                let in_range = |k: &str| until.as_deref().is_none_or(|u| k <= u);
                let objects: Vec<&ObjectMeta> =
                    page.objects.iter().filter(|m| in_range(&m.key)).collect();
                let ended = page.next.is_none() || objects.len() < page.objects.len();
                tally.scanned += objects.len() as u64;
                let last = objects.last().map(|m| m.key.clone());

                // What comes after this page: nothing, the same range from
                // its last key (or its token, after an empty page), or, after
                // a full page, the rest split by the next hex digit.
                let mut next = match (&last, ended) {
                    (_, true) => vec![],
                    (None, false) => vec![Range::Keys {
                        prefix: prefix.clone(),
                        after: after.clone(),
                        until: until.clone(),
                        token: page.next.clone(),
                    }],
                    (Some(last), false) if until.is_none() && objects.len() >= PAGE => {
                        split(&prefix, last.clone())
                    }
                    (Some(last), false) => vec![Range::Keys {
                        prefix: prefix.clone(),
                        after: Some(last.clone()),
                        until: until.clone(),
                        token: None,
                    }],
                };

                let due: Vec<&ObjectMeta> = objects
                    .iter()
                    .copied()
                    .filter(|m| self.due(m.last_modified, window.0, window.1))
                    .collect();
                // Read the due records side by side, a chunk at a time, none
                // started past the deadline; keep the place before the first
                // one that has to be tried again.
                let mut stop_at: Option<&str> = None;
                for chunk in due.chunks(READS_AT_ONCE) {
                    if opts.deadline.is_some_and(|d| self.now() >= d) {
                        stop_at = chunk.first().map(|m| m.key.as_str());
                        break;
                    }
                    let outcomes = futures::future::join_all(
                        chunk
                            .iter()
                            .map(|m| self.sweep_record(&m.key, opts.dry_run, opts.deadline)),
                    )
                    .await;
                    for (m, o) in chunk.iter().zip(&outcomes) {
                        let o = match o {
                            // A pass leaves young records to their submit and
                            // their event.
                            RecordOutcome::Early => &RecordOutcome::Nothing,
                            o => o,
                        };
                        o.tally(&mut tally);
                        if stop_at.is_none() && o.retry() {
                            stop_at = Some(m.key.as_str());
                        }
                    }
                    if stop_at.is_some() {
                        break;
                    }
                }
                let mut wait = Vec::new();
                if let Some(failed) = stop_at {
                    // This page goes on next run after the last listed key
                    // before the record to try again: up to the page's last
                    // key when the rest was split (the split ranges go on
                    // now), else with the rest of the range.
                    let resume = objects
                        .iter()
                        .take_while(|m| m.key.as_str() < failed)
                        .last()
                        .map(|m| m.key.clone())
                        .or(after);
                    let rest_is_split = next.len() > 1;
                    wait.push(Range::Keys {
                        prefix: prefix.clone(),
                        after: resume,
                        until: if rest_is_split {
                            last.clone()
                        } else {
                            until.clone()
                        },
                        token: None,
                    });
                    if !rest_is_split {
                        next.clear();
                    }
                }
                Unit { tally, next, wait }
            }
        }
    }

    fn unit_failed(&self, range: Range, e: Failure, tally: SweepSummary) -> Unit {
        let e = SubmitError::from(e);
        tracing::warn!(error = %e, "sweep could not list a range; it goes on next run");
        let mut tally = tally;
        tally.errors += 1;
        Unit {
            tally,
            next: vec![],
            wait: vec![range],
        }
    }
}

/// The rest of a range after its full page ending at `last`: split by the
/// next hex digit of the record hash when it can still split, so that a
/// large scope is listed by many listings at once.
fn split(prefix: &str, last: String) -> Vec<Range> {
    let scope_end = prefix[RECORDS_PREFIX.len()..]
        .find('/')
        .map(|i| RECORDS_PREFIX.len() + i + 1);
    let digits = scope_end.map_or(usize::MAX, |e| prefix.len() - e);
    let next_char = last.as_bytes().get(prefix.len()).copied();
    match next_char {
        Some(c) if digits < MAX_SPLIT_DIGITS && HEX.contains(&c) => {
            let mut out = vec![Range::Keys {
                prefix: format!("{prefix}{}", c as char),
                after: Some(last),
                until: None,
                token: None,
            }];
            out.extend(HEX.iter().filter(|d| **d > c).map(|d| Range::Keys {
                prefix: format!("{prefix}{}", *d as char),
                after: None,
                until: None,
                token: None,
            }));
            out
        }
        _ => vec![Range::Keys {
            prefix: prefix.to_owned(),
            after: Some(last),
            until: None,
            token: None,
        }],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(r: &[Range]) -> Vec<(String, Option<String>)> {
        r.iter()
            .map(|r| match r {
                Range::Keys { prefix, after, .. } => (prefix.clone(), after.clone()),
                Range::Scopes { .. } => panic!("a scope range"),
            })
            .collect()
    }

    #[test]
    fn a_full_range_splits_by_the_next_hex_digit_after_its_place() {
        let r = split("idempotency/t/", "idempotency/t/c3ff.json".into());
        let k = keys(&r);
        assert_eq!(
            k[0],
            (
                "idempotency/t/c".into(),
                Some("idempotency/t/c3ff.json".into())
            )
        );
        let rest: Vec<_> = k[1..]
            .iter()
            .map(|(p, a)| (p.as_str(), a.is_none()))
            .collect();
        assert_eq!(
            rest,
            [
                ("idempotency/t/d", true),
                ("idempotency/t/e", true),
                ("idempotency/t/f", true)
            ]
        );
    }

    #[test]
    fn a_range_two_digits_deep_still_splits_by_its_third() {
        let r = split("idempotency/a.b/ab", "idempotency/a.b/abe1.json".into());
        assert_eq!(
            keys(&r),
            [
                (
                    "idempotency/a.b/abe".into(),
                    Some("idempotency/a.b/abe1.json".into())
                ),
                ("idempotency/a.b/abf".into(), None)
            ]
        );
    }

    #[test]
    fn a_range_three_digits_deep_goes_on_without_splitting() {
        let r = split("idempotency/t/abc", "idempotency/t/abcd.json".into());
        assert_eq!(
            keys(&r),
            [(
                "idempotency/t/abc".into(),
                Some("idempotency/t/abcd.json".into())
            )]
        );
        // A key that is not a hex name does not split either.
        let r = split("idempotency/t/", "idempotency/t/README".into());
        assert_eq!(keys(&r).len(), 1);
    }
}
