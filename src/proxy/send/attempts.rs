//! One forwarded request's sends: the client's own request the first time, a rebuilt copy of a
//! bodiless one for courtesy's resends (on a fresh connection after a stale pooled one,
//! `retry_idempotent` after a 429/503, and once signed after a host asked for a signature), how
//! each turn is asked of the limiter, and each send signed as it leaves. `send/mod.rs`
//! runs the loop; this is the state it carries from one attempt to the next.

use http::{Method, Request, StatusCode};
use http_body::Body as _;
use hyper::body::Incoming;

use crate::config::{HostPolicy, OnCooldown, Priority};
use crate::proxy::answer::failure::{Failure, H2Signal};
use crate::proxy::connect::upgrade::ClientUpgrade;
use crate::proxy::send::exchange::Unanswered;
use crate::proxy::send::sign::{is_challenge, Challenged, Signing};
use crate::upstream::pool::{Replay, UpstreamBody};
use std::sync::Arc;

use crate::budget::jobs::{JobState, QuotaTicket};
use crate::budget::limiter::lanes::JobTag;
use crate::budget::limiter::{Admission, BudgetKey, ShadowReason};
use crate::proxy::answer::response::ProxyError;
use crate::proxy::forward::context::RequestContext;

/// The state carried across a request's attempts.
pub(crate) struct Attempts {
    /// The client's request, until it is first sent (or refused: then its body goes back unread).
    first: Option<Request<UpstreamBody>>,
    /// What rebuilds the request for a resend; only a bodiless GET/HEAD/OPTIONS has one.
    replay: Option<Replay>,
    /// courtesy's own retries after a 429/503 so far (`retry_idempotent`).
    pub(crate) attempt: u32,
    /// Sends to the origin so far, every resend included (`Courtesy-Tries`).
    pub(crate) tries: u32,
    /// The request was already sent again after a stale pooled connection: that is done once.
    pub(crate) fresh_retry: bool,
    /// The client's (or the CONNECT's) `Courtesy-On-Cooldown`, for the client's own send.
    asked: Option<OnCooldown>,
    /// The host's `on_cooldown`, for courtesy's resends when the client named none.
    host_answer: OnCooldown,
    /// What would have refused a report-only host's request, reported with its first turn.
    shadow_refused: Option<ShadowReason>,
    /// The request's job, as the host's queue sees it (`None`: "anonymous").
    job: Option<JobTag>,
    /// What courtesy keeps for the job (its report-only counts).
    job_state: Option<Arc<JobState>>,
    /// The request's class within its job.
    priority: Priority,
    /// Its place in the job's quota: spent at its first turn.
    ticket: Option<QuotaTicket>,
    /// How its sends are signed (`None`: never).
    signing: Option<Signing>,
    /// Whether the send in flight was signed.
    signed: bool,
    /// It was sent once more, signed, after its host asked for a signature: that is done once.
    pub(crate) challenge_retry: bool,
    /// It was sent once more after an HTTP/2 REFUSED_STREAM or GOAWAY: that is done once.
    stream_retry: bool,
    /// It was sent once more over HTTP/1.1 after its host fell back from HTTP/2: done once.
    h1_retry: bool,
    /// The client's wish to switch protocols (a WebSocket handshake), joined on a `101`.
    pub(crate) upgrade: Option<ClientUpgrade>,
}

/// Why a request under signing left unsigned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unsigned {
    /// It went over plain `http://`: signatures travel over TLS only.
    PlainHttp,
}

impl Attempts {
    /// The headers of the request as courtesy sends it, when it can be sent again (a bodiless
    /// GET, HEAD or OPTIONS): what the response store judges its answer with.
    pub(crate) fn request_headers(&self) -> Option<&http::HeaderMap> {
        self.replay.as_ref().map(Replay::headers)
    }

    /// The attempts of the request with this head and the body in `cx.unread`, carrying what
    /// the earlier phases left in the context: what it asked of courtesy, a report-only host's
    /// would-be refusal, its job and quota place, its signing, a WebSocket's wish to switch, and
    /// its host's `on_cooldown` (what courtesy's resends wait out when the client named none).
    pub(crate) fn new(head: http::request::Parts, cx: &mut RequestContext<'_>) -> Self {
        let replay = replayable(&head.method, cx.unread.as_ref()).then(|| Replay::of(&head));
        let body = cx
            .unread
            .take()
            .map_or(UpstreamBody::Empty, UpstreamBody::Client);
        let caller = &cx.asking.caller;
        Attempts {
            first: Some(Request::from_parts(head, body)),
            replay,
            attempt: 0,
            tries: 0,
            fresh_retry: false,
            asked: cx.asked.on_cooldown,
            host_answer: cx.policy.cooldown.on_cooldown,
            shadow_refused: cx.shadow_refused.take(),
            job: Some(caller.tag()),
            job_state: Some(caller.state.clone()),
            priority: cx.asked.priority,
            ticket: cx.ticket.take(),
            signing: cx.signing.take(),
            signed: false,
            challenge_retry: false,
            stream_retry: false,
            h1_retry: false,
            upgrade: cx.upgrade.take(),
        }
    }

    /// How courtesy's own resends answer a cooldown: as the request would (its own
    /// `Courtesy-On-Cooldown`, else its host's `on_cooldown`). A resend is there to wait a
    /// window out, so under "reject" none waits: the origin's answer is the client's.
    fn resend_answer(&self) -> OnCooldown {
        self.asked.unwrap_or(self.host_answer)
    }

    /// Signs the send about to leave, when it is to be signed (now, after its wait: a resend is
    /// signed again, so no signature is older than its send).
    /// Only a request that leaves over TLS is signed: over plain `http://` anyone on the path
    /// could lift the signature and use it until it expires (`Unsigned::PlainHttp`).
    pub(crate) fn sign<B>(
        &mut self,
        request: &mut Request<B>,
        challenged: &Challenged,
        key: &str,
    ) -> Option<Unsigned> {
        self.signed = false;
        let signing = self
            .signing
            .as_ref()
            .filter(|s| s.signs_now(challenged, key))?;
        if request.uri().scheme_str() != Some("https") {
            return Some(Unsigned::PlainHttp);
        }
        signing.sign(request);
        self.signed = true;
        None
    }

    /// After an unsigned send under `on_challenge` was refused with `Accept-Signature`: the
    /// host is remembered as asking, and whether the request goes once more, signed (when it
    /// can be rebuilt and has not been yet; never for a report-only host, which gets no resends
    /// of courtesy's own).
    pub(crate) fn resend_signed<B>(
        &mut self,
        answer: &http::Response<B>,
        challenged: &Challenged,
        key: &str,
        policy: &HostPolicy,
    ) -> bool {
        let (status, headers) = (answer.status().as_u16(), answer.headers());
        let waits = self
            .signing
            .as_ref()
            .is_some_and(Signing::waits_for_challenge);
        if !waits || self.signed || !is_challenge(status, headers) {
            return false;
        }
        challenged.remember(key);
        let resend = self.replay.is_some() && policy.scope.enforce && !self.challenge_retry;
        self.challenge_retry |= resend;
        resend
    }

    /// What courtesy keeps for the request's job.
    pub(crate) fn job_state(&self) -> Option<&Arc<JobState>> {
        self.job_state.as_ref()
    }

    /// The request has its turn: its place in the job's quota is used (once, whatever courtesy
    /// resends).
    pub(crate) fn spend_quota(&mut self) {
        if let Some(mut ticket) = self.ticket.take() {
            ticket.spend();
        }
    }

    /// How the next turn is asked for. The client's cooldown choice is for its own send;
    /// courtesy's resends wait out a cooldown as [`Attempts::resend_answer`] says (a retry after
    /// a 429/503 is there to wait it out).
    pub(crate) fn admission<'a>(&mut self, budget: &'a BudgetKey) -> Admission<'a> {
        let admission = match &self.job {
            Some(job) => Admission::of(budget).job(job.clone(), self.priority),
            None => Admission::of(budget),
        };
        admission
            .on_cooldown(if self.tries > 0 {
                Some(self.resend_answer())
            } else {
                self.asked
            })
            .refused(self.shadow_refused.take())
    }

    /// The client's body when its request was never sent, so that it can be settled.
    pub(crate) fn unread(&mut self) -> Option<Incoming> {
        self.first
            .take()
            .and_then(|r| r.into_body().into_client_body())
    }

    /// The request to send now: the client's the first time, a rebuilt one after that.
    pub(crate) fn next_request(&mut self) -> Result<Request<UpstreamBody>, Failure> {
        self.tries += 1;
        match (self.first.take(), &self.replay) {
            (Some(request), _) => Ok(request),
            (None, Some(replay)) => Ok(replay.request()),
            (None, None) => Err(Failure::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                ProxyError::ProxyInternalError,
                "a request with a body cannot be sent twice",
            )),
        }
    }

    /// Whether a request that went out on a dead pooled connection may be sent once more.
    pub(crate) fn may_resend_fresh(&self, unanswered: &Unanswered) -> bool {
        unanswered.stale && self.replay.is_some() && !self.fresh_retry
    }

    /// Whether a request an HTTP/2 origin refused (REFUSED_STREAM) or did not reach before a
    /// GOAWAY is sent once more (RFC 9113 8.7 and 6.8: it was not processed), when it can be
    /// rebuilt; counted if so. It waits for the cooldown the refusal started, if it started one.
    pub(crate) fn may_resend_refused(&mut self, unanswered: &Unanswered) -> bool {
        let resend = unanswered.failure.h2.is_some_and(H2Signal::unprocessed)
            && self.replay.is_some()
            && !self.stream_retry;
        self.stream_retry |= resend;
        resend
    }

    /// Whether a request its host answered with a fallback to HTTP/1.1 (a 421 over HTTP/2, an
    /// HTTP/2 protocol error) is sent once more, now over HTTP/1.1, when it can be rebuilt;
    /// counted if so.
    pub(crate) fn may_resend_over_http1(&mut self) -> bool {
        let resend = self.replay.is_some() && !self.h1_retry;
        self.h1_retry |= resend;
        resend
    }

    /// Whether courtesy retries after the origin answered `status` (counting the retry if so),
    /// with `cooldown_left` of the window the answer started: only through a window the retry
    /// would be held through, so that the client never waits longer for the origin's answer
    /// than it would for courtesy's own 429.
    pub(crate) fn retry_after(
        &mut self,
        status: u16,
        policy: &HostPolicy,
        cooldown_left: impl FnOnce() -> Option<std::time::Duration>,
    ) -> bool {
        // A report-only host gets no retries of courtesy's own: they could not wait out the
        // cooldown, and report-only never adds a request. The cooldown (under the host's lock)
        // is looked at only for an answer that could be retried.
        let retry = self.replay.is_some()
            && policy.scope.enforce
            && self.attempt < policy.cooldown.retry_idempotent
            && matches!(status, 429 | 503)
            && self.resend_answer().holds(
                cooldown_left().unwrap_or_default(),
                policy.cooldown.max_hold,
            );
        if retry {
            self.attempt += 1;
        }
        retry
    }
}

/// Whether a request with this method and body (`None`: gone) may be rebuilt and sent again.
pub(crate) fn replayable(method: &Method, body: Option<&Incoming>) -> bool {
    // Only a bodiless GET/HEAD/OPTIONS can be sent again: keep what is needed to rebuild it.
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
        && body.is_some_and(|body| body.is_end_stream())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::for_tests::{context, head};
    use crate::proxy::Asking;

    #[test]
    fn a_request_that_cannot_be_rebuilt_is_sent_once_and_never_retried() {
        let asking = Asking::for_tests();
        let page = head("GET", "http://a.test/", &[]);
        let mut cx = context(&asking, &page, |_| {});
        let policy = cx.policy.clone();
        let mut attempts = Attempts::new(page, &mut cx);
        assert!(attempts.next_request().is_ok());
        assert_eq!(attempts.tries, 1);
        assert!(!attempts.retry_after(503, &policy, || None));
        assert!(!attempts.may_resend_over_http1());
        let again = attempts.next_request().expect_err("no second send");
        assert_eq!(again.status, StatusCode::INTERNAL_SERVER_ERROR);
    }

    #[test]
    fn the_clients_choice_is_for_its_own_send_and_the_hosts_for_courtesys_resends() {
        let asking = Asking::for_tests();
        let page = head("GET", "http://a.test/", &[]);
        let mut cx = context(&asking, &page, |policy| {
            policy.cooldown.on_cooldown = OnCooldown::Hold;
        });
        cx.asked.on_cooldown = None;
        let attempts = Attempts::new(page, &mut cx);
        assert_eq!(attempts.asked, None);
        assert_eq!(attempts.resend_answer(), OnCooldown::Hold);
        assert!(attempts.job.is_some() && attempts.ticket.is_none());
    }
}
