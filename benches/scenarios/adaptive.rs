//! Scenario 7, adaptive rate end to end (issue 16): courtesy's controllers against real
//! rate-limited origins on loopback. Five origins: the seed article's Practice exercise (at most
//! 5 requests in each whole second, 429 with `Retry-After: 1` beyond), the same with a limit that
//! changes (5, 2, then 8 a second, a minute each, or a third of a shorter run), that changing
//! limit announced in RateLimit headers two ways (the draft's fields over 10 s windows, counted
//! down; the quota alone, `RateLimit-Policy: 5;w=1`), and one that never says 429 but answers in
//! 100 ms plus 50 ms per request it has in flight. Each is run with
//! courtesy at 10/s adaptive with `controller = "cubic"` and `"aimd"`, and with an
//! AutoThrottle-style delay in the clients (courtesy not adaptive, its cooldowns still in force).
//! Eight polite clients per run (each sleeps a 429's `Retry-After`); every run goes at once, each
//! on its own origin address and its own courtesy, for `--adaptive-seconds` (default 300).

use std::convert::Infallible;
use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, RETRY_AFTER};
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::common::client::Client;
use crate::courtesy::Courtesy;
use crate::load::{join_all, target, tokio_at};
use crate::origin::host_ip;
use crate::report::{row, Section};

/// What an origin does.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Profile {
    /// At most 5 a whole second.
    Constant,
    /// 5, 2, then 8 a whole second, a minute each (see [`phase`]).
    Changing,
    /// The changing limit over 10 s windows (50, 20, 80 each), announced and counted down in
    /// the draft's fields: `RateLimit-Policy: "default";q=Q;w=10`, `RateLimit: "default";r=R;t=T`.
    Counted,
    /// The changing limit per whole second, its quota alone announced: `RateLimit-Policy: Q;w=1`.
    QuotaAlone,
    /// No limit; slower with requests in flight.
    Latency,
}

/// Who adapts the rate.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Driver {
    Cubic,
    Aimd,
    AutoThrottle,
}

impl Driver {
    fn name(self) -> &'static str {
        match self {
            Driver::Cubic => "cubic",
            Driver::Aimd => "aimd",
            Driver::AutoThrottle => "autothrottle",
        }
    }
}

/// One request that reached an origin.
#[derive(Debug, Clone, Copy)]
struct Arrival {
    /// Seconds since the start.
    at: f64,
    status: u16,
    /// Seconds the origin took (the latency origin), else 0.
    took: f64,
}

#[derive(Default)]
struct OriginLog {
    arrivals: Vec<Arrival>,
    /// Windows announced with a 429: `(from, until)`, seconds since the start.
    windows: Vec<(f64, f64)>,
    /// The current window (its index) and its count.
    window: (i64, u32),
    in_flight: u32,
}

/// How long each limit of the changing origin lasts in a run of `seconds`: a minute, or a
/// third of a shorter run.
fn phase(seconds: f64) -> f64 {
    (seconds / 3.0).min(60.0)
}

/// The limit in force `t` seconds into a run of `seconds`.
fn limit_at(profile: Profile, t: f64, seconds: f64) -> u32 {
    let phase = phase(seconds);
    match profile {
        Profile::Constant => 5,
        Profile::Changing | Profile::Counted | Profile::QuotaAlone if t < phase => 5,
        Profile::Changing | Profile::Counted | Profile::QuotaAlone if t < 2.0 * phase => 2,
        Profile::Changing | Profile::Counted | Profile::QuotaAlone => 8,
        Profile::Latency => u32::MAX,
    }
}

/// Starts an origin for `profile` on `ip`; returns its port and its log.
async fn start_origin(
    ip: Ipv4Addr,
    profile: Profile,
    start: Instant,
    seconds: f64,
) -> anyhow::Result<(u16, Arc<Mutex<OriginLog>>, JoinHandle<()>)> {
    let listener = TcpListener::bind((ip, 0)).await?;
    let port = listener.local_addr()?.port();
    let log = Arc::new(Mutex::new(OriginLog::default()));
    let shared = log.clone();
    let task = tokio::spawn(async move {
        loop {
            let stream = crate::common::accept::next_connection(&listener).await;
            let log = shared.clone();
            tokio::spawn(async move {
                let service = service_fn(move |_req: Request<Incoming>| {
                    let log = log.clone();
                    async move { Ok::<_, Infallible>(answer(&log, profile, start, seconds).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok((port, log, task))
}

/// The origin's answer to one request.
async fn answer(
    log: &Mutex<OriginLog>,
    profile: Profile,
    start: Instant,
    seconds: f64,
) -> Response<Full<Bytes>> {
    let t = start.elapsed().as_secs_f64();
    if profile == Profile::Latency {
        let took = {
            let mut l = log.lock().unwrap_or_else(|p| p.into_inner());
            l.in_flight += 1;
            0.1 + 0.05 * f64::from(l.in_flight)
        };
        tokio::time::sleep(Duration::from_secs_f64(took)).await;
        let mut l = log.lock().unwrap_or_else(|p| p.into_inner());
        l.in_flight -= 1;
        l.arrivals.push(Arrival {
            at: t,
            status: 200,
            took,
        });
        return Response::new(Full::new(Bytes::from_static(b"ok")));
    }
    let mut l = log.lock().unwrap_or_else(|p| p.into_inner());
    let window = if profile == Profile::Counted {
        10.0
    } else {
        1.0
    };
    let index = (t / window).floor() as i64;
    if l.window.0 != index {
        l.window = (index, 0);
    }
    l.window.1 += 1;
    let quota = limit_at(profile, t, seconds) * window as u32;
    let allowed = l.window.1 <= quota;
    l.arrivals.push(Arrival {
        at: t,
        status: if allowed { 200 } else { 429 },
        took: 0.0,
    });
    let end = (index + 1) as f64 * window;
    let wait = (end - t).ceil().max(1.0) as u64;
    let remaining = quota.saturating_sub(l.window.1);
    if !allowed {
        l.windows.push((t, t + wait as f64));
    }
    drop(l);
    let mut response = if allowed {
        Response::new(Full::new(Bytes::from_static(b"ok")))
    } else {
        let mut r = Response::new(Full::new(Bytes::from_static(b"slow down")));
        *r.status_mut() = hyper::StatusCode::TOO_MANY_REQUESTS;
        r.headers_mut().insert(RETRY_AFTER, HeaderValue::from(wait));
        r
    };
    let fields = match profile {
        Profile::Counted => vec![
            ("ratelimit-policy", format!("\"default\";q={quota};w=10")),
            ("ratelimit", format!("\"default\";r={remaining};t={wait}")),
        ],
        Profile::QuotaAlone => vec![("ratelimit-policy", format!("{quota};w=1"))],
        _ => Vec::new(),
    };
    for (name, value) in fields {
        if let Ok(value) = HeaderValue::from_str(&value) {
            response.headers_mut().insert(name, value);
        }
    }
    response
}

/// AutoThrottle's delay, shared by the clients of one run (Scrapy keeps one per site): each
/// answer's latency is a target delay, the delay moves halfway to it and never below it; an
/// answer that is not a 200 never shortens it. Between 0.1 s and 60 s.
struct Throttle {
    delay: f64,
    next: Instant,
}

impl Throttle {
    /// The instant the next request may go, taking it.
    fn slot(&mut self) -> Instant {
        let at = self.next.max(Instant::now());
        self.next = at + Duration::from_secs_f64(self.delay);
        at
    }

    fn observe(&mut self, status: u16, latency: f64) {
        let next = ((self.delay + latency) / 2.0).max(latency).clamp(0.1, 60.0);
        if status == 200 || next > self.delay {
            self.delay = next;
        }
    }
}

/// A polite client: one request at a time until `deadline` (at most 5000), sleeping a 429's
/// `Retry-After`; with `throttle`, each request waits for its AutoThrottle slot first.
async fn polite(
    courtesy: std::net::SocketAddr,
    url: String,
    host: String,
    deadline: Instant,
    throttle: Option<Arc<Mutex<Throttle>>>,
) {
    let Ok(mut client) = Client::connect(courtesy).await else {
        return;
    };
    for _ in 0..5000 {
        if Instant::now() >= deadline {
            return;
        }
        if let Some(t) = &throttle {
            let slot = t.lock().unwrap_or_else(|p| p.into_inner()).slot();
            tokio::time::sleep_until(tokio_at(slot.min(deadline))).await;
        }
        let sent = Instant::now();
        let got = tokio::time::timeout_at(tokio_at(deadline), client.get_with_headers(&url, &host));
        let Ok(Ok((status, headers, _))) = got.await else {
            return;
        };
        if let Some(t) = &throttle {
            let latency = sent.elapsed().as_secs_f64();
            t.lock()
                .unwrap_or_else(|p| p.into_inner())
                .observe(status, latency);
        }
        if status == 429 || status == 503 {
            let wait = headers
                .get(RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(1);
            let until = (Instant::now() + Duration::from_secs(wait.min(600))).min(deadline);
            tokio::time::sleep_until(tokio_at(until)).await;
        }
    }
}

/// What one run saw at its origin.
struct Outcome {
    profile: Profile,
    driver: Driver,
    arrivals: Vec<Arrival>,
    inside: usize,
}

impl Outcome {
    fn between(&self, from: f64, to: f64) -> impl Iterator<Item = &Arrival> {
        self.arrivals
            .iter()
            .filter(move |a| a.at >= from && a.at < to)
    }

    fn served(&self, from: f64, to: f64) -> f64 {
        self.between(from, to).filter(|a| a.status == 200).count() as f64 / (to - from)
    }

    fn throttled(&self, from: f64, to: f64) -> usize {
        self.between(from, to).filter(|a| a.status == 429).count()
    }

    fn share_429(&self, from: f64, to: f64) -> f64 {
        self.throttled(from, to) as f64 / self.between(from, to).count().max(1) as f64
    }

    /// (highest − lowest) ÷ mean of the 5 s rates in `[from, to)`.
    fn swing(&self, from: f64, to: f64) -> f64 {
        let rates: Vec<f64> = (0..((to - from) / 5.0) as usize)
            .map(|i| self.served(from + 5.0 * i as f64, from + 5.0 * (i + 1) as f64))
            .collect();
        let mean = rates.iter().sum::<f64>() / rates.len().max(1) as f64;
        let hi = rates.iter().copied().fold(0.0, f64::max);
        let lo = rates.iter().copied().fold(f64::INFINITY, f64::min);
        (hi - lo) / mean.max(f64::MIN_POSITIVE)
    }

    /// Seconds after `from` until 5 s in a row first served `share` of `limit` (checked each
    /// second, windows ending by `to`), or `None`.
    fn time_to(&self, from: f64, to: f64, limit: f64, share: f64) -> Option<f64> {
        (0..(to - from - 5.0).max(0.0) as usize)
            .map(|i| from + i as f64)
            .find(|t| self.served(*t, t + 5.0) >= share * limit)
            .map(|t| t - from)
    }

    fn mean_took(&self, from: f64, to: f64) -> f64 {
        let took: Vec<f64> = self.between(from, to).map(|a| a.took).collect();
        took.iter().sum::<f64>() / took.len().max(1) as f64
    }
}

/// The `[defaults]` of courtesy for one run.
fn defaults(profile: Profile, driver: Driver) -> String {
    let adaptive = match driver {
        Driver::Cubic => "adaptive = true\ncontroller = \"cubic\"",
        Driver::Aimd => "adaptive = true\ncontroller = \"aimd\"",
        Driver::AutoThrottle => "adaptive = false",
    };
    let shape = match profile {
        Profile::Latency => "concurrency = 8\nmax_rate = 20\nslow_response_ms = 500",
        _ => "concurrency = 1\nmax_rate = 10",
    };
    format!("rate = 10\nburst = 1\n{adaptive}\n{shape}\non_cooldown = \"reject\"")
}

/// Runs scenario 7 against the courtesy binary `bin`, each run `seconds` long.
pub async fn run(bin: &Path, seconds: u64) -> anyhow::Result<Section> {
    let secs = seconds as f64;
    let mut section = Section::new(
        7,
        &format!("Adaptive rate end to end (8 polite clients, {seconds} s per run)"),
    );
    let start = Instant::now() + Duration::from_secs(2);
    let deadline = start + Duration::from_secs(seconds);
    let mut runs = Vec::new();
    let mut tasks = Vec::new();
    let profiles = [
        Profile::Constant,
        Profile::Changing,
        Profile::Counted,
        Profile::QuotaAlone,
        Profile::Latency,
    ];
    let drivers = [Driver::Cubic, Driver::Aimd, Driver::AutoThrottle];
    for (p, profile) in profiles.iter().enumerate() {
        for (d, driver) in drivers.iter().enumerate() {
            let ip = host_ip(600 + p * 3 + d);
            let (port, log, origin) = start_origin(ip, *profile, start, secs).await?;
            let name = format!("adaptive-{}-{}", p, driver.name());
            let courtesy = Courtesy::start(bin, &name, &defaults(*profile, *driver), 600).await?;
            let throttle = (*driver == Driver::AutoThrottle).then(|| {
                Arc::new(Mutex::new(Throttle {
                    delay: 0.1,
                    next: start,
                }))
            });
            let (url, host) = target(ip, port);
            for _ in 0..8 {
                let (url, host, throttle) = (url.clone(), host.clone(), throttle.clone());
                let proxy = courtesy.proxy;
                tasks.push(tokio::spawn(async move {
                    tokio::time::sleep_until(tokio_at(start)).await;
                    polite(proxy, url, host, deadline, throttle).await;
                }));
            }
            runs.push((*profile, *driver, log, origin, courtesy));
        }
    }
    join_all(tasks, deadline + Duration::from_secs(10)).await;
    let mut outcomes = Vec::new();
    for (profile, driver, log, origin, courtesy) in runs {
        courtesy.stop().await;
        origin.abort();
        let l = log.lock().unwrap_or_else(|p| p.into_inner());
        let inside = l
            .arrivals
            .iter()
            .filter(|a| {
                l.windows
                    .iter()
                    .any(|(from, until)| a.at > *from && a.at + 0.005 < *until)
            })
            .count();
        outcomes.push(Outcome {
            profile,
            driver,
            arrivals: l.arrivals.clone(),
            inside,
        });
    }
    let warm = (secs / 5.0).min(60.0);
    let phase = phase(secs);
    for o in &outcomes {
        let name = o.driver.name();
        match o.profile {
            Profile::Constant => {
                let served = o.served(warm, secs) / 5.0;
                let share = o.share_429(warm, secs);
                section.rows.push(
                    row(
                        format!("constant 5/s, {name}: served ÷ limit / 429s / inside a window, after {warm:.0} s"),
                        "≥ 90 % / ≤ 1 % / 0",
                        format!("{:.1} % / {:.2} % / {}", served * 100.0, share * 100.0, o.inside),
                    )
                    .judged(served >= 0.9 && share <= 0.01 && o.inside == 0),
                );
            }
            Profile::Changing | Profile::Counted | Profile::QuotaAlone => {
                let origin = match o.profile {
                    Profile::Counted => "announced and counted (10 s windows), ",
                    Profile::QuotaAlone => "quota alone announced, ",
                    _ => "",
                };
                let changes: Vec<(f64, usize)> = [(phase, 2.0), (2.0 * phase, 8.0)]
                    .iter()
                    .map(|(at, limit)| {
                        let share = o.served(at + 10.0, at + 20.0) / limit;
                        (share, o.throttled(*at, at + phase))
                    })
                    .collect();
                let mut cells: Vec<String> = changes
                    .iter()
                    .map(|(share, n)| format!("{:.0} % ({n} 429s)", share * 100.0))
                    .collect();
                let rise = 2.0 * phase;
                cells.push(match o.time_to(rise, (rise + phase).min(secs), 8.0, 0.9) {
                    Some(t) => format!("90 % of 8/s after {t:.0} s"),
                    None => "90 % of 8/s not reached".to_string(),
                });
                let pass = o.inside == 0
                    && changes
                        .iter()
                        .all(|(share, n)| (0.9..=1.0).contains(share) && *n <= 3);
                section.rows.push(
                    row(
                        format!("5 → 2 → 8, {origin}{name}: served 10–20 s after each change ÷ new limit (429s in the phase after it), time to 90 % of the rise"),
                        "90–100 % (≤ 3) each, 0 inside",
                        format!("{}; inside a window: {}", cells.join(", "), o.inside),
                    )
                    .judged(pass),
                );
            }
            Profile::Latency => {
                let from = secs / 3.0;
                let (swing, took) = (o.swing(from, secs), o.mean_took(from, secs));
                section.rows.push(
                    row(
                        format!("latency under load, {name}: rate / swing of 5 s rates / mean time to answer, after {from:.0} s"),
                        "swing ≤ 20 %, ≤ 500 ms",
                        format!(
                            "{:.2}/s / {:.0} % / {:.0} ms",
                            o.served(from, secs),
                            swing * 100.0,
                            took * 1000.0
                        ),
                    )
                    .judged(swing <= 0.2 && took <= 0.5),
                );
            }
        }
    }
    section.notes.push(
        "Every run at once, each with its own courtesy (release binary, `RUST_LOG=warn`) and \
         origin address; courtesy at rate 10, burst 1, `on_cooldown = \"reject\"`; the \
         AutoThrottle runs pace in the clients (one shared delay, Scrapy's rule with target \
         concurrency 1, from 0.1 s) through a courtesy that does not adapt. Served rates count \
         200s at the origin; the time to answer is the origin's own (latency profile)."
            .to_string(),
    );
    Ok(section)
}
