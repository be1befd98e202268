//! Telling a human that a host blocked courtesy: one JSON POST to `[alerts] webhook`.
//!
//! Sent off the request path (a spawned task), with a short timeout, once per block: never retried
//! in a loop, so a dead webhook cannot add load anywhere. The URL is read from the config in force,
//! so a reload can change it.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::Full;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tracing::{info, warn};

use crate::config::LiveConfig;
use crate::util::redact::redacted;

/// The webhook sender.
pub(crate) struct Alerts {
    config: LiveConfig,
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
}

impl std::fmt::Debug for Alerts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Alerts").finish()
    }
}

impl Alerts {
    /// A sender that verifies https webhooks with `tls`.
    pub(crate) fn new(config: LiveConfig, tls: rustls::ClientConfig) -> Self {
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .build();
        Alerts {
            config,
            // Webhook posts are rare: an idle connection is closed after 30 s.
            client: Client::builder(TokioExecutor::new())
                .pool_timer(TokioTimer::new())
                .pool_idle_timeout(std::time::Duration::from_secs(30))
                .build(connector),
        }
    }

    /// Posts `{"event": "host_blocked", ...}` to the webhook, if one is configured.
    pub(crate) fn host_blocked(&self, host: &str, cause: &str, detail: &str, pause: Duration) {
        let config = self.config.get();
        let Some(url) = config.alerts.webhook.clone() else {
            return;
        };
        let timeout = config.alerts.webhook_timeout;
        let until = SystemTime::now() + pause;
        let body = serde_json::json!({
            "event": "host_blocked",
            "host": host,
            "cause": cause,
            "detail": detail,
            "pause_seconds": pause.as_secs_f64(),
            "until_unix_ms": until.duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0),
            "courtesy": env!("CARGO_PKG_VERSION"),
        })
        .to_string();
        let request = http::Request::post(url.clone())
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(
                http::header::USER_AGENT,
                concat!("courtesy/", env!("CARGO_PKG_VERSION")),
            )
            .body(Full::new(Bytes::from(body)));
        let request = match request {
            Ok(r) => r,
            Err(e) => {
                warn!("cannot build the webhook request: {e}");
                return;
            }
        };
        let client = self.client.clone();
        let url = redacted(&url.to_string());
        let host = host.to_string();
        tokio::spawn(async move {
            match tokio::time::timeout(timeout, client.request(request)).await {
                Ok(Ok(response)) if response.status().is_success() => {
                    info!(%host, webhook = %url, "block alert sent");
                }
                Ok(Ok(response)) => {
                    warn!(%host, webhook = %url, status = response.status().as_u16(), "the webhook refused the block alert (not retried)");
                }
                Ok(Err(e)) => {
                    warn!(%host, webhook = %url, "the block alert failed (not retried): {e}")
                }
                Err(_) => warn!(%host, webhook = %url, "the block alert timed out (not retried)"),
            }
        });
    }
}
