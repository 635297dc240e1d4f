//! Worlds written for the mutants of issue 46's last mutation stream (the
//! 137 of main's 321 that no shard had run; docs/testing.md, "The 137
//! never run"), on the three stores, as `worlds.rs`'s.

use super::actors::Role;
use super::gate::{Fault, Message};
use super::prelude::Prelude;
use super::script::Pick;
use super::sim::Spec;
use super::worlds::{STORES, holds, spec, submitter_slow_claim};

#[test]
fn a_dry_run_and_the_sweeper_on_an_expired_record_answer_what_the_sweeper_does() {
    for store in STORES {
        // A key answered an hour ago, the clock at its record's expiry and
        // its S3 event due: a dry run of the sweeper on the record (it
        // writes nothing, and answers the deletion a real run makes) beside
        // the sweeper on the event (which deletes it, and says so), the
        // clock stepping once. Added for the mutants of
        // `Engine::sweep_read`'s `dry_run` guard and of
        // `Engine::deletion_owed`.
        let w = Spec {
            prelude: Prelude::Expired,
            deliver: true,
            advances: 1,
            depth: 5,
            ..spec(
                "an expired record, a dry run, the sweeper",
                store,
                vec![Role::DrySweep { key: "k" }],
            )
        };
        holds(w);
    }
}

#[test]
fn the_sweeper_deletes_an_old_reset_record_and_every_version_beneath_it() {
    for store in STORES {
        // Scripted (each step checked): the key answered, an operator
        // resets it, and the clock steps past the reset record's keeping
        // (no PUT of the claim it replaced can land any more). Then every
        // schedule: the reset record's S3 event to the sweeper, which
        // deletes it; on the versioned bucket, the versions beneath first
        // (the answered record among them), so that the record the reset
        // replaced never becomes current again. Added for the mutants of
        // `Engine::delete_expired_version` (which versions are beneath,
        // and whether the read one is still current).
        let st = super::sim::settings(store);
        let kept = st.operation_timeout + st.late_write_margin;
        let script = vec![
            Pick::Start(0),
            Pick::Finish(0),
            Pick::Clock(kept.num_seconds() + 1),
        ];
        let w = Spec {
            prelude: Prelude::Answered,
            late_starts: true,
            deliver: true,
            depth: 6,
            script,
            ..spec(
                "an old reset record, the sweeper",
                store,
                vec![Role::Reset { key: "k" }],
            )
        };
        holds(w);
    }
}

#[test]
fn a_reset_record_stays_through_the_last_second_a_slow_put_of_its_claim_may_land() {
    for store in STORES {
        // Scripted (each step checked): #0's record PUT is slow (it may
        // land up to the late-write margin after it was sent), its retry
        // lands and #0 answers; an operator (#1) resets the key at once;
        // the clock steps to a second before that slow PUT's last chance
        // (no boundary of the walk falls between the reset record's
        // keeping less the operation timeout and that instant). Then every
        // schedule: the records' events to the sweeper, which keeps the
        // reset record, and the slow PUT landing. Added for the mutant of
        // `owed` that keeps a reset record the operation timeout less.
        let st = super::sim::settings(store);
        let script = vec![
            Pick::Start(0),
            Pick::Decide(0, "idempotency/", Fault::Slow),
            Pick::Finish(0),
            Pick::Start(1),
            Pick::Finish(1),
            Pick::Clock(st.late_write_margin.num_seconds() - 1),
        ];
        let a = Role::Submit { key: "k", input: 1 };
        let w = Spec {
            late_starts: true,
            faults: 1,
            crashes: 0,
            deliver: true,
            depth: 5,
            script,
            ..spec(
                "a slow claim, a reset, the sweeper at its last second",
                store,
                vec![a, Role::Reset { key: "k" }],
            )
        };
        holds(w);
    }
}

#[test]
fn with_the_machines_clock_behind_s3s_a_replay_writes_nothing_past_the_finish_deadline() {
    for store in STORES {
        // The machines 58 s behind S3's; a submit of `k` died after its
        // record, the clock at the record's stale age. Scripted (each step
        // checked): the clock to 10 s before the record's finish deadline,
        // a replay of the key that reads the record and the task (missing)
        // and sends the task's PUT. Then every schedule: the clock to any
        // boundary (the finish deadline among them, which times that PUT
        // out), every fault: the replay writes nothing once the deadline
        // has come (its window closes at the deadline in S3's time, on its
        // own clock the learnt offset earlier). Added for the mutant of
        // `Engine::write_window` that adds the offset instead.
        let st = super::sim::settings(store);
        let to_deadline = st.finish_window - st.stale_creating_after;
        let script = vec![
            Pick::Clock(to_deadline.num_seconds() - 10),
            Pick::Start(0),
            Pick::UntilWrite(0, "tasks/"),
        ];
        let w = Spec {
            prelude: Prelude::DiedAfterRecord,
            skew: 58,
            late_starts: true,
            // The script's clock step is one of them.
            advances: 2,
            depth: 4,
            script,
            ..spec(
                "died after its record, machine clock 58 s behind, a replay at its deadline",
                store,
                vec![Role::Submit { key: "k", input: 1 }],
            )
        };
        holds(w);
    }
}

#[test]
fn the_sweeper_writes_the_marker_of_a_submit_that_died_before_it_and_says_so() {
    for store in STORES {
        // A submit of `k` died after its task, before its marker. Scripted:
        // the clock to the record's stale age. Then every schedule, every
        // fault: the sweeper on the record's due message writes the marker
        // alone (the task is there) and answers `Finished`, never
        // `Nothing`, beside a replay of the key. Added for the mutant of
        // `Engine::finish` that counts a write only when both the task and
        // the marker were written.
        let st = super::sim::settings(store);
        let due = Message {
            key: super::checks::record_key("k"),
            sent_at: None,
            visible: chrono::DateTime::UNIX_EPOCH,
        };
        let script = vec![Pick::Clock(st.stale_creating_after.num_seconds())];
        let w = Spec {
            prelude: Prelude::NoMarker,
            late_starts: true,
            advances: 1,
            depth: 7,
            script,
            ..spec(
                "died before its marker, the sweeper, a replay",
                store,
                vec![Role::Sweep(due), Role::Submit { key: "k", input: 1 }],
            )
        };
        holds(w);
    }
}

#[test]
fn a_reset_that_a_new_task_submit_overtook_over_a_failed_tasks_key_answers_changed() {
    for store in STORES {
        // The key's task failed. Scripted (each step checked): an operator
        // resets the key, and reads its record and its task. Then every
        // schedule, fault-free, beside a `new_task` submit of the key:
        // where the submit's record replaces the failed task's before the
        // reset's write, the reset's PUT meets a 412 and finds another
        // task's record there: `Changed`, never `Done` (no reset record came
        // to the key, and the next submit replays the new task). Added for
        // the mutant of `Engine::landed_reset` that answers every 412
        // `Done`. (Unscripted, the world finds the new task's marker PUT,
        // sent beside its task, landing after a reset that read the task:
        // docs/testing.md, "The 137 never run".)
        let script = vec![
            Pick::Decide(0, "idempotency/", Fault::Ok),
            Pick::Decide(0, "tasks/", Fault::Ok),
        ];
        let w = Spec {
            prelude: Prelude::Failed,
            faults: 0,
            crashes: 0,
            depth: 8,
            script,
            ..spec(
                "a failed task's key, a reset beside new_task",
                store,
                vec![Role::Reset { key: "k" }, Role::Reuse { key: "k", input: 1 }],
            )
        };
        holds(w);
    }
}

#[test]
fn with_the_machines_clock_behind_s3s_a_cold_submitters_slow_claim_keeps_its_due_message() {
    for store in STORES {
        // `RECORD_EVENTS=submitter`, the machines 58 s behind S3's, and a
        // cold process (no answer yet has told it S3's clock): its due
        // message says it was sent 58 s before S3's time. Scripted: the
        // message sent, the record PUT slow (it may land up to the
        // late-write margin after it was sent), the process dead at the
        // retry. Then every schedule: the clock twice (a second before a
        // boundary among its steps), the message to the sweeper, the slow
        // PUT landing: the sweeper acknowledges a message with no record
        // only once its claim can land no more, the signing clock's 60 s
        // and the operation deadline counted, so a record that lands
        // always has its message (guarantee 4). Added for the mutant of
        // `Engine::claim_may_land` that subtracts the operation timeout.
        holds(submitter_slow_claim(
            "submitter, cold, machine clock 58 s behind, a slow claim",
            store,
            Prelude::Empty,
        ));
    }
}

#[test]
fn a_replay_after_no_late_write_can_land_answers_what_the_record_came_to() {
    for store in STORES {
        // A submit of `k` died after its record. Scripted: the clock to a
        // second past the record's finish deadline and the late-write
        // margin. Then every schedule, every fault: a replay of the key
        // answers `missing` (no task, and none can come), never
        // `Undetermined`; the record's event to the sweeper beside it.
        // Added for the mutant of `Engine::answer_existing` that finishes a
        // record past its finish deadline (`||` for `&&`).
        let st = super::sim::settings(store);
        let past = st.finish_window + st.late_write_margin - st.stale_creating_after;
        let script = vec![Pick::Clock(past.num_seconds() + 1)];
        let w = Spec {
            prelude: Prelude::DiedAfterRecord,
            late_starts: true,
            // The script's clock step is one of them.
            advances: 1,
            deliver: true,
            depth: 5,
            script,
            ..spec(
                "died after its record, settled, a replay",
                store,
                vec![Role::Submit { key: "k", input: 1 }],
            )
        };
        holds(w);
    }
}

#[test]
fn a_submits_marker_may_land_after_a_reset_that_found_its_task_and_nothing_else_of_it_does() {
    for store in STORES {
        // A submit of `k` and a reset of `k`, fault-free: where the reset
        // reads the task once it has landed and writes its reset record
        // while the submit's marker PUT (sent beside the task's) is still
        // on its way, the marker lands after the reset record, beside its
        // task (6 steps). The reset's promise is about tasks, and markers of
        // no task: the check judged every marker so, and this schedule
        // broke it (found by the world "a failed task's key, a reset beside
        // new_task" unscripted; docs/protocol.md, "A reset").
        let roles = vec![
            Role::Submit { key: "k", input: 1 },
            Role::Reset { key: "k" },
        ];
        let w = Spec {
            faults: 0,
            crashes: 0,
            depth: 7,
            ..spec("a submit beside a reset, fault-free", store, roles)
        };
        holds(w);
    }
}

#[test]
fn a_replay_over_a_record_an_earlier_version_turned_ready_answers_its_task_gone_as_missing_at_once()
{
    for store in STORES {
        // The key's record as an earlier version's sweeper left it
        // (`ready`: it had seen the task), the task and marker deleted
        // since, the record's event due: a replay answers `missing` at
        // once, never undetermined (no late write can land where the task
        // was seen), and the sweeper on the event writes nothing. No other
        // world holds a `ready` record: this one was added for shard 8's
        // mutant of `Engine::answer_existing` (its `Ready` arm deleted).
        let a = Role::Submit { key: "k", input: 1 };
        let w = Spec {
            prelude: Prelude::ReadyTaskGone,
            deliver: true,
            advances: 1,
            depth: 5,
            ..spec(
                "an earlier version's ready record, task gone",
                store,
                vec![a],
            )
        };
        holds(w);
    }
}

#[test]
fn with_the_machines_clock_ahead_of_s3s_the_sweeper_deletes_no_record_before_its_expiry() {
    for store in STORES {
        // The mirror of the world above: the machines 58 s ahead, from a
        // key answered (S3's clock learnt from its answers) whose record's
        // event is redelivered, the clock stepping to each of its record's
        // boundaries and to each less 58 s, the sweeper by that event, a
        // replay (the pass reads a record by its age, not by its expiry:
        // the world above has it). Added for shard 8's mutant of
        // `Engine::sweep_read` (the learnt offset's lower bound subtracted:
        // with the machines ahead, S3's time judged 116 s late, a record
        // deleted before its expiry).
        let a = Role::Submit { key: "k", input: 1 };
        let w = Spec {
            prelude: Prelude::AnsweredEventWaiting,
            advances: 1,
            deliver: true,
            depth: 5,
            skew: -58,
            ..spec("machine clock 58 s ahead of S3's", store, vec![a])
        };
        holds(w);
    }
}

#[test]
fn a_keys_second_record_at_its_expiry_is_swept_without_bringing_the_first_back() {
    for store in STORES {
        // The key's first record expired and replaced by a second submit's
        // (on a versioned bucket, two versions of the key), the clock at
        // the second's expiry and its event redelivered: the sweeper
        // deletes it (with `CONDITIONAL_DELETE=off`, the versions beneath
        // first, then its own), and no record once replaced is ever current
        // again, beside a submit of the key started at any point. Added for
        // shard 8's mutant of `Engine::delete_expired_version` (its
        // current version counted among those beneath: deleted first, which
        // makes the first record current again until its own DELETE).
        let a = Role::Submit { key: "k", input: 1 };
        let w = Spec {
            prelude: Prelude::SecondLifeExpired,
            deliver: true,
            late_starts: true,
            depth: 6,
            ..spec("a key's second record at its expiry", store, vec![a])
        };
        holds(w);
    }
}
