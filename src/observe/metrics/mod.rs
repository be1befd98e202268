//! Prometheus metrics: per-host rate, queue, in-flight, cooldown; requests by outcome; histograms
//! of queue wait and upstream latency; what held requests back (`waits.rs`); process totals.
//!
//! Counters and histograms are updated where the events happen; gauges are filled from the host
//! table when `/metrics` is scraped. The `host` label is bounded by `[admin] metrics_max_hosts`:
//! hosts get their own label while there is room, the rest are summed as `host="other"`, so a crawl
//! over a million hosts cannot blow up the scrape. When the host table forgets an idle host, its
//! series go too and its label slot is free for a host in use.

mod format;
mod not_sent;
mod stated;
mod waits;

pub(crate) use format::negotiate;
pub(crate) use not_sent::NotSent;

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::budget::limiter::{Limiter, Refusal};

/// The label value for hosts beyond `metrics_max_hosts`.
pub(crate) const OTHER: &str = "other";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HostLabel {
    host: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    host: String,
    outcome: String,
}

/// Every `outcome` of `courtesy_requests_total`: what a forgotten host's series are removed by.
const REQUEST_OUTCOMES: [&str; 11] = [
    "upstream_2xx",
    "upstream_3xx",
    "upstream_4xx",
    "upstream_5xx",
    "upstream_failed",
    "upstream_proxy_failed",
    "local_queue_full",
    "local_waited_too_long",
    "local_shutting_down",
    "local_paused",
    "local_cooling_down",
];

/// Every `outcome` of `courtesy_blocks_total`.
pub(crate) const BLOCK_KINDS: [&str; 2] = ["soft_block", "hard_block"];

fn seconds_histogram() -> Histogram {
    // 1 ms to about 65 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

/// The series every upstream response of one labelled host updates, looked up once when the
/// host gets its label: a response then costs one map lookup, not one per series.
#[derive(Debug)]
struct HostSeries {
    /// `courtesy_requests_total` with outcome `upstream_2xx` .. `upstream_5xx`.
    by_class: [Counter; 4],
    latency: Histogram,
    queue_wait: Histogram,
}

/// The outcomes of [`HostSeries::by_class`], in its order.
const UPSTREAM_CLASSES: [&str; 4] = [
    "upstream_2xx",
    "upstream_3xx",
    "upstream_4xx",
    "upstream_5xx",
];

/// Client connections cut by `send_timeout_seconds` since start: counted where the cut is made
/// (`crate::front`'s client connection), read into the metric at each scrape.
pub(crate) static CLIENT_SEND_TIMEOUTS: std::sync::atomic::AtomicU64 =
    std::sync::atomic::AtomicU64::new(0);

/// All of courtesy's metrics and the registry that renders them.
pub struct Metrics {
    registry: Registry,
    /// The series per host: outcomes, waits, latency, blocks, the host table's gauges.
    hosts: HostFamilies,
    /// The process's totals.
    process: ProcessFamilies,
    /// The hosts with a label of their own, and their response series.
    labelled: Mutex<HashMap<String, Arc<HostSeries>>>,
    /// The response series of `host="other"`, made at its first use.
    other: std::sync::OnceLock<Arc<HostSeries>>,
    max_hosts: usize,
    /// `courtesy_shared_mode` and `courtesy_shared_instances`, with a shared budget.
    shared: Option<(Family<ModeLabel, Gauge>, Gauge)>,
    shadow: ShadowFamilies,
    parent_errors: Family<ParentLabels, Counter>,
    jobs: JobFamilies,
    bytes: ByteFamilies,
    /// What held requests back (`waits.rs`).
    waits: waits::WaitCounters,
    /// Stated preferences and priced answers (`stated.rs`).
    stated: stated::StatedFamilies,
    /// Requests answered without asking the host (`not_sent.rs`).
    not_sent: not_sent::NotSentFamilies,
}

/// The series per host (the `host` label bounded by `metrics_max_hosts`): counters and
/// histograms updated where the events happen, gauges set from the host table at each scrape.
struct HostFamilies {
    /// `courtesy_requests_total`.
    requests: Family<OutcomeLabels, Counter>,
    /// `courtesy_queue_wait_seconds`.
    queue_wait: Family<HostLabel, Histogram, fn() -> Histogram>,
    /// `courtesy_upstream_latency_seconds`.
    latency: Family<HostLabel, Histogram, fn() -> Histogram>,
    /// `courtesy_host_rate`.
    rate: Family<HostLabel, Gauge<f64, AtomicU64>>,
    /// `courtesy_host_queue_depth`.
    queue_depth: Family<HostLabel, Gauge>,
    /// `courtesy_host_in_flight`.
    in_flight: Family<HostLabel, Gauge>,
    /// `courtesy_host_cooldown_remaining_seconds`.
    cooldown: Family<HostLabel, Gauge<f64, AtomicU64>>,
    /// `courtesy_blocks_total`.
    blocks: Family<OutcomeLabels, Counter>,
}

impl HostFamilies {
    fn register(registry: &mut Registry) -> Self {
        let families = HostFamilies {
            requests: Family::default(),
            queue_wait: Family::new_with_constructor(seconds_histogram as fn() -> Histogram),
            latency: Family::new_with_constructor(seconds_histogram as fn() -> Histogram),
            rate: Family::default(),
            queue_depth: Family::default(),
            in_flight: Family::default(),
            cooldown: Family::default(),
            blocks: Family::default(),
        };
        registry.register(
            "requests",
            "Requests by host and outcome: upstream_2xx..upstream_5xx, upstream_failed, or local_<reason> for answers courtesy made itself",
            families.requests.clone(),
        );
        registry.register(
            "queue_wait_seconds",
            "Time requests waited for their turn",
            families.queue_wait.clone(),
        );
        registry.register(
            "upstream_latency_seconds",
            "Time from sending a request upstream to its response headers",
            families.latency.clone(),
        );
        registry.register(
            "host_rate",
            "Requests per second in effect per host",
            families.rate.clone(),
        );
        registry.register(
            "host_queue_depth",
            "Requests waiting per host",
            families.queue_depth.clone(),
        );
        registry.register(
            "host_in_flight",
            "Requests in flight per host",
            families.in_flight.clone(),
        );
        registry.register(
            "host_cooldown_remaining_seconds",
            "Seconds left in a host's cooldown or operator pause (0 when none)",
            families.cooldown.clone(),
        );
        registry.register(
            "blocks",
            "Block pauses by host and kind (outcome=soft_block: a challenge page; hard_block: 403s in a row)",
            families.blocks.clone(),
        );
        families
    }
}

/// The process's totals: hosts known, WebSockets open, leaf certificates, clients cut.
struct ProcessFamilies {
    /// `courtesy_hosts_known`.
    hosts_known: Gauge,
    /// `courtesy_websockets_open`: WebSockets open now, all hosts together.
    websockets_open: Gauge,
    /// `courtesy_leaf_certificates_minted_total`.
    leaf_minted: Counter,
    /// `courtesy_leaf_certificate_cache_hits_total`.
    leaf_hits: Counter,
    /// `courtesy_client_send_timeouts_total`, brought up to [`CLIENT_SEND_TIMEOUTS`] at a scrape.
    send_timeouts: Counter,
}

impl ProcessFamilies {
    fn register(registry: &mut Registry) -> Self {
        let families = ProcessFamilies {
            hosts_known: Gauge::default(),
            websockets_open: Gauge::default(),
            leaf_minted: Counter::default(),
            leaf_hits: Counter::default(),
            send_timeouts: Counter::default(),
        };
        registry.register(
            "hosts_known",
            "Hosts in the host table",
            families.hosts_known.clone(),
        );
        registry.register(
            "websockets_open",
            "WebSockets open now, all hosts together (joined after a 101; they hold no concurrency slot; per host in /hosts)",
            families.websockets_open.clone(),
        );
        registry.register(
            "leaf_certificates_minted",
            "Leaf certificates minted for intercepted hosts",
            families.leaf_minted.clone(),
        );
        registry.register(
            "leaf_certificate_cache_hits",
            "CONNECTs served from the leaf certificate cache",
            families.leaf_hits.clone(),
        );
        registry.register(
            "client_send_timeouts",
            "Client connections closed because the client accepted no byte of what courtesy was sending for send_timeout_seconds (the client's fault: never reported to the host)",
            families.send_timeouts.clone(),
        );
        families
    }
}

/// The byte series: what each host sent back and what the byte budgets owe. Gauges set from the
/// host table at each scrape (a host's count starts again when it is forgotten).
struct ByteFamilies {
    /// `courtesy_host_response_bytes`.
    response: Family<HostLabel, Gauge>,
    /// `courtesy_host_byte_debt_seconds`.
    debt_seconds: Family<HostLabel, Gauge<f64, AtomicU64>>,
    /// `courtesy_global_byte_debt_bytes`.
    global_debt: Gauge,
}

impl ByteFamilies {
    fn register(registry: &mut Registry) -> Self {
        let families = ByteFamilies {
            response: Family::default(),
            debt_seconds: Family::default(),
            global_debt: Gauge::default(),
        };
        registry.register(
            "host_response_bytes",
            "Response body bytes received per host since it became known (upstream responses, not blind tunnels)",
            families.response.clone(),
        );
        registry.register(
            "host_byte_debt_seconds",
            "Seconds until a host's byte debt (max_bytes_per_second) is paid back: its next turn waits at least this long (0 when none)",
            families.debt_seconds.clone(),
        );
        registry.register(
            "global_byte_debt_bytes",
            "Response bytes of all hosts together beyond global_bytes_per_second not yet paid back (0 when none or unset)",
            families.global_debt.clone(),
        );
        families
    }
}

/// The series per job: the `job` label is a configured job's name, `anonymous`, or `other` (every
/// name no `[[job]]` gives), so clients inventing usernames cannot grow the scrape.
struct JobFamilies {
    requests: Family<JobOutcome, Counter>,
    waiting: Family<JobLabel, Gauge>,
    quota_remaining: Family<JobLabel, Gauge>,
    /// `courtesy_auth_failures_total`: proxy credentials refused (a wrong token, a name no
    /// `[[job]]` gives where one is required, a token-less job claimed from afar).
    auth_failures: Counter,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct JobLabel {
    job: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct JobOutcome {
    job: String,
    outcome: &'static str,
}

impl JobFamilies {
    fn register(registry: &mut Registry) -> Self {
        let families = JobFamilies {
            requests: Family::default(),
            waiting: Family::default(),
            quota_remaining: Family::default(),
            auth_failures: Counter::default(),
        };
        registry.register(
            "auth_failures",
            "Proxy credentials refused with a 407: a wrong token, a name no [[job]] gives where a job is required, or a job without a token claimed from another machine",
            families.auth_failures.clone(),
        );
        registry.register(
            "job_requests",
            "Requests by job and outcome: served (went upstream), refused_quota (the job's quota), shadow_would_wait (to a report-only host, held by the job's fair share had it enforced)",
            families.requests.clone(),
        );
        registry.register(
            "job_waiting",
            "Requests of each job waiting for a turn, all hosts together",
            families.waiting.clone(),
        );
        registry.register(
            "job_quota_remaining",
            "Requests left in the current window of each job with a quota",
            families.quota_remaining.clone(),
        );
        families
    }
}

/// What report-only hosts (`enforce = false`) would have seen: every series has `shadow` in its name.
struct ShadowFamilies {
    would_wait: Family<HostLabel, Counter>,
    would_wait_seconds: Family<HostLabel, Counter<f64, AtomicU64>>,
    would_refuse: Family<ReasonLabels, Counter>,
    inside_window: Family<HostLabel, Counter>,
}

impl ShadowFamilies {
    fn register(registry: &mut Registry) -> Self {
        let families = ShadowFamilies {
            would_wait: Family::default(),
            would_wait_seconds: Family::default(),
            would_refuse: Family::default(),
            inside_window: Family::default(),
        };
        registry.register(
            "shadow_would_wait",
            "Requests to report-only hosts (enforce = false) that would have waited for their turn",
            families.would_wait.clone(),
        );
        registry.register(
            "shadow_would_wait_seconds",
            "How long requests to report-only hosts would have waited, in all",
            families.would_wait_seconds.clone(),
        );
        registry.register(
            "shadow_would_refuse",
            "Requests to report-only hosts that would have been refused, by reason: cooling_down, paused, queue_full, waited_too_long, robots, skip_resources, quota",
            families.would_refuse.clone(),
        );
        registry.register(
            "shadow_inside_window",
            "Requests to report-only hosts sent inside a window the server announced (Retry-After, RateLimit reset)",
            families.inside_window.clone(),
        );
        families
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    host: String,
    reason: String,
}

/// A parent proxy (`host:port`, bounded by the config's parents) and what went wrong with it.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ParentLabels {
    parent: String,
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModeLabel {
    mode: &'static str,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics")
            .field("max_hosts", &self.max_hosts)
            .finish()
    }
}

impl Metrics {
    /// Metrics with at most `max_hosts` distinct host labels.
    pub fn new(max_hosts: usize) -> Self {
        let mut registry = Registry::with_prefix("courtesy");
        // Registered in the order the scrape shows them.
        let hosts = HostFamilies::register(&mut registry);
        let process = ProcessFamilies::register(&mut registry);
        let shadow = ShadowFamilies::register(&mut registry);
        let parent_errors = Family::<ParentLabels, Counter>::default();
        registry.register(
            "upstream_proxy_errors",
            "Requests and tunnels a parent proxy (upstream_proxy) failed, by parent (host:port) and kind: unreachable, timeout, auth_failed, refused, protocol_error; none of them counts against the target",
            parent_errors.clone(),
        );
        let jobs = JobFamilies::register(&mut registry);
        let bytes = ByteFamilies::register(&mut registry);
        let waits = waits::WaitCounters::register(&mut registry);
        let stated = stated::StatedFamilies::register(&mut registry);
        let not_sent = not_sent::NotSentFamilies::register(&mut registry);
        Metrics {
            stated,
            not_sent,
            waits,
            bytes,
            registry,
            jobs,
            shadow,
            parent_errors,
            hosts,
            process,
            labelled: Mutex::new(HashMap::new()),
            other: std::sync::OnceLock::new(),
            max_hosts,
            shared: None,
        }
    }

    /// The label for `host`: itself while there is room, else `other`.
    fn label(&self, host: &str) -> String {
        match self.labelled_series(host) {
            Some(_) => host.to_string(),
            None => OTHER.to_string(),
        }
    }

    /// The response series of `host` while it has (or can get) a label of its own; `None`: it is
    /// counted as `other`.
    fn labelled_series(&self, host: &str) -> Option<Arc<HostSeries>> {
        let mut labelled = crate::util::locks::lock(&self.labelled);
        if let Some(series) = labelled.get(host) {
            return Some(series.clone());
        }
        if labelled.len() >= self.max_hosts {
            return None;
        }
        let series = Arc::new(self.series_of(host));
        labelled.insert(host.to_string(), series.clone());
        Some(series)
    }

    /// The response series of the label `host`, from the families.
    fn series_of(&self, host: &str) -> HostSeries {
        let label = HostLabel {
            host: host.to_string(),
        };
        let counter = |outcome: &str| {
            self.hosts
                .requests
                .get_or_create(&OutcomeLabels {
                    host: host.to_string(),
                    outcome: outcome.to_string(),
                })
                .clone()
        };
        HostSeries {
            by_class: UPSTREAM_CLASSES.map(counter),
            latency: self.hosts.latency.get_or_create(&label).clone(),
            queue_wait: self.hosts.queue_wait.get_or_create(&label).clone(),
        }
    }

    /// Drops the series and label slots of labelled hosts the host table no longer knows (after
    /// a sweep), so that the slots serve the hosts in use. Returns how many hosts were dropped.
    pub fn forget_unknown_hosts(&self, limiter: &Limiter) -> usize {
        let gone: Vec<String> = {
            let mut labelled = crate::util::locks::lock(&self.labelled);
            let gone: Vec<String> = labelled
                .keys()
                .filter(|host| !limiter.knows(host))
                .cloned()
                .collect();
            for host in &gone {
                labelled.remove(host);
            }
            gone
        };
        for host in &gone {
            let label = HostLabel { host: host.clone() };
            self.hosts.latency.remove(&label);
            self.hosts.queue_wait.remove(&label);
            let mut outcome = OutcomeLabels {
                host: host.clone(),
                outcome: String::new(),
            };
            for name in REQUEST_OUTCOMES {
                outcome.outcome = name.to_string();
                self.hosts.requests.remove(&outcome);
            }
            for kind in BLOCK_KINDS {
                outcome.outcome = kind.to_string();
                self.hosts.blocks.remove(&outcome);
            }
            self.shadow.would_wait.remove(&label);
            self.shadow.would_wait_seconds.remove(&label);
            self.shadow.inside_window.remove(&label);
            self.stated.forget(host);
            self.not_sent.forget(host);
            for reason in crate::budget::limiter::ShadowReason::ALL {
                self.shadow.would_refuse.remove(&ReasonLabels {
                    host: host.clone(),
                    reason: reason.as_str().to_string(),
                });
            }
        }
        self.not_sent.keep_known(|host| limiter.knows(host));
        gone.len()
    }

    /// The `job` label of a job: its name when a `[[job]]` gives it or it is `anonymous`, else
    /// `other`.
    fn job_label(job: &crate::budget::jobs::JobState) -> String {
        if job.configured || &*job.name == crate::budget::jobs::ANONYMOUS {
            job.name.to_string()
        } else {
            crate::budget::jobs::OTHER.to_string()
        }
    }

    /// Counts a request of `job` to `host` whose `purpose` the site refused (read from `source`):
    /// `enforced` (a local 403) or reported.
    pub(crate) fn content_preference(
        &self,
        (job, host): (&crate::budget::jobs::JobState, &str),
        purpose: crate::config::Purpose,
        source: crate::pacing::preferences::Source,
        enforced: bool,
    ) {
        use crate::config::ConfigWord as _;
        let labels = (Self::job_label(job), self.label(host));
        self.stated
            .preference(labels, purpose.word(), source.metric(), enforced);
    }

    /// Counts a request of `job` to `host` answered without asking the host (`how`), for
    /// `/metrics`, `/hosts` and `/jobs`.
    pub(crate) fn not_sent(&self, job: &crate::budget::jobs::JobState, host: &str, how: NotSent) {
        job.not_sent[how.index()].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.not_sent
            .count(Self::job_label(job), (host, self.label(host)), how);
    }

    /// `host`'s requests answered without asking it, `[stored, coalesced]`, if any.
    pub fn not_sent_of(&self, host: &str) -> Option<[u64; 2]> {
        self.not_sent.of(host)
    }

    /// Counts a priced answer (HTTP 402 with `crawler-price`) to `job` from `host`.
    pub(crate) fn priced(&self, job: &crate::budget::jobs::JobState, host: &str) {
        self.stated.priced(Self::job_label(job), self.label(host));
    }

    /// Counts a turn given or refused after `wait`, held longest by `reason`.
    pub fn turn(&self, reason: crate::budget::limiter::WaitReason, wait: Duration) {
        self.waits.count(reason, wait);
    }

    /// Counts an upstream response and records its timings.
    pub fn response(&self, host: &str, status: u16, latency: Duration, waited: Duration) {
        let class = match status {
            0..=299 => 0,
            300..=399 => 1,
            400..=499 => 2,
            _ => 3,
        };
        let series = self.labelled_series(host).unwrap_or_else(|| {
            self.other
                .get_or_init(|| Arc::new(self.series_of(OTHER)))
                .clone()
        });
        series.by_class[class].inc();
        series.latency.observe(latency.as_secs_f64());
        series.queue_wait.observe(waited.as_secs_f64());
    }

    /// Counts a request that got no upstream response.
    pub fn failure(&self, host: &str, waited: Duration) {
        self.unanswered(host, waited, "upstream_failed");
    }

    fn unanswered(&self, host: &str, waited: Duration, outcome: &str) {
        let host = self.label(host);
        self.count(&host, outcome);
        self.hosts
            .queue_wait
            .get_or_create(&HostLabel { host })
            .observe(waited.as_secs_f64());
    }

    /// Counts a failure of the parent proxy `parent` (`host:port`) of `kind` (one of a closed
    /// set, `ParentErrorKind::label`); `host`, when a request (not a tunnel) was failed, also
    /// counts it as `upstream_proxy_failed`.
    pub(crate) fn parent_failure(
        &self,
        host: Option<(&str, Duration)>,
        parent: &str,
        kind: &'static str,
    ) {
        if let Some((host, waited)) = host {
            self.unanswered(host, waited, "upstream_proxy_failed");
        }
        self.parent_errors
            .get_or_create(&ParentLabels {
                parent: parent.to_string(),
                kind,
            })
            .inc();
    }

    /// Counts an answer courtesy made itself instead of sending the request.
    pub fn refusal(&self, host: &str, refusal: &Refusal) {
        let host = self.label(host);
        self.count(&host, &format!("local_{}", refusal.reason()));
    }

    /// Counts what a report-only host's request would have met.
    pub fn shadow(&self, host: &str, verdict: &crate::budget::limiter::ShadowVerdict) {
        let label = HostLabel {
            host: self.label(host),
        };
        if verdict.waits {
            self.shadow.would_wait.get_or_create(&label).inc();
            self.shadow
                .would_wait_seconds
                .get_or_create(&label)
                .inc_by(verdict.would_wait.as_secs_f64());
        }
        if let Some(reason) = verdict.would_refuse {
            self.shadow
                .would_refuse
                .get_or_create(&ReasonLabels {
                    host: label.host.clone(),
                    reason: reason.as_str().to_string(),
                })
                .inc();
        }
        if verdict.inside_window {
            self.shadow.inside_window.get_or_create(&label).inc();
        }
    }

    /// Counts a block pause (`kind` is one of [`BLOCK_KINDS`]).
    pub fn block(&self, host: &str, kind: &str) {
        debug_assert!(BLOCK_KINDS.contains(&kind), "unknown block kind {kind}");
        let host = self.label(host);
        self.hosts
            .blocks
            .get_or_create(&OutcomeLabels {
                host,
                outcome: kind.to_string(),
            })
            .inc();
    }

    fn count(&self, host: &str, outcome: &str) {
        self.hosts
            .requests
            .get_or_create(&OutcomeLabels {
                host: host.to_string(),
                outcome: outcome.to_string(),
            })
            .inc();
    }

    /// Adds the shared budget's series: the mode in force, the instances seen, the store's
    /// round-trip latency and its errors by operation.
    pub(crate) fn with_shared(mut self, store: &crate::store::RedisStore) -> Self {
        let mode = Family::<ModeLabel, Gauge>::default();
        self.registry.register(
            "shared_mode",
            "1 for the budget mode in force: shared (on the store) or fallback (this instance's share while the store cannot be reached)",
            mode.clone(),
        );
        let instances = Gauge::default();
        self.registry.register(
            "shared_instances",
            "Live instances on the shared store, as its heartbeats counted them recently",
            instances.clone(),
        );
        self.registry.register(
            "shared_round_trip_seconds",
            "Round trips to the shared store (each reservation, report, release and heartbeat)",
            store.round_trip.clone(),
        );
        self.registry.register(
            "shared_errors",
            "Calls to the shared store that failed or timed out, by operation",
            store.errors.clone(),
        );
        self.shared = Some((mode, instances));
        self
    }

    /// Brings the per-job series up to date with `callers` (every job, see `Jobs::callers`) and
    /// `waiting` (requests waiting per job, from the host table); called before a scrape.
    pub fn count_jobs(
        &self,
        callers: &[crate::budget::jobs::Caller],
        waiting: &HashMap<String, usize>,
    ) {
        use std::sync::atomic::Ordering::Relaxed;
        // Requests of no configured job wait in their client's share (`@address`): anonymous's.
        let unconfigured: usize = waiting
            .iter()
            .filter(|(lane, _)| lane.starts_with('@'))
            .map(|(_, n)| n)
            .sum();
        let now = std::time::Instant::now();
        let mut per_label: HashMap<String, (u64, u64, i64, Option<i64>, u64)> = HashMap::new();
        for caller in callers {
            let name = caller.name();
            let label = if caller.settings.is_some() || name == crate::budget::jobs::ANONYMOUS {
                name.to_string()
            } else {
                crate::budget::jobs::OTHER.to_string()
            };
            let entry = per_label.entry(label).or_default();
            entry.0 += caller.state.served.load(Relaxed);
            entry.1 += caller.state.refused_quota.load(Relaxed);
            entry.2 += waiting.get(name).copied().unwrap_or(0) as i64;
            if name == crate::budget::jobs::ANONYMOUS {
                entry.2 += unconfigured as i64;
            }
            if let Some(left) = caller.quota_left(now) {
                entry.3 = Some(entry.3.unwrap_or(0) + left.remaining as i64);
            }
            entry.4 += caller.state.shadow_would_wait.load(Relaxed);
        }
        self.jobs.waiting.clear();
        self.jobs.quota_remaining.clear();
        for (job, (served, refused, waiting, remaining, shadow)) in per_label {
            let outcomes = [
                ("served", served),
                ("refused_quota", refused),
                ("shadow_would_wait", shadow),
            ];
            for (outcome, total) in outcomes {
                let labels = JobOutcome {
                    job: job.clone(),
                    outcome,
                };
                let counter = self.jobs.requests.get_or_create(&labels);
                counter.inc_by(total.saturating_sub(counter.get()));
            }
            let label = JobLabel { job };
            self.jobs.waiting.get_or_create(&label).set(waiting);
            if let Some(remaining) = remaining {
                self.jobs
                    .quota_remaining
                    .get_or_create(&label)
                    .set(remaining);
            }
        }
    }

    /// Brings `courtesy_auth_failures_total` up to `total` (the jobs' [`crate::budget::jobs::AuthGuard`]
    /// count); called before a scrape.
    pub fn count_auth_failures(&self, total: u64) {
        let counter = &self.jobs.auth_failures;
        counter.inc_by(total.saturating_sub(counter.get()));
    }

    /// Renders the Prometheus text format, filling the gauges from the host table first.
    pub fn render(&self, limiter: &Limiter, leaf: (u64, u64)) -> String {
        let cut = CLIENT_SEND_TIMEOUTS.load(std::sync::atomic::Ordering::Relaxed);
        self.process
            .send_timeouts
            .inc_by(cut.saturating_sub(self.process.send_timeouts.get()));
        let snapshots = limiter.snapshots();
        let mut per_label: HashMap<String, (f64, i64, i64, f64)> = HashMap::new();
        let mut bytes: HashMap<String, (u64, f64)> = HashMap::new();
        for s in &snapshots {
            let label = self.label(&s.key);
            let b = bytes.entry(label.clone()).or_default();
            b.0 = b.0.saturating_add(s.stats.response_bytes());
            b.1 =
                b.1.max(s.byte_debt.map_or(0.0, |(_, left)| left.as_secs_f64()));
            let entry = per_label.entry(label).or_default();
            entry.0 += s.rate;
            entry.1 += s.queued as i64;
            entry.2 += i64::from(s.in_flight);
            let left = s.block_remaining.unwrap_or_default().as_secs_f64();
            entry.3 = entry.3.max(left);
        }
        self.hosts.rate.clear();
        self.hosts.queue_depth.clear();
        self.hosts.in_flight.clear();
        self.hosts.cooldown.clear();
        for (host, (rate, queued, in_flight, cooldown)) in per_label {
            let label = HostLabel { host };
            self.hosts.rate.get_or_create(&label).set(rate);
            self.hosts.queue_depth.get_or_create(&label).set(queued);
            self.hosts.in_flight.get_or_create(&label).set(in_flight);
            self.hosts.cooldown.get_or_create(&label).set(cooldown);
        }
        self.bytes.response.clear();
        self.bytes.debt_seconds.clear();
        for (host, (response, debt)) in bytes {
            let label = HostLabel { host };
            let response = i64::try_from(response).unwrap_or(i64::MAX);
            self.bytes.response.get_or_create(&label).set(response);
            self.bytes.debt_seconds.get_or_create(&label).set(debt);
        }
        let global = limiter.downlink_debt().map_or(0, |(debt, _)| debt);
        self.bytes
            .global_debt
            .set(i64::try_from(global).unwrap_or(i64::MAX));
        self.process.hosts_known.set(snapshots.len() as i64);
        let sockets: u64 = snapshots.iter().map(|s| u64::from(s.websockets_open)).sum();
        self.process
            .websockets_open
            .set(i64::try_from(sockets).unwrap_or(i64::MAX));
        if let Some((mode, instances)) = &self.shared {
            let now = limiter.budget_mode();
            for m in ["shared", "fallback"] {
                mode.get_or_create(&ModeLabel { mode: m })
                    .set(i64::from(m == now));
            }
            let seen = limiter.store().map_or(0, |s| s.instances_seen());
            instances.set(i64::from(seen));
        }
        let (hits, minted) = leaf;
        self.process
            .leaf_hits
            .inc_by(hits.saturating_sub(self.process.leaf_hits.get()));
        self.process
            .leaf_minted
            .inc_by(minted.saturating_sub(self.process.leaf_minted.get()));
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::warn!("cannot encode metrics: {e}");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use std::sync::Arc;

    #[test]
    fn every_refusal_is_a_known_outcome() {
        let refusals = [
            Refusal::QueueFull {
                max_queue: 1,
                retry_after: Duration::ZERO,
            },
            Refusal::WaitedTooLong {
                waited: Duration::ZERO,
                reason: crate::pacing::policy::WaitReason::None,
            },
            Refusal::ShuttingDown,
            Refusal::CoolingDown {
                remaining: Duration::ZERO,
                cause: crate::pacing::policy::CooldownCause::Failure,
            },
            Refusal::CoolingDown {
                remaining: Duration::ZERO,
                cause: crate::pacing::policy::CooldownCause::Operator,
            },
        ];
        for refusal in refusals {
            let outcome = format!("local_{}", refusal.reason());
            assert!(REQUEST_OUTCOMES.contains(&outcome.as_str()), "{outcome}");
        }
    }

    #[tokio::test]
    async fn a_forgotten_host_gives_its_label_and_series_back() {
        let limiter = Limiter::new(Arc::new(Config::default()));
        let m = Metrics::new(1);
        let mut p = limiter.admit(("old.test", 80)).await.unwrap();
        p.mark_sent();
        drop(p);
        m.response("old.test:80", 200, Duration::from_millis(5), Duration::ZERO);
        m.refusal("old.test:80", &Refusal::ShuttingDown);
        m.block("old.test:80", "soft_block");
        assert_eq!(m.label("new.test:80"), OTHER, "the only slot is taken");
        // Still known: nothing is dropped.
        assert_eq!(m.forget_unknown_hosts(&limiter), 0);
        tokio::time::sleep(Duration::from_millis(1100)).await;
        assert_eq!(limiter.sweep(Duration::ZERO), 1);
        assert_eq!(m.forget_unknown_hosts(&limiter), 1);
        let text = m.render(&limiter, (0, 0));
        assert!(!text.contains("old.test"), "series left behind:\n{text}");
        assert_eq!(m.label("new.test:80"), "new.test:80");
    }

    #[test]
    fn host_labels_are_bounded() {
        let m = Metrics::new(2);
        assert_eq!(m.label("a:80"), "a:80");
        assert_eq!(m.label("b:80"), "b:80");
        assert_eq!(m.label("c:80"), OTHER);
        assert_eq!(m.label("a:80"), "a:80");
    }

    #[tokio::test]
    async fn counts_and_gauges_render_in_the_text_format() {
        let limiter = Limiter::new(Arc::new(Config::default()));
        let mut p = limiter.admit(("shop.test", 443)).await.unwrap();
        p.mark_sent();
        let m = Metrics::new(10);
        m.response(
            "shop.test:443",
            200,
            Duration::from_millis(20),
            Duration::ZERO,
        );
        m.response(
            "shop.test:443",
            503,
            Duration::from_millis(20),
            Duration::ZERO,
        );
        m.refusal("shop.test:443", &Refusal::ShuttingDown);
        let text = m.render(&limiter, (3, 1));
        for line in [
            "courtesy_requests_total{host=\"shop.test:443\",outcome=\"upstream_2xx\"} 1",
            "courtesy_requests_total{host=\"shop.test:443\",outcome=\"upstream_5xx\"} 1",
            "courtesy_requests_total{host=\"shop.test:443\",outcome=\"local_shutting_down\"} 1",
            "courtesy_host_in_flight{host=\"shop.test:443\"} 1",
            "courtesy_host_rate{host=\"shop.test:443\"} 1.0",
            "courtesy_hosts_known 1",
            "courtesy_websockets_open 0",
            "courtesy_leaf_certificate_cache_hits_total 3",
            "courtesy_upstream_latency_seconds_count{host=\"shop.test:443\"} 2",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
    }
}
