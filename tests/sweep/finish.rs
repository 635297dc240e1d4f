use super::*;

#[tokio::test]
async fn a_stale_creating_record_is_finished_with_its_task_and_marker() {
    let w = World::new();
    let id = w.crashed("a").await;
    let written = w.record_meta("a").await.1.etag;
    w.clock.advance(Duration::minutes(11));
    let s = w.sweep(false).await;
    assert_eq!(
        (s.scanned, s.finished, s.errors, s.complete),
        (1, 1, 0, true)
    );
    w.assert_still_its_first_write("a", &written).await;
    assert_eq!(w.record("a").await.task_id, id);
    assert_eq!(w.count("tasks/"), 1);
    assert_eq!(w.count("ready/"), 1);
    // The next submit is a plain replay of the same task.
    assert_eq!(w.submit_key("a").await, id);
}

#[tokio::test]
async fn a_stale_record_whose_task_and_marker_are_there_is_read_and_left_as_written() {
    let w = World::new();
    w.submit_key("a").await;
    let written = w.record_meta("a").await.1.etag;
    let outside_the_sweepers_place = |w: &World| {
        w.bucket
            .snapshot()
            .into_iter()
            .filter(|(k, ..)| !k.starts_with("sweeper/"))
            .collect::<Vec<_>>()
    };
    let before = outside_the_sweepers_place(&w);
    w.clock.advance(Duration::minutes(11));
    let s = w.sweep(false).await;
    assert_eq!((s.scanned, s.reads, s.finished, s.errors), (1, 1, 0, 0));
    w.assert_still_its_first_write("a", &written).await;
    assert_eq!(outside_the_sweepers_place(&w), before, "byte for byte");
    assert_eq!((w.count("tasks/"), w.count("ready/")), (1, 1));
}

#[tokio::test]
async fn a_young_creating_record_is_left_to_its_submit() {
    let w = World::new();
    w.crashed("a").await;
    w.clock.advance(Duration::minutes(5));
    let s = w.sweep(false).await;
    assert_eq!((s.scanned, s.finished, s.errors), (1, 0, 0));
    assert_eq!(w.record("a").await.status, Some(RecordStatus::Creating));
    assert_eq!(w.count("tasks/"), 0);
}

#[tokio::test]
async fn a_creating_record_past_its_deadline_is_counted_and_left_alone() {
    let w = World::new();
    w.crashed("a").await;
    let before = w.bucket.keys();
    w.clock.advance(Duration::seconds(2400));
    let key = w.bucket.keys().into_iter().next().unwrap();
    // Its event, late: counted as an error, acknowledged, nothing written.
    let o = w.queue().engine().sweep_record(&key, false, None).await;
    assert_eq!(o, RecordOutcome::PastDeadline);
    assert!(!o.try_again_later());
    // A pass does not even read it: it could not finish it anyway.
    let s = w.sweep(false).await;
    assert_eq!((s.reads, s.finished, s.errors), (0, 0, 0), "{s:?}");
    assert_eq!(w.count("tasks/"), 0);
    assert_eq!(w.record("a").await.status, Some(RecordStatus::Creating));
    assert_eq!(
        w.bucket
            .keys()
            .into_iter()
            .filter(|k| !k.starts_with("sweeper/"))
            .collect::<Vec<_>>(),
        before
    );
}

#[tokio::test]
async fn expired_records_are_deleted_whatever_their_status() {
    let w = World::new();
    w.submit_living("ready", Duration::hours(1)).await;
    // As the sweeper of an earlier version left it.
    let (rec, meta) = w.record_meta("ready").await;
    let mut v = serde_json::to_value(&rec).unwrap();
    v["status"] = json!("ready");
    v.as_object_mut().unwrap().remove("pending_task");
    w.bucket
        .put(
            &meta.key,
            serde_json::to_vec(&v).unwrap().into(),
            PutMode::Update(meta.etag),
        )
        .await
        .unwrap();
    assert_eq!(w.record("ready").await.status, Some(RecordStatus::Ready));
    w.crashed("creating").await;
    w.submit_living("young", Duration::hours(2)).await;
    w.clock.advance(Duration::days(31));
    w.queue()
        .submit("t", json!(1))
        .idempotency_key("fresh")
        .await
        .unwrap();
    w.clock.advance(Duration::hours(1));
    let s = w.sweep(false).await;
    assert_eq!(s.expired_deleted, 3, "{s:?}");
    assert_eq!(s.finished, 0, "an expired creating record is not finished");
    assert_eq!(w.count("idempotency/"), 1);
    assert!(
        w.queue()
            .record("t", "fresh", None)
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test]
async fn a_dry_run_reports_and_changes_nothing() {
    let w = World::new();
    w.crashed("a").await;
    w.submit_living("b", Duration::hours(1)).await;
    w.clock.advance(Duration::days(31));
    w.crashed("c").await;
    w.clock.advance(Duration::minutes(11));
    let before = w.bucket.keys();
    let s = w.sweep(true).await;
    assert!(s.dry_run);
    // a and b expired (b's shorter TTL is judged at the default TTL's age);
    // c is stale and can still be finished.
    assert_eq!(
        (s.scanned, s.finished, s.expired_deleted),
        (3, 1, 2),
        "{s:?}"
    );
    assert_eq!(w.bucket.keys(), before);
}

#[tokio::test]
async fn a_dry_run_reads_each_record_as_the_real_run_and_counts_what_it_then_does_writing_nothing()
{
    let w = World::new();
    let stale = every_kind_a_pass_meets(&w).await;

    let before = w.bucket.snapshot();
    let f = FaultyStore::new(w.bucket.clone());
    let dry_run = SweepOptions {
        dry_run: true,
        ..Default::default()
    };
    let dry = w.queue_over(f.clone()).engine().sweep(&dry_run).await;
    let dry = dry.unwrap();
    assert!(dry.dry_run);
    assert_eq!(
        w.bucket.snapshot(),
        before,
        "keys, bytes and ETags as they were"
    );
    let writes: Vec<_> = f.calls().into_iter().filter(|c| c.op.is_write()).collect();
    assert!(writes.is_empty(), "{writes:?}");
    // It read what the real finish reads: the tasks and markers.
    assert!(
        f.calls()
            .iter()
            .any(|c| c.op == Op::Get && c.key.starts_with("tasks/"))
    );
    assert!(
        f.calls()
            .iter()
            .any(|c| c.op == Op::Head && c.key.starts_with("ready/"))
    );

    let real = w.sweep(false).await;
    assert_eq!(
        (
            real.finished,
            real.expired_deleted,
            real.payloads_deleted,
            real.markers_deleted
        ),
        (3, 2, 1, 1),
        "{real:?}"
    );
    assert_eq!(counts(&dry), counts(&real), "dry {dry:?}\nreal {real:?}");
    assert_eq!((w.count("tasks/"), w.count("ready/")), (6, 5));
    assert!(!w.keys("ready/").contains(&stale));
}

/// Puts in `w`'s bucket every kind of record and payload a pass meets, 11
/// minutes after the last of them: expired records (ready and creating), an
/// orphan payload of the day's slices, a stale marker (its task completed),
/// and stale creating records (one done, one interrupted after its record,
/// one without its marker, one without its task). The stale marker.
async fn every_kind_a_pass_meets(w: &World) -> String {
    // Expired by the time of the pass: a ready record, a creating one, and
    // an orphan payload the day's slices take.
    w.submit_living("expired", Duration::hours(1)).await;
    w.crashed("expired-creating").await;
    let pass_at = w.clock.now() + Duration::days(31) + Duration::minutes(11);
    // A first pass's check begins at the cursor's first slice.
    let plan = idempotent_submit::testing::protocol::sweep::PayloadPlan::after(0, None, pass_at);
    let slice = plan.slices.start;
    payload_of_slice(&w.bucket, slice).await;
    // A marker beside a task a worker has run since.
    let stale = task_with_marker(&w.bucket, "completed", w.clock.now(), true).await;
    w.clock.advance(Duration::days(31));
    // Stale and still creating, as every record stays: one done, one
    // interrupted after its record, one without its marker, one without its
    // task.
    w.submit_key("done").await;
    w.crashed("after-record").await;
    let no_marker = w.submit_key("no-marker").await;
    let marker = w
        .keys("ready/")
        .into_iter()
        .find(|k| k.ends_with(&no_marker.to_string()))
        .unwrap();
    w.bucket.delete(&marker, None).await.unwrap();
    w.interrupted_at("no-task", Op::PutCreate, "tasks/", Fault::CrashBefore)
        .await;
    assert_eq!((w.count("tasks/"), w.count("ready/")), (4, 4));
    w.clock.advance(Duration::minutes(11));
    assert_eq!(w.clock.now(), pass_at);
    stale
}
