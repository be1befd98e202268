//! Scenario 7, adaptive rate end to end (issue 27's table): courtesy's controllers against real
//! rate-limited origins on loopback (`origins.rs`), 8 polite clients per run, every run at once,
//! each on its own origin address and its own courtesy, for `--adaptive-seconds` (default 300).
//!
//! Who adapts: courtesy with its default controller (no `controller` key: the seed article's
//! Practice exercise on defaults, `rate = 10`, `adaptive = true`, `max_rate = 10`, the rest as
//! shipped), with `controller = "aimd"`, and Scrapy's AutoThrottle as a delay in the clients
//! (courtesy not adaptive, its cooldowns still in force). On the latency origin, courtesy at
//! fixed rates (not adaptive) too, for the best fixed rate.
//!
//! | file | owns |
//! |---|---|
//! | `mod.rs` | the runs and the report |
//! | `origins.rs` | the origins and what they record |
//! | `clients.rs` | the polite clients and AutoThrottle's delay |

mod clients;
mod origins;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::courtesy::Courtesy;
use crate::load::{join_all, target, tokio_at};
use crate::origin::host_ip;
use crate::report::{row, Section};
use clients::{polite, Throttle};
use origins::{phase, Arrival, Keeps, Profile};

/// Who adapts the rate.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Driver {
    /// courtesy as shipped: no `controller` key.
    Default,
    /// `controller = "aimd"`.
    Aimd,
    /// Scrapy's AutoThrottle in the clients.
    AutoThrottle,
    /// courtesy at this fixed rate (latency origin only).
    Fixed(f64),
}

impl Driver {
    fn name(self) -> String {
        match self {
            Driver::Default => "default (cubic)".into(),
            Driver::Aimd => "aimd".into(),
            Driver::AutoThrottle => "autothrottle".into(),
            Driver::Fixed(rate) => format!("fixed {rate}/s"),
        }
    }
}

/// The fixed rates tried on the latency origin.
const FIXED: [f64; 6] = [12.0, 13.0, 14.0, 15.0, 16.0, 17.0];

/// Every profile run with every driver.
const PROFILES: [Profile; 11] = [
    Profile::Constant(Keeps::Fixed),
    Profile::Constant(Keeps::Bucket),
    Profile::Constant(Keeps::Sliding),
    Profile::Changing(Keeps::Fixed),
    Profile::Changing(Keeps::Bucket),
    Profile::Changing(Keeps::Sliding),
    Profile::Counted,
    Profile::QuotaAlone,
    Profile::WholeSeconds,
    Profile::XWholeSeconds,
    Profile::Latency,
];

/// What one run saw at its origin.
struct Outcome {
    profile: Profile,
    driver: Driver,
    arrivals: Vec<Arrival>,
    /// Arrivals inside a span the origin said nothing may arrive in.
    inside: usize,
}

impl Outcome {
    fn between(&self, from: f64, to: f64) -> impl Iterator<Item = &Arrival> {
        self.arrivals
            .iter()
            .filter(move |a| a.at >= from && a.at < to)
    }

    fn served(&self, from: f64, to: f64) -> f64 {
        self.between(from, to).filter(|a| a.status == 200).count() as f64 / (to - from)
    }

    fn throttled(&self, from: f64, to: f64) -> usize {
        self.between(from, to).filter(|a| a.status == 429).count()
    }

    fn share_429(&self, from: f64, to: f64) -> f64 {
        self.throttled(from, to) as f64 / self.between(from, to).count().max(1) as f64
    }

    /// (highest − lowest) ÷ mean of the 5 s rates in `[from, to)`.
    fn swing(&self, from: f64, to: f64) -> f64 {
        let rates: Vec<f64> = (0..((to - from) / 5.0) as usize)
            .map(|i| self.served(from + 5.0 * i as f64, from + 5.0 * (i + 1) as f64))
            .collect();
        let mean = rates.iter().sum::<f64>() / rates.len().max(1) as f64;
        let hi = rates.iter().copied().fold(0.0, f64::max);
        let lo = rates.iter().copied().fold(f64::INFINITY, f64::min);
        (hi - lo) / mean.max(f64::MIN_POSITIVE)
    }

    /// Seconds after `from` to the end of the first 5 s (checked each second, ending by `to`)
    /// that served `share` of `limit`, or `None`.
    fn reached(&self, from: f64, to: f64, limit: f64, share: f64) -> Option<f64> {
        (0..(to - from - 5.0).max(0.0) as usize)
            .map(|i| from + i as f64)
            .find(|t| self.served(*t, t + 5.0) >= share * limit)
            .map(|t| t - from + 5.0)
    }

    fn mean_took(&self, from: f64, to: f64) -> f64 {
        let took: Vec<f64> = self.between(from, to).map(|a| a.took).collect();
        took.iter().sum::<f64>() / took.len().max(1) as f64
    }
}

/// The `[defaults]` of courtesy for one run.
fn defaults(profile: Profile, driver: Driver) -> String {
    let adaptive = match driver {
        Driver::Default => "adaptive = true".to_string(),
        Driver::Aimd => "adaptive = true\ncontroller = \"aimd\"".to_string(),
        Driver::AutoThrottle | Driver::Fixed(_) => "adaptive = false".to_string(),
    };
    let rate = match driver {
        Driver::Fixed(rate) => rate,
        _ => 10.0,
    };
    let shape = match profile {
        Profile::Latency => "concurrency = 8\nmax_rate = 20\nslow_response_ms = 500",
        _ => "max_rate = 10",
    };
    format!("rate = {rate}\n{adaptive}\n{shape}")
}

/// Every run: each profile with each driver, and the fixed rates on the latency origin.
fn runs() -> Vec<(Profile, Driver)> {
    let drivers = [Driver::Default, Driver::Aimd, Driver::AutoThrottle];
    let mut runs: Vec<(Profile, Driver)> = PROFILES
        .iter()
        .flat_map(|p| drivers.iter().map(move |d| (*p, *d)))
        .collect();
    runs.extend(FIXED.iter().map(|r| (Profile::Latency, Driver::Fixed(*r))));
    runs
}

/// Runs scenario 7 against the courtesy binary `bin`, each run `seconds` long.
pub async fn run(bin: &Path, seconds: u64) -> anyhow::Result<Section> {
    let secs = seconds as f64;
    let mut section = Section::new(
        7,
        &format!("Adaptive rate end to end (8 polite clients, {seconds} s per run)"),
    );
    // Every courtesy first (starting 39 takes seconds), then every origin and client on one
    // clock.
    let mut courtesies = Vec::new();
    for (i, (profile, driver)) in runs().into_iter().enumerate() {
        let name = format!("adaptive-{i}");
        let courtesy = Courtesy::start(bin, &name, &defaults(profile, driver), 600).await?;
        courtesies.push((i, profile, driver, courtesy));
    }
    let start = Instant::now() + Duration::from_secs(2);
    let deadline = start + Duration::from_secs(seconds);
    let mut started = Vec::new();
    let mut tasks = Vec::new();
    for (i, profile, driver, courtesy) in courtesies {
        let ip = host_ip(600 + i);
        let (port, log, origin) = origins::start(ip, profile, start, secs).await?;
        let throttle = (driver == Driver::AutoThrottle).then(|| {
            Arc::new(Mutex::new(Throttle {
                delay: 0.1,
                next: start,
            }))
        });
        let (url, host) = target(ip, port);
        for _ in 0..8 {
            let (url, host, throttle) = (url.clone(), host.clone(), throttle.clone());
            let proxy = courtesy.proxy;
            tasks.push(tokio::spawn(async move {
                tokio::time::sleep_until(tokio_at(start)).await;
                polite(proxy, url, host, deadline, throttle).await;
            }));
        }
        started.push((profile, driver, log, origin, courtesy));
    }
    join_all(tasks, deadline + Duration::from_secs(10)).await;
    let mut outcomes = Vec::new();
    for (profile, driver, log, origin, courtesy) in started {
        courtesy.stop().await;
        origin.abort();
        let l = log.lock().unwrap_or_else(|p| p.into_inner());
        let inside = l
            .arrivals
            .iter()
            .filter(|a| {
                l.windows
                    .iter()
                    .any(|(from, until)| a.at > *from && a.at + 0.005 < *until)
            })
            .count();
        outcomes.push(Outcome {
            profile,
            driver,
            arrivals: l.arrivals.clone(),
            inside,
        });
    }
    report(&mut section, &outcomes, secs);
    section.notes.push(
        "Every run at once, each with its own courtesy (release binary, `RUST_LOG=warn`) and \
         origin address; courtesy at `rate = 10`, `adaptive = true`, `max_rate = 10` and \
         everything else as shipped (burst 1, one request in flight, `on_cooldown = \"reject\"`); \
         \"default (cubic)\" names no controller. The AutoThrottle runs pace in the clients (one \
         shared delay, Scrapy's rule with target concurrency 1, from 0.1 s) through a courtesy \
         that does not adapt. Served rates count 200s at the origin; \"inside\" counts arrivals \
         inside a span the origin said nothing may arrive in (a 429's Retry-After, the stated \
         reset of a window it announced spent); the time to answer is the origin's own (latency \
         profile). The rise is reached at the end of the first 5 s that served 90 % of 8/s."
            .to_string(),
    );
    Ok(section)
}

/// The rows of the report: issue 27's table for every driver.
fn report(section: &mut Section, outcomes: &[Outcome], secs: f64) {
    let warm = (secs / 5.0).min(60.0);
    let phase = phase(secs);
    let best = best_fixed(outcomes, secs);
    for o in outcomes
        .iter()
        .filter(|o| matches!(o.driver, Driver::Fixed(_)))
    {
        let from = secs / 3.0;
        section.rows.push(row(
            format!(
                "{}, {}: rate / mean time to answer, after {from:.0} s",
                o.profile.name(),
                o.driver.name()
            ),
            "(the best fixed rate within 500 ms)",
            format!(
                "{:.2}/s / {:.0} ms",
                o.served(from, secs),
                o.mean_took(from, secs) * 1000.0
            ),
        ));
    }
    for o in outcomes
        .iter()
        .filter(|o| !matches!(o.driver, Driver::Fixed(_)))
    {
        let name = o.driver.name();
        let profile = o.profile.name();
        match o.profile {
            Profile::Constant(_) | Profile::WholeSeconds | Profile::XWholeSeconds => {
                let least = if matches!(o.profile, Profile::Constant(_)) {
                    0.9
                } else {
                    0.85
                };
                let served = o.served(warm, secs) / 5.0;
                let share = o.share_429(warm, secs);
                section.rows.push(
                    row(
                        format!(
                            "{profile}, {name}: served ÷ limit / 429s / inside, after {warm:.0} s"
                        ),
                        format!("≥ {:.0} % / ≤ 1 % / 0", least * 100.0),
                        format!(
                            "{:.1} % / {:.2} % / {}",
                            served * 100.0,
                            share * 100.0,
                            o.inside
                        ),
                    )
                    .judged(served >= least && share <= 0.01 && o.inside == 0),
                );
                if o.profile == Profile::Constant(Keeps::Fixed) && o.driver == Driver::Default {
                    practice_rows(section, o, secs);
                }
            }
            Profile::Changing(_) => {
                let (fall, rise) = (phase, 2.0 * phase);
                let after = o.served(fall + 20.0, rise) / 2.0;
                let fall_429 = o.throttled(fall, fall + 20.0);
                section.rows.push(
                    row(
                        format!("{profile}, {name}: fall, served from 20 s after ÷ 2/s / 429s in those 20 s (in the phase) / inside"),
                        "≥ 90 % / ≤ 3 / 0",
                        format!("{:.0} % / {fall_429} ({}) / {}", after * 100.0, o.throttled(fall, rise), o.inside),
                    )
                    .judged(after >= 0.9 && fall_429 <= 3 && o.inside == 0),
                );
                let reached = o.reached(rise, (rise + phase).min(secs), 8.0, 0.9);
                section.rows.push(
                    row(
                        format!("{profile}, {name}: rise, 90 % of 8/s reached after"),
                        "≤ 40 s",
                        reached.map_or("not reached".into(), |t| format!("{t:.0} s")),
                    )
                    .judged(reached.is_some_and(|t| t <= 40.0)),
                );
            }
            Profile::Counted | Profile::QuotaAlone => {
                let (fall, rise) = (phase, 2.0 * phase);
                // Before the fall, after its first third (the first answers announce the quota).
                let constant = o.served(fall / 3.0, fall) / 5.0;
                let met = (
                    o.served(fall + 1.0, rise) / 2.0,
                    o.served(rise + 1.0, secs) / 8.0,
                );
                let throttled = o.throttled(warm, secs);
                let pass = constant >= 0.95
                    && met.0 >= 0.95
                    && met.1 >= 0.95
                    && throttled == 0
                    && o.inside == 0;
                section.rows.push(
                    row(
                        format!("{profile}, {name}: served ÷ 5/s over the last two thirds before the fall; ÷ each new limit from 1 s after it / 429s / inside"),
                        "≥ 95 %; ≥ 95 %, ≥ 95 % / 0 / 0",
                        format!(
                            "{:.0} %; {:.0} %, {:.0} % / {throttled} / {}",
                            constant * 100.0,
                            met.0 * 100.0,
                            met.1 * 100.0,
                            o.inside
                        ),
                    )
                    .judged(pass),
                );
            }
            Profile::Latency => {
                let from = secs / 3.0;
                let (rate, swing) = (o.served(from, secs), o.swing(from, secs));
                let took = o.mean_took(from, secs);
                let pass = rate >= 0.9 * best && swing <= 0.15;
                section.rows.push(
                    row(
                        format!("{profile}, {name}: rate (÷ best fixed {best:.2}/s) / swing of 5 s rates / mean time to answer, after {from:.0} s"),
                        "≥ 90 % / ≤ 15 %",
                        format!(
                            "{rate:.2}/s ({:.0} %) / {:.0} % / {:.0} ms",
                            rate / best.max(f64::MIN_POSITIVE) * 100.0,
                            swing * 100.0,
                            took * 1000.0
                        ),
                    )
                    .judged(pass),
                );
            }
        }
    }
}

/// The seed article's Practice exercise on defaults (the default's run on whole one-second
/// windows): the rate over the final third of its first 30 s and of the whole run, and the
/// share of 429s over each.
fn practice_rows(section: &mut Section, o: &Outcome, secs: f64) {
    for length in [30.0, secs] {
        let third = (2.0 * length / 3.0, length);
        let rate = o.served(third.0, third.1);
        let share = o.share_429(0.0, length);
        section.rows.push(
            row(
                format!("Practice exercise on defaults, {length:.0} s: req/s over the final third / 429s over the run"),
                "≥ 4.5 / ≤ 1 %",
                format!("{rate:.2} / {:.2} % ({} of {})", share * 100.0, o.throttled(0.0, length), o.between(0.0, length).count()),
            )
            .judged(rate >= 4.5 && share <= 0.01),
        );
    }
}

/// The best fixed rate on the latency origin: the most served (after the first third) by a
/// fixed rate whose mean time to answer stayed within 500 ms; one row per fixed rate.
fn best_fixed(outcomes: &[Outcome], secs: f64) -> f64 {
    let from = secs / 3.0;
    outcomes
        .iter()
        .filter(|o| matches!(o.driver, Driver::Fixed(_)))
        .filter(|o| o.mean_took(from, secs) <= 0.5)
        .map(|o| o.served(from, secs))
        .fold(0.0, f64::max)
}
