//! The OTLP exporter's HTTP client: courtesy's own hyper client (rustls on courtesy's one crypto
//! provider, the same roots as upstream requests), so that no other HTTP stack or OpenSSL comes in.
//!
//! The SDK's batch processor exports from a thread of its own and waits there; the request is
//! run as a task on courtesy's runtime (captured when the client is made), within the export
//! timeout, and the answer's body is read up to 64 KiB.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use opentelemetry_http::{HttpClient, HttpError, Request, Response};

/// The most of a receiver's answer that is read (it is a small protobuf message).
const MAX_ANSWER: usize = 64 * 1024;

/// Posts export requests through hyper on courtesy's runtime.
#[derive(Debug, Clone)]
pub(crate) struct OtlpClient {
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    runtime: tokio::runtime::Handle,
    timeout: Duration,
}

impl OtlpClient {
    /// A client verifying https receivers with `tls`, each request within `timeout`. Must be
    /// made on courtesy's runtime.
    pub(crate) fn new(tls: rustls::ClientConfig, timeout: Duration) -> Self {
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .build();
        OtlpClient {
            client: Client::builder(TokioExecutor::new())
                .pool_timer(TokioTimer::new())
                .pool_idle_timeout(Duration::from_secs(30))
                .build(connector),
            runtime: tokio::runtime::Handle::current(),
            timeout,
        }
    }
}

#[async_trait::async_trait]
impl HttpClient for OtlpClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let (client, timeout) = (self.client.clone(), self.timeout);
        let task = self.runtime.spawn(async move {
            let (parts, body) = request.into_parts();
            let request = Request::from_parts(parts, Full::new(body));
            let answer = async {
                let response = client.request(request).await?;
                let (parts, body) = response.into_parts();
                let body = Limited::new(body, MAX_ANSWER).collect().await?.to_bytes();
                Ok::<_, HttpError>(Response::from_parts(parts, body))
            };
            match tokio::time::timeout(timeout, answer).await {
                Ok(answered) => answered,
                Err(_) => Err(format!("no answer within {}s", timeout.as_secs_f64()).into()),
            }
        });
        task.await?
    }
}
