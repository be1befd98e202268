//! The upstream side: the pooled clients that carry every forwarded request (HTTP/1.1 over TCP
//! or TLS verified against the configured roots), two straight to the targets (HTTP/1.1 only, and
//! one that offers `h2` and `http/1.1` by ALPN to `https://` origins, `upstream_http2`) and, the
//! same two, per parent proxy in use (made at its first request, so a reload may name new
//! parents), and the body they send. The table every upstream connection holds a slot of
//! (`table.rs`) and the count of requests per connection that tells a stale pooled connection
//! (`reuse.rs`) are the pool's own; the proxy (`crate::proxy`) only asks it to send.

pub(crate) mod reuse;
pub(crate) mod table;

use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use http::{HeaderMap, Method, Request, Uri};
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::{Client, ResponseFuture};
use hyper_util::rt::{TokioExecutor, TokioTimer};

use crate::config::{Config, ParentScheme, Route, UpstreamProxy};
use crate::upstream::parent::ParentConnector;
use crate::upstream::resolve::{Connector, GuardedConnector, Resolver};
use reuse::Counting;
pub(crate) use table::{IdleMark, UpstreamSlots, UpstreamsExhausted};

/// The pooled client straight to the targets.
pub(crate) type Upstream = Client<HttpsConnector<Counting<GuardedConnector>>, UpstreamBody>;

/// A pooled client through one parent proxy.
type ThroughParent = Client<HttpsConnector<Counting<ParentConnector>>, UpstreamBody>;

/// Every pooled client: straight to the targets, and one per parent proxy in use. Each pools its
/// connections by target, so connections never mix targets or parents.
#[derive(Debug)]
pub(crate) struct Upstreams {
    direct: Upstream,
    /// Straight to `https://` targets, offering `h2` and `http/1.1`: over h2 its pool keeps one
    /// connection per target, carrying every request as a stream.
    direct_h2: Upstream,
    /// By parent, and whether its client offers `h2` to `https://` targets.
    parents: DashMap<(Arc<UpstreamProxy>, bool), ThroughParent>,
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
            direct: client(config, resolver.clone(), tls.clone(), slots.clone(), false),
            direct_h2: client(config, resolver.clone(), tls.clone(), slots.clone(), true),
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

    /// Sends `request` the way `route` says; `offer_h2` offers HTTP/2 to an `https://` target
    /// (straight, or inside a parent's tunnel: TLS to the target is end to end, so ALPN is the
    /// target's to answer). `http://` targets and WebSocket handshakes always get HTTP/1.1.
    pub(crate) fn request(
        &self,
        route: &Route,
        mut request: Request<UpstreamBody>,
        offer_h2: bool,
    ) -> ResponseFuture {
        // A WebSocket handshake (`Upgrade`, `upgrade.rs`) is HTTP/1.1's: it is never offered h2.
        let h2 = offer_h2
            && request.uri().scheme() == Some(&http::uri::Scheme::HTTPS)
            && !request.headers().contains_key(http::header::UPGRADE);
        if h2 {
            as_h2_may_send(&mut request);
        }
        let Route::Parent(parent) = route else {
            if h2 {
                return self.direct_h2.request(request);
            }
            return self.direct.request(request);
        };
        let key = (parent.clone(), h2);
        if let Some(client) = self.parents.get(&key) {
            return client.request(request);
        }
        let connector =
            ParentConnector::new(parent.clone(), self.resolver.clone(), self.connect_timeout);
        let client = self
            .parents
            .entry(key)
            .or_insert_with(|| {
                let counting = match parent.scheme {
                    ParentScheme::Http => Counting::forwarding(connector),
                    ParentScheme::Socks5 | ParentScheme::Socks5h => Counting::new(connector),
                }
                .capped(self.slots.clone());
                pooled(self.idle, tls_over(self.tls.clone(), counting, h2))
            })
            .clone();
        client.request(request)
    }
}

/// A request that may go over HTTP/2 names its host in `:authority` alone (RFC 9113 8.3.1; nginx
/// answers 400 to a `Host` header beside it): the `Host` header goes, and the URL's authority loses
/// a default `:443` as `Host` did. Should the origin pick HTTP/1.1, the pooled client writes
/// `Host` back from the URL.
fn as_h2_may_send<B>(request: &mut Request<B>) {
    request.headers_mut().remove(http::header::HOST);
    if request.uri().port_u16() != Some(443) {
        return;
    }
    let mut parts = request.uri().clone().into_parts();
    let authority = parts.authority.as_ref().map(|a| a.host().to_string());
    let Some(Ok(authority)) = authority.map(|host| host.parse::<http::uri::Authority>()) else {
        return;
    };
    parts.authority = Some(authority);
    if let Ok(uri) = Uri::from_parts(parts) {
        *request.uri_mut() = uri;
    }
}

/// How long an idle upstream connection is kept: 90 s, or less when idle hosts are forgotten
/// sooner (`idle_host_seconds`), since a host courtesy no longer knows should not keep a socket
/// and its buffers.
pub(crate) fn upstream_idle_timeout(idle_host: Duration) -> Duration {
    Duration::from_secs(90).min(idle_host)
}

/// The pooled client, resolving through `resolver` and verifying upstream TLS with `tls`, offering
/// `h2` too when `h2` says so. Its timeouts are fixed at start.
fn client(
    config: &Config,
    resolver: Resolver,
    tls: rustls::ClientConfig,
    slots: UpstreamSlots,
    h2: bool,
) -> Upstream {
    let mut connector = Connector::new_with_resolver(resolver.clone());
    connector.set_connect_timeout(Some(config.proxy.connect_timeout));
    connector.set_nodelay(true);
    connector.enforce_http(false);
    let guarded = GuardedConnector::new(connector, resolver);
    pooled(
        config.proxy.idle_host,
        tls_over(tls, Counting::new(guarded).capped(slots), h2),
    )
}

/// `connector`'s connections with TLS to `https://` targets verified by `tls`; with `h2`, ALPN
/// offers `h2` and `http/1.1` and the connection speaks what the origin picks (without, ALPN
/// offers `http/1.1` alone).
fn tls_over<C>(
    tls: rustls::ClientConfig,
    connector: Counting<C>,
    h2: bool,
) -> HttpsConnector<Counting<C>> {
    let builder = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    if h2 {
        builder.enable_all_versions().wrap_connector(connector)
    } else {
        builder.enable_http1().wrap_connector(connector)
    }
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
pub(crate) enum UpstreamBody {
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

    /// The request's headers, as courtesy sends it.
    pub(crate) fn headers(&self) -> &HeaderMap {
        &self.headers
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_that_may_go_over_h2_names_its_host_in_the_authority_alone() {
        for (url, host, authority, path) in [
            (
                "https://example.com:443/a?b",
                "example.com",
                "example.com",
                "/a?b",
            ),
            (
                "https://example.com:8443/a",
                "example.com:8443",
                "example.com:8443",
                "/a",
            ),
            ("https://[::1]:443/", "[::1]", "[::1]", "/"),
        ] {
            let mut request = Request::builder()
                .uri(url)
                .header("host", host)
                .body(())
                .unwrap();
            as_h2_may_send(&mut request);
            assert!(!request.headers().contains_key("host"), "{url}");
            assert_eq!(request.uri().authority().unwrap().as_str(), authority);
            assert_eq!(request.uri().path_and_query().unwrap(), path);
            assert_eq!(request.uri().scheme_str(), Some("https"));
        }
    }
}
