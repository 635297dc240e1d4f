//! The cost model.

use std::sync::Arc;
use std::time::Instant;

use chrono::Duration as ChronoDuration;
use idempotent_submit::protocol::SweepOptions;
use idempotent_submit::store::{FaultyStore, Op, Store};
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

pub(crate) async fn cost(r: &mut Report) {
    use idempotent_submit::intake::due::{DueMessage, handle_messages};
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
    let store = moto_store().await;
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
