//! A mutation fuzzer on the stable toolchain (cargo-fuzz needs nightly, which
//! this project cannot use): the sample events of events/ are mutated, at the
//! level of JSON structure and of raw bytes, and fed to the `submit` handler
//! over the in-memory store. Nothing may panic; an HTTP answer to bad input is
//! a 4xx that wrote nothing; an SQS batch over a healthy store lists no
//! failures (what cannot succeed is rejected).
//!
//! `FUZZ_ITERATIONS` sets the length (make fuzz runs long), `FUZZ_SEED` the
//! start. A failure prints the seed and the input.

mod common;

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;
use idempotent_submit::lambda::http::parse_key_header;
use idempotent_submit::lambda::request::SubmitBody;
use idempotent_submit::lambda::{App, Metrics, handle_submit};
use idempotent_submit::{Config, ManualClock, Queue};
use lambda_runtime::{Context, LambdaEvent};
use serde_json::{Map, Value, json};

fn seeds() -> Vec<Value> {
    let dir = format!("{}/events", env!("CARGO_MANIFEST_DIR"));
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "json") {
            out.push(serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap());
        }
    }
    out
}

fn random_string(rng: &mut fastrand::Rng) -> String {
    const PIECES: &[&str] = &[
        "",
        "tasks",
        "/tasks",
        "/prod/tasks",
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

fn random_value(rng: &mut fastrand::Rng, depth: u32) -> Value {
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
fn mutate(v: &mut Value, rng: &mut fastrand::Rng, depth: u32) {
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

fn app() -> (App, idempotent_submit::MemoryStore) {
    let clock = ManualClock::at_epoch();
    let store = common::memory_store(&clock);
    let cfg = Config {
        bucket: "b".into(),
        force_path_style: true,
        tenant_isolation: true,
        settings: common::settings(),
    };
    let queue = Queue::with_clock(store.clone(), Arc::new(clock), cfg.settings.clone());
    (App::new(queue, &cfg, Metrics::collecting("submit")), store)
}

/// One input through the handler: what it answered (an HTTP status, `sqs`
/// or `error`), or what went wrong.
async fn check(event: Value) -> Result<String, String> {
    let (app, store) = app();
    // The sample events share a key: with it taken, replays and conflicts
    // are reachable too.
    app.queue
        .submit(
            "charge_customer",
            json!({"order": "ORD-123", "cents": 1999}),
        )
        .idempotency_key("charge-ORD-123")
        .await
        .map_err(|e| e.to_string())?;
    let before = store.keys();
    let is_sqs = event.get("Records").is_some();
    let out = AssertUnwindSafe(handle_submit(
        &app,
        LambdaEvent::new(event, Context::default()),
    ))
    .catch_unwind()
    .await
    .map_err(|_| "the handler panicked".to_owned())?;
    let Ok(out) = out else {
        // An event of no known shape, or an SQS event that is not one: the
        // invocation fails (Lambda retries or reports it). Nothing written.
        return if store.keys() == before {
            Ok("error".into())
        } else {
            Err("a failed invocation wrote something".into())
        };
    };
    if is_sqs {
        let failures = out["batchItemFailures"]
            .as_array()
            .ok_or("no batchItemFailures")?;
        if !failures.is_empty() {
            return Err(format!("a healthy store, yet failures: {failures:?}"));
        }
        return Ok("sqs".into());
    }
    let status = out["statusCode"].as_u64().ok_or("no statusCode")?;
    match status {
        200 | 201 => Ok(status.to_string()),
        400 | 404 | 405 | 413 | 422 => {
            if store.keys() == before {
                Ok(status.to_string())
            } else {
                Err(format!("a {status} wrote {:?}", store.keys()))
            }
        }
        s => Err(format!("status {s} for some input: {out}")),
    }
}

#[test]
fn mutated_events_never_panic_and_bad_input_writes_nothing() {
    let iterations: u64 = std::env::var("FUZZ_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let seed: u64 = std::env::var("FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0xf022);
    let corpus = seeds();
    assert!(corpus.len() >= 10);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let mut seen = std::collections::BTreeMap::<String, u64>::new();
    for i in 0..iterations {
        let mut rng = fastrand::Rng::with_seed(seed.wrapping_add(i));
        let mut event = corpus[rng.usize(..corpus.len())].clone();
        for _ in 0..rng.usize(1..4) {
            mutate(&mut event, &mut rng, 0);
        }
        let shown = event.to_string();
        match rt.block_on(check(event)) {
            Ok(what) => *seen.entry(what).or_default() += 1,
            Err(e) => {
                let shown: String = shown.chars().take(4000).collect();
                panic!(
                    "FUZZ_SEED={} FUZZ_ITERATIONS=1: {e}\ninput: {shown}",
                    seed.wrapping_add(i)
                );
            }
        }
    }
    eprintln!("fuzz: {iterations} inputs, answered {seen:?}");
    if iterations >= 1000 {
        // The mutations reach past the parser into every kind of answer.
        for what in ["200", "201", "400", "404", "405", "422", "sqs", "error"] {
            assert!(
                seen.contains_key(what),
                "no input was answered {what}: {seen:?}"
            );
        }
    }
}

#[test]
fn random_bodies_and_key_headers_never_panic() {
    let mut rng = fastrand::Rng::with_seed(7);
    for _ in 0..20_000 {
        let n = rng.usize(0..64);
        let bytes: Vec<u8> = (0..n).map(|_| rng.u8(..)).collect();
        let _ = SubmitBody::parse(&bytes);
        let text = String::from_utf8_lossy(&bytes);
        let _ = parse_key_header(&text);
        let s = random_string(&mut rng);
        let _ = parse_key_header(&s);
        let _ = SubmitBody::parse(s.as_bytes());
    }
    // And the parser accepts what it should, so the loop above was not
    // rejecting everything for a trivial reason.
    assert!(SubmitBody::parse(br#"{"task_type":"t","input":1}"#).is_ok());
    assert_eq!(parse_key_header("\"k\"").unwrap(), "k");
}
