//! `CONNECT host:port` to an HTTP parent, with `Proxy-Authorization: Basic` from the URL's
//! credentials, and its answer: any 2xx opens the tunnel (RFC 9110 9.3.6); a 407 means the
//! credentials are wrong or missing; anything else is the parent declining, with the status it
//! answered and its own `Proxy-Status` kept for courtesy's answer.
//!
//! The answer is read a byte at a time up to its blank line, so that nothing the target sends
//! right behind it is taken from the tunnel. It is small and read once per connection.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::{basic_auth, ParentError, ParentErrorKind};
use crate::config::UpstreamProxy;
use crate::wire::proxy_status::ProxyError;

/// A parent's answer to CONNECT longer than this is not an answer.
const MAX_ANSWER: usize = 16 * 1024;

/// Asks `parent`, on `stream`, for a tunnel to `host:port`; `Ok` once it answered 2xx.
pub(super) async fn handshake<S>(
    stream: &mut S,
    parent: &UpstreamProxy,
    host: &str,
    port: u16,
) -> Result<(), ParentError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let authority = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let mut request = format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n").into_bytes();
    if let Some(auth) = basic_auth(parent) {
        request.extend_from_slice(b"Proxy-Authorization: ");
        request.extend_from_slice(auth.as_bytes());
        request.extend_from_slice(b"\r\n");
    }
    request.extend_from_slice(b"\r\n");
    let io = |e: std::io::Error| ParentError::of_io(parent, &e);
    stream.write_all(&request).await.map_err(io)?;
    let head = read_head(stream).await.map_err(io)?;
    judge(parent, &authority, &head)
}

/// The answer's bytes up to and including its blank line (or [`MAX_ANSWER`] of them).
async fn read_head<S: AsyncRead + Unpin>(stream: &mut S) -> std::io::Result<Vec<u8>> {
    let mut head = Vec::with_capacity(256);
    while head.len() < MAX_ANSWER && !head.ends_with(b"\r\n\r\n") {
        head.push(stream.read_u8().await?);
    }
    Ok(head)
}

/// What the parent's answer `head` to `CONNECT authority` means.
pub(super) fn judge(
    parent: &UpstreamProxy,
    authority: &str,
    head: &[u8],
) -> Result<(), ParentError> {
    let name = parent.endpoint();
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut answer = httparse::Response::new(&mut headers);
    let code = match answer.parse(head) {
        Ok(httparse::Status::Complete(_)) => answer.code.unwrap_or(0),
        _ => {
            return Err(ParentError::new(
                parent,
                ParentErrorKind::ProtocolError,
                ProxyError::HttpProtocolError,
                format!("parent proxy {name} sent an invalid answer to CONNECT {authority}"),
            ))
        }
    };
    if (200..300).contains(&code) {
        return Ok(());
    }
    let parent_status = answer
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("proxy-status"))
        .and_then(|h| http::HeaderValue::from_bytes(h.value).ok());
    let failure = if code == 407 {
        ParentError::new(
            parent,
            ParentErrorKind::AuthFailed,
            ProxyError::ProxyConfigurationError,
            format!(
                "parent proxy {name} answered 407 to CONNECT {authority}: the credentials in \
                 upstream_proxy are missing or not accepted"
            ),
        )
    } else {
        ParentError::new(
            parent,
            ParentErrorKind::Refused,
            ParentError::declined(code),
            format!("parent proxy {name} answered {code} to CONNECT {authority}"),
        )
    };
    Err(failure.answered(code, parent_status.as_ref()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::StatusCode;

    fn parent() -> UpstreamProxy {
        UpstreamProxy::parse("http://u:secret@p.test:3128").unwrap()
    }

    #[tokio::test]
    async fn a_2xx_opens_the_tunnel_and_leaves_what_follows_in_it() {
        let (mut ours, mut theirs) = tokio::io::duplex(4096);
        let parent_side = tokio::spawn(async move {
            let mut buf = vec![0u8; 512];
            let n = theirs.read(&mut buf).await.unwrap();
            let request = String::from_utf8_lossy(&buf[..n]).into_owned();
            theirs
                .write_all(b"HTTP/1.1 200 Connection established\r\n\r\nBANNER")
                .await
                .unwrap();
            request
        });
        handshake(&mut ours, &parent(), "a.test", 443)
            .await
            .unwrap();
        let mut banner = [0u8; 6];
        ours.read_exact(&mut banner).await.unwrap();
        assert_eq!(&banner, b"BANNER");
        let request = parent_side.await.unwrap();
        assert!(
            request.starts_with("CONNECT a.test:443 HTTP/1.1\r\n"),
            "{request}"
        );
        assert!(request.contains("Proxy-Authorization: Basic dTpzZWNyZXQ=\r\n"));
    }

    #[test]
    fn refusals_keep_the_status_and_the_parents_proxy_status() {
        let e = judge(&parent(), "a.test:443", b"HTTP/1.1 407 Proxy Auth\r\n\r\n").unwrap_err();
        assert_eq!(
            (e.status, e.error, e.fault.kind, e.fault.received_status),
            (
                StatusCode::BAD_GATEWAY,
                ProxyError::ProxyConfigurationError,
                ParentErrorKind::AuthFailed,
                Some(407)
            )
        );
        assert!(!e.details.contains("secret"));
        let head = b"HTTP/1.1 503 No\r\nProxy-Status: squid; error=connection_refused\r\n\r\n";
        let e = judge(&parent(), "a.test:443", head).unwrap_err();
        assert_eq!(e.error, ProxyError::DestinationUnavailable);
        assert_eq!(
            e.fault.parent_status.unwrap(),
            "squid; error=connection_refused"
        );
        let e = judge(&parent(), "a.test:443", b"HTTP/1.1 504 Late\r\n\r\n").unwrap_err();
        assert_eq!(e.status, StatusCode::GATEWAY_TIMEOUT);
        let e = judge(&parent(), "a.test:443", b"SSH-2.0-x\r\n\r\n").unwrap_err();
        assert_eq!(e.fault.kind, ParentErrorKind::ProtocolError);
    }
}
