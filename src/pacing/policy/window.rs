//! The server's counted window (RateLimit `remaining` and `reset`): what is left of it until
//! its reset, the window's phase learned from the resets the server sends, and where the turns
//! go in it.
//!
//! **What is left.** At most `remaining` more requests before the reset, spent no faster than
//! `remaining` ÷ the time left. `remaining = 0` closes the host until the stated reset: a
//! cooldown (`on_cooldown` answers the requests meanwhile) where the server found the window
//! spent before courtesy had (others spend it too), a wait like a wait for a token where
//! courtesy had spent it with its own turns. Nothing ever leaves before a reset the server
//! stated for a spent window.
//!
//! **The phase.** A reset in whole seconds (`t=1`) says only that the window ends within a
//! second; over a one-second window it says nothing at all. The window's edges show where the
//! count starts again: an answer whose `remaining` did not fall below the one before (which
//! was answered before this request left) was counted in a new window, so an edge lies between
//! the first request's sending and the second's answer. Each reset says the edge lies within a
//! second (and a round trip) before the instant it states. [`WindowClock`] intersects these
//! spans over many windows (every edge is one of them plus a whole number of windows), and
//! takes the phase as known once a new window was seen and the span is narrower than half the
//! window. Resets are taken as rounded up (a server rounding down would tell a client to come
//! back while its window is still spent); spans that contradict each other start over.
//!
//! **The turns.** With the phase known, the window's remaining turns are spread up to its
//! learned end rather than to the stated reset, which a whole-second reset puts up to a second
//! later, and the quota of the server's policy is per window (Q ÷ W no longer caps the rate:
//! `Pacing::effective_rate`). The turn that spends a window is told to wait until a reset
//! stated in whole seconds from its arrival, which falls inside the next window: it goes only
//! where that wait still leaves the next window room for all but one of its turns at the host's
//! pace; elsewhere it waits for the edge and counts in the next window. Where that wait takes
//! from the next window (short windows), the window's turns go at the host's pace, so that the
//! spending one goes early; elsewhere they are spread up to its latest slot. While a window
//! has a turn to spare, its last turn before the edge goes at the middle of the edge's span:
//! whichever window counts it, it narrows the span.
//!
//! With a shared budget (`[shared]`) an instance's own turns are not counted down here (the
//! store gives them), so a spent window is always a cooldown, taught to the store as before;
//! the phase still places the rate it asks the store for.

use std::time::Duration;

use tokio::time::Instant;

use super::{CooldownCause, Pacing};
use crate::config::HostPolicy;
use crate::pacing::feedback::ServerBudget;

/// The phase is known once the span of an edge is narrower than this share of the window.
const KNOWN: f64 = 0.5;
/// Weight of the newest answer in the smoothed round trip.
const RTT_WEIGHT: f64 = 0.2;

/// The server's announced budget: what is left until its window resets.
#[derive(Debug, Clone, Copy)]
pub(super) struct ServerWindow {
    /// Requests left in the window (courtesy's own turns taken off as they leave).
    pub(super) remaining: u64,
    /// The reset the server stated (as of the latest answer): a spent window stays closed
    /// until then.
    pub(super) reset_at: Instant,
    /// Where the window's turns go, when its phase is known.
    plan: Option<Plan>,
}

/// Where the turns of a window whose phase is known go.
#[derive(Debug, Clone, Copy)]
struct Plan {
    /// The window's learned end: the span of its edge.
    end: (Instant, Instant),
    /// The latest instant the turn that spends the window may leave at, if any.
    last_by: Option<Instant>,
    /// Seconds between two turns at the host's pace.
    pace: f64,
    /// Whether the turns are spread up to `last_by`: where the wait the spending turn causes
    /// costs the next window nothing. Else they go at the host's pace, so that the spending
    /// turn goes early and its wait takes the least of the next window.
    spread: bool,
}

impl ServerWindow {
    /// Whether the window has run out at `now`: at its learned end while a turn is left, else
    /// at the stated reset.
    pub(super) fn expired(&self, now: Instant) -> bool {
        match self.plan {
            Some(p) if self.remaining > 0 => p.end.1 <= now,
            _ => self.reset_at <= now,
        }
    }

    /// The highest rate that spends what is left in time at `now`, if any bounds it.
    pub(super) fn spend_rate(&self, now: Instant) -> Option<f64> {
        if self.remaining == 0 {
            return None;
        }
        let (turns, by) = match self.plan {
            None => (self.remaining, self.reset_at),
            Some(p) if p.in_time(self.remaining, now) => match p.last_by {
                Some(by) if p.spread => (self.remaining, by),
                _ => return None,
            },
            // The spending turn waits for the edge: the others go by the middle of its span.
            Some(Plan { end: (lo, hi), .. }) => (
                self.remaining - 1,
                lo + hi.saturating_duration_since(lo) / 2,
            ),
        };
        let left = by.saturating_duration_since(now).as_secs_f64();
        (turns > 0 && left > 0.0).then(|| turns as f64 / left)
    }

    /// The instant before which the next turn may not leave, if any: a spent window's stated
    /// reset, or the edge where the spending turn would leave too late.
    pub(super) fn not_before(&self, now: Instant) -> Option<Instant> {
        match self.plan {
            _ if self.remaining == 0 => Some(self.reset_at),
            Some(p) if self.remaining == 1 && !p.in_time(1, now) => Some(p.end.1),
            _ => None,
        }
    }
}

impl Plan {
    /// Whether the window's `remaining` turns, the spending one last, can still leave at the
    /// host's pace from `now` with the spending one in time.
    fn in_time(&self, remaining: u64, now: Instant) -> bool {
        let before = remaining.saturating_sub(1) as f64 * self.pace;
        self.last_by.is_some_and(|by| {
            by.saturating_duration_since(now).as_secs_f64() >= before && by >= now
        })
    }
}

/// What one answer said of the window, as courtesy saw it.
#[derive(Debug, Clone, Copy)]
struct Seen {
    sent: Instant,
    answered: Instant,
    remaining: u64,
}

/// A counted window's length, quota and phase, learned from the answers.
#[derive(Debug, Clone, Copy)]
pub(super) struct WindowClock {
    /// Seconds per window: as the quota says (`w=`), else the longest reset seen, in whole
    /// seconds.
    length: f64,
    /// Requests per window: as the quota says, else the most seen left in a window, plus one.
    quota: u64,
    /// The span of one edge: every edge lies in it plus a whole number of windows.
    edge: Option<(Instant, Instant)>,
    /// New windows seen (the count starting again) since the span last started over: a span
    /// from stated resets alone is not trusted.
    starts: u8,
    /// The answer before, to see a new window between two answers.
    last: Option<Seen>,
    /// The smoothed time from a request's sending to its answer, in seconds.
    rtt: f64,
    /// Whether resets come as whole seconds from the answer (rather than as an instant).
    whole: bool,
}

impl WindowClock {
    fn new() -> Self {
        WindowClock {
            length: 0.0,
            quota: 0,
            edge: None,
            starts: 0,
            last: None,
            rtt: 0.0,
            whole: true,
        }
    }

    /// Takes in an answer (to a request `sent`, answered at `answered`) saying `remaining`
    /// left and a reset in `reset`, with the quota the server announced, if any.
    fn observe(&mut self, seen: Seen, reset: Duration, budget: &ServerBudget) {
        let trip = seen
            .answered
            .saturating_duration_since(seen.sent)
            .as_secs_f64();
        self.rtt = match self.last {
            None => trip,
            Some(_) => self.rtt + RTT_WEIGHT * (trip - self.rtt),
        };
        self.whole = reset.subsec_nanos() == 0;
        let said = budget.quota.and_then(|q| q.window.map(|w| (q.limit, w)));
        self.length = match said {
            Some((_, w)) if !w.is_zero() => w.as_secs_f64(),
            _ => self.length.max(reset.as_secs_f64().ceil()),
        };
        let new_window = self
            .last
            .filter(|l| seen.sent >= l.answered && seen.remaining >= l.remaining);
        self.quota = match (budget.quota, said) {
            (_, Some((limit, _))) | (Some(crate::pacing::feedback::Quota { limit, .. }), None) => {
                limit
            }
            _ if new_window.is_some() => seen.remaining + 1,
            _ => self.quota.max(seen.remaining + 1),
        };
        if let Some(before) = new_window {
            self.narrow(before.sent, seen.answered, true);
        }
        // The stated reset: the edge is at most this, and less than a second (and the trip)
        // before it.
        let stated = seen.answered + reset;
        let early = Duration::from_secs(1) + seen.answered.saturating_duration_since(seen.sent);
        self.narrow(
            stated.checked_sub(early).unwrap_or(seen.sent),
            stated,
            false,
        );
        self.last = Some(seen);
    }

    /// Takes in that an edge lies in `(from, to)`; `start` when a new window was seen there.
    fn narrow(&mut self, from: Instant, to: Instant, start: bool) {
        let width = to.saturating_duration_since(from).as_secs_f64();
        if !(self.length > 0.0 && width < self.length) {
            return;
        }
        let Some((lo, hi)) = self.edge else {
            self.edge = Some((from, to));
            self.starts = u8::from(start);
            return;
        };
        // The same edge, moved by whole windows onto the span known.
        let mid = |a: Instant, b: Instant| a + b.saturating_duration_since(a) / 2;
        let (known, new) = (mid(lo, hi), mid(from, to));
        let gap = signed_seconds(known, new);
        let shift = Duration::from_secs_f64((gap / self.length).round().abs() * self.length);
        let (from, to) = if gap >= 0.0 {
            (
                from.checked_sub(shift).unwrap_or(from),
                to.checked_sub(shift).unwrap_or(to),
            )
        } else {
            (from + shift, to + shift)
        };
        let (lo, hi) = (lo.max(from), hi.min(to));
        if lo < hi {
            self.edge = Some((lo, hi));
            self.starts = self.starts.saturating_add(u8::from(start));
        } else {
            // Spans that do not meet: the window moved (or was never what it seemed).
            self.edge = Some((from, to));
            self.starts = u8::from(start);
        }
    }

    /// Whether the window's phase is known: the span of its edge is narrow enough to place
    /// turns by.
    pub(super) fn known(&self) -> bool {
        self.starts > 0
            && self.edge.is_some_and(|(lo, hi)| {
                let width = hi.saturating_duration_since(lo).as_secs_f64();
                self.length > 0.0 && width <= KNOWN * self.length
            })
    }

    /// The span of the first edge after `t`, if the phase is known.
    fn edge_after(&self, t: Instant) -> Option<(Instant, Instant)> {
        let (lo, hi) = self.edge.filter(|_| self.known())?;
        let mid = lo + (hi - lo) / 2;
        let windows = (signed_seconds(mid, t) / self.length).floor() + 1.0;
        let shift = windows * self.length;
        let move_by = |i: Instant| {
            if shift >= 0.0 {
                i + Duration::from_secs_f64(shift)
            } else {
                i.checked_sub(Duration::from_secs_f64(-shift)).unwrap_or(i)
            }
        };
        Some((move_by(lo), move_by(hi)))
    }

    /// Where the turns of the window an answer to a request `sent` and answered at `answered`
    /// was counted in go, at the host's pace `rate` (before the window), if its phase is known.
    fn plan(&self, sent: Instant, answered: Instant, stated: Instant, rate: f64) -> Option<Plan> {
        let arrival = sent + answered.saturating_duration_since(sent) / 2;
        let end = self.edge_after(arrival)?;
        let half_trip = Duration::from_secs_f64(self.rtt / 2.0);
        let span = end.1.saturating_duration_since(end.0).as_secs_f64();
        // The wait the spending turn causes may take this much of the next window: the rest
        // still holds all but one of the window's turns at the host's pace (the turn gained
        // now is worth the one the next window may lose; not two).
        let pace = if rate > 0.0 {
            1.0 / rate
        } else {
            f64::INFINITY
        };
        let room = self.length - self.quota.saturating_sub(2) as f64 * pace - self.rtt - span;
        let mut spread = true;
        let arrive_by = if self.whole {
            // A whole-second reset from its arrival: its wait into the next window is short
            // just after a whole second before the edge.
            let slack = room - self.rtt / 2.0;
            spread = slack >= 1.0;
            (slack > 0.0).then(|| {
                let before = (1.0 - slack).max(0.0);
                end.0.checked_sub(Duration::from_secs_f64(before))
            })
        } else {
            // A reset stated as an instant: the same wait wherever the turn goes.
            let wait = stated.saturating_duration_since(end.0).as_secs_f64();
            (wait <= room).then_some(Some(end.0))
        };
        let last_by = arrive_by.flatten().and_then(|at| at.checked_sub(half_trip));
        Some(Plan {
            end,
            last_by,
            pace,
            spread,
        })
    }
}

/// `b − a` in seconds, negative when `b` is before `a`.
fn signed_seconds(a: Instant, b: Instant) -> f64 {
    if b >= a {
        b.duration_since(a).as_secs_f64()
    } else {
        -a.duration_since(b).as_secs_f64()
    }
}

impl Pacing {
    /// Takes the budget an answer (to a request `sent`) announced: the server's policy as a
    /// cap, its byte and concurrency policies (`server_caps.rs`), and what is left of its
    /// window. Returns the cooldown it started, if any.
    pub(super) fn apply_server_budget(
        &mut self,
        budget: &ServerBudget,
        (sent, others_in_flight): (Instant, u32),
        policy: &HostPolicy,
        now: Instant,
    ) -> Option<Duration> {
        if let Some(rate) = budget.policy_rate.filter(|r| *r > 0.0) {
            self.rare_mut().server_policy_rate = Some(rate);
        }
        let bytes_spent = self.apply_server_caps(budget, policy, now);
        let window = self.apply_server_window(budget, (sent, others_in_flight), policy, now);
        window.max(bytes_spent)
    }

    /// What is left of the server's request window (`remaining` until `reset`): paces the
    /// turns left, or cools the host down until the reset when it is spent.
    fn apply_server_window(
        &mut self,
        budget: &ServerBudget,
        (sent, others_in_flight): (Instant, u32),
        policy: &HostPolicy,
        now: Instant,
    ) -> Option<Duration> {
        let (Some(remaining), Some(reset)) = (budget.remaining, budget.reset) else {
            return None;
        };
        let reset = reset.min(policy.cooldown.max_retry_after);
        if reset.is_zero() {
            self.rare_mut().server_window = None;
            return None;
        }
        let seen = Seen {
            sent,
            answered: now,
            remaining,
        };
        let mut clock = self.rare().window_clock.unwrap_or_else(WindowClock::new);
        clock.observe(seen, reset, budget);
        self.rare_mut().window_clock = Some(clock);
        let remaining = remaining.saturating_sub(u64::from(others_in_flight));
        let stated = now + reset;
        let before = self.rare().server_window;
        if remaining == 0 {
            // Spent by courtesy's own turns: the reset comes like a token. Found spent: the
            // host cools down until it.
            if let Some(w) = before.filter(|w| w.remaining == 0) {
                self.rare_mut().server_window = Some(ServerWindow {
                    remaining: 0,
                    reset_at: w.reset_at.max(stated),
                    plan: None,
                });
                return None;
            }
            self.rare_mut().server_window = None;
            let changed = self.extend_cooldown(stated, CooldownCause::ServerBudget, now);
            return changed.then_some(reset);
        }
        let pace = self.rate_before_window(now, false);
        self.rare_mut().server_window = Some(ServerWindow {
            remaining,
            reset_at: stated,
            plan: clock.plan(sent, now, stated, pace),
        });
        None
    }
}
