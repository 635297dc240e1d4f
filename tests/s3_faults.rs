//! Faults through the real S3 client: the SDK talks to moto through a proxy
//! that fails 20% of requests (503 SlowDown, 500, lost answers after the
//! write landed, connection resets, timeouts, 409 ConditionalRequestConflict),
//! then the sweeper's record events go through it at 50%. No duplicate task,
//! no lost acknowledged task, every error retryable; most submits still
//! acknowledged; every kind of fault, and a lost answer on each kind of
//! conditional write, shown to have happened; then a heal phase through the
//! same proxy in which every key answers, and every record has its task and
//! its marker, written once.

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use common::chaos_proxy::{ChaosProxy, Counts, KINDS};
use common::clocks::Ahead;
use idempotent_submit::protocol::{RecordOutcome, RecordStatus};
use idempotent_submit::store::{ETag, PutMode, S3Store, Store};
use idempotent_submit::{Queue, RetryPolicy, Settings, SubmitError};
use serde_json::json;

/// What the submits were answered: each key's task ids, and the errors.
#[derive(Default)]
struct Answers {
    acknowledged: HashMap<usize, HashSet<uuid::Uuid>>,
    errors: usize,
    error_kinds: HashMap<String, usize>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fifth_of_requests_failing_loses_and_doubles_nothing() {
    let direct = common::moto_store().await;
    let proxy = ChaosProxy::start(&common::moto_endpoint(), 200, 42).await;
    let settings = Settings {
        retry: RetryPolicy {
            max_attempts: 6,
            base_delay: Duration::from_millis(5),
            max_delay: Duration::from_millis(50),
            // Under the proxy's 3 s hold, so that holds become timeouts.
            attempt_timeout: Duration::from_millis(2500),
        },
        ..Settings::default()
    };
    let through_proxy = S3Store::for_endpoint(&proxy.endpoint, direct.bucket());
    let queue = Arc::new(Queue::new(through_proxy.clone(), settings.clone()));
    let answers = submit_twice_through_faults(queue).await;
    let (faults, forwarded) = (
        proxy.counts.faults.load(SeqCst),
        proxy.counts.forwarded.load(SeqCst),
    );
    let (errors, acknowledged) = (answers.errors, &answers.acknowledged);
    let acked: usize = 180 - errors;
    eprintln!(
        "chaos: {faults} faults injected, {forwarded} requests forwarded, {acked} of 180 submits acknowledged, {errors} failed retryably"
    );
    // Faults that fail most submits would prove nothing about answers.
    assert!(
        acked >= 120,
        "only {acked} of 180 submits were acknowledged; errors: {:?}",
        answers.error_kinds
    );
    assert!(
        acknowledged.len() >= 25,
        "keys acknowledged: {}",
        acknowledged.len()
    );
    // Every acknowledged submit of a key named one task.
    for (k, ids) in acknowledged {
        assert_eq!(ids.len(), 1, "key {k} was answered with {ids:?}");
    }

    // The sweeper's events, through the proxy at 50%: each message comes
    // back until it is handled, as the due queue redelivers it.
    proxy.set_rate(500);
    let sweeper = Queue::with_clock(
        through_proxy.clone(),
        Arc::new(Ahead(Settings::default().stale_creating_after)),
        settings.clone(),
    );
    let records: Vec<String> = common::all_keys(&direct)
        .await
        .into_iter()
        .filter(|k| k.starts_with("idempotency/"))
        .collect();
    let (incomplete, written) = what_the_submits_left(&direct, &records).await;
    let expired = expired_records(&direct, &records[0]).await;
    // Besides the random ones, the first three If-Match deletes land and
    // lose their answer.
    proxy.lose_update_answers(3);
    let sweeps = records.iter().chain(&expired).map(|key| {
        let (was_incomplete, is_expired) = (incomplete.contains(key), expired.contains(key));
        sweep_until_handled(&sweeper, key, was_incomplete, is_expired)
    });
    let redeliveries: u32 = futures::future::join_all(sweeps).await.into_iter().sum();
    eprintln!("chaos: {redeliveries} record events came back before they were handled");
    every_kind_of_fault_happened(&proxy.counts);

    every_key_answers_once_healed(&proxy, &through_proxy, acknowledged).await;
    one_task_and_marker_per_key(&direct, &records, &written, &expired).await;
}

/// Healed, through the same proxy: no fault any more, every key answers,
/// each with the task it was acknowledged with.
async fn every_key_answers_once_healed(
    proxy: &ChaosProxy,
    through_proxy: &S3Store,
    acknowledged: &HashMap<usize, HashSet<uuid::Uuid>>,
) {
    proxy.heal();
    let c = &proxy.counts;
    let faults_before = c.faults.load(SeqCst);
    let forwarded_before = c.forwarded.load(SeqCst);
    let healthy = Queue::new(through_proxy.clone(), Settings::default());
    for k in 0..30 {
        let s = healthy
            .submit("chaos", json!({"k": k}))
            .idempotency_key(format!("key-{k}"))
            .await
            .unwrap();
        if let Some(ids) = acknowledged.get(&k) {
            assert!(
                ids.contains(&s.task_id),
                "key {k}: acknowledged {ids:?}, now {}",
                s.task_id
            );
        }
        assert_ne!(
            s.status, "missing",
            "key {k}: an acknowledged task was lost"
        );
    }
    assert_eq!(
        c.faults.load(SeqCst),
        faults_before,
        "healed means no fault"
    );
    assert!(
        c.forwarded.load(SeqCst) >= forwarded_before + 90,
        "the heal phase went through the proxy"
    );
}

/// 30 keys, 3 concurrent submits each, 8 keys at a time (24 submits in
/// flight: moto serves one request at a time, and each submit's 25 s
/// deadline runs from its own start), and a second round. Every error is
/// retryable and none a conflict.
async fn submit_twice_through_faults(queue: Arc<Queue>) -> Answers {
    use futures::StreamExt;
    let mut answers = Answers::default();
    for _round in 0..2 {
        let results: Vec<Vec<(usize, Result<_, SubmitError>)>> = futures::stream::iter(0..30)
            .map(|k| {
                let queue = queue.clone();
                async move {
                    let one = |q: Arc<Queue>| async move {
                        (
                            k,
                            q.submit("chaos", json!({"k": k}))
                                .idempotency_key(format!("key-{k}"))
                                .await,
                        )
                    };
                    let (a, b, c) =
                        tokio::join!(one(queue.clone()), one(queue.clone()), one(queue.clone()));
                    vec![a, b, c]
                }
            })
            .buffer_unordered(8)
            .collect()
            .await;
        for (k, r) in results.into_iter().flatten() {
            match r {
                Ok(s) => {
                    answers.acknowledged.entry(k).or_default().insert(s.task_id);
                }
                Err(e) => {
                    *answers
                        .error_kinds
                        .entry(format!("{e:?}").chars().take(60).collect())
                        .or_default() += 1;
                    assert!(
                        e.is_retryable(),
                        "key {k}: a non-retryable error under transient faults: {e:?}"
                    );
                    assert!(!matches!(e, SubmitError::Conflict { .. }));
                    answers.errors += 1;
                }
            }
        }
    }
    answers
}

/// What each record's submits left: the records missing their task or
/// marker, for the sweeper to write, and each record's ETag as written.
async fn what_the_submits_left(
    direct: &S3Store,
    records: &[String],
) -> (HashSet<String>, HashMap<String, ETag>) {
    let mut incomplete = HashSet::new();
    let mut written = HashMap::new();
    for key in records {
        let o = direct.get(key).await.unwrap();
        written.insert(key.clone(), o.meta.etag.clone());
        let rec = idempotent_submit::protocol::Record::parse(&o.body).unwrap();
        let pending: serde_json::Value =
            serde_json::from_str(rec.pending_task.as_ref().unwrap().get()).unwrap();
        let at: chrono::DateTime<chrono::Utc> =
            pending["available_at"].as_str().unwrap().parse().unwrap();
        let marker =
            idempotent_submit::protocol::TaskLocation::new(rec.task_id, 1, at).marker_key();
        if direct.get(&rec.task_key).await.is_err() || direct.head(&marker).await.is_err() {
            incomplete.insert(key.clone());
        }
    }
    (incomplete, written)
}

/// Five records that expired long ago (copies of `template`'s, of other
/// keys): the sweeper deletes them with If-Match, the one conditional
/// update left on the sweeper's path now that it never writes a record.
async fn expired_records(direct: &S3Store, template: &str) -> Vec<String> {
    let template: serde_json::Value =
        serde_json::from_slice(&direct.get(template).await.unwrap().body).unwrap();
    let mut expired = Vec::new();
    for i in 0..5u32 {
        let mut v = template.clone();
        v["created_at"] = json!("2020-01-01T00:00:00Z");
        v["expires_at"] = json!("2020-01-31T00:00:00Z");
        v["write_id"] = json!(uuid::Uuid::new_v4());
        let key = format!("idempotency/chaos/{i:064x}.json");
        let body = serde_json::to_vec(&v).unwrap().into();
        direct.put(&key, body, PutMode::Create).await.unwrap();
        expired.push(key);
    }
    expired
}

/// The record event of `key`, delivered again until the sweeper handles
/// it (each failure retryable): what it then does. How many times it came
/// back.
async fn sweep_until_handled(
    sweeper: &Queue,
    key: &str,
    was_incomplete: bool,
    is_expired: bool,
) -> u32 {
    let mut came_back = 0;
    loop {
        let o = sweeper.engine().sweep_record(key, false, None).await;
        if let RecordOutcome::Failed(e) = &o {
            assert!(e.is_retryable(), "{key}: {e:?}");
            came_back += 1;
            assert!(came_back < 100, "the sweeper never got through {key}");
            continue;
        }
        if is_expired {
            // A delete that landed and lost its answer is retried and
            // finds the record gone.
            assert!(
                matches!(o, RecordOutcome::ExpiredDeleted | RecordOutcome::Nothing),
                "{key}: {o:?}"
            );
        } else if came_back > 0 {
            // A failed attempt may have written what was missing
            // before it failed: the redelivery then finds nothing to do.
            assert!(
                matches!(o, RecordOutcome::Finished | RecordOutcome::Nothing),
                "{key}: {o:?}"
            );
        } else {
            // Written exactly when something was missing.
            let want = if was_incomplete {
                RecordOutcome::Finished
            } else {
                RecordOutcome::Nothing
            };
            assert_eq!(o, want, "{key}");
        }
        return came_back;
    }
}

/// Each kind of fault happened, and a lost answer on each kind of
/// conditional write. A 409 falls only on a conditional write (about 300 of
/// the 720-odd requests: some 9 of them expected, at 20 % and one kind in
/// seven); 4 were seen in a make test on a loaded machine, so it is asked
/// to happen, the others five times.
fn every_kind_of_fault_happened(c: &Counts) {
    for (i, kind) in KINDS.iter().enumerate() {
        eprintln!("chaos: {:>4}  {kind}", c.kind(i));
        let least = if kind.starts_with("409") { 1 } else { 5 };
        assert!(
            c.kind(i) >= least,
            "too few faults of kind {kind}: {}",
            c.kind(i)
        );
    }
    let lost_create = c.lost_create.load(SeqCst);
    let lost_update = c.lost_update.load(SeqCst);
    eprintln!(
        "chaos: lost answers to If-None-Match writes {lost_create}, to If-Match writes {lost_update}"
    );
    assert!(
        lost_create >= 5,
        "lost answers to If-None-Match writes: {lost_create}"
    );
    assert!(
        lost_update >= 3,
        "lost answers to If-Match writes: {lost_update}"
    );
}

/// The bucket holds one task and one marker per key, every record
/// `creating` as written (its ETag unchanged), and no expired record.
async fn one_task_and_marker_per_key(
    direct: &S3Store,
    records: &[String],
    written: &HashMap<String, ETag>,
    expired: &[String],
) {
    let keys = common::all_keys(direct).await;
    let ids_under = |prefix: &str| -> HashSet<String> {
        keys.iter()
            .filter(|k| k.starts_with(prefix))
            .map(|k| {
                let name = k.rsplit('/').next().unwrap();
                name.trim_end_matches(".json").to_owned()
            })
            .collect()
    };
    let mut record_tasks = HashSet::new();
    for key in records {
        let o = direct.get(key).await.unwrap();
        let rec = idempotent_submit::protocol::Record::parse(&o.body).unwrap();
        assert_eq!(rec.status, Some(RecordStatus::Creating), "{key}");
        assert!(rec.pending_task.is_some(), "{key}");
        assert_eq!(Some(&o.meta.etag), written.get(key), "{key}: written once");
        record_tasks.insert(rec.task_id.to_string());
    }
    assert_eq!(ids_under("tasks/"), record_tasks, "each record's task");
    assert_eq!(ids_under("ready/"), record_tasks, "each task's marker");
    for key in expired {
        assert!(!keys.contains(key), "{key} was not deleted");
    }
    assert_eq!(
        keys.iter().filter(|k| k.starts_with("tasks/")).count(),
        30,
        "one task per key"
    );
    assert_eq!(
        keys.iter()
            .filter(|k| k.starts_with("idempotency/"))
            .count(),
        30
    );
}
