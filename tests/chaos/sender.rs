//! Sending items through a door, with the retries a client (or the event source mapping) makes.

#[allow(unused_imports)]
use super::producers::*;
use crate::common::lambda_pool::{Outcome, Pool};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Sends items through a door, with the retries a client (or the event
/// source mapping) makes, and writes every answer into the ledger.
pub struct Sender {
    pub ledger: SharedLedger,
    pub submit: Arc<Pool>,
    pub rng: fastrand::Rng,
    /// No attempt after this but the first: the producers' end, and a
    /// little more for the retries of what was in flight.
    pub retry_until: Instant,
}

/// How long after the producers' end an item already sent may be retried.
pub const RETRY_AFTER_THE_END: Duration = Duration::from_secs(10);

/// How many times an item is sent before the producer gives up on it.
pub const ATTEMPTS: usize = 8;

impl Sender {
    pub async fn send(mut self, door: Door, ids: Vec<usize>) {
        let mut todo = ids;
        let mut killed = false;
        for attempt in 0..ATTEMPTS {
            let receive_count = attempt + 1;
            if todo.is_empty() {
                return;
            }
            if killed && door != Door::Sqs && self.rng.bool() {
                // A client that hears 502 may give up: its submit is the
                // sweeper's to finish, or its key's next submit's.
                let mut l = self.ledger.lock().unwrap();
                l.abandoned += todo.len() as u64;
                l.abandoned_items.extend(&todo);
                return;
            }
            if attempt > 0 && Instant::now() > self.retry_until {
                self.ledger.lock().unwrap().given_up += todo.len() as u64;
                return;
            }
            if attempt > 0 {
                // The event source mapping delivers a batch again once its
                // visibility timeout is over: after the record's due message.
                let wait = if killed && door == Door::Sqs {
                    self.rng.u64(3000..6000)
                } else {
                    self.rng.u64(200..800)
                };
                tokio::time::sleep(Duration::from_millis(wait)).await;
            }
            let items: Vec<Item> = {
                let mut l = self.ledger.lock().unwrap();
                l.last_send = Some(Instant::now());
                *l.invocations.entry(door).or_default() += 1;
                todo.iter().map(|i| l.items[*i].clone()).collect()
            };
            let event = match door {
                Door::Http => http_event("/tasks", items[0].body.text()),
                Door::Batch => {
                    let tasks: Vec<Value> = items
                        .iter()
                        .map(|i| match &i.body {
                            Body::Json(v) => v.clone(),
                            // A batch item cannot be bad JSON: bad items are another shape.
                            Body::Raw(_) => json!(42),
                        })
                        .collect();
                    http_event("/tasks/batch", json!({ "tasks": tasks }).to_string())
                }
                Door::Sqs => sqs_event(&items, receive_count),
            };
            let started = Instant::now();
            let outcome = self.submit.invoke(event).await;
            let ms = started.elapsed().as_secs_f64() * 1000.0;
            killed = matches!(outcome, Outcome::Killed(_) | Outcome::TimedOut);
            todo = self.settle(door, &todo, &items, outcome, ms);
        }
        if !todo.is_empty() {
            self.ledger.lock().unwrap().given_up += todo.len() as u64;
        }
    }

    /// Records what one invocation answered; the items to send again.
    fn settle(
        &mut self,
        door: Door,
        todo: &[usize],
        items: &[Item],
        outcome: Outcome,
        ms: f64,
    ) -> Vec<usize> {
        let mut l = self.ledger.lock().unwrap();
        let resp = match outcome {
            Outcome::Response(v) => v,
            Outcome::Error(e) => {
                l.invocation_errors.push(e.to_string());
                return retry_keyed(todo, items);
            }
            Outcome::Killed(_) => {
                l.killed_invocations += 1;
                return retry_keyed(todo, items);
            }
            Outcome::TimedOut => {
                l.timed_out += 1;
                return retry_keyed(todo, items);
            }
        };
        l.latency.entry(door).or_default().0.push(ms);
        match door {
            Door::Sqs => settle_sqs(&mut l, todo, items, &resp),
            Door::Http => settle_http(&mut l, todo, items, &resp),
            Door::Batch => settle_batch(&mut l, todo, items, &resp),
        }
    }
}

/// The items a client can safely send again: those with a key.
pub fn retry_keyed(todo: &[usize], items: &[Item]) -> Vec<usize> {
    todo.iter()
        .zip(items)
        .filter(|(_, i)| i.key.is_some() || i.message_id.is_some())
        .map(|(id, _)| *id)
        .collect()
}

pub fn answer(item: usize, status: u16, body: &Value, retry_after: bool) -> Answer {
    Answer {
        item,
        status,
        task_id: body["task_id"].as_str().map(str::to_owned),
        task_status: body["status"].as_str().map(str::to_owned),
        retry_after,
        code: body["code"].as_str().map(str::to_owned),
    }
}

/// An HTTP API (v2) event for `path` with `body`.
pub fn http_event(path: &str, body: String) -> Value {
    let template = if path.ends_with("/batch") {
        "http-v2-batch.json"
    } else {
        "http-v2-post.json"
    };
    let mut e = crate::common::event(template);
    e["body"] = json!(body);
    e["requestContext"]["requestId"] = json!(uuid::Uuid::new_v4().to_string());
    e
}

/// A standard queue's batch of `items`, as the event source mapping hands
/// it over (the `receive_count`th time).
pub fn sqs_event(items: &[Item], receive_count: usize) -> Value {
    let records: Vec<Value> = items
        .iter()
        .map(|i| {
            let id = i.message_id.clone().unwrap_or_default();
            json!({
                "messageId": id,
                "receiptHandle": format!("rh-{id}-{receive_count}"),
                "body": i.body.text(),
                "attributes": {
                    "ApproximateReceiveCount": receive_count.to_string(),
                    "SentTimestamp": "1769515200000",
                    "SenderId": "AIDAIENQZJOLO23YVJ4VO",
                    "ApproximateFirstReceiveTimestamp": "1769515200001"
                },
                "messageAttributes": {},
                "md5OfBody": "00000000000000000000000000000000",
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:tasks",
                "awsRegion": "us-east-1"
            })
        })
        .collect();
    json!({ "Records": records })
}

/// An SQS batch's answer: the messages it listed go again, the others
/// were taken.
fn settle_sqs(l: &mut Ledger, todo: &[usize], items: &[Item], resp: &Value) -> Vec<usize> {
    let listed: Vec<String> = resp["batchItemFailures"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|f| f["itemIdentifier"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let mut again = vec![];
    for (id, item) in todo.iter().zip(items) {
        let mid = item.message_id.clone().unwrap_or_default();
        if listed.contains(&mid) {
            l.sqs_listed += 1;
            again.push(*id);
        } else {
            *l.sqs_taken.entry(mid).or_default() += 1;
            if item.valid && item.kind != Kind::Conflict && item.key.is_some() {
                l.good.push(*id);
            }
        }
    }
    again
}

/// An HTTP answer: a keyed item answered 503 goes again.
fn settle_http(l: &mut Ledger, todo: &[usize], items: &[Item], resp: &Value) -> Vec<usize> {
    let status = resp["statusCode"].as_u64().unwrap_or(0) as u16;
    let headers = &resp["headers"];
    let retry_after = headers
        .as_object()
        .is_some_and(|h| h.keys().any(|k| k.eq_ignore_ascii_case("retry-after")));
    let body: Value = resp["body"]
        .as_str()
        .and_then(|b| serde_json::from_str(b).ok())
        .unwrap_or(Value::Null);
    let a = answer(todo[0], status, &body, retry_after);
    let again = a.status == 503 && items[0].key.is_some();
    if matches!(a.status, 200 | 201) && items[0].key.is_some() {
        l.good.push(todo[0]);
    }
    l.answers.push(a);
    if again { vec![todo[0]] } else { vec![] }
}

/// A `POST /tasks/batch` answer: item by item, or the whole batch's.
fn settle_batch(l: &mut Ledger, todo: &[usize], items: &[Item], resp: &Value) -> Vec<usize> {
    let status = resp["statusCode"].as_u64().unwrap_or(0) as u16;
    let body: Value = resp["body"]
        .as_str()
        .and_then(|b| serde_json::from_str(b).ok())
        .unwrap_or(Value::Null);
    let Some(results) = body["results"].as_array() else {
        // The whole batch's answer (a 503 with Retry-After, a 400...).
        let retry_after = resp["headers"]
            .as_object()
            .is_some_and(|h| h.keys().any(|k| k.eq_ignore_ascii_case("retry-after")));
        for id in todo {
            let a = answer(*id, status, &body, retry_after);
            l.answers.push(a);
        }
        return if status == 503 {
            retry_keyed(todo, items)
        } else {
            vec![]
        };
    };
    let mut again = vec![];
    for ((id, item), r) in todo.iter().zip(items).zip(results) {
        let status = r["status_code"]
            .as_u64()
            .or_else(|| r["status"].as_u64())
            .unwrap_or(0) as u16;
        // An item cannot carry a header: its 503 is the batch's
        // way of saying "retry this one".
        let a = answer(*id, status, r, status == 503);
        if status == 503 && item.key.is_some() {
            again.push(*id);
        }
        if matches!(status, 200 | 201) && item.key.is_some() {
            l.good.push(*id);
        }
        l.answers.push(a);
    }
    again
}
