//! Concurrent submits of one key against moto: one task per key, one answer.

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use idempotent_submit::{Queue, Settings};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_concurrent_submits_of_each_of_20_keys_make_exactly_20_tasks() {
    let store = common::moto_store().await;
    // Real backoff and attempt timeouts: moto under this load is slow.
    let queue = Arc::new(Queue::new(store.clone(), Settings::default()));
    let mut answers: HashMap<usize, Vec<uuid::Uuid>> = HashMap::new();
    let mut created = HashMap::<usize, usize>::new();
    // One key at a time, 64 submits of it in flight (moto serves one
    // request at a time; more in flight only overflows its listen queue).
    for k in 0..20 {
        let mut handles = Vec::new();
        for _ in 0..64 {
            let q = queue.clone();
            handles.push(tokio::spawn(async move {
                let r = q
                    .submit("race", json!({"key": k}))
                    .idempotency_key(format!("key-{k}"))
                    .await;
                (k, r)
            }));
        }
        for h in handles {
            let (k, r) = h.await.unwrap();
            let r = r.unwrap_or_else(|e| panic!("key {k}: {e}"));
            answers.entry(k).or_default().push(r.task_id);
            if r.created() {
                *created.entry(k).or_default() += 1;
            }
        }
    }
    assert_eq!(answers.len(), 20);
    for (k, ids) in &answers {
        assert_eq!(ids.len(), 64);
        let distinct: HashSet<_> = ids.iter().collect();
        assert_eq!(distinct.len(), 1, "key {k} got {} task ids", distinct.len());
        assert_eq!(created.get(k), Some(&1), "key {k}: exactly one 201");
    }
    let keys = common::all_keys(&store).await;
    assert_eq!(keys.iter().filter(|k| k.starts_with("tasks/")).count(), 20);
    assert_eq!(keys.iter().filter(|k| k.starts_with("ready/")).count(), 20);
    assert_eq!(
        keys.iter()
            .filter(|k| k.starts_with("idempotency/"))
            .count(),
        20
    );
    let task_ids: HashSet<String> = keys
        .iter()
        .filter(|k| k.starts_with("tasks/"))
        .map(|k| {
            k.rsplit('/')
                .next()
                .unwrap()
                .trim_end_matches(".json")
                .to_owned()
        })
        .collect();
    for ids in answers.values() {
        assert!(task_ids.contains(&ids[0].to_string()));
    }
}
