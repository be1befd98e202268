//! An allowance: a shared host's turns leased ahead from the store and spent here, with no round
//! trip per request, for hosts whose budget has room to spare (pacing effectively off, or far
//! above the demand). The store grants one only while nobody waits for the host and only when it
//! leaves as much again to the others (`shared::scripts::RESERVE`, "Allowances"); the held turns
//! are out of the store's bucket, so the aggregate bound holds however late they are spent.
//!
//! This file keeps this instance's side of it under the host's lock: what is left to spend, the
//! slots in use, the running count of turns spent, and when to come back. It sends nothing; the
//! dispatcher (`shared.rs`) settles the allowance with the host's next reservation, or on its own
//! when the host goes quiet, the allowance's span ends, or another instance waits (a `yield`
//! hint).

use std::time::Duration;

use tokio::time::Instant;

use crate::store::{AheadAsk, Limits, AHEAD_MIN};

/// How long an allowance's turns may be spent before the instance comes back to the store: the
/// longest another instance's cooldown can go unseen here if its hint is lost.
pub(super) const SPAN: Duration = Duration::from_millis(250);

/// The fewest slots an allowance asks for.
const MIN_SLOTS: u32 = 4;

/// The most turns an allowance asks for.
const MAX_TOKENS: u32 = 4096;

/// The turns the first allowance of a host asks for.
const FIRST_TOKENS: u32 = 64;

/// This instance's allowance of one host.
#[derive(Debug, Default)]
pub(crate) struct Ahead {
    /// Turns left to spend.
    tokens: u32,
    /// Concurrency slots the store holds for this instance's allowance turns.
    slots: u32,
    /// Requests sent on an allowance and still in flight.
    in_use: u32,
    /// The most in flight at once since the last grant (what the next one asks slots for).
    peak: u32,
    /// Turns spent from this host's allowances, ever (the store charges the difference).
    spent: u64,
    /// `spent` when the current allowance was granted.
    spent_at_grant: u64,
    /// The turns of the last grant.
    granted: u32,
    /// Counts the grants and settlements: a refund finds its own allowance by it.
    generation: u32,
    /// When the current allowance was granted (its span ends [`SPAN`] later).
    granted_at: Option<Instant>,
    /// When the store last heard of this allowance (it runs out a lease after that).
    settled_at: Option<Instant>,
    /// The store may hold something of this instance's for the host (turns, slots, or spent
    /// turns not yet charged).
    in_store: bool,
    /// Another instance waits: give everything back at once.
    yielding: bool,
}

/// What the dispatcher of a host with an empty queue does about its allowance.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Keep {
    /// Nothing is held: the dispatcher may end.
    Nothing,
    /// Give it back (or refresh what is kept) now.
    Settle,
    /// Wait until this instant, or a wake-up (a request, a turn that ended, a hint).
    Until(Instant),
}

impl Ahead {
    /// Spends one turn if one is left, a slot is free, and the span has not ended: the turn's
    /// generation, which the permit carries back to [`Ahead::end`].
    pub(super) fn try_spend(&mut self, now: Instant) -> Option<u32> {
        let live = self
            .granted_at
            .is_some_and(|at| now.saturating_duration_since(at) < SPAN);
        if self.tokens == 0 || self.in_use >= self.slots || self.yielding || !live {
            return None;
        }
        self.tokens -= 1;
        self.in_use += 1;
        self.peak = self.peak.max(self.in_use);
        self.spent += 1;
        Some(self.generation)
    }

    /// A turn spent from an allowance ended; one whose request never left gives its turn back
    /// (to the same allowance if it is still the current one, else to the next settlement's
    /// count). `true` when the dispatcher should look (the last slot in use came free with
    /// nothing left to spend).
    pub(super) fn end(&mut self, generation: u32, sent: bool) -> bool {
        self.in_use = self.in_use.saturating_sub(1);
        if !sent {
            self.spent = self.spent.saturating_sub(1);
            if generation == self.generation {
                self.tokens += 1;
            }
        }
        self.in_use == 0 && self.tokens == 0 && self.in_store
    }

    /// Another instance waits for the host: give the allowance back at once.
    pub(super) fn yield_now(&mut self) {
        if self.in_store {
            self.yielding = true;
        }
    }

    /// What this instance says of its allowance with the host's next reservation: everything
    /// left is given back with it (a grant in the answer replaces it), the slots in use are kept.
    /// `want`: ask for a new one (the host looks roomy). `None` when there is nothing to say.
    pub(super) fn settle(&mut self, want: Option<(u32, u32)>, seq: u64) -> Option<AheadAsk> {
        if !self.in_store && want.is_none() {
            return None;
        }
        let (want_tokens, want_slots) = want.unwrap_or((0, 0));
        self.tokens = 0;
        self.generation = self.generation.wrapping_add(1);
        self.yielding = false;
        Some(AheadAsk {
            seq,
            spent: self.spent,
            want_tokens,
            want_slots,
            in_use: self.in_use,
        })
    }

    /// What to ask for: enough turns for a span at the recent pace (twice as many as the last
    /// allowance when it ran out), and slots for twice the requests in flight and waiting;
    /// `None` when the host does not look roomy enough to lease ahead.
    pub(super) fn wanted(&self, limits: &Limits, demand: u32) -> Option<(u32, u32)> {
        // A byte budget decides each turn from the bytes before it: never leased ahead.
        if limits.rejoin
            || limits.bytes.is_some()
            || limits.burst < 2 * AHEAD_MIN
            || limits.concurrency < 2 * MIN_SLOTS
        {
            return None;
        }
        let used =
            u32::try_from(self.spent - self.spent_at_grant.min(self.spent)).unwrap_or(u32::MAX);
        let tokens = if self.granted == 0 {
            FIRST_TOKENS
        } else if used >= self.granted {
            self.granted.saturating_mul(2)
        } else {
            used.saturating_mul(2)
        };
        let slots = self.peak.max(demand).saturating_mul(2).max(MIN_SLOTS);
        let slots = slots.min(limits.concurrency / 2);
        Some((tokens.clamp(2 * AHEAD_MIN, MAX_TOKENS), slots))
    }

    /// The store's answer to a settlement: a grant of `tokens` and `slots` (from `now`), or none
    /// (`None`: it keeps the slots in use, nothing else).
    pub(super) fn answered(&mut self, grant: Option<(u32, u32)>, sent: &AheadAsk, now: Instant) {
        self.settled_at = Some(now);
        match grant {
            Some((tokens, slots)) => {
                self.tokens = tokens;
                self.slots = slots;
                self.granted = tokens;
                self.spent_at_grant = self.spent;
                self.granted_at = Some(now);
                self.peak = self.in_use;
                self.in_store = true;
            }
            None => {
                self.slots = sent.in_use;
                self.granted_at = None;
                self.in_store = sent.in_use > 0 || self.spent != sent.spent;
            }
        }
    }

    /// The settlement was not answered (the store is away): whatever it holds runs out there;
    /// nothing more is spent here.
    pub(super) fn unanswered(&mut self, sent: &AheadAsk) {
        self.slots = sent.in_use.min(self.slots);
        self.granted_at = None;
    }

    /// What the dispatcher does about the allowance while no request waits: nothing (none is
    /// held), give it back now (another instance waits, the instance shuts down (`closing`), its
    /// span ended, or only slots that came free are left), or wait for the span's end (or, with
    /// slots still in use, until the store must hear of them again: a third of `lease`).
    pub(super) fn keep(&self, now: Instant, lease: Duration, closing: bool) -> Keep {
        if !self.in_store {
            return Keep::Nothing;
        }
        if self.yielding || (closing && self.tokens > 0) {
            return Keep::Settle;
        }
        if self.tokens > 0 {
            return match self.granted_at.map(|at| at + SPAN) {
                Some(end) if end > now => Keep::Until(end),
                _ => Keep::Settle,
            };
        }
        if self.in_use == 0 {
            return Keep::Settle;
        }
        let refresh = self.settled_at.unwrap_or(now) + lease / 3;
        if refresh > now {
            Keep::Until(refresh)
        } else {
            Keep::Settle
        }
    }

    /// Turns left, slots held and in use, for the host's page.
    pub(crate) fn view(&self) -> (u32, u32, u32) {
        (self.tokens, self.slots, self.in_use)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits {
            rate: 1000.0,
            configured_rate: 1000.0,
            burst: 1000,
            concurrency: 100,
            rejoin: false,
            bytes: None,
            answered: true,
        }
    }

    fn granted(now: Instant, tokens: u32, slots: u32) -> Ahead {
        let mut ahead = Ahead::default();
        let sent = ahead.settle(Some((tokens, slots)), 1).unwrap();
        ahead.answered(Some((tokens, slots)), &sent, now);
        ahead
    }

    #[tokio::test(start_paused = true)]
    async fn turns_are_spent_within_the_tokens_the_slots_and_the_span() {
        let now = Instant::now();
        let mut ahead = granted(now, 3, 2);
        assert_eq!(ahead.try_spend(now), Some(1));
        assert_eq!(ahead.try_spend(now), Some(1));
        assert_eq!(ahead.try_spend(now), None, "both slots in use");
        assert!(!ahead.end(1, true));
        assert_eq!(ahead.try_spend(now), Some(1));
        assert_eq!(ahead.try_spend(now), None, "no turn left");
        let mut ahead = granted(now, 3, 2);
        tokio::time::sleep(SPAN).await;
        assert_eq!(ahead.try_spend(Instant::now()), None, "the span ended");
        assert_eq!(
            ahead.keep(Instant::now(), Duration::from_secs(30), false),
            Keep::Settle
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_turn_never_sent_goes_back_to_its_own_allowance_only() {
        let now = Instant::now();
        let mut ahead = granted(now, 2, 2);
        let first = ahead.try_spend(now).unwrap();
        assert_eq!(ahead.spent, 1);
        ahead.end(first, false);
        assert_eq!(
            (ahead.tokens, ahead.spent),
            (2, 0),
            "refunded to the allowance"
        );
        let turn = ahead.try_spend(now).unwrap();
        // Settled meanwhile: the count the store charges from goes down, no turn comes back.
        let sent = ahead.settle(None, 2).unwrap();
        assert_eq!((sent.spent, sent.in_use), (1, 1));
        ahead.answered(None, &sent, now);
        ahead.end(turn, false);
        assert_eq!((ahead.tokens, ahead.spent), (0, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn settling_gives_everything_left_back_and_keeps_the_slots_in_use() {
        let now = Instant::now();
        let mut ahead = granted(now, 10, 4);
        ahead.try_spend(now);
        ahead.try_spend(now);
        let sent = ahead.settle(None, 7).unwrap();
        assert_eq!(
            sent,
            AheadAsk {
                seq: 7,
                spent: 2,
                want_tokens: 0,
                want_slots: 0,
                in_use: 2
            }
        );
        assert_eq!(ahead.try_spend(now), None, "nothing left to spend");
        ahead.answered(None, &sent, now);
        assert_eq!(ahead.view(), (0, 2, 2));
        let lease = Duration::from_secs(30);
        assert_eq!(ahead.keep(now, lease, false), Keep::Until(now + lease / 3));
        assert!(!ahead.end(1, true));
        assert!(ahead.end(1, true), "the last slot in use came free");
        assert_eq!(ahead.keep(now, lease, false), Keep::Settle);
        let sent = ahead.settle(None, 8).unwrap();
        ahead.answered(None, &sent, now);
        assert_eq!(ahead.keep(now, lease, false), Keep::Nothing);
        assert!(ahead.settle(None, 9).is_none(), "nothing to say");
    }

    #[test]
    fn it_asks_for_twice_what_it_used_and_slots_for_twice_the_demand() {
        let now = Instant::now();
        let ahead = Ahead::default();
        assert_eq!(ahead.wanted(&limits(), 5), Some((FIRST_TOKENS, 10)));
        let mut ahead = granted(now, 64, 10);
        for _ in 0..64 {
            ahead.try_spend(now);
            ahead.end(ahead.generation, true);
        }
        assert_eq!(
            ahead.wanted(&limits(), 1).unwrap().0,
            128,
            "ran out: twice as many"
        );
        let mut ahead = granted(now, 64, 30);
        for _ in 0..20 {
            ahead.try_spend(now);
        }
        assert_eq!(
            ahead.wanted(&limits(), 1),
            Some((40, 40)),
            "20 used, 20 in flight"
        );
        let tight = Limits {
            burst: 20,
            ..limits()
        };
        assert_eq!(
            ahead.wanted(&tight, 1),
            None,
            "a burst too small to lease from"
        );
        let rejoin = Limits {
            rejoin: true,
            ..limits()
        };
        assert_eq!(ahead.wanted(&rejoin, 1), None);
        let bytes = Limits {
            bytes: Some((1 << 20, 1 << 20)),
            ..limits()
        };
        assert_eq!(
            ahead.wanted(&bytes, 1),
            None,
            "a byte budget is never leased ahead"
        );
    }

    #[test]
    fn a_yield_is_for_a_holder_only() {
        let mut ahead = Ahead::default();
        ahead.yield_now();
        assert_eq!(
            ahead.keep(Instant::now(), Duration::from_secs(30), false),
            Keep::Nothing
        );
        let mut ahead = granted(Instant::now(), 64, 4);
        assert_eq!(
            ahead.keep(Instant::now(), Duration::from_secs(30), true),
            Keep::Settle,
            "given back at shutdown"
        );
        ahead.yield_now();
        assert_eq!(ahead.try_spend(Instant::now()), None);
        assert_eq!(
            ahead.keep(Instant::now(), Duration::from_secs(30), false),
            Keep::Settle
        );
    }
}
