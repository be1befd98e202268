//! robots.txt (RFC 9309): one fetch per host, shared by every client; rules parsed by the
//! texting_robots crate, the preference lines it drops by `pacing/preferences`; answers cached
//! for a day.
//!
//! This module owns the cache and the decisions: whether a request must wait for a fetch, who
//! fetches, what an answer means (2xx: rules, kept as the file's own `Cache-Control` says, never
//! longer than a day; 4xx: everything allowed; 5xx, 429 or unreachable: the last good rules while
//! they are younger than the host's `robots_keep_on_failure_days`, else everything disallowed until
//! a retry), and which group a client's User-Agent falls in. Known rules keep answering while one
//! request fetches them again, so a refresh holds no one up. The fetch
//! itself (through the host's budget, redirects, the 500 KiB cap) is the proxy's (`proxy/refuse/robots.rs`),
//! since it is an upstream request like any other.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dashmap::DashMap;
use texting_robots::Robot;
use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::warn;

use crate::config::Purpose;
use crate::pacing::preferences::{Refused, RobotsPreferences};
use crate::pacing::robots_pacing::{longest, RobotsPacing, VisitWindow};
use crate::util::locks::lock;

/// How long a fetched robots.txt (or a 4xx) is trusted at most, and when its answer says nothing
/// of its own freshness (RFC 9309 2.4).
pub(crate) const CACHE_FOR: Duration = Duration::from_secs(24 * 3600);
/// The shortest time a robots.txt is kept, even when it says `no-cache` or `max-age=0`: at most
/// one fetch of it in this time, out of the host's budget.
pub(crate) const MIN_KEEP: Duration = Duration::from_secs(5);
/// How long "everything disallowed" lasts after a 5xx, 429 or failure before courtesy retries.
pub(crate) const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(60);
/// The most of a robots.txt that is read (RFC 9309 asks parsers for at least 500 KiB).
pub(crate) const MAX_BYTES: usize = 500 * 1024;
/// Redirects followed when fetching robots.txt.
pub(crate) const MAX_REDIRECTS: usize = 5;
/// Distinct user-agent groups parsed per host (the rest fall back to `*`).
const MAX_AGENTS: usize = 16;

/// How long a robots.txt whose answer gave it `lifetime` of freshness (`None`: it said nothing)
/// is kept: that, between [`MIN_KEEP`] and [`CACHE_FOR`].
pub(crate) fn keep_for(lifetime: Option<Duration>) -> Duration {
    lifetime.map_or(CACHE_FOR, |l| l.clamp(MIN_KEEP, CACHE_FOR))
}

/// What a fetch of robots.txt came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fetched {
    /// A 2xx with this body (at most [`MAX_BYTES`]), kept this long ([`keep_for`]).
    Rules(Vec<u8>, Duration),
    /// A 4xx: there are no rules.
    Unavailable(u16),
    /// A 5xx, a 429, too many redirects or no answer: everything is disallowed for now.
    Unreachable(String),
}

/// What a robots.txt body asks of the client in `agent`'s group, as `robots_fetched` tells it:
/// whether it disallows anything at all (a `Disallow` line whose path the group does not allow),
/// and the seconds between requests it asks for (the longer of `Crawl-delay` and the interval
/// of `Request-rate`), if any.
pub(crate) fn summary(txt: &[u8], agent: &str) -> (bool, Option<f64>) {
    let agent = agent.to_ascii_lowercase();
    let Ok(robot) = Robot::new(&agent, txt) else {
        // An unparsable file is no rules (as `AgentRules::verdict` treats it).
        return (false, None);
    };
    let disallows_any = String::from_utf8_lossy(txt).lines().any(|line| {
        let line = line.split('#').next().unwrap_or("").trim();
        let Some((field, value)) = line.split_once(':') else {
            return false;
        };
        let path: String = value
            .trim()
            .chars()
            .take_while(|c| *c != '*' && *c != '$')
            .collect();
        field.trim().eq_ignore_ascii_case("disallow")
            && !value.trim().is_empty()
            && !robot.allowed(if path.is_empty() { "/" } else { &path })
    });
    let pacing = RobotsPreferences::parse(txt).pacing(&agent);
    let delay = longest(robot.delay.map(f64::from), pacing.request_interval);
    (disallows_any, delay)
}

/// The verdict for one request.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Verdict {
    /// Go ahead, no faster than the group asks.
    Allowed {
        /// The seconds between requests the group asks for: the longer of its `Crawl-delay` and
        /// its `Request-rate`'s interval.
        crawl_delay: Option<f64>,
        /// The group's `Visit-time` window (UTC), if any: outside it the host waits.
        visit: Option<VisitWindow>,
    },
    /// robots.txt disallows it, or could not be read.
    Disallowed {
        /// Why, for `Proxy-Status`.
        reason: String,
    },
}

/// What a request must do about robots.txt.
pub(crate) enum Step {
    /// The rules are known.
    Known(Verdict),
    /// Nobody is fetching and the rules are unknown or stale: this caller fetches, then calls
    /// [`FetchGuard::finish`]. Dropping the guard unfinished lets another caller fetch.
    Fetch(FetchGuard),
    /// Another request is fetching: await this, then ask again. It was made before the state was
    /// read, so the end of the fetch cannot slip past it.
    Wait(tokio::sync::futures::OwnedNotified),
}

#[derive(Debug)]
enum State {
    Unknown,
    Fetching,
    Rules {
        txt: Arc<Vec<u8>>,
        /// Each group asked for so far: its rules, and the pacing its lines ask for.
        robots: HashMap<String, Arc<AgentRules>>,
        /// The preference lines (Content-Signal, Content-Usage), read once.
        preferences: Arc<RobotsPreferences>,
        until: Instant,
        /// When these rules were last read from the site (a failed refresh keeps them while
        /// they are younger than the host's bound).
        read_at: Instant,
        /// One request is fetching the file again; the others are answered from these rules.
        refreshing: bool,
        /// Kept past a failed refresh, until then at the latest (the sweep keeps them too).
        kept_until: Option<Instant>,
    },
    AllowAll {
        until: Instant,
    },
    DisallowAll {
        why: String,
        until: Instant,
    },
}

/// One group's rules as a client falls in it.
#[derive(Debug)]
struct AgentRules {
    /// The Allow and Disallow lines and the Crawl-delay (`None`: the file did not parse).
    robot: Option<Robot>,
    /// The group's `Request-rate` and `Visit-time`.
    pacing: RobotsPacing,
}

impl AgentRules {
    /// The verdict for `path`.
    fn verdict(&self, agent: &str, path: &str) -> Verdict {
        let Some(robot) = &self.robot else {
            // An unparsable file is treated as no rules, as browsers and big crawlers do.
            return Verdict::Allowed {
                crawl_delay: None,
                visit: None,
            };
        };
        if !robot.allowed(path) {
            return Verdict::Disallowed {
                reason: format!("robots.txt disallows {path} for user-agent {agent:?}"),
            };
        }
        Verdict::Allowed {
            crawl_delay: longest(robot.delay.map(f64::from), self.pacing.request_interval),
            visit: self.pacing.visit,
        }
    }
}

#[derive(Debug)]
struct Entry {
    state: Mutex<State>,
    done: Arc<Notify>,
}

/// The robots.txt cache of every host (key: scheme and `host:port`).
#[derive(Debug, Default)]
pub(crate) struct RobotsCache {
    entries: DashMap<String, Arc<Entry>>,
    /// Whether any robots.txt read so far named a licence: until one does, answers are not
    /// looked up for one (the common case costs one load).
    any_licenses: Arc<AtomicBool>,
}

/// The right and duty to fetch one host's robots.txt.
pub(crate) struct FetchGuard {
    entry: Arc<Entry>,
    finished: bool,
    /// The cache's "some robots.txt names a licence", set when this one does.
    any_licenses: Arc<AtomicBool>,
}

impl FetchGuard {
    /// Records what the fetch came to and wakes every waiting request. A failure (5xx, 429,
    /// unreachable) after good rules keeps those rules while they were read less than
    /// `keep_on_failure` ago (RFC 9309 2.4), and asks again after [`RETRY_AFTER_FAILURE`].
    pub(crate) fn finish(mut self, fetched: Fetched, keep_on_failure: Duration) {
        let now = Instant::now();
        let entry = self.entry.clone();
        let mut state = lock(&entry.state);
        let next = match fetched {
            Fetched::Rules(txt, keep) => {
                let preferences = RobotsPreferences::parse(&txt);
                if !preferences.licenses().is_empty() {
                    self.any_licenses.store(true, Ordering::Release);
                }
                State::Rules {
                    preferences: Arc::new(preferences),
                    txt: Arc::new(txt),
                    robots: HashMap::new(),
                    until: now + keep,
                    read_at: now,
                    refreshing: false,
                    kept_until: None,
                }
            }
            Fetched::Unavailable(_) => State::AllowAll {
                until: now + CACHE_FOR,
            },
            Fetched::Unreachable(why) if kept(&mut state, keep_on_failure, now) => {
                warn!(%why, "robots.txt could not be read again; its last good rules stay in force");
                self.finish_with(state, None);
                return;
            }
            Fetched::Unreachable(why) => State::DisallowAll {
                why,
                until: now + RETRY_AFTER_FAILURE,
            },
        };
        self.finish_with(state, Some(next));
    }

    /// Puts `next` in place (if any), marks the fetch done and wakes every waiting request.
    fn finish_with(&mut self, mut state: std::sync::MutexGuard<'_, State>, next: Option<State>) {
        if let Some(next) = next {
            *state = next;
        }
        drop(state);
        self.finished = true;
        self.entry.done.notify_waiters();
    }
}

/// Keeps the rules in `state` past a failed refresh, if they were read less than `bound` ago:
/// they answer until the next try, [`RETRY_AFTER_FAILURE`] from `now`.
fn kept(state: &mut State, bound: Duration, now: Instant) -> bool {
    let State::Rules {
        until,
        read_at,
        refreshing,
        kept_until,
        ..
    } = state
    else {
        return false;
    };
    let last = *read_at + bound;
    if last <= now {
        return false;
    }
    *until = (now + RETRY_AFTER_FAILURE).min(last);
    *refreshing = false;
    *kept_until = Some(last);
    true
}

impl Drop for FetchGuard {
    fn drop(&mut self) {
        if !self.finished {
            // The fetching request went away: let the next one try (known rules keep answering).
            let mut state = lock(&self.entry.state);
            match &mut *state {
                State::Rules { refreshing, .. } => *refreshing = false,
                other => *other = State::Unknown,
            }
            drop(state);
            self.entry.done.notify_waiters();
        }
    }
}

impl RobotsCache {
    /// An empty cache.
    pub(crate) fn new() -> Self {
        RobotsCache::default()
    }

    /// What a request for `path` (path and query) by `agent` to the host `key` must do.
    pub(crate) fn step(&self, key: &str, agent: &str, path: &str) -> Step {
        // The common case (a known host) takes a shard read lock and allocates nothing.
        let found = self.entries.get(key).map(|e| e.value().clone());
        let entry = found.unwrap_or_else(|| {
            self.entries
                .entry(key.to_string())
                .or_insert_with(|| {
                    Arc::new(Entry {
                        state: Mutex::new(State::Unknown),
                        done: Arc::new(Notify::new()),
                    })
                })
                .value()
                .clone()
        });
        let now = Instant::now();
        let mut state = lock(&entry.state);
        let stale = match &mut *state {
            State::Unknown => true,
            State::Fetching => false,
            State::Rules {
                until, refreshing, ..
            } => {
                // Known rules go on answering while one request fetches them again.
                let refresh = *until <= now && !*refreshing;
                if refresh {
                    *refreshing = true;
                    drop(state);
                    return Step::Fetch(self.guard(entry));
                }
                false
            }
            State::AllowAll { until, .. } | State::DisallowAll { until, .. } => *until <= now,
        };
        if stale {
            *state = State::Fetching;
            drop(state);
            return Step::Fetch(self.guard(entry));
        }
        match verdict_in(&mut state, agent, path) {
            Some(verdict) => Step::Known(verdict),
            None => Step::Wait(entry.done.clone().notified_owned()),
        }
    }

    /// What the robots.txt known for `key` says of `path` for `agent`, without fetching it or
    /// waiting for a fetch (`/v1/check?fetch=false`, and a batch's later URLs): `None` while it
    /// is unknown, being fetched for the first time, or its "all allowed" or "all disallowed"
    /// answer has run out (a request would fetch it again). Rules past their time still answer,
    /// as they do for requests while one fetches them again.
    pub(crate) fn known(&self, key: &str, agent: &str, path: &str) -> Option<Verdict> {
        let entry = self.entries.get(key).map(|e| e.value().clone())?;
        let mut state = lock(&entry.state);
        let expired = match &*state {
            State::AllowAll { until } | State::DisallowAll { until, .. } => {
                *until <= Instant::now()
            }
            _ => false,
        };
        if expired {
            return None;
        }
        verdict_in(&mut state, agent, path)
    }

    /// Whether the robots.txt of `key` could not be read (a 5xx, a 429 or no answer) and
    /// everything is disallowed until a retry: what `/v1/check` calls `unreachable`.
    pub(crate) fn unreachable(&self, key: &str) -> bool {
        let Some(entry) = self.entries.get(key).map(|e| e.value().clone()) else {
            return false;
        };
        let state = lock(&entry.state);
        matches!(*state, State::DisallowAll { .. })
    }

    /// The right to fetch `entry`'s robots.txt, given to one request.
    fn guard(&self, entry: Arc<Entry>) -> FetchGuard {
        FetchGuard {
            entry,
            finished: false,
            any_licenses: self.any_licenses.clone(),
        }
    }
}

impl RobotsCache {
    /// The refusal of `purpose` for `path` that the robots.txt of `key` states for `agent`'s group
    /// (Content-Signal, Content-Usage), if its rules are known (ask [`RobotsCache::step`] first).
    pub(crate) fn preference_refusal(
        &self,
        key: &str,
        agent: &str,
        path: &str,
        purpose: Purpose,
    ) -> Option<Refused> {
        let entry = self.entries.get(key).map(|e| e.value().clone())?;
        let preferences = match &*lock(&entry.state) {
            State::Rules { preferences, .. } => preferences.clone(),
            _ => return None,
        };
        preferences.refusal(agent, purpose, path)
    }

    /// Whether any robots.txt read so far named a licence (one load: answers are looked up for
    /// licences only once one has).
    pub(crate) fn any_licensed(&self) -> bool {
        self.any_licenses.load(Ordering::Acquire)
    }

    /// The licences (RSL 1.0 `License:` lines) of the robots.txt known for the origin `key`
    /// (`scheme://host:port`); empty when it names none or is not known.
    pub(crate) fn licenses(&self, key: &str) -> Vec<String> {
        if !self.any_licensed() {
            return Vec::new();
        }
        let Some(entry) = self.entries.get(key).map(|e| e.value().clone()) else {
            return Vec::new();
        };
        let preferences = match &*lock(&entry.state) {
            State::Rules { preferences, .. } => preferences.clone(),
            _ => return Vec::new(),
        };
        preferences.licenses().to_vec()
    }

    /// Forgets entries whose answer has expired (they would be fetched again anyway), so that the
    /// cache follows the hosts in use. Returns how many were dropped.
    pub(crate) fn sweep(&self) -> usize {
        let now = Instant::now();
        let before = self.entries.len();
        self.entries.retain(|_, entry| match &*lock(&entry.state) {
            State::Fetching => true,
            State::Unknown => false,
            State::Rules {
                until, kept_until, ..
            } => *until > now || kept_until.is_some_and(|last| last > now),
            State::AllowAll { until } | State::DisallowAll { until, .. } => *until > now,
        });
        before - self.entries.len()
    }

    /// Whether no host has an entry (tests check that a sweep empties the cache).
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The verdict `state` gives `path` for `agent`, its group's rules parsed on first use (at most
/// [`MAX_AGENTS`] groups kept); `None` while nothing is known (unknown, or being fetched).
fn verdict_in(state: &mut State, agent: &str, path: &str) -> Option<Verdict> {
    match state {
        State::Unknown | State::Fetching => None,
        State::AllowAll { .. } => Some(Verdict::Allowed {
            crawl_delay: None,
            visit: None,
        }),
        State::DisallowAll { why, .. } => Some(Verdict::Disallowed {
            reason: format!(
                "robots.txt could not be read ({why}); everything is disallowed until a retry"
            ),
        }),
        State::Rules {
            txt,
            robots,
            preferences,
            ..
        } => {
            let agent = agent.to_ascii_lowercase();
            let rules = match robots.get(&agent) {
                Some(rules) => rules.clone(),
                None => {
                    let rules = Arc::new(AgentRules {
                        robot: Robot::new(&agent, txt).ok(),
                        pacing: preferences.pacing(&agent),
                    });
                    if robots.len() < MAX_AGENTS {
                        robots.insert(agent.clone(), rules.clone());
                    }
                    rules
                }
            };
            Some(rules.verdict(&agent, path))
        }
    }
}

/// The robots.txt group for a client: `configured` if set, else the product token of its
/// User-Agent (`python-requests/2.31` → `python-requests`), else `*`.
pub(crate) fn agent_for<'a>(configured: Option<&'a str>, user_agent: Option<&'a str>) -> &'a str {
    if let Some(agent) = configured {
        return agent;
    }
    user_agent
        .and_then(|ua| ua.split_whitespace().next())
        .map(|token| token.split('/').next().unwrap_or(token))
        .filter(|t| !t.is_empty())
        .unwrap_or("*")
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Duration = Duration::from_secs(86_400);

    fn known(step: Step) -> Verdict {
        match step {
            Step::Known(v) => v,
            Step::Fetch(_) => panic!("expected a verdict, got Fetch"),
            Step::Wait(_) => panic!("expected a verdict, got Wait"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn one_fetch_then_rules_for_everyone() {
        let cache = RobotsCache::new();
        let Step::Fetch(guard) = cache.step("http://a.test:80", "bot", "/x") else {
            panic!("the first request fetches");
        };
        assert!(matches!(
            cache.step("http://a.test:80", "bot", "/y"),
            Step::Wait(_)
        ));
        guard.finish(
            Fetched::Rules(
                b"User-agent: *\nDisallow: /private\nCrawl-delay: 2\n\nUser-agent: special\nDisallow: /\n".to_vec(),
                CACHE_FOR,
            ),
            DAY,
        );
        assert_eq!(
            known(cache.step("http://a.test:80", "bot", "/page")),
            Verdict::Allowed {
                crawl_delay: Some(2.0),
                visit: None,
            }
        );
        assert!(matches!(
            known(cache.step("http://a.test:80", "bot", "/private/1")),
            Verdict::Disallowed { .. }
        ));
        assert!(matches!(
            known(cache.step("http://a.test:80", "Special", "/page")),
            Verdict::Disallowed { .. }
        ));
        // A day later it is forgotten, then fetched again.
        tokio::time::sleep(CACHE_FOR).await;
        assert_eq!(cache.sweep(), 1);
        assert!(cache.is_empty());
        assert!(matches!(
            cache.step("http://a.test:80", "bot", "/x"),
            Step::Fetch(_)
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_4xx_allows_and_a_5xx_disallows_until_a_retry() {
        let cache = RobotsCache::new();
        let Step::Fetch(g) = cache.step("k1", "bot", "/") else {
            panic!()
        };
        g.finish(Fetched::Unavailable(404), DAY);
        assert_eq!(
            known(cache.step("k1", "bot", "/any")),
            Verdict::Allowed {
                crawl_delay: None,
                visit: None
            }
        );
        let Step::Fetch(g) = cache.step("k2", "bot", "/") else {
            panic!()
        };
        g.finish(Fetched::Unreachable("500".into()), DAY);
        assert!(matches!(
            known(cache.step("k2", "bot", "/any")),
            Verdict::Disallowed { .. }
        ));
        tokio::time::sleep(RETRY_AFTER_FAILURE).await;
        assert!(matches!(cache.step("k2", "bot", "/any"), Step::Fetch(_)));
    }

    #[tokio::test(start_paused = true)]
    async fn an_abandoned_fetch_lets_the_next_request_fetch() {
        let cache = RobotsCache::new();
        let Step::Fetch(g) = cache.step("k", "bot", "/") else {
            panic!()
        };
        let Step::Wait(woken) = cache.step("k", "bot", "/") else {
            panic!()
        };
        drop(g);
        woken.await;
        assert!(matches!(cache.step("k", "bot", "/"), Step::Fetch(_)));
    }

    #[tokio::test(start_paused = true)]
    async fn rules_are_kept_as_long_as_the_file_says_and_refreshed_without_holding_anyone() {
        let cache = RobotsCache::new();
        let Step::Fetch(g) = cache.step("k", "bot", "/") else {
            panic!()
        };
        let txt = b"User-agent: *\nDisallow: /private\nCrawl-delay: 2\nRequest-rate: 1/10\nVisit-time: 0600-0845\n";
        g.finish(
            Fetched::Rules(txt.to_vec(), keep_for(Some(Duration::from_secs(5)))),
            DAY,
        );
        let slowest = Verdict::Allowed {
            crawl_delay: Some(10.0),
            visit: VisitWindow::parse("0600-0845"),
        };
        assert_eq!(known(cache.step("k", "bot", "/a")), slowest);
        tokio::time::sleep(Duration::from_secs(4)).await;
        assert_eq!(known(cache.step("k", "bot", "/a")), slowest);
        tokio::time::sleep(Duration::from_secs(1)).await;
        // Stale: one request fetches again; the others go on with the rules known.
        let Step::Fetch(refresh) = cache.step("k", "bot", "/a") else {
            panic!("a stale robots.txt is fetched again")
        };
        assert_eq!(known(cache.step("k", "bot", "/b")), slowest);
        assert!(matches!(
            known(cache.step("k", "bot", "/private")),
            Verdict::Disallowed { .. }
        ));
        // An abandoned refresh lets the next request try, the rules still answering.
        drop(refresh);
        let Step::Fetch(refresh) = cache.step("k", "bot", "/a") else {
            panic!()
        };
        refresh.finish(
            Fetched::Rules(b"User-agent: *\nDisallow: /\n".to_vec(), CACHE_FOR),
            DAY,
        );
        assert!(matches!(
            known(cache.step("k", "bot", "/a")),
            Verdict::Disallowed { .. }
        ));
    }

    #[test]
    fn a_robots_txt_is_kept_between_five_seconds_and_a_day() {
        assert_eq!(keep_for(None), CACHE_FOR);
        assert_eq!(keep_for(Some(Duration::ZERO)), MIN_KEEP);
        assert_eq!(
            keep_for(Some(Duration::from_secs(60))),
            Duration::from_secs(60)
        );
        assert_eq!(keep_for(Some(Duration::from_secs(7 * 86400))), CACHE_FOR);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_refresh_keeps_the_last_good_rules_up_to_the_bound() {
        let cache = RobotsCache::new();
        let Step::Fetch(g) = cache.step("k", "bot", "/") else {
            panic!()
        };
        let minute = Duration::from_secs(60);
        g.finish(
            Fetched::Rules(b"User-agent: *\nDisallow: /private\n".to_vec(), minute),
            DAY,
        );
        let mut failures = 0;
        let allowed = |cache: &RobotsCache| {
            matches!(
                known(cache.step("k", "bot", "/page")),
                Verdict::Allowed { .. }
            )
        };
        loop {
            tokio::time::sleep(RETRY_AFTER_FAILURE.max(minute)).await;
            match cache.step("k", "bot", "/page") {
                Step::Fetch(g) => g.finish(Fetched::Unreachable("503".into()), DAY),
                Step::Known(Verdict::Disallowed { .. }) => break,
                Step::Known(Verdict::Allowed { .. }) | Step::Wait(_) => {
                    panic!("a stale robots.txt is fetched again")
                }
            }
            if !allowed(&cache) {
                break;
            }
            failures += 1;
            // The sweep keeps rules that are in force past a failure.
            cache.sweep();
            assert!(!cache.is_empty());
        }
        // Kept for a day of failed retries (one a minute), then everything is disallowed.
        assert_eq!(failures, 24 * 60 - 1);
        assert!(!allowed(&cache));
        // A host that never had good rules is disallowed at once.
        let Step::Fetch(g) = cache.step("new", "bot", "/") else {
            panic!()
        };
        g.finish(Fetched::Unreachable("503".into()), DAY);
        assert!(matches!(
            known(cache.step("new", "bot", "/")),
            Verdict::Disallowed { .. }
        ));
        // A bound of zero disallows at once too.
        let Step::Fetch(g) = cache.step("zero", "bot", "/") else {
            panic!()
        };
        g.finish(
            Fetched::Rules(b"User-agent: *\nAllow: /\n".to_vec(), minute),
            Duration::ZERO,
        );
        tokio::time::sleep(minute).await;
        let Step::Fetch(g) = cache.step("zero", "bot", "/") else {
            panic!()
        };
        g.finish(Fetched::Unreachable("503".into()), Duration::ZERO);
        assert!(matches!(
            known(cache.step("zero", "bot", "/")),
            Verdict::Disallowed { .. }
        ));
    }

    #[test]
    fn the_agent_is_the_product_token() {
        assert_eq!(
            agent_for(None, Some("python-requests/2.31.0")),
            "python-requests"
        );
        assert_eq!(
            agent_for(None, Some("Scrapy/2.11 (+https://scrapy.org)")),
            "Scrapy"
        );
        assert_eq!(agent_for(None, None), "*");
        assert_eq!(agent_for(Some("mybot"), Some("curl/8")), "mybot");
    }
}
