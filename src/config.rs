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
    /// Whether the rate adapts to feedback (AIMD) between `min_rate` and `max_rate`.
    pub adaptive: bool,
    /// The lowest rate adaptation may reach.
    pub min_rate: f64,
    /// The highest rate adaptation may reach, however healthy the host looks.
    pub max_rate: f64,
    /// Rate multiplier on 429 and overload (once per wave of responses).
    pub decrease_factor: f64,
    /// Rate multiplier when a response is slower than `slow_response`.
    pub slow_factor: f64,
    /// Latency to response headers above which the host counts as straining.
    pub slow_response: Duration,
    /// Rate added per healthy response while the budget was the bottleneck.
    pub increase_step: f64,
    /// Statuses that mean "overloaded": back off.
    pub backoff_statuses: Vec<u16>,
    /// The longest `Retry-After` (or RateLimit reset) honoured; longer ones are cut to this.
    pub max_retry_after: Duration,
    /// The first backoff window when the host gave no Retry-After.
    pub backoff_initial: Duration,
    /// The longest backoff window.
    pub backoff_max: Duration,
    /// What requests get while the host cools down.
    pub on_cooldown: OnCooldown,
    /// After a cooldown, the rate resumes at this fraction of the rate before it.
    pub resume_factor: f64,
    /// How often courtesy itself retries a bodiless GET/HEAD/OPTIONS that got 429/503.
    pub retry_idempotent: u32,
    /// What a CONNECT to this host becomes.
    pub https: HttpsMode,
    /// Whether robots.txt is fetched and obeyed for this host.
    pub obey_robots: bool,
    /// The robots.txt group to obey; `None`: the product token of the client's User-Agent.
    pub robots_user_agent: Option<String>,
    /// The longest Crawl-delay honoured as such; longer ones pace at this and log a warning.
    pub max_crawl_delay: Duration,
    /// How much of a text response is scanned for block markers.
    pub block_scan_bytes: usize,
    /// Strings that mark a challenge or block page (matched case-insensitively).
    pub block_markers: Arc<BlockMarkers>,
    /// How long a detected block pauses the host.
    pub block_pause: Duration,
    /// After a block pause, the rate resumes at this fraction of the rate before it.
    pub block_resume_factor: f64,
    /// This many 403s in a row count as a hard block (0: never).
    pub hard_block_after: u32,
    /// Resource kinds answered locally with 403 instead of being fetched.
    pub skip_resources: Vec<ResourceKind>,
    /// A different rate inside a daily time window.
    pub off_peak: Option<OffPeak>,
    /// Whether GET responses are stored, revalidated or served from the store.
    pub cache: CacheMode,
}

/// What courtesy does with stored GET responses (`cache`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheMode {
    /// Nothing is stored.
    Off,
    /// Responses with an ETag or Last-Modified are stored; repeats are revalidated with
    /// If-None-Match / If-Modified-Since, and a 304 is answered from the store as the full 200.
    Revalidate,
    /// Development: repeated GETs are answered from the store without asking the origin.
    Dev,
}

/// Kinds of sub-resources a plain crawler rarely needs (`skip_resources`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResourceKind {
    /// Pictures: .png, .jpg, image/*.
    Image,
    /// Web fonts.
    Font,
    /// JavaScript.
    Script,
    /// CSS.
    Stylesheet,
    /// Audio and video.
    Media,
}

impl ResourceKind {
    /// The config word for this kind.
    pub fn name(self) -> &'static str {
        match self {
            ResourceKind::Image => "image",
            ResourceKind::Font => "font",
            ResourceKind::Script => "script",
            ResourceKind::Stylesheet => "stylesheet",
            ResourceKind::Media => "media",
        }
    }

    fn parse(word: &str) -> Option<ResourceKind> {
        [
            ResourceKind::Image,
            ResourceKind::Font,
            ResourceKind::Script,
            ResourceKind::Stylesheet,
            ResourceKind::Media,
        ]
        .into_iter()
        .find(|k| k.name() == word)
    }
}

/// A daily window with its own rate (`off_peak = { hours, timezone, rate }`).
#[derive(Debug, Clone)]
pub struct OffPeak {
    /// Start of the window, minutes after local midnight.
    pub start_minute: u16,
    /// End of the window (exclusive), minutes after local midnight; may be before the start
    /// (a window across midnight).
    pub end_minute: u16,
    /// The IANA time zone name, as written.
    pub timezone_name: String,
    /// The time zone.
    pub timezone: jiff::tz::TimeZone,
    /// The rate inside the window.
    pub rate: f64,
}

impl PartialEq for OffPeak {
    fn eq(&self, other: &Self) -> bool {
        (
            self.start_minute,
            self.end_minute,
            &self.timezone_name,
            self.rate,
        ) == (
            other.start_minute,
            other.end_minute,
            &other.timezone_name,
            other.rate,
        )
    }
}

impl OffPeak {
    /// The first wall-clock time after `after` at which the window opens or closes.
    pub fn next_edge(&self, after: std::time::SystemTime) -> Option<std::time::SystemTime> {
        let now = jiff::Timestamp::try_from(after).ok()?;
        let today = self.timezone.to_datetime(now).date();
        let mut best: Option<jiff::Timestamp> = None;
        for date in [Some(today), today.tomorrow().ok()].into_iter().flatten() {
            for minute in [self.start_minute, self.end_minute] {
                let local = date.at((minute / 60) as i8, (minute % 60) as i8, 0, 0);
                let Ok(at) = self.timezone.to_ambiguous_timestamp(local).compatible() else {
                    continue;
                };
                if at > now && best.is_none_or(|b| at < b) {
                    best = Some(at);
                }
            }
        }
        std::time::SystemTime::try_from(best?).ok()
    }

    /// Whether the wall-clock time `at` falls inside the window.
    pub fn contains(&self, at: std::time::SystemTime) -> bool {
        let Ok(ts) = jiff::Timestamp::try_from(at) else {
            return false;
        };
        let local = self.timezone.to_datetime(ts);
        let minute = local.hour() as u16 * 60 + local.minute() as u16;
        if self.start_minute <= self.end_minute {
            (self.start_minute..self.end_minute).contains(&minute)
        } else {
            minute >= self.start_minute || minute < self.end_minute
        }
    }
}

/// Block markers with one matcher built at config time: a single case-insensitive pass over a
/// chunk finds any of them (scanning is on the streaming path of every text response). The regex
/// crate's literal search is about 5× faster here than a case-insensitive Aho-Corasick automaton
/// (18 µs against 92 µs per 64 KiB of HTML, measured).
#[derive(Debug, Clone)]
pub struct BlockMarkers {
    list: Vec<String>,
    matcher: Option<regex::bytes::Regex>,
    longest: usize,
}

impl PartialEq for BlockMarkers {
    fn eq(&self, other: &Self) -> bool {
        self.list == other.list
    }
}

impl BlockMarkers {
    /// Markers from `list` (compared without regard to ASCII case).
    pub fn new(list: Vec<String>) -> Self {
        let pattern = list
            .iter()
            .map(|m| regex::escape(m))
            .collect::<Vec<_>>()
            .join("|");
        let matcher = (!list.is_empty())
            .then(|| {
                regex::bytes::RegexBuilder::new(&pattern)
                    .case_insensitive(true)
                    .unicode(false)
                    .build()
                    .ok()
            })
            .flatten();
        let longest = list.iter().map(String::len).max().unwrap_or(0);
        BlockMarkers {
            list,
            matcher,
            longest,
        }
    }

    /// Whether there is nothing to look for.
    pub fn is_empty(&self) -> bool {
        self.matcher.is_none()
    }

    /// The markers.
    pub fn iter(&self) -> impl Iterator<Item = &str> {
        self.list.iter().map(String::as_str)
    }

    /// The length of the longest marker, in bytes.
    pub fn longest(&self) -> usize {
        self.longest
    }

    /// The first marker found in `haystack`, if any.
    pub fn find(&self, haystack: &[u8]) -> Option<&str> {
        let found = self.matcher.as_ref()?.find(haystack)?;
        let text = found.as_bytes();
        self.list
            .iter()
            .find(|m| m.as_bytes().eq_ignore_ascii_case(text))
            .map(String::as_str)
    }
}

/// The markers of challenge and block pages courtesy looks for by default.
pub const DEFAULT_BLOCK_MARKERS: [&str; 11] = [
    "unusual traffic from your computer network",
    "our systems have detected unusual traffic",
    "/sorry/index",
    "cf-challenge",
    "challenge-platform",
    "cf_chl_opt",
    "<title>just a moment...</title>",
    "g-recaptcha",
    "h-captcha",
    "px-captcha",
    "_incapsula_resource",
];

/// What courtesy does with a `CONNECT` tunnel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpsMode {
    /// Terminate TLS with the local CA and pace every request inside (the default).
    Intercept,
    /// Copy bytes blindly: one admission per tunnel, which paces connections, not requests.
    Tunnel,
}

/// What happens to requests for a host that is cooling down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnCooldown {
    /// Answer at once with a local 429 and the time left as `Retry-After`.
    Reject,
    /// Hold them, in order, until the window ends (up to `max_wait_seconds`, then the local 429).
    Hold,
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
            adaptive: false,
            min_rate: 0.2,
            max_rate: 5.0,
            decrease_factor: 0.5,
            slow_factor: 0.8,
            slow_response: Duration::from_millis(2000),
            increase_step: 0.05,
            backoff_statuses: vec![500, 502, 503, 504],
            max_retry_after: Duration::from_secs(600),
            backoff_initial: Duration::from_secs(2),
            backoff_max: Duration::from_secs(300),
            on_cooldown: OnCooldown::Reject,
            resume_factor: 0.5,
            retry_idempotent: 0,
            https: HttpsMode::Intercept,
            obey_robots: true,
            robots_user_agent: None,
            max_crawl_delay: Duration::from_secs(60),
            block_scan_bytes: 64 * 1024,
            block_markers: Arc::new(BlockMarkers::new(
                DEFAULT_BLOCK_MARKERS
                    .iter()
                    .map(|m| m.to_string())
                    .collect(),
            )),
            block_pause: Duration::from_secs(3600),
            block_resume_factor: 0.25,
            hard_block_after: 5,
            skip_resources: Vec::new(),
            off_peak: None,
            cache: CacheMode::Off,
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
    /// A PEM file of extra roots trusted for upstream TLS (private CAs).
    pub upstream_ca: Option<PathBuf>,
    /// The response store's size bound, in bytes.
    pub cache_max_bytes: u64,
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
            cache_max_bytes: 512 * 1024 * 1024,
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
    /// `[admin]`.
    pub admin: AdminSettings,
    /// `[alerts]`.
    pub alerts: AlertSettings,
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
}

impl Default for AdminSettings {
    fn default() -> Self {
        AdminSettings {
            token: None,
            metrics_max_hosts: 1000,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            source: "<built-in defaults>".into(),
            proxy: ProxySettings::default(),
            defaults: Arc::new(HostPolicy::default()),
            hosts: Vec::new(),
            admin: AdminSettings::default(),
            alerts: AlertSettings::default(),
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
        let admin = v.admin(&file.admin, &proxy);
        let alerts = v.alerts(&file.alerts);
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
                admin,
                alerts,
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
    adaptive: bool,
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
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileOffPeak {
    hours: String,
    timezone: String,
    rate: f64,
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
    #[serde(default)]
    admin: FileAdmin,
    #[serde(default)]
    alerts: FileAlerts,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileAlerts {
    webhook: Option<Spanned<String>>,
    webhook_timeout_seconds: Option<Spanned<f64>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileAdmin {
    token: Option<Spanned<String>>,
    metrics_max_hosts: Option<Spanned<i64>>,
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
    upstream_ca: Option<Spanned<String>>,
    cache_max_mb: Option<Spanned<i64>>,
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

    fn alerts(&mut self, file: &FileAlerts) -> AlertSettings {
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
                        w.get_ref()
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

    fn admin(&mut self, file: &FileAdmin, proxy: &ProxySettings) -> AdminSettings {
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
        if let Some(v) = &file.adaptive {
            p.adaptive = *v.get_ref();
        }
        let rates = [
            (&file.min_rate, "min_rate", &mut p.min_rate, 1e-6, 1e6),
            (&file.max_rate, "max_rate", &mut p.max_rate, 1e-6, 1e6),
            (
                &file.decrease_factor,
                "decrease_factor",
                &mut p.decrease_factor,
                0.01,
                1.0,
            ),
            (
                &file.slow_factor,
                "slow_factor",
                &mut p.slow_factor,
                0.01,
                1.0,
            ),
            (
                &file.resume_factor,
                "resume_factor",
                &mut p.resume_factor,
                0.01,
                1.0,
            ),
            (
                &file.increase_step,
                "increase_step",
                &mut p.increase_step,
                0.0,
                1e6,
            ),
        ];
        for (value, key, slot, min, max) in rates {
            if let Some(x) = self.number(value, label, key, min, max) {
                *slot = x;
            }
        }
        if let Some(ms) = self.count(
            &file.slow_response_ms,
            label,
            "slow_response_ms",
            1,
            3_600_000,
        ) {
            p.slow_response = Duration::from_millis(ms as u64);
        }
        let r = &file.max_retry_after_seconds;
        if let Some(d) = self.seconds(r, label, "max_retry_after_seconds", 0.0, 7.0 * 86400.0) {
            p.max_retry_after = d;
        }
        let b = &file.backoff_initial_seconds;
        if let Some(d) = self.seconds(b, label, "backoff_initial_seconds", 0.001, 86400.0) {
            p.backoff_initial = d;
        }
        let b = &file.backoff_max_seconds;
        if let Some(d) = self.seconds(b, label, "backoff_max_seconds", 0.001, 7.0 * 86400.0) {
            p.backoff_max = d;
        }
        if let Some(list) = &file.backoff_statuses {
            let mut statuses = Vec::new();
            for s in list.get_ref() {
                match u16::try_from(*s) {
                    Ok(code) if (100..=599).contains(&code) && code != 429 => statuses.push(code),
                    _ => self.error(
                        list.span().start,
                        &format!("{label}: backoff_statuses must hold HTTP statuses from 100 to 599 other than 429 (always a throttle), got {s}"),
                    ),
                }
            }
            p.backoff_statuses = statuses;
        }
        if let Some(x) = self.choice(
            &file.on_cooldown,
            label,
            "on_cooldown",
            &[("reject", OnCooldown::Reject), ("hold", OnCooldown::Hold)],
        ) {
            p.on_cooldown = x;
        }
        if let Some(n) = self.count(&file.retry_idempotent, label, "retry_idempotent", 0, 10) {
            p.retry_idempotent = n as u32;
        }
        if let Some(x) = self.choice(
            &file.https,
            label,
            "https",
            &[
                ("intercept", HttpsMode::Intercept),
                ("tunnel", HttpsMode::Tunnel),
            ],
        ) {
            p.https = x;
        }
        if let Some(v) = &file.obey_robots {
            p.obey_robots = *v.get_ref();
        }
        if let Some(v) = &file.robots_user_agent {
            let agent = v.get_ref().trim();
            p.robots_user_agent = (!agent.is_empty()).then(|| agent.to_string());
        }
        let c = &file.max_crawl_delay_seconds;
        if let Some(d) = self.seconds(c, label, "max_crawl_delay_seconds", 0.001, 86400.0) {
            p.max_crawl_delay = d;
        }
        let b = &file.block_scan_bytes;
        if let Some(n) = self.count(b, label, "block_scan_bytes", 0, 16 * 1024 * 1024) {
            p.block_scan_bytes = n as usize;
        }
        if let Some(list) = &file.block_markers {
            let markers: Vec<String> = list.get_ref().iter().map(|m| m.to_lowercase()).collect();
            if markers.iter().any(|m| m.trim().len() < 3) {
                self.error(
                    list.span().start,
                    &format!(
                        "{label}: block_markers must each have at least 3 characters, got {:?}",
                        list.get_ref()
                    ),
                );
            } else {
                p.block_markers = Arc::new(BlockMarkers::new(markers));
            }
        }
        let b = &file.block_pause_seconds;
        if let Some(d) = self.seconds(b, label, "block_pause_seconds", 1.0, 30.0 * 86400.0) {
            p.block_pause = d;
        }
        if let Some(x) = self.number(
            &file.block_resume_factor,
            label,
            "block_resume_factor",
            0.01,
            1.0,
        ) {
            p.block_resume_factor = x;
        }
        if let Some(n) = self.count(&file.hard_block_after, label, "hard_block_after", 0, 1000) {
            p.hard_block_after = n as u32;
        }
        if let Some(list) = &file.skip_resources {
            let mut kinds = Vec::new();
            for word in list.get_ref() {
                match ResourceKind::parse(word) {
                    Some(kind) => kinds.push(kind),
                    None => self.error(
                        list.span().start,
                        &format!("{label}: skip_resources takes \"image\", \"font\", \"script\", \"stylesheet\", \"media\", got {word:?}"),
                    ),
                }
            }
            p.skip_resources = kinds;
        }
        if let Some(x) = self.choice(
            &file.cache,
            label,
            "cache",
            &[
                ("off", CacheMode::Off),
                ("revalidate", CacheMode::Revalidate),
                ("dev", CacheMode::Dev),
            ],
        ) {
            p.cache = x;
        }
        if let Some(v) = &file.off_peak {
            match parse_off_peak(v.get_ref()) {
                Ok(o) => p.off_peak = Some(o),
                Err(why) => self.error(v.span().start, &format!("{label}: off_peak {why}")),
            }
        }
        let span = [&file.rate, &file.min_rate, &file.max_rate]
            .into_iter()
            .flatten()
            .map(|s| s.span().start)
            .next();
        if p.min_rate > p.max_rate {
            self.error(
                span.unwrap_or(0),
                &format!(
                    "{label}: min_rate ({}) must not be above max_rate ({})",
                    p.min_rate, p.max_rate
                ),
            );
        } else if p.adaptive && (p.rate < p.min_rate || p.rate > p.max_rate) && span.is_some() {
            self.error(
                span.unwrap_or(0),
                &format!(
                    "{label}: with adaptive = true, rate ({}) must be between min_rate ({}) and max_rate ({})",
                    p.rate, p.min_rate, p.max_rate
                ),
            );
        }
        if p.backoff_initial > p.backoff_max {
            let span = file
                .backoff_initial_seconds
                .as_ref()
                .or(file.backoff_max_seconds.as_ref());
            self.error(
                span.map_or(0, |s| s.span().start),
                &format!(
                    "{label}: backoff_initial_seconds ({}) must not be above backoff_max_seconds ({})",
                    p.backoff_initial.as_secs_f64(),
                    p.backoff_max.as_secs_f64()
                ),
            );
        }
        p
    }

    /// One of a closed set of words, as its enum value.
    fn choice<T: Copy>(
        &mut self,
        value: &Option<Spanned<String>>,
        label: &str,
        key: &str,
        choices: &[(&str, T)],
    ) -> Option<T> {
        let v = value.as_ref()?;
        let found = choices
            .iter()
            .find(|(word, _)| *word == v.get_ref().as_str());
        if found.is_none() {
            let words: Vec<String> = choices.iter().map(|(w, _)| format!("{w:?}")).collect();
            self.error(
                v.span().start,
                &format!(
                    "{label}: {key} must be one of {}, got {:?}",
                    words.join(", "),
                    v.get_ref()
                ),
            );
        }
        found.map(|(_, x)| *x)
    }

    /// A number in `min..=max`.
    fn number(
        &mut self,
        value: &Option<Spanned<f64>>,
        label: &str,
        key: &str,
        min: f64,
        max: f64,
    ) -> Option<f64> {
        let v = value.as_ref()?;
        let x = *v.get_ref();
        if x.is_finite() && x >= min && x <= max {
            Some(x)
        } else {
            self.error(
                v.span().start,
                &format!("{label}: {key} must be between {min} and {max}, got {x}"),
            );
            None
        }
    }
}

fn parse_off_peak(file: &FileOffPeak) -> Result<OffPeak, String> {
    let minute = |t: &str| -> Option<u16> {
        let (h, m) = t.trim().split_once(':')?;
        let (h, m): (u16, u16) = (h.parse().ok()?, m.parse().ok()?);
        (h <= 24 && m < 60 && h * 60 + m <= 24 * 60).then_some(h * 60 + m)
    };
    let (start, end) = file
        .hours
        .split_once('-')
        .and_then(|(a, b)| Some((minute(a)?, minute(b)?)))
        .ok_or_else(|| format!("hours must look like \"01:00-06:00\", got {:?}", file.hours))?;
    if start == end {
        return Err(format!("hours {:?} is an empty window", file.hours));
    }
    let timezone = jiff::tz::TimeZone::get(&file.timezone).map_err(|_| {
        format!(
            "timezone must be an IANA name such as \"Europe/Berlin\" or \"UTC\", got {:?}",
            file.timezone
        )
    })?;
    if !(file.rate.is_finite() && file.rate > 0.0) {
        return Err(format!("rate must be > 0, got {}", file.rate));
    }
    Ok(OffPeak {
        start_minute: start,
        end_minute: end % (24 * 60),
        timezone_name: file.timezone.clone(),
        timezone,
        rate: file.rate,
    })
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
