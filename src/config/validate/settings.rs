//! Validation of the process's own sections: `[proxy]`, `[admin]`, `[alerts]`, `[telemetry]`
//! and `[shared]`.
//! Their keys are read through their key tables; here are the checks that need more than one key
//! or more than the value: the listeners and `allow_clients`, the admin token beyond loopback,
//! `hosts_file`'s contents, a parent that is courtesy itself, and the store's TLS files.

use std::sync::Arc;

use super::Validator;
use crate::config::file::Section;
use crate::config::{
    AdminSettings, AlertSettings, ProxySettings, Route, SharedSettings, SigningSettings,
    TelemetrySettings,
};
use crate::wire::hosts_file::StaticHosts;

impl Validator<'_> {
    /// `[proxy]` over the built-in settings; listening beyond loopback needs `allow_clients`.
    pub(in crate::config) fn proxy(&mut self, section: &Section<'_>) -> ProxySettings {
        let mut p = ProxySettings::default();
        self.keys(
            section,
            &[ProxySettings::KEYS],
            ("[proxy]", "[proxy] "),
            &mut p,
        );
        let route = std::mem::replace(&mut p.upstream_proxy, Route::Direct);
        let at = section.at("upstream_proxy");
        p.upstream_proxy = self
            .not_a_loop(route, at, "[proxy]", p.listen)
            .unwrap_or(Route::Direct);
        if let Some(path) = p.hosts_file.take() {
            let read = std::fs::read_to_string(&path)
                .map_err(|e| e.to_string())
                .and_then(|text| {
                    StaticHosts::parse(&text).map_err(|(line, what)| format!("line {line}: {what}"))
                });
            match read {
                Ok(hosts) => {
                    p.hosts_file = Some(path);
                    p.static_hosts = Arc::new(hosts);
                }
                Err(e) => {
                    let written = written(section, "hosts_file");
                    self.error(
                        section.at("hosts_file").unwrap_or(0),
                        &format!("[proxy] hosts_file {written:?}: {e}"),
                    );
                }
            }
        }
        for (key, addr) in [("listen", p.listen), ("admin_listen", p.admin_listen)] {
            if !addr.ip().is_loopback() && p.allow_clients.is_empty() {
                self.error(
                    section.at(key).unwrap_or(0),
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

    /// `[signing]` over the built-in settings: the key file is read here, once (the error names
    /// the file, never its content); a key needs its Signature-Agent.
    pub(in crate::config) fn signing(&mut self, section: &Section<'_>) -> SigningSettings {
        let mut s = SigningSettings::default();
        self.keys(
            section,
            &[SigningSettings::KEYS],
            ("[signing]", "[signing] "),
            &mut s,
        );
        let at = section.at("key_file").unwrap_or(section.at);
        if let Some(path) = &s.key_file {
            match crate::config::signing::read_key(path, "the key file") {
                Ok(key) => s.key = Some(key),
                Err(why) => self.error(at, &format!("[signing] key_file: {why}")),
            }
            if s.signature_agent.is_none() && section.get("signature_agent").is_none() {
                self.error(
                    at,
                    "[signing] key_file needs signature_agent: the https:// URL where the key \
                     directory is published (the Signature-Agent of every signed request)",
                );
            }
        }
        s
    }

    /// `[alerts]` over the built-in settings.
    pub(in crate::config) fn alerts(&mut self, section: &Section<'_>) -> AlertSettings {
        let mut a = AlertSettings::default();
        self.keys(
            section,
            &[AlertSettings::KEYS],
            ("[alerts]", "[alerts] "),
            &mut a,
        );
        a
    }

    /// `[telemetry]` over the built-in settings.
    pub(in crate::config) fn telemetry(&mut self, section: &Section<'_>) -> TelemetrySettings {
        let mut t = TelemetrySettings::default();
        self.keys(
            section,
            &[TelemetrySettings::KEYS],
            ("[telemetry]", "[telemetry] "),
            &mut t,
        );
        t
    }

    /// `[admin]` over the built-in settings; an admin listener beyond loopback needs a token.
    pub(in crate::config) fn admin(
        &mut self,
        section: &Section<'_>,
        proxy: &ProxySettings,
    ) -> AdminSettings {
        let mut a = AdminSettings::default();
        self.keys(
            section,
            &[AdminSettings::KEYS],
            ("[admin]", "[admin] "),
            &mut a,
        );
        if !proxy.admin_listen.ip().is_loopback() && section.get("token").is_none() {
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

    /// `[shared]`, if the file has it: the store's URL is required.
    pub(in crate::config) fn shared(
        &mut self,
        section: Option<&Section<'_>>,
    ) -> Option<SharedSettings> {
        let section = section?;
        if section.get("redis_url").is_none() {
            self.error(
                section.at,
                "[shared] redis_url is required (e.g. \"redis://127.0.0.1:6379/0\"); \
                 leave [shared] out for budgets of this instance alone",
            );
            return None;
        }
        let mut s = SharedSettings::default();
        self.keys(
            section,
            &[SharedSettings::KEYS],
            ("[shared]", "[shared] "),
            &mut s,
        );
        if s.redis_url.is_empty() {
            // Of the wrong type: said already.
            return None;
        }
        let tls = crate::config::redis_url::is_tls_url(&s.redis_url);
        if let Some(path) = s.ca_file.take() {
            let at = section.at("ca_file").unwrap_or(0);
            if !tls {
                self.error(at, "[shared] ca_file is for a rediss:// (TLS) redis_url");
            } else if !path.is_file() {
                self.error(
                    at,
                    &format!("[shared] ca_file: no such file {}", path.display()),
                );
            } else {
                s.ca_file = Some(path);
            }
        }
        self.client_certificate(section, tls, &mut s);
        Some(s)
    }

    /// `[shared] cert_file` and `key_file`: both or neither, with a TLS URL, each a PEM file
    /// holding what its name says.
    fn client_certificate(&mut self, section: &Section<'_>, tls: bool, s: &mut SharedSettings) {
        use rustls_pki_types::pem::PemObject;
        use rustls_pki_types::{CertificateDer, PrivateKeyDer};
        let (cert_path, key_path) = match (s.cert_file.take(), s.key_file.take()) {
            (None, None) => return,
            (Some(c), Some(k)) => (c, k),
            (Some(_), None) | (None, Some(_)) => {
                let at = section.at("cert_file").or(section.at("key_file"));
                self.error(
                    at.unwrap_or(0),
                    "[shared] cert_file and key_file go together: set both (the client \
                     certificate and its private key, PEM) or neither",
                );
                return;
            }
        };
        let cert_at = section.at("cert_file").unwrap_or(0);
        let key_at = section.at("key_file").unwrap_or(0);
        if !tls {
            self.error(
                cert_at,
                "[shared] cert_file and key_file are for a TLS redis_url (rediss://, \
                 rediss+cluster://, rediss+sentinel://)",
            );
            return;
        }
        let cert_ok = if !cert_path.is_file() {
            Err(format!("no such file {}", cert_path.display()))
        } else {
            match CertificateDer::pem_file_iter(&cert_path).map(|i| i.count()) {
                Ok(n) if n > 0 => Ok(()),
                _ => Err(format!("{} holds no PEM certificate", cert_path.display())),
            }
        };
        if let Err(e) = cert_ok {
            self.error(cert_at, &format!("[shared] cert_file: {e}"));
        }
        let key_ok = if !key_path.is_file() {
            Err(format!("no such file {}", key_path.display()))
        } else if PrivateKeyDer::from_pem_file(&key_path).is_err() {
            Err(format!("{} holds no PEM private key", key_path.display()))
        } else {
            Ok(())
        };
        if let Err(e) = key_ok {
            self.error(key_at, &format!("[shared] key_file: {e}"));
        }
        s.cert_file = Some(cert_path);
        s.key_file = Some(key_path);
    }
}

/// The string `key` holds in `section`, as written (for a message that quotes it).
fn written(section: &Section<'_>, key: &str) -> String {
    match section.get(key).map(|v| v.get_ref()) {
        Some(toml::de::DeValue::String(s)) => s.to_string(),
        _ => String::new(),
    }
}
