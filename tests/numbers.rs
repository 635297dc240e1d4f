//! Numbers reach the task object exactly as the producer sent them: every
//! double reads back as the same double (its shortest round-tripping text),
//! and integers at the edges of i64 and u64 stay integers. Without
//! serde_json's `float_roundtrip`, about one double in ten came out one unit
//! in the last place off, and the input hash disagreed with buquet's clients
//! (tests/interop.rs shows that side).

use crate::common;

use idempotent_submit::lambda::{App, handle_submit};
use idempotent_submit::store::Store;
use idempotent_submit::{ManualClock, MemoryStore};
use lambda_runtime::{Context, LambdaEvent};
use serde_json::{Value, json};

fn app() -> (App, MemoryStore) {
    let clock = ManualClock::at_epoch();
    let store = common::memory_store(&clock);
    let app = common::lambda::app_over(store.clone(), Some(&clock), false, common::settings());
    (app, store)
}

/// Posts `body` (raw text) through the HTTP handler; the task object's
/// bytes.
async fn submit_raw(app: &App, store: &MemoryStore, body: String) -> String {
    let mut event = common::event("http-v2-post.json");
    event["body"] = json!(body);
    event["headers"]
        .as_object_mut()
        .unwrap()
        .remove("idempotency-key");
    let out = handle_submit(app, LambdaEvent::new(event.clone(), Context::default()))
        .await
        .unwrap();
    common::openapi::check(&event, &out);
    assert_eq!(out["statusCode"], 201, "{out}");
    let answer: Value = serde_json::from_str(out["body"].as_str().unwrap()).unwrap();
    let key = answer["task_key"].as_str().unwrap();
    String::from_utf8(store.get(key).await.unwrap().body.to_vec()).unwrap()
}

/// The text of the task's `input` array, element by element.
fn input_texts(task: &str) -> Vec<String> {
    let v: Value = serde_json::from_str(task).unwrap();
    v["input"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.to_string())
        .collect()
}

#[tokio::test]
async fn random_doubles_reach_the_task_object_unchanged() {
    let (app, store) = app();
    let mut rng = fastrand::Rng::with_seed(0xf10a7);
    let mut changed = Vec::new();
    for _ in 0..20 {
        // 500 finite doubles from random bits: every exponent and mantissa.
        let xs: Vec<f64> = std::iter::repeat_with(|| f64::from_bits(rng.u64(..)))
            .filter(|x| x.is_finite())
            .take(500)
            .collect();
        let texts: Vec<String> = xs.iter().map(|x| json!(x).to_string()).collect();
        let body = format!(r#"{{"task_type":"numbers","input":[{}]}}"#, texts.join(","));
        let task = submit_raw(&app, &store, body).await;
        for ((x, sent), stored) in xs.iter().zip(&texts).zip(input_texts(&task)) {
            let back: f64 = stored.parse().unwrap();
            if back.to_bits() != x.to_bits() || *sent != stored {
                changed.push((sent.clone(), stored));
            }
        }
    }
    assert!(
        changed.is_empty(),
        "{} of 10000 doubles changed, e.g. {:?}",
        changed.len(),
        &changed[..changed.len().min(5)]
    );
}

#[tokio::test]
async fn a_double_known_to_lose_its_last_digit_does_not() {
    // The issue's own example: 434.29198722896365 came back as
    // 434.2919872289637.
    let (app, store) = app();
    let task = submit_raw(
        &app,
        &store,
        r#"{"task_type":"numbers","input":[434.29198722896365]}"#.into(),
    )
    .await;
    assert_eq!(input_texts(&task), ["434.29198722896365"]);
}

#[tokio::test]
async fn integers_at_the_edges_of_i64_and_u64_stay_integers() {
    let (app, store) = app();
    let edges = [
        i64::MIN.to_string(),
        (i64::MIN + 1).to_string(),
        i64::MAX.to_string(),
        u64::MAX.to_string(),
        (u64::MAX - 1).to_string(),
        ((1u64 << 53) + 1).to_string(),
        (-((1i64 << 53) + 1)).to_string(),
        "0".into(),
    ];
    let body = format!(r#"{{"task_type":"numbers","input":[{}]}}"#, edges.join(","));
    let task = submit_raw(&app, &store, body).await;
    assert_eq!(input_texts(&task), edges);
}
