//! `cache = "http"` (the default): the response store as RFC 9111's shared cache. Before the
//! request goes, a fresh entry answers it (in full, or with a local 304 when the client's own
//! validators match), a stale one is revalidated with its validators (the client's own kept to
//! judge the answer by), and a request that says `only-if-cached` gets a 504 when nothing fresh
//! is stored. After the origin answers a revalidation with 304, the entry is freshened and the
//! client gets what its request asked for. A request the store cannot answer costs one look at
//! the in-memory index.

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::header::{HeaderValue, AGE, CONTENT_LENGTH, IF_MODIFIED_SINCE, IF_NONE_MATCH, VIA};
use http::{HeaderMap, Response, StatusCode};
use tracing::info;

use super::freshness::{self, NOT_MODIFIED_FIELDS};
use super::lookup::{lookup, Lookup};
use super::plan::CacheUse;
use super::store::{self, Head};
use crate::proxy::answer::body::ProxyBody;
use crate::proxy::answer::response::{local, ProxyError};
use crate::proxy::Proxy;

impl Proxy {
    /// Before the request goes: the stored answer, a local 304, or a 504 for `only-if-cached`;
    /// `None` when the request must go (made conditional on the stored entry when it is stale).
    pub(super) async fn answer_http(
        &self,
        plan: &mut CacheUse,
        headers: &mut HeaderMap,
    ) -> Option<Response<ProxyBody>> {
        match self.stored_lookup(plan, headers).await {
            Some((head, Lookup::Serve { not_modified, age })) => {
                info!(url = %plan.url, not_modified, "answered from the cache");
                if not_modified {
                    return Some(self.not_modified_from(&head, age));
                }
                return self.serve_stored(plan, age).await;
            }
            Some((head, Lookup::Revalidate)) => revalidate_with(plan, head, headers),
            Some((_, Lookup::Pass)) | None => {}
        }
        plan.asked.only_if_cached.then(|| {
            local(
                StatusCode::GATEWAY_TIMEOUT,
                ProxyError::DestinationUnavailable,
                "only-if-cached: no fresh answer is stored",
                None,
            )
        })
    }

    /// The entry stored for `plan`'s request and what it can do for a request with `headers`
    /// now; `None` when nothing is stored (one look at the store's index).
    async fn stored_lookup(&self, plan: &CacheUse, headers: &HeaderMap) -> Option<(Head, Lookup)> {
        if !self.cache.may_hold(&plan.url) {
            return None;
        }
        let head = self.cache.head_off_workers(&plan.url).await?;
        let how = lookup(&head, headers, plan.knobs, SystemTime::now());
        Some((head, how))
    }

    /// Whether a stored entry would answer a request with `headers` now, without asking the
    /// origin ([`Proxy::answer_http`]'s own decision, for `Proxy::check`).
    pub(super) async fn would_serve_http(&self, plan: &CacheUse, headers: &HeaderMap) -> bool {
        let found = self.stored_lookup(plan, headers).await;
        matches!(found, Some((_, Lookup::Serve { .. })))
    }

    /// The stored answer in full (its headers alone to a HEAD), with its `Age`.
    async fn serve_stored(&self, plan: &CacheUse, age: Duration) -> Option<Response<ProxyBody>> {
        let (head, body) = match plan.head_request {
            true => (self.cache.head_off_workers(&plan.url).await?, Bytes::new()),
            false => self.cache.get_off_workers(&plan.url).await?,
        };
        let length = head.size;
        let mut answer = self.answer_from_cache(head, body, "hit");
        let headers = answer.headers_mut();
        headers.insert(AGE, HeaderValue::from(age.as_secs()));
        if plan.head_request {
            headers.insert(CONTENT_LENGTH, HeaderValue::from(length));
        }
        Some(answer)
    }

    /// A 304 made from the stored entry `head` (RFC 9110 15.4.5's fields), `age` old.
    fn not_modified_from(&self, head: &Head, age: Duration) -> Response<ProxyBody> {
        let stored = head.header_map();
        let mut response = Response::new(ProxyBody::empty());
        *response.status_mut() = StatusCode::NOT_MODIFIED;
        let headers = response.headers_mut();
        for name in &NOT_MODIFIED_FIELDS {
            for value in stored.get_all(name) {
                headers.append(name.clone(), value.clone());
            }
        }
        headers.insert(AGE, HeaderValue::from(age.as_secs()));
        headers.append(VIA, self.loops.via().clone());
        headers.insert("x-courtesy-cache", HeaderValue::from_static("hit; 304"));
        response
    }

    /// After the origin answered a revalidation with 304 (`fresh` its headers): the entry
    /// freshened, and the client's answer: a 304 when its own validators match, else the entry.
    pub(super) async fn revalidated_http(
        &self,
        plan: &CacheUse,
        fresh: &HeaderMap,
    ) -> Option<Response<ProxyBody>> {
        let mut head = plan.stale.clone()?;
        let mut stored = head.header_map();
        freshness::freshen(&mut stored, fresh);
        head.headers = store::header_pairs(&stored);
        head.stored_at_unix_ms = store::unix_ms(SystemTime::now());
        head.requested_at_unix_ms = store::unix_ms(plan.requested_at);
        self.cache.refresh(head.clone());
        let asked = plan.client_conditions.as_ref();
        if asked.is_some_and(|asked| freshness::not_modified(asked, &stored)) {
            return Some(self.not_modified_from(&head, Duration::ZERO));
        }
        let (head, body) = match plan.head_request {
            true => (head, Bytes::new()),
            false => self.cache.get_off_workers(&plan.url).await?,
        };
        Some(self.answer_from_cache(head, body, "revalidated"))
    }
}

/// Makes the request conditional on the stale entry `head`: its validators replace the client's
/// own (kept in `plan` to judge the answer by).
fn revalidate_with(plan: &mut CacheUse, head: Head, headers: &mut HeaderMap) {
    if freshness::conditional(headers) {
        let mut own = HeaderMap::new();
        for name in [IF_NONE_MATCH, IF_MODIFIED_SINCE] {
            for value in headers.get_all(&name) {
                own.append(name.clone(), value.clone());
            }
            headers.remove(&name);
        }
        plan.client_conditions = Some(own);
    }
    plan.revalidating |= head.add_validators(headers);
    plan.stale = Some(head);
}
