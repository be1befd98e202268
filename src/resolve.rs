//! Name resolution for upstream connections, with a timeout and an error type of our own.
//!
//! hyper-util's connector reports a DNS failure only as a generic "dns error"; resolving through this
//! module lets the proxy tell `dns_error` and `dns_timeout` apart from connection failures when it
//! writes `Proxy-Status`. It does not cache: the operating system's resolver does that.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::client::legacy::connect::dns::Name;
use hyper_util::client::legacy::connect::HttpConnector;

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

/// Resolves names with the system resolver, bounded by a timeout.
#[derive(Debug, Clone)]
pub struct Resolver {
    timeout: Duration,
}

impl Resolver {
    /// A resolver that gives up after `timeout`.
    pub fn new(timeout: Duration) -> Self {
        Resolver { timeout }
    }

    /// The addresses of `name` (port 0), or why there are none.
    pub async fn lookup(&self, name: &str) -> Result<Vec<SocketAddr>, DnsError> {
        let lookup = tokio::net::lookup_host((name, 0));
        match tokio::time::timeout(self.timeout, lookup).await {
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
                seconds: self.timeout.as_secs_f64(),
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
        let r = Resolver::new(Duration::from_secs(5));
        let addrs = r.lookup("localhost").await.unwrap();
        assert!(addrs.iter().all(|a| a.ip().is_loopback()));
        let err = r.lookup("no-such-host.invalid").await.unwrap_err();
        assert!(err.to_string().contains("no-such-host.invalid"), "{err}");
    }
}
