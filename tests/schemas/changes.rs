use super::*;
use idempotent_submit::Submitted;

/// A submit of `send_email` with `input`, keyed `key`.
async fn mail(q: &Queue, input: Value, key: &str) -> Result<Submitted, SubmitError> {
    q.submit("send_email", input).idempotency_key(key).await
}

#[tokio::test]
async fn a_retry_of_a_key_accepted_before_the_schema_changed_replays_its_task() {
    let b = Bed::new(on());
    let first = mail(&b.queue, json!({"to": "a@b.c"}), "mail-1")
        .await
        .unwrap();
    assert!(first.created());
    // The schema arrives, and refuses that input; a cold process sees it.
    b.publish("send_email", document(Some(email_schema()), None))
        .await;
    let p = b.restart(on());
    let before = b.bucket.snapshot();
    let again = mail(&p.queue, json!({"to": "a@b.c"}), "mail-1")
        .await
        .unwrap();
    assert_eq!((again.task_id, again.replayed), (first.task_id, true));
    assert_eq!(b.bucket.snapshot(), before, "nothing written");
    let ops: Vec<(Op, String)> = p
        .faulty
        .calls()
        .into_iter()
        .map(|c| (c.op, c.key.split('/').next().unwrap().to_owned()))
        .collect();
    assert_eq!(
        ops[..2],
        [
            (Op::Get, "schemas".to_owned()),
            (Op::Get, "idempotency".to_owned())
        ],
        "the refusal's one extra request is the record's GET: {ops:?}"
    );
    assert!(
        !ops.iter().any(|(op, _)| op.is_write()),
        "a replay of a finished submit writes nothing: {ops:?}"
    );
    // The same key with another input that fails too: the protocol's
    // answer, a conflict naming the key's task.
    let e = mail(&p.queue, json!({"to": 1}), "mail-1")
        .await
        .unwrap_err();
    assert!(
        matches!(e, SubmitError::Conflict { task_id, .. } if task_id == first.task_id),
        "{e:?}"
    );
    // A new key with the refused input: 400, after one GET of its record,
    // and nothing written.
    p.faulty.reset_log();
    let e = mail(&p.queue, json!({"to": "a@b.c"}), "mail-2")
        .await
        .unwrap_err();
    refusal(e);
    let calls = p.faulty.calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0].op, Op::Get);
    assert!(calls[0].key.starts_with("idempotency/send_email/"));
    assert_eq!(calls[0].error, Some(StoreError::NotFound));
    assert_eq!(b.bucket.snapshot(), before);
}

#[tokio::test]
async fn an_interrupted_submit_accepted_before_the_schema_changed_is_finished_by_its_retry() {
    let w = common::World::new();
    // The first submit dies after its record: no task yet.
    w.submit_dying_at(
        "k",
        json!({"n": "one"}),
        Op::PutCreate,
        "tasks/",
        Fault::CrashBefore,
    )
    .await;
    assert!(w.bucket.keys().iter().all(|k| !k.starts_with("tasks/")));
    w.bucket
        .put(
            "schemas/t.json",
            document(
                Some(json!({"properties": {"n": {"type": "integer"}}})),
                None,
            ),
            PutMode::Overwrite,
        )
        .await
        .unwrap();
    let q = Queue::with_clock(w.bucket.clone(), Arc::new(w.clock.clone()), on());
    let s = q
        .submit("t", json!({"n": "one"}))
        .idempotency_key("k")
        .await
        .unwrap();
    assert!(
        s.recovered,
        "the record's own task, written from pending_task"
    );
    assert_eq!(
        w.bucket
            .keys()
            .iter()
            .filter(|k| k.starts_with("tasks/"))
            .count(),
        1
    );
}

#[tokio::test]
async fn an_expired_record_does_not_let_a_refused_input_through() {
    let b = Bed::new(on());
    b.queue
        .submit("t", json!("old"))
        .idempotency_key("k")
        .idempotency_ttl(chrono::Duration::hours(1))
        .await
        .unwrap();
    b.publish("t", document(Some(json!({"type": "integer"})), None))
        .await;
    b.clock.advance(chrono::Duration::hours(2));
    let before = b.bucket.snapshot();
    let e = b
        .queue
        .submit("t", json!("old"))
        .idempotency_key("k")
        .await
        .unwrap_err();
    refusal(e);
    assert_eq!(b.bucket.snapshot(), before);
}

#[tokio::test]
async fn a_schema_that_cannot_be_read_fails_the_submit_as_storage_does_unless_a_copy_is_cached() {
    let b = Bed::new(on());
    b.publish("t", document(Some(json!({"type": "object"})), None))
        .await;
    b.faulty.inject(
        Some(Op::Get),
        "schemas/",
        1,
        100,
        common::unavailable("503"),
    );
    let e = b.send("t", json!({})).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e:?}");
    assert!(b.written().is_empty(), "nothing written");
    b.faulty.heal();
    assert_eq!(b.send("t", json!({})).await, Ok(true));
    // Cached; its revalidation fails: the cached copy goes on checking.
    b.faulty.inject(
        Some(Op::Get),
        "schemas/",
        1,
        100,
        Fault::Fail(StoreError::Fatal("403".into())),
    );
    b.clock.advance(chrono::Duration::seconds(60));
    assert!(b.send("t", json!([])).await.is_err());
    assert_eq!(b.send("t", json!({})).await, Ok(true));
}

#[tokio::test]
async fn the_list_is_bounded_and_so_is_each_entry() {
    let b = Bed::new(on());
    let long = "k".repeat(400);
    b.publish(
        "t",
        document(
            Some(json!({
                "type": "object",
                "properties": {"items": {"items": {"type": "integer"}}},
                "additionalProperties": {"type": "integer"},
            })),
            None,
        ),
    )
    .await;
    let items: Vec<Value> = (0..50).map(|i| json!(format!("s{i}"))).collect();
    let (_, errors, omitted) = refusal(
        b.send("t", json!({"items": items, long.clone(): "x"}))
            .await
            .unwrap_err(),
    );
    assert_eq!((errors.len(), omitted), (20, 31));
    for e in &errors {
        assert!(e.pointer.chars().count() <= 256, "{e:?}");
        assert!(e.detail.chars().count() <= 200, "{e:?}");
    }
    // The long one may be among those omitted; on its own it is cut.
    let (_, alone, _) = refusal(b.send("t", json!({long: "x"})).await.unwrap_err());
    assert_eq!(alone[0].pointer.chars().count(), 256);
    assert!(alone[0].pointer.ends_with('…'));
    assert!(alone[0].pointer.starts_with("/kkk"));
}
