//! The world's due queue on moto's SQS, and the event source mapping that
//! drains it into `sweep`: each batch invoked, what `sweep` took deleted,
//! what it handed back (or a killed `sweep` held) back after the
//! visibility timeout; and the damage of a record whose event is lost.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idempotent_submit::store::S3Store;
use serde_json::{Value, json};

use super::config::{Events, StoreSpec, SweepStats};
use super::processes::records_named;
use crate::common::lambda_pool::{Outcome, Pool};

/// The world's due queue on its moto's SQS, and a client of it.
#[derive(Clone)]
pub struct DueQueue {
    pub url: String,
    arn: String,
    sqs: aws_sdk_sqs::Client,
}

/// The due queue, with `delay` as its DelaySeconds; with bucket events,
/// the bucket's notification of every record write into it.
pub async fn due_queue(store: &StoreSpec, s3: &S3Store, delay: u64, events: Events) -> DueQueue {
    use crate::common::moto::{moto_due_queue_at, moto_queue_at, moto_sqs_at, queue_arn};
    let url = if events == Events::Bucket {
        moto_due_queue_at(&store.sqs, s3, delay as u32).await
    } else {
        moto_queue_at(&store.sqs, &format!("due-{}", s3.bucket()), delay as u32).await
    };
    let sqs = moto_sqs_at(&store.sqs);
    let arn = queue_arn(&sqs, &url).await;
    DueQueue { url, arn, sqs }
}

/// How long a received due message stays invisible: a `sweep` killed with
/// it lets it come back this soon (the world's event delivery margin covers
/// two of them after the delay).
const DUE_VISIBILITY: i32 = 3;

/// The event source mapping: receives from the due queue, invokes `sweep`
/// with each batch, deletes what it took; what it hands back, or what a
/// killed `sweep` held, comes back after the visibility timeout.
pub async fn drain(
    due: DueQueue,
    delay_ms: f64,
    sweep: Arc<Pool>,
    stats: Arc<SweepStats>,
    stop: Arc<AtomicBool>,
    drop_record: Arc<Mutex<Option<String>>>,
) {
    let DueQueue { url, arn, sqs } = due;
    while !stop.load(Ordering::SeqCst) {
        stats.sqs_requests.fetch_add(1, Ordering::SeqCst);
        let got = sqs
            .receive_message()
            .queue_url(&url)
            .max_number_of_messages(10)
            .wait_time_seconds(0)
            .visibility_timeout(DUE_VISIBILITY)
            .message_system_attribute_names(
                aws_sdk_sqs::types::MessageSystemAttributeName::SentTimestamp,
            )
            .send()
            .await;
        let mut msgs = match got {
            Ok(o) => o.messages.unwrap_or_default(),
            Err(_) => vec![],
        };
        if msgs.is_empty() {
            tokio::time::sleep(Duration::from_millis(300)).await;
            continue;
        }
        stats
            .received
            .fetch_add(msgs.len() as u64, Ordering::SeqCst);
        {
            let now = chrono::Utc::now();
            let mut named = stats.first_named.lock().unwrap();
            for m in &msgs {
                for key in records_named(m.body().unwrap_or("")) {
                    named.entry(key).or_insert(now);
                }
            }
        }
        // The world's damage: a record whose event is lost.
        msgs = drop_lost(&sqs, &url, &stats, msgs, &drop_record).await;
        if msgs.is_empty() {
            continue;
        }
        let outcome = sweep.invoke(sqs_event(&msgs, &arn)).await;
        let listed: Vec<String> = match &outcome {
            Outcome::Response(v) => v["batchItemFailures"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|f| f["itemIdentifier"].as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default(),
            _ => {
                stats
                    .lost_to_kills
                    .fetch_add(msgs.len() as u64, Ordering::SeqCst);
                continue;
            }
        };
        let entries: Vec<aws_sdk_sqs::types::DeleteMessageBatchRequestEntry> = msgs
            .iter()
            .enumerate()
            .filter(|(_, m)| !listed.iter().any(|l| Some(l.as_str()) == m.message_id()))
            .map(|(i, m)| {
                aws_sdk_sqs::types::DeleteMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(m.receipt_handle().unwrap_or_default())
                    .build()
                    .expect("an entry")
            })
            .collect();
        note_lateness(&stats, &msgs, &listed, delay_ms);
        stats
            .handed_back
            .fetch_add(listed.len() as u64, Ordering::SeqCst);
        stats
            .acked
            .fetch_add(entries.len() as u64, Ordering::SeqCst);
        if !entries.is_empty() {
            stats.sqs_requests.fetch_add(1, Ordering::SeqCst);
            let _ = sqs
                .delete_message_batch()
                .queue_url(&url)
                .set_entries(Some(entries))
                .send()
                .await;
        }
    }
}

/// The due queue's messages `msgs` as the event source mapping hands them to
/// `sweep`.
fn sqs_event(msgs: &[aws_sdk_sqs::types::Message], arn: &str) -> Value {
    let records: Vec<Value> = msgs
        .iter()
        .map(|m| {
            json!({
                "messageId": m.message_id(),
                "receiptHandle": m.receipt_handle(),
                "body": m.body(),
                "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1769515200000"},
                "messageAttributes": {},
                "md5OfBody": m.md5_of_body(),
                "eventSource": "aws:sqs",
                "eventSourceARN": arn,
                "awsRegion": "us-east-1"
            })
        })
        .collect();
    json!({ "Records": records })
}

/// Notes how late after their delay the messages `sweep` took (all but
/// those `listed` back) came.
fn note_lateness(
    stats: &SweepStats,
    msgs: &[aws_sdk_sqs::types::Message],
    listed: &[String],
    delay_ms: f64,
) {
    let now_ms = chrono::Utc::now().timestamp_millis() as f64;
    {
        let mut late = stats.lateness_ms.lock().unwrap();
        for m in msgs
            .iter()
            .filter(|m| !listed.iter().any(|l| Some(l.as_str()) == m.message_id()))
        {
            let sent = m
                .attributes()
                .and_then(|a| a.get(&aws_sdk_sqs::types::MessageSystemAttributeName::SentTimestamp))
                .and_then(|t| t.parse::<f64>().ok());
            if let Some(sent) = sent {
                late.push((sent, now_ms - sent - delay_ms));
            }
        }
    }
}

/// The world's damage: the messages of the record `drop_record` names are
/// deleted unread; the others.
async fn drop_lost(
    sqs: &aws_sdk_sqs::Client,
    url: &str,
    stats: &SweepStats,
    msgs: Vec<aws_sdk_sqs::types::Message>,
    drop_record: &Mutex<Option<String>>,
) -> Vec<aws_sdk_sqs::types::Message> {
    let lost = drop_record.lock().unwrap().clone();
    let Some(lost) = lost else {
        return msgs;
    };
    let (gone, kept): (Vec<_>, Vec<_>) = msgs.into_iter().partition(|m| {
        m.body()
            .is_some_and(|b| b.contains(&lost.replace('/', "%2F")) || b.contains(&lost))
    });
    for m in &gone {
        stats.dropped.fetch_add(1, Ordering::SeqCst);
        stats.sqs_requests.fetch_add(1, Ordering::SeqCst);
        let _ = sqs
            .delete_message()
            .queue_url(url)
            .receipt_handle(m.receipt_handle().unwrap_or_default())
            .send()
            .await;
    }
    kept
}
