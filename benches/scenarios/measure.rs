//! What the scenarios read from `/proc` about processes and the machine: memory, CPU time (of
//! courtesy, of this bench, of everything else) and the open-files limit, so that each result can
//! say what it cost and how busy the machine was meanwhile.

use std::sync::OnceLock;

use crate::common::proc_stat::stat_fields_sum;

/// VmRSS of a process in KiB (`pid` = "self" for this one).
pub fn rss_kib(pid: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = text.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// CPU time of a process's live threads in ns (`/proc/PID/task/*/schedstat`, first field): finer
/// than clock ticks, for 1 s slices.
pub fn cpu_ns(pid: &str) -> Option<u64> {
    let mut total = 0u64;
    for entry in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
        let path = entry.ok()?.path().join("schedstat");
        if let Ok(text) = std::fs::read_to_string(path) {
            total += text
                .split_whitespace()
                .next()
                .and_then(|f| f.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    Some(total)
}

/// Clock ticks per second (`getconf CLK_TCK`, 100 if that fails).
pub fn clk_tck() -> f64 {
    static TCK: OnceLock<f64> = OnceLock::new();
    *TCK.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// This process's CPU ticks, with those of its children already waited for (each courtesy and
/// 2a child is waited for when it is stopped): utime + stime + cutime + cstime.
pub fn own_and_children_ticks() -> Option<u64> {
    stat_fields_sum("self", 11..=14)
}

/// CPU ticks of the whole machine (all cores) from `/proc/stat`: (user + nice + system, irq +
/// softirq). Interrupt time is not charged to any process; loopback TCP spends much of it.
pub fn machine_ticks() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let line = text.lines().next()?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .filter_map(|f| f.parse().ok())
        .collect();
    (v.len() == 8).then(|| (v[0] + v[1] + v[2], v[5] + v[6]))
}

/// The soft limit on open files of this process.
pub fn open_files_limit() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}
