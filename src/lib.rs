//! # idempotent-submit
//!
//! The front door of a task queue that lives in one S3 bucket: submits that
//! producers can retry safely, on S3 conditional writes.
//!
//! ```no_run
//! # async fn demo(queue: idempotent_submit::Queue) -> Result<(), idempotent_submit::SubmitError> {
//! let task = queue
//!     .submit("charge_customer", serde_json::json!({"order": "ORD-123"}))
//!     .idempotency_key("charge-ORD-123")
//!     .idempotency_ttl(chrono::Duration::days(30))
//!     .await?;
//! println!("{} replayed={}", task.task_id, task.replayed);
//! # Ok(()) }
//! ```
//!
//! ## The contract in short
//!
//! - Bucket layout: `tasks/{shard}/{task_id}.json` (buquet 0.1's task object),
//!   `ready/{shard}/{minute}/{task_id}` (its marker),
//!   `idempotency/{scope}/{hex}.json` (the record; `hex` is the key hash
//!   without its `sha256:` tag, as buquet's clients write it),
//!   `payloads/{task_id}/input.json` (an input offloaded with
//!   `use_payload_refs`, as buquet writes it),
//!   `rejected/{yyyy}/{mm}/{dd}/{message_id}.json` (SQS messages that can
//!   never succeed).
//! - Within a record's life every submit of one (tenant, scope, key) gets the
//!   same task id, whatever crashed in between; a task object is written at
//!   most once per record; the same key with another task type, input or set
//!   of task options (buquet's `SubmitOptions`, builder methods here) is a
//!   conflict and writes nothing.
//! - A new submit: the record (`If-None-Match: *`, status `creating`, with the
//!   whole task as `pending_task`), then the task (`If-None-Match: *`) and its
//!   marker in parallel, then the record to `ready` (`If-Match`). Anyone who
//!   meets a `creating` record before its finish deadline finishes it the
//!   same way; nobody writes its task after that.
//! - A replay reads the record and the task: 3 requests. A conflict: 2.
//!
//! docs/protocol.md has every step, with its failure cases.

#[cfg(feature = "cli")]
pub mod cli;
pub mod clock;
pub mod config;
pub mod doctor;
pub mod due_sender;
#[cfg(feature = "lambda")]
pub mod lambda;
pub mod protocol;
pub mod queue;
pub mod store;

pub use clock::{Clock, ManualClock, SystemClock};
pub use config::{ClockCheck, Config, ConfigError, RecordEvents, RetryPolicy, Settings};
pub use due_sender::{DueSender, MemoryDueQueue};
pub use protocol::{
    ConflictKind, IdempotencyKey, Scope, SubmitError, Submitted, TaskOptions, TaskRetryPolicy,
    TaskType, Tenant, ValidationError,
};
pub use queue::{Queue, SubmitBuilder};
pub use store::{MemoryStore, S3Store, Store, StoreError};
