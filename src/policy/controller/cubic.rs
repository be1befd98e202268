//! The learned limit (`controller = "cubic"`): a controller that remembers where the server
//! said no and spends the time near that rate, not halfway below it.
//!
//! At the first answer of a wave of 429s (or overload, or failures), the rate that met it is an
//! upper bound on what the server allows. The learned limit is what the server served lately
//! (a meter of healthy answers that does not count idle time), and at least `learned_margin`
//! below that rate. Met again near the same rate after the whole approach (a steady limit), the limit
//! is halfway between the old one, which held, and the new peak, bounded by what was served, and
//! the next approach is longer (up to twice `probe_after_seconds`): a steady limit is probed less
//! often. Met soon after the last cooldown (before the rate had come back: the server's limit
//! fell), the limit is what was served since that cooldown, over that time plus half the wait
//! asked for, and the next probe comes late too. A long `Retry-After` (over a second and a tenth
//! of the time served) caps the limit at what was served over the time plus the wait: it says how
//! far over the rate was. The first cut knows nothing served and multiplies by
//! `decrease_factor`. With a shared budget the meter sees only this instance's part, so the
//! limit comes from the peak alone.
//!
//! The rate resumes at 95 % of the limit when the cooldown ends, comes back to it on a concave
//! cubic curve over the approach (fast at first, flat near the limit), and then probes past it
//! on a convex one, slowly at first and faster the longer the server keeps saying yes (as CUBIC
//! does around its last maximum). The curve does not advance while nothing above the rate in
//! force is learned (no demand, a gap between answers, latency near the bound).
//!
//! Latency, smoothed over answers: above `slow_response_ms` the rate is cut once per wave in
//! proportion (× slow_response / latency, between 0.5 and 0.95, as Gradient2 scales its limit
//! by the ratio of latencies); between 80 % and 100 % of it the rate holds; below, it may rise.
//! A host that never met a 429 rises by `increase_step` per healthy answer that waited, as AIMD.
//!
//! The state lives in the host's boxed [`super::super::episode::Rare`] from its first cut on;
//! a host that never had one costs nothing more than the smoothed latency (an `f32`).

use std::time::Duration;

use tokio::time::Instant;

use super::super::{lowered, Observation, Pacing};
use crate::config::HostPolicy;

/// Relative growth past the learned limit per cubed second of probing: +2 % after 2.2 s,
/// +10 % after 3.7 s, +100 % after 7.9 s.
const PROBE: f64 = 0.002;
/// The rate resumes at this fraction of the learned limit after a cut.
const RESUME: f64 = 0.95;
/// Weight of the newest answer in the smoothed latency.
const LATENCY_WEIGHT: f64 = 0.3;
/// Above this fraction of `slow_response_ms` (smoothed), the rate holds still.
const HOLD: f64 = 0.8;
/// Below this many answers served since the cooldown, what was served says nothing.
const FEW_SERVED: u32 = 2;
/// `Retry-After` comes in whole seconds: one second says nothing of how far over the rate was.
const SHORTEST_WAIT: f64 = 1.0;
/// A gap between healthy answers longer than this (and than two turns) is idle time.
const IDLE_GAP: f64 = 1.0;
/// The time constant of the served-rate meter, in seconds.
const METER_SECONDS: f64 = 2.0;
/// A wait longer than this share of the time served since the last cut says how far over the
/// limit the rate was: the limit is then at most what was served over both.
const LONG_WAIT: f64 = 0.1;

/// The lowest share of the rate that met a 429 that the learned limit may fall to at once
/// after the limit fell (what was served since the cooldown is measured); else a half.
const FELL_FLOOR: f64 = 0.25;

/// Below this many answers since the cooldown, what was served measures a fall only roughly:
/// the learned limit goes `learned_margin` under it.
const ROUGH: u32 = 10;

/// Seconds before a 429 met while probing past the old limit at which the curve still stood
/// under the new one (the served-rate meter lags a fast probe by its time constant).
const RISE_LAG: f64 = 1.5;
/// A probe that went this far past the learned limit before its 429 found a limit that rose
/// (a probe of a limit that held fails within a few per cent of it, or up to 1.3× where a
/// token bucket's burst lets it run on).
const ROSE: f64 = 2.0;

/// What the learned limit knows of a host after its first cut.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(in crate::policy) struct Learned {
    /// The learned limit: the rate the host is held just below.
    limit: f32,
    /// The rate right after the cut.
    start: f32,
    /// The rate that met the last 429.
    peak: f32,
    /// When the approach to the limit began (the end of the cut's cooldown).
    since: Instant,
    /// Healthy answers since the cut.
    served: u32,
    /// Healthy answers, decayed with [`METER_SECONDS`]: divided by it, the rate the server
    /// served lately.
    meter: f32,
    /// When the meter was last moved.
    metered: Instant,
    /// Seconds from `since` back to the limit (CUBIC's K).
    approach: f32,
    /// Whether the rate is shared with other instances (`[shared]`): what this one was served
    /// is only its part, so the limit comes from the peak alone.
    shared: bool,
}

impl Learned {
    /// A limit the server announced (`limit`): the curve stands at it from `now` for
    /// `probe_after`, keeping what `before` measured of the served rate.
    pub(super) fn announced(
        limit: f64,
        before: Option<Learned>,
        policy: &HostPolicy,
        now: Instant,
    ) -> Self {
        Learned {
            limit: limit as f32,
            start: limit as f32,
            peak: limit as f32,
            since: now,
            served: 0,
            meter: before.map_or(0.0, |l| l.meter),
            metered: before.map_or(now, |l| l.metered),
            approach: policy.adaptive.probe_after.as_secs_f32(),
            shared: before.is_some_and(|l| l.shared),
        }
    }

    /// Counts a healthy answer at `now` into the served-rate meter; `turn` is the time between
    /// two turns at the rate in force.
    fn count(&mut self, now: Instant, turn: f64) {
        self.served = self.served.saturating_add(1);
        self.meter = self.decayed(now, turn) as f32 + 1.0;
        self.metered = now;
    }

    /// The meter at `now`. A gap longer than two turns is idle time (no demand, a cooldown):
    /// the server served nothing because nothing was asked, so the meter decays by two turns.
    fn decayed(&self, now: Instant, turn: f64) -> f64 {
        let gap = now.saturating_duration_since(self.metered).as_secs_f64();
        f64::from(self.meter) * (-gap.min(2.0 * turn) / METER_SECONDS).exp()
    }

    /// The rate the server served lately, at `now`.
    fn served_lately(&self, now: Instant, turn: f64) -> f64 {
        self.decayed(now, turn) / METER_SECONDS
    }

    /// The rate on the curve `t` seconds into the approach.
    fn rate_at(&self, t: f64) -> f64 {
        let (limit, start, k) = (
            f64::from(self.limit),
            f64::from(self.start),
            f64::from(self.approach),
        );
        if t <= 0.0 {
            start
        } else if t < k {
            limit - (limit - start) * (1.0 - t / k).powi(3)
        } else {
            limit * (1.0 + PROBE * (t - k).powi(3))
        }
    }

    /// The time into the approach at which the curve reaches `rate` (the inverse of
    /// [`Learned::rate_at`]).
    fn time_at(&self, rate: f64) -> f64 {
        let (limit, start, k) = (
            f64::from(self.limit),
            f64::from(self.start),
            f64::from(self.approach),
        );
        if rate <= start {
            0.0
        } else if rate < limit {
            k * (1.0 - ((limit - rate) / (limit - start).max(f64::MIN_POSITIVE)).cbrt())
        } else {
            k + ((rate / limit - 1.0) / PROBE).cbrt()
        }
    }
}

impl Pacing {
    pub(super) fn cubic_healthy(&mut self, obs: &Observation, policy: &HostPolicy, now: Instant) {
        let latency = obs.answer.latency.as_secs_f64();
        let smoothed = match f64::from(self.latency) {
            0.0 => latency,
            before => before + LATENCY_WEIGHT * (latency - before),
        };
        self.latency = smoothed as f32;
        let mut idle = false;
        if let Some(learned) = self.rare.as_mut().and_then(|r| r.learned.as_mut()) {
            // A gap between answers is time without a probe; the curve does not count it.
            let gap = now.saturating_duration_since(learned.metered).as_secs_f64();
            idle = gap > IDLE_GAP.max(2.0 / self.rate);
            learned.count(now, 1.0 / self.rate);
        }
        if idle {
            self.hold_curve(now);
        }
        let slow = policy.adaptive.slow_response.as_secs_f64();
        if smoothed > slow {
            if self.new_wave(obs.sent_at) {
                let gradient = (slow / smoothed).clamp(0.5, 0.95);
                self.rate = lowered(self.rate, gradient, policy.adaptive.min_rate);
                self.rare_mut().last_cut = Some(now);
                self.hold_curve(now);
            }
            return;
        }
        if !obs.limited || smoothed > HOLD * slow {
            // Nothing was learned above the rate in force: the curve waits where it is.
            self.hold_curve(now);
            return;
        }
        let mut ceiling = self.raise_ceiling(policy);
        if let Some(announced) = self.announced_ceiling(policy) {
            ceiling = ceiling.min(announced.max(self.rate));
        }
        let target = match self.rare().learned {
            Some(l) => l.rate_at(now.saturating_duration_since(l.since).as_secs_f64()),
            None => self.rate + policy.adaptive.increase_step,
        };
        if self.rate < ceiling && target > self.rate {
            self.rate = target.min(ceiling);
        }
    }

    pub(super) fn cubic_trouble(
        &mut self,
        wait: Option<Duration>,
        policy: &HostPolicy,
        now: Instant,
    ) {
        let peak = self.rate;
        let wait = wait.unwrap_or_default().as_secs_f64();
        let first = policy.adaptive.probe_after.as_secs_f64();
        let below = peak * (1.0 - policy.adaptive.learned_margin);
        let learned = self.rare().learned.filter(|l| now > l.since);
        let (limit, approach) = match learned {
            Some(l) => {
                let t = now.duration_since(l.since).as_secs_f64();
                // What the server served lately is what it allows; a long wait says it allowed
                // no more than what it served since the last cut over that time and the wait.
                let mut served = if l.shared {
                    below
                } else {
                    l.served_lately(now, 1.0 / peak)
                };
                if wait > LONG_WAIT * t && wait > SHORTEST_WAIT && !l.shared {
                    served = served.min(f64::from(l.served) / (t + wait));
                }
                // Met again near the same rate after the whole approach: the old limit held
                // all that time, so the limit is between it and this peak, probed less often.
                // Met on the way back: the server allows less than it did.
                let old = f64::from(l.limit);
                let steady = t >= f64::from(l.approach)
                    && (peak - f64::from(l.peak)).abs() <= 0.1 * f64::from(l.peak);
                let fell = t < f64::from(l.approach) / 2.0;
                let measured_fall = fell && l.served >= FEW_SERVED && !l.shared;
                let rose = t >= f64::from(l.approach) && peak > ROSE * old;
                if steady {
                    served = old.max(served.min(old + (below - old) / 2.0));
                } else if measured_fall {
                    // The lately served rate still remembers the old limit; what was served
                    // since the cooldown, over that time and half the wait, does not.
                    let mut measured = f64::from(l.served) / (t + wait / 2.0);
                    if l.served < ROUGH {
                        measured *= 1.0 - policy.adaptive.learned_margin;
                    }
                    served = served.min(measured);
                } else if rose && !l.shared {
                    // Met while probing past the old limit: the server allows more now. The
                    // meter lags a fast probe; the curve a little before the 429 was served.
                    served = served.max(l.rate_at(t - RISE_LAG));
                }
                // A server that just tightened its limit, or kept it, is probed less often; one
                // that just raised it, sooner (the landing is rough).
                let approach = if steady {
                    (f64::from(l.approach) * 1.5).min(2.0 * first)
                } else if fell {
                    2.0 * first
                } else if rose {
                    first / 2.0
                } else {
                    first
                };
                // A fall measured since the cooldown may go deeper than half at once.
                let floor = if measured_fall { FELL_FLOOR } else { 0.5 };
                (served.clamp(peak * floor, below), approach)
            }
            None => (peak * policy.adaptive.decrease_factor, first),
        };
        let limit = limit.max(policy.adaptive.min_rate.min(peak));
        let start = lowered(limit, RESUME, policy.adaptive.min_rate).min(peak);
        self.rate = start;
        let since = now + Duration::from_secs_f64(wait);
        self.rare_mut().learned = Some(Learned {
            limit: limit as f32,
            start: start as f32,
            peak: peak as f32,
            since,
            served: 0,
            meter: learned.map_or(0.0, |l| l.decayed(now, 1.0 / peak) as f32),
            metered: now,
            approach: approach as f32,
            shared: self.rare().learned.is_some_and(|l| l.shared),
        });
    }

    /// Notes that the rate is kept with other instances: from now on the learned limit does not
    /// trust what this instance alone was served.
    pub(in crate::policy) fn learn_shared(&mut self) {
        if let Some(l) = self.rare.as_mut().and_then(|r| r.learned.as_mut()) {
            l.shared = true;
        }
    }

    /// Moves the start of the curve so that it stands at the rate in force: time spent without
    /// learning anything above it (no demand, or latency near the bound) is not probing.
    fn hold_curve(&mut self, now: Instant) {
        let rate = self.rate;
        if let Some(l) = self.rare.as_mut().and_then(|r| r.learned.as_mut()) {
            if now > l.since {
                let back = Duration::from_secs_f64(l.time_at(rate).clamp(0.0, 1e6));
                l.since = now.checked_sub(back).unwrap_or(l.since);
            }
        }
    }
}
