//! A key's record looked up and reset on purpose (`Queue::lookup_key`,
//! `Queue::reset_key`; docs/protocol.md, "Looking up and resetting a key"),
//! in memory and with faults. The HTTP routes are tested in
//! `submit_handler.rs`, `idem key --reset` on moto in `cli.rs`.

mod common;

use std::sync::{Arc, Mutex};

use chrono::Duration;
use common::World;
use idempotent_submit::protocol::{KeyView, Reset};
use idempotent_submit::store::{Fault, Op, Store};
use idempotent_submit::{Tenant, ValidationError};
use serde_json::json;

fn tenant(p: &str) -> Tenant {
    Tenant::from_principal(p).unwrap()
}

#[tokio::test]
async fn a_lookup_shows_the_keys_task_its_phase_and_status_and_nothing_the_submit_would_write() {
    let w = World::new();
    let q = w.queue();
    let s = q
        .submit("charge", json!({"card": "4242"}))
        .idempotency_key("k")
        .await
        .unwrap();
    let p = w.process();
    let view: KeyView = p.lookup_key("charge", "k", None).await.unwrap().unwrap();
    assert_eq!(view.task_id, s.task_id);
    assert_eq!(
        (view.phase, view.task_status.as_str()),
        ("in_flight", "pending")
    );
    assert_eq!(view.expires_at, s.idempotency.as_ref().unwrap().expires_at);
    let shown = serde_json::to_value(&view).unwrap();
    let mut fields: Vec<&str> = shown
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.as_str())
        .collect();
    fields.sort_unstable();
    assert_eq!(
        fields,
        [
            "created_at",
            "expires_at",
            "key",
            "key_hash",
            "phase",
            "scope",
            "task_id",
            "task_status",
            "task_type"
        ]
    );
    assert!(!shown.to_string().contains("4242"), "{shown}");
    // The record's GET, then its task's: two requests in two round trips.
    let ops: Vec<Op> = w.faulty.calls().iter().map(|c| c.op).collect();
    assert_eq!(ops, [Op::Get, Op::Get]);
    assert_eq!(w.faulty.round_trips(), 2);
}

#[tokio::test]
async fn no_record_an_expired_record_and_a_bad_scope_or_key_are_answered_as_the_submit_would() {
    let w = World::new();
    let q = w.queue();
    assert_eq!(q.lookup_key("t", "k", None).await.unwrap(), None);
    assert_eq!(q.reset_key("t", "k", None).await.unwrap(), Reset::NotFound);
    q.submit("t", json!(1))
        .idempotency_key("k")
        .idempotency_ttl(Duration::hours(1))
        .await
        .unwrap();
    w.clock.advance(Duration::hours(1));
    assert_eq!(q.lookup_key("t", "k", None).await.unwrap(), None);
    assert_eq!(q.reset_key("t", "k", None).await.unwrap(), Reset::NotFound);
    // Expired is absent: the reset deleted nothing.
    assert_eq!(w.count("idempotency/"), 1);
    for (scope, key, field) in [
        (".t", "k", "scope"),
        ("a/b", "k", "scope"),
        ("t", "", "idempotency_key"),
        ("t", "a\u{7}b", "idempotency_key"),
    ] {
        let e = q.lookup_key(scope, key, None).await.unwrap_err();
        assert!(
            matches!(e, idempotent_submit::SubmitError::Invalid(ValidationError::Field { field: f, .. }) if f == field),
            "{scope:?} {key:?}: {e}"
        );
    }
}

#[tokio::test]
async fn a_reset_frees_the_key_for_a_new_task_and_leaves_the_old_task_as_it_is() {
    let w = World::new();
    let q = w.queue();
    let first = q.submit("t", json!(1)).idempotency_key("k").await.unwrap();
    w.faulty.reset_log();
    let reset = w.process().reset_key("t", "k", None).await.unwrap();
    assert_eq!(
        reset,
        Reset::Done {
            old_task_id: first.task_id
        }
    );
    // The record's GET, its task's GET, the DELETE If-Match: three round trips.
    let ops: Vec<Op> = w.faulty.calls().iter().map(|c| c.op).collect();
    assert_eq!(ops, [Op::Get, Op::Get, Op::Delete]);
    assert_eq!(w.count("idempotency/"), 0);
    assert!(w.bucket.get(&first.task_key).await.is_ok());
    // The next submit of the key, even with another input, is new.
    let second = q.submit("t", json!(2)).idempotency_key("k").await.unwrap();
    assert!(!second.replayed);
    assert_ne!(second.task_id, first.task_id);
    assert_eq!(w.count("tasks/"), 2);
    assert!(w.bucket.get(&first.task_key).await.is_ok());
}

#[tokio::test]
async fn a_reset_is_refused_while_a_task_may_still_be_written_for_the_record_and_deletes_nothing() {
    let w = World::new();
    // The submit died right after its record: its task is not there, and a
    // replay or the sweeper may still write it.
    w.submit_dying_at(
        "k",
        json!(1),
        Op::PutCreate,
        "idempotency/",
        Fault::CrashAfter,
    )
    .await;
    let q = w.queue();
    let Reset::InProgress {
        task_id,
        retry_after,
    } = q.reset_key("t", "k", None).await.unwrap()
    else {
        panic!("a reset went ahead while the task could still be written");
    };
    assert!(retry_after >= std::time::Duration::from_secs(1));
    assert_eq!(w.count("idempotency/"), 1);
    let view = q.lookup_key("t", "k", None).await.unwrap().unwrap();
    assert_eq!(view.task_id, task_id);
    assert_eq!(
        (view.phase, view.task_status.as_str()),
        ("in_flight", "missing")
    );
    // Once a finisher wrote the task, nobody can write it again: the reset
    // goes ahead.
    let replay = q.submit("t", json!(1)).idempotency_key("k").await.unwrap();
    assert_eq!(replay.task_id, task_id);
    assert_eq!(
        q.reset_key("t", "k", None).await.unwrap(),
        Reset::Done {
            old_task_id: task_id
        }
    );
}

#[tokio::test]
async fn a_record_that_nobody_finished_can_be_reset_once_it_is_settled_and_its_task_never_comes() {
    let w = World::new();
    w.submit_dying_at(
        "k",
        json!(1),
        Op::PutCreate,
        "idempotency/",
        Fault::CrashAfter,
    )
    .await;
    let settings = common::settings();
    let q = w.queue();
    // Until no late write can land, the reset waits ...
    w.clock
        .advance(settings.finish_window + settings.late_write_margin - Duration::seconds(1));
    let Reset::InProgress { retry_after, .. } = q.reset_key("t", "k", None).await.unwrap() else {
        panic!("a reset went ahead before late writes stopped");
    };
    assert_eq!(retry_after, std::time::Duration::from_secs(1));
    // ... then goes ahead, and no task is ever written for the old record.
    w.clock.advance(Duration::seconds(1));
    let view = q.lookup_key("t", "k", None).await.unwrap().unwrap();
    assert_eq!(
        (view.phase, view.task_status.as_str()),
        ("settled", "missing")
    );
    let Reset::Done { old_task_id } = q.reset_key("t", "k", None).await.unwrap() else {
        panic!("a settled record was not reset");
    };
    assert_eq!(old_task_id, view.task_id);
    let summary = q.engine().sweep(&Default::default()).await.unwrap();
    assert_eq!(summary.finished, 0);
    let next = q.submit("t", json!(1)).idempotency_key("k").await.unwrap();
    assert_ne!(next.task_id, old_task_id);
    assert_eq!(w.count("tasks/"), 1);
}

#[tokio::test]
async fn a_reset_that_meets_a_record_replaced_since_its_read_deletes_nothing() {
    let w = World::new();
    let q = w.queue();
    let first = q.submit("t", json!(1)).idempotency_key("k").await.unwrap();
    // Between the reset's read and its DELETE, another reset and a new
    // submit of the key replace the record.
    let (clock, bucket) = (w.clock.clone(), w.bucket.clone());
    let raced = Arc::new(Mutex::new(false));
    let hook = {
        let raced = raced.clone();
        move |op: Op, key: &str| {
            if op == Op::Delete && key.starts_with("idempotency/") && !*raced.lock().unwrap() {
                *raced.lock().unwrap() = true;
                let other = World::over(clock.clone(), bucket.clone()).queue();
                meanwhile(async move {
                    other.reset_key("t", "k", None).await.unwrap();
                    other
                        .submit("t", json!(2))
                        .idempotency_key("k")
                        .await
                        .unwrap();
                });
            }
            None
        }
    };
    let racing = w.queue_over(common::Intercept {
        inner: w.bucket.clone(),
        hook,
    });
    assert_eq!(
        racing.reset_key("t", "k", None).await.unwrap(),
        Reset::Changed
    );
    let now = q.lookup_key("t", "k", None).await.unwrap().unwrap();
    assert_ne!(now.task_id, first.task_id);
    assert_eq!(w.count("tasks/"), 2);
}

/// Runs `f` on a runtime of its own, on another thread, to its end: a
/// store hook (which is not async) makes other processes act at that call.
fn meanwhile<F: std::future::Future<Output = ()> + Send>(f: F) {
    std::thread::scope(|s| {
        s.spawn(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(f)
        });
    });
}

#[tokio::test]
async fn a_reset_racing_a_replay_and_the_sweeper_leaves_one_task_for_the_old_record_and_frees_the_key()
 {
    let w = World::new();
    let settings = common::settings();
    // The submit died at its task's write: the sweeper and a replay both
    // come to finish it (its marker may be missing).
    w.submit_dying_at("k", json!(1), Op::PutCreate, "tasks/", Fault::CrashAfter)
        .await;
    w.clock
        .advance(settings.stale_creating_after + Duration::seconds(1));
    let record = w
        .bucket
        .keys()
        .into_iter()
        .find(|k| k.starts_with("idempotency/"))
        .unwrap();
    let (clock, bucket) = (w.clock.clone(), w.bucket.clone());
    let replayed = Arc::new(Mutex::new(None));
    let hook = {
        let replayed = replayed.clone();
        move |op: Op, key: &str| {
            if op == Op::Delete
                && key.starts_with("idempotency/")
                && replayed.lock().unwrap().is_none()
            {
                let other = World::over(clock.clone(), bucket.clone()).queue();
                let record = record.clone();
                let replayed = replayed.clone();
                meanwhile(async move {
                    let (replay, swept) = tokio::join!(
                        other.submit("t", json!(1)).idempotency_key("k").send(),
                        other.engine().sweep_record(&record, false, None),
                    );
                    *replayed.lock().unwrap() = Some((replay.unwrap(), swept));
                });
            }
            None
        }
    };
    let racing = w.queue_over(common::Intercept {
        inner: w.bucket.clone(),
        hook,
    });
    let Reset::Done { old_task_id } = racing.reset_key("t", "k", None).await.unwrap() else {
        panic!("the reset did not go ahead");
    };
    let (replay, _) = replayed.lock().unwrap().take().unwrap();
    assert_eq!(
        replay.task_id, old_task_id,
        "the replay answered the old task"
    );
    // One task for the old record, its marker written by whoever came
    // first, and the key free: the next submit is new.
    assert_eq!(w.count("tasks/"), 1);
    assert_eq!(w.count("ready/"), 1);
    let next = w
        .queue()
        .submit("t", json!(1))
        .idempotency_key("k")
        .await
        .unwrap();
    assert!(!next.replayed && next.task_id != old_task_id);
    // Nothing more is ever written for the old record: a pass finds nothing
    // to finish, and the bucket holds the two tasks.
    w.clock.advance(settings.finish_window);
    let summary = w.queue().engine().sweep(&Default::default()).await.unwrap();
    assert_eq!(summary.finished, 0);
    assert_eq!(w.count("tasks/"), 2);
}

#[tokio::test]
async fn a_tenant_can_neither_see_nor_reset_another_tenants_key() {
    let w = World::new();
    let q = w.queue();
    let a = tenant("iam:arn:aws:iam::1:user/a");
    let b = tenant("iam:arn:aws:iam::1:user/b");
    let s = q
        .submit("t", json!(1))
        .idempotency_key("k")
        .tenant("iam:arn:aws:iam::1:user/a")
        .await
        .unwrap();
    assert_eq!(q.lookup_key("t", "k", Some(&b)).await.unwrap(), None);
    assert_eq!(q.lookup_key("t", "k", None).await.unwrap(), None);
    assert_eq!(
        q.reset_key("t", "k", Some(&b)).await.unwrap(),
        Reset::NotFound
    );
    assert_eq!(q.reset_key("t", "k", None).await.unwrap(), Reset::NotFound);
    let mine = q.lookup_key("t", "k", Some(&a)).await.unwrap().unwrap();
    assert_eq!(mine.task_id, s.task_id);
    assert!(!serde_json::to_string(&mine).unwrap().contains(&a.id()));
}

#[tokio::test]
async fn keys_with_slashes_percent_signs_spaces_and_non_ascii_are_looked_up_and_reset_as_submitted()
{
    let w = World::new();
    let q = w.queue();
    for key in ["a/b", "100%25", "two words", "café-☕", "%2F"] {
        let s = q
            .submit("t", json!(key))
            .idempotency_key(key)
            .await
            .unwrap();
        let view = q.lookup_key("t", key, None).await.unwrap().unwrap();
        assert_eq!((view.key.as_str(), view.task_id), (key, s.task_id));
        assert!(matches!(
            q.reset_key("t", key, None).await.unwrap(),
            Reset::Done { .. }
        ));
    }
    assert_eq!(w.count("idempotency/"), 0);
}

// ---- against moto: S3's own DELETE If-Match, and `idem key --reset` ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_s3_a_reset_lets_the_next_submit_make_a_new_task_while_the_old_one_stays() {
    for store in [
        common::moto_store().await,
        common::moto_store_versioned().await,
    ] {
        let bucket = store.bucket().to_owned();
        let q = idempotent_submit::Queue::new(store.clone(), common::settings());
        let first = q.submit("t", json!(1)).idempotency_key("k").await.unwrap();
        let Reset::Done { old_task_id } = q.reset_key("t", "k", None).await.unwrap() else {
            panic!("{bucket}: the reset did not go ahead");
        };
        assert_eq!(old_task_id, first.task_id);
        assert_eq!(q.lookup_key("t", "k", None).await.unwrap(), None);
        let second = q.submit("t", json!(2)).idempotency_key("k").await.unwrap();
        assert!(!second.replayed && second.task_id != first.task_id);
        assert!(
            store.get(&first.task_key).await.is_ok(),
            "{bucket}: the old task stays"
        );
        let view = q.lookup_key("t", "k", None).await.unwrap().unwrap();
        assert_eq!(view.task_id, second.task_id);
        assert_eq!(
            q.reset_key("t", "nope", None).await.unwrap(),
            Reset::NotFound
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idem_key_reset_exits_0_when_reset_4_when_not_found_and_1_while_in_progress() {
    let store = common::moto_store().await;
    let bucket = store.bucket().to_owned();
    let q = idempotent_submit::Queue::new(store.clone(), common::settings());
    let done = q
        .submit("t", json!(1))
        .idempotency_key("done")
        .await
        .unwrap();
    // A submit that died right after its record: in flight, no task yet.
    let dying = common::world::dying_at(
        store.clone(),
        Op::PutCreate,
        "idempotency/",
        Fault::CrashAfter,
    );
    idempotent_submit::Queue::new(dying, common::settings())
        .submit("t", json!(1))
        .idempotency_key("dying")
        .await
        .unwrap_err();
    let reset = |key: &'static str| {
        let bucket = bucket.clone();
        async move {
            common::idem(
                &bucket,
                &[],
                &["key", "--scope", "t", "--key", key, "--reset"],
            )
            .await
        }
    };
    let (code, out) = reset("done").await;
    assert_eq!(code, 0, "{out}");
    assert_eq!(out["old_task_id"], done.task_id.to_string());
    let (code, out) = reset("done").await;
    assert_eq!(
        (code, out["error"].as_str()),
        (4, Some("not_found")),
        "{out}"
    );
    let (code, out) = reset("dying").await;
    assert_eq!(
        (code, out["error"].as_str()),
        (1, Some("submit_in_progress")),
        "{out}"
    );
    assert!(out["retry_after_seconds"].as_u64().unwrap() >= 1, "{out}");
    assert!(q.lookup_key("t", "dying", None).await.unwrap().is_some());
}
