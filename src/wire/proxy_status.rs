//! The error types of RFC 9209's `Proxy-Status`, as one closed set: every layer that can fail a
//! request (DNS, a parent proxy, TLS, the budget) names its failure with one of these, and the
//! proxy writes it into the answer (`crate::proxy::response`).

/// The name courtesy gives itself in `Proxy-Status` and `Via`.
pub(crate) const PROXY_NAME: &str = "courtesy";

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
