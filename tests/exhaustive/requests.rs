//! What a request asked and what it was answered, beside `checks.rs`:
//! guarantee 5's comparison of a submit with a record (task type, input,
//! options; the tenant and the scope are in the record's path), a refusal by
//! the input's schema, and a key's lookup.

use idempotent_submit::testing::protocol::Record;
use idempotent_submit::{Clock, ConflictKind, KeyView};

use super::actors::{Role, Sub, task_of_marker};
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
    // The worlds' options: present or not (`max_retries`, or the payload
    // worlds' `use_payload_refs`, never both in one world; a record of
    // buquet's clients, without `write_id`, keeps none and is compared
    // without it).
    let options = sub.how.options || sub.how.payload;
    if record.write_id.is_some() && record.options_hash.is_some() != options {
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

/// The ready index stays true (docs/protocol.md): an actor of ours that
/// ended cleanly (`clean`) and saw a marker (its HEAD found it) beside a
/// task that is not `pending` leaves no such marker: a finisher removes a
/// stale marker beside a taken task, a replay and the sweeper alike (the
/// sweeper past the deadline too). Only in a world without buquet's
/// workers, where no task changes during the schedule: a task not
/// `pending` now was taken before the actor began. And a dry run writes
/// nothing.
pub fn check_stale_markers(sim: &Sim, i: usize, clean: bool) -> Result<(), String> {
    let s = gate::lock(&sim.gate.state);
    if let (Role::DrySweep { .. }, Some(l)) = (
        &sim.actors[i].role,
        s.log
            .iter()
            .find(|l| l.actor == i && l.ok && l.kind.is_write()),
    ) {
        return Err(format!("a dry run wrote {} ({:?})", l.key, l.kind));
    }
    if !clean || sim.actors.iter().any(|a| a.role.is_workers()) {
        return Ok(());
    }
    let seen: Vec<String> = s
        .log
        .iter()
        .filter(|l| l.actor == i && l.ok && l.kind == gate::Kind::Head)
        .filter(|l| l.key.starts_with("ready/"))
        .map(|l| l.key.clone())
        .collect();
    drop(s);
    let keys = sim.bucket.keys();
    for marker in seen.iter().filter(|m| keys.contains(m)) {
        let Some(task) = task_of_marker(marker).and_then(|t| super::checks::object(sim, &t)) else {
            continue;
        };
        let v: serde_json::Value = serde_json::from_slice(&task).unwrap_or_default();
        if v["status"] != "pending" {
            return Err(format!(
                "the ready index: #{i} saw the marker {marker} beside a task that is {}, and left it",
                v["status"]
            ));
        }
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
pub fn check_refused(sim: &Sim, i: usize, sub: &Sub, rkey: &str) -> Result<(), String> {
    if !sim.spec.schema.refuses(sub.input) {
        return Err(format!(
            "schemas: input_invalid for input {}, which the schema ({:?}) accepts",
            sub.input, sim.spec.schema
        ));
    }
    if let Some(l) = held_throughout(sim, i, rkey) {
        return Err(format!(
            "guarantee 5: input_invalid while the live record of task {} held the key throughout",
            l.record.task_id
        ));
    }
    check_wrote_nothing(sim, i)
}

/// A submit whose input the schema refuses writes nothing of its own: it
/// replays, conflicts or is refused (a replay may finish an interrupted
/// submit's task, which the schema worlds never leave: their preludes
/// answer, and no submit of an accepted input replays another's record).
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
pub fn check_lookup(sim: &Sim, i: usize, v: Option<&KeyView>) -> Result<(), String> {
    let a = &sim.actors[i];
    let Some((key, how)) = a.role.names() else {
        return Ok(());
    };
    let rkey = super::checks::record_key_as(key, &how);
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
    let hash = rkey
        .rsplit('/')
        .next()
        .and_then(|f| f.strip_suffix(".json"));
    let same_hash = hash.is_some_and(|h| v.key_hash == format!("sha256:{h}"));
    if v.expires_at != life.record.expires_at
        || v.key != key
        || v.scope != how.scope()
        || !same_hash
    {
        return Err(format!("the lookup: {v:?} is not the record's"));
    }
    Ok(())
}
