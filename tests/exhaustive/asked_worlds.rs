//! The worlds of one key asked in other ways (guarantee 5: another task
//! type in the `queue` scope, another set of task options, another tenant,
//! another task type in its own scope, an input its schema refuses), a
//! lookup of the key, a submit that begins after a reset and a clock step,
//! and a reset of a record whose submit died before its marker. Each on the
//! three stores, as `worlds.rs`'s (but the last: it says why).

use super::actors::{How, Role};
use super::gate::Fault;
use super::prelude::Prelude;
use super::script::Pick;
use super::sim::{Schema, Spec, StoreKind};
use super::worlds::{STORES, holds, spec};

fn submit_as(key: &'static str, input: u8, how: How) -> Role {
    Role::SubmitAs { key, input, how }
}

#[test]
fn two_submits_of_one_key_in_the_queue_scope_with_other_task_types_conflict_in_every_schedule() {
    for store in STORES {
        let queue = How {
            queue_scope: true,
            ..How::default()
        };
        let other = How {
            other_type: true,
            ..queue
        };
        let roles = vec![submit_as("k", 1, queue), submit_as("k", 1, other)];
        holds(spec("queue scope, other task type", store, roles));
    }
}

#[test]
fn two_submits_of_one_key_in_a_custom_scope_with_other_task_types_conflict_in_every_schedule() {
    for store in STORES {
        // `Scope::Custom`: the record under the scope's own folder, its key
        // hashed with the scope's name, shared by both task types.
        let custom = How {
            custom_scope: true,
            ..How::default()
        };
        let other = How {
            other_type: true,
            ..custom
        };
        let roles = vec![submit_as("k", 1, custom), submit_as("k", 1, other)];
        holds(spec("custom scope, other task type", store, roles));
    }
}

#[test]
fn two_submits_of_one_key_with_other_task_options_conflict_in_every_schedule() {
    for store in STORES {
        let options = How {
            options: true,
            ..How::default()
        };
        let roles = vec![
            Role::Submit { key: "k", input: 1 },
            submit_as("k", 1, options),
        ];
        holds(spec("other task options", store, roles));
    }
}

#[test]
fn one_key_of_two_tenants_maps_to_two_tasks_in_every_schedule() {
    for store in STORES {
        let tenant = |p| How {
            tenant: Some(p),
            ..How::default()
        };
        let roles = vec![
            submit_as("k", 1, tenant("a")),
            submit_as("k", 1, tenant("b")),
        ];
        let w = Spec {
            depth: 6,
            ..spec("two tenants, one key", store, roles)
        };
        holds(w);
    }
}

#[test]
fn one_key_of_two_task_types_in_their_own_scopes_maps_to_two_tasks_in_every_schedule() {
    for store in STORES {
        let other = How {
            other_type: true,
            ..How::default()
        };
        let roles = vec![
            Role::Submit { key: "k", input: 1 },
            submit_as("k", 1, other),
        ];
        let w = Spec {
            depth: 6,
            ..spec("two task types, their own scopes", store, roles)
        };
        holds(w);
    }
}

#[test]
fn inputs_the_schema_refuses_are_answered_as_the_keys_live_record_says_or_refused_writing_nothing()
{
    for store in STORES {
        // The key `k` answered (input 1); the schema, published since,
        // refuses every input: a replay of `k`, `k` with another input (a
        // conflict), and a new key `j` (refused).
        let roles = vec![
            Role::Submit { key: "k", input: 1 },
            Role::Submit { key: "k", input: 2 },
            Role::Submit { key: "j", input: 1 },
        ];
        let w = Spec {
            prelude: Prelude::Answered,
            schema: Schema::RefusesAll,
            slow: false,
            depth: 8,
            ..spec("schema refusing, a live key and a new one", store, roles)
        };
        holds(w);
    }
}

#[test]
fn a_lookup_of_a_key_beside_its_submit_answers_a_record_the_key_had() {
    for store in STORES {
        let roles = vec![
            Role::Submit { key: "k", input: 1 },
            Role::Lookup { key: "k" },
        ];
        let w = Spec {
            depth: 6,
            ..spec("a submit, a lookup", store, roles)
        };
        holds(w);
    }
}

#[test]
fn a_submit_begun_after_a_reset_and_a_clock_step_gets_a_new_task() {
    for store in STORES {
        // The key answered; a reset, the clock stepping, and a submit
        // started at any point: one that hears its first answer a second
        // after the reset is never answered the old task (the reset's
        // promise).
        let roles = vec![
            Role::Reset { key: "k" },
            Role::Submit { key: "k", input: 1 },
        ];
        let w = Spec {
            prelude: Prelude::Answered,
            late_starts: true,
            advances: 1,
            faults: 0,
            crashes: 0,
            depth: 10,
            ..spec(
                "an answered key, a reset, the clock, a submit",
                store,
                roles,
            )
        };
        holds(w);
    }
}

#[test]
fn a_reset_of_a_record_whose_submit_died_before_its_marker_leaves_the_task_with_its_marker() {
    // A submit of `k` died after its task, before its marker, and its
    // record is still in flight: a reset frees the key at once (the task is
    // there), and a replay of the submit comes before or after it. Once the
    // reset record lands no finisher can write the marker (the record holds
    // no pending task any more), so the reset writes it first. On AWS S3
    // alone: the other stores' ETags, listings and DELETEs change none of a
    // reset's steps, and the crate has no time to spare (docs/testing.md,
    // "The time budget").
    let roles = vec![
        Role::Reset { key: "k" },
        Role::Submit { key: "k", input: 1 },
    ];
    let w = Spec {
        prelude: Prelude::NoMarker,
        ..spec(
            "died before its marker, a reset, a replay",
            StoreKind::S3,
            roles,
        )
    };
    holds(w);
}

#[test]
fn a_reset_of_a_record_past_its_finish_deadline_whose_marker_never_landed_goes_ahead_and_writes_no_marker()
 {
    // The same dead submit, found 10 s past its record's finish deadline:
    // nothing may be written for the record any more, by a reset as by
    // anyone, and the reset goes ahead (the marker's loss is the documented
    // limit). On AWS S3 alone, as the world above.
    let w = Spec {
        prelude: Prelude::MarkerLost,
        ..spec(
            "marker lost, a reset",
            StoreKind::S3,
            vec![Role::Reset { key: "k" }],
        )
    };
    holds(w);
}

#[test]
fn a_reset_and_a_lookup_in_a_custom_scope_beside_a_submit_keep_every_guarantee() {
    for store in STORES {
        // The key answered in the custom scope (`shared`): a reset, a
        // lookup and a submit naming that scope, at once. The lookup and
        // the reset find the scope's record (the lookup's view names the
        // scope and its hash); the submit replays before the reset and gets
        // a new task after it.
        let custom = How {
            custom_scope: true,
            ..How::default()
        };
        let roles = vec![
            Role::ResetAs {
                key: "k",
                how: custom,
            },
            Role::LookupAs {
                key: "k",
                how: custom,
            },
            submit_as("k", 1, custom),
        ];
        let w = Spec {
            prelude: Prelude::AnsweredAs(custom),
            depth: 5,
            ..spec("custom scope: a reset, a lookup, a submit", store, roles)
        };
        holds(w);
    }
}

#[test]
fn a_reset_under_one_tenant_never_touches_the_other_tenants_record_of_the_key() {
    for store in STORES {
        // The key answered under tenants `a` and `b`: `a`'s reset, and
        // `b`'s lookup and submit, at once. The reset writes only `a`'s
        // record; `b`'s record stays live (guarantee 1), its lookup shows
        // it and its submit replays it.
        let tenant = |p| How {
            tenant: Some(p),
            ..How::default()
        };
        let roles = vec![
            Role::ResetAs {
                key: "k",
                how: tenant("a"),
            },
            Role::LookupAs {
                key: "k",
                how: tenant("b"),
            },
            submit_as("k", 1, tenant("b")),
        ];
        let w = Spec {
            prelude: Prelude::AnsweredTwice(tenant("a"), tenant("b")),
            depth: 5,
            ..spec("two tenants: a reset in one, the other", store, roles)
        };
        holds(w);
    }
}

#[test]
fn a_schema_that_accepts_one_input_and_refuses_another_refuses_without_writing() {
    for store in STORES {
        // `t`'s schema accepts `{"n": 1}` and refuses `{"n": 2}`; the key
        // `k` answered with input 1 before the schema was published: `k`
        // with input 2 (a conflict with `k`'s live record, never refused),
        // `j` with input 1 (a new task) and `j` with input 2 (refused, or a
        // conflict once `j`'s record is there), at once. The accepted input
        // is never refused; a refused one writes nothing.
        let roles = vec![
            Role::Submit { key: "k", input: 2 },
            Role::Submit { key: "j", input: 1 },
            Role::Submit { key: "j", input: 2 },
        ];
        let w = Spec {
            prelude: Prelude::Answered,
            schema: Schema::AcceptsUpTo(1),
            depth: 5,
            ..spec("schema accepting 1, refusing 2", store, roles)
        };
        holds(w);
    }
}

#[test]
fn a_submit_without_a_key_writes_its_task_and_marker_and_names_only_its_tenant_in_every_schedule() {
    for store in STORES {
        // No key, so no record: a tenant's offloaded input (its payload
        // first, then task and marker side by side) with buquet's worker
        // polling beside it; then a keyless submit of nobody's, alone.
        // Added for the mutants of `submit_plain` and
        // `put_task_and_marker`, which no keyed world reaches.
        let offloaded = How {
            tenant: Some("a"),
            payload: true,
            ..How::default()
        };
        let roles = vec![
            Role::Plain {
                input: 1,
                how: offloaded,
            },
            Role::Worker,
        ];
        let w = Spec {
            depth: 6,
            ..spec("keyless, a tenant's payload, the worker", store, roles)
        };
        holds(w);
        let plain = Role::Plain {
            input: 1,
            how: How::default(),
        };
        holds(spec("keyless, alone", store, vec![plain.clone()]));
        // Scripted: the task lands, and the marker's first PUT meets a 503.
        // Then buquet's worker, finding the task by its listing of `tasks/`
        // (not by the marker), claims it at any point beside the marker's
        // retry: a marker that took a retry is checked by a read of the
        // task, and removed once the task is taken (no record, so no
        // sweeper ever looks at this task again). (Unscripted, the claim
        // slips in between the task and a first marker PUT answered at
        // once: docs/protocol.md's open window of one round trip, which the
        // scan of the ready index closes.)
        let script = vec![
            Pick::Decide(0, "tasks/", Fault::Ok),
            Pick::Decide(0, "ready/", Fault::Unavailable),
        ];
        let w = Spec {
            faults: 2,
            depth: 6,
            script,
            ..spec(
                "keyless, buquet's worker by tasks/",
                store,
                vec![plain, Role::Scanner],
            )
        };
        holds(w);
    }
}
