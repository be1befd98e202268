//! An OTLP/HTTP trace receiver on `127.0.0.1:0`, built on the `opentelemetry-proto` types: it
//! decodes every `POST /v1/traces` (protobuf `ExportTraceServiceRequest`) and keeps its spans, so
//! that a test can look at the span tree courtesy sent. It answers 200 with an empty
//! `ExportTraceServiceResponse`.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// One span as received, with the ids in hex.
#[derive(Debug, Clone)]
pub struct Received {
    /// The span's name.
    pub name: String,
    /// Its trace id (32 hex digits).
    pub trace_id: String,
    /// Its id (16 hex digits).
    pub span_id: String,
    /// Its parent's id ("" for a root).
    pub parent_id: String,
    /// Its kind (1 internal, 2 server, 3 client).
    pub kind: i32,
    /// Start and end, nanoseconds since the epoch.
    pub start_ns: u64,
    /// End.
    pub end_ns: u64,
    /// Its attributes, each as text.
    pub attributes: Vec<(String, String)>,
}

impl Received {
    /// The attribute `key` as text ("" when missing).
    pub fn attr(&self, key: &str) -> String {
        self.attributes
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    }

    fn of(span: &Span) -> Received {
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        Received {
            name: span.name.clone(),
            trace_id: hex(&span.trace_id),
            span_id: hex(&span.span_id),
            parent_id: hex(&span.parent_span_id),
            kind: span.kind,
            start_ns: span.start_time_unix_nano,
            end_ns: span.end_time_unix_nano,
            attributes: span
                .attributes
                .iter()
                .map(|kv| {
                    let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                        Some(Value::StringValue(s)) => s.clone(),
                        Some(Value::IntValue(i)) => i.to_string(),
                        Some(Value::DoubleValue(d)) => d.to_string(),
                        Some(Value::BoolValue(b)) => b.to_string(),
                        other => format!("{other:?}"),
                    };
                    (kv.key.clone(), value)
                })
                .collect(),
        }
    }
}

/// The receiver: where it listens, the spans it got, and how many exports.
pub struct OtlpReceiver {
    /// Its address.
    pub addr: SocketAddr,
    spans: Arc<Mutex<Vec<Received>>>,
    service_names: Arc<Mutex<Vec<String>>>,
    task: JoinHandle<()>,
}

impl OtlpReceiver {
    /// Starts one on `127.0.0.1:0`.
    pub async fn start() -> OtlpReceiver {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let spans = Arc::new(Mutex::new(Vec::new()));
        let service_names = Arc::new(Mutex::new(Vec::new()));
        let (kept, names) = (spans.clone(), service_names.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (kept, names) = (kept.clone(), names.clone());
                tokio::spawn(async move {
                    let service = service_fn(move |req: Request<Incoming>| {
                        let (kept, names) = (kept.clone(), names.clone());
                        async move { Ok::<_, Infallible>(receive(req, &kept, &names).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        OtlpReceiver {
            addr,
            spans,
            service_names,
            task,
        }
    }

    /// `http://` + its address: the `otlp_endpoint`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Received> {
        self.spans.lock().unwrap().clone()
    }

    /// The `service.name` of every resource received.
    pub fn service_names(&self) -> Vec<String> {
        self.service_names.lock().unwrap().clone()
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn receive(
    req: Request<Incoming>,
    kept: &Mutex<Vec<Received>>,
    names: &Mutex<Vec<String>>,
) -> Response<Full<Bytes>> {
    let wrong = |status: StatusCode| Response::builder().status(status).body(Full::default());
    if req.uri().path() != "/v1/traces"
        || req.headers().get("content-type").map(|v| v.as_bytes())
            != Some(b"application/x-protobuf".as_slice())
    {
        return wrong(StatusCode::NOT_FOUND).unwrap();
    }
    let Ok(body) = req.into_body().collect().await else {
        return wrong(StatusCode::BAD_REQUEST).unwrap();
    };
    let Ok(export) = ExportTraceServiceRequest::decode(body.to_bytes()) else {
        return wrong(StatusCode::BAD_REQUEST).unwrap();
    };
    for resource_spans in &export.resource_spans {
        if let Some(resource) = &resource_spans.resource {
            for kv in &resource.attributes {
                if let (true, Some(Value::StringValue(s))) = (
                    kv.key == "service.name",
                    kv.value.as_ref().and_then(|v| v.value.as_ref()),
                ) {
                    names.lock().unwrap().push(s.clone());
                }
            }
        }
        for scope in &resource_spans.scope_spans {
            kept.lock()
                .unwrap()
                .extend(scope.spans.iter().map(Received::of));
        }
    }
    Response::builder()
        .header("content-type", "application/x-protobuf")
        .body(Full::default())
        .unwrap()
}
