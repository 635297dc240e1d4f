//! `sweeper/checkpoint.json`: one logical pass, worked by up to
//! `PASS_CONCURRENCY` invocations at once (docs/protocol.md, "The scheduled
//! pass"). Pure planning, no requests: every change here is made to the
//! checkpoint as read and written back by compare-and-swap on its ETag
//! (`share.rs`), so two invocations never hold one range.
//!
//! - `ranges` is the pool: what the pass still has to list and nobody holds.
//! - `shares` are the leases: each invocation working the pass holds the
//!   ranges it took, until `until`. A share whose lease has run out (its
//!   invocation died) goes back to the pool at the next claim.
//! - Once the pool is empty and no share holds ranges, the records are done:
//!   one invocation takes the *tail* (the ready index's scan, the orphan
//!   payloads) as a share of its own, and completes the pass.
//! - The pass's counts are merged here, share by share: one summary a pass.
//! - The rotations are cursors: `markers_until` (where the last complete
//!   scan of the ready index ended), `payloads_until` and `payload_slice`
//!   (where the last complete payload check ended, and the next slice of
//!   task ids it takes).
//!
//! Writes: one at a claim and one at a release, about two an invocation,
//! whatever the number of LISTs an invocation makes (about 100,000 at most).

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

use super::SweepSummary;
use super::ranges::Range;
use crate::config::ListOrder;

/// The counts of one pass, merged over its shares.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct PassTally {
    pub scanned: u64,
    pub finished: u64,
    pub expired_deleted: u64,
    pub expired_kept: u64,
    pub errors: u64,
    pub reads: u64,
    pub lists: u64,
    pub past_deadline: u64,
    pub payloads_deleted: u64,
    pub markers_deleted: u64,
    /// Shares taken (records and tail), one or more an invocation.
    pub shares: u64,
    /// The most shares that held the pass at once.
    pub peak_shares: u64,
}

impl PassTally {
    pub fn add(&mut self, s: &SweepSummary) {
        self.scanned += s.scanned;
        self.finished += s.finished;
        self.expired_deleted += s.expired_deleted;
        self.expired_kept += s.expired_kept;
        self.errors += s.errors;
        self.reads += s.reads;
        self.lists += s.lists;
        self.past_deadline += s.past_deadline;
        self.payloads_deleted += s.payloads_deleted;
        self.markers_deleted += s.markers_deleted;
    }

    /// The pass's one summary.
    pub fn summary(&self, dry_run: bool) -> SweepSummary {
        SweepSummary {
            scanned: self.scanned,
            finished: self.finished,
            expired_deleted: self.expired_deleted,
            expired_kept: self.expired_kept,
            errors: self.errors,
            reads: self.reads,
            lists: self.lists,
            past_deadline: self.past_deadline,
            payloads_deleted: self.payloads_deleted,
            markers_deleted: self.markers_deleted,
            complete: true,
            dry_run,
            ..SweepSummary::default()
        }
    }
}

/// One invocation's lease on part of the pass.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Share {
    /// The invocation's own id for this share (a fresh UUID a claim).
    pub id: String,
    /// The lease: the share is the invocation's until then (S3's time).
    pub until: DateTime<Utc>,
    /// The ranges it took; they go back to the pool if the lease runs out.
    #[serde(default)]
    pub ranges: Vec<Range>,
    /// The tail of the pass (markers, payloads), not records.
    #[serde(default)]
    pub tail: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Checkpoint {
    /// When the pass before this one began (`None`: never).
    #[serde(default)]
    pub previous_pass: Option<DateTime<Utc>>,
    /// When this pass began: the upper end of the window every one of its
    /// records is judged against, in every share it takes. Also the pass's
    /// name in its continuations.
    pub pass: DateTime<Utc>,
    /// The pass is done, its tail included.
    #[serde(default)]
    pub complete: bool,
    /// The pool: what the pass still has to list, held by no share.
    #[serde(default)]
    pub ranges: Vec<Range>,
    /// Ranges that met a retryable failure: they wait for the next
    /// scheduled run (not a continuation, which would try them again at
    /// once, and again, while the store fails).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub later: Vec<Range>,
    /// The leases of the invocations working the pass.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shares: Vec<Share>,
    /// A whole-pass lease written by an earlier version (one run a pass):
    /// honoured until it runs out, never written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running_until: Option<DateTime<Utc>>,
    /// Where the last complete scan of the ready index ended (`None`:
    /// never): the next scan's window begins there (`markers.rs`).
    #[serde(default)]
    pub markers_until: Option<DateTime<Utc>>,
    /// Where the last complete payload check ended (`None`: never).
    #[serde(default)]
    pub payloads_until: Option<DateTime<Utc>>,
    /// The next slice of task ids the payload check takes (0 to 255).
    #[serde(default)]
    pub payload_slice: u32,
    /// The pass's counts so far.
    #[serde(default)]
    pub tally: PassTally,
}

/// What a claim gave an invocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Claim {
    /// Ranges of records to list: a share of the pool.
    Records {
        ranges: Vec<Range>,
        /// No other share was live: this invocation fans the pass out.
        alone: bool,
        /// Ranges left in the pool after this claim.
        pool: usize,
        /// Slots of `PASS_CONCURRENCY` left after this claim.
        free: usize,
    },
    /// The tail of the pass.
    Tail,
    /// Every slot is held, or what is left is held: nothing to take.
    Busy,
    /// The continuation names a pass that is over (or another one).
    Over,
}

impl Checkpoint {
    /// A new pass at `pass`, after the complete one `before` (if any): its
    /// cursors go on.
    pub fn new_pass(before: Option<&Checkpoint>, pass: DateTime<Utc>, order: ListOrder) -> Self {
        Checkpoint {
            previous_pass: before.map(|c| c.pass),
            pass,
            complete: false,
            ranges: vec![Range::first(order)],
            later: vec![],
            shares: vec![],
            running_until: None,
            markers_until: before.and_then(|c| c.markers_until),
            payloads_until: before.and_then(|c| c.payloads_until),
            payload_slice: before.map_or(0, |c| c.payload_slice),
            tally: PassTally::default(),
        }
    }

    /// Whether an earlier version's run holds the whole pass at `now`.
    pub fn leased_at(&self, now: DateTime<Utc>) -> bool {
        self.running_until.is_some_and(|u| u > now)
    }

    /// Every range listed by a share that released it: the tail is next.
    pub fn records_done(&self) -> bool {
        self.ranges.is_empty() && self.later.is_empty() && self.shares.iter().all(|s| s.tail)
    }

    /// Shares whose lease has run out at `now` give their ranges back to
    /// the pool (their invocation died, or overran); how many.
    pub fn take_over(&mut self, now: DateTime<Utc>) -> usize {
        let (dead, live): (Vec<Share>, Vec<Share>) =
            self.shares.drain(..).partition(|s| s.until <= now);
        self.shares = live;
        for s in &dead {
            self.ranges.extend(s.ranges.iter().cloned());
        }
        if self.running_until.is_some_and(|u| u <= now) {
            self.running_until = None;
        }
        dead.len()
    }

    /// Claims a share for invocation `id` until `until`, with at most
    /// `concurrency` shares at once: a fair part of the pool (the pool over
    /// the free slots, this one included), or the tail once the records
    /// are done. A `scheduled` run (not a continuation) that finds only the
    /// ranges waiting after a failure, and no share live, takes them up.
    pub fn claim(
        &mut self,
        id: &str,
        (now, until): (DateTime<Utc>, DateTime<Utc>),
        concurrency: usize,
        scheduled: bool,
    ) -> Claim {
        if self.complete {
            return Claim::Over;
        }
        self.take_over(now);
        if self.leased_at(now) {
            return Claim::Busy;
        }
        let live = self.shares.len();
        if scheduled && live == 0 && self.ranges.is_empty() {
            self.ranges = std::mem::take(&mut self.later);
        }
        if self.records_done() {
            if live > 0 {
                return Claim::Busy;
            }
            self.push_share(id, until, vec![], true);
            return Claim::Tail;
        }
        if self.ranges.is_empty() || live >= concurrency.max(1) {
            return Claim::Busy;
        }
        let slots = concurrency.max(1) - live;
        let take = self.ranges.len().div_ceil(slots);
        let ranges: Vec<Range> = self.ranges.drain(..take).collect();
        self.push_share(id, until, ranges.clone(), false);
        Claim::Records {
            ranges,
            alone: live == 0,
            pool: self.ranges.len(),
            free: slots - 1,
        }
    }

    fn push_share(&mut self, id: &str, until: DateTime<Utc>, ranges: Vec<Range>, tail: bool) {
        self.shares.push(Share {
            id: id.to_owned(),
            until,
            ranges,
            tail,
        });
        self.tally.shares += 1;
        self.tally.peak_shares = self.tally.peak_shares.max(self.shares.len() as u64);
    }

    /// Ends share `id`: what it `left` goes back to the pool, what met a
    /// failure (`wait`) waits for the next scheduled run, and its counts go
    /// into the pass's. `false` when the share is not there any more (its
    /// lease ran out and another invocation took it over: its place wins,
    /// and these counts are the other's to make again).
    pub fn release(
        &mut self,
        id: &str,
        (left, wait): (Vec<Range>, Vec<Range>),
        tally: &SweepSummary,
    ) -> bool {
        let Some(i) = self.shares.iter().position(|s| s.id == id) else {
            return false;
        };
        self.shares.remove(i);
        self.ranges.extend(left);
        self.later.extend(wait);
        self.tally.add(tally);
        true
    }

    /// Ends the tail share `id` and with it the pass; the cursors of what
    /// the tail completed move on (`markers`: the ready index's scan;
    /// `payloads`: the payload check, which took `slices_end` as its next
    /// slice, at S3's time `payloads_at`).
    pub fn complete_tail(
        &mut self,
        id: &str,
        tally: &SweepSummary,
        markers: bool,
        payloads: Option<(u32, DateTime<Utc>)>,
    ) -> bool {
        if !self.release(id, (vec![], vec![]), tally) {
            return false;
        }
        self.complete = true;
        if markers {
            self.markers_until = Some(self.pass);
        }
        if let Some((next, at)) = payloads {
            self.payload_slice = next;
            self.payloads_until = Some(at);
        }
        true
    }

    /// Continuations to hand on after a release that ends an invocation:
    /// one for each free slot that has ranges to take, or one for the tail.
    pub fn wanted(&self, concurrency: usize) -> usize {
        if self.complete {
            return 0;
        }
        if self.records_done() {
            return usize::from(self.shares.is_empty());
        }
        concurrency
            .max(1)
            .saturating_sub(self.shares.len())
            .min(self.ranges.len())
    }

    /// How long the pass has taken so far, at `now`.
    pub fn age(&self, now: DateTime<Utc>) -> Duration {
        now - self.pass
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn dirs(n: usize) -> Vec<Range> {
        (0..n)
            .map(|i| Range::Dir {
                prefix: format!("idempotency/s{i}/"),
                token: None,
            })
            .collect()
    }

    fn pass_of(ranges: Vec<Range>) -> (Checkpoint, DateTime<Utc>) {
        let now = t("2026-01-03T00:00:00Z");
        let mut cp = Checkpoint::new_pass(None, now, ListOrder::Any);
        cp.ranges = ranges;
        (cp, now)
    }

    #[test]
    fn a_new_pass_opens_after_the_complete_one_and_keeps_its_cursors() {
        let mut done = Checkpoint::new_pass(None, t("2026-01-02T00:00:00Z"), ListOrder::Bytes);
        done.complete = true;
        done.ranges.clear();
        done.markers_until = Some(t("2026-01-01T00:00:00Z"));
        done.payloads_until = Some(t("2026-01-02T01:00:00Z"));
        done.payload_slice = 17;
        done.tally.scanned = 5;
        let now = t("2026-01-03T00:00:00Z");
        let open = Checkpoint::new_pass(Some(&done), now, ListOrder::Bytes);
        assert_eq!(open.previous_pass, Some(t("2026-01-02T00:00:00Z")));
        assert_eq!(open.markers_until, done.markers_until);
        assert_eq!(open.payloads_until, done.payloads_until);
        assert_eq!(open.payload_slice, 17);
        assert_eq!(open.tally, PassTally::default(), "counts are per pass");
        assert_eq!(open.ranges, vec![Range::Scopes { after: None }]);
        let any = Checkpoint::new_pass(Some(&done), now, ListOrder::Any);
        assert_eq!(any.ranges, vec![Range::Dirs { token: None }]);
    }

    #[test]
    fn claims_share_the_pool_fairly_and_never_past_the_concurrency() {
        let (mut cp, now) = pass_of(dirs(10));
        let until = now + Duration::minutes(2);
        let first = cp.claim("a", (now, until), 3, true);
        assert!(
            matches!(&first, Claim::Records { ranges, alone: true, pool: 6, free: 2 } if ranges.len() == 4),
            "{first:?}"
        );
        let second = cp.claim("b", (now, until), 3, false);
        assert!(
            matches!(&second, Claim::Records { ranges, alone: false, pool: 3, free: 1 } if ranges.len() == 3),
            "{second:?}"
        );
        let third = cp.claim("c", (now, until), 3, false);
        assert!(matches!(
            &third,
            Claim::Records {
                pool: 0,
                free: 0,
                ..
            }
        ));
        assert_eq!(cp.claim("d", (now, until), 3, false), Claim::Busy);
        // Every range is held by exactly one share.
        let mut held: Vec<Range> = cp.shares.iter().flat_map(|s| s.ranges.clone()).collect();
        held.sort_by_key(|r| format!("{r:?}"));
        let mut all = dirs(10);
        all.sort_by_key(|r| format!("{r:?}"));
        assert_eq!(held, all);
        assert_eq!((cp.tally.shares, cp.tally.peak_shares), (3, 3));
    }

    #[test]
    fn a_dead_shares_ranges_go_back_to_the_pool_once_its_lease_runs_out_and_not_before() {
        let (mut cp, now) = pass_of(dirs(2));
        let until = now + Duration::minutes(2);
        cp.claim("dead", (now, until), 1, true);
        let just_before = until - Duration::seconds(1);
        assert_eq!(cp.claim("b", (just_before, until), 1, true), Claim::Busy);
        let taken = cp.claim("b", (until, until + Duration::minutes(2)), 1, true);
        assert!(matches!(&taken, Claim::Records { ranges, .. } if *ranges == dirs(2)));
        // The dead share, back too late, finds its share gone: its place
        // is the other's, and its counts are not the pass's.
        let late = SweepSummary {
            scanned: 9,
            ..SweepSummary::default()
        };
        assert!(!cp.release("dead", (vec![], vec![]), &late));
        assert_eq!(cp.tally.scanned, 0);
        assert_eq!(cp.shares.len(), 1);
    }

    #[test]
    fn a_release_returns_what_is_left_and_merges_the_counts_and_the_tail_comes_last() {
        let (mut cp, now) = pass_of(dirs(2));
        let until = now + Duration::minutes(2);
        cp.claim("a", (now, until), 2, true);
        cp.claim("b", (now, until), 2, false);
        let one = SweepSummary {
            scanned: 3,
            reads: 1,
            ..SweepSummary::default()
        };
        assert!(cp.release("a", (dirs(1), vec![]), &one));
        assert_eq!(cp.wanted(2), 1, "one free slot, one range");
        assert!(cp.release("b", (vec![], vec![]), &one));
        // The left range again; then the records are done.
        assert!(matches!(
            cp.claim("c", (now, until), 2, false),
            Claim::Records { .. }
        ));
        assert!(!cp.records_done());
        assert!(cp.release("c", (vec![], vec![]), &one));
        assert!(cp.records_done());
        assert_eq!(cp.wanted(2), 1, "the tail");
        assert_eq!(cp.claim("d", (now, until), 2, false), Claim::Tail);
        assert_eq!(cp.claim("e", (now, until), 2, false), Claim::Busy);
        assert_eq!(cp.wanted(2), 0);
        let tail = SweepSummary {
            markers_deleted: 2,
            ..SweepSummary::default()
        };
        assert!(cp.complete_tail("d", &tail, true, Some((9, now))));
        assert!(cp.complete);
        assert_eq!((cp.tally.scanned, cp.tally.reads), (9, 3));
        assert_eq!(cp.tally.markers_deleted, 2);
        assert_eq!((cp.markers_until, cp.payload_slice), (Some(cp.pass), 9));
        assert_eq!(cp.payloads_until, Some(now));
        assert_eq!(cp.claim("f", (now, until), 2, false), Claim::Over);
    }

    #[test]
    fn a_failed_range_waits_for_a_scheduled_run_and_a_continuation_does_not_take_it() {
        let (mut cp, now) = pass_of(dirs(1));
        let until = now + Duration::minutes(2);
        cp.claim("a", (now, until), 2, true);
        cp.release("a", (vec![], dirs(1)), &SweepSummary::default());
        assert!(!cp.records_done());
        assert_eq!(cp.wanted(2), 0, "nothing is handed on for it");
        assert_eq!(cp.claim("b", (now, until), 2, false), Claim::Busy);
        let c = cp.claim("c", (now, until), 2, true);
        assert!(matches!(&c, Claim::Records { ranges, .. } if *ranges == dirs(1)));
    }

    #[test]
    fn an_earlier_versions_whole_pass_lease_holds_the_pass_until_it_runs_out() {
        let (mut cp, now) = pass_of(dirs(1));
        cp.running_until = Some(now + Duration::seconds(1));
        assert!(cp.leased_at(now));
        let until = now + Duration::minutes(2);
        assert_eq!(cp.claim("a", (now, until), 4, true), Claim::Busy);
        let later = now + Duration::seconds(1);
        assert!(!cp.leased_at(later), "a lease ending now has run out");
        assert!(matches!(
            cp.claim("a", (later, until), 4, true),
            Claim::Records { .. }
        ));
        assert_eq!(cp.running_until, None, "never written again");
    }
}
