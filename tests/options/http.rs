use super::*;

// ---- through the HTTP API ----

fn app(w: &World) -> App {
    let cfg = common::lambda::config(false, common::settings());
    App::new(w.process(), &cfg, Metrics::collecting("submit"))
}

async fn post(app: &App, body: Value) -> (u64, Value) {
    let path = format!("{}/events/http-v2-post.json", env!("CARGO_MANIFEST_DIR"));
    let mut event: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    event["body"] = json!(body.to_string());
    let out = handle_submit(app, LambdaEvent::new(event.clone(), Context::default()))
        .await
        .unwrap();
    common::openapi::check(&event, &out);
    (
        out["statusCode"].as_u64().unwrap(),
        serde_json::from_str(out["body"].as_str().unwrap()).unwrap(),
    )
}

#[tokio::test]
async fn each_bad_option_is_a_400_naming_the_field_and_writes_nothing() {
    let w = World::new();
    let app = app(&w);
    let cases = [
        (json!({"timeout_seconds": 0}), "timeout_seconds"),
        (json!({"timeout_seconds": 86401}), "timeout_seconds"),
        (json!({"max_retries": 101}), "max_retries"),
        (
            json!({"retry_policy": {"jitter_percent": 2}}),
            "retry_policy.jitter_percent",
        ),
        (json!({"schedule_at": "soon"}), "schedule_at"),
        (
            json!({"schedule_at": "2026-01-27T12:10:00Z", "delay_seconds": 5}),
            "delay_seconds",
        ),
        (
            json!({"ttl_seconds": 60, "expires_at": "2026-01-28T12:00:00Z"}),
            "expires_at",
        ),
        (
            json!({"delay_seconds": 120, "ttl_seconds": 60}),
            "ttl_seconds",
        ),
        (json!({"expires_at": "2026-01-27T12:00:00Z"}), "expires_at"),
        (
            json!({"idempotency_key": "k", "idempotency_ttl_seconds": 3600, "delay_seconds": 3600}),
            "delay_seconds",
        ),
        (
            json!({"payload_ref_threshold_bytes": 5}),
            "payload_ref_threshold_bytes",
        ),
        (json!({"max_reschedules": -1}), "max_reschedules"),
    ];
    for (extra, field) in cases {
        let mut body = json!({"task_type": "t", "input": 1});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let (status, problem) = post(&app, body.clone()).await;
        assert_eq!(status, 400, "{body}: {problem}");
        assert_eq!(problem["code"], "invalid_request");
        let detail = problem["detail"].as_str().unwrap();
        assert!(detail.starts_with(&format!("{field}:")), "{body}: {detail}");
    }
    assert!(w.bucket.keys().is_empty());
}

#[tokio::test]
async fn options_through_the_http_body_reach_the_task_and_other_options_are_a_422_saying_so() {
    let w = World::new();
    let app = app(&w);
    let body = json!({"task_type": "t", "input": {"n": 1}, "idempotency_key": "k",
        "timeout_seconds": 1800, "max_retries": 10, "schedule_at": "2026-01-27T12:05:00Z",
        "max_reschedules": 2, "expires_at": "2026-01-27T13:00:00.5Z"});
    let (status, created) = post(&app, body.clone()).await;
    assert_eq!(status, 201, "{created}");
    let task = w.task("k").await.0;
    assert_eq!(task["available_at"], "2026-01-27T12:05:00Z");
    assert_eq!(task["expires_at"], "2026-01-27T13:00:00.500Z");
    assert_eq!(task["timeout_seconds"], 1800);
    assert_eq!(
        w.keys("ready/")[0].split('/').nth(2),
        Some(format!("{:010}", (1_769_515_200 + 300) / 60).as_str())
    );
    let (status, replay) = post(&app, body.clone()).await;
    assert_eq!((status, &replay["task_id"]), (200, &created["task_id"]));
    let mut other = body;
    other["max_retries"] = json!(11);
    let (status, problem) = post(&app, other).await;
    assert_eq!(status, 422);
    assert_eq!(problem["code"], "idempotency_conflict");
    assert!(
        problem["detail"].as_str().unwrap().contains("task options"),
        "{problem}"
    );
}
