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
    /// The CONNECT tunnel whose future this thread is polling, if any (outside the request).
    static TUNNEL: Cell<Option<Arc<TunnelLine>>> = const { Cell::new(None) };
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

/// What the `connect` span held: who asked for a tunnel, for which job, to where, and how it is
/// served.
#[derive(Debug)]
pub(crate) struct TunnelLine {
    /// The client's address.
    pub client: SocketAddr,
    /// The job's name.
    pub job: Arc<str>,
    /// The CONNECT target (`host:port`).
    pub host: String,
    /// How the tunnel is served, as its `Debug` reads (`Intercept`, `Tunnel`).
    pub mode: String,
}

impl TunnelLine {
    /// Writes `connect{…}:` as the span's formatted fields read.
    fn write_to(&self, writer: &mut impl fmt::Write) -> fmt::Result {
        write_who(writer, "connect", self.client, &self.job)?;
        writer.write_str(" host=")?;
        writer.write_str(&self.host)?;
        writer.write_str(" mode=")?;
        writer.write_str(&self.mode)?;
        writer.write_str("}:")
    }
}

impl RequestLine {
    /// Writes `request{…}:` as the span's formatted fields read.
    fn write_to(&self, writer: &mut impl fmt::Write) -> fmt::Result {
        write_who(writer, "request", self.client, &self.job)?;
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

/// Writes the opening both spans share: `span{client=… job="…"`.
fn write_who(
    writer: &mut impl fmt::Write,
    span: &str,
    client: SocketAddr,
    job: &str,
) -> fmt::Result {
    writer.write_str(span)?;
    writer.write_str("{client=")?;
    super::AddrText(client).write_to(writer)?;
    writer.write_str(" job=")?;
    write_quoted(writer, job)
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

/// Writes the prefix of the tunnel and the request this thread is polling, if any (outermost
/// first, as the spans' scope reads); returns whether it wrote anything.
pub(crate) fn write_current(writer: &mut impl fmt::Write) -> Result<bool, fmt::Error> {
    let tunnel = peek(&TUNNEL, |tunnel| tunnel.write_to(writer))?;
    let request = peek(&CURRENT, |request| request.write_to(writer))?;
    Ok(tunnel || request)
}

/// Runs `write` on what `cell` holds, if anything; whether it did.
fn peek<T>(
    cell: &'static std::thread::LocalKey<Cell<Option<Arc<T>>>>,
    write: impl FnOnce(&T) -> fmt::Result,
) -> Result<bool, fmt::Error> {
    cell.with(|current| {
        let Some(held) = current.take() else {
            return Ok(false);
        };
        let written = write(&held);
        current.set(Some(held));
        written.map(|()| true)
    })
}

/// A clone of what `cell` holds.
fn cloned<T>(cell: &'static std::thread::LocalKey<Cell<Option<Arc<T>>>>) -> Option<Arc<T>> {
    cell.with(|current| {
        let held = current.take();
        current.set(held.clone());
        held
    })
}

pin_project_lite::pin_project! {
    /// A request's (or a tunnel's) future with what its lines say about it: its span (none when
    /// lines carry the request themselves) entered, and its [`RequestLine`] and [`TunnelLine`]
    /// current, on every poll.
    pub(crate) struct InRequest<F> {
        #[pin]
        inner: F,
        span: Span,
        line: Option<Arc<RequestLine>>,
        tunnel: Option<Arc<TunnelLine>>,
    }
}

impl<F> InRequest<F> {
    /// `inner` in `span`, with `line` current while it is polled.
    pub(crate) fn new(inner: F, span: Span, line: Option<Arc<RequestLine>>) -> InRequest<F> {
        InRequest {
            inner,
            span,
            line,
            tunnel: None,
        }
    }

    /// A tunnel's `inner`, with `tunnel` current while it is polled (and so around every request
    /// served inside it on the same task).
    pub(crate) fn tunnel(inner: F, tunnel: Arc<TunnelLine>) -> InRequest<F> {
        InRequest {
            inner,
            span: Span::none(),
            line: None,
            tunnel: Some(tunnel),
        }
    }

    /// `inner` in the span, tunnel and request it is made in (a task spawned by a request).
    pub(crate) fn current(inner: F) -> InRequest<F> {
        InRequest {
            inner,
            span: Span::current(),
            line: cloned(&CURRENT),
            tunnel: cloned(&TUNNEL),
        }
    }
}

/// Puts back what was current before a poll, even if the poll panics.
struct Restore {
    request: Option<Option<Arc<RequestLine>>>,
    tunnel: Option<Option<Arc<TunnelLine>>>,
}

impl Drop for Restore {
    fn drop(&mut self) {
        if let Some(previous) = self.request.take() {
            CURRENT.with(|current| current.set(previous));
        }
        if let Some(previous) = self.tunnel.take() {
            TUNNEL.with(|current| current.set(previous));
        }
    }
}

impl<F: Future> Future for InRequest<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let _entered = this.span.enter();
        if this.line.is_none() && this.tunnel.is_none() {
            return this.inner.poll(cx);
        }
        // Ours made current (what was, kept to put back), and taken back after the poll.
        let restore = Restore {
            request: this
                .line
                .take()
                .map(|line| CURRENT.with(|current| current.replace(Some(line)))),
            tunnel: this
                .tunnel
                .take()
                .map(|tunnel| TUNNEL.with(|current| current.replace(Some(tunnel)))),
        };
        let polled = this.inner.poll(cx);
        if restore.request.is_some() {
            *this.line = CURRENT.with(|current| current.replace(None));
        }
        if restore.tunnel.is_some() {
            *this.tunnel = TUNNEL.with(|current| current.replace(None));
        }
        drop(restore);
        polled
    }
}
