//! template.yaml's event sources, offline (the translation of
//! tests/template.rs): the default stack has none of them; each optional
//! parameter wires its source to the submit function, and only that source
//! may invoke it; the sources' setting reaches the function, an S3 object
//! readable by it alone.

use std::process::Command;

use serde_json::{Value, json};

use crate::template::{Templates, as_list, root, sub, templates_with};

const TOPIC: &str = "arn:aws:sns:us-east-1:123456789012:orders";

/// Every source parameter set.
const ALL: [(&str, &str); 6] = [
    ("SourceTopicArn", TOPIC),
    ("SourceEventSource", "com.example.shop"),
    ("SourceEventDetailType", "Order Paid"),
    ("SourceBucketName", "uploads"),
    ("SourceBucketPrefix", "incoming/"),
    ("SourcesObject", "config-bucket/sources.json"),
];

/// The resources of the sources, by type.
const SOURCE_TYPES: [&str; 4] = [
    "AWS::SNS::Subscription",
    "AWS::Events::Rule",
    "AWS::Lambda::Permission",
    "AWS::Lambda::EventInvokeConfig",
];

fn submit_env(t: &Templates) -> &Value {
    &t.res("SubmitFunction")["Properties"]["Environment"]["Variables"]
}

/// The permissions to invoke the submit function: principal and source.
fn invokers(t: &Templates) -> Vec<(String, Value)> {
    t.of_type("AWS::Lambda::Permission")
        .into_iter()
        .map(|(_, r)| {
            let p = &r["Properties"];
            (
                p["Principal"].as_str().unwrap().to_owned(),
                p["SourceArn"].clone(),
            )
        })
        .collect()
}

#[test]
fn the_default_stack_has_no_event_source_and_no_sources_setting() {
    let t = templates_with(&[]);
    let count = |ty: &str| t.of_type(ty).len();
    assert_eq!(count("AWS::SNS::Subscription"), 0);
    assert_eq!(count("AWS::Events::Rule"), 0);
    assert_eq!(count("AWS::Lambda::EventInvokeConfig"), 0);
    // The HTTP API's permission, as before.
    let principals: Vec<String> = invokers(&t).into_iter().map(|(p, _)| p).collect();
    assert_eq!(principals, ["apigateway.amazonaws.com"]);
    assert!(submit_env(&t).get("SOURCES").is_none());
    let sids: Vec<Value> = t
        .role_statements("SubmitFunctionRole")
        .iter()
        .map(|s| s["Sid"].clone())
        .collect();
    assert!(!sids.contains(&json!("ReadTheSources")), "{sids:?}");
    assert!(!sids.contains(&json!("FailedEventsToTheDeadLetterQueue")));
}

#[test]
fn an_sns_topic_subscribes_the_submit_function_and_only_that_topic_may_invoke_it() {
    let t = templates_with(&[("SourceTopicArn", TOPIC)]);
    let subs = t.of_type("AWS::SNS::Subscription");
    assert_eq!(subs.len(), 1);
    let p = &subs[0].1["Properties"];
    assert_eq!(p["TopicArn"], json!({"Ref": "SourceTopicArn"}));
    assert_eq!(p["Protocol"], "lambda");
    assert_eq!(p["Endpoint"]["Fn::GetAtt"][0], "SubmitFunction");
    assert!(invokers(&t).contains(&("sns.amazonaws.com".into(), json!({"Ref": "SourceTopicArn"}))));
    assert_eq!(t.of_type("AWS::Events::Rule").len(), 0);
}

#[test]
fn an_eventbridge_rule_and_s3s_object_created_rule_each_invoke_submit_alone() {
    let t = templates_with(&ALL[1..5]);
    let rule = t.res("SourceEventsRule");
    assert_eq!(
        rule["Properties"]["EventPattern"],
        json!({"source": [{"Ref": "SourceEventSource"}], "detail-type": [{"Ref": "SourceEventDetailType"}]})
    );
    let bucket = t.res("SourceBucketRule");
    assert_eq!(
        bucket["Properties"]["EventPattern"],
        json!({"source": ["aws.s3"], "detail-type": ["Object Created"],
               "detail": {"bucket": {"name": [{"Ref": "SourceBucketName"}]},
                          "object": {"key": [{"prefix": {"Ref": "SourceBucketPrefix"}}]}}})
    );
    for r in [rule, bucket] {
        let targets = r["Properties"]["Targets"].as_array().unwrap();
        assert_eq!(targets.len(), 1);
        assert_eq!(targets[0]["Arn"]["Fn::GetAtt"][0], "SubmitFunction");
        assert_eq!(
            r["Properties"]["EventBusName"],
            json!({"Ref": "SourceEventBusName"})
        );
    }
    // Each rule's permission names that rule.
    let mut events: Vec<Value> = invokers(&t)
        .into_iter()
        .filter(|(p, _)| p == "events.amazonaws.com")
        .map(|(_, arn)| arn["Fn::GetAtt"][0].clone())
        .collect();
    events.sort_by_key(Value::to_string);
    assert_eq!(
        events,
        [json!("SourceBucketRule"), json!("SourceEventsRule")]
    );
    // Without a detail-type or a prefix, the patterns take any.
    let t = templates_with(&[("SourceEventSource", "shop"), ("SourceBucketName", "b")]);
    assert_eq!(
        t.res("SourceEventsRule")["Properties"]["EventPattern"],
        json!({"source": [{"Ref": "SourceEventSource"}]})
    );
    assert!(t.res("SourceBucketRule")["Properties"]["EventPattern"]["detail"]["object"].is_null());
}

#[test]
fn failed_asynchronous_events_go_to_the_dead_letter_queue_which_submit_may_send_to() {
    for one in &ALL[..4] {
        let t = templates_with(&[*one]);
        let cfgs = t.of_type("AWS::Lambda::EventInvokeConfig");
        if one.0 == "SourceEventDetailType" {
            assert!(cfgs.is_empty(), "a detail type alone wires nothing");
            continue;
        }
        assert_eq!(cfgs.len(), 1, "{one:?}");
        let p = &cfgs[0].1["Properties"];
        assert_eq!(p["MaximumRetryAttempts"], 2);
        let dest = &p["DestinationConfig"]["OnFailure"]["Destination"]["Fn::GetAtt"];
        assert_eq!(dest[0], "TaskDeadLetterQueue");
        let send: Vec<Value> = t
            .role_statements("SubmitFunctionRole")
            .into_iter()
            .filter(|s| s["Sid"] == "FailedEventsToTheDeadLetterQueue")
            .collect();
        assert_eq!(send.len(), 1, "{one:?}");
        assert_eq!(as_list(&send[0]["Action"]), [json!("sqs:SendMessage")]);
        assert_eq!(send[0]["Resource"]["Fn::GetAtt"][0], "TaskDeadLetterQueue");
    }
}

#[test]
fn the_sources_reach_the_function_inline_or_as_an_object_only_it_may_read() {
    let inline = r#"[{"name":"orders","match":{"sns":{"topic_arn":"x"}},"task_type":"t"}]"#;
    let t = templates_with(&[("Sources", inline)]);
    assert_eq!(submit_env(&t)["SOURCES"], json!({"Ref": "Sources"}));
    let t = templates_with(&[("SourcesObject", "config-bucket/sources.json")]);
    assert_eq!(sub(&submit_env(&t)["SOURCES"]), "s3://${SourcesObject}");
    let read: Vec<Value> = t
        .role_statements("SubmitFunctionRole")
        .into_iter()
        .filter(|s| s["Sid"] == "ReadTheSources")
        .collect();
    assert_eq!(read.len(), 1);
    assert_eq!(as_list(&read[0]["Action"]), [json!("s3:GetObject")]);
    assert_eq!(
        sub(&read[0]["Resource"]),
        "arn:${AWS::Partition}:s3:::${SourcesObject}"
    );
    // One setting: a rule refuses both.
    let rule = &t.source["Rules"]["OneSourcesSetting"];
    assert!(
        rule["Assertions"][0]["Assert"]
            .to_string()
            .contains("Sources")
    );
}

#[test]
fn cfn_lint_is_clean_with_every_source_wired() {
    let mut args = vec!["--parameters".to_owned(), "BucketName=my-queue".to_owned()];
    args.extend(ALL.iter().map(|(k, v)| format!("{k}={v}")));
    let o = Command::new("cfn-lint")
        .arg(format!("{}/template.yaml", root()))
        .args(&args)
        .output()
        .expect("cfn-lint is installed (make test installs it)");
    crate::common::assert_ran(&o, "cfn-lint");
    let t = templates_with(&ALL);
    for ty in SOURCE_TYPES {
        assert!(!t.of_type(ty).is_empty(), "{ty}");
    }
}
