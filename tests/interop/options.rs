use super::*;

// ---- task options and offloaded inputs, through buquet's own worker ----

fn time_of(v: &Value) -> chrono::DateTime<Utc> {
    v.as_str().unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_scheduled_a_few_seconds_ahead_is_not_claimed_before_its_time_and_is_claimed_after()
{
    let s = Shared::new().await;
    let (status, body) = s
        .post(
            json!({"task_type": "remind", "input": {"who": "ann"}, "idempotency_key": "r-1",
            "delay_seconds": 8}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let id = body["task_id"].as_str().unwrap();
    let available = time_of(&s.task_json(id).await["available_at"]);
    let early = s.buquet(&["idle", "remind", "2"]);
    // The idle worker's whole run fell before the task's time (the premise
    // of the check that follows).
    assert!(Utc::now() < available, "the worker ran past available_at");
    assert_eq!(early["processed"], 0, "claimed before its available_at");
    assert_eq!(s.task_json(id).await["status"], "pending");
    let run = s.buquet(&["work", "remind", "1"]);
    assert_eq!(run["processed"], 1);
    let task = s.task_json(id).await;
    assert_eq!(task["status"], "completed", "{task}");
    assert!(time_of(&task["completed_at"]) >= available, "{task}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_whose_handler_outruns_its_timeout_fails_by_timeout_after_max_retries_retries() {
    let s = Shared::new().await;
    let (status, body) = s
        .post(json!({"task_type": "slow_report", "input": {"r": 1}, "idempotency_key": "s-1",
            "timeout_seconds": 1, "max_retries": 2,
            "retry_policy": {"initial_interval_ms": 100, "max_interval_ms": 200, "multiplier": 1.0, "jitter_percent": 0.0}}))
        .await;
    assert_eq!(status, 201, "{body}");
    let id = body["task_id"].as_str().unwrap();
    let out = s.buquet(&["slow", "slow_report", id, "45"]);
    assert!(
        out["status"]
            .as_str()
            .unwrap()
            .to_lowercase()
            .ends_with("failed"),
        "{out}"
    );
    assert_eq!(out["retry_count"], 2, "{out}");
    assert_eq!(
        out["calls"], 3,
        "the first run and max_retries retries: {out}"
    );
    assert!(
        out["last_error"].as_str().unwrap().contains("Timeout"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_past_its_ttl_seconds_is_not_run() {
    let s = Shared::new().await;
    let (status, body) = s
        .post(
            json!({"task_type": "flash_sale", "input": {"sku": 1}, "idempotency_key": "f-1",
            "ttl_seconds": 1}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let id = body["task_id"].as_str().unwrap();
    let expires = time_of(&s.task_json(id).await["expires_at"]);
    while Utc::now() <= expires + Duration::seconds(1) {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let run = s.buquet(&["idle", "flash_sale", "3"]);
    assert_eq!(run["processed"], 0, "an expired task was run");
    let task = s.task_json(id).await;
    assert_eq!(task["status"], "expired", "{task}");
    assert!(task["output"].is_null());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_offloaded_input_reaches_a_handler_through_buquets_load_input() {
    let s = Shared::new().await;
    let input = json!({"doc": "x".repeat(5000), "pages": [1, 2.5, -3]});
    let (status, body) = s
        .post(
            json!({"task_type": "ingest", "input": input, "idempotency_key": "i-1",
            "use_payload_refs": true, "payload_ref_threshold_bytes": 1024}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let id = body["task_id"].as_str().unwrap();
    let task = s.task_json(id).await;
    assert!(task["input"].is_null(), "{task}");
    assert_eq!(task["input_ref"], format!("payloads/{id}/input.json"));
    let out = s.buquet(&["load", "ingest", "1"]);
    assert_eq!(out["processed"], 1, "{out}");
    assert!(out["loaded"][0]["inline"].is_null(), "{out}");
    assert_eq!(out["loaded"][0]["loaded"], input);
    assert_eq!(s.task_json(id).await["status"], "completed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_written_with_options_is_field_by_field_the_one_buquets_submit_writes() {
    let s = Shared::new().await;
    let base = Utc::now().trunc_subsecs(0);
    let fmt = |t: chrono::DateTime<Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let input = json!({"doc": "y".repeat(200), "n": 1.5});
    let opts = json!({
        "timeout_seconds": 1800, "max_retries": 10,
        "retry_policy": {"initial_interval_ms": 500, "max_interval_ms": 30000, "multiplier": 3.0, "jitter_percent": 0.1},
        "schedule_at": fmt(base + Duration::hours(1)), "max_reschedules": 4,
        "expires_at": fmt(base + Duration::hours(3)),
        "use_payload_refs": true, "payload_ref_threshold_bytes": 64,
    });
    let mut ours = json!({"task_type": "report", "input": input});
    ours.as_object_mut()
        .unwrap()
        .extend(opts.as_object().unwrap().clone());
    let (status, body) = s.post(ours).await;
    assert_eq!(status, 201, "{body}");
    let our_id = body["task_id"].as_str().unwrap().to_owned();
    let theirs = s.buquet(&[
        "submit_opts",
        "report",
        &input.to_string(),
        &opts.to_string(),
    ]);
    let their_id = theirs["id"].as_str().unwrap().to_owned();

    let a = s.task_json(&our_id).await;
    let b = s.task_json(&their_id).await;
    let (a_map, b_map) = (a.as_object().unwrap(), b.as_object().unwrap());
    let mut fields: Vec<&String> = a_map.keys().chain(b_map.keys()).collect();
    fields.sort();
    fields.dedup();
    // Everything but what is each task's own: its id (and the shard and
    // input_ref named after it) and the instants of its submit.
    for f in fields {
        if ["id", "shard", "created_at", "updated_at"].contains(&f.as_str()) {
            continue;
        }
        let (x, y) = (&a[f.as_str()], &b[f.as_str()]);
        if f == "input_ref" {
            assert_eq!(x, &json!(format!("payloads/{our_id}/input.json")));
            assert_eq!(y, &json!(format!("payloads/{their_id}/input.json")));
            continue;
        }
        assert_eq!(x, y, "field {f}: ours {a}\nbuquet's {b}");
    }
    assert!(a_map.contains_key("input_ref") && a["input"].is_null());
    // The payloads hold the same input, and the markers are in one minute.
    assert_eq!(
        s.object_json(&format!("payloads/{our_id}/input.json"))
            .await,
        s.object_json(&format!("payloads/{their_id}/input.json"))
            .await
    );
    let keys = common::all_keys(&s.store).await;
    let minute = |id: &str| {
        keys.iter()
            .find(|k| k.starts_with("ready/") && k.ends_with(id))
            .map(|k| k.split('/').nth(2).unwrap().to_owned())
    };
    assert_eq!(minute(&our_id), minute(&their_id));
    assert!(minute(&our_id).is_some());
}

/// buquet's own client publishes a task type's schema (`publish_schema`);
/// with VALIDATE_INPUT_SCHEMAS on, our submit refuses what the schema
/// refuses, writing nothing, and takes what it takes, and buquet's own
/// `validate_input` agrees on both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_published_by_buquets_client_refuses_an_invalid_input_and_takes_a_valid_one() {
    let mut s = Shared::new().await;
    s.app = common::lambda::app_over(
        s.store.clone(),
        None,
        false,
        Settings {
            validate_input_schemas: true,
            ..Settings::default()
        },
    );
    let schema = json!({
        "input": {
            "type": "object",
            "properties": {"to": {"type": "string"}, "subject": {"type": "string", "minLength": 1}},
            "required": ["to", "subject"],
            "additionalProperties": false
        },
        "output": {"type": "object", "properties": {"sent": {"type": "boolean"}}}
    });
    let out = s.buquet(&["publish_schema", "send_email", &schema.to_string()]);
    assert_eq!(out["published"], "send_email");
    // What buquet wrote is the document we read.
    assert_eq!(s.object_json("schemas/send_email.json").await, schema);

    let bad = json!({"to": "a@example.com", "subject": "", "cc": "b@example.com"});
    let (status, body) = s
        .post(json!({"task_type": "send_email", "input": bad, "idempotency_key": "mail-bad"}))
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["code"], "input_invalid");
    let named = common::openapi::failures(&body);
    assert_eq!(
        named,
        [
            (String::new(), "additionalProperties".to_owned()),
            ("/subject".to_owned(), "minLength".to_owned())
        ]
    );
    assert_eq!(
        common::all_keys(&s.store).await,
        ["schemas/send_email.json"],
        "nothing written for the refused input"
    );
    let theirs = s.buquet(&["validate", "send_email", &bad.to_string()]);
    assert_eq!(
        theirs["valid"], false,
        "buquet's validate_input refuses it too: {theirs}"
    );

    let good = json!({"to": "a@example.com", "subject": "hello"});
    let (status, body) = s
        .post(json!({"task_type": "send_email", "input": good, "idempotency_key": "mail-good"}))
        .await;
    assert_eq!(status, 201, "{body}");
    let theirs = s.buquet(&["validate", "send_email", &good.to_string()]);
    assert_eq!(theirs, json!({"valid": true, "error": null}));
    // And buquet's worker runs the task it took.
    let run = s.buquet(&["work", "send_email", "1"]);
    assert_eq!(run["processed"], 1);
    let task = s.buquet(&["get", body["task_id"].as_str().unwrap()]);
    assert_eq!(task["status"], "completed", "{task}");
}
