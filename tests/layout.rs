//! What docs/layout.md claims of the imports, checked on the source: the
//! store layer stands on the clock alone, and every AWS SDK client is built
//! in src/aws/.

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out.sort();
    out
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

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
