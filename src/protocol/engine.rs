//! The engine: the protocol over a store, a clock and settings, and its one
//! way to make a store request (retries, deadlines, timeouts).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use chrono::{DateTime, Utc};

use super::error::SubmitError;
use super::record::{Record, task_status};
#[cfg(feature = "schemas")]
use super::schema::SchemaCache;
use crate::clock::Clock;
use crate::config::Settings;
use crate::due_sender::{Coalescer, DueMessages, DueOrder, Route};
use crate::store::{ObjectMeta, Store, StoreError};

pub(crate) use super::error::Failure;

/// The protocol over a store, a clock and settings.
#[derive(Clone)]
pub struct Engine {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) settings: Settings,
    /// The task types' schemas this process has read (shared by clones).
    #[cfg(feature = "schemas")]
    pub(crate) schemas: Arc<SchemaCache>,
    /// Where records' due messages go (`RECORD_EVENTS=submitter`); `None`:
    /// the bucket's S3 events bring them.
    pub(crate) due: Option<Arc<DueMessages>>,
    /// How the first due message goes: alone, or with its batch's.
    pub(crate) due_route: Route,
    /// Where a scheduled pass hands its continuations (the `sweep`
    /// function's pass queue); `None`: the next scheduled run goes on.
    pub(crate) pass_hand_on: Option<Arc<dyn super::sweep::hand_on::HandOn>>,
}

impl Engine {
    pub(crate) fn new(store: Arc<dyn Store>, clock: Arc<dyn Clock>, settings: Settings) -> Self {
        Engine {
            store,
            clock,
            settings,
            #[cfg(feature = "schemas")]
            schemas: Arc::default(),
            due: None,
            due_route: Route::Alone,
            pass_hand_on: None,
        }
    }

    /// This engine, handing the continuations of its scheduled passes to
    /// `hand_on` (docs/protocol.md, "The scheduled pass").
    pub fn with_pass_hand_on(mut self, hand_on: Arc<dyn super::sweep::hand_on::HandOn>) -> Self {
        self.pass_hand_on = Some(hand_on);
        self
    }

    /// Where this engine's passes hand their continuations, if anywhere.
    pub fn pass_hand_on(&self) -> Option<&dyn super::sweep::hand_on::HandOn> {
        self.pass_hand_on.as_deref()
    }

    /// This engine, sending every record's due message itself through `due`
    /// (`RECORD_EVENTS=submitter`: for buckets that send no S3 events).
    pub fn with_due_messages(mut self, due: DueMessages) -> Self {
        self.due = Some(Arc::new(due));
        self
    }

    /// Under `RECORD_EVENTS=submitter` (nothing otherwise): how this
    /// engine's messages go against the record's PUT.
    pub(crate) fn due_order(&self) -> Option<DueOrder> {
        self.due.as_ref().map(|d| d.order())
    }

    /// This submit will send no due message through its batch (it has no
    /// key, or was refused before its claim).
    pub(crate) fn send_no_due(&self) {
        if let Route::Batch(p) = &self.due_route {
            p.done();
        }
    }

    /// Due messages that could not be sent since the last call (the
    /// `DueMessageUnsent` metric).
    pub fn take_unsent_due_messages(&self) -> u64 {
        self.due
            .as_ref()
            .map_or(0, |d| d.unsent.swap(0, Ordering::Relaxed))
    }

    /// A batch's gathering of due messages, when they are sent at all.
    pub(crate) fn due_batch(&self) -> Option<Arc<Coalescer>> {
        self.due.as_ref().map(|d| Coalescer::new(d.clone()))
    }

    /// This engine, as one item of `batch`.
    pub(crate) fn in_batch(&self, batch: &Option<Arc<Coalescer>>) -> Engine {
        let mut e = self.clone();
        if let Some(b) = batch {
            e.due_route = Route::Batch(b.join());
        }
        e
    }

    /// How many fetches found an unusable schema document since the last
    /// call (for the `InvalidSchema` metric).
    #[cfg(feature = "schemas")]
    pub fn take_unusable_schemas(&self) -> u64 {
        self.schemas.take_unusable()
    }

    /// None: a build without the `schemas` feature reads no schema.
    #[cfg(not(feature = "schemas"))]
    pub fn take_unusable_schemas(&self) -> u64 {
        0
    }

    /// The settings it runs with.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The store under it.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The clock its deadlines follow.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    pub(crate) fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    /// One store request with retries: on 409 and retryable failures, with
    /// backoff, each attempt bounded by `attempt_timeout` and by what is left
    /// before `deadline`, and none started at or after `deadline` (by the
    /// injected clock).
    pub(crate) async fn with_retries<T, F, Fut>(
        &self,
        deadline: DateTime<Utc>,
        mut f: F,
    ) -> Result<T, Failure>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, StoreError>>,
    {
        let policy = self.settings.retry;
        let mut last = StoreError::Unavailable("no attempt made".into());
        for attempt in 0..policy.max_attempts.max(1) {
            if attempt > 0 {
                tokio::time::sleep(policy.backoff(attempt)).await;
            }
            let now = self.now();
            if now >= deadline {
                return Err(Failure::Deadline);
            }
            // The timeout drops a hung request, so no attempt outlives the
            // call that made it, nor runs past the deadline: a slow S3 is
            // answered as our retryable error before API Gateway's own
            // integration limit cuts the caller off.
            let left = (deadline - now).to_std().unwrap_or_default();
            match tokio::time::timeout(policy.attempt_timeout.min(left), f()).await {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(e)) if e.is_retryable() => last = e,
                Ok(Err(e)) => return Err(Failure::Store(e)),
                Err(_) => last = StoreError::Unavailable("request timed out".into()),
            }
        }
        Err(Failure::Store(last))
    }

    /// The record at `rkey`, parsed, with its object's metadata; `None` if
    /// there is none. A body that is no record is `Corrupt`, naming `rkey`.
    pub(crate) async fn read_record(
        &self,
        rkey: &str,
        op_deadline: DateTime<Utc>,
    ) -> Result<Option<(Record, ObjectMeta)>, SubmitError> {
        let obj = match self
            .with_retries(op_deadline, || self.store.get(rkey))
            .await
        {
            Ok(o) => o,
            Err(Failure::Store(StoreError::NotFound)) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let record = Record::parse(&obj.body).map_err(|e| SubmitError::Corrupt {
            key: rkey.to_owned(),
            reason: e.to_string(),
        })?;
        Ok(Some((record, obj.meta)))
    }

    /// The task's current status; `None` if it is not there.
    pub(crate) async fn read_status(
        &self,
        task_key: &str,
        op_deadline: DateTime<Utc>,
    ) -> Result<Option<String>, SubmitError> {
        match self
            .with_retries(op_deadline, || self.store.get(task_key))
            .await
        {
            Ok(obj) => Ok(Some(
                task_status(&obj.body).unwrap_or_else(|| "unknown".into()),
            )),
            Err(Failure::Store(StoreError::NotFound)) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}
