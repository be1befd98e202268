//! One request's spans: `courtesy.request` (the root, kind server: method, host, port, job,
//! budget key, status, outcome, the wait's reason), and under it one `courtesy.wait` per turn
//! asked for (with its reason, and a `courtesy.store` child for the shared store's round trip),
//! `courtesy.robots` for the robots.txt check, and one `courtesy.upstream` per exchange (kind
//! client). A client's W3C `traceparent` is continued (the root's parent); the origin gets one,
//! naming the upstream span, only when the client sent one.
//!
//! Every span but the upstream one is built when its end is known, from instants the request
//! path measured anyway (tokio's clock, put on the wall clock once per request).

use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use http::header::{HeaderName, HeaderValue};
use http::HeaderMap;
use opentelemetry::propagation::TextMapPropagator as _;
use opentelemetry::trace::{Span as _, SpanKind, Status, TraceContextExt as _, Tracer as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_http::HeaderExtractor;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, Span};
use tokio::time::Instant;

use super::Telemetry;
use crate::pacing::policy::WaitReason;
use crate::wire::scheme::Scheme;

/// The W3C trace context header.
const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");

/// What a request is, for its root span.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Requested<'a> {
    /// The method.
    pub(crate) method: &'a str,
    /// `http` or `https`.
    pub(crate) scheme: Scheme,
    /// The target host and port.
    pub(crate) host: &'a str,
    /// Its port.
    pub(crate) port: u16,
    /// The job asking.
    pub(crate) job: &'a str,
}

/// The spans of one request in the making.
#[derive(Debug)]
pub(crate) struct RequestTrace {
    tracer: SdkTracer,
    /// Holds the root span: every other span is its child (or grandchild).
    cx: Context,
    /// One reading of both clocks, to put tokio's instants on the wall clock.
    anchor: (Instant, SystemTime),
    /// The client sent a `traceparent`: the origin gets one too.
    continued: bool,
    /// The budget key, once known.
    budget: Mutex<Option<String>>,
}

impl RequestTrace {
    /// Starts the root span of a request with `headers`, now.
    pub(crate) fn start(telemetry: &Telemetry, headers: &HeaderMap, asked: Requested<'_>) -> Self {
        let anchor = (Instant::now(), SystemTime::now());
        let continued = headers.contains_key(TRACEPARENT);
        let parent = if continued {
            TraceContextPropagator::new().extract(&HeaderExtractor(headers))
        } else {
            Context::new()
        };
        let tracer = telemetry.tracer().clone();
        let root = tracer
            .span_builder("courtesy.request")
            .with_kind(SpanKind::Server)
            .with_start_time(anchor.1)
            .with_attributes([
                KeyValue::new("http.request.method", asked.method.to_string()),
                KeyValue::new("url.scheme", asked.scheme.as_str()),
                KeyValue::new("server.address", asked.host.to_string()),
                KeyValue::new("server.port", i64::from(asked.port)),
                KeyValue::new("courtesy.job", asked.job.to_string()),
            ])
            .start_with_context(&tracer, &parent);
        RequestTrace {
            cx: parent.with_span(root),
            tracer,
            anchor,
            continued,
            budget: Mutex::new(None),
        }
    }

    /// `at` on the wall clock.
    fn wall(&self, at: Instant) -> SystemTime {
        let (instant, wall) = self.anchor;
        if at >= instant {
            wall + (at - instant)
        } else {
            wall - (instant - at)
        }
    }

    /// The request spends the budget of `key`.
    pub(crate) fn budget_key(&self, key: &str) {
        *crate::util::locks::lock(&self.budget) = Some(key.to_string());
    }

    /// A wait for a turn, from `asked` to `turn`, held longest by `reason`; `trip` is the
    /// shared store's round trip (began this long before the turn, lasted this long).
    pub(crate) fn wait(
        &self,
        (asked, turn): (Instant, Instant),
        reason: WaitReason,
        trip: Option<(Duration, Duration)>,
    ) {
        let span = self
            .tracer
            .span_builder("courtesy.wait")
            .with_start_time(self.wall(asked))
            .with_attributes([KeyValue::new("courtesy.wait.reason", reason.word())])
            .start_with_context(&self.tracer, &self.cx);
        let wait = self.cx.with_span(span);
        if let Some((before, lasted)) = trip {
            let began = turn.checked_sub(before).unwrap_or(asked).max(asked);
            let mut store = self
                .tracer
                .span_builder("courtesy.store")
                .with_kind(SpanKind::Client)
                .with_start_time(self.wall(began))
                .start_with_context(&self.tracer, &wait);
            store.end_with_timestamp(self.wall(began + lasted));
        }
        wait.span().end_with_timestamp(self.wall(turn));
    }

    /// The robots.txt check, from `started` to `ended`; `allowed` is its verdict.
    pub(crate) fn robots(&self, (started, ended): (Instant, Instant), allowed: bool) {
        let mut span = self
            .tracer
            .span_builder("courtesy.robots")
            .with_start_time(self.wall(started))
            .with_attributes([KeyValue::new("courtesy.robots.allowed", allowed)])
            .start_with_context(&self.tracer, &self.cx);
        span.end_with_timestamp(self.wall(ended));
    }

    /// An exchange with the origin begins now. (Boxed: the span is large, and the exchange's
    /// future holds it across its awaits.)
    pub(crate) fn upstream(&self, method: &str, host: &str) -> Box<UpstreamSpan> {
        let span = self
            .tracer
            .span_builder("courtesy.upstream")
            .with_kind(SpanKind::Client)
            .with_attributes([
                KeyValue::new("http.request.method", method.to_string()),
                KeyValue::new("server.address", host.to_string()),
            ])
            .start_with_context(&self.tracer, &self.cx);
        Box::new(UpstreamSpan {
            span,
            continued: self.continued,
        })
    }

    /// Ends the root span: the answer's `status`, whether courtesy made it (`local`), and what
    /// held the request (`waited`, and why).
    pub(crate) fn finish(
        &self,
        status: u16,
        local: bool,
        (waited, reason): (Duration, WaitReason),
    ) {
        let root = self.cx.span();
        root.set_attribute(KeyValue::new(
            "http.response.status_code",
            i64::from(status),
        ));
        root.set_attribute(KeyValue::new(
            "courtesy.outcome",
            if local { "local" } else { "upstream" },
        ));
        root.set_attribute(KeyValue::new("courtesy.wait.reason", reason.word()));
        root.set_attribute(KeyValue::new(
            "courtesy.wait.ms",
            waited.as_secs_f64() * 1000.0,
        ));
        if let Some(key) = crate::util::locks::lock(&self.budget).take() {
            root.set_attribute(KeyValue::new("courtesy.budget_key", key));
        }
        if status >= 500 {
            root.set_status(Status::error(if local {
                "answered locally"
            } else {
                "the origin answered 5xx"
            }));
        }
        root.end();
    }
}

/// The span of one exchange with the origin, open while it lasts.
#[derive(Debug)]
pub(crate) struct UpstreamSpan {
    span: Span,
    continued: bool,
}

impl UpstreamSpan {
    /// Puts this span's `traceparent` on the request to the origin, replacing the client's,
    /// when the client sent one (its `tracestate` goes on as it came); otherwise adds nothing.
    pub(crate) fn pass_on(&self, headers: &mut HeaderMap) {
        if !self.continued {
            return;
        }
        let sc = self.span.span_context();
        let value = format!(
            "00-{}-{}-{:02x}",
            sc.trace_id(),
            sc.span_id(),
            sc.trace_flags().to_u8()
        );
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(TRACEPARENT, value);
        }
    }

    /// The exchange ended: with the origin's `status`, or with the failure `error`.
    pub(crate) fn end(mut self, answer: Result<u16, &'static str>) {
        match answer {
            Ok(status) => {
                self.span.set_attribute(KeyValue::new(
                    "http.response.status_code",
                    i64::from(status),
                ));
                if status >= 500 {
                    self.span.set_status(Status::error("5xx"));
                }
            }
            Err(error) => {
                self.span.set_attribute(KeyValue::new("error.type", error));
                self.span.set_status(Status::error(error));
            }
        }
        self.span.end();
    }
}
