//! End-to-end: an origin that stops sending holds nothing for long. `read_timeout_seconds` is the
//! longest the origin may stay silent between two reads (like nginx's proxy_read_timeout): no
//! head within it is a 504 with Proxy-Status; a body silent for it is cut (the client sees a
//! truncated response), the host's slot and the global one come back at once, and the host's
//! pacing counts a failure. A body that keeps dripping bytes lives on.

use std::time::Duration;

use crate::support::*;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt as _;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// An origin on `ip` that sends its head and `first` at once, then nothing more until the test
/// ends (its body stream stays open).
async fn silent_after_head(ip: &str, first: &'static str) -> Origin {
    // Senders are kept here so that every body stays open, silent, for the test's life.
    let (keep_tx, mut keep_rx) = mpsc::unbounded_channel::<mpsc::Sender<()>>();
    tokio::spawn(async move {
        let mut kept = Vec::new();
        while let Some(tx) = keep_rx.recv().await {
            kept.push(tx);
        }
    });
    Origin::start(ip, move |_req: Request<hyper::body::Incoming>| {
        let keep_tx = keep_tx.clone();
        async move {
            let (tx, rx) = mpsc::channel::<()>(1);
            let _ = keep_tx.send(tx);
            let first =
                futures_util::stream::iter([Ok::<_, Box<dyn std::error::Error + Send + Sync>>(
                    hyper::body::Frame::data(Bytes::from_static(first.as_bytes())),
                )]);
            // Never yields: the sender is kept alive above.
            let rest = futures_util::stream::unfold(rx, |mut rx| async move {
                rx.recv()
                    .await
                    .map(|()| (Ok(hyper::body::Frame::data(Bytes::from_static(b""))), rx))
            });
            let body = http_body_util::StreamBody::new(futures_util::StreamExt::chain(first, rest));
            Response::builder()
                .header("content-type", "text/plain")
                .body(body.boxed())
                .unwrap()
        }
    })
    .await
}

/// Reads `response`'s body to its end: the bytes, and whether it ended in an error.
async fn read_body(response: Response<hyper::body::Incoming>) -> (Vec<u8>, bool) {
    let mut body = response.into_body();
    let mut got = Vec::new();
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(frame) => {
                if let Ok(data) = frame.into_data() {
                    got.extend_from_slice(&data);
                }
            }
            Err(_) => return (got, true),
        }
    }
    (got, false)
}

fn config(read_timeout: f64, rest: &str) -> String {
    format!(
        "[defaults]\nrate = 100\nburst = 100\nconcurrency = 8\nobey_robots = false\n\
         read_timeout_seconds = {read_timeout}\n{rest}"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_body_is_cut_at_read_timeout_and_the_host_counts_a_failure() {
    let origin = silent_after_head("127.0.0.1", "first bytes").await;
    let courtesy = Courtesy::start(&config(1.0, "")).await;
    let mut conn = courtesy.client().connect().await;
    let started = Instant::now();
    let response = conn
        .send_streaming(Request::get(origin.url("/silent")).body(empty()).unwrap())
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    let (got, failed) = tokio::time::timeout(Duration::from_secs(20), read_body(response))
        .await
        .expect("the silent body is cut, not held");
    let took = started.elapsed();
    assert_eq!(got, b"first bytes");
    assert!(
        failed,
        "the client sees a truncated body, not a complete one"
    );
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(6),
        "cut after {took:?}, read_timeout_seconds = 1"
    );
    let (status, page) = courtesy.host_page(&origin.addr.to_string()).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let host: serde_json::Value = serde_json::from_str(&page).unwrap();
    assert_eq!(host["counters"]["failed"], 1, "{page}");
    assert_eq!(host["in_flight"], 0, "the host's slot came back: {page}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_head_within_read_timeout_is_a_504_with_proxy_status() {
    let origin = Origin::slow("127.0.0.1", Duration::from_secs(30), "late").await;
    let courtesy = Courtesy::start(&config(1.0, "")).await;
    let started = Instant::now();
    let got = courtesy.client().get(&origin.url("/mute")).await;
    let took = started.elapsed();
    assert_eq!(got.status, StatusCode::GATEWAY_TIMEOUT);
    assert!(
        got.header("proxy-status")
            .starts_with("courtesy; error=http_response_timeout"),
        "{}",
        got.header("proxy-status")
    );
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(6),
        "504 after {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dripping_body_lives_past_read_timeout() {
    // A byte every 0.3 s for 3 s: never silent for the 1 s timeout, though it lasts three.
    let origin = Origin::start("127.0.0.1", |_req: Request<hyper::body::Incoming>| async {
        let drip = futures_util::stream::unfold(0u8, |n| async move {
            if n == 10 {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
            Some((
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(hyper::body::Frame::data(
                    Bytes::from(vec![b'a' + n]),
                )),
                n + 1,
            ))
        });
        Response::new(http_body_util::StreamBody::new(drip).boxed())
    })
    .await;
    let courtesy = Courtesy::start(&config(1.0, "")).await;
    let mut conn = courtesy.client().connect().await;
    let started = Instant::now();
    let response = conn
        .send_streaming(Request::get(origin.url("/drip")).body(empty()).unwrap())
        .await;
    let (got, failed) = read_body(response).await;
    assert!(!failed, "a dripping body is not cut");
    assert_eq!(got, b"abcdefghij");
    assert!(started.elapsed() >= Duration::from_millis(2700));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_silent_bodies_holding_max_in_flight_are_freed_for_another_host() {
    let silent = silent_after_head("127.0.0.2", "x").await;
    let other = Origin::ok("127.0.0.3").await;
    let courtesy =
        Courtesy::start(&format!("[proxy]\nmax_in_flight = 4\n{}", config(1.5, ""))).await;
    let client = courtesy.client();
    let mut held = Vec::new();
    for i in 0..4 {
        let mut conn = client.connect().await;
        let url = silent.url(&format!("/{i}"));
        held.push(tokio::spawn(async move {
            let response = conn
                .send_streaming(Request::get(url).body(empty()).unwrap())
                .await;
            read_body(response).await
        }));
    }
    // The four heads are back and their bodies silent: every global slot is held.
    assert!(eventually(Duration::from_secs(5), || silent.count() == 4).await);
    let started = Instant::now();
    let got = client.get(&other.url("/served")).await;
    let waited = started.elapsed();
    assert_eq!(got.status, StatusCode::OK, "{}", got.header("proxy-status"));
    assert!(
        waited < Duration::from_secs(6),
        "the other host waited {waited:?}; read_timeout_seconds = 1.5"
    );
    for h in held {
        let (got, failed) = tokio::time::timeout(Duration::from_secs(10), h)
            .await
            .expect("each silent body is cut")
            .unwrap();
        assert_eq!(got, b"x");
        assert!(failed);
    }
}
