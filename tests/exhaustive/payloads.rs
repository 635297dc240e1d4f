//! The offloaded input's guarantees (docs/protocol.md, "Offloaded inputs"),
//! checked beside `checks.rs`'s: no task names a payload that is not there,
//! after every step (rule 2, and rule 5's "a payload lives as long as its
//! task": nothing of ours deletes a payload a task names); and a submit
//! that ended cleanly without a fault leaves no payload of its own that
//! nothing names (rule 4: a claim that lost deletes the payload it wrote
//! beside it; only a fault or a crash leaves one to the scheduled pass).

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
