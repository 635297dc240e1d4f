//! How a scheduled pass hands the rest of its work on: a [`Continuation`]
//! per free slot, through a [`HandOn`] (the `sweep` function's pass queue,
//! or a bench's or a test's stand-in). Apart from `share.rs`, so that the
//! engine can hold a hand-on without importing the pass.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// The message that hands the rest of a pass on to another invocation: the
/// pass it continues, named by the instant it began, and the invitation
/// that holds its slot and a range in the pass's checkpoint. A continuation
/// never opens a pass: one that finds its pass over (or another one) does
/// nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Continuation {
    /// The pass's instant (its window's upper end).
    pub sweep_pass: DateTime<Utc>,
    /// The invitation it takes up (`None`: a message of an earlier
    /// version, which claims as any continuation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invite: Option<uuid::Uuid>,
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
