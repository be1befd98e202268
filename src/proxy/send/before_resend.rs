//! Before courtesy sends again a request its origin answered 429 or 503 (`retry_idempotent`):
//! whether the answer was a challenge page or a wall rather than "come back later". A block is
//! never retried: it pauses the host (invariant 14), and the client gets the page as the origin
//! sent it.
//!
//! A vendor's challenge header says so at once. Otherwise the body's first bytes are read (at
//! most `block_scan_bytes`, each within `read_timeout_seconds`) and scanned for the host's block
//! markers exactly as a streamed answer is (`crate::pacing::blocks`, decoded when compressed);
//! 429 and 503 are challenge statuses, so the scan ends at its limit whatever the body's length.
//! What was read goes to the client ahead of the rest ([`ProxyBody::Prefixed`]).

use bytes::{Bytes, BytesMut};
use http::Response;
use http_body_util::BodyExt as _;
use hyper::body::Incoming;

use crate::budget::limiter::Permit;
use crate::config::HostPolicy;
use crate::pacing::blocks::{header_block, scan_wanted, BodyScan, Verdict};
use crate::proxy::Proxy;

/// A 429 or 503 that is a block: the response (its body what is left unread) and the bytes read
/// ahead of it.
pub(crate) struct BlockAnswer {
    /// The origin's response, its body's first bytes already read.
    pub(crate) response: Response<Incoming>,
    /// Those first bytes.
    pub(crate) ahead: Bytes,
}

impl Proxy {
    /// `None` when `response` (a 429 or 503 to `permit`'s request) says only "later", so that it
    /// may be dropped and the request sent again; the response back, with what was read of it,
    /// when it is a challenge or a wall (a body marker pauses the host here; a challenge header
    /// is left to `finish_response`, which pauses it as for any answer). A body that fails or
    /// falls silent says nothing: the request is sent again.
    pub(crate) async fn block_before_resend(
        &self,
        response: Response<Incoming>,
        permit: &Permit,
        policy: &HostPolicy,
    ) -> Option<BlockAnswer> {
        if header_block(response.headers()).is_some() {
            return Some(BlockAnswer {
                response,
                ahead: Bytes::new(),
            });
        }
        let blocks = &policy.blocks;
        if blocks.scan_bytes == 0 || blocks.markers.is_empty() {
            return None;
        }
        let encoding = scan_wanted(response.headers())?;
        let status = response.status().as_u16();
        let mut scan = BodyScan::new(blocks.markers.clone(), blocks.scan_bytes, encoding, status);
        let (parts, mut body) = response.into_parts();
        let mut ahead = BytesMut::new();
        let found = loop {
            let frame = tokio::time::timeout(policy.forward.read_timeout, body.frame()).await;
            let data = match frame {
                Ok(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => data,
                    Err(_) => continue,
                },
                Ok(None) => break scan.finish(),
                Ok(Some(Err(_))) | Err(_) => return None,
            };
            ahead.extend_from_slice(&data);
            match scan.feed(&data) {
                Verdict::More => {}
                Verdict::Done => break None,
                Verdict::Block(marker) => break Some(marker),
            }
        }?;
        let what = format!("block marker {found:?} (not retried)");
        self.blocks.soft(permit, &what, status);
        Some(BlockAnswer {
            response: Response::from_parts(parts, body),
            ahead: ahead.freeze(),
        })
    }
}
