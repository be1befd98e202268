//! The local answers before the host's turn, so that a refused request spends none of the budget:
//! requests that would come back to courtesy (`loops.rs`), `skip_resources` (`skip.rs`),
//! robots.txt (`robots.rs`) and the site's stated preferences (`preferences.rs`). For a
//! report-only host a refusal is only noted, and the request goes on.

pub(crate) mod loops;
pub(crate) mod preferences;
pub(crate) mod robots;
pub(crate) mod skip;

use std::ops::ControlFlow;

use http::request::Parts;
use tokio::time::Instant;
use tracing::info;

use crate::budget::limiter::ShadowReason;
use crate::proxy::answer::failure::Failure;
use crate::proxy::forward::context::{Flow, RequestContext};
use crate::proxy::Proxy;
use skip::skipped_resource;

impl Proxy {
    /// The refusals that come before the host's turn (`skip_resources`, then robots.txt), so that
    /// a refused request spends none of the budget. For a report-only host, what would have
    /// refused the request goes in `cx.shadow_refused`, to be reported with its turn, and the
    /// request goes on.
    pub(crate) async fn refuse_before_turn(
        &self,
        head: &Parts,
        cx: &mut RequestContext<'_>,
    ) -> Flow {
        let enforce = cx.policy.scope.enforce;
        if let Some(kind) = skipped_resource(head, &cx.policy.blocks.skip_resources) {
            let reason = format!("skip_resources: {kind} ({})", head.uri.path());
            if enforce {
                info!(%reason, "skipped locally");
                return ControlFlow::Break(Failure::denied(reason).into_response());
            }
            cx.shadow_refused = Some(ShadowReason::SkipResources);
            return ControlFlow::Continue(());
        }
        if !cx.policy.robots.obey || head.uri.path() == "/robots.txt" {
            return ControlFlow::Continue(());
        }
        let started = Instant::now();
        let robots = self.obey_robots(head, cx).await;
        if let Some(trace) = cx.trace() {
            trace.robots((started, Instant::now()), robots.is_none());
        }
        if let Some(refused) = robots {
            if enforce {
                return ControlFlow::Break(refused);
            }
            cx.shadow_refused = Some(ShadowReason::Robots);
        }
        ControlFlow::Continue(())
    }
}
