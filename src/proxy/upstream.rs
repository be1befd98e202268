//! The upstream side: the pooled client that carries every forwarded request (HTTP/1.1 over TCP
//! or TLS verified against the configured roots), and the body it sends.

use std::time::Duration;

use http::{HeaderMap, Method, Request, Uri};
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use super::reuse::Counting;
use crate::config::Config;
use crate::resolve::{Connector, Resolver};

/// The pooled upstream client.
pub(crate) type Upstream = Client<HttpsConnector<Counting<Connector>>, UpstreamBody>;

/// How long an idle upstream connection is kept: 90 s, or less when idle hosts are forgotten
/// sooner (`idle_host_seconds`), since a host courtesy no longer knows should not keep a socket
/// and its buffers.
pub fn upstream_idle_timeout(idle_host: Duration) -> Duration {
    Duration::from_secs(90).min(idle_host)
}

/// The pooled client, resolving through `resolver` and verifying upstream TLS with `tls`. Its
/// timeouts are fixed at start.
pub(crate) fn client(config: &Config, resolver: Resolver, tls: rustls::ClientConfig) -> Upstream {
    let mut connector = Connector::new_with_resolver(resolver);
    connector.set_connect_timeout(Some(config.proxy.connect_timeout));
    connector.set_nodelay(true);
    connector.enforce_http(false);
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(Counting(connector));
    // Without a pool timer hyper-util never closes an idle connection by itself (only finds
    // it stale at the next checkout): a crawl over many hosts would keep a socket per host.
    Client::builder(TokioExecutor::new())
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(upstream_idle_timeout(config.proxy.idle_host))
        .pool_max_idle_per_host(64)
        .build(connector)
}

/// The body courtesy sends upstream: the client's, streamed, or nothing (a retry, robots.txt).
#[derive(Debug)]
pub enum UpstreamBody {
    /// The client's request body, streamed through.
    Client(Incoming),
    /// No body.
    Empty,
}

impl UpstreamBody {
    /// The client's body, if this is it.
    pub(crate) fn into_client_body(self) -> Option<Incoming> {
        match self {
            UpstreamBody::Client(body) => Some(body),
            UpstreamBody::Empty => None,
        }
    }
}

impl http_body::Body for UpstreamBody {
    type Data = bytes::Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, hyper::Error>>> {
        match self.get_mut() {
            UpstreamBody::Client(body) => std::pin::Pin::new(body).poll_frame(cx),
            UpstreamBody::Empty => std::task::Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            UpstreamBody::Client(body) => body.is_end_stream(),
            UpstreamBody::Empty => true,
        }
    }

    fn size_hint(&self) -> http_body::SizeHint {
        match self {
            UpstreamBody::Client(body) => body.size_hint(),
            UpstreamBody::Empty => http_body::SizeHint::with_exact(0),
        }
    }
}

/// What is kept of a bodiless request so that it can be sent again (courtesy's own retries).
#[derive(Debug, Clone)]
pub(crate) struct Replay {
    method: Method,
    uri: Uri,
    headers: HeaderMap,
}

impl Replay {
    /// A template of a request with these parts.
    pub(crate) fn of(parts: &http::request::Parts) -> Self {
        Replay {
            method: parts.method.clone(),
            uri: parts.uri.clone(),
            headers: parts.headers.clone(),
        }
    }

    /// A fresh bodiless request from the template.
    pub(crate) fn request(&self) -> Request<UpstreamBody> {
        let mut request = Request::new(UpstreamBody::Empty);
        *request.method_mut() = self.method.clone();
        *request.uri_mut() = self.uri.clone();
        *request.headers_mut() = self.headers.clone();
        request
    }
}
