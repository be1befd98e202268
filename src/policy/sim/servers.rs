//! Simulated origins for the controller simulation: a rate limit kept three ways (a token bucket
//! with a small burst, a fixed one-second window, a sliding one-second window), each answering
//! 429 with `Retry-After` beyond it, a limit that changes on a schedule, and a server that never
//! says no but slows down with the requests it has in flight. Times are seconds from the start.

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
}

/// What the server said to one request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Reply {
    /// 200 or 429.
    pub(super) status: u16,
    /// Seconds from the request leaving courtesy to the response's headers.
    pub(super) latency: f64,
    /// `Retry-After` in seconds, on a 429.
    pub(super) retry_after: Option<f64>,
}

/// One simulated origin.
#[derive(Debug)]
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
        }
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
        let network = 0.02 + 0.04 * rng.random::<f64>();
        let at = sent + network / 2.0;
        let last = self.windows.last().copied();
        if last.is_some_and(|(from, until)| at > from && at < until - 1e-3) {
            self.inside += 1;
        }
        let limit = self.limit_at(at);
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
            Kind::FixedWindow => {
                let second = at.floor() as i64;
                if self.window.0 != second {
                    self.window = (second, 0);
                }
                self.window.1 += 1;
                (f64::from(self.window.1) > limit).then_some(1.0)
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
        }
    }
}
