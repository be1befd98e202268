//! A host's present state in words, for `/hosts/<host>` (the `explain` field) and
//! `courtesy status <host>`: what its next request waits for and until when, as an operator
//! would say it ("3 requests queued; the next waits for a free concurrency slot (1 of 1 in
//! flight)"). It reads a [`HostSnapshot`] only; it decides nothing.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::budget::limiter::{HostSnapshot, WaitReason};
use crate::pacing::policy::CooldownCause;

/// The sentence(s) for `s`, with wall-clock times from `now_wall` (UTC).
pub(crate) fn explain(s: &HostSnapshot, now_wall: SystemTime) -> String {
    if !s.policy.scope.enforce {
        return "report-only (enforce = false): every request leaves at once; courtesy counts what \
                it would have done"
            .to_string();
    }
    let mut out = String::new();
    if let (Some(block), Some(left)) = (&s.block, s.block_remaining) {
        let until = clock(now_wall + left);
        let left = seconds(left);
        match block.cause {
            CooldownCause::Operator => {
                let _ = write!(out, "paused by an operator until {until} ({left} left)");
            }
            CooldownCause::SoftBlock | CooldownCause::HardBlock => {
                let _ = write!(
                    out,
                    "paused for a block until {until} ({left} left): {}",
                    block.cause
                );
            }
            cause => {
                let window = seconds(block.until.saturating_duration_since(block.started));
                let _ = write!(
                    out,
                    "cooling down until {until} ({left} left) because {cause}; a window of {window}"
                );
            }
        }
        out.push_str("; ");
    }
    let concurrency = s.concurrency_cap;
    if s.queued > 0 {
        let _ = write!(out, "{} queued", count(s.queued, "request"));
        if s.waiting_by_job.len() > 1 {
            let jobs: Vec<String> = s
                .waiting_by_job
                .iter()
                .map(|(job, n)| format!("{job}: {n}"))
                .collect();
            let _ = write!(out, " ({})", jobs.join(", "));
        }
        let reason = s.front_waits.unwrap_or(WaitReason::None);
        let _ = write!(
            out,
            "; the next waits for {}",
            waits_for(s, reason, now_wall)
        );
        return out;
    }
    if s.in_flight > 0 {
        let _ = write!(out, "{} of {concurrency} in flight; ", s.in_flight);
    } else if s.block.is_none() {
        out.push_str("idle; ");
    }
    if s.in_flight >= concurrency {
        let _ = write!(
            out,
            "a new request would wait for {}",
            waits_for(s, WaitReason::Concurrency, now_wall)
        );
    } else if let Some((_, reason)) = s.next_turn {
        let _ = write!(
            out,
            "a new request would wait for {}",
            waits_for(s, reason, now_wall)
        );
    } else {
        out.push_str("a new request would leave at once");
    }
    out
}

/// What the next request waits for, in words, with its time where the pacing knows it.
fn waits_for(s: &HostSnapshot, reason: WaitReason, now_wall: SystemTime) -> String {
    let at = s
        .next_turn
        .filter(|(_, why)| *why == reason)
        .map(|(left, _)| clock(now_wall + left));
    let at_text = at.map(|t| format!(" at {t}")).unwrap_or_default();
    match reason {
        WaitReason::None => "its turn, now".to_string(),
        WaitReason::Rate => format!("its next token{at_text} (rate {})", per_second(s.rate)),
        WaitReason::CrawlDelay => format!(
            "its next token{at_text} (robots.txt Crawl-delay: rate {})",
            per_second(s.rate)
        ),
        WaitReason::Concurrency => format!(
            "a free concurrency slot ({} of {} in flight)",
            s.in_flight, s.concurrency_cap
        ),
        WaitReason::Cooldown | WaitReason::Block | WaitReason::Paused => {
            format!("the host to open again{at_text}")
        }
        WaitReason::VisitTime => format!("robots.txt's Visit-time hours to begin{at_text}"),
        WaitReason::ByteBudget => match s.byte_debt {
            Some((bytes, left)) => format!(
                "its byte budget: a debt of {bytes} bytes, paid back at {}",
                clock(now_wall + left)
            ),
            None => format!("its byte budget{at_text}"),
        },
        WaitReason::GlobalCap => "a ceiling on all hosts together (max_in_flight, global_rate or \
             global_bytes_per_second)"
            .to_string(),
        WaitReason::SharedStore => "a turn from the shared store".to_string(),
        WaitReason::JobShare => "another job's turn".to_string(),
        WaitReason::Queue => "earlier requests of its job".to_string(),
    }
}

/// `n thing` or `n things`.
fn count(n: usize, thing: &str) -> String {
    if n == 1 {
        format!("1 {thing}")
    } else {
        format!("{n} {thing}s")
    }
}

/// A rate per second, with the digits that matter.
fn per_second(rate: f64) -> String {
    if rate >= 1.0 {
        format!("{rate:.1}/s")
    } else {
        format!("{rate:.3}/s")
    }
}

/// A duration in seconds, to the tenth.
fn seconds(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

/// A wall-clock instant as `HH:MM:SS.mmm UTC` (the date is left out: these are minutes or
/// hours ahead).
pub(crate) fn clock(at: SystemTime) -> String {
    let ms = at
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let of_day = ms % 86_400_000;
    format!(
        "{:02}:{:02}:{:02}.{:03} UTC",
        of_day / 3_600_000,
        of_day / 60_000 % 60,
        of_day / 1000 % 60,
        of_day % 1000
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_times_are_utc_with_milliseconds() {
        let at = UNIX_EPOCH + Duration::from_millis(14 * 3_600_000 + 3 * 60_000 + 22_120);
        assert_eq!(clock(at), "14:03:22.120 UTC");
        assert_eq!(
            clock(UNIX_EPOCH + Duration::from_secs(86_400)),
            "00:00:00.000 UTC"
        );
    }

    #[test]
    fn rates_keep_their_digits() {
        assert_eq!(per_second(1.0), "1.0/s");
        assert_eq!(per_second(0.25), "0.250/s");
        assert_eq!(count(1, "request"), "1 request");
        assert_eq!(count(3, "request"), "3 requests");
    }
}
