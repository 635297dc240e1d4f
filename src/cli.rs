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

/// The command line of `idem`.
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
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands of `idem`.
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
        /// The task options, one flag each (src/protocol/options.rs's table).
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
        /// The key.
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
    Task {
        /// The task's id.
        task_id: String,
    },
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
            let help = match option.default() {
                Some(d) => format!("{} (default {d})", spec.help),
                None => spec.help.to_owned(),
            };
            let arg = clap::Arg::new(spec.flag).long(spec.flag).help(help);
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
    /// Done.
    pub const OK: i32 = 0;
    /// Failed: storage, a corrupt object, a retryable refusal.
    pub const FAILED: i32 = 1;
    /// The request or the configuration is invalid.
    pub const INVALID: i32 = 2;
    /// An idempotency conflict.
    pub const CONFLICT: i32 = 3;
    /// No such key or task.
    pub const NOT_FOUND: i32 = 4;
    /// `idem doctor`: something a guarantee depends on is missing.
    pub const UNHEALTHY: i32 = 5;
}

/// What a command prints and how the process exits.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// The process's exit code ([`exit`]).
    pub exit: i32,
    /// What it prints, as JSON.
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
            let source = crate::due_sender::SqsDueQueue::from_env(url).await;
            match crate::intake::due::drain(queue, &source, bucket, dry_run, wait_seconds).await {
                Ok(d) => {
                    let mut v = serde_json::to_value(&d.summary).unwrap_or(Value::Null);
                    v["messages"] = json!(d.received);
                    v["retried"] = json!(d.retried);
                    v["ignored"] = json!(d.summary.ignored);
                    v["unrecognized"] = json!(d.summary.unrecognized);
                    ok(v)
                }
                Err(e) => error(exit::FAILED, "queue_error", e),
            }
        }
        Command::Sweep { dry_run, .. } => sweep_pass(queue, dry_run).await,
        Command::Doctor {
            due_queue_arn,
            probe,
        } => {
            let (healthy, output) =
                match crate::doctor::run(queue, config, due_queue_arn, probe).await {
                    Ok(found) => found,
                    Err(e) => return invalid_configuration(&e),
                };
            Outcome {
                exit: if healthy { exit::OK } else { exit::UNHEALTHY },
                output,
            }
        }
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
