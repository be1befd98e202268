//! The crawler side: `--clients` tasks, each on one kept-alive HTTP/1.1 connection to courtesy's
//! proxy port (opened again whenever courtesy closes it, trying again while a restarting courtesy
//! refuses connections: nothing was sent yet), sending GETs and some POSTs to the
//! planned hosts until every request id is used. Every request ends in exactly one [`Outcome`]:
//! an answer from the origin (no `Proxy-Status`), an answer from courtesy (its `Proxy-Status`
//! error type), a transport failure, or nothing within [`OVERALL_TIMEOUT`] (hung). Nothing read
//! from the network is unwrapped: a failed read is a measurement.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{CONTENT_TYPE, HOST};
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

use crate::plan;

/// Longer than this for one request (connect, send, the whole answer) is a hung request.
pub const OVERALL_TIMEOUT: Duration = Duration::from_secs(120);

/// How one request ended, as its client saw it.
#[derive(Debug, Clone)]
pub enum Ended {
    /// The origin's answer (no `Proxy-Status`); for a 200, why its body is not the planned one.
    Origin {
        /// The status.
        status: u16,
        /// `Some(reason)` when a 200's body does not match its id and checksum.
        corrupt: Option<String>,
    },
    /// courtesy's own answer.
    Local {
        /// The status.
        status: u16,
        /// The `error=` of its `Proxy-Status`.
        error: String,
    },
    /// No answer: the connection failed (refused, reset, closed, body cut).
    Transport {
        /// What failed, in a few words.
        kind: String,
    },
    /// Nothing within [`OVERALL_TIMEOUT`].
    Hung,
}

/// One request and how it ended.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Its `x-soak-id`.
    pub id: u64,
    /// The host index it went to.
    pub host: usize,
    /// Whether it was a POST.
    pub post: bool,
    /// When the client started it.
    pub sent: Instant,
    /// When it ended.
    pub done: Instant,
    /// How.
    pub ended: Ended,
}

/// What the client tasks share: the next id to send, the count done, the outcomes.
pub struct Load {
    seed: u64,
    proxy: SocketAddr,
    hosts: Vec<SocketAddr>,
    total: u64,
    next: AtomicU64,
    /// No id above this is taken (the restart driver raises it after each restart, so that every
    /// restart happens with requests still to send, however fast courtesy answers).
    pub gate: AtomicU64,
    /// Requests ended so far.
    pub done: AtomicU64,
    /// Connection attempts refused (and tried again; nothing had been sent).
    pub refusals: AtomicU64,
    /// Set when the run must end early (its time bound): no new request starts.
    pub stop: AtomicBool,
    outcomes: Mutex<Vec<Outcome>>,
}

impl Load {
    /// `total` requests through `proxy` to `hosts`, as `seed` plans them.
    pub fn new(seed: u64, proxy: SocketAddr, hosts: Vec<SocketAddr>, total: u64) -> Arc<Load> {
        Arc::new(Load {
            seed,
            proxy,
            hosts,
            total,
            next: AtomicU64::new(1),
            gate: AtomicU64::new(total),
            done: AtomicU64::new(0),
            refusals: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            outcomes: Mutex::new(Vec::with_capacity(total as usize)),
        })
    }

    /// Every outcome so far.
    pub fn outcomes(&self) -> Vec<Outcome> {
        self.outcomes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// Runs one client until the ids run out (or the run is stopped).
pub async fn client(load: Arc<Load>) {
    let mut conn: Option<Conn> = None;
    loop {
        if load.stop.load(Ordering::Relaxed) {
            break;
        }
        // Wait (bounded) while the next id is above the gate: a restart is due first.
        for _ in 0..GATE_WAITS {
            let next = load.next.load(Ordering::Relaxed);
            if next <= load.gate.load(Ordering::Relaxed)
                || next > load.total
                || load.stop.load(Ordering::Relaxed)
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let id = load.next.fetch_add(1, Ordering::Relaxed);
        if id > load.total {
            break;
        }
        let host = plan::host_of(load.seed, id, load.hosts.len());
        let post = plan::is_post(load.seed, id);
        let sent = Instant::now();
        let ended = match tokio::time::timeout(
            OVERALL_TIMEOUT,
            one_request(&load, &mut conn, id, host, post),
        )
        .await
        {
            Ok(ended) => ended,
            Err(_) => {
                conn = None;
                Ended::Hung
            }
        };
        if matches!(ended, Ended::Transport { .. }) {
            conn = None;
        }
        // A polite crawler waits out courtesy's own 429 (its Retry-After, here at most
        // LOCAL_429_PAUSE) instead of spending its requests on refusals.
        let pause = match &ended {
            Ended::Local { status: 429, .. } => Some(LOCAL_429_PAUSE),
            _ => None,
        };
        let outcome = Outcome {
            id,
            host,
            post,
            sent,
            done: Instant::now(),
            ended,
        };
        load.outcomes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(outcome);
        load.done.fetch_add(1, Ordering::Relaxed);
        if let Some(pause) = pause {
            tokio::time::sleep(pause).await;
        }
    }
}

/// How long a client waits after courtesy's own 429 before its next request.
const LOCAL_429_PAUSE: Duration = Duration::from_millis(500);

/// Waits of 10 ms for the gate to open before a client goes on regardless (5 minutes).
const GATE_WAITS: u32 = 30_000;

/// A kept-alive connection to the proxy.
struct Conn {
    sender: SendRequest<Full<Bytes>>,
    task: JoinHandle<()>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Opens a connection to the proxy.
async fn connect(proxy: SocketAddr) -> Result<Conn, String> {
    let stream = TcpStream::connect(proxy)
        .await
        .map_err(|e| format!("connect: {}", io_kind(&e)))?;
    let _ = stream.set_nodelay(true);
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("handshake: {}", hyper_kind(&e)))?;
    let task = tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(Conn { sender, task })
}

/// A connection ready for a request: the kept one, or a new one when courtesy closed it (that is
/// no failure: nothing was sent on it).
async fn ready(
    proxy: SocketAddr,
    conn: &mut Option<Conn>,
    refusals: &AtomicU64,
) -> Result<(), String> {
    for _ in 0..2 {
        if let Some(c) = conn.as_mut() {
            if !c.sender.is_closed() && c.sender.ready().await.is_ok() {
                return Ok(());
            }
        }
        *conn = Some(connect_patiently(proxy, refusals).await?);
    }
    Err("connect: closed at once twice".into())
}

/// Connection attempts a client makes before a request fails (courtesy restarting: nothing was
/// sent, so a crawler would try to connect again), [`CONNECT_PAUSE`] apart.
const CONNECT_ATTEMPTS: u32 = 200;

/// The pause between two connection attempts.
const CONNECT_PAUSE: Duration = Duration::from_millis(50);

/// Connects, trying again while the port refuses (at most [`CONNECT_ATTEMPTS`] times); counts
/// each refusal in `refusals`.
async fn connect_patiently(proxy: SocketAddr, refusals: &AtomicU64) -> Result<Conn, String> {
    let mut last = String::new();
    for _ in 0..CONNECT_ATTEMPTS {
        match connect(proxy).await {
            Ok(c) => return Ok(c),
            Err(e) => {
                refusals.fetch_add(1, Ordering::Relaxed);
                last = e;
            }
        }
        tokio::time::sleep(CONNECT_PAUSE).await;
    }
    Err(format!("{last} ({CONNECT_ATTEMPTS} attempts)"))
}

/// Sends request `id` and reads its whole answer.
async fn one_request(
    load: &Load,
    conn: &mut Option<Conn>,
    id: u64,
    host: usize,
    post: bool,
) -> Ended {
    let addr = load.hosts[host];
    if let Err(kind) = ready(load.proxy, conn, &load.refusals).await {
        return Ended::Transport { kind };
    }
    let Some(c) = conn.as_mut() else {
        return Ended::Transport {
            kind: "no connection".into(),
        };
    };
    let builder = Request::builder()
        .uri(format!("http://{addr}/soak/{id}"))
        .header(HOST, addr.to_string())
        .header("x-soak-id", id.to_string());
    let request = if post {
        let body = plan::post_body(load.seed, id);
        builder
            .method(Method::POST)
            .header(CONTENT_TYPE, "application/octet-stream")
            .header("x-soak-sum", format!("{:x}", plan::checksum(&body)))
            .body(Full::new(Bytes::from(body)))
    } else {
        builder.method(Method::GET).body(Full::new(Bytes::new()))
    };
    let request = match request {
        Ok(r) => r,
        Err(e) => {
            return Ended::Transport {
                kind: format!("request not built: {e}"),
            }
        }
    };
    let response = match c.sender.send_request(request).await {
        Ok(r) => r,
        Err(e) => {
            return Ended::Transport {
                kind: hyper_kind(&e),
            }
        }
    };
    let status = response.status().as_u16();
    let proxy_status = response
        .headers()
        .get("proxy-status")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).to_string());
    let body = match response.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            return Ended::Transport {
                kind: format!("body cut: {}", hyper_kind(&e)),
            }
        }
    };
    match proxy_status {
        Some(value) => Ended::Local {
            status,
            error: error_type(&value),
        },
        None => Ended::Origin {
            status,
            corrupt: (status == 200)
                .then(|| plan::check_body_200(load.seed, id, &body))
                .flatten(),
        },
    }
}

/// The `error=` parameter of a `Proxy-Status` value (RFC 9209), or the whole value without one.
pub fn error_type(value: &str) -> String {
    value
        .split(';')
        .map(str::trim)
        .find_map(|p| p.strip_prefix("error="))
        .map_or_else(|| format!("(no error=) {value}"), |e| e.trim().to_string())
}

/// A hyper error in a few words: what the connection did, from the innermost I/O error when
/// there is one.
fn hyper_kind(e: &hyper::Error) -> String {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return io_kind(io);
        }
        source = s.source();
    }
    if e.is_incomplete_message() {
        "connection closed before the answer".into()
    } else if e.is_canceled() {
        "request canceled (connection closed)".into()
    } else {
        e.to_string()
    }
}

/// An I/O error in a few words.
fn io_kind(e: &std::io::Error) -> String {
    use std::io::ErrorKind as K;
    match e.kind() {
        K::ConnectionRefused => "connection refused".into(),
        K::ConnectionReset => "connection reset".into(),
        K::BrokenPipe => "broken pipe".into(),
        K::ConnectionAborted => "connection aborted".into(),
        K::UnexpectedEof => "connection closed before the answer".into(),
        _ => e.to_string(),
    }
}
