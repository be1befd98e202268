//! The first bytes inside an accepted CONNECT: telling TLS from plain HTTP from anything else, and
//! the stream that puts those bytes back in front so the real reader sees the whole stream.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// What the first bytes inside a tunnel look like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Opening {
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
pub(crate) fn classify_opening(bytes: &[u8]) -> Opening {
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

/// A stream with bytes already read from it put back in front.
pub(crate) struct Prefixed<S> {
    prefix: Bytes,
    inner: S,
}

impl<S> Prefixed<S> {
    /// `inner`, reading `prefix` first.
    pub(crate) fn new(prefix: Bytes, inner: S) -> Self {
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
    use tokio::io::AsyncReadExt;

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
