//! Which redirects are blocks: only where a vendor blocks (issue 47, finding 5). A `Location`
//! counts when it is
//!
//! - a vendor's own block page on the vendor's own host, redirected to from one of the vendor's
//!   hosts (Google's `/sorry/` on `www.google.com`, `ipv4.google.com`, `google.de`, ...:
//!   [`VendorBlockPath`]), or
//! - the redirecting host itself (by its canonical name; a relative `Location` such as
//!   `/sorry/index?continue=...` is the request's host) with a path marker (a `block_markers`
//!   entry that starts with `/`) at the start of its path.
//!
//! A marker in the query string or the fragment, further along the path, or on an unrelated host
//! never counts: an open redirect (`/out?url=...`) that names a block page is content, and a
//! planted one must not pause a host. A relative reference whose path does not start with `/`
//! (`sorry/index`) never counts either (courtesy does not resolve it against the request's path;
//! the vendors send absolute paths). Dot segments are removed first (`/a/../sorry/index` is
//! `/sorry/index`, where a client following it goes). Pure.

use http::header::LOCATION;

use crate::config::{BlockMarkers, VendorBlockPath};
use crate::wire::host_name;

/// What made a redirect a block, for the block's reason.
#[derive(Debug, Clone, Copy)]
pub(crate) enum BlockRedirect<'a> {
    /// A vendor's own block page on its own host.
    Vendor(&'static VendorBlockPath),
    /// The redirecting host's own path that starts with this marker.
    SameHost(&'a str),
}

impl std::fmt::Display for BlockRedirect<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BlockRedirect::Vendor(v) => write!(f, "{}'s block page {}", v.vendor, v.path),
            BlockRedirect::SameHost(m) => write!(f, "the host's own {m}"),
        }
    }
}

/// Whether a response to a request for `request_host` (canonical) is a redirect to a block
/// page, and which rule says so.
pub(crate) fn block_redirect<'m>(
    parts: &http::response::Parts,
    markers: &'m BlockMarkers,
    request_host: &str,
) -> Option<BlockRedirect<'m>> {
    if !parts.status.is_redirection() {
        return None;
    }
    let location = parts.headers.get(LOCATION)?.to_str().ok()?;
    judge(location, markers, request_host)
}

/// [`block_redirect`] on the `Location` value itself.
fn judge<'m>(
    location: &str,
    markers: &'m BlockMarkers,
    request_host: &str,
) -> Option<BlockRedirect<'m>> {
    let (host, path) = target(location.trim())?;
    let host = match &host {
        Host::Request => request_host,
        Host::Named(name) => name.as_str(),
    };
    let path = without_dot_segments(path);
    let starts = |prefix: &str| {
        path.get(..prefix.len())
            .is_some_and(|p| p.eq_ignore_ascii_case(prefix))
    };
    let vendor = markers
        .vendors()
        .find(|v| (v.hosts)(request_host) && (v.hosts)(host) && starts(v.path));
    if let Some(vendor) = vendor {
        return Some(BlockRedirect::Vendor(vendor));
    }
    if host != request_host {
        return None;
    }
    markers
        .paths()
        .find(|m| starts(m))
        .map(BlockRedirect::SameHost)
}

/// The host a `Location` names.
#[derive(Debug)]
enum Host {
    /// None: the request's own (a relative reference).
    Request,
    /// This one, canonical.
    Named(String),
}

/// A `Location`'s host and its path without query and fragment; `None` for a reference courtesy
/// does not judge: a scheme other than `http` or `https`, a relative path, a host that is no
/// valid name.
fn target(location: &str) -> Option<(Host, &str)> {
    let end = location.find(['?', '#']).unwrap_or(location.len());
    let reference = &location[..end];
    let after_scheme = match reference.split_once(':') {
        Some((scheme, rest)) if is_scheme(scheme) => {
            if !(scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https")) {
                return None;
            }
            Some(rest.strip_prefix("//")?)
        }
        _ => reference.strip_prefix("//"),
    };
    let Some(rest) = after_scheme else {
        // Relative: an absolute path on the request's host, or a relative path (not judged).
        return reference
            .starts_with('/')
            .then_some((Host::Request, reference));
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let (host, _port) = host_name::split(host_port).ok()?;
    Some((Host::Named(host), if path.is_empty() { "/" } else { path }))
}

/// Whether `text` is a URI scheme (RFC 3986 3.1: a letter, then letters, digits, `+`, `-`, `.`).
fn is_scheme(text: &str) -> bool {
    let mut bytes = text.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_alphabetic())
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
}

/// `path` with its `.` and `..` segments removed (RFC 3986 5.2.4), as a client following the
/// redirect asks for it.
fn without_dot_segments(path: &str) -> String {
    if !path.split('/').any(|s| s == "." || s == "..") {
        return path.to_string();
    }
    let mut kept: Vec<&str> = Vec::new();
    let segments: Vec<&str> = path.split('/').skip(1).collect();
    let last = segments.len().saturating_sub(1);
    for (i, segment) in segments.iter().enumerate() {
        match *segment {
            "." | ".." => {
                if *segment == ".." {
                    kept.pop();
                }
                if i == last {
                    kept.push("");
                }
            }
            other => kept.push(other),
        }
    }
    format!("/{}", kept.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::DEFAULT_BLOCK_MARKERS;

    fn defaults() -> BlockMarkers {
        BlockMarkers::new(
            DEFAULT_BLOCK_MARKERS
                .iter()
                .map(|m| m.to_string())
                .collect(),
        )
    }

    fn counts(location: &str, from: &str) -> bool {
        judge(location, &defaults(), from).is_some()
    }

    #[test]
    fn the_vendors_own_block_page_on_its_own_hosts_counts() {
        for (location, from) in [
            (
                "https://www.google.com/sorry/index?continue=https://www.google.com/search%3Fq%3Dx",
                "www.google.com",
            ),
            (
                "https://ipv4.google.com/sorry/index?q=abc",
                "www.google.com",
            ),
            ("https://WWW.Google.COM./sorry/index", "www.google.de"),
            ("http://www.google.co.uk/sorry/?continue=x", "google.co.uk"),
            ("//www.google.com/Sorry/Index", "www.google.com"),
            ("/sorry/index?continue=x", "www.google.com"),
        ] {
            assert!(counts(location, from), "{location} from {from}");
        }
        assert!(matches!(
            judge("https://ipv4.google.com/sorry/index", &defaults(), "www.google.com"),
            Some(BlockRedirect::Vendor(v)) if v.vendor == "Google"
        ));
    }

    #[test]
    fn the_same_host_with_the_marker_at_the_start_of_the_path_counts() {
        for location in [
            "/sorry/index",
            "/sorry/index?continue=%2F",
            "/SORRY/INDEX.html",
            "http://shop.example/sorry/index",
            "https://Shop.Example.:8443/sorry/index#top",
            "http://user@shop.example/sorry/index",
            "/a/../sorry/index",
            "/./sorry/index",
        ] {
            assert!(
                matches!(
                    judge(location, &defaults(), "shop.example"),
                    Some(BlockRedirect::SameHost("/sorry/index"))
                ),
                "{location}"
            );
        }
    }

    #[test]
    fn a_marker_in_the_query_elsewhere_in_the_path_or_on_another_host_never_counts() {
        for location in [
            // The open redirect of the finding: the marker in the query string.
            "/out?url=/sorry/index",
            "/out?url=https://www.google.com/sorry/index",
            "https://shop.example/login#/sorry/index",
            // Further along the path.
            "/en/sorry/index",
            "/search/sorry/index?x",
            "/a/sorry/index/../../b",
            // Another host, whatever its path.
            "https://evil.example/sorry/index",
            "//evil.example/sorry/index",
            "https://google.evil.example/sorry/index",
            "https://www.google.com.evil.example/sorry/index",
            "http://shop.example.evil/sorry/index",
            // A relative path, another scheme, no host, nonsense.
            "sorry/index",
            "ftp://shop.example/sorry/index",
            "https:/sorry/index",
            "http://[::1/sorry/index",
            "",
        ] {
            assert!(!counts(location, "shop.example"), "{location}");
        }
        // Google's page counts only where Google redirects to it: an open redirect of another
        // host to it is no block of that host.
        assert!(!counts(
            "https://www.google.com/sorry/index?continue=x",
            "shop.example"
        ));
        assert!(!counts(
            "https://www.google.com/search/sorry/index",
            "www.google.com"
        ));
    }

    #[test]
    fn an_operators_own_markers_decide_and_without_the_vendors_marker_its_rule_is_off() {
        let own = BlockMarkers::new(vec!["/blocked".into(), "captcha".into()]);
        assert!(judge("/blocked?x", &own, "shop.example").is_some());
        assert!(
            judge("/captcha", &own, "shop.example").is_none(),
            "not a path marker"
        );
        assert!(judge(
            "https://ipv4.google.com/sorry/index",
            &own,
            "www.google.com"
        )
        .is_none());
    }

    #[test]
    fn only_redirects_are_judged() {
        let mut parts = http::Response::new(()).into_parts().0;
        parts
            .headers
            .insert(LOCATION, http::HeaderValue::from_static("/sorry/index"));
        assert!(block_redirect(&parts, &defaults(), "shop.example").is_none());
        parts.status = http::StatusCode::FOUND;
        assert!(block_redirect(&parts, &defaults(), "shop.example").is_some());
    }

    #[test]
    fn dot_segments_go_as_rfc_3986_says() {
        for (path, want) in [
            ("/a/b", "/a/b"),
            ("/a/./b", "/a/b"),
            ("/a/../b", "/b"),
            ("/../b", "/b"),
            ("/a/b/..", "/a/"),
            ("/a/.", "/a/"),
        ] {
            assert_eq!(without_dot_segments(path), want, "{path}");
        }
    }
}
