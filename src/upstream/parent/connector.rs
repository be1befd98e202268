//! The connector of the pooled client for one parent: for an `http://` target through an HTTP
//! parent, a plain connection to the parent (which `upstream/pool/reuse.rs` marks as proxied, so the
//! client sends absolute-form requests on it); for everything else, a tunnel through the parent
//! ([`super::open`]), over which hyper-rustls then speaks TLS to the target end to end.
//!
//! The client pools connections by the target's scheme and authority, so a connection opened for
//! one target only ever carries that target's requests, whatever parent it runs through.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::Uri;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::{connect_parent, open, ParentError, ParentErrorKind};
use crate::config::{ParentScheme, UpstreamProxy};
use crate::upstream::resolve::Resolver;
use crate::wire::proxy_status::ProxyError;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Opens the pooled client's connections through one parent.
#[derive(Debug, Clone)]
pub(crate) struct ParentConnector {
    parent: Arc<UpstreamProxy>,
    resolver: Resolver,
    timeout: Duration,
}

impl ParentConnector {
    /// A connector through `parent`, resolving with `resolver`; `timeout` bounds each connection
    /// (TCP and the parent's handshake together).
    pub(crate) fn new(parent: Arc<UpstreamProxy>, resolver: Resolver, timeout: Duration) -> Self {
        ParentConnector {
            parent,
            resolver,
            timeout,
        }
    }
}

impl tower::Service<Uri> for ParentConnector {
    type Response = TokioIo<TcpStream>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let https = dst.scheme_str() == Some("https");
            let host = dst
                .host()
                .map(|h| h.trim_start_matches('[').trim_end_matches(']'))
                .ok_or_else(|| {
                    ParentError::new(
                        &this.parent,
                        ParentErrorKind::Refused,
                        ProxyError::HttpRequestError,
                        "a request without a host cannot go through a parent proxy",
                    )
                })?;
            let port = dst.port_u16().unwrap_or(if https { 443 } else { 80 });
            if this.parent.scheme == ParentScheme::Http && !https {
                let tcp = tokio::time::timeout(
                    this.timeout,
                    connect_parent(&this.parent, &this.resolver, this.timeout),
                )
                .await
                .unwrap_or_else(|_| Err(ParentError::timed_out(&this.parent, this.timeout)))?;
                return Ok(TokioIo::new(tcp));
            }
            let tcp = open(&this.parent, host, port, &this.resolver, this.timeout).await?;
            Ok(TokioIo::new(tcp))
        })
    }
}
