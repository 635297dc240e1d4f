//! Orphan payloads: `payloads/{task_id}/input.json` objects that no task
//! names. A submit that offloads its input writes the payload beside its
//! record claim; when the claim loses (the key is another record's) it
//! deletes the payload beside its answer, but a process that dies in
//! between leaves it behind, and a record whose task was never written
//! before its finish deadline leaves its payload too. The scheduled pass
//! lists `payloads/` once its records are done and deletes each input
//! payload whose task object is not in the bucket, once no task can be
//! written for it any more (docs/protocol.md, "Offloaded inputs"):
//!
//! - a payload aged up to a day and an hour past that age is checked by
//!   HEADs of its task, ours first (the prompt path: a lost claim's payload
//!   goes the next day);
//! - every payload, whatever its age, is checked once a month: each day's
//!   pass takes a slice of the task ids (their first two hex digits, 256
//!   slices, about 1/30 of them a day by the day's number) and checks the
//!   payloads of those ids against the tasks listed under every shard
//!   length, in memory that does not grow with the bucket
//!   (`payload_tasks.rs`: a streaming merge under `LIST_ORDER=bytes`,
//!   bounded rounds under `any`). LISTs only (1000 keys each), and no
//!   checkpoint: a day that is missed is made up 30 days later.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};

use chrono::{DateTime, Duration, Utc};
use futures::StreamExt;
use uuid::Uuid;

use super::payload_tasks::{
    CANDIDATES_AT_ONCE, SHARD_LENGTHS, TaskMerge, slice_hex, slice_of, slice_task_prefixes,
};
use super::{PAGE, RANGES_AT_ONCE, READS_AT_ONCE, SweepOptions, SweepSummary};
use crate::config::ListOrder;
use crate::protocol::engine::{Engine, Failure};
use crate::protocol::error::SubmitError;
use crate::store::{ObjectMeta, StoreError};

/// Where offloaded inputs are.
pub const PAYLOADS_PREFIX: &str = "payloads/";
/// Where task objects are.
pub(super) const TASKS_PREFIX: &str = "tasks/";

/// How long past [`Engine::orphan_after`] a payload is checked by HEADs:
/// a day and an hour, so that each daily pass's window meets the next one's
/// and a payload is HEADed by one pass (two, where two passes are less than
/// an hour more than a day apart). One that a pass missed (a pass that did
/// not complete) goes on its slice's day instead. Not a week: at 10 million
/// payloads of 30-day lives, a week of daily HEADs was about 9 million
/// HEADs a day ($3.7), against one for each new payload.
const RECHECK_FOR: Duration = Duration::hours(25);
/// The slices of the task ids: their first byte (two hex digits).
pub const PAYLOAD_SLICES: u32 = 256;
/// Every slice is taken once in this many consecutive days.
pub const PAYLOAD_CYCLE_DAYS: i64 = 30;

/// The task id of an input payload's key; `None` for anything else
/// (buquet's `output.json`, objects of other writers).
fn input_payload_id(key: &str) -> Option<Uuid> {
    let rest = key.strip_prefix(PAYLOADS_PREFIX)?;
    let (id, file) = rest.split_once('/')?;
    // Only our own spelling (lowercase, hyphenated): another writer's key
    // that merely parses as a UUID is not a payload of ours.
    let parsed = Uuid::parse_str(id).ok()?;
    (file == "input.json" && parsed.hyphenated().to_string() == id).then_some(parsed)
}

/// The slices that the pass beginning at `at` (S3's time) takes: the day's
/// number, modulo [`PAYLOAD_CYCLE_DAYS`], picks a run of consecutive ones
/// (8 or 9), so that the cycle's days take each slice exactly once.
pub fn payload_slices(at: DateTime<Utc>) -> Range<u32> {
    let day = at
        .timestamp()
        .div_euclid(86_400)
        .rem_euclid(PAYLOAD_CYCLE_DAYS) as u32;
    let cycle = PAYLOAD_CYCLE_DAYS as u32;
    day * PAYLOAD_SLICES / cycle..(day + 1) * PAYLOAD_SLICES / cycle
}

/// What one pass judges payloads by.
struct Judge {
    /// S3's time at the pass's start.
    now: DateTime<Utc>,
    /// The HEAD path's ages: from the orphan age, for [`RECHECK_FOR`].
    from: Duration,
    to: Duration,
    /// The day's slices.
    slices: Range<u32>,
    /// The folders right under `tasks/` and the LISTs they took, listed
    /// once a pass when the first payload to judge by its tasks comes
    /// (`None`: the deadline came first).
    folders: tokio::sync::OnceCell<Option<(Vec<String>, u64)>>,
    /// Whether those LISTs are counted yet.
    counted: AtomicBool,
}

/// How a page's payloads of the day's slices are checked against their
/// tasks (`payload_tasks.rs`).
enum Against<'a> {
    /// In byte order: the slice's task cursors, made at the first payload
    /// that needs them.
    Merge(&'a mut Option<TaskMerge>),
    /// In any order: their ids, held for a listing of the tasks.
    Collect(&'a mut Vec<Uuid>),
}

impl Engine {
    /// The age at which a payload with no task is an orphan: a task can be
    /// written until its record's finish deadline (the record is written
    /// with its payload, or before a finisher writes the payload) and land
    /// up to 15 minutes after it; an operation's length of slack on top.
    pub(super) fn orphan_after(&self) -> Duration {
        self.settings.finish_window
            + self.settings.late_write_margin
            + self.settings.operation_timeout
    }

    /// Deletes the input payloads older than [`Engine::orphan_after`] at
    /// `now` (S3's time) whose task object is not in the bucket under any
    /// shard length: those up to a day and an hour older by HEADs, those of the day's
    /// slices ([`payload_slices`]) by the day's listing of their tasks.
    /// Counts them in `payloads_deleted` (dry run: counted, not deleted).
    /// No request starts at or after the run's deadline; a payload left
    /// then is the next pass's.
    pub(super) async fn sweep_payloads(
        &self,
        opts: &SweepOptions,
        now: DateTime<Utc>,
        summary: &mut SweepSummary,
    ) -> Result<(), SubmitError> {
        let judge = Judge {
            now,
            from: self.orphan_after(),
            to: self.orphan_after() + RECHECK_FOR,
            slices: payload_slices(now),
            folders: tokio::sync::OnceCell::new(),
            counted: AtomicBool::new(false),
        };
        if self.past(opts) {
            self.cut_short();
            return Ok(());
        }
        // One page first: a bucket of up to a thousand payloads (most have
        // none) costs one LIST, and its tasks are listed only if one of the
        // day's slices has a payload old enough to judge.
        let first = self
            .with_retries(self.request_deadline(opts.deadline), || {
                self.store.list(PAYLOADS_PREFIX, None, None, PAGE)
            })
            .await?;
        summary.lists += 1;
        let mut held: Vec<Uuid> = Vec::new();
        let next = first.next.clone();
        if next.is_none() || self.settings.list_order == ListOrder::Any {
            self.judge_page(
                first.objects,
                &judge,
                opts,
                summary,
                Against::Collect(&mut held),
            )
            .await?;
        }
        match (next, self.settings.list_order) {
            (None, _) => {}
            // More than a page: the 256 slices' folders side by side, as
            // the records' ranges are (10,000 pages at 10 million payloads
            // one after the other would outlast a run), each merged with
            // its slice's tasks.
            (Some(_), ListOrder::Bytes) => {
                let tallies: Vec<Result<SweepSummary, SubmitError>> =
                    futures::stream::iter(0..PAYLOAD_SLICES)
                        .map(|slice| {
                            let prefix = format!("{PAYLOADS_PREFIX}{}", slice_hex(slice));
                            let judge = &judge;
                            async move {
                                let mut tally = SweepSummary::default();
                                let mut merge = None;
                                let against = Against::Merge(&mut merge);
                                self.judge_prefix(&prefix, None, judge, opts, &mut tally, against)
                                    .await
                                    .map(|()| tally)
                            }
                        })
                        .buffer_unordered(RANGES_AT_ONCE)
                        .collect()
                        .await;
                for t in tallies {
                    summary.add(&t?);
                }
            }
            // Prefixes that end in `/` only: the folder page by page.
            (Some(next), ListOrder::Any) => {
                let against = Against::Collect(&mut held);
                self.judge_prefix(PAYLOADS_PREFIX, Some(next), &judge, opts, summary, against)
                    .await?;
            }
        }
        self.settle(&mut held, &judge, opts, summary).await
    }

    /// Lists `prefix` from `page` on and judges each page.
    async fn judge_prefix(
        &self,
        prefix: &str,
        mut page: Option<String>,
        judge: &Judge,
        opts: &SweepOptions,
        summary: &mut SweepSummary,
        mut against: Against<'_>,
    ) -> Result<(), SubmitError> {
        loop {
            if self.past(opts) {
                self.cut_short();
                return Ok(());
            }
            let listed = self
                .with_retries(self.request_deadline(opts.deadline), || {
                    self.store.list(prefix, None, page.clone(), PAGE)
                })
                .await?;
            summary.lists += 1;
            let against = match &mut against {
                Against::Merge(m) => Against::Merge(m),
                Against::Collect(c) => Against::Collect(c),
            };
            self.judge_page(listed.objects, judge, opts, summary, against)
                .await?;
            match listed.next {
                Some(n) => page = Some(n),
                None => return Ok(()),
            }
        }
    }

    /// One page of `payloads/`: the payloads of the day's slices old enough
    /// to judge are checked against their tasks (`against`), and those
    /// named by no task, with the other recent ones, are each confirmed by
    /// HEADs of its task before it is deleted (a listing can miss a task
    /// that moves between shards as buquet's shard migration moves it:
    /// copied, then deleted).
    async fn judge_page(
        &self,
        objects: Vec<ObjectMeta>,
        judge: &Judge,
        opts: &SweepOptions,
        summary: &mut SweepSummary,
        against: Against<'_>,
    ) -> Result<(), SubmitError> {
        let mut sliced: Vec<(ObjectMeta, Uuid)> = Vec::new();
        let mut recent: Vec<(ObjectMeta, Uuid)> = Vec::new();
        for o in objects {
            let Some(id) = input_payload_id(&o.key) else {
                continue;
            };
            let age = judge.now - o.last_modified;
            if age < judge.from {
                continue;
            }
            if judge.slices.contains(&slice_of(&id)) {
                sliced.push((o, id));
            } else if age < judge.to {
                recent.push((o, id));
            }
        }
        match against {
            Against::Collect(held) => {
                held.extend(sliced.iter().map(|(_, id)| *id));
                if held.len() >= CANDIDATES_AT_ONCE {
                    self.settle(held, judge, opts, summary).await?;
                }
            }
            Against::Merge(merge) if !sliced.is_empty() => {
                let stopped = self
                    .merge_page(sliced, merge, judge, opts, summary, &mut recent)
                    .await?;
                if stopped {
                    self.cut_short();
                }
            }
            Against::Merge(_) => {}
        }
        let outcomes: Vec<Result<bool, SubmitError>> = futures::stream::iter(recent)
            .map(|(o, id)| self.sweep_payload(o, id, opts))
            .buffer_unordered(READS_AT_ONCE)
            .collect()
            .await;
        for r in outcomes {
            match r {
                Ok(true) => summary.payloads_deleted += 1,
                Ok(false) | Err(SubmitError::DeadlineExceeded) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "an input payload could not be checked");
                    summary.errors += 1;
                }
            }
        }
        Ok(())
    }

    /// The folders right under `tasks/`, listed once a pass (their LISTs
    /// counted by the first caller); `None` when the deadline came first.
    async fn task_folders<'j>(
        &self,
        judge: &'j Judge,
        opts: &SweepOptions,
        summary: &mut SweepSummary,
    ) -> Result<Option<&'j Vec<String>>, SubmitError> {
        // Any task of a payload old enough to judge was written before the
        // pass began, so it is there when the folders are listed.
        let listed = judge
            .folders
            .get_or_try_init(|| async {
                let mut tally = SweepSummary::default();
                let folders = self.folders_under(TASKS_PREFIX, opts, &mut tally).await?;
                Ok::<_, SubmitError>(folders.map(|f| (f, tally.lists)))
            })
            .await?;
        Ok(listed.as_ref().map(|(folders, lists)| {
            if !judge.counted.swap(true, Ordering::SeqCst) {
                summary.lists += lists;
            }
            folders
        }))
    }

    /// `LIST_ORDER=bytes`: merges a page's payloads of one slice (in the
    /// order of their ids) with the slice's tasks; those named by none go
    /// to `suspects`. `true` when the run's deadline cut it short.
    async fn merge_page(
        &self,
        mut sliced: Vec<(ObjectMeta, Uuid)>,
        merge: &mut Option<TaskMerge>,
        judge: &Judge,
        opts: &SweepOptions,
        summary: &mut SweepSummary,
        suspects: &mut Vec<(ObjectMeta, Uuid)>,
    ) -> Result<bool, SubmitError> {
        if merge.is_none() {
            let Some(folders) = self.task_folders(judge, opts, summary).await? else {
                return Ok(true);
            };
            let slice = slice_of(&sliced[0].1);
            let prefixes = slice_task_prefixes(folders, &(slice..slice + 1), ListOrder::Bytes);
            *merge = Some(TaskMerge::new(slice, prefixes));
        }
        let Some(merge) = merge.as_mut() else {
            return Ok(true);
        };
        // In the listing's order already on a store that lists in byte
        // order; sorted, so that a page is merged in order whatever.
        sliced.sort_by_key(|(_, id)| *id);
        for (o, id) in sliced {
            match self.merge_has(merge, id, opts, &mut summary.lists).await? {
                None => return Ok(true),
                Some(true) => {}
                Some(false) => suspects.push((o, id)),
            }
        }
        Ok(false)
    }

    /// `LIST_ORDER=any` (or a single page): the held payload ids checked
    /// against a listing of their slices' tasks, the suspects confirmed by
    /// the HEAD path; `held` is empty after.
    async fn settle(
        &self,
        held: &mut Vec<Uuid>,
        judge: &Judge,
        opts: &SweepOptions,
        summary: &mut SweepSummary,
    ) -> Result<(), SubmitError> {
        if held.is_empty() {
            return Ok(());
        }
        let mut ids = std::mem::take(held);
        ids.sort_unstable();
        ids.dedup();
        let Some(folders) = self.task_folders(judge, opts, summary).await? else {
            self.cut_short();
            return Ok(());
        };
        let prefixes = slice_task_prefixes(folders, &judge.slices, self.settings.list_order);
        let Some(found) = self.strike_listed(&ids, prefixes, opts, summary).await? else {
            self.cut_short();
            return Ok(());
        };
        let suspects: Vec<Uuid> = ids
            .iter()
            .zip(found)
            .filter(|(_, f)| !f)
            .map(|(id, _)| *id)
            .collect();
        drop(ids);
        self.judge_suspects(suspects, judge.from, judge.now, opts, summary)
            .await;
        Ok(())
    }

    /// Says that the run's deadline cut the payload check short: the next
    /// pass begins it again (the day's slices are taken by the day).
    fn cut_short(&self) {
        tracing::warn!("the run's deadline cut the payload check short; the next pass goes on");
    }

    /// The run's deadline has come: no request starts any more.
    pub(super) fn past(&self, opts: &SweepOptions) -> bool {
        opts.deadline.is_some_and(|d| self.now() >= d)
    }

    /// Every folder right under `prefix`, page by page; `None` when the
    /// run's deadline came first.
    pub(super) async fn folders_under(
        &self,
        prefix: &str,
        opts: &SweepOptions,
        summary: &mut SweepSummary,
    ) -> Result<Option<Vec<String>>, SubmitError> {
        let mut folders = Vec::new();
        let mut page: Option<String> = None;
        loop {
            if self.past(opts) {
                return Ok(None);
            }
            let dirs = self
                .with_retries(self.request_deadline(opts.deadline), || {
                    self.store.list_dirs(prefix, page.clone())
                })
                .await?;
            summary.lists += 1;
            folders.extend(dirs.prefixes);
            match dirs.next {
                Some(n) => page = Some(n),
                None => return Ok(Some(folders)),
            }
        }
    }

    /// One payload of the HEAD path: `true` if it names no task and was
    /// deleted.
    pub(super) async fn sweep_payload(
        &self,
        o: ObjectMeta,
        id: Uuid,
        opts: &SweepOptions,
    ) -> Result<bool, SubmitError> {
        let deadline = self.request_deadline(opts.deadline);
        let text = id.hyphenated().to_string();
        // Our own shard length first, the others only while none is found:
        // a payload's task is nearly always ours, so one HEAD; an orphan
        // (rare) costs all four, one after the other.
        let ours = self.settings.shard_prefix_len;
        let lengths = std::iter::once(ours).chain(SHARD_LENGTHS.filter(|n| *n != ours));
        for n in lengths {
            let key = format!("{TASKS_PREFIX}{}/{text}.json", &text[..n]);
            match self.with_retries(deadline, || self.store.head(&key)).await {
                Ok(_) => return Ok(false),
                Err(Failure::Store(StoreError::NotFound)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        tracing::info!(payload = %o.key, "an input payload that no task names: deleted");
        self.delete_orphan(&o, opts).await
    }

    /// Deletes a payload that no task names (a dry run only counts it):
    /// `true` if it is gone.
    async fn delete_orphan(
        &self,
        o: &ObjectMeta,
        opts: &SweepOptions,
    ) -> Result<bool, SubmitError> {
        if opts.dry_run {
            return Ok(true);
        }
        // If-Match what was listed, where the store honours it. Where it
        // may not (CONDITIONAL_DELETE=off), nothing rests on it: the payload
        // is older than any task write for it can land, no task names it,
        // and its key is a task id no other submit uses.
        let if_match = self.settings.conditional_delete.then_some(&o.etag);
        match self
            .with_retries(self.request_deadline(opts.deadline), || {
                self.store.delete(&o.key, if_match)
            })
            .await
        {
            Ok(()) | Err(Failure::Store(StoreError::NotFound)) => Ok(true),
            // Rewritten since (a finisher's If-None-Match cannot, so another
            // writer's): left for a later pass.
            Err(Failure::Store(StoreError::PreconditionFailed)) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_input_payloads_named_by_a_task_id_are_candidates() {
        let id = "a1b2c3d4-0000-4000-8000-000000000000";
        assert!(input_payload_id(&format!("payloads/{id}/input.json")).is_some());
        assert!(input_payload_id(&format!("payloads/{id}/output.json")).is_none());
        assert!(input_payload_id("payloads/not-a-uuid/input.json").is_none());
        assert!(input_payload_id(&format!("tasks/a/{id}.json")).is_none());
        // Another writer's spelling of a UUID is not ours.
        let upper = id.to_uppercase();
        assert!(input_payload_id(&format!("payloads/{upper}/input.json")).is_none());
        let simple = id.replace('-', "");
        assert!(input_payload_id(&format!("payloads/{simple}/input.json")).is_none());
    }

    #[test]
    fn the_days_of_a_cycle_take_every_slice_exactly_once_in_runs_of_eight_or_nine() {
        let start = DateTime::parse_from_rfc3339("2026-12-02T03:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let mut taken = vec![0; PAYLOAD_SLICES as usize];
        for day in 0..PAYLOAD_CYCLE_DAYS {
            let slices = payload_slices(start + Duration::days(day));
            assert!((8..=9).contains(&slices.len()), "{slices:?}");
            for s in slices {
                taken[s as usize] += 1;
            }
        }
        assert!(taken.iter().all(|n| *n == 1), "{taken:?}");
        // The same day's pass takes the same slices at any hour.
        assert_eq!(
            payload_slices(start),
            payload_slices(start + Duration::hours(20))
        );
    }
}
