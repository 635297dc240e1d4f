//! A reset of a record whose submit died between its task and its marker
//! (docs/protocol.md, "Looking up and resetting a key", step 4): in its
//! finish window the reset writes the marker first; past it, nothing.

use super::*;

/// A submit of `k` whose task landed and whose process died before its
/// marker did (the marker's first attempt failed), and a new process.
async fn died_before_its_marker() -> World {
    let w = World::new();
    w.fault_once(Op::Put, "ready/", common::unavailable("503"));
    w.fault_once(Op::PutCreate, "tasks/", Fault::CrashAfter);
    let q = w.process();
    q.submit("t", json!(1))
        .idempotency_key("k")
        .await
        .unwrap_err();
    assert_eq!((w.count("tasks/"), w.count("ready/")), (1, 0));
    w.next_process()
}

#[tokio::test]
async fn a_reset_of_a_record_whose_submit_died_before_its_marker_writes_the_marker_first() {
    let w = died_before_its_marker().await;
    let task_id = w.record_meta("k").await.0.task_id;
    let reset = w.process().reset_key("t", "k", None).await.unwrap();
    assert_eq!(
        reset,
        Reset::Done {
            old_task_id: task_id
        }
    );
    // Once the reset record is there no finisher can write the marker (it
    // holds no pending task): the reset wrote it first.
    let marker = w.keys("ready/");
    assert_eq!(marker.len(), 1, "the task is in the ready index");
    assert!(marker[0].ends_with(&task_id.to_string()), "{marker:?}");
    let calls = w.faulty.calls();
    let put_marker = calls.iter().position(|c| c.op == Op::Put);
    let put_reset = calls.iter().position(|c| c.op == Op::PutUpdate);
    assert!(put_marker < put_reset, "{calls:?}");
    // GET record; GET task and HEAD marker; the finish's own GET and HEAD,
    // its marker PUT and its re-read of the task; the reset record's PUT.
    let ops: Vec<Op> = calls.iter().map(|c| c.op).collect();
    assert_eq!((ops.len(), w.faulty.round_trips()), (8, 6), "{ops:?}");
    assert_eq!(w.count("tasks/"), 1);
}

#[tokio::test]
async fn a_reset_past_the_finish_deadline_of_a_record_whose_marker_never_landed_goes_ahead_and_writes_nothing_but_its_record()
 {
    let w = died_before_its_marker().await;
    let settings = common::settings();
    w.clock
        .advance(settings.finish_window + Duration::seconds(10));
    let reset = w.process().reset_key("t", "k", None).await.unwrap();
    assert!(matches!(reset, Reset::Done { .. }), "{reset:?}");
    // Nothing may be written for the record past its finish deadline (the
    // marker's loss is the documented limit): no look for the marker.
    let ops: Vec<Op> = w.faulty.calls().iter().map(|c| c.op).collect();
    assert_eq!(ops, [Op::Get, Op::Get, Op::PutUpdate]);
    assert_eq!(w.count("ready/"), 0);
}

#[tokio::test]
async fn a_reset_of_a_record_whose_task_a_worker_has_claimed_writes_no_marker() {
    let w = died_before_its_marker().await;
    let task_key = w.keys("tasks/")[0].clone();
    // buquet's worker claims the task by listing `tasks/` (no marker to
    // delete): `running`, no longer the record's pending task.
    let mut task = w.json(&task_key).await;
    task["status"] = json!("running");
    let body = bytes::Bytes::from(task.to_string());
    let mode = idempotent_submit::store::PutMode::Overwrite;
    w.bucket.put(&task_key, body, mode).await.unwrap();
    let reset = w.process().reset_key("t", "k", None).await.unwrap();
    assert!(matches!(reset, Reset::Done { .. }), "{reset:?}");
    assert_eq!(w.count("ready/"), 0, "a marker beside a taken task");
    // The task's status said so: no finish, no second read.
    let ops: Vec<Op> = w.faulty.calls().iter().map(|c| c.op).collect();
    assert_eq!(ops.len(), 4, "{ops:?}");
}
