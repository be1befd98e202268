//! Sending a forwarded request under its turn: the attempts it takes (`attempts.rs`), each signed
//! as it leaves (`sign.rs`), the one paced exchange with the origin (`exchange.rs`), the answer
//! made fit to pass on (`sanitize.rs`), and the look at a 429/503 before courtesy sends again
//! (`before_resend.rs`).

pub(crate) mod attempts;
pub(crate) mod before_resend;
pub(crate) mod exchange;
pub(crate) mod sanitize;
pub(crate) mod sign;
