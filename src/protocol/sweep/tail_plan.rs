//! The pass's tail in its checkpoint (`checkpoint.rs`): its plan, made
//! once by the claim that finds the records done (what its items judge by,
//! what they found), and the pass's end, which moves the cursors of what
//! the tail completed.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::checkpoint::Checkpoint;
use super::payloads::PayloadPlan;

/// The pass's tail, planned once when its records are done: what its items
/// judge by and what they found, for the cursors the pass's end moves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct TailPlan {
    /// S3's time when the tail was planned: every item judges payloads'
    /// ages at it (so an item resumed in another invocation judges the same
    /// payloads), and the payload check's cursor says it at the end.
    pub at: DateTime<Utc>,
    /// The ready index's scan completed without a failure.
    #[serde(default)]
    pub markers: bool,
    /// An item of the payload check met a failure, or was given up (two
    /// whole invocations without progress): the payload cursor stays, the
    /// next pass takes the same slices again.
    #[serde(default)]
    pub payloads_failed: bool,
    /// The places (hashed) where an item made no progress in a whole
    /// invocation: at the same place again, it is given up (`tail.rs`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stalled: Vec<u64>,
}

impl TailPlan {
    /// The payload check of this tail, from the cursor `cursor` after the
    /// last complete check at `last`.
    pub fn payloads(&self, cursor: u32, last: Option<DateTime<Utc>>) -> PayloadPlan {
        PayloadPlan::after(cursor, last, self.at)
    }
}

impl Checkpoint {
    /// Notes what the tail's items found in a share's release: the ready
    /// index's scan completed (`markers`), or an item of the payload check
    /// failed (`payloads_failed`).
    pub fn note_tail(&mut self, markers: bool, payloads_failed: bool) {
        if let Some(t) = self.tail.as_mut() {
            t.markers |= markers;
            t.payloads_failed |= payloads_failed;
        }
    }

    /// Completes the pass once its tail is planned and nothing of it is
    /// left (nothing in the pool, no share holding it): the cursors of what
    /// the tail completed move on (the ready index's scan to the pass, the
    /// payload check to its next slice, at the tail's time). `true` when
    /// this call completed it.
    pub fn finish_if_done(&mut self) -> bool {
        let Some(t) = self.tail.clone() else {
            return false;
        };
        let left = !self.ranges.is_empty() || !self.later.is_empty() || !self.shares.is_empty();
        if self.complete || left {
            return false;
        }
        self.complete = true;
        if t.markers {
            self.markers_until = Some(self.pass);
        }
        if !t.payloads_failed {
            let plan = t.payloads(self.payload_slice, self.payloads_until);
            self.payload_slice = plan.next_slice();
            self.payloads_until = Some(t.at);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use chrono::Duration;

    use super::*;
    use crate::config::ListOrder;
    use crate::protocol::sweep::SweepSummary;

    fn pass_of(ranges: Vec<super::super::ranges::Range>) -> (Checkpoint, DateTime<Utc>) {
        let now: DateTime<Utc> = "2026-01-03T00:00:00Z".parse().unwrap();
        let mut cp = Checkpoint::new_pass(None, now, ListOrder::Any);
        cp.ranges = ranges;
        (cp, now)
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
