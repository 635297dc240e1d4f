//! The checker finds each planted bug of tests/model/planted.rs that its
//! worlds reach, with the shortest schedule (iterative deepening), and the
//! one known limit of the protocol: under `RECORD_EVENTS=submitter` with
//! `DUE_MESSAGE=with_claim`, a process that dies between its record's PUT
//! and its due message leaves the record to a replay (docs/protocol.md,
//! guarantee 4).

use idempotent_submit::due_sender::DueOrder;

use super::actors::{Events, Role};
use super::explore::{self, Report};
use super::planted::Bug;
use super::sim::{Spec, StoreKind};

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
        "planted {:?}: {} steps, {:.1} s, {} states\n{}",
        spec.bug,
        r.failure.as_ref().map_or(0, |f| f.steps),
        r.elapsed.as_secs_f64(),
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
