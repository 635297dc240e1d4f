//! The pass's payload check beside buquet 0.1's real worker (issue 49):
//! started together with the worker that runs tasks whose inputs are
//! offloaded (the pass is on the runtime's other thread; how their
//! requests interleave is moto's), it deletes the orphan payloads and no
//! payload a task names, so every task the worker loads finds its input.

use super::*;

use idempotent_submit::testing::protocol::SweepOptions;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pass_deletes_orphan_payloads_while_a_buquet_worker_loads_the_named_ones() {
    let s = Shared::new().await;
    let mut inputs = Vec::new();
    for i in 0..6 {
        let input = json!({"doc": "x".repeat(3000), "n": i});
        let (status, body) = s
            .post(json!({"task_type": "ingest", "input": input,
                "idempotency_key": format!("tail-{i}"),
                "use_payload_refs": true, "payload_ref_threshold_bytes": 1024}))
            .await;
        assert_eq!(status, 201, "{body}");
        inputs.push(input);
    }
    // Orphans: payloads no task names, as dead replays leave them.
    let mut orphans = Vec::new();
    for _ in 0..4 {
        let key = format!("payloads/{}/input.json", uuid::Uuid::new_v4());
        let body = bytes::Bytes::from_static(b"{\"doc\":\"orphan\"}");
        s.store.put(&key, body, PutMode::Create).await.unwrap();
        orphans.push(key);
    }
    // The sweeper's clock an hour past the orphan age of every payload
    // here (the finish window, the late-write margin twice and the
    // operation's timeout: docs/protocol.md, "Offloaded inputs"): each is
    // judged by its HEADs (the task at every shard length).
    let settings = Settings::default();
    let age = settings.finish_window + settings.late_write_margin * 2 + settings.operation_timeout;
    let q = Queue::with_clock(
        s.store.clone(),
        Arc::new(ManualClock::new(Utc::now() + age + Duration::hours(1))),
        settings,
    );
    let pass = tokio::spawn(async move { q.engine().sweep(&SweepOptions::default()).await });
    // buquet's worker, meanwhile, runs the six tasks and loads each input.
    let out = tokio::task::block_in_place(|| s.buquet(&["load", "ingest", "6"]));
    let summary = pass.await.unwrap().unwrap();
    assert_eq!(out["processed"], 6, "{out}");
    let mut loaded: Vec<Value> = out["loaded"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["loaded"].clone())
        .collect();
    loaded.sort_by_key(|v| v["n"].as_i64());
    assert_eq!(loaded, inputs, "every input loaded whole");
    assert_eq!(summary.payloads_deleted, 4, "{summary:?}");
    let keys = common::all_keys(&s.store).await;
    assert!(orphans.iter().all(|k| !keys.contains(k)), "{keys:?}");
    let named = keys.iter().filter(|k| k.starts_with("payloads/")).count();
    assert_eq!(named, 6, "{keys:?}");
}
