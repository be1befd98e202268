//! The two URL schemes courtesy forwards, as one closed set ([`Scheme`]): read once where a URL
//! comes in (a request line, a CONNECT's decrypted or plain requests, a robots.txt redirect) and
//! carried as itself to the `Host` header, the robots.txt cache key, the span and the trace;
//! spelled only by [`Scheme::as_str`].

use http::Uri;

/// `http` or `https`: the scheme of a request courtesy forwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Scheme {
    /// `http://`: plain HTTP, default port 80.
    Http,
    /// `https://`: HTTP over TLS, default port 443.
    Https,
}

impl Scheme {
    /// The scheme of `uri`, in any case; `None` for a URI without one or with another.
    pub(crate) fn of_uri(uri: &Uri) -> Option<Scheme> {
        match uri.scheme_str() {
            Some(s) if s.eq_ignore_ascii_case("http") => Some(Scheme::Http),
            Some(s) if s.eq_ignore_ascii_case("https") => Some(Scheme::Https),
            _ => None,
        }
    }

    /// The scheme of `uri`, `http` unless it says `https` (a request whose URI has passed
    /// [`Scheme::of_uri`] on the way in, or none at all).
    pub(crate) fn of_uri_or_http(uri: &Uri) -> Scheme {
        Scheme::of_uri(uri).unwrap_or(Scheme::Http)
    }

    /// The scheme as written in a URL, lower case: `http` or `https`.
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }

    /// The port a URL of this scheme means when it names none.
    pub(crate) const fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemes_are_read_in_any_case_and_written_in_lower_case() {
        let of = |s: &str| Scheme::of_uri(&s.parse().unwrap());
        assert_eq!(of("http://a.test/"), Some(Scheme::Http));
        assert_eq!(of("HTTPS://a.test/"), Some(Scheme::Https));
        assert_eq!(of("ftp://a.test/"), None);
        assert_eq!(of("/relative"), None);
        assert_eq!(Scheme::of_uri_or_http(&"/x".parse().unwrap()), Scheme::Http);
        assert_eq!(
            (Scheme::Http.as_str(), Scheme::Https.as_str()),
            ("http", "https")
        );
        assert_eq!(
            (Scheme::Http.default_port(), Scheme::Https.default_port()),
            (80, 443)
        );
    }
}
