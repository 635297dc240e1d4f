use super::*;

// ---- on moto: its SQS, real delays ----

/// The submitter's messages through moto's SQS, with its real delay, to a
/// sweeper that judges S3's time by moto's `Date`: five submits that died
/// after their records, drained as their messages come, are each finished
/// at its first delivery, none handed back as early. (moto serves one
/// request at a time and takes the PUT first; the case of a message taken
/// before its record's stamp is the in-memory test above.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submitters_message_finishes_its_record_at_its_first_delivery() {
    let store = common::moto_store().await;
    let url = common::moto_queue(
        &format!("due-{}", store.bucket()),
        common::due::STALE_SECONDS,
    )
    .await;
    for i in 0..5 {
        let key = format!("arrival-{i}");
        common::due::interrupted_submit(
            &store,
            CrashPoint::AfterRecord,
            Mode::Submitter,
            &url,
            &key,
        )
        .await;
    }
    let sweeper = Queue::new(store.clone(), common::due::settings());
    let s = common::due::drain_until_finished(&url, &sweeper, store.bucket(), 5).await;
    assert_eq!((s.finished, s.early, s.errors), (5, 0, 0), "{s:?}");
}

/// Every crash point after the record, in both modes, on moto: finished by
/// the drained due queue (nobody submits again), then buquet's worker runs
/// the task once.
async fn finished_by_the_due_queue_then_run_once(point: CrashPoint, mode: Mode) {
    let store = common::moto_store_versioned().await;
    let url = match mode {
        Mode::Bucket => common::moto_due_queue(&store, common::due::STALE_SECONDS).await,
        Mode::Submitter => {
            common::moto_queue(
                &format!("due-{}", store.bucket()),
                common::due::STALE_SECONDS,
            )
            .await
        }
    };
    common::due::interrupted_submit(&store, point, mode, &url, "first").await;
    let (tasks, markers, _) = common::due::holdings(&store).await;
    assert_eq!(
        (tasks.len(), markers.len()),
        match point {
            CrashPoint::AfterRecord => (0, 0),
            CrashPoint::AfterTask => (1, 0),
            CrashPoint::TaskLost => (0, 1),
        }
    );
    let sweeper = Queue::new(store.clone(), common::due::settings());
    let s = common::due::drain_until_finished(&url, &sweeper, store.bucket(), 1).await;
    assert_eq!((s.finished, s.errors), (1, 0), "{point:?} {mode:?}: {s:?}");
    let (tasks, markers, task_id) = common::due::holdings(&store).await;
    assert_eq!((tasks.len(), markers.len()), (1, 1), "{point:?} {mode:?}");
    let at = BuquetAt {
        endpoint: &common::moto_endpoint(),
        bucket: store.bucket(),
        access_key_id: "test",
        secret_access_key: "test",
    };
    common::due::buquet_runs_once(&at, &task_id);
}

macro_rules! in_both_modes {
    ($($name:ident: $point:expr;)*) => {
        $(mod $name {
            use super::*;
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn bucket() {
                finished_by_the_due_queue_then_run_once($point, Mode::Bucket).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn submitter() {
                finished_by_the_due_queue_then_run_once($point, Mode::Submitter).await;
            }
        })*
    };
}

in_both_modes! {
    on_moto_a_submit_that_died_after_its_record_is_finished_by_the_due_queue_and_run_once:
        CrashPoint::AfterRecord;
    on_moto_a_submit_that_died_after_its_task_is_finished_by_the_due_queue_and_run_once:
        CrashPoint::AfterTask;
    on_moto_a_submit_whose_task_put_was_lost_is_finished_by_the_due_queue_and_run_once:
        CrashPoint::TaskLost;
}
