//! `GET /.well-known/http-message-signatures-directory`: one agent's key directory (the JWKS
//! `courtesy keys directory --agent URL` prints) with its media type, answered only when the
//! request's `Host` is the authority of a configured `signature_agent`, and holding only that
//! agent's keys. Any other `Host` gets a 404 with no signature: the admin port never signs for
//! an authority that is not one of its agents, so nobody can re-serve the keys as their own.
//! Signed as draft-ietf-webbotauth-httpsig-protocol asks of a directory response: one signature
//! per key over the request's `@authority` (`;req`) and the body's `Content-Digest` (RFC 9530,
//! also sent), tag `http-message-signatures-directory`, so that a site can check that whoever
//! serves the directory holds its keys.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONTENT_TYPE, HOST};
use http::{HeaderValue, Response, StatusCode};

use crate::config::{Agent, Config};
use crate::proxy::answer::body::ProxyBody;
use crate::wire::httpsig::{self, Component, Param, SigningKey};

/// The path the directory is served at.
pub(crate) const PATH: &str = "/.well-known/http-message-signatures-directory";
/// Its media type.
const MEDIA_TYPE: &str = "application/http-message-signatures-directory+json";
/// The `tag` of the directory's signatures.
const TAG: &str = "http-message-signatures-directory";

/// The signed directory of the agent whose authority is `host`; a 404 for any other `Host`.
pub(crate) fn answer(config: &Config, host: Option<&str>) -> Response<ProxyBody> {
    match agent_of(config, host) {
        Some((agent, authority)) => signed(
            agent.directory(),
            MEDIA_TYPE,
            &agent.keys,
            &authority,
            TAG,
            config.signing.expires_seconds,
        ),
        None => not_an_agent("key directory"),
    }
}

/// The agent whose authority is the request's `Host`, with that authority (lowercase) as the
/// signatures cover it; `None` for any other `Host` (or none).
pub(crate) fn agent_of(config: &Config, host: Option<&str>) -> Option<(Agent, String)> {
    let authority = host?.to_ascii_lowercase();
    config
        .agent_for_host(&authority)
        .map(|agent| (agent, authority))
}

/// The 404 for a `Host` that is no agent's: a JSON error, unsigned.
pub(crate) fn not_an_agent(what: &str) -> Response<ProxyBody> {
    let body = serde_json::json!({
        "error": format!(
            "no {what} for this Host: it is served only under the authority of a configured \
             signature_agent ([signing] or a [[job]]'s)"
        )
    });
    let mut r = Response::new(ProxyBody::Local(Some(Bytes::from(format!("{body}\n")))));
    *r.status_mut() = StatusCode::NOT_FOUND;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

/// `body` as `media_type`, with its `Content-Digest` and one signature per key over the
/// request's `@authority` (`authority`) and that digest, tagged `tag`, lasting
/// `expires_seconds`.
pub(crate) fn signed(
    body: String,
    media_type: &'static str,
    keys: &[Arc<SigningKey>],
    authority: &str,
    tag: &str,
    expires_seconds: u64,
) -> Response<ProxyBody> {
    let digest = content_digest(body.as_bytes());
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let components = [
        Component::of_request("@authority", authority),
        Component::named("content-digest", &digest),
    ];
    let (mut inputs, mut signatures) = (Vec::new(), Vec::new());
    for (i, key) in keys.iter().enumerate() {
        let params = vec![
            ("alg", Param::Text("ed25519".into())),
            ("created", Param::Integer(now)),
            ("expires", Param::Integer(now + expires_seconds)),
            ("keyid", Param::Text(key.thumbprint().to_string())),
            ("tag", Param::Text(tag.into())),
        ];
        let signed = httpsig::sign(key, &format!("binding{i}"), &components, &params);
        inputs.push(signed.input);
        signatures.push(signed.signature);
    }
    let mut r = Response::new(ProxyBody::Local(Some(Bytes::from(body))));
    let headers = r.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(media_type));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("max-age=300"));
    let fields = [
        ("content-digest", digest),
        ("signature-input", inputs.join(", ")),
        ("signature", signatures.join(", ")),
    ];
    for (name, value) in fields {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(name, value);
        }
    }
    r
}

/// RFC 9530's `Content-Digest` of `body`: `sha-256=:<base64>:`.
pub(crate) fn content_digest(body: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, body);
    format!("sha-256=:{}:", STANDARD.encode(digest.as_ref()))
}

/// The authority a request was sent to, for [`answer`]: its `Host`, else (HTTP/2) the
/// authority of its URI.
pub(crate) fn host_of<B>(req: &http::Request<B>) -> Option<&str> {
    match req.headers().get(HOST) {
        Some(host) => host.to_str().ok(),
        None => req.uri().authority().map(|a| a.as_str()),
    }
}

#[cfg(test)]
mod tests {
    use super::content_digest;

    #[test]
    fn the_content_digest_is_rfc_9530s_sha_256() {
        // RFC 9530 appendix B.1: {"hello": "world"} followed by a newline.
        assert_eq!(
            content_digest(b"{\"hello\": \"world\"}\n"),
            "sha-256=:RK/0qy18MlBSVnWgjwz6lZEWjP/lF5HF9bvEF8FabDg=:"
        );
    }
}
