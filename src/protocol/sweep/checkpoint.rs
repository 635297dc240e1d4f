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
//! - `invites` are the continuations handed on and not yet come: each holds
//!   a slot of `PASS_CONCURRENCY` and a range of the pool for the invocation
//!   it starts, so that no other claim takes them and no other invocation
//!   hands on for them again. An invitation that is not taken up in
//!   [`INVITE_LIFE`] is taken as lost.
//! - Once the pool is empty and no share holds ranges, the records are done:
//!   the claim that finds it so plans the *tail* ([`TailPlan`]) and puts its
//!   first item in the pool (the ready index's scan and the first page of
//!   `payloads/`), which leaves the payload check's items in turn (one per
//!   slice of the day's plan, or per task folder digit under
//!   `LIST_ORDER=any`: `tail.rs`). They are claimed, released with their
//!   place and handed on as the records' ranges are; the release that leaves
//!   nothing of the tail completes the pass and moves its cursors.
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
use super::tail_plan::Cursors;
pub(super) use super::tail_plan::TailPlan;
use crate::config::ListOrder;

/// How long a continuation handed on holds its slot and its range: far
/// longer than SQS takes to start its invocation (a second or two, a cold
/// start, a throttled retry), and shorter than the pass queue's visibility
/// timeout (720 s, template.yaml), so that a message received again after
/// its invocation died, or after a hand-on that failed, finds a lost
/// invitation gone and claims as any continuation.
pub(super) const INVITE_LIFE: Duration = Duration::minutes(5);

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

/// A continuation handed on and not yet come (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Invite {
    /// The id its [`Continuation`](super::Continuation) carries.
    pub id: uuid::Uuid,
    /// It is taken as lost from then on (S3's time).
    pub until: DateTime<Utc>,
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
    /// The whole tail of the pass, held by an earlier version (one share
    /// for the markers and the payloads): honoured until its lease runs
    /// out, never written now (the tail's items are ranges).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
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
    /// The continuations handed on and not yet come.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub invites: Vec<Invite>,
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
    /// The tail, once the records are done and it was planned (`None`
    /// before, and in a checkpoint of an earlier version).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tail: Option<TailPlan>,
}

/// What a claim gave an invocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Claim {
    /// Ranges of records to list: a share of the pool.
    Records {
        ranges: Vec<Range>,
        /// No other share was live, nor invited: this invocation may fan
        /// the pass out.
        alone: bool,
        /// Ranges left in the pool after this claim.
        pool: usize,
    },
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
            invites: vec![],
            running_until: None,
            markers_until: before.and_then(|c| c.markers_until),
            payloads_until: before.and_then(|c| c.payloads_until),
            payload_slice: before.map_or(0, |c| c.payload_slice),
            tally: PassTally::default(),
            tail: None,
        }
    }

    /// Whether an earlier version's run holds the whole pass at `now`.
    pub fn leased_at(&self, now: DateTime<Utc>) -> bool {
        self.running_until.is_some_and(|u| u > now)
    }

    /// Every range listed by a share that released it: the tail is next
    /// (or, once planned, every item of the tail is held).
    pub fn records_done(&self) -> bool {
        self.ranges.is_empty() && self.later.is_empty() && self.shares.iter().all(|s| s.tail)
    }

    /// The records are done and the tail is not planned yet.
    fn tail_due(&self) -> bool {
        self.tail.is_none() && self.records_done()
    }

    /// Shares whose lease has run out at `now` give their ranges back to
    /// the pool (their invocation died, or overran), and invitations past
    /// their life are dropped; how many shares.
    pub fn take_over(&mut self, now: DateTime<Utc>) -> usize {
        self.invites.retain(|i| i.until > now);
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
    /// `concurrency` shares and invitations at once: a fair part of the
    /// pool (the pool over the slots free of live shares, this one
    /// included), or the tail once the records are done. A continuation
    /// that carries an `invite` still standing takes up its slot and its
    /// range; any other claim leaves the invited their slots and a range
    /// each. A `scheduled` run (not a continuation) that finds only the
    /// ranges waiting after a failure, and no share live, takes them up.
    pub fn claim(
        &mut self,
        id: &str,
        (now, until): (DateTime<Utc>, DateTime<Utc>),
        concurrency: usize,
        (scheduled, invite): (bool, Option<uuid::Uuid>),
    ) -> Claim {
        if self.complete {
            return Claim::Over;
        }
        self.take_over(now);
        if self.leased_at(now) {
            return Claim::Busy;
        }
        if let Some(i) = invite {
            self.invites.retain(|v| v.id != i);
        }
        let (live, invited) = (self.shares.len(), self.invites.len());
        if scheduled && live == 0 && self.ranges.is_empty() {
            self.ranges = std::mem::take(&mut self.later);
        }
        if self.tail_due() {
            if live + invited > 0 {
                return Claim::Busy;
            }
            self.tail = Some(TailPlan {
                at: now,
                markers: false,
                payloads_failed: false,
                stalled: Vec::new(),
            });
            self.ranges = vec![Range::Tail { markers: false }];
        }
        let concurrency = concurrency.max(1);
        if live + invited >= concurrency || self.ranges.len() <= invited {
            return Claim::Busy;
        }
        let fair = self.ranges.len().div_ceil(concurrency - live);
        let take = fair.min(self.ranges.len() - invited);
        let ranges: Vec<Range> = self.ranges.drain(..take).collect();
        self.push_share(id, until, ranges.clone(), false);
        Claim::Records {
            ranges,
            alone: live + invited == 0,
            pool: self.ranges.len(),
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

    /// Continuations to hand on now: one for each slot of `concurrency`
    /// free of live shares and invitations that has a range of the pool
    /// nobody is invited to (the tail's items are such ranges), or one to
    /// plan the tail once the records are done and nobody holds the pass. `continuing`: the invocation asking will
    /// claim again itself (its slot and a range are its own).
    pub fn wanted(&self, concurrency: usize, continuing: bool) -> usize {
        if self.complete {
            return 0;
        }
        let busy = self.shares.len() + self.invites.len() + usize::from(continuing);
        if self.tail_due() {
            return usize::from(busy == 0);
        }
        let unclaimed = self.ranges.len().saturating_sub(self.invites.len());
        concurrency
            .max(1)
            .saturating_sub(busy)
            .min(unclaimed.saturating_sub(usize::from(continuing)))
    }

    /// Invites a continuation for each of `ids` (as many as
    /// [`Checkpoint::wanted`] says), standing until `until`.
    pub fn invite(&mut self, ids: &[uuid::Uuid], until: DateTime<Utc>) {
        let invites = ids.iter().map(|&id| Invite { id, until });
        self.invites.extend(invites);
    }

    /// How long the pass has taken so far, at `now`.
    pub fn age(&self, now: DateTime<Utc>) -> Duration {
        now - self.pass
    }
}

impl Checkpoint {
    /// Notes what the tail's items found in a share's release
    /// ([`TailPlan::note`]).
    pub fn note_tail(&mut self, markers: bool, payloads_failed: bool) {
        if let Some(t) = self.tail.as_mut() {
            t.note(markers, payloads_failed);
        }
    }

    /// Completes the pass once its tail is planned and nothing of it is
    /// left (nothing in the pool, no share holding it), moving the cursors
    /// of what the tail completed ([`TailPlan::end`]). `true` when this
    /// call completed it.
    pub fn finish_if_done(&mut self) -> bool {
        let Some(t) = self.tail.clone() else {
            return false;
        };
        let left = !self.ranges.is_empty() || !self.later.is_empty() || !self.shares.is_empty();
        if self.complete || left {
            return false;
        }
        self.complete = true;
        t.end(
            self.pass,
            Cursors {
                markers_until: &mut self.markers_until,
                payload_slice: &mut self.payload_slice,
                payloads_until: &mut self.payloads_until,
            },
        );
        true
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
    fn the_pass_tally_is_the_sum_of_its_shares_counts_and_its_summary_says_them_all() {
        let one = SweepSummary {
            scanned: 1,
            finished: 2,
            expired_deleted: 3,
            expired_kept: 4,
            errors: 5,
            reads: 6,
            lists: 7,
            past_deadline: 8,
            payloads_deleted: 9,
            markers_deleted: 10,
            ..SweepSummary::default()
        };
        let (mut tally, mut done) = (PassTally::default(), SweepSummary::default());
        for _ in 0..2 {
            tally.add(&one);
            done.add(&one);
        }
        done.complete = true;
        assert_eq!(tally.summary(false), done);
        done.dry_run = true;
        assert_eq!(tally.summary(true), done, "a dry run's pass");
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
        let first = cp.claim("a", (now, until), 3, (true, None));
        assert!(
            matches!(&first, Claim::Records { ranges, alone: true, pool: 6 } if ranges.len() == 4),
            "{first:?}"
        );
        let second = cp.claim("b", (now, until), 3, (false, None));
        assert!(
            matches!(&second, Claim::Records { ranges, alone: false, pool: 3 } if ranges.len() == 3),
            "{second:?}"
        );
        let third = cp.claim("c", (now, until), 3, (false, None));
        assert!(matches!(&third, Claim::Records { pool: 0, .. }));
        assert_eq!(cp.claim("d", (now, until), 3, (false, None)), Claim::Busy);
        // Every range is held by exactly one share.
        let mut held: Vec<Range> = cp.shares.iter().flat_map(|s| s.ranges.clone()).collect();
        held.sort_by_key(|r| format!("{r:?}"));
        let mut all = dirs(10);
        all.sort_by_key(|r| format!("{r:?}"));
        assert_eq!(held, all);
        assert_eq!((cp.tally.shares, cp.tally.peak_shares), (3, 3));
    }

    #[test]
    fn an_invitation_holds_a_slot_and_a_range_for_its_continuation_until_its_life_ends() {
        let (mut cp, now) = pass_of(dirs(10));
        let until = now + Duration::minutes(2);
        assert!(matches!(
            cp.claim("a", (now, until), 3, (true, None)),
            Claim::Records { pool: 6, .. }
        ));
        // Two free slots, six ranges: two continuations, and no more.
        assert_eq!(cp.wanted(3, false), 2);
        let ids = [uuid::Uuid::from_u128(1), uuid::Uuid::from_u128(2)];
        cp.invite(&ids, now + INVITE_LIFE);
        assert_eq!(cp.wanted(3, false), 0);
        // A schedule firing now finds every slot held or promised.
        assert_eq!(cp.claim("s", (now, until), 3, (true, None)), Claim::Busy);
        let one = cp.claim("b", (now, until), 3, (false, Some(ids[0])));
        assert!(matches!(&one, Claim::Records { ranges, pool: 3, .. } if ranges.len() == 3));
        let two = cp.claim("c", (now, until), 3, (false, Some(ids[1])));
        assert!(matches!(&two, Claim::Records { ranges, pool: 0, .. } if ranges.len() == 3));
        assert!(cp.invites.is_empty());
        // One range, four slots: one continuation, and the range is its.
        let (mut cp, now) = pass_of(dirs(2));
        let until = now + Duration::hours(1);
        cp.claim("a", (now, until), 4, (true, None));
        assert_eq!((cp.ranges.len(), cp.wanted(4, false)), (1, 1));
        assert_eq!(cp.wanted(4, true), 0, "the asker claims it itself");
        cp.invite(&ids[..1], now + INVITE_LIFE);
        assert_eq!(cp.claim("s", (now, until), 4, (true, None)), Claim::Busy);
        // A lost invitation (its message never came) is dropped at its end.
        let lost = now + INVITE_LIFE;
        let taken = cp.claim("s", (lost, until), 4, (true, None));
        assert!(matches!(&taken, Claim::Records { ranges, .. } if ranges.len() == 1));
        assert!(cp.invites.is_empty());
        // Once the records are done, one continuation for the tail.
        cp.release("a", (vec![], vec![]), &SweepSummary::default());
        assert_eq!(cp.wanted(4, false), 0, "a share still holds a range");
        cp.release("s", (vec![], vec![]), &SweepSummary::default());
        assert_eq!(cp.wanted(4, false), 1);
        cp.invite(&ids[1..], lost + INVITE_LIFE);
        assert_eq!(cp.claim("x", (lost, until), 4, (false, None)), Claim::Busy);
        let tail = cp.claim("t", (lost, until), 4, (false, Some(ids[1])));
        assert!(
            matches!(&tail, Claim::Records { ranges, .. } if *ranges == [Range::Tail { markers: false }]),
            "{tail:?}"
        );
    }

    #[test]
    fn a_dead_shares_ranges_go_back_to_the_pool_once_its_lease_runs_out_and_not_before() {
        let (mut cp, now) = pass_of(dirs(2));
        let until = now + Duration::minutes(2);
        cp.claim("dead", (now, until), 1, (true, None));
        let just_before = until - Duration::seconds(1);
        assert_eq!(
            cp.claim("b", (just_before, until), 1, (true, None)),
            Claim::Busy
        );
        let taken = cp.claim("b", (until, until + Duration::minutes(2)), 1, (true, None));
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
        cp.claim("a", (now, until), 2, (true, None));
        cp.claim("b", (now, until), 2, (false, None));
        let one = SweepSummary {
            scanned: 3,
            reads: 1,
            ..SweepSummary::default()
        };
        assert!(cp.release("a", (dirs(1), vec![]), &one));
        assert_eq!(cp.wanted(2, false), 1, "one free slot, one range");
        assert!(cp.release("b", (vec![], vec![]), &one));
        // The left range again; then the records are done.
        assert!(matches!(
            cp.claim("c", (now, until), 2, (false, None)),
            Claim::Records { .. }
        ));
        assert!(!cp.records_done());
        assert!(cp.release("c", (vec![], vec![]), &one));
        assert!(cp.records_done());
        assert_eq!(cp.wanted(2, false), 1, "the tail");
        let tail = cp.claim("d", (now, until), 2, (false, None));
        assert!(matches!(
            &tail,
            Claim::Records {
                alone: true,
                pool: 0,
                ..
            }
        ));
        assert_eq!(cp.tail.as_ref().map(|t| t.at), Some(now));
        assert_eq!(cp.claim("e", (now, until), 2, (false, None)), Claim::Busy);
        assert_eq!(cp.wanted(2, false), 0);
        // The tail's first item leaves the payload check's items: the
        // pass goes on until the last of them is released done.
        let items = vec![
            Range::Recent {
                token: None,
                from: 0,
            },
            Range::Slice {
                slice: 0,
                after: None,
            },
        ];
        let tally = SweepSummary {
            markers_deleted: 2,
            ..SweepSummary::default()
        };
        assert!(cp.release("d", (items, vec![]), &tally));
        cp.note_tail(true, false);
        assert!(!cp.finish_if_done() && !cp.complete);
        assert_eq!(cp.wanted(2, false), 2, "one continuation an item");
        let rest = cp.claim("e", (now, until), 2, (false, None));
        assert!(matches!(&rest, Claim::Records { ranges, pool: 1, .. } if ranges.len() == 1));
        assert!(cp.release("e", (vec![], vec![]), &SweepSummary::default()));
        assert!(!cp.finish_if_done(), "an item is still in the pool");
        cp.claim("f", (now, until), 2, (false, None));
        assert!(!cp.finish_if_done(), "a share holds the last item");
        assert!(cp.release("f", (vec![], vec![]), &SweepSummary::default()));
        assert!(cp.finish_if_done());
        assert!(!cp.finish_if_done(), "once");
        assert!(cp.complete);
        assert_eq!((cp.tally.scanned, cp.tally.reads), (9, 3));
        assert_eq!(cp.tally.markers_deleted, 2);
        // A first check: a day's slices, 0 to 8.
        assert_eq!((cp.markers_until, cp.payload_slice), (Some(cp.pass), 9));
        assert_eq!(cp.payloads_until, Some(now));
        assert_eq!(cp.claim("g", (now, until), 2, (false, None)), Claim::Over);
        // Its length so far (`SweepPassSeconds`).
        let length = Duration::minutes(3);
        assert_eq!(cp.age(now + length), length);
    }

    #[test]
    fn a_checkpoint_of_an_earlier_version_reads_without_a_tail_and_writes_none_until_planned() {
        let old = r#"{"pass":"2026-01-03T00:00:00Z","ranges":[{"kind":"dirs","token":null}],
            "shares":[{"id":"t","until":"2026-01-03T00:02:00Z","tail":true}],"payload_slice":9}"#;
        let cp: Checkpoint = serde_json::from_str(old).unwrap();
        assert_eq!((cp.tail.clone(), cp.payload_slice), (None, 9));
        assert!(cp.shares[0].tail);
        let text = serde_json::to_string(&Checkpoint::new_pass(None, cp.pass, ListOrder::Any));
        assert!(!text.unwrap().contains("tail"));
    }

    #[test]
    fn a_failed_range_waits_for_a_scheduled_run_and_a_continuation_does_not_take_it() {
        let (mut cp, now) = pass_of(dirs(1));
        let until = now + Duration::minutes(2);
        cp.claim("a", (now, until), 2, (true, None));
        cp.release("a", (vec![], dirs(1)), &SweepSummary::default());
        assert!(!cp.records_done());
        assert_eq!(cp.wanted(2, false), 0, "nothing is handed on for it");
        assert_eq!(cp.claim("b", (now, until), 2, (false, None)), Claim::Busy);
        let c = cp.claim("c", (now, until), 2, (true, None));
        assert!(matches!(&c, Claim::Records { ranges, .. } if *ranges == dirs(1)));
    }

    #[test]
    fn an_earlier_versions_whole_pass_lease_holds_the_pass_until_it_runs_out() {
        let (mut cp, now) = pass_of(dirs(1));
        cp.running_until = Some(now + Duration::seconds(1));
        assert!(cp.leased_at(now));
        let until = now + Duration::minutes(2);
        assert_eq!(cp.claim("a", (now, until), 4, (true, None)), Claim::Busy);
        let later = now + Duration::seconds(1);
        assert!(!cp.leased_at(later), "a lease ending now has run out");
        assert!(matches!(
            cp.claim("a", (later, until), 4, (true, None)),
            Claim::Records { .. }
        ));
        assert_eq!(cp.running_until, None, "never written again");
    }

    #[test]
    fn a_tail_whose_payload_check_failed_completes_the_pass_and_leaves_the_payload_cursor() {
        let (mut cp, now) = pass_of(vec![]);
        let until = now + Duration::minutes(2);
        cp.claim("a", (now, until), 2, (true, None));
        cp.release("a", (vec![], vec![]), &SweepSummary::default());
        cp.note_tail(false, true);
        assert!(cp.finish_if_done());
        assert_eq!((cp.markers_until, cp.payloads_until), (None, None));
        assert_eq!(cp.payload_slice, 0);
    }
}
