//! The protocol on a versioned bucket (README, "The bucket",
//! "Versioning and lifecycle"), in memory and
//! on moto (and SeaweedFS): what a delete leaves behind, and that nothing of
//! it is seen.

use crate::common;

use std::sync::Arc;

use chrono::Duration;
use idempotent_submit::store::{FaultyStore, MemoryStore, PutMode, S3Store, Store, Version};
use idempotent_submit::testing::intake::due::{DueMessage, handle_messages};
use idempotent_submit::testing::protocol::SweepOptions;
use idempotent_submit::{ClockCheck, ManualClock, Queue, Settings};
use serde_json::json;

/// A versioned bucket and a way to see its versions.
enum Bucket {
    Memory(MemoryStore),
    Moto(S3Store),
}

impl Bucket {
    fn store(&self) -> Arc<dyn Store> {
        match self {
            Bucket::Memory(m) => Arc::new(m.clone()),
            Bucket::Moto(s) => Arc::new(s.clone()),
        }
    }

    /// (versions that are objects, delete markers, whether the current
    /// version is a delete marker) of `key`.
    async fn versions(&self, key: &str) -> common::KeyVersions {
        match self {
            Bucket::Memory(m) => {
                let v = m.versions(key);
                common::KeyVersions {
                    objects: v.iter().filter(|v| matches!(v, Version::Object(_))).count(),
                    delete_markers: v.iter().filter(|v| **v == Version::DeleteMarker).count(),
                    latest_is_delete_marker: v.last() == Some(&Version::DeleteMarker),
                }
            }
            Bucket::Moto(s) => common::moto_versions(s, key).await,
        }
    }
}

async fn an_expired_record_deleted_by_the_sweeper_leaves_a_delete_marker_that_no_pass_lists_and_a_new_submit_creates_over(
    bucket: Bucket,
    clock: ManualClock,
) {
    let settings = Settings {
        // moto's clock is the real one; the injected clock stands for it.
        clock_check: ClockCheck::TrustClock,
        ..common::settings()
    };
    let queue = Queue::with_clock(bucket.store(), Arc::new(clock.clone()), settings);
    let first = queue
        .submit("t", json!({"n": 1}))
        .idempotency_key("k")
        .idempotency_ttl(Duration::hours(1))
        .await
        .unwrap();
    let all = common::all_keys(&*bucket.store()).await;
    let rkey = common::first_under(all, "idempotency/");
    assert_eq!(bucket.versions(&rkey).await.objects, 1);

    // Expired (and old enough for the pass to read it): the daily pass
    // deletes it with If-Match.
    clock.advance(Duration::days(31));
    let opts = SweepOptions::default();
    let s = queue.engine().sweep(&opts).await.unwrap();
    assert_eq!((s.scanned, s.expired_deleted, s.errors), (1, 1, 0), "{s:?}");
    let v = bucket.versions(&rkey).await;
    assert_eq!(
        v,
        common::KeyVersions {
            objects: 1,
            delete_markers: 1,
            latest_is_delete_marker: true
        },
        "the delete left the record as a noncurrent version under a delete marker"
    );
    assert_eq!(
        bucket.store().get(&rkey).await.map(|_| ()),
        Err(idempotent_submit::StoreError::NotFound)
    );

    // The next pass lists nothing: the delete marker is not an object.
    clock.advance(Duration::days(1));
    let s = queue.engine().sweep(&opts).await.unwrap();
    assert_eq!((s.scanned, s.expired_deleted, s.errors), (0, 0, 0), "{s:?}");

    // The key is free: a new submit creates a new record (If-None-Match
    // over the delete marker) and a new task.
    let second = queue
        .submit("t", json!({"n": 1}))
        .idempotency_key("k")
        .await
        .unwrap();
    assert!(!second.replayed);
    assert_ne!(second.task_id, first.task_id);
    let (rec, _) = queue.record("t", "k", None).await.unwrap().unwrap();
    assert_eq!(rec.task_id, second.task_id);
    assert_eq!(
        bucket.versions(&rkey).await,
        common::KeyVersions {
            objects: 2,
            delete_markers: 1,
            latest_is_delete_marker: false
        }
    );
    let replay = queue
        .submit("t", json!({"n": 1}))
        .idempotency_key("k")
        .await
        .unwrap();
    assert_eq!((replay.replayed, replay.task_id), (true, second.task_id));
}

#[tokio::test]
async fn in_memory_an_expired_record_deleted_by_the_sweeper_leaves_a_delete_marker_that_no_pass_lists_and_a_new_submit_creates_over()
 {
    let clock = ManualClock::at_epoch();
    let bucket = Bucket::Memory(common::memory_store_versioned(&clock));
    an_expired_record_deleted_by_the_sweeper_leaves_a_delete_marker_that_no_pass_lists_and_a_new_submit_creates_over(bucket, clock).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_moto_an_expired_record_deleted_by_the_sweeper_leaves_a_delete_marker_that_no_pass_lists_and_a_new_submit_creates_over()
 {
    let clock = ManualClock::new(chrono::Utc::now());
    let bucket = Bucket::Moto(common::moto_store_versioned().await);
    an_expired_record_deleted_by_the_sweeper_leaves_a_delete_marker_that_no_pass_lists_and_a_new_submit_creates_over(bucket, clock).await;
}

#[tokio::test]
async fn an_unversioned_memory_bucket_keeps_no_versions_and_a_versioned_one_marks_every_delete() {
    let clock = ManualClock::at_epoch();
    let plain = common::memory_store(&clock);
    let versioned = common::memory_store_versioned(&clock);
    for s in [&plain, &versioned] {
        s.put("k", bytes::Bytes::from_static(b"1"), PutMode::Overwrite)
            .await
            .unwrap();
        s.delete("k", None).await.unwrap();
        // S3 adds a delete marker even where there was no object.
        s.delete("never", None).await.unwrap();
    }
    assert!(plain.versions("k").is_empty() && plain.delete_markers().is_empty());
    assert_eq!(versioned.delete_markers(), ["k", "never"]);
    assert_eq!(versioned.versions("k").len(), 2);
    assert_eq!(plain.snapshot(), versioned.snapshot());
}

/// The body S3 sends when a delete on a versioned bucket created a delete
/// marker, had the notification asked for `s3:ObjectRemoved:*`.
fn delete_marker_event(bucket: &str, key: &str) -> String {
    let object = json!({"sequencer": "0055AED6DCD90281E5", "versionId": "3HL4kqtJvjVBH40Nrjfkd"});
    let name = "ObjectRemoved:DeleteMarkerCreated";
    common::events::s3_notification(bucket, key, name, object)
}

#[tokio::test]
async fn a_delete_marker_event_is_acknowledged_without_a_read() {
    let clock = ManualClock::at_epoch();
    let bucket = common::memory_store_versioned(&clock);
    let queue = Queue::with_clock(bucket.clone(), Arc::new(clock.clone()), common::settings());
    common::submit_key(&queue, "k").await;
    let rkey = common::first_under(bucket.keys(), "idempotency/");
    clock.advance(Duration::hours(1));
    let f = FaultyStore::new(bucket.clone());
    let q = Queue::with_clock(f.clone(), Arc::new(clock.clone()), common::settings());
    let m = [DueMessage {
        id: "m1".into(),
        body: delete_marker_event("queue-bucket", &rkey),
    }];
    let b = handle_messages(&q, "queue-bucket", &m, false, None).await;
    assert!(b.retry.is_empty(), "{:?}", b.retry);
    assert_eq!((b.summary.ignored, b.summary.scanned), (1, 0));
    assert!(f.calls().is_empty(), "{:?}", f.calls());
}

/// `CONDITIONAL_DELETE=off` on a versioned bucket: a key with a history (a
/// failed task's record, the record of its replacement, that record's reset
/// record) is swept with version deletes, the versions beneath first and the
/// reset record last, and nothing of the history is left: no version, no
/// record current again, the key free. On the store's own ListObjectVersions
/// and `DELETE ?versionId=`.
async fn with_conditional_delete_off_a_reset_key_with_a_failed_task_beneath_leaves_no_version(
    store: Arc<dyn Store>,
    clock: ManualClock,
) {
    use idempotent_submit::testing::protocol::RecordOutcome;
    use idempotent_submit::{IfTaskFailed, Reset};
    let settings = Settings {
        clock_check: ClockCheck::TrustClock,
        conditional_delete: false,
        ..common::settings()
    };
    let queue = Queue::with_clock(store.clone(), Arc::new(clock.clone()), settings.clone());
    let first = common::submit_key(&queue, "k").await;
    common::end_task(&store, &first.task_key, "failed").await;
    let new = queue
        .submit("t", json!(2))
        .idempotency_key("k")
        .idempotency_ttl(Duration::hours(1))
        .if_task_failed(IfTaskFailed::NewTask)
        .await
        .unwrap();
    assert_eq!(new.replaces_task_id, Some(first.task_id));
    assert!(matches!(
        queue.reset_key("t", "k", None).await.unwrap(),
        Reset::Done { .. }
    ));
    let rkey = common::first_under(common::all_keys(&*store).await, "idempotency/");
    // Three versions: the failed task's record, its replacement, the reset.
    let versions = store.list_versions(&rkey).await.unwrap();
    assert_eq!(versions.len(), 3, "{versions:?}");

    clock.advance(settings.operation_timeout + settings.late_write_margin);
    let swept = queue.engine().sweep_record(&rkey, false, None).await;
    assert!(matches!(swept, RecordOutcome::ExpiredDeleted), "{swept:?}");
    assert_eq!(store.list_versions(&rkey).await.unwrap(), Vec::new());
    assert_eq!(
        store.get(&rkey).await.map(|_| ()),
        Err(idempotent_submit::StoreError::NotFound)
    );
    assert_eq!(queue.lookup_key("t", "k", None).await.unwrap(), None);
    let next = queue
        .submit("t", json!(3))
        .idempotency_key("k")
        .await
        .unwrap();
    assert!(next.created());
    assert_eq!(next.replaces_task_id, None);
}

#[tokio::test]
async fn in_memory_with_conditional_delete_off_a_reset_key_with_a_failed_task_beneath_leaves_no_version()
 {
    let clock = ManualClock::at_epoch();
    let store = common::memory_store_versioned(&clock)
        .with_behaviour(idempotent_submit::store::Behaviour::minio());
    with_conditional_delete_off_a_reset_key_with_a_failed_task_beneath_leaves_no_version(
        Arc::new(store),
        clock,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_moto_with_conditional_delete_off_a_reset_key_with_a_failed_task_beneath_leaves_no_version()
 {
    with_conditional_delete_off_a_reset_key_with_a_failed_task_beneath_leaves_no_version(
        Arc::new(common::moto_store_versioned().await),
        ManualClock::new(chrono::Utc::now()),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_seaweedfs_with_conditional_delete_off_a_reset_key_with_a_failed_task_beneath_leaves_no_version()
 {
    with_conditional_delete_off_a_reset_key_with_a_failed_task_beneath_leaves_no_version(
        Arc::new(common::seaweedfs_store_with(common::Versioning::On).await),
        ManualClock::new(chrono::Utc::now()),
    )
    .await;
}
