//! hyper's own answer to a request head it cannot parse, given the `Proxy-Status` every answer
//! of courtesy carries.
//!
//! A request line hyper cannot read never reaches courtesy's code: a Unicode host sent as raw
//! UTF-8 (`GET http://bücher.example/`; the `http` crate's URI parser takes ASCII only), a bad
//! method, a malformed header, a head too large. hyper answers it itself, with a status line,
//! `content-length: 0` and `date`, no other header and no hook to add one, then closes the
//! connection. [`ParseRefusals`] wraps the client's connection and, when what hyper writes is
//! exactly such an automatic answer (a 400, 414 or 431 head of `connection: close`,
//! `content-length: 0` and `date` and nothing else, which no answer courtesy makes carries),
//! writes a `Proxy-Status` line after its status line. Everything else passes through untouched, with one
//! prefix comparison per write.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::proxy::answer::response::{proxy_status_member, ProxyError};

/// The status lines of the answers hyper writes for a request it cannot parse
/// (`proto::h1::role::Server::on_error`)...
const AUTOMATIC: [&[u8]; 3] = [
    b"HTTP/1.1 400 Bad Request\r\n",
    b"HTTP/1.1 414 URI Too Long\r\n",
    b"HTTP/1.1 431 Request Header Fields Too Large\r\n",
];

/// ...and the headers after them, all of them: an IMF-fixdate (29 bytes) and the empty line end it.
const AUTOMATIC_HEADERS: &[u8] = b"connection: close\r\ncontent-length: 0\r\ndate: ";
const DATE_AND_END: usize = 29 + 4;

/// A client connection whose automatic parse-error answers from hyper get a `Proxy-Status`.
#[derive(Debug)]
pub(crate) struct ParseRefusals<S> {
    inner: S,
    /// A rewritten answer not yet all written, and how much of it is.
    pending: Vec<u8>,
    written: usize,
}

impl<S> ParseRefusals<S> {
    /// Wraps `inner`, the connection a client sends requests on.
    pub(crate) fn new(inner: S) -> Self {
        ParseRefusals {
            inner,
            pending: Vec::new(),
            written: 0,
        }
    }
}

/// `head` with a `Proxy-Status` line after its status line, if it is one of hyper's automatic
/// answers; `None` otherwise.
fn with_proxy_status(head: &[u8]) -> Option<Vec<u8>> {
    let status = AUTOMATIC.iter().find(|a| head.starts_with(a))?;
    let line_end = status.len();
    let headers = &head[line_end..];
    if !headers.starts_with(AUTOMATIC_HEADERS)
        || headers.len() != AUTOMATIC_HEADERS.len() + DATE_AND_END
        || !headers.ends_with(b"\r\n\r\n")
    {
        return None;
    }
    let member = proxy_status_member(
        ProxyError::HttpRequestError,
        "",
        "the request could not be parsed: its request line or a header is malformed or too \
         large (a non-ASCII host name must be sent in its ASCII form, xn--...)",
    );
    let mut out = Vec::with_capacity(head.len() + member.len() + 16);
    out.extend_from_slice(&head[..line_end]);
    out.extend_from_slice(b"proxy-status: ");
    out.extend_from_slice(member.as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&head[line_end..]);
    Some(out)
}

impl<S: AsyncWrite + Unpin> ParseRefusals<S> {
    /// Writes what is left of a rewritten answer.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.pending.len() {
            let n =
                ready!(Pin::new(&mut self.inner).poll_write(cx, &self.pending[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        self.pending = Vec::new();
        self.written = 0;
        Poll::Ready(Ok(()))
    }

    /// Takes all of `buf` as a rewritten answer, if it is one of hyper's automatic answers.
    fn poll_rewrite(
        &mut self,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Option<Poll<io::Result<usize>>> {
        let rewritten = with_proxy_status(buf)?;
        self.pending = rewritten;
        self.written = 0;
        // All of `buf` is taken; the rest goes out now or on the flush that follows.
        Some(match self.poll_drain(cx) {
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            _ => Poll::Ready(Ok(buf.len())),
        })
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for ParseRefusals<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for ParseRefusals<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_drain(cx))?;
        if let Some(done) = this.poll_rewrite(cx, buf) {
            return done;
        }
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_drain(cx))?;
        if let Some(first) = bufs.iter().find(|b| !b.is_empty()) {
            if let Some(done) = this.poll_rewrite(cx, first) {
                return done;
            }
        }
        Pin::new(&mut this.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::Full;
    use hyper::body::Bytes;
    use hyper_util::rt::TokioIo;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// What hyper answers `request` with, served through [`ParseRefusals`].
    async fn answer_to(request: &[u8]) -> String {
        let (client, server) = tokio::io::duplex(16 * 1024);
        let service = hyper::service::service_fn(|_req| async {
            Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(Bytes::from("ok"))))
        });
        let serving = tokio::spawn(
            hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(ParseRefusals::new(server)), service),
        );
        let mut client = client;
        client.write_all(request).await.unwrap();
        let mut out = Vec::new();
        client.read_to_end(&mut out).await.unwrap();
        let _ = serving.await;
        String::from_utf8_lossy(&out).into_owned()
    }

    #[tokio::test]
    async fn a_unicode_host_gets_a_400_with_proxy_status() {
        let answer =
            answer_to("GET http://bücher.example/ HTTP/1.1\r\nHost: x\r\n\r\n".as_bytes()).await;
        assert!(answer.starts_with("HTTP/1.1 400 Bad Request\r\nproxy-status: courtesy; error=http_request_error; details="), "{answer}");
        assert!(
            answer.contains("\r\nconnection: close\r\ncontent-length: 0\r\n"),
            "{answer}"
        );
        assert!(answer.ends_with("\r\n\r\n"), "{answer}");
    }

    #[tokio::test]
    async fn answers_courtesy_makes_pass_untouched() {
        let answer = answer_to(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await;
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        assert!(!answer.contains("proxy-status"), "{answer}");
        assert!(answer.ends_with("\r\n\r\nok"), "{answer}");
        assert_eq!(
            with_proxy_status(b"HTTP/1.1 400 Bad Request\r\nproxy-status: x\r\n"),
            None
        );
    }
}
