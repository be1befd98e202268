//! Traces of every request over OpenTelemetry, sent to an OTLP/HTTP receiver
//! (`[telemetry] otlp_endpoint`); nothing at all without one.
//!
//! | file | owns |
//! |---|---|
//! | `mod.rs` | [`Telemetry`]: the tracer provider, its batch processor and exporter, started and shut down with the process |
//! | `trace.rs` | [`RequestTrace`]: one request's spans, built from the instants the request path already takes |
//! | `client.rs` | the exporter's HTTP client: courtesy's own hyper client, on courtesy's runtime |
//! | `quiet.rs` | the exporter wrapped so that a dead receiver costs a log line now and then |
//!
//! OTel spans are built directly (not bridged from `tracing`'s spans): with no endpoint the
//! request path holds an `Option` that is `None`, and nothing else. With one, each request's spans
//! are made when their end is known, with the start and end instants the request path measured
//! anyway, and handed to the SDK's batch processor, which exports from a thread of its own in
//! batches (every second, or 512 spans). Its queue holds at most 2048 spans; beyond that spans are
//! dropped, never waited for. This module does not decide what a request does; it only records it.

mod client;
mod quiet;
mod trace;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry::KeyValue;
use opentelemetry_otlp::{Protocol, WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracer, SdkTracerProvider,
};
use opentelemetry_sdk::Resource;
use tracing::{info, warn};

use crate::config::TelemetrySettings;
pub(crate) use trace::{RequestTrace, Requested};

/// Spans queued for export at most; more are dropped (a receiver that is down never grows
/// courtesy's memory).
const MAX_QUEUE: usize = 2048;

/// How often a batch goes out, at the latest.
const EVERY: Duration = Duration::from_secs(1);

/// The tracer and what exports its spans.
#[derive(Debug)]
pub(crate) struct Telemetry {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
}

impl Telemetry {
    /// Starts exporting to `settings.otlp_endpoint` (verifying an https one with `tls`), or
    /// `None` when it is unset. Must be called on courtesy's runtime.
    pub(crate) fn start(
        settings: &TelemetrySettings,
        tls: rustls::ClientConfig,
    ) -> anyhow::Result<Option<Arc<Telemetry>>> {
        let Some(endpoint) = &settings.otlp_endpoint else {
            return Ok(None);
        };
        let url = traces_url(endpoint);
        let shown = crate::util::redact::redacted(&url);
        let client = client::OtlpClient::new(tls, settings.timeout);
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client)
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(url)
            .with_timeout(settings.timeout)
            .build()
            .context("[telemetry] otlp_endpoint: cannot make the OTLP exporter")?;
        let processor = BatchSpanProcessor::builder(quiet::Quiet::new(exporter, shown.clone()))
            .with_batch_config(
                BatchConfigBuilder::default()
                    .with_max_queue_size(MAX_QUEUE)
                    .with_scheduled_delay(EVERY)
                    .build(),
            )
            .build();
        let resource = Resource::builder_empty()
            .with_service_name("courtesy")
            .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
            .build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_resource(resource)
            .build();
        let tracer = provider.tracer("courtesy");
        info!(endpoint = %shown, "traces go to the OTLP receiver");
        Ok(Some(Arc::new(Telemetry { provider, tracer })))
    }

    /// The tracer requests build their spans with.
    pub(crate) fn tracer(&self) -> &SdkTracer {
        &self.tracer
    }

    /// Sends what is queued (within a few seconds) and stops the exporter.
    pub(crate) async fn shut_down(&self) {
        let provider = self.provider.clone();
        let flushed = tokio::task::spawn_blocking(move || provider.shutdown());
        match tokio::time::timeout(Duration::from_secs(10), flushed).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => warn!("the last traces may be lost: {e}"),
            _ => warn!("the last traces may be lost: the exporter did not stop in time"),
        }
    }
}

/// `<endpoint>/v1/traces`, the OTLP/HTTP path of traces under the receiver's base URL.
fn traces_url(endpoint: &http::Uri) -> String {
    let base = endpoint.to_string();
    format!("{}/v1/traces", base.trim_end_matches('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traces_go_under_v1_traces_of_the_base_url() {
        let at = |s: &str| traces_url(&s.parse().unwrap());
        assert_eq!(
            at("http://127.0.0.1:4318"),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(at("http://h:4318/"), "http://h:4318/v1/traces");
        assert_eq!(at("https://h/otlp"), "https://h/otlp/v1/traces");
    }
}
