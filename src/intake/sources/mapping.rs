//! A delivery and the source that matched it, made into a submit: the key
//! (prefixed by the source's name), the task type, the input, and the
//! source's other `POST /tasks` fields. Or a [`Refusal`] naming the source
//! and the reason, when the event does not hold what the source says.

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::delivery::Delivery;
use super::{Source, TaskTypeFrom};
use crate::intake::SubmitBody;
use crate::protocol::IdempotencyKey;

/// A submit made from an event.
#[derive(Debug, Clone, PartialEq)]
pub struct Mapped {
    /// The source's name.
    pub source: String,
    /// The submit it makes, as a `POST /tasks` body would.
    pub body: SubmitBody,
    /// `<source name>:<key found>`.
    pub key: String,
}

/// Why an event makes no submit: it can never succeed as it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{detail}", source_name.as_deref().map(|s| format!("source {s:?}: ")).unwrap_or_default())]
pub struct Refusal {
    /// The source that matched, if one did.
    pub source_name: Option<String>,
    /// What was wrong, for the rejected object and the log.
    pub detail: String,
}

impl Refusal {
    /// An event that no declared source matches.
    pub fn no_source(what: impl std::fmt::Display) -> Self {
        Refusal {
            source_name: None,
            detail: format!("{what} matches no source of SOURCES"),
        }
    }

    fn of(source: &Source, detail: impl Into<String>) -> Self {
        Refusal {
            source_name: Some(source.name.clone()),
            detail: detail.into(),
        }
    }
}

/// What `pointer` (`/event...` or `/message...`) finds in `d`.
fn resolve<'a>(d: &'a Delivery, pointer: &str) -> Result<Option<&'a Value>, String> {
    if let Some(rest) = pointer.strip_prefix("/event") {
        return Ok(d.event.pointer(rest));
    }
    let rest = pointer.strip_prefix("/message").unwrap_or(pointer);
    match &d.message {
        Ok(m) => Ok(m.pointer(rest)),
        Err(why) => Err(why.clone()),
    }
}

/// The string `pointer` finds (the entry's `field`), refused when it finds
/// nothing, an empty string, or another JSON type.
fn string_at(source: &Source, d: &Delivery, field: &str, pointer: &str) -> Result<String, Refusal> {
    match resolve(d, pointer).map_err(|e| Refusal::of(source, format!("{field}: {e}")))? {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
        Some(Value::String(_)) => Err(Refusal::of(
            source,
            format!("{field} {pointer:?} finds an empty string"),
        )),
        Some(other) => Err(Refusal::of(
            source,
            format!(
                "{field} {pointer:?} finds a {}, not a string",
                json_type(other)
            ),
        )),
        None => Err(Refusal::of(
            source,
            format!("{field} {pointer:?} finds nothing in the event"),
        )),
    }
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// The key of a source's submit: `<name>:<found>`, so that two sources never
/// share a key. A found string that would make the key longer than a key may
/// be (255 characters), or that holds control characters, is hashed
/// (`<name>:sha256:<hex>`) rather than refused: an S3 object key may be
/// 1,024 bytes, and an event that is refused for its key's length could
/// never be taken at all. The hash is as deterministic as the string, so a
/// redelivery is still a replay.
pub fn prefixed_key(name: &str, found: &str) -> String {
    let plain = format!("{name}:{found}");
    if plain.chars().count() <= IdempotencyKey::MAX_CHARS && !found.chars().any(char::is_control) {
        plain
    } else {
        format!(
            "{name}:sha256:{}",
            hex::encode(Sha256::digest(found.as_bytes()))
        )
    }
}

impl Source {
    /// The submit this source makes of `d`.
    pub fn map(&self, d: &Delivery) -> Result<Mapped, Refusal> {
        let found = match &self.key_pointer {
            Some(p) => string_at(self, d, "key_pointer", p)?,
            None => d.identity.clone().ok_or_else(|| {
                Refusal::of(
                    self,
                    format!(
                        "the {} event carries no delivery identity to key it by; give key_pointer",
                        d.origin.kind()
                    ),
                )
            })?,
        };
        let task_type = match &self.task_type {
            TaskTypeFrom::Fixed(t) => t.clone(),
            TaskTypeFrom::Pointer(p) => string_at(self, d, "task_type_pointer", p)?,
        };
        let input = resolve(d, &self.input_pointer)
            .map_err(|e| Refusal::of(self, format!("the input is not JSON: {e}")))?
            .ok_or_else(|| {
                Refusal::of(
                    self,
                    format!(
                        "input_pointer {:?} finds nothing in the event",
                        self.input_pointer
                    ),
                )
            })?
            .clone();
        let mut obj = self.submit.clone();
        obj.insert("task_type".into(), Value::String(task_type));
        obj.insert("input".into(), input);
        let body = SubmitBody::from_value(Value::Object(obj))
            .map_err(|e| Refusal::of(self, e.to_string()))?;
        Ok(Mapped {
            source: self.name.clone(),
            key: prefixed_key(&self.name, &found),
            body,
        })
    }
}
