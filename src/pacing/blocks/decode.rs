//! The first bytes of a compressed body, decoded on the side for the block scan: the body the
//! client gets is never touched. Output is bounded, so a decompression bomb costs no more than a
//! page of `block_scan_bytes`; input that ends early (a truncated copy) yields what it decoded.
//! Pure-Rust decoders only: flate2 on miniz_oxide (gzip, deflate), brotli-decompressor (br),
//! ruzstd (zstd).

use std::io::Read;

/// A `Content-Encoding` the block scan can read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// No coding (absent or `identity`): the body is scanned as it streams.
    Plain,
    /// `gzip` (or `x-gzip`).
    Gzip,
    /// `deflate`: zlib-wrapped as RFC 9110 says, or raw deflate as some servers send.
    Deflate,
    /// `br`.
    Brotli,
    /// `zstd`.
    Zstd,
}

impl Encoding {
    /// The coding named by a `Content-Encoding` value; `None` for anything else (an unknown
    /// coding or a list of several), which is not scanned.
    pub fn from_header(value: Option<&str>) -> Option<Encoding> {
        let Some(value) = value.map(str::trim) else {
            return Some(Encoding::Plain);
        };
        let is = |name: &str| value.eq_ignore_ascii_case(name);
        if value.is_empty() || is("identity") {
            Some(Encoding::Plain)
        } else if is("gzip") || is("x-gzip") {
            Some(Encoding::Gzip)
        } else if is("deflate") {
            Some(Encoding::Deflate)
        } else if is("br") {
            Some(Encoding::Brotli)
        } else if is("zstd") {
            Some(Encoding::Zstd)
        } else {
            None
        }
    }
}

/// Decodes `input` (the first bytes of a body coded as `encoding`) into at most `limit` bytes.
/// A decoding error keeps what was decoded before it: the copy may be cut short.
pub(super) fn decode_prefix(encoding: Encoding, input: &[u8], limit: usize) -> Vec<u8> {
    let limit = limit as u64;
    match encoding {
        Encoding::Plain => input[..input.len().min(limit as usize)].to_vec(),
        Encoding::Gzip => read_bounded(flate2::read::MultiGzDecoder::new(input), limit),
        Encoding::Deflate => {
            let zlib = read_bounded(flate2::read::ZlibDecoder::new(input), limit);
            if zlib.is_empty() {
                read_bounded(flate2::read::DeflateDecoder::new(input), limit)
            } else {
                zlib
            }
        }
        Encoding::Brotli => {
            read_bounded(brotli_decompressor::Decompressor::new(input, 4096), limit)
        }
        Encoding::Zstd => match ruzstd::StreamingDecoder::new(input) {
            Ok(decoder) => read_bounded(decoder, limit),
            Err(_) => Vec::new(),
        },
    }
}

/// Reads `reader` to its end, an error, or `limit` bytes, whichever comes first.
fn read_bounded(reader: impl Read, limit: u64) -> Vec<u8> {
    let mut out = Vec::new();
    // An error (a cut-short copy, a corrupt stream) leaves what was read before it in `out`.
    let _ = reader.take(limit).read_to_end(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        let _ = e.write_all(data);
        e.finish().unwrap_or_default()
    }

    #[test]
    fn codings_are_named_without_regard_to_case_and_lists_are_not_read() {
        assert_eq!(Encoding::from_header(None), Some(Encoding::Plain));
        assert_eq!(
            Encoding::from_header(Some("Identity")),
            Some(Encoding::Plain)
        );
        assert_eq!(Encoding::from_header(Some("GZIP")), Some(Encoding::Gzip));
        assert_eq!(Encoding::from_header(Some("x-gzip")), Some(Encoding::Gzip));
        assert_eq!(
            Encoding::from_header(Some("deflate")),
            Some(Encoding::Deflate)
        );
        assert_eq!(Encoding::from_header(Some("br")), Some(Encoding::Brotli));
        assert_eq!(Encoding::from_header(Some("zstd")), Some(Encoding::Zstd));
        assert_eq!(Encoding::from_header(Some("gzip, br")), None);
        assert_eq!(Encoding::from_header(Some("compress")), None);
    }

    #[test]
    fn gzip_and_deflate_decode_and_a_bomb_stops_at_the_limit() {
        let page = b"<title>Just a moment...</title>".repeat(10);
        assert_eq!(decode_prefix(Encoding::Gzip, &gzip(&page), 1 << 16), page);
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        let _ = z.write_all(&page);
        let zlib = z.finish().unwrap_or_default();
        assert_eq!(decode_prefix(Encoding::Deflate, &zlib, 1 << 16), page);
        let mut r = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
        let _ = r.write_all(&page);
        let raw = r.finish().unwrap_or_default();
        assert_eq!(decode_prefix(Encoding::Deflate, &raw, 1 << 16), page);
        // 16 MiB of zeros is ~16 KiB of gzip: only the limit is ever produced.
        let bomb = gzip(&vec![0u8; 16 << 20]);
        assert!(bomb.len() < 40_000);
        assert_eq!(decode_prefix(Encoding::Gzip, &bomb, 4096).len(), 4096);
        // A copy cut short still yields its first bytes.
        let long = b"our systems have detected unusual traffic ".repeat(2000);
        let cut = gzip(&long);
        let half = decode_prefix(Encoding::Gzip, &cut[..cut.len() / 2], 1 << 20);
        assert!(half.starts_with(b"our systems have detected unusual traffic"));
        assert!(decode_prefix(Encoding::Gzip, b"not gzip at all", 100).is_empty());
    }

    #[test]
    fn brotli_and_zstd_decode() {
        // "hello" as brotli (quality 11, window 22) and as a zstd frame (raw block, `zstd` 1.5).
        let br: &[u8] = &[0x0b, 0x02, 0x80, 0x68, 0x65, 0x6c, 0x6c, 0x6f, 0x03];
        assert_eq!(decode_prefix(Encoding::Brotli, br, 100), b"hello");
        let zstd: &[u8] = &[
            0x28, 0xb5, 0x2f, 0xfd, 0x04, 0x58, 0x29, 0x00, 0x00, 0x68, 0x65, 0x6c, 0x6c, 0x6f,
            0xa3, 0x6d, 0x9f, 0x88,
        ];
        assert_eq!(decode_prefix(Encoding::Zstd, zstd, 100), b"hello");
        assert_eq!(decode_prefix(Encoding::Zstd, zstd, 3), b"hel");
        assert!(decode_prefix(Encoding::Brotli, b"\xff\xff\xff", 100).len() <= 100);
    }
}
