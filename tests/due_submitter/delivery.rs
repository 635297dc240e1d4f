use super::*;

/// A submit that dies after its record, sent at 0.990 s past a second
/// with a record PUT that lands `flight` later; the sweeper's batch when its
/// message is handed over, at the very instant its delay ends.
async fn delivered_on_time(d: &Due, flight: Duration) -> (DueBatch, Vec<Queued>) {
    d.w.clock.advance(Duration::milliseconds(990));
    let slow = record_puts(
        d.w.bucket.clone(),
        BeforeRecordPut::Fly(d.w.clock.clone(), flight),
    );
    d.queue_over(CrashPoint::AfterRecord.in_front_of(slow))
        .submit("t", json!(1))
        .idempotency_key("k")
        .await
        .unwrap_err();
    let queued = d.due.queued();
    assert_eq!(queued.len(), 1);
    d.w.clock.set(queued[0].visible_at);
    d.drain_taken().await
}

/// The due message leaves with its record's PUT and SQS may take it before
/// S3 stamps the record; S3's time is known to a second. Delivered the
/// instant its delay ends, the record looks 599 s old by S3's earliest time
/// (its `LastModified` is the next second): finished at once, not handed
/// back (which would cost a second receive and GET, and a visibility
/// timeout of delay).
/// The same for a record PUT that took three seconds more than its message
/// (its retries), within the operation deadline: the message carries its
/// send time, and the PUT's lag is allowed for.
#[tokio::test]
async fn a_message_that_left_before_its_record_landed_finishes_it_at_its_first_delivery() {
    for lag in [Duration::milliseconds(20), Duration::seconds(3)] {
        let d = Due::new();
        let (b, _) = delivered_on_time(&d, lag).await;
        assert_eq!(
            (b.summary.finished, b.summary.early),
            (1, 0),
            "{lag}: {:?}",
            b.summary
        );
        assert!(b.retry.is_empty());
        assert_eq!(d.w.count("tasks/"), 1);
    }
}

/// The tolerance is bounded: a record that another claim wrote well after
/// the operation deadline of the message's own submit (here, a message
/// sent long before) is judged by its own age, handed back once while it
/// is young, and finished at the next delivery.
#[tokio::test]
async fn a_record_written_after_its_messages_operation_deadline_is_judged_by_its_own_age() {
    let d = Due::new();
    let sent = d.w.clock.now();
    d.w.clock.advance(Duration::seconds(40));
    d.w.queue_over(CrashPoint::AfterRecord.in_front_of(d.w.bucket.clone()))
        .submit("t", json!(1))
        .idempotency_key("k")
        .await
        .unwrap_err();
    let (rkey, _) = d.record();
    let m = DueMessage {
        id: "m".into(),
        body: RecordDue::new(BUCKET, rkey).sent_at(sent).to_body(),
    };
    d.w.clock
        .set(sent + common::settings().stale_creating_after);
    let b = handle_messages(&d.w.queue(), BUCKET, std::slice::from_ref(&m), false, None).await;
    assert_eq!((b.summary.finished, b.summary.early), (0, 1));
    assert_eq!(b.retry, ["m"]);
    d.w.clock.advance(Duration::seconds(720));
    let b = handle_messages(&d.w.queue(), BUCKET, &[m], false, None).await;
    assert_eq!((b.summary.finished, b.summary.early), (1, 0));
    assert_eq!(d.w.count("tasks/"), 1);
}

/// A submit that died before any PUT sent its message all the same: the
/// message finds no record and is handed back while the claim could still
/// land (the send time + the operation deadline + the late-write margin +
/// the 60 s a clock may be off), then acknowledged and counted. With the
/// queue's delay (600 s) and visibility timeout (720 s), two receives.
#[tokio::test]
async fn a_message_whose_submit_wrote_nothing_is_handed_back_until_its_claim_cannot_land() {
    let d = Due::new();
    let dies = idempotent_submit::store::FaultyStore::new(d.w.bucket.clone());
    dies.inject(
        Some(idempotent_submit::store::Op::PutCreate),
        "idempotency/",
        1,
        1,
        idempotent_submit::store::Fault::CrashBefore,
    );
    d.queue_over(dies)
        .submit("t", json!(1))
        .idempotency_key("k")
        .await
        .unwrap_err();
    assert_eq!(d.w.count("idempotency/"), 0);
    let queued = d.due.queued();
    assert_eq!(queued.len(), 1);
    let sent = queued[0].message.sent_at.unwrap();
    let queue = d.w.queue();
    let bound = queue.engine().claim_may_land(sent);
    assert_eq!(
        bound - sent,
        Duration::seconds(25) + Duration::minutes(15) + Duration::seconds(60)
    );
    let mut receives = 0;
    d.w.clock.set(queued[0].visible_at);
    let mut next = d.due.take_visible();
    let mut acknowledged = None;
    while let Some(m) = next.pop() {
        receives += 1;
        let msg = DueMessage {
            id: m.id.clone(),
            body: m.body.clone(),
        };
        let b = handle_messages(&queue, BUCKET, &[msg], false, None).await;
        if b.retry.is_empty() {
            acknowledged = Some((d.w.clock.now(), b.summary));
            break;
        }
        assert!(d.w.clock.now() < bound, "handed back past the bound");
        assert_eq!((b.summary.no_record_yet, b.summary.due_no_record), (1, 0));
        d.due.hand_back(m, Duration::seconds(720));
        d.w.clock.advance(Duration::seconds(720));
        next = d.due.take_visible();
    }
    let (at, summary) = acknowledged.expect("acknowledged in the end");
    assert!(at >= bound);
    assert_eq!((summary.no_record_yet, summary.due_no_record), (0, 1));
    assert_eq!(receives, 2);
    assert_eq!(d.w.count("tasks/"), 0, "nothing is written for it");
}

/// The bound itself: a second before it the claim may still land and the
/// message is handed back; at it (S3's earliest time) no claim can, and the
/// message is acknowledged at that delivery, not handed back once more.
#[tokio::test]
async fn a_message_whose_submit_wrote_nothing_is_acknowledged_at_the_very_second_its_claim_cannot_land()
 {
    let d = Due::new();
    let dies = idempotent_submit::store::FaultyStore::new(d.w.bucket.clone());
    let put = Some(idempotent_submit::store::Op::PutCreate);
    dies.inject(
        put,
        "idempotency/",
        1,
        1,
        idempotent_submit::store::Fault::CrashBefore,
    );
    let died = d.queue_over(dies);
    let submit = died.submit("t", json!(1)).idempotency_key("k");
    submit.await.unwrap_err();
    let queued = d.due.queued();
    let queue = d.w.queue();
    let bound = queue
        .engine()
        .claim_may_land(queued[0].message.sent_at.unwrap());
    let mut answers = Vec::new();
    for at in [bound - Duration::seconds(1), bound] {
        d.w.clock.set(at);
        let msg = DueMessage {
            id: queued[0].id.clone(),
            body: queued[0].body.clone(),
        };
        let b = handle_messages(&queue, BUCKET, &[msg], false, None).await;
        answers.push((
            b.retry.len(),
            b.summary.no_record_yet,
            b.summary.due_no_record,
        ));
    }
    assert_eq!(answers, [(1, 1, 0), (0, 0, 1)]);
}

/// The third window of the old order: a claim whose PUT lands after its
/// message was read. The message was handed back, not acknowledged, so its
/// next delivery finishes the record.
#[tokio::test]
async fn a_record_put_that_lands_after_its_message_was_read_is_finished_at_the_next_delivery() {
    for order in [DueOrder::BeforeClaim, DueOrder::WithClaim] {
        let d = Due::sending(order);
        let release = Arc::new(tokio::sync::Notify::new());
        let q = d.queue_over(record_puts(
            d.w.bucket.clone(),
            BeforeRecordPut::HoldThenDie(release.clone()),
        ));
        let submit =
            tokio::spawn(async move { q.submit("t", json!(1)).idempotency_key("k").await });
        while d.due.queued().is_empty() {
            tokio::task::yield_now().await;
        }
        let queued = d.due.queued();
        d.w.clock.set(queued[0].visible_at);
        let (b, taken) = d.drain_taken().await;
        assert_eq!(b.summary.no_record_yet, 1, "{order:?}: {:?}", b.summary);
        assert_eq!(b.retry, [taken[0].id.clone()]);
        // The PUT lands now, and its process dies.
        release.notify_one();
        assert!(submit.await.unwrap().is_err());
        assert_eq!((d.w.count("idempotency/"), d.w.count("tasks/")), (1, 0));
        d.due.hand_back(taken[0].clone(), Duration::seconds(720));
        d.w.clock.advance(Duration::seconds(720));
        let b = d.drain().await;
        assert_eq!((b.summary.finished, b.summary.errors), (1, 0), "{order:?}");
        assert_eq!((d.w.count("tasks/"), d.w.count("ready/")), (1, 1));
    }
}

#[tokio::test]
async fn a_replay_and_a_conflict_send_a_message_too_which_finds_nothing_missing() {
    let d = Due::new();
    let q = d.queue();
    let first = submit_k(&q).await;
    let again = submit_k(&q).await;
    assert!(again.replayed);
    let conflict = q
        .submit("t", json!({"n": 2}))
        .idempotency_key("k")
        .await
        .unwrap_err();
    assert!(matches!(conflict, SubmitError::Conflict { .. }));
    // Each sent before it knew the key was taken: one request each.
    assert_eq!(d.due.requests().len(), 3);
    d.w.clock.advance(common::settings().stale_creating_after);
    let faulty = d.w.process();
    let messages: Vec<DueMessage> = d
        .due
        .take_visible()
        .into_iter()
        .map(|m| DueMessage {
            id: m.id,
            body: m.body,
        })
        .collect();
    assert_eq!(messages.len(), 3);
    let b = handle_messages(&faulty, BUCKET, &messages, false, None).await;
    // One record, read once for the three; nothing missing, nothing written.
    assert_eq!((b.summary.scanned, b.summary.finished), (1, 0));
    let calls = d.w.faulty.calls();
    assert!(calls.iter().all(|c| !c.op.is_write()), "{calls:?}");
    assert_eq!(
        calls.len(),
        3,
        "GET record, GET task, HEAD marker: {calls:?}"
    );
    assert_eq!(first.task_id, again.task_id);
}
