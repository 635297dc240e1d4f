//! The options of one submit ([`TaskOptions`]), each set through
//! [`TaskOptions::set`], where its bound is checked; what needs the submit's
//! time (the horizon, an expiry after availability) is
//! [`TaskOptions::resolve`]'s, once per submit; the contradictions between
//! fields, [`TaskOptions::check`]'s, once per submit too. What they make of
//! a task object is [`TaskFields`], buquet's defaults for what is left out.
//!
//! The horizon is `IDEMPOTENCY_MAX_TTL_DAYS` from now; with a key, a task
//! must also become available within its record's life (a task that starts
//! after its key is forgotten could be submitted twice).

use chrono::{DateTime, Duration, Utc};
use serde_json::{Map, Value};

use super::hash;
use super::names::ValidationError;
use super::options::{
    DEFAULT_MAX_RETRIES, DEFAULT_PAYLOAD_REF_THRESHOLD_BYTES, DEFAULT_TIMEOUT_SECONDS, Kind,
    MAX_SECONDS_AHEAD, OptionValue, TaskOption, out_of,
};
use super::retry_policy::TaskRetryPolicy;

/// The options of one submit, as sent: each within its bounds (the only
/// way in is [`TaskOptions::set`]), `None` for each left out.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TaskOptions {
    values: [Option<OptionValue>; 10],
}

/// What the options make of a task object (buquet's submit, field by field).
#[derive(Debug, Clone, PartialEq)]
pub struct TaskFields {
    /// `timeout_seconds`.
    pub timeout_seconds: u64,
    /// `max_retries`.
    pub max_retries: u32,
    /// `retry_policy`.
    pub retry_policy: TaskRetryPolicy,
    /// When the task becomes available.
    pub available_at: DateTime<Utc>,
    /// `max_reschedules`, when sent.
    pub max_reschedules: Option<u32>,
    /// The task's own expiry, when it has one.
    pub expires_at: Option<DateTime<Utc>>,
    /// `Some(threshold)`: inputs over it are offloaded.
    pub offload_over: Option<u64>,
}

fn u32_of(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

impl TaskOptions {
    /// True when no option was sent.
    pub fn is_empty(&self) -> bool {
        self.values.iter().all(Option::is_none)
    }

    /// Sets `option` to `value`, within its bounds: the one place each
    /// bound is checked. Refuses, naming the field, a value out of them (or
    /// of another kind than the option holds).
    pub fn set(&mut self, option: TaskOption, value: OptionValue) -> Result<(), ValidationError> {
        let spec = option.spec();
        match (spec.kind, value) {
            (Kind::Whole { min, max }, OptionValue::Whole(n)) => {
                if n < min || n > max {
                    return Err(out_of(option));
                }
            }
            (Kind::Time, OptionValue::Time(t)) => {
                if t.timestamp() < 0 {
                    return Err(ValidationError::field(
                        spec.name,
                        "must be after 1970-01-01",
                    ));
                }
            }
            (Kind::Flag, OptionValue::Flag(_)) => {}
            (Kind::Policy, OptionValue::Policy(p)) => p.check()?,
            _ => return Err(ValidationError::field(spec.name, "is of another kind")),
        }
        self.values[option.index()] = Some(value);
        Ok(())
    }

    /// The value of `option`, if it was sent.
    pub fn get(&self, option: TaskOption) -> Option<OptionValue> {
        self.values[option.index()]
    }

    fn whole(&self, option: TaskOption) -> Option<u64> {
        match self.get(option) {
            Some(OptionValue::Whole(n)) => Some(n),
            _ => None,
        }
    }

    fn time(&self, option: TaskOption) -> Option<DateTime<Utc>> {
        match self.get(option) {
            Some(OptionValue::Time(t)) => Some(t),
            _ => None,
        }
    }

    fn sent(&self, option: TaskOption) -> bool {
        self.get(option).is_some()
    }

    /// Whether the task is scheduled (`schedule_at` or `delay_seconds`).
    pub fn schedules(&self) -> bool {
        self.sent(TaskOption::ScheduleAt) || self.sent(TaskOption::DelaySeconds)
    }

    /// Reads the option fields of a submit body (fields sent as `null` count
    /// as left out), in the table's order: each one's type, then its bounds.
    /// The contradictions between fields are [`TaskOptions::check`]'s, and
    /// the checks that need the submit's time [`TaskOptions::resolve`]'s.
    pub fn from_body(obj: &Map<String, Value>) -> Result<Self, ValidationError> {
        let mut o = TaskOptions::default();
        for option in TaskOption::ALL {
            if let Some(v) = obj.get(option.name()).filter(|v| !v.is_null()) {
                o.set(option, OptionValue::read(option, v)?)?;
            }
        }
        Ok(o)
    }

    /// The contradictions between fields (each field's bounds are checked
    /// where it is set).
    pub fn check(&self) -> Result<(), ValidationError> {
        if self.sent(TaskOption::ScheduleAt) && self.sent(TaskOption::DelaySeconds) {
            return Err(ValidationError::field(
                "delay_seconds",
                "contradicts schedule_at: send one of them",
            ));
        }
        // buquet's submit takes `ttl_seconds` over `expires_at` silently; a
        // request that says both says two things, and is refused.
        if self.sent(TaskOption::TtlSeconds) && self.sent(TaskOption::ExpiresAt) {
            return Err(ValidationError::field(
                "expires_at",
                "contradicts ttl_seconds: send one of them",
            ));
        }
        if self.sent(TaskOption::PayloadRefThresholdBytes)
            && self.get(TaskOption::UsePayloadRefs) != Some(OptionValue::Flag(true))
        {
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
        let m: Map<String, Value> = TaskOption::ALL
            .iter()
            .filter_map(|o| Some((o.name().to_owned(), self.get(*o)?.to_json())))
            .collect();
        Some(hash::input_hash(&hash::canonical_json(&Value::Object(m))))
    }

    /// The task's fields at a submit made at `s3_now` (S3's time, as the
    /// record's times are): `available_at` from `schedule_at` or now +
    /// `delay_seconds`, the expiry from now + `ttl_seconds` or `expires_at`.
    /// Refuses, naming the field, a task that would become available after
    /// `horizon` (the longest record life, or this submit's record's
    /// `expires_at` with a key; `record_life` says which), or whose expiry is
    /// at or before its `available_at`, or more than ten years ahead.
    pub fn resolve(
        &self,
        s3_now: DateTime<Utc>,
        horizon: DateTime<Utc>,
        record_life: bool,
    ) -> Result<TaskFields, ValidationError> {
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
        let offload_over = (self.get(TaskOption::UsePayloadRefs) == Some(OptionValue::Flag(true)))
            .then(|| {
                self.whole(TaskOption::PayloadRefThresholdBytes)
                    .unwrap_or(DEFAULT_PAYLOAD_REF_THRESHOLD_BYTES)
            });
        let retry_policy = match self.get(TaskOption::RetryPolicy) {
            Some(OptionValue::Policy(p)) => p,
            _ => TaskRetryPolicy::default(),
        };
        let d = TaskFields::defaults(available_at);
        Ok(TaskFields {
            timeout_seconds: self
                .whole(TaskOption::TimeoutSeconds)
                .unwrap_or(d.timeout_seconds),
            max_retries: self
                .whole(TaskOption::MaxRetries)
                .map_or(d.max_retries, u32_of),
            retry_policy,
            max_reschedules: self.whole(TaskOption::MaxReschedules).map(u32_of),
            expires_at,
            offload_over,
            ..d
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
        let delay = self.whole(TaskOption::DelaySeconds);
        let (t, field) = match (self.time(TaskOption::ScheduleAt), delay) {
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
        let ttl = self.whole(TaskOption::TtlSeconds);
        let (e, field) = match (ttl, self.time(TaskOption::ExpiresAt)) {
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
            timeout_seconds: DEFAULT_TIMEOUT_SECONDS,
            max_retries: DEFAULT_MAX_RETRIES,
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
    use crate::protocol::options::FIELDS;
    use crate::protocol::retry_policy::{MAX_INTERVAL_MS, MAX_MULTIPLIER};
    use serde_json::json;

    /// A body's options as a submit reads them: each field, then the
    /// contradictions between them.
    fn parse(v: Value) -> Result<TaskOptions, ValidationError> {
        let Value::Object(m) = v else { unreachable!() };
        let o = TaskOptions::from_body(&m)?;
        o.check()?;
        Ok(o)
    }

    fn named(r: Result<impl std::fmt::Debug, ValidationError>) -> &'static str {
        match r {
            Err(ValidationError::Field { field, .. }) => field,
            other => panic!("expected a field refused, got {other:?}"),
        }
    }

    fn field_of(v: Value) -> &'static str {
        named(parse(v))
    }

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    /// Options set one by one, as the builder sets them.
    fn options(set: &[(TaskOption, OptionValue)]) -> TaskOptions {
        let mut o = TaskOptions::default();
        for (option, value) in set {
            o.set(*option, *value).unwrap();
        }
        o
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

    /// Every whole-number option of the table at both edges of its range:
    /// the edge is taken, one past it is refused, naming the option, both
    /// in a body and set as the builder sets it.
    #[test]
    fn every_whole_number_option_takes_its_edges_and_refuses_one_past_them() {
        for option in TaskOption::ALL {
            let Kind::Whole { min, max } = option.spec().kind else {
                continue;
            };
            let body = |n: i128| {
                let mut b = json!({ option.name(): n });
                if option == TaskOption::PayloadRefThresholdBytes {
                    b["use_payload_refs"] = json!(true);
                }
                parse(b)
            };
            for edge in [min, max] {
                let o = body(edge.into()).unwrap();
                assert_eq!(o.get(option), Some(OptionValue::Whole(edge)), "{option:?}");
                assert!(
                    TaskOptions::default()
                        .set(option, OptionValue::Whole(edge))
                        .is_ok()
                );
            }
            assert_eq!(named(body(i128::from(min) - 1)), option.name());
            assert_eq!(named(body(i128::from(max) + 1)), option.name());
            let mut o = TaskOptions::default();
            assert_eq!(
                named(o.set(option, OptionValue::Whole(max + 1))),
                option.name()
            );
            if let Some(below) = min.checked_sub(1) {
                assert_eq!(
                    named(o.set(option, OptionValue::Whole(below))),
                    option.name()
                );
            }
            assert!(o.is_empty(), "a refused value is not kept");
        }
    }

    #[test]
    fn a_retry_policys_bounds_take_their_edges_and_refuse_one_past_them() {
        let policy = |p: Value| parse(json!({ "retry_policy": p }));
        let max = MAX_INTERVAL_MS;
        for ok in [
            json!({"initial_interval_ms": 0, "max_interval_ms": 0}),
            json!({"initial_interval_ms": max, "max_interval_ms": max}),
            json!({"initial_interval_ms": 7, "max_interval_ms": 7}),
            json!({"multiplier": 1.0}),
            json!({"multiplier": MAX_MULTIPLIER}),
            json!({"jitter_percent": 0.0}),
            json!({"jitter_percent": 1.0}),
        ] {
            assert!(policy(ok.clone()).is_ok(), "{ok}");
        }
        for (bad, field) in [
            (
                json!({"initial_interval_ms": max + 1, "max_interval_ms": max}),
                "retry_policy.initial_interval_ms",
            ),
            (
                json!({"initial_interval_ms": -1}),
                "retry_policy.initial_interval_ms",
            ),
            (
                json!({"max_interval_ms": max + 1}),
                "retry_policy.max_interval_ms",
            ),
            (
                json!({"initial_interval_ms": 7, "max_interval_ms": 6}),
                "retry_policy.max_interval_ms",
            ),
            (json!({"multiplier": 0.999_999}), "retry_policy.multiplier"),
            (
                json!({"multiplier": 100.000_001}),
                "retry_policy.multiplier",
            ),
            (
                json!({"jitter_percent": -0.000_001}),
                "retry_policy.jitter_percent",
            ),
            (
                json!({"jitter_percent": 1.000_001}),
                "retry_policy.jitter_percent",
            ),
        ] {
            assert_eq!(named(policy(bad.clone())), field, "{bad}");
        }
    }

    #[test]
    fn a_time_from_1970_on_is_taken_and_one_second_before_refused() {
        for option in [TaskOption::ScheduleAt, TaskOption::ExpiresAt] {
            let at = |s: &str| parse(json!({ option.name(): s }));
            let o = at("1970-01-01T00:00:00Z").unwrap();
            assert_eq!(
                o.get(option),
                Some(OptionValue::Time(t("1970-01-01T00:00:00Z")))
            );
            assert_eq!(named(at("1969-12-31T23:59:59Z")), option.name());
            let before = OptionValue::Time(t("1969-12-31T23:59:59Z"));
            assert_eq!(
                named(TaskOptions::default().set(option, before)),
                option.name()
            );
        }
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
        assert_eq!(
            field_of(json!({"use_payload_refs": false, "payload_ref_threshold_bytes": 10})),
            "payload_ref_threshold_bytes"
        );
        // Each alone is no contradiction.
        for alone in [
            json!({"schedule_at": "2030-01-01T00:00:00Z"}),
            json!({"delay_seconds": 5}),
            json!({"ttl_seconds": 5}),
            json!({"expires_at": "2030-01-01T00:00:00Z"}),
            json!({"use_payload_refs": true, "payload_ref_threshold_bytes": 10}),
        ] {
            assert!(parse(alone.clone()).is_ok(), "{alone}");
        }
    }

    #[test]
    fn an_expiry_at_or_before_availability_and_a_schedule_past_the_horizon_are_refused() {
        let now = t("2026-01-27T12:00:00Z");
        let horizon = t("2026-02-26T12:00:00Z");
        let resolved = |o: TaskOptions| o.resolve(now, horizon, true);
        use OptionValue::{Time, Whole};
        use TaskOption::*;
        let o = options(&[(DelaySeconds, Whole(60)), (TtlSeconds, Whole(60))]);
        assert_eq!(named(resolved(o)), "ttl_seconds");
        let o = options(&[(DelaySeconds, Whole(60)), (TtlSeconds, Whole(61))]);
        assert!(resolved(o).is_ok(), "one second after availability");
        let o = options(&[
            (ScheduleAt, Time(t("2026-01-28T00:00:00Z"))),
            (ExpiresAt, Time(t("2026-01-27T23:00:00Z"))),
        ]);
        assert_eq!(named(resolved(o)), "expires_at");
        let o = options(&[(ExpiresAt, Time(now))]);
        assert_eq!(named(resolved(o)), "expires_at");
        let o = options(&[(ExpiresAt, Time(now + Duration::seconds(1)))]);
        assert!(resolved(o).is_ok(), "one second after now");
        // The horizon itself is past it; a second before is within.
        let o = options(&[(ScheduleAt, Time(horizon))]);
        assert_eq!(named(resolved(o)), "schedule_at");
        let o = options(&[(ScheduleAt, Time(horizon - Duration::seconds(1)))]);
        assert!(resolved(o).is_ok());
        let to_horizon = (horizon - now).num_seconds() as u64;
        let o = options(&[(DelaySeconds, Whole(to_horizon))]);
        assert_eq!(named(resolved(o)), "delay_seconds");
        let o = options(&[(DelaySeconds, Whole(to_horizon - 1))]);
        assert!(resolved(o).is_ok());
        // Without a key the message names the setting, not the record.
        let o = options(&[(DelaySeconds, Whole(31 * 86_400))]);
        let Err(ValidationError::Field { reason, .. }) = o.resolve(now, horizon, false) else {
            panic!("past the horizon");
        };
        assert!(reason.contains("IDEMPOTENCY_MAX_TTL_DAYS"), "{reason}");
    }

    #[test]
    fn an_expiry_ten_years_ahead_is_taken_and_one_second_more_refused() {
        let now = t("2026-01-27T12:00:00Z");
        let ten_years = now + Duration::seconds(MAX_SECONDS_AHEAD as i64);
        let at = |e| options(&[(TaskOption::ExpiresAt, OptionValue::Time(e))]);
        assert!(at(ten_years).resolve(now, ten_years, false).is_ok());
        assert_eq!(
            named(at(ten_years + Duration::seconds(1)).resolve(now, ten_years, false)),
            "expires_at"
        );
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
        assert!(o.schedules());
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
        let own = parse(json!({"use_payload_refs": true, "payload_ref_threshold_bytes": 16}))
            .unwrap()
            .resolve(now, horizon, true)
            .unwrap();
        assert_eq!(own.offload_over, Some(16));
        let off = parse(json!({"use_payload_refs": false})).unwrap();
        assert_eq!(off.resolve(now, horizon, true).unwrap().offload_over, None);
        assert!(!off.schedules());
        assert_eq!(
            TaskOptions::default().resolve(now, horizon, false).unwrap(),
            TaskFields::defaults(now)
        );
    }

    #[test]
    fn the_table_names_every_option_once_with_a_flag_of_its_own() {
        let names: std::collections::HashSet<_> = FIELDS.iter().collect();
        let flags: std::collections::HashSet<_> =
            TaskOption::ALL.iter().map(|o| o.spec().flag).collect();
        assert_eq!((names.len(), flags.len()), (10, 10));
        for (i, o) in TaskOption::ALL.iter().enumerate() {
            assert_eq!(o.index(), i);
            assert_eq!(FIELDS[i], o.name());
        }
        assert_eq!(TaskOption::TtlSeconds.spec().flag, "task-ttl-seconds");
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
