//! The scenarios' results and the Markdown report made of them: one table of targets, measured
//! values and pass/fail, one table of how busy the machine was, then each scenario's details.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use crate::common::provenance::{git_rev, machine};

/// One line of the results table.
pub struct Row {
    /// What is measured.
    pub what: String,
    /// What it should be.
    pub target: String,
    /// What it was.
    pub measured: String,
    /// `None`: for information, no target.
    pub pass: Option<bool>,
}

/// A row for information (no pass or fail until `judged`).
pub fn row(what: impl Into<String>, target: impl Into<String>, measured: impl Into<String>) -> Row {
    Row {
        what: what.into(),
        target: target.into(),
        measured: measured.into(),
        pass: None,
    }
}

impl Row {
    /// The row with its verdict.
    pub fn judged(mut self, pass: bool) -> Row {
        self.pass = Some(pass);
        self
    }
}

/// What the report is called and which script runs it.
pub struct Heading {
    /// The report's title.
    pub title: &'static str,
    /// The script that runs the scenarios (with `cargo bench --bench scenarios`).
    pub script: &'static str,
}

/// One scenario's results.
pub struct Section {
    /// The scenario's number (1–6), as `--only` takes it.
    pub number: u32,
    /// The scenario and its parameters, as the report names it.
    pub title: String,
    /// How long it took.
    pub ran: Duration,
    /// CPU used by processes other than this bench and its courtesy, in % of one core.
    pub others_pct: f64,
    /// Interrupt (mostly softirq: loopback TCP, ours included) time, in % of one core.
    pub irq_pct: f64,
    /// Its lines in the results table.
    pub rows: Vec<Row>,
    /// Its paragraphs in the details.
    pub notes: Vec<String>,
}

impl Section {
    /// An empty section; the machine figures are NaN until measured.
    pub fn new(number: u32, title: &str) -> Section {
        Section {
            number,
            title: title.to_string(),
            ran: Duration::ZERO,
            others_pct: f64::NAN,
            irq_pct: f64::NAN,
            rows: Vec::new(),
            notes: Vec::new(),
        }
    }
}

/// The whole report: header (title, date, machine, commit, total time), both tables, details;
/// `failures` are scenarios that did not run, one error row each.
pub fn render(
    heading: &Heading,
    sections: &[Section],
    failures: &[String],
    started: &str,
    total: Duration,
) -> String {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut md = String::new();
    let _ = writeln!(md, "# {}\n", heading.title);
    let _ = writeln!(md, "- Date: {started}");
    let _ = writeln!(md, "- Machine: {}", machine());
    let _ = writeln!(
        md,
        "- courtesy: release binary at commit {}, `RUST_LOG=warn`; origins and clients in the \
         bench process (tokio, hyper 1), loopback only",
        git_rev(&root)
    );
    let _ = writeln!(
        md,
        "- Ran with `{}` (`cargo bench --bench scenarios`); total {:.0} s\n",
        heading.script,
        total.as_secs_f64()
    );
    let _ = writeln!(md, "| # | measure | target | measured | result |");
    let _ = writeln!(md, "|---|---|---|---|---|");
    for s in sections {
        for r in &s.rows {
            let result = match r.pass {
                Some(true) => "pass",
                Some(false) => "**FAIL**",
                None => "info",
            };
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} |",
                s.number, r.what, r.target, r.measured, result
            );
        }
    }
    for f in failures {
        let _ = writeln!(md, "| – | {f} | – | did not run | **ERROR** |");
    }
    let _ = writeln!(
        md,
        "\n| # | scenario | ran | CPU of other processes meanwhile | irq + softirq (all) |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|");
    for s in sections {
        let _ = writeln!(
            md,
            "| {} | {} | {:.1} s | {:.0} % of a core | {:.0} % of a core |",
            s.number,
            s.title,
            s.ran.as_secs_f64(),
            s.others_pct,
            s.irq_pct
        );
    }
    let _ = writeln!(
        md,
        "\nOther processes: machine user + system time minus this bench's and its courtesy's (and redis-server's). \
         Interrupt time is charged to no process; it includes this bench's own loopback traffic."
    );
    let _ = writeln!(md, "\n## Details\n");
    for s in sections {
        let _ = writeln!(md, "### {}. {}\n", s.number, s.title);
        for n in &s.notes {
            let _ = writeln!(md, "- {n}");
        }
        let _ = writeln!(md);
    }
    md
}
