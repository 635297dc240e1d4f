//! The `submit` Lambda function (API Gateway, function URLs, SQS, and the
//! SNS, S3 and EventBridge events of `SOURCES`). Wiring only: configuration,
//! the sources and the S3 client once, then the runtime loop over
//! `lambda::handle_submit`.

use idempotent_submit::lambda::{self, App, Metrics};
use idempotent_submit::{Config, Queue};
use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda::init_logging();
    let config =
        Config::from_env().inspect_err(|e| tracing::error!(error = %e, "invalid configuration"))?;
    let queue = Queue::from_config(&config)
        .await
        .inspect_err(|e| tracing::error!(error = %e, "cannot start"))?;
    let sources = lambda::sources_from_env(config.force_path_style)
        .await
        .inspect_err(|e| tracing::error!(error = %e, "invalid configuration"))?;
    let app = App::new(queue, &config, Metrics::for_function("submit")).with_sources(sources);
    let app = &app;
    run(service_fn(move |event: LambdaEvent<Value>| async move {
        lambda::handle_submit(app, event).await
    }))
    .await
}
