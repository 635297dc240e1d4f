use super::*;

// ---- the HTTP routes, every answer checked against docs/openapi.yaml ----

use common::handler::Harness;
use idempotent_submit::MemoryStore;
use idempotent_submit::lambda::Metrics;
use serde_json::Value;

/// How the request reached the function.
#[derive(Clone, Copy)]
enum Door {
    /// An HTTP API route `/idempotency-keys/{key+}`: API Gateway decoded
    /// the path (and the path variable) once.
    HttpApi,
    /// A function URL: the path as the caller sent it.
    FunctionUrl,
}

/// `method /idempotency-keys/{encoded}?query`, as `door` delivers it,
/// from `principal` (a JWT subject) if any.
fn key_event(
    door: Door,
    method: &str,
    encoded: &str,
    query: &str,
    principal: Option<&str>,
) -> Value {
    let raw = format!("/idempotency-keys/{encoded}");
    let (path, params) = match door {
        Door::HttpApi => {
            let decoded = idempotent_submit::lambda::http::percent_decode(encoded).unwrap();
            (
                format!("/idempotency-keys/{decoded}"),
                json!({"key": decoded}),
            )
        }
        Door::FunctionUrl => (raw, Value::Null),
    };
    let mut ctx = json!({
        "accountId": "123456789012", "apiId": "api-id", "domainName": "id.example",
        "domainPrefix": "id", "requestId": "req-1", "stage": "$default",
        "http": {"method": method, "path": path, "protocol": "HTTP/1.1", "sourceIp": "203.0.113.7"},
    });
    if let Some(sub) = principal {
        ctx["authorizer"] = json!({"jwt": {"claims": {"iss": "https://issuer", "sub": sub}}});
    }
    json!({
        "version": "2.0", "routeKey": "$default", "rawPath": path, "rawQueryString": query,
        "headers": {}, "pathParameters": params, "requestContext": ctx, "isBase64Encoded": false,
    })
}

struct Http {
    h: Harness,
    bucket: MemoryStore,
}

impl Http {
    fn new(reset: bool, tenants: bool) -> Self {
        let clock = idempotent_submit::ManualClock::at_epoch();
        let bucket = common::memory_store(&clock);
        let mut h = Harness::over(bucket.clone(), Some(&clock), false);
        h.app.allow_key_reset = reset;
        h.app.tenant_isolation = tenants;
        h.app.metrics = Metrics::collecting("submit");
        Http { h, bucket }
    }

    /// Status, headers (lower-case names) and body (null when empty).
    async fn call(&self, event: Value) -> (u64, Value, Value) {
        let v = self.h.raw(event).await;
        let body = match v["body"].as_str().unwrap() {
            "" => Value::Null,
            b => serde_json::from_str(b).unwrap(),
        };
        let headers: serde_json::Map<String, Value> = v["headers"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
            .collect();
        (
            v["statusCode"].as_u64().unwrap(),
            Value::Object(headers),
            body,
        )
    }

    /// `method` on the key `encoded` in scope `t`, through `door`, from
    /// `principal` if any.
    async fn on_key(
        &self,
        door: Door,
        method: &str,
        encoded: &str,
        principal: Option<&str>,
    ) -> (u64, Value, Value) {
        self.call(key_event(door, method, encoded, "scope=t", principal))
            .await
    }

    fn queue(&self) -> &idempotent_submit::Queue {
        &self.h.app.queue
    }

    /// The status of `method` on key `k` through the HTTP API, and the
    /// methods its `Allow` names.
    async fn allowed(&self, method: &str) -> (u64, String) {
        let (status, headers, _) = self.on_key(Door::HttpApi, method, "k", None).await;
        (status, headers["allow"].as_str().unwrap_or("").to_owned())
    }
}

#[tokio::test]
async fn a_key_with_slashes_percents_spaces_or_non_ascii_is_found_through_either_door() {
    let t = Http::new(false, false);
    for (key, encoded) in [
        ("a/b", "a%2Fb"),
        ("100%", "100%25"),
        ("%2F", "%252F"),
        ("two words", "two%20words"),
        ("a+b", "a+b"),
        ("café ☕", "caf%C3%A9%20%E2%98%95"),
    ] {
        let s = t
            .queue()
            .submit("t", json!(key))
            .idempotency_key(key)
            .await
            .unwrap();
        for door in [Door::HttpApi, Door::FunctionUrl] {
            let (status, _, body) = t.on_key(door, "GET", encoded, None).await;
            assert_eq!(status, 200, "{key:?}: {body}");
            assert_eq!(body["key"], key);
            assert_eq!(body["task_id"], s.task_id.to_string());
            assert_eq!(
                (body["phase"].as_str(), body["task_status"].as_str()),
                (Some("in_flight"), Some("pending"))
            );
        }
    }
}

#[tokio::test]
async fn a_lookup_without_one_good_scope_or_with_a_bad_key_is_a_400_that_names_it() {
    let t = Http::new(true, false);
    for (encoded, query, names) in [
        ("k", "", "scope"),
        ("k", "other=1", "scope"),
        ("k", "scope=t&scope=u", "scope"),
        ("k", "scope=.t", "scope"),
        ("k", "scope=a%2Fb", "scope"),
        ("k", "scope=%zz", "query"),
        ("a%zzb", "scope=t", "key"),
        ("a%07b", "scope=t", "idempotency_key"),
    ] {
        for method in ["GET", "DELETE"] {
            let (status, _, body) = t
                .call(key_event(Door::FunctionUrl, method, encoded, query, None))
                .await;
            assert_eq!(
                (status, body["code"].as_str()),
                (400, Some("invalid_request")),
                "{encoded} {query}: {body}"
            );
            assert!(body["detail"].as_str().unwrap().contains(names), "{body}");
        }
    }
    let long = "k".repeat(256);
    let (status, _, _) = t.on_key(Door::FunctionUrl, "GET", &long, None).await;
    assert_eq!(status, 400);
    assert!(t.bucket.keys().is_empty(), "a bad request wrote nothing");
}

#[tokio::test]
async fn no_record_is_a_404_and_a_reset_is_a_405_unless_the_stack_allows_it() {
    let t = Http::new(false, false);
    let (status, _, body) = t.on_key(Door::HttpApi, "GET", "nope", None).await;
    assert_eq!((status, body["code"].as_str()), (404, Some("not_found")));
    common::submit_key(t.queue(), "k").await;
    assert_eq!(t.allowed("DELETE").await, (405, "GET".to_owned()));
    assert_eq!(t.allowed("POST").await, (405, "GET".to_owned()));
    assert_eq!(
        t.bucket
            .keys()
            .iter()
            .filter(|k| k.starts_with("idempotency/"))
            .count(),
        1
    );
    let on = Http::new(true, false);
    assert_eq!(on.allowed("PUT").await, (405, "GET, DELETE".to_owned()));
}

#[tokio::test]
async fn a_reset_answers_204_with_the_old_task_then_404_and_409_while_the_task_may_still_come() {
    let t = Http::new(true, false);
    let s = common::submit_key(t.queue(), "a/b").await;
    // At once: no waiting for the record's own submit.
    let (status, headers, body) = t.on_key(Door::FunctionUrl, "DELETE", "a%2Fb", None).await;
    assert_eq!(status, 204, "{body}");
    assert_eq!(body, Value::Null);
    assert_eq!(
        headers["link"],
        format!("</tasks/{}>; rel=\"related\"", s.task_id)
    );
    let resets: u64 = t.h.metric("KeyResets");
    assert_eq!(resets, 1);
    let (status, _, body) = t.on_key(Door::FunctionUrl, "DELETE", "a%2Fb", None).await;
    assert_eq!((status, body["code"].as_str()), (404, Some("not_found")));
    // In flight, its task not there yet: refused, and kept.
    common::world::died_after_record(t.bucket.clone(), "dying").await;
    let (status, headers, body) = t.on_key(Door::HttpApi, "DELETE", "dying", None).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("submit_in_progress")),
        "{body}"
    );
    assert!(
        headers["retry-after"]
            .as_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
            >= 1
    );
    assert!(body["task_id"].is_string());
    let (status, _, body) = t.on_key(Door::HttpApi, "GET", "dying", None).await;
    assert_eq!(
        (status, body["task_status"].as_str()),
        (200, Some("missing"))
    );
}

#[tokio::test]
async fn under_tenant_isolation_a_tenant_neither_sees_nor_resets_anothers_key() {
    let t = Http::new(true, true);
    let a = "jwt:14:https://issuer:alice";
    common::submit_key_as(t.queue(), "k", a).await;
    let (status, _, body) = t.on_key(Door::HttpApi, "GET", "k", None).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (401, Some("unauthenticated"))
    );
    for method in ["GET", "DELETE"] {
        let (status, _, _) = t.on_key(Door::HttpApi, method, "k", Some("bob")).await;
        assert_eq!(status, 404, "{method} by another tenant");
    }
    let (status, _, body) = t.on_key(Door::HttpApi, "GET", "k", Some("alice")).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.get("tenant").is_none());
    let (status, _, _) = t.on_key(Door::HttpApi, "DELETE", "k", Some("alice")).await;
    assert_eq!(status, 204);
}

#[tokio::test]
async fn storage_failures_are_a_503_with_retry_after_or_a_generic_500() {
    for (error, status, code) in [
        (
            idempotent_submit::StoreError::Unavailable("slow down".into()),
            503,
            "storage_unavailable",
        ),
        (
            idempotent_submit::StoreError::Fatal("AccessDenied arn:aws:iam::1:role/r".into()),
            500,
            "storage_error",
        ),
    ] {
        let clock = idempotent_submit::ManualClock::at_epoch();
        let faulty = common::faulty(&clock);
        faulty.inject(None, "idempotency/", 1, 100, Fault::Fail(error));
        let h = Harness::over(faulty, Some(&clock), false);
        let v = h
            .raw(key_event(Door::HttpApi, "GET", "k", "scope=t", None))
            .await;
        assert_eq!(v["statusCode"], status);
        let body: Value = serde_json::from_str(v["body"].as_str().unwrap()).unwrap();
        assert_eq!(body["code"], code);
        assert!(!body["detail"].as_str().unwrap().contains("arn:"), "{body}");
        if status == 503 {
            assert!(v["headers"]["retry-after"].is_string(), "{v}");
        }
    }
}
