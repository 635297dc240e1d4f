//! The candidates of a [`Range::Slices`](super::ranges::Range::Slices)
//! item's round (`LIST_ORDER=any`), collected from `payloads/` over as many
//! shares as it takes (docs/decisions.md, "The candidates' collection
//! spread"): `payloads/` is listed whole (a prefix under `any` must end in
//! `/`, so not by slice folder), 10^4 pages at 10^9 records, about 300 s
//! against an invocation's 110. A share the deadline cuts in it writes what
//! it collected (the [`ROUND`](super::tail_plan::ROUND) smallest ids so far, and
//! the listing's token) to a side object under the sweeper's own prefix, one
//! a folder digit, and its place names it by a nonce; the share that takes
//! the item over reads it and lists on. The checkpoint (rewritten at every
//! claim and release) holds the nonce alone, 36 bytes, against up to 1 MiB
//! of ids. A side object missing, or not the one the place names (another
//! write, another pass, another round), is a miss: the collection begins
//! again. Never a wrong deletion: a candidate is only a payload to check,
//! and every deletion is confirmed by HEADs of the payload and its task.

use std::collections::BinaryHeap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::payload_tasks::{PAYLOADS_PREFIX, slice_of};
use super::payloads::input_payload_id;
use super::ranges::SlicesPlace;
use super::tail_plan::{ROUND, RoundAt};
use super::{PAGE, SweepOptions};
use crate::protocol::engine::Engine;
use crate::protocol::error::{Failure, SubmitError};
use crate::store::{PutMode, StoreError};

/// Where the side objects of the collections cut short live: under the
/// sweeper's own prefix, beside its checkpoint.
pub(super) const SIDE_PREFIX: &str = "sweeper/tail/";

/// A round's candidates as a share found them.
#[derive(Debug)]
pub(super) struct Candidates {
    /// The ids, sorted.
    pub ids: Vec<Uuid>,
    /// The side object the place names holds them all: a share cut short
    /// later in the round need not write them again.
    pub saved: bool,
}

/// The side object of a collection cut short: which collection it is, how
/// far its listing went, and the smallest ids it found so far.
#[derive(Debug, Serialize, Deserialize)]
struct Side {
    nonce: Uuid,
    /// The tail's time: the pass's collection, judging ages as its items do.
    at: DateTime<Utc>,
    from: u32,
    to: u32,
    #[serde(default)]
    round_after: Option<Uuid>,
    /// Where `payloads/`'s listing goes on (`None` with `done`).
    #[serde(default)]
    token: Option<String>,
    /// The listing is done: `ids` are the round's candidates, all of them.
    #[serde(default)]
    done: bool,
    /// The ids, 16 bytes each in order, in hex.
    ids: String,
}

/// A collection under way.
#[derive(Debug, Default)]
struct Gather {
    heap: BinaryHeap<Uuid>,
    token: Option<String>,
    done: bool,
    /// Pages this share listed (none: nothing to write again).
    pages: usize,
}

impl Gather {
    fn sorted(&self) -> Vec<Uuid> {
        self.heap.clone().into_sorted_vec()
    }
}

/// The side object of the item of `from..to`.
fn side_key((from, to): (u32, u32)) -> String {
    format!("{SIDE_PREFIX}slices-{from:02x}-{to:02x}.json")
}

impl Engine {
    /// The ids of the payloads of the slices `from..to` old enough to judge
    /// at the tail's time, past the place's `round_after`: the [`ROUND`]
    /// smallest, in order (the same in every share, whatever order the
    /// store lists them in), collected on from the side object the place
    /// names; `None` when the deadline came first (the place then names
    /// the side object that holds how far it went).
    pub(super) async fn round_candidates(
        &self,
        r: &mut RoundAt<'_>,
    ) -> Result<Option<Candidates>, SubmitError> {
        let read = match r.place.collected {
            Some(nonce) => self.read_side(r, nonce).await?,
            None => Some(Gather::default()),
        };
        let (group, cx, opts) = (r.group, r.cx, r.opts);
        let mut g = match read {
            Some(g) => g,
            // A miss: the round begins again, its task listing too (its
            // bits were for the candidates the side object held).
            None => {
                *r.place = SlicesPlace {
                    round_after: r.place.round_after,
                    ..SlicesPlace::default()
                };
                Gather::default()
            }
        };
        while !g.done {
            if self.past(opts) {
                self.save_side(r, &g).await;
                return Ok(None);
            }
            let listed = self
                .with_retries(self.request_deadline(opts.deadline), || {
                    self.store
                        .list(PAYLOADS_PREFIX, None, g.token.clone(), PAGE)
                })
                .await;
            let listed = match listed {
                Ok(l) => l,
                // Cut short inside a request: what was found is kept.
                Err(e) if matches!(e, Failure::Deadline) || self.past(opts) => {
                    self.save_side(r, &g).await;
                    return Ok(None);
                }
                Err(e) => return Err(e.into()),
            };
            r.tally.lists += 1;
            g.pages += 1;
            let slices = group.0..group.1;
            for o in &listed.objects {
                let Some(id) = input_payload_id(&o.key) else {
                    continue;
                };
                let old = cx.judge.now - o.last_modified >= cx.judge.from;
                let past = r.place.round_after.is_none_or(|a| id > a);
                if old && slices.contains(&slice_of(&id)) && past {
                    g.heap.push(id);
                    if g.heap.len() > ROUND {
                        g.heap.pop();
                    }
                }
            }
            g.token = listed.next;
            g.done = g.token.is_none();
        }
        Ok(Some(Candidates {
            ids: g.heap.into_sorted_vec(),
            saved: g.pages == 0 && r.place.collected.is_some(),
        }))
    }

    /// Writes the round's candidates `ids`, all of them, to the side object,
    /// for the share cut short in the round's task listing: the next one
    /// need not collect them again.
    pub(super) async fn save_candidates(&self, r: &mut RoundAt<'_>, ids: &[Uuid]) {
        let g = Gather {
            heap: ids.iter().copied().collect(),
            token: None,
            done: true,
            pages: 1,
        };
        self.save_side(r, &g).await;
    }

    /// Removes the side object of a round now listed (its place no longer
    /// names it). A failure leaves it, to be overwritten by the next
    /// collection of the folder digit cut short: nothing reads it unless a
    /// place names its nonce.
    pub(super) async fn drop_side(&self, group: (u32, u32), opts: &SweepOptions) {
        if opts.dry_run || self.past(opts) {
            return;
        }
        let key = side_key(group);
        let deadline = self.request_deadline(opts.deadline);
        if let Err(e) = self
            .with_retries(deadline, || self.store.delete(&key, None))
            .await
        {
            tracing::debug!(error = ?e, key, "a collection's side object left");
        }
    }

    /// The collection the side object of `group` holds, if it is the one
    /// `nonce` names for this round of this tail; `None` (a miss) if it is
    /// missing or another.
    async fn read_side(&self, r: &RoundAt<'_>, nonce: Uuid) -> Result<Option<Gather>, SubmitError> {
        let (group, round_after, cx, opts) = (r.group, r.place.round_after, r.cx, r.opts);
        let key = side_key(group);
        let got = self
            .with_retries(self.request_deadline(opts.deadline), || {
                self.store.get(&key)
            })
            .await;
        let body = match got {
            Ok(o) => o.body,
            Err(Failure::Store(StoreError::NotFound)) => {
                tracing::info!(key, "a collection's side object is gone: it begins again");
                return Ok(None);
            }
            Err(e) => return Err(e.into()),
        };
        let side: Option<Side> = serde_json::from_slice(&body).ok();
        let ours = |s: &Side| {
            (s.nonce, s.at, s.from, s.to, s.round_after)
                == (nonce, cx.judge.now, group.0, group.1, round_after)
        };
        let gather = side.filter(ours).and_then(|s| {
            let heap = decode_ids(&s.ids)?;
            (heap.len() <= ROUND).then_some(Gather {
                heap,
                token: s.token,
                done: s.done,
                pages: 0,
            })
        });
        if gather.is_none() {
            tracing::info!(
                key,
                "a collection's side object is another's: it begins again"
            );
        }
        Ok(gather)
    }

    /// Writes what `g` collected (if this share listed anything) to the
    /// side object of `group` under a new nonce, which the place then
    /// names. Past the run's deadline, as the release is (the invocation
    /// keeps a margin for both). A failed write leaves the place as it
    /// was: its side object as it was too (a miss at worst, if the write
    /// landed unanswered). A dry run writes nothing.
    async fn save_side(&self, r: &mut RoundAt<'_>, g: &Gather) {
        let (group, cx, opts) = (r.group, r.cx, r.opts);
        if opts.dry_run || g.pages == 0 {
            return;
        }
        let side = Side {
            nonce: Uuid::new_v4(),
            at: cx.judge.now,
            from: group.0,
            to: group.1,
            round_after: r.place.round_after,
            token: g.token.clone(),
            done: g.done,
            ids: encode_ids(&g.sorted()),
        };
        let body = match serde_json::to_vec(&side) {
            Ok(b) => bytes::Bytes::from(b),
            Err(e) => {
                tracing::warn!(error = %e, "a collection's side object not made");
                return;
            }
        };
        let key = side_key(group);
        let deadline = self.now() + self.settings.operation_timeout;
        let put = || self.store.put(&key, body.clone(), PutMode::Overwrite);
        match self.with_retries(deadline, put).await {
            Ok(_) => r.place.collected = Some(side.nonce),
            Err(e) => tracing::warn!(error = ?e, key, "a collection's side object not written"),
        }
    }
}

fn encode_ids(ids: &[Uuid]) -> String {
    let mut out = String::with_capacity(ids.len() * 32);
    for id in ids {
        out.push_str(&hex::encode(id.as_bytes()));
    }
    out
}

fn decode_ids(text: &str) -> Option<BinaryHeap<Uuid>> {
    let bytes = hex::decode(text).ok()?;
    (bytes.len() % 16 == 0).then(|| {
        bytes
            .chunks_exact(16)
            .filter_map(|c| Uuid::from_slice(c).ok())
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ids_of_a_side_object_read_back_as_written() {
        let ids: Vec<Uuid> = (0..5u128).map(|i| Uuid::from_u128(i * 7 + 1)).collect();
        let back = decode_ids(&encode_ids(&ids)).unwrap().into_sorted_vec();
        assert_eq!(back, ids);
        assert!(decode_ids("zz").is_none());
        assert!(decode_ids("00ff").is_none(), "not a whole id");
        assert_eq!(side_key((9, 16)), "sweeper/tail/slices-09-10.json");
    }
}
