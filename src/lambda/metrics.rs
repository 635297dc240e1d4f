//! CloudWatch Embedded Metric Format: one JSON line on stdout per outcome,
//! which CloudWatch Logs turns into metrics (namespace `IdempotentSubmit`,
//! dimension `Function`) without any API call.

use std::io::Write;
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value, json};

use crate::protocol::{ErrorKind, SubmitError, Submitted, SweepSummary};

/// The CloudWatch namespace of every metric.
pub const NAMESPACE: &str = "IdempotentSubmit";

/// Where metric lines go.
#[derive(Clone, Default)]
pub struct Metrics {
    function: String,
    /// `None`: stdout. `Some`: collected (tests).
    buffer: Option<Arc<Mutex<Vec<Value>>>>,
}

impl Metrics {
    /// Metrics of `function`, written to stdout as EMF lines.
    pub fn stdout(function: &str) -> Self {
        Metrics {
            function: function.to_owned(),
            buffer: None,
        }
    }

    /// Lines on stdout, under the function's own name
    /// (`AWS_LAMBDA_FUNCTION_NAME`, which Lambda sets), so that two stacks
    /// in one account never mix their metrics; `role` (`submit`, `sweep`)
    /// where the variable is unset (local runs).
    pub fn for_function(role: &str) -> Self {
        Self::stdout(&function_name(
            std::env::var("AWS_LAMBDA_FUNCTION_NAME").ok().as_deref(),
            role,
        ))
    }

    /// Collects lines instead of printing them.
    pub fn collecting(function: &str) -> Self {
        Metrics {
            function: function.to_owned(),
            buffer: Some(Arc::default()),
        }
    }

    /// The lines collected so far.
    pub fn lines(&self) -> Vec<Value> {
        self.buffer
            .as_ref()
            .map(|b| b.lock().unwrap_or_else(|e| e.into_inner()).clone())
            .unwrap_or_default()
    }

    /// One EMF line with the given counts.
    pub fn line(&self, counts: &[(&str, u64)]) -> Value {
        let mut root = Map::new();
        root.insert(
            "_aws".into(),
            json!({
                "Timestamp": chrono::Utc::now().timestamp_millis(),
                "CloudWatchMetrics": [{
                    "Namespace": NAMESPACE,
                    "Dimensions": [["Function"]],
                    "Metrics": counts.iter().map(|(n, _)| json!({"Name": n, "Unit": "Count"})).collect::<Vec<_>>(),
                }],
            }),
        );
        root.insert("Function".into(), json!(self.function));
        for (n, v) in counts {
            root.insert((*n).into(), json!(v));
        }
        Value::Object(root)
    }

    fn emit(&self, counts: &[(&str, u64)]) {
        let line = self.line(counts);
        match &self.buffer {
            Some(b) => b.lock().unwrap_or_else(|e| e.into_inner()).push(line),
            None => {
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{line}");
            }
        }
    }

    /// A submit's outcome.
    pub fn submit(&self, result: &Result<Submitted, SubmitError>) {
        let mut counts = vec![(outcome(result), 1)];
        counts.extend(also(result).map(|n| (n, 1)));
        self.emit(&counts);
    }

    /// The outcomes of a batch's items: one line for the batch, counting
    /// each item under the metric a single submit of it would have counted
    /// (so that a dashboard's sums are the same however tasks came), and
    /// `BatchItems`, the items of the batch.
    pub fn batch(&self, results: &[Result<Submitted, SubmitError>]) {
        let mut counts: Vec<(&str, u64)> = vec![("BatchItems", results.len() as u64)];
        let mut add = |name: &'static str| match counts.iter_mut().find(|(n, _)| *n == name) {
            Some((_, c)) => *c += 1,
            None => counts.push((name, 1)),
        };
        for r in results {
            add(outcome(r));
            also(r).for_each(&mut add);
        }
        self.emit(&counts);
    }

    /// Fetches of a published schema that found it unusable (not JSON, not
    /// a JSON Schema), since the last line: `InvalidSchema`, when there were
    /// any. Its inputs go unchecked meanwhile.
    pub fn invalid_schemas(&self, fetches: u64) {
        if fetches > 0 {
            self.emit(&[("InvalidSchema", fetches)]);
        }
    }

    /// A key reset on purpose (`DELETE /idempotency-keys/{key}`).
    pub fn key_reset(&self) {
        self.emit(&[("KeyResets", 1)]);
    }

    /// Due messages of records (`RECORD_EVENTS=submitter`) that could not be
    /// sent, retries included, since the last line: `DueMessageUnsent`, when
    /// there were any. Each is a record that only the next submit of its key
    /// finishes if its submit's process also died before its task was
    /// written.
    pub fn unsent_due_messages(&self, messages: u64) {
        if messages > 0 {
            self.emit(&[("DueMessageUnsent", messages)]);
        }
    }

    /// An SQS message written to `rejected/`.
    pub fn rejected(&self) {
        self.emit(&[("Rejected", 1)]);
    }

    /// A scheduled pass that ended: `SweepPasses` (1), the shares it took
    /// over all its invocations (`SweepPassShares`), the most at once
    /// (`SweepPassConcurrency`), and its length in seconds from its start to
    /// its end, in S3's time (`SweepPassSeconds`).
    pub fn pass(&self, shares: u64, peak: u64, seconds: u64) {
        self.emit(&[
            ("SweepPasses", 1),
            ("SweepPassShares", shares),
            ("SweepPassConcurrency", peak),
            ("SweepPassSeconds", seconds),
        ]);
    }

    /// A sweep's summary.
    pub fn sweep(&self, s: &SweepSummary) {
        self.emit(&[
            ("SweepScanned", s.scanned),
            ("SweepFinished", s.finished),
            ("SweepExpiredDeleted", s.expired_deleted),
            ("SweepErrors", s.errors),
            ("SweepPastDeadline", s.past_deadline),
            ("SweepEarly", s.early),
            ("SweepDueEarly", s.no_record_yet),
            ("SweepDueNoRecord", s.due_no_record),
            ("SweepIgnored", s.ignored),
            ("SweepUnrecognized", s.unrecognized),
            ("SweepReads", s.reads),
            ("SweepLists", s.lists),
        ]);
    }
}

/// The metrics a submit counts beside its outcome: `Recovered` (it finished
/// an interrupted earlier submit) and `FailedKeyReuses` (it created a task in
/// place of its key's failed one, `if_task_failed: new_task`).
fn also(result: &Result<Submitted, SubmitError>) -> impl Iterator<Item = &'static str> {
    let (recovered, reused) = match result {
        Ok(s) => (s.recovered, s.created() && s.replaces_task_id.is_some()),
        Err(_) => (false, false),
    };
    [
        recovered.then_some("Recovered"),
        reused.then_some("FailedKeyReuses"),
    ]
    .into_iter()
    .flatten()
}

/// The metric that counts a submit's outcome.
fn outcome(result: &Result<Submitted, SubmitError>) -> &'static str {
    match result {
        Ok(s) if s.created() => "Created",
        Ok(_) => "Replayed",
        Err(e) => match e.kind() {
            ErrorKind::Conflict => "Conflict",
            ErrorKind::Invalid | ErrorKind::KeyMissing | ErrorKind::TooLarge => "Invalid",
            // Its own metric: a producer sending what the schema refuses is
            // another alarm than a malformed request.
            ErrorKind::InputInvalid => "InputInvalid",
            // A submit of the key may still be landing: not a storage failure.
            ErrorKind::InProgress => "SubmitInProgress",
            ErrorKind::Unavailable | ErrorKind::Broken => "StorageError",
        },
    }
}

/// The metrics' `Function` dimension: Lambda's name for this function, or
/// `role` outside Lambda.
pub fn function_name(lambda_name: Option<&str>, role: &str) -> String {
    match lambda_name.map(str::trim) {
        Some(n) if !n.is_empty() => n.to_owned(),
        _ => role.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_declares_every_metric_it_carries() {
        let m = Metrics::collecting("submit");
        m.submit(&Err(SubmitError::DeadlineExceeded));
        let l = &m.lines()[0];
        assert_eq!(l["Function"], "submit");
        assert_eq!(l["StorageError"], 1);
        let decl = &l["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(decl["Namespace"], NAMESPACE);
        assert_eq!(decl["Metrics"][0]["Name"], "StorageError");
        assert_eq!(decl["Dimensions"][0][0], "Function");
        assert!(l["_aws"]["Timestamp"].is_i64());
    }

    #[test]
    fn a_batch_is_one_line_counting_each_item_under_its_outcome() {
        let m = Metrics::collecting("submit");
        m.batch(&[
            Err(SubmitError::DeadlineExceeded),
            Err(SubmitError::InputTooLarge { size: 2, limit: 1 }),
            Err(SubmitError::DeadlineExceeded),
        ]);
        let lines = m.lines();
        assert_eq!(lines.len(), 1);
        let l = &lines[0];
        assert_eq!(l["BatchItems"], 3);
        assert_eq!(l["StorageError"], 2);
        assert_eq!(l["Invalid"], 1);
        assert!(l.get("Created").is_none());
        let declared: Vec<&str> = l["_aws"]["CloudWatchMetrics"][0]["Metrics"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["Name"].as_str().unwrap())
            .collect();
        assert_eq!(declared, ["BatchItems", "StorageError", "Invalid"]);
    }

    #[test]
    fn an_invalid_input_and_an_unusable_schema_have_metrics_of_their_own() {
        let m = Metrics::collecting("submit");
        m.submit(&Err(SubmitError::InputInvalid {
            task_type: "t".into(),
            errors: vec![],
            omitted: 1,
        }));
        m.invalid_schemas(0);
        m.invalid_schemas(2);
        let lines = m.lines();
        assert_eq!(lines.len(), 2, "no line for no unusable schema");
        assert_eq!(lines[0]["InputInvalid"], 1);
        assert_eq!(lines[1]["InvalidSchema"], 2);
    }

    #[test]
    fn unsent_due_messages_have_a_line_only_when_there_were_some() {
        let m = Metrics::collecting("submit");
        m.unsent_due_messages(0);
        m.unsent_due_messages(3);
        let lines = m.lines();
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0]["DueMessageUnsent"], 3);
    }

    #[test]
    fn the_dimension_is_the_functions_own_name_where_lambda_gives_one() {
        assert_eq!(
            function_name(Some("stack-a-SubmitFunction-1X"), "submit"),
            "stack-a-SubmitFunction-1X"
        );
        assert_eq!(function_name(None, "submit"), "submit");
        assert_eq!(function_name(Some(""), "sweep"), "sweep");
        let m = Metrics::collecting("stack-b-SweepFunction-2Y");
        m.sweep(&SweepSummary::default());
        assert_eq!(m.lines()[0]["Function"], "stack-b-SweepFunction-2Y");
    }
}
