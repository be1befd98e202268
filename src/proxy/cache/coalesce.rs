//! The coalescing phase (`coalesce`, on by default): a request that may share an answer joins
//! the flight of identical requests in flight. The first leads and goes on to its turn; the
//! others wait for its answer without taking a turn, a slot or a place in their job's quota, and
//! get it whole. A follower whose leader has nothing to share (or takes longer than
//! `response_timeout_seconds`) goes on as if alone.

use std::ops::ControlFlow;

use http::request::Parts;
use http::Response;
use tracing::info;

use super::flights::{joins, land_whole, Joined, SharedAnswer};
use super::plan::entry_key;
use crate::observe::metrics::NotSent;
use crate::proxy::answer::body::ProxyBody;
use crate::proxy::forward::context::{Flow, RequestContext};
use crate::proxy::send::attempts::replayable;
use crate::proxy::Proxy;

impl Proxy {
    /// Joins the request's flight, if it may join one: leading it (the flight rides in
    /// `cx.flight` to the answer), or following it to the leader's answer.
    pub(crate) async fn join_flight(&self, head: &Parts, cx: &mut RequestContext<'_>) -> Flow {
        if !cx.policy.forward.coalesce
            || cx.upgrade.is_some()
            || !replayable(&head.method, cx.unread.as_ref())
        {
            return ControlFlow::Continue(());
        }
        // The store's key when the store planned one (no second copy of the URL); `key` looks
        // at whether the request may join at all.
        let key = match &cx.cache_use {
            Some(plan) => self.flights.key(head, &plan.url),
            None if joins(head) => self.flights.key(head, &entry_key(&head.uri, &head.headers)),
            None => None,
        };
        let Some(key) = key else {
            return ControlFlow::Continue(());
        };
        let follow = match self.flights.join(key) {
            Joined::Lead(lead) => {
                cx.flight = Some(lead);
                return ControlFlow::Continue(());
            }
            Joined::Follow(follow) => follow,
            Joined::Alone => return ControlFlow::Continue(()),
        };
        let bound = self.config.get().proxy.response_timeout;
        let Some(answer) = follow.answer(bound).await else {
            return ControlFlow::Continue(());
        };
        info!(
            status = answer.status.as_u16(),
            "answered with an identical request's answer (coalesced)"
        );
        self.metrics
            .not_sent(&cx.asking.caller.state, &cx.budget.key, NotSent::Coalesced);
        cx.trail.held.not_sent = Some(NotSent::Coalesced);
        ControlFlow::Break(shared_response(&answer))
    }

    /// A local answer of the leader's (the stored answer after a revalidation) shared with its
    /// followers too.
    pub(crate) fn share_local(
        &self,
        answer: Response<ProxyBody>,
        cx: &mut RequestContext<'_>,
    ) -> Response<ProxyBody> {
        let Some(lead) = cx.flight.take() else {
            return answer;
        };
        let (parts, body) = answer.into_parts();
        if let ProxyBody::Local(Some(bytes)) = &body {
            land_whole(lead, &parts, bytes);
        }
        Response::from_parts(parts, body)
    }
}

/// A follower's copy of the leader's answer.
fn shared_response(answer: &SharedAnswer) -> Response<ProxyBody> {
    let body = (!answer.body.is_empty()).then(|| answer.body.clone());
    let mut response = Response::new(ProxyBody::Local(body));
    *response.status_mut() = answer.status;
    *response.headers_mut() = answer.headers.clone();
    response
}
