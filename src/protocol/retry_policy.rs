//! buquet's `RetryPolicy`, a task option of four fields: read from a body's
//! `retry_policy`, each field left out taking buquet's default, and checked
//! against its bounds (src/protocol/options.rs has the table).

use serde::Serialize;
use serde_json::Value;

use super::names::{ValidationError, whole};

/// The most a retry policy's intervals may say: a day.
pub const MAX_INTERVAL_MS: u32 = 86_400_000;
/// The most a retry policy's multiplier may say.
pub const MAX_MULTIPLIER: f64 = 100.0;

/// buquet's `RetryPolicy`; fields left out of a request take buquet's
/// defaults, as its Python `RetryPolicy(...)` does.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TaskRetryPolicy {
    /// The first wait, in milliseconds (0 to 86 400 000; default 1000).
    pub initial_interval_ms: u32,
    /// The longest wait, in milliseconds (`initial_interval_ms` to
    /// 86 400 000; default 60 000).
    pub max_interval_ms: u32,
    /// How much each wait grows (1 to 100; default 2).
    pub multiplier: f64,
    /// The share of a wait that is random (0 to 1; default 0.25).
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

/// The fields of a body's `retry_policy`.
const POLICY: [&str; 4] = [
    "initial_interval_ms",
    "max_interval_ms",
    "multiplier",
    "jitter_percent",
];

impl TaskRetryPolicy {
    /// Reads a body's `retry_policy`: an object of its four fields, each
    /// left out taking buquet's default; its bounds are [`Self::check`]'s.
    pub(super) fn read(v: &Value) -> Result<Self, ValidationError> {
        let Value::Object(p) = v else {
            return Err(ValidationError::field("retry_policy", "must be an object"));
        };
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
        let interval = |v, field| {
            whole(v)
                .map(|n| u32::try_from(n).unwrap_or(u32::MAX))
                .ok_or_else(|| interval_out_of(field))
        };
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
        Ok(r)
    }

    /// Checks the bounds; names the first field out of them.
    pub fn check(&self) -> Result<(), ValidationError> {
        if self.initial_interval_ms > MAX_INTERVAL_MS {
            return Err(interval_out_of("retry_policy.initial_interval_ms"));
        }
        if self.max_interval_ms > MAX_INTERVAL_MS {
            return Err(interval_out_of("retry_policy.max_interval_ms"));
        }
        if self.max_interval_ms < self.initial_interval_ms {
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

fn interval_out_of(field: &'static str) -> ValidationError {
    ValidationError::field(
        field,
        format!("must be a whole number, 0 to {MAX_INTERVAL_MS}"),
    )
}

fn number(v: &Value, field: &'static str) -> Result<f64, ValidationError> {
    v.as_f64()
        .filter(|f| f.is_finite())
        .ok_or_else(|| ValidationError::field(field, "must be a number"))
}
