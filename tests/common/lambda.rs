//! The Lambda side: the `submit` function's `App` in process, and a built
//! binary run as Lambda runs it (under runtime_api.rs's stand-in), against
//! the moto server. Shared by the tests and the bench.

use idempotent_submit::lambda::{App, Metrics};
use idempotent_submit::{Config, ManualClock, Queue, Settings, Store};

use super::moto::moto_endpoint;
use super::runtime_api::RuntimeApi;

/// The `submit` function's configuration in the tests: tenant isolation on
/// or off, `settings`; the bucket is named by no request (the queue's store
/// is the test's), and record events come from the bucket.
pub fn config(tenant_isolation: bool, settings: Settings) -> Config {
    Config {
        bucket: "unused".into(),
        force_path_style: true,
        tenant_isolation,
        allow_key_reset: false,
        settings,
        record_events: idempotent_submit::RecordEvents::Bucket,
        due_queue_url: None,
        due_message: Default::default(),
        pass_queue_url: None,
        s3_credentials_secret: None,
    }
}

/// The `submit` function's `App` over `queue`, with tenant isolation on or
/// off, collecting its metrics. (The rest of a `Config` is the queue's.)
pub fn app(queue: Queue, tenant_isolation: bool) -> App {
    let cfg = config(tenant_isolation, Settings::default());
    App::new(queue, &cfg, Metrics::collecting("submit"))
}

/// The `submit` function's `App` over `store`, on `clock` (the system's
/// where none), with tenant isolation on or off and `settings`.
pub fn app_over(
    store: impl Store,
    clock: Option<&ManualClock>,
    tenant_isolation: bool,
    settings: Settings,
) -> App {
    let queue = match clock {
        Some(c) => Queue::with_clock(store, std::sync::Arc::new(c.clone()), settings),
        None => Queue::new(store, settings),
    };
    app(queue, tenant_isolation)
}

/// The binary `bin` as Lambda starts it, as function `name` with 256 MB
/// (template.yaml's MemorySize): under the runtime API stand-in `api`, on
/// `bucket` of the moto server. The caller says where its output goes and
/// spawns it.
pub fn function(bin: &str, name: &str, api: &RuntimeApi, bucket: &str) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(bin);
    cmd.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("AWS_LAMBDA_RUNTIME_API", &api.addr)
        .env("AWS_LAMBDA_FUNCTION_NAME", name)
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256")
        .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        .env("AWS_LAMBDA_LOG_STREAM_NAME", "stream")
        .env("AWS_LAMBDA_LOG_GROUP_NAME", "group")
        .env("BUCKET_NAME", bucket)
        .env("AWS_ENDPOINT_URL_S3", moto_endpoint())
        .env("S3_FORCE_PATH_STYLE", "true")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "us-east-1")
        .kill_on_drop(true);
    cmd
}
