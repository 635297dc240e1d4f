//! The crash points of a first submit after its record, on a real S3 API
//! (moto, SeaweedFS) with a real due queue (moto's SQS), in both modes of
//! `RECORD_EVENTS`: the submit that stops there, the due queue drained as
//! the sweeper's event source would drain it, and buquet's worker on the
//! bucket afterwards. Shared by tests/due_submitter.rs (moto) and
//! tests/seaweedfs.rs.

use std::process::Command;

use chrono::Duration;
use idempotent_submit::due_sender::SqsDueSender;
use idempotent_submit::store::{Fault, FaultyStore, Op, S3Store, StoreError};
use idempotent_submit::testing::intake::due::{DueMessage, handle_messages};
use idempotent_submit::testing::protocol::SweepSummary;
use idempotent_submit::{Queue, RetryPolicy, Settings};
use serde_json::{Value, json};

/// How long after its write a record is due in these tests (the due queue's
/// delay and `STALE_CREATING_AFTER_SECONDS`): real seconds.
pub const STALE_SECONDS: u32 = 4;

/// Settings with a short stale age and retries that do not wait.
pub fn settings() -> Settings {
    Settings {
        stale_creating_after: Duration::seconds(i64::from(STALE_SECONDS)),
        retry: RetryPolicy::immediate(),
        ..Settings::default()
    }
}

/// Who sends the record's due message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The bucket's S3 event (moto's notification of its own writes).
    Bucket,
    /// The submit itself, beside the record's PUT.
    Submitter,
}

/// Where a first submit stops once its record has landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashPoint {
    /// The process dies right after its record's PUT.
    AfterRecord,
    /// It dies right after its task's PUT, its marker never landed.
    AfterTask,
    /// Its task's PUT is lost in flight, every attempt, beside a marker
    /// that lands; the submit gives up (503) and nobody submits again.
    TaskLost,
}

impl CrashPoint {
    pub const ALL: [CrashPoint; 3] = [
        CrashPoint::AfterRecord,
        CrashPoint::AfterTask,
        CrashPoint::TaskLost,
    ];

    /// The faults that stop it there: (call, key prefix, fault, how many
    /// times), for a [`FaultyStore`] in front of the bucket.
    pub fn faults(self) -> Vec<(Op, &'static str, Fault, usize)> {
        let lost = || Fault::Fail(StoreError::Unavailable("lost in flight".into()));
        match self {
            CrashPoint::AfterRecord => vec![(Op::PutCreate, "idempotency/", Fault::CrashAfter, 1)],
            // The marker never lands, and the process dies once the task has.
            CrashPoint::AfterTask => vec![
                (Op::Put, "ready/", lost(), usize::MAX),
                (Op::PutCreate, "tasks/", Fault::CrashAfter, 1),
            ],
            CrashPoint::TaskLost => vec![(Op::PutCreate, "tasks/", lost(), usize::MAX)],
        }
    }

    /// `store` behind a fault injector that stops a first submit here.
    pub fn in_front_of<S: idempotent_submit::Store + Clone>(self, store: S) -> FaultyStore<S> {
        let f = FaultyStore::new(store);
        for (op, prefix, fault, times) in self.faults() {
            f.inject(Some(op), prefix, 1, times, fault);
        }
        f
    }
}

/// A first submit of `key` on `store` that stops at `point`; under
/// [`Mode::Submitter`] it sends its due message to `due_url` (moto's SQS).
pub async fn interrupted_submit(
    store: &S3Store,
    point: CrashPoint,
    mode: Mode,
    due_url: &str,
    key: &str,
) {
    let mut q = Queue::new(point.in_front_of(store.clone()), settings());
    if mode == Mode::Submitter {
        let sender = SqsDueSender::new(super::moto::moto_sqs(), due_url);
        q = q.with_due_sender(sender, store.bucket());
    }
    let e = q
        .submit("remind", json!({"key": key}))
        .idempotency_key(key)
        .await
        .expect_err("the submit stops part-way");
    assert!(
        matches!(e, idempotent_submit::SubmitError::Storage(_)),
        "{e:?}"
    );
}

/// Drains the due queue at `url` as the sweeper's event source would (a
/// receive of what is visible, the batch to `handle_messages`, the handled
/// messages deleted, the others left to come back), until `finished`
/// records were finished or a minute passed; the summary of every batch.
pub async fn drain_until_finished(
    url: &str,
    queue: &Queue,
    bucket: &str,
    finished: u64,
) -> SweepSummary {
    let sqs = super::moto::moto_sqs();
    let mut summary = SweepSummary::default();
    let end = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while summary.finished < finished && std::time::Instant::now() < end {
        let got = super::moto::receive_now(&sqs, url, None).await;
        if got.is_empty() {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            continue;
        }
        let batch: Vec<DueMessage> = got
            .iter()
            .map(|m| DueMessage {
                id: m.message_id().unwrap_or_default().to_owned(),
                body: m.body().unwrap_or_default().to_owned(),
            })
            .collect();
        let out = handle_messages(queue, bucket, &batch, false, None).await;
        summary.add(&out.summary);
        for m in got {
            if !out.retry.iter().any(|r| Some(r.as_str()) == m.message_id()) {
                sqs.delete_message()
                    .queue_url(url)
                    .receipt_handle(m.receipt_handle().unwrap_or_default())
                    .send()
                    .await
                    .expect("deleting a handled message");
            }
        }
    }
    summary
}

/// Where buquet's client finds the bucket, and how it signs.
pub struct BuquetAt<'a> {
    pub endpoint: &'a str,
    pub bucket: &'a str,
    pub access_key_id: &'a str,
    pub secret_access_key: &'a str,
}

/// Runs tests/interop/buquet_client.py (buquet 0.1's own client and worker)
/// against a versioned bucket; its JSON answer.
pub fn buquet(at: &BuquetAt<'_>, args: &[&str]) -> Value {
    let out = Command::new("python3")
        .arg(format!(
            "{}/tests/interop/buquet_client.py",
            env!("CARGO_MANIFEST_DIR")
        ))
        .args(args)
        .env_remove("BUQUET_ALLOW_NO_VERSIONING")
        .env("BUQUET_ENDPOINT", at.endpoint)
        .env("BUQUET_BUCKET", at.bucket)
        .env("AWS_ACCESS_KEY_ID", at.access_key_id)
        .env("AWS_SECRET_ACCESS_KEY", at.secret_access_key)
        .env("AWS_REGION", "us-east-1")
        .output()
        .expect("python3 runs");
    buquet_answer(&out, args)
}

/// buquet's worker runs the `remind` task `task_id` once: it completes it,
/// and a second worker finds nothing to run.
pub fn buquet_runs_once(at: &BuquetAt<'_>, task_id: &str) {
    let run = buquet(at, &["work", "remind", "1"]);
    assert_eq!(run["processed"], 1, "{run}");
    let task = buquet(at, &["get", task_id]);
    assert_eq!(task["status"], "completed", "{task}");
    let idle = buquet(at, &["idle", "remind", "2"]);
    assert_eq!(idle["processed"], 0, "run once: {idle}");
}

/// The JSON a run of buquet's client printed, which must have succeeded.
pub fn buquet_answer(out: &std::process::Output, args: &[&str]) -> Value {
    super::assert_ran(
        out,
        &format!("buquet {args:?} failed (is `buquet` installed? make test installs it)"),
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// What the bucket holds for the one keyed task of a scenario: its task
/// objects and markers, and the record's task id.
pub async fn holdings(store: &S3Store) -> (Vec<String>, Vec<String>, String) {
    let keys = super::all_keys(store).await;
    let tasks: Vec<String> = keys
        .iter()
        .filter(|k| k.starts_with("tasks/"))
        .cloned()
        .collect();
    let markers: Vec<String> = keys
        .iter()
        .filter(|k| k.starts_with("ready/"))
        .cloned()
        .collect();
    let record = super::first_under(&keys, "idempotency/");
    let body = idempotent_submit::Store::get(store, &record)
        .await
        .expect("reading the record")
        .body;
    let rec = idempotent_submit::testing::protocol::Record::parse(&body).expect("a record");
    (tasks, markers, rec.task_id.to_string())
}
