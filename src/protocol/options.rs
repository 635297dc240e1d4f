//! Task options: the fields of buquet 0.1's `SubmitOptions` (timeouts,
//! retries, schedules, the task's own expiry, payload refs), named as buquet
//! names them, parsed field by field, bounded, hashed for the record, and
//! applied to the task object exactly as buquet's submit applies them.
//!
//! Bounds (README and docs/openapi.yaml list them):
//!
//! | option | range |
//! | --- | --- |
//! | `timeout_seconds` | 1 to 86 400 |
//! | `max_retries` | 0 to 100 |
//! | `retry_policy.initial_interval_ms` | 0 to 86 400 000 |
//! | `retry_policy.max_interval_ms` | `initial_interval_ms` to 86 400 000 |
//! | `retry_policy.multiplier` | 1 to 100 |
//! | `retry_policy.jitter_percent` | 0 to 1 |
//! | `schedule_at` / `delay_seconds` | from 1970 / 0, to the horizon |
//! | `max_reschedules` | 0 to 10 000 |
//! | `ttl_seconds` / `expires_at` | 1 s to 10 years; after `available_at` |
//! | `payload_ref_threshold_bytes` | 0 to 16 777 216, with `use_payload_refs` |
//!
//! The horizon is `IDEMPOTENCY_MAX_TTL_DAYS` from now; with a key, a task
//! must also become available within its record's life (a task that starts
//! after its key is forgotten could be submitted twice).

use chrono::{DateTime, Duration, Utc};
use serde::Serialize;
use serde_json::{Map, Value};

use super::hash;
use super::names::ValidationError;

pub const MAX_TIMEOUT_SECONDS: u64 = 86_400;
pub const MAX_RETRIES: u32 = 100;
pub const MAX_INTERVAL_MS: u32 = 86_400_000;
pub const MAX_MULTIPLIER: f64 = 100.0;
pub const MAX_RESCHEDULES: u32 = 10_000;
/// The most `delay_seconds` and `ttl_seconds` may say: ten years (a task
/// must also become available within the horizon, and its expiry may be at
/// most ten years ahead).
pub const MAX_SECONDS_AHEAD: u64 = 315_360_000;
pub const MAX_PAYLOAD_REF_THRESHOLD_BYTES: u64 = 16 << 20;
/// buquet's own default threshold (256 KiB): an input whose compact JSON is
/// longer is offloaded when `use_payload_refs` is on.
pub const DEFAULT_PAYLOAD_REF_THRESHOLD_BYTES: u64 = 256 * 1024;

/// The names of the option fields of a submit body.
pub const FIELDS: [&str; 10] = [
    "timeout_seconds",
    "max_retries",
    "retry_policy",
    "schedule_at",
    "delay_seconds",
    "max_reschedules",
    "ttl_seconds",
    "expires_at",
    "use_payload_refs",
    "payload_ref_threshold_bytes",
];

/// buquet's `RetryPolicy`; fields left out of a request take buquet's
/// defaults, as its Python `RetryPolicy(...)` does.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TaskRetryPolicy {
    pub initial_interval_ms: u32,
    pub max_interval_ms: u32,
    pub multiplier: f64,
    pub jitter_percent: f64,
}

impl Default for TaskRetryPolicy {
    fn default() -> Self {
        TaskRetryPolicy {
            initial_interval_ms: 1000,
            max_interval_ms: 60000,
            multiplier: 2.0,
            jitter_percent: 0.25,
        }
    }
}

impl TaskRetryPolicy {
    /// Reads a body's `retry_policy`: an object of its four fields, each
    /// left out taking buquet's default, checked as a whole.
    pub(crate) fn from_body(v: &Value) -> Result<Self, ValidationError> {
        let Value::Object(p) = v else {
            return Err(ValidationError::field("retry_policy", "must be an object"));
        };
        const POLICY: [&str; 4] = [
            "initial_interval_ms",
            "max_interval_ms",
            "multiplier",
            "jitter_percent",
        ];
        if let Some(k) = p.keys().find(|k| !POLICY.contains(&k.as_str())) {
            return Err(ValidationError::field(
                "retry_policy",
                format!(
                    "unknown field {k:?} (expected one of {})",
                    POLICY.join(", ")
                ),
            ));
        }
        let mut r = TaskRetryPolicy::default();
        let get = |f: &str| p.get(f).filter(|v| !v.is_null());
        let interval = |v, field| whole(v, field, 0, MAX_INTERVAL_MS.into()).map(u32_of);
        if let Some(v) = get("initial_interval_ms") {
            r.initial_interval_ms = interval(v, "retry_policy.initial_interval_ms")?;
        }
        if let Some(v) = get("max_interval_ms") {
            r.max_interval_ms = interval(v, "retry_policy.max_interval_ms")?;
        }
        if let Some(v) = get("multiplier") {
            r.multiplier = number(v, "retry_policy.multiplier")?;
        }
        if let Some(v) = get("jitter_percent") {
            r.jitter_percent = number(v, "retry_policy.jitter_percent")?;
        }
        r.check()?;
        Ok(r)
    }

    /// Checks the bounds; names the first field out of them.
    pub fn check(&self) -> Result<(), ValidationError> {
        if self.initial_interval_ms > MAX_INTERVAL_MS {
            return Err(ValidationError::field(
                "retry_policy.initial_interval_ms",
                format!("must be 0 to {MAX_INTERVAL_MS}"),
            ));
        }
        if self.max_interval_ms < self.initial_interval_ms || self.max_interval_ms > MAX_INTERVAL_MS
        {
            return Err(ValidationError::field(
                "retry_policy.max_interval_ms",
                format!("must be initial_interval_ms to {MAX_INTERVAL_MS}"),
            ));
        }
        if !(1.0..=MAX_MULTIPLIER).contains(&self.multiplier) {
            return Err(ValidationError::field(
                "retry_policy.multiplier",
                format!("must be 1 to {MAX_MULTIPLIER}"),
            ));
        }
        if !(0.0..=1.0).contains(&self.jitter_percent) {
            return Err(ValidationError::field(
                "retry_policy.jitter_percent",
                "must be 0 to 1",
            ));
        }
        Ok(())
    }
}

/// The options of one submit, as sent: `None` for each field left out.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TaskOptions {
    pub timeout_seconds: Option<u64>,
    pub max_retries: Option<u32>,
    pub retry_policy: Option<TaskRetryPolicy>,
    pub schedule_at: Option<DateTime<Utc>>,
    pub delay_seconds: Option<u64>,
    pub max_reschedules: Option<u32>,
    pub ttl_seconds: Option<u64>,
    pub expires_at: Option<DateTime<Utc>>,
    pub use_payload_refs: Option<bool>,
    pub payload_ref_threshold_bytes: Option<u64>,
}

/// What the options make of a task object (buquet's submit, field by field).
#[derive(Debug, Clone, PartialEq)]
pub struct TaskFields {
    pub timeout_seconds: u64,
    pub max_retries: u32,
    pub retry_policy: TaskRetryPolicy,
    pub available_at: DateTime<Utc>,
    pub max_reschedules: Option<u32>,
    pub expires_at: Option<DateTime<Utc>>,
    /// `Some(threshold)`: inputs over it are offloaded.
    pub offload_over: Option<u64>,
}

/// A whole number in `min..=max`, written either way (`60` or `60.0`).
fn whole(v: &Value, field: &'static str, min: u64, max: u64) -> Result<u64, ValidationError> {
    let range = || ValidationError::field(field, format!("must be a whole number, {min} to {max}"));
    let Value::Number(n) = v else {
        return Err(range());
    };
    let n = n
        .as_u64()
        .or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f < 9_007_199_254_740_992.0)
                .map(|f| f as u64)
        })
        .ok_or_else(range)?;
    if n < min || n > max {
        return Err(range());
    }
    Ok(n)
}

fn number(v: &Value, field: &'static str) -> Result<f64, ValidationError> {
    v.as_f64()
        .filter(|f| f.is_finite())
        .ok_or_else(|| ValidationError::field(field, "must be a number"))
}

fn time(v: &Value, field: &'static str) -> Result<DateTime<Utc>, ValidationError> {
    let s = v
        .as_str()
        .ok_or_else(|| ValidationError::field(field, "must be an RFC 3339 time (a string)"))?;
    let t = DateTime::parse_from_rfc3339(s)
        .map_err(|e| ValidationError::field(field, format!("is not an RFC 3339 time: {e}")))?
        .with_timezone(&Utc);
    if t.timestamp() < 0 {
        return Err(ValidationError::field(field, "must be after 1970-01-01"));
    }
    Ok(t)
}

fn u32_of(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

impl TaskOptions {
    /// True when no option was sent.
    pub fn is_empty(&self) -> bool {
        *self == TaskOptions::default()
    }

    /// Reads the option fields of a submit body (fields sent as `null` count
    /// as left out), checking each one's own bounds; the checks that need
    /// the submit's time are [`TaskOptions::resolve`]'s.
    pub fn from_body(obj: &Map<String, Value>) -> Result<Self, ValidationError> {
        let get = |f: &str| obj.get(f).filter(|v| !v.is_null());
        let mut o = TaskOptions::default();
        if let Some(v) = get("timeout_seconds") {
            o.timeout_seconds = Some(whole(v, "timeout_seconds", 1, MAX_TIMEOUT_SECONDS)?);
        }
        if let Some(v) = get("max_retries") {
            o.max_retries = Some(u32_of(whole(v, "max_retries", 0, MAX_RETRIES.into())?));
        }
        if let Some(v) = get("retry_policy") {
            o.retry_policy = Some(TaskRetryPolicy::from_body(v)?);
        }
        if let Some(v) = get("schedule_at") {
            o.schedule_at = Some(time(v, "schedule_at")?);
        }
        if let Some(v) = get("delay_seconds") {
            o.delay_seconds = Some(whole(v, "delay_seconds", 0, MAX_SECONDS_AHEAD)?);
        }
        if let Some(v) = get("max_reschedules") {
            o.max_reschedules = Some(u32_of(whole(
                v,
                "max_reschedules",
                0,
                MAX_RESCHEDULES.into(),
            )?));
        }
        if let Some(v) = get("ttl_seconds") {
            o.ttl_seconds = Some(whole(v, "ttl_seconds", 1, MAX_SECONDS_AHEAD)?);
        }
        if let Some(v) = get("expires_at") {
            o.expires_at = Some(time(v, "expires_at")?);
        }
        if let Some(v) = get("use_payload_refs") {
            o.use_payload_refs =
                Some(v.as_bool().ok_or_else(|| {
                    ValidationError::field("use_payload_refs", "must be a boolean")
                })?);
        }
        if let Some(v) = get("payload_ref_threshold_bytes") {
            o.payload_ref_threshold_bytes = Some(whole(
                v,
                "payload_ref_threshold_bytes",
                0,
                MAX_PAYLOAD_REF_THRESHOLD_BYTES,
            )?);
        }
        o.check()?;
        Ok(o)
    }

    /// The checks that need no clock: each field's bounds (for options built
    /// in Rust) and the contradictions between fields.
    pub fn check(&self) -> Result<(), ValidationError> {
        if let Some(t) = self.timeout_seconds
            && !(1..=MAX_TIMEOUT_SECONDS).contains(&t)
        {
            return Err(ValidationError::field(
                "timeout_seconds",
                format!("must be 1 to {MAX_TIMEOUT_SECONDS}"),
            ));
        }
        if self.max_retries.is_some_and(|r| r > MAX_RETRIES) {
            return Err(ValidationError::field(
                "max_retries",
                format!("must be 0 to {MAX_RETRIES}"),
            ));
        }
        if let Some(p) = &self.retry_policy {
            p.check()?;
        }
        if self.max_reschedules.is_some_and(|r| r > MAX_RESCHEDULES) {
            return Err(ValidationError::field(
                "max_reschedules",
                format!("must be 0 to {MAX_RESCHEDULES}"),
            ));
        }
        if self.ttl_seconds == Some(0) {
            return Err(ValidationError::field("ttl_seconds", "must be at least 1"));
        }
        if self
            .payload_ref_threshold_bytes
            .is_some_and(|t| t > MAX_PAYLOAD_REF_THRESHOLD_BYTES)
        {
            return Err(ValidationError::field(
                "payload_ref_threshold_bytes",
                format!("must be 0 to {MAX_PAYLOAD_REF_THRESHOLD_BYTES}"),
            ));
        }
        if self.schedule_at.is_some() && self.delay_seconds.is_some() {
            return Err(ValidationError::field(
                "delay_seconds",
                "contradicts schedule_at: send one of them",
            ));
        }
        // buquet's submit takes `ttl_seconds` over `expires_at` silently; a
        // request that says both says two things, and is refused.
        if self.ttl_seconds.is_some() && self.expires_at.is_some() {
            return Err(ValidationError::field(
                "expires_at",
                "contradicts ttl_seconds: send one of them",
            ));
        }
        if self.payload_ref_threshold_bytes.is_some() && self.use_payload_refs != Some(true) {
            return Err(ValidationError::field(
                "payload_ref_threshold_bytes",
                "applies only with use_payload_refs: true",
            ));
        }
        Ok(())
    }

    /// `options_hash`: the options as sent (`delay_seconds` as a delay, not
    /// the time it gave; times in UTC), serialized like the input, so that a
    /// retry of the same request hashes alike. `None` when none were sent.
    pub fn hash(&self) -> Option<String> {
        if self.is_empty() {
            return None;
        }
        let mut m = Map::new();
        let mut put = |k: &str, v: Value| {
            m.insert(k.to_owned(), v);
        };
        let t = |t: &DateTime<Utc>| Value::String(super::rfc3339::format_precise(t));
        if let Some(v) = self.timeout_seconds {
            put("timeout_seconds", v.into());
        }
        if let Some(v) = self.max_retries {
            put("max_retries", v.into());
        }
        if let Some(p) = &self.retry_policy {
            put("retry_policy", serde_json::to_value(p).unwrap_or_default());
        }
        if let Some(v) = &self.schedule_at {
            put("schedule_at", t(v));
        }
        if let Some(v) = self.delay_seconds {
            put("delay_seconds", v.into());
        }
        if let Some(v) = self.max_reschedules {
            put("max_reschedules", v.into());
        }
        if let Some(v) = self.ttl_seconds {
            put("ttl_seconds", v.into());
        }
        if let Some(v) = &self.expires_at {
            put("expires_at", t(v));
        }
        if let Some(v) = self.use_payload_refs {
            put("use_payload_refs", v.into());
        }
        if let Some(v) = self.payload_ref_threshold_bytes {
            put("payload_ref_threshold_bytes", v.into());
        }
        Some(hash::input_hash(&hash::canonical_json(&Value::Object(m))))
    }

    /// The task's fields at a submit made at `s3_now` (S3's time, as the
    /// record's times are): `available_at` from `schedule_at` or now +
    /// `delay_seconds`, the expiry from now + `ttl_seconds` or `expires_at`.
    /// Refuses, naming the field, a task that would become available after
    /// `horizon` (the longest record life, or this submit's record's
    /// `expires_at` with a key; `record_life` says which), or whose expiry is
    /// at or before its `available_at`.
    pub fn resolve(
        &self,
        s3_now: DateTime<Utc>,
        horizon: DateTime<Utc>,
        record_life: bool,
    ) -> Result<TaskFields, ValidationError> {
        self.check()?;
        let beyond = |field: &'static str| {
            ValidationError::field(
                field,
                if record_life {
                    "is beyond the idempotency record's life (idempotency_ttl_seconds)"
                } else {
                    "is further ahead than IDEMPOTENCY_MAX_TTL_DAYS"
                },
            )
        };
        let secs = |field: &'static str, n: u64| {
            i64::try_from(n)
                .ok()
                .and_then(Duration::try_seconds)
                .and_then(|d| s3_now.checked_add_signed(d))
                .ok_or_else(|| beyond(field))
        };
        let available_at = self.available_at(s3_now, horizon, beyond, secs)?;
        let expires_at = self.expiry(s3_now, available_at, secs)?;
        let offload_over = (self.use_payload_refs == Some(true)).then(|| {
            self.payload_ref_threshold_bytes
                .unwrap_or(DEFAULT_PAYLOAD_REF_THRESHOLD_BYTES)
        });
        Ok(TaskFields {
            timeout_seconds: self.timeout_seconds.unwrap_or(300),
            max_retries: self.max_retries.unwrap_or(3),
            retry_policy: self.retry_policy.unwrap_or_default(),
            available_at,
            max_reschedules: self.max_reschedules,
            expires_at,
            offload_over,
        })
    }

    /// `available_at`: `schedule_at`, or `delay_seconds` from S3's time now,
    /// or now; before `horizon`.
    fn available_at(
        &self,
        s3_now: DateTime<Utc>,
        horizon: DateTime<Utc>,
        beyond: impl Fn(&'static str) -> ValidationError,
        secs: impl Fn(&'static str, u64) -> Result<DateTime<Utc>, ValidationError>,
    ) -> Result<DateTime<Utc>, ValidationError> {
        let (t, field) = match (self.schedule_at, self.delay_seconds) {
            (Some(t), _) => (t, "schedule_at"),
            (None, Some(d)) => (secs("delay_seconds", d)?, "delay_seconds"),
            (None, None) => return Ok(s3_now),
        };
        if t >= horizon {
            return Err(beyond(field));
        }
        Ok(t)
    }

    /// The task's own expiry: `ttl_seconds` from S3's time now, or
    /// `expires_at`; after `available_at`, and at most ten years ahead.
    fn expiry(
        &self,
        s3_now: DateTime<Utc>,
        available_at: DateTime<Utc>,
        secs: impl Fn(&'static str, u64) -> Result<DateTime<Utc>, ValidationError>,
    ) -> Result<Option<DateTime<Utc>>, ValidationError> {
        let (e, field) = match (self.ttl_seconds, self.expires_at) {
            (Some(ttl), _) => (secs("ttl_seconds", ttl)?, "ttl_seconds"),
            (None, Some(t)) => (t, "expires_at"),
            (None, None) => return Ok(None),
        };
        if e <= available_at {
            return Err(ValidationError::field(
                field,
                "the task would expire at or before it becomes available (available_at)",
            ));
        }
        // An expiry far beyond the horizon is a mistake, not a wish.
        let far = s3_now
            .checked_add_signed(Duration::seconds(MAX_SECONDS_AHEAD as i64))
            .unwrap_or(s3_now);
        if e > far {
            return Err(ValidationError::field(field, "is more than 10 years ahead"));
        }
        Ok(Some(e))
    }
}

impl TaskFields {
    /// A task without options, available at `now`.
    pub fn defaults(now: DateTime<Utc>) -> Self {
        TaskFields {
            timeout_seconds: 300,
            max_retries: 3,
            retry_policy: TaskRetryPolicy::default(),
            available_at: now,
            max_reschedules: None,
            expires_at: None,
            offload_over: None,
        }
    }

    /// buquet's rule: offloaded when the input's compact JSON is longer than
    /// the threshold.
    pub fn offloads(&self, input_len: usize) -> bool {
        self.offload_over
            .is_some_and(|t| u64::try_from(input_len).unwrap_or(u64::MAX) > t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<TaskOptions, ValidationError> {
        match v {
            Value::Object(m) => TaskOptions::from_body(&m),
            _ => unreachable!(),
        }
    }

    fn field_of(v: Value) -> &'static str {
        match parse(v.clone()) {
            Err(ValidationError::Field { field, .. }) => field,
            other => panic!("{v}: {other:?}"),
        }
    }

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn each_option_out_of_range_is_named() {
        assert_eq!(field_of(json!({"timeout_seconds": 0})), "timeout_seconds");
        assert_eq!(
            field_of(json!({"timeout_seconds": 86_401})),
            "timeout_seconds"
        );
        assert_eq!(field_of(json!({"timeout_seconds": 1.5})), "timeout_seconds");
        assert_eq!(field_of(json!({"max_retries": -1})), "max_retries");
        assert_eq!(field_of(json!({"max_retries": 101})), "max_retries");
        assert_eq!(field_of(json!({"retry_policy": 3})), "retry_policy");
        assert_eq!(field_of(json!({"retry_policy": {"x": 1}})), "retry_policy");
        assert_eq!(
            field_of(json!({"retry_policy": {"multiplier": 0.5}})),
            "retry_policy.multiplier"
        );
        assert_eq!(
            field_of(json!({"retry_policy": {"jitter_percent": 1.5}})),
            "retry_policy.jitter_percent"
        );
        assert_eq!(
            field_of(json!({"retry_policy": {"initial_interval_ms": 5000, "max_interval_ms": 10}})),
            "retry_policy.max_interval_ms"
        );
        assert_eq!(field_of(json!({"schedule_at": "tomorrow"})), "schedule_at");
        assert_eq!(
            field_of(json!({"schedule_at": "1969-12-31T23:59:59Z"})),
            "schedule_at"
        );
        assert_eq!(field_of(json!({"delay_seconds": -5})), "delay_seconds");
        assert_eq!(
            field_of(json!({"max_reschedules": 10_001})),
            "max_reschedules"
        );
        assert_eq!(field_of(json!({"ttl_seconds": 0})), "ttl_seconds");
        assert_eq!(field_of(json!({"expires_at": 5})), "expires_at");
        assert_eq!(
            field_of(json!({"use_payload_refs": "yes"})),
            "use_payload_refs"
        );
        assert_eq!(
            field_of(json!({"use_payload_refs": true, "payload_ref_threshold_bytes": 17_000_000})),
            "payload_ref_threshold_bytes"
        );
    }

    #[test]
    fn contradictory_options_are_named() {
        assert_eq!(
            field_of(json!({"schedule_at": "2030-01-01T00:00:00Z", "delay_seconds": 5})),
            "delay_seconds"
        );
        assert_eq!(
            field_of(json!({"ttl_seconds": 5, "expires_at": "2030-01-01T00:00:00Z"})),
            "expires_at"
        );
        assert_eq!(
            field_of(json!({"payload_ref_threshold_bytes": 10})),
            "payload_ref_threshold_bytes"
        );
    }

    #[test]
    fn an_expiry_at_or_before_availability_and_a_schedule_past_the_horizon_are_refused() {
        let now = t("2026-01-27T12:00:00Z");
        let horizon = t("2026-02-26T12:00:00Z");
        let named = |o: TaskOptions| match o.resolve(now, horizon, true) {
            Err(ValidationError::Field { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        let o = TaskOptions {
            delay_seconds: Some(60),
            ttl_seconds: Some(60),
            ..Default::default()
        };
        assert_eq!(named(o), "ttl_seconds");
        let o = TaskOptions {
            schedule_at: Some(t("2026-01-28T00:00:00Z")),
            expires_at: Some(t("2026-01-27T23:00:00Z")),
            ..Default::default()
        };
        assert_eq!(named(o), "expires_at");
        let o = TaskOptions {
            expires_at: Some(now),
            ..Default::default()
        };
        assert_eq!(named(o), "expires_at");
        let o = TaskOptions {
            schedule_at: Some(horizon),
            ..Default::default()
        };
        assert_eq!(named(o), "schedule_at");
        let o = TaskOptions {
            delay_seconds: Some(31 * 86_400),
            ..Default::default()
        };
        assert_eq!(named(o), "delay_seconds");
    }

    #[test]
    fn options_set_the_fields_as_buquets_submit_does() {
        let now = t("2026-01-27T12:00:00Z");
        let horizon = t("2027-01-27T12:00:00Z");
        let o = parse(json!({
            "timeout_seconds": 1800, "max_retries": 10, "delay_seconds": 90,
            "retry_policy": {"initial_interval_ms": 500}, "max_reschedules": 4,
            "ttl_seconds": 3600, "use_payload_refs": true
        }))
        .unwrap();
        let f = o.resolve(now, horizon, true).unwrap();
        assert_eq!(f.timeout_seconds, 1800);
        assert_eq!(f.max_retries, 10);
        assert_eq!(f.available_at, t("2026-01-27T12:01:30Z"));
        // buquet counts the ttl from the submit, not from available_at.
        assert_eq!(f.expires_at, Some(t("2026-01-27T13:00:00Z")));
        assert_eq!(f.max_reschedules, Some(4));
        assert_eq!(f.retry_policy.initial_interval_ms, 500);
        assert_eq!(f.retry_policy.max_interval_ms, 60000);
        assert_eq!(f.offload_over, Some(DEFAULT_PAYLOAD_REF_THRESHOLD_BYTES));
        assert!(f.offloads(262_145));
        assert!(!f.offloads(262_144));
        assert_eq!(
            TaskOptions::default().resolve(now, horizon, false).unwrap(),
            TaskFields::defaults(now)
        );
    }

    /// `options_hash` is in records that outlive any release: a retry
    /// compares its options' hash with the record's, so a hash that changed
    /// would make every retry of a live key with options a conflict. These
    /// are the hashes the code wrote before the options were spelled once.
    #[test]
    fn the_options_hash_is_the_one_existing_records_hold() {
        let cases = [
            (
                json!({"timeout_seconds": 1800}),
                "sha256:f0460a5f35e8da0ad87f4d489bede8f13d5948ba8b440dedcdb3f1dd580f982d",
            ),
            (
                json!({"max_retries": 0}),
                "sha256:244f8551a4751fb718e7a69bd570062cb1d578f1ae0d5e14cb62184992b416a1",
            ),
            (
                json!({
                    "timeout_seconds": 60, "max_retries": 5,
                    "retry_policy": {"initial_interval_ms": 500, "max_interval_ms": 30000,
                                     "multiplier": 3.0, "jitter_percent": 0.1},
                    "delay_seconds": 90, "max_reschedules": 4, "ttl_seconds": 3600,
                    "use_payload_refs": true, "payload_ref_threshold_bytes": 1024
                }),
                "sha256:0a163fa37835db34f1edc2e2fa20dbfd25f7527e12ae8d7669030e329560ca2c",
            ),
            (
                json!({
                    "schedule_at": "2030-01-01T00:00:00.5Z",
                    "expires_at": "2030-01-02T00:00:00+01:00",
                    "retry_policy": {}, "use_payload_refs": false
                }),
                "sha256:559d6fb37e546faac2b586d8fb33493f55b2d37cc29a2afc5ea0034458eb17af",
            ),
        ];
        for (body, hash) in cases {
            assert_eq!(parse(body.clone()).unwrap().hash().unwrap(), hash, "{body}");
        }
    }

    #[test]
    fn the_options_hash_is_of_the_options_as_sent() {
        assert_eq!(TaskOptions::default().hash(), None);
        assert_eq!(
            parse(json!({"timeout_seconds": null})).unwrap().hash(),
            None
        );
        let a = parse(json!({"delay_seconds": 60, "max_retries": 2})).unwrap();
        let b = parse(json!({"max_retries": 2.0, "delay_seconds": 60})).unwrap();
        assert_eq!(a.hash(), b.hash());
        assert!(a.hash().unwrap().starts_with("sha256:"));
        let c = parse(json!({"delay_seconds": 61, "max_retries": 2})).unwrap();
        assert_ne!(a.hash(), c.hash());
        // One instant, written in two zones, is one option.
        let z = parse(json!({"schedule_at": "2030-01-01T01:00:00+01:00"})).unwrap();
        let u = parse(json!({"schedule_at": "2030-01-01T00:00:00Z"})).unwrap();
        assert_eq!(z.hash(), u.hash());
        // A default sent is still an option sent.
        let d = parse(json!({"timeout_seconds": 300})).unwrap();
        assert!(d.hash().is_some());
    }
}
