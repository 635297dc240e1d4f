use super::*;

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
    assert_eq!(h.objects_by_kind().await, (1, 1, 1));

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
    for (file, status, code) in [
        ("http-v2-post-invalid.json", 400, "invalid_request"),
        ("http-v1-get-missing.json", 404, "not_found"),
        ("http-v2-get-missing.json", 404, "not_found"),
        ("http-v2-unknown-route.json", 404, "not_found"),
    ] {
        assert_problem(&h.http(event(file)).await, status, code);
    }
    let r = h.http(event("http-v2-wrong-method.json")).await;
    assert_problem(&r, 405, "method_not_allowed");
    assert_eq!(r.headers["allow"], "POST");
    assert!(h.keys().await.is_empty());
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
    let (isolated, plain) = Harness::isolated_and_plain();
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
    assert_eq!(plain.http(event("http-v2-post.json")).await.status, 201);
}

fn as_principal(mut e: Value, authorizer: Value) -> Value {
    e["requestContext"]["authorizer"] = authorizer;
    e
}

/// The sample POST (`http-v2-post.json`), sent by the caller `authorizer`
/// names.
async fn post_as(h: &Harness, authorizer: Value) -> Resp {
    h.http(as_principal(event("http-v2-post.json"), authorizer))
        .await
}

fn assumed_role(session: &str) -> Value {
    json!({"iam": {"userArn": format!("arn:aws:sts::123456789012:assumed-role/producer/{session}")}})
}

#[tokio::test]
async fn every_session_of_an_assumed_role_is_one_tenant() {
    let (h, _) = Harness::isolated_and_plain();
    let first = post_as(&h, assumed_role("i-0aaa")).await;
    assert_eq!(first.status, 201, "{}", first.body);
    let retry = post_as(&h, assumed_role("i-0bbb")).await;
    assert_eq!(retry.status, 200, "{}", retry.body);
    assert_eq!(retry.body["task_id"], first.body["task_id"]);
    assert_eq!(h.count("tasks/").await, 1);
    // Another role is another tenant.
    let other = json!({"iam": {"userArn": "arn:aws:sts::123456789012:assumed-role/other/i-0aaa"}});
    let r = post_as(&h, other).await;
    assert_eq!(r.status, 201);
    assert_ne!(r.body["task_id"], first.body["task_id"]);
}

#[tokio::test]
async fn a_lambda_authorizers_simple_response_names_the_tenant_by_principal_id() {
    let (h, _) = Harness::isolated_and_plain();
    let by = |p: &str| json!({"lambda": {"principalId": p}});
    // The sample event: an authorizer answered
    // `{"isAuthorized": true, "context": {"principalId": "team-payments"}}`.
    let sample = h.http(event("http-v2-post-lambda-authorizer.json")).await;
    assert_eq!(sample.status, 201, "{}", sample.body);
    let a = post_as(&h, by("team-a")).await;
    let b = post_as(&h, by("team-b")).await;
    let a2 = post_as(&h, by("team-a")).await;
    assert_eq!((a.status, b.status, a2.status), (201, 201, 200));
    assert_ne!(a.body["task_id"], b.body["task_id"]);
    assert_ne!(a.body["task_id"], sample.body["task_id"]);
    assert_eq!(a.body["task_id"], a2.body["task_id"]);
}

#[tokio::test]
async fn with_tenant_isolation_get_answers_only_the_tenants_own_tasks() {
    let (h, plain) = Harness::isolated_and_plain();
    let alice = json!({"lambda": {"principalId": "alice"}});
    let bob = json!({"lambda": {"principalId": "bob"}});
    let keyed = post_as(&h, alice.clone()).await;
    let keyless = h
        .http(as_principal(
            event("http-v2-post-no-key.json"),
            alice.clone(),
        ))
        .await;
    assert_eq!((keyed.status, keyless.status), (201, 201));
    // A task submitted without isolation (SQS, the CLI) names no tenant.
    let shared = plain.http(event("http-v2-post-no-key.json")).await;
    let alice_tenant = idempotent_submit::testing::protocol::Tenant::from_principal("lambda:alice")
        .unwrap()
        .id();
    for id in [&keyed.body["task_id"], &keyless.body["task_id"]] {
        let id = id.as_str().unwrap();
        // The task object names its tenant, keyed or not (the seal in its id
        // is for after a worker rewrote it).
        let task = common::task_json(&h.app.queue, id).await;
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
