//! What the limiter answers, as plain values: a request's [`Refusal`], and a report-only host's
//! [`ShadowVerdict`] (why it would have been refused, [`ShadowReason`]) and its
//! [`ShadowCounts`]. It imports nothing from the limiter, so that every file of it can name them.

use std::time::Duration;

use crate::pacing::policy::{CooldownCause, WaitReason};

/// Why a request was not given a turn. Each becomes a locally made response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The host's queue already holds `max_queue` requests.
    QueueFull {
        /// The queue's cap.
        max_queue: usize,
        /// A fair guess of when trying again could work.
        retry_after: Duration,
    },
    /// The request waited `max_wait_seconds` without getting a turn.
    WaitedTooLong {
        /// How long it waited.
        waited: Duration,
        /// What held it longest.
        reason: WaitReason,
    },
    /// courtesy is shutting down.
    ShuttingDown,
    /// The host is cooling down (`on_cooldown = "reject"`, or a held request ran out of time).
    CoolingDown {
        /// Time left in the window.
        remaining: Duration,
        /// What started it.
        cause: CooldownCause,
    },
}

impl Refusal {
    /// A short name for the reason, for counters and metric labels.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::QueueFull { .. } => "queue_full",
            Refusal::WaitedTooLong { .. } => "waited_too_long",
            Refusal::ShuttingDown => "shutting_down",
            Refusal::CoolingDown {
                cause: CooldownCause::Operator,
                ..
            } => "paused",
            Refusal::CoolingDown { .. } => "cooling_down",
        }
    }

    /// What held the refused request back (or would have: a cooldown refused at once).
    pub fn wait_reason(&self) -> WaitReason {
        match self {
            Refusal::QueueFull { .. } => WaitReason::Queue,
            Refusal::WaitedTooLong { reason, .. } => *reason,
            Refusal::ShuttingDown => WaitReason::None,
            Refusal::CoolingDown { cause, .. } => WaitReason::of_cooldown(*cause),
        }
    }
}

/// Why a report-only host's request would have been refused, had courtesy enforced: one closed
/// set, carried as itself from the judgement to the counts, the metrics, the admin JSON and the
/// log, and spelled only by [`ShadowReason::as_str`] (its words are public: metric label values and
/// JSON keys).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ShadowReason {
    /// A cooldown the request would not be held through (`on_cooldown`, `max_hold_seconds`).
    CoolingDown = 0,
    /// An operator's pause the request would not be held through.
    Paused,
    /// The host's queue would have been full (`max_queue`).
    QueueFull,
    /// Its turn would have come after `max_wait_seconds`.
    WaitedTooLong,
    /// robots.txt disallows it.
    Robots,
    /// A resource kind the host skips (`skip_resources`).
    SkipResources,
    /// The job's quota was spent.
    Quota,
}

impl ShadowReason {
    /// How many reasons there are (for tables indexed by reason).
    pub const COUNT: usize = 7;

    /// Every reason, in the order of their numbers (the order of [`ShadowCounts::would_refuse`]).
    pub const ALL: [ShadowReason; ShadowReason::COUNT] = [
        ShadowReason::CoolingDown,
        ShadowReason::Paused,
        ShadowReason::QueueFull,
        ShadowReason::WaitedTooLong,
        ShadowReason::Robots,
        ShadowReason::SkipResources,
        ShadowReason::Quota,
    ];

    /// The reason as one word: the `reason` label of `courtesy_shadow_would_refuse_total`, the
    /// key in `/hosts`' `shadow.would_refuse`, the `would_refuse` of the log line.
    pub const fn as_str(self) -> &'static str {
        match self {
            ShadowReason::CoolingDown => "cooling_down",
            ShadowReason::Paused => "paused",
            ShadowReason::QueueFull => "queue_full",
            ShadowReason::WaitedTooLong => "waited_too_long",
            ShadowReason::Robots => "robots",
            ShadowReason::SkipResources => "skip_resources",
            ShadowReason::Quota => "quota",
        }
    }

    /// The reason's place in [`ShadowReason::ALL`].
    pub const fn index(self) -> usize {
        self as usize
    }
}

/// What courtesy would have done with one request, had it enforced.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ShadowVerdict {
    /// How long it would have waited for its turn (zero: it would have left at once). A wait for
    /// a concurrency slot counts as a wait, of unknown length (not added here).
    pub would_wait: Duration,
    /// Whether it would have waited at all.
    pub waits: bool,
    /// Why it would have been refused.
    pub would_refuse: Option<ShadowReason>,
    /// Whether it arrived inside a window the server announced (Retry-After, RateLimit reset).
    pub inside_window: bool,
    /// How long it would have waited with its job's fair share of the host's turns (the jobs
    /// seen lately sharing them by weight), for the job's own counts.
    pub job_would_wait: Duration,
}

/// A report-only host's counts since courtesy met it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ShadowCounts {
    /// Requests that would have waited for their turn.
    pub would_wait: u64,
    /// How long they would have waited, in all.
    pub would_wait_seconds: f64,
    /// Requests that would have been refused, by reason (in [`ShadowReason::ALL`]'s order).
    pub would_refuse: [u64; ShadowReason::COUNT],
    /// Requests that arrived inside a window the server announced.
    pub inside_window: u64,
}

impl ShadowCounts {
    pub(super) fn count(&mut self, verdict: &ShadowVerdict) {
        if verdict.waits {
            self.would_wait += 1;
            self.would_wait_seconds += verdict.would_wait.as_secs_f64();
        }
        if let Some(reason) = verdict.would_refuse {
            self.would_refuse[reason.index()] += 1;
        }
        if verdict.inside_window {
            self.inside_window += 1;
        }
    }
}
