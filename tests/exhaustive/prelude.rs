//! Where a world starts: an empty bucket, or the state a few steps before
//! what the world is about (a key whose task failed, a record past its
//! expiry, a submit that died after its task), made by the real engine on
//! the bucket itself, outside the gate, so that the explorer spends its
//! depth on what matters. What a prelude wrote is no step of a schedule; the
//! checker sees its record as a life from step 0.

use std::future::IntoFuture;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use idempotent_submit::store::{MemoryStore, PutMode, Store};
use idempotent_submit::{Clock, Queue, Scope, Settings};
use serde_json::{Value, json};

use super::actors::{self, How, TASK_TYPE};
use super::gate::{self, GateStore, Message};
use super::sim::{Schema, Sim, now_or_never};

/// What is in the bucket before the first step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prelude {
    /// Nothing.
    Empty,
    /// A submit of `k` (input 1) answered: its record, task and marker.
    Answered,
    /// A submit of `k` (input 1) answered, its task taken by a worker (its
    /// marker deleted) and ended `failed`: a key `if_task_failed: new_task`
    /// may reuse.
    Failed,
    /// The same, the task ended `completed`: a key nothing may reuse.
    Completed,
    /// The same, the task taken by a worker and still `running`.
    Running,
    /// The same, its marker left behind (the worker's DELETE of it failed):
    /// a stale marker, which a finisher that sees it removes.
    StaleMarker,
    /// The same, the clock where the record is settled (its finish deadline
    /// and the late-write margin past) and its S3 event due.
    StaleMarkerSettled,
    /// A submit of `k` that died after its record, before its task and
    /// marker; the clock at the record's stale age, its S3 event due.
    DiedAfterRecord,
    /// A submit of `k` answered; the clock at its record's stale age, its
    /// S3 event due: the sweeper finds the record complete.
    AnsweredEventDue,
    /// A submit of `k` answered; its record's S3 event waiting in the due
    /// queue, visible now and after any clock step (a redelivery).
    AnsweredEventWaiting,
    /// A submit of `k` answered, expired, and replaced by a second submit's
    /// record (a new task); the clock at that record's expiry and its S3
    /// event due: on a versioned bucket the key has two versions.
    SecondLifeExpired,
    /// A submit of `k` that died after its task, before its marker.
    NoMarker,
    /// The same, the clock at its record's finish deadline + 10 s.
    MarkerLost,
    /// A submit of `k` answered; the clock at its record's expiry, and the
    /// record's S3 event waiting in the due queue (a redelivery).
    Expired,
    /// A submit of `k` (input 1) asked as `How` says (a custom scope, a
    /// tenant) answered.
    AnsweredAs(How),
    /// Submits of `k` (input 1) answered under each of two tenants.
    AnsweredTwice(How, How),
    /// A submit of `k` (input 1) asked as `How` says that died after its
    /// task, before its marker.
    NoMarkerAs(How),
    /// A submit of `k` answered, its record then turned `ready` by an
    /// earlier version's sweeper (which promoted a record once it had seen
    /// both objects: another `write_id`, no `pending_task`), and its task
    /// and marker deleted since (an operator); the record's S3 event due.
    ReadyTaskGone,
}

/// Runs `prelude` on `sim`'s bucket and clock, before any actor starts.
pub fn run(sim: &mut Sim, prelude: Prelude) {
    if prelude == Prelude::Empty {
        return;
    }
    let bucket = sim.bucket.clone();
    let first = match prelude {
        Prelude::AnsweredAs(how) | Prelude::AnsweredTwice(how, _) | Prelude::NoMarkerAs(how) => how,
        _ => How::default(),
    };
    let lm = submit(&bucket, &sim.gate, &sim.settings, first);
    let st = &sim.settings;
    match prelude {
        Prelude::Empty | Prelude::Answered | Prelude::AnsweredAs(_) => {}
        Prelude::AnsweredEventWaiting => {
            gate::lock(&sim.gate.state).queue.push(Message {
                key: super::checks::record_key("k"),
                sent_at: None,
                visible: sim.clock.now(),
            });
        }
        Prelude::AnsweredTwice(_, other) => {
            submit(&bucket, &sim.gate, &sim.settings, other);
        }
        Prelude::Failed => end_task(&bucket, "failed"),
        Prelude::Completed => end_task(&bucket, "completed"),
        Prelude::Running => end_task(&bucket, "running"),
        Prelude::StaleMarker => write_status(&bucket, "running"),
        Prelude::StaleMarkerSettled => {
            write_status(&bucket, "running");
            let settled = lm + st.finish_window + st.late_write_margin;
            sim.clock.set(settled + chrono::Duration::seconds(1));
            gate::lock(&sim.gate.state).queue.push(Message {
                key: super::checks::record_key("k"),
                sent_at: None,
                visible: sim.clock.now(),
            });
        }
        Prelude::AnsweredEventDue => {
            sim.clock.set(lm + st.stale_creating_after);
            gate::lock(&sim.gate.state).queue.push(Message {
                key: super::checks::record_key("k"),
                sent_at: None,
                visible: sim.clock.now(),
            });
        }
        Prelude::NoMarker | Prelude::NoMarkerAs(_) => delete_markers(&bucket),
        Prelude::ReadyTaskGone => {
            turn_ready(&bucket);
            delete_markers(&bucket);
            delete_tasks(&bucket);
            gate::lock(&sim.gate.state).queue.push(Message {
                key: super::checks::record_key("k"),
                sent_at: None,
                visible: sim.clock.now(),
            });
        }
        Prelude::DiedAfterRecord => {
            delete_markers(&bucket);
            delete_tasks(&bucket);
            sim.clock.set(lm + st.stale_creating_after);
            gate::lock(&sim.gate.state).queue.push(Message {
                key: super::checks::record_key("k"),
                sent_at: None,
                visible: sim.clock.now(),
            });
        }
        Prelude::MarkerLost => {
            delete_markers(&bucket);
            sim.clock
                .set(lm + st.finish_window + chrono::Duration::seconds(10));
        }
        Prelude::Expired => at_expiry(sim, &bucket),
        Prelude::SecondLifeExpired => {
            at_expiry(sim, &bucket);
            gate::lock(&sim.gate.state).queue.clear();
            // The first record's life, ended before the walk begins: the
            // checker then knows it if it is ever current again.
            let record = super::checks::record_key("k");
            let obj = now_or_never(bucket.get(&record)).and_then(Result::ok);
            let obj = obj.expect("the prelude's record");
            sim.checks.lives.push(super::checks::Life {
                key: record,
                record: serde_json::from_slice(&obj.body).expect("a record"),
                body: obj.body,
                last_modified: obj.meta.last_modified,
                from: 0,
                to: Some(0),
            });
            submit(&bucket, &sim.gate, &sim.settings, first);
            at_expiry(sim, &bucket);
        }
    }
}

/// The clock at the record of `k`'s expiry, its S3 event waiting (a
/// redelivery).
fn at_expiry(sim: &mut Sim, bucket: &MemoryStore) {
    let record = super::checks::record_key("k");
    let body = now_or_never(bucket.get(&record)).and_then(Result::ok);
    let body = body.expect("the prelude's record").body;
    let expiry = super::checks::time_field(&body, "expires_at");
    sim.clock.set(expiry.expect("a record's expiry"));
    gate::lock(&sim.gate.state).queue.push(Message {
        key: record,
        sent_at: None,
        visible: sim.clock.now(),
    });
}

/// A submit of `k` with input 1, asked as `how` says, on the bucket
/// itself; its record's `LastModified`.
fn submit(bucket: &MemoryStore, gate: &GateStore, settings: &Settings, how: How) -> DateTime<Utc> {
    let machine = &gate.machine;
    let clock = std::sync::Arc::new(machine.clone()) as std::sync::Arc<dyn Clock>;
    let q = Queue::with_clock(bucket.clone(), clock, settings.clone());
    let mut submit = q
        .submit(how.task_type(), actors::input_of(1))
        .idempotency_key("k");
    if how.custom_scope {
        let scope = Scope::custom(actors::CUSTOM_SCOPE).expect("a scope's name");
        submit = submit.idempotency_scope(scope);
    }
    if let Some(p) = how.tenant {
        submit = submit.tenant(p);
    }
    if how.payload {
        submit = submit.payload_refs(actors::PAYLOAD_OVER);
    }
    let done = now_or_never(submit.into_future()).expect("the in-memory store answers at once");
    done.expect("the prelude's submit");
    // The planted bugs find a task's first body in the gate's history.
    let known: Vec<String> = gate::lock(&gate.state)
        .writes
        .lock()
        .unwrap()
        .iter()
        .map(|(k, _)| k.clone())
        .collect();
    let tasks = bucket
        .keys()
        .into_iter()
        .filter(|k| k.starts_with("tasks/") && !known.contains(k));
    for key in tasks {
        let body = now_or_never(bucket.get(&key)).and_then(Result::ok);
        let body = body.expect("the prelude's task").body;
        gate::lock(&gate.state)
            .writes
            .lock()
            .unwrap()
            .push((key, body));
    }
    let record = super::checks::record_key_as("k", &how);
    let meta = now_or_never(bucket.head(&record)).and_then(Result::ok);
    meta.expect("the prelude's record").last_modified
}

fn delete_markers(bucket: &MemoryStore) {
    delete_under(bucket, "ready/");
}

fn delete_tasks(bucket: &MemoryStore) {
    delete_under(bucket, "tasks/");
}

fn delete_under(bucket: &MemoryStore, prefix: &str) {
    for key in bucket.keys().into_iter().filter(|k| k.starts_with(prefix)) {
        now_or_never(bucket.delete(&key, None));
    }
}

/// The record of `k` as an earlier version's sweeper left it: `ready`,
/// written by the sweeper (its own `write_id`), its `pending_task` gone.
fn turn_ready(bucket: &MemoryStore) {
    rewrite(bucket, &super::checks::record_key("k"), |v| {
        v["status"] = json!("ready");
        v["write_id"] = json!("00000000-0000-4000-8000-00000000beef");
        if let Some(o) = v.as_object_mut() {
            o.remove("pending_task");
        }
    });
}

/// The JSON object at `key` changed by `change` and written back over it
/// (`If-Match`).
fn rewrite(bucket: &MemoryStore, key: &str, change: impl FnOnce(&mut Value)) {
    let obj = now_or_never(bucket.get(key)).and_then(Result::ok);
    let obj = obj.unwrap_or_else(|| panic!("the prelude's {key}"));
    let mut v: Value = serde_json::from_slice(&obj.body).expect("a JSON object");
    change(&mut v);
    let body = Bytes::from(v.to_string());
    now_or_never(bucket.put(key, body, PutMode::Update(obj.meta.etag)));
}

/// As buquet's worker ends a task: claimed (its marker deleted), then
/// `status` written over it.
fn end_task(bucket: &MemoryStore, status: &str) {
    delete_markers(bucket);
    write_status(bucket, status);
}

/// `status` written over the task (its marker left as it is).
fn write_status(bucket: &MemoryStore, status: &str) {
    let task = bucket.keys().into_iter().find(|k| k.starts_with("tasks/"));
    let task = task.expect("the prelude's task");
    rewrite(bucket, &task, |v| v["status"] = json!(status));
}

/// Task type `t`'s schema, as buquet's `publish_schema` writes it: one
/// that refuses every input the worlds send (`{"n": …}` has no `x`), or
/// one that accepts `n` up to a maximum.
pub fn publish_schema(bucket: &MemoryStore, schema: Schema) {
    let input = match schema {
        Schema::AcceptsUpTo(n) => json!({
            "type": "object",
            "required": ["n"],
            "properties": { "n": { "type": "integer", "maximum": n } }
        }),
        _ => json!({ "type": "object", "required": ["x"] }),
    };
    let doc = json!({ "input": input });
    let key = format!("schemas/{TASK_TYPE}.json");
    let put = bucket.put(&key, Bytes::from(doc.to_string()), PutMode::Create);
    now_or_never(put)
        .expect("the in-memory store answers at once")
        .expect("the schema published");
}
