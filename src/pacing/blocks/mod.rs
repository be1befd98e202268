//! What a block looks like: the markers of challenge pages (`crate::config::block_markers`, since
//! the operator may replace them), and finding a block in
//! a response (`scan.rs`): a bot-management vendor's challenge header, markers in the first bytes
//! of a text body (decoded on the side when compressed, `decode.rs`) on a challenge status or a
//! small page, a redirect to a block page where a vendor blocks (`redirect.rs`).
//!
//! A *soft block* is such a page; a *hard block* is `hard_block_after` 403s in a row, which the
//! pure pacing state counts (`crate::pacing::policy`, which also makes repeated block pauses grow). This
//! module only describes and detects; it holds no state and depends on the config alone.
//! What courtesy does about a block (the pause, the count, the log line, the webhook) is
//! `crate::proxy`'s `blocked.rs`.

mod decode;
mod redirect;
mod scan;

pub(crate) use scan::header_block;

pub(crate) use redirect::block_redirect;

pub(crate) use scan::scan_wanted;

pub(crate) use scan::BodyScan;

pub(crate) use scan::Verdict;

#[cfg(test)]
mod corpus;
