use super::*;

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

/// The sweep function of `s`'s bucket, its clock `ahead` of now.
fn sweeper_at(s: &Shared, ahead: Duration) -> Sweeper {
    Sweeper {
        queue: Queue::with_clock(
            s.store.clone(),
            Arc::new(ManualClock::new(Utc::now() + ahead)),
            Settings::default(),
        ),
        bucket: s.bucket.clone(),
        metrics: Metrics::collecting("sweep"),
    }
}

/// Writes the marker the old rule left for the task `id` once a worker
/// had run it: its minute of `available_at`.
async fn stale_marker(s: &Shared, id: &str) {
    let task = s.task_json(id).await;
    let available: chrono::DateTime<Utc> = task["available_at"].as_str().unwrap().parse().unwrap();
    let stale = format!(
        "ready/{}/{:010}/{}",
        task["shard"].as_str().unwrap(),
        available.timestamp() / 60,
        id
    );
    s.store
        .put(&stale, bytes::Bytes::new(), PutMode::Overwrite)
        .await
        .unwrap();
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
    let sweeper = sweeper_at(&s, Duration::seconds(660));
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
    stale_marker(&s, &ids[0]).await;
    let reads = idle_worker_task_reads(&s, &proxy, "3");
    assert!(
        reads >= 3,
        "one stale marker makes an idle worker re-read its finished task on every poll ({reads} reads)"
    );

    // The scheduled pass's scan of the ready index, once the marker has
    // stood for the late-write margin (its clock 17 minutes on): the task
    // is buquet's `completed`, so the marker goes, and the idle worker
    // reads no task again.
    let later = sweeper_at(&s, Duration::minutes(17));
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
