//! The checker finds each planted bug of tests/model/planted.rs that its
//! worlds reach, with the shortest schedule (iterative deepening), and the
//! one known limit of the protocol: under `RECORD_EVENTS=submitter` with
//! `DUE_MESSAGE=with_claim`, a process that dies between its record's PUT
//! and its due message leaves the record to a replay (docs/protocol.md,
//! guarantee 4).

use idempotent_submit::due_sender::DueOrder;

use super::actors::{Events, Role};
use super::explore::{self, Report};
use super::prelude::Prelude;
use super::sim::{Spec, StoreKind};
use crate::model::planted::Bug;

fn world(name: &'static str, actors: Vec<Role>, bug: Option<Bug>) -> Spec {
    Spec {
        name,
        store: StoreKind::S3,
        events: Events::S3,
        actors,
        faults: 1,
        crashes: 1,
        slow: false,
        advances: 0,
        passes: 0,
        deliver: false,
        depth: 9,
        bug,
        late_starts: false,
        limits: false,
        prelude: Prelude::Empty,
        skew: 0,
        schema: super::sim::Schema::Off,
        script: Vec::new(),
    }
}

fn twice() -> Vec<Role> {
    let a = Role::Submit { key: "k", input: 1 };
    vec![a.clone(), a]
}

/// The shortest schedule of `spec` breaks what `needle` names;
/// the same world without the bug keeps every guarantee to that depth.
fn caught(spec: Spec, needle: &str) -> Report {
    let r = explore::shortest(&spec);
    println!(
        "planted {:?}: {} steps, {:.1} s (cpu {:.1} s), {} states\n{}",
        spec.bug,
        r.failure.as_ref().map_or(0, |f| f.steps),
        r.elapsed.as_secs_f64(),
        r.cpu.as_secs_f64(),
        r.states,
        r.trace()
    );
    let f = r.failure.as_ref().expect("the planted bug is found");
    assert!(f.message.contains(needle), "{:?}: {}", spec.bug, f.message);
    let clean = explore::explore(&Spec {
        bug: None,
        depth: f.steps,
        ..spec
    });
    assert!(
        clean.failure.is_none(),
        "without the bug: {}",
        clean.trace()
    );
    r
}

#[test]
fn the_checker_finds_a_task_written_without_if_none_match() {
    caught(
        world("overwrite", twice(), Some(Bug::OverwriteTask)),
        "guarantee 2",
    );
}

#[test]
fn the_checker_finds_one_key_answered_with_another_keys_task() {
    let roles = vec![
        Role::Submit { key: "k", input: 1 },
        Role::Submit { key: "j", input: 1 },
    ];
    caught(
        world("one record", roles, Some(Bug::OneRecordPerScope)),
        "guarantee 1",
    );
}

#[test]
fn the_checker_finds_a_finisher_that_never_writes_a_missing_marker() {
    let w = world("no marker", twice(), Some(Bug::FinishWithoutMarker));
    caught(w, "guarantee 3");
}

#[test]
fn the_checker_finds_a_write_past_the_finish_deadline() {
    let w = Spec {
        advances: 1,
        faults: 0,
        crashes: 0,
        late_starts: true,
        ..world("deadline", twice(), Some(Bug::IgnoreFinishDeadline))
    };
    caught(w, "deadline");
}

#[test]
fn the_checker_finds_missing_answered_inside_the_late_write_margin() {
    let w = Spec {
        advances: 1,
        faults: 0,
        crashes: 0,
        late_starts: true,
        ..world("margin", twice(), Some(Bug::MissingWithoutMargin))
    };
    caught(w, "guarantee 7");
}

#[test]
fn the_checker_finds_an_expired_record_kept_alive() {
    let w = Spec {
        advances: 1,
        crashes: 0,
        faults: 0,
        late_starts: true,
        ..world("expiry", twice(), Some(Bug::ExpiryIgnored))
    };
    // The planted reader rewrites the record, and with it the bytes of its
    // pending_task: a finisher takes the task for touched, and guarantee 3
    // breaks first.
    caught(w, "guarantee");
}

#[test]
fn the_checker_finds_two_new_tasks_for_one_failed_task_claimed_without_if_match() {
    let a = Role::Reuse { key: "k", input: 1 };
    let w = Spec {
        prelude: Prelude::Failed,
        ..world(
            "reuse without If-Match",
            vec![a.clone(), a],
            Some(Bug::ReuseWithoutIfMatch),
        )
    };
    caught(w, "guarantee 11");
}

#[test]
fn the_checker_finds_a_completed_tasks_key_reused() {
    let a = Role::Reuse { key: "k", input: 1 };
    let w = Spec {
        prelude: Prelude::Completed,
        ..world(
            "completed read as failed",
            vec![a],
            Some(Bug::CompletedReadAsFailed),
        )
    };
    caught(w, "guarantee 11");
}

#[test]
fn the_checker_finds_a_replay_mode_submit_that_replaces_a_failed_task() {
    let a = Role::Submit { key: "k", input: 1 };
    let w = Spec {
        prelude: Prelude::Failed,
        ..world("new_task by default", vec![a], Some(Bug::ReuseByDefault))
    };
    caught(w, "guarantee 11");
}

#[test]
fn the_checker_finds_a_sweepers_delete_trusting_if_match_where_the_store_ignores_it() {
    // A redelivered event of an expired record, and a submit that replaces
    // the record between the sweeper's read and its DELETE.
    let a = Role::Submit { key: "k", input: 1 };
    let w = Spec {
        store: StoreKind::VersionedNoConditionalDelete,
        prelude: Prelude::Expired,
        deliver: true,
        ..world(
            "delete trusting If-Match",
            vec![a],
            Some(Bug::TrustDeleteIfMatch),
        )
    };
    caught(w, "guarantee 1");
}

#[test]
fn the_checker_finds_a_machine_clock_trusted_as_s3s() {
    // The machines' clock 58 s behind S3's, a submit that died after its
    // task, found 10 s past its finish deadline by S3's clock.
    let a = Role::Submit { key: "k", input: 1 };
    let w = Spec {
        prelude: Prelude::MarkerLost,
        skew: 58,
        ..world(
            "machine clock trusted",
            vec![a],
            Some(Bug::TrustMachineClock),
        )
    };
    caught(w, "deadline");
}

#[test]
fn the_checker_finds_a_marker_written_for_a_task_a_worker_has_taken() {
    // A replay of a key whose task a worker has claimed (its marker
    // deleted); the planted finisher takes the task for untouched.
    let a = Role::Submit { key: "k", input: 1 };
    let w = Spec {
        prelude: Prelude::Running,
        ..world(
            "marker when HEAD finds none",
            vec![a],
            Some(Bug::MarkerWhenHeadFindsNone),
        )
    };
    caught(w, "guarantee 10");
}

#[test]
fn the_checker_finds_a_marker_kept_though_a_worker_claimed_its_task_before_it_landed() {
    // A replay finishing a submit that died after its task, and buquet's
    // worker claiming the task by its listing of `tasks/` between the
    // replay's marker PUT and its read of the task after it.
    let roles = vec![Role::Submit { key: "k", input: 1 }, Role::Scanner];
    let w = Spec {
        prelude: Prelude::NoMarker,
        faults: 0,
        crashes: 0,
        depth: 11,
        ..world("marker unverified", roles, Some(Bug::MarkerUnverified))
    };
    caught(w, "guarantee 10");
}

#[test]
fn the_checker_finds_a_reset_that_ignores_the_records_phase() {
    // A submit still in flight writes its task after a reset by hand
    // replaced its `creating` record.
    let roles = vec![
        Role::Submit { key: "k", input: 1 },
        Role::ResetByHand { key: "k" },
    ];
    let w = Spec {
        faults: 0,
        crashes: 0,
        ..world(
            "reset ignoring the phase",
            roles,
            Some(Bug::ResetIgnoresPhase),
        )
    };
    caught(w, "the reset's promise");
}

/// The known limit, printed: the shortest schedule that leaves a record
/// with no due message and no live writer under `DUE_MESSAGE=with_claim`.
#[test]
fn with_claim_a_process_dying_between_its_record_and_its_due_message_leaves_the_record_to_a_replay()
{
    let a = Role::Submit { key: "k", input: 1 };
    let w = Spec {
        events: Events::Submitter(DueOrder::WithClaim),
        ..world("submitter, with_claim (the known window)", vec![a], None)
    };
    let r = explore::shortest(&w);
    println!("model-check limit: {}\n{}", r.line(), r.trace());
    let f = r.failure.as_ref().expect("the documented window is found");
    assert!(f.message.contains("guarantee 4"), "{}", f.message);
    assert!(f.steps <= 4, "the window is a few steps: {}", r.trace());
}

/// The second limit, printed: a replay past the finish deadline answers the
/// task it finds, though its marker never landed (docs/protocol.md, "Crash
/// points": nothing is written past the deadline).
#[test]
fn past_the_finish_deadline_a_replay_answers_a_task_whose_marker_never_landed() {
    let w = Spec {
        advances: 1,
        crashes: 0,
        faults: 0,
        late_starts: true,
        limits: true,
        ..world("replay past the deadline (the known limit)", twice(), None)
    };
    let r = explore::shortest(&w);
    println!("model-check limit: {}\n{}", r.line(), r.trace());
    let f = r.failure.as_ref().expect("the documented limit is found");
    assert!(
        f.message.contains("past the finish deadline"),
        "{}",
        f.message
    );
}
