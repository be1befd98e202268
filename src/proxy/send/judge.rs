//! What the origin's answer becomes: a signed resend after a host asked for a signature, the
//! stored 200 for a 304 to a revalidation, courtesy's own retry of a 429/503 (after a look for a
//! challenge page), a WebSocket joined on its `101`, or else the response streamed back.

use std::ops::ControlFlow;
use std::time::Duration;

use http::{Response, StatusCode};
use hyper::body::Incoming;
use tracing::{info, warn};

use crate::budget::limiter::Permit;
use crate::proxy::answer::body::ProxyBody;
use crate::proxy::connect::upgrade;
use crate::proxy::forward::context::{Flow, RequestContext};
use crate::proxy::send::attempts::Attempts;
use crate::proxy::send::exchange::{Exchanged, TurnHeld};
use crate::proxy::Proxy;
use crate::util::log_line::direct::{self, Value};

impl Proxy {
    /// What the origin's answer becomes: `Continue` is courtesy's retry of a 429/503 or its
    /// signed resend; `Break` the client's answer.
    pub(crate) async fn judge_answer(
        &self,
        exchanged: Exchanged,
        attempts: &mut Attempts,
        cx: &mut RequestContext<'_>,
    ) -> Flow {
        let status = exchanged.response.status().as_u16();
        let (answer, key) = (&exchanged.response, cx.budget.key.as_str());
        if attempts.resend_signed(answer, &self.challenged, key, &exchanged.policy) {
            info!(
                status,
                "the host asks for signatures: sending once more, signed"
            );
            return ControlFlow::Continue(());
        }
        let (permit, policy, latency) = (exchanged.permit, exchanged.policy, exchanged.latency);
        let revalidated = match &cx.cache_use {
            Some(plan) => {
                let fresh = exchanged.response.headers();
                self.revalidated(plan, status, fresh).await
            }
            None => None,
        };
        if let Some(answer) = revalidated {
            let answer = self.share_local(answer, cx);
            info!(
                status,
                latency_ms = latency.as_millis() as u64,
                "revalidated: answered from the cache"
            );
            return ControlFlow::Break(answer);
        }
        log_upstream_response(status, latency, &permit, attempts.attempt);
        let mut response = exchanged.response;
        let mut ahead = None;
        if attempts.retry_after(status, &policy, || permit.cooldown_left()) {
            match self.block_before_resend(response, &permit, &policy).await {
                None => {
                    info!(
                        attempt = attempts.attempt,
                        "retrying after the cooldown (retry_idempotent)"
                    );
                    return ControlFlow::Continue(());
                }
                Some(block) => {
                    response = block.response;
                    ahead = Some(block.ahead).filter(|a| !a.is_empty());
                }
            }
        }
        let held = TurnHeld {
            permit,
            idle: exchanged.idle,
        };
        if response.status() == StatusCode::SWITCHING_PROTOCOLS {
            return ControlFlow::Break(self.switch(response, attempts, held));
        }
        let request = attempts.request_headers();
        let response = self.finish_response(response, held, (&policy, request), cx);
        ControlFlow::Break(match ahead {
            Some(first) => response.map(|rest| ProxyBody::Prefixed {
                first: Some(first),
                rest: Box::new(rest),
            }),
            None => response,
        })
    }

    /// An origin's `101`: joined only when it switches to the WebSocket the client asked for;
    /// any other is refused, and its connection dropped with it.
    fn switch(
        &self,
        response: Response<Incoming>,
        attempts: &mut Attempts,
        held: TurnHeld,
    ) -> Response<ProxyBody> {
        let refused = match attempts.upgrade.take() {
            Some(client) if upgrade::switches(&response) => {
                return self.join(response, client, held);
            }
            Some(_) => "the origin's 101 switches to another protocol than the WebSocket asked for",
            None => "the origin answered 101 to a request that asked to switch to nothing",
        };
        warn!("{refused}");
        upgrade::refused_switch(refused)
    }
}

/// The line per response (`upstream response`, at `info`): written straight into the log when it
/// can be (`log_line::direct`), else through `tracing`; the same bytes either way.
fn log_upstream_response(status: u16, latency: Duration, permit: &Permit, attempt: u32) {
    if !tracing::enabled!(tracing::Level::INFO) {
        return;
    }
    let latency_ms = latency.as_millis() as u64;
    let wait_ms = permit.waited().as_millis() as u64;
    let rate = permit.host_rate();
    let fields = [
        ("status", Value::Unsigned(u64::from(status))),
        ("latency_ms", Value::Unsigned(latency_ms)),
        ("wait_ms", Value::Unsigned(wait_ms)),
        ("rate", Value::Float(rate)),
        ("attempt", Value::Unsigned(u64::from(attempt))),
    ];
    if !direct::write_line(module_path!(), "upstream response", &fields) {
        info!(
            status,
            latency_ms, wait_ms, rate, attempt, "upstream response"
        );
    }
}
