//! Accept loops for the proxy and admin ports, one task per connection, and graceful shutdown.
//!
//! Shutdown order: stop accepting, refuse everything still queued (503), let requests in flight finish
//! within `shutdown_grace_seconds`, then return. This module does not answer requests itself.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tracing::{debug, info, warn};

use crate::admin::Admin;
use crate::config::Config;
use crate::connections::Connections;
use crate::limiter::{Limiter, Swept};
use crate::metrics::Metrics;
use crate::proxy::Proxy;
use crate::state;
use crate::tls::{self, Interceptor, LocalCa};

/// The already-bound sockets courtesy serves on. Binding is the caller's job, so tests can bind
/// `127.0.0.1:0` and learn the port before starting.
#[derive(Debug)]
pub struct Listeners {
    /// The proxy port clients point HTTP_PROXY at.
    pub proxy: TcpListener,
    /// The admin API port.
    pub admin: TcpListener,
}

impl Listeners {
    /// Binds both addresses of `config`.
    pub async fn bind(config: &Config) -> anyhow::Result<Listeners> {
        let proxy = TcpListener::bind(config.proxy.listen)
            .await
            .with_context(|| {
                format!("cannot listen on {} ([proxy] listen)", config.proxy.listen)
            })?;
        let admin = TcpListener::bind(config.proxy.admin_listen)
            .await
            .with_context(|| {
                format!(
                    "cannot listen on {} ([proxy] admin_listen)",
                    config.proxy.admin_listen
                )
            })?;
        Ok(Listeners { proxy, admin })
    }
}

/// Serves until `shutdown` completes, then shuts down gracefully.
pub async fn run(
    listeners: Listeners,
    config: Config,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let proxy_addr = listeners.proxy.local_addr()?;
    let admin_addr = listeners.admin.local_addr()?;
    config
        .check_listen("[proxy] listen", proxy_addr)
        .map_err(anyhow::Error::msg)?;
    config
        .check_listen("[proxy] admin_listen", admin_addr)
        .map_err(anyhow::Error::msg)?;
    let ca = LocalCa::load_or_create(&config.proxy.state_dir)?;
    let interceptor = Arc::new(Interceptor::new(ca));
    let upstream_tls = tls::client_config(config.proxy.upstream_ca.as_deref())?;
    let config = Arc::new(config);
    let limiter = Limiter::new(config.clone());
    limiter.restore(&state::load(&config.proxy.state_dir));
    let metrics = Arc::new(Metrics::new(config.admin.metrics_max_hosts));
    let connections = Connections::new();
    let proxy = Arc::new(Proxy::new(
        config.clone(),
        limiter.clone(),
        vec![proxy_addr, admin_addr],
        interceptor.clone(),
        upstream_tls,
        metrics.clone(),
        connections.clone(),
    ));
    let admin = Arc::new(Admin::new(limiter.clone(), metrics.clone(), interceptor));
    let sweeper = tokio::spawn(sweep_idle_hosts(
        limiter.clone(),
        proxy.clone(),
        metrics,
        config.proxy.idle_host,
    ));
    let (stop_saver, saver_stop) = tokio::sync::oneshot::channel();
    let saver = tokio::spawn(save_state(limiter.clone(), saver_stop));
    let mut hangups = hangup_signals();
    info!(proxy = %proxy_addr, admin = %admin_addr, config = %config.source, "courtesy listening");

    let builder = Connections::builder(false);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listeners.proxy.accept() => {
                let Some((stream, peer)) = accepted_or_log(accepted).await else { continue };
                let proxy = proxy.clone();
                let service = service_fn(move |req| proxy.clone().serve(req, peer));
                let conn = builder
                    .serve_connection_with_upgrades(TokioIo::new(stream), service)
                    .into_owned();
                let connections_ = connections.clone();
                connections.spawn(async move {
                    if let Err(e) = connections_.serve(conn).await {
                        debug!(client = %peer, "client connection ended: {e}");
                    }
                });
            }
            accepted = listeners.admin.accept() => {
                let Some((stream, peer)) = accepted_or_log(accepted).await else { continue };
                let admin = admin.clone();
                let service = service_fn(move |req| admin.clone().serve(req, peer));
                let conn = builder.serve_connection(TokioIo::new(stream), service).into_owned();
                let connections_ = connections.clone();
                connections.spawn(async move {
                    if let Err(e) = connections_.serve(conn).await {
                        debug!(client = %peer, "admin connection ended: {e}");
                    }
                });
            }
            Some(()) = hangups.recv() => {
                if let Err(errors) = reload(&limiter) {
                    warn!("SIGHUP: the new config was rejected, the old one stays:\n{}", errors.join("\n"));
                }
            }
            () = &mut shutdown => break,
        }
    }
    drop(listeners);
    info!("shutting down: refusing queued requests, finishing those in flight");
    limiter.shutdown();
    sweeper.abort();
    let grace = config.proxy.shutdown_grace;
    if !connections.shut_down(grace).await {
        warn!(
            grace_s = grace.as_secs_f64(),
            "requests still in flight after shutdown_grace_seconds; closing them"
        );
    }
    let _ = stop_saver.send(());
    if let Err(e) = saver.await {
        warn!("the final state save failed: {e}");
    }
    info!("courtesy stopped");
    Ok(())
}

/// Re-reads the config file courtesy was started with and applies it. Listen addresses, the state
/// directory and upstream TLS settings need a restart; a change to them is reported and ignored.
/// On errors the old config stays.
pub fn reload(limiter: &Limiter) -> Result<String, Vec<String>> {
    let old = limiter.config();
    let path = std::path::Path::new(&old.source);
    if !path.is_file() {
        return Err(vec![format!(
            "courtesy was started without a config file ({}): nothing to reload",
            old.source
        )]);
    }
    let mut new = Config::load(path).map_err(|e| e.errors)?;
    let mut kept = Vec::new();
    if new.proxy.listen != old.proxy.listen {
        kept.push("listen");
    }
    if new.proxy.admin_listen != old.proxy.admin_listen {
        kept.push("admin_listen");
    }
    if new.proxy.state_dir != old.proxy.state_dir {
        kept.push("state_dir");
    }
    if new.proxy.upstream_ca != old.proxy.upstream_ca {
        kept.push("upstream_ca");
    }
    if new.proxy.connect_timeout != old.proxy.connect_timeout {
        kept.push("connect_timeout_seconds");
    }
    new.proxy.listen = old.proxy.listen;
    new.proxy.admin_listen = old.proxy.admin_listen;
    new.proxy.state_dir = old.proxy.state_dir.clone();
    new.proxy.upstream_ca = old.proxy.upstream_ca.clone();
    new.proxy.connect_timeout = old.proxy.connect_timeout;
    if !kept.is_empty() {
        warn!(keys = ?kept, "these [proxy] keys change only at a restart; their old values stay");
    }
    let summary = format!(
        "{}: {} host rules{}",
        new.source,
        new.hosts.len(),
        if kept.is_empty() {
            String::new()
        } else {
            format!(" (kept until a restart: {})", kept.join(", "))
        }
    );
    limiter.reload(Arc::new(new));
    Ok(summary)
}

/// SIGHUPs as a stream; a stream that never yields where they cannot be watched.
fn hangup_signals() -> tokio::sync::mpsc::Receiver<()> {
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

/// Saves what must survive a restart every few seconds when it changed, and once more when `stop`
/// fires; one task does all the writing, so a late periodic save can never overwrite the final one.
async fn save_state(limiter: Arc<Limiter>, mut stop: tokio::sync::oneshot::Receiver<()>) {
    let mut last = String::new();
    let mut ticker = tokio::time::interval(Duration::from_secs(5));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let stopping = tokio::select! {
            _ = ticker.tick() => false,
            _ = &mut stop => true,
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

/// The accepted connection, or `None` after logging a failed accept (and pausing briefly when the
/// process is out of file descriptors, instead of spinning).
async fn accepted_or_log(
    accepted: std::io::Result<(TcpStream, SocketAddr)>,
) -> Option<(TcpStream, SocketAddr)> {
    match accepted {
        Ok((stream, peer)) => {
            let _ = stream.set_nodelay(true);
            Some((stream, peer))
        }
        Err(e) => {
            warn!("accept failed: {e}");
            tokio::time::sleep(Duration::from_millis(50)).await;
            None
        }
    }
}

/// Forgets idle hosts (and their metrics series) every so often; a timer, not a poll.
async fn sweep_idle_hosts(
    limiter: Arc<Limiter>,
    proxy: Arc<Proxy>,
    metrics: Arc<Metrics>,
    idle: Duration,
) {
    let period = (idle / 4).clamp(Duration::from_secs(1), Duration::from_secs(60));
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // After a large sweep the forgotten hosts' idle upstream connections close within the pool's
    // idle timeout; their buffers are handed back to the OS once that has passed.
    let mut release_at: Option<tokio::time::Instant> = None;
    loop {
        ticker.tick().await;
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
            release_at = Some(now + crate::proxy::upstream_idle_timeout(idle) + period);
        } else if release_at.is_some_and(|at| at <= now) {
            release_at = None;
            let _ = tokio::task::spawn_blocking(crate::heap::release_free_memory).await;
        }
    }
}
