//! The integration tests, one crate: `tests/common/` (what the files share)
//! compiles once for all of them, and every file is a module of this crate
//! (docs/layout.md, "Tests"), but for the two of [`OWN_CRATES`]. A file of
//! tests/ declared nowhere would never run:
//! [`every_test_file_is_a_module_of_the_suite`] says so.
//!
//! Needs the `testing` feature (fault injection), which `make test` turns
//! on: `cargo test --features testing` (one file: `-- recovery::`).

mod common;

mod batch;
mod bucket_setup;
mod chaos;
mod cli;
mod clock;
mod due_events;
mod due_queue;
mod due_submitter;
mod exhaustive;
mod fuzz;
mod interop;
mod keys;
mod lambda_e2e;
mod layout;
mod model;
mod numbers;
mod options;
mod phase;
mod probe;
mod protocol;
mod readme;
mod recovery;
mod reuse;
mod s3_status;
mod schemas;
mod seaweedfs;
mod store_conformance;
mod submit_handler;
mod sweep;
mod sweep_lambda;
mod template;
mod versioning;

/// The test files that are crates of their own (Cargo.toml's `[[test]]`),
/// because each needs the one moto server, served one request at a time, to
/// itself: `concurrency` sends it 1,280 submits at once, which starves the
/// 500 ms attempts of any test beside it; `s3_faults` counts the answers
/// that come within its attempts' timeouts. Cargo runs test crates one after
/// another, so neither meets another test.
const OWN_CRATES: [&str; 2] = ["concurrency", "s3_faults"];

/// Every `.rs` file of tests/ is declared above, or is a crate of its own:
/// a file left out would compile nowhere and run never.
#[test]
fn every_test_file_is_a_module_of_the_suite() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests");
    let declared = include_str!("suite.rs");
    let manifest = include_str!("../Cargo.toml");
    for own in OWN_CRATES {
        assert!(
            manifest.contains(&format!("path = \"tests/{own}.rs\"")),
            "tests/{own}.rs is a crate of its own: Cargo.toml declares it as a [[test]]"
        );
    }
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let Some(stem) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        if path.extension().is_some_and(|e| e == "rs")
            && stem != "suite"
            && !OWN_CRATES.contains(&stem)
        {
            assert!(
                declared.contains(&format!("\nmod {stem};\n")),
                "tests/{stem}.rs is not a module of tests/suite.rs: add `mod {stem};`"
            );
        }
    }
}
