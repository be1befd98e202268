//! Which budget a request spends: the key of its host's entry in the limiter's table, made from
//! the target and the `key` of the rule that matches it.
//!
//! - `key = "host"`: `host:port` (`[v6]:port`), one budget per name and port, as before.
//! - `key = "domain"`: the registrable domain from the Public Suffix List (the `psl` crate
//!   carries the list; its private section too, so `a.github.io` and `b.github.io` are two
//!   sites), port ignored. A name that is itself a public suffix, or has none (`localhost`), is
//!   its own key; an IP address is its own key.
//! - `key = "ip"`: the address courtesy connects to (`crate::upstream::resolve`, which holds it for the
//!   name's TTL and sends the connection there), port ignored; IPv6 in brackets.
//!
//! Host keys always end in `:port` and the others never do, so the kinds never collide, except
//! an IP address under `domain` and under `ip`: that is one machine, and one budget is right.
//! This module makes keys; it keeps no budget (`crate::budget::limiter`).

use std::net::IpAddr;

use crate::config::KeyMode;
use crate::upstream::resolve::{DnsError, Resolver};
use crate::wire::host_key::host_key;

/// The key of a budget, and the name that led to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetKey {
    /// The limiter table's key.
    pub key: String,
    /// What the key was made from.
    pub kind: KeyMode,
    /// The request's host (lowercase, no brackets).
    pub host: String,
    /// The request's port.
    pub port: u16,
}

impl BudgetKey {
    /// The `key = "host"` key of `host`:`port`.
    pub fn of_host(host: &str, port: u16) -> Self {
        BudgetKey {
            key: host_key(host, port),
            kind: KeyMode::Host,
            host: host.to_string(),
            port,
        }
    }

    /// The key of `host`:`port` when it needs no lookup: `host` and `domain` keys, and `ip` keys
    /// of an address. `None`: an `ip` key of a name (see [`Keyer::key`]).
    pub fn without_lookup(host: &str, port: u16, kind: KeyMode) -> Option<Self> {
        let key = match kind {
            KeyMode::Host => return Some(BudgetKey::of_host(host, port)),
            KeyMode::Domain => domain_key(host),
            KeyMode::Ip => address_key(host.parse().ok()?),
        };
        Some(BudgetKey {
            key,
            kind,
            host: host.to_string(),
            port,
        })
    }

    /// `host:port` of the request's name: what `/hosts` lists among the names sharing a key.
    pub fn name(&self) -> String {
        host_key(&self.host, self.port)
    }

    /// Whether several names may share this key (anything but `key = "host"`).
    pub fn is_shared(&self) -> bool {
        self.kind != KeyMode::Host
    }
}

/// The registrable domain of `host` (eTLD+1), or `host` itself where it has none.
pub(crate) fn domain_key(host: &str) -> String {
    let host = host.trim_end_matches('.');
    if let Ok(ip) = host.parse::<IpAddr>() {
        return address_key(ip);
    }
    psl::domain_str(host).unwrap_or(host).to_string()
}

/// The key of an address: as written, IPv6 in brackets.
pub(crate) fn address_key(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("[{v6}]"),
    }
}

/// Makes keys, looking addresses up where `key = "ip"` needs one. Clones share the resolver's
/// held addresses with the upstream connector.
#[derive(Debug, Clone)]
pub struct Keyer {
    resolver: Resolver,
}

impl Keyer {
    /// Keys that look addresses up through `resolver`, the one connections are made with.
    pub(crate) fn new(resolver: Resolver) -> Self {
        Keyer { resolver }
    }

    /// The resolver whose held addresses steer connections to the addresses keys were made from.
    pub(crate) fn resolver(&self) -> &Resolver {
        &self.resolver
    }

    /// The key of `host`:`port` under `kind`; for `ip`, the name's address, held for its TTL.
    pub async fn key(&self, host: &str, port: u16, kind: KeyMode) -> Result<BudgetKey, DnsError> {
        if let Some(key) = BudgetKey::without_lookup(host, port, kind) {
            return Ok(key);
        }
        // Boxed: only `key = "ip"` looks the name up, and the lookup's future, kept
        // inline, would make every request's future larger to move.
        let ip = Box::pin(self.resolver.address(host)).await?;
        Ok(BudgetKey {
            key: address_key(ip),
            kind,
            host: host.to_string(),
            port,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn domains_follow_the_public_suffix_list() {
        assert_eq!(domain_key("a.shop.example.co.uk"), "example.co.uk");
        assert_eq!(domain_key("b.shop.example.co.uk"), "example.co.uk");
        assert_eq!(domain_key("example.co.uk"), "example.co.uk");
        assert_eq!(
            domain_key("co.uk"),
            "co.uk",
            "a public suffix is its own key"
        );
        assert_eq!(domain_key("alice.github.io"), "alice.github.io");
        assert_eq!(domain_key("www.alice.github.io"), "alice.github.io");
        assert_ne!(domain_key("bob.github.io"), domain_key("alice.github.io"));
        assert_eq!(domain_key("github.io"), "github.io");
        assert_eq!(domain_key("www.example.com."), "example.com");
        assert_eq!(domain_key("localhost"), "localhost");
        assert_eq!(domain_key("127.0.0.1"), "127.0.0.1");
        assert_eq!(domain_key("::1"), "[::1]");
    }

    #[test]
    fn keys_of_each_kind_never_collide_by_accident() {
        let host = BudgetKey::without_lookup("a.example.com", 8443, KeyMode::Host).unwrap();
        assert_eq!(host.key, "a.example.com:8443");
        let domain = BudgetKey::without_lookup("a.example.com", 8443, KeyMode::Domain).unwrap();
        assert_eq!(
            (domain.key.as_str(), domain.name().as_str()),
            ("example.com", "a.example.com:8443")
        );
        assert!(domain.is_shared() && !host.is_shared());
        assert_eq!(
            BudgetKey::without_lookup("a.example.com", 80, KeyMode::Ip),
            None
        );
        let ip = BudgetKey::without_lookup("::1", 80, KeyMode::Ip).unwrap();
        assert_eq!(ip.key, "[::1]");
        assert_eq!(host_key("::1", 8080), "[::1]:8080");
        for port in [0, 7, 10, 80, 443, 8080, 65535] {
            assert_eq!(host_key("a.test", port), format!("a.test:{port}"));
        }
    }

    #[tokio::test]
    async fn two_names_of_one_address_share_an_ip_key() {
        let keyer = Keyer::new(Resolver::new(
            std::time::Duration::from_secs(5),
            std::sync::Arc::default(),
        ));
        let by_name = keyer.key("localhost", 8080, KeyMode::Ip).await.unwrap();
        let by_address = keyer.key("127.0.0.1", 9090, KeyMode::Ip).await.unwrap();
        assert_eq!(by_name.key, by_address.key);
        assert_eq!(by_name.name(), "localhost:8080");
    }
}
