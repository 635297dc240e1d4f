//! A reader of src/ as plain text, for the layout's claims: which file
//! imports which (`crate::` and `super::` paths, `use` trees, re-exports
//! followed to the file that defines the name), and how long each function
//! is. No parser: the source's own conventions (rustfmt's layout, `use` at
//! the top, one `#[cfg(test)] mod tests` at the end) make a scan enough, and
//! the tests that use it check that it sees what it must.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, sorted.
pub fn rust_files(dir: &Path) -> Vec<PathBuf> {
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

pub fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The library's code of a file: its unit tests (the `#[cfg(test)]` module
/// at its end) and its comments left out, since neither is an import.
pub fn code_of(text: &str) -> String {
    let end = text.find("\n#[cfg(test)]\nmod ").unwrap_or(text.len());
    text[..end]
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A file of the library (not src/bin/, whose binaries are crates of their
/// own) with its module path: `protocol/submit.rs` is `["protocol",
/// "submit"]`, a `mod.rs` its folder's, `lib.rs` the empty path.
pub struct Module {
    pub file: String,
    pub path: Vec<String>,
    code: String,
}

pub fn modules() -> Vec<Module> {
    let src = src();
    rust_files(&src)
        .into_iter()
        .filter(|f| !f.starts_with(src.join("bin")))
        .map(|f| {
            let rel = f.strip_prefix(&src).unwrap().to_string_lossy().into_owned();
            let mut path: Vec<String> = rel
                .trim_end_matches(".rs")
                .split('/')
                .map(str::to_owned)
                .collect();
            if matches!(path.last().map(String::as_str), Some("mod" | "lib")) {
                path.pop();
            }
            let code = code_of(&std::fs::read_to_string(&f).unwrap());
            Module {
                file: rel,
                path,
                code,
            }
        })
        .collect()
}

/// The paths of every `use` tree in `code`, flattened (`a::{b, c::d}` is
/// `a::b` and `a::c::d`), each with whether it is a re-export (`pub use`).
fn use_paths(code: &str) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("use ") {
        let before = &rest[..i];
        let at_start = before.is_empty() || before.ends_with(['\n', ' ', '\t', '{', ';']);
        let stmt_end = rest[i..].find(';').map_or(rest.len(), |e| i + e);
        if at_start {
            let line_start = before.rfind('\n').map_or(0, |n| n + 1);
            let reexport = before[line_start..].trim_start().starts_with("pub");
            let tree: String = rest[i + 4..stmt_end]
                .chars()
                .filter(|c| !c.is_whitespace())
                .collect();
            for p in flatten("", &tree) {
                out.push((p, reexport));
            }
        }
        rest = &rest[stmt_end.min(rest.len() - 1) + 1..];
        if rest.is_empty() {
            break;
        }
    }
    out
}

/// `prefix` joined to each path of the use tree `tree`.
fn flatten(prefix: &str, tree: &str) -> Vec<String> {
    let join = |p: &str| {
        if prefix.is_empty() {
            p.to_owned()
        } else {
            format!("{prefix}::{p}")
        }
    };
    let Some(open) = tree.find('{') else {
        // `a as b`: the path is `a`.
        let path = tree.split("as").next().unwrap_or(tree);
        return vec![join(path.trim_end_matches("::"))];
    };
    let head = join(tree[..open].trim_end_matches("::"));
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .filter(|p| !p.is_empty())
        .flat_map(|p| match p {
            "self" => vec![head.clone()],
            _ => flatten(&head, p),
        })
        .collect()
}

/// Every `crate::`/`super::` path written in code outside `use` (a type
/// named in full where it is used).
fn inline_paths(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    for start in ["crate::", "super::"] {
        for (i, _) in code.match_indices(start) {
            let before = code[..i].chars().last();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$' || c == ':') {
                continue;
            }
            let path: String = code[i..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            out.push(path.trim_end_matches(':').to_owned());
        }
    }
    out
}

/// A path as written in `module`, made absolute (from the crate's root);
/// `None` for another crate's. `known` holds every module's path.
fn absolute(module: &Module, path: &str, known: &BTreeSet<Vec<String>>) -> Option<Vec<String>> {
    let mut segs: Vec<&str> = path.split("::").collect();
    let mut base: Vec<String> = match segs.first().copied() {
        Some("crate") => Vec::new(),
        Some("super" | "self") => module.path.clone(),
        // A child module, named from its parent (`use engine::Engine;`).
        Some(child) => {
            let mut p = module.path.clone();
            p.push(child.to_owned());
            if !known.contains(&p) {
                return None;
            }
            module.path.clone()
        }
        None => return None,
    };
    if segs[0] == "crate" {
        segs.remove(0);
    }
    while segs.first() == Some(&"super") || segs.first() == Some(&"self") {
        if segs.remove(0) == "super" {
            base.pop()?;
        }
    }
    base.extend(segs.iter().map(|s| (*s).to_owned()));
    Some(base)
}

/// The import graph of the library's files: file → the files it imports,
/// each name followed through the re-exports (`pub use`) of a folder's
/// `mod.rs` or `lib.rs` to the file that defines it. A folder's own
/// declarations and re-exports of its files are no import of its: they only
/// hand names on.
pub fn import_graph() -> BTreeMap<String, BTreeSet<String>> {
    let mods = modules();
    let by_path: BTreeMap<Vec<String>, &Module> =
        mods.iter().map(|m| (m.path.clone(), m)).collect();
    let known: BTreeSet<Vec<String>> = by_path.keys().cloned().collect();
    // name re-exported by a face (its path, the name) → the absolute path.
    let mut reexports: BTreeMap<(Vec<String>, String), Vec<String>> = BTreeMap::new();
    for m in &mods {
        for (p, pub_use) in use_paths(&m.code) {
            let Some(abs) = absolute(m, &p, &known) else {
                continue;
            };
            if pub_use && let Some(name) = abs.last() {
                reexports.insert((m.path.clone(), name.clone()), abs.clone());
            }
        }
    }
    let resolve = |abs: &[String]| -> Option<String> {
        let mut abs = abs.to_vec();
        for _ in 0..8 {
            let (n, module) = (0..=abs.len())
                .rev()
                .find_map(|n| by_path.get(&abs[..n]).map(|m| (n, *m)))?;
            match abs.get(n) {
                Some(name) if reexports.contains_key(&(module.path.clone(), name.clone())) => {
                    abs = reexports[&(module.path.clone(), name.clone())].clone();
                }
                _ => return Some(module.file.clone()),
            }
        }
        None
    };
    let mut graph = BTreeMap::new();
    for m in &mods {
        let mut to = BTreeSet::new();
        let paths = use_paths(&m.code)
            .into_iter()
            .chain(inline_paths(&m.code).into_iter().map(|p| (p, false)));
        for (p, pub_use) in paths {
            let Some(abs) = absolute(m, &p, &known) else {
                continue;
            };
            // A face's own files, declared and handed on: not an import.
            if pub_use && abs.starts_with(&m.path) {
                continue;
            }
            if let Some(file) = resolve(&abs)
                && file != m.file
            {
                to.insert(file);
            }
        }
        graph.insert(m.file.clone(), to);
    }
    graph
}

/// A file's layer: its top folder under src/ (`protocol/sweep/pass.rs` is
/// `protocol`), or the file itself (`queue.rs` is `queue`).
pub fn layer(file: &str) -> String {
    file.split('/')
        .next()
        .unwrap()
        .trim_end_matches(".rs")
        .to_owned()
}

/// A cycle of `graph`, if it has one: its nodes in order.
pub fn a_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        stack: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = stack.iter().position(|s| s == n) {
            return Some(stack[at..].to_vec());
        }
        if done.contains(n) {
            return None;
        }
        stack.push(n.to_owned());
        for next in graph.get(n).into_iter().flatten() {
            if let Some(c) = visit(next, graph, stack, done) {
                return Some(c);
            }
        }
        stack.pop();
        done.insert(n.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|n| visit(n, graph, &mut Vec::new(), &mut done))
}

/// Each function of `text` with its length in lines, from its `fn` line to
/// its closing brace. Braces are counted outside strings, chars and
/// comments; a declaration without a body (`fn f();`) is none.
pub fn functions(text: &str) -> Vec<(String, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let t = line.trim_start();
        let Some(at) = t.find("fn ") else { continue };
        let head = &t[..at];
        let qualifiers = head
            .split_whitespace()
            .all(|w| w.starts_with("pub") || ["async", "const", "unsafe", "extern"].contains(&w));
        if !qualifiers || t.starts_with("//") {
            continue;
        }
        let name: String = t[at + 3..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if let Some(end) = body_end(&lines, i) {
            out.push((name, end - i + 1));
        }
    }
    out
}

/// The line where the body that opens at or after `from` closes.
fn body_end(lines: &[&str], from: usize) -> Option<usize> {
    let mut depth = 0i32;
    let mut opened = false;
    let mut in_str = false;
    for (n, line) in lines.iter().enumerate().skip(from) {
        let mut chars = line.chars().peekable();
        let mut prev = ' ';
        while let Some(c) = chars.next() {
            if in_str {
                match c {
                    '\\' => {
                        chars.next();
                    }
                    '"' => in_str = false,
                    _ => {}
                }
            } else {
                match c {
                    '/' if chars.peek() == Some(&'/') => break,
                    '"' => in_str = true,
                    // A char literal: `'{'`, `'}'`, `'"'` (not a lifetime).
                    '\'' if prev != '\\' => {
                        let rest: String = chars.clone().take(3).collect();
                        if rest.len() >= 2 && rest.chars().nth(1) == Some('\'') {
                            chars.next();
                            chars.next();
                        } else if rest.starts_with('\\') && rest.chars().nth(2) == Some('\'') {
                            chars.nth(2);
                        }
                    }
                    ';' if !opened && depth == 0 => return None,
                    '{' => {
                        depth += 1;
                        opened = true;
                    }
                    '}' => {
                        depth -= 1;
                        if opened && depth == 0 {
                            return Some(n);
                        }
                    }
                    _ => {}
                }
            }
            prev = c;
        }
    }
    None
}
