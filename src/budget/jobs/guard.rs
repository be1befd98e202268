//! Wrong credentials: counted (`courtesy_auth_failures_total`), logged at most once a second
//! (with how many were not), and slowed per client address: after [`FREE_STRIKES`] failures
//! within [`FORGET_AFTER`], each further 407 to that address is held a delay that doubles per
//! failure up to [`MAX_DELAY`], so guessing tokens costs time. The table of addresses is bounded
//! ([`MAX_ADDRESSES`]: the stalest entry makes room) and its lock is never held across an await
//! (the caller sleeps after [`AuthGuard::failed`] returns).
//!
//! An address is a client as `crate::wire::client_group` groups it (an IPv6 client by its /64,
//! so that rotating through a /64 does not reset the brake). A held 407 keeps its connection, so
//! at most [`MAX_HELD_PER_ADDRESS`] are held at once per address ([`AuthGuard::hold`]); the rest
//! are answered at once and their connections closed: on a shared NAT address, a guesser's held
//! answers can never fill the address's connection slots.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Failures of one address answered at once; the next ones are delayed.
pub(super) const FREE_STRIKES: u32 = 3;
/// The delay of the first slowed failure; it doubles per failure.
const FIRST_DELAY: Duration = Duration::from_millis(50);
/// The longest delay of one answer.
pub(super) const MAX_DELAY: Duration = Duration::from_secs(5);
/// An address with no failure for this long starts again with a clean slate.
const FORGET_AFTER: Duration = Duration::from_secs(600);
/// Addresses with failures remembered at once.
const MAX_ADDRESSES: usize = 4096;
/// 407s held at once per address; beyond them, each is answered at once with `Connection: close`.
pub(crate) const MAX_HELD_PER_ADDRESS: usize = 4;

/// One address's recent failures.
#[derive(Debug, Clone, Copy)]
struct Strikes {
    count: u32,
    last: Instant,
}

/// Wrong credentials, counted, rate-limited in the log, and slowed per address.
#[derive(Debug, Default)]
pub struct AuthGuard {
    failures: AtomicU64,
    strikes: Mutex<HashMap<IpAddr, Strikes>>,
    /// 407s being held now, per address (only addresses with one: bounded by the connections).
    held: Mutex<HashMap<IpAddr, usize>>,
    /// When a failure was last logged, and how many were not since.
    log: Mutex<Option<(Instant, u64)>>,
}

impl AuthGuard {
    /// Failures counted since start (`courtesy_auth_failures_total`).
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    /// Counts one failure of `client` (an address as `crate::wire::client_group` groups it) at
    /// `now`; returns how long its 407 is held, and whether to log it (with the count of
    /// failures not logged since the last line).
    pub fn failed(&self, client: IpAddr, now: Instant) -> (Duration, Option<u64>) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        let count = {
            let mut table = crate::util::locks::lock(&self.strikes);
            if !table.contains_key(&client) && table.len() >= MAX_ADDRESSES {
                table.retain(|_, s| now.saturating_duration_since(s.last) < FORGET_AFTER);
                if table.len() >= MAX_ADDRESSES {
                    let stalest = table.iter().min_by_key(|(_, s)| s.last).map(|(a, _)| *a);
                    if let Some(stalest) = stalest {
                        table.remove(&stalest);
                    }
                }
            }
            let strikes = table.entry(client).or_insert(Strikes {
                count: 0,
                last: now,
            });
            if now.saturating_duration_since(strikes.last) >= FORGET_AFTER {
                strikes.count = 0;
            }
            strikes.count = strikes.count.saturating_add(1);
            strikes.last = now;
            strikes.count
        };
        let log = {
            let mut log = crate::util::locks::lock(&self.log);
            match &mut *log {
                Some((at, skipped))
                    if now.saturating_duration_since(*at) < Duration::from_secs(1) =>
                {
                    *skipped += 1;
                    None
                }
                _ => {
                    let skipped = log.map_or(0, |(_, s)| s);
                    *log = Some((now, 0));
                    Some(skipped)
                }
            }
        };
        (delay_after(count), log)
    }
}

/// One held 407 of an address's, counted until it drops.
#[derive(Debug)]
pub(crate) struct Held<'a> {
    guard: &'a AuthGuard,
    client: IpAddr,
}

impl AuthGuard {
    /// A place to hold one more 407 of `client` (grouped as [`AuthGuard::failed`] is given it),
    /// or `None` when [`MAX_HELD_PER_ADDRESS`] are held already: that one is answered at once.
    pub(crate) fn hold(&self, client: IpAddr) -> Option<Held<'_>> {
        let mut held = crate::util::locks::lock(&self.held);
        let count = held.entry(client).or_insert(0);
        if *count >= MAX_HELD_PER_ADDRESS {
            return None;
        }
        *count += 1;
        Some(Held {
            guard: self,
            client,
        })
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        let mut held = crate::util::locks::lock(&self.guard.held);
        if let Some(count) = held.get_mut(&self.client) {
            *count -= 1;
            if *count == 0 {
                held.remove(&self.client);
            }
        }
    }
}

/// How long the answer to an address's `count`-th failure in a row is held.
fn delay_after(count: u32) -> Duration {
    if count <= FREE_STRIKES {
        return Duration::ZERO;
    }
    let doublings = (count - FREE_STRIKES - 1).min(16);
    FIRST_DELAY.saturating_mul(1 << doublings).min(MAX_DELAY)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delay_grows_after_free_strikes_and_is_bounded() {
        let guard = AuthGuard::default();
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let b: IpAddr = "127.0.0.2".parse().unwrap();
        let now = Instant::now();
        let delays: Vec<_> = (0..12).map(|_| guard.failed(a, now).0).collect();
        assert_eq!(&delays[..3], &[Duration::ZERO; 3]);
        assert_eq!(delays[3], FIRST_DELAY);
        assert_eq!(delays[4], FIRST_DELAY * 2);
        assert!(delays.windows(2).all(|w| w[1] >= w[0]), "{delays:?}");
        assert_eq!(delays[11], MAX_DELAY);
        assert_eq!(guard.failed(b, now).0, Duration::ZERO, "per address");
        assert_eq!(guard.failures(), 13);
        let held: Vec<_> = (0..MAX_HELD_PER_ADDRESS)
            .map_while(|_| guard.hold(a))
            .collect();
        assert_eq!(held.len(), MAX_HELD_PER_ADDRESS);
        assert!(
            guard.hold(a).is_none(),
            "the held 407s of one address are capped"
        );
        assert!(guard.hold(b).is_some(), "per address");
        drop(held);
        assert!(guard.hold(a).is_some());
        // Quiet for long enough, an address starts again.
        assert_eq!(guard.failed(a, now + FORGET_AFTER).0, Duration::ZERO);
    }

    #[test]
    fn the_log_says_at_most_one_line_a_second_and_the_table_is_bounded() {
        let guard = AuthGuard::default();
        let now = Instant::now();
        let logged: Vec<_> = (0..MAX_ADDRESSES as u32 + 100)
            .map(|i| guard.failed(IpAddr::from(i.to_be_bytes()), now).1)
            .collect();
        assert_eq!(logged.iter().filter(|l| l.is_some()).count(), 1);
        assert!(crate::util::locks::lock(&guard.strikes).len() <= MAX_ADDRESSES);
        let later = guard.failed("10.0.0.1".parse().unwrap(), now + Duration::from_secs(1));
        assert_eq!(
            later.1,
            Some(MAX_ADDRESSES as u64 + 99),
            "says what it skipped"
        );
    }
}
