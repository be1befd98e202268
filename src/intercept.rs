//! What happens inside an accepted CONNECT: look at the first bytes, then terminate TLS with the
//! local CA, serve plain HTTP, or refuse.
//!
//! Every request that comes out of the tunnel goes back into `Proxy::forward_inside`: the same key
//! (`host:port` of the CONNECT), the same budget, feedback and logs as plain http. This module owns
//! the sniffing and the TLS accept; it does not mint certificates (`tls.rs`) or forward (`proxy.rs`).

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes};
use http::Request;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use rustls::ServerConfig;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio_rustls::LazyConfigAcceptor;
use tracing::{debug, warn};

use crate::proxy::{Proxy, Target};

/// How long a client may take to send its first bytes (and its TLS ClientHello) after the 200.
const FIRST_BYTES_TIMEOUT: Duration = Duration::from_secs(30);

/// What the first bytes inside a tunnel look like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opening {
    /// A TLS handshake record.
    Tls,
    /// An HTTP/1 request line (or the HTTP/2 preface).
    PlainHttp,
    /// Anything else.
    Other,
    /// Not enough bytes yet to tell.
    Undecided,
}

/// Tells TLS from plain HTTP by the first bytes of a stream.
pub fn classify_opening(bytes: &[u8]) -> Opening {
    match bytes.first() {
        None => Opening::Undecided,
        Some(0x16) => Opening::Tls,
        Some(b) if b.is_ascii_uppercase() => {
            let method_len = bytes.iter().take_while(|b| b.is_ascii_uppercase()).count();
            match bytes.get(method_len) {
                Some(b' ') if (3..=7).contains(&method_len) => Opening::PlainHttp,
                Some(_) => Opening::Other,
                None if method_len < 8 => Opening::Undecided,
                None => Opening::Other,
            }
        }
        Some(_) => Opening::Other,
    }
}

/// Serves what comes through an accepted CONNECT to `target` (after the 200 has been sent).
/// `leaf` is the server config for the CONNECT host in intercept mode, `None` in tunnel mode.
pub(crate) async fn serve_connect(
    proxy: Arc<Proxy>,
    req: Request<Incoming>,
    target: Target,
    leaf: Option<Arc<ServerConfig>>,
    client: SocketAddr,
) {
    let upgraded = match hyper::upgrade::on(req).await {
        Ok(u) => u,
        Err(e) => {
            debug!("CONNECT upgrade failed: {e}");
            return;
        }
    };
    let mut io = TokioIo::new(upgraded);
    let mut first = Vec::with_capacity(16);
    let opening = loop {
        let mut buf = [0u8; 16];
        let want = 16 - first.len();
        let read = tokio::time::timeout(FIRST_BYTES_TIMEOUT, io.read(&mut buf[..want])).await;
        match read {
            Ok(Ok(0)) | Err(_) => return,
            Ok(Ok(n)) => first.extend_from_slice(&buf[..n]),
            Ok(Err(e)) => {
                debug!("tunnel read failed: {e}");
                return;
            }
        }
        match classify_opening(&first) {
            Opening::Undecided if first.len() < 16 => continue,
            Opening::Undecided => break Opening::Other,
            decided => break decided,
        }
    };
    let stream = Prefixed::new(Bytes::from(first), io);
    match (opening, leaf) {
        (Opening::PlainHttp, _) => serve_http(proxy, stream, target, "http", client).await,
        (Opening::Tls, Some(leaf)) => intercept_tls(proxy, stream, target, leaf, client).await,
        (_, None) => proxy.tunnel_stream(stream, target).await,
        (_, Some(_)) => {
            warn!("refused a CONNECT tunnel that carries neither TLS nor HTTP");
        }
    }
}

/// Terminates TLS with a leaf for the name the client asked for: SNI when it names another host
/// than the CONNECT, else `leaf` (the CONNECT host's).
async fn intercept_tls<S>(
    proxy: Arc<Proxy>,
    stream: S,
    target: Target,
    leaf: Arc<ServerConfig>,
    client: SocketAddr,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let acceptor = LazyConfigAcceptor::new(rustls::server::Acceptor::default(), stream);
    let start = match tokio::time::timeout(FIRST_BYTES_TIMEOUT, acceptor).await {
        Ok(Ok(start)) => start,
        Ok(Err(e)) => {
            debug!("TLS ClientHello from the client failed: {e}");
            return;
        }
        Err(_) => return,
    };
    let sni = start
        .client_hello()
        .server_name()
        .map(str::to_ascii_lowercase);
    let config = match sni.filter(|name| *name != target.host) {
        None => leaf,
        Some(name) => match proxy.interceptor().server_config(&name) {
            Ok(c) => c,
            Err(e) => {
                warn!("cannot intercept: {e}");
                return;
            }
        },
    };
    match start.into_stream(config).await {
        Ok(tls) => serve_http(proxy, tls, target, "https", client).await,
        Err(e) => debug!("TLS handshake with the client failed: {e}"),
    }
}

/// Serves HTTP/1.1 or HTTP/2 on `stream`; every request goes to `target` through the proxy.
async fn serve_http<S>(
    proxy: Arc<Proxy>,
    stream: S,
    target: Target,
    scheme: &'static str,
    client: SocketAddr,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |req: Request<Incoming>| {
        let (proxy, target) = (proxy.clone(), target.clone());
        async move { Ok::<_, Infallible>(proxy.forward_inside(req, target, scheme, client).await) }
    });
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(30));
    if let Err(e) = builder
        .serve_connection(TokioIo::new(stream), service)
        .await
    {
        debug!("connection inside the tunnel ended: {e}");
    }
}

/// A stream with bytes already read from it put back in front.
pub struct Prefixed<S> {
    prefix: Bytes,
    inner: S,
}

impl<S> Prefixed<S> {
    /// `inner`, reading `prefix` first.
    pub fn new(prefix: Bytes, inner: S) -> Self {
        Prefixed { prefix, inner }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.prefix.has_remaining() {
            let n = this.prefix.len().min(buf.remaining());
            buf.put_slice(&this.prefix[..n]);
            this.prefix.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefixed<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openings_are_told_apart() {
        assert_eq!(classify_opening(&[0x16, 0x03, 0x01]), Opening::Tls);
        assert_eq!(classify_opening(b"GET / HTTP/1.1\r\n"), Opening::PlainHttp);
        assert_eq!(classify_opening(b"OPTIONS * HTTP/1.1"), Opening::PlainHttp);
        assert_eq!(classify_opening(b"PRI * HTTP/2.0"), Opening::PlainHttp);
        assert_eq!(classify_opening(b"GE"), Opening::Undecided);
        assert_eq!(classify_opening(b""), Opening::Undecided);
        assert_eq!(classify_opening(b"SSH-2.0-OpenSSH"), Opening::Other);
        assert_eq!(classify_opening(b"\x00\x01"), Opening::Other);
        assert_eq!(classify_opening(b"ABCDEFGHIJ"), Opening::Other);
    }

    #[tokio::test]
    async fn prefixed_streams_replay_their_prefix_first() {
        let (mut a, b) = tokio::io::duplex(64);
        tokio::io::AsyncWriteExt::write_all(&mut a, b" world")
            .await
            .unwrap();
        drop(a);
        let mut p = Prefixed::new(Bytes::from_static(b"hello"), b);
        let mut out = String::new();
        p.read_to_string(&mut out).await.unwrap();
        assert_eq!(out, "hello world");
    }
}
