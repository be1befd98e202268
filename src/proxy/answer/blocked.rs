//! What courtesy does about a block (`crate::pacing::blocks` says what one looks like): the host's pause is
//! started through its permit, then the block is counted in `/metrics`, logged at `warn` and posted
//! to the webhook. Soft blocks (a challenge page, a redirect to a block path) and hard blocks
//! (`hard_block_after` 403s in a row) are both handled here and nowhere else. A blocked host's
//! open WebSockets and blind tunnels are closed with its pause.

use std::sync::Arc;

use http::HeaderMap;
use tracing::warn;

use crate::budget::limiter::Permit;
use crate::config::HostPolicy;
use crate::front::sockets::Sockets;
use crate::observe::alerts::Alerts;
use crate::observe::metrics::Metrics;
use crate::pacing::blocks::{scan_wanted, BodyScan};
use crate::pacing::policy::Reaction;
use crate::proxy::answer::body::MarkerScan;

/// The reactions to a block: count it, log it, alert about it.
#[derive(Debug)]
pub(crate) struct Blocks {
    metrics: Arc<Metrics>,
    alerts: Arc<Alerts>,
    /// The open WebSockets and tunnels: a blocked host's are closed with its pause.
    sockets: Arc<Sockets>,
}

impl Blocks {
    /// Reactions that count in `metrics`, post to `alerts` and close the host's `sockets`.
    pub(crate) fn new(metrics: Arc<Metrics>, alerts: Arc<Alerts>, sockets: Arc<Sockets>) -> Self {
        Blocks {
            metrics,
            alerts,
            sockets,
        }
    }

    /// Closes the sockets and tunnels open to a host that has just been paused for a block.
    fn close_sockets(&self, host: &str) {
        let closed = self.sockets.close_host(host);
        if closed > 0 {
            warn!(
                host,
                closed, "closed the host's open WebSockets and tunnels: it is paused"
            );
        }
    }

    /// A soft block was seen in the response of `permit` (`what` says how; `status`, the
    /// answer's): pauses the host, once per pause.
    pub(crate) fn soft(&self, permit: &Permit, what: &str, status: u16) {
        if let Some(pause) = permit.soft_block(what, status) {
            self.metrics.block(permit.host_key(), "soft_block");
            warn!(
                host = %permit.host_key(),
                pause_s = pause.as_secs_f64(),
                "soft block: {what}; pausing the host"
            );
            self.alerts
                .host_blocked(permit.host_key(), "soft_block", what, pause);
            self.close_sockets(permit.host_key());
        }
    }

    /// After an answer whose `reaction` may be a hard block (the pacing state has then paused the
    /// host already).
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
        let pause = reaction.cooldown.unwrap_or(policy.blocks.pause);
        warn!(
            status,
            pause_s = pause.as_secs_f64(),
            rate = reaction.rate_after,
            "hard block: {} 403s in a row; pausing the host",
            policy.blocks.hard_block_after
        );
        self.metrics.block(permit.host_key(), "hard_block");
        self.alerts.host_blocked(
            permit.host_key(),
            "hard_block",
            &format!("{} consecutive 403 answers", policy.blocks.hard_block_after),
            pause,
        );
        self.close_sockets(permit.host_key());
    }

    /// A scan of a response body (of an answer of `status`) for `policy`'s markers that reports a
    /// find as a soft block; `None` when the policy scans nothing or the response is not text in
    /// a coding courtesy reads.
    pub(crate) fn scan_for(
        self: &Arc<Self>,
        status: u16,
        headers: &HeaderMap,
        policy: &HostPolicy,
    ) -> Option<Box<MarkerScan>> {
        if policy.blocks.scan_bytes == 0 || policy.blocks.markers.is_empty() {
            return None;
        }
        let encoding = scan_wanted(headers)?;
        let blocks = self.clone();
        Some(Box::new(MarkerScan::new(
            BodyScan::new(
                policy.blocks.markers.clone(),
                policy.blocks.scan_bytes,
                encoding,
                status,
            ),
            Box::new(move |permit: &Permit, marker: &str| {
                blocks.soft(permit, &format!("block marker {marker:?}"), status)
            }),
        )))
    }
}
