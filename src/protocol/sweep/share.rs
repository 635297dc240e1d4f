//! One invocation's share of a scheduled pass: [`Engine::sweep_share`].
//!
//! A pass is one logical pass however many invocations work it. Each
//! invocation claims a share of the pass's ranges in `sweeper/checkpoint.json`
//! (a lease, by compare-and-swap on the checkpoint's ETag), lists it, and
//! releases what it did not finish back to the pool, with its counts. While
//! it has time it claims again. When it ends with ranges left in the pool
//! (its deadline came) it *hands the rest on*: one [`Continuation`] per free
//! slot of `PASS_CONCURRENCY`, through a [`HandOn`] (the `sweep` function's
//! pass queue on SQS). An invocation that found the pass alone fans it out:
//! as soon as it holds more ranges than it lists at once, it gives them back
//! and hands on the other slots' continuations, so the pass spreads over
//! `PASS_CONCURRENCY` invocations within its first seconds.
//!
//! Without a hand-on (a user who did not wire the pass queue, `idem sweep`,
//! the tests) an invocation works alone until the pass is done or its
//! deadline comes; what is left waits in the checkpoint for the next
//! scheduled run, as before continuations existed.

use async_trait::async_trait;
use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

use super::checkpoint::{Checkpoint, Claim};
use super::{CHECKPOINT_KEY, SweepOptions, SweepSummary};
use crate::config::ListOrder;
use crate::protocol::engine::{Engine, Failure};
use crate::protocol::error::SubmitError;
use crate::store::{ETag, PutMode, StoreError};

/// How many times a change to the checkpoint is tried again after another
/// invocation changed it first (a 412): the shares of one pass write it
/// about twice an invocation each, so a few suffice.
const CAS_ATTEMPTS: usize = 16;

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

/// What one invocation's share of a pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShareOutcome {
    /// This invocation's own counts. `complete` says that the pass ended in
    /// it; `busy` that it found nothing to take (every slot held, or what
    /// was left held).
    pub summary: SweepSummary,
    /// The continuations this invocation handed on (sent or not).
    pub handed_on: Vec<Continuation>,
    /// The pass's one summary, merged over every share, when the pass ended
    /// in this invocation.
    pub pass: Option<SweepSummary>,
    /// Shares of the pass (over all its invocations) and the most held at
    /// once, when the pass ended in this invocation.
    pub pass_shares: Option<(u64, u64)>,
    /// The pass's length in S3's time, from its start to its end, when the
    /// pass ended in this invocation.
    pub pass_length: Option<Duration>,
}

/// The checkpoint as this invocation last read or wrote it.
#[derive(Default)]
struct Held {
    cp: Option<Checkpoint>,
    etag: Option<ETag>,
    /// `cp` is what the store holds, as far as this invocation knows.
    known: bool,
}

/// What one claim found: the claim, the pass's window, and whether it was
/// an unfinished pass (not one this claim opened).
type Found = (Claim, (Option<DateTime<Utc>>, DateTime<Utc>), bool);

impl Engine {
    /// Runs one invocation's share of the scheduled pass (see the module
    /// docs): claims ranges, lists them, releases them, hands the rest on
    /// through `hand_on` when its deadline comes, and completes the pass
    /// (the ready index's scan, the orphan payloads) when the records are
    /// done. `opts.continuation` names the pass a continuation joins; without
    /// one the invocation may open a new pass (a scheduled run). No request
    /// starts past `opts.deadline`; the checkpoint's last write may.
    pub async fn sweep_share(
        &self,
        opts: &SweepOptions,
        hand_on: Option<&dyn HandOn>,
    ) -> Result<ShareOutcome, SubmitError> {
        let hand_on = hand_on.filter(|_| !opts.dry_run);
        let mut out = ShareOutcome {
            summary: SweepSummary {
                dry_run: opts.dry_run,
                ..SweepSummary::default()
            },
            ..ShareOutcome::default()
        };
        let mut held = Held::default();
        let mut first = true;
        // After its first claim an invocation is the pass's it joined (or
        // opened): it never opens another one, whatever it finds later.
        let mut joined = opts.continuation;
        while !self.past(opts) && !self.budget_spent(opts, &out.summary) {
            let id = uuid::Uuid::new_v4().to_string();
            let lease = self.lease_length(opts);
            let concurrency = self.settings.pass_concurrency;
            let (claim, window, resumed) = self
                .update(&mut held, opts, &mut out.summary, |cp, now| {
                    let until = now + lease;
                    let order = self.settings.list_order;
                    let who = (id.as_str(), joined.as_ref());
                    claim_or_open(cp, (now, until), who, concurrency, order)
                })
                .await?;
            if first {
                out.summary.resumed = resumed;
            }
            joined = Some(Continuation {
                sweep_pass: window.1,
            });
            match claim {
                Claim::Records {
                    ranges,
                    alone,
                    pool,
                    free,
                } => {
                    if alone && pool > 0 {
                        let n = free.min(pool);
                        self.send_on(hand_on, window.1, n, &mut out).await;
                    }
                    let fan_out = alone && pool == 0 && hand_on.is_some() && concurrency > 1;
                    let ended = self
                        .records_share(&mut held, &id, ranges, window, fan_out, opts, &mut out)
                        .await?;
                    if ended {
                        let n = held.cp.as_ref().map_or(0, |c| c.wanted(concurrency));
                        self.send_on(hand_on, window.1, n, &mut out).await;
                        break;
                    }
                }
                Claim::Tail => {
                    self.tail_share(&mut held, &id, first, opts, &mut out)
                        .await?;
                    if !out.summary.complete {
                        self.send_on(hand_on, window.1, 1, &mut out).await;
                    }
                    break;
                }
                Claim::Busy => {
                    out.summary.busy = first;
                    break;
                }
                Claim::Over => break,
            }
            first = false;
        }
        Ok(out)
    }

    /// A run bounded by `max_records` has listed them.
    fn budget_spent(&self, opts: &SweepOptions, s: &SweepSummary) -> bool {
        opts.max_records.is_some_and(|m| s.scanned >= m as u64)
    }

    /// How long a lease taken now lasts: the invocation's time left (15
    /// minutes without a deadline) and one operation's length. It is added
    /// to S3's time once the checkpoint's read has dated it.
    fn lease_length(&self, opts: &SweepOptions) -> Duration {
        let run = opts
            .deadline
            .map_or(Duration::minutes(15), |d| d - self.now());
        run + self.settings.operation_timeout
    }

    /// Lists a share's ranges and releases what is left; `true` when the
    /// invocation ends there (its deadline, its budget, or its share taken
    /// over), `false` when it may claim again.
    #[allow(clippy::too_many_arguments)]
    async fn records_share(
        &self,
        held: &mut Held,
        id: &str,
        ranges: Vec<super::ranges::Range>,
        window: (Option<DateTime<Utc>>, DateTime<Utc>),
        fan_out: bool,
        opts: &SweepOptions,
        out: &mut ShareOutcome,
    ) -> Result<bool, SubmitError> {
        let mut tally = SweepSummary::default();
        let budget = opts
            .max_records
            .map(|m| (m as u64).saturating_sub(out.summary.scanned));
        let (left, wait) = self
            .list_ranges(ranges, window, opts, (budget, fan_out), &mut tally)
            .await;
        out.summary.add(&tally);
        // A range that failed ends the invocation: the rest goes on in
        // others, the failed range at the next scheduled run.
        let failed = !wait.is_empty();
        let mine = self
            .update(held, opts, &mut SweepSummary::default(), |cp, _| {
                let Some(c) = cp.as_mut() else {
                    return (false, false);
                };
                let mine = c.release(id, (left.clone(), wait.clone()), &tally);
                (mine, mine)
            })
            .await?;
        if !mine {
            tracing::warn!("this invocation's share was taken over (its lease ran out): it stops");
            return Ok(true);
        }
        Ok(failed || self.past(opts) || self.budget_spent(opts, &out.summary))
    }

    /// The tail of the pass: the ready index's scan over the window since
    /// the last complete one, then the orphan payloads of the next slices;
    /// then the pass is complete. A tail cut short by the deadline in an
    /// invocation that began with other work is handed on whole; one that had
    /// a whole invocation completes the pass anyway (what it did not reach
    /// waits for the next pass, by its cursor).
    async fn tail_share(
        &self,
        held: &mut Held,
        id: &str,
        first: bool,
        opts: &SweepOptions,
        out: &mut ShareOutcome,
    ) -> Result<(), SubmitError> {
        let Some(cp) = held.cp.clone() else {
            return Ok(());
        };
        let now = self.s3_earliest()?;
        let mut tally = SweepSummary::default();
        let markers = self
            .sweep_markers((cp.markers_until, cp.pass), opts, &mut tally)
            .await;
        let plan = super::payloads::PayloadPlan::after(cp.payload_slice, cp.payloads_until, now);
        // The cursors move on only past a check without a failure: a payload
        // that could not be checked is checked again by the next pass.
        let errors_before = tally.errors;
        let payloads = match self.sweep_payloads(opts, now, &plan, &mut tally).await {
            Ok(()) if !self.past(opts) && tally.errors == errors_before => {
                Some((plan.next_slice(), now))
            }
            Ok(()) => None,
            Err(e) => {
                tracing::warn!(error = %e, "the payload listing stopped");
                tally.errors += 1;
                None
            }
        };
        out.summary.add(&tally);
        let cut_short = self.past(opts) && (!markers || payloads.is_none());
        if cut_short && !first {
            self.update(held, opts, &mut SweepSummary::default(), |cp, _| {
                let released = cp
                    .as_mut()
                    .is_some_and(|c| c.release(id, (vec![], vec![]), &SweepSummary::default()));
                (released, ())
            })
            .await?;
            return Ok(());
        }
        let done = self
            .update(held, opts, &mut SweepSummary::default(), |cp, now| {
                let Some(c) = cp.as_mut() else {
                    return (false, None);
                };
                let done = c.complete_tail(id, &tally, markers, payloads);
                let end = done.then(|| (c.tally.clone(), c.age(now)));
                (done, end)
            })
            .await?;
        if let Some((pass, length)) = done {
            out.summary.complete = true;
            out.pass = Some(pass.summary(opts.dry_run));
            out.pass_shares = Some((pass.shares, pass.peak_shares));
            out.pass_length = Some(length);
        }
        Ok(())
    }

    /// Hands `n` continuations of the pass `pass` on (none without a
    /// hand-on: the pass then goes on at the next scheduled run).
    async fn send_on(
        &self,
        hand_on: Option<&dyn HandOn>,
        pass: DateTime<Utc>,
        n: usize,
        out: &mut ShareOutcome,
    ) {
        let Some(h) = hand_on.filter(|_| n > 0) else {
            return;
        };
        let batch = vec![Continuation { sweep_pass: pass }; n];
        if let Err(e) = h.hand_on(&batch).await {
            tracing::warn!(error = %e, continuations = n, "the pass could not hand on; its live shares, a redelivery or the next scheduled run go on");
            out.summary.errors += 1;
        }
        out.handed_on.extend(batch);
    }

    /// Changes the checkpoint by `f` (given it as held, or read again after
    /// another invocation changed it, and S3's time now) and writes it back
    /// by compare-and-swap when `f` says it changed it; tries again on a
    /// 412. A dry run changes only its own copy.
    async fn update<T>(
        &self,
        held: &mut Held,
        opts: &SweepOptions,
        summary: &mut SweepSummary,
        mut f: impl FnMut(&mut Option<Checkpoint>, DateTime<Utc>) -> (bool, T),
    ) -> Result<T, SubmitError> {
        for _ in 0..CAS_ATTEMPTS {
            if !held.known {
                let (cp, etag) = self.read_checkpoint(opts, summary).await?;
                *held = Held {
                    cp,
                    etag,
                    known: true,
                };
            }
            let now = self.s3_earliest()?;
            let mut cp = held.cp.clone();
            let (changed, t) = f(&mut cp, now);
            if !changed || opts.dry_run {
                if opts.dry_run {
                    held.cp = cp;
                }
                return Ok(t);
            }
            let Some(new) = cp else {
                return Ok(t);
            };
            match self.write_checkpoint(&new, held.etag.as_ref()).await {
                Ok(etag) => {
                    *held = Held {
                        cp: Some(new),
                        etag: Some(etag),
                        known: true,
                    };
                    return Ok(t);
                }
                // Another invocation wrote it first (or it is gone: S3
                // answers 404 to If-Match on a missing key, SeaweedFS 412):
                // read it again and decide again.
                Err(Failure::Store(StoreError::PreconditionFailed | StoreError::NotFound)) => {
                    held.known = false;
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(SubmitError::Storage(StoreError::Unavailable(
            "the sweeper's checkpoint kept changing under this invocation".into(),
        )))
    }

    /// `GET sweeper/checkpoint.json`: the pass it holds, if it is one, and
    /// the ETag a change swaps it by.
    async fn read_checkpoint(
        &self,
        opts: &SweepOptions,
        summary: &mut SweepSummary,
    ) -> Result<(Option<Checkpoint>, Option<ETag>), SubmitError> {
        match self
            .with_retries(self.request_deadline(opts.deadline), || {
                self.store.get(CHECKPOINT_KEY)
            })
            .await
        {
            Ok(o) => match serde_json::from_slice::<Checkpoint>(&o.body) {
                Ok(cp) => Ok((Some(cp), Some(o.meta.etag))),
                // Not ours to read: say so, count it, and begin a new pass
                // over it (by compare-and-swap on what is there).
                Err(e) => {
                    tracing::error!(key = CHECKPOINT_KEY, error = %e, "the sweeper's checkpoint does not parse: a new pass begins");
                    summary.errors += 1;
                    Ok((None, Some(o.meta.etag)))
                }
            },
            Err(Failure::Store(StoreError::NotFound)) => Ok((None, None)),
            Err(e) => Err(e.into()),
        }
    }

    /// Writes the checkpoint (`If-Match` what was read, or create-only),
    /// even past the run's deadline: that is what the stop margin is for.
    async fn write_checkpoint(
        &self,
        cp: &Checkpoint,
        etag: Option<&ETag>,
    ) -> Result<ETag, Failure> {
        let cond = match etag {
            Some(e) => PutMode::Update(e.clone()),
            None => PutMode::Create,
        };
        // A checkpoint always serializes (times and strings); if it ever did
        // not, nothing is written rather than an empty checkpoint.
        let body = serde_json::to_vec(cp)
            .map(bytes::Bytes::from)
            .map_err(|e| Failure::Store(StoreError::Fatal(format!("the checkpoint: {e}"))))?;
        self.with_retries(self.request_deadline(None), || {
            self.store.put(CHECKPOINT_KEY, body.clone(), cond.clone())
        })
        .await
        .map(|p| p.etag)
    }
}

/// The claim of one invocation on the checkpoint `cp` at S3's time `now`:
/// a continuation joins only the pass it names; a scheduled run opens a new
/// pass where the last one is complete (or none is there) and otherwise
/// joins the unfinished one. `(changed, found)`.
fn claim_or_open(
    cp: &mut Option<Checkpoint>,
    (now, until): (DateTime<Utc>, DateTime<Utc>),
    (id, continuation): (&str, Option<&Continuation>),
    concurrency: usize,
    order: ListOrder,
) -> (bool, Found) {
    let resumed = match (cp.as_ref(), continuation) {
        (None, Some(_)) => return (false, (Claim::Over, (None, now), false)),
        (Some(c), Some(k)) if c.pass != k.sweep_pass || c.complete => {
            return (false, (Claim::Over, (c.previous_pass, c.pass), false));
        }
        (Some(c), None) if c.complete => {
            *cp = Some(Checkpoint::new_pass(Some(c), now, order));
            false
        }
        (None, None) => {
            *cp = Some(Checkpoint::new_pass(None, now, order));
            false
        }
        (Some(_), _) => true,
    };
    let Some(c) = cp.as_mut() else {
        return (false, (Claim::Over, (None, now), false));
    };
    c.take_over(now);
    refit_ranges(c, order);
    let claim = c.claim(id, (now, until), concurrency, continuation.is_none());
    let changed = !matches!(claim, Claim::Busy | Claim::Over) || !resumed;
    (changed, (claim, (c.previous_pass, c.pass), resumed))
}

/// An unfinished pass begun under the other `LIST_ORDER` keeps its window
/// and begins its ranges again, as `order` lists them, once no share of it
/// is live.
fn refit_ranges(c: &mut Checkpoint, order: ListOrder) {
    let fits = c.ranges.iter().chain(&c.later).all(|r| r.fits(order));
    if !fits && c.shares.is_empty() && c.running_until.is_none() {
        tracing::info!("the pass was begun under the other LIST_ORDER: its ranges begin again");
        c.ranges = vec![super::ranges::Range::first(order)];
        c.later.clear();
    }
}
