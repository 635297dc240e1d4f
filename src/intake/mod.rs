//! What the service takes in, whatever carried it: the `POST /tasks` body
//! (which every SQS message and every line of `idem submit --batch` is too),
//! a batch's items and their results, the due queue's messages, the events
//! of other systems that `SOURCES` maps to submits, and the problems that
//! answer a refusal. Shared by the Lambda adapters
//! (`src/lambda/`: they read Lambda's events and write Lambda's answers) and
//! the CLI, so that neither needs the other: the CLI builds without the
//! Lambda runtime.
// Public only with the `testing` feature (src/lib.rs): without it, what only
// one door uses (the HTTP problems, the CLI's drain) is unused in a build
// without that door, not dead. The testing build, which make test lints,
// still finds what nothing uses.
#![cfg_attr(not(feature = "testing"), allow(dead_code, unused_imports))]

pub mod batch;
pub mod due;
pub mod problem;
pub mod request;
pub mod sources;

pub use problem::Problem;
pub use request::SubmitBody;
