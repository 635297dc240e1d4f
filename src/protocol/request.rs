//! A submit's request and answer: the input, serialized once; the key's
//! part; the request as the state machine reads it; what it answers
//! (`Submitted`, its key's `IdempotencyInfo`) and a record's `Phase` as a
//! reader judges it.

use chrono::{DateTime, Utc};
use serde_json::value::RawValue;
use uuid::Uuid;

use super::error::SubmitError;
use super::hash;
use super::names::{IdempotencyKey, IfTaskFailed, Scope, TaskType, Tenant, Ttl, ValidationError};
use super::task_options::TaskOptions;

/// The input, serialized once: canonical bytes (sorted keys, compact), their
/// hash, and their size.
#[derive(Debug, Clone)]
pub struct Input {
    pub(super) canonical: Box<RawValue>,
    pub(super) hash: String,
}

impl Input {
    /// Canonicalizes `value`; refuses it when it is larger than `max_bytes`.
    pub fn new(value: &serde_json::Value, max_bytes: usize) -> Result<Self, SubmitError> {
        let canonical = hash::canonical_raw(value)
            .map_err(|e| ValidationError::field("input", format!("cannot be serialized: {e}")))?;
        let size = canonical.get().len();
        if size > max_bytes {
            return Err(SubmitError::InputTooLarge {
                size,
                limit: max_bytes,
            });
        }
        let hash = hash::input_hash(canonical.get().as_bytes());
        Ok(Input { canonical, hash })
    }

    /// The canonical JSON's length: what buquet's threshold is compared with.
    pub fn len(&self) -> usize {
        self.canonical.get().len()
    }

    /// Never: the shortest input, `null`, is 4 bytes.
    pub fn is_empty(&self) -> bool {
        self.canonical.get().is_empty()
    }

    /// `input_hash`: of the whole input, offloaded or not.
    pub fn hash(&self) -> &str {
        &self.hash
    }

    /// The canonical JSON (what the task object carries).
    pub fn as_json(&self) -> &str {
        self.canonical.get()
    }
}

/// The idempotency part of a request.
#[derive(Debug, Clone)]
pub struct KeySpec {
    pub(crate) key: IdempotencyKey,
    pub(crate) scope: Scope,
    pub(crate) ttl: Ttl,
}

/// A submit, parsed.
#[derive(Debug, Clone)]
pub struct SubmitRequest {
    pub(crate) task_type: TaskType,
    pub(crate) input: Input,
    pub(crate) idempotency: Option<KeySpec>,
    /// The task options, as sent (checked for bounds; the checks that need
    /// the submit's time are made when it is sent).
    pub(crate) options: TaskOptions,
    /// The caller's tenant under tenant isolation: folded into the key hash,
    /// stored in the record and in the task object's `idempotency`.
    pub(crate) tenant: Option<Tenant>,
    /// What to do when the key's task ended failed or cancelled.
    pub(crate) if_task_failed: IfTaskFailed,
}

/// What a successful submit answers.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Submitted {
    /// The task's id (the same for every submit of one key).
    pub task_id: Uuid,
    /// The task object's key in the bucket.
    pub task_key: String,
    /// Its task type.
    pub task_type: String,
    /// The task object's current status; `missing` when it is gone.
    pub status: String,
    /// When the task was created (the record's time, S3's).
    #[serde(with = "super::rfc3339")]
    pub created_at: DateTime<Utc>,
    /// `false`: this submit created the task (201). `true`: an earlier submit
    /// of the key did (200).
    pub replayed: bool,
    /// The key it was submitted with; `None` without one.
    pub idempotency: Option<IdempotencyInfo>,
    /// The key's earlier task, which had ended failed or cancelled, when
    /// this task replaced it (`if_task_failed: new_task`); kept in the
    /// record, so that replays name it too.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replaces_task_id: Option<Uuid>,
    /// This submit finished an interrupted earlier one (for metrics only).
    #[serde(skip)]
    pub recovered: bool,
}

impl Submitted {
    /// This submit created the task (a 201), as opposed to a replay.
    pub fn created(&self) -> bool {
        !self.replayed
    }
}

/// A record as a reader judges it: by its age (in S3's time) and its task
/// object, never by a later write of the record (there is none).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Phase {
    /// `in_flight`: a write for it may still land (its finish deadline plus
    /// 15 minutes is ahead); `settled`: nothing can be written for it any
    /// more, and its task object alone says what became of the submit.
    pub phase: &'static str,
    /// The task object's status; `missing` when it is not there once the
    /// record is settled (or was `ready`); `None` while it may still come.
    pub task_status: Option<String>,
}

/// The key a submit was made with, as answered.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct IdempotencyInfo {
    /// The key, as sent.
    pub key: String,
    /// The scope it lives in: a task type, `queue`, or a custom name.
    pub scope: String,
    /// `sha256:` of the scope, the key and the tenant, if any.
    pub key_hash: String,
    /// When the key is forgotten (its record expires).
    #[serde(with = "super::rfc3339")]
    pub expires_at: DateTime<Utc>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_inputs_hash_and_length_are_of_its_canonical_form_whatever_its_key_order() {
        let canonical = r#"{"a":[true,null],"b":1}"#;
        let a = Input::new(&serde_json::json!({"b": 1, "a": [true, null]}), 1024).unwrap();
        let spaced: serde_json::Value =
            serde_json::from_str(r#"{ "a": [true, null], "b": 1 }"#).unwrap();
        let b = Input::new(&spaced, 1024).unwrap();
        assert_eq!(a.hash(), b.hash());
        assert_eq!(a.hash(), hash::input_hash(canonical.as_bytes()));
        assert_eq!(a.len(), canonical.len());
        assert!(!a.is_empty());
        assert!(matches!(
            Input::new(&serde_json::json!("xx"), 3),
            Err(SubmitError::InputTooLarge { size: 4, limit: 3 })
        ));
    }

    #[test]
    fn a_replay_is_not_created_and_a_first_submit_is() {
        let mut s = Submitted {
            task_id: Uuid::nil(),
            task_key: String::new(),
            task_type: String::new(),
            status: "pending".into(),
            created_at: DateTime::<Utc>::default(),
            replayed: false,
            idempotency: None,
            replaces_task_id: None,
            recovered: false,
        };
        assert!(s.created());
        s.replayed = true;
        assert!(!s.created());
    }
}
