//! Every guarantee of docs/protocol.md that a world can break, checked after
//! every step, with no exemptions: the first one that fails ends the schedule
//! with its message. The checker judges from what reached the bucket (the
//! gate's log), the records' lives as the bucket showed them after each step,
//! and what each actor answered.

use bytes::Bytes;
use chrono::{DateTime, Duration, Utc};
use idempotent_submit::Clock;
use idempotent_submit::testing::protocol::RecordOutcome;
use idempotent_submit::testing::protocol::hash::{canonical_json, input_hash};
use idempotent_submit::testing::protocol::{Record, RecordStatus};
use idempotent_submit::{SubmitError, Submitted};

use super::actors::{self, Events, Outcome, Role};
use super::gate::{self, Kind};
use super::more_checks;
use super::requests;
use super::sim::{Sim, State};

/// One life of a record: from the step its write was first seen current to
/// the step it was replaced or deleted.
#[derive(Debug, Clone)]
pub struct Life {
    pub key: String,
    pub record: Record,
    pub body: Bytes,
    pub last_modified: DateTime<Utc>,
    pub from: usize,
    pub to: Option<usize>,
}

impl Life {
    pub fn reset(&self) -> bool {
        self.record.reset_at.is_some()
    }

    fn during(&self, span: (usize, usize)) -> bool {
        self.from <= span.1 && self.to.is_none_or(|t| t > span.0)
    }

    /// The task as the record will write it.
    pub fn pending_task(&self) -> Option<&str> {
        self.record.pending_task.as_ref().map(|t| t.get())
    }
}

/// What the checker has seen so far.
#[derive(Default)]
pub struct Checks {
    pub lives: Vec<Life>,
    /// How much of the gate's log is checked.
    seen: usize,
    /// Task objects created, by key.
    created: Vec<String>,
    /// A guarantee seen broken while observing.
    broken: Option<String>,
    /// How much of the gate's log the payload deletions are checked over.
    pub payloads_seen: usize,
    /// How much of the gate's log the records' times are checked over.
    pub times_seen: usize,
}

pub fn time_field(body: &[u8], field: &str) -> Option<DateTime<Utc>> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    DateTime::parse_from_rfc3339(v[field].as_str()?)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

pub fn hash_of(input: u8) -> String {
    input_hash(&canonical_json(&actors::input_of(input)))
}

/// Every guarantee, after one step.
pub fn after_step(sim: &mut Sim) -> Result<(), String> {
    observe(sim);
    // Guarantee 11 first: a second replacement of a failed task is also a
    // live record replaced, and 11 says why.
    more_checks::check_replacements(sim)?;
    if let Some(e) = sim.checks.broken.take() {
        return Err(e);
    }
    check_writes(sim)?;
    super::reset_checks::check_resets(sim)?;
    more_checks::check_record_times(sim)?;
    super::payloads::check_named(sim)?;
    super::payloads::check_deleted(sim)?;
    for i in 0..sim.actors.len() {
        // A batch's sends, while it runs too (its messages go before its
        // claims, a step or two into it: the world's bound ends most
        // schedules before the batch does).
        more_checks::check_batch_sends(sim, i)?;
        more_checks::check_expired_answer(sim, i)?;
        more_checks::check_early(sim, i)?;
        more_checks::check_past_deadline(sim, i)?;
        more_checks::check_deadline_exceeded(sim, i)?;
        more_checks::check_undetermined(sim, i)?;
        let a = &sim.actors[i];
        if a.state == State::Done && a.span.1 == sim.step {
            check_outcome(sim, i)?;
        }
    }
    check_nothing_left_behind(sim)
}

/// Notes each record's life as the bucket shows it now.
pub fn observe(sim: &mut Sim) {
    let step = sim.step;
    let now = sim.clock.now();
    let current: Vec<(String, Bytes, DateTime<Utc>)> = sim
        .bucket
        .snapshot()
        .into_iter()
        .filter(|(k, ..)| k.starts_with("idempotency/"))
        .map(|(k, b, _, lm)| (k, b, lm))
        .collect();
    let lives = &mut sim.checks.lives;
    for life in lives.iter_mut().filter(|l| l.to.is_none()) {
        let still = current
            .iter()
            .any(|(k, b, lm)| *k == life.key && *b == life.body && *lm == life.last_modified);
        if !still {
            life.to = Some(step);
            if now < life.record.expires_at && !life.reset() {
                let by = current.iter().find(|(k, ..)| *k == life.key);
                let reset = by.and_then(|(_, b, _)| serde_json::from_slice::<Record>(b).ok());
                // Only a reset or a failed task's reuse (guarantee 11,
                // judged by `check_replacements`) may end a live record.
                let allowed =
                    reset.is_some_and(|r| r.reset_at.is_some() || more_checks::replaces(&r, life));
                if !allowed {
                    sim.checks.broken.get_or_insert(format!(
                        "guarantee 1: the live record of {} (task {}) was deleted or replaced before it expired",
                        life.key, life.record.task_id
                    ));
                }
            }
        }
    }
    for (key, body, lm) in current {
        let known = lives
            .iter()
            .any(|l| l.to.is_none() && l.key == key && l.body == body && l.last_modified == lm);
        if known {
            continue;
        }
        // The reset's promise: the record a reset replaced never comes
        // back (a create-only PUT of its claim landing late, after the
        // reset record was deleted too early, would bring it back). Nor
        // does any record once replaced or deleted: a key's record only
        // moves on (deleting a key's current version before the versions
        // beneath it would make the one before it current again).
        let back = lives
            .iter()
            .find(|l| l.key == key && l.body == body && l.to.is_some());
        if let Some(old) = back {
            let why = if reset_before(lives, old) {
                "the reset's promise: a record that a reset replaced came back"
            } else {
                "a record once replaced or deleted came back"
            };
            sim.checks.broken.get_or_insert(format!(
                "{why}: the record of {key} (task {})",
                old.record.task_id
            ));
        }
        if let Ok(record) = serde_json::from_slice::<Record>(&body) {
            lives.push(Life {
                key,
                record,
                body,
                last_modified: lm,
                from: step,
                to: None,
            });
        }
    }
}

/// The life whose record names task `id`.
fn life_of_task<'a>(lives: &'a [Life], id: &str) -> Option<&'a Life> {
    lives
        .iter()
        .find(|l| !l.reset() && l.record.task_id.to_string() == id)
}

/// `life` was ended by a reset (the key's reset record came in its place).
pub fn reset_before(lives: &[Life], life: &Life) -> bool {
    life.to.is_some_and(|t| {
        lives
            .iter()
            .any(|r| r.reset() && r.key == life.key && r.from == t)
    })
}

/// Guarantee 2 and the finish deadline, over every request that reached the
/// bucket since the last step: each task object created once, only for a
/// record, never rewritten by us; every task and marker write sent before
/// its record's finish deadline.
fn check_writes(sim: &mut Sim) -> Result<(), String> {
    let log = gate::lock(&sim.gate.state).log[sim.checks.seen..].to_vec();
    let window = sim.settings.finish_window;
    sim.checks.seen += log.len();
    for l in &log {
        let ours = !sim.actors[l.actor].role.is_workers();
        let (Some(id), true) = (actors::id_of(&l.key), ours && l.kind.is_write()) else {
            continue;
        };
        if l.kind == Kind::Delete {
            continue;
        }
        // A submit without a key writes its task with no record.
        let keyless = matches!(sim.actors[l.actor].role, Role::Plain { .. });
        match life_of_task(&sim.checks.lives, id) {
            None if keyless => {}
            None => return Err(format!("guarantee 2: {} written for no record", l.key)),
            // A reset goes ahead once the task is there: its submit's
            // marker, sent beside the task, may land after it, beside that
            // task (docs/protocol.md, "A reset"). A task, or a marker of no
            // task, never.
            Some(life)
                if l.ok
                    && reset_before(&sim.checks.lives, life)
                    && actors::task_of_marker(&l.key).is_none_or(|t| object(sim, &t).is_none()) =>
            {
                return Err(format!(
                    "the reset's promise: {} written after its record was reset",
                    l.key
                ));
            }
            Some(life) if l.sent >= life.last_modified + window => {
                return Err(format!(
                    "deadline: a write of {} was sent at {} past its record's finish deadline {}",
                    l.key,
                    l.sent,
                    life.last_modified + window
                ));
            }
            Some(_) => {}
        }
        if l.key.starts_with("tasks/") {
            if l.kind != Kind::PutCreate && l.ok {
                return Err(format!("guarantee 2: {} rewritten ({:?})", l.key, l.kind));
            }
            if l.ok && l.kind == Kind::PutCreate {
                if sim.checks.created.contains(&l.key) {
                    return Err(format!("guarantee 2: {} written twice", l.key));
                }
                sim.checks.created.push(l.key.clone());
            }
        }
    }
    Ok(())
}

/// The body of `key` in the bucket now.
pub fn object(sim: &Sim, key: &str) -> Option<Bytes> {
    use idempotent_submit::store::Store;
    super::sim::now_or_never(sim.bucket.get(key))
        .and_then(Result::ok)
        .map(|o| o.body)
}

/// A marker of task `id` is in the bucket.
pub fn has_marker(sim: &Sim, id: &str) -> bool {
    sim.bucket
        .keys()
        .iter()
        .any(|k| k.starts_with("ready/") && k.ends_with(&format!("/{id}")))
}

/// The task of `life` is there, with its marker unless a worker took it.
pub fn finished(sim: &Sim, life: &Life) -> Result<(), String> {
    let Some(body) = object(sim, &life.record.task_key) else {
        return Err(format!("{} is not in the bucket", life.record.task_key));
    };
    let untouched = life.pending_task().is_some_and(|p| p.as_bytes() == body);
    let id = life.record.task_id.to_string();
    if untouched && !has_marker(sim, &id) {
        return Err(format!(
            "{} is there but not its marker",
            life.record.task_key
        ));
    }
    Ok(())
}

/// Guarantee 10: once an actor of ours ended cleanly, no marker it wrote
/// names a task a worker has taken.
fn check_markers_of(sim: &Sim, i: usize) -> Result<(), String> {
    // Only an actor that ended cleanly (a process that died or failed may
    // not have re-read), and only while no worker failed its own DELETE of
    // the marker it claimed by (buquet's window, not ours: the scan of the
    // ready index removes such a marker).
    let clean = match &sim.actors[i].outcome {
        Some(Outcome::Submitted(rs)) => rs.iter().all(Result::is_ok),
        Some(Outcome::Swept(o)) => matches!(o, RecordOutcome::Nothing | RecordOutcome::Finished),
        _ => false,
    };
    let worker_failed = sim
        .actors
        .iter()
        .any(|a| a.role.is_workers() && (a.faulted || a.state == State::Crashed));
    if !clean || worker_failed {
        return Ok(());
    }
    let log: Vec<gate::Landed> = gate::lock(&sim.gate.state)
        .log
        .iter()
        .filter(|l| l.actor == i && l.ok && l.key.starts_with("ready/"))
        .filter(|l| matches!(l.kind, Kind::Put | Kind::PutCreate | Kind::PutUpdate))
        .cloned()
        .collect();
    let keys = sim.bucket.keys();
    for l in &log {
        if !keys.contains(&l.key) {
            continue;
        }
        let Some(task) = actors::task_of_marker(&l.key).and_then(|t| object(sim, &t)) else {
            continue;
        };
        let v: serde_json::Value = serde_json::from_slice(&task).unwrap_or_default();
        if v["status"] != "pending" {
            return Err(format!(
                "guarantee 10: #{i} ended, its marker {} (written at {}, {:?}) names a task that is {}",
                l.key, l.at, l.kind, v["status"]
            ));
        }
    }
    Ok(())
}

fn check_outcome(sim: &Sim, i: usize) -> Result<(), String> {
    check_markers_of(sim, i)?;
    let a = &sim.actors[i];
    match (&a.role, &a.outcome) {
        (Role::Plain { how, .. }, Some(Outcome::Submitted(rs))) => {
            for r in rs {
                more_checks::check_plain(sim, i, how, r)?;
            }
            super::payloads::check_no_orphan(sim, i)
        }
        (role, Some(Outcome::Submitted(rs))) => {
            for (sub, r) in role.submits().into_iter().zip(rs) {
                check_submit(sim, i, &sub, r).map_err(|e| format!("#{i} {}: {e}", sub.key))?;
                more_checks::check_requests(sim, i, r)?;
                requests::check_stale_markers(sim, i, r.is_ok())?;
                if sim.spec.schema.refuses(sub.input) {
                    requests::check_wrote_nothing(sim, i)?;
                }
                more_checks::check_after_reset(sim, i, r)?;
            }
            super::payloads::check_no_orphan(sim, i)
        }
        (Role::Sweep(m), Some(Outcome::Swept(o))) => {
            let clean = matches!(o, RecordOutcome::Nothing | RecordOutcome::Finished);
            requests::check_stale_markers(sim, i, clean)?;
            check_swept(sim, i, &m.key, o)
        }
        (Role::DrySweep { key }, o) => {
            requests::check_stale_markers(sim, i, false)?;
            check_dry_run(sim, i, key, o.as_ref())
        }
        (Role::Reset { .. } | Role::ResetAs { .. }, Some(Outcome::Reset(Ok(r)))) => {
            more_checks::check_reset(sim, i, r)
        }
        (Role::Lookup { .. } | Role::LookupAs { .. }, Some(Outcome::Looked(Ok(v)))) => {
            requests::check_lookup(sim, i, v.as_ref())
        }
        (_, Some(Outcome::Looked(Err(e)))) => expected_error(sim, i, e),
        // The worker's reads meet no fault but a crash (which ends it) or a
        // clock step that times them out.
        (Role::Worker | Role::Scanner, Some(Outcome::Worked(w)))
            if w == "listing failed" && !a.faulted =>
        {
            Err(format!("#{i}: the worker's listing failed without a fault"))
        }
        (Role::Pass, Some(Outcome::Passed(Ok(summary)))) => {
            super::payloads::check_pass_left_none(sim, i, summary)
        }
        (_, Some(Outcome::Reset(Err(e)))) => super::reset_checks::check_reset_error(sim, i, e),
        (_, Some(Outcome::Passed(Err(e)))) => expected_error(sim, i, e),
        _ => Ok(()),
    }
}

/// Guarantees 1, 3, 5, 6 and 7 for one answer of a submit `sub`.
fn check_submit(
    sim: &Sim,
    i: usize,
    sub: &actors::Sub,
    r: &Result<Submitted, SubmitError>,
) -> Result<(), String> {
    let a = &sim.actors[i];
    let rkey = record_key_as(sub.key, &sub.how);
    let lives: Vec<&Life> = sim
        .checks
        .lives
        .iter()
        .filter(|l| l.key == rkey && !l.reset() && l.during(a.span))
        .collect();
    let now = sim.clock.now();
    let st = &sim.settings;
    match r {
        Ok(s) => {
            let id = s.task_id.to_string();
            let Some(life) = lives.iter().find(|l| l.record.task_id == s.task_id) else {
                return Err(format!(
                    "guarantee 1: answered {id}, the task of no life of its record during the submit"
                ));
            };
            more_checks::check_replayed(sim, i, &rkey, s)?;
            // Guarantee 6: S3's earliest time may stand a second behind.
            if life.record.expires_at + Duration::seconds(1) <= a.started_at {
                return Err(format!(
                    "guarantee 6: answered {id} of a record expired before the submit began"
                ));
            }
            if let Some(kind) = requests::differs(&life.record, sub).first() {
                return Err(format!(
                    "guarantee 5: accepted over a record of another {kind:?}"
                ));
            }
            // The status it answers is the task's, one of buquet's.
            const STATUSES: [&str; 8] = [
                "pending",
                "running",
                "completed",
                "failed",
                "cancelled",
                "expired",
                "archived",
                "missing",
            ];
            if !STATUSES.contains(&s.status.as_str()) {
                return Err(format!("answered {id} with status {:?}", s.status));
            }
            if s.status == "missing" {
                return check_missing(sim, life);
            }
            let past = now >= life.last_modified + st.finish_window - Duration::seconds(2);
            // The one exception, the documented limit: past the finish
            // deadline a replay answers a task that is there though its
            // marker never landed (nothing is written past the deadline).
            // A task that is not there is never answered.
            let task_there = object(sim, &life.record.task_key).is_some();
            match finished(sim, life) {
                Err(e) if !past || !task_there || sim.spec.limits => Err(format!(
                    "guarantee 3{}: answered {}: {e}",
                    if past {
                        " (past the finish deadline)"
                    } else {
                        ""
                    },
                    s.status
                )),
                _ => Ok(()),
            }
        }
        Err(SubmitError::Conflict { kind, .. }) => {
            requests::check_conflict(sim, i, sub, &lives, kind)
        }
        Err(SubmitError::Undetermined { .. }) => {
            // Never over a `ready` record, whose task was seen.
            let near = |l: &&Life| {
                l.record.status != Some(RecordStatus::Ready)
                    && now >= l.last_modified + st.finish_window - Duration::seconds(2)
            };
            if lives.iter().any(near) {
                Ok(())
            } else {
                Err("undetermined before any record's finish deadline".into())
            }
        }
        Err(SubmitError::InputInvalid { .. }) => requests::check_refused(sim, i, sub, &rkey),
        Err(e) => expected_error(sim, i, e),
    }
}

/// Guarantee 7: `missing` only with the task absent and no late write of it
/// left to land. A `ready` record (an earlier version's sweeper saw its
/// task there) leaves none: its task gone is `missing` at once
/// (docs/protocol.md, "Replay").
fn check_missing(sim: &Sim, life: &Life) -> Result<(), String> {
    let (now, st) = (sim.clock.now(), &sim.settings);
    let ready = life.record.status == Some(RecordStatus::Ready);
    let since = life.last_modified + st.finish_window + st.late_write_margin;
    if object(sim, &life.record.task_key).is_some() || (!ready && now < since) {
        return Err(format!(
            "guarantee 7: missing at {now}, a late write could land until {since}"
        ));
    }
    Ok(())
}

/// An error that the actor's faults or the clock explain; any other error
/// is a failure of its own.
pub fn expected_error(sim: &Sim, i: usize, e: &SubmitError) -> Result<(), String> {
    let a = &sim.actors[i];
    let late = sim.clock.now() >= a.started_at + sim.settings.operation_timeout;
    match e {
        SubmitError::Storage(_) if a.faulted => Ok(()),
        SubmitError::Storage(_) if a.met_409 => Err(format!(
            "guarantee 9: #{i} met a 409 and answered a storage error: {e:?}"
        )),
        SubmitError::DeadlineExceeded if a.faulted || late => Ok(()),
        SubmitError::Undetermined { .. } => Ok(()),
        _ => Err(format!("#{i}: an error nothing explains: {e:?}")),
    }
}

/// A dry run answers what the real run would do, as far as the record's
/// time tells: one that met no fault, on a live `creating` record before
/// its finish deadline, neither fails nor calls it past its deadline
/// (shard 5's mutant of `Engine::finish`: the plan refused while the window
/// was open).
fn check_dry_run(sim: &Sim, i: usize, key: &str, o: Option<&Outcome>) -> Result<(), String> {
    let Some(Outcome::Swept(o)) = o else {
        return Ok(());
    };
    if sim.actors[i].faulted || !matches!(o, RecordOutcome::Failed(_) | RecordOutcome::PastDeadline)
    {
        return Ok(());
    }
    let rkey = record_key(key);
    let st = &sim.settings;
    let now = sim.clock.now();
    let open = sim.checks.lives.iter().any(|l| {
        l.key == rkey
            && l.to.is_none()
            && !l.reset()
            && l.pending_task().is_some()
            && now < l.last_modified + st.finish_window - Duration::seconds(2)
    });
    if open {
        return Err(format!(
            "the dry run #{i} answered {o:?} for {rkey}, before its finish deadline and without a fault"
        ));
    }
    Ok(())
}

/// Guarantee 4 by the sweeper: a due message that met a stale `creating`
/// record before its deadline leaves its task and marker in the bucket.
fn check_swept(sim: &Sim, i: usize, key: &str, o: &RecordOutcome) -> Result<(), String> {
    // `Nothing` says nothing was missing; a write of a task or a marker
    // that landed is `Finished`. (A stale marker's DELETE beside a taken
    // task is neither: nothing was missing.)
    let wrote = gate::lock(&sim.gate.state).log.iter().any(|l| {
        l.actor == i
            && l.ok
            && l.kind.is_write()
            && !l.key.starts_with("idempotency/")
            && !(l.kind == Kind::Delete && l.key.starts_with("ready/"))
    });
    if wrote && matches!(o, RecordOutcome::Nothing) {
        return Err(format!("the sweeper wrote for {key} and answered Nothing"));
    }
    // And `Finished` says it wrote what was missing (shard 2's mutant of
    // `Engine::sweep_read`: `Finished` for a record it found complete).
    if !wrote && matches!(o, RecordOutcome::Finished) {
        return Err(format!(
            "the sweeper answered Finished for {key} and wrote nothing"
        ));
    }
    if matches!(o, RecordOutcome::Nothing | RecordOutcome::Finished) {
        check_settled_marker(sim, i, key)?;
    }
    match o {
        RecordOutcome::Failed(e) => return expected_error(sim, i, e),
        RecordOutcome::Corrupt => return Err(format!("the sweeper found {key} corrupt")),
        RecordOutcome::Nothing | RecordOutcome::Finished => {}
        _ => return Ok(()),
    }
    let Some(life) = sim
        .checks
        .lives
        .iter()
        .rev()
        .find(|l| l.key == key && l.to.is_none() && !l.reset())
    else {
        return Ok(());
    };
    let st = &sim.settings;
    let stale = life.last_modified + st.stale_creating_after;
    let deadline = life.last_modified + st.finish_window - Duration::seconds(1);
    let now = sim.clock.now();
    if now < stale || now >= deadline || life.pending_task().is_none() {
        return Ok(());
    }
    finished(sim, life).map_err(|e| format!("guarantee 4: the sweeper's {o:?} on {key}: {e}"))
}

/// The ready index stays true (docs/protocol.md), the sweeper past the
/// deadline: a sweeper that began on a `creating` record already past its
/// finish deadline, and ended cleanly, leaves no marker beside the record's
/// task once a worker has taken it. Only in a world without buquet's
/// workers and without skew, where no task changes during the schedule
/// and S3's time is the clock's within a second: a task not `pending` now
/// was taken before the sweeper began, and the sweeper judged the record
/// settled. `check_stale_markers` judges only a marker the actor's own
/// HEAD found; this one judges a sweeper that did not look (shard 7's
/// mutant of `Engine::check_past_deadline`, which answers without a read).
fn check_settled_marker(sim: &Sim, i: usize, key: &str) -> Result<(), String> {
    if sim.spec.skew != 0 || sim.actors.iter().any(|a| a.role.is_workers()) {
        return Ok(());
    }
    let (start, began) = (sim.actors[i].span.0, sim.actors[i].started_at);
    let st = &sim.settings;
    let Some(life) = sim.checks.lives.iter().find(|l| {
        l.key == key
            && !l.reset()
            && l.from <= start
            && l.to.is_none()
            && l.record.status == Some(RecordStatus::Creating)
            && l.pending_task().is_some()
            && began < l.record.expires_at
            && began >= l.last_modified + st.finish_window + Duration::seconds(2)
    }) else {
        return Ok(());
    };
    let Some(task) = object(sim, &life.record.task_key) else {
        return Ok(());
    };
    let v: serde_json::Value = serde_json::from_slice(&task).unwrap_or_default();
    let id = life.record.task_id.to_string();
    if v["status"] != "pending" && has_marker(sim, &id) {
        return Err(format!(
            "the ready index: the sweeper #{i} ended {:?} on {key}, settled, and left the marker of {} beside a task that is {}",
            sim.actors[i].outcome, life.record.task_key, v["status"]
        ));
    }
    Ok(())
}

/// Guarantee 4, its promise that nothing is lost: after every step, every
/// live `creating` record whose task is not written yet, before its finish
/// deadline, will be finished by someone: its writer is alive, or a due
/// message for it waits in the queue (or with a sweeper).
fn check_nothing_left_behind(sim: &Sim) -> Result<(), String> {
    let now = sim.clock.now();
    let st = &sim.settings;
    let s = gate::lock(&sim.gate.state);
    for life in sim
        .checks
        .lives
        .iter()
        .filter(|l| l.to.is_none() && !l.reset())
    {
        if life.pending_task().is_none() || now >= life.last_modified + st.finish_window {
            continue;
        }
        if object(sim, &life.record.task_key).is_some() {
            continue;
        }
        let queued = s.queue.iter().any(|m| m.key == life.key);
        let sweeping = sim.actors.iter().any(|a| {
            a.state == State::Running && matches!(&a.role, Role::Sweep(m) if m.key == life.key)
        });
        let writer = s
            .log
            .iter()
            .rev()
            .find(|l| l.key == life.key && l.ok && l.body.as_ref() == Some(&life.body))
            .map(|l| l.actor);
        let alive = writer.is_some_and(|w| sim.actors[w].state == State::Running);
        if !(queued || sweeping || alive) {
            let how = match sim.spec.events {
                Events::S3 => "S3 events",
                Events::Submitter(_) => "the submitter's due messages",
            };
            return Err(format!(
                "guarantee 4: {} is creating, its task not written, its writer gone and no due message for it ({how})",
                life.key
            ));
        }
    }
    Ok(())
}

/// Where the record of `key` is (scope `t`, no tenant).
pub fn record_key(key: &str) -> String {
    record_key_as(key, &actors::How::default())
}

/// Where the record of `key` asked `how` is: its scope's folder, the hash of
/// the scope, the key and the tenant.
pub fn record_key_as(key: &str, how: &actors::How) -> String {
    let k = idempotent_submit::testing::protocol::IdempotencyKey::parse(key).expect("a key");
    let tenant = how.tenant();
    let hash =
        idempotent_submit::testing::protocol::hash::key_hash(how.scope(), &k, tenant.as_ref());
    format!(
        "idempotency/{}/{}.json",
        how.scope(),
        hash.trim_start_matches("sha256:")
    )
}
