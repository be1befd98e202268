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

mod hosts;
mod pins;

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::client::legacy::connect::dns::Name;
use hyper_util::client::legacy::connect::HttpConnector;

pub use hosts::StaticHosts;
use pins::Pins;

/// The upstream connector: hyper-util's TCP connector with our resolver.
pub type Connector = HttpConnector<Resolver>;

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
}

/// Resolves names from the `hosts_file`, the held addresses of `key = "ip"` names, or the system
/// resolver, bounded by a timeout. Clones share what they hold.
#[derive(Debug, Clone)]
pub struct Resolver {
    timeout: Duration,
    statics: Arc<StaticHosts>,
    pins: Arc<Pins>,
}

impl Resolver {
    /// A resolver that gives up after `timeout`, answering the names in `statics` itself.
    pub fn new(timeout: Duration, statics: Arc<StaticHosts>) -> Self {
        Resolver {
            timeout,
            statics,
            pins: Arc::new(Pins::default()),
        }
    }

    /// The addresses of `name` (port 0), or why there are none: a connection to `name` goes to
    /// these, in order.
    pub async fn lookup(&self, name: &str) -> Result<Vec<SocketAddr>, DnsError> {
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
    pub async fn address(&self, name: &str) -> Result<IpAddr, DnsError> {
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
}
