//! The protocol's knobs ([`Settings`]), the values each takes, the
//! conditions of the world they are checked against ([`Conditions`]), and
//! the checks: what configuration could break (docs/protocol.md,
//! "Guarantees"). Where they come from is src/config/env.rs.

use std::time::Duration as StdDuration;

use chrono::Duration;

/// How the protocol retries one request: on 409 and on S3's retryable
/// failures, with capped exponential backoff and full jitter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts per request, the first included.
    pub max_attempts: u32,
    /// The first backoff.
    pub base_delay: StdDuration,
    /// The longest backoff.
    pub max_delay: StdDuration,
    /// One attempt is abandoned (and its request dropped) after this long.
    pub attempt_timeout: StdDuration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 5,
            base_delay: StdDuration::from_millis(25),
            max_delay: StdDuration::from_secs(1),
            attempt_timeout: StdDuration::from_secs(5),
        }
    }
}

impl RetryPolicy {
    /// Delay before attempt `n + 1` (n ≥ 1): full jitter under the cap.
    pub fn backoff(&self, n: u32) -> StdDuration {
        let cap = self
            .base_delay
            .saturating_mul(1u32 << n.min(16))
            .min(self.max_delay);
        let ms = cap.as_millis() as u64;
        StdDuration::from_millis(if ms == 0 { 0 } else { fastrand::u64(0..=ms) })
    }

    /// For tests: retries without waiting.
    pub fn immediate() -> Self {
        RetryPolicy {
            base_delay: StdDuration::ZERO,
            max_delay: StdDuration::ZERO,
            attempt_timeout: StdDuration::from_millis(500),
            ..Self::default()
        }
    }
}

/// How late a signed request can still land at S3 after it was sent.
pub const LATE_WRITE_MARGIN: Duration = Duration::minutes(15);

/// The protocol's knobs. `Default` is the documented defaults (the README, "Configuration").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// How long a key is remembered when the submit says nothing
    /// (`IDEMPOTENCY_TTL_DAYS`).
    pub default_ttl: Duration,
    /// The longest a submit may ask (`IDEMPOTENCY_MAX_TTL_DAYS`).
    pub max_ttl: Duration,
    /// A record's task may only be written before `LastModified + finish_window`.
    pub finish_window: Duration,
    /// The sweeper finishes `creating` records older than this.
    pub stale_creating_after: Duration,
    /// How many hex digits of a task id name its shard
    /// (`TASK_SHARD_PREFIX_LEN`).
    pub shard_prefix_len: usize,
    /// The largest input, as canonical JSON (`MAX_INPUT_BYTES`).
    pub max_input_bytes: usize,
    /// Most items in one `POST /tasks/batch` (`MAX_BATCH_TASKS`).
    pub max_batch_tasks: usize,
    /// Refuse a submit without a key (`REQUIRE_IDEMPOTENCY_KEY`).
    pub require_key: bool,
    /// Every submit, all its attempts included, ends within this: 25 s, well
    /// under API Gateway's integration limit (29 s for REST APIs, 30 s for
    /// HTTP APIs), so that a slow S3 is answered as our 503 with
    /// `Retry-After`, not as API Gateway's bare 503.
    pub operation_timeout: Duration,
    /// How each store request is retried.
    pub retry: RetryPolicy,
    /// Whose clock the deadlines are judged by.
    pub clock_check: ClockCheck,
    /// How long after its deadline a write sent before it may still land:
    /// a record with no task is answered `missing` only past its finish
    /// deadline plus this. Never below [`LATE_WRITE_MARGIN`] in a
    /// deployment ([`Settings::check`]); a field so that the model test can
    /// show its checker catching a margin that is too short.
    pub late_write_margin: Duration,
    /// Check every input against the JSON Schema published for its task
    /// type at `schemas/{task_type}.json`, before anything is written
    /// (`VALIDATE_INPUT_SCHEMAS`; off by default). Needs a build with the
    /// `schemas` feature: without it, [`Settings::check`] refuses it, and a
    /// queue built on it anyway refuses every submit (nothing is ever let
    /// through unchecked).
    pub validate_input_schemas: bool,
    /// How long a process trusts the schema it read for a task type (or its
    /// absence) before the next submit of that type revalidates it with a
    /// conditional GET (`SCHEMA_CACHE_SECONDS`; 0: at every submit).
    pub schema_cache_ttl: Duration,
    /// The store honours `If-Match` on DELETE (`CONDITIONAL_DELETE`, on by
    /// default). Off, nothing is deleted on the strength of it: an expired
    /// record is deleted by the version that was read (a versioned bucket)
    /// or left to the lifecycle rule (docs/protocol.md, "Every DELETE").
    pub conditional_delete: bool,
    /// How the scheduled pass lists `idempotency/` (`LIST_ORDER`).
    pub list_order: ListOrder,
    /// What a keyed submit does when its key's task ended failed or
    /// cancelled, unless it says (`IF_TASK_FAILED`; `replay` by default).
    pub if_task_failed: IfTaskFailed,
    /// The most invocations that work one scheduled pass at once
    /// (`PASS_CONCURRENCY`; 4 by default): each holds a share of the pass's
    /// ranges by a lease in the checkpoint.
    pub pass_concurrency: usize,
    /// A scope whose first page says it holds more than two of this many
    /// records is listed by a range for about each this many (at most 64 a
    /// scope), side by side: 64,000, so that each range lists 64 full pages
    /// for its last, part-full one. Not read from the environment; tests
    /// make it small to split small scopes.
    pub pass_range_records: u64,
}

/// The most invocations of one pass at once that `PASS_CONCURRENCY` may
/// ask (SQS's event source mappings take 2 to 1,000).
pub const MAX_PASS_CONCURRENCY: usize = 1000;

/// How the store lists (`LIST_ORDER`; docs/protocol.md, "The scheduled
/// pass").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ListOrder {
    /// In the byte order of keys, with `StartAfter` (S3): the pass lists
    /// ranges of keys side by side, splitting a large scope by the hex
    /// digits of the record hash.
    #[default]
    Bytes,
    /// In any order, maybe without `StartAfter`, by prefixes that end in `/`
    /// (S3 Express, and any store the probe finds out of byte order): the
    /// pass lists each scope's folder side by side, page by page, and keeps
    /// its place by the store's continuation tokens.
    Any,
}

impl ListOrder {
    /// The value of `LIST_ORDER` that names it.
    pub fn as_str(&self) -> &'static str {
        match self {
            ListOrder::Bytes => "bytes",
            ListOrder::Any => "any",
        }
    }

    /// The order `name` names (`bytes` or `any`).
    pub fn from_name(name: &str) -> Option<Self> {
        [ListOrder::Bytes, ListOrder::Any]
            .into_iter()
            .find(|o| o.as_str() == name)
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            default_ttl: Duration::days(30),
            max_ttl: Duration::days(365),
            finish_window: Duration::seconds(2400),
            stale_creating_after: Duration::seconds(600),
            shard_prefix_len: 1,
            max_input_bytes: 262_144,
            max_batch_tasks: 100,
            require_key: false,
            operation_timeout: Duration::seconds(25),
            retry: RetryPolicy::default(),
            clock_check: ClockCheck::S3Date,
            late_write_margin: LATE_WRITE_MARGIN,
            validate_input_schemas: false,
            schema_cache_ttl: Duration::seconds(60),
            conditional_delete: true,
            list_order: ListOrder::Bytes,
            if_task_failed: IfTaskFailed::Replay,
            pass_concurrency: 4,
            pass_range_records: 64_000,
        }
    }
}

/// The largest offset between S3's clock and ours at which anything
/// deadline-bound is still written (docs/protocol.md).
pub const MAX_CLOCK_OFFSET: Duration = Duration::seconds(60);

/// How the finish deadline (in S3's time: a record's `LastModified` plus the
/// window) is compared with now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockCheck {
    /// In S3's time: our clock plus its offset from S3's, estimated from the
    /// `Date` of S3's answers ([`crate::Store::clock_offset`]), taking the
    /// bound that is safe for each decision. Nothing deadline-bound is
    /// written while the offset is unknown or over [`MAX_CLOCK_OFFSET`].
    S3Date,
    /// The injected clock is taken as S3's own time. Only for tests that move
    /// a [`crate::ManualClock`] against a real S3 API (moto), whose own time
    /// they cannot move.
    TrustClock,
}

/// The longest delay SQS gives a message: the due queue's `DelaySeconds`,
/// which is `STALE_CREATING_AFTER_SECONDS`, cannot be longer.
pub const MAX_SQS_DELAY: Duration = Duration::seconds(900);

/// How late a record's event may reach the sweeper after its delay: S3's
/// event delivery and the due queue's redeliveries of a failed batch.
pub const EVENT_DELIVERY_MARGIN: Duration = Duration::minutes(15);

/// What the world around the functions promises (docs/protocol.md,
/// "Guarantees"), which the settings are checked against: how late a signed
/// request can still land at S3, how late a record's event can reach the
/// sweeper after its delay, and the operation deadline every submit ends
/// within. Every deployment runs under [`Conditions::AWS`]. Only a build
/// with the `testing` feature can be told otherwise
/// (`TESTING_OPERATING_CONDITIONS`), for a test world whose link and due
/// queue it controls; a build without it refuses that variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conditions {
    /// How late a signed request can still land at the store.
    pub late_write: Duration,
    /// How late a record's due message can reach the sweeper after its delay.
    pub event_delivery: Duration,
    /// The deadline every submit's operation ends within.
    pub operation_timeout: Duration,
}

impl Conditions {
    /// AWS's: [`LATE_WRITE_MARGIN`], [`EVENT_DELIVERY_MARGIN`], and 25 s of
    /// operation deadline (under API Gateway's integration timeout).
    pub const AWS: Conditions = Conditions {
        late_write: LATE_WRITE_MARGIN,
        event_delivery: EVENT_DELIVERY_MARGIN,
        operation_timeout: Duration::seconds(25),
    };
}

/// The largest `MAX_BATCH_TASKS`: a batch runs at most
/// [`crate::queue::BATCH_FAN_OUT`] items at once (two S3 connections each,
/// well under Lambda's 1,024 file descriptors), so that every item of a
/// batch starts at once and the batch ends within one submit's operation
/// deadline, under API Gateway's integration timeout.
pub const MAX_BATCH_TASKS_LIMIT: usize = 100;

/// The longest a process may trust a cached schema: a schema published (or
/// fixed) reaches every warm process within this.
pub const MAX_SCHEMA_CACHE: Duration = Duration::seconds(3600);

/// A variable that is malformed, or values that together break the
/// protocol's operating conditions.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{var}: {reason}")]
pub struct ConfigError {
    /// The variable (or setting) that is wrong.
    pub var: &'static str,
    /// What is wrong with it.
    pub reason: String,
}

pub(super) fn err(var: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError {
        var,
        reason: reason.into(),
    }
}

impl Settings {
    /// The operating conditions of docs/protocol.md, "Guarantees" that configuration
    /// can break.
    pub fn check(&self) -> Result<(), ConfigError> {
        self.check_under(&Conditions::AWS)
    }

    /// The same checks, against the promises of `world` instead of AWS's
    /// (only a test world's, see [`Conditions`]).
    pub fn check_under(&self, world: &Conditions) -> Result<(), ConfigError> {
        self.check_record_life()?;
        self.check_windows(world)?;
        self.check_limits()?;
        self.check_build(cfg!(feature = "schemas"))
    }

    /// What the build can do: input schemas need a JSON Schema validator,
    /// which only a build with the `schemas` feature has (`schemas_built`).
    pub(super) fn check_build(&self, schemas_built: bool) -> Result<(), ConfigError> {
        if self.validate_input_schemas && !schemas_built {
            return Err(err("VALIDATE_INPUT_SCHEMAS", NO_SCHEMAS_BUILD));
        }
        Ok(())
    }

    /// A record lives at least an hour, and no default outlives the longest.
    fn check_record_life(&self) -> Result<(), ConfigError> {
        if self.default_ttl < Duration::hours(1) {
            return Err(err("IDEMPOTENCY_TTL_DAYS", "must be at least 1 hour"));
        }
        if self.max_ttl < self.default_ttl {
            return Err(err(
                "IDEMPOTENCY_MAX_TTL_DAYS",
                "must be at least IDEMPOTENCY_TTL_DAYS",
            ));
        }
        Ok(())
    }

    /// The finish window fits the hour in which the queue keeps tasks, with
    /// room for late writes, the operation's retries and the due queue's
    /// delay and redeliveries.
    fn check_windows(&self, world: &Conditions) -> Result<(), ConfigError> {
        if self.finish_window >= Duration::seconds(2700) {
            return Err(err(
                "FINISH_WINDOW_SECONDS",
                "must be below 2700 (the window plus 15 minutes must stay under the hour in which the queue keeps tasks)",
            ));
        }
        // Not read from the environment: only code can lower it, and no
        // deployment may (S3 can land a signed request up to 15 min late).
        if self.late_write_margin < world.late_write {
            return Err(err(
                "late_write_margin",
                format!(
                    "must be at least {} s (how late a signed request can still land at S3)",
                    world.late_write.num_seconds()
                ),
            ));
        }
        if self.finish_window < self.operation_timeout * 2 {
            return Err(err(
                "FINISH_WINDOW_SECONDS",
                format!(
                    "must be at least twice the operation timeout ({} s)",
                    self.operation_timeout.num_seconds()
                ),
            ));
        }
        if self.stale_creating_after <= Duration::zero()
            || self.stale_creating_after > MAX_SQS_DELAY
        {
            return Err(err(
                "STALE_CREATING_AFTER_SECONDS",
                format!(
                    "must be 1 to {} (it is the due queue's delay, and SQS delays at most that long)",
                    MAX_SQS_DELAY.num_seconds()
                ),
            ));
        }
        if self.stale_creating_after + world.event_delivery >= self.finish_window {
            return Err(err(
                "STALE_CREATING_AFTER_SECONDS",
                format!(
                    "plus {} s (event delivery and redeliveries) must stay below FINISH_WINDOW_SECONDS ({})",
                    world.event_delivery.num_seconds(),
                    self.finish_window.num_seconds()
                ),
            ));
        }
        Ok(())
    }

    /// The shard length, the request limits and the schema cache's life,
    /// within what is supported.
    fn check_limits(&self) -> Result<(), ConfigError> {
        if !(1..=4).contains(&self.shard_prefix_len) {
            return Err(err("TASK_SHARD_PREFIX_LEN", "must be 1 to 4"));
        }
        if self.max_input_bytes == 0 || self.max_input_bytes > 64 << 20 {
            return Err(err("MAX_INPUT_BYTES", "must be 1 to 67108864"));
        }
        if self.schema_cache_ttl < Duration::zero() || self.schema_cache_ttl > MAX_SCHEMA_CACHE {
            return Err(err(
                "SCHEMA_CACHE_SECONDS",
                format!("must be 0 to {}", MAX_SCHEMA_CACHE.num_seconds()),
            ));
        }
        if !(1..=MAX_BATCH_TASKS_LIMIT).contains(&self.max_batch_tasks) {
            return Err(err(
                "MAX_BATCH_TASKS",
                format!("must be 1 to {MAX_BATCH_TASKS_LIMIT}"),
            ));
        }
        if !(1..=MAX_PASS_CONCURRENCY).contains(&self.pass_concurrency) {
            return Err(err(
                "PASS_CONCURRENCY",
                format!("must be 1 to {MAX_PASS_CONCURRENCY}"),
            ));
        }
        Ok(())
    }
}

/// Why `VALIDATE_INPUT_SCHEMAS=on` stops a build without the `schemas`
/// feature at start, and how to build one with it (the README, "Input
/// schemas").
pub const NO_SCHEMAS_BUILD: &str = "is on, but this build has no JSON Schema validator: build with the `schemas` feature \
     (`cargo build --release --features schemas`; for `sam build`, `CARGO_LAMBDA_CONTEXT=schemas sam build --beta-features`), \
     or turn VALIDATE_INPUT_SCHEMAS off";

/// What a keyed submit does when its key's task ended failed or cancelled
/// for good (buquet's terminal `failed` and `cancelled`): the body's
/// `if_task_failed`, else `IF_TASK_FAILED` (docs/protocol.md, "Reusing a
/// failed task's key").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IfTaskFailed {
    /// Answer that task, as for any other status (the default).
    #[default]
    Replay,
    /// Claim the key over its record (`If-Match`) and create a new task,
    /// whose answer names the failed one.
    NewTask,
}

impl IfTaskFailed {
    /// The name the body, the environment and the CLI use.
    pub fn as_str(&self) -> &'static str {
        match self {
            IfTaskFailed::Replay => "replay",
            IfTaskFailed::NewTask => "new_task",
        }
    }

    /// The policy `name` names (exactly `replay` or `new_task`); its
    /// refusal is the reader's to word (`protocol::names`' `parse` for a
    /// body, the environment's for `IF_TASK_FAILED`).
    pub fn from_name(name: &str) -> Option<Self> {
        [IfTaskFailed::Replay, IfTaskFailed::NewTask]
            .into_iter()
            .find(|p| p.as_str() == name)
    }

    /// A task status after which the key may be claimed again: buquet's
    /// terminal failures. `expired` (never claimed before its own expiry)
    /// and `archived` are not failures of the task's work and are replayed.
    pub fn frees(status: &str) -> bool {
        matches!(status, "failed" | "cancelled")
    }
}
