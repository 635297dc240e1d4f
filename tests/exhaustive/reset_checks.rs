//! What a key's reset may write, and what it must leave behind, beside
//! `checks.rs`: a reset writes only its own key's record and the marker of
//! that record's task, and it never strands a task without its marker.

use chrono::Duration;
use idempotent_submit::Clock;

use super::actors::{Role, task_of_marker};
use idempotent_submit::SubmitError;

use super::checks::{expected_error, has_marker, object, record_key_as};
use super::gate;
use super::sim::{Sim, State};

/// Both checks of this file, after a step.
pub fn check_resets(sim: &Sim) -> Result<(), String> {
    check_reset_writes(sim)?;
    check_reset_strands(sim)
}

/// A reset touches only the key it names: every write of a reset lands at
/// its own key's record (in its scope, under its tenant), or is the marker
/// of that record's task (a reset finishes its submit first: see
/// [`check_reset_strands`]), so a reset in one scope or of one tenant never
/// touches another's record (guarantee 1's check lets a reset record end a
/// live record: this says whose). A lookup writes nothing.
fn check_reset_writes(sim: &Sim) -> Result<(), String> {
    let s = gate::lock(&sim.gate.state);
    for l in s.log.iter().filter(|l| l.ok && l.kind.is_write()) {
        let role = &sim.actors[l.actor].role;
        let Some((key, how)) = role.names() else {
            continue;
        };
        if matches!(role, Role::Lookup { .. } | Role::LookupAs { .. }) {
            return Err(format!("the lookup #{} wrote {}", l.actor, l.key));
        }
        let own = record_key_as(key, &how);
        let own_task = |task: &str| {
            sim.checks
                .lives
                .iter()
                .any(|life| life.key == own && life.record.task_key == task)
        };
        let own_marker = task_of_marker(&l.key).is_some_and(|t| own_task(&t));
        if l.key != own && !own_marker {
            return Err(format!(
                "the reset #{} of {own} wrote {}, another key's",
                l.actor, l.key
            ));
        }
    }
    Ok(())
}

/// Guarantee 4 across a reset: a submit that died after its task and
/// before its marker leaves a record a finisher completes, but a reset
/// record holds no pending task, so no finisher can once the reset has
/// landed. So a reset that lands while its record may still be finished
/// (before the finish deadline), the task there and untouched by a worker,
/// leaves its marker there too, unless the record's own writer is still
/// running and may yet write it.
fn check_reset_strands(sim: &Sim) -> Result<(), String> {
    // The reset's own finish writes only while S3's latest time is before
    // the deadline: a second of offset, and the machines' skew.
    let margin = Duration::seconds(sim.spec.skew.abs() + 2);
    let now = sim.clock.now();
    let lives = &sim.checks.lives;
    let s = gate::lock(&sim.gate.state);
    for reset in lives.iter().filter(|l| l.to.is_none() && l.reset()) {
        let Some(held) = lives
            .iter()
            .find(|l| l.key == reset.key && l.to == Some(reset.from) && !l.reset())
        else {
            continue;
        };
        let Some(pending) = held.pending_task() else {
            continue;
        };
        if now + margin >= held.last_modified + sim.settings.finish_window {
            continue;
        }
        let task = &held.record.task_key;
        let untouched = object(sim, task).is_some_and(|b| b.as_ref() == pending.as_bytes());
        let id = held.record.task_id.to_string();
        if !untouched || has_marker(sim, &id) {
            continue;
        }
        let writer = s
            .log
            .iter()
            .find(|l| l.key == held.key && l.ok && l.body.as_ref() == Some(&held.body))
            .map(|l| l.actor);
        if writer.is_some_and(|w| sim.actors[w].state == State::Running) {
            continue;
        }
        return Err(format!(
            "guarantee 4: {} was reset within its finish window, its task {task} there and untouched, and no marker of it: no finisher can write it now",
            held.key
        ));
    }
    Ok(())
}

/// A reset's error: what any actor's may be, but `Undetermined` only for a
/// reset begun while its record could still be finished (its own finish
/// met the deadline): begun past the deadline, a reset writes nothing for
/// the record, and nothing of it is left to determine.
pub fn check_reset_error(sim: &Sim, i: usize, e: &SubmitError) -> Result<(), String> {
    let a = &sim.actors[i];
    if let (SubmitError::Undetermined { .. }, Some((key, how))) = (e, a.role.names()) {
        let own = record_key_as(key, &how);
        let window = sim.settings.finish_window;
        let finishable = sim.checks.lives.iter().any(|l| {
            l.key == own && l.pending_task().is_some() && a.started_at < l.last_modified + window
        });
        if !finishable {
            return Err(format!(
                "#{i}: a reset begun past its record's finish deadline answered {e:?}"
            ));
        }
    }
    expected_error(sim, i, e)
}
