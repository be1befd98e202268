//! How guessable a configured secret is: `courtesy check` (and the start-up log) warns about a
//! token (`[admin] token`, a `[[job]]` token) under [`STRONG_BITS`] by [`estimated_bits`], and
//! about a token or `token_sha256` that a shipped example publishes (the files of
//! [`SHIPPED`], embedded when courtesy is built, so that the list cannot drift from them).
//!
//! The warnings never show a secret, only where it is.

use std::sync::Arc;

use super::key_tables::kinds::hex32;
use super::JobSettings;

/// The entropy below which a token draws a warning: what a 128-bit random token (32 hex digits,
/// 22 base64 characters) has.
pub(crate) const STRONG_BITS: f64 = 128.0;

/// The files courtesy ships whose `token = "..."` and `token_sha256 = "..."` lines (commented
/// out or not) are examples anyone can read. The test
/// `every_secret_the_repository_publishes_is_a_shipped_example` checks that every such line
/// under `config/`, `deploy/`, `docs/` and in `README.md` is among them.
pub(crate) const SHIPPED: [(&str, &str); 8] = [
    (
        "config/courtesy.toml",
        include_str!("../../config/courtesy.toml"),
    ),
    ("config/team.toml", include_str!("../../config/team.toml")),
    (
        "config/shared.toml",
        include_str!("../../config/shared.toml"),
    ),
    (
        "deploy/k8s/base/courtesy.toml",
        include_str!("../../deploy/k8s/base/courtesy.toml"),
    ),
    (
        "deploy/k8s/overlays/team/courtesy.toml",
        include_str!("../../deploy/k8s/overlays/team/courtesy.toml"),
    ),
    (
        "deploy/compose/courtesy/courtesy.toml",
        include_str!("../../deploy/compose/courtesy/courtesy.toml"),
    ),
    (
        "deploy/container/courtesy.toml",
        include_str!("../../deploy/container/courtesy.toml"),
    ),
    ("docs/teams.md", include_str!("../../docs/teams.md")),
];

/// One warning for each weak or published secret: `admin_token`, and each job's token or
/// `token_sha256`.
pub(crate) fn warnings(admin_token: Option<&str>, jobs: &[Arc<JobSettings>]) -> Vec<String> {
    let tokens = admin_token
        .map(|t| ("[admin] token".to_string(), t))
        .into_iter()
        .chain(jobs.iter().filter_map(|job| {
            let token = job.token.as_deref()?;
            Some((format!("[[job]] {} token", job.name), token))
        }));
    let mut out = Vec::new();
    for (label, token) in tokens {
        if shipped_token(token) {
            out.push(published(&label));
        } else if estimated_bits(token) < STRONG_BITS {
            out.push(format!(
                "{label} is guessable: about {:.0} bits by courtesy's estimate (length × log2 of \
                 its character classes), under {STRONG_BITS:.0}; make a random one: \
                 openssl rand -hex 32",
                estimated_bits(token)
            ));
        }
    }
    for job in jobs {
        if job.token_sha256.as_ref().is_some_and(shipped_hash) {
            out.push(published(&format!("[[job]] {} token_sha256", job.name)));
        }
    }
    out
}

/// The warning for a secret a shipped example publishes.
fn published(label: &str) -> String {
    format!(
        "{label} is a shipped example's (config/, deploy/ or docs/): anyone can read it; make \
         a token of your own (openssl rand -hex 32) and give it, or its token_sha256"
    )
}

/// An estimate of the bits of entropy in `token`, as if each character had been drawn at random
/// from the character classes it uses: its length × log2 of the classes' size (lower case 26,
/// upper case 26, digits 10, other ASCII 33, anything else 128). A token made of one piece
/// repeated (`aaaa…`, `abcabc…`) counts only that piece. The estimate is an upper bound for a
/// random token and says nothing of words a person chose (`a-long-random-token` scores high):
/// it catches short and low-variety tokens, and [`shipped_token`] catches the examples.
pub(crate) fn estimated_bits(token: &str) -> f64 {
    let chars: Vec<char> = token.chars().collect();
    let piece = &chars[..period(&chars)];
    let classes = [
        (26u32, piece.iter().any(char::is_ascii_lowercase)),
        (26, piece.iter().any(char::is_ascii_uppercase)),
        (10, piece.iter().any(char::is_ascii_digit)),
        (
            33,
            piece
                .iter()
                .any(|c| c.is_ascii() && !c.is_ascii_alphanumeric()),
        ),
        (128, piece.iter().any(|c| !c.is_ascii())),
    ];
    let alphabet: u32 = classes
        .iter()
        .filter(|(_, used)| *used)
        .map(|(n, _)| n)
        .sum();
    if alphabet < 2 {
        return 0.0;
    }
    piece.len() as f64 * f64::from(alphabet).log2()
}

/// The length of the shortest piece whose repetition spells `chars` (the last repetition may be
/// cut short): 1 for `aaaa`, 3 for `abcabca`, the whole length for a token that repeats nothing.
fn period(chars: &[char]) -> usize {
    (1..chars.len())
        .find(|&p| chars[p..].iter().zip(chars).all(|(a, b)| a == b))
        .unwrap_or(chars.len())
}

/// Whether `token` is a shipped example's token, or the token whose SHA-256 a shipped example
/// gives.
pub(crate) fn shipped_token(token: &str) -> bool {
    let hash = sha256(token.as_bytes());
    examples().any(|(key, value)| match key {
        Example::Token => value == token,
        Example::Hash => hex32(value) == Some(hash),
    })
}

/// Whether `hash` is a shipped example's `token_sha256`, or the SHA-256 of a shipped example's
/// token.
pub(crate) fn shipped_hash(hash: &[u8; 32]) -> bool {
    examples().any(|(key, value)| match key {
        Example::Token => sha256(value.as_bytes()) == *hash,
        Example::Hash => hex32(value) == Some(*hash),
    })
}

/// Which kind of secret an example line gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Example {
    /// `token = "..."`.
    Token,
    /// `token_sha256 = "..."`.
    Hash,
}

/// Every `token = "..."` and `token_sha256 = "..."` of the shipped files, commented out or not.
fn examples() -> impl Iterator<Item = (Example, &'static str)> {
    SHIPPED
        .iter()
        .flat_map(|(_, text)| text.lines())
        .filter_map(example)
}

/// The secret `line` gives, if it is a `token = "..."` or `token_sha256 = "..."` line
/// (commented out or not).
fn example(line: &str) -> Option<(Example, &str)> {
    let line = line.trim_start().trim_start_matches('#').trim();
    let (key, value) = line.split_once('=')?;
    let kind = match key.trim() {
        "token" => Example::Token,
        "token_sha256" => Example::Hash,
        _ => return None,
    };
    let value = value.trim().strip_prefix('"')?;
    Some((kind, &value[..value.find('"')?]))
}

/// The SHA-256 of `bytes`.
pub(crate) fn sha256(bytes: &[u8]) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    let mut out = [0u8; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_and_repeated_tokens_are_weak_and_random_ones_strong() {
        for weak in [
            "aaaaaaaaaaaaaaaa",
            &"a".repeat(200),
            &"abc1".repeat(40),
            "0123456789abcdef",
            "Passw0rd!Passw0rd!",
            "correcthorse1234567",
        ] {
            assert!(estimated_bits(weak) < STRONG_BITS, "{weak}");
        }
        for strong in [
            // 32 hex digits: 128 random bits.
            "9f86d081884c7d659a2feaa0c55ad015",
            // 22 base64url characters (`openssl rand -base64 16`, unpadded).
            "q3Xv8ZkT1pWmN0bR4yLcEw",
            // 43 base64 characters (`openssl rand -base64 32`).
            "hP2k9WcY7rQx1LmN4vBt8ZsD3fGj6KaE0uIo5TyRw+E",
        ] {
            assert!(estimated_bits(strong) >= STRONG_BITS, "{strong}");
        }
        assert_eq!(estimated_bits(""), 0.0);
    }

    /// Every text file under `dir`, at any depth, with its path.
    fn texts_under(dir: &std::path::Path, out: &mut Vec<(std::path::PathBuf, String)>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                texts_under(&path, out);
            } else if let Ok(text) = std::fs::read_to_string(&path) {
                out.push((path, text));
            }
        }
    }

    #[test]
    fn every_secret_the_repository_publishes_is_a_shipped_example() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files = Vec::new();
        for dir in ["config", "deploy", "docs"] {
            texts_under(&root.join(dir), &mut files);
        }
        if let Ok(readme) = std::fs::read_to_string(root.join("README.md")) {
            files.push((root.join("README.md"), readme));
        }
        let known: Vec<_> = examples().collect();
        let mut seen = 0;
        for (path, text) in &files {
            for found in text.lines().filter_map(example) {
                seen += 1;
                assert!(
                    known.contains(&found),
                    "{}: {found:?} is not in secrets::SHIPPED: add the file",
                    path.display()
                );
            }
        }
        assert!(seen >= 10, "the examples were found: {seen}");
    }

    #[test]
    fn the_shipped_examples_are_known_by_token_and_by_hash() {
        assert!(shipped_token("a-long-random-token-for-crawl-a"));
        assert!(shipped_token("change-me-to-a-long-random-string"));
        assert!(shipped_token("a-long-random-token-for-interactive"));
        // config/team.toml publishes its hash only.
        assert!(shipped_token("replace-me-crawl-a-0123456789abcdef"));
        assert!(shipped_hash(
            &hex32("dbb592e5b38c4ded208b00c3fdd7f4edcc869782b18ed935c6ffc90f5d6e0837").unwrap()
        ));
        assert!(shipped_hash(&sha256(b"a-long-random-token-for-crawl-a")));
        assert!(!shipped_token(
            "hP2k9WcY7rQx1LmN4vBt8ZsD3fGj6KaE0uIo5TyRw+E"
        ));
        assert!(!shipped_hash(&sha256(
            b"hP2k9WcY7rQx1LmN4vBt8ZsD3fGj6KaE0uIo5TyRw+E"
        )));
    }
}
