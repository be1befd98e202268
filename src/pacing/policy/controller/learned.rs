//! What the learned limit (`controller = "cubic"`) knows of a host after its first cut: the
//! limit, the curve the rate follows back to it and past it, and two measures of what the
//! server served (a meter of healthy answers over the last seconds, and when the last few
//! requests it served were sent). The rules that move them are `cubic.rs`'s.
//!
//! The curve, `t` seconds after the cut's cooldown ended: from `start` back to the limit on a
//! concave cubic over the approach (fast at first, flat near the limit), then past it on a
//! convex one, slowly at first (+2 % after 2.2 s, +10 % after 3.7 s), and once 30 % past it
//! without a refusal (the limit rose) doubling every second (every two turns of the limit
//! where that is longer: the server needs a few requests to refuse one), so that a limit four
//! times higher is found within about 7 s of the probe's start.

use tokio::time::Instant;

use crate::config::HostPolicy;

/// Relative growth past the learned limit per cubed second of probing.
const PROBE: f64 = 0.002;
/// Past this share above the limit, nobody refused: the probe doubles from there on.
const ACCELERATE: f64 = 0.3;
/// Seconds per doubling of the accelerated probe, at least: the server needs a few requests to
/// refuse one (a window of whole seconds lets a faster probe run on for one).
const DOUBLING: f64 = 1.0;
/// Turns of the limit per doubling of the accelerated probe, at least.
const DOUBLING_TURNS: f64 = 2.0;
/// The time constant of the served-rate meter, in seconds.
const METER_SECONDS: f64 = 2.0;
/// How many sending instants [`Recent`] keeps.
const RECENT: usize = 16;

/// What the learned limit knows of a host after its first cut.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(in crate::pacing::policy) struct Learned {
    /// The learned limit: the rate the host is held just below.
    pub(super) limit: f32,
    /// The rate right after the cut.
    pub(super) start: f32,
    /// The rate that met the last 429.
    pub(super) peak: f32,
    /// When the approach to the limit began (the end of the cut's cooldown).
    pub(super) since: Instant,
    /// Healthy answers since the cut.
    pub(super) served: u32,
    /// Healthy answers, decayed with [`METER_SECONDS`] (see [`Learned::served_lately`]).
    pub(super) meter: f32,
    /// When the meter was last moved.
    pub(super) metered: Instant,
    /// Seconds from `since` back to the limit (CUBIC's K).
    pub(super) approach: f32,
    /// The lowest rate that met a 429 on the way back to the limit since the last rise: a
    /// steady probe does not move the limit past it.
    pub(super) ceiling: f32,
    /// Whether the rate is shared with other instances (`[shared]`): what this one was served
    /// is only its part, so the limit comes from the peak alone.
    pub(super) shared: bool,
    /// Whether the curve is landing after a rise: from a rate the server served up to one
    /// it did not yet refuse, so that a 429 on the way says where the new limit stands.
    pub(super) landing: bool,
    /// Whether the limit is only a rough guess (the first cut's, a fall measured from a few
    /// answers, a landing): the next probe moves it as far as what was served says.
    pub(super) rough: bool,
    /// When the requests of the latest healthy answers were sent.
    pub(super) recent: Recent,
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
            ceiling: f32::INFINITY,
            shared: before.is_some_and(|l| l.shared),
            landing: false,
            rough: false,
            recent: before.map_or(Recent::new(now), |l| l.recent),
        }
    }

    /// Counts a healthy answer at `now` to a request sent at `sent` into the measures; `turn`
    /// is the time between two turns at the rate in force.
    pub(super) fn count(&mut self, now: Instant, sent: Instant, turn: f64) {
        self.served = self.served.saturating_add(1);
        self.meter = self.decayed(now, turn) as f32 + 1.0;
        self.metered = now;
        self.recent.push(sent);
    }

    /// The meter at `now`. A gap longer than two turns is idle time (no demand, a cooldown):
    /// the server served nothing because nothing was asked, so the meter decays by two turns.
    pub(super) fn decayed(&self, now: Instant, turn: f64) -> f64 {
        let gap = now.saturating_duration_since(self.metered).as_secs_f64();
        f64::from(self.meter) * (-gap.min(2.0 * turn) / METER_SECONDS).exp()
    }

    /// The rate the server served lately. Read as of the last healthy answer, less half an
    /// answer: at a steady rate the meter stands at rate × time constant + ½ right after an
    /// answer and − ½ just before the next, so this is the rate itself, wherever between two
    /// answers a 429 comes (reading it decayed to the 429 would read low by up to half an
    /// answer per time constant, an eighth of 2/s).
    pub(super) fn served_lately(&self) -> f64 {
        (f64::from(self.meter) - 0.5).max(0.0) / METER_SECONDS
    }

    /// The rate on the curve `t` seconds into the approach.
    pub(super) fn rate_at(&self, t: f64) -> f64 {
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
            limit * probe_gain(t - k, doubling(limit))
        }
    }

    /// The time into the approach at which the curve reaches `rate` (the inverse of
    /// [`Learned::rate_at`]).
    pub(super) fn time_at(&self, rate: f64) -> f64 {
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
            k + probe_time(rate / limit, doubling(limit))
        }
    }
}

/// Seconds per doubling of the accelerated probe past `limit`.
fn doubling(limit: f64) -> f64 {
    (DOUBLING_TURNS / limit).max(DOUBLING)
}

/// The probe's gain over the limit `x` seconds after it began: the convex cubic, then doubling
/// every `doubling` seconds once [`ACCELERATE`] past the limit.
fn probe_gain(x: f64, doubling: f64) -> f64 {
    let turn = (ACCELERATE / PROBE).cbrt();
    if x <= turn {
        1.0 + PROBE * x.powi(3)
    } else {
        (1.0 + ACCELERATE) * 2f64.powf((x - turn) / doubling)
    }
}

/// The inverse of [`probe_gain`]: seconds into the probe at which it gains `gain`.
fn probe_time(gain: f64, doubling: f64) -> f64 {
    let turn = (ACCELERATE / PROBE).cbrt();
    if gain <= 1.0 + ACCELERATE {
        ((gain - 1.0).max(0.0) / PROBE).cbrt()
    } else {
        turn + doubling * (gain / (1.0 + ACCELERATE)).log2()
    }
}

/// When the requests of the latest healthy answers were sent (milliseconds after `anchor`):
/// how many the server served in the span of a `Retry-After` before the request it refused.
/// Where the server keeps a sliding window that count is its quota exactly; where it keeps
/// whole windows or a bucket, about the rate that met the refusal.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Recent {
    anchor: Instant,
    sent: [u32; RECENT],
    len: u8,
    next: u8,
}

impl Recent {
    /// Nothing kept yet; instants are kept relative to `anchor` (before any of them).
    pub(super) fn new(anchor: Instant) -> Self {
        Recent {
            anchor,
            sent: [0; RECENT],
            len: 0,
            next: 0,
        }
    }

    fn push(&mut self, sent: Instant) {
        let ms = sent.saturating_duration_since(self.anchor).as_millis();
        self.sent[usize::from(self.next)] = u32::try_from(ms).unwrap_or(u32::MAX);
        self.next = ((usize::from(self.next) + 1) % RECENT) as u8;
        self.len = (usize::from(self.len) + 1).min(RECENT) as u8;
    }

    /// Requests per second served among those that arrived in the `span` seconds before the
    /// one sent at `before`: the count of those sent in the span and up to a round trip `trip`
    /// earlier (a request sent just before the span may arrive inside it), over the span; or
    /// over the time the kept instants cover where they do not reach back that far; `None` if
    /// none was sent in it.
    pub(super) fn rate_before(&self, before: Instant, span: f64, trip: f64) -> Option<f64> {
        let end = before.saturating_duration_since(self.anchor).as_secs_f64() * 1000.0;
        let from = end - (span + trip) * 1000.0;
        let kept = self.sent[..usize::from(self.len)]
            .iter()
            .map(|ms| f64::from(*ms));
        let inside = kept.clone().filter(|ms| *ms < end && *ms > from).count();
        if inside == 0 {
            return None;
        }
        let oldest = kept.fold(f64::INFINITY, f64::min);
        if usize::from(self.len) == RECENT && oldest > from {
            let covered = (end - oldest) / 1000.0;
            return (covered > 0.0).then(|| (inside as f64 - 1.0).max(1.0) / covered);
        }
        Some(inside as f64 / span)
    }
}
