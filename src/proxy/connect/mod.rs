//! CONNECT, from the request to the last byte: the port and loop checks, the 200, a look at the
//! first bytes inside (`sniff.rs`), then one of three ways on:
//!
//! - TLS in `intercept` mode: terminated with a leaf from the local CA (SNI decides the name), and
//!   every decrypted request goes back through `forward_inside`, paced like plain http;
//! - plain HTTP inside the tunnel: served and forwarded the same way;
//! - anything else in `tunnel` mode: one admission, then bytes copied both ways, the host's
//!   concurrency slot held for the tunnel's whole life; only to `connect_ports`, within the
//!   share of upstream connections sockets may hold (`max_upstream_sockets`), closed after
//!   `socket_idle_timeout_seconds` without a byte or when its host is paused.
//!
//! A served tunnel's connection counts as carrying a request only while one inside is in flight
//! (`inside.rs`): idle, it may be closed to make room, and after `header_timeout_seconds` without
//! a request it closes (HTTP/2 with a GOAWAY). Each HTTP/2 stream in flight inside counts as one
//! of the client's connections, and at most `tunnel_max_streams` are open at once.
//!
//! In intercept mode a CONNECT to any port is accepted, since whatever courtesy serves inside is
//! paced request by request; a tunnel that carries neither TLS nor HTTP is closed unopened.
//!
//! Work that outlives the CONNECT request runs through [`crate::front::connections::Connections`], so a
//! shutdown waits for requests in flight inside tunnels as for any other. Certificates are minted by
//! `crate::upstream::tls`; this module only asks for them.

pub(crate) mod inside;
pub(crate) mod sniff;
pub(crate) mod upgrade;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rustls::ServerConfig;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::LazyConfigAcceptor;
use tracing::{debug, info, info_span, warn, Instrument};

use crate::budget::jobs::{priority_of, Caller};
use crate::budget::limiter::Admission;
use crate::config::{HttpsMode, Route};
use crate::front::connections::Connections;
use crate::front::gate::{Busy, Carried};
use crate::front::sockets::{self, Ended, Kind, SocketCaps};
use crate::proxy::answer::body::ProxyBody;
use crate::proxy::answer::failure::Failure;
use crate::proxy::answer::response::ProxyError;
use crate::proxy::connect::inside::{watch_session, InFlight, Inside, InsideBusy};
use crate::proxy::connect::sniff::{classify_opening, Opening, Prefixed};
use crate::proxy::forward::headers::own_cooldown_choice;
use crate::proxy::forward::target::Target;
use crate::proxy::Asking;
use crate::proxy::Proxy;
use crate::upstream::parent::tcp::{self, TcpFault};
use crate::upstream::parent::{self, OpenError};
use crate::wire::scheme::Scheme;

impl Proxy {
    /// Answers `CONNECT host:port` with 200 and hands what comes inside to a task of its own.
    pub(super) async fn connect(
        self: Arc<Self>,
        mut req: Request<Incoming>,
        client: SocketAddr,
        caller: Caller,
    ) -> Response<ProxyBody> {
        let target = match Target::of_connect(req.uri()) {
            Ok(t) => t,
            Err(failure) => return failure.into_response(),
        };
        // A choice on the CONNECT (undici's ProxyAgent sends its `headers` there) holds for the
        // tunnel's turn and for every request inside that does not make its own.
        let choice = match own_cooldown_choice(req.headers_mut()) {
            Ok(choice) => choice,
            Err(failure) => return failure.into_response(),
        };
        // So does a priority (the credentials of the CONNECT name the job of every request).
        let priority = match priority_of(
            req.headers_mut(),
            caller.priority(),
            caller.settings.is_some(),
        ) {
            Ok(priority) => priority,
            Err(why) => return Failure::bad_request(why).into_response(),
        };
        // The client connection's place (`max_connections`) is kept while the tunnel lives.
        let slot = req
            .extensions()
            .get::<Arc<crate::front::gate::Slot>>()
            .cloned();
        let asking = Asking {
            on_cooldown: choice.or(caller.on_cooldown()),
            caller,
            priority,
            slot: slot.clone(),
        };
        let config = self.config.get();
        let mode = config.policy_for(&target.host, target.port).forward.https;
        // `connect_ports` bounds blind tunnels only: in intercept mode whatever comes through is
        // HTTP or TLS that courtesy serves and paces itself (undici sends http:// to any port
        // through CONNECT), and anything else is refused after the first bytes.
        if mode == HttpsMode::Tunnel && !config.proxy.connect_ports.contains(&target.port) {
            return Failure::denied(format!(
                "CONNECT to port {} is not allowed ([proxy] connect_ports = {:?})",
                target.port, config.proxy.connect_ports
            ))
            .into_response();
        }
        if let Some(failure) = self.loops.refuse(&target, req.headers()) {
            return failure.into_response();
        }
        if let Some(failure) = self.refuse_destination(&target).await {
            return failure.into_response();
        }
        let span = info_span!("connect", client = %client, job = asking.caller.name(), host = %target, ?mode);
        // Mint (or find) the leaf now, so that a name no certificate can carry is a clear answer.
        let leaf = match mode {
            HttpsMode::Intercept => match self.interceptor.server_config(&target.host) {
                Ok(config) => Some(config),
                Err(e) => return Failure::bad_request(e.to_string()).into_response(),
            },
            HttpsMode::Tunnel => None,
        };
        // The connection carries its CONNECT until the first request inside begins (a blind
        // tunnel: for its life); then only while a request inside is in flight, so that an idle
        // tunnel may be closed to make room like an idle kept-alive connection.
        let opening = slot.as_ref().map(|slot| slot.carrying());
        let connections = self.connections.clone();
        let served = self
            .serve_connect(req, target, leaf, client, (asking, opening))
            .instrument(span);
        connections.spawn(async move {
            let _slot = slot;
            served.await
        });
        Response::new(ProxyBody::empty())
    }

    /// Serves what comes through an accepted CONNECT to `target` (after the 200 has been sent).
    /// `leaf` is the server config for the CONNECT host in intercept mode, `None` in tunnel mode.
    async fn serve_connect(
        self: Arc<Self>,
        req: Request<Incoming>,
        target: Target,
        leaf: Option<Arc<ServerConfig>>,
        client: SocketAddr,
        (asking, opening): (Asking, Option<Busy>),
    ) {
        let upgraded = match hyper::upgrade::on(req).await {
            Ok(u) => u,
            Err(e) => {
                debug!("CONNECT upgrade failed: {e}");
                return;
            }
        };
        let mut io = TokioIo::new(upgraded);
        let mut first = Vec::with_capacity(16);
        let first_bytes_timeout = self.config.get().proxy.header_timeout;
        let kind = loop {
            let mut buf = [0u8; 16];
            let want = 16 - first.len();
            let read = tokio::select! {
                read = tokio::time::timeout(first_bytes_timeout, io.read(&mut buf[..want])) => read,
                () = self.connections.stopping() => return,
            };
            match read {
                Ok(Ok(0)) | Err(_) => return,
                Ok(Ok(n)) => first.extend_from_slice(&buf[..n]),
                Ok(Err(e)) => {
                    debug!("tunnel read failed: {e}");
                    return;
                }
            }
            match classify_opening(&first) {
                Opening::Undecided if first.len() < 16 => continue,
                Opening::Undecided => break Opening::Other,
                decided => break decided,
            }
        };
        let stream = Prefixed::new(Bytes::from(first), io);
        match (kind, leaf) {
            (Opening::PlainHttp, _) => {
                let inside = Inside::new(target, Scheme::Http, client, (asking, opening));
                self.serve_inside(stream, inside).await
            }
            (Opening::Tls, Some(leaf)) => {
                self.intercept_tls(stream, target, leaf, client, (asking, opening))
                    .await
            }
            (_, None) => self.tunnel(stream, target, &asking).await,
            (_, Some(_)) => {
                warn!("refused a CONNECT tunnel that carries neither TLS nor HTTP (no blind tunnels in intercept mode)");
            }
        }
    }

    /// Terminates TLS with a leaf for the name the client asked for: SNI when it names another host
    /// than the CONNECT, else `leaf` (the CONNECT host's).
    async fn intercept_tls<S>(
        self: Arc<Self>,
        stream: S,
        target: Target,
        leaf: Arc<ServerConfig>,
        client: SocketAddr,
        (asking, opening): (Asking, Option<Busy>),
    ) where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let acceptor = LazyConfigAcceptor::new(rustls::server::Acceptor::default(), stream);
        let handshake_timeout = self.config.get().proxy.header_timeout;
        let start = match tokio::time::timeout(handshake_timeout, acceptor).await {
            Ok(Ok(start)) => start,
            Ok(Err(e)) => {
                debug!("TLS ClientHello from the client failed: {e}");
                return;
            }
            Err(_) => return,
        };
        // The SNI in its canonical spelling (`crate::wire::host_name`), as the target's host is, so
        // that a spelling of the CONNECT's own name reuses the leaf made for it.
        let sni = start.client_hello().server_name().map(|name| {
            crate::wire::host_name::canonical(name).unwrap_or_else(|_| name.to_ascii_lowercase())
        });
        let config = match sni.filter(|name| *name != target.host) {
            None => leaf,
            Some(name) => match self.interceptor.server_config(&name) {
                Ok(c) => c,
                Err(e) => {
                    warn!("cannot intercept: {e}");
                    return;
                }
            },
        };
        match start.into_stream(config).await {
            Ok(tls) => {
                let inside = Inside::new(target, Scheme::Https, client, (asking, opening));
                self.serve_inside(tls, inside).await
            }
            Err(e) => debug!("TLS handshake with the client failed: {e}"),
        }
    }

    /// Serves HTTP/1.1 or HTTP/2 on `stream`; every request goes to the tunnel's target through
    /// the proxy. The session ends when it has had no request in flight for
    /// `header_timeout_seconds` (HTTP/2: a GOAWAY), when its connection's place is needed for
    /// another while it is idle, or at shutdown.
    async fn serve_inside<S>(self: Arc<Self>, stream: S, inside: Inside)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let connections = self.connections.clone();
        let (max_head_bytes, idle_limit, max_streams) = {
            let config = self.config.get();
            let proxy = &config.proxy;
            (
                proxy.max_request_head_bytes,
                proxy.header_timeout,
                proxy.tunnel_max_streams,
            )
        };
        let evicted = inside.asking.slot.as_ref().map(|slot| slot.evicted());
        let inside = Arc::new(inside);
        let watched = inside.clone();
        let service = service_fn(move |req: Request<Incoming>| {
            let (proxy, inside) = (self.clone(), inside.clone());
            let in_flight = inside.begin();
            async move { Ok::<_, Infallible>(proxy.serve_one_inside(req, &inside, in_flight).await) }
        });
        let mut builder = Connections::builder_with(true, idle_limit, max_head_bytes);
        builder
            .http2()
            .max_concurrent_streams(u32::try_from(max_streams).unwrap_or(u32::MAX));
        // With upgrades: a WebSocket handshake inside the tunnel switches on a `101` (`upgrade.rs`).
        let conn = builder
            .serve_connection_with_upgrades(TokioIo::new(stream), service)
            .into_owned();
        let close = async move {
            let evicted = async move {
                match evicted {
                    Some(evicted) => evicted.await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = watch_session(&watched, idle_limit) => debug!("tunnel idle for header_timeout_seconds: closing"),
                () = evicted => debug!("idle tunnel closed to make room"),
            }
        };
        if let Err(e) = connections.serve_until(conn, close).await {
            debug!("connection inside the tunnel ended: {e}");
        }
    }

    /// One request inside a tunnel (counted in flight, its connection held: `Inside::begin`),
    /// over HTTP/2 counted as one of the client's connections until the answer has been sent (a
    /// client may not carry more than its share on one connection), else a local 503.
    async fn serve_one_inside(
        self: Arc<Self>,
        req: Request<Incoming>,
        inside: &Inside,
        in_flight: InFlight,
    ) -> Response<Carried<ProxyBody, InsideBusy>> {
        let slot = inside.asking.slot.as_ref();
        let extra = match slot {
            Some(slot) if req.version() == http::Version::HTTP_2 => match slot.extra() {
                Ok(extra) => Some(extra),
                Err(refused) => {
                    let answer = crate::proxy::answer::response::local(
                        StatusCode::SERVICE_UNAVAILABLE,
                        ProxyError::ConnectionLimitReached,
                        &refused.to_string(),
                        Some(Duration::from_secs(1)),
                    );
                    return answer.map(|body| Carried::new(body, (None, in_flight)));
                }
            },
            _ => None,
        };
        let response = self.forward_inside(req, &inside).await;
        response.map(|body| Carried::new(body, (extra, in_flight)))
    }

    /// Admits and dials a blind tunnel, then copies `client` bytes both ways.
    async fn tunnel<S>(&self, mut client: S, target: Target, asking: &Asking)
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let policy = self.config.get().policy_for(&target.host, target.port);
        let budget = match self.budget_key(&target, &policy).await {
            Ok(budget) => budget,
            Err(failure) => {
                warn!(
                    error = failure.kind.token(),
                    "tunnel refused: {}", failure.details
                );
                return;
            }
        };
        let admitted = self
            .limiter
            .admit(
                Admission::of(&budget)
                    .on_cooldown(asking.on_cooldown)
                    .job(asking.caller.tag(), asking.priority),
            )
            .await;
        let mut permit = match admitted {
            Ok(p) => p,
            Err(refusal) => {
                info!(reason = ?refusal, "tunnel refused locally");
                return;
            }
        };
        // A share of the upstream table that tunnels and sockets may hold, then a slot in it.
        let (caps, idle_timeout) = {
            let config = self.config.get();
            let caps = SocketCaps {
                per_client: config.proxy.max_websockets_per_client,
                per_host: config.proxy.max_websockets_per_host,
            };
            (caps, config.proxy.socket_idle_timeout)
        };
        let open = match self.sockets.open(Kind::Tunnel, &budget.key, caps) {
            Ok(open) => open,
            Err(full) => {
                warn!(error = "connection_limit_reached", "tunnel refused: {full}");
                return;
            }
        };
        let slot = match self.client.slots().take().await {
            Ok(slot) => slot,
            Err(full) => {
                // Never sent: the token goes back when the permit drops.
                warn!(error = "connection_limit_reached", "tunnel refused: {full}");
                return;
            }
        };
        permit.mark_sent();
        let _slot = slot;
        match self.dial(&target).await {
            Ok(mut upstream) => {
                info!(wait_ms = permit.waited().as_millis() as u64, "tunnel open");
                let closing = open.closing();
                match sockets::pipe(&mut client, &mut upstream, idle_timeout, closing).await {
                    Ended::Done(Ok((up, down))) => {
                        debug!(bytes_up = up, bytes_down = down, "tunnel closed")
                    }
                    Ended::Done(Err(e)) => debug!("tunnel ended: {e}"),
                    Ended::Idle => info!(
                        idle_s = idle_timeout.as_secs_f64(),
                        "tunnel closed: no byte either way for socket_idle_timeout_seconds"
                    ),
                    Ended::Closed => {
                        info!(
                            "tunnel closed: its host was paused or blocked, or the operator asked"
                        )
                    }
                }
            }
            Err(failure) => {
                if let Some(parent) = failure.parent.as_deref() {
                    self.metrics
                        .parent_failure(None, &parent.next_hop, parent.kind.label());
                }
                warn!(
                    error = failure.kind.token(),
                    "tunnel connect failed: {}", failure.details
                )
            }
        }
        drop(permit);
    }

    /// Connects a TCP stream to the target for a tunnel, straight or through the host's parent
    /// proxy, with the same timeouts and error mapping as forwarded requests.
    async fn dial(&self, target: &Target) -> Result<TcpStream, Failure> {
        let config = self.config.get();
        let timeout = config.proxy.connect_timeout;
        if let Route::Parent(parent) = &config
            .policy_for(&target.host, target.port)
            .forward
            .upstream
        {
            if let Some(failure) = self.loops.refuse_parent(parent) {
                return Err(failure);
            }
            let opened = parent::open(parent, &target.host, target.port, &self.resolver, timeout);
            return opened.await.map_err(|e| match e {
                OpenError::Parent(e) => Failure::of_parent(&e),
                OpenError::TargetDns(e) => Failure::of_dns(&e),
            });
        }
        tcp::connect_target(&self.resolver, &target.host, target.port, timeout)
            .await
            .map_err(|fault| match fault {
                TcpFault::Dns(e) => Failure::of_dns(&e),
                TcpFault::Io(e) => Failure::of_io(&e, &target.key()),
                TcpFault::Timeout(addr) => Failure::new(
                    StatusCode::GATEWAY_TIMEOUT,
                    ProxyError::ConnectionTimeout,
                    format!(
                        "no TCP connection to {addr} within {}s",
                        timeout.as_secs_f64()
                    ),
                ),
            })
    }
}
