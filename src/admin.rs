//! The admin listener: a health check and a plain-text view of the host table.
//!
//! It runs on its own port so that it is never confused with proxy traffic. Metrics, the JSON host
//! API, the dashboard and operator overrides are added here by the see-and-steer issue.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;

use crate::config::{canonical_ip, Config};
use crate::limiter::Limiter;
use crate::response::{local, ProxyBody, ProxyError};
use crate::tls::Interceptor;

/// State for the admin service.
#[derive(Debug)]
pub struct Admin {
    config: Arc<Config>,
    limiter: Arc<Limiter>,
    interceptor: Arc<Interceptor>,
}

impl Admin {
    /// The admin service over the shared limiter.
    pub fn new(config: Arc<Config>, limiter: Arc<Limiter>, interceptor: Arc<Interceptor>) -> Self {
        Admin {
            config,
            limiter,
            interceptor,
        }
    }

    /// Answers one admin request. Never fails: errors are responses.
    pub async fn serve(
        self: Arc<Self>,
        req: Request<Incoming>,
        client: SocketAddr,
    ) -> Result<Response<ProxyBody>, Infallible> {
        if !self.config.client_allowed(client.ip()) {
            return Ok(local(
                StatusCode::FORBIDDEN,
                ProxyError::HttpRequestDenied,
                &format!(
                    "client {} is not in [proxy] allow_clients",
                    canonical_ip(client.ip())
                ),
                None,
            ));
        }
        let response = match (req.method(), req.uri().path()) {
            (&Method::GET | &Method::HEAD, "/healthz") => text(StatusCode::OK, "ok\n".into()),
            (&Method::GET | &Method::HEAD, "/ca.pem") => {
                let mut r = text(StatusCode::OK, self.interceptor.ca().cert_pem().to_string());
                r.headers_mut().insert(
                    http::header::CONTENT_TYPE,
                    http::HeaderValue::from_static("application/x-pem-file"),
                );
                r
            }
            (&Method::GET | &Method::HEAD, "/") => {
                let (hits, misses) = self.interceptor.cache_stats();
                text(
                    StatusCode::OK,
                    format!(
                        "courtesy {}\nconfig: {}\nhosts known: {}\nleaf certificates: {hits} cache hits, {misses} minted\n",
                        env!("CARGO_PKG_VERSION"),
                        self.config.source,
                        self.limiter.host_count()
                    ),
                )
            }
            _ => local(
                StatusCode::NOT_FOUND,
                ProxyError::HttpRequestError,
                &format!("no admin endpoint {} {}", req.method(), req.uri().path()),
                None,
            ),
        };
        Ok(response)
    }
}

fn text(status: StatusCode, body: String) -> Response<ProxyBody> {
    let mut r = Response::new(ProxyBody::Local(Some(Bytes::from(body))));
    *r.status_mut() = status;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}
