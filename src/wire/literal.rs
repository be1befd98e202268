//! Host spellings that are addresses: an IPv6 literal, a dotted quad, and every other spelling of
//! an IPv4 address that clients and resolvers accept (the `inet_aton` rules that glibc's
//! `getaddrinfo`, curl and browsers follow): `127.1`, `0x7f000001`, `2130706433`,
//! `017700000001`, `0`. A check that compares spellings instead of addresses lets every one of
//! these through; this module turns them all into the one address they mean.
//!
//! This module only parses; what an address may be used for is `crate::upstream::resolve`'s guard.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The address `host` spells, if it is one (brackets around IPv6 allowed; IPv4-mapped IPv6 read
/// as the IPv4 address it maps), or `None` for a name.
pub(crate) fn literal_ip(host: &str) -> Option<IpAddr> {
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    // Every IPv6 literal has a colon; a name or an IPv4 spelling never does.
    if bare.contains(':') {
        let v6 = bare.parse::<Ipv6Addr>().ok()?;
        return Some(match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        });
    }
    numeric_ipv4(bare).map(IpAddr::V4)
}

/// `v4` in its one canonical spelling, `a.b.c.d`: the host key of every spelling of it. Written
/// byte by byte, since a target's address is spelled on every request and `Display` for an
/// address goes through the formatting machinery (1.4k instructions, against about 100 here).
pub(crate) fn dotted_quad(v4: Ipv4Addr) -> String {
    let mut out = String::with_capacity(15);
    for (i, octet) in v4.octets().into_iter().enumerate() {
        if i > 0 {
            out.push('.');
        }
        if octet >= 100 {
            out.push(char::from(b'0' + octet / 100));
        }
        if octet >= 10 {
            out.push(char::from(b'0' + octet / 10 % 10));
        }
        out.push(char::from(b'0' + octet % 10));
    }
    out
}

/// The IPv4 address of a numeric host by the `inet_aton` rules, or `None`.
///
/// One to four parts separated by dots (one trailing dot allowed, as URL parsers allow it); each
/// part decimal, hexadecimal after `0x`/`0X`, or octal after a leading `0`. The last part fills
/// every byte the earlier ones left: `a` is 32 bits, `a.b` is 8.24, `a.b.c` is 8.8.16. A part too
/// large for its room, an empty part or any other character makes it a name, not an address.
/// Read on every request (the target, the loop guard, the destination check), so it reads bytes
/// once and gives up at the first byte a number cannot have.
pub(crate) fn numeric_ipv4(host: &str) -> Option<Ipv4Addr> {
    let bytes = host.as_bytes();
    let bytes = bytes.strip_suffix(b".").unwrap_or(bytes);
    // Every part starts with a digit (`0x` too): a name almost always fails on its first byte.
    if bytes.is_empty() || bytes.len() > 64 || !bytes[0].is_ascii_digit() {
        return None;
    }
    let mut parts = [0u64; 4];
    let mut count = 0;
    let mut start = 0;
    for end in 0..=bytes.len() {
        if end < bytes.len() && bytes[end] != b'.' {
            continue;
        }
        if count == 4 {
            return None;
        }
        parts[count] = number(&bytes[start..end])?;
        count += 1;
        start = end + 1;
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
fn number(part: &[u8]) -> Option<u64> {
    if part.is_empty() || part.len() > 34 {
        return None;
    }
    let (digits, radix) = match part {
        [b'0', b'x' | b'X', hex @ ..] => (hex, 16),
        [b'0', octal @ ..] if !octal.is_empty() => (octal, 8),
        _ => (part, 10),
    };
    if digits.is_empty() {
        // `0x` alone is zero, as URL parsers read it.
        return (radix == 16).then_some(0);
    }
    let mut value: u64 = 0;
    for &byte in digits {
        let digit = match byte {
            b'0'..=b'9' => byte - b'0',
            b'a'..=b'f' => byte - b'a' + 10,
            b'A'..=b'F' => byte - b'A' + 10,
            _ => return None,
        };
        if u32::from(digit) >= radix {
            return None;
        }
        value = value
            .checked_mul(u64::from(radix))?
            .checked_add(u64::from(digit))?;
    }
    Some(value)
}

/// The address a destination `ip` is judged as: the IPv4 address inside it when it carries one
/// ([`embedded_ipv4`]), else itself.
pub(crate) fn judged_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => embedded_ipv4(v6).map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d`) as the plain IPv4 address they map, so that an
/// address is judged (and a rule matched) the same in either form.
pub(crate) fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map(IpAddr::V4)
            .unwrap_or(IpAddr::V6(v6)),
        v4 => v4,
    }
}

/// The IPv4 address an IPv6 destination carries inside it, if it is one of the forms that reach
/// (or are routed toward) that IPv4 address: IPv4-mapped `::ffff:a.b.c.d`; NAT64, the well-known
/// `64:ff9b::/96` and the local-use `64:ff9b:1::/48` (RFC 6052, RFC 8215: the IPv4 address in
/// the last 32 bits, the /96-style layout); 6to4 `2002:AABB:CCDD::/48` (RFC 3056: bits 16..48);
/// and IPv4-compatible `::a.b.c.d` (RFC 4291, deprecated), except `::` and `::1`, which are
/// IPv6's own unspecified and loopback addresses.
///
/// A check that judges a destination by address judges such an address as the IPv4 address in
/// it too (`crate::upstream::resolve`'s guard), so that `127.0.0.0/8` in a deny list is not
/// passed by `[64:ff9b::7f00:1]`, `[2002:7f00:1::1]` or `[::127.0.0.1]`.
pub(crate) fn embedded_ipv4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    if let Some(v4) = v6.to_ipv4_mapped() {
        return Some(v4);
    }
    let bits = u128::from(v6);
    let last32 = Ipv4Addr::from((bits & 0xffff_ffff) as u32);
    let s = v6.segments();
    match s {
        // NAT64 well-known prefix, 64:ff9b::/96.
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => Some(last32),
        // NAT64 local-use prefix, 64:ff9b:1::/48.
        [0x64, 0xff9b, 1, ..] => Some(last32),
        // 6to4, 2002::/16: the IPv4 address in bits 16..48.
        [0x2002, hi, lo, ..] => Some(Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo))),
        // IPv4-compatible, ::a.b.c.d, except :: and ::1.
        [0, 0, 0, 0, 0, 0, _, _] if bits > 1 => Some(last32),
        _ => None,
    }
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
    fn the_dotted_quad_is_what_display_writes() {
        let mut samples = vec![0u32, 1, 9, 10, 99, 100, 255, u32::MAX, 0x7f00_0001];
        // Every octet value in every position, and a spread of whole addresses.
        for octet in 0..=255u32 {
            samples.extend([octet, octet << 8, octet << 16, octet << 24]);
        }
        samples.extend((0..10_000u32).map(|i| i.wrapping_mul(2_654_435_761)));
        for bits in samples {
            let v4 = Ipv4Addr::from(bits);
            assert_eq!(dotted_quad(v4), v4.to_string());
        }
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

    #[test]
    fn embedded_ipv4_is_read_from_every_form_that_carries_one() {
        let v4 = |t: &str| Some(t.parse::<Ipv4Addr>().unwrap());
        for (v6, want) in [
            ("::ffff:127.0.0.2", v4("127.0.0.2")),
            ("64:ff9b::7f00:2", v4("127.0.0.2")),
            ("64:ff9b::a9fe:a9fe", v4("169.254.169.254")),
            ("64:ff9b:1::7f00:2", v4("127.0.0.2")),
            ("64:ff9b:1:ffff:ffff:ffff:a00:1", v4("10.0.0.1")),
            ("2002:7f00:2::1", v4("127.0.0.2")),
            ("2002:a9fe:a9fe:1:2:3:4:5", v4("169.254.169.254")),
            ("::127.0.0.2", v4("127.0.0.2")),
            ("::2", v4("0.0.0.2")),
            ("::", None),
            ("::1", None),
            // Outside the /96: neither NAT64 nor anything else.
            ("64:ff9b:0:0:1::7f00:2", None),
            ("64:ff9b:2::7f00:2", None),
            ("2001:db8::7f00:2", None),
            ("2003:7f00:2::1", None),
            ("::1:0:0:7f00:2", None),
            ("fe80::1", None),
        ] {
            let addr: Ipv6Addr = v6.parse().unwrap();
            assert_eq!(embedded_ipv4(addr), want, "{v6}");
        }
    }
}
