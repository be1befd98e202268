//! The Markdown report: what ran, the machine, the config, then one table per cooldown mode with
//! every figure and the invariants' PASS/FAIL, and for each broken invariant the ids, the instants
//! and what courtesy logged about that host at that moment.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::child::{Mode, Restart, WINDOW_TAIL};
use crate::clients::OVERALL_TIMEOUT;
use crate::common::provenance::{git_rev, machine};
use crate::ledger::{Tally, IN_FLIGHT_GRACE, KILL_RACE};
use crate::origin::{host_ip, HANG};

/// One mode's run, ready to print.
pub struct ModeRun {
    /// The mode.
    pub mode: Mode,
    /// How long the load ran.
    pub ran: Duration,
    /// The figures.
    pub tally: Tally,
    /// When the run's clock started, on both clocks (for wall times in findings).
    pub epoch: (Instant, jiff::Timestamp),
    /// courtesy's log of this run.
    pub log: PathBuf,
    /// Each host's address (index = host).
    pub hosts: Vec<std::net::SocketAddr>,
    /// Requests planned.
    pub planned: u64,
    /// Connection attempts to the proxy refused and tried again (courtesy restarting).
    pub refusals: u64,
    /// Stalls of the shared store (`SOAK_STALL_PID`: `SIGSTOP` for 1 s every 20 s).
    pub stalls: usize,
    /// Failovers of the shared store (`SOAK_FAILOVER_CMD`, run once half-way).
    pub failovers: usize,
}

impl ModeRun {
    /// Seconds since the run's start.
    fn secs(&self, at: Instant) -> f64 {
        at.saturating_duration_since(self.epoch.0).as_secs_f64()
    }

    /// The wall-clock time of `at` (UTC), as courtesy's log prints it.
    fn wall(&self, at: Instant) -> jiff::Timestamp {
        let since = at.saturating_duration_since(self.epoch.0);
        self.epoch.1.checked_add(since).unwrap_or(self.epoch.1)
    }

    /// "t=12.345678 s (09:10:11.123456Z)".
    fn when(&self, at: Instant) -> String {
        format!(
            "t={:.6} s ({})",
            self.secs(at),
            self.wall(at).strftime("%H:%M:%S%.6fZ")
        )
    }
}

/// What the run was asked to do (for the report's header).
pub struct Setup {
    /// The command line after the bench's name.
    pub args: String,
    /// Hosts, clients, requests, seed.
    pub hosts: usize,
    /// Client tasks.
    pub clients: usize,
    /// Requests per mode.
    pub requests: u64,
    /// The seed.
    pub seed: u64,
    /// The config courtesy ran with (ports and paths of the last run).
    pub config: String,
    /// Where the repository is (for the commit).
    pub root: PathBuf,
}

/// The whole report.
pub fn render(setup: &Setup, runs: &[ModeRun], errors: &[String], took: Duration) -> String {
    let mut out = String::new();
    let date = jiff::Timestamp::now().strftime("%Y-%m-%d %H:%M UTC");
    let _ = writeln!(out, "# courtesy fault soak\n");
    let _ = writeln!(out, "- Date: {date}");
    let _ = writeln!(out, "- Machine: {}", machine());
    let _ = writeln!(
        out,
        "- courtesy: release binary at commit {}, `RUST_LOG=info`, restarted as a child process; \
         origins and clients in the bench process (tokio, hyper 1), loopback only",
        git_rev(&setup.root)
    );
    let _ = writeln!(
        out,
        "- Ran with `benches/soak.sh {}` (`cargo bench --bench soak`); total {:.0} s",
        setup.args,
        took.as_secs_f64()
    );
    let _ = writeln!(
        out,
        "- {} hosts, {} clients (one kept-alive connection each), {} requests per mode (one in ten \
         a POST of 1–8 KiB), seed {}",
        setup.hosts, setup.clients, setup.requests, setup.seed
    );
    let _ = writeln!(out);
    let _ = writeln!(out, "{}", what_ran());
    let _ = writeln!(
        out,
        "courtesy's config (the mode's `on_cooldown` changes):\n"
    );
    let _ = writeln!(out, "```toml\n{}```\n", setup.config);
    if !runs.is_empty() {
        summary(&mut out, runs);
    }
    for e in errors {
        let _ = writeln!(out, "**A run did not complete:** {e}\n");
    }
    for run in runs {
        mode_section(&mut out, run);
    }
    out
}

/// The paragraph on how the soak works.
fn what_ran() -> String {
    format!(
        "Each origin host (`127.0.1.N`, a port each) picks every try's behaviour from the seeded \
         plan under a per-host weather that changes every 4 s (clear, drizzle, throttling, \
         overloaded): mostly a 200 whose body carries the id and an FNV-1a checksum (8 B to \
         256 KiB, a quarter of them chunked in pieces), else a reset (the request is read, the \
         socket dropped unanswered), a hang ({} s, past courtesy's 3 s response timeout), \
         garbage bytes, a 429 with `Retry-After: 1..4`, a 503 with `Retry-After: 1..3` or without \
         one, or a 200 followed by a close. Every Retry-After window the origin announces is \
         remembered: an arrival for that host inside it is a **window violation** (arrivals \
         within {} ms of the opening were already on their way and are counted apart; so are \
         arrivals in windows opened within {} ms of a SIGKILL or while courtesy was down, which \
         may never have reached it). Clients pause 0.5 s after a local 429 (as a crawler honouring \
         Retry-After would) and time out after {} s (**hung**). courtesy gets a \
         SIGTERM when 20, 40 and 60 % of the requests are done and a SIGKILL at 80 %, and is \
         started again at once on the same ports and state_dir; a transport failure from the \
         signal until the new process accepts, plus {} s, is \"lost in a restart window\", \
         anywhere else it is **lost**. An id the origin answered with two pages (answers other than a \
         429 or 503, after which courtesy retries a GET itself), or a POST answered twice, is a \
         **duplicate**; a \
         POST id it saw twice is a **POST resent**; a GET id seen again after an unanswered try \
         is courtesy's allowed stale-connection resend.\n",
        HANG.as_secs(),
        IN_FLIGHT_GRACE.as_millis(),
        KILL_RACE.as_millis(),
        OVERALL_TIMEOUT.as_secs(),
        WINDOW_TAIL.as_secs()
    )
}

/// One line per mode and invariant.
fn summary(out: &mut String, runs: &[ModeRun]) {
    let _ = write!(out, "| invariant |");
    for r in runs {
        let _ = write!(out, " `{}` |", r.mode.word());
    }
    let _ = write!(out, "\n|---|");
    for _ in runs {
        let _ = write!(out, "---|");
    }
    let _ = writeln!(out);
    let names: Vec<&str> = runs[0].tally.invariants().iter().map(|(n, _)| *n).collect();
    for (i, name) in names.iter().enumerate() {
        let _ = write!(out, "| {name} |");
        for r in runs {
            let ok = r.tally.invariants().get(i).is_some_and(|(_, ok)| *ok);
            let _ = write!(out, " {} |", if ok { "PASS" } else { "**FAIL**" });
        }
        let _ = writeln!(out);
    }
    let _ = writeln!(out);
}

/// A count and its share of `of`.
fn share(n: u64, of: u64) -> String {
    if of == 0 {
        return n.to_string();
    }
    format!("{n} ({:.1} %)", n as f64 * 100.0 / of as f64)
}

/// "PASS" or "**FAIL**".
fn verdict(ok: bool) -> &'static str {
    if ok {
        "PASS"
    } else {
        "**FAIL**"
    }
}

/// One mode's table and findings.
fn mode_section(out: &mut String, run: &ModeRun) {
    let t = &run.tally;
    let _ = writeln!(out, "## `on_cooldown = \"{}\"`\n", run.mode.word());
    let _ = writeln!(
        out,
        "The load ran {:.0} s ({:.0} requests/s through courtesy, {:.0} arrivals/s at the \
         origins); courtesy's log: `{}`.\n",
        run.ran.as_secs_f64(),
        t.sent as f64 / run.ran.as_secs_f64().max(0.001),
        t.arrivals as f64 / run.ran.as_secs_f64().max(0.001),
        run.log.display()
    );
    let _ = writeln!(out, "| measure | value | invariant |\n|---|---|---|");
    let mut row = |what: &str, value: String, inv: &str| {
        let _ = writeln!(out, "| {what} | {value} | {inv} |");
    };
    let not_sent = run.planned.saturating_sub(t.sent);
    row(
        "requests sent",
        if not_sent == 0 {
            t.sent.to_string()
        } else {
            format!("{} ({not_sent} not sent: the run's time bound)", t.sent)
        },
        "",
    );
    let origin_total: u64 = t.origin_by_status.values().sum();
    let class = |lo: u16| -> u64 { t.origin_by_status.range(lo..lo + 100).map(|(_, n)| n).sum() };
    let statuses = t
        .origin_by_status
        .iter()
        .map(|(s, n)| format!("{s}: {n}"))
        .collect::<Vec<_>>()
        .join(", ");
    row(
        "answered by the origin",
        format!(
            "{} — 2xx {}, 4xx {}, 5xx {} ({statuses})",
            share(origin_total, t.sent),
            class(200),
            class(400),
            class(500)
        ),
        "",
    );
    let local_total: u64 = t.local_by_error.values().sum();
    let locals = t
        .local_by_error
        .iter()
        .map(|((e, s), n)| format!("`{e}` {s}: {n}"))
        .collect::<Vec<_>>()
        .join(", ");
    row(
        "answered by courtesy (`Proxy-Status` error type, status)",
        format!("{} — {locals}", share(local_total, t.sent)),
        "",
    );
    row(
        "lost (transport failure outside restart windows)",
        t.lost.len().to_string(),
        verdict(t.lost.is_empty()),
    );
    let in_restarts: u64 = t.lost_in_restarts.values().sum();
    let kinds = t
        .lost_in_restarts
        .iter()
        .map(|(k, n)| format!("{k}: {n}"))
        .collect::<Vec<_>>()
        .join(", ");
    row(
        "lost in restart windows",
        if in_restarts == 0 {
            "0".into()
        } else {
            format!("{in_restarts} ({kinds})")
        },
        "expected, reported apart",
    );
    row(
        &format!("hung (no end within {} s)", OVERALL_TIMEOUT.as_secs()),
        t.hung.len().to_string(),
        verdict(t.hung.is_empty()),
    );
    row(
        "corrupted (200 body not its id's / POST body changed on the way)",
        format!("{} / {}", t.corrupted.len(), t.post_body_bad.len()),
        verdict(t.corrupted.is_empty() && t.post_body_bad.is_empty()),
    );
    row(
        "duplicates (an id the origin answered with two pages, or a POST twice)",
        t.duplicates.len().to_string(),
        verdict(t.duplicates.is_empty()),
    );
    row(
        "POST resent (a POST id the origin saw twice)",
        t.post_resent.len().to_string(),
        verdict(t.post_resent.is_empty()),
    );
    row(
        "resent after an unanswered try (GET, stale pooled connection)",
        t.resent_after_unanswered.to_string(),
        "allowed",
    );
    row(
        "sent again after a 429 or 503 (GET, courtesy's retry_idempotent after the window)",
        t.retried_after_refusal.to_string(),
        "allowed",
    );
    let windows = t
        .windows_by_status
        .iter()
        .map(|(s, n)| format!("{n} by {s}s"))
        .collect::<Vec<_>>()
        .join(", ");
    row(
        "window violations (arrivals inside a Retry-After window)",
        format!(
            "{} (windows announced: {})",
            t.violations.len(),
            if windows.is_empty() {
                "none".into()
            } else {
                windows
            }
        ),
        verdict(t.violations.is_empty()),
    );
    row(
        &format!(
            "arrivals within {} ms of a window's opening (in flight already)",
            IN_FLIGHT_GRACE.as_millis()
        ),
        t.in_flight_at_open.to_string(),
        "info",
    );
    row(
        &format!(
            "arrivals in windows opened within {} ms of the SIGKILL or while courtesy was down",
            KILL_RACE.as_millis()
        ),
        t.kill_race.to_string(),
        "info",
    );
    row(
        "requests without `x-soak-id` at the origin",
        t.arrivals_without_id.to_string(),
        verdict(t.arrivals_without_id == 0),
    );
    row(
        "origin answers at the client that the origin never made",
        t.unrecorded_origin_answers.len().to_string(),
        "info (should be 0)",
    );
    row(
        "connection attempts refused and tried again (nothing sent yet)",
        run.refusals.to_string(),
        "info",
    );
    row("restarts done", restarts_line(run), "");
    if run.stalls > 0 || run.failovers > 0 {
        row(
            "faults of the shared store: stalls (SIGSTOP 1 s every 20 s), failovers (half-way)",
            format!("{} stalls, {} failovers", run.stalls, run.failovers),
            "info",
        );
    }
    let behaviours = t
        .arrivals_by_behaviour
        .iter()
        .map(|(b, n)| format!("{}: {}", b.name(), share(*n, t.arrivals)))
        .collect::<Vec<_>>()
        .join(", ");
    row(
        "arrivals at the origins, by what they did",
        format!("{} — {behaviours}", t.arrivals),
        "",
    );
    row(
        "client latency of answered requests p50 / p99 / max",
        format!(
            "{:.3} s / {:.3} s / {:.3} s",
            t.latency[0].as_secs_f64(),
            t.latency[1].as_secs_f64(),
            t.latency[2].as_secs_f64()
        ),
        "",
    );
    let _ = writeln!(out);
    findings(out, run);
}

/// "3 SIGTERM + 1 SIGKILL: SIGTERM at t=… (exited after … s, accepting after … s); …".
fn restarts_line(run: &ModeRun) -> String {
    let r = &run.tally.restarts;
    let terms = r.iter().filter(|x| x.signal.name() == "SIGTERM").count();
    let kills = r.len() - terms;
    let each = r
        .iter()
        .map(|x: &Restart| {
            format!(
                "{} at t={:.1} s (exit after {:.2} s: {}; accepting {:.2} s after the signal)",
                x.signal.name(),
                run.secs(x.sent),
                (x.exited - x.sent).as_secs_f64(),
                x.exit_status,
                (x.ready - x.sent).as_secs_f64()
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    format!("{terms} SIGTERM + {kills} SIGKILL: {each}")
}

/// At most this many examples of each broken invariant are printed.
const EXAMPLES: usize = 5;

/// The evidence for each broken invariant.
fn findings(out: &mut String, run: &ModeRun) {
    let t = &run.tally;
    if t.passed() && t.unrecorded_origin_answers.is_empty() {
        let _ = writeln!(out, "No findings in this mode.\n");
        return;
    }
    let _ = writeln!(out, "### Findings (`{}`)\n", run.mode.word());
    for v in t.violations.iter().take(EXAMPLES) {
        let a = &v.arrival;
        let _ = writeln!(
            out,
            "- **Window violation**: id {} ({}) reached host {} at {}, inside the {} window opened \
             by id {} at {} until {} ({:.3} ms before its end){}.",
            a.id.map_or("none".into(), |i| i.to_string()),
            if a.post { "POST" } else { "GET" },
            host_name(run, a.host),
            run.when(a.at),
            v.window.status,
            v.window.by_id,
            run.when(v.window.opened),
            run.when(v.window.until),
            v.window.until.saturating_duration_since(a.at).as_secs_f64() * 1000.0,
            v.across
                .map_or(String::new(), |s| format!(", across a {}", s.name()))
        );
        excerpt(out, run, a.host, v.window.opened, a.at);
    }
    for (o, kind) in t.lost.iter().take(EXAMPLES) {
        let _ = writeln!(
            out,
            "- **Lost**: id {} ({}) to host {}, sent at {}, failed at {}: {kind}.",
            o.id,
            if o.post { "POST" } else { "GET" },
            host_name(run, o.host),
            run.when(o.sent),
            run.when(o.done)
        );
        excerpt(out, run, o.host, o.sent, o.done);
    }
    for o in t.hung.iter().take(EXAMPLES) {
        let _ = writeln!(
            out,
            "- **Hung**: id {} to host {}, sent at {}.",
            o.id,
            host_name(run, o.host),
            run.when(o.sent)
        );
    }
    for (id, why) in t.corrupted.iter().take(EXAMPLES) {
        let _ = writeln!(out, "- **Corrupted**: id {id}: {why}.");
    }
    for id in t.post_body_bad.iter().take(EXAMPLES) {
        let _ = writeln!(
            out,
            "- **POST body changed or cut** on the way to the origin: id {id}."
        );
    }
    for (id, n) in t.duplicates.iter().take(EXAMPLES) {
        let _ = writeln!(
            out,
            "- **Duplicate**: id {id} answered {n} times by the origin."
        );
    }
    for (id, n) in t.post_resent.iter().take(EXAMPLES) {
        let _ = writeln!(
            out,
            "- **POST resent**: id {id} reached the origin {n} times."
        );
    }
    if !t.unrecorded_origin_answers.is_empty() {
        let ids: Vec<String> = t
            .unrecorded_origin_answers
            .iter()
            .take(EXAMPLES)
            .map(u64::to_string)
            .collect();
        let _ = writeln!(
            out,
            "- Answers without `Proxy-Status` that the origin has no answer for: {} (ids {}).",
            t.unrecorded_origin_answers.len(),
            ids.join(", ")
        );
    }
    let _ = writeln!(out);
}

/// "127.0.1.3:41234".
fn host_name(run: &ModeRun, host: usize) -> String {
    run.hosts
        .get(host)
        .map_or_else(|| host_ip(host).to_string(), |a| a.to_string())
}

/// What courtesy logged about `host` from a second before `from` to half a second after `to`
/// (at most 12 lines), as an indented code block.
fn excerpt(out: &mut String, run: &ModeRun, host: usize, from: Instant, to: Instant) {
    let lines = log_lines(
        &run.log,
        &format!("host={}", host_name(run, host)),
        run.wall(from)
            .checked_sub(Duration::from_secs(1))
            .unwrap_or(run.epoch.1),
        run.wall(to)
            .checked_add(Duration::from_millis(500))
            .unwrap_or(run.epoch.1),
    );
    if lines.is_empty() {
        let _ = writeln!(out, "  (courtesy logged nothing about this host then)");
        return;
    }
    let _ = writeln!(out, "\n  ```");
    for line in lines.iter().take(12) {
        let _ = writeln!(out, "  {}", line.chars().take(400).collect::<String>());
    }
    let _ = writeln!(out, "  ```");
}

/// Lines of `log` that contain `needle`, stamped between `from` and `to`, plus every marker and
/// shutdown line in that span.
fn log_lines(log: &Path, needle: &str, from: jiff::Timestamp, to: jiff::Timestamp) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(log) else {
        return Vec::new();
    };
    text.lines()
        .filter(|line| {
            let stamp = line
                .split_whitespace()
                .next()
                .and_then(|s| s.parse::<jiff::Timestamp>().ok());
            let in_span = stamp.is_some_and(|s| s >= from && s <= to);
            let marker = line.starts_with("==== soak:");
            (in_span && (line.contains(needle) || line.contains("shut"))) || marker
        })
        .filter(|line| !line.starts_with("==== soak:") || mentions_span(line, from, to))
        .map(str::to_string)
        .collect()
}

/// Whether a start marker line's time is within the span.
fn mentions_span(line: &str, from: jiff::Timestamp, to: jiff::Timestamp) -> bool {
    line.split_whitespace()
        .find_map(|w| w.parse::<jiff::Timestamp>().ok())
        .is_some_and(|s| s >= from && s <= to)
}
