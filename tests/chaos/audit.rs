//! The audit: what the world left (the bucket, the workers' runs, every
//! process's log) against what the producers sent and were answered. The
//! evidence is collected once ([`Evidence::collect`]); [`audit`] is a plain
//! function of it, so that the unit tests below can show each count
//! catching what it is for without a world.

use std::collections::{BTreeSet, HashMap, HashSet};

use chrono::{DateTime, Utc};
use serde_json::Value;

#[allow(unused_imports)]
pub use super::compare::*;
#[allow(unused_imports)]
pub use super::evidence::*;
use super::producers::{Answer, Item, KeyId, Kind};

/// One run of a task by a worker, as its handler wrote it.
#[derive(Debug, Clone)]
pub struct Run {
    pub id: String,
    pub input: Value,
}

/// An object of the bucket: its key, body and when it was last written.
#[derive(Debug, Clone)]
pub struct Obj {
    pub key: String,
    pub body: Vec<u8>,
    pub last_modified: DateTime<Utc>,
}

/// What the audit judges.
#[derive(Debug, Default)]
pub struct Evidence {
    pub items: Vec<Item>,
    pub answers: Vec<Answer>,
    /// The final replay of every key with a record: its answer.
    pub replays: Vec<(KeyId, Answer)>,
    pub sqs_taken: HashMap<String, usize>,
    pub invocation_errors: usize,
    pub records: Vec<Obj>,
    /// Task objects as they are now.
    pub tasks: Vec<Obj>,
    /// Each task object's first version: the one this service wrote.
    pub first_tasks: Vec<Obj>,
    /// Task ids that ever had a version in the bucket (deleted ones too).
    pub task_history: HashSet<String>,
    pub markers: Vec<String>,
    pub payloads: Vec<Obj>,
    pub rejected: Vec<Obj>,
    pub runs: Vec<Run>,
    /// (log file, line) of every line that says a process panicked.
    pub panics: Vec<(String, String)>,
    pub now: DateTime<Utc>,
    pub finish_window: chrono::Duration,
    pub late_write: chrono::Duration,
    /// When the last scheduled pass began, and from what age a payload
    /// with no task is its to delete.
    pub last_pass: Option<DateTime<Utc>>,
    pub orphan_after: chrono::Duration,
    /// When a due message first named each record.
    pub due_named: HashMap<String, DateTime<Utc>>,
    /// The submitters send the due messages beside their records' PUTs
    /// (`RECORD_EVENTS=submitter`, `DUE_MESSAGE=with_claim`): the one
    /// configuration whose window the contract leaves to a replay.
    pub with_claim_window: bool,
    /// Items whose client gave up after a killed invocation.
    pub abandoned: HashSet<usize>,
}

/// Every count of the audit. All must be zero but `tasks_run_twice` and
/// `young_orphan_payloads`, which are reported.
#[derive(Debug, Default, Clone)]
pub struct Audit {
    pub two_task_ids_for_one_key: u64,
    pub lost_submits: u64,
    pub unrun_tasks: u64,
    pub runs_of_tasks_not_in_the_bucket: u64,
    pub stale_markers: u64,
    pub records_in_flight_after_their_windows: u64,
    pub unsettled_replays: u64,
    pub orphan_payloads: u64,
    pub bad_5xx_answers: u64,
    pub invocation_errors: u64,
    pub panics: u64,
    pub inputs_changed: u64,
    pub invalid_bodies_that_wrote: u64,
    pub rejected_without_being_invalid: u64,
    pub invalid_messages_not_rejected: u64,
    pub conflicts_accepted: u64,
    pub tasks_of_no_submit: u64,
    /// Reported, not zero: buquet's workers are at-least-once.
    pub tasks_run_twice: u64,
    /// Reported: payloads the last pass was too early to delete.
    pub young_orphan_payloads: u64,
    /// Reported: keyless tasks no worker ran whose submit was never
    /// answered 201 (killed, or answered 503, between its task and its
    /// marker): nothing finishes a submit without a record, so the task
    /// stays out of the ready index.
    pub unanswered_keyless_tasks_never_run: u64,
    /// Reported: under `RECORD_EVENTS=submitter` with
    /// `DUE_MESSAGE=with_claim`, records in flight past their windows that
    /// the contract leaves to their key's next submit (docs/protocol.md,
    /// "Due messages from the submitter"; under `before_claim`, the default,
    /// there is no such record and any is a zero count): no submit of the key was ever
    /// answered or taken, one was abandoned by its client after a killed
    /// invocation, and no due message named the record before its finish
    /// deadline (the process died between its record PUT and its message).
    /// Their final replays answer `missing` (guarantee 7) and are counted
    /// here, not as unsettled. Any other record in flight is a zero count.
    pub records_left_to_a_replay_by_a_killed_submitter: u64,
    /// Reported: markers naming no task that no record names: a keyless
    /// submit's whose task never landed (its marker did).
    pub markers_of_keyless_tasks_never_written: u64,
    /// Reported: inputs whose doubles a worker moved by one unit in the
    /// last place when it rewrote the task (buquet 0.1 parses JSON without
    /// serde_json's `float_roundtrip`), the first version being exact.
    pub doubles_moved_by_the_worker: u64,
    pub tasks: u64,
    pub runs: u64,
    pub keys: u64,
    pub records: u64,
    /// A few examples of each nonzero count, for the log.
    pub examples: Vec<String>,
}

impl Audit {
    /// The counts that must be zero, by name.
    pub fn zero_counts(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("two task ids for one key", self.two_task_ids_for_one_key),
            ("lost submits", self.lost_submits),
            ("unrun tasks", self.unrun_tasks),
            (
                "runs of tasks not in the bucket",
                self.runs_of_tasks_not_in_the_bucket,
            ),
            ("stale markers", self.stale_markers),
            (
                "records still in flight after their windows",
                self.records_in_flight_after_their_windows,
            ),
            (
                "final replays not answered 200 with a task",
                self.unsettled_replays,
            ),
            ("orphan payloads", self.orphan_payloads),
            (
                "5xx answers other than 503 with Retry-After",
                self.bad_5xx_answers,
            ),
            ("invocation errors", self.invocation_errors),
            ("panics in a log", self.panics),
            ("inputs changed", self.inputs_changed),
            (
                "invalid bodies that wrote anything",
                self.invalid_bodies_that_wrote,
            ),
            (
                "rejected/ objects of valid messages",
                self.rejected_without_being_invalid,
            ),
            (
                "invalid messages not in rejected/",
                self.invalid_messages_not_rejected,
            ),
            ("conflicts accepted", self.conflicts_accepted),
            ("tasks of no submit", self.tasks_of_no_submit),
        ]
    }

    pub fn nonzero(&self) -> Vec<(&'static str, u64)> {
        self.zero_counts()
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .collect()
    }
}

/// Judges the evidence.
pub fn audit(e: &Evidence) -> Audit {
    let mut a = Audit::default();
    let ex = |a: &mut Audit, what: &str, detail: String| {
        if a.examples.iter().filter(|x| x.starts_with(what)).count() < 5 {
            a.examples.push(format!("{what}: {detail}"));
        }
    };
    // What each key and each keyless mark was sent with.
    let mut input_of_key: HashMap<KeyId, &Value> = HashMap::new();
    let mut input_of_mark: HashMap<String, &Value> = HashMap::new();
    for it in &e.items {
        let Some(input) = &it.input else { continue };
        if !it.valid || it.kind == Kind::Conflict {
            continue;
        }
        match &it.key {
            Some(k) => {
                input_of_key.entry(k.clone()).or_insert(input);
            }
            None => {
                if let Some(u) = input["u"].as_str() {
                    input_of_mark.insert(u.to_owned(), input);
                }
            }
        }
    }
    let payloads: HashMap<String, &Obj> = e
        .payloads
        .iter()
        .filter_map(|p| {
            let rest = p.key.strip_prefix("payloads/")?;
            let (id, file) = rest.split_once('/')?;
            (file == "input.json").then(|| (id.to_owned(), p))
        })
        .collect();

    // The tasks, tied to their submits through their inputs.
    let mut task_ids: HashSet<String> = HashSet::new();
    let mut keyless_ids: HashSet<String> = HashSet::new();
    let mut tasks_of_key: HashMap<KeyId, BTreeSet<String>> = HashMap::new();
    let mut tasks_of_mark: HashMap<String, BTreeSet<String>> = HashMap::new();
    for t in &e.tasks {
        let v = json_of(&t.body);
        let Some(id) = v["id"]
            .as_str()
            .map(str::to_owned)
            .or_else(|| task_id_of(&t.key))
        else {
            continue;
        };
        task_ids.insert(id.clone());
        let raw = raw_input(&v, &t.body, &payloads);
        let input: Value = raw
            .as_deref()
            .and_then(|r| serde_json::from_str(r).ok())
            .unwrap_or(Value::Null);
        let sent = match tie(&input) {
            Tie::Key(k, variant) => {
                if variant != 0 {
                    a.conflicts_accepted += 1;
                    ex(
                        &mut a,
                        "conflicts accepted",
                        format!("task {id} has {k:?}'s variant {variant}"),
                    );
                }
                tasks_of_key
                    .entry(k.clone())
                    .or_default()
                    .insert(id.clone());
                input_of_key.get(&k).copied()
            }
            Tie::Keyless(u) => {
                keyless_ids.insert(id.clone());
                tasks_of_mark
                    .entry(u.clone())
                    .or_default()
                    .insert(id.clone());
                input_of_mark.get(&u).copied()
            }
            Tie::Invalid(n) => {
                a.invalid_bodies_that_wrote += 1;
                ex(
                    &mut a,
                    "invalid bodies that wrote",
                    format!("task {id} of {n}"),
                );
                None
            }
            Tie::Unknown => {
                a.tasks_of_no_submit += 1;
                ex(&mut a, "tasks of no submit", format!("task {id}: {input}"));
                None
            }
        };
        // As it is now (a worker may have rewritten it): the input sent,
        // but for what buquet's rewrite does to doubles.
        if let Some(sent) = sent
            && !matches!(tie(&input), Tie::Key(_, v) if v != 0)
        {
            match near(sent, &input) {
                Near::Equal => {}
                Near::OneUlp => a.doubles_moved_by_the_worker += 1,
                Near::Differs => {
                    a.inputs_changed += 1;
                    ex(
                        &mut a,
                        "inputs changed",
                        format!("task {id} now: {input} was sent as {sent}"),
                    );
                }
            }
        }
    }
    a.tasks = task_ids.len() as u64;
    // As this service wrote it (the first version): byte for byte the
    // canonical form of what was sent.
    for t in &e.first_tasks {
        let v = json_of(&t.body);
        let Some(id) = v["id"].as_str() else { continue };
        let Some(raw) = raw_input(&v, &t.body, &payloads) else {
            continue;
        };
        let input: Value = serde_json::from_str(&raw).unwrap_or(Value::Null);
        let sent = match tie(&input) {
            Tie::Key(k, 0) => input_of_key.get(&k).copied(),
            Tie::Keyless(u) => input_of_mark.get(&u).copied(),
            _ => None,
        };
        if let Some(sent) = sent
            && canonical(sent) != raw
        {
            a.inputs_changed += 1;
            ex(
                &mut a,
                "inputs changed",
                format!(
                    "task {id} as written: {raw} was sent as {}",
                    canonical(sent)
                ),
            );
        }
    }

    // Answers and records, by key.
    let item_of_mid: HashMap<&str, &Item> = e
        .items
        .iter()
        .filter_map(|i| i.message_id.as_deref().map(|m| (m, i)))
        .collect();
    let mut ids_of_key: HashMap<KeyId, BTreeSet<String>> = tasks_of_key.clone();
    let mut acknowledged: HashSet<KeyId> = HashSet::new();
    let mut answered_keyless: HashSet<String> = HashSet::new();
    for ans in &e.answers {
        let it = &e.items[ans.item];
        if ans.status >= 500 && !(ans.status == 503 && ans.retry_after) {
            a.bad_5xx_answers += 1;
            ex(
                &mut a,
                "5xx answers",
                format!("{} {:?} to {:?}", ans.status, ans.code, it.door),
            );
        }
        let ok = matches!(ans.status, 200 | 201);
        if !it.valid && !(400..500).contains(&ans.status) {
            a.invalid_bodies_that_wrote += 1;
            ex(
                &mut a,
                "invalid bodies that wrote",
                format!("{} to an invalid body", ans.status),
            );
        }
        if it.kind == Kind::Conflict && ok {
            a.conflicts_accepted += 1;
            ex(
                &mut a,
                "conflicts accepted",
                format!("{:?} answered {}", it.key, ans.status),
            );
        }
        if !ok || it.kind == Kind::Conflict || !it.valid {
            continue;
        }
        let Some(id) = &ans.task_id else { continue };
        match &it.key {
            Some(k) => {
                ids_of_key.entry(k.clone()).or_default().insert(id.clone());
                acknowledged.insert(k.clone());
            }
            None => {
                answered_keyless.insert(id.clone());
                if !task_ids.contains(id) {
                    a.lost_submits += 1;
                    ex(
                        &mut a,
                        "lost submits",
                        format!("keyless task {id} answered 201, not in the bucket"),
                    );
                }
            }
        }
    }
    for (mid, _) in e.sqs_taken.iter() {
        if let Some(it) = item_of_mid.get(mid.as_str())
            && it.valid
            && it.kind != Kind::Conflict
            && let Some(k) = &it.key
        {
            acknowledged.insert(k.clone());
        }
    }
    for (k, ans) in &e.replays {
        if ans.status >= 500 && !(ans.status == 503 && ans.retry_after) {
            a.bad_5xx_answers += 1;
        }
        if let Some(id) = &ans.task_id {
            ids_of_key.entry(k.clone()).or_default().insert(id.clone());
        }
    }
    let mut recorded: HashMap<KeyId, (String, &Obj)> = HashMap::new();
    for r in &e.records {
        let v = json_of(&r.body);
        let (Some(scope), Some(key), Some(id)) = (
            v["scope"].as_str(),
            v["key"].as_str(),
            v["task_id"].as_str(),
        ) else {
            continue;
        };
        if key.starts_with("inv-") || key.len() > 255 {
            a.invalid_bodies_that_wrote += 1;
            ex(
                &mut a,
                "invalid bodies that wrote",
                format!("record of {key}"),
            );
        }
        let k = (scope.to_owned(), key.to_owned());
        ids_of_key
            .entry(k.clone())
            .or_default()
            .insert(id.to_owned());
        recorded.insert(k, (id.to_owned(), r));
    }
    a.records = recorded.len() as u64;
    a.keys = ids_of_key.len() as u64;
    for (k, ids) in &ids_of_key {
        if ids.len() > 1 {
            a.two_task_ids_for_one_key += 1;
            ex(&mut a, "two task ids", format!("{k:?}: {ids:?}"));
        }
    }
    // Lost: acknowledged, and none of its task ids is a task object.
    for k in &acknowledged {
        let has = ids_of_key
            .get(k)
            .is_some_and(|ids| ids.iter().any(|i| task_ids.contains(i)));
        if !has {
            a.lost_submits += 1;
            ex(
                &mut a,
                "lost submits",
                format!(
                    "{k:?} acknowledged, {:?} not in the bucket",
                    ids_of_key.get(k)
                ),
            );
        }
    }
    // In flight: a record whose task was never written, past its window.
    let abandoned_keys: HashSet<&KeyId> = e
        .abandoned
        .iter()
        .filter_map(|i| e.items.get(*i)?.key.as_ref())
        .collect();
    let mut left_to_a_replay: HashSet<KeyId> = HashSet::new();
    for (k, (id, r)) in &recorded {
        let past = r.last_modified + e.finish_window + e.late_write <= e.now;
        let named_in_time = e
            .due_named
            .get(&r.key)
            .is_some_and(|t| *t < r.last_modified + e.finish_window);
        if !task_ids.contains(id) && !e.task_history.contains(id) && past {
            if e.with_claim_window
                && !named_in_time
                && !acknowledged.contains(k)
                && abandoned_keys.contains(k)
            {
                a.records_left_to_a_replay_by_a_killed_submitter += 1;
                left_to_a_replay.insert(k.clone());
                continue;
            }
            a.records_in_flight_after_their_windows += 1;
            let due = e.due_named.get(&r.key).map_or_else(
                || "no due message ever named it".to_owned(),
                |t| {
                    format!(
                        "its first due message came {:.1} s after it was written",
                        (*t - r.last_modified).num_milliseconds() as f64 / 1000.0
                    )
                },
            );
            ex(
                &mut a,
                "records in flight",
                format!("{k:?} names {id}, never written; {due}"),
            );
        } else if !task_ids.contains(id) && e.task_history.contains(id) && !acknowledged.contains(k)
        {
            a.lost_submits += 1;
            ex(
                &mut a,
                "lost submits",
                format!("{k:?}: its task {id} was written, then deleted"),
            );
        }
    }
    for (k, ans) in &e.replays {
        let missing = ans.task_status.as_deref() == Some("missing");
        if ans.status == 200 && missing && left_to_a_replay.contains(k) {
            continue;
        }
        if ans.status != 200 || missing {
            a.unsettled_replays += 1;
            ex(
                &mut a,
                "unsettled replays",
                format!("{k:?}: {} {:?} {:?}", ans.status, ans.code, ans.task_status),
            );
        }
    }
    for (u, ids) in &tasks_of_mark {
        if ids.len() > 1 {
            a.two_task_ids_for_one_key += 1;
            ex(&mut a, "two task ids", format!("keyless {u}: {ids:?}"));
        }
    }

    // Runs.
    let mut runs_of: HashMap<&str, usize> = HashMap::new();
    for r in &e.runs {
        *runs_of.entry(r.id.as_str()).or_default() += 1;
        let sent = match tie(&r.input) {
            Tie::Key(k, 0) => input_of_key.get(&k).copied(),
            Tie::Keyless(u) => input_of_mark.get(&u).copied(),
            _ => None,
        };
        if let Some(sent) = sent {
            match near(sent, &r.input) {
                Near::Equal => {}
                // Counted once, with the task object it was read from.
                Near::OneUlp => {}
                Near::Differs => {
                    a.inputs_changed += 1;
                    ex(
                        &mut a,
                        "inputs changed",
                        format!("run of {}: got {}", r.id, r.input),
                    );
                }
            }
        }
    }
    a.runs = e.runs.len() as u64;
    for id in &task_ids {
        match runs_of.get(id.as_str()) {
            None if keyless_ids.contains(id) && !answered_keyless.contains(id) => {
                a.unanswered_keyless_tasks_never_run += 1;
            }
            None => {
                a.unrun_tasks += 1;
                ex(&mut a, "unrun tasks", id.clone());
            }
            Some(n) if *n > 1 => a.tasks_run_twice += 1,
            _ => {}
        }
    }
    for id in runs_of.keys() {
        if !task_ids.contains(*id) {
            a.runs_of_tasks_not_in_the_bucket += 1;
            ex(&mut a, "runs of tasks not in the bucket", id.to_string());
        }
    }

    // Markers, payloads, rejected messages.
    // A marker naming no task that no record names either can only be a
    // keyless submit's whose task never landed: reported. Any other marker
    // left once the workers are idle is stale.
    let recorded_ids: HashSet<&str> = recorded.values().map(|(id, _)| id.as_str()).collect();
    for m in &e.markers {
        let id = m.rsplit('/').next().unwrap_or("");
        if !task_ids.contains(id) && !recorded_ids.contains(id) {
            a.markers_of_keyless_tasks_never_written += 1;
        } else {
            a.stale_markers += 1;
            ex(&mut a, "stale markers", m.clone());
        }
    }
    for (id, p) in &payloads {
        if task_ids.contains(id) {
            continue;
        }
        let due = e
            .last_pass
            .is_some_and(|t| p.last_modified + e.orphan_after <= t);
        if due {
            a.orphan_payloads += 1;
            ex(&mut a, "orphan payloads", p.key.clone());
        } else {
            a.young_orphan_payloads += 1;
        }
    }
    let mut rejected_mids: HashSet<String> = HashSet::new();
    for r in &e.rejected {
        let v = json_of(&r.body);
        let mid = v["message"]["messageId"].as_str().unwrap_or("").to_owned();
        match item_of_mid.get(mid.as_str()) {
            Some(it) if !it.valid || it.kind == Kind::Conflict => {}
            _ => {
                a.rejected_without_being_invalid += 1;
                ex(
                    &mut a,
                    "rejected without being invalid",
                    format!("{}: {}", r.key, v["error"]),
                );
            }
        }
        rejected_mids.insert(mid);
    }
    for it in &e.items {
        let Some(mid) = &it.message_id else { continue };
        if !e.sqs_taken.contains_key(mid) || rejected_mids.contains(mid) {
            continue;
        }
        if !it.valid {
            a.invalid_messages_not_rejected += 1;
            ex(&mut a, "invalid messages not rejected", mid.clone());
        } else if it.kind == Kind::Conflict {
            a.conflicts_accepted += 1;
            ex(
                &mut a,
                "conflicts accepted",
                format!("message {mid} taken, not rejected"),
            );
        }
    }
    a.invocation_errors = e.invocation_errors as u64;
    a.panics = e.panics.len() as u64;
    for (f, l) in e.panics.iter().take(5) {
        ex(&mut a, "panics", format!("{f}: {l}"));
    }
    a
}
