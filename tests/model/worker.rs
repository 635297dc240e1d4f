use super::*;

// ---- the queue's worker, as buquet 0.1's behaves ----

/// One claim a worker made.
#[derive(Debug)]
pub(super) struct Claim {
    pub(super) id: uuid::Uuid,
    pub(super) attempt: u64,
    pub(super) by_scan: bool,
    pub(super) then: Then,
    /// It left the task failed for good.
    pub(super) failed: bool,
    /// The markers it wrote (a retry's, a reschedule's).
    pub(super) markers: Vec<String>,
}

/// What one worker step did: at most one claim.
#[derive(Debug)]
pub(super) struct Worked {
    pub(super) claim: Option<Claim>,
}

/// A few turns for the other requests under way.
pub(super) async fn turns(rng: &mut fastrand::Rng, most: u32) {
    for _ in 0..rng.u32(0..most) {
        tokio::task::yield_now().await;
    }
}

pub(super) fn time_of(v: &Value) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(v.as_str()?)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

pub(super) fn marker_of(t: &Value) -> Option<String> {
    Some(
        TaskLocation {
            id: t["id"].as_str()?.parse().ok()?,
            shard: t["shard"].as_str()?.to_owned(),
            available_at: time_of(&t["available_at"])?,
        }
        .marker_key(),
    )
}

/// Task ids are random, and so is the order S3 lists tasks and markers in;
/// the model's worker takes its candidates (minute first) in an order the
/// schedule decides, by their key's hash and their creation, so that a seed
/// replays the same run.
pub(super) async fn steady(bucket: &MemoryStore, keys: Vec<(i64, String)>) -> Vec<String> {
    let mut ordered = Vec::new();
    for (minute, key) in keys {
        let task = match bucket.get(&key).await {
            Ok(o) => serde_json::from_slice::<Value>(&o.body).unwrap_or(Value::Null),
            Err(_) => Value::Null,
        };
        let by = |f: &Value| f.as_str().unwrap_or("").to_owned();
        let order = (
            minute,
            by(&task["idempotency"]["key_hash"]),
            by(&task["created_at"]),
        );
        ordered.push((order, key));
    }
    ordered.sort();
    ordered.into_iter().map(|(_, k)| k).collect()
}

/// The worker's step: what buquet 0.1's worker does in one poll that finds
/// a task (`src/worker/claim.rs` and `runner.rs` there). It lists the ready
/// index from its oldest minute up to now and tries each task; in hybrid
/// mode, when no marker led to a claim, it lists `tasks/` (the log scan).
/// It claims by a compare-and-swap from pending to running, then deletes the
/// claimed version's marker; a task that is not pending and available is
/// left alone, marker and all. Then it runs the task to `then`.
pub(super) async fn work(
    bucket: MemoryStore,
    now: DateTime<Utc>,
    scan: bool,
    then: Then,
    seed: u64,
) -> Result<Worked, String> {
    let mut rng = fastrand::Rng::with_seed(seed);
    for (key, by_scan) in candidates(&bucket, now, scan, &mut rng).await? {
        turns(&mut rng, 2).await;
        let Some((mut t, etag, old_marker)) = claim(&bucket, &key, now).await? else {
            continue;
        };
        turns(&mut rng, 2).await;
        match bucket.delete(&old_marker, None).await {
            Ok(()) | Err(StoreError::NotFound) => {}
            Err(e) => return Err(format!("deleting {old_marker}: {e}")),
        }
        turns(&mut rng, 2).await;
        run_to(&mut t, then, now);
        put_task(&bucket, &key, &t, etag)
            .await
            .map_err(|e| format!("finishing {key}: {e}"))?;
        let mut markers = Vec::new();
        if t["status"] == "pending" {
            let m = marker_of(&t).ok_or("a requeued task without a place")?;
            bucket
                .put(&m, Bytes::new(), PutMode::Overwrite)
                .await
                .map_err(|e| format!("marker {m}: {e}"))?;
            markers.push(m);
        }
        return Ok(Worked {
            claim: Some(Claim {
                id: task_id_of(&key),
                attempt: t["attempt"].as_u64().unwrap_or(0),
                by_scan,
                then,
                failed: t["status"] == "failed",
                markers,
            }),
        });
    }
    Ok(Worked { claim: None })
}

/// The tasks a worker's poll tries, in order, each with whether the log
/// scan found it: the ready index's from its oldest minute up to now
/// (unless `scan`), then `tasks/`'s.
async fn candidates(
    bucket: &MemoryStore,
    now: DateTime<Utc>,
    scan: bool,
    rng: &mut fastrand::Rng,
) -> Result<Vec<(String, bool)>, String> {
    let listed = |prefix: &'static str| {
        let bucket = bucket.clone();
        async move {
            bucket
                .list(prefix, None, None, 10_000)
                .await
                .map(|p| p.objects)
                .map_err(|e| format!("worker listing {prefix}: {e}"))
        }
    };
    let mut candidates: Vec<(String, bool)> = Vec::new();
    if !scan {
        let index: Vec<(i64, String)> = listed("ready/")
            .await?
            .into_iter()
            .filter_map(|m| {
                let parts: Vec<&str> = m.key.split('/').collect();
                let minute: i64 = parts.get(2)?.parse().ok()?;
                (minute <= marker_minute(now))
                    .then(|| (minute, format!("tasks/{}/{}.json", parts[1], parts[3])))
            })
            .collect();
        candidates.extend(steady(bucket, index).await.into_iter().map(|k| (k, false)));
    }
    // Its poll starts at any moment of the other requests under way.
    turns(rng, 16).await;
    let scanned = listed("tasks/")
        .await?
        .into_iter()
        .map(|m| (0, m.key))
        .collect();
    candidates.extend(steady(bucket, scanned).await.into_iter().map(|k| (k, true)));
    Ok(candidates)
}

/// The worker's claim of the task at `key`, if it is pending and available:
/// a compare-and-swap to `running`. The task as claimed, its ETag, and the
/// marker of the version it claimed.
async fn claim(
    bucket: &MemoryStore,
    key: &str,
    now: DateTime<Utc>,
) -> Result<Option<(Value, ETag, String)>, String> {
    let Ok(obj) = bucket.get(key).await else {
        return Ok(None);
    };
    let Ok(mut t) = serde_json::from_slice::<Value>(&obj.body) else {
        return Err(format!("{key} is not a task: {:?}", obj.body));
    };
    if t["status"] != "pending" || time_of(&t["available_at"]).is_none_or(|a| a > now) {
        return Ok(None);
    }
    let old_marker = marker_of(&t).ok_or_else(|| format!("{key} has no place in the index"))?;
    let attempt = t["attempt"].as_u64().unwrap_or(0) + 1;
    t["status"] = json!("running");
    t["attempt"] = json!(attempt);
    t["worker_id"] = json!("model-worker");
    t["lease_id"] = json!(uuid::Uuid::new_v4());
    t["lease_expires_at"] = json!(rfc3339::format(&(now + Duration::seconds(300))));
    t["updated_at"] = json!(rfc3339::format(&now));
    match put_task(bucket, key, &t, obj.meta.etag.clone()).await {
        Ok(r) => Ok(Some((t, r.etag, old_marker))),
        // Another claim won.
        Err(StoreError::PreconditionFailed) => Ok(None),
        Err(e) => Err(format!("claiming {key}: {e}")),
    }
}

/// The worker rewrites the task object in its own serialization, if it is
/// still at `etag`.
async fn put_task(
    bucket: &MemoryStore,
    key: &str,
    t: &Value,
    etag: ETag,
) -> Result<idempotent_submit::store::PutResult, StoreError> {
    let body = Bytes::from(serde_json::to_vec(t).unwrap());
    bucket.put(key, body, PutMode::Update(etag)).await
}

/// The claimed task `t`, run to `then`: completed, pending again later with
/// its retry or reschedule counted, or failed for good.
fn run_to(t: &mut Value, then: Then, now: DateTime<Utc>) {
    let stamp = json!(rfc3339::format(&now));
    for f in ["lease_id", "lease_expires_at", "worker_id"] {
        t[f] = Value::Null;
    }
    let requeue = |secs: i64, counter: &str, t: &mut Value| {
        t["status"] = json!("pending");
        t[counter] = json!(t[counter].as_u64().unwrap_or(0) + 1);
        t["available_at"] = json!(rfc3339::format(&(now + Duration::seconds(secs))));
    };
    match then {
        Then::Complete => {
            t["status"] = json!("completed");
            t["completed_at"] = stamp;
            t["output"] = json!({"ok": true});
        }
        Then::Retry { secs } if t["retry_count"].as_u64() < t["max_retries"].as_u64() => {
            requeue(secs, "retry_count", t);
            t["last_error"] = json!("the model's handler failed");
        }
        Then::Reschedule { secs } => requeue(secs, "reschedule_count", t),
        // A permanent error, or a retryable one with the retries spent:
        // buquet's `fail_task`.
        Then::Retry { .. } | Then::Fail => {
            t["status"] = json!("failed");
            t["last_error"] = json!("the model's handler failed");
            t["completed_at"] = stamp;
        }
    }
}
