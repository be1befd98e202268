//! One client, as every per-client bound counts it: an IPv4 address as itself (IPv4-mapped IPv6
//! read as the IPv4 address it maps), an IPv6 address by its /64. A host or household is given a
//! whole /64 and may pick any address in it, so a bound per address would be a bound per pick:
//! the connection caps, the auth brake and the job lanes all group the same way.

use std::net::{IpAddr, Ipv6Addr};

/// The client `ip` belongs to: itself for IPv4, its /64 network (the interface bits zeroed) for
/// IPv6, an IPv4-mapped address as its IPv4 address.
pub(crate) fn client_group(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_is_grouped_by_its_64_and_ipv4_is_itself() {
        let group = |s: &str| client_group(s.parse().unwrap());
        assert_eq!(group("192.0.2.7"), group("192.0.2.7"));
        assert_ne!(group("192.0.2.7"), group("192.0.2.8"));
        assert_eq!(group("::ffff:192.0.2.7"), group("192.0.2.7"));
        assert_eq!(group("2001:db8:1:2::1"), group("2001:db8:1:2:ffff:1:2:3"));
        assert_eq!(
            group("2001:db8:1:2::1"),
            "2001:db8:1:2::".parse::<IpAddr>().unwrap()
        );
        assert_ne!(group("2001:db8:1:2::1"), group("2001:db8:1:3::1"));
        assert_eq!(group("::1"), "::".parse::<IpAddr>().unwrap());
    }
}
