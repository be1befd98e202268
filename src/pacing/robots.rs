//! robots.txt (RFC 9309): one fetch per host, shared by every client; rules parsed by the
//! texting_robots crate, the preference lines it drops by `pacing/preferences`; answers cached
//! for a day.
//!
//! This module owns the cache and the decisions: whether a request must wait for a fetch, who
//! fetches, what an answer means (2xx: rules; 4xx: everything allowed; 5xx, 429 or unreachable:
//! everything disallowed until a retry), and which group a client's User-Agent falls in. The fetch
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

use crate::config::Purpose;
use crate::pacing::preferences::{Refused, RobotsPreferences};
use crate::util::locks::lock;

/// How long a fetched robots.txt (or a 4xx) is trusted.
pub(crate) const CACHE_FOR: Duration = Duration::from_secs(24 * 3600);
/// How long "everything disallowed" lasts after a 5xx, 429 or failure before courtesy retries.
pub(crate) const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(60);
/// The most of a robots.txt that is read (RFC 9309 asks parsers for at least 500 KiB).
pub(crate) const MAX_BYTES: usize = 500 * 1024;
/// Redirects followed when fetching robots.txt.
pub(crate) const MAX_REDIRECTS: usize = 5;
/// Distinct user-agent groups parsed per host (the rest fall back to `*`).
const MAX_AGENTS: usize = 16;

/// What a fetch of robots.txt came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fetched {
    /// A 2xx with this body (at most [`MAX_BYTES`]).
    Rules(Vec<u8>),
    /// A 4xx: there are no rules.
    Unavailable(u16),
    /// A 5xx, a 429, too many redirects or no answer: everything is disallowed for now.
    Unreachable(String),
}

/// The verdict for one request.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Verdict {
    /// Go ahead; `crawl_delay` is the group's Crawl-delay in seconds, if any.
    Allowed {
        /// Crawl-delay of the matching group.
        crawl_delay: Option<f64>,
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
        robots: HashMap<String, Arc<Robot>>,
        /// The preference lines (Content-Signal, Content-Usage), read once.
        preferences: Arc<RobotsPreferences>,
        until: Instant,
    },
    AllowAll {
        until: Instant,
    },
    DisallowAll {
        why: String,
        until: Instant,
    },
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
    /// Records what the fetch came to and wakes every waiting request.
    pub(crate) fn finish(mut self, fetched: Fetched) {
        let now = Instant::now();
        let state = match fetched {
            Fetched::Rules(txt) => {
                let preferences = RobotsPreferences::parse(&txt);
                if !preferences.licenses().is_empty() {
                    self.any_licenses.store(true, Ordering::Release);
                }
                State::Rules {
                    preferences: Arc::new(preferences),
                    txt: Arc::new(txt),
                    robots: HashMap::new(),
                    until: now + CACHE_FOR,
                }
            }
            Fetched::Unavailable(_) => State::AllowAll {
                until: now + CACHE_FOR,
            },
            Fetched::Unreachable(why) => State::DisallowAll {
                why,
                until: now + RETRY_AFTER_FAILURE,
            },
        };
        *lock(&self.entry.state) = state;
        self.finished = true;
        self.entry.done.notify_waiters();
    }
}

impl Drop for FetchGuard {
    fn drop(&mut self) {
        if !self.finished {
            // The fetching request went away: let the next one try.
            *lock(&self.entry.state) = State::Unknown;
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
        let stale = match &*state {
            State::Unknown => true,
            State::Fetching => false,
            State::Rules { until, .. }
            | State::AllowAll { until, .. }
            | State::DisallowAll { until, .. } => *until <= now,
        };
        if stale {
            *state = State::Fetching;
            drop(state);
            return Step::Fetch(FetchGuard {
                entry,
                finished: false,
                any_licenses: self.any_licenses.clone(),
            });
        }
        match &mut *state {
            State::Fetching => Step::Wait(entry.done.clone().notified_owned()),
            State::AllowAll { .. } => Step::Known(Verdict::Allowed { crawl_delay: None }),
            State::DisallowAll { why, .. } => Step::Known(Verdict::Disallowed {
                reason: format!(
                    "robots.txt could not be read ({why}); everything is disallowed until a retry"
                ),
            }),
            State::Rules { txt, robots, .. } => {
                let agent = agent.to_ascii_lowercase();
                let robot = match robots.get(&agent) {
                    Some(r) => Some(r.clone()),
                    None => {
                        let parsed = Robot::new(&agent, txt).ok().map(Arc::new);
                        if let Some(r) = &parsed {
                            if robots.len() < MAX_AGENTS {
                                robots.insert(agent.clone(), r.clone());
                            }
                        }
                        parsed
                    }
                };
                match robot {
                    // An unparsable file is treated as no rules, as browsers and big crawlers do.
                    None => Step::Known(Verdict::Allowed { crawl_delay: None }),
                    Some(r) if r.allowed(path) => Step::Known(Verdict::Allowed {
                        crawl_delay: r.delay.map(f64::from),
                    }),
                    Some(_) => Step::Known(Verdict::Disallowed {
                        reason: format!("robots.txt disallows {path} for user-agent {agent:?}"),
                    }),
                }
            }
            State::Unknown => Step::Known(Verdict::Allowed { crawl_delay: None }),
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
            State::Rules { until, .. }
            | State::AllowAll { until }
            | State::DisallowAll { until, .. } => *until > now,
        });
        before - self.entries.len()
    }

    /// Whether no host has an entry (tests check that a sweep empties the cache).
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The robots.txt group for a client: `configured` if set, else the product token of its
/// User-Agent (`python-requests/2.31` → `python-requests`), else `*`.
pub(crate) fn agent_for(configured: Option<&str>, user_agent: Option<&str>) -> String {
    if let Some(agent) = configured {
        return agent.to_string();
    }
    user_agent
        .and_then(|ua| ua.split_whitespace().next())
        .map(|token| token.split('/').next().unwrap_or(token))
        .filter(|t| !t.is_empty())
        .unwrap_or("*")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

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
        guard.finish(Fetched::Rules(
            b"User-agent: *\nDisallow: /private\nCrawl-delay: 2\n\nUser-agent: special\nDisallow: /\n".to_vec(),
        ));
        assert_eq!(
            known(cache.step("http://a.test:80", "bot", "/page")),
            Verdict::Allowed {
                crawl_delay: Some(2.0)
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
        g.finish(Fetched::Unavailable(404));
        assert_eq!(
            known(cache.step("k1", "bot", "/any")),
            Verdict::Allowed { crawl_delay: None }
        );
        let Step::Fetch(g) = cache.step("k2", "bot", "/") else {
            panic!()
        };
        g.finish(Fetched::Unreachable("500".into()));
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
