//! Inputs checked against the JSON Schema published for their task type
//! (`VALIDATE_INPUT_SCHEMAS`, src/protocol/schema.rs): valid, invalid,
//! absent and unusable schemas; the process's cache, its TTL and its
//! revalidation by conditional GET (on an injected clock, requests counted
//! with the fault injector's call log); the key's promise when the schema
//! changed; and every door: the Rust API, `POST /tasks`, `POST
//! /tasks/batch`, SQS (`rejected/`) and `idem submit`.

mod changes;
mod doors;

use crate::common;

use std::sync::Arc;

use crate::common::handler::Harness;
use bytes::Bytes;
use idempotent_submit::store::{Fault, FaultyStore, MemoryStore, Op, PutMode, Store, StoreError};
use idempotent_submit::testing::protocol::{ErrorKind, InputError};
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

    /// A keyless submit of `send_email` (the type of [`email_schema`]).
    async fn email(&self, input: Value) -> Result<bool, SubmitError> {
        self.send("send_email", input).await
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
        b.email(json!({"to": "a@example.com", "subject": "hi"}))
            .await,
        Ok(true)
    );
    let before = b.bucket.snapshot();
    let e = b
        .email(json!({"to": 7, "subject": "x".repeat(30), "priority": 0}))
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
    let missing = refusal(b.email(json!({"to": "a@b.c"})).await.unwrap_err()).1;
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
        b.email(json!({"to": "not an address", "subject": "s"}))
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
