//! The upstream side: the pooled clients that carry every forwarded request (HTTP/1.1 over TCP
//! or TLS verified against the configured roots), one straight to the targets and one per parent
//! proxy in use (made at its first request, so a reload may name new parents), and the body they
//! send.

use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use http::{HeaderMap, Method, Request, Uri};
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::{Client, ResponseFuture};
use hyper_util::rt::{TokioExecutor, TokioTimer};

use super::reuse::Counting;
use super::table::UpstreamSlots;
use crate::config::{Config, ParentScheme, Route, UpstreamProxy};
use crate::upstream::parent::ParentConnector;
use crate::upstream::resolve::{Connector, GuardedConnector, Resolver};

/// The pooled client straight to the targets.
pub(crate) type Upstream = Client<HttpsConnector<Counting<GuardedConnector>>, UpstreamBody>;

/// A pooled client through one parent proxy.
type ThroughParent = Client<HttpsConnector<Counting<ParentConnector>>, UpstreamBody>;

/// Every pooled client: straight to the targets, and one per parent proxy in use. Each pools its
/// connections by target, so connections never mix targets or parents.
#[derive(Debug)]
pub(crate) struct Upstreams {
    direct: Upstream,
    parents: DashMap<Arc<UpstreamProxy>, ThroughParent>,
    resolver: Resolver,
    tls: rustls::ClientConfig,
    connect_timeout: Duration,
    idle: Duration,
    slots: UpstreamSlots,
}

impl Upstreams {
    /// The clients, resolving through `resolver` and verifying upstream TLS with `tls`; their
    /// timeouts are fixed at start.
    /// Every connection, straight or through a parent, holds one of `slots` while it is open.
    pub(crate) fn new(
        config: &Config,
        resolver: Resolver,
        tls: rustls::ClientConfig,
        slots: UpstreamSlots,
    ) -> Self {
        Upstreams {
            direct: client(config, resolver.clone(), tls.clone(), slots.clone()),
            parents: DashMap::new(),
            resolver,
            tls,
            connect_timeout: config.proxy.connect_timeout,
            idle: config.proxy.idle_host,
            slots,
        }
    }

    /// The slots every upstream connection holds one of (blind tunnels take theirs here too).
    pub(crate) fn slots(&self) -> &UpstreamSlots {
        &self.slots
    }

    /// Sends `request` the way `route` says.
    pub(crate) fn request(&self, route: &Route, request: Request<UpstreamBody>) -> ResponseFuture {
        let Route::Parent(parent) = route else {
            return self.direct.request(request);
        };
        if let Some(client) = self.parents.get(parent) {
            return client.request(request);
        }
        let connector =
            ParentConnector::new(parent.clone(), self.resolver.clone(), self.connect_timeout);
        let client = self
            .parents
            .entry(parent.clone())
            .or_insert_with(|| {
                let counting = match parent.scheme {
                    ParentScheme::Http => Counting::forwarding(connector),
                    ParentScheme::Socks5 | ParentScheme::Socks5h => Counting::new(connector),
                }
                .capped(self.slots.clone());
                pooled(self.idle, tls_over(self.tls.clone(), counting))
            })
            .clone();
        client.request(request)
    }
}

/// How long an idle upstream connection is kept: 90 s, or less when idle hosts are forgotten
/// sooner (`idle_host_seconds`), since a host courtesy no longer knows should not keep a socket
/// and its buffers.
pub(crate) fn upstream_idle_timeout(idle_host: Duration) -> Duration {
    Duration::from_secs(90).min(idle_host)
}

/// The pooled client, resolving through `resolver` and verifying upstream TLS with `tls`. Its
/// timeouts are fixed at start.
fn client(
    config: &Config,
    resolver: Resolver,
    tls: rustls::ClientConfig,
    slots: UpstreamSlots,
) -> Upstream {
    let mut connector = Connector::new_with_resolver(resolver.clone());
    connector.set_connect_timeout(Some(config.proxy.connect_timeout));
    connector.set_nodelay(true);
    connector.enforce_http(false);
    let guarded = GuardedConnector::new(connector, resolver);
    pooled(
        config.proxy.idle_host,
        tls_over(tls, Counting::new(guarded).capped(slots)),
    )
}

/// `connector`'s connections with TLS to `https://` targets verified by `tls`.
fn tls_over<C>(tls: rustls::ClientConfig, connector: Counting<C>) -> HttpsConnector<Counting<C>> {
    hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(connector)
}

/// A pooled client over `connector`, idle connections closed after [`upstream_idle_timeout`].
fn pooled<C>(idle_host: Duration, connector: C) -> Client<C, UpstreamBody>
where
    C: hyper_util::client::legacy::connect::Connect + Clone,
{
    // Without a pool timer hyper-util never closes an idle connection by itself (only finds
    // it stale at the next checkout): a crawl over many hosts would keep a socket per host.
    Client::builder(TokioExecutor::new())
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(upstream_idle_timeout(idle_host))
        .pool_max_idle_per_host(64)
        .build(connector)
}

/// The body courtesy sends upstream: the client's, streamed, or nothing (a retry, robots.txt).
#[derive(Debug)]
pub(super) enum UpstreamBody {
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
