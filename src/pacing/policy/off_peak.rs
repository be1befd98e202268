//! An off-peak window read from monotonic instants: the wall-clock time of an instant is found
//! from one anchor, so tests under a paused clock can place `now` anywhere in the day.

use tokio::time::Instant;

use crate::config::HostPolicy;

/// An off-peak window with what it needs to be read from monotonic instants.
#[derive(Debug, Clone)]
pub(super) struct OffPeakClock {
    pub(super) window: crate::config::OffPeak,
    /// The policy's configured rate (what the off-peak rate scales against).
    pub(super) configured_rate: f64,
    /// An instant and the wall-clock time it corresponds to.
    pub(super) anchor: (Instant, std::time::SystemTime),
}

impl OffPeakClock {
    pub(super) fn new(
        policy: &HostPolicy,
        anchor: (Instant, std::time::SystemTime),
    ) -> Option<Self> {
        policy.pacing.off_peak.as_ref().map(|window| OffPeakClock {
            window: window.clone(),
            configured_rate: policy.pacing.rate,
            anchor,
        })
    }

    pub(super) fn wall(&self, now: Instant) -> std::time::SystemTime {
        let (anchor, wall) = self.anchor;
        if now >= anchor {
            wall + now.duration_since(anchor)
        } else {
            wall - anchor.duration_since(now)
        }
    }
}
