//! One host, one name: the canonical spelling of a host name, made wherever a name comes in from
//! outside (a request's target, a CONNECT authority, a robots.txt redirect, the SNI inside an
//! intercepted tunnel, a `[[host]]` pattern, the admin API's `/hosts/<host>`, `check --host`), so
//! that every spelling of one host spends one budget and meets one rule, cooldown and pause.
//!
//! The canonical form: ASCII lower case; one trailing dot removed (RFC 1034 3.1: `a.test.` and
//! `a.test` are one name); Unicode names as their IDNA (UTS 46) A-label (`bücher.example` is
//! `xn--bcher-kva.example`); IPv6 in its RFC 5952 form (`0:0:0:0:0:0:0:1` and `::0001` are `::1`),
//! IPv4-mapped IPv6 as its IPv4 address, and every numeric IPv4 spelling (`127.1`, `0x7f000001`)
//! as its dotted quad. The port is not part of the name; callers key `host:port` with an explicit
//! port ([`crate::wire::host_key::host_key`]).
//!
//! A name that is not a host (bad IDNA, an empty label as in `a..b`, two trailing dots, a
//! character no host name has) is an [`InvalidHost`], never a name of its own.
//! This module only spells names; it keeps nothing.

use std::fmt;
use std::net::IpAddr;

/// Why a name is not a valid host name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidHost {
    /// The name as given (shortened when long).
    pub name: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl fmt::Display for InvalidHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} is not a valid host name: {}",
            self.name, self.reason
        )
    }
}

impl std::error::Error for InvalidHost {}

/// The longest name DNS carries (RFC 1035 2.3.4, without the final dot).
const MAX_NAME: usize = 253;
/// The longest label DNS carries.
const MAX_LABEL: usize = 63;

/// The canonical spelling of `host` (brackets around an IPv6 address allowed, no port), or why it
/// is not a host. See the module documentation for the form.
pub fn canonical(host: &str) -> Result<String, InvalidHost> {
    let invalid = |reason| InvalidHost {
        name: host.chars().take(80).collect(),
        reason,
    };
    let bare = match host.strip_prefix('[') {
        Some(rest) => rest
            .strip_suffix(']')
            .ok_or_else(|| invalid("an unclosed '['"))?,
        None => host,
    };
    if bare.is_empty() {
        return Err(invalid("it is empty"));
    }
    if bare.len() != host.len() && !bare.contains(':') {
        return Err(invalid("brackets hold an IPv6 address only"));
    }
    // An IPv6 literal (always with a colon; a name never has one) or any IPv4 spelling.
    match crate::wire::literal::literal_ip(bare) {
        Some(ip) => return Ok(address(ip)),
        None if bare.contains(':') => return Err(invalid("not an IPv6 address")),
        None => {}
    }
    let name = bare.strip_suffix('.').unwrap_or(bare);
    // Most names are plain ASCII already: lower case them without the IDNA machinery. A label
    // that starts `xn--` is an A-label whose Punycode IDNA must check.
    let plain = name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        && !name
            .split('.')
            .any(|label| label.len() >= 4 && label[..4].eq_ignore_ascii_case("xn--"));
    let name = if plain {
        name.to_ascii_lowercase()
    } else {
        idna::domain_to_ascii_cow(name.as_bytes(), idna::AsciiDenyList::URL)
            .map_err(|_| invalid("not a valid internationalised (IDNA) name"))?
            .into_owned()
    };
    if name.is_empty() {
        return Err(invalid("it is empty"));
    }
    if name.len() > MAX_NAME {
        return Err(invalid("longer than 253 characters"));
    }
    for label in name.split('.') {
        if label.is_empty() {
            return Err(invalid(
                "an empty label (two dots in a row, or a leading dot)",
            ));
        }
        if label.len() > MAX_LABEL {
            return Err(invalid("a label longer than 63 characters"));
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        {
            return Err(invalid("a character no host name has"));
        }
    }
    Ok(name)
}

/// An address as a canonical host: the dotted quad, or IPv6 in its RFC 5952 form (what `Display`
/// writes), without brackets.
pub fn address(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => crate::wire::literal::dotted_quad(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => crate::wire::literal::dotted_quad(v4),
            None => v6.to_string(),
        },
    }
}

/// `host:port`, `[v6]:port`, a bare host or a bare IPv6 address as the canonical host and the
/// port if one is given: how names typed by people (a `[[host]]` pattern, `check --host`, the
/// admin API's `/hosts/<host>`) are read.
pub fn split(text: &str) -> Result<(String, Option<u16>), InvalidHost> {
    let text = text.trim();
    let bad_port = |p: &str| InvalidHost {
        name: text.chars().take(80).collect(),
        reason: if p.is_empty() {
            "an empty port"
        } else {
            "a port that is not 0 to 65535"
        },
    };
    if let Some(rest) = text.strip_prefix('[') {
        if let Some((ip, port)) = rest.split_once("]:") {
            let port = port.parse().map_err(|_| bad_port(port))?;
            return Ok((canonical(ip)?, Some(port)));
        }
        return Ok((canonical(text)?, None));
    }
    if text.matches(':').count() > 1 {
        // A bare IPv6 address.
        return Ok((canonical(text)?, None));
    }
    match text.split_once(':') {
        Some((host, port)) => {
            let port = port.parse().map_err(|_| bad_port(port))?;
            Ok((canonical(host)?, Some(port)))
        }
        None => Ok((canonical(text)?, None)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn spellings_of_one_name_are_one_name() {
        for (spelling, want) in [
            ("localhost", "localhost"),
            ("LOCALHOST", "localhost"),
            ("localhost.", "localhost"),
            ("LocalHost.", "localhost"),
            ("Bücher.Example", "xn--bcher-kva.example"),
            ("bücher.example.", "xn--bcher-kva.example"),
            ("XN--BCHER-KVA.example", "xn--bcher-kva.example"),
            ("[::1]", "::1"),
            ("0:0:0:0:0:0:0:1", "::1"),
            ("[::0001]", "::1"),
            ("[0000::1]", "::1"),
            ("[::ffff:127.0.0.1]", "127.0.0.1"),
            ("::FFFF:7F00:1", "127.0.0.1"),
            ("[2001:DB8:0:0:1:0:0:1]", "2001:db8::1:0:0:1"),
            ("127.1", "127.0.0.1"),
            ("0x7f000001", "127.0.0.1"),
            ("127.0.0.1.", "127.0.0.1"),
            ("_dmarc.a.test", "_dmarc.a.test"),
        ] {
            assert_eq!(canonical(spelling).as_deref(), Ok(want), "{spelling}");
        }
    }

    #[test]
    fn names_that_are_not_hosts_are_refused() {
        for name in [
            "",
            ".",
            "a..b",
            ".a.test",
            "a.test..",
            "a test",
            "a/b",
            "a%2eb",
            "[::1",
            "[a.test]",
            "1::2::3",
            "xn--a.test",
            "a\u{0}b",
            &"a".repeat(64),
            &["abc"; 70].join("."),
        ] {
            assert!(canonical(name).is_err(), "{name:?} taken as a host");
        }
    }

    #[test]
    fn typed_names_split_into_a_canonical_host_and_a_port() {
        assert_eq!(
            split("Slow.Test.:8080"),
            Ok(("slow.test".into(), Some(8080)))
        );
        assert_eq!(split("slow.test."), Ok(("slow.test".into(), None)));
        assert_eq!(split("[0:0::1]:80"), Ok(("::1".into(), Some(80))));
        assert_eq!(split("[::1]"), Ok(("::1".into(), None)));
        assert_eq!(split("::1"), Ok(("::1".into(), None)));
        assert!(split("a.test:x").is_err());
        assert!(split("a.test:").is_err());
        assert!(split("a..test:80").is_err());
    }

    /// A case mix of `name`, chosen by `mask`.
    fn case_mix(name: &str, mask: u64) -> String {
        name.chars()
            .enumerate()
            .map(|(i, c)| {
                // Only a letter whose upper case is one letter that lower-cases back (`ß` upper
                // cases to `SS`, another name).
                let mut upper = c.to_uppercase();
                match (upper.next(), upper.next()) {
                    (Some(u), None) if mask >> (i % 64) & 1 == 1 && u.to_lowercase().eq([c]) => u,
                    _ => c,
                }
            })
            .collect()
    }

    /// Every IPv6 spelling `std` and resolvers read as `v6`: each group zero-padded to any width
    /// up to four, upper or lower case, with or without the longest zero run compressed.
    fn v6_spelling(v6: std::net::Ipv6Addr, pad: u8, upper: bool, compress: bool) -> String {
        let groups: Vec<String> = v6
            .segments()
            .iter()
            .map(|g| {
                let s = format!("{g:0width$x}", width = usize::from(pad % 5));
                if upper {
                    s.to_uppercase()
                } else {
                    s
                }
            })
            .collect();
        let full = groups.join(":");
        if !compress {
            return full;
        }
        // Compress the first run of zero groups, whatever its length.
        let segments = v6.segments();
        let Some(start) = segments.iter().position(|g| *g == 0) else {
            return full;
        };
        let end = segments[start..]
            .iter()
            .position(|g| *g != 0)
            .map_or(8, |n| start + n);
        format!("{}::{}", groups[..start].join(":"), groups[end..].join(":"))
    }

    proptest! {
        #[test]
        fn every_spelling_of_a_name_gets_one_key(
            labels in proptest::collection::vec("[a-z0-9][a-z0-9-]{0,10}[a-z0-9]", 1..4),
            unicode in proptest::option::of("[äöüéñß]{1,3}"),
            mask in any::<u64>(),
            dot in any::<bool>(),
            port in any::<u16>(),
        ) {
            let mut name = labels.join(".");
            if let Some(u) = &unicode {
                name = format!("{u}{name}");
            }
            let Ok(key) = canonical(&name) else { return Ok(()); };
            let a_label = key.clone();
            let spelled = format!("{}{}", case_mix(&name, mask), if dot { "." } else { "" });
            prop_assert_eq!(canonical(&spelled), Ok(key.clone()));
            prop_assert_eq!(canonical(&case_mix(&a_label, mask)), Ok(key.clone()));
            prop_assert_eq!(
                split(&format!("{spelled}:{port}")),
                Ok((key.clone(), Some(port)))
            );
            prop_assert_eq!(
                crate::wire::host_key::host_key(&canonical(&spelled).unwrap_or_default(), port),
                crate::wire::host_key::host_key(&key, port)
            );
        }

        #[test]
        fn every_spelling_of_an_address_gets_one_key(
            bits in any::<u128>(),
            v4 in any::<u32>(),
            mapped in any::<bool>(),
            pad in 0u8..5,
            upper in any::<bool>(),
            compress in any::<bool>(),
            brackets in any::<bool>(),
        ) {
            let v4 = std::net::Ipv4Addr::from(v4);
            let v6 = if mapped { v4.to_ipv6_mapped() } else { std::net::Ipv6Addr::from(bits) };
            let key = canonical(&v6.to_string()).unwrap_or_default();
            let spelled = v6_spelling(v6, pad, upper, compress);
            let spelled = if brackets { format!("[{spelled}]") } else { spelled };
            prop_assert_eq!(canonical(&spelled), Ok(key.clone()));
            if mapped {
                prop_assert_eq!(&key, &v4.to_string());
                let n = u32::from(v4);
                for numeric in [
                    v4.to_string(),
                    format!("{v4}."),
                    n.to_string(),
                    format!("0x{n:x}"),
                    format!("0{n:o}"),
                    format!("{}.{}", n >> 24, n & 0xff_ffff),
                ] {
                    prop_assert_eq!(canonical(&numeric), Ok(key.clone()), "{}", numeric);
                }
            } else {
                prop_assert_eq!(key.parse::<std::net::IpAddr>().ok(), Some(match v6.to_ipv4_mapped() {
                    Some(v4) => IpAddr::V4(v4),
                    None => IpAddr::V6(v6),
                }));
            }
        }
    }
}
