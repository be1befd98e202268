//! What a queued request is handed when its turn comes: a [`Grant`], everything of its permit
//! but its host (the global slot the turn holds, whether the pace held it back, how long and why
//! it waited, its part in the shared store). A host's queue holds each request's reply channel
//! ([`Reply`]) of this type, so `host.rs` never names the permit, which holds the host: the
//! files stay one way round. The request's side makes its permit of the grant and the host it
//! already holds (`Permit::new`); a grant is never dropped on its own (its permit's drop ends
//! the turn).

use std::time::Duration;

use tokio::sync::{oneshot, OwnedSemaphorePermit};

use super::verdicts::Refusal;
use super::waits::Verdict;
use crate::store::Lease;

/// Where a queued request's turn (or its refusal) is sent: held by its place in the host's
/// queue (`host::Waiter`).
pub(super) type Reply = oneshot::Sender<Result<Grant, Refusal>>;

/// Where a queued request waits for what its [`Reply`] sends.
pub(super) type Incoming = oneshot::Receiver<Result<Grant, Refusal>>;

/// Whether the pace held a request back before its turn: only then may a healthy answer raise
/// the host's rate (an answer to a request that went at once says nothing of a higher one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Paced {
    /// The turn was free when the request asked for it.
    AtOnce,
    /// The request waited for its turn: the pace limited it.
    Limited,
}

/// How long and why a request waited for its turn, filled when its turn is handed to it
/// (`permit::hand_to_head`); zero and `WaitReason::None` for a turn taken at once.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct WaitRecord {
    /// From its arrival to its turn.
    pub(super) waited: Duration,
    /// What held it longest, and the shared store's round trip for its turn (`waits.rs`).
    pub(super) verdict: Verdict,
}

impl WaitRecord {
    /// The shared store's round trip that gave this turn: how long before the turn it began and
    /// how long it lasted.
    pub(super) fn store_trip(&self) -> Option<(Duration, Duration)> {
        let trip = self.verdict.trip;
        trip.is_some().then(|| {
            (
                Duration::from_micros(u64::from(trip.began_before_us)),
                Duration::from_micros(u64::from(trip.lasted_us)),
            )
        })
    }
}

/// A turn taken for a request, without its host: what its permit holds and records besides.
#[derive(Debug)]
#[must_use = "a grant holds a turn: make it a permit, whose drop ends the turn"]
pub(super) struct Grant {
    /// The global in-flight slot, held (never read) until the permit drops (`None`: a
    /// report-only host's request holds none).
    _global: Option<OwnedSemaphorePermit>,
    /// Whether the request had to queue for its turn.
    pub(super) paced: Paced,
    /// How long and why it waited.
    pub(super) wait: WaitRecord,
    /// The turn's slot in the shared store, for a shared turn. (Boxed: a lease is large, and a
    /// local turn, the usual kind, has none; the response body carries the permit.)
    pub(super) lease: Option<Box<Lease>>,
    /// The generation of the allowance this turn was spent from (`ahead.rs`), for a shared
    /// host's turn leased ahead.
    pub(super) ahead: Option<u32>,
}

impl Grant {
    /// A turn holding `global`, `paced` or not; how long it waited is filled when it is handed
    /// to a waiting request.
    pub(super) fn new(global: Option<OwnedSemaphorePermit>, paced: Paced) -> Self {
        Grant {
            _global: global,
            paced,
            wait: WaitRecord::default(),
            lease: None,
            ahead: None,
        }
    }

    /// Makes this a shared turn that holds `lease` in the store.
    pub(super) fn with_lease(mut self, lease: Lease) -> Self {
        self.lease = Some(Box::new(lease));
        self
    }

    /// Makes this a shared turn spent from the allowance of generation `generation`.
    pub(super) fn with_ahead(mut self, generation: u32) -> Self {
        self.ahead = Some(generation);
        self
    }
}
