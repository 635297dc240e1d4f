//! One conformance suite, run on the in-memory store and on moto, each
//! unversioned and versioned: every
//! conditional outcome (writes, deletes, the conditional GET), and races that assert exact counts.

use crate::common;

use std::sync::Arc;

use bytes::Bytes;
use idempotent_submit::store::{ETag, PutMode, Store, StoreError};

async fn create_succeeds_once_then_answers_412(s: Arc<dyn Store>) {
    let a = s
        .put("k", Bytes::from_static(b"1"), PutMode::Create)
        .await
        .unwrap();
    assert_eq!(
        s.put("k", Bytes::from_static(b"2"), PutMode::Create).await,
        Err(StoreError::PreconditionFailed)
    );
    let o = s.get("k").await.unwrap();
    assert_eq!(&o.body[..], b"1");
    assert_eq!(o.meta.etag, a.etag);
}

async fn update_needs_the_current_etag(s: Arc<dyn Store>) {
    let a = s
        .put("k", Bytes::from_static(b"1"), PutMode::Create)
        .await
        .unwrap();
    let b = s
        .put(
            "k",
            Bytes::from_static(b"2"),
            PutMode::Update(a.etag.clone()),
        )
        .await
        .unwrap();
    assert_ne!(a.etag, b.etag, "a new content has a new ETag");
    // The old ETag is stale now: 412, and nothing changes.
    assert_eq!(
        s.put("k", Bytes::from_static(b"3"), PutMode::Update(a.etag))
            .await,
        Err(StoreError::PreconditionFailed)
    );
    assert_eq!(&s.get("k").await.unwrap().body[..], b"2");
    assert_eq!(s.head("k").await.unwrap().etag, b.etag);
}

async fn update_of_a_missing_key_is_404(s: Arc<dyn Store>) {
    let e = ETag("\"0123456789abcdef0123456789abcdef\"".into());
    assert_eq!(
        s.put("nope", Bytes::from_static(b"1"), PutMode::Update(e))
            .await,
        Err(StoreError::NotFound)
    );
    assert_eq!(s.head("nope").await, Err(StoreError::NotFound));
}

async fn same_bytes_give_the_same_etag(s: Arc<dyn Store>) {
    let a = s
        .put("k1", Bytes::from_static(b"same"), PutMode::Overwrite)
        .await
        .unwrap();
    let b = s
        .put("k2", Bytes::from_static(b"same"), PutMode::Overwrite)
        .await
        .unwrap();
    assert_eq!(a.etag, b.etag, "ETags are content-derived, as in S3");
}

async fn get_and_head_of_a_missing_key_are_404(s: Arc<dyn Store>) {
    assert_eq!(s.get("missing").await.err(), Some(StoreError::NotFound));
    assert_eq!(s.head("missing").await, Err(StoreError::NotFound));
}

async fn get_returns_body_etag_and_last_modified(s: Arc<dyn Store>) {
    let p = s
        .put("a/b.json", Bytes::from_static(b"{}"), PutMode::Overwrite)
        .await
        .unwrap();
    let o = s.get("a/b.json").await.unwrap();
    assert_eq!(&o.body[..], b"{}");
    assert_eq!(o.meta.etag, p.etag);
    assert_eq!(o.meta.size, 2);
    assert!(o.meta.last_modified.timestamp() > 1_700_000_000);
    assert_eq!(
        o.meta.last_modified.timestamp_subsec_nanos(),
        0,
        "whole seconds"
    );
}

async fn conditional_delete_checks_the_etag(s: Arc<dyn Store>) {
    let a = s
        .put("k", Bytes::from_static(b"1"), PutMode::Create)
        .await
        .unwrap();
    let b = s
        .put(
            "k",
            Bytes::from_static(b"2"),
            PutMode::Update(a.etag.clone()),
        )
        .await
        .unwrap();
    assert_eq!(
        s.delete("k", Some(&a.etag)).await,
        Err(StoreError::PreconditionFailed)
    );
    assert!(
        s.head("k").await.is_ok(),
        "a stale delete leaves the object"
    );
    s.delete("k", Some(&b.etag)).await.unwrap();
    assert_eq!(s.head("k").await, Err(StoreError::NotFound));
}

/// On a versioned bucket the delete leaves a delete marker as the current
/// version: every answer below is the same as on an unversioned one.
async fn a_deleted_key_is_gone_to_every_call_and_can_be_created_again(s: Arc<dyn Store>) {
    let a = s
        .put("d/k", Bytes::from_static(b"1"), PutMode::Create)
        .await
        .unwrap();
    s.delete("d/k", Some(&a.etag)).await.unwrap();
    assert_eq!(s.get("d/k").await.map(|_| ()), Err(StoreError::NotFound));
    assert_eq!(s.head("d/k").await.map(|_| ()), Err(StoreError::NotFound));
    assert_eq!(
        s.put(
            "d/k",
            Bytes::from_static(b"2"),
            PutMode::Update(a.etag.clone())
        )
        .await
        .map(|_| ()),
        Err(StoreError::NotFound),
        "If-Match on a deleted key is a 404"
    );
    assert_eq!(
        s.delete("d/k", Some(&a.etag)).await,
        Err(StoreError::NotFound),
        "a conditional delete of a deleted key is a 404"
    );
    let listed = s.list("d/", None, None, 10).await.unwrap();
    assert!(listed.objects.is_empty(), "{:?}", listed.objects);
    let b = s
        .put("d/k", Bytes::from_static(b"1"), PutMode::Create)
        .await
        .expect("If-None-Match: * succeeds over a deleted key");
    assert_eq!(b.etag, a.etag, "the same bytes, the same ETag");
    assert_eq!(&s.get("d/k").await.unwrap().body[..], b"1");
    let listed = s.list("d/", None, None, 10).await.unwrap();
    assert_eq!(listed.objects.len(), 1);
}

async fn a_conditional_get_is_304_while_the_etag_holds_and_the_object_once_it_changed(
    s: Arc<dyn Store>,
) {
    let a = s
        .put("s/k.json", Bytes::from_static(b"1"), PutMode::Overwrite)
        .await
        .unwrap();
    assert_eq!(
        s.get_if_none_match("s/k.json", &a.etag).await.err(),
        Some(StoreError::NotModified),
        "the same ETag: 304, no body"
    );
    let b = s
        .put("s/k.json", Bytes::from_static(b"22"), PutMode::Overwrite)
        .await
        .unwrap();
    let o = s.get_if_none_match("s/k.json", &a.etag).await.unwrap();
    assert_eq!(&o.body[..], b"22");
    assert_eq!(o.meta.etag, b.etag);
    assert_eq!(o.meta.size, 2);
    assert_eq!(
        s.get_if_none_match("s/k.json", &b.etag).await.err(),
        Some(StoreError::NotModified)
    );
    s.delete("s/k.json", None).await.unwrap();
    assert_eq!(
        s.get_if_none_match("s/k.json", &b.etag).await.err(),
        Some(StoreError::NotFound),
        "gone: 404, whatever the ETag"
    );
    assert_eq!(
        s.get_if_none_match("s/never.json", &a.etag).await.err(),
        Some(StoreError::NotFound)
    );
}

async fn unconditional_delete_of_a_missing_key_succeeds(s: Arc<dyn Store>) {
    s.delete("never-there", None).await.unwrap();
}

async fn listing_pages_in_key_order_under_a_prefix(s: Arc<dyn Store>) {
    for i in (0..7).rev() {
        s.put(&format!("p/{i}"), Bytes::new(), PutMode::Overwrite)
            .await
            .unwrap();
    }
    s.put("q/0", Bytes::new(), PutMode::Overwrite)
        .await
        .unwrap();
    s.put("o/0", Bytes::new(), PutMode::Overwrite)
        .await
        .unwrap();
    let mut keys = Vec::new();
    let mut page = None;
    let mut pages = 0;
    loop {
        let p = s.list("p/", None, page, 3).await.unwrap();
        assert!(p.objects.len() <= 3);
        keys.extend(p.objects.into_iter().map(|o| o.key));
        pages += 1;
        match p.next {
            Some(n) => page = Some(n),
            None => break,
        }
    }
    assert_eq!(keys, (0..7).map(|i| format!("p/{i}")).collect::<Vec<_>>());
    assert_eq!(pages, 3);
    let after = s.list("p/", Some("p/4"), None, 100).await.unwrap();
    let after: Vec<_> = after.objects.into_iter().map(|o| o.key).collect();
    assert_eq!(after, vec!["p/5", "p/6"]);
}

async fn exactly_one_of_32_racing_creates_wins(s: Arc<dyn Store>) {
    let mut tasks = Vec::new();
    for i in 0..32 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            s.put("race", Bytes::from(format!("{i}")), PutMode::Create)
                .await
        }));
    }
    let mut wins = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(_) => wins += 1,
            // 409 is S3's way to say "another conditional write was in flight".
            Err(StoreError::PreconditionFailed | StoreError::Conflict) => {}
            Err(e) => panic!("unexpected {e:?}"),
        }
    }
    assert_eq!(wins, 1);
}

async fn sixteen_racing_cas_increments_count_exactly(s: Arc<dyn Store>) {
    s.put("n", Bytes::from_static(b"0"), PutMode::Create)
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            let mut tries = 0;
            loop {
                tries += 1;
                assert!(tries < 1000, "livelock");
                let o = s.get("n").await.unwrap();
                let n: u64 = std::str::from_utf8(&o.body).unwrap().parse().unwrap();
                let next = Bytes::from((n + 1).to_string());
                match s.put("n", next, PutMode::Update(o.meta.etag)).await {
                    Ok(_) => return,
                    Err(StoreError::PreconditionFailed | StoreError::Conflict) => continue,
                    Err(e) => panic!("unexpected {e:?}"),
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(&s.get("n").await.unwrap().body[..], b"16");
}

/// Every test on four buckets: in memory and on moto, each unversioned and
/// versioned.
macro_rules! suite {
    ($($name:ident),* $(,)?) => {
        suite!(@memory memory, memory_store, $($name),*);
        suite!(@memory memory_versioned, memory_store_versioned, $($name),*);
        suite!(@moto moto, Off, $($name),*);
        suite!(@moto moto_versioned, On, $($name),*);
    };
    (@memory $module:ident, $store:ident, $($name:ident),*) => {
        mod $module {
            use super::*;
            $(
                #[tokio::test]
                async fn $name() {
                    let clock = idempotent_submit::ManualClock::at_epoch();
                    super::$name(Arc::new(common::$store(&clock))).await;
                }
            )*
        }
    };
    (@moto $module:ident, $versioning:ident, $($name:ident),*) => {
        mod $module {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    super::$name(Arc::new(
                        common::moto_store_with(common::Versioning::$versioning).await,
                    ))
                    .await;
                }
            )*
        }
    };
}

suite!(
    create_succeeds_once_then_answers_412,
    update_needs_the_current_etag,
    update_of_a_missing_key_is_404,
    same_bytes_give_the_same_etag,
    get_and_head_of_a_missing_key_are_404,
    get_returns_body_etag_and_last_modified,
    conditional_delete_checks_the_etag,
    a_conditional_get_is_304_while_the_etag_holds_and_the_object_once_it_changed,
    a_deleted_key_is_gone_to_every_call_and_can_be_created_again,
    unconditional_delete_of_a_missing_key_succeeds,
    listing_pages_in_key_order_under_a_prefix,
    exactly_one_of_32_racing_creates_wins,
    sixteen_racing_cas_increments_count_exactly,
);
