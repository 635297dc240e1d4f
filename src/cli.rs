//! The operator CLI, `idem` (CONTRACT.md section 8). Output is JSON on
//! stdout; the exit code says what happened.

use clap::{Parser, Subcommand};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::config::Config;
use crate::protocol::{Scope, SubmitError};
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
    /// Submit a task; prints the success body of the HTTP API.
    Submit {
        /// The task type.
        #[arg(long = "type")]
        task_type: String,
        /// The input, as JSON.
        #[arg(long)]
        input: String,
        /// The idempotency key.
        #[arg(long)]
        key: Option<String>,
        /// How long the key is remembered.
        #[arg(long)]
        ttl_seconds: Option<i64>,
        /// The key's scope: a custom name, or `queue` (default: the task type).
        #[arg(long)]
        scope: Option<String>,
    },
    /// Print the idempotency record of a key (without `pending_task`).
    Key {
        /// The scope's name: the task type, `queue`, or a custom name.
        #[arg(long)]
        scope: String,
        #[arg(long)]
        key: String,
    },
    /// Print a task object.
    Task { task_id: String },
    /// Run one sweep and print its summary.
    Sweep {
        /// Report what would be done; change nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

/// Exit codes.
pub mod exit {
    pub const OK: i32 = 0;
    pub const FAILED: i32 = 1;
    pub const INVALID: i32 = 2;
    pub const CONFLICT: i32 = 3;
    pub const NOT_FOUND: i32 = 4;
}

/// What a command prints and how the process exits.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub exit: i32,
    pub output: Value,
}

fn error(exit: i32, code: &str, detail: impl ToString) -> Outcome {
    Outcome {
        exit,
        output: json!({"error": code, "detail": detail.to_string()}),
    }
}

fn submit_error(e: &SubmitError) -> Outcome {
    let exit = match e {
        SubmitError::Invalid(_) | SubmitError::InputTooLarge { .. } => exit::INVALID,
        SubmitError::Conflict { .. } => exit::CONFLICT,
        _ => exit::FAILED,
    };
    error(exit, e.code(), e)
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
    .map_err(|e| error(exit::INVALID, "invalid_configuration", e))
}

/// Runs one command against `queue`.
pub async fn run(command: Command, queue: &Queue) -> Outcome {
    match command {
        Command::Submit {
            task_type,
            input,
            key,
            ttl_seconds,
            scope,
        } => {
            let input: Value = match serde_json::from_str(&input) {
                Ok(v) => v,
                Err(e) => return error(exit::INVALID, "invalid_request", format!("input: {e}")),
            };
            let mut b = queue.submit(task_type, input);
            if let Some(k) = key {
                b = b.idempotency_key(k);
            }
            if let Some(secs) = ttl_seconds {
                match chrono::Duration::try_seconds(secs) {
                    Some(d) => b = b.idempotency_ttl(d),
                    None => {
                        return error(
                            exit::INVALID,
                            "invalid_request",
                            "idempotency_ttl_seconds: out of range",
                        );
                    }
                }
            }
            match Scope::parse(scope.as_deref()) {
                Ok(s) => b = b.idempotency_scope(s),
                Err(e) => return submit_error(&e.into()),
            }
            match b.await {
                Ok(s) => Outcome {
                    exit: exit::OK,
                    output: serde_json::to_value(&s).unwrap_or(Value::Null),
                },
                Err(e) => submit_error(&e),
            }
        }
        Command::Key { scope, key } => match queue.record(&scope, &key, None).await {
            Ok(Some((mut rec, _))) => {
                rec.pending_task = None;
                Outcome {
                    exit: exit::OK,
                    output: serde_json::to_value(&rec).unwrap_or(Value::Null),
                }
            }
            Ok(None) => error(exit::NOT_FOUND, "not_found", "no record for this key"),
            Err(e) => submit_error(&e),
        },
        Command::Sweep { dry_run } => {
            let opts = crate::protocol::SweepOptions {
                dry_run,
                ..Default::default()
            };
            match queue.engine().sweep(&opts).await {
                Ok(summary) => Outcome {
                    exit: exit::OK,
                    output: serde_json::to_value(&summary).unwrap_or(Value::Null),
                },
                Err(e) => submit_error(&e),
            }
        }
        Command::Task { task_id } => {
            let Ok(id) = Uuid::parse_str(&task_id) else {
                return error(exit::INVALID, "invalid_request", "task_id: not a UUID");
            };
            match queue.task(id).await {
                Ok(Some(body)) => match serde_json::from_slice(&body) {
                    Ok(v) => Outcome {
                        exit: exit::OK,
                        output: v,
                    },
                    Err(e) => error(exit::FAILED, "storage_error", format!("task object: {e}")),
                },
                Ok(None) => error(exit::NOT_FOUND, "not_found", "no such task"),
                Err(e) => submit_error(&e),
            }
        }
    }
}
