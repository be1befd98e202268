//! Host spellings that are addresses: an IPv6 literal, a dotted quad, and every other spelling of
//! an IPv4 address that clients and resolvers accept (the `inet_aton` rules that glibc's
//! `getaddrinfo`, curl and browsers follow): `127.1`, `0x7f000001`, `2130706433`,
//! `017700000001`, `0`. A check that compares spellings instead of addresses lets every one of
//! these through; this module turns them all into the one address they mean.
//!
//! This module only parses; what an address may be used for is `super::guard`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The address `host` spells, if it is one (brackets around IPv6 allowed; IPv4-mapped IPv6 read
/// as the IPv4 address it maps), or `None` for a name.
pub fn literal_ip(host: &str) -> Option<IpAddr> {
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if let Ok(v6) = bare.parse::<Ipv6Addr>() {
        return Some(match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        });
    }
    numeric_ipv4(bare).map(IpAddr::V4)
}

/// The IPv4 address of a numeric host by the `inet_aton` rules, or `None`.
///
/// One to four parts separated by dots (one trailing dot allowed, as URL parsers allow it); each
/// part decimal, hexadecimal after `0x`/`0X`, or octal after a leading `0`. The last part fills
/// every byte the earlier ones left: `a` is 32 bits, `a.b` is 8.24, `a.b.c` is 8.8.16. A part too
/// large for its room, an empty part or any other character makes it a name, not an address.
pub fn numeric_ipv4(host: &str) -> Option<Ipv4Addr> {
    let host = host.strip_suffix('.').unwrap_or(host);
    if host.is_empty() || host.len() > 64 {
        return None;
    }
    let mut parts = [0u64; 4];
    let mut count = 0;
    for part in host.split('.') {
        if count == 4 {
            return None;
        }
        parts[count] = number(part)?;
        count += 1;
    }
    let (head, last) = parts[..count].split_at(count - 1);
    if head.iter().any(|p| *p > 0xff) {
        return None;
    }
    let room_bits = 8 * (4 - head.len() as u32);
    let last = last[0];
    if room_bits < 64 && last >> room_bits != 0 {
        return None;
    }
    let mut value: u64 = 0;
    for (i, p) in head.iter().enumerate() {
        value |= p << (24 - 8 * i as u32);
    }
    value |= last;
    u32::try_from(value).ok().map(Ipv4Addr::from)
}

/// One part: decimal, `0x` hexadecimal or `0` octal; `None` when it is not a number or is longer
/// than any 32-bit value needs.
fn number(part: &str) -> Option<u64> {
    if part.is_empty() || part.len() > 34 {
        return None;
    }
    let (digits, radix) =
        if let Some(hex) = part.strip_prefix("0x").or_else(|| part.strip_prefix("0X")) {
            (hex, 16)
        } else if part.len() > 1 && part.starts_with('0') {
            (&part[1..], 8)
        } else {
            (part, 10)
        };
    if digits.is_empty() {
        // `0x` alone is zero, as URL parsers read it.
        return (radix == 16).then_some(0);
    }
    if !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    u64::from_str_radix(digits, radix).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_of_loopback_is_loopback() {
        let loopback = Some(Ipv4Addr::new(127, 0, 0, 1));
        for spelling in [
            "127.0.0.1",
            "127.1",
            "127.0.1",
            "0x7f000001",
            "0X7F000001",
            "2130706433",
            "017700000001",
            "0177.0.0.1",
            "0x7f.1",
            "127.0.0.1.",
        ] {
            assert_eq!(numeric_ipv4(spelling), loopback, "{spelling}");
        }
        assert_eq!(numeric_ipv4("0"), Some(Ipv4Addr::UNSPECIFIED));
        assert_eq!(numeric_ipv4("0x"), Some(Ipv4Addr::UNSPECIFIED));
        assert_eq!(
            literal_ip("[::ffff:127.0.0.1]"),
            Some(IpAddr::V4(Ipv4Addr::LOCALHOST))
        );
        assert_eq!(literal_ip("::1"), Some(IpAddr::V6(Ipv6Addr::LOCALHOST)));
    }

    #[test]
    fn names_and_out_of_range_parts_are_not_addresses() {
        for name in [
            "",
            ".",
            "example.org",
            "127.0.0.1.1",
            "256.0.0.1",
            "1.2.3.256",
            "1.2.65536",
            "4294967296",
            "08",
            "0x1g",
            "1..2",
            "127.0.0.1..",
            "1e3",
            "-1",
            "+1",
        ] {
            assert_eq!(numeric_ipv4(name), None, "{name:?}");
        }
        assert_eq!(numeric_ipv4("4294967295"), Some(Ipv4Addr::BROADCAST));
        assert_eq!(
            numeric_ipv4("1.2.65535"),
            Some(Ipv4Addr::new(1, 2, 255, 255))
        );
    }
}
