use super::*;

impl Model {
    /// Checks a reset's answer against what the state allowed (docs/protocol.md,
    /// "Looking up and resetting a key"): a record is forgotten only when no
    /// task can be written for it any more, and a reset deletes no task.
    pub(super) async fn check_reset(
        &mut self,
        c: &Ctx,
        r: Result<Reset, SubmitError>,
    ) -> Result<(), String> {
        let live = c.live_before();
        if c.deleted
            && let Some((old, _)) = &c.before
            && !matches!(r, Ok(Reset::Done { .. }))
        {
            let e = self.reset_ended(old.task_id, c.now);
            self.reset_answered.push(e);
        }
        match r {
            Ok(Reset::Done { old_task_id }) => self.check_reset_done(c, old_task_id).await?,
            Ok(Reset::NotFound) => {
                self.stats.resets_not_found += 1;
                // Only with no live record (its DELETE may have landed and
                // lost its answer: the retry finds none).
                if c.alone
                    && !c.faulty
                    && let Some((old, _)) = live
                    && old.expires_at > c.now + Duration::seconds(2)
                {
                    return Err(format!(
                        "a reset found no record, but {} was live",
                        old.task_id
                    ));
                }
            }
            Ok(Reset::InProgress { task_id, .. }) => {
                self.stats.resets_refused += 1;
                if c.alone {
                    let Some((old, _)) = live else {
                        return Err(format!(
                            "a reset refused for {task_id}, with no live record"
                        ));
                    };
                    if old.task_id != task_id || old.status != Some(RecordStatus::Creating) {
                        return Err(format!(
                            "a reset refused for {task_id}, but the record was {} {:?}",
                            old.task_id, old.status
                        ));
                    }
                    // Refused only while its task may still be written: at
                    // any age of the record, once its task is there, a reset
                    // goes ahead.
                    if self.get(&old.task_key).await.is_some() {
                        return Err(format!(
                            "a reset refused for {task_id}, whose task is there"
                        ));
                    }
                    if self.record_at(&c.path).await.is_none() {
                        return Err(format!("a refused reset of {} deleted its record", c.path));
                    }
                }
            }
            Ok(Reset::Changed) => {
                if c.alone {
                    return Err(format!("a reset alone met a changed record at {}", c.path));
                }
            }
            Err(SubmitError::Storage(StoreError::Crashed)) if c.crashed => {}
            Err(SubmitError::Storage(StoreError::Unavailable(_) | StoreError::Conflict))
                if c.faulty || c.slow => {}
            Err(SubmitError::DeadlineExceeded) if c.slow => {}
            Err(e) => return Err(format!("a reset failed as the state did not allow: {e:?}")),
        }
        Ok(())
    }

    /// A reset answered `Done`: it forgot the live record it read, left its
    /// reset record at the key, and cancelled no task.
    async fn check_reset_done(&mut self, c: &Ctx, old_task_id: uuid::Uuid) -> Result<(), String> {
        let live = c.live_before();
        self.stats.resets_done += 1;
        let e = self.reset_ended(old_task_id, c.now);
        self.reset_answered.push(e);
        // It forgot the record it read, which was alive.
        if c.alone && live.is_none_or(|(old, _)| old.task_id != old_task_id) {
            return Err(format!(
                "a reset forgot {old_task_id}, but the live record was {:?}",
                live.map(|(old, _)| old.task_id)
            ));
        }
        // The key holds the reset record: never nothing, which a
        // late create-only PUT of the old claim could fill again.
        if c.alone {
            match self.record_at(&c.path).await {
                Some((now_rec, _)) if now_rec.is_reset() && now_rec.task_id == old_task_id => {}
                Some(_) => return Err(format!("a reset of {} left its record", c.path)),
                None => {
                    return Err(format!(
                        "a reset of {} deleted its record: the old claim could come back",
                        c.path
                    ));
                }
            }
        }
        // A reset cancels nothing: the old task stays, if it was written.
        let task_key = live.map(|(old, _)| old.task_key.clone());
        if let Some(task_key) = task_key
            && !self.deleted.contains(&old_task_id)
            && self.ever_written(&task_key)
            && self.get(&task_key).await.is_none()
        {
            return Err(format!("a reset removed the old task {task_key}"));
        }
        Ok(())
    }

    /// The reset record of `task_id`'s record that landed last, if any: when,
    /// and at which change of the bucket (from the history read so far, each
    /// record parsed once).
    fn reset_write(&mut self, task_id: uuid::Uuid) -> Option<(DateTime<Utc>, u64)> {
        self.read_history();
        let writes = self.recorder.writes.lock().unwrap();
        self.records_written
            .iter()
            .rev()
            .find(|(_, r)| r.task_id == task_id && r.is_reset())
            .map(|(i, _)| (writes[*i].at, writes[*i].seq))
    }

    /// The life a reset ended: from its reset record's write where it
    /// landed, else from its answer at `now`.
    fn reset_ended(
        &mut self,
        id: uuid::Uuid,
        now: DateTime<Utc>,
    ) -> (uuid::Uuid, DateTime<Utc>, u64) {
        let (at, seq) = self
            .reset_write(id)
            .unwrap_or((now, self.recorder.changes.load(Ordering::SeqCst)));
        (id, at, seq)
    }

    /// Whether a reset record of the record of `task_id` landed at or after
    /// the change `since`.
    pub(super) fn reset_landed(&mut self, task_id: uuid::Uuid, since: u64) -> bool {
        self.reset_write(task_id)
            .is_some_and(|(_, seq)| seq >= since)
    }

    /// Whether any write of `key` ever landed.
    pub(super) fn ever_written(&self, key: &str) -> bool {
        self.recorder
            .writes
            .lock()
            .unwrap()
            .iter()
            .any(|w| w.key == key)
    }
}

/// Resets the key of `who` as an operator would; under the planted bug
/// `ResetIgnoresPhase`, as a naive reset would: the record read and deleted
/// with `If-Match`, whatever its phase.
pub(super) async fn reset(
    q: &Queue,
    who: Who,
    task_type: u8,
    bug: Option<Bug>,
) -> Result<Reset, SubmitError> {
    if bug != Some(Bug::ResetIgnoresPhase) {
        let key = key_name(who.key);
        return q
            .reset_key(scope_name(who, task_type), &key, tenant_of(who).as_ref())
            .await;
    }
    // The record and its ETag, read as the library reads it.
    let key = key_name(who.key);
    let Some((rec, meta)) = q
        .record(scope_name(who, task_type), &key, tenant_of(who).as_ref())
        .await?
    else {
        return Ok(Reset::NotFound);
    };
    let (path, store) = (record_path(who, task_type), q.engine().store());
    let mut reset = rec.clone();
    let now = q.engine().clock().now().trunc_subsecs(0);
    (reset.expires_at, reset.reset_at) = (now, Some(now));
    (reset.pending_task, reset.pending_input) = (None, None);
    let body = Bytes::from(serde_json::to_vec(&reset).unwrap());
    match store.put(&path, body, PutMode::Update(meta.etag)).await {
        Ok(_) => Ok(Reset::Done {
            old_task_id: rec.task_id,
        }),
        Err(StoreError::PreconditionFailed) => Ok(Reset::Changed),
        Err(StoreError::NotFound) => Ok(Reset::NotFound),
        Err(e) => Err(SubmitError::Storage(e)),
    }
}
