//! `GET /idempotency-keys/{key}?scope=S` and, with `ALLOW_KEY_RESET=on`,
//! `DELETE` on the same path (docs/openapi.yaml; the protocol is
//! `protocol::keys`).
//!
//! The key is one path segment, percent-encoded (`/` as `%2F`, `%` as `%25`,
//! a space as `%20`, other characters as their UTF-8 bytes). Where API
//! Gateway routed the request (`/idempotency-keys/{key+}`), it has decoded
//! the key once already and passes it as the path variable `key`: that is
//! taken as it is. A function URL passes the path as the caller sent it:
//! the segment is decoded here, once. `scope` is required: a key means
//! nothing without its namespace.

use serde_json::Value;

use super::App;
use super::http::{HttpRequest, HttpResponse, percent_decode, response};
use crate::intake::Problem;
use crate::protocol::{KeyRef, Reset, Tenant};

/// The key and scope a request names, checked as `POST /tasks` checks them.
fn key_ref(req: &HttpRequest, raw: &str, tenant: Option<&str>) -> Result<KeyRef, Problem> {
    let key = match req.path_param("key") {
        Some(k) => k.to_owned(),
        None => percent_decode(raw).ok_or_else(|| {
            Problem::invalid("the key in the path is not valid percent-encoded UTF-8")
        })?,
    };
    let scope = req.query_one("scope")?.ok_or_else(|| {
        Problem::invalid(
            "scope: is required (the task type, queue, or the custom scope the key was submitted with)",
        )
    })?;
    let tenant = tenant
        .map(Tenant::from_principal)
        .transpose()
        .map_err(|e| Problem::invalid(e.to_string()))?;
    KeyRef::parse(scope, &key, tenant).map_err(|e| Problem::from_submit(&e.into()))
}

fn not_found() -> Problem {
    Problem::not_found("no record holds this key in this scope")
}

/// `GET`: the record's view, its phase and its task's status (200), or 404.
pub(super) async fn lookup(
    app: &App,
    req: &HttpRequest,
    raw: &str,
    tenant: Option<&str>,
) -> Result<HttpResponse, Problem> {
    let at = key_ref(req, raw, tenant)?;
    match app.queue.engine().lookup_key(&at).await {
        Ok(Some(view)) => Ok(response(
            200,
            vec![("content-type", "application/json".to_owned())],
            &serde_json::to_value(&view).unwrap_or(Value::Null),
        )),
        Ok(None) => Err(not_found()),
        Err(e) => {
            tracing::warn!(request_id = %req.request_id, code = e.code(), error = %e, "a key lookup failed");
            Err(Problem::from_submit(&e))
        }
    }
}

/// `DELETE`: frees the key (204, with a `Link` to the old task, which is
/// left as it is), or says why not.
pub(super) async fn reset(
    app: &App,
    req: &HttpRequest,
    raw: &str,
    tenant: Option<&str>,
) -> Result<HttpResponse, Problem> {
    let at = key_ref(req, raw, tenant)?;
    match app.queue.engine().reset_key(&at).await {
        Ok(Reset::Done { old_task_id }) => {
            app.metrics.key_reset();
            let mut r = response(
                204,
                vec![(
                    "link",
                    format!(
                        "<{}>; rel=\"related\"",
                        task_path(&req.public_path, old_task_id)
                    ),
                )],
                &Value::Null,
            );
            r.body = String::new();
            Ok(r)
        }
        Ok(Reset::NotFound) => Err(not_found()),
        Ok(other) => Err(Problem::from_reset(&other)),
        Err(e) => {
            tracing::warn!(request_id = %req.request_id, code = e.code(), error = %e, "a key reset failed");
            Err(Problem::from_submit(&e))
        }
    }
}

/// The old task's path as the caller addresses this API: `/prod/tasks/{id}`
/// for `/prod/idempotency-keys/...`.
fn task_path(public_path: &str, id: uuid::Uuid) -> String {
    let base = public_path
        .find("/idempotency-keys/")
        .map_or("", |i| &public_path[..i]);
    format!("{base}/tasks/{id}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_old_tasks_link_keeps_the_callers_stage() {
        let id = uuid::Uuid::nil();
        assert_eq!(
            task_path("/prod/idempotency-keys/a%2Fb", id),
            format!("/prod/tasks/{id}")
        );
        assert_eq!(task_path("/idempotency-keys/k", id), format!("/tasks/{id}"));
    }
}
