//! The scheduled pass beside an offloaded input: an orphan payload deleted
//! only once no task can name it (docs/protocol.md, "Offloaded inputs",
//! rule 4), on the three stores, as `worlds.rs`'s.

use super::actors::{How, Role};
use super::gate::Fault;
use super::script::Pick;
use super::sim::Spec;
use super::worlds::{STORES, holds, spec};

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
fn the_scheduled_pass_deletes_an_orphan_payload_only_once_no_task_can_name_it() {
    for store in STORES {
        // Scripted (each step checked): #0's payload lands, its record PUT
        // is slow (it may land up to the late-write margin after it was
        // sent) and the process dies at its retry. Then every schedule:
        // the slow record landing or not, the clock to any boundary (the
        // payload's orphan age and a second before it among them), the
        // scheduled pass at any point: it deletes the payload only once no
        // task can name it, and a pass that completes leaves no orphan past
        // its age.
        let script = vec![
            Pick::Start(0),
            Pick::Decide(0, "payloads/", Fault::Ok),
            Pick::Decide(0, "idempotency/", Fault::Slow),
            Pick::Decide(0, "idempotency/", Fault::CrashBefore),
        ];
        let w = Spec {
            late_starts: true,
            faults: 2,
            advances: 1,
            passes: 1,
            depth: 18,
            script,
            ..spec(
                "an orphan payload, the clock, the pass",
                store,
                vec![offloaded()],
            )
        };
        holds(w);
    }
}

/// The gap found while writing the world above, by its checks, now closed
/// (docs/protocol.md, "Offloaded inputs", rule 4): the orphan age counted
/// from the payload's `LastModified` the finish window, one late-write
/// margin and the operation timeout, but the record beside the payload may
/// land up to the margin after both were sent, and its finisher's task
/// write, sent before the record's finish deadline, up to the margin after
/// that. So a task could still be written up to the finish window and twice
/// the margin after the payload, and the pass deleted the payload 874 s
/// sooner. The payload's orphan age now counts the margin twice
/// (`Engine::payload_orphan_after`). The world above cannot reach this
/// schedule within `make test`'s bounds (three clock steps, two slow
/// writes, a replay and the pass's 15 requests: a walk of depth 16 from the
/// replay on cost 94 s of CPU), so it is scripted, each step checked: with
/// one margin the checks failed at the pass's DELETE ("payloads: #2
/// deleted"); with two, the pass keeps the payload and every guarantee
/// holds to the task's landing.
#[test]
fn the_pass_keeps_a_payload_whose_late_record_may_still_write_its_task() {
    let store = super::sim::StoreKind::S3;
    // #0: payload lands, record PUT slow, dies at its retry; the record
    // lands 898 s late; a replay (#1) a minute before that record's finish
    // deadline writes the payload (412) and sends the task, slow, and dies;
    // the clock at the payload's orphan age (a second on, as the pass
    // judges it); the scheduled pass (#2) runs; the task lands.
    let script = vec![
        Pick::Start(0),
        Pick::Decide(0, "payloads/", Fault::Ok),
        Pick::Decide(0, "idempotency/", Fault::Slow),
        Pick::Decide(0, "idempotency/", Fault::CrashBefore),
        Pick::Clock(898),
        Pick::Land(0, "idempotency/"),
        Pick::Clock(2340),
        Pick::Start(1),
        Pick::UntilWrite(1, "tasks/"),
        Pick::Decide(1, "tasks/", Fault::Slow),
        Pick::Decide(1, "tasks/", Fault::CrashBefore),
        Pick::Clock(87),
        Pick::Start(2),
        Pick::Finish(2),
        Pick::Land(1, "tasks/"),
    ];
    let roles = vec![offloaded(), offloaded(), Role::Pass];
    let w = Spec {
        late_starts: true,
        faults: 4,
        crashes: 2,
        advances: 3,
        depth: 1,
        script,
        ..spec("a late record's task, the pass", store, roles)
    };
    let r = super::explore::explore(&w);
    println!("model-check: {}", r.line());
    assert!(
        r.failure.is_none(),
        "the pass deleted a payload whose task could still land:\n{}",
        r.trace()
    );
}
