//! The pacing rules one host gets, fully resolved: [`HostPolicy`] and its defaults, and the
//! [`HostRule`] that gives them to the hosts its pattern matches.
//!
//! A policy is plain data: the request path reads it and never looks back at the file. Building
//! one from the file is the validator's job; keeping per-host state is the `policy` module's.

use std::sync::Arc;
use std::time::Duration;

use super::key_tables::host::{
    Agent, FileOffPeak, Markers, OffPeakWindow, Parent, Resources, Statuses,
};
use super::key_tables::kinds::Kind as _;
use super::key_tables::kinds::{between, Count, Days, Flag, Maybe, Millis, Rate, Seconds, Word};
use super::key_tables::process::HeaderText;
use super::key_tables::{keys, Group, Key};
use super::off_peak::OffPeak;
use super::pattern::HostPattern;
use super::{
    CacheMode, ContentPreferences, Controller, HttpsMode, KeyMode, OnCooldown, Purpose,
    ResourceKind, Route, UpstreamHttp2,
};
use crate::config::{BlockMarkers, DEFAULT_BLOCK_MARKERS};

/// The pacing rules for one host, fully resolved (defaults merged with the most specific rule),
/// grouped by concern. The file stays flat: every key of every group is a key of `[defaults]`
/// and `[[host]]`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HostPolicy {
    /// What one budget is kept for, and whether courtesy acts on it.
    pub scope: BudgetScope,
    /// How fast requests leave: the token bucket and the queue in front of it.
    pub pacing: PacingSettings,
    /// How the rate adapts to what the server says.
    pub adaptive: Adaptive,
    /// How the host cools down after 429s, overload and failures.
    pub cooldown: CooldownSettings,
    /// robots.txt.
    pub robots: Robots,
    /// Challenge pages, 403 walls and the resources not fetched at all.
    pub blocks: BlockSettings,
    /// How a request leaves: what a CONNECT becomes, the response store, a parent proxy.
    pub forward: Forward,
    /// What courtesy stamps on the requests to the host: User-Agent, From.
    pub identity: Identity,
    /// The site's stated preferences about use: the purpose of requests without a job's own,
    /// and what a refusal does.
    pub preferences: Preferences,
}

impl HostPolicy {
    /// Every key of `[defaults]` (and of `[[host]]`, which also takes `match` and
    /// `upstream_proxy`), group by group with each group's doc, in the order the docs list them.
    pub const GROUPS: [Group<HostPolicy>; 9] = [
        (BudgetScope::DOC, BudgetScope::KEYS),
        (PacingSettings::DOC, PacingSettings::KEYS),
        (Adaptive::DOC, Adaptive::KEYS),
        (CooldownSettings::DOC, CooldownSettings::KEYS),
        (Robots::DOC, Robots::KEYS),
        (BlockSettings::DOC, BlockSettings::KEYS),
        (Forward::DOC, Forward::KEYS),
        (Identity::DOC, Identity::KEYS),
        (Preferences::DOC, Preferences::KEYS),
    ];

    /// `upstream_proxy` in a `[[host]]` rule: where the hosts it matches leave (`[defaults]` takes
    /// `[proxy]`'s).
    pub const RULE_UPSTREAM: Key<HostPolicy> = Key {
        name: "upstream_proxy",
        doc: &[
            " `\"direct\"` or a parent URL for the hosts this rule matches (a `[[host]]` key only:",
            " `[defaults]` takes it from `[proxy] upstream_proxy`).",
        ],
        takes: || Parent.takes(),
        shown: |_| None,
        example: Some("\"direct\""),
        secret: || true,
        read: |value, say, policy| {
            let Some(url) = say.typed::<String>(value, "upstream_proxy", true) else {
                return;
            };
            if let Some(route) = Parent.check(url, value.span().start, "upstream_proxy", say) {
                policy.forward.upstream = route;
            }
        },
    };

    /// The key tables of [`HostPolicy::GROUPS`], for reading a section.
    pub fn keys() -> [&'static [Key<HostPolicy>]; 9] {
        HostPolicy::GROUPS.map(|(_, keys)| keys)
    }
}

keys! {
    /// What one budget is kept for, and whether courtesy acts on it.
    pub struct BudgetScope in HostPolicy.scope as KEYS {
        /// What one budget is kept for: `"host"` (every `host:port`), `"domain"` (the registrable
        /// domain) or `"ip"` (the address courtesy connects to).
        ///
        ///   "host"   - every host:port has its own budget (default)
        ///   "domain" - one budget per registrable domain (Public Suffix List), port ignored:
        ///              a.shop.example.co.uk and b.shop.example.co.uk:8443 share "example.co.uk",
        ///              while alice.github.io and bob.github.io stay two sites
        ///   "ip"     - one budget per address courtesy connects to (DNS answer held for its TTL,
        ///              IPv4 first), port ignored: every name on one shared-hosting server shares it
        /// The rule matching the request's host decides. Everything kept per budget follows the
        /// key: rate, cooldowns, Crawl-delay caps (the strictest name's), blocks, metrics, /hosts
        /// (which lists the names sharing it), the state file and the shared store. The pacing
        /// keys of a shared budget come from the rule of the first name seen for it: give the
        /// names one rule.
        key: KeyMode = KeyMode::Host, from key: String, Word;
        /// Whether courtesy acts on what it decides; `false` is report-only (shadow) mode.
        ///
        /// Report-only: nothing waits and nothing is refused (no cooldown, robots rule, queue or
        /// skip_resources holds anything back); every request is forwarded at once, and what
        /// courtesy would have done is counted: /metrics courtesy_shadow_* series, "shadow" in
        /// /hosts, "(report-only)" in `courtesy status` and the dashboard. Feedback still moves
        /// the host's pacing, so the counts show what the enforced courtesy would do now. Try it
        /// on an existing crawl before letting courtesy act.
        enforce: bool = true, from enforce: bool, Flag;
    }
}

keys! {
    /// How fast requests leave for one host: the token bucket and the queue in front of it. The
    /// seed article's defaults: one request per second, one in flight.
    pub struct PacingSettings in HostPolicy.pacing as KEYS {
        /// Requests per second the host may receive (the token bucket's refill rate).
        rate: f64 = 1.0, from rate: f64, Rate { max: 1_000_000.0 };
        /// Requests that may leave back to back after an idle spell (the bucket's capacity).
        burst: u32 = 1, from burst: i64, Count { min: 1, max: 1_000_000 };
        /// Requests in flight to the host at once.
        concurrency: u32 = 1, from concurrency: i64, Count { min: 1, max: 1_000_000 };
        /// Each wait for a token is stretched by a random 0..jitter x 1/rate, never faster than
        /// `rate`.
        ///
        /// Like Scrapy's RANDOMIZE_DOWNLOAD_DELAY, but never faster than the budget.
        jitter: f64 = 0.0, from jitter: f64, between(0.0, 1.0);
        /// Requests that may wait for the host; the next one gets 503 + Retry-After at once
        /// (0: never wait).
        max_queue: usize = 1000, from max_queue: i64, Count { min: 0, max: 10_000_000 };
        /// A request that waited this long for its turn gets 503.
        max_wait: Duration = Duration::from_secs(300),
            from max_wait_seconds: f64, Seconds { min: 0.0, max: 86400.0 };
        /// A different rate inside a daily window, in the site's time zone (run backfills
        /// off-peak).
        off_peak: Option<OffPeak> = None, from off_peak: FileOffPeak, OffPeakWindow,
            example "{ hours = \"01:00-06:00\", timezone = \"Europe/Berlin\", rate = 5.0 }";
        /// Response bytes per second the host may send back; unset: no byte budget.
        ///
        /// Bytes are charged as each response streams (never slowed: the client reads at its
        /// own speed); once they exceed the budget, the host's NEXT turn waits until the debt
        /// is paid back at this rate (1 MiB at 262144 waits 4 s). With `rate`, the stricter
        /// wins. With [shared], one budget for all instances. Blind tunnels (https = "tunnel") and
        /// responses served from the store are not counted.
        max_bytes_per_second: Option<u64> = None,
            from max_bytes_per_second: i64, Maybe(Count { min: 1, max: 1 << 40 }),
            example "262144";
        /// The bytes an idle host saves up under max_bytes_per_second (a response up to this
        /// size makes nobody wait); unset: one second's worth (= max_bytes_per_second).
        max_bytes_burst: Option<u64> = None,
            from max_bytes_burst: i64, Maybe(Count { min: 0, max: 1 << 40 }),
            example "1048576";
    }
}

keys! {
    /// How the rate adapts to what the server says (see docs/reacting.md).
    pub struct Adaptive in HostPolicy.adaptive as KEYS {
        /// Adapt the rate to feedback between `min_rate` and `max_rate`; `rate` is where it
        /// starts.
        enabled: bool = false, from adaptive: bool, Flag;
        /// How the adaptive rate moves: `"cubic"` (the learned limit, the default) or `"aimd"`.
        ///
        ///   "cubic": the learned limit. A 429 teaches the rate the server allows (what it served
        ///           lately, and at least learned_margin below the rate that met it; a long
        ///           Retry-After lowers it); the rate resumes just below it, comes back to it on a
        ///           cubic curve over probe_after_seconds, then probes past it (slowly, then
        ///           doubling once 30 % past it: a limit that rose is found within seconds). A
        ///           limit that holds creeps up by at most learned_margin per probe, to where it
        ///           holds. Latency (smoothed) above slow_response_ms cuts the rate in
        ///           proportion; from 80 % of it the rate holds. The first 429 cuts by
        ///           decrease_factor; increase_step applies until then. A quota the server
        ///           announces (RateLimit-Policy, RateLimit-Limit, X-RateLimit-Limit) is the
        ///           learned limit at once, up or down, without a 429.
        ///   "aimd": 429/overload -> x decrease_factor, slow -> x slow_factor, healthy while the
        ///           budget was the bottleneck -> + increase_step; after a cooldown,
        ///           resume_factor x the rate.
        /// cubic is the default: it meets the adaptive targets where aimd does not
        /// (docs/reacting.md, "The adaptive rate: two controllers"; benches/ADAPTIVE_RESULTS.md).
        controller: Controller = Controller::Cubic, from controller: String, Word;
        /// cubic: how long after a cut the rate takes to come back to the learned limit before it
        /// probes past it: a limit that rose is found about this long (plus ~7 s) after it rose;
        /// each probe of a limit that held costs one 429.
        probe_after: Duration = Duration::from_secs(20),
            from probe_after_seconds: f64, Seconds { min: 0.1, max: 3600.0 };
        /// cubic: the learned limit is at least this far below the rate that met a 429 (0.03:
        /// 3 % below), this far under a quota the server announces, and a limit that held
        /// rises by at most this share per probe.
        learned_margin: f64 = 0.03, from learned_margin: f64, between(0.0, 0.5);
        /// The lowest rate adaptation or a cooldown may bring the host to.
        min_rate: f64 = 0.2, from min_rate: f64, between(1e-6, 1e6);
        /// The highest rate adaptation may reach, however healthy the host looks.
        max_rate: f64 = 5.0, from max_rate: f64, between(1e-6, 1e6);
        /// Rate multiplier on 429 and overload, once per wave of answers to requests in flight
        /// together (cubic: only the first 429, before it has learned anything).
        decrease_factor: f64 = 0.5, from decrease_factor: f64, between(0.01, 1.0);
        /// Rate multiplier when a response's headers take longer than `slow_response_ms` (aimd).
        slow_factor: f64 = 0.8, from slow_factor: f64, between(0.01, 1.0);
        /// Latency to response headers above which the host counts as straining.
        slow_response: Duration = Duration::from_millis(2000),
            from slow_response_ms: i64, Millis(Count { min: 1, max: 3_600_000 });
        /// Rate added per healthy response that had to wait for its turn (cubic: until its first
        /// 429).
        increase_step: f64 = 0.05, from increase_step: f64, between(0.0, 1e6);
    }
}

keys! {
    /// How the host cools down after 429s, overload and failures.
    pub struct CooldownSettings in HostPolicy.cooldown as KEYS {
        /// Statuses that mean "overloaded": back off (429 always means "throttled").
        backoff_statuses: Vec<u16> = vec![500, 502, 503, 504],
            from backoff_statuses: Vec<i64>, Statuses;
        /// The longest Retry-After (or RateLimit reset) honoured; longer ones are cut to this.
        max_retry_after: Duration = Duration::from_secs(600),
            from max_retry_after_seconds: f64, Seconds { min: 0.0, max: 7.0 * 86400.0 };
        /// The first cooldown when the host gave no Retry-After (and after connection failures).
        ///
        /// It doubles per wave up to backoff_max_seconds, +0..25 % jitter; a healthy response
        /// resets it.
        backoff_initial: Duration = Duration::from_secs(2),
            from backoff_initial_seconds: f64, Seconds { min: 0.001, max: 86400.0 };
        /// The longest cooldown without Retry-After.
        backoff_max: Duration = Duration::from_secs(300),
            from backoff_max_seconds: f64, Seconds { min: 0.001, max: 7.0 * 86400.0 };
        /// What requests get while the host cools down: `"auto"` (wait out a short window,
        /// a local 429 at once for a long one), `"hold"` (wait out any window) or `"reject"` (a
        /// local 429 at once).
        ///
        /// "auto" holds new and queued requests, in order, while the time left is at most
        /// max_hold_seconds, so that a crawler on its own defaults loses no page to a short
        /// cooldown, and answers a longer window with the local 429 (Retry-After = the time
        /// left) at once, so that no client hangs; "hold" keeps them queued until any window
        /// ends (up to max_wait_seconds, then the local 429); "reject" answers every request
        /// with the local 429 at once. A request's own Courtesy-On-Cooldown header (the same
        /// three words) wins over the host's.
        on_cooldown: OnCooldown = OnCooldown::Auto, from on_cooldown: String, Word;
        /// Under "auto", the longest cooldown a request is held through; a longer one is
        /// answered with the local 429 at once.
        ///
        /// 20 s: below the shortest timeout common clients keep on their defaults
        /// (Playwright's and Puppeteer's 30 s navigation timeout; Scrapy's is 180 s, aiohttp's
        /// 300 s, Crawlee's 60 s), with room for the turn after the window. courtesy's own
        /// retries (retry_idempotent) wait out a window only as long as this too.
        max_hold: Duration = Duration::from_secs(20),
            from max_hold_seconds: f64, Seconds { min: 0.0, max: 86400.0 };
        /// After a cooldown the rate resumes at this fraction of the rate before it, then climbs
        /// back.
        ///
        /// aimd, and hosts without adaptive; cubic resumes just below its learned limit.
        resume_factor: f64 = 0.5, from resume_factor: f64, between(0.01, 1.0);
        /// How often courtesy itself sends again a bodiless GET/HEAD/OPTIONS that got 429/503,
        /// after the cooldown it started (never any other method; 0: off).
        ///
        /// Four tries in all, as a careful crawler's own retry loop makes them. A retry waits
        /// out a window exactly where the request would be held through it (on_cooldown: up to
        /// max_hold_seconds under "auto", any under "hold", none under "reject"); otherwise, and
        /// for a 429/503 that is a challenge page, the origin's answer is passed on at once.
        /// Every answer says how many sends it took (Courtesy-Tries).
        retry_idempotent: u32 = 3, from retry_idempotent: i64, Count { min: 0, max: 10 };
    }
}

impl CooldownSettings {
    /// Whether a request whose own answer to a cooldown is `asked` (`None`: the host's
    /// `on_cooldown`) waits out one with `remaining` left, rather than getting the local 429 now.
    pub fn holds(&self, asked: Option<OnCooldown>, remaining: Duration) -> bool {
        asked
            .unwrap_or(self.on_cooldown)
            .holds(remaining, self.max_hold)
    }
}

keys! {
    /// robots.txt (see docs/robots-blocks-cache.md).
    pub struct Robots in HostPolicy.robots as KEYS {
        /// Fetch robots.txt once per host and obey it: a disallowed path gets a local 403;
        /// Crawl-delay caps the rate.
        ///
        /// Fetched through the host's budget and cached 24 h. 4xx = everything allowed; 5xx, 429
        /// or unreachable = everything disallowed until a retry 60 s later.
        obey: bool = true, from obey_robots: bool, Flag;
        /// The robots.txt group to obey; empty: the product token of the client's User-Agent
        /// ("python-requests/2.31" -> "python-requests"), falling back to "*".
        user_agent: Option<String> = None, from robots_user_agent: String, Agent;
        /// A cap on the Crawl-delay (and Request-rate interval) honoured; unset (the default):
        /// every delay robots.txt asks for is honoured, whatever its length.
        ///
        /// A cap is an operator's explicit choice to ask faster than the site asked: a capped
        /// host paces at this, logs a warning and says so in /hosts ("crawl_delay").
        max_crawl_delay: Option<Duration> = None,
            from max_crawl_delay_seconds: f64, Maybe(Seconds { min: 0.001, max: 86400.0 });
        /// While robots.txt cannot be read again (5xx, 429, unreachable), its last good rules
        /// stay in force for up to this many days since they were read (0: disallow at once).
        ///
        /// RFC 9309 2.4 lets a crawler keep its cached copy while the file is unreachable; one
        /// 503 on robots.txt no longer stops a crawl that was allowed. A host that never had a
        /// good copy stays disallowed until one is read.
        keep_on_failure: Duration = Duration::from_secs(7 * 86400),
            from robots_keep_on_failure_days: f64, Days { min: 0.0, max: 30.0 };
    }
}

keys! {
    /// Challenge pages, 403 walls, and the resources not fetched at all.
    pub struct BlockSettings in HostPolicy.blocks as KEYS {
        /// How much of a text response is scanned for block markers as it streams (of a gzip,
        /// deflate, br or zstd one: a copy of its first bytes, decoded on the side).
        scan_bytes: usize = 64 * 1024,
            from block_scan_bytes: i64, Count { min: 0, max: 16 * 1024 * 1024 };
        /// Strings that mark a challenge or block page (matched case-insensitively). They count on
        /// a 403, 405, 429 or 503, or on a page of at most 32 KiB; a match pauses the host.
        ///
        /// A marker in a large page with another status (a 200 product page) is not a block: the
        /// defaults only match interstitials, never a captcha widget embedded in a real page.
        /// A marker that starts with / is a path: a redirect is a block when its Location is the
        /// host's own name with a path that starts with the marker, or, while /sorry/index is a
        /// marker, Google's /sorry/ on Google's hosts redirected to from one of them; never a
        /// marker in a query string, further along a path or on another host.
        markers: Arc<BlockMarkers> = default_markers(), from block_markers: Vec<String>, Markers;
        /// The longest pause for a detected block (a challenge, or hard_block_after 403s in a
        /// row): repeated blocks double the pause up to this.
        ///
        /// Block pauses are remembered until a whole block_pause_seconds has gone by after the
        /// last one ended; then the next block pauses for block_first_pause_seconds again.
        /// `POST /hosts/<host>/resume` lifts a block pause and forgets its repeats.
        pause: Duration = Duration::from_secs(3600),
            from block_pause_seconds: f64, Seconds { min: 1.0, max: 30.0 * 86400.0 };
        /// How long a host's first detected block pauses it (each repeat doubles it, up to
        /// block_pause_seconds): one false signal costs a minute, not an hour.
        first_pause: Duration = Duration::from_secs(60),
            from block_first_pause_seconds: f64, Seconds { min: 1.0, max: 30.0 * 86400.0 };
        /// After a block pause, the rate resumes at this fraction of the rate before it.
        resume_factor: f64 = 0.25, from block_resume_factor: f64, between(0.01, 1.0);
        /// This many 403s in a row count as a hard block (0: never).
        hard_block_after: u32 = 5, from hard_block_after: i64, Count { min: 0, max: 1000 };
        /// Kinds of sub-resources answered locally with 403 instead of fetched: "image", "font",
        /// "script", "stylesheet", "media" (by path extension, else by Accept).
        skip_resources: Vec<ResourceKind> = Vec::new(), from skip_resources: Vec<String>, Resources;
    }
}

keys! {
    /// How a request leaves: what a CONNECT becomes, the response store, a parent proxy.
    pub struct Forward in HostPolicy.forward as KEYS {
        /// What a CONNECT (HTTPS_PROXY) becomes: `"intercept"` (terminate TLS and pace each
        /// request) or `"tunnel"` (copy bytes, pace connections).
        ///
        /// "intercept": courtesy terminates TLS with its local CA (see `courtesy ca`) and paces
        /// every request inside. "tunnel": bytes are copied blindly; the CONNECT takes one turn
        /// and holds one concurrency slot for the tunnel's life, which paces connections, not
        /// requests. Plain HTTP inside a CONNECT is paced per request either way.
        https: HttpsMode = HttpsMode::Intercept, from https: String, Word;
        /// Stored GET responses: `"http"` (RFC 9111 as a shared cache), `"off"`,
        /// `"revalidate"` (conditional repeats, a 304 answered from the store) or `"dev"`
        /// (repeats served from the store).
        ///
        /// "http" serves a fresh stored answer (max-age, s-maxage, Expires) without asking the
        /// origin, revalidates a stale one, answers a client's matching validators with a local
        /// 304, and honours no-store, private, Authorization, cookies and Vary; a client's
        /// no-cache or max-age=0 always reaches the origin. "revalidate" stores responses with
        /// ETag/Last-Modified, revalidates every repeat with If-None-Match/If-Modified-Since and
        /// answers a 304 from the store as the full 200; "dev" answers repeats from the store
        /// without asking the origin, for developing parsers.
        cache: CacheMode = CacheMode::Http, from cache: String, Word;
        /// Under `cache = "http"`, a freshness guessed from `Last-Modified` (a tenth of its age,
        /// at most a day) for answers that state none.
        ///
        /// Off by default: a crawler that polls a page for changes must see them, and an answer
        /// without a stated freshness is the origin saying nothing. RFC 9111 4.2.2 allows it.
        heuristic_freshness: bool = false, from heuristic_freshness: bool, Flag;
        /// Within this many seconds of a stored answer, a repeat of its URL is answered from the
        /// store even when the answer is stale (0: never).
        ///
        /// For crawls that revisit the same URLs too often: the site sees each URL at most once
        /// in this time. An answer marked no-store or private is never stored, so its repeats
        /// still go to the origin; a client's no-cache or max-age=0 still reaches it.
        min_refetch: Duration = Duration::ZERO,
            from min_refetch_seconds: f64, Seconds { min: 0.0, max: 30.0 * 86400.0 };
        /// Identical bodiless GET and HEAD requests in flight at once become one origin request,
        /// and every waiter gets its answer.
        ///
        /// Requests are identical when their URL, the credentials and cookies they carry and the
        /// headers answers commonly vary on (Accept, Accept-Encoding, Accept-Language) are the
        /// same. An answer marked private, no-store or setting a cookie is not shared: the others
        /// then ask for themselves. A waiter waits at most `[proxy] response_timeout_seconds`.
        coalesce: bool = true, from coalesce: bool, Flag;
        /// The longest the origin may stay silent: no byte of the response for this long ends
        /// the exchange (like nginx's proxy_read_timeout).
        ///
        /// Measured between reads, not over the whole response: a body that keeps dripping
        /// bytes lives on, one silent for this long is cut. Before the response head the wait
        /// is also capped by `[proxy] response_timeout_seconds` and answered 504 (Proxy-Status
        /// http_response_timeout); after the head the body is closed unfinished, so the client
        /// sees a truncated response. Either way the host's slot and the global one are freed at
        /// once and the host's pacing hears a timeout failure (its slowness, not the client's).
        read_timeout: Duration = Duration::from_secs(60),
            from read_timeout_seconds: f64, Seconds { min: 0.001, max: 86400.0 };
        /// HTTP/2 to `https://` origins: `"auto"` (offer `h2` and `http/1.1` by ALPN, use what
        /// the origin picks) or `"off"` (HTTP/1.1 only).
        ///
        /// Over h2 one connection carries the host's requests as streams; `concurrency` still
        /// counts requests, and the origin's SETTINGS_MAX_CONCURRENT_STREAMS caps them on the
        /// wire. A 421 (Misdirected Request) or an HTTP/2 protocol error turns the host to
        /// HTTP/1.1 while courtesy knows it (until it is forgotten or courtesy restarts); the
        /// request that met it is sent again over HTTP/1.1 when it can be. GOAWAY and
        /// REFUSED_STREAM count as overload (like a 503 without Retry-After). Through a parent
        /// proxy's tunnel too; `http://` origins always get HTTP/1.1. See docs/https.md.
        http2: UpstreamHttp2 = UpstreamHttp2::Auto, from upstream_http2: String, Word;
    }
    also {
        /// Where this host's requests leave: straight to it, or through a parent proxy
        /// (`upstream_proxy`, from the host's rule, else `[proxy]`). Pacing is the target's
        /// either way.
        upstream: Route = Route::Direct;
    }
}

keys! {
    /// What courtesy stamps on the requests to a host, so that the site knows who crawls it
    /// (the SEC, Nominatim and Wikimedia turn away tools that do not say).
    pub struct Identity in HostPolicy.identity as KEYS {
        /// The User-Agent of every request to the host, over the client's and its job's; unset:
        /// the job's, else the client's. robots.txt is obeyed for the group it names.
        user_agent: Option<String> = None, from user_agent: String, Maybe(HeaderText),
            example "\"shop-monitor/2.1 (+https://example.org/bot)\"";
        /// The From header of every request to the host (RFC 9110 10.1.2: a mailbox to write to
        /// about the crawl), over the client's and its job's.
        from: Option<String> = None, from from: String, Maybe(HeaderText),
            example "\"ops@example.org\"";
        /// Whether the requests to the host are signed when [signing] (or their job) has a key;
        /// `false`: never signed (docs/identity.md).
        sign: bool = true, from sign: bool, Flag;
    }
}

keys! {
    /// What sites say about the use of their content, and what a request is for.
    pub struct Preferences in HostPolicy.preferences as KEYS {
        /// The purpose of requests whose job names none (anonymous traffic, or a job without
        /// `purpose`): `"search"`, `"ai-input"` or `"ai-train"`; unset: nothing is checked.
        purpose: Option<Purpose> = None, from purpose: String, Maybe(Word),
            example "\"search\"";
        /// What a site's refusal of a request's purpose does: `"enforce"` (a local 403, never
        /// sent), `"report"` (forwarded, the signal named in Courtesy-Content-Preference) or
        /// `"off"` (nothing read).
        ///
        /// Under "enforce" and "report", robots.txt is fetched for a request with a purpose even
        /// where obey_robots = false (its Disallow lines are then not obeyed). Refusals are
        /// counted in /metrics (courtesy_content_preference_total) and /jobs.
        content_preferences: ContentPreferences = ContentPreferences::Report,
            from content_preferences: String, Word;
    }
}

/// The markers courtesy knows by default.
fn default_markers() -> Arc<BlockMarkers> {
    let markers = DEFAULT_BLOCK_MARKERS
        .iter()
        .map(|m| m.to_string())
        .collect();
    Arc::new(BlockMarkers::new(markers))
}

/// One `[[host]]` rule after validation.
#[derive(Debug, Clone)]
pub struct HostRule {
    /// 1-based position in its file, as users count them.
    pub number: usize,
    /// The file that holds it: the config file, or a file it includes.
    pub source: Arc<str>,
    /// What the rule matches.
    pub pattern: HostPattern,
    /// The policy a matching host gets.
    pub policy: Arc<HostPolicy>,
}
