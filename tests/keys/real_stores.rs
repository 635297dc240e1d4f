use super::*;

// ---- against moto and SeaweedFS: S3's own PUT If-Match, and `idem key --reset` ----

/// A test world's operating conditions, as TESTING_OPERATING_CONDITIONS
/// sets them for the built `idem`: a submit's operation ends within 1 s and
/// a late write lands within 1 s, so that a record's own submit is done 2 s
/// after it (AWS's: 25 s + 15 min).
const SHORT_SUBMITS: &str = "late_write=1,operation_timeout=1";

fn short_submits() -> idempotent_submit::Settings {
    idempotent_submit::Settings {
        operation_timeout: Duration::seconds(1),
        late_write_margin: Duration::seconds(1),
        ..common::settings()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_s3_and_seaweedfs_a_reset_answered_at_once_lets_the_next_submit_make_a_new_task_and_a_late_put_of_the_old_claim_changes_nothing()
 {
    for store in common::real_buckets().await {
        let bucket = store.bucket().to_owned();
        let q = idempotent_submit::Queue::new(store.clone(), short_submits());
        let first = q.submit("t", json!(1)).idempotency_key("k").await.unwrap();
        let (rkey, old_claim) = record_bytes(&store, "k").await;
        // At once, while the record's own submit could still send its PUT.
        let Reset::Done { old_task_id } = q.reset_key("t", "k", None).await.unwrap() else {
            panic!("{bucket}: the reset did not go ahead");
        };
        assert_eq!(old_task_id, first.task_id);
        assert_eq!(q.lookup_key("t", "k", None).await.unwrap(), None);
        let second = q.submit("t", json!(2)).idempotency_key("k").await.unwrap();
        assert!(!second.replayed && second.task_id != first.task_id);
        assert!(
            store.get(&first.task_key).await.is_ok(),
            "{bucket}: the old task stays"
        );
        let view = q.lookup_key("t", "k", None).await.unwrap().unwrap();
        assert_eq!(view.task_id, second.task_id);
        late_old_claim_changes_nothing(&store, &q, &rkey, old_claim, &second, &bucket).await;
        assert_eq!(
            q.reset_key("t", "nope", None).await.unwrap(),
            Reset::NotFound
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idem_key_reset_exits_0_when_reset_4_when_not_found_and_1_while_in_progress() {
    let store = common::moto_store().await;
    let bucket = store.bucket().to_owned();
    let q = idempotent_submit::Queue::new(store.clone(), common::settings());
    let done = common::submit_key(&q, "done").await;
    // A submit that died right after its record: in flight, no task yet.
    common::world::died_after_record(store.clone(), "dying").await;
    let reset = |key: &'static str| {
        let bucket = bucket.clone();
        async move {
            common::idem(
                &bucket,
                &[("TESTING_OPERATING_CONDITIONS", SHORT_SUBMITS)],
                &["key", "--scope", "t", "--key", key, "--reset"],
            )
            .await
        }
    };
    // At once: its task is there.
    let (code, out) = reset("done").await;
    assert_eq!(code, 0, "{out}");
    assert_eq!(out["old_task_id"], done.task_id.to_string());
    let (code, out) = reset("done").await;
    assert_eq!(
        (code, out["error"].as_str()),
        (4, Some("not_found")),
        "{out}"
    );
    let (code, out) = reset("dying").await;
    assert_eq!(
        (code, out["error"].as_str()),
        (1, Some("submit_in_progress")),
        "{out}"
    );
    assert!(out["retry_after_seconds"].as_u64().unwrap() >= 1, "{out}");
    assert!(q.lookup_key("t", "dying", None).await.unwrap().is_some());
}
