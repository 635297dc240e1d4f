//! The protocol's one error type, and the failure of a single store call.
//! Outcomes, not HTTP codes: every adapter (HTTP, SQS, the CLI, the metrics)
//! classifies an error through [`SubmitError::kind`] alone.

use std::time::Duration as StdDuration;

use uuid::Uuid;

use super::names::ValidationError;
use crate::clock::Offset;
use crate::store::StoreError;

/// At most this many failures of an input are listed in an answer; the rest
/// are counted.
pub const MAX_LISTED_ERRORS: usize = 20;
/// A listed failure's JSON pointer is cut to this many characters.
pub const MAX_POINTER_CHARS: usize = 256;
/// A listed failure's message is cut to this many characters.
pub const MAX_DETAIL_CHARS: usize = 200;

/// One way an input fails the JSON Schema published for its task type
/// (`VALIDATE_INPUT_SCHEMAS`, src/protocol/schema.rs).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct InputError {
    /// Where in the input, as a JSON pointer (RFC 6901; `""` is the whole
    /// input), cut to [`MAX_POINTER_CHARS`].
    pub pointer: String,
    /// The JSON Schema keyword that failed (`type`, `required`, `minimum`...).
    pub keyword: String,
    /// What the rule asks, without the input's own values, cut to
    /// [`MAX_DETAIL_CHARS`].
    pub detail: String,
}

/// What differs between a replay and the record it met.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConflictKind {
    /// Another task type.
    TaskType,
    /// Another input (its canonical JSON's hash differs).
    Input,
    /// The task options (records written by this service only: buquet's
    /// clients keep no options hash).
    Options,
}

/// Every way a submit can fail. Outcomes, not HTTP codes: the HTTP edge maps
/// them in one place.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    /// The request is malformed (400).
    #[error(transparent)]
    Invalid(#[from] ValidationError),
    /// The input is over the limit (413).
    #[error("input is {size} bytes; the limit is {limit}")]
    InputTooLarge {
        /// The input's size: its canonical JSON, in bytes.
        size: usize,
        /// `MAX_INPUT_BYTES`.
        limit: usize,
    },
    /// The input fails the JSON Schema published for its task type
    /// (`VALIDATE_INPUT_SCHEMAS`): `errors` lists the first failures (at
    /// most [`MAX_LISTED_ERRORS`]), `omitted` counts the rest.
    /// Nothing was written.
    #[error("the input does not match the schema published for task type {task_type}: {}",
        input_errors_summary(.errors, *.omitted))]
    InputInvalid {
        /// The task type whose schema refused it.
        task_type: String,
        /// The first failures.
        errors: Vec<InputError>,
        /// How many more failures there were.
        omitted: usize,
    },
    /// The key is taken by a submit of another task type or input (422).
    /// Nothing was written.
    #[error("idempotency conflict: the key was used with another {}",
        match .kind { ConflictKind::TaskType => "task type", ConflictKind::Input => "input", ConflictKind::Options => "set of task options" })]
    Conflict {
        /// What differs.
        kind: ConflictKind,
        /// The task the key maps to.
        task_id: Uuid,
    },
    /// A submit of this key may still be landing: it cannot be said yet
    /// whether its task exists. Retry after `retry_after`.
    #[error("the submit of this key is still undetermined; retry in {} s", .retry_after.as_secs())]
    Undetermined {
        /// The task the key maps to, if its submit lands.
        task_id: Uuid,
        /// When a retry can tell.
        retry_after: StdDuration,
    },
    /// S3 failed after retries.
    #[error("storage: {0}")]
    Storage(StoreError),
    /// The submit's own deadline passed before it could finish.
    #[error("the operation deadline passed")]
    DeadlineExceeded,
    /// The object at `key` is not what the layout says it should be.
    #[error("corrupt object at {key}: {reason}")]
    Corrupt {
        /// The object's key.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
    /// S3's clock cannot be told well enough to judge a deadline: no answer
    /// has dated it yet, or it stands more than 60 s from ours. Nothing
    /// deadline-bound was written.
    #[error("S3's clock is {}; nothing bound by a deadline is written",
        match .offset { Some(o) => format!("{o} off ours, over the 60 s allowed"), None => "unknown".to_owned() })]
    ClockOffset {
        /// S3's time minus ours, as far as it is known.
        offset: Option<Offset>,
    },
}

impl SubmitError {
    /// What this error means to whoever answers it: the one
    /// classification that the HTTP edge, the SQS adapter, the CLI and the
    /// metrics each match totally.
    pub fn kind(&self) -> ErrorKind {
        match self {
            SubmitError::Invalid(ValidationError::KeyRequired) => ErrorKind::KeyMissing,
            SubmitError::Invalid(_) => ErrorKind::Invalid,
            SubmitError::InputTooLarge { .. } => ErrorKind::TooLarge,
            SubmitError::InputInvalid { .. } => ErrorKind::InputInvalid,
            SubmitError::Conflict { .. } => ErrorKind::Conflict,
            SubmitError::Undetermined { .. } => ErrorKind::InProgress,
            SubmitError::DeadlineExceeded | SubmitError::ClockOffset { .. } => {
                ErrorKind::Unavailable
            }
            // A crashed test process's request may be sent again by its
            // client, as any storage failure S3 may not repeat.
            #[cfg(feature = "testing")]
            SubmitError::Storage(StoreError::Crashed) => ErrorKind::Unavailable,
            SubmitError::Storage(e) if e.is_retryable() => ErrorKind::Unavailable,
            SubmitError::Storage(_) | SubmitError::Corrupt { .. } => ErrorKind::Broken,
        }
    }

    /// Would the same request, sent again later, possibly succeed?
    pub fn is_retryable(&self) -> bool {
        self.kind().is_retryable()
    }

    /// The problem code (docs/openapi.yaml), shared by the HTTP API, SQS
    /// rejections and the CLI.
    pub fn code(&self) -> &'static str {
        self.kind().code()
    }

    /// The hint for a retry, where there is one.
    pub fn retry_after(&self) -> Option<StdDuration> {
        match self {
            SubmitError::Undetermined { retry_after, .. } => Some(*retry_after),
            // A clock that far off is not fixed in a second; one that is
            // merely unknown is known after the next answer.
            SubmitError::ClockOffset { offset: Some(_) } => Some(StdDuration::from_secs(30)),
            e if e.is_retryable() => Some(StdDuration::from_secs(1)),
            _ => None,
        }
    }
}

/// What an error means to whoever answers it. Every adapter matches this
/// totally, so a new kind cannot be answered by accident.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The request is malformed: 400 `invalid_request`.
    Invalid,
    /// A key is required and none was sent: 400 `idempotency_key_missing`.
    KeyMissing,
    /// The input is over the limit: 413 `input_too_large`.
    TooLarge,
    /// The input fails its task type's published schema: 400 `input_invalid`.
    InputInvalid,
    /// The key was used with another request: 422 `idempotency_conflict`.
    Conflict,
    /// A submit of the key may still be landing: 503 `submit_in_progress`.
    InProgress,
    /// Storage, or its clock, failed for now: 503 `storage_unavailable`.
    Unavailable,
    /// Storage failed for good, or an object is not what the layout says:
    /// 500 `storage_error`.
    Broken,
}

impl ErrorKind {
    /// The problem code.
    pub fn code(self) -> &'static str {
        match self {
            ErrorKind::Invalid => "invalid_request",
            ErrorKind::KeyMissing => "idempotency_key_missing",
            ErrorKind::TooLarge => "input_too_large",
            ErrorKind::InputInvalid => "input_invalid",
            ErrorKind::Conflict => "idempotency_conflict",
            ErrorKind::InProgress => "submit_in_progress",
            ErrorKind::Unavailable => "storage_unavailable",
            ErrorKind::Broken => "storage_error",
        }
    }

    /// The same request, sent again later, may succeed.
    pub fn is_retryable(self) -> bool {
        match self {
            ErrorKind::InProgress | ErrorKind::Unavailable => true,
            ErrorKind::Invalid
            | ErrorKind::KeyMissing
            | ErrorKind::TooLarge
            | ErrorKind::InputInvalid
            | ErrorKind::Conflict
            | ErrorKind::Broken => false,
        }
    }

    /// The request itself can never succeed as sent: an SQS message of this
    /// kind is rejected (`rejected/`), not retried.
    pub fn is_the_requests_fault(self) -> bool {
        match self {
            ErrorKind::Invalid
            | ErrorKind::KeyMissing
            | ErrorKind::TooLarge
            | ErrorKind::InputInvalid
            | ErrorKind::Conflict => true,
            ErrorKind::InProgress | ErrorKind::Unavailable | ErrorKind::Broken => false,
        }
    }
}

/// How many failures, and the first, for the error's message (the list
/// itself is the problem's `errors`).
fn input_errors_summary(errors: &[InputError], omitted: usize) -> String {
    let n = errors.len() + omitted;
    let noun = if n == 1 { "failure" } else { "failures" };
    match errors.first() {
        Some(e) => {
            let at = if e.pointer.is_empty() {
                "the input".to_owned()
            } else {
                e.pointer.clone()
            };
            format!(
                "{n} {noun}; the first at {at} ({}): {}",
                e.keyword, e.detail
            )
        }
        None => format!("{n} {noun}"),
    }
}

/// A store call that did not succeed: the store's answer, or no attempt left
/// before the deadline.
#[derive(Debug)]
pub(crate) enum Failure {
    Store(StoreError),
    Deadline,
}

impl From<Failure> for SubmitError {
    fn from(f: Failure) -> Self {
        match f {
            Failure::Store(e) => SubmitError::Storage(e),
            Failure::Deadline => SubmitError::DeadlineExceeded,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unavailable() -> SubmitError {
        SubmitError::Storage(StoreError::Unavailable("503".into()))
    }

    /// An error, its problem code, whether it is worth a retry, and the
    /// retry hint in seconds.
    type Case = (SubmitError, &'static str, bool, Option<u64>);

    /// The errors that are the request's fault: never retried.
    fn the_requests_fault() -> Vec<Case> {
        let id = Uuid::nil();
        vec![
            (
                SubmitError::Invalid(ValidationError::KeyRequired),
                "idempotency_key_missing",
                false,
                None,
            ),
            (
                SubmitError::Invalid(ValidationError::field("task_type", "bad")),
                "invalid_request",
                false,
                None,
            ),
            (
                SubmitError::InputTooLarge { size: 2, limit: 1 },
                "input_too_large",
                false,
                None,
            ),
            (
                SubmitError::InputInvalid {
                    task_type: "t".into(),
                    errors: vec![],
                    omitted: 3,
                },
                "input_invalid",
                false,
                None,
            ),
            (
                SubmitError::Conflict {
                    kind: ConflictKind::Input,
                    task_id: id,
                },
                "idempotency_conflict",
                false,
                None,
            ),
        ]
    }

    /// The errors of storage and time: retried, or broken for good.
    fn storage_and_time() -> Vec<Case> {
        let id = Uuid::nil();
        vec![
            (
                SubmitError::Undetermined {
                    task_id: id,
                    retry_after: StdDuration::from_secs(42),
                },
                "submit_in_progress",
                true,
                Some(42),
            ),
            (
                SubmitError::DeadlineExceeded,
                "storage_unavailable",
                true,
                Some(1),
            ),
            // A clock that is only unknown is known after the next answer;
            // one known to be far off is not fixed in a second.
            (
                SubmitError::ClockOffset { offset: None },
                "storage_unavailable",
                true,
                Some(1),
            ),
            (
                SubmitError::ClockOffset {
                    offset: Some(Offset {
                        low: chrono::Duration::minutes(5),
                        high: chrono::Duration::minutes(5),
                    }),
                },
                "storage_unavailable",
                true,
                Some(30),
            ),
            (unavailable(), "storage_unavailable", true, Some(1)),
            (
                SubmitError::Storage(StoreError::Conflict),
                "storage_unavailable",
                true,
                Some(1),
            ),
            (
                SubmitError::Storage(StoreError::Fatal("403".into())),
                "storage_error",
                false,
                None,
            ),
            (
                SubmitError::Storage(StoreError::PreconditionFailed),
                "storage_error",
                false,
                None,
            ),
            (
                SubmitError::Corrupt {
                    key: "k".into(),
                    reason: "r".into(),
                },
                "storage_error",
                false,
                None,
            ),
        ]
    }

    #[test]
    fn each_error_maps_to_its_problem_code_retryability_and_hint() {
        for (e, code, retryable, hint) in the_requests_fault().into_iter().chain(storage_and_time())
        {
            assert_eq!(e.code(), code, "{e:?}");
            assert_eq!(e.is_retryable(), retryable, "{e:?}");
            assert_eq!(e.retry_after().map(|d| d.as_secs()), hint, "{e:?}");
        }
    }

    #[test]
    fn every_kind_has_its_own_code_and_is_the_requests_fault_or_worth_a_retry_or_broken() {
        use ErrorKind::*;
        let all = [
            Invalid,
            KeyMissing,
            TooLarge,
            InputInvalid,
            Conflict,
            InProgress,
            Unavailable,
            Broken,
        ];
        let codes: std::collections::HashSet<_> = all.iter().map(|k| k.code()).collect();
        assert_eq!(codes.len(), all.len());
        for k in all {
            let answers = [k.is_the_requests_fault(), k.is_retryable(), k == Broken];
            assert_eq!(answers.iter().filter(|a| **a).count(), 1, "{k:?}");
        }
    }

    /// A fault-injection crash exists only in a build with the testing
    /// feature; its client may send the request again.
    #[cfg(feature = "testing")]
    #[test]
    fn a_crashed_test_process_is_answered_as_storage_unavailable() {
        let e = SubmitError::Storage(StoreError::Crashed);
        assert_eq!(e.code(), "storage_unavailable");
        assert!(e.is_retryable());
        assert_eq!(e.retry_after().map(|d| d.as_secs()), Some(1));
    }
}

#[cfg(test)]
mod input_invalid_tests {
    use super::*;

    #[test]
    fn an_invalid_input_says_how_many_failures_and_where_the_first_is() {
        let e = SubmitError::InputInvalid {
            task_type: "send_email".into(),
            errors: vec![InputError {
                pointer: "/to".into(),
                keyword: "type".into(),
                detail: "value is not of type \"string\"".into(),
            }],
            omitted: 2,
        };
        assert_eq!(
            e.to_string(),
            "the input does not match the schema published for task type send_email: 3 failures; \
             the first at /to (type): value is not of type \"string\""
        );
        let whole = SubmitError::InputInvalid {
            task_type: "t".into(),
            errors: vec![InputError {
                pointer: String::new(),
                keyword: "type".into(),
                detail: "d".into(),
            }],
            omitted: 0,
        };
        assert!(
            whole
                .to_string()
                .ends_with("1 failure; the first at the input (type): d")
        );
        assert!(e.kind().is_the_requests_fault() && !e.is_retryable());
    }
}
