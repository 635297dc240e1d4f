//! The scheduled pass of the `sweep` function. In the stack, EventBridge
//! Scheduler sends a message to the pass queue, `{"schedule": "<its
//! scheduled time>"}`, so that the invocation that opens (or joins) a pass
//! is one the queue starts again if it dies before it hands on (the
//! message comes back after the queue's visibility timeout, past the
//! dead invocation's lease); the continuations a pass hands on go through
//! the same queue (`{"sweep_pass": ...}`, [`Continuation`]). Any event that
//! is not an SQS batch (a rule, an older stack's schedule, `{}` or
//! `{"dry_run": true}` sent directly) opens or joins a pass as well. Each
//! invocation runs one share of the pass (docs/protocol.md, "The scheduled
//! pass") and logs it; the invocation that ends the pass logs the pass's
//! one summary and emits its metrics, once a pass.

use std::time::{Duration as StdDuration, SystemTime};

use aws_lambda_events::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent};
use chrono::{DateTime, Utc};
use lambda_runtime::LambdaEvent;
use serde_json::Value;

use super::Metrics;
use crate::Queue;
use crate::protocol::{Continuation, ShareOutcome, SubmitError, SweepOptions, SweepSummary};
use crate::store::StoreError;

/// How long before the invocation's deadline the sweep stops, to save its
/// place and answer.
pub const DEADLINE_MARGIN: StdDuration = StdDuration::from_secs(10);

/// Runs one scheduled invocation's share of the pass, and logs it: its own
/// summary is the answer (`complete` when the pass ended in it).
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
        ..SweepOptions::default()
    };
    run_share(queue, metrics, &event.context.request_id, &opts).await
}

/// A message of the pass queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PassMessage {
    /// A continuation of a pass, handed on by one of its invocations.
    Continuation(Continuation),
    /// The schedule's: open a pass (or join the unfinished one), unless a
    /// pass begun at or after `at` (the instant it was scheduled for) is
    /// complete: then it is this message's, received again after its
    /// invocation ended the pass and died before it answered.
    Schedule {
        /// The schedule's instant (`None`: a message without one).
        at: Option<DateTime<Utc>>,
    },
}

/// The schedule's message on the pass queue (template.yaml's
/// `PassSchedule` sends it; `<aws.scheduler.scheduled-time>` is filled in).
#[derive(serde::Deserialize)]
struct ScheduleBody {
    schedule: Value,
}

/// What a pass queue message is, if it is one.
pub fn pass_message(body: &str) -> Option<PassMessage> {
    if let Ok(c) = serde_json::from_str::<Continuation>(body) {
        return Some(PassMessage::Continuation(c));
    }
    let s: ScheduleBody = serde_json::from_str(body).ok()?;
    let at = s.schedule.as_str().and_then(|t| t.parse().ok());
    Some(PassMessage::Schedule { at })
}

/// A batch of the pass queue: one share of the pass its first message
/// names, or of the pass the schedule's message opens or joins (a share is
/// an invocation's whole work; the mapping hands them over one at a time).
/// The batch is handed back whole when the share failed, or could not hand
/// on what it invited, so SQS delivers it again (and, after its receives,
/// to the pass queue's dead-letter queue): the redelivery re-drives the
/// pass.
pub async fn handle_continuations(
    queue: &Queue,
    metrics: &Metrics,
    event: LambdaEvent<SqsEvent>,
) -> SqsBatchResponse {
    let records = event.payload.records;
    let mut resp = SqsBatchResponse::default();
    let first = records
        .iter()
        .find_map(|m| m.body.as_deref().and_then(pass_message));
    let Some(first) = first else {
        tracing::warn!(
            messages = records.len(),
            "a pass queue batch without a continuation: acknowledged"
        );
        return resp;
    };
    let (continuation, scheduled_at) = match first {
        PassMessage::Continuation(c) => (Some(c), None),
        PassMessage::Schedule { at } => (None, at),
    };
    let opts = SweepOptions {
        dry_run: false,
        deadline: stop_at(queue, event.context.deadline()),
        max_records: None,
        continuation,
        scheduled_at,
    };
    let share = run_share(queue, metrics, &event.context.request_id, &opts).await;
    if share.is_err() {
        for m in records {
            let mut f = BatchItemFailure::default();
            f.item_identifier = m.message_id.unwrap_or_default();
            resp.batch_item_failures.push(f);
        }
    }
    resp
}

/// One share, logged; the pass's summary and metrics when it ended here.
/// A share that could not hand on what it invited is an error too, so that
/// its message comes again (the invitations lapse before it does).
async fn run_share(
    queue: &Queue,
    metrics: &Metrics,
    request_id: &str,
    opts: &SweepOptions,
) -> Result<SweepSummary, SubmitError> {
    let out = queue.sweep_share(opts).await;
    match &out {
        Ok(o) => report(metrics, request_id, o),
        Err(e) => tracing::error!(request_id = %request_id, error = %e, "sweep failed"),
    }
    match out {
        Ok(o) if o.hand_on_failed => Err(SubmitError::Storage(StoreError::Unavailable(
            "the pass could not hand on".into(),
        ))),
        o => o.map(|o| o.summary),
    }
}

/// The share's log line ("scheduled pass"); at the pass's end, the pass's
/// line ("pass") with its metrics, the shares it took and its length.
fn report(metrics: &Metrics, request_id: &str, o: &ShareOutcome) {
    super::log_sweep(request_id, "scheduled pass", &o.summary, (0, 0));
    if !o.handed_on.is_empty() {
        tracing::info!(request_id = %request_id, continuations = o.handed_on.len(), "the pass handed on");
    }
    if let Some(pass) = &o.pass {
        super::log_sweep(request_id, "pass", pass, (0, 0));
        let (shares, peak) = o.pass_shares.unwrap_or_default();
        let seconds = o.pass_length.map_or(0, |d| d.num_seconds().max(0) as u64);
        tracing::info!(request_id = %request_id, shares, peak_shares = peak, seconds, "pass ended");
        metrics.pass(pass, (shares, peak, seconds));
    }
}

/// The invocation's deadline, less the margin, on the queue's clock. A
/// context without a deadline (tests, `Context::default()`) has none.
pub(crate) fn stop_at(queue: &Queue, deadline: SystemTime) -> Option<DateTime<Utc>> {
    let left = deadline.duration_since(SystemTime::now()).ok()?;
    let left = chrono::Duration::from_std(left.saturating_sub(DEADLINE_MARGIN)).ok()?;
    Some(queue.clock().now() + left)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_queue_message_is_a_continuation_or_the_schedules_and_nothing_else() {
        let pass: DateTime<Utc> = "2026-03-01T03:00:00Z".parse().unwrap();
        let id = uuid::Uuid::from_u128(7);
        let with = format!(r#"{{"sweep_pass": "2026-03-01T03:00:00Z", "invite": "{id}"}}"#);
        assert_eq!(
            pass_message(&with),
            Some(PassMessage::Continuation(Continuation {
                sweep_pass: pass,
                invite: Some(id)
            }))
        );
        // An earlier version's continuation: no invitation.
        let without = r#"{"sweep_pass": "2026-03-01T03:00:00Z"}"#;
        assert!(matches!(
            pass_message(without),
            Some(PassMessage::Continuation(Continuation { invite: None, .. }))
        ));
        let scheduled = r#"{"schedule": "2026-03-01T03:00:00Z"}"#;
        assert_eq!(
            pass_message(scheduled),
            Some(PassMessage::Schedule { at: Some(pass) })
        );
        // A time that does not parse still opens or joins a pass, unguarded.
        let unparsed = r#"{"schedule": "<aws.scheduler.scheduled-time>"}"#;
        assert_eq!(
            pass_message(unparsed),
            Some(PassMessage::Schedule { at: None })
        );
        for other in [
            r#"{"Records": []}"#,
            "{}",
            "not json",
            r#"{"sweep_pass": 3}"#,
        ] {
            assert_eq!(pass_message(other), None, "{other}");
        }
    }
}
