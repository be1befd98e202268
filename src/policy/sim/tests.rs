//! The targets, asserted for the learned limit, and the table of every controller on
//! every profile.

use super::profiles::*;
use super::runner::{Demand, Driver, Record};
use super::servers::Kind;
use crate::config::Controller;

const CUBIC: Driver = Driver::Courtesy(Controller::Cubic);

/// Five minutes of the Practice exercise against `kind`: (share of the limit served after the
/// first minute, share of 429s after it, arrivals inside a window).
fn constant(driver: Driver, kind: Kind, demand: Demand) -> (f64, f64, u32, Record) {
    let r = limited(driver, kind, &[(0.0, 5.0)], demand, 300.0);
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
    (served / 5.0, r.throttled_share(60.0, 300.0), r.inside, r)
}

/// The changing limit against `kind`: for each change, (served 10–20 s after it ÷ the new
/// limit, 429s in the minute after it, seconds until 5 s served 90 % of the new limit); and
/// arrivals inside a window.
fn changing(driver: Driver, kind: Kind) -> (Vec<(f64, usize, Option<f64>)>, u32) {
    let r = limited(driver, kind, &CHANGES, EIGHT, 180.0);
    let per_change = CHANGES[1..]
        .iter()
        .map(|(at, limit)| {
            (
                r.served(at + 10.0, at + 20.0) / limit,
                r.throttled(*at, at + 60.0),
                r.time_to(*at, at + 55.0, *limit, 0.9),
            )
        })
        .collect();
    (per_change, r.inside)
}

/// Five minutes of the latency server: (mean rate after the first 100 s, its swing, mean
/// latency in seconds).
fn latency(driver: Driver) -> (f64, f64, f64) {
    let r = slowing(driver, 300.0);
    (
        r.served(100.0, 300.0),
        r.swing(100.0, 300.0),
        r.mean_latency(100.0, 300.0),
    )
}

/// Asserts the constant-limit targets against every kind of server with `demand`: at least
/// `least` of the limit served after the first minute, at most 1 % 429s, none inside a window.
fn holds_a_constant_limit(demand: Demand, least: f64) {
    for (label, kind) in LIMITED {
        let (served, throttled, inside, _) = constant(CUBIC, kind, demand);
        assert!(
            served >= least,
            "{label}: served {:.1} % of the limit",
            served * 100.0
        );
        assert!(
            throttled <= 0.01,
            "{label}: {:.2} % 429s",
            throttled * 100.0
        );
        assert_eq!(inside, 0, "{label}: requests inside an announced window");
    }
}

#[test]
fn the_learned_limit_uses_a_constant_limit_and_almost_never_hears_429() {
    holds_a_constant_limit(EIGHT, 0.90);
}

#[test]
fn the_learned_limit_holds_with_bursty_clients() {
    holds_a_constant_limit(BURSTY, 0.90);
}

#[test]
fn the_learned_limit_follows_a_fall_within_ten_seconds_and_a_rise_at_its_next_probe() {
    for (label, kind) in LIMITED {
        let (changes, inside) = changing(CUBIC, kind);
        assert_eq!(inside, 0, "{label}: requests inside an announced window");
        for ((_, throttled, _), change) in changes.iter().zip(["5 -> 2", "2 -> 8"]) {
            assert!(*throttled <= 3, "{label}: {throttled} 429s after {change}");
        }
        let (share, _, _) = changes[0];
        assert!(
            (0.9..=1.0).contains(&share),
            "{label}: 10-20 s after 5 -> 2, {:.0} % of the new limit",
            share * 100.0
        );
        // A rise shows only when a probe goes past the old limit; the probe after a fall comes
        // `2 × probe_after` after the last cut (see docs/reacting.md for why not within 10 s).
        let (_, _, reach) = changes[1];
        assert!(
            reach.is_some_and(|t| t <= 50.0),
            "{label}: 90 % of 8/s only after {reach:?} s"
        );
    }
}

#[test]
fn the_learned_limit_settles_under_rising_latency() {
    let (rate, swing, mean_latency) = latency(CUBIC);
    assert!(mean_latency <= 0.5, "mean latency {mean_latency:.3} s");
    assert!(swing <= 0.2, "the rate swings by {:.0} %", swing * 100.0);
    assert!(
        rate >= 10.0,
        "settled at {rate:.2}/s, far below what stays within 500 ms"
    );
}

#[test]
fn the_learned_limit_follows_an_announced_quota_at_once() {
    for (label, kind) in ANNOUNCING {
        let (served, throttled, inside, _) = constant(CUBIC, kind, EIGHT);
        assert!(served >= 0.9, "{label}: served {:.1} %", served * 100.0);
        assert!(
            throttled <= 0.01,
            "{label}: {:.2} % 429s",
            throttled * 100.0
        );
        assert_eq!(inside, 0, "{label}: requests inside an announced window");
        let (changes, inside) = changing(CUBIC, kind);
        assert_eq!(inside, 0, "{label}: requests inside an announced window");
        for ((share, throttled, reach), (_, limit)) in changes.iter().zip(&CHANGES[1..]) {
            assert!(
                (0.9..=1.0).contains(share),
                "{label}: 10-20 s after the change to {limit}/s, {:.0} % of it",
                share * 100.0
            );
            assert!(
                *throttled <= 3,
                "{label}: {throttled} 429s after the change"
            );
            assert!(
                reach.is_some_and(|t| t <= 10.0),
                "{label}: 90 % of {limit}/s only after {reach:?} s"
            );
        }
    }
}

/// The figures of every controller on every profile, printed as one table.
#[test]
fn every_controller_on_every_profile() {
    let mut rows = Vec::new();
    for (label, kind) in LIMITED.into_iter().chain(ANNOUNCING).chain(COARSE) {
        for (what, demand) in [("constant 5/s", EIGHT), ("bursty, 40 clients", BURSTY)] {
            let cells: Vec<String> = DRIVERS
                .iter()
                .map(|d| {
                    let (served, throttled, inside, _) = constant(*d, kind, demand);
                    format!(
                        "{:.1} % / {:.2} % / {inside}",
                        served * 100.0,
                        throttled * 100.0
                    )
                })
                .collect();
            rows.push((format!("{what}, {label}"), cells));
        }
        let cells: Vec<String> = DRIVERS
            .iter()
            .map(|d| {
                let (changes, inside) = changing(*d, kind);
                let parts: Vec<String> = changes
                    .iter()
                    .zip(["", ", 90 % after "])
                    .map(|((share, n, reach), after)| {
                        let reach = match (after, reach) {
                            ("", _) => String::new(),
                            (_, Some(t)) => format!("{after}{t:.0} s"),
                            (_, None) => format!("{after}> 55 s"),
                        };
                        format!("{:.0} % ({n}){reach}", share * 100.0)
                    })
                    .collect();
                format!("{} / {inside}", parts.join(", "))
            })
            .collect();
        rows.push((format!("5 -> 2 -> 8, {label}"), cells));
    }
    let cells: Vec<String> = DRIVERS
        .iter()
        .map(|d| {
            let (rate, swing, lat) = latency(*d);
            format!(
                "{rate:.2}/s / {:.0} % / {:.0} ms",
                swing * 100.0,
                lat * 1000.0
            )
        })
        .collect();
    rows.push(("latency under load (slow > 500 ms)".to_string(), cells));
    let names: Vec<&str> = DRIVERS.iter().map(|d| name(*d)).collect();
    eprintln!("| profile | {} |", names.join(" | "));
    eprintln!("|---|{}", "---|".repeat(names.len()));
    for (profile, cells) in &rows {
        eprintln!("| {profile} | {} |", cells.join(" | "));
    }
    assert_eq!(
        rows.len(),
        3 * (LIMITED.len() + ANNOUNCING.len() + COARSE.len()) + 1
    );
}

/// The learned limit and AIMD over eight more seeds (network times, the order of the clients),
/// printed:
/// `cargo test --lib sim -- --ignored --nocapture`.
#[test]
#[ignore = "a longer sweep, for the figures in benches/SUMMARY_RESULTS.md"]
fn over_more_seeds() {
    use super::runner::run;
    use super::servers::Server;
    let policy = practice_policy();
    for (label, kind, driver) in LIMITED
        .into_iter()
        .flat_map(|(l, k)| [(l, k, CUBIC), (l, k, Driver::Courtesy(Controller::Aimd))])
    {
        let (mut least, mut most_429) = (f64::INFINITY, 0.0f64);
        let (mut fall, mut reach, mut throttled) = (Vec::new(), Vec::new(), Vec::new());
        for seed in 1..=8u64 {
            for demand in [EIGHT, BURSTY] {
                let r = run(
                    &policy,
                    driver,
                    Server::new(kind, &[(0.0, 5.0)]),
                    demand,
                    300.0,
                    seed,
                );
                if demand == EIGHT {
                    least = least.min(r.served(60.0, 300.0) / 5.0);
                }
                most_429 = most_429.max(r.throttled_share(60.0, 300.0));
            }
            let r = run(
                &policy,
                driver,
                Server::new(kind, &CHANGES),
                EIGHT,
                180.0,
                seed,
            );
            fall.push(r.served(70.0, 80.0) / 2.0);
            reach.push(r.time_to(120.0, 175.0, 8.0, 0.9));
            throttled.push((r.throttled(60.0, 120.0), r.throttled(120.0, 180.0)));
        }
        let mean = fall.iter().sum::<f64>() / fall.len() as f64;
        eprintln!(
            "{label}, {}: constant: least served {:.1} %, most 429s {:.2} %; 10-20 s after 5 -> 2: \
             mean {:.0} %, least {:.0} %; 429s after each change {throttled:?}; 90 % of 8/s \
             after {reach:?} s",
            name(driver),
            least * 100.0,
            most_429 * 100.0,
            mean * 100.0,
            fall.iter().copied().fold(f64::INFINITY, f64::min) * 100.0,
        );
    }
}
