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
//! | [`Store::get`], [`Store::head`] | none | [`StoreError::NotFound`] |
//! | [`Store::get_if_none_match`] | `If-None-Match: <etag>` | [`StoreError::NotModified`] (304): the object still has that ETag; [`StoreError::NotFound`]: there is none |
//!
//! Two conditional writes racing on one key can make S3 answer 409
//! `ConditionalRequestConflict`: [`StoreError::Conflict`], contention, to be
//! retried. ETags are derived from content, as S3's are for single-part
//! uploads: the same bytes written twice get the same ETag. (The protocol puts a
//! fresh `write_id` into every record it writes for exactly that reason.)

use std::fmt;

use async_trait::async_trait;
use bytes::Bytes;
use chrono::{DateTime, Utc};

use crate::clock::Offset;

// Fault injection is test machinery: only in a build with the `testing`
// feature (which `make test` turns on), never in what ships.
#[cfg(feature = "testing")]
pub mod faulty;
pub mod memory;
pub mod s3;
#[cfg(feature = "secrets")]
pub mod s3_secret;

#[cfg(feature = "testing")]
pub use faulty::{Call, Fault, FaultyStore, Op};
pub use memory::{MemoryStore, Version};
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
/// clock, whole seconds) and its size.
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
}

/// One page of a listing, in the lexical order of keys.
#[derive(Debug, Clone, Default)]
pub struct ListPage {
    /// The objects of this page.
    pub objects: Vec<ObjectMeta>,
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
    async fn delete(&self, key: &str, if_match: Option<&ETag>) -> Result<(), StoreError>;

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
