//! The SOCKS5 handshake (RFC 1928) with its user/password sub-negotiation (RFC 1929), for
//! `socks5://` (courtesy resolves the target's name and sends its address, as curl does) and
//! `socks5h://` (the name is sent and the parent resolves it), and the RFC 9209 type each reply
//! code becomes.

use std::net::{IpAddr, SocketAddr};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::{OpenError, ParentError, ParentErrorKind};
use crate::config::UpstreamProxy;
use crate::upstream::resolve::Resolver;
use crate::wire::proxy_status::ProxyError;

const VERSION: u8 = 5;
const NO_AUTH: u8 = 0x00;
const USER_PASSWORD: u8 = 0x02;
const NO_ACCEPTABLE_METHOD: u8 = 0xff;
const CONNECT: u8 = 1;

/// Where the parent is asked to connect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Address {
    /// An address (an IP target, or a name courtesy resolved).
    Ip(SocketAddr),
    /// A name for the parent to resolve.
    Name(String, u16),
}

impl Address {
    /// `host:port` with a name resolved here (`socks5://`); a name that does not resolve is the
    /// target's failure.
    pub(super) async fn resolved(
        resolver: &Resolver,
        host: &str,
        port: u16,
    ) -> Result<Address, OpenError> {
        // Judged like a direct connection's (`deny_destinations`, courtesy's own listeners).
        let addrs = resolver
            .lookup_target(host, port)
            .await
            .map_err(OpenError::TargetDns)?;
        // `lookup_target` answers at least one address or an error.
        match addrs.first() {
            Some(a) => Ok(Address::Ip(*a)),
            None => Err(OpenError::TargetDns(
                crate::upstream::resolve::DnsError::Failed {
                    name: host.to_string(),
                    reason: "no addresses".into(),
                },
            )),
        }
    }

    /// `host:port` with a name left for the parent (`socks5h://`).
    pub(super) fn named(host: &str, port: u16) -> Address {
        match host.parse::<IpAddr>() {
            Ok(ip) => Address::Ip(SocketAddr::new(ip, port)),
            Err(_) => Address::Name(host.to_string(), port),
        }
    }

    /// The address as a CONNECT request carries it (ATYP, address, port).
    fn encode(&self, out: &mut Vec<u8>) -> Result<(), String> {
        let port = match self {
            Address::Ip(SocketAddr::V4(a)) => {
                out.push(1);
                out.extend_from_slice(&a.ip().octets());
                a.port()
            }
            Address::Ip(SocketAddr::V6(a)) => {
                out.push(4);
                out.extend_from_slice(&a.ip().octets());
                a.port()
            }
            Address::Name(name, port) => {
                let len = u8::try_from(name.len())
                    .map_err(|_| format!("the name {name:?} is longer than SOCKS5 allows"))?;
                out.push(3);
                out.push(len);
                out.extend_from_slice(name.as_bytes());
                *port
            }
        };
        out.extend_from_slice(&port.to_be_bytes());
        Ok(())
    }
}

/// Opens a connection to `address` through `parent` on `stream`; `Ok` once the parent replied
/// "succeeded".
pub(super) async fn handshake<S>(
    stream: &mut S,
    parent: &UpstreamProxy,
    address: &Address,
) -> Result<(), ParentError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    negotiate_method(stream, parent).await?;
    connect(stream, parent, address).await
}

/// The greeting and the method the parent chose: none, or a user name and password (RFC 1929)
/// when `parent` has credentials.
async fn negotiate_method<S>(stream: &mut S, parent: &UpstreamProxy) -> Result<(), ParentError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let name = parent.endpoint();
    let io = |e: std::io::Error| ParentError::of_io(parent, &e);
    let credentials = parent.credentials.as_ref();
    let greeting: &[u8] = match credentials {
        Some(_) => &[VERSION, 2, NO_AUTH, USER_PASSWORD],
        None => &[VERSION, 1, NO_AUTH],
    };
    stream.write_all(greeting).await.map_err(io)?;
    let mut choice = [0u8; 2];
    stream.read_exact(&mut choice).await.map_err(io)?;
    match (choice, credentials) {
        ([VERSION, NO_AUTH], _) => Ok(()),
        ([VERSION, USER_PASSWORD], Some(c)) => {
            // RFC 1929; the lengths were checked when the config was read.
            let mut auth = vec![1, c.user.len() as u8];
            auth.extend_from_slice(c.user.as_bytes());
            auth.push(c.password.len() as u8);
            auth.extend_from_slice(c.password.as_bytes());
            stream.write_all(&auth).await.map_err(io)?;
            let mut status = [0u8; 2];
            stream.read_exact(&mut status).await.map_err(io)?;
            if status[1] != 0 {
                return Err(auth_failed(
                    parent,
                    format!(
                        "parent proxy {name} did not accept the SOCKS5 user name and password \
                         in upstream_proxy"
                    ),
                ));
            }
            Ok(())
        }
        ([VERSION, NO_ACCEPTABLE_METHOD], _) => {
            let offered = match credentials {
                Some(_) => "neither no authentication nor a user name and password",
                None => {
                    "no authentication (it may want a user name and password in upstream_proxy)"
                }
            };
            Err(auth_failed(
                parent,
                format!("parent proxy {name} accepts {offered}"),
            ))
        }
        _ => Err(garbled(parent, "method choice")),
    }
}

/// The CONNECT request for `address` and the parent's reply, its bound address read and let go.
async fn connect<S>(
    stream: &mut S,
    parent: &UpstreamProxy,
    address: &Address,
) -> Result<(), ParentError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let io = |e: std::io::Error| ParentError::of_io(parent, &e);
    let mut request = vec![VERSION, CONNECT, 0];
    address
        .encode(&mut request)
        .map_err(|why| refused(parent, ProxyError::DestinationUnavailable, why))?;
    stream.write_all(&request).await.map_err(io)?;
    let mut reply = [0u8; 4];
    stream.read_exact(&mut reply).await.map_err(io)?;
    if reply[0] != VERSION {
        return Err(garbled(parent, "reply"));
    }
    if reply[1] != 0 {
        return Err(reply_error(parent, reply[1], address));
    }
    // The bound address, which courtesy has no use for.
    let rest = match reply[3] {
        1 => 4 + 2,
        4 => 16 + 2,
        3 => usize::from(stream.read_u8().await.map_err(io)?) + 2,
        _ => return Err(garbled(parent, "bound address")),
    };
    let mut bound = [0u8; 257];
    stream.read_exact(&mut bound[..rest]).await.map_err(io)?;
    Ok(())
}

/// A parent that answered something that is not SOCKS5 (`what`: the part that was not).
fn garbled(parent: &UpstreamProxy, what: &str) -> ParentError {
    ParentError::new(
        parent,
        ParentErrorKind::ProtocolError,
        ProxyError::DestinationUnavailable,
        format!(
            "parent proxy {} sent an invalid SOCKS5 {what}",
            parent.endpoint()
        ),
    )
}

fn auth_failed(parent: &UpstreamProxy, details: String) -> ParentError {
    ParentError::new(
        parent,
        ParentErrorKind::AuthFailed,
        ProxyError::ProxyConfigurationError,
        details,
    )
}

fn refused(parent: &UpstreamProxy, error: ProxyError, details: String) -> ParentError {
    ParentError::new(parent, ParentErrorKind::Refused, error, details)
}

/// A SOCKS5 reply code other than "succeeded" (RFC 1928 section 6), as an RFC 9209 type.
fn reply_error(parent: &UpstreamProxy, code: u8, address: &Address) -> ParentError {
    let (error, says) = match code {
        1 => (
            ProxyError::DestinationUnavailable,
            "general SOCKS server failure",
        ),
        2 => (
            ProxyError::DestinationIpProhibited,
            "connection not allowed by ruleset",
        ),
        3 => (ProxyError::DestinationIpUnroutable, "network unreachable"),
        4 => (ProxyError::DestinationIpUnroutable, "host unreachable"),
        5 => (ProxyError::ConnectionRefused, "connection refused"),
        6 => (ProxyError::ConnectionTimeout, "TTL expired"),
        7 => (ProxyError::ProxyConfigurationError, "command not supported"),
        8 => (
            ProxyError::ProxyConfigurationError,
            "address type not supported",
        ),
        _ => (
            ProxyError::DestinationUnavailable,
            "an unassigned reply code",
        ),
    };
    let target = match address {
        Address::Ip(a) => a.to_string(),
        Address::Name(name, port) => format!("{name}:{port}"),
    };
    refused(
        parent,
        error,
        format!(
            "parent proxy {} answered SOCKS5 reply {code} ({says}) for {target}",
            parent.endpoint()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::StatusCode;

    fn parent(url: &str) -> UpstreamProxy {
        UpstreamProxy::parse(url).unwrap()
    }

    #[test]
    fn reply_codes_map_to_rfc_9209_types() {
        let p = parent("socks5h://p.test");
        let to = Address::named("a.test", 443);
        let cases = [
            (1, ProxyError::DestinationUnavailable),
            (2, ProxyError::DestinationIpProhibited),
            (3, ProxyError::DestinationIpUnroutable),
            (4, ProxyError::DestinationIpUnroutable),
            (5, ProxyError::ConnectionRefused),
            (6, ProxyError::ConnectionTimeout),
            (7, ProxyError::ProxyConfigurationError),
            (8, ProxyError::ProxyConfigurationError),
            (99, ProxyError::DestinationUnavailable),
        ];
        for (code, error) in cases {
            let e = reply_error(&p, code, &to);
            assert_eq!((e.error, e.fault.kind), (error, ParentErrorKind::Refused));
            assert!(e.details.contains("p.test:1080") && e.details.contains("a.test:443"));
        }
        assert_eq!(reply_error(&p, 6, &to).status, StatusCode::GATEWAY_TIMEOUT);
    }

    /// Plays the parent's side of a handshake: expects `expect` in order, answers `answers`.
    async fn parent_side(
        mut theirs: tokio::io::DuplexStream,
        expect: Vec<Vec<u8>>,
        answers: Vec<Vec<u8>>,
    ) {
        for (want, answer) in expect.into_iter().zip(answers) {
            let mut got = vec![0u8; want.len()];
            theirs.read_exact(&mut got).await.unwrap();
            assert_eq!(got, want);
            theirs.write_all(&answer).await.unwrap();
        }
    }

    #[tokio::test]
    async fn user_password_and_a_name_for_the_parent_to_resolve() {
        let p = parent("socks5h://ann:pw@p.test:1080");
        let (mut ours, theirs) = tokio::io::duplex(1024);
        let mut connect = vec![5, 1, 0, 3, 6];
        connect.extend_from_slice(b"a.test");
        connect.extend_from_slice(&443u16.to_be_bytes());
        let script = tokio::spawn(parent_side(
            theirs,
            vec![
                vec![5, 2, 0, 2],
                [&[1u8, 3][..], b"ann", &[2], b"pw"].concat(),
                connect,
            ],
            vec![
                vec![5, 2],
                vec![1, 0],
                vec![5, 0, 0, 1, 127, 0, 0, 1, 0, 80],
            ],
        ));
        handshake(&mut ours, &p, &Address::named("a.test", 443))
            .await
            .unwrap();
        script.await.unwrap();
    }

    #[tokio::test]
    async fn a_refused_password_is_an_auth_failure() {
        let p = parent("socks5://ann:pw@p.test:1080");
        let (mut ours, theirs) = tokio::io::duplex(1024);
        let script = tokio::spawn(parent_side(
            theirs,
            vec![
                vec![5, 2, 0, 2],
                [&[1u8, 3][..], b"ann", &[2], b"pw"].concat(),
            ],
            vec![vec![5, 2], vec![1, 1]],
        ));
        let to = Address::Ip("127.0.0.1:80".parse().unwrap());
        let e = handshake(&mut ours, &p, &to).await.unwrap_err();
        assert_eq!(e.fault.kind, ParentErrorKind::AuthFailed);
        assert!(!e.details.contains("pw@"), "{e}");
        script.await.unwrap();
    }
}
