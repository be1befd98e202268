//! Forgetting idle hosts: a host with nothing queued, nothing in flight, a full bucket and nothing
//! remembered (no cooldown, no lowered rate) is dropped from the table, so that a host that comes
//! back starts exactly as a fresh one would, and a crawl over a million hosts keeps only the ones in
//! use. After a large sweep, freed memory goes back to the OS.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use super::Limiter;

/// Hosts a sweep must have forgotten (since the peak) before it shrinks the table and returns freed
/// memory to the OS (a few hundred KiB at least; below that, trimming costs more than it gives).
const RELEASE_AFTER_SWEEPING: usize = 1024;

impl Limiter {
    /// Forgets hosts idle for `idle` with nothing queued or in flight and a full bucket, so that a
    /// host that comes back starts exactly as a fresh one would. Returns how many were dropped.
    /// See [`Limiter::sweep_idle`].
    pub fn sweep(&self, idle: Duration) -> usize {
        self.sweep_idle(idle).forgotten
    }

    /// Like [`Limiter::sweep`], and says whether freed memory went back to the OS: when the table
    /// has shrunk to half its peak since the last release, by at least `RELEASE_AFTER_SWEEPING`
    /// hosts. A crawl in steady state (as many new hosts as forgotten ones) reuses the memory
    /// instead, and never pays for a trim, which briefly holds the allocator's locks. Takes about
    /// 0.3 µs per known host: call it off the async workers (`spawn_blocking`).
    pub fn sweep_idle(&self, idle: Duration) -> Swept {
        let now = Instant::now();
        let before = self.hosts.len();
        self.hosts.retain(|_, host| {
            let mut state = host.lock();
            // Read under the lock: a socket is counted before its turn ends (`into_meter`).
            let sockets = self.sockets.count(&host.key);
            !(sockets == 0 && state.retire_if_idle(idle, now))
        });
        let after = self.hosts.len();
        let peak = self
            .peak_hosts
            .fetch_max(before, Ordering::Relaxed)
            .max(before);
        let released = peak - after >= RELEASE_AFTER_SWEEPING && after <= peak / 2;
        if released {
            // The table keeps its capacity and the allocator its freed blocks: hand both back, so
            // that memory returns close to where it was before those hosts came.
            if after < self.hosts.capacity() / 4 {
                self.hosts.shrink_to_fit();
            }
            crate::util::heap::release_free_memory();
            self.peak_hosts.store(after, Ordering::Relaxed);
        }
        Swept {
            forgotten: before - after,
            released,
        }
    }
}

/// What one sweep did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Swept {
    /// Hosts forgotten.
    pub forgotten: usize,
    /// Whether freed memory was handed back to the OS.
    pub released: bool,
}
