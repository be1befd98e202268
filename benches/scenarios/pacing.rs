//! Scenario 1, pacing precision: one host at 20/s, burst 1; 64 kept-alive clients hammer it for
//! 30 s. The origin records arrival instants: the most arrivals in any closed 1 s window, the
//! achieved rate, and |gap − 1/R| percentiles, which say whether courtesy keeps a host's budget to
//! the request under heavy pressure.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use crate::common::percentile::percentile_at_fraction;
use crate::courtesy::Courtesy;
use crate::load::{hammer, join_all, target, Tally};
use crate::measure::clk_tck;
use crate::origin::{host_ip, Origin};
use crate::report::{row, Section};
use crate::stats::{max_in_window, rate_of};

/// Runs scenario 1 against the courtesy binary `bin`.
pub async fn run(bin: &Path) -> anyhow::Result<Section> {
    const RATE: f64 = 20.0;
    const BURST: usize = 1;
    const CLIENTS: usize = 64;
    const RUN: Duration = Duration::from_secs(30);
    let mut section = Section::new(
        1,
        "Pacing precision (1 host, 20/s, burst 1, 64 clients, 30 s)",
    );
    // How late tokio's timer wakes a task (same tokio as courtesy's): 100 sleeps of 20 ms.
    let mut late_ms = Vec::with_capacity(100);
    for _ in 0..100 {
        let at = tokio::time::Instant::now() + Duration::from_millis(20);
        tokio::time::sleep_until(at).await;
        late_ms.push(tokio::time::Instant::now().duration_since(at).as_secs_f64() * 1000.0);
    }
    let mean_late = late_ms.iter().sum::<f64>() / late_ms.len() as f64;
    late_ms.sort_by(f64::total_cmp);
    let ip = host_ip(0);
    let origin = Origin::start(&[ip], false).await?;
    let courtesy = Courtesy::start(
        bin,
        "pacing",
        &format!("rate = {RATE:.1}\nburst = {BURST}\nconcurrency = 1000"),
        600,
    )
    .await?;
    let targets = Arc::new(vec![target(ip, origin.port)]);
    let tally = Arc::new(Tally::default());
    let (ticks0, ns0) = (courtesy.cpu_ticks(), courtesy.cpu_ns());
    let start = Instant::now();
    let deadline = start + RUN;
    let tasks: Vec<JoinHandle<()>> = (0..CLIENTS)
        .map(|_| {
            tokio::spawn(hammer(
                courtesy.proxy,
                targets.clone(),
                0,
                1,
                1_000_000,
                deadline,
                tally.clone(),
            ))
        })
        .collect();
    join_all(tasks, deadline + Duration::from_secs(5)).await;
    let (ticks1, ns1) = (courtesy.cpu_ticks(), courtesy.cpu_ns());
    let rss = courtesy.rss_kib();
    courtesy.stop().await;

    let times = origin.times(0, start, deadline);
    let n = times.len();
    let achieved = rate_of(&times);
    let window = max_in_window(&times, 1.0);
    let ideal = 1.0 / RATE;
    let gaps: Vec<f64> = times.windows(2).map(|w| w[1] - w[0]).collect();
    let mut dev_ms: Vec<f64> = gaps.iter().map(|g| (g - ideal).abs() * 1000.0).collect();
    dev_ms.sort_by(f64::total_cmp);
    let mut sorted_gaps = gaps.clone();
    sorted_gaps.sort_by(f64::total_cmp);
    let mean_gap_ms = gaps.iter().sum::<f64>() / gaps.len().max(1) as f64 * 1000.0;
    let short = gaps.iter().filter(|&&g| g < ideal - 0.0005).count();
    let (p50, p99, max) = (
        percentile_at_fraction(&dev_ms, 0.50).unwrap_or(f64::NAN),
        percentile_at_fraction(&dev_ms, 0.99).unwrap_or(f64::NAN),
        dev_ms.last().copied().unwrap_or(f64::NAN),
    );
    let limit = (RATE + BURST as f64) as usize;
    section.rows.push(
        row(
            "max arrivals in any 1 s window",
            format!("≤ {limit} (R + burst)"),
            window.to_string(),
        )
        .judged(window <= limit),
    );
    section.rows.push(
        row(
            "achieved rate",
            format!("≥ {:.1}/s (0.98 R)", 0.98 * RATE),
            format!("{achieved:.3}/s ({:.2} % of R)", achieved / RATE * 100.0),
        )
        .judged(achieved >= 0.98 * RATE),
    );
    section.rows.push(
        row(
            "\\|gap − 1/R\\| p50 / p99",
            "p99 ≤ 2 ms",
            format!("{p50:.3} ms / {p99:.3} ms (max {max:.3} ms)"),
        )
        .judged(p99 <= 2.0),
    );
    section.notes.push(format!(
        "tokio `sleep_until` lateness in this process (100 sleeps of 20 ms, before the run): mean \
         {mean_late:.3} ms, p50 {:.3} ms, p99 {:.3} ms. With burst 1 a late wake-up cannot be made up \
         (the bucket is capped at one token), so each gap is 1/R plus the lateness: 1/(1/R + {:.3} ms) \
         = {:.3}/s.",
        percentile_at_fraction(&late_ms, 0.5).unwrap_or(f64::NAN),
        percentile_at_fraction(&late_ms, 0.99).unwrap_or(f64::NAN),
        mean_gap_ms - ideal * 1000.0,
        1000.0 / mean_gap_ms
    ));
    let cpu_s = (ticks1 - ticks0) as f64 / clk_tck();
    section.notes.push(format!(
        "{n} arrivals in {:.1} s; mean gap {mean_gap_ms:.3} ms (ideal {:.3} ms); gap p50 {:.3} ms, \
         p99 {:.3} ms, min {:.3} ms; gaps shorter than 1/R − 0.5 ms: {short}. Client answers: {}.",
        RUN.as_secs_f64(),
        ideal * 1000.0,
        percentile_at_fraction(&sorted_gaps, 0.5).unwrap_or(f64::NAN) * 1000.0,
        percentile_at_fraction(&sorted_gaps, 0.99).unwrap_or(f64::NAN) * 1000.0,
        sorted_gaps.first().copied().unwrap_or(f64::NAN) * 1000.0,
        tally.describe()
    ));
    section.notes.push(format!(
        "courtesy CPU over the run: {cpu_s:.2} s by ticks ({:.2} % of a core), {:.2} s by schedstat; \
         {:.0} µs per forwarded request; RSS at the end {rss} KiB.",
        cpu_s / RUN.as_secs_f64() * 100.0,
        (ns1.saturating_sub(ns0)) as f64 / 1e9,
        (ns1.saturating_sub(ns0)) as f64 / 1e3 / n.max(1) as f64
    ));
    Ok(section)
}
