//! Comparing inputs: objects' keys and JSON read tolerantly, canonical JSON, how near two inputs are, and the raw input of a task.

#[allow(unused_imports)]
use super::audit::*;
use super::producers::KeyId;
use serde_json::Value;
use std::collections::HashMap;

/// Objects' keys and JSON, tolerant of anything.
pub fn json_of(body: &[u8]) -> Value {
    serde_json::from_slice(body).unwrap_or(Value::Null)
}

/// `tasks/{shard}/{id}.json` → id.
pub fn task_id_of(key: &str) -> Option<String> {
    let name = key.strip_prefix("tasks/")?.split('/').nth(1)?;
    Some(name.strip_suffix(".json")?.to_owned())
}

/// The input as the producer's canonical form: compact, keys sorted at
/// every depth (the contract's, written here independently of the
/// library's).
pub fn canonical(v: &Value) -> String {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let parts: Vec<String> = keys
                .iter()
                .map(|k| format!("{}:{}", Value::String((*k).clone()), canonical(&m[*k])))
                .collect();
            format!("{{{}}}", parts.join(","))
        }
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(canonical).collect::<Vec<_>>().join(",")
        ),
        other => other.to_string(),
    }
}

/// How two inputs compare: equal, equal but for doubles one unit in the
/// last place apart, or different.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Near {
    Equal,
    OneUlp,
    Differs,
}

pub fn near(a: &Value, b: &Value) -> Near {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            if x.len() != y.len() {
                return Near::Differs;
            }
            x.iter()
                .map(|(k, v)| y.get(k).map_or(Near::Differs, |w| near(v, w)))
                .max()
                .unwrap_or(Near::Equal)
        }
        (Value::Array(x), Value::Array(y)) => {
            if x.len() != y.len() {
                return Near::Differs;
            }
            x.iter()
                .zip(y)
                .map(|(v, w)| near(v, w))
                .max()
                .unwrap_or(Near::Equal)
        }
        (Value::Number(x), Value::Number(y)) if x != y => match (x.as_f64(), y.as_f64()) {
            (Some(p), Some(q))
                if !x.is_i64()
                    && !x.is_u64()
                    && !y.is_i64()
                    && !y.is_u64()
                    && p.signum() == q.signum()
                    && p.to_bits().abs_diff(q.to_bits()) == 1 =>
            {
                Near::OneUlp
            }
            _ => Near::Differs,
        },
        _ if a == b => Near::Equal,
        _ => Near::Differs,
    }
}

/// What an input says of its submit: its key (`s`, `k`) and variant, its
/// unique mark (keyless), or an invalid body's mark.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Tie {
    Key(KeyId, u64),
    Keyless(String),
    Invalid(String),
    Unknown,
}

pub fn tie(input: &Value) -> Tie {
    if let (Some(s), Some(k)) = (input["s"].as_str(), input["k"].as_str()) {
        return Tie::Key(
            (s.to_owned(), k.to_owned()),
            input["v"].as_u64().unwrap_or(0),
        );
    }
    if let Some(u) = input["u"].as_str() {
        return Tie::Keyless(u.to_owned());
    }
    if let Some(n) = input["inv"].as_str() {
        return Tie::Invalid(n.to_owned());
    }
    Tie::Unknown
}

/// The raw text of a task object's input: inline, or its payload's.
pub fn raw_input(task: &Value, body: &[u8], payloads: &HashMap<String, &Obj>) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Raw<'a> {
        #[serde(borrow)]
        input: Option<&'a serde_json::value::RawValue>,
    }
    let id = task["id"].as_str()?;
    if task["input_ref"].is_string() || task["input"].is_null() {
        let p = payloads.get(id)?;
        return Some(String::from_utf8_lossy(&p.body).trim().to_owned());
    }
    let raw: Raw = serde_json::from_slice(body).ok()?;
    Some(raw.input?.get().to_owned())
}
