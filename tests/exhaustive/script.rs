//! A world's scripted start: a few steps taken through the gate, as the
//! explorer takes them (each one checked), before the exhaustive walk
//! begins. Where a prelude cannot reach (a state with an actor in flight:
//! a submit whose record's answer was lost, still waiting to retry), a
//! script spends no bound on the steps that lead there.

use super::gate::{self, Fault};
use idempotent_submit::Clock;

use super::sim::{Choice, Sim, State};

/// One scripted step (or run of steps).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pick {
    /// Actor `n` starts.
    Start(usize),
    /// Actor `n`'s request to a key under this prefix meets this fault.
    Decide(usize, &'static str, Fault),
    /// Every request of actor `n` lands, until it ends.
    Finish(usize),
    /// The clock steps this many seconds on (a clock step of the world's).
    Clock(i64),
    /// Actor `n`'s slow write to a key under this prefix lands now.
    Land(usize, &'static str),
    /// Every request of actor `n` lands until it sends a write to a key
    /// under this prefix (which waits).
    UntilWrite(usize, &'static str),
}

/// The choices that carry out `pick`, one at a time: `None` once it is
/// done. `taken`: how many steps of it were taken already.
pub fn next(sim: &Sim, pick: &Pick, taken: usize) -> Option<Choice> {
    let pending = |n: usize, prefix: &str| {
        gate::lock(&sim.gate.state)
            .pending
            .iter()
            .find(|r| r.actor == n && r.key.starts_with(prefix))
            .map(|r| r.id)
    };
    match pick {
        Pick::Start(n) if taken == 0 => Some(Choice::Start(*n)),
        Pick::Decide(n, prefix, f) if taken == 0 => {
            let id = pending(*n, prefix);
            Some(Choice::Decide(
                id.unwrap_or_else(|| panic!("the script's {pick:?} found no request")),
                *f,
            ))
        }
        Pick::Finish(n) if sim.actors[*n].state == State::Running => {
            let id = pending(*n, "");
            Some(Choice::Decide(
                id.unwrap_or_else(|| panic!("the script's {pick:?} found no request")),
                Fault::Ok,
            ))
        }
        Pick::Clock(secs) if taken == 0 => Some(Choice::Advance(
            sim.clock.now() + chrono::Duration::seconds(*secs),
        )),
        Pick::Land(n, prefix) if taken == 0 => {
            let s = gate::lock(&sim.gate.state);
            let g = s
                .ghosts
                .iter()
                .find(|g| g.request.actor == *n && g.request.key.starts_with(prefix));
            let id = g.map(|g| g.request.id);
            Some(Choice::Land(id.unwrap_or_else(|| {
                panic!("the script's {pick:?} found no slow write")
            })))
        }
        Pick::UntilWrite(n, prefix) => {
            let s = gate::lock(&sim.gate.state);
            let mine: Vec<&gate::Request> = s.pending.iter().filter(|r| r.actor == *n).collect();
            if mine
                .iter()
                .any(|r| r.kind.is_write() && r.key.starts_with(prefix))
            {
                return None;
            }
            let id = mine.first().map(|r| r.id);
            Some(Choice::Decide(
                id.unwrap_or_else(|| panic!("the script's {pick:?} found no request")),
                Fault::Ok,
            ))
        }
        _ => None,
    }
}
