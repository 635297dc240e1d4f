use super::*;

on_moto_and_seaweedfs! {
    a_key_submitted_through_buquet_first_then_us_is_one_task_and_its_record_replays,
    on_seaweedfs_a_key_submitted_through_buquet_first_then_us_is_one_task_and_its_record_replays (On)
        => theirs_first_then_ours();
    /// A reset writes a reset record (`expires_at` at the reset, `reset_at`):
    /// buquet 0.1's submit, which knows no `reset_at`, takes it for an expired
    /// record, claims over it and writes a new task; its worker runs the old
    /// task and the new one as any others.
    a_reset_key_reads_as_absent_to_buquet_whose_submit_makes_a_new_task_its_worker_runs,
    on_seaweedfs_a_reset_key_reads_as_absent_to_buquet_whose_submit_makes_a_new_task (On)
        => reset_then_theirs();
    a_key_whose_task_a_buquet_worker_failed_is_replayed_and_with_new_task_makes_a_new_task_buquet_completes,
    on_seaweedfs_a_key_whose_task_a_buquet_worker_failed_is_replayed_and_with_new_task_makes_a_new_task (On)
        => ended_key_reused(Ending::Failed);
    a_key_whose_task_buquet_cancelled_is_replayed_and_with_new_task_makes_a_new_task_buquet_completes,
    on_seaweedfs_a_key_whose_task_buquet_cancelled_is_replayed_and_with_new_task_makes_a_new_task (On)
        => ended_key_reused(Ending::Cancelled);
    a_key_submitted_through_us_first_then_buquet_is_one_task,
    on_seaweedfs_a_key_submitted_through_us_first_then_buquet_is_one_task (Off)
        => ours_first_then_theirs();
}

async fn theirs_first_then_ours(s: Shared) {
    let theirs = s.buquet(&[
        "submit",
        "charge_customer",
        r#"{"order":"ORD-1","cents":1999,"é":"ü"}"#,
        "charge-ORD-1",
    ]);
    // buquet's record has no `status`: a young one whose task is there is
    // answered with that task.
    let (status, ours) = s
        .post(json!({"task_type": "charge_customer", "input": {"é": "ü", "cents": 1999, "order": "ORD-1"}, "idempotency_key": "charge-ORD-1"}))
        .await;
    assert_eq!(status, 200, "{ours}");
    assert_eq!(ours["task_id"], theirs["id"]);
    assert_eq!(ours["replayed"], true);
    assert_eq!(ours["idempotency"]["scope"], "charge_customer");
    // Another input under their key is a conflict: the input hashes agree.
    let (status, conflict) = s
        .post(json!({"task_type": "charge_customer", "input": {"order": "ORD-1", "cents": 2}, "idempotency_key": "charge-ORD-1"}))
        .await;
    assert_eq!(
        (status, conflict["code"].as_str()),
        (422, Some("idempotency_conflict"))
    );
}

async fn reset_then_theirs(s: Shared) {
    let (status, ours) = s
        .post(json!({"task_type": "reset_me", "input": {"n": 1}, "idempotency_key": "r-1"}))
        .await;
    assert_eq!(status, 201, "{ours}");
    let old: uuid::Uuid = ours["task_id"].as_str().unwrap().parse().unwrap();
    let q = Queue::new(s.store.clone(), Settings::default());
    // At once: the task is there, so nothing may still write it.
    assert_eq!(
        q.reset_key("reset_me", "r-1", None).await.unwrap(),
        idempotent_submit::Reset::Done { old_task_id: old }
    );
    let records: Vec<String> = common::all_keys(&s.store)
        .await
        .into_iter()
        .filter(|k| k.starts_with("idempotency/"))
        .collect();
    assert_eq!(
        records.len(),
        1,
        "the reset record stands at the record's path"
    );
    let theirs = s.buquet(&["submit", "reset_me", r#"{"n":1}"#, "r-1"]);
    let new = theirs["id"].as_str().unwrap();
    assert_ne!(new, old.to_string(), "buquet's submit made a new task");
    // buquet's record replaced the reset record: our lookup sees its task.
    let view = q
        .lookup_key("reset_me", "r-1", None)
        .await
        .unwrap()
        .expect("buquet's record is live");
    assert_eq!(view.task_id.to_string(), new);
    let run = s.buquet(&["work", "reset_me", "2"]);
    assert_eq!(run["processed"], 2, "the old task and the new one");
    for id in [old.to_string(), new.to_owned()] {
        assert_eq!(s.buquet(&["get", &id])["status"], "completed");
    }
}

/// How a test ends its key's first task for good, through buquet.
#[derive(Clone, Copy)]
enum Ending {
    /// buquet's worker runs it and its handler raises buquet's
    /// `PermanentError`: `failed` at once, whatever its `max_retries`.
    Failed,
    /// buquet's `cancel`, while it is pending.
    Cancelled,
}

/// buquet ends our task `old` as `ending` says (its worker fails it for
/// good, or its client cancels it); the status it then has.
fn end_by_buquet(s: &Shared, ending: Ending, old: &str) -> &'static str {
    let (ended, why) = match ending {
        Ending::Failed => {
            let run = s.buquet(&["fail", "charge_card", "1"]);
            assert_eq!(run["processed"], 1, "{run}");
            ("failed", "PermanentError: declined")
        }
        Ending::Cancelled => {
            let out = s.buquet(&["cancel", old, "order withdrawn"]);
            assert_eq!(out["status"], "cancelled", "{out}");
            ("cancelled", "order withdrawn")
        }
    };
    let task = s.buquet(&["get", old]);
    assert_eq!(task["status"], ended, "{task}");
    assert!(task["last_error"].as_str().unwrap().contains(why), "{task}");
    let task = s.buquet(&["get", old]);
    assert_eq!(task["status"], ended, "{task}");
    assert!(task["last_error"].as_str().unwrap().contains(why), "{task}");
    ended
}

/// buquet's own submit of the key reads our record (its record type has
/// no `replaces_task_id` and ignores it): the new task, and still a
/// conflict for another input. It writes nothing.
async fn theirs_reads_ours(s: &Shared, input: &Value, new: &str, path: &str, record: &Value) {
    let theirs = s.buquet(&["submit", "charge_card", &input.to_string(), "pay-9"]);
    assert_eq!(
        (theirs["id"].as_str(), theirs["status"].as_str()),
        (Some(new), Some("completed"))
    );
    let refused = s.buquet_skipping_check(
        &[
            "submit",
            "charge_card",
            r#"{"order":"ORD-9","cents":1}"#,
            "pay-9",
        ],
        false,
    );
    assert!(!refused.status.success());
    let why = String::from_utf8_lossy(&refused.stderr);
    assert!(why.contains("Idempotency conflict"), "{why}");
    assert_eq!(&s.object_json(path).await, record);
    let keys = common::all_keys(&s.store).await;
    assert_eq!(keys.iter().filter(|k| k.starts_with("tasks/")).count(), 2);
}

/// A keyed task of ours ended by buquet (`ending`): replayed as it ended,
/// then, with `if_task_failed: new_task`, its key claimed over the record
/// for a new task, which buquet's worker completes while the old task stays
/// as buquet left it; buquet's own submit of the key then reads our record
/// (with its `replaces_task_id`) as the new task's.
async fn ended_key_reused(s: Shared, ending: Ending) {
    let input = json!({"order": "ORD-9", "cents": 700});
    let submit = json!({"task_type": "charge_card", "input": input, "idempotency_key": "pay-9"});
    let (status, first) = s.post(submit.clone()).await;
    assert_eq!(status, 201, "{first}");
    let old = first["task_id"].as_str().unwrap().to_owned();
    let ended = end_by_buquet(&s, ending, &old);
    let old_task = s.task_json(&old).await;

    // By default the key replays its task, as it ended.
    let (status, replay) = s.post(submit.clone()).await;
    assert_eq!(status, 200, "{replay}");
    assert_eq!(
        (replay["task_id"].as_str(), replay["status"].as_str()),
        (Some(old.as_str()), Some(ended))
    );
    assert_eq!(replay["replayed"], true);
    assert!(replay.get("replaces_task_id").is_none(), "{replay}");

    // With new_task: a new task, naming the one it replaces, in the key's
    // one record.
    let mut reuse = submit.clone();
    reuse["if_task_failed"] = json!("new_task");
    let (status, created) = s.post(reuse.clone()).await;
    assert_eq!(status, 201, "{created}");
    let new = created["task_id"].as_str().unwrap().to_owned();
    assert_ne!(new, old);
    assert_eq!(created["replaces_task_id"], json!(old), "{created}");
    assert_eq!(
        (created["replayed"].as_bool(), created["status"].as_str()),
        (Some(false), Some("pending"))
    );
    let records: Vec<String> = common::all_keys(&s.store)
        .await
        .into_iter()
        .filter(|k| k.starts_with("idempotency/"))
        .collect();
    assert_eq!(records.len(), 1, "{records:?}");
    let record = s.object_json(&records[0]).await;
    assert_eq!(
        (
            record["task_id"].as_str(),
            record["replaces_task_id"].as_str()
        ),
        (Some(new.as_str()), Some(old.as_str())),
        "{record}"
    );

    // buquet's worker claims and completes the new task, and finds nothing
    // else to run; the old task stays as buquet left it.
    let run = s.buquet(&["work", "charge_card", "1"]);
    assert_eq!(run["processed"], 1, "{run}");
    let task = s.buquet(&["get", &new]);
    assert_eq!(task["status"], "completed", "{task}");
    assert_eq!(task["output"]["handled"], input);
    let idle = s.buquet(&["idle", "charge_card", "1"]);
    assert_eq!(idle["processed"], 0, "{idle}");
    assert_eq!(s.buquet(&["get", &old])["status"], ended);
    assert_eq!(
        s.task_json(&old).await,
        old_task,
        "the old task was rewritten"
    );

    // Every replay now answers the new task, and still names the old one.
    for body in [submit, reuse] {
        let (status, again) = s.post(body).await;
        assert_eq!(status, 200, "{again}");
        assert_eq!(
            (again["task_id"].as_str(), again["status"].as_str()),
            (Some(new.as_str()), Some("completed"))
        );
        assert_eq!(again["replaces_task_id"], json!(old), "{again}");
    }

    theirs_reads_ours(&s, &input, &new, &records[0], &record).await;
}

async fn ours_first_then_theirs(s: Shared) {
    let (status, ours) = s
        .post(json!({"task_type": "send_email", "input": {"to": "a@example.com"}, "idempotency_key": "mail-1", "idempotency_scope": "queue"}))
        .await;
    assert_eq!(status, 201);
    let theirs = s.buquet(&[
        "submit",
        "send_email",
        r#"{"to":"a@example.com"}"#,
        "mail-1",
        "queue",
    ]);
    assert_eq!(theirs["id"], ours["task_id"]);
    let keys = common::all_keys(&s.store).await;
    assert_eq!(keys.iter().filter(|k| k.starts_with("tasks/")).count(), 1);
}
