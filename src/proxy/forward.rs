//! Forwarding one request, top to bottom: target, loop guard, skipped resources, robots.txt, the
//! headers courtesy changes, the response store, then the host's turn and the paced send
//! (`exchange.rs`), courtesy's own retries of a bodiless request after a 429/503, and the response
//! streamed back. Plain `http://` requests and the requests decrypted inside a CONNECT take this
//! same path.

use std::net::SocketAddr;

use http::header::{HeaderValue, HOST, VIA};
use http::{Method, Request, Response, Version};
use http_body::Body as _;
use hyper::body::Incoming;
use tracing::{info, info_span, Instrument};

use super::cached::CacheUse;
use super::failure::Failure;
use super::headers::{own_cooldown_choice, strip_hop_by_hop, via_for};
use super::skip::skipped_resource;
use super::target::Target;
use super::unread::BodyOnEntry;
use super::upstream::{Replay, UpstreamBody};
use super::Proxy;
use crate::blocks::is_block_redirect;
use crate::body::ProxyBody;
use crate::config::OnCooldown;
use crate::limiter::Admission;
use crate::response;

impl Proxy {
    /// Forwards an absolute-form `http://` request through the host's budget.
    pub(super) async fn forward(
        &self,
        req: Request<Incoming>,
        client: SocketAddr,
    ) -> Response<ProxyBody> {
        let entry = BodyOnEntry::of(req.version(), req.headers(), req.body());
        let target = match Target::of_request(req.uri()) {
            Ok(t) => t,
            Err(failure) => {
                return entry
                    .settle(failure.into_response(), Some(req.into_body()))
                    .await
            }
        };
        if let Some(failure) = self.loops.refuse(&target, req.headers()) {
            return entry
                .settle(failure.into_response(), Some(req.into_body()))
                .await;
        }
        if let Some(failure) = self.refuse_destination(&target).await {
            return entry
                .settle(failure.into_response(), Some(req.into_body()))
                .await;
        }
        let span = info_span!("request", client = %client, method = %req.method(), host = %target);
        let (response, unread) = self.forward_to(req, target, None).instrument(span).await;
        entry.settle(response, unread).await
    }

    /// A request that came out of a CONNECT (decrypted, or plain HTTP inside the tunnel): it goes to
    /// the CONNECT's target with `scheme`, through exactly the same path as plain http.
    /// `connect_choice` is the CONNECT's own `Courtesy-On-Cooldown`, for requests without one.
    pub(super) async fn forward_inside(
        &self,
        mut req: Request<Incoming>,
        target: Target,
        scheme: &'static str,
        client: SocketAddr,
        connect_choice: Option<OnCooldown>,
    ) -> Response<ProxyBody> {
        let entry = BodyOnEntry::of(req.version(), req.headers(), req.body());
        let path = req
            .uri()
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_string();
        match format!("{scheme}://{}{path}", target.authority).parse() {
            Ok(uri) => *req.uri_mut() = uri,
            Err(_) => {
                let failure = Failure::bad_request(format!("cannot make a URL of {:?}", req.uri()));
                return entry
                    .settle(failure.into_response(), Some(req.into_body()))
                    .await;
            }
        }
        let span =
            info_span!("request", client = %client, method = %req.method(), host = %target, scheme);
        let (response, unread) = self
            .forward_to(req, target, connect_choice)
            .instrument(span)
            .await;
        entry.settle(response, unread).await
    }

    /// The response to `req`, and its body when it was never sent (for [`BodyOnEntry::settle`]).
    async fn forward_to(
        &self,
        req: Request<Incoming>,
        target: Target,
        connect_choice: Option<OnCooldown>,
    ) -> (Response<ProxyBody>, Option<Incoming>) {
        let host_policy = self.config.get().policy_for(&target.host, target.port);
        let budget = match self.budget_key(&target, &host_policy).await {
            Ok(budget) => budget,
            Err(failure) => return (failure.into_response(), Some(req.into_body())),
        };
        // A report-only host (`enforce = false`) is told what would have refused the request, and
        // the request goes on.
        let mut shadow_refused = None;
        if let Some(kind) = skipped_resource(&req, &host_policy.blocks.skip_resources) {
            let reason = format!("skip_resources: {kind} ({})", req.uri().path());
            if host_policy.scope.enforce {
                info!(%reason, "skipped locally");
                return (
                    Failure::denied(reason).into_response(),
                    Some(req.into_body()),
                );
            }
            shadow_refused = Some("skip_resources");
        }
        if host_policy.robots.obey && req.uri().path() != "/robots.txt" && shadow_refused.is_none()
        {
            let robots = self.obey_robots(&req, &target, &budget, &host_policy).await;
            if let Some(refused) = robots {
                if host_policy.scope.enforce {
                    return (refused, Some(req.into_body()));
                }
                shadow_refused = Some("robots");
            }
        }
        let (mut parts, body) = req.into_parts();
        let asked = match own_cooldown_choice(&mut parts.headers) {
            Ok(asked) => asked.or(connect_choice),
            Err(failure) => return (failure.into_response(), Some(body)),
        };
        strip_hop_by_hop(&mut parts.headers);
        parts
            .headers
            .append(VIA, via_for(parts.version, self.loops.via()));
        if let Ok(host) = HeaderValue::from_str(target.host_header(parts.uri.scheme_str())) {
            parts.headers.insert(HOST, host);
        }
        parts.version = Version::HTTP_11;
        // Only a bodiless GET/HEAD/OPTIONS can be sent again: keep what is needed to rebuild it.
        let replayable = matches!(parts.method, Method::GET | Method::HEAD | Method::OPTIONS)
            && body.is_end_stream();
        let mut cache_use = CacheUse::plan(&host_policy, &parts, replayable);
        if let Some(plan) = cache_use.as_mut() {
            if let Some(answer) = self.answer_or_revalidate(plan, &mut parts.headers).await {
                return (answer, Some(body));
            }
        }
        let replay = replayable.then(|| Replay::of(&parts));
        let mut first = Some(Request::from_parts(parts, UpstreamBody::Client(body)));
        let mut attempt = 0u32;
        let mut fresh_retry = false;
        loop {
            let admitted = self
                .limiter
                .admit(
                    Admission::of(&budget)
                        .on_cooldown(if attempt > 0 || fresh_retry {
                            Some(OnCooldown::Hold)
                        } else {
                            asked
                        })
                        .refused(shadow_refused.take()),
                )
                .await;
            let permit = match admitted {
                Ok(p) => {
                    if let Some(verdict) = p.shadow() {
                        self.metrics.shadow(&budget.key, &verdict);
                        if verdict.waits || verdict.would_refuse.is_some() || verdict.inside_window
                        {
                            info!(
                                would_wait_ms = verdict.would_wait.as_millis() as u64,
                                would_refuse = verdict.would_refuse,
                                inside_window = verdict.inside_window,
                                "report-only: forwarded at once"
                            );
                        }
                    }
                    p
                }
                Err(refusal) => {
                    info!(reason = ?refusal, "refused locally");
                    self.metrics.refusal(&budget.key, &refusal);
                    let unread = first.take().and_then(|r| r.into_body().into_client_body());
                    return (response::refusal(&refusal, &budget.key), unread);
                }
            };
            let request = match (first.take(), &replay) {
                (Some(request), _) => request,
                (None, Some(replay)) => replay.request(),
                (None, None) => {
                    let failure = Failure::new(
                        http::StatusCode::INTERNAL_SERVER_ERROR,
                        crate::response::ProxyError::ProxyInternalError,
                        "a request with a body cannot be sent twice",
                    );
                    return (failure.into_response(), None);
                }
            };
            let exchanged = match self.exchange(permit, request).await {
                Ok(exchanged) => exchanged,
                Err(unanswered) if unanswered.stale && replay.is_some() && !fresh_retry => {
                    // Sent once more, through the budget; the dead connection has left the pool.
                    fresh_retry = true;
                    info!("sending once more on a fresh connection");
                    continue;
                }
                Err(unanswered) => return (unanswered.failure.into_response(), None),
            };
            let status = exchanged.response.status().as_u16();
            let (permit, policy, latency) = (exchanged.permit, exchanged.policy, exchanged.latency);
            let revalidated = match cache_use.as_ref() {
                Some(plan) => self.revalidated(plan, status).await,
                None => None,
            };
            if let Some(answer) = revalidated {
                info!(
                    status,
                    latency_ms = latency.as_millis() as u64,
                    "revalidated: answered from the cache"
                );
                return (answer, None);
            }
            info!(
                status,
                latency_ms = latency.as_millis() as u64,
                wait_ms = permit.waited().as_millis() as u64,
                rate = permit.host_rate(),
                attempt,
                "upstream response"
            );
            // A report-only host gets no retries of courtesy's own: they could not wait out the
            // cooldown, and report-only never adds a request.
            let retry = replay.is_some()
                && policy.scope.enforce
                && attempt < policy.cooldown.retry_idempotent
                && matches!(status, 429 | 503);
            if retry {
                attempt += 1;
                info!(attempt, "retrying after the cooldown (retry_idempotent)");
                continue;
            }
            let (mut parts, body) = exchanged.response.into_parts();
            strip_hop_by_hop(&mut parts.headers);
            parts
                .headers
                .append(VIA, via_for(parts.version, self.loops.via()));
            parts.version = Version::HTTP_11;
            if is_block_redirect(&parts, &policy.blocks.markers) {
                self.blocks.soft(&permit, "a redirect to a block page");
            }
            let scan = self.blocks.scan_for(&parts.headers, &policy);
            let store = cache_use
                .as_ref()
                .and_then(|plan| self.store_for(plan, &parts, &policy));
            let response = Response::from_parts(
                parts,
                ProxyBody::Upstream {
                    body,
                    permit: Some(permit),
                    scan,
                    store,
                },
            );
            return (response, None);
        }
    }
}
