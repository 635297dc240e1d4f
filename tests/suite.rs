//! The integration tests, one crate: `tests/common/` (what the files share)
//! compiles once for all of them, and every file is a module of this crate
//! (docs/layout.md, "Tests"), but for the three of [`OWN_CRATES`]. A file of
//! tests/ declared nowhere would never run:
//! [`every_test_file_is_a_module_of_the_suite`] says so.
//!
//! Needs the `testing` feature (fault injection), which `make test` turns
//! on: `cargo test --features testing` (one file: `-- recovery::`).

#[macro_use]
mod common;

mod batch;
mod bucket_setup;
mod chaos;
mod cli;
mod clock;
mod due_events;
mod due_queue;
mod due_submitter;
mod fuzz;
mod interop;
mod keys;
mod lambda_e2e;
mod layout;
mod model;
mod numbers;
mod options;
mod phase;
mod prefix_rates;
mod probe;
mod protocol;
mod readme;
mod recovery;
mod reuse;
mod s3_status;
mod scale;
mod schemas;
mod seaweedfs;
mod sources_binary;
mod sources_events;
mod sources_moto;
mod store_conformance;
mod submit_handler;
mod sweep;
mod sweep_lambda;
mod sweep_pass;
mod template;
mod template_sources;
mod versioning;

/// The test files that are crates of their own (Cargo.toml's `[[test]]`),
/// because each needs the one moto server, served one request at a time, to
/// itself: `concurrency` sends it 1,280 submits at once, which starves the
/// 500 ms attempts of any test beside it; `s3_faults` counts the answers
/// that come within its attempts' timeouts. Cargo runs test crates one after
/// another, so neither meets another test. `exhaustive`, the checker, needs
/// no S3 but is its own so that a mutant of the library rebuilds a small
/// crate, not this one (docs/decisions.md, "The exhaustive checker").
const OWN_CRATES: [&str; 3] = ["concurrency", "s3_faults", "exhaustive"];

/// Every `.rs` file of tests/ is declared above, or is a crate of its own,
/// and every `.rs` file of a module's folder (tests/sweep/ beside
/// tests/sweep.rs) is declared in that module's file: a file left out would
/// compile nowhere and run never.
#[test]
fn every_test_file_is_a_module_of_the_suite() {
    let dir = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests"));
    let declared = include_str!("suite.rs");
    let manifest = include_str!("../Cargo.toml");
    for own in OWN_CRATES {
        assert!(
            manifest.contains(&format!("path = \"tests/{own}.rs\"")),
            "tests/{own}.rs is a crate of its own: Cargo.toml declares it as a [[test]]"
        );
    }
    for (stem, is_rs) in entries(dir) {
        if is_rs && stem != "suite" && !OWN_CRATES.contains(&stem.as_str()) {
            assert!(
                declared.contains(&format!("\nmod {stem};\n")),
                "tests/{stem}.rs is not a module of tests/suite.rs: add `mod {stem};`"
            );
        }
        // A module's folder: each file in it a `mod` of the module's file
        // (tests/common/ has its own mod.rs, which the same check reads).
        let folder = dir.join(&stem);
        let parent = [dir.join(format!("{stem}.rs")), folder.join("mod.rs")]
            .into_iter()
            .find(|p| p.is_file());
        if let (false, Some(parent)) = (is_rs, parent) {
            let text = std::fs::read_to_string(&parent).unwrap();
            let line = |child: &str| format!("mod {child};");
            let declares = |child: &str| {
                text.lines().any(|l| {
                    // `mod x;` with any visibility (`pub`, `pub(crate)`, ...).
                    let l = l.trim_start();
                    let l = l.strip_prefix("pub").map_or(l, |rest| {
                        rest.strip_prefix(' ')
                            .or_else(|| rest.split_once(") ").map(|(_, m)| m))
                            .unwrap_or(rest)
                    });
                    l == line(child)
                })
            };
            for (child, child_rs) in entries(&folder) {
                assert!(
                    !child_rs || child == "mod" || declares(&child),
                    "tests/{stem}/{child}.rs is not a module of {}: add `mod {child};`",
                    parent.display()
                );
            }
        }
    }
}

/// The entries of `dir`: each one's stem, and whether it is a `.rs` file.
fn entries(dir: &std::path::Path) -> Vec<(String, bool)> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter_map(|path| {
            let stem = path.file_stem()?.to_str()?.to_owned();
            Some((stem, path.extension().is_some_and(|e| e == "rs")))
        })
        .collect()
}
