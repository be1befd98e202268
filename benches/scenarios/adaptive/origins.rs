//! The rate-limited origins of scenario 7, on loopback: a limit of 5 requests a second kept
//! three ways (whole one-second windows as in the seed article's Practice exercise, a token
//! bucket with a burst of 2, a sliding one-second window), each answering 429 with
//! `Retry-After` beyond it; the same limits changing 5 → 2 → 8; that changing limit announced
//! in RateLimit headers (the draft's fields over 10 s windows, counted down; the quota alone
//! over 1 s windows); one-second windows announcing whole-second resets (the draft's `t=`, and
//! `X-RateLimit-Reset` as a Unix time, the windows on the wall clock's seconds); and a server
//! that never says 429 but answers in 100 ms plus 50 ms per request it has in flight.
//!
//! Every origin records each arrival and every span in which it said nothing may arrive (a
//! 429's `Retry-After`, and the stated reset of a window it announced spent).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, RETRY_AFTER};
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// How an origin without RateLimit headers keeps its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keeps {
    /// At most the limit in each whole second since the start (the Practice exercise).
    Fixed,
    /// A token bucket refilling at the limit, burst 2.
    Bucket,
    /// At most the limit in any second.
    Sliding,
}

impl Keeps {
    pub fn name(self) -> &'static str {
        match self {
            Keeps::Fixed => "fixed 1 s window",
            Keeps::Bucket => "token bucket, burst 2",
            Keeps::Sliding => "sliding 1 s window",
        }
    }
}

/// What an origin does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// 5/s, kept as said.
    Constant(Keeps),
    /// 5, 2, then 8 a second, kept as said (see [`phase`]).
    Changing(Keeps),
    /// The changing limit over 10 s windows (50, 20, 80 each), announced and counted down in
    /// the draft's fields: `RateLimit-Policy: "default";q=Q;w=10`, `RateLimit: "default";r=R;t=T`.
    Counted,
    /// The changing limit per whole second, its quota alone announced: `RateLimit-Policy: Q;w=1`.
    QuotaAlone,
    /// 5 per whole second, counted down in the draft's fields with whole-second resets.
    WholeSeconds,
    /// 5 per second of the wall clock, counted down in `X-RateLimit-Limit/-Remaining/-Reset`,
    /// the reset a Unix time in whole seconds.
    XWholeSeconds,
    /// No limit; slower with requests in flight.
    Latency,
}

impl Profile {
    pub fn name(self) -> String {
        match self {
            Profile::Constant(k) => format!("constant 5/s, {}", k.name()),
            Profile::Changing(k) => format!("5 → 2 → 8, {}", k.name()),
            Profile::Counted => {
                "5 → 2 → 8, announced and counted (draft fields, 10 s windows)".into()
            }
            Profile::QuotaAlone => "5 → 2 → 8, quota alone announced (1 s windows)".into(),
            Profile::WholeSeconds => {
                "constant 5/s, 1 s windows, draft fields, whole-second resets".into()
            }
            Profile::XWholeSeconds => {
                "constant 5/s, 1 s windows, X-RateLimit, reset a Unix time".into()
            }
            Profile::Latency => "latency only (100 ms + 50 ms per request in flight)".into(),
        }
    }
}

/// How long each limit of a changing origin lasts in a run of `seconds`: a minute, or a
/// third of a shorter run.
pub fn phase(seconds: f64) -> f64 {
    (seconds / 3.0).min(60.0)
}

/// The limit in force `t` seconds into a run of `seconds`.
fn limit_at(profile: Profile, t: f64, seconds: f64) -> f64 {
    match profile {
        Profile::Changing(_) | Profile::Counted | Profile::QuotaAlone => {
            let phase = phase(seconds);
            if t < phase {
                5.0
            } else if t < 2.0 * phase {
                2.0
            } else {
                8.0
            }
        }
        Profile::Latency => f64::INFINITY,
        _ => 5.0,
    }
}

/// One request that reached an origin.
#[derive(Debug, Clone, Copy)]
pub struct Arrival {
    /// Seconds since the start.
    pub at: f64,
    pub status: u16,
    /// Seconds the origin took (the latency origin), else 0.
    pub took: f64,
}

/// What an origin saw.
#[derive(Default)]
pub struct OriginLog {
    pub arrivals: Vec<Arrival>,
    /// Spans in which the origin said nothing may arrive: `(from, until)`, seconds since the
    /// start.
    pub windows: Vec<(f64, f64)>,
    /// The current window (its index) and its count.
    window: (i64, u32),
    /// The token bucket: tokens and when they were counted.
    tokens: Option<(f64, f64)>,
    /// Arrivals accepted in the last second (sliding window).
    accepted: VecDeque<f64>,
    in_flight: u32,
}

/// Starts an origin for `profile` on `ip`; returns its port, its log and its task.
pub async fn start(
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

/// What an origin decided for one arrival.
struct Decision {
    /// `Retry-After` in seconds, if refused.
    refused: Option<u64>,
    /// RateLimit header fields.
    fields: Vec<(&'static str, String)>,
}

/// The latency origin's answer.
async fn slow_answer(log: &Mutex<OriginLog>, t: f64) -> Response<Full<Bytes>> {
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
    Response::new(Full::new(Bytes::from_static(b"ok")))
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
        return slow_answer(log, t).await;
    }
    let limit = limit_at(profile, t, seconds);
    let decision = {
        let mut l = log.lock().unwrap_or_else(|p| p.into_inner());
        let d = decide(&mut l, profile, t, limit);
        l.arrivals.push(Arrival {
            at: t,
            status: if d.refused.is_some() { 429 } else { 200 },
            took: 0.0,
        });
        if let Some(wait) = d.refused {
            l.windows.push((t, t + wait as f64));
        }
        d
    };
    let mut response = match decision.refused {
        None => Response::new(Full::new(Bytes::from_static(b"ok"))),
        Some(wait) => {
            let mut r = Response::new(Full::new(Bytes::from_static(b"slow down")));
            *r.status_mut() = hyper::StatusCode::TOO_MANY_REQUESTS;
            r.headers_mut().insert(RETRY_AFTER, HeaderValue::from(wait));
            r
        }
    };
    for (name, value) in decision.fields {
        if let Ok(value) = HeaderValue::from_str(&value) {
            response.headers_mut().insert(name, value);
        }
    }
    response
}

/// Counts an arrival at `t` (seconds on the window's own clock) in its window of `window`
/// seconds with `quota`: whether it is over, the count so far and when the window ends.
fn count(l: &mut OriginLog, t: f64, window: f64, quota: u32) -> (bool, u32, f64) {
    let index = (t / window).floor() as i64;
    if l.window.0 != index {
        l.window = (index, 0);
    }
    l.window.1 += 1;
    (l.window.1 > quota, l.window.1, (index + 1) as f64 * window)
}

/// Decides one arrival at `t` under `limit`, and notes a spent window's stated reset.
fn decide(l: &mut OriginLog, profile: Profile, t: f64, limit: f64) -> Decision {
    let whole = |secs: f64| secs.ceil().max(1.0) as u64;
    match profile {
        Profile::Constant(keeps) | Profile::Changing(keeps) => Decision {
            refused: keep(l, keeps, t, limit),
            fields: Vec::new(),
        },
        Profile::Counted | Profile::WholeSeconds => {
            let window = if profile == Profile::Counted {
                10.0
            } else {
                1.0
            };
            let quota = (limit * window) as u32;
            let (over, n, end) = count(l, t, window, quota);
            let remaining = quota.saturating_sub(n);
            let reset = whole(end - t);
            if !over && remaining == 0 {
                l.windows.push((t, t + reset as f64));
            }
            Decision {
                refused: over.then_some(reset),
                fields: vec![
                    (
                        "ratelimit-policy",
                        format!("\"default\";q={quota};w={}", window as u32),
                    ),
                    ("ratelimit", format!("\"default\";r={remaining};t={reset}")),
                ],
            }
        }
        Profile::XWholeSeconds => {
            // The wall clock's seconds: `t` moved onto it.
            let wall = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs_f64();
            let quota = limit as u32;
            let (over, n, end_wall) = count(l, wall, 1.0, quota);
            let end = t + (end_wall - wall);
            let remaining = quota.saturating_sub(n);
            if !over && remaining == 0 {
                l.windows.push((t, end));
            }
            Decision {
                refused: over.then_some(whole(end - t)),
                fields: vec![
                    ("x-ratelimit-limit", quota.to_string()),
                    ("x-ratelimit-remaining", remaining.to_string()),
                    ("x-ratelimit-reset", (end_wall.round() as u64).to_string()),
                ],
            }
        }
        Profile::QuotaAlone => {
            let quota = limit as u32;
            let (over, _, end) = count(l, t, 1.0, quota);
            Decision {
                refused: over.then_some(whole(end - t)),
                fields: vec![("ratelimit-policy", format!("{quota};w=1"))],
            }
        }
        Profile::Latency => Decision {
            refused: None,
            fields: Vec::new(),
        },
    }
}

/// A limit without headers, kept as `keeps` says: the `Retry-After` of a refusal.
fn keep(l: &mut OriginLog, keeps: Keeps, t: f64, limit: f64) -> Option<u64> {
    let whole = |secs: f64| secs.ceil().max(1.0) as u64;
    match keeps {
        Keeps::Fixed => {
            let (over, _, end) = count(l, t, 1.0, limit as u32);
            over.then(|| whole(end - t))
        }
        Keeps::Bucket => {
            const BURST: f64 = 2.0;
            let (tokens, at) = l.tokens.unwrap_or((BURST, t));
            let tokens = (tokens + (t - at) * limit).min(BURST);
            if tokens >= 1.0 {
                l.tokens = Some((tokens - 1.0, t));
                None
            } else {
                l.tokens = Some((tokens, t));
                Some(whole((1.0 - tokens) / limit))
            }
        }
        Keeps::Sliding => {
            while l.accepted.front().is_some_and(|a| *a <= t - 1.0) {
                l.accepted.pop_front();
            }
            if (l.accepted.len() as f64) < limit.floor() {
                l.accepted.push_back(t);
                None
            } else {
                let oldest = l.accepted.front().copied().unwrap_or(t);
                Some(whole(oldest + 1.0 - t))
            }
        }
    }
}
