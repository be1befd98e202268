//! Performance scenarios for courtesy (performance issue targets 2–5), run against the real release
//! binary (`target/release/courtesy run --config FILE`, `RUST_LOG=warn`), with the origins and the
//! clients in this process (tokio + hyper 1), on loopback addresses only.
//!
//! 1. **Pacing precision** (`pacing.rs`): one host at 20/s, burst 1, 64 kept-alive clients for
//!    30 s; how evenly and how fully the origin is paced.
//! 2. **Many hosts**: (a) the host table in process (`host_table.rs`): RSS per known host for 1k to
//!    1M hosts, and after a sweep; (b) end to end through the proxy (`many_hosts.rs`): courtesy's
//!    RSS per host, after the idle hosts are forgotten, and what the admin listings add.
//! 3. **Parked requests** (`parked.rs`): 10,000 requests waiting on 1,000 hosts at 0.2/s; courtesy's
//!    CPU while they wait, and that every one is answered.
//! 4. **Fan-out fairness** (`fan_out.rs`): 200 hosts at 5/s, 3 connections per host, 20 s; the
//!    aggregate and per-host rates.
//!
//! and, run apart (`benches/shared.sh`, `--only 5,6`; they need `redis-server`), the shared budget
//! of several instances on one Redis:
//!
//! 5. **Shared aggregate** (`shared_rate.rs`): 4 instances, 200 hosts at 5/s, burst 1, 25 s; the
//!    aggregate rate, every host's densest second, Redis commands per request.
//! 6. **Shared cost** (`shared_cost.rs`): one instance, pacing off, 16 clients, local vs shared
//!    budget on 1 and on 16 hosts; requests/s, latency, CPU per request of courtesy and of Redis,
//!    Redis commands and round trips per request.
//!
//! and, run apart (`benches/adaptive.sh`, `--only 7`):
//!
//! 7. **Adaptive rate** (`adaptive/`): issue 27's table end to end: courtesy's default
//!    controller (no `controller` key), `aimd` and an AutoThrottle-style delay against
//!    rate-limited origins (constant 5/s and 5 → 2 → 8 kept three ways, announced in RateLimit
//!    headers, one-second windows with whole-second resets, latency under load with fixed rates
//!    for the best one), 8 polite clients, `--adaptive-seconds` per run (default 300).
//!
//! Timing is sensitive to other load on the machine: scenarios 1 and 6 are run again (at most 3
//! runs) while other processes used more than 20 % of a core, and the quietest run is reported.
//! Every scenario's row in the report says how busy the machine was.
//!
//! Prints a Markdown report (one table of targets, measured values and pass/fail, then details) and
//! writes it to `benches/SCENARIOS_RESULTS.md` (scenarios 1–4), or `benches/SHARED_RESULTS.md`
//! when only 5 and 6 run.
//!
//! Usage: `benches/scenarios.sh [ARGS]` or `benches/shared.sh` (each raises `ulimit -n`, builds
//! the release binary, runs this), or `cargo bench --bench scenarios -- [ARGS]` with
//! `--only 1,2,3,4` (scenarios to run, 1–6; default 1–4), `--e2e-hosts N` (scenario 2b, default
//! 5000, at most 9000), `--adaptive-seconds N` (scenario 7, per run, default 300), `--out PATH` (report file; `-` for stdout only), `--courtesy PATH` (the
//! binary; also `$COURTESY_BIN`; default `target/release/courtesy`).
//!
//! Every loop is bounded in count and in time; the only processes started are courtesy (and this
//! binary as a child for 2a) and, for 5 and 6, one `redis-server`, each stopped by its own handle
//! (PID) at the end.

#[path = "../common/mod.rs"]
mod common;

mod adaptive;
mod courtesy;
mod fan_out;
mod host_table;
mod load;
mod many_hosts;
mod measure;
mod origin;
mod pacing;
mod parked;
mod report;
mod shared_cost;
mod shared_rate;
mod stats;
mod store;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};

use crate::measure::{clk_tck, machine_ticks, own_and_children_ticks};
use crate::report::{render, Heading, Section};

/// What to run and where the report goes, from the command line.
struct Args {
    /// The scenarios to run, in this order.
    only: Vec<u32>,
    /// Hosts in scenario 2b.
    e2e_hosts: usize,
    /// The report file; `None`: stdout only.
    out: Option<PathBuf>,
    /// Whether `--out` was given (otherwise it follows the scenarios chosen).
    out_given: bool,
    /// The courtesy binary under test.
    bin: PathBuf,
    /// Seconds per run of scenario 7.
    adaptive_seconds: u64,
}

/// The shared-budget scenarios, which need a `redis-server` and have a report of their own.
const SHARED: [u32; 2] = [5, 6];

/// The adaptive-rate scenario, which has a report of its own.
const ADAPTIVE: u32 = 7;

/// Reads the arguments (see the module doc); the defaults run scenarios 1–4 and write
/// `benches/SCENARIOS_RESULTS.md` (only 5 and 6: `benches/SHARED_RESULTS.md`).
fn parse_args(args: &[String]) -> anyhow::Result<Args> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut parsed = Args {
        only: vec![1, 2, 3, 4],
        e2e_hosts: 5_000,
        out: Some(root.join("benches/SCENARIOS_RESULTS.md")),
        out_given: false,
        bin: std::env::var_os("COURTESY_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|| root.join("target/release/courtesy")),
        adaptive_seconds: 300,
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            // `cargo bench` passes --bench to harness = false targets.
            "--bench" => {}
            "--only" => {
                let v = it.next().context("--only needs a list such as 1,3")?;
                parsed.only = v
                    .split(',')
                    .map(|s| s.trim().parse::<u32>())
                    .collect::<Result<_, _>>()
                    .context("--only takes scenario numbers 1..7")?;
            }
            "--e2e-hosts" => {
                let v = it.next().context("--e2e-hosts needs a number")?;
                parsed.e2e_hosts = v.parse().context("--e2e-hosts takes a number")?;
                if !(10..=9_000).contains(&parsed.e2e_hosts) {
                    bail!("--e2e-hosts must be 10..=9000 (two sockets per host here)");
                }
            }
            "--out" => {
                let v = it.next().context("--out needs a path or -")?;
                parsed.out = (v != "-").then(|| PathBuf::from(v));
                parsed.out_given = true;
            }
            "--adaptive-seconds" => {
                let v = it.next().context("--adaptive-seconds needs a number")?;
                parsed.adaptive_seconds = v.parse().context("--adaptive-seconds takes a number")?;
                if !(30..=3600).contains(&parsed.adaptive_seconds) {
                    bail!("--adaptive-seconds must be 30..=3600");
                }
            }
            "--courtesy" => {
                parsed.bin = PathBuf::from(it.next().context("--courtesy needs a path")?);
            }
            other => bail!("unknown argument {other:?}"),
        }
    }
    if !parsed.out_given && parsed.only.iter().all(|n| SHARED.contains(n)) {
        parsed.out = Some(root.join("benches/SHARED_RESULTS.md"));
    }
    if !parsed.out_given && parsed.only == [ADAPTIVE] {
        parsed.out = Some(root.join("benches/ADAPTIVE_RESULTS.md"));
    }
    Ok(parsed)
}

/// Runs the chosen scenarios in turn (scenario 1 up to three times, see `NOISE_PCT`) and renders
/// the report, with a row for each scenario that failed.
async fn run(args: Args) -> anyhow::Result<String> {
    if !args.bin.is_file() {
        bail!(
            "no courtesy binary at {} (cargo build --release --bin courtesy, or set COURTESY_BIN)",
            args.bin.display()
        );
    }
    let started = jiff::Timestamp::now()
        .strftime("%Y-%m-%d %H:%M UTC")
        .to_string();
    let begin = Instant::now();
    let mut sections = Vec::new();
    let mut failures = Vec::new();
    for number in args.only.clone() {
        // Scenarios 1 and 6 are about timing: on a shared machine, run them again (at most twice
        // more) when other processes used more than NOISE_PCT of a core meanwhile, and keep the
        // quietest run.
        let attempts = if matches!(number, 1 | 6) { 3 } else { 1 };
        let mut best: Option<Section> = None;
        let mut tried = Vec::new();
        for attempt in 1..=attempts {
            eprintln!("[scenarios] scenario {number} (attempt {attempt}) …");
            match measured(&args, number).await {
                Ok(s) => {
                    eprintln!(
                        "[scenarios] scenario {number} done in {:.1} s (other processes: {:.0} % \
                         of a core)",
                        s.ran.as_secs_f64(),
                        s.others_pct
                    );
                    tried.push(format!(
                        "attempt {attempt}: other processes {:.0} % of a core; {}",
                        s.others_pct,
                        s.rows
                            .iter()
                            .map(|r| format!("{} {}", r.what, r.measured))
                            .collect::<Vec<_>>()
                            .join("; ")
                    ));
                    let quiet = s.others_pct <= NOISE_PCT;
                    if best.as_ref().is_none_or(|b| s.others_pct < b.others_pct) {
                        best = Some(s);
                    }
                    if quiet {
                        break;
                    }
                }
                Err(e) => {
                    eprintln!("[scenarios] scenario {number} failed: {e:#}");
                    failures.push(format!("scenario {number}: {e:#}").replace('|', "/"));
                    break;
                }
            }
        }
        if let Some(mut s) = best {
            if tried.len() > 1 {
                s.notes.push(format!(
                    "Runs (the quietest is reported; a run is repeated when other processes used \
                     more than {NOISE_PCT:.0} % of a core): {}.",
                    tried.join(" / ").replace("\\|", "|")
                ));
            }
            sections.push(s);
        }
    }
    let heading = if args.only == [ADAPTIVE] {
        Heading {
            title: "courtesy adaptive rate benchmark (issue 27)",
            script: "benches/adaptive.sh",
        }
    } else if args.only.iter().all(|n| SHARED.contains(n)) {
        Heading {
            title: "courtesy shared budget benchmark (several instances on one Redis)",
            script: "benches/shared.sh",
        }
    } else {
        Heading {
            title: "courtesy performance scenarios (targets 2–5)",
            script: "benches/scenarios.sh",
        }
    };
    Ok(render(
        &heading,
        &sections,
        &failures,
        &started,
        begin.elapsed(),
    ))
}

/// Other processes' CPU (% of a core) above which scenarios 1 and 6 are run again.
const NOISE_PCT: f64 = 20.0;

/// Runs one scenario and notes how long it took and what else the machine did meanwhile.
async fn measured(args: &Args, number: u32) -> anyhow::Result<Section> {
    let t = Instant::now();
    let (busy0, own0) = (machine_ticks(), own_and_children_ticks());
    let mut s = match number {
        1 => pacing::run(&args.bin).await?,
        2 => {
            let mut s = Section::new(2, "Many hosts");
            host_table::run(&mut s).await?;
            for close in [false, true] {
                many_hosts::run(&args.bin, &mut s, args.e2e_hosts, close).await?;
            }
            s
        }
        3 => parked::run(&args.bin).await?,
        4 => fan_out::run(&args.bin).await?,
        5 => shared_rate::run(&args.bin).await?,
        6 => shared_cost::run(&args.bin).await?,
        7 => adaptive::run(&args.bin, args.adaptive_seconds).await?,
        other => bail!("there is no scenario {other}"),
    };
    s.ran = t.elapsed();
    if let (Some((b0, i0)), Some(o0), Some((b1, i1)), Some(o1)) =
        (busy0, own0, machine_ticks(), own_and_children_ticks())
    {
        let per_core = clk_tck() * s.ran.as_secs_f64() / 100.0;
        s.others_pct = (b1 - b0).saturating_sub(o1 - o0) as f64 / per_core;
        s.irq_pct = (i1 - i0) as f64 / per_core;
    }
    Ok(s)
}

/// The scenarios, or (`--child-limiter N`) one N of scenario 2a in this child process.
fn main() -> anyhow::Result<()> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if let Some(pos) = argv.iter().position(|a| a == "--child-limiter") {
        let n: usize = argv
            .get(pos + 1)
            .context("--child-limiter needs N")?
            .parse()?;
        if n > 2_000_000 {
            bail!("--child-limiter N must be at most 2000000");
        }
        return host_table::child_limiter(n);
    }
    let args = parse_args(&argv)?;
    let out = args.out.clone();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let report = rt.block_on(run(args))?;
    // Background connection tasks may still be winding down; do not wait for them.
    rt.shutdown_timeout(Duration::from_secs(2));
    println!("{report}");
    if let Some(path) = out {
        std::fs::write(&path, &report).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("[scenarios] wrote {}", path.display());
    }
    Ok(())
}
