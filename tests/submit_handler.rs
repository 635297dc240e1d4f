//! The `submit` handler on every sample event of events/ (against moto), a
//! table of bad inputs across REST, HTTP API and SQS, SQS batches, tenants,
//! and storage failures (with the fault-injecting store).

mod answers;
mod bad_input;
mod samples;
mod sqs;

use crate::common;

use std::sync::Arc;

use crate::common::event;
use crate::common::handler::{Harness, Resp};
use idempotent_submit::lambda::{App, Metrics, handle_submit};
use idempotent_submit::protocol::IdempotencyKey;
use idempotent_submit::protocol::hash;
use idempotent_submit::store::{Fault, FaultyStore, Op, StoreError};
use idempotent_submit::{Config, ManualClock, Queue};
use lambda_runtime::{Context, LambdaEvent};
use serde_json::{Value, json};

fn config(tenants: bool) -> Config {
    common::lambda::config(tenants, common::settings())
}

fn assert_problem(r: &Resp, status: u64, code: &str) {
    assert_eq!(r.status, status, "{}", r.body);
    assert_eq!(r.headers["content-type"], "application/problem+json");
    assert_eq!(r.body["code"], code, "{}", r.body);
    assert_eq!(r.body["status"], status);
    for f in ["type", "title", "detail"] {
        assert!(r.body[f].is_string(), "{f} in {}", r.body);
    }
}

fn get_event(id: &str) -> Value {
    let mut e = event("http-v2-get-missing.json");
    e["rawPath"] = json!(format!("/tasks/{id}"));
    e["requestContext"]["http"]["path"] = json!(format!("/tasks/{id}"));
    e
}

fn v2_post(body: Value) -> Value {
    let mut e = event("http-v2-post.json");
    e["body"] = json!(body.to_string());
    e
}

fn with_header(mut e: Value, k: &str, v: &str) -> Value {
    e["headers"][k] = json!(v);
    e
}

fn ok_body() -> Value {
    json!({"task_type": "t", "input": {"a": 1}})
}

fn sqs_with_bodies(bodies: &[&str]) -> Value {
    let mut batch = event("sqs-standard-batch.json");
    let template = batch["Records"][0].clone();
    let records: Vec<Value> = bodies
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let mut m = template.clone();
            m["messageId"] = json!(format!("bad-{i}"));
            m["body"] = json!(b);
            m
        })
        .collect();
    batch["Records"] = json!(records);
    batch
}
