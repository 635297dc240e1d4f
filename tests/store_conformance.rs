//! The library's conformance suite (`store::conformance`, the `testing`
//! feature), run on the in-memory store, on moto and on SeaweedFS, each
//! unversioned and versioned, and on the in-memory store answering as other
//! stores do (SeaweedFS, MinIO, S3 Express): every conditional outcome
//! (writes, deletes, the conditional GET), versions, listings and their
//! order, and races that assert exact counts. One test per check and
//! bucket, so that a failure names both.
//!
//! Each bucket runs with what its store is known to answer where stores
//! differ (`Expect`, the README's table of stores): every difference is
//! asserted, never skipped.

use crate::common;

use std::sync::Arc;

use idempotent_submit::store::conformance::{self, Expect, Order};
use idempotent_submit::store::memory::{Behaviour, Listing};
use idempotent_submit::store::{MemoryStore, Store, StoreError};

/// The in-memory store answering as SeaweedFS does: as SeaweedFS, but
/// never slow (it has no contention to wait on).
const SEAWEEDFS_LIKE: Expect = Expect {
    slow_under_contention: false,
    ..Expect::SEAWEEDFS
};

fn memory(clock: &idempotent_submit::ManualClock, b: Behaviour) -> MemoryStore {
    common::memory_store(clock).with_behaviour(b)
}

fn memory_versioned(clock: &idempotent_submit::ManualClock, b: Behaviour) -> MemoryStore {
    common::memory_store_versioned(clock).with_behaviour(b)
}

/// Every check on every bucket: in memory, on moto and on SeaweedFS, each
/// unversioned and versioned, and in memory answering as SeaweedFS, MinIO
/// and S3 Express do.
macro_rules! suite {
    ($($name:ident),* $(,)?) => {
        suite!(@memory memory, memory, Behaviour::default(), Expect::S3, $($name),*);
        suite!(@memory memory_versioned, memory_versioned, Behaviour::default(), Expect::S3_VERSIONED, $($name),*);
        suite!(@memory memory_as_seaweedfs, memory_versioned, Behaviour::seaweedfs(),
            Expect { versioned: true, ..SEAWEEDFS_LIKE }, $($name),*);
        suite!(@memory memory_as_minio, memory, Behaviour::minio(), Expect::MINIO, $($name),*);
        suite!(@memory memory_as_minio_versioned, memory_versioned, Behaviour::minio(),
            Expect { versioned: true, ..Expect::MINIO }, $($name),*);
        suite!(@memory memory_as_s3_express, memory, Behaviour::s3_express(7), Expect::S3_EXPRESS, $($name),*);
        suite!(@s3 moto, moto_store_with, Off, Expect::S3, $($name),*);
        suite!(@s3 moto_versioned, moto_store_with, On, Expect::S3_VERSIONED, $($name),*);
        suite!(@s3 seaweedfs, seaweedfs_store_with, Off, Expect::SEAWEEDFS, $($name),*);
        suite!(@s3 seaweedfs_versioned, seaweedfs_store_with, On,
            Expect { versioned: true, order: Order::FoldersFirstPagesSorted, ..Expect::SEAWEEDFS }, $($name),*);
    };
    // A bucket of a real S3 API (moto, SeaweedFS), made by `common::$make`.
    (@s3 $module:ident, $make:ident, $versioning:ident, $expect:expr, $($name:ident),*) => {
        mod $module {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    conformance::$name(
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
                    conformance::$name(Arc::new(super::$store(&clock, $behaviour)), $expect).await;
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
    more_versions_than_a_page_holds_are_all_listed_once,
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

/// The list above runs every check of the library's suite: a check added
/// there and not here would run on no bucket of this project's.
#[test]
fn every_check_of_the_library_runs_on_every_bucket() {
    let here = include_str!("store_conformance.rs");
    let listed = &here[here.find("\nsuite!(\n").unwrap()..];
    assert_eq!(conformance::CHECKS.len(), 19);
    for (name, _) in conformance::CHECKS {
        assert!(listed.contains(&format!("    {name},\n")), "{name}");
    }
}
