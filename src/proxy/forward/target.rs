//! Where a request goes: the target host and port read from a request line, a CONNECT authority
//! or a robots.txt redirect, and the `Host` header that goes with it.
//!
//! This module only parses; the budget key it yields is [`crate::wire::host_key::host_key`].

use std::net::IpAddr;

use http::Uri;

use crate::proxy::answer::failure::Failure;
use crate::wire::scheme::Scheme;

/// Where a request goes: the canonical host ([`crate::wire::host_name::canonical`], no brackets), an
/// explicit port, and the authority as sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) authority: String,
    /// The address `host` spells, when it is a literal (read once, for the loop guard and the
    /// destination check).
    pub(crate) ip: Option<IpAddr>,
}

impl Target {
    /// The target of a forwarded request: absolute-form `http://` only.
    pub(crate) fn of_request(uri: &Uri) -> Result<Target, Failure> {
        let Some(authority) = uri.authority() else {
            return Err(Failure::bad_request(
                "a proxy request needs an absolute URI such as http://example.com/ \
                 (is HTTP_PROXY pointing at courtesy?)",
            ));
        };
        match Scheme::of_uri(uri) {
            Some(Scheme::Http) => {}
            Some(Scheme::Https) => {
                return Err(Failure::bad_request(
                    "https:// URLs go through CONNECT (set HTTPS_PROXY)",
                ))
            }
            None => return Err(Failure::bad_request("only http:// URLs can be forwarded")),
        }
        Target::new(
            authority.host(),
            authority.port_u16().unwrap_or(Scheme::Http.default_port()),
            authority.as_str(),
        )
    }

    /// The target of any absolute http:// or https:// URL (robots.txt redirects), and its scheme.
    pub(crate) fn of_any(uri: &Uri) -> Result<(Target, Scheme), Failure> {
        let authority = uri
            .authority()
            .ok_or_else(|| Failure::bad_request("no authority"))?;
        let scheme =
            Scheme::of_uri(uri).ok_or_else(|| Failure::bad_request("only http and https"))?;
        let target = Target::new(
            authority.host(),
            authority.port_u16().unwrap_or(scheme.default_port()),
            authority.as_str(),
        )?;
        Ok((target, scheme))
    }

    /// The target of a CONNECT: authority-form `host:port`, port required.
    pub(crate) fn of_connect(uri: &Uri) -> Result<Target, Failure> {
        let authority = uri
            .authority()
            .ok_or_else(|| Failure::bad_request("CONNECT needs a host:port target"))?;
        let port = authority
            .port_u16()
            .ok_or_else(|| Failure::bad_request("CONNECT needs a host:port target with a port"))?;
        Target::new(authority.host(), port, authority.as_str())
    }

    fn new(host: &str, port: u16, authority: &str) -> Result<Target, Failure> {
        if authority.contains('@') {
            // RFC 9110 4.2.4: userinfo in an http(s) URI is deprecated and to be treated as an
            // error; forwarding it would send the credentials to the origin in the clear.
            return Err(Failure::bad_request(
                "the URL carries credentials (user:password@); send them in a header instead",
            ));
        }
        // One host, one name: every spelling of the host is the one canonical name (lower case,
        // no trailing dot, IDNA A-labels, RFC 5952 IPv6, IPv4 as a dotted quad), so that no
        // spelling escapes the host's budget, rules, cooldowns and pauses.
        let host = crate::wire::host_name::canonical(host)
            .map_err(|e| Failure::bad_request(e.to_string()))?;
        let ip = crate::wire::literal::literal_ip(&host);
        Ok(Target {
            host,
            port,
            authority: authority.to_string(),
            ip,
        })
    }

    /// The `host:port` key of this target (`key = "host"`).
    pub(crate) fn key(&self) -> String {
        crate::wire::host_key::host_key(&self.host, self.port)
    }

    /// `scheme://host:port`: the origin a robots.txt answers for (RFC 9309), as the robots cache
    /// keys it. Made on every request that obeys robots.txt, without `format!`.
    pub(crate) fn origin_key(&self, scheme: Scheme) -> String {
        let scheme = scheme.as_str();
        let mut origin = String::with_capacity(scheme.len() + self.host.len() + 11);
        origin.push_str(scheme);
        origin.push_str("://");
        // Writing into a String cannot fail.
        let _ = crate::wire::host_key::write_host_key(&mut origin, &self.host, self.port);
        origin
    }

    /// The `Host` header for this target: the authority, without the scheme's default port.
    pub(crate) fn host_header(&self, scheme: Scheme) -> &str {
        let default = match scheme {
            Scheme::Https => ":443",
            Scheme::Http => ":80",
        };
        self.authority
            .strip_suffix(default)
            .unwrap_or(&self.authority)
    }
}

/// `host:port` (`[v6]:port`), as [`Target::key`] spells it, written without an allocation: what
/// log lines and spans name the target by.
impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        crate::wire::host_key::write_host_key(f, &self.host, self.port)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_lowercased_with_explicit_ports() {
        let t = Target::of_request(&"http://Example.COM/x".parse().unwrap()).unwrap();
        assert_eq!(t.key(), "example.com:80");
        let t = Target::of_request(&"http://[::1]:8080/".parse().unwrap()).unwrap();
        assert_eq!((t.host.as_str(), t.key().as_str()), ("::1", "[::1]:8080"));
        assert!(Target::of_request(&"/relative".parse().unwrap()).is_err());
        assert!(Target::of_request(&"https://a.test/".parse().unwrap()).is_err());
        assert!(Target::of_request(&"ftp://a.test/".parse().unwrap()).is_err());
        let c = Target::of_connect(&"a.test:443".parse().unwrap()).unwrap();
        assert_eq!(c.key(), "a.test:443");
        assert_eq!(c.to_string(), c.key());
        assert_eq!(c.origin_key(Scheme::Https), "https://a.test:443");
        let v6 = Target::of_request(&"http://[::1]:8080/".parse().unwrap()).unwrap();
        assert_eq!(v6.to_string(), v6.key());
        assert!(Target::of_request(&"http://user:pass@a.test/".parse().unwrap()).is_err());
        assert!(Target::of_connect(&"user@a.test:443".parse().unwrap()).is_err());
    }
}
