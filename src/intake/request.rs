//! The body of `POST /tasks` (and of every SQS message), parsed field by
//! field so that each mistake gets a message naming the field.

use serde_json::{Map, Value};

use crate::protocol::{IfTaskFailed, Scope, TaskOptions, Ttl, ValidationError, options};
use crate::queue::{Queue, SubmitBuilder};

/// The fields of a submit body. Unknown fields are refused: a misspelt
/// `idempotency_key` must not silently turn a safe retry into a duplicate.
#[derive(Debug, Clone, PartialEq)]
pub struct SubmitBody {
    /// `task_type`.
    pub task_type: String,
    /// `input`, any JSON.
    pub input: Value,
    /// `idempotency_key`.
    pub idempotency_key: Option<String>,
    /// `idempotency_ttl_seconds`.
    pub idempotency_ttl_seconds: Option<i64>,
    /// `idempotency_scope`.
    pub idempotency_scope: Option<String>,
    /// `replay` or `new_task`; `None`: `IF_TASK_FAILED`.
    pub if_task_failed: Option<IfTaskFailed>,
    /// The task options, named as buquet's submit names them.
    pub options: TaskOptions,
}

const FIELDS: [&str; 6] = [
    "task_type",
    "input",
    "idempotency_key",
    "idempotency_ttl_seconds",
    "idempotency_scope",
    "if_task_failed",
];

fn known(field: &str) -> bool {
    FIELDS.contains(&field) || options::FIELDS.contains(&field)
}

fn optional_string(
    obj: &Map<String, Value>,
    field: &'static str,
) -> Result<Option<String>, ValidationError> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(ValidationError::field(field, "must be a string")),
    }
}

impl SubmitBody {
    /// Parses a body; the first invalid field is the error.
    pub fn parse(body: &[u8]) -> Result<Self, ValidationError> {
        let v: Value = serde_json::from_slice(body)
            .map_err(|e| ValidationError::field("body", format!("is not valid JSON: {e}")))?;
        Self::from_value(v)
    }

    /// The body from JSON already parsed (an item of a batch).
    pub fn from_value(v: Value) -> Result<Self, ValidationError> {
        let Value::Object(mut obj) = v else {
            return Err(ValidationError::field("body", "must be a JSON object"));
        };
        if let Some(unknown) = obj.keys().find(|k| !known(k)) {
            return Err(ValidationError::field(
                "body",
                format!(
                    "unknown field {unknown:?} (expected one of {}, {})",
                    FIELDS.join(", "),
                    options::FIELDS.join(", ")
                ),
            ));
        }
        let task_type = match obj.get("task_type") {
            Some(Value::String(s)) => s.clone(),
            None | Some(Value::Null) => {
                return Err(ValidationError::field("task_type", "is required"));
            }
            Some(_) => return Err(ValidationError::field("task_type", "must be a string")),
        };
        // Taken, not copied: an input may be most of the body.
        let input = obj
            .remove("input")
            .ok_or_else(|| ValidationError::field("input", "is required (any JSON value)"))?;
        let idempotency_ttl_seconds = match obj.get("idempotency_ttl_seconds") {
            None | Some(Value::Null) => None,
            // A whole number, written either way (`3600` or `3600.0`: JSON
            // does not tell them apart, and neither does JSON Schema).
            Some(Value::Number(n)) => Some(
                n.as_i64()
                    .or_else(|| {
                        n.as_f64()
                            .filter(|f| f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0)
                            .map(|f| f as i64)
                    })
                    .ok_or_else(|| {
                        ValidationError::field(
                            "idempotency_ttl_seconds",
                            "must be a whole number of seconds",
                        )
                    })?,
            ),
            Some(_) => {
                return Err(ValidationError::field(
                    "idempotency_ttl_seconds",
                    "must be a number",
                ));
            }
        };
        let options = TaskOptions::from_body(&obj)?;
        Ok(SubmitBody {
            options,
            task_type,
            input,
            idempotency_key: optional_string(&obj, "idempotency_key")?,
            idempotency_ttl_seconds,
            idempotency_scope: optional_string(&obj, "idempotency_scope")?,
            if_task_failed: optional_string(&obj, "if_task_failed")?
                .map(|v| IfTaskFailed::parse(&v))
                .transpose()?,
        })
    }

    /// The submit this body asks for, with `key` (wherever it came from)
    /// and the caller's principal, if any.
    pub fn into_submit(
        self,
        queue: &Queue,
        key: Option<String>,
        principal: Option<String>,
    ) -> Result<SubmitBuilder<'_>, ValidationError> {
        let mut b = queue
            .submit_value(self.task_type, self.input)
            .idempotency_scope(Scope::parse(self.idempotency_scope.as_deref())?)
            .options(self.options);
        if let Some(k) = key {
            b = b.idempotency_key(k);
        }
        if let Some(secs) = self.idempotency_ttl_seconds {
            b = b.idempotency_ttl(Ttl::seconds(secs)?);
        }
        if let Some(p) = principal {
            b = b.tenant(p);
        }
        if let Some(policy) = self.if_task_failed {
            b = b.if_task_failed(policy);
        }
        Ok(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(body: &str) -> &'static str {
        match SubmitBody::parse(body.as_bytes()) {
            Err(ValidationError::Field { field, .. }) => field,
            other => panic!("{body}: {other:?}"),
        }
    }

    #[test]
    fn if_task_failed_is_replay_or_new_task_and_nothing_else() {
        let parse = |v: &str| {
            SubmitBody::parse(
                format!(r#"{{"task_type":"t","input":1,"if_task_failed":{v}}}"#).as_bytes(),
            )
            .map(|b| b.if_task_failed)
        };
        assert_eq!(parse(r#""new_task""#), Ok(Some(IfTaskFailed::NewTask)));
        assert_eq!(parse(r#""replay""#), Ok(Some(IfTaskFailed::Replay)));
        assert_eq!(parse("null"), Ok(None));
        assert_eq!(
            field(r#"{"task_type":"t","input":1,"if_task_failed":"New_Task"}"#),
            "if_task_failed"
        );
        assert_eq!(
            field(r#"{"task_type":"t","input":1,"if_task_failed":true}"#),
            "if_task_failed"
        );
    }

    #[test]
    fn each_malformed_field_is_named() {
        assert_eq!(field("{"), "body");
        assert_eq!(field("[]"), "body");
        assert_eq!(
            field(r#"{"task_type":"t","input":1,"idempotency_ky":"k"}"#),
            "body"
        );
        assert_eq!(field(r#"{"input":1}"#), "task_type");
        assert_eq!(field(r#"{"task_type":1,"input":1}"#), "task_type");
        assert_eq!(field(r#"{"task_type":"t"}"#), "input");
        assert_eq!(
            field(r#"{"task_type":"t","input":1,"idempotency_key":5}"#),
            "idempotency_key"
        );
        assert_eq!(
            field(r#"{"task_type":"t","input":1,"idempotency_ttl_seconds":1.5}"#),
            "idempotency_ttl_seconds"
        );
        assert_eq!(
            field(r#"{"task_type":"t","input":1,"idempotency_ttl_seconds":"60"}"#),
            "idempotency_ttl_seconds"
        );
        assert_eq!(
            field(r#"{"task_type":"t","input":1,"idempotency_scope":[]}"#),
            "idempotency_scope"
        );
    }

    #[test]
    fn a_ttl_written_with_a_zero_fraction_is_a_whole_number() {
        let b =
            SubmitBody::parse(br#"{"task_type":"t","input":1,"idempotency_ttl_seconds":47861.0}"#)
                .unwrap();
        assert_eq!(b.idempotency_ttl_seconds, Some(47861));
        assert_eq!(
            field(r#"{"task_type":"t","input":1,"idempotency_ttl_seconds":1e300}"#),
            "idempotency_ttl_seconds"
        );
    }

    #[test]
    fn input_may_be_any_json_value_including_null() {
        let b = SubmitBody::parse(br#"{"task_type":"t","input":null}"#).unwrap();
        assert_eq!(b.input, Value::Null);
        assert_eq!(b.idempotency_key, None);
    }
}
