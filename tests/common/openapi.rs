//! Every HTTP answer a test sees, checked against docs/openapi.yaml by one
//! long-lived `scripts/openapi_check.py --serve` per test binary: a status,
//! header, content type or body field the document does not describe fails
//! the test that produced it.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Mutex, OnceLock};

use serde_json::{Value, json};

struct Checker {
    _child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

fn checker() -> &'static Mutex<Checker> {
    static CHECKER: OnceLock<Mutex<Checker>> = OnceLock::new();
    CHECKER.get_or_init(|| {
        let root = env!("CARGO_MANIFEST_DIR");
        let mut child = Command::new("python3")
            .arg(format!("{root}/scripts/openapi_check.py"))
            .arg(format!("{root}/docs/openapi.yaml"))
            .arg("--serve")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs scripts/openapi_check.py (make test installs its modules)");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Mutex::new(Checker {
            _child: child,
            stdin,
            stdout,
        })
    })
}

/// The request's method and path, whatever shape its event has.
fn method_and_path(event: &Value) -> (String, String) {
    let s = |p: &str| event.pointer(p).and_then(Value::as_str).map(str::to_owned);
    let method = s("/requestContext/http/method")
        .or_else(|| s("/httpMethod"))
        .unwrap_or_default();
    // As the handler reads it (src/lambda/http.rs): payload 2.0's raw path,
    // else its `requestContext.http.path`; payload 1.0's `path`.
    let v2 = event.get("version").and_then(Value::as_str) == Some("2.0")
        || event.pointer("/requestContext/http").is_some();
    let path = if v2 {
        s("/rawPath").or_else(|| s("/requestContext/http/path"))
    } else {
        s("/path")
    }
    .unwrap_or_default();
    (method, path)
}

/// Checks the Lambda proxy `answer` to the HTTP `event`; panics with the
/// mismatch.
pub fn check(event: &Value, answer: &Value) {
    if let Err(e) = try_check(event, answer) {
        panic!("{e}");
    }
}

/// [`check`], the mismatch as an error.
pub fn try_check(event: &Value, answer: &Value) -> Result<(), String> {
    let (method, path) = method_and_path(event);
    let line = json!({
        "method": method,
        "path": path,
        "status": answer["statusCode"],
        "headers": answer["headers"],
        "body": answer["body"],
    });
    let mut c = checker().lock().unwrap_or_else(|e| e.into_inner());
    writeln!(c.stdin, "{line}").expect("the OpenAPI checker takes input");
    c.stdin.flush().unwrap();
    let mut verdict = String::new();
    c.stdout
        .read_line(&mut verdict)
        .expect("the OpenAPI checker answers");
    match verdict.trim() {
        "ok" => Ok(()),
        why => Err(format!(
            "the answer to {method} {path} is not what docs/openapi.yaml describes ({why}): {answer}"
        )),
    }
}

/// An `input_invalid` problem's failures as (pointer, keyword) pairs, sorted:
/// what a test compares, whatever order the validator reported them in.
pub fn failures(problem: &Value) -> Vec<(String, String)> {
    let mut named: Vec<(String, String)> = problem["errors"]
        .as_array()
        .expect("an input_invalid problem lists its errors")
        .iter()
        .map(|e| {
            (
                e["pointer"].as_str().unwrap_or_default().to_owned(),
                e["keyword"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    named.sort();
    named
}
