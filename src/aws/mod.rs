//! Every AWS SDK client this crate builds, in one place: the S3 client of
//! [`S3Store`], the SQS client of [`SqsDueSender`] and of the CLI's drain,
//! and the Secrets Manager read of a bucket's key pair. One HTTPS client
//! (rustls on ring) and one timeout policy serve them all.
//!
//! The constructors of [`S3Store`] and [`SqsDueSender`] that build a client
//! live here, not beside their types: a store or a sender takes a client and
//! knows nothing of how one is configured, so `store/` depends on the clock
//! alone and nothing under it reaches for the configuration
//! (docs/layout.md).

use std::time::Duration;

use aws_sdk_s3::config::retry::RetryConfig;
use aws_sdk_s3::config::timeout::TimeoutConfig;
use aws_sdk_s3::config::{
    Credentials, RequestChecksumCalculation, ResponseChecksumValidation, SharedHttpClient,
};

#[cfg(feature = "sqs")]
use crate::due_sender::SqsDueSender;
use crate::store::S3Store;

#[cfg(feature = "secrets")]
pub(crate) mod secret;

/// The HTTPS client of every SDK client here: rustls on ring.
fn https_client() -> SharedHttpClient {
    aws_smithy_http_client::Builder::new()
        .tls_provider(aws_smithy_http_client::tls::Provider::Rustls(
            aws_smithy_http_client::tls::rustls_provider::CryptoMode::Ring,
        ))
        .build_https()
}

/// Every request's bounds: a connection in 3 s, each read in 10 s. A hung
/// request is then an error the caller can retry, never a stuck function.
fn timeouts() -> TimeoutConfig {
    TimeoutConfig::builder()
        .connect_timeout(Duration::from_secs(3))
        .read_timeout(Duration::from_secs(10))
        .build()
}

/// An S3 client configured from the environment as the SDK reads it
/// (credentials, region, `AWS_ENDPOINT_URL_S3`), with path-style URLs when
/// `force_path_style`, signing with `credentials` when given (only this
/// client: the SDK's other clients keep the environment's). The SDK's own
/// retries are off: the protocol retries itself, so that it can check its
/// deadlines before every attempt.
pub(crate) async fn s3_client(
    force_path_style: bool,
    credentials: Option<Credentials>,
) -> aws_sdk_s3::Client {
    let shared = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .http_client(https_client())
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
    aws_sdk_s3::Client::from_conf(conf)
}

impl S3Store {
    /// A store on a client configured from the environment (see
    /// `s3_client`: `AWS_ENDPOINT_URL_S3` included), plus
    /// `S3_FORCE_PATH_STYLE`.
    pub async fn from_env(bucket: impl Into<String>, force_path_style: bool) -> Self {
        Self::new(s3_client(force_path_style, None).await, bucket)
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
            .credentials_provider(Credentials::new(
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
        Self::new(aws_sdk_s3::Client::from_conf(conf), bucket)
    }
}

/// Who retries an SQS client's failed requests.
#[cfg(feature = "sqs")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Retries {
    /// The caller, within its own deadlines: the SDK's retries are off
    /// (the submitter's due messages, retried by the engine).
    ByTheCaller,
    /// The SDK, by its standard policy (the CLI's drain of the due queue).
    ByTheSdk,
}

/// An SQS client configured from the environment as the SDK reads it (the
/// role's credentials, the region, `AWS_ENDPOINT_URL_SQS` for a local SQS).
#[cfg(feature = "sqs")]
pub(crate) async fn sqs_client(retries: Retries) -> aws_sdk_sqs::Client {
    let mut shared = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .http_client(https_client())
        .timeout_config(timeouts());
    if retries == Retries::ByTheCaller {
        shared = shared.retry_config(RetryConfig::disabled());
    }
    let shared = shared.load().await;
    let mut conf = aws_sdk_sqs::config::Builder::from(&shared);
    if shared.region().is_none() {
        conf = conf.region(aws_sdk_sqs::config::Region::new("us-east-1"));
    }
    aws_sdk_sqs::Client::from_conf(conf.build())
}

#[cfg(feature = "sqs")]
impl SqsDueSender {
    /// A sender to the queue at `queue_url` on a client configured from the
    /// environment (see `sqs_client`), with its own retries off: the engine
    /// retries, within each submit's deadline.
    pub async fn from_env(queue_url: impl Into<String>) -> Self {
        Self::new(sqs_client(Retries::ByTheCaller).await, queue_url)
    }
}

#[cfg(feature = "sqs")]
impl crate::due_sender::sqs::SqsDueQueue {
    /// The queue at `url` on a client configured from the environment (see
    /// `sqs_client`), retried by the SDK: the CLI's drain and the doctor.
    pub async fn from_env(url: impl Into<String>) -> Self {
        Self::new(sqs_client(Retries::ByTheSdk).await, url)
    }
}
