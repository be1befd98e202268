//! Forwarding one request, top to bottom. `Proxy::forward_to` is the list of its phases, each
//! given the request's head and its one context (`context.rs`) and each going on or answering:
//! TRACE refused, the request's identity stamped, its budget key, the local refusals before the
//! turn (`crate::proxy::refuse`), the head as it goes upstream (`head.rs`), a WebSocket's place,
//! the response store (`crate::proxy::cache`), the job's quota (`quota.rs`), then the host's turn
//! and the paced sends with courtesy's own retries (`crate::proxy::send`). Plain `http://`
//! requests and the requests decrypted inside a CONNECT take this same path.

pub(crate) mod context;
#[cfg(test)]
mod future_sizes;
pub(crate) mod head;
pub(crate) mod headers;
pub(crate) mod quota;
pub(crate) mod target;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::ops::ControlFlow;
use std::sync::Arc;

use http::request::Parts;
use http::{Request, Response};
use hyper::body::Incoming;
use tracing::{info_span, Span};

use crate::budget::jobs::Caller;
use crate::config::KeyMode;
use crate::proxy::answer::body::ProxyBody;
use crate::proxy::answer::failure::Failure;
use crate::proxy::answer::response;
use crate::proxy::answer::timing::{self, Held, Trail};
use crate::proxy::answer::unread::BodyOnEntry;
use crate::proxy::connect::inside::Inside;
use crate::proxy::connect::upgrade;
use crate::proxy::{Asking, Proxy};
use crate::util::log_line::request::{lines_carry_requests, InRequest, RequestLine};
use crate::util::log_line::AddrText;
use crate::wire::scheme::Scheme;
use context::{Flow, RequestContext};
use target::Target;

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
        let (span, line) = logged_as(client, &asking, req.method(), &target, None);
        let (head, body) = req.into_parts();
        let mut cx = self.context(target, &asking, &head);
        cx.unread = Some(body);
        // No async layer of its own around `forward_to`: its future is large, and each layer
        // would move it once more per request.
        let flow = InRequest::new(self.forward_to(head, &mut cx), span, line).await;
        let response = entry.settle(answered(flow), cx.unread.take()).await;
        self.finish(response, cx.trail)
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

    /// A request that came out of a CONNECT (decrypted, or plain HTTP inside the tunnel): it goes
    /// to the tunnel's target with its scheme, through exactly the same path as plain http, asked
    /// as the CONNECT was (its job, and its own `Courtesy-On-Cooldown` and priority for requests
    /// without their own).
    pub(super) async fn forward_inside(
        &self,
        mut req: Request<Incoming>,
        inside: &Inside,
    ) -> Response<ProxyBody> {
        let entry = BodyOnEntry::of(req.version(), req.headers(), req.body());
        let (target, scheme) = (&inside.target, inside.scheme);
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
        let asking = &inside.asking;
        let (span, line) = logged_as(inside.client, asking, req.method(), target, Some(scheme));
        let (head, body) = req.into_parts();
        let mut cx = self.context(target.clone(), asking, &head);
        cx.unread = Some(body);
        let flow = InRequest::new(self.forward_to(head, &mut cx), span, line).await;
        let response = entry.settle(answered(flow), cx.unread.take()).await;
        self.finish(response, cx.trail)
    }

    /// The context of a request to `target` of `asking`'s with this head, under the config in
    /// force now.
    fn context<'a>(&self, target: Target, asking: &'a Asking, head: &Parts) -> RequestContext<'a> {
        let config = self.config.get();
        RequestContext::new(&config, target, asking, self.telemetry.as_deref(), head)
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

    /// The phases of a forwarded request, in order: the first that answers ends it. The client's
    /// body stays in `cx.unread` until the request is sent, so that a local answer settles it.
    async fn forward_to(
        &self,
        mut head: Parts,
        cx: &mut RequestContext<'_>,
    ) -> ControlFlow<Response<ProxyBody>, Infallible> {
        head::refuse_trace(&head)?;
        self.identify(&mut head, cx);
        self.key_budget(cx).await?;
        self.refuse_before_turn(&head, cx).await?;
        self.check_preferences(&head, cx).await?;
        self.rewrite_request_head(&mut head, cx)?;
        self.place_upgrade(&mut head, cx)?;
        self.answer_from_store(&mut head, cx).await?;
        self.join_flight(&head, cx).await?;
        self.reserve_quota(cx)?;
        ControlFlow::Break(self.send_until_answered(head, cx).await)
    }

    /// The budget the request spends under its host's rule (`Proxy::budget_key`); a failed
    /// lookup is its answer, before any budget is spent.
    async fn key_budget(&self, cx: &mut RequestContext<'_>) -> Flow {
        // The context starts with the `key = "host"` key (the default), made once.
        if cx.policy.scope.key != KeyMode::Host {
            match self.budget_key(&cx.target, &cx.policy).await {
                Ok(budget) => cx.budget = budget,
                Err(failure) => return ControlFlow::Break(failure.into_response()),
            }
        }
        if let Some(trace) = cx.trace() {
            trace.budget_key(&cx.budget.key);
        }
        ControlFlow::Continue(())
    }
}

/// What a request's lines say of it: its fields carried beside its future when lines carry them
/// (no span to open), else the `request` span (`scheme` for a request out of a CONNECT).
fn logged_as(
    client: SocketAddr,
    asking: &Asking,
    method: &http::Method,
    target: &Target,
    scheme: Option<Scheme>,
) -> (Span, Option<Arc<RequestLine>>) {
    if lines_carry_requests() {
        let line = RequestLine {
            client,
            job: asking.caller.state.name.clone(),
            method: method.clone(),
            host: target.to_string(),
            scheme: scheme.map(|s| s.as_str()),
        };
        return (Span::none(), Some(Arc::new(line)));
    }
    // A field that is `None` is not written: a plain request's span has no `scheme`.
    let scheme = scheme.map(Scheme::as_str);
    let span = info_span!("request", client = %AddrText(client), job = asking.caller.name(), method = %method, host = %target, scheme);
    (span, None)
}

/// The answer the phases came to (they always come to one).
fn answered(flow: ControlFlow<Response<ProxyBody>, Infallible>) -> Response<ProxyBody> {
    match flow {
        ControlFlow::Break(response) => response,
        ControlFlow::Continue(never) => match never {},
    }
}
