//! How a forwarded GET uses the response store (`cache = "http" | "revalidate" | "dev"`): answer
//! from it, make the request conditional, turn the origin's 304 into the stored 200, and fill the
//! store as a response streams by; RFC 9111's rules are `freshness.rs` and `lookup.rs`, the
//! `"http"` mode `http_mode.rs`. Identical requests in flight share one origin request
//! (`coalesce.rs`, `flights.rs`). The store itself (files, size bound, eviction) is `store.rs`.

pub(crate) mod coalesce;
pub(crate) mod flights;
pub(crate) mod freshness;
mod http_mode;
pub(crate) mod lookup;
pub(crate) mod plan;
pub(crate) mod store;

pub(crate) use plan::CacheUse;

use http::header::{HeaderValue, ETAG, LAST_MODIFIED, VIA};
use std::ops::ControlFlow;

use http::request::Parts;
use http::{HeaderMap, Response};
use tracing::info;

use crate::config::{CacheMode, HostPolicy};
use crate::observe::metrics::NotSent;
use crate::proxy::answer::body::ProxyBody;
use crate::proxy::forward::context::{Flow, RequestContext};
use crate::proxy::send::attempts::replayable as replayable_request;
use crate::proxy::Proxy;
use freshness::Directives;

/// Whether a stored entry may answer a request: the same values of what its `Vary` names, and
/// not personal (an entry stored with `Set-Cookie`, say by an older courtesy, is never replayed).
fn replayable(head: &store::Head, request: &HeaderMap) -> bool {
    head.matches(request) && !store::personal(request, &head.header_map())
}

impl Proxy {
    /// The response store's phase, before the request goes: its use of the store planned
    /// (`cx.cache_use`: never for a WebSocket handshake, never answered from, nor kept in, the
    /// store), and in `dev` mode a stored response as the answer (with the stated preferences
    /// met reported on it); in `revalidate` mode the stored validators added to the head.
    pub(crate) async fn answer_from_store(
        &self,
        head: &mut Parts,
        cx: &mut RequestContext<'_>,
    ) -> Flow {
        let replayable = replayable_request(&head.method, cx.unread.as_ref());
        let plan = CacheUse::plan(&cx.policy, head, replayable).filter(|_| cx.upgrade.is_none());
        let plan = cx.cache_use.insert(match plan {
            Some(plan) => plan,
            None => return ControlFlow::Continue(()),
        });
        let Some(mut answer) = self.answer_or_revalidate(plan, &mut head.headers).await else {
            return ControlFlow::Continue(());
        };
        if answer.headers().contains_key("x-courtesy-cache") {
            // From the store (not a 504 for only-if-cached): the host was not asked.
            self.metrics
                .not_sent(&cx.asking.caller.state, &cx.budget.key, NotSent::Stored);
            cx.trail.held.not_sent = Some(NotSent::Stored);
        }
        if let Some(checked) = cx.checked.take() {
            self.report_preferences(&mut answer, checked, &cx.asking.caller.state);
        }
        ControlFlow::Break(answer)
    }

    /// Whether the response store would answer a bodiless request with `head` to a host under
    /// `policy` now, without asking the host: the store's phase's own decision, for
    /// `Proxy::check` (a fresh entry under `"http"`, any matching entry under `"dev"`; never
    /// under `"revalidate"`, which always asks the origin).
    pub(crate) async fn serves_from_store(&self, head: &Parts, policy: &HostPolicy) -> bool {
        let Some(plan) = CacheUse::plan(policy, head, true) else {
            return false;
        };
        match plan.mode {
            CacheMode::Off | CacheMode::Revalidate => false,
            CacheMode::Http => self.would_serve_http(&plan, &head.headers).await,
            CacheMode::Dev => {
                let found = self.cache.head_off_workers(&plan.url).await;
                found.is_some_and(|stored| replayable(&stored, &head.headers))
            }
        }
    }

    /// Before the request goes: in `dev` mode a stored response is the answer; in `revalidate`
    /// mode the stored validators are added to `headers`.
    pub(super) async fn answer_or_revalidate(
        &self,
        plan: &mut CacheUse,
        headers: &mut HeaderMap,
    ) -> Option<Response<ProxyBody>> {
        match plan.mode {
            CacheMode::Off => None,
            CacheMode::Http => self.answer_http(plan, headers).await,
            CacheMode::Dev => {
                let (head, body) = self.cache.get_off_workers(&plan.url).await?;
                if !replayable(&head, headers) {
                    return None;
                }
                info!(url = %plan.url, "answered from the cache (dev)");
                Some(self.answer_from_cache(head, body, "hit; dev"))
            }
            CacheMode::Revalidate => {
                let head = self.cache.head_off_workers(&plan.url).await?;
                if !replayable(&head, headers) {
                    return None;
                }
                plan.revalidating |= head.add_validators(headers);
                None
            }
        }
    }

    /// After the origin answered `status`: a 304 to a revalidation becomes the stored 200.
    pub(super) async fn revalidated(
        &self,
        plan: &CacheUse,
        status: u16,
        fresh: &HeaderMap,
    ) -> Option<Response<ProxyBody>> {
        if !(plan.revalidating && status == 304) {
            return None;
        }
        if plan.mode == CacheMode::Http {
            return self.revalidated_http(plan, fresh).await;
        }
        let (head, body) = self.cache.get_off_workers(&plan.url).await?;
        Some(self.answer_from_cache(head, body, "revalidated"))
    }

    /// A writer that stores the response as it streams by, when it may be stored: a plain 200 with
    /// a validator (or any plain 200 in `dev` mode).
    pub(super) fn store_for(
        &self,
        plan: &CacheUse,
        parts: &http::response::Parts,
        request: &HeaderMap,
        said: &Directives,
    ) -> Option<Box<store::Writer>> {
        let storable = match plan.mode {
            CacheMode::Off => false,
            CacheMode::Http => {
                let reused_unasked = plan.knobs.heuristic || !plan.knobs.min_refetch.is_zero();
                !plan.head_request
                    && freshness::storable(
                        parts.status,
                        request,
                        &plan.asked,
                        &parts.headers,
                        said,
                        reused_unasked,
                    )
                    .is_ok()
                    && !store::personal(request, &parts.headers)
            }
            CacheMode::Revalidate | CacheMode::Dev => {
                let validated =
                    parts.headers.contains_key(ETAG) || parts.headers.contains_key(LAST_MODIFIED);
                store::storable_for(parts.status, &parts.headers, request)
                    && (validated || plan.mode == CacheMode::Dev)
            }
        };
        if !storable {
            return None;
        }
        let mut head = store::head_of(&plan.url, parts.status, &parts.headers);
        head.vary = store::vary_of(&parts.headers, request)?;
        head.requested_at_unix_ms = store::unix_ms(plan.requested_at);
        self.cache.writer(head).map(Box::new)
    }

    /// A stored response as the full 200, saying where it came from in `x-courtesy-cache`.
    fn answer_from_cache(
        &self,
        head: store::Head,
        body: bytes::Bytes,
        how: &'static str,
    ) -> Response<ProxyBody> {
        let mut response = Response::new(ProxyBody::Local(Some(body)));
        *response.status_mut() = head.status();
        let headers = response.headers_mut();
        *headers = head.header_map();
        headers.remove(http::header::CONTENT_LENGTH);
        // Stored clean (`crate::proxy::send::sanitize`), but an entry of an older courtesy may carry an
        // origin's member named like courtesy's.
        crate::wire::proxy_status::without_ours(headers);
        headers.append(VIA, self.loops.via().clone());
        headers.insert("x-courtesy-cache", HeaderValue::from_static(how));
        response
    }
}
