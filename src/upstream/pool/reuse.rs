//! Whether a request went out on a pooled connection that had carried requests before: an origin
//! may close an idle kept-alive connection at the moment courtesy sends on it, and then the origin
//! never saw the request. Such a failure is courtesy's to repair (one more try on a fresh
//! connection, for a request that may be sent twice), not the host's to be blamed for.
//!
//! Every upstream connection carries a counter of the requests sent on it, in the connection's
//! metadata (`Connected::extra`), which the pooled client puts in each response's extensions and in
//! each error: no per-request bookkeeping on the way out. The same wrapper marks a connection to
//! an HTTP parent proxy that carries `http://` requests as proxied (`Connected::proxy`), so that
//! the client sends them in absolute form.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::Uri;
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_util::client::legacy::connect::{Connected, Connection};

use super::table::{ConnState, IdleMark, UpstreamSlots};

/// One upstream connection's state: how many requests were answered on it, and whether it is idle
/// (`super::table`).
#[derive(Debug, Clone)]
struct Uses(Arc<ConnState>);

/// A connector whose connections count their requests.
#[derive(Debug, Clone)]
pub(crate) struct Counting<C> {
    inner: C,
    /// `max_upstream_connections`: every connection made holds a slot for its life.
    slots: Option<UpstreamSlots>,
    /// Whether `C` connects to an HTTP parent proxy, which takes `http://` requests in absolute
    /// form on a plain connection to it.
    forwarding: bool,
}

impl<C> Counting<C> {
    /// Counts the connections of `inner`, which connects to the targets (or tunnels to them).
    pub(crate) fn new(inner: C) -> Self {
        Counting {
            inner,
            slots: None,
            forwarding: false,
        }
    }

    /// These connections, each holding one of `slots` while it is open.
    pub(crate) fn capped(mut self, slots: UpstreamSlots) -> Self {
        self.slots = Some(slots);
        self
    }

    /// Counts the connections of `inner`, which for `http://` targets connects to an HTTP parent
    /// proxy: those connections are marked proxied.
    pub(crate) fn forwarding(inner: C) -> Self {
        Counting {
            inner,
            slots: None,
            forwarding: true,
        }
    }
}

impl<C> tower::Service<Uri> for Counting<C>
where
    C: tower::Service<Uri> + Clone + Send + 'static,
    C::Future: Send + 'static,
    C::Error: Into<BoxError>,
{
    type Response = Counted<C::Response>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let proxied = self.forwarding && uri.scheme_str() == Some("http");
        let slots = self.slots.clone();
        let Some(slots) = slots else {
            let connecting = self.inner.call(uri);
            return Box::pin(async move {
                Ok(Counted {
                    io: connecting.await.map_err(Into::into)?,
                    uses: Uses(ConnState::unlisted()),
                    writing: false,
                    proxied,
                    _slot: None,
                })
            });
        };
        // The slot first, then the connection: a full table makes no socket.
        let inner = self.inner.clone();
        Box::pin(async move {
            let slot = slots.take().await?;
            let io = tower::ServiceExt::oneshot(inner, uri)
                .await
                .map_err(Into::into)?;
            Ok(Counted {
                io,
                uses: Uses(slots.new_connection()),
                writing: false,
                proxied,
                _slot: Some(slot),
            })
        })
    }
}

/// A boxed error, as the pooled client takes it.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// An upstream connection with its request counter.
#[derive(Debug)]
pub(crate) struct Counted<T> {
    io: T,
    uses: Uses,
    /// The last I/O was a write: a write after a read begins a request.
    writing: bool,
    /// A plain connection to an HTTP parent proxy, for absolute-form requests.
    proxied: bool,
    /// Its `max_upstream_connections` slot, given back when it closes.
    _slot: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl<T: Connection> Connection for Counted<T> {
    fn connected(&self) -> Connected {
        let connected = self.io.connected().extra(self.uses.clone());
        if self.proxied {
            connected.proxy(true)
        } else {
            connected
        }
    }
}

impl<T: Read + Unpin> Read for Counted<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.uses.0.read_ends(cx.waker()) {
            // Idle, and its slot is wanted for a new connection: end it like an origin's close.
            return Poll::Ready(Ok(()));
        }
        let read = Pin::new(&mut this.io).poll_read(cx, buf);
        if read.is_ready() {
            this.writing = false;
        }
        read
    }
}

impl<T: Write + Unpin> Write for Counted<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Some(refused) = this.refuse_request() {
            return refused;
        }
        let written = Pin::new(&mut this.io).poll_write(cx, buf);
        this.wrote(&written);
        written
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Some(refused) = this.refuse_request() {
            return refused;
        }
        let written = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.wrote(&written);
        written
    }
}

impl<T> Counted<T> {
    /// The error for a write that would begin a request on a retired connection (nothing of it is
    /// sent: the request fails as on a connection the origin had closed, and a request that may be
    /// sent twice goes again on a fresh one).
    fn refuse_request(&self) -> Option<Poll<io::Result<usize>>> {
        (!self.writing && self.uses.0.is_retired()).then(|| {
            Poll::Ready(Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "courtesy retired this upstream connection (its last answer's framing was \
                 suspect, RFC 9112 6.3)",
            )))
        })
    }

    /// Notes a write: the first bytes written after a read begin a request.
    fn wrote(&mut self, written: &Poll<io::Result<usize>>) {
        if !self.writing && matches!(written, Poll::Ready(Ok(n)) if *n > 0) {
            self.writing = true;
            self.uses.0.begin_request();
        }
    }
}

/// Counts an answered request on its connection (the pooled client copies the connection's
/// metadata into the response's extensions), and returns the mark that sets the connection idle
/// when dropped: to be held until the response's body has been read or given up.
pub(crate) fn count_answered<B>(response: &http::Response<B>) -> Option<IdleMark> {
    let uses = response.extensions().get::<Uses>()?;
    if response.version() == http::Version::HTTP_2 {
        uses.0.set_multiplexed();
    }
    uses.0.answered.fetch_add(1, Ordering::Relaxed);
    Some(uses.0.answered_now())
}

/// Retires the connection that carried `response`: it closes once the response has been read (or
/// given up), and no request goes out on it again (`ConnState::retire`).
pub(crate) fn retire<B>(response: &http::Response<B>) {
    if let Some(uses) = response.extensions().get::<Uses>() {
        uses.0.retire();
    }
}

/// Counts a failed request on its connection; returns whether that connection had carried a
/// request before (false when none was reached). The error carries the connection's metadata.
pub(crate) fn count_failed(error: &hyper_util::client::legacy::Error) -> bool {
    let Some(connected) = error.connect_info() else {
        return false;
    };
    let mut extensions = http::Extensions::new();
    connected.get_extras(&mut extensions);
    extensions
        .get::<Uses>()
        .is_some_and(|uses| uses.0.answered.fetch_add(1, Ordering::Relaxed) > 0)
}
