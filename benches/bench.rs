//! `make bench`: what the protocol costs, measured on this machine, written to
//! docs/benchmarks.md. Not part of `make test`: figures are measured, never
//! asserted. Needs a moto server (`S3_TEST_ENDPOINT`, which make bench
//! starts) and release builds of the binaries (which make bench builds).

#[path = "../tests/common/runtime_api.rs"]
#[allow(dead_code)]
mod runtime_api;

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Duration as ChronoDuration;
use futures::StreamExt;
use idempotent_submit::protocol::SweepOptions;
use idempotent_submit::store::{Fault, FaultyStore, Op, PutMode, S3Store, Store};
use idempotent_submit::{Clock, ManualClock, MemoryStore, Queue, RetryPolicy, Settings};
use runtime_api::RuntimeApi;
use serde_json::json;

fn endpoint() -> String {
    std::env::var("S3_TEST_ENDPOINT").expect("S3_TEST_ENDPOINT: run `make bench`")
}

async fn bucket(name: &str) -> S3Store {
    let b = format!("bench-{name}-{}", fastrand::u32(..));
    let s = S3Store::for_endpoint(&endpoint(), &b);
    s.client()
        .create_bucket()
        .bucket(&b)
        .send()
        .await
        .expect("creating a bucket on moto");
    s
}

fn input(bytes: usize) -> serde_json::Value {
    json!({"order": "ORD-123", "pad": "x".repeat(bytes.saturating_sub(30))})
}

/// The document being written, and every figure that has a target.
struct Report(String, Vec<Target>);

/// A measured figure against its target.
struct Target {
    figure: String,
    measured: String,
    target: String,
    met: bool,
}

impl Report {
    fn new() -> Self {
        Report(String::new(), Vec::new())
    }

    fn line(&mut self, s: impl AsRef<str>) {
        println!("{}", s.as_ref());
        self.0.push_str(s.as_ref());
        self.0.push('\n');
    }

    fn target(
        &mut self,
        figure: impl Into<String>,
        measured: impl Into<String>,
        target: impl Into<String>,
        met: bool,
    ) {
        self.1.push(Target {
            figure: figure.into(),
            measured: measured.into(),
            target: target.into(),
            met,
        });
    }
}

/// The median of `xs` (sorted in place); panics on an empty sample, so a
/// figure that could not be measured fails the run instead of reading 0.
fn median(xs: &mut [f64], what: &str) -> f64 {
    assert!(!xs.is_empty(), "no sample of {what} could be measured");
    xs.sort_by(|a, b| a.total_cmp(b));
    xs[xs.len() / 2]
}

// ---- 1. requests per operation ----

/// A clock `ahead` of the system clock: the sweeper's view of a record's
/// event, `STALE_CREATING_AFTER_SECONDS` after the write.
struct Ahead(ChronoDuration);

impl Clock for Ahead {
    fn now(&self) -> chrono::DateTime<chrono::Utc> {
        chrono::Utc::now() + self.0
    }
}

/// What buquet's worker does to every pending task it claims and runs: the
/// task turns `running` by compare-and-swap, its marker is deleted, and it
/// completes. Straight on the bucket: these requests are the queue's.
async fn worker_claims_every_task(mem: &MemoryStore) {
    for key in mem.keys().into_iter().filter(|k| k.starts_with("tasks/")) {
        let o = mem.get(&key).await.expect("a task");
        let mut t: serde_json::Value = serde_json::from_slice(&o.body).expect("a task's JSON");
        if t["status"] != "pending" {
            continue;
        }
        let id = t["id"].as_str().expect("an id").to_owned();
        let shard = t["shard"].as_str().expect("a shard").to_owned();
        let available: chrono::DateTime<chrono::Utc> = t["available_at"]
            .as_str()
            .and_then(|a| a.parse().ok())
            .expect("available_at");
        t["status"] = json!("completed");
        t["attempt"] = json!(1);
        mem.put(
            &key,
            bytes::Bytes::from(t.to_string()),
            PutMode::Update(o.meta.etag),
        )
        .await
        .expect("the worker's claim");
        let marker = format!("ready/{shard}/{:010}/{id}", available.timestamp() / 60);
        mem.delete(&marker, None)
            .await
            .expect("the claimed task's marker");
    }
}

async fn requests(r: &mut Report) {
    let clock = ManualClock::at_epoch();
    let mem = MemoryStore::new(Arc::new(clock.clone()) as Arc<dyn Clock>);
    let f = FaultyStore::new(mem.clone());
    let q = Queue::with_clock(f.clone(), Arc::new(clock.clone()), Settings::default());
    let count = |f: &FaultyStore<MemoryStore>| (f.calls().len(), f.round_trips());
    let record = |mem: &MemoryStore| {
        mem.keys()
            .into_iter()
            .find(|k| k.starts_with("idempotency/"))
            .expect("a record")
    };
    let mut rows = Vec::new();
    f.reset_log();
    q.submit("t", json!(1)).idempotency_key("k").await.unwrap();
    rows.push(("new submit", count(&f), (3, 2)));
    f.reset_log();
    q.submit("t", json!(1)).idempotency_key("k").await.unwrap();
    rows.push((
        "replay of a record that can still be finished",
        count(&f),
        (4, 3),
    ));
    // A worker claims the task, as buquet's does: a CAS to running, then it
    // deletes the marker. The queue's requests, not ours: not counted.
    worker_claims_every_task(&mem).await;
    clock.advance(Settings::default().stale_creating_after);
    f.reset_log();
    q.engine().sweep_record(&record(&mem), false, None).await;
    rows.push((
        "the sweeper's event: a task the worker took",
        count(&f),
        (3, 2),
    ));
    let s = Settings::default();
    clock.advance(s.finish_window + ChronoDuration::minutes(15));
    f.reset_log();
    q.submit("t", json!(1)).idempotency_key("k").await.unwrap();
    rows.push(("replay of a settled record", count(&f), (3, 3)));
    f.reset_log();
    q.submit("t", json!(2))
        .idempotency_key("k")
        .await
        .unwrap_err();
    rows.push(("conflict", count(&f), (2, 2)));
    f.reset_log();
    q.submit("t", json!(1)).await.unwrap();
    rows.push(("submit without a key", count(&f), (2, 1)));
    // An interrupted submit, finished by the next one: it died after its
    // record, and then after its task.
    for (name, prefix, counts) in [
        (
            "replay that finishes a submit that died after its record",
            "idempotency/",
            (6, 4),
        ),
        (
            "replay that finishes a submit that died after its task",
            "tasks/",
            (6, 5),
        ),
    ] {
        let crash = FaultyStore::new(mem.clone());
        if prefix == "tasks/" {
            // The marker's first attempt fails, so the task lands first and
            // the process dies before the marker's retry.
            crash.inject(
                Some(Op::Put),
                "ready/",
                1,
                1,
                Fault::Fail(idempotent_submit::store::StoreError::Unavailable(
                    "503".into(),
                )),
            );
        }
        crash.inject(Some(Op::PutCreate), prefix, 1, 1, Fault::CrashAfter);
        let qc = Queue::with_clock(crash, Arc::new(clock.clone()), Settings::default());
        let key = format!("died-{prefix}");
        qc.submit("t", json!(1))
            .idempotency_key(&key)
            .await
            .unwrap_err();
        f.reset_log();
        q.submit("t", json!(1)).idempotency_key(&key).await.unwrap();
        rows.push((name, count(&f), counts));
    }

    r.line("## S3 requests per operation\n");
    r.line("Counted by the fault-injecting store's call log (in-memory bucket, in which a worker claims the tasks as buquet's does); round trips are calls that did not overlap. The figures are upper bounds (docs/protocol.md, request counts). A submit that died after its task wrote no marker: its replay writes the marker and reads the task again, in case a worker claimed it in between.\n");
    r.line("| operation | requests | sequential round trips | at most |");
    r.line("| --- | --- | --- | --- |");
    for (name, (calls, rts), (max_calls, max_rts)) in rows {
        r.line(format!(
            "| {name} | {calls} | {rts} | {max_calls} / {max_rts} |"
        ));
        r.target(
            format!("requests / round trips: {name}"),
            format!("{calls} / {rts}"),
            format!("≤ {max_calls} / {max_rts}"),
            calls <= max_calls && rts <= max_rts,
        );
    }
}

// ---- 2. round trips and throughput through a network link ----

/// A TCP link in front of moto that delays every byte by `delay` in each
/// direction: what is read at `t` is written on at `t + delay`, whatever else
/// is on the way, so a request costs one round trip however it is cut into
/// segments.
///
/// The link connects to moto when the first bytes of a connection are due
/// there, not when the client connects: moto closes every connection after
/// one answer (HTTP/1.0), where S3 keeps connections alive, so a connection
/// should reach moto with its request, as a pooled connection's request
/// reaches S3.
async fn link(upstream: std::net::SocketAddr, delay: Duration) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binding the link");
    let addr = listener.local_addr().expect("the link's address");
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            tokio::spawn(carry(client, upstream, delay));
        }
    });
    format!("http://{addr}")
}

type Chunk = (tokio::time::Instant, Vec<u8>);

/// Reads `from` and queues what it reads, each chunk due `delay` later.
async fn delayed_reader<R: tokio::io::AsyncRead + Unpin>(
    mut from: R,
    delay: Duration,
    tx: tokio::sync::mpsc::UnboundedSender<Chunk>,
) {
    use tokio::io::AsyncReadExt;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let due = tokio::time::Instant::now() + delay;
                if tx.send((due, buf[..n].to_vec())).is_err() {
                    return;
                }
            }
        }
    }
}

/// Writes each queued chunk to `to` when it is due; shuts `to` down after
/// the last.
async fn delayed_writer<W: tokio::io::AsyncWrite + Unpin>(
    mut to: W,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<Chunk>,
) {
    use tokio::io::AsyncWriteExt;
    while let Some((due, bytes)) = rx.recv().await {
        tokio::time::sleep_until(due).await;
        if to.write_all(&bytes).await.is_err() {
            return;
        }
    }
    let _ = to.shutdown().await;
}

async fn carry(client: tokio::net::TcpStream, upstream: std::net::SocketAddr, delay: Duration) {
    let _ = client.set_nodelay(true);
    let (cr, cw) = client.into_split();
    let (up_tx, mut up_rx) = tokio::sync::mpsc::unbounded_channel::<Chunk>();
    tokio::spawn(delayed_reader(cr, delay, up_tx));
    // Connect when the first bytes are due at moto.
    let Some((due, first)) = up_rx.recv().await else {
        return;
    };
    tokio::time::sleep_until(due).await;
    let Ok(server) = tokio::net::TcpStream::connect(upstream).await else {
        return;
    };
    let _ = server.set_nodelay(true);
    let (sr, mut sw) = server.into_split();
    if tokio::io::AsyncWriteExt::write_all(&mut sw, &first)
        .await
        .is_err()
    {
        return;
    }
    tokio::spawn(delayed_writer(sw, up_rx));
    let (down_tx, down_rx) = tokio::sync::mpsc::unbounded_channel::<Chunk>();
    tokio::spawn(delayed_reader(sr, delay, down_tx));
    delayed_writer(cw, down_rx).await;
}

fn moto_addr() -> std::net::SocketAddr {
    let e = endpoint();
    let hostport = e.trim_start_matches("http://").trim_end_matches('/');
    std::net::ToSocketAddrs::to_socket_addrs(hostport)
        .ok()
        .and_then(|mut a| a.next())
        .unwrap_or_else(|| panic!("S3_TEST_ENDPOINT {e} is not host:port"))
}

/// Median latency, in seconds, of `n` operations run one after the other.
async fn latency<F, Fut>(n: usize, f: F) -> f64
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut xs = Vec::with_capacity(n);
    for i in 0..n {
        let t = Instant::now();
        f(i).await;
        xs.push(t.elapsed().as_secs_f64());
    }
    median(&mut xs, "latency")
}

/// Per round and delay: median latency of new submits, replays of records
/// still `creating`, replays of `ready` records, and, to calibrate the link,
/// single PutObject and GetObject calls, at concurrency 1.
async fn latencies(round: usize, delay: Duration, n: usize) -> [f64; 5] {
    let direct = bucket("rt").await;
    let through = S3Store::for_endpoint(&link(moto_addr(), delay).await, direct.bucket());
    let q = Queue::new(through.clone(), Settings::default());
    let body = bytes::Bytes::from(input(1024).to_string());
    // Warm the connection pool up: two connections, as a submit's parallel
    // pair needs.
    for i in 0..4 {
        let (ka, kb) = (format!("warm/{i}a"), format!("warm/{i}b"));
        let (a, b) = tokio::join!(
            through.put(&ka, body.clone(), PutMode::Overwrite),
            through.put(&kb, body.clone(), PutMode::Overwrite)
        );
        a.and(b).expect("a PUT through the link");
    }
    let inp = input(1024);
    let (q, inp) = (&q, &inp);
    let key = |i: usize| format!("r{round}-{i}");
    let new = latency(n, |i| async move {
        let s = q
            .submit("bench", inp.clone())
            .idempotency_key(key(i))
            .await
            .expect("a submit through the link");
        assert!(s.created());
    })
    .await;
    let creating = latency(n, |i| async move {
        let s = q
            .submit("bench", inp.clone())
            .idempotency_key(key(i))
            .await
            .expect("a replay through the link");
        assert!(s.replayed);
    })
    .await;
    // The sweeper's events, as they come STALE_CREATING_AFTER_SECONDS later:
    // nothing is missing, nothing is written.
    let sweeper = Queue::with_clock(
        direct.clone(),
        Arc::new(Ahead(Settings::default().stale_creating_after)),
        Settings::default(),
    );
    for meta in direct
        .list("idempotency/", None, None, 1000)
        .await
        .expect("listing the records")
        .objects
    {
        let o = sweeper.engine().sweep_record(&meta.key, false, None).await;
        assert_eq!(o, idempotent_submit::protocol::RecordOutcome::Nothing);
    }
    // Replays once the records are settled: from a clock past their finish
    // window and the 15 minutes after it.
    let s = Settings::default();
    let later = Queue::with_clock(
        through.clone(),
        Arc::new(Ahead(s.finish_window + ChronoDuration::minutes(16))),
        Settings::default(),
    );
    let later = &later;
    let settled = latency(n, |i| async move {
        let s = later
            .submit("bench", inp.clone())
            .idempotency_key(key(i))
            .await
            .expect("a replay through the link");
        assert!(s.replayed);
    })
    .await;
    let t = &through;
    let body = &body;
    let put = latency(n, |i| async move {
        t.put(&format!("plain/{i}"), body.clone(), PutMode::Overwrite)
            .await
            .expect("a PUT through the link");
    })
    .await;
    let get = latency(n, |i| async move {
        t.get(&format!("plain/{i}"))
            .await
            .expect("a GET through the link");
    })
    .await;
    [new, creating, settled, put, get]
}

/// Operations per second at concurrency `c` through a link of `delay`: plain
/// 1 KiB PutObject calls, then new keyed submits of 1 KiB inputs.
async fn rates(delay: Duration, c: usize, n: usize) -> (f64, f64) {
    let direct = bucket("tp").await;
    let through = S3Store::for_endpoint(&link(moto_addr(), delay).await, direct.bucket());
    let settings = Settings {
        retry: RetryPolicy {
            attempt_timeout: Duration::from_secs(20),
            ..Default::default()
        },
        ..Settings::default()
    };
    let q = Queue::new(through.clone(), settings);
    let body = bytes::Bytes::from(input(1024).to_string());
    let s = &through;
    // Warm up: the connections the concurrency needs.
    run_concurrent(c, c, |i| {
        let body = body.clone();
        async move {
            s.put(&format!("warm/{i}"), body, PutMode::Overwrite)
                .await
                .expect("a PUT through the link");
        }
    })
    .await;
    let puts = run_concurrent(n, c, |i| {
        let body = body.clone();
        async move {
            s.put(&format!("baseline/{i}"), body, PutMode::Overwrite)
                .await
                .expect("a PUT through the link");
        }
    })
    .await;
    let (q, inp) = (&q, &input(1024));
    let subs = run_concurrent(n, c, |i| async move {
        q.submit("bench", inp.clone())
            .idempotency_key(format!("k{i}"))
            .await
            .expect("a submit through the link");
    })
    .await;
    (puts, subs)
}

async fn run_concurrent<F, Fut>(n: usize, c: usize, f: F) -> f64
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

/// The fixed one-way delay of the link: `BENCH_LINK_MS`, 100 ms by default.
/// The figure is a count of round trips and should not depend on it; a long
/// delay keeps what moto's one-at-a-time serving adds per request (a few
/// milliseconds) small beside it: at 25 ms the same method read a new
/// submit as 2.13 round trips, at 100 ms 2.06, with single requests at 1.02
/// and 1.00.
fn link_delay() -> Duration {
    Duration::from_millis(
        std::env::var("BENCH_LINK_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(100),
    )
}
const ROUNDS: usize = 5;
const PER_ROUND: usize = 20;

/// Keeps moto busy with a steady stream of small reads, sent straight to it
/// one after the other, until the returned sender is dropped. moto serves a
/// request that finds it idle several times slower than one that finds it
/// busy (measured here: first byte after 36 ms instead of 5.5 ms when it had
/// been idle for 200 ms), so without this the link's delay would also slow
/// moto down and read as extra round trips (a single PutObject read as 1.11).
/// The stream runs at both delays, so what it adds (a request of ours may
/// queue behind one of its) is the same at D and at 0.
async fn keep_busy() -> tokio::sync::oneshot::Sender<()> {
    let (tx, mut rx) = tokio::sync::oneshot::channel::<()>();
    let store = bucket("busy").await;
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = &mut rx => return,
                _ = store.head("nothing-here") => {}
            }
        }
    });
    tx
}

async fn round_trips(r: &mut Report) {
    r.line("\n## Round trips on the response path\n");
    r.line(format!(
        "A local TCP link in front of moto delays every byte by a fixed one-way latency D = {} ms in each direction (a network link: a request costs one round trip of {} ms however it is cut into segments). For each of {ROUNDS} rounds, {PER_ROUND} operations one after the other through a link of delay D and through one of delay 0 (the same client and moto); the round trips of an operation are (median at D − median at 0) / 2D. Shown: the median over the rounds, and the lowest and highest round. Meanwhile a steady stream of reads sent straight to moto keeps it busy at both delays (moto answers a request that finds it idle several times slower); single PutObject and GetObject calls, measured the same way, calibrate the method.\n",
        link_delay().as_millis(),
        2 * link_delay().as_millis()
    ));
    let mut per_kind: [Vec<f64>; 5] = Default::default();
    let mut at_zero: [Vec<f64>; 5] = Default::default();
    let busy = keep_busy().await;
    for round in 0..ROUNDS {
        let zero = latencies(2 * round, Duration::ZERO, PER_ROUND).await;
        let slow = latencies(2 * round + 1, link_delay(), PER_ROUND).await;
        for k in 0..5 {
            per_kind[k].push((slow[k] - zero[k]) / (2.0 * link_delay().as_secs_f64()));
            at_zero[k].push(zero[k] * 1000.0);
        }
    }
    drop(busy);
    r.line("| operation | round trips, median of rounds | lowest – highest round | median latency at D = 0 | target |");
    r.line("| --- | --- | --- | --- | --- |");
    let names = [
        "new submit",
        "replay of a record that can still be finished",
        "replay of a settled record",
        "one PutObject (the link's calibration)",
        "one GetObject (the link's calibration)",
    ];
    let targets = [Some(2.1), None, Some(3.1), None, None];
    for k in 0..5 {
        let mut xs = per_kind[k].clone();
        let m = median(&mut xs, names[k]);
        let (lo, hi) = (xs[0], xs[xs.len() - 1]);
        let z = median(&mut at_zero[k], names[k]);
        let target = targets[k].map_or("—".to_owned(), |t| format!("≤ {t}"));
        r.line(format!(
            "| {} | {m:.2} | {lo:.2} – {hi:.2} | {z:.1} ms | {target} |",
            names[k]
        ));
        if let Some(t) = targets[k] {
            r.target(
                format!("round trips: {}", names[k]),
                format!("{m:.2} ({lo:.2} – {hi:.2})"),
                format!("≤ {t}"),
                m <= t,
            );
        }
    }

    r.line("\n## Throughput through the link\n");
    r.line(format!(
        "At concurrency 64, through the same link of D = {} ms: 640 plain 1 KiB PutObject calls, then 640 new keyed submits of 1 KiB inputs (3 requests each), three rounds. moto serves one request at a time.\n",
        link_delay().as_millis()
    ));
    r.line("| round | PutObject/s | submits/s | ratio |");
    r.line("| --- | --- | --- | --- |");
    let mut ratios = Vec::new();
    for round in 1..=3 {
        let (puts, subs) = rates(link_delay(), 64, 640).await;
        ratios.push(subs / puts);
        r.line(format!(
            "| {round} | {puts:.0} | {subs:.0} | {:.2} |",
            subs / puts
        ));
    }
    let m = median(&mut ratios, "the throughput ratio");
    r.target(
        "new submits per PutObject at concurrency 64, through the link",
        format!(
            "{m:.2} ({:.2} – {:.2})",
            ratios[0],
            ratios[ratios.len() - 1]
        ),
        "≥ 0.30",
        m >= 0.30,
    );
}

// ---- 3. CPU cost without I/O ----

async fn cpu(r: &mut Report) {
    r.line("\n## The protocol's CPU cost (in-memory bucket, one thread)\n");
    r.line("| operation | input | operations | per second |");
    r.line("| --- | --- | --- | --- |");
    for (size, n) in [(1024usize, 50_000usize), (64 * 1024, 3_000)] {
        let clock = ManualClock::at_epoch();
        let mem = MemoryStore::new(Arc::new(clock.clone()) as Arc<dyn Clock>);
        let q = Queue::with_clock(mem, Arc::new(clock), Settings::default());
        let inp = input(size);
        let start = Instant::now();
        for i in 0..n {
            q.submit("bench", inp.clone())
                .idempotency_key(format!("k{i}"))
                .await
                .unwrap();
        }
        let new = n as f64 / start.elapsed().as_secs_f64();
        let start = Instant::now();
        for i in 0..n {
            q.submit("bench", inp.clone())
                .idempotency_key(format!("k{i}"))
                .await
                .unwrap();
        }
        let rep = n as f64 / start.elapsed().as_secs_f64();
        let kib = size / 1024;
        r.line(format!("| new submit | {kib} KiB | {n} | {new:.0} |"));
        r.line(format!("| replay | {kib} KiB | {n} | {rep:.0} |"));
        if size == 1024 {
            r.target(
                "new submits per second per core, 1 KiB, in memory",
                format!("{new:.0}"),
                "≥ 50,000",
                new >= 50_000.0,
            );
        }
    }
}

// ---- task options and offloaded inputs ----

/// A keyed submit: with every option but the payload's (`opts`: what most
/// producers with options send), and with `use_payload_refs` at buquet's
/// threshold (`offload`).
fn keyed<'q>(
    q: &'q Queue,
    inp: &serde_json::Value,
    i: usize,
    opts: bool,
    offload: bool,
) -> idempotent_submit::SubmitBuilder<'q> {
    let mut b = q
        .submit("bench", inp.clone())
        .idempotency_key(format!("k{i}"));
    if opts {
        b = b
            .timeout(ChronoDuration::minutes(30))
            .max_retries(10)
            .retry_policy(idempotent_submit::TaskRetryPolicy {
                initial_interval_ms: 500,
                ..Default::default()
            })
            .delay(ChronoDuration::seconds(90))
            .max_reschedules(5)
            .task_ttl(ChronoDuration::hours(6));
    }
    if offload {
        b = b.payload_refs(256 * 1024);
    }
    b
}

async fn options(r: &mut Report) {
    const MIB: usize = 1 << 20;
    let settings = || Settings {
        max_input_bytes: 2 * MIB,
        ..Settings::default()
    };
    r.line("\n## Task options and offloaded inputs\n");
    r.line(
        "In memory, one thread, as in section \"The protocol's CPU cost\": a keyed submit without options, with every option but `use_payload_refs` (timeout, retries, retry policy, delay, reschedules, task ttl), and with a 1 MiB input offloaded (`use_payload_refs`, buquet's 256 KiB threshold; `MAX_INPUT_BYTES` raised to 2 MiB). Requests and round trips are counted by the fault-injecting store (no faults); bytes PUT are the bodies a new submit leaves in the bucket.\n",
    );
    r.line("| submit | input | operations | new per second | replays per second | requests (new) | round trips (new) | requests (replay) | bytes PUT (new) |");
    r.line("| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for (name, size, n, opts, offload) in [
        ("no options", 1024usize, 20_000usize, false, false),
        ("every option", 1024, 20_000, true, false),
        ("offloaded", MIB, 40, false, true),
    ] {
        let clock = ManualClock::at_epoch();
        let mem = MemoryStore::new(Arc::new(clock.clone()) as Arc<dyn Clock>);
        let q = Queue::with_clock(mem.clone(), Arc::new(clock.clone()), settings());
        let inp = input(size);
        let start = Instant::now();
        for i in 0..n {
            keyed(&q, &inp, i, opts, offload).await.unwrap();
        }
        let new = n as f64 / start.elapsed().as_secs_f64();
        let start = Instant::now();
        for i in 0..n {
            keyed(&q, &inp, i, opts, offload).await.unwrap();
        }
        let rep = n as f64 / start.elapsed().as_secs_f64();
        // One more of each, counted.
        let f = FaultyStore::new(mem.clone());
        let fq = Queue::with_clock(f.clone(), Arc::new(clock.clone()), settings());
        keyed(&fq, &inp, n + 1, opts, offload).await.unwrap();
        let calls = f.calls();
        let (new_requests, new_rts) = (calls.len(), f.round_trips());
        let mut written: Vec<&str> = calls
            .iter()
            .filter(|c| matches!(c.op, Op::PutCreate | Op::Put | Op::PutUpdate))
            .map(|c| c.key.as_str())
            .collect();
        written.dedup();
        let mut put_bytes = 0usize;
        for k in written {
            put_bytes += mem.get(k).await.map(|o| o.body.len()).unwrap_or(0);
        }
        f.reset_log();
        keyed(&fq, &inp, n + 1, opts, offload).await.unwrap();
        let replay_requests = f.calls().len();
        let kib = size / 1024;
        r.line(format!(
            "| {name} | {kib} KiB | {n} | {new:.0} | {rep:.0} | {new_requests} | {new_rts} | {replay_requests} | {put_bytes} |"
        ));
    }
    r.line("\nOptions add no request and no round trip. Their CPU is below what this bench resolves: the rows run in this order, the first on a cold allocator, and two runs gave 65,039 and 59,526 new submits a second without options, 70,403 and 71,177 with them.");
    r.line("An offloaded submit sends its input twice in its first round trip: as the payload, and in the record (`pending_input`, so that a finisher never needs the producer; docs/protocol.md). A replay of it sends its own payload's PUT beside the record's and deletes it beside the answer (the key is another task's): two requests more than an inline replay, no round trip more.");
    r.line("\nThrough moto (one request at a time, on this machine), wall time of one keyed submit, median of 15:\n");
    r.line("| submit | input | new | replay |");
    r.line("| --- | --- | --- | --- |");
    for (name, size, opts, offload) in [
        ("no options", 1024usize, false, false),
        ("every option", 1024, true, false),
        ("offloaded", MIB, false, true),
    ] {
        let store = bucket("options").await;
        let q = Queue::new(store, settings());
        let inp = input(size);
        let (mut news, mut reps) = (Vec::new(), Vec::new());
        for i in 0..15 {
            let t = Instant::now();
            keyed(&q, &inp, i, opts, offload).await.unwrap();
            news.push(t.elapsed().as_secs_f64() * 1000.0);
            let t = Instant::now();
            keyed(&q, &inp, i, opts, offload).await.unwrap();
            reps.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        let (new, rep) = (median(&mut news, "new"), median(&mut reps, "replay"));
        r.line(format!(
            "| {name} | {} KiB | {new:.1} ms | {rep:.1} ms |",
            size / 1024
        ));
    }
}

// ---- 4-6. the binaries: cold start, size, memory ----

fn bin(name: &str) -> String {
    format!("{}/target/release/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn function(name: &str, api: &RuntimeApi, bucket: &str) -> tokio::process::Child {
    tokio::process::Command::new(bin(name))
        .env_clear()
        .env("AWS_LAMBDA_RUNTIME_API", &api.addr)
        .env("AWS_LAMBDA_FUNCTION_NAME", name)
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256")
        .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        .env("AWS_LAMBDA_LOG_STREAM_NAME", "s")
        .env("AWS_LAMBDA_LOG_GROUP_NAME", "g")
        .env("BUCKET_NAME", bucket)
        .env("AWS_ENDPOINT_URL_S3", endpoint())
        .env("S3_FORCE_PATH_STYLE", "true")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "us-east-1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("release binaries: run `make bench`")
}

async fn binaries(r: &mut Report) {
    r.line("\n## The functions\n");
    r.line("| binary | stripped release size | cold start, median (p90) of 30 |");
    r.line("| --- | --- | --- |");
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
        let mut times = Vec::new();
        for _ in 0..30 {
            let api = RuntimeApi::start().await;
            let start = Instant::now();
            let mut child = function(name, &api, "cold");
            if let Some(t) = api.first_poll().await {
                times.push(t.duration_since(start));
            }
            let _ = child.kill().await;
        }
        assert!(
            times.len() == 30,
            "`{name}` reached the runtime API in only {} of 30 starts",
            times.len()
        );
        times.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let (p50, p90) = (ms(times[15]), ms(times[27]));
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
    r.line("\nCold start: from spawning the process to its first `GET /runtime/invocation/next` on a local runtime API stand-in (configuration read, S3 client built). Targets: at most 20 ms, at most 10 MB.");

    // Peak memory for an SQS batch of 10 messages of 256 KiB inputs.
    let store = bucket("rss").await;
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
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/status: {e}: peak memory cannot be measured"));
    let hwm: f64 = status
        .lines()
        .find(|l| l.starts_with("VmHWM"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse().ok())
        .expect("VmHWM in /proc/<pid>/status");
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

// ---- 7. the sweeper ----

async fn sweeper(r: &mut Report) {
    r.line("\n## The sweeper\n");
    let clock = ManualClock::at_epoch();
    let mem = MemoryStore::new(Arc::new(clock.clone()) as Arc<dyn Clock>);
    let q = Queue::with_clock(mem.clone(), Arc::new(clock.clone()), Settings::default());
    let n = 20_000;
    for i in 0..n {
        q.submit("bench", json!(i))
            .idempotency_key(format!("k{i}"))
            .idempotency_ttl(ChronoDuration::hours(if i % 2 == 0 { 1 } else { 720 }))
            .await
            .unwrap();
    }
    clock.advance(ChronoDuration::days(31));
    let f = FaultyStore::new(mem.clone());
    let qs = Queue::with_clock(f.clone(), Arc::new(clock.clone()), Settings::default());
    let start = Instant::now();
    let s = qs.engine().sweep(&SweepOptions::default()).await.unwrap();
    let rate = s.scanned as f64 / start.elapsed().as_secs_f64();
    r.line(format!("A first pass over {n} records in memory, 31 days after they were written: {rate:.0} records/s ({} read, {} deleted, {} LISTs).", s.reads, s.expired_deleted, s.lists));
    let mut reads = s.reads;
    for _ in 0..9 {
        clock.advance(ChronoDuration::minutes(5));
        reads += qs
            .engine()
            .sweep(&SweepOptions::default())
            .await
            .unwrap()
            .reads;
    }
    r.line(format!(
        "Reads per record over 10 runs five minutes apart: {:.2}.",
        reads as f64 / n as f64
    ));

    // Against moto: one pass over 1000 records.
    let store = bucket("sweep").await;
    let q = Queue::new(store.clone(), Settings::default());
    let inp = input(64);
    let inp = &inp;
    let q = &q;
    run_concurrent(1000, 16, |i| async move {
        q.submit("bench", inp.clone())
            .idempotency_key(format!("k{i}"))
            .await
            .unwrap();
    })
    .await;
    let later = ManualClock::new(chrono::Utc::now() + ChronoDuration::minutes(11));
    let qs = Queue::with_clock(store, Arc::new(later), Settings::default());
    let start = Instant::now();
    let s = qs.engine().sweep(&SweepOptions::default()).await.unwrap();
    r.line(format!(
        "A first pass over 1000 records on moto (each read once, 16 at a time): {:.0} records/s.",
        s.scanned as f64 / start.elapsed().as_secs_f64()
    ));
}

// ---- the cost model ----

/// AWS list prices (us-east-1), dollars per request or per GB-second.
const PUT: f64 = 0.005 / 1000.0; // PUT, COPY, POST, LIST
const GET: f64 = 0.0004 / 1000.0; // GET, HEAD
const SQS: f64 = 0.40 / 1_000_000.0;
const LAMBDA_REQUEST: f64 = 0.20 / 1_000_000.0;
const LAMBDA_GB_S: f64 = 0.000_013_333_4; // arm64
const LAMBDA_GB: f64 = 0.25; // MemorySize 256 in template.yaml
const HTTP_API: f64 = 1.00 / 1_000_000.0;
const REST_API: f64 = 3.50 / 1_000_000.0;
/// Messages per receive and per delete of the due queue's event source
/// mapping when it fills its batches (BatchSize 10, a 20 s window).
const SQS_BATCH: f64 = 10.0;
/// Days a record lives: the default TTL.
const TTL_DAYS: f64 = 30.0;
/// Sequential LIST latency assumed for S3 (not measurable here).
const S3_LIST_SECONDS: f64 = 0.05;

/// S3 requests by price class, from a store's call log.
fn priced(calls: &[idempotent_submit::store::Call]) -> (f64, f64) {
    let (mut puts, mut gets) = (0.0, 0.0);
    for c in calls {
        match c.op {
            Op::Get | Op::Head => gets += 1.0,
            Op::Delete => {}
            _ => puts += 1.0,
        }
    }
    (puts, gets)
}

async fn cost(r: &mut Report) {
    use idempotent_submit::lambda::due::{DueMessage, handle_messages};
    r.line("\n## What it costs: dollars per million keyed submits\n");
    let clock = ManualClock::at_epoch();
    let mem = MemoryStore::new(Arc::new(clock.clone()) as Arc<dyn Clock>);
    let f = FaultyStore::new(mem.clone());
    let q = Queue::with_clock(f.clone(), Arc::new(clock.clone()), Settings::default());

    // The response path of N new submits, and the record writes they make
    // (each one an S3 event, an SQS message, a sweeper read).
    let n = 1000;
    for i in 0..n {
        q.submit("t", json!(i))
            .idempotency_key(format!("k{i}"))
            .await
            .unwrap();
    }
    let calls = f.calls();
    let (resp_puts, resp_gets) = priced(&calls);
    let record_writes: Vec<String> = calls
        .iter()
        .filter(|c| {
            c.key.starts_with("idempotency/") && matches!(c.op, Op::PutCreate | Op::PutUpdate)
        })
        .map(|c| c.key.clone())
        .collect();
    // As in production, a worker claims and runs the tasks before their
    // records' events come (within STALE_CREATING_AFTER_SECONDS).
    worker_claims_every_task(&mem).await;
    // Every event, delivered after the due queue's delay, batches of ten.
    clock.advance(ChronoDuration::seconds(600));
    f.reset_log();
    for chunk in record_writes.chunks(10) {
        let msgs: Vec<DueMessage> = chunk
            .iter()
            .enumerate()
            .map(|(i, k)| DueMessage {
                id: i.to_string(),
                body: json!({"Records": [{"eventSource": "aws:s3",
                    "s3": {"bucket": {"name": "b"}, "object": {"key": k}}}]})
                .to_string(),
            })
            .collect();
        handle_messages(q.engine(), "b", &msgs, false, None).await;
    }
    let event_calls = f.calls();
    let (ev_puts, ev_gets) = priced(&event_calls);
    assert_eq!(
        ev_puts, 0.0,
        "the sweeper writes nothing for tasks a worker ran"
    );
    let markers_left = mem
        .keys()
        .iter()
        .filter(|k| k.starts_with("ready/"))
        .count();
    assert_eq!(markers_left, 0, "no marker of a task the worker ran");
    let per = |x: f64| x / n as f64;
    // Each record write is one S3 event: one SQS message, one sweeper read.
    let events_per = per(record_writes.len() as f64);

    // The daily pass over a record's life: records written through a day
    // (each task run by a worker), passes once a day for the TTL and two
    // days more.
    let mem2 = MemoryStore::new(Arc::new(clock.clone()) as Arc<dyn Clock>);
    let f2 = FaultyStore::new(mem2.clone());
    let q2 = Queue::with_clock(f2.clone(), Arc::new(clock.clone()), Settings::default());
    let m = 2000;
    for i in 0..m {
        q2.submit("t", json!(i))
            .idempotency_key(format!("p{i}"))
            .await
            .unwrap();
        clock.advance(ChronoDuration::seconds(86_400 / m as i64));
    }
    worker_claims_every_task(&mem2).await;
    f2.reset_log();
    let mut lists = 0u64;
    for _ in 0..(TTL_DAYS as usize + 2) {
        let s = q2.engine().sweep(&SweepOptions::default()).await.unwrap();
        lists += s.lists;
        clock.advance(ChronoDuration::days(1));
    }
    // The pass's reads per record are measured. Its listings are one LIST
    // per 1,000 records a day at scale: a bucket of 2,000 records spends
    // most of its LISTs finding its scopes and splitting its ranges, which a
    // bucket of millions shares out over a thousand times more records.
    let pass_calls = f2.calls();
    let pass_gets = priced(&pass_calls).1 / m as f64;
    let pass_lists_here = pass_calls.iter().filter(|c| c.op == Op::List).count();
    let pass_puts = TTL_DAYS / 1000.0;

    // Lambda durations, measured against moto (slower than S3: an upper
    // bound): one new submit, and one due batch of ten events.
    let store = bucket("cost").await;
    let qm = Queue::new(store.clone(), Settings::default());
    let reps = 50;
    let t = Instant::now();
    for i in 0..reps {
        qm.submit("t", json!(i))
            .idempotency_key(format!("c{i}"))
            .await
            .unwrap();
    }
    let submit_s = t.elapsed().as_secs_f64() / reps as f64;
    let keys: Vec<String> = store
        .list("idempotency/", None, None, 1000)
        .await
        .unwrap()
        .objects
        .into_iter()
        .map(|o| o.key)
        .collect();
    let msgs: Vec<DueMessage> = keys
        .iter()
        .take(10)
        .enumerate()
        .map(|(i, k)| DueMessage {
            id: i.to_string(),
            body: json!({"Records": [{"eventSource": "aws:s3",
                "s3": {"bucket": {"name": store.bucket()}, "object": {"key": k}}}]})
            .to_string(),
        })
        .collect();
    let t = Instant::now();
    for _ in 0..10 {
        handle_messages(qm.engine(), store.bucket(), &msgs, false, None).await;
    }
    let batch_s = t.elapsed().as_secs_f64() / 10.0;

    let lambda = |secs: f64| LAMBDA_REQUEST + LAMBDA_GB * secs * LAMBDA_GB_S;
    let million = 1_000_000.0;
    let s3 = |puts: f64, gets: f64| (puts * PUT + gets * GET) * million;
    // One row per part of the bill, per million keyed submits.
    let sqs_per = events_per * (1.0 + 2.0 / SQS_BATCH);
    let rows: Vec<(&str, String, f64)> = vec![
        (
            "response path: S3 (PUT record; PUT task and marker)",
            format!("{:.2} PUT, {:.2} GET", per(resp_puts), per(resp_gets)),
            s3(per(resp_puts), per(resp_gets)),
        ),
        (
            "response path: Lambda (`submit`)",
            format!("1 invocation of {:.1} ms", submit_s * 1000.0),
            lambda(submit_s) * million,
        ),
        (
            "record events: S3 (GET record; GET task and HEAD marker)",
            format!("{:.2} PUT, {:.2} GET", per(ev_puts), per(ev_gets)),
            s3(per(ev_puts), per(ev_gets)),
        ),
        (
            "record events: SQS (S3's send; receive and delete, batches of 10)",
            format!("{sqs_per:.2} requests"),
            sqs_per * SQS * million,
        ),
        (
            "record events: Lambda (`sweep`, one per batch of 10)",
            format!(
                "{:.2} invocations of {:.1} ms",
                events_per / SQS_BATCH,
                batch_s * 1000.0
            ),
            events_per / SQS_BATCH * lambda(batch_s) * million,
        ),
        (
            "daily pass: S3 (LIST, one per 1,000 records a day; GET record, task, HEAD marker)",
            format!("{pass_puts:.3} LIST, {pass_gets:.2} GET"),
            s3(pass_puts, pass_gets),
        ),
    ];
    let total: f64 = rows.iter().map(|(_, _, d)| d).sum();

    r.line(format!(
        "Measured on an in-memory bucket where a worker claims and runs every task before its record's event comes, as buquet's workers do on a healthy queue: {n} new keyed submits, their {} record events in batches of ten, and {} daily passes over {m} records written through a day ({pass_lists_here} LISTs there: at that size mostly finding scopes and splitting ranges; at scale a pass lists 1,000 records a LIST). Lambda durations against moto (an upper bound for S3), at {} MB.\n",
        record_writes.len(),
        TTL_DAYS as usize + 2,
        (LAMBDA_GB * 1024.0) as u32
    ));
    r.line("Prices: S3 Standard PUT, COPY, POST and LIST $0.005 per 1,000, GET and HEAD $0.0004 per 1,000, DELETE free; SQS $0.40 per million requests; Lambda arm64 $0.0000133334 per GB-second and $0.20 per million requests; API Gateway HTTP API $1.00 and REST API $3.50 per million requests.\n");
    r.line("| part | per submit | dollars per million submits |");
    r.line("| --- | --- | --- |");
    for (part, requests, dollars) in &rows {
        r.line(format!("| {part} | {requests} | ${dollars:.2} |"));
    }
    r.line(format!(
        "| **S3, SQS and Lambda in all** | | **${total:.2}** |"
    ));
    r.line(format!(
        "| with an HTTP API in front (+ $1.00) | | ${:.2} |",
        total + HTTP_API * million
    ));
    r.line(format!(
        "| with a REST API in front (+ $3.50) | | ${:.2} |",
        total + REST_API * million
    ));
    r.line(format!(
        "\nBefore the ready index was kept true, the same bill was $23.39 (the last run's $15.22 response path, $3.17 sweeper and $5.00 of promotions, in a bucket without a worker), and in a bucket with a worker each record event also wrote the marker of a task already run again (+$5.00, and a stale marker every idle worker re-reads): $28.39. Now the sweeper writes nothing when nothing is missing: ${total:.2}.\n"
    ));
    r.target(
        "S3, SQS and Lambda per million keyed submits, a worker consuming the markers",
        format!("${total:.2}"),
        "≤ $18",
        total <= 18.0,
    );
    let pass_lists = TTL_DAYS / 1000.0; // each record listed once a day
    r.line(format!(
        "Per submit, nothing above depends on the number of live records: the events' path reads the record its event names, and the pass's share is one LIST per 1,000 records per day, {:.3} LISTs per submit at a {TTL_DAYS}-day TTL.\n",
        pass_lists
    ));
    r.line(format!(
        "The scheduled pass at those sizes ({} listings at once, {} s per sequential LIST assumed for S3; {lists} LISTs were made here for {m} records over {} daily passes):\n",
        idempotent_submit::protocol::sweep::RANGES_AT_ONCE, S3_LIST_SECONDS, TTL_DAYS as usize + 2
    ));
    r.line("| live records | LISTs per pass | time per pass | 110 s runs per pass |");
    r.line("| --- | --- | --- | --- |");
    for (label, size) in [
        ("1 million", 1e6),
        ("100 million", 1e8),
        ("10 billion", 1e10),
    ] {
        let lists = size / 1000.0;
        let secs =
            lists / idempotent_submit::protocol::sweep::RANGES_AT_ONCE as f64 * S3_LIST_SECONDS;
        r.line(format!(
            "| {label} | {lists:.0} | {} | {:.0} |",
            if secs < 3600.0 {
                format!("{:.0} s", secs)
            } else {
                format!("{:.1} h", secs / 3600.0)
            },
            (secs / 110.0).ceil()
        ));
    }
}

// ---- the batch submit (POST /tasks/batch, Queue::submit_many) ----

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

/// A release binary where `make bench` built one, else the debug build (its
/// memory is an upper bound of the release's).
fn built(name: &str) -> (String, &'static str) {
    let release = bin(name);
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
    let store = bucket("batch-rss").await;
    let mut api = RuntimeApi::start().await;
    let child = tokio::process::Command::new(&path)
        .env_clear()
        .env("AWS_LAMBDA_RUNTIME_API", &api.addr)
        .env("AWS_LAMBDA_FUNCTION_NAME", "submit")
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128")
        .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        .env("AWS_LAMBDA_LOG_STREAM_NAME", "s")
        .env("AWS_LAMBDA_LOG_GROUP_NAME", "g")
        .env("BUCKET_NAME", store.bucket())
        .env("AWS_ENDPOINT_URL_S3", endpoint())
        .env("S3_FORCE_PATH_STYLE", "true")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "us-east-1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
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
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/status: {e}: peak memory cannot be measured"));
    let hwm: f64 = status
        .lines()
        .find(|l| l.starts_with("VmHWM"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse().ok())
        .expect("VmHWM in /proc/<pid>/status");
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
    let store = bucket("idem-rss").await;
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

async fn batch(r: &mut Report) {
    r.line("\n## Batch submit\n");
    let d = link_delay();
    r.line(format!(
        "Through the link of section \"Round trips on the response path\" (D = {} ms each way, moto kept busy), three rounds: a batch of {BATCH} new keys with 1 KiB inputs through `Queue::submit_many` (what `POST /tasks/batch` runs), then {BATCH} single new submits one after the other, at D and at 0. Round trips of the batch: (time at D − time at 0) / 2D; of the singles, the same per submit. moto serves one request at a time, so at D = 0 the batch's {} requests queue behind each other: its time there is moto's, not the protocol's.\n",
        d.as_millis(),
        3 * BATCH
    ));
    r.line("| round | batch: round trips | batch: time at D | batch: submits/s at D | singles: round trips each | singles: time at D | singles: submits/s at D |");
    r.line("| --- | --- | --- | --- | --- | --- | --- |");
    let busy = keep_busy().await;
    let (mut batch_rts, mut speedups, mut at_zero) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..3 {
        let direct = bucket("batch").await;
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
        let two_d = 2.0 * d.as_secs_f64();
        let b_rt = (bd - b0) / two_d;
        let s_rt = (sd - s0) / two_d / BATCH as f64;
        batch_rts.push(b_rt);
        speedups.push(sd / bd);
        at_zero.push((b0, s0));
        r.line(format!(
            "| {} | {b_rt:.2} | {:.2} s | {:.0} | {s_rt:.2} | {sd:.1} s | {:.1} |",
            round + 1,
            bd,
            BATCH as f64 / bd,
            BATCH as f64 / sd
        ));
    }
    drop(busy);
    let rt = median(&mut batch_rts, "batch round trips");
    let speed = median(&mut speedups, "batch speed-up");
    r.target(
        format!("round trips: a batch of {BATCH} new keys"),
        format!("{rt:.2} ({:.2} – {:.2})", batch_rts[0], batch_rts[2]),
        "≤ 2.5",
        rt <= 2.5,
    );
    r.line(format!(
        "\nMedian: the batch takes **{rt:.2} round trips** for {BATCH} new keys (one new submit takes 2), and is **{speed:.0}×** faster than {BATCH} single submits through the same link."
    ));

    // Lambda and API Gateway per million tasks: one invocation per task
    // against one per 100, each invocation as long as measured at D = 0.
    let mut b0: Vec<f64> = at_zero.iter().map(|(b, _)| *b).collect();
    let mut s0: Vec<f64> = at_zero.iter().map(|(_, s)| *s / BATCH as f64).collect();
    let (b0, s0) = (
        median(&mut b0, "batch at 0"),
        median(&mut s0, "single at 0"),
    );
    const HTTP_API_REQUEST: f64 = 1.00 / 1_000_000.0;
    let per_million = |invocations: f64, seconds: f64| {
        invocations * (LAMBDA_REQUEST + HTTP_API_REQUEST)
            + invocations * seconds * LAMBDA_GB * LAMBDA_GB_S
    };
    let single = per_million(1e6, s0);
    let batched = per_million(1e6 / BATCH as f64, b0);
    r.line(format!(
        "\nPer million tasks, Lambda (arm64, {} MB, ${:.2} per million requests and the GB-seconds of each invocation as long as measured at D = 0 against moto: {:.1} ms a single submit, {:.0} ms a batch of {BATCH}) and API Gateway's HTTP API ($1.00 per million requests); S3 is the same either way (every item is a single submit's three requests, section \"What it costs\"):\n",
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

/// Every figure that has a target: what was measured, the target, met or
/// not. No causes: those are the reader's to find.
fn assess(r: &mut Report) {
    r.line("\n## Against the targets\n");
    r.line("| figure | measured | target | met |");
    r.line("| --- | --- | --- | --- |");
    let rows: Vec<String> =
        r.1.iter()
            .map(|t| {
                format!(
                    "| {} | {} | {} | {} |",
                    t.figure,
                    t.measured,
                    t.target,
                    if t.met { "yes" } else { "**no**" }
                )
            })
            .collect();
    for row in rows {
        r.line(row);
    }
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".into());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines().next().map(|l| {
                l.split_whitespace()
                    .nth(1)
                    .unwrap_or("0")
                    .parse::<f64>()
                    .unwrap_or(0.0)
                    / 1024.0
                    / 1024.0
            })
        })
        .unwrap_or(0.0);
    format!(
        "{cpu}, {cores} cores, {mem:.0} GiB; moto (`moto_server`, Python) on loopback as the S3 endpoint"
    )
}

fn main() {
    // `cargo test --all-targets` runs bench targets too, without `--bench`:
    // nothing to do then.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    // BENCH_ONLY=cpu: just the CPU figures, printed; the report is left alone.
    if std::env::var("BENCH_ONLY").as_deref() == Ok("cpu") {
        rt.block_on(cpu(&mut Report::new()));
        return;
    }
    // BENCH_ONLY=requests: just the request counts, printed.
    if std::env::var("BENCH_ONLY").as_deref() == Ok("requests") {
        let mut r = Report::new();
        rt.block_on(requests(&mut r));
        assess(&mut r);
        return;
    }
    // BENCH_ONLY=link: just the round trips and throughput through the
    // link, printed.
    if std::env::var("BENCH_ONLY").as_deref() == Ok("link") {
        let mut r = Report::new();
        rt.block_on(round_trips(&mut r));
        assess(&mut r);
        return;
    }
    // BENCH_ONLY=cost: the cost model, printed and put in place of its
    // section of docs/benchmarks.md.
    if std::env::var("BENCH_ONLY").as_deref() == Ok("cost") {
        let mut r = Report::new();
        rt.block_on(cost(&mut r));
        let path = format!("{}/docs/benchmarks.md", env!("CARGO_MANIFEST_DIR"));
        let doc = std::fs::read_to_string(&path).unwrap_or_default();
        let head = "\n## What it costs";
        let (before, after) = match doc.find(head) {
            Some(i) => {
                let rest = &doc[i + 1..];
                let end = rest.find("\n## ").map_or(doc.len(), |j| i + 1 + j);
                (doc[..i].to_owned(), doc[end..].to_owned())
            }
            None => (doc.trim_end().to_owned() + "\n", String::new()),
        };
        std::fs::write(&path, format!("{before}{}{after}", r.0)).unwrap();
        return;
    }
    // BENCH_ONLY=options: the figures of task options and offloaded
    // inputs, printed and put in place of their section (before the
    // targets).
    if std::env::var("BENCH_ONLY").as_deref() == Ok("options") {
        let mut r = Report::new();
        rt.block_on(options(&mut r));
        let path = format!("{}/docs/benchmarks.md", env!("CARGO_MANIFEST_DIR"));
        let doc = std::fs::read_to_string(&path).unwrap_or_default();
        let head = "\n## Task options and offloaded inputs";
        let (before, after) = match doc.find(head) {
            Some(i) => {
                let rest = &doc[i + 1..];
                let end = rest.find("\n## ").map_or(doc.len(), |j| i + 1 + j);
                (doc[..i].to_owned(), doc[end..].to_owned())
            }
            None => match doc.find("\n## Against the targets") {
                Some(i) => (doc[..i].to_owned(), doc[i..].to_owned()),
                None => (doc.trim_end().to_owned() + "\n", String::new()),
            },
        };
        std::fs::write(&path, format!("{before}{}{after}", r.0)).unwrap();
        return;
    }
    // BENCH_ONLY=batch: the batch figures, printed and put in place of their
    // section of docs/benchmarks.md (before the targets).
    if std::env::var("BENCH_ONLY").as_deref() == Ok("batch") {
        let mut r = Report::new();
        rt.block_on(batch(&mut r));
        assess(&mut r);
        let ours = r.0.replace(
            "\n## Against the targets\n",
            "\nThe batch's figures against their targets (a full run puts them in the table below):\n",
        );
        let path = format!("{}/docs/benchmarks.md", env!("CARGO_MANIFEST_DIR"));
        let doc = std::fs::read_to_string(&path).unwrap_or_default();
        let head = "\n## Batch submit";
        let (before, after) = match doc.find(head) {
            Some(i) => {
                let rest = &doc[i + 1..];
                let end = rest.find("\n## ").map_or(doc.len(), |j| i + 1 + j);
                (doc[..i].to_owned(), doc[end..].to_owned())
            }
            None => match doc.find("\n## Against the targets") {
                Some(i) => (doc[..i].to_owned(), doc[i..].to_owned()),
                None => (doc.trim_end().to_owned() + "\n", String::new()),
            },
        };
        std::fs::write(&path, format!("{before}{ours}{after}")).unwrap();
        return;
    }
    rt.block_on(async {
        let mut r = Report::new();
        r.line("# Benchmarks\n");
        r.line(format!(
            "Measured by `make bench` on {} — {}.\n",
            chrono::Utc::now().format("%Y-%m-%d"),
            machine()
        ));
        requests(&mut r).await;
        cpu(&mut r).await;
        round_trips(&mut r).await;
        binaries(&mut r).await;
        sweeper(&mut r).await;
        cost(&mut r).await;
        batch(&mut r).await;
        options(&mut r).await;
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
