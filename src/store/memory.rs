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
//! shows the rest, as ListObjectVersions would; [`Store::delete_version`]
//! removes one version for good.
//!
//! It can also answer as other S3-compatible stores do ([`Behaviour`], set
//! with [`MemoryStore::with_behaviour`]), one capability at a time, so that
//! the protocol, `idem doctor --probe` and the model test can be run on a
//! store that lacks each: `If-Match` ignored on DELETE (MinIO, LocalStack),
//! a 412 for `If-Match` on a missing key (SeaweedFS), folders listed first
//! (SeaweedFS), listings in no order without `StartAfter` (S3 Express), random
//! ETags (S3 Express); and, for the probe's refusals, create-only PUTs that
//! race or are ignored, and `If-Match` ignored on PUT.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use chrono::{DateTime, SubsecRound, Utc};
use sha2::{Digest, Sha256};

use super::{DirPage, ETag, ListPage, Object, ObjectMeta, PutMode, PutResult, Store, StoreError};
use crate::clock::{Clock, Offset, OffsetEstimate, SystemClock};

#[derive(Debug, Clone)]
struct Entry {
    body: Bytes,
    etag: ETag,
    last_modified: DateTime<Utc>,
    /// Its version, on a versioned bucket.
    version_id: Option<String>,
}

/// How `If-None-Match: *` behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CreateOnly {
    /// Exactly one of any number of racing creates wins (S3, moto served one
    /// request at a time, SeaweedFS).
    #[default]
    Atomic,
    /// The check and the write are apart: racing creates can all win (moto's
    /// threaded server).
    Racy,
    /// Ignored: every create writes.
    Ignored,
}

/// What `If-Match` on a PUT of a missing key answers (and on a DELETE: 404,
/// or 412 where the PUT's is).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MissingIfMatch {
    /// 404 (S3, moto).
    #[default]
    NotFound,
    /// 412 (SeaweedFS), for a DELETE too.
    PreconditionFailed,
    /// Writes the object (older MinIO): no compare-and-swap.
    Writes,
}

/// The order of listings, and whether `StartAfter` is honoured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Listing {
    /// The byte order of keys, `StartAfter` honoured (S3, moto).
    #[default]
    ByteOrder,
    /// Folders first, as a file system walks them: `a/…` before `a-b/…`
    /// (byte order with `/` below every other character), and `StartAfter`
    /// in that order (SeaweedFS).
    FoldersFirst,
    /// No order: pages come in an order of the store's own (a shuffle fixed
    /// by `seed`), `StartAfter` is refused, and only prefixes that end in `/`
    /// may be listed (S3 Express One Zone's directory buckets).
    Unordered {
        /// The shuffle's seed: one seed, one order.
        seed: u64,
    },
}

/// What this in-memory store does where S3-compatible stores differ from
/// S3 (the README's table of stores). [`Behaviour::default`] is S3.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Behaviour {
    /// How `If-None-Match: *` is answered.
    pub create_only: CreateOnly,
    /// `If-Match` on a PUT is honoured (`false`: ignored, the PUT writes).
    pub compare_and_swap: bool,
    /// What `If-Match` on a PUT to a missing key answers.
    pub missing_if_match: MissingIfMatch,
    /// `If-Match` on a DELETE is honoured (`false`: ignored, the DELETE
    /// deletes whatever is there, as MinIO and LocalStack do).
    pub conditional_delete: bool,
    /// The order of listings, and `StartAfter`.
    pub listing: Listing,
    /// Every write gets a new random ETag, even of the same bytes (S3
    /// Express directory buckets).
    pub random_etags: bool,
}

impl Default for Behaviour {
    fn default() -> Self {
        Behaviour {
            create_only: CreateOnly::Atomic,
            compare_and_swap: true,
            missing_if_match: MissingIfMatch::NotFound,
            conditional_delete: true,
            listing: Listing::ByteOrder,
            random_etags: false,
        }
    }
}

impl Behaviour {
    /// As SeaweedFS answers: a 412 for `If-Match` on a missing key, folders
    /// listed first.
    pub fn seaweedfs() -> Self {
        Behaviour {
            missing_if_match: MissingIfMatch::PreconditionFailed,
            listing: Listing::FoldersFirst,
            ..Self::default()
        }
    }

    /// As MinIO and LocalStack answer: `If-Match` ignored on DELETE.
    pub fn minio() -> Self {
        Behaviour {
            conditional_delete: false,
            ..Self::default()
        }
    }

    /// As an S3 Express One Zone directory bucket answers (make it with
    /// [`MemoryStore::new`]: it has no versioning): no order, no
    /// `StartAfter`, prefixes that end in `/`, random ETags.
    pub fn s3_express(seed: u64) -> Self {
        Behaviour {
            listing: Listing::Unordered { seed },
            random_etags: true,
            ..Self::default()
        }
    }
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

/// One version of a key: its id, and the object (`None`: a delete marker).
#[derive(Debug, Clone)]
struct Kept {
    id: String,
    entry: Option<Entry>,
}

/// Every version of every key, oldest first.
type History = BTreeMap<String, Vec<Kept>>;

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
    behaviour: Behaviour,
    /// Writes so far: version ids and random ETags are made from it, so a
    /// run is the same every time.
    writes: Arc<AtomicU64>,
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

/// A directory bucket's ETag: new for every write (here: of the bytes and
/// the write's number, so that runs repeat).
fn random_etag(body: &[u8], n: u64) -> ETag {
    let mut h = Sha256::new();
    h.update(body);
    h.update(n.to_le_bytes());
    ETag(format!("\"{}\"", hex::encode(&h.finalize()[..16])))
}

/// Where `key` comes in a listing of `listing`'s order (compared as bytes).
fn order_of(listing: Listing, key: &str) -> Vec<u8> {
    match listing {
        Listing::ByteOrder => key.as_bytes().to_vec(),
        // A file system's walk: the entries of one folder by name, each
        // folder's keys before the next name. That is byte order with `/`
        // below every other byte.
        Listing::FoldersFirst => key.bytes().map(|b| if b == b'/' { 0 } else { b }).collect(),
        Listing::Unordered { seed } => {
            let mut h = Sha256::new();
            h.update(seed.to_le_bytes());
            h.update(key.as_bytes());
            let mut out = h.finalize()[..8].to_vec();
            out.extend_from_slice(key.as_bytes());
            out
        }
    }
}

/// A directory bucket's 400 for what it does not support.
fn unsupported(what: &str) -> StoreError {
    StoreError::Fatal(format!("400 InvalidArgument: {what}"))
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
            behaviour: Behaviour::default(),
            writes: Arc::default(),
        }
    }

    /// The same bucket, answering as `behaviour` says (set it before the
    /// bucket is shared: clones made before keep theirs).
    pub fn with_behaviour(mut self, behaviour: Behaviour) -> Self {
        self.behaviour = behaviour;
        self
    }

    /// How this bucket answers where stores differ.
    pub fn behaviour(&self) -> Behaviour {
        self.behaviour
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
                    .map(|vs| {
                        vs.iter()
                            .map(|k| match &k.entry {
                                Some(e) => Version::Object(e.etag.clone()),
                                None => Version::DeleteMarker,
                            })
                            .collect()
                    })
            })
            .unwrap_or_default()
    }

    /// Every key with any version (an object, noncurrent versions or a
    /// delete marker), as ListObjectVersions names them; on an unversioned
    /// bucket, the keys.
    pub fn keys_with_versions(&self) -> Vec<String> {
        match &self.versions {
            Some(v) => v
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .filter(|(_, vs)| !vs.is_empty())
                .map(|(k, _)| k.clone())
                .collect(),
            None => self.keys(),
        }
    }

    /// Keys whose current version is a delete marker.
    pub fn delete_markers(&self) -> Vec<String> {
        let Some(v) = &self.versions else {
            return Vec::new();
        };
        v.lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|(_, vs)| vs.last().is_some_and(|k| k.entry.is_none()))
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// A new version id on a versioned bucket (`None` on an unversioned one).
    fn new_version_id(&self, n: u64) -> Option<String> {
        self.versions.as_ref().map(|_| format!("v{n:012}"))
    }

    /// Adds a version (`entry`, or a delete marker) to `key`'s history on a
    /// versioned bucket. Called with the objects' lock held, so that
    /// versions keep the writes' order.
    fn record_version(&self, key: &str, id: Option<String>, entry: Option<Entry>) {
        if let (Some(v), Some(id)) = (&self.versions, id) {
            v.lock()
                .unwrap_or_else(|e| e.into_inner())
                .entry(key.to_owned())
                .or_default()
                .push(Kept { id, entry });
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
            version_id: e.version_id.clone(),
        }
    }

    /// A listing does not name versions.
    fn listed(key: &str, e: &Entry) -> ObjectMeta {
        ObjectMeta {
            version_id: None,
            ..Self::meta(key, e)
        }
    }

    /// What a PUT in `mode` answers for the object `current`, as
    /// [`Behaviour`] says: `Ok` to write.
    fn precondition(&self, mode: &PutMode, current: Option<&Entry>) -> Result<(), StoreError> {
        let b = &self.behaviour;
        match (mode, current) {
            (PutMode::Create, Some(_)) if b.create_only != CreateOnly::Ignored => {
                Err(StoreError::PreconditionFailed)
            }
            (PutMode::Update(_), _) if !b.compare_and_swap => Ok(()),
            (PutMode::Update(_), None) => match b.missing_if_match {
                MissingIfMatch::NotFound => Err(StoreError::NotFound),
                MissingIfMatch::PreconditionFailed => Err(StoreError::PreconditionFailed),
                MissingIfMatch::Writes => Ok(()),
            },
            (PutMode::Update(want), Some(e)) if &e.etag != want => {
                Err(StoreError::PreconditionFailed)
            }
            _ => Ok(()),
        }
    }

    /// The keys under `prefix` in the listing's order, after `after` (in
    /// that order), at most `limit`, and whether there are more.
    fn page_in_order(
        &self,
        objects: &BTreeMap<String, Entry>,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> (Vec<ObjectMeta>, bool) {
        let listing = self.behaviour.listing;
        let from = after.map(|a| order_of(listing, a));
        let mut keys: Vec<(Vec<u8>, &String, &Entry)> = objects
            .range(prefix.to_owned()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, e)| (order_of(listing, k), k, e))
            .filter(|(o, _, _)| from.as_ref().is_none_or(|f| o > f))
            .collect();
        keys.sort_by(|a, b| a.0.cmp(&b.0));
        let more = keys.len() > limit;
        let out = keys
            .into_iter()
            .take(limit)
            .map(|(_, k, e)| Self::listed(k, e))
            .collect();
        (out, more)
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
        let mut at = self.answer_time();
        // A racy create checks, then writes with other requests in between:
        // every create that checked before the first write wins.
        let racy = mode == PutMode::Create && self.behaviour.create_only == CreateOnly::Racy;
        if racy {
            self.precondition(&mode, self.lock().get(key))?;
            tokio::task::yield_now().await;
            at = self.answer_time();
        }
        let mut objects = self.lock();
        if !racy {
            self.precondition(&mode, objects.get(key))?;
        }
        let n = self.writes.fetch_add(1, Ordering::SeqCst);
        let etag = if self.behaviour.random_etags {
            random_etag(&body, n)
        } else {
            etag_of(&body)
        };
        let version_id = self.new_version_id(n);
        let entry = Entry {
            body,
            etag: etag.clone(),
            // S3 keeps LastModified to the second.
            last_modified: at.trunc_subsecs(0),
            version_id: version_id.clone(),
        };
        objects.insert(key.to_owned(), entry.clone());
        self.record_version(key, version_id.clone(), Some(entry));
        Ok(PutResult { etag, version_id })
    }

    async fn delete(&self, key: &str, if_match: Option<&ETag>) -> Result<(), StoreError> {
        self.answer_time();
        let mut objects = self.lock();
        // A store that ignores If-Match on DELETE deletes whatever is there.
        if let Some(want) = if_match.filter(|_| self.behaviour.conditional_delete) {
            match objects.get(key) {
                // SeaweedFS answers a missing key 412 here too.
                None if self.behaviour.missing_if_match == MissingIfMatch::PreconditionFailed => {
                    return Err(StoreError::PreconditionFailed);
                }
                None => return Err(StoreError::NotFound),
                Some(e) if &e.etag != want => return Err(StoreError::PreconditionFailed),
                Some(_) => {}
            }
        }
        objects.remove(key);
        // On a versioned bucket a DELETE without a version id always adds a
        // delete marker, whether or not there was an object.
        let n = self.writes.fetch_add(1, Ordering::SeqCst);
        self.record_version(key, self.new_version_id(n), None);
        Ok(())
    }

    async fn delete_version(&self, key: &str, version_id: &str) -> Result<(), StoreError> {
        self.answer_time();
        let mut objects = self.lock();
        let Some(history) = &self.versions else {
            // An unversioned bucket has one version of each key, `null`.
            if version_id == "null" {
                objects.remove(key);
                return Ok(());
            }
            return Err(unsupported("invalid version id"));
        };
        let mut history = history.lock().unwrap_or_else(|e| e.into_inner());
        let Some(versions) = history.get_mut(key) else {
            return Ok(());
        };
        let Some(i) = versions.iter().position(|k| k.id == version_id) else {
            return Ok(());
        };
        let was_current = i + 1 == versions.len();
        versions.remove(i);
        if was_current {
            // The version before it is current again: an object, or nothing
            // (a delete marker, or no version left).
            match versions.last().and_then(|k| k.entry.clone()) {
                Some(e) => objects.insert(key.to_owned(), e),
                None => objects.remove(key),
            };
        }
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
        if let Listing::Unordered { .. } = self.behaviour.listing {
            if start_after.is_some() {
                return Err(unsupported("StartAfter is not supported"));
            }
            if !prefix.is_empty() && !prefix.ends_with('/') {
                return Err(unsupported("only prefixes that end in / are supported"));
            }
        }
        let objects = self.lock();
        let limit = limit.max(1);
        // The page token is the last key handed out; the later of it and
        // start_after (in the listing's order) is where this page begins.
        if self.behaviour.listing != Listing::ByteOrder {
            let listing = self.behaviour.listing;
            let after = match (page.as_deref(), start_after) {
                (Some(p), Some(s)) => Some(if order_of(listing, p) > order_of(listing, s) {
                    p
                } else {
                    s
                }),
                (p, s) => p.or(s),
            };
            let (out, more) = self.page_in_order(&objects, prefix, after, limit);
            let next = more.then(|| out.last().map(|m| m.key.clone())).flatten();
            return Ok(ListPage { objects: out, next });
        }
        let after = match (page.as_deref(), start_after) {
            (Some(p), Some(s)) => Some(p.max(s)),
            (p, s) => p.or(s),
        };
        let lower = match after {
            Some(a) if a >= prefix => Bound::Excluded(a.to_owned()),
            _ => Bound::Included(prefix.to_owned()),
        };
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
            out.push(Self::listed(k, e));
        }
        let next = if more {
            out.last().map(|m| m.key.clone())
        } else {
            None
        };
        Ok(ListPage { objects: out, next })
    }

    async fn list_versions(&self, prefix: &str) -> Result<Vec<(String, String)>, StoreError> {
        self.answer_time();
        let objects = self.lock();
        let Some(history) = &self.versions else {
            return Ok(objects
                .range(prefix.to_owned()..)
                .take_while(|(k, _)| k.starts_with(prefix))
                .map(|(k, _)| (k.clone(), "null".to_owned()))
                .collect());
        };
        let history = history.lock().unwrap_or_else(|e| e.into_inner());
        Ok(history
            .range(prefix.to_owned()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .flat_map(|(k, vs)| vs.iter().rev().map(move |v| (k.clone(), v.id.clone())))
            .collect())
    }

    async fn list_dirs(&self, prefix: &str, page: Option<String>) -> Result<DirPage, StoreError> {
        self.answer_time();
        let listing = self.behaviour.listing;
        if matches!(listing, Listing::Unordered { .. })
            && !prefix.is_empty()
            && !prefix.ends_with('/')
        {
            return Err(unsupported("only prefixes that end in / are supported"));
        }
        let objects = self.lock();
        let dirs: BTreeSet<String> = objects
            .range(prefix.to_owned()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .filter_map(|(k, _)| {
                let (dir, _) = k[prefix.len()..].split_once('/')?;
                Some(format!("{prefix}{dir}/"))
            })
            .collect();
        let from = page.as_deref().map(|p| order_of(listing, p));
        let mut dirs: Vec<(Vec<u8>, String)> = dirs
            .into_iter()
            .map(|d| (order_of(listing, &d), d))
            .filter(|(o, _)| from.as_ref().is_none_or(|f| o > f))
            .collect();
        dirs.sort();
        // As S3's: at most 1,000 a page.
        let more = dirs.len() > 1000;
        let prefixes: Vec<String> = dirs.into_iter().take(1000).map(|(_, d)| d).collect();
        let next = more.then(|| prefixes.last().cloned()).flatten();
        Ok(DirPage { prefixes, next })
    }
}
