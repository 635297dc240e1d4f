//! The scheduled pass's continuations through the `sweep` function (issue
//! 49): handed on to a pass queue on moto's SQS and taken back from it as
//! SQS batches, each message one share of the pass it names; a share that
//! fails hands its message back.

use crate::common;

use std::sync::Arc;

use idempotent_submit::lambda::pass_queue::SqsHandOn;
use idempotent_submit::lambda::{Metrics, Sweeper, handle_sweep};
use idempotent_submit::store::{Fault, FaultyStore, Op, PutMode, StoreError};
use idempotent_submit::{ListOrder, Queue, Store};
use lambda_runtime::{Context, LambdaEvent};
use serde_json::{Value, json};

/// Scopes enough that the pass by folders holds more ranges than it lists
/// at once (32): the first share fans the pass out.
const SCOPES: usize = 40;
const PER_SCOPE: usize = 2;

/// An SQS batch of the pass queue, as Lambda's event source mapping hands
/// it to the function.
fn pass_batch(messages: &[(String, String)]) -> Value {
    let records: Vec<Value> = messages
        .iter()
        .map(|(id, body)| {
            json!({
                "messageId": id, "receiptHandle": "r", "body": body,
                "attributes": {}, "messageAttributes": {}, "md5OfBody": "",
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:pass",
                "awsRegion": "us-east-1"
            })
        })
        .collect();
    json!({ "Records": records })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_hands_its_continuations_to_the_pass_queue_and_each_is_one_share_of_that_pass() {
    let store = common::moto_store().await;
    for i in 0..SCOPES * PER_SCOPE {
        let key = format!("idempotency/s{:02}/{i:064x}.json", i % SCOPES);
        store
            .put(&key, b"{}".to_vec().into(), PutMode::Create)
            .await
            .unwrap();
    }
    let url = common::moto_queue(&format!("pass-{}", store.bucket()), 0).await;
    let mut settings = idempotent_submit::Settings {
        list_order: ListOrder::Any,
        pass_concurrency: 3,
        ..common::settings()
    };
    settings.retry.attempt_timeout = std::time::Duration::from_secs(10);
    let sweeper = Sweeper {
        queue: Queue::new(store.clone(), settings),
        bucket: store.bucket().to_owned(),
        metrics: Metrics::collecting("sweep"),
    }
    .with_hand_on(Arc::new(SqsHandOn::new(common::moto_sqs(), url.clone())));
    // The schedule: the pass, fanned out (its other slots handed on), and,
    // with no deadline, worked by this invocation until what is left is
    // the continuations': a range each.
    let s = handle_sweep(&sweeper, LambdaEvent::new(json!({}), Context::default()))
        .await
        .unwrap();
    let total = (SCOPES * PER_SCOPE) as u64;
    let by_the_schedule = s["scanned"].as_u64().unwrap();
    assert!(by_the_schedule < total && s["complete"] == false, "{s}");
    let cp: Value =
        serde_json::from_slice(&store.get("sweeper/checkpoint.json").await.unwrap().body).unwrap();
    // The two other slots' continuations are on the queue, naming the pass
    // and the invitation each takes up.
    let messages: Vec<(String, String)> = common::receive_all(&url, 30)
        .await
        .into_iter()
        .map(|m| (m.message_id.unwrap(), m.body.unwrap()))
        .collect();
    assert_eq!(messages.len(), 2, "{messages:?}");
    let invites: Vec<Value> = cp["invites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].clone())
        .collect();
    for (_, body) in &messages {
        let v: Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["sweep_pass"], cp["pass"]);
        assert!(invites.contains(&v["invite"]), "{v} {invites:?}");
    }
    // Each continuation, taken back as a batch of the pass queue, is one
    // share of the pass: acknowledged; the pass ends in the second.
    for m in &messages {
        let out = handle_sweep(
            &sweeper,
            LambdaEvent::new(pass_batch(std::slice::from_ref(m)), Context::default()),
        )
        .await
        .unwrap();
        assert_eq!(out, json!({"batchItemFailures": []}));
    }
    let after: Value =
        serde_json::from_slice(&store.get("sweeper/checkpoint.json").await.unwrap().body).unwrap();
    assert_eq!(
        (&after["pass"], &after["complete"]),
        (&cp["pass"], &json!(true))
    );
    assert!(after.get("invites").is_none(), "{after}");
    // Nothing more was handed on: nobody left to find nothing.
    assert!(common::receive_all(&url, 1).await.is_empty());
    // One pass: its metrics once, with every record of it.
    let lines = sweeper.metrics.lines();
    let passes: Vec<&Value> = lines.iter().filter(|l| l["SweepPasses"] == 1).collect();
    assert_eq!(passes.len(), 1, "{lines:?}");
    assert!(passes[0]["SweepPassShares"].as_u64().unwrap() >= 3);
    let scanned: u64 = lines
        .iter()
        .filter_map(|l| l["SweepScanned"].as_u64())
        .sum();
    assert_eq!(scanned, total, "{lines:?}");
}

#[tokio::test]
async fn a_share_that_fails_hands_its_message_back_to_the_pass_queue() {
    let w = common::World::new();
    let f = FaultyStore::new(w.bucket.clone());
    f.inject(
        Some(Op::Get),
        "sweeper/",
        1,
        usize::MAX,
        Fault::Fail(StoreError::Unavailable("503".into())),
    );
    let sweeper = Sweeper {
        queue: w.queue_over(f),
        bucket: "b".into(),
        metrics: Metrics::collecting("sweep"),
    };
    let body = json!({"sweep_pass": "2026-01-27T12:00:00Z"}).to_string();
    let out = handle_sweep(
        &sweeper,
        LambdaEvent::new(pass_batch(&[("m1".into(), body)]), Context::default()),
    )
    .await
    .unwrap();
    assert_eq!(
        out,
        json!({"batchItemFailures": [{"itemIdentifier": "m1"}]})
    );
}
