//! The `sweep` Lambda function. Wiring only: configuration and the S3 client
//! once, then the runtime loop over `lambda::schedule::handle`.

use idempotent_submit::lambda::{self, Metrics, schedule};
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
    let queue = Queue::from_config(&config).await;
    let engine = queue.engine();
    let metrics = &Metrics::stdout("sweep");
    run(service_fn(|event: LambdaEvent<Value>| async move {
        schedule::handle(engine, metrics, event)
            .await
            .map_err(Error::from)
    }))
    .await
}
