//! Blocks: what a block looks like in a response, and what courtesy does when it sees one.
//!
//! A *soft block* is a challenge or "unusual traffic" page (a marker in the first bytes of a text
//! body, or a redirect to a block path such as `/sorry/`): the host is paused once for
//! `block_pause_seconds`. A *hard block* is `hard_block_after` 403s in a row, decided by the pure
//! pacing state (`policy`). Either way the pause is counted in `/metrics`, logged at `warn` and sent
//! to the webhook, here and nowhere else. The pause itself is the pacing state's
//! (`Permit::soft_block`, `Pacing::observe`).

mod scan;

use std::sync::Arc;

use tracing::warn;

pub use scan::BlockScan;
pub(crate) use scan::{is_block_redirect, scan_wanted};

use crate::alerts::Alerts;
use crate::config::HostPolicy;
use crate::limiter::Permit;
use crate::metrics::Metrics;
use crate::policy::Reaction;

/// What courtesy does about a block: count it, log it, alert about it.
#[derive(Debug)]
pub struct Blocks {
    metrics: Arc<Metrics>,
    alerts: Arc<Alerts>,
}

impl Blocks {
    /// Reactions that count in `metrics` and post to `alerts`.
    pub fn new(metrics: Arc<Metrics>, alerts: Arc<Alerts>) -> Self {
        Blocks { metrics, alerts }
    }

    /// A soft block was seen in the response of `permit` (`what` says how): pauses the host, once
    /// per pause.
    pub fn soft(&self, permit: &Permit, what: &str) {
        if let Some(pause) = permit.soft_block() {
            self.metrics.block(permit.host_key(), "soft_block");
            warn!(
                host = %permit.host_key(),
                pause_s = pause.as_secs_f64(),
                "soft block: {what}; pausing the host"
            );
            self.alerts
                .host_blocked(permit.host_key(), "soft_block", what, pause);
        }
    }

    /// After an answer whose `reaction` may be a hard block (the pacing state has paused the host).
    pub(crate) fn after_answer(
        &self,
        permit: &Permit,
        policy: &HostPolicy,
        reaction: &Reaction,
        status: u16,
    ) {
        if !reaction.hard_block {
            return;
        }
        warn!(
            status,
            pause_s = policy.block_pause.as_secs_f64(),
            rate = reaction.rate_after,
            "hard block: {} 403s in a row; pausing the host",
            policy.hard_block_after
        );
        self.metrics.block(permit.host_key(), "hard_block");
        self.alerts.host_blocked(
            permit.host_key(),
            "hard_block",
            &format!("{} consecutive 403 answers", policy.hard_block_after),
            policy.block_pause,
        );
    }
}

/// A body's scan for block markers, with what to do when one is found.
#[derive(Debug)]
pub struct BodyScan {
    scan: BlockScan,
    blocks: Arc<Blocks>,
}

impl BodyScan {
    /// A scan of a response body for the markers of `policy`, reporting to `blocks`; `None` when the
    /// policy scans nothing or the response is not plain text (see [`scan_wanted`]).
    pub(crate) fn of(
        headers: &http::HeaderMap,
        policy: &HostPolicy,
        blocks: &Arc<Blocks>,
    ) -> Option<Box<BodyScan>> {
        if !scan_wanted(headers, policy) {
            return None;
        }
        Some(Box::new(BodyScan {
            scan: BlockScan::new(policy.block_markers.clone(), policy.block_scan_bytes),
            blocks: blocks.clone(),
        }))
    }

    /// Looks at the next chunk of the body of `permit`'s response. Returns whether the scan is over
    /// (a marker was found and acted on, or the scan limit is reached).
    pub fn feed(&mut self, chunk: &[u8], permit: Option<&Permit>) -> bool {
        if let Some(marker) = self.scan.feed(chunk) {
            if let Some(permit) = permit {
                self.blocks
                    .soft(permit, &format!("block marker {marker:?}"));
            }
            return true;
        }
        self.scan.done()
    }
}
