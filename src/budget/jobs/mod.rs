//! Who is asking: the job each request belongs to, named by the username of the client's proxy
//! URL (`Proxy-Authorization: Basic`), its token checked, and what courtesy keeps per job (its
//! quota window and its counts). The job decides a request's share of a host's turns
//! (`limiter::lanes`), its quota, and what is stamped on it; it never changes a host's budget.
//!
//! | file | owns |
//! |---|---|
//! | `mod.rs` | [`Jobs`]: identifying a request's job, the table of job states; [`Caller`] |
//! | `guard.rs` | wrong credentials: counted, logged at a bounded rate, slowed per address |
//! | `credentials.rs` | reading `Proxy-Authorization: Basic`, checking a token in constant time |
//! | `quota.rs` | a job's quota window: reserve, spend, give back, what is left |

mod credentials;
mod guard;
mod quota;

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use dashmap::DashMap;
use http::HeaderMap;

use crate::budget::limiter::lanes::JobTag;
use crate::config::{ClientAuth, Config, JobSettings, Priority};
use crate::util::locks::lock;
pub(crate) use guard::AuthGuard;
pub(crate) use quota::{QuotaLeft, QuotaTicket};

pub(crate) use crate::budget::limiter::lanes::ANONYMOUS;

/// Where the names of jobs no `[[job]]` names go past [`MAX_UNNAMED_JOBS`] (and the label
/// metrics give every job not configured).
pub(crate) const OTHER: &str = "other";

/// Jobs no `[[job]]` names that are kept apart (for fairness and the log); more share "other",
/// so that clients inventing usernames cannot grow the table.
pub(crate) const MAX_UNNAMED_JOBS: usize = 1000;

/// What a 407 says to wrong credentials, the same for a name no `[[job]]` gives (where one is
/// required) and a wrong or missing token, so that the answer does not tell which names exist.
pub(crate) const NOT_ACCEPTED: &str =
    "the proxy credentials are not accepted: check the job's name and token in the proxy URL";

/// The request header that says a request's class within its job (`high`, `normal`, `low`).
pub(crate) const PRIORITY_HEADER: &str = "courtesy-priority";

/// What courtesy keeps per job, across requests and config reloads.
#[derive(Debug)]
pub struct JobState {
    /// The job's name (`anonymous`, `other`, or the username).
    pub name: Arc<str>,
    /// Whether a `[[job]]` names it (else metrics count it as `other`).
    pub configured: bool,
    quota: Mutex<quota::Window>,
    /// Requests of the job that got a turn (went upstream).
    pub served: AtomicU64,
    /// Requests refused for its quota.
    pub refused_quota: AtomicU64,
    /// Requests to report-only hosts that its fair share of the host would have held.
    pub shadow_would_wait: AtomicU64,
    /// How long they would have waited, in all, in milliseconds.
    pub shadow_would_wait_ms: AtomicU64,
    /// Requests answered with a local 403 because the site's stated preferences refused the
    /// job's purpose (`content_preferences = "enforce"`).
    pub preferences_enforced: AtomicU64,
    /// Requests forwarded with the refusing signal reported (`content_preferences = "report"`,
    /// or a `Content-Usage` response header that arrived after the request left).
    pub preferences_reported: AtomicU64,
    /// Priced answers (HTTP 402 with `crawler-price`) per host: how many, and the last price.
    priced: Mutex<HashMap<String, Priced>>,
    /// Requests answered without asking the host: `[stored, coalesced]` (see
    /// `crate::observe::metrics::NotSent`).
    pub not_sent: [AtomicU64; 2],
    /// When a request last named it, in seconds of [`JobState::now_secs`]: a name no `[[job]]`
    /// gives is forgotten when idle.
    last_used: AtomicU64,
}

impl JobState {
    fn new(name: &str, configured: bool) -> Self {
        JobState {
            name: Arc::from(name),
            configured,
            quota: Mutex::new(quota::Window::default()),
            served: AtomicU64::new(0),
            refused_quota: AtomicU64::new(0),
            shadow_would_wait: AtomicU64::new(0),
            shadow_would_wait_ms: AtomicU64::new(0),
            preferences_enforced: AtomicU64::new(0),
            preferences_reported: AtomicU64::new(0),
            priced: Mutex::new(HashMap::new()),
            not_sent: [AtomicU64::new(0), AtomicU64::new(0)],
            last_used: AtomicU64::new(Self::now_secs()),
        }
    }

    /// Seconds since the first call (a clock for idleness that needs no lock).
    fn now_secs() -> u64 {
        static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        START
            .get_or_init(std::time::Instant::now)
            .elapsed()
            .as_secs()
    }

    /// Notes a request of the job now.
    fn touch(&self) {
        self.last_used.store(Self::now_secs(), Ordering::Relaxed);
    }

    /// Counts a priced answer (HTTP 402 with `crawler-price`) from `host` asking `price`. At most
    /// [`MAX_PRICED_HOSTS`] hosts are kept per job; the rest are counted as `other`.
    pub fn count_priced(&self, host: &str, price: &str) {
        let mut priced = lock(&self.priced);
        let host = if priced.len() < MAX_PRICED_HOSTS || priced.contains_key(host) {
            host
        } else {
            OTHER
        };
        let entry = priced.entry(host.to_string()).or_default();
        entry.count += 1;
        entry.last_price = price.to_string();
    }

    /// The priced answers it got, per host, by host name.
    pub fn priced(&self) -> Vec<(String, Priced)> {
        let mut all: Vec<(String, Priced)> = lock(&self.priced)
            .iter()
            .map(|(host, p)| (host.clone(), p.clone()))
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    /// Counts what its fair share would have made a request to a report-only host wait.
    pub fn count_shadow(&self, would_wait: std::time::Duration) {
        if !would_wait.is_zero() {
            self.shadow_would_wait.fetch_add(1, Ordering::Relaxed);
            let ms = u64::try_from(would_wait.as_millis()).unwrap_or(u64::MAX);
            self.shadow_would_wait_ms.fetch_add(ms, Ordering::Relaxed);
        }
    }
}

/// The most hosts whose priced answers are kept apart per job (the rest count as `other`).
pub(crate) const MAX_PRICED_HOSTS: usize = 256;

/// Priced answers (HTTP 402 with `crawler-price`) of one job from one host.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Priced {
    /// How many.
    pub count: u64,
    /// The last `crawler-price` asked, as the site wrote it (`USD 0.01`).
    pub last_price: String,
}

/// The job of one request, as its credentials named it: its state and its settings (`None`
/// for a job no `[[job]]` names).
#[derive(Debug, Clone)]
pub struct Caller {
    /// What courtesy keeps for the job.
    pub state: Arc<JobState>,
    /// Its `[[job]]`, if it has one.
    pub settings: Option<Arc<JobSettings>>,
    /// Whose share of a host's turns and queue room it takes: the job's name for a configured
    /// job, else the client's ([`client_lane`]), so that a name a client invents buys nothing.
    pub lane: Arc<str>,
}

impl Caller {
    /// The job's name.
    pub fn name(&self) -> &str {
        &self.state.name
    }

    /// The job as a host's queue sees it: its name and weight.
    pub fn tag(&self) -> JobTag {
        let weight = self.settings.as_ref().map_or(1.0, |s| s.weight);
        JobTag {
            name: self.lane.clone(),
            weight,
        }
    }

    /// The job's own priority, for requests that do not say theirs.
    pub fn priority(&self) -> Priority {
        self.settings
            .as_ref()
            .map_or(Priority::Normal, |s| s.priority)
    }

    /// The job's own answer to a cooldown (`None`: the host's), for requests that do not say
    /// theirs.
    pub fn on_cooldown(&self) -> Option<crate::config::OnCooldown> {
        self.settings.as_ref().and_then(|s| s.on_cooldown)
    }

    /// Reserves one request of the job's quota now, or says how long until the window frees. A
    /// job without a quota always gets a ticket (that reserves nothing and counts the request
    /// served), without reading the clock: most jobs have none, and this is on every request's
    /// path.
    pub fn reserve_now(&self) -> Result<QuotaTicket, std::time::Duration> {
        let Some((max, per)) = self.quota_limits() else {
            return Ok(QuotaTicket::unlimited(&self.state));
        };
        let reserved = quota::reserve(&self.state, max, per, std::time::Instant::now());
        if reserved.is_err() {
            self.state.refused_quota.fetch_add(1, Ordering::Relaxed);
        }
        reserved
    }

    /// What is left of the job's quota at `now`, for its `RateLimit` headers; `None` without one.
    pub fn quota_left(&self, now: std::time::Instant) -> Option<QuotaLeft> {
        let (max, per) = self.quota_limits()?;
        Some(quota::left(&self.state, max, per, now))
    }

    /// [`Caller::quota_left`] now; the clock is read only for a job with a quota.
    pub fn quota_left_now(&self) -> Option<QuotaLeft> {
        let (max, per) = self.quota_limits()?;
        Some(quota::left(
            &self.state,
            max,
            per,
            std::time::Instant::now(),
        ))
    }

    fn quota_limits(&self) -> Option<(u64, std::time::Duration)> {
        let s = self.settings.as_ref()?;
        Some((s.max_requests?, s.per_seconds))
    }

    /// The User-Agent and From courtesy stamps on the job's requests, if its `[[job]]` says.
    pub fn stamps(&self) -> (Option<&str>, Option<&str>) {
        match &self.settings {
            Some(s) => (s.user_agent.as_deref(), s.from.as_deref()),
            None => (None, None),
        }
    }
}

/// Why a request's credentials were not accepted (a 407); never holds the token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotAccepted {
    /// What the 407 says.
    pub why: String,
    /// How long to hold the answer: the client's address failed repeatedly ([`AuthGuard`]).
    pub hold: std::time::Duration,
}

impl NotAccepted {
    fn said(why: impl Into<String>) -> Self {
        NotAccepted {
            why: why.into(),
            hold: std::time::Duration::ZERO,
        }
    }
}

/// The share key of requests no configured job claims from `client`: its address, an IPv6
/// address by its /64 (one host or household gets a whole /64 and may pick any address in it,
/// so a share per address would be a share per pick), an IPv4-mapped one as IPv4. It begins with
/// `@`, which no job name may contain.
pub(crate) fn client_lane(client: IpAddr) -> Arc<str> {
    match crate::wire::client_group::client_group(client) {
        IpAddr::V4(v4) => {
            // Asked on every request: written into the stack, without `fmt` (at most 16 bytes).
            let mut text = [0u8; 16];
            text[0] = b'@';
            let mut len = 1;
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    text[len] = b'.';
                    len += 1;
                }
                let mut digits = itoa::Buffer::new();
                let digits = digits.format(octet).as_bytes();
                text[len..len + digits.len()].copy_from_slice(digits);
                len += digits.len();
            }
            Arc::from(std::str::from_utf8(&text[..len]).unwrap_or("@"))
        }
        IpAddr::V6(net) => Arc::from(format!("@{net}/64")),
    }
}

/// How long a name no `[[job]]` gives stays in the table after its last request.
pub(crate) const UNNAMED_IDLE: std::time::Duration = std::time::Duration::from_secs(3600);

/// The table of job states, shared by every request.
#[derive(Debug, Default)]
pub struct Jobs {
    states: DashMap<Arc<str>, Arc<JobState>>,
    /// Wrong credentials, counted and slowed.
    pub guard: AuthGuard,
}

impl Jobs {
    /// An empty table.
    pub fn new() -> Self {
        Jobs::default()
    }

    /// The job of a request from `client` with `headers` under `config`, or why its
    /// credentials are refused. The token is compared in constant time and never kept. A name no
    /// `[[job]]` gives shares the client's one share ([`client_lane`]) and is not put in the
    /// table until [`Jobs::keep`] (a refused request leaves no trace). A `[[job]]` without a token
    /// is claimed only from a loopback address (the sidecar's crawler on the same machine):
    /// anyone who can reach the proxy could name it otherwise.
    pub fn identify(
        &self,
        config: &Config,
        headers: &HeaderMap,
        client: IpAddr,
    ) -> Result<Caller, NotAccepted> {
        let mode = config.proxy.client_auth;
        if mode == ClientAuth::None {
            return Ok(self.anonymous(client));
        }
        // Credentials courtesy cannot read are no job's: refused where a job is required,
        // anonymous where it is not (they may be meant for another proxy's scheme).
        let given = match credentials::basic(headers) {
            Ok(given) => given,
            Err(why) if mode == ClientAuth::Required => {
                return Err(NotAccepted::said(format!("Proxy-Authorization: {why}")))
            }
            Err(_) => None,
        };
        let Some((user, password)) = given else {
            return match mode {
                ClientAuth::Required => Err(NotAccepted::said(
                    "proxy credentials are required ([proxy] client_auth = \"required\"): put the job's name and token in the proxy URL",
                )),
                _ => Ok(self.anonymous(client)),
            };
        };
        let settings = config.jobs.iter().find(|j| j.name == user).cloned();
        let accepted = match &settings {
            Some(job) if job.has_token() => credentials::token_matches(job, &password),
            Some(_) => mode != ClientAuth::Required && client.is_loopback(),
            None => mode != ClientAuth::Required,
        };
        if !accepted {
            return Err(self.refuse(&user, client));
        }
        let Some(settings) = settings else {
            if user.is_empty() || user == ANONYMOUS {
                return Ok(self.anonymous(client));
            }
            return Ok(self.unnamed(&user, client));
        };
        Ok(Caller {
            state: self.state_of(&user, true),
            lane: settings.name.as_str().into(),
            settings: Some(settings),
        })
    }

    /// The job `name` as the proxy would know a request of it (its `[[job]]`: User-Agent,
    /// purpose, quota, answer to a cooldown), for a check asked on the admin API, which the
    /// admin token already guards (no job token is asked). No name is job "anonymous"; a name
    /// no `[[job]]` gives is one with no settings, put in no table. Nothing is counted.
    pub fn for_check(&self, config: &Config, name: Option<&str>) -> Caller {
        let lane: Arc<str> = Arc::from("@check");
        let name = name.filter(|n| !n.is_empty()).unwrap_or(ANONYMOUS);
        if let Some(settings) = config.jobs.iter().find(|j| j.name == name).cloned() {
            return Caller {
                state: self.state_of(name, true),
                lane: settings.name.as_str().into(),
                settings: Some(settings),
            };
        }
        let state = match self.states.get(name) {
            Some(state) => state.clone(),
            None => Arc::new(JobState::new(name, false)),
        };
        Caller {
            state,
            settings: None,
            lane,
        }
    }

    /// Counts a refused credential of `client`'s and says how long to hold its 407.
    fn refuse(&self, user: &str, client: IpAddr) -> NotAccepted {
        let group = crate::wire::client_group::client_group(client);
        let (hold, log) = self.guard.failed(group, std::time::Instant::now());
        if let Some(skipped) = log {
            let user: String = user.chars().take(64).collect();
            tracing::warn!(
                client = %client,
                job = %user.escape_debug(),
                not_logged_since = skipped,
                "proxy credentials refused (a wrong token, or a job that cannot be claimed from this address)"
            );
        }
        NotAccepted {
            why: NOT_ACCEPTED.to_string(),
            hold,
        }
    }

    /// Job "anonymous", in `client`'s share.
    fn anonymous(&self, client: IpAddr) -> Caller {
        Caller {
            state: self.state_of(ANONYMOUS, false),
            settings: None,
            lane: client_lane(client),
        }
    }

    /// A name no `[[job]]` gives, in `client`'s share: its state if the table has it, else one
    /// of its own that [`Jobs::keep`] puts in the table once the request is taken.
    fn unnamed(&self, user: &str, client: IpAddr) -> Caller {
        let name = if fits_a_name(user) { user } else { OTHER };
        let state = match self.states.get(name) {
            Some(state) => state.clone(),
            None => Arc::new(JobState::new(name, false)),
        };
        state.touch();
        Caller {
            state,
            settings: None,
            lane: client_lane(client),
        }
    }

    /// Puts `caller`'s state in the table (a name no `[[job]]` gives enters it only with a
    /// request that was taken); past [`MAX_UNNAMED_JOBS`] its counts go to "other".
    pub fn keep(&self, caller: &Caller) {
        if caller.settings.is_some() || self.states.contains_key(caller.name()) {
            return;
        }
        if self.states.len() < MAX_UNNAMED_JOBS {
            self.states
                .entry(caller.state.name.clone())
                .or_insert_with(|| caller.state.clone());
        }
    }

    /// Forgets the names no `[[job]]` gives that no request used for `idle` (their counts go to
    /// "other", so the job metrics never go back); returns how many.
    pub fn sweep(&self, idle: std::time::Duration) -> usize {
        let now = JobState::now_secs();
        let idle = idle.as_secs();
        let mut gone = Vec::new();
        self.states.retain(|name, state| {
            let stale = !state.configured
                && **name != *ANONYMOUS
                && **name != *OTHER
                && now.saturating_sub(state.last_used.load(Ordering::Relaxed)) >= idle;
            if stale {
                gone.push(state.clone());
            }
            !stale
        });
        if !gone.is_empty() {
            let other = self.state_of(OTHER, false);
            for state in &gone {
                for (into, from) in [
                    (&other.served, &state.served),
                    (&other.refused_quota, &state.refused_quota),
                    (&other.shadow_would_wait, &state.shadow_would_wait),
                    (&other.shadow_would_wait_ms, &state.shadow_would_wait_ms),
                ] {
                    into.fetch_add(from.load(Ordering::Relaxed), Ordering::Relaxed);
                }
            }
        }
        gone.len()
    }

    /// Names in the table (configured, seen and kept).
    pub fn len(&self) -> usize {
        self.states.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.states.is_empty()
    }

    /// The state of job `name`, made on first use; a name no `[[job]]` gives, past the bound,
    /// is "other"'s.
    fn state_of(&self, name: &str, configured: bool) -> Arc<JobState> {
        if let Some(state) = self.states.get(name) {
            return state.clone();
        }
        let kept_apart = configured || self.states.len() < MAX_UNNAMED_JOBS;
        let name = if kept_apart && fits_a_name(name) {
            name
        } else {
            OTHER
        };
        self.states
            .entry(Arc::from(name))
            .or_insert_with(|| Arc::new(JobState::new(name, configured)))
            .clone()
    }

    /// Every configured job (seen or not) and every other job seen, with its settings under
    /// `config`, by name: what the admin page and the job metrics list.
    pub fn callers(&self, config: &Config) -> Vec<Caller> {
        let mut all: Vec<Caller> = config
            .jobs
            .iter()
            .map(|settings| Caller {
                state: self.state_of(&settings.name, true),
                lane: settings.name.as_str().into(),
                settings: Some(settings.clone()),
            })
            .collect();
        for entry in self.states.iter() {
            if !config.jobs.iter().any(|j| *j.name == **entry.key()) {
                all.push(Caller {
                    lane: entry.key().clone(),
                    state: entry.value().clone(),
                    settings: None,
                });
            }
        }
        all.sort_by(|a, b| a.name().cmp(b.name()));
        all
    }
}

/// Whether `name` may name a job of its own (the config's rule for `[[job]] name`).
fn fits_a_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

/// A request's class: its `Courtesy-Priority` (taken out of the headers: it is courtesy's), else
/// `default`; a value that is none of the words is an error to answer with 400. Only a configured
/// job's requests are `honoured`: the others keep `default` (arrival order within the client's
/// share), whatever they say, so that no anonymous client goes ahead of another.
pub(crate) fn priority_of(
    headers: &mut HeaderMap,
    default: Priority,
    honoured: bool,
) -> Result<Priority, String> {
    let Some(value) = headers.remove(PRIORITY_HEADER) else {
        return Ok(default);
    };
    if !honoured {
        return Ok(default);
    }
    let text = value.to_str().unwrap_or("");
    Priority::from_header(text)
        .ok_or_else(|| format!("Courtesy-Priority must be high, normal or low, got {text:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;

    fn with_user(user: &str, token: &str) -> HeaderMap {
        let pair = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{token}"));
        let mut h = HeaderMap::new();
        h.insert(
            http::header::PROXY_AUTHORIZATION,
            format!("Basic {pair}").parse().unwrap(),
        );
        h
    }

    fn config(mode: ClientAuth) -> Config {
        let mut config = Config::default();
        config.proxy.client_auth = mode;
        config.jobs = vec![
            Arc::new(JobSettings {
                name: "crawl-a".into(),
                token: Some("token-of-crawl-a-0123456789".into()),
                ..JobSettings::default()
            }),
            Arc::new(JobSettings {
                name: "tokenless".into(),
                priority: Priority::High,
                ..JobSettings::default()
            }),
        ];
        config
    }

    const HERE: &str = "127.0.0.1";
    const AFAR: &str = "192.0.2.7";

    #[test]
    fn invented_names_share_their_clients_one_lane_and_enter_the_table_only_when_kept() {
        let jobs = Jobs::new();
        let config = config(ClientAuth::Optional);
        let client: IpAddr = AFAR.parse().unwrap();
        let before = jobs.len();
        let callers: Vec<_> = (0..1000)
            .map(|i| {
                jobs.identify(&config, &with_user(&format!("made-up-{i}"), "x"), client)
                    .unwrap()
            })
            .collect();
        assert!(callers.iter().all(|c| *c.tag().name == *"@192.0.2.7"));
        assert_eq!(
            jobs.len(),
            before,
            "names not taken leave the table unchanged"
        );
        let anonymous = jobs.identify(&config, &HeaderMap::new(), client).unwrap();
        assert_eq!(
            anonymous.tag().name,
            callers[0].tag().name,
            "one share per client"
        );
        let other: IpAddr = "192.0.2.8".parse().unwrap();
        let elsewhere = jobs
            .identify(&config, &with_user("made-up-0", "x"), other)
            .unwrap();
        assert_ne!(elsewhere.tag().name, callers[0].tag().name);
        // A configured job keeps its own share, wherever it asks from.
        let a = jobs
            .identify(
                &config,
                &with_user("crawl-a", "token-of-crawl-a-0123456789"),
                client,
            )
            .unwrap();
        assert_eq!(&*a.tag().name, "crawl-a");
        // A taken request puts its name in the table; idle, it leaves, its counts kept by "other".
        let len = jobs.len();
        callers[0].state.served.fetch_add(2, Ordering::Relaxed);
        jobs.keep(&callers[0]);
        assert_eq!(jobs.len(), len + 1);
        assert_eq!(jobs.sweep(std::time::Duration::ZERO), 1);
        assert!(!jobs.states.contains_key("made-up-0"));
        assert_eq!(
            jobs.states
                .get(OTHER)
                .unwrap()
                .served
                .load(Ordering::Relaxed),
            2
        );
    }

    #[test]
    fn ipv6_clients_share_by_64_and_mapped_ipv4_is_ipv4() {
        let a = client_lane("2001:db8:1:2::1".parse().unwrap());
        let b = client_lane("2001:db8:1:2:ffff::9".parse().unwrap());
        let c = client_lane("2001:db8:1:3::1".parse().unwrap());
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(&*a, "@2001:db8:1:2::/64");
        assert_eq!(
            &*client_lane("::ffff:10.1.2.3".parse().unwrap()),
            "@10.1.2.3"
        );
    }

    #[test]
    fn an_ipv4_clients_share_is_its_dotted_quad() {
        for text in [
            "0.0.0.0",
            "127.0.0.1",
            "10.1.20.255",
            "255.255.255.255",
            "1.22.3.44",
        ] {
            let ip: std::net::Ipv4Addr = text.parse().unwrap();
            assert_eq!(&*client_lane(IpAddr::V4(ip)), format!("@{ip}"));
        }
    }

    #[test]
    fn a_tokenless_job_is_claimed_only_from_loopback_and_refusals_say_the_same() {
        let jobs = Jobs::new();
        let optional = config(ClientAuth::Optional);
        let here: IpAddr = HERE.parse().unwrap();
        let afar: IpAddr = AFAR.parse().unwrap();
        let local = jobs
            .identify(&optional, &with_user("tokenless", ""), here)
            .unwrap();
        assert_eq!(local.priority(), Priority::High);
        let from_afar = jobs.identify(&optional, &with_user("tokenless", ""), afar);
        let wrong = jobs.identify(&optional, &with_user("crawl-a", "wrong"), afar);
        let required = config(ClientAuth::Required);
        let unknown = jobs.identify(&required, &with_user("nobody", "whatever"), afar);
        for refused in [&from_afar, &wrong, &unknown] {
            assert_eq!(refused.as_ref().unwrap_err().why, NOT_ACCEPTED);
        }
        assert_eq!(jobs.guard.failures(), 3);
        // The fourth failure of one address is held; the first three are not.
        let fourth = jobs.identify(&optional, &with_user("crawl-a", "wrong"), afar);
        assert!(!fourth.unwrap_err().hold.is_zero());
        assert!(wrong.unwrap_err().hold.is_zero());
    }

    #[test]
    fn only_a_configured_jobs_priority_is_honoured() {
        let mut h = HeaderMap::new();
        h.insert(PRIORITY_HEADER, "high".parse().unwrap());
        assert_eq!(
            priority_of(&mut h.clone(), Priority::Normal, true),
            Ok(Priority::High)
        );
        assert_eq!(
            priority_of(&mut h, Priority::Normal, false),
            Ok(Priority::Normal)
        );
        assert!(h.is_empty(), "taken out either way");
    }
}
