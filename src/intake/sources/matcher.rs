//! What a source matches: a `match` object of `SOURCES`, with exactly one of
//! `sqs`, `sns`, `eventbridge` or `s3`.

use serde_json::{Map, Value};

use super::delivery::Origin;

/// What a source takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Match {
    /// Every message of one SQS queue whose body is not read as an
    /// envelope by an earlier source (`{"sqs": {"queue_arn": ...}}`).
    Sqs {
        /// The queue's ARN.
        queue_arn: String,
    },
    /// The notifications of one SNS topic: invoked directly, or through an
    /// SQS subscription with raw delivery off (`{"sns": {"topic_arn": ...}}`).
    Sns {
        /// The topic's ARN.
        topic_arn: String,
    },
    /// EventBridge events of one `source`, and of one `detail-type` when
    /// given: invoked directly (a rule's target) or through SQS.
    EventBridge {
        /// The events' `source`.
        source: String,
        /// The events' `detail-type`; `None`: any.
        detail_type: Option<String>,
    },
    /// S3's object-created notifications of one bucket under a key prefix
    /// (empty: all): through SQS, directly, or as EventBridge's
    /// `Object Created` events.
    S3 {
        /// The bucket's name.
        bucket: String,
        /// The key prefix the objects are under (empty: any).
        prefix: String,
    },
}

fn fields<'a>(
    kind: &str,
    v: &'a Value,
    allowed: &[&str],
) -> Result<&'a Map<String, Value>, String> {
    let Value::Object(obj) = v else {
        return Err(format!("match.{kind} must be a JSON object"));
    };
    if let Some(k) = obj.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(format!(
            "match.{kind}: unknown field {k:?} (expected {})",
            allowed.join(", ")
        ));
    }
    Ok(obj)
}

fn text(kind: &str, obj: &Map<String, Value>, field: &str) -> Result<Option<String>, String> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if !s.is_empty() => Ok(Some(s.clone())),
        Some(_) => Err(format!("match.{kind}.{field} must be a non-empty string")),
    }
}

fn required(kind: &str, obj: &Map<String, Value>, field: &str) -> Result<String, String> {
    text(kind, obj, field)?.ok_or_else(|| format!("match.{kind}.{field} is required"))
}

/// An ARN of `service` (`arn:<partition>:<service>:...`).
fn arn(kind: &str, field: &str, value: String, service: &str) -> Result<String, String> {
    let parts: Vec<&str> = value.splitn(6, ':').collect();
    if parts.len() == 6 && parts[0] == "arn" && parts[2] == service && !parts[5].is_empty() {
        Ok(value)
    } else {
        Err(format!(
            "match.{kind}.{field} {value:?} is not an {service} ARN (arn:aws:{service}:REGION:ACCOUNT:NAME)"
        ))
    }
}

impl Match {
    /// Reads a source's `match` object; the error names what is wrong.
    pub fn from_value(v: &Value) -> Result<Self, String> {
        let Value::Object(obj) = v else {
            return Err("match must be a JSON object".into());
        };
        if obj.len() != 1 {
            return Err("match must have exactly one of sqs, sns, eventbridge, s3".into());
        }
        let (kind, inner) = obj.iter().next().ok_or("match is empty")?;
        match kind.as_str() {
            "sqs" => {
                let o = fields(kind, inner, &["queue_arn"])?;
                let a = required(kind, o, "queue_arn")?;
                Ok(Match::Sqs {
                    queue_arn: arn(kind, "queue_arn", a, "sqs")?,
                })
            }
            "sns" => {
                let o = fields(kind, inner, &["topic_arn"])?;
                let a = required(kind, o, "topic_arn")?;
                Ok(Match::Sns {
                    topic_arn: arn(kind, "topic_arn", a, "sns")?,
                })
            }
            "eventbridge" => {
                let o = fields(kind, inner, &["source", "detail_type"])?;
                Ok(Match::EventBridge {
                    source: required(kind, o, "source")?,
                    detail_type: text(kind, o, "detail_type")?,
                })
            }
            "s3" => {
                let o = fields(kind, inner, &["bucket", "prefix"])?;
                let prefix = match o.get("prefix") {
                    None | Some(Value::Null) => String::new(),
                    Some(Value::String(p)) => p.clone(),
                    Some(_) => return Err("match.s3.prefix must be a string".into()),
                };
                Ok(Match::S3 {
                    bucket: required(kind, o, "bucket")?,
                    prefix,
                })
            }
            other => Err(format!(
                "match: unknown kind {other:?} (expected sqs, sns, eventbridge or s3)"
            )),
        }
    }

    /// Does this source take a delivery from `origin`?
    pub fn matches(&self, origin: &Origin) -> bool {
        match (self, origin) {
            (Match::Sqs { queue_arn }, Origin::Sqs { queue_arn: q }) => queue_arn == q,
            (Match::Sns { topic_arn }, Origin::Sns { topic_arn: t }) => topic_arn == t,
            (
                Match::EventBridge {
                    source,
                    detail_type,
                },
                Origin::EventBridge {
                    source: s,
                    detail_type: d,
                },
            ) => source == s && detail_type.as_ref().is_none_or(|t| t == d),
            (Match::S3 { bucket, prefix }, Origin::S3 { bucket: b, key }) => {
                bucket == b && key.starts_with(prefix.as_str())
            }
            _ => false,
        }
    }
}
