//! Leaving through a parent proxy (`upstream_proxy`): a TCP connection to the parent, then the
//! parent's own handshake (HTTP CONNECT, or SOCKS5 with its optional user/password), so that what
//! comes out is a byte stream to the target; and every way that can fail, as a [`ParentError`]
//! that names the parent and never its credentials.
//!
//! | file | owns |
//! |---|---|
//! | `mod.rs` | [`open`]: a stream to a target through a parent; [`ParentError`] and its kinds |
//! | `tcp.rs` | a TCP connection to a name or address within the connect timeout |
//! | `http_connect.rs` | the CONNECT request to an HTTP parent and its answer |
//! | `socks5.rs` | the SOCKS5 handshake (RFC 1928, RFC 1929) and its reply codes |
//! | `connector.rs` | the connector of the pooled client for one parent |
//! | `answer.rs` | telling a parent's own error answer from the target's (absolute-form http) |
//!
//! A parent's failure is not the target's feedback: this module only reports what happened; the
//! proxy decides (in `exchange.rs`) that it moves no host's pacing. The target's pacing, blocks
//! and interception are the same with or without a parent.

mod answer;
mod connector;
mod http_connect;
mod socks5;
pub(crate) mod tcp;

use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

use http::header::HeaderValue;
use http::StatusCode;
use tokio::net::TcpStream;

use crate::config::{ParentScheme, UpstreamProxy};
use crate::upstream::resolve::{DnsError, Resolver};
use crate::wire::proxy_status::ProxyError;

pub(crate) use answer::own_answer;

/// A parent's answers as the property tests of untrusted input read them.
#[cfg(test)]
pub(crate) mod testing {
    /// What a parent's answer `head` to CONNECT means, as an `Ok` or the failure's details.
    pub(crate) fn connect_answer(head: &[u8]) -> Result<(), String> {
        let parent = crate::config::UpstreamProxy::parse("http://u:pw@p.test:3128")
            .map_err(|e| e.to_string())?;
        super::http_connect::judge(&parent, "a.test:443", head).map_err(|e| e.details)
    }
}
pub(crate) use connector::ParentConnector;

/// What went wrong with a parent, as the metric's `kind` label says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum ParentErrorKind {
    /// No TCP connection to the parent (refused, unreachable, its name did not resolve).
    Unreachable,
    /// The parent did not answer within the connect timeout.
    Timeout,
    /// The parent did not accept courtesy's credentials (407, SOCKS authentication failure).
    AuthFailed,
    /// The parent answered, and would not or could not reach the target for courtesy.
    Refused,
    /// The parent's answer was not one of its protocol, or it hung up in the middle.
    ProtocolError,
}

impl ParentErrorKind {
    /// The `kind` label of `courtesy_upstream_proxy_errors_total`.
    pub(crate) fn label(self) -> &'static str {
        match self {
            ParentErrorKind::Unreachable => "unreachable",
            ParentErrorKind::Timeout => "timeout",
            ParentErrorKind::AuthFailed => "auth_failed",
            ParentErrorKind::Refused => "refused",
            ParentErrorKind::ProtocolError => "protocol_error",
        }
    }
}

/// What a failure owes to the parent: for `Proxy-Status` (`next-hop`, `received-status`, and the
/// parent's own members, kept in front of courtesy's) and for the metric.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ParentFault {
    /// The parent as `host:port`.
    pub(crate) next_hop: String,
    /// What went wrong, for the metric.
    pub(crate) kind: ParentErrorKind,
    /// The status the parent answered, when it answered one.
    pub(crate) received_status: Option<u16>,
    /// The parent's own `Proxy-Status` value, when it sent one (at most [`MAX_PARENT_STATUS`]).
    pub(crate) parent_status: Option<HeaderValue>,
}

/// A parent's `Proxy-Status` longer than this is not carried on (it is the parent's to keep short).
pub(crate) const MAX_PARENT_STATUS: usize = 2048;

/// A parent proxy failed courtesy: the status and RFC 9209 type the client gets, a sentence that
/// names the parent (never its credentials), and what the fault owes to the parent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ParentError {
    /// The status the client gets (502, or 504 for a timeout).
    pub(crate) status: StatusCode,
    /// The `Proxy-Status` error type of courtesy's own member.
    pub(crate) error: ProxyError,
    /// What went wrong, naming the parent as `parent proxy host:port`.
    pub(crate) details: String,
    /// The parent's part.
    pub(crate) fault: ParentFault,
}

impl ParentError {
    /// A failure of `parent` of this kind, type and status.
    fn new(
        parent: &UpstreamProxy,
        kind: ParentErrorKind,
        error: ProxyError,
        details: impl Into<String>,
    ) -> Self {
        let status = match error {
            ProxyError::ConnectionTimeout | ProxyError::DnsTimeout => StatusCode::GATEWAY_TIMEOUT,
            _ => StatusCode::BAD_GATEWAY,
        };
        ParentError {
            status,
            error,
            details: details.into(),
            fault: ParentFault {
                next_hop: parent.endpoint(),
                kind,
                received_status: None,
                parent_status: None,
            },
        }
    }

    /// The parent answered with `status` (and perhaps its own `Proxy-Status`).
    fn answered(mut self, status: u16, parent_status: Option<&HeaderValue>) -> Self {
        self.fault.received_status = Some(status);
        self.fault.parent_status = parent_status
            .filter(|v| v.len() <= MAX_PARENT_STATUS)
            .cloned();
        if status == 504 {
            self.status = StatusCode::GATEWAY_TIMEOUT;
        }
        self
    }

    /// No tunnel through `parent` within `timeout` (TCP and handshake together).
    fn timed_out(parent: &UpstreamProxy, timeout: Duration) -> Self {
        ParentError::new(
            parent,
            ParentErrorKind::Timeout,
            ProxyError::ConnectionTimeout,
            format!(
                "parent proxy {} did not open a connection within {}s",
                parent.endpoint(),
                timeout.as_secs_f64()
            ),
        )
    }

    /// The parent's name did not resolve.
    fn of_dns(parent: &UpstreamProxy, err: &DnsError) -> Self {
        let error = match err {
            DnsError::Timeout { .. } => ProxyError::DnsTimeout,
            DnsError::Failed { .. } => ProxyError::DnsError,
            DnsError::Forbidden { .. } => ProxyError::DestinationIpProhibited,
        };
        ParentError::new(
            parent,
            ParentErrorKind::Unreachable,
            error,
            format!("parent proxy {}: {err}", parent.endpoint()),
        )
    }

    /// A socket error while speaking to the parent.
    fn of_io(parent: &UpstreamProxy, err: &std::io::Error) -> Self {
        use std::io::ErrorKind as K;
        let name = parent.endpoint();
        match err.kind() {
            K::ConnectionRefused => ParentError::new(
                parent,
                ParentErrorKind::Unreachable,
                ProxyError::ConnectionRefused,
                format!("parent proxy {name} refused the connection"),
            ),
            K::TimedOut => ParentError::timed_out(parent, Duration::ZERO).with_details(format!(
                "no TCP connection to parent proxy {name} within the connect timeout"
            )),
            K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe | K::UnexpectedEof => {
                ParentError::new(
                    parent,
                    ParentErrorKind::ProtocolError,
                    ProxyError::ConnectionTerminated,
                    format!("parent proxy {name} closed the connection during its handshake"),
                )
            }
            _ => ParentError::new(
                parent,
                ParentErrorKind::Unreachable,
                ProxyError::DestinationUnavailable,
                format!("cannot reach parent proxy {name}: {err}"),
            ),
        }
    }

    /// The parent declined with HTTP `status` (not a 407): the type of courtesy's member.
    fn declined(status: u16) -> ProxyError {
        match status {
            504 => ProxyError::ConnectionTimeout,
            403 => ProxyError::DestinationIpProhibited,
            _ => ProxyError::DestinationUnavailable,
        }
    }

    fn with_details(mut self, details: String) -> Self {
        self.details = details;
        self
    }
}

impl fmt::Display for ParentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.details)
    }
}

impl StdError for ParentError {}

/// Why no stream to the target was opened through a parent.
#[derive(Debug)]
pub(crate) enum OpenError {
    /// The parent failed (not the target's feedback).
    Parent(ParentError),
    /// The target's name did not resolve here (`socks5://` resolves on courtesy's side): the
    /// target's failure, as on a direct connection.
    TargetDns(DnsError),
}

impl From<ParentError> for OpenError {
    fn from(err: ParentError) -> Self {
        OpenError::Parent(err)
    }
}

impl From<OpenError> for Box<dyn StdError + Send + Sync> {
    fn from(err: OpenError) -> Self {
        match err {
            OpenError::Parent(e) => Box::new(e),
            OpenError::TargetDns(e) => Box::new(e),
        }
    }
}

/// A TCP stream to the parent, within `timeout`.
async fn connect_parent(
    parent: &UpstreamProxy,
    resolver: &Resolver,
    timeout: Duration,
) -> Result<TcpStream, ParentError> {
    tcp::connect(resolver, &parent.host, parent.port, timeout)
        .await
        .map_err(|fault| match fault {
            tcp::TcpFault::Dns(e) => ParentError::of_dns(parent, &e),
            tcp::TcpFault::Io(e) => ParentError::of_io(parent, &e),
            tcp::TcpFault::Timeout(_) => ParentError::timed_out(parent, timeout),
        })
}

/// A byte stream to `host:port` through `parent`: a TCP connection to it, then its handshake
/// (CONNECT, or SOCKS5), all within `timeout`. `host` is lowercase, without brackets.
pub(crate) async fn open(
    parent: &UpstreamProxy,
    host: &str,
    port: u16,
    resolver: &Resolver,
    timeout: Duration,
) -> Result<TcpStream, OpenError> {
    let opening = async {
        // socks5:// resolves here, before the parent is dialed: a name that does not resolve
        // is the target's failure.
        let address = match parent.scheme {
            ParentScheme::Socks5 => Some(socks5::Address::resolved(resolver, host, port).await?),
            ParentScheme::Socks5h => Some(socks5::Address::named(host, port)),
            ParentScheme::Http => None,
        };
        let mut stream = connect_parent(parent, resolver, timeout).await?;
        match address {
            Some(address) => socks5::handshake(&mut stream, parent, &address).await?,
            None => http_connect::handshake(&mut stream, parent, host, port).await?,
        }
        Ok::<_, OpenError>(stream)
    };
    match tokio::time::timeout(timeout, opening).await {
        Ok(result) => result,
        Err(_) => Err(OpenError::Parent(ParentError::timed_out(parent, timeout))),
    }
}

/// `Proxy-Authorization: Basic …` for `parent`'s credentials, marked sensitive (never logged by
/// hyper); `None` without credentials.
pub(crate) fn basic_auth(parent: &UpstreamProxy) -> Option<HeaderValue> {
    use base64::Engine as _;
    let c = parent.credentials.as_ref()?;
    let token =
        base64::engine::general_purpose::STANDARD.encode(format!("{}:{}", c.user, c.password));
    let mut value = HeaderValue::from_str(&format!("Basic {token}")).ok()?;
    value.set_sensitive(true);
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_auth_is_the_rfc_7617_token_and_sensitive() {
        let parent = UpstreamProxy::parse("http://Aladdin:open%20sesame@p.test:3128").unwrap();
        let value = basic_auth(&parent).unwrap();
        assert_eq!(value, "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==");
        assert!(value.is_sensitive());
        assert!(basic_auth(&UpstreamProxy::parse("http://p.test:3128").unwrap()).is_none());
    }

    #[test]
    fn socket_errors_name_the_parent_and_map_to_rfc_9209_types() {
        let parent = UpstreamProxy::parse("http://u:pw@p.test:3128").unwrap();
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let e = ParentError::of_io(&parent, &refused);
        assert_eq!(
            (e.status, e.error, e.fault.kind),
            (
                StatusCode::BAD_GATEWAY,
                ProxyError::ConnectionRefused,
                ParentErrorKind::Unreachable
            )
        );
        assert!(e.details.contains("parent proxy p.test:3128"), "{e}");
        assert!(!e.details.contains("pw"), "{e}");
        let e = ParentError::timed_out(&parent, Duration::from_secs(2));
        assert_eq!(
            (e.status, e.fault.kind),
            (StatusCode::GATEWAY_TIMEOUT, ParentErrorKind::Timeout)
        );
    }
}
