//! The fault-injecting origin: one hyper HTTP/1.1 listener per host on `127.0.1.N`, each try of
//! each request answered as the plan says (a checked 200, a reset, a hang, garbage, a 429 or 503
//! storm, a close), and every arrival recorded with the host, the id, the method, the instant and
//! what was done, together with every Retry-After window it announced. The records are what the
//! soak judges courtesy by: duplicates, resends and window violations are counted here, at the
//! origin, where they happen.

use std::collections::HashMap;
use std::convert::Infallible;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{HeaderValue, CONNECTION, RETRY_AFTER};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::plan::{self, Behaviour};

/// How long a hang lasts: longer than the response timeout the soak gives courtesy (3 s).
pub const HANG: Duration = Duration::from_secs(5);

/// How long the origin waits for a request body before it gives up on the try.
const BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// Bytes that are no HTTP response.
const GARBAGE: &[u8] = b"\x00\x13\x37 this is not HTTP at all \xff\xfe\r\n\r\n";

/// One request's arrival at the origin.
#[derive(Debug, Clone)]
pub struct Arrival {
    /// The host index (0-based; the address is `127.0.1.(host + 1)`).
    pub host: usize,
    /// `x-soak-id`; `None` when the request had none (courtesy must pass it through).
    pub id: Option<u64>,
    /// Whether it was a POST.
    pub post: bool,
    /// When its headers had been read.
    pub at: Instant,
    /// What the origin did.
    pub behaviour: Behaviour,
    /// For a POST: whether its body arrived whole and matched `x-soak-sum`.
    pub body_ok: bool,
}

/// A Retry-After window the origin announced: no arrival for `host` may come inside it.
#[derive(Debug, Clone)]
pub struct Window {
    /// The host index.
    pub host: usize,
    /// When the answer that announced it was made.
    pub opened: Instant,
    /// When it ends.
    pub until: Instant,
    /// The request whose answer announced it.
    pub by_id: u64,
    /// 429 or 503.
    pub status: u16,
}

/// What the origin saw, shared by its connection tasks.
#[derive(Default)]
struct Records {
    arrivals: Vec<Arrival>,
    windows: Vec<Window>,
    /// Tries seen per id, to pick each try's behaviour.
    tries: HashMap<u64, u32>,
}

/// The origin's listeners and records.
pub struct Origin {
    /// Where each host listens (index = host).
    pub addrs: Vec<SocketAddr>,
    records: Arc<Mutex<Records>>,
    stop: watch::Sender<bool>,
    accept_tasks: Vec<JoinHandle<()>>,
}

/// The address of host `i`: `127.0.1.(i + 1)` (courtesy itself listens on 127.0.0.1).
pub fn host_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 1, (i + 1) as u8)
}

impl Origin {
    /// Listens for `hosts` hosts (each on a port of its own), with the behaviours of `seed`.
    pub async fn start(hosts: usize, seed: u64) -> anyhow::Result<Origin> {
        let records = Arc::new(Mutex::new(Records::default()));
        let (stop, stopped) = watch::channel(false);
        let started = Instant::now();
        let mut addrs = Vec::with_capacity(hosts);
        let mut accept_tasks = Vec::with_capacity(hosts);
        for host in 0..hosts {
            let listener = TcpListener::bind((host_ip(host), 0)).await?;
            addrs.push(listener.local_addr()?);
            let shared = Shared {
                host,
                seed,
                started,
                records: records.clone(),
            };
            accept_tasks.push(tokio::spawn(accept_loop(listener, shared, stopped.clone())));
        }
        Ok(Origin {
            addrs,
            records,
            stop,
            accept_tasks,
        })
    }

    /// Every arrival so far, in the order they were recorded.
    pub fn arrivals(&self) -> Vec<Arrival> {
        lock(&self.records).arrivals.clone()
    }

    /// Every window announced so far.
    pub fn windows(&self) -> Vec<Window> {
        lock(&self.records).windows.clone()
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        for task in &self.accept_tasks {
            task.abort();
        }
    }
}

/// The records, even after a panic elsewhere (a poisoned lock holds data that is still good).
fn lock(records: &Mutex<Records>) -> std::sync::MutexGuard<'_, Records> {
    records.lock().unwrap_or_else(|p| p.into_inner())
}

/// What every connection of one host needs.
#[derive(Clone)]
struct Shared {
    host: usize,
    seed: u64,
    started: Instant,
    records: Arc<Mutex<Records>>,
}

/// Accepts connections for one host until the origin stops.
async fn accept_loop(listener: TcpListener, shared: Shared, stopped: watch::Receiver<bool>) {
    loop {
        let stream = crate::common::accept::next_connection(&listener).await;
        tokio::spawn(serve(stream, shared.clone(), stopped.clone()));
    }
}

/// What the connection's socket does with the bytes hyper writes.
const WRITE_AS_IS: u8 = 0;
/// Fail every write: the socket is dropped without an answer.
const WRITE_NOTHING: u8 = 1;
/// Write [`GARBAGE`] instead, then fail: the socket is dropped after bytes that are not HTTP.
const WRITE_GARBAGE: u8 = 2;

/// Serves one connection; each request's behaviour may take over the socket (see [`FaultIo`]).
async fn serve(stream: TcpStream, shared: Shared, mut stopped: watch::Receiver<bool>) {
    let mode = Arc::new(AtomicU8::new(WRITE_AS_IS));
    let io = FaultIo {
        inner: stream,
        mode: mode.clone(),
    };
    let service = service_fn(move |req| {
        let (shared, mode) = (shared.clone(), mode.clone());
        async move { Ok::<_, Infallible>(answer(req, &shared, &mode).await) }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .keep_alive(true)
        .serve_connection(TokioIo::new(io), service);
    tokio::select! {
        _ = conn => {}
        _ = stopped.changed() => {}
    }
}

/// The body type of every answer: whole or in timed pieces.
type AnswerBody = UnsyncBoxBody<Bytes, Infallible>;

/// A whole body.
fn whole(bytes: impl Into<Bytes>) -> AnswerBody {
    Full::new(bytes.into()).boxed_unsync()
}

/// Reads one request, records its arrival and answers it as the plan says.
async fn answer(req: Request<Incoming>, shared: &Shared, mode: &AtomicU8) -> Response<AnswerBody> {
    let at = Instant::now();
    let id = req
        .headers()
        .get("x-soak-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let post = req.method() == Method::POST;
    let want_sum = req
        .headers()
        .get("x-soak-sum")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| u64::from_str_radix(v, 16).ok());
    // Read the whole request first: every behaviour, even a reset, comes after the request.
    let body = match tokio::time::timeout(BODY_TIMEOUT, req.into_body().collect()).await {
        Ok(Ok(collected)) => Some(collected.to_bytes()),
        _ => None,
    };
    let body_ok = match (&body, post) {
        (Some(b), true) => want_sum == Some(plan::checksum(b)),
        (Some(_), false) => true,
        (None, _) => false,
    };
    let Some(id) = id else {
        record(shared, None, post, at, Behaviour::Ok, body_ok);
        let mut response = Response::new(whole("no x-soak-id\n"));
        *response.status_mut() = StatusCode::BAD_REQUEST;
        return response;
    };
    let elapsed_ms = at.duration_since(shared.started).as_millis() as u64;
    let weather = plan::weather(shared.seed, shared.host, elapsed_ms);
    let attempt = {
        let mut records = lock(&shared.records);
        let tries = records.tries.entry(id).or_insert(0);
        *tries += 1;
        *tries - 1
    };
    let behaviour = if body.is_none() {
        // The request never arrived whole: nothing to answer.
        Behaviour::Reset
    } else {
        plan::behaviour(shared.seed, shared.host, id, attempt, weather)
    };
    record(shared, Some(id), post, at, behaviour, body_ok);
    match behaviour {
        Behaviour::Ok | Behaviour::CloseAfter => {
            let mut response = Response::new(whole(plan::body_200(shared.seed, id)));
            if behaviour == Behaviour::CloseAfter {
                response
                    .headers_mut()
                    .insert(CONNECTION, HeaderValue::from_static("close"));
            }
            response
        }
        Behaviour::Streamed => Response::new(streamed(shared.seed, id)),
        Behaviour::Reset => {
            mode.store(WRITE_NOTHING, Ordering::SeqCst);
            closing(StatusCode::OK)
        }
        Behaviour::Hang => {
            tokio::time::sleep(HANG).await;
            mode.store(WRITE_NOTHING, Ordering::SeqCst);
            closing(StatusCode::OK)
        }
        Behaviour::Garbage => {
            mode.store(WRITE_GARBAGE, Ordering::SeqCst);
            closing(StatusCode::OK)
        }
        Behaviour::Throttled | Behaviour::UnavailableFor | Behaviour::Unavailable => {
            let status = if behaviour == Behaviour::Throttled {
                StatusCode::TOO_MANY_REQUESTS
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            let mut response = Response::new(whole(format!("{status} for soak id={id}\n")));
            *response.status_mut() = status;
            if behaviour != Behaviour::Unavailable {
                let secs = plan::retry_after(shared.seed, id, attempt, behaviour);
                response
                    .headers_mut()
                    .insert(RETRY_AFTER, HeaderValue::from(secs));
                let opened = Instant::now();
                lock(&shared.records).windows.push(Window {
                    host: shared.host,
                    opened,
                    until: opened + Duration::from_secs(secs),
                    by_id: id,
                    status: status.as_u16(),
                });
            }
            response
        }
    }
}

/// Records one arrival.
fn record(shared: &Shared, id: Option<u64>, post: bool, at: Instant, b: Behaviour, body_ok: bool) {
    lock(&shared.records).arrivals.push(Arrival {
        host: shared.host,
        id,
        post,
        at,
        behaviour: b,
        body_ok,
    });
}

/// A response that is never written as such (the socket takes over), closing the connection.
fn closing(status: StatusCode) -> Response<AnswerBody> {
    let mut response = Response::new(whole(""));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONNECTION, HeaderValue::from_static("close"));
    response
}

/// Request `id`'s 200 body, chunked, in pieces with short pauses between them.
fn streamed(seed: u64, id: u64) -> AnswerBody {
    let body = Bytes::from(plan::body_200(seed, id));
    let (count, pause_ms) = plan::pieces(seed, id);
    let step = body.len().div_ceil(count).max(1);
    let chunks: Vec<Bytes> = (0..body.len())
        .step_by(step)
        .map(|start| body.slice(start..(start + step).min(body.len())))
        .collect();
    let stream = futures_util::stream::unfold((chunks, 0usize), move |(chunks, i)| async move {
        if i >= chunks.len() {
            return None;
        }
        if i > 0 {
            tokio::time::sleep(Duration::from_millis(pause_ms)).await;
        }
        let frame = Frame::data(chunks[i].clone());
        Some((Ok::<_, Infallible>(frame), (chunks, i + 1)))
    });
    StreamBody::new(stream).boxed_unsync()
}

/// The origin's socket: reads pass through; writes pass through unless a behaviour took the
/// socket over (a reset writes nothing, garbage writes [`GARBAGE`]), and then fail so that hyper
/// drops the connection.
struct FaultIo {
    inner: TcpStream,
    mode: Arc<AtomicU8>,
}

impl FaultIo {
    /// The write in place of hyper's, for a socket a behaviour took over; `None`: write as is.
    fn poll_fault(&mut self, cx: &mut Context<'_>) -> Option<Poll<io::Result<usize>>> {
        match self.mode.load(Ordering::SeqCst) {
            WRITE_NOTHING => Some(Poll::Ready(Err(io::ErrorKind::ConnectionReset.into()))),
            WRITE_GARBAGE => {
                // However much of it the socket takes, then nothing more.
                if Pin::new(&mut self.inner)
                    .poll_write(cx, GARBAGE)
                    .is_pending()
                {
                    return Some(Poll::Pending);
                }
                self.mode.store(WRITE_NOTHING, Ordering::SeqCst);
                Some(Poll::Ready(Err(io::ErrorKind::BrokenPipe.into())))
            }
            _ => None,
        }
    }
}

impl AsyncRead for FaultIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for FaultIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Some(fault) = this.poll_fault(cx) {
            return fault;
        }
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Some(fault) = this.poll_fault(cx) {
            return fault;
        }
        Pin::new(&mut this.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}
