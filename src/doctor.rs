//! `idem doctor`: reads a bucket's configuration and says what this service
//! and the queue's workers need of it that is missing (docs/protocol.md and the README
//! 3, 6 and 6a).
//!
//! Each finding is `ok`, a `warning` (hygiene: growth, the queue's workers,
//! encryption) or an `error`: a guarantee of the protocol depends on it. The
//! notification of record writes (or, under `RECORD_EVENTS=submitter`, a
//! reachable due queue whose delay is the stale age) is what finishes
//! interrupted submits (guarantee 4); an `idempotency/` expiry shorter than
//! the longest record life deletes live records (guarantee 1). Nothing else
//! is an error.

use aws_sdk_s3::Client;
use aws_sdk_s3::error::ProvideErrorMetadata;
use aws_sdk_s3::operation::get_bucket_encryption::GetBucketEncryptionOutput;
use aws_sdk_s3::operation::get_bucket_versioning::GetBucketVersioningOutput;
use aws_sdk_s3::types::{
    BucketVersioningStatus, Event, ExpirationStatus, LifecycleRule, QueueConfiguration,
};
use serde::Serialize;

use serde_json::Value;

use crate::config::{Config, ConfigError, RecordEvents};
use crate::due_sender::SqsDueQueue;
use crate::protocol::sweep::RECORDS_PREFIX;
use crate::queue::Queue;

/// What the bucket is checked against.
#[derive(Debug, Clone)]
pub struct Expectations {
    /// `IDEMPOTENCY_MAX_TTL_DAYS`: the `idempotency/` expiry must be longer.
    pub max_ttl_days: i64,
    /// The due queue the record events must reach; any queue when `None`.
    pub due_queue_arn: Option<String>,
    /// `RECORD_EVENTS=submitter`: the submitter sends each record's due
    /// message, so no notification is needed; the due queue is checked
    /// instead (what the CLI found of it).
    pub submitter: Option<DueQueueSeen>,
}

/// The due queue at `DUE_QUEUE_URL`, as the CLI read it
/// (`GetQueueAttributes`), against `STALE_CREATING_AFTER_SECONDS`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueQueueSeen {
    pub url: String,
    /// Its `DelaySeconds`, or why it could not be read.
    pub delay_seconds: Result<u64, String>,
    /// `STALE_CREATING_AFTER_SECONDS`.
    pub stale_seconds: u64,
    /// `DUE_MESSAGE`: when the submitter sends each message.
    pub order: crate::due_sender::DueOrder,
}

/// Under `RECORD_EVENTS=submitter`: whether a record can exist without its
/// due message (`DUE_MESSAGE`).
pub fn due_message_check(order: crate::due_sender::DueOrder) -> Check {
    use crate::due_sender::DueOrder;
    match order {
        DueOrder::BeforeClaim => check(
            "due_message",
            Status::Ok,
            "before_claim: each record's due message is accepted before its PUT, so every \
             interrupted submit is finished by the sweeper",
        ),
        DueOrder::WithClaim => check(
            "due_message",
            Status::Warning,
            "with_claim: a submit whose process dies after its record's PUT and before SQS took \
             its message is finished only by the next submit of its key (DUE_MESSAGE=before_claim \
             closes that window at one round trip more)",
        ),
    }
}

/// Under `RECORD_EVENTS=submitter`: the due queue is reachable, and its
/// delay is the stale age (each message is due when its record is stale).
pub fn due_queue_check(q: &DueQueueSeen) -> Check {
    match &q.delay_seconds {
        Ok(d) if *d == q.stale_seconds => check(
            "due_queue",
            Status::Ok,
            format!(
                "{}: reachable, its delay {d} s is STALE_CREATING_AFTER_SECONDS",
                q.url
            ),
        ),
        Ok(d) => check(
            "due_queue",
            Status::Error,
            format!(
                "{}: its delay is {d} s, not STALE_CREATING_AFTER_SECONDS ({} s): record \
                 messages reach the sweeper {}",
                q.url,
                q.stale_seconds,
                if *d < q.stale_seconds {
                    "early and come back a visibility timeout later"
                } else {
                    "late, closer to the finish deadline than the operating conditions allow"
                }
            ),
        ),
        Err(e) => check(
            "due_queue",
            Status::Error,
            format!(
                "{} cannot be read ({e}): the submit function cannot send the records' due \
                 messages, and interrupted submits are finished only by the next submit of \
                 their key",
                q.url
            ),
        ),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Warning,
    Error,
}

/// One finding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    pub check: &'static str,
    pub status: Status,
    pub detail: String,
}

/// Everything found; `ok` when nothing the guarantees depend on is missing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    pub bucket: String,
    pub ok: bool,
    pub errors: usize,
    pub warnings: usize,
    pub checks: Vec<Check>,
}

/// The prefixes whose noncurrent versions and delete markers are this
/// service's to expire (section 6a). `sweeper/` too: the pass rewrites its
/// checkpoint hundreds of times a day at scale, each write a version.
pub const SERVICE_PREFIXES: [&str; 4] = [RECORDS_PREFIX, "rejected/", "payloads/", "sweeper/"];

fn check(check: &'static str, status: Status, detail: impl Into<String>) -> Check {
    Check {
        check,
        status,
        detail: detail.into(),
    }
}

fn sdk_error<E: ProvideErrorMetadata>(e: &E) -> String {
    format!(
        "{}: {}",
        e.code().unwrap_or("error"),
        e.message().unwrap_or("no message")
    )
}

/// Reads `bucket`'s versioning, notification, lifecycle and encryption
/// (four GETs) and reports on them.
pub async fn examine(client: &Client, bucket: &str, expect: &Expectations) -> Report {
    let (versioning, notification, lifecycle, encryption) = futures::join!(
        client.get_bucket_versioning().bucket(bucket).send(),
        client
            .get_bucket_notification_configuration()
            .bucket(bucket)
            .send(),
        client
            .get_bucket_lifecycle_configuration()
            .bucket(bucket)
            .send(),
        client.get_bucket_encryption().bucket(bucket).send(),
    );
    let mut checks = Vec::new();
    let (versioned, versioning) = versioning_check(&versioning);
    checks.push(versioning);
    match &expect.submitter {
        None => checks.push(match &notification {
            Ok(n) => notification_check(n.queue_configurations(), n, expect),
            Err(e) => check(
                "notification",
                Status::Error,
                format!(
                    "cannot read it ({}): interrupted submits are finished only if record writes reach the due queue",
                    sdk_error(e)
                ),
            ),
        }),
        Some(due) => {
            let sends = notification.as_ref().is_ok_and(|n| {
                n.queue_configurations()
                    .iter()
                    .any(sends_record_writes)
            });
            checks.push(submitter_notification_check(sends));
            checks.push(due_queue_check(due));
            checks.push(due_message_check(due.order));
        }
    }
    match &lifecycle {
        Ok(l) => checks.extend(lifecycle_checks(l.rules(), versioned, expect)),
        Err(e) if e.code() == Some("NoSuchLifecycleConfiguration") => {
            checks.extend(lifecycle_checks(&[], versioned, expect));
        }
        Err(e) => checks.push(check(
            "lifecycle",
            Status::Warning,
            format!("cannot read it: {}", sdk_error(e)),
        )),
    }
    checks.push(encryption_check(&encryption));
    report(bucket, checks)
}

/// Whether the bucket is versioned, and the finding: buquet's workers need
/// it, this service's guarantees do not.
fn versioning_check<E: ProvideErrorMetadata>(
    versioning: &Result<GetBucketVersioningOutput, E>,
) -> (bool, Check) {
    match versioning {
        Ok(v) if v.status() == Some(&BucketVersioningStatus::Enabled) => {
            (true, check("versioning", Status::Ok, "enabled"))
        }
        Ok(v) => (
            false,
            check(
                "versioning",
                Status::Warning,
                format!(
                    "{}: buquet's workers refuse to start without versioning \
                     (unless BUQUET_ALLOW_NO_VERSIONING=1, which gives up the queue's history); \
                     this service's guarantees hold either way",
                    v.status().map_or("never enabled", |s| s.as_str())
                ),
            ),
        ),
        Err(e) => (
            false,
            check(
                "versioning",
                Status::Warning,
                format!("cannot read it: {}", sdk_error(e)),
            ),
        ),
    }
}

/// Default encryption: hygiene, a warning when there is none.
fn encryption_check<E: ProvideErrorMetadata>(
    encryption: &Result<GetBucketEncryptionOutput, E>,
) -> Check {
    match encryption {
        Ok(c) => {
            let algos: Vec<String> = c
                .server_side_encryption_configuration()
                .map(|c| c.rules())
                .unwrap_or_default()
                .iter()
                .filter_map(|r| r.apply_server_side_encryption_by_default())
                .map(|d| d.sse_algorithm().as_str().to_owned())
                .collect();
            if algos.is_empty() {
                check("encryption", Status::Warning, "no default encryption")
            } else {
                check("encryption", Status::Ok, algos.join(", "))
            }
        }
        Err(e) => check(
            "encryption",
            Status::Warning,
            format!("no default encryption found ({})", sdk_error(e)),
        ),
    }
}

/// The findings, counted: `ok` when none is an error.
fn report(bucket: &str, checks: Vec<Check>) -> Report {
    let errors = checks.iter().filter(|c| c.status == Status::Error).count();
    let warnings = checks
        .iter()
        .filter(|c| c.status == Status::Warning)
        .count();
    Report {
        bucket: bucket.to_owned(),
        ok: errors == 0,
        errors,
        warnings,
        checks,
    }
}

/// Whether a filter prefix covers every key under `prefix`.
fn covers(rule_prefix: &str, prefix: &str) -> bool {
    prefix.starts_with(rule_prefix)
}

/// Whether a queue notification sends every record write: a record is
/// written with PutObject (`s3:ObjectCreated:*` or `:Put`), under
/// `idempotency/`, ending in `.json`.
fn sends_record_writes(q: &QueueConfiguration) -> bool {
    let events = q.events();
    let put =
        events.contains(&Event::S3ObjectCreated) || events.contains(&Event::S3ObjectCreatedPut);
    let rules = q
        .filter()
        .and_then(|f| f.key())
        .map(|k| k.filter_rules())
        .unwrap_or_default();
    let keys_match = rules.iter().all(|r| {
        let v = r.value().unwrap_or("");
        match r.name().map(|n| n.as_str().to_ascii_lowercase()) {
            Some(n) if n == "prefix" => covers(v, RECORDS_PREFIX),
            Some(n) if n == "suffix" => v.is_empty() || ".json".ends_with(v),
            _ => false,
        }
    });
    put && keys_match
}

/// Whether record writes reach the due queue (or, without its ARN, any
/// queue): what finishes interrupted submits.
fn notification_check(
    queues: &[QueueConfiguration],
    n: &aws_sdk_s3::operation::get_bucket_notification_configuration::GetBucketNotificationConfigurationOutput,
    expect: &Expectations,
) -> Check {
    let matching: Vec<&QueueConfiguration> =
        queues.iter().filter(|q| sends_record_writes(q)).collect();
    let to_due = matching.iter().find(|q| {
        expect
            .due_queue_arn
            .as_deref()
            .is_none_or(|arn| q.queue_arn() == arn)
    });
    match (to_due, &expect.due_queue_arn) {
        (Some(q), _) => check(
            "notification",
            Status::Ok,
            format!("record writes go to {}", q.queue_arn()),
        ),
        (None, _) if n.event_bridge_configuration().is_some() && matching.is_empty() => check(
            "notification",
            Status::Warning,
            "no queue notification of record writes, but events go to EventBridge: \
             make sure a rule sends idempotency/ writes to the due queue",
        ),
        (None, Some(arn)) if !matching.is_empty() => check(
            "notification",
            Status::Error,
            format!(
                "record writes go to {}, not to the due queue {arn}",
                matching
                    .iter()
                    .map(|q| q.queue_arn())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ),
        (None, _) => check(
            "notification",
            Status::Error,
            "no notification of record writes (s3:ObjectCreated:* under idempotency/) to a queue: \
             interrupted submits are finished only by the next submit of their key \
             (README, \"An existing bucket\")",
        ),
    }
}

/// Under `RECORD_EVENTS=submitter` no notification is needed (stores other
/// than AWS S3 have none, and cannot show one); one that sends record
/// writes as well doubles every record's messages.
fn submitter_notification_check(sends_record_writes: bool) -> Check {
    if sends_record_writes {
        check(
            "notification",
            Status::Warning,
            "RECORD_EVENTS=submitter, and the bucket also sends record writes to a queue: \
             every record gets two due messages (the sweeper reads it twice); drop one",
        )
    } else {
        check(
            "notification",
            Status::Ok,
            "none needed: RECORD_EVENTS=submitter, the submit function sends each record's \
             due message itself",
        )
    }
}

/// The prefix a rule applies to, when it applies to every object under it
/// (no tag or size condition).
fn rule_prefix(r: &LifecycleRule) -> Option<&str> {
    match r.filter() {
        Some(f) => {
            if f.tag().is_some()
                || f.and().is_some()
                || f.object_size_greater_than().is_some()
                || f.object_size_less_than().is_some()
            {
                None
            } else {
                Some(f.prefix().unwrap_or(""))
            }
        }
        #[allow(deprecated)]
        None => Some(r.prefix().unwrap_or("")),
    }
}

/// The lifecycle rules against what the records, the service's prefixes
/// (on a versioned bucket) and multipart uploads need.
fn lifecycle_checks(rules: &[LifecycleRule], versioned: bool, expect: &Expectations) -> Vec<Check> {
    let mut out = vec![idempotency_expiry_check(rules, expect)];
    if versioned {
        for prefix in SERVICE_PREFIXES {
            out.push(noncurrent_versions_check(rules, prefix));
            out.push(delete_markers_check(rules, prefix));
        }
    }
    out.push(incomplete_uploads_check(rules));
    out
}

/// The enabled rules that apply to every object under `prefix`.
fn enabled_over<'r>(
    rules: &'r [LifecycleRule],
    prefix: &'static str,
) -> impl Iterator<Item = &'r LifecycleRule> {
    rules.iter().filter(move |r| {
        r.status() == &ExpirationStatus::Enabled
            && rule_prefix(r).is_some_and(|p| covers(p, prefix))
    })
}

/// The backstop expiry of `idempotency/`: an error when it is shorter than
/// a record's longest life (it would delete live records).
fn idempotency_expiry_check(rules: &[LifecycleRule], expect: &Expectations) -> Check {
    let backstop = enabled_over(rules, RECORDS_PREFIX)
        .filter_map(|r| r.expiration().and_then(|e| e.days()))
        .min();
    let need = expect.max_ttl_days + 1;
    match backstop {
        Some(d) if i64::from(d) < need => check(
            "lifecycle.idempotency_expiry",
            Status::Error,
            format!(
                "idempotency/ expires after {d} days, before a record's longest life \
                 (IDEMPOTENCY_MAX_TTL_DAYS + 1 = {need}): live records would be deleted"
            ),
        ),
        Some(d) => check(
            "lifecycle.idempotency_expiry",
            Status::Ok,
            format!("{d} days"),
        ),
        None => check(
            "lifecycle.idempotency_expiry",
            Status::Warning,
            format!(
                "no expiry of idempotency/: a record the sweeper never deletes stays forever \
                 (add one of at least {need} days)"
            ),
        ),
    }
}

/// On a versioned bucket, every delete and replacement under `prefix`
/// keeps its old version unless a rule expires noncurrent versions.
fn noncurrent_versions_check(rules: &[LifecycleRule], prefix: &'static str) -> Check {
    let noncurrent = enabled_over(rules, prefix)
        .filter_map(|r| {
            r.noncurrent_version_expiration()
                .and_then(|n| n.noncurrent_days())
        })
        .min();
    match noncurrent {
        Some(d) => check(
            "lifecycle.noncurrent_versions",
            Status::Ok,
            format!("{prefix}: after {d} days"),
        ),
        None => check(
            "lifecycle.noncurrent_versions",
            Status::Warning,
            format!(
                "{prefix}: noncurrent versions never expire: every delete and replacement \
                 keeps its old version"
            ),
        ),
    }
}

/// Expired delete markers under `prefix` pile up and slow listings unless
/// a rule removes them.
fn delete_markers_check(rules: &[LifecycleRule], prefix: &'static str) -> Check {
    // A days expiry removes expired delete markers too, once they are old
    // enough; ExpiredObjectDeleteMarker removes them at once.
    let markers = enabled_over(rules, prefix).any(|r| {
        r.expiration()
            .is_some_and(|e| e.expired_object_delete_marker() == Some(true) || e.days().is_some())
    });
    if markers {
        check(
            "lifecycle.delete_markers",
            Status::Ok,
            format!("{prefix}: expired delete markers removed"),
        )
    } else {
        check(
            "lifecycle.delete_markers",
            Status::Warning,
            format!(
                "{prefix}: expired delete markers stay (ExpiredObjectDeleteMarker): \
                 they pile up and slow listings"
            ),
        )
    }
}

/// Incomplete multipart uploads are billed until a rule aborts them.
fn incomplete_uploads_check(rules: &[LifecycleRule]) -> Check {
    let aborts = rules.iter().any(|r| {
        r.status() == &ExpirationStatus::Enabled
            && r.abort_incomplete_multipart_upload()
                .and_then(|a| a.days_after_initiation())
                .is_some()
    });
    if aborts {
        check(
            "lifecycle.incomplete_uploads",
            Status::Ok,
            "incomplete multipart uploads aborted",
        )
    } else {
        check(
            "lifecycle.incomplete_uploads",
            Status::Warning,
            "incomplete multipart uploads are kept (and billed) until aborted",
        )
    }
}
/// `idem doctor`: the bucket's configuration against what the guarantees
/// need, and whether it is healthy (false when one depends on something
/// missing). With `probe`, the store's capabilities too (`crate::probe`),
/// unhealthy as well when the store cannot host the service or the settings
/// it needs are not the process's. The store's own client is built again
/// here (its endpoint, path style and key pair: `S3_CREDENTIALS_SECRET`).
pub async fn run(
    queue: &Queue,
    config: &Config,
    due_queue_arn: Option<String>,
    probe: bool,
) -> Result<(bool, Value), ConfigError> {
    let client = crate::queue::s3_store(config).await?.client().clone();
    let submitter = match (&config.record_events, &config.due_queue_url) {
        (RecordEvents::Submitter, Some(url)) => Some(DueQueueSeen {
            url: url.clone(),
            delay_seconds: SqsDueQueue::from_env(url.clone())
                .await
                .delay_seconds()
                .await,
            stale_seconds: queue.settings().stale_creating_after.num_seconds() as u64,
            order: config.due_message,
        }),
        _ => None,
    };
    let expect = Expectations {
        max_ttl_days: queue.settings().max_ttl.num_days(),
        due_queue_arn,
        submitter,
    };
    let report = examine(&client, &config.bucket, &expect).await;
    let mut output = serde_json::to_value(&report).unwrap_or(Value::Null);
    let mut healthy = report.ok;
    if probe {
        let notifications = report.checks.iter().find(|c| c.check == "notification");
        let notifications = notifications.map(|c| c.status == Status::Ok);
        let found = crate::probe::probe(queue.engine().store().clone(), notifications).await;
        let mismatches = found.mismatches(&configured_settings(queue.settings()));
        healthy &= crate::probe::probe_healthy(&found, &mismatches);
        output["probe"] = serde_json::to_value(&found).unwrap_or(Value::Null);
        output["probe"]["mismatches"] = Value::from(mismatches);
        output["ok"] = Value::from(healthy);
    }
    Ok((healthy, output))
}

/// The process's values of the settings the probe may ask for (section 7):
/// the settings' own ([`crate::Settings::probed_variables`]), and those of
/// the environment it reads as they are (`BUQUET_ALLOW_NO_VERSIONING` is the
/// queue's workers').
fn configured_settings(s: &crate::Settings) -> std::collections::BTreeMap<&'static str, String> {
    let mut m = s.probed_variables();
    for var in ["RECORD_EVENTS", "BUQUET_ALLOW_NO_VERSIONING"] {
        if let Ok(v) = std::env::var(var) {
            m.insert(var, v.trim().to_owned());
        }
    }
    m
}
