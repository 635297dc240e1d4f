use super::*;

impl Model {
    /// The keys of the ready index's markers, as the bucket lists them.
    pub(super) async fn markers(&self) -> Vec<String> {
        let listed = self.world.bucket.list("ready/", None, None, 10_000);
        let objects = listed.await.unwrap().objects;
        objects.into_iter().map(|m| m.key).collect()
    }

    /// Guarantee 11 over the bucket, after every step: every record that
    /// replaced a failed task (whether or not its submit was answered)
    /// replaced a task that had ended failed or cancelled, which is for
    /// good, and of a record of its own key.
    pub(super) async fn check_reuses(&self) -> Result<(), String> {
        let replaced: Vec<(uuid::Uuid, uuid::Uuid)> = self
            .records_written
            .iter()
            .filter(|(_, r)| !r.is_reset())
            .filter_map(|(_, r)| r.replaces_task_id.map(|old| (old, r.task_id)))
            .collect();
        for (old, new) in replaced {
            if self.deleted.contains(&old) {
                continue;
            }
            let Some((_, rec)) = self.records_written.iter().find(|(_, r)| r.task_id == old) else {
                return Err(format!(
                    "guarantee 11: {new} replaced {old}, which no record named"
                ));
            };
            let status = self.task_status(&rec.task_key).await;
            if !matches!(status.as_deref(), Some("failed" | "cancelled")) {
                return Err(format!(
                    "guarantee 11: {new} replaced {old}, whose task is {status:?}"
                ));
            }
        }
        Ok(())
    }

    /// Whether `body` is, byte for byte, the `pending_task` of the record
    /// that named `id`: the task as its submit wrote it, untouched by any
    /// worker.
    pub(super) async fn untouched(&self, id: uuid::Uuid, body: &[u8]) -> bool {
        self.first_record_write(id)
            .and_then(|(r, _)| r.pending_task)
            .is_some_and(|p| p.get().as_bytes() == body)
    }

    /// Guarantee 10, after every step: every marker in the bucket names a
    /// task that a worker can claim from it: `pending`, and available in
    /// that minute. Exempt: markers whose last writer of ours did not end
    /// cleanly (it may have died before its re-read; the next finisher of
    /// the record checks them), markers of tasks the queue deleted, and a
    /// marker whose task was never created (a submit that died between its
    /// two writes and was never finished).
    pub(super) async fn check_index(&self) -> Result<(), String> {
        for m in self.markers().await {
            let parts: Vec<&str> = m.split('/').collect();
            let id: uuid::Uuid = parts[3].parse().unwrap();
            if self.unsure_markers.contains(&m) || self.deleted.contains(&id) {
                continue;
            }
            let Some(task) = self.get(&format!("tasks/{}/{id}.json", parts[1])).await else {
                continue;
            };
            let t: Value = serde_json::from_slice(&task.body).unwrap();
            let minute = time_of(&t["available_at"]).map(marker_minute);
            if t["status"] != "pending" || minute != parts[2].parse().ok() {
                return Err(format!(
                    "guarantee 10: the marker {} names a task the queue cannot claim from it: {} available at {}",
                    m, t["status"], t["available_at"]
                ));
            }
        }
        Ok(())
    }

    /// The end of a schedule: the sweeper is up and the store healthy long
    /// enough for every record event to arrive. Then every task whose submit
    /// was finished in time, and that no worker has touched, has its marker
    /// (the ready index's liveness).
    pub(super) async fn epilogue(&mut self) -> Result<(), String> {
        self.advance(self.settings.finish_window + Duration::minutes(16), false)
            .await?;
        let tasks = self
            .world
            .bucket
            .list("tasks/", None, None, 10_000)
            .await
            .unwrap()
            .objects;
        let markers: HashSet<String> = self.markers().await.into_iter().collect();
        for meta in tasks {
            let id = task_id_of(&meta.key);
            let task = self.get(&meta.key).await.ok_or("a listed task is gone")?;
            if !self.finished.contains(&id) || !self.untouched(id, &task.body).await {
                continue;
            }
            let t: Value = serde_json::from_slice(&task.body).unwrap();
            let marker = marker_of(&t).ok_or("a task without a place")?;
            if !markers.contains(&marker) {
                return Err(format!(
                    "liveness: {id} was finished and no worker touched it, but {marker} is not in the index"
                ));
            }
        }
        Ok(())
    }

    /// Guarantee 4 for the scheduled pass: after a clean, complete pass,
    /// every `creating` record between staleness and its finish deadline is
    /// finished: its task object is there and, while no worker has touched
    /// the task, its marker too.
    pub(super) async fn check_swept(&self, now: DateTime<Utc>) -> Result<(), String> {
        let page = self
            .world
            .bucket
            .list("idempotency/", None, None, 10_000)
            .await
            .unwrap();
        for meta in page.objects {
            let o = self.world.bucket.get(&meta.key).await.unwrap();
            let rec = Record::parse(&o.body).unwrap();
            let age = now - meta.last_modified;
            if rec.status == Some(RecordStatus::Creating)
                && !rec.is_expired(now)
                && age >= self.settings.stale_creating_after
                // Less a second: the sweeper knows S3's clock to a second
                // (whole-second Dates) and judges "past the deadline" by its
                // latest possible time, so in the last second it leaves the
                // record rather than risk a late write.
                && age < self.settings.finish_window - Duration::seconds(1)
                && !self.deleted.contains(&rec.task_id)
            {
                let Some(task) = self.get(&rec.task_key).await else {
                    return Err(format!(
                        "{} has no task after a clean sweep (age {age})",
                        meta.key
                    ));
                };
                let t: Value = serde_json::from_slice(&task.body).unwrap();
                let marker = marker_of(&t).ok_or("a task without a place")?;
                if self.untouched(rec.task_id, &task.body).await
                    && self.get(&marker).await.is_none()
                {
                    return Err(format!(
                        "{} has no marker after a clean sweep (age {age})",
                        meta.key
                    ));
                }
            }
        }
        Ok(())
    }
}
