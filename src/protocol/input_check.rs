//! The input checked against its task type's published schema
//! (`VALIDATE_INPUT_SCHEMAS`, src/protocol/schema.rs) before anything is
//! written, and the answer to a submit that the check refused: with a key,
//! the key's promise comes first.

use chrono::{DateTime, Utc};

use super::engine::Engine;
use super::error::SubmitError;
use super::hash;
use super::names::IfTaskFailed;
use super::record::record_key;
use super::replay::{conflict_with, frees};
use super::request::{SubmitRequest, Submitted};
#[cfg(feature = "schemas")]
use crate::store::ETag;
#[cfg(not(feature = "schemas"))]
use crate::store::StoreError;

/// The input checked against its task type's published schema
/// (`VALIDATE_INPUT_SCHEMAS`, src/protocol/schema.rs), before anything is
/// written, and the answer to a submit that the check refused.
impl Engine {
    /// Checks `req`'s input against its task type's published schema, when
    /// `VALIDATE_INPUT_SCHEMAS` is on. Writes nothing.
    pub(super) async fn check_input(
        &self,
        req: &SubmitRequest,
        op_deadline: DateTime<Utc>,
    ) -> Result<(), SubmitError> {
        if !self.settings.validate_input_schemas {
            return Ok(());
        }
        self.check_schema(req, op_deadline).await
    }

    /// The check: the process's cache of schemas, read through the one retry
    /// loop.
    #[cfg(feature = "schemas")]
    async fn check_schema(
        &self,
        req: &SubmitRequest,
        op_deadline: DateTime<Utc>,
    ) -> Result<(), SubmitError> {
        let read = |key: String, etag: Option<ETag>| async move {
            self.with_retries(op_deadline, || async {
                match &etag {
                    Some(etag) => self.store.get_if_none_match(&key, etag).await,
                    None => self.store.get(&key).await,
                }
            })
            .await
        };
        self.schemas
            .check(
                &req.task_type,
                req.input.as_json(),
                self.clock.as_ref(),
                self.settings.schema_cache_ttl,
                read,
            )
            .await
    }

    /// A build without a validator checks nothing: the submit is refused,
    /// never let through unchecked (`Config` refuses the setting at start
    /// already; this is a queue built on settings that ask for it anyway).
    #[cfg(not(feature = "schemas"))]
    async fn check_schema(
        &self,
        _req: &SubmitRequest,
        _op_deadline: DateTime<Utc>,
    ) -> Result<(), SubmitError> {
        Err(SubmitError::Storage(StoreError::Fatal(format!(
            "VALIDATE_INPUT_SCHEMAS: {}",
            crate::config::NO_SCHEMAS_BUILD
        ))))
    }

    /// The answer to a submit whose check failed with `refusal`. Without a
    /// key, or for anything but an invalid input, the refusal. With a key,
    /// the key's promise comes first: the record of the key is read (one GET,
    /// on this path only), and a live record is answered as the protocol
    /// answers it (a replay of the same request, finished if it was
    /// interrupted; a conflict with another request; a submit still
    /// undetermined), because the input was accepted when the record was
    /// written and the schema may have changed since. No record, or an
    /// expired one (the protocol would write a new task with this input):
    /// the refusal, and nothing is written.
    pub(super) async fn answer_refused(
        &self,
        req: &SubmitRequest,
        refusal: SubmitError,
        op_deadline: DateTime<Utc>,
    ) -> Result<Submitted, SubmitError> {
        let (SubmitError::InputInvalid { .. }, Some(k)) = (&refusal, &req.idempotency) else {
            return Err(refusal);
        };
        let scope = k.scope.resolve(&req.task_type).to_owned();
        let key_hash = hash::key_hash(&scope, &k.key, req.tenant.as_ref());
        let rkey = record_key(&scope, &key_hash);
        // Whether the key holds a record cannot be told on an error: a
        // retry can.
        let Some((mut existing, meta)) = self.read_record(&rkey, op_deadline).await? else {
            return Err(refusal);
        };
        existing.scope.get_or_insert_with(|| scope.clone());
        // A reset record is no record: this submit would claim over it.
        if existing.is_reset() || existing.is_expired(self.s3_earliest()?) {
            return Err(refusal);
        }
        if let Some(kind) = conflict_with(&existing, req, &req.options.hash()) {
            return Err(SubmitError::Conflict {
                kind,
                task_id: existing.task_id,
            });
        }
        // A key whose task failed is free to a `new_task` submit, which
        // this one would have claimed: the refusal stands.
        let status = match req.if_task_failed {
            IfTaskFailed::Replay => None,
            IfTaskFailed::NewTask => {
                let s = self.read_status(&existing.task_key, op_deadline).await?;
                if frees(s.as_deref()) {
                    return Err(refusal);
                }
                Some(s)
            }
        };
        // A task id of nobody's: this submit wrote nothing, so the answer is
        // a replay.
        self.answer_existing(
            &rkey,
            &existing,
            &meta,
            uuid::Uuid::nil(),
            status,
            op_deadline,
        )
        .await
    }
}
