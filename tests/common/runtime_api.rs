//! A stand-in for the Lambda runtime API (the HTTP interface a function's
//! runtime polls), enough to run the real `submit` and `sweep` binaries:
//! `GET /2018-06-01/runtime/invocation/next` hands out queued events, and
//! responses and errors are collected.
//!
//! scripts/api_front.py is the other stand-in: a process of its own that
//! fronts the function with HTTP as API Gateway does (for Schemathesis and
//! `make deploy-check`), where this one lives in the test's process and
//! hands it what the function posted.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio::sync::{Mutex, mpsc};

/// What the function posted back for one invocation.
#[derive(Debug, Clone)]
pub struct Posted {
    pub request_id: String,
    /// `response`, `error`, or `init-error`.
    pub kind: String,
    pub body: Value,
}

pub struct RuntimeApi {
    pub addr: String,
    events: mpsc::UnboundedSender<(String, Value)>,
    posted: mpsc::UnboundedReceiver<Posted>,
    first_poll: Arc<std::sync::Mutex<Option<std::time::Instant>>>,
}

impl RuntimeApi {
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (etx, erx) = mpsc::unbounded_channel::<(String, Value)>();
        let (ptx, prx) = mpsc::unbounded_channel::<Posted>();
        let first_poll = Arc::new(std::sync::Mutex::new(None));
        let side = OneProcess {
            events: Mutex::new(erx),
            posted: ptx,
            first_poll: first_poll.clone(),
        };
        tokio::spawn(serve(listener, Arc::new(side)));
        RuntimeApi {
            addr,
            events: etx,
            posted: prx,
            first_poll,
        }
    }

    /// When the function first asked for an invocation (its cold start ends
    /// there), waiting for it up to 10 s.
    pub async fn first_poll(&self) -> Option<std::time::Instant> {
        for _ in 0..10_000 {
            if let Some(t) = *self.first_poll.lock().unwrap() {
                return Some(t);
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        None
    }

    /// Queues an event; returns its request id.
    pub fn invoke(&self, event: Value) -> String {
        let id = uuid::Uuid::new_v4().to_string();
        self.events.send((id.clone(), event)).unwrap();
        id
    }

    /// The next thing the function posted.
    pub async fn next_posted(&mut self) -> Posted {
        tokio::time::timeout(Duration::from_secs(60), self.posted.recv())
            .await
            .expect("the function answered within 60 s")
            .expect("the runtime API is running")
    }
}

/// The one process of a [`RuntimeApi`]: the events queued for it, what it
/// posted, and when it first asked for an invocation.
struct OneProcess {
    events: Mutex<mpsc::UnboundedReceiver<(String, Value)>>,
    posted: mpsc::UnboundedSender<Posted>,
    first_poll: Arc<std::sync::Mutex<Option<std::time::Instant>>>,
}

impl Side for OneProcess {
    fn next(&self) -> Next<'_> {
        self.first_poll
            .lock()
            .unwrap()
            .get_or_insert_with(std::time::Instant::now);
        Box::pin(async move { self.events.lock().await.recv().await })
    }

    fn posted(&self, path: &str, body: &[u8]) {
        let segs: Vec<&str> = path.split('/').collect();
        let (request_id, kind) = if path.ends_with("/init/error") {
            (String::new(), "init-error".to_owned())
        } else {
            (
                segs.get(segs.len().wrapping_sub(2))
                    .unwrap_or(&"")
                    .to_string(),
                segs.last().unwrap_or(&"").to_string(),
            )
        };
        let body = serde_json::from_slice(body).unwrap_or(Value::Null);
        let _ = self.posted.send(Posted {
            request_id,
            kind,
            body,
        });
    }

    fn function(&self) -> (&str, Duration) {
        ("test", Duration::from_secs(60))
    }
}

/// The next invocation, `(request id, event)`, once there is one.
pub type Next<'a> = Pin<Box<dyn Future<Output = Option<(String, Value)>> + Send + 'a>>;

/// One function process's side of a runtime API stand-in: where its
/// invocations come from and where its answers go ([`serve`] speaks the
/// HTTP).
pub trait Side: Send + Sync + 'static {
    /// The next invocation, `(request id, event)`, once there is one;
    /// `None` ends the connection (the process is gone).
    fn next(&self) -> Next<'_>;
    /// A response, an invocation error or an init error, posted at `path`.
    fn posted(&self, path: &str, body: &[u8]);
    /// The function's name, and how long an invocation may run.
    fn function(&self) -> (&str, Duration);
}

/// The runtime API on `listener`, for `side`: a task a connection, each
/// answering the process's requests in order until it hangs up.
pub async fn serve(listener: TcpListener, side: Arc<dyn Side>) {
    loop {
        let Ok((sock, _)) = listener.accept().await else {
            return;
        };
        let side = side.clone();
        tokio::spawn(async move {
            let (r, mut w) = sock.into_split();
            let mut r = BufReader::new(r);
            while let Some((method, path, body)) = read_http(&mut r).await {
                let reply = if method == "GET" && path.ends_with("/runtime/invocation/next") {
                    let Some((id, event)) = side.next().await else {
                        return;
                    };
                    let (function, timeout) = side.function();
                    let payload = event.to_string();
                    let deadline =
                        chrono::Utc::now().timestamp_millis() + timeout.as_millis() as i64;
                    format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nlambda-runtime-aws-request-id: {id}\r\n\
                         lambda-runtime-deadline-ms: {deadline}\r\n\
                         lambda-runtime-invoked-function-arn: arn:aws:lambda:us-east-1:123456789012:function:{function}\r\n\
                         lambda-runtime-trace-id: Root=1-00000000-000000000000000000000000\r\n\
                         content-length: {}\r\n\r\n{payload}",
                        payload.len()
                    )
                } else {
                    side.posted(&path, &body);
                    "HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n".to_owned()
                };
                if w.write_all(reply.as_bytes()).await.is_err() {
                    return;
                }
            }
        });
    }
}

/// One HTTP/1.1 request off a connection: its method, path and body
/// (by its Content-Length); `None` once the connection ends.
pub async fn read_http<R: AsyncBufReadExt + Unpin>(r: &mut R) -> Option<(String, String, Vec<u8>)> {
    let mut line = String::new();
    if r.read_line(&mut line).await.ok()? == 0 {
        return None;
    }
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next()?.to_owned(), parts.next()?.to_owned());
    let mut len = 0usize;
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).await.ok()? == 0 {
            return None;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':')
            && k.eq_ignore_ascii_case("content-length")
        {
            len = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).await.ok()?;
    Some((method, path, body))
}
