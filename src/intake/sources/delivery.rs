//! What arrived, read by its own fields into [`Delivery`]s: an SNS
//! notification, one record of an S3 notification, an EventBridge event, or
//! an SQS message's body as it is. A delivery knows where it came from (what
//! a source matches), its own identity (the default key), the event as it
//! came and the message it carries, unwrapped.

use serde_json::{Value, json};

use crate::intake::due::decode_key;

/// Where a delivery came from: what a source's `match` is compared with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A message of an SQS queue.
    Sqs {
        /// The queue's ARN (the record's `eventSourceARN`).
        queue_arn: String,
    },
    /// A notification of an SNS topic.
    Sns {
        /// The topic's ARN (`TopicArn`).
        topic_arn: String,
    },
    /// An EventBridge event.
    EventBridge {
        /// The event's `source`.
        source: String,
        /// The event's `detail-type`.
        detail_type: String,
    },
    /// An S3 object-created notification.
    S3 {
        /// The bucket's name.
        bucket: String,
        /// The object's key, decoded.
        key: String,
    },
}

impl Origin {
    /// The kind, as refusals and logs name it.
    pub fn kind(&self) -> &'static str {
        match self {
            Origin::Sqs { .. } => "sqs",
            Origin::Sns { .. } => "sns",
            Origin::EventBridge { .. } => "eventbridge",
            Origin::S3 { .. } => "s3",
        }
    }
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Sqs { queue_arn } => write!(f, "queue {queue_arn}"),
            Origin::Sns { topic_arn } => write!(f, "topic {topic_arn}"),
            Origin::EventBridge {
                source,
                detail_type,
            } => write!(f, "source {source:?}, detail-type {detail_type:?}"),
            Origin::S3 { bucket, key } => write!(f, "bucket {bucket:?}, key {key:?}"),
        }
    }
}

/// One event read one way.
#[derive(Debug, Clone, PartialEq)]
pub struct Delivery {
    /// Where it came from.
    pub origin: Origin,
    /// The source's own delivery identity: the key when a source names no
    /// `key_pointer`. `None` when the event carries none.
    pub identity: Option<String>,
    /// The event as delivered (an SNS notification, one S3 record, an
    /// EventBridge event, an SQS message).
    pub event: Value,
    /// The message the event carries, unwrapped; or why it is not JSON.
    pub message: Result<Value, String>,
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer).and_then(Value::as_str)
}

/// Is `v` an SNS notification (`Records[].Sns`, or an SQS body with raw
/// delivery off)? Told by SNS's own fields.
pub fn is_sns_notification(v: &Value) -> bool {
    str_at(v, "/Type") == Some("Notification")
        && str_at(v, "/TopicArn").is_some()
        && str_at(v, "/MessageId").is_some()
        && v.get("Message").is_some()
}

/// Is `v` an EventBridge event (a rule's target, Scheduler with an
/// EventBridge-shaped input, or an SQS target's body)?
pub fn is_eventbridge_event(v: &Value) -> bool {
    str_at(v, "/source").is_some()
        && str_at(v, "/detail-type").is_some()
        && v.get("detail").is_some()
}

/// Is `v` an S3 notification (`Records[]` with `s3`), or S3's test event?
pub fn is_s3_notification(v: &Value) -> bool {
    is_s3_test_event(v)
        || v.get("Records")
            .and_then(Value::as_array)
            .is_some_and(|r| !r.is_empty() && r.iter().all(|r| r.get("s3").is_some()))
}

/// The message S3 sends when a notification is configured: no object.
pub fn is_s3_test_event(v: &Value) -> bool {
    str_at(v, "/Event") == Some("s3:TestEvent")
}

/// An S3 object's identity: each version (or, unversioned, each write,
/// by its `sequencer`) one key, each redelivery of it the same key.
fn object_identity(
    bucket: &str,
    key: &str,
    version: Option<&str>,
    sequencer: Option<&str>,
) -> Option<String> {
    // "null" is the version id of an object written while versioning was
    // off or suspended: every such write has it, so it tells none apart.
    match (version.filter(|v| !v.is_empty() && *v != "null"), sequencer) {
        (Some(v), _) => Some(format!("{bucket}/{key}@{v}")),
        (None, Some(s)) if !s.is_empty() => Some(format!("{bucket}/{key}#{s}")),
        _ => None,
    }
}

impl Delivery {
    /// An SNS notification.
    pub fn sns(n: &Value) -> Option<Delivery> {
        let topic_arn = str_at(n, "/TopicArn")?.to_owned();
        let text = str_at(n, "/Message").unwrap_or("");
        Some(Delivery {
            origin: Origin::Sns { topic_arn },
            identity: str_at(n, "/MessageId").map(str::to_owned),
            event: n.clone(),
            message: serde_json::from_str(text)
                .map_err(|e| format!("the SNS Message is not JSON: {e}")),
        })
    }

    /// One record of an S3 notification (through SQS, or invoked
    /// directly). The message is the object, in the same shape as
    /// [`Delivery::eventbridge`] gives S3's `Object Created` events; the key
    /// decoded (S3 notifications encode it as a form does).
    pub fn s3_record(r: &Value) -> Result<Delivery, String> {
        let name = str_at(r, "/eventName").unwrap_or("");
        if !name.starts_with("ObjectCreated:") {
            return Err(format!("the S3 event {name:?} is not an object creation"));
        }
        let bucket = str_at(r, "/s3/bucket/name").ok_or("the S3 record names no bucket")?;
        let raw = str_at(r, "/s3/object/key").ok_or("the S3 record names no object key")?;
        let key = decode_key(raw).ok_or("the S3 record's object key is not URL-encoded UTF-8")?;
        let version = str_at(r, "/s3/object/versionId");
        let sequencer = str_at(r, "/s3/object/sequencer");
        let message = json!({
            "bucket": bucket,
            "key": key,
            "size": r.pointer("/s3/object/size"),
            "etag": r.pointer("/s3/object/eTag"),
            "version_id": version,
            "sequencer": sequencer,
            "event_name": name,
            "event_time": r.get("eventTime"),
        });
        Ok(Delivery {
            identity: object_identity(bucket, &key, version, sequencer),
            origin: Origin::S3 {
                bucket: bucket.to_owned(),
                key,
            },
            event: r.clone(),
            message: Ok(message),
        })
    }

    /// The readings of an EventBridge event, most specific first: S3's
    /// `Object Created` as an S3 delivery, then every event as itself.
    pub fn eventbridge(e: &Value) -> Vec<Delivery> {
        let (Some(source), Some(detail_type)) = (str_at(e, "/source"), str_at(e, "/detail-type"))
        else {
            return Vec::new();
        };
        let mut out = Vec::with_capacity(2);
        if source == "aws.s3" && detail_type == "Object Created" {
            out.extend(Self::s3_object_created(e));
        }
        out.push(Delivery {
            origin: Origin::EventBridge {
                source: source.to_owned(),
                detail_type: detail_type.to_owned(),
            },
            identity: str_at(e, "/id").map(str::to_owned),
            event: e.clone(),
            message: Ok(e.get("detail").cloned().unwrap_or(Value::Null)),
        });
        out
    }

    /// S3's `Object Created` event through EventBridge, read as S3's own
    /// notification is (its key as EventBridge gives it).
    fn s3_object_created(e: &Value) -> Option<Delivery> {
        let bucket = str_at(e, "/detail/bucket/name")?;
        let key = str_at(e, "/detail/object/key")?;
        let version = str_at(e, "/detail/object/version-id");
        let sequencer = str_at(e, "/detail/object/sequencer");
        let message = json!({
            "bucket": bucket,
            "key": key,
            "size": e.pointer("/detail/object/size"),
            "etag": e.pointer("/detail/object/etag"),
            "version_id": version,
            "sequencer": sequencer,
            "event_name": e.pointer("/detail/reason"),
            "event_time": e.get("time"),
        });
        Some(Delivery {
            identity: object_identity(bucket, key, version, sequencer),
            origin: Origin::S3 {
                bucket: bucket.to_owned(),
                key: key.to_owned(),
            },
            event: e.clone(),
            message: Ok(message),
        })
    }

    /// An SQS message of `queue_arn` read as it is: the event is the
    /// message (id, attributes, body), the message its body; the identity
    /// `identity` (the `Idempotency-Key` attribute, the FIFO deduplication
    /// id, or the message id, as for this service's own bodies).
    pub fn sqs(queue_arn: &str, identity: Option<String>, message: Value, body: &str) -> Delivery {
        Delivery {
            origin: Origin::Sqs {
                queue_arn: queue_arn.to_owned(),
            },
            identity,
            event: message,
            message: serde_json::from_str(body)
                .map_err(|e| format!("the SQS message body is not JSON: {e}")),
        }
    }
}
