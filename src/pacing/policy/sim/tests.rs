//! Issue 27's table of targets, asserted for the default controller, row by row; and the table
//! of every controller and baseline on every profile (`cargo test --lib sim -- --nocapture`).

use super::profiles::*;
use super::runner::{Demand, Driver};
use super::servers::{Kind, Server};
use crate::config::Controller;

/// The seed every asserted run uses (network times, the order of the clients).
const SEED: u64 = 16;

/// Asserts the constant-limit row against every kind of server with `demand`: at least 90 % of
/// the limit served after the first minute, at most 1 % 429s, none inside a stated window.
fn holds_a_constant_limit(demand: Demand) {
    for (label, kind) in LIMITED {
        let c = constant(default_driver(), kind, demand);
        assert!(
            c.served >= 0.90,
            "{label}: served {:.1} % of the limit",
            c.served * 100.0
        );
        assert!(
            c.throttled <= 0.01,
            "{label}: {:.2} % 429s",
            c.throttled * 100.0
        );
        assert_eq!(c.inside, 0, "{label}: requests inside an announced window");
    }
}

#[test]
fn the_default_uses_a_constant_limit_and_almost_never_hears_429() {
    holds_a_constant_limit(EIGHT);
}

#[test]
fn the_default_holds_a_constant_limit_with_bursty_clients() {
    holds_a_constant_limit(BURSTY);
}

#[test]
fn the_default_follows_a_fall_within_twenty_seconds_for_three_429s() {
    for (label, kind) in LIMITED {
        let c = changing(default_driver(), kind, SEED);
        assert_eq!(c.inside, 0, "{label}: requests inside an announced window");
        assert!(
            c.after_fall >= 0.9,
            "{label}: from 20 s after 5 -> 2, {:.0} % of the new limit",
            c.after_fall * 100.0
        );
        assert!(c.fall_429 <= 3, "{label}: {} 429s for the fall", c.fall_429);
    }
}

#[test]
fn the_default_finds_a_rise_within_forty_seconds() {
    for (label, kind) in LIMITED {
        let c = changing(default_driver(), kind, SEED);
        assert!(
            c.rise.is_some_and(|t| t <= 40.0),
            "{label}: 90 % of 8/s reached after {:?} s",
            c.rise
        );
    }
}

#[test]
fn the_default_spends_an_announced_limit_and_follows_its_changes_at_once() {
    for (label, kind) in ANNOUNCING {
        let c = constant(default_driver(), kind, EIGHT);
        assert!(
            c.served >= 0.95,
            "{label}: served {:.1} %",
            c.served * 100.0
        );
        assert_eq!(c.throttled, 0.0, "{label}: 429s");
        assert_eq!(c.inside, 0, "{label}: requests inside an announced window");
        let c = changing(default_driver(), kind, SEED);
        assert_eq!(c.changes_429, 0, "{label}: 429s after the changes");
        assert_eq!(c.inside, 0, "{label}: requests inside an announced window");
        let (fall, rise) = c.met;
        for (share, change) in [(fall, "5 -> 2"), (rise, "2 -> 8")] {
            assert!(
                share >= 0.95,
                "{label}: from 1 s after {change}, {:.0} % of the new limit",
                share * 100.0
            );
        }
    }
}

#[test]
fn the_default_stays_near_the_best_fixed_rate_under_latency() {
    let best = best_fixed_rate();
    let l = latency(default_driver());
    assert!(
        l.rate >= 0.9 * best,
        "{:.2}/s against the best fixed {best:.2}/s",
        l.rate
    );
    assert!(
        l.swing <= 0.15,
        "the rate swings by {:.0} %",
        l.swing * 100.0
    );
}

#[test]
fn the_default_learns_the_phase_of_whole_second_windows_and_keeps_their_resets() {
    for (label, kind) in WHOLE_SECONDS {
        // Round trips of 20-60 ms, and a loopback away (about a millisecond).
        let server = Server::new(kind, &[(0.0, 5.0)]);
        let runs = [EIGHT, BURSTY].map(|d| (server.clone(), d));
        let on_loopback = [EIGHT, BURSTY].map(|d| (server.clone().on_loopback(), d));
        for (server, demand) in runs.into_iter().chain(on_loopback) {
            let c = constant_on(default_driver(), server, demand);
            assert!(
                c.served >= 0.85,
                "{label}: served {:.1} %",
                c.served * 100.0
            );
            assert!(
                c.throttled <= 0.01,
                "{label}: {:.2} % 429s",
                c.throttled * 100.0
            );
            assert_eq!(
                c.inside, 0,
                "{label}: a request arrived before a reset the server stated"
            );
        }
    }
}

/// `ok` when `pass`, else `MISS`.
fn mark(pass: bool) -> &'static str {
    if pass {
        "ok"
    } else {
        "MISS"
    }
}

/// The cells of one row: `cell` for every driver.
fn cells(cell: impl Fn(Driver) -> String) -> Vec<String> {
    DRIVERS.iter().map(|d| cell(*d)).collect()
}

/// A constant-limit cell: served / 429s / inside, against `least` served.
fn constant_cell(c: Constant, least: f64) -> String {
    let pass = c.served >= least && c.throttled <= 0.01 && c.inside == 0;
    format!(
        "{:.1} % / {:.2} % / {} {}",
        c.served * 100.0,
        c.throttled * 100.0,
        c.inside,
        mark(pass)
    )
}

/// A row of the table: the profile, the target, a cell per driver.
type Row = (String, String, Vec<String>);

/// The constant-limit rows of a server (8 clients, then bursty ones), against `least` served.
fn constant_rows(rows: &mut Vec<Row>, (label, kind): (&str, Kind), least: f64) {
    for (what, demand) in [("constant 5/s", EIGHT), ("constant 5/s, bursty", BURSTY)] {
        let row = cells(|d| constant_cell(constant(d, kind, demand), least));
        let target = format!("≥ {:.0} % / ≤ 1 % / 0", least * 100.0);
        rows.push((format!("{what}, {label}"), target, row));
    }
}

/// The fall and rise rows of a limiting server: 429s for the fall, seconds to find the rise.
fn fall_and_rise_rows(rows: &mut Vec<Row>, (label, kind): (&str, Kind)) {
    let fall = cells(|d| {
        let c = changing(d, kind, SEED);
        let pass = c.after_fall >= 0.9 && c.fall_429 <= 3 && c.inside == 0;
        format!(
            "{:.0} % / {} ({} in the minute) {}",
            c.after_fall * 100.0,
            c.fall_429,
            c.fall_minute_429,
            mark(pass)
        )
    });
    rows.push((
        format!("fall 5 -> 2, {label}"),
        "≥ 90 % from 20 s after / ≤ 3 429s in those 20 s".into(),
        fall,
    ));
    let rise = cells(|d| {
        let c = changing(d, kind, SEED);
        match c.rise {
            Some(t) => format!("{t:.0} s {}", mark(t <= 40.0)),
            None => "> 55 s MISS".to_string(),
        }
    });
    rows.push((
        format!("rise 2 -> 8, {label}"),
        "90 % of 8/s within 40 s".into(),
        rise,
    ));
}

/// The rows of a server that announces its quota: a constant limit spent, and its changes
/// followed at once.
fn announced_rows(rows: &mut Vec<Row>, (label, kind): (&str, Kind)) {
    let row = cells(|d| constant_cell(constant(d, kind, EIGHT), 0.95));
    rows.push((
        format!("constant 5/s, {label}"),
        "≥ 95 % / 0 429s / 0".into(),
        row,
    ));
    let changes = cells(|d| {
        let c = changing(d, kind, SEED);
        let (fall, rise) = c.met;
        let pass = fall >= 0.95 && rise >= 0.95 && c.changes_429 == 0 && c.inside == 0;
        format!(
            "{:.0} %, {:.0} % / {} / {} {}",
            fall * 100.0,
            rise * 100.0,
            c.changes_429,
            c.inside,
            mark(pass)
        )
    });
    rows.push((
        format!("5 -> 2 -> 8, {label}"),
        "≥ 95 % of each new limit from 1 s after / 0 429s / 0".into(),
        changes,
    ));
}

/// The latency-only row: the rate against the best fixed rate, and how much it swings.
fn latency_row() -> Row {
    let best = best_fixed_rate();
    let row = cells(|d| {
        let l = latency(d);
        let pass = l.rate >= 0.9 * best && l.swing <= 0.15;
        format!(
            "{:.2}/s ({:.0} %) / {:.0} % / {:.0} ms {}",
            l.rate,
            l.rate / best * 100.0,
            l.swing * 100.0,
            l.latency * 1000.0,
            mark(pass)
        )
    });
    (
        format!("latency only (best fixed rate {best:.2}/s within 500 ms)"),
        "≥ 90 % of the best / swing ≤ 15 %".into(),
        row,
    )
}

/// The rows of a server counting whole-second windows: constant limits (also a loopback away),
/// and its changes shown.
fn whole_second_rows(rows: &mut Vec<Row>, (label, kind): (&str, Kind)) {
    constant_rows(rows, (label, kind), 0.85);
    let row = cells(|d| {
        let server = Server::new(kind, &[(0.0, 5.0)]).on_loopback();
        constant_cell(constant_on(d, server, EIGHT), 0.85)
    });
    let what = format!("constant 5/s, a loopback away (1 ms round trips), {label}");
    rows.push((what, "≥ 85 % / ≤ 1 % / 0".into(), row));
    let changes = cells(|d| {
        let c = changing(d, kind, SEED);
        let (fall, rise) = c.met;
        format!(
            "{:.0} %, {:.0} % / {} / {}",
            fall * 100.0,
            rise * 100.0,
            c.changes_429,
            c.inside
        )
    });
    rows.push((
        format!("5 -> 2 -> 8, {label}"),
        "(shown, not a target)".into(),
        changes,
    ));
}

/// `rows` printed as a Markdown table, a column per driver.
fn print_table(rows: &[Row]) {
    let names: Vec<String> = DRIVERS.iter().map(|d| name(*d)).collect();
    eprintln!("| profile | target | {} |", names.join(" | "));
    eprintln!("|---|---|{}", "---|".repeat(names.len()));
    for (profile, target, cells) in rows {
        eprintln!("| {profile} | {target} | {} |", cells.join(" | "));
    }
}

/// The table of every controller and baseline on every profile, printed in Markdown: the rows
/// of issue 27's table, each against every kind of server.
#[test]
fn every_controller_on_every_profile() {
    let mut rows: Vec<Row> = Vec::new();
    for (label, kind) in LIMITED {
        constant_rows(&mut rows, (label, kind), 0.9);
        fall_and_rise_rows(&mut rows, (label, kind));
    }
    for (label, kind) in ANNOUNCING {
        announced_rows(&mut rows, (label, kind));
    }
    rows.push(latency_row());
    for (label, kind) in WHOLE_SECONDS {
        whole_second_rows(&mut rows, (label, kind));
    }
    print_table(&rows);
    let expected = 4 * LIMITED.len() + 2 * ANNOUNCING.len() + 1 + 4 * WHOLE_SECONDS.len();
    assert_eq!(rows.len(), expected);
}

/// The default and AIMD over more seeds (network times, the order of the clients) and with the
/// rise moved against the probes (0 to 28 s later), the spread of each row printed:
/// `cargo test --lib sim -- --ignored --nocapture`.
#[test]
#[ignore = "a longer sweep, for the spread in benches/ADAPTIVE_RESULTS.md"]
fn over_more_seeds() {
    use super::runner::run;
    use super::servers::Server;
    let seeds = 1..=30u64;
    for driver in [default_driver(), Driver::Courtesy(Controller::Aimd)] {
        for (label, kind) in LIMITED {
            let (mut least, mut most_429) = (f64::INFINITY, 0.0f64);
            let (mut fall, mut fall_429, mut rise) = (f64::INFINITY, 0usize, 0.0f64);
            for seed in seeds.clone() {
                for demand in [EIGHT, BURSTY] {
                    let server = Server::new(kind, &[(0.0, 5.0)]);
                    let r = run(&practice_policy(), driver, server, demand, 300.0, seed);
                    if demand == EIGHT {
                        least = least.min(r.served(60.0, 300.0) / 5.0);
                    }
                    most_429 = most_429.max(r.throttled_share(60.0, 300.0));
                }
                let c = changing(driver, kind, seed);
                fall = fall.min(c.after_fall);
                fall_429 = fall_429.max(c.fall_429);
                rise = rise.max(c.rise.unwrap_or(f64::INFINITY));
            }
            let mut moved = 0.0f64;
            for later in (0..=28).step_by(4) {
                for seed in 1..=4u64 {
                    let at = 120.0 + f64::from(later);
                    let schedule = [(0.0, 5.0), (60.0, 2.0), (at, 8.0)];
                    let server = Server::new(kind, &schedule);
                    let r = run(&practice_policy(), driver, server, EIGHT, 200.0, seed);
                    let t = r
                        .time_to(at, at + 55.0, 8.0, 0.9)
                        .map_or(f64::INFINITY, |t| t + 5.0);
                    moved = moved.max(t);
                }
            }
            eprintln!(
                "{}, {label}, 30 seeds: constant: least served {:.1} %, most 429s {:.2} %; \
                 fall: least {:.0} % from 20 s after, most {fall_429} 429s in those 20 s; \
                 rise: 90 % of 8/s after at most {rise:.0} s ({moved:.0} s with the rise moved \
                 0-28 s later, 4 seeds each)",
                name(driver),
                least * 100.0,
                most_429 * 100.0,
                fall * 100.0,
            );
        }
    }
}
