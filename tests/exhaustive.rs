//! The exhaustive checker: every schedule of small worlds, up to a bound, on
//! the real engine (`Queue`/`Engine` over the in-memory store and the manual
//! clock). Each S3 request and each SQS send is one step, taken by the
//! explorer with every fault the model knows (a lost answer, 503, 409, a
//! crash before or after, a slow write that lands later); the clock steps to
//! every boundary the protocol judges by. Every guarantee is checked after
//! every step (docs/testing.md, "The exhaustive checker").
//!
//! `make model-check` runs it alone; `MODEL_CHECK_DEPTH=n` deepens every
//! world by n steps.
//!
//! A test crate of its own (Cargo.toml's `[[test]]`, tests/suite.rs's
//! `OWN_CRATES`), so that a mutant of the library rebuilds this small crate
//! and not the whole suite (docs/decisions.md, "The exhaustive checker").
//! It takes from the other tests only the store wrapper of
//! `tests/common/wrap.rs` and the planted bugs of `tests/model/planted.rs`
//! (the same files, included).

#[path = "exhaustive/actors.rs"]
mod actors;
#[path = "exhaustive/asked_worlds.rs"]
mod asked_worlds;
#[path = "exhaustive/checks.rs"]
mod checks;
#[path = "exhaustive/explore.rs"]
mod explore;
#[path = "exhaustive/gate.rs"]
mod gate;
#[path = "exhaustive/more_checks.rs"]
mod more_checks;
#[path = "exhaustive/mutant_worlds.rs"]
mod mutant_worlds;
#[path = "exhaustive/pass_worlds.rs"]
mod pass_worlds;
#[path = "exhaustive/payloads.rs"]
mod payloads;
#[path = "exhaustive/planted_bugs.rs"]
mod planted_bugs;
#[path = "exhaustive/prelude.rs"]
mod prelude;
#[path = "exhaustive/requests.rs"]
mod requests;
#[path = "exhaustive/reset_checks.rs"]
mod reset_checks;
#[path = "exhaustive/script.rs"]
mod script;
#[path = "exhaustive/sim.rs"]
mod sim;
#[path = "exhaustive/worlds.rs"]
mod worlds;

// The store wrapper of tests/common/ (the checker's planted bugs read no
// call's fields) and the model test's planted bugs (some planted in the
// model's own actors, which the checker does not use): the same files.
#[allow(dead_code)]
#[path = "model/planted.rs"]
mod planted;
#[allow(dead_code)]
#[path = "common/wrap.rs"]
mod wrap;

/// The part of `tests/common/` the checker uses, where the files it shares
/// with the suite look for it.
mod common {
    pub use super::wrap::{Hooks, Wrapped};

    /// Contract defaults, with retries that do not wait (as
    /// `tests/common/`'s `settings`).
    pub fn settings() -> idempotent_submit::Settings {
        idempotent_submit::Settings {
            retry: idempotent_submit::RetryPolicy::immediate(),
            ..idempotent_submit::Settings::default()
        }
    }
}

/// The planted bugs, where the files they share with the suite look for
/// them.
mod model {
    pub(crate) use super::planted;
}
