//! Configuration: the protocol's knobs ([`Settings`]) and the environment
//! that sets them ([`Config::from_env`], the README, "Configuration").

use std::time::Duration as StdDuration;

use chrono::Duration;

pub use crate::due_sender::DueOrder;

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
}

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

fn err(var: &'static str, reason: impl Into<String>) -> ConfigError {
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
    fn check_build(&self, schemas_built: bool) -> Result<(), ConfigError> {
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
        Ok(())
    }
}

/// Who sends a record's due message, the message that hands the record to
/// the sweeper `STALE_CREATING_AFTER_SECONDS` after its write
/// (`RECORD_EVENTS`; docs/protocol.md, "The sweeper").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RecordEvents {
    /// The bucket: an S3 event notification of every record write to the
    /// due queue (AWS S3 only).
    #[default]
    Bucket,
    /// The submitter: every submit that writes a record sends its message to
    /// `DUE_QUEUE_URL` itself, beside the record's PUT (buckets that send no
    /// events: other providers, S3 Express, a bucket whose notification
    /// belongs to someone else).
    Submitter,
}

impl RecordEvents {
    /// The value of `RECORD_EVENTS` that names it.
    pub fn as_str(&self) -> &'static str {
        match self {
            RecordEvents::Bucket => "bucket",
            RecordEvents::Submitter => "submitter",
        }
    }
}

/// Why `VALIDATE_INPUT_SCHEMAS=on` stops a build without the `schemas`
/// feature at start, and how to build one with it (the README, "Input
/// schemas").
pub const NO_SCHEMAS_BUILD: &str = "is on, but this build has no JSON Schema validator: build with the `schemas` feature \
     (`cargo build --release --features schemas`; for `sam build`, `CARGO_LAMBDA_CONTEXT=schemas sam build --beta-features`), \
     or turn VALIDATE_INPUT_SCHEMAS off";

/// Everything the functions and the CLI read from the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The queue's bucket (`BUCKET_NAME`).
    pub bucket: String,
    /// Path-style S3 URLs (`S3_FORCE_PATH_STYLE`), for a local S3.
    pub force_path_style: bool,
    /// Fold the caller's principal into keys (`TENANT_ISOLATION`).
    pub tenant_isolation: bool,
    /// Route `DELETE /idempotency-keys/{key}` (`ALLOW_KEY_RESET`; off by
    /// default: forgetting a key is an operator's decision).
    pub allow_key_reset: bool,
    /// The protocol's settings.
    pub settings: Settings,
    /// `RECORD_EVENTS`.
    pub record_events: RecordEvents,
    /// `DUE_QUEUE_URL`: the due queue; required with
    /// [`RecordEvents::Submitter`].
    pub due_queue_url: Option<String>,
    /// `DUE_MESSAGE`: under [`RecordEvents::Submitter`], whether the queue
    /// accepts each record's due message before the record's PUT is sent
    /// (the default) or beside it.
    pub due_message: DueOrder,
    /// `S3_CREDENTIALS_SECRET`: a Secrets Manager secret (name or ARN) with
    /// the bucket's key pair, for a bucket at another provider; only the S3
    /// client signs with it. Unset: the S3 client takes the credentials the
    /// SDK finds (the role's).
    pub s3_credentials_secret: Option<String>,
}

fn parse_num<T: std::str::FromStr>(
    var: &'static str,
    get: &impl Fn(&str) -> Option<String>,
    default: T,
) -> Result<T, ConfigError> {
    match get(var) {
        None => Ok(default),
        Some(v) => v
            .trim()
            .parse()
            .map_err(|_| err(var, format!("{v:?} is not a valid number"))),
    }
}

fn parse_bool(
    var: &'static str,
    get: &impl Fn(&str) -> Option<String>,
    default: bool,
) -> Result<bool, ConfigError> {
    match get(var)
        .as_deref()
        .map(str::trim)
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        None | Some("") => Ok(default),
        Some("true" | "on" | "1" | "yes") => Ok(true),
        Some("false" | "off" | "0" | "no") => Ok(false),
        Some(v) => Err(err(var, format!("{v:?} is not one of true/false/on/off"))),
    }
}

fn parse_list_order(get: &impl Fn(&str) -> Option<String>) -> Result<ListOrder, ConfigError> {
    match get("LIST_ORDER")
        .as_deref()
        .map(str::trim)
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        None | Some("") | Some("bytes") => Ok(ListOrder::Bytes),
        Some("any") => Ok(ListOrder::Any),
        Some(v) => Err(err("LIST_ORDER", format!("{v:?} is not one of bytes/any"))),
    }
}

fn parse_if_task_failed(
    get: &impl Fn(&str) -> Option<String>,
) -> Result<IfTaskFailed, ConfigError> {
    match get("IF_TASK_FAILED").as_deref().map(str::trim) {
        None | Some("") => Ok(IfTaskFailed::Replay),
        Some(v) => IfTaskFailed::from_name(&v.to_ascii_lowercase()).ok_or_else(|| {
            err(
                "IF_TASK_FAILED",
                format!("{v:?} is not one of replay/new_task"),
            )
        }),
    }
}

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

/// The variable that sets a test world's [`Conditions`].
pub const TESTING_CONDITIONS_VAR: &str = "TESTING_OPERATING_CONDITIONS";

/// The conditions the functions run under: AWS's, whatever the environment
/// says, in a build without the `testing` feature (which refuses the
/// variable rather than ignore it).
#[cfg(not(feature = "testing"))]
fn operating_conditions(get: &impl Fn(&str) -> Option<String>) -> Result<Conditions, ConfigError> {
    match get(TESTING_CONDITIONS_VAR) {
        None => Ok(Conditions::AWS),
        Some(_) => Err(err(
            TESTING_CONDITIONS_VAR,
            "is read only by a build with the testing feature; deployments run under AWS's conditions",
        )),
    }
}

/// The conditions the functions run under: AWS's, unless
/// `TESTING_OPERATING_CONDITIONS` gives a test world's, as
/// `late_write=S,event_delivery=S,operation_timeout=S` (seconds, each
/// optional, AWS's where left out).
#[cfg(feature = "testing")]
fn operating_conditions(get: &impl Fn(&str) -> Option<String>) -> Result<Conditions, ConfigError> {
    let Some(spec) = get(TESTING_CONDITIONS_VAR) else {
        return Ok(Conditions::AWS);
    };
    let mut c = Conditions::AWS;
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let bad = || {
            err(
                TESTING_CONDITIONS_VAR,
                format!("{part:?} is not NAME=SECONDS"),
            )
        };
        let (name, secs) = part.split_once('=').ok_or_else(bad)?;
        let secs: i64 = secs.trim().parse().map_err(|_| bad())?;
        if !(1..=3600).contains(&secs) {
            return Err(err(
                TESTING_CONDITIONS_VAR,
                format!("{name}: must be 1 to 3600 seconds"),
            ));
        }
        let field = match name.trim() {
            "late_write" => &mut c.late_write,
            "event_delivery" => &mut c.event_delivery,
            "operation_timeout" => &mut c.operation_timeout,
            other => {
                return Err(err(
                    TESTING_CONDITIONS_VAR,
                    format!(
                        "unknown condition {other:?} (late_write, event_delivery, operation_timeout)"
                    ),
                ));
            }
        };
        *field = Duration::seconds(secs);
    }
    Ok(c)
}

impl Config {
    /// Reads the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Reads variables through `get` (tests pass a map).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let bucket = get("BUCKET_NAME").unwrap_or_default().trim().to_owned();
        if bucket.is_empty() {
            return Err(err("BUCKET_NAME", "is required"));
        }
        let world = operating_conditions(&get)?;
        let d = Settings {
            late_write_margin: world.late_write,
            operation_timeout: world.operation_timeout,
            ..Settings::default()
        };
        let days = |var, default: i64| -> Result<Duration, ConfigError> {
            let n: i64 = parse_num(var, &get, default)?;
            if !(1..=36_500).contains(&n) {
                return Err(err(var, "must be 1 to 36500 days"));
            }
            Ok(Duration::days(n))
        };
        let secs = |var, default: i64| -> Result<Duration, ConfigError> {
            let n: i64 = parse_num(var, &get, default)?;
            if !(1..=86_400).contains(&n) {
                return Err(err(var, "must be 1 to 86400 seconds"));
            }
            Ok(Duration::seconds(n))
        };
        let settings = Settings {
            default_ttl: days("IDEMPOTENCY_TTL_DAYS", d.default_ttl.num_days())?,
            max_ttl: days("IDEMPOTENCY_MAX_TTL_DAYS", d.max_ttl.num_days())?,
            finish_window: secs("FINISH_WINDOW_SECONDS", d.finish_window.num_seconds())?,
            stale_creating_after: secs(
                "STALE_CREATING_AFTER_SECONDS",
                d.stale_creating_after.num_seconds(),
            )?,
            shard_prefix_len: parse_num("TASK_SHARD_PREFIX_LEN", &get, d.shard_prefix_len)?,
            max_input_bytes: parse_num("MAX_INPUT_BYTES", &get, d.max_input_bytes)?,
            max_batch_tasks: parse_num("MAX_BATCH_TASKS", &get, d.max_batch_tasks)?,
            require_key: parse_bool("REQUIRE_IDEMPOTENCY_KEY", &get, false)?,
            validate_input_schemas: parse_bool("VALIDATE_INPUT_SCHEMAS", &get, false)?,
            schema_cache_ttl: Duration::seconds(parse_num(
                "SCHEMA_CACHE_SECONDS",
                &get,
                d.schema_cache_ttl.num_seconds(),
            )?),
            conditional_delete: parse_bool("CONDITIONAL_DELETE", &get, true)?,
            list_order: parse_list_order(&get)?,
            if_task_failed: parse_if_task_failed(&get)?,
            ..d
        };
        settings.check_under(&world)?;
        let nonempty = |var: &str| {
            get(var)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        let record_events = match get("RECORD_EVENTS")
            .map(|v| v.trim().to_ascii_lowercase())
            .as_deref()
        {
            None | Some("" | "bucket") => RecordEvents::Bucket,
            Some("submitter") => RecordEvents::Submitter,
            Some(v) => {
                return Err(err(
                    "RECORD_EVENTS",
                    format!("{v:?} is not one of bucket/submitter"),
                ));
            }
        };
        let due_queue_url = nonempty("DUE_QUEUE_URL");
        let due_message = match get("DUE_MESSAGE") {
            None => DueOrder::default(),
            Some(v) => DueOrder::parse(&v).ok_or_else(|| {
                err(
                    "DUE_MESSAGE",
                    format!("{:?} is not one of before_claim/with_claim", v.trim()),
                )
            })?,
        };
        if record_events == RecordEvents::Submitter && due_queue_url.is_none() {
            return Err(err(
                "DUE_QUEUE_URL",
                "is required with RECORD_EVENTS=submitter (the due queue the submitter sends each record's due message to)",
            ));
        }
        Ok(Config {
            bucket,
            force_path_style: parse_bool("S3_FORCE_PATH_STYLE", &get, false)?,
            tenant_isolation: parse_bool("TENANT_ISOLATION", &get, false)?,
            allow_key_reset: parse_bool("ALLOW_KEY_RESET", &get, false)?,
            settings,
            record_events,
            due_queue_url,
            due_message,
            s3_credentials_secret: nonempty("S3_CREDENTIALS_SECRET"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn cfg(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let m: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_lookup(|k| m.get(k).cloned())
    }

    #[test]
    fn settings_with_a_late_write_margin_under_15_minutes_are_refused() {
        let short = Settings {
            late_write_margin: Duration::minutes(15) - Duration::seconds(1),
            ..Settings::default()
        };
        assert_eq!(short.check().unwrap_err().var, "late_write_margin");
        assert!(Settings::default().check().is_ok());
    }

    #[test]
    fn the_defaults_are_the_contracts() {
        let c = cfg(&[("BUCKET_NAME", "b")]).unwrap();
        assert_eq!(c.settings, Settings::default());
        assert!(!c.force_path_style);
        assert!(!c.tenant_isolation);
    }

    #[test]
    fn a_bad_variable_is_named_in_the_error() {
        assert_eq!(cfg(&[]).unwrap_err().var, "BUCKET_NAME");
        let cases = [
            ("IDEMPOTENCY_TTL_DAYS", "x"),
            ("IDEMPOTENCY_TTL_DAYS", "0"),
            ("IDEMPOTENCY_MAX_TTL_DAYS", "7"),
            ("FINISH_WINDOW_SECONDS", "2700"),
            ("STALE_CREATING_AFTER_SECONDS", "901"),
            ("STALE_CREATING_AFTER_SECONDS", "2000"),
            ("TASK_SHARD_PREFIX_LEN", "5"),
            ("MAX_INPUT_BYTES", "0"),
            ("MAX_BATCH_TASKS", "0"),
            ("MAX_BATCH_TASKS", "101"),
            ("MAX_BATCH_TASKS", "many"),
            ("REQUIRE_IDEMPOTENCY_KEY", "maybe"),
            ("TENANT_ISOLATION", "sometimes"),
            ("VALIDATE_INPUT_SCHEMAS", "strict"),
            ("SCHEMA_CACHE_SECONDS", "-1"),
            ("SCHEMA_CACHE_SECONDS", "3601"),
            ("SCHEMA_CACHE_SECONDS", "a minute"),
            ("S3_FORCE_PATH_STYLE", "2"),
            ("CONDITIONAL_DELETE", "sometimes"),
            ("LIST_ORDER", "random"),
        ];
        for (var, val) in cases {
            let e = cfg(&[("BUCKET_NAME", "b"), (var, val)]).unwrap_err();
            assert_eq!(e.var, var, "{var}={val}: {e}");
        }
    }

    #[test]
    fn the_operating_conditions_of_the_due_queue_hold_at_their_edges() {
        let ok = |stale: &str, window: &str| {
            cfg(&[
                ("BUCKET_NAME", "b"),
                ("STALE_CREATING_AFTER_SECONDS", stale),
                ("FINISH_WINDOW_SECONDS", window),
            ])
            .map(|_| ())
            .map_err(|e| e.var)
        };
        // The longest SQS delay, with 15 minutes of delivery below the window.
        assert_eq!(ok("900", "1801"), Ok(()));
        assert_eq!(ok("900", "1800"), Err("STALE_CREATING_AFTER_SECONDS"));
        assert_eq!(ok("901", "2699"), Err("STALE_CREATING_AFTER_SECONDS"));
        assert_eq!(ok("600", "2699"), Ok(()));
        assert_eq!(ok("600", "2700"), Err("FINISH_WINDOW_SECONDS"));
    }

    #[test]
    fn aws_conditions_are_the_defaults_and_hold_every_window_to_them() {
        let c = cfg(&[("BUCKET_NAME", "b")]).unwrap().settings;
        assert_eq!(c.late_write_margin, Conditions::AWS.late_write);
        assert_eq!(c.operation_timeout, Conditions::AWS.operation_timeout);
        // What only a test world may ask for is refused under AWS's.
        let short = cfg(&[
            ("BUCKET_NAME", "b"),
            ("STALE_CREATING_AFTER_SECONDS", "3"),
            ("FINISH_WINDOW_SECONDS", "20"),
        ]);
        assert_eq!(short.unwrap_err().var, "FINISH_WINDOW_SECONDS");
    }

    #[cfg(not(feature = "testing"))]
    #[test]
    fn a_build_without_the_testing_feature_refuses_a_test_worlds_conditions() {
        let e = cfg(&[
            ("BUCKET_NAME", "b"),
            (
                TESTING_CONDITIONS_VAR,
                "late_write=4,event_delivery=8,operation_timeout=8",
            ),
        ])
        .unwrap_err();
        assert_eq!(e.var, TESTING_CONDITIONS_VAR);
    }

    #[cfg(feature = "testing")]
    #[test]
    fn a_test_worlds_conditions_allow_short_windows_and_are_still_checked() {
        let world = "late_write=4, event_delivery=8, operation_timeout=8";
        let c = cfg(&[
            ("BUCKET_NAME", "b"),
            (TESTING_CONDITIONS_VAR, world),
            ("STALE_CREATING_AFTER_SECONDS", "3"),
            ("FINISH_WINDOW_SECONDS", "20"),
        ])
        .unwrap()
        .settings;
        assert_eq!(
            (c.late_write_margin, c.operation_timeout, c.finish_window),
            (
                Duration::seconds(4),
                Duration::seconds(8),
                Duration::seconds(20)
            )
        );
        // The same checks, against the world's promises.
        let e = |vars: &[(&str, &str)]| {
            let mut all = vec![("BUCKET_NAME", "b"), (TESTING_CONDITIONS_VAR, world)];
            all.extend_from_slice(vars);
            cfg(&all).map(|_| ()).map_err(|e| e.var)
        };
        assert_eq!(
            e(&[
                ("STALE_CREATING_AFTER_SECONDS", "12"),
                ("FINISH_WINDOW_SECONDS", "20")
            ]),
            Err("STALE_CREATING_AFTER_SECONDS")
        );
        assert_eq!(
            e(&[
                ("STALE_CREATING_AFTER_SECONDS", "3"),
                ("FINISH_WINDOW_SECONDS", "15")
            ]),
            Err("FINISH_WINDOW_SECONDS")
        );
        for bad in ["late_write", "late_write=0", "late_write=x", "latency=3"] {
            let got = cfg(&[("BUCKET_NAME", "b"), (TESTING_CONDITIONS_VAR, bad)]);
            assert_eq!(got.unwrap_err().var, TESTING_CONDITIONS_VAR, "{bad}");
        }
        // Absent, it is AWS's.
        assert_eq!(
            cfg(&[("BUCKET_NAME", "b")]).unwrap().settings,
            Settings::default()
        );
    }

    #[test]
    fn record_events_come_from_the_bucket_by_default_and_the_submitter_needs_the_due_queue() {
        let c = cfg(&[("BUCKET_NAME", "b")]).unwrap();
        assert_eq!(
            (c.record_events, c.due_queue_url, c.s3_credentials_secret),
            (RecordEvents::Bucket, None, None)
        );
        let url = "https://sqs.us-east-1.amazonaws.com/1/due";
        let c = cfg(&[
            ("BUCKET_NAME", "b"),
            ("RECORD_EVENTS", " Submitter "),
            ("DUE_QUEUE_URL", url),
            ("S3_CREDENTIALS_SECRET", "store-keys"),
        ])
        .unwrap();
        assert_eq!(c.record_events, RecordEvents::Submitter);
        assert_eq!(c.due_queue_url.as_deref(), Some(url));
        assert_eq!(c.s3_credentials_secret.as_deref(), Some("store-keys"));
        for (vars, var) in [
            (&[("RECORD_EVENTS", "submitter")][..], "DUE_QUEUE_URL"),
            (
                &[("RECORD_EVENTS", "submitter"), ("DUE_QUEUE_URL", " ")][..],
                "DUE_QUEUE_URL",
            ),
            (&[("RECORD_EVENTS", "s3")][..], "RECORD_EVENTS"),
        ] {
            let mut all = vec![("BUCKET_NAME", "b")];
            all.extend_from_slice(vars);
            assert_eq!(cfg(&all).unwrap_err().var, var, "{vars:?}");
        }
    }

    #[test]
    fn switches_accept_on_and_true() {
        let c = cfg(&[
            ("BUCKET_NAME", "b"),
            ("TENANT_ISOLATION", "on"),
            ("S3_FORCE_PATH_STYLE", "true"),
            ("REQUIRE_IDEMPOTENCY_KEY", "1"),
        ])
        .unwrap();
        assert!(c.tenant_isolation && c.force_path_style && c.settings.require_key);
    }

    #[test]
    fn schema_validation_is_off_by_default_and_its_cache_lasts_a_minute() {
        let d = cfg(&[("BUCKET_NAME", "b")]).unwrap().settings;
        assert!(!d.validate_input_schemas);
        assert_eq!(d.schema_cache_ttl, Duration::seconds(60));
        let on = cfg(&[
            ("BUCKET_NAME", "b"),
            ("VALIDATE_INPUT_SCHEMAS", "on"),
            ("SCHEMA_CACHE_SECONDS", "0"),
        ]);
        if cfg!(feature = "schemas") {
            let on = on.unwrap().settings;
            assert!(on.validate_input_schemas);
            assert_eq!(on.schema_cache_ttl, Duration::zero());
        } else {
            assert_eq!(on.unwrap_err().var, "VALIDATE_INPUT_SCHEMAS");
        }
    }

    #[test]
    fn input_schemas_in_a_build_without_a_validator_stop_at_start_saying_how_to_build_one() {
        let on = Settings {
            validate_input_schemas: true,
            ..Settings::default()
        };
        let e = on.check_build(false).unwrap_err();
        assert_eq!(e.var, "VALIDATE_INPUT_SCHEMAS");
        assert!(e.to_string().contains("--features schemas"), "{e}");
        assert!(
            e.to_string().contains("CARGO_LAMBDA_CONTEXT=schemas"),
            "{e}"
        );
        assert!(on.check_build(true).is_ok());
        assert!(Settings::default().check_build(false).is_ok());
    }

    #[test]
    fn conditional_deletes_and_byte_order_are_the_defaults_and_each_can_be_turned_off() {
        let d = cfg(&[("BUCKET_NAME", "b")]).unwrap().settings;
        assert!(d.conditional_delete);
        assert_eq!(d.list_order, ListOrder::Bytes);
        let other = cfg(&[
            ("BUCKET_NAME", "b"),
            ("CONDITIONAL_DELETE", "off"),
            ("LIST_ORDER", "Any"),
        ])
        .unwrap()
        .settings;
        assert!(!other.conditional_delete);
        assert_eq!(other.list_order, ListOrder::Any);
        let bytes = cfg(&[("BUCKET_NAME", "b"), ("LIST_ORDER", "bytes")]).unwrap();
        assert_eq!(bytes.settings.list_order, ListOrder::Bytes);
    }

    #[test]
    fn a_failed_tasks_key_is_replayed_by_default_and_freed_with_if_task_failed_new_task() {
        let d = cfg(&[("BUCKET_NAME", "b")]).unwrap().settings;
        assert_eq!(d.if_task_failed, IfTaskFailed::Replay);
        let new = cfg(&[("BUCKET_NAME", "b"), ("IF_TASK_FAILED", " New_Task ")]).unwrap();
        assert_eq!(new.settings.if_task_failed, IfTaskFailed::NewTask);
        let e = cfg(&[("BUCKET_NAME", "b"), ("IF_TASK_FAILED", "retry")]).unwrap_err();
        assert!(e.to_string().contains("IF_TASK_FAILED"), "{e}");
    }
}
