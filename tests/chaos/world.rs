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
use serde_json::Value;
use tokio::task::JoinHandle;

use super::audit::{self, Evidence};
#[allow(unused_imports)]
pub use super::config::*;
use super::drainer::{DueQueue, drain, due_queue};
#[allow(unused_imports)]
pub use super::processes::*;
use super::producers::{Door, Ledger, Producer, SharedLedger};
use crate::common::chaos_proxy::{ChaosProxy, KINDS};
use crate::common::lambda_pool::{Pool, PoolConfig};

/// Runs the world `cfg` and audits it: started, produced into, left to
/// settle, let go idle, then judged.
pub async fn run(cfg: WorldConfig) -> Report {
    let mut world = World::start(cfg).await;
    let production = world.produce().await;
    let settled = world.settle(&production).await;
    let store_requests_total = world.idle().await;
    world
        .report(production, settled, store_requests_total)
        .await
}

/// The world while it runs: its bucket, its functions, the workers and the
/// background tasks that drive them.
struct World {
    cfg: WorldConfig,
    begun: Instant,
    load_at_start: String,
    s3: S3Store,
    submit: Arc<Pool>,
    sweep: Arc<Pool>,
    /// The workers' healthy link, which counts their requests.
    worker_link: ChaosProxy,
    /// Each worker's runs, a file each.
    runs: Vec<PathBuf>,
    workers: Vec<tokio::process::Child>,
    stats: Arc<SweepStats>,
    stop_sweep: Arc<AtomicBool>,
    hold_passes: Arc<Mutex<Option<Instant>>>,
    /// The drainers and the schedule.
    background: Vec<JoinHandle<()>>,
    stop_kills: Arc<AtomicBool>,
    killer: Option<JoinHandle<()>>,
}

/// What the producers sent and were answered, and the requests it took.
struct Production {
    ledger: SharedLedger,
    started: Instant,
    produced_for: Duration,
    load_at_stop: String,
    store_requests_in_production: u64,
    requests_by_client: (u64, u64, u64),
    requests_by_kind: Vec<((String, String), u64)>,
}

/// The last scheduled pass (its answer, when it began) and how many keys
/// the final replays asked about.
struct Settled {
    last_pass_at: Option<chrono::DateTime<chrono::Utc>>,
    final_replays: u64,
}

/// The functions' environment: the windows, the bucket and its key pair,
/// the configuration's extras, and the due queue when the submitter sends.
fn function_env(cfg: &WorldConfig, bucket: &str, due: &DueQueue) -> Vec<(String, String)> {
    let mut env = cfg.windows.env();
    env.push(("BUCKET_NAME".into(), bucket.to_owned()));
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
    env
}

impl World {
    /// The bucket, its due queue, the two functions' pools (killed at random
    /// when so told), the workers, the drainers, the schedule, the killer,
    /// and the damage that happens while the world runs.
    async fn start(cfg: WorldConfig) -> World {
        // A record the due path missed meets a scheduled pass once stale and
        // before its finish deadline (two schedules: one may fail), a pass's
        // own time allowed for.
        assert!(
            !cfg.passes_while_producing
                || Duration::from_secs(cfg.windows.stale)
                    + 2 * cfg.pass_every
                    + Duration::from_secs(4)
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
        let env = function_env(&cfg, &bucket_name, &due);
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
        // submit: API Gateway's 30 s; sweep: a scheduled run stops 10 s
        // before its deadline (and leases the pass for that long).
        let submit = Pool::start(pool("submit", &cfg.submit_bin, cfg.submit_envs, 30, 1)).await;
        let sweep = Pool::start(pool("sweep", &cfg.sweep_bin, cfg.sweep_envs, 20, 2)).await;
        if cfg.kills {
            submit.kill_when(kill_rule("submit", cfg.seed));
            sweep.kill_when(kill_rule("sweep", cfg.seed));
        }
        let worker_link = ChaosProxy::start(&cfg.store.endpoint, 0, cfg.seed).await;
        let runs: Vec<PathBuf> = (0..cfg.workers)
            .map(|i| cfg.dir.join(format!("runs-{i}.jsonl")))
            .collect();
        let workers = runs
            .iter()
            .enumerate()
            .map(|(i, r)| worker(&cfg, &bucket_name, &worker_link.endpoint, i, r))
            .collect();
        // Held (a day) until the windows close, when so told.
        let hold =
            (!cfg.passes_while_producing).then(|| Instant::now() + Duration::from_secs(86_400));
        let mut world = World {
            begun,
            load_at_start,
            s3,
            submit,
            sweep,
            worker_link,
            runs,
            workers,
            stats: Arc::new(SweepStats::default()),
            stop_sweep: Arc::new(AtomicBool::new(false)),
            hold_passes: Arc::new(Mutex::new(hold)),
            background: vec![],
            stop_kills: Arc::new(AtomicBool::new(!cfg.kills)),
            killer: None,
            cfg,
        };
        world.drive(due).await;
        world
    }

    /// The background: the drainers of the due queue, the schedule, the
    /// killer; and the damage that happens while the world runs.
    async fn drive(&mut self, due: DueQueue) {
        let drop_record: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
        for _ in 0..self.cfg.drainers {
            self.background.push(tokio::spawn(drain(
                due.clone(),
                (self.cfg.windows.stale * 1000) as f64,
                self.sweep.clone(),
                self.stats.clone(),
                self.stop_sweep.clone(),
                drop_record.clone(),
            )));
        }
        self.background.push(tokio::spawn(schedule(
            self.sweep.clone(),
            self.cfg.pass_every,
            self.stats.clone(),
            self.stop_sweep.clone(),
            self.hold_passes.clone(),
        )));
        self.killer = Some(tokio::spawn(killer(
            vec![self.submit.clone(), self.sweep.clone()],
            self.cfg.kill_every_ms,
            self.cfg.seed,
            self.stop_kills.clone(),
        )));
        if let Some(d) = self.cfg.damage {
            d.during(&self.s3, &self.cfg, &drop_record, &self.hold_passes)
                .await;
        }
    }

    /// Every request that reached the store, the drainers' SQS calls too.
    fn store_requests(&self) -> u64 {
        let mut v: Vec<&ChaosProxy> = self.submit.proxies().chain(self.sweep.proxies()).collect();
        v.push(&self.worker_link);
        reached(&v) + self.stats.sqs_requests.load(Ordering::SeqCst)
    }

    /// The producers, for `cfg.produce`, with a line of progress now and
    /// then; then the kills stop.
    async fn produce(&mut self) -> Production {
        let (cfg, submit) = (&self.cfg, &self.submit);
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
        let mut last = (Instant::now(), 0u64);
        while producers.iter().any(|p| !p.is_finished()) {
            tokio::time::sleep(Duration::from_millis(250)).await;
            if last.0.elapsed() >= cfg.progress_every {
                last = self.progress(&ledger, started, last);
            }
        }
        for p in producers {
            p.await.expect("a producer panicked");
        }
        let production = self.production(ledger, started);
        self.stop_kills.store(true, Ordering::SeqCst);
        if let Some(k) = self.killer.take() {
            let _ = k.await;
        }
        self.submit.kill_when(Arc::new(|_, _| None));
        self.sweep.kill_when(Arc::new(|_, _| None));
        production
    }

    /// A line of progress; the store's request rate since `last`.
    fn progress(
        &self,
        ledger: &SharedLedger,
        started: Instant,
        last: (Instant, u64),
    ) -> (Instant, u64) {
        let now = self.store_requests();
        let rate = (now - last.1) as f64 / last.0.elapsed().as_secs_f64();
        let l = ledger.lock().unwrap();
        let (submit, sweep, stats) = (&self.submit, &self.sweep, &self.stats);
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
            self.runs.iter().map(|r| lines(r)).sum::<usize>(),
        );
        (Instant::now(), now)
    }

    /// The requests the production took, by client and by kind.
    fn production(&self, ledger: SharedLedger, started: Instant) -> Production {
        let produced_for = started.elapsed();
        let load_at_stop = loadavg();
        let store_requests_in_production = self.store_requests();
        let workers_requests = reached(&[&self.worker_link]);
        let mut by_kind = std::collections::BTreeMap::new();
        let submit: Vec<_> = self.submit.proxies().collect();
        kinds_of("submit", &submit, &mut by_kind);
        kinds_of(
            "sweep",
            &self.sweep.proxies().collect::<Vec<_>>(),
            &mut by_kind,
        );
        kinds_of("workers", &[&self.worker_link], &mut by_kind);
        let due_requests = self.stats.sqs_requests.load(Ordering::SeqCst);
        Production {
            ledger,
            started,
            produced_for,
            load_at_stop,
            store_requests_in_production,
            requests_by_client: (
                store_requests_in_production - workers_requests - due_requests,
                workers_requests,
                due_requests,
            ),
            requests_by_kind: by_kind.into_iter().collect(),
        }
    }

    /// The windows close, with the link still failing: every record's
    /// finishing is the sweeper's by now. Then, healed, the last scheduled
    /// pass and a final replay of every key.
    async fn settle(&self, p: &Production) -> Settled {
        let last_send = p.ledger.lock().unwrap().last_send.unwrap_or(p.started);
        let closed = last_send + self.cfg.windows.settled_after() + Duration::from_secs(1);
        println!(
            "[chaos] producers stopped after {:.0} s; the windows close in {:.0} s",
            p.produced_for.as_secs_f64(),
            closed
                .saturating_duration_since(Instant::now())
                .as_secs_f64()
        );
        tokio::time::sleep_until(closed.into()).await;
        for proxy in self.submit.proxies().chain(self.sweep.proxies()) {
            proxy.heal();
        }
        // Orphan payloads are the scheduled pass's once they are that old,
        // and a stale marker once it has stood for the late-write margin
        // (the ready index's scan, src/protocol/sweep/markers.rs): one more
        // pass once the last marker that landed before the windows closed
        // is that old, healed, not held.
        *self.hold_passes.lock().unwrap() = None;
        tokio::time::sleep(Duration::from_secs(self.cfg.windows.late_write + 1)).await;
        let mut last_pass = None;
        let mut last_pass_at = None;
        // Until one completes (a run stops before its deadline keeping its
        // place; another holds the pass for its lease).
        for _ in 0..20 {
            last_pass_at = Some(chrono::Utc::now());
            last_pass = pass(&self.sweep, &self.stats).await;
            if last_pass
                .as_ref()
                .is_some_and(|v: &Value| v["complete"] == true)
            {
                break;
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        println!("[chaos] the last scheduled pass: {last_pass:?}");
        // Every key the bucket has a record of, submitted once more through
        // the batch door (the link healed): what the service says of it now.
        let final_replays = audit::replay_every_key(&self.s3, &self.submit, &p.ledger).await;
        Settled {
            last_pass_at,
            final_replays,
        }
    }

    /// The workers go idle (no run for a while), with the damage before and
    /// after; then everything stops. The store's requests in all.
    async fn idle(&mut self) -> u64 {
        if let Some(d) = self.cfg.damage {
            d.before_idle(&self.s3, &self.runs).await;
        }
        let mut seen = (Instant::now(), usize::MAX);
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let n: usize = self.runs.iter().map(|r| lines(r)).sum();
            if n != seen.1 {
                seen = (Instant::now(), n);
            } else if seen.0.elapsed() > Duration::from_secs(8) {
                break;
            }
        }
        if let Some(d) = self.cfg.damage {
            d.after_idle(&self.s3, &self.runs).await;
        }
        self.stop_sweep.store(true, Ordering::SeqCst);
        for t in self.background.drain(..) {
            let _ = t.await;
        }
        for w in &mut self.workers {
            let _ = w.start_kill();
            let _ = w.wait().await;
        }
        let total = self.store_requests();
        self.submit.stop().await;
        self.sweep.stop().await;
        total
    }

    /// The audit of what the world left, and the run's figures.
    async fn report(self, p: Production, settled: Settled, store_requests_total: u64) -> Report {
        let World {
            cfg, submit, sweep, ..
        } = &self;
        println!("[chaos] auditing the bucket");
        let mut logs = submit.logs();
        logs.extend(sweep.logs());
        logs.extend((0..cfg.workers).map(|i| cfg.dir.join(format!("worker-{i}.log"))));
        let ledger = Arc::try_unwrap(p.ledger)
            .map(|m| m.into_inner().unwrap())
            .unwrap_or_else(|_| panic!("the ledger is still shared"));
        let windows = &cfg.windows;
        let mut evidence = Evidence::collect(
            &self.s3,
            &ledger,
            &self.runs,
            &logs,
            windows,
            settled.last_pass_at,
        )
        .await;
        evidence.due_named = self.stats.first_named.lock().unwrap().clone();
        evidence.with_claim_window = cfg.events == Events::Submitter && cfg.with_claim;
        let audit = audit::audit(&evidence);
        let mut faults_by_kind: Vec<(String, u64)> =
            KINDS.iter().map(|k| (k.to_string(), 0)).collect();
        let (mut spikes, mut spike_ms) = (0, 0);
        for p in submit.proxies().chain(sweep.proxies()) {
            for (i, f) in faults_by_kind.iter_mut().enumerate() {
                f.1 += p.counts.kind(i);
            }
            spikes += p.counts.spikes.load(Ordering::SeqCst);
            spike_ms += p.counts.spike_ms.load(Ordering::SeqCst);
        }
        let mut kills = submit.kills();
        kills.extend(sweep.kills());
        let mut rss = submit.rss();
        rss.extend(sweep.rss());
        let logged = Logged::of(&submit.logs(), &sweep.logs());
        Report {
            produced_for: p.produced_for,
            total: self.begun.elapsed(),
            ledger,
            kills,
            rss,
            faults_by_kind,
            spikes,
            spike_ms,
            store_requests_in_production: p.store_requests_in_production,
            store_requests_total,
            requests_by_client: p.requests_by_client,
            requests_by_kind: p.requests_by_kind,
            finished_by_due: logged.finished_by_due,
            due_errors: logged.due_errors,
            due_past_deadline: logged.due_past_deadline,
            finished_by_passes_logged: logged.finished_by_passes,
            passes_busy_logged: logged.passes_busy,
            payloads_deleted_logged: logged.payloads_deleted,
            markers_deleted_logged: logged.markers_deleted,
            recovered_by_submits: logged.recovered_by_submits,
            load: (self.load_at_start.clone(), p.load_at_stop),
            starts: submit.starts.load(Ordering::SeqCst) + sweep.starts.load(Ordering::SeqCst),
            exits: submit.exits.load(Ordering::SeqCst) + sweep.exits.load(Ordering::SeqCst),
            init_errors: submit.init_errors.load(Ordering::SeqCst)
                + sweep.init_errors.load(Ordering::SeqCst),
            sweep: Arc::try_unwrap(self.stats).unwrap_or_default(),
            audit,
            final_replays: settled.final_replays,
            config: self.cfg,
        }
    }
}

/// What the functions' logs say: the due path's and the scheduled passes'
/// summaries summed, and the submits that finished an interrupted one.
struct Logged {
    finished_by_due: u64,
    due_errors: u64,
    due_past_deadline: u64,
    finished_by_passes: u64,
    passes_busy: u64,
    payloads_deleted: u64,
    markers_deleted: u64,
    recovered_by_submits: u64,
}

impl Logged {
    fn of(submit_logs: &[PathBuf], sweep_logs: &[PathBuf]) -> Logged {
        let due = |field| sum_logged_from(sweep_logs, SUMMARY, Some("due batch"), field);
        let passes = |field| sum_logged_from(sweep_logs, SUMMARY, Some("scheduled pass"), field);
        Logged {
            finished_by_due: due("finished"),
            due_errors: due("errors"),
            due_past_deadline: due("past_deadline"),
            finished_by_passes: passes("finished"),
            passes_busy: passes("busy"),
            payloads_deleted: passes("payloads_deleted"),
            markers_deleted: passes("markers_deleted"),
            recovered_by_submits: sum_logged(submit_logs, "submitted", "recovered")
                + sum_logged(submit_logs, "batch item submitted", "recovered"),
        }
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
