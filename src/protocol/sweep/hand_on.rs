//! How a scheduled pass hands its rest on to other invocations: the
//! message and the trait the engine holds (apart from the share's code, so
//! that the engine can name them without importing the code that uses it).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// The message that hands the rest of a pass on to another invocation: the
/// pass it continues, named by the instant it began. A continuation never
/// opens a pass: one that finds its pass over (or another one) does nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Continuation {
    /// The pass's instant (its window's upper end).
    pub sweep_pass: DateTime<Utc>,
}

/// Where continuations go: the `sweep` function's pass queue (SQS), or a
/// bench's or a test's stand-in that starts an invocation for each.
#[async_trait]
pub trait HandOn: Send + Sync {
    /// Sends every continuation; an error says why they may not all have
    /// gone (the pass then waits for the shares still live, a redelivery,
    /// or the next scheduled run).
    async fn hand_on(&self, continuations: &[Continuation]) -> Result<(), String>;
}
