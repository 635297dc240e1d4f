//! The audit: what the world left (the bucket, the workers' runs, every
//! process's log) against what the producers sent and were answered. The
//! evidence is collected once ([`Evidence::collect`]); [`audit`] (in
//! judge.rs) is a plain function of it, so that the unit tests of
//! tests/chaos.rs can show each count catching what it is for without a
//! world.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use serde_json::Value;

#[allow(unused_imports)]
pub use super::compare::*;
#[allow(unused_imports)]
pub use super::evidence::*;
pub use super::judge::audit;
use super::producers::{Answer, Item, KeyId};

/// One run of a task by a worker, as its handler wrote it.
#[derive(Debug, Clone)]
pub struct Run {
    pub id: String,
    pub input: Value,
}

/// An object of the bucket: its key, body and when it was last written.
#[derive(Debug, Clone)]
pub struct Obj {
    pub key: String,
    pub body: Vec<u8>,
    pub last_modified: DateTime<Utc>,
}

/// What the audit judges.
#[derive(Debug, Default)]
pub struct Evidence {
    pub items: Vec<Item>,
    pub answers: Vec<Answer>,
    /// The final replay of every key with a record: its answer.
    pub replays: Vec<(KeyId, Answer)>,
    pub sqs_taken: HashMap<String, usize>,
    pub invocation_errors: usize,
    pub records: Vec<Obj>,
    /// Task objects as they are now.
    pub tasks: Vec<Obj>,
    /// Each task object's first version: the one this service wrote.
    pub first_tasks: Vec<Obj>,
    /// Task ids that ever had a version in the bucket (deleted ones too).
    pub task_history: HashSet<String>,
    pub markers: Vec<String>,
    pub payloads: Vec<Obj>,
    pub rejected: Vec<Obj>,
    pub runs: Vec<Run>,
    /// (log file, line) of every line that says a process panicked.
    pub panics: Vec<(String, String)>,
    pub now: DateTime<Utc>,
    pub finish_window: chrono::Duration,
    pub late_write: chrono::Duration,
    /// When the last scheduled pass began, and from what age a payload
    /// with no task is its to delete.
    pub last_pass: Option<DateTime<Utc>>,
    pub orphan_after: chrono::Duration,
    /// When a due message first named each record.
    pub due_named: HashMap<String, DateTime<Utc>>,
    /// The submitters send the due messages beside their records' PUTs
    /// (`RECORD_EVENTS=submitter`, `DUE_MESSAGE=with_claim`): the one
    /// configuration whose window the contract leaves to a replay.
    pub with_claim_window: bool,
    /// Items whose client gave up after a killed invocation.
    pub abandoned: HashSet<usize>,
}

/// Every count of the audit. All must be zero but `tasks_run_twice` and
/// `young_orphan_payloads`, which are reported.
#[derive(Debug, Default, Clone)]
pub struct Audit {
    pub two_task_ids_for_one_key: u64,
    pub lost_submits: u64,
    pub unrun_tasks: u64,
    pub runs_of_tasks_not_in_the_bucket: u64,
    pub stale_markers: u64,
    pub records_in_flight_after_their_windows: u64,
    pub unsettled_replays: u64,
    pub orphan_payloads: u64,
    pub bad_5xx_answers: u64,
    pub invocation_errors: u64,
    pub panics: u64,
    pub inputs_changed: u64,
    pub invalid_bodies_that_wrote: u64,
    pub rejected_without_being_invalid: u64,
    pub invalid_messages_not_rejected: u64,
    pub conflicts_accepted: u64,
    pub tasks_of_no_submit: u64,
    /// Reported, not zero: buquet's workers are at-least-once.
    pub tasks_run_twice: u64,
    /// Reported: payloads the last pass was too early to delete.
    pub young_orphan_payloads: u64,
    /// Reported: keyless tasks no worker ran whose submit was never
    /// answered 201 (killed, or answered 503, between its task and its
    /// marker): nothing finishes a submit without a record, so the task
    /// stays out of the ready index.
    pub unanswered_keyless_tasks_never_run: u64,
    /// Reported: under `RECORD_EVENTS=submitter` with
    /// `DUE_MESSAGE=with_claim`, records in flight past their windows that
    /// the contract leaves to their key's next submit (docs/protocol.md,
    /// "Due messages from the submitter"; under `before_claim`, the default,
    /// there is no such record and any is a zero count): no submit of the key was ever
    /// answered or taken, one was abandoned by its client after a killed
    /// invocation, and no due message named the record before its finish
    /// deadline (the process died between its record PUT and its message).
    /// Their final replays answer `missing` (guarantee 7) and are counted
    /// here, not as unsettled. Any other record in flight is a zero count.
    pub records_left_to_a_replay_by_a_killed_submitter: u64,
    /// Reported: markers naming no task that no record names: a keyless
    /// submit's whose task never landed (its marker did).
    pub markers_of_keyless_tasks_never_written: u64,
    /// Reported: inputs whose doubles a worker moved by one unit in the
    /// last place when it rewrote the task (buquet 0.1 parses JSON without
    /// serde_json's `float_roundtrip`), the first version being exact.
    pub doubles_moved_by_the_worker: u64,
    pub tasks: u64,
    pub runs: u64,
    pub keys: u64,
    pub records: u64,
    /// A few examples of each nonzero count, for the log.
    pub examples: Vec<String>,
}

impl Audit {
    /// The counts that must be zero, by name.
    pub fn zero_counts(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("two task ids for one key", self.two_task_ids_for_one_key),
            ("lost submits", self.lost_submits),
            ("unrun tasks", self.unrun_tasks),
            (
                "runs of tasks not in the bucket",
                self.runs_of_tasks_not_in_the_bucket,
            ),
            ("stale markers", self.stale_markers),
            (
                "records still in flight after their windows",
                self.records_in_flight_after_their_windows,
            ),
            (
                "final replays not answered 200 with a task",
                self.unsettled_replays,
            ),
            ("orphan payloads", self.orphan_payloads),
            (
                "5xx answers other than 503 with Retry-After",
                self.bad_5xx_answers,
            ),
            ("invocation errors", self.invocation_errors),
            ("panics in a log", self.panics),
            ("inputs changed", self.inputs_changed),
            (
                "invalid bodies that wrote anything",
                self.invalid_bodies_that_wrote,
            ),
            (
                "rejected/ objects of valid messages",
                self.rejected_without_being_invalid,
            ),
            (
                "invalid messages not in rejected/",
                self.invalid_messages_not_rejected,
            ),
            ("conflicts accepted", self.conflicts_accepted),
            ("tasks of no submit", self.tasks_of_no_submit),
        ]
    }

    pub fn nonzero(&self) -> Vec<(&'static str, u64)> {
        self.zero_counts()
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .collect()
    }
}
