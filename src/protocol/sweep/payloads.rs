//! Orphan payloads: `payloads/{task_id}/input.json` objects that no task
//! names. A submit that offloads its input writes the payload beside its
//! record claim; when the claim loses (the key is another record's) it
//! deletes the payload beside its answer, but a process that dies in
//! between leaves it behind, and a record whose task was never written
//! before its finish deadline leaves its payload too. The scheduled pass
//! lists `payloads/` once its records are done and deletes each input
//! payload whose task object is not in the bucket, once no task can be
//! written for it any more (docs/protocol.md, "Offloaded inputs").

use chrono::{DateTime, Duration, Utc};
use futures::StreamExt;
use uuid::Uuid;

use super::{PAGE, READS_AT_ONCE, SweepOptions, SweepSummary};
use crate::protocol::engine::{Engine, Failure};
use crate::protocol::error::SubmitError;
use crate::store::{ObjectMeta, StoreError};

/// Where offloaded inputs are.
pub const PAYLOADS_PREFIX: &str = "payloads/";

/// How long after its first check a payload is checked again by later
/// passes (a missed daily pass is made up for); never after that.
const RECHECK_FOR: Duration = Duration::days(7);

/// The task id of an input payload's key; `None` for anything else
/// (buquet's `output.json`, objects of other writers).
fn input_payload_id(key: &str) -> Option<Uuid> {
    let rest = key.strip_prefix(PAYLOADS_PREFIX)?;
    let (id, file) = rest.split_once('/')?;
    (file == "input.json").then(|| Uuid::parse_str(id).ok())?
}

impl Engine {
    /// The age at which a payload with no task is an orphan: a task can be
    /// written until its record's finish deadline (the record is written
    /// with its payload, or before a finisher writes the payload) and land
    /// up to 15 minutes after it; an operation's length of slack on top.
    fn orphan_after(&self) -> Duration {
        self.settings.finish_window
            + self.settings.late_write_margin
            + self.settings.operation_timeout
    }

    /// Lists `payloads/` and deletes the input payloads, aged between
    /// [`Engine::orphan_after`] and a week more at `now` (S3's time), whose
    /// task object is not in the bucket under any shard length (1 to 4
    /// digits: buquet's clients may use another than ours). Counts them in
    /// `payloads_deleted` (dry run: counted, not deleted).
    pub(super) async fn sweep_payloads(
        &self,
        opts: &SweepOptions,
        now: DateTime<Utc>,
        summary: &mut SweepSummary,
    ) -> Result<(), SubmitError> {
        let (from, to) = (self.orphan_after(), self.orphan_after() + RECHECK_FOR);
        let mut page: Option<String> = None;
        loop {
            if opts.deadline.is_some_and(|d| self.now() >= d) {
                return Ok(());
            }
            let listed = self
                .with_retries(self.request_deadline(opts.deadline), || {
                    self.store.list(PAYLOADS_PREFIX, None, page.clone(), PAGE)
                })
                .await?;
            summary.lists += 1;
            let due: Vec<(ObjectMeta, Uuid)> = listed
                .objects
                .into_iter()
                .filter_map(|o| {
                    let id = input_payload_id(&o.key)?;
                    let age = now - o.last_modified;
                    (age >= from && age < to).then_some((o, id))
                })
                .collect();
            let outcomes: Vec<Result<bool, SubmitError>> = futures::stream::iter(due)
                .map(|(o, id)| self.sweep_payload(o, id, opts))
                .buffer_unordered(READS_AT_ONCE)
                .collect()
                .await;
            for r in outcomes {
                match r {
                    Ok(true) => summary.payloads_deleted += 1,
                    Ok(false) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "an input payload could not be checked");
                        summary.errors += 1;
                    }
                }
            }
            match listed.next {
                Some(n) => page = Some(n),
                None => return Ok(()),
            }
        }
    }

    /// One payload: `true` if it names no task and was deleted.
    async fn sweep_payload(
        &self,
        o: ObjectMeta,
        id: Uuid,
        opts: &SweepOptions,
    ) -> Result<bool, SubmitError> {
        let deadline = self.request_deadline(opts.deadline);
        let text = id.hyphenated().to_string();
        let heads = (1..=4).map(|n| {
            let key = format!("tasks/{}/{text}.json", &text[..n]);
            async move { self.with_retries(deadline, || self.store.head(&key)).await }
        });
        for r in futures::future::join_all(heads).await {
            match r {
                Ok(_) => return Ok(false),
                Err(Failure::Store(StoreError::NotFound)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        tracing::info!(payload = %o.key, "an input payload that no task names: deleted");
        if opts.dry_run {
            return Ok(true);
        }
        // If-Match what was listed, where the store honours it. Where it
        // may not (CONDITIONAL_DELETE=off), nothing rests on it: the payload
        // is older than any task write for it can land, no task names it,
        // and its key is a task id no other submit uses.
        let if_match = self.settings.conditional_delete.then_some(&o.etag);
        match self
            .with_retries(deadline, || self.store.delete(&o.key, if_match))
            .await
        {
            Ok(()) | Err(Failure::Store(StoreError::NotFound)) => Ok(true),
            // Rewritten since (a finisher's If-None-Match cannot, so another
            // writer's): left for the next pass.
            Err(Failure::Store(StoreError::PreconditionFailed)) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_input_payloads_named_by_a_task_id_are_candidates() {
        let id = "a1b2c3d4-0000-4000-8000-000000000000";
        assert!(input_payload_id(&format!("payloads/{id}/input.json")).is_some());
        assert!(input_payload_id(&format!("payloads/{id}/output.json")).is_none());
        assert!(input_payload_id("payloads/not-a-uuid/input.json").is_none());
        assert!(input_payload_id(&format!("tasks/a/{id}.json")).is_none());
    }
}
