//! The built `submit` binary with `SOURCES`, through the Lambda runtime API
//! stand-in, against moto: the sources read once at start from an S3 object
//! (`s3://`), an SNS event and an EventBridge event taken, a retryable
//! failure an invocation error; a bad `SOURCES` stops the start, naming it.

use crate::common;

use crate::common::event;
use crate::common::runtime_api::RuntimeApi;
use idempotent_submit::store::{PutMode, Store};
use serde_json::json;

async fn start_with(sources: &str) -> std::process::Output {
    let api = RuntimeApi::start().await;
    tokio::process::Command::new(env!("CARGO_BIN_EXE_submit"))
        .env_clear()
        .env("AWS_LAMBDA_RUNTIME_API", &api.addr)
        .env("BUCKET_NAME", "b")
        .env("SOURCES", sources)
        .output()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_sources_setting_stops_the_function_at_start_naming_it() {
    for bad in [
        "{",
        r#"[{"name": "x"}]"#,
        r#"[{"name": "a:b", "match": {"eventbridge": {"source": "s"}}, "task_type": "t"}]"#,
        "s3://only-a-bucket",
    ] {
        let out = start_with(bad).await;
        assert!(!out.status.success(), "{bad}");
        let all = common::output_text(&out);
        assert!(all.contains("SOURCES"), "{bad}: {all}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_reads_its_sources_from_s3_once_and_takes_sns_and_eventbridge_events() {
    let store = common::moto_store().await;
    let config = common::moto_store().await;
    let sources = json!([
        {"name": "orders", "match": {"sns": {"topic_arn": "arn:aws:sns:us-east-1:123456789012:orders"}},
         "task_type": "ship_order"},
        {"name": "nightly", "match": {"eventbridge": {"source": "aws.events"}}, "task_type": "nightly_report"}
    ]);
    config
        .put(
            "sources.json",
            sources.to_string().into(),
            PutMode::Overwrite,
        )
        .await
        .unwrap();
    let mut api = RuntimeApi::start().await;
    let mut child =
        common::lambda::function(env!("CARGO_BIN_EXE_submit"), "test", &api, store.bucket())
            .env("SOURCES", format!("s3://{}/sources.json", config.bucket()))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("starting the function");
    for (file, source) in [
        ("sns-notification.json", "orders"),
        ("eventbridge-scheduled.json", "nightly"),
    ] {
        for _ in 0..2 {
            api.invoke(event(file));
            let p = api.next_posted().await;
            assert_eq!(p.kind, "response", "{file}: {p:?}");
            assert_eq!(p.body["results"][0]["source"], source, "{file}: {p:?}");
        }
    }
    let keys = common::all_keys(&store).await;
    assert_eq!(
        keys.iter().filter(|k| k.starts_with("tasks/")).count(),
        2,
        "{keys:?}"
    );
    // The setting was read at start: changing it now changes nothing.
    config
        .put("sources.json", "[]".into(), PutMode::Overwrite)
        .await
        .unwrap();
    api.invoke(event("sns-notification.json"));
    assert_eq!(api.next_posted().await.kind, "response");
    child.start_kill().unwrap();
    let out = child.wait_with_output().await.unwrap();
    let logs = String::from_utf8_lossy(&out.stdout);
    assert!(!logs.contains("ORD-123"), "the input leaked into the logs");
}
