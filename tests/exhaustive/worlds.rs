//! The worlds, one test each, on each store behaviour the protocol
//! supports. Bounds keep all of them within minutes of `make test` on two
//! cores; `MODEL_CHECK_DEPTH` deepens them (`make model-check`, `make soak`).

use idempotent_submit::due_sender::DueOrder;

use super::actors::{Events, How, Role};
use super::explore::{self, Report};
use super::gate::Fault;
use super::prelude::Prelude;
use super::script::Pick;
use super::sim::{Spec, StoreKind};

pub const STORES: [StoreKind; 3] = [
    StoreKind::S3,
    StoreKind::Express,
    StoreKind::VersionedNoConditionalDelete,
];

pub fn spec(name: &'static str, store: StoreKind, actors: Vec<Role>) -> Spec {
    Spec {
        name,
        store,
        events: Events::S3,
        actors,
        faults: 1,
        crashes: 1,
        slow: true,
        advances: 0,
        passes: 0,
        deliver: false,
        depth: 7,
        bug: None,
        late_starts: false,
        limits: false,
        prelude: Prelude::Empty,
        skew: 0,
        schema: super::sim::Schema::Off,
        script: Vec::new(),
    }
}

/// Explores `spec` deepened by `MODEL_CHECK_DEPTH` and prints its line;
/// fails with the counterexample if a guarantee broke.
pub fn holds(spec: Spec) -> Report {
    let spec = Spec {
        depth: (spec.depth as i64 + explore::deeper()).max(1) as usize,
        ..spec
    };
    let r = explore::explore(&spec);
    println!(
        "model-check {:<30} {}",
        format!("{:?}", spec.store),
        r.line()
    );
    assert!(
        r.failure.is_none(),
        "{} on {:?}: {}",
        spec.name,
        spec.store,
        r.trace()
    );
    assert!(r.states > 1, "the world made no step");
    r
}

#[test]
fn two_submits_of_one_key_with_the_same_input_keep_every_guarantee_in_every_schedule() {
    for store in STORES {
        let a = Role::Submit { key: "k", input: 1 };
        holds(spec("two submits, same input", store, vec![a.clone(), a]));
    }
}

#[test]
fn two_submits_of_one_key_with_other_inputs_keep_every_guarantee_in_every_schedule() {
    for store in STORES {
        let a = Role::Submit { key: "k", input: 1 };
        let b = Role::Submit { key: "k", input: 2 };
        holds(spec("two submits, other input", store, vec![a, b]));
    }
}

#[test]
fn a_submit_with_the_sweeper_by_its_due_message_and_by_the_scheduled_pass_keeps_every_guarantee() {
    for store in STORES {
        let a = Role::Submit { key: "k", input: 1 };
        let w = Spec {
            advances: 1,
            passes: 1,
            deliver: true,
            depth: 5,
            ..spec("sweeper by due message and by pass", store, vec![a])
        };
        holds(w);
    }
}

#[test]
fn a_record_past_its_expiry_is_swept_or_replaced_and_a_submit_after_it_gets_a_new_task() {
    for store in STORES {
        // From a key answered an hour ago: the clock at its record's
        // expiry and the record's S3 event redelivered. A submit of the key
        // (a new task, over the expired record by If-Match), started at
        // any point, races the
        // sweeper on that event (the expired record deleted, or kept where
        // no DELETE is safe), with every fault; the clock then steps to any
        // boundary of the new record. (The sweeper's world above reaches
        // expiry by the clock from an empty bucket; the prelude spends this
        // world's bound on what follows it.)
        let a = Role::Submit { key: "k", input: 1 };
        let w = Spec {
            prelude: Prelude::Expired,
            advances: 1,
            deliver: true,
            late_starts: true,
            depth: 7,
            ..spec("expiry, the sweeper, a submit after", store, vec![a])
        };
        holds(w);
    }
}

#[test]
fn a_submit_its_replay_a_key_reset_and_a_submit_after_the_reset_keep_every_guarantee() {
    for store in STORES {
        let a = Role::Submit { key: "k", input: 1 };
        let reset = Role::Reset { key: "k" };
        // The second submit is the first one's replay before the reset,
        // and a new submit after it.
        let w = Spec {
            depth: 5,
            ..spec(
                "submit, replay, reset, submit",
                store,
                vec![a.clone(), reset, a],
            )
        };
        holds(w);
    }
}

#[test]
fn submitter_due_messages_sent_before_the_claim_leave_no_record_behind() {
    for store in STORES {
        let a = Role::Submit { key: "k", input: 1 };
        let w = Spec {
            events: Events::Submitter(DueOrder::BeforeClaim),
            advances: 1,
            deliver: true,
            depth: 7,
            ..spec("submitter, before_claim", store, vec![a])
        };
        holds(w);
    }
}

#[test]
fn a_batch_of_two_items_sharing_one_send_message_batch_keeps_every_guarantee() {
    for store in STORES {
        let batch = Role::Batch {
            items: vec![("k", 1), ("j", 1)],
        };
        let w = Spec {
            events: Events::Submitter(DueOrder::BeforeClaim),
            advances: 1,
            deliver: true,
            depth: 5,
            ..spec("batch of two, one SendMessageBatch", store, vec![batch])
        };
        holds(w);
    }
}

#[test]
fn buquets_worker_claiming_and_deleting_the_marker_beside_submits_and_the_sweeper() {
    for store in STORES {
        let a = Role::Submit { key: "k", input: 1 };
        let w = Spec {
            advances: 1,
            deliver: true,
            depth: 7,
            // The sweeper, on the record's event, finishes what a submit
            // that died left: the worker races it as it races a replay.
            ..spec(
                "worker beside a submit and the sweeper",
                store,
                vec![a, Role::Worker],
            )
        };
        holds(w);
    }
}

#[test]
fn two_new_task_submits_racing_over_a_failed_tasks_key_write_one_new_task_in_every_schedule() {
    for store in STORES {
        let a = Role::Reuse { key: "k", input: 1 };
        let w = Spec {
            prelude: Prelude::Failed,
            depth: 6,
            ..spec(
                "a failed task, two new_task submits",
                store,
                vec![a.clone(), a],
            )
        };
        holds(w);
    }
}

#[test]
fn a_new_task_submit_and_a_replay_over_a_failed_tasks_key_keep_every_guarantee() {
    for store in STORES {
        let reuse = Role::Reuse { key: "k", input: 2 };
        let replay = Role::Submit { key: "k", input: 1 };
        let w = Spec {
            prelude: Prelude::Failed,
            depth: 6,
            ..spec(
                "a failed task, new_task beside replay",
                store,
                vec![reuse, replay],
            )
        };
        holds(w);
    }
}

#[test]
fn with_the_machines_clock_behind_s3s_a_submit_and_the_sweeper_keep_every_guarantee() {
    for store in STORES {
        let a = Role::Submit { key: "k", input: 1 };
        // 58 s behind: within the 60 s past which nothing bound by a
        // deadline is written (docs/protocol.md, "S3's clock, not ours").
        let w = Spec {
            advances: 1,
            passes: 1,
            deliver: true,
            depth: 5,
            skew: 58,
            ..spec("machine clock 58 s behind S3's", store, vec![a])
        };
        holds(w);
    }
}

#[test]
fn a_key_reset_beside_a_submit_of_the_key_from_an_answered_submit_keeps_every_guarantee() {
    for store in STORES {
        // The key's first submit answered (record, task, marker): the
        // reset may write, and the second submit is a replay before it and
        // a new task after it.
        let reset = Role::Reset { key: "k" };
        let a = Role::Submit { key: "k", input: 1 };
        let w = Spec {
            prelude: Prelude::Answered,
            depth: 8,
            ..spec("an answered key, a reset, a submit", store, vec![reset, a])
        };
        holds(w);
    }
}

#[test]
fn the_sweeper_finishes_a_submit_that_died_after_its_record_beside_a_replay() {
    for store in STORES {
        // The record's event comes at its stale age; a replay of the key
        // races the sweeper.
        let a = Role::Submit { key: "k", input: 1 };
        let w = Spec {
            prelude: Prelude::DiedAfterRecord,
            deliver: true,
            depth: 7,
            ..spec(
                "died after its record, the sweeper, a replay",
                store,
                vec![a],
            )
        };
        holds(w);
    }
}

#[test]
fn a_replay_beside_a_stale_marker_of_a_taken_task_removes_it() {
    for store in STORES {
        // The key's task taken by a worker (`running`), whose DELETE of its
        // marker failed: a replay that sees the marker removes it.
        let a = Role::Submit { key: "k", input: 1 };
        let w = Spec {
            prelude: Prelude::StaleMarker,
            depth: 6,
            ..spec("a taken task's stale marker, a replay", store, vec![a])
        };
        holds(w);
    }
}

#[test]
fn the_sweeper_removes_a_settled_records_stale_marker_and_a_dry_run_writes_nothing() {
    for store in STORES {
        // The same key, its record settled and its event due: the sweeper
        // on the event removes the marker; a dry run beside it writes
        // nothing.
        let w = Spec {
            prelude: Prelude::StaleMarkerSettled,
            deliver: true,
            depth: 6,
            ..spec(
                "a settled record's stale marker, the sweeper, a dry run",
                store,
                vec![Role::DrySweep { key: "k" }],
            )
        };
        holds(w);
    }
}

/// A submit of `k` whose input is offloaded (`use_payload_refs`).
fn offloaded() -> Role {
    let how = How {
        payload: true,
        ..How::default()
    };
    Role::SubmitAs {
        key: "k",
        input: 1,
        how,
    }
}

#[test]
fn two_offloaded_submits_of_one_key_leave_every_payload_a_task_names_and_no_orphan() {
    for store in STORES {
        // Each submit's payload PUT beside its claim; the claim that lost
        // deletes its own payload, a replay that finishes the other's
        // record writes the payload (412) before the task; every fault.
        let w = Spec {
            depth: 5,
            ..spec(
                "two offloaded submits",
                store,
                vec![offloaded(), offloaded()],
            )
        };
        holds(w);
    }
}

#[test]
fn the_sweeper_writes_an_offloaded_submits_missing_payload_before_its_task() {
    for store in STORES {
        // One offloaded submit, its record's event delivered to the sweeper
        // (which writes a missing payload from the record's `pending_input`
        // before the task), the clock stepping once to any boundary.
        let w = Spec {
            advances: 1,
            deliver: true,
            depth: 5,
            ..spec("an offloaded submit, the sweeper", store, vec![offloaded()])
        };
        holds(w);
    }
}

#[test]
fn an_offloaded_submit_that_meets_its_own_record_reset_keeps_the_payload_its_task_names() {
    for store in STORES {
        // Scripted (each step checked): #0's record lands and its answer is
        // lost, its payload beside it; a replay (#1) finishes #0's record
        // (payload 412, task, marker) and an operator (#2) resets the key.
        // Then every schedule from there: #0's retried claim meets its own
        // record reset, and is answered as before the reset, deleting
        // nothing its task names.
        let script = vec![
            Pick::Start(0),
            Pick::Decide(0, "payloads/", Fault::Ok),
            Pick::Decide(0, "idempotency/", Fault::Lost),
            Pick::Start(1),
            Pick::Finish(1),
            Pick::Start(2),
            Pick::Finish(2),
        ];
        let roles = vec![offloaded(), offloaded(), Role::Reset { key: "k" }];
        let w = Spec {
            late_starts: true,
            faults: 2,
            advances: 1,
            depth: 6,
            script,
            ..spec("an offloaded submit's own record reset", store, roles)
        };
        holds(w);
    }
}

#[test]
fn two_resets_of_one_key_a_clock_step_apart_both_leave_it_reset() {
    for store in STORES {
        // The key answered; two operators reset it at once, the clock
        // stepping between them (their `reset_at` differ): each answer is
        // true (`Done` only once a reset record of the task is there), and
        // a submit after gets a new task.
        let reset = Role::Reset { key: "k" };
        let w = Spec {
            prelude: Prelude::Answered,
            advances: 1,
            crashes: 0,
            depth: 8,
            ..spec(
                "two resets of one key, the clock",
                store,
                vec![reset.clone(), reset],
            )
        };
        holds(w);
    }
}

#[test]
fn a_young_reset_record_stays_until_no_put_of_the_claim_it_replaced_can_land() {
    for store in STORES {
        // Scripted: #0's record PUT is slow (it may land up to the
        // late-write margin after it was sent), its retry lands and #0
        // answers; an operator (#1) resets the key. Then every schedule:
        // the clock to any boundary, the records' events to the sweeper
        // (the reset record kept while that PUT may land), the slow PUT
        // landing, a submit (#2) of the key started at any point.
        let script = vec![
            Pick::Start(0),
            Pick::Decide(0, "idempotency/", Fault::Slow),
            Pick::Finish(0),
            Pick::Start(1),
            Pick::Finish(1),
        ];
        let a = Role::Submit { key: "k", input: 1 };
        let roles = vec![a.clone(), Role::Reset { key: "k" }, a];
        let w = Spec {
            late_starts: true,
            faults: 2,
            crashes: 0,
            advances: 1,
            deliver: true,
            depth: 6,
            script,
            ..spec("a slow claim, a reset, the sweeper", store, roles)
        };
        holds(w);
    }
}

#[test]
fn the_sweeper_on_a_complete_records_event_beside_a_replay_writes_nothing_and_says_so() {
    for store in STORES {
        // The key answered, the clock at its record's stale age and its
        // event due: the sweeper finds task and marker there (`Nothing`,
        // never `Finished`), a replay of the key beside it.
        let a = Role::Submit { key: "k", input: 1 };
        let w = Spec {
            prelude: Prelude::AnsweredEventDue,
            deliver: true,
            depth: 5,
            ..spec(
                "a complete record's event, the sweeper, a replay",
                store,
                vec![a],
            )
        };
        holds(w);
    }
}

#[test]
fn a_submit_of_another_input_that_meets_the_key_reset_is_answered_a_conflict() {
    for store in STORES {
        // The key answered with input 1; a reset and a submit of input 2,
        // each started at any point, the clock stepping once, fault-free: a
        // submit whose first answer came before the reset's time and that
        // meets the reset record is answered as the record was (a
        // conflict), never the old task (guarantee 5). Added for shard 4's
        // mutant of `Engine::answer_before_reset`.
        let reset = Role::Reset { key: "k" };
        let b = Role::Submit { key: "k", input: 2 };
        let w = Spec {
            prelude: Prelude::Answered,
            late_starts: true,
            advances: 1,
            faults: 0,
            crashes: 0,
            depth: 9,
            ..spec(
                "an answered key, a reset, another input",
                store,
                vec![reset, b],
            )
        };
        holds(w);
    }
}

#[test]
fn a_marker_that_took_a_retry_beside_a_task_a_worker_claimed_is_removed() {
    for store in STORES {
        // Scripted: a submit's record lands, then its task, and its
        // marker's first PUT meets a 503. Then every schedule, fault-free:
        // buquet's worker, finding the task by its listing of `tasks/`,
        // claims it at any point beside the marker's retry; the submit
        // reads the task again after a marker that took a retry and
        // removes it beside a taken task (guarantee 10). Added for shard
        // 4's mutant of `Wrote::reread_needed`.
        let script = vec![
            Pick::Decide(0, "idempotency/", Fault::Ok),
            Pick::Decide(0, "tasks/", Fault::Ok),
            Pick::Decide(0, "ready/", Fault::Unavailable),
        ];
        let a = Role::Submit { key: "k", input: 1 };
        let w = Spec {
            faults: 2,
            depth: 6,
            script,
            ..spec(
                "a retried marker, buquet's worker by tasks/",
                store,
                vec![a, Role::Scanner],
            )
        };
        holds(w);
    }
}

#[test]
fn with_the_machines_clock_behind_s3s_a_warm_process_writes_its_record_in_s3s_time() {
    for store in STORES {
        // The machines 58 s behind S3's, and S3's clock learnt already (the
        // prelude's answers): a submit of a new key writes its record's
        // life in S3's time, beside a replay of the answered key. Added for
        // shard 4's mutant of `Engine::record_life`.
        let roles = vec![
            Role::Submit { key: "j", input: 1 },
            Role::Submit { key: "k", input: 1 },
        ];
        let w = Spec {
            prelude: Prelude::Answered,
            skew: 58,
            depth: 4,
            ..spec("machine clock 58 s behind, S3's learnt", store, roles)
        };
        holds(w);
    }
}

#[test]
fn a_dry_run_beside_a_replay_of_a_submit_that_died_after_its_record_says_what_it_would_write() {
    for store in STORES {
        // From a submit that died after its record, at its stale age: a
        // dry run of the sweeper on the record (it would finish it, and
        // writes nothing) beside a replay that finishes it. Added for
        // shard 5's mutant of `Engine::finish` (the dry run's plan).
        let roles = vec![
            Role::DrySweep { key: "k" },
            Role::Submit { key: "k", input: 1 },
        ];
        let w = Spec {
            prelude: Prelude::DiedAfterRecord,
            depth: 5,
            ..spec("died after its record, a dry run, a replay", store, roles)
        };
        holds(w);
    }
}

#[test]
fn a_batch_with_an_item_its_schema_refuses_sends_the_others_due_messages() {
    for store in STORES {
        // `RECORD_EVENTS=submitter`; `t`'s schema accepts input 1 and
        // refuses 2: `submit_many` of `k` (input 1) and `j` (input 2),
        // whose due messages would share one `SendMessageBatch`. `j` is
        // refused before its claim and sends none: the batch sends `k`'s
        // without waiting for it, and every item ends (the explorer fails
        // an actor left running with nothing to happen). Written for shard
        // 5's mutant of `Engine::send_no_due`, which it does not kill: the
        // item's `Participant` says the same when it is dropped, as the
        // refused item's future ends (docs/testing.md).
        let batch = Role::Batch {
            items: vec![("k", 1), ("j", 2)],
        };
        let w = Spec {
            events: Events::Submitter(DueOrder::BeforeClaim),
            schema: super::sim::Schema::AcceptsUpTo(1),
            depth: 5,
            ..spec(
                "batch of two, one refused by its schema",
                store,
                vec![batch],
            )
        };
        holds(w);
    }
}

#[test]
fn with_the_machines_clock_behind_s3s_a_submitters_due_message_is_dated_in_s3s_time() {
    for store in STORES {
        // `RECORD_EVENTS=submitter`, the machines 58 s behind S3's and S3's
        // clock learnt (the prelude's answers). Scripted: a submit of `j`
        // sends its due message, its record PUT is slow (it may land up to
        // the late-write margin after it was sent) and the process dies at
        // the retry. Then every schedule: the clock twice, the message to
        // the sweeper, the slow PUT landing: the sweeper acknowledges a
        // message with no record only once its claim can land no more, so
        // a record that lands always has its message (guarantee 4). Added
        // for shard 5's mutant of `Engine::signing_time`.
        holds(submitter_slow_claim(
            "submitter, machine clock 58 s behind, a slow claim",
            store,
            Prelude::Answered,
        ));
    }
}

#[test]
fn a_replay_of_an_offloaded_submit_that_died_before_its_marker_writes_the_marker_alone() {
    for store in STORES {
        // An offloaded submit of `k` died after its task, before its
        // marker; a replay writes the marker, and no payload (the task is
        // there, so its payload is). Added for shard 6's mutant of
        // `Engine::finish` (the payload written whenever the task or the
        // check needs it).
        let how = How {
            payload: true,
            ..How::default()
        };
        let w = Spec {
            prelude: Prelude::NoMarkerAs(how),
            depth: 9,
            ..spec(
                "an offloaded submit died before its marker, a replay",
                store,
                vec![offloaded()],
            )
        };
        holds(w);
    }
}

/// `RECORD_EVENTS=submitter`, the machines 58 s behind S3's, from
/// `prelude`. Scripted: a submit of `j` sends its due message, its record
/// PUT is slow (it may land up to the late-write margin after it was sent)
/// and the process dies at the retry. Then every schedule: the clock twice,
/// the message to the sweeper, the slow PUT landing.
pub fn submitter_slow_claim(name: &'static str, store: StoreKind, prelude: Prelude) -> Spec {
    let script = vec![
        Pick::Start(0),
        Pick::Decide(0, "idempotency/", Fault::Ok),
        Pick::Decide(0, "idempotency/", Fault::Slow),
        Pick::Decide(0, "idempotency/", Fault::CrashBefore),
    ];
    Spec {
        events: Events::Submitter(DueOrder::BeforeClaim),
        prelude,
        skew: 58,
        late_starts: true,
        faults: 2,
        advances: 2,
        deliver: true,
        depth: 6,
        script,
        ..spec(name, store, vec![Role::Submit { key: "j", input: 1 }])
    }
}
