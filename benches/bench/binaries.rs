//! 4-6. The binaries: cold start, size, memory.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::moto::moto_store;
use crate::report::Report;
use crate::runtime_api::RuntimeApi;

/// The peak RSS of process `pid` so far, in KB (`VmHWM`).
pub(crate) fn peak_rss_kb(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/status: {e}: peak memory cannot be measured"));
    status
        .lines()
        .find(|l| l.starts_with("VmHWM"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse().ok())
        .expect("VmHWM in /proc/<pid>/status")
}

/// The default release build of `name`, as `make bench` copied it from `make
/// build` (`cargo bench` itself builds the binaries again into
/// target/release/, with the bench's features: testing, and so schemas).
pub(crate) fn bin(name: &str) -> String {
    format!("{}/target/shipped/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn function(name: &str, api: &RuntimeApi, bucket: &str) -> tokio::process::Child {
    crate::lambda::function(&bin(name), name, api, bucket)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("release binaries: run `make bench`")
}

pub(crate) async fn binaries(r: &mut Report) {
    r.line("\n## The functions\n");
    r.line("| binary | stripped release size | cold start, median (p90) of 30 |");
    r.line("| --- | --- | --- |");
    // The two functions' starts alternate (one of each, in turn first), so
    // that what else the machine does (moto's own start among it) falls on
    // both alike.
    let mut times: [Vec<Duration>; 2] = [vec![], vec![]];
    for i in 0..30 {
        for k in [i % 2, 1 - i % 2] {
            let name = ["submit", "sweep"][k];
            let api = RuntimeApi::start().await;
            let start = Instant::now();
            let mut child = function(name, &api, "cold");
            if let Some(t) = api.first_poll().await {
                times[k].push(t.duration_since(start));
            }
            let _ = child.kill().await;
        }
    }
    let mut medians = Vec::new();
    for name in ["submit", "sweep", "idem"] {
        let size = std::fs::metadata(bin(name))
            .unwrap_or_else(|e| panic!("{}: {e} (run `make bench`, which builds it)", bin(name)))
            .len();
        let mb = size as f64 / 1e6;
        r.target(
            format!("stripped size of `{name}`"),
            format!("{mb:.1} MB"),
            "≤ 10 MB",
            mb <= 10.0,
        );
        if name == "idem" {
            r.line(format!("| {name} | {mb:.1} MB | (not a function) |"));
            continue;
        }
        let times = &mut times[usize::from(name == "sweep")];
        assert!(
            times.len() == 30,
            "`{name}` reached the runtime API in only {} of 30 starts",
            times.len()
        );
        times.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let (p50, p90) = (ms(times[15]), ms(times[27]));
        medians.push(p50);
        r.line(format!(
            "| {name} | {mb:.1} MB | {p50:.1} ms ({p90:.1} ms) |"
        ));
        r.target(
            format!("cold start of `{name}`, median"),
            format!("{p50:.1} ms (p90 {p90:.1} ms)"),
            "≤ 20 ms",
            p50 <= 20.0,
        );
    }
    // The default build has no JSON Schema validator (the `schemas`
    // feature): `submit` starts as fast as `sweep`, which never had one.
    let over = medians[0] - medians[1];
    r.target(
        "cold start of `submit` over `sweep`'s, medians",
        format!("{over:+.1} ms"),
        "≤ 1 ms",
        over <= 1.0,
    );
    r.line("\nCold start: from spawning the process to its first `GET /runtime/invocation/next` on a local runtime API stand-in (configuration read, S3 client built); the two functions' 30 starts each alternate. The binaries are the default release build (`make build`: no `schemas` feature; docs/decisions.md has the figures with it). Targets: at most 20 ms, at most 10 MB, `submit` within 1 ms of `sweep`.");

    // Peak memory for an SQS batch of 10 messages of 256 KiB inputs.
    let store = moto_store().await;
    let mut api = RuntimeApi::start().await;
    let child = function("submit", &api, store.bucket());
    let pid = child.id().expect("the submit function's pid");
    let big = "x".repeat(262_144 - 64);
    let records: Vec<_> = (0..10)
        .map(|i| {
            json!({
                "messageId": format!("m-{i}"), "receiptHandle": "r", "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:q", "awsRegion": "us-east-1",
                "attributes": {}, "messageAttributes": {},
                "body": json!({"task_type": "big", "input": {"pad": big}, "idempotency_key": format!("big-{i}")}).to_string(),
            })
        })
        .collect();
    api.invoke(json!({"Records": records}));
    let p = api.next_posted().await;
    let hwm = peak_rss_kb(pid);
    drop(child);
    assert!(
        p.body.get("batchItemFailures").is_some(),
        "the batch was not answered: {}",
        p.body
    );
    r.target(
        "peak RSS of `submit`, SQS batch of 10 × 256 KiB",
        format!("{:.1} MB", hwm / 1024.0),
        "≤ 64 MB",
        hwm / 1024.0 <= 64.0,
    );
    r.line(format!(
        "\nPeak RSS of `submit` handling an SQS batch of 10 messages with 256 KiB inputs (answer {}): **{:.1} MB** (target: at most 64 MB).",
        p.body,
        hwm / 1024.0
    ));
}
