//! `GET /.well-known/http-message-signatures-directory`: the key directory (the JWKS
//! `courtesy keys directory` prints) with its media type, signed as
//! draft-meunier-http-message-signatures-directory asks: one signature per key over the
//! request's `@authority` (`;req`), tag `http-message-signatures-directory`, so that a site can
//! check that whoever serves the directory holds its keys. An operator puts it behind the public
//! host of `signature_agent`.

use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONTENT_TYPE, HOST};
use http::{HeaderValue, Response, StatusCode};

use crate::config::Config;
use crate::proxy::body::ProxyBody;
use crate::wire::httpsig::{self, Component, Param};

/// The path the directory is served at.
pub(crate) const PATH: &str = "/.well-known/http-message-signatures-directory";
/// Its media type.
const MEDIA_TYPE: &str = "application/http-message-signatures-directory+json";
/// The `tag` of the directory's signatures.
const TAG: &str = "http-message-signatures-directory";

/// The signed directory of `config`'s keys for a request whose `Host` is `host`; a 404 when
/// courtesy signs with no key.
pub(crate) fn answer(config: &Config, host: Option<&HeaderValue>) -> Response<ProxyBody> {
    let keys = config.signing_keys();
    if keys.is_empty() {
        let mut r = Response::new(ProxyBody::Local(Some(Bytes::from_static(
            b"{\"error\": \"no signing key: set [signing] key_file\"}\n",
        ))));
        *r.status_mut() = StatusCode::NOT_FOUND;
        r.headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        return r;
    }
    let authority = host
        .and_then(|h| h.to_str().ok())
        .unwrap_or_default()
        .to_ascii_lowercase();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let components = [Component::of_request("@authority", &authority)];
    let (mut inputs, mut signatures) = (Vec::new(), Vec::new());
    for (i, key) in keys.iter().enumerate() {
        let params = vec![
            ("alg", Param::Text("ed25519".into())),
            ("created", Param::Integer(now)),
            (
                "expires",
                Param::Integer(now + config.signing.expires_seconds),
            ),
            ("keyid", Param::Text(key.thumbprint().to_string())),
            ("tag", Param::Text(TAG.into())),
        ];
        let signed = httpsig::sign(key, &format!("binding{i}"), &components, &params);
        inputs.push(signed.input);
        signatures.push(signed.signature);
    }
    let mut r = Response::new(ProxyBody::Local(Some(Bytes::from(config.key_directory()))));
    let headers = r.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(MEDIA_TYPE));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("max-age=300"));
    for (name, values) in [("signature-input", inputs), ("signature", signatures)] {
        if let Ok(value) = HeaderValue::from_str(&values.join(", ")) {
            headers.insert(name, value);
        }
    }
    r
}

/// The `Host` of a request, for [`answer`].
pub(crate) fn host_of<B>(req: &http::Request<B>) -> Option<&HeaderValue> {
    req.headers().get(HOST)
}
