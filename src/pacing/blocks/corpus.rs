//! The corpus of real-world-shaped pages (`tests/corpus/blocks/`): every ordinary page (contact,
//! login, comment and checkout forms with captcha widgets, pages carrying a vendor's script,
//! pages that quote a marker) passes the detector with the default markers, and every
//! interstitial (Cloudflare, Google's /sorry/, Akamai, DataDome, PerimeterX, AWS WAF, Imperva,
//! compressed ones) is a block. Each file's first line says how it is served and where its shape
//! comes from:
//! `expect=pass|block status=N [encoding=gzip|deflate|zstd] [header=name:value] | shape`.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use http::{HeaderMap, HeaderName, HeaderValue};

use super::decode::Encoding;
use super::scan::{header_block, BodyScan, Verdict};
use crate::config::{BlockMarkers, DEFAULT_BLOCK_MARKERS};

/// One corpus page as served.
struct Served {
    name: String,
    block: bool,
    status: u16,
    encoding: Encoding,
    headers: HeaderMap,
    /// The body as sent (coded when `encoding` says so).
    body: Vec<u8>,
}

/// Every page of the corpus, served as its first line says.
fn corpus() -> Vec<Served> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/blocks");
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .expect("the corpus directory")
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .collect();
    names.sort();
    names.iter().map(|path| served(path)).collect()
}

fn served(path: &std::path::Path) -> Served {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let text = std::fs::read_to_string(path).expect("a corpus page");
    let first = text.lines().next().unwrap_or_default();
    let meta = first
        .split_once("expect=")
        .and_then(|(_, rest)| rest.split_once('|'))
        .map(|(m, _)| format!("expect={m}"))
        .unwrap_or_else(|| panic!("{name}: no `expect=... |` on the first line"));
    let page = if first.starts_with("<!--") {
        text[first.len()..].trim_start_matches('\n').to_string()
    } else {
        text.clone()
    };
    let mut served = Served {
        name: name.clone(),
        block: false,
        status: 200,
        encoding: Encoding::Plain,
        headers: HeaderMap::new(),
        body: Vec::new(),
    };
    for word in meta.split_whitespace() {
        match word.split_once('=') {
            Some(("expect", e)) => served.block = e == "block",
            Some(("status", s)) => served.status = s.parse().expect("a status"),
            Some(("encoding", "gzip")) => served.encoding = Encoding::Gzip,
            Some(("encoding", "deflate")) => served.encoding = Encoding::Deflate,
            Some(("encoding", "zstd")) => served.encoding = Encoding::Zstd,
            Some(("header", h)) => {
                let (k, v) = h.split_once(':').expect("header=name:value");
                served.headers.insert(
                    HeaderName::from_bytes(k.as_bytes()).expect("a header name"),
                    HeaderValue::from_str(v).expect("a header value"),
                );
            }
            _ => panic!("{name}: unknown {word:?}"),
        }
    }
    served.body = match served.encoding {
        Encoding::Gzip => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            e.write_all(page.as_bytes()).expect("gzip");
            e.finish().expect("gzip")
        }
        Encoding::Deflate => {
            let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
            e.write_all(page.as_bytes()).expect("deflate");
            e.finish().expect("deflate")
        }
        Encoding::Zstd => zstd_raw_frame(page.as_bytes()),
        _ => page.into_bytes(),
    };
    served
}

// `zstd_raw_frame`, shared with the end-to-end test over the corpus.
include!("../../../tests/support/zstd_frame.rs");

/// What the detector says of a page served in chunks of `chunk` bytes: the block, if any.
fn detect(page: &Served, chunk: usize) -> Option<String> {
    if let Some(signal) = header_block(&page.headers) {
        return Some(signal.to_string());
    }
    let markers = Arc::new(BlockMarkers::new(
        DEFAULT_BLOCK_MARKERS
            .iter()
            .map(|m| m.to_string())
            .collect(),
    ));
    let mut scan = BodyScan::new(markers, 64 * 1024, page.encoding, page.status);
    for part in page.body.chunks(chunk) {
        match scan.feed(part) {
            Verdict::More => {}
            Verdict::Block(marker) => return Some(marker),
            Verdict::Done => return None,
        }
    }
    scan.finish()
}

#[test]
fn ordinary_pages_pass_and_interstitials_are_blocks() {
    let pages = corpus();
    let passes = pages.iter().filter(|p| !p.block).count();
    let blocks = pages.len() - passes;
    assert!(passes >= 30, "{passes} ordinary pages");
    assert!(blocks >= 8, "{blocks} interstitials");
    assert!(
        pages
            .iter()
            .any(|p| p.block && p.encoding != Encoding::Plain),
        "a compressed interstitial"
    );
    let mut wrong = Vec::new();
    for page in &pages {
        for chunk in [512, 1400, 16 * 1024] {
            let found = detect(page, chunk);
            if found.is_some() != page.block {
                wrong.push(format!("{} (chunks of {chunk}): {found:?}", page.name));
            }
        }
    }
    assert!(wrong.is_empty(), "misjudged:\n{}", wrong.join("\n"));
}
