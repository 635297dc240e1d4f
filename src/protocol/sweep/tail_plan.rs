//! The pass's tail in its checkpoint (`checkpoint.rs`): its plan, made
//! once by the claim that finds the records done (what its items judge by,
//! what they found), the pass's end, which moves the cursors of what the
//! tail completed, and what a share's items judge by (`tail.rs`,
//! `collect.rs`).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::payloads::{Judge, PayloadPlan};
use super::ranges::SlicesPlace;
use super::{SweepOptions, SweepSummary};

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

/// The cursors a complete pass moves (the checkpoint's): where the ready
/// index's last complete scan ended, the payload check's next slice, and
/// its last complete check's time.
pub(super) struct Cursors<'a> {
    pub markers_until: &'a mut Option<DateTime<Utc>>,
    pub payload_slice: &'a mut u32,
    pub payloads_until: &'a mut Option<DateTime<Utc>>,
}

impl TailPlan {
    /// Notes what the tail's items found in a share's release: the ready
    /// index's scan completed (`markers`), or an item of the payload check
    /// failed (`payloads_failed`).
    pub fn note(&mut self, markers: bool, payloads_failed: bool) {
        self.markers |= markers;
        self.payloads_failed |= payloads_failed;
    }

    /// The pass `pass` completed with this tail: the cursors of what the
    /// tail completed move on (the ready index's scan to the pass, the
    /// payload check to its next slice, at the tail's time).
    pub fn end(&self, pass: DateTime<Utc>, c: Cursors<'_>) {
        if self.markers {
            *c.markers_until = Some(pass);
        }
        if !self.payloads_failed {
            let plan = self.payloads(*c.payload_slice, *c.payloads_until);
            *c.payload_slice = plan.next_slice();
            *c.payloads_until = Some(self.at);
        }
    }
}

/// The most candidates a round of a [`Range::Slices`](super::ranges::Range::Slices) item holds: 64 Ki
/// ids (1 MiB), and 8 KiB of bits (16 KiB of hex) in the checkpoint while
/// its listing is cut short; its suspects (payloads no listed task named:
/// orphans, nearly all) are kept there by id while the HEAD path confirms
/// them. A bucket with more payloads of a day's folder digit lists that
/// folder once a round.
pub(super) const ROUND: usize = 1 << 16;

/// A [`Range::Slices`](super::ranges::Range::Slices) item's round at work: its slices (`from..to`) and
/// place, and its share's context, options and tally.
pub(super) struct RoundAt<'a> {
    pub group: (u32, u32),
    pub place: &'a mut SlicesPlace,
    pub cx: &'a TailCx,
    pub opts: &'a SweepOptions,
    pub tally: &'a mut SweepSummary,
}

/// What a share's items judge by: the tail's time and plan, the ready
/// index's window.
pub(super) struct TailCx {
    pub(super) judge: Judge,
    pub(super) plan: PayloadPlan,
    pub(super) markers_window: (Option<DateTime<Utc>>, DateTime<Utc>),
}
