//! One forwarded request's context: what every phase of `forward_to` reads and what each leaves
//! for the next (the budget key, a report-only host's would-be refusal, the stated preferences
//! met, what the request asked of courtesy, its use of the response store, its place in the
//! job's quota), and the request's record (`Trail`). It is made once, when the request comes,
//! and lives in the future the service already boxes per request: the phases borrow it, so
//! nothing of it moves from one phase's future into the next.

use std::ops::ControlFlow;
use std::sync::Arc;

use http::request::Parts;
use http::Response;
use hyper::body::Incoming;

use crate::budget::jobs::QuotaTicket;
use crate::budget::limiter::{BudgetKey, ShadowReason};
use crate::config::{Config, HostPolicy, OnCooldown, Priority};
use crate::observe::telemetry::{RequestTrace, Requested, Telemetry};
use crate::proxy::answer::body::ProxyBody;
use crate::proxy::answer::timing::Trail;
use crate::proxy::cache::flights::{Lead, SharedAnswer};
use crate::proxy::cache::plan::CacheUse;
use crate::proxy::connect::upgrade::ClientUpgrade;
use crate::proxy::forward::target::Target;
use crate::proxy::refuse::preferences::Checked;
use crate::proxy::send::sign::Signing;
use crate::proxy::Asking;
use crate::wire::scheme::Scheme;

/// What a phase of a forwarded request ends with: `Continue` goes on to the next phase, `Break`
/// is the client's answer.
pub(crate) type Flow = ControlFlow<Response<ProxyBody>>;

/// One forwarded request as its phases see it.
#[derive(Debug)]
pub(crate) struct RequestContext<'a> {
    /// Where it goes.
    pub(crate) target: Target,
    /// Who asks: the job, and what its CONNECT asked for the requests inside.
    pub(crate) asking: &'a Asking,
    /// The host's policy when the request came.
    pub(crate) policy: Arc<HostPolicy>,
    /// How its sends are signed (`None`: never); the attempts take it.
    pub(crate) signing: Option<Signing>,
    /// The budget it spends: the host's own `host:port` (the key of `key = "host"`, the
    /// default), until `Proxy::key_budget` makes the key another rule names.
    pub(crate) budget: BudgetKey,
    /// What would have refused a report-only host's request, reported with its first turn.
    pub(crate) shadow_refused: Option<ShadowReason>,
    /// The site's stated preferences met before the request left, reported on its answer.
    pub(crate) checked: Option<Checked>,
    /// What it asked of courtesy itself (its own, else its CONNECT's, cooldown choice and class).
    pub(crate) asked: Asked,
    /// A WebSocket handshake's wish to switch protocols, joined on a `101`.
    pub(crate) upgrade: Option<ClientUpgrade>,
    /// Its use of the response store, when it has one.
    pub(crate) cache_use: Option<CacheUse>,
    /// The flight it leads (`coalesce`): identical requests wait for its answer.
    pub(crate) flight: Option<Lead<SharedAnswer>>,
    /// Its place in its job's quota, spent at its first turn.
    pub(crate) ticket: Option<QuotaTicket>,
    /// The client's body while it has not gone upstream: settled when the answer is local.
    pub(crate) unread: Option<Incoming>,
    /// Its record: what held it, its trace, its sends.
    pub(crate) trail: Trail,
}

/// What the request asked of courtesy itself: its own (or its CONNECT's) answer to a cooldown and
/// its class within its job.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Asked {
    /// `Courtesy-On-Cooldown`.
    pub(crate) on_cooldown: Option<OnCooldown>,
    /// `Courtesy-Priority`, else the job's.
    pub(crate) priority: Priority,
}

impl Asked {
    /// What a request asks before it says anything of its own: its CONNECT's (or its job's)
    /// cooldown choice and class.
    pub(crate) fn of(asking: &Asking) -> Self {
        Asked {
            on_cooldown: asking.on_cooldown,
            priority: asking.priority,
        }
    }
}

impl<'a> RequestContext<'a> {
    /// The context of a request to `target` of `asking`'s, under `config` in force now; its trace
    /// begun when `telemetry` is on.
    pub(crate) fn new(
        config: &Config,
        target: Target,
        asking: &'a Asking,
        telemetry: Option<&Telemetry>,
        head: &Parts,
    ) -> Self {
        let policy = config.policy_for(&target.host, target.port);
        let signing = Signing::of(config, &asking.caller, &policy);
        let mut trail = Trail::default();
        trail.held.enabled = Some(config.proxy.server_timing);
        if let Some(telemetry) = telemetry {
            let asked = Requested {
                method: head.method.as_str(),
                scheme: Scheme::of_uri_or_http(&head.uri),
                host: &target.host,
                port: target.port,
                job: asking.caller.name(),
            };
            let trace = RequestTrace::start(telemetry, &head.headers, asked);
            trail.trace = Some(Arc::new(trace));
        }
        RequestContext {
            budget: BudgetKey::of_host(&target.host, target.port),
            target,
            asked: Asked::of(asking),
            asking,
            policy,
            signing,
            shadow_refused: None,
            checked: None,
            upgrade: None,
            cache_use: None,
            flight: None,
            ticket: None,
            unread: None,
            trail,
        }
    }

    /// The request's trace, when traces are on.
    pub(crate) fn trace(&self) -> Option<&RequestTrace> {
        self.trail.trace.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::for_tests::head;

    #[test]
    fn a_context_starts_on_the_hosts_own_budget_with_what_its_connect_asked() {
        let mut asking = Asking::for_tests();
        asking.on_cooldown = Some(crate::config::OnCooldown::Hold);
        let head = head("GET", "http://A.test:8080/x", &[]);
        let target = Target::of_request(&head.uri).expect("a target");
        let config = Config::default();
        let cx = RequestContext::new(&config, target, &asking, None, &head);
        assert_eq!(cx.budget.key, "a.test:8080");
        assert_eq!(cx.asked.on_cooldown, Some(crate::config::OnCooldown::Hold));
        assert_eq!(cx.asked.priority, asking.priority);
        assert_eq!(cx.trail.held.enabled, Some(config.proxy.server_timing));
        assert!(cx.trace().is_none() && cx.unread.is_none() && cx.checked.is_none());
    }
}
