//! What the mutation run of `sweep/pass.rs` (issue 51) found no test for:
//! each test here fails with a mutant the suite let through (docs/
//! testing.md's rows name them). In memory.

use super::*;

use crate::common::{Call, Hooks, Wrapped};
use std::sync::atomic::{AtomicBool, Ordering};

/// A store whose first LIST of the scope `t`'s records takes two minutes
/// of the clock and then fails with `answer`. A 503: a listing that
/// outlasts its operation time, the run's deadline far off, so that the
/// store says no error of its own (the retry loop answers `Deadline`).
struct HungListing {
    inner: MemoryStore,
    clock: ManualClock,
    hung: AtomicBool,
    answer: fn() -> StoreError,
}

impl HungListing {
    fn over(w: &World, answer: fn() -> StoreError) -> Wrapped<HungListing> {
        Wrapped(HungListing {
            inner: w.bucket.clone(),
            clock: w.clock.clone(),
            hung: AtomicBool::new(false),
            answer,
        })
    }
}

#[async_trait::async_trait]
impl Hooks for HungListing {
    type Inner = MemoryStore;

    fn inner(&self) -> &MemoryStore {
        &self.inner
    }

    async fn before(&self, call: &Call<'_>) -> Result<(), StoreError> {
        let records = call.op == Op::List && call.key == "idempotency/t/";
        if records && !self.hung.swap(true, Ordering::SeqCst) {
            self.clock.advance(Duration::minutes(2));
            return Err((self.answer)());
        }
        Ok(())
    }
}

#[tokio::test]
async fn a_record_listing_that_outlasts_its_operation_time_counts_one_error_and_its_range_is_listed_next_run()
 {
    let w = World::with_stale(&["a", "b"]).await;
    let hung = HungListing::over(&w, || StoreError::Unavailable("503".into()));
    let s = w.sweep_over(hung).await;
    assert_eq!((s.errors, s.reads, s.complete), (1, 0, false), "{s:?}");
    let s = w.sweep(false).await;
    assert_eq!((s.errors, s.finished, s.complete), (0, 2, true), "{s:?}");
}

#[tokio::test]
async fn a_record_listing_refused_after_the_runs_deadline_is_one_error_and_its_range_is_handed_on()
{
    let w = World::with_stale(&["a", "b"]).await;
    let refused = HungListing::over(&w, || StoreError::Fatal("refused".into()));
    let q = w.queue_over(refused);
    // The run's deadline comes while the listing hangs.
    let deadline = Some(w.clock.now() + Duration::minutes(1));
    let opts = SweepOptions {
        deadline,
        ..Default::default()
    };
    let s = q.engine().sweep(&opts).await.unwrap();
    assert_eq!((s.errors, s.reads, s.complete), (1, 0, false), "{s:?}");
    // The next run lists it, and the pass completes.
    let s = w.sweep(false).await;
    assert_eq!((s.errors, s.finished, s.complete), (0, 2, true), "{s:?}");
}

#[tokio::test]
async fn a_pass_begun_by_an_earlier_version_goes_on_from_scope_to_scope_after_its_place_and_counts_each_listing()
 {
    let (clock, bucket) = dense_bucket(&[("a", 3), ("b", 4), ("c", 5)]).await;
    clock.advance(Duration::hours(2));
    // An earlier version's pass, its place past the scope `a`: it found
    // its scopes a key at a time.
    let earlier = json!({
        "previous_pass": null,
        "pass": clock.now(),
        "complete": false,
        "ranges": [{"kind": "scopes", "after": "idempotency/a/\u{10FFFF}"}],
    });
    let body = serde_json::to_vec(&earlier).unwrap().into();
    let put = bucket.put("sweeper/checkpoint.json", body, PutMode::Create);
    put.await.unwrap();
    let f = FaultyStore::new(bucket.clone());
    let q = Queue::with_clock(f.clone(), Arc::new(clock.clone()), short_ttl_settings());
    let s = q.engine().sweep(&SweepOptions::default()).await.unwrap();
    // The scopes after its place, each record read and deleted once; `a`'s
    // (done before it) not listed again.
    assert!(s.complete && s.errors == 0, "{s:?}");
    assert_eq!((s.scanned, s.expired_deleted), (9, 9), "{s:?}");
    let left = bucket.keys();
    let left: Vec<_> = left
        .iter()
        .filter(|k| k.starts_with("idempotency/"))
        .collect();
    assert_eq!(left.len(), 3, "{left:?}");
    assert!(left.iter().all(|k| k.starts_with("idempotency/a/")));
    // Every LIST it made is in its summary: the key a listing of the
    // scopes asks for, and the scopes' pages.
    let lists = f.calls().iter().filter(|c| c.op == Op::List).count();
    assert_eq!(s.lists, lists as u64, "{s:?}");
}
