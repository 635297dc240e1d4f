//! What the scheduled pass needs of template.yaml (issue 49): its pass
//! queue and the event source mapping that runs the sweep function on each
//! continuation (and the schedule's message), at most `PassConcurrency` at
//! once; the function's
//! `PASS_QUEUE_URL` and `PASS_CONCURRENCY`; a role that sends to and polls
//! that one queue and no other; a dead-letter queue with its alarm.

use serde_json::{Value, json};

use super::*;

fn pass_mapping(t: &Templates) -> &Value {
    &t.res("SweepPassMapping")["Properties"]
}

#[test]
fn the_pass_queue_runs_the_sweep_function_one_continuation_at_a_time_with_partial_failures() {
    let t = templates();
    let m = pass_mapping(&t);
    assert_eq!(m["EventSourceArn"]["Fn::GetAtt"][0], "PassQueue");
    assert_eq!(m["FunctionName"]["Ref"], "SweepFunction");
    assert_eq!(m["BatchSize"], 1, "one share an invocation");
    assert_eq!(
        m["FunctionResponseTypes"],
        json!(["ReportBatchItemFailures"])
    );
    // A failed share comes back after the lease of a whole invocation (its
    // timeout and an operation's 25 s) has run out: the redelivery takes a
    // dead invocation's share over.
    let (q, timeout) = t.queue_with_dead_letters("PassQueue", "PassDeadLetterQueue");
    assert!(q["VisibilityTimeout"].as_u64().unwrap() > timeout + 25);
    let alarm = &t.res("PassDeadLetterAlarm")["Properties"];
    assert_eq!(
        alarm["Dimensions"][0]["Value"]["Fn::GetAtt"][0],
        "PassDeadLetterQueue"
    );
    assert!(t.out["Outputs"]["PassQueueUrl"].is_object());
}

#[test]
fn the_schedule_sends_its_scheduled_time_to_the_pass_queue_and_tries_again_if_sqs_refuses() {
    let t = templates();
    let s = &t.res("PassSchedule")["Properties"];
    assert_eq!(s["ScheduleExpression"]["Ref"], "SweepSchedule");
    let target = &s["Target"];
    assert_eq!(target["Arn"]["Fn::GetAtt"], json!(["PassQueue", "Arn"]));
    assert_eq!(
        target["RoleArn"]["Fn::GetAtt"],
        json!(["PassScheduleRole", "Arn"])
    );
    let input: Value = serde_json::from_str(target["Input"].as_str().unwrap()).unwrap();
    assert_eq!(input, json!({"schedule": "<aws.scheduler.scheduled-time>"}));
    assert!(
        target["RetryPolicy"]["MaximumRetryAttempts"]
            .as_u64()
            .unwrap()
            > 0
    );
    // The function itself is invoked by no schedule.
    let sweep = &t.res("SweepFunction")["Properties"];
    assert!(sweep["Events"].is_null(), "{sweep}");
}

#[test]
fn pass_concurrency_reaches_the_function_and_bounds_the_mapping_at_sqss_least_of_two() {
    let t = templates();
    assert_eq!(t.param_default("PassConcurrency"), 4);
    let p = &t.out["Parameters"]["PassConcurrency"];
    assert_eq!(
        (p["MinValue"].clone(), p["MaxValue"].clone()),
        (json!(1), json!(1000))
    );
    let env = &t.res("SweepFunction")["Properties"]["Environment"]["Variables"];
    assert_eq!(env["PASS_CONCURRENCY"]["Ref"], "PassConcurrency");
    assert_eq!(env["PASS_QUEUE_URL"]["Ref"], "PassQueue");
    // The globals stay (SAM merges the function's variables into them).
    assert_eq!(env["BUCKET_NAME"]["Ref"], "BucketName");
    // The submit function has no part in the pass.
    let submit = &t.res("SubmitFunction")["Properties"]["Environment"]["Variables"];
    assert!(submit.get("PASS_QUEUE_URL").is_none());
    for (given, max) in [("4", json!({"Ref": "PassConcurrency"})), ("1", json!(2))] {
        let t = templates_with(&[("PassConcurrency", given)]);
        assert_eq!(
            pass_mapping(&t)["ScalingConfig"]["MaximumConcurrency"],
            max,
            "PassConcurrency={given}"
        );
    }
}

#[test]
fn only_the_sweep_role_sends_to_the_pass_queue_and_only_there() {
    let t = templates();
    let on_pass = |role: &str| t.queue_actions(role, "PassQueue");
    let mut sweep = on_pass("SweepFunctionRole");
    sweep.sort();
    assert_eq!(
        sweep,
        [
            "sqs:ChangeMessageVisibility",
            "sqs:DeleteMessage",
            "sqs:GetQueueAttributes",
            "sqs:ReceiveMessage",
            "sqs:SendMessage"
        ]
    );
    assert!(on_pass("SubmitFunctionRole").is_empty());
    // The schedule's role sends its message there, and does nothing else.
    assert_eq!(on_pass("PassScheduleRole"), ["sqs:SendMessage"]);
    // The sweep role sends to no other queue.
    let sends: Vec<Value> = t
        .role_statements("SweepFunctionRole")
        .into_iter()
        .filter(|s| as_list(&s["Action"]).contains(&json!("sqs:SendMessage")))
        .map(|s| s["Resource"].clone())
        .collect();
    assert_eq!(sends, [json!({"Fn::GetAtt": ["PassQueue", "Arn"]})]);
}
