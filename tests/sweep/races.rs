use super::*;

#[tokio::test]
async fn a_sweep_that_runs_out_of_time_keeps_its_place() {
    let w = World::with_stale(&["a", "b", "c", "d", "e"]).await;
    let q = w.queue();
    let opts = SweepOptions {
        max_records: Some(2),
        ..Default::default()
    };
    let first = q.engine().sweep(&opts).await.unwrap();
    assert_eq!(
        (first.scanned, first.finished, first.complete),
        (2, 2, false)
    );
    assert!(
        w.bucket
            .keys()
            .iter()
            .any(|k| k == "sweeper/checkpoint.json")
    );
    let second = q.engine().sweep(&opts).await.unwrap();
    assert_eq!(
        (second.scanned, second.finished, second.complete),
        (2, 2, false)
    );
    let third = q.engine().sweep(&opts).await.unwrap();
    assert_eq!(
        (third.scanned, third.finished, third.complete),
        (1, 1, true)
    );
    assert_eq!(w.count("tasks/"), 5);
}

#[tokio::test]
async fn a_sweep_stops_at_a_storage_failure_and_the_next_run_retries_that_record() {
    let w = World::with_stale(&["a"]).await;
    let (s, f) = w.sweep_failing(Op::PutCreate, "tasks/").await;
    assert_eq!((s.errors, s.complete), (1, false));
    f.heal();
    let s = w.sweep_over(f).await;
    assert_eq!((s.finished, s.complete), (1, true));
}

#[tokio::test]
async fn a_record_replaced_between_the_sweepers_read_and_its_delete_survives() {
    let (s, left) =
        replaced_between_read_and_delete(common::memory_store, Behaviour::default(), true).await;
    assert_eq!((s.expired_deleted, s.expired_kept), (0, 0));
    assert_eq!(left, Some("2099-01-01T00:00:00Z".into()));
}

#[tokio::test]
async fn with_conditional_delete_off_a_versioned_bucket_loses_the_version_read_and_keeps_the_record_that_replaced_it()
 {
    let (s, left) =
        replaced_between_read_and_delete(common::memory_store_versioned, Behaviour::minio(), false)
            .await;
    assert_eq!(s.expired_deleted, 1, "the expired version is gone: {s:?}");
    assert_eq!(left, Some("2099-01-01T00:00:00Z".into()));
}

#[tokio::test]
async fn with_conditional_delete_off_an_unversioned_bucket_leaves_the_expired_record_counted_for_the_lifecycle_rule()
 {
    let (s, left) =
        replaced_between_read_and_delete(common::memory_store, Behaviour::minio(), false).await;
    assert_eq!((s.expired_deleted, s.expired_kept), (0, 1), "{s:?}");
    // No DELETE was sent: the expired record is there, as it was.
    assert_eq!(left, Some("2026-01-27T13:00:00Z".into()));
}

#[tokio::test]
async fn a_sweeper_that_trusted_if_match_on_a_store_that_ignores_it_would_delete_the_record_that_replaced_the_expired_one()
 {
    // What CONDITIONAL_DELETE=off is for: with it on, over a store that
    // deletes whatever is there, the live record goes and its key's promise
    // with it.
    let (s, left) =
        replaced_between_read_and_delete(common::memory_store, Behaviour::minio(), true).await;
    assert_eq!(s.expired_deleted, 1);
    assert_eq!(left, None, "the live record was deleted");
}

/// An expired record, and the sweeper's handling of it (as its event or a
/// pass would) whose deletion meets a new submit's replacement of it (the
/// replacement lands just before the DELETE): what the sweeper counted, and
/// the `expires_at` of the record left, if any.
async fn replaced_between_read_and_delete(
    store: fn(&ManualClock) -> MemoryStore,
    behaviour: Behaviour,
    conditional_delete: bool,
) -> (SweepSummary, Option<String>) {
    let clock = ManualClock::at_epoch();
    let w = World::over(clock.clone(), store(&clock).with_behaviour(behaviour));
    w.submit_living("a", Duration::hours(1)).await;
    w.clock.advance(Duration::hours(2));
    let rkey = w.record_key("a");
    // A new submit (after expiry) replaces the record just before the
    // sweeper's delete reaches the bucket.
    let bucket = w.bucket.clone();
    let intercept = common::Wrapped(common::Intercept {
        inner: w.bucket.clone(),
        hook: move |op: Op, key: &str| {
            if op == Op::Delete {
                let cur = bucket.get(key).now_or_never()?.ok()?;
                let mut v: serde_json::Value = serde_json::from_slice(&cur.body).ok()?;
                if v["expires_at"] == json!("2099-01-01T00:00:00Z") {
                    return None;
                }
                v["write_id"] = json!(uuid::Uuid::new_v4());
                v["expires_at"] = json!("2099-01-01T00:00:00Z");
                let body = serde_json::to_vec(&v).ok()?.into();
                bucket
                    .put(key, body, PutMode::Update(cur.meta.etag))
                    .now_or_never()?
                    .ok()?;
            }
            None
        },
    });
    let q = w.queue_with(intercept, with_conditional_delete(conditional_delete));
    let mut s = SweepSummary::default();
    q.engine()
        .sweep_record(&rkey, false, None)
        .await
        .tally(&mut s);
    assert_eq!(s.reads, 1);
    let left = match w.queue().record("t", "a", None).await.unwrap() {
        Some((rec, _)) => Some(rec.expires_at.format("%Y-%m-%dT%H:%M:%SZ").to_string()),
        None => None,
    };
    (s, left)
}

#[tokio::test]
async fn with_conditional_delete_off_an_expired_record_and_an_expired_version_that_comes_back_are_both_deleted()
 {
    let clock = ManualClock::at_epoch();
    let w = World::over(
        clock.clone(),
        common::memory_store_versioned(&clock).with_behaviour(Behaviour::minio()),
    );
    let q = w.queue_with(w.bucket.clone(), with_conditional_delete(false));
    // Two lives of one key: the first replaced once it had expired (the
    // submits do not read CONDITIONAL_DELETE: only the sweeper does).
    for _ in 0..2 {
        w.submit_living("a", Duration::hours(1)).await;
        w.clock.advance(Duration::hours(2));
    }
    let rkey = w.record_key("a");
    assert_eq!(w.bucket.versions(&rkey).len(), 2);
    let outcome = q.engine().sweep_record(&rkey, false, None).await;
    assert_eq!(outcome, RecordOutcome::ExpiredDeleted);
    // Both versions gone for good: nothing came back, no delete marker.
    assert!(
        w.bucket.versions(&rkey).is_empty(),
        "{:?}",
        w.bucket.versions(&rkey)
    );
    assert_eq!(w.count("idempotency/"), 0);
    // And the next submit of the key makes a new task.
    let r = q.submit("t", json!(1)).idempotency_key("a").await.unwrap();
    assert!(r.created());
}

#[tokio::test]
async fn a_sweeper_and_a_late_submit_finishing_together_leave_one_task_its_marker_and_the_record_as_written()
 {
    for _ in 0..20 {
        let w = World::new();
        let id = w.crashed("a").await;
        let written = w.record_meta("a").await.1.etag;
        w.clock.advance(Duration::minutes(11));
        // Both go through a yielding store, so their requests interleave.
        let (sweeper, submitter) = (
            FaultyStore::new(w.bucket.clone()),
            FaultyStore::new(w.bucket.clone()),
        );
        let (qs, qu) = (w.queue_over(sweeper), w.queue_over(submitter));
        let opts = SweepOptions::default();
        let (s, r) = tokio::join!(
            qs.engine().sweep(&opts),
            qu.submit("t", json!({"k": "a"}))
                .idempotency_key("a")
                .into_future(),
        );
        let (s, r) = (s.unwrap(), r.unwrap());
        assert_eq!(r.task_id, id);
        assert_eq!(s.errors, 0);
        assert_eq!(w.count("tasks/"), 1);
        assert_eq!(w.count("ready/"), 1);
        w.assert_still_its_first_write("a", &written).await;
    }
}

/// The test settings, with `CONDITIONAL_DELETE` on or off.
fn with_conditional_delete(conditional_delete: bool) -> idempotent_submit::Settings {
    idempotent_submit::Settings {
        conditional_delete,
        ..common::settings()
    }
}
