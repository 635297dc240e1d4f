//! A mutation fuzzer on the stable toolchain (cargo-fuzz needs nightly, which
//! this project cannot use): the sample events of events/ are mutated, at the
//! level of JSON structure and of raw bytes, and fed to the `submit` handler
//! over the in-memory store. Nothing may panic, and every answer is checked
//! against its exact effect on the bucket: a 4xx (or a failed invocation)
//! leaves every object byte for byte as it was; a 201 made exactly one task,
//! with the request's input, and its marker; a 200 changed nothing; an SQS
//! batch over a healthy store lists no failures, and each of its messages
//! made a task with its input or a `rejected/` object that names it, and
//! nothing else was written.
//!
//! The same inputs and checks run on SeaweedFS too, fewer of them
//! (`FUZZ_SEAWEEDFS_ITERATIONS`), its buckets listed and read whole for the
//! effects.
//!
//! `FUZZ_ITERATIONS` sets the length (make fuzz runs long), `FUZZ_SEED` the
//! start. A failure prints the seed and the input.

mod mutate;

use mutate::{mutate, random_string};

use crate::common;

use std::panic::AssertUnwindSafe;

use futures::FutureExt;
use idempotent_submit::ManualClock;
use idempotent_submit::lambda::http::parse_key_header;
use idempotent_submit::lambda::{App, handle_submit};
use idempotent_submit::testing::intake::SubmitBody;
use lambda_runtime::{Context, LambdaEvent};
use serde_json::{Value, json};

/// Tenant isolation on for every other input: on, events without a
/// principal are 401s and the rest reach a tenant's namespace; off, they
/// reach the seeded key's. A versioned bucket for every other pair.
fn app(tenant_isolation: bool, versioned: bool) -> (App, idempotent_submit::MemoryStore) {
    let clock = ManualClock::at_epoch();
    let store = if versioned {
        common::memory_store_versioned(&clock)
    } else {
        common::memory_store(&clock)
    };
    let app = common::lambda::app_over(
        store.clone(),
        Some(&clock),
        tenant_isolation,
        common::settings(),
    );
    (app, store)
}

/// Where an input's effects are looked at: the in-memory bucket, or one on
/// a real store (SeaweedFS), listed and read whole.
enum Bucket {
    Memory(idempotent_submit::MemoryStore),
    Real(idempotent_submit::S3Store),
}

impl Bucket {
    /// Every object: key, bytes, ETag, `LastModified`, in key order.
    async fn snapshot(&self) -> Snapshot {
        match self {
            Bucket::Memory(m) => m.snapshot(),
            Bucket::Real(s) => {
                use idempotent_submit::Store as _;
                let mut keys = common::all_keys(s).await;
                keys.sort();
                let mut out = Vec::new();
                for k in keys {
                    let o = s.get(&k).await.expect("reading a listed object");
                    out.push((k, o.body, o.meta.etag, o.meta.last_modified));
                }
                out
            }
        }
    }

    /// Keys whose current version is a delete marker.
    async fn delete_markers(&self) -> Vec<String> {
        match self {
            Bucket::Memory(m) => m.delete_markers(),
            Bucket::Real(s) => s
                .client()
                .list_object_versions()
                .bucket(s.bucket())
                .send()
                .await
                .expect("listing versions")
                .delete_markers()
                .iter()
                .filter(|m| m.is_latest() == Some(true))
                .filter_map(|m| m.key().map(str::to_owned))
                .collect(),
        }
    }
}

/// One input through the handler: what it answered (an HTTP status, `sqs`
/// or `error`), or what went wrong.
async fn check(event: Value, tenant_isolation: bool, versioned: bool) -> Result<String, String> {
    let (app, store) = app(tenant_isolation, versioned);
    check_on(&app, &Bucket::Memory(store), event, tenant_isolation).await
}

/// [`check`] through `app`, on `bucket`.
async fn check_on(
    app: &App,
    store: &Bucket,
    event: Value,
    tenant_isolation: bool,
) -> Result<String, String> {
    // The sample events share a key: with it taken, replays and conflicts
    // are reachable too.
    app.queue
        .submit(
            "charge_customer",
            json!({"order": "ORD-123", "cents": 1999}),
        )
        .idempotency_key("charge-ORD-123")
        .await
        .map_err(|e| e.to_string())?;
    let before = store.snapshot().await;
    let is_sqs = event.get("Records").is_some();
    let request = event.clone();
    let out = AssertUnwindSafe(handle_submit(
        app,
        LambdaEvent::new(event, Context::default()),
    ))
    .catch_unwind()
    .await
    .map_err(|_| "the handler panicked".to_owned())?;
    let Ok(out) = out else {
        // An event of no known shape, or an SQS event that is not one: the
        // invocation fails (Lambda retries or reports it). Nothing written.
        return if store.snapshot().await == before {
            Ok("error".into())
        } else {
            Err("a failed invocation wrote something".into())
        };
    };
    let after = store.snapshot().await;
    let deleted = store.delete_markers().await;
    if !deleted.is_empty() {
        return Err(format!("a submit deleted something: {deleted:?}"));
    }
    let effect = Effect::between(&before, &after)?;
    if is_sqs {
        let failures = out["batchItemFailures"]
            .as_array()
            .ok_or("no batchItemFailures")?;
        if !failures.is_empty() {
            return Err(format!("a healthy store, yet failures: {failures:?}"));
        }
        effect.of_batch(&request, &after)?;
        return Ok("sqs".into());
    }
    // Every HTTP answer, whatever the input, is one docs/openapi.yaml
    // describes.
    common::openapi::try_check(&request, &out)?;
    let status = out["statusCode"].as_u64().ok_or("no statusCode")?;
    let answer: Option<Value> = serde_json::from_str(out["body"].as_str().unwrap_or("")).ok();
    if status == 200
        && let Some(results) = answer.as_ref().and_then(|a| a.get("results"))
    {
        effect.of_batch_results(&request, results)?;
        return Ok("batch".into());
    }
    match status {
        201 => {
            let answer: Value = serde_json::from_str(out["body"].as_str().unwrap_or(""))
                .map_err(|e| format!("a 201 without a JSON body: {e}"))?;
            effect.of_created(&request, &answer)?;
            Ok("201".into())
        }
        401 if !tenant_isolation => Err("a 401 with tenant isolation off".into()),
        200 | 400 | 401 | 404 | 405 | 413 | 415 | 422 => {
            if effect.created.is_empty() {
                Ok(status.to_string())
            } else {
                Err(format!("a {status} wrote {:?}", effect.created))
            }
        }
        s => Err(format!("status {s} for some input: {out}")),
    }
}

/// Two rejected objects that say the same but for `rejected_at`.
fn same_rejection(a: &[u8], b: &[u8]) -> bool {
    let without_time = |x: &[u8]| {
        let mut v: Value = serde_json::from_slice(x).unwrap_or(Value::Null);
        if let Some(o) = v.as_object_mut() {
            o.remove("rejected_at");
        }
        v
    };
    without_time(a) == without_time(b)
}

/// What a call did to the bucket: the objects it created. Any change to an
/// object that was there is an error at once.
struct Effect {
    created: Vec<(String, Value)>,
}

type Snapshot = Vec<(
    String,
    bytes::Bytes,
    idempotent_submit::store::ETag,
    chrono::DateTime<chrono::Utc>,
)>;

impl Effect {
    fn between(before: &Snapshot, after: &Snapshot) -> Result<Effect, String> {
        let old: std::collections::HashMap<&str, (&bytes::Bytes, &chrono::DateTime<chrono::Utc>)> =
            before
                .iter()
                .map(|(k, b, _, t)| (k.as_str(), (b, t)))
                .collect();
        let mut created = Vec::new();
        for (k, _, _, _) in before {
            if !after.iter().any(|(a, _, _, _)| a == k) {
                return Err(format!("{k} was deleted"));
            }
        }
        for (k, body, _, modified) in after {
            match old.get(k.as_str()) {
                // The same message rejected again (two inputs of one bucket
                // that carry it): this input's rejection, the same as the
                // first but for its time.
                Some((b, t))
                    if k.starts_with("rejected/") && *t != modified && same_rejection(b, body) =>
                {
                    created.push((
                        k.clone(),
                        serde_json::from_slice(body).unwrap_or(Value::Null),
                    ));
                }
                Some((b, _)) if *b == body => {}
                Some(_) => return Err(format!("{k} was rewritten")),
                None => created.push((
                    k.clone(),
                    serde_json::from_slice(body).unwrap_or(Value::Null),
                )),
            }
        }
        Ok(Effect { created })
    }

    /// A created task's input: inline, or its payload's.
    fn input_of(&self, task: &Value) -> Value {
        match task.get("input_ref").and_then(Value::as_str) {
            Some(r) => self
                .created
                .iter()
                .find(|(k, _)| k == r)
                .map_or(Value::Null, |(_, p)| p.clone()),
            None => task["input"].clone(),
        }
    }

    fn under<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = &'a (String, Value)> + 'a {
        self.created
            .iter()
            .filter(move |(k, _)| k.starts_with(prefix))
    }

    /// A 201: exactly one new task, the answered one, with the request's
    /// type and input, and its marker; at most its record besides.
    fn of_created(&self, request: &Value, answer: &Value) -> Result<(), String> {
        let tasks: Vec<_> = self.under("tasks/").collect();
        let [(key, task)] = tasks.as_slice() else {
            return Err(format!("a 201 made {} tasks", tasks.len()));
        };
        let id = answer["task_id"].as_str().unwrap_or("-");
        if task["id"] != id {
            return Err(format!("a 201 answered {id}, but made {key}"));
        }
        let body = http_body(request).ok_or("a 201 for a body that is not JSON")?;
        // An offloaded input is in its payload, and only there.
        let payloads: Vec<_> = self.under("payloads/").collect();
        let input = match task.get("input_ref").and_then(Value::as_str) {
            Some(r) => {
                let [(k, p)] = payloads.as_slice() else {
                    return Err(format!("an offloaded 201 wrote payloads {payloads:?}"));
                };
                if k != r || !task["input"].is_null() {
                    return Err(format!("a 201's input_ref {r} beside {k}"));
                }
                p.clone()
            }
            None if !payloads.is_empty() => {
                return Err(format!("an inline 201 wrote payloads {payloads:?}"));
            }
            None => task["input"].clone(),
        };
        if input != body["input"] || task["task_type"] != body["task_type"] {
            return Err(format!(
                "a 201 made {} {}, asked {} {}",
                task["task_type"], task["input"], body["task_type"], body["input"]
            ));
        }
        let markers: Vec<_> = self.under("ready/").collect();
        if markers.len() != 1 || !markers[0].0.ends_with(id) {
            return Err(format!("a 201's markers: {markers:?}"));
        }
        let others = self.created.len()
            - 2
            - self.under("idempotency/").count()
            - self.under("payloads/").count();
        if others != 0 {
            return Err(format!("a 201 also wrote {:?}", self.created));
        }
        Ok(())
    }

    /// A `POST /tasks/batch` answer: each 201 result made exactly one task,
    /// the answered one, with its item's type and input, and its marker; no
    /// other task was made; at most one record per new task besides.
    fn of_batch_results(&self, request: &Value, results: &Value) -> Result<(), String> {
        let results = results.as_array().ok_or("results is not a list")?;
        let body = http_body(request).ok_or("a batch answered for a body that is not JSON")?;
        let items = body["tasks"]
            .as_array()
            .ok_or("a batch answered without tasks")?;
        if items.len() != results.len() {
            return Err(format!("{} items, {} results", items.len(), results.len()));
        }
        let mut made = 0;
        for (item, r) in items.iter().zip(results) {
            if r["status_code"] != 201 {
                continue;
            }
            made += 1;
            let id = r["task_id"].as_str().unwrap_or("-");
            let Some((key, task)) = self.under("tasks/").find(|(_, t)| t["id"] == id) else {
                return Err(format!("a 201 result answered {id}, which was not made"));
            };
            if self.input_of(task) != item["input"] || task["task_type"] != item["task_type"] {
                return Err(format!("{key} is not its item's: {item}"));
            }
            if !self.under("ready/").any(|(k, _)| k.ends_with(id)) {
                return Err(format!("{key} has no marker"));
            }
        }
        let tasks = self.under("tasks/").count();
        if tasks != made {
            return Err(format!("{made} results were 201, {tasks} tasks were made"));
        }
        let records = self.under("idempotency/").count();
        let payloads = self.under("payloads/").count();
        if records > made || self.created.len() != 2 * made + records + payloads {
            return Err(format!("the batch also wrote {:?}", self.created));
        }
        Ok(())
    }

    /// An SQS batch: each message made a task with its type and input (new,
    /// or its key's) or a `rejected/` object that names it; each new task
    /// was asked for by a message, with its marker; nothing else.
    fn of_batch(&self, event: &Value, after: &Snapshot) -> Result<(), String> {
        let messages = event["Records"].as_array().cloned().unwrap_or_default();
        // Every rejected object in the bucket: an earlier input of the same
        // bucket may have rejected the same message, identically.
        let rejected: Vec<Value> = after
            .iter()
            .filter(|(k, _, _, _)| k.starts_with("rejected/"))
            .map(|(_, b, _, _)| serde_json::from_slice(b).unwrap_or(Value::Null))
            .collect();
        let tasks: Vec<Value> = after
            .iter()
            .filter(|(k, _, _, _)| k.starts_with("tasks/"))
            .map(|(_, b, _, _)| {
                let mut t: Value = serde_json::from_slice(b).unwrap_or(Value::Null);
                // An offloaded input, read back from its payload.
                if let Some(r) = t.get("input_ref").and_then(Value::as_str)
                    && let Some((_, p, _, _)) = after.iter().find(|(k, _, _, _)| k == r)
                {
                    t["input"] = serde_json::from_slice(p).unwrap_or(Value::Null);
                }
                t
            })
            .collect();
        let mut accepted = Vec::new();
        for m in &messages {
            // The message as the handler reads it (serde takes an array for
            // a struct too, field by field).
            let m: aws_lambda_events::sqs::SqsMessage = serde_json::from_value(m.clone())
                .map_err(|e| format!("a batch answered, with a message it cannot read: {e}"))?;
            let id = m.message_id.clone().unwrap_or_default();
            // SQS never puts one id twice in a batch; a mutated batch can,
            // and then the rejections share one object: match by id (a
            // missing id is the empty one, as the handler names it).
            let was_rejected = rejected
                .iter()
                .any(|r| r["message"]["messageId"].as_str().unwrap_or("") == id);
            let body: Option<Value> = m.body.as_deref().and_then(|b| serde_json::from_str(b).ok());
            let made_task = body.as_ref().is_some_and(|body| {
                tasks
                    .iter()
                    .any(|t| t["input"] == body["input"] && t["task_type"] == body["task_type"])
            });
            match body {
                Some(body) if made_task => accepted.push(body),
                _ if was_rejected => {}
                _ => return Err(format!("message {id:?} made no task and was not rejected")),
            }
        }
        for (key, task) in self.under("tasks/") {
            if !accepted
                .iter()
                .any(|b| self.input_of(task) == b["input"] && task["task_type"] == b["task_type"])
            {
                return Err(format!("{key} was asked for by no message"));
            }
            let id = task["id"].as_str().unwrap_or("-");
            if !self.under("ready/").any(|(k, _)| k.ends_with(id)) {
                return Err(format!("{key} has no marker"));
            }
        }
        let accounted = self.under("tasks/").count() * 2
            + self.under("idempotency/").count()
            + self.under("rejected/").count();
        if accounted != self.created.len() {
            return Err(format!("the batch also wrote {:?}", self.created));
        }
        Ok(())
    }
}

/// The JSON body of an HTTP event (base64-decoded when it says so).
fn http_body(event: &Value) -> Option<Value> {
    use base64::Engine as _;
    let raw = event["body"].as_str()?;
    if event["isBase64Encoded"] == json!(true) {
        let bytes = base64::engine::general_purpose::STANDARD.decode(raw).ok()?;
        serde_json::from_slice(&bytes).ok()
    } else {
        serde_json::from_str(raw).ok()
    }
}

/// The `i`th input from `seed`: a sample event, mutated one to three times.
fn mutated(corpus: &[Value], seed: u64, i: u64) -> Value {
    let mut rng = fastrand::Rng::with_seed(seed.wrapping_add(i));
    let mut event = corpus[rng.usize(..corpus.len())].clone();
    for _ in 0..rng.usize(1..4) {
        mutate(&mut event, &mut rng, 0);
    }
    event
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn mutated_events_never_panic_and_bad_input_writes_nothing() {
    let iterations = env_u64("FUZZ_ITERATIONS", 10_000);
    let seed = env_u64("FUZZ_SEED", 0xf022);
    let corpus = common::events::every_event();
    assert!(corpus.len() >= 10);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let mut seen = std::collections::BTreeMap::<String, u64>::new();
    for i in 0..iterations {
        let event = mutated(&corpus, seed, i);
        let shown = event.to_string();
        let n = seed.wrapping_add(i);
        match rt.block_on(check(event, n % 2 == 1, n / 2 % 2 == 1)) {
            Ok(what) => *seen.entry(what).or_default() += 1,
            Err(e) => {
                let shown: String = shown.chars().take(4000).collect();
                panic!(
                    "FUZZ_SEED={} FUZZ_ITERATIONS=1: {e}\ninput: {shown}",
                    seed.wrapping_add(i)
                );
            }
        }
    }
    eprintln!("fuzz: {iterations} inputs, answered {seen:?}");
    if iterations >= 1000 {
        // The mutations reach past the parser into every kind of answer.
        for what in [
            "200", "201", "400", "401", "404", "405", "415", "422", "sqs", "error", "batch",
        ] {
            assert!(
                seen.contains_key(what),
                "no input was answered {what}: {seen:?}"
            );
        }
    }
}

/// Inputs a SeaweedFS bucket takes before the next one (each input's
/// effects are read off the whole bucket).
const INPUTS_PER_BUCKET: u64 = 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutated_events_on_seaweedfs_never_panic_and_bad_input_writes_nothing() {
    let iterations = env_u64("FUZZ_SEAWEEDFS_ITERATIONS", 200);
    let seed = env_u64("FUZZ_SEED", 0xf022);
    let corpus = common::events::every_event();
    let mut settings = common::settings();
    settings.retry.attempt_timeout = std::time::Duration::from_secs(10);
    let mut seen = std::collections::BTreeMap::<String, u64>::new();
    let mut buckets = None;
    for i in 0..iterations {
        if i % INPUTS_PER_BUCKET == 0 {
            buckets = Some((
                common::seaweedfs_store().await,
                common::seaweedfs_store_versioned().await,
            ));
        }
        let Some((plain, versioned)) = &buckets else {
            unreachable!()
        };
        let n = seed.wrapping_add(i);
        let (tenant_isolation, store) =
            (n % 2 == 1, if n / 2 % 2 == 1 { versioned } else { plain });
        // The system's clock: SeaweedFS stamps its own time.
        let app = common::lambda::app_over(store.clone(), None, tenant_isolation, settings.clone());
        let event = mutated(&corpus, seed, i);
        let shown = event.to_string();
        match check_on(&app, &Bucket::Real(store.clone()), event, tenant_isolation).await {
            Ok(what) => *seen.entry(what).or_default() += 1,
            Err(e) => {
                let shown: String = shown.chars().take(4000).collect();
                panic!(
                    "on SeaweedFS, FUZZ_SEED={n} FUZZ_SEAWEEDFS_ITERATIONS=1: {e}\ninput: {shown}"
                );
            }
        }
    }
    eprintln!("fuzz on SeaweedFS: {iterations} inputs, answered {seen:?}");
    if iterations >= 200 {
        // Past the parser, into writes: new tasks, replays and conflicts,
        // and SQS batches.
        for what in ["200", "201", "400", "422", "sqs"] {
            assert!(
                seen.contains_key(what),
                "no input was answered {what}: {seen:?}"
            );
        }
    }
}

#[test]
fn random_bodies_and_key_headers_never_panic() {
    let mut rng = fastrand::Rng::with_seed(7);
    for _ in 0..20_000 {
        let n = rng.usize(0..64);
        let bytes: Vec<u8> = (0..n).map(|_| rng.u8(..)).collect();
        let _ = SubmitBody::parse(&bytes);
        let text = String::from_utf8_lossy(&bytes);
        let _ = parse_key_header(&text);
        let s = random_string(&mut rng);
        let _ = parse_key_header(&s);
        let _ = SubmitBody::parse(s.as_bytes());
    }
    // And the parser accepts what it should, so the loop above was not
    // rejecting everything for a trivial reason.
    assert!(SubmitBody::parse(br#"{"task_type":"t","input":1}"#).is_ok());
    assert_eq!(parse_key_header("\"k\"").unwrap(), "k");
}
