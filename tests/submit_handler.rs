//! The `submit` handler on every sample event of events/ (against moto), a
//! table of bad inputs across REST, HTTP API and SQS, SQS batches, tenants,
//! and storage failures (with the fault-injecting store).

use crate::common;

use std::sync::Arc;

use crate::common::event;
use crate::common::handler::{Harness, Resp};
use idempotent_submit::lambda::{App, Metrics, handle_submit};
use idempotent_submit::protocol::IdempotencyKey;
use idempotent_submit::protocol::hash;
use idempotent_submit::store::{Fault, FaultyStore, Op, Store, StoreError};
use idempotent_submit::{Config, ManualClock, Queue};
use lambda_runtime::{Context, LambdaEvent};
use serde_json::{Value, json};

fn config(tenants: bool) -> Config {
    Config {
        bucket: "unused".into(),
        force_path_style: true,
        tenant_isolation: tenants,
        allow_key_reset: false,
        settings: common::settings(),
        record_events: idempotent_submit::RecordEvents::Bucket,
        due_queue_url: None,
        due_message: Default::default(),
        s3_credentials_secret: None,
    }
}

impl Harness {
    async fn rejected(&self) -> Vec<Value> {
        let store = self.app.queue.engine().store();
        let mut out = Vec::new();
        for k in self
            .keys()
            .await
            .into_iter()
            .filter(|k| k.starts_with("rejected/"))
        {
            out.push(serde_json::from_slice(&store.get(&k).await.unwrap().body).unwrap());
        }
        out
    }
}

fn assert_problem(r: &Resp, status: u64, code: &str) {
    assert_eq!(r.status, status, "{}", r.body);
    assert_eq!(r.headers["content-type"], "application/problem+json");
    assert_eq!(r.body["code"], code, "{}", r.body);
    assert_eq!(r.body["status"], status);
    for f in ["type", "title", "detail"] {
        assert!(r.body[f].is_string(), "{f} in {}", r.body);
    }
}

// ---- every sample event ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rest_api_post_creates_then_replays() {
    let h = Harness::moto().await;
    let r = h.http(event("http-v1-post.json")).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let id = r.body["task_id"].as_str().unwrap().to_owned();
    // The REST API's stage stays in the path the caller uses.
    assert_eq!(r.headers["location"], format!("/prod/tasks/{id}"));
    assert_eq!(r.headers["idempotent-replayed"], "false");
    assert_eq!(r.headers["content-type"], "application/json");
    assert_eq!(r.body["task_key"], format!("tasks/{}/{id}.json", &id[..1]));
    assert_eq!(r.body["task_type"], "charge_customer");
    assert_eq!(r.body["status"], "pending");
    assert_eq!(r.body["replayed"], false);
    assert_eq!(r.body["idempotency"]["key"], "charge-ORD-123");
    assert_eq!(r.body["idempotency"]["scope"], "charge_customer");
    assert!(
        r.body["idempotency"]["key_hash"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    assert!(r.body["created_at"].as_str().unwrap().ends_with('Z'));
    assert_eq!(
        (
            h.count("tasks/").await,
            h.count("ready/").await,
            h.count("idempotency/").await
        ),
        (1, 1, 1)
    );

    let again = h.http(event("http-v1-post.json")).await;
    assert_eq!(again.status, 200);
    assert_eq!(again.headers["idempotent-replayed"], "true");
    assert!(!again.headers.contains_key("location"));
    assert_eq!(again.body["task_id"], id.as_str());
    assert_eq!(again.body["replayed"], true);
    assert_eq!(h.keys().await.len(), 3);
    let m = h.app.metrics.lines();
    assert_eq!(
        (m[0]["Created"].as_u64(), m[1]["Replayed"].as_u64()),
        (Some(1), Some(1))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_key_through_rest_http_api_and_a_function_url_is_one_task() {
    let h = Harness::moto().await;
    let a = h.http(event("http-v1-post.json")).await;
    let b = h.http(event("http-v2-post.json")).await;
    let c = h.http(event("function-url-post.json")).await;
    assert_eq!((a.status, b.status, c.status), (201, 200, 200));
    assert_eq!(a.body["task_id"], b.body["task_id"]);
    assert_eq!(a.body["task_id"], c.body["task_id"]);
    assert_eq!(h.count("tasks/").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_input_under_a_used_key_is_a_422_and_writes_nothing() {
    let h = Harness::moto().await;
    let first = h.http(event("http-v2-post.json")).await;
    let before = h.keys().await;
    let r = h.http(event("http-v2-post-conflict.json")).await;
    assert_problem(&r, 422, "idempotency_conflict");
    assert_eq!(r.body["task_id"], first.body["task_id"]);
    assert_eq!(h.keys().await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_staged_base64_post_with_a_bare_token_key_creates_its_task() {
    let h = Harness::moto().await;
    let r = h.http(event("http-v2-post-staged-base64.json")).await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.body["idempotency"]["key"], "email-42");
    let task = h.http(get_event(r.body["task_id"].as_str().unwrap())).await;
    assert_eq!(task.status, 200);
    assert_eq!(task.body["input"]["to"], "a@example.com");
    assert_eq!(task.body["task_type"], "send_email");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_without_a_key_creates_a_task_without_idempotency() {
    let h = Harness::moto().await;
    let r = h.http(event("http-v2-post-no-key.json")).await;
    assert_eq!(r.status, 201);
    assert!(r.body["idempotency"].is_null());
    assert!(!r.headers.contains_key("idempotent-replayed"));
    let again = h.http(event("http-v2-post-no-key.json")).await;
    assert_ne!(again.body["task_id"], r.body["task_id"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_error_events_answer_their_problems() {
    let h = Harness::moto().await;
    assert_problem(
        &h.http(event("http-v2-post-invalid.json")).await,
        400,
        "invalid_request",
    );
    assert_problem(
        &h.http(event("http-v1-get-missing.json")).await,
        404,
        "not_found",
    );
    assert_problem(
        &h.http(event("http-v2-get-missing.json")).await,
        404,
        "not_found",
    );
    assert_problem(
        &h.http(event("http-v2-unknown-route.json")).await,
        404,
        "not_found",
    );
    let r = h.http(event("http-v2-wrong-method.json")).await;
    assert_problem(&r, 405, "method_not_allowed");
    assert_eq!(r.headers["allow"], "POST");
    assert!(h.keys().await.is_empty());
}

fn get_event(id: &str) -> Value {
    let mut e = event("http-v2-get-missing.json");
    e["rawPath"] = json!(format!("/tasks/{id}"));
    e["requestContext"]["http"]["path"] = json!(format!("/tasks/{id}"));
    e
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_answers_the_task_object() {
    let h = Harness::moto().await;
    let r = h.http(event("http-v2-post.json")).await;
    let id = r.body["task_id"].as_str().unwrap();
    let t = h.http(get_event(id)).await;
    assert_eq!(t.status, 200);
    assert_eq!(t.body["id"], id);
    assert_eq!(t.body["status"], "pending");
    assert_eq!(t.body["input"], json!({"cents": 1999, "order": "ORD-123"}));
    // Under a stage, too (REST API).
    let mut v1 = event("http-v1-get-missing.json");
    v1["path"] = json!(format!("/tasks/{id}"));
    assert_eq!(h.http(v1).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_tenant_isolation_an_authenticated_callers_key_is_its_own() {
    let store = common::moto_store().await;
    let plain = Harness::over(store.clone(), None, false);
    let isolated = Harness::over(store, None, true);
    let a = plain.http(event("http-v2-post.json")).await;
    let jwt = isolated.http(event("http-v2-post-jwt.json")).await;
    assert_eq!(jwt.status, 201, "another tenant: a new task");
    assert_ne!(jwt.body["task_id"], a.body["task_id"]);
    let again = isolated.http(event("http-v2-post-jwt.json")).await;
    assert_eq!(again.body["task_id"], jwt.body["task_id"]);
    // Off: the JWT caller shares the plain namespace.
    let off = plain.http(event("http-v2-post-jwt.json")).await;
    assert_eq!(off.body["task_id"], a.body["task_id"]);
}

#[tokio::test]
async fn with_tenant_isolation_a_request_without_a_principal_is_401_and_writes_nothing() {
    let clock = ManualClock::at_epoch();
    let store = common::memory_store(&clock);
    let isolated = Harness::over(store.clone(), Some(&clock), true);
    let post = isolated.http(event("http-v2-post.json")).await;
    assert_problem(&post, 401, "unauthenticated");
    assert!(isolated.keys().await.is_empty());
    // A REST API without an authorizer, and a GET, too.
    assert_problem(
        &isolated.http(event("http-v1-post.json")).await,
        401,
        "unauthenticated",
    );
    let get = isolated
        .http(get_event(&uuid::Uuid::new_v4().to_string()))
        .await;
    assert_problem(&get, 401, "unauthenticated");
    // A Lambda authorizer's simple response without a principalId in its
    // context names no one.
    let mut simple = event("http-v2-post.json");
    simple["requestContext"]["authorizer"] = json!({"lambda": {"tenant": "x"}});
    assert_problem(&isolated.http(simple).await, 401, "unauthenticated");
    assert!(isolated.keys().await.is_empty());
    // Off, the same request is served from the shared namespace.
    let plain = Harness::over(store, Some(&clock), false);
    assert_eq!(plain.http(event("http-v2-post.json")).await.status, 201);
}

fn as_principal(mut e: Value, authorizer: Value) -> Value {
    e["requestContext"]["authorizer"] = authorizer;
    e
}

fn assumed_role(session: &str) -> Value {
    json!({"iam": {"userArn": format!("arn:aws:sts::123456789012:assumed-role/producer/{session}")}})
}

#[tokio::test]
async fn every_session_of_an_assumed_role_is_one_tenant() {
    let clock = ManualClock::at_epoch();
    let store = common::memory_store(&clock);
    let h = Harness::over(store, Some(&clock), true);
    let first = h
        .http(as_principal(
            event("http-v2-post.json"),
            assumed_role("i-0aaa"),
        ))
        .await;
    assert_eq!(first.status, 201, "{}", first.body);
    let retry = h
        .http(as_principal(
            event("http-v2-post.json"),
            assumed_role("i-0bbb"),
        ))
        .await;
    assert_eq!(retry.status, 200, "{}", retry.body);
    assert_eq!(retry.body["task_id"], first.body["task_id"]);
    assert_eq!(h.count("tasks/").await, 1);
    // Another role is another tenant.
    let other = json!({"iam": {"userArn": "arn:aws:sts::123456789012:assumed-role/other/i-0aaa"}});
    let r = h
        .http(as_principal(event("http-v2-post.json"), other))
        .await;
    assert_eq!(r.status, 201);
    assert_ne!(r.body["task_id"], first.body["task_id"]);
}

#[tokio::test]
async fn a_lambda_authorizers_simple_response_names_the_tenant_by_principal_id() {
    let clock = ManualClock::at_epoch();
    let h = Harness::over(common::memory_store(&clock), Some(&clock), true);
    let by = |p: &str| json!({"lambda": {"principalId": p}});
    // The sample event: an authorizer answered
    // `{"isAuthorized": true, "context": {"principalId": "team-payments"}}`.
    let sample = h.http(event("http-v2-post-lambda-authorizer.json")).await;
    assert_eq!(sample.status, 201, "{}", sample.body);
    let a = h
        .http(as_principal(event("http-v2-post.json"), by("team-a")))
        .await;
    let b = h
        .http(as_principal(event("http-v2-post.json"), by("team-b")))
        .await;
    let a2 = h
        .http(as_principal(event("http-v2-post.json"), by("team-a")))
        .await;
    assert_eq!((a.status, b.status, a2.status), (201, 201, 200));
    assert_ne!(a.body["task_id"], b.body["task_id"]);
    assert_ne!(a.body["task_id"], sample.body["task_id"]);
    assert_eq!(a.body["task_id"], a2.body["task_id"]);
}

#[tokio::test]
async fn with_tenant_isolation_get_answers_only_the_tenants_own_tasks() {
    let clock = ManualClock::at_epoch();
    let store = common::memory_store(&clock);
    let h = Harness::over(store.clone(), Some(&clock), true);
    let alice = json!({"lambda": {"principalId": "alice"}});
    let bob = json!({"lambda": {"principalId": "bob"}});
    let keyed = h
        .http(as_principal(event("http-v2-post.json"), alice.clone()))
        .await;
    let keyless = h
        .http(as_principal(
            event("http-v2-post-no-key.json"),
            alice.clone(),
        ))
        .await;
    assert_eq!((keyed.status, keyless.status), (201, 201));
    // A task submitted without isolation (SQS, the CLI) names no tenant.
    let shared = Harness::over(store, Some(&clock), false)
        .http(event("http-v2-post-no-key.json"))
        .await;
    let alice_tenant = idempotent_submit::protocol::Tenant::from_principal("lambda:alice")
        .unwrap()
        .id();
    for id in [&keyed.body["task_id"], &keyless.body["task_id"]] {
        let id = id.as_str().unwrap();
        // The task object names its tenant, keyed or not (the seal in its id
        // is for after a worker rewrote it).
        let raw = h
            .app
            .queue
            .task(id.parse().unwrap())
            .await
            .unwrap()
            .unwrap();
        let task: Value = serde_json::from_slice(&raw).unwrap();
        assert_eq!(
            task["idempotency"]["tenant"],
            alice_tenant.as_str(),
            "{task}"
        );
        let own = h.http(as_principal(get_event(id), alice.clone())).await;
        assert_eq!(own.status, 200, "{}", own.body);
        assert_eq!(own.body["id"], id);
        let other = h.http(as_principal(get_event(id), bob.clone())).await;
        assert_problem(&other, 404, "not_found");
        // Exactly the answer for a task that does not exist.
        let none = h
            .http(as_principal(
                get_event(&uuid::Uuid::new_v4().to_string()),
                bob.clone(),
            ))
            .await;
        assert_eq!(other.body["detail"], none.body["detail"]);
    }
    let id = shared.body["task_id"].as_str().unwrap();
    let r = h.http(as_principal(get_event(id), alice)).await;
    assert_problem(&r, 404, "not_found");
}

// ---- SQS ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mixed_standard_batch_lists_no_failures_and_rejects_what_can_never_succeed() {
    let h = Harness::moto().await;
    h.http(event("http-v2-post.json")).await; // message 6 conflicts with it
    let failures = h.sqs(event("sqs-standard-batch.json")).await;
    assert!(failures.is_empty(), "{failures:?}");
    assert_eq!(h.count("tasks/").await, 1 + 3);
    let rejected = h.rejected().await;
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
    let key = h
        .keys()
        .await
        .into_iter()
        .find(|k| k.starts_with("rejected/"))
        .unwrap();
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
    let (rec, _) = h
        .app
        .queue
        .record("charge_customer", "charge-ORD-123", None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(rec.task_id.to_string(), r.body["task_id"].as_str().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_batch_rejects_without_stopping_its_group() {
    let h = Harness::moto().await;
    assert!(h.sqs(event("sqs-fifo-batch.json")).await.is_empty());
    assert_eq!(h.count("tasks/").await, 4);
    assert_eq!(h.count("rejected/").await, 1);
    // The deduplication id is the key.
    assert!(
        h.app
            .queue
            .record("ship", "A-2", None)
            .await
            .unwrap()
            .is_some()
    );
}

fn record_prefix(scope: &str, key: &str) -> String {
    let k = IdempotencyKey::parse(key).unwrap();
    idempotent_submit::protocol::record::record_key(scope, &hash::key_hash(scope, &k, None))
        .trim_end_matches(".json")
        .to_owned()
}

#[tokio::test]
async fn a_fifo_group_stops_at_its_first_failure_and_lists_the_rest_untouched() {
    let clock = ManualClock::at_epoch();
    let f = FaultyStore::new(common::memory_store(&clock));
    f.inject(
        Some(Op::PutCreate),
        &record_prefix("ship", "A-1"),
        1,
        usize::MAX,
        Fault::Fail(StoreError::Unavailable("503 SlowDown".into())),
    );
    let h = Harness::over(f.clone(), Some(&clock), false);
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
    assert!(
        h.app
            .queue
            .record("ship", "B-3", None)
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(h.count("tasks/").await, 2);
}

#[tokio::test]
async fn a_standard_batch_lists_exactly_the_storage_failures() {
    let clock = ManualClock::at_epoch();
    let f = FaultyStore::new(common::memory_store(&clock));
    f.inject(
        Some(Op::PutCreate),
        &record_prefix("charge_customer", "charge-ORD-200"),
        1,
        usize::MAX,
        Fault::Fail(StoreError::Unavailable("500".into())),
    );
    let h = Harness::over(f, Some(&clock), false);
    let failures = h.sqs(event("sqs-standard-batch.json")).await;
    assert_eq!(failures, ["059f36b4-87a3-44ab-83d2-661975830a7d"]);
}

#[tokio::test]
async fn a_rejection_that_cannot_be_written_is_retried() {
    let clock = ManualClock::at_epoch();
    let f = FaultyStore::new(common::memory_store(&clock));
    f.inject(
        Some(Op::Put),
        "rejected/",
        1,
        usize::MAX,
        Fault::Fail(StoreError::Unavailable("503".into())),
    );
    let h = Harness::over(f, Some(&clock), false);
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
    f.inject(
        None,
        "",
        1,
        usize::MAX,
        Fault::Fail(StoreError::Unavailable("503 SlowDown".into())),
    );
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

// ---- bad input, at least 30 cases ----

fn v2_post(body: Value) -> Value {
    let mut e = event("http-v2-post.json");
    e["body"] = json!(body.to_string());
    e
}

fn v2_raw(body: &str) -> Value {
    let mut e = event("http-v2-post.json");
    e["body"] = json!(body);
    e
}

fn v1_post(body: Value) -> Value {
    let mut e = event("http-v1-post.json");
    e["body"] = json!(body.to_string());
    e["headers"] = json!({"content-type": "application/json"});
    e
}

fn with_header(mut e: Value, k: &str, v: &str) -> Value {
    e["headers"][k] = json!(v);
    e
}

fn ok_body() -> Value {
    json!({"task_type": "t", "input": {"a": 1}})
}

#[tokio::test]
async fn every_bad_http_input_gets_its_4xx_and_writes_nothing() {
    let big = "x".repeat(262_145);
    let cases: Vec<(&str, Value, u64, &str)> = vec![
        ("invalid JSON", v2_raw("{"), 400, "invalid_request"),
        ("empty body", v2_raw(""), 400, "invalid_request"),
        ("an array body", v2_raw("[1,2]"), 400, "invalid_request"),
        ("a string body", v2_raw("\"task\""), 400, "invalid_request"),
        (
            "missing task_type",
            v2_post(json!({"input": 1})),
            400,
            "invalid_request",
        ),
        (
            "missing input",
            v2_post(json!({"task_type": "t"})),
            400,
            "invalid_request",
        ),
        (
            "if_task_failed not one of replay, new_task",
            v2_post(json!({"task_type": "t", "input": 1, "if_task_failed": "retry"})),
            400,
            "invalid_request",
        ),
        (
            "if_task_failed not a string",
            v2_post(json!({"task_type": "t", "input": 1, "if_task_failed": true})),
            400,
            "invalid_request",
        ),
        (
            "task_type a number",
            v2_post(json!({"task_type": 5, "input": 1})),
            400,
            "invalid_request",
        ),
        (
            "task_type empty",
            v2_post(json!({"task_type": "", "input": 1})),
            400,
            "invalid_request",
        ),
        (
            "task_type with a slash",
            v2_post(json!({"task_type": "a/b", "input": 1})),
            400,
            "invalid_request",
        ),
        (
            "task_type starting with a dot",
            v2_post(json!({"task_type": ".a", "input": 1})),
            400,
            "invalid_request",
        ),
        (
            "task_type too long",
            v2_post(json!({"task_type": "a".repeat(129), "input": 1})),
            400,
            "invalid_request",
        ),
        (
            "unknown field",
            v2_post(json!({"task_type": "t", "input": 1, "idempotency_ky": "k"})),
            400,
            "invalid_request",
        ),
        (
            "key a number",
            v2_post(json!({"task_type": "t", "input": 1, "idempotency_key": 7})),
            400,
            "invalid_request",
        ),
        (
            "key empty",
            v2_post(json!({"task_type": "t", "input": 1, "idempotency_key": ""})),
            400,
            "invalid_request",
        ),
        (
            "key too long",
            v2_post(json!({"task_type": "t", "input": 1, "idempotency_key": "k".repeat(256)})),
            400,
            "invalid_request",
        ),
        (
            "key with a newline",
            v2_post(json!({"task_type": "t", "input": 1, "idempotency_key": "a\nb"})),
            400,
            "invalid_request",
        ),
        (
            "scope with a space",
            v2_post(
                json!({"task_type": "t", "input": 1, "idempotency_key": "k", "idempotency_scope": "a b"}),
            ),
            400,
            "invalid_request",
        ),
        (
            "scope a number",
            v2_post(
                json!({"task_type": "t", "input": 1, "idempotency_key": "k", "idempotency_scope": 1}),
            ),
            400,
            "invalid_request",
        ),
        (
            "TTL under an hour",
            v2_post(
                json!({"task_type": "t", "input": 1, "idempotency_key": "k", "idempotency_ttl_seconds": 3599}),
            ),
            400,
            "invalid_request",
        ),
        (
            "TTL over the maximum",
            v2_post(
                json!({"task_type": "t", "input": 1, "idempotency_key": "k", "idempotency_ttl_seconds": 365 * 86400 + 1}),
            ),
            400,
            "invalid_request",
        ),
        (
            "TTL negative",
            v2_post(
                json!({"task_type": "t", "input": 1, "idempotency_key": "k", "idempotency_ttl_seconds": -5}),
            ),
            400,
            "invalid_request",
        ),
        (
            "TTL a fraction",
            v2_post(
                json!({"task_type": "t", "input": 1, "idempotency_key": "k", "idempotency_ttl_seconds": 3600.5}),
            ),
            400,
            "invalid_request",
        ),
        (
            "TTL a string",
            v2_post(
                json!({"task_type": "t", "input": 1, "idempotency_key": "k", "idempotency_ttl_seconds": "3600"}),
            ),
            400,
            "invalid_request",
        ),
        (
            "TTL huge",
            v2_post(
                json!({"task_type": "t", "input": 1, "idempotency_key": "k", "idempotency_ttl_seconds": 1e300}),
            ),
            400,
            "invalid_request",
        ),
        (
            "header and body keys disagree",
            with_header(
                v2_post(json!({"task_type": "t", "input": 1, "idempotency_key": "a"})),
                "idempotency-key",
                "\"b\"",
            ),
            400,
            "invalid_request",
        ),
        (
            "header key unterminated",
            with_header(v2_post(ok_body()), "idempotency-key", "\"abc"),
            400,
            "invalid_request",
        ),
        (
            "header key with a bad escape",
            with_header(v2_post(ok_body()), "idempotency-key", "\"a\\nb\""),
            400,
            "invalid_request",
        ),
        (
            "header key a list",
            with_header(v2_post(ok_body()), "idempotency-key", "\"a\", \"b\""),
            400,
            "invalid_request",
        ),
        (
            "header key empty",
            with_header(v2_post(ok_body()), "idempotency-key", ""),
            400,
            "invalid_request",
        ),
        (
            "oversized input",
            v2_post(json!({"task_type": "t", "input": big})),
            413,
            "input_too_large",
        ),
        (
            "oversized body",
            v2_raw(&"x".repeat(400_000)),
            413,
            "input_too_large",
        ),
        (
            "invalid base64",
            {
                let mut e = v2_raw("!!!not base64!!!");
                e["isBase64Encoded"] = json!(true);
                e
            },
            400,
            "invalid_request",
        ),
        (
            "wrong content type",
            with_header(v2_post(ok_body()), "content-type", "text/plain"),
            415,
            "unsupported_media_type",
        ),
        (
            "REST: invalid JSON",
            {
                let mut e = event("http-v1-post.json");
                e["body"] = json!("{{");
                e
            },
            400,
            "invalid_request",
        ),
        (
            "REST: missing task_type",
            v1_post(json!({"input": 1})),
            400,
            "invalid_request",
        ),
        (
            "REST: bad scope",
            v1_post(
                json!({"task_type": "t", "input": 1, "idempotency_key": "k", "idempotency_scope": "é"}),
            ),
            400,
            "invalid_request",
        ),
        (
            "REST: oversized input",
            v1_post(json!({"task_type": "t", "input": big})),
            413,
            "input_too_large",
        ),
        (
            "REST: unknown route",
            {
                let mut e = event("http-v1-post.json");
                e["path"] = json!("/jobs");
                e
            },
            404,
            "not_found",
        ),
        (
            "REST: wrong method",
            {
                let mut e = event("http-v1-post.json");
                e["httpMethod"] = json!("PUT");
                e
            },
            405,
            "method_not_allowed",
        ),
        (
            "REST: a made-up method",
            {
                let mut e = event("http-v1-post.json");
                e["httpMethod"] = json!("BREW");
                e
            },
            405,
            "method_not_allowed",
        ),
        (
            "GET of a task id that is no UUID",
            {
                let mut e = get_event("x");
                e["rawPath"] = json!("/tasks/not-a-uuid");
                e
            },
            404,
            "not_found",
        ),
        (
            "POST to a task",
            {
                let mut e = get_event("00000000-0000-4000-8000-000000000000");
                e["requestContext"]["http"]["method"] = json!("POST");
                e
            },
            405,
            "method_not_allowed",
        ),
        (
            "a path with too many segments",
            {
                let mut e = event("http-v2-post.json");
                e["rawPath"] = json!("/a/b/tasks");
                e
            },
            404,
            "not_found",
        ),
        (
            "headers of the wrong type",
            {
                let mut e = event("http-v2-post.json");
                e["headers"] = json!("nope");
                e
            },
            400,
            "invalid_request",
        ),
    ];
    assert!(cases.len() >= 30);
    for (name, ev, status, code) in cases {
        let (h, store) = Harness::memory();
        let r = h.http(ev).await;
        assert_eq!(r.status, status, "{name}: {}", r.body);
        assert_eq!(r.body["code"], code, "{name}: {}", r.body);
        assert_eq!(
            r.headers["content-type"], "application/problem+json",
            "{name}"
        );
        assert!(store.is_empty(), "{name} wrote {:?}", store.keys());
    }
}

#[tokio::test]
async fn a_required_key_that_is_missing_is_400_idempotency_key_missing() {
    let clock = ManualClock::at_epoch();
    let mut cfg = config(false);
    cfg.settings.require_key = true;
    let store = common::memory_store(&clock);
    let queue = Queue::with_clock(store.clone(), Arc::new(clock), cfg.settings.clone());
    let h = Harness {
        app: App::new(queue, &cfg, Metrics::collecting("submit")),
    };
    let r = h.http(event("http-v2-post-no-key.json")).await;
    assert_problem(&r, 400, "idempotency_key_missing");
    assert!(store.is_empty());
    assert_eq!(h.http(event("http-v2-post.json")).await.status, 201);
}

fn sqs_with_bodies(bodies: &[&str]) -> Value {
    let mut batch = event("sqs-standard-batch.json");
    let template = batch["Records"][0].clone();
    let records: Vec<Value> = bodies
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let mut m = template.clone();
            m["messageId"] = json!(format!("bad-{i}"));
            m["body"] = json!(b);
            m
        })
        .collect();
    batch["Records"] = json!(records);
    batch
}

#[tokio::test]
async fn every_bad_sqs_message_is_rejected_to_its_own_object_and_writes_nothing_else() {
    let big = json!({"task_type": "t", "input": "x".repeat(262_145)}).to_string();
    let bodies = [
        "",
        "{",
        "[]",
        "null",
        r#"{"input": 1}"#,
        r#"{"task_type": "t"}"#,
        r#"{"task_type": "a/b", "input": 1}"#,
        r#"{"task_type": "t", "input": 1, "idempotency_key": ""}"#,
        r#"{"task_type": "t", "input": 1, "idempotency_ttl_seconds": 1}"#,
        r#"{"task_type": "t", "input": 1, "idempotency_scope": "no way"}"#,
        r#"{"task_type": "t", "input": 1, "extra": true}"#,
        r#"{"task_type": "t", "input": 1, "if_task_failed": "NEW_TASK"}"#,
        big.as_str(),
    ];
    let (h, store) = Harness::memory();
    let failures = h.sqs(sqs_with_bodies(&bodies)).await;
    assert!(failures.is_empty(), "{failures:?}");
    let keys = store.keys();
    assert!(keys.iter().all(|k| k.starts_with("rejected/")), "{keys:?}");
    assert_eq!(keys.len(), bodies.len());
    let rejected = h.rejected().await;
    let too_large = rejected
        .iter()
        .filter(|r| r["error"]["code"] == "input_too_large")
        .count();
    assert_eq!(too_large, 1);
    for r in &rejected {
        assert!(
            r["message"]["messageId"]
                .as_str()
                .unwrap()
                .starts_with("bad-")
        );
        assert!(r["rejected_at"].is_string());
    }
}

#[tokio::test]
async fn a_message_id_that_is_not_a_plain_name_cannot_write_outside_rejected() {
    let (h, store) = Harness::memory();
    let mut batch = sqs_with_bodies(&["{"]);
    batch["Records"][0]["messageId"] = json!("../../tasks/x");
    h.sqs(batch).await;
    let keys = store.keys();
    assert_eq!(keys.len(), 1);
    assert!(
        keys[0].starts_with("rejected/") && !keys[0].contains(".."),
        "{keys:?}"
    );
}

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
    let request_id = e["requestContext"]["requestId"]
        .as_str()
        .unwrap()
        .to_owned();
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
    let request_id = e["requestContext"]["requestId"]
        .as_str()
        .unwrap()
        .to_owned();
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
    let rejected = h.rejected().await;
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
    let store = h.app.queue.engine().store();
    let o = store.get(task_key).await.unwrap();
    let mut task: Value = serde_json::from_slice(&o.body).unwrap();
    task["status"] = json!("failed");
    store
        .put(
            task_key,
            task.to_string().into(),
            idempotent_submit::store::PutMode::Update(o.meta.etag),
        )
        .await
        .unwrap();
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
    let rejected = h.rejected().await;
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
