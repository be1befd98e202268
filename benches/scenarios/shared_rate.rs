//! Scenario 5, the shared budget's aggregate: 4 courtesy instances on one Redis (`[shared]`, one
//! key prefix), 200 hosts at 5/s, burst 1, not adaptive, and 4 kept-alive hammering connections
//! per host, one through each instance, for 25 s. At the origin: the aggregate arrivals per second
//! (the 4 instances together must give the hosts their whole budget, 1000/s, and no more), every
//! host's most arrivals in any 1 s window (never above burst + rate × 1 s, whichever instances
//! sent them), and how the turns were spread over the instances; what Redis executed per request
//! and what it and the instances cost.
//!
//! Run with concurrency 4 (every instance may hold a turn of every host: the rate alone limits),
//! then for 12 s with concurrency 1, the default, where the instances contend for the one slot of
//! each host and every freed slot wakes all of them.

use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use crate::courtesy::Courtesy;
use crate::load::{hammer, join_all, target, tokio_at, Tally};
use crate::measure::clk_tck;
use crate::origin::{host_ip, Origin};
use crate::report::{row, Section};
use crate::stats::{max_in_window, rate_of};
use crate::store::{per_request, Store};

/// The metrics each instance is asked for at the end: store failures, round trips (count, sum).
pub const SHARED_METRICS: [&str; 3] = [
    "courtesy_shared_errors_total",
    "courtesy_shared_round_trip_seconds_count",
    "courtesy_shared_round_trip_seconds_sum",
];

const INSTANCES: usize = 4;
const HOSTS: usize = 200;
const RATE: f64 = 5.0;
const BURST: usize = 1;
const CONNS_PER_HOST: usize = INSTANCES;
const WARMUP: f64 = 1.0;
/// The last seconds of each run log every Redis command, to tell the scripts apart.
const SAMPLE: Duration = Duration::from_secs(3);
/// The runs: (concurrency, length).
const VARIANTS: [(usize, Duration); 2] = [
    (CONNS_PER_HOST, Duration::from_secs(25)),
    (1, Duration::from_secs(12)),
];

/// Runs scenario 5 against the courtesy binary `bin`.
pub async fn run(bin: &Path) -> anyhow::Result<Section> {
    let mut section = Section::new(
        5,
        "Shared budget, aggregate (4 instances on one Redis, 200 hosts at 5/s, burst 1, \
         4 connections per host, one through each instance; concurrency 4 for 25 s, then \
         concurrency 1 for 12 s)",
    );
    let mut store = Store::start().await?;
    let ips: Vec<Ipv4Addr> = (0..HOSTS).map(host_ip).collect();
    let origin = Origin::start(&ips, false).await?;
    for (concurrency, length) in VARIANTS {
        eprintln!(
            "[scenarios]   5: concurrency {concurrency}, {} s …",
            length.as_secs()
        );
        variant(
            bin,
            &mut store,
            &origin,
            &ips,
            concurrency,
            length,
            &mut section,
        )
        .await?;
    }
    store.stop();
    Ok(section)
}

/// One run of 4 fresh instances with `concurrency` for `length`; its rows and notes go to
/// `section`, each saying the concurrency.
async fn variant(
    bin: &Path,
    store: &mut Store,
    origin: &Origin,
    ips: &[Ipv4Addr],
    concurrency: usize,
    length: Duration,
    section: &mut Section,
) -> anyhow::Result<()> {
    let prefix = format!("bench-rate-c{concurrency}");
    let shared = store.shared_section(&prefix, INSTANCES);
    let mut instances = Vec::with_capacity(INSTANCES);
    for i in 0..INSTANCES {
        instances.push(
            Courtesy::start_with(
                bin,
                &format!("shared-c{concurrency}-{i}"),
                &format!(
                    "rate = {RATE:.1}\nburst = {BURST}\nconcurrency = {concurrency}\n\
                     adaptive = false"
                ),
                600,
                &shared,
            )
            .await?,
        );
    }
    let targets: Arc<Vec<(String, String)>> =
        Arc::new(ips.iter().map(|ip| target(*ip, origin.port)).collect());
    let tallies: Vec<Arc<Tally>> = (0..INSTANCES).map(|_| Arc::new(Tally::default())).collect();
    store.reset_stats().await?;
    let cpu = |instances: &[Courtesy]| -> u64 { instances.iter().map(Courtesy::cpu_ticks).sum() };
    let (c0, r0) = (cpu(&instances), store.cpu_ticks());
    let start = Instant::now();
    let deadline = start + length;
    // Connection k: host k mod 200 through instance k div 200, so every host has one connection
    // through every instance.
    let tasks: Vec<JoinHandle<()>> = (0..HOSTS * CONNS_PER_HOST)
        .map(|k| {
            tokio::spawn(hammer(
                instances[k / HOSTS].proxy,
                targets.clone(),
                k % HOSTS,
                0,
                1_000_000,
                deadline,
                tallies[k / HOSTS].clone(),
            ))
        })
        .collect();
    let sample_from = deadline - SAMPLE;
    tokio::time::sleep_until(tokio_at(sample_from)).await;
    let (c1, r1) = (cpu(&instances), store.cpu_ticks());
    let stats = store.command_stats().await?;
    store.start_sample().await?;
    join_all(tasks, deadline + Duration::from_secs(5)).await;
    let sample = store.end_sample(&prefix).await?;
    let mut metrics = [0.0; 3];
    for courtesy in &instances {
        let sums = courtesy.metric_sums(&SHARED_METRICS).await?;
        for (m, s) in metrics.iter_mut().zip(sums) {
            *m += s;
        }
    }
    for courtesy in instances {
        courtesy.stop().await;
    }

    // Steady state: from 1 s after the start (past the first burst token) to the deadline; the
    // densest second over the whole run, the first one included.
    let from = start + Duration::from_secs_f64(WARMUP);
    let window = length.as_secs_f64() - WARMUP;
    let mut rates = Vec::with_capacity(HOSTS);
    let (mut all, mut in_window, mut before_sample, mut in_sample) = (0, 0, 0, 0);
    let mut densest = Vec::with_capacity(HOSTS);
    for idx in 0..HOSTS {
        let whole = origin.times(idx, start, deadline);
        all += whole.len();
        densest.push(max_in_window(&whole, 1.0));
        before_sample += origin.times(idx, start, sample_from).len();
        in_sample += origin.times(idx, sample_from, deadline).len();
        let times = origin.times(idx, from, deadline);
        in_window += times.len();
        rates.push(rate_of(&times));
    }
    let aggregate: f64 = rates.iter().sum();
    let counted = in_window as f64 / window;
    let budget = RATE * HOSTS as f64;
    let ratio = aggregate / budget;
    let limit = BURST + RATE as usize;
    let worst = densest.iter().copied().max().unwrap_or(0);
    let over = densest.iter().filter(|&&d| d > limit).count();
    let (min, max) = rates
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), r| {
            (lo.min(*r), hi.max(*r))
        });
    let c = format!("concurrency {concurrency}:");
    section.rows.push(
        row(
            format!("{c} aggregate origin arrivals/s (steady state, sum of per-host rates)"),
            format!(
                "within 2 % of {budget:.0}/s ({:.0}–{:.0})",
                budget * 0.98,
                budget * 1.02
            ),
            format!("{aggregate:.1}/s ({:.2} % of {budget:.0}/s)", ratio * 100.0),
        )
        .judged((0.98..=1.02).contains(&ratio)),
    );
    section.rows.push(
        row(
            format!("{c} per-host max arrivals in any 1 s window (whole run)"),
            format!("≤ {limit} (burst + R × 1 s) for every host"),
            format!("{worst} (hosts above {limit}: {over} of {HOSTS})"),
        )
        .judged(over == 0),
    );
    section.rows.push(
        row(
            format!("{c} per-host rate min / max"),
            format!("within 2 % of {RATE}/s"),
            format!("{min:.3} / {max:.3}"),
        )
        .judged(min >= RATE * 0.98 && max <= RATE * 1.02),
    );
    let answered: u64 = tallies.iter().map(|t| t.total()).sum();
    let ok: u64 = tallies.iter().map(|t| t.get(200)).sum();
    section.rows.push(
        row(
            format!("{c} client answers that were 200"),
            "all",
            format!("{ok} of {answered}"),
        )
        .judged(ok == answered && answered > 0),
    );
    section.rows.push(
        row(
            format!("{c} store calls that failed or timed out (all instances)"),
            "0 (no instance fell back to its share)",
            format!("{:.0}", metrics[0]),
        )
        .judged(metrics[0] == 0.0),
    );
    let per_instance: Vec<String> = tallies
        .iter()
        .enumerate()
        .map(|(i, t)| format!("#{i}: {}", t.describe()))
        .collect();
    // The reservation script calls ZRANGE only to answer `busy`; PUBLISH runs in release only,
    // for a `free` hint (every slot had been taken).
    let reserves = sample.by_kind.get("reserve").copied().unwrap_or(0) as f64;
    let called =
        |name: &str| stats.get(name).map_or(0, |s| s.calls) as f64 / before_sample.max(1) as f64;
    section.rows.push(row(
        format!("{c} reservations (round trips before a request is sent) per request"),
        "(info; 1 when nothing contends)",
        format!(
            "{:.2} ({:.2} answered `busy`); `free` hints published per request {:.2}, each \
             to all {INSTANCES} instances",
            reserves / in_sample.max(1) as f64,
            called("zrange"),
            called("publish")
        ),
    ));
    section.notes.push(format!(
        "{c} {all} arrivals in {:.0} s ({in_window} in the steady window of {window:.0} s); per-host \
         rate = (n − 1) / (last − first) over that window; arrivals counted in the window / its \
         length: {counted:.1}/s. Hosts by their densest second: {}. Client answers by instance: {}.",
        length.as_secs_f64(),
        histogram(&densest),
        per_instance.join("; ")
    ));
    let ticks = |t: u64| t as f64 / clk_tck();
    let window_s = (sample_from - start).as_secs_f64();
    let requests = before_sample as u64;
    let (commands, by_command) = per_request(
        stats.iter().map(|(name, s)| (name.as_str(), s.calls)),
        requests,
    );
    let failed: u64 = stats.values().map(|s| s.failed).sum();
    let redis_usec: u64 = stats.values().map(|s| s.usec).sum();
    section.notes.push(format!(
        "{c} cost over the first {window_s:.0} s ({requests} requests at the origin): the 4 instances \
         used {:.1} % of a core together ({:.0} µs CPU per request, utime + stime), redis-server \
         {:.1} % of a core ({:.0} µs per request; Redis' own time in commands {:.1} µs per \
         request). Commands Redis executed (`INFO commandstats`, the scripts' own calls included, \
         the bench's left out): {commands:.2} per request: {by_command}; failed {failed} \
         (`NOSCRIPT`: every call of a script an instance sent before its first `SCRIPT LOAD` of it \
         landed, each followed by a load and a retry; many hosts start at once).",
        ticks(c1 - c0) / window_s * 100.0,
        ticks(c1 - c0) * 1e6 / requests.max(1) as f64,
        ticks(r1 - r0) / window_s * 100.0,
        ticks(r1 - r0) * 1e6 / requests.max(1) as f64,
        redis_usec as f64 / requests.max(1) as f64,
    ));
    let (round_trips, by_kind) = per_request(
        sample.by_kind.iter().map(|(k, n)| (k.as_str(), *n)),
        in_sample as u64,
    );
    section.notes.push(format!(
        "{c} round trips (every top-level command logged by `SLOWLOG` over the last {:.0} s, {in_sample} \
         requests at the origin{}): {round_trips:.2} per request: {by_kind}; commands run inside \
         the scripts {:.2} per request. Mean store round trip as the instances time it: {:.0} µs \
         over {:.0} calls.",
        SAMPLE.as_secs_f64(),
        if sample.full { "; the log filled up" } else { "" },
        sample.in_scripts as f64 / in_sample.max(1) as f64,
        metrics[2] / metrics[1].max(1.0) * 1e6,
        metrics[1]
    ));
    Ok(())
}

/// "6: 180 hosts, 5: 20 hosts": how many hosts had each densest-second count, most first.
fn histogram(values: &[usize]) -> String {
    let mut counts = std::collections::BTreeMap::new();
    for v in values {
        *counts.entry(*v).or_insert(0usize) += 1;
    }
    counts
        .iter()
        .rev()
        .map(|(v, n)| format!("{v}: {n} hosts"))
        .collect::<Vec<_>>()
        .join(", ")
}
