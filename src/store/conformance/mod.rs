//! The conformance suite of [`Store`]: every row of the trait's table
//! (src/store/mod.rs) asserted on a real store, the way object_store ships
//! its own. Each check is a `pub async fn` that takes a fresh, empty store
//! and an [`Expect`] (what this store answers where stores differ: every
//! difference is asserted, never skipped) and panics where the store breaks
//! the table. The `testing` feature only: a store's tests run it.
//!
//! This crate runs it on the in-memory store (as S3, and answering as
//! SeaweedFS, MinIO and S3 Express do), on moto and on SeaweedFS, each
//! unversioned and versioned (tests/store_conformance.rs, one test per
//! check and bucket). A store written outside this crate runs it whole,
//! each check on a store of its own:
//!
//! ```
//! use std::sync::Arc;
//!
//! use idempotent_submit::store::conformance::{self, Expect};
//! use idempotent_submit::store::{MemoryStore, Store};
//!
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() {
//! // Your store in place of the in-memory one: a fresh, empty bucket each
//! // time (a new prefix of one bucket will do).
//! let fresh = || async { Arc::new(MemoryStore::default()) as Arc<dyn Store> };
//! // What it answers where S3-compatible stores differ.
//! let expect = Expect {
//!     versioned: false,
//!     ..Expect::S3
//! };
//! conformance::run(fresh, expect).await;
//! # }
//! ```
//!
//! In a test: `#[tokio::test(flavor = "multi_thread")]`, since the races
//! spawn their writers; or one test per check, from [`CHECKS`].

mod checks;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

pub use checks::*;

use crate::store::{Store, StoreError};

/// How a store orders a listing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// Byte order, `StartAfter` honoured in it (S3).
    Bytes,
    /// Folders first (`a/…` before `a-b/…`), `StartAfter` in that order.
    FoldersFirst,
    /// Pages follow a folders-first walk, but each page comes sorted in
    /// byte order; `StartAfter` in the walk's order (SeaweedFS, versioned).
    FoldersFirstPagesSorted,
    /// No order, `StartAfter` refused (S3 Express).
    Any,
}

/// What a store answers where stores differ (the README's table of
/// stores). Start from the nearest constant and change what differs.
#[derive(Debug, Clone)]
pub struct Expect {
    /// `If-Match` on a PUT of a missing key: 404 (S3) or 412 (SeaweedFS).
    pub missing_if_match: StoreError,
    /// `If-Match` on a DELETE is honoured.
    pub conditional_delete: bool,
    /// How it lists.
    pub order: Order,
    /// The same bytes get the same ETag.
    pub content_etags: bool,
    /// The bucket keeps versions.
    pub versioned: bool,
    /// Racing conditional writes to one key wait for each other: one may
    /// outlast the client's 10 s read timeout (answered as retryable, its
    /// outcome unknown). SeaweedFS, on versioned buckets.
    pub slow_under_contention: bool,
}

impl Expect {
    /// AWS S3 (and moto), unversioned.
    pub const S3: Expect = Expect {
        missing_if_match: StoreError::NotFound,
        conditional_delete: true,
        order: Order::Bytes,
        content_etags: true,
        versioned: false,
        slow_under_contention: false,
    };

    /// AWS S3 (and moto), versioned.
    pub const S3_VERSIONED: Expect = Expect {
        versioned: true,
        ..Expect::S3
    };

    /// SeaweedFS 4.48, as the runs here found it, unversioned: 412 for a
    /// missing key's `If-Match`, folders first.
    pub const SEAWEEDFS: Expect = Expect {
        missing_if_match: StoreError::PreconditionFailed,
        order: Order::FoldersFirst,
        slow_under_contention: true,
        ..Expect::S3
    };

    /// MinIO: no conditional DELETE.
    pub const MINIO: Expect = Expect {
        conditional_delete: false,
        ..Expect::S3
    };

    /// S3 Express One Zone: lists in no order, random ETags.
    pub const S3_EXPRESS: Expect = Expect {
        order: Order::Any,
        content_etags: false,
        ..Expect::S3
    };
}

/// One check: a fresh store, what it answers where stores differ.
pub type Check = fn(Arc<dyn Store>, Expect) -> Pin<Box<dyn Future<Output = ()> + Send>>;

/// Every check, by name, in the order [`run`] runs them.
pub const CHECKS: &[(&str, Check)] = &[
    ("create_succeeds_once_then_answers_412", |s, x| {
        Box::pin(checks::create_succeeds_once_then_answers_412(s, x))
    }),
    ("update_needs_the_current_etag", |s, x| {
        Box::pin(checks::update_needs_the_current_etag(s, x))
    }),
    (
        "update_of_a_missing_key_is_refused_with_404_or_the_stores_412",
        |s, x| {
            Box::pin(checks::update_of_a_missing_key_is_refused_with_404_or_the_stores_412(s, x))
        },
    ),
    (
        "same_bytes_give_the_same_etag_unless_etags_are_random",
        |s, x| Box::pin(checks::same_bytes_give_the_same_etag_unless_etags_are_random(s, x)),
    ),
    ("get_and_head_of_a_missing_key_are_404", |s, x| {
        Box::pin(checks::get_and_head_of_a_missing_key_are_404(s, x))
    }),
    ("get_returns_body_etag_and_last_modified", |s, x| {
        Box::pin(checks::get_returns_body_etag_and_last_modified(s, x))
    }),
    (
        "conditional_delete_checks_the_etag_where_the_store_honours_it",
        |s, x| {
            Box::pin(checks::conditional_delete_checks_the_etag_where_the_store_honours_it(s, x))
        },
    ),
    (
        "a_deleted_key_is_gone_to_every_call_and_can_be_created_again",
        |s, x| Box::pin(checks::a_deleted_key_is_gone_to_every_call_and_can_be_created_again(s, x)),
    ),
    (
        "a_conditional_get_is_304_while_the_etag_holds_and_the_object_once_it_changed",
        |s, x| {
            Box::pin(checks::a_conditional_get_is_304_while_the_etag_holds_and_the_object_once_it_changed(s, x))
        },
    ),
    ("unconditional_delete_of_a_missing_key_succeeds", |s, x| {
        Box::pin(checks::unconditional_delete_of_a_missing_key_succeeds(s, x))
    }),
    (
        "listing_pages_through_every_key_under_a_prefix_once",
        |s, x| {
            Box::pin(checks::listing_pages_through_every_key_under_a_prefix_once(
                s, x,
            ))
        },
    ),
    (
        "listings_come_in_the_stores_order_and_start_after_follows_it",
        |s, x| Box::pin(checks::listings_come_in_the_stores_order_and_start_after_follows_it(s, x)),
    ),
    ("folders_under_a_prefix_are_listed_once_each", |s, x| {
        Box::pin(checks::folders_under_a_prefix_are_listed_once_each(s, x))
    }),
    (
        "a_version_deleted_by_its_id_goes_alone_and_a_newer_one_stays",
        |s, x| Box::pin(checks::a_version_deleted_by_its_id_goes_alone_and_a_newer_one_stays(s, x)),
    ),
    (
        "deleting_the_current_version_brings_the_one_before_it_back",
        |s, x| Box::pin(checks::deleting_the_current_version_brings_the_one_before_it_back(s, x)),
    ),
    (
        "every_version_under_a_prefix_is_listed_and_deleting_each_leaves_nothing",
        |s, x| {
            Box::pin(
                checks::every_version_under_a_prefix_is_listed_and_deleting_each_leaves_nothing(
                    s, x,
                ),
            )
        },
    ),
    (
        "more_versions_than_a_page_holds_are_all_listed_once",
        |s, x| {
            Box::pin(checks::more_versions_than_a_page_holds_are_all_listed_once(
                s, x,
            ))
        },
    ),
    ("exactly_one_of_32_racing_creates_wins", |s, x| {
        Box::pin(checks::exactly_one_of_32_racing_creates_wins(s, x))
    }),
    ("sixteen_racing_cas_increments_count_exactly", |s, x| {
        Box::pin(checks::sixteen_racing_cas_increments_count_exactly(s, x))
    }),
];

/// Runs every check of [`CHECKS`], each on a store of its own from `fresh`
/// (a new, empty bucket, or a new prefix of one), expecting `expect`. Panics
/// at the first check the store fails, naming it.
pub async fn run<F, Fut>(mut fresh: F, expect: Expect)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Arc<dyn Store>>,
{
    for (name, check) in CHECKS {
        let store = fresh().await;
        // A check's panic, named: the first line a failing run shows.
        if let Err(panic) = tokio::spawn(check(store, expect.clone())).await {
            panic!("store conformance: {name} failed: {panic}");
        }
    }
}
