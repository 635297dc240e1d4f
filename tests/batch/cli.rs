use super::*;

// ---- idem submit --batch ----

async fn idem_batch(bucket: &str, lines: &str) -> (i32, Vec<Value>) {
    let dir = std::env::temp_dir().join(format!(
        "idem-batch-{}-{}",
        std::process::id(),
        fastrand::u32(..)
    ));
    std::fs::write(&dir, lines).unwrap();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(["submit", "--batch", dir.to_str().unwrap()])
        .env_clear()
        .env("BUCKET_NAME", bucket)
        .env("AWS_ENDPOINT_URL", common::moto_endpoint())
        .env("S3_FORCE_PATH_STYLE", "true")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "us-east-1")
        .env("MAX_BATCH_TASKS", "2")
        .output()
        .await
        .expect("running idem");
    let _ = std::fs::remove_file(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect();
    (out.status.code().unwrap_or(-1), lines)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idem_submit_batch_prints_one_result_per_line_in_order_with_its_exit_code() {
    let store = common::moto_store().await;
    let b = store.bucket();
    // Five lines, two at a time (MAX_BATCH_TASKS=2), a blank line skipped.
    let file: String = (0..5)
        .map(|i| format!("{}\n", item(&format!("cli{i}"), i)))
        .collect::<String>()
        + "\n";
    let (code, first) = idem_batch(b, &file).await;
    assert_eq!(code, 0, "{first:?}");
    assert_eq!(first.len(), 5);
    for (i, r) in first.iter().enumerate() {
        assert_eq!(r["status_code"], 201);
        assert_eq!(r["idempotency"]["key"], format!("cli{i}"));
    }
    let (code, again) = idem_batch(b, &file).await;
    assert_eq!(code, 0);
    for (a, f) in again.iter().zip(&first) {
        assert_eq!(
            (a["status_code"].as_u64(), &a["task_id"]),
            (Some(200), &f["task_id"])
        );
    }
    // An invalid line: exit 2, and the others still go.
    let (code, rs) = idem_batch(b, &format!("{}\n{{not json\n", item("cli9", 9))).await;
    assert_eq!(code, 2);
    assert_eq!(
        (rs[0]["status_code"].as_u64(), rs[1]["code"].as_str()),
        (Some(201), Some("invalid_request"))
    );
    // A conflict outranks an invalid line: exit 3.
    let (code, rs) = idem_batch(b, &format!("{}\n[]\n", item("cli0", 99))).await;
    assert_eq!(code, 3);
    assert_eq!(rs[0]["code"], "idempotency_conflict");
    // No line at all, or no file: exit 2.
    let (code, rs) = idem_batch(b, "\n").await;
    assert_eq!(
        (code, rs[0]["error"].as_str()),
        (2, Some("invalid_request"))
    );
    assert_eq!(count_tasks(&store).await, 6);
}

async fn count_tasks(store: &idempotent_submit::S3Store) -> usize {
    common::all_keys(store)
        .await
        .iter()
        .filter(|k| k.starts_with("tasks/"))
        .count()
}
