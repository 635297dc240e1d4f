//! `LIST_ORDER=any`: the scheduled pass over a store that lists in its own
//! order, maybe without `StartAfter`, and only by prefixes that end in `/`
//! (S3 Express One Zone; any store `idem doctor --probe` finds out of byte
//! order). It relies on no order at all:
//!
//! - the scopes are the folders right under `idempotency/` (`Delimiter: /`,
//!   a page of up to 1,000 a request);
//! - each scope's folder is listed page by page from the store's
//!   continuation token, folders side by side; a token is the store's own
//!   place in its own order, and it is kept in the checkpoint across runs;
//! - a page whose reads stop (the deadline, a retryable failure) waits for
//!   the next run with the token it was listed from: its records before the
//!   stop are read again then, at most one page's worth per folder per stop
//!   (the only double reads);
//! - a token the store refuses (it may not keep them forever) starts the
//!   folder again from its beginning, counted as an error.
//!
//! Each record is listed once per pass and judged against the pass's one
//! window, as under `LIST_ORDER=bytes` (`pass.rs`).

use chrono::{DateTime, Utc};

use super::pass::RangeStep;
use super::ranges::{Range, after_dirs_page};
use super::{RECORDS_PREFIX, SweepOptions, SweepSummary};
use crate::protocol::engine::{Engine, Failure};
use crate::store::{ObjectMeta, StoreError};

impl Engine {
    /// One page of the folders under `idempotency/`: a range for each
    /// scope, and the next page.
    pub(super) async fn list_scope_dirs(
        &self,
        token: Option<String>,
        opts: &SweepOptions,
    ) -> RangeStep {
        let tally = SweepSummary {
            lists: 1,
            ..SweepSummary::default()
        };
        match self
            .with_retries(self.request_deadline(opts.deadline), || {
                self.store.list_dirs(RECORDS_PREFIX, token.clone())
            })
            .await
        {
            Ok(page) => RangeStep {
                tally,
                next: after_dirs_page(page.prefixes, page.next, self.settings.list_order),
                wait: vec![],
            },
            Err(e) => self.refused_or_failed(Range::Dirs { token }, e, tally),
        }
    }

    /// One page of a scope's folder from `token`; its due records are read.
    pub(super) async fn list_dir(
        &self,
        prefix: String,
        token: Option<String>,
        window: (Option<DateTime<Utc>>, DateTime<Utc>),
        limit: usize,
        opts: &SweepOptions,
    ) -> RangeStep {
        let (mut tally, page) = self
            .list_records(&prefix, None, token.clone(), limit, opts)
            .await;
        let page = match page {
            Ok(p) => p,
            Err(e) => return self.refused_or_failed(Range::Dir { prefix, token }, e, tally),
        };
        tally.scanned += page.objects.len() as u64;
        let due: Vec<&ObjectMeta> = page
            .objects
            .iter()
            .filter(|m| self.due(m.last_modified, window.0, window.1))
            .collect();
        let stopped = self.read_due(&due, opts, &mut tally).await.is_some();
        if stopped {
            // This page again, from the token it was listed from: by the
            // share handed on when the invocation's deadline stopped it,
            // else (a failure) at the next scheduled run.
            let again = vec![Range::Dir { prefix, token }];
            let past = self.past(opts);
            return RangeStep {
                tally,
                next: if past { again.clone() } else { vec![] },
                wait: if past { vec![] } else { again },
            };
        }
        RangeStep {
            tally,
            next: page
                .next
                .map(|t| Range::Dir {
                    prefix,
                    token: Some(t),
                })
                .into_iter()
                .collect(),
            wait: vec![],
        }
    }

    /// A listing from a kept token that the store refuses for good: the
    /// range begins again (counted as an error); any other failure waits
    /// for the next run as it is.
    fn refused_or_failed(&self, range: Range, e: Failure, tally: SweepSummary) -> RangeStep {
        let refused = matches!(e, Failure::Store(StoreError::Fatal(_)));
        let restart = match &range {
            Range::Dir {
                prefix,
                token: Some(_),
            } if refused => Some(Range::Dir {
                prefix: prefix.clone(),
                token: None,
            }),
            Range::Dirs { token: Some(_) } if refused => Some(Range::Dirs { token: None }),
            _ => None,
        };
        match restart {
            Some(again) => {
                tracing::warn!(error = %crate::protocol::error::SubmitError::from(e), "the store refused a kept continuation token: the range is listed again from its beginning");
                let mut tally = tally;
                tally.errors += 1;
                RangeStep {
                    tally,
                    next: vec![],
                    wait: vec![again],
                }
            }
            None => self.range_failed(range, e, tally),
        }
    }
}
