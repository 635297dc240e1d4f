//! `idem doctor`: reads a bucket's configuration and says what this service
//! and the queue's workers need of it that is missing (docs/protocol.md and the README
//! 3, 6 and 6a).
//!
//! Each finding is `ok`, a `warning` (hygiene: growth, the queue's workers,
//! encryption) or an `error`: a guarantee of the protocol depends on it. The
//! notification of record writes is what finishes interrupted submits
//! (guarantee 4); an `idempotency/` expiry shorter than the longest record
//! life deletes live records (guarantee 1). Nothing else is an error.

use aws_sdk_s3::Client;
use aws_sdk_s3::error::ProvideErrorMetadata;
use aws_sdk_s3::types::{
    BucketVersioningStatus, Event, ExpirationStatus, LifecycleRule, QueueConfiguration,
};
use serde::Serialize;

use crate::protocol::sweep::RECORDS_PREFIX;

/// What the bucket is checked against.
#[derive(Debug, Clone)]
pub struct Expectations {
    /// `IDEMPOTENCY_MAX_TTL_DAYS`: the `idempotency/` expiry must be longer.
    pub max_ttl_days: i64,
    /// The due queue the record events must reach; any queue when `None`.
    pub due_queue_arn: Option<String>,
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
/// service's to expire (section 6a).
pub const SERVICE_PREFIXES: [&str; 3] = [RECORDS_PREFIX, "rejected/", "payloads/"];

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

    let versioned = match &versioning {
        Ok(v) if v.status() == Some(&BucketVersioningStatus::Enabled) => {
            checks.push(check("versioning", Status::Ok, "enabled"));
            true
        }
        Ok(v) => {
            checks.push(check(
                "versioning",
                Status::Warning,
                format!(
                    "{}: buquet's workers refuse to start without versioning \
                     (unless BUQUET_ALLOW_NO_VERSIONING=1, which gives up the queue's history); \
                     this service's guarantees hold either way",
                    v.status().map_or("never enabled", |s| s.as_str())
                ),
            ));
            false
        }
        Err(e) => {
            checks.push(check(
                "versioning",
                Status::Warning,
                format!("cannot read it: {}", sdk_error(e)),
            ));
            false
        }
    };

    checks.push(match &notification {
        Ok(n) => notification_check(n.queue_configurations(), n, expect),
        Err(e) => check(
            "notification",
            Status::Error,
            format!(
                "cannot read it ({}): interrupted submits are finished only if record writes reach the due queue",
                sdk_error(e)
            ),
        ),
    });

    let rules: Vec<LifecycleRule> = match &lifecycle {
        Ok(l) => l.rules().to_vec(),
        Err(e) if e.code() == Some("NoSuchLifecycleConfiguration") => Vec::new(),
        Err(e) => {
            checks.push(check(
                "lifecycle",
                Status::Warning,
                format!("cannot read it: {}", sdk_error(e)),
            ));
            Vec::new()
        }
    };
    if lifecycle.is_ok()
        || lifecycle
            .as_ref()
            .err()
            .is_some_and(|e| e.code() == Some("NoSuchLifecycleConfiguration"))
    {
        checks.extend(lifecycle_checks(&rules, versioned, expect));
    }

    checks.push(match &encryption {
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
    });

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

fn notification_check(
    queues: &[QueueConfiguration],
    n: &aws_sdk_s3::operation::get_bucket_notification_configuration::GetBucketNotificationConfigurationOutput,
    expect: &Expectations,
) -> Check {
    // A record is written with PutObject: `s3:ObjectCreated:*` or `:Put`.
    let sends_record_writes = |q: &&QueueConfiguration| {
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
    };
    let matching: Vec<&QueueConfiguration> = queues.iter().filter(sends_record_writes).collect();
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
             interrupted submits are finished only by the next submit of their key (README, \
             \"An existing bucket\")",
        ),
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

fn lifecycle_checks(rules: &[LifecycleRule], versioned: bool, expect: &Expectations) -> Vec<Check> {
    let enabled_over = |prefix: &'static str| {
        rules.iter().filter(move |r| {
            r.status() == &ExpirationStatus::Enabled
                && rule_prefix(r).is_some_and(|p| covers(p, prefix))
        })
    };
    let mut out = Vec::new();

    let backstop = enabled_over(RECORDS_PREFIX)
        .filter_map(|r| r.expiration().and_then(|e| e.days()))
        .min();
    let need = expect.max_ttl_days + 1;
    out.push(match backstop {
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
    });

    if versioned {
        for prefix in SERVICE_PREFIXES {
            let noncurrent = enabled_over(prefix)
                .filter_map(|r| {
                    r.noncurrent_version_expiration()
                        .and_then(|n| n.noncurrent_days())
                })
                .min();
            out.push(match noncurrent {
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
            });
            // A days expiry removes expired delete markers too, once they
            // are old enough; ExpiredObjectDeleteMarker removes them at once.
            let markers = enabled_over(prefix).any(|r| {
                r.expiration().is_some_and(|e| {
                    e.expired_object_delete_marker() == Some(true) || e.days().is_some()
                })
            });
            out.push(if markers {
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
            });
        }
    }

    let aborts = rules.iter().any(|r| {
        r.status() == &ExpirationStatus::Enabled
            && r.abort_incomplete_multipart_upload()
                .and_then(|a| a.days_after_initiation())
                .is_some()
    });
    out.push(if aborts {
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
    });
    out
}
