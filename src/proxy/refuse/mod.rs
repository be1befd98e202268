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

use crate::config::ContentPreferences;
use crate::wire::scheme::Scheme;
use tokio::time::Instant;
use tracing::info;

use crate::budget::limiter::ShadowReason;
use crate::proxy::answer::failure::Failure;
use crate::proxy::forward::context::{Flow, RequestContext};
use crate::proxy::Proxy;
use preferences::{purpose_of, Checked};
use skip::skip_reason;

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
        if let Some(reason) = skip_reason(head, &cx.policy) {
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
        // The clock is read for the trace only (most requests have none).
        let started = cx.trace().map(|_| Instant::now());
        let robots = self.obey_robots(head, cx).await;
        if let (Some(trace), Some(started)) = (cx.trace(), started) {
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

    /// Checks the purpose of the request against what the host states before it is sent: what
    /// was met goes in `cx.checked`, to be reported on the answer (nothing when
    /// `content_preferences = "off"`, for a request with no purpose, or for robots.txt itself).
    /// The local 403 of "enforce" (or the answer when robots.txt could not be asked for) ends
    /// the request.
    pub(crate) async fn check_preferences(
        &self,
        head: &Parts,
        cx: &mut RequestContext<'_>,
    ) -> Flow {
        let checked = match self.decide_preferences(head, cx, true).await {
            Ok(Some(checked)) => checked,
            Ok(None) => return ControlFlow::Continue(()),
            Err(answer) => return ControlFlow::Break(answer),
        };
        let caller = &cx.asking.caller;
        if let Some(refused) = checked.before.as_ref().filter(|_| checked.enforce) {
            let details = refused.details();
            info!(%details, purpose = ?checked.purpose, "refused locally: the site's stated preferences");
            let counted = (caller.state.as_ref(), checked.host.as_str());
            self.metrics
                .content_preference(counted, checked.purpose, refused.source, true);
            caller
                .state
                .preferences_enforced
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return ControlFlow::Break(Failure::denied(details).into_response());
        }
        cx.checked = Some(checked);
        ControlFlow::Continue(())
    }

    /// The decision half of [`Proxy::check_preferences`], which `Proxy::check` shares: what the
    /// request's purpose meets in the host's stated preferences (`None`: nothing is checked), and
    /// whether a refusal is enforced. robots.txt is made known first (fetched through the budget
    /// when unknown) unless `fetch` is false, when only what is known is read. `Err` is the
    /// local answer when robots.txt could not be asked for. Counts nothing.
    pub(crate) async fn decide_preferences(
        &self,
        head: &Parts,
        cx: &RequestContext<'_>,
        fetch: bool,
    ) -> Result<Option<Checked>, http::Response<crate::proxy::answer::body::ProxyBody>> {
        let (policy, caller) = (&cx.policy, &cx.asking.caller);
        let mode = policy.preferences.content_preferences;
        if mode == ContentPreferences::Off || head.uri.path() == "/robots.txt" {
            return Ok(None);
        }
        let Some(purpose) = purpose_of(caller, policy) else {
            return Ok(None);
        };
        // A report-only host (`enforce = false`) refuses nothing: a refusal is reported.
        let enforce = mode == ContentPreferences::Enforce && policy.scope.enforce;
        // Its verdict is obey_robots' business; here robots.txt is only made known.
        if fetch {
            self.robots_known(head, cx).await?;
        }
        let origin = cx.target.origin_key(Scheme::of_uri_or_http(&head.uri));
        let path = head.uri.path_and_query().map_or("/", |p| p.as_str());
        let agent = Self::robots_agent(head, policy);
        let before = self
            .robots
            .preference_refusal(&origin, agent, path, purpose)
            .or_else(|| self.stated.refusal(&origin, path, purpose, Instant::now()));
        Ok(Some(Checked {
            purpose,
            enforce,
            origin,
            path: path.to_string(),
            host: cx.budget.key.clone(),
            before,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, HostPolicy, ResourceKind};
    use crate::proxy::for_tests::{context, head, proxy};
    use crate::proxy::Asking;

    /// A host that skips images and does not read robots.txt, enforcing or report-only.
    fn skipping_images(enforce: bool) -> impl FnOnce(&mut HostPolicy) {
        move |policy| {
            policy.blocks.skip_resources = vec![ResourceKind::Image];
            policy.robots.obey = false;
            policy.scope.enforce = enforce;
        }
    }

    #[tokio::test]
    async fn a_skipped_resource_is_a_local_403_before_any_turn() {
        let proxy = proxy(Config::default(), "refuse-skip");
        let asking = Asking::for_tests();
        let image = head("GET", "http://a.test/logo.png", &[]);
        let mut cx = context(&asking, &image, skipping_images(true));
        let ControlFlow::Break(answer) = proxy.refuse_before_turn(&image, &mut cx).await else {
            panic!("a skipped image went on");
        };
        assert_eq!(answer.status(), http::StatusCode::FORBIDDEN);
        assert_eq!(cx.shadow_refused, None);
        let page = head("GET", "http://a.test/index.html", &[]);
        let mut cx = context(&asking, &page, skipping_images(true));
        assert!(proxy.refuse_before_turn(&page, &mut cx).await.is_continue());
        assert_eq!(cx.shadow_refused, None);
    }

    #[tokio::test]
    async fn a_report_only_host_notes_the_refusal_and_the_request_goes_on() {
        let proxy = proxy(Config::default(), "refuse-shadow");
        let asking = Asking::for_tests();
        let image = head("GET", "http://a.test/logo.png", &[]);
        let mut cx = context(&asking, &image, skipping_images(false));
        assert!(proxy
            .refuse_before_turn(&image, &mut cx)
            .await
            .is_continue());
        assert_eq!(cx.shadow_refused, Some(ShadowReason::SkipResources));
    }

    #[tokio::test]
    async fn without_a_purpose_nothing_is_checked_and_nothing_is_reported() {
        let proxy = proxy(Config::default(), "refuse-preferences");
        let asking = Asking::for_tests();
        let page = head("GET", "http://a.test/index.html", &[]);
        let mut cx = context(&asking, &page, |policy| {
            policy.preferences.content_preferences = ContentPreferences::Enforce;
        });
        assert!(proxy.check_preferences(&page, &mut cx).await.is_continue());
        assert!(cx.checked.is_none());
    }
}
