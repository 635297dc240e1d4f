//! The world's producers: each a loop that picks a submit from the issue's
//! mix (new keys; sequential and concurrent duplicates across doors;
//! conflicts; keyless submits; task options, delays and offloaded inputs
//! included; invalid bodies), sends it through one of the three doors (an
//! API Gateway `POST /tasks`, a `POST /tasks/batch`, an SQS batch), and
//! retries as a client or the event source mapping would. Everything sent
//! and every answer goes into the [`Ledger`], which the audit reads.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::{Value, json};

#[allow(unused_imports)]
pub use super::sender::*;
use crate::common::lambda_pool::Pool;

pub const TASK_TYPES: [&str; 2] = ["chaos_a", "chaos_b"];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Door {
    Http,
    Batch,
    Sqs,
}

impl Door {
    pub fn name(self) -> &'static str {
        match self {
            Door::Http => "HTTP (POST /tasks)",
            Door::Batch => "batch (POST /tasks/batch)",
            Door::Sqs => "SQS event",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    New,
    SequentialDuplicate,
    ConcurrentDuplicate,
    Conflict,
    Keyless,
    Options,
    Invalid,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::New => "new key",
            Kind::SequentialDuplicate => "sequential duplicate",
            Kind::ConcurrentDuplicate => "concurrent duplicate (across doors)",
            Kind::Conflict => "conflict (same key, other input)",
            Kind::Keyless => "keyless",
            Kind::Options => "task options (delays, offloaded inputs)",
            Kind::Invalid => "invalid body",
        }
    }
}

/// A key as the audit knows it: the record's scope and the key.
pub type KeyId = (String, String);

/// One submit a producer sent (an HTTP request, a batch item, an SQS
/// message), however many times it was sent again.
#[derive(Debug, Clone)]
pub struct Item {
    pub door: Door,
    pub kind: Kind,
    /// The key it was submitted under: the body's, or for an SQS message
    /// without one, its message id (the `submit` function's rule).
    pub key: Option<KeyId>,
    /// The input as the producer sent it (`None` for a body without one).
    pub input: Option<Value>,
    /// Whether the body is a valid submit.
    pub valid: bool,
    pub message_id: Option<String>,
    /// The body as sent (what a replay sends again).
    pub body: Body,
}

/// A body: JSON, or raw text (invalid on purpose).
#[derive(Debug, Clone)]
pub enum Body {
    Json(Value),
    Raw(String),
}

impl Body {
    pub fn text(&self) -> String {
        match self {
            Body::Json(v) => v.to_string(),
            Body::Raw(s) => s.clone(),
        }
    }
}

/// One answer the function gave to one item (HTTP and batch items).
#[derive(Debug, Clone)]
pub struct Answer {
    pub item: usize,
    pub status: u16,
    pub task_id: Option<String>,
    /// The answer's `status` field (the task's status, `missing`...).
    pub task_status: Option<String>,
    /// A 503 with `Retry-After` (an HTTP answer) or a batch item's 503.
    pub retry_after: bool,
    pub code: Option<String>,
}

/// Latencies of one door's invocations that the function answered (ms).
#[derive(Debug, Default, Clone)]
pub struct Latencies(pub Vec<f64>);

impl Latencies {
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let mut v = self.0.clone();
        if v.is_empty() {
            return None;
        }
        v.sort_by(|a, b| a.total_cmp(b));
        let i = ((v.len() as f64 - 1.0) * q).round() as usize;
        Some(v[i])
    }
}

/// Everything the producers sent and got.
#[derive(Debug, Default)]
pub struct Ledger {
    pub items: Vec<Item>,
    pub answers: Vec<Answer>,
    /// SQS messages the function took (not listed for retry).
    pub sqs_taken: HashMap<String, usize>,
    /// SQS messages listed in `batchItemFailures`, each time.
    pub sqs_listed: u64,
    /// Invocations whose environment was killed, or timed out.
    pub killed_invocations: u64,
    pub timed_out: u64,
    /// Invocation errors (the function's `/error`): an event it could not take.
    pub invocation_errors: Vec<String>,
    pub latency: HashMap<Door, Latencies>,
    /// Invocations by door, retries included.
    pub invocations: HashMap<Door, u64>,
    /// Keys that had a success (HTTP 201/200, or an SQS message taken), with
    /// their body: what duplicates and conflicts reuse.
    pub good: Vec<usize>,
    /// When the last submit was sent.
    pub last_send: Option<Instant>,
    /// Items whose every attempt ended without an answer.
    pub given_up: u64,
    /// Items whose client gave up after a killed invocation.
    pub abandoned: u64,
    /// Those items (indices into `items`).
    pub abandoned_items: Vec<usize>,
    /// The final replay of every key that has a record, after the windows.
    pub replays: Vec<(KeyId, Answer)>,
}

pub type SharedLedger = Arc<Mutex<Ledger>>;

/// What one producer does until `until`.
pub struct Producer {
    pub index: usize,
    pub rng: fastrand::Rng,
    pub ledger: SharedLedger,
    pub submit: Arc<Pool>,
    pub until: Instant,
    pub counter: Arc<std::sync::atomic::AtomicU64>,
}

/// An unused name, for keys and unique inputs.
fn fresh(counter: &std::sync::atomic::AtomicU64, prefix: &str) -> String {
    let n = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    format!("{prefix}-{n}")
}

/// A message id, drawn from the producer's generator (so a seed replays
/// them), shaped as SQS's.
fn message_id(rng: &mut fastrand::Rng) -> String {
    uuid::Uuid::from_u128(rng.u128(..)).to_string()
}

impl Producer {
    pub async fn run(mut self) {
        while Instant::now() < self.until {
            match self.rng.u32(0..100) {
                0..25 => self.single(Kind::New).await,
                25..43 => self.single(Kind::SequentialDuplicate).await,
                43..50 => self.concurrent().await,
                50..56 => self.single(Kind::Conflict).await,
                56..68 => self.single(Kind::Keyless).await,
                68..80 => self.single(Kind::Options).await,
                80..88 => self.single(Kind::Invalid).await,
                _ => self.mixed_batch().await,
            }
        }
    }

    fn door(&mut self) -> Door {
        match self.rng.u32(0..10) {
            0..5 => Door::Http,
            5..8 => Door::Sqs,
            _ => Door::Batch,
        }
    }

    /// One submit of `kind` through a random door (an SQS event and a
    /// batch carry one or two more of their own).
    async fn single(&mut self, kind: Kind) {
        let door = self.door();
        let mut ids = vec![];
        let n = match door {
            Door::Http => 1,
            _ => self.rng.usize(1..=3),
        };
        for i in 0..n {
            let k = if i == 0 { kind } else { self.any_kind() };
            if let Some(id) = self.make(k, door) {
                ids.push(id);
            }
        }
        self.send(door, ids).await;
    }

    fn any_kind(&mut self) -> Kind {
        match self.rng.u32(0..6) {
            0 => Kind::New,
            1 => Kind::SequentialDuplicate,
            2 => Kind::Keyless,
            3 => Kind::Options,
            4 => Kind::Invalid,
            _ => Kind::Conflict,
        }
    }

    /// A batch of five to ten items of every kind.
    async fn mixed_batch(&mut self) {
        let door = if self.rng.bool() {
            Door::Batch
        } else {
            Door::Sqs
        };
        let n = self.rng.usize(5..=10);
        let ids: Vec<usize> = (0..n)
            .filter_map(|_| {
                let k = self.any_kind();
                self.make(k, door)
            })
            .collect();
        self.send(door, ids).await;
    }

    /// A new key sent at once through all three doors.
    async fn concurrent(&mut self) {
        let Some(first) = self.make(Kind::New, Door::Http) else {
            return;
        };
        let copies: Vec<usize> = [Door::Batch, Door::Sqs]
            .into_iter()
            .map(|d| self.copy(first, d, Kind::ConcurrentDuplicate))
            .collect();
        {
            let mut l = self.ledger.lock().unwrap();
            l.items[first].kind = Kind::ConcurrentDuplicate;
        }
        let (a, b, c) = (
            self.clone_for_send(),
            self.clone_for_send(),
            self.clone_for_send(),
        );
        tokio::join!(
            a.send(Door::Http, vec![first]),
            b.send(Door::Batch, vec![copies[0]]),
            c.send(Door::Sqs, vec![copies[1]]),
        );
    }

    fn clone_for_send(&mut self) -> Sender {
        Sender {
            ledger: self.ledger.clone(),
            submit: self.submit.clone(),
            rng: fastrand::Rng::with_seed(self.rng.u64(..)),
            retry_until: self.until + RETRY_AFTER_THE_END,
        }
    }

    async fn send(&mut self, door: Door, ids: Vec<usize>) {
        if ids.is_empty() {
            return;
        }
        self.clone_for_send().send(door, ids).await
    }

    /// The item `id` again, through `door`, as another item.
    fn copy(&mut self, id: usize, door: Door, kind: Kind) -> usize {
        let mut l = self.ledger.lock().unwrap();
        let mut item = l.items[id].clone();
        item.door = door;
        item.kind = kind;
        item.message_id = (door == Door::Sqs).then(|| message_id(&mut self.rng));
        l.items.push(item);
        l.items.len() - 1
    }

    /// Makes an item of `kind` for `door`; `None` when there is nothing to
    /// duplicate yet.
    fn make(&mut self, kind: Kind, door: Door) -> Option<usize> {
        let task_type = TASK_TYPES[self.rng.usize(..TASK_TYPES.len())].to_owned();
        let message_id = (door == Door::Sqs).then(|| message_id(&mut self.rng));
        let item = match kind {
            Kind::New | Kind::Options => self.make_new(kind, door, task_type, message_id),
            Kind::SequentialDuplicate | Kind::Conflict => {
                self.make_again(kind, door, message_id)?
            }
            Kind::Keyless => {
                // Through SQS, the message id is the key.
                let (key, input) = match &message_id {
                    Some(id) => {
                        let input = self.input(&task_type, id, 0, false);
                        (Some((task_type.clone(), id.clone())), input)
                    }
                    None => (None, json!({"u": fresh(&self.counter, "u")})),
                };
                Item {
                    door,
                    kind,
                    key,
                    input: Some(input.clone()),
                    valid: true,
                    message_id,
                    body: Body::Json(json!({"task_type": task_type, "input": input})),
                }
            }
            Kind::Invalid => self.make_invalid(door, task_type, message_id),
            Kind::ConcurrentDuplicate => unreachable!("made by concurrent()"),
        };
        let mut l = self.ledger.lock().unwrap();
        l.items.push(item);
        Some(l.items.len() - 1)
    }

    /// A new key's item, with task options for `Kind::Options`.
    fn make_new(
        &mut self,
        kind: Kind,
        door: Door,
        task_type: String,
        message_id: Option<String>,
    ) -> Item {
        let key = fresh(&self.counter, &format!("k{}", self.index));
        let scope_param = self.rng.u32(0..5) == 0;
        let scope = if scope_param {
            "queue".to_owned()
        } else {
            task_type.clone()
        };
        let input = self.input(&scope, &key, 0, kind == Kind::Options);
        let mut body = json!({"task_type": task_type, "input": input, "idempotency_key": key});
        if scope_param {
            body["idempotency_scope"] = json!("queue");
        }
        if kind == Kind::Options {
            self.options(&mut body);
        }
        Item {
            door,
            kind,
            key: Some((scope, key)),
            input: Some(input),
            valid: true,
            message_id,
            body: Body::Json(body),
        }
    }

    /// An item sent before, again (`Kind::SequentialDuplicate`), or with
    /// another input (`Kind::Conflict`); `None` when nothing was answered
    /// yet.
    fn make_again(&mut self, kind: Kind, door: Door, message_id: Option<String>) -> Option<Item> {
        let l = self.ledger.lock().unwrap();
        if l.good.is_empty() {
            return None;
        }
        let of = l.items[l.good[self.rng.usize(..l.good.len())]].clone();
        drop(l);
        let mut item = Item {
            door,
            kind,
            message_id,
            ..of
        };
        if kind == Kind::Conflict {
            let (scope, key) = item.key.clone()?;
            let v = self.rng.u64(1..4);
            let input = self.input(&scope, &key, v, false);
            if let Body::Json(b) = &mut item.body {
                b["input"] = input.clone();
            }
            item.input = Some(input);
        }
        // A message whose key was its message id carries it in the body
        // now, or it would be another key.
        if let (Body::Json(b), Some((_, key))) = (&mut item.body, &item.key)
            && b.get("idempotency_key").is_none()
        {
            b["idempotency_key"] = json!(key);
        }
        Some(item)
    }

    /// An invalid item, of one of seven kinds.
    fn make_invalid(&mut self, door: Door, task_type: String, message_id: Option<String>) -> Item {
        let kind = Kind::Invalid;
        let n = fresh(&self.counter, "inv");
        let input = json!({"inv": n});
        let body = match self.rng.u32(0..7) {
            0 => Body::Json(
                json!({"task_type": "no such type!", "input": input, "idempotency_key": n}),
            ),
            1 => Body::Json(json!({"task_type": task_type, "idempotency_key": n})),
            2 => Body::Json(
                json!({"task_type": task_type, "input": input, "idempotency_key": n, "idempotency_ttl_seconds": 10}),
            ),
            3 => Body::Json(
                json!({"task_type": task_type, "input": input, "idempotency_key": n,
                       "delay_seconds": 5, "schedule_at": "2030-01-01T00:00:00Z"}),
            ),
            4 => Body::Json(
                json!({"task_type": task_type, "input": input, "idempotency_key": "x".repeat(300)}),
            ),
            5 => Body::Json(
                json!({"task_type": task_type, "input": input, "idempotency_key": n, "what": 1}),
            ),
            _ => Body::Raw(format!(
                "{{\"task_type\": \"{task_type}\", \"input\": {{\"inv\": \"{n}\""
            )),
        };
        Item {
            door,
            kind,
            key: None,
            input: Some(input),
            valid: false,
            message_id,
            body,
        }
    }

    /// An input tied to its key (`s`, `k`) and variant (`v`: 0 is the key's
    /// own, others conflict), with text, numbers and nesting.
    fn input(&mut self, scope: &str, key: &str, v: u64, big: bool) -> Value {
        let pad_len = if big {
            self.rng.usize(100..400)
        } else {
            self.rng.usize(0..40)
        };
        let pad: String = (0..pad_len)
            .map(|_| char::from(b'a' + self.rng.u8(0..26)))
            .collect();
        json!({
            "s": scope, "k": key, "v": v,
            "n": self.rng.i64(-1_000_000..1_000_000),
            "f": self.rng.f64() * 1000.0,
            "t": format!("é\u{2603} \"{pad}\""),
            "l": [1, {"z": null, "a": true}],
        })
    }

    /// Task options of buquet's `submit`: delays, retries, expiry,
    /// offloading.
    fn options(&mut self, body: &mut Value) {
        let o = body.as_object_mut().expect("an object");
        match self.rng.u32(0..4) {
            0 => {
                o.insert("delay_seconds".into(), json!(self.rng.u64(1..=8)));
            }
            1 => {
                let at = chrono::Utc::now() + chrono::Duration::seconds(self.rng.i64(2..=8));
                o.insert(
                    "schedule_at".into(),
                    json!(at.format("%Y-%m-%dT%H:%M:%SZ").to_string()),
                );
            }
            2 => {
                o.insert("use_payload_refs".into(), json!(true));
                o.insert("payload_ref_threshold_bytes".into(), json!(64));
            }
            _ => {}
        }
        o.insert("max_retries".into(), json!(self.rng.u32(0..5)));
        o.insert("timeout_seconds".into(), json!(self.rng.u32(30..600)));
        o.insert("ttl_seconds".into(), json!(3600));
        if self.rng.bool() {
            o.insert(
                "retry_policy".into(),
                json!({"initial_interval_ms": 500, "max_interval_ms": 5000, "multiplier": 1.5, "jitter_percent": 0.1}),
            );
        }
    }
}
