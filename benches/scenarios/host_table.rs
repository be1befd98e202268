//! Scenario 2a, the host table in process: `courtesy::Limiter` with N distinct hosts (1k,
//! 10k, 100k, 1M when it fits): RSS per known host, then `sweep` and RSS again, which says what a
//! crawl over many hosts costs in memory and whether forgetting hosts gives it back. Each N runs in
//! a child process of this binary (`--child-limiter N`), so that one N's heap does not blur the
//! next.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context as _};

use crate::measure::rss_kib;
use crate::report::{row, Section};

/// The `[defaults]` of the in-process limiter: a fast refill so swept hosts are fresh at once.
const LIMITER_TOML: &str = "[defaults]\nrate = 1000.0\nburst = 1\nconcurrency = 1\n\
    max_queue = 100000\nmax_wait_seconds = 600\nobey_robots = false\n";

/// Child mode: N hosts into a `Limiter`, RSS before and after, sweep, RSS, N other hosts, RSS.
/// Prints one `LIMITER key=value ...` line.
pub fn child_limiter(n: usize) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let config = courtesy::config::Config::parse(LIMITER_TOML, "scenarios.toml")
            .map_err(|e| anyhow!("{e}"))?;
        let limiter = courtesy::Limiter::new(Arc::new(config));
        let mut key = String::with_capacity(32);
        let fill = |prefix: char, key: &mut String, i: usize| {
            key.clear();
            let _ = write!(key, "{prefix}{i:07}.bench.test");
        };
        // One host in and out first, so that lazily made things are not counted per host.
        fill('w', &mut key, 0);
        let mut p = limiter
            .admit((&key, 80))
            .await
            .map_err(|r| anyhow!("{r:?}"))?;
        p.mark_sent();
        drop(p);
        tokio::time::sleep(Duration::from_millis(5)).await;
        limiter.sweep(Duration::ZERO);
        let key_len = key.len() + ":80".len();
        let rss0 = rss_kib("self").unwrap_or(0);
        let t = Instant::now();
        for i in 0..n {
            fill('h', &mut key, i);
            let mut p = limiter
                .admit((&key, 80))
                .await
                .map_err(|r| anyhow!("{r:?}"))?;
            p.mark_sent();
        }
        let insert = t.elapsed();
        let rss1 = rss_kib("self").unwrap_or(0);
        let count1 = limiter.host_count();
        // At 1000/s a spent token is back after 1 ms.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let t = Instant::now();
        let swept = limiter.sweep(Duration::ZERO);
        let sweep = t.elapsed();
        let rss2 = rss_kib("self").unwrap_or(0);
        let count2 = limiter.host_count();
        for i in 0..n {
            fill('r', &mut key, i);
            let mut p = limiter
                .admit((&key, 80))
                .await
                .map_err(|r| anyhow!("{r:?}"))?;
            p.mark_sent();
        }
        let rss3 = rss_kib("self").unwrap_or(0);
        println!(
            "LIMITER n={n} key_len={key_len} rss0={rss0} rss1={rss1} count1={count1} \
             insert_us={} swept={swept} sweep_us={} rss2={rss2} count2={count2} rss3={rss3} \
             count3={} size_host={} size_pacing={} size_stats={} size_off_peak={}",
            insert.as_micros(),
            sweep.as_micros(),
            limiter.host_count(),
            std::mem::size_of::<courtesy::Host>(),
            std::mem::size_of::<courtesy::Pacing>(),
            std::mem::size_of::<courtesy::HostStats>(),
            std::mem::size_of::<Option<courtesy::config::OffPeak>>(),
        );
        Ok(())
    })
}

/// Runs scenario 2a, one child process per N, and adds its rows and notes to `section`.
pub async fn run(section: &mut Section) -> anyhow::Result<()> {
    let exe = std::env::current_exe()?;
    let mut per_100k: Option<Duration> = None;
    let mut swept_all = true;
    let mut worst_left = 0.0f64;
    let mut sweep_summary = Vec::new();
    let mut sizes = String::new();
    for n in [1_000usize, 10_000, 100_000, 1_000_000] {
        if n == 1_000_000 {
            // Run 1M only if 100k (insert, sweep, insert again, in its own process) projects to
            // well under 5 minutes.
            match per_100k {
                Some(t) if t * 10 < Duration::from_secs(200) => {}
                other => {
                    section.notes.push(format!(
                        "2a: N = 1M not run: 100k took {other:?}, which projects past ~5 minutes."
                    ));
                    continue;
                }
            }
        }
        let t = Instant::now();
        let child = tokio::process::Command::new(&exe)
            .arg("--child-limiter")
            .arg(n.to_string())
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(Duration::from_secs(330), child)
            .await
            .with_context(|| format!("2a child with N = {n} timed out"))??;
        let took = t.elapsed();
        if n == 100_000 {
            per_100k = Some(took);
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text
            .lines()
            .find(|l| l.starts_with("LIMITER "))
            .with_context(|| format!("2a child with N = {n} printed no result: {text}"))?;
        let f: BTreeMap<&str, f64> = line
            .split_whitespace()
            .skip(1)
            .filter_map(|kv| kv.split_once('='))
            .filter_map(|(k, v)| Some((k, v.parse::<f64>().ok()?)))
            .collect();
        let get = |k: &str| f.get(k).copied().unwrap_or(f64::NAN);
        let nf = n as f64;
        let per_host = (get("rss1") - get("rss0")) * 1024.0 / nf;
        let left = (get("rss2") - get("rss0")) * 1024.0 / nf;
        let again = (get("rss3") - get("rss2")) * 1024.0 / nf;
        let label = match n {
            1_000 => "1k",
            10_000 => "10k",
            100_000 => "100k",
            _ => "1M",
        };
        // 1k hosts move RSS by a few hundred KiB: page and arena noise dominate.
        let r = row(
            format!("2a limiter, N = {label}: RSS per known host"),
            "≤ 500 B",
            format!("{per_host:.0} B"),
        );
        section.rows.push(if n >= 10_000 {
            r.judged(per_host <= 500.0)
        } else {
            r
        });
        swept_all &= get("count2") == 0.0 && get("swept") == nf;
        sweep_summary.push(format!(
            "{label}: {:.0} % left, next N hosts +{again:.0} B/host",
            left / per_host * 100.0
        ));
        if n >= 10_000 {
            worst_left = worst_left.max(left / per_host);
        }
        section.notes.push(format!(
            "2a N = {label}: key \"hNNNNNNN.bench.test:80\" ({:.0} bytes); RSS {:.0} → {:.0} KiB \
             after insert ({:.0} hosts, {:.2} µs per admit), → {:.0} KiB after sweep ({:.0} swept in \
             {:.1} ms, host_count {:.0}), → {:.0} KiB after inserting N other hosts ({again:.0} \
             B/host); child process ran {:.2} s.",
            get("key_len"),
            get("rss0"),
            get("rss1"),
            get("count1"),
            get("insert_us") / nf,
            get("rss2"),
            get("swept"),
            get("sweep_us") / 1000.0,
            get("count2"),
            get("rss3"),
            took.as_secs_f64()
        ));
        sizes = format!(
            "size_of: Host {:.0} B (inside an Arc, +16), Pacing {:.0} B, HostStats {:.0} B, \
             Option<OffPeak> {:.0} B.",
            get("size_host"),
            get("size_pacing"),
            get("size_stats"),
            get("size_off_peak")
        );
    }
    section.rows.push(
        row(
            "2a limiter: host_count after `sweep(0)` (every N)",
            "0",
            if swept_all { "0" } else { "not 0" },
        )
        .judged(swept_all),
    );
    section.rows.push(
        row(
            "2a limiter: RSS after sweep (share of the growth left)",
            "close to the start (≤ 25 % left)",
            sweep_summary.join("; "),
        )
        .judged(worst_left <= 0.25),
    );
    section.notes.push(sizes);
    Ok(())
}
