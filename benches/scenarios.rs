//! Performance scenarios for courtesy (performance issue targets 2–5), run against the real release
//! binary (`target/release/courtesy run --config FILE`, `RUST_LOG=warn`), with the origins and the
//! clients in this process (tokio + hyper 1), on loopback addresses only.
//!
//! 1. **Pacing precision**: one host at 20/s, burst 1; 64 kept-alive clients hammer for 30 s. The
//!    origin records arrival instants: max arrivals in any closed 1 s window, achieved rate, and
//!    |gap − 1/R| percentiles. Timing is sensitive to other load on the machine: the scenario is run
//!    again (at most 3 runs) while other processes used more than 20 % of a core, and the quietest
//!    run is reported. Every scenario's row in the report says how busy the machine was.
//! 2. **Many hosts**: (a) in process, `courtesy::limiter::Limiter` with N distinct hosts (1k, 10k,
//!    100k, 1M when it fits): RSS per known host, then `sweep` and RSS again (each N in a child
//!    process of this binary, so that one N's heap does not blur the next). (b) end to end through
//!    the proxy: one request to each of N distinct loopback addresses `127.0.x.y` (one origin
//!    listener per address, all on one port): courtesy's RSS growth per host, and after
//!    `idle_host_seconds` plus a sweep period plus the upstream pool's idle timeout (when courtesy
//!    hands the closed connections' memory back), its RSS and `GET /hosts` again; then the same hosts
//!    once more, and what one `GET /metrics` and one `GET /hosts` listing them all add to RSS. Run
//!    once with kept-alive upstream connections (what a crawl looks like) and once with
//!    `Connection: close` answers (no pooled connections: the host table and per-host state).
//! 3. **Parked requests**: 1,000 hosts at 0.2/s, burst 1, concurrency 1. 10,000 client connections
//!    are opened first (10 per host), then each host is primed with one request (its token spent),
//!    then the 10,000 requests are sent at once, so that all of them park. Once all are in courtesy
//!    (`GET /hosts`), its CPU time is read over 10 s in 1 s slices; then every request must get its
//!    answer (the last about 50 s after priming).
//! 4. **Fan-out fairness**: 200 hosts at 5/s each, 3 kept-alive hammering connections per host for
//!    20 s: aggregate origin arrivals per second and per-host rates.
//!
//! Prints a Markdown report (one table of targets, measured values and pass/fail, then details) and
//! writes it to `benches/SCENARIOS_RESULTS.md`.
//!
//! Usage: `benches/scenarios.sh [ARGS]` (raises `ulimit -n`, builds the release binary, runs this),
//! or `cargo bench --bench scenarios -- [ARGS]` with
//! `--only 1,2,3,4` (scenarios to run), `--e2e-hosts N` (scenario 2b, default 5000, at most 9000),
//! `--out PATH` (report file; `-` for stdout only), `--courtesy PATH` (the binary; also
//! `$COURTESY_BIN`; default `target/release/courtesy`).
//!
//! Every loop is bounded in count and in time; the only process started is courtesy (and this
//! binary as a child for 2a), each stopped by its own handle (PID) at the end.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::fmt::Write as _;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::header::{HeaderValue, CONNECTION, HOST};
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinHandle;

/// Where the proxy's requests go: `127.0.(i / 250 + 1).(i % 250 + 1)`, never 127.0.0.x (courtesy
/// itself listens on 127.0.0.1).
fn host_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, (i / 250 + 1) as u8, (i % 250 + 1) as u8)
}

/// Converts a std instant to tokio's, for `timeout_at`.
fn tokio_at(at: Instant) -> tokio::time::Instant {
    tokio::time::Instant::from_std(at)
}

// ---- report ---------------------------------------------------------------------------------------

/// One line of the results table.
struct Row {
    what: String,
    target: String,
    measured: String,
    /// `None`: for information, no target.
    pass: Option<bool>,
}

fn row(what: impl Into<String>, target: impl Into<String>, measured: impl Into<String>) -> Row {
    Row {
        what: what.into(),
        target: target.into(),
        measured: measured.into(),
        pass: None,
    }
}

impl Row {
    fn judged(mut self, pass: bool) -> Row {
        self.pass = Some(pass);
        self
    }
}

/// One scenario's results.
struct Section {
    number: u32,
    title: String,
    ran: Duration,
    /// CPU used by processes other than this bench and its courtesy, in % of one core.
    others_pct: f64,
    /// Interrupt (mostly softirq: loopback TCP, ours included) time, in % of one core.
    irq_pct: f64,
    rows: Vec<Row>,
    notes: Vec<String>,
}

impl Section {
    fn new(number: u32, title: &str) -> Section {
        Section {
            number,
            title: title.to_string(),
            ran: Duration::ZERO,
            others_pct: f64::NAN,
            irq_pct: f64::NAN,
            rows: Vec::new(),
            notes: Vec::new(),
        }
    }
}

// ---- /proc ----------------------------------------------------------------------------------------

/// VmRSS of a process in KiB (`pid` = "self" for this one).
fn rss_kib(pid: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = text.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// utime + stime of a process in clock ticks (threads that ended included).
fn cpu_ticks(pid: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &text[text.rfind(')')? + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // Field 3 (state) is index 0, so utime (14) and stime (15) are 11 and 12.
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

/// CPU time of a process's live threads in ns (`/proc/PID/task/*/schedstat`, first field): finer
/// than clock ticks, for 1 s slices.
fn cpu_ns(pid: &str) -> Option<u64> {
    let mut total = 0u64;
    for entry in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
        let path = entry.ok()?.path().join("schedstat");
        if let Ok(text) = std::fs::read_to_string(path) {
            total += text
                .split_whitespace()
                .next()
                .and_then(|f| f.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    Some(total)
}

/// Clock ticks per second (`getconf CLK_TCK`, 100 if that fails).
fn clk_tck() -> f64 {
    static TCK: OnceLock<f64> = OnceLock::new();
    *TCK.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// This process's CPU ticks, with those of its children already waited for (each courtesy and
/// 2a child is waited for when it is stopped): utime + stime + cutime + cstime.
fn own_and_children_ticks() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/stat").ok()?;
    let after = &text[text.rfind(')')? + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    (11..=14)
        .map(|i| fields.get(i)?.parse::<u64>().ok())
        .sum::<Option<u64>>()
}

/// CPU ticks of the whole machine (all cores) from `/proc/stat`: (user + nice + system, irq +
/// softirq). Interrupt time is not charged to any process; loopback TCP spends much of it.
fn machine_ticks() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let line = text.lines().next()?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .filter_map(|f| f.parse().ok())
        .collect();
    (v.len() == 8).then(|| (v[0] + v[1] + v[2], v[5] + v[6]))
}

/// The soft limit on open files of this process.
fn open_files_limit() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

// ---- statistics -----------------------------------------------------------------------------------

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// The most instants (sorted, seconds) in any closed window of `width` seconds.
fn max_in_window(times: &[f64], width: f64) -> usize {
    let mut best = 0;
    let mut j = 0;
    for i in 0..times.len() {
        while j < times.len() && times[j] - times[i] <= width {
            j += 1;
        }
        best = best.max(j - i);
    }
    best
}

/// (n − 1) / (last − first): the rate at which sorted instants arrived.
fn rate_of(times: &[f64]) -> f64 {
    match (times.first(), times.last()) {
        (Some(first), Some(last)) if times.len() > 1 && last > first => {
            (times.len() - 1) as f64 / (last - first)
        }
        _ => f64::NAN,
    }
}

// ---- origin ---------------------------------------------------------------------------------------

/// One HTTP/1.1 origin listener per address, all on one port, answering 200 "ok" at once and
/// recording every arrival's instant per address.
struct Origin {
    port: u16,
    arrivals: Arc<Vec<Mutex<Vec<Instant>>>>,
    total: Arc<AtomicU64>,
    stop: watch::Sender<bool>,
    accept_tasks: Vec<JoinHandle<()>>,
}

impl Origin {
    /// Listens on `ips` (one port for all); with `close`, every answer says `Connection: close`.
    async fn start(ips: &[Ipv4Addr], close: bool) -> anyhow::Result<Origin> {
        let mut last = anyhow!("no address given");
        for _attempt in 0..20 {
            match Origin::bind_all(ips).await {
                Ok((port, listeners)) => return Ok(Origin::serve(port, listeners, close)),
                Err(e) => last = e,
            }
        }
        Err(last.context(format!("binding an origin on {} addresses", ips.len())))
    }

    async fn bind_all(ips: &[Ipv4Addr]) -> anyhow::Result<(u16, Vec<TcpListener>)> {
        let first_ip = *ips.first().context("no address")?;
        let first = TcpListener::bind((first_ip, 0)).await?;
        let port = first.local_addr()?.port();
        let mut listeners = Vec::with_capacity(ips.len());
        listeners.push(first);
        for ip in &ips[1..] {
            let l = TcpListener::bind((*ip, port))
                .await
                .with_context(|| format!("bind {ip}:{port}"))?;
            listeners.push(l);
        }
        Ok((port, listeners))
    }

    fn serve(port: u16, listeners: Vec<TcpListener>, close: bool) -> Origin {
        let arrivals: Arc<Vec<Mutex<Vec<Instant>>>> = Arc::new(
            (0..listeners.len())
                .map(|_| Mutex::new(Vec::new()))
                .collect(),
        );
        let total = Arc::new(AtomicU64::new(0));
        let (stop, stopped) = watch::channel(false);
        let mut accept_tasks = Vec::with_capacity(listeners.len());
        for (idx, listener) in listeners.into_iter().enumerate() {
            let (arrivals, total, stopped) = (arrivals.clone(), total.clone(), stopped.clone());
            accept_tasks.push(tokio::spawn(async move {
                loop {
                    let stream = match listener.accept().await {
                        Ok((s, _)) => s,
                        Err(_) => {
                            // Out of descriptors or similar: pause instead of spinning.
                            tokio::time::sleep(Duration::from_millis(10)).await;
                            continue;
                        }
                    };
                    let _ = stream.set_nodelay(true);
                    let (arrivals, total, mut stopped) =
                        (arrivals.clone(), total.clone(), stopped.clone());
                    tokio::spawn(async move {
                        let service = service_fn(move |_req: Request<Incoming>| {
                            let at = Instant::now();
                            arrivals[idx]
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .push(at);
                            total.fetch_add(1, Ordering::Relaxed);
                            let mut response = Response::new(Full::new(Bytes::from_static(b"ok")));
                            if close {
                                response
                                    .headers_mut()
                                    .insert(CONNECTION, HeaderValue::from_static("close"));
                            }
                            std::future::ready(Ok::<_, Infallible>(response))
                        });
                        let conn = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), service);
                        tokio::select! {
                            _ = conn => {}
                            _ = stopped.changed() => {}
                        }
                    });
                }
            }));
        }
        Origin {
            port,
            arrivals,
            total,
            stop,
            accept_tasks,
        }
    }

    /// Arrivals at address `idx`, in seconds since `start`, sorted, up to `until`.
    fn times(&self, idx: usize, start: Instant, until: Instant) -> Vec<f64> {
        let mut times: Vec<f64> = self.arrivals[idx]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|&&at| at >= start && at <= until)
            .map(|&at| at.duration_since(start).as_secs_f64())
            .collect();
        times.sort_by(f64::total_cmp);
        times
    }

    fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
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

// ---- client ---------------------------------------------------------------------------------------

/// A kept-alive HTTP/1.1 connection (to courtesy: absolute-form requests, as HTTP_PROXY clients send).
struct Client {
    sender: SendRequest<Empty<Bytes>>,
    task: JoinHandle<()>,
}

impl Drop for Client {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Client {
    async fn connect(addr: SocketAddr) -> anyhow::Result<Client> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        let task = tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(Client { sender, task })
    }

    /// GET `target` (an absolute URL through a proxy, or a path) with `Host: host`.
    async fn get(&mut self, target: &str, host: &str) -> anyhow::Result<(u16, Bytes)> {
        let req = Request::get(target).header(HOST, host).body(Empty::new())?;
        self.sender.ready().await?;
        let response = self.sender.send_request(req).await?;
        let status = response.status().as_u16();
        let body = response.into_body().collect().await?.to_bytes();
        Ok((status, body))
    }
}

/// An absolute URL to address `ip` at `port` and its authority.
fn target(ip: Ipv4Addr, port: u16) -> (String, String) {
    let authority = format!("{ip}:{port}");
    (format!("http://{authority}/"), authority)
}

/// Answers counted by status; `0` counts requests that got no answer (connection errors).
#[derive(Default)]
struct Tally(Mutex<BTreeMap<u16, u64>>);

impl Tally {
    fn add(&self, status: u16) {
        *self
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(status)
            .or_default() += 1;
    }

    fn get(&self, status: u16) -> u64 {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.get(&status).copied().unwrap_or(0)
    }

    fn describe(&self) -> String {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if map.is_empty() {
            return "none".into();
        }
        map.iter()
            .map(|(s, n)| {
                if *s == 0 {
                    format!("no answer: {n}")
                } else {
                    format!("{s}: {n}")
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// One kept-alive connection to the proxy sending GETs to `targets` in turn, each as soon as the
/// previous one was answered, until `deadline` (a request still waiting then is dropped, which
/// cancels it) or `max_requests`. At most 20 connection errors, then it gives up.
async fn hammer(
    proxy: SocketAddr,
    targets: Arc<Vec<(String, String)>>,
    offset: usize,
    stride: usize,
    max_requests: usize,
    deadline: Instant,
    tally: Arc<Tally>,
) {
    let mut client: Option<Client> = None;
    let mut errors = 0;
    let mut sent = 0;
    while sent < max_requests && Instant::now() < deadline && errors < 20 {
        let mut conn = match client.take() {
            Some(c) => c,
            None => match tokio::time::timeout_at(tokio_at(deadline), Client::connect(proxy)).await
            {
                Ok(Ok(c)) => c,
                Ok(Err(_)) => {
                    errors += 1;
                    tally.add(0);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
                Err(_) => break,
            },
        };
        let (url, host) = &targets[(offset + sent * stride) % targets.len()];
        sent += 1;
        match tokio::time::timeout_at(tokio_at(deadline), conn.get(url, host)).await {
            Ok(Ok((status, _))) => {
                tally.add(status);
                client = Some(conn);
            }
            Ok(Err(_)) => {
                errors += 1;
                tally.add(0);
            }
            Err(_) => break,
        }
    }
}

/// Waits for tasks, at most until `deadline`; aborts the ones still running then.
async fn join_all(tasks: Vec<JoinHandle<()>>, deadline: Instant) -> usize {
    let mut late = 0;
    for task in tasks {
        let abort = task.abort_handle();
        if tokio::time::timeout_at(tokio_at(deadline), task)
            .await
            .is_err()
        {
            abort.abort();
            late += 1;
        }
    }
    late
}

// ---- courtesy process -----------------------------------------------------------------------------

/// courtesy running as its own process (the release binary).
struct Courtesy {
    child: tokio::process::Child,
    pid: String,
    proxy: SocketAddr,
    admin: SocketAddr,
    dir: PathBuf,
}

/// A free loopback port (bound and released; courtesy binds it right after).
fn free_port() -> anyhow::Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

/// GET `path` on the admin listener: status and body.
async fn admin_get(admin: SocketAddr, path: &str) -> anyhow::Result<(u16, Bytes)> {
    let mut client = Client::connect(admin).await?;
    client.get(path, &admin.to_string()).await
}

impl Courtesy {
    /// Starts courtesy with `defaults` as its `[defaults]` (plus `max_queue = 100000`,
    /// `max_wait_seconds = 600`, `obey_robots = false`) and waits until its admin answers.
    async fn start(
        bin: &Path,
        name: &str,
        defaults: &str,
        idle_host_seconds: u64,
    ) -> anyhow::Result<Courtesy> {
        let mut last = anyhow!("not started");
        for attempt in 0..3 {
            let dir = std::env::temp_dir().join(format!(
                "courtesy-scenarios-{}-{name}-{attempt}",
                std::process::id()
            ));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(dir.join("state"))?;
            let proxy = SocketAddr::from(([127, 0, 0, 1], free_port()?));
            let admin = SocketAddr::from(([127, 0, 0, 1], free_port()?));
            let config = format!(
                "[proxy]\nlisten = \"{proxy}\"\nadmin_listen = \"{admin}\"\nstate_dir = \"{}\"\n\
                 max_in_flight = 100000\nidle_host_seconds = {idle_host_seconds}\n\n\
                 [defaults]\n{defaults}\nmax_queue = 100000\nmax_wait_seconds = 600\n\
                 obey_robots = false\n",
                dir.join("state").display()
            );
            let config_path = dir.join("courtesy.toml");
            std::fs::write(&config_path, config)?;
            let stderr = std::fs::File::create(dir.join("stderr.log"))?;
            let mut child = tokio::process::Command::new(bin)
                .arg("run")
                .arg("--config")
                .arg(&config_path)
                .env("RUST_LOG", "warn")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(stderr)
                .kill_on_drop(true)
                .spawn()
                .with_context(|| format!("starting {}", bin.display()))?;
            let pid = child.id().context("courtesy has no pid")?.to_string();
            let ready_by = Instant::now() + Duration::from_secs(15);
            let mut exited = false;
            while Instant::now() < ready_by {
                if child.try_wait()?.is_some() {
                    exited = true;
                    break;
                }
                if let Ok(Ok((200, _))) =
                    tokio::time::timeout(Duration::from_secs(1), admin_get(admin, "/healthz")).await
                {
                    return Ok(Courtesy {
                        child,
                        pid,
                        proxy,
                        admin,
                        dir,
                    });
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let log = std::fs::read_to_string(dir.join("stderr.log")).unwrap_or_default();
            let _ = child.kill().await;
            last = anyhow!(
                "courtesy did not come up (exited: {exited}); stderr:\n{}",
                log.chars().take(2000).collect::<String>()
            );
        }
        Err(last)
    }

    fn rss_kib(&self) -> u64 {
        rss_kib(&self.pid).unwrap_or(0)
    }

    fn cpu_ticks(&self) -> u64 {
        cpu_ticks(&self.pid).unwrap_or(0)
    }

    fn cpu_ns(&self) -> u64 {
        cpu_ns(&self.pid).unwrap_or(0)
    }

    /// `GET /hosts`: the `hosts` array.
    async fn hosts(&self) -> anyhow::Result<Vec<serde_json::Value>> {
        let (status, body) =
            tokio::time::timeout(Duration::from_secs(30), admin_get(self.admin, "/hosts"))
                .await
                .context("GET /hosts timed out")??;
        if status != 200 {
            bail!("GET /hosts answered {status}");
        }
        let value: serde_json::Value = serde_json::from_slice(&body)?;
        Ok(value["hosts"].as_array().cloned().unwrap_or_default())
    }

    /// Stops this courtesy (SIGKILL to its PID) and removes its temp dir.
    async fn stop(mut self) {
        let _ = self.child.start_kill();
        let _ = tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Sum of a numeric field over `/hosts` entries.
fn sum_field(hosts: &[serde_json::Value], field: &str) -> u64 {
    hosts.iter().filter_map(|h| h[field].as_u64()).sum()
}

// ---- scenario 1: pacing precision -----------------------------------------------------------------

async fn pacing(bin: &Path) -> anyhow::Result<Section> {
    const RATE: f64 = 20.0;
    const BURST: usize = 1;
    const CLIENTS: usize = 64;
    const RUN: Duration = Duration::from_secs(30);
    let mut section = Section::new(
        1,
        "Pacing precision (1 host, 20/s, burst 1, 64 clients, 30 s)",
    );
    // How late tokio's timer wakes a task (same tokio as courtesy's): 100 sleeps of 20 ms.
    let mut late_ms = Vec::with_capacity(100);
    for _ in 0..100 {
        let at = tokio::time::Instant::now() + Duration::from_millis(20);
        tokio::time::sleep_until(at).await;
        late_ms.push(tokio::time::Instant::now().duration_since(at).as_secs_f64() * 1000.0);
    }
    let mean_late = late_ms.iter().sum::<f64>() / late_ms.len() as f64;
    late_ms.sort_by(f64::total_cmp);
    let ip = host_ip(0);
    let origin = Origin::start(&[ip], false).await?;
    let courtesy = Courtesy::start(
        bin,
        "pacing",
        &format!("rate = {RATE:.1}\nburst = {BURST}\nconcurrency = 1000"),
        600,
    )
    .await?;
    let targets = Arc::new(vec![target(ip, origin.port)]);
    let tally = Arc::new(Tally::default());
    let (ticks0, ns0) = (courtesy.cpu_ticks(), courtesy.cpu_ns());
    let start = Instant::now();
    let deadline = start + RUN;
    let tasks: Vec<JoinHandle<()>> = (0..CLIENTS)
        .map(|_| {
            tokio::spawn(hammer(
                courtesy.proxy,
                targets.clone(),
                0,
                1,
                1_000_000,
                deadline,
                tally.clone(),
            ))
        })
        .collect();
    join_all(tasks, deadline + Duration::from_secs(5)).await;
    let (ticks1, ns1) = (courtesy.cpu_ticks(), courtesy.cpu_ns());
    let rss = courtesy.rss_kib();
    courtesy.stop().await;

    let times = origin.times(0, start, deadline);
    let n = times.len();
    let achieved = rate_of(&times);
    let window = max_in_window(&times, 1.0);
    let ideal = 1.0 / RATE;
    let gaps: Vec<f64> = times.windows(2).map(|w| w[1] - w[0]).collect();
    let mut dev_ms: Vec<f64> = gaps.iter().map(|g| (g - ideal).abs() * 1000.0).collect();
    dev_ms.sort_by(f64::total_cmp);
    let mut sorted_gaps = gaps.clone();
    sorted_gaps.sort_by(f64::total_cmp);
    let mean_gap_ms = gaps.iter().sum::<f64>() / gaps.len().max(1) as f64 * 1000.0;
    let short = gaps.iter().filter(|&&g| g < ideal - 0.0005).count();
    let (p50, p99, max) = (
        percentile(&dev_ms, 0.50),
        percentile(&dev_ms, 0.99),
        dev_ms.last().copied().unwrap_or(f64::NAN),
    );
    let limit = (RATE + BURST as f64) as usize;
    section.rows.push(
        row(
            "max arrivals in any 1 s window",
            format!("≤ {limit} (R + burst)"),
            window.to_string(),
        )
        .judged(window <= limit),
    );
    section.rows.push(
        row(
            "achieved rate",
            format!("≥ {:.1}/s (0.98 R)", 0.98 * RATE),
            format!("{achieved:.3}/s ({:.2} % of R)", achieved / RATE * 100.0),
        )
        .judged(achieved >= 0.98 * RATE),
    );
    section.rows.push(
        row(
            "\\|gap − 1/R\\| p50 / p99",
            "p99 ≤ 2 ms",
            format!("{p50:.3} ms / {p99:.3} ms (max {max:.3} ms)"),
        )
        .judged(p99 <= 2.0),
    );
    section.notes.push(format!(
        "tokio `sleep_until` lateness in this process (100 sleeps of 20 ms, before the run): mean \
         {mean_late:.3} ms, p50 {:.3} ms, p99 {:.3} ms. With burst 1 a late wake-up cannot be made up \
         (the bucket is capped at one token), so each gap is 1/R plus the lateness: 1/(1/R + {:.3} ms) \
         = {:.3}/s.",
        percentile(&late_ms, 0.5),
        percentile(&late_ms, 0.99),
        mean_gap_ms - ideal * 1000.0,
        1000.0 / mean_gap_ms
    ));
    let cpu_s = (ticks1 - ticks0) as f64 / clk_tck();
    section.notes.push(format!(
        "{n} arrivals in {:.1} s; mean gap {mean_gap_ms:.3} ms (ideal {:.3} ms); gap p50 {:.3} ms, \
         p99 {:.3} ms, min {:.3} ms; gaps shorter than 1/R − 0.5 ms: {short}. Client answers: {}.",
        RUN.as_secs_f64(),
        ideal * 1000.0,
        percentile(&sorted_gaps, 0.5) * 1000.0,
        percentile(&sorted_gaps, 0.99) * 1000.0,
        sorted_gaps.first().copied().unwrap_or(f64::NAN) * 1000.0,
        tally.describe()
    ));
    section.notes.push(format!(
        "courtesy CPU over the run: {cpu_s:.2} s by ticks ({:.2} % of a core), {:.2} s by schedstat; \
         {:.0} µs per forwarded request; RSS at the end {rss} KiB.",
        cpu_s / RUN.as_secs_f64() * 100.0,
        (ns1.saturating_sub(ns0)) as f64 / 1e9,
        (ns1.saturating_sub(ns0)) as f64 / 1e3 / n.max(1) as f64
    ));
    Ok(section)
}

// ---- scenario 2a: the host table in process -------------------------------------------------------

/// The `[defaults]` of the in-process limiter: a fast refill so swept hosts are fresh at once.
const LIMITER_TOML: &str = "[defaults]\nrate = 1000.0\nburst = 1\nconcurrency = 1\n\
    max_queue = 100000\nmax_wait_seconds = 600\nobey_robots = false\n";

/// Child mode: N hosts into a `Limiter`, RSS before and after, sweep, RSS, N other hosts, RSS.
/// Prints one `LIMITER key=value ...` line.
fn child_limiter(n: usize) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let config = courtesy::config::Config::parse(LIMITER_TOML, "scenarios.toml")
            .map_err(|e| anyhow!("{e}"))?;
        let limiter = courtesy::limiter::Limiter::new(Arc::new(config));
        let mut key = String::with_capacity(32);
        let fill = |prefix: char, key: &mut String, i: usize| {
            key.clear();
            let _ = write!(key, "{prefix}{i:07}.bench.test");
        };
        // One host in and out first, so that lazily made things are not counted per host.
        fill('w', &mut key, 0);
        let mut p = limiter
            .admit(&key, 80)
            .await
            .map_err(|r| anyhow!("{r:?}"))?;
        p.mark_sent();
        drop(p);
        tokio::time::sleep(Duration::from_millis(5)).await;
        limiter.sweep(Duration::ZERO);
        let key_len = key.len() + ":80".len();
        let rss0 = rss_kib("self").unwrap_or(0);
        let t = Instant::now();
        for i in 0..n {
            fill('h', &mut key, i);
            let mut p = limiter
                .admit(&key, 80)
                .await
                .map_err(|r| anyhow!("{r:?}"))?;
            p.mark_sent();
        }
        let insert = t.elapsed();
        let rss1 = rss_kib("self").unwrap_or(0);
        let count1 = limiter.host_count();
        // At 1000/s a spent token is back after 1 ms.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let t = Instant::now();
        let swept = limiter.sweep(Duration::ZERO);
        let sweep = t.elapsed();
        let rss2 = rss_kib("self").unwrap_or(0);
        let count2 = limiter.host_count();
        for i in 0..n {
            fill('r', &mut key, i);
            let mut p = limiter
                .admit(&key, 80)
                .await
                .map_err(|r| anyhow!("{r:?}"))?;
            p.mark_sent();
        }
        let rss3 = rss_kib("self").unwrap_or(0);
        println!(
            "LIMITER n={n} key_len={key_len} rss0={rss0} rss1={rss1} count1={count1} \
             insert_us={} swept={swept} sweep_us={} rss2={rss2} count2={count2} rss3={rss3} \
             count3={} size_host={} size_pacing={} size_stats={} size_off_peak={}",
            insert.as_micros(),
            sweep.as_micros(),
            limiter.host_count(),
            std::mem::size_of::<courtesy::limiter::Host>(),
            std::mem::size_of::<courtesy::policy::Pacing>(),
            std::mem::size_of::<courtesy::limiter::HostStats>(),
            std::mem::size_of::<Option<courtesy::config::OffPeak>>(),
        );
        Ok(())
    })
}

async fn host_table(section: &mut Section) -> anyhow::Result<()> {
    let exe = std::env::current_exe()?;
    let mut per_100k: Option<Duration> = None;
    let mut swept_all = true;
    let mut worst_left = 0.0f64;
    let mut sweep_summary = Vec::new();
    let mut sizes = String::new();
    for n in [1_000usize, 10_000, 100_000, 1_000_000] {
        if n == 1_000_000 {
            // Run 1M only if 100k (insert, sweep, insert again, in its own process) projects to
            // well under 5 minutes.
            match per_100k {
                Some(t) if t * 10 < Duration::from_secs(200) => {}
                other => {
                    section.notes.push(format!(
                        "2a: N = 1M not run: 100k took {other:?}, which projects past ~5 minutes."
                    ));
                    continue;
                }
            }
        }
        let t = Instant::now();
        let child = tokio::process::Command::new(&exe)
            .arg("--child-limiter")
            .arg(n.to_string())
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(Duration::from_secs(330), child)
            .await
            .with_context(|| format!("2a child with N = {n} timed out"))??;
        let took = t.elapsed();
        if n == 100_000 {
            per_100k = Some(took);
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text
            .lines()
            .find(|l| l.starts_with("LIMITER "))
            .with_context(|| format!("2a child with N = {n} printed no result: {text}"))?;
        let f: BTreeMap<&str, f64> = line
            .split_whitespace()
            .skip(1)
            .filter_map(|kv| kv.split_once('='))
            .filter_map(|(k, v)| Some((k, v.parse::<f64>().ok()?)))
            .collect();
        let get = |k: &str| f.get(k).copied().unwrap_or(f64::NAN);
        let nf = n as f64;
        let per_host = (get("rss1") - get("rss0")) * 1024.0 / nf;
        let left = (get("rss2") - get("rss0")) * 1024.0 / nf;
        let again = (get("rss3") - get("rss2")) * 1024.0 / nf;
        let label = match n {
            1_000 => "1k",
            10_000 => "10k",
            100_000 => "100k",
            _ => "1M",
        };
        // 1k hosts move RSS by a few hundred KiB: page and arena noise dominate.
        let r = row(
            format!("2a limiter, N = {label}: RSS per known host"),
            "≤ 500 B",
            format!("{per_host:.0} B"),
        );
        section.rows.push(if n >= 10_000 {
            r.judged(per_host <= 500.0)
        } else {
            r
        });
        swept_all &= get("count2") == 0.0 && get("swept") == nf;
        sweep_summary.push(format!(
            "{label}: {:.0} % left, next N hosts +{again:.0} B/host",
            left / per_host * 100.0
        ));
        if n >= 10_000 {
            worst_left = worst_left.max(left / per_host);
        }
        section.notes.push(format!(
            "2a N = {label}: key \"hNNNNNNN.bench.test:80\" ({:.0} bytes); RSS {:.0} → {:.0} KiB \
             after insert ({:.0} hosts, {:.2} µs per admit), → {:.0} KiB after sweep ({:.0} swept in \
             {:.1} ms, host_count {:.0}), → {:.0} KiB after inserting N other hosts ({again:.0} \
             B/host); child process ran {:.2} s.",
            get("key_len"),
            get("rss0"),
            get("rss1"),
            get("count1"),
            get("insert_us") / nf,
            get("rss2"),
            get("swept"),
            get("sweep_us") / 1000.0,
            get("count2"),
            get("rss3"),
            took.as_secs_f64()
        ));
        sizes = format!(
            "size_of: Host {:.0} B (inside an Arc, +16), Pacing {:.0} B, HostStats {:.0} B, \
             Option<OffPeak> {:.0} B.",
            get("size_host"),
            get("size_pacing"),
            get("size_stats"),
            get("size_off_peak")
        );
    }
    section.rows.push(
        row(
            "2a limiter: host_count after `sweep(0)` (every N)",
            "0",
            if swept_all { "0" } else { "not 0" },
        )
        .judged(swept_all),
    );
    section.rows.push(
        row(
            "2a limiter: RSS after sweep (share of the growth left)",
            "close to the start (≤ 25 % left)",
            sweep_summary.join("; "),
        )
        .judged(worst_left <= 0.25),
    );
    section.notes.push(sizes);
    Ok(())
}

// ---- scenario 2b: many hosts end to end -----------------------------------------------------------

async fn many_hosts_e2e(
    bin: &Path,
    section: &mut Section,
    n: usize,
    close: bool,
) -> anyhow::Result<()> {
    const CLIENTS: usize = 64;
    const IDLE_HOST_SECONDS: u64 = 5;
    let variant = if close {
        "Connection: close upstream"
    } else {
        "kept-alive upstream"
    };
    // Here: a listener per host and, kept alive, the connection courtesy pooled to it.
    let limit = open_files_limit().unwrap_or(1024) as usize;
    if 2 * n + 1_000 > limit {
        bail!("2b with {n} hosts needs about {} open files, the limit is {limit}: use --e2e-hosts or ulimit -n", 2 * n + 1_000);
    }
    let ips: Vec<Ipv4Addr> = (0..=n).map(host_ip).collect();
    let origin = Origin::start(&ips, close).await?;
    let courtesy = Courtesy::start(
        bin,
        if close { "e2e-close" } else { "e2e-keep" },
        "rate = 10.0\nburst = 1\nconcurrency = 1",
        IDLE_HOST_SECONDS,
    )
    .await?;
    // Warm-up through host 0 (lazily made things, first connection), then the baseline.
    let (url, host) = target(ips[0], origin.port);
    let mut warm = Client::connect(courtesy.proxy).await?;
    let (status, _) = warm.get(&url, &host).await?;
    drop(warm);
    if status != 200 {
        bail!("2b warm-up answered {status}");
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss0 = courtesy.rss_kib();
    let targets: Arc<Vec<(String, String)>> =
        Arc::new(ips[1..].iter().map(|ip| target(*ip, origin.port)).collect());

    // One request to each host, CLIENTS kept-alive connections sharing the hosts.
    let wave = |tally: Arc<Tally>| {
        let deadline = Instant::now() + Duration::from_secs(120);
        let tasks: Vec<JoinHandle<()>> = (0..CLIENTS)
            .map(|k| {
                // Client k sends to hosts k, k + 64, k + 128, ...
                let count = n.saturating_sub(k).div_ceil(CLIENTS);
                tokio::spawn(hammer(
                    courtesy.proxy,
                    targets.clone(),
                    k,
                    CLIENTS,
                    count,
                    deadline,
                    tally.clone(),
                ))
            })
            .collect();
        join_all(tasks, deadline + Duration::from_secs(5))
    };
    let tally = Arc::new(Tally::default());
    let t = Instant::now();
    wave(tally.clone()).await;
    let took = t.elapsed();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss1 = courtesy.rss_kib();
    // Idle for idle_host_seconds, then at least one sweep (period idle / 4, at least 1 s), then
    // the upstream pool's idle timeout (min(90 s, idle_host_seconds)) and one more sweep period,
    // after which courtesy hands the closed connections' memory back too. No admin call before
    // this point: `/hosts` itself allocates per host (measured below).
    tokio::time::sleep(Duration::from_secs(2 * IDLE_HOST_SECONDS + 5)).await;
    let rss2 = courtesy.rss_kib();
    let hosts2 = courtesy.hosts().await?.len();
    // The same hosts again (new entries in the table), then one `GET /hosts` listing them all.
    let tally2 = Arc::new(Tally::default());
    wave(tally2.clone()).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss3 = courtesy.rss_kib();
    let t = Instant::now();
    let (status, metrics) = tokio::time::timeout(
        Duration::from_secs(60),
        admin_get(courtesy.admin, "/metrics"),
    )
    .await
    .context("GET /metrics timed out")??;
    let metrics_took = t.elapsed();
    if status != 200 {
        bail!("GET /metrics answered {status}");
    }
    let rss_metrics = courtesy.rss_kib();
    // What the dashboard polls once a second: the 500 hosts most in need of attention.
    let t = Instant::now();
    let (status, limited) = tokio::time::timeout(
        Duration::from_secs(60),
        admin_get(courtesy.admin, "/hosts?limit=500"),
    )
    .await
    .context("GET /hosts?limit=500 timed out")??;
    let limited_took = t.elapsed();
    if status != 200 {
        bail!("GET /hosts?limit=500 answered {status}");
    }
    let rss_limited = courtesy.rss_kib();
    let t = Instant::now();
    let (status, body) =
        tokio::time::timeout(Duration::from_secs(60), admin_get(courtesy.admin, "/hosts"))
            .await
            .context("GET /hosts timed out")??;
    let list_took = t.elapsed();
    if status != 200 {
        bail!("GET /hosts answered {status}");
    }
    let listed = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v["hosts"].as_array().map(Vec::len))
        .unwrap_or(0);
    let rss4 = courtesy.rss_kib();
    let reached = origin.total();
    courtesy.stop().await;
    drop(origin);

    let nf = n as f64;
    let per_host = (rss1 as f64 - rss0 as f64) * 1024.0 / nf;
    let left = (rss2 as f64 - rss0 as f64) * 1024.0 / nf;
    let again = (rss3 as f64 - rss2 as f64) * 1024.0 / nf;
    let listing = (rss4 as f64 - rss_limited as f64) * 1024.0 / nf;
    let scraping = (rss_metrics as f64 - rss3 as f64) * 1024.0 / nf;
    let ok = tally.get(200);
    section.rows.push(
        row(
            format!("2b e2e, {n} hosts, {variant}: courtesy RSS growth per host"),
            "≤ 500 B (host-table target)",
            format!("{per_host:.0} B"),
        )
        .judged(per_host <= 500.0),
    );
    section.rows.push(
        row(
            format!(
                "2b e2e, {n} hosts, {variant}: `/hosts` after idle {IDLE_HOST_SECONDS} s + sweep"
            ),
            "0 hosts",
            format!("{hosts2} hosts"),
        )
        .judged(hosts2 == 0),
    );
    section.rows.push(
        row(
            format!("2b e2e, {n} hosts, {variant}: RSS after the sweep"),
            "close to the start (≤ 25 % of growth left)",
            format!(
                "{:.0} % of growth left; the same {n} hosts again: +{again:.0} B/host",
                left / per_host * 100.0
            ),
        )
        .judged(left <= 0.25 * per_host),
    );
    section.notes.push(format!(
        "2b {variant}: {n} requests (+1 warm-up) to {n} addresses in {:.2} s ({:.0}/s, {CLIENTS} \
         kept-alive client connections); answers {} (second wave: {}); origin saw {reached}. \
         courtesy RSS {rss0} → {rss1} → {rss2} → {rss3} → {rss_metrics} → {rss4} KiB (start, after, \
         after idle + sweep, after the second wave, after one `GET /metrics`: {} KiB in {:.0} ms, \
         RSS +{scraping:.0} B/host; one `GET /hosts?limit=500`, what the dashboard polls: {} KiB \
         in {:.0} ms; then after one `GET /hosts` listing {listed} hosts: {} KiB of JSON in {:.0} \
         ms, RSS +{listing:.0} B/host).",
        took.as_secs_f64(),
        nf / took.as_secs_f64(),
        tally.describe(),
        tally2.describe(),
        metrics.len() / 1024,
        metrics_took.as_secs_f64() * 1000.0,
        limited.len() / 1024,
        limited_took.as_secs_f64() * 1000.0,
        body.len() / 1024,
        list_took.as_secs_f64() * 1000.0,
    ));
    if ok != n as u64 {
        section
            .notes
            .push(format!("2b {variant}: only {ok} of {n} requests got 200."));
    }
    Ok(())
}

// ---- scenario 3: parked requests ------------------------------------------------------------------

/// The size of the future a closure returns, without calling it.
fn future_size<F, Fut>(_f: F) -> usize
where
    F: FnOnce(Arc<courtesy::proxy::Proxy>, Request<Incoming>, SocketAddr) -> Fut,
{
    std::mem::size_of::<Fut>()
}

/// The size of the future a closure returns, without calling it.
fn admit_size<F, Fut>(_f: F) -> usize
where
    F: FnOnce(Arc<courtesy::limiter::Limiter>) -> Fut,
{
    std::mem::size_of::<Fut>()
}

async fn parked(bin: &Path) -> anyhow::Result<Section> {
    const HOSTS: usize = 1_000;
    const RATE: f64 = 0.2;
    const WINDOW_SLICES: usize = 10;
    let mut section = Section::new(
        3,
        "Parked requests (1,000 hosts at 0.2/s, burst 1, concurrency 1, 10 per host)",
    );
    // Each parked request holds a client socket here and one in courtesy (same limit, inherited).
    let limit = open_files_limit().unwrap_or(1024);
    let per_host = (((limit as usize).saturating_sub(2 * HOSTS + 500)) / HOSTS).min(10);
    if per_host < 10 {
        section.notes.push(format!(
            "open-file limit {limit} allows only {per_host} parked requests per host; run \
             benches/scenarios.sh (it raises `ulimit -n`)."
        ));
    }
    if per_host == 0 {
        bail!("open-file limit {limit} too low for scenario 3");
    }
    let total = HOSTS * per_host;
    let ips: Vec<Ipv4Addr> = (0..HOSTS).map(host_ip).collect();
    let origin = Origin::start(&ips, false).await?;
    let courtesy = Courtesy::start(
        bin,
        "parked",
        &format!("rate = {RATE}\nburst = 1\nconcurrency = 1"),
        600,
    )
    .await?;
    let targets: Arc<Vec<(String, String)>> =
        Arc::new(ips.iter().map(|ip| target(*ip, origin.port)).collect());

    // Idle baseline: courtesy with nothing to do.
    let (t0, n0) = (courtesy.cpu_ticks(), courtesy.cpu_ns());
    tokio::time::sleep(Duration::from_secs(3)).await;
    let idle_pct = (courtesy.cpu_ns().saturating_sub(n0)) as f64 / 3e9 * 100.0;
    let idle_ticks = courtesy.cpu_ticks() - t0;

    // Open: per_host connections per host, each its own client, all opened before anything is
    // sent (connects paced by a semaphore so that the listen backlog never overflows). Opening
    // 10,000 takes seconds, longer than one token period: sending must not wait for it.
    let tally = Arc::new(Tally::default());
    let connecting = Arc::new(Semaphore::new(256));
    let opened = Arc::new(AtomicU64::new(0));
    let (go, ready) = watch::channel(false);
    let answer_deadline = Instant::now() + Duration::from_secs(240);
    let last_answer = Arc::new(Mutex::new(Instant::now()));
    let rss_before = courtesy.rss_kib();
    let mut tasks = Vec::with_capacity(total);
    for _round in 0..per_host {
        for (url, host) in targets.iter() {
            let (url, host) = (url.clone(), host.clone());
            let (tally, connecting, last_answer, opened, mut ready) = (
                tally.clone(),
                connecting.clone(),
                last_answer.clone(),
                opened.clone(),
                ready.clone(),
            );
            let proxy = courtesy.proxy;
            tasks.push(tokio::spawn(async move {
                let mut client = None;
                for _attempt in 0..3 {
                    let permit = connecting.acquire().await;
                    match tokio::time::timeout(Duration::from_secs(10), Client::connect(proxy))
                        .await
                    {
                        Ok(Ok(c)) => {
                            client = Some(c);
                            break;
                        }
                        _ => {
                            drop(permit);
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    }
                }
                opened.fetch_add(1, Ordering::Relaxed);
                let Some(mut client) = client else {
                    tally.add(0);
                    return;
                };
                if ready.wait_for(|go| *go).await.is_err() {
                    return;
                }
                match tokio::time::timeout_at(tokio_at(answer_deadline), client.get(&url, &host))
                    .await
                {
                    Ok(Ok((status, _))) => {
                        tally.add(status);
                        let mut last = last_answer.lock().unwrap_or_else(|p| p.into_inner());
                        *last = (*last).max(Instant::now());
                    }
                    _ => tally.add(0),
                }
            }));
        }
    }
    let open_start = Instant::now();
    let open_deadline = open_start + Duration::from_secs(60);
    while opened.load(Ordering::Relaxed) < total as u64 && Instant::now() < open_deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let open_took = open_start.elapsed();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let rss_open = courtesy.rss_kib();

    // Prime: one request per host spends its token.
    let prime_tally = Arc::new(Tally::default());
    let prime_deadline = Instant::now() + Duration::from_secs(60);
    let primers: Vec<JoinHandle<()>> = (0..64)
        .map(|k| {
            tokio::spawn(hammer(
                courtesy.proxy,
                targets.clone(),
                k,
                64,
                (HOSTS - k).div_ceil(64),
                prime_deadline,
                prime_tally.clone(),
            ))
        })
        .collect();
    join_all(primers, prime_deadline).await;
    let primed = origin.total();
    let primed_at = Instant::now();
    // Park: every request at once.
    let _ = go.send(true);

    // Wait until every request is inside courtesy: queued, in flight or already answered.
    let park_deadline = Instant::now() + Duration::from_secs(60);
    let mut inside = 0;
    let mut queued = 0;
    while Instant::now() < park_deadline {
        let hosts = courtesy.hosts().await?;
        queued = sum_field(&hosts, "queued");
        let in_flight = sum_field(&hosts, "in_flight");
        inside = queued + in_flight + (origin.total() - primed);
        if inside >= total as u64 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let parked_after = primed_at.elapsed();
    if inside < total as u64 {
        section.notes.push(format!(
            "only {inside} of {total} requests were inside courtesy after {:.0} s",
            parked_after.as_secs_f64()
        ));
    }
    let rss_parked = courtesy.rss_kib();

    // The window: 10 slices of 1 s; no admin calls inside it.
    let window_start = Instant::now();
    let (wt0, wn0, wo0) = (courtesy.cpu_ticks(), courtesy.cpu_ns(), origin.total());
    let mut slices = Vec::with_capacity(WINDOW_SLICES);
    let (mut ns, mut sent) = (wn0, wo0);
    for k in 1..=WINDOW_SLICES {
        tokio::time::sleep_until(tokio_at(window_start + Duration::from_secs(k as u64))).await;
        let (ns1, sent1) = (courtesy.cpu_ns(), origin.total());
        slices.push((ns1.saturating_sub(ns), sent1 - sent));
        (ns, sent) = (ns1, sent1);
    }
    let window = window_start.elapsed().as_secs_f64();
    let (wt1, wn1, wo1) = (courtesy.cpu_ticks(), courtesy.cpu_ns(), origin.total());
    let pct_ticks = (wt1 - wt0) as f64 / clk_tck() / window * 100.0;
    let pct_ns = (wn1.saturating_sub(wn0)) as f64 / 1e9 / window * 100.0;
    let forwarded = wo1 - wo0;
    let quiet: Vec<f64> = slices
        .iter()
        .filter(|(_, s)| *s == 0)
        .map(|(ns, _)| *ns as f64 / 1e9 * 100.0)
        .collect();
    let busy_ns: u64 = slices
        .iter()
        .filter(|(_, s)| *s > 0)
        .map(|(ns, _)| *ns)
        .sum();
    let mut quiet_sorted = quiet.clone();
    quiet_sorted.sort_by(f64::total_cmp);
    let queued_end = sum_field(&courtesy.hosts().await?, "queued");

    // Let them finish.
    join_all(tasks, answer_deadline + Duration::from_secs(5)).await;
    let finished_after = last_answer
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .saturating_duration_since(primed_at);
    let ok = tally.get(200);
    let rss_end = courtesy.rss_kib();
    courtesy.stop().await;

    section.rows.push(
        row(
            "requests inside courtesy before the window (queued at start)",
            format!("{total}"),
            format!("{inside} ({queued} queued)"),
        )
        .judged(inside >= total as u64),
    );
    section.rows.push(
        row(
            "courtesy CPU over 10 s while parked",
            "< 1 % of a core",
            format!(
                "{pct_ticks:.2} % (ticks), {pct_ns:.2} % (schedstat); {forwarded} requests forwarded \
                 in the window"
            ),
        )
        .judged(pct_ticks < 1.0),
    );
    section.rows.push(row(
        "… in the 1 s slices in which nothing left (pure parking)",
        "(info)",
        format!(
            "{} slices: median {:.3} %, max {:.3} %",
            quiet.len(),
            percentile(&quiet_sorted, 0.5),
            quiet_sorted.last().copied().unwrap_or(f64::NAN)
        ),
    ));
    section.rows.push(
        row(
            "answers 200 after the wait",
            format!("{total} of {total}"),
            format!("{ok} ({})", tally.describe()),
        )
        .judged(ok == total as u64),
    );
    section.notes.push(format!(
        "{total} client connections opened in {:.1} s (courtesy RSS {rss_before} → {rss_open} KiB: \
         {:.1} KiB per idle client connection); {HOSTS} hosts primed with one request each \
         ({primed} arrivals, answers {}); then the {total} requests sent at once, all inside \
         courtesy {:.1} s after priming. CPU slices \
         (ms CPU / requests forwarded) per 1 s: {}. The busy slices cost {:.1} ms CPU for \
         {forwarded} forwards ({:.0} µs each). Idle baseline before any load: {idle_pct:.3} % \
         ({idle_ticks} ticks in 3 s). Queued after the window: {queued_end}. Last answer {:.1} s \
         after priming (ideal: {:.0} s). courtesy RSS with {total} parked: {rss_parked} KiB \
         ({:.1} KiB per parked request over the open connections); at the end {rss_end} KiB.",
        open_took.as_secs_f64(),
        (rss_open as f64 - rss_before as f64) / total as f64,
        prime_tally.describe(),
        parked_after.as_secs_f64(),
        slices
            .iter()
            .map(|(ns, s)| format!("{:.1}/{s}", *ns as f64 / 1e6))
            .collect::<Vec<_>>()
            .join(", "),
        busy_ns as f64 / 1e6,
        busy_ns as f64 / 1e3 / forwarded.max(1) as f64,
        finished_after.as_secs_f64(),
        per_host as f64 / RATE,
        (rss_parked as f64 - rss_open as f64) / total as f64,
    ));
    section.notes.push(format!(
        "Each parked request is a `Proxy::serve` future held by its client connection's task: \
         size_of that future = {} B; of a `Limiter::admit` call's future = {} B.",
        future_size(|proxy, req, client| proxy.serve(req, client)),
        admit_size(|limiter| async move { limiter.admit("x", 80).await.is_ok() }),
    ));
    Ok(section)
}

// ---- scenario 4: fan-out fairness -----------------------------------------------------------------

async fn fan_out(bin: &Path) -> anyhow::Result<Section> {
    const HOSTS: usize = 200;
    const RATE: f64 = 5.0;
    const CONNS_PER_HOST: usize = 3;
    const RUN: Duration = Duration::from_secs(20);
    const WARMUP: f64 = 1.0;
    let mut section = Section::new(
        4,
        "Fan-out fairness (200 hosts at 5/s, burst 1, 3 connections per host, 20 s)",
    );
    let ips: Vec<Ipv4Addr> = (0..HOSTS).map(host_ip).collect();
    let origin = Origin::start(&ips, false).await?;
    let courtesy = Courtesy::start(
        bin,
        "fanout",
        &format!("rate = {RATE:.1}\nburst = 1\nconcurrency = {CONNS_PER_HOST}"),
        600,
    )
    .await?;
    let targets: Arc<Vec<(String, String)>> =
        Arc::new(ips.iter().map(|ip| target(*ip, origin.port)).collect());
    let tally = Arc::new(Tally::default());
    let (t0, n0) = (courtesy.cpu_ticks(), courtesy.cpu_ns());
    let start = Instant::now();
    let deadline = start + RUN;
    let tasks: Vec<JoinHandle<()>> = (0..HOSTS * CONNS_PER_HOST)
        .map(|k| {
            tokio::spawn(hammer(
                courtesy.proxy,
                targets.clone(),
                k % HOSTS,
                0,
                1_000_000,
                deadline,
                tally.clone(),
            ))
        })
        .collect();
    join_all(tasks, deadline + Duration::from_secs(5)).await;
    let (t1, n1) = (courtesy.cpu_ticks(), courtesy.cpu_ns());
    courtesy.stop().await;

    // Steady state: from 1 s after the start (past the first burst token) to the deadline.
    let from = start + Duration::from_secs_f64(WARMUP);
    let window = RUN.as_secs_f64() - WARMUP;
    let mut rates = Vec::with_capacity(HOSTS);
    let mut in_window = 0usize;
    let mut worst_second = 0usize;
    let mut all = 0usize;
    for idx in 0..HOSTS {
        all += origin.times(idx, start, deadline).len();
        let times = origin.times(idx, from, deadline);
        in_window += times.len();
        worst_second = worst_second.max(max_in_window(&times, 1.0));
        rates.push(rate_of(&times));
    }
    // The sum of the per-host rates: not quantised by where the window's edges fall between
    // one host's arrivals (a count over the window is, by up to one arrival per host).
    let aggregate: f64 = rates.iter().sum();
    let counted = in_window as f64 / window;
    let (min, max) = rates
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), r| {
            (lo.min(*r), hi.max(*r))
        });
    let target_agg = 0.98 * RATE * HOSTS as f64;
    section.rows.push(
        row(
            "aggregate origin arrivals/s (steady state, sum of per-host rates)",
            format!("≥ {target_agg:.0}/s"),
            format!("{aggregate:.1}/s"),
        )
        .judged(aggregate >= target_agg),
    );
    section.rows.push(
        row(
            "per-host rate min / max",
            format!(
                "within 2 % of {RATE}/s ({:.2}–{:.2})",
                RATE * 0.98,
                RATE * 1.02
            ),
            format!("{min:.3} / {max:.3}"),
        )
        .judged(min >= RATE * 0.98 && max <= RATE * 1.02),
    );
    section.rows.push(
        row(
            "per-host max arrivals in any 1 s window",
            format!("≤ {} (R + burst)", RATE as usize + 1),
            worst_second.to_string(),
        )
        .judged(worst_second <= RATE as usize + 1),
    );
    let cpu_ns = n1.saturating_sub(n0) as f64;
    section.notes.push(format!(
        "{all} arrivals in {:.0} s ({in_window} in the steady window of {window:.0} s); per-host \
         rate = (n − 1) / (last − first) over that window; arrivals counted in the window / its length: \
         {counted:.1}/s. Mean interval per host {:.3} ms (ideal {:.3} ms). Client answers: {}. \
         courtesy CPU: {:.1} % of a core by ticks, {:.0} µs per forwarded request (schedstat).",
        RUN.as_secs_f64(),
        1000.0 * HOSTS as f64 / aggregate,
        1000.0 / RATE,
        tally.describe(),
        (t1 - t0) as f64 / clk_tck() / RUN.as_secs_f64() * 100.0,
        cpu_ns / 1e3 / all.max(1) as f64
    ));
    Ok(section)
}

// ---- main -----------------------------------------------------------------------------------------

struct Args {
    only: Vec<u32>,
    e2e_hosts: usize,
    out: Option<PathBuf>,
    bin: PathBuf,
}

fn parse_args(args: &[String]) -> anyhow::Result<Args> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut parsed = Args {
        only: vec![1, 2, 3, 4],
        e2e_hosts: 5_000,
        out: Some(root.join("benches/SCENARIOS_RESULTS.md")),
        bin: std::env::var_os("COURTESY_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|| root.join("target/release/courtesy")),
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            // `cargo bench` passes --bench to harness = false targets.
            "--bench" => {}
            "--only" => {
                let v = it.next().context("--only needs a list such as 1,3")?;
                parsed.only = v
                    .split(',')
                    .map(|s| s.trim().parse::<u32>())
                    .collect::<Result<_, _>>()
                    .context("--only takes scenario numbers 1..4")?;
            }
            "--e2e-hosts" => {
                let v = it.next().context("--e2e-hosts needs a number")?;
                parsed.e2e_hosts = v.parse().context("--e2e-hosts takes a number")?;
                if !(10..=9_000).contains(&parsed.e2e_hosts) {
                    bail!("--e2e-hosts must be 10..=9000 (two sockets per host here)");
                }
            }
            "--out" => {
                let v = it.next().context("--out needs a path or -")?;
                parsed.out = (v != "-").then(|| PathBuf::from(v));
            }
            "--courtesy" => {
                parsed.bin = PathBuf::from(it.next().context("--courtesy needs a path")?);
            }
            other => bail!("unknown argument {other:?}"),
        }
    }
    Ok(parsed)
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib / 1024.0 / 1024.0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap_or_default()
        .trim()
        .to_string();
    format!("{cores} cores (nproc), CPU \"{cpu}\", {mem_gib:.0} GiB RAM, Linux {kernel}")
}

fn git_rev(root: &Path) -> String {
    let run = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(root)
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    };
    let rev = run(&["rev-parse", "--short", "HEAD"]);
    let dirty = !run(&["status", "--porcelain", "--untracked-files=no", "src"]).is_empty();
    if dirty {
        format!("{rev} (src/ has uncommitted changes)")
    } else {
        rev
    }
}

fn render(sections: &[Section], failures: &[String], started: &str, total: Duration) -> String {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut md = String::new();
    let _ = writeln!(md, "# courtesy performance scenarios (targets 2–5)\n");
    let _ = writeln!(md, "- Date: {started}");
    let _ = writeln!(md, "- Machine: {}", machine());
    let _ = writeln!(
        md,
        "- courtesy: release binary at commit {}, `RUST_LOG=warn`; origins and clients in the \
         bench process (tokio, hyper 1), loopback only",
        git_rev(&root)
    );
    let _ = writeln!(
        md,
        "- Ran with `benches/scenarios.sh` (`cargo bench --bench scenarios`); total {:.0} s\n",
        total.as_secs_f64()
    );
    let _ = writeln!(md, "| # | measure | target | measured | result |");
    let _ = writeln!(md, "|---|---|---|---|---|");
    for s in sections {
        for r in &s.rows {
            let result = match r.pass {
                Some(true) => "pass",
                Some(false) => "**FAIL**",
                None => "info",
            };
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} |",
                s.number, r.what, r.target, r.measured, result
            );
        }
    }
    for f in failures {
        let _ = writeln!(md, "| – | {f} | – | did not run | **ERROR** |");
    }
    let _ = writeln!(
        md,
        "\n| # | scenario | ran | CPU of other processes meanwhile | irq + softirq (all) |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|");
    for s in sections {
        let _ = writeln!(
            md,
            "| {} | {} | {:.1} s | {:.0} % of a core | {:.0} % of a core |",
            s.number,
            s.title,
            s.ran.as_secs_f64(),
            s.others_pct,
            s.irq_pct
        );
    }
    let _ = writeln!(
        md,
        "\nOther processes: machine user + system time minus this bench's and its courtesy's. \
         Interrupt time is charged to no process; it includes this bench's own loopback traffic."
    );
    let _ = writeln!(md, "\n## Details\n");
    for s in sections {
        let _ = writeln!(md, "### {}. {}\n", s.number, s.title);
        for n in &s.notes {
            let _ = writeln!(md, "- {n}");
        }
        let _ = writeln!(md);
    }
    md
}

async fn run(args: Args) -> anyhow::Result<String> {
    if !args.bin.is_file() {
        bail!(
            "no courtesy binary at {} (cargo build --release --bin courtesy, or set COURTESY_BIN)",
            args.bin.display()
        );
    }
    let started = jiff::Timestamp::now()
        .strftime("%Y-%m-%d %H:%M UTC")
        .to_string();
    let begin = Instant::now();
    let mut sections = Vec::new();
    let mut failures = Vec::new();
    for number in args.only.clone() {
        // Scenario 1 is about timing: on a shared machine, run it again (at most twice more) when
        // other processes used more than NOISE_PCT of a core meanwhile, and keep the quietest run.
        let attempts = if number == 1 { 3 } else { 1 };
        let mut best: Option<Section> = None;
        let mut tried = Vec::new();
        for attempt in 1..=attempts {
            eprintln!("[scenarios] scenario {number} (attempt {attempt}) …");
            match measured(&args, number).await {
                Ok(s) => {
                    eprintln!(
                        "[scenarios] scenario {number} done in {:.1} s (other processes: {:.0} % \
                         of a core)",
                        s.ran.as_secs_f64(),
                        s.others_pct
                    );
                    tried.push(format!(
                        "attempt {attempt}: other processes {:.0} % of a core; {}",
                        s.others_pct,
                        s.rows
                            .iter()
                            .map(|r| format!("{} {}", r.what, r.measured))
                            .collect::<Vec<_>>()
                            .join("; ")
                    ));
                    let quiet = s.others_pct <= NOISE_PCT;
                    if best.as_ref().is_none_or(|b| s.others_pct < b.others_pct) {
                        best = Some(s);
                    }
                    if quiet {
                        break;
                    }
                }
                Err(e) => {
                    eprintln!("[scenarios] scenario {number} failed: {e:#}");
                    failures.push(format!("scenario {number}: {e:#}").replace('|', "/"));
                    break;
                }
            }
        }
        if let Some(mut s) = best {
            if tried.len() > 1 {
                s.notes.push(format!(
                    "Runs (the quietest is reported; a run is repeated when other processes used \
                     more than {NOISE_PCT:.0} % of a core): {}.",
                    tried.join(" / ").replace("\\|", "|")
                ));
            }
            sections.push(s);
        }
    }
    Ok(render(&sections, &failures, &started, begin.elapsed()))
}

/// Other processes' CPU (% of a core) above which scenario 1 is run again.
const NOISE_PCT: f64 = 20.0;

/// Runs one scenario and notes how long it took and what else the machine did meanwhile.
async fn measured(args: &Args, number: u32) -> anyhow::Result<Section> {
    let t = Instant::now();
    let (busy0, own0) = (machine_ticks(), own_and_children_ticks());
    let mut s = match number {
        1 => pacing(&args.bin).await?,
        2 => {
            let mut s = Section::new(2, "Many hosts");
            host_table(&mut s).await?;
            for close in [false, true] {
                many_hosts_e2e(&args.bin, &mut s, args.e2e_hosts, close).await?;
            }
            s
        }
        3 => parked(&args.bin).await?,
        4 => fan_out(&args.bin).await?,
        other => bail!("there is no scenario {other}"),
    };
    s.ran = t.elapsed();
    if let (Some((b0, i0)), Some(o0), Some((b1, i1)), Some(o1)) =
        (busy0, own0, machine_ticks(), own_and_children_ticks())
    {
        let per_core = clk_tck() * s.ran.as_secs_f64() / 100.0;
        s.others_pct = (b1 - b0).saturating_sub(o1 - o0) as f64 / per_core;
        s.irq_pct = (i1 - i0) as f64 / per_core;
    }
    Ok(s)
}

fn main() -> anyhow::Result<()> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if let Some(pos) = argv.iter().position(|a| a == "--child-limiter") {
        let n: usize = argv
            .get(pos + 1)
            .context("--child-limiter needs N")?
            .parse()?;
        if n > 2_000_000 {
            bail!("--child-limiter N must be at most 2000000");
        }
        return child_limiter(n);
    }
    let args = parse_args(&argv)?;
    let out = args.out.clone();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let report = rt.block_on(run(args))?;
    // Background connection tasks may still be winding down; do not wait for them.
    rt.shutdown_timeout(Duration::from_secs(2));
    println!("{report}");
    if let Some(path) = out {
        std::fs::write(&path, &report).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("[scenarios] wrote {}", path.display());
    }
    Ok(())
}
