//! A batch of submit bodies, each submitted as if alone and all at once
//! ([`crate::Queue::submit_many`]), one result per item in the items' order:
//! `POST /tasks/batch` (src/lambda/batch.rs reads its envelope and answers
//! it) and `idem submit --batch` (one body per line) share these steps.
//!
//! An item's own failure is that item's result. No item is undone when
//! another fails: each is idempotent on its own key, so a client may send the
//! whole batch again, or only its failed items.

use serde_json::{Value, json};

use super::problem::Problem;
use super::request::SubmitBody;
use crate::protocol::{SubmitError, Submitted, ValidationError};
use crate::queue::{Queue, SubmitBuilder};

/// A batch item read as a `POST /tasks` body, with its own key: the submit,
/// or the error that is the item's result.
pub fn prepare(
    queue: &Queue,
    body: Result<SubmitBody, ValidationError>,
    principal: Option<String>,
) -> Result<SubmitBuilder<'_>, SubmitError> {
    let body = body?;
    let key = body.idempotency_key.clone();
    Ok(body.into_submit(queue, key, principal)?)
}

/// Submits the items that could be read all at once ([`Queue::submit_many`]),
/// each as if alone; one result per item, in order, an unread item's being
/// its own error.
pub async fn submit_prepared<'q>(
    queue: &'q Queue,
    prepared: Vec<Result<SubmitBuilder<'q>, SubmitError>>,
) -> Vec<Result<Submitted, SubmitError>> {
    let mut builders = Vec::with_capacity(prepared.len());
    let mut unread: Vec<Option<SubmitError>> = Vec::with_capacity(prepared.len());
    for item in prepared {
        match item {
            Ok(b) => {
                builders.push(b);
                unread.push(None);
            }
            Err(e) => unread.push(Some(e)),
        }
    }
    let mut sent = queue.submit_many(builders).await.into_iter();
    unread
        .into_iter()
        .map(|u| match u {
            Some(e) => Err(e),
            // submit_many answers once per builder; a missing answer would
            // be a bug, reported as retryable rather than as a success.
            None => sent.next().unwrap_or(Err(SubmitError::DeadlineExceeded)),
        })
        .collect()
}

/// One item's result as a batch answers it: the success body with its
/// `status_code` (201, 200), or its problem (`instance`: the request's id,
/// if it has one).
pub fn item_result(r: &Result<Submitted, SubmitError>, instance: &str) -> Value {
    match r {
        Ok(s) => {
            let mut v = serde_json::to_value(s).unwrap_or(Value::Null);
            v["status_code"] = json!(if s.created() { 201 } else { 200 });
            v
        }
        Err(e) => Problem::from_submit(e).body_for(instance),
    }
}
