//! Sending a forwarded request under its turn: the attempts it takes (`attempts.rs`), each signed
//! as it leaves (`sign.rs`), the one paced exchange with the origin (`exchange.rs`), the answer
//! made fit to pass on (`sanitize.rs`), and the look at a 429/503 before courtesy sends again
//! (`before_resend.rs`); the host's turn (`turn.rs`) and what each answer becomes (`judge.rs`).

pub(crate) mod attempts;
pub(crate) mod before_resend;
pub(crate) mod exchange;
pub(crate) mod judge;
pub(crate) mod sanitize;
pub(crate) mod sign;
pub(crate) mod turn;

use std::ops::ControlFlow;

use http::request::Parts;
use http::{Response, StatusCode, Version};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::{capture_connection, CaptureConnection};
use tracing::{info, warn};

use crate::observe::telemetry::RequestTrace;
use crate::pacing::feedback::crawler_price;
use crate::proxy::answer::body::ProxyBody;
use crate::proxy::answer::failure::H2Signal;
use crate::proxy::forward::context::{Flow, RequestContext};
use crate::proxy::forward::quota::with_quota_headers;
use crate::proxy::Proxy;
use crate::upstream::pool::UpstreamBody;
use crate::wire::scheme::Scheme;
use attempts::{Attempts, Unsigned};
use exchange::{Exchanged, Unanswered};

impl Proxy {
    /// The last phase: takes the host's turn and sends, again and again while courtesy resends
    /// or retries, until there is an answer for the client; the answer then carries the stated
    /// preferences met, the licences of the host's robots.txt (RSL 1.0: reported, never
    /// enforced) and the job's quota.
    pub(crate) async fn send_until_answered(
        &self,
        head: Parts,
        cx: &mut RequestContext<'_>,
    ) -> Response<ProxyBody> {
        let licensed = cx
            .policy
            .robots
            .obey
            .then(|| Scheme::of_uri_or_http(&head.uri));
        let mut attempts = Attempts::new(head, cx);
        let mut answer = loop {
            if let ControlFlow::Break(answer) = self.attempt(&mut attempts, cx).await {
                break answer;
            }
        };
        cx.trail.tries = attempts.tries;
        if let Some(checked) = cx.checked.take() {
            self.report_preferences(&mut answer, checked, &cx.asking.caller.state);
        }
        if let Some(scheme) = licensed {
            self.report_licenses(&mut answer, &cx.target, scheme);
        }
        with_quota_headers(answer, &cx.asking.caller)
    }

    /// One turn and one send: the host's turn, the request (the client's, or a rebuilt one), the
    /// exchange, and what its answer becomes. `Break` is the client's answer; `Continue` takes
    /// another turn: once for a request sent on a pooled connection the origin had closed, when it
    /// can be rebuilt, and for courtesy's own retries.
    async fn attempt(&self, attempts: &mut Attempts, cx: &mut RequestContext<'_>) -> Flow {
        let permit = match self.take_turn(attempts, cx).await {
            Ok(permit) => permit,
            Err(refused) => {
                cx.unread = attempts.unread();
                return ControlFlow::Break(refused);
            }
        };
        attempts.spend_quota();
        let mut request = match attempts.next_request() {
            Ok(request) => request,
            Err(failure) => return ControlFlow::Break(failure.into_response()),
        };
        self.sign(&mut request, attempts, &cx.budget.key);
        let upgrade_capture = attempts
            .upgrade
            .is_some()
            .then(|| capture_connection(&mut request));
        let exchanged = match self.traced_exchange(permit, request, cx.trace()).await {
            Ok(exchanged) => exchanged,
            Err(unanswered) => return resend_or_fail(attempts, unanswered),
        };
        cx.trail.held.answered(exchanged.latency);
        let response = &exchanged.response;
        if let Some(capture) = upgrade_capture {
            poison_unless_switched(&capture, response);
        }
        if response.status() == StatusCode::MISDIRECTED_REQUEST
            && response.version() == Version::HTTP_2
            && attempts.may_resend_over_http1()
        {
            info!("421 over HTTP/2: sending once more over HTTP/1.1");
            return ControlFlow::Continue(());
        }
        if let Some(price) = crawler_price(response.status(), response.headers()) {
            // Pay per crawl: counted with its price, and passed to the client untouched.
            info!(price, "priced answer (402 crawler-price)");
            if let Some(job) = attempts.job_state() {
                job.count_priced(&cx.budget.key, price);
                self.metrics.priced(job, &cx.budget.key);
            }
        }
        self.judge_answer(exchanged, attempts, cx).await
    }

    /// Signs the send about to leave when it is to be signed; a host reached over plain http
    /// while signing is on is named once in the log.
    fn sign(&self, request: &mut http::Request<UpstreamBody>, attempts: &mut Attempts, key: &str) {
        if let Some(Unsigned::PlainHttp) = attempts.sign(request, &self.challenged, key) {
            if self.plain_unsigned.first(key) {
                warn!(
                    host = %key,
                    "signing is on, but requests to this host go over plain http: sent unsigned (signatures travel over TLS only)"
                );
            }
        }
    }

    /// The exchange, inside a `courtesy.upstream` span when traces are on (the client's
    /// `traceparent` replaced by the span's).
    async fn traced_exchange(
        &self,
        permit: crate::budget::limiter::Permit,
        mut request: http::Request<UpstreamBody>,
        trace: Option<&RequestTrace>,
    ) -> Result<Exchanged, Unanswered> {
        let upstream = trace.map(|trace| {
            let host = request.uri().host().unwrap_or_default();
            let span = trace.upstream(request.method().as_str(), host);
            span.pass_on(request.headers_mut());
            span
        });
        let exchanged = self.exchange(permit, request).await;
        if let Some(span) = upstream {
            span.end(match &exchanged {
                Ok(answer) => Ok(answer.response.status().as_u16()),
                Err(unanswered) => Err(unanswered.failure.kind.token()),
            });
        }
        exchanged
    }
}

/// A send that got no response: sent once more (through the budget) when courtesy may, else its
/// failure is the client's answer.
fn resend_or_fail(attempts: &mut Attempts, unanswered: Unanswered) -> Flow {
    if attempts.may_resend_fresh(&unanswered) {
        // Sent once more, through the budget; the dead connection has left the pool.
        attempts.fresh_retry = true;
        info!("sending once more on a fresh connection");
        return ControlFlow::Continue(());
    }
    if attempts.may_resend_refused(&unanswered) {
        info!(
            "sending once more after the cooldown: {}",
            unanswered.failure.details
        );
        return ControlFlow::Continue(());
    }
    if unanswered.failure.h2 == Some(H2Signal::ProtocolError) && attempts.may_resend_over_http1() {
        info!("sending once more over HTTP/1.1");
        return ControlFlow::Continue(());
    }
    ControlFlow::Break(unanswered.failure.into_response())
}

/// A handshake answered otherwise than `101`: the origin may have switched all the same, so its
/// connection never carries another request.
fn poison_unless_switched(capture: &CaptureConnection, response: &Response<Incoming>) {
    if response.status() != StatusCode::SWITCHING_PROTOCOLS {
        if let Some(connected) = capture.connection_metadata().as_ref() {
            connected.poison();
        }
    }
}
