use super::*;

#[tokio::test]
async fn with_claim_a_failed_send_is_retried_then_counted_and_the_submit_goes_on() {
    let d = Due::sending(DueOrder::WithClaim);
    let q = d.queue();
    let engine = q.engine().clone();
    // Two failures, then it lands: three requests, one message, nothing counted.
    d.due
        .inject(DueFault::Fail(SendError::Unavailable("503".into())), 2);
    assert!(
        q.submit("t", json!(1))
            .idempotency_key("a")
            .await
            .unwrap()
            .created()
    );
    assert_eq!((d.due.requests().len(), d.due.queued().len()), (3, 1));
    assert_eq!(engine.take_unsent_due_messages(), 0);
    // Refused: not retried; counted; the submit still creates its task.
    d.due
        .inject(DueFault::Fail(SendError::Refused("AccessDenied".into())), 1);
    assert!(
        q.submit("t", json!(2))
            .idempotency_key("b")
            .await
            .unwrap()
            .created()
    );
    assert_eq!((d.due.requests().len(), d.due.queued().len()), (4, 1));
    assert_eq!(engine.take_unsent_due_messages(), 1);
    // Unavailable at every attempt: five requests, then counted.
    d.due.inject(DueFault::Lost, 5);
    assert!(
        q.submit("t", json!(3))
            .idempotency_key("c")
            .await
            .unwrap()
            .created()
    );
    assert_eq!((d.due.requests().len(), d.due.queued().len()), (9, 1));
    assert_eq!(engine.take_unsent_due_messages(), 1);
    assert_eq!(engine.take_unsent_due_messages(), 0, "taken once");
    assert_eq!(d.w.count("tasks/"), 3);
}

/// Under before_claim a message the queue does not take writes nothing:
/// the submit answers retryably (503 `storage_unavailable`), the key stays
/// free, and the next submit of it creates the task.
#[tokio::test]
async fn before_claim_a_send_that_still_fails_writes_nothing_and_answers_retryably() {
    // Every attempt of the submit's retries (5), or the one a refusal
    // takes (it is not retried).
    for (fault, attempts) in [
        (DueFault::Fail(SendError::Unavailable("503".into())), 5),
        (DueFault::Lost, 5),
        (DueFault::Fail(SendError::Refused("AccessDenied".into())), 1),
    ] {
        let d = Due::new();
        let q = d.queue_over(d.w.faulty.clone());
        d.due.inject(fault.clone(), attempts);
        let e = q
            .submit("t", json!(1))
            .idempotency_key("a")
            .await
            .unwrap_err();
        assert!(
            matches!(e, SubmitError::Storage(StoreError::Unavailable(_))),
            "{fault:?}: {e:?}"
        );
        assert!(e.is_retryable(), "{fault:?}");
        let problem = idempotent_submit::intake::problem::Problem::from_submit(&e);
        assert_eq!(problem.status, 503, "{fault:?}");
        assert_eq!(problem.code, "storage_unavailable");
        assert!(problem.retry_after.is_some());
        assert!(
            d.w.faulty.calls().is_empty(),
            "{fault:?}: nothing sent to S3"
        );
        assert_eq!(q.engine().take_unsent_due_messages(), 1);
        // Retried: the message lands, then the claim.
        let s = q.submit("t", json!(1)).idempotency_key("a").await.unwrap();
        assert!(s.created(), "{fault:?}");
        assert_eq!((d.w.count("tasks/"), d.w.count("ready/")), (1, 1));
        assert_eq!(d.due.queued().len(), 1);
    }
}

#[tokio::test]
async fn a_send_that_never_answers_is_ended_by_its_attempt_timeout_and_sent_again() {
    let d = Due::new();
    d.due.inject(DueFault::Hang, 1);
    let s = common::submit_key(&d.queue(), "a").await;
    assert!(s.created());
    assert_eq!((d.due.requests().len(), d.due.queued().len()), (2, 1));
}

#[tokio::test]
async fn a_message_whose_answer_was_lost_is_sent_again_and_its_duplicate_costs_one_read() {
    let d = Due::new();
    d.due.inject(DueFault::LandedAnswerLost, 1);
    d.dying("k", CrashPoint::AfterRecord).await;
    assert_eq!(d.due.queued().len(), 2);
    d.w.clock.advance(common::settings().stale_creating_after);
    let b = d.drain().await;
    assert_eq!((b.summary.scanned, b.summary.finished), (1, 1));
    assert_eq!(d.w.count("tasks/"), 1);
}

/// The window `DUE_MESSAGE=with_claim` leaves: the send failed, and then
/// the process died before its task was written. No message comes; the
/// next submit of the key finishes it. (Under before_claim the same send
/// writes nothing: the test above.)
#[tokio::test]
async fn with_claim_when_the_send_fails_and_the_process_then_dies_only_a_replay_finishes_it() {
    let d = Due::sending(DueOrder::WithClaim);
    d.due.inject(DueFault::Lost, 5);
    d.dying("k", CrashPoint::AfterRecord).await;
    let (_, rec) = d.record();
    assert!(d.due.queued().is_empty());
    d.w.clock.advance(common::settings().stale_creating_after);
    assert_eq!(d.drain().await.summary.scanned, 0);
    assert_eq!(d.w.count("tasks/"), 0);
    // The producer got no answer and retries, before the finish deadline.
    let s = d
        .queue()
        .submit("t", json!({"k": "k"}))
        .idempotency_key("k")
        .await
        .unwrap();
    assert_eq!(s.task_id, rec.task_id);
    assert!(s.recovered);
    assert_eq!((d.w.count("tasks/"), d.w.count("ready/")), (1, 1));
}

#[tokio::test]
async fn a_batch_sends_its_messages_ten_to_a_request_in_either_order() {
    for order in [DueOrder::BeforeClaim, DueOrder::WithClaim] {
        let d = Due::sending(order);
        let (q, waited) = d.awaiting();
        let items = (0..100).map(|i| {
            q.submit("t", json!({"i": i}))
                .idempotency_key(format!("k{i}"))
        });
        let results = q.submit_many(items).await;
        assert!(
            results
                .iter()
                .all(|r| r.as_ref().is_ok_and(|s| s.created()))
        );
        assert_eq!(
            waited.load(Ordering::SeqCst),
            0,
            "a PUT waited for its message"
        );
        let requests = d.due.requests();
        assert_eq!(requests.len(), 10);
        assert!(requests.iter().all(|r| r.messages.len() == 10));
        let mut named: Vec<String> = requests
            .iter()
            .flat_map(|r| r.messages.iter().map(|m| m.key.clone()))
            .collect();
        named.sort();
        named.dedup();
        assert_eq!(named.len(), 100);
    }
}

#[tokio::test]
async fn a_batch_with_keyless_and_invalid_items_sends_one_message_per_record_it_writes() {
    let d = Due::new();
    let (q, waited) = d.awaiting();
    let mut items = Vec::new();
    for i in 0..25 {
        items.push(
            q.submit("t", json!({"i": i}))
                .idempotency_key(format!("k{i}")),
        );
        if i % 5 == 0 {
            items.push(q.submit("t", json!({"keyless": i})));
            items.push(q.submit("not a type!", json!(i)).idempotency_key("x"));
        }
    }
    let results = q.submit_many(items).await;
    assert_eq!(results.iter().filter(|r| r.is_err()).count(), 5);
    assert_eq!(
        waited.load(Ordering::SeqCst),
        0,
        "a PUT waited for its message"
    );
    let sizes: Vec<usize> = d.due.requests().iter().map(|r| r.messages.len()).collect();
    assert_eq!(sizes, [10, 10, 5]);
}

#[tokio::test]
async fn a_due_message_that_names_no_record_of_this_bucket_is_acknowledged_counted_and_not_read() {
    let w = World::new();
    let q = w.process();
    let body = |bucket: &str, key: &str| RecordDue::new(bucket, key).to_body();
    let hex = "ab".repeat(32);
    let messages: Vec<DueMessage> = [
        body("other", &format!("idempotency/t/{hex}.json")),
        body(BUCKET, "tasks/0/x.json"),
        body(BUCKET, "idempotency/t/short.json"),
        body(BUCKET, &format!("idempotency/.hidden/{hex}.json")),
        r#"{"source":"idempotent-submit","event":"record_written"}"#.to_owned(),
    ]
    .into_iter()
    .enumerate()
    .map(|(i, body)| DueMessage {
        id: i.to_string(),
        body,
    })
    .collect();
    let b = handle_messages(&q, BUCKET, &messages, false, None).await;
    assert_eq!((b.summary.unrecognized, b.summary.scanned), (5, 0));
    assert!(b.retry.is_empty(), "never retried");
    assert!(w.faulty.calls().is_empty());
    // And one that does name a record of this bucket is read.
    let m = DueMessage {
        id: "ok".into(),
        body: body(BUCKET, &format!("idempotency/t/{hex}.json")),
    };
    let b = handle_messages(&q, BUCKET, &[m], false, None).await;
    assert_eq!((b.summary.unrecognized, b.summary.scanned), (0, 1));
}
