//! The `idem` binary against moto: each command and its exit codes.

use crate::common;

use serde_json::Value;

struct Idem {
    bucket: String,
}

impl Idem {
    async fn new() -> Self {
        let store = common::moto_store().await;
        Idem {
            bucket: store.bucket().to_owned(),
        }
    }

    async fn run(&self, args: &[&str]) -> (i32, Value) {
        common::idem(&self.bucket, &[], args).await
    }

    /// `idem submit --type t --input <input>`, then `rest`.
    async fn submit_t(&self, input: &str, rest: &[&str]) -> (i32, Value) {
        let mut args = vec!["submit", "--type", "t", "--input", input];
        args.extend_from_slice(rest);
        self.run(&args).await
    }

    /// `idem key` of `k-tenant` in scope `t`, as `tenant`.
    async fn key_of(&self, tenant: &str) -> (i32, Value) {
        let args = [
            "key", "--scope", "t", "--key", "k-tenant", "--tenant", tenant,
        ];
        self.run(&args).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_creates_then_replays_with_exit_0() {
    let idem = Idem::new().await;
    let args = [
        "submit",
        "--type",
        "charge_customer",
        "--input",
        r#"{"order":"ORD-123","cents":1999}"#,
        "--key",
        "charge-ORD-123",
    ];
    let (code, first) = idem.run(&args).await;
    assert_eq!(code, 0, "{first}");
    assert_eq!(first["replayed"], false);
    assert_eq!(first["status"], "pending");
    assert_eq!(first["idempotency"]["scope"], "charge_customer");
    let (code, again) = idem.run(&args).await;
    assert_eq!(code, 0);
    assert_eq!(again["replayed"], true);
    assert_eq!(again["task_id"], first["task_id"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_exits_2_when_invalid_and_3_on_conflict() {
    let idem = Idem::new().await;
    let (code, v) = idem.run(&["submit", "--type", "a/b", "--input", "1"]).await;
    assert_eq!((code, v["error"].as_str()), (2, Some("invalid_request")));
    for (input, args, exit) in [
        ("{not json", &[][..], 2),
        ("1", &["--key", "k", "--ttl-seconds", "60"], 2),
        ("1", &["--key", "k", "--scope", "bad scope"], 2),
        ("1", &["--key", "k", "--scope", "queue"], 0),
    ] {
        let (code, v) = idem.submit_t(input, args).await;
        assert_eq!(code, exit, "{input} {args:?}: {v}");
    }
    let (code, v) = idem
        .submit_t("2", &["--key", "k", "--scope", "queue"])
        .await;
    assert_eq!(
        (code, v["error"].as_str()),
        (3, Some("idempotency_conflict"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_and_task_print_the_objects_or_exit_4() {
    let idem = Idem::new().await;
    let (_, s) = idem
        .submit_t(r#"{"x":1}"#, &["--key", "k1", "--scope", "billing"])
        .await;
    let id = s["task_id"].as_str().unwrap().to_owned();

    let (code, rec) = idem
        .run(&["key", "--scope", "billing", "--key", "k1"])
        .await;
    assert_eq!(code, 0, "{rec}");
    assert_eq!(rec["task_id"], id.as_str());
    assert_eq!(rec["status"], "creating", "a record is written once");
    assert!(rec.get("pending_task").is_none());
    // Judged as a reader judges it: young, so in flight, its task pending.
    assert_eq!(
        (rec["phase"].as_str(), rec["task_status"].as_str()),
        (Some("in_flight"), Some("pending")),
        "{rec}"
    );
    let (code, _) = idem
        .run(&["key", "--scope", "billing", "--key", "nope"])
        .await;
    assert_eq!(code, 4);

    let (code, task) = idem.run(&["task", &id]).await;
    assert_eq!(code, 0);
    assert_eq!(task["id"], id.as_str());
    assert_eq!(task["input"]["x"], 1);
    let (code, _) = idem.run(&["task", &uuid::Uuid::new_v4().to_string()]).await;
    assert_eq!(code, 4);
    let (code, _) = idem.run(&["task", "not-a-uuid"]).await;
    assert_eq!(code, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_bucket_name_is_named_in_the_error() {
    let idem = Idem {
        bucket: String::new(),
    };
    let (code, v) = idem.run(&["task", &uuid::Uuid::new_v4().to_string()]).await;
    assert_eq!(code, 2);
    assert!(v["detail"].as_str().unwrap().contains("BUCKET_NAME"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sweep_prints_its_summary() {
    let idem = Idem::new().await;
    idem.submit_t("1", &["--key", "k"]).await;
    let (code, dry) = idem.run(&["sweep", "--dry-run"]).await;
    assert_eq!(code, 0, "{dry}");
    assert_eq!(dry["dry_run"], true);
    assert_eq!(dry["scanned"], 1);
    let (code, s) = idem.run(&["sweep"]).await;
    assert_eq!(code, 0);
    assert_eq!(s["complete"], true);
    assert_eq!(s["dry_run"], false);
    for f in ["scanned", "finished", "expired_deleted"] {
        assert_eq!(dry[f], s[f], "the dry run counted {f} as the pass did");
    }
    for f in ["scanned", "finished", "expired_deleted", "errors"] {
        assert!(s[f].is_u64(), "{f} in {s}");
    }
    // Records are not promoted any more: nothing to count.
    assert!(s.get("promoted").is_none(), "{s}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_with_a_tenant_finds_that_tenants_record_only() {
    let store = common::moto_store().await;
    let bucket = store.bucket().to_owned();
    let queue = idempotent_submit::Queue::new(store, common::settings());
    // Submitted as the HTTP edge names an assumed role (session dropped).
    let s = queue
        .submit("t", serde_json::json!({"x": 1}))
        .idempotency_key("k-tenant")
        .tenant("iam:arn:aws:sts::123456789012:assumed-role/producer")
        .await
        .unwrap();
    let idem = Idem { bucket };
    // Any session of the role names the same tenant.
    let (code, rec) = idem
        .key_of("iam:arn:aws:sts::123456789012:assumed-role/producer/i-0abc")
        .await;
    assert_eq!(code, 0, "{rec}");
    assert_eq!(rec["task_id"], s.task_id.to_string());
    assert!(rec["tenant"].as_str().unwrap().starts_with("sha256:"));
    // The shared namespace and another tenant hold no such key.
    let (code, _) = idem
        .run(&["key", "--scope", "t", "--key", "k-tenant"])
        .await;
    assert_eq!(code, 4);
    let (code, _) = idem.key_of("lambda:other").await;
    assert_eq!(code, 4);
    // A tenant that is no principal form is invalid (exit 2).
    let (code, err) = idem.key_of("alice").await;
    assert_eq!(code, 2, "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_takes_a_flag_for_each_task_option_and_names_a_bad_one() {
    let idem = Idem::new().await;
    let (code, out) = idem
        .run(&[
            "submit",
            "--type",
            "report",
            "--input",
            r#"{"q":3}"#,
            "--key",
            "report-q3",
            "--timeout-seconds",
            "1800",
            "--max-retries",
            "10",
            "--retry-policy",
            r#"{"initial_interval_ms":500}"#,
            "--delay-seconds",
            "60",
            "--max-reschedules",
            "2",
            "--task-ttl-seconds",
            "7200",
            "--use-payload-refs",
            "--payload-ref-threshold-bytes",
            "4",
        ])
        .await;
    assert_eq!(code, 0, "{out}");
    let (code, task) = idem.run(&["task", out["task_id"].as_str().unwrap()]).await;
    assert_eq!(code, 0, "{task}");
    assert_eq!(task["timeout_seconds"], 1800);
    assert_eq!(task["max_retries"], 10);
    assert_eq!(task["retry_policy"]["initial_interval_ms"], 500);
    assert_eq!(task["max_reschedules"], 2);
    assert!(task["expires_at"].is_string());
    assert!(
        task["input"].is_null() && task["input_ref"].is_string(),
        "{task}"
    );
    let (code, v) = idem
        .run(&[
            "submit",
            "--type",
            "report",
            "--input",
            "1",
            "--schedule-at",
            "2030-01-01T00:00:00Z",
            "--delay-seconds",
            "5",
        ])
        .await;
    assert_eq!(code, 2, "{v}");
    assert!(v.to_string().contains("delay_seconds"), "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_if_task_failed_new_task_makes_a_new_task_for_a_key_whose_task_failed() {
    let store = common::moto_store().await;
    let idem = Idem {
        bucket: store.bucket().to_owned(),
    };
    let args = ["submit", "--type", "t", "--input", "1", "--key", "k"];
    let (code, first) = idem.run(&args).await;
    assert_eq!(code, 0, "{first}");
    let task_key = first["task_key"].as_str().unwrap();
    common::end_task(&store, task_key, "cancelled").await;
    let (_, replay) = idem.run(&args).await;
    assert_eq!(
        (&replay["task_id"], &replay["status"]),
        (&first["task_id"], &"cancelled".into())
    );
    let mut new_task = args.to_vec();
    new_task.extend(["--if-task-failed", "new_task"]);
    let (code, new) = idem.run(&new_task).await;
    assert_eq!(code, 0, "{new}");
    assert_eq!(new["replayed"], false);
    assert_eq!(new["replaces_task_id"], first["task_id"]);
    let (code, bad) = idem
        .submit_t("1", &["--key", "k", "--if-task-failed", "maybe"])
        .await;
    assert_eq!(code, 2, "{bad}");
    assert!(bad.to_string().contains("if_task_failed"), "{bad}");
}
