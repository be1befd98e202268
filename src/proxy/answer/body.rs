//! The body of every response courtesy sends to a client: an upstream body streamed through
//! untouched, or a small body courtesy made itself.
//!
//! While an upstream body streams, it holds the request's [`Permit`] (a request is in flight until
//! its response is complete), feeds the block-marker scan, the response store and the requests
//! that follow its flight, and lets go of all of them when the body ends, fails or is dropped.
//!
//! An upstream body silent for the host's `read_timeout_seconds` (no frame between two reads) is
//! cut: the body ends in an error (hyper then closes the client connection, so the client sees a
//! truncated response, never a short one that looks complete), the permit and the upstream
//! connection are let go at once, and the host's pacing hears a timeout failure.

use std::future::Future as _;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

use crate::budget::limiter::Permit;
use crate::observe::events::EventStream;
use crate::pacing::blocks::{BodyScan, Verdict};
use crate::pacing::feedback::Feedback;
use crate::pacing::policy::Answer;
use crate::proxy::cache::flights::Share;
use crate::proxy::cache::store as cache;
use crate::upstream::pool::IdleMark;

/// The error a response body to the client can end with: the upstream's, or courtesy cutting a
/// silent one.
pub(crate) type BodyError = Box<dyn std::error::Error + Send + Sync>;

/// The body of every response courtesy sends to a client.
#[derive(Debug)]
pub enum ProxyBody {
    /// An upstream body, streamed through untouched. The permit (host slot) is released when the body
    /// ends, fails or is dropped: a request is in flight until its response is complete.
    Upstream(Streamed),
    /// A small body made by courtesy.
    Local(Option<Bytes>),
    /// The events of `GET /v1/events` (Server-Sent Events) as they come, until the subscriber
    /// is dropped or courtesy shuts down.
    Events(EventStream),
    /// Bytes courtesy read ahead of a body (to see whether a 429 or 503 was a challenge page
    /// before sending the request again), then the rest of it.
    Prefixed {
        /// What was read ahead, sent first.
        first: Option<Bytes>,
        /// The rest of the body.
        rest: Box<ProxyBody>,
    },
}

/// An upstream body as it streams to the client, with what rides along with it.
#[derive(Debug)]
pub struct Streamed {
    /// The upstream response body.
    pub body: Incoming,
    /// Released at the end of the body.
    pub permit: Option<Permit>,
    /// Sets the upstream connection idle at the end of the body (`max_upstream_connections`).
    pub idle: Option<IdleMark>,
    /// Looks for block markers in the first bytes as they stream by.
    pub scan: Option<Box<MarkerScan>>,
    /// Stores the body as it streams by (response cache).
    pub store: Option<Box<cache::Writer>>,
    /// Collects the body for the requests that follow this one's flight (`coalesce`).
    pub share: Option<Box<Share>>,
    /// Cuts the body when the origin sends nothing for `read_timeout_seconds`.
    pub silence: Option<Silence>,
}

impl ProxyBody {
    /// An empty body.
    pub fn empty() -> Self {
        ProxyBody::Local(None)
    }
}

/// One poll of a body to the client.
type Polled = Poll<Option<Result<Frame<Bytes>, BodyError>>>;

impl Streamed {
    /// The next frame of the upstream body: counted and charged, stored, scanned, and at the end
    /// (or on an error) the permit and the idle mark let go; a body silent past its read timeout
    /// is cut.
    fn poll_frame(&mut self, cx: &mut Context<'_>) -> Polled {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        if let Some(cut) = self.cut_when_silent(polled.is_ready(), cx) {
            return Poll::Ready(Some(Err(cut)));
        }
        let mut polled = polled.map(|frame| frame.map(|r| r.map_err(BodyError::from)));
        if let Poll::Ready(Some(Ok(frame))) = &mut polled {
            if let Some(trailers) = frame.trailers_mut() {
                // A trailer is an answer's field too: courtesy's name is its own there.
                crate::wire::proxy_status::without_ours(trailers);
            }
        }
        match &polled {
            Poll::Ready(Some(Ok(frame))) => self.passed(frame),
            Poll::Ready(None) => {
                if let Some(mut scanner) = self.scan.take() {
                    scanner.finish(self.permit.as_ref());
                }
                if let Some(writer) = self.store.take() {
                    writer.finish();
                }
                if let Some(share) = self.share.take() {
                    (*share).finish();
                }
            }
            Poll::Ready(Some(Err(_))) => (self.store, self.share) = (None, None),
            Poll::Pending => {}
        }
        if let (Poll::Ready(Some(Ok(frame))), Some(scanner)) = (&polled, self.scan.as_mut()) {
            if let Some(data) = frame.data_ref() {
                if scanner.feed(data, self.permit.as_ref()) {
                    self.scan = None;
                }
            }
        }
        if matches!(polled, Poll::Ready(None) | Poll::Ready(Some(Err(_)))) {
            self.permit.take();
            self.idle.take();
        }
        polled
    }

    /// The error that cuts a body the origin has been silent on for its read timeout (the
    /// failure reported to the host and logged, the connection never pooled again), or `None`.
    fn cut_when_silent(&mut self, ready: bool, cx: &mut Context<'_>) -> Option<BodyError> {
        let silence = self.silence.as_mut()?;
        if ready {
            silence.heard();
            return None;
        }
        if !silence.over(cx) {
            return None;
        }
        let limit = silence.limit;
        if let Some(permit) = self.permit.take() {
            permit.report(&Answer {
                feedback: Feedback::Failed,
                status: None,
                latency: limit,
                retry_after: None,
                server: None,
            });
            tracing::warn!(
                error = "http_response_timeout",
                host = permit.host_key(),
                read_timeout_s = limit.as_secs_f64(),
                "upstream failed: the response body was silent for read_timeout_seconds; cut"
            );
        }
        // The upstream connection is mid-response: closed, never pooled.
        self.store = None;
        self.share = None;
        self.scan = None;
        self.idle.take();
        Some(Box::new(SilentOrigin(limit)))
    }

    /// A frame on its way: its bytes charged to the host and stored; on the body's last frame
    /// (hyper stops polling a body that says it has ended) the scan and the store finished and
    /// the connection marked idle.
    fn passed(&mut self, frame: &Frame<Bytes>) {
        if let (Some(data), Some(permit)) = (frame.data_ref(), self.permit.as_mut()) {
            // Charged as it streams: a byte budget holds the host's next turn.
            permit.count_bytes(data.len());
        }
        if let (Some(data), Some(writer)) = (frame.data_ref(), self.store.as_mut()) {
            writer.write_bytes(data);
        }
        if let (Some(data), Some(share)) = (frame.data_ref(), self.share.as_mut()) {
            if !share.write(data) {
                self.share = None;
            }
        }
        if !self.body.is_end_stream() {
            return;
        }
        if let Some(mut scanner) = self.scan.take() {
            let over = frame
                .data_ref()
                .is_some_and(|data| scanner.feed(data, self.permit.as_ref()));
            if !over {
                scanner.finish(self.permit.as_ref());
            }
        }
        if let Some(writer) = self.store.take() {
            writer.finish();
        }
        if let Some(share) = self.share.take() {
            (*share).finish();
        }
        self.idle.take();
    }
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Polled {
        match self.get_mut() {
            ProxyBody::Upstream(streamed) => streamed.poll_frame(cx),
            ProxyBody::Local(data) => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
            ProxyBody::Events(stream) => stream
                .poll_frame(cx)
                .map(|f| f.map(|r| r.map_err(|never| -> BodyError { match never {} }))),
            ProxyBody::Prefixed { first, rest } => match first.take() {
                Some(data) => Poll::Ready(Some(Ok(Frame::data(data)))),
                None => Pin::new(rest.as_mut()).poll_frame(cx),
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ProxyBody::Upstream(streamed) => streamed.body.is_end_stream(),
            ProxyBody::Local(data) => data.is_none(),
            ProxyBody::Events(stream) => stream.is_end_stream(),
            ProxyBody::Prefixed { first, rest } => first.is_none() && rest.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ProxyBody::Upstream(streamed) => streamed.body.size_hint(),
            ProxyBody::Local(data) => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
            ProxyBody::Events(_) => SizeHint::new(),
            ProxyBody::Prefixed { first, rest } => {
                let ahead = first.as_ref().map_or(0, |d| d.len() as u64);
                let rest = rest.size_hint();
                let mut hint = SizeHint::new();
                hint.set_lower(rest.lower().saturating_add(ahead));
                if let Some(upper) = rest.upper() {
                    hint.set_upper(upper.saturating_add(ahead));
                }
                hint
            }
        }
    }
}

/// The read timeout of one upstream body: a deadline pushed back by every frame.
#[derive(Debug)]
pub struct Silence {
    limit: Duration,
    deadline: Pin<Box<tokio::time::Sleep>>,
}

impl Silence {
    /// A body may stay silent up to `limit` between two frames.
    pub fn new(limit: Duration) -> Self {
        Silence {
            limit,
            deadline: Box::pin(tokio::time::sleep(limit)),
        }
    }

    /// A frame (or the end) came: the silence starts over.
    fn heard(&mut self) {
        let next = tokio::time::Instant::now() + self.limit;
        self.deadline.as_mut().reset(next);
    }

    /// Whether the body has been silent for `limit` (else the task is woken when it has).
    fn over(&mut self, cx: &mut Context<'_>) -> bool {
        self.deadline.as_mut().poll(cx).is_ready()
    }
}

/// The error that ends a body the origin left silent for `read_timeout_seconds`.
#[derive(Debug)]
pub(crate) struct SilentOrigin(pub Duration);

impl std::fmt::Display for SilentOrigin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "no byte from the origin for {}s (read_timeout_seconds)",
            self.0.as_secs_f64()
        )
    }
}

impl std::error::Error for SilentOrigin {}

/// What to do when a block marker is found: called once with the response's permit and the marker.
pub(crate) type OnBlockMarker = Box<dyn Fn(&Permit, &str) + Send + Sync>;

/// A body's scan for block markers, with what to do when one is found.
pub struct MarkerScan {
    scan: BodyScan,
    on_found: OnBlockMarker,
}

impl std::fmt::Debug for MarkerScan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MarkerScan")
            .field("scan", &self.scan)
            .finish()
    }
}

impl MarkerScan {
    /// `scan`, calling `on_found` once when it finds a marker.
    pub fn new(scan: BodyScan, on_found: OnBlockMarker) -> Self {
        MarkerScan { scan, on_found }
    }

    /// Looks at the next chunk of the body of `permit`'s response. Returns whether the scan is over
    /// (a marker was found and acted on, or the scan limit is reached).
    pub fn feed(&mut self, chunk: &[u8], permit: Option<&Permit>) -> bool {
        match self.scan.feed(chunk) {
            Verdict::More => false,
            Verdict::Done => true,
            Verdict::Block(marker) => {
                self.found(permit, &marker);
                true
            }
        }
    }

    /// The body ended: acts on a block the scan decides on only then (a small page, a coded
    /// body).
    pub fn finish(&mut self, permit: Option<&Permit>) {
        if let Some(marker) = self.scan.finish() {
            self.found(permit, &marker);
        }
    }

    fn found(&self, permit: Option<&Permit>, marker: &str) {
        if let Some(permit) = permit {
            (self.on_found)(permit, marker);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `silence` is over now, polled once.
    async fn over_now(silence: &mut Silence) -> bool {
        std::future::poll_fn(|cx| Poll::Ready(silence.over(cx))).await
    }

    #[tokio::test(start_paused = true)]
    async fn silence_is_measured_between_reads_not_over_the_body() {
        let mut silence = Silence::new(Duration::from_secs(60));
        tokio::time::advance(Duration::from_secs(59)).await;
        assert!(!over_now(&mut silence).await);
        // A byte came: another 60 s from here, though the body is 59 s old.
        silence.heard();
        tokio::time::advance(Duration::from_secs(59)).await;
        assert!(!over_now(&mut silence).await);
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(over_now(&mut silence).await, "61 s without a byte");
    }
}
