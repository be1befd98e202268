//! Blind tunnels (`https = "tunnel"`): one admission through the host's budget, a place among the
//! open sockets and a slot of the upstream table, the target dialed (straight or through the
//! host's parent) and bytes copied both ways until a side closes, the tunnel is idle for
//! `socket_idle_timeout_seconds`, or its host is paused.

use http::StatusCode;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tracing::{debug, info, warn};

use crate::budget::limiter::Admission;
use crate::config::Route;
use crate::front::sockets::{self, Ended, Kind, SocketCaps};
use crate::proxy::answer::failure::Failure;
use crate::proxy::answer::response::ProxyError;
use crate::proxy::forward::target::Target;
use crate::proxy::Asking;
use crate::proxy::Proxy;
use crate::upstream::parent::tcp::{self, TcpFault};
use crate::upstream::parent::{self, OpenError};

impl Proxy {
    /// Admits and dials a blind tunnel, then copies `client` bytes both ways.
    pub(super) async fn tunnel<S>(&self, mut client: S, target: Target, asking: &Asking)
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let policy = self.config.get().policy_for(&target.host, target.port);
        let budget = match self.budget_key(&target, &policy).await {
            Ok(budget) => budget,
            Err(failure) => {
                warn!(
                    error = failure.kind.token(),
                    "tunnel refused: {}", failure.details
                );
                return;
            }
        };
        let admitted = self
            .limiter
            .admit(
                Admission::of(&budget)
                    .on_cooldown(asking.on_cooldown)
                    .job(asking.caller.tag(), asking.priority),
            )
            .await;
        let mut permit = match admitted {
            Ok(p) => p,
            Err(refusal) => {
                info!(reason = ?refusal, "tunnel refused locally");
                return;
            }
        };
        // A share of the upstream table that tunnels and sockets may hold, then a slot in it.
        let (caps, idle_timeout) = {
            let config = self.config.get();
            let caps = SocketCaps {
                per_client: config.proxy.max_websockets_per_client,
                per_host: config.proxy.max_websockets_per_host,
            };
            (caps, config.proxy.socket_idle_timeout)
        };
        let open = match self.sockets.open(Kind::Tunnel, &budget.key, caps) {
            Ok(open) => open,
            Err(full) => {
                warn!(error = "connection_limit_reached", "tunnel refused: {full}");
                return;
            }
        };
        let slot = match self.client.slots().take().await {
            Ok(slot) => slot,
            Err(full) => {
                // Never sent: the token goes back when the permit drops.
                warn!(error = "connection_limit_reached", "tunnel refused: {full}");
                return;
            }
        };
        permit.mark_sent();
        let _slot = slot;
        match self.dial(&target).await {
            Ok(mut upstream) => {
                info!(wait_ms = permit.waited().as_millis() as u64, "tunnel open");
                let closing = open.closing();
                let ended = sockets::pipe(&mut client, &mut upstream, idle_timeout, closing).await;
                log_end(ended, idle_timeout);
            }
            Err(failure) => {
                if let Some(parent) = failure.parent.as_deref() {
                    self.metrics
                        .parent_failure(None, &parent.next_hop, parent.kind.label());
                }
                warn!(
                    error = failure.kind.token(),
                    "tunnel connect failed: {}", failure.details
                )
            }
        }
        drop(permit);
    }

    /// Connects a TCP stream to the target for a tunnel, straight or through the host's parent
    /// proxy, with the same timeouts and error mapping as forwarded requests.
    async fn dial(&self, target: &Target) -> Result<TcpStream, Failure> {
        let config = self.config.get();
        let timeout = config.proxy.connect_timeout;
        if let Route::Parent(parent) = &config
            .policy_for(&target.host, target.port)
            .forward
            .upstream
        {
            if let Some(failure) = self.loops.refuse_parent(parent) {
                return Err(failure);
            }
            let opened = parent::open(parent, &target.host, target.port, &self.resolver, timeout);
            return opened.await.map_err(|e| match e {
                OpenError::Parent(e) => Failure::of_parent(&e),
                OpenError::TargetDns(e) => Failure::of_dns(&e),
            });
        }
        tcp::connect_target(&self.resolver, &target.host, target.port, timeout)
            .await
            .map_err(|fault| match fault {
                TcpFault::Dns(e) => Failure::of_dns(&e),
                TcpFault::Io(e) => Failure::of_io(&e, &target.key()),
                TcpFault::Timeout(addr) => Failure::new(
                    StatusCode::GATEWAY_TIMEOUT,
                    ProxyError::ConnectionTimeout,
                    format!(
                        "no TCP connection to {addr} within {}s",
                        timeout.as_secs_f64()
                    ),
                ),
            })
    }
}

/// Says how a tunnel ended.
fn log_end(ended: Ended, idle_timeout: std::time::Duration) {
    match ended {
        Ended::Done(Ok((up, down))) => debug!(bytes_up = up, bytes_down = down, "tunnel closed"),
        Ended::Done(Err(e)) => debug!("tunnel ended: {e}"),
        Ended::Idle => info!(
            idle_s = idle_timeout.as_secs_f64(),
            "tunnel closed: no byte either way for socket_idle_timeout_seconds"
        ),
        Ended::Closed => {
            info!("tunnel closed: its host was paused or blocked, or the operator asked")
        }
    }
}
