//! Why each request waited for its turn, and for how long: the accounting behind the
//! `Server-Timing` header's `courtesy-wait` and the trace's wait span.
//!
//! The rule (documented in `docs/why-did-it-wait.md`): a request's wait is split between the
//! reasons that held it, and **the reason that held it longest** is the one reported (on a tie,
//! the one that held it last). Until a request is the next in line (the front of its host's queue,
//! fair between jobs), it waits for the requests ahead of it: [`WaitReason::Queue`] when earlier
//! requests of its own job were waiting when it arrived, else [`WaitReason::JobShare`] (other
//! jobs' turns). While it is next in line, it waits for what the dispatcher waits for (the
//! budget's [`super::budget::Turn`]: the rate, a slot, a cooldown, the shared store...).
//!
//! Cheap by construction: one record per host with a queue ([`HeadWait`], boxed in the host's
//! state, made when a queue forms and dropped when it empties), updated once per look of the
//! dispatcher (never per waiting request), read once per turn handed over. A request that gets
//! its turn at once touches none of it.

use std::time::Duration;

use tokio::time::Instant;

use crate::pacing::policy::WaitReason;

/// The front of a host's queue: who it is, since when, and what held it so far, per reason.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HeadWait {
    /// The id of the waiter at the front at the last look (`u64::MAX`: nobody yet).
    head: u64,
    /// When it became the front.
    head_since: Instant,
    /// What it waits for now, and since when.
    spell: WaitReason,
    spell_since: Instant,
    /// Its time at the front per reason, spells that ended.
    totals: [Duration; WaitReason::COUNT],
    /// The last round trip to the shared store for it: (asked, answered).
    store_trip: Option<(Instant, Instant)>,
}

/// The shared store's round trip that gave a request its turn, as microseconds before the turn
/// that it began and how long it lasted (both 0: there was none). Eight bytes, carried by the
/// permit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct StoreTrip {
    /// How long before the turn the request for it went to the store, in µs.
    pub began_before_us: u32,
    /// How long the store took to answer, in µs.
    pub lasted_us: u32,
}

impl StoreTrip {
    /// Whether there was a round trip.
    pub(crate) fn is_some(self) -> bool {
        self.began_before_us != 0 || self.lasted_us != 0
    }
}

/// How long and why one request waited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Verdict {
    /// What held it longest.
    pub(crate) reason: WaitReason,
    /// The store's round trip for its turn, if any.
    pub(crate) trip: StoreTrip,
}

/// A request still waiting, as the accounting needs it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Asker {
    /// Its id in the host's queue.
    pub(crate) id: u64,
    /// When it arrived.
    pub(crate) arrived: Instant,
    /// Whether requests of its own job were waiting for the host when it arrived.
    pub(crate) behind_own: bool,
}

impl HeadWait {
    /// A record whose front is `head` from `now` on, waiting for `reason`.
    pub(crate) fn new(head: u64, reason: WaitReason, now: Instant) -> Self {
        HeadWait {
            head,
            head_since: now,
            spell: reason,
            spell_since: now,
            totals: [Duration::ZERO; WaitReason::COUNT],
            store_trip: None,
        }
    }

    /// One look of the dispatcher: `front` is next in line and waits for `reason` from `now`.
    pub(crate) fn look(&mut self, front: u64, reason: WaitReason, now: Instant) {
        if front != self.head {
            *self = HeadWait::new(front, reason, now);
            return;
        }
        self.close_spell(now);
        self.spell = reason;
    }

    /// What the front waits for now.
    pub(crate) fn waiting_for(&self) -> WaitReason {
        self.spell
    }

    /// The shared store answered at `answered` with a turn: the round trip ends there, and
    /// whatever wait it gave (the store's pacing) is the rate's.
    pub(crate) fn store_answered(&mut self, answered: Instant) {
        if self.spell == WaitReason::SharedStore {
            self.store_trip = Some((self.spell_since, answered));
        }
        self.close_spell(answered);
        self.spell = WaitReason::Rate;
    }

    fn close_spell(&mut self, now: Instant) {
        let spell = now.saturating_duration_since(self.spell_since);
        self.totals[self.spell.index()] += spell;
        self.spell_since = self.spell_since.max(now);
    }

    /// What `asker` waited for, its turn coming at `now`. The record is then spent: the next
    /// front starts a record of its own at the next look.
    pub(crate) fn verdict(&mut self, asker: Asker, now: Instant) -> Verdict {
        if asker.id != self.head {
            return Verdict {
                reason: verdict_behind(asker, now),
                trip: StoreTrip::default(),
            };
        }
        self.close_spell(now);
        let before_front = self.head_since.saturating_duration_since(asker.arrived);
        let behind = if asker.behind_own {
            WaitReason::Queue
        } else {
            WaitReason::JobShare
        };
        // The last spell wins a tie, the time behind others loses one.
        let mut best = (self.spell, self.totals[self.spell.index()]);
        for reason in WaitReason::ALL {
            let held = self.totals[reason.index()];
            if held > best.1 {
                best = (reason, held);
            }
        }
        if before_front > best.1 {
            best = (behind, before_front);
        }
        let reason = if best.1.is_zero() {
            WaitReason::None
        } else {
            best.0
        };
        let trip = self
            .store_trip
            .map_or(StoreTrip::default(), |(asked, answered)| StoreTrip {
                began_before_us: micros(now.saturating_duration_since(asked)),
                lasted_us: micros(answered.saturating_duration_since(asked)),
            });
        self.head = u64::MAX;
        Verdict { reason, trip }
    }

    /// What `asker`, who is not the record's front, waited for (a request refused at its
    /// deadline, or one that got the turn of a front that left).
    pub(crate) fn reason_for(&self, asker: Asker, now: Instant) -> WaitReason {
        if asker.id != self.head {
            return verdict_behind(asker, now);
        }
        let mut probe = *self;
        probe.verdict(asker, now).reason
    }
}

/// A request that was never the front: it waited for those ahead of it.
fn verdict_behind(asker: Asker, now: Instant) -> WaitReason {
    if now <= asker.arrived {
        WaitReason::None
    } else if asker.behind_own {
        WaitReason::Queue
    } else {
        WaitReason::JobShare
    }
}

/// A duration in whole microseconds, at most `u32::MAX` (71 minutes).
fn micros(d: Duration) -> u32 {
    u32::try_from(d.as_micros()).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asker(id: u64, arrived: Instant, behind_own: bool) -> Asker {
        Asker {
            id,
            arrived,
            behind_own,
        }
    }

    #[test]
    fn the_reason_that_held_longest_is_reported() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut w = HeadWait::new(7, WaitReason::Concurrency, t0);
        w.look(7, WaitReason::Rate, t0 + ms(100));
        w.look(7, WaitReason::Concurrency, t0 + ms(900));
        let v = w.verdict(asker(7, t0, false), t0 + ms(950));
        assert_eq!(
            v.reason,
            WaitReason::Rate,
            "800 ms of rate against 150 of slots"
        );
        assert!(!v.trip.is_some());
    }

    #[test]
    fn a_tie_goes_to_the_reason_that_held_it_last() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut w = HeadWait::new(1, WaitReason::Cooldown, t0);
        w.look(1, WaitReason::Rate, t0 + ms(500));
        let v = w.verdict(asker(1, t0, false), t0 + ms(1000));
        assert_eq!(v.reason, WaitReason::Rate);
    }

    #[test]
    fn time_behind_others_is_queue_or_job_share() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        // Behind its own job's requests for 3 s, then 1 s of rate: the queue held it longest.
        let mut w = HeadWait::new(2, WaitReason::Rate, t0 + ms(3000));
        let v = w.verdict(asker(2, t0, true), t0 + ms(4000));
        assert_eq!(v.reason, WaitReason::Queue);
        // The same behind another job: the other job's share.
        let mut w = HeadWait::new(2, WaitReason::Rate, t0 + ms(3000));
        assert_eq!(
            w.verdict(asker(2, t0, false), t0 + ms(4000)).reason,
            WaitReason::JobShare
        );
        // A request that was never the front.
        let w = HeadWait::new(9, WaitReason::Rate, t0);
        assert_eq!(
            w.reason_for(asker(3, t0, true), t0 + ms(10)),
            WaitReason::Queue
        );
        assert_eq!(w.reason_for(asker(3, t0, true), t0), WaitReason::None);
    }

    #[test]
    fn the_store_round_trip_is_kept_and_its_paced_wait_is_the_rate() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut w = HeadWait::new(4, WaitReason::SharedStore, t0);
        w.store_answered(t0 + ms(2));
        let v = w.verdict(asker(4, t0, false), t0 + ms(500));
        assert_eq!(v.reason, WaitReason::Rate);
        assert_eq!(
            v.trip,
            StoreTrip {
                began_before_us: 500_000,
                lasted_us: 2_000
            }
        );
        // Spent: the next front starts its own record.
        w.look(5, WaitReason::Concurrency, t0 + ms(500));
        let v = w.verdict(asker(5, t0 + ms(400), true), t0 + ms(700));
        assert_eq!(
            v.reason,
            WaitReason::Concurrency,
            "200 ms of slot, 100 queued"
        );
    }

    #[test]
    fn no_wait_is_none() {
        let t0 = Instant::now();
        let mut w = HeadWait::new(1, WaitReason::Rate, t0);
        assert_eq!(w.verdict(asker(1, t0, true), t0).reason, WaitReason::None);
    }
}
