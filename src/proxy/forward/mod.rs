//! Forwarding one request, top to bottom: target, loop guard, skipped resources, robots.txt, the
//! headers courtesy changes, the response store, then the host's turn and the paced send
//! (`exchange.rs`), courtesy's own retries of a bodiless request after a 429/503, and the response
//! streamed back. Plain `http://` requests and the requests decrypted inside a CONNECT take this
//! same path.

pub(crate) mod headers;
pub(crate) mod target;

use std::net::SocketAddr;
use std::ops::ControlFlow;

use http::header::{HeaderValue, HOST, VIA};
use http::{HeaderMap, Request, Response, StatusCode, Version};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::capture_connection;
use tokio::time::Instant;
use tracing::{info, info_span, warn, Instrument};

use crate::budget::jobs::{priority_of, Caller, QuotaTicket};
use crate::budget::limiter::{BudgetKey, Permit, ShadowReason, ShadowVerdict, WaitReason};
use crate::config::HostPolicy;
use crate::front::sockets::SocketCaps;
use crate::observe::telemetry::{RequestTrace, Requested};
use crate::pacing::blocks::{block_redirect, header_block};
use crate::pacing::feedback::crawler_price;
use crate::proxy::answer::body::ProxyBody;
use crate::proxy::answer::failure::{Failure, H2Signal};
use crate::proxy::answer::response;
use crate::proxy::answer::timing::{self, Held, Trail};
use crate::proxy::answer::unread::BodyOnEntry;
use crate::proxy::cache::CacheUse;
use crate::proxy::connect::upgrade;
use crate::proxy::forward::headers::{own_cooldown_choice, strip_hop_by_hop, strip_request};
use crate::proxy::forward::target::Target;
use crate::proxy::refuse::skip::skipped_resource;
use crate::proxy::send::attempts::{replayable, Asked, Attempts, Outcome, Unsigned};
use crate::proxy::send::exchange::Exchanged;
use crate::proxy::send::sign::Signing;
use crate::proxy::{Asking, Proxy};
use crate::upstream::pool::IdleMark;
use crate::wire::scheme::Scheme;
use std::sync::Arc;

impl Proxy {
    /// Forwards an absolute-form `http://` request through the host's budget; the answer says
    /// how long courtesy held it (`Server-Timing`).
    pub(super) async fn forward(
        &self,
        mut req: Request<Incoming>,
        client: SocketAddr,
        caller: Caller,
    ) -> Response<ProxyBody> {
        let entry = BodyOnEntry::of(req.version(), req.headers(), req.body());
        upgrade::ws_as_http(req.uri_mut());
        let target = match Target::of_request(req.uri()) {
            Ok(t) => t,
            Err(failure) => return self.refused_at_once(entry, failure, req).await,
        };
        if let Some(failure) = self.loops.refuse(&target, req.headers()) {
            return self.refused_at_once(entry, failure, req).await;
        }
        if let Some(failure) = self.refuse_destination(&target).await {
            return self.refused_at_once(entry, failure, req).await;
        }
        let asking = Asking::plain(caller);
        let span = info_span!("request", client = %client, job = asking.caller.name(), method = %req.method(), host = %target);
        // No async layer of its own around `forward_to`: its future is large, and each layer
        // would move it once more per request.
        let mut trail = Trail::default();
        let (response, unread) = self
            .forward_to(req, target, &asking, &mut trail)
            .instrument(span)
            .await;
        let response = entry.settle(response, unread).await;
        self.finish(response, trail)
    }

    /// courtesy's own answer to a request refused before anything else (a bad target, a loop, a
    /// denied destination): it did not wait.
    async fn refused_at_once(
        &self,
        entry: BodyOnEntry,
        failure: Failure,
        req: Request<Incoming>,
    ) -> Response<ProxyBody> {
        let response = entry
            .settle(failure.into_response(), Some(req.into_body()))
            .await;
        self.finish(response, Trail::default())
    }

    /// A request that came out of a CONNECT (decrypted, or plain HTTP inside the tunnel): it goes to
    /// the CONNECT's target with `scheme`, through exactly the same path as plain http.
    /// `asking` is the CONNECT's job, and its own `Courtesy-On-Cooldown` and priority for
    /// requests without their own.
    pub(super) async fn forward_inside(
        &self,
        mut req: Request<Incoming>,
        target: Target,
        scheme: Scheme,
        client: SocketAddr,
        asking: &Asking,
    ) -> Response<ProxyBody> {
        let entry = BodyOnEntry::of(req.version(), req.headers(), req.body());
        let path = req
            .uri()
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_string();
        match format!("{}://{}{path}", scheme.as_str(), target.authority).parse() {
            Ok(uri) => *req.uri_mut() = uri,
            Err(_) => {
                let failure = Failure::bad_request(format!("cannot make a URL of {:?}", req.uri()));
                return self.refused_at_once(entry, failure, req).await;
            }
        }
        let span = info_span!("request", client = %client, job = asking.caller.name(), method = %req.method(), host = %target, scheme = scheme.as_str());
        let mut trail = Trail::default();
        let (response, unread) = self
            .forward_to(req, target, asking, &mut trail)
            .instrument(span)
            .await;
        let response = entry.settle(response, unread).await;
        self.finish(response, trail)
    }

    /// The answer to a forwarded request as the client gets it: its trace ended, how many sends
    /// it took (`Courtesy-Tries`) and courtesy's `Server-Timing` entries added.
    fn finish(&self, mut response: Response<ProxyBody>, trail: Trail) -> Response<ProxyBody> {
        if let Some(trace) = &trail.trace {
            // Made by courtesy: its own Proxy-Status member (an origin behind another proxy
            // may carry one of that proxy's).
            let local = response
                .headers()
                .get("proxy-status")
                .is_some_and(|v| v.as_bytes().starts_with(response::PROXY_NAME.as_bytes()));
            let held = (trail.held.wait(), trail.held.reason());
            trace.finish(response.status().as_u16(), local, held);
        }
        response
            .headers_mut()
            .insert(timing::TRIES, timing::tries_value(trail.tries));
        self.with_timing(response, &trail.held)
    }

    /// `response` with courtesy's `Server-Timing` entries, unless `[proxy] server_timing` is off.
    pub(super) fn with_timing(
        &self,
        mut response: Response<ProxyBody>,
        held: &Held,
    ) -> Response<ProxyBody> {
        let enabled = held
            .enabled
            .unwrap_or_else(|| self.config.get().proxy.server_timing);
        if enabled {
            timing::stamp(response.headers_mut(), held);
        }
        response
    }

    /// The response to `req`, and its body when it was never sent (for [`BodyOnEntry::settle`]).
    async fn forward_to(
        &self,
        mut req: Request<Incoming>,
        target: Target,
        asking: &Asking,
        trail: &mut Trail,
    ) -> Outcome {
        let (host_policy, signing) = {
            let config = self.config.get();
            trail.held.enabled = Some(config.proxy.server_timing);
            let policy = config.policy_for(&target.host, target.port);
            let signing = Signing::of(&config, &asking.caller, &policy);
            (policy, signing)
        };
        if let Some(telemetry) = &self.telemetry {
            let asked = Requested {
                method: req.method().as_str(),
                scheme: Scheme::of_uri_or_http(req.uri()),
                host: &target.host,
                port: target.port,
                job: asking.caller.name(),
            };
            trail.trace = Some(Arc::new(RequestTrace::start(
                telemetry,
                req.headers(),
                asked,
            )));
        }
        if is_trace(req.method()) {
            return (response::trace_refused(req.method()), Some(req.into_body()));
        }
        let signing = signing.map(|signing| signing.keeping(&req));
        stamp(req.headers_mut(), &host_policy, &asking.caller);
        let budget = match self.budget_key(&target, &host_policy).await {
            Ok(budget) => budget,
            Err(failure) => return (failure.into_response(), Some(req.into_body())),
        };
        let trace = trail.trace.as_deref();
        if let Some(trace) = trace {
            trace.budget_key(&budget.key);
        }
        let refused = self.refuse_before_turn(&req, (&target, &budget), &host_policy, trace);
        let shadow_refused = match refused.await {
            Ok(shadow_refused) => shadow_refused,
            Err(refused) => return (refused, Some(req.into_body())),
        };
        let stated = self.check_preferences(&req, (&target, &budget), &host_policy, &asking.caller);
        let checked = match stated.await {
            Ok(checked) => checked,
            Err(refused) => return (refused, Some(req.into_body())),
        };
        // The licences its robots.txt names (RSL 1.0) are reported on the answer, never enforced.
        let licensed = host_policy
            .robots
            .obey
            .then(|| Scheme::of_uri_or_http(req.uri()));
        let (mut parts, body) = req.into_parts();
        let mut upgrade = upgrade::take(&mut parts, asking.slot.as_ref());
        let asked = match self.rewrite_request_head(&mut parts, &target, asking) {
            Ok(asked) => asked,
            Err(failure) => return (failure.into_response(), Some(body)),
        };
        if let Some(upgrade) = &mut upgrade {
            let caps = {
                let config = self.config.get();
                SocketCaps {
                    per_client: config.proxy.max_websockets_per_client,
                    per_host: config.proxy.max_websockets_per_host,
                }
            };
            if let Err(why) = upgrade.place(&self.sockets, &budget.key, caps) {
                info!("WebSocket refused locally: {why}");
                return (upgrade::over_cap(&why), Some(body));
            }
            upgrade.ask_upstream(&mut parts.headers);
        }
        let replayable = replayable(&parts.method, &body);
        // A handshake is never answered from, nor kept in, the response store.
        let mut cache_use =
            CacheUse::plan(&host_policy, &parts, replayable).filter(|_| upgrade.is_none());
        if let Some(mut answer) = self
            .answer_from_store(cache_use.as_mut(), &mut parts.headers)
            .await
        {
            if let Some(checked) = checked {
                self.report_preferences(&mut answer, checked, &asking.caller.state);
            }
            return (answer, Some(body));
        }
        let (ticket, shadow_refused) = match quota(asking, &host_policy, shadow_refused) {
            Ok(ticket) => ticket,
            Err(retry_after) => {
                info!("refused locally: the job's quota");
                let refused = response::quota_reached(asking.caller.name(), retry_after);
                return with_quota_headers((refused, Some(body)), &asking.caller);
            }
        };
        self.jobs.keep(&asking.caller);
        let attempts = Attempts::new(parts, body, replayable, asked, shadow_refused)
            .of_job(&asking.caller, ticket)
            .signed_with(signing)
            .held_as(host_policy.cooldown.on_cooldown)
            .upgrading(upgrade);
        let mut outcome = self
            .send_until_answered(&budget, attempts, cache_use.as_ref(), trail)
            .await;
        if let Some(checked) = checked {
            self.report_preferences(&mut outcome.0, checked, &asking.caller.state);
        }
        if let Some(scheme) = licensed {
            self.report_licenses(&mut outcome.0, &target, scheme);
        }
        with_quota_headers(outcome, &asking.caller)
    }

    /// The refusals that come before the host's turn (`skip_resources`, then robots.txt), so that
    /// a refused request spends none of the budget. `Err` is the local answer; `Ok` is, for a
    /// report-only host, what would have refused the request, to be reported with its turn.
    async fn refuse_before_turn(
        &self,
        req: &Request<Incoming>,
        (target, budget): (&Target, &BudgetKey),
        host_policy: &HostPolicy,
        trace: Option<&RequestTrace>,
    ) -> Result<Option<ShadowReason>, Response<ProxyBody>> {
        // A report-only host (`enforce = false`) is told what would have refused the request, and
        // the request goes on.
        let mut shadow_refused = None;
        if let Some(kind) = skipped_resource(req, &host_policy.blocks.skip_resources) {
            let reason = format!("skip_resources: {kind} ({})", req.uri().path());
            if host_policy.scope.enforce {
                info!(%reason, "skipped locally");
                return Err(Failure::denied(reason).into_response());
            }
            shadow_refused = Some(ShadowReason::SkipResources);
        }
        if host_policy.robots.obey && req.uri().path() != "/robots.txt" && shadow_refused.is_none()
        {
            let started = Instant::now();
            let robots = self.obey_robots(req, target, budget, host_policy).await;
            if let Some(trace) = trace {
                trace.robots((started, Instant::now()), robots.is_none());
            }
            if let Some(refused) = robots {
                if host_policy.scope.enforce {
                    return Err(refused);
                }
                shadow_refused = Some(ShadowReason::Robots);
            }
        }
        Ok(shadow_refused)
    }

    /// The request's head as it goes upstream: the client's `Courtesy-On-Cooldown` and
    /// `Courtesy-Priority` taken out (and returned, over the CONNECT's: they are courtesy's to act
    /// on, not the origin's), hop-by-hop headers replaced by
    /// courtesy's `Via`, the target's `Host`, and HTTP/1.1 (the version courtesy speaks upstream).
    fn rewrite_request_head(
        &self,
        parts: &mut http::request::Parts,
        target: &Target,
        asking: &Asking,
    ) -> Result<Asked, Failure> {
        let on_cooldown = own_cooldown_choice(&mut parts.headers)?.or(asking.on_cooldown);
        let priority = priority_of(
            &mut parts.headers,
            asking.priority,
            asking.caller.settings.is_some(),
        )
        .map_err(Failure::bad_request)?;
        strip_request(&mut parts.headers);
        parts.headers.append(VIA, self.loops.via_for(parts.version));
        if let Ok(host) =
            HeaderValue::from_str(target.host_header(Scheme::of_uri_or_http(&parts.uri)))
        {
            parts.headers.insert(HOST, host);
        }
        parts.version = Version::HTTP_11;
        Ok(Asked {
            on_cooldown,
            priority,
        })
    }

    /// Before the request goes, for a request that uses the response store: a stored response
    /// that is the answer (`dev` mode), or else the stored validators added to `headers`
    /// (`revalidate` mode), so that the origin can answer a 304 instead of the whole body.
    async fn answer_from_store(
        &self,
        cache_use: Option<&mut CacheUse>,
        headers: &mut HeaderMap,
    ) -> Option<Response<ProxyBody>> {
        let plan = cache_use?;
        self.answer_or_revalidate(plan, headers).await
    }

    /// Takes the host's turn and sends, again and again while courtesy resends or retries, until
    /// there is an answer for the client.
    async fn send_until_answered(
        &self,
        budget: &BudgetKey,
        mut attempts: Attempts,
        cache_use: Option<&CacheUse>,
        trail: &mut Trail,
    ) -> Outcome {
        loop {
            let attempted = self.attempt(budget, &mut attempts, cache_use, trail);
            if let ControlFlow::Break(outcome) = attempted.await {
                trail.tries = attempts.tries;
                return outcome;
            }
        }
    }

    /// One turn and one send: the host's turn, the request (the client's, or a rebuilt one), the
    /// exchange, and what its answer becomes. `Break` is the client's answer; `Continue` takes
    /// another turn: once for a request sent on a pooled connection the origin had closed, when it
    /// can be rebuilt, and for courtesy's own retries.
    async fn attempt(
        &self,
        budget: &BudgetKey,
        attempts: &mut Attempts,
        cache_use: Option<&CacheUse>,
        trail: &mut Trail,
    ) -> ControlFlow<Outcome> {
        let permit = match self.take_turn(budget, attempts, trail).await {
            Ok(permit) => permit,
            Err(refused) => return ControlFlow::Break((refused, attempts.unread())),
        };
        attempts.spend_quota();
        let mut request = match attempts.next_request() {
            Ok(request) => request,
            Err(failure) => return ControlFlow::Break((failure.into_response(), None)),
        };
        if let Some(Unsigned::PlainHttp) =
            attempts.sign(&mut request, &self.challenged, &budget.key)
        {
            if self.plain_unsigned.first(&budget.key) {
                warn!(
                    host = %budget.key,
                    "signing is on, but requests to this host go over plain http: sent unsigned (signatures travel over TLS only)"
                );
            }
        }
        let upgrade_capture = attempts
            .upgrade
            .is_some()
            .then(|| capture_connection(&mut request));
        let upstream = trail.trace.as_ref().map(|trace| {
            let host = request.uri().host().unwrap_or_default();
            let span = trace.upstream(request.method().as_str(), host);
            span.pass_on(request.headers_mut());
            span
        });
        let exchanged = self.exchange(permit, request).await;
        if let Some(span) = upstream {
            span.end(match &exchanged {
                Ok(answer) => Ok(answer.response.status().as_u16()),
                Err(unanswered) => Err(unanswered.failure.kind.token()),
            });
        }
        let exchanged = match exchanged {
            Ok(exchanged) => exchanged,
            Err(unanswered) if attempts.may_resend_fresh(&unanswered) => {
                // Sent once more, through the budget; the dead connection has left the pool.
                attempts.fresh_retry = true;
                info!("sending once more on a fresh connection");
                return ControlFlow::Continue(());
            }
            Err(unanswered) if attempts.may_resend_refused(&unanswered) => {
                info!(
                    "sending once more after the cooldown: {}",
                    unanswered.failure.details
                );
                return ControlFlow::Continue(());
            }
            Err(unanswered)
                if unanswered.failure.h2 == Some(H2Signal::ProtocolError)
                    && attempts.may_resend_over_http1() =>
            {
                info!("sending once more over HTTP/1.1");
                return ControlFlow::Continue(());
            }
            Err(unanswered) => {
                return ControlFlow::Break((unanswered.failure.into_response(), None))
            }
        };
        trail.held.answered(exchanged.latency);
        let response = &exchanged.response;
        if let Some(capture) = upgrade_capture {
            if response.status() != StatusCode::SWITCHING_PROTOCOLS {
                // A handshake answered otherwise: the origin may have switched all the same, so
                // its connection never carries another request.
                if let Some(connected) = capture.connection_metadata().as_ref() {
                    connected.poison();
                }
            }
        }
        if response.status() == StatusCode::MISDIRECTED_REQUEST
            && response.version() == Version::HTTP_2
            && attempts.may_resend_over_http1()
        {
            info!("421 over HTTP/2: sending once more over HTTP/1.1");
            return ControlFlow::Continue(());
        }
        if let Some(price) = crawler_price(response.status(), response.headers()) {
            // Pay per crawl: counted with its price, and passed to the client untouched.
            info!(price, "priced answer (402 crawler-price)");
            if let Some(job) = attempts.job_state() {
                job.count_priced(&budget.key, price);
                self.metrics.priced(job, &budget.key);
            }
        }
        self.judge_answer(exchanged, (attempts, budget), cache_use)
            .await
    }

    /// Waits for the host's turn. A refusal (a cooldown in reject mode, a full queue, shutting
    /// down) is logged and counted here and comes back as the client's answer.
    async fn take_turn(
        &self,
        budget: &BudgetKey,
        attempts: &mut Attempts,
        trail: &mut Trail,
    ) -> Result<Permit, Response<ProxyBody>> {
        let asked = Instant::now();
        match self.limiter.admit(attempts.admission(budget)).await {
            Ok(permit) => {
                trail.held.waited(permit.waited(), permit.wait_reason());
                self.metrics.turn(permit.wait_reason(), permit.waited());
                // A turn given at once is no wait: the root span says so (reason none, 0 ms).
                let waited = permit.wait_reason() != WaitReason::None || !permit.waited().is_zero();
                if let Some(trace) = trail.trace.as_ref().filter(|_| waited) {
                    let when = (asked, Instant::now());
                    trace.wait(when, permit.wait_reason(), permit.store_trip());
                }
                if let Some(verdict) = permit.shadow() {
                    self.report_shadow(&budget.key, &verdict);
                    if let Some(job) = attempts.job_state() {
                        job.count_shadow(verdict.job_would_wait);
                    }
                }
                Ok(permit)
            }
            Err(refusal) => {
                let waited = asked.elapsed();
                trail.held.waited(waited, refusal.wait_reason());
                self.metrics.turn(refusal.wait_reason(), waited);
                if let Some(trace) = &trail.trace {
                    trace.wait((asked, Instant::now()), refusal.wait_reason(), None);
                }
                info!(reason = ?refusal, "refused locally");
                self.metrics.refusal(&budget.key, &refusal);
                Err(response::refusal(&refusal, &budget.key))
            }
        }
    }

    /// A report-only host's turn is always at once: what enforcing would have done is counted,
    /// and logged when it would have made a difference.
    fn report_shadow(&self, key: &str, verdict: &ShadowVerdict) {
        self.metrics.shadow(key, verdict);
        if verdict.waits || verdict.would_refuse.is_some() || verdict.inside_window {
            info!(
                would_wait_ms = verdict.would_wait.as_millis() as u64,
                would_refuse = verdict.would_refuse.map(ShadowReason::as_str),
                inside_window = verdict.inside_window,
                "report-only: forwarded at once"
            );
        }
    }

    /// What the origin's answer becomes: the stored 200 for a 304 to a revalidation, courtesy's own
    /// retry of a 429/503 or its signed resend after a host asked for a signature (`Continue`),
    /// or else the response streamed back.
    async fn judge_answer(
        &self,
        exchanged: Exchanged,
        (attempts, budget): (&mut Attempts, &BudgetKey),
        cache_use: Option<&CacheUse>,
    ) -> ControlFlow<Outcome> {
        let status = exchanged.response.status().as_u16();
        let asked = (status, exchanged.response.headers());
        let host = (self.challenged.as_ref(), budget.key.as_str());
        if attempts.resend_signed(asked, host, &exchanged.policy) {
            info!(
                status,
                "the host asks for signatures: sending once more, signed"
            );
            return ControlFlow::Continue(());
        }
        let (permit, policy, latency) = (exchanged.permit, exchanged.policy, exchanged.latency);
        let revalidated = match cache_use {
            Some(plan) => self.revalidated(plan, status).await,
            None => None,
        };
        if let Some(answer) = revalidated {
            info!(
                status,
                latency_ms = latency.as_millis() as u64,
                "revalidated: answered from the cache"
            );
            return ControlFlow::Break((answer, None));
        }
        info!(
            status,
            latency_ms = latency.as_millis() as u64,
            wait_ms = permit.waited().as_millis() as u64,
            rate = permit.host_rate(),
            attempt = attempts.attempt,
            "upstream response"
        );
        let mut response = exchanged.response;
        let mut ahead = None;
        if attempts.retry_after(status, &policy, permit.cooldown_left()) {
            match self.block_before_resend(response, &permit, &policy).await {
                None => {
                    info!(
                        attempt = attempts.attempt,
                        "retrying after the cooldown (retry_idempotent)"
                    );
                    return ControlFlow::Continue(());
                }
                Some(block) => {
                    response = block.response;
                    ahead = Some(block.ahead).filter(|a| !a.is_empty());
                }
            }
        }
        let held = (permit, exchanged.idle);
        if response.status() == StatusCode::SWITCHING_PROTOCOLS {
            // Joined only when it switches to the WebSocket the client asked for; any other 101
            // is refused, and its connection dropped with it.
            let refused = match attempts.upgrade.take() {
                Some(client) if upgrade::switches(&response) => {
                    return ControlFlow::Break((self.join(response, client, held), None));
                }
                Some(_) => {
                    "the origin's 101 switches to another protocol than the WebSocket asked for"
                }
                None => "the origin answered 101 to a request that asked to switch to nothing",
            };
            warn!("{refused}");
            return ControlFlow::Break((upgrade::refused_switch(refused), None));
        }
        let response = self.finish_response(response, held, (&policy, &budget.host), cache_use);
        let response = match ahead {
            Some(first) => response.map(|rest| ProxyBody::Prefixed {
                first: Some(first),
                rest: Box::new(rest),
            }),
            None => response,
        };
        ControlFlow::Break((response, None))
    }

    /// The origin's response as the client gets it: hop-by-hop headers replaced by courtesy's
    /// `Via`, a redirect to a block page (where a vendor blocks: `pacing/blocks/redirect.rs`) from
    /// `host` (the request's, canonical) reported to the host's pacing, and a body that holds the
    /// permit (and the mark that sets its upstream connection idle) while it streams, scanned for
    /// block markers and stored when the cache may keep it.
    fn finish_response(
        &self,
        response: Response<Incoming>,
        (permit, idle): (Permit, Option<IdleMark>),
        (policy, host): (&HostPolicy, &str),
        cache_use: Option<&CacheUse>,
    ) -> Response<ProxyBody> {
        let (mut parts, body) = response.into_parts();
        strip_hop_by_hop(&mut parts.headers);
        parts.headers.append(VIA, self.loops.via_for(parts.version));
        parts.version = Version::HTTP_11;
        let priced = crawler_price(parts.status, &parts.headers).is_some();
        if priced {
            // A priced page (402 + crawler-price) is a price, never a challenge: not scanned.
        } else if let Some(signal) = header_block(&parts.headers) {
            self.blocks
                .soft(&permit, &format!("challenge header {signal}"));
        } else if let Some(to) = block_redirect(&parts, &policy.blocks.markers, host) {
            self.blocks
                .soft(&permit, &format!("a redirect to a block page ({to})"));
        }
        let scan = if priced {
            None
        } else {
            self.blocks
                .scan_for(parts.status.as_u16(), &parts.headers, policy)
        };
        let store = cache_use.and_then(|plan| self.store_for(plan, &parts, policy));
        Response::from_parts(
            parts,
            ProxyBody::Upstream {
                body,
                permit: Some(permit),
                idle,
                scan,
                store,
                silence: Some(crate::proxy::answer::body::Silence::new(
                    policy.forward.read_timeout,
                )),
            },
        )
    }
}

/// Stamps the host's (else the job's) `User-Agent` and `From` on the request, before robots.txt
/// picks its group from the User-Agent.
fn stamp(headers: &mut HeaderMap, policy: &HostPolicy, caller: &Caller) {
    let (job_agent, job_from) = caller.stamps();
    let agent = policy.identity.user_agent.as_deref().or(job_agent);
    let from = policy.identity.from.as_deref().or(job_from);
    for (name, value) in [
        (http::header::USER_AGENT, agent),
        (http::header::FROM, from),
    ] {
        if let Some(value) = value.and_then(|v| HeaderValue::from_str(v).ok()) {
            headers.insert(name, value);
        }
    }
}

/// The answer with the job's `RateLimit-Policy` and `RateLimit` headers, when it has a quota.
fn with_quota_headers(mut outcome: Outcome, caller: &Caller) -> Outcome {
    if let Some(left) = caller.quota_left(std::time::Instant::now()) {
        let (policy, limit) = left.headers();
        let headers = outcome.0.headers_mut();
        for (name, value) in [("ratelimit-policy", policy), ("ratelimit", limit)] {
            if let Ok(value) = HeaderValue::from_str(&value) {
                headers.append(name, value);
            }
        }
    }
    outcome
}

/// The request's place in its job's quota, or how long until a job past it may send again (for
/// a report-only host, the request goes on and the refusal is reported with its turn).
fn quota(
    asking: &Asking,
    host_policy: &HostPolicy,
    shadow_refused: Option<ShadowReason>,
) -> Result<(QuotaTicket, Option<ShadowReason>), std::time::Duration> {
    match asking.caller.reserve(std::time::Instant::now()) {
        Ok(ticket) => Ok((ticket, shadow_refused)),
        Err(_) if !host_policy.scope.enforce => Ok((
            QuotaTicket::none(),
            shadow_refused.or(Some(ShadowReason::Quota)),
        )),
        Err(retry_after) => Err(retry_after),
    }
}

/// Whether `method` is TRACE or TRACK: never forwarded (an origin that echoes the request would
/// hand back its headers, a signature or credentials among them).
fn is_trace(method: &http::Method) -> bool {
    method.as_str().eq_ignore_ascii_case("TRACE") || method.as_str().eq_ignore_ascii_case("TRACK")
}
