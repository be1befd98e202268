//! Where courtesy will not connect, judged on the address a target resolves to (never on its
//! spelling): one of courtesy's own listeners (a loop that would spend the budget twice, or reach
//! the admin API through the proxy), or a network in `[proxy] deny_destinations` that is not
//! opened again by `allow_destinations` (cloud metadata, the team's private ranges).
//!
//! A wildcard listener (`0.0.0.0`, `[::]`) is reached through every local address: all of
//! `127.0.0.0/8`, `::1`, and the machine's interface addresses (an address is local when a socket
//! can be bound to it; binding sends nothing). A destination of `0.0.0.0` or `::` is reached as
//! loopback by the kernel, so it is judged as loopback too. An IPv6 address with an IPv4 address
//! inside (IPv4-mapped `::ffff:127.0.0.1`, NAT64 `64:ff9b::7f00:1` and `64:ff9b:1::/48`, 6to4
//! `2002:7f00:1::`, IPv4-compatible `::127.0.0.1`) is judged as that IPv4 address as well as
//! itself: a translator or relay on the way delivers it there.
//!
//! This module judges addresses; resolving names is `super::Resolver`, which asks it about every
//! address before one is dialed.

use crate::wire::literal::{canonical_ip, judged_ip};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use ipnet::IpNet;

/// Why an address is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forbidden {
    /// The address and port are courtesy's own listener.
    Loop,
    /// The address is in this `[proxy] deny_destinations` network.
    Denied(IpNet),
}

/// The destinations courtesy refuses: its own listeners, and the denied networks less the
/// allowed ones.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Destinations {
    own: Vec<SocketAddr>,
    deny: Vec<IpNet>,
    allow: Vec<IpNet>,
}

impl Destinations {
    /// Refuses `own` (the listeners' addresses), every address in `deny`, except those in `allow`.
    pub(crate) fn new(own: Vec<SocketAddr>, deny: Vec<IpNet>, allow: Vec<IpNet>) -> Self {
        Destinations { own, deny, allow }
    }

    /// Whether `addr` may be dialed, or why not. An IPv6 address that carries an IPv4 address
    /// (IPv4-mapped, NAT64, 6to4, IPv4-compatible: [`judged_ip`]) is judged as both: each of
    /// its forms on its own, refused when any form is a listener of ours or is denied and not
    /// allowed (so `allow_destinations = ["10.1.2.0/24"]` does not open `64:ff9b::a01:203` while
    /// `64:ff9b::/96` itself is denied).
    pub(crate) fn check(&self, addr: SocketAddr) -> Result<(), Forbidden> {
        let ip = addr.ip();
        let judged = judged_ip(ip);
        let reached = reached_as(judged);
        if (ip != reached && self.is_own(ip, addr.port())) || self.is_own(reached, addr.port()) {
            return Err(Forbidden::Loop);
        }
        for candidate in [ip, judged, reached] {
            if let Some(net) = self.deny.iter().find(|n| n.contains(&candidate)) {
                if !self.allow.iter().any(|a| a.contains(&candidate)) {
                    return Err(Forbidden::Denied(*net));
                }
            }
        }
        Ok(())
    }

    /// Whether a connection to `ip:port` (as the kernel reaches it) lands on a listener of ours.
    fn is_own(&self, ip: IpAddr, port: u16) -> bool {
        self.own.iter().any(|own| {
            own.port() == port && {
                let listener = canonical_ip(own.ip());
                if listener.is_unspecified() {
                    is_local(ip)
                } else {
                    listener == ip
                }
            }
        })
    }
}

/// The address a connection to `ip` actually reaches: the unspecified address is loopback.
fn reached_as(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) if v4.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(v6) if v6.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        other => other,
    }
}

/// Whether `ip` is an address of this machine: loopback, or one a socket can be bound to.
fn is_local(ip: IpAddr) -> bool {
    ip.is_loopback()
        || ip.is_unspecified()
        || std::net::UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(text: &str) -> SocketAddr {
        text.parse().unwrap()
    }

    #[test]
    fn a_wildcard_listener_is_every_local_address_on_its_port() {
        let d = Destinations::new(vec![addr("0.0.0.0:3129")], vec![], vec![]);
        for own in [
            "127.0.0.1:3129",
            "127.9.9.9:3129",
            "0.0.0.0:3129",
            "[::1]:3129",
            "[::]:3129",
            "[::ffff:127.0.0.1]:3129",
        ] {
            assert_eq!(d.check(addr(own)), Err(Forbidden::Loop), "{own}");
        }
        assert_eq!(d.check(addr("127.0.0.1:8080")), Ok(()));
        assert_eq!(d.check(addr("192.0.2.7:3129")), Ok(()), "not ours");
    }

    #[test]
    fn a_wildcard_listener_is_the_machines_interface_addresses_too() {
        // The machine's own addresses, as `hostname -I` lists them (nothing is sent to them).
        let listed = std::process::Command::new("hostname")
            .arg("-I")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        let d = Destinations::new(vec![addr("[::]:3129")], vec![], vec![]);
        for ip in listed
            .split_whitespace()
            .filter_map(|w| w.parse::<IpAddr>().ok())
        {
            assert_eq!(
                d.check(SocketAddr::new(ip, 3129)),
                Err(Forbidden::Loop),
                "{ip}"
            );
            assert_eq!(d.check(SocketAddr::new(ip, 3130)), Ok(()), "{ip}");
        }
        // An address of no interface here (TEST-NET-3) is not ours.
        assert_eq!(d.check(addr("203.0.113.9:3129")), Ok(()));
    }

    #[test]
    fn a_bound_listener_is_its_address_alone() {
        let d = Destinations::new(vec![addr("127.0.0.1:3128")], vec![], vec![]);
        assert_eq!(d.check(addr("127.0.0.1:3128")), Err(Forbidden::Loop));
        assert_eq!(d.check(addr("0.0.0.0:3128")), Err(Forbidden::Loop));
        assert_eq!(d.check(addr("127.0.0.2:3128")), Ok(()));
    }

    #[test]
    fn denied_networks_less_the_allowed_ones() {
        let net = |t: &str| t.parse::<IpNet>().unwrap();
        let d = Destinations::new(
            vec![],
            vec![net("10.0.0.0/8"), net("169.254.0.0/16"), net("127.0.0.0/8")],
            vec![net("10.1.2.0/24")],
        );
        assert_eq!(
            d.check(addr("169.254.169.254:80")),
            Err(Forbidden::Denied(net("169.254.0.0/16")))
        );
        assert_eq!(
            d.check(addr("[::ffff:10.0.0.1]:80")),
            Err(Forbidden::Denied(net("10.0.0.0/8")))
        );
        assert_eq!(
            d.check(addr("0.0.0.0:80")),
            Err(Forbidden::Denied(net("127.0.0.0/8")))
        );
        assert_eq!(d.check(addr("10.1.2.3:80")), Ok(()));
        assert_eq!(d.check(addr("192.0.2.1:80")), Ok(()));
    }

    #[test]
    fn embedded_ipv4_is_judged_as_ipv4() {
        let net = |t: &str| t.parse::<IpNet>().unwrap();
        let d = Destinations::new(
            vec![addr("127.0.0.1:3128")],
            vec![net("127.0.0.2/32"), net("10.0.0.0/8")],
            vec![net("10.1.2.0/24")],
        );
        for denied in [
            "[::ffff:127.0.0.2]:80",
            "[64:ff9b::7f00:2]:80",
            "[64:ff9b:1::7f00:2]:80",
            "[::127.0.0.2]:80",
            "[2002:7f00:2::1]:80",
        ] {
            assert_eq!(
                d.check(addr(denied)),
                Err(Forbidden::Denied(net("127.0.0.2/32"))),
                "{denied}"
            );
        }
        for own in [
            "[64:ff9b::7f00:1]:3128",
            "[64:ff9b:1::7f00:1]:3128",
            "[::127.0.0.1]:3128",
            "[2002:7f00:1::1]:3128",
        ] {
            assert_eq!(d.check(addr(own)), Err(Forbidden::Loop), "{own}");
        }
        // allow_destinations reads the IPv4 address inside too.
        assert_eq!(d.check(addr("[64:ff9b::a01:203]:80")), Ok(()));
        assert_eq!(
            d.check(addr("[2002:a00:1::]:80")),
            Err(Forbidden::Denied(net("10.0.0.0/8")))
        );
        // Not embedded forms: judged as themselves.
        assert_eq!(d.check(addr("[::1]:80")), Ok(()));
        assert_eq!(d.check(addr("[2001:db8::7f00:2]:80")), Ok(()));
        assert_eq!(d.check(addr("[64:ff9b::7f00:3]:80")), Ok(()));
    }

    #[test]
    fn a_denied_translation_prefix_is_not_opened_by_an_allowed_ipv4_network() {
        let net = |t: &str| t.parse::<IpNet>().unwrap();
        let d = Destinations::new(
            vec![],
            vec![net("64:ff9b::/96"), net("2002::/16"), net("10.0.0.0/8")],
            vec![net("10.1.2.0/24")],
        );
        assert_eq!(
            d.check(addr("[64:ff9b::a01:203]:80")),
            Err(Forbidden::Denied(net("64:ff9b::/96")))
        );
        assert_eq!(
            d.check(addr("[2002:c000:201::1]:80")),
            Err(Forbidden::Denied(net("2002::/16")))
        );
        assert_eq!(d.check(addr("10.1.2.3:80")), Ok(()));
    }
}
