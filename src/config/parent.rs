//! Parent proxies as the config names them: `upstream_proxy = "http://user:pass@host:port"`,
//! `"socks5://…"`, `"socks5h://…"` or `"direct"`, parsed into an [`UpstreamProxy`] (or the
//! [`Route`] a host's requests take), with its credentials kept out of every `Debug`, `Display`,
//! log line, page and error (`user:***`).
//!
//! This module only parses and names; dialing a parent is `crate::upstream::parent`'s job.

use std::fmt;
use std::sync::Arc;

/// The port of a `socks5://` or `socks5h://` parent written without one (IANA's SOCKS port). An
/// `http://` parent has no such port (Squid's 3128, 8080, tinyproxy's 8888 are all common, and
/// 3128 is courtesy's own): it must be written.
pub const SOCKS_DEFAULT_PORT: u16 = 1080;

/// How courtesy speaks to a parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ParentScheme {
    /// An HTTP proxy: absolute-form requests for `http://` targets, CONNECT for the rest.
    Http,
    /// SOCKS5 (RFC 1928), the target's name resolved by courtesy and its address sent (curl's
    /// `socks5://`).
    Socks5,
    /// SOCKS5 with the target's name sent for the parent to resolve (curl's `socks5h://`).
    Socks5h,
}

impl ParentScheme {
    /// The scheme as written in the URL.
    pub fn word(self) -> &'static str {
        match self {
            ParentScheme::Http => "http",
            ParentScheme::Socks5 => "socks5",
            ParentScheme::Socks5h => "socks5h",
        }
    }
}

/// A user name and password for a parent, percent-decoded. Never printed.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ParentCredentials {
    /// The user name (shown in redacted forms).
    pub user: String,
    /// The password (never shown).
    pub password: String,
}

impl fmt::Debug for ParentCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:***", self.user)
    }
}

/// A parent proxy: where it is, how to speak to it, and the credentials it wants.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct UpstreamProxy {
    /// How courtesy speaks to it.
    pub scheme: ParentScheme,
    /// Its host name or IP address (lowercase, no brackets).
    pub host: String,
    /// Its port.
    pub port: u16,
    /// `user:password` from the URL, if any.
    pub credentials: Option<ParentCredentials>,
}

impl UpstreamProxy {
    /// Parses a parent URL; the error says what is wrong without repeating the password.
    pub fn parse(text: &str) -> Result<UpstreamProxy, String> {
        let text = text.trim();
        let (scheme, rest) = text
            .split_once("://")
            .ok_or("must be a URL such as \"http://host:3128\" or \"socks5h://host:1080\"")?;
        let scheme = match scheme.to_ascii_lowercase().as_str() {
            "http" => ParentScheme::Http,
            "socks5" => ParentScheme::Socks5,
            "socks5h" => ParentScheme::Socks5h,
            "https" => {
                return Err(
                    "https:// parents (TLS to the proxy itself) are not supported; \
                            use http:// (https targets still go end to end through CONNECT)"
                        .into(),
                )
            }
            other => {
                return Err(format!(
                    "must use http://, socks5:// or socks5h://, got {other:?}://"
                ))
            }
        };
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        if authority.contains(['/', '?', '#']) {
            return Err("must be scheme://[user:password@]host:port with no path".into());
        }
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((userinfo, hostport)) => (Some(userinfo), hostport),
            None => (None, authority),
        };
        let (host, port) = split_host_port(hostport)?;
        let port = match (port, scheme) {
            (Some(port), _) => port,
            (None, ParentScheme::Http) => {
                return Err(format!(
                    "needs a port: an http:// parent has no default port (write \
                     \"http://{host}:3128\" or whatever the parent listens on)"
                ))
            }
            (None, _) => SOCKS_DEFAULT_PORT,
        };
        let credentials = userinfo.map(parse_userinfo).transpose()?;
        if let (Some(c), ParentScheme::Socks5 | ParentScheme::Socks5h) = (&credentials, scheme) {
            // RFC 1929: each is one length byte and 1 to 255 bytes.
            if c.user.is_empty() || c.user.len() > 255 || c.password.len() > 255 {
                return Err(
                    "a SOCKS5 user name must have 1 to 255 bytes and a password at most 255".into(),
                );
            }
        }
        Ok(UpstreamProxy {
            scheme,
            host,
            port,
            credentials,
        })
    }

    /// `host:port` (IPv6 in brackets): how the parent is named in `Proxy-Status`, logs and metrics.
    pub fn endpoint(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

impl fmt::Display for UpstreamProxy {
    /// The URL with the password replaced by `***`: `http://user:***@host:3128`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://", self.scheme.word())?;
        if let Some(c) = &self.credentials {
            write!(f, "{}:***@", c.user)?;
        }
        f.write_str(&self.endpoint())
    }
}

impl fmt::Debug for UpstreamProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "UpstreamProxy({self})")
    }
}

/// The way a host's requests leave courtesy: straight to the target, or through a parent.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Route {
    /// Straight to the target (no `upstream_proxy`, or `upstream_proxy = "direct"`).
    #[default]
    Direct,
    /// Through this parent.
    Parent(Arc<UpstreamProxy>),
}

impl Route {
    /// `direct`, or the parent as `scheme://host:port` with no user or password at all: how
    /// `/hosts` names a route.
    pub fn without_credentials(&self) -> String {
        match self {
            Route::Direct => "direct".into(),
            Route::Parent(p) => format!("{}://{}", p.scheme.word(), p.endpoint()),
        }
    }

    /// `"direct"` or a parent URL, as an `upstream_proxy` value says it.
    pub fn parse(text: &str) -> Result<Route, String> {
        if text.trim().eq_ignore_ascii_case("direct") {
            return Ok(Route::Direct);
        }
        UpstreamProxy::parse(text).map(|p| Route::Parent(Arc::new(p)))
    }

    /// The parent, if the route has one.
    pub fn parent(&self) -> Option<&Arc<UpstreamProxy>> {
        match self {
            Route::Direct => None,
            Route::Parent(p) => Some(p),
        }
    }
}

impl fmt::Display for Route {
    /// `direct`, or the parent's URL without its password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Route::Direct => f.write_str("direct"),
            Route::Parent(p) => p.fmt(f),
        }
    }
}

/// `host:port`, `host`, `[v6]:port` or `[v6]`: the host lowercased without brackets, and the port.
fn split_host_port(text: &str) -> Result<(String, Option<u16>), String> {
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or("has an IPv6 address without its closing ]")?;
        if host.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(format!("has an invalid IPv6 address [{host}]"));
        }
        match after {
            "" => (host, None),
            p => (host, Some(p.strip_prefix(':').ok_or("has junk after ]")?)),
        }
    } else {
        match text.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        }
    };
    let valid = |c: char| c.is_ascii_alphanumeric() || "-._:".contains(c);
    if host.is_empty() || !host.chars().all(valid) {
        return Err(format!("needs a host name or IP address, got {host:?}"));
    }
    let port = match port {
        None => None,
        Some(p) => match p.parse::<u16>() {
            Ok(port) if port > 0 => Some(port),
            _ => return Err(format!("has an invalid port {p:?} (1 to 65535)")),
        },
    };
    Ok((host.to_ascii_lowercase(), port))
}

/// `user:password` (percent-encoded, as in any URL) as credentials.
fn parse_userinfo(text: &str) -> Result<ParentCredentials, String> {
    let (user, password) = text.split_once(':').unwrap_or((text, ""));
    let decode = |part: &str, what: &str| {
        percent_encoding::percent_decode_str(part)
            .decode_utf8()
            .map(|s| s.into_owned())
            .map_err(|_| format!("has a {what} that is not UTF-8 once percent-decoded"))
    };
    let user = decode(user, "user name")?;
    if user.is_empty() {
        return Err("has credentials without a user name (user:password@host)".into());
    }
    Ok(ParentCredentials {
        password: decode(password, "password")?,
        user,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parent_urls_parse_with_defaults_and_redact_their_passwords() {
        let p = UpstreamProxy::parse("http://crawler:s%40cret@Proxy.Corp:3128").unwrap();
        assert_eq!(p.scheme, ParentScheme::Http);
        assert_eq!(p.endpoint(), "proxy.corp:3128");
        let c = p.credentials.as_ref().unwrap();
        assert_eq!(
            (c.user.as_str(), c.password.as_str()),
            ("crawler", "s@cret")
        );
        assert_eq!(p.to_string(), "http://crawler:***@proxy.corp:3128");
        assert!(!format!("{p:?}").contains("cret"));
        let s = UpstreamProxy::parse("socks5h://[::1]").unwrap();
        assert_eq!(
            (s.scheme, s.endpoint()),
            (ParentScheme::Socks5h, "[::1]:1080".to_string())
        );
        assert_eq!(
            UpstreamProxy::parse("socks5://127.0.0.1:9050/")
                .unwrap()
                .to_string(),
            "socks5://127.0.0.1:9050"
        );
        assert_eq!(Route::parse("DIRECT").unwrap(), Route::Direct);
    }

    #[test]
    fn bad_parent_urls_say_why_without_the_password() {
        for (text, says) in [
            ("proxy.corp:3128", "must be a URL"),
            ("ftp://proxy.corp:21", "must use http://"),
            ("https://proxy.corp:443", "not supported"),
            ("http://proxy.corp", "needs a port"),
            ("http://proxy.corp:0", "invalid port"),
            ("http://proxy.corp:99999", "invalid port"),
            ("http://proxy.corp:3128/path", "no path"),
            ("http://:hunter2@proxy.corp:3128", "without a user name"),
            ("http://pro xy:3128", "needs a host"),
            ("socks5://[::1:1080", "closing ]"),
        ] {
            let err = UpstreamProxy::parse(text).unwrap_err();
            assert!(err.contains(says), "{text}: {err}");
            assert!(!err.contains("hunter2"), "{err}");
        }
    }
}
