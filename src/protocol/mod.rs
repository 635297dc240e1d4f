//! The idempotency-key protocol: names and hashes, the objects of the bucket
//! layout, the submit state machine, and the sweep.

pub mod hash;
pub mod names;
pub mod record;
pub mod submit;
pub mod sweep;

pub use names::{IdempotencyKey, Scope, TaskType, Tenant, Ttl, ValidationError};
pub use record::{Record, RecordStatus, TaskLocation};
pub use submit::{
    ConflictKind, Engine, IdempotencyInfo, Input, KeySpec, SubmitError, SubmitRequest, Submitted,
};
pub use sweep::{RecordOutcome, SweepOptions, SweepSummary};
