//! Model-based randomized testing of the protocol: thousands of random
//! schedules over the in-memory store, with injected faults, lost answers,
//! crashes and slow requests; concurrent submits of one key; tenants, the
//! `queue` scope and a custom scope, where another task type is a conflict;
//! the sweeper's record events (the due queue, delivered
//! `STALE_CREATING_AFTER_SECONDS` to 15 minutes after each record write) or,
//! in half the schedules, a bucket that sends no events
//! (`RECORD_EVENTS=submitter`): each submit's own due message, one more
//! request, which lands, fails, is lost, or lands with its answer lost; and
//! the sweeper's scheduled pass; time passing past staleness, deadlines and expiry;
//! tasks deleted by the queue; key resets; tasks failed for good by the
//! worker or cancelled by the queue's client, and `if_task_failed: new_task`
//! submits racing over them; and the functions' machines' clock stepped up
//! to 58 s off S3's and back. Every time the checker notes is S3's; the
//! protocol runs on the machines' clock and learns S3's from its answers.
//!
//! After every step, guarantees 1 to 7, 10 and 11 and the reset's promise
//! (docs/protocol.md, "Guarantees") are checked
//! against each submit's own (tenant, scope, key, task type): every answer
//! and every error class against what the state allowed, and the whole write
//! history (each task written once, with If-None-Match, before its record's
//! deadline; a record `ready` only after its task and marker were written).
//! Coverage counters show that every fault and situation happened; the CI run
//! requires each to be non-zero. Each guarantee's check is shown to catch a
//! bug planted on purpose (`tests/model/planted.rs`: wrappers of the store and
//! the engine's settings, the library unchanged), with a shrunk schedule.
//!
//! Seeds are reproducible: `MODEL_SEED=<seed> cargo test --features testing --test model`
//! replays one schedule. A failure prints its seed and a shrunk schedule.
//! `MODEL_SCHEDULES` sets how many run (make soak runs many).

use crate::common;
#[path = "model/planted.rs"]
mod planted;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use chrono::{DateTime, Duration, SubsecRound, Utc};
use idempotent_submit::due_sender::{DueOrder, DueSender, RecordDue, SendError};
use idempotent_submit::intake::due::{self, DueMessage};
use idempotent_submit::protocol::TaskLocation;
use idempotent_submit::protocol::hash::{canonical_json, input_hash, key_hash};
use idempotent_submit::protocol::record::marker_minute;
use idempotent_submit::protocol::rfc3339;
use idempotent_submit::protocol::{IdempotencyKey, Tenant};
use idempotent_submit::protocol::{Record, RecordOutcome, RecordStatus, SweepOptions};
use idempotent_submit::store::memory::Behaviour;
use idempotent_submit::store::{
    ETag, Fault, FaultyStore, MemoryStore, Object, ObjectMeta, Op, PutMode, Store, StoreError,
};
use idempotent_submit::{
    Clock, IfTaskFailed, ListOrder, ManualClock, Queue, Reset, Scope, Settings, SubmitError,
};
use serde_json::{Value, json};

use planted::{Bug, Planted};

// ---- the schedule ----

#[derive(Debug, Clone)]
struct Faults {
    /// Crash at this call (1-based) of the process; after it took effect or before.
    crash_at: Option<(usize, bool)>,
    per_mille: u32,
    /// Share of calls (per mille) that take long: the clock moves 1 s to
    /// 15 min while they are under way, and half of them never land.
    slow_per_mille: u32,
    seed: u64,
}

impl Faults {
    fn none() -> Self {
        Faults {
            crash_at: None,
            per_mille: 0,
            slow_per_mille: 0,
            seed: 0,
        }
    }
}

/// Whose key: (tenant, scope, key). Tenant 0 is none; scope 0 is the task
/// type, 1 the `queue` scope, 2 a custom scope shared by both task types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Who {
    tenant: u8,
    scope: u8,
    key: u8,
}

#[derive(Debug, Clone)]
enum Step {
    Submit {
        who: Who,
        input: u8,
        task_type: u8,
        ttl_hours: i64,
        /// `if_task_failed: new_task`: a key whose task failed or was
        /// cancelled is claimed for a new task.
        new_task: bool,
        faults: Faults,
    },
    Sweep {
        dry_run: bool,
        faults: Faults,
    },
    Together(Vec<Step>),
    /// Time passes; the sweeper's record events that fall due on the way are
    /// delivered when they do, unless the sweeper is down: then they wait,
    /// and reach it late.
    Advance {
        secs: i64,
        sweeper_down: bool,
    },
    /// With the sweeper down, time passes until `before_secs` before the
    /// finish deadline of this key's record, if it is `creating` and that is
    /// still ahead: the band where late writes and refusals happen.
    NearDeadline {
        who: Who,
        task_type: u8,
        before_secs: i64,
    },
    /// The queue deletes the task of this key's current record, if that task
    /// is older than an hour.
    DeleteTask {
        who: Who,
        task_type: u8,
    },
    /// The queue's client cancels the task of this key's current record,
    /// as buquet 0.1's `cancel` does: a GET, and if the task is `pending`,
    /// a compare-and-swap to `cancelled`, then the delete of its marker.
    Cancel {
        who: Who,
        task_type: u8,
    },
    /// The due message of this key's record reaches the sweeper now, `lag`
    /// turns into the step (SQS delivers at least once: a message comes
    /// again, late, beside the key's next submit).
    Deliver {
        who: Who,
        task_type: u8,
        lag: u8,
    },
    /// A worker of the queue, as buquet 0.1's behaves, claims one pending,
    /// available task that it finds by its marker (oldest minute first) or,
    /// with `scan` or when no marker leads to a claim, by listing `tasks/`:
    /// a compare-and-swap from pending to running, then it deletes the
    /// claimed version's marker; then it runs it to `then`.
    Work {
        scan: bool,
        then: Then,
    },
    /// The functions' machines' clock is stepped: from now on it stands
    /// `secs` behind S3's (ahead when negative), within the 60 s allowed.
    /// S3's clock, in which the checker judges, runs on undisturbed.
    ClockStepped {
        secs: i64,
    },
    /// A key reset on purpose (`Queue::reset_key`, `DELETE
    /// /idempotency-keys/{key}`), with faults: its record is replaced by a
    /// reset record unless a task may still be written for it.
    Reset {
        who: Who,
        task_type: u8,
        faults: Faults,
    },
    /// From here on `RECORD_EVENTS=submitter`: the bucket sends no events,
    /// and every submit sends its record's due message itself, one more
    /// request, which can land, fail, be lost, or land with its answer lost
    /// (generated first, in some schedules). `with_claim`: `DUE_MESSAGE=with_claim`
    /// (the message beside the record's PUT), else `before_claim` (accepted
    /// before it), the default.
    SubmitterSends {
        with_claim: bool,
    },
}

/// What a worker does with the task it claimed.
#[derive(Debug, Clone, Copy)]
enum Then {
    Complete,
    /// Fails it: pending again `secs` later, with a new marker in that
    /// minute (or failed for good once its retries are spent).
    Retry {
        secs: i64,
    },
    /// Reschedules it `secs` later, with a new marker in that minute.
    Reschedule {
        secs: i64,
    },
    /// Fails it for good at once, as buquet's worker does on a permanent
    /// error (`TaskError::Permanent`): `failed`, no marker.
    Fail,
}

fn gen_work(rng: &mut fastrand::Rng) -> Step {
    Step::Work {
        scan: rng.u8(..100) < 30,
        then: match rng.u8(..100) {
            0..=54 => Then::Complete,
            55..=79 => Then::Retry {
                secs: rng.i64(1..120),
            },
            80..=91 => Then::Reschedule {
                secs: rng.i64(1..600),
            },
            _ => Then::Fail,
        },
    }
}

fn gen_faults(rng: &mut fastrand::Rng) -> Faults {
    Faults {
        crash_at: (rng.u8(..100) < 15).then(|| (rng.usize(1..6), rng.bool())),
        per_mille: if rng.u8(..100) < 30 {
            rng.u32(50..300)
        } else {
            0
        },
        slow_per_mille: if rng.u8(..100) < 30 {
            rng.u32(100..500)
        } else {
            0
        },
        seed: rng.u64(..),
    }
}

fn gen_who(rng: &mut fastrand::Rng) -> Who {
    Who {
        tenant: if rng.u8(..100) < 75 { 0 } else { rng.u8(1..3) },
        scope: match rng.u8(..100) {
            0..=69 => 0,
            70..=84 => 1,
            _ => 2,
        },
        key: rng.u8(..3),
    }
}

fn gen_submit(rng: &mut fastrand::Rng) -> Step {
    Step::Submit {
        who: gen_who(rng),
        input: if rng.u8(..100) < 85 { 0 } else { 1 },
        task_type: if rng.u8(..100) < 85 { 0 } else { 1 },
        ttl_hours: [1, 2, 720][rng.usize(..3)],
        new_task: rng.u8(..100) < 25,
        faults: gen_faults(rng),
    }
}

/// Concurrent steps run without slow requests: in this single-threaded
/// simulation the clock is global, so one request's lag would move time
/// under the others between their deadline check and their send, something a
/// real process (which signs right after checking) does not see, and would let
/// their writes land later than S3's 15-minute signature limit allows.
fn without_lag(mut step: Step) -> Step {
    if let Step::Submit { faults, .. } | Step::Sweep { faults, .. } | Step::Reset { faults, .. } =
        &mut step
    {
        faults.slow_per_mille = 0;
    }
    step
}

fn gen_schedule(seed: u64, len: usize) -> Vec<Step> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut steps: Vec<Step> = (0..len)
        .flat_map(|_| match rng.u8(..100) {
            0..=36 => vec![gen_submit(&mut rng)],
            37..=39 => {
                let Step::Submit {
                    who,
                    task_type,
                    faults,
                    ..
                } = gen_submit(&mut rng)
                else {
                    unreachable!()
                };
                vec![Step::Reset {
                    who,
                    task_type,
                    faults,
                }]
            }
            40..=54 => {
                // Often the same key, so that submits contend for it.
                let first = gen_submit(&mut rng);
                let Step::Submit { who, .. } = first else {
                    unreachable!()
                };
                let first_step = first.clone();
                let mut steps = vec![without_lag(first)];
                for _ in 0..rng.usize(1..3) {
                    let mut next = gen_submit(&mut rng);
                    if let Step::Submit { who: w, .. } = &mut next
                        && rng.bool()
                    {
                        *w = who;
                    }
                    match rng.u8(..100) {
                        0..=19 => {
                            next = Step::Sweep {
                                dry_run: false,
                                faults: gen_faults(&mut rng),
                            }
                        }
                        20..=44 => next = gen_work(&mut rng),
                        // The key's due message again, beside its submit
                        // (no draw of its own: the schedules around it stay
                        // as they were).
                        d @ 45..=54 => {
                            if let Step::Submit { task_type, .. } = first_step {
                                next = Step::Deliver {
                                    who,
                                    task_type,
                                    lag: d % 4,
                                };
                            }
                        }
                        // A reset of the key beside its submits.
                        55..=62 => {
                            if let Step::Submit { task_type, .. } = gen_submit(&mut rng) {
                                next = Step::Reset {
                                    who,
                                    task_type: if rng.bool() { 0 } else { task_type },
                                    faults: gen_faults(&mut rng),
                                }
                            }
                        }
                        _ => {}
                    }
                    steps.push(without_lag(next));
                }
                vec![Step::Together(steps)]
            }
            55..=64 => vec![Step::Sweep {
                dry_run: rng.u8(..100) < 10,
                faults: gen_faults(&mut rng),
            }],
            65..=67 => {
                // The deadline band: a submit dies after its record, the
                // sweeper misses it, and a slow retry comes shortly before
                // the deadline.
                let Step::Submit {
                    who,
                    input,
                    task_type,
                    ttl_hours,
                    new_task,
                    faults,
                } = gen_submit(&mut rng)
                else {
                    unreachable!()
                };
                let dies = Faults {
                    crash_at: Some((1, true)),
                    per_mille: 0,
                    slow_per_mille: 0,
                    ..faults
                };
                let slow = Faults {
                    crash_at: None,
                    per_mille: 0,
                    slow_per_mille: rng.u32(300..900),
                    seed: rng.u64(..),
                };
                let submit = |faults| Step::Submit {
                    who,
                    input,
                    task_type,
                    ttl_hours,
                    new_task,
                    faults,
                };
                // Sometimes an operator resets the key while it is in
                // flight: refused, since its task may still be written.
                let reset = rng.u8(..100) < 30;
                let mut steps = vec![submit(dies)];
                if reset {
                    steps.push(Step::Reset {
                        who,
                        task_type,
                        faults: Faults::none(),
                    });
                }
                steps.extend([
                    Step::NearDeadline {
                        who,
                        task_type,
                        before_secs: rng.i64(1..900),
                    },
                    submit(slow),
                ]);
                steps
            }
            68..=69 => {
                // The worker's race: a submit dies after its task, before
                // its marker; its replay and a worker that finds the task
                // by listing `tasks/` then meet.
                let Step::Submit {
                    who,
                    input,
                    task_type,
                    ttl_hours,
                    new_task,
                    faults,
                } = gen_submit(&mut rng)
                else {
                    unreachable!()
                };
                let submit = |faults| Step::Submit {
                    who,
                    input,
                    task_type,
                    ttl_hours,
                    new_task,
                    faults,
                };
                let Step::Work { then, .. } = gen_work(&mut rng) else {
                    unreachable!()
                };
                vec![
                    submit(Faults {
                        crash_at: Some((3, false)),
                        per_mille: 0,
                        slow_per_mille: 0,
                        ..faults
                    }),
                    Step::Together(vec![
                        submit(Faults::none()),
                        Step::Work { scan: true, then },
                    ]),
                ]
            }
            70..=73 => vec![gen_work(&mut rng)],
            74..=76 => {
                // A failed task's key: a submit, its task failed by a worker
                // (a permanent error; the worker takes the oldest task it
                // finds, which may be another key's) or cancelled by the
                // queue's client; then submits of the key race, most of them
                // `new_task`, beside another worker's step at times.
                let first = gen_submit(&mut rng);
                let Step::Submit { who, task_type, .. } = first else {
                    unreachable!()
                };
                let ended = if rng.bool() {
                    Step::Work {
                        scan: rng.bool(),
                        then: Then::Fail,
                    }
                } else {
                    Step::Cancel { who, task_type }
                };
                let mut racing = Vec::new();
                for _ in 0..rng.usize(1..4) {
                    let mut next = gen_submit(&mut rng);
                    if let Step::Submit {
                        who: w,
                        task_type: t,
                        new_task,
                        ..
                    } = &mut next
                    {
                        (*w, *t) = (who, task_type);
                        *new_task = rng.u8(..100) < 80;
                    }
                    racing.push(without_lag(next));
                }
                if rng.u8(..100) < 20 {
                    racing.push(gen_work(&mut rng));
                }
                vec![first, ended, Step::Together(racing)]
            }
            77..=92 => vec![Step::Advance {
                secs: match rng.u8(..100) {
                    0..=49 => rng.i64(1..700),
                    50..=84 => rng.i64(600..3600),
                    _ => rng.i64(3600..3 * 86400),
                },
                sweeper_down: rng.u8(..100) < 20,
            }],
            93..=95 => vec![Step::ClockStepped {
                secs: if rng.u8(..100) < 20 {
                    0
                } else {
                    rng.i64(-58..=58)
                },
            }],
            _ => vec![Step::DeleteTask {
                who: gen_who(&mut rng),
                task_type: if rng.u8(..100) < 85 { 0 } else { 1 },
            }],
        })
        .collect();
    // Half the schedules run on a bucket that sends no events (a draw of
    // its own: the steps are the bucket's schedule's).
    let mut draw = fastrand::Rng::with_seed(seed ^ 0xd0e5);
    if draw.bool() {
        steps.insert(
            0,
            Step::SubmitterSends {
                with_claim: draw.bool(),
            },
        );
    }
    steps.truncate(len);
    steps
}

const TASK_TYPES: [&str; 2] = ["pay", "mail"];
const TENANTS: [&str; 3] = ["", "arn:aws:iam::1:role/alice", "arn:aws:iam::1:role/bob"];

fn key_name(k: u8) -> String {
    format!("key-{k}")
}

fn input_of(who: Who, input: u8) -> Value {
    json!({"key": who.key, "v": input})
}

fn tenant_of(who: Who) -> Option<Tenant> {
    (who.tenant > 0).then(|| Tenant::from_principal(TENANTS[who.tenant as usize]).unwrap())
}

fn scope_name(who: Who, task_type: u8) -> &'static str {
    match who.scope {
        0 => TASK_TYPES[task_type as usize],
        1 => "queue",
        _ => "shared",
    }
}

/// The record path of a submit: its own (tenant, scope, key).
fn record_path(who: Who, task_type: u8) -> String {
    let scope = scope_name(who, task_type);
    let k = IdempotencyKey::parse(key_name(who.key)).unwrap();
    let hash = key_hash(scope, &k, tenant_of(who).as_ref());
    format!(
        "idempotency/{scope}/{}.json",
        hash.trim_start_matches("sha256:")
    )
}

fn task_id_of(key: &str) -> uuid::Uuid {
    key.rsplit('/')
        .next()
        .unwrap_or("")
        .trim_end_matches(".json")
        .parse()
        .unwrap_or_default()
}

// ---- the queue's worker, as buquet 0.1's behaves ----

/// One claim a worker made.
#[derive(Debug)]
struct Claim {
    id: uuid::Uuid,
    attempt: u64,
    by_scan: bool,
    then: Then,
    /// It left the task failed for good.
    failed: bool,
    /// The markers it wrote (a retry's, a reschedule's).
    markers: Vec<String>,
}

/// What one worker step did: at most one claim.
#[derive(Debug)]
struct Worked {
    claim: Option<Claim>,
}

/// A few turns for the other requests under way.
async fn turns(rng: &mut fastrand::Rng, most: u32) {
    for _ in 0..rng.u32(0..most) {
        tokio::task::yield_now().await;
    }
}

fn time_of(v: &Value) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(v.as_str()?)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

fn marker_of(t: &Value) -> Option<String> {
    Some(
        TaskLocation {
            id: t["id"].as_str()?.parse().ok()?,
            shard: t["shard"].as_str()?.to_owned(),
            available_at: time_of(&t["available_at"])?,
        }
        .marker_key(),
    )
}

/// Task ids are random, and so is the order S3 lists tasks and markers in;
/// the model's worker takes its candidates (minute first) in an order the
/// schedule decides, by their key's hash and their creation, so that a seed
/// replays the same run.
async fn steady(bucket: &MemoryStore, keys: Vec<(i64, String)>) -> Vec<String> {
    let mut ordered = Vec::new();
    for (minute, key) in keys {
        let task = match bucket.get(&key).await {
            Ok(o) => serde_json::from_slice::<Value>(&o.body).unwrap_or(Value::Null),
            Err(_) => Value::Null,
        };
        let by = |f: &Value| f.as_str().unwrap_or("").to_owned();
        let order = (
            minute,
            by(&task["idempotency"]["key_hash"]),
            by(&task["created_at"]),
        );
        ordered.push((order, key));
    }
    ordered.sort();
    ordered.into_iter().map(|(_, k)| k).collect()
}

/// The worker's step: what buquet 0.1's worker does in one poll that finds
/// a task (`src/worker/claim.rs` and `runner.rs` there). It lists the ready
/// index from its oldest minute up to now and tries each task; in hybrid
/// mode, when no marker led to a claim, it lists `tasks/` (the log scan).
/// It claims by a compare-and-swap from pending to running, then deletes the
/// claimed version's marker; a task that is not pending and available is
/// left alone, marker and all. Then it runs the task to `then`.
async fn work(
    bucket: MemoryStore,
    now: DateTime<Utc>,
    scan: bool,
    then: Then,
    seed: u64,
) -> Result<Worked, String> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let listed = |prefix: &'static str| {
        let bucket = bucket.clone();
        async move {
            bucket
                .list(prefix, None, None, 10_000)
                .await
                .map(|p| p.objects)
                .map_err(|e| format!("worker listing {prefix}: {e}"))
        }
    };
    let mut candidates: Vec<(String, bool)> = Vec::new();
    if !scan {
        let index: Vec<(i64, String)> = listed("ready/")
            .await?
            .into_iter()
            .filter_map(|m| {
                let parts: Vec<&str> = m.key.split('/').collect();
                let minute: i64 = parts.get(2)?.parse().ok()?;
                (minute <= marker_minute(now))
                    .then(|| (minute, format!("tasks/{}/{}.json", parts[1], parts[3])))
            })
            .collect();
        candidates.extend(steady(&bucket, index).await.into_iter().map(|k| (k, false)));
    }
    // Its poll starts at any moment of the other requests under way.
    turns(&mut rng, 16).await;
    let scanned = listed("tasks/")
        .await?
        .into_iter()
        .map(|m| (0, m.key))
        .collect();
    candidates.extend(
        steady(&bucket, scanned)
            .await
            .into_iter()
            .map(|k| (k, true)),
    );
    for (key, by_scan) in candidates {
        turns(&mut rng, 2).await;
        let Ok(obj) = bucket.get(&key).await else {
            continue;
        };
        let Ok(mut t) = serde_json::from_slice::<Value>(&obj.body) else {
            return Err(format!("{key} is not a task: {:?}", obj.body));
        };
        if t["status"] != "pending" || time_of(&t["available_at"]).is_none_or(|a| a > now) {
            continue;
        }
        let old_marker = marker_of(&t).ok_or_else(|| format!("{key} has no place in the index"))?;
        let attempt = t["attempt"].as_u64().unwrap_or(0) + 1;
        let stamp = json!(rfc3339::format(&now));
        t["status"] = json!("running");
        t["attempt"] = json!(attempt);
        t["worker_id"] = json!("model-worker");
        t["lease_id"] = json!(uuid::Uuid::new_v4());
        t["lease_expires_at"] = json!(rfc3339::format(&(now + Duration::seconds(300))));
        t["updated_at"] = stamp.clone();
        // The worker rewrites the object in its own serialization.
        let put = |t: &Value, etag: ETag| {
            let bucket = bucket.clone();
            let key = key.clone();
            let body = Bytes::from(serde_json::to_vec(t).unwrap());
            async move { bucket.put(&key, body, PutMode::Update(etag)).await }
        };
        let etag = match put(&t, obj.meta.etag.clone()).await {
            Ok(r) => r.etag,
            // Another claim won.
            Err(StoreError::PreconditionFailed) => continue,
            Err(e) => return Err(format!("claiming {key}: {e}")),
        };
        turns(&mut rng, 2).await;
        match bucket.delete(&old_marker, None).await {
            Ok(()) | Err(StoreError::NotFound) => {}
            Err(e) => return Err(format!("deleting {old_marker}: {e}")),
        }
        turns(&mut rng, 2).await;
        for f in ["lease_id", "lease_expires_at", "worker_id"] {
            t[f] = Value::Null;
        }
        let requeue = |secs: i64, counter: &str, t: &mut Value| {
            t["status"] = json!("pending");
            t[counter] = json!(t[counter].as_u64().unwrap_or(0) + 1);
            t["available_at"] = json!(rfc3339::format(&(now + Duration::seconds(secs))));
        };
        match then {
            Then::Complete => {
                t["status"] = json!("completed");
                t["completed_at"] = stamp.clone();
                t["output"] = json!({"ok": true});
            }
            Then::Retry { secs } if t["retry_count"].as_u64() < t["max_retries"].as_u64() => {
                requeue(secs, "retry_count", &mut t);
                t["last_error"] = json!("the model's handler failed");
            }
            Then::Reschedule { secs } => requeue(secs, "reschedule_count", &mut t),
            // A permanent error, or a retryable one with the retries spent:
            // buquet's `fail_task`.
            Then::Retry { .. } | Then::Fail => {
                t["status"] = json!("failed");
                t["last_error"] = json!("the model's handler failed");
                t["completed_at"] = stamp.clone();
            }
        }
        put(&t, etag)
            .await
            .map_err(|e| format!("finishing {key}: {e}"))?;
        let mut markers = Vec::new();
        if t["status"] == "pending" {
            let m = marker_of(&t).ok_or("a requeued task without a place")?;
            bucket
                .put(&m, Bytes::new(), PutMode::Overwrite)
                .await
                .map_err(|e| format!("marker {m}: {e}"))?;
            markers.push(m);
        }
        return Ok(Worked {
            claim: Some(Claim {
                id: task_id_of(&key),
                attempt,
                by_scan,
                then,
                failed: t["status"] == "failed",
                markers,
            }),
        });
    }
    Ok(Worked { claim: None })
}

// ---- a recording store: every successful write, in order, with its time ----

#[derive(Debug, Clone)]
struct Write {
    key: String,
    body: Bytes,
    create: bool,
    /// When it landed.
    at: DateTime<Utc>,
    /// Its place among the bucket's changes (writes and deletions), which
    /// orders changes of one instant.
    seq: u64,
}

/// A record's S3 event on its way to the sweeper through the due queue,
/// or a submitter's due message (`RECORD_EVENTS=submitter`).
#[derive(Debug, Clone)]
struct Event {
    key: String,
    due: DateTime<Utc>,
    /// A submitter's message: its body and when it was sent.
    message: Option<(String, DateTime<Utc>)>,
}

#[derive(Clone)]
struct Recorder {
    inner: MemoryStore,
    clock: ManualClock,
    writes: Arc<Mutex<Vec<Write>>>,
    events: Arc<Mutex<Vec<Event>>>,
    /// How long after a record write its event reaches the sweeper: the due
    /// queue's delay plus up to 15 minutes of delivery.
    delay: Arc<Mutex<fastrand::Rng>>,
    stale: Duration,
    /// The bucket sends its S3 events (off under `RECORD_EVENTS=submitter`).
    bucket_events: Arc<AtomicBool>,
    /// The record a DELETE in progress would remove.
    deleting: Arc<Mutex<Option<Record>>>,
    /// How many changes the bucket has had.
    changes: Arc<AtomicU64>,
}

/// The recorder as a store.
type Recorded = common::Wrapped<Recorder>;

#[async_trait]
impl common::Hooks for Recorder {
    type Inner = MemoryStore;

    fn inner(&self) -> &MemoryStore {
        &self.inner
    }
    /// Notes which record a DELETE of `idempotency/` is about to remove, so
    /// that `after` can tell when a record's life ended early (a reset).
    async fn before(&self, call: &common::Call<'_>) -> Result<(), StoreError> {
        if call.op == Op::Delete && call.key.starts_with("idempotency/") {
            let held = self
                .inner
                .get(call.key)
                .await
                .ok()
                .and_then(|o| Record::parse(&o.body).ok());
            *self.deleting.lock().unwrap() = held;
        }
        Ok(())
    }

    async fn after(&self, call: &common::Call<'_>, ok: bool) {
        let (key, at) = (call.key, self.clock.now());
        if call.op == Op::Delete && key.starts_with("idempotency/") {
            let held = self.deleting.lock().unwrap().take();
            // A version deleted beneath a newer record leaves that record.
            let still = match self.inner.get(key).await {
                Ok(o) => Record::parse(&o.body).ok().map(|r| r.task_id),
                Err(_) => None,
            };
            // A record's life ended (the sweeper's, once it expired): a
            // change of the bucket, in its order.
            if held.is_some_and(|r| ok && still != Some(r.task_id)) {
                self.changes.fetch_add(1, Ordering::SeqCst);
            }
            return;
        }
        let Some(body) = call.body.filter(|_| ok) else {
            return;
        };
        if key.starts_with("idempotency/") && self.bucket_events.load(Ordering::SeqCst) {
            let lag = Duration::seconds(self.delay.lock().unwrap().i64(0..=900));
            self.events.lock().unwrap().push(Event {
                key: key.to_owned(),
                due: at + self.stale + lag,
                message: None,
            });
        }
        self.writes.lock().unwrap().push(Write {
            key: key.to_owned(),
            body: body.clone(),
            create: call.op == Op::PutCreate,
            at,
            seq: self.changes.fetch_add(1, Ordering::SeqCst),
        });
    }
}

/// Every task-object or marker write attempt (key, when it was sent), and
/// the first time a record naming each task id was sent.
#[derive(Default)]
struct Sends {
    writes: Vec<(String, DateTime<Utc>)>,
    record_first_sent: HashMap<uuid::Uuid, DateTime<Utc>>,
}

/// Sits right under the protocol, so that the time it notes for a request is
/// the time the request was signed and sent, right after the protocol's
/// deadline check.
#[derive(Clone)]
struct Slow {
    inner: FaultyStore<Recorded>,
    clock: ManualClock,
    rng: Arc<Mutex<fastrand::Rng>>,
    per_mille: u32,
    sends: Arc<Mutex<Sends>>,
    /// Beside a worker: after each request lands, its answer takes a random
    /// number of turns to come back, so that a worker's requests can fall
    /// between a finisher's read and its write. Requests sent together (the
    /// task and its marker) still land together.
    turns: Option<Arc<Mutex<fastrand::Rng>>>,
    /// Under `RECORD_EVENTS=submitter`: this process's first record PUT,
    /// which its due message goes out beside.
    first_record_put: Option<Arc<Mutex<FirstRecordPut>>>,
}

impl Slow {
    /// Beside a worker, an answer takes a random number of turns to come
    /// back.
    async fn answer(&self) {
        if let Some(rng) = &self.turns {
            let n = rng.lock().unwrap().u32(0..6);
            for _ in 0..n {
                tokio::task::yield_now().await;
            }
        }
    }

    /// Maybe lets time pass; then maybe the request is lost on the way (it
    /// timed out and never landed).
    fn lag(&self) -> Result<(), StoreError> {
        let mut rng = self.rng.lock().unwrap();
        if rng.u32(0..1000) < self.per_mille {
            self.clock.advance(Duration::seconds(rng.i64(1..900)));
            if rng.bool() {
                return Err(StoreError::Unavailable("timed out, never landed".into()));
            }
        }
        Ok(())
    }
}

#[async_trait]
impl common::Hooks for Slow {
    type Inner = FaultyStore<Recorded>;

    fn inner(&self) -> &FaultyStore<Recorded> {
        &self.inner
    }

    /// Notes a task's, a marker's or a record's send first, at the time it
    /// is sent; then maybe lags.
    async fn before(&self, call: &common::Call<'_>) -> Result<(), StoreError> {
        if let Some(body) = call.body {
            let mut sends = self.sends.lock().unwrap();
            let now = self.clock.now();
            if call.key.starts_with("tasks/") || call.key.starts_with("ready/") {
                sends.writes.push((call.key.to_owned(), now));
            } else if call.key.starts_with("idempotency/")
                && let Ok(r) = Record::parse(body)
            {
                sends.record_first_sent.entry(r.task_id).or_insert(now);
            }
        }
        // The process's first record PUT lets its due message leave beside
        // it (the engine sends both in one round), before any time passes.
        let first = call.key.starts_with("idempotency/")
            && call.body.is_some()
            && self
                .first_record_put
                .as_ref()
                .is_some_and(|p| !std::mem::replace(&mut p.lock().unwrap().sent, true));
        if first {
            tokio::task::yield_now().await;
        }
        let r = self.lag();
        // A PUT lost on the way has answered too (with its error).
        if first
            && r.is_err()
            && let Some(p) = &self.first_record_put
        {
            p.lock().unwrap().answered = true;
        }
        r
    }

    async fn after(&self, call: &common::Call<'_>, _ok: bool) {
        self.answer().await;
        if call.key.starts_with("idempotency/")
            && call.body.is_some()
            && let Some(p) = &self.first_record_put
        {
            let mut p = p.lock().unwrap();
            if p.sent {
                p.answered = true;
            }
        }
    }
}

// ---- the store the schedules run on ----

/// The bucket a schedule runs on, and the settings that fit it: S3, or a
/// store that lacks a capability, as the in-memory store can switch each
/// off (the README's table of stores), with the setting that store needs.
#[derive(Debug, Clone, Copy)]
struct Profile {
    behaviour: Behaviour,
    versioned: bool,
    /// `CONDITIONAL_DELETE`
    conditional_delete: bool,
    /// `LIST_ORDER`
    list_order: ListOrder,
}

impl Profile {
    fn s3() -> Self {
        Profile {
            behaviour: Behaviour::default(),
            versioned: false,
            conditional_delete: true,
            list_order: ListOrder::Bytes,
        }
    }

    /// What no schedule can reach on this store (the coverage check skips
    /// it): expired records are either deleted or kept, never both.
    fn unreachable(&self) -> &'static [&'static str] {
        if !self.conditional_delete && !self.versioned {
            // (A key is reset there too: a reset writes, it deletes
            // nothing.)
            &["expired records deleted"]
        } else {
            &["expired records left for the lifecycle rule"]
        }
    }
}

// ---- coverage ----

/// What the schedules exercised, so that the test can show it covered the
/// cases it claims to.
#[derive(Debug, Default, Clone, Copy)]
struct Stats {
    crashes: u64,
    lost_answers: u64,
    late_landings: u64,
    refused_at_deadline: u64,
    same_key_contention: u64,
    task_deletions: u64,
    recovered: u64,
    replayed: u64,
    missing: u64,
    input_conflicts: u64,
    task_type_conflicts: u64,
    undetermined: u64,
    storage_errors: u64,
    replaced: u64,
    tenant_submits: u64,
    queue_scope_submits: u64,
    custom_scope_submits: u64,
    event_checked: u64,
    event_finished: u64,
    event_late: u64,
    redelivered: u64,
    swept_finished: u64,
    swept_deleted: u64,
    swept_kept: u64,
    off_clock_submits: u64,
    beside_a_worker: u64,
    claims: u64,
    claimed_by_scan: u64,
    completed: u64,
    retried: u64,
    rescheduled: u64,
    markers_removed: u64,
    touched_replays: u64,
    due_queued: u64,
    due_answer_lost: u64,
    due_failed: u64,
    due_lost: u64,
    due_died_after_record: u64,
    due_unsent: u64,
    due_window: u64,
    due_no_record: u64,
    due_refused_submits: u64,
    due_early: u64,
    due_checked: u64,
    due_finished: u64,
    resets_done: u64,
    resets_refused: u64,
    resets_not_found: u64,
    failed_for_good: u64,
    cancelled: u64,
    failed_replays: u64,
    failed_key_reuses: u64,
    reuse_races: u64,
}

impl Stats {
    fn add(&mut self, o: &Stats) {
        for (a, b) in self.fields_mut().into_iter().zip(o.fields()) {
            *a += b;
        }
    }

    fn fields(&self) -> [u64; 53] {
        let mut c = *self;
        c.fields_mut().map(|v| *v)
    }

    fn fields_mut(&mut self) -> [&mut u64; 53] {
        [
            &mut self.crashes,
            &mut self.lost_answers,
            &mut self.late_landings,
            &mut self.refused_at_deadline,
            &mut self.same_key_contention,
            &mut self.task_deletions,
            &mut self.recovered,
            &mut self.replayed,
            &mut self.missing,
            &mut self.input_conflicts,
            &mut self.task_type_conflicts,
            &mut self.undetermined,
            &mut self.storage_errors,
            &mut self.replaced,
            &mut self.tenant_submits,
            &mut self.queue_scope_submits,
            &mut self.custom_scope_submits,
            &mut self.event_checked,
            &mut self.event_finished,
            &mut self.event_late,
            &mut self.redelivered,
            &mut self.swept_finished,
            &mut self.swept_deleted,
            &mut self.swept_kept,
            &mut self.off_clock_submits,
            &mut self.beside_a_worker,
            &mut self.claims,
            &mut self.claimed_by_scan,
            &mut self.completed,
            &mut self.retried,
            &mut self.rescheduled,
            &mut self.markers_removed,
            &mut self.touched_replays,
            &mut self.due_queued,
            &mut self.due_answer_lost,
            &mut self.due_failed,
            &mut self.due_lost,
            &mut self.due_died_after_record,
            &mut self.due_unsent,
            &mut self.due_window,
            &mut self.due_early,
            &mut self.due_checked,
            &mut self.due_finished,
            &mut self.due_no_record,
            &mut self.due_refused_submits,
            &mut self.resets_done,
            &mut self.resets_refused,
            &mut self.resets_not_found,
            &mut self.failed_for_good,
            &mut self.cancelled,
            &mut self.failed_replays,
            &mut self.failed_key_reuses,
            &mut self.reuse_races,
        ]
    }

    const NAMES: [&'static str; 53] = [
        "crashes",
        "lost answers to writes",
        "task writes landing after the deadline, inside the 15-minute margin",
        "writes refused at the finish deadline",
        "concurrent submits of one key",
        "tasks deleted by the queue",
        "interrupted submits finished by a later submit",
        "replays",
        "missing tasks",
        "input conflicts",
        "task-type conflicts",
        "undetermined answers",
        "storage errors",
        "expired records replaced",
        "submits of a tenant",
        "submits in the queue scope",
        "submits in a custom scope",
        "records checked by their event, nothing missing",
        "interrupted submits finished by their event",
        "events reaching the sweeper late",
        "due messages delivered again, beside their key's submit",
        "records finished by the scheduled pass",
        "expired records deleted",
        "expired records left for the lifecycle rule",
        "submits from a machine whose clock is off S3's",
        "steps where a worker ran beside submits or sweeps",
        "tasks claimed by a worker",
        "tasks a worker found by listing tasks/",
        "tasks completed",
        "tasks failed and retried",
        "tasks rescheduled",
        "markers of ours removed once a worker had taken their task",
        "replays answered with a task a worker had touched",
        "due messages queued by submitters",
        "due messages queued whose answer was lost",
        "due message sends that failed",
        "due message sends lost in flight",
        "submits that died after their record, their due message queued",
        "records whose every due message send failed, their submit alive",
        "records whose every due message send failed, their submit dead (with_claim's documented window)",
        "due messages that came before their record was stale, handed back",
        "records checked by a submitter's due message, nothing missing",
        "interrupted submits finished by a submitter's due message",
        "due messages whose submit wrote nothing, acknowledged once its claim could no more land",
        "submits that wrote nothing and answered 503: their due message was not accepted (before_claim)",
        "keys reset",
        "resets refused while a task could still be written",
        "resets of no live record",
        "tasks a worker failed for good",
        "tasks the queue's client cancelled",
        "replay-mode submits answered with their key's failed or cancelled task",
        "new_task submits that claimed a failed or cancelled task's key",
        "new_task submits of one key racing over its failed or cancelled task",
    ];
}

// ---- the submitter's due messages (RECORD_EVENTS=submitter) ----

/// The bucket the submitters' due messages name.
const BUCKET: &str = "model-bucket";

/// What became of one send of a due message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sent {
    Queued,
    /// Queued, but its answer was lost: the sender sees a timeout.
    AnswerLost,
    /// Refused or failed (a 503, access denied): not queued.
    Failed,
    /// Lost in flight: not queued; the sender sees a timeout.
    Lost,
    /// A retry of a process that had died: it never left.
    Dead,
}

/// A process's first record PUT: sent, answered.
#[derive(Debug, Default)]
struct FirstRecordPut {
    sent: bool,
    answered: bool,
}

/// One process's client of the due queue: a send leaves only while the
/// process is alive. (The engine sends the first beside the process's first
/// record PUT, in the same round; `Slow` lets it leave before that PUT.) A
/// queued message reaches the sweeper with the record events, the queue's
/// delay (`STALE_CREATING_AFTER_SECONDS`) plus up to 20 s of polling after
/// it was sent.
struct ModelDue {
    process: FaultyStore<Recorded>,
    first_record_put: Arc<Mutex<FirstRecordPut>>,
    clock: ManualClock,
    events: Arc<Mutex<Vec<Event>>>,
    log: Arc<Mutex<Vec<(String, Sent)>>>,
    rng: Mutex<fastrand::Rng>,
    /// Share of sends (per mille) that meet a fault of the queue.
    per_mille: u32,
    delay: Duration,
    bug: Option<Bug>,
    sends: AtomicUsize,
}

impl ModelDue {
    fn send_one(&self, m: &RecordDue) -> Result<(), SendError> {
        let alive = !self.process.crashed();
        let at = self.clock.now();
        let mut rng = self.rng.lock().unwrap();
        let sent = if !alive {
            Sent::Dead
        } else if rng.u32(0..1000) < self.per_mille {
            [Sent::AnswerLost, Sent::Failed, Sent::Failed, Sent::Lost][rng.usize(..4)]
        } else {
            Sent::Queued
        };
        if matches!(sent, Sent::Queued | Sent::AnswerLost) {
            self.events.lock().unwrap().push(Event {
                key: m.key.clone(),
                due: at + self.delay + Duration::seconds(rng.i64(0..=20)),
                message: Some((m.to_body(), at)),
            });
        }
        self.log.lock().unwrap().push((m.key.clone(), sent));
        match sent {
            Sent::Queued => Ok(()),
            Sent::Failed if rng.bool() => Err(SendError::Refused("AccessDenied".into())),
            Sent::Failed => Err(SendError::Unavailable("503".into())),
            Sent::AnswerLost => Err(SendError::Unavailable("timed out, but queued".into())),
            Sent::Lost => Err(SendError::Unavailable("timed out, never queued".into())),
            Sent::Dead => Err(SendError::Unavailable("the process is dead".into())),
        }
    }
}

#[async_trait]
impl DueSender for ModelDue {
    async fn send(&self, messages: &[RecordDue]) -> Vec<Result<(), SendError>> {
        let first = self.sends.fetch_add(1, Ordering::SeqCst) == 0;
        if first && self.bug == Some(Bug::DueAfterRecord) {
            // The planted bug: the first message waits for the record PUT's
            // answer.
            for _ in 0..10_000 {
                if self.first_record_put.lock().unwrap().answered {
                    break;
                }
                tokio::task::yield_now().await;
            }
        }
        messages.iter().map(|m| self.send_one(m)).collect()
    }
}

impl World {
    /// A process's client of the due queue, under `RECORD_EVENTS=submitter`.
    /// Some processes meet a queue that fails one send in ten to nine in ten.
    fn due_sender(
        &self,
        f: &Faults,
        process: &FaultyStore<Recorded>,
        first_record_put: Option<Arc<Mutex<FirstRecordPut>>>,
    ) -> Option<ModelDue> {
        let first_record_put = first_record_put?;
        let mut rng = fastrand::Rng::with_seed(f.seed ^ 0xd0e5_5e4d);
        let per_mille = if f.seed != 0 && rng.u8(..100) < 35 {
            rng.u32(100..900)
        } else {
            0
        };
        Some(ModelDue {
            process: process.clone(),
            first_record_put,
            clock: self.clock.clone(),
            events: self.recorder.events.clone(),
            log: self.due_log.clone(),
            rng: Mutex::new(rng),
            per_mille,
            delay: self.settings.stale_creating_after,
            bug: self.bug,
            sends: AtomicUsize::new(0),
        })
    }

    /// Where the write history and the due queue's log stand.
    fn due_mark(&self) -> (usize, usize) {
        (
            self.recorder.writes.lock().unwrap().len(),
            self.due_log.lock().unwrap().len(),
        )
    }

    /// Guarantee 4's premise under `RECORD_EVENTS=submitter`, after each
    /// step: every record that landed in it has a due message waiting in the
    /// queue (its own, sent beside its PUT, or an earlier one still on its
    /// way: either reaches the sweeper after the record's write, and the
    /// sweeper's outcomes are checked when it does), unless a send of it
    /// failed at the queue and none landed: the one window docs/protocol.md
    /// names (the send failed, then the process died), which a replay closes.
    /// `died`: the record paths of the step's submits that crashed.
    fn check_due_messages(
        &mut self,
        (writes, sends): (usize, usize),
        died: &[String],
    ) -> Result<(), String> {
        if !self.submitter {
            return Ok(());
        }
        let log = self.due_log.lock().unwrap()[sends..].to_vec();
        for (_, sent) in &log {
            match sent {
                Sent::Queued => self.stats.due_queued += 1,
                Sent::AnswerLost => {
                    self.stats.due_queued += 1;
                    self.stats.due_answer_lost += 1;
                }
                Sent::Failed => self.stats.due_failed += 1,
                Sent::Lost => self.stats.due_lost += 1,
                Sent::Dead => {}
            }
        }
        let landed: std::collections::BTreeSet<String> = self.recorder.writes.lock().unwrap()
            [writes..]
            .iter()
            // A reset record owes no due message: nothing is finished for
            // it, and the scheduled pass deletes it once it may.
            .filter(|w| {
                w.key.starts_with("idempotency/")
                    && !Record::parse(&w.body).is_ok_and(|r| r.is_reset())
            })
            .map(|w| w.key.clone())
            .collect();
        for key in landed {
            let waiting = self
                .recorder
                .events
                .lock()
                .unwrap()
                .iter()
                .any(|e| e.key == key && e.message.is_some());
            let failed = log
                .iter()
                .any(|(k, s)| *k == key && matches!(s, Sent::Failed | Sent::Lost));
            if waiting {
                self.stats.due_died_after_record += u64::from(died.contains(&key));
            } else if !self.with_claim {
                // before_claim: a record lands only after the queue took
                // its message, so none is ever without one.
                return Err(format!(
                    "guarantee 4 (before_claim): the record {key} landed, but no due message for it is in the queue"
                ));
            } else if failed && died.contains(&key) {
                self.stats.due_window += 1;
            } else if failed {
                self.stats.due_unsent += 1;
            } else {
                return Err(format!(
                    "guarantee 4: the record {key} landed, but no due message for it is in the queue, and no send of it failed at the queue"
                ));
            }
        }
        Ok(())
    }

    /// The sweeper takes one submitter's message from the due queue as the
    /// function does (`lambda::due`: the one parser, the due path's 2 s
    /// tolerance, the hand-back of an early one), and what its summary says
    /// became of the record.
    async fn take_message(&mut self, q: &Queue, body: &str) -> Result<RecordOutcome, String> {
        let m = DueMessage {
            id: "m1".into(),
            body: body.into(),
        };
        let batch = due::handle_messages(q, BUCKET, &[m], false, None).await;
        let s = &batch.summary;
        // A message that finds no record while its claim may still land is
        // handed back as an early one is.
        let early = s.early + s.no_record_yet;
        let outcome = match (s.scanned, s.finished, early, s.expired_deleted, s.errors) {
            (1, 1, 0, 0, 0) => RecordOutcome::Finished,
            (1, 0, 1, 0, 0) => RecordOutcome::Early,
            (1, 0, 0, 1, 0) => RecordOutcome::ExpiredDeleted,
            (1, 0, 0, 0, 1) if s.past_deadline == 1 => RecordOutcome::PastDeadline,
            (1, 0, 0, 0, 0) => RecordOutcome::Nothing,
            _ => {
                return Err(format!(
                    "the sweeper did not take a submitter's due message ({body}) as one record: {s:?}"
                ));
            }
        };
        let early = outcome == RecordOutcome::Early;
        if batch.retry.is_empty() == early {
            return Err(format!(
                "a due message ended {outcome:?}, handed back: {:?}",
                batch.retry
            ));
        }
        match outcome {
            RecordOutcome::Early => self.stats.due_early += 1,
            RecordOutcome::Nothing => {
                self.stats.due_checked += 1;
                self.stats.due_no_record += s.due_no_record;
            }
            RecordOutcome::Finished => self.stats.due_finished += 1,
            _ => {}
        }
        Ok(outcome)
    }
}

// ---- running a schedule ----

/// One answered submit: its own record path, what it sent, what it got.
struct Answer {
    path: String,
    task_id: uuid::Uuid,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
}

/// The functions' machines' clock: S3's (the model's `ManualClock`) less
/// `behind`.
#[derive(Clone)]
struct MachineClock {
    s3: ManualClock,
    behind: Arc<Mutex<Duration>>,
}

impl Clock for MachineClock {
    fn now(&self) -> DateTime<Utc> {
        self.s3.now() - *self.behind.lock().unwrap()
    }
}

struct World {
    /// S3's clock: every time the checker notes or compares is S3's, as the
    /// records' `LastModified` are.
    clock: ManualClock,
    /// The clock the protocol runs on.
    machine: MachineClock,
    bucket: MemoryStore,
    recorder: Recorder,
    settings: Settings,
    /// The bug planted in every process's store and engine settings.
    bug: Option<Bug>,
    answers: Vec<Answer>,
    sends: Arc<Mutex<Sends>>,
    /// Tasks the queue deleted.
    deleted: HashSet<uuid::Uuid>,
    /// Resets answered `Done`: the record's task id, when, and how many
    /// changes the bucket had had by then.
    reset_answered: Vec<(uuid::Uuid, DateTime<Utc>, u64)>,
    /// Every claim a worker made: (task, attempt).
    claims: HashSet<(uuid::Uuid, u64)>,
    /// Markers last written by a process of ours that did not end cleanly.
    unsure_markers: HashSet<String>,
    /// Tasks whose submit was finished before its deadline: answered, or
    /// handled by its record's event on time.
    finished: HashSet<uuid::Uuid>,
    stats: Stats,
    /// `RECORD_EVENTS=submitter` (Step::SubmitterSends).
    submitter: bool,
    /// And `DUE_MESSAGE=with_claim`: the window of a record whose send
    /// failed is allowed (counted), not an error.
    with_claim: bool,
    /// Every send of a due message: its record, what the queue did.
    due_log: Arc<Mutex<Vec<(String, Sent)>>>,
    /// The records of the recorder's writes read so far, each with its
    /// write's place: the history only grows, and `check_history` runs after
    /// every step, so each record is parsed once, not once a step.
    records_written: Vec<(usize, Record)>,
}

enum Outcome {
    Deliver(RecordOutcome),
    Submit(Result<idempotent_submit::Submitted, SubmitError>),
    Sweep(Result<idempotent_submit::protocol::SweepSummary, SubmitError>),
    Work(Result<Worked, String>),
    Reset(Result<Reset, SubmitError>),
}

impl World {
    fn new(bug: Option<Bug>, profile: Profile) -> Self {
        let clock = ManualClock::at_epoch();
        let machine = MachineClock {
            s3: clock.clone(),
            behind: Arc::default(),
        };
        // The bucket stands `behind` ahead of the machines: its time (and so
        // its LastModified and Date) is the model's clock.
        let machine_clock = Arc::new(machine.clone()) as Arc<dyn Clock>;
        let bucket = if profile.versioned {
            MemoryStore::versioned(machine_clock)
        } else {
            MemoryStore::new(machine_clock)
        }
        .with_behaviour(profile.behaviour);
        let mut settings = common::settings();
        settings.conditional_delete = profile.conditional_delete;
        settings.list_order = profile.list_order;
        settings.retry.attempt_timeout = std::time::Duration::from_millis(50);
        let recorder = Recorder {
            inner: bucket.clone(),
            clock: clock.clone(),
            writes: Arc::default(),
            events: Arc::default(),
            delay: Arc::new(Mutex::new(fastrand::Rng::with_seed(7))),
            stale: settings.stale_creating_after,
            bucket_events: Arc::new(AtomicBool::new(true)),
            deleting: Arc::default(),
            changes: Arc::default(),
        };
        World {
            clock,
            machine,
            bucket,
            recorder,
            settings,
            bug,
            answers: Vec::new(),
            sends: Arc::default(),
            deleted: HashSet::new(),
            reset_answered: Vec::new(),
            claims: HashSet::new(),
            unsure_markers: HashSet::new(),
            finished: HashSet::new(),
            stats: Stats::default(),
            submitter: false,
            with_claim: false,
            records_written: Vec::new(),
            due_log: Arc::default(),
        }
    }

    fn process(&self, f: &Faults, beside_a_worker: bool) -> (Queue, FaultyStore<Recorded>) {
        let store = FaultyStore::new(common::Wrapped(self.recorder.clone()));
        if let Some((n, after)) = f.crash_at {
            store.at_call(
                n,
                if after {
                    Fault::CrashAfter
                } else {
                    Fault::CrashBefore
                },
            );
        }
        if f.per_mille > 0 {
            store.random_faults(
                f.seed,
                f.per_mille,
                vec![
                    Fault::Fail(StoreError::Unavailable("503 SlowDown".into())),
                    Fault::Fail(StoreError::Conflict),
                    Fault::FailAfter(StoreError::Unavailable("reset after landing".into())),
                    Fault::Fail(StoreError::Unavailable("500".into())),
                ],
            );
        }
        let first_record_put = self.submitter.then(Arc::default);
        let slow = Slow {
            first_record_put: first_record_put.clone(),
            inner: store.clone(),
            clock: self.clock.clone(),
            rng: Arc::new(Mutex::new(fastrand::Rng::with_seed(f.seed ^ 0x51_0e))),
            per_mille: f.slow_per_mille,
            sends: self.sends.clone(),
            turns: beside_a_worker
                .then(|| Arc::new(Mutex::new(fastrand::Rng::with_seed(f.seed ^ 0x7u64)))),
        };
        let planted = Planted {
            inner: common::Wrapped(slow),
            bug: self.bug,
            writes: self.recorder.writes.clone(),
            armed: Arc::default(),
        };
        let q = Queue::with_clock(
            common::Wrapped(planted),
            Arc::new(self.machine.clone()),
            planted::engine_settings(self.bug, &self.settings),
        );
        match self.due_sender(f, &store, first_record_put) {
            Some(sender) => {
                let order = if self.with_claim {
                    DueOrder::WithClaim
                } else {
                    DueOrder::BeforeClaim
                };
                (q.with_due_sender_ordered(sender, BUCKET, order), store)
            }
            None => (q, store),
        }
    }

    async fn get(&self, key: &str) -> Option<Object> {
        self.bucket.get(key).await.ok()
    }

    async fn record_at(&self, path: &str) -> Option<(Record, ObjectMeta)> {
        let o = self.get(path).await?;
        Some((Record::parse(&o.body).unwrap(), o.meta))
    }

    fn record_first_sent(&self, id: uuid::Uuid) -> Option<DateTime<Utc>> {
        self.sends
            .lock()
            .unwrap()
            .record_first_sent
            .get(&id)
            .copied()
    }

    /// When the first write of the record naming `id` landed.
    fn record_first_landed(&self, id: uuid::Uuid) -> Option<DateTime<Utc>> {
        self.recorder
            .writes
            .lock()
            .unwrap()
            .iter()
            .filter(|w| w.key.starts_with("idempotency/"))
            .find(|w| Record::parse(&w.body).is_ok_and(|r| r.task_id == id))
            .map(|w| w.at)
    }

    async fn run_step(&mut self, step: &Step) -> Result<(), String> {
        match step {
            Step::Advance { secs, sweeper_down } => {
                self.advance(Duration::seconds(*secs), *sweeper_down).await
            }
            Step::NearDeadline {
                who,
                task_type,
                before_secs,
            } => {
                let now = self.clock.now();
                if let Some((rec, meta)) = self.record_at(&record_path(*who, *task_type)).await
                    && rec.status == Some(RecordStatus::Creating)
                {
                    let to = meta.last_modified + self.settings.finish_window
                        - Duration::seconds(*before_secs);
                    if to > now {
                        return self.advance(to - now, true).await;
                    }
                }
                Ok(())
            }
            Step::DeleteTask { who, task_type } => {
                let now = self.clock.now();
                if let Some((rec, _)) = self.record_at(&record_path(*who, *task_type)).await
                    && let Some(task) = self.get(&rec.task_key).await
                    && task.meta.last_modified + Duration::hours(1) <= now
                {
                    self.bucket.delete(&rec.task_key, None).await.unwrap();
                    self.deleted.insert(rec.task_id);
                    self.stats.task_deletions += 1;
                }
                Ok(())
            }
            Step::Cancel { who, task_type } => self.cancel(*who, *task_type).await,
            Step::ClockStepped { secs } => {
                let behind = Duration::seconds(*secs);
                *self.machine.behind.lock().unwrap() = behind;
                self.bucket.set_skew(behind);
                Ok(())
            }
            Step::Submit { .. }
            | Step::Sweep { .. }
            | Step::Work { .. }
            | Step::Deliver { .. }
            | Step::Reset { .. } => self.run_concurrent(std::slice::from_ref(step), true).await,
            Step::Together(steps) => self.run_concurrent(steps, false).await,
            Step::SubmitterSends { with_claim } => {
                self.submitter = true;
                self.with_claim = *with_claim;
                self.recorder.bucket_events.store(false, Ordering::SeqCst);
                Ok(())
            }
        }
    }

    /// buquet 0.1's `cancel` of the task of this key's record: only a
    /// `pending` task, by a compare-and-swap, then its marker deleted.
    async fn cancel(&mut self, who: Who, task_type: u8) -> Result<(), String> {
        let Some((rec, _)) = self.record_at(&record_path(who, task_type)).await else {
            return Ok(());
        };
        let Some(obj) = self.get(&rec.task_key).await else {
            return Ok(());
        };
        let mut t: Value = serde_json::from_slice(&obj.body).map_err(|e| e.to_string())?;
        if t["status"] != "pending" {
            return Ok(());
        }
        let marker = marker_of(&t).ok_or("a task without a place")?;
        let stamp = json!(rfc3339::format(&self.clock.now()));
        t["status"] = json!("cancelled");
        t["cancelled_at"] = stamp.clone();
        t["updated_at"] = stamp;
        let body = Bytes::from(serde_json::to_vec(&t).unwrap());
        match self
            .bucket
            .put(&rec.task_key, body, PutMode::Update(obj.meta.etag))
            .await
        {
            Ok(_) => {}
            Err(StoreError::PreconditionFailed) => return Ok(()),
            Err(e) => return Err(format!("cancelling {}: {e}", rec.task_key)),
        }
        match self.bucket.delete(&marker, None).await {
            Ok(()) | Err(StoreError::NotFound) => {}
            Err(e) => return Err(format!("deleting {marker}: {e}")),
        }
        self.stats.cancelled += 1;
        Ok(())
    }

    /// The status of the task object at `task_key`, if it is there.
    async fn task_status(&self, task_key: &str) -> Option<String> {
        let task = self.get(task_key).await?;
        let t: Value = serde_json::from_slice(&task.body).ok()?;
        t["status"].as_str().map(str::to_owned)
    }

    /// Lets `by` pass, delivering each record event when it falls due
    /// (unless the sweeper is down).
    async fn advance(&mut self, by: Duration, sweeper_down: bool) -> Result<(), String> {
        let start = self.clock.now();
        let end = start + by;
        if sweeper_down {
            self.clock.set(end);
            return Ok(());
        }
        loop {
            let next = {
                let mut events = self.recorder.events.lock().unwrap();
                events.sort_by_key(|e| e.due);
                match events.first() {
                    Some(e) if e.due <= end => Some(events.remove(0)),
                    _ => None,
                }
            };
            let Some(event) = next else { break };
            // An event that fell due while an earlier step held the clock
            // (a slow request) reaches the sweeper late.
            let on_time = event.due >= start;
            if on_time {
                self.clock.set(event.due);
            } else {
                self.stats.event_late += 1;
            }
            self.deliver(&event, on_time).await?;
        }
        self.clock.set(end);
        Ok(())
    }

    /// The sweeper handles one record event, with a healthy store. On time,
    /// guarantee 4: a `creating` record is finished (its task object, and
    /// its marker while no worker has touched the task), and not rewritten.
    async fn deliver(&mut self, event: &Event, on_time: bool) -> Result<(), String> {
        let (q, store) = self.process(&Faults::none(), false);
        let before = self.record_at(&event.key).await;
        let outcome = match &event.message {
            None => q.engine().sweep_record(&event.key, false, None).await,
            Some((body, _)) => self.take_message(&q, body).await?,
        };
        // A submitter's message names the record, not a write: one sent
        // after the record was written (a replay's, a conflict's) may find
        // it past its deadline.
        let after_record = matches!((&event.message, &before),
            (Some((_, sent)), Some((_, meta))) if meta.last_modified < *sent);
        let now = self.clock.now();
        self.note_markers(&store, !matches!(outcome, RecordOutcome::Failed(_)));
        match &outcome {
            RecordOutcome::Finished => self.stats.event_finished += 1,
            RecordOutcome::Nothing => self.stats.event_checked += 1,
            RecordOutcome::Early => {
                // A newer write of the record has its own event; this one
                // comes back after the visibility timeout anyway.
                self.recorder.events.lock().unwrap().push(Event {
                    key: event.key.clone(),
                    due: now + Duration::seconds(720),
                    message: event.message.clone(),
                });
            }
            RecordOutcome::PastDeadline if !on_time || after_record => {}
            RecordOutcome::ExpiredDeleted | RecordOutcome::ExpiredKept => {}
            other => {
                return Err(format!(
                    "guarantee 4: the sweeper's event for {} at {now} ended {other:?} (record before: {:?})",
                    event.key,
                    before.map(|(r, m)| (r.status, m.last_modified))
                ));
            }
        }
        if matches!(outcome, RecordOutcome::Finished | RecordOutcome::Nothing)
            && let Some((rec, meta)) = before
            && rec.status == Some(RecordStatus::Creating)
            && !rec.is_expired(now)
        {
            let (after, meta_after) = self
                .record_at(&event.key)
                .await
                .ok_or("a finished record is gone")?;
            if meta_after.etag != meta.etag || after.task_id != rec.task_id {
                return Err(format!(
                    "{} was rewritten by its event: a record is written once",
                    event.key
                ));
            }
            if self.get(&rec.task_key).await.is_none() {
                return Err(format!(
                    "guarantee 4: {} has no task after its event",
                    event.key
                ));
            }
            if on_time && now < meta.last_modified + self.settings.finish_window {
                self.finished.insert(rec.task_id);
            }
        }
        Ok(())
    }

    async fn run_concurrent(&mut self, steps: &[Step], alone: bool) -> Result<(), String> {
        let due_mark = self.due_mark();
        let mut died: Vec<String> = Vec::new();
        let mut paths: Vec<Option<String>> = Vec::new();
        let mut before: Vec<Option<(Record, ObjectMeta)>> = Vec::new();
        for s in steps {
            let path = match s {
                Step::Submit { who, task_type, .. } | Step::Reset { who, task_type, .. } => {
                    Some(record_path(*who, *task_type))
                }
                _ => None,
            };
            before.push(match &path {
                Some(p) => self.record_at(p).await,
                None => None,
            });
            paths.push(path);
        }
        // Whether each submit's key held a live record whose task had ended
        // failed or cancelled when the step began: what frees it to
        // `if_task_failed: new_task`.
        let start = self.clock.now();
        let mut freed = Vec::new();
        for b in &before {
            freed.push(match b {
                Some((old, _)) if old.expires_at > start && !old.is_reset() => self
                    .task_status(&old.task_key)
                    .await
                    .is_some_and(|s| s == "failed" || s == "cancelled"),
                _ => false,
            });
        }
        {
            let mut racing = HashSet::new();
            let new_tasks = steps.iter().zip(&paths).zip(&freed);
            if new_tasks
                .filter(|((s, _), f)| matches!(s, Step::Submit { new_task: true, .. }) && **f)
                .filter_map(|((_, p), _)| p.as_ref())
                .any(|p| !racing.insert(p.clone()))
            {
                self.stats.reuse_races += 1;
            }
        }
        {
            let mut seen = HashSet::new();
            let submits = steps.iter().zip(&paths);
            if submits
                .filter(|(s, _)| matches!(s, Step::Submit { .. }))
                .filter_map(|(_, p)| p.as_ref())
                .any(|p| !seen.insert(p.clone()))
            {
                self.stats.same_key_contention += 1;
            }
        }
        let beside_a_worker = steps.iter().any(|s| matches!(s, Step::Work { .. }));
        if beside_a_worker && steps.len() > 1 {
            self.stats.beside_a_worker += 1;
        }
        // A reset beside submits meets them between their writes: answers
        // take turns to come back, as beside a worker.
        let interleaved = beside_a_worker
            || (steps.len() > 1 && steps.iter().any(|s| matches!(s, Step::Reset { .. })));
        let procs: Vec<Option<(Queue, FaultyStore<Recorded>)>> = steps
            .iter()
            .map(|s| match s {
                Step::Submit { faults, .. }
                | Step::Sweep { faults, .. }
                | Step::Reset { faults, .. } => Some(self.process(faults, interleaved)),
                Step::Deliver { .. } => Some(self.process(&Faults::none(), interleaved)),
                _ => None,
            })
            .collect();
        let work_seed = self.clock.now().timestamp() as u64 ^ steps.len() as u64;
        let futs = steps.iter().zip(&procs).map(|(s, p)| {
            let q = p.as_ref().map(|(q, _)| q.clone());
            let s = s.clone();
            let bucket = self.bucket.clone();
            let now = self.clock.now();
            let bug = self.bug;
            async move {
                match (s, q) {
                    (
                        Step::Submit {
                            who,
                            input,
                            task_type,
                            ttl_hours,
                            new_task,
                            ..
                        },
                        Some(q),
                    ) => {
                        let mut b = q
                            .submit(TASK_TYPES[task_type as usize], input_of(who, input))
                            .idempotency_key(key_name(who.key))
                            .idempotency_ttl(Duration::hours(ttl_hours));
                        if new_task {
                            b = b.if_task_failed(IfTaskFailed::NewTask);
                        }
                        b = match who.scope {
                            0 => b,
                            1 => b.idempotency_scope(Scope::Queue),
                            _ => b.idempotency_scope(Scope::parse(Some("shared")).unwrap()),
                        };
                        if who.tenant > 0 {
                            b = b.tenant(TENANTS[who.tenant as usize]);
                        }
                        Outcome::Submit(b.await)
                    }
                    (Step::Sweep { dry_run, .. }, Some(q)) => Outcome::Sweep(
                        q.engine()
                            .sweep(&SweepOptions {
                                dry_run,
                                ..Default::default()
                            })
                            .await,
                    ),
                    (Step::Reset { who, task_type, .. }, Some(q)) => {
                        Outcome::Reset(reset(&q, who, task_type, bug).await)
                    }
                    (Step::Work { scan, then }, None) => {
                        Outcome::Work(work(bucket, now, scan, then, work_seed).await)
                    }
                    (
                        Step::Deliver {
                            who,
                            task_type,
                            lag,
                        },
                        Some(q),
                    ) => {
                        for _ in 0..lag {
                            tokio::task::yield_now().await;
                        }
                        let key = record_path(who, task_type);
                        Outcome::Deliver(q.engine().sweep_record(&key, false, None).await)
                    }
                    _ => unreachable!(),
                }
            }
        });
        let changes_at_start = self.recorder.changes.load(Ordering::SeqCst);
        let outcomes = futures::future::join_all(futs).await;
        let now = self.clock.now();
        for (i, ((step, proc), outcome)) in steps.iter().zip(&procs).zip(outcomes).enumerate() {
            if let Outcome::Work(r) = outcome {
                self.worked(r?)?;
                continue;
            }
            let Some((_, store)) = proc else {
                unreachable!()
            };
            let crashed = store.crashed();
            if crashed {
                self.stats.crashes += 1;
                if matches!(step, Step::Submit { .. }) {
                    died.extend(paths[i].clone());
                }
            }
            self.stats.lost_answers += store
                .calls()
                .iter()
                .filter(|c| {
                    c.op.is_write()
                        && c.error == Some(StoreError::Unavailable("reset after landing".into()))
                })
                .count() as u64;
            let (faulty, slow) = match step {
                Step::Submit { faults, .. }
                | Step::Sweep { faults, .. }
                | Step::Reset { faults, .. } => {
                    (faults.per_mille > 0 || crashed, faults.slow_per_mille > 0)
                }
                _ => (false, false),
            };
            let clean = match (step, &outcome) {
                (Step::Deliver { .. }, Outcome::Deliver(o)) => {
                    !matches!(o, RecordOutcome::Failed(_))
                }
                (Step::Submit { .. }, Outcome::Submit(r)) => r.is_ok(),
                (Step::Sweep { .. }, Outcome::Sweep(r)) => r.as_ref().is_ok_and(|s| s.errors == 0),
                _ => false,
            };
            self.note_markers(store, clean);
            match (step, outcome) {
                (Step::Deliver { .. }, Outcome::Deliver(o)) => {
                    self.stats.redelivered += 1;
                    match o {
                        // A healthy store: nothing to retry but what the
                        // state makes early, and nothing corrupt.
                        RecordOutcome::Corrupt => {
                            return Err("a record the sweeper read was corrupt".into());
                        }
                        RecordOutcome::Failed(e) if !e.is_retryable() => {
                            return Err(format!("a redelivered due message failed: {e:?}"));
                        }
                        _ => {}
                    }
                }
                (
                    Step::Submit {
                        who,
                        input,
                        task_type,
                        new_task,
                        ..
                    },
                    Outcome::Submit(r),
                ) => {
                    let path = paths[i].clone().unwrap();
                    let ctx = SubmitCtx {
                        who: *who,
                        input: *input,
                        task_type: *task_type,
                        new_task: *new_task,
                        freed: freed[i],
                        path,
                        before: before[i].clone(),
                        start,
                        now,
                        alone,
                        faulty,
                        slow,
                        crashed,
                        wrote: store
                            .calls()
                            .iter()
                            .any(|c| c.op.is_write() && c.error.is_none()),
                    };
                    self.check_submit(&ctx, r)
                        .await
                        .map_err(|e| format!("{who:?} type {task_type} input {input}: {e}"))?;
                }
                (Step::Sweep { dry_run, .. }, Outcome::Sweep(r)) => {
                    if let Ok(s) = &r
                        && !dry_run
                    {
                        self.stats.swept_finished += s.finished;
                        self.stats.swept_deleted += s.expired_deleted;
                        self.stats.swept_kept += s.expired_kept;
                    }
                    let clean = !faulty && !slow;
                    // A resumed pass does not re-read what it handled before
                    // it stopped; those records wait for the next pass.
                    if let Ok(s) = &r
                        && clean
                        && alone
                        && s.complete
                        && !s.resumed
                        && !dry_run
                    {
                        self.check_swept(now).await?;
                    }
                    if clean && r.is_err() {
                        return Err(format!("a fault-free sweep failed: {r:?}"));
                    }
                }
                (Step::Reset { .. }, Outcome::Reset(r)) => {
                    let path = paths[i].clone().unwrap();
                    // Whatever it was told (a lost answer, a crash after
                    // the PUT landed), the record it read is reset.
                    let deleted = before[i]
                        .as_ref()
                        .is_some_and(|(old, _)| self.reset_landed(old.task_id, changes_at_start));
                    let ctx = ResetCtx {
                        deleted,
                        path,
                        before: before[i].clone(),
                        start,
                        now,
                        alone,
                        faulty,
                        slow,
                        crashed,
                    };
                    self.check_reset(&ctx, r).await?;
                }
                _ => unreachable!(),
            }
        }
        self.check_due_messages(due_mark, &died)
    }

    /// Checks a reset's answer against what the state allowed (docs/protocol.md,
    /// "Looking up and resetting a key"): a record is forgotten only when no
    /// task can be written for it any more, and a reset deletes no task.
    async fn check_reset(
        &mut self,
        c: &ResetCtx,
        r: Result<Reset, SubmitError>,
    ) -> Result<(), String> {
        let live = c
            .before
            .as_ref()
            .filter(|(old, _)| old.expires_at > c.start);
        // The life this reset ended: from its reset record's write where it
        // landed, else from its answer.
        let ended = |w: &Self, id: uuid::Uuid| {
            let writes = w.recorder.writes.lock().unwrap();
            writes
                .iter()
                .rev()
                .find(|x| {
                    x.key.starts_with("idempotency/")
                        && Record::parse(&x.body).is_ok_and(|r| r.task_id == id && r.is_reset())
                })
                .map(|x| (id, x.at, x.seq))
                .unwrap_or((id, c.now, w.recorder.changes.load(Ordering::SeqCst)))
        };
        if c.deleted
            && let Some((old, _)) = &c.before
            && !matches!(r, Ok(Reset::Done { .. }))
        {
            let e = ended(self, old.task_id);
            self.reset_answered.push(e);
        }
        match r {
            Ok(Reset::Done { old_task_id }) => {
                self.stats.resets_done += 1;
                let e = ended(self, old_task_id);
                self.reset_answered.push(e);
                // It forgot the record it read, which was alive.
                if c.alone && live.is_none_or(|(old, _)| old.task_id != old_task_id) {
                    return Err(format!(
                        "a reset forgot {old_task_id}, but the live record was {:?}",
                        live.map(|(old, _)| old.task_id)
                    ));
                }
                // The key holds the reset record: never nothing, which a
                // late create-only PUT of the old claim could fill again.
                if c.alone {
                    match self.record_at(&c.path).await {
                        Some((now_rec, _))
                            if now_rec.is_reset() && now_rec.task_id == old_task_id => {}
                        Some(_) => return Err(format!("a reset of {} left its record", c.path)),
                        None => {
                            return Err(format!(
                                "a reset of {} deleted its record: the old claim could come back",
                                c.path
                            ));
                        }
                    }
                }
                // A reset cancels nothing: the old task stays, if it was written.
                let task_key = live.map(|(old, _)| old.task_key.clone());
                if let Some(task_key) = task_key
                    && !self.deleted.contains(&old_task_id)
                    && self.ever_written(&task_key)
                    && self.get(&task_key).await.is_none()
                {
                    return Err(format!("a reset removed the old task {task_key}"));
                }
            }
            Ok(Reset::NotFound) => {
                self.stats.resets_not_found += 1;
                // Only with no live record (its DELETE may have landed and
                // lost its answer: the retry finds none).
                if c.alone
                    && !c.faulty
                    && let Some((old, _)) = live
                    && old.expires_at > c.now + Duration::seconds(2)
                {
                    return Err(format!(
                        "a reset found no record, but {} was live",
                        old.task_id
                    ));
                }
            }
            Ok(Reset::InProgress { task_id, .. }) => {
                self.stats.resets_refused += 1;
                if c.alone {
                    let Some((old, _)) = live else {
                        return Err(format!(
                            "a reset refused for {task_id}, with no live record"
                        ));
                    };
                    if old.task_id != task_id || old.status != Some(RecordStatus::Creating) {
                        return Err(format!(
                            "a reset refused for {task_id}, but the record was {} {:?}",
                            old.task_id, old.status
                        ));
                    }
                    // Refused only while its task may still be written: at
                    // any age of the record, once its task is there, a reset
                    // goes ahead.
                    if self.get(&old.task_key).await.is_some() {
                        return Err(format!(
                            "a reset refused for {task_id}, whose task is there"
                        ));
                    }
                    if self.record_at(&c.path).await.is_none() {
                        return Err(format!("a refused reset of {} deleted its record", c.path));
                    }
                }
            }
            Ok(Reset::Changed) => {
                if c.alone {
                    return Err(format!("a reset alone met a changed record at {}", c.path));
                }
            }
            Err(SubmitError::Storage(StoreError::Crashed)) if c.crashed => {}
            Err(SubmitError::Storage(StoreError::Unavailable(_) | StoreError::Conflict))
                if c.faulty || c.slow => {}
            Err(SubmitError::DeadlineExceeded) if c.slow => {}
            Err(e) => return Err(format!("a reset failed as the state did not allow: {e:?}")),
        }
        Ok(())
    }

    /// Whether a reset record of the record of `task_id` landed at or after
    /// the change `since`.
    fn reset_landed(&self, task_id: uuid::Uuid, since: u64) -> bool {
        self.recorder.writes.lock().unwrap().iter().any(|w| {
            w.seq >= since
                && w.key.starts_with("idempotency/")
                && Record::parse(&w.body).is_ok_and(|r| r.task_id == task_id && r.is_reset())
        })
    }

    /// Whether any write of `key` ever landed.
    fn ever_written(&self, key: &str) -> bool {
        self.recorder
            .writes
            .lock()
            .unwrap()
            .iter()
            .any(|w| w.key == key)
    }

    /// Notes the claims of a worker's step: no task is claimed twice for one
    /// attempt.
    fn worked(&mut self, done: Worked) -> Result<(), String> {
        let Some(c) = done.claim else {
            return Ok(());
        };
        self.stats.claims += 1;
        self.stats.claimed_by_scan += u64::from(c.by_scan);
        match c.then {
            Then::Complete => self.stats.completed += 1,
            Then::Retry { .. } if !c.failed => self.stats.retried += 1,
            Then::Reschedule { .. } => self.stats.rescheduled += 1,
            Then::Retry { .. } | Then::Fail => {}
        }
        self.stats.failed_for_good += u64::from(c.failed);
        if !self.claims.insert((c.id, c.attempt)) {
            return Err(format!(
                "task {} was claimed twice for attempt {}",
                c.id, c.attempt
            ));
        }
        // A marker the worker writes is the task's own, and true.
        for m in &c.markers {
            self.unsure_markers.remove(m);
        }
        Ok(())
    }

    /// Markers our process wrote or removed in this step. A process that did
    /// not end cleanly (crashed, or failed) may have died between its
    /// marker landing and its re-read of the task: such a marker is not
    /// vouched for until a later finisher of its record checks it.
    fn note_markers(&mut self, store: &FaultyStore<Recorded>, clean: bool) {
        for c in store.calls() {
            if !c.key.starts_with("ready/") {
                continue;
            }
            match c.op {
                Op::Delete if c.error.is_none() => {
                    self.stats.markers_removed += 1;
                    self.unsure_markers.remove(&c.key);
                }
                Op::Put if !clean => {
                    // It may have landed, whatever the process was told.
                    self.unsure_markers.insert(c.key.clone());
                }
                Op::Put if c.error.is_none() => {
                    self.unsure_markers.remove(&c.key);
                }
                _ => {}
            }
        }
    }

    /// Checks one submit's answer or error against what the state allowed.
    async fn check_submit(
        &mut self,
        c: &SubmitCtx,
        r: Result<idempotent_submit::Submitted, SubmitError>,
    ) -> Result<(), String> {
        self.stats.tenant_submits += u64::from(c.who.tenant > 0);
        self.stats.off_clock_submits += u64::from(!self.machine.behind.lock().unwrap().is_zero());
        self.stats.queue_scope_submits += u64::from(c.who.scope == 1);
        self.stats.custom_scope_submits += u64::from(c.who.scope == 2);
        let my_type = TASK_TYPES[c.task_type as usize];
        let my_input = input_of(c.who, c.input);
        let my_hash = input_hash(&canonical_json(&my_input));
        // The record this submit met, if it was alive.
        let live_before = c
            .before
            .as_ref()
            .filter(|(old, _)| old.expires_at > c.start);
        match r {
            Ok(s) => {
                self.answers.push(Answer {
                    path: c.path.clone(),
                    task_id: s.task_id,
                    start: c.start,
                    end: c.now,
                });
                self.stats.recovered += u64::from(s.recovered);
                self.stats.replayed += u64::from(s.replayed);
                self.stats.missing += u64::from(s.status == "missing");
                if let Some((old, _)) = &c.before
                    && old.expires_at <= c.start
                {
                    self.stats.replaced += 1;
                }
                self.check_failed_key(c, &s, live_before).await?;
                // Guarantees 1 and 5: the answer is this key's task, of this
                // task type.
                if s.task_type != my_type {
                    return Err(format!("answered a task of type {}", s.task_type));
                }
                if s.idempotency.as_ref().map(|i| i.key.as_str()) != Some(&key_name(c.who.key)) {
                    return Err(format!(
                        "guarantee 1: answered the record of another key: {s:?}"
                    ));
                }
                let task = self.get(&s.task_key).await;
                let decided_in_time = self
                    .record_first_landed(s.task_id)
                    .is_some_and(|t| c.now < t + self.settings.finish_window);
                if s.status != "missing" && decided_in_time {
                    self.finished.insert(s.task_id);
                }
                if s.status == "missing" {
                    // Guarantee 7: `missing` is true, and said only once no
                    // late write can land any more (or the queue deleted it).
                    if c.alone && task.is_some() {
                        return Err(format!("answered missing, but {} is there", s.task_key));
                    }
                    let landed = self.record_first_landed(s.task_id);
                    let late_writes_over = landed.is_some_and(|t| {
                        c.now >= t + self.settings.finish_window + Duration::minutes(15)
                    });
                    if !self.deleted.contains(&s.task_id) && !late_writes_over {
                        return Err(format!(
                            "answered missing for {} at {}, before its deadline + 15 min (record landed {landed:?})",
                            s.task_id, c.now
                        ));
                    }
                } else if c.alone {
                    // Guarantee 3: the task (and, before the deadline, its
                    // marker) was there when it decided.
                    let Some(task) = task else {
                        return Err(format!(
                            "answered {} but its task is not in the bucket",
                            s.task_id
                        ));
                    };
                    let t: Value = serde_json::from_slice(&task.body).unwrap();
                    if t["input"] != my_input || t["task_type"] != my_type {
                        return Err(format!(
                            "answered {} whose task holds {} {}",
                            s.task_id, t["task_type"], t["input"]
                        ));
                    }
                    let marker = self
                        .bucket
                        .list("ready/", None, None, 10_000)
                        .await
                        .unwrap()
                        .objects
                        .iter()
                        .any(|m| m.key.ends_with(&s.task_id.to_string()));
                    // A worker that claimed the task has deleted its marker,
                    // rightly: the marker is owed while the task is untouched.
                    let untouched = self.untouched(s.task_id, &task.body).await;
                    self.stats.touched_replays += u64::from(!untouched);
                    if !marker && untouched && decided_in_time {
                        return Err(format!(
                            "answered {} before its deadline, but its marker is not in the bucket",
                            s.task_id
                        ));
                    }
                }
                if c.alone && s.created() {
                    let (rec, _) = self
                        .record_at(&c.path)
                        .await
                        .ok_or("201 without a record")?;
                    if rec.task_id != s.task_id {
                        return Err(format!(
                            "201 for {} but the record names {}",
                            s.task_id, rec.task_id
                        ));
                    }
                }
                // Guarantee 6: an expired record is replaced by a new task.
                if c.alone
                    && let Some((old, _)) = &c.before
                    && old.expires_at <= c.start
                    && (!s.created() || s.task_id == old.task_id)
                {
                    return Err(format!(
                        "guarantee 6: the record was expired, yet got {} (created={})",
                        s.task_id,
                        s.created()
                    ));
                }
                // Guarantee 5: a live record of another input or type
                // conflicts, unless its task failed and this submit claims
                // the key for a new one.
                if c.alone
                    && let Some((old, _)) = live_before
                    && old.expires_at > c.now
                    && (old.input_hash != my_hash || old.task_type != my_type)
                    && s.replaces_task_id != Some(old.task_id)
                {
                    return Err(format!(
                        "guarantee 5: another input or type was accepted: {s:?}"
                    ));
                }
            }
            Err(SubmitError::Conflict { kind, task_id }) => {
                match kind {
                    idempotent_submit::protocol::ConflictKind::Input => {
                        self.stats.input_conflicts += 1
                    }
                    idempotent_submit::protocol::ConflictKind::TaskType => {
                        self.stats.task_type_conflicts += 1
                    }
                    // The model sends no task options (tests/options.rs
                    // covers them): its records all say "none".
                    idempotent_submit::protocol::ConflictKind::Options => {
                        return Err(format!("an options conflict without options: {task_id}"));
                    }
                }
                // Guarantee 5: a conflict names a live record of this key
                // with another input or task type, and nothing was written.
                if c.wrote {
                    return Err("a conflicting submit wrote something".into());
                }
                // Guarantee 11: a key whose task failed is free to a
                // `new_task` submit, whatever it asks for.
                if c.alone && c.new_task && c.freed {
                    return Err(format!(
                        "guarantee 11: a new_task submit met a failed task's key and got a conflict with {task_id}"
                    ));
                }
                if c.alone {
                    let Some((old, _)) = live_before else {
                        return Err(format!("a conflict with no live record ({task_id})"));
                    };
                    if old.task_id != task_id
                        || (old.input_hash == my_hash && old.task_type == my_type)
                    {
                        return Err(format!(
                            "a conflict with {task_id}, but the record was {} of the same request",
                            old.task_id
                        ));
                    }
                }
            }
            Err(SubmitError::Undetermined { task_id, .. }) => {
                self.stats.undetermined += 1;
                // Only past the deadline of that submit's record (judged, as
                // the writer does, from when its record was first sent).
                let sent = self.record_first_sent(task_id);
                let Some(sent) = sent else {
                    return Err(format!("undetermined for {task_id}, which no record named"));
                };
                // Less two seconds: a writer knows S3's clock to within a
                // second (its answers' Date has whole seconds), and takes the
                // safe side twice: its deadline from the send time's earliest
                // S3 time, now from the latest.
                if c.now + Duration::seconds(2) < sent + self.settings.finish_window {
                    return Err(format!(
                        "undetermined for {task_id} at {}, before its deadline ({sent} + window)",
                        c.now
                    ));
                }
                if self
                    .record_first_landed(task_id)
                    .is_some_and(|t| c.start < t + self.settings.finish_window)
                {
                    self.stats.refused_at_deadline += 1;
                }
            }
            Err(SubmitError::Storage(StoreError::Crashed)) if c.crashed => {
                self.stats.storage_errors += 1;
            }
            Err(SubmitError::Storage(StoreError::Unavailable(_) | StoreError::Conflict))
                if c.faulty || c.slow =>
            {
                self.stats.storage_errors += 1;
            }
            Err(SubmitError::DeadlineExceeded) if c.slow => {
                self.stats.storage_errors += 1;
            }
            // before_claim: a due message the queue did not take fails the
            // submit retryably, and nothing was written for it.
            Err(SubmitError::Storage(StoreError::Unavailable(why)))
                if self.submitter
                    && !self.with_claim
                    && why.starts_with("the due queue did not accept") =>
            {
                if c.wrote {
                    return Err(format!(
                        "before_claim: a submit whose due message was not accepted wrote something: {why}"
                    ));
                }
                self.stats.due_refused_submits += 1;
            }
            // 412 and 404 surfacing, fatal errors, and any failure of a
            // fault-free submit are bugs.
            Err(e) => return Err(format!("an error the state did not allow: {e:?}")),
        }
        Ok(())
    }

    /// Guarantee 11 for one answered submit: only a `new_task` submit
    /// claims a key over its task, only over a failed or cancelled one, and
    /// one alone always does; a replay-mode submit answers the failed task.
    async fn check_failed_key(
        &mut self,
        c: &SubmitCtx,
        s: &idempotent_submit::Submitted,
        live_before: Option<&(Record, ObjectMeta)>,
    ) -> Result<(), String> {
        // An answer names the task its task replaced, a replay's too; a
        // 201 that names one is this submit's claim over the failed task.
        if let Some(old) = s.replaces_task_id
            && s.created()
        {
            self.stats.failed_key_reuses += 1;
            if !c.new_task {
                return Err(format!(
                    "guarantee 11: a replay-mode submit replaced the failed task {old}"
                ));
            }
            if s.task_id == old {
                return Err(format!("guarantee 11: {old} replaced itself"));
            }
        }
        let alive = |(old, _): &&(Record, ObjectMeta)| old.expires_at > c.now;
        let Some((old, _)) = live_before.filter(alive).filter(|_| c.alone && c.freed) else {
            return Ok(());
        };
        if c.new_task && (!s.created() || s.replaces_task_id != Some(old.task_id)) {
            return Err(format!(
                "guarantee 11: a new_task submit alone met {}'s failed task and answered {} (replacing {:?})",
                old.task_id, s.task_id, s.replaces_task_id
            ));
        }
        if !c.new_task {
            self.stats.failed_replays += 1;
            if s.task_id != old.task_id || s.created() {
                return Err(format!(
                    "guarantee 11: a replay-mode submit met {}'s failed task and answered {} (created={})",
                    old.task_id,
                    s.task_id,
                    s.created()
                ));
            }
        }
        Ok(())
    }

    /// Guarantee 11 over the bucket, after every step: every record that
    /// replaced a failed task (whether or not its submit was answered)
    /// replaced a task that had ended failed or cancelled, which is for
    /// good, and of a record of its own key.
    async fn check_reuses(&self) -> Result<(), String> {
        let replaced: Vec<(uuid::Uuid, uuid::Uuid)> = self
            .records_written
            .iter()
            .filter(|(_, r)| !r.is_reset())
            .filter_map(|(_, r)| r.replaces_task_id.map(|old| (old, r.task_id)))
            .collect();
        for (old, new) in replaced {
            if self.deleted.contains(&old) {
                continue;
            }
            let Some((_, rec)) = self.records_written.iter().find(|(_, r)| r.task_id == old) else {
                return Err(format!(
                    "guarantee 11: {new} replaced {old}, which no record named"
                ));
            };
            let status = self.task_status(&rec.task_key).await;
            if !matches!(status.as_deref(), Some("failed" | "cancelled")) {
                return Err(format!(
                    "guarantee 11: {new} replaced {old}, whose task is {status:?}"
                ));
            }
        }
        Ok(())
    }

    /// Whether `body` is, byte for byte, the `pending_task` of the record
    /// that named `id`: the task as its submit wrote it, untouched by any
    /// worker.
    async fn untouched(&self, id: uuid::Uuid, body: &[u8]) -> bool {
        self.recorder
            .writes
            .lock()
            .unwrap()
            .iter()
            .filter(|w| w.key.starts_with("idempotency/"))
            .filter_map(|w| Record::parse(&w.body).ok())
            .find(|r| r.task_id == id)
            .and_then(|r| r.pending_task)
            .is_some_and(|p| p.get().as_bytes() == body)
    }

    /// Guarantee 10, after every step: every marker in the bucket names a
    /// task that a worker can claim from it: `pending`, and available in
    /// that minute. Exempt: markers whose last writer of ours did not end
    /// cleanly (it may have died before its re-read; the next finisher of
    /// the record checks them), markers of tasks the queue deleted, and a
    /// marker whose task was never created (a submit that died between its
    /// two writes and was never finished).
    async fn check_index(&self) -> Result<(), String> {
        let markers = self
            .bucket
            .list("ready/", None, None, 10_000)
            .await
            .unwrap()
            .objects;
        for m in markers {
            let parts: Vec<&str> = m.key.split('/').collect();
            let id: uuid::Uuid = parts[3].parse().unwrap();
            if self.unsure_markers.contains(&m.key) || self.deleted.contains(&id) {
                continue;
            }
            let Some(task) = self.get(&format!("tasks/{}/{id}.json", parts[1])).await else {
                continue;
            };
            let t: Value = serde_json::from_slice(&task.body).unwrap();
            let minute = time_of(&t["available_at"]).map(marker_minute);
            if t["status"] != "pending" || minute != parts[2].parse().ok() {
                return Err(format!(
                    "guarantee 10: the marker {} names a task the queue cannot claim from it: {} available at {}",
                    m.key, t["status"], t["available_at"]
                ));
            }
        }
        Ok(())
    }

    /// The end of a schedule: the sweeper is up and the store healthy long
    /// enough for every record event to arrive. Then every task whose submit
    /// was finished in time, and that no worker has touched, has its marker
    /// (the ready index's liveness).
    async fn epilogue(&mut self) -> Result<(), String> {
        self.advance(self.settings.finish_window + Duration::minutes(16), false)
            .await?;
        let tasks = self
            .bucket
            .list("tasks/", None, None, 10_000)
            .await
            .unwrap()
            .objects;
        let markers: HashSet<String> = self
            .bucket
            .list("ready/", None, None, 10_000)
            .await
            .unwrap()
            .objects
            .into_iter()
            .map(|m| m.key)
            .collect();
        for meta in tasks {
            let id = task_id_of(&meta.key);
            let task = self.get(&meta.key).await.ok_or("a listed task is gone")?;
            if !self.finished.contains(&id) || !self.untouched(id, &task.body).await {
                continue;
            }
            let t: Value = serde_json::from_slice(&task.body).unwrap();
            let marker = marker_of(&t).ok_or("a task without a place")?;
            if !markers.contains(&marker) {
                return Err(format!(
                    "liveness: {id} was finished and no worker touched it, but {marker} is not in the index"
                ));
            }
        }
        Ok(())
    }

    /// Guarantee 4 for the scheduled pass: after a clean, complete pass,
    /// every `creating` record between staleness and its finish deadline is
    /// finished: its task object is there and, while no worker has touched
    /// the task, its marker too.
    async fn check_swept(&self, now: DateTime<Utc>) -> Result<(), String> {
        let page = self
            .bucket
            .list("idempotency/", None, None, 10_000)
            .await
            .unwrap();
        for meta in page.objects {
            let o = self.bucket.get(&meta.key).await.unwrap();
            let rec = Record::parse(&o.body).unwrap();
            let age = now - meta.last_modified;
            if rec.status == Some(RecordStatus::Creating)
                && !rec.is_expired(now)
                && age >= self.settings.stale_creating_after
                // Less a second: the sweeper knows S3's clock to a second
                // (whole-second Dates) and judges "past the deadline" by its
                // latest possible time, so in the last second it leaves the
                // record rather than risk a late write.
                && age < self.settings.finish_window - Duration::seconds(1)
                && !self.deleted.contains(&rec.task_id)
            {
                let Some(task) = self.get(&rec.task_key).await else {
                    return Err(format!(
                        "{} has no task after a clean sweep (age {age})",
                        meta.key
                    ));
                };
                let t: Value = serde_json::from_slice(&task.body).unwrap();
                let marker = marker_of(&t).ok_or("a task without a place")?;
                if self.untouched(rec.task_id, &task.body).await
                    && self.get(&marker).await.is_none()
                {
                    return Err(format!(
                        "{} has no marker after a clean sweep (age {age})",
                        meta.key
                    ));
                }
            }
        }
        Ok(())
    }

    /// Guarantees 1, 2 and 7 and the deadline, over the history so far.
    fn check_history(&mut self) -> Result<(), String> {
        let writes = self.recorder.writes.lock().unwrap();
        let read = self.records_written.last().map_or(0, |(i, _)| i + 1);
        for (i, w) in writes.iter().enumerate().skip(read) {
            if w.key.starts_with("idempotency/") {
                self.records_written
                    .push((i, Record::parse(&w.body).unwrap()));
            }
        }
        let records = &self.records_written;
        // Each task id's record: its path and life.
        let mut life: HashMap<uuid::Uuid, (String, DateTime<Utc>, DateTime<Utc>)> = HashMap::new();
        let mut first_landed: HashMap<uuid::Uuid, DateTime<Utc>> = HashMap::new();
        for (w, r) in records.iter().map(|(i, r)| (&writes[*i], r)) {
            first_landed.entry(r.task_id).or_insert(w.at);
            // A life runs from the record's first write (S3's time, not the
            // `created_at` a writer's clock gave it) to its `expires_at`.
            life.entry(r.task_id)
                .or_insert((w.key.clone(), w.at, r.expires_at));
        }
        // A reset ends a life early: its record deleted while alive, or the
        // reset answered (which comes after). When, and at which change.
        let mut reset_at: HashMap<uuid::Uuid, (DateTime<Utc>, u64)> = HashMap::new();
        // (Any other deletion of a live record is a bug the lives' overlap
        // shows: the key's next submit makes a second life.)
        for &(id, at, seq) in &self.reset_answered {
            let t = reset_at.entry(id).or_insert((at, seq));
            *t = (t.0.min(at), t.1.min(seq));
        }
        // And at its reset record's write, answered or not (a reset that
        // crashed once its PUT landed frees the key all the same). A record
        // that replaced a failed task ends that task's record's life too,
        // once: one new task per failed task, however many submits raced.
        let mut replaced_by: HashMap<uuid::Uuid, uuid::Uuid> = HashMap::new();
        for (w, r) in records.iter().map(|(i, r)| (&writes[*i], r)) {
            let ended = if r.is_reset() {
                r.task_id
            } else if let Some(old) = r.replaces_task_id {
                if let Some(other) = replaced_by.insert(old, r.task_id)
                    && other != r.task_id
                {
                    return Err(format!(
                        "guarantee 11: the failed task {old} was replaced twice, by {other} and {}",
                        r.task_id
                    ));
                }
                if life.get(&old).is_none_or(|(path, ..)| *path != w.key) {
                    return Err(format!(
                        "guarantee 11: {} at {} replaced {old}, the task of another record",
                        r.task_id, w.key
                    ));
                }
                old
            } else {
                continue;
            };
            let t = reset_at.entry(ended).or_insert((w.at, w.seq));
            *t = (t.0.min(w.at), t.1.min(w.seq));
        }
        // Guarantee 2 and the finish deadline: each task written once, only
        // for a record, with If-None-Match, landing no later than the
        // deadline + 15 minutes. A record is written once: no two writes
        // name one task id, and none says `ready`.
        let mut task_writes: HashMap<&str, usize> = HashMap::new();
        let mut record_writes: HashSet<uuid::Uuid> = HashSet::new();
        // Records replaced by their reset record: none ever comes back.
        let mut reset_records: HashSet<uuid::Uuid> = HashSet::new();
        let mut late = 0;
        let mut records_in_order = records.iter().peekable();
        for (i, w) in writes.iter().enumerate() {
            if let Some((_, r)) = records_in_order.next_if(|(j, _)| *j == i) {
                // A reset's write: over the record it names, once.
                if r.is_reset() {
                    if !record_writes.contains(&r.task_id) || !reset_records.insert(r.task_id) {
                        return Err(format!(
                            "a reset record of {} was written for no record, or twice",
                            r.task_id
                        ));
                    }
                } else if reset_records.contains(&r.task_id) {
                    return Err(format!(
                        "the record of {} came back after its reset, at {}",
                        r.task_id, w.at
                    ));
                } else if !record_writes.insert(r.task_id)
                    || r.status != Some(RecordStatus::Creating)
                {
                    return Err(format!(
                        "the record of {} was written again ({:?}): a record is written once",
                        r.task_id, r.status
                    ));
                }
            }
            if !w.key.starts_with("tasks/") {
                continue;
            }
            *task_writes.entry(&w.key).or_default() += 1;
            if !w.create {
                return Err(format!("{} was written without If-None-Match", w.key));
            }
            let id = task_id_of(&w.key);
            let Some(t0) = first_landed.get(&id) else {
                return Err(format!("task {id} was written for no record"));
            };
            // The reset's promise: once a record is forgotten, no task is
            // written for it.
            if let Some((t, seq)) = reset_at.get(&id)
                && w.seq > *seq
            {
                return Err(format!(
                    "task {id} was written at {}, after its record was reset at {t}",
                    w.at
                ));
            }
            let deadline = *t0 + self.settings.finish_window;
            // A request sent before the deadline may land up to 15 minutes
            // later: the protocol's margin allows for it.
            if w.at >= deadline + Duration::minutes(15) {
                return Err(format!(
                    "task {id} landed at {} past its deadline + 15 min",
                    w.at
                ));
            }
            if w.at >= deadline {
                late += 1;
            }
        }
        self.stats.late_landings = late;
        if let Some((k, n)) = task_writes.iter().find(|(_, n)| **n > 1) {
            return Err(format!("{k} written {n} times"));
        }
        // Every attempt, retries included, of a task or a marker was sent
        // before the deadline (judged from when its record was first sent,
        // as the writers judge it, which is never later).
        for (key, sent) in self.sends.lock().unwrap().writes.iter() {
            let id = task_id_of(key);
            if let Some(t0) = first_landed.get(&id)
                && *sent >= *t0 + self.settings.finish_window
            {
                return Err(format!(
                    "a write of {key} was sent at {sent}, past its deadline ({t0} + window)"
                ));
            }
        }
        // Guarantee 1: every answer names the task of a life of its own
        // record (its own tenant, scope and key) that overlapped the submit;
        // lives of one record never overlap.
        for a in &self.answers {
            let Some((path, created, expires)) = life.get(&a.task_id) else {
                return Err(format!(
                    "{} answered {}, which no record ever named",
                    a.path, a.task_id
                ));
            };
            if *path != a.path {
                return Err(format!(
                    "guarantee 1: a submit for {} answered {}, the task of {path}",
                    a.path, a.task_id
                ));
            }
            // A submit that read the record in the instant of its reset
            // answered from it, rightly.
            let reset = reset_at.get(&a.task_id).map(|r| r.0);
            if a.end < *created || a.start >= *expires || reset.is_some_and(|t| a.start > t) {
                return Err(format!(
                    "{} answered {} over {}..{}, outside its life {created}..{expires}",
                    a.path, a.task_id, a.start, a.end
                ));
            }
        }
        type Span = (DateTime<Utc>, DateTime<Utc>);
        let mut by_record: HashMap<&str, Vec<Span>> = HashMap::new();
        for (id, (k, c, e)) in &life {
            let end = reset_at.get(id).map_or(*e, |r| r.0.min(*e));
            by_record.entry(k).or_default().push((*c, end));
        }
        for (k, mut lives) in by_record {
            lives.sort();
            for pair in lives.windows(2) {
                if pair[1].0 < pair[0].1 {
                    return Err(format!(
                        "{k}: a new record life began before the last one expired"
                    ));
                }
            }
        }
        Ok(())
    }
}

/// One submit of a step, and what was true around it.
struct SubmitCtx {
    who: Who,
    input: u8,
    task_type: u8,
    /// `if_task_failed: new_task`.
    new_task: bool,
    /// The live record it met named a task that had ended failed or
    /// cancelled.
    freed: bool,
    path: String,
    before: Option<(Record, ObjectMeta)>,
    start: DateTime<Utc>,
    now: DateTime<Utc>,
    alone: bool,
    faulty: bool,
    slow: bool,
    crashed: bool,
    wrote: bool,
}

/// One reset of a step, and what was true around it.
struct ResetCtx {
    path: String,
    /// The reset's DELETE of the record landed (whatever it was told).
    deleted: bool,
    before: Option<(Record, ObjectMeta)>,
    start: DateTime<Utc>,
    now: DateTime<Utc>,
    alone: bool,
    faulty: bool,
    slow: bool,
    crashed: bool,
}

/// Resets the key of `who` as an operator would; under the planted bug
/// `ResetIgnoresPhase`, as a naive reset would: the record read and deleted
/// with `If-Match`, whatever its phase.
async fn reset(q: &Queue, who: Who, task_type: u8, bug: Option<Bug>) -> Result<Reset, SubmitError> {
    if bug != Some(Bug::ResetIgnoresPhase) {
        let key = key_name(who.key);
        return q
            .reset_key(scope_name(who, task_type), &key, tenant_of(who).as_ref())
            .await;
    }
    let path = record_path(who, task_type);
    let store = q.engine().store();
    let obj = match store.get(&path).await {
        Ok(o) => o,
        Err(StoreError::NotFound) => return Ok(Reset::NotFound),
        Err(e) => return Err(SubmitError::Storage(e)),
    };
    let rec = Record::parse(&obj.body).map_err(|e| SubmitError::Corrupt {
        key: path.clone(),
        reason: e.to_string(),
    })?;
    let mut reset = rec.clone();
    let now = q.engine().clock().now().trunc_subsecs(0);
    (reset.expires_at, reset.reset_at) = (now, Some(now));
    (reset.pending_task, reset.pending_input) = (None, None);
    let body = Bytes::from(serde_json::to_vec(&reset).unwrap());
    match store
        .put(&path, body, PutMode::Update(obj.meta.etag.clone()))
        .await
    {
        Ok(_) => Ok(Reset::Done {
            old_task_id: rec.task_id,
        }),
        Err(StoreError::PreconditionFailed) => Ok(Reset::Changed),
        Err(StoreError::NotFound) => Ok(Reset::NotFound),
        Err(e) => Err(SubmitError::Storage(e)),
    }
}

fn run(schedule: &[Step], bug: Option<Bug>, profile: Profile) -> Result<Stats, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut w = World::new(bug, profile);
        for (i, step) in schedule.iter().enumerate() {
            w.run_step(step)
                .await
                .map_err(|e| format!("step {i}: {e}"))?;
            w.check_history()
                .map_err(|e| format!("after step {i}: {e}"))?;
            w.check_index()
                .await
                .map_err(|e| format!("after step {i}: {e}"))?;
            w.check_reuses()
                .await
                .map_err(|e| format!("after step {i}: {e}"))?;
        }
        w.epilogue().await.map_err(|e| format!("epilogue: {e}"))?;
        w.check_history()
            .map_err(|e| format!("after the epilogue: {e}"))?;
        w.check_index()
            .await
            .map_err(|e| format!("after the epilogue: {e}"))?;
        Ok(w.stats)
    })
}

/// Removes steps while the schedule still fails with a message containing
/// `needle`.
fn shrink(mut schedule: Vec<Step>, bug: Option<Bug>, profile: Profile, needle: &str) -> Vec<Step> {
    let mut i = 0;
    while i < schedule.len() {
        let mut smaller = schedule.clone();
        smaller.remove(i);
        if run(&smaller, bug, profile).is_err_and(|e| e.contains(needle)) {
            schedule = smaller;
        } else {
            i += 1;
        }
    }
    schedule
}

fn env<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

#[test]
fn random_schedules_keep_every_guarantee() {
    schedules_keep_every_guarantee(Profile::s3(), env("MODEL_SCHEDULES").unwrap_or(1000));
}

/// The schedules a store that lacks a capability runs: fewer than on S3's
/// answers (each profile changes one part of the protocol's path), enough
/// to reach every case (`MODEL_STORE_SCHEDULES`).
/// Cases too rare to require of a store's shorter run.
const RARE: &[&str] = &[
    "task writes landing after the deadline, inside the 15-minute margin",
    "writes refused at the finish deadline",
    "markers of ours removed once a worker had taken their task",
];

fn store_schedules() -> u64 {
    env("MODEL_STORE_SCHEDULES").unwrap_or(120)
}

#[test]
fn random_schedules_keep_every_guarantee_on_a_versioned_store_that_ignores_if_match_on_delete() {
    // MinIO, LocalStack: CONDITIONAL_DELETE=off, the version read deleted.
    schedules_keep_every_guarantee(
        Profile {
            behaviour: Behaviour::minio(),
            versioned: true,
            conditional_delete: false,
            ..Profile::s3()
        },
        store_schedules(),
    );
}

#[test]
fn random_schedules_keep_every_guarantee_on_an_unversioned_store_that_ignores_if_match_on_delete() {
    // CONDITIONAL_DELETE=off: expired records left for the lifecycle rule.
    schedules_keep_every_guarantee(
        Profile {
            behaviour: Behaviour::minio(),
            conditional_delete: false,
            ..Profile::s3()
        },
        store_schedules(),
    );
}

#[test]
fn random_schedules_keep_every_guarantee_on_a_store_that_answers_412_for_a_missing_key_and_lists_folders_first()
 {
    // SeaweedFS, versioned, with the byte-order pass.
    schedules_keep_every_guarantee(
        Profile {
            behaviour: Behaviour::seaweedfs(),
            versioned: true,
            ..Profile::s3()
        },
        store_schedules(),
    );
}

#[test]
fn random_schedules_keep_every_guarantee_on_a_store_that_lists_folders_first_swept_by_folders() {
    schedules_keep_every_guarantee(
        Profile {
            behaviour: Behaviour::seaweedfs(),
            list_order: ListOrder::Any,
            ..Profile::s3()
        },
        store_schedules(),
    );
}

#[test]
fn random_schedules_keep_every_guarantee_on_a_store_that_lists_in_no_order_with_random_etags() {
    // S3 Express One Zone: no versioning, LIST_ORDER=any.
    schedules_keep_every_guarantee(
        Profile {
            behaviour: Behaviour::s3_express(11),
            list_order: ListOrder::Any,
            ..Profile::s3()
        },
        store_schedules(),
    );
}

/// `count` random schedules (or `MODEL_SEED`'s one) on `profile`'s store:
/// every guarantee holds, and (past 100 schedules) every case the
/// guarantees speak of was reached, but for what the store makes
/// unreachable.
fn schedules_keep_every_guarantee(profile: Profile, count: u64) {
    let len: usize = env("MODEL_STEPS").unwrap_or(40);
    let seeds: Vec<u64> = match env("MODEL_SEED") {
        Some(s) => vec![s],
        None => {
            let base = env("MODEL_BASE_SEED").unwrap_or(0x5eed_0001u64);
            (0..count).map(|i| base.wrapping_add(i)).collect()
        }
    };
    let many = seeds.len() > 100;
    // The seeds in as many runs as there are cores (each schedule runs on a
    // store and a runtime of its own): the same schedules, the same checks,
    // the coverage summed over all of them; a failing seed panics its run
    // with its replay, and the test with it.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let per_run = seeds.len().div_ceil(cores).max(1);
    let total = std::thread::scope(|s| {
        let runs: Vec<_> = seeds
            .chunks(per_run)
            .map(|seeds| s.spawn(move || schedules_on(seeds, len, profile)))
            .collect();
        let mut total = Stats::default();
        for r in runs {
            total.add(&r.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
        }
        total
    });
    eprintln!("model coverage on {profile:?}:");
    for (name, n) in Stats::NAMES.iter().zip(total.fields()) {
        eprintln!("  {n:>7}  {name}");
    }
    if many {
        // The schedules reach every case the guarantees speak of.
        for (name, n) in Stats::NAMES.iter().zip(total.fields()) {
            if profile.unreachable().contains(name) {
                assert_eq!(n, 0, "reached what this store makes unreachable: {name}");
                continue;
            }
            // A few cases come about once in fifty to two hundred schedules; the S3
            // run of a thousand must reach them, a store's run of a hundred
            // or so may not.
            if count < 1000 && RARE.contains(name) {
                continue;
            }
            assert!(n > 0, "no schedule reached: {name}");
        }
    }
}

/// Runs `seeds`' schedules of `len` steps on `profile`'s store; the first
/// that breaks a guarantee is shrunk and panics with its replay.
fn schedules_on(seeds: &[u64], len: usize, profile: Profile) -> Stats {
    let mut total = Stats::default();
    for &seed in seeds {
        let schedule = gen_schedule(seed, len);
        match run(&schedule, None, profile) {
            Ok(s) => total.add(&s),
            Err(e) => {
                // Shrink on the same kind of failure: the message up to its
                // first number or id.
                let needle: String = e
                    .split(": ")
                    .nth(1)
                    .unwrap_or(&e)
                    .chars()
                    .take_while(|c| !c.is_ascii_digit())
                    .collect();
                let small = shrink(schedule, None, profile, &needle);
                let why = run(&small, None, profile).err().unwrap_or(e.clone());
                panic!(
                    "seed {seed} broke a guarantee on {profile:?}: {e}\nshrunk to {} steps ({why}):\n{small:#?}\nreplay: MODEL_SEED={seed} cargo test --features testing --test model",
                    small.len()
                );
            }
        }
    }
    total
}

// The checks, each shown to catch a bug planted on purpose.

/// Plants `bug`, runs schedules until the checker reports it with a message
/// containing `needle`, shrinks that schedule, and checks that the shrunk
/// one still fails the same way.
fn planted_bug_is_caught(bug: Bug, needle: &str) {
    planted_bug_is_caught_on(bug, Profile::s3(), needle);
}

/// [`planted_bug_is_caught`] on `profile`'s store.
fn planted_bug_is_caught_on(bug: Bug, profile: Profile, needle: &str) {
    let len = 40;
    for seed in 0x0b06_0000u64..0x0b06_0000 + 2000 {
        let schedule = gen_schedule(seed, len);
        let Err(e) = run(&schedule, Some(bug), profile) else {
            continue;
        };
        if !e.contains(needle) {
            continue;
        }
        let small = shrink(schedule, Some(bug), profile, needle);
        let again =
            run(&small, Some(bug), profile).expect_err("the shrunk schedule must still fail");
        assert!(again.contains(needle), "{again}");
        assert!(small.len() < len, "{small:#?}");
        // And without the bug, the same schedule passes.
        run(&small, None, profile).unwrap_or_else(|e| panic!("without {bug:?}: {e}\n{small:#?}"));
        eprintln!(
            "{bug:?}: seed {seed} caught ({again}), shrunk to {} steps",
            small.len()
        );
        return;
    }
    panic!("the checker never reported {bug:?} with \"{needle}\"");
}

#[test]
fn the_checker_catches_two_new_tasks_for_one_failed_task() {
    planted_bug_is_caught(Bug::ReuseWithoutIfMatch, "replaced twice");
}

#[test]
fn the_checker_catches_a_completed_tasks_key_claimed_for_a_new_task() {
    planted_bug_is_caught(
        Bug::CompletedReadAsFailed,
        "whose task is Some(\"completed\")",
    );
}

#[test]
fn the_checker_catches_a_failed_tasks_key_freed_to_a_replay_mode_submit() {
    planted_bug_is_caught(Bug::ReuseByDefault, "a replay-mode submit");
}

#[test]
fn the_checker_catches_a_write_past_the_finish_deadline() {
    planted_bug_is_caught(Bug::IgnoreFinishDeadline, "past its deadline");
}

#[test]
fn the_checker_catches_one_key_answered_with_another_keys_task() {
    planted_bug_is_caught(Bug::OneRecordPerScope, "guarantee 1");
}

#[test]
fn the_checker_catches_a_finisher_that_never_writes_a_missing_marker() {
    planted_bug_is_caught(Bug::FinishWithoutMarker, "marker is not in the");
}

#[test]
fn the_checker_catches_a_marker_written_for_a_task_a_worker_has_taken() {
    planted_bug_is_caught(Bug::MarkerWhenHeadFindsNone, "guarantee 10");
}

#[test]
fn the_checker_catches_a_marker_left_for_a_task_a_worker_claimed_before_it_landed() {
    planted_bug_is_caught(Bug::MarkerUnverified, "guarantee 10");
}

#[test]
fn the_checker_catches_missing_answered_inside_the_late_write_margin() {
    planted_bug_is_caught(Bug::MissingWithoutMargin, "before its deadline + 15 min");
}

#[test]
fn the_checker_catches_a_task_written_twice() {
    planted_bug_is_caught(Bug::OverwriteTask, "without If-None-Match");
}

#[test]
fn the_checker_catches_an_expired_record_kept_alive() {
    planted_bug_is_caught(Bug::ExpiryIgnored, "guarantee 6");
}

#[test]
fn the_checker_catches_a_writer_that_trusts_its_own_clock() {
    planted_bug_is_caught(Bug::TrustMachineClock, "past its deadline");
}

#[test]
fn the_checker_catches_a_due_message_sent_only_after_its_record_landed() {
    planted_bug_is_caught(Bug::DueAfterRecord, "no due message for it is in the queue");
}

#[test]
fn the_checker_catches_a_reset_that_forgets_a_record_whose_task_may_still_be_written() {
    planted_bug_is_caught(Bug::ResetIgnoresPhase, "after its record was reset");
}

#[test]
fn the_checker_catches_a_sweeper_that_trusts_if_match_on_delete_where_the_store_ignores_it() {
    // The store ignores If-Match on DELETE (MinIO); the engine runs with
    // CONDITIONAL_DELETE=on as if it did not, the checker with off.
    planted_bug_is_caught_on(
        Bug::TrustDeleteIfMatch,
        Profile {
            behaviour: Behaviour::minio(),
            conditional_delete: false,
            ..Profile::s3()
        },
        "a new record life began before the last one expired",
    );
}
