//! The due queue (docs/protocol.md, "The sweeper"): S3 event notifications of record
//! writes, or the due messages that submitters send beside their records'
//! PUTs (`RECORD_EVENTS=submitter`), which SQS hands to `sweep`
//! `STALE_CREATING_AFTER_SECONDS` after each write. Both are read by one
//! parser and handled alike. Shared by the function (an SQS event,
//! src/lambda/due_queue.rs) and `idem sweep --due-queue` (messages it
//! receives itself).
//!
//! Per message: an S3 notification names records; each named record is read
//! once (a batch that names one record twice reads it once) and handled by
//! the sweeper (`sweep_record`). A message is handed back to the queue (listed
//! for retry) when one of its records came early or failed retryably. S3's
//! `s3:TestEvent`, keys outside `idempotency/`, other buckets and removals
//! (`ObjectRemoved:*`, e.g. the `DeleteMarkerCreated` of a versioned bucket,
//! should a notification ever include them) are acknowledged without a read; a body that is neither an S3 notification nor a due message, or a due
//! message that names no record of this bucket, is logged (never its body),
//! counted and acknowledged, so that it is never retried forever.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use futures::StreamExt;
use serde_json::Value;

use crate::Queue;
use crate::protocol::SweepSummary;
use crate::protocol::sweep::{READS_AT_ONCE, RECORDS_PREFIX, RecordOutcome};

/// One record write that a due message names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordWrite {
    /// The bucket the write is in.
    pub bucket: String,
    /// The object key, decoded.
    pub key: String,
    /// An `ObjectRemoved:*` event (a delete, or a delete marker created on a
    /// versioned bucket): nothing is left to finish, so it names no work.
    pub removed: bool,
    /// Sent by a submitter (`RECORD_EVENTS=submitter`), not by S3: it must
    /// name a record of this bucket, or it is unrecognized (S3's own events
    /// of other objects are only ignored).
    pub from_submitter: bool,
    /// A submitter's send time (`crate::due_sender::RecordDue::sent_at`):
    /// how long its record may still land.
    pub sent_at: Option<DateTime<Utc>>,
}

/// What a message body is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum S3Notification {
    /// S3's `s3:TestEvent`, sent when the notification is configured.
    Test,
    /// Object events, with the objects they name.
    Objects(Vec<RecordWrite>),
    /// Not an S3 notification: why.
    Unrecognized(String),
}

/// Reads a due queue's message body: an S3 notification, or a submitter's
/// due message (`crate::due_sender::RecordDue`), which names one record as
/// an S3 event of its write would. The one parser of the due queue.
pub fn parse(body: &str) -> S3Notification {
    let v: Value = match serde_json::from_str(body) {
        Ok(v) => v,
        Err(e) => return S3Notification::Unrecognized(format!("not JSON: {e}")),
    };
    match crate::due_sender::RecordDue::from_json(&v) {
        Some(Ok(m)) => {
            return S3Notification::Objects(vec![RecordWrite {
                bucket: m.bucket,
                key: m.key,
                removed: false,
                from_submitter: true,
                sent_at: m.sent_at,
            }]);
        }
        Some(Err(why)) => return S3Notification::Unrecognized(why),
        None => {}
    }
    if v.get("Event").and_then(Value::as_str) == Some("s3:TestEvent") {
        return S3Notification::Test;
    }
    let Some(records) = v.get("Records").and_then(Value::as_array) else {
        return S3Notification::Unrecognized("neither Records nor an s3:TestEvent".into());
    };
    let mut out = Vec::with_capacity(records.len());
    for r in records {
        let source = r.get("eventSource").and_then(Value::as_str);
        if source != Some("aws:s3") {
            return S3Notification::Unrecognized(format!("eventSource {source:?}, not aws:s3"));
        }
        let s3 = r.get("s3");
        let bucket = s3
            .and_then(|s| s.pointer("/bucket/name"))
            .and_then(Value::as_str);
        let key = s3
            .and_then(|s| s.pointer("/object/key"))
            .and_then(Value::as_str);
        let (Some(bucket), Some(key)) = (bucket, key) else {
            return S3Notification::Unrecognized("an S3 record without bucket or key".into());
        };
        let Some(key) = decode_key(key) else {
            return S3Notification::Unrecognized("an object key that does not decode".into());
        };
        let removed = r
            .get("eventName")
            .and_then(Value::as_str)
            .map(|n| n.strip_prefix("s3:").unwrap_or(n))
            .is_some_and(|n| n.starts_with("ObjectRemoved:"));
        out.push(RecordWrite {
            bucket: bucket.to_owned(),
            key,
            removed,
            from_submitter: false,
            sent_at: None,
        });
    }
    S3Notification::Objects(out)
}

/// Whether `key` is where this service keeps a record:
/// `idempotency/{scope}/{64 hex}.json`.
fn is_record_key(key: &str) -> bool {
    let Some(rest) = key
        .strip_prefix(RECORDS_PREFIX)
        .and_then(|r| r.strip_suffix(".json"))
    else {
        return false;
    };
    match rest.split_once('/') {
        Some((scope, hex)) => {
            crate::protocol::Scope::parse(Some(scope)).is_ok()
                && hex.len() == 64
                && hex
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        }
        None => false,
    }
}

/// S3 notifications carry keys URL-encoded as in a form (`+` for a space).
pub(crate) fn decode_key(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

/// One message of the due queue.
#[derive(Debug, Clone)]
pub struct DueMessage {
    /// The queue's message id.
    pub id: String,
    /// The body, as sent.
    pub body: String,
}

/// What a batch came to: its summary, and the ids of the messages to deliver
/// again.
#[derive(Debug, Clone, Default)]
pub struct DueBatch {
    /// The records' outcomes.
    pub summary: SweepSummary,
    /// The ids of the messages to deliver again.
    pub retry: Vec<String>,
}

/// The records a batch names.
#[derive(Debug, PartialEq, Eq)]
struct Named {
    /// Each record once, whichever messages name it.
    keys: Vec<String>,
    /// For each record, the latest send time of the submitters' messages
    /// that name it (the longest its claim may still land).
    sent_at: Vec<Option<DateTime<Utc>>>,
    /// For each message, the indexes in `keys` of the records it names.
    by_message: Vec<Vec<usize>>,
}

/// The records of `bucket` that `messages` name. Test events, other
/// buckets' objects, keys outside `idempotency/` and removals are counted
/// as ignored, bodies that are no S3 notification as unrecognized: none is
/// read.
fn records_named(bucket: &str, messages: &[DueMessage], summary: &mut SweepSummary) -> Named {
    let mut keys: Vec<String> = Vec::new();
    let mut sent_at: Vec<Option<DateTime<Utc>>> = Vec::new();
    let mut by_message: Vec<Vec<usize>> = vec![Vec::new(); messages.len()];
    let mut index: HashMap<String, usize> = HashMap::new();
    for (i, m) in messages.iter().enumerate() {
        match parse(&m.body) {
            S3Notification::Test => summary.ignored += 1,
            S3Notification::Unrecognized(why) => {
                tracing::warn!(message_id = %m.id, reason = %why, "not an S3 notification; acknowledged");
                summary.unrecognized += 1;
            }
            S3Notification::Objects(objects) => {
                for o in objects {
                    if o.from_submitter && (o.bucket != bucket || !is_record_key(&o.key)) {
                        // Ours, but of no record of this bucket: a
                        // misrouted queue, or a message made by hand.
                        tracing::warn!(
                            message_id = %m.id,
                            reason = if o.bucket == bucket { "not a record's key" } else { "another bucket's" },
                            "a due message that names no record of this bucket; acknowledged"
                        );
                        summary.unrecognized += 1;
                        continue;
                    }
                    if o.bucket != bucket || !o.key.starts_with(RECORDS_PREFIX) || o.removed {
                        summary.ignored += 1;
                        continue;
                    }
                    let k = *index.entry(o.key.clone()).or_insert_with(|| {
                        keys.push(o.key);
                        sent_at.push(None);
                        keys.len() - 1
                    });
                    sent_at[k] = sent_at[k].max(o.sent_at);
                    by_message[i].push(k);
                }
            }
        }
    }
    Named {
        keys,
        sent_at,
        by_message,
    }
}

/// Handles a batch of due-queue messages for `bucket` (events of any other
/// bucket are acknowledged and ignored). No request starts after
/// `deadline`.
pub async fn handle_messages(
    queue: &Queue,
    bucket: &str,
    messages: &[DueMessage],
    dry_run: bool,
    deadline: Option<DateTime<Utc>>,
) -> DueBatch {
    let mut summary = SweepSummary {
        dry_run,
        complete: true,
        ..SweepSummary::default()
    };
    let Named {
        keys,
        sent_at,
        by_message,
    } = records_named(bucket, messages, &mut summary);
    summary.scanned = keys.len() as u64;
    let mut outcomes: Vec<Option<RecordOutcome>> = vec![None; keys.len()];
    let done: Vec<(usize, RecordOutcome)> =
        futures::stream::iter(keys.iter().zip(sent_at).enumerate())
            .map(|(k, (key, sent))| async move {
                (
                    k,
                    queue.sweep_due_record(key, sent, dry_run, deadline).await,
                )
            })
            .buffer_unordered(READS_AT_ONCE)
            .collect()
            .await;
    for (k, o) in done {
        o.tally(&mut summary);
        outcomes[k] = Some(o);
    }
    let retry = messages
        .iter()
        .zip(&by_message)
        .filter(|(_, ks)| {
            ks.iter().any(|k| {
                outcomes[*k]
                    .as_ref()
                    .is_some_and(RecordOutcome::try_again_later)
            })
        })
        .map(|(m, _)| m.id.clone())
        .collect();
    DueBatch { summary, retry }
}

/// What a drain of the due queue did: the sweep's summary, the messages
/// received, and those left to come back.
#[cfg(feature = "sqs")]
pub struct Drained {
    /// The records' outcomes, summed over every receive.
    pub summary: SweepSummary,
    /// Messages received.
    pub received: usize,
    /// Messages left to be delivered again.
    pub retried: usize,
}

/// Receives the due queue's messages, ten at a time, and handles them as the
/// function does (`idem sweep --due-queue`): handled messages are deleted,
/// the ones to retry are left to come back after their visibility timeout,
/// as the function's batch failures do. Stops at the first empty receive. A
/// dry run deletes nothing and makes what it received visible again at the
/// end.
#[cfg(feature = "sqs")]
pub async fn drain(
    queue: &Queue,
    source: &crate::due_sender::SqsDueQueue,
    bucket: &str,
    dry_run: bool,
    wait_seconds: i32,
) -> Result<Drained, String> {
    let mut drained = Drained {
        summary: SweepSummary {
            dry_run,
            complete: true,
            ..Default::default()
        },
        received: 0,
        retried: 0,
    };
    // A dry run's messages, to make visible again at the end.
    let mut to_release: Vec<String> = Vec::new();
    loop {
        let msgs = source.receive(wait_seconds).await?;
        if msgs.is_empty() {
            break;
        }
        drained.received += msgs.len();
        let due: Vec<DueMessage> = msgs
            .iter()
            .map(|m| DueMessage {
                id: m.id.clone(),
                body: m.body.clone(),
            })
            .collect();
        let batch = handle_messages(queue, bucket, &due, dry_run, None).await;
        drained.summary.add(&batch.summary);
        drained.retried += batch.retry.len();
        if dry_run {
            to_release.extend(msgs.into_iter().filter_map(|m| m.handle));
        } else {
            let handled: Vec<&str> = msgs
                .iter()
                .filter(|m| !batch.retry.contains(&m.id))
                .filter_map(|m| m.handle.as_deref())
                .collect();
            source.delete(&handled).await?;
        }
    }
    if dry_run {
        source.release(&to_release).await?;
    }
    Ok(drained)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(id: &str, objects: &[(&str, &str)]) -> DueMessage {
        let records: Vec<serde_json::Value> = objects
            .iter()
            .map(|(bucket, key)| {
                serde_json::json!({"eventSource": "aws:s3", "eventName": "ObjectCreated:Put",
                    "s3": {"bucket": {"name": bucket}, "object": {"key": key, "size": 1}}})
            })
            .collect();
        DueMessage {
            id: id.into(),
            body: serde_json::json!({ "Records": records }).to_string(),
        }
    }

    #[test]
    fn a_record_named_by_many_messages_is_read_once_and_others_are_only_counted() {
        let a = "idempotency/t/a.json";
        let messages = [
            message("1", &[("b", a), ("b", "idempotency/t/c.json")]),
            message("2", &[("b", a), ("other", a), ("b", "tasks/0/x.json")]),
            DueMessage {
                id: "3".into(),
                body: "not json".into(),
            },
            DueMessage {
                id: "4".into(),
                body: r#"{"Service":"Amazon S3","Event":"s3:TestEvent","Bucket":"b"}"#.into(),
            },
        ];
        let mut summary = SweepSummary::default();
        let named = records_named("b", &messages, &mut summary);
        assert_eq!(
            named,
            Named {
                keys: vec![a.into(), "idempotency/t/c.json".into()],
                sent_at: vec![None, None],
                by_message: vec![vec![0, 1], vec![0], vec![], vec![]],
            }
        );
        assert_eq!((summary.ignored, summary.unrecognized), (3, 1));
    }

    #[test]
    fn a_submitters_due_message_names_its_record_as_an_s3_event_would() {
        let key = format!("idempotency/charge_customer/{}.json", "0f".repeat(32));
        let m = crate::due_sender::RecordDue::new("b", key.clone());
        assert_eq!(
            parse(&m.to_body()),
            S3Notification::Objects(vec![RecordWrite {
                bucket: "b".into(),
                key: key.clone(),
                removed: false,
                from_submitter: true,
                sent_at: None,
            }])
        );
        assert!(matches!(
            parse(r#"{"source":"idempotent-submit","event":"x"}"#),
            S3Notification::Unrecognized(_)
        ));
        // Read and deduplicated with S3's events of the same record.
        let s3 = message("1", &[("b", &key)]);
        let ours = DueMessage {
            id: "2".into(),
            body: m.to_body(),
        };
        let mut summary = SweepSummary::default();
        let named = records_named("b", &[s3, ours], &mut summary);
        assert_eq!(named.keys, [key]);
        assert_eq!(named.by_message, [vec![0], vec![0]]);
    }

    #[test]
    fn only_keys_where_records_live_are_record_keys() {
        let hex = "a0".repeat(32);
        assert!(is_record_key(&format!("idempotency/t/{hex}.json")));
        assert!(is_record_key(&format!("idempotency/queue/{hex}.json")));
        for bad in [
            format!("idempotency/{hex}.json"),
            format!("idempotency/t/{hex}"),
            format!("idempotency/t/{}.json", "A0".repeat(32)),
            format!("idempotency/t/{}.json", &hex[..62]),
            format!("idempotency/t/x/{hex}.json"),
            format!("idempotency/.t/{hex}.json"),
            format!("tasks/t/{hex}.json"),
        ] {
            assert!(!is_record_key(&bad), "{bad}");
        }
    }

    #[test]
    fn keys_are_decoded_as_s3_encodes_them() {
        assert_eq!(
            decode_key("idempotency%2Fcharge_customer%2Fab12.json").as_deref(),
            Some("idempotency/charge_customer/ab12.json")
        );
        assert_eq!(decode_key("a+b%2Bc").as_deref(), Some("a b+c"));
        assert_eq!(decode_key("caf%C3%A9").as_deref(), Some("café"));
        assert_eq!(decode_key("bad%2"), None);
        assert_eq!(decode_key("bad%zz"), None);
        assert_eq!(decode_key("bad%FF"), None);
    }

    #[test]
    fn a_test_event_an_object_event_and_anything_else_are_told_apart() {
        assert_eq!(
            parse(r#"{"Service":"Amazon S3","Event":"s3:TestEvent","Bucket":"b"}"#),
            S3Notification::Test
        );
        let body = r#"{"Records":[{"eventSource":"aws:s3","eventName":"ObjectCreated:Put",
            "s3":{"bucket":{"name":"b"},"object":{"key":"idempotency%2Ft%2Fab.json","size":10}}}]}"#;
        assert_eq!(
            parse(body),
            S3Notification::Objects(vec![RecordWrite {
                bucket: "b".into(),
                key: "idempotency/t/ab.json".into(),
                removed: false,
                from_submitter: false,
                sent_at: None,
            }])
        );
        let marker = body.replace("ObjectCreated:Put", "ObjectRemoved:DeleteMarkerCreated");
        assert_eq!(
            parse(&marker),
            S3Notification::Objects(vec![RecordWrite {
                bucket: "b".into(),
                key: "idempotency/t/ab.json".into(),
                removed: true,
                from_submitter: false,
                sent_at: None,
            }])
        );
        for bad in [
            "",
            "not json",
            "{}",
            "[]",
            r#"{"Records":[{"eventSource":"aws:sns"}]}"#,
            r#"{"Records":[{"eventSource":"aws:s3","s3":{}}]}"#,
            r#"{"Records":"x"}"#,
        ] {
            assert!(
                matches!(parse(bad), S3Notification::Unrecognized(_)),
                "{bad:?} was taken"
            );
        }
    }
}
