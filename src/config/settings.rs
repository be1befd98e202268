//! Settings of the process rather than of a host: `[proxy]`, `[admin]` and `[alerts]`, with their
//! defaults.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;

use crate::resolve::StaticHosts;

/// Settings of the proxy process itself (`[proxy]`).
#[derive(Debug, Clone, PartialEq)]
pub struct ProxySettings {
    /// Where clients connect.
    pub listen: SocketAddr,
    /// Where the admin API listens.
    pub admin_listen: SocketAddr,
    /// Where state that outlives a run is kept (CA, cooldowns).
    pub state_dir: PathBuf,
    /// Upstream TCP connect (and DNS) timeout.
    pub connect_timeout: Duration,
    /// Time from sending a request upstream to its response headers.
    pub response_timeout: Duration,
    /// Requests in flight to all hosts together.
    pub max_in_flight: usize,
    /// How long in-flight requests may take to finish at shutdown.
    pub shutdown_grace: Duration,
    /// Client networks allowed (loopback only when empty); required to listen beyond loopback.
    pub allow_clients: Vec<IpNet>,
    /// A host idle this long (and with a full bucket) is forgotten.
    pub idle_host: Duration,
    /// Ports a CONNECT may open a tunnel to.
    pub connect_ports: Vec<u16>,
    /// A PEM file of extra roots trusted for upstream TLS (private CAs).
    pub upstream_ca: Option<PathBuf>,
    /// A file in `/etc/hosts` format whose names courtesy resolves itself, before DNS.
    pub hosts_file: Option<PathBuf>,
    /// What `hosts_file` says, read when the config was.
    pub static_hosts: Arc<StaticHosts>,
    /// The response store's size bound, in bytes.
    pub cache_max_bytes: u64,
    /// A ceiling on requests per second to all hosts together (the crawler's own egress), on top
    /// of every host's budget; `None`: no ceiling.
    pub global_rate: Option<f64>,
    /// Requests that may leave back to back under `global_rate` after a quiet spell.
    pub global_burst: u32,
    /// Where requests leave by default (`upstream_proxy`): straight to the target, or through a
    /// parent proxy; a `[[host]]` rule may say otherwise for its hosts.
    pub upstream_proxy: super::Route,
    /// Client connections open at once on the proxy listener (`max_connections`); more are
    /// answered 503 and closed before a byte is read. Lowered at start to fit the fd limit.
    pub max_connections: usize,
    /// Client connections open at once from one address (`max_connections_per_client`).
    pub max_connections_per_client: usize,
    /// Upstream connections open at once, all hosts and parents together, idle pooled ones
    /// included (`max_upstream_connections`); a request that finds none free within the connect
    /// timeout gets 503 connection_limit_reached, never held against its host.
    pub max_upstream_connections: usize,
    /// How long a client may take to send its first byte, and then a whole request head
    /// (`header_timeout_seconds`), on the proxy and admin listeners.
    pub header_timeout: Duration,
    /// Networks courtesy never connects to for a client (`deny_destinations`), judged on the
    /// address a target resolves to: cloud metadata, the team's private ranges.
    pub deny_destinations: Vec<IpNet>,
    /// Networks inside `deny_destinations` that are open all the same (`allow_destinations`).
    pub allow_destinations: Vec<IpNet>,
}

impl Default for ProxySettings {
    fn default() -> Self {
        ProxySettings {
            listen: SocketAddr::from(([127, 0, 0, 1], 3128)),
            admin_listen: SocketAddr::from(([127, 0, 0, 1], 3129)),
            state_dir: default_state_dir(),
            connect_timeout: Duration::from_secs(10),
            response_timeout: Duration::from_secs(60),
            max_in_flight: 512,
            shutdown_grace: Duration::from_secs(10),
            allow_clients: Vec::new(),
            idle_host: Duration::from_secs(600),
            connect_ports: vec![443, 80],
            upstream_ca: None,
            hosts_file: None,
            static_hosts: Arc::default(),
            cache_max_bytes: 512 * 1024 * 1024,
            global_rate: None,
            global_burst: 1,
            upstream_proxy: super::Route::Direct,
            max_connections: 4096,
            max_connections_per_client: 256,
            max_upstream_connections: 8192,
            header_timeout: Duration::from_secs(30),
            deny_destinations: Vec::new(),
            allow_destinations: Vec::new(),
        }
    }
}

/// `$XDG_STATE_HOME/courtesy`, else `~/.local/state/courtesy`, else a folder in the working directory.
fn default_state_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("XDG_STATE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir).join("courtesy");
    }
    if let Some(home) = std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(home).join(".local/state/courtesy");
    }
    PathBuf::from(".courtesy-state")
}

/// Where courtesy tells a human that a host blocked it (`[alerts]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlertSettings {
    /// A URL that receives a JSON POST when a host is blocked.
    pub webhook: Option<http::Uri>,
    /// How long one POST may take; it is never retried in a loop.
    pub webhook_timeout: Duration,
}

impl Default for AlertSettings {
    fn default() -> Self {
        AlertSettings {
            webhook: None,
            webhook_timeout: Duration::from_secs(5),
        }
    }
}

/// Settings of the admin listener (`[admin]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminSettings {
    /// Bearer token required on every admin request when set; required to bind beyond loopback.
    pub token: Option<String>,
    /// Hosts that get their own `host` label in /metrics; the rest are summed as `host="other"`.
    pub metrics_max_hosts: usize,
    /// Connections open at once on the admin listener (`max_connections`): its own count, so a
    /// flood on the proxy port never starves `/healthz`.
    pub max_connections: usize,
    /// Admin connections open at once from one address (`max_connections_per_client`).
    pub max_connections_per_client: usize,
}

impl Default for AdminSettings {
    fn default() -> Self {
        AdminSettings {
            token: None,
            metrics_max_hosts: 1000,
            max_connections: 64,
            max_connections_per_client: 16,
        }
    }
}

/// Settings of the shared budget (`[shared]`): several instances on one Redis (or Valkey) keep one
/// budget per host, as if they were one courtesy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedSettings {
    /// The store's URL: `redis://` or `rediss://` (TLS through rustls) for one server,
    /// `redis+cluster://h1:p1,h2:p2,…` for a Redis Cluster, `redis+sentinel://s1:p1,…/<master>`
    /// for a master found through Redis Sentinel (`rediss+…` with TLS).
    pub redis_url: String,
    /// Instances with the same `redis_url` and `key_prefix` share budgets.
    pub key_prefix: String,
    /// How many instances share the budget: while the store cannot be reached, each keeps
    /// `1/instances` of every budget. `None`: the most live instances seen recently.
    pub instances: Option<u32>,
    /// How long one round trip to the store may take before this instance falls back to its share.
    pub timeout: Duration,
    /// How long a concurrency slot outlives an instance that died holding it (renewed while the
    /// request lasts).
    pub lease: Duration,
    /// PEM file of the CA(s) that sign the store's certificate (`rediss://`), instead of the
    /// system's roots.
    pub ca_file: Option<PathBuf>,
    /// PEM files of this instance's client certificate and its key, for a store that asks for
    /// one (`redis-server --tls-auth-clients yes`); both or neither, TLS URLs only.
    pub cert_file: Option<PathBuf>,
    /// See `cert_file`.
    pub key_file: Option<PathBuf>,
    /// Whether `/readyz` answers 200 while this instance is on its fallback share (`true`), or
    /// 503 so that a load balancer sends to the instances on the shared budget.
    pub ready_in_fallback: bool,
}

impl SharedSettings {
    /// The settings for `redis_url` with every other key at its default.
    pub fn new(redis_url: &str) -> Self {
        SharedSettings {
            redis_url: redis_url.to_string(),
            key_prefix: "courtesy".into(),
            instances: None,
            timeout: Duration::from_millis(250),
            lease: Duration::from_secs(30),
            ca_file: None,
            cert_file: None,
            key_file: None,
            ready_in_fallback: true,
        }
    }

    /// The CA and client certificate files, read for the redis crate; `None` when none is set.
    pub(crate) fn tls_certificates(&self) -> Result<Option<redis::TlsCertificates>, String> {
        let read = |key: &str, path: &PathBuf| {
            std::fs::read(path).map_err(|e| format!("[shared] {key} {}: {e}", path.display()))
        };
        let root_cert = match &self.ca_file {
            Some(path) => Some(read("ca_file", path)?),
            None => None,
        };
        let client_tls = match (&self.cert_file, &self.key_file) {
            (Some(cert), Some(key)) => Some(redis::ClientTlsConfig {
                client_cert: read("cert_file", cert)?,
                client_key: read("key_file", key)?,
            }),
            _ => None,
        };
        if root_cert.is_none() && client_tls.is_none() {
            return Ok(None);
        }
        Ok(Some(redis::TlsCertificates {
            client_tls,
            root_cert,
        }))
    }

    /// The URL with any user and password replaced by `***`, for logs and pages; for every form
    /// (one server, cluster seeds, sentinels), whose userinfo comes once, before the hosts.
    pub fn redacted_url(&self) -> String {
        match self.redis_url.split_once("://") {
            Some((scheme, rest)) => match rest.rsplit_once('@') {
                Some((_, host)) => format!("{scheme}://***@{host}"),
                None => self.redis_url.clone(),
            },
            None => self.redis_url.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::SharedSettings;

    #[test]
    fn redacted_urls_hide_the_password_of_every_form() {
        for (url, shown) in [
            ("redis://:secret@h:6379/0", "redis://***@h:6379/0"),
            ("rediss://user:secret@h:6380", "rediss://***@h:6380"),
            (
                "redis+cluster://:secret@h1:7000,h2:7001",
                "redis+cluster://***@h1:7000,h2:7001",
            ),
            (
                "rediss+sentinel://u:s3cr@t@s1:26379,s2:26379/mymaster/2",
                "rediss+sentinel://***@s1:26379,s2:26379/mymaster/2",
            ),
            ("redis+sentinel://s1,s2/m", "redis+sentinel://s1,s2/m"),
        ] {
            let redacted = SharedSettings::new(url).redacted_url();
            assert_eq!(redacted, shown);
            assert!(!redacted.contains("secret") && !redacted.contains("s3cr"));
        }
    }
}
