//! 3. CPU cost without I/O.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use idempotent_submit::lambda::handle_submit;
use idempotent_submit::{Clock, ManualClock, MemoryStore, Queue, Settings};
use lambda_runtime::{Context, LambdaEvent};
use serde_json::{Value, json};

use crate::report::Report;
use crate::{allocated, input};

/// What `n` operations cost: per second, and allocations and bytes
/// allocated per operation.
async fn measure<F, Fut>(n: usize, op: F) -> (f64, u64, u64)
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = ()>,
{
    let (a0, b0) = allocated();
    let start = Instant::now();
    for i in 0..n {
        op(i).await;
    }
    let per_second = n as f64 / start.elapsed().as_secs_f64();
    let (a1, b1) = allocated();
    let n = n as u64;
    (per_second, (a1 - a0) / n, (b1 - b0) / n)
}

/// A `POST /tasks` of an HTTP API (payload 2.0) with `body` and `key`.
fn post_tasks(body: &str, key: &str) -> Value {
    json!({
        "version": "2.0",
        "rawPath": "/tasks",
        "headers": {"content-type": "application/json", "idempotency-key": key},
        "requestContext": {"http": {"method": "POST", "path": "/tasks"}, "requestId": "bench"},
        "body": body,
        "isBase64Encoded": false,
    })
}

pub(crate) async fn cpu(r: &mut Report) {
    r.line("\n## The protocol's CPU cost (in-memory bucket, one thread)\n");
    r.line("`Queue::submit` as the Rust API's callers make it, and `POST /tasks` through the `submit` handler (`lambda::handle_submit`: the event's body parsed, the answer built) as the runtime hands it an event. Allocations count every allocation and reallocation of the process during the operations, the bench's own included (it copies the input, or builds the event, once per operation).\n");
    r.line(
        "| operation | input | operations | per second | allocations per operation | bytes allocated per operation |",
    );
    r.line("| --- | --- | --- | --- | --- | --- |");
    for (size, n) in [(1024usize, 50_000usize), (64 * 1024, 3_000)] {
        let clock = ManualClock::at_epoch();
        let mem = MemoryStore::new(Arc::new(clock.clone()) as Arc<dyn Clock>);
        let q = Queue::with_clock(mem, Arc::new(clock), Settings::default());
        let inp = input(size);
        let submit = |i: usize| {
            let b = q
                .submit("bench", inp.clone())
                .idempotency_key(format!("k{i}"));
            async move {
                b.await.unwrap();
            }
        };
        let new = measure(n, submit).await;
        let rep = measure(n, submit).await;
        let app = crate::lambda::app(q.clone(), false);
        let body = json!({"task_type": "bench", "input": inp}).to_string();
        let handle = |prefix: &'static str| {
            let (app, body) = (&app, &body);
            move |i: usize| async move {
                let event = post_tasks(body, &format!("{prefix}{i}"));
                let answer = handle_submit(app, LambdaEvent::new(event, Context::default()))
                    .await
                    .unwrap();
                assert!(
                    matches!(answer["statusCode"].as_u64(), Some(200 | 201)),
                    "{answer}"
                );
            }
        };
        let http_new = measure(n, handle("h")).await;
        let http_rep = measure(n, handle("h")).await;
        let kib = size / 1024;
        for (what, (per_s, allocs, bytes)) in [
            ("new submit", new),
            ("replay", rep),
            ("`POST /tasks`, new submit", http_new),
            ("`POST /tasks`, replay", http_rep),
        ] {
            r.line(format!(
                "| {what} | {kib} KiB | {n} | {per_s:.0} | {allocs} | {bytes} |"
            ));
        }
        if size == 1024 {
            r.target(
                "new submits per second per core, 1 KiB, in memory",
                format!("{:.0}", new.0),
                "≥ 50,000",
                new.0 >= 50_000.0,
            );
        }
    }
}
