//! The built `submit` and `sweep` binaries through a Lambda runtime API
//! stand-in, against moto.

use crate::common;

use crate::common::event;
use crate::common::runtime_api::RuntimeApi;
use serde_json::{Value, json};

fn function(bin: &str, api: &RuntimeApi, bucket: &str) -> tokio::process::Child {
    common::lambda::function(bin, "test", api, bucket)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starting the function")
}

/// The function's process killed: what it logged, and its lines that are
/// JSON.
async fn killed_logs(mut child: tokio::process::Child) -> (String, Vec<Value>) {
    child.start_kill().unwrap();
    let out = child.wait_with_output().await.unwrap();
    let logs = String::from_utf8_lossy(&out.stdout).into_owned();
    let lines = logs
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    (logs, lines)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_submit_binary_serves_http_and_sqs_events_through_the_runtime_api() {
    let store = common::moto_store().await;
    let mut api = RuntimeApi::start().await;
    let child = function(env!("CARGO_BIN_EXE_submit"), &api, store.bucket());

    let id = api.invoke(event("http-v2-post.json"));
    let p = api.next_posted().await;
    assert_eq!(
        (p.request_id.as_str(), p.kind.as_str()),
        (id.as_str(), "response"),
        "{p:?}"
    );
    assert_eq!(p.body["statusCode"], 201);
    common::openapi::check(&event("http-v2-post.json"), &p.body);
    let body: Value = serde_json::from_str(p.body["body"].as_str().unwrap()).unwrap();
    let task_id = body["task_id"].as_str().unwrap().to_owned();

    api.invoke(event("sqs-standard-batch.json"));
    let p = api.next_posted().await;
    assert_eq!(p.kind, "response");
    assert_eq!(p.body, json!({"batchItemFailures": []}));

    api.invoke(event("function-url-post.json"));
    let p = api.next_posted().await;
    assert_eq!(p.body["statusCode"], 200);
    common::openapi::check(&event("function-url-post.json"), &p.body);
    assert_eq!(p.body["headers"]["idempotent-replayed"], "true");
    assert!(p.body["body"].as_str().unwrap().contains(&task_id));

    // An event of no known shape is the invocation's error, not a crash.
    api.invoke(json!({"what": "is this"}));
    let p = api.next_posted().await;
    assert_eq!(p.kind, "error");
    api.invoke(event("http-v2-get-missing.json"));
    let p = api.next_posted().await;
    assert_eq!(p.body["statusCode"], 404);
    common::openapi::check(&event("http-v2-get-missing.json"), &p.body);

    // JSON log lines and EMF metric lines; never the input.
    let (logs, lines) = killed_logs(child).await;
    assert!(
        lines
            .iter()
            .any(|l| l["Created"] == 1 && l["_aws"].is_object()),
        "{logs}"
    );
    assert!(
        lines.iter().any(|l| l["fields"]["message"] == "submitted"),
        "{logs}"
    );
    assert!(
        !logs.contains("ORD-123\",\"cents") && !logs.contains("1999"),
        "the input leaked into the logs"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_binary_answers_its_summary() {
    let store = common::moto_store().await;
    let mut api = RuntimeApi::start().await;
    let _child = function(env!("CARGO_BIN_EXE_sweep"), &api, store.bucket());
    api.invoke(event("sweep-scheduled.json"));
    let p = api.next_posted().await;
    assert_eq!(p.kind, "response", "{p:?}");
    assert_eq!(p.body["complete"], true);
    assert_eq!(p.body["dry_run"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_variable_stops_the_function_at_start_naming_it() {
    let api = RuntimeApi::start().await;
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_submit"))
        .env_clear()
        .env("AWS_LAMBDA_RUNTIME_API", &api.addr)
        .env("BUCKET_NAME", "b")
        .env("FINISH_WINDOW_SECONDS", "9999")
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let all = common::output_text(&out);
    assert!(all.contains("FINISH_WINDOW_SECONDS"), "{all}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_logs_one_line_per_item_with_its_outcome_and_never_the_input() {
    let store = common::moto_store().await;
    let mut api = RuntimeApi::start().await;
    let child = function(env!("CARGO_BIN_EXE_submit"), &api, store.bucket());
    let mut e = event("http-v2-batch.json");
    e["body"] = json!(
        json!({"tasks": [
            {"task_type": "t", "input": {"secret": "s3cr3t-1"}, "idempotency_key": "a"},
            {"task_type": "t", "input": {"secret": "s3cr3t-2"}, "idempotency_key": "a"},
            {"task_type": "bad type", "input": {"secret": "s3cr3t-3"}},
        ]})
        .to_string()
    );
    api.invoke(e.clone());
    let p = api.next_posted().await;
    assert_eq!(p.body["statusCode"], 200, "{p:?}");
    common::openapi::check(&e, &p.body);
    let (logs, lines) = killed_logs(child).await;
    let mut items: Vec<(u64, u64)> = lines
        .iter()
        .filter(|l| {
            l["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("batch item"))
        })
        .map(|l| {
            (
                l["fields"]["item"].as_u64().unwrap(),
                l["fields"]["status"].as_u64().unwrap(),
            )
        })
        .collect();
    items.sort();
    // One key twice: whichever item claimed it first made the task.
    let mut first_two = [items[0].1, items[1].1];
    first_two.sort();
    assert_eq!(
        (items.len(), items[0].0, items[1].0, first_two, items[2]),
        (3, 0, 1, [201, 422], (2, 400)),
        "{logs}"
    );
    let metric = lines
        .iter()
        .find(|l| l["BatchItems"] == 3)
        .unwrap_or_else(|| panic!("no batch metric line: {logs}"));
    assert_eq!(
        (&metric["Created"], &metric["Conflict"], &metric["Invalid"]),
        (&json!(1), &json!(1), &json!(1))
    );
    assert!(!logs.contains("s3cr3t"), "an input leaked into the logs");
}
