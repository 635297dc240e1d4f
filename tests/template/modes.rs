use super::*;

#[test]
fn record_events_come_from_the_bucket_by_default_and_from_the_submitter_when_told() {
    let bucket = templates();
    bucket.assert_choice("RecordEvents", "bucket", &["bucket", "submitter"]);
    let submitter = templates_with(&[("RecordEvents", "submitter")]);
    for (t, notified) in [(&bucket, true), (&submitter, false)] {
        let b = &t.res("QueueBucket")["Properties"];
        assert_eq!(
            b["NotificationConfiguration"].is_object(),
            notified,
            "{}",
            b["NotificationConfiguration"]
        );
        let env = &t.res("SubmitFunction")["Properties"]["Environment"]["Variables"];
        assert_eq!(env["RECORD_EVENTS"]["Ref"], "RecordEvents");
        assert_eq!(env["DUE_QUEUE_URL"]["Ref"], "DueQueue");
        // The sweeper sends nothing: it is never told to.
        let sweep_env = &t.res("SweepFunction")["Properties"]["Environment"]["Variables"];
        assert!(sweep_env["RECORD_EVENTS"].is_null() && sweep_env["DUE_QUEUE_URL"].is_null());
        assert!(!due_queue_actions(t, "SweepFunctionRole").contains(&"sqs:SendMessage".to_owned()));
        // The queue, its delay and its consumer are the same either way.
        assert_eq!(
            t.res("DueQueue")["Properties"]["DelaySeconds"]["Ref"],
            "StaleCreatingAfterSeconds"
        );
        assert_eq!(
            t.res("SweepDueMapping")["Properties"]["EventSourceArn"]["Fn::GetAtt"][0],
            "DueQueue"
        );
    }
    // Under submitter, the submit role may send to the due queue, and do
    // nothing else with it; under bucket, it may not touch it.
    assert!(due_queue_actions(&bucket, "SubmitFunctionRole").is_empty());
    assert_eq!(
        due_queue_actions(&submitter, "SubmitFunctionRole"),
        ["sqs:SendMessage"]
    );
}

#[test]
fn a_bucket_at_another_provider_has_an_endpoint_and_a_key_pair_only_the_s3_client_reads() {
    let secret = "arn:aws:secretsmanager:us-east-1:123456789012:secret:store-keys-AbCdEf";
    let aws = templates();
    let other = templates_with(&[
        ("S3Endpoint", "https://account.r2.cloudflarestorage.com"),
        ("S3CredentialsSecret", secret),
        ("S3ForcePathStyle", "true"),
        ("CreateBucket", "false"),
        ("RecordEvents", "submitter"),
    ]);
    for p in ["S3Endpoint", "S3CredentialsSecret", "S3ForcePathStyle"] {
        assert!(aws.out["Parameters"][p].is_object(), "parameter {p}");
    }
    assert_eq!(aws.param_default("S3Endpoint"), "");
    assert_eq!(aws.param_default("S3CredentialsSecret"), "");
    let secret_grants = |t: &Templates, role: &str| -> Vec<Value> {
        t.role_statements(role)
            .into_iter()
            .filter(|s| s["Action"].to_string().contains("secretsmanager:"))
            .collect()
    };
    for name in ["SubmitFunction", "SweepFunction"] {
        let role = format!("{name}Role");
        let env = |t: &Templates| t.res(name)["Properties"]["Environment"]["Variables"].clone();
        // AWS S3: the SDK's own endpoint and the role's credentials.
        let e = env(&aws);
        assert!(e["AWS_ENDPOINT_URL_S3"].is_null() && e["S3_CREDENTIALS_SECRET"].is_null());
        assert!(secret_grants(&aws, &role).is_empty(), "{role}");
        // Another provider: the S3 client's endpoint only (not SQS's, nor
        // every client's), and the secret read with the role.
        let e = env(&other);
        assert_eq!(e["AWS_ENDPOINT_URL_S3"]["Ref"], "S3Endpoint");
        assert_eq!(e["S3_CREDENTIALS_SECRET"]["Ref"], "S3CredentialsSecret");
        assert_eq!(e["S3_FORCE_PATH_STYLE"]["Ref"], "S3ForcePathStyle");
        assert!(e["AWS_ENDPOINT_URL"].is_null() && e["AWS_ENDPOINT_URL_SQS"].is_null());
        let g = secret_grants(&other, &role);
        assert_eq!(g.len(), 1, "{role}: {g:?}");
        assert_eq!(g[0]["Action"], "secretsmanager:GetSecretValue");
        assert_eq!(g[0]["Resource"]["Ref"], "S3CredentialsSecret");
    }
    // The stack creates no bucket elsewhere, and expects no S3 events from one.
    let rule = &aws.source["Rules"]["AnotherProvidersBucket"];
    assert_eq!(
        rule["RuleCondition"],
        serde_json::json!({"Fn::Not": [{"Fn::Equals": [{"Ref": "S3Endpoint"}, ""]}]})
    );
    let asserted: Vec<&Value> = rule["Assertions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| &a["Assert"]["Fn::Equals"])
        .collect();
    assert_eq!(
        asserted,
        [
            &serde_json::json!([{"Ref": "CreateBucket"}, "false"]),
            &serde_json::json!([{"Ref": "RecordEvents"}, "submitter"])
        ]
    );
    assert!(other.out["Resources"]["QueueBucket"].is_null());
}

#[test]
fn cfn_lint_is_clean_in_submitter_mode_at_another_provider() {
    let o = Command::new("cfn-lint")
        .arg(format!("{}/template.yaml", root()))
        .args([
            "--parameters",
            "BucketName=my-queue",
            "RecordEvents=submitter",
            "CreateBucket=false",
            "S3Endpoint=https://account.r2.cloudflarestorage.com",
            "S3ForcePathStyle=true",
            "S3CredentialsSecret=arn:aws:secretsmanager:us-east-1:123456789012:secret:store-keys-AbCdEf",
        ])
        .output()
        .expect("cfn-lint is installed (make test installs it)");
    assert_lint_clean(&o);
}

#[test]
fn a_key_reset_is_routed_only_when_the_stack_allows_it_and_no_submit_role_deletes_records() {
    let off = templates();
    let on = templates_with(&[("AllowKeyReset", "on")]);
    assert_eq!(off.param_default("AllowKeyReset"), "off");
    assert!(off.out["Resources"]["ResetIdempotencyKeyRoute"].is_null());
    assert_eq!(
        on.res("ResetIdempotencyKeyRoute")["Properties"]["RouteKey"],
        "DELETE /idempotency-keys/{key+}"
    );
    for t in [&off, &on] {
        assert!(t.res("GetIdempotencyKeyRoute").is_object());
        assert_eq!(
            t.res("SubmitFunction")["Properties"]["Environment"]["Variables"]["ALLOW_KEY_RESET"]["Ref"],
            "AllowKeyReset"
        );
    }
    let deletes_records = |t: &Templates| {
        t.role_statements("SubmitFunctionRole").iter().any(|s| {
            as_list(&s["Action"]).iter().any(|a| a == "s3:DeleteObject")
                && as_list(&s["Resource"])
                    .iter()
                    .any(|r| sub(r).ends_with("/idempotency/*"))
        })
    };
    // A reset writes a reset record (PutObject If-Match), which the
    // Records statement grants in every stack.
    assert!(!deletes_records(&off));
    assert!(!deletes_records(&on));
}
