//! # idempotent-submit
//!
//! The front door of a task queue that lives in one S3 bucket: submits that
//! producers can retry safely, on S3 conditional writes.
//!
//! The whole producer path, on a bucket in memory:
//!
//! ```
//! use idempotent_submit::{MemoryStore, Queue, Scope, Settings, SubmitError};
//! use serde_json::json;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), SubmitError> {
//! // A queue over a bucket. In memory here; over S3, `Queue::from_config`
//! // (with `Config::from_env`) or `Queue::new(S3Store::from_env(..).await, ..)`.
//! let queue = Queue::new(MemoryStore::default(), Settings::default());
//!
//! // A submit with a key: the task is written once, as buquet's submit
//! // writes it, with the task options buquet's `SubmitOptions` has.
//! let task = queue
//!     .submit("charge_customer", json!({"order": "ORD-123"}))
//!     .idempotency_key("charge-ORD-123")
//!     .idempotency_ttl(chrono::Duration::days(30))
//!     .max_retries(5)
//!     .await?;
//! assert!(task.created());
//! assert_eq!(task.status, "pending");
//! let key = task.idempotency.as_ref().expect("a keyed submit names its key");
//! assert_eq!((key.key.as_str(), key.scope.as_str()), ("charge-ORD-123", "charge_customer"));
//!
//! // A retry of the key (a timeout, a crash, a redelivery) gets the same
//! // task, and writes nothing.
//! let retry = queue
//!     .submit("charge_customer", json!({"order": "ORD-123"}))
//!     .idempotency_key("charge-ORD-123")
//!     .max_retries(5)
//!     .await?;
//! assert!(retry.replayed);
//! assert_eq!(retry.task_id, task.task_id);
//!
//! // The key with another input is a conflict: nothing is written.
//! let other = queue
//!     .submit("charge_customer", json!({"order": "ORD-999"}))
//!     .idempotency_key("charge-ORD-123")
//!     .max_retries(5)
//!     .await;
//! assert!(matches!(other, Err(SubmitError::Conflict { .. })));
//!
//! // A key can be shared by task types: the `queue` scope.
//! let shared = queue
//!     .submit("refund_customer", json!({"order": "ORD-123"}))
//!     .idempotency_key("order-ORD-123")
//!     .idempotency_scope(Scope::Queue)
//!     .await?;
//! assert!(shared.created());
//!
//! // What the producer can see afterwards: the task object, as buquet's
//! // workers read it, and its key's record.
//! let body = queue.task(task.task_id).await?.expect("the task is written");
//! let object: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
//! assert_eq!(object["input"], json!({"order": "ORD-123"}));
//! let seen = queue
//!     .lookup_key("charge_customer", "charge-ORD-123", None)
//!     .await?
//!     .expect("the key is held");
//! assert_eq!(seen.task_id, task.task_id);
//!
//! // Many at once: one result per item, each replayed on its own key.
//! let results = queue
//!     .submit_many((0..3).map(|i| {
//!         queue
//!             .submit("charge_customer", json!({"order": i}))
//!             .idempotency_key(format!("charge-{i}"))
//!     }))
//!     .await;
//! assert!(results.iter().all(|r| r.as_ref().is_ok_and(|s| s.created())));
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
//!
//! ## Features
//!
//! - `lambda` and `cli` (default): the Lambda adapters and the binaries
//!   `submit`, `sweep` and `idem`; the library alone builds without them.
//! - `schemas`: inputs checked against their task type's published JSON
//!   Schema (`VALIDATE_INPUT_SCHEMAS`); without it that setting is refused.
//! - `testing`: test machinery (fault injection, the stores' conformance
//!   suite `store::conformance`), and the service's internals for the
//!   tests under one path, `testing`; never in a release build.

#![warn(missing_docs)]

// The public API: the queue and its builder, what a submit answers, the
// stores, the configuration and the clocks. The rest is the service's own
// (the protocol's engine, the doors, the CLI), private but for what
// something outside the library needs: `cli` and `lambda`, the binaries'
// entry modules (hidden from the documentation); and, with the `testing`
// feature only, the one path the tests and the bench take past the facade,
// `testing` (`testing::{protocol, intake, probe}`, and `Queue::engine`).
// Hidden only outside the unit tests' build: `missing_docs` skips what is
// hidden, so the test build (which `make test`'s lints compile with
// `-D warnings`) is where every item those paths reach must be documented
// too.
pub mod clock;
pub mod config;
pub mod due_sender;
pub mod store;

mod aws;
mod queue;

#[cfg_attr(not(test), doc(hidden))]
#[cfg(feature = "cli")]
pub mod cli;
#[cfg(feature = "cli")]
mod doctor;
#[cfg(any(feature = "lambda", feature = "cli"))]
mod intake;
#[cfg_attr(not(test), doc(hidden))]
#[cfg(feature = "lambda")]
pub mod lambda;
#[cfg(any(feature = "testing", feature = "cli"))]
mod probe;
mod protocol;
// A generated bucket for the scale bench: a `Store` above the store layer,
// for it builds its bodies with a real `Queue` and lists by the config's
// `ListOrder`.
#[cfg(feature = "testing")]
mod synthetic;

/// The service's internals, for the tests and the bench only (the
/// `testing` feature; no shipped build has it): each module re-exports the
/// public items of the crate's own module of that name, which is private.
#[cfg_attr(not(test), doc(hidden))]
#[cfg(feature = "testing")]
pub mod testing {
    /// What every door takes in (`src/intake/`).
    #[cfg(any(feature = "lambda", feature = "cli"))]
    pub mod intake {
        pub use crate::intake::*;
    }
    /// `idem doctor --probe`: a store's capabilities (`src/probe.rs`).
    pub mod probe {
        pub use crate::probe::*;
    }
    /// The idempotency protocol: its engine, its records, the sweeper
    /// (`src/protocol/`).
    pub mod protocol {
        pub use crate::protocol::*;
    }
    /// A generated bucket for runs at scale (`src/synthetic/`).
    pub mod synthetic {
        pub use crate::synthetic::*;
    }
}

pub use clock::{Clock, ManualClock, SystemClock};
pub use config::{ClockCheck, Config, ConfigError, ListOrder, RecordEvents, RetryPolicy, Settings};
pub use due_sender::{DueSender, MemoryDueQueue};
pub use protocol::{
    ConflictKind, ErrorKind, IdempotencyInfo, IfTaskFailed, InputError, KeyView, Reset, Scope,
    ScopeName, SubmitError, Submitted, TaskRetryPolicy, Tenant, ValidationError,
};
pub use queue::{BATCH_FAN_OUT, Queue, SubmitBuilder};
pub use store::{MemoryStore, S3Store, Store, StoreError};
