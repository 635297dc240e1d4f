//! The explorer: a depth-first walk over every schedule of a world up to its
//! depth, each schedule replayed from scratch on the real engine (futures
//! cannot be copied), pruning a state already reached at the same depth or
//! shallower (its digest: the bucket, the clock, the queue, the requests in
//! flight and what every actor has read). Iterative deepening finds the
//! shortest counterexample when a guarantee breaks.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::sim::{Choice, Sim, Spec};

/// What one exploration did.
#[derive(Debug, Clone)]
pub struct Report {
    pub world: String,
    /// Distinct states reached.
    pub states: usize,
    /// Schedules walked to their end (the depth, no choice left, or a state
    /// already explored).
    pub schedules: u64,
    /// The deepest schedule.
    pub depth: usize,
    /// Steps run, replays included.
    pub steps: u64,
    pub elapsed: Duration,
    /// The CPU time of the thread that explored (user and system): what the
    /// world costs whatever else shares the cores, where `elapsed` grows
    /// with the machine's load.
    pub cpu: Duration,
    /// The first broken guarantee and the schedule that broke it.
    pub failure: Option<Failure>,
}

#[derive(Debug, Clone)]
pub struct Failure {
    pub message: String,
    /// Its length in steps (the trace also says what each actor answered).
    pub steps: usize,
    pub trace: Vec<String>,
}

impl Report {
    /// One line for `make model-check`.
    pub fn line(&self) -> String {
        format!(
            "{:<58} states {:>7}  schedules {:>8}  depth {:>2}  steps {:>8}  {:>7.1} s  cpu {:>6.1} s",
            self.world,
            self.states,
            self.schedules,
            self.depth,
            self.steps,
            self.elapsed.as_secs_f64(),
            self.cpu.as_secs_f64()
        )
    }

    pub fn trace(&self) -> String {
        match &self.failure {
            None => "no guarantee broke".into(),
            Some(f) => {
                let steps: Vec<String> = f.trace.iter().map(|s| format!("  {s}")).collect();
                format!("{}\n{}", f.message, steps.join("\n"))
            }
        }
    }
}

/// The runtime the actors run in: tokio's clock paused and never advanced,
/// so that a retry's zero backoff is ready at once and no attempt times out
/// (the gate decides what is slow).
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a runtime")
}

/// Every schedule of `spec` up to its depth; stops at the first broken
/// guarantee.
pub fn explore(spec: &Spec) -> Report {
    let rt = runtime();
    let _in = rt.enter();
    let started = Instant::now();
    let cpu = thread_cpu();
    let mut report = Report {
        world: spec.name.to_owned(),
        states: 0,
        schedules: 0,
        depth: 0,
        steps: 0,
        elapsed: Duration::ZERO,
        cpu: Duration::ZERO,
        failure: None,
    };
    let mut visited: HashMap<u64, usize> = HashMap::new();
    let mut stack: Vec<(Vec<usize>, u64)> = vec![(Vec::new(), 0)];
    while let Some(prefix) = stack.pop() {
        if let Err(f) = walk(spec, prefix, &mut visited, &mut stack, &mut report) {
            report.failure = Some(f);
            break;
        }
    }
    report.states = visited.len();
    report.elapsed = started.elapsed();
    report.cpu = thread_cpu().saturating_sub(cpu);
    report
}

/// This thread's CPU time so far (Linux: `/proc/thread-self/stat`'s
/// `utime` and `stime`, in ticks of 10 ms); zero where it cannot be read.
fn thread_cpu() -> Duration {
    let Ok(stat) = std::fs::read_to_string("/proc/thread-self/stat") else {
        return Duration::ZERO;
    };
    // The fields after the command's `)`: the 12th and 13th are utime and
    // stime (fields 14 and 15 of proc(5)).
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let ticks: u64 = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|t| t.parse::<u64>().ok())
        .sum();
    Duration::from_millis(ticks * 10)
}

/// Replays `path`, then goes on by each state's first choice, leaving the
/// others on `stack`, until the schedule ends.
fn walk(
    spec: &Spec,
    (mut path, parent): (Vec<usize>, u64),
    visited: &mut HashMap<u64, usize>,
    stack: &mut Vec<(Vec<usize>, u64)>,
    report: &mut Report,
) -> Result<(), Failure> {
    let mut sim = Sim::new(spec);
    // An actor may end before its first request (a deadline already past):
    // the state before any step is checked too.
    if path.is_empty() {
        super::checks::after_step(&mut sim).map_err(|message| Failure {
            message,
            steps: 0,
            trace: sim.trace.clone(),
        })?;
    }
    for pick in &spec.script {
        let mut taken = 0;
        while let Some(c) = super::script::next(&sim, pick, taken) {
            step(&mut sim, &c, report)?;
            taken += 1;
        }
    }
    for (k, &n) in path.iter().enumerate() {
        // A replay must reach the state the first run branched from.
        if k + 1 == path.len() {
            assert_eq!(sim.digest(), parent, "a replay diverged: {:?}", sim.trace);
        }
        let c = sim.choices().swap_remove(n);
        step(&mut sim, &c, report)?;
    }
    loop {
        report.depth = report.depth.max(path.len());
        let seen = visited.entry(sim.digest()).or_insert(usize::MAX);
        if *seen <= path.len() {
            report.schedules += 1;
            return Ok(());
        }
        *seen = path.len();
        let here = sim.digest();
        let choices = sim.choices();
        // Every operation ends: with nothing left to decide, no actor may
        // still be running (one waiting on something that never comes).
        if let (true, Some(i)) = (choices.is_empty(), sim.stuck()) {
            return Err(Failure {
                message: format!("#{i} never ends: it waits, and nothing is left to happen"),
                steps: sim.step,
                trace: sim.trace.clone(),
            });
        }
        if path.len() >= spec.depth || choices.is_empty() {
            report.schedules += 1;
            return Ok(());
        }
        for n in (1..choices.len()).rev() {
            let mut next = path.clone();
            next.push(n);
            stack.push((next, here));
        }
        path.push(0);
        step(&mut sim, &choices[0], report)?;
    }
}

fn step(sim: &mut Sim, c: &Choice, report: &mut Report) -> Result<(), Failure> {
    report.steps += 1;
    sim.apply(c).map_err(|message| Failure {
        message,
        steps: sim.step,
        trace: sim.trace.clone(),
    })
}

/// The shortest schedule that breaks a guarantee, by exploring every depth
/// from 1 to `spec.depth`; the report of the depth that found it (its time
/// is the whole search's).
pub fn shortest(spec: &Spec) -> Report {
    let started = Instant::now();
    let cpu = thread_cpu();
    let mut last = None;
    for depth in 1..=spec.depth {
        let r = explore(&Spec {
            depth,
            ..spec.clone()
        });
        if r.failure.is_some() {
            return Report {
                elapsed: started.elapsed(),
                cpu: thread_cpu().saturating_sub(cpu),
                ..r
            };
        }
        last = Some(r);
    }
    let mut r = last.unwrap_or_else(|| explore(spec));
    r.elapsed = started.elapsed();
    r.cpu = thread_cpu().saturating_sub(cpu);
    r
}

/// `MODEL_CHECK_DEPTH` deepens every world by that many steps (a negative
/// number makes them shallower: the mutation runs', docs/testing.md).
pub fn deeper() -> i64 {
    std::env::var("MODEL_CHECK_DEPTH")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}
