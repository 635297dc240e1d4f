//! The batch submit (POST /tasks/batch, Queue::submit_many).

use std::sync::Arc;
use std::time::{Duration, Instant};

use idempotent_submit::clock::SystemClock;
use idempotent_submit::store::{MemoryStore, S3Store, Store, StoreError};
use idempotent_submit::{Queue, Settings};
use serde_json::json;

use crate::cost::{LAMBDA_GB, LAMBDA_GB_S, LAMBDA_REQUEST};
use crate::input;
use crate::link::{keep_busy, link, link_delay, moto_addr};
use crate::moto::{moto_endpoint as endpoint, moto_store};
use crate::report::{Report, median};
use crate::runtime_api::RuntimeApi;
use crate::wrap::{Call, Hooks, Wrapped};

/// Items in the measured batch: the default (and largest) MAX_BATCH_TASKS.
const BATCH: usize = 100;

/// One batch of `BATCH` new keys through `q` (as POST /tasks/batch sends
/// them), and `BATCH` single new submits one after the other: seconds each.
async fn batch_and_singles(q: &Queue, tag: &str) -> (f64, f64) {
    let inp = input(1024);
    let start = Instant::now();
    let results = q
        .submit_many((0..BATCH).map(|i| {
            q.submit("bench", inp.clone())
                .idempotency_key(format!("{tag}-b{i}"))
        }))
        .await;
    let batch = start.elapsed().as_secs_f64();
    assert!(
        results
            .iter()
            .all(|r| r.as_ref().is_ok_and(|s| s.created())),
        "a batch through the link failed"
    );
    let start = Instant::now();
    for i in 0..BATCH {
        let s = q
            .submit("bench", inp.clone())
            .idempotency_key(format!("{tag}-s{i}"))
            .await
            .expect("a submit through the link");
        assert!(s.created());
    }
    (batch, start.elapsed().as_secs_f64())
}

/// The in-memory store behind a fixed delay each way on every request, all
/// requests served at once: S3's parallelism, a network's latency.
#[derive(Clone)]
struct Delayed {
    inner: MemoryStore,
    delay: Duration,
}

impl Delayed {
    fn new(delay: Duration) -> Wrapped<Self> {
        Wrapped(Delayed {
            inner: MemoryStore::new(Arc::new(SystemClock)),
            delay,
        })
    }
}

/// Every call a delay after it is sent, and a delay before its answer.
#[async_trait::async_trait]
impl Hooks for Delayed {
    type Inner = MemoryStore;

    fn inner(&self) -> &MemoryStore {
        &self.inner
    }

    async fn before(&self, _call: &Call<'_>) -> Result<(), StoreError> {
        tokio::time::sleep(self.delay).await;
        Ok(())
    }

    async fn after(&self, _call: &Call<'_>, _ok: bool) {
        tokio::time::sleep(self.delay).await;
    }
}

/// The in-memory store behind `delay` each way on every request (the
/// submitter's section measures its batch on it too).
pub(crate) fn delayed(delay: Duration) -> impl Store + Clone {
    Delayed::new(delay)
}

/// The default release binary where `make bench` copied one, else the debug
/// build (its memory is an upper bound of the release's).
fn built(name: &str) -> (String, &'static str) {
    let release = crate::binaries::bin(name);
    if std::path::Path::new(&release).exists() {
        return (release, "release");
    }
    (
        format!("{}/target/debug/{name}", env!("CARGO_MANIFEST_DIR")),
        "debug",
    )
}

/// Peak RSS, in MB, of the `submit` function answering one HTTP batch of
/// `n` items of `bytes`-byte inputs; and its status.
async fn batch_rss(n: usize, bytes: usize) -> (f64, u64, &'static str) {
    let (path, kind) = built("submit");
    let store = moto_store().await;
    let mut api = RuntimeApi::start().await;
    let child = crate::lambda::function(&path, "submit", &api, store.bucket())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("the submit binary: run `make bench` or `cargo build`");
    let pid = child.id().expect("the submit function's pid");
    let pad = "x".repeat(bytes - 16);
    let tasks: Vec<_> = (0..n)
        .map(|i| json!({"task_type": "big", "input": {"pad": pad}, "idempotency_key": format!("big-{i}")}))
        .collect();
    let body = json!({"tasks": tasks}).to_string();
    api.invoke(json!({
        "version": "2.0", "rawPath": "/tasks/batch", "headers": {"content-type": "application/json"},
        "requestContext": {"http": {"method": "POST", "path": "/tasks/batch"}, "requestId": "rss", "stage": "$default"},
        "isBase64Encoded": false, "body": body,
    }));
    let p = api.next_posted().await;
    let hwm = crate::binaries::peak_rss_kb(pid);
    drop(child);
    (
        hwm / 1024.0,
        p.body["statusCode"].as_u64().unwrap_or(0),
        kind,
    )
}

/// Peak RSS, in MB, of `idem submit --batch` over `n` lines of `bytes`-byte
/// inputs (no invocation limit there), by `/usr/bin/time`.
async fn idem_batch_rss(n: usize, bytes: usize) -> Option<(f64, &'static str)> {
    let (path, kind) = built("idem");
    let store = moto_store().await;
    let pad = "x".repeat(bytes - 16);
    let file = std::env::temp_dir().join(format!("bench-batch-{}.jsonl", std::process::id()));
    let lines: String = (0..n)
        .map(|i| json!({"task_type": "big", "input": {"pad": pad}, "idempotency_key": format!("big-{i}")}).to_string() + "\n")
        .collect();
    std::fs::write(&file, lines).ok()?;
    let out = tokio::process::Command::new("/usr/bin/time")
        .args(["-f", "%M", &path, "submit", "--batch"])
        .arg(&file)
        .env_clear()
        .env("BUCKET_NAME", store.bucket())
        .env("AWS_ENDPOINT_URL", endpoint())
        .env("S3_FORCE_PATH_STYLE", "true")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "us-east-1")
        .output()
        .await
        .ok()?;
    let _ = std::fs::remove_file(&file);
    if !out.status.success() {
        return None;
    }
    let kb: f64 = String::from_utf8_lossy(&out.stderr)
        .lines()
        .last()?
        .trim()
        .parse()
        .ok()?;
    Some((kb / 1024.0, kind))
}

pub(crate) async fn batch(r: &mut Report) {
    r.line("\n## Batch submit\n");
    let d = link_delay();
    let two_d = 2.0 * d.as_secs_f64();

    // Round trips: against a store that serves every request at once, as S3
    // does, so that what is measured is how many times the batch waits on
    // the network, not how fast one server works through 300 requests.
    r.line(format!(
        "**Round trips.** The in-memory store, behind a delay of D = {} ms each way on every request (a request waits D, reaches the store, and its answer waits D), serves all requests at once, as S3 does. Three rounds: a batch of {BATCH} new keys with 1 KiB inputs through `Queue::submit_many` (what `POST /tasks/batch` runs), then {BATCH} single new submits one after the other, at D and at 0. Round trips of the batch: (time at D − time at 0) / 2D; of the singles, the same per submit.\n",
        d.as_millis()
    ));
    r.line("| round | batch: round trips | batch: time at D | singles: round trips each | singles: time at D |");
    r.line("| --- | --- | --- | --- | --- |");
    let mut batch_rts = Vec::new();
    for round in 0..3 {
        let zero = Queue::new(Delayed::new(Duration::ZERO), Settings::default());
        let slow = Queue::new(Delayed::new(d), Settings::default());
        let (b0, s0) = batch_and_singles(&zero, &format!("mz{round}")).await;
        let (bd, sd) = batch_and_singles(&slow, &format!("md{round}")).await;
        let b_rt = (bd - b0) / two_d;
        let s_rt = (sd - s0) / two_d / BATCH as f64;
        batch_rts.push(b_rt);
        r.line(format!(
            "| {} | {b_rt:.2} | {bd:.2} s | {s_rt:.2} | {sd:.1} s |",
            round + 1
        ));
    }
    let rt = median(&mut batch_rts, "batch round trips");
    r.target(
        format!("round trips: a batch of {BATCH} new keys"),
        format!("{rt:.2} ({:.2} – {:.2})", batch_rts[0], batch_rts[2]),
        "≤ 2.5",
        rt <= 2.5,
    );
    r.line(format!(
        "\nMedian: the batch takes **{rt:.2} round trips** for {BATCH} new keys, as one new submit does (2)."
    ));

    // Through the TCP link, against moto: the same client, S3's HTTP API;
    // moto serves one request at a time.
    r.line(format!(
        "\n**Through the link, against moto.** The TCP link of section \"Round trips on the response path\" (D = {} ms each way, moto kept busy), three rounds, the same batch and singles. moto works through the batch's {} requests one at a time (about 10 ms each here), which overlaps the link's delay: the batch's time at D is moto's time plus about one round trip, not a count of the protocol's round trips (those are above). What it shows is the speed-up a producer sees.\n",
        d.as_millis(),
        3 * BATCH
    ));
    r.line("| round | batch: time at 0 | batch: time at D | batch: submits/s at D | singles: time at D | singles: submits/s at D | speed-up |");
    r.line("| --- | --- | --- | --- | --- | --- | --- |");
    let busy = keep_busy().await;
    let (mut speedups, mut at_zero) = (Vec::new(), Vec::new());
    for round in 0..3 {
        let direct = moto_store().await;
        let zero = Queue::new(
            S3Store::for_endpoint(&link(moto_addr(), Duration::ZERO).await, direct.bucket()),
            Settings::default(),
        );
        let slow = Queue::new(
            S3Store::for_endpoint(&link(moto_addr(), d).await, direct.bucket()),
            Settings::default(),
        );
        let (b0, s0) = batch_and_singles(&zero, &format!("z{round}")).await;
        let (bd, sd) = batch_and_singles(&slow, &format!("d{round}")).await;
        speedups.push(sd / bd);
        at_zero.push((b0, s0));
        r.line(format!(
            "| {} | {b0:.2} s | {bd:.2} s | {:.0} | {sd:.1} s | {:.1} | {:.0}× |",
            round + 1,
            BATCH as f64 / bd,
            BATCH as f64 / sd,
            sd / bd
        ));
    }
    drop(busy);
    let speed = median(&mut speedups, "batch speed-up");
    r.line(format!(
        "\nMedian: through the link, the batch is **{speed:.0}×** faster than {BATCH} single submits one after the other."
    ));

    // Lambda and API Gateway per million tasks: one invocation per task
    // against one per 100, each invocation as long as measured at D = 0.
    let mut b0: Vec<f64> = at_zero.iter().map(|(b, _)| *b).collect();
    let mut s0: Vec<f64> = at_zero.iter().map(|(_, s)| *s / BATCH as f64).collect();
    let (b0, s0) = (
        median(&mut b0, "batch at 0"),
        // A single submit's time is "What it costs"'s where the run has it:
        // one figure, measured once.
        r.kept("lambda_submit_seconds")
            .unwrap_or_else(|| median(&mut s0, "single at 0")),
    );
    const HTTP_API_REQUEST: f64 = 1.00 / 1_000_000.0;
    let per_million = |invocations: f64, seconds: f64| {
        invocations * (LAMBDA_REQUEST + HTTP_API_REQUEST)
            + invocations * seconds * LAMBDA_GB * LAMBDA_GB_S
    };
    let single = per_million(1e6, s0);
    let batched = per_million(1e6 / BATCH as f64, b0);
    r.line(format!(
        "\nPer million tasks, Lambda (arm64, {} MB, ${:.2} per million requests and the GB-seconds of each invocation as long as measured against moto: {:.1} ms a single submit (section \"What it costs\"), {:.0} ms a batch of {BATCH} at D = 0) and API Gateway's HTTP API ($1.00 per million requests); S3 is the same either way (every item is a single submit's three requests, section \"What it costs\"):\n",
        (LAMBDA_GB * 1024.0) as u32,
        LAMBDA_REQUEST * 1e6,
        s0 * 1000.0,
        b0 * 1000.0
    ));
    r.line(
        "| submitted as | invocations per million tasks | Lambda + API Gateway per million tasks |",
    );
    r.line("| --- | --- | --- |");
    r.line(format!(
        "| single `POST /tasks` | 1,000,000 | ${single:.2} |"
    ));
    r.line(format!(
        "| `POST /tasks/batch` of {BATCH} | {} | ${batched:.2} |",
        1_000_000 / BATCH
    ));
    r.line(format!(
        "\nThe batch's invocation time at D = 0 is moto serving {} requests one at a time; against S3, which serves them in parallel, it is about two round trips, so its GB-seconds here are an upper bound.",
        3 * BATCH
    ));

    // Memory: the largest batch the function can be sent (the body within
    // Lambda's 6 MB payload), and 100 × 64 KiB through the CLI.
    let (mb, status, kind) = batch_rss(BATCH, 61 * 1024).await;
    assert_eq!(
        status, 200,
        "the batch of {BATCH} × 61 KiB was not answered 200"
    );
    r.target(
        format!("peak RSS of `submit`, a batch of {BATCH} × 61 KiB"),
        format!("{mb:.1} MB ({kind} build)"),
        "≤ 128 MB",
        mb <= 128.0,
    );
    let (over_mb, over_status, _) = batch_rss(BATCH, 64 * 1024).await;
    r.line(format!(
        "\nPeak RSS of the `submit` function ({kind} build) answering one `POST /tasks/batch` of {BATCH} items of 61 KiB inputs (a 6.1 MB body, the most that fits Lambda's 6 MB invocation payload): **{mb:.1} MB** (target: at most 128 MB). {BATCH} × 64 KiB is a 6.6 MB body, over that limit: it never reaches a deployed function, and is answered {over_status} here (peak {over_mb:.1} MB)."
    ));
    match idem_batch_rss(BATCH, 64 * 1024).await {
        Some((mb, kind)) => {
            r.target(
                format!("peak RSS of `idem submit --batch`, {BATCH} × 64 KiB"),
                format!("{mb:.1} MB ({kind} build)"),
                "≤ 128 MB",
                mb <= 128.0,
            );
            r.line(format!(
                "\nPeak RSS of `idem submit --batch` ({kind} build) over {BATCH} lines of 64 KiB inputs (the same `Queue::submit_many`, without the payload limit): **{mb:.1} MB** (target: at most 128 MB)."
            ));
        }
        None => r.line(
            "\n`idem submit --batch` could not be measured (no /usr/bin/time, or it failed).",
        ),
    }
}
