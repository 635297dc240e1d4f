//! The key space of `idempotency/`, cut into ranges that a pass lists side
//! by side: one per scope, and a full page splits by the next hex digit of
//! the record hash (`LIST_ORDER=bytes`); or one folder per scope, each
//! listed page by page from the store's continuation token
//! (`LIST_ORDER=any`). Pure planning, no requests.

use serde::{Deserialize, Serialize};

use super::{HEX, MAX_RANGES, PAGE, RECORDS_PREFIX};
use crate::config::ListOrder;

/// A part of the key space still to list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(super) enum Range {
    /// Finding the scopes: from the beginning (`after` is `None`), a page
    /// of the folders right under `idempotency/` as [`Range::Dirs`] lists
    /// them; after a key (a pass begun by an earlier version), the next key
    /// after `after` names the next scope.
    Scopes {
        #[serde(default)]
        after: Option<String>,
    },
    /// The records under `prefix` after `after`, up to `until` (included).
    Keys {
        prefix: String,
        #[serde(default)]
        after: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        until: Option<String>,
        /// A continuation token for an empty page that was not the last;
        /// only within a run.
        #[serde(skip)]
        token: Option<String>,
    },
    /// Finding the scopes, either setting: a page of the folders right
    /// under `idempotency/` (`Delimiter: /`, up to 1,000 a listing) from
    /// `token`.
    Dirs {
        #[serde(default)]
        token: Option<String>,
    },
    /// `LIST_ORDER=any`: the records of one scope's folder (`prefix` ends in
    /// `/`), from the store's continuation `token` (`None`: from its
    /// beginning). The token is kept across runs: it is the store's own
    /// place in its own order, which nothing here relies on.
    Dir {
        prefix: String,
        #[serde(default)]
        token: Option<String>,
    },
    /// The pass's tail, once its records are done (`tail.rs`): the ready
    /// index's scan (`markers`: done), then the first page of `payloads/`,
    /// which leaves the payload check's items when there is more than a page.
    Tail {
        #[serde(default)]
        markers: bool,
    },
    /// The HEAD path over the payloads outside the day's slices: under
    /// `LIST_ORDER=any` `payloads/` page by page from `token`; under `bytes`
    /// the other slices' folders side by side, from slice `from` on.
    Recent {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        token: Option<String>,
        #[serde(default)]
        from: u32,
    },
    /// `LIST_ORDER=bytes`: one slice of the day's payload check, its
    /// payloads (`payloads/{hex}`) after `after` merged with its tasks.
    Slice {
        slice: u32,
        #[serde(default)]
        after: Option<String>,
    },
    /// `LIST_ORDER=any`: the day's slices `from..to` of one task folder
    /// digit, its task folders listed from `place`.
    Slices {
        from: u32,
        to: u32,
        #[serde(default)]
        place: SlicesPlace,
    },
}

/// Where a [`Range::Slices`] item stands: the candidates of its rounds up
/// to `round_after` are done; in the current round, the task listings
/// before `prefix` are done and the one at `prefix` goes on from `token`,
/// and `found` (hex, a bit for each of the round's `count` candidates in
/// the order of their ids) says which tasks were seen so far. Once the
/// round is `listed`, its `suspects` left to confirm, and where the next
/// round begins (`next_round`; `None`: this is the last). While the
/// round's candidates are collected over several shares, `collected` names
/// the side object that holds them so far (`collect.rs`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct SlicesPlace {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub round_after: Option<uuid::Uuid>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collected: Option<uuid::Uuid>,
    #[serde(default)]
    pub prefix: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    #[serde(default)]
    pub count: u64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub found: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub listed: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub suspects: Vec<uuid::Uuid>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_round: Option<uuid::Uuid>,
}

impl Range {
    /// Whether a pass under `order` lists this range: a pass begun under
    /// the other setting begins its ranges again.
    pub fn fits(&self, order: ListOrder) -> bool {
        match self {
            Range::Scopes { .. } | Range::Keys { .. } => order == ListOrder::Bytes,
            Range::Dirs { .. } | Range::Tail { .. } | Range::Recent { .. } => true,
            Range::Dir { .. } => order == ListOrder::Any,
            Range::Slice { .. } => order == ListOrder::Bytes,
            Range::Slices { .. } => order == ListOrder::Any,
        }
    }

    /// An item of the pass's tail, not records.
    pub fn is_tail(&self) -> bool {
        matches!(
            self,
            Range::Tail { .. } | Range::Recent { .. } | Range::Slice { .. } | Range::Slices { .. }
        )
    }

    /// Where a pass under `order` begins.
    pub fn first(order: ListOrder) -> Range {
        match order {
            ListOrder::Bytes => Range::Scopes { after: None },
            ListOrder::Any => Range::Dirs { token: None },
        }
    }
}

/// What to list after a page of the folders under `idempotency/`: each
/// scope's folder (by `order`'s ranges), and the next page.
pub(super) fn after_dirs_page(
    prefixes: Vec<String>,
    next: Option<String>,
    order: ListOrder,
) -> Vec<Range> {
    let mut out: Vec<Range> = prefixes
        .into_iter()
        .map(|prefix| match order {
            ListOrder::Bytes => Range::Keys {
                prefix,
                after: None,
                until: None,
                token: None,
            },
            ListOrder::Any => Range::Dir {
                prefix,
                token: None,
            },
        })
        .collect();
    if let Some(token) = next {
        out.push(Range::Dirs { token: Some(token) });
    }
    out
}

/// The leading hex digits of a record's name under `scope` (its hash),
/// read as a place in `0..2^64`: digits left-aligned, those missing taken
/// as 0. `None` for a name that begins with no hex digit.
fn hash_place(scope: &str, key: &str) -> Option<u64> {
    let name = key.strip_prefix(scope)?.as_bytes();
    let digits = name.iter().take(16).take_while(|c| HEX.contains(c)).count();
    if digits == 0 {
        return None;
    }
    let text = std::str::from_utf8(&name[..digits]).ok()?;
    let v = u64::from_str_radix(text, 16).ok()?;
    Some(v << (4 * (16 - digits)))
}

/// Whether `prefix` is a scope's whole folder, `idempotency/{scope}/`.
fn is_scope_folder(prefix: &str) -> bool {
    prefix
        .strip_prefix(RECORDS_PREFIX)
        .and_then(|rest| rest.strip_suffix('/'))
        .is_some_and(|scope| !scope.is_empty() && !scope.contains('/'))
}

/// How many ranges the rest of a scope is listed by, given that its first
/// page of `n` keys reached hash place `last` of `2^64`: the records left
/// are about `n × (2^64 − last) / last` (record names are hashes, spread
/// evenly), a range for each `per_range` of them, at most [`MAX_RANGES`].
/// One range (no split) for a scope of fewer than two ranges' worth: it
/// goes on from its last key, page after full page.
fn ranges_for(n: usize, last: u64, per_range: u64) -> u64 {
    if last == 0 {
        return 1;
    }
    let left = (u64::MAX - last) as f64 * n as f64 / last as f64;
    ((left / per_range.max(1) as f64) as u64).clamp(1, MAX_RANGES)
}

/// The rest of a scope's range after its first full page, ending at
/// `last`: one range from `last` on, or, for a large scope, `k` ranges that
/// cut the rest of the hash space into equal parts (each `StartAfter` its
/// lower bound, up to its upper one included), so that the scope is listed
/// by many listings at once and each of them lists many full pages. The
/// bounds are names of 16 hex digits; every key past `last` falls in
/// exactly one part whatever its name, and when the bounds cannot be put in
/// order past `last` (a name that is not a hash) the scope goes on unsplit.
fn split(prefix: &str, last: String, n: usize, per_range: u64) -> Vec<Range> {
    let whole = |last: String| {
        vec![Range::Keys {
            prefix: prefix.to_owned(),
            after: Some(last),
            until: None,
            token: None,
        }]
    };
    let Some(place) = hash_place(prefix, &last) else {
        return whole(last);
    };
    let k = ranges_for(n, place, per_range);
    if k < 2 {
        return whole(last);
    }
    let step = (u64::MAX - place) / k;
    let bounds: Vec<String> = (1..k)
        .map(|j| format!("{prefix}{:016x}", place + step * j))
        .collect();
    let ordered =
        bounds.first().is_some_and(|b| *b > last) && bounds.windows(2).all(|w| w[0] < w[1]);
    if !ordered {
        return whole(last);
    }
    let lows = std::iter::once(last).chain(bounds.iter().cloned());
    let highs = bounds.iter().cloned().map(Some).chain([None]);
    lows.zip(highs)
        .map(|(after, until)| Range::Keys {
            prefix: prefix.to_owned(),
            after: Some(after),
            until,
            token: None,
        })
        .collect()
}

/// A range of records being listed, without its within-run token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct KeysRange {
    pub prefix: String,
    pub after: Option<String>,
    pub until: Option<String>,
}

impl KeysRange {
    pub fn into_range(self) -> Range {
        Range::Keys {
            prefix: self.prefix,
            after: self.after,
            until: self.until,
            token: None,
        }
    }
}

/// What to list after the scopes' one-key page found `first`: its scope's
/// records, then the scopes past it.
pub(super) fn after_scope_page(first: &str) -> Vec<Range> {
    let rest = &first[RECORDS_PREFIX.len().min(first.len())..];
    match rest.split_once('/') {
        Some((scope, _)) => {
            let prefix = format!("{RECORDS_PREFIX}{scope}/");
            // Past every key of this scope: '/' is followed by nothing above
            // U+10FFFF.
            let skip = format!("{prefix}\u{10FFFF}");
            let skip = if skip.as_str() > first {
                skip
            } else {
                first.to_owned()
            };
            vec![
                Range::Keys {
                    prefix,
                    after: None,
                    until: None,
                    token: None,
                },
                Range::Scopes { after: Some(skip) },
            ]
        }
        // A key right under idempotency/ is not a record of the layout: step
        // over it.
        None => vec![Range::Scopes {
            after: Some(first.to_owned()),
        }],
    }
}

/// What comes after a page of `range` that listed `keys` (in the range):
/// nothing once it `ended`; the same range from its last key (or with the
/// listing's `token`, after an empty page); or, after the full first page
/// of a large scope, the rest split into ranges of about `per_range`
/// records.
pub(super) fn after_keys_page(
    range: &KeysRange,
    keys: &[&str],
    (ended, token): (bool, Option<String>),
    per_range: u64,
) -> Vec<Range> {
    match (keys.last(), ended) {
        (_, true) => vec![],
        (None, false) => vec![Range::Keys {
            prefix: range.prefix.clone(),
            after: range.after.clone(),
            until: range.until.clone(),
            token,
        }],
        (Some(last), false)
            if range.after.is_none()
                && range.until.is_none()
                && keys.len() >= PAGE
                && is_scope_folder(&range.prefix) =>
        {
            split(&range.prefix, (*last).to_owned(), keys.len(), per_range)
        }
        (Some(last), false) => vec![Range::Keys {
            prefix: range.prefix.clone(),
            after: Some((*last).to_owned()),
            until: range.until.clone(),
            token: None,
        }],
    }
}

/// Where a page of `range` goes on next run when the record `failed` has to
/// be tried again: after the last listed key before it, up to the page's
/// last key when the rest was split (the split ranges in `next` go on now),
/// else with the rest of the range (and `next` is dropped).
pub(super) fn resume_after(
    range: &KeysRange,
    keys: &[&str],
    failed: &str,
    next: &mut Vec<Range>,
) -> Range {
    let resume = keys
        .iter()
        .take_while(|k| **k < failed)
        .last()
        .map(|k| (*k).to_owned())
        .or_else(|| range.after.clone());
    let rest_is_split = next.len() > 1;
    let until = if rest_is_split {
        keys.last().map(|k| (*k).to_owned())
    } else {
        next.clear();
        range.until.clone()
    };
    Range::Keys {
        prefix: range.prefix.clone(),
        after: resume,
        until,
        token: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn keys(r: &[Range]) -> Vec<(String, Option<String>)> {
        r.iter()
            .map(|r| match r {
                Range::Keys { prefix, after, .. } => (prefix.clone(), after.clone()),
                other => panic!("not a keys range: {other:?}"),
            })
            .collect()
    }

    /// The default range size.
    const SPLIT: u64 = 64_000;

    /// A record name at hash place `place` of `2^64`.
    fn at(place: u64) -> String {
        format!("idempotency/t/{place:016x}{:048x}.json", 7)
    }

    /// Whether `key` falls in the range `r` (`StartAfter` its `after`, up to
    /// its `until` included).
    fn holds(r: &Range, key: &str) -> bool {
        match r {
            Range::Keys {
                prefix,
                after,
                until,
                ..
            } => {
                key.starts_with(prefix.as_str())
                    && after.as_deref().is_none_or(|a| key > a)
                    && until.as_deref().is_none_or(|u| key <= u)
            }
            other => panic!("not a keys range: {other:?}"),
        }
    }

    #[test]
    fn a_scope_of_a_few_pages_goes_on_from_its_last_key_unsplit() {
        // The first page reached a third of the hash space: about 3,000
        // records, not two ranges' worth.
        let last = at(u64::MAX / 3);
        assert_eq!(
            keys(&split("idempotency/t/", last.clone(), PAGE, SPLIT)),
            [("idempotency/t/".into(), Some(last))]
        );
    }

    #[test]
    fn a_large_scope_splits_by_its_size_into_parts_that_hold_every_later_key_once() {
        // The first page reached a thousandth: about 999,000 records left,
        // one range for each 64,000.
        let last = at(u64::MAX / 1000);
        let r = split("idempotency/t/", last.clone(), PAGE, SPLIT);
        assert_eq!(r.len(), 15);
        assert!(matches!(&r[0], Range::Keys { after: Some(a), .. } if *a == last));
        assert!(matches!(&r[14], Range::Keys { until: None, .. }));
        let mut probes = vec![last.clone(), at(u64::MAX), "idempotency/t/g".into()];
        probes.extend((0..2000u64).map(|i| at(mix(i))));
        probes.extend((0..200u64).map(|i| format!("idempotency/t/{:x}", mix(i) >> 40)));
        for k in &probes {
            let n = r.iter().filter(|p| holds(p, k)).count();
            assert_eq!(n, usize::from(k.as_str() > last.as_str()), "{k}");
        }
        // A huge scope: at most 64 ranges.
        assert_eq!(split("idempotency/t/", at(1 << 20), PAGE, SPLIT).len(), 64);
    }

    #[test]
    fn two_ranges_worth_split_in_two_equal_parts_unless_the_last_name_sorts_past_a_cut() {
        // About 2,000 records left, 900 a range: cut halfway through the
        // rest of the hash space.
        let (t, place) = ("idempotency/t/", u64::MAX / 3);
        let half = format!("{t}{:016x}", place + (u64::MAX - place) / 2);
        let r = split(t, at(place), PAGE, 900);
        assert_eq!(
            keys(&r),
            [(t.into(), Some(at(place))), (t.into(), Some(half))]
        );
        // A name whose hex digits end in a letter past `f` sorts after the
        // first cut: unsplit, rather than list again what the page listed.
        assert_eq!(split(t, format!("{t}1z"), PAGE, 100).len(), 1);
    }

    /// Keys spread over the hash space.
    fn mix(x: u64) -> u64 {
        let z = x
            .wrapping_add(0x9E37_79B9_7F4A_7C15)
            .wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z ^ (z >> 31)
    }

    #[test]
    fn a_name_that_is_no_hash_and_a_range_within_a_scope_go_on_unsplit() {
        let r = split("idempotency/t/", "idempotency/t/README".into(), PAGE, SPLIT);
        assert_eq!(r.len(), 1);
        // A page that reached no place in the hash space: no estimate.
        let r = split("idempotency/t/", "idempotency/t/000z".into(), PAGE, SPLIT);
        assert_eq!(r.len(), 1);
        // A full first page only splits a scope's whole folder (a range of
        // a pass begun by an earlier version goes on by its cursor).
        let names: Vec<String> = (0..PAGE as u64).map(|i| at(i << 20)).collect();
        let full: Vec<&str> = names.iter().map(String::as_str).collect();
        let narrow = KeysRange {
            prefix: "idempotency/t/0".into(),
            after: None,
            until: None,
        };
        assert_eq!(
            after_keys_page(&narrow, &full, (false, None), SPLIT).len(),
            1
        );
    }

    fn range(after: Option<&str>, until: Option<&str>) -> KeysRange {
        KeysRange {
            prefix: "idempotency/t/".into(),
            after: after.map(str::to_owned),
            until: until.map(str::to_owned),
        }
    }

    #[test]
    fn after_a_scope_its_records_then_the_scopes_past_all_of_its_keys() {
        let next = after_scope_page("idempotency/t/ab.json");
        assert_eq!(
            next,
            vec![
                Range::Keys {
                    prefix: "idempotency/t/".into(),
                    after: None,
                    until: None,
                    token: None,
                },
                Range::Scopes {
                    after: Some("idempotency/t/\u{10FFFF}".into())
                },
            ]
        );
        // A stray key right under the prefix is stepped over.
        assert_eq!(
            after_scope_page("idempotency/stray"),
            vec![Range::Scopes {
                after: Some("idempotency/stray".into())
            }]
        );
    }

    #[test]
    fn a_page_goes_on_from_its_last_key_with_its_token_when_empty_and_ends_when_listed_out() {
        let r = range(Some("idempotency/t/0"), Some("idempotency/t/9"));
        assert_eq!(
            after_keys_page(&r, &["idempotency/t/1"], (true, None), SPLIT),
            vec![]
        );
        assert_eq!(
            after_keys_page(&r, &[], (false, Some("tok".into())), SPLIT),
            vec![Range::Keys {
                prefix: r.prefix.clone(),
                after: r.after.clone(),
                until: r.until.clone(),
                token: Some("tok".into()),
            }]
        );
        assert_eq!(
            after_keys_page(
                &r,
                &["idempotency/t/1", "idempotency/t/2"],
                (false, None),
                SPLIT
            ),
            vec![Range::Keys {
                prefix: r.prefix.clone(),
                after: Some("idempotency/t/2".into()),
                until: r.until.clone(),
                token: None,
            }]
        );
    }

    #[test]
    fn only_the_full_first_page_of_a_scope_splits() {
        let names: Vec<String> = (0..PAGE as u64).map(|i| at(i << 20)).collect();
        let full: Vec<&str> = names.iter().map(String::as_str).collect();
        assert_eq!(
            after_keys_page(&range(None, None), &full, (false, None), SPLIT).len(),
            64
        );
        assert_eq!(
            after_keys_page(
                &range(None, Some("idempotency/t/1")),
                &full,
                (false, None),
                SPLIT
            )
            .len(),
            1,
            "a range with an upper end was split already"
        );
        assert_eq!(
            after_keys_page(
                &range(Some("idempotency/t/0"), None),
                &full,
                (false, None),
                SPLIT
            )
            .len(),
            1,
            "a later page"
        );
        assert_eq!(
            after_keys_page(&range(None, None), &full[..PAGE - 1], (false, None), SPLIT).len(),
            1
        );
    }

    #[test]
    fn a_failed_read_resumes_after_the_last_key_before_it_and_keeps_split_ranges() {
        let r = range(Some("idempotency/t/0"), None);
        let keys = ["idempotency/t/1", "idempotency/t/2", "idempotency/t/3"];
        // Not split: the rest of the range waits, from before the failure.
        let mut next = vec![Range::Keys {
            prefix: r.prefix.clone(),
            after: Some("idempotency/t/3".into()),
            until: None,
            token: None,
        }];
        let wait = resume_after(&r, &keys, "idempotency/t/2", &mut next);
        assert_eq!(
            wait,
            Range::Keys {
                prefix: r.prefix.clone(),
                after: Some("idempotency/t/1".into()),
                until: None,
                token: None,
            }
        );
        assert!(next.is_empty(), "the rest waits with the page");
        // The first key failed: from where the range began.
        let mut next = vec![];
        let wait = resume_after(&r, &keys, "idempotency/t/1", &mut next);
        assert!(matches!(wait, Range::Keys { after: Some(a), .. } if a == "idempotency/t/0"));
        // Split: the page alone waits, up to its last key; the split ranges
        // go on now.
        let mut next = split(&r.prefix, "idempotency/t/0003".into(), PAGE, SPLIT);
        assert!(next.len() > 1);
        let n = next.len();
        let wait = resume_after(&r, &keys, "idempotency/t/2", &mut next);
        assert!(
            matches!(&wait, Range::Keys { until: Some(u), .. } if u == "idempotency/t/3"),
            "{wait:?}"
        );
        assert_eq!(next.len(), n);
    }

    #[test]
    fn a_page_of_folders_gives_each_scope_its_range_and_the_rest_its_token() {
        let r = after_dirs_page(
            vec!["idempotency/a/".into(), "idempotency/a-b/".into()],
            Some("tok".into()),
            ListOrder::Any,
        );
        assert_eq!(
            r,
            vec![
                Range::Dir {
                    prefix: "idempotency/a/".into(),
                    token: None
                },
                Range::Dir {
                    prefix: "idempotency/a-b/".into(),
                    token: None
                },
                Range::Dirs {
                    token: Some("tok".into())
                },
            ]
        );
        assert!(after_dirs_page(vec![], None, ListOrder::Any).is_empty());
        // Under `bytes`, each scope's range of keys, from its beginning.
        assert_eq!(
            after_dirs_page(vec!["idempotency/a/".into()], None, ListOrder::Bytes),
            vec![Range::Keys {
                prefix: "idempotency/a/".into(),
                after: None,
                until: None,
                token: None,
            }]
        );
    }

    #[test]
    fn each_setting_lists_only_its_own_ranges_and_begins_with_its_own() {
        for order in [ListOrder::Bytes, ListOrder::Any] {
            assert!(Range::first(order).fits(order));
        }
        assert!(!Range::first(ListOrder::Bytes).fits(ListOrder::Any));
        // Finding the scopes by folders works under either setting.
        assert!(Range::first(ListOrder::Any).fits(ListOrder::Bytes));
        let dir = Range::Dir {
            prefix: "idempotency/t/".into(),
            token: Some("t".into()),
        };
        assert!(dir.fits(ListOrder::Any) && !dir.fits(ListOrder::Bytes));
        // The tail's items: the payload check's by the setting that made
        // them, the others under either; none of them records.
        let tail = [("slice", true, false), ("slices", false, true)];
        for (kind, bytes, any) in tail
            .into_iter()
            .chain([("tail", true, true), ("recent", true, true)])
        {
            let item = json!({"kind": kind, "slice": 3, "from": 0, "to": 4});
            let r: Range = serde_json::from_value(item).unwrap();
            let fits = (r.fits(ListOrder::Bytes), r.fits(ListOrder::Any));
            assert_eq!((fits, r.is_tail()), ((bytes, any), true), "{kind}");
        }
        assert!(!dir.is_tail() && !Range::first(ListOrder::Bytes).is_tail());
        // A folder's token is kept in the checkpoint, across runs.
        let json = serde_json::to_string(&dir).unwrap();
        assert_eq!(serde_json::from_str::<Range>(&json).unwrap(), dir);
    }
}
