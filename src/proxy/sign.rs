//! Web Bot Auth on the requests courtesy forwards (docs/identity.md): which key and
//! Signature-Agent sign a request (its job's over `[signing]`'s, none for a `sign = false` host
//! or with `mode = "off"`), the three fields made at send time (after the wait, again for every
//! resend, so a signature is never stale; courtesy's own robots.txt fetches are signed with
//! `[signing]`'s key), and, for `mode = "on_challenge"`, the hosts that
//! asked for signatures (a 401/403/429 with `Accept-Signature`), remembered per budget key.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use dashmap::DashSet;
use http::header::HOST;
use http::{HeaderMap, HeaderName, HeaderValue, Request};

use super::Caller;
use crate::config::{Config, HostPolicy, SigningMode};
use crate::wire::httpsig::{self, sf_string, Component, Param, SigningKey};

/// `Signature-Agent`: where the key directory is published.
pub(crate) static SIGNATURE_AGENT: HeaderName = HeaderName::from_static("signature-agent");
/// `Signature-Input`: what a signature covers, and its parameters.
pub(crate) static SIGNATURE_INPUT: HeaderName = HeaderName::from_static("signature-input");
/// `Signature`: the signatures.
pub(crate) static SIGNATURE: HeaderName = HeaderName::from_static("signature");
/// `Accept-Signature`: a server asking for signatures (RFC 9421 section 5).
static ACCEPT_SIGNATURE: HeaderName = HeaderName::from_static("accept-signature");

/// The label of courtesy's signature, and of its `Signature-Agent` member.
const LABEL: &str = "sig1";
/// The `tag` of a Web Bot Auth signature.
const TAG: &str = "web-bot-auth";
/// The most hosts remembered as asking for signatures (a budget key each).
const MAX_CHALLENGED: usize = 100_000;

/// How one request is signed: the key, its Signature-Agent, how long a signature lasts, and
/// whether it waits for the host to ask.
#[derive(Debug, Clone)]
pub(super) struct Signing {
    /// The job's key, else `[signing]`'s.
    key: Arc<SigningKey>,
    /// The job's Signature-Agent, else `[signing]`'s.
    agent: String,
    /// `[signing] expires_seconds`.
    expires_seconds: u64,
    /// `mode = "on_challenge"`: signed once the host asked.
    on_challenge: bool,
}

impl Signing {
    /// How a request of `caller` to a host under `policy` is signed, or `None`: no key for it,
    /// `mode = "off"`, or `sign = false` for the host.
    pub(super) fn of(config: &Config, caller: &Caller, policy: &HostPolicy) -> Option<Signing> {
        Signing::for_job(config, caller.settings.as_deref(), policy)
    }

    /// How courtesy's own requests to a host under `policy` (robots.txt) are signed: with
    /// `[signing]`'s key, as no job's.
    pub(super) fn own(config: &Config, policy: &HostPolicy) -> Option<Signing> {
        Signing::for_job(config, None, policy)
    }

    /// How a request of `job` (`None`: no job's own key) is signed, under `policy`.
    fn for_job(
        config: &Config,
        job: Option<&crate::config::JobSettings>,
        policy: &HostPolicy,
    ) -> Option<Signing> {
        let mode = config.signing.mode_in_force();
        if mode == SigningMode::Off || !policy.identity.sign {
            return None;
        }
        let key = job
            .and_then(|j| j.signing_key.clone())
            .or_else(|| config.signing.key.clone())?;
        let agent = job
            .and_then(|j| j.signature_agent.clone())
            .or_else(|| config.signing.signature_agent.clone())?;
        Some(Signing {
            key,
            agent,
            expires_seconds: config.signing.expires_seconds,
            on_challenge: mode == SigningMode::OnChallenge,
        })
    }

    /// Whether the request is signed now: always, or once its host asked.
    pub(super) fn signs_now(&self, challenged: &Challenged, budget_key: &str) -> bool {
        !self.on_challenge || challenged.asked(budget_key)
    }

    /// Whether this signing waits for a challenge (`on_challenge`).
    pub(super) fn waits_for_challenge(&self) -> bool {
        self.on_challenge
    }

    /// Signs `request` as it leaves: any `Signature`, `Signature-Input` and `Signature-Agent`
    /// the client sent are replaced by courtesy's, made now with a fresh nonce.
    pub(super) fn sign<B>(&self, request: &mut Request<B>) {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let authority = authority_of(request);
        let headers = request.headers_mut();
        for name in [&SIGNATURE, &SIGNATURE_INPUT, &SIGNATURE_AGENT] {
            headers.remove(name);
        }
        let agent = sf_string(&self.agent);
        let components = [
            Component::named("@authority", &authority),
            Component::member("signature-agent", LABEL, &agent),
        ];
        let params = vec![
            ("created", Param::Integer(now)),
            ("expires", Param::Integer(now + self.expires_seconds)),
            ("keyid", Param::Text(self.key.thumbprint().to_string())),
            ("alg", Param::Text("ed25519".into())),
            ("nonce", Param::Text(nonce())),
            ("tag", Param::Text(TAG.into())),
        ];
        let signed = httpsig::sign(&self.key, LABEL, &components, &params);
        // The agent URL was checked printable at config time; the rest is ours.
        let fields = [
            (&SIGNATURE_AGENT, format!("{LABEL}={agent}")),
            (&SIGNATURE_INPUT, signed.input),
            (&SIGNATURE, signed.signature),
        ];
        for (name, value) in fields {
            if let Ok(value) = HeaderValue::from_str(&value) {
                headers.insert(name.clone(), value);
            }
        }
    }
}

/// The request's `@authority` (RFC 9421 section 2.2.3): the `Host` courtesy sends, lowercase,
/// else the URI's authority.
fn authority_of<B>(request: &Request<B>) -> String {
    let host = request
        .headers()
        .get(HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_string)
        .or_else(|| request.uri().authority().map(|a| a.as_str().to_string()))
        .unwrap_or_default();
    host.to_ascii_lowercase()
}

/// A random nonce: 32 bytes, base64.
fn nonce() -> String {
    STANDARD.encode(rand::random::<[u8; 32]>())
}

/// Whether an answer asks for a signature: 401, 403 or 429 with `Accept-Signature`.
pub(super) fn is_challenge(status: u16, headers: &HeaderMap) -> bool {
    matches!(status, 401 | 403 | 429) && headers.contains_key(&ACCEPT_SIGNATURE)
}

/// The budget keys whose host asked for signatures (`on_challenge`), in memory, for this
/// instance's life.
#[derive(Debug, Default)]
pub(crate) struct Challenged(DashSet<String>);

impl Challenged {
    /// Whether the host of `budget_key` asked for signatures.
    pub(super) fn asked(&self, budget_key: &str) -> bool {
        self.0.contains(budget_key)
    }

    /// Remembers that the host of `budget_key` asked (up to [`MAX_CHALLENGED`] hosts).
    pub(super) fn remember(&self, budget_key: &str) {
        if self.0.len() < MAX_CHALLENGED {
            self.0.insert(budget_key.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signed_request_replaces_the_clients_fields_and_covers_its_authority_and_agent() {
        let signing = Signing {
            key: Arc::new(SigningKey::generate().unwrap()),
            agent: "https://bot.example".into(),
            expires_seconds: 300,
            on_challenge: false,
        };
        let mut request = Request::get("http://Site.Test:8080/a")
            .header(HOST, "Site.Test:8080")
            .header("signature", "sig1=:AAAA:")
            .header("signature-input", "sig1=();created=1")
            .header("signature-agent", "\"https://evil.example\"")
            .body(())
            .unwrap();
        signing.sign(&mut request);
        let field = |request: &Request<()>, name: &HeaderName| {
            let all: Vec<_> = request.headers().get_all(name).iter().collect();
            assert_eq!(all.len(), 1, "{name}");
            all[0].to_str().unwrap().to_string()
        };
        assert_eq!(
            field(&request, &SIGNATURE_AGENT),
            "sig1=\"https://bot.example\""
        );
        let input = field(&request, &SIGNATURE_INPUT);
        assert!(
            input.starts_with("sig1=(\"@authority\" \"signature-agent\";key=\"sig1\");created="),
            "{input}"
        );
        assert!(input.contains(&format!(";keyid=\"{}\"", signing.key.thumbprint())));
        assert!(
            input.contains(";alg=\"ed25519\";nonce=\"") && input.ends_with(";tag=\"web-bot-auth\"")
        );
        assert!(field(&request, &SIGNATURE).starts_with("sig1=:"));
        let first = input.clone();
        signing.sign(&mut request);
        assert_ne!(
            field(&request, &SIGNATURE_INPUT),
            first,
            "a fresh nonce each time"
        );
    }

    #[test]
    fn only_a_refusal_with_accept_signature_is_a_challenge() {
        let mut asks = HeaderMap::new();
        asks.insert(
            &ACCEPT_SIGNATURE,
            HeaderValue::from_static("sig1=(\"@authority\")"),
        );
        assert!(is_challenge(403, &asks) && is_challenge(401, &asks) && is_challenge(429, &asks));
        assert!(!is_challenge(200, &asks) && !is_challenge(503, &asks));
        assert!(!is_challenge(403, &HeaderMap::new()));
    }
}
