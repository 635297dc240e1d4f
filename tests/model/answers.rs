use super::*;

impl Model {
    /// attempt.
    pub(super) fn worked(&mut self, done: Worked) -> Result<(), String> {
        let Some(c) = done.claim else {
            return Ok(());
        };
        self.stats.claims += 1;
        self.stats.claimed_by_scan += u64::from(c.by_scan);
        match c.then {
            Then::Complete => self.stats.completed += 1,
            Then::Retry { .. } if !c.failed => self.stats.retried += 1,
            Then::Reschedule { .. } => self.stats.rescheduled += 1,
            Then::Retry { .. } | Then::Fail => {}
        }
        self.stats.failed_for_good += u64::from(c.failed);
        if !self.claims.insert((c.id, c.attempt)) {
            return Err(format!(
                "task {} was claimed twice for attempt {}",
                c.id, c.attempt
            ));
        }
        // A marker the worker writes is the task's own, and true.
        for m in &c.markers {
            self.unsure_markers.remove(m);
        }
        Ok(())
    }

    /// Markers our process wrote or removed in this step. A process that did
    /// not end cleanly (crashed, or failed) may have died between its
    /// marker landing and its re-read of the task: such a marker is not
    /// vouched for until a later finisher of its record checks it.
    pub(super) fn note_markers(&mut self, store: &FaultyStore<Recorded>, clean: bool) {
        for c in store.calls() {
            if !c.key.starts_with("ready/") {
                continue;
            }
            match c.op {
                Op::Delete if c.error.is_none() => {
                    self.stats.markers_removed += 1;
                    self.unsure_markers.remove(&c.key);
                }
                Op::Put if !clean => {
                    // It may have landed, whatever the process was told.
                    self.unsure_markers.insert(c.key.clone());
                }
                Op::Put if c.error.is_none() => {
                    self.unsure_markers.remove(&c.key);
                }
                _ => {}
            }
        }
    }

    /// Checks one submit's answer or error against what the state allowed.
    pub(super) async fn check_submit(
        &mut self,
        c: &Ctx,
        r: Result<idempotent_submit::Submitted, SubmitError>,
    ) -> Result<(), String> {
        self.stats.tenant_submits += u64::from(c.who.tenant > 0);
        self.stats.off_clock_submits += u64::from(!self.machine.behind.lock().unwrap().is_zero());
        self.stats.queue_scope_submits += u64::from(c.who.scope == 1);
        self.stats.custom_scope_submits += u64::from(c.who.scope == 2);
        match r {
            Ok(s) => self.check_answered(c, &s).await?,
            Err(SubmitError::Conflict { kind, task_id }) => {
                self.check_conflict(c, kind, task_id)?
            }
            Err(SubmitError::Undetermined { task_id, .. }) => {
                self.check_undetermined(c, task_id)?
            }
            Err(SubmitError::Storage(StoreError::Crashed)) if c.crashed => {
                self.stats.storage_errors += 1;
            }
            Err(SubmitError::Storage(StoreError::Unavailable(_) | StoreError::Conflict))
                if c.faulty || c.slow =>
            {
                self.stats.storage_errors += 1;
            }
            Err(SubmitError::DeadlineExceeded) if c.slow => {
                self.stats.storage_errors += 1;
            }
            // before_claim: a due message the queue did not take fails the
            // submit retryably, and nothing was written for it.
            Err(SubmitError::Storage(StoreError::Unavailable(why)))
                if self.submitter
                    && !self.with_claim
                    && why.starts_with("the due queue did not accept") =>
            {
                if c.wrote {
                    return Err(format!(
                        "before_claim: a submit whose due message was not accepted wrote something: {why}"
                    ));
                }
                self.stats.due_refused_submits += 1;
            }
            // 412 and 404 surfacing, fatal errors, and any failure of a
            // fault-free submit are bugs.
            Err(e) => return Err(format!("an error the state did not allow: {e:?}")),
        }
        Ok(())
    }

    /// An answered submit: guarantees 1, 3, 5, 6, 7 and 11.
    async fn check_answered(
        &mut self,
        c: &Ctx,
        s: &idempotent_submit::Submitted,
    ) -> Result<(), String> {
        let (my_type, my_hash) = (c.my_type(), c.my_hash());
        let live_before = c.live_before();
        self.answers.push(Answer {
            path: c.path.clone(),
            task_id: s.task_id,
            start: c.start,
            end: c.now,
        });
        self.stats.recovered += u64::from(s.recovered);
        self.stats.replayed += u64::from(s.replayed);
        self.stats.missing += u64::from(s.status == "missing");
        if let Some((old, _)) = &c.before
            && old.expires_at <= c.start
        {
            self.stats.replaced += 1;
        }
        self.check_failed_key(c, s, live_before).await?;
        // Guarantees 1 and 5: the answer is this key's task, of this
        // task type.
        if s.task_type != my_type {
            return Err(format!("answered a task of type {}", s.task_type));
        }
        if s.idempotency.as_ref().map(|i| i.key.as_str()) != Some(&key_name(c.who.key)) {
            return Err(format!(
                "guarantee 1: answered the record of another key: {s:?}"
            ));
        }
        self.check_decided(c, s).await?;
        if c.alone && s.created() {
            let (rec, _) = self
                .record_at(&c.path)
                .await
                .ok_or("201 without a record")?;
            if rec.task_id != s.task_id {
                return Err(format!(
                    "201 for {} but the record names {}",
                    s.task_id, rec.task_id
                ));
            }
        }
        // Guarantee 6: an expired record is replaced by a new task.
        if c.alone
            && let Some((old, _)) = &c.before
            && old.expires_at <= c.start
            && (!s.created() || s.task_id == old.task_id)
        {
            return Err(format!(
                "guarantee 6: the record was expired, yet got {} (created={})",
                s.task_id,
                s.created()
            ));
        }
        // Guarantee 5: a live record of another input or type
        // conflicts, unless its task failed and this submit claims
        // the key for a new one.
        if c.alone
            && let Some((old, _)) = live_before
            && old.expires_at > c.now
            && (old.input_hash != my_hash || old.task_type != my_type)
            && s.replaces_task_id != Some(old.task_id)
        {
            return Err(format!(
                "guarantee 5: another input or type was accepted: {s:?}"
            ));
        }
        Ok(())
    }

    /// Guarantees 3 and 7 for an answered submit: `missing` is true and
    /// said only once no late write can land; any other answer alone
    /// found its task (and, before the deadline, its marker) there.
    async fn check_decided(
        &mut self,
        c: &Ctx,
        s: &idempotent_submit::Submitted,
    ) -> Result<(), String> {
        let (my_type, my_input) = (c.my_type(), input_of(c.who, c.input));
        let task = self.get(&s.task_key).await;
        let decided_in_time = self
            .record_first_landed(s.task_id)
            .is_some_and(|t| c.now < t + self.settings.finish_window);
        if s.status != "missing" && decided_in_time {
            self.finished.insert(s.task_id);
        }
        if s.status == "missing" {
            // Guarantee 7: `missing` is true, and said only once no
            // late write can land any more (or the queue deleted it).
            if c.alone && task.is_some() {
                return Err(format!("answered missing, but {} is there", s.task_key));
            }
            let landed = self.record_first_landed(s.task_id);
            let late_writes_over = landed
                .is_some_and(|t| c.now >= t + self.settings.finish_window + Duration::minutes(15));
            if !self.deleted.contains(&s.task_id) && !late_writes_over {
                return Err(format!(
                    "answered missing for {} at {}, before its deadline + 15 min (record landed {landed:?})",
                    s.task_id, c.now
                ));
            }
        } else if c.alone {
            // Guarantee 3: the task (and, before the deadline, its
            // marker) was there when it decided.
            let Some(task) = task else {
                return Err(format!(
                    "answered {} but its task is not in the bucket",
                    s.task_id
                ));
            };
            let t: Value = serde_json::from_slice(&task.body).unwrap();
            if t["input"] != my_input || t["task_type"] != my_type {
                return Err(format!(
                    "answered {} whose task holds {} {}",
                    s.task_id, t["task_type"], t["input"]
                ));
            }
            let id = s.task_id.to_string();
            let marker = self.markers().await.iter().any(|m| m.ends_with(&id));
            // A worker that claimed the task has deleted its marker,
            // rightly: the marker is owed while the task is untouched.
            let untouched = self.untouched(s.task_id, &task.body).await;
            self.stats.touched_replays += u64::from(!untouched);
            if !marker && untouched && decided_in_time {
                return Err(format!(
                    "answered {} before its deadline, but its marker is not in the bucket",
                    s.task_id
                ));
            }
        }
        Ok(())
    }

    /// A conflict: guarantees 5 and 11.
    fn check_conflict(
        &mut self,
        c: &Ctx,
        kind: idempotent_submit::testing::protocol::ConflictKind,
        task_id: uuid::Uuid,
    ) -> Result<(), String> {
        let (my_type, my_hash) = (c.my_type(), c.my_hash());
        let live_before = c.live_before();
        match kind {
            idempotent_submit::testing::protocol::ConflictKind::Input => {
                self.stats.input_conflicts += 1
            }
            idempotent_submit::testing::protocol::ConflictKind::TaskType => {
                self.stats.task_type_conflicts += 1
            }
            // The model sends no task options (tests/options.rs
            // covers them): its records all say "none".
            idempotent_submit::testing::protocol::ConflictKind::Options => {
                return Err(format!("an options conflict without options: {task_id}"));
            }
        }
        // Guarantee 5: a conflict names a live record of this key
        // with another input or task type, and nothing was written.
        if c.wrote {
            return Err("a conflicting submit wrote something".into());
        }
        // Guarantee 11: a key whose task failed is free to a
        // `new_task` submit, whatever it asks for.
        if c.alone && c.new_task && c.freed {
            return Err(format!(
                "guarantee 11: a new_task submit met a failed task's key and got a conflict with {task_id}"
            ));
        }
        if c.alone {
            let Some((old, _)) = live_before else {
                return Err(format!("a conflict with no live record ({task_id})"));
            };
            if old.task_id != task_id || (old.input_hash == my_hash && old.task_type == my_type) {
                return Err(format!(
                    "a conflict with {task_id}, but the record was {} of the same request",
                    old.task_id
                ));
            }
        }
        Ok(())
    }

    /// An undetermined answer: only past its record's deadline.
    fn check_undetermined(&mut self, c: &Ctx, task_id: uuid::Uuid) -> Result<(), String> {
        self.stats.undetermined += 1;
        // Only past the deadline of that submit's record (judged, as
        // the writer does, from when its record was first sent).
        let sent = self.record_first_sent(task_id);
        let Some(sent) = sent else {
            return Err(format!("undetermined for {task_id}, which no record named"));
        };
        // Less two seconds: a writer knows S3's clock to within a
        // second (its answers' Date has whole seconds), and takes the
        // safe side twice: its deadline from the send time's earliest
        // S3 time, now from the latest.
        if c.now + Duration::seconds(2) < sent + self.settings.finish_window {
            return Err(format!(
                "undetermined for {task_id} at {}, before its deadline ({sent} + window)",
                c.now
            ));
        }
        if self
            .record_first_landed(task_id)
            .is_some_and(|t| c.start < t + self.settings.finish_window)
        {
            self.stats.refused_at_deadline += 1;
        }
        Ok(())
    }

    /// Guarantee 11 for one answered submit: only a `new_task` submit
    /// claims a key over its task, only over a failed or cancelled one, and
    /// one alone always does; a replay-mode submit answers the failed task.
    pub(super) async fn check_failed_key(
        &mut self,
        c: &Ctx,
        s: &idempotent_submit::Submitted,
        live_before: Option<&(Record, ObjectMeta)>,
    ) -> Result<(), String> {
        // An answer names the task its task replaced, a replay's too; a
        // 201 that names one is this submit's claim over the failed task.
        if let Some(old) = s.replaces_task_id
            && s.created()
        {
            self.stats.failed_key_reuses += 1;
            if !c.new_task {
                return Err(format!(
                    "guarantee 11: a replay-mode submit replaced the failed task {old}"
                ));
            }
            if s.task_id == old {
                return Err(format!("guarantee 11: {old} replaced itself"));
            }
        }
        let alive = |(old, _): &&(Record, ObjectMeta)| old.expires_at > c.now;
        let Some((old, _)) = live_before.filter(alive).filter(|_| c.alone && c.freed) else {
            return Ok(());
        };
        if c.new_task && (!s.created() || s.replaces_task_id != Some(old.task_id)) {
            return Err(format!(
                "guarantee 11: a new_task submit alone met {}'s failed task and answered {} (replacing {:?})",
                old.task_id, s.task_id, s.replaces_task_id
            ));
        }
        if !c.new_task {
            self.stats.failed_replays += 1;
            if s.task_id != old.task_id || s.created() {
                return Err(format!(
                    "guarantee 11: a replay-mode submit met {}'s failed task and answered {} (created={})",
                    old.task_id,
                    s.task_id,
                    s.created()
                ));
            }
        }
        Ok(())
    }
}

impl Ctx {
    /// The record this submit met, if it was alive.
    pub(super) fn live_before(&self) -> Option<&(Record, ObjectMeta)> {
        self.before
            .as_ref()
            .filter(|(old, _)| old.expires_at > self.start)
    }

    fn my_type(&self) -> &'static str {
        TASK_TYPES[self.task_type as usize]
    }

    fn my_hash(&self) -> String {
        input_hash(&canonical_json(&input_of(self.who, self.input)))
    }
}
