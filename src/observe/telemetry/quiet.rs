//! The OTLP exporter, wrapped so that a receiver that is down or refuses costs at most one log
//! line a minute (saying how many exports failed since the last one), and one line when it
//! answers again. The SDK's own diagnostics are not built (`internal-logs` is off).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use opentelemetry_sdk::Resource;
use tracing::{info, warn};

/// At most one warning per this long.
const LINE_EVERY: Duration = Duration::from_secs(60);

/// An exporter that reports its failures quietly.
#[derive(Debug)]
pub(crate) struct Quiet<E> {
    inner: E,
    /// The receiver's URL as logs show it (without credentials).
    endpoint: String,
    state: Mutex<Failures>,
}

/// Failed exports since the last line, and when that line was written.
#[derive(Debug, Default)]
struct Failures {
    since_line: u64,
    last_line: Option<Instant>,
    failing: bool,
}

impl<E> Quiet<E> {
    /// `inner`, reporting failures to reach `endpoint`.
    pub(crate) fn new(inner: E, endpoint: String) -> Self {
        Quiet {
            inner,
            endpoint,
            state: Mutex::new(Failures::default()),
        }
    }

    /// Notes how an export went; says so in the log when it is time.
    fn note(&self, result: &OTelSdkResult, now: Instant) {
        let mut state = crate::util::locks::lock(&self.state);
        match result {
            Ok(()) => {
                if std::mem::take(&mut state.failing) {
                    info!(endpoint = %self.endpoint, "traces reach the OTLP receiver again");
                }
                state.since_line = 0;
            }
            Err(e) => {
                state.failing = true;
                state.since_line += 1;
                if state
                    .last_line
                    .is_none_or(|at| now.duration_since(at) >= LINE_EVERY)
                {
                    warn!(
                        endpoint = %self.endpoint,
                        failed_exports = state.since_line,
                        "traces could not be sent (spans are dropped; requests are not held): {e}"
                    );
                    state.last_line = Some(now);
                    state.since_line = 0;
                }
            }
        }
    }
}

impl<E: SpanExporter> SpanExporter for Quiet<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let result = self.inner.export(batch).await;
        self.note(&result, Instant::now());
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn shutdown(&self) -> OTelSdkResult {
        self.inner.shutdown()
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_sdk::error::OTelSdkError;

    #[test]
    fn a_dead_receiver_costs_one_line_a_minute() {
        let quiet = Quiet::new((), "http://127.0.0.1:9".into());
        let t0 = Instant::now();
        let failed: OTelSdkResult = Err(OTelSdkError::InternalFailure("refused".into()));
        quiet.note(&failed, t0);
        assert_eq!(crate::util::locks::lock(&quiet.state).last_line, Some(t0));
        for s in 1..60 {
            quiet.note(&failed, t0 + Duration::from_secs(s));
        }
        let state = crate::util::locks::lock(&quiet.state);
        assert_eq!(
            state.last_line,
            Some(t0),
            "no second line within the minute"
        );
        assert_eq!(state.since_line, 59);
        drop(state);
        quiet.note(&failed, t0 + Duration::from_secs(60));
        assert_eq!(
            crate::util::locks::lock(&quiet.state).last_line,
            Some(t0 + Duration::from_secs(60))
        );
        quiet.note(&Ok(()), t0 + Duration::from_secs(61));
        assert!(!crate::util::locks::lock(&quiet.state).failing);
    }
}
