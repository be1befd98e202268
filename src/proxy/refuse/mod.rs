//! The local answers before the host's turn, so that a refused request spends none of the budget:
//! requests that would come back to courtesy (`loops.rs`), `skip_resources` (`skip.rs`),
//! robots.txt (`robots.rs`) and the site's stated preferences (`preferences.rs`). For a
//! report-only host a refusal is only noted, and the request goes on.

pub(crate) mod loops;
pub(crate) mod preferences;
pub(crate) mod robots;
pub(crate) mod skip;
