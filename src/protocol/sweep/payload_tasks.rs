//! Whether the payloads of the day's slices have their task, in memory that
//! does not grow with the bucket (`payloads.rs` says which payloads are
//! judged; docs/decisions.md says why this way). The pass never holds the
//! tasks' ids:
//!
//! - **`LIST_ORDER=bytes`: a streaming merge.** A slice's payloads are
//!   listed in the order of their ids (`payloads/{id}/…`), and so are its
//!   tasks under each shard folder (`tasks/{shard}/{id}.json`). Each task
//!   folder of the slice is a cursor holding one page: for each payload in
//!   turn, a cursor drops the ids below it and, once its page is spent,
//!   lists again from `StartAfter` the payload's own id. So a slice costs at
//!   most one LIST per thousand of its tasks (fewer where its payloads are
//!   sparse: a cursor jumps over tasks that no payload needs) and holds one
//!   page per cursor.
//! - **`LIST_ORDER=any`: candidates in bounded rounds.** Nothing is in
//!   order, so the ids of the payloads to judge (16 bytes each) are kept, at
//!   most [`CANDIDATES_AT_ONCE`] of them, and the slices' task folders are
//!   listed whole, page by page, striking each id found. The payloads are
//!   the rare side (offloaded inputs), so one round nearly always does; a
//!   bucket with more than that many payloads of the day's slices takes one
//!   listing of those task folders per round.
//!
//! A payload found without its task either way is only a suspect: the HEAD
//! path (`Engine::sweep_payload`) confirms it under every shard length
//! before anything is deleted, so a listing out of order (a store
//! misconfigured as `bytes`) costs HEADs, never a payload.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::StreamExt;
use uuid::Uuid;

use super::{PAGE, RANGES_AT_ONCE, READS_AT_ONCE, SweepOptions, SweepSummary};
use crate::config::ListOrder;
use crate::protocol::engine::{Engine, Failure};
use crate::protocol::error::SubmitError;
use crate::store::StoreError;

/// Where offloaded inputs are.
pub const PAYLOADS_PREFIX: &str = "payloads/";
/// Where task objects are.
pub(super) const TASKS_PREFIX: &str = "tasks/";

/// The most payload ids a round of `LIST_ORDER=any` holds: 4 Mi ids, 64 MiB
/// (and a byte each for the strikes).
pub(super) const CANDIDATES_AT_ONCE: usize = 1 << 22;

/// Shard lengths a task may be under (buquet's clients may use another
/// than ours).
pub(super) const SHARD_LENGTHS: Range<usize> = 1..5;

/// The task id of a task key, `tasks/{id[..n]}/{id}.json` with n from 1 to
/// 4; `None` for anything else.
pub(super) fn task_key_id(key: &str) -> Option<Uuid> {
    let (shard, file) = key.strip_prefix(TASKS_PREFIX)?.split_once('/')?;
    let text = file.strip_suffix(".json")?;
    let id = Uuid::parse_str(text).ok()?;
    (SHARD_LENGTHS.contains(&shard.len()) && id.hyphenated().to_string().starts_with(shard))
        .then_some(id)
}

/// The slice of a task id.
pub(super) fn slice_of(id: &Uuid) -> u32 {
    u32::from(id.as_bytes()[0])
}

/// The two hex digits of a slice.
pub(super) fn slice_hex(slice: u32) -> String {
    format!("{slice:02x}")
}

/// What to list for the tasks of `slices`, given the folders right under
/// `tasks/`: under `LIST_ORDER=bytes` a one-digit folder by the slice's own
/// prefix (`tasks/a/ab`); under `any` (prefixes that end in `/`) whole, to
/// be filtered; longer shards' folders whole.
pub(super) fn slice_task_prefixes(
    folders: &[String],
    slices: &Range<u32>,
    order: ListOrder,
) -> Vec<String> {
    let hexes: Vec<String> = slices.clone().map(slice_hex).collect();
    let mut prefixes: Vec<String> = Vec::new();
    for folder in folders {
        let Some(shard) = folder
            .strip_prefix(TASKS_PREFIX)
            .and_then(|f| f.strip_suffix('/'))
        else {
            continue;
        };
        match shard.len() {
            1 if order == ListOrder::Bytes => prefixes.extend(
                hexes
                    .iter()
                    .filter(|h| h.starts_with(shard))
                    .map(|h| format!("{folder}{h}")),
            ),
            1 if hexes.iter().any(|h| h.starts_with(shard)) => prefixes.push(folder.clone()),
            2..=4 if hexes.iter().any(|h| shard.starts_with(h.as_str())) => {
                prefixes.push(folder.clone())
            }
            _ => {}
        }
    }
    prefixes
}

/// One task folder of a slice, listed in byte order as far as the payloads
/// need: its current page's ids (those of the slice), and where it stands.
struct Cursor {
    /// What is listed (`tasks/a/ab`, or a longer shard's folder).
    prefix: String,
    /// The folder, `tasks/{shard}/`: a payload's own task key in it is
    /// where a jump starts.
    folder: String,
    page: VecDeque<Uuid>,
    /// The last key listed: a page of keys that name no task of ours goes
    /// on from there, not from the same place again.
    last: Option<String>,
    /// The listing has no more pages after `page`.
    ended: bool,
}

/// The task cursors of one slice under `LIST_ORDER=bytes`.
pub(super) struct TaskMerge {
    slice: u32,
    cursors: Vec<Cursor>,
}

impl TaskMerge {
    /// The cursors of `slice` over `prefixes` ([`slice_task_prefixes`] of
    /// that slice alone), none listed yet.
    pub(super) fn new(slice: u32, prefixes: Vec<String>) -> Self {
        let cursors = prefixes
            .into_iter()
            .map(|prefix| {
                let cut = prefix[TASKS_PREFIX.len()..]
                    .find('/')
                    .map_or(prefix.len(), |i| TASKS_PREFIX.len() + i + 1);
                Cursor {
                    folder: prefix[..cut].to_owned(),
                    prefix,
                    page: VecDeque::new(),
                    last: None,
                    ended: false,
                }
            })
            .collect();
        TaskMerge { slice, cursors }
    }
}

impl Engine {
    /// Whether a task of `id` is listed under one of the slice's folders,
    /// ids asked in rising order; `None` when the run's deadline came
    /// first. LISTs are counted in `lists`.
    pub(super) async fn merge_has(
        &self,
        merge: &mut TaskMerge,
        id: Uuid,
        opts: &SweepOptions,
        lists: &mut u64,
    ) -> Result<Option<bool>, SubmitError> {
        let slice = merge.slice;
        for c in &mut merge.cursors {
            match self.seek(c, slice, id, opts, lists).await? {
                None => return Ok(None),
                Some(true) => return Ok(Some(true)),
                Some(false) => {}
            }
        }
        Ok(Some(false))
    }

    /// Moves `c` to the first id at or past `id`: whether it is `id`.
    async fn seek(
        &self,
        c: &mut Cursor,
        slice: u32,
        id: Uuid,
        opts: &SweepOptions,
        lists: &mut u64,
    ) -> Result<Option<bool>, SubmitError> {
        loop {
            while c.page.front().is_some_and(|f| *f < id) {
                c.page.pop_front();
            }
            if let Some(f) = c.page.front() {
                return Ok(Some(*f == id));
            }
            if c.ended {
                return Ok(Some(false));
            }
            if self.past(opts) {
                return Ok(None);
            }
            // From the payload's own task key (every key of a smaller id
            // sorts before it), or past the last key listed if that is
            // further.
            let own = format!("{}{}", c.folder, id.hyphenated());
            let after = match c.last.take() {
                Some(l) if l > own => l,
                _ => own,
            };
            let listed = self
                .with_retries(self.request_deadline(opts.deadline), || {
                    self.store.list(&c.prefix, Some(&after), None, PAGE)
                })
                .await?;
            *lists += 1;
            c.ended = listed.next.is_none();
            c.last = listed.objects.last().map(|o| o.key.clone());
            c.page = listed
                .objects
                .iter()
                .filter_map(|o| task_key_id(&o.key))
                .filter(|t| slice_of(t) == slice)
                .collect();
            if c.page.is_empty() && c.last.is_none() {
                c.ended = true;
            }
        }
    }

    /// `LIST_ORDER=any`: strikes the `ids` (sorted) whose task is listed
    /// under one of `prefixes`, listed whole side by side; `None` when the
    /// run's deadline came first.
    pub(super) async fn strike_listed(
        &self,
        ids: &[Uuid],
        prefixes: Vec<String>,
        opts: &SweepOptions,
        summary: &mut SweepSummary,
    ) -> Result<Option<Vec<bool>>, SubmitError> {
        let found: Vec<AtomicBool> = ids.iter().map(|_| AtomicBool::new(false)).collect();
        let listed: Vec<Result<Option<u64>, SubmitError>> = futures::stream::iter(prefixes)
            .map(|prefix| self.strike_prefix(prefix, ids, &found, opts))
            .buffer_unordered(RANGES_AT_ONCE)
            .collect()
            .await;
        let mut cut_short = false;
        for r in listed {
            match r? {
                Some(lists) => summary.lists += lists,
                None => cut_short = true,
            }
        }
        Ok((!cut_short).then(|| found.into_iter().map(AtomicBool::into_inner).collect()))
    }

    /// Lists `prefix` whole, page by page, marking in `found` each of `ids`
    /// named by a task: the LISTs made, `None` past the run's deadline.
    async fn strike_prefix(
        &self,
        prefix: String,
        ids: &[Uuid],
        found: &[AtomicBool],
        opts: &SweepOptions,
    ) -> Result<Option<u64>, SubmitError> {
        let (mut page, mut lists) = (None::<String>, 0);
        loop {
            if self.past(opts) {
                return Ok(None);
            }
            let listed = self
                .with_retries(self.request_deadline(opts.deadline), || {
                    self.store.list(&prefix, None, page.clone(), PAGE)
                })
                .await?;
            lists += 1;
            for id in listed.objects.iter().filter_map(|o| task_key_id(&o.key)) {
                if let Ok(i) = ids.binary_search(&id) {
                    found[i].store(true, Ordering::Relaxed);
                }
            }
            match listed.next {
                Some(n) => page = Some(n),
                None => return Ok(Some(lists)),
            }
        }
    }

    /// The payloads of `ids` that no listed task named: each HEADed (its
    /// listing's metadata was not kept) and, still old enough to judge,
    /// confirmed and deleted by the HEAD path. Counted into `summary`.
    pub(super) async fn judge_suspects(
        &self,
        ids: Vec<Uuid>,
        from: chrono::Duration,
        now: chrono::DateTime<chrono::Utc>,
        opts: &SweepOptions,
        summary: &mut SweepSummary,
    ) {
        let outcomes: Vec<Result<bool, SubmitError>> = futures::stream::iter(ids)
            .map(|id| async move {
                let key = format!("{PAYLOADS_PREFIX}{}/input.json", id.hyphenated());
                let deadline = self.request_deadline(opts.deadline);
                match self.with_retries(deadline, || self.store.head(&key)).await {
                    Ok(meta) if now - meta.last_modified >= from => {
                        self.sweep_payload(meta, id, opts).await
                    }
                    Ok(_) | Err(Failure::Store(StoreError::NotFound)) => Ok(false),
                    Err(e) => Err(e.into()),
                }
            })
            .buffer_unordered(READS_AT_ONCE)
            .collect()
            .await;
        tally_payloads(outcomes, summary);
    }
}

/// Counts what the checks of some payloads did: a deletion, nothing (or the
/// deadline: the next pass's), or an error, logged.
pub(super) fn tally_payloads(outcomes: Vec<Result<bool, SubmitError>>, summary: &mut SweepSummary) {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_key_names_its_id_only_under_a_shard_of_one_to_four_of_its_digits() {
        let id = "a1b2c3d4-0000-4000-8000-000000000000";
        for shard in ["a", "a1", "a1b", "a1b2"] {
            assert!(task_key_id(&format!("tasks/{shard}/{id}.json")).is_some());
        }
        assert!(task_key_id(&format!("tasks/a1b2c/{id}.json")).is_none());
        assert!(task_key_id(&format!("tasks/b/{id}.json")).is_none());
        assert!(task_key_id(&format!("tasks/a/{id}.txt")).is_none());
        assert!(task_key_id(&format!("payloads/{id}/input.json")).is_none());
    }

    #[test]
    fn a_slices_tasks_are_listed_by_its_own_prefix_in_byte_order_and_by_whole_folders_in_any() {
        let folders: Vec<String> = [
            "tasks/a/",
            "tasks/b/",
            "tasks/ab/",
            "tasks/abc/",
            "tasks/ac/",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let ab = 0xab..0xac;
        assert_eq!(
            slice_task_prefixes(&folders, &ab, ListOrder::Bytes),
            vec!["tasks/a/ab", "tasks/ab/", "tasks/abc/"]
        );
        assert_eq!(
            slice_task_prefixes(&folders, &ab, ListOrder::Any),
            vec!["tasks/a/", "tasks/ab/", "tasks/abc/"]
        );
    }

    #[test]
    fn a_cursor_jumps_from_the_folder_of_its_shard() {
        let m = TaskMerge::new(0xab, vec!["tasks/a/ab".into(), "tasks/abc/".into()]);
        let folders: Vec<&str> = m.cursors.iter().map(|c| c.folder.as_str()).collect();
        assert_eq!(folders, vec!["tasks/a/", "tasks/abc/"]);
    }
}
