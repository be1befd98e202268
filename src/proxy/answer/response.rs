//! Responses that courtesy makes itself.
//!
//! Every local answer carries a `Proxy-Status` header (RFC 9209) naming the reason, so a crawler can
//! tell "the site said 503" from "courtesy said 503". This module builds those answers; it does not
//! decide when to make them (the proxy and the admin API do).

use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::{Response, StatusCode};

use crate::budget::limiter::Refusal;
use crate::proxy::answer::body::ProxyBody;

pub(crate) use crate::wire::proxy_status::ProxyError;

pub(crate) use crate::wire::proxy_status::PROXY_NAME;

/// A locally made response: `status`, a `Proxy-Status` naming `error` with `details`, a short text
/// body, and `Retry-After` (whole seconds, rounded up) where waiting helps.
pub(crate) fn local(
    status: StatusCode,
    error: ProxyError,
    details: &str,
    retry_after: Option<Duration>,
) -> Response<ProxyBody> {
    let body = Bytes::from(format!(
        "courtesy: {} ({}): {details}\n",
        status.as_u16(),
        error.token()
    ));
    let mut response = Response::new(ProxyBody::Local(Some(body)));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    let proxy_status = proxy_status_member(error, "", details);
    if let Ok(value) = HeaderValue::from_str(&proxy_status) {
        headers.insert("proxy-status", value);
    }
    if let Some(wait) = retry_after {
        let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        headers.insert(RETRY_AFTER, HeaderValue::from(secs.max(1)));
    }
    response
}

/// The answer for a client outside `[proxy] allow_clients`.
pub(crate) fn client_not_allowed(ip: std::net::IpAddr) -> Response<ProxyBody> {
    local(
        StatusCode::FORBIDDEN,
        ProxyError::HttpRequestDenied,
        &format!(
            "client {} is not in [proxy] allow_clients",
            crate::wire::literal::canonical_ip(ip)
        ),
        None,
    )
}

/// The answer for proxy credentials courtesy does not accept (`client_auth`): 407 with
/// `Proxy-Authenticate: Basic realm="courtesy"`, so that a client asks again with them.
pub(crate) fn proxy_auth_required(why: &str) -> Response<ProxyBody> {
    let mut response = local(
        StatusCode::PROXY_AUTHENTICATION_REQUIRED,
        ProxyError::HttpRequestDenied,
        why,
        None,
    );
    response.headers_mut().insert(
        http::header::PROXY_AUTHENTICATE,
        HeaderValue::from_static("Basic realm=\"courtesy\""),
    );
    response
}

/// The answer to a TRACE or TRACK (as nginx answers them): a local 405, never forwarded, since an
/// origin that echoes the request would hand back its headers, courtesy's signature among them.
pub(crate) fn trace_refused(method: &http::Method) -> Response<ProxyBody> {
    let mut response = local(
        StatusCode::METHOD_NOT_ALLOWED,
        ProxyError::HttpRequestDenied,
        &format!("{method} is not forwarded: it would reflect the request's headers"),
        None,
    );
    response.headers_mut().insert(
        http::header::ALLOW,
        HeaderValue::from_static("GET, HEAD, POST, PUT, DELETE, CONNECT, OPTIONS, PATCH"),
    );
    response
}

/// The answer for a job past its quota (`max_requests` per `per_seconds`): a local 429 until
/// its window frees.
pub(crate) fn quota_reached(job: &str, retry_after: Duration) -> Response<ProxyBody> {
    local(
        StatusCode::TOO_MANY_REQUESTS,
        ProxyError::ConnectionLimitReached,
        &format!("job {job:?} has used its quota ([[job]] max_requests per per_seconds)"),
        Some(retry_after),
    )
}

/// The local answer for a pacing refusal.
pub(crate) fn refusal(refusal: &Refusal, host: &str) -> Response<ProxyBody> {
    match refusal {
        Refusal::QueueFull {
            max_queue,
            retry_after,
        } => local(
            StatusCode::SERVICE_UNAVAILABLE,
            ProxyError::ConnectionLimitReached,
            &format!("queue for {host} is full ({max_queue} requests waiting)"),
            Some(*retry_after),
        ),
        Refusal::WaitedTooLong { waited, .. } => local(
            StatusCode::SERVICE_UNAVAILABLE,
            ProxyError::ConnectionLimitReached,
            &format!(
                "waited {:.1}s for a turn at {host} (max_wait_seconds)",
                waited.as_secs_f64()
            ),
            Some(Duration::from_secs(1)),
        ),
        Refusal::CoolingDown { remaining, cause } => local(
            StatusCode::TOO_MANY_REQUESTS,
            ProxyError::HttpRequestDenied,
            &format!(
                "{host} is cooling down because {cause}; {:.0}s left",
                remaining.as_secs_f64().ceil()
            ),
            Some(*remaining),
        ),
        Refusal::ShuttingDown => local(
            StatusCode::SERVICE_UNAVAILABLE,
            ProxyError::ConnectionLimitReached,
            "courtesy is shutting down",
            Some(Duration::from_secs(1)),
        ),
    }
}

/// courtesy's own `Proxy-Status` member: `courtesy; error=<type>`, then `params` as written
/// (each starting with `; `), then `; details="…"`.
pub(crate) fn proxy_status_member(error: ProxyError, params: &str, details: &str) -> String {
    format!(
        "{PROXY_NAME}; error={}{params}; details={}",
        error.token(),
        sf_string(details)
    )
}

/// Quotes `text` as an RFC 8941 sf-string: printable ASCII only, `"` and `\` escaped.
pub(crate) fn sf_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => out.push('?'),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[test]
    fn details_are_quoted_as_sf_strings() {
        assert_eq!(sf_string(r#"a "b" \c"#), r#""a \"b\" \\c""#);
        assert_eq!(sf_string("caf\u{e9}\n"), "\"caf??\"");
    }

    #[tokio::test]
    async fn local_responses_carry_proxy_status_and_retry_after() {
        let r = local(
            StatusCode::SERVICE_UNAVAILABLE,
            ProxyError::ConnectionLimitReached,
            "queue full",
            Some(Duration::from_millis(1500)),
        );
        assert_eq!(r.status(), 503);
        assert_eq!(
            r.headers()["proxy-status"],
            "courtesy; error=connection_limit_reached; details=\"queue full\""
        );
        assert_eq!(r.headers()[RETRY_AFTER], "2");
        let body = r.into_body().collect().await.unwrap().to_bytes();
        assert!(String::from_utf8_lossy(&body).contains("queue full"));
    }
}
