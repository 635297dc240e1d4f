//! One world with everything failing at once: the built `submit` and `sweep`
//! binaries in many processes under the runtime API stand-in, each behind
//! a fault proxy to moto's S3; producers through every door; processes
//! killed at random moments; the due queue drained into `sweep` and the
//! scheduled pass; two buquet 0.1 workers counting every run. Then the
//! audit, whose every count must be zero (docs/reliability.md).
//!
//! `make test` runs it for `CHAOS_SECONDS` (20 s of producing by default)
//! on seed `CHAOS_SEED` (29 by default; the seed is printed, and fixes the
//! producers' choices, the kills' draws and every proxy connection's
//! faults, not the interleaving). `make chaos` runs it at length on the
//! release binaries, then the five runs in which the world damages the
//! bucket, which the audit must report.

use crate::common;
#[path = "chaos/audit.rs"]
mod audit;
#[path = "chaos/compare.rs"]
mod compare;
#[path = "chaos/config.rs"]
mod config;
#[path = "chaos/damage.rs"]
mod damage;
#[path = "chaos/drainer.rs"]
mod drainer;
#[path = "chaos/evidence.rs"]
mod evidence;
#[path = "chaos/judge.rs"]
mod judge;
#[path = "chaos/processes.rs"]
mod processes;
#[path = "chaos/producers.rs"]
mod producers;
#[path = "chaos/report.rs"]
mod report;
#[path = "chaos/sender.rs"]
mod sender;
#[path = "chaos/world.rs"]
mod world;

use std::time::Duration;

fn seed() -> u64 {
    std::env::var("CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(29)
}

fn seconds(default: u64) -> Duration {
    Duration::from_secs(
        std::env::var("CHAOS_SECONDS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default),
    )
}

/// `cfg` sized as `CHAOS_PRODUCERS`, `CHAOS_SUBMIT_ENVS`,
/// `CHAOS_SWEEP_ENVS` and `CHAOS_DRAINERS` ask (each a number; unset: the
/// world's own, which `make test`'s short run keeps). `make chaos` sizes
/// its long runs larger: with 6 producers and 4 `submit` environments the
/// producers wait for a free environment, not for the store
/// (docs/reliability.md).
fn sized(mut cfg: world::WorldConfig) -> world::WorldConfig {
    let n = |var: &str| std::env::var(var).ok().and_then(|s| s.parse().ok());
    cfg.producers = n("CHAOS_PRODUCERS").unwrap_or(cfg.producers);
    cfg.submit_envs = n("CHAOS_SUBMIT_ENVS").unwrap_or(cfg.submit_envs);
    cfg.sweep_envs = n("CHAOS_SWEEP_ENVS").unwrap_or(cfg.sweep_envs);
    cfg.drainers = n("CHAOS_DRAINERS").unwrap_or(cfg.drainers);
    cfg
}

/// Writes the run's figures where `CHAOS_REPORT` says, if it does.
fn keep(name: &str, markdown: &str) {
    if let Ok(dir) = std::env::var("CHAOS_REPORT") {
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(std::path::Path::new(&dir).join(name), markdown).unwrap();
    }
}

/// Runs `cfg`, prints and keeps its figures as `name`, and judges it: a
/// world in which nothing got through, or nothing failed, proves nothing;
/// then every count of the audit is zero.
async fn judge(cfg: world::WorldConfig, name: &str) {
    let report = world::run(cfg).await;
    let md = report.markdown();
    println!("{md}");
    for e in &report.audit.examples {
        println!("[chaos] {e}");
    }
    keep(name, &md);
    let (handled, _) = report.handled_and_accepted();
    assert!(handled > 30, "only {handled} submits were handled");
    assert!(
        report.kills.len() > 5,
        "{} processes killed",
        report.kills.len()
    );
    // 409 needs a conditional write to fall on: a short run may miss it.
    let kinds = report.faults_by_kind.iter().filter(|(_, n)| *n > 0).count();
    assert!(
        kinds >= report.faults_by_kind.len() - 1 && report.spikes > 0,
        "faults of too few kinds: {:?}",
        report.faults_by_kind
    );
    assert!(report.audit.runs > 0 && report.audit.tasks > 0);
    // The world keeps its own promise to the functions (its operating
    // conditions), or the audit would judge the code by a broken world.
    let promise = Duration::from_secs(report.config.windows.event_delivery);
    let (_, _, _, latest, over) = report.sweep.lateness(promise);
    assert_eq!(
        over, 0,
        "due messages came later than the world promises (the latest {latest:.0} ms after its delay)"
    );
    assert_eq!(
        report.audit.nonzero(),
        vec![],
        "the audit found these on {} (seed {}; examples above)",
        report.config.store.name,
        report.config.seed
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_world_with_everything_failing_at_once_loses_and_doubles_nothing() {
    judge(
        sized(world::WorldConfig::everything(seed(), seconds(20))),
        "world.md",
    )
    .await;
}

/// The same world on SeaweedFS, which sends no S3 events: the `submit`
/// function sends each record's due message itself
/// (`RECORD_EVENTS=submitter`) to moto's SQS.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "a second world of a minute and a half: make chaos runs it (make chaos-seaweedfs alone)"]
async fn a_world_on_seaweedfs_with_the_submitters_due_messages_loses_and_doubles_nothing() {
    let mut base = world::WorldConfig::everything(seed(), seconds(20));
    // Four producers unless CHAOS_PRODUCERS says (make chaos: 12). The
    // submitter sends a due message beside every claim, retried ones
    // included (about three a record under this world's faults, against
    // one S3 event): twice the pollers and sweep environments of the moto
    // world, as the event source mapping would scale out, so that the due
    // path keeps the world's promise (three pollers fell 147 s behind in a
    // 300 s run); what make chaos's size held with them is in
    // docs/reliability.md.
    base.producers = 4;
    let mut cfg = sized(base);
    cfg.store = world::StoreSpec::seaweedfs();
    cfg.events = world::Events::Submitter;
    // DUE_MESSAGE as CHAOS_DUE_MESSAGE says (the default: before_claim).
    cfg.with_claim = std::env::var("CHAOS_DUE_MESSAGE").is_ok_and(|v| v == "with_claim");
    // No scheduled pass finishes a record here (CHAOS_PASSES=on brings
    // them back): the due messages alone must, and the audit's records in
    // flight count what they left. The one pass after the windows close
    // meets every record past its finish deadline and finishes none.
    cfg.passes_while_producing = std::env::var("CHAOS_PASSES").is_ok_and(|v| v == "on");
    cfg.drainers *= 2;
    cfg.sweep_envs *= 2;
    cfg.dir = cfg
        .dir
        .with_file_name(format!("chaos-seaweedfs-{}", cfg.seed));
    judge(cfg, "seaweedfs.md").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "five worlds of about a minute each: make chaos-damage (and make chaos) runs them"]
async fn the_audit_reports_each_kind_of_damage_the_world_does_to_the_bucket() {
    let mut found = vec![];
    for (i, d) in damage::ALL.into_iter().enumerate() {
        let mut cfg = world::WorldConfig::everything(seed() + 1 + i as u64, Duration::from_secs(6));
        cfg.damage = Some(d);
        println!(
            "[chaos] damage: {} (run {i} of CHAOS_SEED={}: seed {})",
            d.name(),
            seed(),
            cfg.seed
        );
        let report = world::run(cfg).await;
        let (count, n) = d.count(&report.audit);
        let others: Vec<(&str, u64)> = report
            .audit
            .nonzero()
            .into_iter()
            .filter(|(c, _)| *c != count)
            .collect();
        println!(
            "[chaos] {}: {count} = {n}; others nonzero: {others:?}",
            d.name()
        );
        for e in &report.audit.examples {
            println!("[chaos]   {e}");
        }
        found.push((d.name(), count, n, others));
    }
    let mut md = String::from(
        "| damage | the count that reports it | count | other nonzero counts |\n| --- | --- | ---: | --- |\n",
    );
    for (d, c, n, others) in &found {
        let o: Vec<String> = others.iter().map(|(c, n)| format!("{c}: {n}")).collect();
        md.push_str(&format!(
            "| {d} | {c} | {n} | {} |\n",
            if o.is_empty() {
                "none".into()
            } else {
                o.join(", ")
            }
        ));
    }
    println!("{md}");
    keep("damage.md", &md);
    for (d, c, n, _) in &found {
        assert!(*n > 0, "{d}: the audit's {c} did not see it");
    }
}

/// The audit on evidence made by hand: each count catches what it is for.
mod the_audit {
    use super::audit::{Evidence, Obj, Run, audit, canonical};
    use super::producers::{Answer, Body, Door, Item, Kind};
    use chrono::Utc;
    use serde_json::{Value, json};

    fn input(k: &str) -> Value {
        json!({"s": "chaos_a", "k": k, "v": 0, "n": 5, "f": 0.1, "t": "é"})
    }

    fn item(k: &str) -> Item {
        let i = input(k);
        Item {
            door: Door::Http,
            kind: Kind::New,
            key: Some(("chaos_a".into(), k.into())),
            input: Some(i.clone()),
            valid: true,
            message_id: None,
            body: Body::Json(json!({"task_type": "chaos_a", "input": i, "idempotency_key": k})),
        }
    }

    fn task(id: &str, k: &str) -> Obj {
        Obj {
            key: format!("tasks/{}/{id}.json", &id[..1]),
            body: format!(
                r#"{{"id":"{id}","status":"completed","input":{}}}"#,
                canonical(&input(k))
            )
            .into_bytes(),
            last_modified: Utc::now(),
        }
    }

    fn record(k: &str, id: &str) -> Obj {
        Obj {
            key: format!("idempotency/chaos_a/{k}.json"),
            body: json!({"scope": "chaos_a", "key": k, "task_id": id, "status": "creating"})
                .to_string()
                .into_bytes(),
            last_modified: Utc::now() - chrono::Duration::minutes(5),
        }
    }

    fn answered(item: usize, id: &str) -> Answer {
        Answer {
            item,
            status: 201,
            task_id: Some(id.into()),
            task_status: Some("pending".into()),
            retry_after: false,
            code: None,
        }
    }

    /// One key, submitted, recorded, its task run once: the audit's zero.
    fn clean() -> Evidence {
        Evidence {
            items: vec![item("k1")],
            answers: vec![answered(0, "a1")],
            records: vec![record("k1", "a1")],
            tasks: vec![task("a1", "k1")],
            first_tasks: vec![task("a1", "k1")],
            task_history: ["a1".to_string()].into(),
            runs: vec![Run {
                id: "a1".into(),
                input: input("k1"),
            }],
            now: Utc::now(),
            finish_window: chrono::Duration::seconds(20),
            late_write: chrono::Duration::seconds(4),
            orphan_after: chrono::Duration::seconds(32),
            last_pass: Some(Utc::now()),
            ..Evidence::default()
        }
    }

    #[test]
    fn a_clean_world_counts_nothing() {
        let a = audit(&clean());
        assert_eq!(a.nonzero(), vec![]);
        assert_eq!((a.tasks, a.runs, a.keys, a.records), (1, 1, 1, 1));
    }

    #[test]
    fn a_second_task_for_a_key_is_two_task_ids() {
        let mut e = clean();
        e.tasks.push(task("b2", "k1"));
        e.runs.push(Run {
            id: "b2".into(),
            input: input("k1"),
        });
        assert_eq!(audit(&e).nonzero(), vec![("two task ids for one key", 1)]);
        // So is an answer naming another task.
        let mut e = clean();
        e.answers.push(answered(0, "c3"));
        assert_eq!(audit(&e).nonzero(), vec![("two task ids for one key", 1)]);
    }

    #[test]
    fn an_answered_key_without_its_task_is_lost_and_a_run_of_it_is_counted() {
        let mut e = clean();
        e.tasks.clear();
        let a = audit(&e);
        assert_eq!(
            a.nonzero(),
            vec![("lost submits", 1), ("runs of tasks not in the bucket", 1)]
        );
    }

    #[test]
    fn a_record_whose_task_was_never_written_is_in_flight_past_its_window() {
        let mut e = clean();
        e.items.clear();
        e.answers.clear();
        e.runs.clear();
        e.tasks.clear();
        e.task_history.clear();
        assert_eq!(
            audit(&e).nonzero(),
            vec![("records still in flight after their windows", 1)]
        );
        // Not yet past it: nothing to say.
        e.records[0].last_modified = Utc::now();
        assert_eq!(audit(&e).nonzero(), vec![]);
    }

    #[test]
    fn a_task_never_run_and_a_marker_left_are_counted_and_a_second_run_is_reported() {
        let mut e = clean();
        e.runs.clear();
        e.markers.push("ready/a/0000000001/a1".into());
        assert_eq!(
            audit(&e).nonzero(),
            vec![("unrun tasks", 1), ("stale markers", 1)]
        );
        let mut e = clean();
        e.runs.push(e.runs[0].clone());
        let a = audit(&e);
        assert_eq!((a.nonzero(), a.tasks_run_twice), (vec![], 1));
    }

    #[test]
    fn an_input_one_byte_off_in_the_bucket_or_in_a_run_is_changed() {
        let mut e = clean();
        let b = String::from_utf8(e.tasks[0].body.clone()).unwrap();
        e.tasks[0].body = b.replace("\"n\":5", "\"n\":6").into_bytes();
        assert_eq!(audit(&e).nonzero(), vec![("inputs changed", 1)]);
        let mut e = clean();
        e.runs[0].input["t"] = json!("e");
        assert_eq!(audit(&e).nonzero(), vec![("inputs changed", 1)]);
    }

    #[test]
    fn a_record_in_flight_is_left_to_a_replay_only_if_its_submit_was_abandoned_after_a_kill_and_no_due_message_named_it()
     {
        // k1's record, never finished: its one submit abandoned by its
        // client after a killed invocation, its final replay `missing`.
        let abandoned = || {
            let mut e = clean();
            (e.answers, e.runs, e.tasks, e.first_tasks) = (vec![], vec![], vec![], vec![]);
            e.task_history.clear();
            e.abandoned = [0].into();
            e.with_claim_window = true;
            let mut missing = answered(0, "a1");
            (missing.status, missing.task_status) = (200, Some("missing".into()));
            e.replays = vec![(("chaos_a".into(), "k1".into()), missing)];
            e
        };
        let left = |e: &Evidence| {
            let a = audit(e);
            (
                a.nonzero(),
                a.records_left_to_a_replay_by_a_killed_submitter,
            )
        };
        assert_eq!(left(&abandoned()), (vec![], 1));
        let in_flight = vec![
            ("records still in flight after their windows", 1),
            ("final replays not answered 200 with a task", 1),
        ];
        // With the bucket's events its S3 event would have come, and under
        // before_claim its message was accepted before its PUT.
        let mut e = abandoned();
        e.with_claim_window = false;
        assert_eq!(left(&e), (in_flight.clone(), 0));
        // A due message named it in its window: the sweeper had to finish it.
        let mut e = abandoned();
        let written = e.records[0].last_modified;
        e.due_named.insert(
            e.records[0].key.clone(),
            written + chrono::Duration::seconds(2),
        );
        assert_eq!(left(&e), (in_flight.clone(), 0));
        // One named it only after its deadline (the final replay's): still left.
        e.due_named.insert(
            e.records[0].key.clone(),
            written + chrono::Duration::seconds(21),
        );
        assert_eq!(left(&e), (vec![], 1));
        // Its client did not give up after a kill.
        let mut e = abandoned();
        e.abandoned.clear();
        assert_eq!(left(&e), (in_flight.clone(), 0));
        // A submit of it was answered: lost, and in flight.
        let mut e = abandoned();
        e.answers = vec![answered(0, "a1")];
        let a = audit(&e);
        assert!(
            a.lost_submits == 1 && a.records_in_flight_after_their_windows == 1,
            "{a:?}"
        );
    }

    #[test]
    fn a_keyless_task_never_run_counts_only_if_its_submit_was_answered() {
        let keyless = |id: &str| Obj {
            key: format!("tasks/{}/{id}.json", &id[..1]),
            body: format!(r#"{{"id":"{id}","status":"pending","input":{{"u":"u-1"}}}}"#)
                .into_bytes(),
            last_modified: Utc::now(),
        };
        let mut e = clean();
        let mut it = item("x");
        (it.key, it.input) = (None, Some(json!({"u": "u-1"})));
        e.items.push(it);
        e.tasks.push(keyless("c9"));
        let a = audit(&e);
        assert_eq!(
            (a.nonzero(), a.unanswered_keyless_tasks_never_run),
            (vec![], 1)
        );
        e.answers.push(answered(1, "c9"));
        assert_eq!(audit(&e).nonzero(), vec![("unrun tasks", 1)]);
    }

    #[test]
    fn a_marker_of_no_task_and_no_record_is_a_keyless_submits_and_reported() {
        let mut e = clean();
        e.markers
            .push("ready/f/0000000001/f0f0f0f0-0000-4000-8000-000000000000".into());
        let a = audit(&e);
        assert_eq!(
            (a.nonzero(), a.markers_of_keyless_tasks_never_written),
            (vec![], 1)
        );
        // One whose record names it is a keyed submit's: stale.
        e.records
            .push(record("k9", "f0f0f0f0-0000-4000-8000-000000000000"));
        e.task_history
            .insert("f0f0f0f0-0000-4000-8000-000000000000".into());
        assert!(audit(&e).nonzero().contains(&("stale markers", 1)));
    }

    #[test]
    fn a_double_a_worker_moved_is_reported_but_one_this_service_moved_is_a_change() {
        let moved = |o: &mut super::audit::Obj| {
            let b = String::from_utf8(o.body.clone()).unwrap();
            let next = f64::from_bits(0.1f64.to_bits() + 1);
            o.body = b
                .replace("\"f\":0.1", &format!("\"f\":{next}"))
                .into_bytes();
        };
        let mut e = clean();
        moved(&mut e.tasks[0]);
        let a = audit(&e);
        assert_eq!((a.nonzero(), a.doubles_moved_by_the_worker), (vec![], 1));
        let mut e = clean();
        moved(&mut e.first_tasks[0]);
        assert_eq!(audit(&e).nonzero(), vec![("inputs changed", 1)]);
    }

    #[test]
    fn a_payload_no_task_names_is_an_orphan_once_the_last_pass_was_due_to_delete_it() {
        let mut e = clean();
        let orphan = |age: i64| Obj {
            key: "payloads/0b0b0b0b-0000-4000-8000-000000000000/input.json".into(),
            body: b"{}".to_vec(),
            last_modified: Utc::now() - chrono::Duration::seconds(age),
        };
        e.payloads.push(orphan(60));
        assert_eq!(audit(&e).nonzero(), vec![("orphan payloads", 1)]);
        e.payloads = vec![orphan(5)];
        let a = audit(&e);
        assert_eq!((a.nonzero(), a.young_orphan_payloads), (vec![], 1));
    }

    #[test]
    fn a_5xx_without_retry_after_and_a_panic_are_counted() {
        let mut e = clean();
        let mut a500 = answered(0, "a1");
        a500.status = 500;
        e.answers.push(a500);
        let mut a503 = answered(0, "a1");
        (a503.status, a503.retry_after) = (503, true);
        e.answers.push(a503);
        e.panics
            .push(("submit-0-0.log".into(), "thread 'main' panicked at".into()));
        assert_eq!(
            audit(&e).nonzero(),
            vec![
                ("5xx answers other than 503 with Retry-After", 1),
                ("panics in a log", 1)
            ]
        );
    }

    #[test]
    fn invalid_bodies_that_wrote_and_rejections_of_valid_messages_are_counted() {
        let mut e = clean();
        let mut bad = item("inv-1");
        (bad.valid, bad.key, bad.input) = (false, None, Some(json!({"inv": "inv-1"})));
        e.items.push(bad.clone());
        e.answers.push(answered(1, "d4"));
        assert_eq!(
            audit(&e).nonzero(),
            vec![("invalid bodies that wrote anything", 1)]
        );
        // Through SQS: a valid message rejected, an invalid one taken and not.
        let mut e = clean();
        let mut valid = item("k2");
        (valid.door, valid.message_id) = (Door::Sqs, Some("m-valid".into()));
        let mut invalid = bad;
        (invalid.door, invalid.message_id) = (Door::Sqs, Some("m-invalid".into()));
        e.items.push(valid);
        e.items.push(invalid);
        e.sqs_taken = [("m-valid".to_string(), 1), ("m-invalid".to_string(), 1)].into();
        e.rejected.push(Obj {
            key: "rejected/2026/01/01/m-valid.json".into(),
            body: json!({"message": {"messageId": "m-valid"}, "error": {}})
                .to_string()
                .into_bytes(),
            last_modified: Utc::now(),
        });
        assert_eq!(
            audit(&e).nonzero(),
            vec![
                ("lost submits", 1),
                ("rejected/ objects of valid messages", 1),
                ("invalid messages not in rejected/", 1)
            ]
        );
    }

    #[test]
    fn a_conflict_answered_201_is_accepted() {
        let mut e = clean();
        let mut c = item("k1");
        c.kind = Kind::Conflict;
        e.items.push(c);
        e.answers.push(answered(1, "a1"));
        assert_eq!(audit(&e).nonzero(), vec![("conflicts accepted", 1)]);
    }

    #[test]
    fn the_canonical_form_sorts_keys_at_every_depth_and_keeps_numbers_and_text() {
        let v: Value =
            serde_json::from_str(r#"{"b": [1, {"z": 0.1, "a": "é\""}], "a": -5e-7}"#).unwrap();
        assert_eq!(canonical(&v), r#"{"a":-5e-7,"b":[1,{"a":"é\"","z":0.1}]}"#);
    }
}

/// The stand-in itself: a killed environment's invocation is its caller's
/// failure, named by its moment, and the process started in its place
/// answers the next one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_environment_killed_mid_invocation_fails_its_caller_and_its_replacement_answers() {
    use common::lambda_pool::{Outcome, Pool, PoolConfig};
    let s3 = common::moto_store().await;
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("chaos-pool");
    let pool = Pool::start(PoolConfig {
        function: "submit".into(),
        bin: env!("CARGO_BIN_EXE_submit").into(),
        size: 1,
        env: vec![("BUCKET_NAME".into(), s3.bucket().into())],
        s3: common::moto_endpoint(),
        seed: 1,
        fault_per_mille: 0,
        spikes: (0, 0),
        timeout: Duration::from_secs(30),
        log_dir: dir,
    })
    .await;
    let post = |key: &str| {
        producers::http_event(
            "/tasks",
            serde_json::json!({"task_type": "t", "input": {"k": key}, "idempotency_key": key})
                .to_string(),
        )
    };
    for i in 0..3 {
        let Outcome::Response(r) = pool.invoke(post(&format!("warm-{i}"))).await else {
            panic!("no answer")
        };
        assert_eq!(r["statusCode"], 201, "{r}");
    }
    // Killed the moment its record lands: the caller hears of it.
    pool.kill_when(std::sync::Arc::new(
        |l: &common::chaos_proxy::Landing<'_>, _| {
            (l.line.contains("/idempotency/") && l.if_none_match)
                .then(|| "after its record".to_owned())
        },
    ));
    match pool.invoke(post("killed")).await {
        Outcome::Killed(m) => assert_eq!(m, "after its record"),
        other => panic!("{other:?}"),
    }
    pool.kill_when(std::sync::Arc::new(|_, _| None));
    // Its replacement finishes the submit the killed one began: a replay.
    let Outcome::Response(r) = pool.invoke(post("killed")).await else {
        panic!("no answer")
    };
    assert_eq!(r["statusCode"], 200, "{r}");
    let body: serde_json::Value = serde_json::from_str(r["body"].as_str().unwrap()).unwrap();
    use idempotent_submit::store::Store;
    assert!(s3.get(body["task_key"].as_str().unwrap()).await.is_ok());
    let kills = pool.kills();
    assert_eq!(
        (kills.len(), kills[0].moment.as_str()),
        (1, "after its record")
    );
    pool.stop().await;
    assert_eq!(
        pool.rss().len(),
        2,
        "one process each: the first and its replacement"
    );
}
