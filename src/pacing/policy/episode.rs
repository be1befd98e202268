//! The part of a host's pacing state that a healthy host does not have: a cooldown, a backoff
//! streak, the last rate cut, a 403 streak, caps and a Visit-time window from robots.txt, the server's RateLimit
//! window, an operator's pause or rate, and what the learned limit knows. It lives in a box that
//! is freed when its episode ends, so a million healthy hosts cost a pointer each.

use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use super::bytes::ByteBudget;
use super::controller::{Announced, Learned};
use super::cooldown::Cooldown;
use super::window::{ServerWindow, WindowClock};
use crate::pacing::robots_pacing::VisitWindow;

/// How long the instant of the last rate cut is remembered. An answer to a request sent before the
/// cut belongs to the same wave and must not cut again; such answers come within the response
/// timeout, which the config caps at a day. (A host idle for `idle_host_seconds` is forgotten
/// all the same: it has nothing in flight that could still answer.)
pub(super) const WAVE_MEMORY: Duration = Duration::from_secs(25 * 3600);

/// A Visit-time window with what it needs to be read from monotonic instants: an instant and
/// the wall-clock time it corresponds to (so that tests under a paused clock can move `now`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct VisitClock {
    pub(super) window: VisitWindow,
    pub(super) anchor: (Instant, SystemTime),
}

impl VisitClock {
    /// When the window next opens after `now` (`now` itself inside it).
    pub(super) fn opens_at(&self, now: Instant) -> Instant {
        now + self.window.opens_in(self.wall_at(now))
    }

    /// When the window next closes, while `now` is inside it.
    pub(super) fn closes_at(&self, now: Instant) -> Option<Instant> {
        Some(now + self.window.closes_in(self.wall_at(now))?)
    }

    /// The wall-clock time at `now`, from the anchor.
    fn wall_at(&self, now: Instant) -> SystemTime {
        let (anchor, wall) = self.anchor;
        if now >= anchor {
            wall + now.duration_since(anchor)
        } else {
            wall - anchor.duration_since(now)
        }
    }
}

/// Pacing state that a healthy host does not have. Each field goes back to its empty value when
/// its episode ends, and then the box is freed.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Rare {
    pub(super) cooldown: Option<Cooldown>,
    /// Set when a cooldown starts: the first request after it may not use a saved-up burst.
    pub(super) clamp_burst: bool,
    /// When the rate was last cut: answers to requests sent before it belong to the same wave.
    pub(super) last_cut: Option<Instant>,
    /// Backoffs without Retry-After in a row (the exponent of the next one).
    pub(super) backoff_level: u32,
    /// 403s in a row.
    pub(super) consecutive_403: u32,
    /// 1 / Crawl-delay from robots.txt: a cap on the rate and on adaptation.
    pub(super) robots_cap: Option<f64>,
    /// robots.txt's Visit-time window, read against the wall clock: outside it the host waits.
    pub(super) robots_visit: Option<VisitClock>,
    pub(super) server_window: Option<ServerWindow>,
    /// The length, quota and phase of the server's counted window, learned from its answers.
    pub(super) window_clock: Option<WindowClock>,
    pub(super) server_policy_rate: Option<f64>,
    /// The byte budget of the server's `qu="content-bytes"` policy (`server_caps.rs`).
    pub(super) server_bytes: Option<ByteBudget>,
    /// The ceiling on in-flight requests of the server's `qu="concurrency"` policy.
    pub(super) server_concurrency: Option<u32>,
    /// An operator's pause: ends only by time or by the operator's resume.
    pub(super) operator_pause: Option<Instant>,
    /// An operator's rate, used instead of our own while set.
    pub(super) rate_override: Option<f64>,
    /// What the learned limit (`controller = "cubic"`) knows since the host's first cut.
    pub(super) learned: Option<Learned>,
    /// The quota the server announced, as the learned limit follows it.
    pub(super) announced: Option<Announced>,
    /// Block pauses remembered (each one doubles the next, up to `block_pause_seconds`).
    pub(super) block_strikes: u32,
    /// When the block pauses are forgotten: `block_pause_seconds` after the last one ends
    /// without another block.
    pub(super) block_memory: Option<Instant>,
}

impl Rare {
    pub(super) const NONE: Rare = Rare {
        cooldown: None,
        clamp_burst: false,
        last_cut: None,
        backoff_level: 0,
        consecutive_403: 0,
        robots_cap: None,
        robots_visit: None,
        server_window: None,
        window_clock: None,
        server_policy_rate: None,
        server_bytes: None,
        server_concurrency: None,
        operator_pause: None,
        rate_override: None,
        learned: None,
        announced: None,
        block_strikes: 0,
        block_memory: None,
    };

    pub(super) fn is_empty(&self) -> bool {
        self.cooldown.is_none()
            && !self.clamp_burst
            && self.last_cut.is_none()
            && self.backoff_level == 0
            && self.consecutive_403 == 0
            && self.robots_cap.is_none()
            && self.robots_visit.is_none()
            && self.server_window.is_none()
            && self.window_clock.is_none()
            && self.server_policy_rate.is_none()
            && self.server_bytes.is_none()
            && self.server_concurrency.is_none()
            && self.operator_pause.is_none()
            && self.rate_override.is_none()
            && self.learned.is_none()
            && self.announced.is_none()
            && self.block_strikes == 0
            && self.block_memory.is_none()
    }

    /// Clears what has run out by `now`.
    pub(super) fn expire(&mut self, now: Instant) {
        if self.cooldown.is_some_and(|c| c.until <= now) {
            self.cooldown = None;
        }
        if self.block_memory.is_some_and(|m| m <= now) {
            self.block_memory = None;
            self.block_strikes = 0;
        }
        if self
            .last_cut
            .is_some_and(|cut| now.saturating_duration_since(cut) > WAVE_MEMORY)
        {
            self.last_cut = None;
        }
        if self.server_window.is_some_and(|w| w.expired(now)) {
            self.server_window = None;
        }
        if self.operator_pause.is_some_and(|p| p <= now) {
            self.operator_pause = None;
        }
    }
}
