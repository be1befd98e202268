//! What goes into the pacing state and what comes out of it: an upstream [`Answer`], the
//! [`Observation`] of it (with what the request's turn knows), and the [`Reaction`] it caused.

use std::time::Duration;

use tokio::time::Instant;

use crate::pacing::feedback::{Feedback, ServerBudget};

/// What an upstream said (or that it said nothing): the part of an observation the proxy knows.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// The class of the answer.
    pub feedback: Feedback,
    /// The status, when there was a response.
    pub status: Option<u16>,
    /// Time from sending to response headers (or to the failure).
    pub latency: Duration,
    /// `Retry-After`, already parsed.
    pub retry_after: Option<Duration>,
    /// RateLimit headers, already parsed.
    pub server: Option<ServerBudget>,
}

/// One upstream answer (or failure), as pacing needs it: the answer, and what the request's turn
/// knows about it.
#[derive(Debug, Clone, PartialEq)]
pub struct Observation {
    /// What the upstream said.
    pub answer: Answer,
    /// When the request left courtesy.
    pub sent_at: Instant,
    /// Whether the request had to wait for its turn (the budget was the bottleneck).
    pub limited: bool,
    /// Other requests to the host still in flight (not yet counted by the server's numbers).
    pub others_in_flight: u32,
}

/// What an observation changed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reaction {
    /// Our own rate before.
    pub rate_before: f64,
    /// Our own rate after.
    pub rate_after: f64,
    /// A cooldown that this observation started or extended: its new length from now.
    pub cooldown: Option<Duration>,
    /// Set when this observation started a hard-block pause.
    pub hard_block: bool,
}
