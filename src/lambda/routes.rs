//! The HTTP API's routes (docs/openapi.yaml): `POST /tasks`, `POST
//! /tasks/batch` (src/lambda/batch.rs), `GET /tasks/{task_id}`, under any
//! stage name and under a function URL's root.

use serde_json::Value;
use uuid::Uuid;

use super::App;
use super::http::{HttpRequest, HttpResponse, parse_key_header, problem_response, response};
use crate::intake::{Problem, SubmitBody};
use crate::protocol::record::task_tenant;
use crate::protocol::{Submitted, Tenant};

/// How much larger than `MAX_INPUT_BYTES` a body may be (its other fields,
/// whitespace) before it is refused unread.
const BODY_OVERHEAD: usize = 64 * 1024;

/// The routes, under any stage name and under a function URL's root.
#[derive(Debug, PartialEq, Eq)]
enum Route<'a> {
    Tasks,
    Batch,
    Task(&'a str),
    None,
}

fn route<'a>(path: &'a str, stage: Option<&str>) -> Route<'a> {
    let mut segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    if let (Some(stage), Some(first)) = (stage, segs.first())
        && stage != "$default"
        && *first == stage
        && segs.len() > 1
    {
        segs.remove(0);
    }
    match segs.as_slice() {
        ["tasks"] | [_, "tasks"] => Route::Tasks,
        // Before a task's route: `batch` is no task id.
        ["tasks", "batch"] | [_, "tasks", "batch"] => Route::Batch,
        ["tasks", id] | [_, "tasks", id] => Route::Task(id),
        _ => Route::None,
    }
}

/// The new task's path as the caller addresses it: the path it posted to,
/// stage included (`/prod/tasks` gets `/prod/tasks/{id}`).
fn location(public_path: &str, task_id: Uuid) -> String {
    let base = public_path.trim_end_matches('/');
    let base = if base.ends_with("/tasks") || base == "tasks" {
        base.to_owned()
    } else {
        "/tasks".to_owned()
    };
    format!("{base}/{task_id}")
}

fn success(s: &Submitted, public_path: &str) -> HttpResponse {
    let mut headers = vec![("content-type", "application/json".to_owned())];
    if s.created() {
        headers.push(("location", location(public_path, s.task_id)));
    }
    if s.idempotency.is_some() {
        headers.push(("idempotent-replayed", s.replayed.to_string()));
    }
    let body = serde_json::to_value(s).unwrap_or(Value::Null);
    response(if s.created() { 201 } else { 200 }, headers, &body)
}

/// Handles one HTTP event; never fails (every failure is an answer). A
/// request is named by API Gateway's request id, else by Lambda's
/// (`lambda_request_id`: an event too malformed to carry one), else
/// `unknown`: every problem has an `instance`.
pub async fn handle(app: &App, event: Value, lambda_request_id: &str) -> Value {
    let fallback = if lambda_request_id.is_empty() {
        "unknown"
    } else {
        lambda_request_id
    };
    let mut req = match HttpRequest::from_event(event) {
        Ok(r) => r,
        Err(p) => {
            tracing::info!(request_id = %fallback, status = p.status, detail = %p.detail, "http request");
            return problem_response(&p, fallback).into_value();
        }
    };
    if req.request_id.is_empty() {
        req.request_id = fallback.to_owned();
    }
    let mut answer = match serve(app, &req).await {
        Ok(r) => r,
        Err(p) => problem_response(&p, &req.request_id),
    };
    let status = answer.status_code;
    tracing::info!(
        request_id = %req.request_id,
        method = %req.method,
        path = %req.path,
        status,
        "http request"
    );
    if req.v2 {
        answer.cookies = Some(Vec::new());
    }
    answer.into_value()
}

async fn serve(app: &App, req: &HttpRequest) -> Result<HttpResponse, Problem> {
    let route = route(&req.path, req.stage.as_deref());
    // Under isolation every route answers only an authenticated caller: a
    // request without a principal (no authorizer, a misconfigured one) must
    // never fall back to the shared namespace.
    let tenant = match (app.tenant_isolation, &req.principal, &route) {
        (_, _, Route::None) | (false, _, _) => None,
        (true, Some(p), _) => Some(p.as_str()),
        (true, None, _) => return Err(Problem::unauthenticated()),
    };
    match route {
        Route::Tasks if req.method == "POST" => submit(app, req, tenant).await,
        Route::Tasks => Err(Problem::method_not_allowed("POST")),
        Route::Batch if req.method == "POST" => super::batch::submit(app, req, tenant).await,
        Route::Batch => Err(Problem::method_not_allowed("POST")),
        Route::Task(id) if req.method == "GET" => get_task(app, id, tenant).await,
        Route::Task(_) => Err(Problem::method_not_allowed("GET")),
        Route::None => Err(Problem::not_found(format!("no route for {}", req.path))),
    }
}

async fn submit(
    app: &App,
    req: &HttpRequest,
    tenant: Option<&str>,
) -> Result<HttpResponse, Problem> {
    let limit = app.queue.settings().max_input_bytes;
    req.require_json()?;
    let bytes = req.body_within(limit + BODY_OVERHEAD, || {
        Problem::too_large(format!(
            "the body is far over the input limit of {limit} bytes"
        ))
    })?;
    let body = SubmitBody::parse(&bytes).map_err(|e| Problem::invalid(e.to_string()))?;
    let header_key = match req.header("idempotency-key") {
        None => None,
        Some(h) => Some(
            parse_key_header(h)
                .map_err(|e| Problem::invalid(format!("Idempotency-Key header: {e}")))?,
        ),
    };
    let key = match (header_key, body.idempotency_key.clone()) {
        (Some(h), Some(b)) if h != b => {
            return Err(Problem::invalid(
                "the Idempotency-Key header and idempotency_key in the body disagree",
            ));
        }
        (h, b) => h.or(b),
    };
    let builder = body
        .into_submit(&app.queue, key, tenant.map(str::to_owned))
        .map_err(|e| Problem::from_submit(&e.into()))?;
    let result = builder.await;
    app.metrics.submit(&result);
    match result {
        Ok(s) => {
            tracing::info!(
                request_id = %req.request_id,
                task_id = %s.task_id,
                replayed = s.replayed,
                recovered = s.recovered,
                "submitted"
            );
            Ok(success(&s, &req.public_path))
        }
        Err(e) => {
            tracing::warn!(request_id = %req.request_id, code = e.code(), error = %e, "submit failed");
            Err(Problem::from_submit(&e))
        }
    }
}

/// Is this task the tenant's? The task object's `idempotency.tenant` says,
/// while the object is as we wrote it; once a buquet worker has rewritten it
/// (and dropped `idempotency`), the seal in its id does.
fn owns(tenant: &Tenant, id: Uuid, body: &[u8]) -> bool {
    match task_tenant(body) {
        Some(t) => t == tenant.id(),
        None => tenant.sealed(id),
    }
}

/// `GET /tasks/{id}`. Under isolation, another tenant's task (or one that
/// names no tenant: submitted through SQS or the CLI) is answered exactly as
/// a task that does not exist, so that ids cannot be probed.
async fn get_task(app: &App, id: &str, tenant: Option<&str>) -> Result<HttpResponse, Problem> {
    let Ok(id) = Uuid::parse_str(id) else {
        return Err(Problem::not_found("no such task"));
    };
    let caller = tenant
        .map(Tenant::from_principal)
        .transpose()
        .map_err(|e| Problem::invalid(e.to_string()))?;
    match app.queue.task(id).await {
        Ok(Some(body)) if caller.as_ref().is_some_and(|c| !owns(c, id, &body)) => {
            Err(Problem::not_found("no such task"))
        }
        Ok(Some(body)) => {
            let v: Value = serde_json::from_slice(&body).map_err(|e| {
                tracing::error!(task_id = %id, error = %e, "the task object is not JSON");
                Problem::internal()
            })?;
            Ok(response(
                200,
                vec![("content-type", "application/json".to_owned())],
                &v,
            ))
        }
        Ok(None) => Err(Problem::not_found("no such task")),
        Err(e) => {
            tracing::warn!(task_id = %id, code = e.code(), error = %e, "reading a task failed");
            Err(Problem::from_submit(&e))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_match_under_stages_and_function_url_roots() {
        assert_eq!(route("/tasks", None), Route::Tasks);
        assert_eq!(route("/tasks/", Some("$default")), Route::Tasks);
        assert_eq!(route("/prod/tasks", Some("prod")), Route::Tasks);
        assert_eq!(route("/v1/tasks/abc", None), Route::Task("abc"));
        assert_eq!(route("/tasks/abc", Some("prod")), Route::Task("abc"));
        assert_eq!(route("/tasks/batch", None), Route::Batch);
        assert_eq!(route("/prod/tasks/batch", Some("prod")), Route::Batch);
        assert_eq!(route("/v1/tasks/batch/", Some("$default")), Route::Batch);
        assert_eq!(route("/tasks/batch/x", None), Route::None);
        assert_eq!(route("/", None), Route::None);
        assert_eq!(route("/a/b/tasks", None), Route::None);
        assert_eq!(route("/tasks/a/b", None), Route::None);
    }
}
