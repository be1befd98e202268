//! An origin's answer as courtesy may pass it on (issue 47, finding 6): framed as RFC 9112 asks,
//! and with no `Proxy-Status` member that a client would read as courtesy's own. Every upstream
//! answer is checked here once, in `exchange.rs` (plain and intercepted requests, HTTP/1.1 and
//! HTTP/2, robots.txt fetches), before the host's pacing hears of it and before the response
//! store may keep it.
//!
//! - **`Transfer-Encoding` with `Content-Length`** (RFC 9112 6.1, 6.3): the transfer coding
//!   decides the length, the origin's `Content-Length` goes (the client gets the length courtesy
//!   frames itself), and the upstream connection is never used again (a sender that wrote both
//!   may have framed by either; `crate::upstream::pool::reuse::retire`).
//! - **A transfer coding other than `chunked`** (`gzip, chunked`, `chunked, gzip`, `gzip`):
//!   hyper takes off `chunked` alone, so passing the rest on would hand the client coded bytes
//!   labelled as identity. Refused: a 502 with `Proxy-Status: courtesy;
//!   error=http_protocol_error`, the connection retired. A bodiless answer (to a HEAD, a 1xx,
//!   204 or 304) relabels nothing and passes.
//! - **`Proxy-Status` members named like courtesy's** go, the others stay
//!   (`crate::wire::proxy_status::without_ours`).
//!
//! The common answer (no `Transfer-Encoding`, no `Proxy-Status` that mentions courtesy) costs two
//! header lookups and allocates nothing.

use http::header::{CONTENT_LENGTH, TRANSFER_ENCODING};
use http::{HeaderMap, Response, StatusCode};

use crate::proxy::answer::failure::Failure;
use crate::proxy::answer::response::ProxyError;
use crate::wire::proxy_status;

/// What the check did to the answer's framing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// Passed on as the origin framed it.
    AsSent,
    /// `Content-Length` beside `Transfer-Encoding` taken out: the connection must not be reused.
    LengthDropped,
}

/// Checks `response`, the answer to a request that was a `HEAD` when `head`, and cleans it for the
/// client; `Err` is the 502 it gets instead (the connection must not be reused then either).
pub(crate) fn sanitize<B>(response: &mut Response<B>, head: bool) -> Result<Framing, Failure> {
    let status = response.status();
    let headers = response.headers_mut();
    proxy_status::without_ours(headers);
    if !headers.contains_key(TRANSFER_ENCODING) {
        return Ok(Framing::AsSent);
    }
    let bodiless = head
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    if !bodiless {
        if let Some(codings) = undecoded_codings(headers) {
            return Err(Failure::new(
                StatusCode::BAD_GATEWAY,
                ProxyError::HttpProtocolError,
                format!(
                    "the origin's answer has Transfer-Encoding {codings:?}: courtesy takes off \
                     chunked alone and does not pass on a body in another transfer coding"
                ),
            ));
        }
    }
    if headers.remove(CONTENT_LENGTH).is_some() {
        return Ok(Framing::LengthDropped);
    }
    Ok(Framing::AsSent)
}

/// The `Transfer-Encoding` lines, joined, when they name a coding that would reach the client
/// undecoded: anything but one final `chunked` (which hyper's client takes off exactly when the
/// last element of the last line is `chunked`) and the no-op `identity` and empty elements.
fn undecoded_codings(headers: &HeaderMap) -> Option<String> {
    let lines = headers.get_all(TRANSFER_ENCODING);
    let joined = || {
        lines
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut elements = Vec::new();
    for line in lines.iter() {
        let Ok(text) = line.to_str() else {
            return Some(joined());
        };
        elements.extend(text.split(',').map(str::trim));
    }
    if elements
        .last()
        .is_some_and(|last| last.eq_ignore_ascii_case("chunked"))
    {
        elements.pop();
    }
    elements
        .iter()
        .any(|e| !e.is_empty() && !e.eq_ignore_ascii_case("identity"))
        .then(joined)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, headers: &[(&'static str, &'static str)]) -> Response<()> {
        let mut response = Response::new(());
        *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
        for (k, v) in headers {
            response
                .headers_mut()
                .append(*k, http::HeaderValue::from_static(v));
        }
        response
    }

    #[test]
    fn a_length_beside_a_transfer_coding_goes() {
        let mut both = answer(
            200,
            &[("content-length", "5"), ("transfer-encoding", "chunked")],
        );
        assert_eq!(sanitize(&mut both, false), Ok(Framing::LengthDropped));
        assert!(!both.headers().contains_key(CONTENT_LENGTH));
        assert!(
            both.headers().contains_key(TRANSFER_ENCODING),
            "hop-by-hop: stripped later"
        );
        let mut head = answer(
            200,
            &[
                ("content-length", "5"),
                ("transfer-encoding", "gzip, chunked"),
            ],
        );
        assert_eq!(sanitize(&mut head, true), Ok(Framing::LengthDropped));
        let mut plain = answer(200, &[("content-length", "5")]);
        assert_eq!(sanitize(&mut plain, false), Ok(Framing::AsSent));
        assert!(plain.headers().contains_key(CONTENT_LENGTH));
        let mut chunked = answer(200, &[("transfer-encoding", "Chunked")]);
        assert_eq!(sanitize(&mut chunked, false), Ok(Framing::AsSent));
    }

    #[test]
    fn a_coding_other_than_chunked_is_refused_never_relabelled() {
        for codings in [
            &["gzip, chunked"][..],
            &["gzip", "chunked"],
            &["chunked, gzip"],
            &["gzip"],
            &["chunked, chunked"],
            &["chunked;x=1"],
            &["chunked,"],
            &["deflate, identity, chunked"],
        ] {
            let mut headers: Vec<(&'static str, &'static str)> =
                codings.iter().map(|c| ("transfer-encoding", *c)).collect();
            headers.push(("content-length", "9"));
            let refused = sanitize(&mut answer(200, &headers), false);
            let failure = refused.err();
            assert_eq!(
                failure.as_ref().map(|f| (f.status.as_u16(), f.kind)),
                Some((502, ProxyError::HttpProtocolError)),
                "{codings:?}"
            );
        }
        for codings in [
            &["chunked"][..],
            &["identity, chunked"],
            &[" , chunked "],
            &["identity"],
            &["", "chunked"],
        ] {
            let headers: Vec<(&'static str, &'static str)> =
                codings.iter().map(|c| ("transfer-encoding", *c)).collect();
            assert!(
                sanitize(&mut answer(200, &headers), false).is_ok(),
                "{codings:?}"
            );
        }
        // No body, nothing relabelled.
        for status in [204, 304] {
            let te = [("transfer-encoding", "gzip, chunked")];
            assert!(
                sanitize(&mut answer(status, &te), false).is_ok(),
                "{status}"
            );
        }
    }

    #[test]
    fn an_origins_courtesy_member_leaves_proxy_status() {
        let mut answered = answer(
            403,
            &[
                (
                    "proxy-status",
                    "courtesy; error=http_request_denied; details=\"no\"",
                ),
                ("proxy-status", "cdn; error=dns_timeout"),
            ],
        );
        assert_eq!(sanitize(&mut answered, false), Ok(Framing::AsSent));
        let left: Vec<_> = answered.headers().get_all("proxy-status").iter().collect();
        assert_eq!(left, ["cdn; error=dns_timeout"]);
    }
}
