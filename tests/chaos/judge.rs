//! [`audit`]: the evidence judged, one step a method of [`Judge`], in the
//! order each step needs the last: what was sent, the tasks, the tasks as
//! first written, the answers, the records, the records in flight and the
//! final replays, the runs, and what is left over (markers, payloads,
//! rejected messages, logs).

use std::collections::{BTreeSet, HashMap, HashSet};

use serde_json::Value;

use super::audit::{Audit, Evidence, Obj};
use super::compare::{Near, Tie, canonical, json_of, near, raw_input, task_id_of, tie};
use super::producers::{Item, KeyId, Kind};

/// Judges the evidence.
pub fn audit(e: &Evidence) -> Audit {
    let mut j = Judge::sent(e);
    j.tasks();
    j.first_tasks();
    j.answers();
    j.records();
    j.in_flight();
    j.replays();
    j.runs();
    j.markers_and_payloads();
    j.rejected();
    j.a.invocation_errors = e.invocation_errors as u64;
    j.a.panics = e.panics.len() as u64;
    for (f, l) in e.panics.iter().take(5) {
        j.a.example("panics", format!("{f}: {l}"));
    }
    j.a
}

impl Audit {
    /// Keeps a few examples of each count (five), for the log.
    fn example(&mut self, what: &str, detail: String) {
        if self.examples.iter().filter(|x| x.starts_with(what)).count() < 5 {
            self.examples.push(format!("{what}: {detail}"));
        }
    }

    /// One more lost submit: acknowledged, and its task not in the bucket.
    fn lost(&mut self, detail: String) {
        self.lost_submits += 1;
        self.example("lost submits", detail);
    }
}

/// Task `id` counted among the tasks of `of` (a key, a keyless mark); what
/// was sent for `of`.
fn tie_to<'e, K: Eq + std::hash::Hash>(
    tasks: &mut HashMap<K, BTreeSet<String>>,
    inputs: &HashMap<K, &'e Value>,
    of: K,
    id: &str,
) -> Option<&'e Value> {
    let input = inputs.get(&of).copied();
    tasks.entry(of).or_default().insert(id.to_owned());
    input
}

/// What the steps learn and hand on, and the counts so far.
struct Judge<'e> {
    e: &'e Evidence,
    a: Audit,
    /// What each key and each keyless mark was sent with.
    input_of_key: HashMap<KeyId, &'e Value>,
    input_of_mark: HashMap<String, &'e Value>,
    /// Offloaded inputs, by task id.
    payloads: HashMap<String, &'e Obj>,
    task_ids: HashSet<String>,
    keyless_ids: HashSet<String>,
    tasks_of_key: HashMap<KeyId, BTreeSet<String>>,
    tasks_of_mark: HashMap<String, BTreeSet<String>>,
    item_of_mid: HashMap<&'e str, &'e Item>,
    /// Every task id a key was ever tied to: by its task, its answers, its
    /// final replay, its record.
    ids_of_key: HashMap<KeyId, BTreeSet<String>>,
    acknowledged: HashSet<KeyId>,
    answered_keyless: HashSet<String>,
    recorded: HashMap<KeyId, (String, &'e Obj)>,
    left_to_a_replay: HashSet<KeyId>,
}

impl<'e> Judge<'e> {
    /// What each key and each keyless mark was sent with, and the payloads.
    fn sent(e: &'e Evidence) -> Self {
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
        let payloads = e
            .payloads
            .iter()
            .filter_map(|p| {
                let rest = p.key.strip_prefix("payloads/")?;
                let (id, file) = rest.split_once('/')?;
                (file == "input.json").then(|| (id.to_owned(), p))
            })
            .collect();
        let item_of_mid = e
            .items
            .iter()
            .filter_map(|i| i.message_id.as_deref().map(|m| (m, i)))
            .collect();
        Judge {
            e,
            a: Audit::default(),
            input_of_key,
            input_of_mark,
            payloads,
            task_ids: HashSet::new(),
            keyless_ids: HashSet::new(),
            tasks_of_key: HashMap::new(),
            tasks_of_mark: HashMap::new(),
            item_of_mid,
            ids_of_key: HashMap::new(),
            acknowledged: HashSet::new(),
            answered_keyless: HashSet::new(),
            recorded: HashMap::new(),
            left_to_a_replay: HashSet::new(),
        }
    }

    /// The input a task or a run names was sent with, for an input of no
    /// conflict's variant.
    fn sent_with(&self, input: &Value) -> Option<&'e Value> {
        match tie(input) {
            Tie::Key(k, 0) => self.input_of_key.get(&k).copied(),
            Tie::Keyless(u) => self.input_of_mark.get(&u).copied(),
            _ => None,
        }
    }

    /// The tasks, tied to their submits through their inputs.
    fn tasks(&mut self) {
        let e = self.e;
        for t in &e.tasks {
            let v = json_of(&t.body);
            let Some(id) = v["id"]
                .as_str()
                .map(str::to_owned)
                .or_else(|| task_id_of(&t.key))
            else {
                continue;
            };
            self.task_ids.insert(id.clone());
            let raw = raw_input(&v, &t.body, &self.payloads);
            let input: Value = raw
                .as_deref()
                .and_then(|r| serde_json::from_str(r).ok())
                .unwrap_or(Value::Null);
            let sent = self.tie_task(&id, &input);
            // As it is now (a worker may have rewritten it): the input sent,
            // but for what buquet's rewrite does to doubles.
            if let Some(sent) = sent
                && !matches!(tie(&input), Tie::Key(_, v) if v != 0)
            {
                match near(sent, &input) {
                    Near::Equal => {}
                    Near::OneUlp => self.a.doubles_moved_by_the_worker += 1,
                    Near::Differs => {
                        self.a.inputs_changed += 1;
                        self.a.example(
                            "inputs changed",
                            format!("task {id} now: {input} was sent as {sent}"),
                        );
                    }
                }
            }
        }
        self.a.tasks = self.task_ids.len() as u64;
    }

    /// One task tied to its key or its keyless mark (counted where it is
    /// neither's): what its submit sent.
    fn tie_task(&mut self, id: &str, input: &Value) -> Option<&'e Value> {
        match tie(input) {
            Tie::Key(k, variant) => {
                if variant != 0 {
                    self.a.conflicts_accepted += 1;
                    self.a.example(
                        "conflicts accepted",
                        format!("task {id} has {k:?}'s variant {variant}"),
                    );
                }
                tie_to(&mut self.tasks_of_key, &self.input_of_key, k, id)
            }
            Tie::Keyless(u) => {
                self.keyless_ids.insert(id.to_owned());
                tie_to(&mut self.tasks_of_mark, &self.input_of_mark, u, id)
            }
            Tie::Invalid(n) => {
                self.a.invalid_bodies_that_wrote += 1;
                self.a
                    .example("invalid bodies that wrote", format!("task {id} of {n}"));
                None
            }
            Tie::Unknown => {
                self.a.tasks_of_no_submit += 1;
                self.a
                    .example("tasks of no submit", format!("task {id}: {input}"));
                None
            }
        }
    }

    /// As this service wrote it (the first version): byte for byte the
    /// canonical form of what was sent.
    fn first_tasks(&mut self) {
        let e = self.e;
        for t in &e.first_tasks {
            let v = json_of(&t.body);
            let Some(id) = v["id"].as_str() else { continue };
            let Some(raw) = raw_input(&v, &t.body, &self.payloads) else {
                continue;
            };
            let input: Value = serde_json::from_str(&raw).unwrap_or(Value::Null);
            if let Some(sent) = self.sent_with(&input)
                && canonical(sent) != raw
            {
                self.a.inputs_changed += 1;
                self.a.example(
                    "inputs changed",
                    format!(
                        "task {id} as written: {raw} was sent as {}",
                        canonical(sent)
                    ),
                );
            }
        }
    }

    /// The answers: which keys were acknowledged, with which task ids.
    fn answers(&mut self) {
        let e = self.e;
        self.ids_of_key = self.tasks_of_key.clone();
        for ans in &e.answers {
            let it = &e.items[ans.item];
            if ans.status >= 500 && !(ans.status == 503 && ans.retry_after) {
                self.a.bad_5xx_answers += 1;
                self.a.example(
                    "5xx answers",
                    format!("{} {:?} to {:?}", ans.status, ans.code, it.door),
                );
            }
            let ok = matches!(ans.status, 200 | 201);
            if !it.valid && !(400..500).contains(&ans.status) {
                self.a.invalid_bodies_that_wrote += 1;
                self.a.example(
                    "invalid bodies that wrote",
                    format!("{} to an invalid body", ans.status),
                );
            }
            if it.kind == Kind::Conflict && ok {
                self.a.conflicts_accepted += 1;
                self.a.example(
                    "conflicts accepted",
                    format!("{:?} answered {}", it.key, ans.status),
                );
            }
            if !ok || it.kind == Kind::Conflict || !it.valid {
                continue;
            }
            let Some(id) = &ans.task_id else { continue };
            self.answered(it, id);
        }
        for mid in e.sqs_taken.keys() {
            if let Some(it) = self.item_of_mid.get(mid.as_str())
                && it.valid
                && it.kind != Kind::Conflict
                && let Some(k) = &it.key
            {
                self.acknowledged.insert(k.clone());
            }
        }
        for (k, ans) in &e.replays {
            if ans.status >= 500 && !(ans.status == 503 && ans.retry_after) {
                self.a.bad_5xx_answers += 1;
            }
            if let Some(id) = &ans.task_id {
                let ids = self.ids_of_key.entry(k.clone()).or_default();
                ids.insert(id.clone());
            }
        }
    }

    /// A valid submit answered 200 or 201 with task `id`.
    fn answered(&mut self, it: &Item, id: &str) {
        match &it.key {
            Some(k) => {
                let ids = self.ids_of_key.entry(k.clone()).or_default();
                ids.insert(id.to_owned());
                self.acknowledged.insert(k.clone());
            }
            None => {
                self.answered_keyless.insert(id.to_owned());
                if !self.task_ids.contains(id) {
                    self.a
                        .lost(format!("keyless task {id} answered 201, not in the bucket"));
                }
            }
        }
    }

    /// The records, by key; two task ids for one key; lost submits: a key
    /// acknowledged none of whose task ids is a task object.
    fn records(&mut self) {
        let e = self.e;
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
                self.a.invalid_bodies_that_wrote += 1;
                self.a
                    .example("invalid bodies that wrote", format!("record of {key}"));
            }
            let k = (scope.to_owned(), key.to_owned());
            let ids = self.ids_of_key.entry(k.clone()).or_default();
            ids.insert(id.to_owned());
            self.recorded.insert(k, (id.to_owned(), r));
        }
        self.a.records = self.recorded.len() as u64;
        self.a.keys = self.ids_of_key.len() as u64;
        for (k, ids) in &self.ids_of_key {
            if ids.len() > 1 {
                self.a.two_task_ids_for_one_key += 1;
                self.a.example("two task ids", format!("{k:?}: {ids:?}"));
            }
        }
        for k in &self.acknowledged {
            let ids = self.ids_of_key.get(k);
            let has = ids.is_some_and(|ids| ids.iter().any(|i| self.task_ids.contains(i)));
            if !has {
                self.a
                    .lost(format!("{k:?} acknowledged, {ids:?} not in the bucket"));
            }
        }
    }

    /// In flight: a record whose task was never written, past its window.
    fn in_flight(&mut self) {
        let e = self.e;
        let abandoned_keys: HashSet<&KeyId> = e
            .abandoned
            .iter()
            .filter_map(|i| e.items.get(*i)?.key.as_ref())
            .collect();
        for (k, (id, r)) in &self.recorded {
            let past = r.last_modified + e.finish_window + e.late_write <= e.now;
            let named_in_time = e
                .due_named
                .get(&r.key)
                .is_some_and(|t| *t < r.last_modified + e.finish_window);
            let acknowledged = self.acknowledged.contains(k);
            if !self.task_ids.contains(id) && !e.task_history.contains(id) && past {
                if e.with_claim_window
                    && !named_in_time
                    && !acknowledged
                    && abandoned_keys.contains(k)
                {
                    self.a.records_left_to_a_replay_by_a_killed_submitter += 1;
                    self.left_to_a_replay.insert(k.clone());
                    continue;
                }
                self.a.records_in_flight_after_their_windows += 1;
                let due = e.due_named.get(&r.key).map_or_else(
                    || "no due message ever named it".to_owned(),
                    |t| {
                        format!(
                            "its first due message came {:.1} s after it was written",
                            (*t - r.last_modified).num_milliseconds() as f64 / 1000.0
                        )
                    },
                );
                self.a.example(
                    "records in flight",
                    format!("{k:?} names {id}, never written; {due}"),
                );
            } else if !self.task_ids.contains(id) && e.task_history.contains(id) && !acknowledged {
                self.a
                    .lost(format!("{k:?}: its task {id} was written, then deleted"));
            }
        }
    }

    /// The final replays settle every key (but those left to a replay), and
    /// no keyless mark made two tasks.
    fn replays(&mut self) {
        let e = self.e;
        for (k, ans) in &e.replays {
            let missing = ans.task_status.as_deref() == Some("missing");
            if ans.status == 200 && missing && self.left_to_a_replay.contains(k) {
                continue;
            }
            if ans.status != 200 || missing {
                self.a.unsettled_replays += 1;
                self.a.example(
                    "unsettled replays",
                    format!("{k:?}: {} {:?} {:?}", ans.status, ans.code, ans.task_status),
                );
            }
        }
        for (u, ids) in &self.tasks_of_mark {
            if ids.len() > 1 {
                self.a.two_task_ids_for_one_key += 1;
                self.a
                    .example("two task ids", format!("keyless {u}: {ids:?}"));
            }
        }
    }

    /// The workers' runs: of what was sent, of tasks in the bucket, each
    /// task run.
    fn runs(&mut self) {
        let mut runs_of: HashMap<&str, usize> = HashMap::new();
        let e = self.e;
        for r in &e.runs {
            *runs_of.entry(r.id.as_str()).or_default() += 1;
            // A double moved by one unit is counted once, with the task
            // object it was read from.
            if let Some(sent) = self.sent_with(&r.input)
                && near(sent, &r.input) == Near::Differs
            {
                self.a.inputs_changed += 1;
                self.a.example(
                    "inputs changed",
                    format!("run of {}: got {}", r.id, r.input),
                );
            }
        }
        self.a.runs = e.runs.len() as u64;
        for id in &self.task_ids {
            match runs_of.get(id.as_str()) {
                None if self.keyless_ids.contains(id) && !self.answered_keyless.contains(id) => {
                    self.a.unanswered_keyless_tasks_never_run += 1;
                }
                None => {
                    self.a.unrun_tasks += 1;
                    self.a.example("unrun tasks", id.clone());
                }
                Some(n) if *n > 1 => self.a.tasks_run_twice += 1,
                _ => {}
            }
        }
        for id in runs_of.keys() {
            if !self.task_ids.contains(*id) {
                self.a.runs_of_tasks_not_in_the_bucket += 1;
                self.a
                    .example("runs of tasks not in the bucket", id.to_string());
            }
        }
    }

    /// A marker naming no task that no record names either can only be a
    /// keyless submit's whose task never landed: reported. Any other marker
    /// left once the workers are idle is stale. A payload no task names is
    /// an orphan once the last pass was due to delete it.
    fn markers_and_payloads(&mut self) {
        let recorded_ids: HashSet<&str> =
            self.recorded.values().map(|(id, _)| id.as_str()).collect();
        for m in &self.e.markers {
            let id = m.rsplit('/').next().unwrap_or("");
            if !self.task_ids.contains(id) && !recorded_ids.contains(id) {
                self.a.markers_of_keyless_tasks_never_written += 1;
            } else {
                self.a.stale_markers += 1;
                self.a.example("stale markers", m.clone());
            }
        }
        for (id, p) in &self.payloads {
            if self.task_ids.contains(id) {
                continue;
            }
            let due = self
                .e
                .last_pass
                .is_some_and(|t| p.last_modified + self.e.orphan_after <= t);
            if due {
                self.a.orphan_payloads += 1;
                self.a.example("orphan payloads", p.key.clone());
            } else {
                self.a.young_orphan_payloads += 1;
            }
        }
    }

    /// rejected/ holds the invalid messages taken, and only those.
    fn rejected(&mut self) {
        let e = self.e;
        let mut rejected_mids: HashSet<String> = HashSet::new();
        for r in &e.rejected {
            let v = json_of(&r.body);
            let mid = v["message"]["messageId"].as_str().unwrap_or("").to_owned();
            match self.item_of_mid.get(mid.as_str()) {
                Some(it) if !it.valid || it.kind == Kind::Conflict => {}
                _ => {
                    self.a.rejected_without_being_invalid += 1;
                    self.a.example(
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
                self.a.invalid_messages_not_rejected += 1;
                self.a.example("invalid messages not rejected", mid.clone());
            } else if it.kind == Kind::Conflict {
                self.a.conflicts_accepted += 1;
                self.a.example(
                    "conflicts accepted",
                    format!("message {mid} taken, not rejected"),
                );
            }
        }
    }
}
