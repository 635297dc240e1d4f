//! The storage the protocol stands on: a bucket of objects with S3's
//! conditional writes, cut down to exactly what the protocol uses.
//!
//! Every backend answers every call with the same outcomes that S3 gives, so
//! the protocol, its tests and its fault injection cannot tell them apart:
//!
//! | call | condition | outcome when the condition does not hold |
//! | --- | --- | --- |
//! | [`Store::put`] with [`PutMode::Create`] | `If-None-Match: *` | [`StoreError::PreconditionFailed`]: the key exists |
//! | [`Store::put`] with [`PutMode::Update`] | `If-Match: <etag>` | [`StoreError::PreconditionFailed`]: the object changed; [`StoreError::NotFound`]: it is gone |
//! | [`Store::delete`] with an ETag | `If-Match: <etag>` | [`StoreError::PreconditionFailed`]: changed; [`StoreError::NotFound`]: gone |
//! | [`Store::delete_version`] | the version id | none: that version, and only it, is gone (a newer one stays) |
//! | [`Store::get`], [`Store::head`] | none | [`StoreError::NotFound`] |
//! | [`Store::get_if_none_match`] | `If-None-Match: <etag>` | [`StoreError::NotModified`] (304): the object still has that ETag; [`StoreError::NotFound`]: there is none |
//!
//! Two conditional writes racing on one key can make S3 answer 409
//! `ConditionalRequestConflict`: [`StoreError::Conflict`], contention, to be
//! retried. ETags are derived from content, as S3's are for single-part
//! uploads: the same bytes written twice get the same ETag. (The protocol puts a
//! fresh `write_id` into every record it writes for exactly that reason.)
//!
//! Other S3-compatible stores answer some of these differently (a 412 for
//! `If-Match` on a missing key, `If-Match` ignored on DELETE, another listing
//! order, no `StartAfter`, random ETags: the README's table of stores). The
//! protocol relies only on what `idem doctor --probe` measures, and its
//! settings (`CONDITIONAL_DELETE`, `LIST_ORDER`) say what it may not rely on;
//! [`memory::Behaviour`] makes the in-memory store answer like each of them.

use std::fmt;

use async_trait::async_trait;
use bytes::Bytes;
use chrono::{DateTime, Utc};

use crate::clock::Offset;

// Fault injection is test machinery: only in a build with the `testing`
// feature (which `make test` turns on), never in what ships.
#[cfg(feature = "testing")]
pub mod conformance;
#[cfg(feature = "testing")]
pub mod faulty;
pub mod memory;
pub mod s3;

#[cfg(feature = "testing")]
pub use faulty::{Call, Fault, FaultyStore, Op};
pub use memory::{Behaviour, MemoryStore, Version};
pub use s3::S3Store;

/// An entity tag, as S3 returns it (quotes included).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ETag(pub String);

impl fmt::Debug for ETag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Display for ETag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What S3 says about an object: its ETag, when it was last written (S3's
/// clock, whole seconds), its size and, on a versioned bucket, its version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectMeta {
    /// The object's key.
    pub key: String,
    /// Its entity tag.
    pub etag: ETag,
    /// When it was last written, by the storage's clock (whole seconds).
    pub last_modified: DateTime<Utc>,
    /// Its size in bytes.
    pub size: u64,
    /// The version a GET or HEAD read, on a versioned bucket; `None` on an
    /// unversioned one (or for the `null` version) and in listings, which
    /// do not name versions.
    pub version_id: Option<String>,
}

/// An object read whole.
#[derive(Debug, Clone)]
pub struct Object {
    /// The object's bytes.
    pub body: Bytes,
    /// What the storage says about it.
    pub meta: ObjectMeta,
}

/// The condition of a write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PutMode {
    /// `If-None-Match: *`: only if no object has the key.
    Create,
    /// `If-Match: <etag>`: only if the object is still the one with that ETag.
    Update(ETag),
    /// No condition (markers, checkpoints, `rejected/` objects).
    Overwrite,
}

/// The answer to a successful write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PutResult {
    /// The written object's entity tag.
    pub etag: ETag,
    /// The version it made, on a versioned bucket (as [`ObjectMeta::version_id`]).
    pub version_id: Option<String>,
}

/// One page of a listing: in the byte order of keys on S3, in the store's
/// own order elsewhere (the README's table of stores).
#[derive(Debug, Clone, Default)]
pub struct ListPage {
    /// The objects of this page.
    pub objects: Vec<ObjectMeta>,
    /// Where the next page starts; `None` on the last page.
    pub next: Option<String>,
}

/// One page of the "folders" right under a prefix (ListObjectsV2 with
/// `Delimiter: /`, its `CommonPrefixes`): each ends in `/`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DirPage {
    /// The folders of this page, each `prefix + segment + "/"`.
    pub prefixes: Vec<String>,
    /// Where the next page starts; `None` on the last page.
    pub next: Option<String>,
}

/// Every outcome of a store call that is not a success, named for what it
/// means to the protocol, not for its HTTP status. Non-exhaustive: a match
/// outside this crate has a wildcard arm, so that a build with the
/// `testing` feature (which adds [`StoreError::Crashed`]) compiles whatever
/// compiled without it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// 404: no such object (for If-Match writes and deletes: it is gone).
    #[error("no such object")]
    NotFound,
    /// 412: an answer, not a failure. For `Create` the key exists; for
    /// `Update` and conditional deletes the object is no longer the one
    /// named by the ETag.
    #[error("precondition failed")]
    PreconditionFailed,
    /// 409 `ConditionalRequestConflict`: another conditional write on the
    /// same key was in flight. Contention: retry.
    #[error("conditional request conflict")]
    Conflict,
    /// 304: an answer, not a failure. A conditional read
    /// ([`Store::get_if_none_match`]) found the object still the one named
    /// by the ETag: there is nothing new to read. No other call answers it.
    #[error("not modified")]
    NotModified,
    /// 5xx, throttling, timeouts, connection failures: the request may or may
    /// not have taken effect. Retryable.
    #[error("storage unavailable: {0}")]
    Unavailable(String),
    /// Anything S3 will keep refusing (403, 400, a missing bucket...).
    #[error("storage error: {0}")]
    Fatal(String),
    /// A fault-injection crash: the process "died" at this call. Nothing
    /// after it may run, so it is never retried. Only [`FaultyStore`]
    /// answers it, so it exists only with the `testing` feature.
    #[cfg(feature = "testing")]
    #[error("crashed (fault injection)")]
    Crashed,
}

impl StoreError {
    /// Worth another attempt of the same request.
    pub fn is_retryable(&self) -> bool {
        matches!(self, StoreError::Conflict | StoreError::Unavailable(_))
    }
}

/// A bucket with conditional writes. See the module docs for the outcomes.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// How far the storage's clock stands from this machine's (storage −
    /// local), as the `Date` of its answers so far showed it; `None` before
    /// the first answer. The protocol judges its deadlines in the storage's
    /// time (docs/protocol.md).
    fn clock_offset(&self) -> Option<Offset>;

    /// Reads an object whole.
    async fn get(&self, key: &str) -> Result<Object, StoreError>;

    /// Reads an object whole unless it still has the ETag `etag`
    /// (`If-None-Match: <etag>`): [`StoreError::NotModified`] then, with no
    /// body (a cache revalidating what it holds); [`StoreError::NotFound`]
    /// when there is no object, whatever the ETag.
    ///
    /// The default reads the object and compares, which answers the same
    /// (S3's ETags are what it compares too) but transfers the body: a
    /// store that can ask conditionally (S3) does.
    async fn get_if_none_match(&self, key: &str, etag: &ETag) -> Result<Object, StoreError> {
        let o = self.get(key).await?;
        if &o.meta.etag == etag {
            return Err(StoreError::NotModified);
        }
        Ok(o)
    }

    /// Reads an object's metadata.
    async fn head(&self, key: &str) -> Result<ObjectMeta, StoreError>;

    /// Writes an object under the condition `mode`.
    async fn put(&self, key: &str, body: Bytes, mode: PutMode) -> Result<PutResult, StoreError>;

    /// Deletes an object; with `if_match`, only if it is still that one.
    /// Deleting a missing key without a condition succeeds, as in S3.
    /// Some stores ignore `if_match` here and delete whatever is there
    /// (`CONDITIONAL_DELETE=off`): the protocol then never relies on it.
    async fn delete(&self, key: &str, if_match: Option<&ETag>) -> Result<(), StoreError>;

    /// Deletes one version of an object on a versioned bucket (`DELETE
    /// ?versionId=`): that version is gone for good, and no delete marker
    /// is left. A newer version of the key is never touched, which is what
    /// makes it safe where `If-Match` on DELETE is ignored. If it was the
    /// current version, the one before it (if any) is current again.
    /// Deleting a version that is gone already succeeds, as in S3.
    ///
    /// The default refuses: a store without versions has nothing to delete
    /// this way.
    async fn delete_version(&self, key: &str, version_id: &str) -> Result<(), StoreError> {
        let _ = (key, version_id);
        Err(StoreError::Fatal(
            "this store cannot delete a version".into(),
        ))
    }

    /// Every version of every key under `prefix`, delete markers included,
    /// as `(key, version id)` (ListObjectVersions; on an unversioned bucket
    /// each object's one version, `null`), for [`Store::delete_version`]:
    /// how `idem doctor --probe` leaves nothing behind. The default lists
    /// none: a store without versions has its objects only.
    ///
    /// In S3's order: by key, each key's versions newest first (S3's pages
    /// give a key's delete markers apart from its versions). Callers must
    /// not rely on the order; the in-memory store keeps S3's, so that a
    /// caller that deletes the current version before the ones beneath it
    /// (which brings an older one back for a while) is seen doing so.
    async fn list_versions(&self, prefix: &str) -> Result<Vec<(String, String)>, StoreError> {
        let _ = prefix;
        Ok(Vec::new())
    }

    /// The "folders" right under `prefix` (which ends in `/` or is empty):
    /// every distinct `prefix + segment + "/"` that some key starts with, one
    /// page at a time; `page` is the `next` of the previous page. Listing by
    /// prefixes that end in `/` is what every store can do (S3 Express
    /// allows no other), in whatever order it lists.
    ///
    /// The default lists every key under `prefix` and groups them, in one
    /// page: right, and as costly as a full listing. S3 and the in-memory
    /// store ask for the grouping (`Delimiter: /`).
    async fn list_dirs(&self, prefix: &str, page: Option<String>) -> Result<DirPage, StoreError> {
        let _ = page;
        let mut found = std::collections::BTreeSet::new();
        let mut token = None;
        loop {
            let p = self.list(prefix, None, token, 1000).await?;
            for o in &p.objects {
                if let Some((dir, _)) = o.key[prefix.len().min(o.key.len())..].split_once('/') {
                    found.insert(format!("{prefix}{dir}/"));
                }
            }
            match p.next {
                Some(n) => token = Some(n),
                None => break,
            }
        }
        Ok(DirPage {
            prefixes: found.into_iter().collect(),
            next: None,
        })
    }

    /// Lists keys under `prefix` after `start_after`, one page, at most
    /// `limit` keys; `page` is the `next` of the previous page.
    async fn list(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        page: Option<String>,
        limit: usize,
    ) -> Result<ListPage, StoreError>;
}

#[async_trait]
impl<S: Store + ?Sized> Store for std::sync::Arc<S> {
    fn clock_offset(&self) -> Option<Offset> {
        (**self).clock_offset()
    }
    async fn get(&self, key: &str) -> Result<Object, StoreError> {
        (**self).get(key).await
    }
    // Forwarded, or an `Arc` of S3 would fall back to the default.
    async fn get_if_none_match(&self, key: &str, etag: &ETag) -> Result<Object, StoreError> {
        (**self).get_if_none_match(key, etag).await
    }
    async fn head(&self, key: &str) -> Result<ObjectMeta, StoreError> {
        (**self).head(key).await
    }
    async fn put(&self, key: &str, body: Bytes, mode: PutMode) -> Result<PutResult, StoreError> {
        (**self).put(key, body, mode).await
    }
    async fn delete(&self, key: &str, if_match: Option<&ETag>) -> Result<(), StoreError> {
        (**self).delete(key, if_match).await
    }
    async fn delete_version(&self, key: &str, version_id: &str) -> Result<(), StoreError> {
        (**self).delete_version(key, version_id).await
    }
    async fn list_dirs(&self, prefix: &str, page: Option<String>) -> Result<DirPage, StoreError> {
        (**self).list_dirs(prefix, page).await
    }
    async fn list_versions(&self, prefix: &str) -> Result<Vec<(String, String)>, StoreError> {
        (**self).list_versions(prefix).await
    }
    async fn list(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        page: Option<String>,
        limit: usize,
    ) -> Result<ListPage, StoreError> {
        (**self).list(prefix, start_after, page, limit).await
    }
}
