//! `POST /tasks/batch` (docs/openapi.yaml): many `POST /tasks` bodies in
//! one request, `{"tasks": [...]}`, submitted as src/intake/batch.rs submits
//! a batch, answered `{"results": [...]}` in the items' order.
//!
//! Only the envelope can fail the request (a 400 that writes nothing, a 413,
//! a 415), or every item failing retryably (a 503); an item's own failure is
//! that item's result.

use serde_json::{Value, json};

use super::App;
use super::http::{HttpRequest, HttpResponse, response};
use crate::intake::batch::{item_result, prepare, submit_prepared};
use crate::intake::{Problem, SubmitBody};
use crate::protocol::{SubmitError, Submitted};

/// The largest body taken: Lambda's payload limit for a synchronous
/// invocation (6 MB), which no event that reached the function can pass;
/// anything larger (a local front, a test) is refused unread.
pub const BODY_LIMIT: usize = 6 * 1024 * 1024;

/// Handles `POST /tasks/batch` for the caller `tenant` (already required
/// under isolation).
pub async fn submit(
    app: &App,
    req: &HttpRequest,
    tenant: Option<&str>,
) -> Result<HttpResponse, Problem> {
    let items = read_envelope(req, app.queue.settings().max_batch_tasks)?;
    let principal = tenant.map(str::to_owned);
    let prepared = items
        .into_iter()
        .map(|item| prepare(&app.queue, SubmitBody::from_value(item), principal.clone()))
        .collect();
    let results = submit_prepared(&app.queue, prepared).await;
    app.metrics.batch(&results);
    log_results(&req.request_id, &results);
    if let Some(p) = all_retryable(&results) {
        return Err(p);
    }
    let body: Vec<Value> = results
        .iter()
        .map(|r| item_result(r, &req.request_id))
        .collect();
    Ok(response(
        200,
        vec![("content-type", "application/json".to_owned())],
        &json!({ "results": body }),
    ))
}

/// The items of the request's envelope, or the problem that refuses the
/// whole batch (and writes nothing): a body that is not JSON, too large, or
/// not an envelope, and the headers a batch cannot take.
fn read_envelope(req: &HttpRequest, max_tasks: usize) -> Result<Vec<Value>, Problem> {
    req.require_json()?;
    // One header cannot be the key of many items, and applying it to one of
    // them would be a guess.
    if req.header("idempotency-key").is_some() {
        return Err(Problem::invalid(
            "the Idempotency-Key header is refused on /tasks/batch: each task carries its own idempotency_key",
        ));
    }
    let too_large = || {
        Problem::too_large(format!(
            "the body is over the invocation payload limit of {BODY_LIMIT} bytes; send fewer tasks per batch"
        ))
    };
    let bytes = req.body_within(BODY_LIMIT, too_large)?;
    envelope(&bytes, max_tasks)
}

fn log_results(request_id: &str, results: &[Result<Submitted, SubmitError>]) {
    for (item, r) in results.iter().enumerate() {
        match r {
            Ok(s) => tracing::info!(
                request_id = %request_id,
                item,
                status = if s.created() { 201 } else { 200 },
                task_id = %s.task_id,
                replayed = s.replayed,
                recovered = s.recovered,
                "batch item submitted"
            ),
            Err(e) => tracing::warn!(
                request_id = %request_id,
                item,
                status = Problem::from_submit(e).status,
                code = e.code(),
                error = %e,
                "batch item failed"
            ),
        }
    }
}

/// The items of a batch body, or the 400 of a malformed envelope.
fn envelope(bytes: &[u8], max: usize) -> Result<Vec<Value>, Problem> {
    let v: Value = serde_json::from_slice(bytes)
        .map_err(|e| Problem::invalid(format!("body: is not valid JSON: {e}")))?;
    let Value::Object(mut obj) = v else {
        return Err(Problem::invalid(
            "body: must be a JSON object, {\"tasks\": [...]}",
        ));
    };
    if let Some(unknown) = obj.keys().find(|k| *k != "tasks") {
        return Err(Problem::invalid(format!(
            "body: unknown field {unknown:?} (expected tasks)"
        )));
    }
    match obj.remove("tasks") {
        None | Some(Value::Null) => Err(Problem::invalid(
            "tasks: is required (a list of POST /tasks bodies)",
        )),
        Some(Value::Array(a)) if a.is_empty() => {
            Err(Problem::invalid("tasks: must hold at least one task"))
        }
        Some(Value::Array(a)) if a.len() > max => Err(Problem::invalid(format!(
            "tasks: {} tasks; a batch holds at most {max} (MAX_BATCH_TASKS)",
            a.len()
        ))),
        Some(Value::Array(a)) => Ok(a),
        Some(_) => Err(Problem::invalid(
            "tasks: must be a list of POST /tasks bodies",
        )),
    }
}

/// The 503 of a batch whose every item failed retryably: the whole batch
/// may be sent again as it is. `submit_in_progress` when that is every
/// item's failure, else `storage_unavailable`; the longest `Retry-After` of
/// the items.
fn all_retryable(results: &[Result<Submitted, SubmitError>]) -> Option<Problem> {
    let errors: Vec<&SubmitError> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    if errors.len() != results.len() || !errors.iter().all(|e| e.is_retryable()) {
        return None;
    }
    let worst = errors
        .iter()
        .find(|e| !matches!(e, SubmitError::Undetermined { .. }))
        .or(errors.first())?;
    let mut p = Problem::from_submit(worst);
    p.detail = format!(
        "every task of the batch failed and may succeed later: {}; send the batch again (each task replays on its own key)",
        p.detail
    );
    p.retry_after = errors.iter().filter_map(|e| e.retry_after()).max();
    Some(p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn code(body: &str, max: usize) -> Result<usize, String> {
        envelope(body.as_bytes(), max)
            .map(|v| v.len())
            .map_err(|p| format!("{} {}", p.status, p.detail))
    }

    #[test]
    fn only_a_list_of_one_to_max_tasks_is_an_envelope() {
        assert_eq!(code(r#"{"tasks":[1,{}]}"#, 2), Ok(2));
        for bad in [
            "",
            "[]",
            r#"{"tasks":[]}"#,
            r#"{"tasks":{}}"#,
            r#"{"tasks":null}"#,
            r#"{}"#,
            r#"{"tasks":[1],"more":1}"#,
            r#"{"tasks":[1,2,3]}"#,
        ] {
            let e = code(bad, 2).unwrap_err();
            assert!(e.starts_with("400 "), "{bad}: {e}");
        }
        assert!(
            code(r#"{"tasks":[1,2,3]}"#, 2)
                .unwrap_err()
                .contains("at most 2")
        );
    }

    #[test]
    fn a_batch_is_503_only_when_every_item_failed_retryably() {
        let undetermined = |s| SubmitError::Undetermined {
            task_id: uuid::Uuid::nil(),
            retry_after: Duration::from_secs(s),
        };
        let p = all_retryable(&[Err(undetermined(3)), Err(undetermined(7))]).unwrap();
        assert_eq!((p.status, p.code), (503, "submit_in_progress"));
        assert_eq!(p.retry_after, Some(Duration::from_secs(7)));
        let p = all_retryable(&[Err(undetermined(3)), Err(SubmitError::DeadlineExceeded)]).unwrap();
        assert_eq!((p.status, p.code), (503, "storage_unavailable"));
        assert_eq!(p.retry_after, Some(Duration::from_secs(3)));
        let invalid = SubmitError::InputTooLarge { size: 2, limit: 1 };
        assert!(all_retryable(&[Err(undetermined(3)), Err(invalid)]).is_none());
        assert!(
            all_retryable(&[Err(SubmitError::Storage(crate::StoreError::Fatal(
                "403".into()
            )))])
            .is_none()
        );
    }
}
