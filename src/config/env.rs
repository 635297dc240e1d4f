//! The environment that sets the settings ([`Config::from_env`]; the
//! README, "Configuration"): each variable read once, by one name, with its
//! default and its bounds; and the inverse for the variables a store's probe
//! asks about ([`Settings::probed_variables`]).

use std::collections::BTreeMap;

use chrono::Duration;

use super::settings::{Conditions, ConfigError, IfTaskFailed, ListOrder, Settings, err};
use crate::due_sender::DueOrder;

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
    /// `PASS_QUEUE_URL`: the queue a scheduled pass hands its continuations
    /// to (the `sweep` function's pass queue). Unset: a pass that outlasts
    /// its invocation goes on at the next scheduled run.
    pub pass_queue_url: Option<String>,
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
        Some(ON | "true" | "1" | "yes") => Ok(true),
        Some(OFF | "false" | "0" | "no") => Ok(false),
        Some(v) => Err(err(var, format!("{v:?} is not one of true/false/on/off"))),
    }
}

fn parse_list_order(get: &impl Fn(&str) -> Option<String>) -> Result<ListOrder, ConfigError> {
    match get(LIST_ORDER)
        .as_deref()
        .map(str::trim)
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        None | Some("") => Ok(ListOrder::default()),
        Some(v) => ListOrder::from_name(v)
            .ok_or_else(|| err(LIST_ORDER, format!("{v:?} is not one of bytes/any"))),
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
            conditional_delete: parse_bool(CONDITIONAL_DELETE, &get, true)?,
            list_order: parse_list_order(&get)?,
            if_task_failed: parse_if_task_failed(&get)?,
            pass_concurrency: parse_num("PASS_CONCURRENCY", &get, d.pass_concurrency)?,
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
            pass_queue_url: nonempty("PASS_QUEUE_URL"),
            s3_credentials_secret: nonempty("S3_CREDENTIALS_SECRET"),
        })
    }
}

/// A switch's words, as the environment writes them (it reads
/// `true`/`false`, `1`/`0` and `yes`/`no` too).
const ON: &str = "on";
const OFF: &str = "off";
/// The variables of the settings a store's probe may ask for.
const CONDITIONAL_DELETE: &str = "CONDITIONAL_DELETE";
const LIST_ORDER: &str = "LIST_ORDER";

impl Settings {
    /// The variables that set what a store's probe may ask of these
    /// settings (`idem doctor --probe`; docs/protocol.md, "Probing a
    /// store"), as the environment would say them: the inverse of
    /// [`Config::from_lookup`] for those, in its own words.
    pub fn probed_variables(&self) -> BTreeMap<&'static str, String> {
        let switch = |on| if on { ON } else { OFF };
        BTreeMap::from([
            (
                CONDITIONAL_DELETE,
                switch(self.conditional_delete).to_owned(),
            ),
            (LIST_ORDER, self.list_order.as_str().to_owned()),
        ])
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

    /// Not refused, on purpose (docs/decisions.md, "A stale age below the
    /// operation timeout"): a finisher that acts while the record's own
    /// submit is still in flight does what a concurrent replay does at any
    /// age, and a record whose PUT has not landed is not found, which the
    /// sweeper answers by the claim's own bound, not by the stale age.
    #[test]
    fn a_stale_age_below_the_operation_timeout_is_accepted() {
        let c = cfg(&[("BUCKET_NAME", "b"), ("STALE_CREATING_AFTER_SECONDS", "5")]).unwrap();
        assert_eq!(c.settings.stale_creating_after, Duration::seconds(5));
        assert!(c.settings.stale_creating_after < c.settings.operation_timeout);
        assert!(c.settings.check().is_ok());
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
