//! Simulated origins for the controller simulation: a rate limit kept three ways (a token bucket
//! with a small burst, a fixed one-second window, a sliding one-second window), each answering
//! 429 with `Retry-After` beyond it, a limit that changes on a schedule, and a server that never
//! says no but slows down with the requests it has in flight, and a fixed window that announces
//! its quota in RateLimit headers (three styles). Times are seconds from the start.

use rand::rngs::StdRng;
use rand::Rng;

/// How the server keeps its limit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Kind {
    /// Refills at the limit up to `burst` tokens; `Retry-After` is the time to the next token,
    /// rounded up to whole seconds.
    TokenBucket { burst: f64 },
    /// At most the limit per whole second; `Retry-After: 1`, as the seed article's origin.
    FixedWindow,
    /// At most the limit in any second; `Retry-After` until the oldest counted request leaves.
    SlidingWindow,
    /// No limit; the time to answer is `base + per_request × requests in flight` seconds.
    Latency { base: f64, per_request: f64 },
    /// At most `limit × window` requests in each window of `window` whole seconds, announced on
    /// every answer in RateLimit headers of `style`; beyond it a 429 with `Retry-After` until
    /// the window ends (in whole seconds).
    Announcing { style: Style, window: u32 },
}

/// The wall-clock time (Unix seconds) of the simulation's start, for resets given as epoch
/// times.
pub(super) const WALL_START: u64 = 1_700_000_000;

/// How a server announces its quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Style {
    /// The IETF draft: `RateLimit-Policy: "default";q=Q;w=W` and `RateLimit: "default";r=R;t=T`,
    /// the reset in whole seconds from now.
    Draft,
    /// Its older form: `RateLimit-Policy: Q;w=W` and `RateLimit: limit=Q, remaining=R, reset=T`.
    Older,
    /// The common `X-RateLimit-Limit`, `-Remaining` and `-Reset`, the reset as a Unix time (no
    /// window said).
    XPrefixed,
    /// The quota alone, `RateLimit-Policy: Q;w=W`: nothing counts the window down.
    PolicyOnly,
}

impl Style {
    /// The fields announcing `quota` per `window` seconds with `remaining` left, at `at`, the
    /// window ending at `end` (seconds from the start).
    fn fields(
        self,
        (quota, window): (u32, u32),
        remaining: u32,
        at: f64,
        end: f64,
    ) -> Vec<(&'static str, String)> {
        let reset = (end - at).ceil().max(1.0) as u64;
        match self {
            Style::Draft => vec![
                (
                    "ratelimit-policy",
                    format!("\"default\";q={quota};w={window}"),
                ),
                ("ratelimit", format!("\"default\";r={remaining};t={reset}")),
            ],
            Style::Older => vec![
                ("ratelimit-policy", format!("{quota};w={window}")),
                (
                    "ratelimit",
                    format!("limit={quota}, remaining={remaining}, reset={reset}"),
                ),
            ],
            Style::PolicyOnly => vec![("ratelimit-policy", format!("{quota};w={window}"))],
            Style::XPrefixed => vec![
                ("x-ratelimit-limit", quota.to_string()),
                ("x-ratelimit-remaining", remaining.to_string()),
                (
                    "x-ratelimit-reset",
                    (WALL_START + end.round() as u64).to_string(),
                ),
            ],
        }
    }
}

impl Style {
    /// The instant (seconds from the start) a reset said at `at` for a window ending at `end`
    /// stands for, if the style says one.
    fn stated_reset(self, at: f64, end: f64) -> Option<f64> {
        match self {
            Style::Draft | Style::Older => Some(at + (end - at).ceil().max(1.0)),
            Style::XPrefixed => Some(end.round()),
            Style::PolicyOnly => None,
        }
    }
}

/// What the server said to one request.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Reply {
    /// 200 or 429.
    pub(super) status: u16,
    /// Seconds from the request leaving courtesy to the response's headers.
    pub(super) latency: f64,
    /// `Retry-After` in seconds, on a 429.
    pub(super) retry_after: Option<f64>,
    /// RateLimit header fields, as `(name, value)`.
    pub(super) headers: Vec<(&'static str, String)>,
}

/// One simulated origin.
#[derive(Debug, Clone)]
pub(super) struct Server {
    kind: Kind,
    /// `(from second, limit)`, in order: the limit in force from each second on.
    schedule: Vec<(f64, f64)>,
    tokens: f64,
    updated: f64,
    window: (i64, u32),
    accepted: std::collections::VecDeque<f64>,
    /// Answer times of requests in flight (the latency server).
    busy: Vec<f64>,
    /// Windows the server announced: `(from, until)`.
    pub(super) windows: Vec<(f64, f64)>,
    /// Arrivals strictly inside a window announced before.
    pub(super) inside: u32,
    /// A round trip's network time: the least, and how much more at most (seconds).
    network: (f64, f64),
}

impl Server {
    /// A server of `kind` whose limit follows `schedule` (`(from second, limit)`).
    pub(super) fn new(kind: Kind, schedule: &[(f64, f64)]) -> Self {
        let burst = match kind {
            Kind::TokenBucket { burst } => burst,
            _ => 0.0,
        };
        Server {
            kind,
            schedule: schedule.to_vec(),
            tokens: burst,
            updated: 0.0,
            window: (-1, 0),
            accepted: std::collections::VecDeque::new(),
            busy: Vec::new(),
            windows: Vec::new(),
            inside: 0,
            network: (0.02, 0.04),
        }
    }

    /// The same server a loopback away: round trips of 0.5 to 1.5 ms instead of 20 to 60 ms.
    pub(super) fn on_loopback(mut self) -> Self {
        self.network = (0.0005, 0.001);
        self
    }

    /// The limit in force at `t`.
    pub(super) fn limit_at(&self, t: f64) -> f64 {
        self.schedule
            .iter()
            .rev()
            .find(|(from, _)| *from <= t)
            .or(self.schedule.first())
            .map_or(f64::INFINITY, |(_, limit)| *limit)
    }

    /// A request sent at `sent`: it reaches the server half its network time later and is
    /// answered there.
    pub(super) fn request(&mut self, sent: f64, rng: &mut StdRng) -> Reply {
        let network = self.network.0 + self.network.1 * rng.random::<f64>();
        let at = sent + network / 2.0;
        let last = self.windows.last().copied();
        if last.is_some_and(|(from, until)| at > from && at < until - 1e-3) {
            self.inside += 1;
        }
        let limit = self.limit_at(at);
        let mut headers = Vec::new();
        let wait = match self.kind {
            Kind::TokenBucket { burst } => {
                self.tokens = (self.tokens + (at - self.updated) * limit).min(burst);
                self.updated = at;
                if self.tokens >= 1.0 {
                    self.tokens -= 1.0;
                    None
                } else {
                    Some(((1.0 - self.tokens) / limit).ceil().max(1.0))
                }
            }
            Kind::FixedWindow => self.count_in_window(at, 1, limit),
            Kind::Announcing { style, window } => {
                let quota = (limit * f64::from(window)).floor();
                let wait = self.count_in_window(at, window, quota);
                let end = (at / f64::from(window)).floor() * f64::from(window) + f64::from(window);
                let remaining = (quota as u32).saturating_sub(self.window.1);
                headers = style.fields((quota as u32, window), remaining, at, end);
                // A spent window's stated reset: nothing may arrive before it either.
                if let Some(until) = style.stated_reset(at, end).filter(|_| remaining == 0) {
                    self.windows.push((at, until));
                }
                wait.map(|_| (end - at).ceil().max(1.0))
            }
            Kind::SlidingWindow => {
                while self.accepted.front().is_some_and(|t| *t <= at - 1.0) {
                    self.accepted.pop_front();
                }
                if (self.accepted.len() as f64) < limit.floor() {
                    self.accepted.push_back(at);
                    None
                } else {
                    let oldest = self.accepted.front().copied().unwrap_or(at);
                    Some((oldest + 1.0 - at).ceil().max(1.0))
                }
            }
            Kind::Latency { base, per_request } => {
                self.busy.retain(|done| *done > at);
                let work = base + per_request * (self.busy.len() as f64 + 1.0);
                let latency = network + work * (0.9 + 0.2 * rng.random::<f64>());
                self.busy.push(sent + latency);
                return Reply {
                    status: 200,
                    latency,
                    retry_after: None,
                    headers,
                };
            }
        };
        if let Some(wait) = wait {
            self.windows.push((at, at + wait));
        }
        Reply {
            status: if wait.is_some() { 429 } else { 200 },
            latency: network,
            retry_after: wait,
            headers,
        }
    }

    /// Counts an arrival at `at` in its window of `window` whole seconds; `Retry-After: 1` if
    /// it is over `quota`.
    fn count_in_window(&mut self, at: f64, window: u32, quota: f64) -> Option<f64> {
        let index = (at / f64::from(window)).floor() as i64;
        if self.window.0 != index {
            self.window = (index, 0);
        }
        self.window.1 += 1;
        (f64::from(self.window.1) > quota).then_some(1.0)
    }
}
