use super::*;

// ---- the submitter's due messages (RECORD_EVENTS=submitter) ----

/// The bucket the submitters' due messages name.
pub(super) const BUCKET: &str = "model-bucket";

/// What became of one send of a due message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Sent {
    Queued,
    /// Queued, but its answer was lost: the sender sees a timeout.
    AnswerLost,
    /// Refused or failed (a 503, access denied): not queued.
    Failed,
    /// Lost in flight: not queued; the sender sees a timeout.
    Lost,
    /// A retry of a process that had died: it never left.
    Dead,
}

/// A process's first record PUT: sent, answered.
#[derive(Debug, Default)]
pub(super) struct FirstRecordPut {
    pub(super) sent: bool,
    pub(super) answered: bool,
}

/// One process's client of the due queue: a send leaves only while the
/// process is alive. (The engine sends the first beside the process's first
/// record PUT, in the same round; `Slow` lets it leave before that PUT.) A
/// queued message reaches the sweeper with the record events, the queue's
/// delay (`STALE_CREATING_AFTER_SECONDS`) plus up to 20 s of polling after
/// it was sent.
pub(super) struct ModelDue {
    pub(super) process: FaultyStore<Recorded>,
    pub(super) first_record_put: Arc<Mutex<FirstRecordPut>>,
    pub(super) clock: ManualClock,
    pub(super) events: Arc<Mutex<Vec<Event>>>,
    pub(super) log: Arc<Mutex<Vec<(String, Sent)>>>,
    pub(super) rng: Mutex<fastrand::Rng>,
    /// Share of sends (per mille) that meet a fault of the queue.
    pub(super) per_mille: u32,
    pub(super) delay: Duration,
    pub(super) bug: Option<Bug>,
    pub(super) sends: AtomicUsize,
}

impl ModelDue {
    pub(super) fn send_one(&self, m: &RecordDue) -> Result<(), SendError> {
        let alive = !self.process.crashed();
        let at = self.clock.now();
        let mut rng = self.rng.lock().unwrap();
        let sent = if !alive {
            Sent::Dead
        } else if rng.u32(0..1000) < self.per_mille {
            [Sent::AnswerLost, Sent::Failed, Sent::Failed, Sent::Lost][rng.usize(..4)]
        } else {
            Sent::Queued
        };
        if matches!(sent, Sent::Queued | Sent::AnswerLost) {
            self.events.lock().unwrap().push(Event {
                key: m.key.clone(),
                due: at + self.delay + Duration::seconds(rng.i64(0..=20)),
                message: Some((m.to_body(), at)),
            });
        }
        self.log.lock().unwrap().push((m.key.clone(), sent));
        match sent {
            Sent::Queued => Ok(()),
            Sent::Failed if rng.bool() => Err(SendError::Refused("AccessDenied".into())),
            Sent::Failed => Err(SendError::Unavailable("503".into())),
            Sent::AnswerLost => Err(SendError::Unavailable("timed out, but queued".into())),
            Sent::Lost => Err(SendError::Unavailable("timed out, never queued".into())),
            Sent::Dead => Err(SendError::Unavailable("the process is dead".into())),
        }
    }
}

#[async_trait]
impl DueSender for ModelDue {
    async fn send(&self, messages: &[RecordDue]) -> Vec<Result<(), SendError>> {
        let first = self.sends.fetch_add(1, Ordering::SeqCst) == 0;
        if first && self.bug == Some(Bug::DueAfterRecord) {
            // The planted bug: the first message waits for the record PUT's
            // answer.
            for _ in 0..10_000 {
                if self.first_record_put.lock().unwrap().answered {
                    break;
                }
                tokio::task::yield_now().await;
            }
        }
        messages.iter().map(|m| self.send_one(m)).collect()
    }
}

impl Model {
    /// A process's client of the due queue, under `RECORD_EVENTS=submitter`.
    /// Some processes meet a queue that fails one send in ten to nine in ten.
    pub(super) fn due_sender(
        &self,
        f: &Faults,
        process: &FaultyStore<Recorded>,
        first_record_put: Option<Arc<Mutex<FirstRecordPut>>>,
    ) -> Option<ModelDue> {
        let first_record_put = first_record_put?;
        let mut rng = fastrand::Rng::with_seed(f.seed ^ 0xd0e5_5e4d);
        let per_mille = if f.seed != 0 && rng.u8(..100) < 35 {
            rng.u32(100..900)
        } else {
            0
        };
        Some(ModelDue {
            process: process.clone(),
            first_record_put,
            clock: self.world.clock.clone(),
            events: self.recorder.events.clone(),
            log: self.due_log.clone(),
            rng: Mutex::new(rng),
            per_mille,
            delay: self.settings.stale_creating_after,
            bug: self.bug,
            sends: AtomicUsize::new(0),
        })
    }

    /// Where the write history and the due queue's log stand.
    pub(super) fn due_mark(&self) -> (usize, usize) {
        (
            self.recorder.writes.lock().unwrap().len(),
            self.due_log.lock().unwrap().len(),
        )
    }

    /// Guarantee 4's premise under `RECORD_EVENTS=submitter`, after each
    /// step: every record that landed in it has a due message waiting in the
    /// queue (its own, sent beside its PUT, or an earlier one still on its
    /// way: either reaches the sweeper after the record's write, and the
    /// sweeper's outcomes are checked when it does), unless a send of it
    /// failed at the queue and none landed: the one window docs/protocol.md
    /// names (the send failed, then the process died), which a replay closes.
    /// `died`: the record paths of the step's submits that crashed.
    pub(super) fn check_due_messages(
        &mut self,
        (writes, sends): (usize, usize),
        died: &[String],
    ) -> Result<(), String> {
        if !self.submitter {
            return Ok(());
        }
        let log = self.due_log.lock().unwrap()[sends..].to_vec();
        for (_, sent) in &log {
            match sent {
                Sent::Queued => self.stats.due_queued += 1,
                Sent::AnswerLost => {
                    self.stats.due_queued += 1;
                    self.stats.due_answer_lost += 1;
                }
                Sent::Failed => self.stats.due_failed += 1,
                Sent::Lost => self.stats.due_lost += 1,
                Sent::Dead => {}
            }
        }
        let landed: std::collections::BTreeSet<String> = self.recorder.writes.lock().unwrap()
            [writes..]
            .iter()
            // A reset record owes no due message: nothing is finished for
            // it, and the scheduled pass deletes it once it may.
            .filter(|w| {
                w.key.starts_with("idempotency/")
                    && !Record::parse(&w.body).is_ok_and(|r| r.is_reset())
            })
            .map(|w| w.key.clone())
            .collect();
        for key in landed {
            let waiting = self
                .recorder
                .events
                .lock()
                .unwrap()
                .iter()
                .any(|e| e.key == key && e.message.is_some());
            let failed = log
                .iter()
                .any(|(k, s)| *k == key && matches!(s, Sent::Failed | Sent::Lost));
            if waiting {
                self.stats.due_died_after_record += u64::from(died.contains(&key));
            } else if !self.with_claim {
                // before_claim: a record lands only after the queue took
                // its message, so none is ever without one.
                return Err(format!(
                    "guarantee 4 (before_claim): the record {key} landed, but no due message for it is in the queue"
                ));
            } else if failed && died.contains(&key) {
                self.stats.due_window += 1;
            } else if failed {
                self.stats.due_unsent += 1;
            } else {
                return Err(format!(
                    "guarantee 4: the record {key} landed, but no due message for it is in the queue, and no send of it failed at the queue"
                ));
            }
        }
        Ok(())
    }

    /// The sweeper takes one submitter's message from the due queue as the
    /// function does (`lambda::due`: the one parser, the due path's 2 s
    /// tolerance, the hand-back of an early one), and what its summary says
    /// became of the record.
    pub(super) async fn take_message(
        &mut self,
        q: &Queue,
        body: &str,
    ) -> Result<RecordOutcome, String> {
        let m = DueMessage {
            id: "m1".into(),
            body: body.into(),
        };
        let batch = due::handle_messages(q, BUCKET, &[m], false, None).await;
        let s = &batch.summary;
        // A message that finds no record while its claim may still land is
        // handed back as an early one is.
        let early = s.early + s.no_record_yet;
        let outcome = match (s.scanned, s.finished, early, s.expired_deleted, s.errors) {
            (1, 1, 0, 0, 0) => RecordOutcome::Finished,
            (1, 0, 1, 0, 0) => RecordOutcome::Early,
            (1, 0, 0, 1, 0) => RecordOutcome::ExpiredDeleted,
            (1, 0, 0, 0, 1) if s.past_deadline == 1 => RecordOutcome::PastDeadline,
            (1, 0, 0, 0, 0) => RecordOutcome::Nothing,
            _ => {
                return Err(format!(
                    "the sweeper did not take a submitter's due message ({body}) as one record: {s:?}"
                ));
            }
        };
        let early = outcome == RecordOutcome::Early;
        if batch.retry.is_empty() == early {
            return Err(format!(
                "a due message ended {outcome:?}, handed back: {:?}",
                batch.retry
            ));
        }
        match outcome {
            RecordOutcome::Early => self.stats.due_early += 1,
            RecordOutcome::Nothing => {
                self.stats.due_checked += 1;
                self.stats.due_no_record += s.due_no_record;
            }
            RecordOutcome::Finished => self.stats.due_finished += 1,
            _ => {}
        }
        Ok(outcome)
    }
}
