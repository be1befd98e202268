//! Loop detection: a request aimed at one of courtesy's own listeners, or one that already carries
//! this instance's `Via` entry, would come back to courtesy and spend its budget twice (or reach
//! the admin API through the proxy); so would every request through a parent proxy
//! (`upstream_proxy`) that is one of those listeners. Listeners are matched by address, whatever
//! the spelling (`127.1`, `0x7f000001`, a name that resolves to one), and the same early check
//! refuses `deny_destinations` before any budget is spent (`refuse_destination`).

use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroUsize;
use std::sync::Mutex;
use std::time::Duration;

use http::header::{HeaderValue, VIA};
use http::{HeaderMap, StatusCode, Version};
use lru::LruCache;
use tokio::time::Instant;
use tracing::warn;

use crate::config::UpstreamProxy;
use crate::proxy::answer::failure::Failure;
use crate::proxy::answer::response::{ProxyError, PROXY_NAME};
use crate::proxy::forward::headers::via_for;
use crate::proxy::forward::target::Target;
use crate::upstream::resolve::{Destinations, DnsError, Resolver};
use crate::util::locks;
use crate::wire::literal::literal_ip;

/// How long a name whose addresses all passed [`LoopGuard::refuse_destination`] is not looked up
/// again for that check.
const CHECKED_FOR: Duration = Duration::from_secs(5);
/// The most names remembered as checked.
const MAX_CHECKED: usize = 4096;

/// This instance's identity on the wire and the addresses it listens on.
#[derive(Debug)]
pub(crate) struct LoopGuard {
    /// courtesy's own listeners, for parent proxies named by address.
    own: Destinations,
    /// The `Via` entry this instance adds; seeing it on an incoming request means a loop.
    via: HeaderValue,
    /// The same entry for messages received as HTTP/1.0 and HTTP/2, made once (asked of every
    /// request: `ab -k` speaks 1.0, browsers and HTTP/2 clients 2).
    via_10: HeaderValue,
    via_2: HeaderValue,
    via_token: String,
    /// `host:port` targets whose addresses passed, and when.
    checked: Mutex<LruCache<String, Instant>>,
}

impl LoopGuard {
    /// A guard for an instance listening on `own_addrs`, with a random `Via` token of its own.
    pub(crate) fn new(own_addrs: Vec<SocketAddr>) -> Self {
        let via_token = format!("{PROXY_NAME}-{:08x}", rand::random::<u32>());
        let via = HeaderValue::from_str(&format!("1.1 {via_token}"))
            .unwrap_or_else(|_| HeaderValue::from_static("1.1 courtesy"));
        LoopGuard {
            own: Destinations::new(own_addrs, Vec::new(), Vec::new()),
            via_10: via_for(Version::HTTP_10, &via),
            via_2: via_for(Version::HTTP_2, &via),
            via,
            via_token,
            checked: Mutex::new(LruCache::new(
                NonZeroUsize::new(MAX_CHECKED).unwrap_or(NonZeroUsize::MIN),
            )),
        }
    }

    /// The `Via` entry to add to every message courtesy passes on.
    pub(crate) fn via(&self) -> &HeaderValue {
        &self.via
    }

    /// The `Via` entry for a message received as `version` (its protocol version first).
    pub(crate) fn via_for(&self, version: Version) -> HeaderValue {
        match version {
            Version::HTTP_11 => self.via.clone(),
            Version::HTTP_10 => self.via_10.clone(),
            Version::HTTP_2 => self.via_2.clone(),
            other => via_for(other, &self.via),
        }
    }

    /// The failure for a request that already passed through this instance (its `Via`), or
    /// that names one of its listeners by address; a name that resolves to one is
    /// [`LoopGuard::refuse_destination`]'s.
    pub(crate) fn refuse(&self, target: &Target, headers: &HeaderMap) -> Option<Failure> {
        let seen_before = headers
            .get_all(VIA)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|v| v.contains(self.via_token.as_str()));
        if seen_before || self.is_own_address(target) {
            warn!(target = %target.key(), "request loop refused");
            return Some(Failure::new(
                StatusCode::FORBIDDEN,
                ProxyError::ProxyLoopDetected,
                format!("{} is courtesy itself", target.key()),
            ));
        }
        None
    }

    /// The failure for a request whose parent proxy is courtesy itself (a listener of this
    /// instance), if it is: the config is wrong, not the client, so 502.
    pub(crate) fn refuse_parent(&self, parent: &UpstreamProxy) -> Option<Failure> {
        let as_target = Target {
            host: parent.host.clone(),
            port: parent.port,
            authority: parent.endpoint(),
            ip: literal_ip(&parent.host),
        };
        if !self.is_own_address(&as_target) {
            return None;
        }
        warn!(parent = %parent, "upstream_proxy is courtesy itself: request refused");
        Some(Failure::new(
            StatusCode::BAD_GATEWAY,
            ProxyError::ProxyLoopDetected,
            format!("upstream_proxy {parent} is courtesy itself"),
        ))
    }

    fn is_own_address(&self, target: &Target) -> bool {
        let ip = match target.ip {
            Some(ip) => ip,
            None if target.host == "localhost" || target.host.ends_with(".localhost") => {
                IpAddr::from([127, 0, 0, 1])
            }
            None => return false,
        };
        self.own.check(SocketAddr::new(ip, target.port)).is_err()
    }

    /// The refusal of a target that resolves to an address courtesy never dials (its own
    /// listeners, `deny_destinations`), made before the request spends any budget. Names are
    /// resolved here like the connector resolves them; a name that passed is not asked again for
    /// [`CHECKED_FOR`] (the connector judges every address it dials all the same, so a name that
    /// changes its answer meanwhile is still refused, only later). A name that does not resolve
    /// is left to the connector's own answer. Through a parent proxy, which resolves names
    /// itself, only address literals are judged here.
    pub(crate) async fn refuse_destination(
        &self,
        resolver: &Resolver,
        target: &Target,
        through_parent: impl FnOnce() -> bool,
    ) -> Option<Failure> {
        // A name that passed lately is not looked up again; an address literal is judged at
        // once, without building its key or looking up its rule.
        if let Some(ip) = target.ip {
            return refused(
                target,
                resolver.judge_literal(&target.host, ip, target.port),
            );
        }
        let key = target.key();
        if let Some(at) = locks::lock(&self.checked).get(&key) {
            if Instant::now().duration_since(*at) < CHECKED_FOR {
                return None;
            }
        }
        if through_parent() {
            return None;
        }
        let looked_up = resolver.lookup_target(&target.host, target.port).await;
        if looked_up.is_ok() {
            locks::lock(&self.checked).put(key, Instant::now());
        }
        refused(target, looked_up.map(drop))
    }
}

/// The refusal of `target` when its addresses include one courtesy never dials; a name that does
/// not resolve is left to the connector's own answer.
fn refused(target: &Target, judged: Result<(), DnsError>) -> Option<Failure> {
    match judged {
        Err(refused @ DnsError::Forbidden { .. }) => {
            warn!(target = %target, "destination refused: {refused}");
            Some(Failure::of_dns(&refused))
        }
        _ => None,
    }
}
