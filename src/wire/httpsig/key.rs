//! An Ed25519 signing key as a JSON Web Key (RFC 8037: `kty = "OKP"`, `crv = "Ed25519"`, `x`,
//! `d`): read from and written to its JSON, its public half for a key directory, its RFC 7638
//! SHA-256 thumbprint (the `keyid` of every signature) and signing. The crypto is ring's (already
//! courtesy's TLS provider): Ed25519 (RFC 8032) and SHA-256. The private half never leaves this
//! type: its `Debug` names the thumbprint only.

use std::fmt;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use ring::rand::{SecureRandom, SystemRandom};
use ring::signature::{Ed25519KeyPair, KeyPair as _};

/// An Ed25519 private key and what is known of it: its public key and thumbprint.
pub struct SigningKey {
    /// The key pair made from the seed (`d`).
    pair: Ed25519KeyPair,
    /// The seed, kept to write the key back out (`keys new`).
    seed: [u8; 32],
    /// The JWK SHA-256 thumbprint, base64url without padding.
    thumbprint: String,
}

impl SigningKey {
    /// A fresh key from the system's random source.
    pub fn generate() -> Result<SigningKey, String> {
        let mut seed = [0u8; 32];
        SystemRandom::new()
            .fill(&mut seed)
            .map_err(|_| "the system's random source failed".to_string())?;
        SigningKey::from_seed(seed)
    }

    /// The key whose private seed (`d`) is `seed`.
    pub fn from_seed(seed: [u8; 32]) -> Result<SigningKey, String> {
        let pair = Ed25519KeyPair::from_seed_unchecked(&seed)
            .map_err(|_| "not a usable Ed25519 private key".to_string())?;
        let thumbprint = thumbprint_of(pair.public_key().as_ref());
        Ok(SigningKey {
            pair,
            seed,
            thumbprint,
        })
    }

    /// Reads a private JWK. The error says what is wrong with it, never its content.
    pub fn from_jwk(text: &str) -> Result<SigningKey, String> {
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|_| "not a JSON Web Key (not JSON)".to_string())?;
        let field = |name: &str| value.get(name).and_then(|v| v.as_str());
        if field("kty") != Some("OKP") || field("crv") != Some("Ed25519") {
            return Err(
                "not an Ed25519 key: a JWK with kty \"OKP\" and crv \"Ed25519\" is needed \
                        (`courtesy keys new FILE` makes one)"
                    .into(),
            );
        }
        let d = field("d").ok_or("a public key only: the private part \"d\" is missing")?;
        let seed: [u8; 32] = URL_SAFE_NO_PAD
            .decode(d)
            .ok()
            .and_then(|bytes| bytes.try_into().ok())
            .ok_or("\"d\" is not 32 bytes of base64url")?;
        let key = SigningKey::from_seed(seed)?;
        if let Some(x) = field("x") {
            if x != key.x() {
                return Err("\"x\" is not the public key of \"d\"".into());
            }
        }
        Ok(key)
    }

    /// The private JWK, for the file `courtesy keys new` writes (and nothing else).
    pub fn private_jwk(&self) -> String {
        let jwk = serde_json::json!({
            "kty": "OKP",
            "crv": "Ed25519",
            "x": self.x(),
            "d": URL_SAFE_NO_PAD.encode(self.seed),
        });
        format!("{jwk:#}\n")
    }

    /// The public JWK (`kty`, `crv`, `x`), as a key directory lists it.
    pub fn public_jwk(&self) -> serde_json::Value {
        serde_json::json!({"kty": "OKP", "crv": "Ed25519", "x": self.x()})
    }

    /// The public key, base64url (`x`).
    pub fn x(&self) -> String {
        URL_SAFE_NO_PAD.encode(self.pair.public_key().as_ref())
    }

    /// The RFC 7638 SHA-256 thumbprint, base64url: the `keyid` of its signatures.
    pub fn thumbprint(&self) -> &str {
        &self.thumbprint
    }

    /// The Ed25519 signature of `message` (64 bytes).
    pub fn sign(&self, message: &[u8]) -> Vec<u8> {
        self.pair.sign(message).as_ref().to_vec()
    }
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SigningKey(keyid {})", self.thumbprint)
    }
}

impl PartialEq for SigningKey {
    fn eq(&self, other: &Self) -> bool {
        self.thumbprint == other.thumbprint
    }
}

/// The RFC 7638 thumbprint of the Ed25519 public key `x`: SHA-256 over the required members in
/// lexical order, no spaces (RFC 8037 section 2).
fn thumbprint_of(x: &[u8]) -> String {
    let canonical = format!(
        r#"{{"crv":"Ed25519","kty":"OKP","x":"{}"}}"#,
        URL_SAFE_NO_PAD.encode(x)
    );
    let digest = ring::digest::digest(&ring::digest::SHA256, canonical.as_bytes());
    URL_SAFE_NO_PAD.encode(digest.as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 8037 appendix A.1.
    const RFC8037: &str = r#"{"kty":"OKP","crv":"Ed25519",
        "d":"nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A",
        "x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}"#;

    #[test]
    fn the_rfc_8037_key_has_its_thumbprint_and_signs_its_jws() {
        let key = SigningKey::from_jwk(RFC8037).unwrap();
        // Appendix A.3.
        assert_eq!(
            key.thumbprint(),
            "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k"
        );
        // Appendix A.4: the JWS signing input and its signature.
        let input = "eyJhbGciOiJFZERTQSJ9.RXhhbXBsZSBvZiBFZDI1NTE5IHNpZ25pbmc";
        assert_eq!(
            URL_SAFE_NO_PAD.encode(key.sign(input.as_bytes())),
            "hgyY0il_MGCjP0JzlnLWG1PPOt7-09PGcvMg3AIbQR6dWbhijcNR4ki4iylGjg5BhVsPt9g7sVvpAr_MuM0KAg"
        );
    }

    #[test]
    fn a_written_key_reads_back_and_its_public_half_has_no_secret() {
        let key = SigningKey::generate().unwrap();
        let again = SigningKey::from_jwk(&key.private_jwk()).unwrap();
        assert_eq!(key, again);
        let public = key.public_jwk().to_string();
        assert!(!public.contains("\"d\""), "{public}");
        assert!(!format!("{key:?}").contains(&URL_SAFE_NO_PAD.encode(key.seed)));
    }

    #[test]
    fn what_is_not_a_private_ed25519_jwk_is_refused_without_its_content() {
        for (text, says) in [
            ("not json", "not JSON"),
            (
                r#"{"kty":"EC","crv":"P-256","d":"secretvalue"}"#,
                "not an Ed25519 key",
            ),
            (
                r#"{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}"#,
                "\"d\" is missing",
            ),
            (r#"{"kty":"OKP","crv":"Ed25519","d":"c2hvcnQ"}"#, "32 bytes"),
            (
                r#"{"kty":"OKP","crv":"Ed25519","d":"nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A","x":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}"#,
                "not the public key",
            ),
        ] {
            let error = SigningKey::from_jwk(text).unwrap_err();
            assert!(error.contains(says), "{text}: {error}");
            assert!(
                !error.contains("secretvalue") && !error.contains("nWGxne"),
                "{error}"
            );
        }
    }
}
