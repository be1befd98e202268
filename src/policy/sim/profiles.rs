//! The simulation's profiles (the targets, each against more than one kind of server)
//! and the figures taken from a run.

use std::time::Duration;

use super::runner::{run, Demand, Driver, Record};
use super::servers::{Kind, Server, Style};
use crate::config::{Controller, HostPolicy, OnCooldown};

/// Every driver, in the table's order.
pub(super) const DRIVERS: [Driver; 3] = [
    Driver::Courtesy(Controller::Cubic),
    Driver::Courtesy(Controller::Aimd),
    Driver::AutoThrottle,
];

/// The seed article's Practice exercise: 8 clients, courtesy at 10/s adaptive, one at a time.
pub(super) fn practice_policy() -> HostPolicy {
    {
        let mut p = HostPolicy::default();
        p.pacing.rate = 10.0;
        p.pacing.burst = 1;
        p.adaptive.enabled = true;
        p.adaptive.max_rate = 10.0;
        p.cooldown.on_cooldown = OnCooldown::Reject;
        p
    }
}

/// The latency profile's policy: eight in flight, slow above 500 ms, up to 20/s.
pub(super) fn latency_policy() -> HostPolicy {
    {
        let mut p = practice_policy();
        p.pacing.concurrency = 8;
        p.adaptive.max_rate = 20.0;
        p.adaptive.slow_response = Duration::from_millis(500);
        p
    }
}

/// A limit kept three ways.
pub(super) const LIMITED: [(&str, Kind); 3] = [
    (
        "token bucket 5/s, burst 2",
        Kind::TokenBucket { burst: 2.0 },
    ),
    ("fixed 1 s window", Kind::FixedWindow),
    ("sliding 1 s window", Kind::SlidingWindow),
];

/// The limit announced in RateLimit headers: over 10 s windows three ways (the draft's fields
/// and their older form with whole-second resets, `X-RateLimit-*` with resets as Unix times),
/// and the quota of 1 s windows alone (`RateLimit-Policy: 5;w=1`, nothing counted down).
pub(super) const ANNOUNCING: [(&str, Kind); 4] = [
    (
        "announced: draft fields, 10 s window",
        Kind::Announcing {
            style: Style::Draft,
            window: 10,
        },
    ),
    (
        "announced: older fields, 10 s window",
        Kind::Announcing {
            style: Style::Older,
            window: 10,
        },
    ),
    (
        "announced: X-RateLimit, 10 s window",
        Kind::Announcing {
            style: Style::XPrefixed,
            window: 10,
        },
    ),
    (
        "announced: the quota alone, 1 s window",
        Kind::Announcing {
            style: Style::PolicyOnly,
            window: 1,
        },
    ),
];

/// One-second windows announced: with the draft's whole-second resets (a reset of 1 may be
/// anything up to a second, and the budget's hard rules take it as a whole one) and with
/// `X-RateLimit-Reset` as a Unix time. Shown, not asserted (see benches/SUMMARY_RESULTS.md).
pub(super) const COARSE: [(&str, Kind); 2] = [
    (
        "announced: draft fields, 1 s window",
        Kind::Announcing {
            style: Style::Draft,
            window: 1,
        },
    ),
    (
        "announced: X-RateLimit, 1 s window",
        Kind::Announcing {
            style: Style::XPrefixed,
            window: 1,
        },
    ),
];

/// Eight polite clients, always wanting pages.
pub(super) const EIGHT: Demand = Demand {
    clients: 8,
    bursts: None,
};

/// Forty clients, on for 10 s, off for 5 s.
pub(super) const BURSTY: Demand = Demand {
    clients: 40,
    bursts: Some((10.0, 5.0)),
};

/// The latency server: 100 ms, plus 50 ms per request in flight: answers stay within 500 ms up
/// to about 16 requests per second.
pub(super) const SLOWING: Kind = Kind::Latency {
    base: 0.1,
    per_request: 0.05,
};

/// The changing limit: 5, 2, then 8 requests per second, a minute each.
pub(super) const CHANGES: [(f64, f64); 3] = [(0.0, 5.0), (60.0, 2.0), (120.0, 8.0)];

/// A run of the Practice exercise against `kind` for `seconds`, limit `schedule`.
pub(super) fn limited(
    driver: Driver,
    kind: Kind,
    schedule: &[(f64, f64)],
    demand: Demand,
    seconds: f64,
) -> Record {
    let server = Server::new(kind, schedule);
    run(&practice_policy(), driver, server, demand, seconds, 16)
}

/// The latency profile for `seconds`.
pub(super) fn slowing(driver: Driver, seconds: f64) -> Record {
    let server = Server::new(SLOWING, &[(0.0, f64::INFINITY)]);
    run(&latency_policy(), driver, server, EIGHT, seconds, 16)
}

impl Record {
    /// 200s per second among requests sent in `[from, to)`.
    pub(super) fn served(&self, from: f64, to: f64) -> f64 {
        let n = self.between(from, to).filter(|s| s.status == 200).count();
        n as f64 / (to - from)
    }

    /// 429s among the answers to requests sent in `[from, to)`.
    pub(super) fn throttled(&self, from: f64, to: f64) -> usize {
        self.between(from, to).filter(|s| s.status == 429).count()
    }

    /// The share of 429s among the answers to requests sent in `[from, to)`.
    pub(super) fn throttled_share(&self, from: f64, to: f64) -> f64 {
        let all = self.between(from, to).count().max(1);
        self.throttled(from, to) as f64 / all as f64
    }

    /// The mean latency of answers to requests sent in `[from, to)`, seconds.
    pub(super) fn mean_latency(&self, from: f64, to: f64) -> f64 {
        let (n, sum) = self
            .between(from, to)
            .fold((0usize, 0.0), |(n, sum), s| (n + 1, sum + s.latency));
        sum / n.max(1) as f64
    }

    /// How far the rate swings in `[from, to)`: (highest − lowest) ÷ mean of the 5 s rates.
    pub(super) fn swing(&self, from: f64, to: f64) -> f64 {
        let rates: Vec<f64> = (0..((to - from) / 5.0) as usize)
            .map(|i| self.served(from + 5.0 * i as f64, from + 5.0 * (i + 1) as f64))
            .collect();
        let mean = rates.iter().sum::<f64>() / rates.len().max(1) as f64;
        let (lo, hi) = rates.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), r| {
            (lo.min(*r), hi.max(*r))
        });
        (hi - lo) / mean.max(f64::MIN_POSITIVE)
    }

    /// Seconds after `from` until 5 s in a row served at least `share` of `limit` (checked each
    /// second up to `to`), or `None`.
    pub(super) fn time_to(&self, from: f64, to: f64, limit: f64, share: f64) -> Option<f64> {
        (0..(to - from) as usize)
            .map(|i| from + i as f64)
            .find(|t| self.served(*t, t + 5.0) >= share * limit)
            .map(|t| t - from)
    }

    fn between(&self, from: f64, to: f64) -> impl Iterator<Item = &super::runner::Sent> {
        self.sent.iter().filter(move |s| s.at >= from && s.at < to)
    }
}

/// The name of a driver in the table.
pub(super) fn name(driver: Driver) -> &'static str {
    match driver {
        Driver::Courtesy(Controller::Cubic) => "cubic",
        Driver::Courtesy(Controller::Aimd) => "aimd",
        Driver::AutoThrottle => "autothrottle",
    }
}
