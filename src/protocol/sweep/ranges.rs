//! The key space of `idempotency/`, cut into ranges that a pass lists side
//! by side: one per scope, and a full page splits by the next hex digit of
//! the record hash (`LIST_ORDER=bytes`); or one folder per scope, each
//! listed page by page from the store's continuation token
//! (`LIST_ORDER=any`). Pure planning, no requests.

use serde::{Deserialize, Serialize};

use super::{HEX, MAX_SPLIT_DIGITS, PAGE, RECORDS_PREFIX};
use crate::config::ListOrder;

/// A part of the key space still to list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(super) enum Range {
    /// Finding the scopes: the next key after `after` names the next scope.
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
    /// `LIST_ORDER=any`: finding the scopes, a page of the folders right
    /// under `idempotency/` (`Delimiter: /`) from `token`.
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
}

impl Range {
    /// Whether a pass under `order` lists this range: a pass begun under
    /// the other setting begins its ranges again.
    pub fn fits(&self, order: ListOrder) -> bool {
        match self {
            Range::Scopes { .. } | Range::Keys { .. } => order == ListOrder::Bytes,
            Range::Dirs { .. } | Range::Dir { .. } => order == ListOrder::Any,
        }
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
/// scope's folder, and the next page.
pub(super) fn after_dirs_page(prefixes: Vec<String>, next: Option<String>) -> Vec<Range> {
    let mut out: Vec<Range> = prefixes
        .into_iter()
        .map(|prefix| Range::Dir {
            prefix,
            token: None,
        })
        .collect();
    if let Some(token) = next {
        out.push(Range::Dirs { token: Some(token) });
    }
    out
}

/// The rest of a range after its full page ending at `last`: split by the
/// next hex digit of the record hash when it can still split, so that a
/// large scope is listed by many listings at once.
fn split(prefix: &str, last: String) -> Vec<Range> {
    let scope_end = prefix[RECORDS_PREFIX.len()..]
        .find('/')
        .map(|i| RECORDS_PREFIX.len() + i + 1);
    let digits = scope_end.map_or(usize::MAX, |e| prefix.len() - e);
    let next_char = last.as_bytes().get(prefix.len()).copied();
    match next_char {
        Some(c) if digits < MAX_SPLIT_DIGITS && HEX.contains(&c) => {
            let mut out = vec![Range::Keys {
                prefix: format!("{prefix}{}", c as char),
                after: Some(last),
                until: None,
                token: None,
            }];
            out.extend(HEX.iter().filter(|d| **d > c).map(|d| Range::Keys {
                prefix: format!("{prefix}{}", *d as char),
                after: None,
                until: None,
                token: None,
            }));
            out
        }
        _ => vec![Range::Keys {
            prefix: prefix.to_owned(),
            after: Some(last),
            until: None,
            token: None,
        }],
    }
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
/// listing's `token`, after an empty page); or, after a full page of an
/// unsplit range, the rest split by the next hex digit.
pub(super) fn after_keys_page(
    range: &KeysRange,
    keys: &[&str],
    ended: bool,
    token: Option<String>,
) -> Vec<Range> {
    match (keys.last(), ended) {
        (_, true) => vec![],
        (None, false) => vec![Range::Keys {
            prefix: range.prefix.clone(),
            after: range.after.clone(),
            until: range.until.clone(),
            token,
        }],
        (Some(last), false) if range.until.is_none() && keys.len() >= PAGE => {
            split(&range.prefix, (*last).to_owned())
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

    fn keys(r: &[Range]) -> Vec<(String, Option<String>)> {
        r.iter()
            .map(|r| match r {
                Range::Keys { prefix, after, .. } => (prefix.clone(), after.clone()),
                other => panic!("not a keys range: {other:?}"),
            })
            .collect()
    }

    #[test]
    fn a_full_range_splits_by_the_next_hex_digit_after_its_place() {
        let r = split("idempotency/t/", "idempotency/t/c3ff.json".into());
        let k = keys(&r);
        assert_eq!(
            k[0],
            (
                "idempotency/t/c".into(),
                Some("idempotency/t/c3ff.json".into())
            )
        );
        let rest: Vec<_> = k[1..]
            .iter()
            .map(|(p, a)| (p.as_str(), a.is_none()))
            .collect();
        assert_eq!(
            rest,
            [
                ("idempotency/t/d", true),
                ("idempotency/t/e", true),
                ("idempotency/t/f", true)
            ]
        );
    }

    #[test]
    fn a_range_two_digits_deep_still_splits_by_its_third() {
        let r = split("idempotency/a.b/ab", "idempotency/a.b/abe1.json".into());
        assert_eq!(
            keys(&r),
            [
                (
                    "idempotency/a.b/abe".into(),
                    Some("idempotency/a.b/abe1.json".into())
                ),
                ("idempotency/a.b/abf".into(), None)
            ]
        );
    }

    #[test]
    fn a_range_three_digits_deep_goes_on_without_splitting() {
        let r = split("idempotency/t/abc", "idempotency/t/abcd.json".into());
        assert_eq!(
            keys(&r),
            [(
                "idempotency/t/abc".into(),
                Some("idempotency/t/abcd.json".into())
            )]
        );
        // A key that is not a hex name does not split either.
        let r = split("idempotency/t/", "idempotency/t/README".into());
        assert_eq!(keys(&r).len(), 1);
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
            after_keys_page(&r, &["idempotency/t/1"], true, None),
            vec![]
        );
        assert_eq!(
            after_keys_page(&r, &[], false, Some("tok".into())),
            vec![Range::Keys {
                prefix: r.prefix.clone(),
                after: r.after.clone(),
                until: r.until.clone(),
                token: Some("tok".into()),
            }]
        );
        assert_eq!(
            after_keys_page(&r, &["idempotency/t/1", "idempotency/t/2"], false, None),
            vec![Range::Keys {
                prefix: r.prefix.clone(),
                after: Some("idempotency/t/2".into()),
                until: r.until.clone(),
                token: None,
            }]
        );
    }

    #[test]
    fn only_a_full_page_of_an_unsplit_range_splits() {
        let names: Vec<String> = (0..PAGE)
            .map(|i| format!("idempotency/t/0{i:04}"))
            .collect();
        let full: Vec<&str> = names.iter().map(String::as_str).collect();
        assert_eq!(
            after_keys_page(&range(None, None), &full, false, None).len(),
            16
        );
        assert_eq!(
            after_keys_page(&range(None, Some("idempotency/t/1")), &full, false, None).len(),
            1,
            "a range with an upper end was split already"
        );
        assert_eq!(
            after_keys_page(&range(None, None), &full[..PAGE - 1], false, None).len(),
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
        let mut next = split(&r.prefix, "idempotency/t/3".into());
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
        assert!(after_dirs_page(vec![], None).is_empty());
    }

    #[test]
    fn each_setting_lists_only_its_own_ranges_and_begins_with_its_own() {
        for order in [ListOrder::Bytes, ListOrder::Any] {
            assert!(Range::first(order).fits(order));
        }
        assert!(!Range::first(ListOrder::Bytes).fits(ListOrder::Any));
        assert!(!Range::first(ListOrder::Any).fits(ListOrder::Bytes));
        let dir = Range::Dir {
            prefix: "idempotency/t/".into(),
            token: Some("t".into()),
        };
        assert!(dir.fits(ListOrder::Any) && !dir.fits(ListOrder::Bytes));
        // A folder's token is kept in the checkpoint, across runs.
        let json = serde_json::to_string(&dir).unwrap();
        assert_eq!(serde_json::from_str::<Range>(&json).unwrap(), dir);
    }
}
