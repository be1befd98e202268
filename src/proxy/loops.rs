//! Loop detection: a request aimed at one of courtesy's own listeners, or one that already carries
//! this instance's `Via` entry, would come back to courtesy and spend its budget twice; so would
//! every request through a parent proxy (`upstream_proxy`) that is one of those listeners.

use std::net::{IpAddr, SocketAddr};

use http::header::{HeaderValue, VIA};
use http::{HeaderMap, StatusCode};
use tracing::warn;

use super::failure::Failure;
use super::target::Target;
use crate::config::{canonical_ip, UpstreamProxy};
use crate::response::{ProxyError, PROXY_NAME};

/// This instance's identity on the wire and the addresses it listens on.
#[derive(Debug)]
pub(crate) struct LoopGuard {
    own_addrs: Vec<SocketAddr>,
    /// The `Via` entry this instance adds; seeing it on an incoming request means a loop.
    via: HeaderValue,
    via_token: String,
}

impl LoopGuard {
    /// A guard for an instance listening on `own_addrs`, with a random `Via` token of its own.
    pub(crate) fn new(own_addrs: Vec<SocketAddr>) -> Self {
        let via_token = format!("{PROXY_NAME}-{:08x}", rand::random::<u32>());
        let via = HeaderValue::from_str(&format!("1.1 {via_token}"))
            .unwrap_or_else(|_| HeaderValue::from_static("1.1 courtesy"));
        LoopGuard {
            own_addrs,
            via,
            via_token,
        }
    }

    /// The `Via` entry to add to every message courtesy passes on.
    pub(crate) fn via(&self) -> &HeaderValue {
        &self.via
    }

    /// The failure for a request that would come back to courtesy itself, if it would.
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
        let ip = match target.host.parse::<IpAddr>() {
            Ok(ip) => canonical_ip(ip),
            Err(_) if target.host == "localhost" || target.host.ends_with(".localhost") => {
                IpAddr::from([127, 0, 0, 1])
            }
            Err(_) => return false,
        };
        self.own_addrs.iter().any(|own| {
            own.port() == target.port
                && (own.ip() == ip
                    || (own.ip().is_unspecified() && (ip.is_loopback() || ip.is_unspecified()))
                    || (own.ip().is_loopback() && ip.is_loopback() && target.host == "localhost"))
        })
    }
}
