//! The idempotency-key protocol: names and hashes, the objects of the bucket
//! layout, the submit state machine, and the sweep.
// Public only with the `testing` feature (src/lib.rs): without it, what only
// the tests use (and what only the doors use, when their features are off)
// is unused, not dead. The testing build, which make test lints, still
// finds what nothing uses.
#![cfg_attr(not(feature = "testing"), allow(dead_code, unused_imports))]

mod claim;
pub mod engine;
pub mod error;
mod finish;
pub mod hash;
mod input_check;
pub mod keys;
pub mod names;
pub mod options;
pub mod record;
mod replay;
pub mod request;
mod retry_policy;
pub mod rfc3339;
mod s3_time;
#[cfg(feature = "schemas")]
mod schema;
pub mod submit;
pub mod sweep;
mod task_options;

pub use crate::due_sender::DueMessages;
pub use engine::Engine;
pub use error::{ConflictKind, ErrorKind, InputError, SubmitError};
pub use keys::{KeyRef, KeyView, Reset};
pub use names::{
    IdempotencyKey, IfTaskFailed, Scope, ScopeName, TaskType, Tenant, Ttl, ValidationError,
};
pub use record::{Record, RecordStatus, TaskLocation};
pub use request::{IdempotencyInfo, Input, KeySpec, Phase, SubmitRequest, Submitted};
pub use retry_policy::TaskRetryPolicy;
pub use sweep::{Continuation, HandOn, RecordOutcome, ShareOutcome, SweepOptions, SweepSummary};
pub use task_options::{TaskFields, TaskOptions};
