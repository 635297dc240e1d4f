use super::*;

/// Each task id's record: its path and life (from the record's first write,
/// S3's time, not the `created_at` a writer's clock gave it, to its
/// `expires_at`).
type Lives = HashMap<uuid::Uuid, (String, DateTime<Utc>, DateTime<Utc>)>;

/// When (and at which change of the bucket) each record's life ended early.
type Ends = HashMap<uuid::Uuid, (DateTime<Utc>, u64)>;

impl Model {
    /// Parses the records written since the last call, once each: the
    /// history only grows, and the checks run after every step.
    pub(super) fn read_history(&mut self) {
        let writes = self.recorder.writes.lock().unwrap();
        let read = self.records_written.last().map_or(0, |(i, _)| i + 1);
        for (i, w) in writes.iter().enumerate().skip(read) {
            if w.key.starts_with("idempotency/") {
                self.records_written
                    .push((i, Record::parse(&w.body).unwrap()));
            }
        }
    }

    /// Guarantees 1, 2 and 7 and the deadline, over the history so far.
    pub(super) fn check_history(&mut self) -> Result<(), String> {
        self.read_history();
        // The history, locked (not copied) while it is checked.
        let history = self.recorder.writes.clone();
        let writes = history.lock().unwrap();
        let mut life = Lives::new();
        let mut first_landed: HashMap<uuid::Uuid, DateTime<Utc>> = HashMap::new();
        for (w, r) in self.records_written.iter().map(|(i, r)| (&writes[*i], r)) {
            first_landed.entry(r.task_id).or_insert(w.at);
            life.entry(r.task_id)
                .or_insert((w.key.clone(), w.at, r.expires_at));
        }
        let reset_at = self.ends(&writes, &life)?;
        self.stats.late_landings = self.check_writes(&writes, &first_landed, &reset_at)?;
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
        self.check_answers(&life, &reset_at)?;
        lives_apart(&life, &reset_at)
    }

    /// When each life ended early. A reset ends a life early: its record
    /// deleted while alive, or the reset answered (which comes after). (Any
    /// other deletion of a live record is a bug the lives' overlap shows:
    /// the key's next submit makes a second life.) And at its reset
    /// record's write, answered or not (a reset that crashed once its PUT
    /// landed frees the key all the same). A record that replaced a failed
    /// task ends that task's record's life too, once: one new task per
    /// failed task, however many submits raced.
    fn ends(&self, writes: &[Write], life: &Lives) -> Result<Ends, String> {
        let mut reset_at = Ends::new();
        for &(id, at, seq) in &self.reset_answered {
            let t = reset_at.entry(id).or_insert((at, seq));
            *t = (t.0.min(at), t.1.min(seq));
        }
        let mut replaced_by: HashMap<uuid::Uuid, uuid::Uuid> = HashMap::new();
        for (w, r) in self.records_written.iter().map(|(i, r)| (&writes[*i], r)) {
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
        Ok(reset_at)
    }

    /// Guarantee 2 and the finish deadline: each task written once, only
    /// for a record, with If-None-Match, landing no later than the
    /// deadline + 15 minutes. A record is written once: no two writes name
    /// one task id, and none says `ready`. How many task writes landed past
    /// the deadline (inside the margin).
    fn check_writes(
        &self,
        writes: &[Write],
        first_landed: &HashMap<uuid::Uuid, DateTime<Utc>>,
        reset_at: &Ends,
    ) -> Result<u64, String> {
        let mut task_writes: HashMap<&str, usize> = HashMap::new();
        let mut record_writes: HashSet<uuid::Uuid> = HashSet::new();
        // Records replaced by their reset record: none ever comes back.
        let mut reset_records: HashSet<uuid::Uuid> = HashSet::new();
        let mut late = 0;
        let mut records_in_order = self.records_written.iter().peekable();
        for (i, w) in writes.iter().enumerate() {
            if let Some((_, r)) = records_in_order.next_if(|(j, _)| *j == i) {
                record_written_once(r, w, &mut record_writes, &mut reset_records)?;
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
            late += u64::from(w.at >= deadline);
        }
        if let Some((k, n)) = task_writes.iter().find(|(_, n)| **n > 1) {
            return Err(format!("{k} written {n} times"));
        }
        Ok(late)
    }

    /// Guarantee 1: every answer names the task of a life of its own
    /// record (its own tenant, scope and key) that overlapped the submit.
    fn check_answers(&self, life: &Lives, reset_at: &Ends) -> Result<(), String> {
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
        Ok(())
    }
}

/// A record write `w` of `r`: a reset's, over the record it names, once; any
/// other, the record's one write, `creating`, never after its reset.
fn record_written_once(
    r: &Record,
    w: &Write,
    record_writes: &mut HashSet<uuid::Uuid>,
    reset_records: &mut HashSet<uuid::Uuid>,
) -> Result<(), String> {
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
    } else if !record_writes.insert(r.task_id) || r.status != Some(RecordStatus::Creating) {
        return Err(format!(
            "the record of {} was written again ({:?}): a record is written once",
            r.task_id, r.status
        ));
    }
    Ok(())
}

/// Lives of one record never overlap.
fn lives_apart(life: &Lives, reset_at: &Ends) -> Result<(), String> {
    type Span = (DateTime<Utc>, DateTime<Utc>);
    let mut by_record: HashMap<&str, Vec<Span>> = HashMap::new();
    for (id, (k, c, e)) in life {
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
