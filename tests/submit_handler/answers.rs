use super::*;

#[tokio::test]
async fn payload_2_responses_carry_cookies_and_rest_responses_do_not() {
    // A function URL (and `cargo lambda watch`) reads `cookies`; a REST API
    // refuses a proxy response with members it does not know.
    let (h, _) = Harness::memory();
    let v2 = h.raw(event("function-url-post.json")).await;
    assert_eq!(v2["cookies"], json!([]));
    let v1 = h.raw(event("http-v1-post.json")).await;
    let mut keys: Vec<&str> = v1.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(keys, ["body", "headers", "isBase64Encoded", "statusCode"]);
}

#[tokio::test]
async fn a_5xx_says_nothing_of_s3_and_names_its_request() {
    let clock = ManualClock::at_epoch();
    let f = FaultyStore::new(common::memory_store(&clock));
    // What S3 says to a role that may not use the bucket.
    let leak = "403 AccessDenied: User: arn:aws:sts::123456789012:assumed-role/submit-role/fn \
                is not authorized to perform: s3:PutObject on resource: \
                arn:aws:s3:::secret-queue-bucket/idempotency/x.json";
    f.inject(
        None,
        "",
        1,
        usize::MAX,
        Fault::Fail(StoreError::Fatal(leak.into())),
    );
    let h = Harness::over(f.clone(), Some(&clock), false);
    let e = event("http-v2-post.json");
    let request_id = request_id_of(&e);
    let r = h.http(e).await;
    assert_problem(&r, 500, "storage_error");
    let body = r.body.to_string();
    for secret in [
        "arn:",
        "123456789012",
        "secret-queue-bucket",
        "AccessDenied",
    ] {
        assert!(!body.contains(secret), "{secret} in {body}");
    }
    assert_eq!(r.body["instance"], request_id.as_str());

    // A retryable failure too: generic, with its instance.
    let f = FaultyStore::new(common::memory_store(&clock));
    f.inject(
        None,
        "",
        1,
        usize::MAX,
        Fault::Fail(StoreError::Unavailable(format!("503 SlowDown: {leak}"))),
    );
    let h = Harness::over(f, Some(&clock), false);
    let r = h.http(event("http-v2-post.json")).await;
    assert_problem(&r, 503, "storage_unavailable");
    assert!(
        !r.body.to_string().contains("secret-queue-bucket"),
        "{}",
        r.body
    );
    assert_eq!(r.body["instance"], request_id.as_str());
}

#[tokio::test]
async fn every_problem_names_its_request() {
    let (h, _) = Harness::memory();
    let mut e = event("http-v2-post.json");
    e["body"] = json!("not json");
    let request_id = request_id_of(&e);
    let r = h.http(e).await;
    assert_problem(&r, 400, "invalid_request");
    assert_eq!(r.body["instance"], request_id.as_str());
}

#[tokio::test]
async fn a_body_that_is_not_json_is_a_415_naming_what_a_post_takes() {
    let (h, store) = Harness::memory();
    let r = h
        .http(with_header(
            v2_post(ok_body()),
            "content-type",
            "application/x-www-form-urlencoded",
        ))
        .await;
    assert_problem(&r, 415, "unsupported_media_type");
    assert_eq!(r.headers["accept-post"], "application/json");
    assert!(store.is_empty());
}

#[tokio::test]
async fn location_is_the_path_the_caller_posted_to() {
    for (file, prefix) in [
        ("http-v1-post.json", "/prod/tasks/"),
        ("http-v2-post.json", "/tasks/"),
        ("http-v2-post-staged-base64.json", "/prod/tasks/"),
        ("function-url-post.json", "/tasks/"),
    ] {
        let (h, _) = Harness::memory();
        let r = h.http(event(file)).await;
        assert_eq!(r.status, 201, "{file}: {}", r.body);
        let id = r.body["task_id"].as_str().unwrap();
        assert_eq!(r.headers["location"], format!("{prefix}{id}"), "{file}");
    }
}

#[tokio::test]
async fn an_undetermined_submit_is_submit_in_progress_with_its_own_metric() {
    let clock = ManualClock::at_epoch();
    let bucket = common::memory_store(&clock);
    // A submit that died right after its record.
    let dying = common::world::dying_at(
        bucket.clone(),
        Op::PutCreate,
        "idempotency/",
        Fault::CrashAfter,
    );
    let h = Harness::over(dying, Some(&clock), false);
    let _ = h.http(event("http-v2-post.json")).await;
    // Just past its finish deadline, its task is not there: undetermined.
    clock.advance(chrono::Duration::seconds(2400 + 1));
    let h = Harness::over(bucket, Some(&clock), false);
    let r = h.http(event("http-v2-post.json")).await;
    assert_problem(&r, 503, "submit_in_progress");
    assert!(r.headers["retry-after"].parse::<u64>().unwrap() > 800);
    let m = h.app.metrics.lines();
    assert_eq!(m[0]["SubmitInProgress"], 1, "{m:?}");
    assert!(m[0].get("StorageError").is_none(), "{m:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_options_come_through_sqs_bodies_and_batch_items_and_bad_ones_are_rejected() {
    let h = Harness::moto().await;
    let mut batch = event("sqs-standard-batch.json");
    let mut good = batch["Records"][0].clone();
    good["messageId"] = json!("m-good");
    good["body"] = json!(
        json!({"task_type": "remind", "input": {"u": 1}, "idempotency_key": "r-sqs",
        "delay_seconds": 120, "max_retries": 9, "ttl_seconds": 3600})
        .to_string()
    );
    let mut bad = batch["Records"][0].clone();
    bad["messageId"] = json!("m-bad");
    bad["body"] = json!(
        json!({"task_type": "remind", "input": {"u": 2}, "idempotency_key": "r-bad",
        "schedule_at": "2030-01-01T00:00:00Z", "delay_seconds": 5})
        .to_string()
    );
    batch["Records"] = json!([good, bad]);
    assert!(h.sqs(batch).await.is_empty(), "nothing to retry");
    let (rec, _) = h
        .app
        .queue
        .record("remind", "r-sqs", None)
        .await
        .unwrap()
        .unwrap();
    let task: Value = serde_json::from_slice(
        &h.app
            .queue
            .task(rec.task_id)
            .await
            .unwrap()
            .expect("the task"),
    )
    .unwrap();
    assert_eq!(task["max_retries"], 9);
    assert!(task["expires_at"].is_string() && task["available_at"] != task["created_at"]);
    assert!(rec.options_hash.is_some());
    let rejected = h.objects("rejected/").await;
    assert_eq!(rejected.len(), 1);
    assert!(
        rejected[0].to_string().contains("delay_seconds"),
        "the rejection names the field: {}",
        rejected[0]
    );

    // Batch items carry them too, each checked as if alone.
    let mut e = event("http-v2-batch.json");
    e["body"] = json!(json!({"tasks": [
        {"task_type": "remind", "input": {"u": 3}, "idempotency_key": "r-b1", "timeout_seconds": 1800},
        {"task_type": "remind", "input": {"u": 4}, "idempotency_key": "r-b2", "timeout_seconds": 0},
    ]}).to_string());
    let r = h.http(e).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["results"][0]["status_code"], 201);
    assert_eq!(r.body["results"][1]["status"], 400);
    let id: uuid::Uuid = r.body["results"][0]["task_id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let task: Value =
        serde_json::from_slice(&h.app.queue.task(id).await.unwrap().unwrap()).unwrap();
    assert_eq!(task["timeout_seconds"], 1800);
}

/// Ends `task_key`'s task as buquet's worker does when it gives up.
async fn fail_task(h: &Harness, task_key: &str) {
    common::end_task(h.app.queue.engine().store().as_ref(), task_key, "failed").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_tasks_key_is_a_200_replay_unless_the_post_says_if_task_failed_new_task_then_a_201_naming_it()
 {
    let h = Harness::moto().await;
    let body = json!({"task_type": "t", "input": 1, "idempotency_key": "k"});
    let first = h.http(v2_post(body.clone())).await;
    assert_eq!(first.status, 201, "{}", first.body);
    fail_task(&h, first.body["task_key"].as_str().unwrap()).await;

    let replay = h.http(v2_post(body.clone())).await;
    assert_eq!(replay.status, 200, "{}", replay.body);
    assert_eq!(replay.body["task_id"], first.body["task_id"]);
    assert_eq!(replay.body["status"], "failed");
    assert!(replay.body.get("replaces_task_id").is_none());

    let mut again = body;
    again["if_task_failed"] = json!("new_task");
    let new = h.http(v2_post(again.clone())).await;
    assert_eq!(new.status, 201, "{}", new.body);
    assert_ne!(new.body["task_id"], first.body["task_id"]);
    assert_eq!(new.body["replaces_task_id"], first.body["task_id"]);
    assert_eq!(new.headers["idempotent-replayed"], "false");
    let id = new.body["task_id"].as_str().unwrap();
    assert_eq!(new.headers["location"], format!("/tasks/{id}"));
    // A retry of that POST replays the new task, and still names the old.
    let retried = h.http(v2_post(again)).await;
    assert_eq!(retried.status, 200);
    assert_eq!(retried.body["task_id"], id);
    assert_eq!(retried.body["replaces_task_id"], first.body["task_id"]);
    assert_eq!(h.count("tasks/").await, 2);
    let reused: u64 = h
        .app
        .metrics
        .lines()
        .iter()
        .filter_map(|l| l["FailedKeyReuses"].as_u64())
        .sum();
    assert_eq!(reused, 1);
}

#[tokio::test]
async fn the_if_task_failed_attribute_asks_an_sqs_message_for_a_new_task_and_a_bad_one_is_rejected()
{
    let (h, store) = Harness::memory();
    let body = r#"{"task_type": "t", "input": 1, "idempotency_key": "k"}"#;
    assert!(h.sqs(sqs_with_bodies(&[body])).await.is_empty());
    let record = h.app.queue.record("t", "k", None).await.unwrap().unwrap().0;
    fail_task(&h, &record.task_key).await;
    let with_attribute = |value: &str| {
        let mut e = sqs_with_bodies(&[body]);
        e["Records"][0]["messageId"] = json!(format!("m-{value}"));
        e["Records"][0]["messageAttributes"] = json!({"If-Task-Failed": {
            "stringValue": value, "stringListValues": [], "binaryListValues": [], "dataType": "String"
        }});
        e
    };
    assert!(h.sqs(with_attribute("sometimes")).await.is_empty());
    let rejected = h.objects("rejected/").await;
    assert_eq!(rejected.len(), 1);
    assert!(
        rejected[0]["error"]["detail"]
            .as_str()
            .unwrap()
            .contains("If-Task-Failed"),
        "{}",
        rejected[0]
    );
    assert_eq!(
        store
            .keys()
            .iter()
            .filter(|k| k.starts_with("tasks/"))
            .count(),
        1
    );
    assert!(h.sqs(with_attribute("new_task")).await.is_empty());
    let now = h.app.queue.record("t", "k", None).await.unwrap().unwrap().0;
    assert_ne!(now.task_id, record.task_id);
    assert_eq!(now.replaces_task_id, Some(record.task_id));
    assert_eq!(
        store
            .keys()
            .iter()
            .filter(|k| k.starts_with("tasks/"))
            .count(),
        2
    );
}

/// The request id API Gateway gave `event`.
fn request_id_of(event: &Value) -> String {
    event["requestContext"]["requestId"]
        .as_str()
        .unwrap()
        .to_owned()
}
