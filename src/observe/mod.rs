//! What courtesy tells the operator: Prometheus metrics, OpenTelemetry traces, the block webhook.

pub(crate) mod alerts;
pub(crate) mod metrics;
pub(crate) mod telemetry;
