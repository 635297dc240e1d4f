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
//! - a payload whose age crossed that age since the last complete check
//!   (and an hour more) is checked by HEADs of its task, ours first (the
//!   prompt path: a lost claim's payload goes at the next pass);
//! - every payload, whatever its age, is checked once a month: each pass
//!   takes the next slices of the task ids (their first two hex digits, 256
//!   slices) from the checkpoint's cursor, as many as its time since the
//!   last check is of 30 days ([`PayloadPlan`]), and checks the payloads of
//!   those ids against the tasks listed under every shard length, in memory
//!   that does not grow with the bucket (`payload_tasks.rs`: a streaming
//!   merge under `LIST_ORDER=bytes`, bounded rounds under `any`). LISTs only
//!   (1000 keys each); the cursor moves on only when the check is complete,
//!   so a pass cut short or missed is made up by the next one.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};

use chrono::{DateTime, Duration, Utc};
use futures::StreamExt;
use uuid::Uuid;

use super::payload_tasks::{
    CANDIDATES_AT_ONCE, PAYLOADS_PREFIX, SHARD_LENGTHS, TASKS_PREFIX, TaskMerge, slice_of,
    slice_task_prefixes, tally_payloads,
};
use super::{PAGE, READS_AT_ONCE, SweepOptions, SweepSummary};
use crate::config::ListOrder;
use crate::protocol::engine::{Engine, Failure};
use crate::protocol::error::SubmitError;
use crate::store::{ObjectMeta, StoreError};

/// How long past [`Engine::payload_orphan_after`] a payload is checked by HEADs:
/// a day and an hour, so that each daily pass's window meets the next one's
/// and a payload is HEADed by one pass (two, where two passes are less than
/// an hour more than a day apart). One that a pass missed (a pass that did
/// not complete) goes on its slice's day instead. Not a week: at 10 million
/// payloads of 30-day lives, a week of daily HEADs was about 9 million
/// HEADs a day ($3.7), against one for each new payload.
const RECHECK_FOR: Duration = Duration::hours(25);
/// The slices of the task ids: their first byte (two hex digits).
pub const PAYLOAD_SLICES: u32 = 256;
/// Every slice is taken once in this many days, at any schedule
/// ([`PayloadPlan::after`]).
pub const PAYLOAD_CYCLE_DAYS: i64 = 30;

/// The task id of an input payload's key; `None` for anything else
/// (buquet's `output.json`, objects of other writers).
pub(super) fn input_payload_id(key: &str) -> Option<Uuid> {
    let rest = key.strip_prefix(PAYLOADS_PREFIX)?;
    let (id, file) = rest.split_once('/')?;
    // Only our own spelling (lowercase, hyphenated): another writer's key
    // that merely parses as a UUID is not a payload of ours.
    let parsed = Uuid::parse_str(id).ok()?;
    (file == "input.json" && parsed.hyphenated().to_string() == id).then_some(parsed)
}

/// Which payloads one pass's check takes: the slices of task ids its
/// listing joins (from the checkpoint's cursor), and how far past the orphan
/// age its HEADs reach. By cursor, not by calendar, so that the check is
/// right at any schedule: hourly, daily, after missed days, or twice in a
/// minute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PayloadPlan {
    /// The slices the listing takes.
    pub slices: Range<u32>,
    /// Payloads aged from the orphan age up to this much more are checked
    /// by HEADs.
    pub recheck_for: Duration,
}

impl PayloadPlan {
    /// The check at `now` (S3's time) whose cursor is `cursor` (the next
    /// slice), after the last complete check at `last`: as many slices as
    /// the time since `last` is of [`PAYLOAD_CYCLE_DAYS`] (at least one, a
    /// day's worth for a first check, up to the end of the slices: the next
    /// check goes on from the first), so that every slice is taken once in
    /// each cycle however often passes run; HEADs over the ages that crossed
    /// the orphan age since `last`, and an hour more (at most a cycle: older
    /// ones are the slices' to find).
    pub fn after(cursor: u32, last: Option<DateTime<Utc>>, now: DateTime<Utc>) -> Self {
        let cycle = Duration::days(PAYLOAD_CYCLE_DAYS);
        let since = last.map_or(Duration::days(1), |l| {
            (now - l).clamp(Duration::zero(), cycle)
        });
        let share =
            (i64::from(PAYLOAD_SLICES) * since.num_seconds()).div_euclid(cycle.num_seconds());
        let n = (share as u32 + 1).clamp(1, PAYLOAD_SLICES);
        let start = cursor % PAYLOAD_SLICES;
        PayloadPlan {
            slices: start..(start + n).min(PAYLOAD_SLICES),
            recheck_for: last.map_or(RECHECK_FOR, |_| since + Duration::hours(1)),
        }
    }

    /// The cursor after this check, once it is complete.
    pub fn next_slice(&self) -> u32 {
        self.slices.end % PAYLOAD_SLICES
    }
}

/// What one pass's tail judges payloads by (the same in every share of it).
pub(super) struct Judge {
    /// S3's time when the tail was planned.
    pub(super) now: DateTime<Utc>,
    /// The HEAD path's ages: from the orphan age, for the plan's
    /// `recheck_for`.
    pub(super) from: Duration,
    to: Duration,
    /// The plan's slices.
    pub(super) slices: Range<u32>,
    /// The folders right under `tasks/` and the LISTs they took, listed
    /// once a pass when the first payload to judge by its tasks comes
    /// (`None`: the deadline came first).
    folders: tokio::sync::OnceCell<Option<(Vec<String>, u64)>>,
    /// Whether those LISTs are counted yet.
    counted: AtomicBool,
}

/// How a page's payloads of the plan's slices are checked against their
/// tasks (`payload_tasks.rs`).
pub(super) enum Against<'a> {
    /// In byte order: the slice's task cursors, made at the first payload
    /// that needs them.
    Merge(&'a mut Option<TaskMerge>),
    /// In any order: their ids, held for a listing of the tasks.
    Collect(&'a mut Vec<Uuid>),
    /// Not here: another item of the tail checks them (the HEAD path's
    /// listing judges only the payloads outside the plan's slices).
    Skip,
}

impl Engine {
    /// The age at which a marker with no task is an orphan: a task can be
    /// written until its record's finish deadline and land up to the
    /// late-write margin after it; an operation's length of slack on top. A
    /// marker is sent only once its record has landed (after the record
    /// PUT's answer, or by a finisher that read the record), so the record's
    /// deadline is at most the finish window after the marker.
    pub(super) fn orphan_after(&self) -> Duration {
        self.settings.finish_window
            + self.settings.late_write_margin
            + self.settings.operation_timeout
    }

    /// The age at which an input payload with no task is an orphan: a
    /// marker's ([`Engine::orphan_after`]) and one more late-write margin.
    /// The payload is sent beside its record, not after it: the record may
    /// land up to the margin after the payload did, its finish deadline
    /// counts from its landing, and a finisher's task write sent before
    /// that deadline may land up to the margin after it. Found by the
    /// exhaustive checker (tests/exhaustive/pass_worlds.rs): with one margin
    /// the pass deleted a payload 874 s before its task could still land.
    pub(super) fn payload_orphan_after(&self) -> Duration {
        self.orphan_after() + self.settings.late_write_margin
    }

    /// What the tail planned at `now` (S3's time) by `plan` judges by:
    /// payloads older than [`Engine::payload_orphan_after`] whose task object is not
    /// in the bucket under any shard length are deleted, those up to
    /// `plan.recheck_for` older by HEADs, those of the plan's slices
    /// ([`PayloadPlan`]) by a listing of their tasks (`tail.rs`).
    pub(super) fn payload_judge(&self, now: DateTime<Utc>, plan: &PayloadPlan) -> Judge {
        Judge {
            now,
            from: self.payload_orphan_after(),
            to: self.payload_orphan_after() + plan.recheck_for,
            slices: plan.slices.clone(),
            folders: tokio::sync::OnceCell::new(),
            counted: AtomicBool::new(false),
        }
    }

    /// Lists `prefix` from `page` on and judges each page: `false` when the
    /// run's deadline cut it short.
    pub(super) async fn judge_prefix(
        &self,
        prefix: &str,
        mut page: Option<String>,
        judge: &Judge,
        opts: &SweepOptions,
        summary: &mut SweepSummary,
        mut against: Against<'_>,
    ) -> Result<bool, SubmitError> {
        loop {
            if self.past(opts) {
                return Ok(false);
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
                Against::Skip => Against::Skip,
            };
            if !self
                .judge_page(listed.objects, judge, opts, summary, against)
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

    /// One page of `payloads/`: the payloads of the plan's slices old enough
    /// to judge are checked against their tasks (`against`), and those
    /// named by no task, with the other recent ones, are each confirmed by
    /// HEADs of its task before it is deleted (a listing can miss a task
    /// that moves between shards as buquet's shard migration moves it:
    /// copied, then deleted). `false` when the run's deadline cut it short.
    pub(super) async fn judge_page(
        &self,
        objects: Vec<ObjectMeta>,
        judge: &Judge,
        opts: &SweepOptions,
        summary: &mut SweepSummary,
        against: Against<'_>,
    ) -> Result<bool, SubmitError> {
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
        let mut whole = true;
        match against {
            Against::Collect(held) => {
                held.extend(sliced.iter().map(|(_, id)| *id));
                if held.len() >= CANDIDATES_AT_ONCE {
                    whole = self.settle(held, judge, opts, summary).await?;
                }
            }
            Against::Merge(merge) if !sliced.is_empty() => {
                whole = !self
                    .merge_page(sliced, merge, judge, opts, summary, &mut recent)
                    .await?;
            }
            Against::Merge(_) | Against::Skip => {}
        }
        let outcomes: Vec<Result<bool, SubmitError>> = futures::stream::iter(recent)
            .map(|(o, id)| self.sweep_payload(o, id, opts))
            .buffer_unordered(READS_AT_ONCE)
            .collect()
            .await;
        tally_payloads(outcomes, summary);
        Ok(whole && !self.past(opts))
    }

    /// The folders right under `tasks/`, listed once a pass (their LISTs
    /// counted by the first caller); `None` when the deadline came first.
    pub(super) async fn task_folders<'j>(
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
    /// the HEAD path; `held` is empty after. `false` when the run's deadline
    /// cut it short.
    pub(super) async fn settle(
        &self,
        held: &mut Vec<Uuid>,
        judge: &Judge,
        opts: &SweepOptions,
        summary: &mut SweepSummary,
    ) -> Result<bool, SubmitError> {
        if held.is_empty() {
            return Ok(true);
        }
        let mut ids = std::mem::take(held);
        ids.sort_unstable();
        ids.dedup();
        let Some(folders) = self.task_folders(judge, opts, summary).await? else {
            return Ok(false);
        };
        let prefixes = slice_task_prefixes(folders, &judge.slices, self.settings.list_order);
        let Some(found) = self.strike_listed(&ids, prefixes, opts, summary).await? else {
            return Ok(false);
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
        Ok(!self.past(opts))
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

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    /// The slices that passes `every` apart take from a first check on, by
    /// the cursor, until they have taken each slice once: how often each
    /// was taken, and the time the cycle took.
    fn cycle(every: Duration) -> (Vec<u32>, Duration) {
        let start = at("2026-12-02T03:00:00Z");
        let (mut cursor, mut last, mut now) = (0, None, start);
        let mut taken = vec![0; PAYLOAD_SLICES as usize];
        loop {
            let plan = PayloadPlan::after(cursor, last, now);
            assert!(!plan.slices.is_empty());
            for s in plan.slices.clone() {
                taken[s as usize] += 1;
            }
            (cursor, last) = (plan.next_slice(), Some(now));
            if cursor == 0 {
                return (taken, now - start);
            }
            now += every;
        }
    }

    #[test]
    fn passes_at_any_schedule_take_every_slice_once_a_cycle_within_its_thirty_days() {
        for every in [
            Duration::minutes(1),
            Duration::hours(1),
            Duration::days(1),
            Duration::days(3),
            Duration::days(45),
        ] {
            let (taken, took) = cycle(every);
            assert!(taken.iter().all(|n| *n == 1), "{every}: {taken:?}");
            assert!(
                took <= Duration::days(PAYLOAD_CYCLE_DAYS) || every > Duration::days(1),
                "{every}: a cycle of {took}"
            );
        }
        // Daily passes: 9 slices a pass (8.5 a day would do), 29 passes.
        assert_eq!(cycle(Duration::days(1)).1, Duration::days(28));
    }

    #[test]
    fn a_check_reaches_by_heads_back_to_the_last_complete_one_and_an_hour_more() {
        let now = at("2026-12-02T03:00:00Z");
        let first = PayloadPlan::after(0, None, now);
        assert_eq!((first.slices, first.recheck_for), (0..9, RECHECK_FOR));
        let hourly = PayloadPlan::after(250, Some(now - Duration::hours(1)), now);
        assert_eq!(hourly.slices, 250..251);
        assert_eq!(hourly.recheck_for, Duration::hours(2));
        // Two passes in a minute: one slice, an hour and a minute of ages.
        let again = PayloadPlan::after(7, Some(now - Duration::minutes(1)), now);
        assert_eq!(again.slices, 7..8);
        assert_eq!(again.recheck_for, Duration::minutes(61));
        // Missed days: more slices, up to the end of the slices.
        let late = PayloadPlan::after(250, Some(now - Duration::days(3)), now);
        assert_eq!((late.slices.clone(), late.next_slice()), (250..256, 0));
        let long = PayloadPlan::after(0, Some(now - Duration::days(90)), now);
        assert_eq!(long.slices, 0..PAYLOAD_SLICES);
        assert_eq!(long.recheck_for, Duration::days(30) + Duration::hours(1));
    }
}
