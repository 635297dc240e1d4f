//! The sweeper (CONTRACT.md section 6): finishes interrupted submits and
//! deletes expired records.
//!
//! **Cost.** A listing gives every record's `LastModified` for free; a record
//! is only read (GET) in the pass during which its age (since its last write)
//! crosses one of a fixed set of thresholds: `STALE_CREATING_AFTER_SECONDS`
//! (to finish it if it is still `creating`), the default TTL (when most
//! records expire), and 1 h × 2^k (when records of other TTLs expire, at most
//! twice their TTL late; S3's lifecycle rule on `idempotency/` is the
//! backstop). Each pass covers the ages between the previous pass and this
//! one, so every crossing is seen exactly once, however often the sweeper runs:
//! a record is read at most `2 + 15` times over a life of up to 365 days.
//!
//! **Place.** A pass that runs out of time stops, and records where it stopped
//! in `sweeper/checkpoint.json` (outside `idempotency/`); the next run goes on
//! from there, judging the remaining records up to its own start. The next
//! pass starts its window where the stopped pass started, so the records
//! handled before the stop miss no crossing either (they wait one run longer).

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

use super::record::{Record, RecordStatus};
use super::submit::{Engine, Failure, SubmitError};
use crate::store::{ObjectMeta, PutMode, StoreError};

/// How many records one sweep reads (and finishes or deletes) at once.
const SWEEP_CONCURRENCY: usize = 16;

/// Where the sweeper keeps its place.
pub const CHECKPOINT_KEY: &str = "sweeper/checkpoint.json";
const PREFIX: &str = "idempotency/";

/// How one sweep runs.
#[derive(Debug, Clone, Default)]
pub struct SweepOptions {
    /// Report what would be done; change nothing (not even the checkpoint).
    pub dry_run: bool,
    /// Stop before this time (by the engine's clock), keeping the place.
    pub deadline: Option<DateTime<Utc>>,
    /// Stop after this many listed records (tests, small batches).
    pub max_records: Option<usize>,
}

/// What a sweep did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SweepSummary {
    /// Records listed.
    pub scanned: u64,
    /// Interrupted submits whose task the sweeper wrote.
    pub finished: u64,
    /// Interrupted submits whose task was there: record turned `ready`.
    pub promoted: u64,
    pub expired_deleted: u64,
    /// Records that could not be handled: `creating` past the finish
    /// deadline, corrupt, or storage failures.
    pub errors: u64,
    /// The pass reached the end of the listing.
    pub complete: bool,
    pub dry_run: bool,
    /// Records read (GET) in this run.
    #[serde(skip)]
    pub reads: u64,
    /// This run went on with a pass that an earlier run had to stop.
    #[serde(skip)]
    pub resumed: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Checkpoint {
    /// When the pass before this one started (`None`: never).
    #[serde(default)]
    previous_pass: Option<DateTime<Utc>>,
    /// When this pass started.
    pass: DateTime<Utc>,
    /// The last record handled in this pass.
    #[serde(default)]
    cursor: Option<String>,
    /// The pass reached the end of the listing.
    #[serde(default)]
    complete: bool,
}

/// What reading a record led to.
enum Handled {
    Done,
    /// A retryable storage failure: stop here and retry next run.
    Stop,
}

impl Engine {
    /// The ages (since a record's last write) at which the sweeper reads it.
    fn thresholds(&self) -> Vec<Duration> {
        let mut t = vec![
            self.settings.stale_creating_after,
            self.settings.default_ttl,
        ];
        t.extend((0..15).map(|k| Duration::hours(1 << k)));
        t
    }

    /// Does the record's age cross a threshold in the window `(previous, pass]`?
    fn due(
        &self,
        last_modified: DateTime<Utc>,
        previous: Option<DateTime<Utc>>,
        pass: DateTime<Utc>,
    ) -> bool {
        let now_age = pass - last_modified;
        let prev_age = previous.map(|p| p - last_modified);
        self.thresholds()
            .into_iter()
            .any(|t| t <= now_age && prev_age.is_none_or(|p| p < t))
    }

    /// One sweep: see the module docs.
    pub async fn sweep(&self, opts: &SweepOptions) -> Result<SweepSummary, SubmitError> {
        let op_deadline = |e: &Engine| e.now() + e.settings.operation_timeout;
        let mut summary = SweepSummary {
            dry_run: opts.dry_run,
            ..SweepSummary::default()
        };
        let (saved, saved_etag) = match self
            .call(op_deadline(self), || self.store.get(CHECKPOINT_KEY))
            .await
        {
            Ok(o) => (
                serde_json::from_slice::<Checkpoint>(&o.body).ok(),
                Some(o.meta.etag),
            ),
            Err(Failure::Store(StoreError::NotFound)) => (None, None),
            Err(e) => return Err(e.into()),
        };
        let run_started = self.now();
        summary.resumed = saved.as_ref().is_some_and(|c| !c.complete);
        let mut cp = match saved {
            // An unfinished pass: go on with its window.
            Some(c) if !c.complete => c,
            Some(c) => Checkpoint {
                previous_pass: Some(c.pass),
                pass: self.now(),
                cursor: None,
                complete: false,
            },
            None => Checkpoint {
                previous_pass: None,
                pass: self.now(),
                cursor: None,
                complete: false,
            },
        };

        let mut stopped = false;
        'pages: loop {
            let page = self
                .call(op_deadline(self), || {
                    self.store.list(PREFIX, cp.cursor.as_deref(), None, 1000)
                })
                .await?;
            let mut next = 0;
            while next < page.objects.len() {
                if opts.deadline.is_some_and(|d| self.now() >= d) {
                    stopped = true;
                    break 'pages;
                }
                // The next chunk: up to SWEEP_CONCURRENCY records to read,
                // with the records between them that are not due.
                let mut chunk = Vec::new();
                let mut reads = 0;
                while next < page.objects.len() && reads < SWEEP_CONCURRENCY {
                    if opts
                        .max_records
                        .is_some_and(|m| summary.scanned + chunk.len() as u64 >= m as u64)
                    {
                        break;
                    }
                    let meta = &page.objects[next];
                    // A resumed pass judges its remaining records up to now,
                    // so a record that crossed a threshold while the pass was
                    // stopped is not left for the pass after; the pass keeps
                    // its start as the next pass's lower bound, so the records
                    // it handled before it stopped miss nothing either.
                    let due = self.due(meta.last_modified, cp.previous_pass, run_started);
                    reads += usize::from(due);
                    chunk.push((meta, due));
                    next += 1;
                }
                if chunk.is_empty() {
                    stopped = true;
                    break 'pages;
                }
                summary.scanned += chunk.len() as u64;
                let results =
                    futures::future::join_all(chunk.iter().map(|(meta, due)| async move {
                        if *due {
                            Some(self.sweep_record(meta, opts.dry_run).await)
                        } else {
                            None
                        }
                    }))
                    .await;
                // Everything done counts; the place is kept before the first
                // record that has to be tried again.
                let mut stop_here = false;
                for ((meta, _), result) in chunk.iter().zip(results) {
                    if let Some((tally, handled)) = result {
                        summary.reads += 1;
                        summary.finished += tally.finished;
                        summary.promoted += tally.promoted;
                        summary.expired_deleted += tally.expired_deleted;
                        summary.errors += tally.errors;
                        stop_here |= matches!(handled, Handled::Stop);
                    }
                    if !stop_here {
                        cp.cursor = Some(meta.key.clone());
                    }
                }
                if stop_here {
                    stopped = true;
                    break 'pages;
                }
            }
            if page.next.is_none() || page.objects.is_empty() {
                break;
            }
        }
        summary.complete = !stopped;
        cp.complete = !stopped;
        if cp.complete {
            cp.cursor = None;
        }
        if !opts.dry_run {
            // If another sweeper wrote the checkpoint since, its place wins.
            let cond = match saved_etag {
                Some(e) => PutMode::Update(e),
                None => PutMode::Create,
            };
            let body = bytes::Bytes::from(serde_json::to_vec(&cp).unwrap_or_default());
            match self
                .call(op_deadline(self), || {
                    self.store.put(CHECKPOINT_KEY, body.clone(), cond.clone())
                })
                .await
            {
                Ok(_)
                | Err(Failure::Store(StoreError::PreconditionFailed | StoreError::NotFound)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(summary)
    }

    /// Reads one record and does what it needs; what it did, and whether the
    /// pass must stop here.
    async fn sweep_record(&self, listed: &ObjectMeta, dry_run: bool) -> (SweepSummary, Handled) {
        let mut tally = SweepSummary::default();
        let handled = self.handle_record(listed, dry_run, &mut tally).await;
        (tally, handled)
    }

    async fn handle_record(
        &self,
        listed: &ObjectMeta,
        dry_run: bool,
        s: &mut SweepSummary,
    ) -> Handled {
        let op_deadline = self.now() + self.settings.operation_timeout;
        let key = listed.key.as_str();
        let obj = match self.call(op_deadline, || self.store.get(key)).await {
            Ok(o) => o,
            Err(Failure::Store(StoreError::NotFound)) => return Handled::Done,
            Err(e) => return self.failed(key, SubmitError::from(e), s),
        };
        let rec = match Record::parse(&obj.body) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(record = key, error = %e, "corrupt idempotency record");
                s.errors += 1;
                return Handled::Done;
            }
        };
        let now = self.now();
        let meta = &obj.meta;
        if rec.is_expired(now) {
            // Whatever its status; only if nobody replaced it since we read it.
            if dry_run {
                s.expired_deleted += 1;
                return Handled::Done;
            }
            return match self
                .call(op_deadline, || self.store.delete(key, Some(&meta.etag)))
                .await
            {
                Ok(()) => {
                    s.expired_deleted += 1;
                    Handled::Done
                }
                Err(Failure::Store(StoreError::PreconditionFailed | StoreError::NotFound)) => {
                    Handled::Done
                }
                Err(e) => self.failed(key, SubmitError::from(e), s),
            };
        }
        if rec.status != Some(RecordStatus::Creating) {
            return Handled::Done;
        }
        let finish_deadline = meta.last_modified + self.settings.finish_window;
        if now >= finish_deadline {
            tracing::warn!(record = key, task_id = %rec.task_id, "creating record past its finish deadline");
            s.errors += 1;
            return Handled::Done;
        }
        if now - meta.last_modified < self.settings.stale_creating_after {
            return Handled::Done;
        }
        if dry_run {
            s.finished += 1;
            return Handled::Done;
        }
        match self
            .finish(key, &rec, &meta.etag, finish_deadline, op_deadline)
            .await
        {
            Ok(true) => s.finished += 1,
            Ok(false) => s.promoted += 1,
            Err(e) => return self.failed(key, e, s),
        }
        Handled::Done
    }

    fn failed(&self, key: &str, e: SubmitError, s: &mut SweepSummary) -> Handled {
        tracing::warn!(record = key, error = %e, "sweep could not handle a record");
        s.errors += 1;
        if e.is_retryable() && !matches!(e, SubmitError::Undetermined { .. }) {
            Handled::Stop
        } else {
            Handled::Done
        }
    }
}
