//! Errors to HTTP, once: every failure of a request becomes its status and an
//! `application/problem+json` body here, and nowhere else.

use std::time::Duration;

use serde_json::{Value, json};

use crate::protocol::{ErrorKind, InputError, Reset, SubmitError};

/// An HTTP error answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    /// The HTTP status.
    pub status: u16,
    /// The stable error code (`type`'s last segment).
    pub code: &'static str,
    /// A short, fixed title.
    pub title: &'static str,
    /// What went wrong, for a person.
    pub detail: String,
    /// How long to wait before a retry, when one helps.
    pub retry_after: Option<Duration>,
    /// The task a conflict is about (a `task_id` member).
    pub task_id: Option<uuid::Uuid>,
    /// For 405: the methods the route takes.
    pub allow: Option<&'static str>,
    /// For `input_invalid`: the failures listed (bounded) and how many more
    /// there were (the `errors` and `errors_omitted` members). Boxed: every
    /// other problem carries none, and a `Problem` travels in `Result`s.
    pub input_errors: Option<Box<(Vec<InputError>, usize)>>,
}

/// What a POST takes, named by a 415's `Accept-Post`.
pub const ACCEPT_POST: &str = "application/json";

impl Problem {
    /// A problem of its parts.
    pub fn new(
        status: u16,
        code: &'static str,
        title: &'static str,
        detail: impl Into<String>,
    ) -> Self {
        Problem {
            status,
            code,
            title,
            detail: detail.into(),
            retry_after: None,
            task_id: None,
            allow: None,
            input_errors: None,
        }
    }

    /// 400: the request is invalid.
    pub fn invalid(detail: impl Into<String>) -> Self {
        Self::new(400, "invalid_request", "Invalid request", detail)
    }

    /// 404: no such resource.
    pub fn not_found(detail: impl Into<String>) -> Self {
        Self::new(404, "not_found", "Not found", detail)
    }

    /// 405: the method is not one of `allow`.
    pub fn method_not_allowed(allow: &'static str) -> Self {
        Problem {
            allow: Some(allow),
            ..Self::new(
                405,
                "method_not_allowed",
                "Method not allowed",
                format!("this route takes {allow}"),
            )
        }
    }

    /// No authenticated principal while tenant isolation is on.
    pub fn unauthenticated() -> Self {
        Self::new(
            401,
            "unauthenticated",
            "Unauthenticated",
            "tenant isolation is on and the request carries no authenticated principal; \
             call through an API Gateway authorizer (IAM, JWT, Cognito or a Lambda authorizer)",
        )
    }

    /// A body that is not JSON.
    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(
            415,
            "unsupported_media_type",
            "Unsupported media type",
            format!("the body must be {ACCEPT_POST}, not {content_type:?}"),
        )
    }

    /// A failure the caller cannot fix or retry: a generic 500.
    pub fn internal() -> Self {
        Self::new(
            500,
            "storage_error",
            "Storage error",
            "the request could not be completed; quote its instance to the operator",
        )
    }

    /// 413: the body is too large.
    pub fn too_large(detail: impl Into<String>) -> Self {
        Self::new(413, "input_too_large", "Input too large", detail)
    }

    /// A reset that did not go ahead (`DELETE /idempotency-keys/{key}`).
    pub fn from_reset(r: &Reset) -> Self {
        match r {
            Reset::Done { .. } | Reset::NotFound => {
                Self::not_found("no record holds this key in this scope")
            }
            // A reset racing a finisher could free a key whose old task is
            // then written: it waits, as a replay would.
            Reset::InProgress {
                task_id,
                retry_after,
            } => Problem {
                retry_after: Some(*retry_after),
                task_id: Some(*task_id),
                ..Self::new(
                    409,
                    "submit_in_progress",
                    "Submit in progress",
                    "a submit of this key may still write its task; nothing was written: retry after the Retry-After seconds",
                )
            },
            Reset::Changed => Self::new(
                412,
                "record_changed",
                "Record changed",
                "the key's record changed while it was being reset (a new submit replaced it); nothing was written: look the key up again",
            ),
        }
    }

    /// The one mapping of protocol outcomes to HTTP.
    pub fn from_submit(e: &SubmitError) -> Self {
        let code = e.code();
        let mut p = match e.kind() {
            ErrorKind::KeyMissing => {
                Self::new(400, code, "Idempotency key required", e.to_string())
            }
            ErrorKind::Invalid => Self::new(400, code, "Invalid request", e.to_string()),
            ErrorKind::TooLarge => Self::too_large(e.to_string()),
            ErrorKind::InputInvalid => Problem {
                input_errors: match e {
                    SubmitError::InputInvalid {
                        errors, omitted, ..
                    } => Some(Box::new((errors.clone(), *omitted))),
                    _ => None,
                },
                ..Self::new(400, code, "Input invalid", e.to_string())
            },
            ErrorKind::Conflict => Problem {
                task_id: match e {
                    SubmitError::Conflict { task_id, .. } => Some(*task_id),
                    _ => None,
                },
                ..Self::new(422, code, "Idempotency conflict", e.to_string())
            },
            // A submit still landing says nothing about our storage.
            ErrorKind::InProgress => Self::new(503, code, "Submit in progress", e.to_string()),
            // 5xx details are generic: S3's message names the role, the
            // account and the bucket, which are no caller's business. The
            // error itself goes to the log, under the request's id
            // (`instance`).
            ErrorKind::Unavailable => Self::new(
                503,
                code,
                "Storage unavailable",
                "the task store is unavailable for now; retry after the Retry-After seconds",
            ),
            ErrorKind::Broken => Self::internal(),
        };
        p.retry_after = e.retry_after();
        p
    }

    /// The problem+json body; `instance` names the request it answers (its
    /// id: what a caller quotes so that the operator finds the log line,
    /// which has the whole error).
    pub fn body_for(&self, instance: &str) -> Value {
        let mut b = self.body();
        if let Some(obj) = b.as_object_mut()
            && !instance.is_empty()
        {
            obj.insert("instance".into(), json!(instance));
        }
        b
    }

    /// The problem+json body.
    pub fn body(&self) -> Value {
        let mut b = json!({
            "type": format!("urn:idempotent-submit:problem:{}", self.code),
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
            "code": self.code,
        });
        if let (Some(id), Some(obj)) = (self.task_id, b.as_object_mut()) {
            obj.insert("task_id".into(), json!(id));
        }
        if let (Some(listed), Some(obj)) = (&self.input_errors, b.as_object_mut()) {
            let (errors, omitted) = &**listed;
            obj.insert("errors".into(), json!(errors));
            obj.insert("errors_omitted".into(), json!(omitted));
        }
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{ConflictKind, ValidationError};
    use crate::store::StoreError;

    #[test]
    fn each_outcome_has_its_status_and_code() {
        let cases = [
            (
                SubmitError::Invalid(ValidationError::field("task_type", "x")),
                400,
                "invalid_request",
            ),
            (
                SubmitError::Invalid(ValidationError::KeyRequired),
                400,
                "idempotency_key_missing",
            ),
            (
                SubmitError::InputTooLarge { size: 2, limit: 1 },
                413,
                "input_too_large",
            ),
            (
                SubmitError::Conflict {
                    kind: ConflictKind::Input,
                    task_id: uuid::Uuid::nil(),
                },
                422,
                "idempotency_conflict",
            ),
            (
                SubmitError::Storage(StoreError::Unavailable("x".into())),
                503,
                "storage_unavailable",
            ),
            (
                SubmitError::Storage(StoreError::Conflict),
                503,
                "storage_unavailable",
            ),
            (SubmitError::DeadlineExceeded, 503, "storage_unavailable"),
            (
                SubmitError::Undetermined {
                    task_id: uuid::Uuid::nil(),
                    retry_after: Duration::from_secs(7),
                },
                503,
                "submit_in_progress",
            ),
            (
                SubmitError::Storage(StoreError::Fatal("403".into())),
                500,
                "storage_error",
            ),
            (
                SubmitError::InputInvalid {
                    task_type: "t".into(),
                    errors: vec![],
                    omitted: 0,
                },
                400,
                "input_invalid",
            ),
        ];
        for (e, status, code) in cases {
            let p = Problem::from_submit(&e);
            assert_eq!((p.status, p.code), (status, code), "{e:?}");
            assert_eq!(p.retry_after.is_some(), status == 503, "{e:?}");
            let b = p.body();
            assert_eq!(b["status"], status);
            assert_eq!(b["code"], code);
            assert!(b["type"].is_string() && b["title"].is_string() && b["detail"].is_string());
        }
    }

    #[test]
    fn an_invalid_input_lists_its_failures_and_counts_the_rest() {
        let e = SubmitError::InputInvalid {
            task_type: "send_email".into(),
            errors: vec![InputError {
                pointer: "/to".into(),
                keyword: "type".into(),
                detail: "value is not of type \"string\"".into(),
            }],
            omitted: 4,
        };
        let b = Problem::from_submit(&e).body();
        assert_eq!(b["code"], "input_invalid");
        assert_eq!(b["status"], 400);
        assert_eq!(
            b["errors"],
            json!([{"pointer": "/to", "keyword": "type", "detail": "value is not of type \"string\""}])
        );
        assert_eq!(b["errors_omitted"], 4);
        // Other problems carry no list.
        assert!(Problem::invalid("x").body().get("errors").is_none());
    }
}
