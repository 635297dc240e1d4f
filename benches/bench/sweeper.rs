//! 7. The sweeper.

use std::sync::Arc;
use std::time::Instant;

use chrono::Duration as ChronoDuration;
use idempotent_submit::protocol::SweepOptions;
use idempotent_submit::store::FaultyStore;
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
}
