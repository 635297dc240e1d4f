//! Lambda event adapters: they read Lambda's events (API Gateway, function
//! URLs, SQS, the schedule) and write Lambda's answers, over what every door
//! shares (src/intake/). Plain async functions over the library, tested
//! directly with `LambdaEvent::new(event, Context::default())`; the binaries
//! in `src/bin/` only wire them to the runtime.

pub mod batch;
pub mod due_queue;
pub mod http;
pub mod keys;
pub mod metrics;
pub mod pass_queue;
pub mod routes;
pub mod schedule;
pub mod sources;
pub mod sqs;

use std::sync::Arc;

use lambda_runtime::LambdaEvent;
use serde_json::Value;
use tracing_subscriber::filter::Targets;

use crate::config::Config;
use crate::intake::sources::Sources;
use crate::protocol::SweepSummary;
use crate::queue::Queue;

pub use metrics::Metrics;

/// What the `submit` function holds between invocations.
#[derive(Clone)]
pub struct App {
    /// The queue every door submits to.
    pub queue: Queue,
    /// `TENANT_ISOLATION`.
    pub tenant_isolation: bool,
    /// `DELETE /idempotency-keys/{key}` is routed (`ALLOW_KEY_RESET`).
    pub allow_key_reset: bool,
    /// How many messages of a standard batch (or FIFO groups) run at once.
    pub sqs_concurrency: usize,
    /// Where its metrics go.
    pub metrics: Metrics,
    /// The event sources of `SOURCES` (none by default).
    pub sources: Arc<Sources>,
}

impl App {
    /// The function's state, from the queue and the configuration.
    pub fn new(queue: Queue, config: &Config, metrics: Metrics) -> Self {
        App {
            queue,
            tenant_isolation: config.tenant_isolation,
            allow_key_reset: config.allow_key_reset,
            sqs_concurrency: 10,
            metrics,
            sources: Arc::new(Sources::none()),
        }
    }

    /// This app, taking the events `sources` declares.
    pub fn with_sources(mut self, sources: Sources) -> Self {
        self.sources = Arc::new(sources);
        self
    }
}

/// The sources of `SOURCES` (inline JSON, or an `s3://` object read now),
/// for the `submit` binary to read once at its start: the binary reaches
/// the intake layer through this adapter, as through every other.
pub async fn sources_from_env(force_path_style: bool) -> Result<Sources, crate::ConfigError> {
    crate::intake::sources::load::from_env(force_path_style).await
}

/// What became of one SQS message (src/lambda/sqs.rs), whichever reading
/// of its body took it (src/lambda/sources.rs for another system's shape).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Submitted: a new task or a replay.
    Submitted,
    /// Written to `rejected/`: never retried.
    Rejected,
    /// Listed in `batchItemFailures`.
    Retry,
    /// Acknowledged with nothing to do (S3's test event).
    Ignored,
}

/// An event the `submit` function does not take.
#[derive(Debug, thiserror::Error)]
pub enum UnrecognizedEvent {
    /// Neither an HTTP request nor an SQS batch (nor a declared source's event).
    #[error(
        "unrecognized event: neither an HTTP request nor an SQS batch (nor, with SOURCES declared, an SNS, S3 or EventBridge event)"
    )]
    Shape,
    /// `Records` from a source other than SQS: an S3 notification or an SNS
    /// message wired to `submit` by mistake. Refused whole, so that nothing
    /// is written (it is no submit, and its records share no message id).
    #[error(
        "unrecognized event: Records from {0:?}; the submit function takes HTTP requests and SQS batches (eventSource aws:sqs), and aws:sns or aws:s3 Records only when SOURCES declares sources"
    )]
    Records(String),
}

/// The `eventSource` of every record of an event's `Records`, when every one
/// is `aws:sqs`: an SQS batch. Otherwise the sources found (S3 records carry
/// `eventSource`, SNS records `EventSource`), for the error.
fn sqs_records(records: &Value) -> Result<(), String> {
    let sources: Vec<&str> = records
        .as_array()
        .map(|a| {
            a.iter()
                .map(|r| {
                    r.get("eventSource")
                        .or_else(|| r.get("EventSource"))
                        .and_then(Value::as_str)
                        .unwrap_or("")
                })
                .collect()
        })
        .unwrap_or_default();
    if sources.is_empty() || sources.iter().any(|s| *s != "aws:sqs") {
        let mut named = sources;
        named.dedup();
        return Err(named.join(","));
    }
    Ok(())
}

/// The `submit` function: HTTP events (REST, HTTP API, function URLs) and
/// SQS batches, told apart by their records' `eventSource`; with `SOURCES`,
/// SNS and S3 `Records` and EventBridge events too (src/lambda/sources.rs).
pub async fn handle_submit(
    app: &App,
    event: LambdaEvent<Value>,
) -> Result<Value, lambda_runtime::Error> {
    let (payload, context) = (event.payload, event.context);
    let answer = if !app.sources.is_empty() && sources::is_direct(&payload) {
        sources::handle_direct(app, payload).await?
    } else if let Some(records) = payload.get("Records") {
        sqs_records(records).map_err(UnrecognizedEvent::Records)?;
        let batch: aws_lambda_events::sqs::SqsEvent = serde_json::from_value(payload)?;
        let resp = sqs::handle(app, batch).await;
        serde_json::to_value(resp)?
    } else if http::HttpRequest::looks_like(&payload) {
        routes::handle(app, payload, &context.request_id).await
    } else {
        return Err(UnrecognizedEvent::Shape.into());
    };
    // Every door's submits read schemas through the one engine: its count of
    // unusable ones becomes one metric line per invocation (Lambda runs one
    // invocation at a time per process, so it is this invocation's).
    app.metrics
        .invalid_schemas(app.queue.engine().take_unusable_schemas());
    // Likewise the due messages that could not be sent (RECORD_EVENTS=submitter).
    app.metrics
        .unsent_due_messages(app.queue.engine().take_unsent_due_messages());
    Ok(answer)
}

/// What the `sweep` function holds between invocations.
#[derive(Clone)]
pub struct Sweeper {
    /// The queue it sweeps.
    pub queue: Queue,
    /// The bucket whose record events this function takes.
    pub bucket: String,
    /// Where its metrics go.
    pub metrics: Metrics,
}

impl Sweeper {
    /// This sweeper, its scheduled passes handing their continuations to
    /// the pass queue at `url` (`PASS_QUEUE_URL`); unchanged without one (a
    /// pass that outlasts its invocation goes on at the next scheduled run).
    pub async fn with_pass_queue(mut self, url: Option<String>) -> Self {
        if let Some(url) = url {
            let hand_on = pass_queue::SqsHandOn::from_env(url).await;
            self.queue = self.queue.with_pass_hand_on(Arc::new(hand_on));
        }
        self
    }

    /// This sweeper, its scheduled passes handing their continuations to
    /// `hand_on` (the tests' pass queue: moto's, or one in memory).
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    pub fn with_hand_on(mut self, hand_on: Arc<dyn crate::protocol::HandOn>) -> Self {
        self.queue = self.queue.with_pass_hand_on(hand_on);
        self
    }
}

/// An event the `sweep` function does not take.
#[derive(Debug, thiserror::Error)]
#[error(
    "unrecognized event: Records from {0:?}; the sweep function takes an SQS batch of the due queue or a scheduled event"
)]
pub struct UnrecognizedSweepEvent(String);

/// The `sweep` function: a batch of the due queue (told by its records'
/// `eventSource`, `aws:sqs`) answers an SQS partial batch response, as a
/// batch of the pass queue does (told by its first body, a continuation of
/// a pass, `{"sweep_pass": ...}`, or the schedule's, `{"schedule": ...}`); any
/// other event without `Records` (EventBridge Scheduler, `{}`) runs the
/// scheduled pass and answers its summary. `Records` from another source (an
/// S3 notification sent straight to the function, SNS) is refused.
pub async fn handle_sweep(
    sweeper: &Sweeper,
    event: LambdaEvent<Value>,
) -> Result<Value, lambda_runtime::Error> {
    let queue = &sweeper.queue;
    let (payload, context) = (event.payload, event.context);
    if let Some(records) = payload.get("Records") {
        sqs_records(records).map_err(UnrecognizedSweepEvent)?;
        let batch: aws_lambda_events::sqs::SqsEvent = serde_json::from_value(payload)?;
        let of_the_pass = batch
            .records
            .first()
            .is_some_and(|m| m.body.as_deref().and_then(schedule::pass_message).is_some());
        if of_the_pass {
            let event = LambdaEvent::new(batch, context);
            let resp = schedule::handle_continuations(queue, &sweeper.metrics, event).await;
            return Ok(serde_json::to_value(resp)?);
        }
        let resp = due_queue::handle(
            queue,
            &sweeper.metrics,
            &sweeper.bucket,
            LambdaEvent::new(batch, context),
        )
        .await;
        return Ok(serde_json::to_value(resp)?);
    }
    let summary =
        schedule::handle(queue, &sweeper.metrics, LambdaEvent::new(payload, context)).await?;
    Ok(serde_json::to_value(summary)?)
}

/// Logs and counts a sweep's summary, the scheduled pass's or a due
/// batch's (`source`), the same way: one log line with every count, one
/// metric line. `(messages, retried)`: the due batch's messages and those
/// handed back to the queue (none for a pass).
pub(crate) fn report_sweep(
    metrics: &Metrics,
    request_id: &str,
    source: &'static str,
    s: &SweepSummary,
    counts: (usize, usize),
) {
    metrics.sweep(s);
    log_sweep(request_id, source, s, counts);
}

/// A sweep's summary, logged as [`report_sweep`] logs it, without metrics.
pub(crate) fn log_sweep(
    request_id: &str,
    source: &'static str,
    s: &SweepSummary,
    (messages, retried): (usize, usize),
) {
    tracing::info!(
        request_id = %request_id,
        source,
        messages,
        retried,
        scanned = s.scanned,
        reads = s.reads,
        lists = s.lists,
        finished = s.finished,
        expired_deleted = s.expired_deleted,
        payloads_deleted = s.payloads_deleted,
        markers_deleted = s.markers_deleted,
        errors = s.errors,
        past_deadline = s.past_deadline,
        early = s.early,
        no_record_yet = s.no_record_yet,
        due_no_record = s.due_no_record,
        ignored = s.ignored,
        unrecognized = s.unrecognized,
        complete = s.complete,
        resumed = s.resumed,
        busy = s.busy,
        dry_run = s.dry_run,
        "sweep summary"
    );
}

/// JSON log lines through tracing, for every function, at the level of
/// [`log_filter`].
pub fn init_logging() {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = log_filter(
        std::env::var("AWS_LAMBDA_LOG_LEVEL").ok().as_deref(),
        std::env::var("RUST_LOG").ok().as_deref(),
    );
    let fmt = tracing_subscriber::fmt::layer()
        .json()
        .with_current_span(false)
        .with_target(false)
        .without_time();
    let _ = tracing_subscriber::registry()
        .with(fmt)
        .with(filter)
        .try_init();
}

/// The log level: Lambda's own setting first (`AWS_LAMBDA_LOG_LEVEL`, set by
/// the function's logging configuration: `TRACE` to `FATAL`), then
/// `RUST_LOG` (`info`, `idempotent_submit=debug,warn`), then `INFO`. Read
/// with `Targets`, not a full `EnvFilter`, which brings a regex engine (a
/// megabyte of binary) for forms nobody uses here.
pub fn log_filter(lambda_level: Option<&str>, rust_log: Option<&str>) -> Targets {
    let lambda = lambda_level.and_then(|l| match l.trim().to_ascii_uppercase().as_str() {
        "TRACE" => Some(tracing::Level::TRACE),
        "DEBUG" => Some(tracing::Level::DEBUG),
        "INFO" => Some(tracing::Level::INFO),
        "WARN" => Some(tracing::Level::WARN),
        // tracing has no FATAL: errors are the most severe it logs.
        "ERROR" | "FATAL" => Some(tracing::Level::ERROR),
        _ => None,
    });
    if let Some(level) = lambda {
        return Targets::new().with_default(level);
    }
    rust_log
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| Targets::new().with_default(tracing::Level::INFO))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::level_filters::LevelFilter;

    #[test]
    fn lambdas_log_level_comes_first_then_rust_log_then_info() {
        let level = |l: Option<&str>, r: Option<&str>| log_filter(l, r).default_level();
        assert_eq!(
            level(Some("DEBUG"), Some("error")),
            Some(LevelFilter::DEBUG)
        );
        assert_eq!(level(Some("warn"), None), Some(LevelFilter::WARN));
        assert_eq!(level(Some("FATAL"), None), Some(LevelFilter::ERROR));
        assert_eq!(
            level(Some("bogus"), Some("error")),
            Some(LevelFilter::ERROR)
        );
        assert_eq!(level(None, Some("trace")), Some(LevelFilter::TRACE));
        assert_eq!(level(None, None), Some(LevelFilter::INFO));
        // A module-level RUST_LOG still works.
        let t = log_filter(None, Some("idempotent_submit=debug,warn"));
        assert!(t.would_enable("idempotent_submit::queue", &tracing::Level::DEBUG));
        assert!(!t.would_enable("hyper", &tracing::Level::INFO));
    }
}
