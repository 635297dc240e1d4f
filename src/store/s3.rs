//! The S3 store on aws-sdk-s3. This is the one place where S3's status codes
//! become outcomes; each quirk is commented where it is mapped.

use std::sync::Arc;

use async_trait::async_trait;
use aws_sdk_s3::Client;
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream;
use bytes::Bytes;
use chrono::{DateTime, Utc};

use aws_sdk_s3::config::interceptors::{
    BeforeDeserializationInterceptorContextRef, BeforeTransmitInterceptorContextRef,
};
use aws_sdk_s3::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_smithy_types::config_bag::{Storable, StoreReplace};

use super::{DirPage, ETag, ListPage, Object, ObjectMeta, PutMode, PutResult, Store, StoreError};
use crate::clock::{Offset, OffsetEstimate};

/// A bucket on S3 (or anything that speaks its API).
#[derive(Clone, Debug)]
pub struct S3Store {
    client: Client,
    bucket: String,
    offset: Arc<OffsetEstimate>,
}

impl S3Store {
    /// A store over `client`, which is given an interceptor that times every
    /// answer against its `Date` ([`Store::clock_offset`]).
    pub fn new(client: Client, bucket: impl Into<String>) -> Self {
        let offset = Arc::new(OffsetEstimate::default());
        let conf = client
            .config()
            .to_builder()
            .interceptor(DateWatch(offset.clone()))
            .build();
        S3Store {
            client: Client::from_conf(conf),
            bucket: bucket.into(),
            offset,
        }
    }

    /// The S3 client, with its `Date` interceptor.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The bucket.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }
}

/// When a request attempt was sent (after signing), by the local clock.
#[derive(Debug, Clone, Copy)]
struct SentAt(DateTime<Utc>);

impl Storable for SentAt {
    type Storer = StoreReplace<Self>;
}

/// Feeds the store's [`OffsetEstimate`] with every answer's `Date` header,
/// between the local times the request was sent and its answer read; errors
/// (a 412, a 503) carry a `Date` as well as successes do.
#[derive(Debug)]
struct DateWatch(Arc<OffsetEstimate>);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl Intercept for DateWatch {
    fn name(&self) -> &'static str {
        "DateWatch"
    }

    fn read_before_transmit(
        &self,
        _context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        cfg.interceptor_state().store_put(SentAt(Utc::now()));
        Ok(())
    }

    fn read_before_deserialization(
        &self,
        context: &BeforeDeserializationInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let received = Utc::now();
        let date = context
            .response()
            .headers()
            .get("date")
            .and_then(|d| DateTime::parse_from_rfc2822(d).ok());
        if let (Some(SentAt(sent)), Some(date)) = (cfg.load::<SentAt>(), date) {
            self.0.observe(*sent, received, date.with_timezone(&Utc));
        }
        Ok(())
    }
}

fn map_err<E, R>(err: SdkError<E, R>) -> StoreError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + HasStatus,
{
    match &err {
        SdkError::ServiceError(se) => {
            let status = se.raw().status();
            let code = se.err().code().unwrap_or("");
            let message = format!("{status} {code}: {}", se.err().message().unwrap_or(""));
            match (status, code) {
                // 404 NoSuchKey (and HEAD's bodiless 404). On an If-Match write
                // or delete it means the object is gone, not "changed".
                (404, "NoSuchBucket") => StoreError::Fatal(message),
                (404, _) => StoreError::NotFound,
                // 412 is an answer: If-None-Match found the key taken, or
                // If-Match found another ETag. Never retried blindly.
                (412, _) => StoreError::PreconditionFailed,
                // 304 is an answer too: a GET with If-None-Match <etag>
                // found the object unchanged. The SDK has no output for it
                // (no body, no error document), so it surfaces as a service
                // error with that status; nothing else sends If-None-Match
                // on a read.
                (304, _) => StoreError::NotModified,
                // 409 ConditionalRequestConflict: a concurrent conditional
                // write on the key; S3 asks us to retry.
                (409, _) => StoreError::Conflict,
                // Throttling and server errors: the request may have landed.
                (429 | 500..=599, _) => StoreError::Unavailable(message),
                (_, "SlowDown" | "RequestTimeout" | "InternalError" | "ServiceUnavailable") => {
                    StoreError::Unavailable(message)
                }
                // 403 for a request that reached S3 more than 15 minutes
                // after it was signed (a stalled process): it did not take
                // effect, and a newly signed retry can succeed.
                (403, "RequestTimeTooSkewed" | "RequestExpired") => {
                    StoreError::Unavailable(message)
                }
                _ => StoreError::Fatal(message),
            }
        }
        // No answer, or no readable one: the request may or may not have
        // landed. Retryable; the protocol's write_id and If-None-Match make
        // a retry safe.
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => {
            StoreError::Unavailable(format!("{}", aws_sdk_s3::error::DisplayErrorContext(&err)))
        }
        _ => StoreError::Fatal(format!("{}", aws_sdk_s3::error::DisplayErrorContext(&err))),
    }
}

/// The status of a raw response, whatever its type.
trait HasStatus {
    fn status(&self) -> u16;
}

impl HasStatus for aws_sdk_s3::config::http::HttpResponse {
    fn status(&self) -> u16 {
        self.status().as_u16()
    }
}

// S3 answers every GET, HEAD and listing entry with `Last-Modified`, and
// every GET, HEAD and PUT with an `ETag`. An answer without them comes from
// something between us and S3 that cut it short: never guess. A made-up 1970
// would make a young record look settled (a replay could answer `missing`
// while a write may still land), and an empty ETag could never match.
fn to_chrono(t: Option<&aws_sdk_s3::primitives::DateTime>) -> Result<DateTime<Utc>, StoreError> {
    t.and_then(|t| DateTime::from_timestamp(t.secs(), t.subsec_nanos()))
        .ok_or_else(|| StoreError::Unavailable("S3's answer had no Last-Modified".into()))
}

/// `x-amz-version-id`. An unversioned bucket sends none, or `null` for an
/// object written while versioning was off or suspended: not a version
/// that can be deleted on its own (a DELETE of `null` on a suspended bucket
/// removes whatever was written last), so it is no version here.
fn version(v: Option<&str>) -> Option<String> {
    v.filter(|v| !v.is_empty() && *v != "null")
        .map(str::to_owned)
}

fn etag(e: Option<&str>) -> Result<ETag, StoreError> {
    e.filter(|e| !e.is_empty())
        .map(|e| ETag(e.to_owned()))
        .ok_or_else(|| StoreError::Unavailable("S3's answer had no ETag".into()))
}

/// A GetObject's answer, read whole.
async fn object(
    key: &str,
    out: aws_sdk_s3::operation::get_object::GetObjectOutput,
) -> Result<Object, StoreError> {
    let meta = ObjectMeta {
        key: key.to_owned(),
        etag: etag(out.e_tag())?,
        last_modified: to_chrono(out.last_modified())?,
        size: out.content_length().unwrap_or(0).max(0) as u64,
        version_id: version(out.version_id()),
    };
    let body = out
        .body
        .collect()
        .await
        .map_err(|e| StoreError::Unavailable(format!("reading body: {e}")))?
        .into_bytes();
    Ok(Object { body, meta })
}

#[async_trait]
impl Store for S3Store {
    fn clock_offset(&self) -> Option<Offset> {
        self.offset.get()
    }

    async fn get(&self, key: &str) -> Result<Object, StoreError> {
        let out = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .map_err(map_err)?;
        object(key, out).await
    }

    async fn get_if_none_match(&self, key: &str, etag: &ETag) -> Result<Object, StoreError> {
        let out = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .if_none_match(&etag.0)
            .send()
            .await
            .map_err(map_err)?;
        object(key, out).await
    }

    async fn head(&self, key: &str) -> Result<ObjectMeta, StoreError> {
        let out = self
            .client
            .head_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .map_err(map_err)?;
        Ok(ObjectMeta {
            key: key.to_owned(),
            etag: etag(out.e_tag())?,
            last_modified: to_chrono(out.last_modified())?,
            size: out.content_length().unwrap_or(0).max(0) as u64,
            version_id: version(out.version_id()),
        })
    }

    async fn put(&self, key: &str, body: Bytes, mode: PutMode) -> Result<PutResult, StoreError> {
        let mut req = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .content_type("application/json")
            .body(ByteStream::from(body));
        match &mode {
            PutMode::Create => req = req.if_none_match("*"),
            // SeaweedFS answers 412 where S3 answers 404 (If-Match on a
            // missing key). Nothing here can tell that 412 from "changed"
            // without another request, so it is left as it comes: the
            // protocol treats both answers alike wherever it sends If-Match
            // (docs/protocol.md, "Stores other than AWS S3").
            PutMode::Update(e) => req = req.if_match(&e.0),
            PutMode::Overwrite => {}
        }
        let out = req.send().await.map_err(map_err)?;
        Ok(PutResult {
            etag: etag(out.e_tag())?,
            version_id: version(out.version_id()),
        })
    }

    async fn delete(&self, key: &str, if_match: Option<&ETag>) -> Result<(), StoreError> {
        let mut req = self.client.delete_object().bucket(&self.bucket).key(key);
        if let Some(e) = if_match {
            req = req.if_match(&e.0);
        }
        // MinIO and LocalStack ignore If-Match here and delete anyway,
        // answering 204 as if it held: nothing in the answer shows it. The
        // protocol sends it only with CONDITIONAL_DELETE=on, for stores that
        // `idem doctor --probe` found to honour it.
        req.send().await.map_err(map_err)?;
        Ok(())
    }

    async fn delete_version(&self, key: &str, version_id: &str) -> Result<(), StoreError> {
        self.client
            .delete_object()
            .bucket(&self.bucket)
            .key(key)
            .version_id(version_id)
            .send()
            .await
            .map_err(map_err)?;
        Ok(())
    }

    async fn list_versions(&self, prefix: &str) -> Result<Vec<(String, String)>, StoreError> {
        let mut out = Vec::new();
        let (mut key_marker, mut version_marker) = (None, None);
        loop {
            let page = self
                .client
                .list_object_versions()
                .bucket(&self.bucket)
                .prefix(prefix)
                .set_key_marker(key_marker)
                .set_version_id_marker(version_marker)
                .send()
                .await
                .map_err(map_err)?;
            let versions = page.versions().iter().map(|v| (v.key(), v.version_id()));
            let markers = page
                .delete_markers()
                .iter()
                .map(|m| (m.key(), m.version_id()));
            for (k, v) in versions.chain(markers) {
                if let Some(k) = k {
                    // An unversioned bucket names its objects' one version
                    // `null` (or, on some stores, nothing).
                    out.push((k.to_owned(), v.unwrap_or("null").to_owned()));
                }
            }
            if !page.is_truncated().unwrap_or(false) {
                return Ok(out);
            }
            key_marker = page.next_key_marker().map(str::to_owned);
            version_marker = page.next_version_id_marker().map(str::to_owned);
            if key_marker.is_none() {
                return Ok(out);
            }
        }
    }

    async fn list_dirs(&self, prefix: &str, page: Option<String>) -> Result<DirPage, StoreError> {
        let out = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(prefix)
            .delimiter("/")
            .set_continuation_token(page)
            .send()
            .await
            .map_err(map_err)?;
        let prefixes = out
            .common_prefixes()
            .iter()
            .filter_map(|p| p.prefix().map(str::to_owned))
            .collect();
        let next = if out.is_truncated().unwrap_or(false) {
            out.next_continuation_token().map(str::to_owned)
        } else {
            None
        };
        Ok(DirPage { prefixes, next })
    }

    async fn list(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        page: Option<String>,
        limit: usize,
    ) -> Result<ListPage, StoreError> {
        let out = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(prefix)
            .set_start_after(start_after.map(str::to_owned))
            .set_continuation_token(page)
            .max_keys(limit.clamp(1, 1000) as i32)
            .send()
            .await
            .map_err(map_err)?;
        let objects = out
            .contents()
            .iter()
            .map(|o| {
                Ok(ObjectMeta {
                    key: o.key().unwrap_or_default().to_owned(),
                    etag: etag(o.e_tag())?,
                    last_modified: to_chrono(o.last_modified())?,
                    size: o.size().unwrap_or(0).max(0) as u64,
                    // ListObjectsV2 names no versions.
                    version_id: None,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        let next = if out.is_truncated().unwrap_or(false) {
            out.next_continuation_token().map(str::to_owned)
        } else {
            None
        };
        Ok(ListPage { objects, next })
    }
}
