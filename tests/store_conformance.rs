//! One conformance suite, run on the in-memory store, on moto and on
//! SeaweedFS, each unversioned and versioned, and on the in-memory store
//! answering as other stores do (SeaweedFS, MinIO, S3 Express): every
//! conditional outcome (writes, deletes, the conditional GET), versions,
//! listings and their order, and races that assert exact counts.
//!
//! Each bucket runs with what its store is known to answer where stores
//! differ ([`Expect`], the README's table of stores): every difference is
//! asserted, never skipped.

use crate::common;

use std::sync::Arc;

use bytes::Bytes;
use idempotent_submit::store::memory::{Behaviour, Listing};
use idempotent_submit::store::{ETag, MemoryStore, PutMode, Store, StoreError};

/// How a listing is ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Order {
    /// Byte order, `StartAfter` honoured in it.
    Bytes,
    /// Folders first (`a/…` before `a-b/…`), `StartAfter` in that order.
    FoldersFirst,
    /// Pages follow a folders-first walk, but each page comes sorted in
    /// byte order; `StartAfter` in the walk's order (SeaweedFS, versioned).
    FoldersFirstPagesSorted,
    /// No order, `StartAfter` refused.
    Any,
}

/// What a store answers where stores differ.
#[derive(Debug, Clone)]
struct Expect {
    /// `If-Match` on a PUT of a missing key: 404 (S3) or 412 (SeaweedFS).
    missing_if_match: StoreError,
    /// `If-Match` on a DELETE is honoured.
    conditional_delete: bool,
    order: Order,
    /// The same bytes get the same ETag.
    content_etags: bool,
    versioned: bool,
    /// Racing conditional writes to one key wait for each other: one may
    /// outlast the client's 10 s read timeout (answered as retryable, its
    /// outcome unknown). SeaweedFS, on versioned buckets.
    slow_under_contention: bool,
}

const S3: Expect = Expect {
    missing_if_match: StoreError::NotFound,
    conditional_delete: true,
    order: Order::Bytes,
    content_etags: true,
    versioned: false,
    slow_under_contention: false,
};

const S3_VERSIONED: Expect = Expect {
    versioned: true,
    ..S3
};

const SEAWEEDFS_LIKE: Expect = Expect {
    missing_if_match: StoreError::PreconditionFailed,
    order: Order::FoldersFirst,
    ..S3
};

/// SeaweedFS 4.48, as the runs here found it.
const SEAWEEDFS: Expect = Expect {
    slow_under_contention: true,
    ..SEAWEEDFS_LIKE
};

const MINIO_LIKE: Expect = Expect {
    conditional_delete: false,
    ..S3
};

const EXPRESS_LIKE: Expect = Expect {
    order: Order::Any,
    content_etags: false,
    ..S3
};

fn memory(clock: &idempotent_submit::ManualClock, b: Behaviour) -> MemoryStore {
    common::memory_store(clock).with_behaviour(b)
}

fn memory_versioned(clock: &idempotent_submit::ManualClock, b: Behaviour) -> MemoryStore {
    common::memory_store_versioned(clock).with_behaviour(b)
}

async fn create_succeeds_once_then_answers_412(s: Arc<dyn Store>, _: Expect) {
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

async fn update_needs_the_current_etag(s: Arc<dyn Store>, _: Expect) {
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

async fn update_of_a_missing_key_is_refused_with_404_or_the_stores_412(
    s: Arc<dyn Store>,
    x: Expect,
) {
    let e = ETag("\"0123456789abcdef0123456789abcdef\"".into());
    assert_eq!(
        s.put("nope", Bytes::from_static(b"1"), PutMode::Update(e))
            .await
            .map(|_| ()),
        Err(x.missing_if_match.clone())
    );
    assert_eq!(s.head("nope").await, Err(StoreError::NotFound));
}

async fn same_bytes_give_the_same_etag_unless_etags_are_random(s: Arc<dyn Store>, x: Expect) {
    let a = s
        .put("k1", Bytes::from_static(b"same"), PutMode::Overwrite)
        .await
        .unwrap();
    let b = s
        .put("k2", Bytes::from_static(b"same"), PutMode::Overwrite)
        .await
        .unwrap();
    if x.content_etags {
        assert_eq!(a.etag, b.etag, "ETags are content-derived, as in S3");
    } else {
        assert_ne!(a.etag, b.etag, "a directory bucket's ETags are random");
    }
}

async fn get_and_head_of_a_missing_key_are_404(s: Arc<dyn Store>, _: Expect) {
    assert_eq!(s.get("missing").await.err(), Some(StoreError::NotFound));
    assert_eq!(s.head("missing").await, Err(StoreError::NotFound));
}

async fn get_returns_body_etag_and_last_modified(s: Arc<dyn Store>, _: Expect) {
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

async fn conditional_delete_checks_the_etag_where_the_store_honours_it(
    s: Arc<dyn Store>,
    x: Expect,
) {
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
    if !x.conditional_delete {
        // MinIO and LocalStack: the condition is ignored, the object goes.
        assert_eq!(s.delete("k", Some(&a.etag)).await, Ok(()));
        assert_eq!(s.head("k").await.map(|_| ()), Err(StoreError::NotFound));
        return;
    }
    assert_eq!(
        s.delete("k", Some(&a.etag)).await,
        Err(StoreError::PreconditionFailed)
    );
    assert!(
        s.head("k").await.is_ok(),
        "a stale delete leaves the object"
    );
    s.delete("k", Some(&b.etag)).await.unwrap();
    assert_eq!(s.head("k").await.map(|_| ()), Err(StoreError::NotFound));
}

/// On a versioned bucket the delete leaves a delete marker as the current
/// version: every answer below is the same as on an unversioned one.
async fn a_deleted_key_is_gone_to_every_call_and_can_be_created_again(
    s: Arc<dyn Store>,
    x: Expect,
) {
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
        Err(x.missing_if_match.clone()),
        "If-Match on a deleted key is a 404 (SeaweedFS: 412)"
    );
    assert_eq!(
        s.delete("d/k", Some(&a.etag)).await,
        if x.conditional_delete {
            Err(x.missing_if_match.clone())
        } else {
            Ok(())
        },
        "a conditional delete of a deleted key is a 404 (SeaweedFS: 412)"
    );
    let listed = s.list("d/", None, None, 10).await.unwrap();
    assert!(listed.objects.is_empty(), "{:?}", listed.objects);
    let b = s
        .put("d/k", Bytes::from_static(b"1"), PutMode::Create)
        .await
        .expect("If-None-Match: * succeeds over a deleted key");
    if x.content_etags {
        assert_eq!(b.etag, a.etag, "the same bytes, the same ETag");
    }
    assert_eq!(&s.get("d/k").await.unwrap().body[..], b"1");
    let listed = s.list("d/", None, None, 10).await.unwrap();
    assert_eq!(listed.objects.len(), 1);
}

async fn a_conditional_get_is_304_while_the_etag_holds_and_the_object_once_it_changed(
    s: Arc<dyn Store>,
    _: Expect,
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

async fn unconditional_delete_of_a_missing_key_succeeds(s: Arc<dyn Store>, _: Expect) {
    s.delete("never-there", None).await.unwrap();
}

async fn listing_pages_through_every_key_under_a_prefix_once(s: Arc<dyn Store>, x: Expect) {
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
    if x.order == Order::Any {
        keys.sort();
    }
    assert_eq!(keys, (0..7).map(|i| format!("p/{i}")).collect::<Vec<_>>());
    assert_eq!(pages, 3);
    let after = s.list("p/", Some("p/4"), None, 100).await;
    if x.order == Order::Any {
        assert!(
            matches!(after, Err(StoreError::Fatal(_))),
            "StartAfter is refused: {after:?}"
        );
        return;
    }
    let after: Vec<_> = after.unwrap().objects.into_iter().map(|o| o.key).collect();
    assert_eq!(after, vec!["p/5", "p/6"]);
}

/// Every key under `prefix`, in the order listed, `page` keys a page.
async fn listed_keys(s: &Arc<dyn Store>, prefix: &str, page: usize) -> Vec<String> {
    let mut keys = Vec::new();
    let mut token = None;
    loop {
        let p = s.list(prefix, None, token, page).await.unwrap();
        keys.extend(
            p.objects
                .into_iter()
                .map(|o| o.key[prefix.len()..].to_owned()),
        );
        match p.next {
            Some(n) => token = Some(n),
            None => return keys,
        }
    }
}

/// Keys that byte order and a folders-first order put apart, listed a key
/// a page (the order of the walk) and all in one page, and after one of
/// them.
async fn listings_come_in_the_stores_order_and_start_after_follows_it(
    s: Arc<dyn Store>,
    x: Expect,
) {
    let names = ["a-b/1", "a.b/1", "a/1", "a/2", "a0", "b"];
    let folders_first = ["a/1", "a/2", "a-b/1", "a.b/1", "a0", "b"];
    for n in names {
        s.put(&format!("o/{n}"), Bytes::new(), PutMode::Overwrite)
            .await
            .unwrap();
    }
    let mut walked = listed_keys(&s, "o/", 1).await;
    let mut whole = listed_keys(&s, "o/", 100).await;
    let after = s.list("o/", Some("o/a-b/1"), None, 100).await;
    let after: Option<Vec<String>> = after.ok().map(|p| {
        p.objects
            .into_iter()
            .map(|o| o.key["o/".len()..].to_owned())
            .collect()
    });
    match x.order {
        Order::Bytes => {
            assert_eq!(walked, names);
            assert_eq!(whole, names);
            assert_eq!(after.unwrap(), names[1..]);
        }
        Order::FoldersFirst | Order::FoldersFirstPagesSorted => {
            assert_eq!(walked, folders_first);
            if x.order == Order::FoldersFirst {
                assert_eq!(whole, folders_first);
            } else {
                assert_eq!(whole, names, "one page, sorted in byte order");
            }
            // In the walk's order: a/… came before a-b/1.
            assert_eq!(after.unwrap(), ["a.b/1", "a0", "b"]);
        }
        Order::Any => {
            walked.sort();
            whole.sort();
            assert_eq!(walked, names, "every key once, in no order");
            assert_eq!(whole, names);
            assert_eq!(after, None, "StartAfter is refused");
        }
    }
}

/// The folders right under a prefix, each once, as `Delimiter: /` gives
/// them: what `LIST_ORDER=any` finds the scopes by.
async fn folders_under_a_prefix_are_listed_once_each(s: Arc<dyn Store>, _: Expect) {
    for k in ["f/a/1", "f/a/2", "f/a-b/1", "f/b/c/1", "f/top", "g/x/1"] {
        s.put(k, Bytes::new(), PutMode::Overwrite).await.unwrap();
    }
    let mut dirs = s.list_dirs("f/", None).await.unwrap();
    assert_eq!(dirs.next, None);
    dirs.prefixes.sort();
    assert_eq!(dirs.prefixes, ["f/a-b/", "f/a/", "f/b/"]);
    assert!(s.list_dirs("h/", None).await.unwrap().prefixes.is_empty());
}

/// On a versioned bucket every write names its version and a GET names the
/// current one; deleting the version read removes that version only: a
/// newer one stays current, and the last one deleted leaves nothing behind.
async fn a_version_deleted_by_its_id_goes_alone_and_a_newer_one_stays(
    s: Arc<dyn Store>,
    x: Expect,
) {
    let a = s
        .put("v/k", Bytes::from_static(b"1"), PutMode::Create)
        .await
        .unwrap();
    let read = s.get("v/k").await.unwrap();
    if !x.versioned {
        assert_eq!((a.version_id, read.meta.version_id), (None, None));
        return;
    }
    let va = a
        .version_id
        .clone()
        .expect("a versioned write names its version");
    assert_eq!(read.meta.version_id.as_deref(), Some(va.as_str()));
    assert_eq!(s.head("v/k").await.unwrap().version_id, a.version_id);
    let b = s
        .put(
            "v/k",
            Bytes::from_static(b"2"),
            PutMode::Update(a.etag.clone()),
        )
        .await
        .unwrap();
    let vb = b.version_id.clone().unwrap();
    assert_ne!(va, vb);
    // The version read before the newer write: gone, and the newer one stays.
    s.delete_version("v/k", &va).await.unwrap();
    let now = s.get("v/k").await.unwrap();
    assert_eq!(&now.body[..], b"2");
    assert_eq!(now.meta.version_id.as_deref(), Some(vb.as_str()));
    // A version gone already: nothing to do.
    s.delete_version("v/k", &va).await.unwrap();
    // The current one: the key is gone, and no delete marker is left.
    s.delete_version("v/k", &vb).await.unwrap();
    assert_eq!(s.head("v/k").await.map(|_| ()), Err(StoreError::NotFound));
    assert!(s.list_versions("v/").await.unwrap().is_empty());
}

/// Deleting the current version makes the one before it current again.
async fn deleting_the_current_version_brings_the_one_before_it_back(s: Arc<dyn Store>, x: Expect) {
    if !x.versioned {
        return;
    }
    let a = s
        .put("w/k", Bytes::from_static(b"old"), PutMode::Create)
        .await
        .unwrap();
    let b = s
        .put("w/k", Bytes::from_static(b"new"), PutMode::Update(a.etag))
        .await
        .unwrap();
    s.delete_version("w/k", &b.version_id.unwrap())
        .await
        .unwrap();
    let back = s.get("w/k").await.unwrap();
    assert_eq!(&back.body[..], b"old");
    assert_eq!(back.meta.version_id, a.version_id);
}

/// Every version under a prefix, delete markers too, is listed; deleting
/// each leaves nothing (what `idem doctor --probe` cleans up with).
async fn every_version_under_a_prefix_is_listed_and_deleting_each_leaves_nothing(
    s: Arc<dyn Store>,
    x: Expect,
) {
    let a = s
        .put("x/k", Bytes::from_static(b"1"), PutMode::Create)
        .await
        .unwrap();
    s.put("x/k", Bytes::from_static(b"2"), PutMode::Update(a.etag))
        .await
        .unwrap();
    s.put("x/l", Bytes::from_static(b"1"), PutMode::Create)
        .await
        .unwrap();
    s.delete("x/l", None).await.unwrap();
    let versions = s.list_versions("x/").await.unwrap();
    // Versioned: two of x/k, x/l and its delete marker. Unversioned: x/k.
    assert_eq!(
        versions.len(),
        if x.versioned { 4 } else { 1 },
        "{versions:?}"
    );
    for (k, v) in &versions {
        s.delete_version(k, v).await.unwrap();
    }
    assert!(s.list_versions("x/").await.unwrap().is_empty());
    assert!(
        s.list("x/", None, None, 10)
            .await
            .unwrap()
            .objects
            .is_empty()
    );
}

async fn exactly_one_of_32_racing_creates_wins(s: Arc<dyn Store>, x: Expect) {
    let mut tasks = Vec::new();
    for i in 0..32 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            (
                i,
                s.put("race", Bytes::from(format!("{i}")), PutMode::Create)
                    .await,
            )
        }));
    }
    let (mut wins, mut unknown) = (Vec::new(), Vec::new());
    for t in tasks {
        match t.await.unwrap() {
            (i, Ok(_)) => wins.push(i),
            // 409 is S3's way to say "another conditional write was in flight".
            (_, Err(StoreError::PreconditionFailed | StoreError::Conflict)) => {}
            // Timed out waiting for the others: it may or may not have won.
            (i, Err(StoreError::Unavailable(_))) if x.slow_under_contention => unknown.push(i),
            (_, Err(e)) => panic!("unexpected {e:?}"),
        }
    }
    let kept: usize = std::str::from_utf8(&s.get("race").await.unwrap().body)
        .unwrap()
        .parse()
        .unwrap();
    // One winner, and the object is its write; or, with answers lost to a
    // timeout, no known winner and the object one of theirs.
    match wins[..] {
        [w] => assert_eq!(kept, w, "{wins:?} {unknown:?}"),
        [] => assert!(unknown.contains(&kept), "{unknown:?} kept {kept}"),
        _ => panic!("{} creates won: {wins:?}", wins.len()),
    }
}

/// Sixteen writers each append their number to one object by read, then
/// `If-Match` write. The object ends holding every number exactly once: a
/// compare-and-swap never loses an update and never applies one twice.
///
/// A write whose answer is lost to the client's timeout (SeaweedFS, see
/// `slow_under_contention`) has an unknown outcome, so its writer reads again
/// and finds its number there or not. That check is sound: only writer `i`
/// writes `i`, and a late landing of the lost write carries an ETag that any
/// later write has changed, so it gets a 412.
async fn sixteen_racing_cas_increments_count_exactly(s: Arc<dyn Store>, x: Expect) {
    s.put("n", Bytes::new(), PutMode::Create).await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..16u32 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            let mut tries = 0;
            loop {
                tries += 1;
                assert!(tries < 1000, "livelock");
                let o = match s.get("n").await {
                    Ok(o) => o,
                    Err(StoreError::Unavailable(_)) if x.slow_under_contention => continue,
                    Err(e) => panic!("unexpected {e:?}"),
                };
                let mut seen = writers(&o.body);
                if seen.contains(&i) {
                    return; // an earlier, unanswered write of ours landed
                }
                seen.push(i);
                let next = Bytes::from(
                    seen.iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(","),
                );
                match s.put("n", next, PutMode::Update(o.meta.etag)).await {
                    Ok(_) => return,
                    Err(StoreError::PreconditionFailed | StoreError::Conflict) => continue,
                    Err(StoreError::Unavailable(_)) if x.slow_under_contention => continue,
                    Err(e) => panic!("unexpected {e:?}"),
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let mut kept = writers(&s.get("n").await.unwrap().body);
    assert_eq!(kept.len(), 16, "{kept:?}");
    kept.sort_unstable();
    assert_eq!(kept, (0..16).collect::<Vec<_>>());
}

/// The writers an object of the CAS race names, in the order they wrote.
fn writers(body: &[u8]) -> Vec<u32> {
    std::str::from_utf8(body)
        .unwrap()
        .split(',')
        .filter(|w| !w.is_empty())
        .map(|w| w.parse().unwrap())
        .collect()
}

/// Every test on every bucket: in memory, on moto and on SeaweedFS, each
/// unversioned and versioned, and in memory answering as SeaweedFS, MinIO
/// and S3 Express do.
macro_rules! suite {
    ($($name:ident),* $(,)?) => {
        suite!(@memory memory, memory, Behaviour::default(), S3, $($name),*);
        suite!(@memory memory_versioned, memory_versioned, Behaviour::default(), S3_VERSIONED, $($name),*);
        suite!(@memory memory_as_seaweedfs, memory_versioned, Behaviour::seaweedfs(),
            Expect { versioned: true, ..SEAWEEDFS_LIKE }, $($name),*);
        suite!(@memory memory_as_minio, memory, Behaviour::minio(), MINIO_LIKE, $($name),*);
        suite!(@memory memory_as_minio_versioned, memory_versioned, Behaviour::minio(),
            Expect { versioned: true, ..MINIO_LIKE }, $($name),*);
        suite!(@memory memory_as_s3_express, memory, Behaviour::s3_express(7), EXPRESS_LIKE, $($name),*);
        suite!(@s3 moto, moto_store_with, Off, S3, $($name),*);
        suite!(@s3 moto_versioned, moto_store_with, On, S3_VERSIONED, $($name),*);
        suite!(@s3 seaweedfs, seaweedfs_store_with, Off, SEAWEEDFS, $($name),*);
        suite!(@s3 seaweedfs_versioned, seaweedfs_store_with, On,
            Expect { versioned: true, order: Order::FoldersFirstPagesSorted, ..SEAWEEDFS }, $($name),*);
    };
    // A bucket of a real S3 API (moto, SeaweedFS), made by `common::$make`.
    (@s3 $module:ident, $make:ident, $versioning:ident, $expect:expr, $($name:ident),*) => {
        mod $module {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    super::$name(
                        Arc::new(common::$make(common::Versioning::$versioning).await),
                        $expect,
                    )
                    .await;
                }
            )*
        }
    };
    (@memory $module:ident, $store:ident, $behaviour:expr, $expect:expr, $($name:ident),*) => {
        mod $module {
            use super::*;
            $(
                #[tokio::test]
                async fn $name() {
                    let clock = idempotent_submit::ManualClock::at_epoch();
                    super::$name(Arc::new(super::$store(&clock, $behaviour)), $expect).await;
                }
            )*
        }
    };
}

suite!(
    create_succeeds_once_then_answers_412,
    update_needs_the_current_etag,
    update_of_a_missing_key_is_refused_with_404_or_the_stores_412,
    same_bytes_give_the_same_etag_unless_etags_are_random,
    get_and_head_of_a_missing_key_are_404,
    get_returns_body_etag_and_last_modified,
    conditional_delete_checks_the_etag_where_the_store_honours_it,
    a_conditional_get_is_304_while_the_etag_holds_and_the_object_once_it_changed,
    a_deleted_key_is_gone_to_every_call_and_can_be_created_again,
    unconditional_delete_of_a_missing_key_succeeds,
    listing_pages_through_every_key_under_a_prefix_once,
    listings_come_in_the_stores_order_and_start_after_follows_it,
    folders_under_a_prefix_are_listed_once_each,
    a_version_deleted_by_its_id_goes_alone_and_a_newer_one_stays,
    deleting_the_current_version_brings_the_one_before_it_back,
    every_version_under_a_prefix_is_listed_and_deleting_each_leaves_nothing,
    exactly_one_of_32_racing_creates_wins,
    sixteen_racing_cas_increments_count_exactly,
);

/// A store that lists in no order takes no prefix that does not end in `/`
/// (S3 Express): what `LIST_ORDER=any` never asks for.
#[tokio::test]
async fn a_store_that_lists_in_no_order_refuses_a_prefix_that_does_not_end_in_a_slash() {
    let clock = idempotent_submit::ManualClock::at_epoch();
    let s = memory(&clock, Behaviour::s3_express(1));
    assert!(matches!(
        s.list("idempotency/t/a", None, None, 10).await,
        Err(StoreError::Fatal(_))
    ));
    assert!(s.list("idempotency/t/", None, None, 10).await.is_ok());
    assert!(matches!(
        Behaviour::s3_express(1).listing,
        Listing::Unordered { .. }
    ));
}
