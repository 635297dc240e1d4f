//! Test harness: a moto S3 server (the one `make test` started, named by
//! `S3_TEST_ENDPOINT`, or one this process starts on a free loopback port),
//! a fresh bucket per test, and the in-memory twin.
//!
//! A test that needs S3 fails when no S3 can be had: it never skips.
#![allow(dead_code)]

pub mod chaos_proxy;
pub mod openapi;
pub mod runtime_api;

use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use idempotent_submit::store::{MemoryStore, S3Store};
use idempotent_submit::{Clock, ManualClock, RetryPolicy, Settings};

pub fn moto_endpoint() -> String {
    static ENDPOINT: OnceLock<String> = OnceLock::new();
    ENDPOINT
        .get_or_init(|| match std::env::var("S3_TEST_ENDPOINT") {
            Ok(e) if !e.is_empty() => e,
            _ => start_moto(),
        })
        .clone()
}

/// Starts moto_server on a free port, watched by a shell that stops it when
/// this test process is gone.
fn start_moto() -> String {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port");
    let script = format!(
        "python3 {root}/scripts/moto_serial.py -H 127.0.0.1 -p {port} >/dev/null 2>&1 & m=$!; \
         while kill -0 {parent} 2>/dev/null && kill -0 $m 2>/dev/null; do sleep 1; done; kill $m 2>/dev/null",
        parent = std::process::id(),
        root = env!("CARGO_MANIFEST_DIR"),
    );
    // The watcher outlives this function on purpose; it ends with the
    // process, and takes moto with it.
    let child = Command::new("sh")
        .arg("-c")
        .arg(script)
        .stdin(Stdio::null())
        .spawn()
        .expect("cannot start moto_server: run `make test`, or `pip install 'moto[server]'`");
    std::mem::forget(child);
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return format!("http://127.0.0.1:{port}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("moto_server did not come up on port {port}: is `moto[server]` installed?");
}

/// Whether a test bucket keeps versions (buquet's workers want it on; the
/// protocol holds either way).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Versioning {
    Off,
    On,
}

/// A store on a new, empty, unversioned bucket of the moto server.
pub async fn moto_store() -> S3Store {
    moto_store_with(Versioning::Off).await
}

/// A store on a new, empty, versioned bucket of the moto server.
pub async fn moto_store_versioned() -> S3Store {
    moto_store_with(Versioning::On).await
}

/// A store on a new, empty bucket of the moto server, versioned or not.
pub async fn moto_store_with(versioning: Versioning) -> S3Store {
    static N: AtomicUsize = AtomicUsize::new(0);
    let bucket = format!(
        "t{}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst),
        fastrand::u32(..)
    );
    let store = S3Store::for_endpoint(&moto_endpoint(), &bucket);
    store
        .client()
        .create_bucket()
        .bucket(&bucket)
        .send()
        .await
        .unwrap_or_else(|e| panic!("creating bucket {bucket} on moto: {e:?}"));
    if versioning == Versioning::On {
        store
            .client()
            .put_bucket_versioning()
            .bucket(&bucket)
            .versioning_configuration(
                aws_sdk_s3::types::VersioningConfiguration::builder()
                    .status(aws_sdk_s3::types::BucketVersioningStatus::Enabled)
                    .build(),
            )
            .send()
            .await
            .unwrap_or_else(|e| panic!("enabling versioning on {bucket}: {e:?}"));
    }
    store
}

pub fn memory_store(clock: &ManualClock) -> MemoryStore {
    MemoryStore::new(Arc::new(clock.clone()) as Arc<dyn Clock>)
}

/// The in-memory twin of a versioned bucket.
pub fn memory_store_versioned(clock: &ManualClock) -> MemoryStore {
    MemoryStore::versioned(Arc::new(clock.clone()) as Arc<dyn Clock>)
}

/// What ListObjectVersions shows of one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KeyVersions {
    pub objects: usize,
    pub delete_markers: usize,
    pub latest_is_delete_marker: bool,
}

/// The versions and delete markers of `key` on moto.
pub async fn moto_versions(store: &S3Store, key: &str) -> KeyVersions {
    let out = store
        .client()
        .list_object_versions()
        .bucket(store.bucket())
        .prefix(key)
        .send()
        .await
        .expect("listing versions on moto");
    let mut kv = KeyVersions {
        objects: out
            .versions()
            .iter()
            .filter(|v| v.key() == Some(key))
            .count(),
        ..KeyVersions::default()
    };
    for m in out.delete_markers().iter().filter(|m| m.key() == Some(key)) {
        kv.delete_markers += 1;
        kv.latest_is_delete_marker |= m.is_latest() == Some(true);
    }
    kv
}

// Fault injection needs the testing feature.
#[cfg(feature = "testing")]
pub fn faulty(clock: &ManualClock) -> idempotent_submit::store::FaultyStore<MemoryStore> {
    idempotent_submit::store::FaultyStore::new(memory_store(clock))
}

/// Contract defaults, with retries that do not wait.
pub fn settings() -> Settings {
    Settings {
        retry: RetryPolicy::immediate(),
        ..Settings::default()
    }
}

/// Every key in a bucket, whatever store holds it.
pub async fn all_keys(store: &dyn idempotent_submit::Store) -> Vec<String> {
    let mut out = Vec::new();
    let mut page = None;
    loop {
        let p = store.list("", None, page, 1000).await.expect("listing");
        out.extend(p.objects.into_iter().map(|o| o.key));
        match p.next {
            Some(n) => page = Some(n),
            None => return out,
        }
    }
}

/// A bucket whose writes first pass through `hook(op, key)`: it can act on
/// the bucket or the clock (another writer, a slow attempt), and fail the
/// write by answering an error. Fault injection: the testing feature.
#[cfg(feature = "testing")]
#[derive(Clone)]
pub struct Intercept<F> {
    pub inner: MemoryStore,
    pub hook: F,
}

#[cfg(feature = "testing")]
type HookResult = Option<idempotent_submit::StoreError>;

#[cfg(feature = "testing")]
#[async_trait::async_trait]
impl<F> idempotent_submit::Store for Intercept<F>
where
    F: Fn(idempotent_submit::store::Op, &str) -> HookResult + Clone + Send + Sync + 'static,
{
    fn clock_offset(&self) -> Option<idempotent_submit::clock::Offset> {
        self.inner.clock_offset()
    }
    async fn get(
        &self,
        key: &str,
    ) -> Result<idempotent_submit::store::Object, idempotent_submit::StoreError> {
        self.inner.get(key).await
    }
    async fn head(
        &self,
        key: &str,
    ) -> Result<idempotent_submit::store::ObjectMeta, idempotent_submit::StoreError> {
        self.inner.head(key).await
    }
    async fn put(
        &self,
        key: &str,
        body: bytes::Bytes,
        mode: idempotent_submit::store::PutMode,
    ) -> Result<idempotent_submit::store::PutResult, idempotent_submit::StoreError> {
        use idempotent_submit::store::{Op, PutMode};
        let op = match mode {
            PutMode::Create => Op::PutCreate,
            PutMode::Update(_) => Op::PutUpdate,
            PutMode::Overwrite => Op::Put,
        };
        if let Some(e) = (self.hook)(op, key) {
            return Err(e);
        }
        self.inner.put(key, body, mode).await
    }
    async fn delete(
        &self,
        key: &str,
        if_match: Option<&idempotent_submit::store::ETag>,
    ) -> Result<(), idempotent_submit::StoreError> {
        if let Some(e) = (self.hook)(idempotent_submit::store::Op::Delete, key) {
            return Err(e);
        }
        self.inner.delete(key, if_match).await
    }
    async fn list(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        page: Option<String>,
        limit: usize,
    ) -> Result<idempotent_submit::store::ListPage, idempotent_submit::StoreError> {
        self.inner.list(prefix, start_after, page, limit).await
    }
}

/// An SQS client on the moto server (moto's S3 sends its event
/// notifications to its own queues).
pub fn moto_sqs() -> aws_sdk_sqs::Client {
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(aws_smithy_http_client::tls::Provider::Rustls(
            aws_smithy_http_client::tls::rustls_provider::CryptoMode::Ring,
        ))
        .build_https();
    let conf = aws_sdk_sqs::config::Builder::new()
        .behavior_version(aws_sdk_sqs::config::BehaviorVersion::latest())
        .http_client(http)
        .endpoint_url(moto_endpoint())
        .region(aws_sdk_sqs::config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_sqs::config::Credentials::new(
            "test", "test", None, None, "static",
        ))
        .build();
    aws_sdk_sqs::Client::from_conf(conf)
}

/// A due queue on moto for `store`'s bucket, and the bucket's notification of
/// every record write to it (as template.yaml and `make run` set them up);
/// the queue's URL.
pub async fn moto_due_queue(store: &S3Store, delay_seconds: u32) -> String {
    use aws_sdk_s3::types::{
        Event, FilterRule, FilterRuleName, NotificationConfiguration,
        NotificationConfigurationFilter, QueueConfiguration, S3KeyFilter,
    };
    let sqs = moto_sqs();
    let url = sqs
        .create_queue()
        .queue_name(format!("due-{}", store.bucket()))
        .attributes(
            aws_sdk_sqs::types::QueueAttributeName::DelaySeconds,
            delay_seconds.to_string(),
        )
        // A message handed back comes again a second later.
        .attributes(
            aws_sdk_sqs::types::QueueAttributeName::VisibilityTimeout,
            "1",
        )
        .send()
        .await
        .expect("creating the due queue on moto")
        .queue_url
        .expect("a queue URL");
    let arn = sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::QueueArn)
        .send()
        .await
        .expect("the due queue's ARN")
        .attributes
        .and_then(|a| {
            a.get(&aws_sdk_sqs::types::QueueAttributeName::QueueArn)
                .cloned()
        })
        .expect("a queue ARN");
    let rule = FilterRule::builder()
        .name(FilterRuleName::Prefix)
        .value("idempotency/")
        .build();
    let queue = QueueConfiguration::builder()
        .queue_arn(arn)
        .events(Event::S3ObjectCreated)
        .filter(
            NotificationConfigurationFilter::builder()
                .key(S3KeyFilter::builder().filter_rules(rule).build())
                .build(),
        )
        .build()
        .expect("a queue configuration");
    store
        .client()
        .put_bucket_notification_configuration()
        .bucket(store.bucket())
        .notification_configuration(
            NotificationConfiguration::builder()
                .queue_configurations(queue)
                .build(),
        )
        .send()
        .await
        .expect("the bucket's notification configuration");
    url
}

/// Every message the queue has now (short polls until one comes back
/// empty), left invisible for `visibility` seconds.
pub async fn receive_all(url: &str, visibility: i32) -> Vec<aws_sdk_sqs::types::Message> {
    let sqs = moto_sqs();
    let mut out = Vec::new();
    loop {
        let got = sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .wait_time_seconds(0)
            .visibility_timeout(visibility)
            .send()
            .await
            .expect("receiving from moto's SQS")
            .messages
            .unwrap_or_default();
        if got.is_empty() {
            return out;
        }
        out.extend(got);
    }
}

/// Runs the built `idem` against `bucket` on moto (its S3 and SQS), with
/// `env` on top; its exit code and its JSON output.
pub async fn idem(bucket: &str, env: &[(&str, &str)], args: &[&str]) -> (i32, serde_json::Value) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("BUCKET_NAME", bucket)
        .env("AWS_ENDPOINT_URL", moto_endpoint())
        .env("S3_FORCE_PATH_STYLE", "true")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "us-east-1")
        .envs(env.iter().copied())
        .output()
        .await
        .expect("running idem");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {stdout:?} stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), v)
}

/// Messages received from moto's SQS as the SQS event Lambda would hand
/// over (`eventSource: aws:sqs`).
#[allow(dead_code)]
pub fn sqs_event(messages: &[aws_sdk_sqs::types::Message]) -> serde_json::Value {
    let mut e = aws_lambda_events::sqs::SqsEvent::default();
    e.records = messages
        .iter()
        .map(|m| {
            let mut r = aws_lambda_events::sqs::SqsMessage::default();
            r.message_id = m.message_id.clone();
            r.receipt_handle = m.receipt_handle.clone();
            r.body = m.body.clone();
            r.event_source = Some("aws:sqs".into());
            r.event_source_arn = Some("arn:aws:sqs:us-east-1:123456789012:due".into());
            r
        })
        .collect();
    serde_json::to_value(e).unwrap()
}
