use super::*;

// ---- the store the schedules run on ----

/// The bucket a schedule runs on, and the settings that fit it: S3, or a
/// store that lacks a capability, as the in-memory store can switch each
/// off (the README's table of stores), with the setting that store needs.
#[derive(Debug, Clone, Copy)]
pub(super) struct Profile {
    pub(super) behaviour: Behaviour,
    pub(super) versioned: bool,
    /// `CONDITIONAL_DELETE`
    pub(super) conditional_delete: bool,
    /// `LIST_ORDER`
    pub(super) list_order: ListOrder,
}

impl Profile {
    pub(super) fn s3() -> Self {
        Profile {
            behaviour: Behaviour::default(),
            versioned: false,
            conditional_delete: true,
            list_order: ListOrder::Bytes,
        }
    }

    /// What no schedule can reach on this store (the coverage check skips
    /// it): expired records are either deleted or kept, never both.
    pub(super) fn unreachable(&self) -> &'static [&'static str] {
        if !self.conditional_delete && !self.versioned {
            // (A key is reset there too: a reset writes, it deletes
            // nothing.)
            &["expired records deleted"]
        } else {
            &["expired records left for the lifecycle rule"]
        }
    }
}

// ---- coverage ----

/// What the schedules exercised, so that the test can show it covered the
/// cases it claims to.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Stats {
    pub(super) crashes: u64,
    pub(super) lost_answers: u64,
    pub(super) late_landings: u64,
    pub(super) refused_at_deadline: u64,
    pub(super) same_key_contention: u64,
    pub(super) task_deletions: u64,
    pub(super) recovered: u64,
    pub(super) replayed: u64,
    pub(super) missing: u64,
    pub(super) input_conflicts: u64,
    pub(super) task_type_conflicts: u64,
    pub(super) undetermined: u64,
    pub(super) storage_errors: u64,
    pub(super) replaced: u64,
    pub(super) tenant_submits: u64,
    pub(super) queue_scope_submits: u64,
    pub(super) custom_scope_submits: u64,
    pub(super) event_checked: u64,
    pub(super) event_finished: u64,
    pub(super) event_late: u64,
    pub(super) redelivered: u64,
    pub(super) swept_finished: u64,
    pub(super) swept_deleted: u64,
    pub(super) swept_kept: u64,
    pub(super) off_clock_submits: u64,
    pub(super) beside_a_worker: u64,
    pub(super) claims: u64,
    pub(super) claimed_by_scan: u64,
    pub(super) completed: u64,
    pub(super) retried: u64,
    pub(super) rescheduled: u64,
    pub(super) markers_removed: u64,
    pub(super) touched_replays: u64,
    pub(super) due_queued: u64,
    pub(super) due_answer_lost: u64,
    pub(super) due_failed: u64,
    pub(super) due_lost: u64,
    pub(super) due_died_after_record: u64,
    pub(super) due_unsent: u64,
    pub(super) due_window: u64,
    pub(super) due_no_record: u64,
    pub(super) due_refused_submits: u64,
    pub(super) due_early: u64,
    pub(super) due_checked: u64,
    pub(super) due_finished: u64,
    pub(super) resets_done: u64,
    pub(super) resets_refused: u64,
    pub(super) resets_not_found: u64,
    pub(super) failed_for_good: u64,
    pub(super) cancelled: u64,
    pub(super) failed_replays: u64,
    pub(super) failed_key_reuses: u64,
    pub(super) reuse_races: u64,
}

impl Stats {
    pub(super) fn add(&mut self, o: &Stats) {
        for (a, b) in self.fields_mut().into_iter().zip(o.fields()) {
            *a += b;
        }
    }

    pub(super) fn fields(&self) -> [u64; 53] {
        let mut c = *self;
        c.fields_mut().map(|v| *v)
    }

    pub(super) fn fields_mut(&mut self) -> [&mut u64; 53] {
        [
            &mut self.crashes,
            &mut self.lost_answers,
            &mut self.late_landings,
            &mut self.refused_at_deadline,
            &mut self.same_key_contention,
            &mut self.task_deletions,
            &mut self.recovered,
            &mut self.replayed,
            &mut self.missing,
            &mut self.input_conflicts,
            &mut self.task_type_conflicts,
            &mut self.undetermined,
            &mut self.storage_errors,
            &mut self.replaced,
            &mut self.tenant_submits,
            &mut self.queue_scope_submits,
            &mut self.custom_scope_submits,
            &mut self.event_checked,
            &mut self.event_finished,
            &mut self.event_late,
            &mut self.redelivered,
            &mut self.swept_finished,
            &mut self.swept_deleted,
            &mut self.swept_kept,
            &mut self.off_clock_submits,
            &mut self.beside_a_worker,
            &mut self.claims,
            &mut self.claimed_by_scan,
            &mut self.completed,
            &mut self.retried,
            &mut self.rescheduled,
            &mut self.markers_removed,
            &mut self.touched_replays,
            &mut self.due_queued,
            &mut self.due_answer_lost,
            &mut self.due_failed,
            &mut self.due_lost,
            &mut self.due_died_after_record,
            &mut self.due_unsent,
            &mut self.due_window,
            &mut self.due_early,
            &mut self.due_checked,
            &mut self.due_finished,
            &mut self.due_no_record,
            &mut self.due_refused_submits,
            &mut self.resets_done,
            &mut self.resets_refused,
            &mut self.resets_not_found,
            &mut self.failed_for_good,
            &mut self.cancelled,
            &mut self.failed_replays,
            &mut self.failed_key_reuses,
            &mut self.reuse_races,
        ]
    }

    pub(super) const NAMES: [&'static str; 53] = [
        "crashes",
        "lost answers to writes",
        "task writes landing after the deadline, inside the 15-minute margin",
        "writes refused at the finish deadline",
        "concurrent submits of one key",
        "tasks deleted by the queue",
        "interrupted submits finished by a later submit",
        "replays",
        "missing tasks",
        "input conflicts",
        "task-type conflicts",
        "undetermined answers",
        "storage errors",
        "expired records replaced",
        "submits of a tenant",
        "submits in the queue scope",
        "submits in a custom scope",
        "records checked by their event, nothing missing",
        "interrupted submits finished by their event",
        "events reaching the sweeper late",
        "due messages delivered again, beside their key's submit",
        "records finished by the scheduled pass",
        "expired records deleted",
        "expired records left for the lifecycle rule",
        "submits from a machine whose clock is off S3's",
        "steps where a worker ran beside submits or sweeps",
        "tasks claimed by a worker",
        "tasks a worker found by listing tasks/",
        "tasks completed",
        "tasks failed and retried",
        "tasks rescheduled",
        "markers of ours removed once a worker had taken their task",
        "replays answered with a task a worker had touched",
        "due messages queued by submitters",
        "due messages queued whose answer was lost",
        "due message sends that failed",
        "due message sends lost in flight",
        "submits that died after their record, their due message queued",
        "records whose every due message send failed, their submit alive",
        "records whose every due message send failed, their submit dead (with_claim's documented window)",
        "due messages that came before their record was stale, handed back",
        "records checked by a submitter's due message, nothing missing",
        "interrupted submits finished by a submitter's due message",
        "due messages whose submit wrote nothing, acknowledged once its claim could no more land",
        "submits that wrote nothing and answered 503: their due message was not accepted (before_claim)",
        "keys reset",
        "resets refused while a task could still be written",
        "resets of no live record",
        "tasks a worker failed for good",
        "tasks the queue's client cancelled",
        "replay-mode submits answered with their key's failed or cancelled task",
        "new_task submits that claimed a failed or cancelled task's key",
        "new_task submits of one key racing over its failed or cancelled task",
    ];
}
