//! What docs/layout.md claims of the code, checked on the source: no two
//! files import each other, even through others, and no layer imports one
//! above it; the store layer stands on the clock alone; every AWS SDK client
//! is built in src/aws/; no file of src/ or tests/ is over 700 lines, no
//! function over 100.

mod scan;

use std::collections::{BTreeMap, BTreeSet};

use scan::{a_cycle, functions, import_graph, layer, rust_files, src};

/// Each `crate::<module>` a file names, in code or in `use`.
fn crate_modules(text: &str) -> Vec<String> {
    text.match_indices("crate::")
        .filter(|(i, _)| !text[..*i].ends_with('$')) // a macro's `$crate::`
        .map(|(i, m)| {
            text[i + m.len()..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect()
        })
        .collect()
}

#[test]
fn the_store_layer_imports_nothing_of_the_crate_but_the_clock() {
    let mut above = Vec::new();
    for file in rust_files(&src().join("store")) {
        let text = std::fs::read_to_string(&file).unwrap();
        for m in crate_modules(&text) {
            // Its own layer, by its full path, and the clock below it.
            if m != "clock" && m != "store" {
                above.push(format!("{}: crate::{m}", file.display()));
            }
        }
    }
    assert!(above.is_empty(), "store/ reaches up a layer: {above:#?}");
}

#[test]
fn every_aws_sdk_client_is_configured_in_src_aws_only() {
    let aws = src().join("aws");
    let mut elsewhere = Vec::new();
    for file in rust_files(&src()) {
        if file.starts_with(&aws) {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        for needle in ["aws_config::defaults", "config::Builder::", "tls_provider("] {
            if text.contains(needle) {
                elsewhere.push(format!("{}: {needle}", file.display()));
            }
        }
    }
    assert!(elsewhere.is_empty(), "{elsewhere:#?}");
    // And the check can see one: src/aws/ does build them.
    let here = std::fs::read_to_string(aws.join("mod.rs")).unwrap();
    assert!(here.contains("aws_config::defaults") && here.contains("tls_provider("));
}

#[test]
fn no_file_of_the_library_imports_itself_through_others() {
    let graph = import_graph();
    // The scan sees imports: `use`, `super::`, and a name followed through
    // its folder's re-export to the file that defines it.
    assert!(
        graph["queue.rs"].contains("protocol/engine.rs"),
        "{:?}",
        graph["queue.rs"]
    );
    assert!(graph["protocol/submit.rs"].contains("protocol/engine.rs"));
    assert_eq!(a_cycle(&graph), None, "an import cycle among src/'s files");
}

#[test]
fn no_layer_imports_a_layer_above_it() {
    let mut layers: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (file, imports) in import_graph() {
        let from = layer(&file);
        for to in imports.iter().map(|f| layer(f)) {
            if to != from && from != "lib" {
                layers.entry(from.clone()).or_default().insert(to);
            }
        }
    }
    assert!(layers["protocol"].contains("store") && layers["queue"].contains("protocol"));
    // Layers that import each other, through others or not, stand on no
    // floors: one of them imports back up.
    assert_eq!(a_cycle(&layers), None, "layers in a circle: {layers:#?}");
}

/// The guide's sizes: a file does one job in at most 700 lines, a function
/// one step in at most 100 (its `fn` line to its closing brace). The tests
/// are held to it as the library is, every file of tests/ with no exception.
#[test]
fn every_file_of_src_and_tests_is_at_most_700_lines_and_every_function_100() {
    let tests = src().with_file_name("tests");
    let mut over = Vec::new();
    for file in rust_files(&src()).into_iter().chain(rust_files(&tests)) {
        let text = std::fs::read_to_string(&file).unwrap();
        let lines = text.lines().count();
        if lines > 700 {
            over.push(format!("{}: {lines} lines", file.display()));
        }
        for (name, len) in functions(&text) {
            if len > 100 {
                over.push(format!("{}: fn {name}, {len} lines", file.display()));
            }
        }
    }
    assert!(over.is_empty(), "{over:#?}");
}

#[test]
fn the_function_scan_measures_a_body_from_its_fn_line_to_its_closing_brace() {
    let text = "impl A {\n    pub async fn f(x: &'a str) {\n        let c = '{';\n        g(\"}\");\n    }\n    fn declared();\n}\nfn h() {}\n";
    assert_eq!(
        functions(text),
        vec![("f".to_owned(), 4), ("h".to_owned(), 1)]
    );
}
