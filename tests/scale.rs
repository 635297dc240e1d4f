//! The synthetic bucket of `BENCH_ONLY=scale` keeps S3's semantics on a
//! small range (pagination, byte order, a store's own order, conditional
//! deletes, 404 after a delete), and the scale bench's day pass
//! (benches/bench/scale_model.rs) runs small: complete, every expired
//! record and every orphan owed deleted, nothing else written. No timing
//! is asserted.

use std::collections::BTreeSet;
use std::time::Duration as StdDuration;

use chrono::{DateTime, Utc};
use idempotent_submit::ListOrder;
use idempotent_submit::store::{ETag, PutMode, Store, StoreError};
use idempotent_submit::testing::synthetic::{Bodies, Family, Shape, SyntheticStore};

#[path = "../benches/bench/scale_model.rs"]
#[allow(dead_code)]
mod scale_model;

fn small() -> Shape {
    Shape {
        live: 6_000,
        scopes: 3,
        zipf: 1.0,
        payload_every: 10,
        orphan_every: 50,
    }
}

async fn bucket(order: ListOrder) -> SyntheticStore {
    let at = DateTime::<Utc>::from_timestamp(1_772_334_000, 0).unwrap();
    let bodies = Bodies::from_a_submit().await;
    SyntheticStore::new(small(), at, order, StdDuration::ZERO, bodies)
}

/// Every key under `prefix`, page by page, and the pages' sizes.
async fn list_all(s: &SyntheticStore, prefix: &str) -> (Vec<String>, Vec<usize>) {
    let (mut keys, mut pages, mut token) = (Vec::new(), Vec::new(), None);
    loop {
        let p = s.list(prefix, None, token, 1000).await.unwrap();
        pages.push(p.objects.len());
        keys.extend(p.objects.into_iter().map(|o| o.key));
        match p.next {
            Some(n) => token = Some(n),
            None => return (keys, pages),
        }
    }
}

#[tokio::test]
async fn a_synthetic_bucket_lists_in_byte_order_page_by_page_from_any_key() {
    let s = bucket(ListOrder::Bytes).await;
    let (keys, pages) = list_all(&s, "idempotency/").await;
    let all: u64 = s.layout().counts.iter().sum();
    assert_eq!(keys.len() as u64, all);
    assert!(
        keys.windows(2).all(|w| w[0] < w[1]),
        "in byte order, once each"
    );
    assert!(pages.iter().rev().skip(1).all(|n| *n == 1000), "{pages:?}");
    // StartAfter: the keys past it, wherever it falls.
    let mid = &keys[keys.len() / 2];
    let after = s.list("idempotency/", Some(mid), None, 5).await.unwrap();
    let got: Vec<&str> = after.objects.iter().map(|o| o.key.as_str()).collect();
    let want: Vec<&str> = keys[keys.len() / 2 + 1..][..5]
        .iter()
        .map(|k| k.as_str())
        .collect();
    assert_eq!(got, want);
    // A prefix inside a family.
    let (tasks_a, _) = list_all(&s, "tasks/a/").await;
    assert!(!tasks_a.is_empty() && tasks_a.iter().all(|k| k.starts_with("tasks/a/")));
    let dirs = s.list_dirs("tasks/", None).await.unwrap();
    assert_eq!(dirs.prefixes.len(), 16, "{dirs:?}");
    let scopes = s.list_dirs("idempotency/", None).await.unwrap();
    assert_eq!(
        scopes.prefixes,
        vec![
            "idempotency/type_00000/",
            "idempotency/type_00001/",
            "idempotency/type_00002/"
        ]
    );
}

#[tokio::test]
async fn a_synthetic_bucket_deletes_by_etag_and_then_answers_404() {
    let s = bucket(ListOrder::Bytes).await;
    let key = s.layout().key(Family::Records(1), 30);
    let meta = s.head(&key).await.unwrap();
    assert_eq!(
        s.delete(&key, Some(&ETag("\"other\"".into()))).await,
        Err(StoreError::PreconditionFailed)
    );
    s.delete(&key, Some(&meta.etag)).await.unwrap();
    assert_eq!(s.head(&key).await, Err(StoreError::NotFound));
    assert!(matches!(s.get(&key).await, Err(StoreError::NotFound)));
    assert_eq!(
        s.delete(&key, Some(&meta.etag)).await,
        Err(StoreError::NotFound)
    );
    assert_eq!(s.delete(&key, None).await, Ok(()));
    let (keys, _) = list_all(&s, "idempotency/type_00001/").await;
    assert!(!keys.contains(&key));
    // A live record (not past its TTL) goes the same way.
    let live = s.layout().key(Family::Records(1), 31);
    s.delete(&live, None).await.unwrap();
    assert_eq!(s.head(&live).await, Err(StoreError::NotFound));
    // Create-only over a generated object is refused; a new key is listed.
    let task = s.layout().key(Family::Tasks, 7);
    assert_eq!(
        s.put(&task, b"{}".to_vec().into(), PutMode::Create).await,
        Err(StoreError::PreconditionFailed)
    );
    s.put("ready/0/0000000001/x", b"".to_vec().into(), PutMode::Create)
        .await
        .unwrap();
    let (ready, _) = list_all(&s, "ready/").await;
    assert_eq!(ready, vec!["ready/0/0000000001/x"]);
}

#[tokio::test]
async fn a_synthetic_bucket_under_list_order_any_lists_every_key_once_in_an_order_of_its_own() {
    let ordered = bucket(ListOrder::Bytes).await;
    let any = bucket(ListOrder::Any).await;
    let prefix = "idempotency/type_00000/";
    let (want, _) = list_all(&ordered, prefix).await;
    let (got, _) = list_all(&any, prefix).await;
    assert_eq!(got.len(), want.len());
    assert_eq!(
        got.iter().collect::<BTreeSet<_>>(),
        want.iter().collect::<BTreeSet<_>>()
    );
    assert!(got.windows(2).any(|w| w[0] > w[1]), "not byte order");
    // As S3 Express: prefixes that end in `/`, no StartAfter.
    assert!(
        any.list("idempotency/type_00000/0", None, None, 10)
            .await
            .is_err()
    );
    assert!(any.list(prefix, Some(&want[0]), None, 10).await.is_err());
}

#[test]
fn the_scale_benchs_day_pass_deletes_every_expired_record_and_owed_orphan_and_writes_nothing_else()
{
    for order in [ListOrder::Bytes, ListOrder::Any] {
        let o = scale_model::day_pass(small(), order, 50, &|| {});
        assert!(o.summary.complete, "{order:?}: {o:?}");
        assert_eq!(o.summary.errors, 0, "{order:?}: {o:?}");
        assert_eq!(o.summary.expired_deleted, o.expired, "{order:?}");
        assert!(o.orphans_due > 0);
        assert_eq!(
            o.summary.payloads_deleted, o.orphans_due,
            "{order:?}: {o:?}"
        );
        // The same orphans, not only as many: every one owed when the tail
        // was planned deleted, and none that was not owed.
        assert_eq!(
            (o.orphans_left, o.orphans_unowed),
            (0, 0),
            "{order:?}: {o:?}"
        );
        assert_eq!(
            o.named_payloads_deleted, 0,
            "a task's payload deleted: {o:?}"
        );
        assert_eq!(o.summary.finished, 0, "nothing was missing: {o:?}");
        assert!(
            o.summary.reads > o.expired,
            "the records in their finish window were read"
        );
        // The checkpoint's claims and releases.
        assert!(o.puts >= 2, "{order:?}: {o:?}");
        assert!(o.lists > 0 && o.s3_secs > 0.0);
    }
}

/// Six scopes by Zipf's law, the largest of them past two ranges' worth
/// (64,000 records each): the pass lists each record once, in about one
/// LIST per 1,000, under either setting. Splitting every scope past a page
/// into sixteen ranges, as the pass did, took about 1.7 LISTs per 1,000
/// here: most of them came back part full.
#[test]
fn a_skewed_bucket_is_listed_once_in_about_one_list_per_thousand_records() {
    let shape = Shape {
        live: 320_000,
        scopes: 6,
        zipf: 1.0,
        payload_every: 100,
        orphan_every: 1000,
    };
    for order in [ListOrder::Bytes, ListOrder::Any] {
        let o = scale_model::day_pass(shape, order, 50, &|| {});
        assert!(
            o.summary.complete && o.summary.errors == 0,
            "{order:?}: {o:?}"
        );
        assert_eq!(
            o.summary.scanned, o.records,
            "each record listed once: {order:?}"
        );
        assert_eq!(o.summary.expired_deleted, o.expired, "{order:?}");
        // At least a LIST per full page, and at most 3 % more.
        let pages = o.records.div_ceil(1000);
        assert!(
            o.record_lists >= pages && o.record_lists * 100 <= pages * 103,
            "{order:?}: {} LISTs of the records for {} records",
            o.record_lists,
            o.records
        );
    }
}

/// One scope too large for an invocation under `LIST_ORDER=any` (its
/// folder is listed page after page): the pass is handed on at each
/// invocation's deadline until it is complete.
#[test]
fn a_pass_longer_than_an_invocation_is_handed_on_until_it_is_complete() {
    let shape = Shape {
        live: 700_000,
        scopes: 1,
        zipf: 1.0,
        payload_every: 100,
        orphan_every: 1000,
    };
    let o = scale_model::day_pass(shape, ListOrder::Any, 50, &|| {});
    assert!(o.invocations > 1, "{o:?}");
    assert!(o.summary.complete, "{o:?}");
    assert_eq!(o.summary.expired_deleted, o.expired, "{o:?}");
}
