//! The judge: the clients' outcomes, the origin's arrivals and windows and the restarts, put
//! together into the figures of one run and the invariants they prove or break. Nothing here
//! touches the network; every figure is computed from the records alone, so the accounting can be
//! read on its own.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use crate::child::{Restart, Signal};
use crate::clients::{Ended, Outcome};
use crate::common::percentile::percentile_at_fraction;
use crate::origin::{Arrival, Window};
use crate::plan::Behaviour;

/// Arrivals this soon after a window opened were on their way before courtesy could have read
/// the answer that opened it (courtesy has up to `concurrency` requests in flight per host): they
/// are counted apart, not as violations.
pub const IN_FLIGHT_GRACE: Duration = Duration::from_millis(200);

/// A window opened this soon before a SIGKILL (or after it, before the new process was up) may
/// never have reached courtesy's state file, or courtesy at all: arrivals inside it are counted
/// apart.
pub const KILL_RACE: Duration = Duration::from_millis(250);

/// An arrival inside a Retry-After window.
#[derive(Debug, Clone)]
pub struct Violation {
    /// The arrival.
    pub arrival: Arrival,
    /// The window it fell into.
    pub window: Window,
    /// A restart between the window's opening and the arrival (the cooldown had to survive it).
    pub across: Option<Signal>,
}

/// A transport failure, with the request it ended.
pub type Failure = (Outcome, String);

/// Every figure of one run.
#[derive(Debug, Default)]
pub struct Tally {
    /// Requests the clients started.
    pub sent: u64,
    /// Answers from the origin by status.
    pub origin_by_status: BTreeMap<u16, u64>,
    /// courtesy's answers by (`Proxy-Status` error type, status).
    pub local_by_error: BTreeMap<(String, u16), u64>,
    /// Transport failures outside restart windows (must be none).
    pub lost: Vec<Failure>,
    /// Transport failures inside restart windows, by kind.
    pub lost_in_restarts: BTreeMap<String, u64>,
    /// Requests with no end within the overall timeout (must be none).
    pub hung: Vec<Outcome>,
    /// 200s whose body is not their id's (must be none).
    pub corrupted: Vec<(u64, String)>,
    /// POST ids whose body reached the origin changed or cut (must be none).
    pub post_body_bad: Vec<u64>,
    /// Ids the origin answered more than once, with how many times (must be none).
    pub duplicates: Vec<(u64, usize)>,
    /// GETs the origin saw again after a 429 or 503 it answered: courtesy's own retries after
    /// the window (`retry_idempotent`), allowed and counted.
    pub retried_after_refusal: u64,
    /// POST ids the origin saw more than once, with how many times (must be none).
    pub post_resent: Vec<(u64, usize)>,
    /// GET ids the origin saw again after a try it did not answer (courtesy's stale-connection
    /// resend; allowed).
    pub resent_after_unanswered: u64,
    /// Arrivals inside a window (must be none).
    pub violations: Vec<Violation>,
    /// Arrivals within [`IN_FLIGHT_GRACE`] of a window's opening.
    pub in_flight_at_open: u64,
    /// Arrivals inside windows opened around a SIGKILL (see [`KILL_RACE`]).
    pub kill_race: u64,
    /// Windows the origin announced, by status.
    pub windows_by_status: BTreeMap<u16, u64>,
    /// The restarts made.
    pub restarts: Vec<Restart>,
    /// Arrivals at the origin by what it did.
    pub arrivals_by_behaviour: BTreeMap<Behaviour, u64>,
    /// Arrivals at the origin.
    pub arrivals: u64,
    /// Arrivals without `x-soak-id` (courtesy lost the header; must be none).
    pub arrivals_without_id: u64,
    /// Ids the client got an origin answer for but the origin never answered (provenance wrong).
    pub unrecorded_origin_answers: Vec<u64>,
    /// Client-side latency of answered requests: p50, p99, max.
    pub latency: [Duration; 3],
}

impl Tally {
    /// Whether every invariant holds: (name, holds).
    pub fn invariants(&self) -> Vec<(&'static str, bool)> {
        vec![
            ("lost = 0 outside restart windows", self.lost.is_empty()),
            ("hung = 0", self.hung.is_empty()),
            (
                "corrupted = 0 (response and POST bodies)",
                self.corrupted.is_empty() && self.post_body_bad.is_empty(),
            ),
            ("duplicates = 0", self.duplicates.is_empty()),
            ("POST resent = 0", self.post_resent.is_empty()),
            ("window violations = 0", self.violations.is_empty()),
            (
                "every request reached the origin with its x-soak-id",
                self.arrivals_without_id == 0,
            ),
        ]
    }

    /// Whether all invariants hold.
    pub fn passed(&self) -> bool {
        self.invariants().iter().all(|(_, ok)| *ok)
    }
}

/// Puts one run's records together.
pub fn tally(
    outcomes: &[Outcome],
    arrivals: &[Arrival],
    windows: &[Window],
    restarts: &[Restart],
) -> Tally {
    let mut t = Tally {
        sent: outcomes.len() as u64,
        arrivals: arrivals.len() as u64,
        restarts: restarts.to_vec(),
        ..Tally::default()
    };
    let mut by_id: HashMap<u64, Vec<&Arrival>> = HashMap::new();
    for a in arrivals {
        *t.arrivals_by_behaviour.entry(a.behaviour).or_default() += 1;
        match a.id {
            Some(id) => by_id.entry(id).or_default().push(a),
            None => t.arrivals_without_id += 1,
        }
        if a.post && !a.body_ok {
            t.post_body_bad.extend(a.id);
        }
    }
    for (&id, seen) in &by_id {
        let answered = seen.iter().filter(|a| a.behaviour.answered()).count();
        // Pages: answers other than a 429 or 503, after which courtesy retries a GET itself.
        let pages = seen
            .iter()
            .filter(|a| a.behaviour.answered() && !a.behaviour.refused_for_now())
            .count();
        let post = seen.iter().any(|a| a.post);
        if pages > 1 || (post && answered > 1) {
            t.duplicates.push((id, answered));
        }
        if post && seen.len() > 1 {
            t.post_resent.push((id, seen.len()));
        } else if !post && seen.len() > 1 && answered <= 1 {
            t.resent_after_unanswered += 1;
        } else if !post && seen.len() > 1 && pages <= 1 {
            t.retried_after_refusal += 1;
        }
    }
    t.duplicates.sort_unstable();
    t.post_resent.sort_unstable();
    let mut latencies = Vec::with_capacity(outcomes.len());
    for o in outcomes {
        match &o.ended {
            Ended::Origin { status, corrupt } => {
                *t.origin_by_status.entry(*status).or_default() += 1;
                if let Some(why) = corrupt {
                    t.corrupted.push((o.id, why.clone()));
                }
                let recorded = by_id
                    .get(&o.id)
                    .is_some_and(|seen| seen.iter().any(|a| a.behaviour.answered()));
                if !recorded {
                    t.unrecorded_origin_answers.push(o.id);
                }
                latencies.push(o.done - o.sent);
            }
            Ended::Local { status, error } => {
                *t.local_by_error
                    .entry((error.clone(), *status))
                    .or_default() += 1;
                latencies.push(o.done - o.sent);
            }
            Ended::Transport { kind } => {
                if restarts.iter().any(|r| r.covers(o.done)) {
                    *t.lost_in_restarts.entry(kind.clone()).or_default() += 1;
                } else {
                    t.lost.push((o.clone(), kind.clone()));
                }
            }
            Ended::Hung => t.hung.push(o.clone()),
        }
    }
    latencies.sort_unstable();
    t.latency = [0.5, 0.99, 1.0].map(|f| percentile_at_fraction(&latencies, f).unwrap_or_default());
    judge_windows(&mut t, arrivals, windows, restarts);
    t
}

/// Finds the arrivals inside each window (per host, by binary search on the arrival instants).
fn judge_windows(t: &mut Tally, arrivals: &[Arrival], windows: &[Window], restarts: &[Restart]) {
    let mut per_host: HashMap<usize, Vec<&Arrival>> = HashMap::new();
    for a in arrivals {
        per_host.entry(a.host).or_default().push(a);
    }
    for list in per_host.values_mut() {
        list.sort_by_key(|a| a.at);
    }
    // An arrival inside several overlapping windows is one violation (the first window's).
    let mut counted: HashMap<(usize, Instant, Option<u64>), ()> = HashMap::new();
    for w in windows {
        *t.windows_by_status.entry(w.status).or_default() += 1;
        let Some(list) = per_host.get(&w.host) else {
            continue;
        };
        let raced = restarts.iter().any(|r| {
            r.signal == Signal::Kill && w.opened + KILL_RACE >= r.sent && w.opened <= r.ready
        });
        let from = list.partition_point(|a| a.at < w.opened);
        let to = list.partition_point(|a| a.at < w.until);
        for a in &list[from..to] {
            if counted.insert((a.host, a.at, a.id), ()).is_some() {
                continue;
            }
            if a.at < w.opened + IN_FLIGHT_GRACE {
                t.in_flight_at_open += 1;
            } else if raced {
                t.kill_race += 1;
            } else {
                let across = restarts
                    .iter()
                    .find(|r| r.sent > w.opened && r.sent < a.at)
                    .map(|r| r.signal);
                t.violations.push(Violation {
                    arrival: (*a).clone(),
                    window: w.clone(),
                    across,
                });
            }
        }
    }
    t.violations.sort_by_key(|v| v.arrival.at);
}
