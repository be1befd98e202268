//! Name resolution for upstream connections, with a timeout and an error type of our own.
//!
//! hyper-util's connector reports a DNS failure only as a generic "dns error"; resolving through this
//! module lets the proxy tell `dns_error` and `dns_timeout` apart from connection failures when it
//! writes `Proxy-Status`. A name is answered, in order, from `[proxy] hosts_file`, from the address
//! its budget key was made from (`key = "ip"`, held for its TTL), or by the operating system's
//! resolver (which does its own caching).
//!
//! | file | owns |
//! |---|---|
//! | `mod.rs` | [`Resolver`]: the connector's resolver, [`DnsError`] |
//! | `hosts.rs` | [`StaticHosts`]: the `hosts_file` |
//! | `pins.rs` | the addresses keys were made from, with their TTLs |
//! | `literal.rs` | host spellings that are addresses (`127.1`, `0x7f000001`, …) |
//! | `guard.rs` | [`Destinations`]: the addresses courtesy never dials (its own listeners, `deny_destinations`) |
//!
//! Every address a target resolves to is judged by [`Destinations`] before it is dialed
//! ([`Resolver::lookup_target`], [`GuardedConnector`]), whatever the name and however often it
//! resolves differently: a check of the spelling alone would let `127.1` or a rebinding name
//! through.

mod guard;
mod pins;

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::client::legacy::connect::dns::Name;
use hyper_util::client::legacy::connect::HttpConnector;

pub(crate) use guard::Destinations;

pub(crate) use guard::Forbidden;
use pins::Pins;

use crate::wire::hosts_file::StaticHosts;
use crate::wire::scheme::Scheme;

/// The TCP connector under [`GuardedConnector`]: hyper-util's, handed addresses only.
pub(crate) type Connector = HttpConnector<Resolver>;

/// Why a name did not resolve.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DnsError {
    /// The resolver answered with an error or no address.
    #[error("cannot resolve {name}: {reason}")]
    Failed {
        /// The name looked up.
        name: String,
        /// What the resolver said.
        reason: String,
    },
    /// The resolver did not answer in time.
    #[error("resolving {name} took longer than {seconds}s")]
    Timeout {
        /// The name looked up.
        name: String,
        /// The timeout.
        seconds: f64,
    },
    /// The name resolves to an address courtesy never dials (see [`Destinations`]).
    #[error("{name} resolves to {addr}, {}", forbidden_text(.why))]
    Forbidden {
        /// The name (or address) asked for.
        name: String,
        /// The address that is refused.
        addr: SocketAddr,
        /// Why.
        why: Forbidden,
    },
}

/// How a [`Forbidden`] reads in messages.
fn forbidden_text(why: &Forbidden) -> String {
    match why {
        Forbidden::Loop => "a listener of courtesy itself".to_string(),
        Forbidden::Denied(net) => format!("in [proxy] deny_destinations ({net})"),
    }
}

/// Resolves names from the `hosts_file`, the held addresses of `key = "ip"` names, or the system
/// resolver, bounded by a timeout. Clones share what they hold.
#[derive(Debug, Clone)]
pub(crate) struct Resolver {
    timeout: Duration,
    statics: Arc<StaticHosts>,
    pins: Arc<Pins>,
    destinations: Arc<Destinations>,
}

impl Resolver {
    /// A resolver that gives up after `timeout`, answering the names in `statics` itself. It
    /// refuses no destination until [`Resolver::refusing`] says which.
    pub(crate) fn new(timeout: Duration, statics: Arc<StaticHosts>) -> Self {
        Resolver {
            timeout,
            statics,
            pins: Arc::new(Pins::default()),
            destinations: Arc::default(),
        }
    }

    /// This resolver, refusing `destinations` in [`Resolver::lookup_target`] (set once at
    /// start, before it is cloned).
    pub(crate) fn refusing(mut self, destinations: Destinations) -> Self {
        self.destinations = Arc::new(destinations);
        self
    }

    /// The addresses (with `port`) a connection to the target `host:port` may go to: `host` read
    /// as an address in any spelling, else resolved like [`Resolver::lookup`]; an error when any
    /// of them is one courtesy never dials ([`DnsError::Forbidden`]), so that a name with one bad
    /// address is refused rather than tried in turn.
    pub(crate) async fn lookup_target(
        &self,
        host: &str,
        port: u16,
    ) -> Result<Vec<SocketAddr>, DnsError> {
        let host = host.trim_end_matches('.');
        let addrs: Vec<SocketAddr> = match crate::wire::literal::literal_ip(host) {
            Some(ip) => vec![SocketAddr::new(ip, port)],
            None => {
                if host.eq_ignore_ascii_case("localhost")
                    || host.to_ascii_lowercase().ends_with(".localhost")
                {
                    // RFC 6761: loopback, whatever the resolver would say.
                    let loopback = [
                        SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, port)),
                        SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, port)),
                    ];
                    self.judge(host, &loopback)?;
                }
                self.lookup(host)
                    .await?
                    .into_iter()
                    .map(|a| SocketAddr::new(a.ip(), port))
                    .collect()
            }
        };
        self.judge(host, &addrs)?;
        Ok(addrs)
    }

    /// The refusal of the address literal `host` (read already as `ip`), if courtesy never dials
    /// it: what [`Resolver::lookup_target`] says of a literal, without reading it again.
    pub(crate) fn judge_literal(&self, host: &str, ip: IpAddr, port: u16) -> Result<(), DnsError> {
        self.judge(host, &[SocketAddr::new(ip, port)])
    }

    /// An error naming the first of `addrs` that courtesy never dials, if one is.
    fn judge(&self, name: &str, addrs: &[SocketAddr]) -> Result<(), DnsError> {
        for addr in addrs {
            if let Err(why) = self.destinations.check(*addr) {
                return Err(DnsError::Forbidden {
                    name: name.to_string(),
                    addr: *addr,
                    why,
                });
            }
        }
        Ok(())
    }

    /// The addresses of `name` (port 0), or why there are none: a connection to `name` goes to
    /// these, in order.
    pub(crate) async fn lookup(&self, name: &str) -> Result<Vec<SocketAddr>, DnsError> {
        if let Some(addrs) = self.statics.get(name) {
            return Ok(addrs.iter().map(|ip| SocketAddr::new(*ip, 0)).collect());
        }
        if let Some(ip) = self.pins.steering(name) {
            return Ok(vec![SocketAddr::new(ip, 0)]);
        }
        Resolver::system(name, self.timeout).await
    }

    /// The one address a budget keyed by address (`key = "ip"`) counts `name` under; from then on,
    /// for as long as its DNS answer lives, connections to `name` go to it alone.
    pub(crate) async fn address(&self, name: &str) -> Result<IpAddr, DnsError> {
        if let Some(addrs) = self.statics.get(name) {
            if let Some(ip) = pins::first_v4_else_first(addrs) {
                return Ok(ip);
            }
        }
        self.pins.address(name, self.timeout).await
    }

    /// The system resolver's answer for `name`, within `timeout`.
    async fn system(name: &str, timeout: Duration) -> Result<Vec<SocketAddr>, DnsError> {
        let lookup = tokio::net::lookup_host((name, 0));
        match tokio::time::timeout(timeout, lookup).await {
            Ok(Ok(addrs)) => {
                let addrs: Vec<SocketAddr> = addrs.collect();
                if addrs.is_empty() {
                    Err(DnsError::Failed {
                        name: name.to_string(),
                        reason: "no addresses".into(),
                    })
                } else {
                    Ok(addrs)
                }
            }
            Ok(Err(e)) => Err(DnsError::Failed {
                name: name.to_string(),
                reason: e.to_string(),
            }),
            Err(_) => Err(DnsError::Timeout {
                name: name.to_string(),
                seconds: timeout.as_secs_f64(),
            }),
        }
    }
}

impl tower::Service<Name> for Resolver {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = DnsError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, DnsError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), DnsError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let resolver = self.clone();
        Box::pin(async move { resolver.lookup(name.as_str()).await.map(Vec::into_iter) })
    }
}

/// The upstream connector: every address the target resolves to is judged
/// ([`Resolver::lookup_target`]) and only then handed, as an address, to hyper-util's TCP
/// connector; so no lookup made after a check (DNS rebinding) can reach a refused address.
#[derive(Debug, Clone)]
pub(crate) struct GuardedConnector {
    inner: Connector,
    resolver: Resolver,
}

impl GuardedConnector {
    /// Connections made by `inner` to the addresses `resolver` allows.
    pub(crate) fn new(inner: Connector, resolver: Resolver) -> Self {
        GuardedConnector { inner, resolver }
    }
}

/// A boxed error, as the pooled client takes it.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl tower::Service<http::Uri> for GuardedConnector {
    type Response = <Connector as tower::Service<http::Uri>>::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let (inner, resolver) = (self.inner.clone(), self.resolver.clone());
        Box::pin(async move {
            let host = uri.host().ok_or("the upstream URL has no host")?;
            let scheme = Scheme::of_uri_or_http(&uri);
            let port = uri.port_u16().unwrap_or(scheme.default_port());
            let host = host.trim_start_matches('[').trim_end_matches(']');
            let addrs = resolver.lookup_target(host, port).await?;
            let mut last: Option<BoxError> = None;
            for addr in addrs {
                let Ok(literal) = format!("{}://{addr}/", scheme.as_str()).parse::<http::Uri>()
                else {
                    continue;
                };
                match tower::ServiceExt::oneshot(inner.clone(), literal).await {
                    Ok(io) => return Ok(io),
                    Err(e) => last = Some(Box::new(e)),
                }
            }
            Err(last.unwrap_or_else(|| {
                Box::new(DnsError::Failed {
                    name: host.to_string(),
                    reason: "no addresses".into(),
                })
            }))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn localhost_resolves_and_a_bad_name_fails_clearly() {
        let r = Resolver::new(Duration::from_secs(5), Arc::default());
        let addrs = r.lookup("localhost").await.unwrap();
        assert!(addrs.iter().all(|a| a.ip().is_loopback()));
        let err = r.lookup("no-such-host.invalid").await.unwrap_err();
        assert!(err.to_string().contains("no-such-host.invalid"), "{err}");
    }

    #[tokio::test]
    async fn the_hosts_file_answers_first_and_an_address_key_steers_connections() {
        let statics = StaticHosts::parse("::1 a.shop.test\n127.0.0.2 a.shop.test\n").unwrap();
        let r = Resolver::new(Duration::from_secs(5), Arc::new(statics));
        let addrs: Vec<IpAddr> = r
            .lookup("a.shop.test")
            .await
            .unwrap()
            .iter()
            .map(SocketAddr::ip)
            .collect();
        assert_eq!(
            addrs,
            [
                "::1".parse::<IpAddr>().unwrap(),
                "127.0.0.2".parse().unwrap()
            ]
        );
        assert_eq!(
            r.address("a.shop.test").await.unwrap().to_string(),
            "127.0.0.2"
        );
        let pinned = r.address("localhost").await.unwrap();
        let addrs = r.clone().lookup("localhost").await.unwrap();
        assert_eq!(
            addrs,
            [SocketAddr::new(pinned, 0)],
            "one address: the key's"
        );
    }

    #[tokio::test]
    async fn the_connector_never_dials_a_refused_address_however_it_is_named() {
        use tokio::net::TcpListener;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let statics = StaticHosts::parse("127.0.0.1 inside.test\n").unwrap();
        let resolver = Resolver::new(Duration::from_secs(5), Arc::new(statics)).refusing(
            Destinations::new(vec![], vec!["127.0.0.0/8".parse().unwrap()], vec![]),
        );
        let connector =
            GuardedConnector::new(Connector::new_with_resolver(resolver.clone()), resolver);
        for host in [
            "127.0.0.1",
            "127.1",
            "0x7f000001",
            "inside.test",
            "localhost",
        ] {
            let uri: http::Uri = format!("http://{host}:{port}/").parse().unwrap();
            let err = tower::ServiceExt::oneshot(connector.clone(), uri)
                .await
                .err()
                .unwrap_or_else(|| panic!("{host} was dialed"));
            let dns = err.downcast_ref::<DnsError>().expect("a DnsError");
            assert!(
                matches!(
                    dns,
                    DnsError::Forbidden {
                        why: Forbidden::Denied(_),
                        ..
                    }
                ),
                "{host}: {dns}"
            );
        }
        // Nothing connected.
        let accepted = tokio::time::timeout(Duration::from_millis(100), listener.accept()).await;
        assert!(accepted.is_err(), "a connection arrived");
    }

    #[tokio::test]
    async fn the_connector_dials_an_allowed_address() {
        use tokio::net::TcpListener;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let resolver =
            Resolver::new(Duration::from_secs(5), Arc::default()).refusing(Destinations::new(
                vec![],
                vec!["127.0.0.0/8".parse().unwrap()],
                vec!["127.0.0.1/32".parse().unwrap()],
            ));
        let connector =
            GuardedConnector::new(Connector::new_with_resolver(resolver.clone()), resolver);
        let uri: http::Uri = format!("http://127.1:{port}/").parse().unwrap();
        assert!(tower::ServiceExt::oneshot(connector, uri).await.is_ok());
        assert!(listener.accept().await.is_ok());
    }
}
