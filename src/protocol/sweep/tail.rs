//! The pass's tail, spread as its records are (docs/decisions.md, "The
//! pass's tail at 10^9"): once the records are done, the claim that finds
//! it so plans the tail (`checkpoint.rs`, [`TailPlan`]) and its items are
//! ranges of the pass's pool, claimed by shares (at most `PASS_CONCURRENCY`
//! at once), released with their place when the deadline cuts them, and
//! handed on by the same invitations. The release that leaves nothing of
//! the tail completes the pass; the payload cursor moves on only if no item
//! of the check failed or was given up.
//!
//! - [`Range::Tail`]: the ready index's scan (`markers.rs`), then the first
//!   page of `payloads/`. A bucket of up to a page of payloads is checked
//!   whole here, as one page; more than a page leaves the items below.
//! - [`Range::Recent`]: the HEAD path over the payloads outside the day's
//!   slices (`payloads.rs`).
//! - [`Range::Slice`] (`LIST_ORDER=bytes`): one slice of the day's plan, its
//!   payloads merged with its tasks (`payload_tasks.rs`), its place the last
//!   payload key of the last page judged whole: the task cursors seek from
//!   each payload's own id, so they are made again where it goes on.
//! - [`Range::Slices`] (`LIST_ORDER=any`): the day's slices of one task
//!   folder digit (their tasks are in the same one-digit folder, listed
//!   whole: one item for it rather than one a slice, which would list it
//!   once a slice). Its candidates (the payload ids of its slices, at most
//!   [`ROUND`] a round, the smallest past the last round's) are collected
//!   from `payloads/` by the same ages (the tail's time), over as many
//!   shares as it takes: a share cut short in the collection, or in the
//!   task listing after it, keeps them in a side object its place names
//!   (`collect.rs`); its place is also the task listing's (which folder,
//!   the store's token) and the candidates found so far, a bit each, in
//!   the checkpoint.
//!
//! An item that had a whole invocation (its first claim) and made no
//! progress goes back with its place noted; at the same place a second
//! time it is given up (`stalls.rs`): the pass completes without moving
//! the payload cursor, as a tail that cannot finish must not hand itself
//! on for ever.

use futures::StreamExt;
use uuid::Uuid;

use super::checkpoint::{Checkpoint, TailPlan};
use super::collect::Candidates;
use super::payload_tasks::{PAYLOADS_PREFIX, slice_hex, slice_task_prefixes, task_key_id};
use super::payloads::{Against, PAYLOAD_SLICES};
use super::ranges::{Range, SlicesPlace};
use super::tail_plan::{ROUND, RoundAt, TailCx};
use super::{PAGE, RANGES_AT_ONCE, READS_AT_ONCE, SweepOptions, SweepSummary};
use crate::config::ListOrder;
use crate::protocol::engine::Engine;
use crate::protocol::error::SubmitError;

/// What one share's tail items did.
#[derive(Debug, Default)]
pub(super) struct TailDone {
    pub tally: SweepSummary,
    /// What goes back to the pool: items cut short with their place, and
    /// the items the tail's first one left.
    pub left: Vec<Range>,
    /// The ready index's scan completed without a failure.
    pub markers: bool,
    /// An item of the payload check failed.
    pub failed: bool,
    /// Items that made no progress in a whole invocation (the share its
    /// first claim), with their place.
    pub stalled: Vec<Range>,
}

/// What one item did.
#[derive(Debug, Default)]
struct Step {
    tally: SweepSummary,
    next: Vec<Range>,
    markers: bool,
    failed: bool,
    /// It made a request (an item begun past the deadline did not).
    started: bool,
    /// Of `tally.errors`, the ready index's scan's: they hold its own
    /// cursor (`markers`), not the payload check's.
    scan_errors: u64,
}

impl Step {
    fn again(mut self, item: Range) -> Self {
        self.next = vec![item];
        self
    }
}

impl Engine {
    /// The context of the tail `t` of the pass `cp`.
    pub(super) fn tail_cx(&self, cp: &Checkpoint, t: &TailPlan) -> TailCx {
        let plan = t.payloads(cp.payload_slice, cp.payloads_until);
        TailCx {
            judge: self.payload_judge(t.at, &plan),
            plan,
            markers_window: (cp.markers_until, cp.pass),
        }
    }

    /// Works a share's tail `items` side by side (at most
    /// [`RANGES_AT_ONCE`]; the rest go back unstarted). `first`: the share
    /// is its invocation's first claim, so an item of it that made no
    /// progress had the whole invocation, and is given up.
    pub(super) async fn tail_items(
        &self,
        items: Vec<Range>,
        cx: &TailCx,
        first: bool,
        opts: &SweepOptions,
    ) -> TailDone {
        let mut done = TailDone::default();
        let mut items = items;
        let rest = items.split_off(items.len().min(RANGES_AT_ONCE));
        let steps: Vec<(Range, Step)> = futures::stream::iter(items)
            .map(|item| async move { (item.clone(), self.tail_item(item, cx, opts).await) })
            .buffer_unordered(RANGES_AT_ONCE)
            .collect()
            .await;
        for (item, step) in steps {
            done.tally.add(&step.tally);
            done.markers |= step.markers;
            // A payload that could not be checked (an error counted, the
            // payload kept) fails the check as a failed item does: the
            // cursor stays, so the next pass checks it again. An error of
            // the ready index's scan (in the first item) holds the scan's
            // own cursor alone.
            done.failed |= step.failed || step.tally.errors > step.scan_errors;
            // Progress: the place moved on, or something was deleted (an
            // orphan gone for good: the same place costs less next time,
            // and there are only so many).
            let t = &step.tally;
            let deleted = !opts.dry_run && t.payloads_deleted + t.markers_deleted > 0;
            if first && step.started && self.past(opts) && step.next == [item.clone()] && !deleted {
                done.stalled.push(item);
                continue;
            }
            done.left.extend(step.next);
        }
        done.left.extend(rest);
        done
    }

    async fn tail_item(&self, item: Range, cx: &TailCx, opts: &SweepOptions) -> Step {
        if self.past(opts) {
            return Step::default().again(item);
        }
        let step = Step {
            started: true,
            ..Step::default()
        };
        match item {
            Range::Tail { markers } => self.tail_first(markers, cx, opts, step).await,
            Range::Recent { token, from } => self.recent_item((token, from), cx, opts, step).await,
            Range::Slice { slice, after } => self.slice_item(slice, after, cx, opts, step).await,
            Range::Slices { from, to, place } => {
                self.slices_item((from, to), place, cx, opts, step).await
            }
            records => step.again(records),
        }
    }

    /// An item that met `e`: cut short by the deadline, it goes on from
    /// `again`; a failure is counted and the item given up (the payload
    /// cursor stays).
    fn item_failed(&self, e: SubmitError, again: Range, opts: &SweepOptions, mut s: Step) -> Step {
        if self.past(opts) || matches!(e, SubmitError::DeadlineExceeded) {
            return s.again(again);
        }
        tracing::warn!(error = %e, "an item of the payload check stopped; the next pass checks its payloads again");
        s.tally.errors += 1;
        s.failed = true;
        s
    }

    /// The ready index's scan (unless done), then the first page of
    /// `payloads/`: checked whole here if it is all, else the items of the
    /// check.
    async fn tail_first(&self, done: bool, cx: &TailCx, opts: &SweepOptions, mut s: Step) -> Step {
        if !done {
            let ok = self
                .sweep_markers(cx.markers_window, opts, &mut s.tally)
                .await;
            s.scan_errors = s.tally.errors;
            if !ok && self.past(opts) {
                return s.again(Range::Tail { markers: false });
            }
            s.markers = ok;
        }
        let again = Range::Tail { markers: true };
        if self.past(opts) {
            return s.again(again);
        }
        let first = match self
            .with_retries(self.request_deadline(opts.deadline), || {
                self.store.list(PAYLOADS_PREFIX, None, None, PAGE)
            })
            .await
        {
            Ok(p) => p,
            Err(e) => return self.item_failed(e.into(), again, opts, s),
        };
        s.tally.lists += 1;
        let (j, slices) = (&cx.judge, cx.plan.slices.clone());
        let whole = match (first.next, self.settings.list_order) {
            (None, _) => {
                let mut held = Vec::new();
                let page = Against::Collect(&mut held);
                let judged = self.judge_page(first.objects, j, opts, &mut s.tally, page);
                match judged.await {
                    Ok(true) => self.settle(&mut held, j, opts, &mut s.tally).await,
                    other => other,
                }
            }
            (Some(_), ListOrder::Bytes) => {
                s.next.push(Range::Recent {
                    token: None,
                    from: 0,
                });
                s.next
                    .extend(slices.map(|slice| Range::Slice { slice, after: None }));
                return s;
            }
            (Some(token), ListOrder::Any) => {
                let judged = self.judge_page(first.objects, j, opts, &mut s.tally, Against::Skip);
                s.next.push(Range::Recent {
                    token: Some(token),
                    from: 0,
                });
                s.next.extend(digit_groups(slices));
                match judged.await {
                    Ok(true) => return s,
                    other => other,
                }
            }
        };
        match whole {
            Ok(true) => s,
            // The page again, whole (its HEADs are the same judgements).
            Ok(false) => {
                s.next.clear();
                s.again(again)
            }
            Err(e) => {
                s.next.clear();
                self.item_failed(e, again, opts, s)
            }
        }
    }

    /// The HEAD path over the payloads outside the day's slices: under
    /// `LIST_ORDER=any` page by page from `token` (the place), under
    /// `bytes` the other slices' folders from slice `from` on, side by side
    /// a batch at a time (the place: the first folder of the batch the
    /// deadline cut).
    async fn recent_item(
        &self,
        (token, from): (Option<String>, u32),
        cx: &TailCx,
        opts: &SweepOptions,
        mut s: Step,
    ) -> Step {
        let j = &cx.judge;
        if self.settings.list_order == ListOrder::Any {
            let mut page = token;
            loop {
                let again = Range::Recent {
                    token: page.clone(),
                    from,
                };
                if self.past(opts) {
                    return s.again(again);
                }
                let listed = match self
                    .with_retries(self.request_deadline(opts.deadline), || {
                        self.store.list(PAYLOADS_PREFIX, None, page.clone(), PAGE)
                    })
                    .await
                {
                    Ok(l) => l,
                    Err(e) => return self.item_failed(e.into(), again, opts, s),
                };
                s.tally.lists += 1;
                let judged = self.judge_page(listed.objects, j, opts, &mut s.tally, Against::Skip);
                match (judged.await, listed.next) {
                    (Ok(true), Some(n)) => page = Some(n),
                    (Ok(true), None) => return s,
                    (Ok(false), _) => return s.again(again),
                    (Err(e), _) => return self.item_failed(e, again, opts, s),
                }
            }
        }
        let others: Vec<u32> = (from..PAYLOAD_SLICES)
            .filter(|x| !cx.plan.slices.contains(x))
            .collect();
        for batch in others.chunks(RANGES_AT_ONCE) {
            let again = Range::Recent {
                token: None,
                from: batch[0],
            };
            if self.past(opts) {
                return s.again(again);
            }
            let judged: Vec<(SweepSummary, Result<bool, SubmitError>)> =
                futures::future::join_all(batch.iter().map(|&slice| async move {
                    let prefix = format!("{PAYLOADS_PREFIX}{}", slice_hex(slice));
                    let mut t = SweepSummary::default();
                    let r = self.judge_prefix(&prefix, None, j, opts, &mut t, Against::Skip);
                    let r = r.await;
                    (t, r)
                }))
                .await;
            let mut whole = Ok(true);
            for (t, r) in judged {
                s.tally.add(&t);
                whole = match (whole, r) {
                    (Err(e), _) | (Ok(_), Err(e)) => Err(e),
                    (Ok(a), Ok(b)) => Ok(a && b),
                };
            }
            match whole {
                Ok(true) => {}
                Ok(false) => return s.again(again),
                Err(e) => return self.item_failed(e, again, opts, s),
            }
        }
        s
    }

    /// `LIST_ORDER=bytes`: one slice's payloads after `after`, page by
    /// page, merged with its tasks; the place moves on past a page judged
    /// whole before the deadline.
    async fn slice_item(
        &self,
        slice: u32,
        mut after: Option<String>,
        cx: &TailCx,
        opts: &SweepOptions,
        mut s: Step,
    ) -> Step {
        let prefix = format!("{PAYLOADS_PREFIX}{}", slice_hex(slice));
        let mut merge = None;
        loop {
            let again = Range::Slice {
                slice,
                after: after.clone(),
            };
            if self.past(opts) {
                return s.again(again);
            }
            let listed = match self
                .with_retries(self.request_deadline(opts.deadline), || {
                    self.store.list(&prefix, after.as_deref(), None, PAGE)
                })
                .await
            {
                Ok(l) => l,
                Err(e) => return self.item_failed(e.into(), again, opts, s),
            };
            s.tally.lists += 1;
            let last = listed.objects.last().map(|o| o.key.clone());
            let against = Against::Merge(&mut merge);
            let judged = self.judge_page(listed.objects, &cx.judge, opts, &mut s.tally, against);
            match (judged.await, listed.next, last) {
                (Ok(true), Some(_), Some(last)) => after = Some(last),
                (Ok(true), _, _) => return s,
                (Ok(false), _, _) => return s.again(again),
                (Err(e), _, _) => return self.item_failed(e, again, opts, s),
            }
        }
    }

    /// `LIST_ORDER=any`: the day's slices `from..to` of one task folder
    /// digit, round by round: the round's candidates collected, the task
    /// folders listed from the place striking those found, then the rest
    /// (the suspects, kept in the place) confirmed by the HEAD path.
    async fn slices_item(
        &self,
        (from, to): (u32, u32),
        mut place: SlicesPlace,
        cx: &TailCx,
        opts: &SweepOptions,
        mut s: Step,
    ) -> Step {
        let again = |place: SlicesPlace| Range::Slices { from, to, place };
        loop {
            if !place.listed {
                let mut r = RoundAt {
                    group: (from, to),
                    place: &mut place,
                    cx,
                    opts,
                    tally: &mut s.tally,
                };
                match self.list_round(&mut r).await {
                    Ok(true) => {}
                    Ok(false) => return s.again(again(place)),
                    Err(e) => return self.item_failed(e, again(place), opts, s),
                }
            }
            // A batch at a time, each judged whole leaving the place, so
            // that a share cut short here keeps its progress.
            while !place.suspects.is_empty() {
                let n = place.suspects.len().min(READS_AT_ONCE);
                let batch: Vec<Uuid> = place.suspects[..n].to_vec();
                let j = &cx.judge;
                if !self.past(opts) {
                    self.judge_suspects(batch, j.from, j.now, opts, &mut s.tally)
                        .await;
                }
                if self.past(opts) {
                    return s.again(again(place));
                }
                place.suspects.drain(..n);
            }
            match place.next_round {
                Some(after) => {
                    place = SlicesPlace {
                        round_after: Some(after),
                        ..SlicesPlace::default()
                    }
                }
                None => return s,
            }
        }
    }

    /// One round's listing, from `place`: its candidates collected, the
    /// task folders listed on from the place striking those found. `true`
    /// once listed (the place then holds the round's suspects and where the
    /// next round begins), `false` when the deadline came first (the place
    /// holds how far the listing went).
    async fn list_round(&self, r: &mut RoundAt<'_>) -> Result<bool, SubmitError> {
        let Some(Candidates { ids, saved }) = self.round_candidates(r).await? else {
            return Ok(false);
        };
        let mut found = decode_found(r.place, ids.len());
        if found.is_none() {
            // Another round's bits, or candidates that changed since: the
            // round's task listing begins again.
            *r.place = SlicesPlace {
                round_after: r.place.round_after,
                collected: r.place.collected,
                ..SlicesPlace::default()
            };
        }
        let found = found.get_or_insert_with(|| vec![false; ids.len()]);
        if !ids.is_empty() {
            let strikes = (ids.as_slice(), found.as_mut_slice());
            let listed = self.strike_from(strikes, r);
            // Cut short by the deadline (before a request, or in one), the
            // place keeps what was found so far with the listing's token,
            // and the candidates in the side object.
            let cut = match listed.await {
                Ok(done) => !done,
                Err(SubmitError::DeadlineExceeded) => true,
                Err(_) if self.past(r.opts) => true,
                Err(e) => return Err(e),
            };
            if cut {
                (r.place.count, r.place.found) = (ids.len() as u64, encode_found(found));
                if !saved {
                    self.save_candidates(r, &ids).await;
                }
                return Ok(false);
            }
        }
        if r.place.collected.is_some() {
            self.drop_side(r.group, r.opts).await;
        }
        *r.place = SlicesPlace {
            round_after: r.place.round_after,
            listed: true,
            suspects: (0..ids.len())
                .filter(|i| !found[*i])
                .map(|i| ids[i])
                .collect(),
            next_round: ids.last().copied().filter(|_| ids.len() == ROUND),
            ..SlicesPlace::default()
        };
        Ok(true)
    }

    /// Lists the task folders of the slices `from..to` from `place`,
    /// striking in `found` each of `ids` (sorted) named by a task; the place
    /// moves on page by page. `false` when the deadline came first.
    async fn strike_from(
        &self,
        (ids, found): (&[Uuid], &mut [bool]),
        r: &mut RoundAt<'_>,
    ) -> Result<bool, SubmitError> {
        let (place, opts) = (&mut *r.place, r.opts);
        let Some(folders) = self.task_folders(&r.cx.judge, opts, r.tally).await? else {
            return Ok(false);
        };
        let prefixes = slice_task_prefixes(folders, &(r.group.0..r.group.1), ListOrder::Any);
        while let Some(prefix) = prefixes.get(place.prefix) {
            if self.past(opts) {
                return Ok(false);
            }
            let listed = self
                .with_retries(self.request_deadline(opts.deadline), || {
                    self.store.list(prefix, None, place.token.clone(), PAGE)
                })
                .await?;
            r.tally.lists += 1;
            for id in listed.objects.iter().filter_map(|o| task_key_id(&o.key)) {
                if let Ok(i) = ids.binary_search(&id) {
                    found[i] = true;
                }
            }
            place.token = listed.next;
            if place.token.is_none() {
                place.prefix += 1;
            }
        }
        Ok(true)
    }
}

/// The items of the day's slices under `LIST_ORDER=any`: one for each
/// task folder digit they begin with.
fn digit_groups(slices: std::ops::Range<u32>) -> Vec<Range> {
    let mut out = Vec::new();
    let mut from = slices.start;
    while from < slices.end {
        let to = ((from / 16 + 1) * 16).min(slices.end);
        out.push(Range::Slices {
            from,
            to,
            place: SlicesPlace::default(),
        });
        from = to;
    }
    out
}

/// The candidates found so far by `place`, for a round of `n`: `None` when
/// its bits are not this round's.
fn decode_found(place: &SlicesPlace, n: usize) -> Option<Vec<bool>> {
    if place.found.is_empty() || place.count != n as u64 {
        return (place.found.is_empty() && place.prefix == 0 && place.token.is_none())
            .then(|| vec![false; n]);
    }
    let bytes = hex::decode(&place.found).ok()?;
    (bytes.len() == n.div_ceil(8))
        .then(|| (0..n).map(|i| bytes[i / 8] & (1 << (i % 8)) != 0).collect())
}

fn encode_found(found: &[bool]) -> String {
    let mut bytes = vec![0u8; found.len().div_ceil(8)];
    for (i, _) in found.iter().enumerate().filter(|(_, f)| **f) {
        bytes[i / 8] |= 1 << (i % 8);
    }
    hex::encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_days_slices_make_one_item_a_task_folder_digit() {
        let groups = |r: std::ops::Range<u32>| -> Vec<(u32, u32)> {
            digit_groups(r)
                .into_iter()
                .map(|g| match g {
                    Range::Slices { from, to, .. } => (from, to),
                    other => panic!("{other:?}"),
                })
                .collect()
        };
        assert_eq!(groups(0..9), vec![(0, 9)]);
        assert_eq!(groups(9..18), vec![(9, 16), (16, 18)]);
        assert_eq!(groups(250..256), vec![(250, 256)]);
        assert_eq!(groups(0..256).len(), 16);
    }

    #[test]
    fn the_found_bits_come_back_only_for_the_round_they_were_made_for() {
        let found: Vec<bool> = (0..13).map(|i| i % 3 == 0).collect();
        let place = SlicesPlace {
            prefix: 0,
            token: Some("t".into()),
            count: 13,
            found: encode_found(&found),
            ..SlicesPlace::default()
        };
        assert_eq!(decode_found(&place, 13), Some(found));
        assert_eq!(decode_found(&place, 12), None, "other candidates");
        let fresh = SlicesPlace::default();
        assert_eq!(decode_found(&fresh, 3), Some(vec![false; 3]));
        let broken = SlicesPlace {
            found: "zz".into(),
            count: 3,
            ..place
        };
        assert_eq!(decode_found(&broken, 3), None);
    }
}
