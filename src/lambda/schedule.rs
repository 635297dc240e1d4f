//! The scheduled pass of the `sweep` function: EventBridge Scheduler or a
//! rule (any event that is not an SQS batch), or `{}` or `{"dry_run": true}`
//! sent directly.

use std::time::{Duration as StdDuration, SystemTime};

use chrono::{DateTime, Utc};
use lambda_runtime::LambdaEvent;
use serde_json::Value;

use super::Metrics;
use crate::Queue;
use crate::protocol::{SubmitError, SweepOptions, SweepSummary};

/// How long before the invocation's deadline the sweep stops, to save its
/// place and answer.
pub const DEADLINE_MARGIN: StdDuration = StdDuration::from_secs(10);

/// Runs one sweep for one invocation, and logs its summary.
pub async fn handle(
    queue: &Queue,
    metrics: &Metrics,
    event: LambdaEvent<Value>,
) -> Result<SweepSummary, SubmitError> {
    let dry_run = event
        .payload
        .get("dry_run")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let opts = SweepOptions {
        dry_run,
        deadline: stop_at(queue, event.context.deadline()),
        max_records: None,
    };
    let summary = queue.sweep(&opts).await;
    match &summary {
        Ok(s) => super::report_sweep(
            metrics,
            &event.context.request_id,
            "scheduled pass",
            s,
            (0, 0),
        ),
        Err(e) => {
            tracing::error!(request_id = %event.context.request_id, error = %e, "sweep failed")
        }
    }
    summary
}

/// The invocation's deadline, less the margin, on the queue's clock. A
/// context without a deadline (tests, `Context::default()`) has none.
pub(crate) fn stop_at(queue: &Queue, deadline: SystemTime) -> Option<DateTime<Utc>> {
    let left = deadline.duration_since(SystemTime::now()).ok()?;
    let left = chrono::Duration::from_std(left.saturating_sub(DEADLINE_MARGIN)).ok()?;
    Some(queue.clock().now() + left)
}
