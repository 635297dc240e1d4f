//! `POST /tasks/batch` and `Queue::submit_many` (docs/openapi.yaml):
//! every item as if alone and all at once, answered in order; envelopes
//! that are not valid write nothing; items fail alone; a batch whose every
//! item failed retryably is a 503; tenants; metrics; and a batch whose
//! process died halfway, finished by the sweeper's events or by a retry.

mod cli;
mod died_halfway;

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::common::event;
use crate::common::handler::{Harness, Resp};
use idempotent_submit::store::{Fault, FaultyStore, MemoryStore, Op, StoreError};
use idempotent_submit::testing::protocol::RecordOutcome;
use idempotent_submit::{ManualClock, Queue, Settings, SubmitError};
use serde_json::{Value, json};

/// An HTTP API (payload 2.0) `POST /tasks/batch` of `body`.
fn batch(body: Value) -> Value {
    raw(&body.to_string())
}

fn raw(body: &str) -> Value {
    let mut e = event("http-v2-batch.json");
    e["body"] = json!(body);
    e
}

fn item(key: &str, n: u64) -> Value {
    json!({"task_type": "charge_customer", "input": {"order": key, "cents": n}, "idempotency_key": key})
}

fn results(r: &Resp) -> &Vec<Value> {
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.headers["content-type"], "application/json");
    r.body["results"].as_array().unwrap()
}

fn codes(r: &Resp) -> Vec<u64> {
    results(r)
        .iter()
        .map(|x| x["status_code"].as_u64().or(x["status"].as_u64()).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_creates_each_task_in_order_and_replays_each_on_its_key() {
    let h = Harness::moto().await;
    let first = h.http(event("http-v2-batch.json")).await;
    assert_eq!(codes(&first), [201, 201, 201]);
    let rs = results(&first);
    let asked: Vec<Value> =
        serde_json::from_str::<Value>(event("http-v2-batch.json")["body"].as_str().unwrap())
            .unwrap()["tasks"]
            .as_array()
            .unwrap()
            .clone();
    for (r, a) in rs.iter().zip(&asked) {
        assert_eq!(
            r["idempotency"]["key"], a["idempotency_key"],
            "in the items' order"
        );
        assert_eq!(r["task_type"], a["task_type"]);
        assert_eq!(r["replayed"], false);
        assert_eq!(r["status"], "pending");
        let task = common::task_json(&h.app.queue, r["task_id"].as_str().unwrap()).await;
        assert_eq!(task["input"], a["input"]);
    }
    assert_eq!(rs[2]["idempotency"]["scope"], "queue");
    assert_eq!(h.objects_by_kind().await, (3, 3, 3));

    let again = h.http(event("http-v2-batch.json")).await;
    assert_eq!(codes(&again), [200, 200, 200]);
    for (a, b) in results(&again).iter().zip(rs) {
        assert_eq!(a["task_id"], b["task_id"]);
        assert_eq!(a["replayed"], true);
    }
    assert_eq!(h.keys().await.len(), 9, "a replay writes nothing");
    // And a single submit of one of the keys is the same task.
    let mut single = event("http-v2-post.json");
    single["body"] = json!(asked[0].to_string());
    let one = h.http(single).await;
    assert_eq!(one.status, 200);
    assert_eq!(one.body["task_id"], rs[0]["task_id"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_item_that_fails_gets_its_own_problem_and_undoes_no_other() {
    let h = Harness::moto().await;
    let taken = h.http(batch(json!({"tasks": [item("k-taken", 1)]}))).await;
    let taken_id = results(&taken)[0]["task_id"].clone();
    let big = json!({"task_type": "t", "input": "x".repeat(300_000), "idempotency_key": "k-big"});
    let r = h
        .http(batch(json!({"tasks": [
            item("k-new", 1),
            {"task_type": "bad type", "input": 1, "idempotency_key": "k-bad"},
            item("k-taken", 2),
            big,
            "not an object",
            {"task_type": "t", "input": 1, "idempotency_key": "k", "idempotency_ky": "typo"},
            item("k-taken", 1),
        ]})))
        .await;
    assert_eq!(codes(&r), [201, 400, 422, 413, 400, 400, 200]);
    let rs = results(&r);
    assert_eq!(rs[1]["code"], "invalid_request");
    assert!(
        rs[1]["detail"].as_str().unwrap().contains("task_type"),
        "{}",
        rs[1]
    );
    assert_eq!(rs[2]["code"], "idempotency_conflict");
    assert_eq!(rs[2]["task_id"], taken_id);
    assert_eq!(rs[3]["code"], "input_too_large");
    assert!(rs[5]["detail"].as_str().unwrap().contains("idempotency_ky"));
    assert_eq!(rs[6]["task_id"], taken_id);
    for p in [&rs[1], &rs[2], &rs[3], &rs[4]] {
        assert_eq!(
            p["instance"], "JKJaXmPLvHcESHB=",
            "the batch request's id: {p}"
        );
    }
    // Only the new key wrote: its record, task and marker.
    assert_eq!(h.objects_by_kind().await, (2, 2, 2));
    // Metrics: one line for the batch, each item under its outcome.
    let m = h.app.metrics.lines();
    let l = m.last().unwrap();
    assert_eq!(
        (
            l["BatchItems"].as_u64(),
            l["Created"].as_u64(),
            l["Replayed"].as_u64(),
            l["Invalid"].as_u64(),
            l["Conflict"].as_u64()
        ),
        (Some(7), Some(1), Some(1), Some(4), Some(1))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_envelope_is_a_400_that_writes_nothing() {
    let settings = Settings {
        max_batch_tasks: 3,
        ..common::settings()
    };
    let h = Harness::with_settings(common::moto_store().await, None, false, settings);
    let four: Vec<Value> = (0..4).map(|i| item(&format!("k{i}"), i)).collect();
    let cases = [
        (raw("{"), "JSON"),
        (raw(""), "JSON"),
        (batch(json!([item("k", 1)])), "object"),
        (batch(json!({"tasks": item("k", 1)})), "list"),
        (batch(json!({"tasks": []})), "at least one"),
        (batch(json!({"tasks": null})), "required"),
        (batch(json!({})), "required"),
        (batch(json!({"tasks": four})), "at most 3"),
        (
            batch(json!({"tasks": [item("k", 1)], "task": 1})),
            "unknown field",
        ),
    ];
    for (e, why) in cases {
        let r = h.http(e).await;
        assert_eq!(
            (r.status, r.body["code"].as_str()),
            (400, Some("invalid_request")),
            "{why}: {}",
            r.body
        );
        assert!(
            r.body["detail"].as_str().unwrap().contains(why),
            "{why}: {}",
            r.body
        );
    }
    // A key in the header: refused, each item carries its own.
    let mut e = batch(json!({"tasks": [item("k", 1)]}));
    e["headers"]["idempotency-key"] = json!("\"k\"");
    let r = h.http(e).await;
    assert_eq!(r.status, 400);
    assert!(
        r.body["detail"]
            .as_str()
            .unwrap()
            .contains("Idempotency-Key")
    );
    // Not JSON: 415 with Accept-Post.
    let mut e = batch(json!({"tasks": [item("k", 1)]}));
    e["headers"]["content-type"] = json!("text/plain");
    let r = h.http(e).await;
    assert_eq!(r.status, 415);
    assert_eq!(r.headers["accept-post"], "application/json");
    // Over the invocation payload limit: 413, unread.
    let huge = json!({"tasks": [{"task_type": "t", "input": "x".repeat(6 * 1024 * 1024)}]});
    let r = h.http(batch(huge)).await;
    assert_eq!(
        (r.status, r.body["code"].as_str()),
        (413, Some("input_too_large"))
    );
    assert!(h.keys().await.is_empty(), "{:?}", h.keys().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_batch_route_matches_under_stages_and_function_urls_and_takes_only_post() {
    let h = Harness::moto().await;
    let body = json!({"tasks": [item("k-staged", 1)]}).to_string();
    // A REST API under its stage.
    let mut rest = event("http-v1-post.json");
    rest["path"] = json!("/tasks/batch");
    rest["resource"] = json!("/tasks/batch");
    rest["requestContext"]["path"] = json!("/prod/tasks/batch");
    rest["headers"] = json!({"content-type": "application/json"});
    rest["body"] = json!(body);
    assert_eq!(codes(&h.http(rest).await), [201]);
    // An HTTP API's named stage, in the raw path.
    let mut staged = raw(&body);
    staged["rawPath"] = json!("/v1/tasks/batch");
    staged["requestContext"]["stage"] = json!("v1");
    assert_eq!(codes(&h.http(staged).await), [200]);
    // A function URL.
    let mut url = event("function-url-post.json");
    url["rawPath"] = json!("/tasks/batch");
    url["requestContext"]["http"]["path"] = json!("/tasks/batch");
    url["headers"] = json!({"content-type": "application/json"});
    url["body"] = json!(body);
    url["isBase64Encoded"] = json!(false);
    assert_eq!(codes(&h.http(url).await), [200]);
    for method in ["GET", "PUT", "DELETE"] {
        let mut e = raw(&body);
        e["requestContext"]["http"]["method"] = json!(method);
        let r = h.http(e).await;
        assert_eq!(r.status, 405, "{method}");
        assert_eq!(r.headers["allow"], "POST");
    }
    assert_eq!(h.count("tasks/").await, 1);
}

fn as_principal(mut e: Value, arn: &str) -> Value {
    e["requestContext"]["authorizer"] = json!({"iam": {"userArn": arn}});
    e
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_tenant_isolation_every_item_is_the_callers_and_no_principal_is_401() {
    let h = Harness::with_settings(common::moto_store().await, None, true, common::settings());
    let body = json!({"tasks": [item("k1", 1), item("k2", 2)]});
    let r = h.http(batch(body.clone())).await;
    assert_eq!(
        (r.status, r.body["code"].as_str()),
        (401, Some("unauthenticated"))
    );
    assert!(h.keys().await.is_empty());
    let a = h
        .http(as_principal(batch(body.clone()), "arn:aws:iam::1:user/a"))
        .await;
    let b = h
        .http(as_principal(batch(body.clone()), "arn:aws:iam::1:user/b"))
        .await;
    assert_eq!(
        (codes(&a), codes(&b)),
        (vec![201, 201], vec![201, 201]),
        "the same keys, two tenants"
    );
    for (x, y) in results(&a).iter().zip(results(&b)) {
        assert_ne!(x["task_id"], y["task_id"]);
    }
    // Each tenant's task is its own: another tenant reads a 404.
    let id = results(&a)[0]["task_id"].as_str().unwrap().to_owned();
    let mut get = event("http-v2-get-missing.json");
    get["rawPath"] = json!(format!("/tasks/{id}"));
    get["requestContext"]["http"]["path"] = json!(format!("/tasks/{id}"));
    assert_eq!(
        h.http(as_principal(get.clone(), "arn:aws:iam::1:user/b"))
            .await
            .status,
        404
    );
    assert_eq!(
        h.http(as_principal(get, "arn:aws:iam::1:user/a"))
            .await
            .status,
        200
    );
    let again = h
        .http(as_principal(batch(body), "arn:aws:iam::1:user/a"))
        .await;
    assert_eq!(codes(&again), [200, 200]);
    assert_eq!(results(&again)[0]["task_id"], id.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_key_twice_in_a_batch_is_one_task() {
    let h = Harness::moto().await;
    // The same key with the same input twice, then with another input in
    // the same batch: one task each, and a conflict naming it.
    for (key, second_input, answers) in [("dup", 1, [200, 201]), ("dup2", 2, [201, 422])] {
        let items = json!({"tasks": [item(key, 1), item(key, second_input)]});
        let r = h.http(batch(items)).await;
        let mut c = codes(&r);
        c.sort();
        assert_eq!(c, answers, "{key}");
        let rs = results(&r);
        assert_eq!(rs[0]["task_id"], rs[1]["task_id"], "{key}");
    }
    assert_eq!(h.count("tasks/").await, 2);
}

fn memory_harness(faulty: &FaultyStore<MemoryStore>, clock: &ManualClock) -> Harness {
    Harness::with_settings(faulty.clone(), Some(clock), false, common::settings())
}

#[tokio::test]
async fn a_batch_whose_every_item_failed_retryably_is_a_503_and_a_retry_succeeds() {
    let clock = ManualClock::at_epoch();
    let faulty = common::faulty(&clock);
    let h = memory_harness(&faulty, &clock);
    // Every record write fails, on every attempt.
    faulty.inject(
        Some(Op::PutCreate),
        "idempotency/",
        1,
        usize::MAX,
        common::unavailable("503 SlowDown"),
    );
    let body = json!({"tasks": [item("a", 1), item("b", 2)]});
    let r = h.http(batch(body.clone())).await;
    assert_eq!(
        (r.status, r.body["code"].as_str()),
        (503, Some("storage_unavailable")),
        "{}",
        r.body
    );
    assert!(r.headers["retry-after"].parse::<u64>().unwrap() >= 1);
    assert!(
        !r.body["detail"].as_str().unwrap().contains("SlowDown"),
        "S3's words stay in the log"
    );
    assert!(faulty.inner().is_empty());
    // One item failing for good besides: a 200, the others' problems inside.
    let mixed = json!({"tasks": [item("a", 1), {"task_type": "bad type", "input": 1}]});
    let r = h.http(batch(mixed)).await;
    assert_eq!(codes(&r), [503, 400]);
    assert_eq!(results(&r)[0]["code"], "storage_unavailable");
    faulty.heal();
    let r = h.http(batch(body)).await;
    assert_eq!(codes(&r), [201, 201]);
}

/// A store that counts how many record writes are in flight at once.
#[derive(Clone)]
struct Overlap {
    inner: MemoryStore,
    now: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
}

impl Overlap {
    fn counts(call: &common::Call<'_>) -> bool {
        call.body.is_some() && call.key.starts_with("idempotency/")
    }
}

#[async_trait::async_trait]
impl common::Hooks for Overlap {
    type Inner = MemoryStore;

    fn inner(&self) -> &MemoryStore {
        &self.inner
    }

    async fn before(&self, call: &common::Call<'_>) -> Result<(), StoreError> {
        if Self::counts(call) {
            let n = self.now.fetch_add(1, Ordering::SeqCst) + 1;
            self.most.fetch_max(n, Ordering::SeqCst);
            // Give every other started submit its turn before this one answers.
            for _ in 0..4 {
                tokio::task::yield_now().await;
            }
        }
        Ok(())
    }

    async fn after(&self, call: &common::Call<'_>, _ok: bool) {
        if Self::counts(call) {
            self.now.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

#[tokio::test]
async fn submit_many_sends_every_item_of_a_full_batch_at_once_each_as_a_single_submit() {
    let clock = ManualClock::at_epoch();
    let store = Overlap {
        inner: common::memory_store(&clock),
        now: Arc::default(),
        most: Arc::default(),
    };
    let q = Queue::with_clock(
        common::Wrapped(store.clone()),
        Arc::new(clock.clone()),
        common::settings(),
    );
    let n = Settings::default().max_batch_tasks;
    let results = q
        .submit_many((0..n).map(|i| {
            q.submit("t", json!({"i": i}))
                .idempotency_key(format!("k{i}"))
        }))
        .await;
    assert_eq!(results.len(), n);
    assert_eq!(
        store.most.load(Ordering::SeqCst),
        n,
        "all {n} record writes in flight together"
    );
    let mut ids = std::collections::HashSet::new();
    for (i, r) in results.iter().enumerate() {
        let s = r.as_ref().unwrap();
        assert!(s.created());
        assert_eq!(
            s.idempotency.as_ref().unwrap().key,
            format!("k{i}"),
            "in order"
        );
        ids.insert(s.task_id);
    }
    assert_eq!(ids.len(), n);
    // Each item's requests are a single submit's: 3 for a new key.
    let faulty = FaultyStore::new(common::memory_store(&clock));
    let q = Queue::with_clock(faulty.clone(), Arc::new(clock.clone()), common::settings());
    let rs = q
        .submit_many((0..10).map(|i| {
            q.submit("t", json!({"i": i}))
                .idempotency_key(format!("k{i}"))
        }))
        .await;
    assert!(rs.iter().all(|r| r.as_ref().is_ok_and(|s| s.created())));
    assert_eq!(faulty.calls().len(), 30);
    // An empty list is an empty answer, and nothing is sent.
    assert!(q.submit_many(Vec::new()).await.is_empty());
    assert_eq!(faulty.calls().len(), 30);
}
