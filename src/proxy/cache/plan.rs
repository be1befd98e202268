//! The response store's part in one request (`CacheUse`): whether it uses the store at all, which
//! entry, and whether it was made conditional; the entry's key.

use http::header::{HeaderValue, AUTHORIZATION, COOKIE, IF_MODIFIED_SINCE, IF_NONE_MATCH};
use http::{HeaderMap, Method};

use crate::config::{CacheMode, HostPolicy};

/// The store's part in one request: which entry, and whether the request was made conditional.
#[derive(Debug)]
pub(crate) struct CacheUse {
    /// The entry's key: the URL, and for a request with `Authorization` its credentials too.
    pub(crate) url: String,
    /// The host's `cache` mode.
    pub(crate) mode: CacheMode,
    /// The stored validators were added to the request: a 304 is the stored 200.
    pub(crate) revalidating: bool,
    /// The request's headers, for the response's `Vary`.
    pub(crate) request: HeaderMap,
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
