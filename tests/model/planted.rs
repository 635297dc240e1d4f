//! Bugs planted on purpose, one per guarantee, so that the model test can
//! show that its checker catches each of them with a shrunk schedule, and
//! the exhaustive checker (tests/exhaustive/) each with its shortest one:
//! one module, `crate::model::planted`, that both use.
//!
//! None of them is in the library: each is a wrapper of the store the
//! protocol runs on, answering or writing what a buggy protocol would have
//! read or written, a change to the engine's [`Settings`] (not the
//! checker's), or the model's own actors: (`DueAfterRecord`) its client of
//! the due queue sending late, (`ResetIgnoresPhase`) its operator resetting
//! a key by hand. The protocol's code is the shipped code, unchanged.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use chrono::Duration;
use idempotent_submit::clock::Offset;
use idempotent_submit::store::{ETag, Object, ObjectMeta, PutMode, PutResult, Store, StoreError};
use idempotent_submit::{IfTaskFailed, Settings};
use serde_json::Value;

use crate::common::Hooks;

/// One planted bug.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bug {
    /// Writes a record's task and marker whatever its finish deadline
    /// (breaks the deadline, so guarantees 2 and 7): the engine's finish
    /// window is years long, the checker's is the real one.
    IgnoreFinishDeadline,
    /// Every key of a scope reads and writes one record, so one key answers
    /// another key's task (breaks guarantee 1).
    OneRecordPerScope,
    /// A finisher's HEAD of a marker always finds it, so an interrupted
    /// submit's marker is never written (breaks guarantee 3 and the ready
    /// index's liveness).
    FinishWithoutMarker,
    /// The old rule: a finisher writes the marker whenever its HEAD finds
    /// none, whatever a worker did to the task since (breaks guarantee 10):
    /// every read of a task answers the body its submit first wrote, so the
    /// task always looks untouched.
    MarkerWhenHeadFindsNone,
    /// A finisher does not really read the task again after its marker
    /// landed, so a worker that claimed the task in between leaves our
    /// marker stale (breaks guarantee 10, in a race): the first read of a
    /// task after a marker PUT for it answers the task's first body.
    MarkerUnverified,
    /// Answers `missing` as soon as the finish deadline passes, without the
    /// 15-minute margin for a late write (breaks guarantee 7): the engine's
    /// `late_write_margin` is zero.
    MissingWithoutMargin,
    /// Writes the task object without If-None-Match (breaks guarantee 2).
    OverwriteTask,
    /// Reads an expired record as live (breaks guarantee 6): every record
    /// read answers an `expires_at` far in the future.
    ExpiryIgnored,
    /// Trusts the machine's clock as S3's, offset zero, whatever S3's
    /// answers show (breaks the deadline when the clock is off): the store
    /// reports S3's clock at a zero offset from ours.
    TrustMachineClock,
    /// Under `RECORD_EVENTS=submitter`, sends the record's due message only
    /// once the record's PUT has answered, not beside it, so a process that
    /// dies in between never sends it (breaks guarantee 4 for a bucket that
    /// sends no events): the model's client of the due queue holds the
    /// first message until the process's first record PUT has answered.
    DueAfterRecord,
    /// A key reset that replaces the record it read with a reset record
    /// whatever its phase (a GET, then a PUT with `If-Match`), so that a
    /// submit still in flight
    /// writes its task for a key already forgotten (breaks the reset's
    /// promise): the model's reset actor does it by hand, not through
    /// `Queue::reset_key`.
    ResetIgnoresPhase,
    /// Trusts `If-Match` on DELETE where the store ignores it (MinIO,
    /// LocalStack): the engine runs with `CONDITIONAL_DELETE=on` on such a
    /// store, so the sweeper's delete of an expired record can delete the
    /// live record that replaced it (breaks guarantee 1).
    TrustDeleteIfMatch,
    /// Claims a failed task's key without `If-Match`, so that two
    /// `new_task` submits racing over one failed task both win (breaks
    /// guarantee 11's one new task per failed task): the record PUT that
    /// names `replaces_task_id` overwrites whatever holds the key.
    ReuseWithoutIfMatch,
    /// Takes a completed task for a failed one, so that a `new_task` submit
    /// runs again work that succeeded (breaks guarantee 11's "only over a
    /// failed or cancelled task"): every read of a completed task by the
    /// protocol answers it `failed`.
    CompletedReadAsFailed,
    /// Frees a failed task's key to every submit, as if the deployment's
    /// default were `IF_TASK_FAILED=new_task` (breaks guarantee 11's
    /// replay-mode answer): the engine's default is `new_task`.
    ReuseByDefault,
}

/// The settings a process's engine runs with when `bug` is planted; the
/// checker keeps `checker`.
pub fn engine_settings(bug: Option<Bug>, checker: &Settings) -> Settings {
    let mut s = checker.clone();
    match bug {
        Some(Bug::IgnoreFinishDeadline) => s.finish_window = Duration::days(3650),
        Some(Bug::MissingWithoutMargin) => s.late_write_margin = Duration::zero(),
        Some(Bug::TrustDeleteIfMatch) => s.conditional_delete = true,
        Some(Bug::ReuseByDefault) => s.if_task_failed = IfTaskFailed::NewTask,
        _ => {}
    }
    s
}

/// The body of the first write of a key that landed, from the history of
/// writes of whoever wraps a store in [`Planted`].
pub type FirstBody = Arc<dyn Fn(&str) -> Option<Bytes> + Send + Sync>;

/// The store as a buggy protocol would see it and write it, over `inner`
/// (a store as `Wrapped(Planted { .. })`). Without a bug it passes every
/// call through.
#[derive(Clone)]
pub struct Planted<S> {
    pub inner: S,
    pub bug: Option<Bug>,
    /// The body a task's submit first wrote, if it landed: each user's
    /// history of writes answers it.
    pub first_body: FirstBody,
    /// Tasks (keys) whose marker this process has just written, for
    /// `MarkerUnverified`.
    pub armed: Arc<Mutex<HashSet<String>>>,
}

impl<S> Planted<S> {
    fn is(&self, bug: Bug) -> bool {
        self.bug == Some(bug)
    }

    /// `OneRecordPerScope`: `idempotency/{scope}/{hash}.json` becomes one
    /// key per scope.
    fn key<'a>(&self, key: &'a str) -> std::borrow::Cow<'a, str> {
        if self.is(Bug::OneRecordPerScope)
            && let Some(rest) = key.strip_prefix("idempotency/")
            && let Some((scope, _)) = rest.rsplit_once('/')
        {
            return format!("idempotency/{scope}/{}.json", "0".repeat(64)).into();
        }
        key.into()
    }
}

/// `ready/{shard}/{minute}/{id}` → `tasks/{shard}/{id}.json`.
fn task_of_marker(marker: &str) -> Option<String> {
    let mut parts = marker.strip_prefix("ready/")?.split('/');
    let (shard, _minute, id) = (parts.next()?, parts.next()?, parts.next()?);
    Some(format!("tasks/{shard}/{id}.json"))
}

/// `CompletedReadAsFailed`: a completed task's body, `failed`.
fn completed_as_failed(body: &Bytes) -> Bytes {
    match serde_json::from_slice::<Value>(body) {
        Ok(mut v) if v["status"] == "completed" => {
            v["status"] = Value::from("failed");
            Bytes::from(serde_json::to_vec(&v).unwrap())
        }
        _ => body.clone(),
    }
}

/// `ExpiryIgnored`: the record with its `expires_at` far in the future.
fn never_expiring(body: &Bytes) -> Bytes {
    match serde_json::from_slice::<Value>(body) {
        Ok(mut v) if v.get("expires_at").is_some() => {
            v["expires_at"] = Value::from("9999-12-31T23:59:59Z");
            Bytes::from(serde_json::to_vec(&v).unwrap())
        }
        _ => body.clone(),
    }
}

#[async_trait]
impl<S: Store> Hooks for Planted<S> {
    type Inner = S;

    fn inner(&self) -> &S {
        &self.inner
    }

    fn clock_offset(&self) -> Option<Offset> {
        if self.is(Bug::TrustMachineClock) {
            let zero = Duration::zero();
            return Some(Offset {
                low: zero,
                high: zero,
            });
        }
        self.inner.clock_offset()
    }

    async fn get(&self, key: &str) -> Result<Object, StoreError> {
        let mut obj = self.inner.get(&self.key(key)).await?;
        if key.starts_with("tasks/") {
            let untouched = self.is(Bug::MarkerWhenHeadFindsNone)
                || (self.is(Bug::MarkerUnverified) && self.armed.lock().unwrap().remove(key));
            if untouched && let Some(first) = (self.first_body)(key) {
                obj.body = first;
            }
            if self.is(Bug::CompletedReadAsFailed) {
                obj.body = completed_as_failed(&obj.body);
            }
        } else if key.starts_with("idempotency/") && self.is(Bug::ExpiryIgnored) {
            obj.body = never_expiring(&obj.body);
        }
        Ok(obj)
    }

    async fn head(&self, key: &str) -> Result<ObjectMeta, StoreError> {
        if self.is(Bug::FinishWithoutMarker) && key.starts_with("ready/") {
            return Ok(ObjectMeta {
                key: key.to_owned(),
                etag: ETag("\"d41d8cd98f00b204e9800998ecf8427e\"".into()),
                last_modified: chrono::DateTime::UNIX_EPOCH,
                size: 0,
                version_id: None,
            });
        }
        self.inner.head(&self.key(key)).await
    }

    async fn put(&self, key: &str, body: Bytes, mode: PutMode) -> Result<PutResult, StoreError> {
        let overwrite = (self.is(Bug::OverwriteTask) && key.starts_with("tasks/"))
            || (self.is(Bug::ReuseWithoutIfMatch)
                && key.starts_with("idempotency/")
                && matches!(mode, PutMode::Update(_))
                && serde_json::from_slice::<Value>(&body)
                    .is_ok_and(|r| r["replaces_task_id"].is_string() && r["reset_at"].is_null()));
        let mode = if overwrite { PutMode::Overwrite } else { mode };
        let r = self.inner.put(&self.key(key), body, mode).await;
        if self.is(Bug::MarkerUnverified)
            && r.is_ok()
            && let Some(task) = task_of_marker(key)
        {
            self.armed.lock().unwrap().insert(task);
        }
        r
    }

    async fn delete(&self, key: &str, if_match: Option<&ETag>) -> Result<(), StoreError> {
        self.inner.delete(&self.key(key), if_match).await
    }

    async fn delete_version(&self, key: &str, version_id: &str) -> Result<(), StoreError> {
        self.inner.delete_version(&self.key(key), version_id).await
    }
}
