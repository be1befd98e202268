//! The simulation's profiles (issue 27's table of targets, each against more than one kind of
//! server) and the figures taken from a run.

use std::time::Duration;

use super::runner::{run, Demand, Driver, Record};
use super::servers::{Kind, Server, Style};
use crate::config::{Controller, HostPolicy, OnCooldown};

/// Every driver, in the table's order: each controller (the default first), then Scrapy's
/// AutoThrottle.
pub(super) const DRIVERS: [Driver; 3] = [
    Driver::Courtesy(Controller::Cubic),
    Driver::Courtesy(Controller::Aimd),
    Driver::AutoThrottle,
];

/// courtesy with the controller a host gets when its config names none.
pub(super) fn default_driver() -> Driver {
    Driver::Courtesy(HostPolicy::default().adaptive.controller)
}

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

/// One-second windows announcing their resets in whole seconds: the draft's fields (a reset of
/// 1 may be anything up to a second) and `X-RateLimit-Reset` as a Unix time in whole seconds.
pub(super) const WHOLE_SECONDS: [(&str, Kind); 2] = [
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
pub(super) fn name(driver: Driver) -> String {
    let default = driver == default_driver();
    let name = match driver {
        Driver::Courtesy(Controller::Cubic) => "cubic",
        Driver::Courtesy(Controller::Aimd) => "aimd",
        Driver::AutoThrottle => "autothrottle",
    };
    if default {
        format!("{name} (default)")
    } else {
        name.to_string()
    }
}

/// A constant limit of 5/s for five minutes: the share of it served after the first minute
/// (during the on-periods, with bursty clients), the share of 429s after it, and the arrivals
/// before a reset or wait the server stated.
#[derive(Debug, Clone, Copy)]
pub(super) struct Constant {
    pub(super) served: f64,
    pub(super) throttled: f64,
    pub(super) inside: u32,
}

/// Five minutes against `kind` at 5/s with `demand`.
pub(super) fn constant(driver: Driver, kind: Kind, demand: Demand) -> Constant {
    constant_on(driver, Server::new(kind, &[(0.0, 5.0)]), demand)
}

/// Five minutes against `server` (a limit of 5/s) with `demand`.
pub(super) fn constant_on(driver: Driver, server: Server, demand: Demand) -> Constant {
    let r = run(&practice_policy(), driver, server, demand, 300.0, 16);
    let served = match demand.bursts {
        None => r.served(60.0, 300.0),
        Some((on, off)) => {
            let periods = (60.0 / (on + off)) as usize..(300.0 / (on + off)) as usize;
            let n = periods.len() as f64;
            periods
                .map(|p| {
                    let from = p as f64 * (on + off);
                    r.served(from, from + on)
                })
                .sum::<f64>()
                / n
        }
    };
    Constant {
        served: served / 5.0,
        throttled: r.throttled_share(60.0, 300.0),
        inside: r.inside,
    }
}

/// The limit changing 5 → 2 → 8 ([`CHANGES`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Changes {
    /// Served from 20 s after the fall to the rise ÷ 2.
    pub(super) after_fall: f64,
    /// 429s in the 20 s after the fall.
    pub(super) fall_429: usize,
    /// 429s in the minute after the fall.
    pub(super) fall_minute_429: usize,
    /// Seconds from the rise to the end of the first 5 s that served 90 % of 8/s, if any
    /// within 55 s.
    pub(super) rise: Option<f64>,
    /// Served from a second after each change to the next ÷ the new limit (the fall, the rise).
    pub(super) met: (f64, f64),
    /// 429s from the fall on.
    pub(super) changes_429: usize,
    /// Arrivals before a reset or wait the server stated.
    pub(super) inside: u32,
}

/// Three minutes against `kind`, the limit changing 5 → 2 → 8 a minute each.
pub(super) fn changing(driver: Driver, kind: Kind, seed: u64) -> Changes {
    let server = Server::new(kind, &CHANGES);
    let r = run(&practice_policy(), driver, server, EIGHT, 180.0, seed);
    let ((fall, low), (rise, high)) = (CHANGES[1], CHANGES[2]);
    Changes {
        after_fall: r.served(fall + 20.0, rise) / low,
        fall_429: r.throttled(fall, fall + 20.0),
        fall_minute_429: r.throttled(fall, rise),
        rise: r.time_to(rise, rise + 55.0, high, 0.9).map(|t| t + 5.0),
        met: (
            r.served(fall + 1.0, rise) / low,
            r.served(rise + 1.0, 180.0) / high,
        ),
        changes_429: r.throttled(fall, 180.0),
        inside: r.inside,
    }
}

/// The latency server for five minutes: the rate after the first 100 s, the swing of its 5 s
/// rates, the mean latency.
#[derive(Debug, Clone, Copy)]
pub(super) struct Latency {
    pub(super) rate: f64,
    pub(super) swing: f64,
    pub(super) latency: f64,
}

/// The latency profile with `policy` (its controller replaced by `driver`'s).
fn latency_run(policy: &HostPolicy, driver: Driver) -> Latency {
    let server = Server::new(SLOWING, &[(0.0, f64::INFINITY)]);
    let r = run(policy, driver, server, EIGHT, 300.0, 16);
    Latency {
        rate: r.served(100.0, 300.0),
        swing: r.swing(100.0, 300.0),
        latency: r.mean_latency(100.0, 300.0),
    }
}

/// The latency profile under `driver`.
pub(super) fn latency(driver: Driver) -> Latency {
    latency_run(&latency_policy(), driver)
}

/// The best fixed rate on the latency server: the most served by a rate that does not adapt
/// (8 to 20/s, in steps of 0.25) with a mean latency within `slow_response_ms`.
pub(super) fn best_fixed_rate() -> f64 {
    let slow = latency_policy().adaptive.slow_response.as_secs_f64();
    (32..=80)
        .map(|quarter| {
            let mut policy = latency_policy();
            policy.adaptive.enabled = false;
            policy.pacing.rate = f64::from(quarter) / 4.0;
            latency_run(&policy, Driver::Courtesy(Controller::Aimd))
        })
        .filter(|l| l.latency <= slow)
        .map(|l| l.rate)
        .fold(0.0, f64::max)
}
