//! What the mutation run of `sweep/tail.rs` (issue 51) found no test for:
//! each test here fails with a mutant the suite let through (docs/
//! testing.md's rows name them). In memory, on tokio's paused clock.

use super::*;

use super::tail::{Invocations, Paused};

/// A tail whose one item can never move on: every LIST of `payloads/`
/// (the tail's first page) takes a minute, an invocation 3 s.
fn stuck_tail() -> Invocations {
    let clock = Paused::new();
    let bucket = MemoryStore::new(Arc::new(clock.clone()) as Arc<dyn Clock>);
    let slow = ("payloads/", 60_000);
    Invocations::with_slow_lists(&bucket, &clock, ListOrder::Bytes, slow)
}

#[tokio::test(start_paused = true)]
async fn a_tail_item_that_makes_no_progress_in_two_whole_invocations_is_given_up_and_the_pass_completes_without_moving_the_cursor()
 {
    let pass = stuck_tail();
    let r = pass.drive(Some(3)).await;
    assert_eq!(r.passes().len(), 1, "{:?}", r.cursors);
    assert!(r.outcomes.len() <= 10, "{} invocations", r.outcomes.len());
    // Complete, the payload cursor where it was (the next pass checks the
    // payloads again).
    assert_eq!(r.cursors.last(), Some(&(true, 0)), "{:?}", r.cursors);
}
