//! Start, accept, stop: [`run`] is three steps. [`Parts::build`] makes everything both ports
//! share (the config in force, limiter, store, proxy, admin, background tasks); [`Parts::serve`]
//! accepts on the proxy and admin ports with one task per connection until shutdown is asked for;
//! [`Parts::drain`] shuts down in order.
//!
//! Shutdown order: stop accepting, refuse everything still queued (503), stop the sweeper, let
//! requests in flight (plain, and inside CONNECT tunnels) finish within `shutdown_grace_seconds`,
//! save the state, then return. This module does not answer requests itself (`proxy`, `admin`),
//! and the work beside serving (state saver, sweeper, SIGHUP) is `tasks`.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use crate::admin::reload::reload;
use crate::admin::Admin;
use crate::budget::keys::Keyer;
use crate::budget::limiter::Limiter;
use crate::config::{Config, LiveConfig};
use crate::front::client_io::ClientIo;
use crate::front::connections::Connections;
use crate::front::gate::{self, Caps, Gate, Slot, Spare};
use crate::observe::events::Hub;
use crate::observe::metrics::Metrics;
use crate::observe::telemetry::Telemetry;
use crate::proxy::{holds_its_connection, Proxy, UpstreamSetup};
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

/// Serves until `shutdown` completes, then shuts down gracefully: build, serve, drain.
pub async fn run(
    listeners: Listeners,
    config: Config,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let (mut parts, mut ports) = Parts::build(listeners, config).await?;
    info!(
        proxy = %ports.proxy.addr,
        admin = %ports.admin.addr,
        config = %parts.live.get().source,
        "courtesy listening"
    );
    parts.serve(&mut ports, shutdown).await;
    parts.drain(ports).await;
    info!("courtesy stopped");
    Ok(())
}

/// Everything both ports share, made once at start by [`Parts::build`], used by
/// [`Parts::serve`] and taken apart by [`Parts::drain`]: one struct, so that neither needs a
/// dozen arguments.
struct Parts {
    /// The config in force: `allow_clients` at accept, the grace at shutdown.
    live: LiveConfig,
    /// The budgets; refuses what is queued at shutdown.
    limiter: Arc<Limiter>,
    /// The proxy port's service.
    proxy: Arc<Proxy>,
    /// The admin port's service.
    admin: Arc<Admin>,
    /// Every connection task the drain waits for (the admin port's while serving included).
    connections: Connections,
    /// The HTTP server settings of both ports (one bound on a request head for both).
    http: http1::Builder,
    /// `header_timeout_seconds`: how long a new connection may stay silent.
    header_timeout: Duration,
    /// `send_timeout_seconds`: how long a client may take no byte courtesy sends it.
    send_timeout: Duration,
    /// The state saver, the sweeper, the store's tasks.
    background: Background,
    /// The trace exporter, flushed last.
    telemetry: Option<Arc<Telemetry>>,
    /// SIGHUPs, each a reload.
    hangups: mpsc::Receiver<()>,
}

/// Both listening ports.
struct Ports {
    /// Where clients send proxy requests.
    proxy: Port,
    /// The admin API, open until the drain ends.
    admin: Port,
}

/// One listening port: its socket, the caps its connections count against, its spare
/// descriptor. Both ports accept through [`Port::let_in`].
struct Port {
    listener: TcpListener,
    /// The address it listens on, for the log.
    addr: SocketAddr,
    gate: Arc<Gate>,
    spare: Spare,
}

/// A connection accepted and admitted by [`Port::let_in`], with its place under the port's caps.
struct Accepted {
    stream: TcpStream,
    peer: SocketAddr,
    slot: Slot,
}

impl Parts {
    /// Checks the listeners against `config`, fits the connection caps under the open file limit,
    /// and makes the shared parts in the order their start-up lines are logged; the store (with
    /// `[shared]`) is asked once here, and the background tasks started last.
    async fn build(listeners: Listeners, config: Config) -> anyhow::Result<(Parts, Ports)> {
        let proxy_addr = listeners.proxy.local_addr()?;
        let admin_addr = listeners.admin.local_addr()?;
        check_addresses(&config, proxy_addr, admin_addr)?;
        let mut config = config;
        let (proxy_caps, admin_caps) = fit_to_descriptors(&mut config, proxy_addr);
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
        let (limiter, events) = start_limiter(&config, &live).await?;
        let metrics = metrics_for(&config, &limiter);
        let connections = Connections::new();
        let keyer = keyer_for(&config, [proxy_addr, admin_addr]);
        let telemetry = Telemetry::start(&config.telemetry, upstream_tls.clone())?;
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
        let admin = admin_beside(
            &proxy,
            (&live, &events),
            &limiter,
            keyer,
            &metrics,
            interceptor,
            admin_addr,
        );
        let background = Background::start(
            limiter.clone(),
            proxy.clone(),
            metrics,
            config.proxy.idle_host,
        );
        let parts = Parts {
            live,
            limiter,
            proxy,
            admin,
            connections,
            http: Connections::listener(
                config.proxy.header_timeout,
                config.proxy.max_request_head_bytes,
            ),
            header_timeout: config.proxy.header_timeout,
            send_timeout: config.proxy.send_timeout,
            background,
            telemetry,
            hangups: hangup_signals(),
        };
        let ports = Ports {
            proxy: Port::new(listeners.proxy, proxy_addr, proxy_caps),
            admin: Port::new(listeners.admin, admin_addr, admin_caps),
        };
        Ok((parts, ports))
    }

    /// Accepts on both ports, one task per connection, and reloads the config on SIGHUP, until
    /// `shutdown` completes.
    async fn serve(&mut self, ports: &mut Ports, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                accepted = ports.proxy.listener.accept() => {
                    if let Some(accepted) = ports.proxy.let_in(accepted, &self.live).await {
                        self.serve_proxy(accepted);
                    }
                }
                accepted = ports.admin.listener.accept() => {
                    if let Some(accepted) = ports.admin.let_in(accepted, &self.live).await {
                        self.serve_admin(accepted);
                    }
                }
                Some(()) = self.hangups.recv() => {
                    if let Err(errors) = reload(&self.limiter) {
                        warn!("SIGHUP: the new config was rejected, the old one stays:\n{}", errors.join("\n"));
                    }
                }
                () = &mut shutdown => break,
            }
        }
    }

    /// Serves a connection of the proxy port on a task the drain waits for: closed if silent for
    /// `header_timeout_seconds`, its place kept while it carries a request (or a CONNECT tunnel).
    fn serve_proxy(&self, accepted: Accepted) {
        let Accepted { stream, peer, slot } = accepted;
        let proxy = self.proxy.clone();
        let slot = Arc::new(slot);
        let (evicted, evicted_later) = (slot.evicted(), slot.evicted());
        let watched = slot.clone();
        let service = service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
            // A CONNECT tunnel or a WebSocket keeps the connection's place for its life. Only
            // those get it: the first extension of a request allocates its map.
            if holds_its_connection(req.method(), req.headers()) {
                req.extensions_mut().insert(slot.clone());
            }
            // Carried until its response has been sent: not closed to make room meanwhile. Not
            // boxed: hyper keeps the request's future in a place it allocates once per
            // connection, and a box of our own cost a large allocation and its free per request
            // on top of the same move (about 2 % of a request's CPU, benches/RESULTS.md section
            // 22); `proxy::forward::future_sizes` keeps the future small enough to move.
            gate::carry(&slot, proxy.clone().serve(req, peer))
        });
        let (http, tasks, header_timeout, send_timeout) = (
            self.http.clone(),
            self.connections.clone(),
            self.header_timeout,
            self.send_timeout,
        );
        self.connections.spawn(async move {
            if !gate::first_byte(&stream, header_timeout, tasks.stopping(), evicted).await {
                debug!(client = %peer, "closed before its first byte: header_timeout_seconds, or its place was needed");
                return;
            }
            // A client that takes no byte for send_timeout_seconds is cut; the first bytes of a
            // request keep the connection from being closed to make room.
            let io = ClientIo::new(stream, send_timeout, Some(watched));
            // hyper's own answer to a head it cannot parse gets its Proxy-Status here.
            let conn = http
                .serve_connection(TokioIo::new(ParseRefusals::new(io)), service)
                .with_upgrades();
            if let Err(e) = tasks.serve_until(conn, evicted_later).await {
                debug!(client = %peer, "client connection ended: {e}");
            }
        });
    }

    /// Serves a connection of the admin port while courtesy serves: on a task the drain waits
    /// for, like the proxy port's.
    fn serve_admin(&self, accepted: Accepted) {
        let Accepted { stream, peer, slot } = accepted;
        let admin = self.admin.clone();
        let slot = Arc::new(slot);
        let (evicted, evicted_later) = (slot.evicted(), slot.evicted());
        let watched = slot.clone();
        let service = service_fn(move |req| gate::carry(&slot, admin.clone().serve(req, peer)));
        let (http, tasks, header_timeout, send_timeout) = (
            self.http.clone(),
            self.connections.clone(),
            self.header_timeout,
            self.send_timeout,
        );
        self.connections.spawn(async move {
            if !gate::first_byte(&stream, header_timeout, tasks.stopping(), evicted).await {
                return;
            }
            let io = ClientIo::new(stream, send_timeout, Some(watched));
            let conn = http.serve_connection(TokioIo::new(io), service);
            if let Err(e) = tasks.serve_until(conn, evicted_later).await {
                debug!(client = %peer, "admin connection ended: {e}");
            }
        });
    }

    /// Serves a connection of the admin port during the drain, on a task of its own that the
    /// drain does not wait for (so that `/readyz` and `/metrics` can be read meanwhile).
    fn serve_admin_draining(&self, accepted: Accepted) {
        let Accepted { stream, peer, slot } = accepted;
        let admin = self.admin.clone();
        let service = service_fn(move |req| admin.clone().serve(req, peer));
        let conn = self.http.serve_connection(TokioIo::new(stream), service);
        tokio::spawn(async move {
            let _slot = slot;
            if let Err(e) = conn.await {
                debug!(client = %peer, "admin connection during the drain ended: {e}");
            }
        });
    }

    /// The ordered shutdown: stop accepting on the proxy port, refuse everything queued (503),
    /// stop the sweeper, give connections in flight up to `shutdown_grace_seconds` (the admin
    /// port still answering), then stop the background tasks, whose state saver writes once more,
    /// and flush the traces.
    async fn drain(self, ports: Ports) {
        let Ports {
            proxy: proxy_port,
            admin: mut admin_port,
        } = ports;
        drop(proxy_port);
        info!("shutting down: refusing queued requests, finishing those in flight");
        self.limiter.shutdown();
        // Every event stream ends, so that the drain does not wait on an admin connection.
        self.admin.events_hub().close();
        self.background.stop_sweeping();
        let grace = self.live.get().proxy.shutdown_grace;
        // The admin port stays open while requests drain, so that `/readyz` says 503 (draining) and
        // `/metrics` can still be read; its connections are not waited for.
        let drained = self.connections.shut_down(grace);
        tokio::pin!(drained);
        let finished = loop {
            tokio::select! {
                finished = &mut drained => break finished,
                accepted = admin_port.listener.accept() => {
                    if let Some(accepted) = admin_port.let_in(accepted, &self.live).await {
                        self.serve_admin_draining(accepted);
                    }
                }
            }
        };
        drop(admin_port);
        if !finished {
            warn!(
                grace_s = grace.as_secs_f64(),
                "requests still in flight after shutdown_grace_seconds; closing them"
            );
        }
        self.background.finish().await;
        if let Some(telemetry) = self.telemetry {
            telemetry.shut_down().await;
        }
    }
}

impl Port {
    /// `listener`, bound at `addr`, under `caps`.
    fn new(listener: TcpListener, addr: SocketAddr, caps: Caps) -> Port {
        Port {
            listener,
            addr,
            gate: Gate::new(caps),
            spare: Spare::new(),
        }
    }

    /// What became of one `accept` on this port: the connection with its place, or `None` when
    /// the accept failed (the spare descriptor used, a short pause) or the connection was refused
    /// and closed (`let_in`). Both ports, serving and draining, accept through here.
    async fn let_in(
        &mut self,
        accepted: std::io::Result<(TcpStream, SocketAddr)>,
        live: &LiveConfig,
    ) -> Option<Accepted> {
        let (stream, peer) = self.spare.accepted(accepted, &self.listener).await?;
        let slot = let_in(live, &self.gate, &stream, peer)?;
        Some(Accepted { stream, peer, slot })
    }
}

/// Refuses listeners that `config` forbids: the addresses of `[proxy] listen` and `admin_listen`
/// as bound (a port 0 bound already has its number).
fn check_addresses(
    config: &Config,
    proxy_addr: SocketAddr,
    admin_addr: SocketAddr,
) -> anyhow::Result<()> {
    config
        .check_listen("[proxy] listen", proxy_addr)
        .map_err(anyhow::Error::msg)?;
    config
        .check_listen("[proxy] admin_listen", admin_addr)
        .map_err(anyhow::Error::msg)?;
    config
        .check_admin_listen("[proxy] admin_listen", admin_addr)
        .map_err(anyhow::Error::msg)?;
    Ok(())
}

/// Raises the open file limit and fits under it the caps of both ports (returned: proxy, admin)
/// and `max_upstream_connections` (lowered in `config`).
fn fit_to_descriptors(config: &mut Config, proxy_addr: SocketAddr) -> (Caps, Caps) {
    let fd_limit = gate::raise_fd_limit();
    let admin = Caps {
        total: config.admin.max_connections,
        per_client: config.admin.max_connections_per_client,
    };
    let asked = gate::Asked {
        total: config.proxy.max_connections,
        per_client: config.proxy.max_connections_per_client,
    };
    let loopback = proxy_addr.ip().is_loopback();
    let proxy = gate::proxy_caps(asked, admin, fd_limit, loopback);
    let (proxy_caps, admin_caps) = gate::fit_to_fd_limit(proxy, admin, fd_limit);
    info!(
        fd_limit = fd_limit.unwrap_or(0),
        max_connections = proxy_caps.total,
        max_connections_per_client = proxy_caps.per_client,
        "connection caps"
    );
    config.proxy.max_upstream_connections = gate::upstream_fit(
        config.proxy.max_upstream_connections,
        proxy_caps,
        admin_caps,
        fd_limit,
    );
    (proxy_caps, admin_caps)
}

/// The metrics, with the shared store's series when the limiter has a store.
fn metrics_for(config: &Config, limiter: &Limiter) -> Arc<Metrics> {
    let mut metrics = Metrics::new(config.admin.metrics_max_hosts);
    if let Some(store) = limiter.store() {
        metrics = metrics.with_shared(store);
    }
    Arc::new(metrics)
}

/// One resolver for keys and connections: the address a `key = "ip"` budget was made from is
/// the one connected to. It refuses courtesy's own listeners (`own`) and the denied networks.
fn keyer_for(config: &Config, own: [SocketAddr; 2]) -> Keyer {
    Keyer::new(
        Resolver::new(
            config.proxy.connect_timeout,
            config.proxy.static_hosts.clone(),
        )
        .refusing(Destinations::new(
            own.to_vec(),
            config.proxy.deny_destinations.clone(),
            config.proxy.allow_destinations.clone(),
        )),
    )
}

/// The admin API over the parts `proxy` shares with it: its jobs, sockets, the hosts it sent
/// unsigned over plain http, its robots.txt cache, and the proxy itself for `/v1/check`.
fn admin_beside(
    proxy: &Arc<Proxy>,
    (live, events): (&LiveConfig, &Arc<Hub>),
    limiter: &Arc<Limiter>,
    keyer: Keyer,
    metrics: &Arc<Metrics>,
    interceptor: Arc<Interceptor>,
    admin_addr: SocketAddr,
) -> Arc<Admin> {
    Arc::new(
        Admin::new(
            live.clone(),
            limiter.clone(),
            keyer,
            metrics.clone(),
            interceptor,
        )
        .with_jobs(proxy.jobs().clone())
        .with_sockets(proxy.sockets().clone())
        .with_plain_unsigned(proxy.plain_unsigned().clone())
        .with_robots(proxy.robots().clone())
        .with_checker(proxy.clone())
        .with_events(events.clone())
        .listening_on(admin_addr),
    )
}

/// The hub of `GET /v1/events`, hearing every host event `limiter` tells from now on, with room
/// for streams on half the admin listener's connections.
fn events_of(limiter: &Limiter, config: &Config) -> Arc<Hub> {
    let hub = Arc::new(Hub::for_admin(config.admin.max_connections));
    let publisher = hub.clone();
    limiter
        .herald()
        .listen(move |event| publisher.publish(&event));
    hub
}

/// The limiter, local or on the `[shared]` store (checked once: a store of another kind than the
/// URL says is refused, one that does not answer starts this instance in fallback), with the
/// hosts of the state file restored.
async fn start_limiter(
    config: &Config,
    live: &LiveConfig,
) -> anyhow::Result<(Arc<Limiter>, Arc<Hub>)> {
    let limiter = match &config.shared {
        Some(settings) => {
            let store = crate::store::RedisStore::new(settings).map_err(anyhow::Error::msg)?;
            store.check_at_start().await.map_err(anyhow::Error::msg)?;
            info!(store = %settings.redacted_url(), prefix = %settings.key_prefix, "budgets shared with the instances on this store");
            Limiter::with_store(live.clone(), store)
        }
        None => Limiter::with_live(live.clone()),
    };
    // Heard before the restore: a cooldown kept from the last run is told like a new one.
    let events = events_of(&limiter, config);
    limiter.restore(&state::load(&config.proxy.state_dir));
    Ok((limiter, events))
}

/// The place of a connection from `peer`, or `None` when it was refused (and closed): a client
/// outside `allow_clients` before a byte is read, one over a cap with a short 503.
fn let_in(
    live: &LiveConfig,
    gate: &Arc<Gate>,
    stream: &TcpStream,
    peer: SocketAddr,
) -> Option<Slot> {
    if !live.get().client_allowed(peer.ip()) {
        debug!(client = %peer, "closed at accept: not in [proxy] allow_clients");
        return None;
    }
    match gate.let_in(peer.ip()) {
        Ok(slot) => Some(slot),
        Err(why) => {
            debug!(client = %peer, ?why, "refused at accept: connection cap");
            gate::refuse_busy(stream, why);
            None
        }
    }
}
