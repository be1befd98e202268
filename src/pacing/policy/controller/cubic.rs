//! The learned limit (`controller = "cubic"`, the default): a controller that remembers where
//! the server said no and spends its time just below that rate, probing past it every
//! `probe_after_seconds` so that a limit that rose is found within about half a minute.
//!
//! At the first answer of a wave of 429s (or overload, or failures) the rate that met it is
//! above what the server allows, and what the server *served* says how far. How the learned
//! limit moves depends on where on its curve (`learned.rs`) the 429 came:
//!
//! - **The first cut** knows nothing served: × `decrease_factor`, a rough guess, approached
//!   over 1.5 × `probe_after_seconds`.
//! - **A probe past the limit** (the whole approach held): the limit held, so it stays, and
//!   rises to what the server served lately by at most `learned_margin` per probe, never past
//!   a rate that met a 429 on an approach since the last rise (a steady limit creeps up to
//!   where it holds and stays there). After a rough guess the probe moves the limit as far as
//!   what was served in the `Retry-After` span before the refused request says.
//! - **A probe that went twice past the limit** before its 429: the limit rose. The meter lags
//!   such a fast probe, so the rate lands: from what was served lately up towards what the
//!   server served in the last span, over 40 % of `probe_after_seconds`; a 429 on the way says
//!   where the new limit stands (what was served lately, which the slow end of the landing
//!   leaves near the rate).
//! - **On the way back to the limit** (before the approach ended: the server allows less than
//!   it did): within 5 s of the cooldown, from the few answers since it (the least of what was
//!   served lately, in the last span, and since the cooldown over that time and half the wait),
//!   `learned_margin` under it, and a rough guess; later, what was served since the cooldown
//!   over that time and half the wait. Either may go below half of the rate that met the 429,
//!   down to a quarter.
//!
//! A long `Retry-After` (over a second and a tenth of the time served) caps what was served
//! lately at what was served over the time plus the wait: it says how far over the rate was.
//! With a shared budget the meters see only this instance's part, so the limit comes from the
//! peak alone (`learned_margin` under it). The rate resumes at 95 % of the limit when the
//! cooldown ends (a landing, from its lower end) and follows the curve; the curve does not
//! advance while nothing above the rate in force is learned (no demand, a gap between answers,
//! latency near the bound).
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
use super::learned::{Learned, Recent};
use crate::config::HostPolicy;

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
/// A wait longer than this share of the time served since the last cut says how far over the
/// limit the rate was: the limit is then at most what was served over both.
const LONG_WAIT: f64 = 0.1;
/// A 429 met on the way back within this many seconds of the cooldown measures the fall from
/// a few answers only.
const SHORT: f64 = 5.0;
/// The lowest share of the rate that met a 429 that the learned limit may fall to at once
/// where what was served since the cooldown measures a fall; else a half.
const FELL_FLOOR: f64 = 0.25;
/// A probe that went this far past the learned limit before its 429 found a limit that rose
/// (a probe of a limit that held fails within a few per cent of it, or up to 1.3× where a
/// token bucket's burst or the phase of whole windows lets it run on).
const ROSE: f64 = 2.0;
/// The approach after the first cut takes this many times `probe_after_seconds`: a new host
/// settles a little longer before its first probe (a short crawl meets one 429, not two).
const FIRST_APPROACH: f64 = 1.5;
/// The landing after a rise takes this share of `probe_after_seconds`.
const LANDING: f64 = 0.4;

/// Where on its curve a 429 met the rate, and so what it says of the server's limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Met {
    /// The rate is shared with other instances: only the peak is known.
    Shared,
    /// Probing more than [`ROSE`] times past the limit: the limit rose.
    Rose,
    /// Probing past a limit that was a rough guess.
    PastGuess,
    /// Probing past a limit that held the whole approach.
    Probe,
    /// On the way up of a landing.
    Landing,
    /// On the way back, with too few answers since the cooldown to measure anything.
    Unmeasured,
    /// On the way back, within [`SHORT`] of the cooldown.
    Soon,
    /// On the way back, later.
    Later,
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
            learned.count(now, obs.sent_at, 1.0 / self.rate);
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

    /// Moves the learned limit for the first answer of a new wave of trouble: `wait` is the
    /// cooldown it asked for, `sent` when the refused request left.
    pub(super) fn cubic_trouble(
        &mut self,
        wait: Option<Duration>,
        sent: Instant,
        policy: &HostPolicy,
        now: Instant,
    ) {
        let trouble = Trouble {
            peak: self.rate,
            wait: wait.unwrap_or_default().as_secs_f64(),
            sent,
            now,
        };
        let before = self.rare().learned;
        let learned = before.filter(|l| now > l.since);
        let mut next = Next::first_cut(trouble.peak, learned, policy);
        if let Some(l) = learned {
            next.measured(&l, &trouble, policy);
        }
        self.start_curve(&next, &trouble, before, policy);
    }

    /// Puts `next` in force: the rate resumes under the new limit (a landing from its lower
    /// end), and the curve back to it starts when the cooldown ends.
    fn start_curve(
        &mut self,
        next: &Next,
        trouble: &Trouble,
        before: Option<Learned>,
        policy: &HostPolicy,
    ) {
        let Trouble {
            peak, wait, now, ..
        } = *trouble;
        let learned = before.filter(|l| now > l.since);
        let limit = next.limit.max(policy.adaptive.min_rate.min(peak));
        let start = match next.landing_from {
            Some(low) => low.clamp(policy.adaptive.min_rate.min(limit), limit),
            None => lowered(limit, RESUME, policy.adaptive.min_rate).min(peak),
        };
        self.rate = start;
        self.rare_mut().learned = Some(Learned {
            limit: limit as f32,
            start: start as f32,
            peak: peak as f32,
            since: now + Duration::from_secs_f64(wait),
            served: 0,
            meter: learned.map_or(0.0, |l| l.decayed(now, 1.0 / peak) as f32),
            metered: now,
            approach: next.approach as f32,
            ceiling: next.ceiling as f32,
            shared: before.is_some_and(|l| l.shared),
            landing: next.landing_from.is_some(),
            rough: next.rough,
            recent: before.map_or(Recent::new(now), |l| l.recent),
        });
    }

    /// Notes that the rate is kept with other instances: from now on the learned limit does not
    /// trust what this instance alone was served.
    pub(in crate::pacing::policy) fn learn_shared(&mut self) {
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

/// What a cut decides: the next learned limit and the curve back to it.
struct Next {
    /// The learned limit (before its bounds).
    limit: f64,
    /// Seconds back to it.
    approach: f64,
    /// The lowest share of the peak the limit may fall to.
    floor: f64,
    /// See [`Learned::ceiling`].
    ceiling: f64,
    /// Where a landing starts, if this cut lands after a rise.
    landing_from: Option<f64>,
    /// See [`Learned::rough`].
    rough: bool,
}

/// The first answer of a wave of trouble, as a cut reads it.
#[derive(Debug, Clone, Copy)]
struct Trouble {
    /// The rate that met it.
    peak: f64,
    /// Seconds of the cooldown it asked for.
    wait: f64,
    /// When the refused request left.
    sent: Instant,
    /// When it came.
    now: Instant,
}

/// What the server served, as the meters of a learned limit saw it by a wave of trouble.
struct Served {
    /// Seconds into the curve.
    t: f64,
    /// Answers served since the cooldown.
    n: f64,
    /// What it served lately (capped by a long wait).
    lately: f64,
    /// What it served in the span of the wait before the refused request.
    span: f64,
    /// The same, counting those that may have arrived in it after a rise.
    risen: f64,
}

impl Served {
    /// What `l`'s meters say the server served by `trouble`.
    fn by(l: &Learned, trouble: &Trouble) -> Served {
        let Trouble {
            peak,
            wait,
            sent,
            now,
        } = *trouble;
        let t = now.duration_since(l.since).as_secs_f64();
        let n = f64::from(l.served);
        // What the server served lately is what it allows; a long wait says it allowed
        // no more than what it served since the last cut over that time and the wait.
        let mut lately = l.served_lately();
        if wait > LONG_WAIT * t && wait > SHORTEST_WAIT {
            lately = lately.min(n / (t + wait));
        }
        // What it served in the span of the wait before the refused request; after a rise,
        // counting those that may have arrived in it too (a sliding window's count is its
        // quota exactly, and it is what the landing aims at).
        let span_of = |trip: f64| {
            l.recent
                .rate_before(sent, wait.max(SHORTEST_WAIT), trip)
                .unwrap_or(lately)
                .min(peak)
        };
        Served {
            t,
            n,
            lately,
            span: span_of(0.0),
            risen: span_of(now.saturating_duration_since(sent).as_secs_f64()),
        }
    }
}

impl Next {
    /// The cut that knows nothing served: × `decrease_factor`, a rough guess, approached over
    /// [`FIRST_APPROACH`] × `probe_after_seconds`, under the ceiling `learned` has found.
    fn first_cut(peak: f64, learned: Option<Learned>, policy: &HostPolicy) -> Next {
        Next {
            limit: peak * policy.adaptive.decrease_factor,
            approach: FIRST_APPROACH * policy.adaptive.probe_after.as_secs_f64(),
            floor: 0.5,
            ceiling: learned.map_or(f64::INFINITY, |l| f64::from(l.ceiling)),
            landing_from: None,
            rough: true,
        }
    }

    /// The cut measured from what `l`'s meters saw served, by where on its curve `trouble`
    /// met the rate.
    fn measured(&mut self, l: &Learned, trouble: &Trouble, policy: &HostPolicy) {
        let first = policy.adaptive.probe_after.as_secs_f64();
        let margin = 1.0 - policy.adaptive.learned_margin;
        let Trouble { peak, wait, .. } = *trouble;
        let below = peak * margin;
        let old = f64::from(l.limit);
        let Served {
            t,
            n,
            lately,
            span,
            risen,
        } = Served::by(l, trouble);
        self.rough = false;
        self.approach = first;
        match met(l, t, peak) {
            Met::Shared => self.limit = below,
            Met::Rose => {
                self.ceiling = f64::INFINITY;
                self.limit = lately.max(risen) * margin;
                self.landing_from = Some(lately * margin);
                self.approach = LANDING * first;
                self.rough = true;
            }
            Met::PastGuess if l.landing => self.limit = old.max(risen * margin),
            Met::PastGuess => self.limit = old.max(span * margin),
            Met::Probe => {
                let crept = lately.clamp(old, old * (2.0 - margin));
                self.limit = crept.min((self.ceiling * margin).max(old));
            }
            Met::Landing => self.limit = lately.max(span) * margin,
            Met::Unmeasured => self.limit = lately.min(peak * policy.adaptive.decrease_factor),
            Met::Soon => {
                self.ceiling = self.ceiling.min(peak);
                self.floor = FELL_FLOOR;
                self.rough = true;
                // Within the wait's span of the cooldown, what was served since it counts
                // half the wait too: the server's window may have begun before it.
                let mut measured = lately.min(span);
                if t < wait {
                    measured = measured.min(n / (t + wait / 2.0));
                }
                self.limit = measured * margin;
            }
            Met::Later => {
                self.ceiling = self.ceiling.min(peak);
                self.floor = FELL_FLOOR;
                self.limit = lately.min(n / (t + wait / 2.0));
            }
        }
        self.limit = self.limit.clamp(peak * self.floor, below);
    }
}

/// Where on `l`'s curve, `t` seconds into it, a 429 met the rate `peak`.
fn met(l: &Learned, t: f64, peak: f64) -> Met {
    let probing = t >= f64::from(l.approach);
    if l.shared {
        Met::Shared
    } else if probing && peak > ROSE * f64::from(l.limit) {
        Met::Rose
    } else if probing && l.rough {
        Met::PastGuess
    } else if probing {
        Met::Probe
    } else if l.landing {
        Met::Landing
    } else if l.served < FEW_SERVED {
        Met::Unmeasured
    } else if t < SHORT {
        Met::Soon
    } else {
        Met::Later
    }
}
