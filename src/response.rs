//! Responses that courtesy makes itself, and the body type every response has.
//!
//! Every local answer carries a `Proxy-Status` header (RFC 9209) naming the reason, so a crawler can
//! tell "the site said 503" from "courtesy said 503". This module builds those answers and the
//! streaming body wrapper that keeps a host's concurrency slot until the upstream body is done; it
//! does not decide when to make them (`proxy.rs`).

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::{Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

use crate::limiter::{Permit, Refusal};

/// The name courtesy gives itself in `Proxy-Status` and `Via`.
pub const PROXY_NAME: &str = "courtesy";

/// The body of every response courtesy sends to a client.
#[derive(Debug)]
pub enum ProxyBody {
    /// An upstream body, streamed through untouched. The permit (host slot) is released when the body
    /// ends, fails or is dropped: a request is in flight until its response is complete.
    Upstream {
        /// The upstream response body.
        body: Incoming,
        /// Released at the end of the body.
        permit: Option<Permit>,
        /// Looks for block markers in the first bytes as they stream by.
        scan: Option<Box<BlockScan>>,
        /// Stores the body as it streams by (response cache).
        store: Option<Box<crate::cache::Writer>>,
    },
    /// A small body made by courtesy.
    Local(Option<Bytes>),
}

impl ProxyBody {
    /// An empty body.
    pub fn empty() -> Self {
        ProxyBody::Local(None)
    }
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match self.get_mut() {
            ProxyBody::Upstream {
                body,
                permit,
                scan,
                store,
            } => {
                let polled = Pin::new(&mut *body).poll_frame(cx);
                match &polled {
                    Poll::Ready(Some(Ok(frame))) => {
                        if let (Some(data), Some(writer)) = (frame.data_ref(), store.as_mut()) {
                            writer.write(data);
                        }
                        // hyper stops polling a body that says it has ended: finish here too.
                        if body.is_end_stream() {
                            if let Some(writer) = store.take() {
                                writer.finish();
                            }
                        }
                    }
                    Poll::Ready(None) => {
                        if let Some(writer) = store.take() {
                            writer.finish();
                        }
                    }
                    Poll::Ready(Some(Err(_))) => *store = None,
                    Poll::Pending => {}
                }
                if let (Poll::Ready(Some(Ok(frame))), Some(scanner)) = (&polled, scan.as_mut()) {
                    if let Some(data) = frame.data_ref() {
                        if let Some(marker) = scanner.feed(data) {
                            if let Some(p) = permit.as_ref() {
                                (scanner.on_match)(p, &marker);
                            }
                            *scan = None;
                        } else if scanner.done() {
                            *scan = None;
                        }
                    }
                }
                if matches!(polled, Poll::Ready(None) | Poll::Ready(Some(Err(_)))) {
                    permit.take();
                }
                polled
            }
            ProxyBody::Local(data) => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ProxyBody::Upstream { body, .. } => body.is_end_stream(),
            ProxyBody::Local(data) => data.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ProxyBody::Upstream { body, .. } => body.size_hint(),
            ProxyBody::Local(data) => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
        }
    }
}

/// What to do when a block marker is found: called once with the response's permit and the marker.
pub type OnBlockMarker = Box<dyn Fn(&Permit, &str) + Send + Sync>;

/// Scans the first `limit` bytes of a body for block markers (lowercase), across chunk edges,
/// without holding the body back.
pub struct BlockScan {
    markers: std::sync::Arc<crate::config::BlockMarkers>,
    remaining: usize,
    /// The last bytes seen (shorter than the longest marker), so a marker split across chunks
    /// is found.
    tail: Vec<u8>,
    on_match: OnBlockMarker,
}

impl std::fmt::Debug for BlockScan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockScan")
            .field("remaining", &self.remaining)
            .finish()
    }
}

impl BlockScan {
    /// A scanner over the first `limit` bytes; `on_match` runs once when a marker is seen.
    pub fn new(
        markers: std::sync::Arc<crate::config::BlockMarkers>,
        limit: usize,
        on_match: OnBlockMarker,
    ) -> Self {
        BlockScan {
            markers,
            remaining: limit,
            tail: Vec::new(),
            on_match,
        }
    }

    /// Looks at the next chunk; returns the marker found, if any. One pass over the chunk for all
    /// markers, no copy of it: only the seam with the previous chunk is copied.
    pub fn feed(&mut self, chunk: &[u8]) -> Option<String> {
        let take = chunk.len().min(self.remaining);
        self.remaining -= take;
        let chunk = &chunk[..take];
        let overlap = self.markers.longest().saturating_sub(1);
        let old_tail = std::mem::take(&mut self.tail);
        if !old_tail.is_empty() {
            let mut seam = old_tail.clone();
            seam.extend_from_slice(&chunk[..overlap.min(chunk.len())]);
            if let Some(m) = self.markers.find(&seam) {
                return Some(m.to_string());
            }
        }
        if let Some(m) = self.markers.find(chunk) {
            return Some(m.to_string());
        }
        // Keep the last `overlap` bytes seen, for the next seam.
        if chunk.len() >= overlap {
            self.tail = chunk[chunk.len() - overlap..].to_vec();
        } else {
            let mut tail = old_tail;
            tail.extend_from_slice(chunk);
            let cut = tail.len().saturating_sub(overlap);
            tail.drain(..cut);
            self.tail = tail;
        }
        None
    }

    /// Whether the scan limit is reached.
    pub fn done(&self) -> bool {
        self.remaining == 0
    }
}

/// The RFC 9209 error types courtesy uses, as one closed set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyError {
    /// The name did not resolve.
    DnsError,
    /// Resolving the name took longer than the connect timeout.
    DnsTimeout,
    /// The origin refused the TCP connection.
    ConnectionRefused,
    /// The TCP connection was not established within the connect timeout.
    ConnectionTimeout,
    /// The origin closed or reset the connection before a complete response.
    ConnectionTerminated,
    /// Any other failure to reach the origin.
    DestinationUnavailable,
    /// The origin sent no response headers within the response timeout.
    HttpResponseTimeout,
    /// The origin's response could not be parsed.
    HttpProtocolError,
    /// The client's request is not one courtesy can forward.
    HttpRequestError,
    /// courtesy refuses this request on purpose (access, ports).
    HttpRequestDenied,
    /// The request would come back to courtesy itself.
    ProxyLoopDetected,
    /// A pacing limit refused it: queue full, waited too long, shutting down.
    ConnectionLimitReached,
    /// A bug or resource failure inside courtesy.
    ProxyInternalError,
    /// The upstream's certificate did not verify against the configured roots.
    TlsCertificateError,
    /// The upstream sent a TLS alert.
    TlsAlertReceived,
    /// Any other upstream TLS failure.
    TlsProtocolError,
}

impl ProxyError {
    /// The token registered in RFC 9209's Proxy Error Types registry.
    pub fn token(self) -> &'static str {
        match self {
            ProxyError::DnsError => "dns_error",
            ProxyError::DnsTimeout => "dns_timeout",
            ProxyError::ConnectionRefused => "connection_refused",
            ProxyError::ConnectionTimeout => "connection_timeout",
            ProxyError::ConnectionTerminated => "connection_terminated",
            ProxyError::DestinationUnavailable => "destination_unavailable",
            ProxyError::HttpResponseTimeout => "http_response_timeout",
            ProxyError::HttpProtocolError => "http_protocol_error",
            ProxyError::HttpRequestError => "http_request_error",
            ProxyError::HttpRequestDenied => "http_request_denied",
            ProxyError::ProxyLoopDetected => "proxy_loop_detected",
            ProxyError::ConnectionLimitReached => "connection_limit_reached",
            ProxyError::ProxyInternalError => "proxy_internal_error",
            ProxyError::TlsCertificateError => "tls_certificate_error",
            ProxyError::TlsAlertReceived => "tls_alert_received",
            ProxyError::TlsProtocolError => "tls_protocol_error",
        }
    }
}

/// A locally made response: `status`, a `Proxy-Status` naming `error` with `details`, a short text
/// body, and `Retry-After` (whole seconds, rounded up) where waiting helps.
pub fn local(
    status: StatusCode,
    error: ProxyError,
    details: &str,
    retry_after: Option<Duration>,
) -> Response<ProxyBody> {
    let body = Bytes::from(format!(
        "courtesy: {} ({}): {details}\n",
        status.as_u16(),
        error.token()
    ));
    let mut response = Response::new(ProxyBody::Local(Some(body)));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    let proxy_status = format!(
        "{PROXY_NAME}; error={}; details={}",
        error.token(),
        sf_string(details)
    );
    if let Ok(value) = HeaderValue::from_str(&proxy_status) {
        headers.insert("proxy-status", value);
    }
    if let Some(wait) = retry_after {
        let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        headers.insert(RETRY_AFTER, HeaderValue::from(secs.max(1)));
    }
    response
}

/// The answer for a client outside `[proxy] allow_clients`.
pub fn client_not_allowed(ip: std::net::IpAddr) -> Response<ProxyBody> {
    local(
        StatusCode::FORBIDDEN,
        ProxyError::HttpRequestDenied,
        &format!(
            "client {} is not in [proxy] allow_clients",
            crate::config::canonical_ip(ip)
        ),
        None,
    )
}

/// The local answer for a pacing refusal.
pub fn refusal(refusal: &Refusal, host: &str) -> Response<ProxyBody> {
    match refusal {
        Refusal::QueueFull {
            max_queue,
            retry_after,
        } => local(
            StatusCode::SERVICE_UNAVAILABLE,
            ProxyError::ConnectionLimitReached,
            &format!("queue for {host} is full ({max_queue} requests waiting)"),
            Some(*retry_after),
        ),
        Refusal::WaitedTooLong { waited } => local(
            StatusCode::SERVICE_UNAVAILABLE,
            ProxyError::ConnectionLimitReached,
            &format!(
                "waited {:.1}s for a turn at {host} (max_wait_seconds)",
                waited.as_secs_f64()
            ),
            Some(Duration::from_secs(1)),
        ),
        Refusal::CoolingDown { remaining, cause } => local(
            StatusCode::TOO_MANY_REQUESTS,
            ProxyError::HttpRequestDenied,
            &format!(
                "{host} is cooling down because {cause}; {:.0}s left",
                remaining.as_secs_f64().ceil()
            ),
            Some(*remaining),
        ),
        Refusal::ShuttingDown => local(
            StatusCode::SERVICE_UNAVAILABLE,
            ProxyError::ConnectionLimitReached,
            "courtesy is shutting down",
            Some(Duration::from_secs(1)),
        ),
    }
}

/// Quotes `text` as an RFC 8941 sf-string: printable ASCII only, `"` and `\` escaped.
fn sf_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => out.push('?'),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[test]
    fn markers_are_found_across_chunks_case_insensitively_within_the_limit() {
        let markers = std::sync::Arc::new(crate::config::BlockMarkers::new(vec![
            "unusual traffic".to_string(),
            "cf-challenge".into(),
        ]));
        let mut scan = BlockScan::new(markers.clone(), 1000, Box::new(|_, _| {}));
        assert_eq!(scan.feed(b"<html>our systems saw Unusual Tra"), None);
        assert_eq!(
            scan.feed(b"ffic from you"),
            Some("unusual traffic".to_string())
        );
        // Split over three chunks, one of them shorter than the overlap.
        let mut split = BlockScan::new(markers.clone(), 1000, Box::new(|_, _| {}));
        assert_eq!(split.feed(b"xxxx CF-CHAL"), None);
        assert_eq!(split.feed(b"le"), None);
        assert_eq!(split.feed(b"nge yyy"), Some("cf-challenge".to_string()));
        let mut clean = BlockScan::new(markers.clone(), 1 << 20, Box::new(|_, _| {}));
        let page = "<p>nothing to see here</p>".repeat(4000);
        for part in page.as_bytes().chunks(1000) {
            assert_eq!(clean.feed(part), None);
        }
        let mut late = BlockScan::new(markers, 20, Box::new(|_, _| {}));
        assert_eq!(late.feed(b"0123456789012345678"), None);
        assert_eq!(late.feed(b"9 cf-challenge"), None, "past the limit");
        assert!(late.done());
    }

    #[test]
    fn details_are_quoted_as_sf_strings() {
        assert_eq!(sf_string(r#"a "b" \c"#), r#""a \"b\" \\c""#);
        assert_eq!(sf_string("caf\u{e9}\n"), "\"caf??\"");
    }

    #[tokio::test]
    async fn local_responses_carry_proxy_status_and_retry_after() {
        let r = local(
            StatusCode::SERVICE_UNAVAILABLE,
            ProxyError::ConnectionLimitReached,
            "queue full",
            Some(Duration::from_millis(1500)),
        );
        assert_eq!(r.status(), 503);
        assert_eq!(
            r.headers()["proxy-status"],
            "courtesy; error=connection_limit_reached; details=\"queue full\""
        );
        assert_eq!(r.headers()[RETRY_AFTER], "2");
        let body = r.into_body().collect().await.unwrap().to_bytes();
        assert!(String::from_utf8_lossy(&body).contains("queue full"));
    }
}
