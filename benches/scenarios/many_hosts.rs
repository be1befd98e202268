//! Scenario 2b, many hosts end to end through the proxy: one request to each of N distinct loopback
//! addresses `127.0.x.y` (one origin listener per address, all on one port): courtesy's RSS growth
//! per host, and after `idle_host_seconds` plus a sweep period plus the upstream pool's idle
//! timeout (when courtesy hands the closed connections' memory back), its RSS and `GET /hosts`
//! again; then the same hosts once more, and what one `GET /metrics` and one `GET /hosts` listing
//! them all add to RSS. Run once with kept-alive upstream connections (what a crawl looks like)
//! and once with `Connection: close` answers (no pooled connections: the host table and per-host
//! state).

use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use tokio::task::JoinHandle;

use crate::common::client::Client;
use crate::courtesy::{admin_get, Courtesy};
use crate::load::{hammer, join_all, target, Tally};
use crate::measure::open_files_limit;
use crate::origin::{host_ip, Origin};
use crate::report::{row, Section};

/// Runs scenario 2b with `n` hosts, upstream connections kept alive or (`close`) not, and adds
/// its rows and notes to `section`.
pub async fn run(bin: &Path, section: &mut Section, n: usize, close: bool) -> anyhow::Result<()> {
    const CLIENTS: usize = 64;
    const IDLE_HOST_SECONDS: u64 = 5;
    let variant = if close {
        "Connection: close upstream"
    } else {
        "kept-alive upstream"
    };
    // Here: a listener per host and, kept alive, the connection courtesy pooled to it.
    let limit = open_files_limit().unwrap_or(1024) as usize;
    if 2 * n + 1_000 > limit {
        bail!("2b with {n} hosts needs about {} open files, the limit is {limit}: use --e2e-hosts or ulimit -n", 2 * n + 1_000);
    }
    let ips: Vec<Ipv4Addr> = (0..=n).map(host_ip).collect();
    let origin = Origin::start(&ips, close).await?;
    let courtesy = Courtesy::start(
        bin,
        if close { "e2e-close" } else { "e2e-keep" },
        "rate = 10.0\nburst = 1\nconcurrency = 1",
        IDLE_HOST_SECONDS,
    )
    .await?;
    // Warm-up through host 0 (lazily made things, first connection), then the baseline.
    let (url, host) = target(ips[0], origin.port);
    let mut warm = Client::connect(courtesy.proxy).await?;
    let (status, _) = warm.get(&url, &host).await?;
    drop(warm);
    if status != 200 {
        bail!("2b warm-up answered {status}");
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss0 = courtesy.rss_kib();
    let targets: Arc<Vec<(String, String)>> =
        Arc::new(ips[1..].iter().map(|ip| target(*ip, origin.port)).collect());

    // One request to each host, CLIENTS kept-alive connections sharing the hosts.
    let wave = |tally: Arc<Tally>| {
        let deadline = Instant::now() + Duration::from_secs(120);
        let tasks: Vec<JoinHandle<()>> = (0..CLIENTS)
            .map(|k| {
                // Client k sends to hosts k, k + 64, k + 128, ...
                let count = n.saturating_sub(k).div_ceil(CLIENTS);
                tokio::spawn(hammer(
                    courtesy.proxy,
                    targets.clone(),
                    k,
                    CLIENTS,
                    count,
                    deadline,
                    tally.clone(),
                ))
            })
            .collect();
        join_all(tasks, deadline + Duration::from_secs(5))
    };
    let tally = Arc::new(Tally::default());
    let t = Instant::now();
    wave(tally.clone()).await;
    let took = t.elapsed();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss1 = courtesy.rss_kib();
    // Idle for idle_host_seconds, then at least one sweep (period idle / 4, at least 1 s), then
    // the upstream pool's idle timeout (min(90 s, idle_host_seconds)) and one more sweep period,
    // after which courtesy hands the closed connections' memory back too. No admin call before
    // this point: `/hosts` itself allocates per host (measured below).
    tokio::time::sleep(Duration::from_secs(2 * IDLE_HOST_SECONDS + 5)).await;
    let rss2 = courtesy.rss_kib();
    let hosts2 = courtesy.hosts().await?.len();
    // The same hosts again (new entries in the table), then one `GET /hosts` listing them all.
    let tally2 = Arc::new(Tally::default());
    wave(tally2.clone()).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss3 = courtesy.rss_kib();
    let t = Instant::now();
    let (status, metrics) = tokio::time::timeout(
        Duration::from_secs(60),
        admin_get(courtesy.admin, "/metrics"),
    )
    .await
    .context("GET /metrics timed out")??;
    let metrics_took = t.elapsed();
    if status != 200 {
        bail!("GET /metrics answered {status}");
    }
    let rss_metrics = courtesy.rss_kib();
    // What the dashboard polls once a second: the 500 hosts most in need of attention.
    let t = Instant::now();
    let (status, limited) = tokio::time::timeout(
        Duration::from_secs(60),
        admin_get(courtesy.admin, "/hosts?limit=500"),
    )
    .await
    .context("GET /hosts?limit=500 timed out")??;
    let limited_took = t.elapsed();
    if status != 200 {
        bail!("GET /hosts?limit=500 answered {status}");
    }
    let rss_limited = courtesy.rss_kib();
    let t = Instant::now();
    let (status, body) =
        tokio::time::timeout(Duration::from_secs(60), admin_get(courtesy.admin, "/hosts"))
            .await
            .context("GET /hosts timed out")??;
    let list_took = t.elapsed();
    if status != 200 {
        bail!("GET /hosts answered {status}");
    }
    let listed = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v["hosts"].as_array().map(Vec::len))
        .unwrap_or(0);
    let rss4 = courtesy.rss_kib();
    let reached = origin.total();
    courtesy.stop().await;
    drop(origin);

    let nf = n as f64;
    let per_host = (rss1 as f64 - rss0 as f64) * 1024.0 / nf;
    let left = (rss2 as f64 - rss0 as f64) * 1024.0 / nf;
    let again = (rss3 as f64 - rss2 as f64) * 1024.0 / nf;
    let listing = (rss4 as f64 - rss_limited as f64) * 1024.0 / nf;
    let scraping = (rss_metrics as f64 - rss3 as f64) * 1024.0 / nf;
    let ok = tally.get(200);
    section.rows.push(
        row(
            format!("2b e2e, {n} hosts, {variant}: courtesy RSS growth per host"),
            "≤ 500 B (host-table target)",
            format!("{per_host:.0} B"),
        )
        .judged(per_host <= 500.0),
    );
    section.rows.push(
        row(
            format!(
                "2b e2e, {n} hosts, {variant}: `/hosts` after idle {IDLE_HOST_SECONDS} s + sweep"
            ),
            "0 hosts",
            format!("{hosts2} hosts"),
        )
        .judged(hosts2 == 0),
    );
    section.rows.push(
        row(
            format!("2b e2e, {n} hosts, {variant}: RSS after the sweep"),
            "close to the start (≤ 25 % of growth left)",
            format!(
                "{:.0} % of growth left; the same {n} hosts again: +{again:.0} B/host",
                left / per_host * 100.0
            ),
        )
        .judged(left <= 0.25 * per_host),
    );
    section.notes.push(format!(
        "2b {variant}: {n} requests (+1 warm-up) to {n} addresses in {:.2} s ({:.0}/s, {CLIENTS} \
         kept-alive client connections); answers {} (second wave: {}); origin saw {reached}. \
         courtesy RSS {rss0} → {rss1} → {rss2} → {rss3} → {rss_metrics} → {rss4} KiB (start, after, \
         after idle + sweep, after the second wave, after one `GET /metrics`: {} KiB in {:.0} ms, \
         RSS +{scraping:.0} B/host; one `GET /hosts?limit=500`, what the dashboard polls: {} KiB \
         in {:.0} ms; then after one `GET /hosts` listing {listed} hosts: {} KiB of JSON in {:.0} \
         ms, RSS +{listing:.0} B/host).",
        took.as_secs_f64(),
        nf / took.as_secs_f64(),
        tally.describe(),
        tally2.describe(),
        metrics.len() / 1024,
        metrics_took.as_secs_f64() * 1000.0,
        limited.len() / 1024,
        limited_took.as_secs_f64() * 1000.0,
        body.len() / 1024,
        list_took.as_secs_f64() * 1000.0,
    ));
    if ok != n as u64 {
        section
            .notes
            .push(format!("2b {variant}: only {ok} of {n} requests got 200."));
    }
    Ok(())
}
