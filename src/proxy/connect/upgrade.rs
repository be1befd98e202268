//! WebSockets through courtesy (`Upgrade: websocket` only: see [`asked_protocol`]). The handshake
//! is a request like any other: it waits for the host's turn, holds a concurrency slot until its
//! answer, and is paced, refused, paused and reported like the rest. This module owns what
//! differs:
//!
//! - reading the client's wish (`Connection: upgrade` and `Upgrade: websocket` on an HTTP/1.1
//!   request, absolute-form `ws://` read as `http://`, or HTTP/2's extended CONNECT inside
//!   interception, RFC 8441) and passing it on as an HTTP/1.1 handshake, past the hop-by-hop
//!   strip;
//! - on the origin's `101`, joining the client's connection to the origin's: bytes copied both
//!   ways unpaced, charged to the host's byte budget ([`ByteMeter`]), the turn ended (its slot
//!   freed: an open socket would otherwise starve the host's page requests), the socket counted
//!   apart (`websockets_open` in `/hosts`);
//! - the bounds (`crate::front::sockets`): a place per client, per host and among the upstream
//!   connections sockets may hold, taken before the handshake goes (else a local 503); the socket
//!   closed after `socket_idle_timeout_seconds` without a byte, and when its host is paused;
//! - the origin's `101` joined only when it accepts the key sent (`Sec-WebSocket-Accept`): any
//!   other 101 is a 502, since a joined connection is a pipe no turn paces;
//! - shutdown: the socket is a task of [`crate::front::connections::Connections`], closed once
//!   `shutdown_grace_seconds` have passed after shutdown began.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use http::header::{
    HeaderValue, CONNECTION, SEC_WEBSOCKET_ACCEPT, SEC_WEBSOCKET_KEY, SEC_WEBSOCKET_VERSION,
    UPGRADE, VIA,
};
use http::{HeaderMap, Method, Response, StatusCode, Uri, Version};
use hyper::body::Incoming;
use hyper::ext::Protocol;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use ring::digest::{digest, SHA1_FOR_LEGACY_USE_ONLY};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tracing::{debug, info};

use crate::budget::limiter::ByteMeter;
use crate::front::gate::{Busy, Extra, Slot};
use crate::front::sockets::{self, Ended, Kind, OpenSocket, SocketCaps, Sockets};
use crate::proxy::answer::body::ProxyBody;
use crate::proxy::answer::failure::Failure;
use crate::proxy::answer::response;
use crate::proxy::forward::headers::strip_hop_by_hop;
use crate::proxy::send::exchange::TurnHeld;
use crate::proxy::Proxy;
use crate::upstream::pool::IdleMark;
use crate::util::log_line::request::InRequest;
use crate::wire::proxy_status::ProxyError;

/// The GUID a server appends to the client's key for `Sec-WebSocket-Accept` (RFC 6455 1.3).
const WEBSOCKET_GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// A client's request to switch protocols: its half of the connection once the `101` is sent,
/// and the protocol it asked for (`Upgrade`, passed on as sent).
#[derive(Debug)]
pub(crate) struct ClientUpgrade {
    on: OnUpgrade,
    protocol: HeaderValue,
    /// How the client asked, and so how it is answered.
    form: Form,
    /// For an extended CONNECT: the `Sec-WebSocket-Key` courtesy sent upstream in its name.
    key: Option<String>,
    /// For an HTTP/1.1 handshake: the client's own `Sec-WebSocket-Key`, which the origin's
    /// `Sec-WebSocket-Accept` must answer.
    client_key: Option<String>,
    /// The client connection's place (`max_connections`): the socket keeps it, marked as
    /// carrying a request, so that it counts against the client's caps and is never closed to
    /// make room.
    slot: Option<Arc<Slot>>,
    /// The socket's place among the open sockets (`crate::front::sockets`), taken before the
    /// handshake is sent ([`ClientUpgrade::place`]).
    open: Option<OpenSocket>,
    /// For an extended CONNECT: the socket counted as one of the client's connections.
    extra: Option<Extra>,
}

/// `ws://host/path` in absolute form (a client that sends WebSockets to an HTTP proxy without
/// CONNECT) as the `http://` URL it stands for (RFC 6455 3); any other URI is left alone.
pub(crate) fn ws_as_http(uri: &mut Uri) {
    if !uri
        .scheme_str()
        .is_some_and(|s| s.eq_ignore_ascii_case("ws"))
    {
        return;
    }
    let rest = uri.path_and_query().map_or("/", |p| p.as_str());
    let Some(authority) = uri.authority() else {
        return;
    };
    if let Ok(http) = format!("http://{authority}{rest}").parse() {
        *uri = http;
    }
}

/// The protocol an HTTP/1.1 request asks to switch to, when its `Connection` names `upgrade`:
/// `websocket` only. A WebSocket's frames are one conversation; any other protocol (`h2c`
/// above all, a whole multiplexed HTTP/2 connection) would carry requests past the budget
/// unpaced, so its `Upgrade` goes with the other hop-by-hop headers and the request is an
/// ordinary one.
fn asked_protocol(version: Version, headers: &HeaderMap) -> Option<HeaderValue> {
    if version != Version::HTTP_11 {
        return None;
    }
    let upgrade_named = headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|token| token.trim().eq_ignore_ascii_case("upgrade"));
    let websocket = headers
        .get_all(UPGRADE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|token| token.trim().eq_ignore_ascii_case("websocket"));
    (upgrade_named && websocket).then(|| HeaderValue::from_static("websocket"))
}

/// Takes the client's upgrade out of a request head (before its hop-by-hop headers go): `Some`
/// for an HTTP/1.1 request that asks to switch protocols on a connection that can.
/// How a client asks for a WebSocket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    /// HTTP/1.1: `Connection: upgrade`, `Upgrade: websocket`, answered `101`.
    Upgrade,
    /// HTTP/2's extended CONNECT (RFC 8441: `:method CONNECT`, `:protocol websocket`), answered
    /// `200`; the stream then carries the frames. Sent upstream as an HTTP/1.1 handshake.
    ExtendedConnect,
}

/// Whether the request is an HTTP/2 extended CONNECT for a WebSocket (RFC 8441).
fn is_extended_connect(parts: &http::request::Parts) -> bool {
    parts.version == Version::HTTP_2
        && parts.method == Method::CONNECT
        && parts
            .extensions
            .get::<Protocol>()
            .is_some_and(|p| p.as_str().eq_ignore_ascii_case("websocket"))
}

/// Whether a request may hold its client connection's place for a life of its own (a CONNECT
/// tunnel, a WebSocket): the server gives the connection's [`Slot`] only to these, which
/// `Proxy::connect` and [`take`] read; for any other request it would only cost an allocation.
pub(crate) fn holds_its_connection(method: &Method, headers: &HeaderMap) -> bool {
    method == Method::CONNECT || headers.contains_key(UPGRADE)
}

/// Takes the client's upgrade out of a request head (before its hop-by-hop headers go): `Some`
/// for an HTTP/1.1 request that asks to switch protocols on a connection that can, or an
/// HTTP/2 extended CONNECT, which becomes the `GET` of an HTTP/1.1 handshake here.
/// `tunnel` is the client connection's place of the CONNECT the request came in, if any.
pub(crate) fn take(
    parts: &mut http::request::Parts,
    tunnel: Option<&Arc<Slot>>,
) -> Option<ClientUpgrade> {
    let form = if is_extended_connect(parts) {
        Form::ExtendedConnect
    } else {
        asked_protocol(parts.version, &parts.headers)?;
        Form::Upgrade
    };
    let on = parts.extensions.remove::<OnUpgrade>()?;
    if form == Form::ExtendedConnect {
        parts.method = Method::GET;
        parts.extensions.remove::<Protocol>();
    }
    let slot = parts.extensions.get::<Arc<Slot>>().or(tunnel).cloned();
    let client_key = match form {
        Form::Upgrade => parts
            .headers
            .get(SEC_WEBSOCKET_KEY)
            .and_then(|v| v.to_str().ok())
            .map(|key| key.trim().to_owned()),
        Form::ExtendedConnect => None,
    };
    Some(ClientUpgrade {
        on,
        protocol: HeaderValue::from_static("websocket"),
        form,
        key: None,
        client_key,
        slot,
        open: None,
        extra: None,
    })
}

impl ClientUpgrade {
    /// Puts the request's wish back on the head that goes upstream (the hop-by-hop strip took
    /// `Connection` and `Upgrade` out).
    /// For an extended CONNECT, the handshake's key is courtesy's own (RFC 8441 has none), and
    /// its version 13 unless the client named one.
    pub(crate) fn ask_upstream(&mut self, headers: &mut HeaderMap) {
        headers.insert(CONNECTION, HeaderValue::from_static("upgrade"));
        headers.insert(UPGRADE, self.protocol.clone());
        if self.form == Form::ExtendedConnect {
            let key = STANDARD.encode(rand::random::<[u8; 16]>());
            if let Ok(value) = HeaderValue::from_str(&key) {
                headers.insert(SEC_WEBSOCKET_KEY, value);
                self.key = Some(key);
            }
            headers
                .entry(SEC_WEBSOCKET_VERSION)
                .or_insert(HeaderValue::from_static("13"));
        }
    }

    /// Takes the socket's place before the handshake goes out: one of the open sockets of its
    /// client and host and of the upstream share (`crate::front::sockets`), and for an extended
    /// CONNECT one of the client's connections. `Err` says which bound is full
    /// ([`over_cap`] is the client's answer).
    pub(crate) fn place(
        &mut self,
        sockets: &Arc<Sockets>,
        host: &str,
        caps: SocketCaps,
    ) -> Result<(), String> {
        if self.form == Form::ExtendedConnect {
            if let Some(slot) = &self.slot {
                self.extra = Some(slot.extra().map_err(|why| why.to_string())?);
            }
        }
        let client = self.slot.as_ref().map(|slot| slot.client());
        let open = sockets
            .open(Kind::WebSocket(client), host, caps)
            .map_err(|why| why.to_string())?;
        self.open = Some(open);
        Ok(())
    }

    /// Whether the origin's `101` answers this handshake (RFC 6455 4.2.2): its
    /// `Sec-WebSocket-Accept` must be the one for the key sent, courtesy's own for an extended
    /// CONNECT, the client's for an HTTP/1.1 handshake. Any other `101` would join the client to
    /// a connection that is not a WebSocket, where whatever the client sends next would reach the
    /// origin unpaced.
    fn accepted_by(&self, headers: &HeaderMap) -> bool {
        let Some(key) = self.key.as_ref().or(self.client_key.as_ref()) else {
            return false;
        };
        headers
            .get(SEC_WEBSOCKET_ACCEPT)
            .is_some_and(|v| v.as_bytes() == accept_for(key).as_bytes())
    }
}

/// How long a client refused a socket is asked to wait before trying again.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// The local 503 for a handshake over a socket bound (`why` names it); it never leaves.
pub(crate) fn over_cap(why: &str) -> Response<ProxyBody> {
    response::local(
        StatusCode::SERVICE_UNAVAILABLE,
        ProxyError::ConnectionLimitReached,
        why,
        Some(RETRY_AFTER),
    )
}

/// The answer to a `101` that switches to nothing the client asked for: an unsolicited one, one
/// to another protocol (`h2c`), or one whose `Sec-WebSocket-Accept` does not answer the key. The
/// origin's connection is dropped with it; nothing is joined.
pub(crate) fn refused_switch(why: &str) -> Response<ProxyBody> {
    Failure::new(StatusCode::BAD_GATEWAY, ProxyError::HttpProtocolError, why).into_response()
}

/// The `Sec-WebSocket-Accept` that answers `key` (RFC 6455 4.2.2): SHA-1 of the key and the
/// protocol's GUID, in base64.
fn accept_for(key: &str) -> String {
    let mut digested = key.as_bytes().to_vec();
    digested.extend_from_slice(WEBSOCKET_GUID.as_bytes());
    STANDARD.encode(digest(&SHA1_FOR_LEGACY_USE_ONLY, &digested))
}

/// Whether `response` agrees to switch: a `101` to `websocket`, the one protocol asked for.
pub(crate) fn switches(response: &Response<Incoming>) -> bool {
    let websocket = response
        .headers()
        .get(UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("websocket"));
    response.status() == StatusCode::SWITCHING_PROTOCOLS && websocket
}

impl Proxy {
    /// The origin's `101` as the client gets it, and the two connections joined behind it once
    /// both sides have switched. The turn ends here (the handshake is answered); the socket's
    /// bytes are charged to the host as they go, and the upstream connection stays marked busy
    /// (`idle`) so that it is never closed to make room for another.
    pub(crate) fn join(
        &self,
        mut response: Response<Incoming>,
        client: ClientUpgrade,
        held: TurnHeld,
    ) -> Response<ProxyBody> {
        let TurnHeld { permit, idle } = held;
        if !client.accepted_by(response.headers()) {
            // Not an answer to the handshake: nothing is joined, the turn ends.
            return refused_switch(
                "the origin's 101 does not accept the WebSocket handshake (Sec-WebSocket-Accept)",
            );
        }
        let origin = response.extensions_mut().remove::<OnUpgrade>();
        let (mut parts, _) = response.into_parts();
        strip_hop_by_hop(&mut parts.headers);
        parts.headers.append(VIA, self.loops.via_for(parts.version));
        match client.form {
            Form::Upgrade => {
                parts
                    .headers
                    .insert(CONNECTION, HeaderValue::from_static("upgrade"));
                parts.headers.insert(UPGRADE, client.protocol.clone());
                parts.version = Version::HTTP_11;
            }
            Form::ExtendedConnect => {
                // The stream is the socket: a 200 with no connection fields (RFC 8441 5).
                parts.status = StatusCode::OK;
                parts.headers.remove(SEC_WEBSOCKET_ACCEPT);
                parts.version = Version::HTTP_2;
            }
        }
        let meter = permit.into_meter(&self.limiter);
        info!(host = meter.host_key(), "switching protocols: socket open");
        if let Some(origin) = origin {
            let (grace, idle_timeout) = {
                let config = self.config.get();
                (
                    config.proxy.shutdown_grace,
                    config.proxy.socket_idle_timeout,
                )
            };
            let stopping = self.connections.stopping();
            let carrying = client
                .slot
                .as_ref()
                .map(|slot| (slot.clone(), slot.carrying()));
            let held = Held {
                _idle: idle,
                _carrying: carrying,
                _extra: client.extra,
            };
            let open = client.open;
            let joined = join_sides(client.on, origin, meter, (open, idle_timeout), held);
            self.connections.spawn(InRequest::current(async move {
                tokio::select! {
                    () = joined => {}
                    () = closed_at_shutdown(stopping, grace) => {
                        info!("socket closed: shutting down");
                    }
                }
            }));
        }
        Response::from_parts(parts, ProxyBody::empty())
    }
}

/// Resolves `grace` after shutdown began: the time an open socket is given to finish.
async fn closed_at_shutdown(stopping: impl std::future::Future<Output = ()>, grace: Duration) {
    stopping.await;
    tokio::time::sleep(grace).await;
}

/// What an open socket keeps until it closes: the upstream connection's idle mark, the client
/// connection's place (marked carrying), and for an extended CONNECT its own place among the
/// client's connections.
struct Held {
    _idle: Option<IdleMark>,
    _carrying: Option<(Arc<Slot>, Busy)>,
    _extra: Option<Extra>,
}

/// Waits for both sides to switch, then copies bytes both ways until either side closes, no byte
/// has gone for `idle_timeout`, or the socket is closed by its host's pause or the operator
/// (`open`). `held` is kept until the socket closes.
async fn join_sides(
    client: OnUpgrade,
    origin: OnUpgrade,
    meter: ByteMeter,
    (open, idle_timeout): (Option<OpenSocket>, Duration),
    held: Held,
) {
    let _held = held;
    let (client, origin) = match tokio::join!(client, origin) {
        (Ok(client), Ok(origin)) => (client, origin),
        (Err(e), _) | (_, Err(e)) => {
            debug!("socket not joined: {e}");
            return;
        }
    };
    let mut client = TokioIo::new(client);
    let mut origin = Metered {
        io: TokioIo::new(origin),
        meter,
    };
    let closing = open.as_ref().map(OpenSocket::closing);
    let close = async move {
        match closing {
            Some(closing) => closing.await,
            None => std::future::pending().await,
        }
    };
    match sockets::pipe(&mut client, &mut origin, idle_timeout, close).await {
        Ended::Done(Ok((up, down))) => info!(bytes_up = up, bytes_down = down, "socket closed"),
        Ended::Done(Err(e)) => debug!("socket ended: {e}"),
        Ended::Idle => info!(
            idle_s = idle_timeout.as_secs_f64(),
            "socket closed: no byte either way for socket_idle_timeout_seconds"
        ),
        Ended::Closed => {
            info!("socket closed: its host was paused or blocked, or the operator asked")
        }
    }
    drop(open);
}

/// The origin's side of a socket, counting every byte read from or written to it.
struct Metered<S> {
    io: S,
    meter: ByteMeter,
}

impl<S: AsyncRead + Unpin> AsyncRead for Metered<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.io).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            this.meter.count(buf.filled().len().saturating_sub(before));
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Metered<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.io).poll_write(cx, data);
        if let Poll::Ready(Ok(n)) = polled {
            this.meter.count(n);
        }
        polled
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_connect_or_an_upgrade_holds_its_connection() {
        let mut upgrade = HeaderMap::new();
        upgrade.insert("UPGRADE", HeaderValue::from_static("websocket"));
        assert!(holds_its_connection(&Method::CONNECT, &HeaderMap::new()));
        assert!(holds_its_connection(&Method::GET, &upgrade));
        let mut plain = HeaderMap::new();
        plain.insert(CONNECTION, HeaderValue::from_static("keep-alive"));
        assert!(!holds_its_connection(&Method::GET, &plain));
        assert!(!holds_its_connection(&Method::POST, &HeaderMap::new()));
    }

    #[test]
    fn the_accept_is_rfc_6455s() {
        // The example of RFC 6455 1.3.
        assert_eq!(
            accept_for("dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[test]
    fn ws_urls_in_absolute_form_are_read_as_http() {
        let mut uri: Uri = "ws://a.test:8080/chat?x=1".parse().unwrap();
        ws_as_http(&mut uri);
        assert_eq!(uri, "http://a.test:8080/chat?x=1");
        let mut uri: Uri = "WS://a.test".parse().unwrap();
        ws_as_http(&mut uri);
        assert_eq!(uri, "http://a.test/");
        let mut uri: Uri = "http://a.test/x".parse().unwrap();
        ws_as_http(&mut uri);
        assert_eq!(uri, "http://a.test/x");
    }

    #[test]
    fn an_upgrade_is_asked_only_with_connection_upgrade_on_http_11() {
        let mut h = HeaderMap::new();
        h.insert(UPGRADE, HeaderValue::from_static("websocket"));
        assert_eq!(asked_protocol(Version::HTTP_11, &h), None);
        h.insert(CONNECTION, HeaderValue::from_static("keep-alive, Upgrade"));
        assert_eq!(
            asked_protocol(Version::HTTP_11, &h),
            Some(HeaderValue::from_static("websocket"))
        );
        assert_eq!(asked_protocol(Version::HTTP_10, &h), None);
        h.remove(UPGRADE);
        assert_eq!(asked_protocol(Version::HTTP_11, &h), None);
        // Only a WebSocket: h2c (or TLS/1.0) would carry requests past the budget.
        h.insert(UPGRADE, HeaderValue::from_static("h2c"));
        assert_eq!(asked_protocol(Version::HTTP_11, &h), None);
        h.insert(UPGRADE, HeaderValue::from_static("h2c, WebSocket"));
        assert_eq!(
            asked_protocol(Version::HTTP_11, &h),
            Some(HeaderValue::from_static("websocket"))
        );
    }
}
