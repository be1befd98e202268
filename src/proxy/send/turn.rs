//! The host's turn for one send: asked of the limiter with what the request asked for itself,
//! its wait added to the request's `Held` and counted, and a refusal logged, counted and made
//! the client's answer. A report-only host's turn is at once, and what enforcing would have done
//! is counted here.

use http::Response;
use tokio::time::Instant;
use tracing::info;

use crate::budget::limiter::{Permit, ShadowReason, ShadowVerdict, WaitReason};
use crate::proxy::answer::body::ProxyBody;
use crate::proxy::answer::response;
use crate::proxy::forward::context::RequestContext;
use crate::proxy::send::attempts::Attempts;
use crate::proxy::Proxy;

impl Proxy {
    /// Waits for the host's turn. A refusal (a cooldown in reject mode, a full queue, shutting
    /// down) is logged and counted here and comes back as the client's answer.
    pub(crate) async fn take_turn(
        &self,
        attempts: &mut Attempts,
        cx: &mut RequestContext<'_>,
    ) -> Result<Permit, Response<ProxyBody>> {
        let asked = Instant::now();
        let (budget, trail) = (&cx.budget, &mut cx.trail);
        match self.limiter.admit(attempts.admission(budget)).await {
            Ok(permit) => {
                trail.held.waited(permit.waited(), permit.wait_reason());
                self.metrics.turn(permit.wait_reason(), permit.waited());
                // A turn given at once is no wait: the root span says so (reason none, 0 ms).
                let waited = permit.wait_reason() != WaitReason::None || !permit.waited().is_zero();
                if let Some(trace) = trail.trace.as_ref().filter(|_| waited) {
                    let when = (asked, Instant::now());
                    trace.wait(when, permit.wait_reason(), permit.store_trip());
                }
                if let Some(verdict) = permit.shadow() {
                    self.report_shadow(&budget.key, &verdict);
                    if let Some(job) = attempts.job_state() {
                        job.count_shadow(verdict.job_would_wait);
                    }
                }
                Ok(permit)
            }
            Err(refusal) => {
                let waited = asked.elapsed();
                trail.held.waited(waited, refusal.wait_reason());
                self.metrics.turn(refusal.wait_reason(), waited);
                if let Some(trace) = &trail.trace {
                    trace.wait((asked, Instant::now()), refusal.wait_reason(), None);
                }
                info!(reason = ?refusal, "refused locally");
                self.metrics.refusal(&budget.key, &refusal);
                Err(response::refusal(&refusal, &budget.key))
            }
        }
    }

    /// A report-only host's turn is always at once: what enforcing would have done is counted,
    /// and logged when it would have made a difference.
    fn report_shadow(&self, key: &str, verdict: &ShadowVerdict) {
        self.metrics.shadow(key, verdict);
        if verdict.waits || verdict.would_refuse.is_some() || verdict.inside_window {
            info!(
                would_wait_ms = verdict.would_wait.as_millis() as u64,
                would_refuse = verdict.would_refuse.map(ShadowReason::as_str),
                inside_window = verdict.inside_window,
                "report-only: forwarded at once"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::proxy::for_tests::{context, head, proxy};
    use crate::proxy::Asking;

    #[tokio::test]
    async fn a_turn_given_at_once_holds_the_request_for_no_reason() {
        let proxy = proxy(Config::default(), "turn-at-once");
        let asking = Asking::for_tests();
        let page = head("GET", "http://a.test/", &[]);
        let mut cx = context(&asking, &page, |_| {});
        let mut attempts = Attempts::new(page, &mut cx);
        let permit = proxy.take_turn(&mut attempts, &mut cx).await;
        assert!(
            permit.is_ok(),
            "the first request to an idle host goes at once"
        );
        assert_eq!(cx.trail.held.reason(), WaitReason::None);
    }

    #[tokio::test]
    async fn a_refused_turn_is_the_clients_answer() {
        let proxy = proxy(Config::default(), "turn-refused");
        proxy.limiter.shutdown();
        let asking = Asking::for_tests();
        let page = head("GET", "http://a.test/", &[]);
        let mut cx = context(&asking, &page, |_| {});
        let mut attempts = Attempts::new(page, &mut cx);
        let Err(answer) = proxy.take_turn(&mut attempts, &mut cx).await else {
            panic!("a turn while shutting down");
        };
        assert_eq!(answer.status(), http::StatusCode::SERVICE_UNAVAILABLE);
        assert!(answer.headers().contains_key("proxy-status"));
    }
}
