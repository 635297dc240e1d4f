//! Worlds written for the mutants of issue 46's last mutation stream (the
//! 137 of main's 321 that no shard had run; docs/testing.md, "The 137
//! never run"), on the three stores, as `worlds.rs`'s.

use super::actors::Role;
use super::prelude::Prelude;
use super::sim::Spec;
use super::worlds::{STORES, holds, spec};

#[test]
fn a_dry_run_and_the_sweeper_on_an_expired_record_answer_what_the_sweeper_does() {
    for store in STORES {
        // A key answered an hour ago, the clock at its record's expiry and
        // its S3 event due: a dry run of the sweeper on the record (it
        // writes nothing, and answers the deletion a real run makes) beside
        // the sweeper on the event (which deletes it, and says so), the
        // clock stepping once. Added for the mutants of
        // `Engine::sweep_read`'s `dry_run` guard and of
        // `Engine::deletion_owed`.
        let w = Spec {
            prelude: Prelude::Expired,
            deliver: true,
            advances: 1,
            depth: 5,
            ..spec(
                "an expired record, a dry run, the sweeper",
                store,
                vec![Role::DrySweep { key: "k" }],
            )
        };
        holds(w);
    }
}
