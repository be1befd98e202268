//! The kinds of value that only the process's own keys take (`[proxy]`, `[admin]`, `[alerts]`,
//! `[shared]`): addresses, networks, ports, paths, the admin token, the webhook, the store's URL
//! and key prefix. Checks that need another key (a TLS file needs a TLS URL) are the section
//! validator's.

use std::net::SocketAddr;
use std::path::PathBuf;

use ipnet::IpNet;
use toml::Spanned;

use super::kinds::{array, Kind};
use super::Say;
use crate::config::pattern::parse_network;

/// An `ip:port` socket address.
pub(crate) struct Address;

impl Kind<String, SocketAddr> for Address {
    fn check(
        &self,
        text: String,
        at: usize,
        key: &str,
        say: &mut Say<'_, '_>,
    ) -> Option<SocketAddr> {
        let parsed = text.parse::<SocketAddr>().ok();
        if parsed.is_none() {
            let label = say.label;
            say.error(
                at,
                &format!("{label} {key} must be an IP address and port such as \"127.0.0.1:3128\", got {text:?}"),
            );
        }
        parsed
    }

    fn show(&self, addr: &SocketAddr) -> Option<toml::Value> {
        Some(toml::Value::String(addr.to_string()))
    }

    fn takes(&self) -> String {
        "an IP address and port".into()
    }
}

/// A list of CIDR networks or single addresses; a bad entry is reported on its own line and
/// left out.
pub(crate) struct Networks;

impl Kind<Vec<Spanned<String>>, Vec<IpNet>> for Networks {
    fn check(
        &self,
        list: Vec<Spanned<String>>,
        _: usize,
        key: &str,
        say: &mut Say<'_, '_>,
    ) -> Option<Vec<IpNet>> {
        let mut nets = Vec::new();
        for entry in list {
            match parse_network(entry.get_ref()) {
                Ok(net) => nets.push(net),
                Err(()) => {
                    let label = say.label;
                    say.error(
                        entry.span().start,
                        &format!(
                            "{label} {key}: expected a CIDR network such as \"10.0.0.0/8\" or an IP address, got {:?}",
                            entry.get_ref()
                        ),
                    );
                }
            }
        }
        Some(nets)
    }

    fn show(&self, nets: &Vec<IpNet>) -> Option<toml::Value> {
        array(nets.iter().map(|n| toml::Value::String(n.to_string())))
    }

    fn takes(&self) -> String {
        "a list of CIDR networks or IP addresses".into()
    }
}

/// A list of TCP ports; a bad entry is reported on its own line and left out.
pub(crate) struct Ports;

impl Kind<Vec<Spanned<i64>>, Vec<u16>> for Ports {
    fn check(
        &self,
        list: Vec<Spanned<i64>>,
        _: usize,
        key: &str,
        say: &mut Say<'_, '_>,
    ) -> Option<Vec<u16>> {
        let mut ports = Vec::new();
        for entry in list {
            let port = *entry.get_ref();
            match u16::try_from(port) {
                Ok(port) if port > 0 => ports.push(port),
                _ => {
                    let label = say.label;
                    say.error(
                        entry.span().start,
                        &format!("{label} {key}: a port must be between 1 and 65535, got {port}"),
                    );
                }
            }
        }
        Some(ports)
    }

    fn show(&self, ports: &Vec<u16>) -> Option<toml::Value> {
        array(ports.iter().map(|p| toml::Value::Integer(i64::from(*p))))
    }

    fn takes(&self) -> String {
        "a list of ports, 1 to 65535".into()
    }
}

/// A path, `~/` read as the home directory; it need not exist yet (a directory courtesy makes,
/// a file the section checks).
pub(crate) struct Path;

impl Kind<String, PathBuf> for Path {
    fn check(&self, path: String, at: usize, key: &str, say: &mut Say<'_, '_>) -> Option<PathBuf> {
        if path.trim().is_empty() {
            let label = say.label;
            say.error(at, &format!("{label} {key} must not be empty, got \"\""));
            return None;
        }
        Some(expand_home(&path))
    }

    /// A path's default depends on the machine: it is described, not shown.
    fn show(&self, _: &PathBuf) -> Option<toml::Value> {
        None
    }

    fn takes(&self) -> String {
        "a path".into()
    }
}

/// A file that must exist when the config is read.
pub(crate) struct ExistingFile;

impl Kind<String, PathBuf> for ExistingFile {
    fn check(&self, path: String, at: usize, key: &str, say: &mut Say<'_, '_>) -> Option<PathBuf> {
        let resolved = expand_home(&path);
        if resolved.is_file() {
            return Some(resolved);
        }
        let label = say.label;
        say.error(at, &format!("{label} {key}: no such file {path:?}"));
        None
    }

    fn show(&self, path: &PathBuf) -> Option<toml::Value> {
        Some(toml::Value::String(path.display().to_string()))
    }

    fn takes(&self) -> String {
        "a path to a file".into()
    }
}

/// The admin API's bearer token: at least 16 printable characters without spaces. Never shown.
pub(crate) struct Token;

impl Kind<String, String> for Token {
    fn check(&self, token: String, at: usize, key: &str, say: &mut Say<'_, '_>) -> Option<String> {
        let token = token.trim();
        if token.len() < 16 || token.chars().any(|c| c.is_whitespace() || c.is_control()) {
            let label = say.label;
            say.error(
                at,
                &format!("{label} {key} must be at least 16 printable characters without spaces (the value is not shown)"),
            );
            return None;
        }
        Some(token.to_string())
    }

    fn show(&self, _: &String) -> Option<toml::Value> {
        None
    }

    fn takes(&self) -> String {
        "16 printable characters or more, no spaces".into()
    }

    fn secret(&self) -> bool {
        true
    }
}

/// An `http://` or `https://` URL that may hold a secret in its path: shown redacted.
pub(crate) struct Webhook;

impl Kind<String, http::Uri> for Webhook {
    fn check(&self, url: String, at: usize, key: &str, say: &mut Say<'_, '_>) -> Option<http::Uri> {
        match url.parse::<http::Uri>() {
            Ok(uri)
                if matches!(uri.scheme_str(), Some("http" | "https")) && uri.host().is_some() =>
            {
                Some(uri)
            }
            _ => {
                let label = say.label;
                say.error(
                    at,
                    &format!(
                        "{label} {key} must be an http:// or https:// URL, got {:?}",
                        crate::util::redact::redacted(&url)
                    ),
                );
                None
            }
        }
    }

    fn show(&self, _: &http::Uri) -> Option<toml::Value> {
        None
    }

    fn takes(&self) -> String {
        "an http:// or https:// URL".into()
    }

    fn secret(&self) -> bool {
        true
    }
}

/// The store's URL: one server, a Cluster's seeds or Sentinels. Messages show it redacted.
pub(crate) struct StoreUrl;

impl Kind<String, String> for StoreUrl {
    fn check(&self, url: String, at: usize, key: &str, say: &mut Say<'_, '_>) -> Option<String> {
        if let Err(e) = crate::config::redis_url::topology(&url) {
            let label = say.label;
            let shown = crate::config::redis_url::redacted(&url);
            say.error(
                at,
                &format!(
                    "{label} {key} must be a redis:// or rediss:// URL (one server), \
                     redis+cluster://host:port,host:port,… (a Redis Cluster) or \
                     redis+sentinel://host:port,…/<master_name>[/<db>] (Sentinel), \
                     rediss+… with TLS; got {shown:?}: {e}"
                ),
            );
        }
        // Kept either way, so that the section's other checks see the URL.
        Some(url)
    }

    fn show(&self, _: &String) -> Option<toml::Value> {
        None
    }

    fn takes(&self) -> String {
        "redis://, rediss://, redis+cluster://, redis+sentinel:// (rediss+… with TLS)".into()
    }

    fn secret(&self) -> bool {
        true
    }
}

/// The prefix of the store's keys: 1 to 64 letters, digits or `-_.:`.
pub(crate) struct KeyPrefix;

impl Kind<String, String> for KeyPrefix {
    fn check(&self, p: String, at: usize, key: &str, say: &mut Say<'_, '_>) -> Option<String> {
        let fits = !p.is_empty()
            && p.len() <= 64
            && p.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.:".contains(c));
        if !fits {
            let label = say.label;
            say.error(
                at,
                &format!("{label} {key} must be 1 to 64 letters, digits or -_.: , got {p:?}"),
            );
            return None;
        }
        Some(p)
    }

    fn show(&self, p: &String) -> Option<toml::Value> {
        Some(toml::Value::String(p.clone()))
    }

    fn takes(&self) -> String {
        "1 to 64 of A-Z a-z 0-9 - _ . :".into()
    }
}

/// `path` with a leading `~/` read as the home directory.
pub(crate) fn expand_home(path: &str) -> PathBuf {
    match (path.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => PathBuf::from(home).join(rest),
        _ => PathBuf::from(path),
    }
}

/// A job's name, as a client puts it in its proxy URL's username: 1 to 64 letters, digits or
/// `-_.`; `anonymous` and `other` are courtesy's own.
pub(crate) struct JobName;

impl Kind<String, String> for JobName {
    fn check(&self, name: String, at: usize, key: &str, say: &mut Say<'_, '_>) -> Option<String> {
        let fits = !name.is_empty()
            && name.len() <= 64
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
        let label = say.label;
        if !fits {
            say.error(
                at,
                &format!("{label}: {key} must be 1 to 64 letters, digits or -_. , got {name:?}"),
            );
            return None;
        }
        if matches!(name.as_str(), "anonymous" | "other") {
            say.error(
                at,
                &format!("{label}: {key} {name:?} is courtesy's own (requests without credentials, and names past the bound); choose another"),
            );
            return None;
        }
        Some(name)
    }

    fn show(&self, name: &String) -> Option<toml::Value> {
        (!name.is_empty()).then(|| toml::Value::String(name.clone()))
    }

    fn takes(&self) -> String {
        "1 to 64 of A-Z a-z 0-9 - _ .".into()
    }
}

/// The SHA-256 of a token, as 64 hex digits (a token the file need not hold).
pub(crate) struct Sha256Hex;

impl Kind<String, [u8; 32]> for Sha256Hex {
    fn check(&self, hex: String, at: usize, key: &str, say: &mut Say<'_, '_>) -> Option<[u8; 32]> {
        let hex = hex.trim();
        let Some(out) = super::kinds::hex32(hex) else {
            let label = say.label;
            say.error(
                at,
                &format!("{label}: {key} must be 64 hex digits (the SHA-256 of the token: printf %s TOKEN | sha256sum)"),
            );
            return None;
        };
        Some(out)
    }

    fn show(&self, _: &[u8; 32]) -> Option<toml::Value> {
        None
    }

    fn takes(&self) -> String {
        "64 hex digits".into()
    }

    fn secret(&self) -> bool {
        true
    }
}

/// Text courtesy puts in a request header (`User-Agent`, `From`): printable, one line.
pub(crate) struct HeaderText;

impl Kind<String, String> for HeaderText {
    fn check(&self, text: String, at: usize, key: &str, say: &mut Say<'_, '_>) -> Option<String> {
        let text = text.trim();
        if text.is_empty() || http::HeaderValue::from_str(text).is_err() || text.len() > 512 {
            let label = say.label;
            say.error(
                at,
                &format!("{label}: {key} must be 1 to 512 printable characters on one line, got {text:?}"),
            );
            return None;
        }
        Some(text.to_string())
    }

    fn show(&self, text: &String) -> Option<toml::Value> {
        Some(toml::Value::String(text.clone()))
    }

    fn takes(&self) -> String {
        "header text".into()
    }
}

/// `signature_agent`: an `https://` URL of printable ASCII, where the key directory is published.
pub(crate) struct AgentUrl;

impl Kind<String, String> for AgentUrl {
    fn check(&self, url: String, at: usize, key: &str, say: &mut Say<'_, '_>) -> Option<String> {
        let printable = url.chars().all(|c| c.is_ascii_graphic());
        match url.parse::<http::Uri>() {
            Ok(uri) if printable && uri.scheme_str() == Some("https") && uri.host().is_some() => {
                Some(url.trim_end_matches('/').to_string())
            }
            _ => {
                let label = say.label;
                say.error(
                    at,
                    &format!(
                        "{label} {key} must be an https:// URL (where the key directory is \
                         published), got {:?}",
                        crate::util::redact::redacted(&url)
                    ),
                );
                None
            }
        }
    }

    fn show(&self, url: &String) -> Option<toml::Value> {
        Some(toml::Value::String(url.clone()))
    }

    fn takes(&self) -> String {
        "an https:// URL".into()
    }
}
