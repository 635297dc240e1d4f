//! One invocation's share of a scheduled pass: [`Engine::sweep_share`].
//!
//! A pass is one logical pass however many invocations work it. Each
//! invocation claims a share of the pass's ranges in `sweeper/checkpoint.json`
//! (a lease, by compare-and-swap on the checkpoint's ETag), lists it, and
//! releases what it did not finish back to the pool, with its counts. While
//! it has time it claims again.
//!
//! It hands on only what nobody holds nor is invited to: in the same write
//! as its claim (and as the release that ends it), it invites one
//! continuation for each free slot of `PASS_CONCURRENCY` that has a range of
//! the pool to take (or one for the tail), and sends them through a
//! [`HandOn`] (the `sweep` function's pass queue on SQS). An invitation
//! holds its slot and a range until its continuation comes, so invocations
//! that end at once never hand on for the same work, and a continuation
//! always finds some: one that finds none (a redelivery, a lost invitation)
//! ends on one GET of the checkpoint, with no write. An invocation that
//! found the pass alone fans it out: as soon as it holds more ranges than
//! it lists at once, it gives them back and claims again, inviting the other
//! slots, so the pass spreads over `PASS_CONCURRENCY` invocations within its
//! first seconds.
//!
//! The deadline ends a share, never as an error: what it holds is released
//! and handed on (those writes may run past the deadline: that is what the
//! stop margin is for). A store that fails is an error, and the message
//! that started the invocation goes back to its queue.
//!
//! Without a hand-on (a user who did not wire the pass queue, `idem sweep`,
//! the tests) an invocation invites nobody and works alone until the pass
//! is done or its deadline comes; what is left waits in the checkpoint for
//! the next scheduled run, as before continuations existed.

use chrono::{DateTime, Duration, Utc};

use super::checkpoint::{Checkpoint, Claim, INVITE_LIFE};
use super::hand_on::{Continuation, HandOn};
use super::{CHECKPOINT_KEY, SweepOptions, SweepSummary};
use crate::config::ListOrder;
use crate::protocol::engine::{Engine, Failure};
use crate::protocol::error::SubmitError;
use crate::store::{ETag, PutMode, StoreError};

/// How many times a change to the checkpoint is tried again after another
/// invocation changed it first (a 412): the shares of one pass write it
/// about twice an invocation each, so a few suffice.
const CAS_ATTEMPTS: usize = 16;

/// What one invocation's share of a pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShareOutcome {
    /// This invocation's own counts. `complete` says that the pass ended in
    /// it; `busy` that it found nothing to take (every slot held, or what
    /// was left held).
    pub summary: SweepSummary,
    /// The continuations this invocation handed on (sent or not).
    pub handed_on: Vec<Continuation>,
    /// This invocation took no share of the pass: it found every slot
    /// held, the rest held, or its pass over (one GET, no write).
    pub idle: bool,
    /// A hand-on failed: the invocation that sent it should be started
    /// again (its message handed back to its queue), since the invitations
    /// it wrote stand for continuations that may never come.
    pub hand_on_failed: bool,
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
    /// The id of this invocation's latest share.
    share: String,
    /// This invocation can hand on: it invites continuations.
    hands_on: bool,
    cp: Option<Checkpoint>,
    etag: Option<ETag>,
    /// `cp` is what the store holds, as far as this invocation knows.
    known: bool,
    /// What this invocation's tail shares judge by, made at its first one
    /// (the same for the whole tail: its folders of `tasks/` listed once).
    tail: Option<super::tail_plan::TailCx>,
}

/// The pass's window: the previous pass's instant and its own.
type Window = (Option<DateTime<Utc>>, DateTime<Utc>);

/// What one claim found: the claim, the pass's window, whether it was an
/// unfinished pass (not one this claim opened), and the continuations it
/// invited.
type Found = (Claim, Window, bool, Vec<uuid::Uuid>);

/// When the checkpoint is read again (after a 412): a claim reads by the
/// invocation's deadline (none starts past it); a release, by its own
/// operation's timeout, deadline or not.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ReadBy {
    Deadline,
    Operation,
}

impl Engine {
    /// Runs one invocation's share of the scheduled pass (see the module
    /// docs): claims ranges, lists them, releases them, hands on what
    /// nobody holds through `hand_on`, and completes the pass (the ready
    /// index's scan, the orphan payloads) when the records are done.
    /// `opts.continuation` names the pass a continuation joins; without one
    /// the invocation may open a new pass (a scheduled run). No request
    /// starts past `opts.deadline`; the checkpoint's last writes may. An
    /// error is the store's (or the checkpoint kept changing), never the
    /// deadline's.
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
            // Until its first claim takes something (an invocation begun
            // past its deadline takes nothing).
            idle: true,
            ..ShareOutcome::default()
        };
        let mut held = Held {
            hands_on: hand_on.is_some(),
            ..Held::default()
        };
        let mut first = true;
        // After its first claim an invocation is the pass's it joined (or
        // opened): it never opens another one, whatever it finds later, and
        // its invitation (if it came with one) is used.
        let mut joined = opts.continuation;
        // The pass whose rest this invocation kept to claim again, and has
        // not handed on yet.
        let mut owed: Option<DateTime<Utc>> = None;
        while !self.past(opts) && !self.budget_spent(opts, &out.summary) {
            let found = self
                .claim_share(&mut held, joined.as_ref(), opts, &mut out)
                .await;
            let (claim, window, resumed, invited) = match found {
                Ok(f) => f,
                // The deadline came while the claim read the checkpoint
                // again: nothing is held, nothing to release.
                Err(SubmitError::DeadlineExceeded) if self.past(opts) => break,
                Err(e) => return Err(e),
            };
            if first {
                out.summary.resumed = resumed;
                out.idle = matches!(claim, Claim::Busy | Claim::Over);
            }
            joined = Some(Continuation {
                sweep_pass: window.1,
                invite: None,
            });
            self.send_on(hand_on, window.1, &invited, &mut out).await;
            match claim {
                Claim::Records { ranges, .. } if ranges.iter().any(|r| r.is_tail()) => {
                    owed = None;
                    let (ended, invited) = self
                        .tail_share(&mut held, ranges, first, opts, &mut out)
                        .await?;
                    self.send_on(hand_on, window.1, &invited, &mut out).await;
                    if ended {
                        break;
                    }
                    owed = Some(window.1);
                }
                Claim::Records {
                    ranges,
                    alone,
                    pool,
                } => {
                    owed = None;
                    let concurrency = self.settings.pass_concurrency;
                    let fan_out = alone && pool == 0 && hand_on.is_some() && concurrency > 1;
                    let (ended, invited) = self
                        .records_share(&mut held, ranges, window, fan_out, opts, &mut out)
                        .await?;
                    self.send_on(hand_on, window.1, &invited, &mut out).await;
                    if ended {
                        break;
                    }
                    owed = Some(window.1);
                }
                Claim::Busy => {
                    out.summary.busy = first;
                    break;
                }
                Claim::Over => break,
            }
            first = false;
        }
        if let (Some(pass), true) = (owed, held.hands_on) {
            let invited = self.invite_rest(&mut held, opts).await?;
            self.send_on(hand_on, pass, &invited, &mut out).await;
        }
        Ok(out)
    }

    /// One claim on the checkpoint (opening the pass if it may): the share,
    /// and the continuations invited in the same write (when it can hand
    /// on). The share's id is kept in `held`.
    async fn claim_share(
        &self,
        held: &mut Held,
        joined: Option<&Continuation>,
        opts: &SweepOptions,
        out: &mut ShareOutcome,
    ) -> Result<Found, SubmitError> {
        // Through the ids' one source, which a replay of the exhaustive
        // checker makes again.
        let id = crate::protocol::names::new_id().to_string();
        let lease = self.lease_length(opts);
        let concurrency = self.settings.pass_concurrency;
        let (order, hands_on) = (self.settings.list_order, held.hands_on);
        let found = self
            .update(held, opts, ReadBy::Deadline, &mut out.summary, |cp, now| {
                let who = (id.as_str(), joined, opts.scheduled_at);
                let (changed, (claim, window, resumed)) =
                    claim_or_open(cp, (now, now + lease), who, concurrency, order);
                let invited = match (cp.as_mut(), &claim) {
                    (Some(c), Claim::Records { .. }) if hands_on => {
                        invite(c, concurrency, false, now)
                    }
                    _ => vec![],
                };
                (changed, (claim, window, resumed, invited))
            })
            .await?;
        held.share = id;
        Ok(found)
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
    /// invocation ends there (its deadline, its budget, a failed range, or
    /// its share taken over), `false` when it may claim again. A release
    /// that ends the invocation invites continuations for the rest in the
    /// same write: their ids.
    async fn records_share(
        &self,
        held: &mut Held,
        ranges: Vec<super::ranges::Range>,
        window: Window,
        fan_out: bool,
        opts: &SweepOptions,
        out: &mut ShareOutcome,
    ) -> Result<(bool, Vec<uuid::Uuid>), SubmitError> {
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
        let ends = failed || self.past(opts) || self.budget_spent(opts, &out.summary);
        let (concurrency, id) = (self.settings.pass_concurrency, held.share.clone());
        let hands_on = ends && held.hands_on;
        let (mine, invited) = self
            .update(
                held,
                opts,
                ReadBy::Operation,
                &mut SweepSummary::default(),
                |cp, now| {
                    let Some(c) = cp.as_mut() else {
                        return (false, (false, vec![]));
                    };
                    let mine = c.release(&id, (left.clone(), wait.clone()), &tally);
                    let invited = match mine && hands_on {
                        true => invite(c, concurrency, false, now),
                        false => vec![],
                    };
                    (mine, (mine, invited))
                },
            )
            .await?;
        if !mine {
            tracing::warn!("this invocation's share was taken over (its lease ran out): it stops");
            return Ok((true, vec![]));
        }
        Ok((ends, invited))
    }

    /// Invites continuations for what this invocation kept to claim again
    /// and did not (its deadline or budget came first): one write, when
    /// there is something to hand on.
    async fn invite_rest(
        &self,
        held: &mut Held,
        opts: &SweepOptions,
    ) -> Result<Vec<uuid::Uuid>, SubmitError> {
        let concurrency = self.settings.pass_concurrency;
        let mut summary = SweepSummary::default();
        self.update(held, opts, ReadBy::Operation, &mut summary, |cp, now| {
            let invited = match cp.as_mut() {
                Some(c) if c.wanted(concurrency, false) > 0 => invite(c, concurrency, false, now),
                _ => vec![],
            };
            (!invited.is_empty(), invited)
        })
        .await
    }

    /// A share of the pass's tail (`tail.rs`): works its items and
    /// releases what is left with its place, and what the items found; the
    /// release that leaves nothing of the tail completes the pass. As
    /// [`Engine::records_share`]: `true` when the invocation ends there, and
    /// the continuations its release invited.
    async fn tail_share(
        &self,
        held: &mut Held,
        items: Vec<super::ranges::Range>,
        first: bool,
        opts: &SweepOptions,
        out: &mut ShareOutcome,
    ) -> Result<(bool, Vec<uuid::Uuid>), SubmitError> {
        if held.tail.is_none() {
            held.tail = match held.cp.as_ref() {
                Some(cp) => cp.tail.as_ref().map(|t| self.tail_cx(cp, t)),
                None => None,
            };
        }
        // A tail item is in the pool only once the tail is planned: without
        // a plan (never) the items go back untouched.
        let done = match &held.tail {
            Some(cx) => self.tail_items(items, cx, first, opts).await,
            None => super::tail::TailDone {
                left: items,
                ..Default::default()
            },
        };
        out.summary.add(&done.tally);
        let ends = self.past(opts) || self.budget_spent(opts, &out.summary);
        let (concurrency, id) = (self.settings.pass_concurrency, held.share.clone());
        let hands_on = ends && held.hands_on;
        let mut none = SweepSummary::default();
        let (mine, invited, end) = self
            .update(held, opts, ReadBy::Operation, &mut none, |cp, now| {
                let Some(c) = cp.as_mut() else {
                    return (false, (false, vec![], None));
                };
                let mine = done.release_on(c, &id);
                let end = (mine && c.finish_if_done()).then(|| (c.tally.clone(), c.age(now)));
                let invited = match mine && hands_on {
                    true => invite(c, concurrency, false, now),
                    false => vec![],
                };
                (mine, (mine, invited, end))
            })
            .await?;
        if let Some((pass, length)) = end {
            out.summary.complete = true;
            out.pass = Some(pass.summary(opts.dry_run));
            out.pass_shares = Some((pass.shares, pass.peak_shares));
            out.pass_length = Some(length);
            return Ok((true, vec![]));
        }
        if !mine {
            tracing::warn!("this invocation's share was taken over (its lease ran out): it stops");
            return Ok((true, vec![]));
        }
        Ok((ends, invited))
    }

    /// Sends a continuation of the pass `pass` for each invitation of
    /// `invited` (none without a hand-on: the pass then goes on at the next
    /// scheduled run). A failed send is counted and said in `out`: the
    /// invitations stand until their life ends, and the invocation's own
    /// message should come again.
    async fn send_on(
        &self,
        hand_on: Option<&dyn HandOn>,
        pass: DateTime<Utc>,
        invited: &[uuid::Uuid],
        out: &mut ShareOutcome,
    ) {
        let Some(h) = hand_on.filter(|_| !invited.is_empty()) else {
            return;
        };
        let batch: Vec<Continuation> = invited
            .iter()
            .map(|&id| Continuation {
                sweep_pass: pass,
                invite: Some(id),
            })
            .collect();
        if let Err(e) = h.hand_on(&batch).await {
            tracing::warn!(error = %e, continuations = batch.len(), "the pass could not hand on; its live shares, a redelivery or the next scheduled run go on");
            out.summary.errors += 1;
            out.hand_on_failed = true;
        }
        out.handed_on.extend(batch);
    }

    /// Changes the checkpoint by `f` (given it as held, or read again after
    /// another invocation changed it, and S3's time now) and writes it back
    /// by compare-and-swap when `f` says it changed it; tries again on a
    /// 412, reading again by `read_by`. A dry run changes only its own copy.
    async fn update<T>(
        &self,
        held: &mut Held,
        opts: &SweepOptions,
        read_by: ReadBy,
        summary: &mut SweepSummary,
        mut f: impl FnMut(&mut Option<Checkpoint>, DateTime<Utc>) -> (bool, T),
    ) -> Result<T, SubmitError> {
        for _ in 0..CAS_ATTEMPTS {
            if !held.known {
                let deadline = opts.deadline.filter(|_| read_by == ReadBy::Deadline);
                let (cp, etag) = self.read_checkpoint(deadline, summary).await?;
                (held.cp, held.etag, held.known) = (cp, etag, true);
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
                    (held.cp, held.etag) = (Some(new), Some(etag));
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
        deadline: Option<DateTime<Utc>>,
        summary: &mut SweepSummary,
    ) -> Result<(Option<Checkpoint>, Option<ETag>), SubmitError> {
        match self
            .with_retries(self.request_deadline(deadline), || {
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
/// a continuation joins only the pass it names (taking up its invitation,
/// if it carries one); a scheduled run opens a new pass where the last one
/// is complete (or none is there) and otherwise joins the unfinished one,
/// unless the complete one began at or after the instant it was
/// `scheduled_at` (it is that schedule's pass, done).
/// `(changed, (claim, window, resumed))`.
fn claim_or_open(
    cp: &mut Option<Checkpoint>,
    (now, until): (DateTime<Utc>, DateTime<Utc>),
    (id, continuation, scheduled_at): (&str, Option<&Continuation>, Option<DateTime<Utc>>),
    concurrency: usize,
    order: ListOrder,
) -> (bool, (Claim, Window, bool)) {
    let resumed = match (cp.as_ref(), continuation) {
        (None, Some(_)) => return (false, (Claim::Over, (None, now), false)),
        (Some(c), Some(k)) if c.pass != k.sweep_pass || c.complete => {
            return (false, (Claim::Over, (c.previous_pass, c.pass), false));
        }
        (Some(c), None) if c.complete && scheduled_at.is_some_and(|t| c.pass >= t) => {
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
    let who = (continuation.is_none(), continuation.and_then(|k| k.invite));
    let claim = c.claim(id, (now, until), concurrency, who);
    // A claim that takes nothing writes nothing (a continuation that finds
    // nothing to do costs one GET), unless it opened the pass.
    let changed = !matches!(claim, Claim::Busy | Claim::Over) || !resumed;
    (changed, (claim, (c.previous_pass, c.pass), resumed))
}

/// Invites as many continuations as `c` wants at S3's time `now` (see
/// [`Checkpoint::wanted`]): their ids, fresh from the ids' one source.
fn invite(
    c: &mut Checkpoint,
    concurrency: usize,
    continuing: bool,
    now: DateTime<Utc>,
) -> Vec<uuid::Uuid> {
    let n = c.wanted(concurrency, continuing);
    let ids: Vec<uuid::Uuid> = (0..n).map(|_| crate::protocol::names::new_id()).collect();
    c.invite(&ids, now + INVITE_LIFE);
    ids
}

/// An unfinished pass begun under the other `LIST_ORDER` keeps its window
/// and begins its ranges again, as `order` lists them, once no share of it
/// is live (and its invitations, which each stood for a range, go).
fn refit_ranges(c: &mut Checkpoint, order: ListOrder) {
    let fits = c.ranges.iter().chain(&c.later).all(|r| r.fits(order));
    if !fits && c.shares.is_empty() && c.running_until.is_none() {
        tracing::info!("the pass was begun under the other LIST_ORDER: its ranges begin again");
        // Its tail, once planned, begins again as a tail (the ready index's
        // scan kept if it was done), not as records.
        c.ranges = match &c.tail {
            Some(t) => vec![super::ranges::Range::Tail { markers: t.markers }],
            None => vec![super::ranges::Range::first(order)],
        };
        c.later.clear();
        c.invites.clear();
    }
}
