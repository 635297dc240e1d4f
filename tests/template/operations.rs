use super::*;

#[test]
fn alarms_watch_the_dead_letter_queue_and_both_functions_and_a_dashboard_shows_the_metrics() {
    let t = templates();
    let alarms = t.of_type("AWS::CloudWatch::Alarm");
    let on = |metric: &str, dim: &str| {
        alarms.iter().any(|(_, a)| {
            let p = &a["Properties"];
            p["MetricName"] == metric && p["Dimensions"][0]["Value"].to_string().contains(dim)
        })
    };
    assert!(on(
        "ApproximateNumberOfMessagesVisible",
        "TaskDeadLetterQueue"
    ));
    assert!(on("Errors", "SubmitFunction"));
    assert!(on("Errors", "SweepFunction"));
    // Our metrics' dimension is the function's own name (two stacks in one
    // account never mix), in the alarm and in the dashboard.
    assert!(on("SweepErrors", "SweepFunction"));
    // An unusable published schema checks nothing: its metric has an alarm.
    assert!(on("InvalidSchema", "SubmitFunction"));
    let body = sub(&t.res("Dashboard")["Properties"]["DashboardBody"]);
    assert!(body.contains(r#""Created", "Function", "${SubmitFunction}""#));
    assert!(body.contains(r#""SweepScanned", "Function", "${SweepFunction}""#));
    assert!(!body.contains(r#""Function", "submit""#) && !body.contains(r#""Function", "sweep""#));
    for m in [
        "Created",
        "Replayed",
        "Recovered",
        "Conflict",
        "Rejected",
        "StorageError",
        "SweepFinished",
        "SweepExpiredDeleted",
        "SweepErrors",
        "InputInvalid",
        "InvalidSchema",
    ] {
        assert!(
            body.contains(&format!("\"{m}\"")),
            "the dashboard lacks {m}"
        );
    }
}

#[test]
fn parameters_and_outputs_are_there_for_operators() {
    let t = templates();
    for p in [
        "IdempotencyTtlDays",
        "IdempotencyMaxTtlDays",
        "StaleCreatingAfterSeconds",
        "SweepSchedule",
        "BucketName",
        "CreateBucket",
    ] {
        assert!(t.out["Parameters"][p].is_object(), "parameter {p}");
    }
    assert_eq!(t.param_default("IdempotencyTtlDays"), 30);
    assert_eq!(t.param_default("StaleCreatingAfterSeconds"), 600);
    for o in ["ApiUrl", "QueueUrl", "Bucket"] {
        assert!(t.out["Outputs"][o].is_object(), "output {o}");
    }
}

#[test]
fn an_exposed_api_is_bounded_throttled_logged_and_traced() {
    let t = templates();
    let stage = &t.res("HttpApiStage")["Properties"];
    let route = &stage["DefaultRouteSettings"];
    assert_eq!(
        route["ThrottlingRateLimit"]["Ref"],
        "ApiThrottlingRateLimit"
    );
    assert_eq!(
        route["ThrottlingBurstLimit"]["Ref"],
        "ApiThrottlingBurstLimit"
    );
    assert_eq!(t.param_default("ApiThrottlingRateLimit"), 100);
    assert_eq!(t.param_default("ApiThrottlingBurstLimit"), 200);
    // The access log names who called and from where.
    let log = &stage["AccessLogSettings"];
    assert_eq!(log["DestinationArn"]["Fn::GetAtt"][0], "ApiAccessLogGroup");
    let format = log["Format"].as_str().unwrap();
    let fields: serde_json::Map<String, Value> = serde_json::from_str(format).expect("JSON lines");
    for (field, var) in [
        ("sourceIp", "$context.identity.sourceIp"),
        ("userArn", "$context.identity.userArn"),
        ("principalId", "$context.authorizer.principalId"),
        ("requestId", "$context.requestId"),
        ("status", "$context.status"),
    ] {
        assert_eq!(fields[field], var, "{field}");
    }
    assert!(t.res("ApiAccessLogGroup")["Properties"]["RetentionInDays"].is_object());
    // submit: reserved concurrency from a parameter (0 turns it off).
    let submit = &t.source["Resources"]["SubmitFunction"]["Properties"];
    let reserved = &submit["ReservedConcurrentExecutions"]["Fn::If"];
    assert_eq!(reserved[0], "ReserveSubmitConcurrency");
    assert_eq!(reserved[1]["Ref"], "SubmitReservedConcurrency");
    assert_eq!(
        t.res("SubmitFunction")["Properties"]["ReservedConcurrentExecutions"]["Ref"],
        "SubmitReservedConcurrency"
    );
    assert_eq!(t.param_default("SubmitReservedConcurrency"), 50);
    // Both functions traced.
    for f in ["SubmitFunction", "SweepFunction"] {
        assert_eq!(
            t.res(f)["Properties"]["TracingConfig"]["Mode"],
            "Active",
            "{f}"
        );
    }
}
