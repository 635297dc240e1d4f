//! The S3 store on aws-sdk-s3. This is the one place where S3's status codes
//! become outcomes; each quirk is commented where it is mapped.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_s3::Client;
use aws_sdk_s3::config::retry::RetryConfig;
use aws_sdk_s3::config::timeout::TimeoutConfig;
use aws_sdk_s3::config::{RequestChecksumCalculation, ResponseChecksumValidation};
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream;
use bytes::Bytes;
use chrono::{DateTime, Utc};

use aws_sdk_s3::config::interceptors::{
    BeforeDeserializationInterceptorContextRef, BeforeTransmitInterceptorContextRef,
};
use aws_sdk_s3::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_smithy_types::config_bag::{Storable, StoreReplace};

use super::{ETag, ListPage, Object, ObjectMeta, PutMode, PutResult, Store, StoreError};
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

    /// A client configured from the environment, as the SDK reads it
    /// (credentials, region, `AWS_ENDPOINT_URL_S3`), plus
    /// `S3_FORCE_PATH_STYLE`. The SDK's own retries are off: the protocol
    /// retries itself so that it can check its deadlines before every attempt.
    pub async fn from_env(bucket: impl Into<String>, force_path_style: bool) -> Self {
        Self::new(client_from_env(force_path_style).await, bucket)
    }

    /// The store that `config` names: a client configured from the
    /// environment (the endpoint, `AWS_ENDPOINT_URL_S3`, included) with
    /// `S3_FORCE_PATH_STYLE`, signing with the key pair of
    /// `S3_CREDENTIALS_SECRET` when it is set (read here, once), else with
    /// the credentials the SDK finds.
    pub async fn for_config(config: &crate::Config) -> Result<Self, crate::ConfigError> {
        let credentials = match &config.s3_credentials_secret {
            None => None,
            Some(id) => Some(secret_key_pair(id).await?),
        };
        let client = client_with(config.force_path_style, credentials).await;
        Ok(Self::new(client, config.bucket.clone()))
    }

    /// A store on a local S3 endpoint (moto, MinIO) with static test
    /// credentials and path-style URLs, for tests and benchmarks: the
    /// `testing` feature only, never in what ships.
    #[cfg(feature = "testing")]
    pub fn for_endpoint(endpoint: &str, bucket: impl Into<String>) -> Self {
        Self::for_endpoint_as(endpoint, bucket, "test", "test")
    }

    /// [`S3Store::for_endpoint`] signing with the key pair given (a local
    /// store that checks signatures, as SeaweedFS does).
    pub fn for_endpoint_as(
        endpoint: &str,
        bucket: impl Into<String>,
        access_key_id: &str,
        secret_access_key: &str,
    ) -> Self {
        let conf = aws_sdk_s3::config::Builder::new()
            .behavior_version(aws_config::BehaviorVersion::latest())
            .http_client(https_client())
            .endpoint_url(endpoint)
            .region(aws_sdk_s3::config::Region::new("us-east-1"))
            .credentials_provider(aws_sdk_s3::config::Credentials::new(
                access_key_id,
                secret_access_key,
                None,
                None,
                "static",
            ))
            .force_path_style(true)
            .retry_config(RetryConfig::disabled())
            .timeout_config(timeouts())
            .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
            .response_checksum_validation(ResponseChecksumValidation::WhenRequired)
            .build();
        Self::new(Client::from_conf(conf), bucket)
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

/// The key pair of `S3_CREDENTIALS_SECRET`, or why not (never its content).
#[cfg(feature = "secrets")]
async fn secret_key_pair(id: &str) -> Result<aws_sdk_s3::config::Credentials, crate::ConfigError> {
    super::s3_secret::key_pair(id)
        .await
        .map_err(|reason| crate::ConfigError {
            var: "S3_CREDENTIALS_SECRET",
            reason,
        })
}

#[cfg(not(feature = "secrets"))]
async fn secret_key_pair(_id: &str) -> Result<aws_sdk_s3::config::Credentials, crate::ConfigError> {
    Err(crate::ConfigError {
        var: "S3_CREDENTIALS_SECRET",
        reason: "needs the `secrets` feature of the library".into(),
    })
}

/// See [`S3Store::from_env`].
pub async fn client_from_env(force_path_style: bool) -> Client {
    client_with(force_path_style, None).await
}

/// [`client_from_env`], signing with `credentials` when given (only this
/// client: the SDK's other clients keep the environment's).
async fn client_with(
    force_path_style: bool,
    credentials: Option<aws_sdk_s3::config::Credentials>,
) -> Client {
    let http = https_client();
    let shared = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .http_client(http)
        .retry_config(RetryConfig::disabled())
        .timeout_config(timeouts())
        .load()
        .await;
    let mut conf = aws_sdk_s3::config::Builder::from(&shared);
    if shared.region().is_none() {
        // A local S3 does not care; AWS always sets AWS_REGION in Lambda.
        conf = conf.region(aws_sdk_s3::config::Region::new("us-east-1"));
    }
    if let Some(c) = credentials {
        conf = conf.credentials_provider(c);
    }
    let conf = conf
        .force_path_style(force_path_style)
        // Checksums only where S3 requires them: the bodies are small JSON,
        // and trailing checksums cost a chunked upload on every write.
        .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
        .response_checksum_validation(ResponseChecksumValidation::WhenRequired)
        .build();
    Client::from_conf(conf)
}

/// The HTTPS client of every SDK client here: rustls on ring.
pub(crate) fn https_client() -> aws_sdk_s3::config::SharedHttpClient {
    aws_smithy_http_client::Builder::new()
        .tls_provider(aws_smithy_http_client::tls::Provider::Rustls(
            aws_smithy_http_client::tls::rustls_provider::CryptoMode::Ring,
        ))
        .build_https()
}

fn timeouts() -> TimeoutConfig {
    TimeoutConfig::builder()
        .connect_timeout(Duration::from_secs(3))
        .read_timeout(Duration::from_secs(10))
        .build()
}

/// Maps any SDK failure to the protocol's outcome.
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
            PutMode::Update(e) => req = req.if_match(&e.0),
            PutMode::Overwrite => {}
        }
        let out = req.send().await.map_err(map_err)?;
        Ok(PutResult {
            etag: etag(out.e_tag())?,
        })
    }

    async fn delete(&self, key: &str, if_match: Option<&ETag>) -> Result<(), StoreError> {
        let mut req = self.client.delete_object().bucket(&self.bucket).key(key);
        if let Some(e) = if_match {
            req = req.if_match(&e.0);
        }
        req.send().await.map_err(map_err)?;
        Ok(())
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
