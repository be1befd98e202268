//! Serving connections: the HTTP server settings every listener shares, and one graceful shutdown
//! that every connection joins, including the ones served inside CONNECT tunnels.
//!
//! At shutdown each connection is asked to finish the request in flight and then close (idle
//! keep-alive connections close at once); the caller waits for all of them up to
//! `shutdown_grace_seconds`. A task spawned anywhere through [`Connections::spawn`] is waited for,
//! so work handed off by a CONNECT upgrade is never cut short by an early exit.

use std::error::Error as StdError;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use hyper::body::{Body, Incoming};
use hyper::rt::{Read, Write};
use hyper::server::conn::http1;
use hyper::service::HttpService;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use hyper_util::server::conn::auto;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// How long a client may take to send a request's headers inside a CONNECT tunnel (the
/// listeners' own is `header_timeout_seconds`).
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// The smallest read buffer hyper accepts for HTTP/1 (it panics below it).
const MIN_HEAD_BYTES: usize = 8192;

/// Every connection task, and the signal that asks them to finish.
#[derive(Debug, Clone, Default)]
pub struct Connections {
    stop: CancellationToken,
    tasks: TaskTracker,
}

impl Connections {
    /// No connections yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The HTTP server settings of every listener: HTTP/1.1 with keep-alive, a header read
    /// timeout and a bound on the request head (`max_head_bytes`, at least 8192), and HTTP/2
    /// too where `http2` (inside intercepted TLS, where ALPN may choose it).
    pub fn builder(http2: bool, max_head_bytes: usize) -> auto::Builder<TokioExecutor> {
        Connections::builder_with(http2, HEADER_READ_TIMEOUT, max_head_bytes)
    }

    /// [`Connections::builder`] with `header_timeout` for each request head.
    pub fn builder_with(
        http2: bool,
        header_timeout: Duration,
        max_head_bytes: usize,
    ) -> auto::Builder<TokioExecutor> {
        // hyper panics below its minimum buffer; the config's range starts there too.
        let max_head_bytes = max_head_bytes.max(MIN_HEAD_BYTES);
        let mut builder = auto::Builder::new(TokioExecutor::new());
        if !http2 {
            builder = builder.http1_only();
        }
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(header_timeout)
            // A head that does not fit is hyper's 431 (Proxy-Status added by `unparsable`).
            .max_buf_size(max_head_bytes)
            .keep_alive(true);
        if http2 {
            // Extended CONNECT (RFC 8441): an h2 client may open a WebSocket on a stream.
            builder
                .http2()
                .max_header_list_size(u32::try_from(max_head_bytes).unwrap_or(u32::MAX))
                .enable_connect_protocol();
        }
        builder
    }

    /// The HTTP/1.1 server settings of both listening ports (proxy and admin, one builder):
    /// keep-alive, `header_timeout` for each request head, and a head of at most
    /// `max_head_bytes` (at least 8192), exactly. hyper's read buffer alone (`max_buf_size`, all
    /// that [`Connections::builder_with`] can set) is checked only between reads, and one read
    /// can take it to about twice the bound; `max_header_size` judges the head itself.
    pub fn listener(header_timeout: Duration, max_head_bytes: usize) -> http1::Builder {
        let max_head_bytes = max_head_bytes.max(MIN_HEAD_BYTES);
        let mut builder = http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(header_timeout)
            // A head that does not fit is hyper's 431 (Proxy-Status added by `unparsable`).
            .max_header_size(max_head_bytes)
            .max_buf_size(max_head_bytes)
            .keep_alive(true);
        builder
    }

    /// Runs `task` on its own, as part of the work a shutdown waits for.
    pub fn spawn<F>(&self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.tasks.spawn(task);
    }

    /// Serves `conn` to its end; once shutdown begins, asks it to finish what is in flight and close.
    pub fn serve<C>(&self, conn: C) -> impl Future<Output = C::Output> + Send + 'static
    where
        C: Finish + Send + 'static,
    {
        self.serve_until(conn, std::future::pending())
    }

    /// [`Connections::serve`], also asking `conn` to finish and close when `close` resolves (the
    /// connection gate closing an idle connection to make room; hyper closes an idle connection
    /// at once and lets a request in flight finish first).
    pub fn serve_until<C>(
        &self,
        conn: C,
        close: impl Future<Output = ()> + Send + 'static,
    ) -> impl Future<Output = C::Output> + Send + 'static
    where
        C: Finish + Send + 'static,
    {
        let stopping = self.stopping();
        async move {
            tokio::pin!(conn);
            tokio::select! {
                done = conn.as_mut() => return done,
                () = stopping => {}
                () = close => {}
            }
            conn.as_mut().finish();
            conn.await
        }
    }

    /// Resolves once shutdown has begun (for work that is not an HTTP connection, such as waiting
    /// for a tunnel's first bytes).
    pub fn stopping(&self) -> impl Future<Output = ()> + Send + 'static {
        self.stop.clone().cancelled_owned()
    }

    /// Asks every connection to finish and waits until all tasks are done, or `grace` has passed.
    /// Returns whether everything finished in time.
    pub async fn shut_down(&self, grace: Duration) -> bool {
        self.stop.cancel();
        self.tasks.close();
        tokio::time::timeout(grace, self.tasks.wait()).await.is_ok()
    }
}

/// A served connection that can be asked to finish the request in flight and close (hyper's
/// `graceful_shutdown`, which hyper-util's `GracefulConnection` lacks for an HTTP/1 connection
/// with upgrades).
pub trait Finish: Future {
    /// Asks the connection to finish what is in flight and close.
    fn finish(self: Pin<&mut Self>);
}

impl<I, S, B> Finish for http1::Connection<I, S>
where
    S: HttpService<Incoming, ResBody = B>,
    S::Error: Into<Box<dyn StdError + Send + Sync>>,
    I: Read + Write + Unpin + 'static,
    B: Body + 'static,
    B::Error: Into<Box<dyn StdError + Send + Sync>>,
{
    fn finish(self: Pin<&mut Self>) {
        self.graceful_shutdown();
    }
}

impl<I, S, B> Finish for http1::UpgradeableConnection<I, S>
where
    S: HttpService<Incoming, ResBody = B>,
    S::Error: Into<Box<dyn StdError + Send + Sync>>,
    I: Read + Write + Unpin + Send + 'static,
    B: Body + 'static,
    B::Error: Into<Box<dyn StdError + Send + Sync>>,
{
    fn finish(self: Pin<&mut Self>) {
        self.graceful_shutdown();
    }
}

impl<I, S, B, E> Finish for auto::UpgradeableConnection<'_, I, S, E>
where
    S: hyper::service::Service<http::Request<Incoming>, Response = http::Response<B>>,
    S::Error: Into<Box<dyn StdError + Send + Sync>>,
    S::Future: 'static,
    I: Read + Write + Unpin + Send + 'static,
    B: Body + 'static,
    B::Error: Into<Box<dyn StdError + Send + Sync>>,
    E: hyper::rt::bounds::Http2ServerConnExec<S::Future, B>,
{
    fn finish(self: Pin<&mut Self>) {
        self.graceful_shutdown();
    }
}
