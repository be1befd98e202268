//! The answer a client gets, whoever made it: the body that streams an origin's response and holds
//! its permit (`body.rs`), courtesy's own responses (`response.rs`) and the typed failure each
//! error becomes (`failure.rs`), what a block does (`blocked.rs`), the `Server-Timing` and
//! `Courtesy-Tries` courtesy adds (`timing.rs`), and a request body that never went upstream
//! (`unread.rs`). It decides nothing about whether a request goes: the other phases do.

pub(crate) mod blocked;
pub(crate) mod body;
pub(crate) mod failure;
pub(crate) mod response;
pub(crate) mod timing;
pub(crate) mod unread;
