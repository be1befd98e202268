//! CONNECT, from the request to the last byte: the port and loop checks, the 200, a look at the
//! first bytes inside (`sniff.rs`), then one of three ways on:
//!
//! - TLS in `intercept` mode: terminated with a leaf from the local CA (SNI decides the name), and
//!   every decrypted request goes back through `forward_inside`, paced like plain http;
//! - plain HTTP inside the tunnel: served and forwarded the same way;
//! - anything else in `tunnel` mode: one admission, then bytes copied both ways, the host's
//!   concurrency slot held for the tunnel's whole life; only to `connect_ports`.
//!
//! In intercept mode a CONNECT to any port is accepted, since whatever courtesy serves inside is
//! paced request by request; a tunnel that carries neither TLS nor HTTP is closed unopened.
//!
//! Work that outlives the CONNECT request runs through [`crate::front::connections::Connections`], so a
//! shutdown waits for requests in flight inside tunnels as for any other. Certificates are minted by
//! `crate::upstream::tls`; this module only asks for them.

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

use super::failure::Failure;
use super::headers::own_cooldown_choice;
use super::sniff::{classify_opening, Opening, Prefixed};
use super::target::Target;
use super::Asking;
use super::Proxy;
use crate::budget::jobs::{priority_of, Caller};
use crate::budget::limiter::Admission;
use crate::config::{HttpsMode, Route};
use crate::front::connections::Connections;
use crate::proxy::body::ProxyBody;
use crate::proxy::response::ProxyError;
use crate::upstream::parent::tcp::{self, TcpFault};
use crate::upstream::parent::{self, OpenError};
use crate::wire::scheme::Scheme;

/// How long a client may take to send its first bytes (and its TLS ClientHello) after the 200.
const FIRST_BYTES_TIMEOUT: Duration = Duration::from_secs(30);

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
        // A tunnel carries a request for its life: its connection is never closed to make room.
        let carrying = slot.as_ref().map(|slot| slot.carrying());
        let connections = self.connections.clone();
        let served = self
            .serve_connect(req, target, leaf, client, asking)
            .instrument(span);
        connections.spawn(async move {
            let _slot = slot;
            let _carrying = carrying;
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
        asking: Asking,
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
        let opening = loop {
            let mut buf = [0u8; 16];
            let want = 16 - first.len();
            let read = tokio::select! {
                read = tokio::time::timeout(FIRST_BYTES_TIMEOUT, io.read(&mut buf[..want])) => read,
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
        match (opening, leaf) {
            (Opening::PlainHttp, _) => {
                self.serve_inside(stream, target, Scheme::Http, client, asking)
                    .await
            }
            (Opening::Tls, Some(leaf)) => {
                self.intercept_tls(stream, target, leaf, client, asking)
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
        asking: Asking,
    ) where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let acceptor = LazyConfigAcceptor::new(rustls::server::Acceptor::default(), stream);
        let start = match tokio::time::timeout(FIRST_BYTES_TIMEOUT, acceptor).await {
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
                self.serve_inside(tls, target, Scheme::Https, client, asking)
                    .await
            }
            Err(e) => debug!("TLS handshake with the client failed: {e}"),
        }
    }

    /// Serves HTTP/1.1 or HTTP/2 on `stream`; every request goes to `target` through the proxy.
    async fn serve_inside<S>(
        self: Arc<Self>,
        stream: S,
        target: Target,
        scheme: Scheme,
        client: SocketAddr,
        asking: Asking,
    ) where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let connections = self.connections.clone();
        let max_head_bytes = self.config.get().proxy.max_request_head_bytes;
        let service = service_fn(move |req: Request<Incoming>| {
            let (proxy, target, asking) = (self.clone(), target.clone(), asking.clone());
            async move {
                Ok::<_, Infallible>(
                    proxy
                        .forward_inside(req, target, scheme, client, &asking)
                        .await,
                )
            }
        });
        let builder = Connections::builder(true, max_head_bytes);
        // With upgrades: a WebSocket handshake inside the tunnel switches on a `101` (`upgrade.rs`).
        let conn = builder
            .serve_connection_with_upgrades(TokioIo::new(stream), service)
            .into_owned();
        if let Err(e) = connections.serve(conn).await {
            debug!("connection inside the tunnel ended: {e}");
        }
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
                match tokio::io::copy_bidirectional(&mut client, &mut upstream).await {
                    Ok((up, down)) => debug!(bytes_up = up, bytes_down = down, "tunnel closed"),
                    Err(e) => debug!("tunnel ended: {e}"),
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
