//! The proxy service: forwarding of absolute-form `http://` requests, and CONNECT (intercepted by
//! `intercept.rs`, or a blind tunnel).
//!
//! The service's error type is `Infallible`: every failure becomes a response (see `response.rs`).
//! The limiter sits immediately around the network call and nowhere else: key, admit, send, respond.
//! This module does not accept connections (`server.rs`) and does not decide when a request may leave
//! (`limiter.rs`).

use std::convert::Infallible;
use std::error::Error as StdError;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use std::time::SystemTime;

use http::header::{
    HeaderName, HeaderValue, CONNECTION, CONTENT_ENCODING, CONTENT_TYPE, ETAG, HOST,
    IF_MODIFIED_SINCE, IF_NONE_MATCH, LOCATION, RETRY_AFTER, USER_AGENT, VIA,
};
use http::{HeaderMap, Method, Request, Response, StatusCode, Uri, Version};
use http_body::Body as _;
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tracing::{debug, info, info_span, warn, Instrument};

use crate::alerts::Alerts;
use crate::cache;
use crate::config::{canonical_ip, CacheMode, Config, HostPolicy, HttpsMode, ResourceKind};
use crate::feedback::{self, Feedback};
use crate::limiter::{Answer, Limiter, Permit};
use crate::metrics::Metrics;
use crate::resolve::{Connector, DnsError, Resolver};
use crate::response::{self, local, BlockScan, ProxyBody, ProxyError, PROXY_NAME};
use crate::robots::{self, Fetched, RobotsCache, Step, Verdict};
use crate::tls::Interceptor;

/// Headers that describe one connection, not the message: never forwarded either way.
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "proxy-authenticate",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Everything the service needs, shared by every connection.
#[derive(Debug)]
pub struct Proxy {
    limiter: Arc<Limiter>,
    client: Client<HttpsConnector<Connector>, UpstreamBody>,
    resolver: Resolver,
    interceptor: Arc<Interceptor>,
    metrics: Arc<Metrics>,
    alerts: Arc<Alerts>,
    robots: RobotsCache,
    cache: Arc<cache::Store>,
    /// Addresses courtesy listens on: a request aimed at one of them is a loop.
    own_addrs: Vec<SocketAddr>,
    /// The `Via` entry this instance adds; seeing it on an incoming request means a loop.
    via: HeaderValue,
    via_token: String,
}

/// How long an idle upstream connection is kept: 90 s, or less when idle hosts are forgotten
/// sooner (`idle_host_seconds`), since a host courtesy no longer knows should not keep a socket
/// and its buffers.
pub fn upstream_idle_timeout(idle_host: Duration) -> Duration {
    Duration::from_secs(90).min(idle_host)
}

impl Proxy {
    /// Builds the service state: the pooled upstream client (verifying upstream TLS with
    /// `upstream_tls`), the interceptor for CONNECTs, and the loop guards. Per-request settings are
    /// read from the limiter's config, so a reload reaches them; the timeouts of the connector are
    /// fixed at start.
    pub fn new(
        config: Arc<Config>,
        limiter: Arc<Limiter>,
        own_addrs: Vec<SocketAddr>,
        interceptor: Arc<Interceptor>,
        upstream_tls: rustls::ClientConfig,
        metrics: Arc<Metrics>,
    ) -> Self {
        let alerts = Arc::new(Alerts::new(limiter.clone(), upstream_tls.clone()));
        let resolver = Resolver::new(config.proxy.connect_timeout);
        let mut connector = Connector::new_with_resolver(resolver.clone());
        connector.set_connect_timeout(Some(config.proxy.connect_timeout));
        connector.set_nodelay(true);
        connector.enforce_http(false);
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(upstream_tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(connector);
        // Without a pool timer hyper-util never closes an idle connection by itself (only finds
        // it stale at the next checkout): a crawl over many hosts would keep a socket per host.
        let client = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(upstream_idle_timeout(config.proxy.idle_host))
            .pool_max_idle_per_host(64)
            .build(connector);
        let via_token = format!("{PROXY_NAME}-{:08x}", rand::random::<u32>());
        let via = HeaderValue::from_str(&format!("1.1 {via_token}"))
            .unwrap_or_else(|_| HeaderValue::from_static("1.1 courtesy"));
        Proxy {
            limiter,
            client,
            resolver,
            interceptor,
            metrics,
            alerts,
            robots: RobotsCache::new(),
            cache: Arc::new(cache::Store::open(
                config.proxy.state_dir.join("cache"),
                config.proxy.cache_max_bytes,
            )),
            own_addrs,
            via,
            via_token,
        }
    }

    /// Forgets expired robots.txt answers (called by the idle-host sweeper).
    pub fn sweep_robots(&self) -> usize {
        self.robots.sweep()
    }

    /// The interceptor that terminates TLS for CONNECTs.
    pub fn interceptor(&self) -> &Arc<Interceptor> {
        &self.interceptor
    }

    /// Answers one request from `client`. Never fails: errors are responses.
    pub async fn serve(
        self: Arc<Self>,
        req: Request<Incoming>,
        client: SocketAddr,
    ) -> Result<Response<ProxyBody>, Infallible> {
        if !self.limiter.config().client_allowed(client.ip()) {
            return Ok(response::client_not_allowed(client.ip()));
        }
        if req.method() == Method::CONNECT {
            return Ok(self.connect(req, client).await);
        }
        Ok(self.forward(req, client).await)
    }

    /// Forwards an absolute-form `http://` request through the host's budget.
    async fn forward(&self, req: Request<Incoming>, client: SocketAddr) -> Response<ProxyBody> {
        let target = match Target::of_request(req.uri()) {
            Ok(t) => t,
            Err(why) => {
                return local(
                    StatusCode::BAD_REQUEST,
                    ProxyError::HttpRequestError,
                    why,
                    None,
                )
            }
        };
        if let Some(refused) = self.refuse_loop(&target, req.headers()) {
            return refused;
        }
        let span =
            info_span!("request", client = %client, method = %req.method(), host = %target.key());
        self.forward_to(req, target).instrument(span).await
    }

    async fn forward_to(&self, req: Request<Incoming>, target: Target) -> Response<ProxyBody> {
        let host_policy = self.limiter.config().policy_for(&target.host, target.port);
        if let Some(kind) = skipped_resource(&req, &host_policy.skip_resources) {
            let reason = format!("skip_resources: {} ({})", kind.name(), req.uri().path());
            info!(%reason, "skipped locally");
            return local(
                StatusCode::FORBIDDEN,
                ProxyError::HttpRequestDenied,
                &reason,
                None,
            );
        }
        if host_policy.obey_robots && req.uri().path() != "/robots.txt" {
            if let Some(refused) = self.obey_robots(&req, &target, &host_policy).await {
                return refused;
            }
        }
        let (mut parts, body) = req.into_parts();
        strip_hop_by_hop(&mut parts.headers);
        parts.headers.append(VIA, via_for(parts.version, &self.via));
        if let Ok(host) = HeaderValue::from_str(target.host_header(parts.uri.scheme_str())) {
            parts.headers.insert(HOST, host);
        }
        parts.version = Version::HTTP_11;
        // Only a bodiless GET/HEAD/OPTIONS can be sent again: keep what is needed to rebuild it.
        let replayable = matches!(parts.method, Method::GET | Method::HEAD | Method::OPTIONS)
            && body.is_end_stream();
        // The response store: only for bodiless GETs whose client sent no validators of its own
        // (a client that did gets the origin's 304 untouched).
        let use_cache = host_policy.cache != CacheMode::Off
            && parts.method == Method::GET
            && replayable
            && !parts.headers.contains_key(IF_NONE_MATCH)
            && !parts.headers.contains_key(IF_MODIFIED_SINCE);
        let url = if use_cache {
            parts.uri.to_string()
        } else {
            String::new()
        };
        if use_cache && host_policy.cache == CacheMode::Dev {
            if let Some((head, body)) = self.cache.get(&url) {
                info!(url = %url, "answered from the cache (dev)");
                return self.answer_from_cache(head, body, "hit; dev");
            }
        }
        let mut revalidating = false;
        if use_cache && host_policy.cache == CacheMode::Revalidate {
            if let Some(head) = self.cache.head(&url) {
                if let Some(v) = head
                    .etag
                    .as_deref()
                    .and_then(|e| HeaderValue::from_str(e).ok())
                {
                    parts.headers.insert(IF_NONE_MATCH, v);
                    revalidating = true;
                }
                if let Some(v) = head
                    .last_modified
                    .as_deref()
                    .and_then(|l| HeaderValue::from_str(l).ok())
                {
                    parts.headers.insert(IF_MODIFIED_SINCE, v);
                    revalidating = true;
                }
            }
        }
        let template = replayable.then(|| {
            (
                parts.method.clone(),
                parts.uri.clone(),
                parts.headers.clone(),
            )
        });
        let mut upstream = Some(Request::from_parts(parts, UpstreamBody::Client(body)));
        let mut attempt = 0u32;
        loop {
            let admitted = self
                .limiter
                .admit_with(&target.host, target.port, attempt > 0)
                .await;
            let mut permit = match admitted {
                Ok(p) => p,
                Err(refusal) => {
                    info!(reason = ?refusal, "refused locally");
                    let key = target.key();
                    self.metrics.refusal(&key, &refusal);
                    return response::refusal(&refusal, &key);
                }
            };
            let request = match upstream.take() {
                Some(r) => r,
                None => match &template {
                    Some((method, uri, headers)) => rebuild(method, uri, headers),
                    None => {
                        return local(
                            StatusCode::INTERNAL_SERVER_ERROR,
                            ProxyError::ProxyInternalError,
                            "a request with a body cannot be sent twice",
                            None,
                        )
                    }
                },
            };
            permit.mark_sent();
            let started = Instant::now();
            let result = tokio::time::timeout(
                self.limiter.config().proxy.response_timeout,
                self.client.request(request),
            )
            .await;
            let latency = started.elapsed();
            let response = match result {
                Ok(Ok(response)) => response,
                Ok(Err(err)) => {
                    let (status, kind, details) = classify_client_error(&err);
                    self.report_failure(&permit, kind, latency, &details);
                    return local(status, kind, &details, None);
                }
                Err(_) => {
                    let secs = self.limiter.config().proxy.response_timeout.as_secs_f64();
                    let details =
                        format!("no response headers from {} within {secs}s", target.key());
                    self.report_failure(
                        &permit,
                        ProxyError::HttpResponseTimeout,
                        latency,
                        &details,
                    );
                    return local(
                        StatusCode::GATEWAY_TIMEOUT,
                        ProxyError::HttpResponseTimeout,
                        &details,
                        None,
                    );
                }
            };
            let policy = permit.policy();
            let answer = answer_of(&response, latency, &policy);
            let reaction = permit.report(&answer);
            let status = response.status().as_u16();
            if revalidating && status == 304 {
                if let Some((head, body)) = self.cache.get(&url) {
                    self.metrics
                        .response(permit.host_key(), status, latency, permit.waited());
                    info!(
                        status,
                        latency_ms = latency.as_millis() as u64,
                        "revalidated: answered from the cache"
                    );
                    return self.answer_from_cache(head, body, "revalidated");
                }
            }
            self.metrics
                .response(permit.host_key(), status, latency, permit.waited());
            info!(
                status,
                latency_ms = latency.as_millis() as u64,
                wait_ms = permit.waited().as_millis() as u64,
                rate = permit.host_rate(),
                attempt,
                "upstream response"
            );
            if reaction.hard_block {
                warn!(
                    status,
                    pause_s = policy.block_pause.as_secs_f64(),
                    rate = reaction.rate_after,
                    "hard block: {} 403s in a row; pausing the host",
                    policy.hard_block_after
                );
                self.metrics.block(permit.host_key(), "hard_block");
                self.alerts.host_blocked(
                    permit.host_key(),
                    "hard_block",
                    &format!("{} consecutive 403 answers", policy.hard_block_after),
                    policy.block_pause,
                );
            } else if let Some(window) = reaction.cooldown {
                warn!(
                    status,
                    window_s = window.as_secs_f64(),
                    rate_before = reaction.rate_before,
                    rate = reaction.rate_after,
                    "host cooling down"
                );
            }
            let retry = template.is_some()
                && attempt < policy.retry_idempotent
                && matches!(status, 429 | 503);
            if retry {
                attempt += 1;
                info!(attempt, "retrying after the cooldown (retry_idempotent)");
                continue;
            }
            let (mut parts, body) = response.into_parts();
            strip_hop_by_hop(&mut parts.headers);
            parts.headers.append(VIA, via_for(parts.version, &self.via));
            parts.version = Version::HTTP_11;
            if is_block_redirect(&parts, &policy) {
                self.soft_blocked(&permit, "a redirect to a block page");
            }
            let scan = self.block_scan(&parts.headers, &policy, permit.host_key());
            let validated = parts.headers.contains_key(ETAG)
                || parts.headers.contains_key(http::header::LAST_MODIFIED);
            let store = (use_cache
                && cache::storable(parts.status, &parts.headers)
                && (validated || policy.cache == CacheMode::Dev))
                .then(|| {
                    self.cache
                        .writer(cache::head_of(&url, parts.status, &parts.headers))
                })
                .flatten()
                .map(Box::new);
            return Response::from_parts(
                parts,
                ProxyBody::Upstream {
                    body,
                    permit: Some(permit),
                    scan,
                    store,
                },
            );
        }
    }

    /// Checks `req` against the host's robots.txt (fetching it first if needed); applies the
    /// Crawl-delay. Returns the local answer when the request must not go.
    async fn obey_robots(
        &self,
        req: &Request<Incoming>,
        target: &Target,
        policy: &HostPolicy,
    ) -> Option<Response<ProxyBody>> {
        let scheme = req.uri().scheme_str().unwrap_or("http");
        let user_agent = req.headers().get(USER_AGENT).cloned();
        let agent = robots::agent_for(
            policy.robots_user_agent.as_deref(),
            user_agent.as_ref().and_then(|v| v.to_str().ok()),
        );
        let path = req
            .uri()
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_string();
        let key = format!("{scheme}://{}", target.key());
        let verdict = loop {
            match self.robots.step(&key, &agent, &path) {
                Step::Known(verdict) => break verdict,
                Step::Wait(done) => done.await,
                Step::Fetch(guard) => {
                    match self.fetch_robots(target, scheme, user_agent.clone()).await {
                        Ok(fetched) => guard.finish(fetched),
                        Err(refusal) => {
                            // The host refuses every request right now (a cooldown in reject mode):
                            // this one gets that answer, and a later request fetches robots.txt.
                            drop(guard);
                            self.metrics.refusal(&target.key(), &refusal);
                            return Some(response::refusal(&refusal, &target.key()));
                        }
                    }
                }
            }
        };
        match verdict {
            Verdict::Allowed { crawl_delay } => {
                let max = policy.max_crawl_delay.as_secs_f64();
                let cap = crawl_delay.filter(|d| *d > 0.0).map(|d| 1.0 / d.min(max));
                if self.limiter.set_robots_cap(&target.host, target.port, cap) {
                    match crawl_delay {
                        Some(d) if d > max => warn!(
                            crawl_delay_s = d,
                            max_crawl_delay_s = max,
                            "robots.txt asks for a Crawl-delay beyond max_crawl_delay_seconds; pacing at that cap"
                        ),
                        Some(d) => info!(crawl_delay_s = d, "robots.txt Crawl-delay caps the rate"),
                        None => {}
                    }
                }
                None
            }
            Verdict::Disallowed { reason } => {
                info!(%reason, "refused by robots.txt");
                Some(local(
                    StatusCode::FORBIDDEN,
                    ProxyError::HttpRequestDenied,
                    &reason,
                    None,
                ))
            }
        }
    }

    /// Fetches robots.txt for `target` through the host's budget like any request: up to
    /// [`robots::MAX_REDIRECTS`] redirects, at most [`robots::MAX_BYTES`] read.
    async fn fetch_robots(
        &self,
        target: &Target,
        scheme: &str,
        user_agent: Option<HeaderValue>,
    ) -> Result<Fetched, crate::limiter::Refusal> {
        let mut url = format!("{scheme}://{}/robots.txt", target.authority);
        for _ in 0..=robots::MAX_REDIRECTS {
            let Ok(uri) = url.parse::<Uri>() else {
                return Ok(Fetched::Unreachable(format!("bad robots.txt URL {url:?}")));
            };
            let Ok(next) = Target::of_any(&uri) else {
                return Ok(Fetched::Unreachable(format!("bad robots.txt URL {url:?}")));
            };
            let mut permit = self.limiter.admit(&next.host, next.port).await?;
            let mut request = Request::new(UpstreamBody::Empty);
            *request.uri_mut() = uri.clone();
            let headers = request.headers_mut();
            if let Some(ua) = &user_agent {
                headers.insert(USER_AGENT, ua.clone());
            }
            headers.insert(VIA, self.via.clone());
            if let Ok(host) = HeaderValue::from_str(next.host_header(uri.scheme_str())) {
                headers.insert(HOST, host);
            }
            permit.mark_sent();
            let started = Instant::now();
            let timeout = self.limiter.config().proxy.response_timeout;
            let result = tokio::time::timeout(timeout, self.client.request(request)).await;
            let latency = started.elapsed();
            let response = match result {
                Ok(Ok(r)) => r,
                Ok(Err(e)) => {
                    let (_, kind, details) = classify_client_error(&e);
                    self.report_failure(&permit, kind, latency, &details);
                    return Ok(Fetched::Unreachable(details));
                }
                Err(_) => {
                    self.report_failure(
                        &permit,
                        ProxyError::HttpResponseTimeout,
                        latency,
                        "robots.txt timed out",
                    );
                    return Ok(Fetched::Unreachable("no answer in time".into()));
                }
            };
            let policy = permit.policy();
            permit.report(&answer_of(&response, latency, &policy));
            let status = response.status();
            self.metrics
                .response(permit.host_key(), status.as_u16(), latency, permit.waited());
            info!(status = status.as_u16(), url = %uri, "robots.txt");
            if status.is_redirection() {
                let Some(location) = response
                    .headers()
                    .get(LOCATION)
                    .and_then(|v| v.to_str().ok())
                else {
                    return Ok(Fetched::Unavailable(status.as_u16()));
                };
                url = if location.starts_with("http://") || location.starts_with("https://") {
                    location.to_string()
                } else {
                    let base = format!(
                        "{}://{}",
                        uri.scheme_str().unwrap_or("http"),
                        next.authority
                    );
                    format!("{base}/{}", location.trim_start_matches('/'))
                };
                continue;
            }
            if status.as_u16() == 429 || status.is_server_error() {
                return Ok(Fetched::Unreachable(format!(
                    "it answered {}",
                    status.as_u16()
                )));
            }
            if !status.is_success() {
                return Ok(Fetched::Unavailable(status.as_u16()));
            }
            let mut body = response.into_body();
            let mut text = Vec::new();
            while text.len() < robots::MAX_BYTES {
                match body.frame().await {
                    Some(Ok(frame)) => {
                        if let Some(data) = frame.data_ref() {
                            let room = robots::MAX_BYTES - text.len();
                            text.extend_from_slice(&data[..data.len().min(room)]);
                        }
                    }
                    Some(Err(e)) => {
                        return Ok(Fetched::Unreachable(format!(
                            "reading robots.txt failed: {e}"
                        )))
                    }
                    None => break,
                }
            }
            return Ok(Fetched::Rules(text));
        }
        Ok(Fetched::Unreachable(format!(
            "more than {} redirects",
            robots::MAX_REDIRECTS
        )))
    }

    /// A stored response as the full 200, saying where it came from in `x-courtesy-cache`.
    fn answer_from_cache(
        &self,
        head: cache::Head,
        body: bytes::Bytes,
        how: &'static str,
    ) -> Response<ProxyBody> {
        let mut response = Response::new(ProxyBody::Local(Some(body)));
        *response.status_mut() = head.status();
        let headers = response.headers_mut();
        *headers = head.header_map();
        headers.remove(http::header::CONTENT_LENGTH);
        headers.append(VIA, self.via.clone());
        headers.insert("x-courtesy-cache", HeaderValue::from_static(how));
        response
    }

    /// A scanner for block markers in a text response's first bytes, if the policy asks for one.
    fn block_scan(
        &self,
        headers: &HeaderMap,
        policy: &HostPolicy,
        key: &str,
    ) -> Option<Box<BlockScan>> {
        if policy.block_scan_bytes == 0 || policy.block_markers.is_empty() {
            return None;
        }
        let textual = headers
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_ascii_lowercase)
            .is_some_and(|t| t.starts_with("text/") || t.contains("html") || t.contains("json"));
        let encoded = headers
            .get(CONTENT_ENCODING)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|e| !e.eq_ignore_ascii_case("identity"));
        if !textual || encoded {
            return None;
        }
        let alerts = self.alerts.clone();
        let metrics = self.metrics.clone();
        let key = key.to_string();
        Some(Box::new(BlockScan::new(
            policy.block_markers.clone(),
            policy.block_scan_bytes,
            Box::new(move |permit: &Permit, marker: &str| {
                if let Some(pause) = permit.soft_block() {
                    metrics.block(&key, "soft_block");
                    warn!(host = %key, marker, pause_s = pause.as_secs_f64(), "soft block: the host sent a challenge page; pausing it");
                    alerts.host_blocked(
                        &key,
                        "soft_block",
                        &format!("block marker {marker:?}"),
                        pause,
                    );
                }
            }),
        )))
    }

    fn soft_blocked(&self, permit: &Permit, what: &str) {
        if let Some(pause) = permit.soft_block() {
            self.metrics.block(permit.host_key(), "soft_block");
            warn!(
                pause_s = pause.as_secs_f64(),
                "soft block: {what}; pausing the host"
            );
            self.alerts
                .host_blocked(permit.host_key(), "soft_block", what, pause);
        }
    }

    /// Feeds a request that got no response back into the host's pacing and logs it.
    fn report_failure(&self, permit: &Permit, kind: ProxyError, latency: Duration, details: &str) {
        // A request courtesy could not send because of the client's own body says nothing of the host.
        let feedback = if kind == ProxyError::HttpRequestError {
            Feedback::Neutral
        } else {
            Feedback::Failed
        };
        let reaction = permit.report(&Answer {
            feedback,
            status: None,
            latency,
            retry_after: None,
            server: None,
        });
        self.metrics.failure(permit.host_key(), permit.waited());
        warn!(
            error = kind.token(),
            latency_ms = latency.as_millis() as u64,
            cooldown_s = reaction.cooldown.map(|w| w.as_secs_f64()),
            rate = reaction.rate_after,
            "upstream failed: {details}"
        );
    }

    /// A request that came out of a CONNECT (decrypted, or plain HTTP inside the tunnel): it goes to
    /// the CONNECT's target with `scheme`, through exactly the same path as plain http.
    pub(crate) async fn forward_inside(
        &self,
        mut req: Request<Incoming>,
        target: Target,
        scheme: &'static str,
        client: SocketAddr,
    ) -> Response<ProxyBody> {
        let path = req
            .uri()
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_string();
        match format!("{scheme}://{}{path}", target.authority).parse::<Uri>() {
            Ok(uri) => *req.uri_mut() = uri,
            Err(_) => {
                return local(
                    StatusCode::BAD_REQUEST,
                    ProxyError::HttpRequestError,
                    &format!("cannot make a URL of {:?}", req.uri()),
                    None,
                )
            }
        }
        let span = info_span!("request", client = %client, method = %req.method(), host = %target.key(), scheme);
        self.forward_to(req, target).instrument(span).await
    }

    /// Answers `CONNECT host:port` with 200, then looks at the first bytes inside: plain HTTP is
    /// forwarded request by request like any other; TLS is terminated with the local CA in
    /// `intercept` mode (every request inside paced), or in `tunnel` mode copied blindly after one
    /// admission whose concurrency slot is held for the tunnel's whole life.
    async fn connect(
        self: Arc<Self>,
        req: Request<Incoming>,
        client: SocketAddr,
    ) -> Response<ProxyBody> {
        let target = match Target::of_connect(req.uri()) {
            Ok(t) => t,
            Err(why) => {
                return local(
                    StatusCode::BAD_REQUEST,
                    ProxyError::HttpRequestError,
                    why,
                    None,
                )
            }
        };
        let config = self.limiter.config();
        if !config.proxy.connect_ports.contains(&target.port) {
            return local(
                StatusCode::FORBIDDEN,
                ProxyError::HttpRequestDenied,
                &format!(
                    "CONNECT to port {} is not allowed ([proxy] connect_ports = {:?})",
                    target.port, config.proxy.connect_ports
                ),
                None,
            );
        }
        if let Some(refused) = self.refuse_loop(&target, req.headers()) {
            return refused;
        }
        let mode = config.policy_for(&target.host, target.port).https;
        let span = info_span!("connect", client = %client, host = %target.key(), ?mode);
        // Mint (or find) the leaf now, so that a name no certificate can carry is a clear answer.
        let leaf = match mode {
            HttpsMode::Intercept => match self.interceptor.server_config(&target.host) {
                Ok(config) => Some(config),
                Err(e) => {
                    return local(
                        StatusCode::BAD_REQUEST,
                        ProxyError::HttpRequestError,
                        &e.to_string(),
                        None,
                    )
                }
            },
            HttpsMode::Tunnel => None,
        };
        let inside = crate::intercept::serve_connect(self, req, target, leaf, client);
        tokio::spawn(inside.instrument(span));
        Response::new(ProxyBody::empty())
    }

    /// Admits and dials a tunnel, then copies `client` bytes both ways (for bytes already read from
    /// an upgraded CONNECT).
    pub(crate) async fn tunnel_stream<S>(&self, mut client: S, target: Target)
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        let mut permit = match self.limiter.admit(&target.host, target.port).await {
            Ok(p) => p,
            Err(refusal) => {
                info!(reason = ?refusal, "tunnel refused locally");
                return;
            }
        };
        permit.mark_sent();
        match self.dial(&target).await {
            Ok(mut upstream) => {
                info!(wait_ms = permit.waited().as_millis() as u64, "tunnel open");
                match tokio::io::copy_bidirectional(&mut client, &mut upstream).await {
                    Ok((up, down)) => debug!(bytes_up = up, bytes_down = down, "tunnel closed"),
                    Err(e) => debug!("tunnel ended: {e}"),
                }
            }
            Err((_, kind, details)) => {
                warn!(error = kind.token(), "tunnel connect failed: {details}")
            }
        }
        drop(permit);
    }

    /// Connects a TCP stream to the target for a tunnel, with the same timeouts and error mapping as
    /// forwarded requests.
    async fn dial(&self, target: &Target) -> Result<TcpStream, (StatusCode, ProxyError, String)> {
        let addrs: Vec<SocketAddr> = match target.host.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, target.port)],
            Err(_) => match self.resolver.lookup(&target.host).await {
                Ok(addrs) => addrs
                    .into_iter()
                    .map(|a| SocketAddr::new(a.ip(), target.port))
                    .collect(),
                Err(e) => return Err(dns_failure(&e)),
            },
        };
        let timeout = self.limiter.config().proxy.connect_timeout;
        let mut last = None;
        for addr in addrs {
            match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
                Ok(Ok(stream)) => {
                    let _ = stream.set_nodelay(true);
                    return Ok(stream);
                }
                Ok(Err(e)) => last = Some(io_failure(&e, &target.key())),
                Err(_) => {
                    last = Some((
                        StatusCode::GATEWAY_TIMEOUT,
                        ProxyError::ConnectionTimeout,
                        format!(
                            "no TCP connection to {addr} within {}s",
                            timeout.as_secs_f64()
                        ),
                    ))
                }
            }
        }
        Err(last.unwrap_or((
            StatusCode::BAD_GATEWAY,
            ProxyError::DnsError,
            format!("{} resolved to no address", target.host),
        )))
    }

    /// A response refusing the request if it would come back to courtesy itself.
    fn refuse_loop(&self, target: &Target, headers: &HeaderMap) -> Option<Response<ProxyBody>> {
        let seen_before = headers
            .get_all(VIA)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|v| v.contains(self.via_token.as_str()));
        if seen_before || self.is_own_address(target) {
            warn!(target = %target.key(), "request loop refused");
            return Some(local(
                StatusCode::FORBIDDEN,
                ProxyError::ProxyLoopDetected,
                &format!("{} is courtesy itself", target.key()),
                None,
            ));
        }
        None
    }

    fn is_own_address(&self, target: &Target) -> bool {
        let ip = match target.host.parse::<IpAddr>() {
            Ok(ip) => canonical_ip(ip),
            Err(_) if target.host == "localhost" || target.host.ends_with(".localhost") => {
                IpAddr::from([127, 0, 0, 1])
            }
            Err(_) => return false,
        };
        self.own_addrs.iter().any(|own| {
            own.port() == target.port
                && (own.ip() == ip
                    || (own.ip().is_unspecified() && (ip.is_loopback() || ip.is_unspecified()))
                    || (own.ip().is_loopback() && ip.is_loopback() && target.host == "localhost"))
        })
    }
}

/// Where a request goes: lowercased host (no brackets), explicit port, and the authority as sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) authority: String,
}

impl Target {
    /// The target of a forwarded request: absolute-form `http://` only.
    fn of_request(uri: &Uri) -> Result<Target, &'static str> {
        let Some(authority) = uri.authority() else {
            return Err(
                "a proxy request needs an absolute URI such as http://example.com/ \
                 (is HTTP_PROXY pointing at courtesy?)",
            );
        };
        match uri.scheme_str() {
            Some(s) if s.eq_ignore_ascii_case("http") => {}
            Some(s) if s.eq_ignore_ascii_case("https") => {
                return Err("https:// URLs go through CONNECT (set HTTPS_PROXY)")
            }
            _ => return Err("only http:// URLs can be forwarded"),
        }
        Target::new(
            authority.host(),
            authority.port_u16().unwrap_or(80),
            authority.as_str(),
        )
    }

    /// The target of any absolute http:// or https:// URL (robots.txt redirects).
    fn of_any(uri: &Uri) -> Result<Target, &'static str> {
        let authority = uri.authority().ok_or("no authority")?;
        let default = match uri.scheme_str() {
            Some(s) if s.eq_ignore_ascii_case("https") => 443,
            Some(s) if s.eq_ignore_ascii_case("http") => 80,
            _ => return Err("only http and https"),
        };
        Target::new(
            authority.host(),
            authority.port_u16().unwrap_or(default),
            authority.as_str(),
        )
    }

    /// The target of a CONNECT: authority-form `host:port`, port required.
    fn of_connect(uri: &Uri) -> Result<Target, &'static str> {
        let authority = uri.authority().ok_or("CONNECT needs a host:port target")?;
        let port = authority
            .port_u16()
            .ok_or("CONNECT needs a host:port target with a port")?;
        Target::new(authority.host(), port, authority.as_str())
    }

    fn new(host: &str, port: u16, authority: &str) -> Result<Target, &'static str> {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            return Err("the target host is empty");
        }
        Ok(Target {
            host: host.to_ascii_lowercase(),
            port,
            authority: authority.to_string(),
        })
    }

    pub(crate) fn key(&self) -> String {
        crate::limiter::host_key(&self.host, self.port)
    }

    /// The `Host` header for this target: the authority, without the scheme's default port.
    fn host_header(&self, scheme: Option<&str>) -> &str {
        let default = match scheme {
            Some("https") => ":443",
            _ => ":80",
        };
        self.authority
            .strip_suffix(default)
            .unwrap_or(&self.authority)
    }
}

/// Removes hop-by-hop headers: the fixed list and every header named in `Connection`.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    if headers.contains_key(CONNECTION) {
        let named: Vec<HeaderName> = headers
            .get_all(CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
            .collect();
        for name in named {
            headers.remove(name);
        }
    }
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
}

/// The kind of sub-resource `req` asks for, if `skip` lists it: by path extension, else by the
/// Accept header.
fn skipped_resource<B>(req: &Request<B>, skip: &[ResourceKind]) -> Option<ResourceKind> {
    if skip.is_empty() {
        return None;
    }
    let path = req.uri().path().to_ascii_lowercase();
    let extension = path.rsplit_once('.').map(|(_, e)| e).unwrap_or("");
    let by_extension = match extension {
        "png" | "jpg" | "jpeg" | "gif" | "webp" | "svg" | "ico" | "bmp" | "avif" | "tif"
        | "tiff" => Some(ResourceKind::Image),
        "woff" | "woff2" | "ttf" | "otf" | "eot" => Some(ResourceKind::Font),
        "js" | "mjs" => Some(ResourceKind::Script),
        "css" => Some(ResourceKind::Stylesheet),
        "mp4" | "webm" | "mp3" | "ogg" | "oga" | "wav" | "m4a" | "mov" | "avi" | "mkv" | "flac"
        | "m3u8" | "ts" => Some(ResourceKind::Media),
        _ => None,
    };
    let accept = req
        .headers()
        .get(http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    let first = accept.split(',').next().unwrap_or("").trim();
    let by_accept = if first.starts_with("image/") {
        Some(ResourceKind::Image)
    } else if first.starts_with("font/") {
        Some(ResourceKind::Font)
    } else if first.contains("javascript") {
        Some(ResourceKind::Script)
    } else if first.starts_with("text/css") {
        Some(ResourceKind::Stylesheet)
    } else if first.starts_with("video/") || first.starts_with("audio/") {
        Some(ResourceKind::Media)
    } else {
        None
    };
    by_extension.or(by_accept).filter(|k| skip.contains(k))
}

/// Whether a redirect points at a block page (Google's `/sorry/` and the like).
fn is_block_redirect(parts: &http::response::Parts, policy: &HostPolicy) -> bool {
    if !parts.status.is_redirection() {
        return false;
    }
    let Some(location) = parts.headers.get(LOCATION).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let location = location.to_ascii_lowercase();
    policy
        .block_markers
        .iter()
        .any(|m| m.starts_with('/') && location.contains(m))
}

/// A fresh bodiless request from a kept template (for retries).
fn rebuild(method: &Method, uri: &Uri, headers: &HeaderMap) -> Request<UpstreamBody> {
    let mut request = Request::new(UpstreamBody::Empty);
    *request.method_mut() = method.clone();
    *request.uri_mut() = uri.clone();
    *request.headers_mut() = headers.clone();
    request
}

/// What an upstream response says, for the host's pacing.
fn answer_of<B>(response: &Response<B>, latency: Duration, policy: &HostPolicy) -> Answer {
    let now = SystemTime::now();
    let feedback = feedback::classify(response.status(), &policy.backoff_statuses);
    let headers = response.headers();
    let retry_after = match feedback {
        Feedback::Throttled | Feedback::Overloaded => headers
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| feedback::retry_after(v, now)),
        _ => None,
    };
    Answer {
        feedback,
        status: Some(response.status().as_u16()),
        latency,
        retry_after,
        server: feedback::server_budget(headers, now),
    }
}

/// The body courtesy sends upstream: the client's, streamed, or nothing (a retry).
#[derive(Debug)]
pub enum UpstreamBody {
    /// The client's request body, streamed through.
    Client(Incoming),
    /// No body.
    Empty,
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

fn via_for(version: Version, ours: &HeaderValue) -> HeaderValue {
    if version == Version::HTTP_11 {
        return ours.clone();
    }
    let protocol = match version {
        Version::HTTP_09 => "0.9",
        Version::HTTP_10 => "1.0",
        Version::HTTP_2 => "2",
        Version::HTTP_3 => "3",
        _ => "1.1",
    };
    let ours = ours.to_str().unwrap_or("1.1 courtesy");
    let name = ours.split_once(' ').map_or(ours, |(_, n)| n);
    HeaderValue::from_str(&format!("{protocol} {name}"))
        .unwrap_or_else(|_| HeaderValue::from_static("1.1 courtesy"))
}

/// Maps an upstream client error to the status, Proxy-Status error type and details for the client.
fn classify_client_error(
    err: &hyper_util::client::legacy::Error,
) -> (StatusCode, ProxyError, String) {
    let mut source: Option<&(dyn StdError + 'static)> = err.source();
    while let Some(e) = source {
        if let Some(dns) = e.downcast_ref::<DnsError>() {
            return dns_failure(dns);
        }
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return tls_failure(tls);
        }
        if let Some(io) = e.downcast_ref::<io::Error>() {
            // TLS errors arrive wrapped in one or more io::Errors.
            let mut inner = io.get_ref();
            while let Some(i) = inner {
                if let Some(tls) = i.downcast_ref::<rustls::Error>() {
                    return tls_failure(tls);
                }
                inner = i.downcast_ref::<io::Error>().and_then(|io| io.get_ref());
            }
            return io_failure(io, "the origin");
        }
        if let Some(h) = e.downcast_ref::<hyper::Error>() {
            if h.is_parse() || h.is_parse_status() || h.is_parse_too_large() {
                return (
                    StatusCode::BAD_GATEWAY,
                    ProxyError::HttpProtocolError,
                    format!("the origin sent an invalid response: {h}"),
                );
            }
            if h.is_incomplete_message() || h.is_closed() || h.is_canceled() {
                return (
                    StatusCode::BAD_GATEWAY,
                    ProxyError::ConnectionTerminated,
                    format!("the origin closed the connection before a complete response: {h}"),
                );
            }
            if h.is_body_write_aborted() || h.is_user() {
                return (
                    StatusCode::BAD_GATEWAY,
                    ProxyError::HttpRequestError,
                    format!("the request body could not be sent: {h}"),
                );
            }
        }
        source = e.source();
    }
    let kind = if err.is_connect() {
        ProxyError::DestinationUnavailable
    } else {
        ProxyError::ConnectionTerminated
    };
    (
        StatusCode::BAD_GATEWAY,
        kind,
        format!("upstream error: {err}"),
    )
}

fn tls_failure(err: &rustls::Error) -> (StatusCode, ProxyError, String) {
    let kind = match err {
        rustls::Error::InvalidCertificate(_) => ProxyError::TlsCertificateError,
        rustls::Error::AlertReceived(_) => ProxyError::TlsAlertReceived,
        _ => ProxyError::TlsProtocolError,
    };
    let details = format!("upstream TLS failed: {err}");
    (StatusCode::BAD_GATEWAY, kind, details)
}

fn dns_failure(err: &DnsError) -> (StatusCode, ProxyError, String) {
    match err {
        DnsError::Timeout { .. } => (
            StatusCode::GATEWAY_TIMEOUT,
            ProxyError::DnsTimeout,
            err.to_string(),
        ),
        DnsError::Failed { .. } => (
            StatusCode::BAD_GATEWAY,
            ProxyError::DnsError,
            err.to_string(),
        ),
    }
}

fn io_failure(err: &io::Error, what: &str) -> (StatusCode, ProxyError, String) {
    match err.kind() {
        io::ErrorKind::ConnectionRefused => (
            StatusCode::BAD_GATEWAY,
            ProxyError::ConnectionRefused,
            format!("{what} refused the connection"),
        ),
        io::ErrorKind::TimedOut => (
            StatusCode::GATEWAY_TIMEOUT,
            ProxyError::ConnectionTimeout,
            format!("no TCP connection to {what} within the connect timeout"),
        ),
        io::ErrorKind::ConnectionReset
        | io::ErrorKind::ConnectionAborted
        | io::ErrorKind::BrokenPipe
        | io::ErrorKind::UnexpectedEof => (
            StatusCode::BAD_GATEWAY,
            ProxyError::ConnectionTerminated,
            format!("{what} reset the connection: {err}"),
        ),
        _ => (
            StatusCode::BAD_GATEWAY,
            ProxyError::DestinationUnavailable,
            format!("cannot reach {what}: {err}"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_go_and_end_to_end_ones_stay() {
        let mut h = HeaderMap::new();
        for (k, v) in [
            ("connection", "close, x-secret"),
            ("x-secret", "1"),
            ("keep-alive", "timeout=5"),
            ("proxy-connection", "keep-alive"),
            ("proxy-authorization", "Basic Zm9v"),
            ("te", "trailers"),
            ("trailer", "x-sum"),
            ("upgrade", "websocket"),
            ("transfer-encoding", "chunked"),
            ("accept", "*/*"),
            ("cookie", "a=b"),
        ] {
            h.append(k, HeaderValue::from_static(v));
        }
        strip_hop_by_hop(&mut h);
        let left: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        assert_eq!(left, vec!["accept", "cookie"]);
    }

    #[test]
    fn targets_are_lowercased_with_explicit_ports() {
        let t = Target::of_request(&"http://Example.COM/x".parse().unwrap()).unwrap();
        assert_eq!(t.key(), "example.com:80");
        let t = Target::of_request(&"http://[::1]:8080/".parse().unwrap()).unwrap();
        assert_eq!((t.host.as_str(), t.key().as_str()), ("::1", "[::1]:8080"));
        assert!(Target::of_request(&"/relative".parse().unwrap()).is_err());
        assert!(Target::of_request(&"https://a.test/".parse().unwrap()).is_err());
        assert!(Target::of_request(&"ftp://a.test/".parse().unwrap()).is_err());
        let c = Target::of_connect(&"a.test:443".parse().unwrap()).unwrap();
        assert_eq!(c.key(), "a.test:443");
    }

    #[test]
    fn skipped_resources_are_told_by_extension_and_accept() {
        let all = [
            ResourceKind::Image,
            ResourceKind::Font,
            ResourceKind::Script,
            ResourceKind::Stylesheet,
            ResourceKind::Media,
        ];
        let req = |path: &str, accept: &str| {
            Request::get(format!("http://a.test{path}"))
                .header("accept", accept)
                .body(())
                .unwrap()
        };
        assert_eq!(
            skipped_resource(&req("/logo.PNG", "*/*"), &all),
            Some(ResourceKind::Image)
        );
        assert_eq!(
            skipped_resource(&req("/f.woff2", "*/*"), &all),
            Some(ResourceKind::Font)
        );
        assert_eq!(
            skipped_resource(&req("/app.js?v=1", "*/*"), &all),
            Some(ResourceKind::Script)
        );
        assert_eq!(
            skipped_resource(&req("/s.css", "*/*"), &all),
            Some(ResourceKind::Stylesheet)
        );
        assert_eq!(
            skipped_resource(&req("/v.mp4", "*/*"), &all),
            Some(ResourceKind::Media)
        );
        assert_eq!(
            skipped_resource(&req("/pic", "image/avif,image/webp"), &all),
            Some(ResourceKind::Image)
        );
        assert_eq!(
            skipped_resource(&req("/page.html", "text/html"), &all),
            None
        );
        assert_eq!(
            skipped_resource(&req("/logo.png", "*/*"), &[ResourceKind::Font]),
            None
        );
        assert_eq!(skipped_resource(&req("/logo.png", "*/*"), &[]), None);
    }

    #[test]
    fn via_names_the_protocol_version() {
        let ours = HeaderValue::from_static("1.1 courtesy-0000abcd");
        assert_eq!(via_for(Version::HTTP_11, &ours), "1.1 courtesy-0000abcd");
        assert_eq!(via_for(Version::HTTP_10, &ours), "1.0 courtesy-0000abcd");
    }

    #[test]
    fn io_errors_map_to_rfc_9209_types() {
        let refused = io::Error::from(io::ErrorKind::ConnectionRefused);
        assert_eq!(io_failure(&refused, "x").1, ProxyError::ConnectionRefused);
        let timed_out = io::Error::from(io::ErrorKind::TimedOut);
        let (status, kind, _) = io_failure(&timed_out, "x");
        assert_eq!(
            (status, kind),
            (StatusCode::GATEWAY_TIMEOUT, ProxyError::ConnectionTimeout)
        );
        let reset = io::Error::from(io::ErrorKind::ConnectionReset);
        assert_eq!(io_failure(&reset, "x").1, ProxyError::ConnectionTerminated);
    }
}
