//! Scenario 3, parked requests: 1,000 hosts at 0.2/s, burst 1, concurrency 1. 10,000 client
//! connections are opened first (10 per host), then each host is primed with one request (its
//! token spent), then the 10,000 requests are sent at once, so that all of them park. Once all are
//! in courtesy (`GET /hosts`), its CPU time is read over 10 s in 1 s slices, which says whether
//! waiting requests cost anything; then every request must get its answer (the last about 50 s
//! after priming).

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::bail;
use hyper::body::Incoming;
use hyper::Request;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinHandle;

use crate::common::client::Client;
use crate::common::percentile::percentile_at_fraction;
use crate::courtesy::Courtesy;
use crate::load::{hammer, join_all, target, tokio_at, Tally};
use crate::measure::{clk_tck, open_files_limit};
use crate::origin::{host_ip, Origin};
use crate::report::{row, Section};

/// The size of the future a closure returns, without calling it.
fn future_size<F, Fut>(_f: F) -> usize
where
    F: FnOnce(Arc<courtesy::Proxy>, Request<Incoming>, SocketAddr) -> Fut,
{
    std::mem::size_of::<Fut>()
}

/// The size of the future a closure over a `Limiter` returns, without calling it.
fn admit_size<F, Fut>(_f: F) -> usize
where
    F: FnOnce(Arc<courtesy::Limiter>) -> Fut,
{
    std::mem::size_of::<Fut>()
}

/// Runs scenario 3 against the courtesy binary `bin`.
pub async fn run(bin: &Path) -> anyhow::Result<Section> {
    const HOSTS: usize = 1_000;
    const RATE: f64 = 0.2;
    const WINDOW_SLICES: usize = 10;
    let mut section = Section::new(
        3,
        "Parked requests (1,000 hosts at 0.2/s, burst 1, concurrency 1, 10 per host)",
    );
    // Each parked request holds a client socket here and one in courtesy (same limit, inherited).
    let limit = open_files_limit().unwrap_or(1024);
    let per_host = (((limit as usize).saturating_sub(2 * HOSTS + 500)) / HOSTS).min(10);
    if per_host < 10 {
        section.notes.push(format!(
            "open-file limit {limit} allows only {per_host} parked requests per host; run \
             benches/scenarios.sh (it raises `ulimit -n`)."
        ));
    }
    if per_host == 0 {
        bail!("open-file limit {limit} too low for scenario 3");
    }
    let total = HOSTS * per_host;
    let ips: Vec<Ipv4Addr> = (0..HOSTS).map(host_ip).collect();
    let origin = Origin::start(&ips, false).await?;
    let courtesy = Courtesy::start(
        bin,
        "parked",
        &format!("rate = {RATE}\nburst = 1\nconcurrency = 1"),
        600,
    )
    .await?;
    let targets: Arc<Vec<(String, String)>> =
        Arc::new(ips.iter().map(|ip| target(*ip, origin.port)).collect());

    // Idle baseline: courtesy with nothing to do.
    let (t0, n0) = (courtesy.cpu_ticks(), courtesy.cpu_ns());
    tokio::time::sleep(Duration::from_secs(3)).await;
    let idle_pct = (courtesy.cpu_ns().saturating_sub(n0)) as f64 / 3e9 * 100.0;
    let idle_ticks = courtesy.cpu_ticks() - t0;

    // Open: per_host connections per host, each its own client, all opened before anything is
    // sent (connects paced by a semaphore so that the listen backlog never overflows). Opening
    // 10,000 takes seconds, longer than one token period: sending must not wait for it.
    let tally = Arc::new(Tally::default());
    let connecting = Arc::new(Semaphore::new(256));
    let opened = Arc::new(AtomicU64::new(0));
    let (go, ready) = watch::channel(false);
    let answer_deadline = Instant::now() + Duration::from_secs(240);
    let last_answer = Arc::new(Mutex::new(Instant::now()));
    let rss_before = courtesy.rss_kib();
    let mut tasks = Vec::with_capacity(total);
    for _round in 0..per_host {
        for (url, host) in targets.iter() {
            let (url, host) = (url.clone(), host.clone());
            let (tally, connecting, last_answer, opened, mut ready) = (
                tally.clone(),
                connecting.clone(),
                last_answer.clone(),
                opened.clone(),
                ready.clone(),
            );
            let proxy = courtesy.proxy;
            tasks.push(tokio::spawn(async move {
                let mut client = None;
                for _attempt in 0..3 {
                    let permit = connecting.acquire().await;
                    match tokio::time::timeout(Duration::from_secs(10), Client::connect(proxy))
                        .await
                    {
                        Ok(Ok(c)) => {
                            client = Some(c);
                            break;
                        }
                        _ => {
                            drop(permit);
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    }
                }
                opened.fetch_add(1, Ordering::Relaxed);
                let Some(mut client) = client else {
                    tally.add(0);
                    return;
                };
                if ready.wait_for(|go| *go).await.is_err() {
                    return;
                }
                match tokio::time::timeout_at(tokio_at(answer_deadline), client.get(&url, &host))
                    .await
                {
                    Ok(Ok((status, _))) => {
                        tally.add(status);
                        let mut last = last_answer.lock().unwrap_or_else(|p| p.into_inner());
                        *last = (*last).max(Instant::now());
                    }
                    _ => tally.add(0),
                }
            }));
        }
    }
    let open_start = Instant::now();
    let open_deadline = open_start + Duration::from_secs(60);
    while opened.load(Ordering::Relaxed) < total as u64 && Instant::now() < open_deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let open_took = open_start.elapsed();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let rss_open = courtesy.rss_kib();

    // Prime: one request per host spends its token.
    let prime_tally = Arc::new(Tally::default());
    let prime_deadline = Instant::now() + Duration::from_secs(60);
    let primers: Vec<JoinHandle<()>> = (0..64)
        .map(|k| {
            tokio::spawn(hammer(
                courtesy.proxy,
                targets.clone(),
                k,
                64,
                (HOSTS - k).div_ceil(64),
                prime_deadline,
                prime_tally.clone(),
            ))
        })
        .collect();
    join_all(primers, prime_deadline).await;
    let primed = origin.total();
    let primed_at = Instant::now();
    // Park: every request at once.
    let _ = go.send(true);

    // Wait until every request is inside courtesy: queued, in flight or already answered.
    let park_deadline = Instant::now() + Duration::from_secs(60);
    let mut inside = 0;
    let mut queued = 0;
    while Instant::now() < park_deadline {
        let counts = courtesy.totals().await?;
        queued = counts["queued"].as_u64().unwrap_or(0);
        let in_flight = counts["in_flight"].as_u64().unwrap_or(0);
        inside = queued + in_flight + (origin.total() - primed);
        if inside >= total as u64 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let parked_after = primed_at.elapsed();
    if inside < total as u64 {
        section.notes.push(format!(
            "only {inside} of {total} requests were inside courtesy after {:.0} s",
            parked_after.as_secs_f64()
        ));
    }
    let rss_parked = courtesy.rss_kib();

    // The window: 10 slices of 1 s; no admin calls inside it.
    let window_start = Instant::now();
    let (wt0, wn0, wo0) = (courtesy.cpu_ticks(), courtesy.cpu_ns(), origin.total());
    let mut slices = Vec::with_capacity(WINDOW_SLICES);
    let (mut ns, mut sent) = (wn0, wo0);
    for k in 1..=WINDOW_SLICES {
        tokio::time::sleep_until(tokio_at(window_start + Duration::from_secs(k as u64))).await;
        let (ns1, sent1) = (courtesy.cpu_ns(), origin.total());
        slices.push((ns1.saturating_sub(ns), sent1 - sent));
        (ns, sent) = (ns1, sent1);
    }
    let window = window_start.elapsed().as_secs_f64();
    let (wt1, wn1, wo1) = (courtesy.cpu_ticks(), courtesy.cpu_ns(), origin.total());
    let pct_ticks = (wt1 - wt0) as f64 / clk_tck() / window * 100.0;
    let pct_ns = (wn1.saturating_sub(wn0)) as f64 / 1e9 / window * 100.0;
    let forwarded = wo1 - wo0;
    let quiet: Vec<f64> = slices
        .iter()
        .filter(|(_, s)| *s == 0)
        .map(|(ns, _)| *ns as f64 / 1e9 * 100.0)
        .collect();
    let busy_ns: u64 = slices
        .iter()
        .filter(|(_, s)| *s > 0)
        .map(|(ns, _)| *ns)
        .sum();
    let mut quiet_sorted = quiet.clone();
    quiet_sorted.sort_by(f64::total_cmp);
    let queued_end = courtesy.totals().await?["queued"].as_u64().unwrap_or(0);

    // Let them finish.
    join_all(tasks, answer_deadline + Duration::from_secs(5)).await;
    let finished_after = last_answer
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .saturating_duration_since(primed_at);
    let ok = tally.get(200);
    let rss_end = courtesy.rss_kib();
    courtesy.stop().await;

    section.rows.push(
        row(
            "requests inside courtesy before the window (queued at start)",
            format!("{total}"),
            format!("{inside} ({queued} queued)"),
        )
        .judged(inside >= total as u64),
    );
    section.rows.push(
        row(
            "courtesy CPU over 10 s while parked",
            "< 1 % of a core",
            format!(
                "{pct_ticks:.2} % (ticks), {pct_ns:.2} % (schedstat); {forwarded} requests forwarded \
                 in the window"
            ),
        )
        .judged(pct_ticks < 1.0),
    );
    section.rows.push(row(
        "… in the 1 s slices in which nothing left (pure parking)",
        "(info)",
        format!(
            "{} slices: median {:.3} %, max {:.3} %",
            quiet.len(),
            percentile_at_fraction(&quiet_sorted, 0.5).unwrap_or(f64::NAN),
            quiet_sorted.last().copied().unwrap_or(f64::NAN)
        ),
    ));
    section.rows.push(
        row(
            "answers 200 after the wait",
            format!("{total} of {total}"),
            format!("{ok} ({})", tally.describe()),
        )
        .judged(ok == total as u64),
    );
    section.notes.push(format!(
        "{total} client connections opened in {:.1} s (courtesy RSS {rss_before} → {rss_open} KiB: \
         {:.1} KiB per idle client connection); {HOSTS} hosts primed with one request each \
         ({primed} arrivals, answers {}); then the {total} requests sent at once, all inside \
         courtesy {:.1} s after priming. CPU slices \
         (ms CPU / requests forwarded) per 1 s: {}. The busy slices cost {:.1} ms CPU for \
         {forwarded} forwards ({:.0} µs each). Idle baseline before any load: {idle_pct:.3} % \
         ({idle_ticks} ticks in 3 s). Queued after the window: {queued_end}. Last answer {:.1} s \
         after priming (ideal: {:.0} s). courtesy RSS with {total} parked: {rss_parked} KiB \
         ({:.1} KiB per parked request over the open connections); at the end {rss_end} KiB.",
        open_took.as_secs_f64(),
        (rss_open as f64 - rss_before as f64) / total as f64,
        prime_tally.describe(),
        parked_after.as_secs_f64(),
        slices
            .iter()
            .map(|(ns, s)| format!("{:.1}/{s}", *ns as f64 / 1e6))
            .collect::<Vec<_>>()
            .join(", "),
        busy_ns as f64 / 1e6,
        busy_ns as f64 / 1e3 / forwarded.max(1) as f64,
        finished_after.as_secs_f64(),
        per_host as f64 / RATE,
        (rss_parked as f64 - rss_open as f64) / total as f64,
    ));
    section.notes.push(format!(
        "Each parked request is a `Proxy::serve` future held by its client connection's task: \
         size_of that future = {} B; of a `Limiter::admit` call's future = {} B.",
        future_size(|proxy, req, client| proxy.serve(req, client)),
        admit_size(|limiter| async move { limiter.admit(("x", 80)).await.is_ok() }),
    ));
    Ok(section)
}
