//! Task options and offloaded inputs through the protocol: the fields they
//! set, what a key promises about them, the bounds, and every crash point of
//! an offloaded submit, with the fault-injecting store and the injectable
//! clock (buquet's own worker meets them in tests/interop.rs).

use crate::common;
use crate::common::World;

use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use idempotent_submit::lambda::{App, Metrics, handle_submit};
use idempotent_submit::protocol::{RecordOutcome, TaskRetryPolicy, hash};
use idempotent_submit::store::{Fault, FaultyStore, Op, PutMode, Store};
use idempotent_submit::{Clock, Config, ConflictKind, Queue, SubmitError, ValidationError};
use lambda_runtime::{Context, LambdaEvent};
use serde_json::{Value, json};

fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

/// An input of `n` bytes or so.
fn big(n: usize) -> Value {
    json!({"doc": "x".repeat(n)})
}

fn field_of(e: SubmitError) -> &'static str {
    match e {
        SubmitError::Invalid(ValidationError::Field { field, .. }) => field,
        other => panic!("expected a 400 naming a field, got {other:?}"),
    }
}

#[tokio::test]
async fn a_task_carries_its_options_as_buquets_submit_sets_them_and_its_marker_is_in_its_minute() {
    let w = World::new();
    w.clock.advance(Duration::seconds(10));
    let policy = TaskRetryPolicy {
        initial_interval_ms: 500,
        max_interval_ms: 30_000,
        multiplier: 3.0,
        jitter_percent: 0.1,
    };
    let s = w
        .process()
        .submit("t", json!({"n": 1}))
        .idempotency_key("k")
        .timeout(Duration::minutes(30))
        .max_retries(10)
        .retry_policy(policy)
        .delay(Duration::seconds(90))
        .max_reschedules(4)
        .task_ttl(Duration::hours(1))
        .await
        .unwrap();
    let task = w.task("k").await.0;
    assert_eq!(task["id"], s.task_id.to_string());
    assert_eq!(task["timeout_seconds"], 1800);
    assert_eq!(task["max_retries"], 10);
    assert_eq!(
        task["retry_policy"],
        json!({"initial_interval_ms": 500, "max_interval_ms": 30000, "multiplier": 3.0, "jitter_percent": 0.1})
    );
    assert_eq!(task["max_reschedules"], 4);
    // 90 s after the submit, in S3's time; the task's own expiry an hour
    // after the submit (buquet counts it from the submit).
    assert_eq!(task["available_at"], "2026-01-27T12:01:40Z");
    assert_eq!(task["expires_at"], "2026-01-27T13:00:10Z");
    assert_eq!(task["created_at"], "2026-01-27T12:00:10Z");
    assert!(task.get("input_ref").is_none());
    // The marker is in the folder of available_at's minute (100 s: minute 1).
    assert_eq!(
        w.keys("ready/"),
        vec![format!(
            "ready/{}/{:010}/{}",
            &s.task_id.to_string()[..1],
            (1_769_515_200 + 100) / 60,
            s.task_id
        )]
    );
    assert!(w.record("k").await.options_hash.is_some());
}

#[tokio::test]
async fn a_task_without_options_keeps_buquets_defaults_and_its_record_has_no_options_hash() {
    let w = World::new();
    w.process()
        .submit("t", json!({"n": 1}))
        .idempotency_key("k")
        .await
        .unwrap();
    let task = w.task("k").await.0;
    assert_eq!(task["timeout_seconds"], 300);
    assert_eq!(task["max_retries"], 3);
    for absent in ["max_reschedules", "expires_at", "input_ref"] {
        assert!(task.get(absent).is_none(), "{absent} in {task}");
    }
    assert_eq!(w.record("k").await.options_hash, None);
}

#[tokio::test]
async fn a_retry_with_the_same_relative_delay_replays_and_other_options_are_a_conflict() {
    let w = World::new();
    let q = w.process();
    let first = q
        .submit("t", json!({"n": 1}))
        .idempotency_key("k")
        .delay(Duration::seconds(60))
        .await
        .unwrap();
    // Thirty seconds later the same delay gives another time; the hash is of
    // the delay as sent, so it replays.
    w.clock.advance(Duration::seconds(30));
    let again = q
        .submit("t", json!({"n": 1}))
        .idempotency_key("k")
        .delay(Duration::seconds(60))
        .await
        .unwrap();
    assert_eq!((again.task_id, again.replayed), (first.task_id, true));
    let before = w.bucket.keys();
    for other in [
        q.submit("t", json!({"n": 1}))
            .idempotency_key("k")
            .delay(Duration::seconds(61)),
        q.submit("t", json!({"n": 1})).idempotency_key("k"),
        q.submit("t", json!({"n": 1}))
            .idempotency_key("k")
            .delay(Duration::seconds(60))
            .max_retries(3),
    ] {
        match other.await.unwrap_err() {
            SubmitError::Conflict { kind, task_id } => {
                assert_eq!((kind, task_id), (ConflictKind::Options, first.task_id));
            }
            e => panic!("expected an options conflict, got {e:?}"),
        }
    }
    // The type and the input are still told first.
    match q
        .submit("t", json!({"n": 2}))
        .idempotency_key("k")
        .delay(Duration::seconds(61))
        .await
        .unwrap_err()
    {
        SubmitError::Conflict { kind, .. } => assert_eq!(kind, ConflictKind::Input),
        e => panic!("{e:?}"),
    }
    assert_eq!(w.bucket.keys(), before, "a conflict writes nothing");
}

#[tokio::test]
async fn a_record_of_this_service_without_options_conflicts_with_a_submit_that_has_some() {
    let w = World::new();
    let q = w.process();
    q.submit("t", json!({"n": 1}))
        .idempotency_key("k")
        .await
        .unwrap();
    match q
        .submit("t", json!({"n": 1}))
        .idempotency_key("k")
        .timeout(Duration::seconds(60))
        .await
        .unwrap_err()
    {
        SubmitError::Conflict { kind, .. } => assert_eq!(kind, ConflictKind::Options),
        e => panic!("{e:?}"),
    }
}

#[tokio::test]
async fn a_record_of_buquets_clients_is_compared_on_task_type_and_input_only() {
    let w = World::new();
    let q = w.process();
    let first = q
        .submit("t", json!({"n": 1}))
        .idempotency_key("k")
        .await
        .unwrap();
    // As buquet's clients write records: no write_id, status or options.
    let key = w.record_key("k");
    let mut rec = w.json(&key).await;
    for f in [
        "write_id",
        "status",
        "options_hash",
        "pending_task",
        "scope",
    ] {
        rec.as_object_mut().unwrap().remove(f);
    }
    w.bucket
        .put(
            &key,
            serde_json::to_vec(&rec).unwrap().into(),
            PutMode::Overwrite,
        )
        .await
        .unwrap();
    let s = q
        .submit("t", json!({"n": 1}))
        .idempotency_key("k")
        .timeout(Duration::seconds(60))
        .max_retries(7)
        .await
        .unwrap();
    assert_eq!((s.task_id, s.replayed), (first.task_id, true));
}

#[tokio::test]
async fn a_schedule_beyond_the_records_life_and_an_expiry_before_availability_are_refused_and_write_nothing()
 {
    let w = World::new();
    let q = w.process();
    let cases = [
        (
            q.submit("t", 1)
                .idempotency_key("k")
                .idempotency_ttl(Duration::hours(1))
                .delay(Duration::hours(2)),
            "delay_seconds",
        ),
        (
            q.submit("t", 1)
                .idempotency_key("k")
                .idempotency_ttl(Duration::hours(1))
                .schedule_at(at("2026-01-27T13:00:00Z")),
            "schedule_at",
        ),
        (
            q.submit("t", 1)
                .delay(Duration::seconds(60))
                .task_ttl(Duration::seconds(60)),
            "ttl_seconds",
        ),
        (
            q.submit("t", 1)
                .schedule_at(at("2026-01-28T12:00:00Z"))
                .task_expires_at(at("2026-01-28T11:00:00Z")),
            "expires_at",
        ),
        (
            q.submit("t", 1)
                .schedule_at(at("2026-01-28T12:00:00Z"))
                .delay(Duration::seconds(1)),
            "delay_seconds",
        ),
        (
            q.submit("t", 1).timeout(Duration::milliseconds(1500)),
            "timeout_seconds",
        ),
        (q.submit("t", 1).max_retries(101), "max_retries"),
        (
            q.submit("t", 1).retry_policy(TaskRetryPolicy {
                multiplier: f64::NAN,
                ..Default::default()
            }),
            "retry_policy.multiplier",
        ),
        // Without a key, nothing further ahead than the longest record life.
        (q.submit("t", 1).delay(Duration::days(366)), "delay_seconds"),
    ];
    for (b, field) in cases {
        assert_eq!(field_of(b.await.unwrap_err()), field);
    }
    assert!(w.bucket.keys().is_empty());
    assert_eq!(w.faulty.call_count(), 0, "refused before any request");
}

#[tokio::test]
async fn an_offloaded_input_is_in_its_payload_the_task_names_it_and_the_hash_is_of_the_whole_input()
{
    let w = World::new();
    let input = big(200_000);
    let s = w
        .process()
        .submit("t", &input)
        .idempotency_key("k")
        .payload_refs(100 * 1024)
        .await
        .unwrap();
    let task = w.task("k").await.0;
    let payload = format!("payloads/{}/input.json", s.task_id);
    assert_eq!(task["input"], Value::Null);
    assert_eq!(task["input_ref"], payload);
    assert_eq!(w.json(&payload).await, input);
    let rec = w.record("k").await;
    let canonical = hash::canonical_json(&input);
    assert_eq!(rec.input_hash, hash::input_hash(&canonical));
    assert_eq!(
        rec.pending_input.as_ref().map(|r| r.get().as_bytes()),
        Some(canonical.as_slice()),
        "the record keeps the input for finishers"
    );
    // A request more than a plain submit, and no round trip more: the
    // payload goes beside the record, the task after both.
    let calls = w.faulty.calls();
    assert_eq!(calls.len(), 4, "{calls:?}");
    assert_eq!(w.faulty.round_trips(), 2, "{calls:?}");
    let rt = |prefix: &str| {
        calls
            .iter()
            .find(|c| c.key.starts_with(prefix))
            .unwrap()
            .round_trip
    };
    assert_eq!(rt("payloads/"), rt("idempotency/"));
    assert!(rt("tasks/") > rt("payloads/"));
    // Below the threshold, inline.
    w.process()
        .submit("t", big(10))
        .idempotency_key("small")
        .payload_refs(256 * 1024)
        .await
        .unwrap();
    assert!(w.task("small").await.0.get("input_ref").is_none());
    assert_eq!(w.keys("payloads/").len(), 1);
}

#[tokio::test]
async fn a_keyless_offloaded_submit_writes_its_payload_before_its_task() {
    let w = World::new();
    let s = w
        .process()
        .submit("t", big(100))
        .payload_refs(16)
        .await
        .unwrap();
    let calls = w.faulty.calls();
    let payload = calls
        .iter()
        .find(|c| c.key.starts_with("payloads/"))
        .unwrap();
    let task = calls.iter().find(|c| c.key.starts_with("tasks/")).unwrap();
    assert!(task.round_trip > payload.round_trip, "{calls:?}");
    assert_eq!(
        w.json(&format!("payloads/{}/input.json", s.task_id)).await,
        big(100)
    );
}

#[tokio::test]
async fn a_submit_that_died_before_its_payload_landed_is_finished_by_the_sweeper_from_the_record() {
    let w = World::new();
    let input = big(1000);
    // The record lands; the payload's PUT is refused twice (beside the
    // record, and once more before the task), and the submit gives up: as
    // if its process had died with the payload unwritten.
    w.faulty.inject(
        Some(Op::PutCreate),
        "payloads/",
        1,
        2,
        Fault::Fail(idempotent_submit::StoreError::Fatal("403".into())),
    );
    w.process()
        .submit("t", &input)
        .idempotency_key("k")
        .payload_refs(16)
        .await
        .unwrap_err();
    assert_eq!(w.keys("idempotency/").len(), 1);
    assert!(w.keys("payloads/").is_empty());
    assert!(w.keys("tasks/").is_empty());
    // The sweeper has no producer to ask: the record holds the input.
    let outcome = w.sweep_event("k").await;
    assert_eq!(outcome, RecordOutcome::Finished, "{outcome:?}");
    let rec = w.record("k").await;
    assert_eq!(
        w.json(&format!("payloads/{}/input.json", rec.task_id))
            .await,
        input
    );
    let task = w.task("k").await.0;
    assert_eq!(
        task["input_ref"],
        format!("payloads/{}/input.json", rec.task_id)
    );
    assert_eq!(w.keys("ready/").len(), 1);
}

#[tokio::test]
async fn a_submit_that_died_after_its_record_is_finished_by_the_next_submit_of_the_key() {
    let w = World::new();
    let input = big(1000);
    // The record lands; the payload's PUT is refused twice (beside the
    // record, and once more before the task), and the submit gives up: as
    // if its process had died with the payload unwritten.
    w.faulty.inject(
        Some(Op::PutCreate),
        "payloads/",
        1,
        2,
        Fault::Fail(idempotent_submit::StoreError::Fatal("403".into())),
    );
    w.process()
        .submit("t", &input)
        .idempotency_key("k")
        .payload_refs(16)
        .await
        .unwrap_err();
    let rec = w.record("k").await;
    let s = w
        .restarted()
        .submit("t", &input)
        .idempotency_key("k")
        .payload_refs(16)
        .await
        .unwrap();
    assert_eq!((s.task_id, s.replayed), (rec.task_id, true));
    // The replay's own payload (for the task id it did not get) is gone;
    // the record's is there.
    assert_eq!(
        w.keys("payloads/"),
        vec![format!("payloads/{}/input.json", rec.task_id)]
    );
    assert_eq!(w.keys("tasks/").len(), 1);
}

#[tokio::test]
async fn a_finisher_that_finds_the_task_writes_only_the_marker_not_the_payload_again() {
    // An offloaded submit whose task landed and whose marker did not. The
    // task names its payload, which is there: the sweeper that finishes the
    // record writes the marker alone, not the payload from `pending_input`
    // (a request, and a 412, for nothing).
    let w = World::new();
    w.faulty.inject(
        Some(Op::Put),
        "ready/",
        1,
        usize::MAX,
        Fault::Fail(idempotent_submit::StoreError::Fatal("403".into())),
    );
    w.process()
        .submit("t", big(1000))
        .idempotency_key("k")
        .payload_refs(16)
        .await
        .unwrap_err();
    assert_eq!((w.keys("tasks/").len(), w.keys("payloads/").len()), (1, 1));
    assert!(w.keys("ready/").is_empty());
    w.clock.advance(common::settings().stale_creating_after);
    let sweeper = FaultyStore::new(w.bucket.clone());
    let outcome = Queue::with_clock(
        sweeper.clone(),
        Arc::new(w.clock.clone()),
        common::settings(),
    )
    .engine()
    .sweep_record(&w.record_key("k"), false, None)
    .await;
    assert_eq!(outcome, RecordOutcome::Finished, "{outcome:?}");
    assert_eq!(w.keys("ready/").len(), 1);
    let writes: Vec<(Op, String)> = sweeper
        .calls()
        .iter()
        .filter(|c| matches!(c.op, Op::Put | Op::PutCreate))
        .map(|c| (c.op, c.key.split('/').next().unwrap_or("").to_owned()))
        .collect();
    assert_eq!(writes, vec![(Op::Put, "ready".to_owned())]);
}

#[tokio::test]
async fn the_payload_written_beside_a_claim_that_lost_belongs_to_no_task_and_is_deleted() {
    let w = World::new();
    let input = big(1000);
    let q = w.process();
    let first = q
        .submit("t", &input)
        .idempotency_key("k")
        .payload_refs(16)
        .await
        .unwrap();
    let replay = q
        .submit("t", &input)
        .idempotency_key("k")
        .payload_refs(16)
        .await
        .unwrap();
    assert_eq!(replay.task_id, first.task_id);
    // A conflict's payload too.
    q.submit("t", big(999))
        .idempotency_key("k")
        .payload_refs(16)
        .await
        .unwrap_err();
    assert_eq!(
        w.keys("payloads/"),
        vec![format!("payloads/{}/input.json", first.task_id)]
    );
}

#[tokio::test]
async fn a_lost_answer_to_the_payload_put_is_retried_and_its_412_is_our_own_write() {
    let w = World::new();
    w.faulty.inject(
        Some(Op::PutCreate),
        "payloads/",
        1,
        1,
        Fault::FailAfter(idempotent_submit::StoreError::Unavailable("lost".into())),
    );
    let s = w
        .process()
        .submit("t", big(1000))
        .idempotency_key("k")
        .payload_refs(16)
        .await
        .unwrap();
    assert!(!s.replayed);
    assert_eq!(
        w.json(&format!("payloads/{}/input.json", s.task_id)).await,
        big(1000)
    );
    assert_eq!(w.keys("tasks/").len(), 1);
}

// ---- through the HTTP API ----

fn app(w: &World) -> App {
    let cfg = Config {
        bucket: "unused".into(),
        force_path_style: true,
        tenant_isolation: false,
        allow_key_reset: false,
        settings: common::settings(),
        record_events: idempotent_submit::RecordEvents::Bucket,
        due_queue_url: None,
        due_message: Default::default(),
        s3_credentials_secret: None,
    };
    App::new(w.process(), &cfg, Metrics::collecting("submit"))
}

async fn post(app: &App, body: Value) -> (u64, Value) {
    let path = format!("{}/events/http-v2-post.json", env!("CARGO_MANIFEST_DIR"));
    let mut event: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    event["body"] = json!(body.to_string());
    let out = handle_submit(app, LambdaEvent::new(event.clone(), Context::default()))
        .await
        .unwrap();
    common::openapi::check(&event, &out);
    (
        out["statusCode"].as_u64().unwrap(),
        serde_json::from_str(out["body"].as_str().unwrap()).unwrap(),
    )
}

#[tokio::test]
async fn each_bad_option_is_a_400_naming_the_field_and_writes_nothing() {
    let w = World::new();
    let app = app(&w);
    let cases = [
        (json!({"timeout_seconds": 0}), "timeout_seconds"),
        (json!({"timeout_seconds": 86401}), "timeout_seconds"),
        (json!({"max_retries": 101}), "max_retries"),
        (
            json!({"retry_policy": {"jitter_percent": 2}}),
            "retry_policy.jitter_percent",
        ),
        (json!({"schedule_at": "soon"}), "schedule_at"),
        (
            json!({"schedule_at": "2026-01-27T12:10:00Z", "delay_seconds": 5}),
            "delay_seconds",
        ),
        (
            json!({"ttl_seconds": 60, "expires_at": "2026-01-28T12:00:00Z"}),
            "expires_at",
        ),
        (
            json!({"delay_seconds": 120, "ttl_seconds": 60}),
            "ttl_seconds",
        ),
        (json!({"expires_at": "2026-01-27T12:00:00Z"}), "expires_at"),
        (
            json!({"idempotency_key": "k", "idempotency_ttl_seconds": 3600, "delay_seconds": 3600}),
            "delay_seconds",
        ),
        (
            json!({"payload_ref_threshold_bytes": 5}),
            "payload_ref_threshold_bytes",
        ),
        (json!({"max_reschedules": -1}), "max_reschedules"),
    ];
    for (extra, field) in cases {
        let mut body = json!({"task_type": "t", "input": 1});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let (status, problem) = post(&app, body.clone()).await;
        assert_eq!(status, 400, "{body}: {problem}");
        assert_eq!(problem["code"], "invalid_request");
        let detail = problem["detail"].as_str().unwrap();
        assert!(detail.starts_with(&format!("{field}:")), "{body}: {detail}");
    }
    assert!(w.bucket.keys().is_empty());
}

#[tokio::test]
async fn options_through_the_http_body_reach_the_task_and_other_options_are_a_422_saying_so() {
    let w = World::new();
    let app = app(&w);
    let body = json!({"task_type": "t", "input": {"n": 1}, "idempotency_key": "k",
        "timeout_seconds": 1800, "max_retries": 10, "schedule_at": "2026-01-27T12:05:00Z",
        "max_reschedules": 2, "expires_at": "2026-01-27T13:00:00.5Z"});
    let (status, created) = post(&app, body.clone()).await;
    assert_eq!(status, 201, "{created}");
    let task = w.task("k").await.0;
    assert_eq!(task["available_at"], "2026-01-27T12:05:00Z");
    assert_eq!(task["expires_at"], "2026-01-27T13:00:00.500Z");
    assert_eq!(task["timeout_seconds"], 1800);
    assert_eq!(
        w.keys("ready/")[0].split('/').nth(2),
        Some(format!("{:010}", (1_769_515_200 + 300) / 60).as_str())
    );
    let (status, replay) = post(&app, body.clone()).await;
    assert_eq!((status, &replay["task_id"]), (200, &created["task_id"]));
    let mut other = body;
    other["max_retries"] = json!(11);
    let (status, problem) = post(&app, other).await;
    assert_eq!(status, 422);
    assert_eq!(problem["code"], "idempotency_conflict");
    assert!(
        problem["detail"].as_str().unwrap().contains("task options"),
        "{problem}"
    );
}

#[tokio::test]
async fn the_scheduled_pass_deletes_a_payload_no_task_names_once_no_task_can_be_written_for_it() {
    let w = World::new();
    let input = big(1000);
    let first = w
        .process()
        .submit("t", &input)
        .idempotency_key("k")
        .payload_refs(16)
        .await
        .unwrap();
    // A replay whose process dies before it deletes its own payload.
    w.faulty
        .inject(Some(Op::Delete), "payloads/", 1, 1, Fault::CrashBefore);
    w.process()
        .submit("t", &input)
        .idempotency_key("k")
        .payload_refs(16)
        .await
        .unwrap_err();
    let live = format!("payloads/{}/input.json", first.task_id);
    let mut orphans: Vec<String> = w.keys("payloads/");
    orphans.retain(|k| *k != live);
    assert_eq!(orphans.len(), 1, "the dead replay left its payload");
    // A task of another client, under a two-digit shard, with its payload.
    let other = uuid::Uuid::new_v4().to_string();
    for (key, body) in [
        (
            format!("tasks/{}/{other}.json", &other[..2]),
            b"{}".to_vec(),
        ),
        (format!("payloads/{other}/input.json"), b"1".to_vec()),
    ] {
        w.bucket
            .put(&key, body.into(), PutMode::Create)
            .await
            .unwrap();
    }
    // As the scheduled function runs it: with a deadline for the run.
    let pass = || async {
        w.restarted()
            .engine()
            .sweep(&idempotent_submit::protocol::SweepOptions {
                deadline: Some(w.clock.now() + Duration::minutes(10)),
                ..Default::default()
            })
            .await
            .unwrap()
    };
    // Young, it may still get its task: kept. So it is at 55 minutes: a
    // finisher may write its task until the finish window (40 minutes) is
    // over, and that write may land 15 minutes later.
    assert_eq!(pass().await.payloads_deleted, 0);
    w.clock.advance(Duration::minutes(55));
    assert_eq!(pass().await.payloads_deleted, 0);
    assert_eq!(w.keys("payloads/").len(), 3);
    // Past the finish window, the late-write margin and an operation's
    // length, it never can.
    w.clock.advance(Duration::minutes(65));
    let s = pass().await;
    assert_eq!(s.payloads_deleted, 1, "{s:?}");
    let mut left = w.keys("payloads/");
    left.sort();
    let mut expected = vec![live, format!("payloads/{other}/input.json")];
    expected.sort();
    assert_eq!(left, expected);
}

/// An input payload that no task names, as a dead replay leaves it: in the
/// bucket at the clock's time, under a new task id of a slice that no pass
/// of the next nine days takes (so only the week's HEADs look at it).
async fn orphan_payload(w: &World) -> String {
    use idempotent_submit::protocol::sweep::payload_slices;
    let taken = |slice: u32| {
        (0..10).any(|d| payload_slices(w.clock.now() + Duration::days(d)).contains(&slice))
    };
    let slice = (0..256).find(|s| !taken(*s)).unwrap();
    let mut b = *uuid::Uuid::new_v4().as_bytes();
    b[0] = slice as u8;
    let key = format!("payloads/{}/input.json", uuid::Uuid::from_bytes(b));
    w.bucket
        .put(&key, b"1".to_vec().into(), PutMode::Create)
        .await
        .unwrap();
    key
}

async fn payload_pass(store: impl Store, w: &World) -> idempotent_submit::protocol::SweepSummary {
    Queue::with_clock(store, Arc::new(w.clock.clone()), common::settings())
        .engine()
        .sweep(&idempotent_submit::protocol::SweepOptions::default())
        .await
        .unwrap()
}

#[tokio::test]
async fn a_payload_whose_task_cannot_be_checked_is_counted_as_an_error_and_kept() {
    let w = World::new();
    let key = orphan_payload(&w).await;
    w.clock.advance(Duration::hours(2));
    let f = FaultyStore::new(w.bucket.clone());
    f.inject(
        Some(Op::Head),
        "tasks/",
        1,
        usize::MAX,
        Fault::Fail(idempotent_submit::StoreError::Fatal("403".into())),
    );
    let s = payload_pass(f.clone(), &w).await;
    assert_eq!((s.errors, s.payloads_deleted), (1, 0), "{s:?}");
    assert_eq!(w.keys("payloads/"), vec![key]);
    // Checked at the next pass (its window is a day and an hour), it goes.
    f.heal();
    w.clock.advance(Duration::hours(1));
    let s = payload_pass(f, &w).await;
    assert_eq!((s.errors, s.payloads_deleted), (0, 1), "{s:?}");
    assert!(w.keys("payloads/").is_empty());
}

#[tokio::test]
async fn a_payload_is_looked_at_for_a_day_and_an_hour_after_it_became_an_orphan_and_not_after() {
    // The pass lists payloads aged from the finish window, the late-write
    // margin and an operation's length (55 min 25 s) to a day and an hour
    // more (so that each daily pass's window meets the next one's); one
    // exactly that much past is no longer the HEADs' business, one a second
    // younger still is. (After that, the payload's slice's day takes it:
    // tests/sweep.rs; this one's is not in the next nine days.)
    let w = World::new();
    let old = orphan_payload(&w).await;
    w.clock.advance(Duration::seconds(1));
    orphan_payload(&w).await;
    w.clock.advance(
        Duration::minutes(55) + Duration::seconds(25) + Duration::hours(25) - Duration::seconds(1),
    );
    let s = payload_pass(w.bucket.clone(), &w).await;
    assert_eq!(s.payloads_deleted, 1, "{s:?}");
    assert_eq!(w.keys("payloads/"), vec![old]);
}

#[tokio::test]
async fn a_payload_whose_task_is_under_our_shard_costs_the_pass_one_head_and_an_orphan_four() {
    // The HEAD path asks for our own shard length first and stops at the
    // first task found: a live payload is one HEAD a pass, not four.
    let w = World::new();
    let orphan = orphan_payload(&w).await;
    let live = orphan_payload(&w).await;
    let id = live
        .trim_start_matches("payloads/")
        .trim_end_matches("/input.json")
        .to_owned();
    w.bucket
        .put(
            &format!("tasks/{}/{id}.json", &id[..1]),
            b"{}".to_vec().into(),
            PutMode::Create,
        )
        .await
        .unwrap();
    w.clock.advance(Duration::hours(2));
    let f = FaultyStore::new(w.bucket.clone());
    let s = payload_pass(f.clone(), &w).await;
    assert_eq!(s.payloads_deleted, 1, "{s:?}");
    let heads = |key: &str| {
        f.calls()
            .iter()
            .filter(|c| c.op == Op::Head && c.key.contains(key))
            .count()
    };
    let orphan_id = orphan
        .trim_start_matches("payloads/")
        .trim_end_matches("/input.json");
    assert_eq!((heads(&id), heads(orphan_id)), (1, 4));
    assert_eq!(w.keys("payloads/"), vec![live]);
}
