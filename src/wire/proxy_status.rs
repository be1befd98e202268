//! The error types of RFC 9209's `Proxy-Status`, as one closed set: every layer that can fail a
//! request (DNS, a parent proxy, TLS, the budget) names its failure with one of these, and the
//! proxy writes it into the answer (`crate::proxy::answer::response`). Also the field read as RFC 8941
//! writes it (a List of members, each an item with `;` parameters) where a parent's or an
//! origin's `Proxy-Status` must be understood or cleaned ([`members`], [`without_ours`]).

use http::header::{HeaderName, HeaderValue};
use http::HeaderMap;

/// The name courtesy gives itself in `Proxy-Status` and `Via`.
pub(crate) const PROXY_NAME: &str = "courtesy";

/// `Proxy-Status`, as a header name made at compile time (looked up on every upstream answer).
pub(crate) const PROXY_STATUS: HeaderName = HeaderName::from_static("proxy-status");

/// The parts of `text` between the `separator` bytes that stand outside quoted strings (RFC 8941
/// sf-string: `"` opens and closes, `\` escapes inside), as written.
pub(crate) fn split_unquoted(text: &[u8], separator: u8) -> impl Iterator<Item = &[u8]> {
    let (mut quoted, mut escaped) = (false, false);
    text.split(move |&b| {
        match b {
            _ if escaped => escaped = false,
            b'\\' if quoted => escaped = true,
            b'"' => quoted = !quoted,
            _ => return b == separator && !quoted,
        }
        false
    })
}

/// The members of a structured-field List such as `Proxy-Status` (RFC 8941 3.1), each trimmed of
/// spaces, empty ones skipped; a comma inside a quoted `details` string splits nothing.
pub(crate) fn members(list: &[u8]) -> impl Iterator<Item = &[u8]> {
    split_unquoted(list, b',')
        .map(<[u8]>::trim_ascii)
        .filter(|m| !m.is_empty())
}

/// Whether a `Proxy-Status` member is named like courtesy's own: its item, a token or a quoted
/// string, starts with [`PROXY_NAME`] without regard to case (`courtesy`, `Courtesy-2`,
/// `"courtesy"`). What a client that trusts `Proxy-Status: courtesy` would take for courtesy's.
pub(crate) fn names_us(member: &[u8]) -> bool {
    let name = member.strip_prefix(b"\"").unwrap_or(member);
    name.get(..PROXY_NAME.len())
        .is_some_and(|n| n.eq_ignore_ascii_case(PROXY_NAME.as_bytes()))
}

/// Takes out of an upstream answer's `Proxy-Status` every member named like courtesy's own
/// ([`names_us`]), keeping the other members (and lines) as they were and dropping a line left
/// empty, so that `courtesy` in the field the client gets is courtesy's word alone. Returns how
/// many members went. Nothing is allocated unless a line mentions the name.
pub(crate) fn without_ours(headers: &mut HeaderMap) -> usize {
    if !headers.get_all(&PROXY_STATUS).iter().any(mentions_us) {
        return 0;
    }
    let lines: Vec<HeaderValue> = headers.get_all(&PROXY_STATUS).iter().cloned().collect();
    headers.remove(&PROXY_STATUS);
    let mut removed = 0;
    for line in &lines {
        let (kept, gone) = line_without_ours(line);
        removed += gone;
        if let Some(kept) = kept {
            headers.append(&PROXY_STATUS, kept);
        }
    }
    removed
}

/// One `Proxy-Status` line without its members named like courtesy's (`None` when none is left;
/// the line as it was when none went), and how many went. Also for a parent proxy's field, which
/// courtesy carries in front of its own member.
pub(crate) fn line_without_ours(line: &HeaderValue) -> (Option<HeaderValue>, usize) {
    if !mentions_us(line) {
        return (Some(line.clone()), 0);
    }
    let kept: Vec<&[u8]> = members(line.as_bytes()).filter(|m| !names_us(m)).collect();
    let gone = members(line.as_bytes()).count() - kept.len();
    let value = match gone {
        0 => Some(line.clone()),
        _ if kept.is_empty() => None,
        _ => HeaderValue::from_bytes(&kept.join(&b", "[..])).ok(),
    };
    (value, gone)
}

/// Whether a line has courtesy's name anywhere in it (without regard to case): a cheap look
/// before any member is read.
fn mentions_us(line: &HeaderValue) -> bool {
    line.as_bytes()
        .windows(PROXY_NAME.len())
        .any(|w| w.eq_ignore_ascii_case(PROXY_NAME.as_bytes()))
}

/// The RFC 9209 error types courtesy uses, as one closed set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ProxyError {
    /// The name did not resolve.
    DnsError,
    /// Resolving the name took longer than the connect timeout.
    DnsTimeout,
    /// The origin refused the TCP connection.
    ConnectionRefused,
    /// The TCP connection was not established within the connect timeout.
    ConnectionTimeout,
    /// The origin closed or reset the connection before a complete response.
    ConnectionTerminated,
    /// Any other failure to reach the origin (or a parent proxy that could not).
    DestinationUnavailable,
    /// A parent proxy's rules forbid the connection (SOCKS5 "not allowed by ruleset").
    DestinationIpProhibited,
    /// No route to the destination (SOCKS5 "network" or "host unreachable").
    DestinationIpUnroutable,
    /// courtesy's own configuration is wrong for the next hop: a parent proxy refused the
    /// credentials in `upstream_proxy`, or does not support what courtesy asked of it.
    ProxyConfigurationError,
    /// The origin sent no response headers within the response timeout.
    HttpResponseTimeout,
    /// The origin's response could not be parsed.
    HttpProtocolError,
    /// The client's request is not one courtesy can forward.
    HttpRequestError,
    /// courtesy refuses this request on purpose (access, ports).
    HttpRequestDenied,
    /// The request would come back to courtesy itself.
    ProxyLoopDetected,
    /// A pacing limit refused it: queue full, waited too long, shutting down.
    ConnectionLimitReached,
    /// A bug or resource failure inside courtesy.
    ProxyInternalError,
    /// The upstream's certificate did not verify against the configured roots.
    TlsCertificateError,
    /// The upstream sent a TLS alert.
    TlsAlertReceived,
    /// Any other upstream TLS failure.
    TlsProtocolError,
}

impl ProxyError {
    /// The token registered in RFC 9209's Proxy Error Types registry.
    pub(crate) fn token(self) -> &'static str {
        match self {
            ProxyError::DnsError => "dns_error",
            ProxyError::DnsTimeout => "dns_timeout",
            ProxyError::ConnectionRefused => "connection_refused",
            ProxyError::ConnectionTimeout => "connection_timeout",
            ProxyError::ConnectionTerminated => "connection_terminated",
            ProxyError::DestinationUnavailable => "destination_unavailable",
            ProxyError::DestinationIpProhibited => "destination_ip_prohibited",
            ProxyError::DestinationIpUnroutable => "destination_ip_unroutable",
            ProxyError::ProxyConfigurationError => "proxy_configuration_error",
            ProxyError::HttpResponseTimeout => "http_response_timeout",
            ProxyError::HttpProtocolError => "http_protocol_error",
            ProxyError::HttpRequestError => "http_request_error",
            ProxyError::HttpRequestDenied => "http_request_denied",
            ProxyError::ProxyLoopDetected => "proxy_loop_detected",
            ProxyError::ConnectionLimitReached => "connection_limit_reached",
            ProxyError::ProxyInternalError => "proxy_internal_error",
            ProxyError::TlsCertificateError => "tls_certificate_error",
            ProxyError::TlsAlertReceived => "tls_alert_received",
            ProxyError::TlsProtocolError => "tls_protocol_error",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(lines: &[&'static str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for line in lines {
            h.append(&PROXY_STATUS, HeaderValue::from_static(line));
        }
        h
    }

    fn lines(h: &HeaderMap) -> Vec<&str> {
        h.get_all(&PROXY_STATUS)
            .iter()
            .map(|v| v.to_str().unwrap_or("?"))
            .collect()
    }

    #[test]
    fn members_split_at_commas_outside_quoted_strings() {
        let list = br#"cdn; error=dns_error; details="a, b \"c, d\"", courtesy;x ,, "q,r"; y"#;
        let got: Vec<&[u8]> = members(list).collect();
        assert_eq!(
            got,
            [
                &br#"cdn; error=dns_error; details="a, b \"c, d\"""#[..],
                b"courtesy;x",
                br#""q,r"; y"#,
            ]
        );
        let params: Vec<&[u8]> = split_unquoted(br#"a; details="x;y"; error=e"#, b';').collect();
        assert_eq!(params.len(), 3);
    }

    #[test]
    fn members_named_like_courtesys_are_told_by_their_item_alone() {
        let told = [
            (&b"courtesy"[..], true),
            (b"courtesy; error=http_request_denied", true),
            (b"Courtesy", true),
            (b"COURTESY-2; received-status=200", true),
            (b"\"courtesy\"; error=x", true),
            (b"cdn; details=\"courtesy; error=x\"", false),
            (b"squid", false),
            (b"courte", false),
            (b"my-courtesy", false),
        ];
        let wrong: Vec<_> = told
            .iter()
            .filter(|(member, ours)| names_us(member) != *ours)
            .map(|(member, _)| String::from_utf8_lossy(member))
            .collect();
        assert!(wrong.is_empty(), "{wrong:?}");
    }

    #[test]
    fn an_origins_courtesy_members_go_and_the_rest_stay() {
        let mut h = field(&[
            r#"courtesy; error=http_request_denied; details="robots.txt, it says""#,
            r#"cdn; error=dns_timeout; details="courtesy, as in", Courtesy-X"#,
            "squid",
        ]);
        assert_eq!(without_ours(&mut h), 2);
        assert_eq!(
            lines(&h),
            [
                r#"cdn; error=dns_timeout; details="courtesy, as in""#,
                "squid"
            ]
        );
        let mut only = field(&["courtesy; error=x", "\"courtesy\""]);
        assert_eq!(without_ours(&mut only), 2);
        assert!(!only.contains_key(&PROXY_STATUS), "an emptied field goes");
        let mut clean = field(&[r#"cdn; details="courtesy, as in""#]);
        assert_eq!(without_ours(&mut clean), 0);
        assert_eq!(lines(&clean), [r#"cdn; details="courtesy, as in""#]);
        let mut none = HeaderMap::new();
        assert_eq!(without_ours(&mut none), 0);
        let parent = HeaderValue::from_static("squid; error=x, courtesy; error=y");
        let (kept, gone) = line_without_ours(&parent);
        assert_eq!(
            (kept, gone),
            (Some(HeaderValue::from_static("squid; error=x")), 1)
        );
    }
}
