//! What a host rule or an allow-list entry matches: [`HostPattern`] with its host/port
//! splitting, client networks, and the one canonical form of a client address.

use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;

/// A `[[host]]` pattern: an exact host or `*.suffix`, optionally with `:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPattern {
    /// The canonical host ([`crate::wire::host_name::canonical`]), or the suffix after `*.` for a
    /// wildcard.
    host: String,
    wildcard: bool,
    port: Option<u16>,
}

impl HostPattern {
    /// Parses `shop.example.com`, `*.example.com`, `127.0.0.2`, `[::1]:8080`, `host:8080`.
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim().to_ascii_lowercase();
        if text.is_empty() {
            return Err("must not be empty".into());
        }
        let (host, port) = split_host_port(&text)?;
        let (host, wildcard) = match host.strip_prefix("*.") {
            Some(rest) => (rest, true),
            None => (host, false),
        };
        if host.is_empty() || host.contains('*') || host.contains('/') {
            return Err("expected a host such as \"shop.example.com\" or \"*.example.com\"".into());
        }
        // The name a target is matched by is canonical (`crate::wire::host_name`): so is the pattern,
        // so that `Slow.Test.`, `bücher.example` or `[0:0::1]` match every spelling of the host.
        let host = crate::wire::host_name::canonical(host).map_err(|e| e.to_string())?;
        Ok(HostPattern {
            host,
            wildcard,
            port,
        })
    }

    /// How specific a match of this pattern is, or `None` if it does not match. Exact beats wildcard,
    /// a longer wildcard suffix beats a shorter one, and a port beats no port.
    pub(super) fn specificity(&self, host: &str, port: u16) -> Option<usize> {
        if self.port.is_some_and(|p| p != port) {
            return None;
        }
        let port_bonus = usize::from(self.port.is_some());
        if self.wildcard {
            let matches = host.len() > self.host.len()
                && host.ends_with(&self.host)
                && host.as_bytes()[host.len() - self.host.len() - 1] == b'.';
            matches.then(|| self.host.len() * 2 + port_bonus)
        } else {
            (host == self.host).then_some(usize::MAX / 2 + port_bonus)
        }
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.wildcard {
            f.write_str("*.")?;
        }
        if self.host.contains(':') {
            write!(f, "[{}]", self.host)?;
        } else {
            f.write_str(&self.host)?;
        }
        if let Some(port) = self.port {
            write!(f, ":{port}")?;
        }
        Ok(())
    }
}

fn split_host_port(text: &str) -> Result<(&str, Option<u16>), String> {
    if let Some(rest) = text.strip_prefix('[') {
        let (ip, after) = rest
            .split_once(']')
            .ok_or_else(|| "unclosed '[' in an IPv6 address".to_string())?;
        let port = match after.strip_prefix(':') {
            Some(p) => Some(p.parse().map_err(|_| format!("bad port {p:?}"))?),
            None if after.is_empty() => None,
            None => return Err(format!("unexpected {after:?} after the IPv6 address")),
        };
        return Ok((ip, port));
    }
    if text.matches(':').count() > 1 {
        // A bare IPv6 address.
        return Ok((text, None));
    }
    match text.split_once(':') {
        Some((host, p)) => Ok((
            host,
            Some(p.parse().map_err(|_| format!("bad port {p:?}"))?),
        )),
        None => Ok((text, None)),
    }
}

/// An `allow_clients` entry: a CIDR network, or a single address as a network of one.
pub(super) fn parse_network(text: &str) -> Result<IpNet, ()> {
    let text = text.trim();
    if let Ok(net) = text.parse::<IpNet>() {
        return Ok(net);
    }
    text.parse::<IpAddr>().map(IpNet::from).map_err(|_| ())
}
