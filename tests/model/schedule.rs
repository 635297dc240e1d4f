use super::*;

// ---- the schedule ----

#[derive(Debug, Clone)]
pub(super) struct Faults {
    /// Crash at this call (1-based) of the process; after it took effect or before.
    pub(super) crash_at: Option<(usize, bool)>,
    pub(super) per_mille: u32,
    /// Share of calls (per mille) that take long: the clock moves 1 s to
    /// 15 min while they are under way, and half of them never land.
    pub(super) slow_per_mille: u32,
    pub(super) seed: u64,
}

impl Faults {
    pub(super) fn none() -> Self {
        Faults {
            crash_at: None,
            per_mille: 0,
            slow_per_mille: 0,
            seed: 0,
        }
    }

    /// These faults' seed, crashing at call `at` (after it took effect or
    /// before), and nothing else failing or slow.
    pub(super) fn only_crash(&self, at: usize, after: bool) -> Self {
        Faults {
            crash_at: Some((at, after)),
            per_mille: 0,
            slow_per_mille: 0,
            ..self.clone()
        }
    }
}

/// Whose key: (tenant, scope, key). Tenant 0 is none; scope 0 is the task
/// type, 1 the `queue` scope, 2 a custom scope shared by both task types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct Who {
    pub(super) tenant: u8,
    pub(super) scope: u8,
    pub(super) key: u8,
}

#[derive(Debug, Clone)]
pub(super) enum Step {
    Submit {
        who: Who,
        input: u8,
        task_type: u8,
        ttl_hours: i64,
        /// `if_task_failed: new_task`: a key whose task failed or was
        /// cancelled is claimed for a new task.
        new_task: bool,
        faults: Faults,
    },
    Sweep {
        dry_run: bool,
        faults: Faults,
    },
    Together(Vec<Step>),
    /// Time passes; the sweeper's record events that fall due on the way are
    /// delivered when they do, unless the sweeper is down: then they wait,
    /// and reach it late.
    Advance {
        secs: i64,
        sweeper_down: bool,
    },
    /// With the sweeper down, time passes until `before_secs` before the
    /// finish deadline of this key's record, if it is `creating` and that is
    /// still ahead: the band where late writes and refusals happen.
    NearDeadline {
        who: Who,
        task_type: u8,
        before_secs: i64,
    },
    /// The queue deletes the task of this key's current record, if that task
    /// is older than an hour.
    DeleteTask {
        who: Who,
        task_type: u8,
    },
    /// The queue's client cancels the task of this key's current record,
    /// as buquet 0.1's `cancel` does: a GET, and if the task is `pending`,
    /// a compare-and-swap to `cancelled`, then the delete of its marker.
    Cancel {
        who: Who,
        task_type: u8,
    },
    /// The due message of this key's record reaches the sweeper now, `lag`
    /// turns into the step (SQS delivers at least once: a message comes
    /// again, late, beside the key's next submit).
    Deliver {
        who: Who,
        task_type: u8,
        lag: u8,
    },
    /// A worker of the queue, as buquet 0.1's behaves, claims one pending,
    /// available task that it finds by its marker (oldest minute first) or,
    /// with `scan` or when no marker leads to a claim, by listing `tasks/`:
    /// a compare-and-swap from pending to running, then it deletes the
    /// claimed version's marker; then it runs it to `then`.
    Work {
        scan: bool,
        then: Then,
    },
    /// The functions' machines' clock is stepped: from now on it stands
    /// `secs` behind S3's (ahead when negative), within the 60 s allowed.
    /// S3's clock, in which the checker judges, runs on undisturbed.
    ClockStepped {
        secs: i64,
    },
    /// A key reset on purpose (`Queue::reset_key`, `DELETE
    /// /idempotency-keys/{key}`), with faults: its record is replaced by a
    /// reset record unless a task may still be written for it.
    Reset {
        who: Who,
        task_type: u8,
        faults: Faults,
    },
    /// From here on `RECORD_EVENTS=submitter`: the bucket sends no events,
    /// and every submit sends its record's due message itself, one more
    /// request, which can land, fail, be lost, or land with its answer lost
    /// (generated first, in some schedules). `with_claim`: `DUE_MESSAGE=with_claim`
    /// (the message beside the record's PUT), else `before_claim` (accepted
    /// before it), the default.
    SubmitterSends {
        with_claim: bool,
    },
}

/// What a worker does with the task it claimed.
#[derive(Debug, Clone, Copy)]
pub(super) enum Then {
    Complete,
    /// Fails it: pending again `secs` later, with a new marker in that
    /// minute (or failed for good once its retries are spent).
    Retry {
        secs: i64,
    },
    /// Reschedules it `secs` later, with a new marker in that minute.
    Reschedule {
        secs: i64,
    },
    /// Fails it for good at once, as buquet's worker does on a permanent
    /// error (`TaskError::Permanent`): `failed`, no marker.
    Fail,
}

pub(super) fn gen_work(rng: &mut fastrand::Rng) -> Step {
    Step::Work {
        scan: rng.u8(..100) < 30,
        then: match rng.u8(..100) {
            0..=54 => Then::Complete,
            55..=79 => Then::Retry {
                secs: rng.i64(1..120),
            },
            80..=91 => Then::Reschedule {
                secs: rng.i64(1..600),
            },
            _ => Then::Fail,
        },
    }
}

pub(super) fn gen_faults(rng: &mut fastrand::Rng) -> Faults {
    Faults {
        crash_at: (rng.u8(..100) < 15).then(|| (rng.usize(1..6), rng.bool())),
        per_mille: if rng.u8(..100) < 30 {
            rng.u32(50..300)
        } else {
            0
        },
        slow_per_mille: if rng.u8(..100) < 30 {
            rng.u32(100..500)
        } else {
            0
        },
        seed: rng.u64(..),
    }
}

pub(super) fn gen_who(rng: &mut fastrand::Rng) -> Who {
    Who {
        tenant: if rng.u8(..100) < 75 { 0 } else { rng.u8(1..3) },
        scope: match rng.u8(..100) {
            0..=69 => 0,
            70..=84 => 1,
            _ => 2,
        },
        key: rng.u8(..3),
    }
}

pub(super) fn gen_submit(rng: &mut fastrand::Rng) -> Step {
    Step::Submit {
        who: gen_who(rng),
        input: if rng.u8(..100) < 85 { 0 } else { 1 },
        task_type: if rng.u8(..100) < 85 { 0 } else { 1 },
        ttl_hours: [1, 2, 720][rng.usize(..3)],
        new_task: rng.u8(..100) < 25,
        faults: gen_faults(rng),
    }
}

/// Concurrent steps run without slow requests: in this single-threaded
/// simulation the clock is global, so one request's lag would move time
/// under the others between their deadline check and their send, something a
/// real process (which signs right after checking) does not see, and would let
/// their writes land later than S3's 15-minute signature limit allows.
pub(super) fn without_lag(mut step: Step) -> Step {
    if let Step::Submit { faults, .. } | Step::Sweep { faults, .. } | Step::Reset { faults, .. } =
        &mut step
    {
        faults.slow_per_mille = 0;
    }
    step
}

pub(super) fn gen_schedule(seed: u64, len: usize) -> Vec<Step> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut steps: Vec<Step> = (0..len)
        .flat_map(|_| match rng.u8(..100) {
            0..=36 => vec![gen_submit(&mut rng)],
            37..=39 => {
                let Step::Submit {
                    who,
                    task_type,
                    faults,
                    ..
                } = gen_submit(&mut rng)
                else {
                    unreachable!()
                };
                vec![Step::Reset {
                    who,
                    task_type,
                    faults,
                }]
            }
            40..=54 => vec![gen_together(&mut rng)],
            55..=64 => vec![Step::Sweep {
                dry_run: rng.u8(..100) < 10,
                faults: gen_faults(&mut rng),
            }],
            65..=67 => gen_deadline_band(&mut rng),
            68..=69 => gen_worker_race(&mut rng),
            70..=73 => vec![gen_work(&mut rng)],
            74..=76 => gen_failed_key(&mut rng),
            77..=92 => vec![Step::Advance {
                secs: match rng.u8(..100) {
                    0..=49 => rng.i64(1..700),
                    50..=84 => rng.i64(600..3600),
                    _ => rng.i64(3600..3 * 86400),
                },
                sweeper_down: rng.u8(..100) < 20,
            }],
            93..=95 => vec![Step::ClockStepped {
                secs: if rng.u8(..100) < 20 {
                    0
                } else {
                    rng.i64(-58..=58)
                },
            }],
            _ => vec![Step::DeleteTask {
                who: gen_who(&mut rng),
                task_type: if rng.u8(..100) < 85 { 0 } else { 1 },
            }],
        })
        .collect();
    // Half the schedules run on a bucket that sends no events (a draw of
    // its own: the steps are the bucket's schedule's).
    let mut draw = fastrand::Rng::with_seed(seed ^ 0xd0e5);
    if draw.bool() {
        steps.insert(
            0,
            Step::SubmitterSends {
                with_claim: draw.bool(),
            },
        );
    }
    steps.truncate(len);
    steps
}

/// Steps together, often of the same key, so that submits contend for it:
/// beside a sweep, a worker, the key's due message again, or its reset.
fn gen_together(rng: &mut fastrand::Rng) -> Step {
    let first = gen_submit(rng);
    let Step::Submit { who, .. } = first else {
        unreachable!()
    };
    let first_step = first.clone();
    let mut steps = vec![without_lag(first)];
    for _ in 0..rng.usize(1..3) {
        let mut next = gen_submit(rng);
        if let Step::Submit { who: w, .. } = &mut next
            && rng.bool()
        {
            *w = who;
        }
        match rng.u8(..100) {
            0..=19 => {
                next = Step::Sweep {
                    dry_run: false,
                    faults: gen_faults(rng),
                }
            }
            20..=44 => next = gen_work(rng),
            // The key's due message again, beside its submit (no draw of
            // its own: the schedules around it stay as they were).
            d @ 45..=54 => {
                if let Step::Submit { task_type, .. } = first_step {
                    next = Step::Deliver {
                        who,
                        task_type,
                        lag: d % 4,
                    };
                }
            }
            // A reset of the key beside its submits.
            55..=62 => {
                if let Step::Submit { task_type, .. } = gen_submit(rng) {
                    next = Step::Reset {
                        who,
                        task_type: if rng.bool() { 0 } else { task_type },
                        faults: gen_faults(rng),
                    }
                }
            }
            _ => {}
        }
        steps.push(without_lag(next));
    }
    Step::Together(steps)
}

/// `submit` (a `Step::Submit`) with `faults` instead of its own.
fn with_faults(submit: &Step, faults: Faults) -> Step {
    let mut s = submit.clone();
    if let Step::Submit { faults: f, .. } = &mut s {
        *f = faults;
    }
    s
}

/// The deadline band: a submit dies after its record, the sweeper misses
/// it, and a slow retry comes shortly before the deadline.
fn gen_deadline_band(rng: &mut fastrand::Rng) -> Vec<Step> {
    let first = gen_submit(rng);
    let Step::Submit {
        who,
        task_type,
        ref faults,
        ..
    } = first
    else {
        unreachable!()
    };
    let dies = faults.only_crash(1, true);
    let slow = Faults {
        crash_at: None,
        per_mille: 0,
        slow_per_mille: rng.u32(300..900),
        seed: rng.u64(..),
    };
    // Sometimes an operator resets the key while it is in flight: refused,
    // since its task may still be written.
    let reset = rng.u8(..100) < 30;
    let mut steps = vec![with_faults(&first, dies)];
    if reset {
        steps.push(Step::Reset {
            who,
            task_type,
            faults: Faults::none(),
        });
    }
    steps.extend([
        Step::NearDeadline {
            who,
            task_type,
            before_secs: rng.i64(1..900),
        },
        with_faults(&first, slow),
    ]);
    steps
}

/// The worker's race: a submit dies after its task, before its marker; its
/// replay and a worker that finds the task by listing `tasks/` then meet.
fn gen_worker_race(rng: &mut fastrand::Rng) -> Vec<Step> {
    let first = gen_submit(rng);
    let Step::Work { then, .. } = gen_work(rng) else {
        unreachable!()
    };
    let Step::Submit { faults, .. } = &first else {
        unreachable!()
    };
    let dies = faults.only_crash(3, false);
    vec![
        with_faults(&first, dies),
        Step::Together(vec![
            with_faults(&first, Faults::none()),
            Step::Work { scan: true, then },
        ]),
    ]
}

/// A failed task's key: a submit, its task failed by a worker (a permanent
/// error; the worker takes the oldest task it finds, which may be another
/// key's) or cancelled by the queue's client; then submits of the key race,
/// most of them `new_task`, beside another worker's step at times.
fn gen_failed_key(rng: &mut fastrand::Rng) -> Vec<Step> {
    let first = gen_submit(rng);
    let Step::Submit { who, task_type, .. } = first else {
        unreachable!()
    };
    let ended = if rng.bool() {
        Step::Work {
            scan: rng.bool(),
            then: Then::Fail,
        }
    } else {
        Step::Cancel { who, task_type }
    };
    let mut racing = Vec::new();
    for _ in 0..rng.usize(1..4) {
        let mut next = gen_submit(rng);
        if let Step::Submit {
            who: w,
            task_type: t,
            new_task,
            ..
        } = &mut next
        {
            (*w, *t) = (who, task_type);
            *new_task = rng.u8(..100) < 80;
        }
        racing.push(without_lag(next));
    }
    if rng.u8(..100) < 20 {
        racing.push(gen_work(rng));
    }
    vec![first, ended, Step::Together(racing)]
}

pub(super) const TASK_TYPES: [&str; 2] = ["pay", "mail"];
pub(super) const TENANTS: [&str; 3] = ["", "arn:aws:iam::1:role/alice", "arn:aws:iam::1:role/bob"];

pub(super) fn key_name(k: u8) -> String {
    format!("key-{k}")
}

pub(super) fn input_of(who: Who, input: u8) -> Value {
    json!({"key": who.key, "v": input})
}

pub(super) fn tenant_of(who: Who) -> Option<Tenant> {
    (who.tenant > 0).then(|| Tenant::from_principal(TENANTS[who.tenant as usize]).unwrap())
}

pub(super) fn scope_name(who: Who, task_type: u8) -> &'static str {
    match who.scope {
        0 => TASK_TYPES[task_type as usize],
        1 => "queue",
        _ => "shared",
    }
}

/// The record path of a submit: its own (tenant, scope, key).
pub(super) fn record_path(who: Who, task_type: u8) -> String {
    let scope = scope_name(who, task_type);
    let k = IdempotencyKey::parse(key_name(who.key)).unwrap();
    let hash = key_hash(scope, &k, tenant_of(who).as_ref());
    format!(
        "idempotency/{scope}/{}.json",
        hash.trim_start_matches("sha256:")
    )
}

pub(super) fn task_id_of(key: &str) -> uuid::Uuid {
    key.rsplit('/')
        .next()
        .unwrap_or("")
        .trim_end_matches(".json")
        .parse()
        .unwrap_or_default()
}
