//! Stage one: structs that mirror the TOML file as written, so that serde catches typos
//! (`deny_unknown_fields`) and wrong types, and every value keeps its place in the file
//! (`Spanned`) for the validator's messages. Nothing here checks a range or a meaning.

use serde::Deserialize;
use toml::Spanned;

/// Defines the per-host keys once, for both `[defaults]` and `[[host]]`: a new per-host key is
/// added here.
macro_rules! policy_keys {
    ($($key:ident: $ty:ty),* $(,)?) => {
        /// The per-host keys of `[defaults]` (and of a `[[host]]` rule, through its `policy()`).
        #[derive(Debug, Default, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub(super) struct FilePolicy {
            $(pub(super) $key: Option<Spanned<$ty>>,)*
        }

        /// One `[[host]]` table: its `match` pattern and the per-host keys it sets.
        #[derive(Debug, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub(super) struct FileHostRule {
            #[serde(rename = "match")]
            pub(super) pattern: Spanned<String>,
            /// `"direct"` or a parent URL for the hosts this rule matches (a host-rule key only:
            /// `[defaults]` takes it from `[proxy] upstream_proxy`).
            pub(super) upstream_proxy: Option<Spanned<String>>,
            $($key: Option<Spanned<$ty>>,)*
        }

        impl FileHostRule {
            /// The rule's per-host keys, without its pattern.
            pub(super) fn policy(&self) -> FilePolicy {
                FilePolicy { $($key: self.$key.clone(),)* }
            }
        }
    };
}

policy_keys! {
    rate: f64,
    burst: i64,
    concurrency: i64,
    jitter: f64,
    max_queue: i64,
    max_wait_seconds: f64,
    adaptive: bool,
    controller: String,
    probe_after_seconds: f64,
    learned_margin: f64,
    min_rate: f64,
    max_rate: f64,
    decrease_factor: f64,
    slow_factor: f64,
    slow_response_ms: i64,
    increase_step: f64,
    backoff_statuses: Vec<i64>,
    max_retry_after_seconds: f64,
    backoff_initial_seconds: f64,
    backoff_max_seconds: f64,
    on_cooldown: String,
    resume_factor: f64,
    retry_idempotent: i64,
    https: String,
    obey_robots: bool,
    robots_user_agent: String,
    max_crawl_delay_seconds: f64,
    block_scan_bytes: i64,
    block_markers: Vec<String>,
    block_pause_seconds: f64,
    block_resume_factor: f64,
    hard_block_after: i64,
    skip_resources: Vec<String>,
    off_peak: FileOffPeak,
    cache: String,
    enforce: bool,
    key: String,
}

/// `off_peak = { hours, timezone, rate }`, as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileOffPeak {
    pub(super) hours: String,
    pub(super) timezone: String,
    pub(super) rate: f64,
}

/// The whole file: its sections, each optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileConfig {
    #[serde(default)]
    pub(super) proxy: FileProxy,
    #[serde(default)]
    pub(super) defaults: FilePolicy,
    #[serde(default)]
    pub(super) host: Vec<FileHostRule>,
    #[serde(default)]
    pub(super) admin: FileAdmin,
    #[serde(default)]
    pub(super) alerts: FileAlerts,
    pub(super) shared: Option<Spanned<FileShared>>,
}

/// `[shared]`: the store that several instances keep one budget in.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileShared {
    pub(super) redis_url: Option<Spanned<String>>,
    pub(super) key_prefix: Option<Spanned<String>>,
    pub(super) instances: Option<Spanned<i64>>,
    pub(super) timeout_ms: Option<Spanned<i64>>,
    pub(super) lease_seconds: Option<Spanned<f64>>,
    pub(super) ca_file: Option<Spanned<String>>,
    pub(super) cert_file: Option<Spanned<String>>,
    pub(super) key_file: Option<Spanned<String>>,
    pub(super) ready_in_fallback: Option<Spanned<bool>>,
}

/// `[alerts]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileAlerts {
    pub(super) webhook: Option<Spanned<String>>,
    pub(super) webhook_timeout_seconds: Option<Spanned<f64>>,
}

/// `[admin]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileAdmin {
    pub(super) token: Option<Spanned<String>>,
    pub(super) metrics_max_hosts: Option<Spanned<i64>>,
    pub(super) max_connections: Option<Spanned<i64>>,
    pub(super) max_connections_per_client: Option<Spanned<i64>>,
}

/// `[proxy]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileProxy {
    pub(super) listen: Option<Spanned<String>>,
    pub(super) admin_listen: Option<Spanned<String>>,
    pub(super) state_dir: Option<Spanned<String>>,
    pub(super) connect_timeout_seconds: Option<Spanned<f64>>,
    pub(super) response_timeout_seconds: Option<Spanned<f64>>,
    pub(super) max_in_flight: Option<Spanned<i64>>,
    pub(super) shutdown_grace_seconds: Option<Spanned<f64>>,
    pub(super) allow_clients: Option<Spanned<Vec<Spanned<String>>>>,
    pub(super) idle_host_seconds: Option<Spanned<f64>>,
    pub(super) connect_ports: Option<Spanned<Vec<Spanned<i64>>>>,
    pub(super) upstream_ca: Option<Spanned<String>>,
    pub(super) hosts_file: Option<Spanned<String>>,
    pub(super) cache_max_mb: Option<Spanned<i64>>,
    pub(super) global_rate: Option<Spanned<f64>>,
    pub(super) global_burst: Option<Spanned<i64>>,
    pub(super) upstream_proxy: Option<Spanned<String>>,
    pub(super) max_connections: Option<Spanned<i64>>,
    pub(super) max_connections_per_client: Option<Spanned<i64>>,
    pub(super) max_upstream_connections: Option<Spanned<i64>>,
    pub(super) header_timeout_seconds: Option<Spanned<f64>>,
    pub(super) deny_destinations: Option<Spanned<Vec<Spanned<String>>>>,
    pub(super) allow_destinations: Option<Spanned<Vec<Spanned<String>>>>,
}
