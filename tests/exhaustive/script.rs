//! A world's scripted start: a few steps taken through the gate, as the
//! explorer takes them (each one checked), before the exhaustive walk
//! begins. Where a prelude cannot reach (a state with an actor in flight:
//! a submit whose record's answer was lost, still waiting to retry), a
//! script spends no bound on the steps that lead there.

use super::gate::{self, Fault};
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
        _ => None,
    }
}
