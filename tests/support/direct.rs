//! Talking to a server without the proxy: the admin listener (its API, metrics and pages), or an
//! origin for comparison.

use http::{Request, StatusCode};
use http_body_util::BodyExt;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use super::body::{full, TestBody};

/// A plain client straight to an origin (no proxy), for comparisons.
pub fn direct_client() -> Client<HttpConnector, TestBody> {
    Client::builder(TokioExecutor::new()).build(HttpConnector::new())
}

/// Sends `method` to `url` directly (no proxy) with an optional bearer token and body; returns the
/// status and body text.
pub async fn admin_call(
    method: &str,
    url: &str,
    token: Option<&str>,
    body: &str,
) -> (StatusCode, String) {
    let mut req = Request::builder().method(method).uri(url);
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let req = req.body(full(body.to_string())).unwrap();
    let response = direct_client().request(req).await.unwrap();
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// GETs `url` directly (no proxy) and returns the body as text.
pub async fn fetch_direct(url: &str) -> String {
    let response = direct_client().get(url.parse().unwrap()).await.unwrap();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8_lossy(&body).into_owned()
}
