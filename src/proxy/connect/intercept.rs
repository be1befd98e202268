//! The requests served inside an accepted CONNECT: TLS terminated with the host's leaf (the
//! ClientHello's SNI picks it), then HTTP/1.1 or HTTP/2 served over it (or over the plain
//! stream), each request forwarded like plain http (`Proxy::forward_inside`) while the session's
//! books (`inside.rs`) count it in flight.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rustls::ServerConfig;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::LazyConfigAcceptor;
use tracing::{debug, warn};

use crate::front::connections::Connections;
use crate::front::gate::Carried;
use crate::proxy::answer::body::ProxyBody;
use crate::proxy::answer::response::ProxyError;
use crate::proxy::connect::inside::{watch_session, InFlight, Inside, InsideBusy, Opened};
use crate::proxy::Proxy;
use crate::wire::scheme::Scheme;

impl Proxy {
    /// Terminates TLS with a leaf for the name the client asked for: SNI when it names another host
    /// than the CONNECT, else `leaf` (the CONNECT host's).
    pub(super) async fn intercept_tls<S>(
        self: Arc<Self>,
        stream: S,
        opened: Opened,
        leaf: Arc<ServerConfig>,
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
        let config = match sni.filter(|name| *name != opened.target.host) {
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
                let inside = Inside::new(opened, Scheme::Https);
                self.serve_inside(tls, inside).await
            }
            Err(e) => debug!("TLS handshake with the client failed: {e}"),
        }
    }

    /// Serves HTTP/1.1 or HTTP/2 on `stream`; every request goes to the tunnel's target through
    /// the proxy. The session ends when it has had no request in flight for
    /// `header_timeout_seconds` (HTTP/2: a GOAWAY), when its connection's place is needed for
    /// another while it is idle, or at shutdown.
    pub(super) async fn serve_inside<S>(self: Arc<Self>, stream: S, inside: Inside)
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
        let response = self.forward_inside(req, inside).await;
        response.map(|body| Carried::new(body, (extra, in_flight)))
    }
}
