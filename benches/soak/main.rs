//! A bounded fault soak of courtesy: does it lose, duplicate, corrupt or hang requests, and does
//! any request reach a host inside a Retry-After window, while origins misbehave and courtesy is
//! restarted (three SIGTERMs and a SIGKILL per run)?
//!
//! - `origin.rs`: the fault-injecting origins (one hyper listener per host on `127.0.1.N`), which
//!   record every arrival and every window they announce;
//! - `plan.rs`: every chance decision, from `--seed` (hosts, POSTs, weather, behaviours, bodies);
//! - `clients.rs`: the crawlers, on kept-alive connections to courtesy's proxy port;
//! - `child.rs`: courtesy as a child process (the release binary), its config and its restarts;
//! - `ledger.rs`: the figures and the invariants, from the records alone;
//! - `report.rs`: the Markdown report.
//!
//! Usage: `benches/soak.sh [ARGS]` (builds the release binary, then runs this), or
//! `cargo bench --bench soak -- [ARGS]` with `--hosts N` (1..=250, default 5), `--clients N`
//! (default 16), `--requests N` per mode (default 4000), `--mode reject|hold|both` (default
//! both: one run per `on_cooldown`), `--seed N` (default 1), `--max-minutes N` per mode (default
//! 30: no request starts after it), `--out FILE|-` (default `benches/SOAK_RESULTS.md`; `-`:
//! stdout only), `--courtesy PATH` (the binary; also `$COURTESY_BIN`; default
//! `target/release/courtesy`). The big run: `--hosts 20 --clients 64 --requests 100000`.
//!
//! Exits non-zero when an invariant fails or a run cannot complete. Loopback only; the only
//! processes started are courtesy (stopped by its own PID) and `kill` to signal it. Every loop is
//! bounded in count and in time.

#[path = "../common/mod.rs"]
mod common;

mod child;
mod clients;
mod ledger;
mod origin;
mod plan;
mod report;

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};

use crate::child::{Courtesy, Mode, Signal};
use crate::clients::{Load, OVERALL_TIMEOUT};
use crate::origin::Origin;
use crate::report::{ModeRun, Setup};

/// What to run, from the command line.
struct Args {
    hosts: usize,
    clients: usize,
    requests: u64,
    modes: Vec<Mode>,
    seed: u64,
    max_minutes: u64,
    out: Option<PathBuf>,
    bin: PathBuf,
    /// The arguments as given, for the report.
    line: String,
}

/// Reads the arguments (see the module doc).
fn parse_args(argv: &[String]) -> anyhow::Result<Args> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut a = Args {
        hosts: 5,
        clients: 16,
        requests: 4_000,
        modes: vec![Mode::Reject, Mode::Hold],
        seed: 1,
        max_minutes: 30,
        out: Some(root.join("benches/SOAK_RESULTS.md")),
        bin: std::env::var_os("COURTESY_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|| root.join("target/release/courtesy")),
        line: String::new(),
    };
    let mut shown = Vec::new();
    let mut it = argv.iter();
    while let Some(arg) = it.next() {
        let mut value = |what: &str| -> anyhow::Result<String> {
            let v = it.next().with_context(|| format!("{arg} needs {what}"))?;
            shown.push(format!("{arg} {v}"));
            Ok(v.clone())
        };
        match arg.as_str() {
            // `cargo bench` passes --bench to harness = false targets.
            "--bench" => {}
            "--hosts" => a.hosts = value("a number")?.parse()?,
            "--clients" => a.clients = value("a number")?.parse()?,
            "--requests" => a.requests = value("a number")?.parse()?,
            "--seed" => a.seed = value("a number")?.parse()?,
            "--max-minutes" => a.max_minutes = value("a number")?.parse()?,
            "--mode" => {
                a.modes = match value("reject, hold or both")?.as_str() {
                    "reject" => vec![Mode::Reject],
                    "hold" => vec![Mode::Hold],
                    "both" => vec![Mode::Reject, Mode::Hold],
                    other => bail!("--mode takes reject, hold or both, not {other:?}"),
                }
            }
            "--out" => {
                let v = value("a path or -")?;
                a.out = (v != "-").then(|| PathBuf::from(v));
            }
            "--courtesy" => a.bin = PathBuf::from(value("a path")?),
            other => bail!("unknown argument {other:?}"),
        }
    }
    if !(1..=250).contains(&a.hosts) {
        bail!("--hosts must be 1..=250 (one address each in 127.0.1.0/24)");
    }
    if !(1..=1_000).contains(&a.clients) {
        bail!("--clients must be 1..=1000");
    }
    if !(10..=10_000_000).contains(&a.requests) {
        bail!("--requests must be 10..=10000000");
    }
    if !(1..=240).contains(&a.max_minutes) {
        bail!("--max-minutes must be 1..=240");
    }
    a.line = shown.join(" ");
    Ok(a)
}

/// When each restart is made: at these shares of the requests done.
const RESTARTS: [(f64, Signal); 4] = [
    (0.2, Signal::Term),
    (0.4, Signal::Term),
    (0.6, Signal::Term),
    (0.8, Signal::Kill),
];

/// One run in `mode`: origins, courtesy, the clients and the restarts; then the tally.
async fn soak(args: &Args, mode: Mode) -> anyhow::Result<(ModeRun, String)> {
    let dir = std::env::temp_dir().join(format!(
        "courtesy-soak-{}-{}",
        std::process::id(),
        mode.word()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let origin = Origin::start(args.hosts, args.seed).await?;
    let mut courtesy = Courtesy::start(&args.bin, &dir, mode).await?;
    let config = std::fs::read_to_string(dir.join("courtesy.toml"))?;
    let epoch = (Instant::now(), jiff::Timestamp::now());
    let load = Load::new(
        args.seed,
        courtesy.proxy,
        origin.addrs.clone(),
        args.requests,
    );
    // Each restart comes with requests still to send: ids above the next restart's share plus a
    // margin wait until it is done.
    let margin = (args.clients as u64 * 4).max(args.requests / 50);
    let gate_for = |i: usize| {
        RESTARTS.get(i).map_or(args.requests, |(share, _)| {
            ((share * args.requests as f64) as u64 + margin).min(args.requests)
        })
    };
    load.gate.store(gate_for(0), Ordering::Relaxed);
    let tasks: Vec<_> = (0..args.clients)
        .map(|_| tokio::spawn(clients::client(Arc::clone(&load))))
        .collect();
    let deadline = epoch.0 + Duration::from_secs(args.max_minutes * 60);
    let mut restarts = Vec::new();
    let mut next_restart = 0;
    let mut next_progress = Instant::now() + Duration::from_secs(10);
    // The shared store's stalls: with `SOAK_STALL_PID` (redis-servers' pids, comma-separated:
    // a master and its replica, so that whichever is the master stalls), `SIGSTOP` for 1 s
    // every 20 s, as a latency spike or a short partition.
    let stall_pids: Vec<u32> = std::env::var("SOAK_STALL_PID")
        .unwrap_or_default()
        .split(',')
        .filter_map(|p| p.trim().parse().ok())
        .collect();
    let mut next_stall = Instant::now() + STALL_EVERY;
    let mut stalls = 0;
    let mut failovers = 0;
    // With `SOAK_FAILOVER_CMD` (e.g. `redis-cli -p <sentinel> SENTINEL FAILOVER <master>`), run
    // once when half the requests are done.
    let mut failover = std::env::var("SOAK_FAILOVER_CMD")
        .ok()
        .filter(|c| !c.is_empty());
    // Bounded by the deadline (the clients stop taking ids after it, and each of their requests
    // ends within OVERALL_TIMEOUT).
    while Instant::now() < deadline + OVERALL_TIMEOUT + Duration::from_secs(30) {
        if tasks.iter().all(|t| t.is_finished()) {
            break;
        }
        let done = load.done.load(Ordering::Relaxed);
        if let Some(&(share, signal)) = RESTARTS.get(next_restart) {
            if done as f64 >= share * args.requests as f64 {
                eprintln!(
                    "[soak {}] {done} done: {} and restart",
                    mode.word(),
                    signal.name()
                );
                restarts.push(courtesy.restart(signal).await?);
                next_restart += 1;
                load.gate.store(gate_for(next_restart), Ordering::Relaxed);
            }
        }
        if !stall_pids.is_empty() && Instant::now() >= next_stall {
            eprintln!(
                "[soak {}] {done} done: the store stalls for 1 s",
                mode.word()
            );
            for pid in &stall_pids {
                signal_pid("-STOP", *pid);
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
            for pid in &stall_pids {
                signal_pid("-CONT", *pid);
            }
            stalls += 1;
            next_stall = Instant::now() + STALL_EVERY;
        }
        if done * 2 >= args.requests {
            if let Some(command) = failover.take() {
                eprintln!("[soak {}] {done} done: failover ({command})", mode.word());
                let ran = tokio::process::Command::new("sh")
                    .args(["-c", &command])
                    .status()
                    .await;
                eprintln!("[soak {}] failover: {ran:?}", mode.word());
                failovers += usize::from(ran.is_ok_and(|status| status.success()));
            }
        }
        if Instant::now() >= next_progress {
            eprintln!(
                "[soak {}] {done} of {} done after {:.0} s",
                mode.word(),
                args.requests,
                epoch.0.elapsed().as_secs_f64()
            );
            next_progress += Duration::from_secs(10);
        }
        if Instant::now() >= deadline && !load.stop.swap(true, Ordering::Relaxed) {
            eprintln!("[soak {}] time bound reached: no new requests", mode.word());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let ran = epoch.0.elapsed();
    for task in &tasks {
        task.abort();
    }
    let final_stop = courtesy.stop(Signal::Term).await;
    eprintln!(
        "[soak {}] load done in {:.0} s; courtesy stopped: {}",
        mode.word(),
        ran.as_secs_f64(),
        final_stop.as_deref().unwrap_or("(error)")
    );
    let tally = ledger::tally(
        &load.outcomes(),
        &origin.arrivals(),
        &origin.windows(),
        &restarts,
    );
    let run = ModeRun {
        mode,
        ran,
        tally,
        epoch,
        log: courtesy.log.clone(),
        hosts: origin.addrs.clone(),
        planned: args.requests,
        refusals: load.refusals.load(Ordering::Relaxed),
        stalls,
        failovers,
    };
    Ok((run, config))
}

/// How often the shared store stalls when `SOAK_STALL_PID` is set.
const STALL_EVERY: Duration = Duration::from_secs(20);

/// Sends `signal` (`-STOP`, `-CONT`) to the process `pid` (the store the soak stalls).
fn signal_pid(signal: &str, pid: u32) {
    let _ = std::process::Command::new("kill")
        .args([signal, &pid.to_string()])
        .status();
}

/// Every mode in turn, the report, and whether everything passed.
async fn run(args: &Args) -> anyhow::Result<(String, bool)> {
    if !args.bin.is_file() {
        bail!(
            "no courtesy binary at {} (cargo build --release --bin courtesy, or set COURTESY_BIN)",
            args.bin.display()
        );
    }
    let begin = Instant::now();
    let mut runs = Vec::new();
    let mut errors = Vec::new();
    let mut config = String::new();
    for &mode in &args.modes {
        eprintln!("[soak] mode {} …", mode.word());
        match soak(args, mode).await {
            Ok((run, text)) => {
                eprintln!(
                    "[soak {}] {}",
                    mode.word(),
                    if run.tally.passed() { "PASS" } else { "FAIL" }
                );
                config = text;
                runs.push(run);
            }
            Err(e) => {
                eprintln!("[soak {}] did not complete: {e:#}", mode.word());
                errors.push(format!("`{}`: {e:#}", mode.word()));
            }
        }
    }
    let setup = Setup {
        args: args.line.clone(),
        hosts: args.hosts,
        clients: args.clients,
        requests: args.requests,
        seed: args.seed,
        config,
        root: PathBuf::from(env!("CARGO_MANIFEST_DIR")),
    };
    let passed = errors.is_empty() && runs.iter().all(|r| r.tally.passed());
    Ok((
        report::render(&setup, &runs, &errors, begin.elapsed()),
        passed,
    ))
}

/// Runs the soak, prints and writes the report, exits 1 when an invariant failed.
fn main() -> anyhow::Result<()> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let args = parse_args(&argv)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let (report, passed) = rt.block_on(run(&args))?;
    // Connection tasks of the origins may still be winding down; do not wait for them.
    rt.shutdown_timeout(Duration::from_secs(2));
    println!("{report}");
    if let Some(path) = &args.out {
        std::fs::write(path, &report).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("[soak] wrote {}", path.display());
    }
    if !passed {
        eprintln!("[soak] an invariant failed (see the report)");
        std::process::exit(1);
    }
    Ok(())
}
