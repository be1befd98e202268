//! Whose budget a request spends and when: the budget keys, the jobs, and the limiter where every request waits for its turn.

pub(crate) mod jobs;
pub(crate) mod keys;
pub(crate) mod limiter;
