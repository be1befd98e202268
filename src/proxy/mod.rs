//! The proxy service: every request a client sends to the proxy port, answered.
//!
//! The service's error type is `Infallible`: every failure becomes a response (`failure.rs`). Its
//! path, one room per step:
//!
//! | folder | phase |
//! |---|---|
//! | `mod.rs` | the service: client check, the job its credentials name, CONNECT or forward |
//! | `forward/` | one forwarded request: its context, the list of its phases, its target and head |
//! | `refuse/` | the local answers before the host's turn: loops, `skip_resources`, robots.txt, stated preferences |
//! | `cache/` | the response store and its use: dev hits, revalidation, filling it |
//! | `send/` | the host's turn and the paced send: attempts, signing, the exchange, sanitizing, retries |
//! | `answer/` | what the client gets: the body holding the permit, local responses, failures, blocks, timing |
//! | `check.rs` | asking before queueing (`/v1/check`): what a GET of a URL would get now, decided by the phases above |
//! | `connect/` | CONNECT: interception, plain HTTP inside, blind tunnels, WebSockets |
//!
//! The pooled upstream connections are `crate::upstream::pool`'s.
//!
//! The limiter sits immediately around the network call and nowhere else: admit, send, observe,
//! respond. This module does not accept connections (`crate::serve::server`) and does not decide when a
//! request may leave (`crate::budget::limiter`).

pub(crate) mod answer;
pub(crate) mod cache;
pub(crate) mod check;
mod connect;
mod forward;
mod refuse;
pub(crate) mod send;

pub(crate) use connect::upgrade::holds_its_connection;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use http::{Method, Request, Response};
use hyper::body::Incoming;

/// The proxy's parsers of untrusted input, for the crate's property tests.
#[cfg(test)]
pub(crate) mod testing {
    use http::Uri;

    pub(crate) use super::connect::sniff::classify_opening;
    use super::forward::target::Target;

    /// The budget key of an absolute-form request target, or why it is refused.
    pub(crate) fn request_target(uri: &Uri) -> Result<String, String> {
        Target::of_request(uri)
            .map(|t| t.key())
            .map_err(|f| f.details)
    }

    /// The budget key of a CONNECT authority, or why it is refused.
    pub(crate) fn connect_target(uri: &Uri) -> Result<String, String> {
        Target::of_connect(uri)
            .map(|t| t.key())
            .map_err(|f| f.details)
    }

    /// An origin's answer as courtesy passes it on (`sanitize.rs`): whether its framing was
    /// refused, and whether its `Content-Length` went.
    pub(crate) fn sanitized<B>(response: &mut http::Response<B>, head: bool) -> (bool, bool) {
        match super::send::sanitize::sanitize(response, head) {
            Ok(framing) => (
                false,
                framing == super::send::sanitize::Framing::LengthDropped,
            ),
            Err(_) => (true, false),
        }
    }
}

use crate::budget::jobs::{Caller, Jobs};
use crate::budget::keys::{BudgetKey, Keyer};
use crate::budget::limiter::Limiter;
use crate::config::{HostPolicy, LiveConfig};
use crate::front::connections::Connections;
use crate::front::sockets::Sockets;
use crate::observe::alerts::Alerts;
use crate::observe::metrics::Metrics;
use crate::pacing::preferences::HeaderMemory;
use crate::pacing::robots::RobotsCache;
use crate::upstream::pool::{UpstreamSlots, Upstreams};
use crate::upstream::resolve::Resolver;
use crate::upstream::tls::Interceptor;
use answer::blocked::Blocks;
use answer::body::ProxyBody;
use answer::{failure, response, timing};
use forward::target;
use refuse::loops;
use send::sign;

/// `max_upstream_sockets`, or half of `max_upstream_connections` where unset; never more than
/// the table itself.
fn upstream_sockets(asked: Option<usize>, table: usize) -> usize {
    asked.unwrap_or(table / 2).clamp(1, table.max(1))
}

/// How courtesy reaches origins: names resolved through `keyer`'s resolver (so that a connection
/// goes to the address a `key = "ip"` budget was made from), upstream TLS verified with `tls`.
#[derive(Debug)]
pub struct UpstreamSetup {
    /// Makes budget keys; its resolver is the connector's.
    pub keyer: Keyer,
    /// The verified upstream TLS config.
    pub tls: rustls::ClientConfig,
}

/// Everything the service needs, shared by every connection.
#[derive(Debug)]
pub struct Proxy {
    config: LiveConfig,
    limiter: Arc<Limiter>,
    client: Upstreams,
    resolver: Resolver,
    keyer: Keyer,
    interceptor: Arc<Interceptor>,
    metrics: Arc<Metrics>,
    blocks: Arc<Blocks>,
    robots: Arc<RobotsCache>,
    /// The `Content-Usage` response headers remembered per path (stated preferences).
    stated: HeaderMemory,
    cache: Arc<cache::store::ResponseStore>,
    /// Identical requests in flight at once, one origin request for them all (`coalesce`).
    flights: cache::flights::Flights<cache::flights::SharedAnswer>,
    loops: loops::LoopGuard,
    connections: Connections,
    jobs: Arc<Jobs>,
    /// The hosts that asked for signatures (`[signing] mode = "on_challenge"`).
    challenged: Arc<sign::Challenged>,
    /// Where request traces go, when `[telemetry] otlp_endpoint` is set.
    telemetry: Option<Arc<crate::observe::telemetry::Telemetry>>,
    /// The open WebSockets and blind tunnels, bounded and closed by host.
    sockets: Arc<Sockets>,
    /// The hosts whose requests went unsigned over plain http while signing was on.
    plain_unsigned: Arc<sign::PlainUnsigned>,
}

/// Who asks, and what they asked of courtesy itself on the request's CONNECT: the job the
/// credentials named, the CONNECT's `Courtesy-On-Cooldown` and its (or the job's) priority, for
/// every request inside that does not say its own.
#[derive(Debug, Clone)]
pub(crate) struct Asking {
    /// The request's job.
    pub(crate) caller: Caller,
    /// The CONNECT's own answer to a cooldown, else the job's.
    pub(crate) on_cooldown: Option<crate::config::OnCooldown>,
    /// The class of the request within its job, unless it says its own.
    pub(crate) priority: crate::config::Priority,
    /// For the requests inside a CONNECT: the client connection's place (`max_connections`),
    /// kept by a WebSocket joined inside it for the socket's life (`upgrade.rs`; a plain
    /// request carries its own in its extensions).
    pub(crate) slot: Option<Arc<crate::front::gate::Slot>>,
}

impl Asking {
    /// A plain request of `caller`'s: nothing asked beyond what the request itself says and
    /// its job's own settings.
    fn plain(caller: Caller) -> Self {
        let priority = caller.priority();
        Asking {
            on_cooldown: caller.on_cooldown(),
            caller,
            priority,
            slot: None,
        }
    }

    /// An anonymous client's asking, for tests of the phases.
    #[cfg(test)]
    pub(crate) fn for_tests() -> Self {
        let jobs = Jobs::new();
        let config = crate::config::Config::default();
        let caller = jobs
            .identify(&config, &http::HeaderMap::new(), [127, 0, 0, 1].into())
            .expect("an anonymous client is always identified");
        Asking::plain(caller)
    }
}

/// A service and a request's context for unit tests of the phases.
#[cfg(test)]
pub(crate) mod for_tests {
    use std::sync::Arc;

    use http::request::Parts;

    use super::{Asking, Proxy, UpstreamSetup};
    use crate::budget::keys::Keyer;
    use crate::budget::limiter::Limiter;
    use crate::config::{Config, HostPolicy, LiveConfig};
    use crate::front::connections::Connections;
    use crate::observe::metrics::Metrics;
    use crate::proxy::forward::context::RequestContext;
    use crate::proxy::forward::target::Target;
    use crate::upstream::resolve::Resolver;
    use crate::upstream::tls::{Interceptor, LocalCa};

    /// The service under `config`, its state in a scratch directory named by `tag`: its own CA,
    /// the built-in roots upstream, no listener of its own. Needs a Tokio runtime.
    pub(crate) fn proxy(mut config: Config, tag: &str) -> Proxy {
        config.proxy.state_dir = crate::util::scratch::dir(tag);
        let config = Arc::new(config);
        let ca = LocalCa::load_or_create(&config.proxy.state_dir).expect("a CA in a scratch dir");
        let statics = config.proxy.static_hosts.clone();
        let keyer = Keyer::new(Resolver::new(config.proxy.connect_timeout, statics));
        let tls = crate::upstream::tls::client_config(None).expect("the built-in roots");
        Proxy::new(
            LiveConfig::new(config.clone()),
            Limiter::new(config),
            Vec::new(),
            Arc::new(Interceptor::new(ca)),
            UpstreamSetup { keyer, tls },
            Arc::new(Metrics::new(100)),
            Connections::new(),
        )
    }

    /// The head of a request for `url` with these headers.
    pub(crate) fn head(method: &str, url: &str, headers: &[(&str, &str)]) -> Parts {
        let mut request = http::Request::builder().method(method).uri(url);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.body(()).expect("a valid request").into_parts().0
    }

    /// The context of a request with `head` under the default config, its host's policy as
    /// `policy` makes it.
    pub(crate) fn context<'a>(
        asking: &'a Asking,
        head: &Parts,
        policy: impl FnOnce(&mut HostPolicy),
    ) -> RequestContext<'a> {
        let target = Target::of_request(&head.uri).expect("an absolute-form target");
        let mut cx = RequestContext::new(&Config::default(), target, asking, None, head);
        let mut changed = (*cx.policy).clone();
        policy(&mut changed);
        cx.policy = Arc::new(changed);
        cx
    }
}

impl Proxy {
    /// Builds the service state: the pooled upstream client (see [`UpstreamSetup`]), the
    /// interceptor for CONNECTs, and the loop guard for `own_addrs`. Work that outlives a request
    /// (CONNECT tunnels) runs under `connections`, so shutdown waits for it. Per-request settings
    /// are read from `config` when the request comes, so a reload reaches them; the timeouts of
    /// the connector are fixed at start.
    pub fn new(
        config: LiveConfig,
        limiter: Arc<Limiter>,
        own_addrs: Vec<SocketAddr>,
        interceptor: Arc<Interceptor>,
        upstream: UpstreamSetup,
        metrics: Arc<Metrics>,
        connections: Connections,
    ) -> Self {
        let UpstreamSetup {
            keyer,
            tls: upstream_tls,
        } = upstream;
        let alerts = Arc::new(Alerts::new(config.clone(), upstream_tls.clone()));
        let start = config.get();
        let resolver = keyer.resolver().clone();
        let slots = UpstreamSlots::new(
            start.proxy.max_upstream_connections,
            start.proxy.connect_timeout,
        );
        let client = Upstreams::new(&start, resolver.clone(), upstream_tls, slots);
        let sockets = Sockets::new(upstream_sockets(
            start.proxy.max_upstream_sockets,
            start.proxy.max_upstream_connections,
        ));
        Proxy {
            config,
            limiter,
            client,
            resolver,
            keyer,
            interceptor,
            blocks: Arc::new(Blocks::new(metrics.clone(), alerts, sockets.clone())),
            metrics,
            robots: Arc::new(RobotsCache::new()),
            stated: HeaderMemory::default(),
            cache: Arc::new(cache::store::ResponseStore::open(
                start.proxy.state_dir.join("cache"),
                start.proxy.cache_max_bytes,
            )),
            flights: cache::flights::Flights::default(),
            loops: loops::LoopGuard::new(own_addrs),
            connections,
            jobs: Arc::new(Jobs::new()),
            challenged: Arc::new(sign::Challenged::default()),
            telemetry: None,
            sockets,
            plain_unsigned: Arc::new(sign::PlainUnsigned::default()),
        }
    }

    /// The robots.txt files known (for `/hosts`: the licences they name).
    pub(crate) fn robots(&self) -> &Arc<RobotsCache> {
        &self.robots
    }

    /// The hosts whose requests went unsigned over plain http (for `/hosts`).
    pub(crate) fn plain_unsigned(&self) -> &Arc<sign::PlainUnsigned> {
        &self.plain_unsigned
    }

    /// The open WebSockets and blind tunnels (for the admin API: a pause closes a host's, and
    /// `POST /hosts/<h>/close-sockets`).
    pub(crate) fn sockets(&self) -> &Arc<Sockets> {
        &self.sockets
    }

    /// The service, tracing every forwarded request to `telemetry`.
    pub(crate) fn with_telemetry(
        mut self,
        telemetry: Option<Arc<crate::observe::telemetry::Telemetry>>,
    ) -> Self {
        self.telemetry = telemetry;
        self
    }

    /// The budget a request to `target` spends under `policy` (the rule matching it): its
    /// `host:port`, its registrable domain, or the address it connects to (looked up here, which
    /// can fail like any lookup).
    async fn budget_key(
        &self,
        target: &target::Target,
        policy: &HostPolicy,
    ) -> Result<BudgetKey, failure::Failure> {
        self.keyer
            .key(&target.host, target.port, policy.scope.key)
            .await
            .map_err(|e| failure::Failure::of_dns(&e))
    }

    /// The refusal of a target at an address courtesy never dials (`LoopGuard::refuse_destination`).
    async fn refuse_destination(&self, target: &target::Target) -> Option<failure::Failure> {
        // Whether the host leaves through a parent matters only for a name (an address literal
        // is judged either way): no rule lookup on the request's path for the rest.
        let through_parent = || {
            self.config
                .get()
                .policy_for(&target.host, target.port)
                .forward
                .upstream
                .parent()
                .is_some()
        };
        self.loops
            .refuse_destination(&self.resolver, target, through_parent)
            .await
    }

    /// The table of jobs seen (for the admin API).
    pub fn jobs(&self) -> &Arc<Jobs> {
        &self.jobs
    }

    /// Forgets expired robots.txt answers (called by the idle-host sweeper).
    pub fn sweep_robots(&self) -> usize {
        self.robots.sweep()
    }

    /// Answers one request from `client`. Never fails: errors are responses.
    pub async fn serve(
        self: Arc<Self>,
        req: Request<Incoming>,
        client: SocketAddr,
    ) -> Result<Response<ProxyBody>, Infallible> {
        let config = self.config.get();
        // courtesy's own answers here carry `courtesy-wait` too (they did not wait).
        let timing_on = config.proxy.server_timing;
        let not_held = move || timing::Held::not_held(timing_on);
        if !config.client_allowed(client.ip()) {
            let refused = response::client_not_allowed(client.ip());
            return Ok(self.with_timing(refused, &not_held()));
        }
        let caller = match self.jobs.identify(&config, req.headers(), client.ip()) {
            Ok(caller) => caller,
            Err(why) => {
                drop(config);
                let mut refused = response::proxy_auth_required(&why.why);
                // An address that keeps failing waits for each answer (no lock is held here), a
                // few at once; the rest are answered at once and their connections closed.
                if !why.hold.is_zero() {
                    let group = crate::wire::client_group::client_group(client.ip());
                    match self.jobs.guard.hold(group) {
                        Some(_held) => tokio::time::sleep(why.hold).await,
                        None => {
                            refused.headers_mut().insert(
                                http::header::CONNECTION,
                                http::HeaderValue::from_static("close"),
                            );
                        }
                    }
                }
                return Ok(self.with_timing(refused, &not_held()));
            }
        };
        drop(config);
        if req.method() == Method::CONNECT {
            let answer = self.clone().connect(req, client, caller).await;
            // A tunnel's 200 is no answer of the origin's; a refused CONNECT is courtesy's own.
            if answer.status().is_success() {
                return Ok(answer);
            }
            return Ok(self.with_timing(answer, &not_held()));
        }
        Ok(self.forward(req, client, caller).await)
    }
}
