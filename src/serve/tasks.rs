//! The work courtesy does beside serving requests, each a timer and never a poll: saving what must
//! survive a restart, forgetting idle hosts (and their metrics series and robots.txt answers),
//! the shared store's heartbeat and hints, and turning SIGHUPs into reloads.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, warn};

use crate::budget::limiter::{Limiter, Swept};
use crate::observe::metrics::Metrics;
use crate::proxy::Proxy;
use crate::serve::state;

/// The running background tasks. One stop signal reaches them all: a root token whose children
/// each task watches (the sweeper's may be stopped first), and one tracker that the shutdown
/// waits on.
#[derive(Debug)]
pub(crate) struct Background {
    stop: CancellationToken,
    /// Stopped at the start of a shutdown, before the rest.
    sweeping: CancellationToken,
    tasks: TaskTracker,
    /// The state saver, whose failure (a panic) is worth a line at the end.
    saver: JoinHandle<()>,
}

impl Background {
    /// Starts the sweeper (every `idle_host_seconds / 4`, between 1 s and 60 s), the state saver,
    /// the timer that tells the ends of cooldowns and pauses (`GET /v1/events`) and, with a
    /// shared store, its heartbeat, releaser of ended turns and hint subscriber.
    pub(crate) fn start(
        limiter: Arc<Limiter>,
        proxy: Arc<Proxy>,
        metrics: Arc<Metrics>,
        idle: Duration,
    ) -> Self {
        let stop = CancellationToken::new();
        let sweeping = stop.child_token();
        let tasks = TaskTracker::new();
        tasks.spawn(sweep_idle_hosts(
            limiter.clone(),
            proxy,
            metrics,
            idle,
            sweeping.clone(),
        ));
        if let Some(store) = limiter.store() {
            tasks.spawn(crate::store::run_heartbeat(
                store.clone(),
                stop.child_token(),
            ));
            tasks.spawn(crate::store::run_releases(
                store.clone(),
                stop.child_token(),
            ));
            let table = limiter.clone();
            tasks.spawn(crate::store::run_hints(
                store.clone(),
                move |hint| table.apply_hint(hint),
                stop.child_token(),
            ));
        }
        tasks.spawn(limiter.clone().announce_ends(stop.child_token()));
        let saver = tasks.spawn(save_state(limiter, stop.child_token()));
        tasks.close();
        Background {
            stop,
            sweeping,
            tasks,
            saver,
        }
    }

    /// Stops sweeping (at the start of a shutdown, so no host is forgotten while requests finish).
    pub(crate) fn stop_sweeping(&self) {
        self.sweeping.cancel();
    }

    /// Stops every task and waits for them: the state is saved one last time, and this instance
    /// leaves the shared store's live set.
    pub(crate) async fn finish(self) {
        self.stop.cancel();
        self.tasks.wait().await;
        if let Err(e) = self.saver.await {
            warn!("the final state save failed: {e}");
        }
    }
}

/// SIGHUPs as a stream; a stream that never yields where they cannot be watched.
pub(crate) fn hangup_signals() -> tokio::sync::mpsc::Receiver<()> {
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(mut hup) => {
            tokio::spawn(async move {
                while hup.recv().await.is_some() {
                    if tx.send(()).await.is_err() {
                        break;
                    }
                }
            });
        }
        Err(e) => warn!("cannot watch SIGHUP (reload through POST /reload instead): {e}"),
    }
    rx
}

/// How long the saver waits after a cooldown or pause began before it writes, so that a wave of
/// 429s from many hosts becomes one write.
const SAVE_DEBOUNCE: Duration = Duration::from_millis(10);

/// Saves what must survive a restart within milliseconds of a cooldown, block pause or operator's
/// change, every few seconds when anything else changed (learned rates), and once more when `stop`
/// fires; one task does all the writing, so a late periodic save can never overwrite the final one.
async fn save_state(limiter: Arc<Limiter>, stop: CancellationToken) {
    let mut last = String::new();
    let mut ticker = tokio::time::interval(Duration::from_secs(5));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let stopping = tokio::select! {
            _ = ticker.tick() => false,
            () = limiter.state_changed() => {
                tokio::time::sleep(SAVE_DEBOUNCE).await;
                false
            }
            () = stop.cancelled() => true,
        };
        let dir = limiter.config().proxy.state_dir.clone();
        let records = limiter.records();
        let previous = if stopping {
            String::new()
        } else {
            last.clone()
        };
        let saved =
            tokio::task::spawn_blocking(move || state::save(&dir, &records, &previous)).await;
        match saved {
            Ok(Some(text)) => last = text,
            Ok(None) => {}
            Err(e) => {
                warn!("state saver failed: {e}");
                last = String::new();
            }
        }
        if stopping {
            return;
        }
    }
}

/// Forgets idle hosts (and their metrics series) every so often, until `stop`; a timer, not a
/// poll.
async fn sweep_idle_hosts(
    limiter: Arc<Limiter>,
    proxy: Arc<Proxy>,
    metrics: Arc<Metrics>,
    idle: Duration,
    stop: CancellationToken,
) {
    let period = (idle / 4).clamp(Duration::from_secs(1), Duration::from_secs(60));
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // After a large sweep the forgotten hosts' idle upstream connections close within the pool's
    // idle timeout; their buffers are handed back to the OS once that has passed.
    let mut release_at: Option<tokio::time::Instant> = None;
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            () = stop.cancelled() => return,
        }
        // With a million known hosts a sweep takes a few hundred milliseconds: not on a worker
        // that serves requests.
        let table = limiter.clone();
        let swept = tokio::task::spawn_blocking(move || table.sweep_idle(idle))
            .await
            .unwrap_or(Swept {
                forgotten: 0,
                released: false,
            });
        proxy.sweep_robots();
        proxy.jobs().sweep(crate::budget::jobs::UNNAMED_IDLE);
        if swept.forgotten > 0 {
            let unlabelled = metrics.forget_unknown_hosts(&limiter);
            debug!(
                swept = swept.forgotten,
                released = swept.released,
                unlabelled,
                left = limiter.host_count(),
                "idle hosts forgotten"
            );
        }
        let now = tokio::time::Instant::now();
        if swept.released {
            release_at = Some(now + crate::upstream::pool::upstream_idle_timeout(idle) + period);
        } else if release_at.is_some_and(|at| at <= now) {
            release_at = None;
            let _ = tokio::task::spawn_blocking(crate::util::heap::release_free_memory).await;
        }
    }
}
