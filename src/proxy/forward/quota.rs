//! The job's quota on the request path: a place in it taken before the host's turn (a job past it
//! gets `response::quota_reached`; for a report-only host the request goes on and the refusal is
//! reported with its turn), and its `RateLimit-Policy` and `RateLimit` headers on every answer
//! of a job that has one.

use std::ops::ControlFlow;

use http::header::HeaderValue;
use http::Response;
use tracing::info;

use crate::budget::jobs::{Caller, QuotaTicket};
use crate::budget::limiter::ShadowReason;
use crate::proxy::answer::body::ProxyBody;
use crate::proxy::answer::response;
use crate::proxy::forward::context::{Flow, RequestContext};
use crate::proxy::Proxy;

impl Proxy {
    /// The request's place in its job's quota (`cx.ticket`), or the job's 429 when it is past it;
    /// the job is kept among those seen.
    pub(crate) fn reserve_quota(&self, cx: &mut RequestContext<'_>) -> Flow {
        let caller = &cx.asking.caller;
        match caller.reserve_now() {
            Ok(ticket) => cx.ticket = Some(ticket),
            Err(_) if !cx.policy.scope.enforce => {
                cx.ticket = Some(QuotaTicket::none());
                cx.shadow_refused = cx.shadow_refused.or(Some(ShadowReason::Quota));
            }
            Err(retry_after) => {
                info!("refused locally: the job's quota");
                let refused = response::quota_reached(caller.name(), retry_after);
                return ControlFlow::Break(with_quota_headers(refused, caller));
            }
        }
        self.jobs.keep(caller);
        ControlFlow::Continue(())
    }
}

/// The answer with the job's `RateLimit-Policy` and `RateLimit` headers, when it has a quota.
pub(crate) fn with_quota_headers(
    mut response: Response<ProxyBody>,
    caller: &Caller,
) -> Response<ProxyBody> {
    if let Some(left) = caller.quota_left_now() {
        let (policy, limit) = left.headers();
        let headers = response.headers_mut();
        for (name, value) in [("ratelimit-policy", policy), ("ratelimit", limit)] {
            if let Ok(value) = HeaderValue::from_str(&value) {
                headers.append(name, value);
            }
        }
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::proxy::for_tests::{context, head, proxy};
    use crate::proxy::Asking;

    #[tokio::test]
    async fn a_job_without_a_quota_gets_a_place_and_no_ratelimit_headers() {
        let proxy = proxy(Config::default(), "quota-none");
        let asking = Asking::for_tests();
        let page = head("GET", "http://a.test/", &[]);
        let mut cx = context(&asking, &page, |_| {});
        assert!(proxy.reserve_quota(&mut cx).is_continue());
        assert!(cx.ticket.is_some());
        assert_eq!(cx.shadow_refused, None);
        let answer = with_quota_headers(Response::new(ProxyBody::empty()), &asking.caller);
        assert!(!answer.headers().contains_key("ratelimit"));
    }
}
