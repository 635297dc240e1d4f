//! Interop with the queue's own clients: buquet 0.1 from PyPI (its Python
//! client and worker) against the same moto bucket as our handler; the
//! worker and the Python submit on SeaweedFS too, versioned and not.

use crate::common;

use std::process::Command;
use std::sync::Arc;

use crate::common::chaos_proxy::ChaosProxy;
use chrono::{Duration, SubsecRound, Utc};
use idempotent_submit::lambda::{App, Metrics, Sweeper, handle_submit, handle_sweep};
use idempotent_submit::store::{PutMode, Store};
use idempotent_submit::{ManualClock, Queue, Settings};
use lambda_runtime::{Context, LambdaEvent};
use serde_json::{Value, json};

/// Our handler and buquet's clients on one moto bucket: versioned, as
/// buquet's workers require, unless the test says otherwise (or on a
/// SeaweedFS bucket).
struct Shared {
    bucket: String,
    store: idempotent_submit::S3Store,
    app: App,
    versioning: common::Versioning,
    /// Where buquet's clients reach the bucket, and with which key pair.
    endpoint: String,
    keys: (String, String),
}

impl Shared {
    async fn new() -> Self {
        Self::with_isolation(false).await
    }

    async fn with_isolation(tenant_isolation: bool) -> Self {
        Self::on(common::Versioning::On, tenant_isolation).await
    }

    async fn on(versioning: common::Versioning, tenant_isolation: bool) -> Self {
        let store = common::moto_store_with(versioning).await;
        let keys = ("test".to_owned(), "test".to_owned());
        Self::over(
            store,
            common::moto_endpoint(),
            keys,
            versioning,
            tenant_isolation,
        )
    }

    /// On a new SeaweedFS bucket.
    async fn seaweedfs(versioning: common::Versioning) -> Self {
        let store = common::seaweedfs_store_with(versioning).await;
        let sw = common::seaweedfs();
        let keys = (sw.access_key_id.clone(), sw.secret_access_key.clone());
        Self::over(store, sw.endpoint.clone(), keys, versioning, false)
    }

    fn over(
        store: idempotent_submit::S3Store,
        endpoint: String,
        keys: (String, String),
        versioning: common::Versioning,
        tenant_isolation: bool,
    ) -> Self {
        let bucket = store.bucket().to_owned();
        let app =
            common::lambda::app_over(store.clone(), None, tenant_isolation, Settings::default());
        Shared {
            bucket,
            store,
            app,
            versioning,
            endpoint,
            keys,
        }
    }

    /// Runs the buquet client; its JSON answer.
    fn buquet(&self, args: &[&str]) -> Value {
        self.buquet_via(&self.endpoint, args)
    }

    /// Runs the buquet client against `endpoint` (moto, or a proxy before it).
    fn buquet_via(&self, endpoint: &str, args: &[&str]) -> Value {
        let skip = self.versioning == common::Versioning::Off;
        let out = self.buquet_run(endpoint, args, skip);
        assert!(
            out.status.success(),
            "buquet {args:?} failed (is `buquet` installed? make test installs it): {:?} {} {}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    fn buquet_skipping_check(&self, args: &[&str], skip: bool) -> std::process::Output {
        self.buquet_run(&self.endpoint, args, skip)
    }

    fn buquet_run(&self, endpoint: &str, args: &[&str], skip: bool) -> std::process::Output {
        let mut cmd = Command::new("python3");
        cmd.env_remove("BUQUET_ALLOW_NO_VERSIONING");
        if skip {
            cmd.env("BUQUET_ALLOW_NO_VERSIONING", "1");
        }
        cmd.arg(format!(
            "{}/tests/interop/buquet_client.py",
            env!("CARGO_MANIFEST_DIR")
        ))
        .args(args)
        .env("BUQUET_ENDPOINT", endpoint)
        .env("BUQUET_BUCKET", &self.bucket)
        .env("AWS_ACCESS_KEY_ID", &self.keys.0)
        .env("AWS_SECRET_ACCESS_KEY", &self.keys.1)
        .env("AWS_REGION", "us-east-1")
        .output()
        .expect("python3 runs")
    }

    async fn post(&self, body: Value) -> (u64, Value) {
        let mut event = common::event("http-v2-post.json");
        event["body"] = json!(body.to_string());
        self.call(event).await
    }

    async fn call(&self, event: Value) -> (u64, Value) {
        let out = handle_submit(
            &self.app,
            LambdaEvent::new(event.clone(), Context::default()),
        )
        .await
        .unwrap();
        common::openapi::check(&event, &out);
        (
            out["statusCode"].as_u64().unwrap(),
            serde_json::from_str(out["body"].as_str().unwrap()).unwrap(),
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_submitted_through_our_handler_is_claimed_and_completed_by_a_buquet_worker() {
    ours_completed_by_a_buquet_worker(Shared::new().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_seaweedfs_a_task_submitted_through_our_handler_is_completed_by_a_buquet_worker() {
    ours_completed_by_a_buquet_worker(Shared::seaweedfs(common::Versioning::On).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_an_unversioned_seaweedfs_bucket_a_buquet_worker_told_so_completes_our_task() {
    ours_completed_by_a_buquet_worker(Shared::seaweedfs(common::Versioning::Off).await).await;
}

async fn ours_completed_by_a_buquet_worker(s: Shared) {
    let (status, body) = s
        .post(json!({"task_type": "charge_customer", "input": {"order": "ORD-7", "cents": 5}, "idempotency_key": "k-7"}))
        .await;
    assert_eq!(status, 201);
    let id = body["task_id"].as_str().unwrap();
    let run = s.buquet(&["work", "charge_customer", "1"]);
    assert_eq!(run["processed"], 1);
    let task = s.buquet(&["get", id]);
    assert_eq!(task["status"], "completed", "{task}");
    assert_eq!(
        task["output"]["handled"],
        json!({"order": "ORD-7", "cents": 5})
    );
    // And a replay through us now reports what the worker did.
    let (status, again) = s
        .post(json!({"task_type": "charge_customer", "input": {"cents": 5, "order": "ORD-7"}, "idempotency_key": "k-7"}))
        .await;
    assert_eq!((status, again["task_id"].as_str()), (200, Some(id)));
    assert_eq!(again["status"], "completed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_an_unversioned_bucket_buquet_refuses_to_start_unless_told_and_then_completes_our_task()
{
    let s = Shared::on(common::Versioning::Off, false).await;
    let refused = s.buquet_skipping_check(&["work", "charge_customer", "1"], false);
    assert!(!refused.status.success());
    let why = String::from_utf8_lossy(&refused.stderr);
    assert!(why.contains("versioning must be enabled"), "{why}");
    let (status, body) = s
        .post(json!({"task_type": "charge_customer", "input": {"n": 1}, "idempotency_key": "k-u"}))
        .await;
    assert_eq!(status, 201);
    let run = s.buquet(&["work", "charge_customer", "1"]);
    assert_eq!(run["processed"], 1);
    let task = s.buquet(&["get", body["task_id"].as_str().unwrap()]);
    assert_eq!(task["status"], "completed", "{task}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_tasks_are_completed_by_a_buquet_worker_and_stay_the_tenants() {
    let s = Shared::with_isolation(true).await;
    let as_tenant = |mut e: Value, who: &str| {
        e["requestContext"]["authorizer"] = json!({"lambda": {"principalId": who}});
        e
    };
    let mut keyed = common::event("http-v2-post.json");
    keyed["body"] = json!(
        json!({"task_type": "charge_customer", "input": {"n": 1}, "idempotency_key": "k-t"})
            .to_string()
    );
    let mut keyless = common::event("http-v2-post.json");
    keyless["body"] = json!(json!({"task_type": "charge_customer", "input": {"n": 2}}).to_string());
    let (s1, a) = s.call(as_tenant(keyed, "alice")).await;
    let (s2, b) = s.call(as_tenant(keyless, "alice")).await;
    assert_eq!((s1, s2), (201, 201), "{a} {b}");
    for body in [&a, &b] {
        let id = body["task_id"].as_str().unwrap().parse().unwrap();
        let task: Value =
            serde_json::from_slice(&s.app.queue.task(id).await.unwrap().unwrap()).unwrap();
        assert!(task["idempotency"]["tenant"].as_str().is_some(), "{task}");
    }
    let run = s.buquet(&["work", "charge_customer", "2"]);
    assert_eq!(run["processed"], 2, "{run}");
    for body in [a, b] {
        let id = body["task_id"].as_str().unwrap();
        let mut get = common::event("http-v2-get-missing.json");
        get["rawPath"] = json!(format!("/tasks/{id}"));
        get["requestContext"]["http"]["path"] = json!(format!("/tasks/{id}"));
        // The worker's rewrites keep the tenant: alice still reads her
        // completed task, bob still cannot.
        // buquet 0.1's worker drops `idempotency` when it rewrites the
        // task; the seal in the id still names the tenant.
        let (status, task) = s.call(as_tenant(get.clone(), "alice")).await;
        assert_eq!(status, 200, "{task}");
        assert_eq!(task["status"], "completed", "{task}");
        let (status, _) = s.call(as_tenant(get, "bob")).await;
        assert_eq!(status, 404);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_submitted_through_buquet_first_then_us_is_one_task_and_its_record_replays() {
    theirs_first_then_ours(Shared::new().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_seaweedfs_a_key_submitted_through_buquet_first_then_us_is_one_task_and_its_record_replays()
 {
    theirs_first_then_ours(Shared::seaweedfs(common::Versioning::On).await).await;
}

async fn theirs_first_then_ours(s: Shared) {
    let theirs = s.buquet(&[
        "submit",
        "charge_customer",
        r#"{"order":"ORD-1","cents":1999,"é":"ü"}"#,
        "charge-ORD-1",
    ]);
    // buquet's record has no `status`: a young one whose task is there is
    // answered with that task.
    let (status, ours) = s
        .post(json!({"task_type": "charge_customer", "input": {"é": "ü", "cents": 1999, "order": "ORD-1"}, "idempotency_key": "charge-ORD-1"}))
        .await;
    assert_eq!(status, 200, "{ours}");
    assert_eq!(ours["task_id"], theirs["id"]);
    assert_eq!(ours["replayed"], true);
    assert_eq!(ours["idempotency"]["scope"], "charge_customer");
    // Another input under their key is a conflict: the input hashes agree.
    let (status, conflict) = s
        .post(json!({"task_type": "charge_customer", "input": {"order": "ORD-1", "cents": 2}, "idempotency_key": "charge-ORD-1"}))
        .await;
    assert_eq!(
        (status, conflict["code"].as_str()),
        (422, Some("idempotency_conflict"))
    );
}

/// A reset writes a reset record (`expires_at` at the reset, `reset_at`):
/// buquet 0.1's submit, which knows no `reset_at`, takes it for an expired
/// record, claims over it and writes a new task; its worker runs the old
/// task and the new one as any others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_key_reads_as_absent_to_buquet_whose_submit_makes_a_new_task_its_worker_runs() {
    reset_then_theirs(Shared::new().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_seaweedfs_a_reset_key_reads_as_absent_to_buquet_whose_submit_makes_a_new_task() {
    reset_then_theirs(Shared::seaweedfs(common::Versioning::On).await).await;
}

async fn reset_then_theirs(s: Shared) {
    let (status, ours) = s
        .post(json!({"task_type": "reset_me", "input": {"n": 1}, "idempotency_key": "r-1"}))
        .await;
    assert_eq!(status, 201, "{ours}");
    let old: uuid::Uuid = ours["task_id"].as_str().unwrap().parse().unwrap();
    let q = Queue::new(s.store.clone(), Settings::default());
    // At once: the task is there, so nothing may still write it.
    assert_eq!(
        q.reset_key("reset_me", "r-1", None).await.unwrap(),
        idempotent_submit::Reset::Done { old_task_id: old }
    );
    let records: Vec<String> = common::all_keys(&s.store)
        .await
        .into_iter()
        .filter(|k| k.starts_with("idempotency/"))
        .collect();
    assert_eq!(
        records.len(),
        1,
        "the reset record stands at the record's path"
    );
    let theirs = s.buquet(&["submit", "reset_me", r#"{"n":1}"#, "r-1"]);
    let new = theirs["id"].as_str().unwrap();
    assert_ne!(new, old.to_string(), "buquet's submit made a new task");
    // buquet's record replaced the reset record: our lookup sees its task.
    let view = q
        .lookup_key("reset_me", "r-1", None)
        .await
        .unwrap()
        .expect("buquet's record is live");
    assert_eq!(view.task_id.to_string(), new);
    let run = s.buquet(&["work", "reset_me", "2"]);
    assert_eq!(run["processed"], 2, "the old task and the new one");
    for id in [old.to_string(), new.to_owned()] {
        assert_eq!(s.buquet(&["get", &id])["status"], "completed");
    }
}

/// How a test ends its key's first task for good, through buquet.
#[derive(Clone, Copy)]
enum Ending {
    /// buquet's worker runs it and its handler raises buquet's
    /// `PermanentError`: `failed` at once, whatever its `max_retries`.
    Failed,
    /// buquet's `cancel`, while it is pending.
    Cancelled,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_whose_task_a_buquet_worker_failed_is_replayed_and_with_new_task_makes_a_new_task_buquet_completes()
 {
    ended_key_reused(Shared::new().await, Ending::Failed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_seaweedfs_a_key_whose_task_a_buquet_worker_failed_is_replayed_and_with_new_task_makes_a_new_task()
 {
    ended_key_reused(
        Shared::seaweedfs(common::Versioning::On).await,
        Ending::Failed,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_whose_task_buquet_cancelled_is_replayed_and_with_new_task_makes_a_new_task_buquet_completes()
 {
    ended_key_reused(Shared::new().await, Ending::Cancelled).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_seaweedfs_a_key_whose_task_buquet_cancelled_is_replayed_and_with_new_task_makes_a_new_task()
 {
    ended_key_reused(
        Shared::seaweedfs(common::Versioning::On).await,
        Ending::Cancelled,
    )
    .await;
}

/// A keyed task of ours ended by buquet (`ending`): replayed as it ended,
/// then, with `if_task_failed: new_task`, its key claimed over the record
/// for a new task, which buquet's worker completes while the old task stays
/// as buquet left it; buquet's own submit of the key then reads our record
/// (with its `replaces_task_id`) as the new task's.
async fn ended_key_reused(s: Shared, ending: Ending) {
    let input = json!({"order": "ORD-9", "cents": 700});
    let submit = json!({"task_type": "charge_card", "input": input, "idempotency_key": "pay-9"});
    let (status, first) = s.post(submit.clone()).await;
    assert_eq!(status, 201, "{first}");
    let old = first["task_id"].as_str().unwrap().to_owned();
    let (ended, why) = match ending {
        Ending::Failed => {
            let run = s.buquet(&["fail", "charge_card", "1"]);
            assert_eq!(run["processed"], 1, "{run}");
            ("failed", "PermanentError: declined")
        }
        Ending::Cancelled => {
            let out = s.buquet(&["cancel", &old, "order withdrawn"]);
            assert_eq!(out["status"], "cancelled", "{out}");
            ("cancelled", "order withdrawn")
        }
    };
    let task = s.buquet(&["get", &old]);
    assert_eq!(task["status"], ended, "{task}");
    assert!(task["last_error"].as_str().unwrap().contains(why), "{task}");
    let old_task = s.task_json(&old).await;

    // By default the key replays its task, as it ended.
    let (status, replay) = s.post(submit.clone()).await;
    assert_eq!(status, 200, "{replay}");
    assert_eq!(
        (replay["task_id"].as_str(), replay["status"].as_str()),
        (Some(old.as_str()), Some(ended))
    );
    assert_eq!(replay["replayed"], true);
    assert!(replay.get("replaces_task_id").is_none(), "{replay}");

    // With new_task: a new task, naming the one it replaces, in the key's
    // one record.
    let mut reuse = submit.clone();
    reuse["if_task_failed"] = json!("new_task");
    let (status, created) = s.post(reuse.clone()).await;
    assert_eq!(status, 201, "{created}");
    let new = created["task_id"].as_str().unwrap().to_owned();
    assert_ne!(new, old);
    assert_eq!(created["replaces_task_id"], json!(old), "{created}");
    assert_eq!(
        (created["replayed"].as_bool(), created["status"].as_str()),
        (Some(false), Some("pending"))
    );
    let records: Vec<String> = common::all_keys(&s.store)
        .await
        .into_iter()
        .filter(|k| k.starts_with("idempotency/"))
        .collect();
    assert_eq!(records.len(), 1, "{records:?}");
    let record = s.object_json(&records[0]).await;
    assert_eq!(
        (
            record["task_id"].as_str(),
            record["replaces_task_id"].as_str()
        ),
        (Some(new.as_str()), Some(old.as_str())),
        "{record}"
    );

    // buquet's worker claims and completes the new task, and finds nothing
    // else to run; the old task stays as buquet left it.
    let run = s.buquet(&["work", "charge_card", "1"]);
    assert_eq!(run["processed"], 1, "{run}");
    let task = s.buquet(&["get", &new]);
    assert_eq!(task["status"], "completed", "{task}");
    assert_eq!(task["output"]["handled"], input);
    let idle = s.buquet(&["idle", "charge_card", "1"]);
    assert_eq!(idle["processed"], 0, "{idle}");
    assert_eq!(s.buquet(&["get", &old])["status"], ended);
    assert_eq!(
        s.task_json(&old).await,
        old_task,
        "the old task was rewritten"
    );

    // Every replay now answers the new task, and still names the old one.
    for body in [submit, reuse] {
        let (status, again) = s.post(body).await;
        assert_eq!(status, 200, "{again}");
        assert_eq!(
            (again["task_id"].as_str(), again["status"].as_str()),
            (Some(new.as_str()), Some("completed"))
        );
        assert_eq!(again["replaces_task_id"], json!(old), "{again}");
    }

    // buquet's own submit of the key reads our record (its record type has
    // no `replaces_task_id` and ignores it): the new task, and still a
    // conflict for another input. It writes nothing.
    let theirs = s.buquet(&["submit", "charge_card", &input.to_string(), "pay-9"]);
    assert_eq!(
        (theirs["id"].as_str(), theirs["status"].as_str()),
        (Some(new.as_str()), Some("completed"))
    );
    let refused = s.buquet_skipping_check(
        &[
            "submit",
            "charge_card",
            r#"{"order":"ORD-9","cents":1}"#,
            "pay-9",
        ],
        false,
    );
    assert!(!refused.status.success());
    let why = String::from_utf8_lossy(&refused.stderr);
    assert!(why.contains("Idempotency conflict"), "{why}");
    assert_eq!(s.object_json(&records[0]).await, record);
    let keys = common::all_keys(&s.store).await;
    assert_eq!(keys.iter().filter(|k| k.starts_with("tasks/")).count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_submitted_through_us_first_then_buquet_is_one_task() {
    ours_first_then_theirs(Shared::new().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_seaweedfs_a_key_submitted_through_us_first_then_buquet_is_one_task() {
    ours_first_then_theirs(Shared::seaweedfs(common::Versioning::Off).await).await;
}

async fn ours_first_then_theirs(s: Shared) {
    let (status, ours) = s
        .post(json!({"task_type": "send_email", "input": {"to": "a@example.com"}, "idempotency_key": "mail-1", "idempotency_scope": "queue"}))
        .await;
    assert_eq!(status, 201);
    let theirs = s.buquet(&[
        "submit",
        "send_email",
        r#"{"to":"a@example.com"}"#,
        "mail-1",
        "queue",
    ]);
    assert_eq!(theirs["id"], ours["task_id"]);
    let keys = common::all_keys(&s.store).await;
    assert_eq!(keys.iter().filter(|k| k.starts_with("tasks/")).count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_doubles_through_buquet_and_us_are_one_task_each_way() {
    let s = Shared::new().await;
    let mut rng = fastrand::Rng::with_seed(0xd0b1e);
    let doubles = |rng: &mut fastrand::Rng| -> Value {
        // Amounts of every size: a tenth of such doubles used to come back
        // one unit in the last place off.
        (0..60)
            .map(|i| json!(rng.f64() * 10f64.powi(i % 12 - 3)))
            .collect()
    };
    // buquet first, then us.
    let input = json!({"amounts": doubles(&mut rng)});
    let theirs = s.buquet(&["submit", "settle", &input.to_string(), "floats-1"]);
    let (status, ours) = s
        .post(json!({"task_type": "settle", "input": input, "idempotency_key": "floats-1"}))
        .await;
    assert_eq!(status, 200, "the input hashes disagree: {ours}");
    assert_eq!(ours["task_id"], theirs["id"]);
    // Us first, then buquet.
    let input = json!({"amounts": doubles(&mut rng)});
    let (status, ours) = s
        .post(json!({"task_type": "settle", "input": input, "idempotency_key": "floats-2"}))
        .await;
    assert_eq!(status, 201);
    let theirs = s.buquet(&["submit", "settle", &input.to_string(), "floats-2"]);
    assert_eq!(theirs["id"], ours["task_id"]);
    let direct = idempotent_submit::S3Store::for_endpoint(&common::moto_endpoint(), &s.bucket);
    let keys = common::all_keys(&direct).await;
    assert_eq!(keys.iter().filter(|k| k.starts_with("tasks/")).count(), 2);
}

/// An idle buquet worker polls for `seconds` through a proxy that notes every
/// request: the task objects it read (GET under `tasks/`).
fn idle_worker_task_reads(s: &Shared, proxy: &ChaosProxy, seconds: &str) -> usize {
    proxy.counts.requests.lock().unwrap().clear();
    let run = s.buquet_via(&proxy.endpoint, &["idle", "report", seconds]);
    assert_eq!(run["processed"], 0, "{run}");
    let requests = proxy.counts.requests.lock().unwrap();
    assert!(
        requests.iter().any(|r| r.contains("list-type=2")),
        "the worker listed the ready index: {requests:?}"
    );
    requests
        .iter()
        .filter(|r| r.starts_with("GET ") && r.contains("/tasks/"))
        .count()
}

/// Guarantee 10 with the queue's own worker consuming the bucket: tasks that
/// buquet's worker ran get no marker again from their replays, from their
/// records' real S3 events handed to `sweep`, or from a scheduled pass, so an
/// idle worker then reads no task object. One stale marker, as the old rule
/// left, shows that the measure can fail: the idle worker reads its finished
/// task on every poll, until the scheduled pass's scan of the ready index
/// removes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_a_buquet_worker_ran_get_no_marker_again_and_an_idle_worker_reads_no_task() {
    let s = Shared::new().await;
    let due = common::moto_due_queue(&s.store, 0).await;
    let keys = ["run-1", "run-2", "run-3"];
    let mut ids = Vec::new();
    for k in keys {
        let (status, body) = s
            .post(json!({"task_type": "report", "input": {"k": k}, "idempotency_key": k}))
            .await;
        assert_eq!(status, 201, "{body}");
        ids.push(body["task_id"].as_str().unwrap().to_owned());
    }
    let run = s.buquet(&["work", "report", "3"]);
    assert_eq!(run["processed"], 3, "{run}");

    // Producers retry: each replay answers what the worker did.
    for (k, id) in keys.iter().zip(&ids) {
        let (status, body) = s
            .post(json!({"task_type": "report", "input": {"k": k}, "idempotency_key": k}))
            .await;
        assert_eq!((status, body["task_id"].as_str()), (200, Some(id.as_str())));
        assert_eq!(body["status"], "completed", "{body}");
    }

    // The records' own S3 events reach `sweep` once they are stale (its
    // clock 11 minutes on), then a scheduled pass reads every record its
    // age brings due.
    let messages = common::receive_all(&due, 60).await;
    let events = messages
        .iter()
        .filter(|m| m.body().is_some_and(|b| b.contains("idempotency%2F")))
        .count();
    assert_eq!(events, 3, "one event per record write: {messages:?}");
    let clock = ManualClock::new(Utc::now() + Duration::seconds(660));
    let sweeper = Sweeper {
        queue: Queue::with_clock(s.store.clone(), Arc::new(clock), Settings::default()),
        bucket: s.bucket.clone(),
        metrics: Metrics::collecting("sweep"),
    };
    let out = handle_sweep(
        &sweeper,
        LambdaEvent::new(common::sqs_event(&messages), Context::default()),
    )
    .await
    .unwrap();
    assert_eq!(out, json!({"batchItemFailures": []}));
    let pass = handle_sweep(&sweeper, LambdaEvent::new(json!({}), Context::default()))
        .await
        .unwrap();
    assert_eq!(
        (pass["scanned"].as_u64(), pass["finished"].as_u64()),
        (Some(3), Some(0)),
        "{pass}"
    );
    let metrics = sweeper.metrics.lines();
    assert!(
        metrics.iter().all(|l| l["SweepFinished"] == 0),
        "nothing was missing: {metrics:?}"
    );

    // No marker names a task that is not pending: here, none at all.
    let keys_now = common::all_keys(&s.store).await;
    let markers: Vec<&String> = keys_now
        .iter()
        .filter(|k| k.starts_with("ready/"))
        .collect();
    assert!(markers.is_empty(), "stale markers: {markers:?}");

    let proxy = ChaosProxy::start(&common::moto_endpoint(), 0, 1).await;
    assert_eq!(
        idle_worker_task_reads(&s, &proxy, "3"),
        0,
        "an idle worker read finished tasks"
    );

    // The old rule's marker, for one finished task: read again and again.
    let task: Value = serde_json::from_slice(
        &s.app
            .queue
            .task(ids[0].parse().unwrap())
            .await
            .unwrap()
            .unwrap(),
    )
    .unwrap();
    let available: chrono::DateTime<Utc> = task["available_at"].as_str().unwrap().parse().unwrap();
    let stale = format!(
        "ready/{}/{:010}/{}",
        task["shard"].as_str().unwrap(),
        available.timestamp() / 60,
        ids[0]
    );
    s.store
        .put(&stale, bytes::Bytes::new(), PutMode::Overwrite)
        .await
        .unwrap();
    let reads = idle_worker_task_reads(&s, &proxy, "3");
    assert!(
        reads >= 3,
        "one stale marker makes an idle worker re-read its finished task on every poll ({reads} reads)"
    );

    // The scheduled pass's scan of the ready index, once the marker has
    // stood for the late-write margin (its clock 17 minutes on): the task
    // is buquet's `completed`, so the marker goes, and the idle worker
    // reads no task again.
    let later = Sweeper {
        queue: Queue::with_clock(
            s.store.clone(),
            Arc::new(ManualClock::new(Utc::now() + Duration::minutes(17))),
            Settings::default(),
        ),
        bucket: s.bucket.clone(),
        metrics: Metrics::collecting("sweep"),
    };
    let pass = handle_sweep(&later, LambdaEvent::new(json!({}), Context::default()))
        .await
        .unwrap();
    assert_eq!(pass["errors"], 0, "{pass}");
    let left: Vec<String> = common::all_keys(&s.store)
        .await
        .into_iter()
        .filter(|k| k.starts_with("ready/"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    assert_eq!(
        idle_worker_task_reads(&s, &proxy, "3"),
        0,
        "an idle worker read finished tasks after the scan"
    );
}

// ---- task options and offloaded inputs, through buquet's own worker ----

impl Shared {
    async fn task_json(&self, id: &str) -> Value {
        let body = self
            .app
            .queue
            .task(id.parse().unwrap())
            .await
            .unwrap()
            .expect("the task object");
        serde_json::from_slice(&body).unwrap()
    }

    async fn object_json(&self, key: &str) -> Value {
        serde_json::from_slice(&self.store.get(key).await.unwrap().body).unwrap()
    }
}

fn time_of(v: &Value) -> chrono::DateTime<Utc> {
    v.as_str().unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_scheduled_a_few_seconds_ahead_is_not_claimed_before_its_time_and_is_claimed_after()
{
    let s = Shared::new().await;
    let (status, body) = s
        .post(
            json!({"task_type": "remind", "input": {"who": "ann"}, "idempotency_key": "r-1",
            "delay_seconds": 8}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let id = body["task_id"].as_str().unwrap();
    let available = time_of(&s.task_json(id).await["available_at"]);
    let early = s.buquet(&["idle", "remind", "2"]);
    // The idle worker's whole run fell before the task's time (the premise
    // of the check that follows).
    assert!(Utc::now() < available, "the worker ran past available_at");
    assert_eq!(early["processed"], 0, "claimed before its available_at");
    assert_eq!(s.task_json(id).await["status"], "pending");
    let run = s.buquet(&["work", "remind", "1"]);
    assert_eq!(run["processed"], 1);
    let task = s.task_json(id).await;
    assert_eq!(task["status"], "completed", "{task}");
    assert!(time_of(&task["completed_at"]) >= available, "{task}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_whose_handler_outruns_its_timeout_fails_by_timeout_after_max_retries_retries() {
    let s = Shared::new().await;
    let (status, body) = s
        .post(json!({"task_type": "slow_report", "input": {"r": 1}, "idempotency_key": "s-1",
            "timeout_seconds": 1, "max_retries": 2,
            "retry_policy": {"initial_interval_ms": 100, "max_interval_ms": 200, "multiplier": 1.0, "jitter_percent": 0.0}}))
        .await;
    assert_eq!(status, 201, "{body}");
    let id = body["task_id"].as_str().unwrap();
    let out = s.buquet(&["slow", "slow_report", id, "45"]);
    assert!(
        out["status"]
            .as_str()
            .unwrap()
            .to_lowercase()
            .ends_with("failed"),
        "{out}"
    );
    assert_eq!(out["retry_count"], 2, "{out}");
    assert_eq!(
        out["calls"], 3,
        "the first run and max_retries retries: {out}"
    );
    assert!(
        out["last_error"].as_str().unwrap().contains("Timeout"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_past_its_ttl_seconds_is_not_run() {
    let s = Shared::new().await;
    let (status, body) = s
        .post(
            json!({"task_type": "flash_sale", "input": {"sku": 1}, "idempotency_key": "f-1",
            "ttl_seconds": 1}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let id = body["task_id"].as_str().unwrap();
    let expires = time_of(&s.task_json(id).await["expires_at"]);
    while Utc::now() <= expires + Duration::seconds(1) {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let run = s.buquet(&["idle", "flash_sale", "3"]);
    assert_eq!(run["processed"], 0, "an expired task was run");
    let task = s.task_json(id).await;
    assert_eq!(task["status"], "expired", "{task}");
    assert!(task["output"].is_null());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_offloaded_input_reaches_a_handler_through_buquets_load_input() {
    let s = Shared::new().await;
    let input = json!({"doc": "x".repeat(5000), "pages": [1, 2.5, -3]});
    let (status, body) = s
        .post(
            json!({"task_type": "ingest", "input": input, "idempotency_key": "i-1",
            "use_payload_refs": true, "payload_ref_threshold_bytes": 1024}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let id = body["task_id"].as_str().unwrap();
    let task = s.task_json(id).await;
    assert!(task["input"].is_null(), "{task}");
    assert_eq!(task["input_ref"], format!("payloads/{id}/input.json"));
    let out = s.buquet(&["load", "ingest", "1"]);
    assert_eq!(out["processed"], 1, "{out}");
    assert!(out["loaded"][0]["inline"].is_null(), "{out}");
    assert_eq!(out["loaded"][0]["loaded"], input);
    assert_eq!(s.task_json(id).await["status"], "completed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_written_with_options_is_field_by_field_the_one_buquets_submit_writes() {
    let s = Shared::new().await;
    let base = Utc::now().trunc_subsecs(0);
    let fmt = |t: chrono::DateTime<Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let input = json!({"doc": "y".repeat(200), "n": 1.5});
    let opts = json!({
        "timeout_seconds": 1800, "max_retries": 10,
        "retry_policy": {"initial_interval_ms": 500, "max_interval_ms": 30000, "multiplier": 3.0, "jitter_percent": 0.1},
        "schedule_at": fmt(base + Duration::hours(1)), "max_reschedules": 4,
        "expires_at": fmt(base + Duration::hours(3)),
        "use_payload_refs": true, "payload_ref_threshold_bytes": 64,
    });
    let mut ours = json!({"task_type": "report", "input": input});
    ours.as_object_mut()
        .unwrap()
        .extend(opts.as_object().unwrap().clone());
    let (status, body) = s.post(ours).await;
    assert_eq!(status, 201, "{body}");
    let our_id = body["task_id"].as_str().unwrap().to_owned();
    let theirs = s.buquet(&[
        "submit_opts",
        "report",
        &input.to_string(),
        &opts.to_string(),
    ]);
    let their_id = theirs["id"].as_str().unwrap().to_owned();

    let a = s.task_json(&our_id).await;
    let b = s.task_json(&their_id).await;
    let (a_map, b_map) = (a.as_object().unwrap(), b.as_object().unwrap());
    let mut fields: Vec<&String> = a_map.keys().chain(b_map.keys()).collect();
    fields.sort();
    fields.dedup();
    // Everything but what is each task's own: its id (and the shard and
    // input_ref named after it) and the instants of its submit.
    for f in fields {
        if ["id", "shard", "created_at", "updated_at"].contains(&f.as_str()) {
            continue;
        }
        let (x, y) = (&a[f.as_str()], &b[f.as_str()]);
        if f == "input_ref" {
            assert_eq!(x, &json!(format!("payloads/{our_id}/input.json")));
            assert_eq!(y, &json!(format!("payloads/{their_id}/input.json")));
            continue;
        }
        assert_eq!(x, y, "field {f}: ours {a}\nbuquet's {b}");
    }
    assert!(a_map.contains_key("input_ref") && a["input"].is_null());
    // The payloads hold the same input, and the markers are in one minute.
    assert_eq!(
        s.object_json(&format!("payloads/{our_id}/input.json"))
            .await,
        s.object_json(&format!("payloads/{their_id}/input.json"))
            .await
    );
    let keys = common::all_keys(&s.store).await;
    let minute = |id: &str| {
        keys.iter()
            .find(|k| k.starts_with("ready/") && k.ends_with(id))
            .map(|k| k.split('/').nth(2).unwrap().to_owned())
    };
    assert_eq!(minute(&our_id), minute(&their_id));
    assert!(minute(&our_id).is_some());
}

/// buquet's own client publishes a task type's schema (`publish_schema`);
/// with VALIDATE_INPUT_SCHEMAS on, our submit refuses what the schema
/// refuses, writing nothing, and takes what it takes, and buquet's own
/// `validate_input` agrees on both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_published_by_buquets_client_refuses_an_invalid_input_and_takes_a_valid_one() {
    let mut s = Shared::new().await;
    s.app = common::lambda::app_over(
        s.store.clone(),
        None,
        false,
        Settings {
            validate_input_schemas: true,
            ..Settings::default()
        },
    );
    let schema = json!({
        "input": {
            "type": "object",
            "properties": {"to": {"type": "string"}, "subject": {"type": "string", "minLength": 1}},
            "required": ["to", "subject"],
            "additionalProperties": false
        },
        "output": {"type": "object", "properties": {"sent": {"type": "boolean"}}}
    });
    let out = s.buquet(&["publish_schema", "send_email", &schema.to_string()]);
    assert_eq!(out["published"], "send_email");
    // What buquet wrote is the document we read.
    assert_eq!(s.object_json("schemas/send_email.json").await, schema);

    let bad = json!({"to": "a@example.com", "subject": "", "cc": "b@example.com"});
    let (status, body) = s
        .post(json!({"task_type": "send_email", "input": bad, "idempotency_key": "mail-bad"}))
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["code"], "input_invalid");
    let named = common::openapi::failures(&body);
    assert_eq!(
        named,
        [
            (String::new(), "additionalProperties".to_owned()),
            ("/subject".to_owned(), "minLength".to_owned())
        ]
    );
    assert_eq!(
        common::all_keys(&s.store).await,
        ["schemas/send_email.json"],
        "nothing written for the refused input"
    );
    let theirs = s.buquet(&["validate", "send_email", &bad.to_string()]);
    assert_eq!(
        theirs["valid"], false,
        "buquet's validate_input refuses it too: {theirs}"
    );

    let good = json!({"to": "a@example.com", "subject": "hello"});
    let (status, body) = s
        .post(json!({"task_type": "send_email", "input": good, "idempotency_key": "mail-good"}))
        .await;
    assert_eq!(status, 201, "{body}");
    let theirs = s.buquet(&["validate", "send_email", &good.to_string()]);
    assert_eq!(theirs, json!({"valid": true, "error": null}));
    // And buquet's worker runs the task it took.
    let run = s.buquet(&["work", "send_email", "1"]);
    assert_eq!(run["processed"], 1);
    let task = s.buquet(&["get", body["task_id"].as_str().unwrap()]);
    assert_eq!(task["status"], "completed", "{task}");
}
