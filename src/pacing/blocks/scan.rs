//! What a block looks like in a response: a vendor's challenge header, block markers in the first
//! bytes of a text body (found across chunk edges without holding a plain body back; of a
//! compressed body, in a copy of its first bytes decoded on the side). Redirects to a block page
//! are `redirect.rs`'s.
//!
//! A marker counts at once on a status challenge pages come with (403, 405, 429, 503); on any
//! other status (a 200) only if the whole page is small (at most [`SMALL_PAGE`] bytes decoded):
//! an interstitial is a small page, a product or contact page that carries a marker is not.

use std::sync::Arc;

use http::header::{CONTENT_ENCODING, CONTENT_TYPE};
use http::HeaderMap;

use super::decode::{decode_prefix, Encoding};
use crate::config::BlockMarkers;

/// Scans the first `limit` bytes of a body for block markers (without regard to ASCII case),
/// across chunk edges, without holding the body back.
pub(super) struct BlockScan {
    markers: Arc<BlockMarkers>,
    remaining: usize,
    /// The last bytes seen (shorter than the longest marker), so a marker split across chunks
    /// is found.
    tail: Vec<u8>,
}

impl std::fmt::Debug for BlockScan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockScan")
            .field("remaining", &self.remaining)
            .finish()
    }
}

impl BlockScan {
    /// A scanner for `markers` over the first `limit` bytes.
    pub(super) fn new(markers: Arc<BlockMarkers>, limit: usize) -> Self {
        BlockScan {
            markers,
            remaining: limit,
            tail: Vec::new(),
        }
    }

    /// Looks at the next chunk; returns the marker found, if any. One pass over the chunk for all
    /// markers, no copy of it: only the seam with the previous chunk is copied.
    pub(super) fn feed(&mut self, chunk: &[u8]) -> Option<String> {
        let take = chunk.len().min(self.remaining);
        self.remaining -= take;
        let chunk = &chunk[..take];
        let overlap = self.markers.longest().saturating_sub(1);
        let old_tail = std::mem::take(&mut self.tail);
        if !old_tail.is_empty() {
            let mut seam = old_tail.clone();
            seam.extend_from_slice(&chunk[..overlap.min(chunk.len())]);
            if let Some(m) = self.markers.find(&seam) {
                return Some(m.to_string());
            }
        }
        if let Some(m) = self.markers.find(chunk) {
            return Some(m.to_string());
        }
        // Keep the last `overlap` bytes seen, for the next seam.
        if chunk.len() >= overlap {
            self.tail = chunk[chunk.len() - overlap..].to_vec();
        } else {
            let mut tail = old_tail;
            tail.extend_from_slice(chunk);
            let cut = tail.len().saturating_sub(overlap);
            tail.drain(..cut);
            self.tail = tail;
        }
        None
    }

    /// Whether the scan limit is reached.
    pub(super) fn done(&self) -> bool {
        self.remaining == 0
    }
}

/// The statuses a challenge page comes with: 403 (Cloudflare, Akamai, DataDome, PerimeterX,
/// Imperva), 405 (AWS WAF's captcha), 429 (Google's `/sorry/`), 503 (Cloudflare's older
/// challenge). A marker in such an answer's first bytes is a block whatever the page's size.
pub(super) fn challenge_status(status: u16) -> bool {
    matches!(status, 403 | 405 | 429 | 503)
}

/// A body at most this long (decoded) is a *small page*: on a status other than the
/// [`challenge_status`]es, a marker counts only in a small page. An interstitial is a few KiB; a
/// real page that carries a widget, a vendor's script or a quoted marker is larger.
pub(super) const SMALL_PAGE: usize = 32 * 1024;

/// A bot-management vendor's own word, in a header, that the response is a challenge whatever
/// its body: Cloudflare's `cf-mitigated: challenge`, AWS WAF's `x-amzn-waf-action: captcha` or
/// `challenge`. Names what was seen.
pub(crate) fn header_block(headers: &HeaderMap) -> Option<&'static str> {
    let says = |name: &str, words: &[&str]| {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|v| words.iter().any(|w| v.trim().eq_ignore_ascii_case(w)))
    };
    if says("cf-mitigated", &["challenge"]) {
        Some("cf-mitigated: challenge")
    } else if says("x-amzn-waf-action", &["captcha", "challenge"]) {
        Some("x-amzn-waf-action: captcha/challenge")
    } else {
        None
    }
}

/// How a body worth scanning is coded, or `None` when it is not worth scanning: only text, HTML
/// or JSON, plain or coded as `gzip`, `deflate`, `br` or `zstd`.
pub(crate) fn scan_wanted(headers: &HeaderMap) -> Option<Encoding> {
    // Read on every response: compared without regard to case, nothing allocated.
    let textual = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::as_bytes)
        .is_some_and(|t| {
            t.get(..5).is_some_and(|p| p.eq_ignore_ascii_case(b"text/"))
                || contains_ignore_case(t, b"html")
                || contains_ignore_case(t, b"json")
        });
    if !textual {
        return None;
    }
    match headers.get(CONTENT_ENCODING) {
        None => Some(Encoding::Plain),
        Some(v) => Encoding::from_header(Some(v.to_str().ok()?)),
    }
}

/// What a [`BodyScan`] says after a chunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing yet: feed it more.
    More,
    /// The page is a block; the string names the marker.
    Block(String),
    /// Nothing can be found any more: stop feeding.
    Done,
}

/// The block scan of one response body: markers in its first bytes (of a compressed body, in a
/// copy decoded on the side), a block at once on a [`challenge_status`], on any other status only
/// if the whole body is a [`SMALL_PAGE`] (decided when it ends).
pub struct BodyScan {
    scan: BlockScan,
    encoding: Encoding,
    challenge: bool,
    limit: usize,
    /// Bytes of body seen (as sent, coded or not).
    seen: usize,
    /// The first `limit` coded bytes, kept for one decode at the end or at the limit.
    coded: Vec<u8>,
    /// A marker found on a non-challenge status, waiting for the body's end.
    pending: Option<String>,
}

impl std::fmt::Debug for BodyScan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BodyScan")
            .field("encoding", &self.encoding)
            .field("challenge", &self.challenge)
            .field("seen", &self.seen)
            .finish()
    }
}

impl BodyScan {
    /// A scan for `markers` over the first `limit` (decoded) bytes of a body coded as `encoding`,
    /// in an answer of `status`.
    pub fn new(markers: Arc<BlockMarkers>, limit: usize, encoding: Encoding, status: u16) -> Self {
        BodyScan {
            scan: BlockScan::new(markers, limit),
            encoding,
            challenge: challenge_status(status),
            limit,
            seen: 0,
            coded: Vec::new(),
            pending: None,
        }
    }

    /// Looks at the next chunk of the body, as sent.
    pub fn feed(&mut self, chunk: &[u8]) -> Verdict {
        self.seen = self.seen.saturating_add(chunk.len());
        if !self.challenge && self.seen > SMALL_PAGE {
            // Not a small page (a coded body decodes to about as much or more): no block.
            return Verdict::Done;
        }
        if self.encoding != Encoding::Plain {
            let room = self.limit.saturating_sub(self.coded.len());
            self.coded
                .extend_from_slice(&chunk[..chunk.len().min(room)]);
            if self.challenge && self.coded.len() >= self.limit {
                return self.decoded_find().map_or(Verdict::Done, Verdict::Block);
            }
            return Verdict::More;
        }
        if self.pending.is_some() {
            return Verdict::More;
        }
        match self.scan.feed(chunk) {
            Some(marker) if self.challenge => Verdict::Block(marker),
            Some(marker) => {
                self.pending = Some(marker);
                Verdict::More
            }
            None if self.challenge && self.scan.done() => Verdict::Done,
            None => Verdict::More,
        }
    }

    /// The body ended: the block it was, if any.
    pub fn finish(&mut self) -> Option<String> {
        if self.encoding != Encoding::Plain {
            return self.decoded_find();
        }
        if self.seen > SMALL_PAGE {
            return None;
        }
        self.pending.take()
    }

    /// Decodes the kept copy (once: it is emptied) and scans it.
    fn decoded_find(&mut self) -> Option<String> {
        let coded = std::mem::take(&mut self.coded);
        if coded.is_empty() {
            return None;
        }
        let bound = if self.challenge {
            self.limit
        } else {
            self.limit.max(SMALL_PAGE + 1)
        };
        let page = decode_prefix(self.encoding, &coded, bound);
        if !self.challenge && page.len() > SMALL_PAGE {
            return None;
        }
        self.scan.feed(&page)
    }
}

/// Whether `needle` occurs in `haystack`, without regard to ASCII case.
fn contains_ignore_case(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w.eq_ignore_ascii_case(needle))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_are_found_across_chunks_case_insensitively_within_the_limit() {
        let markers = Arc::new(BlockMarkers::new(vec![
            "unusual traffic".to_string(),
            "cf-challenge".into(),
        ]));
        let mut scan = BlockScan::new(markers.clone(), 1000);
        assert_eq!(scan.feed(b"<html>our systems saw Unusual Tra"), None);
        assert_eq!(
            scan.feed(b"ffic from you"),
            Some("unusual traffic".to_string())
        );
        // Split over three chunks, one of them shorter than the overlap.
        let mut split = BlockScan::new(markers.clone(), 1000);
        assert_eq!(split.feed(b"xxxx CF-CHAL"), None);
        assert_eq!(split.feed(b"le"), None);
        assert_eq!(split.feed(b"nge yyy"), Some("cf-challenge".to_string()));
        let mut clean = BlockScan::new(markers.clone(), 1 << 20);
        let page = "<p>nothing to see here</p>".repeat(4000);
        for part in page.as_bytes().chunks(1000) {
            assert_eq!(clean.feed(part), None);
        }
        let mut late = BlockScan::new(markers, 20);
        assert_eq!(late.feed(b"0123456789012345678"), None);
        assert_eq!(late.feed(b"9 cf-challenge"), None, "past the limit");
        assert!(late.done());
    }

    #[test]
    fn only_text_html_and_json_bodies_in_a_known_coding_are_scanned() {
        let with = |pairs: &[(&'static str, &'static str)]| {
            let mut h = HeaderMap::new();
            for (k, v) in pairs {
                h.insert(*k, http::HeaderValue::from_static(v));
            }
            h
        };
        for wanted in [
            "text/html; charset=utf-8",
            "TEXT/PLAIN",
            "application/JSON",
            "application/xhtml+xml",
            "application/problem+json",
        ] {
            assert_eq!(
                scan_wanted(&with(&[("content-type", wanted)])),
                Some(Encoding::Plain),
                "{wanted}"
            );
        }
        for unwanted in ["image/png", "application/octet-stream", "tex", ""] {
            assert!(
                scan_wanted(&with(&[("content-type", unwanted)])).is_none(),
                "{unwanted}"
            );
        }
        assert!(scan_wanted(&HeaderMap::new()).is_none(), "no type");
        let gzipped = [("content-type", "text/html"), ("content-encoding", "gzip")];
        assert_eq!(scan_wanted(&with(&gzipped)), Some(Encoding::Gzip));
        let unknown = [
            ("content-type", "text/html"),
            ("content-encoding", "compress"),
        ];
        assert!(scan_wanted(&with(&unknown)).is_none());
        let identity = [
            ("content-type", "text/html"),
            ("content-encoding", "Identity"),
        ];
        assert_eq!(scan_wanted(&with(&identity)), Some(Encoding::Plain));
    }

    fn body(markers: &[&str], status: u16, encoding: Encoding) -> BodyScan {
        let m = Arc::new(BlockMarkers::new(
            markers.iter().map(|m| m.to_string()).collect(),
        ));
        BodyScan::new(m, 64 * 1024, encoding, status)
    }

    #[test]
    fn a_marker_counts_at_once_on_a_challenge_status_and_on_a_200_only_in_a_small_page() {
        let mut challenge = body(&["just a moment"], 403, Encoding::Plain);
        assert_eq!(
            challenge.feed(b"<title>Just a moment...</title>"),
            Verdict::Block("just a moment".into())
        );
        let mut small = body(&["just a moment"], 200, Encoding::Plain);
        assert_eq!(
            small.feed(b"<title>Just a moment...</title>"),
            Verdict::More
        );
        assert_eq!(small.finish(), Some("just a moment".into()));
        let mut large = body(&["just a moment"], 200, Encoding::Plain);
        assert_eq!(
            large.feed(b"<title>Just a moment...</title>"),
            Verdict::More
        );
        assert_eq!(large.feed(&vec![b'x'; SMALL_PAGE]), Verdict::Done);
        assert_eq!(large.finish(), None);
        let mut clean = body(&["just a moment"], 200, Encoding::Plain);
        assert_eq!(clean.feed(b"<p>hello</p>"), Verdict::More);
        assert_eq!(clean.finish(), None);
    }

    #[test]
    fn a_gzipped_interstitial_is_found_in_the_decoded_copy() {
        use std::io::Write;
        let page = b"<html><title>Sorry...</title>Our systems have detected unusual traffic";
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        let _ = e.write_all(page);
        let gz = e.finish().unwrap_or_default();
        let (a, b) = gz.split_at(gz.len() / 2);
        let mut scan = body(&["detected unusual traffic"], 429, Encoding::Gzip);
        assert_eq!(scan.feed(a), Verdict::More);
        assert_eq!(scan.feed(b), Verdict::More);
        assert_eq!(scan.finish(), Some("detected unusual traffic".into()));
        let mut ok = body(&["detected unusual traffic"], 200, Encoding::Gzip);
        assert_eq!(ok.feed(&gz), Verdict::More);
        assert_eq!(ok.finish(), Some("detected unusual traffic".into()));
    }

    #[test]
    fn vendor_headers_say_challenge() {
        let mut h = HeaderMap::new();
        assert_eq!(header_block(&h), None);
        h.insert("cf-mitigated", http::HeaderValue::from_static("Challenge"));
        assert_eq!(header_block(&h), Some("cf-mitigated: challenge"));
        let mut aws = HeaderMap::new();
        aws.insert(
            "x-amzn-waf-action",
            http::HeaderValue::from_static("captcha"),
        );
        assert!(header_block(&aws).is_some());
        aws.insert("x-amzn-waf-action", http::HeaderValue::from_static("allow"));
        assert_eq!(header_block(&aws), None);
    }
}
