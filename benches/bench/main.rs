//! `make bench`: what the protocol costs, measured on this machine, written to
//! docs/benchmarks.md. Not part of `make test`: figures are measured, never
//! asserted. Needs a moto server (`S3_TEST_ENDPOINT`, which make bench
//! starts) and release builds of the binaries (which make bench builds).
//!
//! One module a section, in the order of the report; the moto server, the
//! clocks, the runtime API stand-in and the function spawner are the tests'
//! own (tests/common).

#[path = "../../tests/common/clocks.rs"]
mod clocks;
#[path = "../../tests/common/lambda.rs"]
#[allow(dead_code)]
mod lambda;
#[path = "../../tests/common/moto.rs"]
#[allow(dead_code)]
mod moto;
#[path = "../../tests/common/runtime_api.rs"]
#[allow(dead_code)]
mod runtime_api;
#[path = "../../tests/common/wrap.rs"]
#[allow(dead_code)]
mod wrap;

mod batch;
mod binaries;
mod cost;
mod cpu;
mod events;
mod link;
mod list_order;
mod options;
mod prefix_model;
mod prefix_rates;
mod report;
mod requests;
mod scale;
mod scale_model;
mod schemas;
mod submitter;
mod sweeper;

use std::alloc::{GlobalAlloc, Layout, System};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use futures::StreamExt;
use serde_json::json;

use report::{Report, assess, machine};

/// The system allocator, counting: the CPU section reports how many
/// allocations (and bytes) an operation makes, a figure that two shared
/// cores do not blur as they blur time.
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static ALLOCATED_BYTES: AtomicU64 = AtomicU64::new(0);
/// Bytes allocated and not yet freed, and their high-water mark (the
/// scale section's heap peak).
static LIVE_BYTES: AtomicU64 = AtomicU64::new(0);
static PEAK_BYTES: AtomicU64 = AtomicU64::new(0);

fn grow(by: u64) {
    let now = LIVE_BYTES.fetch_add(by, Ordering::Relaxed) + by;
    PEAK_BYTES.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: every call is passed on to the system allocator unchanged; the
// counters are only added to.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        ALLOCATED_BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        grow(layout.size() as u64);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size() as u64, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // A growing buffer: each step is an allocation (and, unless the
        // allocator extends it in place, a copy of what it held).
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        ALLOCATED_BYTES.fetch_add(new_size as u64, Ordering::Relaxed);
        grow(new_size as u64);
        LIVE_BYTES.fetch_sub(layout.size() as u64, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations and bytes allocated so far, by every thread.
pub(crate) fn allocated() -> (u64, u64) {
    (
        ALLOCATIONS.load(Ordering::Relaxed),
        ALLOCATED_BYTES.load(Ordering::Relaxed),
    )
}

/// Starts a new heap high-water mark at what is allocated now, returned.
pub(crate) fn heap_reset_peak() -> u64 {
    let now = LIVE_BYTES.load(Ordering::Relaxed);
    PEAK_BYTES.store(now, Ordering::Relaxed);
    now
}

/// The heap's high-water mark since the last reset.
pub(crate) fn heap_peak() -> u64 {
    PEAK_BYTES.load(Ordering::Relaxed)
}

pub(crate) fn input(bytes: usize) -> serde_json::Value {
    json!({"order": "ORD-123", "pad": "x".repeat(bytes.saturating_sub(30))})
}

pub(crate) async fn run_concurrent<F, Fut>(n: usize, c: usize, f: F) -> f64
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let start = Instant::now();
    futures::stream::iter(0..n)
        .map(&f)
        .buffer_unordered(c)
        .collect::<Vec<()>>()
        .await;
    n as f64 / start.elapsed().as_secs_f64()
}

fn main() {
    // `cargo test --all-targets` runs bench targets too, without `--bench`:
    // nothing to do then.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    // The commit, before anything runs (the tree may change during a run).
    commit();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    // BENCH_ONLY=cpu: the CPU figures, printed and put in place of their
    // section of docs/benchmarks.md (the targets table keeps the last full
    // run's).
    if std::env::var("BENCH_ONLY").as_deref() == Ok("cpu") {
        let mut r = Report::new();
        rt.block_on(cpu::cpu(&mut r));
        splice_section(&r.0, "## The protocol's CPU cost", false);
        return;
    }
    // BENCH_ONLY=binaries: the functions' sizes, cold starts and memory,
    // put in place of their section, and their rows of the targets table.
    if std::env::var("BENCH_ONLY").as_deref() == Ok("binaries") {
        let mut r = Report::new();
        rt.block_on(binaries::binaries(&mut r));
        splice_section(&r.0, "## The functions", false);
        splice_targets(&r);
        return;
    }
    // BENCH_ONLY=requests: the request counts, printed and put in place of
    // their section of docs/benchmarks.md.
    if std::env::var("BENCH_ONLY").as_deref() == Ok("requests") {
        let mut r = Report::new();
        rt.block_on(requests::requests(&mut r));
        splice_section(&r.0, "## S3 requests per operation", false);
        splice_targets(&r);
        assess(&mut r);
        return;
    }
    // BENCH_ONLY=link: just the round trips and throughput through the
    // link, printed.
    if std::env::var("BENCH_ONLY").as_deref() == Ok("link") {
        let mut r = Report::new();
        rt.block_on(link::round_trips(&mut r));
        assess(&mut r);
        return;
    }
    // BENCH_ONLY=cost: the cost model, printed and put in place of its
    // section of docs/benchmarks.md.
    if std::env::var("BENCH_ONLY").as_deref() == Ok("cost") {
        let mut r = Report::new();
        rt.block_on(cost::cost(&mut r));
        splice_section(&r.0, "## What it costs", false);
        return;
    }
    // BENCH_ONLY=options: the figures of task options and offloaded
    // inputs, printed and put in place of their section (before the
    // targets).
    if std::env::var("BENCH_ONLY").as_deref() == Ok("options") {
        let mut r = Report::new();
        rt.block_on(options::options(&mut r));
        splice_section(&r.0, "## Task options and offloaded inputs", true);
        return;
    }
    // BENCH_ONLY=schemas: the figures of input schemas (a cold process's
    // read of a type's schema against a warm one), printed and put in place
    // of their section (before the targets).
    if std::env::var("BENCH_ONLY").as_deref() == Ok("schemas") {
        let mut r = Report::new();
        rt.block_on(schemas::schemas(&mut r));
        splice_section(&r.0, "## Input schemas", true);
        return;
    }
    // BENCH_ONLY=sweeper: the sweeper's figures (a pass in memory and on
    // moto, the orphan payloads' check), put in place of their section.
    if std::env::var("BENCH_ONLY").as_deref() == Ok("sweeper") {
        let mut r = Report::new();
        rt.block_on(sweeper::sweeper(&mut r));
        splice_section(&r.0, "## The sweeper", false);
        return;
    }
    // BENCH_ONLY=list_order: the daily pass under each LIST_ORDER, printed
    // and put in place of its section (before the targets).
    if std::env::var("BENCH_ONLY").as_deref() == Ok("list_order") {
        let mut r = Report::new();
        rt.block_on(list_order::list_order(&mut r));
        splice_section(&r.0, "## The daily pass: `LIST_ORDER=any`", true);
        return;
    }
    // BENCH_ONLY=batch: the batch figures, printed and put in place of their
    // section of docs/benchmarks.md (before the targets).
    if std::env::var("BENCH_ONLY").as_deref() == Ok("batch") {
        let mut r = Report::new();
        rt.block_on(batch::batch(&mut r));
        assess(&mut r);
        let ours = r.0.replace(
            "\n## Against the targets\n",
            "\nThe batch's figures against their targets (a full run puts them in the table below):\n",
        );
        splice_section(&ours, "## Batch submit", true);
        return;
    }
    // BENCH_ONLY=scale_submits: submits against S3's per-prefix rates, on
    // a simulated clock, put in place of their section (before the targets).
    if std::env::var("BENCH_ONLY").as_deref() == Ok("scale_submits") {
        let mut r = Report::new();
        rt.block_on(prefix_rates::scale_submits(&mut r));
        splice_section(&r.0, "## Submits at scale: S3's per-prefix rates", true);
        return;
    }
    // BENCH_ONLY=scale: the daily pass over synthetic buckets of 10^7 to
    // 10^9 records, put in place of its section (before the targets), its
    // rows in the targets table.
    if std::env::var("BENCH_ONLY").as_deref() == Ok("scale") {
        let mut r = Report::new();
        rt.block_on(scale::scale(&mut r, true));
        if !scale::print_only() {
            splice_section(&r.0, scale::HEADING, true);
            splice_targets(&r);
        }
        return;
    }
    // BENCH_ONLY=submitter: the figures of due messages sent by the
    // submitter (RECORD_EVENTS=submitter), printed and put in place of
    // their section (before the targets).
    if std::env::var("BENCH_ONLY").as_deref() == Ok("submitter") {
        let mut r = Report::new();
        rt.block_on(submitter::submitter(&mut r));
        assess(&mut r);
        let ours = r.0.replace(
            "\n## Against the targets\n",
            "\nIts figures against their targets (a full run puts them in the table below):\n",
        );
        splice_section(&ours, "## Due messages from the submitter", true);
        return;
    }
    rt.block_on(async {
        let mut r = Report::new();
        r.line("# Benchmarks\n");
        r.line(format!(
            "Measured by one `make bench` on {}, every section in the one run, on commit {} — {}.\n",
            chrono::Utc::now().format("%Y-%m-%d"),
            commit(),
            machine()
        ));
        requests::requests(&mut r).await;
        cpu::cpu(&mut r).await;
        link::round_trips(&mut r).await;
        binaries::binaries(&mut r).await;
        sweeper::sweeper(&mut r).await;
        cost::cost(&mut r).await;
        batch::batch(&mut r).await;
        options::options(&mut r).await;
        schemas::schemas(&mut r).await;
        submitter::submitter(&mut r).await;
        list_order::list_order(&mut r).await;
        prefix_rates::scale_submits(&mut r).await;
        scale::scale(&mut r, false).await;
        assess(&mut r);
        let mut out = r.0;
        let _ = writeln!(out);
        std::fs::write(
            format!("{}/docs/benchmarks.md", env!("CARGO_MANIFEST_DIR")),
            out,
        )
        .unwrap();
    });
}

/// The commit the run measures (`git describe --always --dirty`: a tree
/// with changes not committed says so), as it was when the run began.
fn commit() -> String {
    static AT_START: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    AT_START.get_or_init(describe).clone()
}

/// `make bench` names the commit as it starts (BENCH_COMMIT), before its
/// build: what it builds is the tree of that moment.
fn describe() -> String {
    if let Ok(c) = std::env::var("BENCH_COMMIT")
        && !c.is_empty()
    {
        return c;
    }
    std::process::Command::new("git")
        .args(["describe", "--always", "--dirty", "--abbrev=12"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|| "unknown (not a git checkout)".to_owned())
}

/// Puts each target row of `r` in place of the row of docs/benchmarks.md's
/// targets table with the same name (a new one goes at the table's end).
fn splice_targets(r: &Report) {
    let path = format!("{}/docs/benchmarks.md", env!("CARGO_MANIFEST_DIR"));
    let mut doc = std::fs::read_to_string(&path).unwrap_or_default();
    for row in r.target_rows() {
        let name = row.split(" | ").next().unwrap_or_default().to_owned();
        match doc
            .lines()
            .find(|l| l.split(" | ").next() == Some(name.as_str()))
        {
            Some(old) => doc = doc.replacen(&old.to_owned(), &row, 1),
            None => doc = doc.trim_end().to_owned() + "\n" + &row + "\n",
        }
    }
    std::fs::write(&path, doc).unwrap();
}

/// Puts `section` (a run's report, its heading first) in place of the
/// section of docs/benchmarks.md with that `heading`; where there is none,
/// before the targets table (`before_targets`) or at the end.
/// The section says which run it is from, and the header stops claiming
/// every section for the full run.
fn splice_section(section: &str, heading: &str, before_targets: bool) {
    let path = format!("{}/docs/benchmarks.md", env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(&path).unwrap_or_default().replacen(
        ", every section in the one run, on commit",
        ", every section in the one run but those that name a run of their own, on commit",
        1,
    );
    let stamp = format!(
        "\n*This section: `BENCH_ONLY={} make bench` on {}, commit {}.*\n",
        std::env::var("BENCH_ONLY").unwrap_or_default(),
        chrono::Utc::now().format("%Y-%m-%d"),
        commit()
    );
    // After the heading's line (a heading may go on past `heading`).
    let section = match section
        .find(heading)
        .and_then(|i| section[i..].find('\n').map(|j| i + j + 1))
    {
        Some(at) => format!("{}{stamp}{}", &section[..at], &section[at..]),
        None => section.to_owned(),
    };
    // A blank line before the heading, whether or not the section's text
    // begins with one (`before` ends with the line above it).
    let section = if section.starts_with('\n') {
        section
    } else {
        format!("\n{section}")
    };
    let section = section.as_str();
    let (before, after) = match doc.find(&format!("\n{heading}")) {
        Some(i) => {
            let rest = &doc[i + 1..];
            let end = rest.find("\n## ").map_or(doc.len(), |j| i + 1 + j);
            (doc[..i].to_owned(), doc[end..].to_owned())
        }
        None => match doc
            .find("\n## Against the targets")
            .filter(|_| before_targets)
        {
            Some(i) => (doc[..i].to_owned(), doc[i..].to_owned()),
            None => (doc.trim_end().to_owned() + "\n", String::new()),
        },
    };
    std::fs::write(&path, format!("{before}{section}{after}")).unwrap();
}
