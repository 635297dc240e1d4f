use super::*;

#[test]
fn each_function_gets_explicit_actions_on_the_prefixes_it_uses_and_nothing_wider() {
    let t = templates();
    let src = serde_json::to_string(&t.source).unwrap();
    assert!(!src.contains("S3CrudPolicy") && !src.contains("S3FullAccess"));
    for role in ["SubmitFunctionRole", "SweepFunctionRole"] {
        assert_managed_logs_and_xray_and_no_wildcard(&t, role);
    }
    // Object actions name their prefixes; only ListBucket is on the bucket.
    let has = |g: &[(String, String)], action: &str, suffix: &str| {
        g.iter().any(|(a, r)| a == action && r.ends_with(suffix))
    };
    let submit = t.grants("SubmitFunctionRole");
    for prefix in ["/idempotency/*", "/tasks/*"] {
        // If-Match and If-None-Match writes need GetObject as well as PutObject.
        assert!(
            has(&submit, "s3:PutObject", prefix) && has(&submit, "s3:GetObject", prefix),
            "submit {prefix}"
        );
    }
    assert!(
        has(&submit, "s3:PutObject", "/ready/*") && has(&submit, "s3:PutObject", "/rejected/*")
    );
    // A replay of a `creating` record checks its marker: HEAD needs GetObject
    // (and ListBucket, so that a missing marker is a 404, not a 403).
    for g in [
        &t.grants("SubmitFunctionRole"),
        &t.grants("SweepFunctionRole"),
    ] {
        assert!(
            has(g, "s3:GetObject", "/ready/*") && has(g, "s3:GetObject", "/tasks/*"),
            "HEAD of a marker and GET of a task"
        );
        assert!(has(g, "s3:ListBucket", "${BucketName}"));
    }
    // Submit deletes nothing but a marker of its own that a worker
    // overtook (both functions may), and the payload it wrote beside a claim
    // that lost.
    assert!(
        submit
            .iter()
            .filter(|(a, _)| a == "s3:DeleteObject")
            .all(|(_, r)| r.ends_with("/ready/*") || r.ends_with("/payloads/*")),
        "submit deletes only markers and orphan payloads"
    );
    for g in [
        &t.grants("SubmitFunctionRole"),
        &t.grants("SweepFunctionRole"),
    ] {
        assert!(
            has(g, "s3:DeleteObject", "/ready/*"),
            "a stale marker of ours is removed"
        );
    }
    assert!(has(&submit, "sqs:ReceiveMessage", "") && has(&submit, "sqs:DeleteMessage", ""));
    let sweep = t.grants("SweepFunctionRole");
    assert!(has(&sweep, "s3:DeleteObject", "/idempotency/*"));
    assert!(
        !has(&sweep, "s3:PutObject", "/idempotency/*"),
        "the sweeper never writes a record"
    );
    assert!(
        has(&sweep, "s3:GetObject", "/idempotency/*") && has(&sweep, "s3:PutObject", "/tasks/*")
    );
    assert!(has(&sweep, "s3:PutObject", "/sweeper/*"));
    assert!(
        !sweep.iter().any(|(a, r)| a == "s3:DeleteObject"
            && !r.ends_with("/idempotency/*")
            && !r.ends_with("/ready/*")
            && !r.ends_with("/payloads/*")
            && !r.ends_with("/sweeper/tail/*")),
        "the sweeper deletes expired records, stale markers of its own, orphan payloads and its payload check's side objects, nothing else"
    );
    assert!(has(&sweep, "s3:DeleteObject", "/sweeper/tail/*"));
    for g in [&submit, &sweep] {
        for (a, r) in g.iter().filter(|(a, _)| a.starts_with("s3:")) {
            if a == "s3:ListBucket" {
                assert!(r.ends_with("${BucketName}"), "{a} on {r}");
            } else {
                assert!(
                    r.contains("${BucketName}/") && r.ends_with("/*"),
                    "{a} on {r}"
                );
            }
        }
    }
}

#[test]
fn no_role_of_ours_can_overwrite_a_task() {
    let t = templates();
    for role in ["SubmitFunctionRole", "SweepFunctionRole"] {
        let mut puts_on_tasks = t.statements_on(role, |r| sub(r).ends_with("/tasks/*"));
        puts_on_tasks.retain(|s| as_list(&s["Action"]).iter().any(|a| a == "s3:PutObject"));
        assert_eq!(puts_on_tasks.len(), 1, "{role}: {puts_on_tasks:?}");
        let s = &puts_on_tasks[0];
        assert_eq!(
            as_list(&s["Action"]),
            vec![Value::from("s3:PutObject")],
            "{role}"
        );
        assert_eq!(
            s["Condition"],
            serde_json::json!({"StringEquals": {"s3:if-none-match": "*"}}),
            "{role}"
        );
    }
}

#[test]
fn only_the_submit_function_reads_schemas_and_it_checks_inputs_only_when_told() {
    let t = templates();
    let on_schemas = |role: &str| t.statements_on(role, |r| sub(r).contains("/schemas/"));
    let submit = on_schemas("SubmitFunctionRole");
    assert_eq!(submit.len(), 1, "{submit:?}");
    assert_eq!(
        as_list(&submit[0]["Action"]),
        vec![Value::from("s3:GetObject")],
        "read only: buquet's clients publish schemas"
    );
    assert!(submit[0]["Condition"].is_null());
    assert_eq!(
        as_list(&submit[0]["Resource"])
            .iter()
            .map(sub)
            .collect::<Vec<_>>(),
        ["arn:${AWS::Partition}:s3:::${BucketName}/schemas/*"]
    );
    assert!(
        on_schemas("SweepFunctionRole").is_empty(),
        "the sweeper finishes what was accepted: it never reads a schema"
    );
    // Off by default; the setting and its cache's TTL reach the submit
    // function alone.
    assert_eq!(t.param_default("ValidateInputSchemas"), "off");
    assert_eq!(t.param_default("SchemaCacheSeconds"), 60);
    let env = |f: &str| t.res(f)["Properties"]["Environment"]["Variables"].clone();
    assert_eq!(
        env("SubmitFunction")["VALIDATE_INPUT_SCHEMAS"],
        serde_json::json!({"Ref": "ValidateInputSchemas"})
    );
    assert_eq!(
        env("SubmitFunction")["SCHEMA_CACHE_SECONDS"],
        serde_json::json!({"Ref": "SchemaCacheSeconds"})
    );
    // The globals are still there beside it.
    assert_eq!(
        env("SubmitFunction")["BUCKET_NAME"],
        serde_json::json!({"Ref": "BucketName"})
    );
    assert!(env("SweepFunction").get("VALIDATE_INPUT_SCHEMAS").is_none());
}

#[test]
fn both_functions_only_create_payloads_with_if_none_match_and_may_delete_them() {
    let t = templates();
    for role in ["SubmitFunctionRole", "SweepFunctionRole"] {
        let on_payloads = t.statements_on(role, |r| sub(r).ends_with("/payloads/*"));
        let puts: Vec<&Value> = on_payloads
            .iter()
            .filter(|s| as_list(&s["Action"]).iter().any(|a| a == "s3:PutObject"))
            .collect();
        assert_eq!(puts.len(), 1, "{role}: {on_payloads:?}");
        assert_eq!(
            as_list(&puts[0]["Action"]),
            vec![Value::from("s3:PutObject")],
            "{role}"
        );
        assert_eq!(
            puts[0]["Condition"],
            serde_json::json!({"StringEquals": {"s3:if-none-match": "*"}}),
            "{role}: a payload is only ever created"
        );
        let actions: Vec<Value> = on_payloads
            .iter()
            .flat_map(|s| as_list(&s["Action"]))
            .collect();
        assert!(actions.contains(&Value::from("s3:DeleteObject")), "{role}");
        assert!(
            actions
                .iter()
                .all(|a| a == "s3:PutObject" || a == "s3:DeleteObject"),
            "{role}: nothing else on payloads/: {actions:?}"
        );
    }
}

/// `role`'s managed policies are Logs and X-Ray only, and none of its
/// statements names every action or every resource.
fn assert_managed_logs_and_xray_and_no_wildcard(t: &Templates, role: &str) {
    // Logs, and X-Ray for `Tracing: Active`; nothing else managed.
    let managed = &t.res(role)["Properties"]["ManagedPolicyArns"];
    let managed: Vec<String> = as_list(managed)
        .iter()
        .map(|v| v.as_str().map_or_else(|| sub(v), str::to_owned))
        .collect();
    assert_eq!(managed.len(), 2, "{role}: {managed:?}");
    assert!(
        managed[0].ends_with(":iam::aws:policy/service-role/AWSLambdaBasicExecutionRole"),
        "{role}: {managed:?}"
    );
    assert!(
        managed[1].ends_with(":iam::aws:policy/AWSXrayWriteOnlyAccess"),
        "{role}: {managed:?}"
    );
    for s in t.role_statements(role) {
        for a in as_list(&s["Action"]) {
            let a = a.as_str().unwrap();
            assert!(!a.ends_with('*'), "{role}: wildcard action {a}");
        }
        for r in as_list(&s["Resource"]) {
            assert!(
                !r.is_string() || r != "*",
                "{role}: a statement on every resource"
            );
        }
    }
}

impl Templates {
    /// Every (action, resource) pair `role`'s statements grant.
    fn grants(&self, role: &str) -> Vec<(String, String)> {
        self.role_statements(role)
            .iter()
            .flat_map(|s| {
                let actions = as_list(&s["Action"]);
                let resources = as_list(&s["Resource"]);
                actions.into_iter().flat_map(move |a| {
                    resources
                        .clone()
                        .into_iter()
                        .map(move |r| (a.as_str().unwrap().to_owned(), sub(&r)))
                })
            })
            .collect()
    }
}
