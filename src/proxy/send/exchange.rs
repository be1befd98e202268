//! The one paced send: a request that has its turn (a [`Permit`]) goes upstream, and whatever comes
//! back (a response, an error, no answer in time) is reported to the host's pacing, counted and
//! logged before the caller sees it. Forwarded requests and robots.txt fetches both go through here,
//! so a host's budget hears of every answer exactly once. Through a parent proxy, what the parent
//! itself failed (`crate::upstream::parent`) is counted and answered but not reported to the host: it is not
//! the target's feedback.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use http::header::{PROXY_AUTHORIZATION, RETRY_AFTER};
use http::{Request, Response};
use hyper::body::Incoming;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::budget::limiter::{Permit, UpstreamProtocol};
use crate::config::{HostPolicy, ParentScheme, Route, UpstreamHttp2, UpstreamProxy};
use crate::pacing::feedback::{self, Feedback};
use crate::pacing::policy::Answer;
use crate::proxy::answer::failure::{Failure, H2Signal};
use crate::proxy::answer::response::ProxyError;
use crate::proxy::send::sanitize::{sanitize, Framing};
use crate::proxy::Proxy;
use crate::upstream::parent;
use crate::upstream::pool::reuse;
use crate::upstream::pool::{IdleMark, UpstreamBody};

/// An upstream response with the permit it was sent under.
#[derive(Debug)]
pub(crate) struct Exchanged {
    /// The response; its body is still to be read.
    pub(crate) response: Response<Incoming>,
    /// Held until the body is done (the request is in flight until then).
    pub(crate) permit: Permit,
    /// The host's policy when the answer came.
    pub(crate) policy: Arc<HostPolicy>,
    /// Time from sending to the response headers.
    pub(crate) latency: Duration,
    /// Sets the connection that carried it idle when dropped: held until the body is done.
    pub(crate) idle: Option<IdleMark>,
}

/// What an answer's body holds while it streams: the turn's permit (the request is in flight
/// until the body is done) and the mark that sets the upstream connection idle when dropped.
#[derive(Debug)]
pub(crate) struct TurnHeld {
    /// The turn.
    pub(crate) permit: Permit,
    /// Sets the connection that carried the answer idle when dropped.
    pub(crate) idle: Option<IdleMark>,
}

/// A request that got no response.
#[derive(Debug)]
pub(crate) struct Unanswered {
    /// What the client is told if nothing else is tried.
    pub(crate) failure: Failure,
    /// The request went out on a reused pooled connection that the origin closed before any
    /// response byte: a bodiless idempotent request may be sent once more, on a fresh connection.
    pub(crate) stale: bool,
}

impl Unanswered {
    /// A failure that no resend on a fresh connection would repair.
    fn failed(failure: Failure) -> Self {
        Unanswered {
            failure,
            stale: false,
        }
    }
}

impl Proxy {
    /// Sends `request` under `permit`, the way the host's `upstream_proxy` says, within the
    /// response timeout. On success the answer has been reported, counted and any block or
    /// cooldown it started logged; on failure the failure has been reported (unless the connection
    /// was stale, or a parent proxy failed: then it is only counted and logged) and the permit
    /// released.
    pub(crate) async fn exchange(
        &self,
        mut permit: Permit,
        mut request: Request<UpstreamBody>,
    ) -> Result<Exchanged, Unanswered> {
        let route = permit.policy().forward.upstream.clone();
        let forwarded_through = self.through_parent(&route, &mut request)?;
        let head = request.method() == http::Method::HEAD;
        permit.mark_sent();
        let started = Instant::now();
        // No head within read_timeout_seconds is the origin's silence too (nginx's
        // proxy_read_timeout covers the head's read the same way).
        let timeout = self
            .config
            .get()
            .proxy
            .response_timeout
            .min(permit.policy().forward.read_timeout);
        // HTTP/2 is offered unless the host says off or fell back to HTTP/1.1.
        let offer_h2 = permit.policy().forward.http2 == UpstreamHttp2::Auto
            && !permit.upstream_protocol().is_fallback();
        let sending = self.client.request(&route, request, offer_h2);
        let result = tokio::time::timeout(timeout, sending).await;
        let latency = started.elapsed();
        let mut response = match result {
            Ok(Ok(response)) => response,
            Ok(Err(err)) => return Err(self.failed(&permit, &err, latency).await),
            Err(_) => return Err(self.timed_out(&permit, timeout, latency).await),
        };
        let idle = reuse::count_answered(&response);
        note_protocol(&permit, &response);
        if let Some(own) = forwarded_through.and_then(|p| parent::own_answer(p, &response)) {
            let failure = Failure::of_parent(&own);
            self.report_parent_failure(&permit, &failure);
            return Err(Unanswered::failed(failure));
        }
        self.sanitized(&mut response, head, &permit, latency)
            .await?;
        Ok(self.settled(response, permit, latency, idle).await)
    }

    /// The parent an `http://` request goes to in absolute form (through an HTTP parent, with
    /// its `Proxy-Authorization`: the parent's own answers then arrive as responses and are told
    /// from the target's); a parent that is courtesy itself is refused, never sent to.
    fn through_parent<'r>(
        &self,
        route: &'r Route,
        request: &mut Request<UpstreamBody>,
    ) -> Result<Option<&'r UpstreamProxy>, Unanswered> {
        let Some(parent) = route.parent() else {
            return Ok(None);
        };
        if let Some(failure) = self.loops.refuse_parent(parent) {
            // Never sent: the token goes back when the permit drops.
            return Err(Unanswered::failed(failure));
        }
        if parent.scheme != ParentScheme::Http || request.uri().scheme_str() != Some("http") {
            return Ok(None);
        }
        if let Some(auth) = parent::basic_auth(parent) {
            request.headers_mut().insert(PROXY_AUTHORIZATION, auth);
        }
        Ok(Some(parent))
    }

    /// The answer made fit to pass on (`sanitize`): a length beside a transfer coding dropped and
    /// the connection retired; framing that cannot be passed on is a failure, reported.
    async fn sanitized(
        &self,
        response: &mut Response<Incoming>,
        head: bool,
        permit: &Permit,
        latency: Duration,
    ) -> Result<(), Unanswered> {
        match sanitize(response, head) {
            Ok(Framing::AsSent) => Ok(()),
            Ok(Framing::LengthDropped) => {
                reuse::retire(response);
                info!(
                    "the origin sent Transfer-Encoding with Content-Length: the length \
                     dropped, the connection retired (RFC 9112 6.3)"
                );
                Ok(())
            }
            Err(failure) => {
                reuse::retire(response);
                self.report_failure(permit, &failure, latency).await;
                Err(Unanswered::failed(failure))
            }
        }
    }

    /// A send the pooled client failed: a parent's failure counted, an HTTP/2 protocol error
    /// turning the host to HTTP/1.1, and a stale pooled connection told from the origin's
    /// failure (only the latter is reported to the host).
    async fn failed(
        &self,
        permit: &Permit,
        err: &hyper_util::client::legacy::Error,
        latency: Duration,
    ) -> Unanswered {
        let failure = Failure::of_upstream(err);
        if failure.parent.is_some() {
            self.report_parent_failure(permit, &failure);
            return Unanswered::failed(failure);
        }
        let reused = reuse::count_failed(err);
        if failure.h2 == Some(H2Signal::ProtocolError) {
            warn!(
                "HTTP/2 protocol error: the host falls back to HTTP/1.1: {}",
                failure.details
            );
            permit.note_protocol(UpstreamProtocol::FellBackProtocolError);
        }
        // An HTTP/2 stream refused or cut by GOAWAY is the origin's word, not a stale
        // connection's.
        let stale =
            reused && failure.kind == ProxyError::ConnectionTerminated && failure.h2.is_none();
        if stale {
            // The origin closed a kept-alive connection as the request went out on it:
            // nothing to hold against the host.
            info!(
                "a pooled connection was closed under the request: {}",
                failure.details
            );
        } else {
            self.report_failure(permit, &failure, latency).await;
        }
        Unanswered { failure, stale }
    }

    /// No response head within `timeout`: the origin's silence, reported.
    async fn timed_out(&self, permit: &Permit, timeout: Duration, latency: Duration) -> Unanswered {
        let failure = Failure::response_timeout(format!(
            "no response headers from {} within {}s (response_timeout_seconds, \
             read_timeout_seconds)",
            permit.host_key(),
            timeout.as_secs_f64()
        ));
        self.report_failure(permit, &failure, latency).await;
        Unanswered::failed(failure)
    }

    /// An answer reported to the host's pacing, counted, and a block or cooldown it started
    /// logged.
    async fn settled(
        &self,
        response: Response<Incoming>,
        permit: Permit,
        latency: Duration,
        idle: Option<IdleMark>,
    ) -> Exchanged {
        let policy = permit.policy();
        let reaction = permit
            .report_settled(&answer_of(&response, latency, &policy))
            .await;
        let status = response.status().as_u16();
        self.metrics
            .response(permit.host_key(), status, latency, permit.waited());
        self.blocks
            .after_answer(&permit, &policy, &reaction, status);
        if let Some(window) = reaction.cooldown.filter(|_| !reaction.hard_block) {
            warn!(
                status,
                window_s = window.as_secs_f64(),
                rate_before = reaction.rate_before,
                rate = reaction.rate_after,
                "host cooling down"
            );
        }
        Exchanged {
            response,
            permit,
            policy,
            latency,
            idle,
        }
    }

    /// Counts and logs a request that a parent proxy failed. The host's pacing hears nothing of
    /// it: the target said nothing. The token it took stays spent (the permit was marked sent),
    /// which errs on the side of the target.
    fn report_parent_failure(&self, permit: &Permit, failure: &Failure) {
        let Some(parent) = failure.parent.as_deref() else {
            return;
        };
        self.metrics.parent_failure(
            Some((permit.host_key(), permit.waited())),
            &parent.next_hop,
            parent.kind.label(),
        );
        warn!(
            error = failure.kind.token(),
            parent = %parent.next_hop,
            received_status = parent.received_status,
            "parent proxy failed (not held against the target): {}",
            failure.details
        );
    }

    /// Feeds a request that got no response back into the host's pacing and logs it.
    async fn report_failure(&self, permit: &Permit, failure: &Failure, latency: Duration) {
        // A request courtesy could not send because of the client's own body, because courtesy
        // does not trust the host's certificate, because the name now resolves to an address
        // courtesy never dials, or because courtesy itself ran out of connections or
        // descriptors, says nothing of the host: no back-off, no rate cut.
        let feedback = match failure.kind {
            // REFUSED_STREAM and GOAWAY: the origin is busy, like a 503 without Retry-After.
            _ if failure.h2.is_some_and(H2Signal::is_overload) => Feedback::Overloaded,
            // A GOAWAY with NO_ERROR retires a connection (nginx after keepalive_requests): the
            // request that crossed it goes again, and says nothing of load.
            _ if failure.h2 == Some(H2Signal::Retiring) => Feedback::Neutral,
            ProxyError::HttpRequestError
            | ProxyError::TlsCertificateError
            | ProxyError::DestinationIpProhibited
            | ProxyError::ProxyLoopDetected
            // A limit or a resource of courtesy's own (max_upstream_connections, descriptors).
            | ProxyError::ConnectionLimitReached
            | ProxyError::ProxyInternalError => Feedback::Neutral,
            _ => Feedback::Failed,
        };
        let reaction = permit
            .report_settled(&Answer {
                feedback,
                status: None,
                latency,
                retry_after: None,
                server: None,
            })
            .await;
        self.metrics.failure(permit.host_key(), permit.waited());
        warn!(
            error = failure.kind.token(),
            latency_ms = latency.as_millis() as u64,
            cooldown_s = reaction.cooldown.map(|w| w.as_secs_f64()),
            rate = reaction.rate_after,
            "upstream failed: {}",
            failure.details
        );
    }
}

/// Notes the HTTP version `response` came over on its host; a 421 (Misdirected Request) over
/// HTTP/2 turns the host to HTTP/1.1.
fn note_protocol<B>(permit: &Permit, response: &Response<B>) {
    if response.status() == http::StatusCode::SWITCHING_PROTOCOLS {
        // A WebSocket's handshake went over HTTP/1.1 whatever the host's pages speak.
        return;
    }
    let protocol = match response.version() {
        http::Version::HTTP_2 if response.status() == http::StatusCode::MISDIRECTED_REQUEST => {
            warn!("421 Misdirected Request over HTTP/2: the host falls back to HTTP/1.1");
            UpstreamProtocol::FellBackMisdirected
        }
        http::Version::HTTP_2 => UpstreamProtocol::H2,
        _ => UpstreamProtocol::Http11,
    };
    permit.note_protocol(protocol);
}

/// What an upstream response says, for the host's pacing.
fn answer_of<B>(response: &Response<B>, latency: Duration, policy: &HostPolicy) -> Answer {
    let now = SystemTime::now();
    let headers = response.headers();
    let feedback = feedback::classify_answer(
        response.status(),
        headers,
        &policy.cooldown.backoff_statuses,
    );
    if feedback::crawler_price(response.status(), headers).is_some() {
        // A priced page (402 + crawler-price) asks for money, not for fewer requests: no
        // Retry-After or RateLimit window is taken from it (no pause, no rate cut).
        return Answer {
            feedback,
            status: Some(response.status().as_u16()),
            latency,
            retry_after: None,
            server: None,
        };
    }
    let retry_after = match feedback {
        Feedback::Throttled | Feedback::Overloaded => headers
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| feedback::retry_after(v, now)),
        _ => None,
    };
    let (server, malformed) = feedback::read_server_budget(headers, now);
    if let Some(field) = malformed {
        note_malformed(field);
    }
    Answer {
        feedback,
        status: Some(response.status().as_u16()),
        latency,
        retry_after,
        server,
    }
}

/// Says once per process, at debug, that a RateLimit field was ignored as malformed: not a
/// structured field of the draft's shape (docs/reacting.md). It is ignored for pacing either way.
fn note_malformed(field: &'static str) {
    static SAID: AtomicBool = AtomicBool::new(false);
    if !SAID.swap(true, Ordering::Relaxed) {
        debug!(
            field,
            "ignored a malformed {field} field (not an RFC 9651 structured field of the draft's shape); later ones are not logged"
        );
    }
}
