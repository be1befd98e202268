//! The pacing rules one host gets, fully resolved: [`HostPolicy`] and its defaults, and the
//! [`OffPeak`] window with its own rate.
//!
//! A policy is plain data: the request path reads it and never looks back at the file. Building
//! one from the file is the validator's job; keeping per-host state is the `policy` module's.

use std::sync::Arc;
use std::time::Duration;

use super::{CacheMode, Controller, HttpsMode, KeyMode, OnCooldown, ResourceKind, Route};
use crate::blocks::{BlockMarkers, DEFAULT_BLOCK_MARKERS};

/// The pacing rules for one host, fully resolved (defaults merged with the most specific rule).
#[derive(Debug, Clone, PartialEq)]
pub struct HostPolicy {
    /// Requests per second the host may receive (token refill rate).
    pub rate: f64,
    /// Requests that may leave at once after an idle spell (bucket capacity).
    pub burst: u32,
    /// Requests in flight to the host at the same time.
    pub concurrency: u32,
    /// 0..=1: each wait for a token is stretched by a random 0..jitter × 1/rate.
    pub jitter: f64,
    /// Requests that may wait for the host; the next one is refused with 503.
    pub max_queue: usize,
    /// How long a request may wait for its turn before it is answered with 503.
    pub max_wait: Duration,
    /// Whether the rate adapts to feedback (AIMD) between `min_rate` and `max_rate`.
    pub adaptive: bool,
    /// How the adaptive rate moves: AIMD or the learned limit (`controller`).
    pub controller: Controller,
    /// With the learned limit: how long after a cut the rate takes to come back to the learned
    /// limit, and as long again before it probes past it.
    pub probe_after: Duration,
    /// With the learned limit: the learned limit is at least this far below the rate that met a
    /// 429 (0.03: 3 % below).
    pub learned_margin: f64,
    /// The lowest rate adaptation may reach.
    pub min_rate: f64,
    /// The highest rate adaptation may reach, however healthy the host looks.
    pub max_rate: f64,
    /// Rate multiplier on 429 and overload (once per wave of responses).
    pub decrease_factor: f64,
    /// Rate multiplier when a response is slower than `slow_response`.
    pub slow_factor: f64,
    /// Latency to response headers above which the host counts as straining.
    pub slow_response: Duration,
    /// Rate added per healthy response while the budget was the bottleneck.
    pub increase_step: f64,
    /// Statuses that mean "overloaded": back off.
    pub backoff_statuses: Vec<u16>,
    /// The longest `Retry-After` (or RateLimit reset) honoured; longer ones are cut to this.
    pub max_retry_after: Duration,
    /// The first backoff window when the host gave no Retry-After.
    pub backoff_initial: Duration,
    /// The longest backoff window.
    pub backoff_max: Duration,
    /// What requests get while the host cools down.
    pub on_cooldown: OnCooldown,
    /// After a cooldown, the rate resumes at this fraction of the rate before it.
    pub resume_factor: f64,
    /// How often courtesy itself retries a bodiless GET/HEAD/OPTIONS that got 429/503.
    pub retry_idempotent: u32,
    /// What a CONNECT to this host becomes.
    pub https: HttpsMode,
    /// Whether robots.txt is fetched and obeyed for this host.
    pub obey_robots: bool,
    /// Whether courtesy acts on what it decides for this host. `false` is report-only (shadow)
    /// mode: every request is forwarded at once, and what courtesy would have done (waits,
    /// refusals, arrivals inside announced windows) is counted and logged.
    pub enforce: bool,
    /// What the budget is kept for: the `host:port`, the registrable domain or the address. The
    /// rule matching the request's host decides.
    pub key: KeyMode,
    /// The robots.txt group to obey; `None`: the product token of the client's User-Agent.
    pub robots_user_agent: Option<String>,
    /// The longest Crawl-delay honoured as such; longer ones pace at this and log a warning.
    pub max_crawl_delay: Duration,
    /// How much of a text response is scanned for block markers.
    pub block_scan_bytes: usize,
    /// Strings that mark a challenge or block page (matched case-insensitively).
    pub block_markers: Arc<BlockMarkers>,
    /// How long a detected block pauses the host.
    pub block_pause: Duration,
    /// After a block pause, the rate resumes at this fraction of the rate before it.
    pub block_resume_factor: f64,
    /// This many 403s in a row count as a hard block (0: never).
    pub hard_block_after: u32,
    /// Resource kinds answered locally with 403 instead of being fetched.
    pub skip_resources: Vec<ResourceKind>,
    /// A different rate inside a daily time window.
    pub off_peak: Option<OffPeak>,
    /// Whether GET responses are stored, revalidated or served from the store.
    pub cache: CacheMode,
    /// Where this host's requests leave: straight to it, or through a parent proxy
    /// (`upstream_proxy`, from the host's rule, else `[proxy]`). Pacing is the target's either way.
    pub upstream: Route,
}

impl Default for HostPolicy {
    /// The seed article's defaults: one request per second, one in flight.
    fn default() -> Self {
        HostPolicy {
            rate: 1.0,
            burst: 1,
            concurrency: 1,
            jitter: 0.0,
            max_queue: 1000,
            max_wait: Duration::from_secs(300),
            adaptive: false,
            controller: Controller::Aimd,
            probe_after: Duration::from_secs(30),
            learned_margin: 0.03,
            min_rate: 0.2,
            max_rate: 5.0,
            decrease_factor: 0.5,
            slow_factor: 0.8,
            slow_response: Duration::from_millis(2000),
            increase_step: 0.05,
            backoff_statuses: vec![500, 502, 503, 504],
            max_retry_after: Duration::from_secs(600),
            backoff_initial: Duration::from_secs(2),
            backoff_max: Duration::from_secs(300),
            on_cooldown: OnCooldown::Reject,
            resume_factor: 0.5,
            retry_idempotent: 0,
            https: HttpsMode::Intercept,
            obey_robots: true,
            enforce: true,
            key: KeyMode::Host,
            robots_user_agent: None,
            max_crawl_delay: Duration::from_secs(60),
            block_scan_bytes: 64 * 1024,
            block_markers: Arc::new(BlockMarkers::new(
                DEFAULT_BLOCK_MARKERS
                    .iter()
                    .map(|m| m.to_string())
                    .collect(),
            )),
            block_pause: Duration::from_secs(3600),
            block_resume_factor: 0.25,
            hard_block_after: 5,
            skip_resources: Vec::new(),
            off_peak: None,
            cache: CacheMode::Off,
            upstream: Route::Direct,
        }
    }
}

/// A daily window with its own rate (`off_peak = { hours, timezone, rate }`).
#[derive(Debug, Clone)]
pub struct OffPeak {
    /// Start of the window, minutes after local midnight.
    pub start_minute: u16,
    /// End of the window (exclusive), minutes after local midnight; may be before the start
    /// (a window across midnight).
    pub end_minute: u16,
    /// The IANA time zone name, as written.
    pub timezone_name: String,
    /// The time zone.
    pub timezone: jiff::tz::TimeZone,
    /// The rate inside the window.
    pub rate: f64,
}

impl PartialEq for OffPeak {
    fn eq(&self, other: &Self) -> bool {
        (
            self.start_minute,
            self.end_minute,
            &self.timezone_name,
            self.rate,
        ) == (
            other.start_minute,
            other.end_minute,
            &other.timezone_name,
            other.rate,
        )
    }
}

impl OffPeak {
    /// The first wall-clock time after `after` at which the window opens or closes.
    pub fn next_edge(&self, after: std::time::SystemTime) -> Option<std::time::SystemTime> {
        let now = jiff::Timestamp::try_from(after).ok()?;
        let today = self.timezone.to_datetime(now).date();
        let mut best: Option<jiff::Timestamp> = None;
        for date in [Some(today), today.tomorrow().ok()].into_iter().flatten() {
            for minute in [self.start_minute, self.end_minute] {
                let local = date.at((minute / 60) as i8, (minute % 60) as i8, 0, 0);
                let Ok(at) = self.timezone.to_ambiguous_timestamp(local).compatible() else {
                    continue;
                };
                if at > now && best.is_none_or(|b| at < b) {
                    best = Some(at);
                }
            }
        }
        std::time::SystemTime::try_from(best?).ok()
    }

    /// Whether the wall-clock time `at` falls inside the window.
    pub fn contains(&self, at: std::time::SystemTime) -> bool {
        let Ok(ts) = jiff::Timestamp::try_from(at) else {
            return false;
        };
        let local = self.timezone.to_datetime(ts);
        let minute = local.hour() as u16 * 60 + local.minute() as u16;
        if self.start_minute <= self.end_minute {
            (self.start_minute..self.end_minute).contains(&minute)
        } else {
            minute >= self.start_minute || minute < self.end_minute
        }
    }
}
