//! What a block looks like: the markers of challenge pages (`markers.rs`), and finding them in a
//! response, in the first bytes of a text body or in a redirect to a block path (`scan.rs`).
//!
//! A *soft block* is such a page: the host is paused once for `block_pause_seconds`. A *hard block*
//! is `hard_block_after` 403s in a row, which the pure pacing state counts (`crate::policy`). This
//! module only describes and detects; it holds no state and depends on nothing else in courtesy.
//! What courtesy does about a block (the pause, the count, the log line, the webhook) is
//! `crate::proxy`'s `blocked.rs`.

mod markers;
mod scan;

pub use markers::{BlockMarkers, DEFAULT_BLOCK_MARKERS};
pub use scan::{is_block_redirect, scan_wanted, BlockScan};
