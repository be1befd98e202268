//! The operator's view of the host table, as typed JSON: what `GET /hosts` and `GET /hosts/{key}`
//! answer, what the dashboard draws and what `courtesy status` prints. One set of serde types
//! serves all three, so a field is named once and the reader cannot drift from the writer.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::budget::limiter::{HostSnapshot, Limiter, ShadowCounts, ShadowReason};
use crate::config::{Controller, HttpsMode, KeyMode, OnCooldown};
use crate::pacing::ratelimit::NamedPolicy;

/// `GET /hosts`: the hosts shown (a page in key order, or the `limit` most in need of attention) and the totals
/// over every known host. `H` is a list of [`HostView`]s, or a type that writes them one by one.
#[derive(Debug, Serialize, Deserialize)]
pub struct HostsPage<H> {
    /// When the page was made.
    #[serde(default)]
    pub now_unix_ms: u64,
    /// Counts over every known host, whatever the limit left out.
    #[serde(default)]
    pub total: Totals,
    /// Where the budgets are kept.
    #[serde(default)]
    pub budget: BudgetView,
    /// The cursor of the next page (`GET /hosts?after=<next>`), while more hosts remain after
    /// this one; only for pages asked for with `after`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
    /// The hosts shown.
    pub hosts: H,
}

/// Where the budgets are kept: `/hosts`, `courtesy status` and the dashboard show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct BudgetView {
    /// `local` (this instance's own), `shared` (on the store, with the other instances) or
    /// `fallback` (this instance's share, while the store cannot be reached).
    pub mode: String,
    /// The store's URL (without its password), with a shared budget.
    pub store: Option<String>,
    /// The key prefix the instances share, with a shared budget.
    pub key_prefix: Option<String>,
    /// Live instances the store counted recently, with a shared budget.
    pub instances_seen: Option<u32>,
    /// The share of each budget this instance keeps in fallback.
    pub fallback_share: Option<f64>,
    /// With `[proxy] global_bytes_per_second`: the ceiling and the debt of all hosts together.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub global_bytes: Option<GlobalBytesView>,
}

/// The ceiling on response bytes from all hosts together, as it stands.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GlobalBytesView {
    /// `global_bytes_per_second`.
    pub bytes_per_second: u64,
    /// Bytes charged beyond it and not yet paid back: every host's next turn waits meanwhile.
    pub debt_bytes: u64,
}

impl BudgetView {
    /// Where `limiter` keeps its budgets.
    pub(crate) fn of(limiter: &Limiter) -> Self {
        let mut view = BudgetView {
            mode: limiter.budget_mode().to_string(),
            ..Default::default()
        };
        if let Some(store) = limiter.store() {
            view.store = Some(store.settings().redacted_url());
            view.key_prefix = Some(store.settings().key_prefix.clone());
            view.instances_seen = Some(store.instances_seen());
            view.fallback_share = Some(store.share());
        }
        view.global_bytes = limiter
            .downlink_debt()
            .map(|(debt_bytes, bytes_per_second)| GlobalBytesView {
                bytes_per_second,
                debt_bytes,
            });
        view
    }
}

impl Default for BudgetView {
    fn default() -> Self {
        BudgetView {
            mode: "local".into(),
            store: None,
            key_prefix: None,
            instances_seen: None,
            fallback_share: None,
            global_bytes: None,
        }
    }
}

/// Counts over every known host: what the dashboard's header shows.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Totals {
    /// Known hosts.
    pub hosts: usize,
    /// Requests in flight.
    pub in_flight: u64,
    /// Requests waiting.
    pub queued: usize,
    /// Hosts cooling down.
    pub cooling_down: usize,
    /// Hosts an operator paused.
    pub paused: usize,
    /// Response body bytes received from the known hosts, in all.
    pub response_bytes: u64,
}

impl Totals {
    /// The totals of `snapshots`.
    pub fn of(snapshots: &[HostSnapshot]) -> Self {
        let count = |state: &str| snapshots.iter().filter(|s| s.state() == state).count();
        Totals {
            hosts: snapshots.len(),
            in_flight: snapshots.iter().map(|s| u64::from(s.in_flight)).sum(),
            queued: snapshots.iter().map(|s| s.queued).sum(),
            cooling_down: count("cooling_down"),
            paused: count("paused"),
            response_bytes: snapshots.iter().map(|s| s.stats.response_bytes()).sum(),
        }
    }
}

/// One host.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct HostView {
    /// The budget's key: `host:port`, or the domain or address several names share.
    pub host: String,
    /// What the key was made from (`key`: `host`, `domain` or `ip`).
    pub key_by: KeyMode,
    /// For a domain or address key: the names (`host:port`) seen sharing it, in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
    /// More names shared it than `names` lists (at most 100 are).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub names_truncated: bool,
    /// `paused`, `cooling_down`, `queued`, `active` or `idle`.
    pub state: String,
    /// The host's state in words: what its next request waits for, and until when.
    pub explain: String,
    /// The rate in effect (after the operator's rate and the server's caps), per second.
    pub rate: f64,
    /// courtesy's own (adaptive) rate.
    pub own_rate: f64,
    /// The rate the config gives the host.
    pub configured_rate: f64,
    /// Requests waiting.
    pub queued: usize,
    /// The jobs with requests waiting for this host, and how many each.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub waiting_by_job: Vec<JobWaiting>,
    /// Requests in flight.
    pub in_flight: u32,
    /// The cooldown or pause in force, if any.
    pub cooldown: Option<CooldownView>,
    /// What an operator set.
    pub operator: OperatorView,
    /// The host's resolved policy.
    pub policy: PolicyView,
    /// The last statuses, oldest first (0: no response).
    pub last_statuses: Vec<u16>,
    /// Counters since the host became known.
    pub counters: Counters,
    /// For a report-only host (`enforce = false`): what courtesy would have done so far.
    pub shadow: Option<ShadowView>,
    /// With `max_bytes_per_second`: the byte budget's debt now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub byte_debt: Option<ByteDebtView>,
    /// With a shared budget: the turns this instance holds leased ahead from the store.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ahead: Option<AheadView>,
    /// The HTTP version the host's last answer came over (`upstream_http2`); absent before the
    /// first answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protocol: Option<ProtocolView>,
    /// The RateLimit policies the host announced last (`RateLimit-Policy`, with the counters
    /// of `RateLimit`), each on its own, as the server wrote it (docs/reacting.md).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ratelimit_policies: Vec<RateLimitPolicyView>,
    /// Why requests to the host go unsigned although signing is on (only requests that leave
    /// over TLS are signed); absent when nothing is to be said.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signing: Option<String>,
    /// The licences the host's robots.txt points to (RSL 1.0 `License:` lines): reported, never
    /// enforced.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub licenses: Vec<String>,
    /// The delay between requests robots.txt asks for and courtesy keeps (the longer of
    /// `Crawl-delay` and `Request-rate`'s interval), when it asks for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crawl_delay: Option<CrawlDelayView>,
    /// robots.txt's `Visit-time` window (`0600-0845 UTC`): outside it the host waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub visit_time: Option<String>,
    /// Requests answered without asking the host (docs/robots-blocks-cache.md), when any were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_sent: Option<NotSentView>,
}

/// The delay robots.txt asks for between requests, as courtesy keeps it.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CrawlDelayView {
    /// The seconds between requests courtesy paces the host at.
    pub seconds: f64,
    /// Whether that is `max_crawl_delay_seconds`, an operator's cap below what robots.txt asked.
    pub capped: bool,
}

/// Requests answered without asking the host: from the response store, or with the answer of an
/// identical request in flight. Neither took a turn of the host's budget.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NotSentView {
    /// Answered from the response store.
    pub stored: u64,
    /// Answered with an identical request's answer (`coalesce`).
    pub coalesced: u64,
}

/// The HTTP version courtesy speaks to a host's origin, and why it fell back to HTTP/1.1 if it did.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProtocolView {
    /// `h2` or `http/1.1`.
    pub version: String,
    /// Why the host is kept on HTTP/1.1 (a 421 over h2, an HTTP/2 protocol error); absent when
    /// it was not turned back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fell_back: Option<String>,
}

/// One RateLimit policy a host announced, in the draft's own parameter names.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RateLimitPolicyView {
    /// The policy's name (empty for the older `10;w=1` form).
    pub name: String,
    /// The quota (`q`), in units of `qu` per window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub q: Option<u64>,
    /// The window in seconds (`w`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub w: Option<u64>,
    /// The quota unit (`qu`): `request`, `content-bytes`, `concurrency` (or another word,
    /// shown and not obeyed).
    pub qu: String,
    /// The partition key (`pk`), base64 as the field carries it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pk: Option<String>,
    /// What is left in this window (`r` of `RateLimit`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub r: Option<u64>,
    /// Seconds until the window resets (`t` of `RateLimit`), as of that answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub t: Option<u64>,
}

impl RateLimitPolicyView {
    /// The view of one announced policy.
    pub fn of(p: &NamedPolicy) -> Self {
        RateLimitPolicyView {
            name: p.name.clone(),
            q: p.quota,
            w: p.window.map(|w| w.as_secs()),
            qu: p.unit.as_str().to_string(),
            pk: p.partition.clone(),
            r: p.remaining,
            t: p.reset.map(|t| t.as_secs()),
        }
    }
}

/// An allowance: a shared host's turns leased ahead from the store and spent by this instance
/// without a round trip each (docs/several-instances.md, "Allowances").
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AheadView {
    /// Turns left to spend.
    pub turns: u32,
    /// Concurrency slots the store holds for them.
    pub slots: u32,
    /// Of those, slots carrying a request now.
    pub in_use: u32,
}

/// A host's byte budget (`max_bytes_per_second`) as it stands.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ByteDebtView {
    /// Response bytes charged beyond the budget and not yet paid back (0: none).
    pub bytes: u64,
    /// How long until it is paid back: the host's next turn waits at least this long.
    pub seconds: f64,
}

/// What a report-only host's requests would have met, had courtesy enforced.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ShadowView {
    /// Requests that would have waited for their turn.
    pub would_wait: u64,
    /// How long they would have waited, in all.
    pub would_wait_seconds: f64,
    /// Requests that would have been refused, by reason.
    pub would_refuse: BTreeMap<String, u64>,
    /// Requests sent inside a window the server announced.
    pub inside_window: u64,
}

/// A cooldown or pause in force.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CooldownView {
    /// Time left.
    pub remaining_seconds: f64,
    /// When it ends, on the wall clock.
    pub until_unix_ms: u64,
    /// Why, as a sentence.
    pub cause: String,
}

/// What an operator set through the admin API.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct OperatorView {
    /// The end of an operator's pause.
    pub paused_until_unix_ms: Option<u64>,
    /// The operator's rate.
    pub rate: Option<f64>,
    /// Whether that rate was forced past the config's ceiling.
    pub forced: bool,
}

/// The parts of a host's policy an operator looks at.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyView {
    /// `rate`.
    pub rate: f64,
    /// `burst`.
    pub burst: u32,
    /// `concurrency`.
    pub concurrency: u32,
    /// `adaptive`.
    pub adaptive: bool,
    /// `min_rate`.
    pub min_rate: f64,
    /// `max_rate`.
    pub max_rate: f64,
    /// `on_cooldown`.
    pub on_cooldown: OnCooldown,
    /// `https`.
    pub https: HttpsMode,
    /// `max_queue`.
    pub max_queue: usize,
    /// `max_wait_seconds`.
    pub max_wait_seconds: f64,
    /// `enforce` (`false`: report-only).
    #[serde(default = "enforcing")]
    pub enforce: bool,
    /// `controller` (how an adaptive rate moves); a courtesy too old to say ran AIMD.
    #[serde(default = "aimd")]
    pub controller: Controller,
    /// `upstream_proxy`: `direct`, or the parent as `scheme://host:port`, never its credentials.
    #[serde(default = "direct")]
    pub upstream_proxy: String,
    /// `max_bytes_per_second` (unset: no byte budget).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes_per_second: Option<u64>,
    /// `max_bytes_burst` as in force (one second's worth when the file gives none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes_burst: Option<u64>,
}

fn aimd() -> Controller {
    Controller::Aimd
}

fn direct() -> String {
    "direct".into()
}

fn enforcing() -> bool {
    true
}

impl Default for PolicyView {
    fn default() -> Self {
        PolicyView::of(&crate::config::HostPolicy::default())
    }
}

impl PolicyView {
    fn of(p: &crate::config::HostPolicy) -> Self {
        PolicyView {
            rate: p.pacing.rate,
            burst: p.pacing.burst,
            concurrency: p.pacing.concurrency,
            adaptive: p.adaptive.enabled,
            min_rate: p.adaptive.min_rate,
            max_rate: p.adaptive.max_rate,
            on_cooldown: p.cooldown.on_cooldown,
            https: p.forward.https,
            max_queue: p.pacing.max_queue,
            max_wait_seconds: p.pacing.max_wait.as_secs_f64(),
            enforce: p.scope.enforce,
            controller: p.adaptive.controller,
            upstream_proxy: p.forward.upstream.without_credentials(),
            max_bytes_per_second: p.pacing.max_bytes_per_second,
            max_bytes_burst: p.pacing.max_bytes_per_second.map(|rate| {
                crate::pacing::policy::ByteBudget::default_burst(rate, p.pacing.max_bytes_burst)
            }),
        }
    }
}

/// A host's counters.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Counters {
    /// Requests sent.
    pub sent: u32,
    /// 2xx answers.
    #[serde(rename = "2xx")]
    pub status_2xx: u32,
    /// 3xx answers.
    #[serde(rename = "3xx")]
    pub status_3xx: u32,
    /// 4xx answers.
    #[serde(rename = "4xx")]
    pub status_4xx: u32,
    /// 5xx answers.
    #[serde(rename = "5xx")]
    pub status_5xx: u32,
    /// Requests that got no answer.
    pub failed: u32,
    /// Local refusals, by reason.
    pub refused: BTreeMap<String, u32>,
    /// Response body bytes received from the host and passed on (upstream responses only),
    /// and the bytes of its WebSockets, both ways.
    pub response_bytes: u64,
    /// WebSockets open to the host now: joined after a `101`, holding no concurrency slot.
    pub websockets_open: u32,
}

impl HostView {
    /// The view of one host's snapshot, with wall-clock times from `now_wall`.
    pub fn of(s: &HostSnapshot, now_wall: SystemTime) -> Self {
        HostView {
            host: s.key.clone(),
            key_by: s.kind,
            names: s.names.clone(),
            names_truncated: s.names_truncated,
            state: s.state().to_string(),
            explain: crate::admin::explain::explain(s, now_wall),
            rate: round3(s.rate),
            own_rate: round3(s.own_rate),
            configured_rate: s.policy.pacing.rate,
            queued: s.queued,
            waiting_by_job: s
                .waiting_by_job
                .iter()
                .map(|(job, waiting)| JobWaiting {
                    job: job.clone(),
                    waiting: *waiting,
                })
                .collect(),
            in_flight: s.in_flight,
            cooldown: CooldownView::of(s, now_wall),
            operator: OperatorView::of(s, now_wall),
            policy: PolicyView::of(&s.policy),
            last_statuses: s.stats.last_statuses(),
            counters: Counters::of(s),
            shadow: s.shadow.map(ShadowView::of),
            byte_debt: s.byte_debt.map(|(bytes, left)| ByteDebtView {
                bytes,
                seconds: round3(left.as_secs_f64()),
            }),
            ahead: s.ahead.map(|(turns, slots, in_use)| AheadView {
                turns,
                slots,
                in_use,
            }),
            protocol: s.stats.protocol().name().map(|version| ProtocolView {
                version: version.to_string(),
                fell_back: s.stats.protocol().fell_back().map(str::to_string),
            }),
            ratelimit_policies: s
                .server_policies
                .iter()
                .flat_map(|p| p.iter())
                .map(RateLimitPolicyView::of)
                .collect(),
            signing: None,
            licenses: Vec::new(),
            crawl_delay: CrawlDelayView::of(s),
            visit_time: s.visit_time.clone(),
            not_sent: None,
        }
    }

    /// This view, with the host's requests answered without asking it (`[stored, coalesced]`).
    pub fn not_sent(mut self, counts: Option<[u64; 2]>) -> Self {
        self.not_sent = counts.map(|[stored, coalesced]| NotSentView { stored, coalesced });
        self
    }

    /// This view, with the licences the host's robots.txt names.
    pub fn licensed(mut self, licenses: Vec<String>) -> Self {
        self.licenses = licenses;
        self
    }

    /// This view, saying that requests to the host went unsigned over plain http while signing
    /// was on (when `plain_unsigned`).
    pub fn unsigned_over_plain_http(mut self, plain_unsigned: bool) -> Self {
        if plain_unsigned {
            self.signing = Some(
                "unsigned over plain http: courtesy signs only requests that leave over TLS".into(),
            );
        }
        self
    }
}

impl CooldownView {
    /// The cooldown (or block pause) of `s`, if one runs, its end in wall-clock time.
    fn of(s: &HostSnapshot, now_wall: SystemTime) -> Option<Self> {
        match (&s.block, s.block_remaining) {
            (Some(block), Some(left)) => Some(CooldownView {
                remaining_seconds: round3(left.as_secs_f64()),
                until_unix_ms: unix_ms(now_wall + left),
                cause: block.cause.to_string(),
            }),
            _ => None,
        }
    }
}

impl OperatorView {
    /// What an operator set on `s`: a pause (its end in wall-clock time), a rate, forced or not.
    fn of(s: &HostSnapshot, now_wall: SystemTime) -> Self {
        OperatorView {
            paused_until_unix_ms: s
                .operator_pause_remaining
                .map(|left| unix_ms(now_wall + left)),
            rate: s.rate_override,
            forced: s.forced,
        }
    }
}

impl Counters {
    /// `s`'s counts: requests sent, answers by class, failures, refusals by reason, bytes.
    fn of(s: &HostSnapshot) -> Self {
        Counters {
            sent: s.stats.sent,
            status_2xx: s.stats.by_class[0],
            status_3xx: s.stats.by_class[1],
            status_4xx: s.stats.by_class[2],
            status_5xx: s.stats.by_class[3],
            failed: s.stats.failed,
            refused: s
                .stats
                .refusals()
                .iter()
                .map(|(name, n)| (name.to_string(), *n))
                .collect(),
            response_bytes: s.stats.response_bytes(),
            websockets_open: s.websockets_open,
        }
    }
}

impl NotSentView {
    /// `job`'s requests answered without asking the host.
    fn of_job(job: &crate::budget::jobs::JobState) -> Self {
        let count = |n: &std::sync::atomic::AtomicU64| n.load(std::sync::atomic::Ordering::Relaxed);
        NotSentView {
            stored: count(&job.not_sent[0]),
            coalesced: count(&job.not_sent[1]),
        }
    }
}

impl CrawlDelayView {
    /// The delay in force on `s` from robots.txt, if any: capped when it is the host's
    /// `max_crawl_delay_seconds`.
    fn of(s: &HostSnapshot) -> Option<Self> {
        let seconds = 1.0 / s.robots_cap.filter(|r| *r > 0.0)?;
        let capped = s
            .policy
            .robots
            .max_crawl_delay
            .is_some_and(|max| (max.as_secs_f64() - seconds).abs() < 1e-6);
        Some(CrawlDelayView {
            seconds: round3(seconds),
            capped,
        })
    }
}

impl ShadowView {
    /// A report-only host's counts, its would-be refusals by reason (those that happened).
    fn of(c: ShadowCounts) -> Self {
        ShadowView {
            would_wait: c.would_wait,
            would_wait_seconds: round3(c.would_wait_seconds),
            would_refuse: ShadowReason::ALL
                .iter()
                .zip(c.would_refuse)
                .filter(|(_, n)| *n > 0)
                .map(|(r, n)| (r.as_str().to_string(), n))
                .collect(),
            inside_window: c.inside_window,
        }
    }
}

/// Milliseconds since the Unix epoch (0 before it).
pub(crate) fn unix_ms(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// A job with requests waiting for one host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobWaiting {
    /// The job's name.
    pub job: String,
    /// Its requests waiting for the host.
    pub waiting: usize,
}

/// `/jobs`: every job seen since start, what it waits for, and what it used.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobsPage {
    /// `[proxy] client_auth`.
    pub client_auth: String,
    /// One entry per job, by name.
    pub jobs: Vec<JobView>,
}

/// One job as `/jobs` and `courtesy status --jobs` show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobView {
    /// The job's name (`anonymous`, `other`, or the username of its proxy URL).
    pub job: String,
    /// Whether a `[[job]]` names it.
    pub configured: bool,
    /// Its share of each host's turns against the other jobs waiting.
    pub weight: f64,
    /// The priority of its requests that do not say theirs.
    pub priority: String,
    /// Its requests waiting for a turn, all hosts together.
    pub waiting: usize,
    /// Its requests that went upstream.
    pub served: u64,
    /// Its requests refused for its quota.
    pub refused_quota: u64,
    /// Its quota, and what is left of it, if it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quota: Option<QuotaView>,
    /// Its requests to report-only hosts (`enforce = false`) that its fair share of the host
    /// would have held, and how long in all (seconds).
    pub shadow_would_wait: u64,
    /// See `shadow_would_wait`.
    pub shadow_would_wait_seconds: f64,
    /// What it uses content for (`purpose`), checked against the preferences sites state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub purpose: Option<String>,
    /// Its requests answered with a local 403 because a site's stated preferences refused its
    /// purpose (`content_preferences = "enforce"`).
    #[serde(default)]
    pub preferences_enforced: u64,
    /// Its requests forwarded with the refusing signal reported (`Courtesy-Content-Preference`).
    #[serde(default)]
    pub preferences_reported: u64,
    /// The priced answers it got (HTTP 402 with `crawler-price`), per host.
    #[serde(default)]
    pub priced: Vec<PricedView>,
    /// Its requests answered without asking the host: from the response store, or with an
    /// identical request's answer.
    #[serde(default)]
    pub not_sent: NotSentView,
}

/// The priced answers (HTTP 402 with `crawler-price`, pay per crawl) of one job from one host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PricedView {
    /// The host (`host:port`; `other` past the hosts kept per job).
    pub host: String,
    /// How many.
    pub count: u64,
    /// The last price asked, as the site wrote it (`USD 0.01`).
    pub last_price: String,
}

/// A job's quota and what is left of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuotaView {
    /// Requests per window.
    pub max_requests: u64,
    /// The window's length, in seconds.
    pub per_seconds: f64,
    /// Requests left in this window.
    pub remaining: u64,
    /// Seconds until the window ends.
    pub reset_seconds: f64,
}

impl JobsPage {
    /// The page for the jobs in `jobs` (states) under `config`, with `waiting` from the host
    /// table. Configured jobs not seen yet are listed too.
    pub fn of(
        config: &crate::config::Config,
        jobs: &crate::budget::jobs::Jobs,
        waiting: &std::collections::HashMap<String, usize>,
    ) -> Self {
        use crate::config::ConfigWord as _;
        let now = std::time::Instant::now();
        let mut views: Vec<JobView> = Vec::new();
        for caller in jobs.callers(config) {
            let settings = caller.settings.as_deref();
            views.push(JobView {
                job: caller.name().to_string(),
                configured: settings.is_some(),
                weight: settings.map_or(1.0, |s| s.weight),
                priority: caller.priority().word().to_string(),
                waiting: waiting.get(caller.name()).copied().unwrap_or(0),
                served: caller
                    .state
                    .served
                    .load(std::sync::atomic::Ordering::Relaxed),
                refused_quota: caller
                    .state
                    .refused_quota
                    .load(std::sync::atomic::Ordering::Relaxed),
                shadow_would_wait: caller
                    .state
                    .shadow_would_wait
                    .load(std::sync::atomic::Ordering::Relaxed),
                shadow_would_wait_seconds: caller
                    .state
                    .shadow_would_wait_ms
                    .load(std::sync::atomic::Ordering::Relaxed)
                    as f64
                    / 1000.0,
                purpose: settings
                    .and_then(|s| s.purpose)
                    .map(|p| p.word().to_string()),
                preferences_enforced: caller
                    .state
                    .preferences_enforced
                    .load(std::sync::atomic::Ordering::Relaxed),
                preferences_reported: caller
                    .state
                    .preferences_reported
                    .load(std::sync::atomic::Ordering::Relaxed),
                priced: caller
                    .state
                    .priced()
                    .into_iter()
                    .map(|(host, p)| PricedView {
                        host,
                        count: p.count,
                        last_price: p.last_price,
                    })
                    .collect(),
                not_sent: NotSentView::of_job(&caller.state),
                quota: caller.quota_left(now).map(|q| QuotaView {
                    max_requests: q.max,
                    per_seconds: q.per.as_secs_f64(),
                    remaining: q.remaining,
                    reset_seconds: q.reset.as_secs_f64(),
                }),
            });
        }
        JobsPage {
            client_auth: config.proxy.client_auth.word().to_string(),
            jobs: views,
        }
    }
}
