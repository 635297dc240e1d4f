use super::*;

// ---- on real stores: moto and SeaweedFS, each versioned and not, under
// both LIST_ORDERs ----

/// The store a real-store test runs on.
#[derive(Debug, Clone, Copy)]
pub(super) enum Real {
    Moto,
    SeaweedFs,
}

pub(super) async fn real_store(
    real: Real,
    versioning: common::Versioning,
) -> idempotent_submit::S3Store {
    match real {
        Real::Moto => common::moto_store_with(versioning).await,
        Real::SeaweedFs => common::seaweedfs_store_with(versioning).await,
    }
}

/// The test settings on a real store whose clock the test cannot move: the
/// injected clock stands for the store's (`ClockCheck::TrustClock`).
fn real_settings(order: ListOrder) -> idempotent_submit::Settings {
    let mut s = idempotent_submit::Settings {
        clock_check: idempotent_submit::ClockCheck::TrustClock,
        list_order: order,
        ..common::settings()
    };
    // moto serves one request at a time: sixteen reads at once wait their
    // turn longer than the in-memory tests' half second.
    s.retry.attempt_timeout = std::time::Duration::from_secs(10);
    s
}

/// Records of `scopes`, ready, expiring `expires_in` from now, written to
/// `store` as they are; their keys.
async fn expired_records(
    store: &idempotent_submit::S3Store,
    scopes: &[(&str, usize)],
    expires_in: Duration,
) -> Vec<String> {
    let clock = ManualClock::new(chrono::Utc::now());
    let q = Queue::with_clock(
        store.clone(),
        Arc::new(clock),
        real_settings(ListOrder::Bytes),
    );
    q.submit("t", json!(1))
        .idempotency_key("template")
        .await
        .unwrap();
    let template = keys_under(store, "idempotency/").await.remove(0);
    let mut v: serde_json::Value =
        serde_json::from_slice(&store.get(&template).await.unwrap().body).unwrap();
    store.delete(&template, None).await.unwrap();
    v["expires_at"] = json!(
        (chrono::Utc::now() + expires_in)
            .format("%Y-%m-%dT%H:%M:%SZ")
            .to_string()
    );
    v["status"] = json!("ready");
    v.as_object_mut().unwrap().remove("pending_task");
    let body: bytes::Bytes = serde_json::to_vec(&v).unwrap().into();
    let mut keys = Vec::new();
    let mut i: u64 = 0;
    for (scope, n) in scopes {
        for _ in 0..*n {
            i += 1;
            let hash = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(i.to_le_bytes()));
            keys.push(format!("idempotency/{scope}/{hash}.json"));
        }
    }
    let puts = keys.iter().map(|k| {
        let (store, body) = (store.clone(), body.clone());
        async move { store.put(k, body, PutMode::Create).await.unwrap() }
    });
    futures::StreamExt::collect::<Vec<_>>(futures::StreamExt::buffer_unordered(
        futures::stream::iter(puts),
        16,
    ))
    .await;
    keys
}

/// Expired records in scopes that byte order and a folders-first order put
/// apart, on `real`, swept a month later under `order` by runs of at most
/// 37 records (each resuming the pass where the last stopped): every record
/// deleted, none read more than twice.
async fn a_pass_in_small_runs_deletes_every_expired_record_on(
    real: Real,
    versioning: common::Versioning,
    order: ListOrder,
) {
    let store = real_store(real, versioning).await;
    let scopes = [("a", 30), ("a-b", 20), ("a.b", 20), ("a_b", 10), ("b", 40)];
    let keys = expired_records(&store, &scopes, Duration::hours(1)).await;
    let f = FaultyStore::new(store.clone());
    let clock = ManualClock::new(chrono::Utc::now() + Duration::days(31));
    let q = Queue::with_clock(f.clone(), Arc::new(clock), real_settings(order));
    let mut sum = SweepSummary::default();
    let mut runs = 0;
    loop {
        runs += 1;
        assert!(runs < 100, "the pass never completes: {sum:?}");
        let s = q
            .engine()
            .sweep(&SweepOptions {
                max_records: Some(37),
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(s.errors, 0, "{real:?} {versioning:?} {order:?}: {s:?}");
        sum.add(&s);
        if s.complete {
            break;
        }
    }
    assert!(runs > 3, "{runs} runs");
    let left = keys_under(&store, "idempotency/").await;
    assert!(
        left.is_empty(),
        "{real:?} {versioning:?} {order:?}: {} records missed: {left:?}",
        left.len()
    );
    assert_eq!(sum.expired_deleted as usize, keys.len(), "{sum:?}");
    let mut reads: HashMap<String, usize> = HashMap::new();
    for c in f.calls() {
        if c.op == Op::Get && c.key.starts_with("idempotency/") {
            *reads.entry(c.key).or_default() += 1;
        }
    }
    assert_eq!(reads.len(), keys.len());
    assert!(
        reads.values().all(|n| *n <= 2),
        "{:?}",
        reads.values().max()
    );
}

/// Submits that died right after their record, in scopes that sort apart,
/// on `real`; a pass 11 minutes later under `order` finishes each: its task
/// and its marker written, the record left as written.
async fn a_pass_finishes_interrupted_submits_on(
    real: Real,
    versioning: common::Versioning,
    order: ListOrder,
) {
    let store = real_store(real, versioning).await;
    let clock = ManualClock::new(chrono::Utc::now());
    let settings = real_settings(order);
    let mut ids = Vec::new();
    for (scope, key) in [("a", "k1"), ("a-b", "k2"), ("a.b", "k3"), ("b", "k4")] {
        let dying = common::world::dying_at(
            store.clone(),
            Op::PutCreate,
            "idempotency/",
            Fault::CrashAfter,
        );
        let q = Queue::with_clock(dying, Arc::new(clock.clone()), settings.clone());
        q.submit("t", json!({"k": key}))
            .idempotency_key(key)
            .idempotency_scope(idempotent_submit::Scope::parse(Some(scope)).unwrap())
            .await
            .expect_err("the submit dies after its record");
        ids.push(key);
    }
    clock.advance(Duration::minutes(11));
    let q = Queue::with_clock(store.clone(), Arc::new(clock.clone()), settings);
    let s = q.engine().sweep(&SweepOptions::default()).await.unwrap();
    assert_eq!(
        (s.scanned, s.finished, s.errors, s.complete),
        (4, 4, 0, true),
        "{real:?} {versioning:?} {order:?}: {s:?}"
    );
    let keys = common::all_keys(&store).await;
    assert_eq!(keys.iter().filter(|k| k.starts_with("tasks/")).count(), 4);
    assert_eq!(keys.iter().filter(|k| k.starts_with("ready/")).count(), 4);
}

/// A dry pass through a call log on `store`: its summary, after checking
/// that it wrote nothing (no PUT, no DELETE) and left every key and ETag.
async fn dry_pass_writing_nothing(
    store: &idempotent_submit::S3Store,
    clock: &ManualClock,
    settings: &idempotent_submit::Settings,
) -> SweepSummary {
    let etags = |store: idempotent_submit::S3Store| async move {
        let objects = common::objects_under(&store, "").await;
        let mut all: Vec<_> = objects
            .into_iter()
            .map(|o| (o.key, o.etag.to_string()))
            .collect();
        all.sort();
        all
    };
    let before = etags(store.clone()).await;
    let f = FaultyStore::new(store.clone());
    let q = Queue::with_clock(f.clone(), Arc::new(clock.clone()), settings.clone());
    let s = q
        .engine()
        .sweep(&SweepOptions {
            dry_run: true,
            ..Default::default()
        })
        .await
        .unwrap();
    let writes: Vec<_> = f.calls().into_iter().filter(|c| c.op.is_write()).collect();
    assert!(writes.is_empty(), "{writes:?}");
    assert_eq!(etags(store.clone()).await, before);
    s
}

/// A bucket on `real` with every kind of record and payload a pass meets,
/// swept twice at each of two times, a dry run then the real pass: the
/// counts are equal. At 11 minutes: submits done (and still `creating`),
/// interrupted after their record, without their marker, without their
/// task, and expired records. Nine days later: orphan payloads of the
/// pass's slices and of another (found by the HEADs, which reach back to
/// the last complete check), and payloads whose task is there under one
/// digit of shard and under two.
async fn a_dry_run_counts_what_the_real_pass_then_does_on(
    real: Real,
    versioning: common::Versioning,
    order: ListOrder,
) {
    let store = real_store(real, versioning).await;
    let start = chrono::Utc::now();
    let clock = ManualClock::new(start);
    let settings = real_settings(order);
    stale_submits_of_every_kind(&store, &clock, &settings).await;
    expired_records(&store, &[("a", 3), ("b", 2)], Duration::minutes(5)).await;
    // Nine days on, at noon: the day whose slices the pass takes.
    let later = (start + Duration::days(9))
        .date_naive()
        .and_hms_opt(12, 0, 0)
        .unwrap()
        .and_utc();
    // The slices the second pass's check takes: after the first's (11
    // minutes in, from the cursor's beginning), by the time between them.
    use idempotent_submit::testing::protocol::sweep::PayloadPlan;
    let first = start + Duration::minutes(11);
    let after_first = PayloadPlan::after(0, None, first).next_slice();
    let slices = PayloadPlan::after(after_first, Some(first), later).slices;
    let outside = (slices.end) % idempotent_submit::testing::protocol::sweep::PAYLOAD_SLICES;
    payload_of_slice(&store, slices.start).await;
    payload_of_slice(&store, slices.end - 1).await;
    payload_of_slice(&store, outside).await;
    let mut live = vec![];
    for shard in [1, 2] {
        live.push(payload_with_its_task(&store, slices.start, shard).await);
    }
    // A marker beside a task a worker has run, and one whose task never
    // came: too young for the ready index's scan at 11 minutes, both stale
    // nine days on.
    let stale = [
        task_with_marker(&store, "completed", start, true).await,
        task_with_marker(&store, "pending", start, false).await,
    ];

    clock.advance(Duration::minutes(11));
    let (dry, s) = dry_then_real(&store, &clock, &settings).await;
    let at = format!("{real:?} {versioning:?} {order:?}");
    assert_eq!(
        (s.finished, s.expired_deleted, s.payloads_deleted, s.errors),
        (3, 5, 0, 0),
        "{at}: {s:?}"
    );
    assert_eq!(counts(&dry), counts(&s), "{at}: dry {dry:?}\nreal {s:?}");

    let ready =
        |store: idempotent_submit::S3Store| async move { keys_under(&store, "ready/").await };
    let before = ready(store.clone()).await;
    clock.set(later);
    let (dry, s) = dry_then_real(&store, &clock, &settings).await;
    assert_eq!(
        (s.payloads_deleted, s.markers_deleted, s.errors),
        (3, 2, 0),
        "{at}: {s:?}"
    );
    assert_eq!(counts(&dry), counts(&s), "{at}: dry {dry:?}\nreal {s:?}");
    // The records' markers, true, and neither stale one.
    let markers = ready(store.clone()).await;
    assert_eq!(markers.len(), before.len() - 2, "{at}: {markers:?}");
    assert!(
        stale
            .iter()
            .all(|m| before.contains(m) && !markers.contains(m)),
        "{at}"
    );
    let mut left = keys_under(&store, "payloads/").await;
    left.sort();
    live.sort();
    assert_eq!(left, live, "{at}");
}

/// Submits on `store` that left their record `creating`: one done, one
/// without its marker, one interrupted after its record, one without its
/// task.
async fn stale_submits_of_every_kind(
    store: &idempotent_submit::S3Store,
    clock: &ManualClock,
    settings: &idempotent_submit::Settings,
) {
    let q = Queue::with_clock(store.clone(), Arc::new(clock.clone()), settings.clone());
    q.submit("t", json!({"k": "done"}))
        .idempotency_key("done")
        .await
        .unwrap();
    let no_marker = q
        .submit("t", json!({"k": "no-marker"}))
        .idempotency_key("no-marker")
        .await
        .unwrap()
        .task_id
        .to_string();
    let marker = common::all_keys(store)
        .await
        .into_iter()
        .find(|k| k.starts_with("ready/") && k.ends_with(&no_marker))
        .unwrap();
    store.delete(&marker, None).await.unwrap();
    for (key, op, prefix, fault) in [
        (
            "after-record",
            Op::PutCreate,
            "idempotency/",
            Fault::CrashAfter,
        ),
        ("no-task", Op::PutCreate, "tasks/", Fault::CrashBefore),
    ] {
        let dying = common::world::dying_at(store.clone(), op, prefix, fault);
        Queue::with_clock(dying, Arc::new(clock.clone()), settings.clone())
            .submit("t", json!({"k": key}))
            .idempotency_key(key)
            .await
            .expect_err("the submit dies");
    }
}

/// A dry pass (checked to write nothing), then the real one: their
/// summaries.
async fn dry_then_real(
    store: &idempotent_submit::S3Store,
    clock: &ManualClock,
    settings: &idempotent_submit::Settings,
) -> (SweepSummary, SweepSummary) {
    let dry = dry_pass_writing_nothing(store, clock, settings).await;
    let s = Queue::with_clock(store.clone(), Arc::new(clock.clone()), settings.clone())
        .engine()
        .sweep(&SweepOptions::default())
        .await
        .unwrap();
    (dry, s)
}

macro_rules! on_real_stores {
    ($($test:ident: $helper:ident),* $(,)?) => {
        $(
            mod $test {
                use super::*;
                on_real_stores!(@one moto, Moto, Off, Bytes, $helper);
                on_real_stores!(@one moto_versioned, Moto, On, Bytes, $helper);
                on_real_stores!(@one moto_list_order_any, Moto, Off, Any, $helper);
                on_real_stores!(@one seaweedfs, SeaweedFs, Off, Bytes, $helper);
                on_real_stores!(@one seaweedfs_versioned, SeaweedFs, On, Bytes, $helper);
                on_real_stores!(@one seaweedfs_list_order_any, SeaweedFs, Off, Any, $helper);
                on_real_stores!(@one seaweedfs_versioned_list_order_any, SeaweedFs, On, Any, $helper);
            }
        )*
    };
    (@one $name:ident, $real:ident, $versioning:ident, $order:ident, $helper:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            super::$helper(
                Real::$real,
                common::Versioning::$versioning,
                ListOrder::$order,
            )
            .await;
        }
    };
}

on_real_stores!(
    a_pass_in_small_runs_deletes_every_expired_record_and_reads_each_once_or_twice:
        a_pass_in_small_runs_deletes_every_expired_record_on,
    a_pass_finishes_every_interrupted_submit_in_scopes_that_sort_apart:
        a_pass_finishes_interrupted_submits_on,
    a_dry_run_counts_what_the_real_pass_then_does_on_the_same_bucket:
        a_dry_run_counts_what_the_real_pass_then_does_on,
);
