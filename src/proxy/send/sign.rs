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

use crate::budget::jobs::Caller;
use crate::config::{Config, HostPolicy, SigningMode};
use crate::pacing::feedback::field_lines as joined;
use crate::wire::httpsig::{self, sf_string, Carried, Component, Param, SigningKey};
use tracing::info;

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
pub(crate) struct Signing {
    /// The job's key, else `[signing]`'s.
    key: Arc<SigningKey>,
    /// The job's Signature-Agent, else `[signing]`'s.
    agent: String,
    /// `[signing] expires_seconds`.
    expires_seconds: u64,
    /// `mode = "on_challenge"`: signed once the host asked.
    on_challenge: bool,
    /// The signatures the client's request came with, kept beside courtesy's where courtesy
    /// changes nothing they cover.
    client: Option<Arc<ClientSignatures>>,
}

impl Signing {
    /// How a request of `caller` to a host under `policy` is signed, or `None`: no key for it,
    /// `mode = "off"`, or `sign = false` for the host.
    pub(crate) fn of(config: &Config, caller: &Caller, policy: &HostPolicy) -> Option<Signing> {
        Signing::for_job(config, caller.settings.as_deref(), policy)
    }

    /// How courtesy's own requests to a host under `policy` (robots.txt) are signed: with
    /// `[signing]`'s key, as no job's.
    pub(crate) fn own(config: &Config, policy: &HostPolicy) -> Option<Signing> {
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
            client: None,
        })
    }

    /// This signing, for a request that came with `headers`: the client's own signatures, if
    /// any, and the fields they cover as they came, so that those courtesy leaves intact travel
    /// on beside its own.
    pub(crate) fn keeping(mut self, headers: &HeaderMap, uri: &http::Uri) -> Self {
        let authority = authority_from(headers, uri);
        self.client = ClientSignatures::of(headers, authority).map(Arc::new);
        self
    }

    /// Whether the request is signed now: always, or once its host asked.
    pub(crate) fn signs_now(&self, challenged: &Challenged, budget_key: &str) -> bool {
        !self.on_challenge || challenged.asked(budget_key)
    }

    /// Whether this signing waits for a challenge (`on_challenge`).
    pub(crate) fn waits_for_challenge(&self) -> bool {
        self.on_challenge
    }

    /// Signs `request` as it leaves, with a signature made now with a fresh nonce. The client's
    /// own signatures that cover nothing courtesy changed travel on beside it, each under its
    /// label (RFC 9421 4.3); the others are removed, and the log says why.
    pub(crate) fn sign<B>(&self, request: &mut Request<B>) {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let authority = authority_of(request);
        let headers = request.headers_mut();
        let kept = match &self.client {
            Some(client) => client.kept(headers, &authority),
            None => Kept::default(),
        };
        for name in [&SIGNATURE, &SIGNATURE_INPUT, &SIGNATURE_AGENT] {
            headers.remove(name);
        }
        let label = kept.free_label();
        let label = label.as_str();
        let agent = sf_string(&self.agent);
        let components = [
            Component::named("@authority", &authority),
            Component::member("signature-agent", label, &agent),
        ];
        let params = vec![
            ("created", Param::Integer(now)),
            ("expires", Param::Integer(now + self.expires_seconds)),
            ("keyid", Param::Text(self.key.thumbprint().to_string())),
            ("alg", Param::Text("ed25519".into())),
            ("nonce", Param::Text(nonce())),
            ("tag", Param::Text(TAG.into())),
        ];
        let signed = httpsig::sign(&self.key, label, &components, &params);
        // The agent URL was checked printable at config time; the rest is ours, or the client's
        // members as the client wrote them.
        let fields = [
            (&SIGNATURE_AGENT, kept.agents, format!("{label}={agent}")),
            (&SIGNATURE_INPUT, kept.inputs, signed.input),
            (&SIGNATURE, kept.signatures, signed.signature),
        ];
        let fields = fields.map(|(name, mut theirs, ours)| {
            theirs.push(ours);
            (name, theirs.join(", "))
        });
        for (name, value) in fields {
            if let Ok(value) = HeaderValue::from_str(&value) {
                headers.insert(name.clone(), value);
            }
        }
    }
}

/// The signatures a client's request came with, and the fields they cover as they came.
#[derive(Debug)]
pub(crate) struct ClientSignatures {
    carried: Vec<Carried>,
    /// The request's `@authority` as it came.
    authority: String,
    /// The client's `Signature-Agent` members, by key.
    agents: Vec<(String, String)>,
    /// Each field a signature covers, with its value as it came (lines joined by `, `).
    came: Vec<(String, Option<Vec<u8>>)>,
}

/// What of the client's signatures goes on: the members of each field, as the client wrote
/// them, and the labels taken.
#[derive(Debug, Default)]
struct Kept {
    inputs: Vec<String>,
    signatures: Vec<String>,
    agents: Vec<String>,
    labels: Vec<String>,
}

impl Kept {
    /// A label for courtesy's signature that none of the client's uses: `sig1`, else the next.
    fn free_label(&self) -> String {
        (1..)
            .map(|n| format!("sig{n}"))
            .find(|label| !self.labels.contains(label))
            .unwrap_or_else(|| LABEL.to_string())
    }
}

impl ClientSignatures {
    /// The signatures on a request with `headers`, or `None` when it carries none. Fields that
    /// cannot be read carry nothing that can be kept: they are replaced, as before.
    fn of(headers: &HeaderMap, authority: String) -> Option<ClientSignatures> {
        let input = joined(headers, &SIGNATURE_INPUT)?;
        let signature = joined(headers, &SIGNATURE)?;
        let carried = match httpsig::carried(&input, &signature) {
            Ok(carried) if !carried.is_empty() => carried,
            Ok(_) => return None,
            Err(why) => {
                info!("the client's signature cannot be read and is replaced: {why}");
                return None;
            }
        };
        let agents = joined(headers, &SIGNATURE_AGENT)
            .and_then(|value| httpsig::members(&value))
            .unwrap_or_default();
        let mut came: Vec<(String, Option<Vec<u8>>)> = Vec::new();
        for covered in carried.iter().flat_map(|c| &c.covered) {
            if covered.is_derived() {
                continue;
            }
            let name = covered.name.as_str();
            if !came.iter().any(|(n, _)| n == name) {
                let value = HeaderName::from_bytes(name.as_bytes())
                    .ok()
                    .and_then(|name| joined(headers, &name));
                came.push((name.to_string(), value));
            }
        }
        Some(ClientSignatures {
            carried,
            authority,
            agents,
            came,
        })
    }

    /// Which signatures go on with a request leaving with `headers`: those whose covered fields
    /// are as they came. courtesy's own `Signature-Agent` member is added beside the client's, so
    /// a signature over the whole field (not one member) cannot stay, nor one over the
    /// signature fields themselves.
    fn kept(&self, headers: &HeaderMap, authority: &str) -> Kept {
        let mut kept = Kept::default();
        for carried in &self.carried {
            match self.changed(carried, headers, authority) {
                Some(why) => info!(
                    label = %carried.label.escape_debug(),
                    "the client's signature is removed: {why}"
                ),
                None => {
                    kept.inputs.push(carried.input.clone());
                    kept.signatures.push(carried.signature.clone());
                    kept.labels.push(carried.label.clone());
                }
            }
        }
        for (key, member) in &self.agents {
            let covered = self.carried.iter().any(|c| {
                kept.labels.contains(&c.label)
                    && c.covered
                        .iter()
                        .any(|v| v.name == "signature-agent" && v.key.as_deref() == Some(key))
            });
            if covered {
                kept.agents.push(member.clone());
                kept.labels.push(key.clone());
            }
        }
        kept
    }

    /// What courtesy changed that `carried` covers, in words; `None`: nothing.
    fn changed(&self, carried: &Carried, headers: &HeaderMap, authority: &str) -> Option<String> {
        for covered in &carried.covered {
            let name = match covered.name.as_str() {
                "@authority" if authority != self.authority => {
                    return Some("courtesy sends it to another authority than it came with".into());
                }
                // Method, path, query and scheme go on as they came.
                _ if covered.is_derived() => continue,
                "signature" | "signature-input" => {
                    return Some(format!(
                        "it covers {}, which courtesy's own signature adds to",
                        covered.name
                    ));
                }
                "signature-agent" if covered.key.is_none() => {
                    return Some("it covers the whole Signature-Agent field, to which courtesy adds its own member".into());
                }
                "signature-agent" => continue,
                name => name,
            };
            let came = self
                .came
                .iter()
                .find(|(n, _)| n == name)
                .and_then(|(_, v)| v.as_deref());
            let leaves = HeaderName::from_bytes(name.as_bytes())
                .ok()
                .and_then(|name| joined(headers, &name));
            if came != leaves.as_deref() {
                return Some(format!(
                    "it covers {}, which courtesy changes on the way",
                    covered.name
                ));
            }
        }
        None
    }
}

/// The request's `@authority` (RFC 9421 section 2.2.3): the `Host` courtesy sends, lowercase,
/// else the URI's authority.
fn authority_of<B>(request: &Request<B>) -> String {
    authority_from(request.headers(), request.uri())
}

/// [`authority_of`] a request with these `headers` and `uri`.
fn authority_from(headers: &HeaderMap, uri: &http::Uri) -> String {
    let host = headers
        .get(HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_string)
        .or_else(|| uri.authority().map(|a| a.as_str().to_string()))
        .unwrap_or_default();
    host.to_ascii_lowercase()
}

/// A random nonce: 32 bytes, base64.
fn nonce() -> String {
    STANDARD.encode(rand::random::<[u8; 32]>())
}

/// Whether an answer asks for a signature: 401, 403 or 429 with `Accept-Signature`.
pub(crate) fn is_challenge(status: u16, headers: &HeaderMap) -> bool {
    matches!(status, 401 | 403 | 429) && headers.contains_key(&ACCEPT_SIGNATURE)
}

/// The budget keys whose host asked for signatures (`on_challenge`), in memory, for this
/// instance's life.
#[derive(Debug, Default)]
pub(crate) struct Challenged(DashSet<String>);

impl Challenged {
    /// Whether the host of `budget_key` asked for signatures.
    pub(crate) fn asked(&self, budget_key: &str) -> bool {
        self.0.contains(budget_key)
    }

    /// Remembers that the host of `budget_key` asked (up to [`MAX_CHALLENGED`] hosts).
    pub(crate) fn remember(&self, budget_key: &str) {
        if self.0.len() < MAX_CHALLENGED {
            self.0.insert(budget_key.to_string());
        }
    }
}

/// The budget keys whose requests went unsigned over plain `http://` while signing was on: told
/// once per host in the log, and shown in `/hosts`.
#[derive(Debug, Default)]
pub(crate) struct PlainUnsigned(DashSet<String>);

impl PlainUnsigned {
    /// Notes an unsigned plain request to `budget_key`'s host; `true` the first time (up to
    /// [`MAX_CHALLENGED`] hosts are remembered).
    pub(crate) fn first(&self, budget_key: &str) -> bool {
        if self.0.contains(budget_key) || self.0.len() >= MAX_CHALLENGED {
            return false;
        }
        self.0.insert(budget_key.to_string())
    }

    /// Whether requests to `budget_key`'s host went unsigned over plain `http://`.
    pub(crate) fn contains(&self, budget_key: &str) -> bool {
        self.0.contains(budget_key)
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
            client: None,
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

    fn signing_keeping(request: &Request<()>) -> Signing {
        Signing {
            key: Arc::new(SigningKey::generate().unwrap()),
            agent: "https://bot.example".into(),
            expires_seconds: 60,
            on_challenge: false,
            client: None,
        }
        .keeping(request.headers(), request.uri())
    }

    #[test]
    fn a_clients_signature_over_what_courtesy_leaves_alone_travels_beside_courtesys() {
        let mut request = Request::get("https://site.test/a")
            .header(HOST, "site.test")
            .header("content-type", "text/plain")
            .header(
                "signature-input",
                "sig1=(\"@method\" \"@authority\" \"content-type\" \"signature-agent\";key=\"sig1\");created=1;keyid=\"theirs\"",
            )
            .header("signature", "sig1=:AAAA:")
            .header("signature-agent", "sig1=\"https://client.example\"")
            .body(())
            .unwrap();
        let signing = signing_keeping(&request);
        // On the way courtesy adds Via, which the client's signature does not cover.
        request
            .headers_mut()
            .insert("via", HeaderValue::from_static("1.1 courtesy"));
        signing.sign(&mut request);
        let field = |name: &HeaderName| request.headers()[name].to_str().unwrap().to_string();
        let input = field(&SIGNATURE_INPUT);
        assert!(
            input.starts_with("sig1=(\"@method\" \"@authority\" \"content-type\" \"signature-agent\";key=\"sig1\");created=1;keyid=\"theirs\", sig2=(\"@authority\" \"signature-agent\";key=\"sig2\");"),
            "the client's label untouched, courtesy's beside it: {input}"
        );
        assert!(field(&SIGNATURE).starts_with("sig1=:AAAA:, sig2=:"));
        assert_eq!(
            field(&SIGNATURE_AGENT),
            "sig1=\"https://client.example\", sig2=\"https://bot.example\""
        );
    }

    #[test]
    fn a_clients_signature_over_a_field_courtesy_changes_is_removed() {
        let covering = |covered: &str| {
            let mut request = Request::get("https://site.test/a")
                .header(HOST, "site.test")
                .header("user-agent", "theirs/1.0")
                .header(
                    "signature-input",
                    format!("mine=({covered});created=1;keyid=\"theirs\""),
                )
                .header("signature", "mine=:AAAA:")
                .body(())
                .unwrap();
            let signing = signing_keeping(&request);
            request.headers_mut().insert(
                "user-agent",
                HeaderValue::from_static("courtesy-stamped/1.0"),
            );
            request
                .headers_mut()
                .insert("via", HeaderValue::from_static("1.1 courtesy"));
            signing.sign(&mut request);
            request.headers()[&SIGNATURE_INPUT]
                .to_str()
                .unwrap()
                .to_string()
        };
        // A changed field, a field courtesy adds, the whole Signature-Agent field.
        for changed in ["\"user-agent\"", "\"via\"", "\"signature-agent\""] {
            let input = covering(changed);
            assert!(input.starts_with("sig1=("), "{changed}: {input}");
            assert!(!input.contains("mine="), "{changed}: {input}");
        }
        // A field left alone: kept, and courtesy's label is the first free one.
        let input = covering("\"@path\"");
        assert!(input.starts_with("mine=(\"@path\")"), "{input}");
        assert!(input.contains(", sig1=("), "{input}");
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
