//! What held requests back, across all hosts: `courtesy_turns_total{reason}` (turns given or
//! refused, by what held the request longest; `none`: it did not wait) and
//! `courtesy_turn_wait_seconds_total{reason}` (the time they waited, by the same reason). The
//! `reason` label is the closed set of `WaitReason` words, so the series are bounded and made at
//! start: counting a turn is two atomic adds on counters looked up once.

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use crate::budget::limiter::WaitReason;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

/// The counters of each reason, in `WaitReason::ALL`'s order.
pub(super) struct WaitCounters {
    turns: [Counter; WaitReason::COUNT],
    seconds: [Counter<f64, AtomicU64>; WaitReason::COUNT],
}

impl WaitCounters {
    /// Registers both families, with a series for every reason.
    pub(super) fn register(registry: &mut Registry) -> Self {
        let turns = Family::<ReasonLabel, Counter>::default();
        let seconds = Family::<ReasonLabel, Counter<f64, AtomicU64>>::default();
        registry.register(
            "turns",
            "Turns given or refused, by what held the request longest: none (it did not wait), rate, concurrency, cooldown, block, paused, crawl_delay, global_cap, byte_budget, shared_store, job_share, queue",
            turns.clone(),
        );
        registry.register(
            "turn_wait_seconds",
            "Time requests waited for their turns, by what held them longest (see courtesy_turns_total)",
            seconds.clone(),
        );
        let label = |r: WaitReason| ReasonLabel { reason: r.word() };
        WaitCounters {
            turns: WaitReason::ALL.map(|r| turns.get_or_create(&label(r)).clone()),
            seconds: WaitReason::ALL.map(|r| seconds.get_or_create(&label(r)).clone()),
        }
    }

    /// One turn that waited `wait`, held longest by `reason`.
    pub(super) fn count(&self, reason: WaitReason, wait: Duration) {
        self.turns[reason.index()].inc();
        if !wait.is_zero() {
            self.seconds[reason.index()].inc_by(wait.as_secs_f64());
        }
    }
}
