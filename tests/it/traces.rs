//! End-to-end: traces over OTLP/HTTP to a real receiver started by the test (`support::otlp`, on
//! the `opentelemetry-proto` types). The span tree (parent and child ids), the attributes, the
//! client's `traceparent` continued and passed to the origin only when the client sent one, the
//! shared store's round trip, and a receiver that is down costing the requests nothing.

use std::time::Duration;

use crate::support::*;
use http::{Request, Response};

/// The W3C example trace context a client sends.
const CLIENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_PARENT: &str = "00f067aa0ba902b7";

/// The spans of trace `trace_id`, once its root `courtesy.request` has arrived (within 15 s).
async fn trace_of(receiver: &OtlpReceiver, trace_id: &str) -> Vec<Received> {
    let arrived = eventually(Duration::from_secs(15), || {
        receiver
            .spans()
            .iter()
            .any(|s| s.trace_id == trace_id && s.name == "courtesy.request")
    })
    .await;
    let spans: Vec<Received> = receiver
        .spans()
        .into_iter()
        .filter(|s| s.trace_id == trace_id)
        .collect();
    assert!(arrived, "no root span of {trace_id} in {spans:?}");
    spans
}

fn one<'a>(spans: &'a [Received], name: &str) -> &'a Received {
    let named: Vec<&Received> = spans.iter().filter(|s| s.name == name).collect();
    assert_eq!(named.len(), 1, "one {name} in {spans:#?}");
    named[0]
}

#[tokio::test]
async fn each_request_is_a_span_tree_and_a_client_traceparent_is_continued_to_the_origin() {
    let receiver = OtlpReceiver::start().await;
    let origin = Origin::start("127.0.0.1", |req| async move {
        if req.uri().path() == "/robots.txt" {
            return Response::builder().status(404).body(full("")).unwrap();
        }
        Response::new(full("ok"))
    })
    .await;
    let courtesy = Courtesy::start(&format!(
        "[telemetry]\notlp_endpoint = \"{}\"\n\
         [defaults]\nrate = 2.0\nburst = 1\nadaptive = false\nobey_robots = true\n",
        receiver.endpoint()
    ))
    .await;
    let client = courtesy.client();

    // The first request carries the client's trace context; the second none, and it waits for
    // the rate.
    let traced = Request::get(origin.url("/traced"))
        .header(
            "traceparent",
            format!("00-{CLIENT_TRACE}-{CLIENT_PARENT}-01"),
        )
        .header("tracestate", "vendor=opaque")
        .body(empty())
        .unwrap();
    assert_eq!(client.send(traced).await.status, 200);
    let plain = client.get(&origin.url("/plain")).await;
    assert_eq!(plain.status, 200);

    let spans = trace_of(&receiver, CLIENT_TRACE).await;
    let root = one(&spans, "courtesy.request");
    assert_eq!(
        root.parent_id, CLIENT_PARENT,
        "the client's span is the root's parent"
    );
    assert_eq!(root.kind, 2, "server");
    assert_eq!(root.attr("http.request.method"), "GET");
    assert_eq!(root.attr("server.address"), "127.0.0.1");
    assert_eq!(root.attr("server.port"), origin.addr.port().to_string());
    assert_eq!(root.attr("courtesy.budget_key"), origin.addr.to_string());
    assert_eq!(root.attr("courtesy.job"), "anonymous");
    assert_eq!(root.attr("http.response.status_code"), "200");
    assert_eq!(root.attr("courtesy.outcome"), "upstream");
    for child in ["courtesy.robots", "courtesy.wait", "courtesy.upstream"] {
        let span = one(&spans, child);
        assert_eq!(span.parent_id, root.span_id, "{child} is the root's child");
        assert!(
            span.start_ns >= root.start_ns && span.end_ns <= root.end_ns,
            "{child} lies within the request: {span:?} in {root:?}"
        );
    }
    let upstream = one(&spans, "courtesy.upstream");
    assert_eq!(upstream.kind, 3, "client");
    assert_eq!(upstream.attr("http.response.status_code"), "200");
    assert_eq!(
        one(&spans, "courtesy.robots").attr("courtesy.robots.allowed"),
        "true"
    );
    // robots.txt, fetched first through the same budget, took the turn before it.
    assert_eq!(
        one(&spans, "courtesy.wait").attr("courtesy.wait.reason"),
        "rate"
    );

    // The origin got the trace context, naming courtesy's upstream span; the client's
    // tracestate went on as it came.
    let arrivals = origin.arrivals();
    let at_origin = arrivals.iter().find(|a| a.path == "/traced").unwrap();
    assert_eq!(
        at_origin.headers["traceparent"],
        format!("00-{CLIENT_TRACE}-{}-01", upstream.span_id).as_str()
    );
    assert_eq!(at_origin.headers["tracestate"], "vendor=opaque");

    // The request without one: a trace of its own, nothing passed to the origin.
    let untraced = arrivals.iter().find(|a| a.path == "/plain").unwrap();
    assert!(
        untraced.headers.get("traceparent").is_none(),
        "{untraced:?}"
    );
    let own_root = || {
        receiver
            .spans()
            .into_iter()
            .find(|s| s.name == "courtesy.request" && s.parent_id.is_empty())
    };
    eventually(Duration::from_secs(15), || own_root().is_some()).await;
    let plain_root = own_root().expect("a root of its own");
    assert_ne!(plain_root.trace_id, CLIENT_TRACE);
    let spans = trace_of(&receiver, &plain_root.trace_id).await;
    let wait = one(&spans, "courtesy.wait");
    assert_eq!(wait.parent_id, plain_root.span_id);
    assert_eq!(wait.attr("courtesy.wait.reason"), "rate");
    let waited_ms = (wait.end_ns - wait.start_ns) as f64 / 1e6;
    assert!((300.0..1500.0).contains(&waited_ms), "{waited_ms} ms");
    assert_eq!(plain_root.attr("courtesy.wait.reason"), "rate");
    assert!(receiver.service_names().iter().all(|n| n == "courtesy"));
    courtesy.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_local_answer_is_traced_with_its_outcome() {
    let receiver = OtlpReceiver::start().await;
    let origin = Origin::start("127.0.0.1", |_req| async {
        come_back_later(429, "30", "no")
    })
    .await;
    let courtesy = Courtesy::start(&format!(
        "[telemetry]\notlp_endpoint = \"{}\"\n\
         [defaults]\nrate = 100.0\non_cooldown = \"reject\"\nretry_idempotent = 0\n",
        receiver.endpoint()
    ))
    .await;
    let client = courtesy.client();
    assert_eq!(client.get(&origin.url("/a")).await.status, 429);
    let trace_id = "0af7651916cd43dd8448eb211c80319c";
    let refused = Request::get(origin.url("/b"))
        .header("traceparent", format!("00-{trace_id}-b7ad6b7169203331-01"))
        .body(empty())
        .unwrap();
    assert_eq!(client.send(refused).await.status, 429);
    let spans = trace_of(&receiver, trace_id).await;
    let root = one(&spans, "courtesy.request");
    assert_eq!(root.attr("courtesy.outcome"), "local");
    assert_eq!(root.attr("http.response.status_code"), "429");
    assert_eq!(root.attr("courtesy.wait.reason"), "cooldown");
    assert_eq!(one(&spans, "courtesy.wait").parent_id, root.span_id);
    assert!(
        spans.iter().all(|s| s.name != "courtesy.upstream"),
        "nothing went upstream: {spans:?}"
    );
    assert_eq!(origin.count(), 1);
}

#[tokio::test]
async fn the_shared_stores_round_trip_is_a_child_of_the_wait() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let receiver = OtlpReceiver::start().await;
    let origin = Origin::ok("127.0.0.1").await;
    let courtesy = Courtesy::start(&format!(
        "{}[telemetry]\notlp_endpoint = \"{}\"\n[defaults]\nrate = 100.0\n",
        redis.shared_section(""),
        receiver.endpoint()
    ))
    .await;
    let trace_id = "5bf92f3577b34da6a3ce929d0e0e4737";
    let req = Request::get(origin.url("/shared"))
        .header("traceparent", format!("00-{trace_id}-{CLIENT_PARENT}-01"))
        .body(empty())
        .unwrap();
    assert_eq!(courtesy.client().send(req).await.status, 200);
    let spans = trace_of(&receiver, trace_id).await;
    let wait = one(&spans, "courtesy.wait");
    let store = one(&spans, "courtesy.store");
    assert_eq!(store.parent_id, wait.span_id, "{spans:#?}");
    assert!(store.start_ns >= wait.start_ns && store.end_ns <= wait.end_ns + 1_000_000);
    assert_eq!(store.kind, 3);
}

#[tokio::test]
async fn a_receiver_that_is_down_costs_the_requests_nothing() {
    // A port nothing listens on.
    let dead = free_port();
    let origin = Origin::ok("127.0.0.1").await;
    let courtesy = Courtesy::start(&format!(
        "[telemetry]\notlp_endpoint = \"http://127.0.0.1:{dead}\"\ntimeout_seconds = 1\n\
         [defaults]\nrate = 1000.0\nburst = 100\nconcurrency = 16\n"
    ))
    .await;
    let client = courtesy.client();
    let started = tokio::time::Instant::now();
    let tasks = client.spawn_gets((0..200).map(|i| origin.url(&format!("/{i}"))));
    for task in tasks {
        let got = task.await.unwrap();
        assert_eq!(got.status, 200);
        assert!(got.header("server-timing").contains("courtesy-wait"));
    }
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?} for 200 requests",
        started.elapsed()
    );
    // It shuts down in time too (the last export is given up on).
    let stopped = tokio::time::timeout(Duration::from_secs(20), courtesy.shutdown()).await;
    assert!(matches!(stopped, Ok(Ok(()))), "{stopped:?}");
}
