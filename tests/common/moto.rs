//! The moto server the tests talk to (the one `make test` started, named by
//! `S3_TEST_ENDPOINT`, or one this process starts), fresh buckets on it, and
//! its SQS. Shared by the tests and the bench.
//!
//! A test that needs S3 fails when no S3 can be had: it never skips.

use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use idempotent_submit::store::S3Store;

pub fn moto_endpoint() -> String {
    static ENDPOINT: OnceLock<String> = OnceLock::new();
    ENDPOINT
        .get_or_init(|| match std::env::var("S3_TEST_ENDPOINT") {
            Ok(e) if !e.is_empty() => e,
            _ => start_moto(),
        })
        .clone()
}

/// A moto server of this test process's own, apart from the one the other
/// tests share ([`moto_endpoint`]): for a world that loads it as a whole
/// service does (tests/chaos.rs), which would starve the others' attempts on
/// a server that serves one request at a time, and be slowed by them.
pub fn own_moto() -> String {
    static ENDPOINT: OnceLock<String> = OnceLock::new();
    ENDPOINT.get_or_init(start_moto).clone()
}

/// Starts moto through scripts/with-moto.sh (the start-up `make test` uses,
/// with the pinned tools of .venv/).
fn start_moto() -> String {
    let [endpoint] = <[String; 1]>::try_from(start_watched("with-moto.sh", &["S3_TEST_ENDPOINT"]))
        .expect("one line asked, one line read");
    if comes_up(&endpoint, Duration::from_secs(30)) {
        return endpoint;
    }
    panic!("moto_server did not come up ({endpoint:?}): see scripts/with-moto.sh's output above");
}

/// Runs `scripts/<script>` around a shell that prints each of `vars` (what
/// the script set up), one a line, then waits until this test process is
/// gone and ends, taking the server with it; the lines, trimmed (empty
/// where the script printed nothing).
pub fn start_watched(script: &str, vars: &[&str]) -> Vec<String> {
    use std::io::BufRead;
    let echoes: String = vars.iter().map(|v| format!("echo \"${v}\"; ")).collect();
    let watch = format!(
        "{echoes}while kill -0 {parent} 2>/dev/null; do sleep 1; done",
        parent = std::process::id(),
    );
    let path = format!("{}/scripts/{script}", env!("CARGO_MANIFEST_DIR"));
    let mut child = Command::new(&path)
        .args(["sh", "-c", &watch])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start scripts/{script} ({e}): run `make test`"));
    let mut out = child.stdout.take().map(std::io::BufReader::new);
    let lines = vars
        .iter()
        .map(|_| {
            let mut line = String::new();
            if let Some(out) = out.as_mut() {
                let _ = out.read_line(&mut line);
            }
            line.trim().to_owned()
        })
        .collect();
    // The watcher outlives this function on purpose (see above).
    std::mem::forget(child);
    lines
}

/// Whether `endpoint` (`http://host:port`) takes a TCP connection within
/// `wait`; an empty endpoint never does.
pub fn comes_up(endpoint: &str, wait: Duration) -> bool {
    let addr = endpoint.trim_start_matches("http://");
    let deadline = Instant::now() + wait;
    while !addr.is_empty() && Instant::now() < deadline {
        if std::net::TcpStream::connect(addr).is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
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
    moto_store_at(&moto_endpoint(), versioning).await
}

/// A store on a new, empty bucket of the moto server at `endpoint`.
pub async fn moto_store_at(endpoint: &str, versioning: Versioning) -> S3Store {
    let store = S3Store::for_endpoint(endpoint, fresh_bucket_name("t"));
    create_bucket(&store, versioning, "moto").await;
    store
}

/// A bucket name no other test of any run has used: `prefix`, the process,
/// a count, a random number.
pub fn fresh_bucket_name(prefix: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "{prefix}{}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst),
        fastrand::u32(..)
    )
}

/// Creates `store`'s bucket on `server` (its name, for the panic), and
/// turns versioning on when asked.
pub async fn create_bucket(store: &S3Store, versioning: Versioning, server: &str) {
    let bucket = store.bucket();
    store
        .client()
        .create_bucket()
        .bucket(bucket)
        .send()
        .await
        .unwrap_or_else(|e| panic!("creating bucket {bucket} on {server}: {e:?}"));
    if versioning == Versioning::On {
        store
            .client()
            .put_bucket_versioning()
            .bucket(bucket)
            .versioning_configuration(
                aws_sdk_s3::types::VersioningConfiguration::builder()
                    .status(aws_sdk_s3::types::BucketVersioningStatus::Enabled)
                    .build(),
            )
            .send()
            .await
            .unwrap_or_else(|e| panic!("enabling versioning on {bucket}: {e:?}"));
    }
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

/// An SQS client on the moto server (moto's S3 sends its event
/// notifications to its own queues).
pub fn moto_sqs() -> aws_sdk_sqs::Client {
    moto_sqs_at(&moto_endpoint())
}

/// An SQS client on the moto server at `endpoint`.
pub fn moto_sqs_at(endpoint: &str) -> aws_sdk_sqs::Client {
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(aws_smithy_http_client::tls::Provider::Rustls(
            aws_smithy_http_client::tls::rustls_provider::CryptoMode::Ring,
        ))
        .build_https();
    let conf = aws_sdk_sqs::config::Builder::new()
        .behavior_version(aws_sdk_sqs::config::BehaviorVersion::latest())
        .http_client(http)
        .endpoint_url(endpoint)
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
    moto_due_queue_at(&moto_endpoint(), store, delay_seconds).await
}

/// The same, on the moto server at `endpoint` (`store`'s, for its events).
pub async fn moto_due_queue_at(endpoint: &str, store: &S3Store, delay_seconds: u32) -> String {
    let url = moto_queue_at(endpoint, &format!("due-{}", store.bucket()), delay_seconds).await;
    let arn = queue_arn(&moto_sqs_at(endpoint), &url).await;
    notify_queue(store, "idempotency/", &arn).await;
    url
}

/// `store`'s bucket notifies the queue `arn` of every object created under
/// `prefix` (the one notification it has).
pub async fn notify_queue(store: &S3Store, prefix: &str, arn: &str) {
    use aws_sdk_s3::types::{
        Event, FilterRule, FilterRuleName, NotificationConfiguration,
        NotificationConfigurationFilter, QueueConfiguration, S3KeyFilter,
    };
    let rule = FilterRule::builder()
        .name(FilterRuleName::Prefix)
        .value(prefix)
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
}

/// The ARN of the queue at `url` (what a bucket's notification and an SQS
/// event name it by).
pub async fn queue_arn(sqs: &aws_sdk_sqs::Client, url: &str) -> String {
    sqs.get_queue_attributes()
        .queue_url(url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::QueueArn)
        .send()
        .await
        .expect("the due queue's ARN")
        .attributes
        .and_then(|a| {
            a.get(&aws_sdk_sqs::types::QueueAttributeName::QueueArn)
                .cloned()
        })
        .expect("a queue ARN")
}

/// A queue on moto's SQS named `name`, with the due queue's settings (its
/// delay, and a message handed back comes again a second later), and no
/// bucket sending to it: a due queue under `RECORD_EVENTS=submitter`.
pub async fn moto_queue(name: &str, delay_seconds: u32) -> String {
    moto_queue_at(&moto_endpoint(), name, delay_seconds).await
}

/// The same, on the moto server at `endpoint`.
pub async fn moto_queue_at(endpoint: &str, name: &str, delay_seconds: u32) -> String {
    moto_sqs_at(endpoint)
        .create_queue()
        .queue_name(name)
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
        .expect("a queue URL")
}

/// Every message the queue has now (short polls until one comes back
/// empty), left invisible for `visibility` seconds.
pub async fn receive_all(url: &str, visibility: i32) -> Vec<aws_sdk_sqs::types::Message> {
    let sqs = moto_sqs();
    let mut out = Vec::new();
    loop {
        let got = receive_now(&sqs, url, Some(visibility)).await;
        if got.is_empty() {
            return out;
        }
        out.extend(got);
    }
}

/// One short poll of the queue at `url`: up to ten messages, left invisible
/// for `visibility` seconds (the queue's own timeout if none).
pub async fn receive_now(
    sqs: &aws_sdk_sqs::Client,
    url: &str,
    visibility: Option<i32>,
) -> Vec<aws_sdk_sqs::types::Message> {
    sqs.receive_message()
        .queue_url(url)
        .max_number_of_messages(10)
        .wait_time_seconds(0)
        .set_visibility_timeout(visibility)
        .send()
        .await
        .expect("receiving from moto's SQS")
        .messages
        .unwrap_or_default()
}

/// A secret on moto's Secrets Manager holding `value` (its string); its ARN.
pub async fn moto_secret(name: &str, value: &str) -> String {
    let conf = aws_sdk_secretsmanager::config::Builder::new()
        .behavior_version(aws_sdk_secretsmanager::config::BehaviorVersion::latest())
        .http_client(
            aws_smithy_http_client::Builder::new()
                .tls_provider(aws_smithy_http_client::tls::Provider::Rustls(
                    aws_smithy_http_client::tls::rustls_provider::CryptoMode::Ring,
                ))
                .build_https(),
        )
        .endpoint_url(moto_endpoint())
        .region(aws_sdk_secretsmanager::config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_secretsmanager::config::Credentials::new(
            "test", "test", None, None, "static",
        ))
        .build();
    aws_sdk_secretsmanager::Client::from_conf(conf)
        .create_secret()
        .name(name)
        .secret_string(value)
        .send()
        .await
        .expect("creating a secret on moto")
        .arn
        .expect("a secret's ARN")
}
