//! The store model of `BENCH_ONLY=scale_submits` (benches/bench/
//! prefix_model.rs): a partition past its rate answers 503 SlowDown, and a
//! submit under it answers a retryable error, never a success without its
//! task; the producer's retry then makes one task. On tokio's paused clock.

use std::time::Duration;

use idempotent_submit::ErrorKind;
use serde_json::json;

#[allow(unused_imports)]
use crate::common::wrap;

#[path = "../benches/bench/prefix_model.rs"]
#[allow(dead_code)]
mod prefix_model;

use prefix_model::{BURST, GET_RATE, Limiter, PUT_RATE, Split, audit, model, partition};

#[test]
fn the_split_bucket_charges_records_to_their_scope_and_tasks_and_markers_to_their_shard() {
    let f = Split::Folders;
    assert_eq!(
        partition(f, "idempotency/charge/ab12.json"),
        "idempotency/charge/"
    );
    assert_eq!(partition(f, "tasks/a/0a1b.json"), "tasks/a/");
    assert_eq!(partition(f, "ready/a/29000000/0a1b"), "ready/a/");
    assert_eq!(partition(Split::Whole, "tasks/a/0a1b.json"), "");
}

#[tokio::test(start_paused = true)]
async fn a_partition_past_its_rate_answers_slowdown_until_it_refills() {
    let l = Limiter::new(Split::Folders);
    let burst = (PUT_RATE * BURST) as usize;
    let admitted = (0..burst + 10)
        .filter(|_| l.admit("idempotency/t/k.json", true))
        .count();
    assert_eq!(
        admitted, burst,
        "the bucket holds {BURST} s of the PUT rate"
    );
    assert!(!l.admit("idempotency/t/other.json", true), "same partition");
    assert!(
        l.admit("idempotency/u/k.json", true),
        "another scope's partition"
    );
    let reads = (0..600)
        .filter(|_| l.admit("idempotency/t/k.json", false))
        .count();
    assert_eq!(
        reads,
        (GET_RATE * BURST) as usize,
        "reads have their own rate"
    );
    tokio::time::sleep(Duration::from_millis(10)).await;
    let refilled = (0..100)
        .filter(|_| l.admit("idempotency/t/k.json", true))
        .count();
    assert_eq!(refilled, (PUT_RATE * 0.01) as usize, "10 ms of the rate");
    assert_eq!(
        l.slowdowns.load(std::sync::atomic::Ordering::Relaxed),
        11 + 50 + 100 - 35
    );
}

#[tokio::test(start_paused = true)]
async fn a_submit_whose_record_prefix_is_saturated_answers_retryably_and_writes_no_task() {
    let (q, limits, mem) = model(Split::Folders);
    limits.hold("idempotency/hot/x");
    let e = q
        .submit("hot", json!({"n": 1}))
        .idempotency_key("k1")
        .await
        .expect_err("every attempt of the record's PUT met SlowDown");
    assert!(e.is_retryable(), "{e:?}");
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e:?}");
    assert!(limits.slowdowns.load(std::sync::atomic::Ordering::Relaxed) >= 5);
    assert!(mem.keys().iter().all(|k| !k.starts_with("tasks/")));
    limits.release();
    let s = q
        .submit("hot", json!({"n": 1}))
        .idempotency_key("k1")
        .await
        .expect("the producer's retry, the burst over");
    let a = audit(&mem, &[&s]).await;
    assert_eq!((a.lost, a.doubled), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn a_submit_whose_task_prefixes_are_saturated_never_answers_success_without_its_task() {
    let (q, limits, mem) = model(Split::Folders);
    for d in 0..16 {
        limits.hold(&format!("tasks/{d:x}/x"));
    }
    let e = q
        .submit("cold", json!({"n": 2}))
        .idempotency_key("k2")
        .await
        .expect_err("the record is written, every task PUT met SlowDown");
    assert!(e.is_retryable(), "{e:?}");
    assert!(
        mem.keys()
            .iter()
            .any(|k| k.starts_with("idempotency/cold/"))
    );
    assert!(mem.keys().iter().all(|k| !k.starts_with("tasks/")));
    limits.release();
    let s = q
        .submit("cold", json!({"n": 2}))
        .idempotency_key("k2")
        .await
        .expect("the producer's retry finishes the record's task");
    assert!(mem.keys().contains(&s.task_key));
    let a = audit(&mem, &[&s]).await;
    assert_eq!((a.lost, a.doubled), (0, 0));
    let tasks = mem
        .keys()
        .iter()
        .filter(|k| k.starts_with("tasks/"))
        .count();
    assert_eq!(tasks, 1);
}
