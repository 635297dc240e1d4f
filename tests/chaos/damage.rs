//! Damage the world itself does to the bucket, one kind per run, so that
//! the audit is shown to see it: nothing is planted in the shipped code.
//! Each kind names the count it must light.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use idempotent_submit::store::{Fault, Op, PutMode, S3Store, Store};
use idempotent_submit::{Queue, Settings};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::audit::Audit;
use super::world::WorldConfig;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Damage {
    /// A ready marker written for a task a worker already ran.
    MarkerForARunTask,
    /// A second task object (and its marker) for a key that has one.
    SecondTaskForAKey,
    /// The task object of an answered key deleted.
    TaskOfARecordDeleted,
    /// One byte of a task's input changed.
    InputChangedByOneByte,
    /// A record written `creating` by a submit that died at once, whose
    /// event the world loses and whose window it lets pass with the
    /// scheduled pass held.
    StaleCreatingRecord,
}

pub const ALL: [Damage; 5] = [
    Damage::MarkerForARunTask,
    Damage::SecondTaskForAKey,
    Damage::TaskOfARecordDeleted,
    Damage::InputChangedByOneByte,
    Damage::StaleCreatingRecord,
];

/// The key of the damaged record.
const DAMAGED_KEY: &str = "damaged-record";

impl Damage {
    pub fn name(self) -> &'static str {
        match self {
            Damage::MarkerForARunTask => "a marker for a task a worker already ran",
            Damage::SecondTaskForAKey => "a second task object for one key",
            Damage::TaskOfARecordDeleted => "a record whose task object is deleted",
            Damage::InputChangedByOneByte => "an input changed by one byte",
            Damage::StaleCreatingRecord => "a stale creating record left past its window",
        }
    }

    /// The audit's count that must see it, and its name.
    pub fn count(self, a: &Audit) -> (&'static str, u64) {
        match self {
            Damage::MarkerForARunTask => ("stale markers", a.stale_markers),
            Damage::SecondTaskForAKey => ("two task ids for one key", a.two_task_ids_for_one_key),
            Damage::TaskOfARecordDeleted => ("lost submits", a.lost_submits),
            Damage::InputChangedByOneByte => ("inputs changed", a.inputs_changed),
            Damage::StaleCreatingRecord => (
                "records still in flight after their windows",
                a.records_in_flight_after_their_windows,
            ),
        }
    }

    /// At the start: the stale record, its event lost, the passes held
    /// until its window has closed.
    pub async fn during(
        self,
        s3: &S3Store,
        cfg: &WorldConfig,
        drop_record: &Arc<Mutex<Option<String>>>,
        hold_passes: &Arc<Mutex<Option<Instant>>>,
    ) {
        if self != Damage::StaleCreatingRecord {
            return;
        }
        let scope = super::producers::TASK_TYPES[0];
        let path = format!(
            "idempotency/{scope}/{}.json",
            hex::encode(Sha256::digest(format!("{scope}:{DAMAGED_KEY}")))
        );
        *drop_record.lock().unwrap() = Some(path);
        let w = &cfg.windows;
        *hold_passes.lock().unwrap() =
            Some(Instant::now() + w.settled_after() + Duration::from_secs(2));
        let settings = Settings {
            finish_window: chrono::Duration::seconds(w.finish as i64),
            stale_creating_after: chrono::Duration::seconds(w.stale as i64),
            late_write_margin: chrono::Duration::seconds(w.late_write as i64),
            operation_timeout: chrono::Duration::seconds(w.operation as i64),
            ..Settings::default()
        };
        let dying = crate::common::world::dying_at(
            s3.clone(),
            Op::PutCreate,
            "idempotency/",
            Fault::CrashAfter,
        );
        let q = Queue::new(dying, settings);
        let input = json!({"s": scope, "k": DAMAGED_KEY, "v": 0});
        let died = q.submit(scope, input).idempotency_key(DAMAGED_KEY).await;
        assert!(died.is_err(), "the damaging submit dies after its record");
    }

    /// Before the workers go idle: the second task, with its marker, so
    /// that a worker runs it too.
    pub async fn before_idle(self, s3: &S3Store, _runs: &[PathBuf]) {
        if self != Damage::SecondTaskForAKey {
            return;
        }
        let records = crate::common::all_keys(s3).await;
        for key in records.iter().filter(|k| k.starts_with("idempotency/")) {
            let Ok(o) = s3.get(key).await else { continue };
            let rec: Value = serde_json::from_slice(&o.body).unwrap_or(Value::Null);
            let mut task = rec["pending_task"].clone();
            if !task.is_object() || !task["input"].is_object() {
                continue;
            }
            let id = uuid::Uuid::new_v4().to_string();
            let shard = id[..1].to_owned();
            task["id"] = json!(id);
            task["shard"] = json!(shard);
            // In the minute of its available_at, where a worker that claims
            // it deletes it.
            let minute = task["available_at"]
                .as_str()
                .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                .map_or_else(|| chrono::Utc::now().timestamp(), |t| t.timestamp())
                / 60;
            s3.put(
                &format!("tasks/{shard}/{id}.json"),
                Bytes::from(task.to_string()),
                PutMode::Create,
            )
            .await
            .expect("the second task");
            s3.put(
                &format!("ready/{shard}/{minute:010}/{id}"),
                Bytes::new(),
                PutMode::Overwrite,
            )
            .await
            .expect("its marker");
            return;
        }
        panic!("no record to damage");
    }

    /// Once the workers are idle: the marker, the deletion, the byte.
    pub async fn after_idle(self, s3: &S3Store, runs: &[PathBuf]) {
        let ran: Vec<String> = runs
            .iter()
            .flat_map(|r| {
                std::fs::read_to_string(r)
                    .unwrap_or_default()
                    .lines()
                    .filter_map(|l| {
                        let v: Value = serde_json::from_str(l).ok()?;
                        // A keyed task with an inline input.
                        v["input"]["k"].as_str()?;
                        Some(v["id"].as_str()?.to_owned())
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        let mut victim = None;
        for id in &ran {
            let key = format!("tasks/{}/{id}.json", &id[..1]);
            if let Ok(o) = s3.get(&key).await {
                let t: Value = serde_json::from_slice(&o.body).unwrap_or(Value::Null);
                if t["input"].is_object() {
                    victim = Some((id.clone(), key, o));
                    break;
                }
            }
        }
        let (id, key, obj) = match self {
            Damage::MarkerForARunTask
            | Damage::TaskOfARecordDeleted
            | Damage::InputChangedByOneByte => victim.expect("a task a worker ran"),
            _ => return,
        };
        match self {
            Damage::MarkerForARunTask => {
                let minute = chrono::Utc::now().timestamp() / 60;
                s3.put(
                    &format!("ready/{}/{minute:010}/{id}", &id[..1]),
                    Bytes::new(),
                    PutMode::Overwrite,
                )
                .await
                .expect("the marker");
            }
            Damage::TaskOfARecordDeleted => {
                s3.delete(&key, None).await.expect("deleting the task");
            }
            Damage::InputChangedByOneByte => {
                let mut body = obj.body.to_vec();
                let at = find(&body, b"\"n\":").expect("the input's number") + 4;
                let end = (at..body.len())
                    .find(|i| !body[*i].is_ascii_digit() && body[*i] != b'-')
                    .expect("the number ends");
                let last = end - 1;
                body[last] = if body[last] == b'9' {
                    b'8'
                } else {
                    body[last] + 1
                };
                s3.put(&key, Bytes::from(body), PutMode::Overwrite)
                    .await
                    .expect("the changed task");
            }
            _ => {}
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}
