//! Why and until when a host is closed: a cooldown window and its cause.

use std::fmt;

use tokio::time::Instant;

/// Why a host is cooling down, for logs and the local 429's `Proxy-Status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CooldownCause {
    /// The host answered this status (429, or one of `backoff_statuses`).
    Status(u16),
    /// Requests failed without an answer (connect error, reset, timeout).
    Failure,
    /// The host's RateLimit headers said no budget is left until the reset.
    ServerBudget,
    /// An operator paused the host (admin API).
    Operator,
    /// A response carried a block marker (a challenge page).
    SoftBlock,
    /// The host answered 403 `hard_block_after` times in a row.
    HardBlock,
    /// The cause was saved by an earlier run and is not known in detail.
    Restored,
    /// Outside the hours robots.txt's `Visit-time` welcomes crawlers in (never a cooldown of
    /// its own: the host's window, read again at every look).
    VisitTime,
}

impl fmt::Display for CooldownCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CooldownCause::Status(s) => write!(f, "the host answered {s}"),
            CooldownCause::Failure => f.write_str("requests to the host failed"),
            CooldownCause::ServerBudget => f.write_str("the host's RateLimit budget is spent"),
            CooldownCause::Operator => f.write_str("an operator paused it"),
            CooldownCause::SoftBlock => f.write_str("it sent a challenge page (soft block)"),
            CooldownCause::HardBlock => f.write_str("it answered 403 again and again (hard block)"),
            CooldownCause::Restored => f.write_str("it was cooling down before a restart"),
            CooldownCause::VisitTime => {
                f.write_str("its robots.txt welcomes crawlers only in its Visit-time hours (UTC)")
            }
        }
    }
}

impl CooldownCause {
    /// The cause as one word (`status:429`, `failure`, `soft_block`...), as the state file and the
    /// shared store keep it.
    pub fn word(self) -> String {
        match self {
            CooldownCause::Status(s) => format!("status:{s}"),
            CooldownCause::Failure => "failure".into(),
            CooldownCause::ServerBudget => "server_budget".into(),
            CooldownCause::Operator => "operator".into(),
            CooldownCause::SoftBlock => "soft_block".into(),
            CooldownCause::HardBlock => "hard_block".into(),
            CooldownCause::Restored => "restored".into(),
            CooldownCause::VisitTime => "visit_time".into(),
        }
    }

    /// The cause [`CooldownCause::word`] wrote; anything else was kept by a run that knew more
    /// (or nothing), and is [`CooldownCause::Restored`].
    pub fn from_word(word: Option<&str>) -> CooldownCause {
        match word {
            Some("failure") => CooldownCause::Failure,
            Some("server_budget") => CooldownCause::ServerBudget,
            Some("operator") => CooldownCause::Operator,
            Some("soft_block") => CooldownCause::SoftBlock,
            Some("hard_block") => CooldownCause::HardBlock,
            Some("visit_time") => CooldownCause::VisitTime,
            Some(s) => s
                .strip_prefix("status:")
                .and_then(|n| n.parse().ok())
                .map_or(CooldownCause::Restored, CooldownCause::Status),
            None => CooldownCause::Restored,
        }
    }
}

/// A window in which no request for the host may leave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cooldown {
    /// When it began.
    pub started: Instant,
    /// When it ends; it only ever moves later while it lasts.
    pub until: Instant,
    /// What started it (the latest extension's cause).
    pub cause: CooldownCause,
}
