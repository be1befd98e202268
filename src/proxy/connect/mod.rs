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
mod intercept;
pub(crate) mod sniff;
mod tunnel;
pub(crate) mod upgrade;

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::future::Either;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use rustls::ServerConfig;
use tokio::io::AsyncReadExt;
use tracing::{debug, info_span, warn, Instrument};

use crate::budget::jobs::{priority_of, Caller};
use crate::config::HttpsMode;
use crate::proxy::answer::body::ProxyBody;
use crate::proxy::answer::failure::Failure;
use crate::proxy::connect::inside::{Inside, Opened};
use crate::proxy::connect::sniff::{classify_opening, Opening, Prefixed};
use crate::proxy::forward::headers::own_cooldown_choice;
use crate::proxy::forward::target::Target;
use crate::proxy::Asking;
use crate::proxy::Proxy;
use crate::util::log_line::request::{lines_carry_requests, InRequest, TunnelLine};
use crate::util::log_line::AddrText;
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
        // The client connection's place (`max_connections`) is kept while the tunnel lives.
        let slot = req
            .extensions()
            .get::<Arc<crate::front::gate::Slot>>()
            .cloned();
        let asking = match asking_of(&mut req, caller, slot.clone()) {
            Ok(asking) => asking,
            Err(failure) => return failure.into_response(),
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
        let (span, tunnel_line) = tunnel_logged_as(client, &asking, &target, mode);
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
        let served = self.serve_connect(
            req,
            Opened {
                target,
                client,
                asking,
                opening,
            },
            leaf,
        );
        let served = match tunnel_line {
            Some(line) => Either::Left(InRequest::tunnel(served, line)),
            None => Either::Right(served.instrument(span)),
        };
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
        opened: Opened,
        leaf: Option<Arc<ServerConfig>>,
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
                let inside = Inside::new(opened, Scheme::Http);
                self.serve_inside(stream, inside).await
            }
            (Opening::Tls, Some(leaf)) => self.intercept_tls(stream, opened, leaf).await,
            (_, None) => self.tunnel(stream, opened.target, &opened.asking).await,
            (_, Some(_)) => {
                warn!("refused a CONNECT tunnel that carries neither TLS nor HTTP (no blind tunnels in intercept mode)");
            }
        }
    }
}

/// Who asks through a CONNECT, and what they asked of courtesy on it: a `Courtesy-On-Cooldown`
/// (undici's ProxyAgent sends its `headers` there) holds for the tunnel's turn and for every
/// request inside that does not make its own, and so does a priority (the credentials of the
/// CONNECT name the job of every request); `slot` is the client connection's place.
fn asking_of(
    req: &mut Request<Incoming>,
    caller: Caller,
    slot: Option<Arc<crate::front::gate::Slot>>,
) -> Result<Asking, Failure> {
    let choice = own_cooldown_choice(req.headers_mut())?;
    let priority = priority_of(
        req.headers_mut(),
        caller.priority(),
        caller.settings.is_some(),
    )
    .map_err(Failure::bad_request)?;
    Ok(Asking {
        on_cooldown: choice.or(caller.on_cooldown()),
        caller,
        priority,
        slot,
    })
}

/// What a tunnel's lines say of it: its fields carried beside its future when lines carry their
/// requests (no span to open), else the `connect` span.
fn tunnel_logged_as(
    client: SocketAddr,
    asking: &Asking,
    target: &Target,
    mode: HttpsMode,
) -> (tracing::Span, Option<Arc<TunnelLine>>) {
    if lines_carry_requests() {
        let line = TunnelLine {
            client,
            job: asking.caller.state.name.clone(),
            host: target.to_string(),
            mode: format!("{mode:?}"),
        };
        return (tracing::Span::none(), Some(Arc::new(line)));
    }
    let span = info_span!("connect", client = %AddrText(client), job = asking.caller.name(), host = %target, ?mode);
    (span, None)
}
