//! The response store's part in one request (`CacheUse`): whether it uses the store at all, which
//! entry, whether it was made conditional (and on what), the host's freshness settings; the
//! entry's key.

use http::header::{HeaderValue, AUTHORIZATION, COOKIE, IF_MODIFIED_SINCE, IF_NONE_MATCH};
use http::{HeaderMap, Method};

use std::time::SystemTime;

use super::freshness::Directives;
use super::lookup::Knobs;
use super::store::Head;
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
    /// A HEAD (answered from a stored GET's headers; its answer is never stored).
    pub(crate) head_request: bool,
    /// When the request was planned (RFC 9111's `request_time` of what the origin answers).
    pub(crate) requested_at: SystemTime,
    /// The host's freshness settings (`heuristic_freshness`, `min_refetch_seconds`).
    pub(crate) knobs: Knobs,
    /// The client's own `If-None-Match` / `If-Modified-Since`, taken out while courtesy
    /// revalidates its entry with its own validators.
    pub(crate) client_conditions: Option<HeaderMap>,
    /// The stale entry being revalidated (`cache = "http"`).
    pub(crate) stale: Option<Head>,
    /// The request's own `Cache-Control` (and `Pragma`), read once for every rule that asks.
    pub(crate) asked: Directives,
}

impl CacheUse {
    /// How a request uses the store. Under `"http"`: bodiless GETs and HEADs without `Cookie`
    /// (an answer to one may be that client's own: never stored, and never answered from another
    /// client's entry). Under `"revalidate"` and `"dev"`: bodiless GETs without `Cookie` whose
    /// client sent no validators of its own (a client that did gets the origin's 304 untouched).
    pub(crate) fn plan(
        policy: &HostPolicy,
        parts: &http::request::Parts,
        bodiless: bool,
    ) -> Option<CacheUse> {
        let mode = policy.forward.cache;
        let headers = &parts.headers;
        let plain = bodiless && !headers.contains_key(COOKIE);
        let used = match mode {
            CacheMode::Off => false,
            CacheMode::Http => {
                plain && (parts.method == Method::GET || parts.method == Method::HEAD)
            }
            CacheMode::Revalidate | CacheMode::Dev => {
                plain
                    && parts.method == Method::GET
                    && !headers.contains_key(IF_NONE_MATCH)
                    && !headers.contains_key(IF_MODIFIED_SINCE)
            }
        };
        used.then(|| CacheUse {
            url: entry_key(&parts.uri, headers),
            mode,
            revalidating: false,
            head_request: parts.method == Method::HEAD,
            requested_at: SystemTime::now(),
            knobs: Knobs {
                heuristic: policy.forward.heuristic_freshness,
                min_refetch: policy.forward.min_refetch,
            },
            client_conditions: None,
            stale: None,
            asked: Directives::of(headers),
        })
    }
}

/// `uri` as text: what its `Display` writes, put together without the formatting machinery
/// (this runs for every GET and HEAD under the default cache).
fn url_of(uri: &http::Uri) -> String {
    let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
        return uri.to_string();
    };
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let mut url = String::with_capacity(scheme.len() + 3 + authority.as_str().len() + path.len());
    url.push_str(scheme);
    url.push_str("://");
    url.push_str(authority.as_str());
    url.push_str(path);
    url
}

/// The store's key for a request: its URL, and for a request with `Authorization` a hash of the
/// credentials under this process's own random key, so that an entry made for one client's
/// credentials answers no one else (RFC 9111 3.5) and the file does not hold them.
pub(crate) fn entry_key(uri: &http::Uri, headers: &HeaderMap) -> String {
    use std::hash::BuildHasher as _;
    static KEY: std::sync::OnceLock<std::collections::hash_map::RandomState> =
        std::sync::OnceLock::new();
    let url = url_of(uri);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_is_written_as_its_display_writes_it() {
        for url in [
            "http://a.test/",
            "http://a.test",
            "https://a.test:8443/p/q?x=1&y=%20",
            "http://[::1]:8080/a?",
            "http://user@a.test/x",
        ] {
            let uri: http::Uri = url.parse().unwrap();
            assert_eq!(url_of(&uri), uri.to_string(), "{url}");
        }
    }
}
