//! The stack on a second S3 store, SeaweedFS (tests/common/seaweedfs.rs):
//! what the harness gives, and what the protocol needs of the store.

use crate::common;

use bytes::Bytes;
use idempotent_submit::store::{PutMode, S3Store, Store, StoreError};

#[tokio::test]
async fn the_seaweedfs_harness_serves_on_loopback_and_refuses_any_other_key() {
    let s = common::seaweedfs();
    assert!(
        s.endpoint.starts_with("http://127.0.0.1:"),
        "{}",
        s.endpoint
    );
    let store = common::seaweedfs_store().await;
    store
        .put("k", Bytes::from_static(b"1"), PutMode::Create)
        .await
        .unwrap();
    // The same bucket with moto's key pair, and with a wrong secret: 403,
    // which is no outcome the protocol retries.
    for (id, secret) in [("test", "test"), (s.access_key_id.as_str(), "wrong")] {
        let other = S3Store::for_endpoint_as(&s.endpoint, store.bucket(), id, secret);
        match other.get("k").await {
            Err(StoreError::Fatal(m)) => assert!(m.starts_with("403"), "{m}"),
            other => panic!("{other:?}"),
        }
    }
}

on_both_buckets!(a_seaweedfs_bucket_takes_conditional_writes_as_the_protocol_needs);
async fn a_seaweedfs_bucket_takes_conditional_writes_as_the_protocol_needs(
    versioning: common::Versioning,
) {
    let store = common::seaweedfs_store_with(versioning).await;
    let status = store
        .client()
        .get_bucket_versioning()
        .bucket(store.bucket())
        .send()
        .await
        .unwrap()
        .status
        .map(|s| s.as_str().to_owned());
    assert_eq!(
        status.as_deref(),
        (versioning == common::Versioning::On).then_some("Enabled")
    );
    let a = store
        .put("k", Bytes::from_static(b"1"), PutMode::Create)
        .await
        .unwrap();
    assert_eq!(
        store
            .put("k", Bytes::from_static(b"2"), PutMode::Create)
            .await,
        Err(StoreError::PreconditionFailed)
    );
    let b = store
        .put(
            "k",
            Bytes::from_static(b"3"),
            PutMode::Update(a.etag.clone()),
        )
        .await
        .unwrap();
    assert_eq!(
        store
            .put(
                "k",
                Bytes::from_static(b"4"),
                PutMode::Update(a.etag.clone())
            )
            .await,
        Err(StoreError::PreconditionFailed)
    );
    // A compare-and-swap on a missing key: SeaweedFS answers 412 where S3
    // answers 404; the protocol reads both as "not the record I read".
    assert_eq!(
        store
            .put(
                "gone",
                Bytes::from_static(b"5"),
                PutMode::Update(b.etag.clone())
            )
            .await,
        Err(StoreError::PreconditionFailed)
    );
    assert_eq!(store.get("gone").await.unwrap_err(), StoreError::NotFound);
    assert!(store.clock_offset().is_some(), "its answers carry a Date");
    let o = store.get("k").await.unwrap();
    assert_eq!((&o.body[..], &o.meta.etag), (&b"3"[..], &b.etag));
}

// ---- the proof on a store that sends no events: RECORD_EVENTS=submitter ----

/// Every crash point of a first submit after its record, on SeaweedFS with
/// its due messages sent by the submitter to moto's SQS: finished by the
/// drained due queue, with no submit of the key again, before the finish
/// deadline; then buquet's worker runs the task once. The queue is drained
/// by `idem sweep --due-queue` as an operator (or `make run`) drains it,
/// with the bucket's key pair in a secret (moto's Secrets Manager) that
/// only its S3 client uses: SQS and Secrets Manager take moto's key.
async fn finished_on_seaweedfs_by_the_submitters_message(point: common::due::CrashPoint) {
    use common::due::{BuquetAt, Mode, STALE_SECONDS};
    let sw = common::seaweedfs();
    let store = common::seaweedfs_store_versioned().await;
    let bucket = store.bucket().to_owned();
    let url = common::moto_queue(&format!("due-{bucket}"), STALE_SECONDS).await;
    common::due::interrupted_submit(&store, point, Mode::Submitter, &url, "first").await;
    let (tasks, markers, task_id) = common::due::holdings(&store).await;
    assert_eq!(
        tasks.len() + markers.len(),
        usize::from(point != common::due::CrashPoint::AfterRecord)
    );

    let secret = common::moto_secret(
        &format!("keys-{bucket}"),
        &serde_json::json!({
            "access_key_id": sw.access_key_id,
            "secret_access_key": sw.secret_access_key,
        })
        .to_string(),
    )
    .await;
    let stale = STALE_SECONDS.to_string();
    let env = [
        ("AWS_ENDPOINT_URL_S3", sw.endpoint.as_str()),
        ("S3_CREDENTIALS_SECRET", secret.as_str()),
        ("STALE_CREATING_AFTER_SECONDS", stale.as_str()),
        ("RECORD_EVENTS", "submitter"),
        ("DUE_QUEUE_URL", url.as_str()),
    ];
    let mut finished = 0;
    let end = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while finished == 0 && std::time::Instant::now() < end {
        let (code, out) = common::idem(&bucket, &env, &["sweep", "--due-queue", &url]).await;
        assert_eq!(code, 0, "{out}");
        // Nothing handed back (early) or failed.
        assert_eq!(
            (out["errors"].as_u64(), out["retried"].as_u64()),
            (Some(0), Some(0)),
            "{out}"
        );
        finished = out["finished"].as_u64().unwrap_or(0);
        if finished == 0 {
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
    }
    assert_eq!(finished, 1, "{point:?}");
    let (tasks, markers, _) = common::due::holdings(&store).await;
    assert_eq!((tasks.len(), markers.len()), (1, 1), "{point:?}");

    let at = BuquetAt {
        endpoint: &sw.endpoint,
        bucket: &bucket,
        access_key_id: &sw.access_key_id,
        secret_access_key: &sw.secret_access_key,
    };
    common::due::buquet_runs_once(&at, &task_id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_seaweedfs_a_submit_that_died_after_its_record_is_finished_by_its_message_and_run_once()
{
    finished_on_seaweedfs_by_the_submitters_message(common::due::CrashPoint::AfterRecord).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_seaweedfs_a_submit_that_died_after_its_task_is_finished_by_its_message_and_run_once() {
    finished_on_seaweedfs_by_the_submitters_message(common::due::CrashPoint::AfterTask).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_seaweedfs_a_submit_whose_task_put_was_lost_is_finished_by_its_message_and_run_once() {
    finished_on_seaweedfs_by_the_submitters_message(common::due::CrashPoint::TaskLost).await;
}
