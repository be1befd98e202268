//! The answer a client gets, whoever made it: the body that streams an origin's response and holds
//! its permit (`body.rs`), courtesy's own responses (`response.rs`) and the typed failure each
//! error becomes (`failure.rs`), what a block does (`blocked.rs`), the `Server-Timing` and
//! `Courtesy-Tries` courtesy adds (`timing.rs`), and a request body that never went upstream
//! (`unread.rs`); here, an origin's response made the client's (`Proxy::finish_response`). It
//! decides nothing about whether a request goes: the other phases do.

pub(crate) mod blocked;
pub(crate) mod body;
pub(crate) mod failure;
pub(crate) mod response;
pub(crate) mod timing;
pub(crate) mod unread;

use http::header::VIA;
use http::{HeaderMap, Response, Version};
use hyper::body::Incoming;

use crate::config::HostPolicy;
use crate::pacing::blocks::{block_redirect, header_block};
use crate::pacing::feedback::crawler_price;
use crate::proxy::cache::flights::Share;
use crate::proxy::cache::freshness::Directives;
use crate::proxy::forward::context::RequestContext;
use crate::proxy::forward::headers::strip_hop_by_hop;
use crate::proxy::send::exchange::TurnHeld;
use crate::proxy::Proxy;
use body::{ProxyBody, Silence, Streamed};

impl Proxy {
    /// The origin's response as the client gets it: hop-by-hop headers replaced by courtesy's
    /// `Via`, a vendor's challenge header or a redirect to a block page (where a vendor blocks:
    /// `pacing/blocks/redirect.rs`) from the request's host reported to the host's pacing, and
    /// a body that holds the turn (the permit, and the mark that sets its upstream connection
    /// idle) while it streams, scanned for block markers under `policy` and stored when the
    /// cache may keep it (judged with the `request` headers it answers, those of a request that
    /// can be sent again: no other is stored), and shared with the requests that follow its
    /// flight.
    pub(crate) fn finish_response(
        &self,
        response: Response<Incoming>,
        held: TurnHeld,
        (policy, request): (&HostPolicy, Option<&HeaderMap>),
        cx: &mut RequestContext<'_>,
    ) -> Response<ProxyBody> {
        let (mut parts, body) = response.into_parts();
        strip_hop_by_hop(&mut parts.headers);
        parts.headers.append(VIA, self.loops.via_for(parts.version));
        parts.version = Version::HTTP_11;
        let TurnHeld { permit, idle } = held;
        let priced = crawler_price(parts.status, &parts.headers).is_some();
        if priced {
            // A priced page (402 + crawler-price) is a price, never a challenge: not scanned.
        } else if let Some(signal) = header_block(&parts.headers) {
            let what = format!("challenge header {signal}");
            self.blocks.soft(&permit, &what, parts.status.as_u16());
        } else if let Some(to) = block_redirect(&parts, &policy.blocks.markers, &cx.budget.host) {
            let what = format!("a redirect to a block page ({to})");
            self.blocks.soft(&permit, &what, parts.status.as_u16());
        }
        let scan = if priced {
            None
        } else {
            self.blocks
                .scan_for(parts.status.as_u16(), &parts.headers, policy)
        };
        // The answer's Cache-Control, read once for the store and the flight alike.
        let said = match cx.cache_use.is_some() || cx.flight.is_some() {
            true => Directives::of(&parts.headers),
            false => Directives::default(),
        };
        let store = cx
            .cache_use
            .as_ref()
            .zip(request)
            .and_then(|(plan, request)| self.store_for(plan, &parts, request, &said));
        let share = cx
            .flight
            .take()
            .and_then(|lead| Share::start(lead, &parts, &said));
        let body = ProxyBody::Upstream(Streamed {
            body,
            permit: Some(permit),
            idle,
            scan,
            store,
            share,
            silence: Some(Silence::new(policy.forward.read_timeout)),
        });
        Response::from_parts(parts, body)
    }
}
