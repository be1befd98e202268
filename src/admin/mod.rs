//! The admin listener: the live dashboard, Prometheus metrics, the host API, operator overrides,
//! reload, the CA certificate, the Web Bot Auth key directory (`directory.rs`), the check a
//! crawler asks before it queues a URL (`/v1/check`, `check.rs`), and the stream of host events
//! (`events.rs`).
//!
//! It runs on its own port so that it is never confused with proxy traffic. With `[admin] token`
//! set, every request must carry it as a bearer token (and the token is required to bind beyond
//! loopback). Every failure is a response; nothing here panics on input.

pub(crate) mod card;
mod check;
mod directory;
mod events;
pub(crate) mod explain;
pub(crate) mod reload;
pub(crate) mod views;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::header::{AUTHORIZATION, CONTENT_TYPE, WWW_AUTHENTICATE};
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use serde_json::json;
use tracing::info;

use crate::admin::views::{unix_ms, BudgetView, HostView, HostsPage, JobsPage, Totals};
use crate::budget::jobs::Jobs;
use crate::budget::keys::{BudgetKey, Keyer};
use crate::budget::limiter::{HostSnapshot, Limiter, OperatorAction};
use crate::config::LiveConfig;
use crate::front::sockets::Sockets;
use crate::observe::events::Hub;
use crate::observe::metrics::Metrics;
use crate::pacing::robots::RobotsCache;
use crate::proxy::answer::body::ProxyBody;
use crate::proxy::answer::response::{self, local, ProxyError};
use crate::proxy::send::sign::PlainUnsigned;
use crate::upstream::tls::Interceptor;

/// The dashboard: one self-contained page that polls `/hosts`.
const DASHBOARD: &str = include_str!("dashboard.html");

/// State for the admin service.
#[derive(Debug)]
pub(crate) struct Admin {
    config: LiveConfig,
    limiter: Arc<Limiter>,
    keyer: Keyer,
    metrics: Arc<Metrics>,
    interceptor: Arc<Interceptor>,
    /// The admin listener's own address: the only `Host` a mutating request without a token may
    /// name (DNS rebinding sends another).
    own: Option<SocketAddr>,
    /// The proxy's table of jobs, for `/jobs` and the job metrics.
    jobs: Arc<Jobs>,
    /// The proxy's open WebSockets and tunnels: a pause closes a host's, and so does
    /// `POST /hosts/<h>/close-sockets`.
    sockets: Arc<Sockets>,
    /// The hosts whose requests went unsigned over plain http while signing was on.
    plain_unsigned: Arc<PlainUnsigned>,
    /// The robots.txt files the proxy knows: `/hosts` names the licences they point to.
    robots: Arc<RobotsCache>,
    /// The proxy whose phases decide `/v1/check` (`None`: the check answers 503).
    checker: Option<Arc<crate::proxy::Proxy>>,
    /// The host events `GET /v1/events` streams (the limiter's herald publishes to it).
    events: Arc<Hub>,
}

impl Admin {
    /// The admin service over the config in force and the shared limiter; `keyer` finds the
    /// budget a `host:port` spends (the proxy's own, so that both find the same one).
    pub(crate) fn new(
        config: LiveConfig,
        limiter: Arc<Limiter>,
        keyer: Keyer,
        metrics: Arc<Metrics>,
        interceptor: Arc<Interceptor>,
    ) -> Self {
        Admin {
            config,
            limiter,
            keyer,
            metrics,
            interceptor,
            own: None,
            jobs: Arc::new(Jobs::new()),
            sockets: Sockets::new(1),
            plain_unsigned: Arc::new(PlainUnsigned::default()),
            robots: Arc::new(RobotsCache::new()),
            checker: None,
            events: Arc::default(),
        }
    }

    /// This service, answering `/v1/check` with `proxy`'s own phases (`Proxy::check`), so that a
    /// check and a fetch never disagree.
    pub(crate) fn with_checker(mut self, proxy: Arc<crate::proxy::Proxy>) -> Self {
        self.checker = Some(proxy);
        self
    }

    /// This service, streaming the events of `hub` at `GET /v1/events`.
    pub(crate) fn with_events(mut self, hub: Arc<Hub>) -> Self {
        self.events = hub;
        self
    }

    /// The hub `GET /v1/events` streams: closed at shutdown, so that every stream ends.
    pub(crate) fn events_hub(&self) -> &Arc<Hub> {
        &self.events
    }

    /// This service, naming in `/hosts` the licences of the robots.txt files the proxy knows
    /// (`Proxy::robots`).
    pub(crate) fn with_robots(mut self, robots: Arc<RobotsCache>) -> Self {
        self.robots = robots;
        self
    }

    /// This service, telling in `/hosts` which hosts' requests went unsigned over plain http
    /// (`Proxy::plain_unsigned`).
    pub(crate) fn with_plain_unsigned(mut self, hosts: Arc<PlainUnsigned>) -> Self {
        self.plain_unsigned = hosts;
        self
    }

    /// One host's view, as `/hosts` shows it.
    fn view(&self, snapshot: &HostSnapshot) -> HostView {
        annotated(
            HostView::of(snapshot, SystemTime::now()),
            &snapshot.key,
            (&self.plain_unsigned, &self.robots, &self.metrics),
        )
    }

    /// This service, closing the proxy's open sockets (`Proxy::sockets`) on a pause and on
    /// `close-sockets`.
    pub(crate) fn with_sockets(mut self, sockets: Arc<Sockets>) -> Self {
        self.sockets = sockets;
        self
    }

    /// This service, showing the proxy's table of jobs (`Proxy::jobs`).
    pub(crate) fn with_jobs(mut self, jobs: Arc<Jobs>) -> Self {
        self.jobs = jobs;
        self
    }

    /// This service, answering on the admin listener at `addr`.
    pub(crate) fn listening_on(mut self, addr: SocketAddr) -> Self {
        self.own = Some(addr);
        self
    }

    /// Answers one admin request. Never fails: errors are responses.
    pub(crate) async fn serve(
        self: Arc<Self>,
        req: Request<Incoming>,
        client: SocketAddr,
    ) -> Result<Response<ProxyBody>, Infallible> {
        let config = self.config.get();
        if !config.client_allowed(client.ip()) {
            return Ok(response::client_not_allowed(client.ip()));
        }
        // The dashboard page itself holds no data: it is served without the token, and reads the
        // token for its /hosts calls from the URL fragment (`/#token=...`).
        // The probes (`/healthz`, `/readyz`) tell nothing but "up" and "ready": a kubelet or
        // a container's HEALTHCHECK reaches them without the token too.
        // The key directory and the Signature Agent Card hold public facts only, published for
        // every site to fetch: they are served without the token, and only under the Host of a
        // configured signature_agent (behind the operator's public host); any other Host gets
        // a 404 (`directory::agent_of`).
        let public = matches!(req.uri().path(), directory::PATH | card::PATH);
        let is_page = (public || matches!(req.uri().path(), "/" | "/healthz" | "/readyz"))
            && matches!(*req.method(), Method::GET | Method::HEAD);
        if let Some(token) = config.admin.token.as_ref().filter(|_| !is_page) {
            if !bearer_matches(req.headers().get(AUTHORIZATION), token) {
                let mut r = local(
                    StatusCode::UNAUTHORIZED,
                    ProxyError::HttpRequestDenied,
                    "the admin API needs `Authorization: Bearer <[admin] token>`",
                    None,
                );
                r.headers_mut()
                    .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
                return Ok(r);
            }
        }
        // Without a token, a web page must not steer courtesy (writes: Host, Origin,
        // Sec-Fetch-Site) nor read it through a name rebound to loopback (reads: Host; a
        // cross-origin read under the listener's own Host is the browser's to refuse). The probes
        // say only "up" and are answered under any Host. With a token, the token decides: a page
        // rebound or not cannot send it.
        let probe = public || matches!(req.uri().path(), "/healthz" | "/readyz");
        if config.admin.token.is_none() && !probe {
            // A check, GET or POST, may send robots.txt fetches to the sites it names: a web
            // page must no more cause that than steer courtesy, so it takes the write rules.
            // Crawlers and tools send neither `Origin` nor `Sec-Fetch-Site`.
            let check = req.uri().path() == "/v1/check";
            let mutating =
                matches!(*req.method(), Method::POST | Method::PUT | Method::DELETE) || check;
            let refused = if mutating {
                self.cross_site(req.headers())
            } else {
                self.foreign_host(req.headers())
            };
            if let Some(refused) = refused {
                return Ok(local(
                    StatusCode::FORBIDDEN,
                    ProxyError::HttpRequestDenied,
                    &refused,
                    None,
                ));
            }
        }
        Ok(self.route(req).await)
    }

    /// Why a mutating request without a token looks sent by a web page rather than an operator,
    /// if it does: a `Host` other than this listener's own (a name rebound to loopback), or an
    /// `Origin` other than this listener's (a cross-site POST). Tools send no `Origin`.
    fn cross_site(&self, headers: &http::HeaderMap) -> Option<String> {
        if let Some(refused) = self.foreign_host(headers) {
            return Some(refused);
        }
        let host = host_of(headers);
        if let Some(origin) = headers.get(http::header::ORIGIN) {
            let origin = origin.to_str().unwrap_or("");
            let own = format!("http://{host}");
            if !origin.eq_ignore_ascii_case(&own) {
                return Some(format!(
                    "Origin {origin:?} is not this admin listener's own: a web page cannot \
                     steer courtesy"
                ));
            }
        }
        if headers
            .get("sec-fetch-site")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.eq_ignore_ascii_case("cross-site"))
        {
            return Some("a cross-site request (Sec-Fetch-Site) cannot steer courtesy".into());
        }
        None
    }

    /// Why a request without a token is refused for its `Host`, if it is: one other than this
    /// listener's own, which is what a page on a name rebound to loopback sends (DNS rebinding).
    fn foreign_host(&self, headers: &http::HeaderMap) -> Option<String> {
        let host = host_of(headers);
        (!self.is_own_host(host)).then(|| {
            format!(
                "Host {host:?} is not this admin listener's own (set [admin] token to use \
                 the admin API under another name)"
            )
        })
    }

    /// Whether `host` (a `Host` header) names this listener ([`names_listener`]).
    fn is_own_host(&self, host: &str) -> bool {
        self.own.is_none_or(|own| names_listener(host, own))
    }

    /// The admin API's routes, one line each: the method and path segments, and the answer.
    async fn route(&self, req: Request<Incoming>) -> Response<ProxyBody> {
        let path = req.uri().path().to_string();
        let query = req.uri().query().unwrap_or("").to_string();
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        let method = req.method().clone();
        match (&method, segments.as_slice()) {
            (&Method::GET | &Method::HEAD, [""]) => {
                with_type(DASHBOARD.to_string(), "text/html; charset=utf-8")
            }
            (&Method::GET | &Method::HEAD, ["healthz"]) => with_type("ok\n".into(), TEXT),
            (&Method::GET | &Method::HEAD, ["readyz"]) => self.readiness(),
            (&Method::GET | &Method::HEAD, ["jobs"]) => self.jobs_page(),
            (&Method::GET | &Method::HEAD, ["metrics"]) => self.metrics_page(&req),
            (&Method::GET | &Method::HEAD, ["ca.pem"]) => with_type(
                self.interceptor.ca().cert_pem().to_string(),
                "application/x-pem-file",
            ),
            (&Method::GET | &Method::HEAD, _) if path == directory::PATH => {
                directory::answer(&self.config.get(), directory::host_of(&req))
            }
            (&Method::GET | &Method::HEAD, _) if path == card::PATH => {
                card::answer(&self.config.get(), directory::host_of(&req))
            }
            (&Method::GET | &Method::HEAD, ["hosts"]) => self.hosts(&query),
            (&Method::GET | &Method::HEAD, ["hosts", key]) => self.host(key).await,
            (&Method::POST, ["hosts", key, "pause"]) => self.pause(key, &query).await,
            (&Method::POST, ["hosts", key, "close-sockets"]) => self.close_sockets(key).await,
            (&Method::POST, ["hosts", key, "resume"]) => {
                self.operate(key, OperatorAction::Resume).await
            }
            (&Method::PUT, ["hosts", key, "rate"]) => self.set_rate(key, &query, req).await,
            (&Method::DELETE, ["hosts", key, "rate"]) => {
                self.operate(key, OperatorAction::ClearRate).await
            }
            (&Method::POST, ["reload"]) => self.reload(),
            (&Method::GET | &Method::HEAD, ["v1", "check"]) => self.check_one(&query).await,
            (&Method::POST, ["v1", "check"]) => self.check_many(&query, req).await,
            (&Method::GET, ["v1", "events"]) => self.events(req.headers(), &query).await,
            (&Method::GET | &Method::HEAD, ["v1", "events", "stats"]) => self.events_stats(),
            _ => error_json(
                StatusCode::NOT_FOUND,
                &format!("no admin endpoint {method} {path}"),
            ),
        }
    }

    /// `GET /jobs`: every job with its weight, quota and requests waiting.
    fn jobs_page(&self) -> Response<ProxyBody> {
        let waiting = self.limiter.waiting_by_job();
        let page = JobsPage::of(&self.config.get(), &self.jobs, &waiting);
        json_response(StatusCode::OK, &page)
    }

    /// `GET /metrics`: the job series brought up to date, then the scrape in the format the
    /// scraper accepts.
    fn metrics_page(&self, req: &Request<Incoming>) -> Response<ProxyBody> {
        let waiting = self.limiter.waiting_by_job();
        let callers = self.jobs.callers(&self.config.get());
        self.metrics.count_jobs(&callers, &waiting);
        self.metrics.count_auth_failures(self.jobs.guard.failures());
        let text = self
            .metrics
            .render(&self.limiter, self.interceptor.cache_stats());
        let accept = req
            .headers()
            .get(http::header::ACCEPT)
            .and_then(|v| v.to_str().ok());
        let (body, content_type) = crate::observe::metrics::negotiate(text, accept);
        with_type(body, content_type)
    }

    /// `GET /hosts/<host>`: one known host's view.
    async fn host(&self, key: &str) -> Response<ProxyBody> {
        match self.find(key).await {
            Ok(budget) => match self.limiter.snapshot_by_key(&budget.key) {
                Some(s) => json_response(StatusCode::OK, &self.view(&s)),
                None => error_json(StatusCode::NOT_FOUND, &format!("no host {}", budget.name())),
            },
            Err((status, message)) => error_json(status, &message),
        }
    }

    /// `POST /hosts/<host>/pause?seconds=N`: an operator's pause, up to 30 days.
    async fn pause(&self, key: &str, query: &str) -> Response<ProxyBody> {
        let seconds = query_param(query, "seconds")
            .and_then(|s| s.parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s > 0.0 && *s <= 30.0 * 86400.0);
        match seconds {
            Some(s) => {
                self.operate(key, OperatorAction::Pause(Duration::from_secs_f64(s)))
                    .await
            }
            None => error_json(
                StatusCode::BAD_REQUEST,
                "pause needs ?seconds=N with 0 < N <= 2592000",
            ),
        }
    }

    /// `POST /hosts/<host>/close-sockets`: the host's WebSockets and tunnels closed.
    async fn close_sockets(&self, key: &str) -> Response<ProxyBody> {
        match self.find(key).await {
            Ok(budget) => {
                let closed = self.sockets.close_host(&budget.key);
                info!(host = %budget.key, closed, "operator: closed the host's WebSockets and tunnels");
                json_response(
                    StatusCode::OK,
                    &json!({ "host": budget.key, "closed": closed }),
                )
            }
            Err((status, message)) => error_json(status, &message),
        }
    }

    /// `PUT /hosts/<host>/rate[?force=true]`: an operator's rate, the body a number of requests
    /// per second.
    async fn set_rate(
        &self,
        key: &str,
        query: &str,
        req: Request<Incoming>,
    ) -> Response<ProxyBody> {
        let force = query_param(query, "force").is_some_and(|v| v == "true" || v == "1");
        match read_small_body(req).await {
            Ok(text) => match text.trim().parse::<f64>() {
                Ok(rate) => {
                    self.operate(key, OperatorAction::SetRate { rate, force })
                        .await
                }
                Err(_) => error_json(
                    StatusCode::BAD_REQUEST,
                    &format!(
                        "the body must be a number of requests per second, got {:?}",
                        text.trim()
                    ),
                ),
            },
            Err(response) => response,
        }
    }

    /// `POST /reload`: the config file read again; a rejected one leaves the old in force.
    fn reload(&self) -> Response<ProxyBody> {
        match crate::admin::reload::reload(&self.limiter) {
            Ok(summary) => json_response(StatusCode::OK, &json!({ "reloaded": summary })),
            Err(errors) => json_response(
                StatusCode::BAD_REQUEST,
                &json!({ "error": "the new config was rejected; the old one stays", "errors": errors }),
            ),
        }
    }

    /// `GET /hosts`: at most `limit` hosts (default [`HOSTS_PER_PAGE`], at most
    /// [`MAX_HOSTS_PER_PAGE`]), so that the answer stays bounded however many hosts are known.
    /// Without `after`, the `limit` hosts that most need an operator's eye; with `after` (a
    /// cursor: empty for the first page, then the `next` of the page before), the hosts in key
    /// order after it, and `next` while more remain. The totals always count every host.
    fn hosts(&self, query: &str) -> Response<ProxyBody> {
        let limit = match query_param(query, "limit").map(str::parse::<usize>) {
            None => HOSTS_PER_PAGE,
            Some(Ok(n)) if n <= MAX_HOSTS_PER_PAGE => n,
            Some(_) => {
                return error_json(
                    StatusCode::BAD_REQUEST,
                    &format!("limit must be a whole number of hosts, at most {MAX_HOSTS_PER_PAGE}"),
                )
            }
        };
        let after = query_param(query, "after").map(percent_decode);
        if after.is_some() && limit == 0 {
            return error_json(StatusCode::BAD_REQUEST, "a page (after=) needs limit >= 1");
        }
        let mut snapshots = self.limiter.snapshots();
        let total = Totals::of(&snapshots);
        let next = match &after {
            Some(after) => page_after(&mut snapshots, after, limit),
            None => {
                keep_most_relevant(&mut snapshots, limit);
                None
            }
        };
        let now = SystemTime::now();
        json_response(
            StatusCode::OK,
            &HostsPage {
                now_unix_ms: unix_ms(now),
                total,
                budget: BudgetView::of(&self.limiter),
                next,
                hosts: HostList(
                    &snapshots,
                    now,
                    (&self.plain_unsigned, &self.robots, &self.metrics),
                ),
            },
        )
    }

    async fn operate(&self, key: &str, action: OperatorAction) -> Response<ProxyBody> {
        let budget = match self.find(key).await {
            Ok(found) => found,
            Err((status, message)) => return error_json(status, &message),
        };
        let pausing = matches!(action, OperatorAction::Pause(_));
        match self.limiter.operate_on(&budget, action) {
            Ok(snapshot) => {
                if pausing {
                    // A paused host's open sockets and tunnels close with it.
                    let closed = self.sockets.close_host(&budget.key);
                    if closed > 0 {
                        info!(host = %budget.key, closed, "closed the paused host's WebSockets and tunnels");
                    }
                }
                json_response(StatusCode::OK, &self.view(&snapshot))
            }
            Err(e) => error_json(StatusCode::UNPROCESSABLE_ENTITY, &e.to_string()),
        }
    }

    /// Resolves a path segment to the budget it names: a known budget's key (`host:port`, a
    /// domain, an address), a `host:port` or `[v6]:port` (the budget its rule's `key` gives it,
    /// known or not), or a bare host that matches exactly one known budget.
    async fn find(&self, segment: &str) -> Result<BudgetKey, (StatusCode, String)> {
        let decoded = percent_decode(segment).to_ascii_lowercase();
        if let Some(known) = self.limiter.known_key(&decoded) {
            return Ok(known);
        }
        // Any spelling of a host names its budget: `localhost.:P`, `LOCALHOST:P`, `[::0001]:P`
        // and `bücher.example:P` are the canonical names the proxy keys them by.
        let (host, port) = crate::wire::host_name::split(&decoded)
            .map_err(|e| (StatusCode::BAD_REQUEST, e.to_string()))?;
        if let Some(port) = port {
            let kind = self.config.get().policy_for(&host, port).scope.key;
            return self
                .keyer
                .key(&host, port, kind)
                .await
                .map_err(|e| (StatusCode::BAD_GATEWAY, e.to_string()));
        }
        // A bare name: a domain or address key in its canonical spelling, or a host's name.
        let decoded = host;
        let as_key = match decoded.parse::<std::net::IpAddr>() {
            Ok(ip) => crate::budget::keys::address_key(ip),
            Err(_) => decoded.clone(),
        };
        if let Some(known) = self.limiter.known_key(&as_key) {
            return Ok(known);
        }
        let matches: Vec<HostSnapshot> = self
            .limiter
            .snapshots()
            .into_iter()
            .filter(|s| s.host == decoded)
            .collect();
        match matches.as_slice() {
            [one] => self.limiter.known_key(&one.key).ok_or_else(|| {
                (
                    StatusCode::NOT_FOUND,
                    format!("{} was just forgotten", one.key),
                )
            }),
            [] => Err((
                StatusCode::NOT_FOUND,
                format!("no known host {decoded:?}; name it as host:port"),
            )),
            many => Err((
                StatusCode::BAD_REQUEST,
                format!(
                    "{decoded:?} is ambiguous: {}",
                    many.iter()
                        .map(|s| s.key.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )),
        }
    }
}

const TEXT: &str = "text/plain; charset=utf-8";

impl Admin {
    /// `/readyz`: 200 while courtesy takes requests (listening, CA loaded, the budget store in
    /// force), 503 once it drains for shutdown, so that a load balancer stops sending to it; 503
    /// too while on the fallback share with `[shared] ready_in_fallback = false`.
    fn readiness(&self) -> Response<ProxyBody> {
        let draining = self.limiter.is_shutting_down();
        let unready_in_fallback = self
            .limiter
            .store()
            .is_some_and(|s| s.in_fallback() && !s.settings().ready_in_fallback);
        let status = if draining || unready_in_fallback {
            StatusCode::SERVICE_UNAVAILABLE
        } else {
            StatusCode::OK
        };
        json_response(
            status,
            &json!({
                "ready": !draining && !unready_in_fallback,
                "listening": !draining,
                "ca_loaded": true,
                "budget": self.limiter.budget_mode(),
            }),
        )
    }
}

/// A request's `Host` header (empty when absent or not text).
fn host_of(headers: &http::HeaderMap) -> &str {
    headers
        .get(http::header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

/// Whether the `Host` header `host` names the listener at `own`: its address in any spelling (any
/// local address for a wildcard listener), or `localhost`, with its port (80 when none is given).
pub(crate) fn names_listener(host: &str, own: SocketAddr) -> bool {
    let host = host.trim().to_ascii_lowercase();
    let (name, port) = match split_key(&host) {
        Some((name, port)) => (name, port),
        None if host.contains("]:") || host.matches(':').count() == 1 => return false,
        None => (
            host.trim_start_matches('[')
                .trim_end_matches(']')
                .to_string(),
            80,
        ),
    };
    if port != own.port() {
        return false;
    }
    let ip = match crate::wire::literal::literal_ip(&name) {
        Some(ip) => ip,
        None if name == "localhost" => std::net::Ipv4Addr::LOCALHOST.into(),
        None => return false,
    };
    crate::upstream::resolve::Destinations::new(vec![own], Vec::new(), Vec::new())
        .check(SocketAddr::new(ip, port))
        .is_err()
}

/// Hosts per `GET /hosts` answer when the request does not say.
const HOSTS_PER_PAGE: usize = 1000;
/// The most hosts one `GET /hosts` answer lists.
const MAX_HOSTS_PER_PAGE: usize = 10_000;

/// Keeps the first `limit` hosts after the cursor `after` of `snapshots` (in key order, as
/// `Limiter::snapshots` gives them); the cursor of the next page when more remain.
fn page_after(snapshots: &mut Vec<HostSnapshot>, after: &str, limit: usize) -> Option<String> {
    let (range, next) = page_bounds(snapshots, after, limit);
    snapshots.truncate(range.end);
    snapshots.drain(..range.start);
    next
}

/// Where the page after `after` lies in `sorted` (hosts in key order), and the next cursor.
fn page_bounds(
    sorted: &[HostSnapshot],
    after: &str,
    limit: usize,
) -> (std::ops::Range<usize>, Option<String>) {
    let start = sorted.partition_point(|s| s.key.as_str() <= after);
    let end = start.saturating_add(limit).min(sorted.len());
    let next = (end < sorted.len() && end > start).then(|| sorted[end - 1].key.clone());
    (start..end, next)
}

/// Keeps the `limit` hosts an operator most needs to see, still in key order: paused and cooling
/// down first, then by requests queued, in flight, and sent. With a hundred thousand known hosts,
/// the dashboard's once-a-second poll then costs a snapshot of each, not a JSON object of each.
fn keep_most_relevant(snapshots: &mut Vec<HostSnapshot>, limit: usize) {
    if snapshots.len() <= limit {
        return;
    }
    let rank = |s: &HostSnapshot| match s.state() {
        "paused" => 0,
        "cooling_down" => 1,
        _ => 2,
    };
    let order = |a: &HostSnapshot, b: &HostSnapshot| {
        rank(a)
            .cmp(&rank(b))
            .then(b.queued.cmp(&a.queued))
            .then(b.in_flight.cmp(&a.in_flight))
            .then(b.stats.sent.cmp(&a.stats.sent))
            .then(a.key.cmp(&b.key))
    };
    if limit > 0 {
        snapshots.select_nth_unstable_by(limit - 1, order);
    }
    snapshots.truncate(limit);
    snapshots.sort_by(|a, b| a.key.cmp(&b.key));
}

/// Compares the bearer token without an early exit on the first differing byte.
fn bearer_matches(header: Option<&HeaderValue>, token: &str) -> bool {
    // RFC 9110 11.1: the scheme is case-insensitive.
    let Some(given) = header.and_then(|h| h.to_str().ok()).and_then(|h| {
        let (scheme, rest) = h.trim_start().split_once(' ')?;
        scheme.eq_ignore_ascii_case("bearer").then_some(rest)
    }) else {
        return false;
    };
    let (a, b) = (given.trim().as_bytes(), token.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn split_key(key: &str) -> Option<(String, u16)> {
    if let Some(rest) = key.strip_prefix('[') {
        let (ip, port) = rest.split_once("]:")?;
        return Some((ip.to_string(), port.parse().ok()?));
    }
    let (host, port) = key.rsplit_once(':')?;
    if host.contains(':') || host.is_empty() {
        return None;
    }
    Some((host.to_string(), port.parse().ok()?))
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn query_param<'a>(query: &'a str, name: &str) -> Option<&'a str> {
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

async fn read_small_body(req: Request<Incoming>) -> Result<String, Response<ProxyBody>> {
    match Limited::new(req.into_body(), 1024).collect().await {
        Ok(body) => Ok(String::from_utf8_lossy(&body.to_bytes()).into_owned()),
        Err(_) => Err(error_json(
            StatusCode::BAD_REQUEST,
            "the body could not be read (at most 1 KiB)",
        )),
    }
}

fn with_type(body: String, content_type: &'static str) -> Response<ProxyBody> {
    let mut r = Response::new(ProxyBody::Local(Some(Bytes::from(body))));
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r.headers_mut()
        .insert("cache-control", HeaderValue::from_static("no-store"));
    r
}

/// The hosts of a `GET /hosts` answer. Each host's view is made, written and dropped in turn, so
/// that a listing of many hosts costs its text and not also a value for every host.
struct HostList<'a>(
    &'a [HostSnapshot],
    SystemTime,
    (&'a PlainUnsigned, &'a RobotsCache, &'a Metrics),
);

/// `view` of the host `key` with what the proxy knows beside its budget: whether its requests
/// went unsigned over plain http, the licences its robots.txt names (https first, as a budget
/// key names no scheme), and its requests answered without asking it.
fn annotated(
    view: HostView,
    key: &str,
    (plain_unsigned, robots, metrics): (&PlainUnsigned, &RobotsCache, &Metrics),
) -> HostView {
    let mut licenses = robots.licenses(&format!("https://{key}"));
    if licenses.is_empty() {
        licenses = robots.licenses(&format!("http://{key}"));
    }
    view.unsigned_over_plain_http(plain_unsigned.contains(key))
        .licensed(licenses)
        .not_sent(metrics.not_sent_of(key))
}

impl serde::Serialize for HostList<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut seq = serializer.serialize_seq(Some(self.0.len()))?;
        for snapshot in self.0 {
            let view = annotated(HostView::of(snapshot, self.1), &snapshot.key, self.2);
            seq.serialize_element(&view)?;
        }
        seq.end()
    }
}

fn json_response(status: StatusCode, value: &impl serde::Serialize) -> Response<ProxyBody> {
    let mut r = with_type(
        serde_json::to_string_pretty(value).unwrap_or_default() + "\n",
        "application/json",
    );
    *r.status_mut() = status;
    r
}

fn error_json(status: StatusCode, message: &str) -> Response<ProxyBody> {
    json_response(status, &json!({ "error": message }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_queries_are_parsed() {
        assert_eq!(split_key("a.test:443"), Some(("a.test".into(), 443)));
        assert_eq!(split_key("[::1]:8080"), Some(("::1".into(), 8080)));
        assert_eq!(split_key("a.test"), None);
        assert_eq!(split_key("a.test:x"), None);
        assert_eq!(percent_decode("%5B%3A%3A1%5D%3A80"), "[::1]:80");
        assert_eq!(percent_decode("bad%zz%4"), "bad%zz%4");
        assert_eq!(query_param("seconds=30&force=true", "force"), Some("true"));
        assert_eq!(query_param("", "force"), None);
    }

    #[tokio::test]
    async fn a_hundred_thousand_hosts_come_in_bounded_pages_each_host_once() {
        let limiter = Limiter::new(Arc::new(crate::config::Config::default()));
        for i in 0..100_000 {
            drop(limiter.admit((&format!("h{i}.test"), 80)).await.unwrap());
        }
        let now = SystemTime::now();
        let unsigned = PlainUnsigned::default();
        let robots = RobotsCache::new();
        let metrics = Metrics::new(10);
        let body_of = |snapshots: &[HostSnapshot], next: Option<String>| {
            serde_json::to_string_pretty(&HostsPage {
                now_unix_ms: 0,
                total: Totals::default(),
                budget: BudgetView::of(&limiter),
                next,
                hosts: HostList(snapshots, now, (&unsigned, &robots, &metrics)),
            })
            .unwrap()
        };
        let mut after = String::new();
        let mut seen = 0;
        let mut pages = 0;
        let mut largest = 0;
        let all = limiter.snapshots();
        loop {
            let (range, next) = page_bounds(&all, &after, HOSTS_PER_PAGE);
            let page = &all[range];
            assert!(page.len() <= HOSTS_PER_PAGE);
            assert!(page.iter().all(|s| s.key > after), "after the cursor");
            seen += page.len();
            pages += 1;
            largest = largest.max(body_of(page, next.clone()).len());
            match next {
                Some(cursor) => after = cursor,
                None => break,
            }
        }
        assert_eq!(seen, 100_000, "every host once");
        assert_eq!(pages, 100);
        assert!(largest < 4 * 1024 * 1024, "a page is {largest} bytes");
        let mut last = all.clone();
        let cursor = all[all.len() - 2].key.clone();
        assert_eq!(page_after(&mut last, &cursor, HOSTS_PER_PAGE), None);
        assert_eq!(last.len(), 1, "the last page");
        let mut first = all;
        keep_most_relevant(&mut first, HOSTS_PER_PAGE);
        assert_eq!(
            first.len(),
            HOSTS_PER_PAGE,
            "the default page without a cursor"
        );
    }

    #[test]
    fn a_host_header_names_the_listener_only_by_its_address_or_localhost() {
        let own: SocketAddr = "127.0.0.1:3129".parse().unwrap();
        for host in [
            "127.0.0.1:3129",
            "localhost:3129",
            "LOCALHOST:3129",
            "127.1:3129",
        ] {
            assert!(names_listener(host, own), "{host}");
        }
        for host in [
            "",
            "evil.example:3129",
            "127.0.0.1:3128",
            "127.0.0.1",
            "127.0.0.2:3129",
            "127.0.0.1:3129:1",
            "[::1]:3129",
        ] {
            assert!(!names_listener(host, own), "{host}");
        }
        let wildcard: SocketAddr = "[::]:3129".parse().unwrap();
        assert!(names_listener("[::1]:3129", wildcard));
        assert!(names_listener("127.0.0.1:3129", wildcard));
    }

    #[test]
    fn bearer_tokens_must_match_exactly() {
        let token = "0123456789abcdef";
        let ok = HeaderValue::from_static("Bearer 0123456789abcdef");
        assert!(bearer_matches(Some(&ok), token));
        let wrong = HeaderValue::from_static("Bearer 0123456789abcdeX");
        assert!(!bearer_matches(Some(&wrong), token));
        let lower = HeaderValue::from_static("bearer 0123456789abcdef");
        assert!(
            bearer_matches(Some(&lower), token),
            "schemes are case-insensitive"
        );
        let basic = HeaderValue::from_static("Basic 0123456789abcdef");
        assert!(!bearer_matches(Some(&basic), token));
        assert!(!bearer_matches(None, token));
    }
}
