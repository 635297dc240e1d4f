//! What the mutation rerun of `sweep/` (issue 51) found no test for: each
//! test here fails with a mutant the suite let through (docs/testing.md's
//! rows name them). In memory, on the manual clock.

use super::*;

use async_trait::async_trait;
use idempotent_submit::SubmitError;
use idempotent_submit::testing::protocol::ShareOutcome;

use crate::common::{Call, Hooks, Wrapped};

const CHECKPOINT: &str = "sweeper/checkpoint.json";

/// A store whose GETs of the checkpoint take `slow` of the clock each and
/// then fail (a 503): S3 too slow to answer before a deadline.
struct SlowCheckpoint {
    inner: MemoryStore,
    clock: ManualClock,
    slow: Duration,
}

#[async_trait]
impl Hooks for SlowCheckpoint {
    type Inner = MemoryStore;

    fn inner(&self) -> &MemoryStore {
        &self.inner
    }
    async fn before(&self, call: &Call<'_>) -> Result<(), StoreError> {
        if call.op == Op::Get && call.key == CHECKPOINT {
            self.clock.advance(self.slow);
            return Err(StoreError::Unavailable("503".into()));
        }
        Ok(())
    }
}

/// An empty bucket's queue with `settings`, its store's checkpoint GETs
/// as `slow` says (zero: as the store answers), and the bucket and clock.
fn queue(
    settings: idempotent_submit::Settings,
    slow: Option<Duration>,
) -> (Queue, MemoryStore, ManualClock) {
    let clock = ManualClock::at_epoch();
    let bucket = common::memory_store(&clock);
    let q = match slow {
        Some(slow) => {
            let store = Wrapped(SlowCheckpoint {
                inner: bucket.clone(),
                clock: clock.clone(),
                slow,
            });
            Queue::with_clock(store, Arc::new(clock.clone()), settings)
        }
        None => Queue::with_clock(bucket.clone(), Arc::new(clock.clone()), settings),
    };
    (q, bucket, clock)
}

async fn share(q: &Queue, opts: SweepOptions) -> Result<ShareOutcome, SubmitError> {
    q.engine().sweep_share(&opts, None).await
}

/// `share.rs` `sweep_share`: the summary's `dry_run` (the field, or the
/// whole summary, left at its default).
#[tokio::test]
async fn a_dry_run_share_says_in_its_summary_that_it_was_one_and_writes_nothing() {
    let (q, bucket, _) = queue(common::settings(), None);
    let o = share(
        &q,
        SweepOptions {
            dry_run: true,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert!(o.summary.dry_run, "{o:?}");
    assert!(bucket.keys().is_empty(), "{:?}", bucket.keys());
    let real = share(&q, SweepOptions::default()).await.unwrap();
    assert!(!real.summary.dry_run, "{real:?}");
}

/// `share.rs` `sweep_share`: `idle: true` until the first claim (an
/// invocation begun past its deadline claims nothing).
#[tokio::test]
async fn a_share_begun_past_its_deadline_is_idle_and_reads_and_writes_nothing() {
    let (q, bucket, clock) = queue(common::settings(), None);
    let o = share(
        &q,
        SweepOptions {
            deadline: Some(clock.now()),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert!(o.idle, "{o:?}");
    assert_eq!((o.summary.busy, o.summary.lists), (false, 0), "{o:?}");
    assert!(bucket.keys().is_empty(), "{:?}", bucket.keys());
}

/// `share.rs` `sweep_share`: the loop's `!past && !budget_spent` (`||`
/// claims with a budget spent before the first claim).
#[tokio::test]
async fn a_share_bounded_to_no_records_claims_nothing() {
    let (q, bucket, _) = queue(common::settings(), None);
    let o = share(
        &q,
        SweepOptions {
            max_records: Some(0),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert!(o.idle, "{o:?}");
    assert!(bucket.keys().is_empty(), "{:?}", bucket.keys());
}

/// `share.rs` `sweep_share`: a claim cut short by the invocation's own
/// deadline ends the share without an error (the guard `self.past(opts)`
/// made `false`).
#[tokio::test]
async fn a_share_whose_deadline_comes_while_it_reads_the_checkpoint_ends_without_an_error() {
    let (q, bucket, clock) = queue(short_ttl_settings(), Some(Duration::minutes(2)));
    let o = share(
        &q,
        SweepOptions {
            deadline: Some(clock.now() + Duration::minutes(1)),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert!(o.idle, "{o:?}");
    assert!(bucket.keys().is_empty(), "{:?}", bucket.keys());
}

/// `share.rs` `sweep_share`: a claim whose read outlasts one operation's
/// time, the invocation's deadline far off, is the store's failure: an
/// error, so that the message comes again (the guard made `true` ends it
/// as if its deadline had come).
#[tokio::test]
async fn a_share_whose_checkpoint_read_outlasts_its_operation_time_is_an_error() {
    let settings = idempotent_submit::Settings {
        operation_timeout: Duration::minutes(1),
        ..short_ttl_settings()
    };
    let (q, bucket, _) = queue(settings, Some(Duration::minutes(2)));
    let o = share(&q, SweepOptions::default()).await;
    assert!(matches!(o, Err(SubmitError::DeadlineExceeded)), "{o:?}");
    assert!(bucket.keys().is_empty(), "{:?}", bucket.keys());
}
