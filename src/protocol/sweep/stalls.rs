//! The pass's tail's rule for an item that makes no progress (docs/
//! decisions.md, "The pass's tail at 10^9"): one that had a whole
//! invocation (its share the invocation's first claim) and neither moved
//! its place on nor deleted anything goes back to the pool with its place
//! noted in the tail's plan; at the same place a second time it is given
//! up, and the pass completes without moving the payload cursor, so that a
//! tail that cannot finish does not hand itself on for ever.

use super::checkpoint::Checkpoint;
use super::ranges::Range;
use super::tail::TailDone;

/// The most stalled places a tail keeps: a tail whose items keep stalling
/// at new places forgets the oldest (each such place then gets one more
/// invocation).
const STALLS_KEPT: usize = 64;

impl TailDone {
    /// The share's release on `cp` (`id`'s): an item that made no progress
    /// in a whole invocation goes back to the pool with its place noted,
    /// and is given up only if it had stalled at the same place before (a
    /// whole invocation is not always a whole invocation's time for it: the
    /// claim's contention, its share's other items). An item given up
    /// leaves the payload cursor where it is. `false` if the share was no
    /// longer `id`'s (nothing changed).
    pub(super) fn release_on(&self, cp: &mut Checkpoint, id: &str) -> bool {
        let before: &[u64] = cp.tail.as_ref().map_or(&[], |t| &t.stalled);
        let (mut left, mut noted, mut gave_up) = (self.left.clone(), Vec::new(), false);
        for item in &self.stalled {
            let at = place_hash(item);
            if before.contains(&at) {
                tracing::warn!(
                    ?item,
                    "an item of the pass's tail made no progress in two whole invocations at the same place: given up, the next pass takes it again"
                );
                gave_up = true;
            } else {
                noted.push(at);
                left.push(item.clone());
            }
        }
        let mine = cp.release(id, (left, vec![]), &self.tally);
        if mine {
            cp.note_tail(self.markers, self.failed || gave_up);
            if let Some(t) = cp.tail.as_mut() {
                t.stalled.extend(noted);
                let over = t.stalled.len().saturating_sub(STALLS_KEPT);
                t.stalled.drain(..over);
            }
        }
        mine
    }
}

/// A stable hash of `item` and its place (FNV-1a of its JSON): the same in
/// every invocation and build.
fn place_hash(item: &Range) -> u64 {
    let text = serde_json::to_vec(item).unwrap_or_default();
    text.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use chrono::{DateTime, Utc};

    use super::*;
    use crate::config::ListOrder;
    use crate::protocol::sweep::checkpoint::{Claim, TailPlan};

    #[test]
    fn an_item_stalled_at_the_same_place_twice_is_given_up_once_it_goes_back() {
        let at = DateTime::<Utc>::UNIX_EPOCH;
        let mut cp = Checkpoint::new_pass(None, at, ListOrder::Bytes);
        let plan = TailPlan {
            at,
            markers: false,
            payloads_failed: false,
            stalled: vec![],
        };
        let stuck = Range::Slice {
            slice: 3,
            after: Some("payloads/03".into()),
        };
        let moved = Range::Slice {
            slice: 3,
            after: Some("payloads/03ff".into()),
        };
        (cp.tail, cp.ranges) = (Some(plan), vec![stuck.clone()]);
        let until = at + chrono::Duration::minutes(5);
        let stalls = |item: &Range, id: &str, cp: &mut Checkpoint| {
            let claimed = cp.claim(id, (at, until), 1, (false, None));
            assert!(matches!(claimed, Claim::Records { .. }));
            let done = TailDone {
                stalled: vec![item.clone()],
                ..TailDone::default()
            };
            assert!(done.release_on(cp, id));
            cp.tail.as_ref().unwrap().payloads_failed
        };
        // Once: back in the pool with its place; the cursor may still move.
        assert!(!stalls(&stuck, "a", &mut cp));
        assert_eq!(cp.ranges, vec![stuck.clone()]);
        // At another place (it moved on since): back again.
        cp.ranges = vec![moved.clone()];
        assert!(!stalls(&moved, "b", &mut cp));
        assert_eq!(cp.ranges, vec![moved.clone()]);
        // At the same place a second time: given up, the cursor stays.
        assert!(stalls(&moved, "c", &mut cp));
        assert!(cp.ranges.is_empty());
        assert_eq!(place_hash(&stuck), place_hash(&stuck.clone()));
        assert_ne!(place_hash(&stuck), place_hash(&moved));
    }
}
