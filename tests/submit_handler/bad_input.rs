use super::*;

// ---- bad input, at least 30 cases ----

fn v2_raw(body: &str) -> Value {
    with(event("http-v2-post.json"), &["body"], json!(body))
}

fn v1_post(body: Value) -> Value {
    let mut e = event("http-v1-post.json");
    e["body"] = json!(body.to_string());
    e["headers"] = json!({"content-type": "application/json"});
    e
}

/// Bad bodies of a POST to the HTTP API (v2): each a 400 `invalid_request`.
/// `e` with the field at `path` set to `v` (made if missing, as indexing
/// makes it).
fn with(mut e: Value, path: &[&str], v: Value) -> Value {
    let mut at = &mut e;
    for k in path {
        at = &mut at[*k];
    }
    *at = v;
    e
}

/// A request of key `k` whose field `field` is `v`.
fn keyed(field: &str, v: Value) -> Value {
    let body = json!({"task_type": "t", "input": 1, "idempotency_key": "k"});
    v2_post(with(body, &[field], v))
}

fn bad_bodies() -> Vec<(&'static str, Value)> {
    vec![
        ("invalid JSON", v2_raw("{")),
        ("empty body", v2_raw("")),
        ("an array body", v2_raw("[1,2]")),
        ("a string body", v2_raw("\"task\"")),
        ("missing task_type", v2_post(json!({"input": 1}))),
        ("missing input", v2_post(json!({"task_type": "t"}))),
        (
            "if_task_failed not one of replay, new_task",
            v2_post(json!({"task_type": "t", "input": 1, "if_task_failed": "retry"})),
        ),
        (
            "if_task_failed not a string",
            v2_post(json!({"task_type": "t", "input": 1, "if_task_failed": true})),
        ),
        (
            "task_type a number",
            v2_post(json!({"task_type": 5, "input": 1})),
        ),
        (
            "task_type empty",
            v2_post(json!({"task_type": "", "input": 1})),
        ),
        (
            "task_type with a slash",
            v2_post(json!({"task_type": "a/b", "input": 1})),
        ),
        (
            "task_type starting with a dot",
            v2_post(json!({"task_type": ".a", "input": 1})),
        ),
        (
            "task_type too long",
            v2_post(json!({"task_type": "a".repeat(129), "input": 1})),
        ),
        (
            "unknown field",
            v2_post(json!({"task_type": "t", "input": 1, "idempotency_ky": "k"})),
        ),
    ]
}

/// Bad keys, scopes and TTLs in a POST's body: each a 400
/// `invalid_request`.
fn bad_keys_scopes_and_ttls() -> Vec<(&'static str, Value)> {
    vec![
        (
            "key a number",
            v2_post(json!({"task_type": "t", "input": 1, "idempotency_key": 7})),
        ),
        (
            "key empty",
            v2_post(json!({"task_type": "t", "input": 1, "idempotency_key": ""})),
        ),
        (
            "key too long",
            v2_post(json!({"task_type": "t", "input": 1, "idempotency_key": "k".repeat(256)})),
        ),
        (
            "key with a newline",
            v2_post(json!({"task_type": "t", "input": 1, "idempotency_key": "a\nb"})),
        ),
        (
            "scope with a space",
            keyed("idempotency_scope", json!("a b")),
        ),
        ("scope a number", keyed("idempotency_scope", json!(1))),
        (
            "TTL under an hour",
            keyed("idempotency_ttl_seconds", json!(3599)),
        ),
        (
            "TTL over the maximum",
            keyed("idempotency_ttl_seconds", json!(365 * 86400 + 1)),
        ),
        ("TTL negative", keyed("idempotency_ttl_seconds", json!(-5))),
        (
            "TTL a fraction",
            keyed("idempotency_ttl_seconds", json!(3600.5)),
        ),
        (
            "TTL a string",
            keyed("idempotency_ttl_seconds", json!("3600")),
        ),
        ("TTL huge", keyed("idempotency_ttl_seconds", json!(1e300))),
    ]
}

/// Bad headers, encodings and REST (v1) requests: each a 400 `invalid_request`.
fn bad_headers_and_rest_requests() -> Vec<(&'static str, Value)> {
    vec![
        (
            "header and body keys disagree",
            with_header(
                v2_post(json!({"task_type": "t", "input": 1, "idempotency_key": "a"})),
                "idempotency-key",
                "\"b\"",
            ),
        ),
        (
            "header key unterminated",
            with_header(v2_post(ok_body()), "idempotency-key", "\"abc"),
        ),
        (
            "header key with a bad escape",
            with_header(v2_post(ok_body()), "idempotency-key", "\"a\\nb\""),
        ),
        (
            "header key a list",
            with_header(v2_post(ok_body()), "idempotency-key", "\"a\", \"b\""),
        ),
        (
            "header key empty",
            with_header(v2_post(ok_body()), "idempotency-key", ""),
        ),
        (
            "invalid base64",
            with(
                v2_raw("!!!not base64!!!"),
                &["isBase64Encoded"],
                json!(true),
            ),
        ),
        (
            "REST: invalid JSON",
            with(event("http-v1-post.json"), &["body"], json!("{{")),
        ),
        ("REST: missing task_type", v1_post(json!({"input": 1}))),
        (
            "REST: bad scope",
            v1_post(
                json!({"task_type": "t", "input": 1, "idempotency_key": "k", "idempotency_scope": "é"}),
            ),
        ),
        (
            "headers of the wrong type",
            with(event("http-v2-post.json"), &["headers"], json!("nope")),
        ),
    ]
}

/// Requests refused with another status than 400: too large, of the wrong
/// type, to an unknown route or with the wrong method.
fn refused_otherwise() -> Vec<(&'static str, Value, u64, &'static str)> {
    let big = "x".repeat(262_145);
    vec![
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
            "wrong content type",
            with_header(v2_post(ok_body()), "content-type", "text/plain"),
            415,
            "unsupported_media_type",
        ),
        (
            "REST: oversized input",
            v1_post(json!({"task_type": "t", "input": big})),
            413,
            "input_too_large",
        ),
        (
            "REST: unknown route",
            with(event("http-v1-post.json"), &["path"], json!("/jobs")),
            404,
            "not_found",
        ),
        (
            "REST: wrong method",
            with(event("http-v1-post.json"), &["httpMethod"], json!("PUT")),
            405,
            "method_not_allowed",
        ),
        (
            "REST: a made-up method",
            with(event("http-v1-post.json"), &["httpMethod"], json!("BREW")),
            405,
            "method_not_allowed",
        ),
        (
            "GET of a task id that is no UUID",
            with(get_event("x"), &["rawPath"], json!("/tasks/not-a-uuid")),
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
            with(
                event("http-v2-post.json"),
                &["rawPath"],
                json!("/a/b/tasks"),
            ),
            404,
            "not_found",
        ),
    ]
}

#[tokio::test]
async fn every_bad_http_input_gets_its_4xx_and_writes_nothing() {
    let invalid = bad_bodies()
        .into_iter()
        .chain(bad_keys_scopes_and_ttls())
        .chain(bad_headers_and_rest_requests())
        .map(|(name, ev)| (name, ev, 400, "invalid_request"));
    let cases: Vec<(&str, Value, u64, &str)> = invalid.chain(refused_otherwise()).collect();
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
    let rejected = h.objects("rejected/").await;
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
