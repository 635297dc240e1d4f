//! A record as a reader judges it (`Engine::phase`, `idem key`): by its age
//! in S3's time and its task object, never by a later write of the record.

use crate::common;

use std::sync::Arc;

use chrono::Duration;
use idempotent_submit::store::Store;
use idempotent_submit::testing::protocol::Phase;
use idempotent_submit::{ManualClock, Queue};
use serde_json::json;

#[tokio::test]
async fn a_record_is_in_flight_until_its_deadline_and_15_minutes_then_settled_with_its_tasks_fate()
{
    let clock = ManualClock::at_epoch();
    let bucket = common::memory_store(&clock);
    let q = Queue::with_clock(bucket.clone(), Arc::new(clock.clone()), common::settings());
    let s = q.submit("t", json!(1)).idempotency_key("k").await.unwrap();
    let phase = |q: &Queue| {
        let q = q.clone();
        async move {
            let (rec, meta) = q.record("t", "k", None).await.unwrap().unwrap();
            q.engine().phase(&rec, &meta).await.unwrap()
        }
    };
    let judged = |p: &'static str, t: Option<&str>| Phase {
        phase: p,
        task_status: t.map(str::to_owned),
    };
    assert_eq!(phase(&q).await, judged("in_flight", Some("pending")));
    // The queue deleted the task (in a test: at once). Until no late write
    // can land, nobody may call it missing.
    bucket.delete(&s.task_key, None).await.unwrap();
    let settings = common::settings();
    clock.advance(settings.finish_window + Duration::minutes(14));
    assert_eq!(phase(&q).await, judged("in_flight", None));
    clock.advance(Duration::minutes(2));
    assert_eq!(phase(&q).await, judged("settled", Some("missing")));
}
