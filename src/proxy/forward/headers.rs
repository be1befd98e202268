//! What courtesy changes in the headers it passes on: hop-by-hop headers go (RFC 9110 7.6.1), its
//! own request headers (`Courtesy-On-Cooldown`) are read and taken out, and its own `Via` entry is
//! added with the protocol version of the message it received.

use http::header::{HeaderName, HeaderValue, CONNECTION};
use http::{HeaderMap, Version};

use crate::config::{ConfigWord as _, OnCooldown};
use crate::proxy::answer::failure::Failure;
use crate::proxy::answer::timing::SERVER_TIMING;

/// A client's own answer to a cooldown for this request (`auto`, `hold` or `reject`), overriding the
/// host's `on_cooldown`. Never forwarded.
pub(crate) const ON_COOLDOWN_HEADER: &str = "courtesy-on-cooldown";

/// [`ON_COOLDOWN_HEADER`] as a header name made at compile time (looked up on every request).
const ON_COOLDOWN: HeaderName = HeaderName::from_static(ON_COOLDOWN_HEADER);

/// Takes `Courtesy-On-Cooldown` out of the headers: the request's own choice, `None` without one,
/// or a 400 for a value other than `auto`, `hold` or `reject`.
pub(crate) fn own_cooldown_choice(headers: &mut HeaderMap) -> Result<Option<OnCooldown>, Failure> {
    let values: Vec<HeaderValue> = headers.get_all(&ON_COOLDOWN).iter().cloned().collect();
    if values.is_empty() {
        return Ok(None);
    }
    headers.remove(&ON_COOLDOWN);
    let mut choice = None;
    for value in &values {
        let word = value.to_str().unwrap_or("").trim().to_ascii_lowercase();
        let Some(this) = OnCooldown::from_word(&word) else {
            return Err(Failure::bad_request(format!(
                "Courtesy-On-Cooldown must be \"auto\", \"hold\" or \"reject\", got {value:?}"
            )));
        };
        if let Some(before) = choice.filter(|c| *c != this) {
            return Err(Failure::bad_request(format!(
                "Courtesy-On-Cooldown says both \"{before}\" and \"{this}\""
            )));
        }
        choice = Some(this);
    }
    Ok(choice)
}

/// Whether `name` describes one connection, not the message: never forwarded either way. Asked
/// of every header of every message, so it is one `match` on the name's text (a jump on its
/// length, then one comparison), not a scan of a list of names.
fn is_hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "proxy-authorization"
            | "proxy-authenticate"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
    )
}

/// Removes hop-by-hop headers: the fixed list and every header named in `Connection`.
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    strip(headers, &[]);
}

/// Removes what a request does not take upstream: its hop-by-hop headers, and a client's own
/// `Server-Timing` (a response header, which courtesy adds to the answer; not the origin's
/// business).
pub(crate) fn strip_request(headers: &mut HeaderMap) {
    strip(headers, &[SERVER_TIMING]);
}

/// Removes the hop-by-hop headers and those named in `also`.
fn strip(headers: &mut HeaderMap, also: &[HeaderName]) {
    // One pass over the few names a message has, against names made at compile time; the common
    // message has one hop-by-hop field or none, and nothing is allocated then but that one.
    let mut doomed: Vec<HeaderName> = headers
        .keys()
        .filter(|name| is_hop_by_hop(name) || also.contains(name))
        .cloned()
        .collect();
    if doomed.contains(&CONNECTION) {
        doomed.extend(
            headers
                .get_all(CONNECTION)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .flat_map(|v| v.split(','))
                .map(str::trim)
                // The usual tokens name no field to remove (keep-alive is in the list already).
                .filter(|t| {
                    !t.eq_ignore_ascii_case("keep-alive") && !t.eq_ignore_ascii_case("close")
                })
                .filter_map(|name| HeaderName::from_bytes(name.as_bytes()).ok()),
        );
    }
    for name in &doomed {
        headers.remove(name);
    }
}

/// Our `Via` entry (`1.1 courtesy-…`) for a message received as `version`.
pub(crate) fn via_for(version: Version, ours: &HeaderValue) -> HeaderValue {
    if version == Version::HTTP_11 {
        return ours.clone();
    }
    let protocol = match version {
        Version::HTTP_09 => "0.9",
        Version::HTTP_10 => "1.0",
        Version::HTTP_2 => "2",
        Version::HTTP_3 => "3",
        _ => "1.1",
    };
    let ours = ours.to_str().unwrap_or("1.1 courtesy");
    let name = ours.split_once(' ').map_or(ours, |(_, n)| n);
    HeaderValue::from_str(&format!("{protocol} {name}"))
        .unwrap_or_else(|_| HeaderValue::from_static("1.1 courtesy"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_go_and_end_to_end_ones_stay() {
        let mut h = HeaderMap::new();
        for (k, v) in [
            ("connection", "close, x-secret"),
            ("x-secret", "1"),
            ("keep-alive", "timeout=5"),
            ("proxy-connection", "keep-alive"),
            ("proxy-authorization", "Basic Zm9v"),
            ("proxy-authenticate", "Basic realm=\"x\""),
            ("te", "trailers"),
            ("trailer", "x-sum"),
            ("upgrade", "websocket"),
            ("transfer-encoding", "chunked"),
            ("accept", "*/*"),
            ("cookie", "a=b"),
        ] {
            h.append(k, HeaderValue::from_static(v));
        }
        strip_hop_by_hop(&mut h);
        // Fields of different names keep no order between them (RFC 9110 5.3).
        let mut left: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        left.sort_unstable();
        assert_eq!(left, vec!["accept", "cookie"]);
    }

    #[test]
    fn the_cooldown_choice_is_read_and_never_forwarded() {
        let mut h = HeaderMap::new();
        h.insert("courtesy-on-cooldown", HeaderValue::from_static(" Hold "));
        h.insert("accept", HeaderValue::from_static("*/*"));
        assert_eq!(
            own_cooldown_choice(&mut h).ok(),
            Some(Some(OnCooldown::Hold))
        );
        assert!(!h.contains_key("courtesy-on-cooldown"));
        assert_eq!(own_cooldown_choice(&mut h).ok(), Some(None));
        h.insert("courtesy-on-cooldown", HeaderValue::from_static("wait"));
        let err = own_cooldown_choice(&mut h).err().map(|f| f.status.as_u16());
        assert_eq!(err, Some(400));
        assert!(!h.contains_key("courtesy-on-cooldown"));
        h.append("courtesy-on-cooldown", HeaderValue::from_static("hold"));
        h.append("courtesy-on-cooldown", HeaderValue::from_static("reject"));
        assert!(own_cooldown_choice(&mut h).is_err());
    }

    #[test]
    fn via_names_the_protocol_version() {
        let ours = HeaderValue::from_static("1.1 courtesy-0000abcd");
        assert_eq!(via_for(Version::HTTP_11, &ours), "1.1 courtesy-0000abcd");
        assert_eq!(via_for(Version::HTTP_10, &ours), "1.0 courtesy-0000abcd");
    }
}
