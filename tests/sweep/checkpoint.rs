use super::*;

#[tokio::test]
async fn a_run_that_died_holding_the_pass_keeps_it_for_its_lease_then_loses_it() {
    let w = World::with_stale(&["a"]).await;
    // A run claims the pass (its lease: the run's 15 minutes plus one
    // operation's 25 s) and dies right after.
    let f = FaultyStore::new(w.bucket.clone());
    f.inject(Some(Op::PutCreate), "sweeper/", 1, 1, Fault::CrashAfter);
    let died = w
        .queue_over(f)
        .engine()
        .sweep(&SweepOptions::default())
        .await;
    assert!(died.is_err(), "{died:?}");
    let cp: serde_json::Value =
        serde_json::from_slice(&w.bucket.get("sweeper/checkpoint.json").await.unwrap().body)
            .unwrap();
    let lease: chrono::DateTime<chrono::Utc> =
        cp["shares"][0]["until"].as_str().unwrap().parse().unwrap();
    assert_eq!(
        lease,
        w.clock.now() + Duration::minutes(15) + Duration::seconds(25)
    );
    // Until the lease runs out, every other run finds the pass taken.
    w.clock
        .advance(Duration::minutes(15) + Duration::seconds(24));
    let s = w.sweep(false).await;
    assert!(s.busy && s.scanned == 0, "{s:?}");
    // From the lease's last instant, the next run takes it over and
    // finishes the record.
    w.clock.advance(Duration::seconds(1));
    let s = w.sweep(false).await;
    assert!(!s.busy && s.complete, "{s:?}");
    assert_eq!(s.finished, 1, "{s:?}");
}

#[tokio::test]
async fn a_pass_with_a_record_budget_never_lists_past_it_however_many_ranges_wait() {
    for budget in [1, 3] {
        a_budgeted_pass(budget).await;
    }
}

async fn a_budgeted_pass(budget: usize) {
    let w = World::new();
    // Records under three scopes: several ranges wait at once.
    for tt in ["a", "b", "c"] {
        for k in ["1", "2"] {
            let f = common::world::dying_at(
                w.bucket.clone(),
                Op::PutCreate,
                "idempotency/",
                Fault::CrashAfter,
            );
            w.queue_over(f)
                .submit(tt, json!({"k": k}))
                .idempotency_key(k)
                .await
                .unwrap_err();
        }
    }
    w.clock.advance(Duration::minutes(11));
    let opts = SweepOptions {
        max_records: Some(budget),
        ..Default::default()
    };
    let (mut runs, mut finished) = (0, 0);
    loop {
        runs += 1;
        assert!(runs < 50, "the pass never completes");
        let f = FaultyStore::new(w.bucket.clone());
        let s = w.queue_over(f.clone()).engine().sweep(&opts).await.unwrap();
        assert!(
            s.scanned <= budget as u64,
            "budget {budget}, run {runs}: {s:?}"
        );
        // The summary counts the listings and record reads it made.
        let calls = f.calls();
        let count = |op: Op, prefix: &str| {
            calls
                .iter()
                .filter(|c| c.op == op && c.key.starts_with(prefix))
                .count() as u64
        };
        assert_eq!(s.lists, count(Op::List, ""), "run {runs}: {s:?}");
        assert_eq!(s.reads, count(Op::Get, "idempotency/"), "run {runs}: {s:?}");
        finished += s.finished;
        if s.complete {
            break;
        }
    }
    assert_eq!((finished, w.count("tasks/")), (6, 6));
}

#[test]
fn a_summary_adds_every_count_of_another() {
    let one = SweepSummary {
        scanned: 3,
        finished: 4,
        expired_deleted: 6,
        expired_kept: 5,
        errors: 7,
        reads: 8,
        lists: 9,
        past_deadline: 10,
        early: 11,
        ignored: 12,
        unrecognized: 13,
        payloads_deleted: 14,
        markers_deleted: 15,
        no_record_yet: 16,
        due_no_record: 17,
        ..Default::default()
    };
    let mut sum = one.clone();
    sum.add(&one);
    let twice = SweepSummary {
        scanned: 6,
        finished: 8,
        expired_deleted: 12,
        expired_kept: 10,
        errors: 14,
        reads: 16,
        lists: 18,
        past_deadline: 20,
        early: 22,
        ignored: 24,
        unrecognized: 26,
        payloads_deleted: 28,
        markers_deleted: 30,
        no_record_yet: 32,
        due_no_record: 34,
        ..Default::default()
    };
    assert_eq!(sum, twice);
}

#[test]
fn each_outcome_counts_one_read_and_its_own_count_once() {
    use idempotent_submit::SubmitError;
    // Each outcome tallied twice: the reads, and each count, in the order
    // finished, expired_deleted, expired_kept, early, no_record_yet,
    // due_no_record, past_deadline, errors.
    let tally = |o: RecordOutcome| {
        let mut s = SweepSummary::default();
        o.tally(&mut s);
        o.tally(&mut s);
        let counts = [
            s.finished,
            s.expired_deleted,
            s.expired_kept,
            s.early,
            s.no_record_yet,
            s.due_no_record,
            s.past_deadline,
            s.errors,
        ];
        (s.reads, counts)
    };
    assert_eq!(tally(RecordOutcome::Nothing), (2, [0, 0, 0, 0, 0, 0, 0, 0]));
    assert_eq!(
        tally(RecordOutcome::Finished),
        (2, [2, 0, 0, 0, 0, 0, 0, 0])
    );
    assert_eq!(
        tally(RecordOutcome::ExpiredDeleted),
        (2, [0, 2, 0, 0, 0, 0, 0, 0])
    );
    assert_eq!(
        tally(RecordOutcome::ExpiredKept),
        (2, [0, 0, 2, 0, 0, 0, 0, 0])
    );
    assert_eq!(tally(RecordOutcome::Early), (2, [0, 0, 0, 2, 0, 0, 0, 0]));
    assert_eq!(
        tally(RecordOutcome::NoRecordYet),
        (2, [0, 0, 0, 0, 2, 0, 0, 0])
    );
    assert_eq!(
        tally(RecordOutcome::NoRecord),
        (2, [0, 0, 0, 0, 0, 2, 0, 0])
    );
    // A record past its finish deadline is an error of its own kind.
    assert_eq!(
        tally(RecordOutcome::PastDeadline),
        (2, [0, 0, 0, 0, 0, 0, 2, 2])
    );
    assert_eq!(tally(RecordOutcome::Corrupt), (2, [0, 0, 0, 0, 0, 0, 0, 2]));
    let unavailable = SubmitError::Storage(StoreError::Unavailable("503".into()));
    assert_eq!(
        tally(RecordOutcome::Failed(unavailable)),
        (2, [0, 0, 0, 0, 0, 0, 0, 2])
    );
    // Cut short by the run's own deadline: it goes on next run, no error.
    assert_eq!(
        tally(RecordOutcome::Failed(SubmitError::DeadlineExceeded)),
        (2, [0; 8])
    );
}

#[test]
fn only_a_young_record_or_a_retryable_failure_is_handed_back() {
    use idempotent_submit::SubmitError;
    let retry = |o: RecordOutcome| o.try_again_later();
    assert!(retry(RecordOutcome::Early));
    assert!(retry(RecordOutcome::Failed(SubmitError::Storage(
        StoreError::Unavailable("503".into())
    ))));
    // A failure that a later delivery cannot fix is not handed back: a
    // refused request, or a record still undetermined past its deadline.
    assert!(!retry(RecordOutcome::Failed(SubmitError::Storage(
        StoreError::Fatal("403".into())
    ))));
    assert!(!retry(RecordOutcome::Failed(SubmitError::Undetermined {
        task_id: uuid::Uuid::nil(),
        retry_after: std::time::Duration::from_secs(1),
    })));
    assert!(!retry(RecordOutcome::Finished));
    assert!(!retry(RecordOutcome::PastDeadline));
}

/// A checkpoint that does not parse is said and counted, never dropped
/// without a word; the pass begins anew over it and leaves one that parses.
#[tokio::test]
async fn an_unparseable_checkpoint_is_counted_as_an_error_and_a_new_pass_replaces_it() {
    let w = World::new();
    w.queue()
        .submit("t", json!({"k": 1}))
        .idempotency_key("a")
        .await
        .unwrap();
    w.bucket
        .put(
            idempotent_submit::testing::protocol::sweep::CHECKPOINT_KEY,
            bytes::Bytes::from_static(b"{not a checkpoint"),
            PutMode::Overwrite,
        )
        .await
        .unwrap();
    w.clock.advance(Duration::minutes(11));
    let s = w.sweep(false).await;
    assert_eq!((s.errors, s.complete, s.scanned), (1, true, 1), "{s:?}");
    let saved = w
        .bucket
        .get(idempotent_submit::testing::protocol::sweep::CHECKPOINT_KEY)
        .await
        .unwrap();
    let v: serde_json::Value =
        serde_json::from_slice(&saved.body).expect("a checkpoint that parses");
    assert!(v["pass"].is_string(), "{v}");
    // The next pass reads it: no error.
    w.clock.advance(Duration::days(1));
    assert_eq!(w.sweep(false).await.errors, 0);
}
