//! The cost model.

use std::sync::Arc;
use std::time::Instant;

use chrono::Duration as ChronoDuration;
use idempotent_submit::store::{FaultyStore, Op, Store};
use idempotent_submit::testing::protocol::SweepOptions;
use idempotent_submit::testing::protocol::sweep::PAYLOAD_CYCLE_DAYS;
use idempotent_submit::{Clock, ManualClock, MemoryStore, Queue, Settings};
use serde_json::json;

use crate::moto::moto_store;
use crate::report::Report;
use crate::requests::worker_claims_every_task;

/// AWS list prices (us-east-1), dollars per request or per GB-second.
pub(crate) const PUT: f64 = 0.005 / 1000.0; // PUT, COPY, POST, LIST
pub(crate) const GET: f64 = 0.0004 / 1000.0; // GET, HEAD
pub(crate) const SQS: f64 = 0.40 / 1_000_000.0;
pub(crate) const LAMBDA_REQUEST: f64 = 0.20 / 1_000_000.0;
pub(crate) const LAMBDA_GB_S: f64 = 0.000_013_333_4; // arm64
pub(crate) const LAMBDA_GB: f64 = 0.25; // MemorySize 256 in template.yaml
pub(crate) const HTTP_API: f64 = 1.00 / 1_000_000.0;
pub(crate) const REST_API: f64 = 3.50 / 1_000_000.0;
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

/// How the submits of a column of the bill are made.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// The defaults: `RECORD_EVENTS=s3`, inputs inline, no input schemas.
    Default,
    /// `RECORD_EVENTS=submitter`: the submitter sends each due message.
    Submitter,
    /// `VALIDATE_INPUT_SCHEMAS=on`, the type's schema published.
    Schemas,
    /// A 300 KiB input offloaded (`use_payload_refs` at buquet's 256 KiB).
    Offloaded,
}

impl Mode {
    const ALL: [Mode; 4] = [
        Mode::Default,
        Mode::Submitter,
        Mode::Schemas,
        Mode::Offloaded,
    ];

    fn name(self) -> &'static str {
        match self {
            Mode::Default => "defaults (`RECORD_EVENTS=s3`, inline input)",
            Mode::Submitter => "`RECORD_EVENTS=submitter`",
            Mode::Schemas => "`VALIDATE_INPUT_SCHEMAS=on`",
            Mode::Offloaded => "300 KiB input offloaded",
        }
    }

    fn settings(self) -> Settings {
        Settings {
            validate_input_schemas: self == Mode::Schemas,
            max_input_bytes: 1 << 20,
            ..Settings::default()
        }
    }

    fn input(self, i: usize) -> serde_json::Value {
        match self {
            Mode::Schemas => {
                let mut v = crate::schemas::valid_input();
                v["f2"] = json!(format!("n-{i}"));
                v
            }
            Mode::Offloaded => json!({"i": i, "pad": "x".repeat(300 * 1024)}),
            _ => json!({"i": i, "pad": "x".repeat(1000)}),
        }
    }

    async fn submit(self, q: &Queue, key: String, i: usize) {
        let b = q.submit("t", self.input(i)).idempotency_key(key);
        let b = if self == Mode::Offloaded {
            b.payload_refs(256 * 1024)
        } else {
            b
        };
        b.await.expect("a submit in memory");
    }
}

/// What one keyed new submit makes happen, per submit, in one mode.
struct Bill {
    /// The submit's own requests (`submit`'s response path).
    resp_puts: f64,
    resp_gets: f64,
    /// SQS: each due message's send (S3's or the submitter's), and its
    /// receive and delete in batches of ten.
    sqs: f64,
    /// The sweeper's requests for the due messages.
    due_puts: f64,
    due_gets: f64,
    /// `sweep` invocations for the due messages (one per batch of ten).
    due_invocations: f64,
    /// The daily pass, over the record's life: reads measured, LISTs at
    /// scale (one per 1,000 objects listed a day).
    pass_lists: f64,
    pass_gets: f64,
}

/// The bill of `n` new keyed submits in `mode`, one a second (a schema is
/// revalidated by its TTL), counted in memory; a worker claims and runs
/// every task before its due message comes, as buquet's workers do on a
/// healthy queue; then the daily passes of the records' life.
async fn measure(mode: Mode, n: usize) -> Bill {
    use idempotent_submit::due_sender::MemoryDueQueue;
    use idempotent_submit::testing::intake::due::{DueMessage, handle_messages};
    let clock = ManualClock::at_epoch();
    let mem = MemoryStore::new(Arc::new(clock.clone()) as Arc<dyn Clock>);
    mem.put(
        "schemas/t.json",
        crate::schemas::schema_document(),
        idempotent_submit::store::PutMode::Overwrite,
    )
    .await
    .expect("the schema");
    let f = FaultyStore::new(mem.clone());
    let stale = mode.settings().stale_creating_after;
    let due = MemoryDueQueue::new(Arc::new(clock.clone()), stale);
    let mut q = Queue::with_clock(f.clone(), Arc::new(clock.clone()), mode.settings());
    if mode == Mode::Submitter {
        q = q.with_due_sender(due.clone(), "b");
    }
    let sweeper = Queue::with_clock(f.clone(), Arc::new(clock.clone()), mode.settings());
    let per = |x: f64| x / n as f64;
    // The response path: one submit a second.
    for i in 0..n {
        mode.submit(&q, format!("k{i}"), i).await;
        clock.advance(ChronoDuration::seconds(1));
    }
    let calls = f.calls();
    let (resp_puts, resp_gets) = priced(&calls);
    // The due messages: S3's event for each record write, or what the
    // submitter sent.
    let messages: Vec<DueMessage> = match mode {
        Mode::Submitter => {
            clock.advance(stale);
            due.take_visible()
                .into_iter()
                .map(|m| DueMessage {
                    id: m.id,
                    body: m.body,
                })
                .collect()
        }
        _ => calls
            .iter()
            .filter(|c| {
                c.key.starts_with("idempotency/") && matches!(c.op, Op::PutCreate | Op::PutUpdate)
            })
            .enumerate()
            .map(|(i, c)| DueMessage {
                id: i.to_string(),
                body: json!({"Records": [{"eventSource": "aws:s3",
                    "s3": {"bucket": {"name": "b"}, "object": {"key": c.key}}}]})
                .to_string(),
            })
            .collect(),
    };
    // The submitter's sends are its requests (one per submit here, a
    // SendMessageBatch per ten in a batch); S3's, one per event.
    let sends = match mode {
        Mode::Submitter => due.requests().len(),
        _ => messages.len(),
    };
    worker_claims_every_task(&mem).await;
    clock.advance(stale);
    f.reset_log();
    for chunk in messages.chunks(10) {
        handle_messages(&sweeper, "b", chunk, false, None).await;
    }
    let (due_puts, due_gets) = priced(&f.calls());
    assert_eq!(
        due_puts, 0.0,
        "the sweeper writes nothing for tasks a worker ran"
    );
    assert!(
        !mem.keys().iter().any(|k| k.starts_with("ready/")),
        "no marker of a task the worker ran"
    );
    // The daily passes over the records' life and two days more: records
    // written through a day, every task run by a worker.
    let mem2 = MemoryStore::new(Arc::new(clock.clone()) as Arc<dyn Clock>);
    mem2.put(
        "schemas/t.json",
        crate::schemas::schema_document(),
        idempotent_submit::store::PutMode::Overwrite,
    )
    .await
    .expect("the schema");
    let f2 = FaultyStore::new(mem2.clone());
    let q2 = Queue::with_clock(f2.clone(), Arc::new(clock.clone()), mode.settings());
    let m = 2000;
    for i in 0..m {
        mode.submit(&q2, format!("p{i}"), i).await;
        clock.advance(ChronoDuration::seconds(86_400 / m as i64));
    }
    worker_claims_every_task(&mem2).await;
    f2.reset_log();
    for _ in 0..(TTL_DAYS as usize + 2) {
        q2.engine()
            .sweep(&SweepOptions::default())
            .await
            .expect("a pass in memory");
        clock.advance(ChronoDuration::days(1));
    }
    let pass_calls = f2.calls();
    // Reads measured; LISTs at scale, where a bucket of 2,000 records
    // spends most of its LISTs finding scopes, splitting ranges and
    // listing folders, which millions share out: the records' one per
    // 1,000 records a day of their life; an offloaded payload's, one per
    // 1,000 payloads a day that it is listed (the pass's days here) and
    // its share of the day's task listing of its slice (a thirtieth of the
    // days, one LIST per 1,000 tasks).
    let days = TTL_DAYS + 2.0;
    let payload_lists = if mode == Mode::Offloaded {
        days / 1000.0 * (1.0 + 1.0 / PAYLOAD_CYCLE_DAYS as f64)
    } else {
        0.0
    };
    let pass_lists = TTL_DAYS / 1000.0 + payload_lists;
    Bill {
        resp_puts: per(resp_puts),
        resp_gets: per(resp_gets),
        sqs: per(sends as f64) + per(messages.len() as f64) * 2.0 / SQS_BATCH,
        due_puts: per(due_puts),
        due_gets: per(due_gets),
        due_invocations: per(messages.len() as f64) / SQS_BATCH,
        pass_lists,
        pass_gets: priced(&pass_calls).1 / m as f64,
    }
}

pub(crate) async fn cost(r: &mut Report) {
    use idempotent_submit::testing::intake::due::{DueMessage, handle_messages};
    // Per mode, per part of the bill: what is counted, and its dollars.
    type Part<'a> = (&'static str, Box<dyn Fn(&Bill) -> (String, f64) + 'a>);
    r.line("\n## What it costs: dollars per million keyed submits\n");
    let n = 1000;
    let mut bills = Vec::new();
    for mode in Mode::ALL {
        bills.push((mode, measure(mode, n).await));
    }

    // Lambda durations, measured against moto (slower than S3: an upper
    // bound): one new submit, and one due batch of ten events.
    let store = moto_store().await;
    let qm = Queue::new(store.clone(), Settings::default());
    let reps = 50;
    let t = Instant::now();
    for i in 0..reps {
        Mode::Default.submit(&qm, format!("c{i}"), i).await;
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
        handle_messages(&qm, store.bucket(), &msgs, false, None).await;
    }
    let batch_s = t.elapsed().as_secs_f64() / 10.0;
    r.keep("lambda_submit_seconds", submit_s);

    let lambda = |secs: f64| LAMBDA_REQUEST + LAMBDA_GB * secs * LAMBDA_GB_S;
    let million = 1_000_000.0;
    let s3 = |puts: f64, gets: f64| (puts * PUT + gets * GET) * million;
    let reqs = |puts: f64, gets: f64| format!("{puts:.2} PUT, {gets:.2} GET");
    let parts: Vec<Part> = vec![
        (
            "response path: S3 (the schema's GET; PUT record and payload; PUT task and marker)",
            Box::new(|b: &Bill| (reqs(b.resp_puts, b.resp_gets), s3(b.resp_puts, b.resp_gets))),
        ),
        (
            "response path: Lambda (`submit`)",
            Box::new(|_: &Bill| {
                (
                    format!("1 invocation of {:.1} ms", submit_s * 1000.0),
                    lambda(submit_s) * million,
                )
            }),
        ),
        (
            "due messages: SQS (the send; receive and delete, batches of 10)",
            Box::new(|b: &Bill| (format!("{:.2} requests", b.sqs), b.sqs * SQS * million)),
        ),
        (
            "due messages: S3 (GET record; GET task and HEAD marker)",
            Box::new(|b: &Bill| (reqs(b.due_puts, b.due_gets), s3(b.due_puts, b.due_gets))),
        ),
        (
            "due messages: Lambda (`sweep`, one per batch of 10)",
            Box::new(|b: &Bill| {
                (
                    format!(
                        "{:.2} invocations of {:.1} ms",
                        b.due_invocations,
                        batch_s * 1000.0
                    ),
                    b.due_invocations * lambda(batch_s) * million,
                )
            }),
        ),
        (
            "daily pass: S3 (LIST `idempotency/` and `payloads/`; GET record, task of a payload, task of a marker still standing)",
            Box::new(|b: &Bill| {
                (
                    format!("{:.3} LIST, {:.2} GET", b.pass_lists, b.pass_gets),
                    s3(b.pass_lists, b.pass_gets),
                )
            }),
        ),
    ];
    let totals: Vec<f64> = bills
        .iter()
        .map(|(_, b)| parts.iter().map(|(_, p)| p(b).1).sum())
        .collect();

    r.line(format!(
        "Counted in memory, one column per mode: {n} new keyed submits (1 KiB inputs; 300 KiB offloaded in the last column), one a second (so a published schema is revalidated once per `SCHEMA_CACHE_SECONDS`, 60 s, by a conditional GET); a worker claims and runs every task before its due message comes, as buquet's workers do on a healthy queue; every due message at the sweeper in batches of ten; then {} daily passes over 2,000 records written through a day (the pass's reads measured; its LISTs at scale: of `idempotency/`, one per 1,000 records a day of a {TTL_DAYS}-day TTL; of an offloaded input's `payloads/` and its slice's tasks, one per 1,000 a day it is listed, over those days). Lambda durations against moto (an upper bound for S3), at {} MB, in the defaults' mode for every column (the modes differ by requests, not by the functions' CPU). Storage is not in it.\n",
        TTL_DAYS as usize + 2,
        (LAMBDA_GB * 1024.0) as u32
    ));
    r.line("Prices: S3 Standard PUT, COPY, POST and LIST $0.005 per 1,000, GET and HEAD $0.0004 per 1,000, DELETE free; SQS $0.40 per million requests; Lambda arm64 $0.0000133334 per GB-second and $0.20 per million requests; API Gateway HTTP API $1.00 and REST API $3.50 per million requests.\n");
    let mut head = "| part, per submit |".to_owned();
    let mut rule = "| --- |".to_owned();
    for (mode, _) in &bills {
        head += &format!(" {} |", mode.name());
        rule += " --- |";
    }
    r.line(head);
    r.line(rule);
    for (part, p) in &parts {
        let mut row = format!("| {part} |");
        for (_, b) in &bills {
            let (what, dollars) = p(b);
            row += &format!(" {what}: ${dollars:.2} |");
        }
        r.line(row);
    }
    let mut row = "| **S3, SQS and Lambda in all, per million** |".to_owned();
    for t in &totals {
        row += &format!(" **${t:.2}** |");
    }
    r.line(row);
    for (name, price) in [("an HTTP API", HTTP_API), ("a REST API", REST_API)] {
        let mut row = format!("| with {name} in front (+ ${:.2}) |", price * million);
        for t in &totals {
            row += &format!(" ${:.2} |", t + price * million);
        }
        r.line(row);
    }
    let total = totals[0];
    r.line(format!(
        "\nThe defaults' ${total:.2} against the bill before the ready index was kept true: $23.39 in a bucket without a worker, and $28.39 in one with a worker, where each record event also wrote the marker of a task already run again. Replays and conflicts, which write no record, are priced in \"Due messages from the submitter\".\n"
    ));
    r.target(
        "S3, SQS and Lambda per million keyed submits, a worker consuming the markers",
        format!("${total:.2}"),
        "≤ $18",
        total <= 18.0,
    );
    let pass_lists = TTL_DAYS / 1000.0; // each record listed once a day
    r.line(format!(
        "Per submit, nothing above depends on the number of live records: the due messages' path reads the record its message names, and the pass's share of the records' listing is one LIST per 1,000 records per day, {:.3} LISTs per submit at a {TTL_DAYS}-day TTL (an offloaded input adds its share of the `payloads/` listing and of its slice's task listing, at scale). The pass's scan of the ready index is one LIST of `ready/` a day here, whatever the volume (its workers keep it short), with a GET only for a marker still standing 15 minutes after it landed: none where a worker consumes the markers, so none in the bill; $0.000005 a day in all.\n",
        pass_lists
    ));
    r.line(format!(
        "The scheduled pass at those sizes ({} listings at once, {} s per sequential LIST assumed for S3):\n",
        idempotent_submit::testing::protocol::sweep::RANGES_AT_ONCE, S3_LIST_SECONDS
    ));
    r.line("| live records | LISTs per pass | time per pass | 110 s runs per pass |");
    r.line("| --- | --- | --- | --- |");
    for (label, size) in [
        ("1 million", 1e6),
        ("100 million", 1e8),
        ("10 billion", 1e10),
    ] {
        let lists = size / 1000.0;
        let secs = lists / idempotent_submit::testing::protocol::sweep::RANGES_AT_ONCE as f64
            * S3_LIST_SECONDS;
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
