use super::*;

on_moto_and_seaweedfs! {
    a_task_submitted_through_our_handler_is_claimed_and_completed_by_a_buquet_worker,
    on_seaweedfs_a_task_submitted_through_our_handler_is_completed_by_a_buquet_worker (On)
        => ours_completed_by_a_buquet_worker();
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
