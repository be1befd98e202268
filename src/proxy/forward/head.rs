//! The phases of a forwarded request that work on its head: TRACE refused, the request's identity
//! (`User-Agent`, `From`, the client's own signatures kept), the head as it goes upstream, and a
//! WebSocket handshake's place among the sockets.

use std::ops::ControlFlow;

use http::header::{HeaderValue, HOST, VIA};
use http::request::Parts;
use http::{HeaderMap, Version};
use tracing::info;

use crate::budget::jobs::{priority_of, Caller};
use crate::config::HostPolicy;
use crate::front::sockets::SocketCaps;
use crate::proxy::answer::failure::Failure;
use crate::proxy::answer::response;
use crate::proxy::connect::upgrade;
use crate::proxy::forward::context::{Asked, Flow, RequestContext};
use crate::proxy::forward::headers::{own_cooldown_choice, strip_request};
use crate::proxy::Proxy;
use crate::wire::scheme::Scheme;

/// TRACE and TRACK are never forwarded (an origin that echoes the request would hand back its
/// headers, a signature or credentials among them): answered here.
pub(crate) fn refuse_trace(head: &Parts) -> Flow {
    if is_trace(&head.method) {
        return ControlFlow::Break(response::trace_refused(&head.method));
    }
    ControlFlow::Continue(())
}

impl Proxy {
    /// Who the request says it is: the client's own signatures kept (before courtesy's change
    /// the fields they cover), then the host's (else the job's) `User-Agent` and `From`, before
    /// robots.txt picks its group from the User-Agent.
    pub(crate) fn identify(&self, head: &mut Parts, cx: &mut RequestContext<'_>) {
        if let Some(signing) = cx.signing.take() {
            cx.signing = Some(signing.keeping(&head.headers, &head.uri));
        }
        stamp(&mut head.headers, &cx.policy, &cx.asking.caller);
    }

    /// The request's head as it goes upstream: the client's `Courtesy-On-Cooldown` and
    /// `Courtesy-Priority` taken out (and kept in `cx.asked`, over the CONNECT's: they are
    /// courtesy's to act on, not the origin's), hop-by-hop headers replaced by courtesy's `Via`,
    /// the target's `Host`, and HTTP/1.1 (the version courtesy speaks upstream). A WebSocket
    /// handshake's wish to switch is taken into `cx.upgrade` first.
    pub(crate) fn rewrite_request_head(
        &self,
        head: &mut Parts,
        cx: &mut RequestContext<'_>,
    ) -> Flow {
        cx.upgrade = upgrade::take(head, cx.asking.slot.as_ref());
        match self.rewritten(head, cx) {
            Ok(asked) => cx.asked = asked,
            Err(failure) => return ControlFlow::Break(failure.into_response()),
        }
        ControlFlow::Continue(())
    }

    /// [`Proxy::rewrite_request_head`]'s work, or the 400 of a header courtesy cannot read.
    fn rewritten(&self, head: &mut Parts, cx: &RequestContext<'_>) -> Result<Asked, Failure> {
        let asking = cx.asking;
        let on_cooldown = own_cooldown_choice(&mut head.headers)?.or(asking.on_cooldown);
        let priority = priority_of(
            &mut head.headers,
            asking.priority,
            asking.caller.settings.is_some(),
        )
        .map_err(Failure::bad_request)?;
        strip_request(&mut head.headers);
        head.headers.append(VIA, self.loops.via_for(head.version));
        let scheme = Scheme::of_uri_or_http(&head.uri);
        if let Ok(host) = HeaderValue::from_str(cx.target.host_header(scheme)) {
            head.headers.insert(HOST, host);
        }
        head.version = Version::HTTP_11;
        Ok(Asked {
            on_cooldown,
            priority,
        })
    }

    /// A WebSocket handshake's place among the open sockets (`max_websockets_per_client`,
    /// `max_websockets_per_host`), and its `Upgrade` asked of the origin; over a cap, the local
    /// answer.
    pub(crate) fn place_upgrade(&self, head: &mut Parts, cx: &mut RequestContext<'_>) -> Flow {
        let Some(upgrade) = &mut cx.upgrade else {
            return ControlFlow::Continue(());
        };
        let caps = {
            let config = self.config.get();
            SocketCaps {
                per_client: config.proxy.max_websockets_per_client,
                per_host: config.proxy.max_websockets_per_host,
            }
        };
        if let Err(why) = upgrade.place(&self.sockets, &cx.budget.key, caps) {
            info!("WebSocket refused locally: {why}");
            return ControlFlow::Break(upgrade::over_cap(&why));
        }
        upgrade.ask_upstream(&mut head.headers);
        ControlFlow::Continue(())
    }
}

/// Stamps the host's (else the job's) `User-Agent` and `From` on the request, before robots.txt
/// picks its group from the User-Agent.
fn stamp(headers: &mut HeaderMap, policy: &HostPolicy, caller: &Caller) {
    let (job_agent, job_from) = caller.stamps();
    let agent = policy.identity.user_agent.as_deref().or(job_agent);
    let from = policy.identity.from.as_deref().or(job_from);
    for (name, value) in [
        (http::header::USER_AGENT, agent),
        (http::header::FROM, from),
    ] {
        if let Some(value) = value.and_then(|v| HeaderValue::from_str(v).ok()) {
            headers.insert(name, value);
        }
    }
}

/// Whether `method` is TRACE or TRACK.
fn is_trace(method: &http::Method) -> bool {
    method.as_str().eq_ignore_ascii_case("TRACE") || method.as_str().eq_ignore_ascii_case("TRACK")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, OnCooldown};
    use crate::proxy::for_tests::{context, head, proxy};
    use crate::proxy::Asking;

    #[test]
    fn trace_and_track_are_answered_here_and_the_rest_goes_on() {
        for method in ["TRACE", "TRACK", "trace"] {
            let ControlFlow::Break(answer) = refuse_trace(&head(method, "http://a.test/", &[]))
            else {
                panic!("{method} went on");
            };
            assert_eq!(answer.status(), http::StatusCode::METHOD_NOT_ALLOWED);
        }
        let get = head("GET", "http://a.test/", &[]);
        assert!(refuse_trace(&get).is_continue());
    }

    #[tokio::test]
    async fn the_head_goes_upstream_as_http_11_with_our_via_and_the_clients_choice_kept() {
        let proxy = proxy(Config::default(), "head-rewrite");
        let asking = Asking::for_tests();
        let mut head = head(
            "GET",
            "http://a.test:8080/page",
            &[
                ("courtesy-on-cooldown", "reject"),
                ("connection", "keep-alive, x-secret"),
                ("x-secret", "hop"),
                ("accept", "text/html"),
            ],
        );
        head.version = http::Version::HTTP_10;
        let mut cx = context(&asking, &head, |_| {});
        assert!(proxy.rewrite_request_head(&mut head, &mut cx).is_continue());
        assert_eq!(cx.asked.on_cooldown, Some(OnCooldown::Reject));
        assert_eq!(head.version, http::Version::HTTP_11);
        assert!(!head.headers.contains_key("courtesy-on-cooldown"));
        assert!(!head.headers.contains_key("x-secret"));
        assert_eq!(head.headers["accept"], "text/html");
        assert_eq!(head.headers[HOST], "a.test:8080");
        assert!(head.headers.contains_key(VIA));
        assert!(cx.upgrade.is_none());
    }

    #[tokio::test]
    async fn a_cooldown_choice_courtesy_cannot_read_is_the_clients_400() {
        let proxy = proxy(Config::default(), "head-bad-choice");
        let asking = Asking::for_tests();
        let mut head = head("GET", "http://a.test/", &[("courtesy-on-cooldown", "soon")]);
        let mut cx = context(&asking, &head, |_| {});
        let ControlFlow::Break(answer) = proxy.rewrite_request_head(&mut head, &mut cx) else {
            panic!("an unreadable choice went on");
        };
        assert_eq!(answer.status(), http::StatusCode::BAD_REQUEST);
    }

    #[tokio::test]
    async fn the_hosts_user_agent_is_stamped_over_the_clients() {
        let proxy = proxy(Config::default(), "head-identify");
        let asking = Asking::for_tests();
        let mut head = head("GET", "http://a.test/", &[("user-agent", "client/1")]);
        let mut cx = context(&asking, &head, |policy| {
            policy.identity.user_agent = Some("polite-bot/2".into());
        });
        proxy.identify(&mut head, &mut cx);
        assert_eq!(head.headers["user-agent"], "polite-bot/2");
        let mut plain =
            crate::proxy::for_tests::head("GET", "http://a.test/", &[("user-agent", "client/1")]);
        let mut cx = context(&asking, &plain, |_| {});
        proxy.identify(&mut plain, &mut cx);
        assert_eq!(plain.headers["user-agent"], "client/1");
    }
}
