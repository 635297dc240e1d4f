//! The task options' table: the fields of buquet 0.1's `SubmitOptions`
//! (timeouts, retries, schedules, the task's own expiry, payload refs),
//! named as buquet names them, each spelled once in [`TaskOption`]'s table:
//! its name in a body, its flag of `idem submit`, its bounds, its default.
//! The body's parser, the options' hash, the CLI's flags and the builder's
//! setters all read that table; a value read from a body is an
//! [`OptionValue`]. The options of one submit are src/protocol/
//! task_options.rs's; a retry policy's fields, retry_policy.rs's.
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
//! | `schedule_at` / `delay_seconds` | from 1970 / 0 to 10 years, and before the horizon |
//! | `max_reschedules` | 0 to 10 000 |
//! | `ttl_seconds` / `expires_at` | 1 s to 10 years / from 1970 to 10 years ahead; after `available_at` |
//! | `payload_ref_threshold_bytes` | 0 to 16 777 216, with `use_payload_refs` |

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::names::{ValidationError, whole};
use super::retry_policy::TaskRetryPolicy;
use super::rfc3339;

/// The most `timeout_seconds` may say: a day.
pub const MAX_TIMEOUT_SECONDS: u64 = 86_400;
/// The most `max_retries` may say.
pub const MAX_RETRIES: u32 = 100;
/// The most `max_reschedules` may say.
pub const MAX_RESCHEDULES: u32 = 10_000;
/// The most `delay_seconds` and `ttl_seconds` may say: ten years (a task
/// must also become available within the horizon, and its expiry may be at
/// most ten years ahead).
pub const MAX_SECONDS_AHEAD: u64 = 315_360_000;
/// The most `payload_ref_threshold_bytes` may say: 16 MiB.
pub const MAX_PAYLOAD_REF_THRESHOLD_BYTES: u64 = 16 << 20;
/// buquet's own default threshold (256 KiB): an input whose compact JSON is
/// longer is offloaded when `use_payload_refs` is on.
pub const DEFAULT_PAYLOAD_REF_THRESHOLD_BYTES: u64 = 256 * 1024;
/// buquet's default `timeout_seconds`: five minutes.
pub const DEFAULT_TIMEOUT_SECONDS: u64 = 300;
/// buquet's default `max_retries`.
pub const DEFAULT_MAX_RETRIES: u32 = 3;

/// One task option. [`TaskOption::ALL`] is the order a body's options are
/// read in (the first one wrong is the one an error names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskOption {
    /// `timeout_seconds`: how long a worker may run the task.
    TimeoutSeconds,
    /// `max_retries`.
    MaxRetries,
    /// `retry_policy`: buquet's `RetryPolicy`.
    RetryPolicy,
    /// `schedule_at`: the task is not claimed before it.
    ScheduleAt,
    /// `delay_seconds`: from S3's time at the submit.
    DelaySeconds,
    /// `max_reschedules`.
    MaxReschedules,
    /// `ttl_seconds`: the task's own expiry, from the submit.
    TtlSeconds,
    /// `expires_at`: the task's own expiry.
    ExpiresAt,
    /// `use_payload_refs`: offload a large input to its payload object.
    UsePayloadRefs,
    /// `payload_ref_threshold_bytes`.
    PayloadRefThresholdBytes,
}

/// What an option holds, and its bounds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    /// A whole number in `min..=max`, written either way in JSON (`60` or
    /// `60.0`).
    Whole {
        /// The least it may be.
        min: u64,
        /// The most it may be.
        max: u64,
    },
    /// An RFC 3339 time, from 1970 on.
    Time,
    /// `true` or `false`.
    Flag,
    /// buquet's `RetryPolicy`, an object of its four fields.
    Policy,
}

/// One row of the table: an option as every door spells it.
#[derive(Debug, Clone, Copy)]
pub struct Spec {
    /// Its field in a body, as buquet's submit names it.
    pub name: &'static str,
    /// Its flag of `idem submit`, without the dashes (`ttl_seconds` and
    /// `expires_at` say `task-`: `--ttl-seconds` is the key's life).
    pub flag: &'static str,
    /// What it holds, and its bounds.
    pub kind: Kind,
    /// Its help, as `idem submit --help` shows it.
    pub help: &'static str,
}

impl TaskOption {
    /// Every option, in the order a body's are read.
    pub const ALL: [TaskOption; 10] = [
        TaskOption::TimeoutSeconds,
        TaskOption::MaxRetries,
        TaskOption::RetryPolicy,
        TaskOption::ScheduleAt,
        TaskOption::DelaySeconds,
        TaskOption::MaxReschedules,
        TaskOption::TtlSeconds,
        TaskOption::ExpiresAt,
        TaskOption::UsePayloadRefs,
        TaskOption::PayloadRefThresholdBytes,
    ];

    /// The table.
    pub const fn spec(self) -> Spec {
        use Kind::*;
        let (name, flag, kind, help) = match self {
            TaskOption::TimeoutSeconds => (
                "timeout_seconds",
                "timeout-seconds",
                Whole {
                    min: 1,
                    max: MAX_TIMEOUT_SECONDS,
                },
                "`timeout_seconds`: how long a worker may run the task",
            ),
            TaskOption::MaxRetries => (
                "max_retries",
                "max-retries",
                Whole {
                    min: 0,
                    max: MAX_RETRIES as u64,
                },
                "`max_retries`",
            ),
            TaskOption::RetryPolicy => (
                "retry_policy",
                "retry-policy",
                Policy,
                "`retry_policy`, as JSON: `{\"initial_interval_ms\":.., \"max_interval_ms\":.., \"multiplier\":.., \"jitter_percent\":..}`",
            ),
            TaskOption::ScheduleAt => (
                "schedule_at",
                "schedule-at",
                Time,
                "`schedule_at`: RFC 3339; the task is not claimed before it",
            ),
            TaskOption::DelaySeconds => (
                "delay_seconds",
                "delay-seconds",
                Whole {
                    min: 0,
                    max: MAX_SECONDS_AHEAD,
                },
                "`delay_seconds`: from S3's time at the submit",
            ),
            TaskOption::MaxReschedules => (
                "max_reschedules",
                "max-reschedules",
                Whole {
                    min: 0,
                    max: MAX_RESCHEDULES as u64,
                },
                "`max_reschedules`",
            ),
            TaskOption::TtlSeconds => (
                "ttl_seconds",
                "task-ttl-seconds",
                Whole {
                    min: 1,
                    max: MAX_SECONDS_AHEAD,
                },
                "`ttl_seconds`: the task's own expiry, from the submit (not the key's life: that is `--ttl-seconds`)",
            ),
            TaskOption::ExpiresAt => (
                "expires_at",
                "task-expires-at",
                Time,
                "`expires_at`: the task's own expiry, RFC 3339",
            ),
            TaskOption::UsePayloadRefs => (
                "use_payload_refs",
                "use-payload-refs",
                Flag,
                "`use_payload_refs`: offload an input over the threshold to `payloads/{task_id}/input.json`",
            ),
            TaskOption::PayloadRefThresholdBytes => (
                "payload_ref_threshold_bytes",
                "payload-ref-threshold-bytes",
                Whole {
                    min: 0,
                    max: MAX_PAYLOAD_REF_THRESHOLD_BYTES,
                },
                "`payload_ref_threshold_bytes`, with `--use-payload-refs`",
            ),
        };
        Spec {
            name,
            flag,
            kind,
            help,
        }
    }

    /// What a task without it gets (buquet's defaults), if anything: the
    /// CLI's help says it, and [`TaskFields::defaults`] writes it.
    pub const fn default(self) -> Option<u64> {
        match self {
            TaskOption::TimeoutSeconds => Some(DEFAULT_TIMEOUT_SECONDS),
            TaskOption::MaxRetries => Some(DEFAULT_MAX_RETRIES as u64),
            TaskOption::PayloadRefThresholdBytes => Some(DEFAULT_PAYLOAD_REF_THRESHOLD_BYTES),
            _ => None,
        }
    }

    /// Its field in a body.
    pub const fn name(self) -> &'static str {
        self.spec().name
    }

    /// Its place in [`TaskOption::ALL`] (and in a [`TaskOptions`]).
    pub(super) const fn index(self) -> usize {
        self as usize
    }
}

/// The names of the option fields of a submit body.
pub const FIELDS: [&str; 10] = {
    let mut names = [""; 10];
    let mut i = 0;
    while i < names.len() {
        names[i] = TaskOption::ALL[i].name();
        i += 1;
    }
    names
};

/// One option's value, within its bounds once it is in a [`crate::protocol::TaskOptions`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum OptionValue {
    /// A whole number.
    Whole(u64),
    /// A time.
    Time(DateTime<Utc>),
    /// A flag.
    Flag(bool),
    /// A retry policy.
    Policy(TaskRetryPolicy),
}

impl OptionValue {
    /// The value of a body's field for `option`: its JSON type read (a
    /// whole number written either way, a time parsed), not yet its bounds.
    pub(super) fn read(option: TaskOption, v: &Value) -> Result<Self, ValidationError> {
        let spec = option.spec();
        match spec.kind {
            Kind::Whole { .. } => whole(v)
                .map(OptionValue::Whole)
                .ok_or_else(|| out_of(option)),
            Kind::Time => {
                let s = v.as_str().ok_or_else(|| {
                    ValidationError::field(spec.name, "must be an RFC 3339 time (a string)")
                })?;
                let t = DateTime::parse_from_rfc3339(s).map_err(|e| {
                    ValidationError::field(spec.name, format!("is not an RFC 3339 time: {e}"))
                })?;
                Ok(OptionValue::Time(t.with_timezone(&Utc)))
            }
            Kind::Flag => v
                .as_bool()
                .map(OptionValue::Flag)
                .ok_or_else(|| ValidationError::field(spec.name, "must be a boolean")),
            Kind::Policy => TaskRetryPolicy::read(v).map(OptionValue::Policy),
        }
    }

    /// As `options_hash` and buquet write it: numbers, booleans, UTC times
    /// keeping any fraction of a second, the policy's four fields.
    pub(super) fn to_json(self) -> Value {
        match self {
            OptionValue::Whole(n) => n.into(),
            OptionValue::Time(t) => Value::String(rfc3339::format_precise(&t)),
            OptionValue::Flag(b) => b.into(),
            OptionValue::Policy(p) => serde_json::to_value(p).unwrap_or_default(),
        }
    }
}

/// The refusal of a whole number outside `option`'s bounds (or no whole
/// number at all).
pub(super) fn out_of(option: TaskOption) -> ValidationError {
    let spec = option.spec();
    let Kind::Whole { min, max } = spec.kind else {
        return ValidationError::field(spec.name, "is out of range");
    };
    ValidationError::field(spec.name, format!("must be a whole number, {min} to {max}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the CLI's help tells and a task without the option gets:
    /// buquet's defaults, for these three options alone.
    #[test]
    fn only_the_timeout_the_retries_and_the_offload_threshold_have_a_default_and_it_is_buquets() {
        let defaults: Vec<(&str, u64)> = TaskOption::ALL
            .iter()
            .filter_map(|o| Some((o.name(), o.default()?)))
            .collect();
        assert_eq!(
            defaults,
            [
                ("timeout_seconds", 300),
                ("max_retries", 3),
                ("payload_ref_threshold_bytes", 256 * 1024)
            ]
        );
    }
}
