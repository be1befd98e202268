//! Why a request waited: the closed set of reasons ([`WaitReason`]) that courtesy reports in the
//! `Server-Timing` header, in traces and on `/hosts`. The host's own pacing state answers the
//! reasons it owns (rate, Crawl-delay, byte budget, cooldowns, block pauses, an operator's pause,
//! robots.txt's Visit-time:
//! [`super::Pacing::next_turn`]); the limiter adds the rest (concurrency, the global caps, the
//! shared store, another job's share, the queue). Which one is reported when several held one
//! request is the limiter's rule (`crate::budget::limiter`, `waits.rs`): the one that held it longest.

use super::CooldownCause;

/// What held a request back from leaving. One byte; no allocation to carry or to name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum WaitReason {
    /// It did not wait.
    #[default]
    None = 0,
    /// The host's token bucket: its rate (our own, an operator's, the server's RateLimit policy).
    Rate,
    /// The host's concurrency: every slot was taken by requests in flight.
    Concurrency,
    /// A cooldown: a 429/503 with or without Retry-After, failures, the server's spent budget.
    Cooldown,
    /// A block pause: a challenge page (soft block) or a 403 wall (hard block).
    Block,
    /// An operator's pause (the admin API).
    Paused,
    /// The rate cap of robots.txt's Crawl-delay.
    CrawlDelay,
    /// A ceiling on all hosts together: `global_rate`, `max_in_flight`, `global_bytes_per_second`.
    GlobalCap,
    /// The host's byte budget (`max_bytes_per_second`): earlier responses left a debt.
    ByteBudget,
    /// The shared store: the round trip for a turn, or other instances' turns.
    SharedStore,
    /// Another job's turn (fair share between jobs).
    JobShare,
    /// Earlier requests of the same job for the same host (first in, first out).
    Queue,
    /// Outside robots.txt's Visit-time hours.
    VisitTime,
}

impl WaitReason {
    /// How many reasons there are (for tables indexed by reason).
    pub const COUNT: usize = 13;

    /// Every reason, in the order of their numbers.
    pub const ALL: [WaitReason; WaitReason::COUNT] = [
        WaitReason::None,
        WaitReason::Rate,
        WaitReason::Concurrency,
        WaitReason::Cooldown,
        WaitReason::Block,
        WaitReason::Paused,
        WaitReason::CrawlDelay,
        WaitReason::GlobalCap,
        WaitReason::ByteBudget,
        WaitReason::SharedStore,
        WaitReason::JobShare,
        WaitReason::Queue,
        WaitReason::VisitTime,
    ];

    /// The reason as one word: the `desc` of `Server-Timing`, a span attribute, a metric label.
    pub const fn word(self) -> &'static str {
        match self {
            WaitReason::None => "none",
            WaitReason::Rate => "rate",
            WaitReason::Concurrency => "concurrency",
            WaitReason::Cooldown => "cooldown",
            WaitReason::Block => "block",
            WaitReason::Paused => "paused",
            WaitReason::CrawlDelay => "crawl_delay",
            WaitReason::GlobalCap => "global_cap",
            WaitReason::ByteBudget => "byte_budget",
            WaitReason::SharedStore => "shared_store",
            WaitReason::JobShare => "job_share",
            WaitReason::Queue => "queue",
            WaitReason::VisitTime => "visit_time",
        }
    }

    /// The reason's place in [`WaitReason::ALL`].
    pub const fn index(self) -> usize {
        self as usize
    }

    /// What a window in which the host is closed makes its requests wait for.
    pub const fn of_cooldown(cause: CooldownCause) -> WaitReason {
        match cause {
            CooldownCause::Operator => WaitReason::Paused,
            CooldownCause::SoftBlock | CooldownCause::HardBlock => WaitReason::Block,
            CooldownCause::VisitTime => WaitReason::VisitTime,
            CooldownCause::Status(_)
            | CooldownCause::Failure
            | CooldownCause::ServerBudget
            | CooldownCause::Restored => WaitReason::Cooldown,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_has_its_place_and_one_word() {
        for (i, reason) in WaitReason::ALL.iter().enumerate() {
            assert_eq!(reason.index(), i);
        }
        let mut words: Vec<&str> = WaitReason::ALL.iter().map(|r| r.word()).collect();
        words.sort_unstable();
        words.dedup();
        assert_eq!(words.len(), WaitReason::COUNT, "one word each");
        assert!(words
            .iter()
            .all(|w| w.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')));
    }

    #[test]
    fn a_closed_host_waits_for_what_closed_it() {
        assert_eq!(
            WaitReason::of_cooldown(CooldownCause::Status(429)),
            WaitReason::Cooldown
        );
        assert_eq!(
            WaitReason::of_cooldown(CooldownCause::SoftBlock),
            WaitReason::Block
        );
        assert_eq!(
            WaitReason::of_cooldown(CooldownCause::Operator),
            WaitReason::Paused
        );
    }
}
