//! The gate: a store (and a due queue) that turns every request into a step
//! the explorer chooses. A request waits at the gate until the explorer
//! decides what happens to it (it lands, its answer is lost, a 503, a 409,
//! the process dies before or after it, or it is slow and lands later), then
//! goes to the in-memory bucket as that decision says. Nothing here knows the
//! protocol: it only logs what reached the bucket and what each actor heard.

use std::collections::HashMap;
use std::future::poll_fn;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Poll, Waker};

use async_trait::async_trait;
use bytes::Bytes;
use chrono::{DateTime, Duration, Utc};
use idempotent_submit::clock::Offset;
use idempotent_submit::due_sender::{DueSender, RecordDue, SendError};
use idempotent_submit::store::{
    DirPage, ETag, ListPage, MemoryStore, Object, ObjectMeta, PutMode, PutResult, Store, StoreError,
};
use idempotent_submit::{Clock, ManualClock};

/// What a request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Get,
    Head,
    PutCreate,
    PutUpdate,
    Put,
    Delete,
    List,
    /// One `SendMessage` or `SendMessageBatch` to the due queue.
    Send,
}

impl Kind {
    /// Writes can land late or land with their answer lost; reads cannot.
    pub fn is_write(self) -> bool {
        !matches!(self, Kind::Get | Kind::Head | Kind::List)
    }

    /// S3 answers 409 `ConditionalRequestConflict` only to conditional writes.
    pub fn conditional(self) -> bool {
        matches!(self, Kind::PutCreate | Kind::PutUpdate | Kind::Delete)
    }
}

/// What happens to one request: the explorer's choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fault {
    /// It lands and is answered.
    Ok,
    /// It lands; its answer is lost (a timeout): the caller sees a 503.
    Lost,
    /// A 503: it never reached the bucket.
    Unavailable,
    /// A 409 `ConditionalRequestConflict`.
    Conflict,
    /// The process dies before sending it.
    CrashBefore,
    /// The process dies once it has landed, before reading the answer.
    CrashAfter,
    /// Its attempt times out and it lands later (a step of its own), up to
    /// the late-write margin after it was sent, or never.
    Slow,
}

impl Fault {
    pub fn is_crash(self) -> bool {
        matches!(self, Fault::CrashBefore | Fault::CrashAfter)
    }
}

/// What a write does, kept so that a slow one can land later.
#[derive(Debug, Clone)]
pub enum Write {
    Put(Bytes, PutMode),
    Delete(Option<ETag>),
    DeleteVersion(String),
    Send(Vec<RecordDue>),
}

/// A request waiting at the gate.
#[derive(Debug, Clone)]
pub struct Request {
    pub id: u64,
    pub actor: usize,
    pub kind: Kind,
    pub key: String,
    pub write: Option<Write>,
    /// When it was sent (signed): it can land until the late-write margin
    /// after that.
    pub sent: DateTime<Utc>,
}

/// A request that reached the bucket (or the queue).
#[derive(Debug, Clone)]
pub struct Landed {
    pub actor: usize,
    pub kind: Kind,
    pub key: String,
    /// When it was sent and when it landed (S3's time: the clock).
    pub sent: DateTime<Utc>,
    pub at: DateTime<Utc>,
    /// It took effect (a 412 or 404 did not).
    pub ok: bool,
    pub body: Option<Bytes>,
}

/// A due message in the queue.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Message {
    pub key: String,
    /// The submitter's send time; `None`: the bucket's S3 event.
    pub sent_at: Option<DateTime<Utc>>,
    /// When the queue hands it to the sweeper.
    pub visible: DateTime<Utc>,
}

/// A slow write that may still land.
#[derive(Debug, Clone)]
pub struct Ghost {
    pub request: Request,
    pub sent: DateTime<Utc>,
}

/// Everything the gate shares with the explorer.
#[derive(Default)]
pub struct GateState {
    /// The actor being polled: its requests are its own.
    pub current: usize,
    pub next_id: u64,
    pub pending: Vec<Request>,
    pub decided: HashMap<u64, Fault>,
    /// Who to wake when a request is decided (a batch's items are polled
    /// only when woken).
    pub wakers: HashMap<u64, Waker>,
    /// Actors that died at a request: the explorer drops them.
    pub crashed: Vec<usize>,
    pub log: Vec<Landed>,
    /// The actor of every request sent, in order (guarantee 8's counts).
    pub sent_by: Vec<usize>,
    /// Per actor, a digest of every answer it read, in order: with its role,
    /// what its future holds.
    pub heard: HashMap<usize, Vec<u64>>,
    pub queue: Vec<Message>,
    pub ghosts: Vec<Ghost>,
    /// Record writes become S3 events (`RECORD_EVENTS=s3`).
    pub s3_events: bool,
    /// The due queue's delay (`STALE_CREATING_AFTER_SECONDS`).
    pub queue_delay: Duration,
    /// Every write that landed (key, body), as the planted bugs read them.
    pub writes: Arc<Mutex<Vec<(String, Bytes)>>>,
}

pub type Shared = Arc<Mutex<GateState>>;

pub fn lock(s: &Shared) -> MutexGuard<'_, GateState> {
    s.lock().unwrap_or_else(|e| e.into_inner())
}

fn digest(v: &impl std::fmt::Debug) -> u64 {
    let mut h = DefaultHasher::new();
    format!("{v:?}").hash(&mut h);
    h.finish()
}

impl GateState {
    /// The explorer's decision for request `id`.
    pub fn decide(&mut self, id: u64, fault: Fault) {
        self.pending.retain(|r| r.id != id);
        self.decided.insert(id, fault);
        if let Some(w) = self.wakers.remove(&id) {
            w.wake();
        }
    }

    /// Drops what a dead actor was still waiting for.
    pub fn forget(&mut self, actor: usize) {
        self.pending.retain(|r| r.actor != actor);
    }

    fn heard(&mut self, actor: usize, answer: u64) {
        self.heard.entry(actor).or_default().push(answer);
    }
}

/// The bucket behind the gate.
#[derive(Clone)]
pub struct GateStore {
    pub state: Shared,
    pub inner: MemoryStore,
    /// S3's clock: when a request was sent and landed.
    pub clock: ManualClock,
    /// The clock the functions' machines run on.
    pub machine: super::sim::Machine,
}

impl GateStore {
    /// Waits at the gate; the explorer's decision, and the actor and the
    /// time it was sent at.
    async fn wait(
        &self,
        kind: Kind,
        key: &str,
        write: Option<Write>,
    ) -> (Fault, usize, DateTime<Utc>) {
        let sent = self.clock.now();
        let (id, actor) = {
            let mut s = lock(&self.state);
            let id = s.next_id;
            s.next_id += 1;
            let actor = s.current;
            s.sent_by.push(actor);
            s.pending.push(Request {
                id,
                actor,
                kind,
                key: key.to_owned(),
                write,
                sent,
            });
            (id, actor)
        };
        let fault = poll_fn(|cx| {
            let mut s = lock(&self.state);
            match s.decided.remove(&id) {
                Some(f) => Poll::Ready(f),
                None => {
                    s.wakers.insert(id, cx.waker().clone());
                    Poll::Pending
                }
            }
        })
        .await;
        (fault, actor, sent)
    }

    /// One request through the gate: `run` is the request itself.
    async fn call<T: std::fmt::Debug, F>(
        &self,
        kind: Kind,
        key: &str,
        write: Option<Write>,
        body: Option<Bytes>,
        run: F,
    ) -> Result<T, StoreError>
    where
        F: std::future::Future<Output = Result<T, StoreError>>,
    {
        let (fault, actor, sent) = self.wait(kind, key, write).await;
        let answer = match fault {
            Fault::Unavailable => Err(StoreError::Unavailable("503 (explorer)".into())),
            Fault::Conflict => Err(StoreError::Conflict),
            Fault::Slow => Err(StoreError::Unavailable("timed out (explorer)".into())),
            Fault::CrashBefore => Err(StoreError::Crashed),
            Fault::Ok | Fault::Lost | Fault::CrashAfter => {
                let r = run.await;
                self.landed(actor, kind, key, sent, r.is_ok(), body);
                match fault {
                    Fault::Lost => Err(StoreError::Unavailable("answer lost (explorer)".into())),
                    Fault::CrashAfter => Err(StoreError::Crashed),
                    _ => r,
                }
            }
        };
        let mut s = lock(&self.state);
        if fault.is_crash() {
            s.crashed.push(actor);
        }
        let d = digest(&answer);
        s.heard(actor, d);
        answer
    }

    /// Logs a request that reached the bucket; a record written is an S3
    /// event when the bucket sends them.
    pub fn landed(
        &self,
        actor: usize,
        kind: Kind,
        key: &str,
        sent: DateTime<Utc>,
        ok: bool,
        body: Option<Bytes>,
    ) {
        let at = self.clock.now();
        let mut s = lock(&self.state);
        let record_write = matches!(kind, Kind::PutCreate | Kind::PutUpdate | Kind::Put);
        if ok && record_write && s.s3_events && key.starts_with("idempotency/") {
            let visible = at + s.queue_delay;
            s.queue.push(Message {
                key: key.to_owned(),
                sent_at: None,
                visible,
            });
        }
        if let (true, Some(b)) = (ok, &body) {
            let w = (key.to_owned(), b.clone());
            s.writes.lock().unwrap_or_else(|e| e.into_inner()).push(w);
        }
        s.log.push(Landed {
            actor,
            kind,
            key: key.to_owned(),
            sent,
            at,
            ok,
            body,
        });
    }

    /// A slow write lands now.
    pub async fn land(&self, g: &Ghost) {
        let r = &g.request;
        let key = r.key.as_str();
        let (ok, body) = match &r.write {
            Some(Write::Put(b, mode)) => (
                self.inner.put(key, b.clone(), mode.clone()).await.is_ok(),
                Some(b.clone()),
            ),
            Some(Write::Delete(m)) => (self.inner.delete(key, m.as_ref()).await.is_ok(), None),
            Some(Write::DeleteVersion(v)) => {
                (self.inner.delete_version(key, v).await.is_ok(), None)
            }
            Some(Write::Send(ms)) => {
                self.enqueue(ms);
                (true, None)
            }
            None => return,
        };
        self.landed(r.actor, r.kind, key, g.sent, ok, body);
    }

    /// Due messages the queue accepted.
    pub fn enqueue(&self, messages: &[RecordDue]) {
        let now = self.clock.now();
        let mut s = lock(&self.state);
        let visible = now + s.queue_delay;
        for m in messages {
            s.queue.push(Message {
                key: m.key.clone(),
                sent_at: m.sent_at,
                visible,
            });
        }
    }
}

fn put_kind(mode: &PutMode) -> Kind {
    match mode {
        PutMode::Create => Kind::PutCreate,
        PutMode::Update(_) => Kind::PutUpdate,
        PutMode::Overwrite => Kind::Put,
    }
}

#[async_trait]
impl Store for GateStore {
    fn clock_offset(&self) -> Option<Offset> {
        self.inner.clock_offset()
    }
    async fn get(&self, key: &str) -> Result<Object, StoreError> {
        self.call(Kind::Get, key, None, None, self.inner.get(key))
            .await
    }
    async fn get_if_none_match(&self, key: &str, etag: &ETag) -> Result<Object, StoreError> {
        let f = self.inner.get_if_none_match(key, etag);
        self.call(Kind::Get, key, None, None, f).await
    }
    async fn head(&self, key: &str) -> Result<ObjectMeta, StoreError> {
        self.call(Kind::Head, key, None, None, self.inner.head(key))
            .await
    }
    async fn put(&self, key: &str, body: Bytes, mode: PutMode) -> Result<PutResult, StoreError> {
        let kind = put_kind(&mode);
        let write = Some(Write::Put(body.clone(), mode.clone()));
        let f = self.inner.put(key, body.clone(), mode);
        self.call(kind, key, write, Some(body), f).await
    }
    async fn delete(&self, key: &str, if_match: Option<&ETag>) -> Result<(), StoreError> {
        let write = Some(Write::Delete(if_match.cloned()));
        let f = self.inner.delete(key, if_match);
        self.call(Kind::Delete, key, write, None, f).await
    }
    async fn delete_version(&self, key: &str, version_id: &str) -> Result<(), StoreError> {
        let write = Some(Write::DeleteVersion(version_id.to_owned()));
        let f = self.inner.delete_version(key, version_id);
        self.call(Kind::Delete, key, write, None, f).await
    }
    async fn list_versions(&self, prefix: &str) -> Result<Vec<(String, String)>, StoreError> {
        let f = self.inner.list_versions(prefix);
        self.call(Kind::List, prefix, None, None, f).await
    }
    async fn list_dirs(&self, prefix: &str, page: Option<String>) -> Result<DirPage, StoreError> {
        let f = self.inner.list_dirs(prefix, page);
        self.call(Kind::List, prefix, None, None, f).await
    }
    async fn list(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        page: Option<String>,
        limit: usize,
    ) -> Result<ListPage, StoreError> {
        let f = self.inner.list(prefix, start_after, page, limit);
        self.call(Kind::List, prefix, None, None, f).await
    }
}

/// The due queue behind the gate (`RECORD_EVENTS=submitter`): one send, one
/// step.
#[derive(Clone)]
pub struct GateDue(pub GateStore);

#[async_trait]
impl DueSender for GateDue {
    async fn send(&self, messages: &[RecordDue]) -> Vec<Result<(), SendError>> {
        let g = &self.0;
        let key = messages.first().map_or("", |m| m.key.as_str());
        let write = Some(Write::Send(messages.to_vec()));
        let run = async {
            g.enqueue(messages);
            Ok::<(), StoreError>(())
        };
        let r = g.call(Kind::Send, key, write, None, run).await;
        let one = match r {
            Ok(()) => Ok(()),
            Err(e) => Err(SendError::Unavailable(e.to_string())),
        };
        messages.iter().map(|_| one.clone()).collect()
    }
}
