//! Input schemas (`VALIDATE_INPUT_SCHEMAS`): what a cold process's read of a
//! task type's schema adds to a submit, against a warm one, in requests,
//! round trips (through the delaying link) and CPU.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use idempotent_submit::store::{FaultyStore, PutMode, S3Store, Store};
use idempotent_submit::{Clock, ManualClock, MemoryStore, Queue, Settings};
use serde_json::{Value, json};

use crate::link::{keep_busy, link, link_delay, moto_addr};
use crate::moto::moto_store;
use crate::report::{Report, median};

const ROUNDS: usize = 5;
const PER_ROUND: usize = 10;

fn on() -> Settings {
    Settings {
        validate_input_schemas: true,
        ..Settings::default()
    }
}

/// A schema of the size producers publish: a dozen typed, bounded fields.
pub(crate) fn schema_document() -> Bytes {
    let mut props = serde_json::Map::new();
    for i in 0..12 {
        props.insert(
            format!("f{i}"),
            json!({"type": "string", "maxLength": 64, "pattern": "^[a-z0-9-]+$"}),
        );
    }
    props.insert("pad".into(), json!({"type": "string"}));
    let input = json!({"type": "object", "properties": props, "required": ["f0", "f1"], "additionalProperties": false});
    Bytes::from(serde_json::to_vec(&json!({"input": input, "output": {"type": "object"}})).unwrap())
}

/// A 1 KiB input the schema takes.
pub(crate) fn valid_input() -> Value {
    let mut m = serde_json::Map::new();
    for i in 0..12 {
        m.insert(format!("f{i}"), json!(format!("value-{i}")));
    }
    m.insert("pad".into(), json!("x".repeat(800)));
    Value::Object(m)
}

/// Requests and sequential round trips of one keyed submit through `q`.
async fn counted(
    f: &FaultyStore<MemoryStore>,
    q: &Queue,
    key: &str,
    input: Value,
) -> (usize, usize) {
    f.reset_log();
    let _ = q.submit("bench", input).idempotency_key(key).await;
    (f.calls().len(), f.round_trips())
}

/// Median latency (s) of `n` new keyed submits through `store`, each from a
/// cold process (a new `Queue`: an empty schema cache, the same connection
/// pool) or all from one warm one.
async fn latency(store: &S3Store, tag: &str, n: usize, cold: bool) -> f64 {
    let warm = Queue::new(store.clone(), on());
    warm.submit("bench", valid_input())
        .idempotency_key(format!("{tag}-warmup"))
        .await
        .expect("a submit through the link");
    let mut xs = Vec::with_capacity(n);
    for i in 0..n {
        let q = if cold {
            Queue::new(store.clone(), on())
        } else {
            warm.clone()
        };
        let t = Instant::now();
        let s = q
            .submit("bench", valid_input())
            .idempotency_key(format!("{tag}-{i}"))
            .await
            .expect("a submit through the link");
        xs.push(t.elapsed().as_secs_f64());
        assert!(s.created());
    }
    median(&mut xs, "a submit's latency")
}

pub(crate) async fn schemas(r: &mut Report) {
    r.line("\n## Input schemas\n");
    r.line("With `VALIDATE_INPUT_SCHEMAS=on`, the task type's schema (`schemas/bench.json`: a dozen bounded string fields, `additionalProperties: false`; a 1 KiB input it takes) is read once per process and kept for `SCHEMA_CACHE_SECONDS` (60 s), then revalidated by a conditional GET. Requests and sequential round trips of one keyed new submit, counted by the fault-injecting store over the in-memory bucket:\n");
    r.line("| submit | requests | round trips |");
    r.line("| --- | --- | --- |");
    let clock = ManualClock::at_epoch();
    let mem = MemoryStore::new(Arc::new(clock.clone()) as Arc<dyn Clock>);
    mem.put("schemas/bench.json", schema_document(), PutMode::Overwrite)
        .await
        .unwrap();
    let f = FaultyStore::new(mem.clone());
    let queue = |s: Settings| Queue::with_clock(f.clone(), Arc::new(clock.clone()), s);
    let off = queue(Settings::default());
    let warm = queue(on());
    let rows: Vec<(&str, (usize, usize))> = vec![
        (
            "validation off",
            counted(&f, &off, "a", valid_input()).await,
        ),
        (
            "on, cold process (the schema's GET)",
            counted(&f, &warm, "b", valid_input()).await,
        ),
        (
            "on, warm, within the TTL",
            counted(&f, &warm, "c", valid_input()).await,
        ),
        (
            "on, cold process, a type without a schema (its GET: 404)",
            {
                let q = queue(on());
                f.reset_log();
                let _ = q
                    .submit("unschemed", valid_input())
                    .idempotency_key("d")
                    .await;
                (f.calls().len(), f.round_trips())
            },
        ),
        ("on, warm, after the TTL (a conditional GET: 304)", {
            clock.advance(chrono::Duration::seconds(61));
            counted(&f, &warm, "e", valid_input()).await
        }),
        ("on, warm, input refused, new key (the record's GET)", {
            counted(&f, &warm, "g", json!({"f0": "BAD"})).await
        }),
    ];
    for (name, (requests, rts)) in &rows {
        r.line(format!("| {name} | {requests} | {rts} |"));
    }

    // CPU: the check itself, warm, one thread; rounds alternate off and on
    // after a warm-up round, so that neither setting runs on a cold
    // allocator alone.
    let n = 20_000;
    let mut rates: [Vec<f64>; 2] = Default::default();
    for round in 0..7 {
        let validate = round % 2 == 1;
        let settings = if validate { on() } else { Settings::default() };
        let clock = ManualClock::at_epoch();
        let mem = MemoryStore::new(Arc::new(clock.clone()) as Arc<dyn Clock>);
        mem.put("schemas/bench.json", schema_document(), PutMode::Overwrite)
            .await
            .unwrap();
        let q = Queue::with_clock(mem, Arc::new(clock.clone()), settings);
        let inp = valid_input();
        let start = Instant::now();
        for i in 0..n {
            q.submit("bench", inp.clone())
                .idempotency_key(format!("k{i}"))
                .await
                .unwrap();
        }
        if round > 0 {
            rates[usize::from(validate)].push(n as f64 / start.elapsed().as_secs_f64());
        }
    }
    let off = median(&mut rates[0], "submits a second, validation off");
    let with = median(&mut rates[1], "submits a second, validation on");
    // A cold process's first submit, in memory: the schema's read, parse
    // and compile (its meta-schema check included), then the submit.
    let mut firsts = Vec::new();
    let mut plain = Vec::new();
    for (i, validate) in (0..200).map(|i| (i, i % 2 == 1)) {
        let clock = ManualClock::at_epoch();
        let mem = MemoryStore::new(Arc::new(clock.clone()) as Arc<dyn Clock>);
        mem.put("schemas/bench.json", schema_document(), PutMode::Overwrite)
            .await
            .unwrap();
        let settings = if validate { on() } else { Settings::default() };
        let q = Queue::with_clock(mem, Arc::new(clock.clone()), settings);
        let t = Instant::now();
        q.submit("bench", valid_input())
            .idempotency_key(format!("first-{i}"))
            .await
            .unwrap();
        let us = t.elapsed().as_secs_f64() * 1e6;
        if validate {
            firsts.push(us)
        } else {
            plain.push(us)
        }
    }
    let first = median(&mut firsts, "a cold process's first submit");
    let first_off = median(&mut plain, "a cold process's first submit, off");
    r.line(format!(
        "\nCPU, in memory, one thread: {n} new keyed submits of that input from a warm process, median of 3 rounds each (alternating, after a warm-up round): with validation on, {:.2} × the rate with it off, {:.1} µs a submit for the check (a submit's own rate is in \"The protocol's CPU cost\"). A cold process's first submit of the type, in memory (the schema's read, parse and compile, its check against the draft's meta-schema included), median of 100: {first:.0} µs, against {first_off:.0} µs with validation off.",
        with / off,
        (1.0 / with - 1.0 / off) * 1e6
    ));

    r.line(format!(
        "\nThrough the delaying link (section \"Round trips on the response path\": D = {} ms each way, moto kept busy), the median latency of {PER_ROUND} new keyed submits a round, each from a cold process (a new `Queue` on the same client: an empty cache, warm connections) or all from one warm process, at delay D and at delay 0; round trips = (median at D − median at 0) / 2D, median of {ROUNDS} rounds (lowest – highest):\n",
        link_delay().as_millis()
    ));
    r.line("| process | round trips | lowest – highest round | median latency at D | at D = 0 |");
    r.line("| --- | --- | --- | --- | --- |");
    let busy = keep_busy().await;
    let mut results: Vec<(Vec<f64>, Vec<f64>, Vec<f64>)> =
        vec![Default::default(), Default::default()];
    for round in 0..ROUNDS {
        for (k, cold) in [(0, false), (1, true)] {
            let direct = moto_store().await;
            direct
                .put("schemas/bench.json", schema_document(), PutMode::Overwrite)
                .await
                .unwrap();
            let zero =
                S3Store::for_endpoint(&link(moto_addr(), Duration::ZERO).await, direct.bucket());
            let slow =
                S3Store::for_endpoint(&link(moto_addr(), link_delay()).await, direct.bucket());
            let z = latency(&zero, &format!("z{round}"), PER_ROUND, cold).await;
            let d = latency(&slow, &format!("d{round}"), PER_ROUND, cold).await;
            results[k]
                .0
                .push((d - z) / (2.0 * link_delay().as_secs_f64()));
            results[k].1.push(d * 1000.0);
            results[k].2.push(z * 1000.0);
        }
    }
    drop(busy);
    let mut medians = Vec::new();
    for (name, (rts, at_d, at_0)) in ["warm", "cold"].iter().zip(results.iter_mut()) {
        let m = median(rts, "round trips");
        let (lo, hi) = (rts[0], rts[rts.len() - 1]);
        let d = median(at_d, "latency at D");
        let z = median(at_0, "latency at 0");
        medians.push((m, d));
        r.line(format!(
            "| {name} | {m:.2} | {lo:.2} – {hi:.2} | {d:.0} ms | {z:.1} ms |"
        ));
    }
    r.line(format!(
        "\nA cold process's first submit of a task type pays one GET more, one round trip before its record ({:.2} round trips, {:.0} ms more at D); a warm one, within the TTL, pays nothing, and after it a conditional GET (a 304 with no body) on the next submit of the type. The schema's GET cannot go beside the record's PUT: nothing may be written before the input is checked.",
        medians[1].0 - medians[0].0,
        medians[1].1 - medians[0].1
    ));
}
