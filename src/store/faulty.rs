//! A store wrapper for tests: it logs every call (and which calls ran in
//! parallel, so round trips can be counted), fails chosen calls the way S3
//! can fail, and simulates a crash: from the crash on, the "process" is dead
//! and no further call reaches the bucket.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;

use super::{ETag, ListPage, Object, ObjectMeta, PutMode, PutResult, Store, StoreError};

/// The kind of a store call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// [`super::Store::get`] (and [`super::Store::get_if_none_match`]).
    Get,
    /// [`super::Store::head`].
    Head,
    /// `PutMode::Create`
    PutCreate,
    /// `PutMode::Update`
    PutUpdate,
    /// `PutMode::Overwrite`
    Put,
    /// [`super::Store::delete`].
    Delete,
    /// [`super::Store::list`].
    List,
}

impl Op {
    /// A write (a put of any mode, or a delete).
    pub fn is_write(self) -> bool {
        matches!(self, Op::PutCreate | Op::PutUpdate | Op::Put | Op::Delete)
    }
}

/// What to do to a call.
#[derive(Debug, Clone)]
pub enum Fault {
    /// The call fails before it reaches the bucket.
    Fail(StoreError),
    /// The call takes effect, but its answer is lost: the caller sees the error
    /// (a response lost on the way back, a timeout after the write landed).
    FailAfter(StoreError),
    /// The process dies before the call: nothing of it happens.
    CrashBefore,
    /// The call takes effect, then the process dies.
    CrashAfter,
    /// The call never answers (the caller's timeout must end it).
    Hang,
}

/// One logged call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// The kind of call.
    pub op: Op,
    /// Its key (a listing's prefix).
    pub key: String,
    /// The sequential round trip this call belongs to: calls that start while
    /// another is in flight share its round trip.
    pub round_trip: usize,
    /// What the caller saw: `None` for success.
    pub error: Option<StoreError>,
}

struct Rule {
    op: Option<Op>,
    key_prefix: String,
    /// Remaining matching calls to let pass before the fault fires.
    skip: usize,
    /// How many more calls the fault fires on.
    times: usize,
    fault: Fault,
}

/// Random faults on a share of calls, reproducible from a seed.
struct Random {
    rng: fastrand::Rng,
    per_mille: u32,
    faults: Vec<Fault>,
}

#[derive(Default)]
struct State {
    rules: Vec<Rule>,
    random: Option<Random>,
    calls: Vec<Call>,
    in_flight: usize,
    round_trips: usize,
}

/// The wrapper. Clones share the log, the rules and the crash.
#[derive(Clone)]
pub struct FaultyStore<S> {
    inner: S,
    state: Arc<Mutex<State>>,
    dead: Arc<AtomicBool>,
    counter: Arc<AtomicUsize>,
}

impl<S: Store + Clone> FaultyStore<S> {
    /// A wrapper of `inner` with no fault and an empty log.
    pub fn new(inner: S) -> Self {
        FaultyStore {
            inner,
            state: Arc::default(),
            dead: Arc::default(),
            counter: Arc::default(),
        }
    }

    /// The wrapped store (what a restarted process would see).
    pub fn inner(&self) -> &S {
        &self.inner
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Applies `fault` to the `nth` (1-based) call of kind `op` (any kind
    /// with `None`) whose key starts with `key_prefix`, and to `times - 1`
    /// matching calls after it.
    pub fn inject(&self, op: Option<Op>, key_prefix: &str, nth: usize, times: usize, fault: Fault) {
        self.lock().rules.push(Rule {
            op,
            key_prefix: key_prefix.to_owned(),
            skip: nth.saturating_sub(1),
            times,
            fault,
        });
    }

    /// Applies `fault` to the `n`th call (1-based) of any kind, counted from now.
    pub fn at_call(&self, n: usize, fault: Fault) {
        self.inject(None, "", n, 1, fault);
    }

    /// From now on, `per_mille`/1000 of the calls not matched by a rule get
    /// one of `faults`, chosen by a generator seeded with `seed`.
    pub fn random_faults(&self, seed: u64, per_mille: u32, faults: Vec<Fault>) {
        self.lock().random = Some(Random {
            rng: fastrand::Rng::with_seed(seed),
            per_mille,
            faults,
        });
    }

    /// Removes every rule and random fault (the log stays).
    pub fn heal(&self) {
        let mut st = self.lock();
        st.rules.clear();
        st.random = None;
    }

    /// Has a crash fired?
    pub fn crashed(&self) -> bool {
        self.dead.load(Ordering::SeqCst)
    }

    /// The log of calls so far.
    pub fn calls(&self) -> Vec<Call> {
        self.lock().calls.clone()
    }

    /// Clears the log and the round-trip count.
    pub fn reset_log(&self) {
        let mut st = self.lock();
        st.calls.clear();
        st.round_trips = 0;
    }

    /// How many calls reached the wrapper (including failed ones).
    pub fn call_count(&self) -> usize {
        self.counter.load(Ordering::SeqCst)
    }

    /// Sequential round trips in the log.
    pub fn round_trips(&self) -> usize {
        self.lock()
            .calls
            .iter()
            .map(|c| c.round_trip)
            .max()
            .unwrap_or(0)
    }

    /// Registers a call: its round trip, and the fault it gets, if any.
    fn begin(&self, op: Op, key: &str) -> (usize, Option<Fault>) {
        self.counter.fetch_add(1, Ordering::SeqCst);
        let mut st = self.lock();
        if st.in_flight == 0 {
            st.round_trips += 1;
        }
        st.in_flight += 1;
        let rt = st.round_trips;
        let mut fault = None;
        for rule in st.rules.iter_mut() {
            let matches = rule.times > 0
                && rule.op.is_none_or(|o| o == op)
                && key.starts_with(rule.key_prefix.as_str());
            if !matches {
                continue;
            }
            if rule.skip > 0 {
                rule.skip -= 1;
                continue;
            }
            rule.times -= 1;
            fault = Some(rule.fault.clone());
            break;
        }
        if fault.is_none()
            && let Some(r) = st.random.as_mut()
            && !r.faults.is_empty()
            && r.rng.u32(0..1000) < r.per_mille
        {
            let i = r.rng.usize(0..r.faults.len());
            fault = Some(r.faults[i].clone());
        }
        (rt, fault)
    }

    fn end(&self, op: Op, key: &str, round_trip: usize, error: Option<StoreError>) {
        let mut st = self.lock();
        st.in_flight = st.in_flight.saturating_sub(1);
        st.calls.push(Call {
            op,
            key: key.to_owned(),
            round_trip,
            error,
        });
    }

    async fn run<T, F>(&self, op: Op, key: &str, call: F) -> Result<T, StoreError>
    where
        F: std::future::Future<Output = Result<T, StoreError>>,
    {
        if self.crashed() {
            return Err(StoreError::Crashed);
        }
        let (rt, fault) = self.begin(op, key);
        // Let calls started together (join) overlap, so the log can tell
        // parallel requests from sequential ones.
        tokio::task::yield_now().await;
        // A call still on its way when the process died never reaches S3.
        let fault = if self.crashed() {
            Some(Fault::CrashBefore)
        } else {
            fault
        };
        let result = match fault {
            None => call.await,
            Some(Fault::Fail(e)) => Err(e),
            Some(Fault::FailAfter(e)) => call.await.and(Err(e)),
            Some(Fault::CrashBefore) => {
                self.dead.store(true, Ordering::SeqCst);
                Err(StoreError::Crashed)
            }
            Some(Fault::CrashAfter) => {
                let _ = call.await;
                self.dead.store(true, Ordering::SeqCst);
                Err(StoreError::Crashed)
            }
            Some(Fault::Hang) => {
                // Never answers; the in-flight count is fixed up when the
                // caller's timeout drops this future.
                let _guard = HangGuard(self.state.clone());
                std::future::pending::<()>().await;
                unreachable!()
            }
        };
        self.end(op, key, rt, result.as_ref().err().cloned());
        result
    }
}

struct HangGuard(Arc<Mutex<State>>);

impl Drop for HangGuard {
    fn drop(&mut self) {
        let mut st = self.0.lock().unwrap_or_else(|e| e.into_inner());
        st.in_flight = st.in_flight.saturating_sub(1);
    }
}

#[async_trait]
impl<S: Store + Clone> Store for FaultyStore<S> {
    fn clock_offset(&self) -> Option<crate::clock::Offset> {
        self.inner.clock_offset()
    }
    async fn get(&self, key: &str) -> Result<Object, StoreError> {
        self.run(Op::Get, key, self.inner.get(key)).await
    }

    /// Logged as a GET (it is one, priced as one); a 304 shows as its
    /// `error`, [`StoreError::NotModified`].
    async fn get_if_none_match(&self, key: &str, etag: &ETag) -> Result<Object, StoreError> {
        self.run(Op::Get, key, self.inner.get_if_none_match(key, etag))
            .await
    }

    async fn head(&self, key: &str) -> Result<ObjectMeta, StoreError> {
        self.run(Op::Head, key, self.inner.head(key)).await
    }

    async fn put(&self, key: &str, body: Bytes, mode: PutMode) -> Result<PutResult, StoreError> {
        let op = match mode {
            PutMode::Create => Op::PutCreate,
            PutMode::Update(_) => Op::PutUpdate,
            PutMode::Overwrite => Op::Put,
        };
        self.run(op, key, self.inner.put(key, body, mode)).await
    }

    async fn delete(&self, key: &str, if_match: Option<&ETag>) -> Result<(), StoreError> {
        self.run(Op::Delete, key, self.inner.delete(key, if_match))
            .await
    }

    async fn list(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        page: Option<String>,
        limit: usize,
    ) -> Result<ListPage, StoreError> {
        self.run(
            Op::List,
            prefix,
            self.inner.list(prefix, start_after, page, limit),
        )
        .await
    }
}
