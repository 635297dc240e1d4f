//! The fuzzer's mutations: random strings and JSON values, a node of a
//! JSON tree changed, raw text changed.

use serde_json::{Map, Value, json};

pub(super) fn random_string(rng: &mut fastrand::Rng) -> String {
    const PIECES: &[&str] = &[
        "",
        "tasks",
        "/tasks",
        "/prod/tasks",
        "/tasks/batch",
        "batch",
        "tasks\":[",
        "POST",
        "GET",
        "\"",
        "\\",
        "\u{0}",
        "\n",
        "é",
        "𝄞",
        "{",
        "}",
        "[",
        "application/json",
        "text/plain",
        "queue",
        "..",
        "/",
        ":",
        ",",
        "null",
        "true",
        "2.0",
        "=",
        "==",
        "AAAA",
        "task_type",
        "input",
        "idempotency_key",
        "idempotency_ttl_seconds",
        "idempotency_scope",
        "timeout_seconds",
        "max_retries",
        "retry_policy",
        "multiplier",
        "schedule_at",
        "delay_seconds",
        "max_reschedules",
        "ttl_seconds",
        "expires_at",
        "use_payload_refs",
        "payload_ref_threshold_bytes",
        "2026-01-27T12:00:00Z",
        "00000000-0000-4000-8000-000000000000",
    ];
    let mut s = String::new();
    for _ in 0..rng.usize(0..6) {
        if rng.bool() {
            s.push_str(PIECES[rng.usize(..PIECES.len())]);
        } else {
            s.push(rng.char(..));
        }
    }
    if rng.u8(..50) == 0 {
        s.push_str(&"x".repeat(rng.usize(0..300_000)));
    }
    s
}

pub(super) fn random_value(rng: &mut fastrand::Rng, depth: u32) -> Value {
    match rng.u8(..9) {
        0 => Value::Null,
        1 => json!(rng.bool()),
        2 => json!(rng.i64(..)),
        3 => json!([1e300, -0.5, 3600.0, 1.5e-9][rng.usize(..4)]),
        4 => json!(rng.u64(..)),
        5 | 6 => json!(random_string(rng)),
        7 if depth < 3 => Value::Array(
            (0..rng.usize(0..4))
                .map(|_| random_value(rng, depth + 1))
                .collect(),
        ),
        _ if depth < 3 => {
            let mut m = Map::new();
            for _ in 0..rng.usize(0..4) {
                m.insert(random_string(rng), random_value(rng, depth + 1));
            }
            Value::Object(m)
        }
        _ => json!(random_string(rng)),
    }
}

/// Picks a node of the tree (by a random walk) and changes it.
pub(super) fn mutate(v: &mut Value, rng: &mut fastrand::Rng, depth: u32) {
    // The root stays an object; below it, sometimes stop and change a node.
    let descend = depth == 0 || (depth < 6 && rng.u8(..100) < 70);
    match v {
        Value::Object(m) if descend && !m.is_empty() => {
            let keys: Vec<String> = m.keys().cloned().collect();
            let k = &keys[rng.usize(..keys.len())];
            match rng.u8(..10) {
                0 => {
                    m.remove(k);
                }
                1 => {
                    m.insert(random_string(rng), random_value(rng, 1));
                }
                // The body is JSON inside a string: mutate it as JSON, or as text.
                _ if k == "body" && m[k].is_string() => {
                    let text = m[k].as_str().unwrap_or_default().to_owned();
                    let new = match serde_json::from_str::<Value>(&text) {
                        Ok(mut inner) if rng.bool() => {
                            mutate(&mut inner, rng, 0);
                            inner.to_string()
                        }
                        _ => mutate_text(&text, rng),
                    };
                    m.insert(k.clone(), json!(new));
                }
                _ => mutate(m.get_mut(k).unwrap_or(&mut Value::Null), rng, depth + 1),
            }
        }
        Value::Array(a) if descend && !a.is_empty() => {
            let i = rng.usize(..a.len());
            match rng.u8(..6) {
                0 => {
                    a.remove(i);
                }
                1 => {
                    let dup = a[i].clone();
                    a.push(dup);
                }
                _ => mutate(&mut a[i], rng, depth + 1),
            }
        }
        Value::String(s) if rng.bool() => *s = mutate_text(s, rng),
        _ => *v = random_value(rng, 1),
    }
}

fn mutate_text(s: &str, rng: &mut fastrand::Rng) -> String {
    let mut b = s.as_bytes().to_vec();
    for _ in 0..rng.usize(1..4) {
        match rng.u8(..4) {
            0 if !b.is_empty() => {
                let i = rng.usize(..b.len());
                b[i] = rng.u8(..);
            }
            1 if !b.is_empty() => {
                let i = rng.usize(..b.len());
                let j = (i + rng.usize(0..16)).min(b.len());
                b.drain(i..j);
            }
            2 => {
                let i = rng.usize(..=b.len());
                b.splice(i..i, random_string(rng).into_bytes());
            }
            _ => {
                let i = rng.usize(..=b.len());
                b.truncate(i);
            }
        }
    }
    String::from_utf8_lossy(&b).into_owned()
}
