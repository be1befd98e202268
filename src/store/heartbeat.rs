//! The heartbeat: once a second (ten times a second while fewer are live than expected) this
//! instance tells the store it is alive and counts the live instances (the fallback share when `instances` is not set), renews the leases of its turns in
//! flight, and, while in fallback, is the probe that finds the store again.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::{sleep_until, Instant};
use tokio_util::sync::CancellationToken;

use super::calls::{GroupKeys, HeartbeatCall, RenewCall};
use super::{micros, RedisStore};
use crate::util::locks::lock;

/// How often the heartbeat beats.
const BEAT: Duration = Duration::from_secs(1);

/// How often it beats while fewer instances are live than expected: instances that start one
/// after another then see each other within a fraction of a second, instead of keeping to a part
/// of each budget (see `RedisStore::live_part`) for a whole beat.
const QUICK_BEAT: Duration = Duration::from_millis(100);

/// An instance counts as live this long after its last beat.
const LIVE_FOR: Duration = Duration::from_secs(5);

/// The share in fallback is taken from the most instances counted in this long.
const REMEMBER: Duration = Duration::from_secs(600);

/// Beats until `stop`; then takes this instance out of the live set.
pub(crate) async fn run_heartbeat(store: Arc<RedisStore>, stop: CancellationToken) {
    let mut next = Instant::now();
    let mut counts: VecDeque<(Instant, u32)> = VecDeque::new();
    let mut last_renewal = Instant::now();
    store.load_scripts().await;
    loop {
        tokio::select! {
            _ = sleep_until(next) => {}
            _ = stop.cancelled() => break,
        }
        next = Instant::now() + BEAT;
        // While in fallback: a Sentinel master that moved is found again, and a store that could
        // not be checked at start is checked before the instance rejoins it.
        if store.in_fallback() && !store.ready_to_rejoin().await {
            continue;
        }
        let Some(live) = store.beat().await else {
            continue;
        };
        let now = Instant::now();
        counts.push_back((now, live));
        while counts
            .front()
            .is_some_and(|(at, _)| now.duration_since(*at) > REMEMBER)
        {
            counts.pop_front();
        }
        let most = counts.iter().map(|(_, n)| *n).max().unwrap_or(live);
        store.seen.store(most, Ordering::Release);
        store.live_now.store(live, Ordering::Release);
        if store.live_part() < 1.0 {
            next = now + QUICK_BEAT;
        }
        if store.rejoin(&format!(
            "the heartbeat was answered by {}",
            store.conn.describe(&store.settings)
        )) {
            // The store may have restarted empty: its script cache too.
            store.load_scripts().await;
        }
        if now.duration_since(last_renewal) >= store.settings.lease / 3 {
            last_renewal = now;
            store.renew_leases().await;
        }
    }
    store.leave().await;
}

impl RedisStore {
    /// One beat: the number of live instances, or `None` if the store did not answer.
    async fn beat(&self) -> Option<u32> {
        let call = HeartbeatCall {
            prefix: self.prefix(),
            now: None,
            instance: &self.instance,
            live_for_us: micros(LIVE_FOR),
        };
        let reply = self.run(&call).await.ok()?;
        self.read_clock(reply.now);
        Some(reply.live)
    }

    /// Keeps the leases of this instance's turns in flight from running out while they last.
    async fn renew_leases(&self) {
        let hosts: Vec<(Arc<str>, Vec<String>)> = lock(&self.live)
            .iter()
            .filter(|(_, members)| !members.is_empty())
            .map(|(h, m)| (h.clone(), m.clone()))
            .collect();
        for (host, members) in hosts {
            let call = RenewCall {
                prefix: self.prefix(),
                host: &host,
                now: None,
                lease_us: micros(self.settings.lease),
                members: &members,
            };
            if self.run(&call).await.is_err() {
                return;
            }
        }
    }

    /// Takes this instance out of the live set at shutdown, so that the others' count is right
    /// at once rather than after [`LIVE_FOR`].
    async fn leave(&self) {
        let cmd = redis::cmd("ZREM")
            .arg(
                GroupKeys {
                    prefix: self.prefix(),
                }
                .instances_key(),
            )
            .arg(&self.instance)
            .clone();
        let _ = tokio::time::timeout(self.settings.timeout, self.conn.command(&cmd)).await;
    }
}
