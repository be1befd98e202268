//! A request body that never went upstream (a local refusal, a skipped resource, a robots.txt
//! verdict, a failed dial) must not leave the client's connection in an unknown state: HTTP/1.1 has
//! no way to skip the rest of a body, so either courtesy reads and discards it (small bodies, so
//! the connection stays usable for the client's next request) or the answer says
//! `Connection: close` (so the client opens a new connection instead of writing into a dead one).

use std::time::Duration;

use http::header::{HeaderValue, CONNECTION, EXPECT};
use http::{HeaderMap, Response, Version};
use http_body::Body as _;
use http_body_util::BodyExt as _;
use hyper::body::Incoming;

use crate::proxy::answer::body::ProxyBody;

/// The most of an unread body courtesy reads and throws away to keep a connection usable.
pub(crate) const DRAIN_MAX_BYTES: u64 = 64 * 1024;

/// How long reading the rest of an unread body may take before the connection is given up.
const DRAIN_TIME: Duration = Duration::from_secs(2);

/// What courtesy knows, at the start, about the body of a request it may answer itself.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BodyOnEntry {
    /// The request carried a body (not known to be empty).
    had_body: bool,
    /// HTTP/1.x (a connection-level answer makes sense) rather than HTTP/2.
    http1: bool,
    /// The client waits for `100 Continue` before it sends the body.
    expects_continue: bool,
}

impl BodyOnEntry {
    /// What `version`, `headers` and `body` say before anything is read.
    pub(crate) fn of(version: Version, headers: &HeaderMap, body: &Incoming) -> Self {
        BodyOnEntry {
            had_body: !body.is_end_stream(),
            http1: version < Version::HTTP_2,
            expects_continue: headers
                .get(EXPECT)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.eq_ignore_ascii_case("100-continue")),
        }
    }

    /// The response as it goes to the client: when courtesy answered itself and the request's body
    /// is not all read, the rest is read and discarded if it is small and comes quickly, else the
    /// answer closes the connection. `unread` is the body when courtesy still holds it.
    pub(crate) async fn settle(
        self,
        mut response: Response<ProxyBody>,
        unread: Option<Incoming>,
    ) -> Response<ProxyBody> {
        let local = matches!(response.body(), ProxyBody::Local(_));
        if !(self.had_body && self.http1 && local) {
            return response;
        }
        let drained = match unread {
            // A client waiting for 100 Continue has sent nothing: asking for the body only to
            // throw it away would cost it the upload.
            Some(body) if !self.expects_continue => drain(body).await,
            _ => false,
        };
        if !drained {
            response
                .headers_mut()
                .insert(CONNECTION, HeaderValue::from_static("close"));
        }
        response
    }
}

/// Reads and discards `body` if it ends within [`DRAIN_MAX_BYTES`] and [`DRAIN_TIME`].
async fn drain(mut body: Incoming) -> bool {
    if body.is_end_stream() {
        return true;
    }
    if body.size_hint().lower() > DRAIN_MAX_BYTES {
        return false;
    }
    let read_all = async {
        let mut seen = 0u64;
        while let Some(frame) = body.frame().await {
            let Ok(frame) = frame else { return false };
            if let Some(data) = frame.data_ref() {
                seen += data.len() as u64;
                if seen > DRAIN_MAX_BYTES {
                    return false;
                }
            }
        }
        true
    };
    tokio::time::timeout(DRAIN_TIME, read_all)
        .await
        .unwrap_or(false)
}
