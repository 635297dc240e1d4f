//! The evidence a world left (the bucket, the workers' runs, every process's log), read once, and the replay of every key at the end.

#[allow(unused_imports)]
use super::audit::*;
use super::producers::{self, Answer, Body, KeyId, Kind, Ledger, SharedLedger};
use super::world::Windows;
use crate::common::lambda_pool::{Outcome, Pool};
use chrono::{DateTime, Utc};
use futures::StreamExt;
use idempotent_submit::store::{S3Store, Store};
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

/// Reads every object under `prefix` with its body, several at once.
pub async fn read_all(s3: &S3Store, prefix: &str) -> Vec<Obj> {
    let metas = crate::common::objects_under(s3, prefix).await;
    futures::stream::iter(metas)
        .map(|m| async move {
            let o = s3.get(&m.key).await;
            o.ok().map(|o| Obj {
                key: m.key.clone(),
                body: o.body.to_vec(),
                last_modified: o.meta.last_modified,
            })
        })
        .buffer_unordered(8)
        .filter_map(|o| async move { o })
        .collect()
        .await
}

/// Every task id that ever had a version (or a delete marker) in the
/// bucket, and each task object's first version (its id).
pub async fn task_history(s3: &S3Store) -> (HashSet<String>, HashMap<String, String>) {
    let mut out = HashSet::new();
    // key → (last modified, version id) of its oldest version.
    let mut first: HashMap<String, (aws_smithy_types::DateTime, String)> = HashMap::new();
    let (mut key_marker, mut version_marker): (Option<String>, Option<String>) = (None, None);
    loop {
        let page = s3
            .client()
            .list_object_versions()
            .bucket(s3.bucket())
            .prefix("tasks/")
            .set_key_marker(key_marker.clone())
            .set_version_id_marker(version_marker.clone())
            .send()
            .await
            .expect("listing the tasks' versions");
        for v in page.versions() {
            if let Some(id) = v.key().and_then(task_id_of) {
                out.insert(id);
            }
            if let (Some(k), Some(t), Some(vid)) = (v.key(), v.last_modified(), v.version_id()) {
                // Versions come newest first: the last of a key's is its oldest.
                let older = first
                    .get(k)
                    .is_none_or(|(f, _)| t.as_nanos() <= f.as_nanos());
                if older {
                    first.insert(k.to_owned(), (*t, vid.to_owned()));
                }
            }
        }
        for m in page.delete_markers() {
            if let Some(id) = m.key().and_then(task_id_of) {
                out.insert(id);
            }
        }
        if page.is_truncated() != Some(true) {
            return (out, first.into_iter().map(|(k, (_, v))| (k, v)).collect());
        }
        key_marker = page.next_key_marker().map(str::to_owned);
        version_marker = page.next_version_id_marker().map(str::to_owned);
    }
}

impl Evidence {
    /// Reads what the world left.
    pub async fn collect(
        s3: &S3Store,
        ledger: &Ledger,
        runs: &[PathBuf],
        logs: &[PathBuf],
        windows: &Windows,
        last_pass: Option<DateTime<Utc>>,
    ) -> Evidence {
        let mut e = Evidence {
            items: ledger.items.clone(),
            answers: ledger.answers.clone(),
            replays: ledger.replays.clone(),
            sqs_taken: ledger.sqs_taken.clone(),
            invocation_errors: ledger.invocation_errors.len(),
            abandoned: ledger.abandoned_items.iter().copied().collect(),
            finish_window: chrono::Duration::seconds(windows.finish as i64),
            late_write: chrono::Duration::seconds(windows.late_write as i64),
            orphan_after: chrono::Duration::seconds(
                (windows.finish + 2 * windows.late_write + windows.operation) as i64,
            ),
            last_pass,
            ..Evidence::default()
        };
        // The audit reads thousands of objects and their versions from a
        // server that may serve one request at a time (moto's listing of a
        // long run's versions took more than the functions' 10 s read
        // timeout): its own client waits longer.
        let timeouts = aws_sdk_s3::config::timeout::TimeoutConfig::builder()
            .connect_timeout(std::time::Duration::from_secs(10))
            .read_timeout(std::time::Duration::from_secs(300))
            .operation_attempt_timeout(std::time::Duration::from_secs(300))
            .operation_timeout(std::time::Duration::from_secs(600))
            .build();
        let conf = s3.client().config().to_builder().timeout_config(timeouts);
        let patient = S3Store::new(aws_sdk_s3::Client::from_conf(conf.build()), s3.bucket());
        let s3 = &patient;
        e.records = read_all(s3, "idempotency/").await;
        e.tasks = read_all(s3, "tasks/").await;
        e.payloads = read_all(s3, "payloads/").await;
        e.rejected = read_all(s3, "rejected/").await;
        let (history, first) = task_history(s3).await;
        e.task_history = history;
        e.first_tasks = futures::stream::iter(first)
            .map(|(key, version)| async move {
                let o = s3
                    .client()
                    .get_object()
                    .bucket(s3.bucket())
                    .key(&key)
                    .version_id(version)
                    .send()
                    .await
                    .ok()?;
                let body = o.body.collect().await.ok()?.into_bytes().to_vec();
                Some(Obj {
                    key,
                    body,
                    last_modified: Utc::now(),
                })
            })
            .buffer_unordered(8)
            .filter_map(|o| async move { o })
            .collect()
            .await;
        e.markers = crate::common::keys_under(s3, "ready/").await;
        for r in runs {
            for line in std::fs::read_to_string(r).unwrap_or_default().lines() {
                let v: Value = serde_json::from_str(line).unwrap_or(Value::Null);
                if let Some(id) = v["id"].as_str() {
                    e.runs.push(Run {
                        id: id.to_owned(),
                        input: v["input"].clone(),
                    });
                }
            }
        }
        e.panics = panics(logs);
        e.now = Utc::now();
        e
    }
}

/// The lines of `logs` that say a process panicked (Rust) or raised
/// (Python).
pub fn panics(logs: &[PathBuf]) -> Vec<(String, String)> {
    let mut out = vec![];
    for f in logs {
        let text = std::fs::read_to_string(f).unwrap_or_default();
        for line in text.lines() {
            if line.contains("panicked at") || line.starts_with("Traceback") {
                out.push((name(f), line.chars().take(300).collect()));
            }
        }
    }
    out
}

pub fn name(p: &Path) -> String {
    p.file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("?")
        .to_owned()
}

/// Submits every key that has a record once more, through the batch door,
/// with the body it was first sent with; the answers go into the ledger's
/// `replays`. How many were sent.
pub async fn replay_every_key(s3: &S3Store, submit: &Pool, ledger: &SharedLedger) -> u64 {
    let mut keys: Vec<KeyId> = vec![];
    for key in crate::common::keys_under(s3, "idempotency/").await {
        if let Ok(obj) = s3.get(&key).await {
            let v = json_of(&obj.body);
            if let (Some(s), Some(k)) = (v["scope"].as_str(), v["key"].as_str()) {
                keys.push((s.to_owned(), k.to_owned()));
            }
        }
    }
    let bodies: Vec<(KeyId, Value)> = {
        let l = ledger.lock().unwrap();
        keys.into_iter()
            .filter_map(|k| {
                let it = l
                    .items
                    .iter()
                    .find(|i| i.valid && i.kind != Kind::Conflict && i.key.as_ref() == Some(&k))?;
                let Body::Json(mut b) = it.body.clone() else {
                    return None;
                };
                b["idempotency_key"] = json!(k.1);
                Some((k, b))
            })
            .collect()
    };
    let sent = bodies.len() as u64;
    // A 503 is a client's cue to come again (the final replays compete with
    // the workers for a server that serves one request at a time, and a
    // submit past its operation deadline answers 503): each round sends
    // again what was answered 503 or not at all; the last answer counts.
    let mut pending = bodies;
    let mut answers = vec![];
    for round in 0..6 {
        let got = replay_round(submit, &pending).await;
        let (again, settled): (Vec<_>, Vec<_>) = got
            .into_iter()
            .zip(pending)
            .partition(|((_, a), _)| round < 5 && (a.status == 503 || a.status == 0));
        answers.extend(settled.into_iter().map(|(a, _)| a));
        pending = again.into_iter().map(|(_, b)| b).collect();
        if pending.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    }
    let mut l = ledger.lock().unwrap();
    l.replays.extend(answers);
    sent
}

/// One round of final replays, ten to a batch, as many batches at once as
/// `submit` has environments; one answer per body, in order.
pub async fn replay_round(submit: &Pool, bodies: &[(KeyId, Value)]) -> Vec<(KeyId, Answer)> {
    let chunks: Vec<Vec<(KeyId, Value)>> = bodies.chunks(10).map(|c| c.to_vec()).collect();
    let answers: Vec<Vec<(KeyId, Answer)>> = futures::stream::iter(chunks)
        .map(|chunk| async move {
            let tasks: Vec<Value> = chunk.iter().map(|(_, b)| b.clone()).collect();
            let event =
                producers::http_event("/tasks/batch", json!({ "tasks": tasks }).to_string());
            let results = match submit.invoke(event).await {
                Outcome::Response(v) => {
                    let body: Value = v["body"]
                        .as_str()
                        .and_then(|b| serde_json::from_str(b).ok())
                        .unwrap_or(Value::Null);
                    body["results"].as_array().cloned().unwrap_or_default()
                }
                _ => vec![],
            };
            chunk
                .into_iter()
                .enumerate()
                .map(|(i, (k, _))| {
                    let r = results.get(i).cloned().unwrap_or(Value::Null);
                    let status = r["status_code"]
                        .as_u64()
                        .or_else(|| r["status"].as_u64())
                        .unwrap_or(0) as u16;
                    let a = Answer {
                        item: usize::MAX,
                        status,
                        task_id: r["task_id"].as_str().map(str::to_owned),
                        task_status: r["status"].as_str().map(str::to_owned),
                        retry_after: status == 503,
                        code: r["code"].as_str().map(str::to_owned),
                    };
                    (k, a)
                })
                .collect()
        })
        // One batch at a time, as a producer would: under
        // RECORD_EVENTS=submitter every replay sends its record's due
        // message too (docs/protocol.md), and four batches at once sent
        // 780 in the replay's minute, more than the world's due path drains
        // within its promise (seed 3002 on SeaweedFS: 590 late, every one
        // sent in that minute, none in the five of producing).
        .buffered(1)
        .collect()
        .await;
    answers.into_iter().flatten().collect()
}
