//! Many processes of one built function, each in an execution environment of
//! its own: a Lambda runtime API stand-in per environment (the one the
//! process polls) and a fault proxy between the process and S3. An event
//! goes to a free environment, as Lambda routes an invocation, and its
//! answer comes back to its caller.
//!
//! Any environment can be killed (SIGKILL) at any moment: idle, starting,
//! or in the middle of an invocation, at random or from the proxy's hook the
//! instant one of its S3 requests landed. Its invocation is then the
//! caller's failure ([`Outcome::Killed`]), and a new process starts in its
//! place, as Lambda starts a new environment. An invocation that outlives
//! its deadline is killed the same way ([`Outcome::TimedOut`]).
//!
//! runtime_api.rs is the stand-in for one process and one caller; this one
//! is for a world of them.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};

use super::chaos_proxy::{ChaosProxy, Landing};
use super::runtime_api::{self, Side};

/// What became of one invocation.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// The function's answer.
    Response(Value),
    /// The function's invocation error (its `/error` post).
    Error(Value),
    /// The environment was killed before it answered; why.
    Killed(String),
    /// No answer within the deadline: the environment was killed.
    TimedOut,
}

/// One kill: which function, and at what moment.
#[derive(Debug, Clone)]
pub struct Kill {
    pub function: String,
    pub moment: String,
}

/// One process's peak resident set (VmHWM), in KiB.
#[derive(Debug, Clone)]
pub struct Rss {
    pub function: String,
    pub env: usize,
    pub generation: u64,
    pub peak_kib: u64,
}

/// Decides, for each S3 request of an invocation that reached S3, whether
/// the environment dies there: the moment's name, or `None`. Told the
/// request and how many of the invocation's requests landed before it.
pub type KillRule = Arc<dyn Fn(&Landing<'_>, u64) -> Option<String> + Send + Sync>;

pub struct PoolConfig {
    /// The function's name (`submit`, `sweep`): logs, kills and RSS name it.
    pub function: String,
    pub bin: PathBuf,
    pub size: usize,
    /// The function's environment (its configuration), on top of what
    /// Lambda sets; `AWS_ENDPOINT_URL_S3` is set to the environment's proxy.
    pub env: Vec<(String, String)>,
    /// S3 behind the proxies.
    pub s3: String,
    /// Fault proxies' seed (each environment's is derived from it), rate of
    /// faults (per mille) and latency spikes (per mille, longest in ms).
    pub seed: u64,
    pub fault_per_mille: u64,
    pub spikes: (u64, u64),
    /// An invocation's deadline.
    pub timeout: Duration,
    /// Where each process's output goes, one file per process.
    pub log_dir: PathBuf,
}

struct Inflight {
    request_id: String,
    reply: oneshot::Sender<Outcome>,
    /// The invocation's S3 requests that landed so far.
    landed: u64,
}

struct EnvState {
    generation: u64,
    child: Option<tokio::process::Child>,
    pid: Option<u32>,
    peak_kib: u64,
    /// The current process's events; replaced (and the old one dropped, so
    /// its waiting poll ends) when the process is replaced.
    events: mpsc::UnboundedSender<(String, Value)>,
    inbox: Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<(String, Value)>>>,
    /// The current process has asked for its first invocation.
    polled: bool,
    inflight: Option<Inflight>,
}

struct Env {
    index: usize,
    addr: String,
    proxy: ChaosProxy,
    state: Mutex<EnvState>,
}

pub struct Pool {
    cfg: PoolConfig,
    envs: Vec<Arc<Env>>,
    free_tx: mpsc::UnboundedSender<usize>,
    free_rx: tokio::sync::Mutex<mpsc::UnboundedReceiver<usize>>,
    rule: Mutex<Option<KillRule>>,
    kills: Mutex<Vec<Kill>>,
    rss: Mutex<Vec<Rss>>,
    /// Processes that ended by themselves (not killed): should be none.
    pub exits: AtomicU64,
    pub init_errors: AtomicU64,
    pub invocations: AtomicU64,
    pub starts: AtomicU64,
    stopped: std::sync::atomic::AtomicBool,
}

fn vm_hwm_kib(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

impl Pool {
    pub async fn start(cfg: PoolConfig) -> Arc<Pool> {
        std::fs::create_dir_all(&cfg.log_dir).expect("the log directory");
        let (free_tx, free_rx) = mpsc::unbounded_channel();
        let mut envs = Vec::with_capacity(cfg.size);
        let mut listeners = Vec::with_capacity(cfg.size);
        for index in 0..cfg.size {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap().to_string();
            let seed = cfg.seed ^ ((index as u64 + 1).wrapping_mul(0x2545_f491_4f6c_dd1d));
            let proxy = ChaosProxy::start(&cfg.s3, cfg.fault_per_mille, seed).await;
            proxy.set_spikes(cfg.spikes.0, cfg.spikes.1);
            let (events, inbox) = mpsc::unbounded_channel();
            envs.push(Arc::new(Env {
                index,
                addr,
                proxy,
                state: Mutex::new(EnvState {
                    generation: 0,
                    child: None,
                    pid: None,
                    peak_kib: 0,
                    events,
                    inbox: Arc::new(tokio::sync::Mutex::new(inbox)),
                    polled: false,
                    inflight: None,
                }),
            }));
            listeners.push(listener);
        }
        let pool = Arc::new(Pool {
            cfg,
            envs,
            free_tx,
            free_rx: tokio::sync::Mutex::new(free_rx),
            rule: Mutex::new(None),
            kills: Mutex::new(Vec::new()),
            rss: Mutex::new(Vec::new()),
            exits: AtomicU64::new(0),
            init_errors: AtomicU64::new(0),
            invocations: AtomicU64::new(0),
            starts: AtomicU64::new(0),
            stopped: Default::default(),
        });
        for (env, listener) in pool.envs.iter().zip(listeners) {
            let (p, e) = (pool.clone(), env.clone());
            tokio::spawn(runtime_api::serve(listener, Arc::new(EnvSide(p, e))));
            let (p, e) = (Arc::downgrade(&pool), env.clone());
            env.proxy.on_landed(Arc::new(move |l: &Landing<'_>| {
                if let Some(p) = p.upgrade() {
                    p.landed(&e, l);
                }
            }));
            pool.spawn_process(env);
            pool.free_tx.send(env.index).unwrap();
        }
        // Peak RSS, and processes that ended by themselves.
        let p = Arc::downgrade(&pool);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(250)).await;
                let Some(p) = p.upgrade() else { return };
                if p.stopped.load(Ordering::SeqCst) {
                    return;
                }
                for env in &p.envs {
                    p.watch(env);
                }
            }
        });
        pool
    }

    /// Sets the rule that kills an environment when one of its invocation's
    /// S3 requests lands.
    pub fn kill_when(&self, rule: KillRule) {
        *self.rule.lock().unwrap() = Some(rule);
    }

    pub fn function(&self) -> &str {
        &self.cfg.function
    }

    pub fn size(&self) -> usize {
        self.envs.len()
    }

    pub fn proxies(&self) -> impl Iterator<Item = &ChaosProxy> {
        self.envs.iter().map(|e| &e.proxy)
    }

    pub fn kills(&self) -> Vec<Kill> {
        self.kills.lock().unwrap().clone()
    }

    /// Every process's peak RSS so far (the live ones' as of now).
    pub fn rss(&self) -> Vec<Rss> {
        let mut out = self.rss.lock().unwrap().clone();
        for env in &self.envs {
            self.watch(env);
            let st = env.state.lock().unwrap();
            if st.pid.is_some() {
                out.push(Rss {
                    function: self.cfg.function.clone(),
                    env: env.index,
                    generation: st.generation,
                    peak_kib: st.peak_kib,
                });
            }
        }
        out
    }

    /// The environments with an invocation in flight.
    pub fn busy(&self) -> Vec<usize> {
        self.envs
            .iter()
            .filter(|e| e.state.lock().unwrap().inflight.is_some())
            .map(|e| e.index)
            .collect()
    }

    /// Invokes the function with `event` in the first free environment
    /// (waiting for one), and waits for what becomes of it.
    pub async fn invoke(&self, event: Value) -> Outcome {
        let index = {
            let mut free = self.free_rx.lock().await;
            free.recv().await.expect("the pool is running")
        };
        let env = &self.envs[index];
        let (tx, rx) = oneshot::channel();
        let request_id = uuid::Uuid::new_v4().to_string();
        {
            let mut st = env.state.lock().unwrap();
            st.inflight = Some(Inflight {
                request_id: request_id.clone(),
                reply: tx,
                landed: 0,
            });
            // The current process's queue: a process replaced in between
            // would have replaced it too.
            let _ = st.events.send((request_id.clone(), event));
        }
        self.invocations.fetch_add(1, Ordering::SeqCst);
        match tokio::time::timeout(self.cfg.timeout + Duration::from_secs(5), rx).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(_)) => Outcome::Killed("the pool stopped".into()),
            Err(_) => {
                self.kill_if(index, Some(&request_id), "timed out");
                Outcome::TimedOut
            }
        }
    }

    /// Kills environment `index` now, whatever it is doing; the moment is
    /// named by what it was doing. False if the pool has stopped.
    pub fn kill(&self, index: usize) -> bool {
        self.kill_if(index, None, "")
    }

    /// Kills `index` (only while it runs `only`, if given) and starts a
    /// new process in its place.
    fn kill_if(&self, index: usize, only: Option<&str>, why: &str) -> bool {
        if self.stopped.load(Ordering::SeqCst) {
            return false;
        }
        let env = &self.envs[index];
        let mut st = env.state.lock().unwrap();
        if let Some(id) = only
            && st.inflight.as_ref().map(|i| i.request_id.as_str()) != Some(id)
        {
            return false;
        }
        let moment = match (&st.inflight, st.polled, why) {
            (_, _, w) if !w.is_empty() => w.to_owned(),
            (Some(i), _, _) => format!(
                "mid-invocation, {} of its S3 requests landed",
                match i.landed {
                    0 => "none".to_owned(),
                    n if n >= 3 => "3 or more".to_owned(),
                    n => n.to_string(),
                }
            ),
            (None, false, _) => "starting (before its first poll)".to_owned(),
            (None, true, _) => "idle (between invocations)".to_owned(),
        };
        self.replace(env, &mut st, Outcome::Killed(moment.clone()));
        drop(st);
        self.kills.lock().unwrap().push(Kill {
            function: self.cfg.function.clone(),
            moment,
        });
        true
    }

    /// SIGKILLs the environment's process, answers its invocation with
    /// `outcome`, and starts a new process.
    fn replace(&self, env: &Arc<Env>, st: &mut EnvState, outcome: Outcome) {
        if let Some(pid) = st.pid
            && let Some(k) = vm_hwm_kib(pid)
        {
            st.peak_kib = st.peak_kib.max(k);
        }
        if let Some(mut child) = st.child.take() {
            let _ = child.start_kill();
            tokio::spawn(async move {
                let _ = child.wait().await;
            });
        }
        self.rss.lock().unwrap().push(Rss {
            function: self.cfg.function.clone(),
            env: env.index,
            generation: st.generation,
            peak_kib: st.peak_kib,
        });
        let was_busy = st.inflight.is_some();
        if let Some(i) = st.inflight.take() {
            let _ = i.reply.send(outcome);
        }
        let (events, inbox) = mpsc::unbounded_channel();
        st.events = events;
        st.inbox = Arc::new(tokio::sync::Mutex::new(inbox));
        st.generation += 1;
        st.polled = false;
        st.peak_kib = 0;
        st.pid = None;
        if !self.stopped.load(Ordering::SeqCst) {
            self.spawn_locked(env, st);
        }
        if was_busy {
            let _ = self.free_tx.send(env.index);
        }
    }

    fn spawn_process(&self, env: &Arc<Env>) {
        let mut st = env.state.lock().unwrap();
        self.spawn_locked(env, &mut st);
    }

    fn spawn_locked(&self, env: &Arc<Env>, st: &mut EnvState) {
        let log = self.cfg.log_dir.join(format!(
            "{}-{}-{}.log",
            self.cfg.function, env.index, st.generation
        ));
        let out = std::fs::File::create(&log).expect("a process log");
        let err = out.try_clone().expect("a process log");
        let mut cmd = tokio::process::Command::new(&self.cfg.bin);
        cmd.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("AWS_LAMBDA_RUNTIME_API", &env.addr)
            .env("AWS_LAMBDA_FUNCTION_NAME", &self.cfg.function)
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256")
            .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
            .env("AWS_LAMBDA_LOG_STREAM_NAME", format!("env-{}", env.index))
            .env("AWS_LAMBDA_LOG_GROUP_NAME", "chaos")
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env("AWS_REGION", "us-east-1")
            .env("S3_FORCE_PATH_STYLE", "true")
            .envs(self.cfg.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("AWS_ENDPOINT_URL_S3", &env.proxy.endpoint)
            .stdin(std::process::Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true);
        let child = cmd.spawn().expect("starting the function");
        st.pid = child.id();
        st.child = Some(child);
        self.starts.fetch_add(1, Ordering::SeqCst);
    }

    /// Samples the process's peak RSS; a process that ended by itself is
    /// counted and replaced.
    fn watch(&self, env: &Arc<Env>) {
        let mut st = env.state.lock().unwrap();
        if let Some(pid) = st.pid
            && let Some(k) = vm_hwm_kib(pid)
        {
            st.peak_kib = st.peak_kib.max(k);
        }
        let ended = st
            .child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(Some(_))));
        if ended && !self.stopped.load(Ordering::SeqCst) {
            self.exits.fetch_add(1, Ordering::SeqCst);
            self.replace(env, &mut st, Outcome::Killed("ended by itself".into()));
        }
    }

    /// The proxy's hook: one of the environment's S3 requests landed.
    fn landed(&self, env: &Arc<Env>, l: &Landing<'_>) {
        let (id, before) = {
            let mut st = env.state.lock().unwrap();
            let Some(i) = st.inflight.as_mut() else {
                return;
            };
            i.landed += 1;
            (i.request_id.clone(), i.landed - 1)
        };
        let rule = self.rule.lock().unwrap().clone();
        if let Some(moment) = rule.and_then(|r| r(l, before)) {
            self.kill_if(env.index, Some(&id), &moment);
        }
    }

    /// Kills every process; the pool answers nothing more.
    pub async fn stop(&self) {
        for env in &self.envs {
            self.watch(env);
        }
        self.stopped.store(true, Ordering::SeqCst);
        for env in &self.envs {
            let child = {
                let mut st = env.state.lock().unwrap();
                if let Some(pid) = st.pid
                    && let Some(k) = vm_hwm_kib(pid)
                {
                    st.peak_kib = st.peak_kib.max(k);
                }
                self.rss.lock().unwrap().push(Rss {
                    function: self.cfg.function.clone(),
                    env: env.index,
                    generation: st.generation,
                    peak_kib: st.peak_kib,
                });
                st.pid = None;
                if let Some(i) = st.inflight.take() {
                    let _ = i.reply.send(Outcome::Killed("the pool stopped".into()));
                }
                st.child.take()
            };
            if let Some(mut c) = child {
                let _ = c.start_kill();
                let _ = c.wait().await;
            }
        }
    }

    /// The log files of every process this pool started.
    pub fn logs(&self) -> Vec<PathBuf> {
        let prefix = format!("{}-", self.cfg.function);
        let mut out: Vec<PathBuf> = std::fs::read_dir(&self.cfg.log_dir)
            .map(|d| {
                d.filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| {
                        p.file_name()
                            .and_then(|n| n.to_str())
                            .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".log"))
                    })
                    .collect()
            })
            .unwrap_or_default();
        out.sort();
        out
    }

    /// A response, an invocation error or an init error, posted.
    fn posted(&self, env: &Arc<Env>, path: &str, body: &[u8]) {
        if path.ends_with("/init/error") {
            self.init_errors.fetch_add(1, Ordering::SeqCst);
            return;
        }
        let segs: Vec<&str> = path.split('/').collect();
        let (id, kind) = (
            segs.get(segs.len().wrapping_sub(2)).copied().unwrap_or(""),
            segs.last().copied().unwrap_or(""),
        );
        let body: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        let mut st = env.state.lock().unwrap();
        if st.inflight.as_ref().map(|i| i.request_id.as_str()) != Some(id) {
            return;
        }
        let i = st.inflight.take().expect("checked above");
        let outcome = if kind == "response" {
            Outcome::Response(body)
        } else {
            Outcome::Error(body)
        };
        let _ = i.reply.send(outcome);
        drop(st);
        let _ = self.free_tx.send(env.index);
    }
}

/// The runtime API of one environment: its process polls for events
/// and posts their answers here.
struct EnvSide(Arc<Pool>, Arc<Env>);

impl Side for EnvSide {
    fn next(&self) -> runtime_api::Next<'_> {
        let inbox = {
            let mut st = self.1.state.lock().unwrap();
            st.polled = true;
            st.inbox.clone()
        };
        // Ends (None) when this process is replaced.
        Box::pin(async move { inbox.lock().await.recv().await })
    }

    fn posted(&self, path: &str, body: &[u8]) {
        self.0.posted(&self.1, path, body);
    }

    fn function(&self) -> (&str, Duration) {
        (&self.0.cfg.function, self.0.cfg.timeout)
    }
}

/// How many of each kill moment, by function.
pub fn kills_by_moment(kills: &[Kill]) -> Vec<((String, String), usize)> {
    let mut m: HashMap<(String, String), usize> = HashMap::new();
    for k in kills {
        *m.entry((k.function.clone(), k.moment.clone())).or_default() += 1;
    }
    let mut v: Vec<_> = m.into_iter().collect();
    v.sort();
    v
}
