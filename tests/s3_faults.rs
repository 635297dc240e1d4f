//! Faults through the real S3 client: the SDK talks to moto through a proxy
//! that fails 20% of requests (503 SlowDown, 500, lost answers after the
//! write landed, connection resets, timeouts, 409 ConditionalRequestConflict).
//! No duplicate task, no lost acknowledged task, every error retryable.

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use common::chaos_proxy::ChaosProxy;
use idempotent_submit::store::S3Store;
use idempotent_submit::{Queue, RetryPolicy, Settings, SubmitError};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fifth_of_requests_failing_loses_and_doubles_nothing() {
    let direct = common::moto_store().await;
    let proxy = ChaosProxy::start(&common::moto_endpoint(), 200, 42).await;
    let settings = Settings {
        retry: RetryPolicy {
            max_attempts: 6,
            base_delay: Duration::from_millis(5),
            max_delay: Duration::from_millis(50),
            // Under the proxy's 3 s hold, so that holds become timeouts.
            attempt_timeout: Duration::from_millis(2500),
        },
        ..Settings::default()
    };
    let through_proxy = S3Store::for_endpoint(&proxy.endpoint, direct.bucket());
    let queue = Arc::new(Queue::new(through_proxy, settings.clone()));

    // 30 keys, 3 concurrent submits each, and a second round.
    let mut acknowledged: HashMap<usize, HashSet<uuid::Uuid>> = HashMap::new();
    let mut errors = 0;
    for _round in 0..2 {
        let mut handles = Vec::new();
        for k in 0..30 {
            for _ in 0..3 {
                let q = queue.clone();
                handles.push(tokio::spawn(async move {
                    (
                        k,
                        q.submit("chaos", json!({"k": k}))
                            .idempotency_key(format!("key-{k}"))
                            .await,
                    )
                }));
            }
        }
        for h in handles {
            let (k, r) = h.await.unwrap();
            match r {
                Ok(s) => {
                    acknowledged.entry(k).or_default().insert(s.task_id);
                }
                Err(e) => {
                    assert!(
                        e.is_retryable(),
                        "key {k}: a non-retryable error under transient faults: {e:?}"
                    );
                    assert!(!matches!(e, SubmitError::Conflict { .. }));
                    errors += 1;
                }
            }
        }
    }
    let faults = proxy
        .counts
        .faults
        .load(std::sync::atomic::Ordering::SeqCst);
    let forwarded = proxy
        .counts
        .forwarded
        .load(std::sync::atomic::Ordering::SeqCst);
    eprintln!(
        "chaos: {faults} faults injected, {forwarded} requests forwarded, {errors} submits failed retryably"
    );
    assert!(
        faults > 50,
        "the proxy injected too few faults to mean anything: {faults}"
    );

    // Every acknowledged submit of a key named one task.
    for (k, ids) in &acknowledged {
        assert_eq!(ids.len(), 1, "key {k} was answered with {ids:?}");
    }

    // Healed: every key answers, each with the task it was acknowledged with,
    // and the bucket holds one task per key.
    proxy.heal();
    let healthy = Queue::new(direct.clone(), Settings::default());
    for k in 0..30 {
        let s = healthy
            .submit("chaos", json!({"k": k}))
            .idempotency_key(format!("key-{k}"))
            .await
            .unwrap();
        if let Some(ids) = acknowledged.get(&k) {
            assert!(
                ids.contains(&s.task_id),
                "key {k}: acknowledged {ids:?}, now {}",
                s.task_id
            );
        }
        assert_ne!(
            s.status, "missing",
            "key {k}: an acknowledged task was lost"
        );
    }
    let keys = common::all_keys(&direct).await;
    assert_eq!(
        keys.iter().filter(|k| k.starts_with("tasks/")).count(),
        30,
        "one task per key"
    );
    assert_eq!(
        keys.iter()
            .filter(|k| k.starts_with("idempotency/"))
            .count(),
        30
    );
}
