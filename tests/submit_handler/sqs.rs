use super::*;

// ---- SQS ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mixed_standard_batch_lists_no_failures_and_rejects_what_can_never_succeed() {
    let h = Harness::moto().await;
    h.http(event("http-v2-post.json")).await; // message 6 conflicts with it
    let failures = h.sqs(event("sqs-standard-batch.json")).await;
    assert!(failures.is_empty(), "{failures:?}");
    assert_eq!(h.count("tasks/").await, 1 + 3);
    let rejected = h.objects("rejected/").await;
    let mut codes: Vec<(String, String)> = rejected
        .iter()
        .map(|r| {
            (
                r["message"]["messageId"].as_str().unwrap().to_owned(),
                r["error"]["code"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    codes.sort();
    assert_eq!(
        codes,
        [
            (
                "a1b2c3d4-0000-4000-8000-000000000004".to_owned(),
                "invalid_request".to_owned()
            ),
            (
                "a1b2c3d4-0000-4000-8000-000000000005".to_owned(),
                "invalid_request".to_owned()
            ),
            (
                "a1b2c3d4-0000-4000-8000-000000000006".to_owned(),
                "idempotency_conflict".to_owned()
            ),
        ]
    );
    let key = common::first_under(h.keys().await, "rejected/");
    assert!(
        key.starts_with("rejected/20") && key.ends_with(".json"),
        "{key}"
    );

    // Redelivered: no second task, nothing listed.
    let before = h.keys().await;
    assert!(h.sqs(event("sqs-standard-batch.json")).await.is_empty());
    assert_eq!(h.keys().await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_falls_back_to_the_attribute_then_the_message_id() {
    let h = Harness::moto().await;
    h.sqs(event("sqs-standard-batch.json")).await;
    let q = &h.app.queue;
    let attr = q.record("send_email", "email-7", None).await.unwrap();
    assert!(attr.is_some(), "the Idempotency-Key attribute is the key");
    let by_id = q
        .record("resize_image", "a1b2c3d4-0000-4000-8000-000000000003", None)
        .await
        .unwrap();
    assert!(by_id.is_some(), "the message id is the key of last resort");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_key_through_http_then_sqs_lands_on_one_task() {
    let h = Harness::moto().await;
    let r = h.http(event("http-v2-post.json")).await;
    let mut batch = event("sqs-standard-batch.json");
    let mut m = batch["Records"][0].clone();
    m["body"] = json!(json!({"task_type": "charge_customer", "input": {"order": "ORD-123", "cents": 1999}, "idempotency_key": "charge-ORD-123"}).to_string());
    batch["Records"] = json!([m]);
    assert!(h.sqs(batch).await.is_empty());
    assert_eq!(h.count("tasks/").await, 1);
    let rec = h.record_of("charge_customer", "charge-ORD-123").await;
    assert_eq!(rec.task_id.to_string(), r.body["task_id"].as_str().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_batch_rejects_without_stopping_its_group() {
    let h = Harness::moto().await;
    assert!(h.sqs(event("sqs-fifo-batch.json")).await.is_empty());
    assert_eq!(h.count("tasks/").await, 4);
    assert_eq!(h.count("rejected/").await, 1);
    // The deduplication id is the key.
    assert!(h.has_record("ship", "A-2").await, "A-2");
}

fn record_prefix(scope: &str, key: &str) -> String {
    let k = IdempotencyKey::parse(key).unwrap();
    idempotent_submit::testing::protocol::record::record_key(
        scope,
        &hash::key_hash(scope, &k, None),
    )
    .trim_end_matches(".json")
    .to_owned()
}

/// The handler over a bucket where every `op` under `prefix` fails with a
/// retryable `why`; the bucket, to see its calls.
fn failing(
    op: Op,
    prefix: &str,
    why: &str,
) -> (Harness, FaultyStore<idempotent_submit::MemoryStore>) {
    let clock = ManualClock::at_epoch();
    let f = FaultyStore::new(common::memory_store(&clock));
    f.inject(Some(op), prefix, 1, usize::MAX, common::unavailable(why));
    (Harness::over(f.clone(), Some(&clock), false), f)
}

#[tokio::test]
async fn a_fifo_group_stops_at_its_first_failure_and_lists_the_rest_untouched() {
    let (h, f) = failing(Op::PutCreate, &record_prefix("ship", "A-1"), "503 SlowDown");
    let failures = h.sqs(event("sqs-fifo-batch.json")).await;
    assert_eq!(
        failures,
        [
            "11111111-0000-4000-8000-000000000001",
            "11111111-0000-4000-8000-000000000003"
        ]
    );
    // A-2 was never touched; group B went on.
    assert!(
        !f.calls()
            .iter()
            .any(|c| c.key.starts_with(&record_prefix("ship", "A-2")))
    );
    assert!(h.has_record("ship", "B-3").await, "B-3");
    assert_eq!(h.count("tasks/").await, 2);
}

#[tokio::test]
async fn a_standard_batch_lists_exactly_the_storage_failures() {
    let prefix = record_prefix("charge_customer", "charge-ORD-200");
    let (h, _) = failing(Op::PutCreate, &prefix, "500");
    let failures = h.sqs(event("sqs-standard-batch.json")).await;
    assert_eq!(failures, ["059f36b4-87a3-44ab-83d2-661975830a7d"]);
}

#[tokio::test]
async fn a_rejection_that_cannot_be_written_is_retried() {
    let (h, _) = failing(Op::Put, "rejected/", "503");
    let mut failures = h.sqs(event("sqs-standard-batch.json")).await;
    failures.sort();
    assert_eq!(
        failures,
        [
            "a1b2c3d4-0000-4000-8000-000000000004",
            "a1b2c3d4-0000-4000-8000-000000000005"
        ]
    );
}

#[tokio::test]
async fn storage_failures_are_503_with_retry_after_never_success() {
    let clock = ManualClock::at_epoch();
    let f = FaultyStore::new(common::memory_store(&clock));
    f.inject(None, "", 1, usize::MAX, common::unavailable("503 SlowDown"));
    let h = Harness::over(f, Some(&clock), false);
    let r = h.http(event("http-v2-post.json")).await;
    assert_problem(&r, 503, "storage_unavailable");
    assert!(r.headers["retry-after"].parse::<u64>().unwrap() >= 1);
    let m = h.app.metrics.lines();
    assert_eq!(m[0]["StorageError"], 1);
}

#[tokio::test]
async fn an_event_of_no_known_shape_is_an_error_not_a_panic() {
    let (h, _) = Harness::memory();
    let r = handle_submit(
        &h.app,
        LambdaEvent::new(json!({"hello": 1}), Context::default()),
    )
    .await;
    assert!(r.is_err());
}

#[tokio::test]
async fn an_s3_or_sns_event_sent_to_submit_is_refused_naming_its_source_and_writes_nothing() {
    let (h, _) = Harness::memory();
    let s3 = json!({"Records": [{
        "eventVersion": "2.1", "eventSource": "aws:s3", "eventName": "ObjectCreated:Put",
        "s3": {"bucket": {"name": "b"}, "object": {"key": "idempotency/t/ab.json"}}
    }]});
    let sns = json!({"Records": [{
        "EventSource": "aws:sns", "EventVersion": "1.0",
        "Sns": {"MessageId": "m-1", "Message": "{\"task_type\":\"t\",\"input\":1}"}
    }]});
    // An SQS batch with one foreign record is refused whole.
    let mut mixed = event("sqs-standard-batch.json");
    mixed["Records"]
        .as_array_mut()
        .unwrap()
        .push(s3["Records"][0].clone());
    for (e, source) in [(s3, "aws:s3"), (sns, "aws:sns"), (mixed, "aws:s3")] {
        let r = handle_submit(&h.app, LambdaEvent::new(e, Context::default())).await;
        let err = r.expect_err("refused").to_string();
        assert!(err.contains(source), "{err}");
        assert!(err.contains("aws:sqs"), "{err}");
    }
    assert!(h.keys().await.is_empty());
    // The genuine batch still works.
    assert!(h.sqs(event("sqs-standard-batch.json")).await.is_empty());
    assert!(h.count("tasks/").await > 0);
}
