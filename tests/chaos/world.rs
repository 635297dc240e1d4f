//! The world: one versioned bucket (moto's, or another store's), its due
//! queue (moto's SQS, fed by the bucket's notifications or by the
//! submitter), `submit` and `sweep` processes under the runtime API
//! stand-in (tests/common/lambda_pool.rs) each behind a fault proxy, the
//! producers, the due queue drained into `sweep` as the event source
//! mapping would, the scheduled pass every few seconds, kills of random
//! processes at random moments, and two buquet 0.1 workers counting every
//! run. [`run`] runs it, then the audit (audit.rs) on what it left.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use idempotent_submit::store::S3Store;
use serde_json::{Value, json};

use super::audit::{self, Evidence};
#[allow(unused_imports)]
pub use super::config::*;
#[allow(unused_imports)]
pub use super::processes::*;
use super::producers::{Door, Ledger, Producer, SharedLedger};
use crate::common::chaos_proxy::{ChaosProxy, KINDS};
use crate::common::lambda_pool::{Outcome, Pool, PoolConfig};

/// The world's due queue on its moto's SQS, and a client of it.
#[derive(Clone)]
struct DueQueue {
    url: String,
    arn: String,
    sqs: aws_sdk_sqs::Client,
}

/// The due queue, with `delay` as its DelaySeconds; with bucket events,
/// the bucket's notification of every record write into it.
async fn due_queue(store: &StoreSpec, s3: &S3Store, delay: u64, events: Events) -> DueQueue {
    use crate::common::moto::{moto_due_queue_at, moto_queue_at, moto_sqs_at, queue_arn};
    let url = if events == Events::Bucket {
        moto_due_queue_at(&store.sqs, s3, delay as u32).await
    } else {
        moto_queue_at(&store.sqs, &format!("due-{}", s3.bucket()), delay as u32).await
    };
    let sqs = moto_sqs_at(&store.sqs);
    let arn = queue_arn(&sqs, &url).await;
    DueQueue { url, arn, sqs }
}

/// How long a received due message stays invisible: a `sweep` killed with
/// it lets it come back this soon (the world's event delivery margin covers
/// two of them after the delay).
const DUE_VISIBILITY: i32 = 3;

/// The event source mapping: receives from the due queue, invokes `sweep`
/// with each batch, deletes what it took; what it hands back, or what a
/// killed `sweep` held, comes back after the visibility timeout.
async fn drain(
    due: DueQueue,
    delay_ms: f64,
    sweep: Arc<Pool>,
    stats: Arc<SweepStats>,
    stop: Arc<AtomicBool>,
    drop_record: Arc<Mutex<Option<String>>>,
) {
    let DueQueue { url, arn, sqs } = due;
    while !stop.load(Ordering::SeqCst) {
        stats.sqs_requests.fetch_add(1, Ordering::SeqCst);
        let got = sqs
            .receive_message()
            .queue_url(&url)
            .max_number_of_messages(10)
            .wait_time_seconds(0)
            .visibility_timeout(DUE_VISIBILITY)
            .message_system_attribute_names(
                aws_sdk_sqs::types::MessageSystemAttributeName::SentTimestamp,
            )
            .send()
            .await;
        let mut msgs = match got {
            Ok(o) => o.messages.unwrap_or_default(),
            Err(_) => vec![],
        };
        if msgs.is_empty() {
            tokio::time::sleep(Duration::from_millis(300)).await;
            continue;
        }
        stats
            .received
            .fetch_add(msgs.len() as u64, Ordering::SeqCst);
        {
            let now = chrono::Utc::now();
            let mut named = stats.first_named.lock().unwrap();
            for m in &msgs {
                for key in records_named(m.body().unwrap_or("")) {
                    named.entry(key).or_insert(now);
                }
            }
        }
        // The world's damage: a record whose event is lost.
        msgs = drop_lost(&sqs, &url, &stats, msgs, &drop_record).await;
        if msgs.is_empty() {
            continue;
        }
        let outcome = sweep.invoke(sqs_event(&msgs, &arn)).await;
        let listed: Vec<String> = match &outcome {
            Outcome::Response(v) => v["batchItemFailures"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|f| f["itemIdentifier"].as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default(),
            _ => {
                stats
                    .lost_to_kills
                    .fetch_add(msgs.len() as u64, Ordering::SeqCst);
                continue;
            }
        };
        let entries: Vec<aws_sdk_sqs::types::DeleteMessageBatchRequestEntry> = msgs
            .iter()
            .enumerate()
            .filter(|(_, m)| !listed.iter().any(|l| Some(l.as_str()) == m.message_id()))
            .map(|(i, m)| {
                aws_sdk_sqs::types::DeleteMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(m.receipt_handle().unwrap_or_default())
                    .build()
                    .expect("an entry")
            })
            .collect();
        note_lateness(&stats, &msgs, &listed, delay_ms);
        stats
            .handed_back
            .fetch_add(listed.len() as u64, Ordering::SeqCst);
        stats
            .acked
            .fetch_add(entries.len() as u64, Ordering::SeqCst);
        if !entries.is_empty() {
            stats.sqs_requests.fetch_add(1, Ordering::SeqCst);
            let _ = sqs
                .delete_message_batch()
                .queue_url(&url)
                .set_entries(Some(entries))
                .send()
                .await;
        }
    }
}

/// The due queue's messages `msgs` as the event source mapping hands them to
/// `sweep`.
fn sqs_event(msgs: &[aws_sdk_sqs::types::Message], arn: &str) -> Value {
    let records: Vec<Value> = msgs
        .iter()
        .map(|m| {
            json!({
                "messageId": m.message_id(),
                "receiptHandle": m.receipt_handle(),
                "body": m.body(),
                "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1769515200000"},
                "messageAttributes": {},
                "md5OfBody": m.md5_of_body(),
                "eventSource": "aws:sqs",
                "eventSourceARN": arn,
                "awsRegion": "us-east-1"
            })
        })
        .collect();
    json!({ "Records": records })
}

/// Notes how late after their delay the messages `sweep` took (all but
/// those `listed` back) came.
fn note_lateness(
    stats: &SweepStats,
    msgs: &[aws_sdk_sqs::types::Message],
    listed: &[String],
    delay_ms: f64,
) {
    let now_ms = chrono::Utc::now().timestamp_millis() as f64;
    {
        let mut late = stats.lateness_ms.lock().unwrap();
        for m in msgs
            .iter()
            .filter(|m| !listed.iter().any(|l| Some(l.as_str()) == m.message_id()))
        {
            let sent = m
                .attributes()
                .and_then(|a| a.get(&aws_sdk_sqs::types::MessageSystemAttributeName::SentTimestamp))
                .and_then(|t| t.parse::<f64>().ok());
            if let Some(sent) = sent {
                late.push((sent, now_ms - sent - delay_ms));
            }
        }
    }
}

/// The world's damage: the messages of the record `drop_record` names are
/// deleted unread; the others.
async fn drop_lost(
    sqs: &aws_sdk_sqs::Client,
    url: &str,
    stats: &SweepStats,
    msgs: Vec<aws_sdk_sqs::types::Message>,
    drop_record: &Mutex<Option<String>>,
) -> Vec<aws_sdk_sqs::types::Message> {
    let lost = drop_record.lock().unwrap().clone();
    let Some(lost) = lost else {
        return msgs;
    };
    let (gone, kept): (Vec<_>, Vec<_>) = msgs.into_iter().partition(|m| {
        m.body()
            .is_some_and(|b| b.contains(&lost.replace('/', "%2F")) || b.contains(&lost))
    });
    for m in &gone {
        stats.dropped.fetch_add(1, Ordering::SeqCst);
        stats.sqs_requests.fetch_add(1, Ordering::SeqCst);
        let _ = sqs
            .delete_message()
            .queue_url(url)
            .receipt_handle(m.receipt_handle().unwrap_or_default())
            .send()
            .await;
    }
    kept
}

/// Runs the world `cfg` and audits it.
pub async fn run(cfg: WorldConfig) -> Report {
    // A record the due path missed meets a scheduled pass once stale and
    // before its finish deadline (two schedules: one may fail), a pass's
    // own time allowed for.
    assert!(
        !cfg.passes_while_producing
            || Duration::from_secs(cfg.windows.stale) + 2 * cfg.pass_every + Duration::from_secs(4)
                < Duration::from_secs(cfg.windows.finish),
        "the world's schedule ({:?}) cannot bring a missed record to a pass before its deadline",
        cfg.pass_every
    );
    let begun = Instant::now();
    let load_at_start = loadavg();
    let _ = std::fs::remove_dir_all(&cfg.dir);
    std::fs::create_dir_all(&cfg.dir).unwrap();
    println!(
        "[chaos] seed {} (CHAOS_SEED={} replays this run's draws), {} s of producing on {}, logs in {}",
        cfg.seed,
        cfg.seed,
        cfg.produce.as_secs(),
        cfg.store.name,
        cfg.dir.display()
    );
    let s3 = cfg.store.bucket().await;
    let bucket_name = s3.bucket().to_owned();
    let due = due_queue(&cfg.store, &s3, cfg.windows.stale, cfg.events).await;

    let mut env = cfg.windows.env();
    env.push(("BUCKET_NAME".into(), bucket_name.clone()));
    env.push(("AWS_ACCESS_KEY_ID".into(), cfg.store.key_pair.0.clone()));
    env.push(("AWS_SECRET_ACCESS_KEY".into(), cfg.store.key_pair.1.clone()));
    env.extend(cfg.extra_env.iter().cloned());
    if cfg.events == Events::Submitter {
        env.push(("RECORD_EVENTS".into(), "submitter".into()));
        env.push(("DUE_QUEUE_URL".into(), due.url.clone()));
        env.push(("AWS_ENDPOINT_URL_SQS".into(), cfg.store.sqs.clone()));
        let order = if cfg.with_claim {
            "with_claim"
        } else {
            "before_claim"
        };
        env.push(("DUE_MESSAGE".into(), order.into()));
    }
    let pool = |function: &str, bin: &Path, size: usize, timeout: u64, salt: u64| PoolConfig {
        function: function.into(),
        bin: bin.to_owned(),
        size,
        env: env.clone(),
        s3: cfg.store.endpoint.clone(),
        seed: cfg.seed ^ salt,
        fault_per_mille: cfg.fault_per_mille,
        spikes: cfg.spikes,
        timeout: Duration::from_secs(timeout),
        log_dir: cfg.dir.clone(),
    };
    // submit: API Gateway's 30 s; sweep: a scheduled run stops 10 s before
    // its deadline (and leases the pass for that long).
    let submit = Pool::start(pool("submit", &cfg.submit_bin, cfg.submit_envs, 30, 1)).await;
    let sweep = Pool::start(pool("sweep", &cfg.sweep_bin, cfg.sweep_envs, 20, 2)).await;
    if cfg.kills {
        submit.kill_when(kill_rule("submit", cfg.seed));
        sweep.kill_when(kill_rule("sweep", cfg.seed));
    }

    // The workers, on a healthy link that counts their requests.
    let worker_link = ChaosProxy::start(&cfg.store.endpoint, 0, cfg.seed).await;
    let runs: Vec<PathBuf> = (0..cfg.workers)
        .map(|i| cfg.dir.join(format!("runs-{i}.jsonl")))
        .collect();
    let mut workers: Vec<tokio::process::Child> = runs
        .iter()
        .enumerate()
        .map(|(i, r)| worker(&cfg, &bucket_name, &worker_link.endpoint, i, r))
        .collect();

    let stats = Arc::new(SweepStats::default());
    let stop_sweep = Arc::new(AtomicBool::new(false));
    let drop_record: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
    // Held (a day) until the windows close, when so told.
    let hold_passes: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(
        (!cfg.passes_while_producing).then(|| Instant::now() + Duration::from_secs(86_400)),
    ));
    let mut background = vec![];
    for _ in 0..cfg.drainers {
        background.push(tokio::spawn(drain(
            due.clone(),
            (cfg.windows.stale * 1000) as f64,
            sweep.clone(),
            stats.clone(),
            stop_sweep.clone(),
            drop_record.clone(),
        )));
    }
    background.push(tokio::spawn(schedule(
        sweep.clone(),
        cfg.pass_every,
        stats.clone(),
        stop_sweep.clone(),
        hold_passes.clone(),
    )));
    let stop_kills = Arc::new(AtomicBool::new(!cfg.kills));
    let killer_task = tokio::spawn(killer(
        vec![submit.clone(), sweep.clone()],
        cfg.kill_every_ms,
        cfg.seed,
        stop_kills.clone(),
    ));

    // The damage that happens while the world runs.
    if let Some(d) = cfg.damage {
        d.during(&s3, &cfg, &drop_record, &hold_passes).await;
    }

    // Produce.
    let ledger: SharedLedger = Arc::new(Mutex::new(Ledger::default()));
    let counter = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let until = started + cfg.produce;
    let producers: Vec<_> = (0..cfg.producers)
        .map(|i| {
            tokio::spawn(
                Producer {
                    index: i,
                    rng: fastrand::Rng::with_seed(cfg.seed.wrapping_add(i as u64 * 7919)),
                    ledger: ledger.clone(),
                    submit: submit.clone(),
                    until,
                    counter: counter.clone(),
                }
                .run(),
            )
        })
        .collect();
    let all_proxies = |extra: &ChaosProxy| {
        let mut v: Vec<&ChaosProxy> = submit.proxies().chain(sweep.proxies()).collect();
        v.push(extra);
        reached(&v)
    };
    let mut last = (Instant::now(), 0u64);
    while producers.iter().any(|p| !p.is_finished()) {
        tokio::time::sleep(Duration::from_millis(250)).await;
        if last.0.elapsed() >= cfg.progress_every {
            let now = all_proxies(&worker_link) + stats.sqs_requests.load(Ordering::SeqCst);
            let rate = (now - last.1) as f64 / last.0.elapsed().as_secs_f64();
            last = (Instant::now(), now);
            let l = ledger.lock().unwrap();
            let faults: u64 = submit
                .proxies()
                .chain(sweep.proxies())
                .map(|p| p.counts.faults.load(Ordering::SeqCst))
                .sum();
            println!(
                "[chaos] {:>4} s: {} submits sent, {} answered or taken, kills {}, faults {}, \
                 store {:.0} req/s, due messages {} received, runs {}",
                started.elapsed().as_secs(),
                l.items.len(),
                l.answers.len() + l.sqs_taken.len(),
                submit.kills().len() + sweep.kills().len(),
                faults,
                rate,
                stats.received.load(Ordering::SeqCst),
                runs.iter().map(|r| lines(r)).sum::<usize>(),
            );
        }
    }
    for p in producers {
        p.await.expect("a producer panicked");
    }
    let produced_for = started.elapsed();
    let load_at_stop = loadavg();
    let store_requests_in_production =
        all_proxies(&worker_link) + stats.sqs_requests.load(Ordering::SeqCst);
    let workers_requests = reached(&[&worker_link]);
    let mut by_kind = std::collections::BTreeMap::new();
    kinds_of(
        "submit",
        &submit.proxies().collect::<Vec<_>>(),
        &mut by_kind,
    );
    kinds_of("sweep", &sweep.proxies().collect::<Vec<_>>(), &mut by_kind);
    kinds_of("workers", &[&worker_link], &mut by_kind);
    let requests_by_kind: Vec<((String, String), u64)> = by_kind.into_iter().collect();
    let due_requests = stats.sqs_requests.load(Ordering::SeqCst);
    let requests_by_client = (
        store_requests_in_production - workers_requests - due_requests,
        workers_requests,
        due_requests,
    );
    stop_kills.store(true, Ordering::SeqCst);
    let _ = killer_task.await;
    submit.kill_when(Arc::new(|_, _| None));
    sweep.kill_when(Arc::new(|_, _| None));

    // The windows close, with the link still failing: every record's
    // finishing is the sweeper's by now.
    let last_send = ledger.lock().unwrap().last_send.unwrap_or(started);
    let closed = last_send + cfg.windows.settled_after() + Duration::from_secs(1);
    println!(
        "[chaos] producers stopped after {:.0} s; the windows close in {:.0} s",
        produced_for.as_secs_f64(),
        closed
            .saturating_duration_since(Instant::now())
            .as_secs_f64()
    );
    tokio::time::sleep_until(closed.into()).await;
    for p in submit.proxies().chain(sweep.proxies()) {
        p.heal();
    }
    // Orphan payloads are the scheduled pass's once they are that old, and
    // a stale marker once it has stood for the late-write margin (the
    // ready index's scan, src/protocol/sweep/markers.rs): one more pass
    // once the last marker that landed before the windows closed is that
    // old, healed, not held.
    *hold_passes.lock().unwrap() = None;
    tokio::time::sleep(Duration::from_secs(cfg.windows.late_write + 1)).await;
    let mut last_pass = None;
    let mut last_pass_at = None;
    // Until one completes (a run stops before its deadline keeping its
    // place; another holds the pass for its lease).
    for _ in 0..20 {
        last_pass_at = Some(chrono::Utc::now());
        last_pass = pass(&sweep, &stats).await;
        if last_pass.as_ref().is_some_and(|v| v["complete"] == true) {
            break;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    println!("[chaos] the last scheduled pass: {last_pass:?}");

    // Every key the bucket has a record of, submitted once more through the
    // batch door (the link healed): what the service says of it now.
    let final_replays = audit::replay_every_key(&s3, &submit, &ledger).await;

    if let Some(d) = cfg.damage {
        d.before_idle(&s3, &runs).await;
    }
    // The workers go idle: no run for a while.
    let mut seen = (Instant::now(), usize::MAX);
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let n: usize = runs.iter().map(|r| lines(r)).sum();
        if n != seen.1 {
            seen = (Instant::now(), n);
        } else if seen.0.elapsed() > Duration::from_secs(8) {
            break;
        }
    }
    if let Some(d) = cfg.damage {
        d.after_idle(&s3, &runs).await;
    }
    stop_sweep.store(true, Ordering::SeqCst);
    for t in background {
        let _ = t.await;
    }
    for w in &mut workers {
        let _ = w.start_kill();
        let _ = w.wait().await;
    }
    let store_requests_total =
        all_proxies(&worker_link) + stats.sqs_requests.load(Ordering::SeqCst);
    submit.stop().await;
    sweep.stop().await;

    // The audit.
    println!("[chaos] auditing the bucket");
    let mut logs = submit.logs();
    logs.extend(sweep.logs());
    logs.extend((0..cfg.workers).map(|i| cfg.dir.join(format!("worker-{i}.log"))));
    let ledger = Arc::try_unwrap(ledger)
        .map(|m| m.into_inner().unwrap())
        .unwrap_or_else(|_| panic!("the ledger is still shared"));
    let mut evidence =
        Evidence::collect(&s3, &ledger, &runs, &logs, &cfg.windows, last_pass_at).await;
    evidence.due_named = stats.first_named.lock().unwrap().clone();
    evidence.with_claim_window = cfg.events == Events::Submitter && cfg.with_claim;
    let audit = audit::audit(&evidence);

    let mut faults_by_kind: Vec<(String, u64)> = KINDS.iter().map(|k| (k.to_string(), 0)).collect();
    let (mut spikes, mut spike_ms) = (0, 0);
    for p in submit.proxies().chain(sweep.proxies()) {
        for (i, f) in faults_by_kind.iter_mut().enumerate() {
            f.1 += p.counts.kind(i);
        }
        spikes += p.counts.spikes.load(Ordering::SeqCst);
        spike_ms += p.counts.spike_ms.load(Ordering::SeqCst);
    }
    let (sweep_logs, submit_logs) = (sweep.logs(), submit.logs());
    let mut kills = submit.kills();
    kills.extend(sweep.kills());
    let mut rss = submit.rss();
    rss.extend(sweep.rss());
    Report {
        produced_for,
        total: begun.elapsed(),
        ledger,
        kills,
        rss,
        faults_by_kind,
        spikes,
        spike_ms,
        store_requests_in_production,
        store_requests_total,
        requests_by_client,
        requests_by_kind,
        finished_by_due: sum_logged_from(&sweep_logs, SUMMARY, Some("due batch"), "finished"),
        due_errors: sum_logged_from(&sweep_logs, SUMMARY, Some("due batch"), "errors"),
        due_past_deadline: sum_logged_from(
            &sweep_logs,
            SUMMARY,
            Some("due batch"),
            "past_deadline",
        ),
        finished_by_passes_logged: sum_logged_from(
            &sweep_logs,
            SUMMARY,
            Some("scheduled pass"),
            "finished",
        ),
        passes_busy_logged: sum_logged_from(&sweep_logs, SUMMARY, Some("scheduled pass"), "busy"),
        payloads_deleted_logged: sum_logged_from(
            &sweep_logs,
            SUMMARY,
            Some("scheduled pass"),
            "payloads_deleted",
        ),
        markers_deleted_logged: sum_logged_from(
            &sweep_logs,
            SUMMARY,
            Some("scheduled pass"),
            "markers_deleted",
        ),
        recovered_by_submits: sum_logged(&submit_logs, "submitted", "recovered")
            + sum_logged(&submit_logs, "batch item submitted", "recovered"),
        load: (load_at_start, load_at_stop),
        starts: submit.starts.load(Ordering::SeqCst) + sweep.starts.load(Ordering::SeqCst),
        exits: submit.exits.load(Ordering::SeqCst) + sweep.exits.load(Ordering::SeqCst),
        init_errors: submit.init_errors.load(Ordering::SeqCst)
            + sweep.init_errors.load(Ordering::SeqCst),
        sweep: Arc::try_unwrap(stats).unwrap_or_default(),
        audit,
        final_replays,
        config: cfg,
    }
}

/// Which door each item went through, for the figures.
pub fn by_door(l: &Ledger) -> Vec<(Door, usize)> {
    let mut v: Vec<(Door, usize)> = [Door::Http, Door::Batch, Door::Sqs]
        .into_iter()
        .map(|d| (d, l.items.iter().filter(|i| i.door == d).count()))
        .collect();
    v.sort();
    v
}
