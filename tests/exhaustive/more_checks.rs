//! Guarantees 8 (request counts) and 11 (a failed task's key reused),
//! checked after every step beside `checks.rs`'s.

use idempotent_submit::testing::protocol::{Record, RecordOutcome};
use idempotent_submit::{Clock, Reset, SubmitError, Submitted};

use super::actors::{self, Events, How, Outcome, Role};
use super::checks::Life;
use super::gate::{self, Kind};
use super::sim::{Sim, State};
use serde_json::Value;

/// Guarantee 11 after every step: a record that names a replaced task
/// replaced a task that was `failed` or `cancelled` when that record
/// appeared; one replaced task has at most one replacement; and no
/// replay-mode submit replaces a task.
pub fn check_replacements(sim: &Sim) -> Result<(), String> {
    let lives = &sim.checks.lives;
    for life in lives.iter().filter(|l| l.from == sim.step && !l.reset()) {
        let Some(old) = life.record.replaces_task_id else {
            continue;
        };
        let replacements: std::collections::HashSet<_> = lives
            .iter()
            .filter(|l| !l.reset() && l.record.replaces_task_id == Some(old))
            .map(|l| l.record.task_id)
            .collect();
        if replacements.len() > 1 {
            return Err(format!(
                "guarantee 11: failed task {old} has {} replacements",
                replacements.len()
            ));
        }
        let status = lives
            .iter()
            .find(|l| l.record.task_id == old)
            .and_then(|l| super::checks::object(sim, &l.record.task_key))
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .map(|v| v["status"].as_str().unwrap_or_default().to_owned());
        if !matches!(status.as_deref(), Some("failed" | "cancelled")) {
            return Err(format!(
                "guarantee 11: task {old} replaced while {status:?}, not failed or cancelled"
            ));
        }
    }
    check_replay_mode_writes(sim)
}

/// No replay-mode submit writes a record that replaces a task.
fn check_replay_mode_writes(sim: &Sim) -> Result<(), String> {
    let s = gate::lock(&sim.gate.state);
    for l in s
        .log
        .iter()
        .filter(|l| l.ok && l.key.starts_with("idempotency/"))
    {
        let replay_mode = sim.actors[l.actor].role.replay_mode();
        let replaces = l
            .body
            .as_ref()
            .and_then(|b| serde_json::from_slice::<Record>(b).ok())
            .is_some_and(|r| r.replaces_task_id.is_some() && r.reset_at.is_none());
        if replay_mode && replaces {
            return Err(format!(
                "guarantee 11: a replay-mode submit (#{}) replaced its key's task",
                l.actor
            ));
        }
    }
    Ok(())
}

/// A record that replaces `life`'s task, as guarantee 11 allows: the
/// replaced task is one the checker will judge (`check_replacements`).
pub fn replaces(by: &Record, life: &Life) -> bool {
    by.replaces_task_id == Some(life.record.task_id) && by.reset_at.is_none()
}

/// Guarantee 8 for one submit of ours that ended with `r`: where the table
/// of docs/protocol.md ("Request counts") is exact, the submit made
/// exactly that many requests. It is exact for a submit that met no fault
/// and ran alone (no other actor's request between its first and its
/// last); a replay's count depends on what it found, so only its bounds.
pub fn check_requests(
    sim: &Sim,
    i: usize,
    r: &Result<Submitted, SubmitError>,
) -> Result<(), String> {
    let a = &sim.actors[i];
    // A 409 is retried: one request more (guarantee 9's), not counted here.
    let keyed = matches!(
        a.role,
        Role::Submit { .. } | Role::SubmitAs { .. } | Role::Reuse { .. }
    );
    if a.faulted || a.met_409 || !keyed || sim.spec.schema != super::sim::Schema::Off {
        return Ok(());
    }
    let s = gate::lock(&sim.gate.state);
    let mine: Vec<usize> = (0..s.sent_by.len())
        .filter(|n| s.sent_by[*n] == i)
        .collect();
    let (Some(first), Some(last)) = (mine.first(), mine.last()) else {
        return Ok(());
    };
    if s.sent_by[*first..=*last].iter().any(|a| *a != i) {
        return Ok(());
    }
    let wrote = s.log.iter().any(|l| {
        l.actor == i
            && l.kind.is_write()
            && !l.key.starts_with("idempotency/")
            && !l.key.starts_with("payloads/")
            && !matches!(l.kind, Kind::Send | Kind::Delete)
    });
    // It wrote the task (a finisher writes the payload, 412, before it).
    let wrote_task = s
        .log
        .iter()
        .any(|l| l.actor == i && l.kind == Kind::PutCreate && l.key.starts_with("tasks/"));
    // It removed a stale marker beside a taken task (and wrote nothing).
    let removed = s
        .log
        .iter()
        .any(|l| l.actor == i && l.kind == Kind::Delete && l.key.starts_with("ready/"));
    // Its first claim met a record (a 412): an expired or reset one, when
    // it answers a new task.
    let held = s
        .log
        .iter()
        .find(|l| l.actor == i && l.key.starts_with("idempotency/") && l.kind != Kind::Send)
        .is_some_and(|l| !l.ok);
    drop(s);
    let sends = u32::from(matches!(sim.spec.events, Events::Submitter(_)));
    // An offloaded input's requests, counted apart (the table's rows "input
    // offloaded"): the rest is the table's row for an inline input.
    let offloaded = a.role.submits().first().is_some_and(|s| s.how.payload);
    let to_payloads = super::payloads::requests(sim, i);
    let n = mine.len() as u32 - to_payloads;
    let reuse = matches!(a.role, Role::Reuse { .. });
    let (low, high, what) = match r {
        Ok(s) if !s.replayed && s.replaces_task_id.is_some() => {
            (6, 6, "a failed task's key, new_task")
        }
        Ok(s) if !s.replayed && held => (5, 5, "new submit over an expired or reset record"),
        Ok(s) if !s.replayed => (3, 3, "new submit"),
        Ok(_) if wrote => (6, 6, "replay that finishes"),
        Ok(_) if removed => (5, 5, "replay that removes a stale marker"),
        // A new_task submit reads the task right after the record, as a
        // replay does.
        Ok(_) if reuse => (3, 4, "replay (new_task)"),
        Ok(_) => (3, 4, "replay"),
        Err(SubmitError::Conflict { .. }) => (2, 2, "conflict"),
        Err(_) => return Ok(()),
    };
    // Offloaded: its PUT beside the first claim; its DELETE once the claim
    // lost (a replay, a conflict); a finisher's PUT (412) before the task,
    // and only before the task (a replay that writes the marker alone
    // finds the task, so its payload, there).
    let payload = match (offloaded, r) {
        (false, _) => 0,
        (true, Ok(s)) if !s.replayed => 1,
        (true, Ok(_)) if wrote_task => 3,
        (true, _) => 2,
    };
    if to_payloads != payload {
        return Err(format!(
            "guarantee 8: #{i} ({what}, input offloaded) made {to_payloads} requests to its payloads, alone and without a fault; the table says {payload}"
        ));
    }
    if n < low + sends || n > high + sends {
        return Err(format!(
            "guarantee 8: #{i} ({what}) made {n} requests, alone and without a fault; the table says {}..={}",
            low + sends,
            high + sends
        ));
    }
    Ok(())
}

/// Guarantee 8 for a batch (docs/protocol.md, "Request counts"): under
/// `RECORD_EVENTS=submitter`, `submit_many` of N keyed items sends their
/// due messages in at most ⌈N/10⌉ `SendMessageBatch` requests, when it met
/// no fault (a refused send is retried, one request more), checked after
/// every step. Added for shard 8's mutant of `Engine::due_batch` (no
/// batch: one send per item).
pub fn check_batch_sends(sim: &Sim, i: usize) -> Result<(), String> {
    let a = &sim.actors[i];
    let Role::Batch { items } = &a.role else {
        return Ok(());
    };
    if a.faulted || !matches!(sim.spec.events, Events::Submitter(_)) {
        return Ok(());
    }
    let sends = gate::lock(&sim.gate.state)
        .log
        .iter()
        .filter(|l| l.actor == i && l.kind == Kind::Send)
        .count();
    let most = items.len().div_ceil(10);
    if sends > most {
        return Err(format!(
            "guarantee 8: the batch #{i} of {} items made {sends} SQS sends without a fault; the table says at most {most}",
            items.len()
        ));
    }
    Ok(())
}

/// A reset's answer is true: one whose reset record landed at its key, and
/// that no other write replaced before it answered, answers `Done` (not
/// `Changed` or `NotFound`, which say that nothing was written).
pub fn check_reset(sim: &Sim, i: usize, r: &Reset) -> Result<(), String> {
    let Some((key, how)) = sim.actors[i].role.names() else {
        return Ok(());
    };
    let rkey = super::checks::record_key_as(key, &how);
    // `NotFound` says no live record held the key: not one that was there,
    // live, from before the reset began to its answer.
    let (start, now) = (sim.actors[i].span.0, sim.clock.now());
    let held = sim.checks.lives.iter().any(|l| {
        l.key == rkey
            && !l.reset()
            && l.from <= start
            && l.to.is_none()
            && now < l.record.expires_at
    });
    // `InProgress` says when a reset may succeed: later than now.
    if let Reset::InProgress { retry_after, .. } = r
        && retry_after.is_zero()
    {
        return Err("the reset's answer: InProgress, to be tried again after no time".into());
    }
    if held && matches!(r, Reset::NotFound) {
        return Err(format!(
            "the reset's answer: NotFound while {rkey} held a live record throughout"
        ));
    }
    // `Done` says the key was reset from `old_task_id`: a reset record of
    // that task came to the key before the answer (this reset's own, or,
    // where two resets read the same record, the other's: the key is reset
    // either way, and its next submit gets a new task; docs/testing.md, on
    // `Engine::landed_reset`).
    if let Reset::Done { old_task_id } = r {
        let reset = sim
            .checks
            .lives
            .iter()
            .any(|l| l.key == rkey && l.reset() && l.record.task_id == *old_task_id);
        if !reset {
            return Err(format!(
                "the reset's answer: Done, and no reset record of {old_task_id} came to {rkey}"
            ));
        }
    }
    let s = gate::lock(&sim.gate.state);
    let Some(n) = s
        .log
        .iter()
        .position(|l| l.actor == i && l.ok && l.key == rkey && l.kind.is_write())
    else {
        return Ok(());
    };
    let replaced = s.log[n + 1..]
        .iter()
        .any(|l| l.actor != i && l.ok && l.key == rkey && l.kind != Kind::Send);
    if replaced || matches!(r, Reset::Done { .. }) {
        return Ok(());
    }
    Err(format!(
        "the reset's answer: #{i}'s reset record landed at {rkey} and is there, but it answered {r:?}"
    ))
}

/// The reset's promise to the submits after it: a submit that began once
/// the reset record was at its key (it started, and sent its first
/// request, at a later step than that record's landing) is never answered the task of the record the reset
/// replaced, whatever it met. (The engine tells such a submit by S3's time
/// of its first answer, at or after `reset_at`; a submit that began before
/// the reset record landed may read the old record and replay it, even
/// when the reset's `reset_at`, taken before its PUT was sent, is seconds
/// older than the submit's first answer: the world "an answered key, a
/// reset, the clock, a submit" found such a schedule, the reset's PUT
/// timed out by a clock step and sent again.)
pub fn check_after_reset(
    sim: &Sim,
    i: usize,
    r: &Result<Submitted, SubmitError>,
) -> Result<(), String> {
    let a = &sim.actors[i];
    let Ok(s) = r else {
        return Ok(());
    };
    let lives = &sim.checks.lives;
    let Some(old) = lives.iter().find(|l| {
        !l.reset() && l.record.task_id == s.task_id && super::checks::reset_before(lives, l)
    }) else {
        return Ok(());
    };
    // The step at which the reset record took the old record's place.
    let Some(reset_step) = old.to else {
        return Ok(());
    };
    // An actor starts at a step of its own, and sends its first request
    // then: a later step than the reset record's landing.
    if a.span.0 > reset_step {
        return Err(format!(
            "the reset's promise: #{i} began at step {} after the reset record landed (step {reset_step}), and was answered the reset record's task {}",
            a.span.0, s.task_id
        ));
    }
    Ok(())
}

/// A record's life is in S3's time (docs/protocol.md, "S3's clock, not
/// ours"): every new record a submit of ours writes has a `created_at` no
/// later than S3's time when it landed plus the machines' lead over S3, and
/// no earlier than S3's time when the submit began less the machines' lag
/// behind S3 (a cold process, which has no answer yet to learn S3's clock
/// from, writes its own clock's time) and a second (S3's earliest time, whole seconds). (The claim is built
/// once, when the submit begins: its PUT may be sent later, after a clock
/// step.) Added for shard 4's mutant
/// of `Engine::record_life` (the learnt offset subtracted, not added).
pub fn check_record_times(sim: &mut Sim) -> Result<(), String> {
    let s = gate::lock(&sim.gate.state);
    let new = s.log[sim.checks.times_seen..].to_vec();
    sim.checks.times_seen = s.log.len();
    drop(s);
    // A cold process writes its own clock's time: up to the machines' lag
    // before S3's, or their lead after it.
    let lag = chrono::Duration::seconds(sim.spec.skew.max(0) + 1);
    let lead = chrono::Duration::seconds((-sim.spec.skew).max(0));
    for l in new.iter().filter(|l| {
        l.ok && l.key.starts_with("idempotency/")
            && matches!(l.kind, Kind::PutCreate | Kind::PutUpdate | Kind::Put)
    }) {
        let Some(r) = l
            .body
            .as_ref()
            .and_then(|b| serde_json::from_slice::<Record>(b).ok())
        else {
            continue;
        };
        // A reset record keeps the record's `created_at`.
        if r.reset_at.is_some() || sim.actors[l.actor].role.submits().is_empty() {
            continue;
        }
        let began = sim.actors[l.actor].started_at;
        if r.created_at > l.at + lead || r.created_at < began - lag {
            return Err(format!(
                "S3's clock: #{} wrote {} created at {}, begun at {} and landed at {} (S3's time, the machines {} s behind)",
                l.actor, l.key, r.created_at, began, l.at, sim.spec.skew
            ));
        }
    }
    Ok(())
}

/// A submit's answer says `replayed` exactly when its task is not its own:
/// its own is the task of a record this submit wrote (its claim, landed
/// from any attempt, or its replacement of a failed task); every other
/// answer is a replay. Added for shard 5's mutant of
/// `Engine::answer_before_reset` (its own record, reset, answered as a
/// replay).
pub fn check_replayed(sim: &Sim, i: usize, rkey: &str, s: &Submitted) -> Result<(), String> {
    let g = gate::lock(&sim.gate.state);
    let own = g.log.iter().any(|l| {
        l.actor == i
            && l.ok
            && l.key == rkey
            && l.kind != Kind::Send
            && l.body
                .as_ref()
                .and_then(|b| serde_json::from_slice::<Record>(b).ok())
                .is_some_and(|r| r.task_id == s.task_id && r.reset_at.is_none())
    });
    if s.replayed == own {
        return Err(format!(
            "#{i} answered task {} with replayed: {}, and the record of that task is {}",
            s.task_id,
            s.replayed,
            if own { "its own" } else { "another's" }
        ));
    }
    Ok(())
}

/// A submit without a key (docs/protocol.md, "A submit without a key"),
/// answered: a new task (no record, no replay) with one of buquet's
/// statuses, in the bucket, beside its marker unless a worker took it, and
/// naming in `idempotency` its tenant and nothing else (no `idempotency`
/// without one); an error only where its faults or the clock explain it.
pub fn check_plain(
    sim: &Sim,
    i: usize,
    how: &How,
    r: &Result<Submitted, SubmitError>,
) -> Result<(), String> {
    let s = match r {
        Ok(s) => s,
        Err(e) => return super::checks::expected_error(sim, i, e),
    };
    if s.idempotency.is_some() || s.replayed || !s.created() || s.status.is_empty() {
        return Err(format!("#{i}: a keyless submit answered {s:?}"));
    }
    let Some(body) = super::checks::object(sim, &s.task_key) else {
        return Err(format!(
            "guarantee 3: #{i} answered {} without a key, which is not in the bucket",
            s.task_key
        ));
    };
    let task: Value = serde_json::from_slice(&body).unwrap_or_default();
    let marked = sim
        .bucket
        .keys()
        .iter()
        .any(|k| actors::task_of_marker(k).as_deref() == Some(s.task_key.as_str()));
    if task["status"] == "pending" && !marked {
        return Err(format!(
            "guarantee 3: #{i} answered {} without a key, pending with no marker",
            s.task_key
        ));
    }
    let tenant = how.tenant().map(|t| t.id());
    let named = task.get("idempotency");
    let ok = match &tenant {
        Some(t) => named.and_then(|v| v.get("tenant")).and_then(Value::as_str) == Some(t.as_str()),
        None => named.is_none(),
    };
    if !ok {
        return Err(format!(
            "#{i}: a keyless task of tenant {tenant:?} names {named:?} in its idempotency"
        ));
    }
    Ok(())
}

/// An expired record's answer is true (docs/protocol.md, "The sweeper"): a
/// sweeper that answers `ExpiredDeleted` deleted the record it read (no
/// record of the key that was there when it began is there still), and no
/// store of the checker's keeps an expired record (S3 and S3 Express delete
/// it by `If-Match`, the versioned bucket by the version read;
/// `ExpiredKept` is for `CONDITIONAL_DELETE=off` on an unversioned bucket),
/// so neither the sweeper nor a dry run, which answers what the sweeper
/// would do, answers `ExpiredKept`. Checked when the actor ends. Added for
/// the mutants of `Engine::sweep_read`'s `dry_run` guard,
/// `Engine::deletion_owed` and `Engine::delete_version` (issue 46, the 137
/// never run).
pub fn check_expired_answer(sim: &Sim, i: usize) -> Result<(), String> {
    let a = &sim.actors[i];
    if a.state != State::Done || a.span.1 != sim.step {
        return Ok(());
    }
    let (key, who) = match &a.role {
        Role::Sweep(m) => (m.key.clone(), "the sweeper"),
        Role::DrySweep { key } => (super::checks::record_key(key), "the dry run"),
        _ => return Ok(()),
    };
    let Some(Outcome::Swept(o)) = &a.outcome else {
        return Ok(());
    };
    match o {
        RecordOutcome::ExpiredKept => Err(format!(
            "{who} #{i} answered ExpiredKept for {key} on {:?}, which deletes an expired record safely",
            sim.spec.store
        )),
        RecordOutcome::ExpiredDeleted if who == "the sweeper" => {
            let left = sim
                .checks
                .lives
                .iter()
                .find(|l| l.key == key && l.from <= a.span.0 && l.to.is_none());
            match left {
                Some(l) => Err(format!(
                    "the sweeper #{i} answered ExpiredDeleted for {key}, and the record it found there (task {}) is there still",
                    l.record.task_id
                )),
                None => Ok(()),
            }
        }
        _ => Ok(()),
    }
}

/// A sweeper's `Early` is true: a sweeper on a due message that answers
/// `Early` (its message handed back, nothing done) read a record younger
/// than its stale age. Its tolerance only makes it judge a record stale
/// sooner, and S3's earliest time stands at most a second behind: a record
/// that had reached its stale age when the sweeper began is never early.
/// A sweeper that calls a stale record early hands its message back, and
/// would again at every delivery: nobody finishes the record (guarantee 4).
/// Added for the mutant of `owed` that calls every stale record early
/// (issue 46, the 137 never run).
pub fn check_early(sim: &Sim, i: usize) -> Result<(), String> {
    let a = &sim.actors[i];
    if a.state != State::Done || a.span.1 != sim.step {
        return Ok(());
    }
    let (Role::Sweep(m), Some(Outcome::Swept(RecordOutcome::Early))) = (&a.role, &a.outcome) else {
        return Ok(());
    };
    let stale = sim.settings.stale_creating_after;
    let old = sim.checks.lives.iter().find(|l| {
        l.key == m.key
            && !l.reset()
            && l.from <= a.span.0
            && l.to.is_none()
            && a.started_at >= l.last_modified + stale
    });
    match old {
        Some(l) => Err(format!(
            "guarantee 4: the sweeper #{i} answered Early for {}, whose record (task {}) was {} s old when it began (stale at {} s)",
            m.key,
            l.record.task_id,
            (a.started_at - l.last_modified).num_seconds(),
            stale.num_seconds()
        )),
        None => Ok(()),
    }
}

/// A sweeper's `PastDeadline` is true: a sweeper (or a dry run) that
/// answers `PastDeadline` (a `creating` record past its finish deadline
/// without its task) read the record's task and found none. Past the
/// deadline it reads the task and checks the marker all the same: a record
/// whose task is there is done once a stale marker beside it is removed.
/// Added for the mutant of `Engine::check_past_deadline` that answers
/// without a read (issue 46, the 137 never run).
pub fn check_past_deadline(sim: &Sim, i: usize) -> Result<(), String> {
    let a = &sim.actors[i];
    if a.state != State::Done || a.span.1 != sim.step {
        return Ok(());
    }
    let key = match &a.role {
        Role::Sweep(m) => m.key.clone(),
        Role::DrySweep { key } => super::checks::record_key(key),
        _ => return Ok(()),
    };
    if !matches!(a.outcome, Some(Outcome::Swept(RecordOutcome::PastDeadline))) {
        return Ok(());
    }
    let Some(life) = sim
        .checks
        .lives
        .iter()
        .find(|l| l.key == key && !l.reset() && l.from <= a.span.0 && l.to.is_none())
    else {
        return Ok(());
    };
    let task = &life.record.task_key;
    let s = gate::lock(&sim.gate.state);
    let looked = s
        .log
        .iter()
        .any(|l| l.actor == i && l.kind == Kind::Get && l.key == *task && !l.ok);
    if looked {
        return Ok(());
    }
    Err(format!(
        "#{i} answered PastDeadline for {key} and found no task missing: no read of {task} answered 404"
    ))
}

/// A submit answers `DeadlineExceeded` only once its operation deadline
/// has come: a write that the record's finish deadline refused (its window
/// shut first) is `Undetermined`, which says until when a late write may
/// still land (docs/protocol.md, guarantee 7). `expected_error` lets a
/// faulted actor answer it, and a clock step that times a request out is a
/// fault. Added for the mutant of `Engine::refused` that answers the
/// finish deadline's refusal as the operation's (issue 46, the 137 never
/// run).
pub fn check_deadline_exceeded(sim: &Sim, i: usize) -> Result<(), String> {
    let a = &sim.actors[i];
    if a.state != State::Done || a.span.1 != sim.step {
        return Ok(());
    }
    let Some(Outcome::Submitted(rs)) = &a.outcome else {
        return Ok(());
    };
    let deadline = a.started_at + sim.settings.operation_timeout;
    let now = sim.clock.now();
    if now < deadline
        && rs
            .iter()
            .any(|r| matches!(r, Err(SubmitError::DeadlineExceeded)))
    {
        return Err(format!(
            "#{i} answered DeadlineExceeded at {now}, before its operation deadline {deadline}"
        ));
    }
    Ok(())
}

/// A submit answers `Undetermined` only while a late write may still land:
/// once S3's time is past its record's finish deadline and the late-write
/// margin (a second more: S3's earliest time may stand a second behind),
/// the task is there or will never be, and the answer says which
/// (docs/protocol.md, guarantee 7). `check_submit` judges the other end (not
/// before the finish deadline). Added for the mutant of
/// `Engine::answer_existing` that finishes a record past its deadline
/// (issue 46, the 137 never run).
pub fn check_undetermined(sim: &Sim, i: usize) -> Result<(), String> {
    let a = &sim.actors[i];
    if a.state != State::Done || a.span.1 != sim.step {
        return Ok(());
    }
    let Some(Outcome::Submitted(rs)) = &a.outcome else {
        return Ok(());
    };
    let st = &sim.settings;
    let began = a.started_at;
    for (sub, r) in a.role.submits().iter().zip(rs) {
        let Err(SubmitError::Undetermined { task_id, .. }) = r else {
            continue;
        };
        let rkey = super::checks::record_key_as(sub.key, &sub.how);
        let settled = sim.checks.lives.iter().find(|l| {
            l.key == rkey
                && l.record.task_id == *task_id
                && began
                    >= l.last_modified
                        + st.finish_window
                        + st.late_write_margin
                        + chrono::Duration::seconds(1)
        });
        if let Some(l) = settled {
            return Err(format!(
                "guarantee 7: #{i} answered Undetermined for task {task_id}, begun at {began}, after no late write for its record could land ({})",
                l.last_modified + st.finish_window + st.late_write_margin
            ));
        }
    }
    Ok(())
}
