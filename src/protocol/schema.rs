//! Inputs checked against their task type's published JSON Schema
//! (`VALIDATE_INPUT_SCHEMAS=on`), before a submit writes anything
//! (docs/protocol.md, "Inputs checked against the task type's schema").
//!
//! buquet keeps one schema document per task type at
//! `schemas/{task_type}.json`, `{"input": <JSON Schema>, "output": <JSON
//! Schema>}`, each part optional (its `publish_schema` and `buquet schema
//! publish` write it; its submit never reads it). This module reads the
//! `input` part, caches it per process, and checks inputs with the
//! `jsonschema` crate under Draft 2020-12, as buquet's own `validate_input`
//! does, so that the front door and a worker that validates agree on every
//! input.
//!
//! The cache holds one entry per task type, an absent schema included, and
//! trusts it for `SCHEMA_CACHE_SECONDS` (by the engine's clock); then the
//! next submit of the type revalidates it with a conditional GET
//! (`If-None-Match` its ETag: S3 answers 304 and no body while it is
//! unchanged). A warm process within the TTL makes no request for it; a cold
//! one makes one GET per task type it has not seen. Concurrent submits of one
//! type wait for one fetch (single-flight: a lock per type held across it).
//!
//! A document that is not JSON, not an object, or whose `input` is not a
//! valid JSON Schema is logged and counted at every fetch, and then treated
//! as absent: validation is an extra guard, and a typo in a published schema
//! must not become an outage of its task type (the README, "Input schemas").

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Duration, Utc};
use serde_json::Value;

use super::error::{
    Failure, InputError, MAX_DETAIL_CHARS, MAX_LISTED_ERRORS, MAX_POINTER_CHARS, SubmitError,
};
use super::names::{TaskType, ValidationError};
use crate::clock::Clock;
use crate::store::{ETag, Object, StoreError};
/// At most this many task types are cached: task types are the caller's to
/// name, and a process must not grow without bound however many it is sent.
const MAX_CACHED_TYPES: usize = 1024;

/// Where buquet keeps a task type's schema document.
pub fn schema_key(task_type: &str) -> String {
    format!("schemas/{task_type}.json")
}

/// `s` cut to at most `max` characters (on a character boundary), with `…`
/// where it was cut.
fn bounded(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        None => s.to_owned(),
        Some((i, _)) => {
            let mut out = s[..i].to_owned();
            // The ellipsis takes the last place, so the result is `max` long.
            out.pop();
            out.push('…');
            out
        }
    }
}

/// A validator's failure as an answer lists it.
fn input_error(e: &jsonschema::ValidationError<'_>) -> InputError {
    InputError {
        pointer: bounded(&e.instance_path().to_string(), MAX_POINTER_CHARS),
        keyword: bounded(e.kind().keyword(), MAX_POINTER_CHARS),
        // Masked: the rule, with "value" where the input's value would be
        // (an input's string can be as long as the input).
        detail: bounded(&e.masked().to_string(), MAX_DETAIL_CHARS),
    }
}

/// A schema document, as far as a submit cares.
#[derive(Clone)]
enum Compiled {
    /// No document, or one without an `input` schema: every input passes.
    Nothing,
    /// A document that cannot be used (why): every input passes, and the
    /// fetch that found it logs and counts it.
    Unusable(Arc<str>),
    /// The input schema.
    Input(Arc<jsonschema::Validator>),
}

/// What buquet's `TaskSchema` reads from the document: both parts
/// optional, other members ignored.
#[derive(serde::Deserialize)]
struct Document {
    #[serde(default)]
    input: Option<Value>,
}

/// The document's `input` schema, compiled. No retrieval of any kind: the
/// crate is built without its HTTP and file resolvers, and the validator is
/// told to stay offline, so a `$ref` to anything outside the document makes
/// the schema unusable rather than a request.
fn compile(body: &[u8]) -> Compiled {
    let doc: Document = match serde_json::from_slice(body) {
        Ok(d) => d,
        Err(e) => {
            return Compiled::Unusable(
                bounded(
                    &format!("the document is not a JSON object of the form {{\"input\": <JSON Schema>, \"output\": <JSON Schema>}}: {e}"),
                    2 * MAX_DETAIL_CHARS,
                )
                .into(),
            );
        }
    };
    let Some(input) = doc.input else {
        return Compiled::Nothing;
    };
    match jsonschema::draft202012::options().offline().build(&input) {
        Ok(v) => Compiled::Input(Arc::new(v)),
        Err(e) => Compiled::Unusable(
            bounded(
                &format!("`input` is not a valid JSON Schema (Draft 2020-12): {e}"),
                2 * MAX_DETAIL_CHARS,
            )
            .into(),
        ),
    }
}

/// One task type's cached document.
#[derive(Clone)]
struct Entry {
    /// When it was read or last revalidated, by the engine's clock.
    checked_at: DateTime<Utc>,
    /// The document's ETag; `None` when there was no document.
    etag: Option<ETag>,
    schema: Compiled,
}

/// A task type's place in the cache: its lock is held across a fetch, so
/// that concurrent submits of one type make one request.
type Slot = Arc<tokio::sync::Mutex<Option<Entry>>>;

/// The process's schema documents, by task type. Shared by every clone of
/// an engine.
#[derive(Default)]
pub(crate) struct SchemaCache {
    slots: Mutex<HashMap<String, Slot>>,
    /// Fetches that found an unusable document, not yet taken for a metric.
    unusable: AtomicU64,
}

impl SchemaCache {
    fn slot(&self, task_type: &str, fresh: impl Fn(&Entry) -> bool) -> Slot {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = slots.get(task_type) {
            return s.clone();
        }
        if slots.len() >= MAX_CACHED_TYPES {
            // Keep the entries still fresh (a slot being fetched is kept
            // too); if every one is, start over. A dropped slot costs its
            // type one more GET, never a wrong answer.
            slots.retain(|_, s| {
                s.try_lock()
                    .map_or(true, |e| e.as_ref().is_some_and(&fresh))
            });
            if slots.len() >= MAX_CACHED_TYPES {
                slots.clear();
            }
        }
        slots.entry(task_type.to_owned()).or_default().clone()
    }

    /// How many fetches found an unusable schema document since the last
    /// call (for the `InvalidSchema` metric).
    pub(crate) fn take_unusable(&self) -> u64 {
        self.unusable.swap(0, Ordering::Relaxed)
    }

    /// Checks `input` (canonical JSON) against `task_type`'s published
    /// schema, read with `read(key, etag)` (a GET, or with an ETag a
    /// conditional GET) when the cached copy is older than `ttl` by `clock`.
    /// Writes nothing. `InputInvalid` lists the failures; a type without a
    /// (usable) schema passes; a document that cannot be read is the storage
    /// failure it met (unless an earlier copy is cached, which is then used).
    pub(crate) async fn check<R, Fut>(
        &self,
        task_type: &TaskType,
        input: &str,
        clock: &dyn Clock,
        ttl: Duration,
        read: R,
    ) -> Result<(), SubmitError>
    where
        R: FnOnce(String, Option<ETag>) -> Fut,
        Fut: Future<Output = Result<Object, Failure>>,
    {
        let Compiled::Input(validator) = self.input_schema(task_type, clock, ttl, read).await?
        else {
            return Ok(());
        };
        // The canonical form is JSON by construction; the parse is only paid
        // for a type that has a schema.
        let value: Value = serde_json::from_str(input)
            .map_err(|e| ValidationError::field("input", e.to_string()))?;
        if validator.is_valid(&value) {
            return Ok(());
        }
        let mut errors = Vec::new();
        let mut omitted = 0;
        for e in validator.iter_errors(&value) {
            if errors.len() < MAX_LISTED_ERRORS {
                errors.push(input_error(&e));
            } else {
                omitted += 1;
            }
        }
        Err(SubmitError::InputInvalid {
            task_type: task_type.to_string(),
            errors,
            omitted,
        })
    }

    /// The task type's document: from the cache while it is fresh, else read
    /// (a GET) or revalidated (a conditional GET, 304 while unchanged).
    async fn input_schema<R, Fut>(
        &self,
        task_type: &TaskType,
        clock: &dyn Clock,
        ttl: Duration,
        read: R,
    ) -> Result<Compiled, SubmitError>
    where
        R: FnOnce(String, Option<ETag>) -> Fut,
        Fut: Future<Output = Result<Object, Failure>>,
    {
        let fresh = |e: &Entry, now: DateTime<Utc>| e.checked_at <= now && now < e.checked_at + ttl;
        let now = clock.now();
        let slot = self.slot(task_type.as_str(), |e| fresh(e, now));
        let mut cached = slot.lock().await;
        // Another submit of the type may have fetched it while we waited.
        let now = clock.now();
        if let Some(e) = cached.as_ref().filter(|e| fresh(e, now)) {
            return Ok(e.schema.clone());
        }
        let key = schema_key(task_type.as_str());
        let previous = cached.take();
        let etag = previous.as_ref().and_then(|e| e.etag.clone());
        let read = read(key.clone(), etag).await;
        let entry = match (read, previous) {
            (Ok(obj), _) => Entry {
                checked_at: now,
                etag: Some(obj.meta.etag),
                schema: compile(&obj.body),
            },
            (Err(Failure::Store(StoreError::NotModified)), Some(prev)) => Entry {
                checked_at: now,
                ..prev
            },
            (Err(Failure::Store(StoreError::NotFound)), _) => Entry {
                checked_at: now,
                etag: None,
                schema: Compiled::Nothing,
            },
            // Revalidation failed: the copy we have is the best there is for
            // another TTL (a schema's change reaches a process within a TTL
            // at best anyway), and the submit goes on.
            (Err(e), Some(prev)) => {
                tracing::warn!(schema = %key, error = ?e, "could not revalidate a cached schema; using the cached copy");
                Entry {
                    checked_at: now,
                    ..prev
                }
            }
            // Nothing cached and nothing read: the submit fails as any storage
            // failure does (a 304 without a cached copy cannot happen: no
            // ETag was sent).
            (Err(e), None) => return Err(e.into()),
        };
        if let Compiled::Unusable(why) = &entry.schema {
            self.unusable.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                schema = %key,
                task_type = %task_type,
                etag = ?entry.etag,
                reason = %why,
                "the published schema is unusable; inputs of this task type are not checked"
            );
        }
        let schema = entry.schema.clone();
        *cached = Some(entry);
        Ok(schema)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_cuts_on_a_character_boundary_and_marks_the_cut() {
        assert_eq!(bounded("abc", 3), "abc");
        assert_eq!(bounded("abcd", 3), "ab…");
        assert_eq!(bounded("ééééé", 4), "ééé…");
        assert_eq!(bounded("", 0), "");
    }

    #[test]
    fn a_task_types_schema_is_where_buquet_keeps_it() {
        assert_eq!(schema_key("send_email"), "schemas/send_email.json");
    }

    #[test]
    fn an_unusable_documents_reason_says_why_within_its_bound() {
        let reason = |body: &[u8]| match compile(body) {
            Compiled::Unusable(why) => why.to_string(),
            _ => panic!("{} is unusable", String::from_utf8_lossy(body)),
        };
        assert!(reason(b"not json").starts_with("the document is not a JSON object"));
        // serde_json quotes a string it did not expect whole: the reason is
        // cut to twice a detail's bound, its last place the mark of the cut.
        let long = reason(format!("\"{}\"", "a".repeat(4 * MAX_DETAIL_CHARS)).as_bytes());
        assert_eq!(long.chars().count(), 2 * MAX_DETAIL_CHARS);
        assert!(long.ends_with('…'));
        // And so is the validator's, which quotes the value it refused.
        let doc = format!(
            r#"{{"input": {{"type": "{}"}}}}"#,
            "a".repeat(4 * MAX_DETAIL_CHARS)
        );
        let long = reason(doc.as_bytes());
        assert!(
            long.starts_with("`input` is not a valid JSON Schema"),
            "{long}"
        );
        assert_eq!(long.chars().count(), 2 * MAX_DETAIL_CHARS);
    }

    #[test]
    fn a_cache_under_its_bound_drops_no_task_type() {
        let c = SchemaCache::default();
        c.slot("a", |_| false);
        c.slot("b", |_| false);
        assert!(c.slots.lock().unwrap().contains_key("a"));
    }

    /// A schema document as a read of `key` answers it.
    fn published(key: String, body: &'static [u8]) -> Object {
        Object {
            body: body.into(),
            meta: crate::store::ObjectMeta {
                key,
                etag: ETag("\"1\"".into()),
                last_modified: DateTime::<Utc>::default(),
                size: body.len() as u64,
                version_id: None,
            },
        }
    }

    #[tokio::test]
    async fn a_copy_is_used_for_its_ttl_and_each_unusable_one_fetched_is_counted_once() {
        let c = SchemaCache::default();
        let clock = crate::clock::ManualClock::at_epoch();
        let t0 = clock.now();
        let task_type = TaskType::parse("t").unwrap();
        let reads = AtomicU64::new(0);
        // A read answering this body; `None`: 304 Not Modified when asked
        // with an ETag, else a failure.
        let read = |body: Option<&'static [u8]>| {
            let reads = &reads;
            move |key: String, etag: Option<ETag>| {
                reads.fetch_add(1, Ordering::Relaxed);
                async move {
                    let Some(body) = body else {
                        return Err(match etag {
                            Some(_) => Failure::Store(StoreError::NotModified),
                            None => Failure::Deadline,
                        });
                    };
                    Ok(published(key, body))
                }
            }
        };
        let reads = || reads.load(Ordering::Relaxed);
        let ttl = Duration::seconds(60);
        let schema = br#"{"input": {"type": "array", "items": {"type": "string"}}}"#;

        c.check(&task_type, "[]", &clock, ttl, read(Some(b"not json")))
            .await
            .unwrap();
        assert_eq!((reads(), c.take_unusable(), c.take_unusable()), (1, 1, 0));
        // Fresh until its TTL is out: not read again.
        clock.set(t0 + ttl - Duration::seconds(1));
        c.check(&task_type, "[1]", &clock, ttl, read(None))
            .await
            .unwrap();
        assert_eq!(reads(), 1);
        // At its TTL it is read again; this document is usable.
        clock.set(t0 + ttl);
        c.check(&task_type, "[]", &clock, ttl, read(Some(schema)))
            .await
            .unwrap();
        assert_eq!((reads(), c.take_unusable()), (2, 0));
        // The fresh copy checks the next input, listing its first failures
        // and counting the rest.
        let n = MAX_LISTED_ERRORS + 3;
        let input = serde_json::to_string(&(0..n).collect::<Vec<_>>()).unwrap();
        match c.check(&task_type, &input, &clock, ttl, read(None)).await {
            Err(SubmitError::InputInvalid {
                errors, omitted, ..
            }) => {
                assert_eq!((errors.len(), omitted), (MAX_LISTED_ERRORS, 3));
                assert_eq!(errors[0].pointer, "/0");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(reads(), 2);
        // A clock set back before the copy's check is no reason to trust it.
        clock.set(t0);
        c.check(&task_type, "[1]", &clock, ttl, read(Some(b"{}")))
            .await
            .unwrap();
        assert_eq!(reads(), 3);
        // A 304 makes the copy fresh for another TTL.
        clock.set(t0 + ttl);
        c.check(&task_type, "[1]", &clock, ttl, read(None))
            .await
            .unwrap();
        clock.set(t0 + ttl + ttl - Duration::seconds(1));
        c.check(&task_type, "[1]", &clock, ttl, read(None))
            .await
            .unwrap();
        assert_eq!(reads(), 4);
    }

    #[tokio::test]
    async fn a_copy_whose_revalidation_failed_is_used_for_another_ttl_without_a_read() {
        let c = SchemaCache::default();
        let clock = crate::clock::ManualClock::at_epoch();
        let t0 = clock.now();
        let task_type = TaskType::parse("t").unwrap();
        let ttl = Duration::seconds(60);
        let reads = AtomicU64::new(0);
        // Every read fails but the first: an outage after one fetch.
        let read = |key: String, _| {
            let first = reads.fetch_add(1, Ordering::Relaxed) == 0;
            async move {
                if !first {
                    return Err(Failure::Store(StoreError::Unavailable("outage".into())));
                }
                Ok(published(key, br#"{"input": {"type": "array"}}"#))
            }
        };
        c.check(&task_type, "[]", &clock, ttl, read).await.unwrap();
        clock.set(t0 + ttl);
        // The outage: the cached copy still checks the input.
        let refused = c.check(&task_type, "{}", &clock, ttl, read).await;
        assert!(matches!(refused, Err(SubmitError::InputInvalid { .. })));
        assert_eq!(reads.load(Ordering::Relaxed), 2);
        // Not a GET per submit during the outage: one per TTL.
        clock.set(t0 + ttl + ttl - Duration::seconds(1));
        c.check(&task_type, "[]", &clock, ttl, read).await.unwrap();
        assert_eq!(reads.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn a_document_without_an_input_schema_checks_nothing() {
        assert!(matches!(
            compile(br#"{"output": {"type": "object"}}"#),
            Compiled::Nothing
        ));
        assert!(matches!(compile(br#"{"input": null}"#), Compiled::Nothing));
        assert!(matches!(compile(b"{}"), Compiled::Nothing));
    }

    #[test]
    fn documents_that_are_not_schemas_are_unusable() {
        for body in [
            &b"not json"[..],
            b"[1, 2]",
            br#"{"input": {"type": "strin"}}"#,
            br#"{"input": {"minimum": "five"}}"#,
            br#"{"input": {"$ref": "https://example.com/elsewhere.json"}}"#,
            br#"{"input": {"pattern": "("}}"#,
            br#"{"input": 42}"#,
        ] {
            assert!(
                matches!(compile(body), Compiled::Unusable(_)),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn the_cache_keeps_at_most_its_bound_of_task_types_and_keeps_fresh_ones() {
        let c = SchemaCache::default();
        let len = || c.slots.lock().unwrap().len();
        for i in 0..3 * MAX_CACHED_TYPES {
            c.slot(&format!("t{i}"), |_| false);
            assert!(len() <= MAX_CACHED_TYPES);
        }
        // Fresh entries survive a full cache; stale or empty ones make room.
        let c = SchemaCache::default();
        for i in 0..MAX_CACHED_TYPES {
            let slot = c.slot(&format!("t{i}"), |_| true);
            if i % 2 == 0 {
                *slot.try_lock().unwrap() = Some(Entry {
                    checked_at: DateTime::<Utc>::default(),
                    etag: None,
                    schema: Compiled::Nothing,
                });
            }
        }
        c.slot("new", |_| true);
        assert_eq!(c.slots.lock().unwrap().len(), MAX_CACHED_TYPES / 2 + 1);
        assert!(c.slots.lock().unwrap().contains_key("t0"));
        assert!(!c.slots.lock().unwrap().contains_key("t1"));
    }

    #[test]
    fn a_self_referencing_schema_compiles_and_checks() {
        let Compiled::Input(v) = compile(
            br##"{"input": {"type": "object", "properties": {"child": {"$ref": "#"}}, "required": ["id"]}}"##,
        ) else {
            panic!("a recursive schema is a schema");
        };
        assert!(v.is_valid(&serde_json::json!({"id": 1, "child": {"id": 2}})));
        assert!(!v.is_valid(&serde_json::json!({"id": 1, "child": {}})));
    }
}
