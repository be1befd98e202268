//! Start, accept, stop: [`run`] builds the shared parts (config in force, limiter, proxy, admin),
//! accepts on the proxy and admin ports with one task per connection, and shuts down gracefully.
//!
//! Shutdown order: stop accepting, refuse everything still queued (503), let requests in flight
//! (plain, and inside CONNECT tunnels) finish within `shutdown_grace_seconds`, save the state, then
//! return. This module does not answer requests itself (`proxy`, `admin`), and the work beside
//! serving (state saver, sweeper, SIGHUP) is `tasks`.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tracing::{debug, info, warn};

use crate::admin::reload::reload;
use crate::admin::Admin;
use crate::budget::keys::Keyer;
use crate::budget::limiter::Limiter;
use crate::config::{Config, LiveConfig};
use crate::front::connections::Connections;
use crate::front::gate::{self, Caps, Gate, Slot, Spare};
use crate::observe::metrics::Metrics;
use crate::proxy::{Proxy, UpstreamSetup};
use crate::serve::state;
use crate::serve::tasks::{hangup_signals, Background};
use crate::serve::unparsable::ParseRefusals;
use crate::upstream::resolve::{Destinations, Resolver};
use crate::upstream::tls::{self, Interceptor, LocalCa};

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
    config
        .check_admin_listen("[proxy] admin_listen", admin_addr)
        .map_err(anyhow::Error::msg)?;
    let mut config = config;
    let fd_limit = gate::raise_fd_limit();
    let (proxy_caps, admin_caps) = gate::fit_to_fd_limit(
        Caps {
            total: config.proxy.max_connections,
            per_client: config.proxy.max_connections_per_client,
        },
        Caps {
            total: config.admin.max_connections,
            per_client: config.admin.max_connections_per_client,
        },
        fd_limit,
    );
    config.proxy.max_upstream_connections = gate::upstream_fit(
        config.proxy.max_upstream_connections,
        proxy_caps,
        admin_caps,
        fd_limit,
    );
    if crate::util::files::tighten_dir(&config.proxy.state_dir)? {
        warn!(dir = %config.proxy.state_dir.display(), "the state directory was open to others; made it 0700");
    }
    for warning in config.warnings() {
        warn!("{warning}");
    }
    let ca = LocalCa::load_or_create(&config.proxy.state_dir)?;
    let interceptor = Arc::new(Interceptor::new(ca));
    let upstream_tls = tls::client_config(config.proxy.upstream_ca.as_deref())?;
    let config = Arc::new(config);
    let live = LiveConfig::new(config.clone());
    let limiter = match &config.shared {
        Some(settings) => {
            let store = crate::store::Store::new(settings).map_err(anyhow::Error::msg)?;
            // A store of another kind than the URL says is refused here; one that does not
            // answer starts this instance in fallback.
            store.check_at_start().await.map_err(anyhow::Error::msg)?;
            info!(store = %settings.redacted_url(), prefix = %settings.key_prefix, "budgets shared with the instances on this store");
            Limiter::with_store(live.clone(), store)
        }
        None => Limiter::with_live(live.clone()),
    };
    limiter.restore(&state::load(&config.proxy.state_dir));
    let mut metrics = Metrics::new(config.admin.metrics_max_hosts);
    if let Some(store) = limiter.store() {
        metrics = metrics.with_shared(store);
    }
    let metrics = Arc::new(metrics);
    let connections = Connections::new();
    // One resolver for keys and connections: the address a `key = "ip"` budget was made from is
    // the one connected to.
    let keyer = Keyer::new(
        Resolver::new(
            config.proxy.connect_timeout,
            config.proxy.static_hosts.clone(),
        )
        .refusing(Destinations::new(
            vec![proxy_addr, admin_addr],
            config.proxy.deny_destinations.clone(),
            config.proxy.allow_destinations.clone(),
        )),
    );
    let telemetry =
        crate::observe::telemetry::Telemetry::start(&config.telemetry, upstream_tls.clone())?;
    let proxy = Arc::new(
        Proxy::new(
            live.clone(),
            limiter.clone(),
            vec![proxy_addr, admin_addr],
            interceptor.clone(),
            UpstreamSetup {
                keyer: keyer.clone(),
                tls: upstream_tls,
            },
            metrics.clone(),
            connections.clone(),
        )
        .with_telemetry(telemetry.clone()),
    );
    let admin = Arc::new(
        Admin::new(
            live.clone(),
            limiter.clone(),
            keyer,
            metrics.clone(),
            interceptor,
        )
        .with_jobs(proxy.jobs().clone())
        .listening_on(admin_addr),
    );
    let background = Background::start(
        limiter.clone(),
        proxy.clone(),
        metrics,
        config.proxy.idle_host,
    );
    let mut hangups = hangup_signals();
    info!(proxy = %proxy_addr, admin = %admin_addr, config = %config.source, "courtesy listening");

    let header_timeout = config.proxy.header_timeout;
    let builder =
        Connections::builder_with(false, header_timeout, config.proxy.max_request_head_bytes);
    let proxy_gate = Gate::new(proxy_caps);
    let admin_gate = Gate::new(admin_caps);
    let mut proxy_spare = Spare::new();
    let mut admin_spare = Spare::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listeners.proxy.accept() => {
                let Some((stream, peer)) = proxy_spare.accepted(accepted, &listeners.proxy).await else { continue };
                let Some(slot) = admit(&live, &proxy_gate, &stream, peer) else { continue };
                let proxy = proxy.clone();
                let slot = Arc::new(slot);
                let (evicted, evicted_later) = (slot.evicted(), slot.evicted());
                let service = service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
                    // A CONNECT tunnel keeps the connection's place for its life.
                    req.extensions_mut().insert(slot.clone());
                    // Carried until its response has been sent: not closed to make room meanwhile.
                    gate::carry(&slot, proxy.clone().serve(req, peer))
                });
                let (builder, tasks) = (builder.clone(), connections.clone());
                connections.spawn(async move {
                    if !gate::first_byte(&stream, header_timeout, tasks.stopping(), evicted).await {
                        debug!(client = %peer, "closed before its first byte: header_timeout_seconds, or its place was needed");
                        return;
                    }
                    // hyper's own answer to a head it cannot parse gets its Proxy-Status here.
                    let conn = builder
                        .serve_connection_with_upgrades(TokioIo::new(ParseRefusals::new(stream)), service)
                        .into_owned();
                    if let Err(e) = tasks.serve_until(conn, evicted_later).await {
                        debug!(client = %peer, "client connection ended: {e}");
                    }
                });
            }
            accepted = listeners.admin.accept() => {
                let Some((stream, peer)) = admin_spare.accepted(accepted, &listeners.admin).await else { continue };
                let Some(slot) = admit(&live, &admin_gate, &stream, peer) else { continue };
                let admin = admin.clone();
                let slot = Arc::new(slot);
                let (evicted, evicted_later) = (slot.evicted(), slot.evicted());
                let service = service_fn(move |req| gate::carry(&slot, admin.clone().serve(req, peer)));
                let (builder, tasks) = (builder.clone(), connections.clone());
                connections.spawn(async move {
                    if !gate::first_byte(&stream, header_timeout, tasks.stopping(), evicted).await {
                        return;
                    }
                    let conn = builder.serve_connection(TokioIo::new(stream), service).into_owned();
                    if let Err(e) = tasks.serve_until(conn, evicted_later).await {
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
    let Listeners {
        proxy: proxy_listener,
        admin: admin_listener,
    } = listeners;
    drop(proxy_listener);
    info!("shutting down: refusing queued requests, finishing those in flight");
    limiter.shutdown();
    background.stop_sweeping();
    let grace = live.get().proxy.shutdown_grace;
    // The admin port stays open while requests drain, so that `/readyz` says 503 (draining) and
    // `/metrics` can still be read; its connections are not waited for.
    let drained = connections.shut_down(grace);
    tokio::pin!(drained);
    let finished = loop {
        tokio::select! {
            finished = &mut drained => break finished,
            accepted = admin_listener.accept() => {
                let Some((stream, peer)) = admin_spare.accepted(accepted, &admin_listener).await else { continue };
                let Some(slot) = admit(&live, &admin_gate, &stream, peer) else { continue };
                let admin = admin.clone();
                let service = service_fn(move |req| admin.clone().serve(req, peer));
                let conn = builder.serve_connection(TokioIo::new(stream), service).into_owned();
                tokio::spawn(async move {
                    let _slot = slot;
                    if let Err(e) = conn.await {
                        debug!(client = %peer, "admin connection during the drain ended: {e}");
                    }
                });
            }
        }
    };
    drop(admin_listener);
    if !finished {
        warn!(
            grace_s = grace.as_secs_f64(),
            "requests still in flight after shutdown_grace_seconds; closing them"
        );
    }
    background.finish().await;
    if let Some(telemetry) = telemetry {
        telemetry.shut_down().await;
    }
    info!("courtesy stopped");
    Ok(())
}

/// The place of a connection from `peer`, or `None` when it was refused (and closed): a client
/// outside `allow_clients` before a byte is read, one over a cap with a short 503.
fn admit(
    live: &LiveConfig,
    gate: &Arc<Gate>,
    stream: &TcpStream,
    peer: SocketAddr,
) -> Option<Slot> {
    if !live.get().client_allowed(peer.ip()) {
        debug!(client = %peer, "closed at accept: not in [proxy] allow_clients");
        return None;
    }
    match gate.admit(peer.ip()) {
        Ok(slot) => Some(slot),
        Err(why) => {
            debug!(client = %peer, ?why, "refused at accept: connection cap");
            gate::refuse_busy(stream, why);
            None
        }
    }
}
