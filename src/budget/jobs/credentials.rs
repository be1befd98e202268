//! Reading `Proxy-Authorization: Basic` (RFC 7617) and checking a job's token. The token is
//! compared as a SHA-256 digest in constant time, so neither its length nor its first wrong byte
//! shows in the time an answer takes; it is never kept or logged.

use base64::Engine as _;
use http::header::PROXY_AUTHORIZATION;
use http::HeaderMap;

use crate::config::secrets::sha256;
use crate::config::JobSettings;

/// The username and password of the request's `Proxy-Authorization: Basic`, `None` without
/// the header, or why it cannot be read (another scheme, bad base64, no colon).
pub(super) fn basic(headers: &HeaderMap) -> Result<Option<(String, String)>, &'static str> {
    let Some(value) = headers.get(PROXY_AUTHORIZATION) else {
        return Ok(None);
    };
    let text = value.to_str().map_err(|_| "not readable text")?.trim();
    let (scheme, encoded) = text.split_once(' ').ok_or("expected \"Basic <base64>\"")?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return Err("only the Basic scheme is supported");
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .map_err(|_| "the credentials are not base64")?;
    let decoded = String::from_utf8(decoded).map_err(|_| "the credentials are not UTF-8")?;
    let (user, password) = decoded
        .split_once(':')
        .ok_or("the credentials have no ':' between name and token")?;
    Ok(Some((user.to_string(), password.to_string())))
}

/// Whether `password` is `job`'s token (given plain or as its SHA-256).
pub(super) fn token_matches(job: &JobSettings, password: &str) -> bool {
    let given = sha256(password.as_bytes());
    let want = match (&job.token, &job.token_sha256) {
        (Some(token), _) => sha256(token.as_bytes()),
        (None, Some(hash)) => *hash,
        (None, None) => return false,
    };
    constant_time_eq(&given, &want)
}

/// Equality of two digests in time that does not depend on where they differ.
fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(PROXY_AUTHORIZATION, value.parse().unwrap());
        h
    }

    #[test]
    fn basic_credentials_are_read_and_bad_ones_named() {
        // "crawl-a:s3cret:with:colons"
        let encoded =
            base64::engine::general_purpose::STANDARD.encode("crawl-a:s3cret:with:colons");
        assert_eq!(
            basic(&headers(&format!("Basic {encoded}"))).unwrap(),
            Some(("crawl-a".into(), "s3cret:with:colons".into()))
        );
        assert_eq!(basic(&HeaderMap::new()).unwrap(), None);
        assert!(basic(&headers("Bearer abc")).is_err());
        assert!(basic(&headers("Basic !!!")).is_err());
        let no_colon = base64::engine::general_purpose::STANDARD.encode("crawl-a");
        assert!(basic(&headers(&format!("Basic {no_colon}"))).is_err());
    }

    #[test]
    fn a_token_matches_plain_or_hashed_and_nothing_else() {
        let token = "a-long-random-token-0123";
        let mut job = JobSettings {
            name: "a".into(),
            token: Some(token.into()),
            ..JobSettings::default()
        };
        assert!(token_matches(&job, token));
        assert!(!token_matches(&job, "a-long-random-token-0124"));
        assert!(!token_matches(&job, ""));
        job.token = None;
        job.token_sha256 = Some(sha256(token.as_bytes()));
        assert!(token_matches(&job, token));
        assert!(!token_matches(&job, "wrong"));
        job.token_sha256 = None;
        assert!(!token_matches(&job, token));
    }
}
