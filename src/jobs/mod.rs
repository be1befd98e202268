//! Who is asking: the job each request belongs to, named by the username of the client's proxy
//! URL (`Proxy-Authorization: Basic`), its token checked, and what courtesy keeps per job (its
//! quota window and its counts). The job decides a request's share of a host's turns
//! (`limiter::lanes`), its quota, and what is stamped on it; it never changes a host's budget.
//!
//! | file | owns |
//! |---|---|
//! | `mod.rs` | [`Jobs`]: identifying a request's job, the table of job states; [`Caller`] |
//! | `credentials.rs` | reading `Proxy-Authorization: Basic`, checking a token in constant time |
//! | `quota.rs` | a job's quota window: reserve, spend, give back, what is left |

mod credentials;
mod quota;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use dashmap::DashMap;
use http::HeaderMap;

use crate::config::{ClientAuth, Config, JobSettings, Priority};
use crate::limiter::lanes::JobTag;
pub use quota::{QuotaLeft, QuotaTicket};

pub use crate::limiter::lanes::ANONYMOUS;

/// Where the names of jobs no `[[job]]` names go past [`MAX_UNNAMED_JOBS`] (and the label
/// metrics give every job not configured).
pub const OTHER: &str = "other";

/// Jobs no `[[job]]` names that are kept apart (for fairness and the log); more share "other",
/// so that clients inventing usernames cannot grow the table.
pub const MAX_UNNAMED_JOBS: usize = 1000;

/// The request header that says a request's class within its job (`high`, `normal`, `low`).
pub const PRIORITY_HEADER: &str = "courtesy-priority";

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
        }
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

/// The job of one request, as its credentials named it: its state and its settings (`None`
/// for a job no `[[job]]` names).
#[derive(Debug, Clone)]
pub struct Caller {
    /// What courtesy keeps for the job.
    pub state: Arc<JobState>,
    /// Its `[[job]]`, if it has one.
    pub settings: Option<Arc<JobSettings>>,
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
            name: self.state.name.clone(),
            weight,
        }
    }

    /// The job's own priority, for requests that do not say theirs.
    pub fn priority(&self) -> Priority {
        self.settings
            .as_ref()
            .map_or(Priority::Normal, |s| s.priority)
    }

    /// Reserves one request of the job's quota, or says how long until the window frees. A job
    /// without a quota always gets a ticket (that reserves nothing and counts the request served).
    pub fn reserve(&self, now: std::time::Instant) -> Result<QuotaTicket, std::time::Duration> {
        let Some((max, per)) = self.quota_limits() else {
            return Ok(QuotaTicket::unlimited(&self.state));
        };
        let reserved = quota::reserve(&self.state, max, per, now);
        if reserved.is_err() {
            self.state.refused_quota.fetch_add(1, Ordering::Relaxed);
        }
        reserved
    }

    /// What is left of the job's quota now, for its `RateLimit` headers; `None` without one.
    pub fn quota_left(&self, now: std::time::Instant) -> Option<QuotaLeft> {
        let (max, per) = self.quota_limits()?;
        Some(quota::left(&self.state, max, per, now))
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
pub struct NotAccepted(pub String);

/// The table of job states, shared by every request.
#[derive(Debug, Default)]
pub struct Jobs {
    states: DashMap<Arc<str>, Arc<JobState>>,
}

impl Jobs {
    /// An empty table.
    pub fn new() -> Self {
        Jobs::default()
    }

    /// The job of a request with `headers` under `config`, or why its credentials are refused.
    /// The token is compared in constant time and never kept.
    pub fn identify(&self, config: &Config, headers: &HeaderMap) -> Result<Caller, NotAccepted> {
        let mode = config.proxy.client_auth;
        if mode == ClientAuth::None {
            return Ok(self.anonymous());
        }
        // Credentials courtesy cannot read are no job's: refused where a job is required,
        // anonymous where it is not (they may be meant for another proxy's scheme).
        let given = match credentials::basic(headers) {
            Ok(given) => given,
            Err(why) if mode == ClientAuth::Required => {
                return Err(NotAccepted(format!("Proxy-Authorization: {why}")))
            }
            Err(_) => None,
        };
        let Some((user, password)) = given else {
            return match mode {
                ClientAuth::Required => Err(NotAccepted(
                    "proxy credentials are required ([proxy] client_auth = \"required\"): put the job's name and token in the proxy URL".into(),
                )),
                _ => Ok(self.anonymous()),
            };
        };
        let settings = config.jobs.iter().find(|j| j.name == user).cloned();
        match &settings {
            Some(job) if job.has_token() && !credentials::token_matches(job, &password) => {
                return Err(NotAccepted(format!("the token for job {user:?} is wrong")));
            }
            Some(job) if job.has_token() => {}
            Some(_) if mode == ClientAuth::Required => {
                return Err(NotAccepted(format!("job {user:?} has no token to check")));
            }
            Some(_) => {}
            None if mode == ClientAuth::Required => {
                return Err(NotAccepted(format!("no [[job]] is named {user:?}")));
            }
            None if user.is_empty() || user == ANONYMOUS => return Ok(self.anonymous()),
            None => {}
        }
        let state = self.state_of(&user, settings.is_some());
        Ok(Caller { state, settings })
    }

    /// Job "anonymous".
    fn anonymous(&self) -> Caller {
        Caller {
            state: self.state_of(ANONYMOUS, false),
            settings: None,
        }
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
                settings: Some(settings.clone()),
            })
            .collect();
        for entry in self.states.iter() {
            if !config.jobs.iter().any(|j| *j.name == **entry.key()) {
                all.push(Caller {
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
/// `default`; a value that is none of the words is an error to answer with 400.
pub fn priority_of(headers: &mut HeaderMap, default: Priority) -> Result<Priority, String> {
    let Some(value) = headers.remove(PRIORITY_HEADER) else {
        return Ok(default);
    };
    let text = value.to_str().unwrap_or("");
    Priority::from_header(text)
        .ok_or_else(|| format!("Courtesy-Priority must be high, normal or low, got {text:?}"))
}
