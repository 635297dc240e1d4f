//! The `sweep` Lambda function. Wiring only: configuration and the S3 client
//! once (and the pass queue's, `PASS_QUEUE_URL`), then the runtime loop over
//! `lambda::handle_sweep` (the due queue's batches, the schedule and the
//! pass's continuations).

use idempotent_submit::lambda::{self, Metrics, Sweeper};
use idempotent_submit::{Config, Queue};
use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda::init_logging();
    let config = Config::from_env().map_err(|e| {
        tracing::error!(error = %e, "invalid configuration");
        e
    })?;
    let queue = Queue::from_config(&config)
        .await
        .inspect_err(|e| tracing::error!(error = %e, "cannot start"))?;
    let sweeper = &Sweeper {
        queue,
        bucket: config.bucket.clone(),
        metrics: Metrics::for_function("sweep"),
    }
    .with_pass_queue(config.pass_queue_url.clone())
    .await;
    run(service_fn(|event: LambdaEvent<Value>| async move {
        lambda::handle_sweep(sweeper, event).await
    }))
    .await
}
