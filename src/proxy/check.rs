//! Asking before queueing (`GET`/`POST /v1/check` on the admin listener, `courtesy check-url`):
//! what courtesy would do with a GET of a URL for a job right now, decided by the phases a
//! proxied request runs (`Proxy::forward_to`), in their order and through their own decision
//! halves, never by rules of its own, so that a check and a fetch never disagree:
//!
//! 1. the target (`Target::of_any`), `connect_ports` for a blind tunnel, the destination
//!    (`Proxy::refuse_destination`: a loop to courtesy itself, `deny_destinations`) and the
//!    budget key (`Proxy::budget_key`): `denied`;
//! 2. `skip_resources` (`skip::skip_reason`): `skipped_resource`;
//! 3. robots.txt (`Proxy::robots_verdict`, or what is known without a fetch:
//!    `RobotsCache::known`), in the group the request's stamped User-Agent picks: `robots`;
//! 4. stated preferences (`Proxy::decide_preferences`, the job's or the host's purpose):
//!    `preferences`;
//! 5. the response store (`Proxy::serves_from_store`): a fresh stored answer is served without a
//!    turn, a quota place or the host's leave, so it is `allowed` with `stored`;
//! 6. the job's quota (`Caller::quota_left`): `denied`;
//! 7. the host's state in the limiter (`HostSnapshot::block`): `paused` (an operator's pause),
//!    `blocked` (a block pause), `cooling_down` (the rest, Visit-time included), else `allowed`
//!    with the estimated wait (`wait_estimate`).
//!
//! A report-only host (`enforce = false`) forwards everything at once: what would refuse it is
//! named in the reason and the verdict is `allowed`. A batch (`Proxy::check_batch`) makes each
//! origin's robots.txt known once, hosts [`ROBOTS_FETCHES_AT_ONCE`] at a time, then decides every
//! URL on what is known. Nothing here counts a request, spends a token or takes a quota place;
//! the only thing sent is a robots.txt fetch, through the host's budget like the proxy's own.

use std::collections::HashSet;
use std::time::Duration;

use futures_util::stream::{self, StreamExt as _};
use http::header::{HeaderValue, USER_AGENT};
use http::request::Parts;
use http::Uri;
use serde::{Deserialize, Serialize};

use crate::budget::jobs::Caller;
use crate::budget::limiter::HostSnapshot;
use crate::config::{HttpsMode, OnCooldown};
use crate::pacing::policy::{Cooldown, CooldownCause};
use crate::pacing::robots::Verdict;
use crate::proxy::answer::failure::Failure;
use crate::proxy::forward::context::RequestContext;
use crate::proxy::forward::target::Target;
use crate::proxy::refuse::skip::skip_reason;
use crate::proxy::{Asking, Proxy};
use crate::wire::scheme::Scheme;

/// The most URLs one `POST /v1/check` takes.
pub(crate) const MAX_BATCH: usize = 1000;
/// The hosts whose robots.txt one batch fetches at once (each through its host's budget).
pub(crate) const ROBOTS_FETCHES_AT_ONCE: usize = 16;
/// The URLs of one batch decided at once once robots.txt is known (no fetch: each is a few
/// looks under short locks and at most one look at the response store).
const CHECKS_AT_ONCE: usize = 32;
/// The job a check names when it names none (the word of the check's JSON; the proxy calls it
/// "anonymous").
pub(crate) const DEFAULT_JOB: &str = "default";

/// What courtesy would do with a GET of the URL now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum CheckVerdict {
    /// It would be sent (or served from the store): a 200 or whatever the site answers.
    Allowed,
    /// robots.txt disallows it, or could not be read: a local 403.
    Robots,
    /// The site's stated preferences refuse the job's purpose ("enforce"): a local 403.
    Preferences,
    /// An operator paused the host: a local 429, or held under `on_cooldown = "hold"`.
    Paused,
    /// The host cools down (429, 5xx, failures, RateLimit, Retry-After, Visit-time).
    CoolingDown,
    /// The host is paused for a block (a challenge page, a 403 wall).
    Blocked,
    /// `skip_resources` lists its kind: a local 403.
    SkippedResource,
    /// A bad URL, a destination courtesy never dials, a loop to itself, a job out of quota.
    Denied,
}

impl CheckVerdict {
    /// The verdict as the JSON writes it (`cooling_down`), for reasons in words.
    pub(crate) fn word(self) -> &'static str {
        match self {
            CheckVerdict::Allowed => "allowed",
            CheckVerdict::Robots => "robots",
            CheckVerdict::Preferences => "preferences",
            CheckVerdict::Paused => "paused",
            CheckVerdict::CoolingDown => "cooling_down",
            CheckVerdict::Blocked => "blocked",
            CheckVerdict::SkippedResource => "skipped_resource",
            CheckVerdict::Denied => "denied",
        }
    }
}

/// What courtesy knows of the host's robots.txt for the URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum RobotsSeen {
    /// Known, and it allows the path for the request's group.
    Allowed,
    /// Known, and it disallows the path.
    Disallowed,
    /// Not known (not fetched: `fetch=false`, or the host is closed and nothing may leave).
    Unknown,
    /// The host does not obey robots.txt (`obey_robots = false`), or a blind tunnel carries it.
    NotObeyed,
    /// It could not be read (5xx, 429, no answer): everything is disallowed until a retry.
    Unreachable,
}

/// What a proxied GET would do while the host is closed (the host's, else the job's,
/// `on_cooldown`, applied to what is left of the window).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum WhileClosed {
    /// Held until the host opens (up to `max_wait_seconds`).
    Hold,
    /// Answered at once with the local 429 and `Retry-After`.
    Reject,
}

/// The answer to one check: the JSON object of `/v1/check` (docs/see-and-steer.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct CheckAnswer {
    /// The URL asked about, as given.
    pub(crate) url: String,
    /// The budget key a GET would spend (`host:port`, a domain or an address).
    pub(crate) host: String,
    /// The job asked as ([`DEFAULT_JOB`] when none).
    pub(crate) job: String,
    /// What courtesy would do.
    pub(crate) verdict: CheckVerdict,
    /// Why, in words.
    pub(crate) reason: String,
    /// Seconds until the host takes requests again (or the job's quota frees); `None` when it
    /// is open.
    pub(crate) retry_after_s: Option<f64>,
    /// For `allowed`: the estimated seconds a GET sent now waits for its turn (0 when a stored
    /// answer would be served); `None` for every other verdict.
    pub(crate) wait_s: Option<f64>,
    /// A fresh stored answer would be served (the host is not asked).
    pub(crate) stored: bool,
    /// What is known of robots.txt.
    pub(crate) robots: RobotsSeen,
    /// What a proxied GET would do while the host is closed.
    pub(crate) on_cooldown: WhileClosed,
}

impl CheckAnswer {
    /// The answer to `url` of `job`'s before anything is decided: allowed, nothing known.
    fn new(url: &str, job: &str) -> Self {
        CheckAnswer {
            url: url.to_string(),
            host: String::new(),
            job: job.to_string(),
            verdict: CheckVerdict::Allowed,
            reason: String::new(),
            retry_after_s: None,
            wait_s: None,
            stored: false,
            robots: RobotsSeen::Unknown,
            on_cooldown: WhileClosed::Hold,
        }
    }

    /// This answer as `verdict`, for `reason`.
    fn refused(mut self, verdict: CheckVerdict, reason: impl Into<String>) -> Self {
        self.verdict = verdict;
        self.reason = reason.into();
        self.wait_s = None;
        self
    }
}

/// `url` as a URI a check can judge: absolute, with a scheme and a host; else why not (a
/// malformed URL: 400 alone, `denied` in a batch).
pub(crate) fn parse_url(url: &str) -> Result<Uri, String> {
    let uri = url
        .trim()
        .parse::<Uri>()
        .map_err(|e| format!("not a URL: {url:?} ({e})"))?;
    if uri.scheme().is_none() || uri.authority().is_none() {
        return Err(format!(
            "not an absolute URL such as https://example.com/page: {url:?}"
        ));
    }
    Ok(uri)
}

/// The verdict of a host closed by `block`, and its reason in words: an operator's pause is
/// `paused`, a block pause `blocked`, every other window (a status, failures, the server's
/// RateLimit budget, Retry-After, Visit-time, one kept over a restart) `cooling_down`.
pub(crate) fn closed_verdict(block: &Cooldown) -> CheckVerdict {
    match block.cause {
        CooldownCause::Operator => CheckVerdict::Paused,
        CooldownCause::SoftBlock | CooldownCause::HardBlock => CheckVerdict::Blocked,
        CooldownCause::Status(_)
        | CooldownCause::Failure
        | CooldownCause::ServerBudget
        | CooldownCause::Restored
        | CooldownCause::VisitTime => CheckVerdict::CoolingDown,
    }
}

/// The estimated wait, in seconds, of a GET sent now to the open host `snapshot` shows: the time
/// until its pacing has the next token (rate, Crawl-delay, a byte debt), plus one turn at its
/// rate in effect for each request already queued ahead of it. A host not known waits for
/// nothing. Concurrency slots, other jobs' shares and the shared store's other instances are not
/// counted: an estimate, not a promise.
pub(crate) fn wait_estimate(snapshot: Option<&HostSnapshot>) -> f64 {
    let Some(s) = snapshot else {
        return 0.0;
    };
    let token = s.next_turn.map_or(0.0, |(d, _)| d.as_secs_f64());
    let ahead = s.queued as f64 / s.rate.max(1e-3);
    token + ahead
}

/// What a GET would do under `asked` (the job's answer, else the host's `on_cooldown` in
/// `policy`) with `remaining` of a window left (`None`: the host is open, and "auto" would hold
/// a short window).
fn while_closed(
    policy: &crate::config::HostPolicy,
    asked: Option<OnCooldown>,
    remaining: Option<Duration>,
) -> WhileClosed {
    let holds = match remaining {
        Some(left) => policy.cooldown.holds(asked, left),
        None => asked.unwrap_or(policy.cooldown.on_cooldown) != OnCooldown::Reject,
    };
    if holds {
        WhileClosed::Hold
    } else {
        WhileClosed::Reject
    }
}

/// The robots.txt verdict as a check reports it: what is known, and the refusal's reason.
fn robots_seen(verdict: Option<Verdict>, unreachable: bool) -> (RobotsSeen, Option<String>) {
    match verdict {
        None => (RobotsSeen::Unknown, None),
        Some(Verdict::Allowed { .. }) => (RobotsSeen::Allowed, None),
        Some(Verdict::Disallowed { reason }) if unreachable => {
            (RobotsSeen::Unreachable, Some(reason))
        }
        Some(Verdict::Disallowed { reason }) => (RobotsSeen::Disallowed, Some(reason)),
    }
}

/// Whether a GET like `head` would go through a blind tunnel (`https = "tunnel"` for an https
/// URL): courtesy paces the connection and reads nothing inside it.
fn blind_tunnel(head: &Parts, cx: &RequestContext<'_>) -> bool {
    Scheme::of_uri_or_http(&head.uri) == Scheme::Https
        && cx.policy.forward.https == HttpsMode::Tunnel
}

/// What a check asks beside its URL: the job, the User-Agent its crawler sends (robots.txt picks
/// its group from it, as for the crawler's own GET), and whether robots.txt may be fetched.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CheckAsk<'a> {
    /// The job to ask as (`None`: the anonymous job, answered as [`DEFAULT_JOB`]).
    pub(crate) job: Option<&'a str>,
    /// The crawler's User-Agent (`None`: none, as for a request that sends none); the host's or
    /// the job's own is stamped over it, as `Proxy::identify` does.
    pub(crate) user_agent: Option<&'a str>,
    /// Whether an unknown robots.txt may be fetched.
    pub(crate) fetch: bool,
}

/// Who a check asks as: the job, its name in the answer, and its crawler's User-Agent.
#[derive(Debug, Clone, Copy)]
struct Who<'a> {
    caller: &'a Caller,
    name: &'a str,
    user_agent: Option<&'a str>,
}

/// Where a check stands after the phases before the host's turn.
struct Decided {
    answer: CheckAnswer,
    /// The host is closed now (nothing may leave for it, robots.txt included).
    closed: Option<Cooldown>,
}

impl Proxy {
    /// What courtesy would do with a GET of `url` as `ask` says now; `Err` when `url` is
    /// malformed. With `ask.fetch`, an unknown robots.txt is fetched first, through the host's
    /// budget, as the request path fetches it.
    pub(crate) async fn check(&self, url: &str, ask: CheckAsk<'_>) -> Result<CheckAnswer, String> {
        let uri = parse_url(url)?;
        let caller = self.jobs.for_check(&self.config.get(), ask.job);
        let who = Who {
            caller: &caller,
            name: ask.job.unwrap_or(DEFAULT_JOB),
            user_agent: ask.user_agent,
        };
        Ok(self.check_uri(url, &uri, who, ask.fetch).await)
    }

    /// [`Proxy::check`] of each of `urls` (at most [`MAX_BATCH`]), answered in their order: each
    /// origin's robots.txt made known once, [`ROBOTS_FETCHES_AT_ONCE`] hosts at a time (unless
    /// `fetch` is false), then every URL decided on what is known. A malformed URL is `denied`.
    pub(crate) async fn check_batch(&self, urls: &[String], ask: CheckAsk<'_>) -> Vec<CheckAnswer> {
        let caller = self.jobs.for_check(&self.config.get(), ask.job);
        let who = Who {
            caller: &caller,
            name: ask.job.unwrap_or(DEFAULT_JOB),
            user_agent: ask.user_agent,
        };
        let parsed: Vec<Result<Uri, String>> = urls.iter().map(|u| parse_url(u)).collect();
        if ask.fetch {
            let mut origins = HashSet::new();
            let firsts: Vec<&Uri> = parsed
                .iter()
                .filter_map(|p| p.as_ref().ok())
                .filter(|uri| {
                    Target::of_any(uri).is_ok_and(|(t, s)| origins.insert(t.origin_key(s)))
                })
                .collect();
            // The futures are made first and then run: a stream that holds a closure over
            // borrowed URLs would not be `Send` for every lifetime the admin service needs.
            let fetches: Vec<_> = firsts
                .into_iter()
                .map(|uri| self.make_robots_known(uri, who))
                .collect();
            let _: Vec<()> = stream::iter(fetches)
                .buffer_unordered(ROBOTS_FETCHES_AT_ONCE)
                .collect()
                .await;
        }
        let checks: Vec<_> = urls
            .iter()
            .zip(&parsed)
            .map(|(url, uri)| self.check_parsed(url, uri, who))
            .collect();
        stream::iter(checks)
            .buffered(CHECKS_AT_ONCE)
            .collect()
            .await
    }

    /// One URL of a batch, decided on what is known: `denied` when it did not parse.
    async fn check_parsed(
        &self,
        url: &str,
        parsed: &Result<Uri, String>,
        who: Who<'_>,
    ) -> CheckAnswer {
        match parsed {
            Ok(uri) => self.check_uri(url, uri, who, false).await,
            Err(why) => CheckAnswer::new(url, who.name).refused(CheckVerdict::Denied, why),
        }
    }

    /// Makes the robots.txt of `uri`'s origin known for `caller`'s requests, fetched through the
    /// host's budget as the request path would (nothing when the URL is refused before robots.txt
    /// matters, or the host is closed): the first step of a batch.
    async fn make_robots_known(&self, uri: &Uri, who: Who<'_>) {
        let asking = Asking::plain(who.caller.clone());
        let Ok((head, cx)) = self.check_context(uri, &asking, who.user_agent).await else {
            return;
        };
        let snapshot = self.limiter.snapshot_by_key(&cx.budget.key);
        let closed = snapshot.is_some_and(|s| s.block.is_some());
        if closed || blind_tunnel(&head, &cx) || !self.reads_robots(&head, &cx) {
            return;
        }
        // Its verdict is each URL's, decided after; here robots.txt is only made known.
        let _ = self.robots_verdict(&head, &cx).await;
    }

    /// Whether a request like `head` reads the host's robots.txt: to obey it, or for the
    /// preference lines a purpose is checked against.
    fn reads_robots(&self, head: &Parts, cx: &RequestContext<'_>) -> bool {
        let purpose = crate::proxy::refuse::preferences::purpose_of(&cx.asking.caller, &cx.policy);
        let preferences = cx.policy.preferences.content_preferences
            != crate::config::ContentPreferences::Off
            && purpose.is_some();
        head.uri.path() != "/robots.txt" && (cx.policy.robots.obey || preferences)
    }

    /// The check of the parsed `uri` (written `url`) as `who` asks it.
    async fn check_uri(&self, url: &str, uri: &Uri, who: Who<'_>, fetch: bool) -> CheckAnswer {
        let answer = CheckAnswer::new(url, who.name);
        let asking = Asking::plain(who.caller.clone());
        let checked = self.check_context(uri, &asking, who.user_agent).await;
        let (mut head, mut cx) = match checked {
            Ok(found) => found,
            Err((host, failure)) => {
                let mut answer = answer.refused(CheckVerdict::Denied, failure.details);
                answer.host = host;
                return answer;
            }
        };
        let decided = self.before_turn(answer, &head, &cx, fetch).await;
        let mut answer = match decided {
            Ok(decided) => self.at_the_turn(decided, &mut head, &mut cx).await,
            Err(refused) => refused,
        };
        if !cx.policy.scope.enforce && answer.verdict != CheckVerdict::Allowed {
            answer.reason = format!(
                "report-only host (enforce = false): a GET goes at once; enforced, it would be {}: {}",
                answer.verdict.word(),
                answer.reason
            );
            answer.verdict = CheckVerdict::Allowed;
            answer.retry_after_s = None;
            answer.wait_s = Some(0.0);
        }
        answer
    }

    /// The head and context of a GET of `uri` by `asking`'s job with `user_agent`, as the
    /// request path makes them before its phases: the target, the destination judged, the
    /// identity stamped, the budget key. `Err`: what a GET would be refused for (with the host,
    /// as far as it is known).
    async fn check_context<'a>(
        &self,
        uri: &Uri,
        asking: &'a Asking,
        user_agent: Option<&str>,
    ) -> Result<(Parts, RequestContext<'a>), (String, Failure)> {
        let spelled = || uri.authority().map(|a| a.to_string()).unwrap_or_default();
        let (target, scheme) = Target::of_any(uri).map_err(|f| (spelled(), f))?;
        let config = self.config.get();
        let policy = config.policy_for(&target.host, target.port);
        let tunnel = scheme == Scheme::Https && policy.forward.https == HttpsMode::Tunnel;
        if tunnel && !config.proxy.connect_ports.contains(&target.port) {
            let failure = Failure::denied(format!(
                "CONNECT to port {} is not allowed ([proxy] connect_ports = {:?})",
                target.port, config.proxy.connect_ports
            ));
            return Err((target.key(), failure));
        }
        if let Some(failure) = self.refuse_destination(&target).await {
            return Err((target.key(), failure));
        }
        let mut head = http::Request::get(uri.clone())
            .body(())
            .map_err(|e| (target.key(), Failure::bad_request(e.to_string())))?
            .into_parts()
            .0;
        if let Some(agent) = user_agent.and_then(|a| HeaderValue::from_str(a).ok()) {
            head.headers.insert(USER_AGENT, agent);
        }
        let mut cx = RequestContext::new(&config, target, asking, None, &head);
        self.identify(&mut head, &mut cx);
        cx.budget = self
            .budget_key(&cx.target, &cx.policy)
            .await
            .map_err(|f| (cx.target.key(), f))?;
        Ok((head, cx))
    }

    /// The phases before the store and the turn: `skip_resources`, robots.txt, stated
    /// preferences. `Err` is the answer when one refuses.
    async fn before_turn(
        &self,
        mut answer: CheckAnswer,
        head: &Parts,
        cx: &RequestContext<'_>,
        fetch: bool,
    ) -> Result<Decided, CheckAnswer> {
        answer.host = cx.budget.key.clone();
        let closed = self
            .limiter
            .snapshot_by_key(&cx.budget.key)
            .and_then(|s| s.block);
        if blind_tunnel(head, cx) {
            // A blind tunnel paces connections: nothing inside is read, robots.txt included.
            answer.robots = RobotsSeen::NotObeyed;
            return Ok(Decided { answer, closed });
        }
        if let Some(reason) = skip_reason(head, &cx.policy) {
            return Err(answer.refused(CheckVerdict::SkippedResource, reason));
        }
        // Nothing leaves for a closed host, robots.txt included: decided on what is known.
        let fetch = fetch && closed.is_none();
        let (robots, refused) = self.check_robots(head, cx, fetch).await;
        answer.robots = robots;
        if let Some(reason) = refused {
            return Err(answer.refused(CheckVerdict::Robots, reason));
        }
        if let Ok(Some(checked)) = self.decide_preferences(head, cx, fetch).await {
            if let Some(refused) = checked.before.as_ref().filter(|_| checked.enforce) {
                return Err(answer.refused(CheckVerdict::Preferences, refused.details()));
            }
        }
        Ok(Decided { answer, closed })
    }

    /// What robots.txt says of the request: fetched first with `fetch` (the request path's own
    /// `Proxy::robots_verdict`), else what is known; and the reason of a refusal.
    async fn check_robots(
        &self,
        head: &Parts,
        cx: &RequestContext<'_>,
        fetch: bool,
    ) -> (RobotsSeen, Option<String>) {
        if !cx.policy.robots.obey {
            return (RobotsSeen::NotObeyed, None);
        }
        if head.uri.path() == "/robots.txt" {
            return (RobotsSeen::Allowed, None);
        }
        let origin = cx.target.origin_key(Scheme::of_uri_or_http(&head.uri));
        let verdict = if fetch {
            match self.robots_verdict(head, cx).await {
                Ok(verdict) => Some(verdict),
                // The host refused every request now (a 429 or 503 of courtesy's): unknown.
                Err(answer) if matches!(answer.status().as_u16(), 429 | 503) => None,
                Err(answer) => {
                    let reason = format!(
                        "robots.txt could not be fetched (courtesy answered {})",
                        answer.status().as_u16()
                    );
                    return (RobotsSeen::Unreachable, Some(reason));
                }
            }
        } else {
            let agent = Self::robots_agent(head, &cx.policy);
            let path = head.uri.path_and_query().map_or("/", |p| p.as_str());
            self.robots.known(&origin, agent, path)
        };
        robots_seen(verdict, self.robots.unreachable(&origin))
    }

    /// The phases from the store on: a fresh stored answer, the job's quota, the host's state.
    async fn at_the_turn(
        &self,
        decided: Decided,
        head: &mut Parts,
        cx: &mut RequestContext<'_>,
    ) -> CheckAnswer {
        let Decided { mut answer, closed } = decided;
        let tunnel = blind_tunnel(head, cx);
        // The head as it would go upstream (its Vary'd fields), for the store's look.
        let rewritten = self.rewrite_request_head(head, cx).is_continue();
        if !tunnel && rewritten && self.serves_from_store(head, &cx.policy).await {
            answer.stored = true;
            answer.wait_s = Some(0.0);
            answer.reason = "a fresh stored answer would be served; the host is not asked".into();
            return answer;
        }
        let caller = &cx.asking.caller;
        let quota = caller.quota_left(std::time::Instant::now());
        if let Some(left) = quota.filter(|q| q.remaining == 0) {
            let reason = format!("job {:?} has used its quota for this window", caller.name());
            let mut answer = answer.refused(CheckVerdict::Denied, reason);
            answer.retry_after_s = Some(left.reset.as_secs_f64());
            return answer;
        }
        let snapshot = self.limiter.snapshot_by_key(&cx.budget.key);
        let block = snapshot.as_ref().and_then(|s| s.block).or(closed);
        let remaining = block.map(|b| {
            b.until
                .saturating_duration_since(tokio::time::Instant::now())
        });
        answer.on_cooldown = while_closed(&cx.policy, cx.asked.on_cooldown, remaining);
        match (block, remaining) {
            (Some(block), Some(left)) => self.closed_answer(answer, &block, left),
            _ => {
                let wait = wait_estimate(snapshot.as_ref());
                answer.wait_s = Some(wait);
                answer.reason = format!("a GET would be sent, after about {wait:.1} s");
                answer
            }
        }
    }

    /// The answer for a host closed by `block` with `left` of it to go.
    fn closed_answer(&self, answer: CheckAnswer, block: &Cooldown, left: Duration) -> CheckAnswer {
        let then = match answer.on_cooldown {
            WhileClosed::Hold => "a GET would be held until then",
            WhileClosed::Reject => "a GET would get a local 429 with Retry-After",
        };
        let reason = format!(
            "{} is closed for {:.1} s more: {}; {then}",
            answer.host,
            left.as_secs_f64(),
            block.cause
        );
        let mut answer = answer.refused(closed_verdict(block), reason);
        answer.retry_after_s = Some(left.as_secs_f64());
        answer
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::Instant;

    fn window(cause: CooldownCause) -> Cooldown {
        let now = Instant::now();
        Cooldown {
            started: now,
            until: now + Duration::from_secs(30),
            cause,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn each_cause_of_a_closed_host_has_its_verdict() {
        let cases = [
            (CooldownCause::Operator, CheckVerdict::Paused),
            (CooldownCause::SoftBlock, CheckVerdict::Blocked),
            (CooldownCause::HardBlock, CheckVerdict::Blocked),
            (CooldownCause::Status(429), CheckVerdict::CoolingDown),
            (CooldownCause::Status(503), CheckVerdict::CoolingDown),
            (CooldownCause::Failure, CheckVerdict::CoolingDown),
            (CooldownCause::ServerBudget, CheckVerdict::CoolingDown),
            (CooldownCause::VisitTime, CheckVerdict::CoolingDown),
            (CooldownCause::Restored, CheckVerdict::CoolingDown),
        ];
        for (cause, verdict) in cases {
            assert_eq!(closed_verdict(&window(cause)), verdict, "{cause:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_wait_is_the_next_token_plus_the_queue_ahead_at_the_rate() {
        let mut policy = crate::config::HostPolicy::default();
        policy.pacing.rate = 2.0;
        policy.pacing.burst = 1;
        policy.pacing.concurrency = 10;
        let config = crate::config::Config {
            defaults: std::sync::Arc::new(policy),
            ..crate::config::Config::default()
        };
        let limiter = crate::budget::limiter::Limiter::new(std::sync::Arc::new(config));
        assert_eq!(
            wait_estimate(None),
            0.0,
            "a host not known waits for nothing"
        );
        let mut first = limiter.admit(("a.test", 80)).await.expect("a free turn");
        first.mark_sent();
        let snapshot = limiter.snapshot("a.test", 80);
        let wait = wait_estimate(snapshot.as_ref());
        assert!((wait - 0.5).abs() < 0.01, "one token at 2/s: {wait}");
        let queued = {
            let limiter = limiter.clone();
            tokio::spawn(async move { limiter.admit(("a.test", 80)).await.map(drop) })
        };
        tokio::task::yield_now().await;
        let snapshot = limiter.snapshot("a.test", 80);
        assert_eq!(snapshot.as_ref().map(|s| s.queued), Some(1));
        let wait = wait_estimate(snapshot.as_ref());
        assert!((wait - 1.0).abs() < 0.01, "and one queued ahead: {wait}");
        drop(first);
        assert!(queued.await.is_ok());
    }

    #[test]
    fn robots_verdicts_read_as_the_check_reports_them() {
        let allowed = Verdict::Allowed {
            crawl_delay: Some(2.0),
            visit: None,
        };
        assert_eq!(
            robots_seen(Some(allowed), false),
            (RobotsSeen::Allowed, None)
        );
        let no = || Verdict::Disallowed {
            reason: "robots.txt disallows /x".into(),
        };
        assert_eq!(robots_seen(Some(no()), false).0, RobotsSeen::Disallowed);
        assert_eq!(robots_seen(Some(no()), true).0, RobotsSeen::Unreachable);
        assert_eq!(
            robots_seen(Some(no()), false).1.as_deref(),
            Some("robots.txt disallows /x")
        );
        assert_eq!(robots_seen(None, false), (RobotsSeen::Unknown, None));
    }

    #[test]
    fn what_a_get_does_while_closed_follows_on_cooldown() {
        let mut policy = crate::config::HostPolicy::default();
        policy.cooldown.on_cooldown = OnCooldown::Auto;
        policy.cooldown.max_hold = Duration::from_secs(20);
        let short = Some(Duration::from_secs(5));
        let long = Some(Duration::from_secs(600));
        assert_eq!(while_closed(&policy, None, short), WhileClosed::Hold);
        assert_eq!(while_closed(&policy, None, long), WhileClosed::Reject);
        assert_eq!(while_closed(&policy, None, None), WhileClosed::Hold);
        let reject = Some(OnCooldown::Reject);
        assert_eq!(while_closed(&policy, reject, short), WhileClosed::Reject);
        assert_eq!(while_closed(&policy, reject, None), WhileClosed::Reject);
        let hold = Some(OnCooldown::Hold);
        assert_eq!(while_closed(&policy, hold, long), WhileClosed::Hold);
    }

    #[test]
    fn malformed_urls_are_told_apart_from_urls_a_get_would_refuse() {
        assert!(parse_url("https://a.test/page?x=1").is_ok());
        assert!(parse_url("ftp://a.test/file").is_ok(), "judged: denied");
        for bad in ["", "not a url", "/relative/path", "a.test/page", "http://"] {
            assert!(parse_url(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_answer_is_the_wire_format_of_the_spec() {
        let mut answer = CheckAnswer::new("https://a.test/", DEFAULT_JOB);
        answer.host = "a.test:443".into();
        answer.wait_s = Some(0.0);
        let json = serde_json::to_value(&answer).expect("serializable");
        for field in [
            "url",
            "host",
            "job",
            "verdict",
            "reason",
            "retry_after_s",
            "wait_s",
            "stored",
            "robots",
            "on_cooldown",
        ] {
            assert!(json.get(field).is_some(), "{field} missing in {json}");
        }
        assert_eq!(json["verdict"], "allowed");
        assert_eq!(json["robots"], "unknown");
        assert_eq!(json["on_cooldown"], "hold");
        assert_eq!(json["job"], "default");
        assert!(json["retry_after_s"].is_null());
        for verdict in [
            CheckVerdict::Allowed,
            CheckVerdict::Robots,
            CheckVerdict::Preferences,
            CheckVerdict::Paused,
            CheckVerdict::CoolingDown,
            CheckVerdict::Blocked,
            CheckVerdict::SkippedResource,
            CheckVerdict::Denied,
        ] {
            let json = serde_json::to_value(verdict).expect("a word");
            assert_eq!(json, verdict.word(), "one word for {verdict:?}");
        }
        let read: CheckAnswer = serde_json::from_value(json).expect("read back");
        assert_eq!(read, answer);
    }
}
