//! `idem doctor --probe`: on an in-memory store built to lack each
//! capability in turn, on moto and on SeaweedFS; every run leaves nothing
//! behind.

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;

use idempotent_submit::ManualClock;
use idempotent_submit::probe::{Finding, ProbeReport, probe};
use idempotent_submit::store::memory::{Behaviour, CreateOnly, Listing, MissingIfMatch};
use idempotent_submit::store::{MemoryStore, Store};

/// A versioned in-memory bucket answering as `b` says.
fn bucket(b: Behaviour) -> MemoryStore {
    common::memory_store_versioned(&ManualClock::at_epoch()).with_behaviour(b)
}

/// Probes `store` (notifications configured) and checks that it left no
/// object and no version behind.
async fn probed(store: MemoryStore) -> ProbeReport {
    let report = probe(Arc::new(store.clone()), Some(true)).await;
    assert!(report.left_behind.is_empty(), "{:?}", report.left_behind);
    assert!(store.keys().is_empty(), "{:?}", store.keys());
    assert!(
        store.keys_with_versions().is_empty(),
        "versions left: {:?}",
        store.keys_with_versions()
    );
    report
}

/// Probes a versioned in-memory bucket whose behaviour is S3's but for
/// what `change` makes of it.
async fn probed_with(change: impl FnOnce(&mut Behaviour)) -> ProbeReport {
    let mut b = Behaviour::default();
    change(&mut b);
    probed(bucket(b)).await
}

/// The report's finding on `capability`.
fn finding<'r>(r: &'r ProbeReport, capability: &str) -> &'r Finding {
    let found = r.findings.iter().find(|f| f.capability == capability);
    found.unwrap_or_else(|| panic!("no finding on {capability}: {r:#?}"))
}

/// A store that lists out of byte order and refuses StartAfter in it can
/// host the service with LIST_ORDER=any.
fn needs_list_order_any(r: &ProbeReport) {
    let c = r.capabilities;
    assert!(
        !c.byte_order_listing && !c.start_after && r.can_host,
        "{r:#?}"
    );
    assert_eq!(settings(r), [("LIST_ORDER", "any")]);
}

fn settings(r: &ProbeReport) -> Vec<(&str, &str)> {
    r.settings.iter().map(|(k, v)| (*k, *v)).collect()
}

#[tokio::test]
async fn a_store_that_answers_as_s3_has_every_capability_and_needs_no_setting() {
    let r = probed(bucket(Behaviour::default())).await;
    let c = r.capabilities;
    assert!(
        c.create_only
            && c.compare_and_swap
            && c.conditional_delete
            && c.byte_order_listing
            && c.start_after
            && c.notifications
            && c.versioning,
        "{r:#?}"
    );
    assert!(r.can_host && r.refused.is_empty());
    assert_eq!(r.create_only_winners, 1);
    assert_eq!(r.compare_and_swap_missing_key, "404");
    assert!(r.settings.is_empty(), "{:?}", r.settings);
    assert!(r.findings.iter().all(|f| f.ok), "{:#?}", r.findings);
}

#[tokio::test]
async fn a_store_that_ignores_if_none_match_cannot_host_the_service() {
    let r = probed_with(|b| b.create_only = CreateOnly::Ignored).await;
    assert!(!r.capabilities.create_only);
    assert!(!r.can_host);
    assert!(r.refused[0].contains("no atomic create-only PUT"), "{r:#?}");
    assert!(!idempotent_submit::probe::probe_healthy(&r, &[]));
}

#[tokio::test]
async fn a_store_whose_racing_creates_all_win_cannot_host_the_service() {
    let r = probed_with(|b| b.create_only = CreateOnly::Racy).await;
    assert!(!r.capabilities.create_only, "{r:#?}");
    assert!(r.create_only_winners > 1, "{}", r.create_only_winners);
    assert!(!r.can_host);
    // A second create after the first landed is still refused there: only
    // the race shows it.
    let f = finding(&r, "create_only");
    assert!(f.detail.contains("of 16 racing"), "{f:?}");
}

#[tokio::test]
async fn a_store_that_ignores_if_match_on_put_cannot_host_the_service() {
    let r = probed_with(|b| b.compare_and_swap = false).await;
    assert!(!r.capabilities.compare_and_swap && r.capabilities.create_only);
    assert!(!r.can_host);
    assert!(r.refused[0].contains("no compare-and-swap"), "{r:#?}");
}

#[tokio::test]
async fn a_store_that_writes_on_if_match_to_a_missing_key_cannot_host_the_service() {
    let r = probed_with(|b| b.missing_if_match = MissingIfMatch::Writes).await;
    assert_eq!(r.compare_and_swap_missing_key, "wrote");
    assert!(!r.capabilities.compare_and_swap && !r.can_host);
}

#[tokio::test]
async fn a_412_for_if_match_on_a_missing_key_is_reported_and_needs_no_setting() {
    let r = probed_with(|b| b.missing_if_match = MissingIfMatch::PreconditionFailed).await;
    assert_eq!(r.compare_and_swap_missing_key, "412");
    assert!(r.capabilities.compare_and_swap && r.can_host);
    assert!(r.settings.is_empty(), "{:?}", r.settings);
}

#[tokio::test]
async fn a_store_that_ignores_if_match_on_delete_needs_conditional_delete_off() {
    let r = probed(bucket(Behaviour::minio())).await;
    assert!(!r.capabilities.conditional_delete && r.can_host);
    assert_eq!(settings(&r), [("CONDITIONAL_DELETE", "off")]);
}

#[tokio::test]
async fn a_store_that_lists_folders_first_needs_list_order_any() {
    let r = probed_with(|b| b.listing = Listing::FoldersFirst).await;
    needs_list_order_any(&r);
}

#[tokio::test]
async fn a_store_that_lists_in_no_order_without_start_after_needs_list_order_any() {
    for seed in [1, 2, 3] {
        let r = probed_with(|b| b.listing = Listing::Unordered { seed }).await;
        needs_list_order_any(&r);
        let sa = finding(&r, "start_after");
        assert!(sa.detail.contains("refused"), "{sa:?}");
        // What LIST_ORDER=any lists by still works there.
        assert!(r.findings.iter().any(|f| f.capability == "folders" && f.ok));
    }
}

#[tokio::test]
async fn an_s3_express_like_store_needs_list_order_any_events_from_the_submitter_and_buquet_told() {
    // No versioning, no order, no StartAfter, random ETags, no events.
    let store =
        common::memory_store(&ManualClock::at_epoch()).with_behaviour(Behaviour::s3_express(9));
    let r = probe(Arc::new(store.clone()), Some(false)).await;
    assert!(r.left_behind.is_empty() && store.is_empty(), "{r:#?}");
    let c = r.capabilities;
    assert!(c.create_only && c.compare_and_swap && c.conditional_delete && r.can_host);
    assert!(!c.versioning && !c.notifications && !c.byte_order_listing && !c.start_after);
    assert_eq!(
        settings(&r),
        [
            ("BUQUET_ALLOW_NO_VERSIONING", "1"),
            ("LIST_ORDER", "any"),
            ("RECORD_EVENTS", "submitter"),
        ]
    );
}

#[tokio::test]
async fn a_probe_on_a_versioned_store_that_ignores_if_match_on_delete_still_leaves_no_version() {
    // Its stale conditional DELETE makes a delete marker: removed too.
    probed(bucket(Behaviour::minio())).await;
}

#[tokio::test]
async fn a_needed_setting_the_process_lacks_is_a_mismatch_and_one_it_has_is_not() {
    let r = probed(bucket(Behaviour::minio())).await;
    let mut configured: BTreeMap<&'static str, String> = BTreeMap::new();
    configured.insert("CONDITIONAL_DELETE", "on".into());
    let m = r.mismatches(&configured);
    assert_eq!(m, ["CONDITIONAL_DELETE=off"]);
    assert!(!idempotent_submit::probe::probe_healthy(&r, &m));
    configured.insert("CONDITIONAL_DELETE", "OFF".into());
    assert!(r.mismatches(&configured).is_empty());
    assert!(idempotent_submit::probe::probe_healthy(&r, &[]));
}

// ---- on moto ----

/// Nothing under `sweeper/probe/` on `store`'s bucket, no version either.
async fn nothing_left(store: &idempotent_submit::S3Store) {
    let listed = store
        .list("sweeper/probe/", None, None, 1000)
        .await
        .unwrap();
    assert!(listed.objects.is_empty(), "{:?}", listed.objects);
    let versions = store.list_versions("sweeper/probe/").await.unwrap();
    assert!(versions.is_empty(), "{versions:?}");
}

/// Probes a real store's bucket (with event notifications or not): it
/// leaves nothing, has the conditional writes the protocol needs, can host
/// the service, and reports versioning as the bucket has it.
async fn probe_real(
    store: idempotent_submit::S3Store,
    notifications: bool,
    versioning: common::Versioning,
) -> ProbeReport {
    let r = probe(Arc::new(store.clone()), Some(notifications)).await;
    nothing_left(&store).await;
    let c = r.capabilities;
    assert!(
        c.create_only && c.compare_and_swap && c.conditional_delete && r.can_host,
        "{r:#?}"
    );
    assert_eq!(c.versioning, versioning == common::Versioning::On);
    r
}

async fn probe_moto(versioning: common::Versioning) {
    let r = probe_real(common::moto_store_with(versioning).await, true, versioning).await;
    let c = r.capabilities;
    assert!(c.byte_order_listing && c.start_after, "{r:#?}");
    assert_eq!(r.compare_and_swap_missing_key, "404");
    assert_eq!(r.create_only_winners, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn moto_has_every_capability_the_protocol_relies_on_unversioned() {
    probe_moto(common::Versioning::Off).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn moto_has_every_capability_the_protocol_relies_on_versioned() {
    probe_moto(common::Versioning::On).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn idem_doctor_probe_passes_a_configured_moto_bucket_and_leaves_nothing() {
    let store = common::moto_store_versioned().await;
    common::moto_due_queue(&store, 0).await;
    let (code, out) = common::idem(store.bucket(), &[], &["doctor", "--probe"]).await;
    assert_eq!(code, 0, "{out:#}");
    assert_eq!(out["probe"]["can_host"], true, "{out:#}");
    assert_eq!(out["probe"]["capabilities"]["notifications"], true);
    assert_eq!(out["probe"]["settings"], serde_json::json!({}));
    assert_eq!(out["probe"]["mismatches"], serde_json::json!([]));
    nothing_left(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn idem_doctor_probe_exits_5_on_a_bucket_without_events_and_names_the_setting() {
    let store = common::moto_store().await;
    let (code, out) = common::idem(store.bucket(), &[], &["doctor", "--probe"]).await;
    assert_eq!(code, 5, "{out:#}");
    assert_eq!(out["probe"]["capabilities"]["notifications"], false);
    assert_eq!(out["probe"]["settings"]["RECORD_EVENTS"], "submitter");
    assert_eq!(
        out["probe"]["mismatches"],
        serde_json::json!(["RECORD_EVENTS=submitter"]),
        "{out:#}"
    );
    nothing_left(&store).await;
}

// ---- on SeaweedFS ----

async fn probe_seaweedfs(versioning: common::Versioning) -> ProbeReport {
    // SeaweedFS sends no event notifications.
    let store = common::seaweedfs_store_with(versioning).await;
    let r = probe_real(store, false, versioning).await;
    // Folders first, and StartAfter in that order.
    let c = r.capabilities;
    assert!(!c.byte_order_listing && !c.start_after, "{r:#?}");
    assert_eq!(r.compare_and_swap_missing_key, "412");
    assert!(r.create_only_winners <= 1);
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn seaweedfs_needs_list_order_any_and_events_from_the_submitter_unversioned() {
    let r = probe_seaweedfs(common::Versioning::Off).await;
    assert_eq!(
        settings(&r),
        [
            ("BUQUET_ALLOW_NO_VERSIONING", "1"),
            ("LIST_ORDER", "any"),
            ("RECORD_EVENTS", "submitter"),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn seaweedfs_needs_list_order_any_and_events_from_the_submitter_versioned() {
    let r = probe_seaweedfs(common::Versioning::On).await;
    assert_eq!(
        settings(&r),
        [("LIST_ORDER", "any"), ("RECORD_EVENTS", "submitter")]
    );
}
