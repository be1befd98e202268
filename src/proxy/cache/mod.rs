//! How a forwarded GET uses the response store (`cache = "revalidate" | "dev"`): answer from it,
//! make the request conditional, turn the origin's 304 into the stored 200, and fill the store as a
//! response streams by. The store itself (files, size bound, eviction) is `store.rs`.

pub(crate) mod store;

use http::header::{
    HeaderValue, AUTHORIZATION, COOKIE, ETAG, IF_MODIFIED_SINCE, IF_NONE_MATCH, LAST_MODIFIED, VIA,
};
use std::ops::ControlFlow;

use http::request::Parts;
use http::{HeaderMap, Method, Response};
use tracing::info;

use crate::config::{CacheMode, HostPolicy};
use crate::proxy::answer::body::ProxyBody;
use crate::proxy::forward::context::{Flow, RequestContext};
use crate::proxy::send::attempts::replayable as replayable_request;
use crate::proxy::Proxy;

/// The store's part in one request: which entry, and whether the request was made conditional.
#[derive(Debug)]
pub(crate) struct CacheUse {
    /// The entry's key: the URL, and for a request with `Authorization` its credentials too.
    url: String,
    mode: CacheMode,
    revalidating: bool,
    /// The request's headers, for the response's `Vary`.
    request: HeaderMap,
}

impl CacheUse {
    /// How a request uses the store: only bodiless GETs whose client sent no validators of its own
    /// (a client that did gets the origin's 304 untouched) and no `Cookie` (an answer to it may be
    /// that client's own: never stored, and never answered from another client's entry).
    pub(crate) fn plan(
        policy: &HostPolicy,
        parts: &http::request::Parts,
        bodiless: bool,
    ) -> Option<CacheUse> {
        let used = policy.forward.cache != CacheMode::Off
            && parts.method == Method::GET
            && bodiless
            && !parts.headers.contains_key(IF_NONE_MATCH)
            && !parts.headers.contains_key(IF_MODIFIED_SINCE)
            && !parts.headers.contains_key(COOKIE);
        used.then(|| CacheUse {
            url: entry_key(&parts.uri, &parts.headers),
            mode: policy.forward.cache,
            revalidating: false,
            request: parts.headers.clone(),
        })
    }
}

/// The store's key for a request: its URL, and for a request with `Authorization` a hash of the
/// credentials under this process's own random key, so that an entry made for one client's
/// credentials answers no one else (RFC 9111 3.5) and the file does not hold them.
fn entry_key(uri: &http::Uri, headers: &HeaderMap) -> String {
    use std::hash::BuildHasher as _;
    static KEY: std::sync::OnceLock<std::collections::hash_map::RandomState> =
        std::sync::OnceLock::new();
    let url = uri.to_string();
    let credentials: Vec<&[u8]> = headers
        .get_all(AUTHORIZATION)
        .iter()
        .map(HeaderValue::as_bytes)
        .collect();
    if credentials.is_empty() {
        return url;
    }
    let hash = KEY
        .get_or_init(std::collections::hash_map::RandomState::new)
        .hash_one(&credentials);
    format!("{url} authorization:{hash:016x}")
}

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
        if let Some(checked) = cx.checked.take() {
            self.report_preferences(&mut answer, checked, &cx.asking.caller.state);
        }
        ControlFlow::Break(answer)
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
                let validators = [
                    (IF_NONE_MATCH, head.etag.as_deref()),
                    (IF_MODIFIED_SINCE, head.last_modified.as_deref()),
                ];
                for (name, value) in validators {
                    if let Some(v) = value.and_then(|v| HeaderValue::from_str(v).ok()) {
                        headers.insert(name, v);
                        plan.revalidating = true;
                    }
                }
                None
            }
        }
    }

    /// After the origin answered `status`: a 304 to a revalidation becomes the stored 200.
    pub(super) async fn revalidated(
        &self,
        plan: &CacheUse,
        status: u16,
    ) -> Option<Response<ProxyBody>> {
        if !(plan.revalidating && status == 304) {
            return None;
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
        policy: &HostPolicy,
    ) -> Option<Box<store::Writer>> {
        let validated =
            parts.headers.contains_key(ETAG) || parts.headers.contains_key(LAST_MODIFIED);
        let storable = store::storable_for(parts.status, &parts.headers, &plan.request)
            && (validated || policy.forward.cache == CacheMode::Dev);
        if !storable {
            return None;
        }
        let mut head = store::head_of(&plan.url, parts.status, &parts.headers);
        head.vary = store::vary_of(&parts.headers, &plan.request)?;
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
