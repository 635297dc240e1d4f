//! What a request asked and what it was answered, beside `checks.rs`:
//! guarantee 5's comparison of a submit with a record (task type, input,
//! options; the tenant and the scope are in the record's path), a refusal by
//! the input's schema, and a key's lookup.

use idempotent_submit::testing::protocol::Record;
use idempotent_submit::{Clock, ConflictKind, KeyView};

use super::actors::Sub;
use super::checks::{Life, hash_of};
use super::gate;
use super::sim::Sim;

/// What differs between `record` and the submit `sub`, in the engine's
/// order (task type, input, options); empty: the same request.
pub fn differs(record: &Record, sub: &Sub) -> Vec<ConflictKind> {
    let mut kinds = Vec::new();
    if record.task_type != sub.how.task_type() {
        kinds.push(ConflictKind::TaskType);
    }
    if record.input_hash != hash_of(sub.input) {
        kinds.push(ConflictKind::Input);
    }
    // The worlds' one option: present or not (a record of buquet's clients,
    // without `write_id`, keeps none and is compared without it).
    if record.write_id.is_some() && record.options_hash.is_some() != sub.how.options {
        kinds.push(ConflictKind::Options);
    }
    kinds
}

/// Guarantee 5 for a conflict of `kind`: a record of the key during the
/// submit (`lives`) differs in what it names, and the submit wrote no task
/// and no marker.
pub fn check_conflict(
    sim: &Sim,
    i: usize,
    sub: &Sub,
    lives: &[&Life],
    kind: &ConflictKind,
) -> Result<(), String> {
    if !lives.iter().any(|l| differs(&l.record, sub).contains(kind)) {
        return Err(format!(
            "guarantee 5: a conflict ({kind:?}) with no record that differs so"
        ));
    }
    let wrote = gate::lock(&sim.gate.state).log.iter().any(|l| {
        l.actor == i && l.ok && (l.key.starts_with("tasks/") || l.key.starts_with("ready/"))
    });
    if wrote {
        return Err("guarantee 5: a conflict that wrote a task or a marker".into());
    }
    Ok(())
}

/// The ready index stays true (docs/protocol.md): a submit of ours that
/// ended answering a task, and saw that task's marker beside it (its HEAD
/// found it), leaves no marker of it while the task is not `pending`. Only
/// in a world without buquet's workers, where no task changes during the
/// schedule: a task not `pending` now was taken before the submit began.
pub fn check_stale_marker(
    sim: &Sim,
    i: usize,
    r: &Result<idempotent_submit::Submitted, idempotent_submit::SubmitError>,
) -> Result<(), String> {
    let Ok(s) = r else {
        return Ok(());
    };
    if sim.actors.iter().any(|a| a.role.is_workers()) {
        return Ok(());
    }
    let id = s.task_id.to_string();
    let Some(task) = super::checks::object(sim, &s.task_key) else {
        return Ok(());
    };
    let v: serde_json::Value = serde_json::from_slice(&task).unwrap_or_default();
    if v["status"] == "pending" || !super::checks::has_marker(sim, &id) {
        return Ok(());
    }
    let saw = gate::lock(&sim.gate.state).log.iter().any(|l| {
        l.actor == i
            && l.ok
            && l.kind == gate::Kind::Head
            && l.key.starts_with("ready/")
            && l.key.ends_with(&id)
    });
    if saw {
        return Err(format!(
            "the ready index: #{i} saw the marker of task {id}, which is {}, and left it",
            v["status"]
        ));
    }
    Ok(())
}

/// A life of `rkey` that held the key, live, throughout #`i`'s span.
fn held_throughout<'a>(sim: &'a Sim, i: usize, rkey: &str) -> Option<&'a Life> {
    let (start, now) = (sim.actors[i].span.0, sim.clock.now());
    sim.checks.lives.iter().find(|l| {
        l.key == rkey
            && !l.reset()
            && l.from <= start
            && l.to.is_none()
            && now < l.record.expires_at
    })
}

/// `input_invalid` (the input's schema refused it): only where schemas are
/// checked, only when no live record held the key throughout the submit
/// (a live record is answered as it says: docs/protocol.md, guarantee 5),
/// and nothing written.
pub fn check_refused(sim: &Sim, i: usize, rkey: &str) -> Result<(), String> {
    if !sim.spec.schema {
        return Err("input_invalid where no schema is checked".into());
    }
    if let Some(l) = held_throughout(sim, i, rkey) {
        return Err(format!(
            "guarantee 5: input_invalid while the live record of task {} held the key throughout",
            l.record.task_id
        ));
    }
    check_wrote_nothing(sim, i)
}

/// Where the schema refuses every input, no submit writes anything of its
/// own: it replays, conflicts or is refused (a replay may finish an
/// interrupted submit's task, which the worlds' preludes never leave).
pub fn check_wrote_nothing(sim: &Sim, i: usize) -> Result<(), String> {
    let s = gate::lock(&sim.gate.state);
    match s
        .log
        .iter()
        .find(|l| l.actor == i && l.ok && l.kind.is_write())
    {
        Some(l) => Err(format!(
            "schemas: #{i}, whose input the schema refuses, wrote {} ({:?})",
            l.key, l.kind
        )),
        None => Ok(()),
    }
}

/// A lookup's answer is true: a view names the task of a record of the
/// key that was current during the lookup and not expired when it began;
/// `None` only when no live record held the key throughout.
pub fn check_lookup(sim: &Sim, i: usize, key: &str, v: Option<&KeyView>) -> Result<(), String> {
    let rkey = super::checks::record_key(key);
    let a = &sim.actors[i];
    let Some(v) = v else {
        return match held_throughout(sim, i, &rkey) {
            Some(l) => Err(format!(
                "the lookup: none while the live record of task {} held the key throughout",
                l.record.task_id
            )),
            None => Ok(()),
        };
    };
    let during = |l: &&Life| l.from <= a.span.1 && l.to.is_none_or(|t| t > a.span.0);
    let Some(life) = sim
        .checks
        .lives
        .iter()
        .filter(|l| l.key == rkey && !l.reset())
        .filter(during)
        .find(|l| l.record.task_id == v.task_id)
    else {
        return Err(format!(
            "the lookup: {}, the task of no record of the key during the lookup",
            v.task_id
        ));
    };
    // S3's earliest time may stand a second behind.
    if life.record.expires_at + chrono::Duration::seconds(1) <= a.started_at {
        return Err(format!(
            "the lookup: {} of a record expired before the lookup began",
            v.task_id
        ));
    }
    if v.expires_at != life.record.expires_at || v.key != key {
        return Err(format!("the lookup: {v:?} is not the record's"));
    }
    Ok(())
}
