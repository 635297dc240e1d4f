//! Inputs checked against the JSON Schema published for their task type
//! (`VALIDATE_INPUT_SCHEMAS`, src/protocol/schema.rs): valid, invalid,
//! absent and unusable schemas; the process's cache, its TTL and its
//! revalidation by conditional GET (on an injected clock, requests counted
//! with the fault injector's call log); the key's promise when the schema
//! changed; and every door: the Rust API, `POST /tasks`, `POST
//! /tasks/batch`, SQS (`rejected/`) and `idem submit`.

use crate::common;

use std::sync::Arc;

use crate::common::handler::Harness;
use bytes::Bytes;
use idempotent_submit::protocol::{ErrorKind, InputError};
use idempotent_submit::store::{Fault, FaultyStore, MemoryStore, Op, PutMode, Store, StoreError};
use idempotent_submit::{ManualClock, Queue, Settings, SubmitError};
use serde_json::{Value, json};

/// The tests' settings with schema validation on.
fn on() -> Settings {
    Settings {
        validate_input_schemas: true,
        ..common::settings()
    }
}

/// A schema document as buquet's `publish_schema` writes it: the
/// serialization of its `TaskSchema`, whose absent parts are left out.
fn document(input: Option<Value>, output: Option<Value>) -> Bytes {
    let mut d = serde_json::Map::new();
    if let Some(i) = input {
        d.insert("input".into(), i);
    }
    if let Some(o) = output {
        d.insert("output".into(), o);
    }
    Bytes::from(serde_json::to_vec(&d).unwrap())
}

fn email_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "to": {"type": "string", "format": "email"},
            "subject": {"type": "string", "maxLength": 20},
            "priority": {"type": "integer", "minimum": 1}
        },
        "required": ["to", "subject"]
    })
}

/// A clock, a bucket, the bucket behind the call log, and a queue through it.
struct Bed {
    clock: ManualClock,
    bucket: MemoryStore,
    faulty: FaultyStore<MemoryStore>,
    queue: Queue,
}

impl Bed {
    fn new(settings: Settings) -> Self {
        let clock = ManualClock::at_epoch();
        let bucket = common::memory_store(&clock);
        Self::over(clock, bucket, settings)
    }

    fn over(clock: ManualClock, bucket: MemoryStore, settings: Settings) -> Self {
        let faulty = FaultyStore::new(bucket.clone());
        let queue = Queue::with_clock(faulty.clone(), Arc::new(clock.clone()), settings);
        Bed {
            clock,
            bucket,
            faulty,
            queue,
        }
    }

    /// A cold process on the same bucket and clock.
    fn restart(&self, settings: Settings) -> Self {
        Self::over(self.clock.clone(), self.bucket.clone(), settings)
    }

    async fn publish(&self, task_type: &str, body: Bytes) {
        self.bucket
            .put(
                &format!("schemas/{task_type}.json"),
                body,
                PutMode::Overwrite,
            )
            .await
            .unwrap();
    }

    /// The reads of `schemas/` so far: each one's answer (`None`: 200).
    fn schema_reads(&self) -> Vec<Option<StoreError>> {
        self.faulty
            .calls()
            .into_iter()
            .filter(|c| c.key.starts_with("schemas/"))
            .inspect(|c| assert_eq!(c.op, Op::Get, "only reads of schemas/"))
            .map(|c| c.error)
            .collect()
    }

    /// Every object but the schemas: what a submit wrote.
    fn written(&self) -> Vec<String> {
        self.bucket
            .keys()
            .into_iter()
            .filter(|k| !k.starts_with("schemas/"))
            .collect()
    }

    async fn send(&self, task_type: &str, input: Value) -> Result<bool, SubmitError> {
        self.queue
            .submit(task_type, input)
            .await
            .map(|s| s.created())
    }
}

fn refusal(e: SubmitError) -> (String, Vec<InputError>, usize) {
    assert_eq!(e.kind(), ErrorKind::InputInvalid, "{e:?}");
    assert_eq!(e.code(), "input_invalid");
    match e {
        SubmitError::InputInvalid {
            task_type,
            errors,
            omitted,
        } => (task_type, errors, omitted),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_valid_input_passes_and_an_invalid_one_is_refused_naming_each_failure_and_writing_nothing()
 {
    let b = Bed::new(on());
    b.publish("send_email", document(Some(email_schema()), None))
        .await;
    assert_eq!(
        b.send(
            "send_email",
            json!({"to": "a@example.com", "subject": "hi"})
        )
        .await,
        Ok(true)
    );
    let before = b.bucket.snapshot();
    let e = b
        .send(
            "send_email",
            json!({"to": 7, "subject": "x".repeat(30), "priority": 0}),
        )
        .await
        .unwrap_err();
    let (task_type, mut errors, omitted) = refusal(e);
    assert_eq!(task_type, "send_email");
    assert_eq!(omitted, 0);
    errors.sort_by(|a, b| a.pointer.cmp(&b.pointer));
    let named: Vec<(&str, &str)> = errors
        .iter()
        .map(|e| (e.pointer.as_str(), e.keyword.as_str()))
        .collect();
    assert_eq!(
        named,
        [
            ("/priority", "minimum"),
            ("/subject", "maxLength"),
            ("/to", "type")
        ]
    );
    // The rule, not the value: the 30 x's are not echoed.
    assert!(
        errors.iter().all(|e| !e.detail.contains("xxxx")),
        "{errors:?}"
    );
    let missing = refusal(
        b.send("send_email", json!({"to": "a@b.c"}))
            .await
            .unwrap_err(),
    )
    .1;
    assert_eq!(missing.len(), 1);
    assert_eq!(
        (missing[0].pointer.as_str(), missing[0].keyword.as_str()),
        ("", "required")
    );
    assert!(missing[0].detail.contains("subject"), "{missing:?}");
    assert_eq!(
        b.bucket.snapshot(),
        before,
        "a refused input writes nothing"
    );
    // Draft 2020-12 as buquet's validate_input reads it: `format` is an
    // annotation, not an assertion.
    assert_eq!(
        b.send(
            "send_email",
            json!({"to": "not an address", "subject": "s"})
        )
        .await,
        Ok(true)
    );
}

#[tokio::test]
async fn a_type_without_a_schema_passes_and_its_absence_is_cached_like_a_schema() {
    let b = Bed::new(on());
    assert_eq!(b.send("t", json!({"anything": [1, 2]})).await, Ok(true));
    assert_eq!(b.schema_reads(), [Some(StoreError::NotFound)]);
    b.clock.advance(chrono::Duration::seconds(59));
    assert_eq!(b.send("t", json!(null)).await, Ok(true));
    assert_eq!(b.schema_reads().len(), 1, "within the TTL: no request");
    // Published since: the next read after the TTL sees it (a plain GET:
    // there was no ETag to send).
    b.publish("t", document(Some(json!({"type": "object"})), None))
        .await;
    b.clock.advance(chrono::Duration::seconds(1));
    assert_eq!(
        refusal(b.send("t", json!(null)).await.unwrap_err()).1[0].keyword,
        "type"
    );
    assert_eq!(b.schema_reads(), [Some(StoreError::NotFound), None]);
}

#[tokio::test]
async fn a_document_without_an_input_schema_checks_nothing() {
    let b = Bed::new(on());
    b.publish("t", document(None, Some(json!({"type": "object"}))))
        .await;
    assert_eq!(b.send("t", json!("a string")).await, Ok(true));
    b.publish(
        "u",
        Bytes::from_static(br#"{"input": null, "note": "later"}"#),
    )
    .await;
    assert_eq!(b.send("u", json!(1)).await, Ok(true));
    assert_eq!(b.queue.engine().take_unusable_schemas(), 0);
}

#[tokio::test]
async fn with_validation_off_no_schema_is_read_and_every_input_passes() {
    let b = Bed::new(common::settings());
    b.publish("t", document(Some(json!({"type": "string"})), None))
        .await;
    assert_eq!(b.send("t", json!(42)).await, Ok(true));
    assert!(b.schema_reads().is_empty());
}

#[tokio::test]
async fn an_unusable_schema_is_counted_at_every_fetch_and_checks_nothing() {
    for body in [
        &b"{\"input\": {\"type\": \"objekt\"}}"[..],
        b"{\"input\": {\"required\": \"to\"}}",
        b"{\"input\": {\"$ref\": \"https://schemas.example.com/email.json\"}}",
        b"{\"input\": ",
        b"[\"input\"]",
    ] {
        let b = Bed::new(on());
        b.publish("t", Bytes::copy_from_slice(body)).await;
        let what = String::from_utf8_lossy(body);
        assert_eq!(b.send("t", json!({"x": 1})).await, Ok(true), "{what}");
        assert_eq!(b.queue.engine().take_unusable_schemas(), 1, "{what}");
        assert_eq!(b.queue.engine().take_unusable_schemas(), 0, "taken");
        // Cached as unusable: no request, no new count, within the TTL.
        assert_eq!(b.send("t", json!({"x": 2})).await, Ok(true));
        assert_eq!(b.queue.engine().take_unusable_schemas(), 0, "{what}");
        // Revalidated (304): still unusable, counted again, so that an
        // alarm on the metric stays on while the document is broken.
        b.clock.advance(chrono::Duration::seconds(60));
        assert_eq!(b.send("t", json!({"x": 3})).await, Ok(true));
        assert_eq!(b.queue.engine().take_unusable_schemas(), 1, "{what}");
        assert_eq!(b.schema_reads(), [None, Some(StoreError::NotModified)]);
    }
}

#[tokio::test]
async fn after_the_ttl_a_conditional_get_revalidates_and_a_new_version_replaces_the_old() {
    let b = Bed::new(on());
    b.publish("t", document(Some(json!({"type": "object"})), None))
        .await;
    assert_eq!(b.send("t", json!({})).await, Ok(true));
    for _ in 0..5 {
        assert!(b.send("t", json!([])).await.is_err());
    }
    assert_eq!(
        b.schema_reads(),
        [None],
        "a warm process: no request within the TTL"
    );
    b.clock.advance(chrono::Duration::seconds(60));
    assert!(b.send("t", json!([])).await.is_err());
    assert_eq!(
        b.schema_reads(),
        [None, Some(StoreError::NotModified)],
        "unchanged: 304, and the cached schema is kept"
    );
    b.publish("t", document(Some(json!({"type": "array"})), None))
        .await;
    assert!(
        b.send("t", json!({})).await.is_ok(),
        "within the TTL: the old schema"
    );
    b.clock.advance(chrono::Duration::seconds(60));
    assert!(b.send("t", json!({})).await.is_err(), "the new schema");
    assert_eq!(b.send("t", json!([])).await, Ok(true));
    assert_eq!(
        b.schema_reads(),
        [None, Some(StoreError::NotModified), None]
    );
    // Deleted: after the TTL the type has no schema.
    b.bucket.delete("schemas/t.json", None).await.unwrap();
    b.clock.advance(chrono::Duration::seconds(60));
    assert_eq!(b.send("t", json!({})).await, Ok(true));
    assert_eq!(b.schema_reads().last(), Some(&Some(StoreError::NotFound)));
}

#[tokio::test]
async fn a_ttl_of_zero_revalidates_at_every_submit() {
    let b = Bed::new(Settings {
        schema_cache_ttl: chrono::Duration::zero(),
        ..on()
    });
    b.publish("t", document(Some(json!({"type": "object"})), None))
        .await;
    for _ in 0..3 {
        assert_eq!(b.send("t", json!({})).await, Ok(true));
    }
    assert_eq!(
        b.schema_reads(),
        [
            None,
            Some(StoreError::NotModified),
            Some(StoreError::NotModified)
        ]
    );
}

#[tokio::test]
async fn a_cold_process_reads_each_type_once_and_concurrent_first_submits_share_one_read() {
    let b = Bed::new(on());
    b.publish("a", document(Some(json!({"type": "object"})), None))
        .await;
    let results = b
        .queue
        .submit_many((0..40).map(|i| {
            let t = if i % 2 == 0 { "a" } else { "b" };
            b.queue.submit(t, json!({"i": i}))
        }))
        .await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let mut reads = b
        .faulty
        .calls()
        .into_iter()
        .filter(|c| c.key.starts_with("schemas/"))
        .map(|c| c.key)
        .collect::<Vec<_>>();
    reads.sort();
    assert_eq!(
        reads,
        ["schemas/a.json", "schemas/b.json"],
        "40 concurrent submits of 2 new types: one read each"
    );
    // Another process starts cold: its own read.
    let again = b.restart(on());
    assert_eq!(again.send("a", json!({})).await, Ok(true));
    assert_eq!(again.schema_reads(), [None]);
}

#[tokio::test]
async fn a_retry_of_a_key_accepted_before_the_schema_changed_replays_its_task() {
    let b = Bed::new(on());
    let first = b
        .queue
        .submit("send_email", json!({"to": "a@b.c"}))
        .idempotency_key("mail-1")
        .await
        .unwrap();
    assert!(first.created());
    // The schema arrives, and refuses that input; a cold process sees it.
    b.publish("send_email", document(Some(email_schema()), None))
        .await;
    let p = b.restart(on());
    let before = b.bucket.snapshot();
    let again = p
        .queue
        .submit("send_email", json!({"to": "a@b.c"}))
        .idempotency_key("mail-1")
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
    let e = p
        .queue
        .submit("send_email", json!({"to": 1}))
        .idempotency_key("mail-1")
        .await
        .unwrap_err();
    assert!(
        matches!(e, SubmitError::Conflict { task_id, .. } if task_id == first.task_id),
        "{e:?}"
    );
    // A new key with the refused input: 400, after one GET of its record,
    // and nothing written.
    p.faulty.reset_log();
    let e = p
        .queue
        .submit("send_email", json!({"to": "a@b.c"}))
        .idempotency_key("mail-2")
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
        Fault::Fail(StoreError::Unavailable("503".into())),
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

// ---- every door ----

/// The handler over `bucket` on `clock`, validating.
fn harness(bucket: &MemoryStore, clock: &ManualClock) -> Harness {
    Harness::with_settings(bucket.clone(), Some(clock), false, on())
}

/// A bucket where `send_email` has its schema, and the handler over it.
async fn with_email_schema() -> (MemoryStore, Harness) {
    let clock = ManualClock::at_epoch();
    let bucket = common::memory_store(&clock);
    bucket
        .put(
            "schemas/send_email.json",
            document(Some(email_schema()), None),
            PutMode::Overwrite,
        )
        .await
        .unwrap();
    let h = harness(&bucket, &clock);
    (bucket, h)
}

fn post(body: Value) -> Value {
    let mut e = common::event("http-v2-post.json");
    e["body"] = json!(body.to_string());
    e
}

#[tokio::test]
async fn post_tasks_answers_400_input_invalid_with_the_failures_as_the_api_document_says() {
    let (_, h) = with_email_schema().await;
    // The handler checks every answer against docs/openapi.yaml.
    let r = h
        .http(post(
            json!({"task_type": "send_email", "input": {"to": ["x"]}, "idempotency_key": "m-1"}),
        ))
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.headers["content-type"], "application/problem+json");
    assert_eq!(r.body["code"], "input_invalid");
    assert_eq!(
        r.body["type"],
        "urn:idempotent-submit:problem:input_invalid"
    );
    assert_eq!(r.body["errors_omitted"], 0);
    let listed = common::openapi::failures(&r.body);
    assert_eq!(
        listed,
        [
            ("".into(), "required".into()),
            ("/to".into(), "type".into())
        ]
    );
    assert!(
        r.body["detail"].as_str().unwrap().starts_with(
            "the input does not match the schema published for task type send_email: 2 failures"
        ),
        "{}",
        r.body
    );
    assert_eq!(h.count("idempotency/").await + h.count("tasks/").await, 0);
    let lines = h.app.metrics.lines();
    assert_eq!(lines.last().unwrap()["InputInvalid"], 1, "{lines:?}");
    // A valid input through the same door: 201.
    let ok = h
        .http(post(
            json!({"task_type": "send_email", "input": {"to": "a@b.c", "subject": "s"}}),
        ))
        .await;
    assert_eq!(ok.status, 201, "{}", ok.body);
}

#[tokio::test]
async fn a_batch_refuses_only_its_invalid_items() {
    let (_, h) = with_email_schema().await;
    let mut e = common::event("http-v2-batch.json");
    e["body"] = json!(json!({"tasks": [
        {"task_type": "send_email", "input": {"to": "a@b.c", "subject": "s"}, "idempotency_key": "b-1"},
        {"task_type": "send_email", "input": {"to": "a@b.c"}, "idempotency_key": "b-2"},
        {"task_type": "other", "input": 1, "idempotency_key": "b-3"},
    ]}).to_string());
    let r = h.http(e).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let results = r.body["results"].as_array().unwrap();
    assert_eq!(results[0]["status_code"], 201);
    assert_eq!(results[1]["code"], "input_invalid", "{}", results[1]);
    assert_eq!(results[1]["status"], 400);
    assert_eq!(results[1]["errors"][0]["keyword"], "required");
    assert_eq!(results[2]["status_code"], 201);
    assert_eq!(h.count("tasks/").await, 2);
}

#[tokio::test]
async fn an_sqs_message_whose_input_is_refused_goes_to_rejected_and_is_not_retried() {
    let (bucket, h) = with_email_schema().await;
    // The sample batch's first three messages; its second is a send_email
    // without a subject.
    let mut batch = common::event("sqs-standard-batch.json");
    batch["Records"].as_array_mut().unwrap().truncate(3);
    let failures = h.sqs(batch).await;
    assert!(failures.is_empty(), "refused, not retried: {failures:?}");
    let rejected: Vec<String> = h
        .keys()
        .await
        .into_iter()
        .filter(|k| k.starts_with("rejected/"))
        .collect();
    assert_eq!(rejected.len(), 1, "{rejected:?}");
    assert!(rejected[0].ends_with("/2e1424d4-f796-459a-8184-9c92662be6da.json"));
    let doc: Value = serde_json::from_slice(&bucket.get(&rejected[0]).await.unwrap().body).unwrap();
    assert_eq!(doc["error"]["code"], "input_invalid");
    assert_eq!(doc["error"]["errors"][0]["pointer"], "");
    assert_eq!(doc["error"]["errors"][0]["keyword"], "required");
    // The other two (other task types) made their tasks; the refused one
    // made no record.
    assert_eq!(h.count("tasks/").await, 2);
    assert_eq!(h.count("idempotency/send_email/").await, 0);
}

#[tokio::test]
async fn an_unusable_schema_is_one_invalid_schema_metric_line_per_invocation() {
    let clock = ManualClock::at_epoch();
    let bucket = common::memory_store(&clock);
    bucket
        .put(
            "schemas/send_email.json",
            Bytes::from_static(b"{\"input\": {\"type\": 5}}"),
            PutMode::Overwrite,
        )
        .await
        .unwrap();
    let h = harness(&bucket, &clock);
    let r = h
        .http(post(
            json!({"task_type": "send_email", "input": {"anything": true}}),
        ))
        .await;
    assert_eq!(r.status, 201, "fail open: {}", r.body);
    let lines = h.app.metrics.lines();
    assert_eq!(lines.last().unwrap()["InvalidSchema"], 1, "{lines:?}");
    let r = h
        .http(post(json!({"task_type": "send_email", "input": 2})))
        .await;
    assert_eq!(r.status, 201);
    assert!(
        h.app
            .metrics
            .lines()
            .iter()
            .filter(|l| l.get("InvalidSchema").is_some())
            .count()
            == 1,
        "cached: not fetched, not counted again within the TTL"
    );
}

/// `idem submit` on moto, with validation on: the bad-input exit code and
/// the failures; nothing written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idem_submit_exits_2_listing_the_failures_of_a_refused_input() {
    let store = common::moto_store().await;
    let bucket = store.bucket().to_owned();
    store
        .put(
            "schemas/send_email.json",
            document(Some(email_schema()), None),
            PutMode::Overwrite,
        )
        .await
        .unwrap();
    let env = [("VALIDATE_INPUT_SCHEMAS", "on")];
    let (code, out) = common::idem(
        &bucket,
        &env,
        &[
            "submit",
            "--type",
            "send_email",
            "--input",
            r#"{"to": 1, "subject": "s"}"#,
            "--key",
            "c-1",
        ],
    )
    .await;
    assert_eq!(code, 2, "{out}");
    assert_eq!(out["error"], "input_invalid");
    assert_eq!(out["errors"][0]["pointer"], "/to");
    assert_eq!(out["errors"][0]["keyword"], "type");
    assert_eq!(out["errors_omitted"], 0);
    assert_eq!(common::all_keys(&store).await, ["schemas/send_email.json"]);
    let (code, out) = common::idem(
        &bucket,
        &env,
        &[
            "submit",
            "--type",
            "send_email",
            "--input",
            r#"{"to": "a@b.c", "subject": "s"}"#,
            "--key",
            "c-1",
        ],
    )
    .await;
    assert_eq!(code, 0, "{out}");
    // Off (the default): the same refused input is accepted.
    let (code, out) = common::idem(
        &bucket,
        &[],
        &["submit", "--type", "send_email", "--input", r#"{"to": 1}"#],
    )
    .await;
    assert_eq!(code, 0, "{out}");
}
