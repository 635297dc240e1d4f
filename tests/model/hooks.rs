use super::*;

// ---- a recording store: every successful write, in order, with its time ----

#[derive(Debug, Clone)]
pub(super) struct Write {
    pub(super) key: String,
    pub(super) body: Bytes,
    pub(super) create: bool,
    /// When it landed.
    pub(super) at: DateTime<Utc>,
    /// Its place among the bucket's changes (writes and deletions), which
    /// orders changes of one instant.
    pub(super) seq: u64,
}

/// A record's S3 event on its way to the sweeper through the due queue,
/// or a submitter's due message (`RECORD_EVENTS=submitter`).
#[derive(Debug, Clone)]
pub(super) struct Event {
    pub(super) key: String,
    pub(super) due: DateTime<Utc>,
    /// A submitter's message: its body and when it was sent.
    pub(super) message: Option<(String, DateTime<Utc>)>,
}

#[derive(Clone)]
pub(super) struct Recorder {
    pub(super) inner: MemoryStore,
    pub(super) clock: ManualClock,
    pub(super) writes: Arc<Mutex<Vec<Write>>>,
    pub(super) events: Arc<Mutex<Vec<Event>>>,
    /// How long after a record write its event reaches the sweeper: the due
    /// queue's delay plus up to 15 minutes of delivery.
    pub(super) delay: Arc<Mutex<fastrand::Rng>>,
    pub(super) stale: Duration,
    /// The bucket sends its S3 events (off under `RECORD_EVENTS=submitter`).
    pub(super) bucket_events: Arc<AtomicBool>,
    /// The record a DELETE in progress would remove.
    pub(super) deleting: Arc<Mutex<Option<Record>>>,
    /// How many changes the bucket has had.
    pub(super) changes: Arc<AtomicU64>,
}

impl Recorder {
    /// Where the planted bugs find a task's first body: this history.
    pub(super) fn first_body(&self) -> planted::FirstBody {
        let writes = self.writes.clone();
        Arc::new(move |key: &str| {
            let writes = writes.lock().unwrap();
            writes.iter().find(|w| w.key == key).map(|w| w.body.clone())
        })
    }
}

/// The recorder as a store.
pub(super) type Recorded = common::Wrapped<Recorder>;

#[async_trait]
impl common::Hooks for Recorder {
    type Inner = MemoryStore;

    fn inner(&self) -> &MemoryStore {
        &self.inner
    }
    /// Notes which record a DELETE of `idempotency/` is about to remove, so
    /// that `after` can tell when a record's life ended early (a reset).
    async fn before(&self, call: &common::Call<'_>) -> Result<(), StoreError> {
        if call.op == Op::Delete && call.key.starts_with("idempotency/") {
            let held = self
                .inner
                .get(call.key)
                .await
                .ok()
                .and_then(|o| Record::parse(&o.body).ok());
            *self.deleting.lock().unwrap() = held;
        }
        Ok(())
    }

    async fn after(&self, call: &common::Call<'_>, ok: bool) {
        let (key, at) = (call.key, self.clock.now());
        if call.op == Op::Delete && key.starts_with("idempotency/") {
            let held = self.deleting.lock().unwrap().take();
            // A version deleted beneath a newer record leaves that record.
            let still = match self.inner.get(key).await {
                Ok(o) => Record::parse(&o.body).ok().map(|r| r.task_id),
                Err(_) => None,
            };
            // A record's life ended (the sweeper's, once it expired): a
            // change of the bucket, in its order.
            if held.is_some_and(|r| ok && still != Some(r.task_id)) {
                self.changes.fetch_add(1, Ordering::SeqCst);
            }
            return;
        }
        let Some(body) = call.body.filter(|_| ok) else {
            return;
        };
        if key.starts_with("idempotency/") && self.bucket_events.load(Ordering::SeqCst) {
            let lag = Duration::seconds(self.delay.lock().unwrap().i64(0..=900));
            self.events.lock().unwrap().push(Event {
                key: key.to_owned(),
                due: at + self.stale + lag,
                message: None,
            });
        }
        self.writes.lock().unwrap().push(Write {
            key: key.to_owned(),
            body: body.clone(),
            create: call.op == Op::PutCreate,
            at,
            seq: self.changes.fetch_add(1, Ordering::SeqCst),
        });
    }
}

/// Every task-object or marker write attempt (key, when it was sent), and
/// the first time a record naming each task id was sent.
#[derive(Default)]
pub(super) struct Sends {
    pub(super) writes: Vec<(String, DateTime<Utc>)>,
    pub(super) record_first_sent: HashMap<uuid::Uuid, DateTime<Utc>>,
}

/// Sits right under the protocol, so that the time it notes for a request is
/// the time the request was signed and sent, right after the protocol's
/// deadline check.
#[derive(Clone)]
pub(super) struct Slow {
    pub(super) inner: FaultyStore<Recorded>,
    pub(super) clock: ManualClock,
    pub(super) rng: Arc<Mutex<fastrand::Rng>>,
    pub(super) per_mille: u32,
    pub(super) sends: Arc<Mutex<Sends>>,
    /// Beside a worker: after each request lands, its answer takes a random
    /// number of turns to come back, so that a worker's requests can fall
    /// between a finisher's read and its write. Requests sent together (the
    /// task and its marker) still land together.
    pub(super) turns: Option<Arc<Mutex<fastrand::Rng>>>,
    /// Under `RECORD_EVENTS=submitter`: this process's first record PUT,
    /// which its due message goes out beside.
    pub(super) first_record_put: Option<Arc<Mutex<FirstRecordPut>>>,
}

impl Slow {
    /// Beside a worker, an answer takes a random number of turns to come
    /// back.
    pub(super) async fn answer(&self) {
        if let Some(rng) = &self.turns {
            let n = rng.lock().unwrap().u32(0..6);
            for _ in 0..n {
                tokio::task::yield_now().await;
            }
        }
    }

    /// Maybe lets time pass; then maybe the request is lost on the way (it
    /// timed out and never landed).
    pub(super) fn lag(&self) -> Result<(), StoreError> {
        let mut rng = self.rng.lock().unwrap();
        if rng.u32(0..1000) < self.per_mille {
            self.clock.advance(Duration::seconds(rng.i64(1..900)));
            if rng.bool() {
                return Err(StoreError::Unavailable("timed out, never landed".into()));
            }
        }
        Ok(())
    }
}

#[async_trait]
impl common::Hooks for Slow {
    type Inner = FaultyStore<Recorded>;

    fn inner(&self) -> &FaultyStore<Recorded> {
        &self.inner
    }

    /// Notes a task's, a marker's or a record's send first, at the time it
    /// is sent; then maybe lags.
    async fn before(&self, call: &common::Call<'_>) -> Result<(), StoreError> {
        if let Some(body) = call.body {
            let mut sends = self.sends.lock().unwrap();
            let now = self.clock.now();
            if call.key.starts_with("tasks/") || call.key.starts_with("ready/") {
                sends.writes.push((call.key.to_owned(), now));
            } else if call.key.starts_with("idempotency/")
                && let Ok(r) = Record::parse(body)
            {
                sends.record_first_sent.entry(r.task_id).or_insert(now);
            }
        }
        // The process's first record PUT lets its due message leave beside
        // it (the engine sends both in one round), before any time passes.
        let first = call.key.starts_with("idempotency/")
            && call.body.is_some()
            && self
                .first_record_put
                .as_ref()
                .is_some_and(|p| !std::mem::replace(&mut p.lock().unwrap().sent, true));
        if first {
            tokio::task::yield_now().await;
        }
        let r = self.lag();
        // A PUT lost on the way has answered too (with its error).
        if first
            && r.is_err()
            && let Some(p) = &self.first_record_put
        {
            p.lock().unwrap().answered = true;
        }
        r
    }

    async fn after(&self, call: &common::Call<'_>, _ok: bool) {
        self.answer().await;
        if call.key.starts_with("idempotency/")
            && call.body.is_some()
            && let Some(p) = &self.first_record_put
        {
            let mut p = p.lock().unwrap();
            if p.sent {
                p.answered = true;
            }
        }
    }
}
