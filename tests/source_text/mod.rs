//! Rust source read as text by the tests that hold the code to its map (`layers.rs`, `docs.rs`):
//! the code alone, without comments and literals, so that a name in a comment or a string is
//! never taken for code; and the module path a file of `src/` holds.

use std::path::Path;

/// `source` with comments, string literals and char literals blanked out (newlines kept, so
/// that line numbers stay true).
pub fn code_only(source: &str) -> String {
    let bytes = source.as_bytes();
    let mut out = String::with_capacity(source.len());
    let mut i = 0;
    let blank = |out: &mut String, chunk: &[u8]| {
        for &b in chunk {
            out.push(if b == b'\n' { '\n' } else { ' ' });
        }
    };
    while i < bytes.len() {
        let rest = &bytes[i..];
        if rest.starts_with(b"//") {
            let end = rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len());
            blank(&mut out, &rest[..end]);
            i += end;
        } else if rest.starts_with(b"/*") {
            let mut depth = 0;
            let mut j = 0;
            while j < rest.len() {
                if rest[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if rest[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut out, &rest[..j]);
            i += j;
        } else if rest.starts_with(b"r\"") || rest.starts_with(b"r#") {
            let hashes = rest[1..].iter().take_while(|&&b| b == b'#').count();
            if rest.get(1 + hashes) != Some(&b'"') {
                out.push('r');
                i += 1;
                continue;
            }
            let mut closing = vec![b'"'];
            closing.extend(std::iter::repeat_n(b'#', hashes));
            let body = 2 + hashes;
            let end = rest[body..]
                .windows(closing.len())
                .position(|w| w == closing.as_slice())
                .map_or(rest.len(), |p| body + p + closing.len());
            blank(&mut out, &rest[..end]);
            i += end;
        } else if rest[0] == b'"' {
            let mut j = 1;
            while j < rest.len() && rest[j] != b'"' {
                j += if rest[j] == b'\\' { 2 } else { 1 };
            }
            let end = (j + 1).min(rest.len());
            blank(&mut out, &rest[..end]);
            i += end;
        } else if rest[0] == b'\'' && (rest.get(2) == Some(&b'\'') || (rest.get(1) == Some(&b'\\')))
        {
            // A char literal ('"', '\'', '\\', '\u{1F}'); a lifetime has no closing quote.
            let end = if rest[1] == b'\\' {
                rest.iter()
                    .skip(3)
                    .position(|&b| b == b'\'')
                    .map_or(rest.len(), |k| k + 4)
            } else {
                3
            };
            blank(&mut out, &rest[..end]);
            i += end;
        } else {
            // Keep multi-byte characters whole.
            let ch_len = source[i..].chars().next().map_or(1, char::len_utf8);
            out.push_str(&source[i..i + ch_len]);
            i += ch_len;
        }
    }
    out
}

/// The module path of a file under `src/`: `a/b.rs` and `a/b/mod.rs` are `a::b`; `lib.rs` and
/// `main.rs` are both the root.
pub fn module_of(relative: &Path) -> Vec<String> {
    let mut parts: Vec<String> = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().to_string())
        .collect();
    let last = parts.pop().unwrap_or_default();
    if !["mod.rs", "lib.rs", "main.rs"].contains(&last.as_str()) {
        parts.push(last.trim_end_matches(".rs").to_string());
    }
    parts
}
