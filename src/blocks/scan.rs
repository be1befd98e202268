//! What a block looks like in a response: block markers in the first bytes of a text body (found
//! across chunk edges without holding the body back), and redirects to a block page.

use std::sync::Arc;

use http::header::{CONTENT_ENCODING, CONTENT_TYPE, LOCATION};
use http::HeaderMap;

use super::markers::BlockMarkers;

/// Scans the first `limit` bytes of a body for block markers (without regard to ASCII case),
/// across chunk edges, without holding the body back.
pub struct BlockScan {
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
    pub fn new(markers: Arc<BlockMarkers>, limit: usize) -> Self {
        BlockScan {
            markers,
            remaining: limit,
            tail: Vec::new(),
        }
    }

    /// Looks at the next chunk; returns the marker found, if any. One pass over the chunk for all
    /// markers, no copy of it: only the seam with the previous chunk is copied.
    pub fn feed(&mut self, chunk: &[u8]) -> Option<String> {
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
    pub fn done(&self) -> bool {
        self.remaining == 0
    }
}

/// Whether a response with these headers is worth scanning for markers: only plain (not
/// content-encoded) text, HTML or JSON.
pub fn scan_wanted(headers: &HeaderMap) -> bool {
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
    let encoded = headers
        .get(CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|e| !e.eq_ignore_ascii_case("identity"));
    textual && !encoded
}

/// Whether `needle` occurs in `haystack`, without regard to ASCII case.
fn contains_ignore_case(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w.eq_ignore_ascii_case(needle))
}

/// Whether a redirect points at a block page (Google's `/sorry/` and the like): one of `markers`
/// that is a path (starts with `/`) in its `Location`.
pub fn is_block_redirect(parts: &http::response::Parts, markers: &BlockMarkers) -> bool {
    if !parts.status.is_redirection() {
        return false;
    }
    let Some(location) = parts.headers.get(LOCATION).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let location = location.to_ascii_lowercase();
    markers
        .iter()
        .any(|m| m.starts_with('/') && location.contains(m))
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
    fn only_plain_text_html_and_json_bodies_are_scanned() {
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
            assert!(scan_wanted(&with(&[("content-type", wanted)])), "{wanted}");
        }
        for unwanted in ["image/png", "application/octet-stream", "tex", ""] {
            assert!(
                !scan_wanted(&with(&[("content-type", unwanted)])),
                "{unwanted}"
            );
        }
        assert!(!scan_wanted(&HeaderMap::new()), "no type");
        let gzipped = [("content-type", "text/html"), ("content-encoding", "gzip")];
        assert!(!scan_wanted(&with(&gzipped)));
        let identity = [
            ("content-type", "text/html"),
            ("content-encoding", "Identity"),
        ];
        assert!(scan_wanted(&with(&identity)));
    }
}
