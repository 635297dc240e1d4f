//! The offloaded input's guarantees (docs/protocol.md, "Offloaded inputs"),
//! checked beside `checks.rs`'s: no task names a payload that is not there,
//! after every step (rule 2, and rule 5's "a payload lives as long as its
//! task": nothing of ours deletes a payload a task names); and a submit
//! that ended cleanly without a fault leaves no payload of its own that
//! nothing names (rule 4: a claim that lost deletes the payload it wrote
//! beside it; only a fault or a crash leaves one to the scheduled pass).

use idempotent_submit::Clock;

use super::actors::{self, Outcome};
use super::gate::{self, Kind};
use super::sim::Sim;

/// Rule 2 after every step: every task object in the bucket whose input is
/// offloaded (`input_ref`) names a payload that is in the bucket.
pub fn check_named(sim: &Sim) -> Result<(), String> {
    let keys = sim.bucket.keys();
    for task in keys.iter().filter(|k| k.starts_with("tasks/")) {
        let Some(body) = super::checks::object(sim, task) else {
            continue;
        };
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        let Some(payload) = v["input_ref"].as_str() else {
            continue;
        };
        if !keys.iter().any(|k| k == payload) {
            return Err(format!(
                "payloads: {task} names {payload}, which is not in the bucket"
            ));
        }
    }
    Ok(())
}

/// Rule 4 for a submit that ended: if it met no fault and every answer is a
/// task or a conflict, each payload it wrote is gone, or named by a task in
/// the bucket or by a record of the key (whose finisher writes its task, or
/// whose settled end the scheduled pass judges).
pub fn check_no_orphan(sim: &Sim, i: usize) -> Result<(), String> {
    let a = &sim.actors[i];
    let clean = match &a.outcome {
        Some(Outcome::Submitted(rs)) => rs.iter().all(|r| {
            matches!(
                r,
                Ok(_) | Err(idempotent_submit::SubmitError::Conflict { .. })
            )
        }),
        _ => false,
    };
    if !clean || a.faulted {
        return Ok(());
    }
    let wrote: Vec<String> = gate::lock(&sim.gate.state)
        .log
        .iter()
        .filter(|l| l.actor == i && l.ok && l.kind == Kind::PutCreate)
        .filter(|l| l.key.starts_with("payloads/"))
        .map(|l| l.key.clone())
        .collect();
    let keys = sim.bucket.keys();
    for payload in wrote.iter().filter(|p| keys.contains(p)) {
        let Some(id) = payload
            .strip_prefix("payloads/")
            .and_then(|r| r.split('/').next())
        else {
            continue;
        };
        let task = keys
            .iter()
            .any(|k| k.starts_with("tasks/") && actors::id_of(k) == Some(id));
        let record = sim
            .checks
            .lives
            .iter()
            .any(|l| l.to.is_none() && l.record.task_id.to_string() == id);
        if !(task || record) {
            return Err(format!(
                "payloads: #{i} answered without a fault and left {payload}, which nothing names"
            ));
        }
    }
    Ok(())
}

/// How many of #`i`'s requests went to its payloads, and how many a submit
/// alone and without a fault makes (docs/protocol.md, "Request counts"):
/// the PUT beside its first claim; its DELETE when the claim lost (a replay
/// or a conflict); the finisher's PUT (412) when it finished the record.
pub fn requests(sim: &Sim, i: usize) -> u32 {
    let s = gate::lock(&sim.gate.state);
    let n = s
        .log
        .iter()
        .filter(|l| l.actor == i && l.key.starts_with("payloads/"))
        .count();
    n as u32
}

/// The age past which the scheduled pass deletes an input payload that no
/// task names: the finish window, twice the late-write margin (the record
/// beside the payload may land a margin after it, and its finisher's task a
/// margin after that record's deadline) and the operation timeout
/// (docs/protocol.md, "Offloaded inputs", rule 4).
pub fn orphan_after(st: &idempotent_submit::Settings) -> chrono::Duration {
    st.finish_window + st.late_write_margin * 2 + st.operation_timeout
}

/// The task id a payload's key names (`payloads/{id}/input.json`).
fn payload_id(key: &str) -> Option<&str> {
    key.strip_prefix("payloads/")?.split('/').next()
}

/// Rule 4's deletion, after every step: a payload is deleted (by anyone but
/// the submit that wrote it, whose claim lost) only once no task can name
/// it: no task object of its id in the bucket or on its way (a slow write),
/// no record of its id on its way, no live record of its id whose finisher
/// may still write the task (before its finish deadline and the late-write
/// margin), and its writer no longer running. (`check_named` then holds
/// whatever comes after; this says so at the deletion itself.)
pub fn check_deleted(sim: &mut Sim) -> Result<(), String> {
    let s = gate::lock(&sim.gate.state);
    let new = s.log[sim.checks.payloads_seen..].to_vec();
    sim.checks.payloads_seen = s.log.len();
    let st = &sim.settings;
    let now = sim.clock.now();
    for l in new
        .iter()
        .filter(|l| l.ok && l.kind == Kind::Delete && l.key.starts_with("payloads/"))
    {
        let Some(id) = payload_id(&l.key) else {
            continue;
        };
        let writers: Vec<usize> = s
            .log
            .iter()
            .filter(|w| w.ok && w.kind == Kind::PutCreate && w.key == l.key)
            .map(|w| w.actor)
            .collect();
        if writers.contains(&l.actor) {
            continue;
        }
        let names = |b: &Option<bytes::Bytes>| {
            b.as_ref()
                .is_some_and(|b| String::from_utf8_lossy(b).contains(id))
        };
        let in_flight = s.ghosts.iter().map(|g| &g.request).chain(s.pending.iter());
        let on_its_way = in_flight.clone().any(|r| {
            let body = match &r.write {
                Some(gate::Write::Put(b, _)) => Some(b.clone()),
                _ => None,
            };
            (r.key.starts_with("tasks/") && actors::id_of(&r.key) == Some(id))
                || (r.key.starts_with("idempotency/") && names(&body))
        });
        let live = sim.checks.lives.iter().any(|life| {
            life.to.is_none()
                && !life.reset()
                && life.record.task_id.to_string() == id
                && now < life.last_modified + st.finish_window + st.late_write_margin
        });
        let writer_running = writers
            .iter()
            .any(|w| sim.actors[*w].state == super::sim::State::Running);
        let task = sim
            .bucket
            .keys()
            .iter()
            .any(|k| k.starts_with("tasks/") && actors::id_of(k) == Some(id));
        if on_its_way || live || writer_running || task {
            return Err(format!(
                "payloads: #{} deleted {} while a task could still name it (a write on its way {on_its_way}, a live record {live}, its writer running {writer_running}, its task there {task})",
                l.actor, l.key
            ));
        }
    }
    Ok(())
}

/// Rule 4's promise: a scheduled pass that ran without a fault and
/// completed leaves no input payload that was past the orphan age when it
/// began and that no task names.
pub fn check_pass_left_none(
    sim: &Sim,
    i: usize,
    summary: &idempotent_submit::testing::protocol::SweepSummary,
) -> Result<(), String> {
    let a = &sim.actors[i];
    if a.faulted || !summary.complete || summary.errors > 0 {
        return Ok(());
    }
    let orphan = orphan_after(&sim.settings);
    let keys = sim.bucket.keys();
    for (key, .., lm) in sim.bucket.snapshot() {
        let Some(id) = payload_id(&key) else {
            continue;
        };
        let named = keys
            .iter()
            .any(|k| k.starts_with("tasks/") && actors::id_of(k) == Some(id));
        if !named && lm + orphan <= a.started_at {
            return Err(format!(
                "payloads: the pass #{i} completed and left {key}, an orphan past its age when it began"
            ));
        }
    }
    Ok(())
}
