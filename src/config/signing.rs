//! `[signing]`: the Web Bot Auth key every forwarded request is signed with (docs/identity.md),
//! where its directory is published, when courtesy signs and how long a signature lasts. The
//! key file is read once, when the config is read (at start and at a reload), and the key is
//! held only as a [`SigningKey`], which never shows its private half.

use std::path::PathBuf;
use std::sync::Arc;

use super::key_tables::keys;
use super::key_tables::kinds::{Count, Maybe, Word};
use super::key_tables::process::{AgentUrl, Path};
use super::{SigningMode, Trigger};
use crate::wire::httpsig::SigningKey;

keys! {
    /// Web Bot Auth (docs/identity.md): every request courtesy forwards, plain or inside
    /// intercepted HTTPS, signed with an Ed25519 key (RFC 9421), so that a site can tell who
    /// crawls it. Off until key_file is set.
    pub struct SigningSettings in SigningSettings as KEYS {
        /// The Ed25519 private key, a JWK file (`courtesy keys new FILE` makes one, mode 0600).
        ///
        /// Read once, at start (and at a reload); never logged or shown. Refused when group or
        /// others may read it, or a user other than courtesy's (or root) owns it. Instances that
        /// share a store ([shared]) should use the same key file.
        key_file: Option<PathBuf> = None, from key_file: String, Maybe(Path),
            example "\"/etc/courtesy/bot-key.jwk\"";
        /// Where the key directory is published: the Signature-Agent of every signed request
        /// (required with key_file).
        ///
        /// Sites fetch `<signature_agent>/.well-known/http-message-signatures-directory` (and
        /// its card, `/.well-known/signature-agent-card`); `courtesy keys directory --agent URL`
        /// prints it, and the admin listener serves it for that agent's Host only.
        signature_agent: Option<String> = None, from signature_agent: String, Maybe(AgentUrl),
            example "\"https://crawler.example.com\"";
        /// When to sign: `"always"`, `"on_challenge"` (a host's requests once it answered
        /// 401/403/429 with Accept-Signature) or `"off"`; unset: "always" once a key is set
        /// (here or a job's).
        mode: Option<SigningMode> = None, from mode: String, Maybe(Word),
            example "\"always\"";
        /// How long a signature is valid (`expires` = `created` + this); each is made when the
        /// request leaves, after its wait.
        ///
        /// Short on purpose: a signature lifted from a request (only TLS requests are signed,
        /// and TRACE is never forwarded, but an origin's logs or a TLS-terminating middlebox
        /// see them) verifies for its host, whatever the path and method, until it expires. At
        /// most 300.
        expires_seconds: u64 = 60, from expires_seconds: i64, Count { min: 1, max: 300 };
        /// How the requests signed under signature_agent come about, as its Signature Agent
        /// Card says (`trigger`): `"crawler"` (autonomous scanning) or `"fetcher"` (each one
        /// asked for by a user); a job's own `trigger` wins for its agent.
        trigger: Trigger = Trigger::Crawler, from trigger: String, Word;
    }
    also {
        /// The key of key_file, read when the config was read.
        key: Option<Arc<SigningKey>> = None;
    }
}

impl SigningSettings {
    /// The mode in force: the file's, else "always" (which signs only where there is a key,
    /// this section's or a job's).
    pub fn mode_in_force(&self) -> SigningMode {
        self.mode.unwrap_or(SigningMode::Always)
    }
}

/// Reads the signing key in `path` (`what` names it in a refusal: `"the key file"`),
/// refused first when others may read it or another user owns it
/// ([`crate::util::files::refuse_loose_private_file`]). The error names the file, never its
/// content.
pub(crate) fn read_key(path: &std::path::Path, what: &str) -> Result<Arc<SigningKey>, String> {
    crate::util::files::refuse_loose_private_file(path, what)?;
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    SigningKey::from_jwk(&text)
        .map(Arc::new)
        .map_err(|why| format!("{}: {why}", path.display()))
}

impl super::Config {
    /// Every key courtesy signs with: `[signing]`'s, then each job's own, each once (by
    /// thumbprint).
    pub fn signing_keys(&self) -> Vec<Arc<SigningKey>> {
        let mut keys: Vec<Arc<SigningKey>> = Vec::new();
        let all = self
            .signing
            .key
            .iter()
            .chain(self.jobs.iter().filter_map(|j| j.signing_key.as_ref()));
        for key in all {
            if !keys.iter().any(|k| k.thumbprint() == key.thumbprint()) {
                keys.push(key.clone());
            }
        }
        keys
    }

    /// Why the requests to a host under `policy` go unsigned though they would be signed: its
    /// CONNECTs are blind tunnels (`https = "tunnel"`), which courtesy cannot sign inside.
    /// `None` when signing does not concern the host or it is intercepted.
    pub fn unsigned_tunnel(&self, policy: &super::HostPolicy) -> Option<String> {
        let signs = self.signing.mode_in_force() != SigningMode::Off
            && policy.identity.sign
            && !self.signing_keys().is_empty();
        (signs && policy.forward.https == super::HttpsMode::Tunnel).then(|| {
            "https = \"tunnel\": requests inside a blind tunnel cannot be signed (Web Bot \
             Auth); set https = \"intercept\" to sign them, or sign = false to say they go \
             unsigned"
                .to_string()
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, SigningMode};
    use crate::wire::httpsig::SigningKey;

    #[test]
    fn the_key_is_read_once_and_never_shows_in_the_configs_debug() {
        let dir = crate::util::scratch::dir("signing-config");
        std::fs::create_dir_all(&dir).unwrap();
        let key = SigningKey::generate().unwrap();
        let file = dir.join("bot.jwk");
        std::fs::write(&file, key.private_jwk()).unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let jwk: serde_json::Value = serde_json::from_str(&key.private_jwk()).unwrap();
        let d = jwk["d"].as_str().unwrap();
        let text = format!(
            "[signing]\nkey_file = {:?}\nsignature_agent = \"https://bot.example/\"\n\
             [[job]]\nname = \"a\"\nsigning_key_file = {:?}\n",
            file.display().to_string(),
            file.display().to_string()
        );
        let config = Config::parse(&text, "signing.toml").unwrap();
        assert_eq!(config.signing.key.as_deref(), Some(&key));
        assert_eq!(config.signing.mode_in_force(), SigningMode::Always);
        assert_eq!(
            config.signing.signature_agent.as_deref(),
            Some("https://bot.example"),
            "one spelling, without the final slash"
        );
        assert_eq!(config.signing_keys().len(), 1, "the same key once");
        let shown = format!("{config:?}{}", config.agents()[0].directory());
        assert!(!shown.contains(d), "the private key never shows");
        assert!(shown.contains(key.thumbprint()));
    }
}
