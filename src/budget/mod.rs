//! Whose budget a request spends and when: the budget keys, the jobs, and the limiter where every request waits for its turn.

pub mod jobs;
pub mod keys;
pub mod limiter;
