//! The configuration file: strict TOML structs, then a validated, typed [`Config`].
//!
//! Stage one (`read`) splits the TOML into sections; stage two (`validate`) reads every key
//! through its section's key table (`keys`: unknown keys with the nearest known one, wrong types,
//! ranges), checks keys against each other, and reports every problem at once, each with file,
//! line, key and value. Host rules resolve to one [`HostPolicy`] each, so the request path never looks at
//! the file structs. The config owns what the file says and how a host finds its policy. It does
//! not read the CLI (that is `main.rs`) and holds no runtime state but the handle to the config in
//! force; what a block page looks like is
//! `crate::pacing::blocks`'s job, the config only carries the markers a file lists.
//!
//! | file | owns |
//! |---|---|
//! | `mod.rs` | [`Config`]: load, parse, the policy of a host, who may connect; [`ConfigErrors`] |
//! | `file.rs` | the file's sections as written, each entry with its place (stage one) |
//! | `read.rs` | reading the TOML into sections; syntax errors, unknown sections |
//! | `include.rs` | `include = [...]`: the `[[host]]` and `[[job]]` tables of other files (presets) |
//! | `built_in.rs` | the files compiled in: `config/courtesy.toml` and its presets, for a binary installed alone |
//! | `key_tables/` | the key tables: every key once, with its doc, default, range and kind |
//! | `reference.rs` | the reference page and `config/courtesy.toml`, made from the key tables |
//! | `live.rs` | [`LiveConfig`]: the config in force, shared, replaced whole by a reload |
//! | `validate/` | the validator (stage two): shared checks, then settings and policies |
//! | `host_policy.rs` | [`HostPolicy`], its groups of keys and their defaults; [`HostRule`], a pattern and the policy it gives |
//! | `off_peak.rs` | the [`OffPeak`] window: a daily stretch with its own rate |
//! | `choices.rs` | the closed-choice enums: [`OnCooldown`], [`HttpsMode`], [`CacheMode`], [`KeyMode`], [`ResourceKind`], [`Controller`], [`UpstreamHttp2`] |
//! | `word.rs` | [`ConfigWord`]: each of those enums' one word table, read from its serde derive |
//! | `settings.rs` | [`ProxySettings`], [`AdminSettings`], [`AlertSettings`], [`TelemetrySettings`], [`SharedSettings`]: their keys and defaults |
//! | `parent.rs` | [`UpstreamProxy`] and [`Route`]: parent proxy URLs, parsed and redacted |
//! | `block_markers.rs` | [`BlockMarkers`]: what a challenge page contains, the defaults, the matcher; the vendors' own block pages ([`VendorBlockPath`]) |
//! | `redis_url.rs` | `[shared] redis_url` read: one server, a Cluster's seeds, a master's Sentinels |
//! | `pattern.rs` | [`HostPattern`], client networks and addresses |

mod agents;
mod block_markers;
mod built_in;
mod choices;
mod file;
mod host_policy;
mod include;
mod job;
pub mod key_tables;
mod live;
mod off_peak;
mod parent;
mod pattern;
mod problems;
mod read;
pub(crate) mod redis_url;
pub mod reference;
pub(crate) mod secrets;
mod settings;
mod signing;
mod suggest;
mod validate;
mod word;

#[cfg(test)]
mod tests;

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;

use crate::wire::literal::canonical_ip;
pub use agents::{authority_of, Agent};
pub use block_markers::{BlockMarkers, VendorBlockPath, DEFAULT_BLOCK_MARKERS};
pub use built_in::{BUILT_IN_CONFIG, BUILT_IN_NAME};
pub use choices::{
    CacheMode, ClientAuth, ContentPreferences, Controller, HttpsMode, KeyMode, OnCooldown,
    Priority, Purpose, ResourceKind, SigningMode, Trigger, UpstreamHttp2,
};
pub use host_policy::{
    Adaptive, BlockSettings, BudgetScope, CooldownSettings, Forward, HostPolicy, HostRule,
    PacingSettings, Preferences, Robots,
};
pub use job::JobSettings;
pub use live::LiveConfig;
pub use off_peak::OffPeak;
pub use parent::{ParentCredentials, ParentScheme, Route, UpstreamProxy, SOCKS_DEFAULT_PORT};
pub use pattern::HostPattern;
pub use settings::{
    AdminSettings, AlertSettings, ProxySettings, SharedSettings, TelemetrySettings,
};
pub use signing::SigningSettings;
pub use word::ConfigWord;

use validate::Validator;

/// The whole validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where it was read from (for messages), or `<built-in defaults>`.
    pub source: String,
    /// `[proxy]`.
    pub proxy: ProxySettings,
    /// `[defaults]`, the policy of any host no rule matches.
    pub defaults: Arc<HostPolicy>,
    /// `[[host]]` rules in file order.
    pub hosts: Vec<HostRule>,
    /// `[[job]]`s in file order.
    pub jobs: Vec<Arc<JobSettings>>,
    /// `[admin]`.
    pub admin: AdminSettings,
    /// `[alerts]`.
    pub alerts: AlertSettings,
    /// `[telemetry]`.
    pub telemetry: TelemetrySettings,
    /// `[shared]`: the store several instances keep one budget in; `None`, this instance's own.
    pub shared: Option<SharedSettings>,
    /// `[signing]`: the Web Bot Auth key and when requests are signed.
    pub signing: SigningSettings,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            source: "<built-in defaults>".into(),
            proxy: ProxySettings::default(),
            defaults: Arc::new(HostPolicy::default()),
            hosts: Vec::new(),
            jobs: Vec::new(),
            admin: AdminSettings::default(),
            alerts: AlertSettings::default(),
            telemetry: TelemetrySettings::default(),
            shared: None,
            signing: SigningSettings::default(),
        }
    }
}

impl Config {
    /// Reads and validates a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigErrors {
            errors: vec![format!("{name}: cannot read the config file: {e}")],
        })?;
        let dir = path.parent().unwrap_or(Path::new("."));
        Config::parse_in(&text, &name, dir)
    }

    /// The built-in config (`config/courtesy.toml` with its presets, compiled in): what courtesy
    /// runs on when it is given no file and finds none at the default path.
    pub fn built_in() -> Result<Config, ConfigErrors> {
        Config::parse_in(BUILT_IN_CONFIG, BUILT_IN_NAME, Path::new(BUILT_IN_NAME))
    }

    /// Validates config text; `name` is used in messages.
    pub fn parse(text: &str, name: &str) -> Result<Config, ConfigErrors> {
        let dir = Path::new(name).parent().unwrap_or(Path::new("."));
        Config::parse_in(text, name, dir)
    }

    /// Validates config text whose `include`s are relative to `dir` (the config file's folder).
    pub fn parse_in(text: &str, name: &str, dir: &Path) -> Result<Config, ConfigErrors> {
        let mut v = Validator::new(name, text);
        let mut file = read::read(text, name, &mut v)?;
        let proxy = v.proxy(&file.proxy);
        let admin = v.admin(&file.admin, &proxy);
        let alerts = v.alerts(&file.alerts);
        let telemetry = v.telemetry(&file.telemetry);
        let shared = v.shared(file.shared.as_ref());
        let signing = v.signing(&file.signing);
        let mut base = HostPolicy::default();
        base.forward.upstream = proxy.upstream_proxy.clone();
        if let Some(value) = file.defaults.take("upstream_proxy") {
            v.error(
                value.span().start,
                "[defaults] upstream_proxy: not a [defaults] key: [defaults] takes [proxy] \
                 upstream_proxy, and a [[host]] rule may set its own",
            );
        }
        let defaults = v.policy(&base, &file.defaults, "[defaults]", "[defaults] ");
        let own_hosts = v.host_rules(&mut file.host, &defaults, proxy.listen);
        let own_jobs = v.jobs(&file.job, proxy.client_auth, &signing);
        // What the included files hold comes first: this file's own rules, later, win ties.
        let (mut hosts, mut jobs) = (Vec::new(), Vec::new());
        for (at, rel) in &file.include {
            let included = include::read(dir, rel, &defaults, (&proxy, &signing));
            match included {
                Ok((more_hosts, more_jobs)) => {
                    hosts.extend(more_hosts);
                    jobs.extend(more_jobs);
                }
                Err(include::Failed::Unread(why)) => {
                    v.error(*at, &format!("include {rel:?}: {why}"));
                }
                Err(include::Failed::Invalid(errors)) => v.absorb(errors),
            }
        }
        hosts.extend(own_hosts);
        jobs.extend(own_jobs);
        v.finish()?;
        Ok(Config {
            source: name.to_string(),
            proxy,
            defaults: Arc::new(defaults),
            hosts,
            jobs,
            admin,
            alerts,
            telemetry,
            shared,
            signing,
        })
    }

    /// The policy for `host` (lowercase, no brackets) on `port`: the most specific matching rule, or
    /// the defaults.
    pub fn policy_for(&self, host: &str, port: u16) -> Arc<HostPolicy> {
        self.rule_for(host, port)
            .map(|rule| rule.policy.clone())
            .unwrap_or_else(|| self.defaults.clone())
    }

    /// The rule that governs `host` on `port`: the most specific match; of equally specific ones
    /// the later (a file's own rules come after those it includes, so they win). `None`: the
    /// defaults govern.
    pub fn rule_for(&self, host: &str, port: u16) -> Option<&HostRule> {
        let mut best: Option<(usize, &HostRule)> = None;
        for rule in &self.hosts {
            if let Some(score) = rule.pattern.specificity(host, port) {
                if best.is_none_or(|(s, _)| score >= s) {
                    best = Some((score, rule));
                }
            }
        }
        best.map(|(_, rule)| rule)
    }

    /// Checks that listening on `addr` is safe with this config: beyond loopback, only with
    /// `allow_clients`, so that courtesy is never an open proxy.
    pub fn check_listen(&self, what: &str, addr: SocketAddr) -> Result<(), String> {
        if addr.ip().is_loopback() || !self.proxy.allow_clients.is_empty() {
            return Ok(());
        }
        Err(format!(
            "{what} {addr} is not a loopback address: set [proxy] allow_clients (a list of CIDR \
             networks) in {} to say who may use courtesy; it is never an open proxy",
            self.source
        ))
    }

    /// What is allowed but probably a mistake, one sentence each: `allow_clients` that lets
    /// every address in (an open proxy, if the listener is reachable); a `[[job]]` without a
    /// token while other machines may connect (only loopback clients can claim it, so crawlers
    /// elsewhere get a 407 for a job the file names); a host that would be signed but whose
    /// CONNECTs are blind tunnels (nothing inside can be signed); a listener beyond loopback
    /// without `deny_destinations` (other machines' clients reach this one's private
    /// neighbours); a token under 128 bits or one a shipped example publishes
    /// ([`secrets::warnings`]).
    pub fn warnings(&self) -> Vec<String> {
        let open = self
            .proxy
            .allow_clients
            .iter()
            .filter(|net| net.prefix_len() == 0)
            .map(|net| {
                format!(
                    "[proxy] allow_clients has {net}: every address may use courtesy (an open \
                     proxy wherever the listener can be reached); name the crawlers' networks"
                )
            });
        let remote_clients = self
            .proxy
            .allow_clients
            .iter()
            .any(|net| !net.addr().is_loopback());
        let tokenless = self
            .jobs
            .iter()
            .filter(|job| remote_clients && job.token.is_none() && job.token_sha256.is_none())
            .map(|job| {
                format!(
                    "[[job]] {} has no token: only clients on this machine may claim it, so a \
                     crawler elsewhere gets a 407; give it a token (or token_sha256)",
                    job.name
                )
            });
        let tunnels = std::iter::once(("[defaults]".to_string(), &self.defaults))
            .chain(self.hosts.iter().map(|rule| {
                let label = format!("host rule {} ({})", rule.number, rule.pattern);
                (label, &rule.policy)
            }))
            .filter_map(|(label, policy)| {
                self.unsigned_tunnel(policy)
                    .map(|why| format!("{label}: {why}"))
            });
        let unguarded = (!self.proxy.listen.ip().is_loopback()
            && self.proxy.deny_destinations.is_empty())
        .then(|| {
            format!(
                "[proxy] listen {} is not a loopback address and [proxy] deny_destinations is \
                 empty: clients from other machines reach this machine's own services, \
                 link-local (cloud metadata at 169.254.169.254) and private networks through \
                 courtesy; deny them (config/team.toml has the list)",
                self.proxy.listen
            )
        });
        let secrets = secrets::warnings(self.admin.token.as_deref(), &self.jobs);
        open.chain(tokenless)
            .chain(tunnels)
            .chain(unguarded)
            .chain(secrets)
            .collect()
    }

    /// An error when the admin listener `addr` is beyond loopback without an `[admin] token`:
    /// the same rule for `--admin-listen` as for `admin_listen` in the file, since the admin API
    /// can pause hosts and change rates.
    pub fn check_admin_listen(&self, what: &str, addr: SocketAddr) -> Result<(), String> {
        if addr.ip().is_loopback() || self.admin.token.is_some() {
            return Ok(());
        }
        Err(format!(
            "{what} {addr} is not a loopback address: set [admin] token in {} (at least 16 \
             characters); the admin API can pause hosts and change rates",
            self.source
        ))
    }

    /// Whether a client at `ip` may use courtesy: without `allow_clients`, loopback only; with it,
    /// exactly the listed networks (list `127.0.0.0/8` too if local clients should keep access).
    pub fn client_allowed(&self, ip: IpAddr) -> bool {
        let ip = canonical_ip(ip);
        if self.proxy.allow_clients.is_empty() {
            return ip.is_loopback();
        }
        self.proxy.allow_clients.iter().any(|n| n.contains(&ip))
    }
}

/// Every problem found in a config file, one message each (file:line: key: problem, got value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors {
    /// One message per problem.
    pub errors: Vec<String>,
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.errors.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            f.write_str(e)?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// The 1-based line of byte `offset` in `text`, as messages name it (0 when out of range).
fn line_of(text: &str, offset: usize) -> usize {
    text.get(..offset)
        .map(|before| before.matches('\n').count() + 1)
        .unwrap_or(0)
}
