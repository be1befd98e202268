//! Scenario 6, the shared budget's cost per request: one courtesy with pacing effectively off
//! (rate 100000/s, burst 1000, concurrency 1000, not adaptive), kept-alive clients sending small
//! GETs back to back for 5 s, with the budget kept locally and then on Redis: 1 client on 1 host
//! (the latency of one request alone), 16 clients on 1 host, 16 clients on 16 hosts (one each).
//! For each case: requests/s, latency p50/p99, courtesy's and redis-server's CPU per request, the
//! commands Redis executed per request and, from a 0.5 s sample that logs every command,
//! courtesy's round trips per request by script.
//!
//! With a shared budget one reservation is in flight per host and instance. A host with room to
//! spare (as here) is served from allowances: turns and slots leased ahead from the store and
//! spent without a round trip each, coming back about four times a second or when they run out;
//! a host without (paced, or contended) gets one round trip per turn, or one for the turns of
//! up to 16 waiting requests.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use tokio::task::JoinHandle;

use crate::courtesy::Courtesy;
use crate::load::{hammer, join_all, target, Tally};
use crate::measure::{clk_tck, machine_ticks, own_and_children_ticks};
use crate::origin::{host_ip, Origin};
use crate::report::{row, Section};
use crate::shared_rate::SHARED_METRICS;
use crate::store::{per_request, Sample, Store};

const RUN: Duration = Duration::from_secs(5);
const WARMUP: Duration = Duration::from_millis(500);
const SAMPLE: Duration = Duration::from_millis(500);
/// The cases' (hosts, clients), each run with a local and then a shared budget.
const LOADS: [(usize, usize); 3] = [(1, 1), (1, 16), (16, 16)];

/// What one case measured.
struct Case {
    hosts: usize,
    clients: usize,
    shared: bool,
    requests: u64,
    tally: Arc<Tally>,
    /// Requests per second over the run.
    rps: f64,
    /// Latency p50 and p99 in µs.
    p50: f64,
    p99: f64,
    /// CPU µs per request of courtesy and of redis-server.
    courtesy_us: f64,
    redis_us: f64,
    /// CPU of other processes meanwhile, % of a core.
    others_pct: f64,
    /// Commands Redis executed per request in all, and by command.
    commands: f64,
    by_command: String,
    /// Redis' own time in commands per request, µs.
    redis_usec: f64,
    /// The round-trip sample and the requests answered during it.
    sample: Option<(Sample, u64)>,
    /// Failed store calls and the mean store round trip (µs) as courtesy timed it.
    store_errors: f64,
    round_trip_us: f64,
}

/// Runs scenario 6 against the courtesy binary `bin`.
pub async fn run(bin: &Path) -> anyhow::Result<Section> {
    let mut section = Section::new(
        6,
        "Shared budget, cost per request (1 instance, pacing off, kept-alive clients, 5 s per \
         case; local vs shared budget: 1 client on 1 host, 16 on 1 host, 16 on 16 hosts)",
    );
    let mut store = Store::start().await?;
    let mut cases = Vec::new();
    for (hosts, clients) in LOADS {
        let ips: Vec<Ipv4Addr> = (0..hosts).map(host_ip).collect();
        let origin = Origin::start(&ips, false).await?;
        for shared in [false, true] {
            eprintln!(
                "[scenarios]   6: {clients} client(s) on {hosts} host(s), {} budget …",
                if shared { "shared" } else { "local" }
            );
            let case = measure(bin, &mut store, &origin, &ips, clients, shared).await?;
            cases.push(case);
        }
    }
    store.stop();

    for pair in cases.chunks(2) {
        let [local, shared] = pair else { continue };
        let on = load_name(local);
        section.rows.push(row(
            format!("{on}: requests/s local → shared"),
            "(info)",
            format!(
                "{:.0} → {:.0} ({:.2}×)",
                local.rps,
                shared.rps,
                shared.rps / local.rps
            ),
        ));
        section.rows.push(row(
            format!("{on}: latency p50 / p99 added by the shared budget"),
            "(info)",
            format!(
                "{:+.0} µs / {:+.0} µs ({:.0} / {:.0} µs → {:.0} / {:.0} µs)",
                shared.p50 - local.p50,
                shared.p99 - local.p99,
                local.p50,
                local.p99,
                shared.p50,
                shared.p99
            ),
        ));
        section.rows.push(row(
            format!("{on}: courtesy CPU µs per request local → shared; redis-server's"),
            "(info)",
            format!(
                "{:.1} → {:.1} µs ({:+.1}); redis-server {:.1} µs",
                local.courtesy_us,
                shared.courtesy_us,
                shared.courtesy_us - local.courtesy_us,
                shared.redis_us
            ),
        ));
        if let Some((sample, answered)) = &shared.sample {
            let n = (*answered).max(1) as f64;
            let reserve = sample.by_kind.get("reserve").copied().unwrap_or(0) as f64 / n;
            let (round_trips, by_kind) = per_request(
                sample.by_kind.iter().map(|(k, c)| (k.as_str(), *c)),
                *answered,
            );
            let full = if sample.full {
                " (the log filled up: lower bounds)"
            } else {
                ""
            };
            section.rows.push(
                row(
                    format!("{on}: round trips to Redis before a request is sent (reserve)"),
                    "at most 1 per request (fewer when one call reserves the turns of several waiting requests, or leases them ahead)",
                    format!("{reserve:.3}{full}"),
                )
                .judged(reserve > 0.0 && reserve <= 1.05 && !sample.full),
            );
            section.rows.push(row(
                format!("{on}: round trips to Redis per request in all; commands Redis executed"),
                "(info)",
                format!(
                    "{round_trips:.3} round trips ({by_kind}){full}; {:.2} commands \
                     (`INFO commandstats`, the scripts' own included)",
                    shared.commands
                ),
            ));
        }
        let answers_ok = [local, shared]
            .iter()
            .all(|c| c.tally.get(200) == c.tally.total() && c.requests > 0);
        section.rows.push(
            row(
                format!("{on}: client answers that were 200, local / shared"),
                "all",
                format!(
                    "{} of {} / {} of {}",
                    local.tally.get(200),
                    local.tally.total(),
                    shared.tally.get(200),
                    shared.tally.total()
                ),
            )
            .judged(answers_ok && shared.store_errors == 0.0),
        );
    }
    for c in &cases {
        let mut note = format!(
            "{}, {} budget: {} requests in {:.0} s ({:.0}/s); latency p50 {:.0} µs, p99 {:.0} µs; \
             CPU per request: courtesy {:.1} µs, redis-server {:.1} µs; other processes {:.0} % of \
             a core meanwhile; answers: {}.",
            load_name(c),
            if c.shared { "shared" } else { "local" },
            c.requests,
            RUN.as_secs_f64(),
            c.rps,
            c.p50,
            c.p99,
            c.courtesy_us,
            c.redis_us,
            c.others_pct,
            c.tally.describe()
        );
        if c.shared {
            note.push_str(&format!(
                " Redis executed {:.2} commands per request (the scripts' own calls included): \
                 {}; Redis' own time in commands {:.1} µs per request. Mean store round trip as \
                 courtesy times it: {:.0} µs; failed store calls: {:.0}.",
                c.commands, c.by_command, c.redis_usec, c.round_trip_us, c.store_errors
            ));
            if let Some((sample, answered)) = &c.sample {
                let (round_trips, by_kind) = per_request(
                    sample.by_kind.iter().map(|(k, n)| (k.as_str(), *n)),
                    *answered,
                );
                note.push_str(&format!(
                    " Round trips (`SLOWLOG` sample of {:.1} s, {answered} requests{}): \
                     {round_trips:.3} per request: {by_kind}; commands run inside the scripts \
                     {:.2} per request.",
                    SAMPLE.as_secs_f64(),
                    if sample.full {
                        "; the log filled up"
                    } else {
                        ""
                    },
                    sample.in_scripts as f64 / (*answered).max(1) as f64
                ));
            }
        }
        section.notes.push(note);
    }
    if let Some(one) = cases
        .iter()
        .find(|c| c.shared && c.hosts == 1 && c.clients > 1)
    {
        section.notes.push(format!(
            "One host, shared, {} clients: one reservation in flight per host and instance, which \
             reserves a turn for each request waiting (at most 16): {:.0} requests/s is one turn \
             every {:.0} µs, against a mean store round trip of {:.0} µs as courtesy times it; \
             the clients queue for the reservations, which is most of the latency added.",
            one.clients,
            one.rps,
            1e6 / one.rps.max(1.0),
            one.round_trip_us
        ));
    }
    section.notes.push(
        "With 1 client the machine idles between one request and the next, and waking an idle \
         core costs tens of µs on a VM: the 1-client figures of both modes (requests/s, latency, \
         CPU per request) depend on what else runs, and come out better on a busier machine. \
         Compare the two modes within one run."
            .to_string(),
    );
    Ok(section)
}

/// "1 client on 1 host", "16 clients on 16 hosts".
fn load_name(c: &Case) -> String {
    let plural = |n: usize, word: &str| {
        if n == 1 {
            format!("1 {word}")
        } else {
            format!("{n} {word}s")
        }
    };
    format!(
        "{} on {}",
        plural(c.clients, "client"),
        plural(c.hosts, "host")
    )
}

/// One case: courtesy started for it (on `store` when `shared`), a warm-up, then the measured
/// run and, when shared, the round-trip sample.
async fn measure(
    bin: &Path,
    store: &mut Store,
    origin: &Origin,
    ips: &[Ipv4Addr],
    clients: usize,
    shared: bool,
) -> anyhow::Result<Case> {
    let hosts = ips.len();
    let prefix = format!("bench-cost-{hosts}-{clients}");
    let sections = if shared {
        store.shared_section(&prefix, 1)
    } else {
        String::new()
    };
    let courtesy = Courtesy::start_with(
        bin,
        &format!(
            "cost-{hosts}-{clients}-{}",
            if shared { "shared" } else { "local" }
        ),
        "rate = 100000.0\nburst = 1000\nconcurrency = 1000\nadaptive = false",
        600,
        &sections,
    )
    .await?;
    let targets: Arc<Vec<(String, String)>> =
        Arc::new(ips.iter().map(|ip| target(*ip, origin.port)).collect());
    // Client k sends to host k mod hosts.
    let load = |duration: Duration, tally: Arc<Tally>| {
        let deadline = Instant::now() + duration;
        let tasks: Vec<JoinHandle<()>> = (0..clients)
            .map(|k| {
                tokio::spawn(hammer(
                    courtesy.proxy,
                    targets.clone(),
                    k % hosts,
                    0,
                    10_000_000,
                    deadline,
                    tally.clone(),
                ))
            })
            .collect();
        join_all(tasks, deadline + Duration::from_secs(5))
    };
    // Warm-up: the scripts loaded, the upstream connections opened.
    let warm = Arc::new(Tally::default());
    load(WARMUP, warm.clone()).await;
    if warm.get(200) == 0 {
        bail!("no answer in the warm-up ({})", warm.describe());
    }
    store.reset_stats().await?;
    let machine0 = machine_ticks();
    let (own0, c0, r0) = (
        own_and_children_ticks(),
        courtesy.cpu_ticks(),
        store.cpu_ticks(),
    );
    let tally = Arc::new(Tally::default());
    let t = Instant::now();
    load(RUN, tally.clone()).await;
    let elapsed = t.elapsed().as_secs_f64();
    let (own1, c1, r1) = (
        own_and_children_ticks(),
        courtesy.cpu_ticks(),
        store.cpu_ticks(),
    );
    let machine1 = machine_ticks();
    let stats = store.command_stats().await?;
    let sample = if shared {
        store.start_sample().await?;
        let during = Arc::new(Tally::default());
        load(SAMPLE, during.clone()).await;
        let sample = store.end_sample(&prefix).await?;
        Some((sample, during.get(200)))
    } else {
        None
    };
    let metrics = courtesy.metric_sums(&SHARED_METRICS).await?;
    courtesy.stop().await;

    let requests = tally.get(200);
    let n = requests.max(1) as f64;
    let us = |ticks: u64| ticks as f64 / clk_tck() * 1e6 / n;
    let latency = tally.latency_us(&[0.5, 0.99]);
    let at = |i: usize| latency[i].map_or(f64::NAN, f64::from);
    let others_pct = match (machine0, machine1, own0, own1) {
        (Some((b0, _)), Some((b1, _)), Some(o0), Some(o1)) => {
            let ours = (o1 - o0) + (c1 - c0) + (r1 - r0);
            (b1 - b0).saturating_sub(ours) as f64 / clk_tck() / elapsed * 100.0
        }
        _ => f64::NAN,
    };
    let calls: BTreeMap<&str, u64> = stats.iter().map(|(k, s)| (k.as_str(), s.calls)).collect();
    let (commands, by_command) = per_request(calls.into_iter(), requests);
    Ok(Case {
        hosts,
        clients,
        shared,
        requests,
        tally,
        rps: requests as f64 / elapsed,
        p50: at(0),
        p99: at(1),
        courtesy_us: us(c1 - c0),
        redis_us: us(r1 - r0),
        others_pct,
        commands,
        by_command,
        redis_usec: stats.values().map(|s| s.usec).sum::<u64>() as f64 / n,
        sample,
        store_errors: metrics[0],
        round_trip_us: metrics[2] / metrics[1].max(1.0) * 1e6,
    })
}
