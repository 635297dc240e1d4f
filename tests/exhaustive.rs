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

mod actors;
mod checks;
mod explore;
mod gate;
mod more_checks;
mod planted_bugs;
mod prelude;
mod sim;
mod worlds;
