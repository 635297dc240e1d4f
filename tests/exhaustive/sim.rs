//! One run of a world, step by step: the bucket, the clock, the gate, the
//! actors, and the choices open at each step. A schedule is the list of
//! choices taken; the same schedule replayed from scratch reaches the same
//! state (the ids come from the actors' own counters, the store's ETags and
//! version ids from its write count, and no actor waits on a timer).

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use chrono::{DateTime, Duration, Utc};
use idempotent_submit::store::MemoryStore;
use idempotent_submit::store::memory::Behaviour;
use idempotent_submit::testing::protocol::names::set_id_source;
use idempotent_submit::{Clock, ListOrder, ManualClock, Settings};

use super::actors::{self, Events, Outcome, Role, Running};
use super::gate::{self, Fault, GateState, GateStore};
use super::prelude::Prelude;
use crate::model::planted::Bug;

/// The store behaviours the protocol supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    /// AWS S3 (general purpose, unversioned).
    S3,
    /// S3 Express One Zone: random ETags, listings in no order
    /// (`LIST_ORDER=any`).
    Express,
    /// A versioned bucket with `CONDITIONAL_DELETE=off` (If-Match ignored
    /// on DELETE, as MinIO does).
    VersionedNoConditionalDelete,
}

/// A world: its actors, its store, its bounds.
#[derive(Debug, Clone)]
pub struct Spec {
    pub name: &'static str,
    pub store: StoreKind,
    pub events: Events,
    pub actors: Vec<Role>,
    /// Faults (lost answers, 503, 409, slow) one schedule may meet.
    pub faults: u32,
    /// Crashes one schedule may meet (each a fault too).
    pub crashes: u32,
    /// Whether slow writes are among the faults.
    pub slow: bool,
    /// Clock steps one schedule may take.
    pub advances: u32,
    /// Scheduled passes one schedule may start.
    pub passes: u32,
    /// Due messages are delivered to the sweeper.
    pub deliver: bool,
    /// The longest schedule.
    pub depth: usize,
    /// Actors start when the explorer chooses (a submit after expiry);
    /// otherwise all at once, at the start.
    pub late_starts: bool,
    /// Check the documented limits too (docs/protocol.md names each with
    /// its shortest trace): a replay past the finish deadline answering a
    /// task whose marker never landed.
    pub limits: bool,
    pub bug: Option<Bug>,
    /// What the bucket holds before the first step.
    pub prelude: Prelude,
    /// How far the functions' machines' clock stands behind S3's, in
    /// seconds (S3's answers carry its `Date`; the engine learns the
    /// offset from them).
    pub skew: i64,
    /// `VALIDATE_INPUT_SCHEMAS`, and task type `t`'s schema (published
    /// after the prelude) refuses every input the worlds send.
    pub schema: Schema,
    /// Steps taken first, as the script says (`script.rs`), before the
    /// walk: the depth counts from after them.
    pub script: Vec<super::script::Pick>,
}

/// Task type `t`'s input schema, checked (`VALIDATE_INPUT_SCHEMAS=on`)
/// and published after the prelude, or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Schema {
    /// `VALIDATE_INPUT_SCHEMAS=off`.
    Off,
    /// A schema that refuses every input the worlds send.
    RefusesAll,
    /// A schema that accepts inputs up to this number and refuses the
    /// others (`{"n": …}` with a `maximum`).
    AcceptsUpTo(u8),
}

impl Schema {
    /// The schema refuses input number `input`.
    pub fn refuses(self, input: u8) -> bool {
        match self {
            Schema::Off => false,
            Schema::RefusesAll => true,
            Schema::AcceptsUpTo(n) => input > n,
        }
    }
}

/// The functions' machines' clock: S3's (the explorer's) less `behind`.
#[derive(Clone)]
pub struct Machine {
    pub s3: ManualClock,
    pub behind: Duration,
}

impl Clock for Machine {
    fn now(&self) -> DateTime<Utc> {
        self.s3.now() - self.behind
    }
}

/// One choice of a schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choice {
    /// The actor starts (its first requests reach the gate).
    Start(usize),
    /// A request waiting at the gate meets `Fault`.
    Decide(u64, Fault),
    /// A slow write lands now.
    Land(u64),
    /// The queue hands its `n`th visible message to a new sweeper.
    Deliver(usize),
    /// A scheduled pass starts.
    Pass,
    /// The clock moves to this instant.
    Advance(DateTime<Utc>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum State {
    Waiting,
    Running,
    Done,
    Crashed,
}

pub struct Actor {
    pub role: Role,
    pub run: Option<Running>,
    pub state: State,
    /// The steps it started and ended at.
    pub span: (usize, usize),
    pub started_at: DateTime<Utc>,
    /// It met a fault (a storage error is then a fair answer).
    pub faulted: bool,
    /// It met a 409, which the engine retries (guarantee 9): no fault of
    /// ours, but buquet's worker's (it does not retry).
    pub met_409: bool,
    /// S3's time when it first heard an answer (the reset's promise
    /// judges a submit by its first answer).
    pub first_heard: Option<DateTime<Utc>>,
    pub outcome: Option<Outcome>,
}

/// The ids of each actor: (actor, n) as a UUID, so that a replay makes the
/// same ones.
#[derive(Default)]
struct Ids {
    current: usize,
    next: HashMap<usize, u64>,
}

pub struct Sim {
    pub spec: Spec,
    pub settings: Settings,
    pub clock: ManualClock,
    pub bucket: MemoryStore,
    pub gate: GateStore,
    pub actors: Vec<Actor>,
    pub step: usize,
    pub faults: u32,
    pub crashes: u32,
    pub advances: u32,
    pub passes: u32,
    pub trace: Vec<String>,
    pub checks: super::checks::Checks,
    ids: Rc<RefCell<Ids>>,
}

pub fn settings(kind: StoreKind) -> Settings {
    let mut s = crate::common::settings();
    // A record lives an hour, the shortest life: expiry is one step away.
    s.default_ttl = Duration::hours(1);
    match kind {
        StoreKind::S3 => {}
        StoreKind::Express => s.list_order = ListOrder::Any,
        StoreKind::VersionedNoConditionalDelete => s.conditional_delete = false,
    }
    s
}

/// The bucket, on the machines' clock set `behind` S3's: its
/// `LastModified` and its answers' dates are S3's time.
fn bucket(kind: StoreKind, machine: &Machine) -> MemoryStore {
    let c = Arc::new(machine.clone()) as Arc<dyn Clock>;
    let b = match kind {
        StoreKind::S3 => MemoryStore::new(c),
        StoreKind::Express => MemoryStore::new(c).with_behaviour(Behaviour::s3_express(7)),
        StoreKind::VersionedNoConditionalDelete => {
            MemoryStore::versioned(c).with_behaviour(Behaviour::minio())
        }
    };
    b.set_skew(machine.behind);
    b
}

impl Sim {
    pub fn new(spec: &Spec) -> Self {
        let clock = ManualClock::at_epoch();
        let machine = Machine {
            s3: clock.clone(),
            behind: Duration::seconds(spec.skew),
        };
        let bucket = bucket(spec.store, &machine);
        let mut settings = settings(spec.store);
        settings.validate_input_schemas = spec.schema != Schema::Off;
        let state = GateState {
            s3_events: spec.events == Events::S3,
            queue_delay: settings.stale_creating_after,
            ..GateState::default()
        };
        let gate = GateStore {
            state: Arc::new(std::sync::Mutex::new(state)),
            inner: bucket.clone(),
            clock: clock.clone(),
            machine,
        };
        let ids = Rc::new(RefCell::new(Ids::default()));
        let source = ids.clone();
        set_id_source(Some(Box::new(move || {
            let mut ids = source.borrow_mut();
            let actor = ids.current;
            let n = ids.next.entry(actor).or_default();
            *n += 1;
            let mut bytes = [0u8; 16];
            bytes[..8].copy_from_slice(&(actor as u64 + 1).to_be_bytes());
            bytes[8..].copy_from_slice(&n.to_be_bytes());
            uuid::Builder::from_random_bytes(bytes).into_uuid()
        })));
        let mut sim = Sim {
            spec: spec.clone(),
            settings,
            clock,
            bucket,
            gate,
            actors: Vec::new(),
            step: 0,
            faults: 0,
            crashes: 0,
            advances: 0,
            passes: 0,
            trace: Vec::new(),
            checks: super::checks::Checks::default(),
            ids,
        };
        super::prelude::run(&mut sim, spec.prelude);
        if spec.schema != Schema::Off {
            super::prelude::publish_schema(&sim.bucket, spec.schema);
        }
        super::checks::observe(&mut sim);
        for role in &spec.actors {
            let i = sim.add(role.clone());
            if !spec.late_starts {
                sim.launch(i);
            }
        }
        sim.settle();
        sim
    }

    fn add(&mut self, role: Role) -> usize {
        self.actors.push(Actor {
            role,
            run: None,
            state: State::Waiting,
            span: (0, 0),
            started_at: self.clock.now(),
            faulted: false,
            met_409: false,
            first_heard: None,
            outcome: None,
        });
        self.actors.len() - 1
    }

    fn launch(&mut self, i: usize) {
        let q = actors::queue(&self.gate, &self.settings, self.spec.events, self.spec.bug);
        let run = actors::start(&self.actors[i].role, q, self.gate.clone(), self.spec.bug);
        let a = &mut self.actors[i];
        a.run = Some(run);
        a.state = State::Running;
        a.span = (self.step, self.step);
        a.started_at = self.clock.now();
    }

    /// An actor still running though nothing waits at the gate for it.
    pub fn stuck(&self) -> Option<usize> {
        self.actors.iter().position(|a| a.state == State::Running)
    }

    /// Every choice open now, in a fixed order.
    pub fn choices(&self) -> Vec<Choice> {
        let mut out = Vec::new();
        for (i, a) in self.actors.iter().enumerate() {
            if a.state == State::Waiting {
                out.push(Choice::Start(i));
            }
        }
        let s = gate::lock(&self.gate.state);
        let faults_left = self.faults < self.spec.faults;
        let crash_left = faults_left && self.crashes < self.spec.crashes;
        for r in &s.pending {
            out.push(Choice::Decide(r.id, Fault::Ok));
            if !faults_left {
                continue;
            }
            // A read's 503 is only retried: its crashes are what a read adds.
            let mut fs = Vec::new();
            if r.kind.is_write() {
                fs.extend([Fault::Unavailable, Fault::Lost]);
                if self.spec.slow {
                    fs.push(Fault::Slow);
                }
            }
            if r.kind.conditional() {
                fs.push(Fault::Conflict);
            }
            if crash_left {
                fs.extend([Fault::CrashBefore, Fault::CrashAfter]);
            }
            out.extend(fs.into_iter().map(|f| Choice::Decide(r.id, f)));
        }
        out.extend(s.ghosts.iter().map(|g| Choice::Land(g.request.id)));
        let now = self.clock.now();
        if self.spec.deliver {
            for (n, m) in s.queue.iter().enumerate() {
                if m.visible <= now {
                    out.push(Choice::Deliver(n));
                }
            }
        }
        drop(s);
        if self.passes < self.spec.passes {
            out.push(Choice::Pass);
        }
        if self.advances < self.spec.advances {
            // Every boundary to come, and a second before the next one.
            let bs = self.boundaries();
            if let Some(b) = bs.first().map(|b| *b - Duration::seconds(1))
                && b > now
            {
                out.push(Choice::Advance(b));
            }
            out.extend(bs.into_iter().map(Choice::Advance));
        }
        out
    }

    /// The instants to come at which something the protocol judges by
    /// time changes, in order: a record's staleness, finish deadline, late-write margin
    /// and expiry; a message's visibility; a slow write's last chance; a
    /// running actor's operation deadline.
    pub fn boundaries(&self) -> Vec<DateTime<Utc>> {
        let now = self.clock.now();
        let st = &self.settings;
        let mut times = Vec::new();
        for (key, body, _, lm) in self.bucket.snapshot() {
            if !key.starts_with("idempotency/") {
                continue;
            }
            let mut record = vec![
                lm + st.stale_creating_after,
                lm + st.finish_window,
                lm + st.finish_window + st.late_write_margin,
            ];
            record.extend(super::checks::time_field(&body, "expires_at"));
            // With the machines' clocks off S3's, each boundary moved by
            // that offset too: where a process that took the offset the
            // wrong way round (a sign flipped) sees it already: past a
            // deadline with the machines behind, at expiry with them ahead.
            let off = Duration::seconds(self.spec.skew);
            if self.spec.skew != 0 {
                record.extend(record.clone().into_iter().map(|t| t + off));
            }
            times.extend(record);
        }
        // An input payload's orphan age, where a scheduled pass may come
        // (the pass judges a payload by it), and a second before it.
        if self.spec.passes > 0 {
            let orphan = super::payloads::orphan_after(st);
            for (key, .., lm) in self.bucket.snapshot() {
                if key.starts_with("payloads/") {
                    times.extend([lm + orphan - Duration::seconds(1), lm + orphan]);
                }
            }
        }
        let s = gate::lock(&self.gate.state);
        times.extend(s.queue.iter().map(|m| m.visible));
        times.extend(s.ghosts.iter().map(|g| g.sent + st.late_write_margin));
        drop(s);
        for a in &self.actors {
            if a.state == State::Running {
                times.push(a.started_at + st.operation_timeout);
            }
        }
        let mut times: Vec<DateTime<Utc>> = times.into_iter().filter(|t| *t > now).collect();
        times.sort();
        times.dedup();
        times
    }

    /// Takes `c`, runs every actor as far as it goes, and checks every
    /// guarantee.
    pub fn apply(&mut self, c: &Choice) -> Result<(), String> {
        self.step += 1;
        let what = format!("{:>2}. {}", self.step, self.describe(c));
        self.trace.push(what);
        match c {
            Choice::Start(i) => self.launch(*i),
            Choice::Decide(id, f) => self.decide(*id, *f),
            Choice::Land(id) => self.land(*id),
            Choice::Deliver(n) => {
                let m = gate::lock(&self.gate.state).queue.remove(*n);
                let i = self.add(Role::Sweep(m));
                self.launch(i);
            }
            Choice::Pass => {
                self.passes += 1;
                let i = self.add(Role::Pass);
                self.launch(i);
            }
            Choice::Advance(t) => {
                self.advances += 1;
                self.time_out_in_flight();
                self.clock.set(*t);
                let margin = self.settings.late_write_margin;
                gate::lock(&self.gate.state)
                    .ghosts
                    .retain(|g| g.sent + margin > *t);
            }
        }
        self.settle();
        super::checks::after_step(self)
    }

    fn decide(&mut self, id: u64, f: Fault) {
        let mut s = gate::lock(&self.gate.state);
        let Some(r) = s.pending.iter().find(|r| r.id == id).cloned() else {
            return;
        };
        if f != Fault::Ok {
            self.faults += 1;
            let a = &mut self.actors[r.actor];
            if f == Fault::Conflict && !a.role.is_workers() {
                a.met_409 = true;
            } else {
                a.faulted = true;
            }
        }
        if f.is_crash() {
            self.crashes += 1;
        }
        if f == Fault::Slow {
            let sent = r.sent;
            s.ghosts.push(gate::Ghost { request: r, sent });
        }
        s.decide(id, f);
    }

    /// The clock jumps while requests are in flight: each attempt times
    /// out, and a write among them may still land, up to the late-write
    /// margin after it was sent.
    fn time_out_in_flight(&mut self) {
        let ids: Vec<(u64, usize, bool)> = gate::lock(&self.gate.state)
            .pending
            .iter()
            .map(|r| (r.id, r.actor, r.kind.is_write()))
            .collect();
        for (id, actor, write) in ids {
            self.actors[actor].faulted = true;
            let mut s = gate::lock(&self.gate.state);
            if write {
                if let Some(r) = s.pending.iter().find(|r| r.id == id).cloned() {
                    let sent = r.sent;
                    s.ghosts.push(gate::Ghost { request: r, sent });
                }
                s.decide(id, Fault::Slow);
            } else {
                s.decide(id, Fault::Unavailable);
            }
        }
    }

    fn land(&mut self, id: u64) {
        let mut s = gate::lock(&self.gate.state);
        let Some(n) = s.ghosts.iter().position(|g| g.request.id == id) else {
            return;
        };
        let g = s.ghosts.remove(n);
        drop(s);
        now_or_never(self.gate.land(&g));
    }

    /// Polls every running actor once: each goes on until it waits at the
    /// gate again or ends. One that died at a request is dropped.
    fn settle(&mut self) {
        for i in 0..self.actors.len() {
            if self.actors[i].state != State::Running {
                continue;
            }
            gate::lock(&self.gate.state).current = i;
            self.ids.borrow_mut().current = i;
            let polled = match self.actors[i].run.as_mut() {
                Some(run) => run.as_mut().poll(&mut Context::from_waker(Waker::noop())),
                None => continue,
            };
            let heard = gate::lock(&self.gate.state).heard.contains_key(&i);
            if heard && self.actors[i].first_heard.is_none() {
                self.actors[i].first_heard = Some(self.clock.now());
            }
            let died = {
                let mut s = gate::lock(&self.gate.state);
                let died = s.crashed.contains(&i);
                if died {
                    s.forget(i);
                }
                died
            };
            let a = &mut self.actors[i];
            if died {
                a.state = State::Crashed;
                a.run = None;
                a.span.1 = self.step;
                self.requeue_after_crash(i);
            } else if let Poll::Ready(o) = polled {
                a.state = State::Done;
                a.run = None;
                a.span.1 = self.step;
                a.outcome = Some(o);
                let answered = format!("      #{i} answered {:?}", a.outcome);
                self.trace.push(answered);
                self.requeue_if_handed_back(i);
            }
        }
    }

    /// A sweeper that died leaves its message in the queue, to come again.
    fn requeue_after_crash(&mut self, i: usize) {
        if let Role::Sweep(m) = &self.actors[i].role {
            let now = self.clock.now();
            let m = gate::Message {
                visible: now,
                ..m.clone()
            };
            gate::lock(&self.gate.state).queue.push(m);
        }
    }

    /// A message the sweeper handed back comes again.
    fn requeue_if_handed_back(&mut self, i: usize) {
        let a = &self.actors[i];
        if let (Role::Sweep(m), Some(Outcome::Swept(o))) = (&a.role, &a.outcome)
            && o.try_again_later()
        {
            let m = gate::Message {
                visible: self.clock.now(),
                ..m.clone()
            };
            gate::lock(&self.gate.state).queue.push(m);
        }
    }

    fn describe(&self, c: &Choice) -> String {
        let t = (self.clock.now() - DateTime::UNIX_EPOCH).num_seconds();
        let s = gate::lock(&self.gate.state);
        let what = match c {
            Choice::Start(i) => format!("start #{i} {:?}", self.actors[*i].role),
            Choice::Decide(id, f) => match s.pending.iter().find(|r| r.id == *id) {
                Some(r) => format!("#{} {:?} {} -> {f:?}", r.actor, r.kind, r.key),
                None => format!("request {id} -> {f:?}"),
            },
            Choice::Land(id) => match s.ghosts.iter().find(|g| g.request.id == *id) {
                Some(g) => format!(
                    "#{} {:?} {} lands late",
                    g.request.actor, g.request.kind, g.request.key
                ),
                None => format!("request {id} lands late"),
            },
            Choice::Deliver(n) => format!("deliver {:?}", s.queue.get(*n)),
            Choice::Pass => "scheduled pass".into(),
            Choice::Advance(to) => {
                format!("clock to {} s", (*to - DateTime::UNIX_EPOCH).num_seconds())
            }
        };
        format!("t={t}s {what}")
    }

    /// A digest of everything that decides what can happen next: the
    /// bucket (every version), the clock, the queue, the requests in
    /// flight, each actor's role, state and every answer it read, and the
    /// budgets spent.
    pub fn digest(&self) -> u64 {
        let mut h = DefaultHasher::new();
        self.clock.now().hash(&mut h);
        for (k, b, e, lm) in self.bucket.snapshot() {
            (k, b, e.0, lm).hash(&mut h);
        }
        for k in self.bucket.keys_with_versions() {
            (format!("{:?}", self.bucket.versions(&k)), k).hash(&mut h);
        }
        let s = gate::lock(&self.gate.state);
        s.queue.hash(&mut h);
        for r in &s.pending {
            (r.actor, r.kind, &r.key, r.sent).hash(&mut h);
        }
        for g in &s.ghosts {
            (g.request.actor, g.request.kind, &g.request.key, g.sent).hash(&mut h);
        }
        for (i, a) in self.actors.iter().enumerate() {
            (&a.role, a.state, a.started_at, s.heard.get(&i)).hash(&mut h);
        }
        (self.faults, self.crashes, self.advances, self.passes).hash(&mut h);
        h.finish()
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        // Futures hold the engine's clones of the gate: drop them first.
        for a in &mut self.actors {
            a.run = None;
        }
        set_id_source(None);
    }
}

/// Polls `f` once: the in-memory store answers at once.
pub fn now_or_never<F: std::future::Future>(f: F) -> Option<F::Output> {
    let mut f = std::pin::pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => Some(v),
        Poll::Pending => None,
    }
}
