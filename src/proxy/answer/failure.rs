//! Why a request got no upstream response, as one typed value: the status the client gets, the
//! RFC 9209 error type for `Proxy-Status`, and a sentence naming the thing and the value.
//!
//! Every failure on the request path (a bad request line, a refused dial, a TLS error, a timeout)
//! becomes a [`Failure`], and a failure becomes exactly one local response. This module maps errors;
//! it does not decide what the host's pacing makes of them (`crate::proxy::send::exchange` reports them).

use std::error::Error as StdError;
use std::io;

use http::header::HeaderValue;
use http::{Response, StatusCode};

use crate::proxy::answer::body::ProxyBody;
use crate::proxy::answer::response::{local, proxy_status_member, sf_string, ProxyError};
use crate::upstream::parent::{ParentError, ParentFault};
use crate::upstream::resolve::{DnsError, Forbidden};
use crate::wire::proxy_status;

/// A request that ends in a response courtesy makes itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Failure {
    /// The status the client gets.
    pub(crate) status: StatusCode,
    /// The `Proxy-Status` error type.
    pub(crate) kind: ProxyError,
    /// What went wrong, for `Proxy-Status` details, the body and the log.
    pub(crate) details: String,
    /// Set when a parent proxy failed: the target is not to blame (no feedback to its pacing),
    /// and `Proxy-Status` names the parent.
    pub(crate) parent: Option<Box<ParentFault>>,
    /// Set when an HTTP/2 origin refused or cut the stream, or broke the protocol: what the
    /// host's pacing and the resend make of it.
    pub(crate) h2: Option<H2Signal>,
}

/// What an HTTP/2 error from the origin says (RFC 9113).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum H2Signal {
    /// `REFUSED_STREAM`: the origin did not process the request (8.7: safe to send again), and
    /// says it is busy.
    RefusedStream,
    /// `GOAWAY` with an error code (`ENHANCE_YOUR_CALM`, ...), or a fresh connection closed
    /// before the request went out on it: the origin sheds work; a stream it did not reach was not
    /// processed (6.8).
    GoAway,
    /// `GOAWAY` with `NO_ERROR`: the origin retires the connection (nginx does after
    /// `keepalive_requests`), and a request that crossed it was not processed. Not overload.
    Retiring,
    /// Another HTTP/2 error: the host falls back to HTTP/1.1.
    ProtocolError,
}

impl H2Signal {
    /// Overload feedback, like a 503 without Retry-After.
    pub(crate) fn is_overload(self) -> bool {
        matches!(self, H2Signal::RefusedStream | H2Signal::GoAway)
    }

    /// The origin did not process the request: it may be sent once more.
    pub(crate) fn unprocessed(self) -> bool {
        matches!(
            self,
            H2Signal::RefusedStream | H2Signal::GoAway | H2Signal::Retiring
        )
    }
}

impl Failure {
    /// A failure with this status, error type and details.
    pub(crate) fn new(status: StatusCode, kind: ProxyError, details: impl Into<String>) -> Self {
        Failure {
            status,
            kind,
            details: details.into(),
            parent: None,
            h2: None,
        }
    }

    /// A parent proxy's failure.
    pub(crate) fn of_parent(err: &ParentError) -> Self {
        Failure {
            status: err.status,
            kind: err.error,
            details: err.details.clone(),
            parent: Some(Box::new(err.fault.clone())),
            h2: None,
        }
    }

    /// The client's request cannot be forwarded as it is (400).
    pub(crate) fn bad_request(details: impl Into<String>) -> Self {
        Failure::new(
            StatusCode::BAD_REQUEST,
            ProxyError::HttpRequestError,
            details,
        )
    }

    /// courtesy refuses the request on purpose (403).
    pub(crate) fn denied(details: impl Into<String>) -> Self {
        Failure::new(
            StatusCode::FORBIDDEN,
            ProxyError::HttpRequestDenied,
            details,
        )
    }

    /// The origin sent no response headers in time (504).
    pub(crate) fn response_timeout(details: impl Into<String>) -> Self {
        Failure::new(
            StatusCode::GATEWAY_TIMEOUT,
            ProxyError::HttpResponseTimeout,
            details,
        )
    }

    /// The local response for this failure.
    pub(crate) fn into_response(self) -> Response<ProxyBody> {
        let mut response = local(self.status, self.kind, &self.details, None);
        if let Some(parent) = &self.parent {
            // RFC 9209: members in order from the origin's side to the client's, so the
            // parent's own come first; courtesy's names the parent as its next hop.
            let mut params = format!("; next-hop={}", sf_string(&parent.next_hop));
            if let Some(status) = parent.received_status {
                params.push_str(&format!("; received-status={status}"));
            }
            let ours = proxy_status_member(self.kind, &params, &self.details);
            // The parent's members, but none named like courtesy's (an origin's answer through
            // the parent may carry one): `courtesy` in the field is this courtesy's word.
            let theirs = parent
                .parent_status
                .as_ref()
                .and_then(|v| proxy_status::line_without_ours(v).0);
            let value = match theirs.as_ref().and_then(|v| v.to_str().ok()) {
                Some(theirs) => format!("{theirs}, {ours}"),
                None => ours,
            };
            if let Ok(value) = HeaderValue::from_str(&value) {
                response.headers_mut().insert("proxy-status", value);
            }
        }
        response
    }

    /// Maps an error of the pooled upstream client by its innermost known cause.
    pub(crate) fn of_upstream(err: &hyper_util::client::legacy::Error) -> Self {
        let mut source: Option<&(dyn StdError + 'static)> = err.source();
        while let Some(e) = source {
            if let Some(parent) = e.downcast_ref::<ParentError>() {
                return Failure::of_parent(parent);
            }
            if let Some(dns) = e.downcast_ref::<DnsError>() {
                return Failure::of_dns(dns);
            }
            if let Some(full) = e.downcast_ref::<crate::upstream::pool::UpstreamsExhausted>() {
                return Failure::upstreams_exhausted(full);
            }
            if let Some(tls) = e.downcast_ref::<rustls::Error>() {
                return Failure::of_tls(tls);
            }
            if let Some(h2) = e.downcast_ref::<h2::Error>().filter(|h2| !h2.is_io()) {
                return Failure::of_h2(h2);
            }
            if let Some(io) = e.downcast_ref::<io::Error>() {
                return Failure::of_upstream_io(io);
            }
            let over_h2 = err.connect_info().is_some_and(|c| c.is_negotiated_h2());
            if let Some(failure) = e
                .downcast_ref::<hyper::Error>()
                .and_then(|h| Failure::of_hyper(h, over_h2))
            {
                return failure;
            }
            source = e.source();
        }
        let kind = if err.is_connect() {
            ProxyError::DestinationUnavailable
        } else {
            ProxyError::ConnectionTerminated
        };
        Failure::new(
            StatusCode::BAD_GATEWAY,
            kind,
            format!("upstream error: {err}"),
        )
    }

    /// An I/O error under the pooled client: TLS errors arrive wrapped in one or more of them.
    fn of_upstream_io(io: &io::Error) -> Self {
        let mut inner = io.get_ref();
        while let Some(i) = inner {
            if let Some(tls) = i.downcast_ref::<rustls::Error>() {
                return Failure::of_tls(tls);
            }
            inner = i.downcast_ref::<io::Error>().and_then(|io| io.get_ref());
        }
        Failure::of_io(io, "the origin")
    }

    /// A hyper error under the pooled client (`over_h2`: on a connection that negotiated
    /// HTTP/2), or `None` when it says nothing more than the error around it.
    fn of_hyper(h: &hyper::Error, over_h2: bool) -> Option<Self> {
        if h.is_parse() || h.is_parse_status() || h.is_parse_too_large() {
            return Some(Failure::new(
                StatusCode::BAD_GATEWAY,
                ProxyError::HttpProtocolError,
                format!("the origin sent an invalid response: {h}"),
            ));
        }
        if h.is_canceled() && over_h2 {
            // The HTTP/2 connection was closing before the request went out on it: the
            // origin's GOAWAY (or close) came first, and nothing was processed.
            return Some(Failure {
                h2: Some(H2Signal::GoAway),
                ..Failure::new(
                    StatusCode::BAD_GATEWAY,
                    ProxyError::ConnectionTerminated,
                    format!(
                        "the origin closed the HTTP/2 connection before the request went out: {h}"
                    ),
                )
            });
        }
        if h.is_incomplete_message() || h.is_closed() || h.is_canceled() {
            return Some(Failure::new(
                StatusCode::BAD_GATEWAY,
                ProxyError::ConnectionTerminated,
                format!("the origin closed the connection before a complete response: {h}"),
            ));
        }
        if h.is_user() {
            // The body courtesy was passing on failed: the client's body is malformed
            // (a bad chunk size, a short Content-Length) or the client went away.
            return Some(Failure::bad_request(format!(
                "the request body could not be read from the client: {h}"
            )));
        }
        h.is_body_write_aborted().then(|| {
            Failure::new(
                StatusCode::BAD_GATEWAY,
                ProxyError::HttpRequestError,
                format!("the request body could not be sent: {h}"),
            )
        })
    }

    /// An HTTP/2 error on the stream or the connection (not a socket error under it).
    pub(crate) fn of_h2(err: &h2::Error) -> Self {
        let reason = err.reason();
        let (signal, kind, what) = if reason == Some(h2::Reason::REFUSED_STREAM) {
            (
                H2Signal::RefusedStream,
                ProxyError::ConnectionTerminated,
                "the origin refused the stream (HTTP/2 REFUSED_STREAM)".to_string(),
            )
        } else if err.is_go_away() {
            let signal = if reason == Some(h2::Reason::NO_ERROR) {
                H2Signal::Retiring
            } else {
                H2Signal::GoAway
            };
            let reason = reason.map_or_else(|| "none".to_string(), |r| format!("{r:?}"));
            (
                signal,
                ProxyError::ConnectionTerminated,
                format!("the origin closed the HTTP/2 connection (GOAWAY, {reason})"),
            )
        } else {
            (
                H2Signal::ProtocolError,
                ProxyError::HttpProtocolError,
                format!("HTTP/2 error with the origin: {err}"),
            )
        };
        Failure {
            h2: Some(signal),
            ..Failure::new(StatusCode::BAD_GATEWAY, kind, what)
        }
    }

    /// An upstream TLS error.
    pub(crate) fn of_tls(err: &rustls::Error) -> Self {
        let kind = match err {
            rustls::Error::InvalidCertificate(_) => ProxyError::TlsCertificateError,
            rustls::Error::AlertReceived(_) => ProxyError::TlsAlertReceived,
            _ => ProxyError::TlsProtocolError,
        };
        Failure::new(
            StatusCode::BAD_GATEWAY,
            kind,
            format!("upstream TLS failed: {err}"),
        )
    }

    /// A name that did not resolve, or not in time.
    pub(crate) fn of_dns(err: &DnsError) -> Self {
        match err {
            DnsError::Timeout { .. } => Failure::new(
                StatusCode::GATEWAY_TIMEOUT,
                ProxyError::DnsTimeout,
                err.to_string(),
            ),
            DnsError::Failed { .. } => Failure::new(
                StatusCode::BAD_GATEWAY,
                ProxyError::DnsError,
                err.to_string(),
            ),
            DnsError::Forbidden { why, .. } => {
                let kind = match why {
                    Forbidden::Loop => ProxyError::ProxyLoopDetected,
                    Forbidden::Denied(_) => ProxyError::DestinationIpProhibited,
                };
                Failure::new(StatusCode::FORBIDDEN, kind, err.to_string())
            }
        }
    }

    /// Every `max_upstream_connections` slot is taken: a local limit, 503.
    pub(crate) fn upstreams_exhausted(full: &crate::upstream::pool::UpstreamsExhausted) -> Self {
        Failure::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ProxyError::ConnectionLimitReached,
            format!("{full} (a limit of courtesy's own, not the host's failure)"),
        )
    }

    /// A socket error while reaching `what`.
    pub(crate) fn of_io(err: &io::Error, what: &str) -> Self {
        if crate::front::gate::is_local_exhaustion(err) {
            return Failure::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ProxyError::ProxyInternalError,
                format!(
                    "courtesy ran out of a local resource reaching {what}: {err} (not the host's \
                     failure)"
                ),
            );
        }
        match err.kind() {
            io::ErrorKind::ConnectionRefused => Failure::new(
                StatusCode::BAD_GATEWAY,
                ProxyError::ConnectionRefused,
                format!("{what} refused the connection"),
            ),
            io::ErrorKind::TimedOut => Failure::new(
                StatusCode::GATEWAY_TIMEOUT,
                ProxyError::ConnectionTimeout,
                format!("no TCP connection to {what} within the connect timeout"),
            ),
            io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::UnexpectedEof => Failure::new(
                StatusCode::BAD_GATEWAY,
                ProxyError::ConnectionTerminated,
                format!("{what} reset the connection: {err}"),
            ),
            _ => Failure::new(
                StatusCode::BAD_GATEWAY,
                ProxyError::DestinationUnavailable,
                format!("cannot reach {what}: {err}"),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_errors_map_to_rfc_9209_types() {
        let refused = io::Error::from(io::ErrorKind::ConnectionRefused);
        assert_eq!(
            Failure::of_io(&refused, "x").kind,
            ProxyError::ConnectionRefused
        );
        let timed_out = io::Error::from(io::ErrorKind::TimedOut);
        let Failure { status, kind, .. } = Failure::of_io(&timed_out, "x");
        assert_eq!(
            (status, kind),
            (StatusCode::GATEWAY_TIMEOUT, ProxyError::ConnectionTimeout)
        );
        let reset = io::Error::from(io::ErrorKind::ConnectionReset);
        assert_eq!(
            Failure::of_io(&reset, "x").kind,
            ProxyError::ConnectionTerminated
        );
    }

    #[test]
    fn a_parents_field_goes_in_front_without_members_named_like_courtesys() {
        let failure = Failure {
            parent: Some(Box::new(ParentFault {
                next_hop: "proxy.corp:3128".into(),
                kind: crate::upstream::parent::ParentErrorKind::Refused,
                received_status: Some(403),
                parent_status: Some(HeaderValue::from_static(
                    "courtesy; error=http_request_denied, squid; error=destination_ip_prohibited",
                )),
            })),
            ..Failure::new(
                StatusCode::BAD_GATEWAY,
                ProxyError::DestinationIpProhibited,
                "refused",
            )
        };
        let response = failure.into_response();
        let field = response.headers()["proxy-status"].to_str().unwrap_or("");
        assert!(
            field.starts_with(
                "squid; error=destination_ip_prohibited, courtesy; \
                 error=destination_ip_prohibited; next-hop=\"proxy.corp:3128\""
            ),
            "{field}"
        );
        assert_eq!(field.matches("courtesy").count(), 1, "{field}");
    }

    #[test]
    fn h2_errors_say_refused_goaway_or_protocol_error() {
        let refused = Failure::of_h2(&h2::Error::from(h2::Reason::REFUSED_STREAM));
        assert_eq!(refused.h2, Some(H2Signal::RefusedStream));
        assert!(refused.h2.is_some_and(H2Signal::is_overload));
        let broken = Failure::of_h2(&h2::Error::from(h2::Reason::PROTOCOL_ERROR));
        assert_eq!(
            (broken.h2, broken.kind),
            (Some(H2Signal::ProtocolError), ProxyError::HttpProtocolError)
        );
        assert!(!H2Signal::ProtocolError.is_overload());
        assert!(!H2Signal::ProtocolError.unprocessed());
        assert!(!H2Signal::Retiring.is_overload() && H2Signal::Retiring.unprocessed());
    }
}
