//! Event sources (`SOURCES`, docs/operations.md "Event sources"): how an
//! event of another system's shape (EventBridge, SNS, S3, an SQS body
//! another producer chose) becomes a submit. Each declared [`Source`] says
//! what it matches, the task type, where the key is (a JSON Pointer, RFC
//! 6901: docs/decisions.md), the input, and the submit's scope and options.
//!
//! The setting is parsed once, at start (`load`), into typed entries whose
//! constructors refuse every shape they cannot honour, so a mistake stops the
//! function with a message naming the entry instead of refusing events later.
//! What came in is read into [`Delivery`]s (delivery.rs), and a delivery
//! with the first source that matches it is mapped to a submit (mapping.rs).

pub mod delivery;
pub mod load;
mod mapping;
pub mod matcher;
mod pointer;

use serde_json::{Map, Value, json};

use crate::intake::SubmitBody;
use crate::protocol::{Scope, TaskType, Ttl};

pub use delivery::{Delivery, Origin};
pub use load::load;
pub use mapping::{Mapped, Refusal};
pub use matcher::Match;

/// A `SOURCES` value that cannot be used: which entry, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SourcesError(pub String);

/// Where a source's task type comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskTypeFrom {
    /// The same for every event (`task_type`).
    Fixed(String),
    /// Read from the event (`task_type_pointer`): a string found there.
    Pointer(String),
}

/// One declared source.
#[derive(Debug, Clone, PartialEq)]
pub struct Source {
    /// 1 to 64 of `A-Z a-z 0-9 _ . -`: the prefix of every key it makes.
    pub name: String,
    /// What it takes.
    pub matches: Match,
    /// The task type of its tasks: fixed, or read from the event.
    pub task_type: TaskTypeFrom,
    /// Where the key is; `None`: the delivery's own identity.
    pub key_pointer: Option<String>,
    /// Where the input is (default `/message`).
    pub input_pointer: String,
    /// The other fields of a `POST /tasks` body (scope, TTL, options,
    /// `if_task_failed`), checked once here and applied to every submit.
    pub submit: Map<String, Value>,
}

/// The fields of an entry that are not `POST /tasks` fields.
const OWN_FIELDS: [&str; 6] = [
    "name",
    "match",
    "task_type",
    "task_type_pointer",
    "key_pointer",
    "input_pointer",
];

/// `POST /tasks` fields an entry may not carry: the event gives them.
const EVENT_FIELDS: [&str; 2] = ["input", "idempotency_key"];

/// The longest source name: short enough that a prefixed key keeps most
/// of the 255 characters a key may have.
pub const MAX_NAME_CHARS: usize = 64;

fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_NAME_CHARS {
        return Err(format!("name must be 1 to {MAX_NAME_CHARS} characters"));
    }
    if name.starts_with('.') {
        return Err("name must not start with '.'".into());
    }
    match name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
    {
        Some(c) => Err(format!(
            "name: {c:?} is not allowed (only A-Z a-z 0-9 _ . -)"
        )),
        None => Ok(()),
    }
}

fn string_field(obj: &Map<String, Value>, field: &str) -> Result<Option<String>, String> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(format!("{field} must be a string")),
    }
}

fn task_type_from(obj: &Map<String, Value>) -> Result<TaskTypeFrom, String> {
    match (
        string_field(obj, "task_type")?,
        string_field(obj, "task_type_pointer")?,
    ) {
        (Some(t), None) => {
            TaskType::parse(t.clone()).map_err(|e| e.to_string())?;
            Ok(TaskTypeFrom::Fixed(t))
        }
        (None, Some(p)) => Ok(TaskTypeFrom::Pointer(pointer::check(
            "task_type_pointer",
            &p,
        )?)),
        (Some(_), Some(_)) => Err("give task_type or task_type_pointer, not both".into()),
        (None, None) => Err("task_type (or task_type_pointer) is required".into()),
    }
}

/// The `POST /tasks` fields of an entry, checked as a body would be (with a
/// stand-in task type and input), so that a bad option stops the start.
fn submit_fields(obj: &Map<String, Value>) -> Result<Map<String, Value>, String> {
    if let Some(f) = EVENT_FIELDS.iter().find(|f| obj.contains_key(**f)) {
        return Err(format!(
            "{f} comes from the event (use key_pointer or input_pointer)"
        ));
    }
    let submit: Map<String, Value> = obj
        .iter()
        .filter(|(k, _)| !OWN_FIELDS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let mut probe = submit.clone();
    probe.insert("task_type".into(), json!("t"));
    probe.insert("input".into(), Value::Null);
    let body = SubmitBody::from_value(Value::Object(probe)).map_err(|e| e.to_string())?;
    body.options.check().map_err(|e| e.to_string())?;
    Scope::parse(body.idempotency_scope.as_deref()).map_err(|e| e.to_string())?;
    if let Some(secs) = body.idempotency_ttl_seconds {
        // The lower bound here; the upper is the function's
        // IDEMPOTENCY_MAX_TTL_DAYS, judged at each submit.
        Ttl::new(
            Ttl::seconds(secs).map_err(|e| e.to_string())?,
            chrono::TimeDelta::MAX,
        )
        .map_err(|e| e.to_string())?;
    }
    Ok(submit)
}

impl Source {
    /// One entry of `SOURCES`.
    pub fn from_value(v: &Value) -> Result<Self, String> {
        let Value::Object(obj) = v else {
            return Err("must be a JSON object".into());
        };
        let name = string_field(obj, "name")?.ok_or("name is required")?;
        check_name(&name)?;
        let matches = Match::from_value(obj.get("match").ok_or("match is required")?)?;
        let key_pointer = string_field(obj, "key_pointer")?
            .map(|p| pointer::check("key_pointer", &p))
            .transpose()?;
        let input_pointer = match string_field(obj, "input_pointer")? {
            Some(p) => pointer::check("input_pointer", &p)?,
            None => "/message".into(),
        };
        Ok(Source {
            task_type: task_type_from(obj)?,
            submit: submit_fields(obj)?,
            name,
            matches,
            key_pointer,
            input_pointer,
        })
    }
}

/// Every declared source, in the order declared: an event goes to the first
/// that matches it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sources(Vec<Source>);

impl Sources {
    /// No sources: every event is this service's own JSON.
    pub fn none() -> Self {
        Sources::default()
    }

    /// The sources of a `SOURCES` text: a JSON array of entries.
    pub fn parse(text: &str) -> Result<Self, SourcesError> {
        let v: Value = serde_json::from_str(text)
            .map_err(|e| SourcesError(format!("is not valid JSON: {e}")))?;
        let Value::Array(entries) = v else {
            return Err(SourcesError("must be a JSON array of sources".into()));
        };
        let mut out: Vec<Source> = Vec::with_capacity(entries.len());
        for (i, e) in entries.iter().enumerate() {
            let s = Source::from_value(e).map_err(|r| {
                let name = e.get("name").and_then(Value::as_str).unwrap_or("?");
                SourcesError(format!("entry {i} ({name:?}): {r}"))
            })?;
            // Names are the keys' prefixes: two sources of one name would
            // share keys.
            if out.iter().any(|o| o.name == s.name) {
                return Err(SourcesError(format!(
                    "entry {i}: the name {:?} is already taken",
                    s.name
                )));
            }
            out.push(s);
        }
        Ok(Sources(out))
    }

    /// No source declared: `submit` takes only its own shapes.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The sources, in declared order (the first that matches takes an event).
    pub fn iter(&self) -> impl Iterator<Item = &Source> {
        self.0.iter()
    }

    /// The first source (in declared order) that matches one of
    /// `candidates` (the ways one event can be read, most specific first),
    /// with that reading.
    pub fn find<'a>(&'a self, candidates: &'a [Delivery]) -> Option<(&'a Source, &'a Delivery)> {
        self.0.iter().find_map(|s| {
            candidates
                .iter()
                .find(|d| s.matches.matches(&d.origin))
                .map(|d| (s, d))
        })
    }
}

#[cfg(test)]
mod tests;
