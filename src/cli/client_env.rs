//! `courtesy env`: the shell lines that point a crawler's environment at courtesy, so that
//! `eval "$(courtesy env)"` is the whole set-up of a shell.
//!
//! Both spellings of the proxy variables are set (curl and wget read only the lowercase
//! `http_proxy` for http:// URLs; most other clients read either), loopback is left out through
//! `NO_PROXY` (the admin API, local services), and the CA variables of the common clients point at
//! a bundle of courtesy's CA and the system's roots, so that intercepted hosts and tunnelled ones
//! (real certificates) both verify.

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};

use crate::config::Config;
use crate::upstream::tls::LocalCa;

/// File name of the CA bundle (courtesy's CA followed by the system roots) under `state_dir`.
pub const BUNDLE_FILE: &str = "ca-bundle.pem";

/// Where Debian, Fedora, Alpine and macOS keep the system's roots, in that order.
const SYSTEM_ROOTS: [&str; 4] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
    "/usr/local/etc/openssl/cert.pem",
];

/// The hosts no client should send through courtesy.
const NO_PROXY: &str = "localhost,127.0.0.1,::1";

/// The shell commands that make Chromium (and Playwright's or Puppeteer's Chromium) on Linux trust
/// the CA at `ca`, for the user running them: they create the user's NSS database when it does not
/// exist yet (a fresh home has none, and `certutil -A` alone then fails), then add the CA.
pub fn nss_trust_commands(ca: &Path) -> String {
    let ca = quoted(&path_text(ca));
    format!(
        "mkdir -p \"$HOME/.pki/nssdb\"\n\
         [ -f \"$HOME/.pki/nssdb/cert9.db\" ] || certutil -d sql:\"$HOME/.pki/nssdb\" -N --empty-password\n\
         certutil -d sql:\"$HOME/.pki/nssdb\" -A -t \"C,,\" -n courtesy -i {ca}"
    )
}

/// The `export` lines for `config` (creating the CA and the bundle if needed).
pub fn shell_lines(config: &Config) -> anyhow::Result<String> {
    let ca = LocalCa::load_or_create(&config.proxy.state_dir)?;
    let bundle = write_bundle(&config.proxy.state_dir, ca.cert_pem())?;
    let proxy = format!("http://{}", reachable(config.proxy.listen));
    let ca_path = ca.cert_path();
    let mut out =
        String::from("# courtesy: eval \"$(courtesy env)\" points this shell at courtesy\n");
    let vars: [(&str, String, &str); 10] = [
        ("HTTP_PROXY", proxy.clone(), "proxy for http:// URLs"),
        (
            "http_proxy",
            proxy.clone(),
            "curl and wget read only this one",
        ),
        ("HTTPS_PROXY", proxy.clone(), "proxy for https:// URLs"),
        ("https_proxy", proxy, ""),
        ("NO_PROXY", NO_PROXY.to_string(), "loopback goes direct"),
        ("no_proxy", NO_PROXY.to_string(), ""),
        ("REQUESTS_CA_BUNDLE", path_text(&bundle), "Python requests"),
        (
            "SSL_CERT_FILE",
            path_text(&bundle),
            "httpx, aiohttp, Python's ssl, OpenSSL clients",
        ),
        ("CURL_CA_BUNDLE", path_text(&bundle), "curl"),
        (
            "NODE_EXTRA_CA_CERTS",
            path_text(&ca_path),
            "Node.js (added to its own roots)",
        ),
    ];
    for (name, value, what) in vars {
        let _ = write!(out, "export {name}={}", quoted(&value));
        if !what.is_empty() {
            let _ = write!(out, "  # {what}");
        }
        out.push('\n');
    }
    Ok(out)
}

/// The address clients connect to: an unspecified listen address means loopback.
fn reachable(listen: SocketAddr) -> SocketAddr {
    match listen.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => {
            SocketAddr::new(Ipv4Addr::LOCALHOST.into(), listen.port())
        }
        IpAddr::V6(ip) if ip.is_unspecified() => {
            SocketAddr::new(Ipv6Addr::LOCALHOST.into(), listen.port())
        }
        _ => listen,
    }
}

/// Writes courtesy's CA followed by the first system root store found, and returns its path.
fn write_bundle(state_dir: &Path, ca_pem: &str) -> anyhow::Result<PathBuf> {
    let mut text = ca_pem.trim_end().to_string();
    text.push('\n');
    if let Some(roots) = SYSTEM_ROOTS
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
    {
        text.push_str(&roots);
    }
    let path = state_dir.join(BUNDLE_FILE);
    crate::util::files::write_atomically(&path, text.as_bytes(), 0o644)?;
    Ok(path)
}

fn path_text(path: &Path) -> String {
    path.display().to_string()
}

/// `value` in single quotes for a POSIX shell.
fn quoted(value: &str) -> String {
    format!("'{}'", value.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_quoted_for_the_shell_and_wildcards_become_loopback() {
        assert_eq!(quoted("/a b/it's"), r"'/a b/it'\''s'");
        assert_eq!(
            reachable("0.0.0.0:3128".parse().unwrap()),
            "127.0.0.1:3128".parse().unwrap()
        );
        assert_eq!(
            reachable("[::]:3128".parse().unwrap()),
            "[::1]:3128".parse().unwrap()
        );
        assert_eq!(
            reachable("10.1.2.3:3128".parse().unwrap()),
            "10.1.2.3:3128".parse().unwrap()
        );
    }

    #[test]
    fn the_lines_set_both_spellings_and_a_bundle_with_the_ca_first() {
        let dir = crate::util::scratch::dir("env");
        let config = Config {
            proxy: crate::config::ProxySettings {
                state_dir: dir.clone(),
                ..Default::default()
            },
            ..Config::default()
        };
        let text = shell_lines(&config).unwrap();
        for name in [
            "HTTP_PROXY",
            "http_proxy",
            "HTTPS_PROXY",
            "https_proxy",
            "NO_PROXY",
        ] {
            assert!(text.contains(&format!("export {name}=")), "{name}: {text}");
        }
        let bundle = std::fs::read_to_string(dir.join(BUNDLE_FILE)).unwrap();
        let ca = std::fs::read_to_string(dir.join("ca.pem")).unwrap();
        assert!(bundle.starts_with(ca.trim_end()));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
