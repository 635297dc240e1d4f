//! The README against what it describes, so that its tables cannot drift:
//! the table of stack parameters against template.yaml, the table of
//! variables against `src/config.rs` (and against the code's own defaults
//! and bounds, through `Config::from_lookup`), the commands against the
//! Makefile, the sample events against events/, the `BENCH_ONLY` sections
//! against the bench, and every figure it quotes against docs/benchmarks.md
//! and docs/reliability.md. Reads the files; needs no S3.

use std::collections::{BTreeMap, BTreeSet};

use idempotent_submit::{Config, ConfigError};

fn read(path: &str) -> String {
    let full = format!("{}/{path}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{full}: {e}"))
}

fn readme() -> String {
    read("README.md")
}

/// The rows of the markdown table whose header row starts with `header`
/// (e.g. `"| parameter | default |"`), each as its cells, trimmed.
fn table(doc: &str, header: &str) -> Vec<Vec<String>> {
    let start = doc
        .find(&format!("\n{header}"))
        .unwrap_or_else(|| panic!("a table headed {header:?}"));
    doc[start + 1..]
        .lines()
        .skip(2) // the header and its `| --- |` line
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            l.trim()
                .trim_start_matches('|')
                .trim_end_matches('|')
                .split(" | ")
                .map(|c| c.trim().to_owned())
                .collect()
        })
        .collect()
}

/// A cell without its code spans' backticks.
fn plain(cell: &str) -> String {
    cell.replace('`', "")
}

/// One parameter of template.yaml: what it is and what it allows.
#[derive(Debug, Default)]
struct Param {
    ty: String,
    default: Option<String>,
    min: Option<i64>,
    max: Option<i64>,
    allowed: Vec<String>,
    pattern: Option<String>,
}

fn unquote(v: &str) -> String {
    let v = v.trim();
    v.strip_prefix('\'')
        .and_then(|v| v.strip_suffix('\''))
        .unwrap_or(v)
        .to_owned()
}

/// The `Parameters:` section of template.yaml (two-space names, four-space
/// properties; descriptions are skipped).
fn template_params() -> BTreeMap<String, Param> {
    let t = read("template.yaml");
    let start = t
        .find("\nParameters:\n")
        .expect("template.yaml has Parameters");
    let mut out = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in t[start + 1..].lines().skip(1) {
        if !line.is_empty() && !line.starts_with(' ') {
            break; // the next top-level section
        }
        if let Some(name) = line.strip_prefix("  ").and_then(|l| l.strip_suffix(':'))
            && !name.starts_with(' ')
        {
            current = Some(name.to_owned());
            out.insert(name.to_owned(), Param::default());
            continue;
        }
        let (Some(name), Some(prop)) = (&current, line.strip_prefix("    ")) else {
            continue;
        };
        let Some((key, value)) = prop.split_once(": ") else {
            continue;
        };
        let p = out.get_mut(name).unwrap();
        let int = || value.trim().parse::<i64>().expect("a number");
        match key {
            "Type" => p.ty = value.trim().to_owned(),
            "Default" => p.default = Some(unquote(value)),
            "MinValue" => p.min = Some(int()),
            "MaxValue" => p.max = Some(int()),
            "AllowedPattern" => p.pattern = Some(unquote(value)),
            "AllowedValues" => {
                p.allowed = value
                    .trim()
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .split(',')
                    .map(unquote)
                    .collect()
            }
            _ => {}
        }
    }
    assert!(out.len() > 20, "template.yaml's parameters read: {out:?}");
    out
}

/// What the README's range cell must start with for `p`.
fn canonical_range(p: &Param) -> Option<String> {
    if !p.allowed.is_empty() {
        return Some(p.allowed.join(", "));
    }
    match (p.min, p.max, &p.pattern) {
        (Some(a), Some(b), _) => Some(format!("{a} to {b}")),
        (Some(a), None, _) => Some(format!("{a} or more")),
        (None, Some(b), _) => Some(format!("up to {b}")),
        (None, None, Some(_)) => None, // the pattern itself must be in the cell
        (None, None, None) => Some("any".to_owned()),
    }
}

fn canonical_default(p: &Param) -> String {
    match p.default.as_deref() {
        None => "required".to_owned(),
        Some("") => "empty".to_owned(),
        Some(v) => v.to_owned(),
    }
}

/// The README's table of stack parameters, by name: (default, range).
fn readme_params() -> BTreeMap<String, (String, String)> {
    table(&readme(), "| parameter | default | range | what it does |")
        .into_iter()
        .map(|r| {
            assert_eq!(r.len(), 4, "{r:?}");
            (plain(&r[0]), (plain(&r[1]), r[2].clone()))
        })
        .collect()
}

/// The names `a` has and `b` lacks.
fn lacking<'a, V, W>(a: &'a BTreeMap<String, V>, b: &BTreeMap<String, W>) -> Vec<&'a String> {
    a.keys().filter(|k| !b.contains_key(*k)).collect()
}

#[test]
fn the_readme_names_every_stack_parameter_with_the_templates_default_and_range() {
    let template = template_params();
    let readme = readme_params();
    let missing = lacking(&template, &readme);
    assert!(
        missing.is_empty(),
        "parameters the README does not name: {missing:?}"
    );
    let extra = lacking(&readme, &template);
    assert!(
        extra.is_empty(),
        "the README names parameters template.yaml has not: {extra:?}"
    );
    for (name, p) in &template {
        let (default, range) = &readme[name];
        assert_eq!(default, &canonical_default(p), "{name}'s default");
        let range = plain(range);
        match canonical_range(p) {
            Some(want) => {
                let rest = range.strip_prefix(&want).unwrap_or_else(|| {
                    panic!("{name}'s range in the README is {range:?}; template.yaml says {want:?}")
                });
                assert!(
                    rest.is_empty() || rest.starts_with(" ("),
                    "{name}: {range:?} goes on past {want:?} other than with a reason in parentheses"
                );
            }
            None => {
                let pattern = p.pattern.as_deref().unwrap();
                assert!(
                    range.contains(pattern),
                    "{name}'s range {range:?} does not show template.yaml's pattern {pattern}"
                );
            }
        }
    }
}

/// The environment variables template.yaml sets, each with the name it
/// references (`!Ref X`, also inside an `!If`).
fn template_env() -> BTreeMap<String, String> {
    let t = read("template.yaml");
    let mut out = BTreeMap::new();
    for line in t.lines() {
        let l = line.trim_start();
        let Some((var, value)) = l.split_once(": ") else {
            continue;
        };
        let is_var = !var.is_empty()
            && var
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
        if !is_var {
            continue;
        }
        if let Some(i) = value.find("!Ref ") {
            let name: String = value[i + 5..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == ':')
                .collect();
            out.insert(var.to_owned(), name);
        } else {
            out.insert(var.to_owned(), String::new());
        }
    }
    out
}

/// Every variable `src/config.rs` reads: each string literal passed to its
/// readers (`get`, `parse_num`, `parse_bool`, `days`, `secs`, `nonempty`),
/// and each `&str` constant passed to `get`, outside its tests.
fn config_variables() -> BTreeSet<String> {
    let src = read("src/config/env.rs");
    let code = &src[..src.find("#[cfg(test)]\nmod tests").unwrap_or(src.len())];
    let consts: BTreeMap<String, String> = code
        .lines()
        .filter_map(|l| {
            let l = l.trim().strip_prefix("pub ").unwrap_or(l.trim());
            let rest = l.strip_prefix("const ")?;
            let (name, value) = rest.split_once(": &str = \"")?;
            Some((name.to_owned(), value.strip_suffix("\";")?.to_owned()))
        })
        .collect();
    let mut out = BTreeSet::new();
    for reader in ["get", "parse_num", "parse_bool", "days", "secs", "nonempty"] {
        let call = format!("{reader}(");
        let mut rest = code;
        while let Some(i) = rest.find(&call) {
            // A whole word: not `forget(` or `Duration::days(`.
            let before = rest[..i].chars().next_back();
            rest = &rest[i + call.len()..];
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let arg = rest.trim_start();
            if let Some(lit) = arg.strip_prefix('"') {
                out.insert(lit[..lit.find('"').unwrap()].to_owned());
            } else {
                let ident: String = arg
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if let Some(v) = consts.get(&ident) {
                    out.insert(v.clone());
                }
            }
        }
    }
    assert!(out.len() >= 15, "config.rs's variables read: {out:?}");
    out
}

/// Variables in the README's table that `src/config.rs` does not read,
/// each read by something else the functions run.
const READ_ELSEWHERE: [&str; 2] = [
    // The AWS SDK's own endpoint override for S3 (template.yaml sets it
    // from S3Endpoint).
    "AWS_ENDPOINT_URL_S3",
    // The event sources, parsed by src/intake/sources/ (an s3:// value is
    // read with an S3 client, which config.rs does not build).
    "SOURCES",
];

/// The README's table of variables, by name: (default, stack parameter).
fn readme_variables() -> BTreeMap<String, (String, String)> {
    table(
        &readme(),
        "| variable | default | stack parameter | what it does |",
    )
    .into_iter()
    .map(|r| {
        assert_eq!(r.len(), 4, "{r:?}");
        (plain(&r[0]), (plain(&r[1]), plain(&r[2])))
    })
    .collect()
}

#[test]
fn the_readme_names_every_variable_config_reads_and_no_other() {
    let code = config_variables();
    let readme = readme_variables();
    let missing: Vec<_> = code.iter().filter(|v| !readme.contains_key(*v)).collect();
    assert!(
        missing.is_empty(),
        "variables config.rs reads that the README does not name: {missing:?}"
    );
    for v in readme.keys() {
        if READ_ELSEWHERE.contains(&v.as_str()) {
            assert!(
                !code.contains(v),
                "config.rs reads {v} now: take it off READ_ELSEWHERE"
            );
        } else {
            assert!(
                code.contains(v),
                "the README names {v}, which config.rs does not read"
            );
        }
    }
}

#[test]
fn the_readme_says_which_stack_parameter_sets_each_variable() {
    let params = template_params();
    let env = template_env();
    for (var, (_, column)) in readme_variables() {
        match env.get(&var) {
            Some(p) if params.contains_key(p) => assert_eq!(
                column, *p,
                "template.yaml sets {var} from the parameter {p}; the README says {column:?}"
            ),
            Some(other) => assert!(
                column.starts_with("set by the stack"),
                "template.yaml sets {var} (from {other:?}), not from a parameter; the README says {column:?}"
            ),
            None => assert!(
                column.starts_with("no:"),
                "template.yaml does not set {var}: its column must say \"no: <why>\", not {column:?}"
            ),
        }
    }
}

/// What `Config::from_lookup` makes of `vars` on top of a bucket and a due
/// queue (so that `RECORD_EVENTS=submitter` stands alone).
fn config(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
    let mut all: BTreeMap<String, String> = [
        ("BUCKET_NAME", "b"),
        ("DUE_QUEUE_URL", "http://127.0.0.1:1/q"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    for (k, v) in vars {
        all.insert((*k).to_owned(), (*v).to_owned());
    }
    Config::from_lookup(|k| all.get(k).cloned())
}

#[test]
fn each_default_in_the_readmes_table_of_variables_is_the_codes_default() {
    let base = config(&[]).expect("the defaults are a valid configuration");
    let mut checked = 0;
    for (var, (default, _)) in readme_variables() {
        if matches!(default.as_str(), "required" | "unset")
            || READ_ELSEWHERE.contains(&var.as_str())
        {
            continue;
        }
        let with = config(&[(var.as_str(), default.as_str())])
            .unwrap_or_else(|e| panic!("{var}={default} (the README's default) is refused: {e}"));
        assert_eq!(
            with, base,
            "{var}={default} is not what the code does without it"
        );
        checked += 1;
    }
    assert!(checked >= 15, "{checked} defaults checked");
}

/// What the code makes of one variable's value, the rest at their defaults.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Taken,
    /// Refused, naming the variable, for a reason that names no other.
    RefusedAlone,
    /// Refused for a rule between this variable and another (the longest
    /// TTL below the default one): the other's value decides.
    RefusedWithAnother,
}

fn verdict(var: &str, value: &str, names: &BTreeSet<String>) -> Verdict {
    match config(&[(var, value)]) {
        Ok(_) => Verdict::Taken,
        Err(e)
            if e.var == var
                && !names
                    .iter()
                    .any(|n| n != var && e.reason.contains(n.as_str())) =>
        {
            Verdict::RefusedAlone
        }
        Err(_) => Verdict::RefusedWithAnother,
    }
}

#[test]
fn every_value_the_template_allows_is_one_the_code_takes_and_a_narrower_range_says_why() {
    let params = template_params();
    let readme = readme_params();
    let names = config_variables();
    let mut checked = 0;
    for (var, p) in template_env() {
        let Some(param) = params.get(&p) else {
            continue;
        };
        if !names.contains(&var) {
            continue;
        }
        for v in &param.allowed {
            assert_eq!(
                verdict(&var, v, &names),
                Verdict::Taken,
                "{p} allows {v}, which the code refuses for {var}"
            );
        }
        if param.ty != "Number" {
            continue;
        }
        let range = plain(&readme[&p].1);
        for (bound, outside) in [(param.min, -1), (param.max, 1)] {
            let Some(bound) = bound else { continue };
            assert_ne!(
                verdict(&var, &bound.to_string(), &names),
                Verdict::RefusedAlone,
                "{p} allows {bound}, which the code refuses for {var}"
            );
            let beyond = bound + outside;
            if verdict(&var, &beyond.to_string(), &names) == Verdict::Taken {
                assert!(
                    range.contains(" ("),
                    "the code takes {var}={beyond}, outside {p}'s range: the README's range must say why ({range:?})"
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 10, "{checked} bounds checked");
}

#[test]
fn the_commands_table_has_one_row_for_every_make_target() {
    let makefile = read("Makefile");
    let phony: BTreeSet<String> = makefile
        .lines()
        .find_map(|l| l.strip_prefix(".PHONY:"))
        .expect("the Makefile's .PHONY line")
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    let rows: Vec<String> = table(&readme(), "| command | what it does |")
        .into_iter()
        .map(|r| plain(&r[0]))
        .collect();
    let documented: BTreeSet<String> = rows
        .iter()
        .map(|c| {
            c.strip_prefix("make ")
                .unwrap_or_else(|| panic!("{c:?} is not a make command"))
                .to_owned()
        })
        .collect();
    assert_eq!(rows.len(), documented.len(), "one row per target: {rows:?}");
    assert_eq!(
        documented, phony,
        "the README's commands against the Makefile's targets"
    );
}

#[test]
fn the_readme_lists_every_sample_event_and_every_bench_section() {
    let readme = readme();
    let files: BTreeSet<String> = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/events"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    let rows: BTreeSet<String> = table(&readme, "| file | function | what it is |")
        .into_iter()
        .map(|r| plain(&r[0]))
        .collect();
    assert_eq!(rows, files, "the README's sample events against events/");

    let bench = read("benches/bench/main.rs");
    let mut sections = BTreeSet::new();
    let mut rest = bench.as_str();
    let pattern = "var(\"BENCH_ONLY\").as_deref() == Ok(\"";
    while let Some(i) = rest.find(pattern) {
        rest = &rest[i + pattern.len()..];
        sections.insert(rest[..rest.find('"').unwrap()].to_owned());
    }
    assert!(sections.len() >= 5, "the bench's sections: {sections:?}");
    let mut named = BTreeSet::new();
    let mut rest = readme.as_str();
    while let Some(i) = rest.find("BENCH_ONLY=") {
        rest = &rest[i + 11..];
        let s: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if !s.is_empty() {
            named.insert(s);
        }
    }
    assert_eq!(
        named, sections,
        "the README's BENCH_ONLY sections against the bench's"
    );
}

#[test]
fn the_readme_routes_every_path_the_submit_function_answers() {
    let rows: BTreeSet<String> = table(&readme(), "| route | what it does |")
        .into_iter()
        .map(|r| plain(&r[0]))
        .collect();
    // The routes of src/lambda/routes.rs (its `Route` enum, with the
    // methods it answers), the key routes with their required scope.
    let want: BTreeSet<String> = [
        "POST /tasks",
        "POST /tasks/batch",
        "GET /tasks/{task_id}",
        "GET /idempotency-keys/{key}?scope=S",
        "DELETE /idempotency-keys/{key}?scope=S",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    assert_eq!(rows, want);
    let routes = read("src/lambda/routes.rs");
    for variant in [
        "Route::Tasks",
        "Route::Batch",
        "Route::Task(",
        "Route::Key(",
    ] {
        assert!(routes.contains(variant), "routes.rs has {variant}");
    }
    assert!(routes.contains("req.method == \"DELETE\""));
}

/// Figures in `text`: a dollar amount, or a number with a decimal point or a
/// thousands comma before a unit of time, size, rate or round trips, or any
/// number of milli- or microseconds.
fn figures(text: &str) -> Vec<String> {
    const UNITS: [&str; 9] = [
        " ms",
        " µs",
        " s ",
        " MB",
        " KB",
        " round trips",
        " submits/s",
        "/s",
        " requests",
    ];
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let dollar = chars[i] == '$' && chars.get(i + 1).is_some_and(|c| c.is_ascii_digit());
        let starts = chars[i].is_ascii_digit() && (i == 0 || !chars[i - 1].is_ascii_alphanumeric());
        if !(dollar || starts) {
            i += 1;
            continue;
        }
        let from = i;
        i += usize::from(dollar);
        while i < chars.len()
            && (chars[i].is_ascii_digit()
                || (matches!(chars[i], '.' | ',')
                    && chars.get(i + 1).is_some_and(|c| c.is_ascii_digit())))
        {
            i += 1;
        }
        let number: String = chars[from..i].iter().collect();
        let after: String = chars[i..chars.len().min(i + 14)].iter().collect();
        let fractional = number.contains('.') || number.contains(',');
        let unit = UNITS.iter().find(|u| after.starts_with(*u));
        let timing = after.starts_with(" ms") || after.starts_with(" µs");
        if dollar || (unit.is_some() && (fractional || timing)) {
            out.push(format!("{number}{}", unit.map_or("", |u| u.trim_end())));
        }
    }
    out
}

#[test]
fn the_readme_quotes_no_figure_that_the_figures_docs_do_not_have() {
    let docs = read("docs/benchmarks.md") + &read("docs/reliability.md");
    let quoted = figures(&readme());
    let absent: Vec<_> = quoted
        .iter()
        .filter(|f| !docs.contains(f.as_str()))
        .collect();
    assert!(
        absent.is_empty(),
        "figures the README quotes that are in neither docs/benchmarks.md nor docs/reliability.md \
         (link to them instead): {absent:?}"
    );
    // The detector finds what it is for.
    assert_eq!(
        figures("about $17.51, 45.5 ms, 2.01 round trips, 38,741 submits/s; 6 MB, 100 items"),
        ["$17.51", "45.5 ms", "2.01 round trips", "38,741 submits/s"]
    );
}
