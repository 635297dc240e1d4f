//! The operator CLI, `idem` (docs/operations.md, "The CLI"). Output is JSON on
//! stdout; the exit code says what happened.

use clap::{Parser, Subcommand};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::config::Config;
use crate::protocol::names::Principal;
use crate::protocol::options::{Kind, TaskOption};
use crate::protocol::{
    ErrorKind, IfTaskFailed, Reset, Scope, SubmitError, TaskOptions, Tenant, Ttl, ValidationError,
};
use crate::queue::Queue;

#[derive(Debug, Parser)]
#[command(
    name = "idem",
    about = "Operate the idempotent submit protocol on a queue bucket",
    version
)]
pub struct Cli {
    /// The bucket (default: BUCKET_NAME).
    #[arg(long, global = true)]
    pub bucket: Option<String>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Submit a task; prints the success body of the HTTP API. With
    /// `--batch FILE`, submits one `POST /tasks` body per line of FILE (`-`:
    /// stdin) as `POST /tasks/batch` does, MAX_BATCH_TASKS at a time, and
    /// prints one result per line, in order: the success body with its
    /// `status_code` (201, 200), or the item's problem. Exit 0 when every
    /// line was created or replayed; else 1 if a line failed in a way a
    /// retry may fix (send the file again: each line replays on its key),
    /// else 3 if a line conflicted, else 2 (invalid lines, or no file).
    Submit {
        /// The task type.
        #[arg(long = "type", required_unless_present = "batch")]
        task_type: Option<String>,
        /// The input, as JSON.
        #[arg(long, required_unless_present = "batch")]
        input: Option<String>,
        /// A file of JSON lines, each a `POST /tasks` body with its own
        /// `idempotency_key` (`-`: stdin).
        #[arg(long, conflicts_with_all = ["task_type", "input", "key", "ttl_seconds", "scope", "if_task_failed", "task_options"])]
        batch: Option<std::path::PathBuf>,
        /// The idempotency key.
        #[arg(long)]
        key: Option<String>,
        /// How long the key is remembered.
        #[arg(long)]
        ttl_seconds: Option<i64>,
        /// The key's scope: a custom name, or `queue` (default: the task type).
        #[arg(long)]
        scope: Option<String>,
        /// When the key's task ended failed or cancelled: `replay` it, or
        /// claim the key for a `new_task` (default: `IF_TASK_FAILED`).
        #[arg(long)]
        if_task_failed: Option<String>,
        #[command(flatten)]
        options: Box<TaskOptionArgs>,
    },
    /// Print the idempotency record of a key (without `pending_task`). With
    /// `--reset`, forget the key instead, as `DELETE /idempotency-keys/{key}`
    /// does: exit 0 reset, 4 not found, 1 in progress (or changed meanwhile).
    Key {
        /// The scope's name: the task type, `queue`, or a custom name.
        #[arg(long)]
        scope: String,
        #[arg(long)]
        key: String,
        /// The tenant, under TENANT_ISOLATION=on: the caller's principal as
        /// the function names it, `iam:<ARN>` (an assumed role's session is
        /// dropped), `jwt:<length of iss>:<iss>:<sub>` or
        /// `lambda:<principalId>`. Without it, the shared namespace.
        #[arg(long)]
        tenant: Option<String>,
        /// Delete the key's record, so that the next submit of the key
        /// creates a new task; the old task is left as it is.
        #[arg(long)]
        reset: bool,
    },
    /// Print a task object.
    Task { task_id: String },
    /// Run one scheduled-style pass and print its summary; with
    /// `--due-queue`, handle the due queue's messages until it is empty.
    Sweep {
        /// Report what would be done; change nothing (due-queue messages are
        /// left in the queue).
        #[arg(long)]
        dry_run: bool,
        /// The due queue's URL: receive its record events and handle them as
        /// the function does.
        #[arg(long)]
        due_queue: Option<String>,
        /// Long-poll wait of each receive, in seconds (0 to 20). A local SQS
        /// served one request at a time (moto) is held for the wait.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(i32).range(0..=20))]
        wait_seconds: i32,
    },
    /// Read the bucket's versioning, notification, lifecycle and encryption
    /// and report what is missing; exit 5 when a guarantee depends on it.
    Doctor {
        /// The due queue the record events must reach (the stack's
        /// `DueQueueArn`); without it, any queue will do.
        #[arg(long)]
        due_queue_arn: Option<String>,
        /// Also measure the store's capabilities (writes, reads and deletes
        /// objects under `sweeper/probe/`, and leaves none): the settings it
        /// needs, or that it cannot host the service.
        #[arg(long)]
        probe: bool,
    },
}

/// The task options of `idem submit`: one flag each, made from the options'
/// table ([`TaskOption`]), as the body fields their flags name; checked as
/// a `POST /tasks` body's fields are (README lists the bounds).
#[derive(Debug, Clone, Default)]
pub struct TaskOptionArgs {
    /// The flags given, as a body's fields (`retry_policy` still its text).
    given: Vec<(TaskOption, Value)>,
}

impl TaskOptionArgs {
    /// The options, through the same checks as a `POST /tasks` body.
    pub fn parse(&self) -> Result<TaskOptions, ValidationError> {
        let mut m = serde_json::Map::new();
        for (option, v) in &self.given {
            let v = match (option, v) {
                (TaskOption::RetryPolicy, Value::String(text)) => {
                    serde_json::from_str(text.as_str()).map_err(|e| {
                        ValidationError::field("retry_policy", format!("is not JSON: {e}"))
                    })?
                }
                (_, v) => v.clone(),
            };
            m.insert(option.name().to_owned(), v);
        }
        TaskOptions::from_body(&m)
    }
}

impl clap::Args for TaskOptionArgs {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        let mut cmd = cmd;
        for option in TaskOption::ALL {
            let spec = option.spec();
            let arg = clap::Arg::new(spec.flag).long(spec.flag).help(spec.help);
            cmd = cmd.arg(match spec.kind {
                Kind::Flag => arg.action(clap::ArgAction::SetTrue),
                Kind::Whole { .. } => arg.value_parser(clap::value_parser!(u64)),
                Kind::Time | Kind::Policy => arg,
            });
        }
        cmd.group(
            clap::ArgGroup::new("task_options")
                .multiple(true)
                .required(false)
                .args(TaskOption::ALL.map(|o| o.spec().flag)),
        )
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

impl clap::FromArgMatches for TaskOptionArgs {
    fn from_arg_matches(m: &clap::ArgMatches) -> Result<Self, clap::Error> {
        let mut args = Self::default();
        args.update_from_arg_matches(m)?;
        Ok(args)
    }

    fn update_from_arg_matches(&mut self, m: &clap::ArgMatches) -> Result<(), clap::Error> {
        for option in TaskOption::ALL {
            let spec = option.spec();
            let v = match spec.kind {
                Kind::Flag => m.get_flag(spec.flag).then_some(Value::Bool(true)),
                Kind::Whole { .. } => m.get_one::<u64>(spec.flag).map(|n| Value::from(*n)),
                Kind::Time | Kind::Policy => m
                    .get_one::<String>(spec.flag)
                    .map(|s| Value::String(s.clone())),
            };
            if let Some(v) = v {
                self.given.retain(|(o, _)| *o != option);
                self.given.push((option, v));
            }
        }
        Ok(())
    }
}

/// Exit codes.
pub mod exit {
    pub const OK: i32 = 0;
    pub const FAILED: i32 = 1;
    pub const INVALID: i32 = 2;
    pub const CONFLICT: i32 = 3;
    pub const NOT_FOUND: i32 = 4;
    /// `idem doctor`: something a guarantee depends on is missing.
    pub const UNHEALTHY: i32 = 5;
}

/// What a command prints and how the process exits.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub exit: i32,
    pub output: Value,
}

impl Outcome {
    /// What goes to stdout: the output's JSON; a list (the results of
    /// `submit --batch`) one element per line.
    pub fn render(&self) -> String {
        match &self.output {
            Value::Array(items) => items
                .iter()
                .map(Value::to_string)
                .collect::<Vec<_>>()
                .join("\n"),
            v => v.to_string(),
        }
    }
}

/// `submit --batch`: every line of `path` submitted as a batch item, the
/// settings' `max_batch_tasks` at a time.
async fn submit_batch(queue: &Queue, path: &std::path::Path) -> Outcome {
    use crate::intake::SubmitBody;
    use crate::intake::batch::{item_result, prepare, submit_prepared};
    let text = match read_lines_file(path) {
        Ok(t) => t,
        Err(e) => return error(exit::INVALID, "invalid_request", e),
    };
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.is_empty() {
        return error(
            exit::INVALID,
            "invalid_request",
            format!(
                "{}: no task in it (one POST /tasks body per line)",
                path.display()
            ),
        );
    }
    let mut results: Vec<Result<crate::Submitted, SubmitError>> = Vec::with_capacity(lines.len());
    for chunk in lines.chunks(queue.settings().max_batch_tasks.max(1)) {
        let prepared = chunk
            .iter()
            .map(|line| prepare(queue, SubmitBody::parse(line.as_bytes()), None))
            .collect();
        results.extend(submit_prepared(queue, prepared).await);
    }
    Outcome {
        exit: batch_exit(&results),
        output: Value::Array(results.iter().map(|r| item_result(r, "")).collect()),
    }
}

/// The text of `path` (`-`: stdin), or what stopped its reading.
fn read_lines_file(path: &std::path::Path) -> Result<String, String> {
    let text = if path.as_os_str() == "-" {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s).map(|_| s)
    } else {
        std::fs::read_to_string(path)
    };
    text.map_err(|e| format!("{}: {e}", path.display()))
}

/// `submit --batch`'s exit: 0 when every line was created or replayed; else
/// 1 if a line failed in a way a retry may fix, else 3 if a line
/// conflicted, else 2.
fn batch_exit(results: &[Result<crate::Submitted, SubmitError>]) -> i32 {
    let failed = |f: fn(&SubmitError) -> bool| results.iter().any(|r| r.as_ref().is_err_and(f));
    if results.iter().all(Result::is_ok) {
        exit::OK
    } else if failed(|e| submit_error(e).exit == exit::FAILED) {
        exit::FAILED
    } else if failed(|e| matches!(e, SubmitError::Conflict { .. })) {
        exit::CONFLICT
    } else {
        exit::INVALID
    }
}

fn error(exit: i32, code: &str, detail: impl ToString) -> Outcome {
    Outcome {
        exit,
        output: json!({"error": code, "detail": detail.to_string()}),
    }
}

fn submit_error(e: &SubmitError) -> Outcome {
    let exit = match e.kind() {
        ErrorKind::Invalid
        | ErrorKind::KeyMissing
        | ErrorKind::TooLarge
        | ErrorKind::InputInvalid => exit::INVALID,
        ErrorKind::Conflict => exit::CONFLICT,
        ErrorKind::InProgress | ErrorKind::Unavailable | ErrorKind::Broken => exit::FAILED,
    };
    let mut out = error(exit, e.code(), e);
    // An input refused by its schema says where, as the HTTP problem does.
    if let SubmitError::InputInvalid {
        errors, omitted, ..
    } = e
    {
        out.output["errors"] = json!(errors);
        out.output["errors_omitted"] = json!(omitted);
    }
    out
}

/// The configuration for `cli`: the environment, with `--bucket` over
/// `BUCKET_NAME`.
pub fn config(cli: &Cli) -> Result<Config, Outcome> {
    let bucket = cli.bucket.clone();
    Config::from_lookup(|k| {
        if k == "BUCKET_NAME"
            && let Some(b) = &bucket
        {
            return Some(b.clone());
        }
        std::env::var(k).ok()
    })
    .map_err(|e| invalid_configuration(&e))
}

/// A configuration that cannot be used (a variable, or what it names).
pub fn invalid_configuration(e: &crate::ConfigError) -> Outcome {
    error(exit::INVALID, "invalid_configuration", e)
}

/// `idem key`: the record of a key (without `pending_task`), with how a
/// replay would judge it.
async fn key_record(queue: &Queue, scope: &str, key: &str, tenant: Option<&Tenant>) -> Outcome {
    match queue.record(scope, key, tenant).await {
        Ok(Some((mut rec, meta))) => {
            let phase = match queue.engine().phase(&rec, &meta).await {
                Ok(p) => p,
                Err(e) => return submit_error(&e),
            };
            rec.pending_task = None;
            let mut output = serde_json::to_value(&rec).unwrap_or(Value::Null);
            output["phase"] = Value::from(phase.phase);
            output["task_status"] = serde_json::to_value(&phase.task_status).unwrap_or(Value::Null);
            Outcome {
                exit: exit::OK,
                output,
            }
        }
        Ok(None) => error(exit::NOT_FOUND, "not_found", "no record for this key"),
        Err(e) => submit_error(&e),
    }
}

/// `idem key --reset`: frees the key, as `DELETE /idempotency-keys/{key}`.
async fn reset_key(queue: &Queue, scope: &str, key: &str, tenant: Option<&Tenant>) -> Outcome {
    match queue.reset_key(scope, key, tenant).await {
        Ok(Reset::Done { old_task_id }) => ok(json!({
            "reset": true,
            "old_task_id": old_task_id,
            "detail": "the key is free: its next submit creates a new task; the old task is left as it is",
        })),
        Ok(Reset::NotFound) => error(exit::NOT_FOUND, "not_found", "no record for this key"),
        Ok(Reset::InProgress {
            task_id,
            retry_after,
        }) => {
            let mut out = error(
                exit::FAILED,
                "submit_in_progress",
                "a submit of this key may still write its task; nothing was written",
            );
            out.output["task_id"] = json!(task_id);
            out.output["retry_after_seconds"] = json!(retry_after.as_secs());
            out
        }
        Ok(Reset::Changed) => error(
            exit::FAILED,
            "record_changed",
            "the key's record changed while it was being reset; nothing was written",
        ),
        Err(e) => submit_error(&e),
    }
}

/// Receives the due queue's messages, ten at a time, and handles them as the
/// function does: handled messages are deleted, the ones to retry are left
/// to come back after their visibility timeout. Stops at the first empty
/// receive. A dry run deletes nothing and makes what it received visible
/// again at the end.
async fn drain_due_queue(
    sqs: &aws_sdk_sqs::Client,
    url: &str,
    queue: &Queue,
    bucket: &str,
    dry_run: bool,
    wait_seconds: i32,
) -> Result<Value, String> {
    use crate::intake::due::{DueMessage, handle_messages};
    let mut summary = crate::protocol::SweepSummary {
        dry_run,
        complete: true,
        ..Default::default()
    };
    let (mut received, mut retried) = (0usize, 0usize);
    // A dry run's messages, to make visible again at the end.
    let mut to_release: Vec<String> = Vec::new();
    loop {
        let msgs = receive(sqs, url, wait_seconds).await?;
        if msgs.is_empty() {
            break;
        }
        received += msgs.len();
        let due: Vec<DueMessage> = msgs
            .iter()
            .map(|m| DueMessage {
                id: m.message_id.clone().unwrap_or_default(),
                body: m.body.clone().unwrap_or_default(),
            })
            .collect();
        let batch = handle_messages(queue, bucket, &due, dry_run, None).await;
        summary.add(&batch.summary);
        retried += batch.retry.len();
        // A retried message is left to come back after its visibility
        // timeout, as the function's batch failures do.
        let handles: Vec<(bool, String)> = msgs
            .iter()
            .filter_map(|m| {
                let retry = batch.retry.iter().any(|r| Some(r) == m.message_id.as_ref());
                Some((retry, m.receipt_handle.clone()?))
            })
            .collect();
        if dry_run {
            to_release.extend(handles.into_iter().map(|(_, h)| h));
        } else {
            delete_handled(sqs, url, &handles).await?;
        }
    }
    if dry_run {
        release(sqs, url, &to_release).await?;
    }
    let mut v = serde_json::to_value(&summary).unwrap_or(Value::Null);
    v["messages"] = json!(received);
    v["retried"] = json!(retried);
    v["ignored"] = json!(summary.ignored);
    v["unrecognized"] = json!(summary.unrecognized);
    Ok(v)
}

fn sqs_error<E>(e: aws_sdk_sqs::error::SdkError<E>) -> String
where
    E: std::error::Error + 'static,
{
    aws_sdk_sqs::error::DisplayErrorContext(e).to_string()
}

/// Up to ten messages, long-polled for `wait_seconds`.
async fn receive(
    sqs: &aws_sdk_sqs::Client,
    url: &str,
    wait_seconds: i32,
) -> Result<Vec<aws_sdk_sqs::types::Message>, String> {
    let out = sqs
        .receive_message()
        .queue_url(url)
        .max_number_of_messages(10)
        .wait_time_seconds(wait_seconds)
        .send()
        .await
        .map_err(sqs_error)?;
    Ok(out.messages.unwrap_or_default())
}

/// Deletes the messages of one receive (`(retry, receipt handle)`, in the
/// receive's order) that are not to be retried.
async fn delete_handled(
    sqs: &aws_sdk_sqs::Client,
    url: &str,
    handles: &[(bool, String)],
) -> Result<(), String> {
    let mut delete = Vec::new();
    for (i, (retry, handle)) in handles.iter().enumerate() {
        if !retry {
            delete.push(
                aws_sdk_sqs::types::DeleteMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(handle)
                    .build()
                    .map_err(|e| e.to_string())?,
            );
        }
    }
    if !delete.is_empty() {
        sqs.delete_message_batch()
            .queue_url(url)
            .set_entries(Some(delete))
            .send()
            .await
            .map_err(sqs_error)?;
    }
    Ok(())
}

/// Makes a dry run's messages visible again at once, ten at a time.
async fn release(sqs: &aws_sdk_sqs::Client, url: &str, handles: &[String]) -> Result<(), String> {
    for chunk in handles.chunks(10) {
        let entries = chunk
            .iter()
            .enumerate()
            .map(|(i, h)| {
                aws_sdk_sqs::types::ChangeMessageVisibilityBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(h)
                    .visibility_timeout(0)
                    .build()
                    .map_err(|e| e.to_string())
            })
            .collect::<Result<Vec<_>, _>>()?;
        sqs.change_message_visibility_batch()
            .queue_url(url)
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(sqs_error)?;
    }
    Ok(())
}

/// Runs one command against `queue` in the bucket that `config` names.
pub async fn run(command: Command, queue: &Queue, config: &Config) -> Outcome {
    let bucket = config.bucket.as_str();
    match command {
        Command::Submit {
            batch: Some(path), ..
        } => submit_batch(queue, &path).await,
        Command::Submit {
            task_type,
            input,
            key,
            ttl_seconds,
            scope,
            if_task_failed,
            batch: None,
            options,
        } => {
            let (Some(task_type), Some(input)) = (task_type, input) else {
                return error(
                    exit::INVALID,
                    "invalid_request",
                    "--type and --input are required (or --batch FILE)",
                );
            };
            let one = OneSubmit {
                task_type,
                input,
                key,
                ttl_seconds,
                scope,
                if_task_failed,
                options: *options,
            };
            submit_one(queue, one).await
        }
        Command::Key {
            scope,
            key,
            tenant,
            reset,
        } => {
            let tenant = match tenant
                .as_deref()
                .map(|t| Principal::parse(t).and_then(|p| Tenant::from_principal(p.as_str())))
                .transpose()
            {
                Ok(t) => t,
                Err(e) => return submit_error(&e.into()),
            };
            if reset {
                reset_key(queue, &scope, &key, tenant.as_ref()).await
            } else {
                key_record(queue, &scope, &key, tenant.as_ref()).await
            }
        }
        Command::Sweep {
            dry_run,
            due_queue: Some(url),
            wait_seconds,
        } => {
            let sqs = crate::aws::sqs_client(crate::aws::Retries::ByTheSdk).await;
            match drain_due_queue(&sqs, &url, queue, bucket, dry_run, wait_seconds).await {
                Ok(v) => ok(v),
                Err(e) => error(exit::FAILED, "queue_error", e),
            }
        }
        Command::Sweep { dry_run, .. } => sweep_pass(queue, dry_run).await,
        Command::Doctor {
            due_queue_arn,
            probe,
        } => doctor(queue, config, due_queue_arn, probe).await,
        Command::Task { task_id } => task(queue, &task_id).await,
    }
}

/// A success: exit 0, and what to print.
fn ok(output: Value) -> Outcome {
    Outcome {
        exit: exit::OK,
        output,
    }
}

/// The flags of one `idem submit` without `--batch`.
struct OneSubmit {
    task_type: String,
    input: String,
    key: Option<String>,
    ttl_seconds: Option<i64>,
    scope: Option<String>,
    if_task_failed: Option<String>,
    options: TaskOptionArgs,
}

/// `idem submit --type T --input JSON`: the flags through the checks of a
/// `POST /tasks` body, then the submit; prints its success body.
async fn submit_one(queue: &Queue, one: OneSubmit) -> Outcome {
    let input: Value = match serde_json::from_str(&one.input) {
        Ok(v) => v,
        Err(e) => return error(exit::INVALID, "invalid_request", format!("input: {e}")),
    };
    let mut b = match one.options.parse() {
        Ok(o) => queue.submit_value(one.task_type, input).options(o),
        Err(e) => return submit_error(&e.into()),
    };
    if let Some(k) = one.key {
        b = b.idempotency_key(k);
    }
    if let Some(secs) = one.ttl_seconds {
        match Ttl::seconds(secs) {
            Ok(d) => b = b.idempotency_ttl(d),
            Err(e) => return submit_error(&e.into()),
        }
    }
    match Scope::parse(one.scope.as_deref()) {
        Ok(s) => b = b.idempotency_scope(s),
        Err(e) => return submit_error(&e.into()),
    }
    if let Some(v) = one.if_task_failed {
        match IfTaskFailed::parse(&v) {
            Ok(p) => b = b.if_task_failed(p),
            Err(e) => return submit_error(&e.into()),
        }
    }
    match b.await {
        Ok(s) => ok(serde_json::to_value(&s).unwrap_or(Value::Null)),
        Err(e) => submit_error(&e),
    }
}

/// `idem sweep`: one scheduled-style pass; prints its summary.
async fn sweep_pass(queue: &Queue, dry_run: bool) -> Outcome {
    let opts = crate::protocol::SweepOptions {
        dry_run,
        ..Default::default()
    };
    match queue.sweep(&opts).await {
        Ok(summary) => ok(serde_json::to_value(&summary).unwrap_or(Value::Null)),
        Err(e) => submit_error(&e),
    }
}

/// The due queue's `DelaySeconds`, or why it cannot be read.
async fn due_queue_delay(sqs: &aws_sdk_sqs::Client, url: &str) -> Result<u64, String> {
    let out = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::DelaySeconds)
        .send()
        .await
        .map_err(sqs_error)?;
    out.attributes()
        .and_then(|a| a.get(&aws_sdk_sqs::types::QueueAttributeName::DelaySeconds))
        .and_then(|d| d.parse().ok())
        .ok_or_else(|| "no DelaySeconds in its attributes".to_owned())
}

/// `idem doctor`: the bucket's configuration against what the guarantees
/// need; exit 5 when one depends on something missing. With `probe`, the
/// store's capabilities too (`crate::probe`), and exit 5 as well when the
/// store cannot host the service or the settings it needs are not the
/// process's.
async fn doctor(
    queue: &Queue,
    config: &Config,
    due_queue_arn: Option<String>,
    probe: bool,
) -> Outcome {
    // The store's own client: its endpoint, path style and key pair
    // (S3_CREDENTIALS_SECRET, read again here).
    let client = match crate::queue::s3_store(config).await {
        Ok(s) => s.client().clone(),
        Err(e) => return invalid_configuration(&e),
    };
    let submitter = match (&config.record_events, &config.due_queue_url) {
        (crate::RecordEvents::Submitter, Some(url)) => {
            let sqs = crate::aws::sqs_client(crate::aws::Retries::ByTheSdk).await;
            Some(crate::doctor::DueQueueSeen {
                url: url.clone(),
                delay_seconds: due_queue_delay(&sqs, url).await,
                stale_seconds: queue.settings().stale_creating_after.num_seconds() as u64,
                order: config.due_message,
            })
        }
        _ => None,
    };
    let expect = crate::doctor::Expectations {
        max_ttl_days: queue.settings().max_ttl.num_days(),
        due_queue_arn,
        submitter,
    };
    let report = crate::doctor::examine(&client, &config.bucket, &expect).await;
    let mut output = serde_json::to_value(&report).unwrap_or(Value::Null);
    let mut healthy = report.ok;
    if probe {
        let notifications = report.checks.iter().find(|c| c.check == "notification");
        let notifications = notifications.map(|c| c.status == crate::doctor::Status::Ok);
        let found = crate::probe::probe(queue.engine().store().clone(), notifications).await;
        let mismatches = found.mismatches(&configured_settings(queue.settings()));
        healthy &= probe_healthy(&found, &mismatches);
        output["probe"] = serde_json::to_value(&found).unwrap_or(Value::Null);
        output["probe"]["mismatches"] = Value::from(mismatches);
        output["ok"] = Value::from(healthy);
    }
    Outcome {
        exit: if healthy { exit::OK } else { exit::UNHEALTHY },
        output,
    }
}

/// Whether the store can host the service with the process's settings:
/// it can (atomic create-only PUTs, compare-and-swap), and the settings it
/// needs are set.
pub fn probe_healthy(found: &crate::probe::ProbeReport, mismatches: &[String]) -> bool {
    found.can_host && mismatches.is_empty()
}

/// The process's values of the settings the probe may ask for (section 7;
/// `BUQUET_ALLOW_NO_VERSIONING` is the queue's workers', read as it is).
fn configured_settings(s: &crate::Settings) -> std::collections::BTreeMap<&'static str, String> {
    let mut m = std::collections::BTreeMap::new();
    m.insert(
        "CONDITIONAL_DELETE",
        if s.conditional_delete { "on" } else { "off" }.to_owned(),
    );
    m.insert(
        "LIST_ORDER",
        match s.list_order {
            crate::ListOrder::Bytes => "bytes",
            crate::ListOrder::Any => "any",
        }
        .to_owned(),
    );
    for var in ["RECORD_EVENTS", "BUQUET_ALLOW_NO_VERSIONING"] {
        if let Ok(v) = std::env::var(var) {
            m.insert(var, v.trim().to_owned());
        }
    }
    m
}

/// `idem task ID`: the task object as it is.
async fn task(queue: &Queue, task_id: &str) -> Outcome {
    let Ok(id) = Uuid::parse_str(task_id) else {
        return error(exit::INVALID, "invalid_request", "task_id: not a UUID");
    };
    match queue.task(id).await {
        Ok(Some(body)) => match serde_json::from_slice(&body) {
            Ok(v) => ok(v),
            Err(e) => error(exit::FAILED, "storage_error", format!("task object: {e}")),
        },
        Ok(None) => error(exit::NOT_FOUND, "not_found", "no such task"),
        Err(e) => submit_error(&e),
    }
}
