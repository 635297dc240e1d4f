use super::*;

// ---- running a schedule ----

/// One answered submit: its own record path, what it sent, what it got.
pub(super) struct Answer {
    pub(super) path: String,
    pub(super) task_id: uuid::Uuid,
    pub(super) start: DateTime<Utc>,
    pub(super) end: DateTime<Utc>,
}

/// The functions' machines' clock: S3's (the model's `ManualClock`) less
/// `behind`.
#[derive(Clone)]
pub(super) struct MachineClock {
    pub(super) s3: ManualClock,
    pub(super) behind: Arc<Mutex<Duration>>,
}

impl Clock for MachineClock {
    fn now(&self) -> DateTime<Utc> {
        self.s3.now() - *self.behind.lock().unwrap()
    }
}

/// The model's state: the world it runs in and what the checker has seen.
pub(super) struct Model {
    /// S3's clock (`world.clock`: every time the checker notes or compares
    /// is S3's, as the records' `LastModified` are) and the bucket.
    pub(super) world: common::World,
    /// The clock the protocol runs on.
    pub(super) machine: MachineClock,
    pub(super) recorder: Recorder,
    pub(super) settings: Settings,
    /// The bug planted in every process's store and engine settings.
    pub(super) bug: Option<Bug>,
    pub(super) answers: Vec<Answer>,
    pub(super) sends: Arc<Mutex<Sends>>,
    /// Tasks the queue deleted.
    pub(super) deleted: HashSet<uuid::Uuid>,
    /// Resets answered `Done`: the record's task id, when, and how many
    /// changes the bucket had had by then.
    pub(super) reset_answered: Vec<(uuid::Uuid, DateTime<Utc>, u64)>,
    /// Every claim a worker made: (task, attempt).
    pub(super) claims: HashSet<(uuid::Uuid, u64)>,
    /// Markers last written by a process of ours that did not end cleanly.
    pub(super) unsure_markers: HashSet<String>,
    /// Tasks whose submit was finished before its deadline: answered, or
    /// handled by its record's event on time.
    pub(super) finished: HashSet<uuid::Uuid>,
    pub(super) stats: Stats,
    /// `RECORD_EVENTS=submitter` (Step::SubmitterSends).
    pub(super) submitter: bool,
    /// And `DUE_MESSAGE=with_claim`: the window of a record whose send
    /// failed is allowed (counted), not an error.
    pub(super) with_claim: bool,
    /// Every send of a due message: its record, what the queue did.
    pub(super) due_log: Arc<Mutex<Vec<(String, Sent)>>>,
    /// The records of the recorder's writes read so far, each with its
    /// write's place: the history only grows, and `check_history` runs after
    /// every step, so each record is parsed once, not once a step.
    pub(super) records_written: Vec<(usize, Record)>,
}

pub(super) enum Outcome {
    Deliver(RecordOutcome),
    Submit(Result<idempotent_submit::Submitted, SubmitError>),
    Sweep(Result<idempotent_submit::protocol::SweepSummary, SubmitError>),
    Work(Result<Worked, String>),
    Reset(Result<Reset, SubmitError>),
}

impl Model {
    pub(super) fn new(bug: Option<Bug>, profile: Profile) -> Self {
        let clock = ManualClock::at_epoch();
        let machine = MachineClock {
            s3: clock.clone(),
            behind: Arc::default(),
        };
        // The bucket stands `behind` ahead of the machines: its time (and so
        // its LastModified and Date) is the model's clock.
        let machine_clock = Arc::new(machine.clone()) as Arc<dyn Clock>;
        let bucket = if profile.versioned {
            MemoryStore::versioned(machine_clock)
        } else {
            MemoryStore::new(machine_clock)
        }
        .with_behaviour(profile.behaviour);
        let mut settings = common::settings();
        settings.conditional_delete = profile.conditional_delete;
        settings.list_order = profile.list_order;
        settings.retry.attempt_timeout = std::time::Duration::from_millis(50);
        let recorder = Recorder {
            inner: bucket.clone(),
            clock: clock.clone(),
            writes: Arc::default(),
            events: Arc::default(),
            delay: Arc::new(Mutex::new(fastrand::Rng::with_seed(7))),
            stale: settings.stale_creating_after,
            bucket_events: Arc::new(AtomicBool::new(true)),
            deleting: Arc::default(),
            changes: Arc::default(),
        };
        Model {
            world: common::World::over(clock, bucket),
            machine,
            recorder,
            settings,
            bug,
            answers: Vec::new(),
            sends: Arc::default(),
            deleted: HashSet::new(),
            reset_answered: Vec::new(),
            claims: HashSet::new(),
            unsure_markers: HashSet::new(),
            finished: HashSet::new(),
            stats: Stats::default(),
            submitter: false,
            with_claim: false,
            records_written: Vec::new(),
            due_log: Arc::default(),
        }
    }

    pub(super) fn process(
        &self,
        f: &Faults,
        beside_a_worker: bool,
    ) -> (Queue, FaultyStore<Recorded>) {
        let store = FaultyStore::new(common::Wrapped(self.recorder.clone()));
        if let Some((n, after)) = f.crash_at {
            store.at_call(
                n,
                if after {
                    Fault::CrashAfter
                } else {
                    Fault::CrashBefore
                },
            );
        }
        if f.per_mille > 0 {
            store.random_faults(
                f.seed,
                f.per_mille,
                vec![
                    common::unavailable("503 SlowDown"),
                    Fault::Fail(StoreError::Conflict),
                    Fault::FailAfter(StoreError::Unavailable("reset after landing".into())),
                    common::unavailable("500"),
                ],
            );
        }
        let first_record_put = self.submitter.then(Arc::default);
        let slow = Slow {
            first_record_put: first_record_put.clone(),
            inner: store.clone(),
            clock: self.world.clock.clone(),
            rng: Arc::new(Mutex::new(fastrand::Rng::with_seed(f.seed ^ 0x51_0e))),
            per_mille: f.slow_per_mille,
            sends: self.sends.clone(),
            turns: beside_a_worker
                .then(|| Arc::new(Mutex::new(fastrand::Rng::with_seed(f.seed ^ 0x7u64)))),
        };
        let planted = Planted {
            inner: common::Wrapped(slow),
            bug: self.bug,
            first_body: self.recorder.first_body(),
            armed: Arc::default(),
        };
        let q = Queue::with_clock(
            common::Wrapped(planted),
            Arc::new(self.machine.clone()),
            planted::engine_settings(self.bug, &self.settings),
        );
        match self.due_sender(f, &store, first_record_put) {
            Some(sender) => {
                let order = if self.with_claim {
                    DueOrder::WithClaim
                } else {
                    DueOrder::BeforeClaim
                };
                (q.with_due_sender_ordered(sender, BUCKET, order), store)
            }
            None => (q, store),
        }
    }

    pub(super) async fn get(&self, key: &str) -> Option<Object> {
        self.world.bucket.get(key).await.ok()
    }

    pub(super) async fn record_at(&self, path: &str) -> Option<(Record, ObjectMeta)> {
        let o = self.get(path).await?;
        Some((Record::parse(&o.body).unwrap(), o.meta))
    }

    pub(super) fn record_first_sent(&self, id: uuid::Uuid) -> Option<DateTime<Utc>> {
        self.sends
            .lock()
            .unwrap()
            .record_first_sent
            .get(&id)
            .copied()
    }

    /// When the first write of the record naming `id` landed.
    pub(super) fn record_first_landed(&self, id: uuid::Uuid) -> Option<DateTime<Utc>> {
        self.recorder
            .writes
            .lock()
            .unwrap()
            .iter()
            .filter(|w| w.key.starts_with("idempotency/"))
            .find(|w| Record::parse(&w.body).is_ok_and(|r| r.task_id == id))
            .map(|w| w.at)
    }

    pub(super) async fn run_step(&mut self, step: &Step) -> Result<(), String> {
        match step {
            Step::Advance { secs, sweeper_down } => {
                self.advance(Duration::seconds(*secs), *sweeper_down).await
            }
            Step::NearDeadline {
                who,
                task_type,
                before_secs,
            } => {
                let now = self.world.clock.now();
                if let Some((rec, meta)) = self.record_at(&record_path(*who, *task_type)).await
                    && rec.status == Some(RecordStatus::Creating)
                {
                    let to = meta.last_modified + self.settings.finish_window
                        - Duration::seconds(*before_secs);
                    if to > now {
                        return self.advance(to - now, true).await;
                    }
                }
                Ok(())
            }
            Step::DeleteTask { who, task_type } => {
                let now = self.world.clock.now();
                if let Some((rec, _)) = self.record_at(&record_path(*who, *task_type)).await
                    && let Some(task) = self.get(&rec.task_key).await
                    && task.meta.last_modified + Duration::hours(1) <= now
                {
                    self.world.bucket.delete(&rec.task_key, None).await.unwrap();
                    self.deleted.insert(rec.task_id);
                    self.stats.task_deletions += 1;
                }
                Ok(())
            }
            Step::Cancel { who, task_type } => self.cancel(*who, *task_type).await,
            Step::ClockStepped { secs } => {
                let behind = Duration::seconds(*secs);
                *self.machine.behind.lock().unwrap() = behind;
                self.world.bucket.set_skew(behind);
                Ok(())
            }
            Step::Submit { .. }
            | Step::Sweep { .. }
            | Step::Work { .. }
            | Step::Deliver { .. }
            | Step::Reset { .. } => self.run_concurrent(std::slice::from_ref(step), true).await,
            Step::Together(steps) => self.run_concurrent(steps, false).await,
            Step::SubmitterSends { with_claim } => {
                self.submitter = true;
                self.with_claim = *with_claim;
                self.recorder.bucket_events.store(false, Ordering::SeqCst);
                Ok(())
            }
        }
    }

    /// buquet 0.1's `cancel` of the task of this key's record: only a
    /// `pending` task, by a compare-and-swap, then its marker deleted.
    pub(super) async fn cancel(&mut self, who: Who, task_type: u8) -> Result<(), String> {
        let Some((rec, _)) = self.record_at(&record_path(who, task_type)).await else {
            return Ok(());
        };
        let Some(obj) = self.get(&rec.task_key).await else {
            return Ok(());
        };
        let mut t: Value = serde_json::from_slice(&obj.body).map_err(|e| e.to_string())?;
        if t["status"] != "pending" {
            return Ok(());
        }
        let marker = marker_of(&t).ok_or("a task without a place")?;
        let stamp = json!(rfc3339::format(&self.world.clock.now()));
        t["status"] = json!("cancelled");
        t["cancelled_at"] = stamp.clone();
        t["updated_at"] = stamp;
        let body = Bytes::from(serde_json::to_vec(&t).unwrap());
        match self
            .world
            .bucket
            .put(&rec.task_key, body, PutMode::Update(obj.meta.etag))
            .await
        {
            Ok(_) => {}
            Err(StoreError::PreconditionFailed) => return Ok(()),
            Err(e) => return Err(format!("cancelling {}: {e}", rec.task_key)),
        }
        match self.world.bucket.delete(&marker, None).await {
            Ok(()) | Err(StoreError::NotFound) => {}
            Err(e) => return Err(format!("deleting {marker}: {e}")),
        }
        self.stats.cancelled += 1;
        Ok(())
    }

    /// The status of the task object at `task_key`, if it is there.
    pub(super) async fn task_status(&self, task_key: &str) -> Option<String> {
        let task = self.get(task_key).await?;
        let t: Value = serde_json::from_slice(&task.body).ok()?;
        t["status"].as_str().map(str::to_owned)
    }

    /// Lets `by` pass, delivering each record event when it falls due
    /// (unless the sweeper is down).
    pub(super) async fn advance(&mut self, by: Duration, sweeper_down: bool) -> Result<(), String> {
        let start = self.world.clock.now();
        let end = start + by;
        if sweeper_down {
            self.world.clock.set(end);
            return Ok(());
        }
        loop {
            let next = {
                let mut events = self.recorder.events.lock().unwrap();
                events.sort_by_key(|e| e.due);
                match events.first() {
                    Some(e) if e.due <= end => Some(events.remove(0)),
                    _ => None,
                }
            };
            let Some(event) = next else { break };
            // An event that fell due while an earlier step held the clock
            // (a slow request) reaches the sweeper late.
            let on_time = event.due >= start;
            if on_time {
                self.world.clock.set(event.due);
            } else {
                self.stats.event_late += 1;
            }
            self.deliver(&event, on_time).await?;
        }
        self.world.clock.set(end);
        Ok(())
    }

    /// The sweeper handles one record event, with a healthy store. On time,
    /// guarantee 4: a `creating` record is finished (its task object, and
    /// its marker while no worker has touched the task), and not rewritten.
    pub(super) async fn deliver(&mut self, event: &Event, on_time: bool) -> Result<(), String> {
        let (q, store) = self.process(&Faults::none(), false);
        let before = self.record_at(&event.key).await;
        let outcome = match &event.message {
            None => q.engine().sweep_record(&event.key, false, None).await,
            Some((body, _)) => self.take_message(&q, body).await?,
        };
        // A submitter's message names the record, not a write: one sent
        // after the record was written (a replay's, a conflict's) may find
        // it past its deadline.
        let after_record = matches!((&event.message, &before),
            (Some((_, sent)), Some((_, meta))) if meta.last_modified < *sent);
        let now = self.world.clock.now();
        self.note_markers(&store, !matches!(outcome, RecordOutcome::Failed(_)));
        match &outcome {
            RecordOutcome::Finished => self.stats.event_finished += 1,
            RecordOutcome::Nothing => self.stats.event_checked += 1,
            RecordOutcome::Early => {
                // A newer write of the record has its own event; this one
                // comes back after the visibility timeout anyway.
                self.recorder.events.lock().unwrap().push(Event {
                    key: event.key.clone(),
                    due: now + Duration::seconds(720),
                    message: event.message.clone(),
                });
            }
            RecordOutcome::PastDeadline if !on_time || after_record => {}
            RecordOutcome::ExpiredDeleted | RecordOutcome::ExpiredKept => {}
            other => {
                return Err(format!(
                    "guarantee 4: the sweeper's event for {} at {now} ended {other:?} (record before: {:?})",
                    event.key,
                    before.map(|(r, m)| (r.status, m.last_modified))
                ));
            }
        }
        if matches!(outcome, RecordOutcome::Finished | RecordOutcome::Nothing)
            && let Some((rec, meta)) = before
            && rec.status == Some(RecordStatus::Creating)
            && !rec.is_expired(now)
        {
            let (after, meta_after) = self
                .record_at(&event.key)
                .await
                .ok_or("a finished record is gone")?;
            if meta_after.etag != meta.etag || after.task_id != rec.task_id {
                return Err(format!(
                    "{} was rewritten by its event: a record is written once",
                    event.key
                ));
            }
            if self.get(&rec.task_key).await.is_none() {
                return Err(format!(
                    "guarantee 4: {} has no task after its event",
                    event.key
                ));
            }
            if on_time && now < meta.last_modified + self.settings.finish_window {
                self.finished.insert(rec.task_id);
            }
        }
        Ok(())
    }
}
