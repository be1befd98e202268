//! What courtesy tells the operator: Prometheus metrics, OpenTelemetry traces, the block webhook,
//! the stream of host events (`GET /v1/events`).

pub(crate) mod alerts;
pub(crate) mod events;
pub(crate) mod metrics;
pub(crate) mod telemetry;
