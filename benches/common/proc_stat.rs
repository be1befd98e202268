//! CPU time of a process from `/proc/PID/stat`, the figure the benches report a process's cost
//! with.

use std::ops::RangeInclusive;

/// utime + stime of a process in clock ticks (threads that ended included); `pid` is a number or
/// "self".
pub fn cpu_ticks(pid: &str) -> Option<u64> {
    // utime (field 14 of the line) and stime (15).
    stat_fields_sum(pid, 11..=12)
}

/// The sum of the numeric fields `indices` of `/proc/PID/stat`, counted after the command name
/// (which is in parentheses and may hold spaces): index 0 is the state, field 3 of the line.
pub fn stat_fields_sum(pid: &str, indices: RangeInclusive<usize>) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &text[text.rfind(')')? + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    indices
        .map(|i| fields.get(i)?.parse::<u64>().ok())
        .sum::<Option<u64>>()
}
