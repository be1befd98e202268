//! What a host's answers teach and how fast it may be asked: pure pacing state, feedback from answers, block pages, robots.txt rules.

pub(crate) mod blocks;
pub(crate) mod feedback;
pub(crate) mod policy;
pub(crate) mod preferences;
pub(crate) mod ratelimit;
pub(crate) mod robots;
pub(crate) mod robots_pacing;
