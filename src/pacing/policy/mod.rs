//! Pure per-host pacing state: the token bucket, the adaptive rate (AIMD or the learned limit),
//! cooldowns and the server's announced budget.
//!
//! Everything here takes `now` (and random samples) as arguments, so every rule is a plain unit test
//! with explicit instants. [`Pacing::ready_at`] says when the next request may leave;
//! [`Pacing::observe`] moves the state after an upstream answer. Waiting is `crate::budget::limiter`'s job and
//! reading responses is `crate::pacing::feedback`'s.
//!
//! | file | owns |
//! |---|---|
//! | `mod.rs` | [`Pacing`]: the rules that move a host's rate, cooldowns and caps |
//! | `bucket.rs` | the token bucket and the in-flight count |
//! | `bytes.rs` | the byte budget (`max_bytes_per_second`): response bytes charged into debt |
//! | `server_caps.rs` | what a server's RateLimit policies cap beside the rate: bytes (`content-bytes`), concurrency |
//! | `controller/` | how the adaptive rate moves: AIMD, or the learned limit (`controller`) |
//! | `observation.rs` | what goes in ([`Answer`], [`Observation`]) and what comes out ([`Reaction`]) |
//! | `cooldown.rs` | [`Cooldown`] and its [`CooldownCause`] |
//! | `episode.rs` | the boxed state only a host in trouble (or steered) has |
//! | `off_peak.rs` | the off-peak window on monotonic instants |
//! | `wait.rs` | [`WaitReason`]: why a request waited, as one closed set |
//! | `window.rs` | the server's counted window: what is left, its phase learned from resets, where turns go |
//! | `sim/` | (tests) simulated servers and the runner that holds every controller against them |

mod bucket;
mod bytes;
mod controller;
mod cooldown;
mod episode;
mod observation;
mod off_peak;
mod server_caps;
mod wait;
mod window;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

pub(crate) use bucket::Bucket;

pub(crate) use bucket::InFlight;
pub(crate) use bytes::ByteBudget;
pub(crate) use cooldown::{Cooldown, CooldownCause};
pub(crate) use observation::{Answer, Observation, Reaction};
pub(crate) use wait::WaitReason;

use crate::config::HostPolicy;
use crate::pacing::feedback::Feedback;
use crate::pacing::ratelimit::NamedPolicy;
use crate::pacing::robots_pacing::VisitWindow;
use episode::{Rare, VisitClock};
use off_peak::OffPeakClock;

/// The whole pacing state of one host.
#[derive(Debug, Clone)]
pub struct Pacing {
    bucket: Bucket,
    /// Our own rate: the configured one, moved by adaptation and cooldowns.
    rate: f64,
    /// State a healthy host does not have (cooldowns, backoff, server windows, operator
    /// overrides, a Crawl-delay), boxed so that a host without it costs one pointer: with a
    /// million known hosts, every byte here is a megabyte.
    rare: Option<Box<Rare>>,
    /// What only some policies ask for: an off-peak window, a byte budget (boxed together: most
    /// hosts have neither).
    extra: Option<Box<Extra>>,
    /// The part of the host's budget this instance may use on its own: 1, or `1/instances` while
    /// a shared budget's store cannot be reached. Rates are for all instances; the bucket runs at
    /// this share of them.
    share: f32,
    /// The smoothed latency to response headers in seconds (0: none yet), for the learned
    /// limit's latency rule (`controller = "cubic"`). It fills what would be padding.
    latency: f32,
}

/// The part of a host's pacing worth keeping across a restart.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PacingRecord {
    /// Our own (learned) rate.
    pub rate: f64,
    /// A cooldown still running, and its cause.
    pub cooldown: Option<(Instant, CooldownCause)>,
    /// An operator's pause still running.
    pub operator_pause: Option<Instant>,
    /// An operator's rate.
    pub rate_override: Option<f64>,
}

impl Pacing {
    /// A fresh host under `policy`.
    pub fn new(policy: &HostPolicy, now: Instant, wall: std::time::SystemTime) -> Self {
        let rate = Pacing::initial_rate(policy);
        Pacing {
            bucket: Bucket::new(rate, policy.pacing.burst, now),
            rate,
            rare: None,
            extra: Extra::boxed(
                OffPeakClock::new(policy, (now, wall)),
                byte_budget(policy, now),
                None,
            ),
            share: 1.0,
            latency: 0.0,
        }
    }

    /// Keeps `share` (in (0, 1]) of the host's budget for this instance: the bucket's rate and
    /// burst (at least 1) are that share of the host's. A share of 1 is the whole budget.
    pub fn set_share(&mut self, share: f64, burst: u32, now: Instant) {
        let share = share.clamp(f64::MIN_POSITIVE, 1.0) as f32;
        if share == self.share {
            return;
        }
        self.share = share;
        self.bucket.set_burst(self.share_of(burst), now);
        if let Some(bytes) = self.bytes_mut() {
            bytes.share(f64::from(share), now);
        }
        self.sync(now);
    }

    /// Leaves the bucket at most what it would have refilled in `elapsed` since this instance's
    /// last turn: a shared budget's host takes its first local turn after the store went away
    /// this way, at its share's rate after the shared turn it just had, never in a burst (and
    /// never later than that, however often the store comes and goes).
    pub fn refilled_since_last_turn(&mut self, elapsed: Duration, now: Instant) {
        let most = elapsed.as_secs_f64() * self.bucket.rate();
        self.bucket.clamp_tokens(most, now);
    }

    /// This instance's share of a burst or concurrency: at least 1.
    pub fn share_of(&self, whole: u32) -> u32 {
        (f64::from(whole) * f64::from(self.share)).floor().max(1.0) as u32
    }

    /// The share of the host's budget this instance keeps (see [`Pacing::set_share`]).
    pub fn share(&self) -> f64 {
        f64::from(self.share)
    }

    /// Takes on what the instances sharing a budget learned together: the rate and an operator's
    /// rate, set through any of them.
    pub fn adopt_shared(&mut self, rate: f64, rate_override: Option<f64>, now: Instant) {
        if rate.is_finite() && rate > 0.0 {
            self.rate = rate;
        }
        self.learn_shared();
        if rate_override.is_some() || self.rare.is_some() {
            self.rare_mut().rate_override = rate_override;
        }
        self.sync(now);
    }

    /// The rate a fresh host starts at: the configured one, within the adaptive bounds.
    pub fn initial_rate(policy: &HostPolicy) -> f64 {
        if policy.adaptive.enabled {
            policy
                .pacing
                .rate
                .clamp(policy.adaptive.min_rate, policy.adaptive.max_rate)
        } else {
            policy.pacing.rate
        }
    }

    /// Whether the off-peak window is open at `now`.
    pub fn in_off_peak(&self, now: Instant) -> bool {
        self.off_peak()
            .is_some_and(|o| o.window.contains(o.wall(now)))
    }

    /// Caps the rate (and adaptation) at `rate` (1 / Crawl-delay), or lifts the cap.
    pub fn set_robots_cap(&mut self, rate: Option<f64>, now: Instant) {
        let cap = rate.filter(|r| r.is_finite() && *r > 0.0);
        if cap.is_some() || self.rare.is_some() {
            self.rare_mut().robots_cap = cap;
        }
        self.sync(now);
    }

    /// The robots.txt cap, if any.
    pub fn robots_cap(&self) -> Option<f64> {
        self.rare().robots_cap
    }

    /// The lowest standing cap on the rate from outside courtesy: robots.txt's Crawl-delay or the
    /// rate of the server's RateLimit policy. Instances sharing a budget share it.
    pub fn standing_cap(&self) -> Option<f64> {
        let rare = self.rare();
        match (rare.robots_cap, rare.server_policy_rate) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// How long the next block pause of this host lasts at `now`: `block_first_pause_seconds`,
    /// doubled for every block pause still remembered, at most `block_pause_seconds`. One false
    /// signal costs a minute, a host that keeps blocking soon gets the long pause.
    pub fn block_pause_length(&self, policy: &HostPolicy, now: Instant) -> Duration {
        let strikes = self
            .rare()
            .block_memory
            .filter(|m| *m > now)
            .map_or(0, |_| self.rare().block_strikes);
        let first = policy.blocks.first_pause.min(policy.blocks.pause);
        let grown = first.as_secs_f64() * 2f64.powi(strikes.min(40) as i32);
        Duration::from_secs_f64(grown.min(policy.blocks.pause.as_secs_f64()))
    }

    /// Pauses the host for a detected block ([`Pacing::block_pause_length`]); the rate then
    /// resumes at `block_resume_factor` of the rate before it. Returns the pause if a new one
    /// started (none while a block pause is in force: one block, one pause).
    pub fn pause_for_block(
        &mut self,
        cause: CooldownCause,
        policy: &HostPolicy,
        now: Instant,
    ) -> Option<Duration> {
        let before = self.rate;
        let fresh = self.cooldown(now).is_none_or(|c| {
            !matches!(c.cause, CooldownCause::SoftBlock | CooldownCause::HardBlock)
        });
        if !fresh {
            return None;
        }
        let length = self.block_pause_length(policy, now);
        if !self.extend_cooldown(now + length, cause, now) {
            return None;
        }
        let rare = self.rare_mut();
        rare.block_strikes = rare.block_strikes.saturating_add(1);
        rare.block_memory = Some(now + length + policy.blocks.pause);
        self.rate = lowered(
            before,
            policy.blocks.resume_factor,
            policy.adaptive.min_rate.min(before),
        );
        self.sync(now);
        Some(length)
    }

    /// What a restart must not forget, at `now`.
    pub fn record(&self, now: Instant) -> PacingRecord {
        PacingRecord {
            rate: self.rate,
            cooldown: self.cooldown(now).map(|c| (c.until, c.cause)),
            operator_pause: self.rare().operator_pause.filter(|p| *p > now),
            rate_override: self.rare().rate_override,
        }
    }

    /// Puts back what an earlier run saved. Cooldowns only ever grow, here too.
    pub fn restore(&mut self, record: &PacingRecord, policy: &HostPolicy, now: Instant) {
        let ceiling = if policy.adaptive.enabled {
            policy.adaptive.max_rate
        } else {
            policy.pacing.rate
        };
        if record.rate.is_finite() && record.rate > 0.0 {
            self.rate = record.rate.min(ceiling);
        }
        if let Some((until, cause)) = record.cooldown {
            self.extend_cooldown(until, cause, now);
        }
        let pause = record.operator_pause.filter(|p| *p > now);
        let rate_override = record.rate_override.filter(|r| r.is_finite() && *r > 0.0);
        if pause.is_some() || rate_override.is_some() || self.rare.is_some() {
            let rare = self.rare_mut();
            rare.operator_pause = pause;
            rare.rate_override = rate_override;
        }
        self.sync(now);
    }

    /// Applies a reloaded policy: burst and bounds change at once; a rate that had been lowered by
    /// feedback stays lowered (never above the new configured rate).
    pub fn apply_policy(
        &mut self,
        old: &HostPolicy,
        new: &HostPolicy,
        now: Instant,
        wall: std::time::SystemTime,
    ) {
        self.bucket.set_burst(self.share_of(new.pacing.burst), now);
        let anchor = (now, wall);
        let anchor = self.off_peak().map_or(anchor, |o| o.anchor);
        let off_peak = OffPeakClock::new(new, anchor);
        // A debt is kept (paid at the new rate); a byte budget set anew starts full.
        let bytes = match (new.pacing.max_bytes_per_second, self.bytes_mut().cloned()) {
            (Some(rate), Some(mut bytes)) => {
                let burst = ByteBudget::default_burst(rate, new.pacing.max_bytes_burst);
                bytes.set(rate, burst, now);
                Some(bytes)
            }
            (Some(_), None) => byte_budget(new, now),
            (None, _) => None,
        };
        let bytes = bytes.map(|mut b| {
            b.share(f64::from(self.share), now);
            b
        });
        let announced = self.extra.as_mut().and_then(|e| e.announced.take());
        self.extra = Extra::boxed(off_peak, bytes, announced);
        self.rate = if new.adaptive.enabled {
            self.rate
                .clamp(new.adaptive.min_rate, new.adaptive.max_rate)
        } else if self.rate < old.pacing.rate {
            self.rate.min(new.pacing.rate)
        } else {
            new.pacing.rate
        };
        self.sync(now);
    }

    /// Pauses the host until `until` on an operator's word.
    pub fn operator_pause(&mut self, until: Instant) {
        self.rare_mut().operator_pause = Some(until);
    }

    /// Ends an operator's pause, and a block pause (the operator says the block was not one, so
    /// its repeats are forgotten too). A cooldown the server asked for is not shortened.
    pub fn operator_resume(&mut self) {
        let rare = self.rare_mut();
        rare.operator_pause = None;
        if rare
            .cooldown
            .is_some_and(|c| matches!(c.cause, CooldownCause::SoftBlock | CooldownCause::HardBlock))
        {
            rare.cooldown = None;
        }
        rare.block_strikes = 0;
        rare.block_memory = None;
    }

    /// Sets or clears an operator's rate.
    pub fn set_rate_override(&mut self, rate: Option<f64>, now: Instant) {
        self.rare_mut().rate_override = rate;
        self.sync(now);
    }

    /// The operator's rate, if set.
    pub fn rate_override(&self) -> Option<f64> {
        self.rare().rate_override
    }

    /// The operator's pause end, if one is running.
    pub fn operator_paused_until(&self, now: Instant) -> Option<Instant> {
        self.rare().operator_pause.filter(|p| *p > now)
    }

    /// Whatever keeps requests from leaving at `now`: the later of a cooldown and an operator's
    /// pause, as a cooldown with its cause.
    pub fn block(&self, now: Instant) -> Option<Cooldown> {
        let pause = self.operator_paused_until(now).map(|until| Cooldown {
            started: now,
            until,
            cause: CooldownCause::Operator,
        });
        let closed = self.visit_closed(now);
        [self.cooldown(now), pause, closed]
            .into_iter()
            .flatten()
            .reduce(|a, b| if b.until > a.until { b } else { a })
    }

    /// Outside robots.txt's Visit-time window: closed until it opens.
    fn visit_closed(&self, now: Instant) -> Option<Cooldown> {
        let opens = self.rare().robots_visit?.opens_at(now);
        (opens > now).then_some(Cooldown {
            started: now,
            until: opens,
            cause: CooldownCause::VisitTime,
        })
    }

    /// Limits the host to robots.txt's Visit-time `window` (UTC; `wall` is the wall-clock time
    /// at `now`), or lifts the limit.
    pub(crate) fn set_robots_visit(
        &mut self,
        window: Option<VisitWindow>,
        now: Instant,
        wall: SystemTime,
    ) {
        let visit = window.map(|window| VisitClock {
            window,
            anchor: (now, wall),
        });
        if visit.is_some() || self.rare.is_some() {
            self.rare_mut().robots_visit = visit;
        }
        self.sync(now);
    }

    /// robots.txt's Visit-time window at `now`: when it opens (outside it), and when it closes
    /// (inside it); neither without a window.
    pub(crate) fn visit_edges(&self, now: Instant) -> (Option<Instant>, Option<Instant>) {
        let opens = self.visit_closed(now).map(|c| c.until);
        let closes = self.rare().robots_visit.and_then(|v| v.closes_at(now));
        (opens, closes)
    }

    /// robots.txt's Visit-time window, if any.
    pub(crate) fn robots_visit(&self) -> Option<VisitWindow> {
        self.rare().robots_visit.map(|v| v.window)
    }

    fn off_peak(&self) -> Option<&OffPeakClock> {
        self.extra.as_ref()?.off_peak.as_ref()
    }

    fn bytes_mut(&mut self) -> Option<&mut ByteBudget> {
        self.extra.as_mut()?.bytes.as_mut()
    }

    fn server_bytes_mut(&mut self) -> Option<&mut ByteBudget> {
        self.rare.as_mut()?.server_bytes.as_mut()
    }

    fn rare(&self) -> &Rare {
        self.rare.as_deref().unwrap_or(&Rare::NONE)
    }

    fn rare_mut(&mut self) -> &mut Rare {
        self.rare.get_or_insert_with(Box::default)
    }

    /// Our own rate (before the server's caps).
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// The rate the bucket paces at, as of the last look at the host ([`Pacing::ready_at`] and
    /// every change bring it up to date): [`Pacing::effective_rate`] (times this instance's
    /// share) without computing it again.
    pub fn pacing_rate(&self) -> f64 {
        self.bucket.rate()
    }

    /// The rate in effect: the operator's or our own (the off-peak rate inside its window, scaled
    /// by any cut feedback made), capped by robots.txt and by what the server announced.
    pub fn effective_rate(&self, now: Instant) -> f64 {
        let window = self.rare().server_window.filter(|w| !w.expired(now));
        // Where the server counts its window and its phase is known, what is left of the
        // window paces its turns; the quota is per window, not per second.
        let planned = self.rare().window_clock.is_some_and(|c| c.known());
        let rate = self.rate_before_window(now, !planned);
        match window.and_then(|w| w.spend_rate(now)) {
            Some(cap) => rate.min(cap),
            None => rate,
        }
    }

    /// [`Pacing::effective_rate`] before what is left of the server's window, with or without
    /// the rate of the server's RateLimit policy.
    fn rate_before_window(&self, now: Instant, policy_rate: bool) -> f64 {
        let own = match self.off_peak() {
            Some(o) if o.window.contains(o.wall(now)) => {
                o.window.rate * (self.rate / o.configured_rate).min(1.0)
            }
            _ => self.rate,
        };
        let rare = self.rare();
        let mut rate = rare.rate_override.unwrap_or(own);
        if let Some(cap) = rare.robots_cap {
            rate = rate.min(cap);
        }
        if let Some(cap) = rare.server_policy_rate.filter(|_| policy_rate) {
            rate = rate.min(cap);
        }
        rate
    }

    /// The cooldown in force at `now`, if any.
    pub fn cooldown(&self, now: Instant) -> Option<Cooldown> {
        self.rare().cooldown.filter(|c| c.until > now)
    }

    /// Whether the host is exactly as a fresh one would be (so it may be forgotten).
    pub fn is_fresh(&mut self, policy: &HostPolicy, now: Instant) -> bool {
        self.sync(now);
        let fresh_rate = Pacing::initial_rate(policy);
        // What a host idle that long may forget: a burst clamp left from a cooldown that ended (it
        // may come back with its full burst, as a fresh one would), the last cut (nothing sent
        // before it can still answer), a 403 streak, and the Crawl-delay cap (set again from
        // robots.txt before its next request is admitted).
        let settled = Rare {
            clamp_burst: false,
            last_cut: None,
            consecutive_403: 0,
            robots_cap: None,
            learned: None,
            announced: None,
            window_clock: None,
            ..*self.rare()
        };
        settled.is_empty()
            && self.rate >= fresh_rate
            && self.bucket.is_full(now)
            && self.bytes_mut().is_none_or(|b| b.is_full(now))
    }

    /// Charges `bytes` of response body that went by at `now` to the byte budget, if the host
    /// has one: a debt holds the host's next turn (see [`ByteBudget`]).
    pub fn charge_bytes(&mut self, bytes: u64, now: Instant) {
        if let Some(budget) = self.bytes_mut() {
            budget.charge(bytes, now);
        }
        if let Some(budget) = self.server_bytes_mut() {
            budget.charge(bytes, now);
        }
    }

    /// The byte budget's debt at `now` and when it is paid back, if the host has a byte budget.
    pub fn byte_debt(&mut self, now: Instant) -> Option<(u64, Instant)> {
        let own = self.bytes_mut().map(|b| (b.debt(now), b.ready_at(now)));
        let server = self
            .server_bytes_mut()
            .map(|b| (b.debt(now), b.ready_at(now)));
        // Of the configured budget and the server's, the one paid back last holds the turn.
        match (own, server) {
            (Some(a), Some(b)) => Some(if b.1 > a.1 { b } else { a }),
            (a, b) => a.or(b),
        }
    }

    /// Expires what has run out and puts the effective rate into the bucket.
    fn sync(&mut self, now: Instant) {
        if let Some(rare) = self.rare.as_mut() {
            rare.expire(now);
            if rare.is_empty() {
                self.rare = None;
            }
        }
        let rate = self.effective_rate(now) * f64::from(self.share);
        if (rate - self.bucket.rate()).abs() > f64::EPSILON * rate.max(1.0) {
            self.bucket.set_rate(rate, now);
        }
    }

    /// The earliest instant the next request may leave: `now` if it may leave now.
    pub fn ready_at(&mut self, now: Instant) -> Instant {
        self.sync(now);
        let mut at = self.bucket.ready_at(now);
        // With a request rate and a byte rate, the stricter wins: the later of the two.
        if let Some(bytes) = self.bytes_mut() {
            at = at.max(bytes.ready_at(now));
        }
        if let Some(bytes) = self.server_bytes_mut() {
            at = at.max(bytes.ready_at(now));
        }
        if let Some(c) = self.block(now) {
            at = at.max(c.until);
        }
        let window = self.rare().server_window.filter(|w| !w.expired(now));
        if let Some(until) = window.and_then(|w| w.not_before(now)) {
            at = at.max(until);
        }
        // Wake at an off-peak edge: the rate changes there.
        if let Some(edge) = self.off_peak_edge(now) {
            if edge < at {
                return edge;
            }
        }
        at
    }

    /// [`Pacing::ready_at`], with what holds the next request until then: [`WaitReason::None`]
    /// when it may leave now, else the constraint that ends last (on a tie, a closed host before
    /// the server's spent window, before a byte debt, before the bucket). Only a request that
    /// waits pays for the reason.
    pub fn next_turn(&mut self, now: Instant) -> (Instant, WaitReason) {
        let at = self.ready_at(now);
        if at <= now {
            return (at, WaitReason::None);
        }
        // Each constraint's end (an off-peak edge only wakes the dispatcher early); the latest
        // wins, a tie going to the later in this order.
        let mut latest = (self.bucket.ready_at(now), WaitReason::Rate);
        let own_bytes = self.bytes_mut().map(|b| b.ready_at(now));
        let server_bytes = self.server_bytes_mut().map(|b| b.ready_at(now));
        if let Some(bytes) = own_bytes.into_iter().chain(server_bytes).max() {
            if bytes >= latest.0 {
                latest = (bytes, WaitReason::ByteBudget);
            }
        }
        // The server's window: spent until its stated reset, or its spending turn held to the
        // window's edge.
        let window = self.rare().server_window.filter(|w| !w.expired(now));
        if let Some(until) = window.and_then(|w| w.not_before(now)) {
            if until >= latest.0 {
                latest = (until, WaitReason::Cooldown);
            }
        }
        if let Some(c) = self.block(now) {
            if c.until >= latest.0 {
                latest = (c.until, WaitReason::of_cooldown(c.cause));
            }
        }
        let why = match latest.1 {
            WaitReason::Rate => self.rate_reason(now),
            other => other,
        };
        (at, why)
    }

    /// What the bucket's wait is for: Crawl-delay when robots.txt's cap is what sets the rate
    /// (nothing lower is in force), else the rate.
    fn rate_reason(&self, now: Instant) -> WaitReason {
        match self.rare().robots_cap {
            Some(cap) if cap <= self.effective_rate(now) => WaitReason::CrawlDelay,
            _ => WaitReason::Rate,
        }
    }

    fn off_peak_edge(&self, now: Instant) -> Option<Instant> {
        let clock = self.off_peak()?;
        let wall = clock.wall(now);
        let edge = clock.window.next_edge(wall)?;
        Some(now + edge.duration_since(wall).ok()?)
    }

    /// Takes a turn at `now` if one is free. `sample` is uniform in [0, 1) for jitter.
    pub fn try_take(&mut self, now: Instant, jitter: f64, sample: f64) -> bool {
        if self.ready_at(now) > now {
            return false;
        }
        if let Some(rare) = self.rare.as_mut().filter(|r| r.clamp_burst) {
            rare.clamp_burst = false;
            self.bucket.clamp_tokens(1.0, now);
        }
        if !self.bucket.try_take(now, jitter, sample) {
            return false;
        }
        if let Some(w) = self.rare.as_mut().and_then(|r| r.server_window.as_mut()) {
            w.remaining = w.remaining.saturating_sub(1);
        }
        true
    }

    /// Gives back a turn that was taken for a request that never left.
    pub fn refund(&mut self, now: Instant) {
        self.bucket.refund(now);
        if let Some(w) = self.rare.as_mut().and_then(|r| r.server_window.as_mut()) {
            w.remaining += 1;
        }
    }

    /// Moves the state after an upstream answer. `sample` is uniform in [0, 1) for backoff jitter.
    pub fn observe(
        &mut self,
        obs: &Observation,
        policy: &HostPolicy,
        now: Instant,
        sample: f64,
    ) -> Reaction {
        self.sync(now);
        let rate_before = self.rate;
        let mut cooldown = None;
        let mut hard_block = false;
        if obs.answer.status == Some(403) {
            let rare = self.rare_mut();
            rare.consecutive_403 = rare.consecutive_403.saturating_add(1);
            if policy.blocks.hard_block_after > 0
                && rare.consecutive_403 >= policy.blocks.hard_block_after
            {
                rare.consecutive_403 = 0;
                if let Some(pause) = self.pause_for_block(CooldownCause::HardBlock, policy, now) {
                    hard_block = true;
                    cooldown = Some(pause);
                }
            }
        } else if let Some(rare) = self.rare.as_mut().filter(|_| obs.answer.status.is_some()) {
            rare.consecutive_403 = 0;
        }
        if let Some(budget) = &obs.answer.server {
            cooldown =
                self.apply_server_budget(budget, (obs.sent_at, obs.others_in_flight), policy, now);
        }
        match obs.answer.feedback {
            Feedback::Success => {
                if let Some(rare) = self.rare.as_mut() {
                    rare.backoff_level = 0;
                }
                self.after_healthy(obs, policy, now);
            }
            Feedback::Throttled | Feedback::Overloaded | Feedback::Failed => {
                let new_wave = self.new_wave(obs.sent_at);
                let window = match obs.answer.retry_after {
                    Some(wait) => Some(wait.min(policy.cooldown.max_retry_after)),
                    None if new_wave => Some(self.next_backoff(policy, sample)),
                    None => None,
                };
                if new_wave {
                    self.after_trouble(window, obs.sent_at, policy, now);
                    self.rare_mut().last_cut = Some(now);
                }
                if let Some(window) = window.filter(|w| !w.is_zero()) {
                    let cause = match obs.answer.status {
                        Some(status) => CooldownCause::Status(status),
                        None => CooldownCause::Failure,
                    };
                    let fresh = self.cooldown(now).is_none();
                    if self.extend_cooldown(now + window, cause, now) {
                        cooldown = Some(window);
                        if fresh {
                            self.resume_after(rate_before, policy);
                        }
                    }
                }
            }
            Feedback::Neutral => {}
        }
        if let Some(budget) = &obs.answer.server {
            self.after_budget(budget, policy, now);
        }
        self.sync(now);
        Reaction {
            rate_before,
            rate_after: self.rate,
            cooldown,
            hard_block,
        }
    }

    /// Pauses the host until `until` (an operator's or a block's pause): only ever extends.
    pub fn pause(&mut self, until: Instant, cause: CooldownCause, now: Instant) -> bool {
        self.extend_cooldown(until, cause, now)
    }

    fn new_wave(&self, sent_at: Instant) -> bool {
        self.rare().last_cut.is_none_or(|cut| sent_at >= cut)
    }

    fn next_backoff(&mut self, policy: &HostPolicy, sample: f64) -> Duration {
        let rare = self.rare_mut();
        let doubling = 2f64.powi(rare.backoff_level.min(30) as i32);
        rare.backoff_level = rare.backoff_level.saturating_add(1);
        let base = policy.cooldown.backoff_initial.as_secs_f64() * doubling;
        let with_jitter = base * (1.0 + 0.25 * sample.clamp(0.0, 1.0));
        Duration::from_secs_f64(with_jitter.min(policy.cooldown.backoff_max.as_secs_f64()))
    }

    /// Starts or lengthens the cooldown; returns whether it changed. Never shortens one.
    fn extend_cooldown(&mut self, until: Instant, cause: CooldownCause, now: Instant) -> bool {
        match self.cooldown(now) {
            Some(c) if c.until >= until => false,
            Some(c) => {
                self.rare_mut().cooldown = Some(Cooldown { until, cause, ..c });
                true
            }
            None => {
                let rare = self.rare_mut();
                rare.cooldown = Some(Cooldown {
                    started: now,
                    until,
                    cause,
                });
                rare.clamp_burst = true;
                true
            }
        }
    }
}

/// What only some policies ask for, boxed together in [`Pacing`].
#[derive(Debug, Clone)]
struct Extra {
    /// The off-peak window, if the policy has one.
    off_peak: Option<OffPeakClock>,
    /// The byte budget, if the policy has `max_bytes_per_second`.
    bytes: Option<ByteBudget>,
    /// The RateLimit policies the server announced last, as written (`server_caps.rs`).
    announced: Option<Arc<[NamedPolicy]>>,
}

impl Extra {
    /// The box, if there is anything to put in it.
    fn boxed(
        off_peak: Option<OffPeakClock>,
        bytes: Option<ByteBudget>,
        announced: Option<Arc<[NamedPolicy]>>,
    ) -> Option<Box<Extra>> {
        (off_peak.is_some() || bytes.is_some() || announced.is_some()).then(|| {
            Box::new(Extra {
                off_peak,
                bytes,
                announced,
            })
        })
    }
}

/// The byte budget `policy` asks for, full at `now`.
fn byte_budget(policy: &HostPolicy, now: Instant) -> Option<ByteBudget> {
    let rate = policy.pacing.max_bytes_per_second?;
    let burst = ByteBudget::default_burst(rate, policy.pacing.max_bytes_burst);
    Some(ByteBudget::new(rate, burst, now))
}

/// `rate × factor`, but not below `floor` unless the rate already was.
fn lowered(rate: f64, factor: f64, floor: f64) -> f64 {
    (rate * factor).max(floor.min(rate))
}

#[cfg(test)]
mod sim;
#[cfg(test)]
mod tests;
