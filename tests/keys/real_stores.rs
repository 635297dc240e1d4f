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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_s3_and_seaweedfs_a_reset_of_a_record_whose_submit_died_before_its_marker_leaves_the_task_to_buquets_worker_by_its_marker()
 {
    use common::due::{BuquetAt, CrashPoint, buquet_runs_once, holdings};
    let (moto, sw) = (common::moto_endpoint(), common::seaweedfs());
    let stores = [
        (
            common::moto_store_versioned().await,
            (moto.as_str(), "test", "test"),
        ),
        (
            common::seaweedfs_store_versioned().await,
            (&sw.endpoint, &sw.access_key_id, &sw.secret_access_key),
        ),
    ];
    for (store, (endpoint, access_key_id, secret_access_key)) in stores {
        let bucket = store.bucket().to_owned();
        // The submit's task landed; its marker never did, and it died.
        let dying = CrashPoint::AfterTask.in_front_of(store.clone());
        let q = idempotent_submit::Queue::new(dying, common::settings());
        let died = q.submit("remind", json!({"n": 1})).idempotency_key("k");
        died.await.unwrap_err();
        let (tasks, markers, task_id) = holdings(&store).await;
        assert_eq!((tasks.len(), markers.len()), (1, 0), "{bucket}");
        let q = idempotent_submit::Queue::new(store.clone(), common::settings());
        let Reset::Done { old_task_id } = q.reset_key("remind", "k", None).await.unwrap() else {
            panic!("{bucket}: the reset did not go ahead");
        };
        assert_eq!(old_task_id.to_string(), task_id);
        // No finisher can write the marker once the reset record is there:
        // the reset wrote it first.
        let (tasks, markers, _) = holdings(&store).await;
        assert_eq!((tasks.len(), markers.len()), (1, 1), "{bucket}");
        assert!(markers[0].ends_with(&task_id), "{bucket}: {markers:?}");
        // buquet's worker runs the task once and deletes its marker on the
        // claim: the ready index holds nothing stale.
        let at = BuquetAt {
            endpoint,
            bucket: &bucket,
            access_key_id,
            secret_access_key,
        };
        buquet_runs_once(&at, &task_id);
        assert_eq!(
            common::keys_under(&store, "ready/").await,
            Vec::<String>::new()
        );
    }
}
