//! Validation of the process's own sections: `[proxy]`, `[admin]`, `[alerts]` and `[shared]`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use toml::Spanned;

use super::Validator;
use crate::config::file::{FileAdmin, FileAlerts, FileProxy, FileShared};
use crate::config::pattern::parse_network;
use crate::config::{AdminSettings, AlertSettings, ProxySettings, SharedSettings};
use crate::resolve::StaticHosts;
use std::time::Duration;

impl Validator<'_> {
    /// An `ip:port` socket address for the `[proxy]` key `key`.
    fn address(&mut self, value: &Option<Spanned<String>>, key: &str) -> Option<SocketAddr> {
        let v = value.as_ref()?;
        match v.get_ref().parse::<SocketAddr>() {
            Ok(addr) => Some(addr),
            Err(_) => {
                self.error(
                    v.span().start,
                    &format!(
                        "[proxy] {key} must be an IP address and port such as \"127.0.0.1:3128\", got {:?}",
                        v.get_ref()
                    ),
                );
                None
            }
        }
    }

    /// `[proxy]` over the built-in settings; listening beyond loopback needs `allow_clients`.
    pub(in crate::config) fn proxy(&mut self, file: &FileProxy) -> ProxySettings {
        let mut p = ProxySettings::default();
        let l = "[proxy]";
        if let Some(a) = self.address(&file.listen, "listen") {
            p.listen = a;
        }
        if let Some(a) = self.address(&file.admin_listen, "admin_listen") {
            p.admin_listen = a;
        }
        if let Some(dir) = &file.state_dir {
            if dir.get_ref().trim().is_empty() {
                self.error(
                    dir.span().start,
                    "[proxy] state_dir must not be empty, got \"\"",
                );
            } else {
                p.state_dir = expand_home(dir.get_ref());
            }
        }
        let c = &file.connect_timeout_seconds;
        if let Some(d) = self.seconds(c, l, "connect_timeout_seconds", 0.001, 3600.0) {
            p.connect_timeout = d;
        }
        let r = &file.response_timeout_seconds;
        if let Some(d) = self.seconds(r, l, "response_timeout_seconds", 0.001, 86400.0) {
            p.response_timeout = d;
        }
        let g = &file.shutdown_grace_seconds;
        if let Some(d) = self.seconds(g, l, "shutdown_grace_seconds", 0.0, 3600.0) {
            p.shutdown_grace = d;
        }
        let i = &file.idle_host_seconds;
        if let Some(d) = self.seconds(i, l, "idle_host_seconds", 1.0, 30.0 * 86400.0) {
            p.idle_host = d;
        }
        if let Some(n) = self.count(&file.max_in_flight, l, "max_in_flight", 1, 1_000_000) {
            p.max_in_flight = n as usize;
        }
        let bounds = (0.001, 1_000_000.0);
        if let Some(r) = self.bounded(&file.global_rate, l, "global_rate", bounds, "/s") {
            p.global_rate = Some(r);
        }
        if let Some(n) = self.count(&file.global_burst, l, "global_burst", 1, 1_000_000) {
            p.global_burst = n as u32;
        }
        if let Some(route) = self.route(&file.upstream_proxy, l, p.listen) {
            p.upstream_proxy = route;
        }
        let m = &file.max_connections;
        if let Some(n) = self.count(m, l, "max_connections", 1, 1_000_000) {
            p.max_connections = n as usize;
        }
        let m = &file.max_connections_per_client;
        if let Some(n) = self.count(m, l, "max_connections_per_client", 1, 1_000_000) {
            p.max_connections_per_client = n as usize;
        }
        let m = &file.max_upstream_connections;
        if let Some(n) = self.count(m, l, "max_upstream_connections", 1, 1_000_000) {
            p.max_upstream_connections = n as usize;
        }
        let h = &file.header_timeout_seconds;
        if let Some(d) = self.seconds(h, l, "header_timeout_seconds", 0.1, 3600.0) {
            p.header_timeout = d;
        }
        p.allow_clients = self.networks(&file.allow_clients, "allow_clients");
        p.deny_destinations = self.networks(&file.deny_destinations, "deny_destinations");
        p.allow_destinations = self.networks(&file.allow_destinations, "allow_destinations");
        if let Some(n) = self.count(&file.cache_max_mb, l, "cache_max_mb", 1, 1024 * 1024) {
            p.cache_max_bytes = n as u64 * 1024 * 1024;
        }
        if let Some(path) = &file.upstream_ca {
            let resolved = expand_home(path.get_ref());
            if resolved.is_file() {
                p.upstream_ca = Some(resolved);
            } else {
                self.error(
                    path.span().start,
                    &format!("[proxy] upstream_ca: no such file {:?}", path.get_ref()),
                );
            }
        }
        if let Some(path) = &file.hosts_file {
            let resolved = expand_home(path.get_ref());
            let read = std::fs::read_to_string(&resolved)
                .map_err(|e| e.to_string())
                .and_then(|text| {
                    StaticHosts::parse(&text).map_err(|(line, what)| format!("line {line}: {what}"))
                });
            match read {
                Ok(hosts) => {
                    p.hosts_file = Some(resolved);
                    p.static_hosts = Arc::new(hosts);
                }
                Err(e) => self.error(
                    path.span().start,
                    &format!("[proxy] hosts_file {:?}: {e}", path.get_ref()),
                ),
            }
        }
        if let Some(list) = &file.connect_ports {
            p.connect_ports.clear();
            for entry in list.get_ref() {
                let port = *entry.get_ref();
                match u16::try_from(port) {
                    Ok(port) if port > 0 => p.connect_ports.push(port),
                    _ => self.error(
                        entry.span().start,
                        &format!(
                            "[proxy] connect_ports: a port must be between 1 and 65535, got {port}"
                        ),
                    ),
                }
            }
        }
        for (key, addr, span) in [
            (
                "listen",
                p.listen,
                file.listen.as_ref().map(|s| s.span().start),
            ),
            (
                "admin_listen",
                p.admin_listen,
                file.admin_listen.as_ref().map(|s| s.span().start),
            ),
        ] {
            if !addr.ip().is_loopback() && p.allow_clients.is_empty() {
                self.error(
                    span.unwrap_or(0),
                    &format!(
                        "[proxy] {key} = \"{addr}\" is not a loopback address: set [proxy] \
                         allow_clients (a list of CIDR networks) to say who may use courtesy; \
                         it is never an open proxy"
                    ),
                );
            }
        }
        p
    }

    /// A `[proxy]` list of CIDR networks (or single addresses), each bad entry named with its line.
    fn networks(
        &mut self,
        list: &Option<Spanned<Vec<Spanned<String>>>>,
        key: &str,
    ) -> Vec<ipnet::IpNet> {
        let mut nets = Vec::new();
        for entry in list.iter().flat_map(|l| l.get_ref()) {
            match parse_network(entry.get_ref()) {
                Ok(net) => nets.push(net),
                Err(()) => self.error(
                    entry.span().start,
                    &format!(
                        "[proxy] {key}: expected a CIDR network such as \
                         \"10.0.0.0/8\" or an IP address, got {:?}",
                        entry.get_ref()
                    ),
                ),
            }
        }
        nets
    }

    /// `[alerts]` over the built-in settings.
    pub(in crate::config) fn alerts(&mut self, file: &FileAlerts) -> AlertSettings {
        let mut a = AlertSettings::default();
        if let Some(w) = &file.webhook {
            match w.get_ref().parse::<http::Uri>() {
                Ok(uri)
                    if matches!(uri.scheme_str(), Some("http" | "https"))
                        && uri.host().is_some() =>
                {
                    a.webhook = Some(uri)
                }
                _ => self.error(
                    w.span().start,
                    &format!(
                        "[alerts] webhook must be an http:// or https:// URL, got {:?}",
                        crate::alerts::redacted(w.get_ref())
                    ),
                ),
            }
        }
        let t = &file.webhook_timeout_seconds;
        if let Some(d) = self.seconds(t, "[alerts]", "webhook_timeout_seconds", 0.1, 60.0) {
            a.webhook_timeout = d;
        }
        a
    }

    /// `[shared]`, if the file has it: the store's URL is required.
    pub(in crate::config) fn shared(
        &mut self,
        file: &Option<Spanned<FileShared>>,
    ) -> Option<SharedSettings> {
        let section = file.as_ref()?;
        let file = section.get_ref();
        let Some(url) = &file.redis_url else {
            self.error(
                section.span().start,
                "[shared] redis_url is required (e.g. \"redis://127.0.0.1:6379/0\"); \
                 leave [shared] out for budgets of this instance alone",
            );
            return None;
        };
        let mut s = SharedSettings::new(url.get_ref());
        if let Err(e) = crate::shared::topology(url.get_ref()) {
            self.error(
                url.span().start,
                &format!(
                    "[shared] redis_url must be a redis:// or rediss:// URL (one server), \
                     redis+cluster://host:port,host:port,… (a Redis Cluster) or \
                     redis+sentinel://host:port,…/<master_name>[/<db>] (Sentinel), \
                     rediss+… with TLS; got {:?}: {e}",
                    s.redacted_url()
                ),
            );
        }
        let tls = crate::shared::is_tls_url(url.get_ref());
        if let Some(prefix) = &file.key_prefix {
            let p = prefix.get_ref();
            if p.is_empty()
                || p.len() > 64
                || !p
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.:".contains(c))
            {
                self.error(
                    prefix.span().start,
                    &format!(
                        "[shared] key_prefix must be 1 to 64 letters, digits or -_.: , got {p:?}"
                    ),
                );
            } else {
                s.key_prefix = p.clone();
            }
        }
        if let Some(n) = self.count(&file.instances, "[shared]", "instances", 1, 10_000) {
            s.instances = Some(n as u32);
        }
        if let Some(ms) = self.count(&file.timeout_ms, "[shared]", "timeout_ms", 1, 60_000) {
            s.timeout = Duration::from_millis(ms as u64);
        }
        if let Some(d) = self.seconds(
            &file.lease_seconds,
            "[shared]",
            "lease_seconds",
            1.0,
            86_400.0,
        ) {
            s.lease = d;
        }
        if let Some(ca) = &file.ca_file {
            let path = expand_home(ca.get_ref());
            if !tls {
                self.error(
                    ca.span().start,
                    "[shared] ca_file is for a rediss:// (TLS) redis_url",
                );
            } else if !path.is_file() {
                self.error(
                    ca.span().start,
                    &format!("[shared] ca_file: no such file {}", path.display()),
                );
            } else {
                s.ca_file = Some(path);
            }
        }
        self.client_certificate(file, tls, &mut s);
        if let Some(ready) = &file.ready_in_fallback {
            s.ready_in_fallback = *ready.get_ref();
        }
        Some(s)
    }

    /// `[shared] cert_file` and `key_file`: both or neither, with a TLS URL, each a PEM file
    /// holding what its name says.
    fn client_certificate(&mut self, file: &FileShared, tls: bool, s: &mut SharedSettings) {
        use rustls_pki_types::pem::PemObject;
        use rustls_pki_types::{CertificateDer, PrivateKeyDer};
        let (cert, key) = match (&file.cert_file, &file.key_file) {
            (None, None) => return,
            (Some(c), Some(k)) => (c, k),
            (Some(one), None) | (None, Some(one)) => {
                self.error(
                    one.span().start,
                    "[shared] cert_file and key_file go together: set both (the client \
                     certificate and its private key, PEM) or neither",
                );
                return;
            }
        };
        if !tls {
            self.error(
                cert.span().start,
                "[shared] cert_file and key_file are for a TLS redis_url (rediss://, \
                 rediss+cluster://, rediss+sentinel://)",
            );
            return;
        }
        let cert_path = expand_home(cert.get_ref());
        let key_path = expand_home(key.get_ref());
        let cert_ok = if !cert_path.is_file() {
            Err(format!("no such file {}", cert_path.display()))
        } else {
            match CertificateDer::pem_file_iter(&cert_path).map(|i| i.count()) {
                Ok(n) if n > 0 => Ok(()),
                _ => Err(format!("{} holds no PEM certificate", cert_path.display())),
            }
        };
        if let Err(e) = cert_ok {
            self.error(cert.span().start, &format!("[shared] cert_file: {e}"));
        }
        let key_ok = if !key_path.is_file() {
            Err(format!("no such file {}", key_path.display()))
        } else if PrivateKeyDer::from_pem_file(&key_path).is_err() {
            Err(format!("{} holds no PEM private key", key_path.display()))
        } else {
            Ok(())
        };
        if let Err(e) = key_ok {
            self.error(key.span().start, &format!("[shared] key_file: {e}"));
        }
        s.cert_file = Some(cert_path);
        s.key_file = Some(key_path);
    }

    /// `[admin]` over the built-in settings; an admin listener beyond loopback needs a token.
    pub(in crate::config) fn admin(
        &mut self,
        file: &FileAdmin,
        proxy: &ProxySettings,
    ) -> AdminSettings {
        let mut a = AdminSettings::default();
        if let Some(t) = &file.token {
            let token = t.get_ref().trim();
            if token.len() < 16 || token.chars().any(|c| c.is_whitespace() || c.is_control()) {
                self.error(
                    t.span().start,
                    "[admin] token must be at least 16 printable characters without spaces \
                     (the value is not shown)",
                );
            } else {
                a.token = Some(token.to_string());
            }
        }
        let m = &file.metrics_max_hosts;
        if let Some(n) = self.count(m, "[admin]", "metrics_max_hosts", 0, 1_000_000) {
            a.metrics_max_hosts = n as usize;
        }
        let m = &file.max_connections;
        if let Some(n) = self.count(m, "[admin]", "max_connections", 1, 100_000) {
            a.max_connections = n as usize;
        }
        let m = &file.max_connections_per_client;
        if let Some(n) = self.count(m, "[admin]", "max_connections_per_client", 1, 100_000) {
            a.max_connections_per_client = n as usize;
        }
        if !proxy.admin_listen.ip().is_loopback() && file.token.is_none() {
            self.error(
                0,
                &format!(
                    "[admin] token is required when [proxy] admin_listen ({}) is not a loopback \
                     address: the admin API can pause hosts and change rates",
                    proxy.admin_listen
                ),
            );
        }
        a
    }
}

/// `path` with a leading `~/` read as the home directory.
fn expand_home(path: &str) -> PathBuf {
    match (path.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => PathBuf::from(home).join(rest),
        _ => PathBuf::from(path),
    }
}
