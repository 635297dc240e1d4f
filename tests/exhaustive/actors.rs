//! The actors of a world: what each one runs, as a future over the real
//! `Queue`/`Engine` (or, for the worker, over the store as buquet 0.1's
//! worker uses it). Each actor is one process: its own engine, its requests
//! through the gate.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use chrono::SubsecRound;
use idempotent_submit::due_sender::DueOrder;
use idempotent_submit::store::{PutMode, Store, StoreError};
use idempotent_submit::testing::protocol::{RecordOutcome, SweepOptions, SweepSummary};
use idempotent_submit::{
    Clock, IfTaskFailed, KeyView, Queue, Reset, Scope, Settings, SubmitError, Submitted, Tenant,
};
use serde_json::{Value, json};

use super::gate::{GateDue, GateStore, Message};
use crate::model::planted::{self, Bug, FirstBody, Planted};

/// The scope every key of a world lives in (the task type's own).
pub const TASK_TYPE: &str = "t";
/// The other task type of guarantee 5's worlds.
pub const OTHER_TYPE: &str = "u";
/// The custom scope (`Scope::Custom`) of its world.
pub const CUSTOM_SCOPE: &str = "shared";
/// The offload threshold of the payload worlds: every input (`{"n":1}`, 7
/// bytes) is longer, so each goes to its payload object.
pub const PAYLOAD_OVER: usize = 4;
pub const BUCKET: &str = "exhaustive-bucket";

/// How a submit asks besides its key and input: the default is task type
/// `t` in its own scope, no tenant, no task option.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct How {
    /// Another task type (`u`).
    pub other_type: bool,
    /// The `queue` scope, which task types share.
    pub queue_scope: bool,
    /// Under tenant isolation, as this principal.
    pub tenant: Option<&'static str>,
    /// A task option (`max_retries: 5`).
    pub options: bool,
    /// A custom scope (`CUSTOM_SCOPE`), which task types share.
    pub custom_scope: bool,
    /// `use_payload_refs` over `PAYLOAD_OVER` bytes: the input offloaded to
    /// `payloads/{task_id}/input.json`.
    pub payload: bool,
}

impl How {
    pub fn task_type(&self) -> &'static str {
        if self.other_type {
            OTHER_TYPE
        } else {
            TASK_TYPE
        }
    }

    /// The scope's name, as the record's path holds it.
    pub fn scope(&self) -> &'static str {
        if self.custom_scope {
            CUSTOM_SCOPE
        } else if self.queue_scope {
            "queue"
        } else {
            self.task_type()
        }
    }

    pub fn tenant(&self) -> Option<Tenant> {
        self.tenant
            .map(|p| Tenant::from_principal(p).expect("a principal"))
    }
}

/// One keyed submit of a role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Sub {
    pub key: &'static str,
    pub input: u8,
    pub how: How,
}

/// What an actor does.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Role {
    /// A keyed submit of `key` with input number `input`.
    Submit { key: &'static str, input: u8 },
    /// The same, asked another way (guarantee 5: another task type, scope,
    /// tenant or set of options).
    SubmitAs {
        key: &'static str,
        input: u8,
        how: How,
    },
    /// A submit without a key, asked as `how` says (a tenant, an offloaded
    /// input): its task and marker, no record.
    Plain { input: u8, how: How },
    /// A lookup of the key (`GET /idempotency-keys/{key}`).
    Lookup { key: &'static str },
    /// A keyed submit with `if_task_failed: new_task`.
    Reuse { key: &'static str, input: u8 },
    /// `submit_many` of keyed items, one `SendMessageBatch` for their due
    /// messages under `RECORD_EVENTS=submitter`.
    Batch { items: Vec<(&'static str, u8)> },
    /// An operator's key reset.
    Reset { key: &'static str },
    /// The same, naming the key's scope and tenant as `how` says.
    ResetAs { key: &'static str, how: How },
    /// A lookup naming the key's scope and tenant as `how` says.
    LookupAs { key: &'static str, how: How },
    /// The sweeper on one due message.
    Sweep(Message),
    /// The sweeper's scheduled pass.
    Pass,
    /// The sweeper on the key's record as `idem sweep --dry-run` judges
    /// it: it must write nothing.
    DrySweep { key: &'static str },
    /// buquet's worker: one poll of the ready index, claiming, deleting
    /// the marker, completing.
    Worker,
    /// buquet's worker finding a task by listing `tasks/` (not by its
    /// marker) and claiming it: a marker of ours may still be written.
    Scanner,
    /// The planted bug `ResetIgnoresPhase`'s operator: a key reset by
    /// hand, the record read and replaced by a reset record with
    /// `If-Match`, whatever its phase.
    ResetByHand { key: &'static str },
}

impl Role {
    /// One of buquet's workers, not our code.
    pub fn is_workers(&self) -> bool {
        matches!(self, Role::Worker | Role::Scanner)
    }

    /// A submit's key, input and how it asks, for the checks.
    pub fn submits(&self) -> Vec<Sub> {
        let plain = |(key, input): (&'static str, u8)| Sub {
            key,
            input,
            how: How::default(),
        };
        match self {
            Role::Submit { key, input } | Role::Reuse { key, input } => vec![plain((key, *input))],
            Role::SubmitAs { key, input, how } => vec![Sub {
                key,
                input: *input,
                how: *how,
            }],
            Role::Batch { items } => items.iter().copied().map(plain).collect(),
            _ => Vec::new(),
        }
    }

    /// The key and how a reset or a lookup names it.
    pub fn names(&self) -> Option<(&'static str, How)> {
        match self {
            Role::Reset { key } | Role::Lookup { key } | Role::ResetByHand { key } => {
                Some((key, How::default()))
            }
            Role::ResetAs { key, how } | Role::LookupAs { key, how } => Some((key, *how)),
            _ => None,
        }
    }

    /// A submit in replay mode (no `if_task_failed: new_task`).
    pub fn replay_mode(&self) -> bool {
        matches!(
            self,
            Role::Submit { .. } | Role::SubmitAs { .. } | Role::Batch { .. }
        )
    }
}

/// What an actor ended with.
#[derive(Debug)]
pub enum Outcome {
    Submitted(Vec<Result<Submitted, SubmitError>>),
    Reset(Result<Reset, SubmitError>),
    Looked(Result<Option<KeyView>, SubmitError>),
    Swept(RecordOutcome),
    Passed(Result<SweepSummary, SubmitError>),
    Worked(String),
}

pub type Running = Pin<Box<dyn Future<Output = Outcome>>>;

/// How the records' due messages reach the sweeper.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Events {
    /// The bucket's S3 events.
    S3,
    /// `RECORD_EVENTS=submitter`, each message sent in this order.
    Submitter(DueOrder),
}

pub fn input_of(input: u8) -> Value {
    json!({ "n": input })
}

/// Where the planted bugs find a task's first body: the gate's history.
fn first_body(gate: &GateStore) -> FirstBody {
    let writes = super::gate::lock(&gate.state).writes.clone();
    Arc::new(move |key: &str| {
        let writes = writes.lock().unwrap_or_else(|e| e.into_inner());
        writes
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, b)| b.clone())
    })
}

/// One process's queue over the gate, with the planted bug if any.
pub fn queue(gate: &GateStore, settings: &Settings, events: Events, bug: Option<Bug>) -> Queue {
    let planted = Planted {
        inner: gate.clone(),
        bug,
        first_body: first_body(gate),
        armed: Arc::default(),
    };
    let clock = Arc::new(gate.machine.clone()) as Arc<dyn Clock>;
    let s = planted::engine_settings(bug, settings);
    let q = Queue::with_clock(crate::common::Wrapped(planted), clock, s);
    match events {
        Events::S3 => q,
        Events::Submitter(order) => q.with_due_sender_ordered(GateDue(gate.clone()), BUCKET, order),
    }
}

/// The future of `role` run by a process on `q` (`store`: the gate, for
/// the worker). A reset by hand is the library's reset but under its
/// planted bug.
pub fn start(role: &Role, q: Queue, store: GateStore, bug: Option<Bug>) -> Running {
    let role = match role {
        Role::ResetByHand { key } if bug != Some(Bug::ResetIgnoresPhase) => Role::Reset { key },
        r => r.clone(),
    };
    match role {
        Role::Submit { key, input } => Box::pin(async move {
            let r = q
                .submit(TASK_TYPE, input_of(input))
                .idempotency_key(key)
                .await;
            Outcome::Submitted(vec![r])
        }),
        Role::SubmitAs { key, input, how } => Box::pin(async move {
            let mut b = q
                .submit(how.task_type(), input_of(input))
                .idempotency_key(key);
            if how.queue_scope {
                b = b.idempotency_scope(Scope::Queue);
            }
            if let Some(p) = how.tenant {
                b = b.tenant(p);
            }
            if how.custom_scope {
                b = b.idempotency_scope(Scope::custom(CUSTOM_SCOPE).expect("a scope's name"));
            }
            if how.options {
                b = b.max_retries(5);
            }
            if how.payload {
                b = b.payload_refs(PAYLOAD_OVER);
            }
            Outcome::Submitted(vec![b.await])
        }),
        Role::Plain { input, how } => Box::pin(async move {
            let mut b = q.submit(how.task_type(), input_of(input));
            if let Some(p) = how.tenant {
                b = b.tenant(p);
            }
            if how.payload {
                b = b.payload_refs(PAYLOAD_OVER);
            }
            Outcome::Submitted(vec![b.await])
        }),
        Role::Lookup { key } => {
            Box::pin(async move { Outcome::Looked(q.lookup_key(TASK_TYPE, key, None).await) })
        }
        Role::Reuse { key, input } => Box::pin(async move {
            let r = q
                .submit(TASK_TYPE, input_of(input))
                .idempotency_key(key)
                .if_task_failed(IfTaskFailed::NewTask)
                .await;
            Outcome::Submitted(vec![r])
        }),
        Role::Batch { items } => Box::pin(async move {
            let builders = items
                .iter()
                .map(|(k, i)| q.submit(TASK_TYPE, input_of(*i)).idempotency_key(*k));
            Outcome::Submitted(q.submit_many(builders).await)
        }),
        Role::Reset { key } => {
            Box::pin(async move { Outcome::Reset(q.reset_key(TASK_TYPE, key, None).await) })
        }
        Role::ResetAs { key, how } => Box::pin(async move {
            let tenant = how.tenant();
            Outcome::Reset(q.reset_key(how.scope(), key, tenant.as_ref()).await)
        }),
        Role::LookupAs { key, how } => Box::pin(async move {
            let tenant = how.tenant();
            Outcome::Looked(q.lookup_key(how.scope(), key, tenant.as_ref()).await)
        }),
        Role::Sweep(m) => Box::pin(async move {
            let e = q.engine();
            Outcome::Swept(e.sweep_due_record(&m.key, m.sent_at, false, None).await)
        }),
        Role::DrySweep { key } => Box::pin(async move {
            let rkey = super::checks::record_key(key);
            Outcome::Swept(q.engine().sweep_due_record(&rkey, None, true, None).await)
        }),
        Role::Pass => {
            Box::pin(
                async move { Outcome::Passed(q.engine().sweep(&SweepOptions::default()).await) },
            )
        }
        Role::Worker => Box::pin(async move { Outcome::Worked(work(&store).await) }),
        Role::Scanner => Box::pin(async move { Outcome::Worked(scan(&store).await) }),
        Role::ResetByHand { key } => {
            Box::pin(async move { Outcome::Reset(reset_by_hand(&q, key).await) })
        }
    }
}

/// One poll of buquet 0.1's worker, by its ready index: the first marker's
/// task, claimed by a compare-and-swap to `running` if it is pending, its
/// marker deleted, then completed. What it did, for the trace.
async fn work(store: &GateStore) -> String {
    let Ok(page) = store.list("ready/", None, None, 1000).await else {
        return "listing failed".into();
    };
    let Some(marker) = page.objects.first().map(|o| o.key.clone()) else {
        return "no marker".into();
    };
    let Some(task_key) = task_of_marker(&marker) else {
        return "not a marker".into();
    };
    let Ok(obj) = store.get(&task_key).await else {
        return "no task".into();
    };
    let Ok(mut task) = serde_json::from_slice::<Value>(&obj.body) else {
        return "unreadable task".into();
    };
    if task["status"] != "pending" {
        return "not pending".into();
    }
    task["status"] = json!("running");
    let body = Bytes::from(task.to_string());
    let Ok(put) = store
        .put(&task_key, body, PutMode::Update(obj.meta.etag))
        .await
    else {
        return "claim lost".into();
    };
    if store.delete(&marker, None).await.is_err() {
        return "claimed, marker kept".into();
    }
    task["status"] = json!("completed");
    let done = Bytes::from(task.to_string());
    match store.put(&task_key, done, PutMode::Update(put.etag)).await {
        Ok(_) => "completed".into(),
        Err(_) => "claimed".into(),
    }
}

/// buquet's worker by its listing of `tasks/`: the first task, claimed by
/// a compare-and-swap to `running` if it is pending; its marker left alone.
async fn scan(store: &GateStore) -> String {
    let Ok(page) = store.list("tasks/", None, None, 1000).await else {
        return "listing failed".into();
    };
    let Some(task_key) = page.objects.first().map(|o| o.key.clone()) else {
        return "no task".into();
    };
    let Ok(obj) = store.get(&task_key).await else {
        return "no task".into();
    };
    let Ok(mut task) = serde_json::from_slice::<Value>(&obj.body) else {
        return "unreadable task".into();
    };
    if task["status"] != "pending" {
        return "not pending".into();
    }
    task["status"] = json!("running");
    let body = Bytes::from(task.to_string());
    match store
        .put(&task_key, body, PutMode::Update(obj.meta.etag))
        .await
    {
        Ok(_) => "claimed".into(),
        Err(_) => "claim lost".into(),
    }
}

/// `ResetIgnoresPhase`: the record read as the library reads it, and
/// replaced by a reset record on its ETag, whatever its phase.
async fn reset_by_hand(q: &Queue, key: &str) -> Result<Reset, SubmitError> {
    let Some((rec, meta)) = q.record(TASK_TYPE, key, None).await? else {
        return Ok(Reset::NotFound);
    };
    let mut reset = rec.clone();
    let now = q.engine().clock().now().trunc_subsecs(0);
    (reset.expires_at, reset.reset_at) = (now, Some(now));
    (reset.pending_task, reset.pending_input) = (None, None);
    let body = Bytes::from(serde_json::to_vec(&reset).unwrap_or_default());
    let path = super::checks::record_key(key);
    match q
        .engine()
        .store()
        .put(&path, body, PutMode::Update(meta.etag))
        .await
    {
        Ok(_) => Ok(Reset::Done {
            old_task_id: rec.task_id,
        }),
        Err(StoreError::PreconditionFailed) => Ok(Reset::Changed),
        Err(StoreError::NotFound) => Ok(Reset::NotFound),
        Err(e) => Err(SubmitError::Storage(e)),
    }
}

/// `ready/{shard}/{minute}/{id}` → `tasks/{shard}/{id}.json`.
pub fn task_of_marker(marker: &str) -> Option<String> {
    let mut parts = marker.strip_prefix("ready/")?.split('/');
    let (shard, _minute, id) = (parts.next()?, parts.next()?, parts.next()?);
    Some(format!("tasks/{shard}/{id}.json"))
}

/// The task id a task object's or a marker's key names.
pub fn id_of(key: &str) -> Option<&str> {
    if let Some(rest) = key.strip_prefix("tasks/") {
        return rest.rsplit('/').next()?.strip_suffix(".json");
    }
    key.strip_prefix("ready/")?.rsplit('/').next()
}
