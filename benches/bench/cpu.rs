//! 3. CPU cost without I/O.

use std::sync::Arc;
use std::time::Instant;

use idempotent_submit::{Clock, ManualClock, MemoryStore, Queue, Settings};

use crate::input;
use crate::report::Report;

pub(crate) async fn cpu(r: &mut Report) {
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
