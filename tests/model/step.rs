use super::*;

/// One submit or reset of a step, and what was true around it: the one
/// context the checker judges an answer in.
pub(super) struct Ctx {
    pub(super) who: Who,
    pub(super) task_type: u8,
    /// A submit's input (0 for a reset).
    pub(super) input: u8,
    /// A submit's `if_task_failed: new_task`.
    pub(super) new_task: bool,
    /// The live record it met named a task that had ended failed or
    /// cancelled.
    pub(super) freed: bool,
    /// Its own record path.
    pub(super) path: String,
    /// The record there when the step began.
    pub(super) before: Option<(Record, ObjectMeta)>,
    pub(super) start: DateTime<Utc>,
    pub(super) now: DateTime<Utc>,
    /// Alone in its step: what the state allowed is known exactly.
    pub(super) alone: bool,
    /// Its store failed requests, or crashed it.
    pub(super) faulty: bool,
    /// Its store let time pass under requests, and lost some.
    pub(super) slow: bool,
    pub(super) crashed: bool,
    /// A write of its landed.
    pub(super) wrote: bool,
    /// A reset's: its reset record of the record it read landed (whatever
    /// it was told).
    pub(super) deleted: bool,
}

/// What a step of steps run together saw before they ran: each one's record
/// path (a submit's, a reset's), the record there, and whether that record
/// was live and named a task that had ended failed or cancelled (what frees
/// its key to `if_task_failed: new_task`).
struct Round {
    paths: Vec<Option<String>>,
    before: Vec<Option<(Record, ObjectMeta)>>,
    freed: Vec<bool>,
    start: DateTime<Utc>,
    alone: bool,
    /// How many changes the bucket had had when the steps began.
    changes: u64,
}

/// What one step of a round did, beside its answer.
struct Ran<'a> {
    step: &'a Step,
    store: &'a FaultyStore<Recorded>,
    crashed: bool,
    faulty: bool,
    slow: bool,
}

impl Model {
    /// Runs `steps` at once, each in a process of its own, then judges each
    /// one's answer against what the state allowed.
    pub(super) async fn run_concurrent(
        &mut self,
        steps: &[Step],
        alone: bool,
    ) -> Result<(), String> {
        let due_mark = self.due_mark();
        let mut round = self.round(steps, alone).await;
        self.note_contention(steps, &round);
        let beside_a_worker = steps.iter().any(|s| matches!(s, Step::Work { .. }));
        if beside_a_worker && steps.len() > 1 {
            self.stats.beside_a_worker += 1;
        }
        // A reset beside submits meets them between their writes: answers
        // take turns to come back, as beside a worker.
        let interleaved = beside_a_worker
            || (steps.len() > 1 && steps.iter().any(|s| matches!(s, Step::Reset { .. })));
        let procs: Vec<Option<(Queue, FaultyStore<Recorded>)>> = steps
            .iter()
            .map(|s| match s {
                Step::Submit { faults, .. }
                | Step::Sweep { faults, .. }
                | Step::Reset { faults, .. } => Some(self.process(faults, interleaved)),
                Step::Deliver { .. } => Some(self.process(&Faults::none(), interleaved)),
                _ => None,
            })
            .collect();
        let work_seed = self.world.clock.now().timestamp() as u64 ^ steps.len() as u64;
        let futs = steps.iter().zip(&procs).map(|(s, p)| {
            let q = p.as_ref().map(|(q, _)| q.clone());
            let (bucket, now) = (self.world.bucket.clone(), self.world.clock.now());
            run_one(s.clone(), q, bucket, now, self.bug, work_seed)
        });
        round.changes = self.recorder.changes.load(Ordering::SeqCst);
        let outcomes = futures::future::join_all(futs).await;
        let now = self.world.clock.now();
        let mut died: Vec<String> = Vec::new();
        for (i, ((step, proc), outcome)) in steps.iter().zip(&procs).zip(outcomes).enumerate() {
            if let Outcome::Work(r) = outcome {
                self.worked(r?)?;
                continue;
            }
            let Some((_, store)) = proc else {
                unreachable!()
            };
            let ran = self.ran(step, store);
            if ran.crashed && matches!(step, Step::Submit { .. }) {
                died.extend(round.paths[i].clone());
            }
            self.judge(&round, i, &ran, outcome, now).await?;
        }
        self.check_due_messages(due_mark, &died)
    }

    /// Reads, before a round runs, the records its submits and resets will
    /// meet.
    async fn round(&self, steps: &[Step], alone: bool) -> Round {
        let start = self.world.clock.now();
        let mut round = Round {
            paths: Vec::new(),
            before: Vec::new(),
            freed: Vec::new(),
            start,
            alone,
            changes: 0,
        };
        for s in steps {
            let path = match s {
                Step::Submit { who, task_type, .. } | Step::Reset { who, task_type, .. } => {
                    Some(record_path(*who, *task_type))
                }
                _ => None,
            };
            let before = match &path {
                Some(p) => self.record_at(p).await,
                None => None,
            };
            round.freed.push(match &before {
                Some((old, _)) if old.expires_at > start && !old.is_reset() => self
                    .task_status(&old.task_key)
                    .await
                    .is_some_and(|s| s == "failed" || s == "cancelled"),
                _ => false,
            });
            round.before.push(before);
            round.paths.push(path);
        }
        round
    }

    /// Counts the rounds where submits of one key meet, and where `new_task`
    /// submits race over one failed task.
    fn note_contention(&mut self, steps: &[Step], round: &Round) {
        let mut racing = HashSet::new();
        let new_tasks = steps.iter().zip(&round.paths).zip(&round.freed);
        if new_tasks
            .filter(|((s, _), f)| matches!(s, Step::Submit { new_task: true, .. }) && **f)
            .filter_map(|((_, p), _)| p.as_ref())
            .any(|p| !racing.insert(p.clone()))
        {
            self.stats.reuse_races += 1;
        }
        let mut seen = HashSet::new();
        if steps
            .iter()
            .zip(&round.paths)
            .filter(|(s, _)| matches!(s, Step::Submit { .. }))
            .filter_map(|(_, p)| p.as_ref())
            .any(|p| !seen.insert(p.clone()))
        {
            self.stats.same_key_contention += 1;
        }
    }

    /// What a step's process met: a crash, lost answers, faults, slowness.
    fn ran<'a>(&mut self, step: &'a Step, store: &'a FaultyStore<Recorded>) -> Ran<'a> {
        let crashed = store.crashed();
        self.stats.crashes += u64::from(crashed);
        self.stats.lost_answers += store
            .calls()
            .iter()
            .filter(|c| {
                c.op.is_write()
                    && c.error == Some(StoreError::Unavailable("reset after landing".into()))
            })
            .count() as u64;
        let (faulty, slow) = match step {
            Step::Submit { faults, .. }
            | Step::Sweep { faults, .. }
            | Step::Reset { faults, .. } => {
                (faults.per_mille > 0 || crashed, faults.slow_per_mille > 0)
            }
            _ => (false, false),
        };
        Ran {
            step,
            store,
            crashed,
            faulty,
            slow,
        }
    }

    /// Judges the `i`th step of `round`, which `ran`, by its outcome.
    async fn judge(
        &mut self,
        round: &Round,
        i: usize,
        ran: &Ran<'_>,
        outcome: Outcome,
        now: DateTime<Utc>,
    ) -> Result<(), String> {
        let clean = match (ran.step, &outcome) {
            (Step::Deliver { .. }, Outcome::Deliver(o)) => !matches!(o, RecordOutcome::Failed(_)),
            (Step::Submit { .. }, Outcome::Submit(r)) => r.is_ok(),
            (Step::Sweep { .. }, Outcome::Sweep(r)) => r.as_ref().is_ok_and(|s| s.errors == 0),
            _ => false,
        };
        self.note_markers(ran.store, clean);
        let ctx = |who, task_type, input, new_task| Ctx {
            who,
            task_type,
            input,
            new_task,
            freed: round.freed[i],
            path: round.paths[i].clone().unwrap(),
            before: round.before[i].clone(),
            start: round.start,
            now,
            alone: round.alone,
            faulty: ran.faulty,
            slow: ran.slow,
            crashed: ran.crashed,
            wrote: ran
                .store
                .calls()
                .iter()
                .any(|c| c.op.is_write() && c.error.is_none()),
            deleted: false,
        };
        match (ran.step, outcome) {
            (Step::Deliver { .. }, Outcome::Deliver(o)) => {
                self.stats.redelivered += 1;
                match o {
                    // A healthy store: nothing to retry but what the
                    // state makes early, and nothing corrupt.
                    RecordOutcome::Corrupt => Err("a record the sweeper read was corrupt".into()),
                    RecordOutcome::Failed(e) if !e.is_retryable() => {
                        Err(format!("a redelivered due message failed: {e:?}"))
                    }
                    _ => Ok(()),
                }
            }
            (
                &Step::Submit {
                    who,
                    input,
                    task_type,
                    new_task,
                    ..
                },
                Outcome::Submit(r),
            ) => self
                .check_submit(&ctx(who, task_type, input, new_task), r)
                .await
                .map_err(|e| format!("{who:?} type {task_type} input {input}: {e}")),
            (&Step::Sweep { dry_run, .. }, Outcome::Sweep(r)) => {
                self.judge_sweep(r, dry_run, ran, round.alone, now).await
            }
            (&Step::Reset { who, task_type, .. }, Outcome::Reset(r)) => {
                // Whatever it was told (a lost answer, a crash after
                // the PUT landed), the record it read is reset.
                let deleted = round.before[i]
                    .as_ref()
                    .is_some_and(|(old, _)| self.reset_landed(old.task_id, round.changes));
                let c = Ctx {
                    deleted,
                    ..ctx(who, task_type, 0, false)
                };
                self.check_reset(&c, r).await
            }
            _ => unreachable!(),
        }
    }

    /// A scheduled pass: fault-free, it fails not, and alone and complete,
    /// it leaves no record it should have finished.
    async fn judge_sweep(
        &mut self,
        r: Result<idempotent_submit::testing::protocol::SweepSummary, SubmitError>,
        dry_run: bool,
        ran: &Ran<'_>,
        alone: bool,
        now: DateTime<Utc>,
    ) -> Result<(), String> {
        if let Ok(s) = &r
            && !dry_run
        {
            self.stats.swept_finished += s.finished;
            self.stats.swept_deleted += s.expired_deleted;
            self.stats.swept_kept += s.expired_kept;
        }
        let clean = !ran.faulty && !ran.slow;
        // A resumed pass does not re-read what it handled before it
        // stopped; those records wait for the next pass.
        if let Ok(s) = &r
            && clean
            && alone
            && s.complete
            && !s.resumed
            && !dry_run
        {
            self.check_swept(now).await?;
        }
        if clean && r.is_err() {
            return Err(format!("a fault-free sweep failed: {r:?}"));
        }
        Ok(())
    }
}

/// Runs one step of a round in its process `q` (a worker's step has none).
async fn run_one(
    s: Step,
    q: Option<Queue>,
    bucket: MemoryStore,
    now: DateTime<Utc>,
    bug: Option<Bug>,
    work_seed: u64,
) -> Outcome {
    match (s, q) {
        (
            Step::Submit {
                who,
                input,
                task_type,
                ttl_hours,
                new_task,
                ..
            },
            Some(q),
        ) => {
            let mut b = q
                .submit(TASK_TYPES[task_type as usize], input_of(who, input))
                .idempotency_key(key_name(who.key))
                .idempotency_ttl(Duration::hours(ttl_hours));
            if new_task {
                b = b.if_task_failed(IfTaskFailed::NewTask);
            }
            b = match who.scope {
                0 => b,
                1 => b.idempotency_scope(Scope::Queue),
                _ => b.idempotency_scope(Scope::parse(Some("shared")).unwrap()),
            };
            if who.tenant > 0 {
                b = b.tenant(TENANTS[who.tenant as usize]);
            }
            Outcome::Submit(b.await)
        }
        (Step::Sweep { dry_run, .. }, Some(q)) => Outcome::Sweep(
            q.engine()
                .sweep(&SweepOptions {
                    dry_run,
                    ..Default::default()
                })
                .await,
        ),
        (Step::Reset { who, task_type, .. }, Some(q)) => {
            Outcome::Reset(reset(&q, who, task_type, bug).await)
        }
        (Step::Work { scan, then }, None) => {
            Outcome::Work(work(bucket, now, scan, then, work_seed).await)
        }
        (
            Step::Deliver {
                who,
                task_type,
                lag,
            },
            Some(q),
        ) => {
            for _ in 0..lag {
                tokio::task::yield_now().await;
            }
            let key = record_path(who, task_type);
            Outcome::Deliver(q.engine().sweep_record(&key, false, None).await)
        }
        _ => unreachable!(),
    }
}
