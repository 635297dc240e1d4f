//! An in-memory bucket that answers exactly as S3 does (see the module docs of
//! [`crate::store`]), for unit tests, fault injection and the CPU benchmark.
//!
//! It can be versioned, as buquet's buckets are ([`MemoryStore::versioned`]).
//! What versioning changes is kept beside the current objects and is what
//! S3 does: every write adds a version, every DELETE (conditional or not, of
//! an object or of nothing) adds a delete marker as the current version. The
//! protocol sees through [`Store`] exactly what S3 shows it: a GET or HEAD of
//! a key whose current version is a delete marker is a 404, `If-None-Match:
//! *` succeeds over a delete marker, `If-Match` on one is a 404, and a
//! listing (ListObjectsV2) shows current objects only. [`MemoryStore::versions`]
//! shows the rest, as ListObjectVersions would.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use chrono::{DateTime, SubsecRound, Utc};
use sha2::{Digest, Sha256};

use super::{ETag, ListPage, Object, ObjectMeta, PutMode, PutResult, Store, StoreError};
use crate::clock::{Clock, Offset, OffsetEstimate, SystemClock};

#[derive(Debug, Clone)]
struct Entry {
    body: Bytes,
    etag: ETag,
    last_modified: DateTime<Utc>,
}

/// One version of a key in a versioned bucket, oldest first in
/// [`MemoryStore::versions`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Version {
    /// An object as it was written (its ETag).
    Object(ETag),
    /// A delete marker.
    DeleteMarker,
}

/// Every version of every key, oldest first.
type History = BTreeMap<String, Vec<Version>>;

/// An in-memory bucket. Clones share one bucket.
#[derive(Clone)]
pub struct MemoryStore {
    objects: Arc<Mutex<BTreeMap<String, Entry>>>,
    /// Every version of every key, oldest first; `None` when unversioned.
    versions: Option<Arc<Mutex<History>>>,
    clock: Arc<dyn Clock>,
    /// The store's clock is `clock` + `skew`: a machine whose clock is off.
    skew: Arc<Mutex<chrono::Duration>>,
    offset: Arc<OffsetEstimate>,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new(Arc::new(SystemClock))
    }
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("objects", &self.len())
            .finish()
    }
}

/// Content-derived, like S3's MD5 ETag for single-part uploads: the same
/// bytes always get the same ETag.
fn etag_of(body: &[u8]) -> ETag {
    let digest = Sha256::digest(body);
    ETag(format!("\"{}\"", hex::encode(&digest[..16])))
}

impl MemoryStore {
    /// A bucket whose `LastModified` comes from `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        MemoryStore {
            objects: Arc::new(Mutex::new(BTreeMap::new())),
            versions: None,
            clock,
            skew: Arc::default(),
            offset: Arc::default(),
        }
    }

    /// A versioned bucket (versioning enabled from the start) whose
    /// `LastModified` comes from `clock`.
    pub fn versioned(clock: Arc<dyn Clock>) -> Self {
        MemoryStore {
            versions: Some(Arc::default()),
            ..Self::new(clock)
        }
    }

    /// Does the bucket keep versions?
    pub fn is_versioned(&self) -> bool {
        self.versions.is_some()
    }

    /// Every version of `key`, oldest first, the last one current (empty on
    /// an unversioned bucket), as ListObjectVersions shows them.
    pub fn versions(&self, key: &str) -> Vec<Version> {
        self.versions
            .as_ref()
            .and_then(|v| {
                v.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get(key)
                    .cloned()
            })
            .unwrap_or_default()
    }

    /// Keys whose current version is a delete marker.
    pub fn delete_markers(&self) -> Vec<String> {
        let Some(v) = &self.versions else {
            return Vec::new();
        };
        v.lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|(_, vs)| vs.last() == Some(&Version::DeleteMarker))
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Adds `version` to `key`'s history on a versioned bucket. Called with
    /// the objects' lock held, so that versions keep the writes' order.
    fn record_version(&self, key: &str, version: Version) {
        if let Some(v) = &self.versions {
            v.lock()
                .unwrap_or_else(|e| e.into_inner())
                .entry(key.to_owned())
                .or_default()
                .push(version);
        }
    }

    /// Sets the storage's clock `skew` away from the clock it was made with
    /// (positive: the storage is ahead, i.e. the caller's clock is behind).
    /// Its `LastModified` and its answers' dates follow.
    pub fn set_skew(&self, skew: chrono::Duration) {
        *self.skew.lock().unwrap_or_else(|e| e.into_inner()) = skew;
    }

    /// The storage's time now; every answer is dated with it (whole seconds,
    /// like an HTTP `Date`), and the estimate of the offset learns from it.
    fn answer_time(&self) -> DateTime<Utc> {
        let local = self.clock.now();
        let skew = *self.skew.lock().unwrap_or_else(|e| e.into_inner());
        let at = local + skew;
        self.offset.observe(local, local, at.trunc_subsecs(0));
        at
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Entry>> {
        self.objects.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How many objects the bucket holds.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// No object at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every key, in order (for assertions).
    pub fn keys(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }

    /// Every object: key, bytes, ETag and `LastModified`, in key order (for
    /// assertions that something changed nothing, byte for byte).
    pub fn snapshot(&self) -> Vec<(String, Bytes, ETag, DateTime<Utc>)> {
        self.lock()
            .iter()
            .map(|(k, e)| (k.clone(), e.body.clone(), e.etag.clone(), e.last_modified))
            .collect()
    }

    fn meta(key: &str, e: &Entry) -> ObjectMeta {
        ObjectMeta {
            key: key.to_owned(),
            etag: e.etag.clone(),
            last_modified: e.last_modified,
            size: e.body.len() as u64,
        }
    }
}

#[async_trait]
impl Store for MemoryStore {
    fn clock_offset(&self) -> Option<Offset> {
        self.offset.get()
    }

    async fn get(&self, key: &str) -> Result<Object, StoreError> {
        self.answer_time();
        let objects = self.lock();
        let e = objects.get(key).ok_or(StoreError::NotFound)?;
        Ok(Object {
            body: e.body.clone(),
            meta: Self::meta(key, e),
        })
    }

    async fn get_if_none_match(&self, key: &str, etag: &ETag) -> Result<Object, StoreError> {
        self.answer_time();
        let objects = self.lock();
        let e = objects.get(key).ok_or(StoreError::NotFound)?;
        if &e.etag == etag {
            return Err(StoreError::NotModified);
        }
        Ok(Object {
            body: e.body.clone(),
            meta: Self::meta(key, e),
        })
    }

    async fn head(&self, key: &str) -> Result<ObjectMeta, StoreError> {
        self.answer_time();
        let objects = self.lock();
        let e = objects.get(key).ok_or(StoreError::NotFound)?;
        Ok(Self::meta(key, e))
    }

    async fn put(&self, key: &str, body: Bytes, mode: PutMode) -> Result<PutResult, StoreError> {
        let at = self.answer_time();
        let mut objects = self.lock();
        match (&mode, objects.get(key)) {
            (PutMode::Create, Some(_)) => return Err(StoreError::PreconditionFailed),
            (PutMode::Update(_), None) => return Err(StoreError::NotFound),
            (PutMode::Update(want), Some(e)) if &e.etag != want => {
                return Err(StoreError::PreconditionFailed);
            }
            _ => {}
        }
        let etag = etag_of(&body);
        let entry = Entry {
            body,
            etag: etag.clone(),
            // S3 keeps LastModified to the second.
            last_modified: at.trunc_subsecs(0),
        };
        objects.insert(key.to_owned(), entry);
        self.record_version(key, Version::Object(etag.clone()));
        Ok(PutResult { etag })
    }

    async fn delete(&self, key: &str, if_match: Option<&ETag>) -> Result<(), StoreError> {
        self.answer_time();
        let mut objects = self.lock();
        if let Some(want) = if_match {
            match objects.get(key) {
                None => return Err(StoreError::NotFound),
                Some(e) if &e.etag != want => return Err(StoreError::PreconditionFailed),
                Some(_) => {}
            }
        }
        objects.remove(key);
        // On a versioned bucket a DELETE without a version id always adds a
        // delete marker, whether or not there was an object.
        self.record_version(key, Version::DeleteMarker);
        Ok(())
    }

    async fn list(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        page: Option<String>,
        limit: usize,
    ) -> Result<ListPage, StoreError> {
        self.answer_time();
        let objects = self.lock();
        // The page token is the last key handed out; the later of it and
        // start_after is where this page begins.
        let after = match (page.as_deref(), start_after) {
            (Some(p), Some(s)) => Some(p.max(s)),
            (p, s) => p.or(s),
        };
        let lower = match after {
            Some(a) if a >= prefix => Bound::Excluded(a.to_owned()),
            _ => Bound::Included(prefix.to_owned()),
        };
        let limit = limit.max(1);
        let mut out = Vec::new();
        let mut more = false;
        for (k, e) in objects.range((lower, Bound::Unbounded)) {
            if !k.starts_with(prefix) {
                break;
            }
            if out.len() == limit {
                more = true;
                break;
            }
            out.push(Self::meta(k, e));
        }
        let next = if more {
            out.last().map(|m| m.key.clone())
        } else {
            None
        };
        Ok(ListPage { objects: out, next })
    }
}
