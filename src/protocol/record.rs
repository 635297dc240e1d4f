//! The objects of the bucket layout: the idempotency record, the task object
//! (buquet 0.1's schema) and the paths they live at.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use uuid::Uuid;

use super::retry_policy::TaskRetryPolicy;
use super::rfc3339;
use super::task_options::TaskFields;

/// `status` of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RecordStatus {
    /// A submit is in flight, or was interrupted: `pending_task` says what to
    /// finish.
    Creating,
    /// Written by earlier versions of this service once the task object and
    /// its marker were seen. Read, never written any more.
    Ready,
}

/// `idempotency/{scope}/{hex of key_hash}.json`.
///
/// `status`, `write_id`, `scope`, `tenant` and `pending_task` are optional on
/// reading: buquet's own clients write records without them.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    /// The producer's key.
    pub key: String,
    /// `sha256:` of the scope, the key and the tenant.
    pub key_hash: String,
    /// The scope (this service's records only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// The task the key maps to.
    pub task_id: Uuid,
    /// Its object's key.
    pub task_key: String,
    /// Its task type.
    pub task_type: String,
    /// `sha256:` of the input's canonical JSON.
    pub input_hash: String,
    /// `creating` (this service's records), `ready` (earlier versions').
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<RecordStatus>,
    /// When it was written (S3's time, whole seconds).
    #[serde(with = "rfc3339")]
    pub created_at: DateTime<Utc>,
    /// When the key is forgotten.
    #[serde(with = "rfc3339")]
    pub expires_at: DateTime<Utc>,
    /// The writing submit's own id: how a retry knows its own record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_id: Option<Uuid>,
    /// The tenant's hash, under tenant isolation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// The hash of the task options the submit sent; absent when it sent
    /// none (and in records of buquet's clients).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options_hash: Option<String>,
    /// The task this record's task replaces: its key's earlier task, which
    /// had ended failed or cancelled when the submit claimed the key over
    /// its record (`if_task_failed: new_task`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaces_task_id: Option<Uuid>,
    /// The whole task object, kept as raw JSON: written out byte for byte by
    /// whoever finishes the submit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_task: Option<Box<RawValue>>,
    /// The whole input (canonical JSON) of a task whose input is offloaded to
    /// `payloads/{task_id}/input.json`: whoever finishes the submit writes
    /// the payload from it when it is missing, before the task object, so
    /// that no finisher needs the producer to send the input again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_input: Option<Box<RawValue>>,
    /// Set on a *reset record* (docs/protocol.md, "Looking up and resetting
    /// a key"): when the key was reset, S3's earliest time at the reset, in
    /// whole seconds; `expires_at` is that same time. Every reader of this
    /// service takes such a record for no record at all (buquet's clients,
    /// which do not know the field, take it for an expired one, which comes
    /// to the same). Written after `pending_task`, which a reset record
    /// never carries.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "rfc3339::precise::option::serialize",
        deserialize_with = "rfc3339::option::deserialize"
    )]
    pub reset_at: Option<DateTime<Utc>>,
}

/// A new record as it is written: `record` (whose own `pending_task` and
/// `pending_input` are left out) with the task object and the offloaded
/// input borrowed from the submit, never copied into it. `pending_task` and
/// `pending_input` are the record's last fields, so the bytes are those of
/// the record holding them.
#[derive(Serialize)]
struct Carrying<'a> {
    #[serde(flatten)]
    record: &'a Record,
    pending_task: &'a RawValue,
    #[serde(skip_serializing_if = "Option::is_none")]
    pending_input: Option<&'a RawValue>,
}

impl Record {
    /// The record's JSON, carrying `pending_task` (and an offloaded input,
    /// `pending_input`) in place of its own. Its fields are strings, UUIDs,
    /// times and already-valid raw JSON, so this does not fail; if it ever
    /// did, the error stops the submit rather than writing an empty record.
    pub fn to_bytes_carrying(
        &self,
        pending_task: &RawValue,
        pending_input: Option<&RawValue>,
    ) -> Result<bytes::Bytes, serde_json::Error> {
        // Sized for what it carries: a record is mostly its task, and a
        // buffer grown by doubling would copy it over and over.
        let carried = pending_task.get().len() + pending_input.map_or(0, |i| i.get().len());
        let mut out = Vec::with_capacity(carried + 1024);
        serde_json::to_writer(
            &mut out,
            &Carrying {
                record: self,
                pending_task,
                pending_input,
            },
        )?;
        Ok(bytes::Bytes::from(out))
    }

    /// A record from its object's body.
    pub fn parse(body: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(body)
    }

    /// Past its `expires_at` at `now`.
    pub fn is_expired(&self, now: DateTime<Utc>) -> bool {
        self.expires_at <= now
    }

    /// A reset record: the key was reset, and the record reads as absent.
    pub fn is_reset(&self) -> bool {
        self.reset_at.is_some()
    }
}

/// The task object's `idempotency`: the record's scope and key hash for a
/// keyed submit, and the submitter's tenant (a hash, never the principal)
/// under tenant isolation, so that `GET /tasks/{id}` can refuse other
/// tenants. A keyless submit of a tenant carries the tenant alone.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct TaskIdempotency<'a> {
    /// The record's scope.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scope: Option<&'a str>,
    /// The record's key hash.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_hash: Option<&'a str>,
    /// The submitter's tenant hash.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant: Option<&'a str>,
}

impl TaskIdempotency<'_> {
    fn is_empty(&self) -> bool {
        self.scope.is_none() && self.key_hash.is_none() && self.tenant.is_none()
    }
}

/// The task object that buquet 0.1's workers claim and run.
#[derive(Serialize)]
struct TaskObject<'a> {
    id: Uuid,
    shard: &'a str,
    task_type: &'a str,
    input: &'a RawValue,
    output: Option<()>,
    #[serde(skip_serializing_if = "Option::is_none")]
    input_ref: Option<String>,
    timeout_seconds: u64,
    max_retries: u32,
    retry_count: u32,
    retry_policy: TaskRetryPolicy,
    status: &'static str,
    #[serde(with = "rfc3339")]
    created_at: DateTime<Utc>,
    #[serde(with = "rfc3339::precise")]
    available_at: DateTime<Utc>,
    #[serde(with = "rfc3339")]
    updated_at: DateTime<Utc>,
    lease_expires_at: Option<()>,
    lease_id: Option<()>,
    attempt: u32,
    completed_at: Option<()>,
    worker_id: Option<()>,
    last_error: Option<()>,
    reschedule_count: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_reschedules: Option<u32>,
    cancel_requested: bool,
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "rfc3339::precise::option::serialize"
    )]
    expires_at: Option<DateTime<Utc>>,
    #[serde(skip_serializing_if = "TaskIdempotency::is_empty")]
    idempotency: TaskIdempotency<'a>,
}

/// Where a task lives, derived from its id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskLocation {
    /// The task's id.
    pub id: Uuid,
    /// Its shard: the first hex digits of its id.
    pub shard: String,
    /// When it becomes available (its marker's minute).
    pub available_at: DateTime<Utc>,
}

impl TaskLocation {
    /// The task `id`'s place, in shards of `shard_len` hex digits.
    pub fn new(id: Uuid, shard_len: usize, available_at: DateTime<Utc>) -> Self {
        let mut buf = Uuid::encode_buffer();
        let hyphenated = id.hyphenated().encode_lower(&mut buf);
        TaskLocation {
            id,
            shard: hyphenated[..shard_len.clamp(1, 4)].to_owned(),
            available_at,
        }
    }

    /// `tasks/{shard}/{task_id}.json`
    pub fn task_key(&self) -> String {
        format!("tasks/{}/{}.json", self.shard, self.id)
    }

    /// `ready/{shard}/{minute}/{task_id}`, the minute zero-padded to 10 digits.
    pub fn marker_key(&self) -> String {
        format!(
            "ready/{}/{:010}/{}",
            self.shard,
            marker_minute(self.available_at),
            self.id
        )
    }
}

/// The minute folder of the ready index a task available at `t` is listed in.
pub fn marker_minute(t: DateTime<Utc>) -> i64 {
    t.timestamp().div_euclid(60)
}

/// The task object's JSON for a new task without options.
pub fn task_json(
    loc: &TaskLocation,
    task_type: &str,
    input: &RawValue,
    now: DateTime<Utc>,
    idempotency: TaskIdempotency<'_>,
) -> Result<Box<RawValue>, serde_json::Error> {
    task_json_with(
        loc,
        task_type,
        TaskInput::Inline(input),
        now,
        &TaskFields::defaults(loc.available_at),
        idempotency,
    )
}

/// A task's input: inline, or offloaded (`input` null, `input_ref` its key).
#[derive(Debug, Clone, Copy)]
pub enum TaskInput<'a> {
    /// In the task object.
    Inline(&'a RawValue),
    /// In its payload object.
    Offloaded,
}

/// `payloads/{task_id}/input.json`, where buquet puts an offloaded input.
pub fn payload_key(id: Uuid) -> String {
    format!("payloads/{id}/input.json")
}

/// The task object's JSON for a new task, with the fields its options set
/// (`fields.available_at` must be `loc.available_at`).
pub fn task_json_with(
    loc: &TaskLocation,
    task_type: &str,
    input: TaskInput<'_>,
    now: DateTime<Utc>,
    fields: &TaskFields,
    idempotency: TaskIdempotency<'_>,
) -> Result<Box<RawValue>, serde_json::Error> {
    let null = RawValue::NULL;
    let (input, input_ref) = match input {
        TaskInput::Inline(i) => (i, None),
        TaskInput::Offloaded => (null, Some(payload_key(loc.id))),
    };
    let task = TaskObject {
        id: loc.id,
        shard: &loc.shard,
        task_type,
        input,
        output: None,
        input_ref,
        timeout_seconds: fields.timeout_seconds,
        max_retries: fields.max_retries,
        retry_count: 0,
        retry_policy: fields.retry_policy,
        status: "pending",
        created_at: now,
        available_at: loc.available_at,
        updated_at: now,
        lease_expires_at: None,
        lease_id: None,
        attempt: 0,
        completed_at: None,
        worker_id: None,
        last_error: None,
        reschedule_count: 0,
        max_reschedules: fields.max_reschedules,
        cancel_requested: false,
        expires_at: fields.expires_at,
        idempotency,
    };
    // Serializing this struct does not fail (strings, numbers, raw JSON);
    // if it ever did, the error stops the submit rather than writing a task
    // of `null`.
    serde_json::value::to_raw_value(&task)
}

/// Raw JSON as bytes of their own, for a PUT: the same text, moved, not
/// copied.
pub fn raw_into_bytes(raw: Box<RawValue>) -> bytes::Bytes {
    bytes::Bytes::from(Box::<str>::from(raw).into_boxed_bytes())
}

/// The fields of a pending task that locate it.
#[derive(Deserialize)]
pub(crate) struct TaskHead {
    pub id: Uuid,
    pub shard: String,
    #[serde(with = "rfc3339")]
    pub available_at: DateTime<Utc>,
}

impl TaskHead {
    pub fn location(&self) -> TaskLocation {
        TaskLocation {
            id: self.id,
            shard: self.shard.clone(),
            available_at: self.available_at,
        }
    }
}

/// What a finisher needs to know of a task object as it is now, whoever
/// wrote it last: read leniently, since workers add fields.
#[derive(Debug, Deserialize)]
pub(crate) struct TaskState {
    #[serde(default)]
    pub status: Option<String>,
    #[serde(default, with = "rfc3339::option")]
    pub available_at: Option<DateTime<Utc>>,
}

impl TaskState {
    /// A body that does not parse as a task says nothing: not ready.
    pub fn parse(body: &[u8]) -> Self {
        serde_json::from_slice(body).unwrap_or(TaskState {
            status: None,
            available_at: None,
        })
    }

    /// Whether the marker at `loc` is true for this task: it is `pending`
    /// and listed in that minute (a worker's retry or reschedule moves it to
    /// another minute, with a marker of its own).
    pub fn is_ready_in(&self, loc: &TaskLocation) -> bool {
        self.status.as_deref() == Some("pending")
            && self
                .available_at
                .is_some_and(|t| marker_minute(t) == marker_minute(loc.available_at))
    }
}

/// `idempotency/{scope}/{hex}.json`, where `hex` is the key hash's digest
/// without its `sha256:` tag: the path buquet's own clients read and write
/// (checked against buquet 0.1 in tests/interop.rs).
pub fn record_key(scope: &str, key_hash: &str) -> String {
    let hex = key_hash.strip_prefix("sha256:").unwrap_or(key_hash);
    format!("idempotency/{scope}/{hex}.json")
}

/// The tenant a task object names in its `idempotency` (`sha256:<hex>`), if
/// any; read leniently, like the status.
pub fn task_tenant(body: &[u8]) -> Option<String> {
    #[derive(Deserialize)]
    struct Idem {
        tenant: Option<String>,
    }
    #[derive(Deserialize)]
    struct T {
        idempotency: Option<Idem>,
    }
    serde_json::from_slice::<T>(body).ok()?.idempotency?.tenant
}

/// A task's current `status` field, read leniently: workers add fields.
pub(crate) fn task_status(body: &[u8]) -> Option<String> {
    #[derive(Deserialize)]
    struct S {
        status: Option<String>,
    }
    serde_json::from_slice::<S>(body)
        .ok()
        .and_then(|s| s.status)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn shards_and_markers_follow_the_layout() {
        let id = Uuid::parse_str("A1B2C3D4-0000-4000-8000-000000000000").unwrap();
        let t = at("2026-01-27T12:00:59Z");
        let loc = TaskLocation::new(id, 1, t);
        assert_eq!(
            loc.task_key(),
            "tasks/a/a1b2c3d4-0000-4000-8000-000000000000.json"
        );
        assert_eq!(
            loc.marker_key(),
            format!(
                "ready/a/{:010}/a1b2c3d4-0000-4000-8000-000000000000",
                1_769_515_200 / 60
            )
        );
        assert_eq!(TaskLocation::new(id, 4, t).shard, "a1b2");
    }

    #[test]
    fn a_new_task_has_every_field_buquet_reads() {
        let loc = TaskLocation::new(Uuid::new_v4(), 1, Utc::now());
        let input = RawValue::from_string(r#"{"a":1}"#.into()).unwrap();
        let raw = task_json(
            &loc,
            "t",
            &input,
            Utc::now(),
            TaskIdempotency {
                scope: Some("t"),
                key_hash: Some("sha256:00"),
                tenant: None,
            },
        )
        .unwrap();
        let v: serde_json::Value = serde_json::from_str(raw.get()).unwrap();
        for f in [
            "id",
            "shard",
            "task_type",
            "input",
            "output",
            "timeout_seconds",
            "max_retries",
            "retry_count",
            "retry_policy",
            "status",
            "created_at",
            "available_at",
            "updated_at",
            "lease_expires_at",
            "lease_id",
            "attempt",
            "completed_at",
            "worker_id",
            "last_error",
            "reschedule_count",
            "cancel_requested",
            "idempotency",
        ] {
            assert!(v.get(f).is_some(), "missing {f}");
        }
        assert_eq!(v["status"], "pending");
        assert_eq!(v["retry_policy"]["multiplier"], 2.0);
        assert_eq!(v["input"]["a"], 1);
        assert!(v["output"].is_null());
    }

    #[test]
    fn a_record_carrying_its_task_is_the_record_holding_it_byte_for_byte() {
        let t = at("2026-01-27T12:00:00Z");
        let task = RawValue::from_string(r#"{"id":1,"input":{"a":[1,2]}}"#.into()).unwrap();
        let input = RawValue::from_string(r#"{"big":"x"}"#.into()).unwrap();
        // An offloaded input is what it carries most: bigger than its task
        // (whose `input` is null).
        let big = RawValue::from_string(format!(r#"{{"big":"{}"}}"#, "x".repeat(4096))).unwrap();
        let mut rec = Record {
            key: "k".into(),
            key_hash: "sha256:00".into(),
            scope: Some("s".into()),
            task_id: Uuid::nil(),
            task_key: "tasks/0/x.json".into(),
            task_type: "t".into(),
            input_hash: "sha256:11".into(),
            status: Some(RecordStatus::Creating),
            created_at: t,
            expires_at: t,
            write_id: Some(Uuid::nil()),
            tenant: None,
            options_hash: Some("sha256:22".into()),
            pending_task: None,
            pending_input: None,
            replaces_task_id: None,
            reset_at: None,
        };
        for pending_input in [None, Some(&*input), Some(&*big)] {
            let carried = rec.to_bytes_carrying(&task, pending_input).unwrap();
            rec.pending_task = Some(task.clone());
            rec.pending_input = pending_input.map(ToOwned::to_owned);
            assert_eq!(carried, serde_json::to_vec(&rec).unwrap());
            let back = Record::parse(&carried).unwrap();
            assert_eq!(back.pending_task.unwrap().get(), task.get());
            (rec.pending_task, rec.pending_input) = (None, None);
        }
    }

    #[test]
    fn a_keyless_task_without_a_tenant_carries_no_idempotency_and_an_offloaded_one_its_ref() {
        let loc = TaskLocation::new(Uuid::new_v4(), 1, at("2026-01-27T12:00:00Z"));
        let fields = TaskFields::defaults(loc.available_at);
        let task = |input, idempotency| {
            let raw = task_json_with(&loc, "t", input, loc.available_at, &fields, idempotency);
            serde_json::from_str::<serde_json::Value>(raw.unwrap().get()).unwrap()
        };
        let a = RawValue::from_string("[1]".into()).unwrap();
        let keyless = task(TaskInput::Inline(&a), TaskIdempotency::default());
        assert!(keyless.get("idempotency").is_none(), "{keyless}");
        assert!(keyless.get("input_ref").is_none());
        // A tenant alone is enough to carry it.
        let tenant = TaskIdempotency {
            tenant: Some("sha256:ab"),
            ..TaskIdempotency::default()
        };
        let v = task(TaskInput::Offloaded, tenant);
        assert_eq!(v["idempotency"], serde_json::json!({"tenant": "sha256:ab"}));
        assert!(v["input"].is_null());
        assert_eq!(v["input_ref"], format!("payloads/{}/input.json", loc.id));
        assert_eq!(
            payload_key(loc.id),
            format!("payloads/{}/input.json", loc.id)
        );
        for (scope, key_hash) in [(Some("s"), None), (None, Some("sha256:00"))] {
            let idem = TaskIdempotency {
                scope,
                key_hash,
                tenant: None,
            };
            assert!(
                task(TaskInput::Inline(&a), idem)
                    .get("idempotency")
                    .is_some()
            );
        }
    }

    #[test]
    fn raw_json_becomes_the_bytes_of_its_text() {
        let text = r#"{"a":"é","b":[1,2.5,null]}"#;
        let raw = RawValue::from_string(text.into()).unwrap();
        assert_eq!(
            raw_into_bytes(raw),
            bytes::Bytes::from_static(text.as_bytes())
        );
    }

    #[test]
    fn a_marker_is_true_only_for_a_pending_task_available_in_its_minute() {
        let loc = TaskLocation::new(Uuid::new_v4(), 1, at("2026-01-27T12:00:30Z"));
        let state = |status: &str, available_at: &str| {
            TaskState::parse(
                format!(
                    r#"{{"status":"{status}","available_at":"{available_at}","worker_id":"w"}}"#
                )
                .as_bytes(),
            )
        };
        // Any time in the marker's minute is that minute.
        assert!(state("pending", "2026-01-27T12:00:00Z").is_ready_in(&loc));
        assert!(state("pending", "2026-01-27T12:00:59.999Z").is_ready_in(&loc));
        // A retry's or a reschedule's later minute, an earlier one.
        assert!(!state("pending", "2026-01-27T12:01:00Z").is_ready_in(&loc));
        assert!(!state("pending", "2026-01-27T11:59:59Z").is_ready_in(&loc));
        for status in ["running", "completed", "failed", "Pending"] {
            assert!(
                !state(status, "2026-01-27T12:00:30Z").is_ready_in(&loc),
                "{status}"
            );
        }
        assert!(!TaskState::parse(br#"{"status":"pending"}"#).is_ready_in(&loc));
        assert!(!TaskState::parse(b"not json").is_ready_in(&loc));
    }

    #[test]
    fn a_tasks_tenant_and_status_are_read_leniently() {
        let body = br#"{"id":"x","status":"running","worker_id":"w-1",
            "idempotency":{"scope":"t","key_hash":"sha256:00","tenant":"sha256:ab"}}"#;
        assert_eq!(task_tenant(body).as_deref(), Some("sha256:ab"));
        assert_eq!(task_status(body).as_deref(), Some("running"));
        // A worker's rewrite drops `idempotency`; a keyed task names no tenant.
        assert_eq!(task_tenant(br#"{"status":"completed"}"#), None);
        assert_eq!(task_tenant(br#"{"idempotency":{"scope":"t"}}"#), None);
        assert_eq!(task_tenant(b"{"), None);
        assert_eq!(task_status(br#"{"id":"x"}"#), None);
        assert_eq!(task_status(b"[]"), None);
    }

    /// A record as buquet's clients write it: no status, write_id or reset.
    const BUQUET_RECORD: &[u8] = br#"{"key":"k","key_hash":"sha256:00","task_id":"a1b2c3d4-0000-4000-8000-000000000000",
            "task_key":"tasks/a/a1b2c3d4-0000-4000-8000-000000000000.json","created_at":"2026-01-27T12:00:00.123456Z",
            "expires_at":"2026-02-26T12:00:00Z","task_type":"t","input_hash":"sha256:11"}"#;

    #[test]
    fn records_written_by_buquet_without_status_parse() {
        let r = Record::parse(BUQUET_RECORD).unwrap();
        assert_eq!(r.status, None);
        assert!(r.pending_task.is_none());
    }

    #[test]
    fn only_a_record_with_reset_at_is_a_reset_record() {
        let mut r = Record::parse(BUQUET_RECORD).unwrap();
        assert!(!r.is_reset());
        r.reset_at = Some(r.expires_at);
        assert!(r.is_reset());
    }
}
