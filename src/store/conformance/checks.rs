//! The checks of the conformance suite, one `pub async fn` each, every one
//! on a store of its own: what `Store`'s table promises, and where stores
//! differ, what [`Expect`] says this one answers. They panic (assert) on a
//! store that breaks the table: they are tests.

use std::sync::Arc;

use bytes::Bytes;

use super::{Expect, Order};
use crate::store::{ETag, PutMode, PutResult, Store, StoreError};

/// Writes `body` to `key` by `mode`, which must succeed: the set-up step of
/// most checks.
async fn put(s: &Arc<dyn Store>, key: &str, body: &'static [u8], mode: PutMode) -> PutResult {
    s.put(key, Bytes::from_static(body), mode)
        .await
        .unwrap_or_else(|e| panic!("put {key}: {e:?}"))
}

/// Creates `key` as `1`, then updates it to `2`: both writes' results.
async fn two_versions(s: &Arc<dyn Store>, key: &str) -> (PutResult, PutResult) {
    let a = put(s, key, b"1", PutMode::Create).await;
    let b = put(s, key, b"2", PutMode::Update(a.etag.clone())).await;
    (a, b)
}

/// Check: create succeeds once then answers 412.
pub async fn create_succeeds_once_then_answers_412(s: Arc<dyn Store>, _: Expect) {
    let a = put(&s, "k", b"1", PutMode::Create).await;
    assert_eq!(
        s.put("k", Bytes::from_static(b"2"), PutMode::Create).await,
        Err(StoreError::PreconditionFailed)
    );
    let o = s.get("k").await.unwrap();
    assert_eq!(&o.body[..], b"1");
    assert_eq!(o.meta.etag, a.etag);
}

/// Check: update needs the current ETag.
pub async fn update_needs_the_current_etag(s: Arc<dyn Store>, _: Expect) {
    let (a, b) = two_versions(&s, "k").await;
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

/// Check: update of a missing key is refused with 404 or the stores 412.
pub async fn update_of_a_missing_key_is_refused_with_404_or_the_stores_412(
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

/// Check: same bytes give the same ETag unless ETags are random.
pub async fn same_bytes_give_the_same_etag_unless_etags_are_random(s: Arc<dyn Store>, x: Expect) {
    let a = put(&s, "k1", b"same", PutMode::Overwrite).await;
    let b = put(&s, "k2", b"same", PutMode::Overwrite).await;
    if x.content_etags {
        assert_eq!(a.etag, b.etag, "ETags are content-derived, as in S3");
    } else {
        assert_ne!(a.etag, b.etag, "a directory bucket's ETags are random");
    }
}

/// Check: get and head of a missing key are 404.
pub async fn get_and_head_of_a_missing_key_are_404(s: Arc<dyn Store>, _: Expect) {
    assert_eq!(s.get("missing").await.err(), Some(StoreError::NotFound));
    assert_eq!(s.head("missing").await, Err(StoreError::NotFound));
}

/// Check: get returns body ETag and last modified.
pub async fn get_returns_body_etag_and_last_modified(s: Arc<dyn Store>, _: Expect) {
    let p = put(&s, "a/b.json", b"{}", PutMode::Overwrite).await;
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

/// Check: conditional delete checks the ETag where the store honours it.
pub async fn conditional_delete_checks_the_etag_where_the_store_honours_it(
    s: Arc<dyn Store>,
    x: Expect,
) {
    let (a, b) = two_versions(&s, "k").await;
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
pub async fn a_deleted_key_is_gone_to_every_call_and_can_be_created_again(
    s: Arc<dyn Store>,
    x: Expect,
) {
    let a = put(&s, "d/k", b"1", PutMode::Create).await;
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

/// Check: a conditional get is 304 while the ETag holds and the object once it changed.
pub async fn a_conditional_get_is_304_while_the_etag_holds_and_the_object_once_it_changed(
    s: Arc<dyn Store>,
    _: Expect,
) {
    let a = put(&s, "s/k.json", b"1", PutMode::Overwrite).await;
    assert_eq!(
        s.get_if_none_match("s/k.json", &a.etag).await.err(),
        Some(StoreError::NotModified),
        "the same ETag: 304, no body"
    );
    let b = put(&s, "s/k.json", b"22", PutMode::Overwrite).await;
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

/// Check: unconditional delete of a missing key succeeds.
pub async fn unconditional_delete_of_a_missing_key_succeeds(s: Arc<dyn Store>, _: Expect) {
    s.delete("never-there", None).await.unwrap();
}

/// Check: listing pages through every key under a prefix once.
pub async fn listing_pages_through_every_key_under_a_prefix_once(s: Arc<dyn Store>, x: Expect) {
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
pub async fn listings_come_in_the_stores_order_and_start_after_follows_it(
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
pub async fn folders_under_a_prefix_are_listed_once_each(s: Arc<dyn Store>, _: Expect) {
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
pub async fn a_version_deleted_by_its_id_goes_alone_and_a_newer_one_stays(
    s: Arc<dyn Store>,
    x: Expect,
) {
    let a = put(&s, "v/k", b"1", PutMode::Create).await;
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
    let b = put(&s, "v/k", b"2", PutMode::Update(a.etag.clone())).await;
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
pub async fn deleting_the_current_version_brings_the_one_before_it_back(
    s: Arc<dyn Store>,
    x: Expect,
) {
    if !x.versioned {
        return;
    }
    let a = put(&s, "w/k", b"old", PutMode::Create).await;
    let b = put(&s, "w/k", b"new", PutMode::Update(a.etag)).await;
    s.delete_version("w/k", &b.version_id.unwrap())
        .await
        .unwrap();
    let back = s.get("w/k").await.unwrap();
    assert_eq!(&back.body[..], b"old");
    assert_eq!(back.meta.version_id, a.version_id);
}

/// Every version under a prefix, delete markers too, is listed, a key's
/// versions newest first as S3 lists them; deleting
/// each leaves nothing (what `idem doctor --probe` cleans up with).
pub async fn every_version_under_a_prefix_is_listed_and_deleting_each_leaves_nothing(
    s: Arc<dyn Store>,
    x: Expect,
) {
    let a = put(&s, "x/k", b"1", PutMode::Create).await;
    let b = put(&s, "x/k", b"2", PutMode::Update(a.etag)).await;
    put(&s, "x/l", b"1", PutMode::Create).await;
    s.delete("x/l", None).await.unwrap();
    let versions = s.list_versions("x/").await.unwrap();
    // Versioned: two of x/k, x/l and its delete marker. Unversioned: x/k.
    assert_eq!(
        versions.len(),
        if x.versioned { 4 } else { 1 },
        "{versions:?}"
    );
    // S3's order: a key's versions newest first.
    if x.versioned {
        let of_k: Vec<Option<&str>> = versions
            .iter()
            .filter(|(k, _)| k == "x/k")
            .map(|(_, v)| Some(v.as_str()))
            .collect();
        let newest_first = vec![b.version_id.as_deref(), a.version_id.as_deref()];
        assert_eq!(of_k, newest_first, "{versions:?}");
    }
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

/// More versions than one page of ListObjectVersions holds (S3 answers
/// 1,000 at most) are all listed, each once: the listing goes on from the
/// page's key and version markers. Versioned: 1,001 versions of one key and
/// its delete marker, so a page ends inside one key's versions, and a key
/// after it; unversioned: 1,001 keys, one version (`null`) each.
pub async fn more_versions_than_a_page_holds_are_all_listed_once(s: Arc<dyn Store>, x: Expect) {
    const MORE_THAN_A_PAGE: usize = 1_001;
    let mut written = Vec::new();
    if x.versioned {
        for _ in 0..MORE_THAN_A_PAGE {
            let r = put(&s, "y/a", b"v", PutMode::Overwrite).await;
            written.push(("y/a".to_owned(), r.version_id.expect("a version")));
        }
        s.delete("y/a", None).await.unwrap();
        let r = put(&s, "y/b", b"v", PutMode::Create).await;
        written.push(("y/b".to_owned(), r.version_id.expect("a version")));
    } else {
        // Keys of their own: written a few at a time.
        let keys: Vec<String> = (0..MORE_THAN_A_PAGE).map(|i| format!("y/{i:04}")).collect();
        for few in keys.chunks(16) {
            let puts = few.iter().map(|k| put(&s, k, b"v", PutMode::Create));
            futures::future::join_all(puts).await;
        }
        written.extend(keys.into_iter().map(|k| (k, "null".to_owned())));
    }
    let mut listed = s.list_versions("y/").await.unwrap();
    listed.sort();
    let before = listed.len();
    listed.dedup();
    assert_eq!(listed.len(), before, "a version listed twice");
    // What was written, and (versioned) one more: y/a's delete marker.
    let markers: Vec<_> = listed.iter().filter(|v| !written.contains(v)).collect();
    assert_eq!(markers.len(), usize::from(x.versioned), "{markers:?}");
    assert!(markers.iter().all(|(k, _)| k == "y/a"), "{markers:?}");
    assert_eq!(listed.len(), written.len() + markers.len());
}

/// Check: exactly one of 32 racing creates wins.
pub async fn exactly_one_of_32_racing_creates_wins(s: Arc<dyn Store>, x: Expect) {
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
pub async fn sixteen_racing_cas_increments_count_exactly(s: Arc<dyn Store>, x: Expect) {
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
