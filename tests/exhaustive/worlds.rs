//! The worlds, one test each, on each store behaviour the protocol
//! supports. Bounds keep all of them within minutes of `make test` on two
//! cores; `MODEL_CHECK_DEPTH` deepens them (`make model-check`, `make soak`).

use idempotent_submit::due_sender::DueOrder;

use super::actors::{Events, Role};
use super::explore::{self, Report};
use super::sim::{Spec, StoreKind};

const STORES: [StoreKind; 3] = [
    StoreKind::S3,
    StoreKind::Express,
    StoreKind::VersionedNoConditionalDelete,
];

fn spec(name: &'static str, store: StoreKind, actors: Vec<Role>) -> Spec {
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
        depth: 12,
        bug: None,
    }
}

/// Explores `spec` deepened by `MODEL_CHECK_DEPTH` and prints its line;
/// fails with the counterexample if a guarantee broke.
fn holds(spec: Spec) -> Report {
    let spec = Spec {
        depth: spec.depth + explore::deeper(),
        ..spec
    };
    let r = explore::explore(&spec);
    println!("model-check {} {:?}: {}", spec.name, spec.store, r.line());
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

#[allow(dead_code)]
fn unused() -> DueOrder {
    DueOrder::default()
}
