//! The configuration file: strict TOML structs, then a validated, typed [`Config`].
//!
//! Stage one (serde, `deny_unknown_fields`) catches typos and wrong types; stage two checks ranges and
//! meanings and reports every problem at once, each with file, line, key and value. Host rules resolve
//! to one [`HostPolicy`] each, so the request path never looks at the file structs. This module does not
//! read the CLI (that is `main.rs`) and holds no runtime state.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;
use serde::Deserialize;
use toml::Spanned;

/// The pacing rules for one host, fully resolved (defaults merged with the most specific rule).
#[derive(Debug, Clone, PartialEq)]
pub struct HostPolicy {
    /// Requests per second the host may receive (token refill rate).
    pub rate: f64,
    /// Requests that may leave at once after an idle spell (bucket capacity).
    pub burst: u32,
    /// Requests in flight to the host at the same time.
    pub concurrency: u32,
    /// 0..=1: each wait for a token is stretched by a random 0..jitter × 1/rate.
    pub jitter: f64,
    /// Requests that may wait for the host; the next one is refused with 503.
    pub max_queue: usize,
    /// How long a request may wait for its turn before it is answered with 503.
    pub max_wait: Duration,
}

impl Default for HostPolicy {
    /// The seed article's defaults: one request per second, one in flight.
    fn default() -> Self {
        HostPolicy {
            rate: 1.0,
            burst: 1,
            concurrency: 1,
            jitter: 0.0,
            max_queue: 1000,
            max_wait: Duration::from_secs(300),
        }
    }
}

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
        }
    }
}

fn default_state_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("XDG_STATE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir).join("courtesy");
    }
    if let Some(home) = std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(home).join(".local/state/courtesy");
    }
    PathBuf::from(".courtesy-state")
}

/// A `[[host]]` pattern: an exact host or `*.suffix`, optionally with `:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPattern {
    /// Lowercased host, or the suffix after `*.` for a wildcard.
    host: String,
    wildcard: bool,
    port: Option<u16>,
}

impl HostPattern {
    /// Parses `shop.example.com`, `*.example.com`, `127.0.0.2`, `[::1]:8080`, `host:8080`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim().to_ascii_lowercase();
        if text.is_empty() {
            return Err("must not be empty".into());
        }
        let (host, port) = split_host_port(&text)?;
        let (host, wildcard) = match host.strip_prefix("*.") {
            Some(rest) => (rest.to_string(), true),
            None => (host.to_string(), false),
        };
        if host.is_empty() || host.contains('*') || host.contains('/') {
            return Err("expected a host such as \"shop.example.com\" or \"*.example.com\"".into());
        }
        Ok(HostPattern {
            host,
            wildcard,
            port,
        })
    }

    /// How specific a match of this pattern is, or `None` if it does not match. Exact beats wildcard,
    /// a longer wildcard suffix beats a shorter one, and a port beats no port.
    pub fn specificity(&self, host: &str, port: u16) -> Option<usize> {
        if self.port.is_some_and(|p| p != port) {
            return None;
        }
        let port_bonus = usize::from(self.port.is_some());
        if self.wildcard {
            let matches = host.len() > self.host.len()
                && host.ends_with(&self.host)
                && host.as_bytes()[host.len() - self.host.len() - 1] == b'.';
            matches.then(|| self.host.len() * 2 + port_bonus)
        } else {
            (host == self.host).then_some(usize::MAX / 2 + port_bonus)
        }
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.wildcard {
            f.write_str("*.")?;
        }
        f.write_str(&self.host)?;
        if let Some(port) = self.port {
            write!(f, ":{port}")?;
        }
        Ok(())
    }
}

fn split_host_port(text: &str) -> Result<(&str, Option<u16>), String> {
    if let Some(rest) = text.strip_prefix('[') {
        let (ip, after) = rest
            .split_once(']')
            .ok_or_else(|| "unclosed '[' in an IPv6 address".to_string())?;
        let port = match after.strip_prefix(':') {
            Some(p) => Some(p.parse().map_err(|_| format!("bad port {p:?}"))?),
            None if after.is_empty() => None,
            None => return Err(format!("unexpected {after:?} after the IPv6 address")),
        };
        return Ok((ip, port));
    }
    if text.matches(':').count() > 1 {
        // A bare IPv6 address.
        return Ok((text, None));
    }
    match text.split_once(':') {
        Some((host, p)) => Ok((
            host,
            Some(p.parse().map_err(|_| format!("bad port {p:?}"))?),
        )),
        None => Ok((text, None)),
    }
}

/// One `[[host]]` rule after validation.
#[derive(Debug, Clone)]
pub struct HostRule {
    /// 1-based position in the file, as users count them.
    pub number: usize,
    /// What the rule matches.
    pub pattern: HostPattern,
    /// The policy a matching host gets.
    pub policy: Arc<HostPolicy>,
}

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
}

impl Default for Config {
    fn default() -> Self {
        Config {
            source: "<built-in defaults>".into(),
            proxy: ProxySettings::default(),
            defaults: Arc::new(HostPolicy::default()),
            hosts: Vec::new(),
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
        Config::parse(&text, &name)
    }

    /// Validates config text; `name` is used in messages.
    pub fn parse(text: &str, name: &str) -> Result<Config, ConfigErrors> {
        let file: FileConfig = toml::from_str(text).map_err(|e| {
            let line = e.span().map(|s| line_of(text, s.start)).unwrap_or(0);
            ConfigErrors {
                errors: vec![format!("{name}:{line}: {}", e.message().trim())],
            }
        })?;
        let mut v = Validator {
            name,
            text,
            errors: Vec::new(),
        };
        let proxy = v.proxy(&file.proxy);
        let defaults = v.policy(&HostPolicy::default(), &file.defaults, "[defaults]");
        let mut hosts = Vec::new();
        for (i, rule) in file.host.iter().enumerate() {
            let number = i + 1;
            let label = format!("host rule {number} (match = {:?})", rule.pattern.get_ref());
            let pattern = match HostPattern::parse(rule.pattern.get_ref()) {
                Ok(p) => p,
                Err(msg) => {
                    v.error(rule.pattern.span().start, &format!("{label}: match {msg}"));
                    continue;
                }
            };
            let policy = v.policy(&defaults, &rule.policy(), &label);
            hosts.push(HostRule {
                number,
                pattern,
                policy: Arc::new(policy),
            });
        }
        if v.errors.is_empty() {
            Ok(Config {
                source: name.to_string(),
                proxy,
                defaults: Arc::new(defaults),
                hosts,
            })
        } else {
            Err(ConfigErrors { errors: v.errors })
        }
    }

    /// The policy for `host` (lowercase, no brackets) on `port`: the most specific matching rule, or
    /// the defaults. Ties go to the rule that comes first in the file.
    pub fn policy_for(&self, host: &str, port: u16) -> Arc<HostPolicy> {
        let mut best: Option<(usize, &HostRule)> = None;
        for rule in &self.hosts {
            if let Some(score) = rule.pattern.specificity(host, port) {
                if best.is_none_or(|(s, _)| score > s) {
                    best = Some((score, rule));
                }
            }
        }
        best.map(|(_, rule)| rule.policy.clone())
            .unwrap_or_else(|| self.defaults.clone())
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

/// Maps IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d`) to plain IPv4 so that rules match either form.
pub fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map(IpAddr::V4)
            .unwrap_or(IpAddr::V6(v6)),
        v4 => v4,
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

fn line_of(text: &str, offset: usize) -> usize {
    text.get(..offset)
        .map(|before| before.matches('\n').count() + 1)
        .unwrap_or(0)
}

// ---- stage one: the file as written -------------------------------------------------------------

/// Defines the per-host keys once, for both `[defaults]` and `[[host]]`: later issues add keys here.
macro_rules! policy_keys {
    ($($key:ident: $ty:ty),* $(,)?) => {
        #[derive(Debug, Default, Deserialize)]
        #[serde(deny_unknown_fields)]
        struct FilePolicy {
            $($key: Option<Spanned<$ty>>,)*
        }

        #[derive(Debug, Deserialize)]
        #[serde(deny_unknown_fields)]
        struct FileHostRule {
            #[serde(rename = "match")]
            pattern: Spanned<String>,
            $($key: Option<Spanned<$ty>>,)*
        }

        impl FileHostRule {
            fn policy(&self) -> FilePolicy {
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
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    #[serde(default)]
    proxy: FileProxy,
    #[serde(default)]
    defaults: FilePolicy,
    #[serde(default)]
    host: Vec<FileHostRule>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileProxy {
    listen: Option<Spanned<String>>,
    admin_listen: Option<Spanned<String>>,
    state_dir: Option<Spanned<String>>,
    connect_timeout_seconds: Option<Spanned<f64>>,
    response_timeout_seconds: Option<Spanned<f64>>,
    max_in_flight: Option<Spanned<i64>>,
    shutdown_grace_seconds: Option<Spanned<f64>>,
    allow_clients: Option<Spanned<Vec<Spanned<String>>>>,
    idle_host_seconds: Option<Spanned<f64>>,
    connect_ports: Option<Spanned<Vec<Spanned<i64>>>>,
}

// ---- stage two: meanings and ranges -------------------------------------------------------------

struct Validator<'a> {
    name: &'a str,
    text: &'a str,
    errors: Vec<String>,
}

impl Validator<'_> {
    fn error(&mut self, offset: usize, message: &str) {
        let line = line_of(self.text, offset);
        self.errors.push(format!("{}:{line}: {message}", self.name));
    }

    /// A number of seconds in `range` (inclusive), as a `Duration`.
    fn seconds(
        &mut self,
        value: &Option<Spanned<f64>>,
        label: &str,
        key: &str,
        min: f64,
        max: f64,
    ) -> Option<Duration> {
        let v = value.as_ref()?;
        let secs = *v.get_ref();
        if secs.is_finite() && secs >= min && secs <= max {
            Some(Duration::from_secs_f64(secs))
        } else {
            self.error(
                v.span().start,
                &format!("{label}: {key} must be between {min} and {max} seconds, got {secs}"),
            );
            None
        }
    }

    /// A whole number in `min..=max`.
    fn count(
        &mut self,
        value: &Option<Spanned<i64>>,
        label: &str,
        key: &str,
        min: i64,
        max: i64,
    ) -> Option<i64> {
        let v = value.as_ref()?;
        let n = *v.get_ref();
        if (min..=max).contains(&n) {
            Some(n)
        } else {
            self.error(
                v.span().start,
                &format!("{label}: {key} must be between {min} and {max}, got {n}"),
            );
            None
        }
    }

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

    fn proxy(&mut self, file: &FileProxy) -> ProxySettings {
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
        if let Some(list) = &file.allow_clients {
            for entry in list.get_ref() {
                match parse_network(entry.get_ref()) {
                    Ok(net) => p.allow_clients.push(net),
                    Err(()) => self.error(
                        entry.span().start,
                        &format!(
                            "[proxy] allow_clients: expected a CIDR network such as \
                             \"10.0.0.0/8\" or an IP address, got {:?}",
                            entry.get_ref()
                        ),
                    ),
                }
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

    fn policy(&mut self, base: &HostPolicy, file: &FilePolicy, label: &str) -> HostPolicy {
        let mut p = base.clone();
        if let Some(v) = &file.rate {
            let rate = *v.get_ref();
            if rate.is_finite() && rate > 0.0 && rate <= 1_000_000.0 {
                p.rate = rate;
            } else {
                self.error(
                    v.span().start,
                    &format!("{label}: rate must be > 0 and at most 1000000 requests per second, got {rate}"),
                );
            }
        }
        if let Some(n) = self.count(&file.burst, label, "burst", 1, 1_000_000) {
            p.burst = n as u32;
        }
        if let Some(n) = self.count(&file.concurrency, label, "concurrency", 1, 1_000_000) {
            p.concurrency = n as u32;
        }
        if let Some(v) = &file.jitter {
            let j = *v.get_ref();
            if (0.0..=1.0).contains(&j) {
                p.jitter = j;
            } else {
                self.error(
                    v.span().start,
                    &format!("{label}: jitter must be between 0 and 1, got {j}"),
                );
            }
        }
        if let Some(n) = self.count(&file.max_queue, label, "max_queue", 0, 10_000_000) {
            p.max_queue = n as usize;
        }
        let w = &file.max_wait_seconds;
        if let Some(d) = self.seconds(w, label, "max_wait_seconds", 0.0, 86400.0) {
            p.max_wait = d;
        }
        p
    }
}

fn expand_home(path: &str) -> PathBuf {
    match (path.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => PathBuf::from(home).join(rest),
        _ => PathBuf::from(path),
    }
}

fn parse_network(text: &str) -> Result<IpNet, ()> {
    let text = text.trim();
    if let Ok(net) = text.parse::<IpNet>() {
        return Ok(net);
    }
    text.parse::<IpAddr>().map(IpNet::from).map_err(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigErrors> {
        Config::parse(text, "test.toml")
    }

    #[test]
    fn an_empty_file_gives_the_seed_defaults() {
        let c = parse("").unwrap();
        assert_eq!(*c.defaults, HostPolicy::default());
        assert_eq!(c.defaults.rate, 1.0);
        assert_eq!(c.defaults.concurrency, 1);
        assert_eq!(c.proxy.listen, "127.0.0.1:3128".parse().unwrap());
        assert_eq!(c.proxy.admin_listen, "127.0.0.1:3129".parse().unwrap());
    }

    #[test]
    fn the_most_specific_rule_wins() {
        let c = parse(
            r#"
            [defaults]
            rate = 2
            [[host]]
            match = "*.example.com"
            rate = 3.0
            [[host]]
            match = "*.shop.example.com"
            rate = 4.0
            [[host]]
            match = "a.shop.example.com"
            burst = 7
            [[host]]
            match = "a.shop.example.com:8080"
            rate = 9.0
            "#,
        )
        .unwrap();
        assert_eq!(c.policy_for("other.test", 80).rate, 2.0);
        assert_eq!(
            c.policy_for("example.com", 80).rate,
            2.0,
            "*.x does not match x"
        );
        assert_eq!(c.policy_for("www.example.com", 80).rate, 3.0);
        assert_eq!(c.policy_for("b.shop.example.com", 80).rate, 4.0);
        let exact = c.policy_for("a.shop.example.com", 443);
        assert_eq!(
            (exact.rate, exact.burst),
            (2.0, 7),
            "unset keys come from [defaults]"
        );
        assert_eq!(c.policy_for("a.shop.example.com", 8080).rate, 9.0);
        assert_eq!(c.policy_for("notexample.com", 80).rate, 2.0);
    }

    #[test]
    fn all_errors_are_reported_at_once_with_line_key_and_value() {
        let err = parse(
            "[defaults]\nrate = 0\nburst = 0\njitter = 1.5\n[[host]]\nmatch = \"*.shop.test\"\nrate = -1\n",
        )
        .unwrap_err();
        assert_eq!(err.errors.len(), 4, "{err}");
        assert_eq!(
            err.errors[0],
            "test.toml:2: [defaults]: rate must be > 0 and at most 1000000 requests per second, got 0"
        );
        assert!(
            err.errors[1].starts_with("test.toml:3: [defaults]: burst"),
            "{err}"
        );
        assert!(err.errors[2].contains("jitter") && err.errors[2].contains("1.5"));
        assert!(err.errors[3]
            .starts_with("test.toml:7: host rule 1 (match = \"*.shop.test\"): rate must be > 0"));
    }

    #[test]
    fn unknown_keys_and_wrong_types_name_the_line() {
        let err = parse("[defaults]\nrate = 1\nrat = 2\n").unwrap_err();
        assert!(err.errors[0].starts_with("test.toml:3:"), "{err}");
        assert!(err.errors[0].contains("rat"), "{err}");
        let err = parse("[proxy]\nmax_in_flight = \"many\"\n").unwrap_err();
        assert!(err.errors[0].starts_with("test.toml:2:"), "{err}");
    }

    #[test]
    fn listening_beyond_loopback_needs_allow_clients() {
        let err = parse("[proxy]\nlisten = \"0.0.0.0:3128\"\n").unwrap_err();
        assert!(err.errors[0].contains("allow_clients"), "{err}");
        let c = parse("[proxy]\nlisten = \"0.0.0.0:3128\"\nallow_clients = [\"10.0.0.0/8\", \"192.168.1.7\"]\n")
            .unwrap();
        assert!(c.client_allowed("10.1.2.3".parse().unwrap()));
        assert!(c.client_allowed("192.168.1.7".parse().unwrap()));
        assert!(c.client_allowed("::ffff:10.1.2.3".parse().unwrap()));
        assert!(
            !c.client_allowed("127.0.0.1".parse().unwrap()),
            "the list replaces loopback"
        );
        assert!(!c.client_allowed("192.168.1.8".parse().unwrap()));
        assert!(Config::default().client_allowed("::1".parse().unwrap()));
        assert!(!Config::default().client_allowed("10.0.0.1".parse().unwrap()));
        assert!(c
            .check_listen("listen", "0.0.0.0:1".parse().unwrap())
            .is_ok());
        assert!(Config::default()
            .check_listen("listen", "0.0.0.0:1".parse().unwrap())
            .is_err());
    }

    #[test]
    fn bad_patterns_and_networks_are_reported() {
        let err = parse(
            "[proxy]\nallow_clients = [\"nope\"]\n[[host]]\nmatch = \"a.*.b\"\n[[host]]\nmatch = \"x:y\"\n",
        )
        .unwrap_err();
        assert_eq!(err.errors.len(), 3, "{err}");
        assert!(err.errors[0].starts_with("test.toml:2:"));
        assert!(err.errors[1].starts_with("test.toml:4: host rule 1"));
        assert!(err.errors[2].starts_with("test.toml:6: host rule 2"));
    }

    #[test]
    fn patterns_parse_ports_and_ipv6() {
        let p = HostPattern::parse("[::1]:8080").unwrap();
        assert!(p.specificity("::1", 8080).is_some());
        assert!(p.specificity("::1", 80).is_none());
        let p = HostPattern::parse("127.0.0.2").unwrap();
        assert!(p.specificity("127.0.0.2", 1234).is_some());
        assert_eq!(
            HostPattern::parse("*.Example.COM").unwrap().to_string(),
            "*.example.com"
        );
    }
}
