//! The sweeper (docs/protocol.md, "The sweeper"): finishes interrupted submits and
//! deletes expired records. It is woken two ways, and neither lists the
//! bucket on the finishing path.
//!
//! **Record events (the main path), [`Engine::sweep_record`](crate::protocol::engine::Engine::sweep_record).** Every record
//! write sends an S3 event to the due queue, which hands it to the sweeper
//! `STALE_CREATING_AFTER_SECONDS` later. The sweeper reads that one record
//! (one GET when there is nothing to do) and acts on its current state, so
//! its work per record write is the same however many records the bucket
//! holds. The message handling is `intake::due`.
//!
//! **The scheduled pass, [`Engine::sweep_share`](crate::protocol::engine::Engine::sweep_share).** Hygiene and a safety
//! net, once a day: it lists `idempotency/` and reads a record only in the pass during
//! which its age (since its last write) crosses a threshold, so each record
//! is read O(1) times over its life however often passes run:
//!
//! - `STALE_CREATING_AFTER_SECONDS`, while the record can still be finished
//!   (younger than the finish window): a record whose event never came;
//! - the default TTL, when most records expire;
//! - 1 h × 2^k beyond the default TTL, for records with longer TTLs (they go
//!   at most twice their TTL late; S3's lifecycle rule is the backstop, and an
//!   expired record counts as absent whether or not it is deleted). Records
//!   with shorter TTLs are deleted at the default TTL's age.
//!
//! A pass judges every record against one window, `(previous pass, pass]`,
//! where `pass` is the one clock reading at which the pass began: resumed
//! runs judge their records against the same window, so every crossing is
//! judged by exactly one pass. It lists ranges of the key space side by side:
//! one range per scope, the scopes found a page of folders at a time
//! (`Delimiter: /`); a scope whose first page says it is large (its last key
//! reached a small part of the hash space) is cut into ranges of about
//! `pass_range_records` records each by bounds in the hash space, at most
//! `MAX_RANGES`, so that it is listed by many listings at once and nearly
//! every listing comes back full. It stops before the invocation's deadline
//! and keeps the ranges still to list in `sweeper/checkpoint.json`. One pass
//! is worked by up to `PASS_CONCURRENCY` invocations at once, each holding a
//! share of its ranges by a lease in the checkpoint (compare-and-swap), and
//! handing the rest on to another invocation when its deadline comes
//! (`share.rs`, `checkpoint.rs`); a pass opens only where the last one is
//! complete, so two passes never overlap.
//!
//! That is `LIST_ORDER=bytes`: it relies on listings in byte order and on
//! `StartAfter`. Under `LIST_ORDER=any` (stores that list in their own
//! order, or without `StartAfter`, or only by prefixes that end in `/`: S3
//! Express) the pass relies on neither: it finds the scopes as the folders
//! right under `idempotency/` (`Delimiter: /`), lists each scope's folder
//! page by page, folders side by side, and keeps each folder's place as the
//! store's own continuation token (`folders.rs`). Every record is listed
//! once per pass however the store orders them; the window, the thresholds,
//! the deadline and the checkpoint are the same.
//!
//! Once its records are done, a pass keeps the workers' ready index true
//! (`markers.rs`): it lists `ready/` and judges each marker by its own age,
//! not by its record, deleting one that names a task a worker has taken or
//! one that was never written; then the input payloads no task names
//! (`payloads.rs`).

mod checkpoint;
mod collect;
mod folders;
pub mod hand_on;
mod markers;
mod pass;
mod payload_tasks;
mod payloads;
mod ranges;
mod record;
mod share;
mod stalls;
mod tail;
mod tail_plan;

pub use hand_on::{Continuation, HandOn};
pub use payloads::{PAYLOAD_CYCLE_DAYS, PAYLOAD_SLICES, PayloadPlan};
pub use share::ShareOutcome;

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::error::SubmitError;

/// Where the sweeper keeps its place.
pub const CHECKPOINT_KEY: &str = "sweeper/checkpoint.json";
/// Where the records are.
pub const RECORDS_PREFIX: &str = "idempotency/";

/// Records read (and finished or deleted) at once: by one range of a pass, or one due batch.
pub const READS_AT_ONCE: usize = 16;
/// Ranges listed at once by a pass.
pub const RANGES_AT_ONCE: usize = 32;
/// Keys per listing page (S3's largest).
const PAGE: usize = 1000;
/// A large scope is listed by a range for about each
/// `Settings::pass_range_records` of its records, and by at most this many
/// ranges: what a pass holds stays bounded by its scopes, whatever their
/// size.
const MAX_RANGES: u64 = 64;
const HEX: &[u8; 16] = b"0123456789abcdef";

/// How one scheduled pass runs.
#[derive(Debug, Clone, Default)]
pub struct SweepOptions {
    /// Report what would be done, reading as the real run reads; change
    /// nothing (not even the checkpoint).
    pub dry_run: bool,
    /// Start no request at or after this time (by the engine's clock),
    /// keeping the place.
    pub deadline: Option<DateTime<Utc>>,
    /// Stop after this many listed records (tests, small batches); the pass
    /// then lists one range at a time.
    pub max_records: Option<usize>,
    /// The pass this invocation continues (a [`Continuation`] handed on by
    /// another); `None` for a scheduled run, which may open a new pass.
    pub continuation: Option<Continuation>,
    /// The instant the schedule fired for this run, when it says (the pass
    /// queue's schedule message): a run that finds a complete pass begun at
    /// or after it opens none (that pass was this message's, received
    /// again after its invocation died).
    pub scheduled_at: Option<DateTime<Utc>>,
}

/// What a sweep did: a scheduled pass, or a batch of record events.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SweepSummary {
    /// Records listed (a pass) or named by events (the due queue).
    pub scanned: u64,
    /// Records for which something was missing (the task object, its
    /// marker) and the sweeper wrote it. A dry run reads as the real run
    /// does and counts the records it would write for.
    pub finished: u64,
    /// Expired records deleted (or, in a dry run, that would be).
    pub expired_deleted: u64,
    /// Expired records left for the lifecycle rule: `CONDITIONAL_DELETE=off`
    /// on an unversioned bucket, where no DELETE can be made safe (an
    /// expired record counts as absent whether or not it is deleted).
    #[serde(skip)]
    pub expired_kept: u64,
    /// Records that could not be handled: `creating` past the finish
    /// deadline, corrupt, or storage failures.
    pub errors: u64,
    /// The pass reached the end of every range (events: always true).
    pub complete: bool,
    /// A dry run: nothing was written or deleted.
    pub dry_run: bool,
    /// Records read (GET) in this run.
    #[serde(skip)]
    pub reads: u64,
    /// Listings (LIST requests) made in this run.
    #[serde(skip)]
    pub lists: u64,
    /// Of `errors`: `creating` records past their finish deadline.
    #[serde(skip)]
    pub past_deadline: u64,
    /// Events whose record was still too young: handed back to the queue.
    #[serde(skip)]
    pub early: u64,
    /// Events acknowledged without a read: test events, keys outside
    /// `idempotency/`, other buckets.
    #[serde(skip)]
    pub ignored: u64,
    /// Messages that were not S3 notifications (logged and acknowledged).
    #[serde(skip)]
    pub unrecognized: u64,
    /// This run went on with a pass that an earlier run had to stop.
    #[serde(skip)]
    pub resumed: bool,
    /// Every slot of the pass was held, or what was left: this run did
    /// nothing.
    #[serde(skip)]
    pub busy: bool,
    /// Input payloads that no task named, deleted by the pass: those whose
    /// age crossed the orphan age since the last complete check, and those
    /// of the pass's slices whatever their age (counted, not deleted, in a
    /// dry run).
    #[serde(skip)]
    pub payloads_deleted: u64,
    /// Markers of the ready index that named a task no worker can claim
    /// from them (taken, or never written), deleted by the pass (counted,
    /// not deleted, in a dry run).
    #[serde(skip)]
    pub markers_deleted: u64,
    /// Submitters' due messages that found no record while its claim could
    /// still land: handed back to the queue (`SweepDueEarly`, with
    /// [`SweepSummary::early`]).
    #[serde(skip)]
    pub no_record_yet: u64,
    /// Submitters' due messages that found no record once its claim could
    /// land no more: their submit died before any PUT, or the record has
    /// gone since; acknowledged (`SweepDueNoRecord`).
    #[serde(skip)]
    pub due_no_record: u64,
}

impl SweepSummary {
    /// Adds another run's counts to this one.
    pub fn add(&mut self, o: &SweepSummary) {
        self.scanned += o.scanned;
        self.finished += o.finished;
        self.expired_deleted += o.expired_deleted;
        self.expired_kept += o.expired_kept;
        self.errors += o.errors;
        self.reads += o.reads;
        self.lists += o.lists;
        self.past_deadline += o.past_deadline;
        self.early += o.early;
        self.ignored += o.ignored;
        self.unrecognized += o.unrecognized;
        self.payloads_deleted += o.payloads_deleted;
        self.markers_deleted += o.markers_deleted;
        self.no_record_yet += o.no_record_yet;
        self.due_no_record += o.due_no_record;
    }
}

/// What the sweeper did with one record it read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordOutcome {
    /// Nothing to do: nothing missing, `ready`, not ours (no `status`),
    /// gone, or (in a pass) `creating` and too young.
    Nothing,
    /// A `creating` record whose task object or marker was missing: the
    /// sweeper wrote what was.
    Finished,
    /// Past `expires_at`: deleted (If-Match, or by the version that was
    /// read under `CONDITIONAL_DELETE=off`).
    ExpiredDeleted,
    /// Past `expires_at` and left for the lifecycle rule: no safe DELETE
    /// (`CONDITIONAL_DELETE=off` on an unversioned bucket).
    ExpiredKept,
    /// `creating` and younger than `STALE_CREATING_AFTER_SECONDS`: its event
    /// came early; try again later.
    Early,
    /// No record, for a submitter's due message whose claim may still land
    /// (sent before its record's PUT, or beside it): try again later.
    NoRecordYet,
    /// No record, for a submitter's due message whose claim can land no
    /// more: acknowledged and counted.
    NoRecord,
    /// `creating` past its finish deadline: left as it is (an error).
    PastDeadline,
    /// Not a record of the layout: left as it is (an error).
    Corrupt,
    /// The store failed; worth trying again when retryable.
    Failed(SubmitError),
}

impl RecordOutcome {
    /// Should the event be delivered again (or the pass stop here)?
    pub fn try_again_later(&self) -> bool {
        match self {
            RecordOutcome::Early | RecordOutcome::NoRecordYet => true,
            RecordOutcome::Failed(e) => {
                e.is_retryable() && !matches!(e, SubmitError::Undetermined { .. })
            }
            _ => false,
        }
    }

    /// Counts this outcome of one read into `s`.
    pub fn tally(&self, s: &mut SweepSummary) {
        s.reads += 1;
        match self {
            RecordOutcome::Nothing => {}
            RecordOutcome::Finished => s.finished += 1,
            RecordOutcome::ExpiredDeleted => s.expired_deleted += 1,
            RecordOutcome::ExpiredKept => s.expired_kept += 1,
            RecordOutcome::Early => s.early += 1,
            RecordOutcome::NoRecordYet => s.no_record_yet += 1,
            RecordOutcome::NoRecord => s.due_no_record += 1,
            RecordOutcome::PastDeadline => {
                s.past_deadline += 1;
                s.errors += 1;
            }
            // Cut short by the run's own deadline: not an error, it goes on
            // next run.
            RecordOutcome::Failed(SubmitError::DeadlineExceeded) => {}
            RecordOutcome::Corrupt | RecordOutcome::Failed(_) => s.errors += 1,
        }
    }
}
