//! The stack on a second S3 store, SeaweedFS (tests/common/seaweedfs.rs):
//! what the harness gives, and what the protocol needs of the store.

mod common;

use bytes::Bytes;
use idempotent_submit::store::{PutMode, S3Store, Store, StoreError};

/// Each test on an unversioned and on a versioned bucket.
macro_rules! on_both_buckets {
    ($name:ident) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn unversioned() {
                super::$name(super::common::Versioning::Off).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn versioned() {
                super::$name(super::common::Versioning::On).await;
            }
        }
    };
}

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
