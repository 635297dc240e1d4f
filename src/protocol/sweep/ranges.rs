//! The key space of `idempotency/`, cut into ranges that a pass lists side
//! by side: one per scope, and a full page splits by the next hex digit of
//! the record hash. Pure planning, no requests.

use serde::{Deserialize, Serialize};

use super::{HEX, MAX_SPLIT_DIGITS, RECORDS_PREFIX};

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
}

/// The rest of a range after its full page ending at `last`: split by the
/// next hex digit of the record hash when it can still split, so that a
/// large scope is listed by many listings at once.
pub(super) fn split(prefix: &str, last: String) -> Vec<Range> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(r: &[Range]) -> Vec<(String, Option<String>)> {
        r.iter()
            .map(|r| match r {
                Range::Keys { prefix, after, .. } => (prefix.clone(), after.clone()),
                Range::Scopes { .. } => panic!("a scope range"),
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
}
