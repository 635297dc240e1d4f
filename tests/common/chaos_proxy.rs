//! A fault-injecting HTTP proxy between the AWS SDK and moto, on loopback.
//! On a share of requests it answers 503 SlowDown or 500 without forwarding,
//! forwards and then answers 500 or drops the connection (the write landed,
//! its answer is lost), resets the connection before forwarding, holds the
//! request past the client's timeout, or, for conditional writes, answers
//! 409 ConditionalRequestConflict (which no emulator sends by itself).
//!
//! Each connection draws its faults from its own generator, seeded by the
//! proxy's seed and the connection's number, so a connection's faults replay
//! from the seed. Every fault is counted by kind, and lost answers by the
//! condition of the write they hit.
//!
//! Two more things a world of processes needs, both off unless asked for:
//! latency spikes (a share of requests held a random while before they are
//! handled, faulted or not: [`ChaosProxy::set_spikes`]), and a hook told of
//! every request that reached the upstream, before its answer goes back
//! ([`ChaosProxy::on_landed`]: the chaos world kills a function there, so
//! that it dies with its write landed and unanswered).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

#[derive(Debug, Default)]
pub struct Counts {
    pub forwarded: AtomicU64,
    pub faults: AtomicU64,
    /// Faults by kind, in the order of [`KINDS`].
    pub by_kind: [AtomicU64; 7],
    /// Writes that landed and lost their answer, with If-None-Match.
    pub lost_create: AtomicU64,
    /// Writes that landed and lost their answer, with If-Match.
    pub lost_update: AtomicU64,
    /// The request line (`GET /bucket/key HTTP/1.1`) of every request
    /// forwarded, in order: what a client behind the proxy asked of S3.
    pub requests: Mutex<Vec<String>>,
    /// Requests held by a latency spike, and for how long in all (ms).
    pub spikes: AtomicU64,
    pub spike_ms: AtomicU64,
}

/// A request that reached the upstream, as [`ChaosProxy::on_landed`]'s hook
/// sees it before its answer goes back (or is lost).
#[derive(Debug)]
pub struct Landing<'a> {
    /// `PUT /bucket/key HTTP/1.1`.
    pub line: &'a str,
    pub if_none_match: bool,
    /// `If-Match` (a compare-and-swap).
    pub if_match: bool,
    /// The upstream's status, 0 if it sent none.
    pub status: u16,
}

/// The hook of [`ChaosProxy::on_landed`].
pub type LandedHook = Arc<dyn Fn(&Landing<'_>) + Send + Sync>;

/// Latency spikes: per mille of requests, and the longest hold (ms).
#[derive(Debug, Default)]
struct Spikes {
    per_mille: AtomicU64,
    max_ms: AtomicU64,
}

/// The kinds of fault, as [`Counts::by_kind`] counts them.
pub const KINDS: [&str; 7] = [
    "503 SlowDown",
    "500 InternalError",
    "landed, then 500",
    "landed, then reset",
    "reset before forwarding",
    "held past the client's timeout",
    "409 ConditionalRequestConflict",
];

impl Counts {
    pub fn kind(&self, i: usize) -> u64 {
        self.by_kind[i].load(Ordering::SeqCst)
    }
}

pub struct ChaosProxy {
    pub endpoint: String,
    pub counts: Arc<Counts>,
    per_mille: Arc<AtomicU64>,
    lose_updates: Arc<AtomicU64>,
    spikes: Arc<Spikes>,
    landed: Arc<Mutex<Option<LandedHook>>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chaos {
    SlowDown,
    InternalError,
    LandedThen500,
    LandedThenReset,
    ResetBefore,
    Hold,
    Conflict409,
}

/// Every kind, in the order of [`KINDS`].
const ALL: [Chaos; 7] = [
    Chaos::SlowDown,
    Chaos::InternalError,
    Chaos::LandedThen500,
    Chaos::LandedThenReset,
    Chaos::ResetBefore,
    Chaos::Hold,
    Chaos::Conflict409,
];

struct Request {
    head: String,
    body: Vec<u8>,
    conditional: bool,
    if_none_match: bool,
}

async fn read_request<R: AsyncBufReadExt + Unpin>(r: &mut R) -> Option<Request> {
    let mut head = String::new();
    let mut len = 0usize;
    let mut conditional = false;
    let mut if_none_match = false;
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).await.ok()? == 0 {
            return None;
        }
        let lower = line.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("content-length:") {
            len = v.trim().parse().ok()?;
        }
        if lower.starts_with("if-none-match:") || lower.starts_with("if-match:") {
            conditional = true;
        }
        if_none_match |= lower.starts_with("if-none-match:");
        let end = line == "\r\n";
        head.push_str(&line);
        if end {
            break;
        }
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).await.ok()?;
    Some(Request {
        head,
        body,
        conditional,
        if_none_match,
    })
}

/// Sends one request to the upstream on a fresh connection and returns the
/// whole response, re-framed with a Content-Length.
async fn forward(upstream: &str, req: &Request) -> Option<Vec<u8>> {
    let mut s = TcpStream::connect(upstream).await.ok()?;
    let head: String = req
        .head
        .lines()
        .filter(|l| !l.to_ascii_lowercase().starts_with("connection:") && !l.is_empty())
        .map(|l| format!("{l}\r\n"))
        .collect();
    s.write_all(format!("{head}connection: close\r\n\r\n").as_bytes())
        .await
        .ok()?;
    s.write_all(&req.body).await.ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await.ok()?;
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let mut body = raw[split..].to_vec();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body = dechunk(&body)?;
    }
    let mut out = String::new();
    for line in head.lines().filter(|l| !l.is_empty()) {
        let l = line.to_ascii_lowercase();
        if l.starts_with("content-length:")
            || l.starts_with("transfer-encoding:")
            || l.starts_with("connection:")
        {
            continue;
        }
        out.push_str(line);
        out.push_str("\r\n");
    }
    out.push_str(&format!("content-length: {}\r\n\r\n", body.len()));
    let mut resp = out.into_bytes();
    resp.extend_from_slice(&body);
    Some(resp)
}

fn dechunk(mut b: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let nl = b.windows(2).position(|w| w == b"\r\n")?;
        let size = usize::from_str_radix(
            std::str::from_utf8(&b[..nl])
                .ok()?
                .split(';')
                .next()?
                .trim(),
            16,
        )
        .ok()?;
        b = &b[nl + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(b.get(..size)?);
        b = b.get(size + 2..)?;
    }
}

fn error_response(status: u16, code: &str) -> Vec<u8> {
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>{code}</Code><Message>injected by the chaos proxy</Message></Error>"
    );
    let reason = match status {
        409 => "Conflict",
        500 => "Internal Server Error",
        _ => "Service Unavailable",
    };
    format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/xml\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// What every connection of a proxy shares: where it forwards, what it
/// counts, and the knobs its owner turns.
#[derive(Clone)]
struct Link {
    upstream: String,
    counts: Arc<Counts>,
    rate: Arc<AtomicU64>,
    lose: Arc<AtomicU64>,
    spikes: Arc<Spikes>,
    landed: Arc<Mutex<Option<LandedHook>>>,
}

impl Link {
    /// One connection's requests, each answered in turn until a fault
    /// drops the connection.
    async fn serve(self, sock: TcpStream, rng: Mutex<fastrand::Rng>) {
        let (rd, mut wr) = sock.into_split();
        let mut rd = BufReader::new(rd);
        while let Some(req) = read_request(&mut rd).await {
            self.spike(&rng).await;
            let chaos = self.draw(&rng, &req);
            if let Some(kind) = chaos {
                self.count(kind, &req);
            }
            match self.reply(chaos, &req).await {
                Some(bytes) => {
                    if wr.write_all(&bytes).await.is_err() {
                        return;
                    }
                }
                None => return, // drops the connection
            }
        }
    }

    /// A latency spike, drawn at the spikes' rate.
    async fn spike(&self, rng: &Mutex<fastrand::Rng>) {
        let hold = {
            let mut g = rng.lock().unwrap();
            let max = self.spikes.max_ms.load(Ordering::SeqCst).max(1);
            (g.u64(0..1000) < self.spikes.per_mille.load(Ordering::SeqCst))
                .then(|| g.u64(max / 4..=max))
        };
        if let Some(ms) = hold {
            self.counts.spikes.fetch_add(1, Ordering::SeqCst);
            self.counts.spike_ms.fetch_add(ms, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
    }

    /// The fault for `req`, if any: drawn at the rate (a 409 only for a
    /// conditional request, a 503 instead), or the next update whose answer
    /// is to be lost.
    fn draw(&self, rng: &Mutex<fastrand::Rng>, req: &Request) -> Option<Chaos> {
        let chaos = {
            let mut g = rng.lock().unwrap();
            (g.u64(0..1000) < self.rate.load(Ordering::SeqCst)).then(|| ALL[g.usize(..ALL.len())])
        };
        let chaos = match chaos {
            Some(Chaos::Conflict409) if !req.conditional => Some(Chaos::SlowDown),
            c => c,
        };
        let update = req.conditional && !req.if_none_match;
        let lose = || {
            self.lose
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
        };
        if update && lose() {
            Some(Chaos::LandedThenReset)
        } else {
            chaos
        }
    }

    /// Counts a fault, and a conditional write whose answer it loses.
    fn count(&self, kind: Chaos, req: &Request) {
        let counts = &self.counts;
        counts.faults.fetch_add(1, Ordering::SeqCst);
        let i = ALL.iter().position(|k| *k == kind).unwrap_or(0);
        counts.by_kind[i].fetch_add(1, Ordering::SeqCst);
        if matches!(kind, Chaos::LandedThen500 | Chaos::LandedThenReset) && req.conditional {
            if req.if_none_match {
                counts.lost_create.fetch_add(1, Ordering::SeqCst);
            } else {
                counts.lost_update.fetch_add(1, Ordering::SeqCst);
            }
        }
    }

    /// The answer to `req` under `chaos`: forwarded, or a fault's; `None`
    /// drops the connection.
    async fn reply(&self, chaos: Option<Chaos>, req: &Request) -> Option<Vec<u8>> {
        match chaos {
            None => {
                self.counts.forwarded.fetch_add(1, Ordering::SeqCst);
                let line = req.head.lines().next().unwrap_or("").to_owned();
                self.counts.requests.lock().unwrap().push(line);
                let resp = forward(&self.upstream, req).await;
                self.land(req, &resp);
                resp
            }
            Some(Chaos::SlowDown) => Some(error_response(503, "SlowDown")),
            Some(Chaos::InternalError) => Some(error_response(500, "InternalError")),
            Some(Chaos::Conflict409) => Some(error_response(409, "ConditionalRequestConflict")),
            Some(Chaos::LandedThen500) => {
                self.land(req, &forward(&self.upstream, req).await);
                Some(error_response(500, "InternalError"))
            }
            Some(Chaos::LandedThenReset) => {
                self.land(req, &forward(&self.upstream, req).await);
                None
            }
            Some(Chaos::ResetBefore) => None,
            Some(Chaos::Hold) => {
                // Longer than the client's attempt timeout; it gives up and
                // retries on another connection.
                tokio::time::sleep(Duration::from_secs(3)).await;
                None
            }
        }
    }

    /// Tells the landing hook, if one is set, of a request that reached the
    /// upstream and the status it answered.
    fn land(&self, req: &Request, resp: &Option<Vec<u8>>) {
        let hook = self.landed.lock().unwrap().clone();
        if let Some(hook) = hook {
            let status = resp
                .as_deref()
                .and_then(|r| r.get(9..12))
                .and_then(|s| std::str::from_utf8(s).ok())
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            hook(&Landing {
                line: req.head.lines().next().unwrap_or(""),
                if_none_match: req.if_none_match,
                if_match: req.conditional && !req.if_none_match,
                status,
            });
        }
    }
}

impl ChaosProxy {
    pub async fn start(upstream: &str, per_mille: u64, seed: u64) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let link = Link {
            upstream: upstream.trim_start_matches("http://").to_owned(),
            counts: Arc::new(Counts::default()),
            rate: Arc::new(AtomicU64::new(per_mille)),
            lose: Arc::new(AtomicU64::new(0)),
            spikes: Arc::new(Spikes::default()),
            landed: Arc::new(Mutex::new(None)),
        };
        let proxy = ChaosProxy {
            endpoint,
            counts: link.counts.clone(),
            per_mille: link.rate.clone(),
            lose_updates: link.lose.clone(),
            spikes: link.spikes.clone(),
            landed: link.landed.clone(),
        };
        tokio::spawn(async move {
            let mut connection: u64 = 0;
            while let Ok((sock, _)) = listener.accept().await {
                connection += 1;
                // Each connection's own draws, from the seed and its number.
                let rng = Mutex::new(fastrand::Rng::with_seed(
                    seed ^ connection.wrapping_mul(0x9e37_79b9_7f4a_7c15),
                ));
                tokio::spawn(link.clone().serve(sock, rng));
            }
        });
        proxy
    }

    /// Holds `per_mille` of requests from now on for a random while, a
    /// quarter of `max_ms` to all of it, before they are handled (forwarded
    /// or faulted); 0 stops it.
    pub fn set_spikes(&self, per_mille: u64, max_ms: u64) {
        self.spikes.max_ms.store(max_ms, Ordering::SeqCst);
        self.spikes.per_mille.store(per_mille, Ordering::SeqCst);
    }

    /// Calls `hook` for every request that reached the upstream (forwarded,
    /// or landed before a lost answer), before its answer is sent back.
    pub fn on_landed(&self, hook: LandedHook) {
        *self.landed.lock().unwrap() = Some(hook);
    }

    /// Stops injecting faults and latency spikes.
    pub fn heal(&self) {
        self.set_rate(0);
        self.set_spikes(0, 0);
    }

    /// The next `n` If-Match writes land, then lose their answer (the
    /// connection is dropped), whatever the rate.
    pub fn lose_update_answers(&self, n: u64) {
        self.lose_updates.store(n, Ordering::SeqCst);
    }

    /// Injects faults on `per_mille` of requests from now on.
    pub fn set_rate(&self, per_mille: u64) {
        self.per_mille.store(per_mille, Ordering::SeqCst);
    }
}
