use super::*;

// ---- the finish deadline ----

#[tokio::test]
async fn a_marker_that_landed_without_its_task_gets_its_task_from_the_next_submit() {
    // The first submit sends its task and marker at once; the task's PUT is
    // refused, the marker lands. The next submit finds the marker and no
    // task: the task is what is missing, and it writes it (the marker, there
    // already, is not written again).
    let w = World::new();
    w.fault_once(
        Op::PutCreate,
        "tasks/",
        Fault::Fail(StoreError::Fatal("403".into())),
    );
    submit(&w.process()).await.unwrap_err();
    assert_eq!((w.count("tasks/"), w.keys("ready/").len()), (0, 1));
    let rec = w.record("k").await;
    let before = w.faulty.calls().len();
    let r = submit(&w.process()).await.unwrap();
    assert_eq!(r.task_id, rec.task_id);
    assert_eq!(w.count("tasks/"), 1);
    assert_eq!(w.task("k").await.0["status"], "pending");
    let puts = |op: Op, prefix: &str| {
        w.faulty.calls()[before..]
            .iter()
            .filter(|c| c.op == op && c.key.starts_with(prefix))
            .count()
    };
    assert_eq!(
        (puts(Op::PutCreate, "tasks/"), puts(Op::Put, "ready/")),
        (1, 0)
    );
}

#[tokio::test]
async fn a_record_that_is_gone_at_every_read_is_given_up_after_six_rounds_as_retryable() {
    // Every claim meets a record (412) that is gone when read (404), as if a
    // sweeper deleted each one in between: the submit starts over six times,
    // then answers a retryable error, having written nothing. (The 412s stop
    // after 50, so a submit that never gave up would end with a task.)
    let w = World::new();
    w.faulty.inject(
        Some(Op::PutCreate),
        "idempotency/",
        1,
        50,
        Fault::Fail(StoreError::PreconditionFailed),
    );
    w.faulty.inject(
        Some(Op::Get),
        "idempotency/",
        1,
        usize::MAX,
        Fault::Fail(StoreError::NotFound),
    );
    let e = submit(&w.process()).await.unwrap_err();
    assert!(
        matches!(&e, SubmitError::Storage(StoreError::Unavailable(m)) if m.contains("kept changing")),
        "{e:?}"
    );
    assert!(e.is_retryable());
    let calls = w.faulty.calls();
    let count = |op: Op| {
        calls
            .iter()
            .filter(|c| c.op == op && c.key.starts_with("idempotency/"))
            .count()
    };
    assert_eq!((count(Op::PutCreate), count(Op::Get)), (6, 6));
    assert_eq!((w.count("tasks/"), w.count("idempotency/")), (0, 0));
}

#[tokio::test]
async fn a_creating_record_is_finished_just_before_its_deadline() {
    let w = World::new();
    let rec = interrupted(&w).await;
    // Just before, by more than the uncertainty of S3's clock: its `Date`
    // has whole seconds, so S3's time is known to within one.
    w.clock.advance(Duration::seconds(2400 - 2));
    let r = submit(&w.restarted()).await.unwrap();
    assert_eq!(r.task_id, rec.task_id);
    assert_eq!(w.count("tasks/"), 1);
}

#[tokio::test]
async fn within_the_uncertainty_of_s3s_clock_before_the_deadline_nothing_is_written() {
    let w = World::new();
    let rec = interrupted(&w).await;
    // One second before the deadline by our clock, S3's may already be past
    // it (its dates have whole seconds): the submit takes the safe side.
    w.clock.advance(Duration::seconds(2400 - 1));
    let before = w.bucket.keys();
    match submit(&w.restarted()).await.unwrap_err() {
        SubmitError::Undetermined {
            task_id,
            retry_after,
        } => {
            assert_eq!(task_id, rec.task_id);
            assert_eq!(retry_after.as_secs(), 15 * 60 + 1);
        }
        other => panic!("expected undetermined, got {other:?}"),
    }
    assert_eq!(w.bucket.keys(), before);
}

#[tokio::test]
async fn just_after_the_deadline_a_taskless_creating_record_is_undetermined_and_nothing_is_written()
{
    let w = World::new();
    let rec = interrupted(&w).await;
    w.clock.advance(Duration::seconds(2400 + 1));
    let before = w.bucket.keys();
    let e = submit(&w.restarted()).await.unwrap_err();
    match e {
        SubmitError::Undetermined {
            task_id,
            retry_after,
        } => {
            assert_eq!(task_id, rec.task_id);
            assert_eq!(retry_after.as_secs(), 15 * 60 - 1);
        }
        other => panic!("expected undetermined, got {other:?}"),
    }
    assert!(e.is_retryable());
    assert_eq!(w.bucket.keys(), before);
}

#[tokio::test]
async fn long_after_the_deadline_a_taskless_creating_record_answers_missing_and_writes_nothing() {
    let w = World::new();
    let rec = interrupted(&w).await;
    w.clock.advance(Duration::seconds(2400 + 15 * 60));
    let before = w.bucket.keys();
    let r = submit(&w.restarted()).await.unwrap();
    assert_eq!(r.task_id, rec.task_id);
    assert_eq!(r.status, "missing");
    assert!(r.replayed);
    assert_eq!(w.bucket.keys(), before);
    assert_eq!(
        w.record("k").await.status,
        Some(RecordStatus::Creating),
        "left as it is until it expires"
    );
}

#[tokio::test]
async fn past_the_deadline_a_creating_record_whose_task_exists_answers_its_status() {
    let w = World::new();
    // The submit answered; the sweeper never came.
    submit(&w.process()).await.unwrap();
    w.clock.advance(Duration::seconds(2400 + 1));
    let before = w.bucket.keys();
    let r = submit(&w.restarted()).await.unwrap();
    assert_eq!(r.status, "pending");
    assert_eq!(w.bucket.keys(), before);
}

#[tokio::test]
async fn a_task_deleted_after_the_deadline_is_never_written_again() {
    let w = World::new();
    submit(&w.process()).await.unwrap();
    let rec = w.record("k").await;
    w.clock.advance(Duration::hours(1));
    w.bucket.delete(&rec.task_key, None).await.unwrap();
    let r = submit(&w.restarted()).await.unwrap();
    assert_eq!(r.task_id, rec.task_id);
    assert_eq!(r.status, "missing");
    assert_eq!(w.count("tasks/"), 0);
}

#[tokio::test]
async fn an_expired_creating_record_is_replaced_not_finished() {
    let w = World::new();
    let rec = interrupted(&w).await;
    w.clock.advance(Duration::days(31));
    let r = submit(&w.restarted()).await.unwrap();
    assert!(r.created());
    assert_ne!(r.task_id, rec.task_id);
    assert_eq!(w.count("tasks/"), 1);
}

#[tokio::test]
async fn an_expired_record_deleted_before_its_replacement_lands_is_claimed_again_whether_the_store_says_404_or_412()
 {
    use idempotent_submit::store::Behaviour;
    for behaviour in [Behaviour::default(), Behaviour::seaweedfs()] {
        let clock = idempotent_submit::ManualClock::at_epoch();
        let w = World::over(
            clock.clone(),
            common::memory_store(&clock).with_behaviour(behaviour),
        );
        let old = w
            .restarted()
            .submit("t", json!({"n": 1}))
            .idempotency_key("k")
            .idempotency_ttl(Duration::hours(1))
            .await
            .unwrap();
        w.clock.advance(Duration::hours(2));
        // The sweeper deletes the expired record between this submit's read
        // of it and its If-Match: S3 answers 404, SeaweedFS 412.
        let bucket = w.bucket.clone();
        let racing = FaultyStore::new(common::Wrapped(common::Intercept {
            inner: w.bucket.clone(),
            hook: move |op: Op, key: &str| {
                if op == Op::PutUpdate && key.starts_with("idempotency/") {
                    bucket.delete(key, None).now_or_never();
                }
                None
            },
        }));
        let q = Queue::with_clock(
            racing.clone(),
            Arc::new(w.clock.clone()) as Arc<dyn Clock>,
            common::settings(),
        );
        let r = submit(&q).await.unwrap();
        assert!(r.created() && r.task_id != old.task_id, "{behaviour:?}");
        let answer = racing
            .calls()
            .into_iter()
            .find(|c| c.op == Op::PutUpdate)
            .and_then(|c| c.error);
        let expected = if behaviour == Behaviour::default() {
            StoreError::NotFound
        } else {
            StoreError::PreconditionFailed
        };
        assert_eq!(answer, Some(expected), "{behaviour:?}");
        assert_eq!(w.record("k").await.task_id, r.task_id);
        // The old task and the new one: a new life, a new task.
        assert_eq!(w.count("tasks/"), 2);
    }
}

/// A later submit whose every write of kind `op` under `prefix` takes `by`
/// (the clock moves on) and fails retryably: its error, and how many of those
/// writes it attempted.
async fn submit_with_slow_writes(
    w: &World,
    op: Op,
    prefix: &'static str,
    by: Duration,
) -> (SubmitError, usize) {
    let clock = w.clock.clone();
    let slow = FaultyStore::new(common::Wrapped(common::Intercept {
        inner: w.bucket.clone(),
        hook: move |o: Op, key: &str| {
            (o == op && key.starts_with(prefix)).then(|| {
                clock.advance(by);
                StoreError::Unavailable("503 SlowDown".into())
            })
        },
    }));
    let q = Queue::with_clock(
        slow.clone(),
        Arc::new(w.clock.clone()) as Arc<dyn Clock>,
        common::settings(),
    );
    let e = submit(&q).await.unwrap_err();
    let writes = slow
        .calls()
        .iter()
        .filter(|c| c.op == op && c.key.starts_with(prefix))
        .count();
    (e, writes)
}

/// A later submit of the interrupted record starts 10 s before its finish
/// deadline; its first write of kind `op` under `prefix` takes 20 s and fails,
/// so a retry would go after the deadline. Checks that it is refused: one
/// attempt only, undetermined until the deadline + 15 minutes, and nothing
/// under `prefix`.
async fn refused_at_the_deadline(w: &World, op: Op, prefix: &'static str) {
    let rec = w.record("k").await;
    w.clock.advance(Duration::seconds(2400 - 10));
    let (e, writes) = submit_with_slow_writes(w, op, prefix, Duration::seconds(20)).await;
    // Refused 10 s past the deadline: undetermined until a late write can no
    // longer land, 15 minutes after the deadline. (A 200 needs both objects.)
    assert!(
        matches!(e, SubmitError::Undetermined { task_id, retry_after }
            if task_id == rec.task_id && retry_after.as_secs() == 15 * 60 - 10),
        "{e:?}"
    );
    assert_eq!(writes, 1, "no retry after the deadline");
    assert_eq!(w.record("k").await.status, Some(RecordStatus::Creating));
    assert_eq!(w.count(prefix), 0);
}

#[tokio::test]
async fn a_finish_cut_short_by_the_operations_own_deadline_is_retryable_not_undetermined() {
    // A later submit of an interrupted record, long before its finish
    // deadline: its task write takes 30 s and fails, past the operation's 25
    // s, so no retry goes. Nothing forbids a write later: the answer is the
    // operation's own retryable error, not "undetermined until the finish
    // deadline and its late writes are over".
    let w = World::new();
    let rec = interrupted(&w).await;
    let (e, writes) =
        submit_with_slow_writes(&w, Op::PutCreate, "tasks/", Duration::seconds(30)).await;
    assert!(matches!(e, SubmitError::DeadlineExceeded), "{e:?}");
    assert!(e.is_retryable());
    assert_eq!(writes, 1, "no retry after the operation's deadline");
    let now = w.record("k").await;
    assert_eq!(
        (now.status, now.task_id),
        (Some(RecordStatus::Creating), rec.task_id)
    );
}

#[tokio::test]
async fn no_task_write_is_attempted_once_the_finish_deadline_has_passed_even_by_a_retry() {
    let w = World::new();
    interrupted(&w).await;
    refused_at_the_deadline(&w, Op::PutCreate, "tasks/").await;
}

#[tokio::test]
async fn no_marker_write_is_attempted_once_the_finish_deadline_has_passed_even_by_a_retry() {
    let w = World::new();
    // The task landed; the marker did not, and the submit died.
    dies_before_the_marker(&w).await;
    refused_at_the_deadline(&w, Op::Put, "ready/").await;
}
