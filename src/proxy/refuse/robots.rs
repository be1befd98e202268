//! Obeying robots.txt on the request path (`obey_robots`): the verdict for a request, the
//! delay (Crawl-delay, Request-rate) and Visit-time window it sets, and fetching robots.txt itself through the host's budget like any
//! request. The rules, the per-host cache and the single-fetch coordination are `crate::pacing::robots`.

use std::time::SystemTime;

use http::header::{HeaderValue, HOST, LOCATION, USER_AGENT, VIA};
use http::request::Parts;
use http::{Request, Response, Uri};
use http_body_util::BodyExt as _;

use crate::proxy::forward::context::RequestContext;
use crate::proxy::send::exchange::Exchanged;
use tracing::{info, warn};

use crate::budget::limiter::Admission;
use crate::budget::limiter::EventKind;
use crate::budget::limiter::Refusal;
use crate::config::HostPolicy;
use crate::pacing::robots::{self, Fetched, Step, Verdict};
use crate::pacing::robots_pacing::VisitWindow;
use crate::proxy::answer::body::ProxyBody;
use crate::proxy::answer::failure::Failure;
use crate::proxy::answer::response::{self, ProxyError};
use crate::proxy::cache::freshness::explicit_lifetime;
use crate::proxy::forward::target::Target;
use crate::proxy::Proxy;
use crate::upstream::pool::UpstreamBody;
use crate::wire::scheme::Scheme;

/// Why robots.txt was not fetched, when the request must be answered without a verdict.
#[derive(Debug)]
enum NotFetched {
    /// The host refuses every request right now.
    Refused(Refusal),
    /// The host's certificate is not one courtesy trusts, or courtesy ran out of upstream
    /// connections or descriptors: a local problem, not the host's (its robots.txt is not judged
    /// unreachable for it).
    Untrusted(Failure),
}

/// How one request for robots.txt ended without a response to read.
enum Unsent {
    /// What the fetch comes to: robots.txt unreachable, or not fetched at all.
    Done(Result<Fetched, NotFetched>),
    /// A pooled connection died under it: it may go once more, on a fresh one (else it is
    /// unreachable, as this failure says).
    Stale(Failure),
}

impl Proxy {
    /// Checks the request against the host's robots.txt (fetching it first if needed); applies
    /// the Crawl-delay. Returns the local answer when the request must not go.
    pub(crate) async fn obey_robots(
        &self,
        head: &Parts,
        cx: &RequestContext<'_>,
    ) -> Option<Response<ProxyBody>> {
        match self.robots_verdict(head, cx).await {
            Ok(Verdict::Allowed { .. }) => None,
            Ok(Verdict::Disallowed { reason }) => {
                info!(%reason, "refused by robots.txt");
                Some(Failure::denied(reason).into_response())
            }
            Err(answer) => Some(answer),
        }
    }

    /// The decision half of [`Proxy::obey_robots`], which `Proxy::check` shares: the verdict of
    /// the host's robots.txt for the request (fetched first if needed), with the delay and
    /// Visit-time window of an allowed one put in force. `Err` is the local answer when
    /// robots.txt could not be asked for.
    pub(crate) async fn robots_verdict(
        &self,
        head: &Parts,
        cx: &RequestContext<'_>,
    ) -> Result<Verdict, Response<ProxyBody>> {
        let verdict = self.robots_known(head, cx).await?;
        if let Verdict::Allowed { crawl_delay, visit } = &verdict {
            self.apply_robots_pacing(cx, *crawl_delay, *visit);
        }
        Ok(verdict)
    }

    /// Puts what robots.txt asks of the host's pace in force: its delay (the longer of
    /// `Crawl-delay` and `Request-rate`'s interval, capped only by an operator's
    /// `max_crawl_delay_seconds`) and its `Visit-time` window. Logged when it changes.
    fn apply_robots_pacing(
        &self,
        cx: &RequestContext<'_>,
        delay: Option<f64>,
        visit: Option<VisitWindow>,
    ) {
        let asked = delay.filter(|d| d.is_finite() && *d > 0.0);
        let cap = cx.policy.robots.max_crawl_delay.map(|d| d.as_secs_f64());
        let paced = asked.map(|d| cap.map_or(d, |cap| d.min(cap)));
        let rate = paced.map(|d| 1.0 / d);
        let (capped, closed) = self.limiter.set_robots_pacing_for(&cx.budget, rate, visit);
        if capped {
            match (asked, cap) {
                (Some(d), Some(max)) if d > max => warn!(
                    crawl_delay_s = d,
                    max_crawl_delay_s = max,
                    "robots.txt asks for a Crawl-delay beyond max_crawl_delay_seconds; pacing at that cap"
                ),
                (Some(d), _) => info!(crawl_delay_s = d, "robots.txt Crawl-delay caps the rate"),
                (None, _) => {}
            }
        }
        if let Some(window) = visit.filter(|_| closed) {
            info!(visit_time = %window.text(), "robots.txt Visit-time limits the host to its hours");
        }
    }

    /// The robots.txt group a request with this head falls in: the host's `robots_user_agent`,
    /// else the product token of its User-Agent, else `*`.
    pub(crate) fn robots_agent<'a>(head: &'a Parts, policy: &'a HostPolicy) -> &'a str {
        robots::agent_for(
            policy.robots.user_agent.as_deref(),
            head.headers.get(USER_AGENT).and_then(|v| v.to_str().ok()),
        )
    }

    /// The verdict of the host's robots.txt for the request, fetched first (through the host's
    /// budget) when it is not known: what obeying it and reading its preference lines both start
    /// with. `Err` is the local answer when robots.txt could not be asked for.
    pub(crate) async fn robots_known(
        &self,
        head: &Parts,
        cx: &RequestContext<'_>,
    ) -> Result<Verdict, Response<ProxyBody>> {
        let scheme = Scheme::of_uri_or_http(&head.uri);
        let user_agent = head.headers.get(USER_AGENT);
        let agent = Self::robots_agent(head, &cx.policy);
        let path = head.uri.path_and_query().map_or("/", |p| p.as_str());
        let key = cx.target.origin_key(scheme);
        let budget = &cx.budget;
        loop {
            match self.robots.step(&key, agent, path) {
                Step::Known(verdict) => return Ok(verdict),
                Step::Wait(done) => done.await,
                Step::Fetch(guard) => {
                    // Boxed: the fetch is rare (once per origin and expiry), and its future,
                    // kept inline, would make every request's future larger to move.
                    let fetch = Box::pin(self.fetch_robots(&cx.target, scheme, user_agent));
                    match fetch.await {
                        Ok(fetched) => {
                            self.tell_robots(&budget.key, &fetched, agent);
                            guard.finish(fetched, cx.policy.robots.keep_on_failure)
                        }
                        Err(NotFetched::Refused(refusal)) => {
                            // The host refuses every request right now (a cooldown in reject mode):
                            // this one gets that answer, and a later request fetches robots.txt.
                            drop(guard);
                            self.metrics.refusal(&budget.key, &refusal);
                            return Err(response::refusal(&refusal, &budget.key));
                        }
                        Err(NotFetched::Untrusted(failure)) => {
                            // courtesy's own trust (or its own limits) is the problem, not the host
                            // or its robots.txt: the answer says so, and the next request fetches
                            // robots.txt again.
                            drop(guard);
                            return Err(failure.into_response());
                        }
                    }
                }
            }
        }
    }

    /// Tells `robots_fetched` for the budget `key`: the status, whether the rules disallow
    /// anything for `agent`'s group, its Crawl-delay. An unreachable robots.txt disallows
    /// everything until the next try.
    fn tell_robots(&self, key: &str, fetched: &Fetched, agent: &str) {
        let (status, disallows_any, crawl_delay_s) = match fetched {
            Fetched::Rules(txt, _) => {
                let (disallows_any, delay) = robots::summary(txt, agent);
                (Some(200), disallows_any, delay)
            }
            Fetched::Unavailable(status) => (Some(*status), false, None),
            Fetched::Unreachable(_) => (None, true, None),
        };
        let kind = EventKind::RobotsFetched {
            status,
            disallows_any,
            crawl_delay_s,
        };
        self.limiter.tell(key, kind);
    }

    /// Fetches robots.txt for `target` through the host's budget like any request: up to
    /// [`robots::MAX_REDIRECTS`] redirects, at most [`robots::MAX_BYTES`] read.
    async fn fetch_robots(
        &self,
        target: &Target,
        scheme: Scheme,
        user_agent: Option<&HeaderValue>,
    ) -> Result<Fetched, NotFetched> {
        let mut url = format!("{}://{}/robots.txt", scheme.as_str(), target.authority);
        let mut fresh_retry = false;
        let mut hops = 0;
        while hops <= robots::MAX_REDIRECTS {
            let Some((uri, next, next_scheme)) = robots_target(&url) else {
                return Ok(Fetched::Unreachable(format!("bad robots.txt URL {url:?}")));
            };
            // The permit is held until the body is read: the fetch is in flight until then.
            let exchanged = match self.ask_robots(&uri, &next, next_scheme, user_agent).await {
                Ok(exchanged) => exchanged,
                Err(Unsent::Stale(_)) if !fresh_retry => {
                    // A pooled connection died under the fetch: once more, on a fresh one.
                    fresh_retry = true;
                    continue;
                }
                Err(Unsent::Stale(failure)) => return Ok(Fetched::Unreachable(failure.details)),
                Err(Unsent::Done(fetched)) => return fetched,
            };
            hops += 1;
            let status = exchanged.response.status();
            info!(status = status.as_u16(), url = %uri, "robots.txt");
            if !status.is_redirection() {
                return Ok(read_robots(exchanged).await);
            }
            let location = exchanged.response.headers().get(LOCATION);
            let Some(location) = location.and_then(|v| v.to_str().ok()) else {
                return Ok(Fetched::Unavailable(status.as_u16()));
            };
            url = if location.starts_with("http://") || location.starts_with("https://") {
                location.to_string()
            } else {
                let base = format!("{}://{}", next_scheme.as_str(), next.authority);
                format!("{base}/{}", location.trim_start_matches('/'))
            };
        }
        Ok(Fetched::Unreachable(format!(
            "more than {} redirects",
            robots::MAX_REDIRECTS
        )))
    }

    /// One request for robots.txt at `uri` (on `next` over `scheme`), through its host's budget,
    /// signed with `[signing]`'s key like the requests courtesy forwards (and like them, only
    /// over TLS).
    async fn ask_robots(
        &self,
        uri: &Uri,
        next: &Target,
        scheme: Scheme,
        user_agent: Option<&HeaderValue>,
    ) -> Result<Exchanged, Unsent> {
        if let Some(refused) = self.refuse_destination(next).await {
            // A robots.txt (or its redirect) at an address courtesy never dials: unreachable.
            return Err(Unsent::Done(Ok(Fetched::Unreachable(refused.details))));
        }
        let policy = self.config.get().policy_for(&next.host, next.port);
        let budget = match self.budget_key(next, &policy).await {
            Ok(budget) => budget,
            Err(failure) => return Err(Unsent::Done(Ok(Fetched::Unreachable(failure.details)))),
        };
        let permit = self.limiter.admit(Admission::of(&budget)).await;
        let permit = permit.map_err(|refusal| Unsent::Done(Err(NotFetched::Refused(refusal))))?;
        let mut request = Request::new(UpstreamBody::Empty);
        *request.uri_mut() = uri.clone();
        let headers = request.headers_mut();
        if let Some(ua) = user_agent {
            headers.insert(USER_AGENT, ua.clone());
        }
        headers.insert(VIA, self.loops.via().clone());
        if let Ok(host) = HeaderValue::from_str(next.host_header(scheme)) {
            headers.insert(HOST, host);
        }
        let signing = crate::proxy::send::sign::Signing::own(&self.config.get(), &policy)
            .filter(|_| request.uri().scheme_str() == Some("https"));
        if let Some(signing) = signing.filter(|s| s.signs_now(&self.challenged, &budget.key)) {
            signing.sign(&mut request);
        }
        self.exchange(permit, request).await.map_err(|unanswered| {
            if unanswered.stale {
                return Unsent::Stale(unanswered.failure);
            }
            let failure = unanswered.failure;
            match failure.kind {
                ProxyError::TlsCertificateError
                | ProxyError::ConnectionLimitReached
                | ProxyError::ProxyInternalError => {
                    Unsent::Done(Err(NotFetched::Untrusted(failure)))
                }
                _ => Unsent::Done(Ok(Fetched::Unreachable(failure.details))),
            }
        })
    }
}

/// The URL of a robots.txt (or of a redirect on the way to one) as a target, or `None` when it is
/// no URL courtesy can fetch.
fn robots_target(url: &str) -> Option<(Uri, Target, Scheme)> {
    let uri = url.parse::<Uri>().ok()?;
    let (target, scheme) = Target::of_any(&uri).ok()?;
    Some((uri, target, scheme))
}

/// What a robots.txt response that is not a redirect comes to: its rules (at most
/// [`robots::MAX_BYTES`] of them read), none (a 4xx), or unreachable (a 429 or 5xx, or a body
/// that failed). The permit is held until the body is read.
async fn read_robots(exchanged: Exchanged) -> Fetched {
    let status = exchanged.response.status();
    if status.as_u16() == 429 || status.is_server_error() {
        return Fetched::Unreachable(format!("it answered {}", status.as_u16()));
    }
    if !status.is_success() {
        return Fetched::Unavailable(status.as_u16());
    }
    let (_permit, _idle) = (exchanged.permit, exchanged.idle);
    // Kept as its own Cache-Control says (RFC 9309 2.4), at most a day.
    let lifetime = explicit_lifetime(exchanged.response.headers(), SystemTime::now());
    let keep = robots::keep_for(lifetime);
    let mut body = exchanged.response.into_body();
    let mut text = Vec::new();
    while text.len() < robots::MAX_BYTES {
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    let room = robots::MAX_BYTES - text.len();
                    text.extend_from_slice(&data[..data.len().min(room)]);
                }
            }
            Some(Err(e)) => return Fetched::Unreachable(format!("reading robots.txt failed: {e}")),
            None => break,
        }
    }
    Fetched::Rules(text, keep)
}
