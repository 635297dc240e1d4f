//! Task options and offloaded inputs: the CPU, requests, round trips and
//! bytes of a submit with options and with an offloaded 1 MiB input.

use std::sync::Arc;
use std::time::Instant;

use chrono::Duration as ChronoDuration;
use idempotent_submit::store::{FaultyStore, Op, Store};
use idempotent_submit::{Clock, ManualClock, MemoryStore, Queue, Settings};

use crate::input;
use crate::moto::moto_store;
use crate::report::{Report, median};

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

pub(crate) async fn options(r: &mut Report) {
    const MIB: usize = 1 << 20;
    let settings = || Settings {
        max_input_bytes: 2 * MIB,
        ..Settings::default()
    };
    r.line("\n## Task options and offloaded inputs\n");
    r.line(
        "In memory, one thread, as in section \"The protocol's CPU cost\": a keyed submit without options, with every option but `use_payload_refs` (timeout, retries, retry policy, delay, reschedules, task ttl), and with a 1 MiB input offloaded (`use_payload_refs`, buquet's 256 KiB threshold; `MAX_INPUT_BYTES` raised to 2 MiB). Requests and round trips are counted by the fault-injecting store (no faults); bytes PUT are the bodies a new submit leaves in the bucket.\n",
    );
    // The 1 KiB rates as shares of the no-options row measured beside them:
    // the absolute rate of a 1 KiB submit is the CPU section's, measured
    // once.
    r.line("| submit | input | operations | new per second | replays per second | requests (new) | round trips (new) | requests (replay) | bytes PUT (new) |");
    r.line("| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    let mut baseline: Option<(f64, f64)> = None;
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
        let (new_rate, rep_rate) = match (baseline, size) {
            (None, _) => {
                baseline = Some((new, rep));
                ("1.00 × (the baseline)".to_owned(), "1.00 ×".to_owned())
            }
            (Some((bn, br)), 1024) => (format!("{:.2} ×", new / bn), format!("{:.2} ×", rep / br)),
            _ => (format!("{new:.0}"), format!("{rep:.0}")),
        };
        r.line(format!(
            "| {name} | {kib} KiB | {n} | {new_rate} | {rep_rate} | {new_requests} | {new_rts} | {replay_requests} | {put_bytes} |"
        ));
    }
    r.line("\nThe 1 KiB rows' rates are shares of the first row's, measured beside it (a 1 KiB submit's own rate is in \"The protocol's CPU cost\"); the offloaded row's are submits a second. Options add no request and no round trip. The rows run in this order, the first on a cold allocator: compare several runs, not two rows of one, before reading a CPU cost of the options into them.");
    r.line("An offloaded submit sends its input twice in its first round trip: as the payload, and in the record (`pending_input`, so that a finisher never needs the producer; docs/protocol.md). A replay of it sends its own payload's PUT beside the record's and deletes it beside the answer (the key is another task's): two requests more than an inline replay, no round trip more.");
    r.line("\nThrough moto (one request at a time, on this machine), wall time of one keyed submit, median of 15:\n");
    r.line("| submit | input | new | replay |");
    r.line("| --- | --- | --- | --- |");
    for (name, size, opts, offload) in [
        ("no options", 1024usize, false, false),
        ("every option", 1024, true, false),
        ("offloaded", MIB, false, true),
    ] {
        let store = moto_store().await;
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
