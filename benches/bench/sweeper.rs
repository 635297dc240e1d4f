//! 7. The sweeper.

use std::sync::Arc;
use std::time::Instant;

use chrono::Duration as ChronoDuration;
use idempotent_submit::protocol::SweepOptions;
use idempotent_submit::protocol::sweep::{PAYLOAD_SLICES, PayloadPlan};
use idempotent_submit::store::{FaultyStore, Op, PutMode, Store};
use idempotent_submit::{Clock, ManualClock, MemoryStore, Queue, Settings};
use serde_json::json;

use crate::moto::moto_store;
use crate::report::Report;
use crate::{input, run_concurrent};

pub(crate) async fn sweeper(r: &mut Report) {
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
    let store = moto_store().await;
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
    old_orphans(r, 10_000_000).await;
}

/// The day's check of old orphan payloads at `total` payloads, measured in
/// memory with requests counted by kind: only the day's slices are built
/// (1/256 of `total` each, every 1000th an orphan, the others with their
/// task under our one-digit shard, as many tasks as payloads), nine days
/// old (past the day and an hour of HEADs). The listing of the rest of
/// `payloads/`, which the HEAD check makes anyway, is reckoned, not built.
async fn old_orphans(r: &mut Report, total: usize) {
    let clock = ManualClock::at_epoch();
    let mem = MemoryStore::new(Arc::new(clock.clone()) as Arc<dyn Clock>);
    let day = clock.now() + ChronoDuration::days(9);
    let slices = PayloadPlan::after(0, None, day).slices;
    let per_slice = total / PAYLOAD_SLICES as usize;
    let mut built = 0;
    for slice in slices.clone() {
        for i in 0..per_slice {
            let mut b = *uuid::Uuid::new_v4().as_bytes();
            b[0] = slice as u8;
            let id = uuid::Uuid::from_bytes(b).to_string();
            mem.put(
                &format!("payloads/{id}/input.json"),
                bytes::Bytes::from_static(b"1"),
                PutMode::Create,
            )
            .await
            .unwrap();
            built += 1;
            if i % 1000 != 999 {
                mem.put(
                    &format!("tasks/{}/{id}.json", &id[..1]),
                    bytes::Bytes::from_static(b"{}"),
                    PutMode::Create,
                )
                .await
                .unwrap();
            }
        }
    }
    clock.set(day);
    let f = FaultyStore::new(mem.clone());
    let q = Queue::with_clock(f.clone(), Arc::new(clock.clone()), Settings::default());
    let s = q.engine().sweep(&SweepOptions::default()).await.unwrap();
    let calls = f.calls();
    let n = |op: Op, prefix: &str| {
        calls
            .iter()
            .filter(|c| c.op == op && c.key.starts_with(prefix))
            .count()
    };
    let (task_lists, heads) = (n(Op::List, "tasks/"), n(Op::Head, ""));
    let payload_lists = n(Op::List, "payloads/");
    let all_payload_lists = total.div_ceil(1000);
    let dollars = |lists: usize, heads: usize| (lists as f64 * 5.0 + heads as f64 * 0.4) / 1e6;
    r.line(format!(
        "Old orphan payloads at {total} payloads (in memory, requests counted by kind; only the day's slices built, every 1000th an orphan, the others with their task): the day's {} slices hold {built} payloads; their check lists the tasks in {task_lists} LISTs and makes {heads} HEADs (four for each orphan, confirming it before it goes), ${:.4} a day, and deleted {} orphans. The listing of `payloads/` took {payload_lists} LISTs here (a first page, then its 256 folders 32 at once: the day's slices page by page, the others, empty here, one each); at {total} it is the {all_payload_lists} LISTs that the pass makes anyway, ${:.3} a day. By HEADs instead, those {built} payloads would take {built} to {} HEADs, ${:.3} to ${:.3} a day.",
        slices.len(),
        dollars(task_lists, heads),
        s.payloads_deleted,
        dollars(all_payload_lists, 0),
        built * 4,
        dollars(0, built),
        dollars(0, built * 4),
    ));
}
