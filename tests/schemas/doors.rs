use super::*;

// ---- every door ----

/// The handler over `bucket` on `clock`, validating.
fn harness(bucket: &MemoryStore, clock: &ManualClock) -> Harness {
    Harness::with_settings(bucket.clone(), Some(clock), false, on())
}

/// `send_email`'s schema, published on `store`.
async fn publish_email_schema(store: &dyn Store) {
    let body = document(Some(email_schema()), None);
    let key = "schemas/send_email.json";
    store.put(key, body, PutMode::Overwrite).await.unwrap();
}

/// A bucket where `send_email` has its schema, and the handler over it.
async fn with_email_schema() -> (MemoryStore, Harness) {
    let clock = ManualClock::at_epoch();
    let bucket = common::memory_store(&clock);
    publish_email_schema(&bucket).await;
    let h = harness(&bucket, &clock);
    (bucket, h)
}

fn post(body: Value) -> Value {
    let mut e = common::event("http-v2-post.json");
    e["body"] = json!(body.to_string());
    e
}

#[tokio::test]
async fn post_tasks_answers_400_input_invalid_with_the_failures_as_the_api_document_says() {
    let (_, h) = with_email_schema().await;
    // The handler checks every answer against docs/openapi.yaml.
    let r = h
        .http(post(
            json!({"task_type": "send_email", "input": {"to": ["x"]}, "idempotency_key": "m-1"}),
        ))
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.headers["content-type"], "application/problem+json");
    assert_eq!(r.body["code"], "input_invalid");
    assert_eq!(
        r.body["type"],
        "urn:idempotent-submit:problem:input_invalid"
    );
    assert_eq!(r.body["errors_omitted"], 0);
    let listed = common::openapi::failures(&r.body);
    assert_eq!(
        listed,
        [
            ("".into(), "required".into()),
            ("/to".into(), "type".into())
        ]
    );
    assert!(
        r.body["detail"].as_str().unwrap().starts_with(
            "the input does not match the schema published for task type send_email: 2 failures"
        ),
        "{}",
        r.body
    );
    assert_eq!(h.count("idempotency/").await + h.count("tasks/").await, 0);
    let lines = h.app.metrics.lines();
    assert_eq!(lines.last().unwrap()["InputInvalid"], 1, "{lines:?}");
    // A valid input through the same door: 201.
    let ok = h
        .http(post(
            json!({"task_type": "send_email", "input": {"to": "a@b.c", "subject": "s"}}),
        ))
        .await;
    assert_eq!(ok.status, 201, "{}", ok.body);
}

#[tokio::test]
async fn a_batch_refuses_only_its_invalid_items() {
    let (_, h) = with_email_schema().await;
    let mut e = common::event("http-v2-batch.json");
    e["body"] = json!(json!({"tasks": [
        {"task_type": "send_email", "input": {"to": "a@b.c", "subject": "s"}, "idempotency_key": "b-1"},
        {"task_type": "send_email", "input": {"to": "a@b.c"}, "idempotency_key": "b-2"},
        {"task_type": "other", "input": 1, "idempotency_key": "b-3"},
    ]}).to_string());
    let r = h.http(e).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let results = r.body["results"].as_array().unwrap();
    assert_eq!(results[0]["status_code"], 201);
    assert_eq!(results[1]["code"], "input_invalid", "{}", results[1]);
    assert_eq!(results[1]["status"], 400);
    assert_eq!(results[1]["errors"][0]["keyword"], "required");
    assert_eq!(results[2]["status_code"], 201);
    assert_eq!(h.count("tasks/").await, 2);
}

#[tokio::test]
async fn an_sqs_message_whose_input_is_refused_goes_to_rejected_and_is_not_retried() {
    let (bucket, h) = with_email_schema().await;
    // The sample batch's first three messages; its second is a send_email
    // without a subject.
    let mut batch = common::event("sqs-standard-batch.json");
    batch["Records"].as_array_mut().unwrap().truncate(3);
    let failures = h.sqs(batch).await;
    assert!(failures.is_empty(), "refused, not retried: {failures:?}");
    let rejected: Vec<String> = h
        .keys()
        .await
        .into_iter()
        .filter(|k| k.starts_with("rejected/"))
        .collect();
    assert_eq!(rejected.len(), 1, "{rejected:?}");
    assert!(rejected[0].ends_with("/2e1424d4-f796-459a-8184-9c92662be6da.json"));
    let doc: Value = serde_json::from_slice(&bucket.get(&rejected[0]).await.unwrap().body).unwrap();
    assert_eq!(doc["error"]["code"], "input_invalid");
    assert_eq!(doc["error"]["errors"][0]["pointer"], "");
    assert_eq!(doc["error"]["errors"][0]["keyword"], "required");
    // The other two (other task types) made their tasks; the refused one
    // made no record.
    assert_eq!(h.count("tasks/").await, 2);
    assert_eq!(h.count("idempotency/send_email/").await, 0);
}

#[tokio::test]
async fn an_unusable_schema_is_one_invalid_schema_metric_line_per_invocation() {
    let clock = ManualClock::at_epoch();
    let bucket = common::memory_store(&clock);
    bucket
        .put(
            "schemas/send_email.json",
            Bytes::from_static(b"{\"input\": {\"type\": 5}}"),
            PutMode::Overwrite,
        )
        .await
        .unwrap();
    let h = harness(&bucket, &clock);
    let r = h
        .http(post(
            json!({"task_type": "send_email", "input": {"anything": true}}),
        ))
        .await;
    assert_eq!(r.status, 201, "fail open: {}", r.body);
    let lines = h.app.metrics.lines();
    assert_eq!(lines.last().unwrap()["InvalidSchema"], 1, "{lines:?}");
    let r = h
        .http(post(json!({"task_type": "send_email", "input": 2})))
        .await;
    assert_eq!(r.status, 201);
    assert!(
        h.app
            .metrics
            .lines()
            .iter()
            .filter(|l| l.get("InvalidSchema").is_some())
            .count()
            == 1,
        "cached: not fetched, not counted again within the TTL"
    );
}

/// `idem submit` of `input` as `send_email` under key `c-1`, validating.
async fn submit_email(bucket: &str, input: &str) -> (i32, Value) {
    let env = [("VALIDATE_INPUT_SCHEMAS", "on")];
    let args = [
        "submit",
        "--type",
        "send_email",
        "--input",
        input,
        "--key",
        "c-1",
    ];
    common::idem(bucket, &env, &args).await
}

/// `idem submit` on moto, with validation on: the bad-input exit code and
/// the failures; nothing written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idem_submit_exits_2_listing_the_failures_of_a_refused_input() {
    let store = common::moto_store().await;
    let bucket = store.bucket().to_owned();
    publish_email_schema(&store).await;
    let (code, out) = submit_email(&bucket, r#"{"to": 1, "subject": "s"}"#).await;
    assert_eq!(code, 2, "{out}");
    assert_eq!(out["error"], "input_invalid");
    assert_eq!(out["errors"][0]["pointer"], "/to");
    assert_eq!(out["errors"][0]["keyword"], "type");
    assert_eq!(out["errors_omitted"], 0);
    assert_eq!(common::all_keys(&store).await, ["schemas/send_email.json"]);
    let (code, out) = submit_email(&bucket, r#"{"to": "a@b.c", "subject": "s"}"#).await;
    assert_eq!(code, 0, "{out}");
    // Off (the default): the same refused input is accepted.
    let (code, out) = common::idem(
        &bucket,
        &[],
        &["submit", "--type", "send_email", "--input", r#"{"to": 1}"#],
    )
    .await;
    assert_eq!(code, 0, "{out}");
}
