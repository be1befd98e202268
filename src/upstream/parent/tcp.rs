//! A TCP connection to a name or an address within the connect timeout, trying each address the
//! name resolves to in turn: what a blind tunnel dials straight to its target, and what every
//! connection to a parent proxy starts with. It reports what failed; its callers say whose fault
//! that is.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tokio::net::TcpStream;

use crate::upstream::resolve::{DnsError, Resolver};

/// Why no TCP connection was made.
#[derive(Debug)]
pub(crate) enum TcpFault {
    /// The name did not resolve (or resolved to nothing).
    Dns(DnsError),
    /// The last address tried failed with this error.
    Io(std::io::Error),
    /// The last address tried did not answer within the timeout.
    Timeout(SocketAddr),
}

/// A TCP stream to `host:port` (`host` a name or an IP address without brackets), with Nagle off;
/// each address gets `timeout`. For a parent proxy (an address from the config, never judged by
/// `deny_destinations`); a target is [`connect_target`].
pub(crate) async fn connect(
    resolver: &Resolver,
    host: &str,
    port: u16,
    timeout: Duration,
) -> Result<TcpStream, TcpFault> {
    let addrs: Vec<SocketAddr> = match host.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => resolver
            .lookup(host)
            .await
            .map_err(TcpFault::Dns)?
            .into_iter()
            .map(|a| SocketAddr::new(a.ip(), port))
            .collect(),
    };
    connect_any(host, addrs, timeout).await
}

/// Like [`connect`], to a target (a blind tunnel's): every address is judged first
/// (`Resolver::lookup_target`), so a refused one is never dialed.
pub(crate) async fn connect_target(
    resolver: &Resolver,
    host: &str,
    port: u16,
    timeout: Duration,
) -> Result<TcpStream, TcpFault> {
    let addrs = resolver
        .lookup_target(host, port)
        .await
        .map_err(TcpFault::Dns)?;
    connect_any(host, addrs, timeout).await
}

/// The first of `addrs` that connects within `timeout`.
async fn connect_any(
    host: &str,
    addrs: Vec<SocketAddr>,
    timeout: Duration,
) -> Result<TcpStream, TcpFault> {
    let mut last = TcpFault::Dns(DnsError::Failed {
        name: host.to_string(),
        reason: "no addresses".into(),
    });
    for addr in addrs {
        match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Ok(Err(e)) => last = TcpFault::Io(e),
            Err(_) => last = TcpFault::Timeout(addr),
        }
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::resolve::{Destinations, Forbidden};

    #[tokio::test]
    async fn a_tunnel_never_dials_a_denied_address_and_a_parent_is_not_judged() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let resolver = Resolver::new(Duration::from_secs(5), std::sync::Arc::default()).refusing(
            Destinations::new(vec![], vec!["127.0.0.0/8".parse().unwrap()], vec![]),
        );
        for host in ["127.0.0.1", "2130706433", "localhost"] {
            match connect_target(&resolver, host, port, Duration::from_secs(1)).await {
                Err(TcpFault::Dns(DnsError::Forbidden {
                    why: Forbidden::Denied(_),
                    ..
                })) => {}
                other => panic!("{host}: {other:?}"),
            }
        }
        let nothing = tokio::time::timeout(Duration::from_millis(100), listener.accept()).await;
        assert!(nothing.is_err(), "nothing dialed");
        // A parent proxy's address is the operator's own choice: never judged.
        assert!(
            connect(&resolver, "127.0.0.1", port, Duration::from_secs(1))
                .await
                .is_ok()
        );
    }
}
