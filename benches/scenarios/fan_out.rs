//! Scenario 4, fan-out fairness: 200 hosts at 5/s each, 3 kept-alive hammering connections per
//! host for 20 s: aggregate origin arrivals per second and per-host rates, which say whether every
//! host gets its whole budget when many compete for courtesy at once.

use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use crate::courtesy::Courtesy;
use crate::load::{hammer, join_all, target, Tally};
use crate::measure::clk_tck;
use crate::origin::{host_ip, Origin};
use crate::report::{row, Section};
use crate::stats::{max_in_window, rate_of};

/// Runs scenario 4 against the courtesy binary `bin`.
pub async fn run(bin: &Path) -> anyhow::Result<Section> {
    const HOSTS: usize = 200;
    const RATE: f64 = 5.0;
    const CONNS_PER_HOST: usize = 3;
    const RUN: Duration = Duration::from_secs(20);
    const WARMUP: f64 = 1.0;
    let mut section = Section::new(
        4,
        "Fan-out fairness (200 hosts at 5/s, burst 1, 3 connections per host, 20 s)",
    );
    let ips: Vec<Ipv4Addr> = (0..HOSTS).map(host_ip).collect();
    let origin = Origin::start(&ips, false).await?;
    let courtesy = Courtesy::start(
        bin,
        "fanout",
        &format!("rate = {RATE:.1}\nburst = 1\nconcurrency = {CONNS_PER_HOST}"),
        600,
    )
    .await?;
    let targets: Arc<Vec<(String, String)>> =
        Arc::new(ips.iter().map(|ip| target(*ip, origin.port)).collect());
    let tally = Arc::new(Tally::default());
    let (t0, n0) = (courtesy.cpu_ticks(), courtesy.cpu_ns());
    let start = Instant::now();
    let deadline = start + RUN;
    let tasks: Vec<JoinHandle<()>> = (0..HOSTS * CONNS_PER_HOST)
        .map(|k| {
            tokio::spawn(hammer(
                courtesy.proxy,
                targets.clone(),
                k % HOSTS,
                0,
                1_000_000,
                deadline,
                tally.clone(),
            ))
        })
        .collect();
    join_all(tasks, deadline + Duration::from_secs(5)).await;
    let (t1, n1) = (courtesy.cpu_ticks(), courtesy.cpu_ns());
    courtesy.stop().await;

    // Steady state: from 1 s after the start (past the first burst token) to the deadline.
    let from = start + Duration::from_secs_f64(WARMUP);
    let window = RUN.as_secs_f64() - WARMUP;
    let mut rates = Vec::with_capacity(HOSTS);
    let mut in_window = 0usize;
    let mut worst_second = 0usize;
    let mut all = 0usize;
    for idx in 0..HOSTS {
        all += origin.times(idx, start, deadline).len();
        let times = origin.times(idx, from, deadline);
        in_window += times.len();
        worst_second = worst_second.max(max_in_window(&times, 1.0));
        rates.push(rate_of(&times));
    }
    // The sum of the per-host rates: not quantised by where the window's edges fall between
    // one host's arrivals (a count over the window is, by up to one arrival per host).
    let aggregate: f64 = rates.iter().sum();
    let counted = in_window as f64 / window;
    let (min, max) = rates
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), r| {
            (lo.min(*r), hi.max(*r))
        });
    let target_agg = 0.98 * RATE * HOSTS as f64;
    section.rows.push(
        row(
            "aggregate origin arrivals/s (steady state, sum of per-host rates)",
            format!("≥ {target_agg:.0}/s"),
            format!("{aggregate:.1}/s"),
        )
        .judged(aggregate >= target_agg),
    );
    section.rows.push(
        row(
            "per-host rate min / max",
            format!(
                "within 2 % of {RATE}/s ({:.2}–{:.2})",
                RATE * 0.98,
                RATE * 1.02
            ),
            format!("{min:.3} / {max:.3}"),
        )
        .judged(min >= RATE * 0.98 && max <= RATE * 1.02),
    );
    section.rows.push(
        row(
            "per-host max arrivals in any 1 s window",
            format!("≤ {} (R + burst)", RATE as usize + 1),
            worst_second.to_string(),
        )
        .judged(worst_second <= RATE as usize + 1),
    );
    let cpu_ns = n1.saturating_sub(n0) as f64;
    section.notes.push(format!(
        "{all} arrivals in {:.0} s ({in_window} in the steady window of {window:.0} s); per-host \
         rate = (n − 1) / (last − first) over that window; arrivals counted in the window / its length: \
         {counted:.1}/s. Mean interval per host {:.3} ms (ideal {:.3} ms). Client answers: {}. \
         courtesy CPU: {:.1} % of a core by ticks, {:.0} µs per forwarded request (schedstat).",
        RUN.as_secs_f64(),
        1000.0 * HOSTS as f64 / aggregate,
        1000.0 / RATE,
        tally.describe(),
        (t1 - t0) as f64 / clk_tck() / RUN.as_secs_f64() * 100.0,
        cpu_ns / 1e3 / all.max(1) as f64
    ));
    Ok(section)
}
