use super::*;

#[test]
fn both_functions_are_al2023_rust_builds_of_their_binaries_on_arm64_by_default() {
    let t = templates();
    t.assert_choice("Architecture", "arm64", &["arm64", "x86_64"]);
    for (name, binary) in [("SubmitFunction", "submit"), ("SweepFunction", "sweep")] {
        let src = &t.source["Resources"][name];
        assert_eq!(src["Metadata"]["BuildMethod"], "rust-cargolambda");
        assert_eq!(src["Metadata"]["BuildProperties"]["Binary"], binary);
        let p = &t.res(name)["Properties"];
        assert_eq!(p["Runtime"], "provided.al2023");
        assert_eq!(
            p["Architectures"],
            serde_json::json!([{"Ref": "Architecture"}])
        );
        assert_eq!(p["Handler"], "bootstrap");
        assert!(
            p["LoggingConfig"]["LogGroup"]["Ref"].is_string(),
            "{name} logs to its own group"
        );
        let env = &p["Environment"]["Variables"];
        for var in [
            "BUCKET_NAME",
            "IDEMPOTENCY_TTL_DAYS",
            "STALE_CREATING_AFTER_SECONDS",
            "FINISH_WINDOW_SECONDS",
            "TENANT_ISOLATION",
        ] {
            assert!(!env[var].is_null(), "{name} lacks {var}");
        }
    }
    for (_, lg) in t.of_type("AWS::Logs::LogGroup") {
        assert!(!lg["Properties"]["RetentionInDays"].is_null());
    }
    // submit, sweep, and the HTTP API's access log.
    assert_eq!(t.of_type("AWS::Logs::LogGroup").len(), 3);
}

#[test]
fn the_http_api_routes_post_and_get_with_a_switch_for_iam_auth() {
    let t = templates();
    assert_eq!(t.res("HttpApi")["Properties"]["ProtocolType"], "HTTP");
    let routes = t.of_type("AWS::ApiGatewayV2::Route");
    let mut keys: Vec<&str> = routes
        .iter()
        .map(|(_, r)| r["Properties"]["RouteKey"].as_str().unwrap())
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "GET /idempotency-keys/{key+}",
            "GET /tasks/{task_id}",
            "POST /tasks",
            "POST /tasks/batch"
        ]
    );
    for (_, r) in routes {
        assert_eq!(r["Properties"]["AuthorizationType"]["Ref"], "ApiAuth");
    }
    t.assert_choice("ApiAuth", "AWS_IAM", &["AWS_IAM", "NONE"]);
    let integ = &t.res("HttpApiIntegration")["Properties"];
    assert_eq!(integ["PayloadFormatVersion"], "2.0");
    assert_eq!(integ["IntegrationUri"]["Fn::GetAtt"][0], "SubmitFunction");
}

#[test]
fn the_queue_has_a_dead_letter_queue_partial_batch_failures_and_a_long_enough_visibility() {
    let t = templates();
    let q = &t.res("TaskQueue")["Properties"];
    assert_eq!(
        q["RedrivePolicy"]["deadLetterTargetArn"]["Fn::GetAtt"][0],
        "TaskDeadLetterQueue"
    );
    assert!(q["RedrivePolicy"]["maxReceiveCount"].as_u64().unwrap() >= 1);
    let timeout = t.res("SubmitFunction")["Properties"]["Timeout"]
        .as_u64()
        .unwrap();
    assert!(q["VisibilityTimeout"].as_u64().unwrap() >= 6 * timeout);
    let maps = t.of_type("AWS::Lambda::EventSourceMapping");
    assert_eq!(
        maps.len(),
        3,
        "the task queue's, the due queue's, the pass queue's"
    );
    let m = &t.res("SubmitQueueMapping")["Properties"];
    assert_eq!(
        m["FunctionResponseTypes"],
        serde_json::json!(["ReportBatchItemFailures"])
    );
    assert_eq!(m["EventSourceArn"]["Fn::GetAtt"][0], "TaskQueue");
    assert_eq!(m["FunctionName"]["Ref"], "SubmitFunction");
}

#[test]
fn the_sweeper_runs_its_pass_once_a_day_and_keeps_passes_apart_without_reserved_concurrency() {
    let t = templates();
    let s = t.of_type("AWS::Scheduler::Schedule");
    assert_eq!(s.len(), 1);
    let p = &s[0].1["Properties"];
    assert_eq!(p["ScheduleExpression"]["Ref"], "SweepSchedule");
    // Through the pass queue: a schedule's invocation that dies is started
    // again by its message (tests/template/pass.rs).
    assert_eq!(p["Target"]["Arn"]["Fn::GetAtt"][0], "PassQueue");
    assert_eq!(t.param_default("SweepSchedule"), "rate(1 day)");
    // Reserved concurrency of 1 would throttle the due queue's batches;
    // passes claim the checkpoint instead.
    let f = &t.res("SweepFunction")["Properties"];
    assert!(f["ReservedConcurrentExecutions"].is_null());
}

#[test]
fn record_events_reach_the_sweeper_through_a_delayed_due_queue_only_this_bucket_may_send_to() {
    let t = templates();
    let (q, _) = t.queue_with_dead_letters("DueQueue", "DueDeadLetterQueue");
    assert_eq!(q["DelaySeconds"]["Ref"], "StaleCreatingAfterSeconds");
    // The stale limit is an SQS delay: at most 900 s.
    assert_eq!(
        t.out["Parameters"]["StaleCreatingAfterSeconds"]["MaxValue"],
        900
    );
    assert!(
        t.out["Parameters"]["FinishWindowSeconds"]["MaxValue"]
            .as_u64()
            .unwrap()
            < 2700
    );

    // The bucket sends every record write, after the policy that lets it.
    let b = t.res("QueueBucket");
    assert_eq!(b["DependsOn"], "DueQueuePolicy");
    let n = &b["Properties"]["NotificationConfiguration"]["QueueConfigurations"][0];
    assert_eq!(n["Event"], "s3:ObjectCreated:*");
    assert_eq!(n["Queue"]["Fn::GetAtt"][0], "DueQueue");
    assert_eq!(
        n["Filter"]["S3Key"]["Rules"],
        serde_json::json!([{"Name": "prefix", "Value": "idempotency/"}])
    );
    let pol = &t.res("DueQueuePolicy")["Properties"]["PolicyDocument"]["Statement"][0];
    assert_eq!(pol["Principal"]["Service"], "s3.amazonaws.com");
    assert_eq!(pol["Action"], "sqs:SendMessage");
    assert!(sub(&pol["Condition"]["ArnLike"]["aws:SourceArn"]).ends_with(":s3:::${BucketName}"));
    assert_eq!(
        pol["Condition"]["StringEquals"]["aws:SourceAccount"]["Ref"],
        "AWS::AccountId"
    );

    // The queue triggers sweep with partial batch responses, bounded.
    let m = &t.res("SweepDueMapping")["Properties"];
    assert_eq!(m["EventSourceArn"]["Fn::GetAtt"][0], "DueQueue");
    assert_eq!(m["FunctionName"]["Ref"], "SweepFunction");
    assert_eq!(
        m["FunctionResponseTypes"],
        serde_json::json!(["ReportBatchItemFailures"])
    );
    assert_eq!(
        m["ScalingConfig"]["MaximumConcurrency"]["Ref"],
        "DueQueueMaxConcurrency"
    );

    // The sweep role polls this queue, and no other but its pass queue
    // (tests/template/pass.rs).
    let sqs: Vec<Value> = t
        .role_statements("SweepFunctionRole")
        .into_iter()
        .filter(|s| s["Action"].to_string().contains("sqs:"))
        .filter(|s| s["Resource"]["Fn::GetAtt"][0] != "PassQueue")
        .collect();
    assert_eq!(sqs.len(), 1, "{sqs:?}");
    assert_eq!(sqs[0]["Resource"]["Fn::GetAtt"][0], "DueQueue");

    // Alarms on its dead-letter queue and on the age of its oldest message.
    let alarm = |name: &str| &t.res(name)["Properties"];
    assert_eq!(
        alarm("DueDeadLetterAlarm")["Dimensions"][0]["Value"]["Fn::GetAtt"][0],
        "DueDeadLetterQueue"
    );
    assert_eq!(
        alarm("DueQueueAgeAlarm")["MetricName"],
        "ApproximateAgeOfOldestMessage"
    );
    assert_eq!(
        alarm("DueQueueAgeAlarm")["Dimensions"][0]["Value"]["Fn::GetAtt"][0],
        "DueQueue"
    );
    let dash = sub(&t.res("Dashboard")["Properties"]["DashboardBody"]);
    assert!(dash.contains("${DueQueue.QueueName}") && dash.contains("SweepPastDeadline"));
}

#[test]
fn the_bucket_is_private_encrypted_tls_only_and_expires_records_and_rejections() {
    let t = templates();
    let b = &t.res("QueueBucket")["Properties"];
    let pab = &b["PublicAccessBlockConfiguration"];
    for k in [
        "BlockPublicAcls",
        "BlockPublicPolicy",
        "IgnorePublicAcls",
        "RestrictPublicBuckets",
    ] {
        assert_eq!(pab[k], true, "{k}");
    }
    assert!(b["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"]["SSEAlgorithm"].is_string());
    let rules = b["LifecycleConfiguration"]["Rules"].as_array().unwrap();
    let rule = |prefix: &str| {
        rules
            .iter()
            .find(|r| r["Prefix"] == prefix && !r["ExpirationInDays"].is_null())
            .unwrap_or_else(|| panic!("no rule for {prefix}"))
            .clone()
    };
    assert_eq!(
        rule("idempotency/")["ExpirationInDays"]["Ref"],
        "IdempotencyLifecycleDays"
    );
    assert!(!rule("rejected/")["ExpirationInDays"].is_null());
    let max = t.param_default("IdempotencyMaxTtlDays").as_u64().unwrap();
    assert!(
        t.param_default("IdempotencyLifecycleDays")
            .as_u64()
            .unwrap()
            > max
    );

    let stmts = &t.res("QueueBucketPolicy")["Properties"]["PolicyDocument"]["Statement"];
    let tls = stmts
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["Effect"] == "Deny")
        .unwrap();
    assert_eq!(tls["Condition"]["Bool"]["aws:SecureTransport"], "false");
    // An existing bucket may be named instead.
    assert_eq!(t.res("QueueBucket")["Condition"], "MakeBucket");
}

#[test]
fn the_bucket_is_versioned_and_its_lifecycle_bounds_this_services_prefixes_only() {
    let t = templates();
    let b = &t.res("QueueBucket")["Properties"];
    assert_eq!(b["VersioningConfiguration"]["Status"], "Enabled");
    assert_eq!(t.param_default("NoncurrentRetentionDays"), 1);
    assert_eq!(
        t.out["Parameters"]["NoncurrentRetentionDays"]["MinValue"],
        1
    );
    let rules = b["LifecycleConfiguration"]["Rules"].as_array().unwrap();
    for r in rules {
        assert_eq!(r["Status"], "Enabled", "{r}");
        // S3 refuses ExpiredObjectDeleteMarker beside a days expiry.
        assert!(
            r["ExpiredObjectDeleteMarker"].is_null() || r["ExpirationInDays"].is_null(),
            "{r}"
        );
    }
    let under = |prefix: &str| -> Vec<&Value> {
        rules
            .iter()
            .filter(|r| r["Prefix"] == prefix)
            .collect::<Vec<_>>()
    };
    for prefix in ["idempotency/", "rejected/", "payloads/", "sweeper/"] {
        let rs = under(prefix);
        assert!(
            rs.iter().any(
                |r| r["NoncurrentVersionExpiration"]["NoncurrentDays"]["Ref"]
                    == "NoncurrentRetentionDays"
            ),
            "noncurrent versions under {prefix} expire"
        );
        assert!(
            rs.iter().any(|r| r["ExpiredObjectDeleteMarker"] == true),
            "expired delete markers under {prefix} are removed"
        );
    }
    // payloads/ are tasks' inputs: their current versions are the queue's;
    // sweeper/ holds the pass's place, rewritten, never expired.
    for prefix in ["payloads/", "sweeper/"] {
        assert!(
            under(prefix)
                .iter()
                .all(|r| r["ExpirationInDays"].is_null()),
            "current versions under {prefix} are kept"
        );
    }
    let whole: Vec<&Value> = rules
        .iter()
        .filter(|r| r["Prefix"].is_null() && r["Filter"].is_null())
        .collect();
    assert_eq!(whole.len(), 1, "one rule for the whole bucket: {whole:?}");
    assert!(
        whole[0]["AbortIncompleteMultipartUpload"]["DaysAfterInitiation"]
            .as_u64()
            .is_some_and(|d| d >= 1)
    );
    assert!(
        whole[0]["ExpirationInDays"].is_null()
            && whole[0]["NoncurrentVersionExpiration"].is_null()
            && whole[0]["ExpiredObjectDeleteMarker"].is_null(),
        "the whole-bucket rule expires nothing of the queue's: {}",
        whole[0]
    );
    // The queue's own prefixes are left to its operators.
    for r in rules {
        let p = r["Prefix"].as_str().unwrap_or("");
        for queue_prefix in ["tasks/", "ready/", "leases/", "schedules/"] {
            assert!(!p.starts_with(queue_prefix), "{r}");
        }
    }
}
