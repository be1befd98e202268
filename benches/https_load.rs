//! HTTPS load generator for `benches/https_load.sh`: GET requests over TLS, either straight to a
//! TLS origin or through courtesy's interception (CONNECT, then TLS trusting courtesy's local CA).
//!
//! Two modes:
//! - kept-alive: `--conns N` connections are opened first (not timed), then each loops GET requests
//!   on its connection until the duration is over;
//! - new connection (`--new-conn`): each of the N workers opens a new TCP connection per request
//!   (and, through courtesy, sends a CONNECT and reads the 200), does a full TLS handshake (session
//!   resumption is off), sends one GET with `Connection: close` and drops the connection. The
//!   latency of a request includes all of that.
//!
//! With `--names SUFFIX` (new-connection mode only), request number i goes to the host
//! `h<i>.SUFFIX` (CONNECT authority, `Host` and TLS server name) at the origin's port: every
//! request a host courtesy has not seen (its first CONNECT, its first leaf certificate), unless a
//! run repeats the names of an earlier one (`--max-requests` bounds them: h0 .. h<max-1>;
//! `--first-name K` starts at h<K>, so that runs in a row can each take new names). The
//! names must resolve to the origin (courtesy's `hosts_file`) and its certificate must cover
//! `*.SUFFIX`. This is what `benches/new_hosts.sh` measures.
//!
//! Every run is bounded by `--duration` and by `--max-requests` (shared by all workers); each
//! request, connect and handshake has a timeout. The last line on stdout is machine-readable:
//! `RESULT <requests> <errors> <elapsed µs> <p50 µs> <p99 µs> <connections opened> <cpu ticks>`,
//! the cpu ticks being this process's utime + stime from `/proc/self/stat`.
//!
//! Usage (arguments in any order):
//! `https_load --origin 127.0.0.1:8443 --ca ca.pem [--proxy 127.0.0.1:3128] [--path /1k]
//!  [--conns 16] [--duration 8] [--max-requests 5000000] [--new-conn] [--threads 1]
//!  [--body-bytes 1024] [--names SUFFIX] [--first-name 0]`
//!
//! `--ca` is the PEM file of roots to trust: the origin's CA directly, courtesy's `ca.pem` through
//! courtesy. The TLS server name is the origin's IP address. It is a `harness = false` bench target
//! with a plain `main`, so `cargo bench --bench https_load -- ARGS` runs it too. ring is the only
//! crypto provider (no OpenSSL).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::Request;
use hyper_util::rt::TokioIo;
use rustls::client::Resumption;
use rustls::{ClientConfig, RootCertStore};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

mod common;

use common::percentile::percentile_at_fraction;
use common::proc_stat::cpu_ticks;

/// Connect, CONNECT, TLS handshake and each request must finish within this.
const STEP_TIMEOUT: Duration = Duration::from_secs(10);
/// A worker that keeps failing stops after this many errors.
const MAX_ERRORS_PER_WORKER: u64 = 100;
/// Upper bounds on the arguments, so that a typo cannot start an endless or huge run.
const MAX_DURATION_SECS: u64 = 300;
const MAX_CONNS: usize = 1000;
const MAX_REQUESTS: u64 = 20_000_000;
/// The largest CONNECT response head accepted.
const MAX_CONNECT_HEAD: usize = 8192;

#[derive(Debug, Clone)]
struct Args {
    origin: SocketAddr,
    proxy: Option<SocketAddr>,
    ca: PathBuf,
    path: String,
    conns: usize,
    duration: Duration,
    max_requests: u64,
    new_conn: bool,
    threads: usize,
    body_bytes: Option<usize>,
    /// New-host mode: request i goes to `h<first_name + i>.<suffix>`.
    names: Option<String>,
    /// The number of the first name in new-host mode.
    first_name: u64,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut origin = None;
    let mut proxy = None;
    let mut ca = None;
    let mut path = "/1k".to_string();
    let mut conns = 16usize;
    let mut duration = 8u64;
    let mut max_requests = 5_000_000u64;
    let mut new_conn = false;
    let mut threads = 1usize;
    let mut body_bytes = Some(1024usize);
    let mut names = None;
    let mut first_name = 0u64;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        // `cargo bench` appends `--bench`; ignore it.
        if arg == "--bench" {
            continue;
        }
        if arg == "--new-conn" {
            new_conn = true;
            continue;
        }
        let value = args.next().ok_or_else(|| anyhow!("{arg} needs a value"))?;
        let bad = |what: &str| format!("{arg}: {what}, got {value:?}");
        match arg.as_str() {
            "--origin" => origin = Some(value.parse().with_context(|| bad("not an IP:port"))?),
            "--proxy" => proxy = Some(value.parse().with_context(|| bad("not an IP:port"))?),
            "--ca" => ca = Some(PathBuf::from(&value)),
            "--path" => path = value,
            "--conns" => conns = value.parse().with_context(|| bad("not a count"))?,
            "--duration" => duration = value.parse().with_context(|| bad("not seconds"))?,
            "--max-requests" => max_requests = value.parse().with_context(|| bad("not a count"))?,
            "--threads" => threads = value.parse().with_context(|| bad("not a count"))?,
            "--names" => names = Some(value.trim_matches('.').to_ascii_lowercase()),
            "--first-name" => first_name = value.parse().with_context(|| bad("not a count"))?,
            "--body-bytes" => {
                let n: i64 = value.parse().with_context(|| bad("not a number"))?;
                // A negative value turns the body-length check off.
                body_bytes = usize::try_from(n).ok();
            }
            _ => bail!("unknown argument {arg:?} (see the doc comment of benches/https_load.rs)"),
        }
    }
    let origin: SocketAddr = origin.ok_or_else(|| anyhow!("--origin IP:PORT is required"))?;
    let ca = ca.ok_or_else(|| anyhow!("--ca FILE is required"))?;
    if !(1..=MAX_CONNS).contains(&conns) {
        bail!("--conns must be 1..={MAX_CONNS}, got {conns}");
    }
    if !(1..=MAX_DURATION_SECS).contains(&duration) {
        bail!("--duration must be 1..={MAX_DURATION_SECS} seconds, got {duration}");
    }
    if !(1..=MAX_REQUESTS).contains(&max_requests) {
        bail!("--max-requests must be 1..={MAX_REQUESTS}, got {max_requests}");
    }
    if !(1..=16).contains(&threads) {
        bail!("--threads must be 1..=16, got {threads}");
    }
    for addr in std::iter::once(origin).chain(proxy) {
        if !addr.ip().is_loopback() {
            bail!("{addr} is not a loopback address: this benchmark only talks to 127.0.0.0/8 and ::1");
        }
    }
    if names.is_some() && !new_conn {
        bail!("--names needs --new-conn: a kept-alive connection stays with one host");
    }
    if first_name > 0 && names.is_none() {
        bail!("--first-name needs --names");
    }
    if first_name > MAX_REQUESTS {
        bail!("--first-name must be 0..={MAX_REQUESTS}, got {first_name}");
    }
    if !path.starts_with('/') {
        bail!("--path must start with '/', got {path:?}");
    }
    Ok(Args {
        origin,
        proxy,
        ca,
        path,
        conns,
        duration: Duration::from_secs(duration),
        max_requests,
        new_conn,
        threads,
        body_bytes,
        names,
        first_name,
    })
}

/// What every worker shares.
struct Shared {
    args: Args,
    tls: TlsConnector,
    server_name: ServerName<'static>,
    authority: String,
    /// Requests started so far (bounded by `max_requests`).
    started: AtomicU64,
    /// TCP connections opened so far.
    opened: AtomicU64,
}

/// What one worker measured.
#[derive(Default)]
struct Tally {
    latencies_us: Vec<u32>,
    errors: u64,
    first_error: Option<String>,
}

impl Tally {
    fn error(&mut self, e: anyhow::Error) {
        self.errors += 1;
        if self.first_error.is_none() {
            self.first_error = Some(format!("{e:#}"));
        }
    }
}

fn tls_connector(ca: &PathBuf) -> anyhow::Result<TlsConnector> {
    let mut roots = RootCertStore::empty();
    let mut added = 0;
    for cert in CertificateDer::pem_file_iter(ca)
        .with_context(|| format!("cannot read the CA file {}", ca.display()))?
    {
        let cert = cert.with_context(|| format!("bad PEM in {}", ca.display()))?;
        roots
            .add(cert)
            .with_context(|| format!("bad CA certificate in {}", ca.display()))?;
        added += 1;
    }
    if added == 0 {
        bail!("no certificate in {}", ca.display());
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    // Every new connection is a full handshake: no session tickets or IDs are reused.
    config.resumption = Resumption::disabled();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsConnector::from(Arc::new(config)))
}

async fn timed<T>(
    what: &str,
    fut: impl std::future::Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    tokio::time::timeout(STEP_TIMEOUT, fut)
        .await
        .map_err(|_| anyhow!("{what}: no answer within {STEP_TIMEOUT:?}"))?
}

/// Sends `CONNECT authority` on `tcp` and reads the proxy's answer head, which must be a 200.
async fn connect_tunnel(tcp: &mut TcpStream, authority: &str) -> anyhow::Result<()> {
    let head = format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n");
    tcp.write_all(head.as_bytes()).await?;
    // The proxy sends nothing after its answer until the client's ClientHello, so reading in
    // chunks cannot swallow TLS bytes.
    let mut buf = Vec::with_capacity(256);
    let mut chunk = [0u8; 512];
    loop {
        let n = tcp.read(&mut chunk).await?;
        if n == 0 {
            bail!("the proxy closed the connection after CONNECT (got {buf:?} so far)");
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            if end + 4 != buf.len() {
                bail!("the proxy sent bytes after its CONNECT answer");
            }
            break;
        }
        if buf.len() > MAX_CONNECT_HEAD {
            bail!("CONNECT answer head longer than {MAX_CONNECT_HEAD} bytes");
        }
    }
    let status_line = buf.split(|&b| b == b'\r').next().unwrap_or_default();
    let status_line = String::from_utf8_lossy(status_line);
    let mut parts = status_line.split(' ');
    match (parts.next(), parts.next()) {
        (Some("HTTP/1.1" | "HTTP/1.0"), Some("200")) => Ok(()),
        _ => bail!("CONNECT {authority} answered {status_line:?}"),
    }
}

/// The authority and TLS server name of request number `index`: the origin's, or with `--names`
/// a host of its own.
fn target_of(shared: &Shared, index: u64) -> anyhow::Result<(String, ServerName<'static>)> {
    match &shared.args.names {
        None => Ok((shared.authority.clone(), shared.server_name.clone())),
        Some(suffix) => {
            let host = format!("h{}.{suffix}", shared.args.first_name + index);
            let name = ServerName::try_from(host.clone())
                .with_context(|| format!("{host} is not a TLS server name"))?;
            Ok((format!("{host}:{}", shared.args.origin.port()), name))
        }
    }
}

/// Opens one connection (TCP, CONNECT through the proxy if any, TLS, HTTP/1.1 handshake) for
/// request number `index`; returns it with the authority its requests name.
async fn open(shared: &Shared, index: u64) -> anyhow::Result<(SendRequest<Empty<Bytes>>, String)> {
    let args = &shared.args;
    let (authority, server_name) = target_of(shared, index)?;
    let addr = args.proxy.unwrap_or(args.origin);
    let mut tcp = timed("TCP connect", async {
        TcpStream::connect(addr)
            .await
            .with_context(|| format!("cannot connect to {addr}"))
    })
    .await?;
    shared.opened.fetch_add(1, Ordering::Relaxed);
    tcp.set_nodelay(true)?;
    if args.proxy.is_some() {
        timed("CONNECT", connect_tunnel(&mut tcp, &authority)).await?;
    }
    let tls = timed("TLS handshake", async {
        shared
            .tls
            .connect(server_name, tcp)
            .await
            .context("TLS handshake")
    })
    .await?;
    let (sender, conn) = http1::handshake(TokioIo::new(tls)).await?;
    tokio::spawn(async move {
        // The connection ends when the sender is dropped or the server closes it.
        let _ = conn.await;
    });
    Ok((sender, authority))
}

/// Sends one GET for `authority` on `sender` and reads the whole body; checks status and body
/// length.
async fn get(
    shared: &Shared,
    sender: &mut SendRequest<Empty<Bytes>>,
    authority: &str,
) -> anyhow::Result<()> {
    let args = &shared.args;
    let mut req = Request::get(args.path.as_str()).header(hyper::header::HOST, authority);
    if args.new_conn {
        req = req.header(hyper::header::CONNECTION, "close");
    }
    let req = req.body(Empty::<Bytes>::new())?;
    timed("request", async {
        sender.ready().await.context("connection not ready")?;
        let resp = sender.send_request(req).await.context("send request")?;
        let status = resp.status();
        let body = resp
            .into_body()
            .collect()
            .await
            .context("read body")?
            .to_bytes();
        if status != hyper::StatusCode::OK {
            bail!("status {status}: {:?}", String::from_utf8_lossy(&body));
        }
        if let Some(want) = args.body_bytes {
            if body.len() != want {
                bail!("body of {} bytes, expected {want}", body.len());
            }
        }
        Ok(())
    })
    .await
}

/// Takes a request slot (its number), unless the run is over (deadline or request budget).
fn take_slot(shared: &Shared, deadline: Instant) -> Option<u64> {
    if Instant::now() >= deadline {
        return None;
    }
    let index = shared.started.fetch_add(1, Ordering::Relaxed);
    (index < shared.args.max_requests).then_some(index)
}

async fn kept_alive_worker(
    shared: Arc<Shared>,
    mut sender: SendRequest<Empty<Bytes>>,
    deadline: Instant,
) -> Tally {
    let mut tally = Tally::default();
    let authority = shared.authority.clone();
    while take_slot(&shared, deadline).is_some() {
        let t0 = Instant::now();
        match get(&shared, &mut sender, &authority).await {
            Ok(()) => tally.latencies_us.push(micros(t0.elapsed())),
            Err(e) => {
                tally.error(e);
                if tally.errors >= MAX_ERRORS_PER_WORKER {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
                match open(&shared, 0).await {
                    Ok((s, _)) => sender = s,
                    Err(e) => tally.error(e),
                }
            }
        }
    }
    tally
}

async fn new_conn_worker(shared: Arc<Shared>, deadline: Instant) -> Tally {
    let mut tally = Tally::default();
    while let Some(index) = take_slot(&shared, deadline) {
        let t0 = Instant::now();
        let result = async {
            let (mut sender, authority) = open(&shared, index).await?;
            get(&shared, &mut sender, &authority).await
        }
        .await;
        match result {
            Ok(()) => tally.latencies_us.push(micros(t0.elapsed())),
            Err(e) => {
                tally.error(e);
                if tally.errors >= MAX_ERRORS_PER_WORKER {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
    tally
}

fn micros(d: Duration) -> u32 {
    u32::try_from(d.as_micros()).unwrap_or(u32::MAX)
}

async fn run(args: Args) -> anyhow::Result<()> {
    let tls = tls_connector(&args.ca)?;
    let server_name = ServerName::IpAddress(args.origin.ip().into());
    let authority = args.origin.to_string();
    let shared = Arc::new(Shared {
        args: args.clone(),
        tls,
        server_name,
        authority,
        started: AtomicU64::new(0),
        opened: AtomicU64::new(0),
    });

    // Kept-alive connections are opened before the clock starts.
    let mut senders = Vec::new();
    if !args.new_conn {
        for i in 0..args.conns {
            let (sender, _) = open(&shared, 0)
                .await
                .with_context(|| format!("opening connection {} of {}", i + 1, args.conns))?;
            senders.push(sender);
        }
    }

    let start = Instant::now();
    let deadline = start + args.duration;
    let mut tasks = tokio::task::JoinSet::new();
    if args.new_conn {
        for _ in 0..args.conns {
            tasks.spawn(new_conn_worker(shared.clone(), deadline));
        }
    } else {
        for sender in senders {
            tasks.spawn(kept_alive_worker(shared.clone(), sender, deadline));
        }
    }
    // Workers stop at the deadline after their current request, which has its own timeouts;
    // this outer bound only guards against a bug.
    let mut tallies = Vec::new();
    let hard_stop = deadline + 4 * STEP_TIMEOUT;
    loop {
        match tokio::time::timeout_at(hard_stop.into(), tasks.join_next()).await {
            Ok(Some(t)) => tallies.push(t.context("worker panicked")?),
            Ok(None) => break,
            Err(_) => {
                tasks.abort_all();
                bail!(
                    "workers still running {:?} after the deadline",
                    4 * STEP_TIMEOUT
                );
            }
        }
    }
    let elapsed = start.elapsed();

    let mut latencies: Vec<u32> = Vec::new();
    let mut errors = 0;
    let mut first_error = None;
    for t in tallies {
        latencies.extend_from_slice(&t.latencies_us);
        errors += t.errors;
        first_error = first_error.or(t.first_error);
    }
    latencies.sort_unstable();
    let n = latencies.len() as u64;
    let p50 = percentile_at_fraction(&latencies, 0.50).unwrap_or(0);
    let p99 = percentile_at_fraction(&latencies, 0.99).unwrap_or(0);
    let opened = shared.opened.load(Ordering::Relaxed);
    let rps = n as f64 / elapsed.as_secs_f64();
    eprintln!(
        "{} {} conns={} via={}: {n} requests in {:.2} s = {rps:.0} req/s, p50 {:.3} ms, p99 {:.3} ms, \
         {errors} errors, {opened} connections opened",
        if args.new_conn { "new-conn" } else { "kept-alive" },
        args.origin,
        args.conns,
        args.proxy.map_or("direct".to_string(), |p| p.to_string()),
        elapsed.as_secs_f64(),
        p50 as f64 / 1000.0,
        p99 as f64 / 1000.0,
    );
    if let Some(e) = first_error {
        eprintln!("first error: {e}");
    }
    println!(
        "RESULT {n} {errors} {} {p50} {p99} {opened} {}",
        elapsed.as_micros(),
        cpu_ticks("self").unwrap_or(0)
    );
    if n == 0 {
        bail!("no request completed");
    }
    Ok(())
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("https_load: {e:#}");
            std::process::exit(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads)
        .enable_all()
        .build()
        .expect("tokio runtime");
    if let Err(e) = runtime.block_on(run(args)) {
        eprintln!("https_load: {e:#}");
        std::process::exit(1);
    }
}
