//! `POST /tasks/batch` and `Queue::submit_many` (docs/openapi.yaml):
//! every item as if alone and all at once, answered in order; envelopes
//! that are not valid write nothing; items fail alone; a batch whose every
//! item failed retryably is a 503; tenants; metrics; and a batch whose
//! process died halfway, finished by the sweeper's events or by a retry.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::common::event;
use crate::common::handler::{Harness, Resp};
use idempotent_submit::protocol::RecordOutcome;
use idempotent_submit::store::{Fault, FaultyStore, MemoryStore, Op, StoreError};
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
        let task: Value = serde_json::from_slice(
            &h.app
                .queue
                .task(r["task_id"].as_str().unwrap().parse().unwrap())
                .await
                .unwrap()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(task["input"], a["input"]);
    }
    assert_eq!(rs[2]["idempotency"]["scope"], "queue");
    assert_eq!(
        (
            h.count("tasks/").await,
            h.count("ready/").await,
            h.count("idempotency/").await
        ),
        (3, 3, 3)
    );

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
    assert_eq!(
        (
            h.count("tasks/").await,
            h.count("ready/").await,
            h.count("idempotency/").await
        ),
        (2, 2, 2)
    );
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
    let r = h
        .http(batch(json!({"tasks": [item("dup", 1), item("dup", 1)]})))
        .await;
    let mut c = codes(&r);
    c.sort();
    assert_eq!(c, [200, 201]);
    let rs = results(&r);
    assert_eq!(rs[0]["task_id"], rs[1]["task_id"]);
    // The same key with another input in the same batch: one task, and a
    // conflict naming it.
    let r = h
        .http(batch(json!({"tasks": [item("dup2", 1), item("dup2", 2)]})))
        .await;
    let mut c = codes(&r);
    c.sort();
    assert_eq!(c, [201, 422]);
    let rs = results(&r);
    assert_eq!(rs[0]["task_id"], rs[1]["task_id"]);
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
        Fault::Fail(StoreError::Unavailable("503 SlowDown".into())),
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

// ---- a batch whose process died halfway ----

const ITEMS: usize = 8;

fn builders(q: &Queue) -> Vec<idempotent_submit::SubmitBuilder<'_>> {
    (0..ITEMS)
        .map(|i| {
            q.submit("t", json!({"i": i}))
                .idempotency_key(format!("k{i}"))
        })
        .collect()
}

/// What a batch's items were answered, and the bucket after, per item: its
/// record's task id if it has one.
async fn records(q: &Queue) -> Vec<Option<uuid::Uuid>> {
    let mut out = Vec::new();
    for i in 0..ITEMS {
        out.push(
            q.record("t", &format!("k{i}"), None)
                .await
                .unwrap()
                .map(|(r, _)| r.task_id),
        );
    }
    out
}

fn count(store: &MemoryStore, prefix: &str) -> usize {
    store
        .keys()
        .iter()
        .filter(|k| k.starts_with(prefix))
        .count()
}

/// Crash points across a batch of `ITEMS` new keys: before or after the
/// `nth` call of the whole batch.
fn crash_points() -> Vec<(usize, Fault)> {
    let mut v = Vec::new();
    for nth in [1, 2, 5, 9, 12, 17, 23] {
        v.push((nth, Fault::CrashBefore));
        v.push((nth, Fault::CrashAfter));
    }
    v
}

/// The batch through a store that dies at the crash point: what it
/// answered (a real crash answers nothing), and the bucket it left.
async fn crashed_batch(
    nth: usize,
    fault: Fault,
) -> (
    ManualClock,
    MemoryStore,
    Vec<Result<idempotent_submit::Submitted, SubmitError>>,
) {
    let clock = ManualClock::at_epoch();
    let faulty = common::faulty(&clock);
    faulty.at_call(nth, fault);
    let q = Queue::with_clock(faulty.clone(), Arc::new(clock.clone()), common::settings());
    let answered = q.submit_many(builders(&q)).await;
    assert!(faulty.crashed(), "crash point {nth} was reached");
    (clock, faulty.inner().clone(), answered)
}

/// After the crash each item is either finished (its record, its task and
/// its marker) or never started (no record): every record's task id has
/// exactly one task object and one marker.
fn each_item_finished_or_never_started(
    store: &MemoryStore,
    recs: &[Option<uuid::Uuid>],
    why: &str,
) {
    let started = recs.iter().flatten().count();
    assert_eq!(count(store, "idempotency/"), started, "{why}");
    assert_eq!(
        count(store, "tasks/"),
        started,
        "{why}: one task per started item"
    );
    assert_eq!(
        count(store, "ready/"),
        started,
        "{why}: one marker per started item"
    );
    for id in recs.iter().flatten() {
        assert!(
            store
                .keys()
                .iter()
                .any(|k| k.starts_with("tasks/") && k.contains(&id.to_string())),
            "{why}: {id}"
        );
        assert!(
            store
                .keys()
                .iter()
                .any(|k| k.starts_with("ready/") && k.ends_with(&id.to_string())),
            "{why}: {id}"
        );
    }
}

/// A retry of the whole batch answers every item truthfully: an item that
/// had started, its record's task (200, replayed); one that had not, a new
/// task (201); an item answered before the crash, the same task again.
async fn retry_answers_every_item_truthfully(
    q: &Queue,
    store: &MemoryStore,
    before: &[Option<uuid::Uuid>],
    answered: &[Result<idempotent_submit::Submitted, SubmitError>],
    why: &str,
) {
    let retry = q.submit_many(builders(q)).await;
    for (i, r) in retry.iter().enumerate() {
        let s = r
            .as_ref()
            .unwrap_or_else(|e| panic!("{why}: item {i}: {e}"));
        match before[i] {
            Some(id) => {
                assert_eq!(s.task_id, id, "{why}: item {i}");
                assert!(s.replayed, "{why}: item {i}");
            }
            None => assert!(s.created(), "{why}: item {i}"),
        }
        if let Ok(a) = &answered[i] {
            assert_eq!(
                a.task_id, s.task_id,
                "{why}: item {i} answered before the crash"
            );
        }
        assert_eq!(s.status, "pending", "{why}: item {i}");
    }
    assert_eq!(count(store, "tasks/"), ITEMS, "{why}");
    assert_eq!(count(store, "ready/"), ITEMS, "{why}");
}

#[tokio::test]
async fn a_batch_that_died_halfway_is_finished_by_its_records_events_and_a_retry_answers_each_item()
{
    for (nth, fault) in crash_points() {
        let why = format!("{fault:?} at call {nth}");
        let (clock, store, answered) = crashed_batch(nth, fault).await;
        let restarted =
            Queue::with_clock(store.clone(), Arc::new(clock.clone()), common::settings());
        let before = records(&restarted).await;
        // The records' events, STALE_CREATING_AFTER_SECONDS after the writes.
        clock.advance(common::settings().stale_creating_after);
        let record_keys: Vec<String> = store
            .keys()
            .into_iter()
            .filter(|k| k.starts_with("idempotency/"))
            .collect();
        for k in &record_keys {
            let o = restarted.engine().sweep_record(k, false, None).await;
            assert!(
                !o.try_again_later()
                    && !matches!(
                        o,
                        RecordOutcome::PastDeadline
                            | RecordOutcome::Corrupt
                            | RecordOutcome::Failed(_)
                    ),
                "{why}: {k}: {o:?}"
            );
        }
        each_item_finished_or_never_started(&store, &before, &why);
        assert_eq!(
            records(&restarted).await,
            before,
            "{why}: the sweeper kept every task id"
        );
        retry_answers_every_item_truthfully(&restarted, &store, &before, &answered, &why).await;
    }
}

#[tokio::test]
async fn a_batch_that_died_halfway_is_finished_by_a_retry_of_the_batch_alone() {
    for (nth, fault) in crash_points() {
        let why = format!("{fault:?} at call {nth}");
        let (clock, store, answered) = crashed_batch(nth, fault).await;
        let restarted =
            Queue::with_clock(store.clone(), Arc::new(clock.clone()), common::settings());
        let before = records(&restarted).await;
        retry_answers_every_item_truthfully(&restarted, &store, &before, &answered, &why).await;
        each_item_finished_or_never_started(&store, &records(&restarted).await, &why);
    }
}

#[tokio::test]
async fn a_batch_through_the_http_handler_that_crashed_is_retryable_and_its_retry_answers_every_item()
 {
    let clock = ManualClock::at_epoch();
    let faulty = common::faulty(&clock);
    let h = memory_harness(&faulty, &clock);
    faulty.inject(Some(Op::PutCreate), "tasks/", 2, 1, Fault::CrashAfter);
    let body = json!({"tasks": (0..5).map(|i| item(&format!("c{i}"), i)).collect::<Vec<_>>()});
    let r = h.http(batch(body.clone())).await;
    // What the process answered as it died: no item a success it was not.
    if r.status == 200 {
        for x in results(&r) {
            assert!(
                x["status_code"].is_null()
                    || faulty
                        .inner()
                        .keys()
                        .iter()
                        .any(|k| k.contains(x["task_id"].as_str().unwrap()))
            );
        }
    } else {
        assert_eq!(r.status, 503);
    }
    let restarted = Harness::with_settings(
        faulty.inner().clone(),
        Some(&clock),
        false,
        common::settings(),
    );
    let again = restarted.http(batch(body)).await;
    let rs = results(&again);
    assert!(
        rs.iter()
            .all(|x| x["status_code"] == 201 || x["status_code"] == 200),
        "{}",
        again.body
    );
    assert_eq!(count(faulty.inner(), "tasks/"), 5);
    assert_eq!(count(faulty.inner(), "ready/"), 5);
    let ids: std::collections::HashSet<&str> =
        rs.iter().map(|x| x["task_id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 5);
}

// ---- idem submit --batch ----

async fn idem_batch(bucket: &str, lines: &str) -> (i32, Vec<Value>) {
    let dir = std::env::temp_dir().join(format!(
        "idem-batch-{}-{}",
        std::process::id(),
        fastrand::u32(..)
    ));
    std::fs::write(&dir, lines).unwrap();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(["submit", "--batch", dir.to_str().unwrap()])
        .env_clear()
        .env("BUCKET_NAME", bucket)
        .env("AWS_ENDPOINT_URL", common::moto_endpoint())
        .env("S3_FORCE_PATH_STYLE", "true")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "us-east-1")
        .env("MAX_BATCH_TASKS", "2")
        .output()
        .await
        .expect("running idem");
    let _ = std::fs::remove_file(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect();
    (out.status.code().unwrap_or(-1), lines)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idem_submit_batch_prints_one_result_per_line_in_order_with_its_exit_code() {
    let store = common::moto_store().await;
    let b = store.bucket();
    // Five lines, two at a time (MAX_BATCH_TASKS=2), a blank line skipped.
    let file: String = (0..5)
        .map(|i| format!("{}\n", item(&format!("cli{i}"), i)))
        .collect::<String>()
        + "\n";
    let (code, first) = idem_batch(b, &file).await;
    assert_eq!(code, 0, "{first:?}");
    assert_eq!(first.len(), 5);
    for (i, r) in first.iter().enumerate() {
        assert_eq!(r["status_code"], 201);
        assert_eq!(r["idempotency"]["key"], format!("cli{i}"));
    }
    let (code, again) = idem_batch(b, &file).await;
    assert_eq!(code, 0);
    for (a, f) in again.iter().zip(&first) {
        assert_eq!(
            (a["status_code"].as_u64(), &a["task_id"]),
            (Some(200), &f["task_id"])
        );
    }
    // An invalid line: exit 2, and the others still go.
    let (code, rs) = idem_batch(b, &format!("{}\n{{not json\n", item("cli9", 9))).await;
    assert_eq!(code, 2);
    assert_eq!(
        (rs[0]["status_code"].as_u64(), rs[1]["code"].as_str()),
        (Some(201), Some("invalid_request"))
    );
    // A conflict outranks an invalid line: exit 3.
    let (code, rs) = idem_batch(b, &format!("{}\n[]\n", item("cli0", 99))).await;
    assert_eq!(code, 3);
    assert_eq!(rs[0]["code"], "idempotency_conflict");
    // No line at all, or no file: exit 2.
    let (code, rs) = idem_batch(b, "\n").await;
    assert_eq!(
        (code, rs[0]["error"].as_str()),
        (2, Some("invalid_request"))
    );
    assert_eq!(count_tasks(&store).await, 6);
}

async fn count_tasks(store: &idempotent_submit::S3Store) -> usize {
    common::all_keys(store)
        .await
        .iter()
        .filter(|k| k.starts_with("tasks/"))
        .count()
}
