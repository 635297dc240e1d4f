//! template.yaml, offline: cfn-lint is clean, the SAM translation succeeds,
//! and the translated template has the properties operators rely on.
//! Needs `cfn-lint` and `aws-sam-translator` (make test installs them); fails
//! without them. tests/template_sources.rs uses its translation too.

use std::process::Command;

use serde_json::Value;

pub(crate) fn root() -> &'static str {
    env!("CARGO_MANIFEST_DIR")
}

pub(crate) struct Templates {
    pub(crate) source: Value,
    pub(crate) out: Value,
}

/// The template as SAM translates it, its conditions decided for the
/// parameters' defaults.
fn templates() -> Templates {
    templates_with(&[])
}

/// The template as SAM translates it with `params` (the rest at their
/// defaults), and then as CloudFormation would create it with them: every
/// `Fn::If` decided, `AWS::NoValue` dropped, and resources whose condition
/// is false gone.
pub(crate) fn templates_with(params: &[(&str, &str)]) -> Templates {
    let o = Command::new("python3")
        .arg(format!("{}/scripts/translate_template.py", root()))
        .arg(format!("{}/template.yaml", root()))
        .args(params.iter().map(|(k, v)| format!("{k}={v}")))
        .output()
        .expect("python3 runs");
    assert!(
        o.status.success(),
        "the SAM translation failed (is aws-sam-translator installed?): {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let mut out = v["translated"].clone();
    let values = Conditions::new(&out, params);
    let resources = out["Resources"].as_object_mut().unwrap();
    resources.retain(|_, r| r["Condition"].as_str().is_none_or(|c| values.condition(c)));
    let out = values.decide(&out).unwrap_or(Value::Null);
    Templates {
        source: v["source"].clone(),
        out,
    }
}

/// A template's parameters and conditions, for one set of values.
struct Conditions {
    params: serde_json::Map<String, Value>,
    conditions: Value,
}

impl Conditions {
    fn new(template: &Value, given: &[(&str, &str)]) -> Self {
        let mut params = serde_json::Map::new();
        for (name, p) in template["Parameters"].as_object().unwrap() {
            if let Some(d) = p.get("Default") {
                let d = d.as_str().map_or_else(|| d.to_string(), str::to_owned);
                params.insert(name.clone(), Value::String(d));
            }
        }
        for (k, v) in given {
            assert!(template["Parameters"][*k].is_object(), "no parameter {k}");
            params.insert((*k).to_owned(), Value::String((*v).to_owned()));
        }
        Conditions {
            params,
            conditions: template["Conditions"].clone(),
        }
    }

    /// A parameter reference or a literal, as a string.
    fn value(&self, v: &Value) -> String {
        match v.get("Ref").and_then(Value::as_str) {
            Some(p) => self.params[p].as_str().unwrap().to_owned(),
            None => v.as_str().map_or_else(|| v.to_string(), str::to_owned),
        }
    }

    fn holds(&self, c: &Value) -> bool {
        if let Some(name) = c.get("Condition").and_then(Value::as_str) {
            return self.condition(name);
        }
        let (op, args) = c.as_object().unwrap().iter().next().unwrap();
        let args = args.as_array().unwrap();
        match op.as_str() {
            "Fn::Equals" => self.value(&args[0]) == self.value(&args[1]),
            "Fn::Not" => !self.holds(&args[0]),
            "Fn::And" => args.iter().all(|a| self.holds(a)),
            "Fn::Or" => args.iter().any(|a| self.holds(a)),
            other => panic!("condition function {other}"),
        }
    }

    fn condition(&self, name: &str) -> bool {
        self.holds(&self.conditions[name])
    }

    /// `v` with every `Fn::If` decided; `None` for `AWS::NoValue`.
    fn decide(&self, v: &Value) -> Option<Value> {
        match v {
            Value::Object(o) if o.len() == 1 && o.contains_key("Fn::If") => {
                let args = o["Fn::If"].as_array().unwrap();
                let pick = if self.condition(args[0].as_str().unwrap()) {
                    &args[1]
                } else {
                    &args[2]
                };
                self.decide(pick)
            }
            Value::Object(o)
                if o.len() == 1 && o.get("Ref") == Some(&Value::from("AWS::NoValue")) =>
            {
                None
            }
            Value::Object(o) => Some(Value::Object(
                o.iter()
                    .filter_map(|(k, v)| self.decide(v).map(|v| (k.clone(), v)))
                    .collect(),
            )),
            Value::Array(a) => Some(Value::Array(
                a.iter().filter_map(|v| self.decide(v)).collect(),
            )),
            other => Some(other.clone()),
        }
    }
}

impl Templates {
    pub(crate) fn res(&self, name: &str) -> &Value {
        let r = &self.out["Resources"][name];
        assert!(r.is_object(), "no resource {name}");
        r
    }

    pub(crate) fn of_type(&self, ty: &str) -> Vec<(&String, &Value)> {
        self.out["Resources"]
            .as_object()
            .unwrap()
            .iter()
            .filter(|(_, r)| r["Type"] == ty)
            .collect()
    }

    fn param_default(&self, name: &str) -> &Value {
        &self.out["Parameters"][name]["Default"]
    }

    pub(crate) fn role_statements(&self, role: &str) -> Vec<Value> {
        self.res(role)["Properties"]["Policies"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|p| p["PolicyDocument"]["Statement"].as_array().unwrap().clone())
            .collect()
    }
}

pub(crate) fn as_list(v: &Value) -> Vec<Value> {
    match v {
        Value::Array(a) => a.clone(),
        other => vec![other.clone()],
    }
}

pub(crate) fn sub(v: &Value) -> String {
    v["Fn::Sub"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| v.to_string())
}

#[test]
fn cfn_lint_is_clean() {
    let o = Command::new("cfn-lint")
        .arg(format!("{}/template.yaml", root()))
        .output()
        .expect("cfn-lint is installed (make test installs it)");
    assert!(
        o.status.success(),
        "cfn-lint: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn both_functions_are_al2023_rust_builds_of_their_binaries_on_arm64_by_default() {
    let t = templates();
    assert_eq!(t.param_default("Architecture"), "arm64");
    assert_eq!(
        t.out["Parameters"]["Architecture"]["AllowedValues"],
        serde_json::json!(["arm64", "x86_64"])
    );
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
    assert_eq!(t.param_default("ApiAuth"), "AWS_IAM");
    assert_eq!(
        t.out["Parameters"]["ApiAuth"]["AllowedValues"],
        serde_json::json!(["AWS_IAM", "NONE"])
    );
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
    assert_eq!(maps.len(), 2);
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
    assert_eq!(p["Target"]["Arn"]["Fn::GetAtt"][0], "SweepFunction");
    assert_eq!(t.param_default("SweepSchedule"), "rate(1 day)");
    // Reserved concurrency of 1 would throttle the due queue's batches;
    // passes claim the checkpoint instead.
    let f = &t.res("SweepFunction")["Properties"];
    assert!(f["ReservedConcurrentExecutions"].is_null());
}

#[test]
fn record_events_reach_the_sweeper_through_a_delayed_due_queue_only_this_bucket_may_send_to() {
    let t = templates();
    let q = &t.res("DueQueue")["Properties"];
    assert_eq!(q["DelaySeconds"]["Ref"], "StaleCreatingAfterSeconds");
    assert_eq!(q["SqsManagedSseEnabled"], true);
    assert_eq!(
        q["RedrivePolicy"]["deadLetterTargetArn"]["Fn::GetAtt"][0],
        "DueDeadLetterQueue"
    );
    let dlq = &t.res("DueDeadLetterQueue")["Properties"];
    assert_eq!(dlq["SqsManagedSseEnabled"], true);
    assert!(
        dlq["MessageRetentionPeriod"].as_u64().unwrap()
            > q["MessageRetentionPeriod"].as_u64().unwrap()
    );
    let timeout = t.res("SweepFunction")["Properties"]["Timeout"]
        .as_u64()
        .unwrap();
    assert!(q["VisibilityTimeout"].as_u64().unwrap() >= 6 * timeout);
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

    // The sweep role polls this queue and no other.
    let sqs: Vec<Value> = t
        .role_statements("SweepFunctionRole")
        .into_iter()
        .filter(|s| s["Action"].to_string().contains("sqs:"))
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
    for prefix in ["idempotency/", "rejected/", "payloads/"] {
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
    // payloads/ are tasks' inputs: their current versions are the queue's.
    assert!(
        under("payloads/")
            .iter()
            .all(|r| r["ExpirationInDays"].is_null())
    );
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

#[test]
fn each_function_gets_explicit_actions_on_the_prefixes_it_uses_and_nothing_wider() {
    let t = templates();
    let src = serde_json::to_string(&t.source).unwrap();
    assert!(!src.contains("S3CrudPolicy") && !src.contains("S3FullAccess"));
    for role in ["SubmitFunctionRole", "SweepFunctionRole"] {
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
    // Object actions name their prefixes; only ListBucket is on the bucket.
    let grants = |role: &str| -> Vec<(String, String)> {
        t.role_statements(role)
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
    };
    let has = |g: &[(String, String)], action: &str, suffix: &str| {
        g.iter().any(|(a, r)| a == action && r.ends_with(suffix))
    };
    let submit = grants("SubmitFunctionRole");
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
    for g in [&grants("SubmitFunctionRole"), &grants("SweepFunctionRole")] {
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
    for g in [&grants("SubmitFunctionRole"), &grants("SweepFunctionRole")] {
        assert!(
            has(g, "s3:DeleteObject", "/ready/*"),
            "a stale marker of ours is removed"
        );
    }
    assert!(has(&submit, "sqs:ReceiveMessage", "") && has(&submit, "sqs:DeleteMessage", ""));
    let sweep = grants("SweepFunctionRole");
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
            && !r.ends_with("/payloads/*")),
        "the sweeper deletes expired records, stale markers of its own and orphan payloads, nothing else"
    );
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

#[test]
fn no_role_of_ours_can_overwrite_a_task() {
    let t = templates();
    for role in ["SubmitFunctionRole", "SweepFunctionRole"] {
        let puts_on_tasks: Vec<Value> = t
            .role_statements(role)
            .into_iter()
            .filter(|s| {
                as_list(&s["Action"]).iter().any(|a| a == "s3:PutObject")
                    && as_list(&s["Resource"])
                        .iter()
                        .any(|r| sub(r).ends_with("/tasks/*"))
            })
            .collect();
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
    let on_schemas = |role: &str| -> Vec<Value> {
        t.role_statements(role)
            .into_iter()
            .filter(|s| {
                as_list(&s["Resource"])
                    .iter()
                    .any(|r| sub(r).contains("/schemas/"))
            })
            .collect()
    };
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
        let on_payloads: Vec<Value> = t
            .role_statements(role)
            .into_iter()
            .filter(|s| {
                as_list(&s["Resource"])
                    .iter()
                    .any(|r| sub(r).ends_with("/payloads/*"))
            })
            .collect();
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

/// The actions a role's statements grant on the due queue.
fn due_queue_actions(t: &Templates, role: &str) -> Vec<String> {
    t.role_statements(role)
        .iter()
        .filter(|s| {
            as_list(&s["Resource"])
                .iter()
                .any(|r| r["Fn::GetAtt"][0] == "DueQueue")
        })
        .flat_map(|s| as_list(&s["Action"]))
        .map(|a| a.as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn record_events_come_from_the_bucket_by_default_and_from_the_submitter_when_told() {
    let bucket = templates();
    assert_eq!(bucket.param_default("RecordEvents"), "bucket");
    assert_eq!(
        bucket.out["Parameters"]["RecordEvents"]["AllowedValues"],
        serde_json::json!(["bucket", "submitter"])
    );
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
    assert!(
        o.status.success(),
        "cfn-lint: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
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
