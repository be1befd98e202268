//! The request a line is about, carried beside the request's future instead of in a `tracing`
//! span.
//!
//! Every proxied request used to open a `request{client job method host}` span: a slot in the
//! span registry, its fields formatted into a string when it opened, the span entered and left on
//! every poll, and closed at the end, about a twentieth of courtesy's instructions per request
//! whether or not a line inside it was ever written. With lines written by [`super::PlainLine`]
//! (no colours, no span filter in `RUST_LOG`), the request's fields are kept as they are, beside
//! the future ([`InRequest`]), and a line written while it runs writes them as the span's prefix
//! would have been written, byte for byte: `request{client=… job="…" method=… host=…}: `. Nothing
//! is formatted unless a line is. With colours or JSON the real span is kept.

use std::cell::Cell;
use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use tracing::Span;

/// Whether lines carry the request they are about (set once, when logging is set up).
static CARRIED: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// The request whose future this thread is polling, if any.
    static CURRENT: Cell<Option<Arc<RequestLine>>> = const { Cell::new(None) };
}

/// Says that lines are written by [`super::PlainLine`] with no filter on spans, so a request's
/// fields may be carried beside its future instead of in a span. Called by logging set-up.
pub fn carry_requests_in_lines() {
    CARRIED.store(true, Ordering::Relaxed);
}

/// Whether a request should carry its fields itself ([`carry_requests_in_lines`] was called and
/// `info` lines are on at all) rather than open a span.
pub(crate) fn lines_carry_requests() -> bool {
    CARRIED.load(Ordering::Relaxed) && tracing::level_enabled!(tracing::Level::INFO)
}

/// What the `request` span held: who asked, for which job, and what.
#[derive(Debug)]
pub(crate) struct RequestLine {
    /// The client's address.
    pub client: SocketAddr,
    /// The job's name.
    pub job: Arc<str>,
    /// The request's method.
    pub method: http::Method,
    /// The host key (`host:port`).
    pub host: String,
    /// The scheme, for a request that came out of a CONNECT.
    pub scheme: Option<&'static str>,
}

impl RequestLine {
    /// Writes `request{…}:` as the span's formatted fields read.
    fn write_to(&self, writer: &mut impl fmt::Write) -> fmt::Result {
        writer.write_str("request{client=")?;
        super::AddrText(self.client).write_to(writer)?;
        writer.write_str(" job=")?;
        write_quoted(writer, &self.job)?;
        writer.write_str(" method=")?;
        writer.write_str(self.method.as_str())?;
        writer.write_str(" host=")?;
        writer.write_str(&self.host)?;
        if let Some(scheme) = self.scheme {
            writer.write_str(" scheme=")?;
            write_quoted(writer, scheme)?;
        }
        writer.write_str("}:")
    }
}

/// Text as `{:?}` writes it, the way a `&str` field is written.
fn write_quoted(writer: &mut impl fmt::Write, text: &str) -> fmt::Result {
    if super::needs_no_escape(text) {
        writer.write_char('"')?;
        writer.write_str(text)?;
        writer.write_char('"')
    } else {
        write!(writer, "{text:?}")
    }
}

/// Writes the prefix of the request this thread is polling, if any; returns whether it did.
pub(crate) fn write_current(writer: &mut impl fmt::Write) -> Result<bool, fmt::Error> {
    CURRENT.with(|current| {
        let Some(line) = current.take() else {
            return Ok(false);
        };
        let written = line.write_to(writer);
        current.set(Some(line));
        written.map(|()| true)
    })
}

pin_project_lite::pin_project! {
    /// A request's future with what its lines say about it: its span (none when lines carry the
    /// request themselves) entered, and its [`RequestLine`] current, on every poll.
    pub(crate) struct InRequest<F> {
        #[pin]
        inner: F,
        span: Span,
        line: Option<Arc<RequestLine>>,
    }
}

impl<F> InRequest<F> {
    /// `inner` in `span`, with `line` current while it is polled.
    pub(crate) fn new(inner: F, span: Span, line: Option<Arc<RequestLine>>) -> InRequest<F> {
        InRequest { inner, span, line }
    }

    /// `inner` in the span and request it is made in (a task spawned by a request).
    pub(crate) fn current(inner: F) -> InRequest<F> {
        let line = CURRENT.with(|current| {
            let line = current.take();
            current.set(line.clone());
            line
        });
        InRequest::new(inner, Span::current(), line)
    }
}

/// Puts back the request that was current before a poll, even if the poll panics.
struct Restore {
    previous: Option<Arc<RequestLine>>,
}

impl Drop for Restore {
    fn drop(&mut self) {
        let previous = self.previous.take();
        CURRENT.with(|current| current.set(previous));
    }
}

impl<F: Future> Future for InRequest<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let _entered = this.span.enter();
        if this.line.is_none() {
            return this.inner.poll(cx);
        }
        let previous = CURRENT.with(|current| current.replace(this.line.take()));
        let restore = Restore { previous };
        let polled = this.inner.poll(cx);
        *this.line = CURRENT.with(|current| current.replace(None));
        drop(restore);
        polled
    }
}
