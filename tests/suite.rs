//! The integration tests, one crate: `tests/common/` (what the files share)
//! compiles once, and so does every file, each a module of this crate
//! (docs/layout.md, "Tests"). A file of tests/ that is not declared here
//! would never run: [`every_test_file_is_a_module_of_the_suite`] says so.
//!
//! Needs the `testing` feature (fault injection), which `make test` turns
//! on: `cargo test --features testing` (one file: `-- recovery::`).

mod common;

mod batch;
mod bucket_setup;
mod cli;
mod clock;
mod concurrency;
mod due_events;
mod due_queue;
mod fuzz;
mod interop;
mod lambda_e2e;
mod model;
mod numbers;
mod options;
mod phase;
mod protocol;
mod recovery;
mod s3_faults;
mod s3_status;
mod schemas;
mod store_conformance;
mod submit_handler;
mod sweep;
mod sweep_lambda;
mod template;
mod versioning;

/// Every `.rs` file of tests/ is declared above: a file left out would
/// compile nowhere and run never.
#[test]
fn every_test_file_is_a_module_of_the_suite() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests");
    let declared = include_str!("suite.rs");
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let Some(stem) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        if path.extension().is_some_and(|e| e == "rs") && stem != "suite" {
            assert!(
                declared.contains(&format!("\nmod {stem};\n")),
                "tests/{stem}.rs is not a module of tests/suite.rs: add `mod {stem};`"
            );
        }
    }
}
