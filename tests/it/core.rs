//! End-to-end behaviour of the core proxy over real loopback sockets: one shared budget per host,
//! FIFO, caps, cancellation, refusals with Proxy-Status, shutdown, loops, headers, streaming.
//! Timing asserts use tolerances: these run on a busy 2-core machine.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::support::*;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use tokio::time::Instant;

fn pacing(rate: f64, burst: u32, concurrency: u32) -> String {
    format!("[defaults]\nrate = {rate}\nburst = {burst}\nconcurrency = {concurrency}\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_clients_on_four_connections_share_one_budget() {
    let origin = Origin::ok("127.0.0.1").await;
    let courtesy = Courtesy::start(&pacing(2.0, 1, 4)).await;
    let end = Instant::now() + Duration::from_secs(5);
    let answered = Arc::new(AtomicUsize::new(0));
    let mut clients = Vec::new();
    for _ in 0..4 {
        let client = courtesy.client();
        let url = origin.url("/page");
        let answered = answered.clone();
        clients.push(tokio::spawn(async move {
            let mut conn = client.connect().await;
            // Bounded: at most 50 requests per client, and none started after the 5 s.
            for _ in 0..50 {
                if Instant::now() >= end {
                    break;
                }
                let got = conn.get(&url).await;
                assert_eq!(got.status, StatusCode::OK);
                answered.fetch_add(1, Ordering::SeqCst);
            }
        }));
    }
    for c in clients {
        c.await.unwrap();
    }
    let in_window = origin.count_within(Duration::from_secs(5));
    assert!(
        in_window <= 2 * 5 + 1,
        "origin saw {in_window} requests in 5 s"
    );
    assert!(
        in_window >= 8,
        "origin saw only {in_window} requests in 5 s"
    );
    assert_eq!(answered.load(Ordering::SeqCst), origin.count());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_host_does_not_hold_up_a_fast_one() {
    let slow = Origin::ok("127.0.0.2").await;
    let fast = Origin::ok("127.0.0.3").await;
    let config = format!(
        "{}[[host]]\nmatch = \"127.0.0.2\"\nrate = 0.5\n[[host]]\nmatch = \"127.0.0.3\"\nrate = 50\n",
        pacing(1.0, 1, 1)
    );
    let courtesy = Courtesy::start(&config).await;
    let queued = courtesy
        .client()
        .spawn_gets((0..10).map(|i| slow.url(&format!("/slow/{i}"))));
    assert!(eventually(Duration::from_secs(2), || slow.count() == 1).await);
    let start = Instant::now();
    let mut conn = courtesy.client().connect().await;
    for i in 0..20 {
        let got = conn.get(&fast.url(&format!("/fast/{i}"))).await;
        assert_eq!(got.status, StatusCode::OK);
    }
    let took = start.elapsed();
    // 20 requests at 50/s with burst 1 need 19 × 20 ms of pacing; allow slack for a busy machine.
    assert!(took < Duration::from_secs(3), "fast host took {took:?}");
    assert!(slow.count() <= 3, "slow host saw {} requests", slow.count());
    assert_eq!(fast.count(), 20);
    for q in queued {
        q.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_to_one_host_leave_in_arrival_order() {
    let origin = Origin::ok("127.0.0.1").await;
    let courtesy = Courtesy::start(&pacing(10.0, 1, 1)).await;
    let client = courtesy.client();
    let mut tasks = Vec::new();
    for i in 0..8 {
        tasks.push(client.spawn_get(origin.url(&format!("/{i}"))));
        // Each request reaches courtesy before the next is sent.
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
    assert_each_ok(tasks).await;
    let expected: Vec<String> = (0..8).map(|i| format!("/{i}")).collect();
    assert_eq!(origin.paths(), expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_caps_requests_in_flight_at_the_origin() {
    let origin = Origin::slow("127.0.0.1", Duration::from_millis(200), "slow").await;
    let courtesy = Courtesy::start(&pacing(1000.0, 100, 2)).await;
    let tasks = courtesy.client().spawn_gets(vec![origin.url("/"); 8]);
    assert_each_ok(tasks).await;
    assert_eq!(origin.count(), 8);
    assert_eq!(origin.max_in_flight(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_global_cap_holds_across_hosts() {
    let hold = Duration::from_millis(300);
    let origins = [
        Origin::slow("127.0.0.2", hold, "x").await,
        Origin::slow("127.0.0.3", hold, "x").await,
        Origin::slow("127.0.0.4", hold, "x").await,
    ];
    let config = format!("[proxy]\nmax_in_flight = 2\n{}", pacing(1000.0, 100, 100));
    let courtesy = Courtesy::start(&config).await;
    // Three requests for each origin in turn.
    let urls = origins.iter().flat_map(|origin| vec![origin.url("/"); 3]);
    let tasks = courtesy.client().spawn_gets(urls);
    assert_each_ok(tasks).await;
    // Each origin saw its 3 requests; arrivals overlap at most 2 at a time across all origins.
    let mut spans: Vec<(Instant, Instant)> = Vec::new();
    for o in &origins {
        assert_eq!(o.count(), 3);
        for a in o.arrivals() {
            spans.push((a.at, a.at + Duration::from_millis(300)));
        }
    }
    for (start, _) in &spans {
        // A request in flight at `start` (with 20 ms of slack for scheduling) counts.
        let overlapping = spans
            .iter()
            .filter(|(s, e)| *s <= *start && *e > *start + Duration::from_millis(20))
            .count();
        assert!(overlapping <= 2, "{overlapping} requests in flight at once");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_give_up_while_queued_never_reach_the_origin() {
    let origin = Origin::ok("127.0.0.1").await;
    let courtesy = Courtesy::start(&pacing(0.5, 1, 1)).await;
    assert_eq!(
        courtesy.client().get(&origin.url("/first")).await.status,
        200
    );
    let quitters = courtesy
        .client()
        .spawn_gets((0..10).map(|i| origin.url(&format!("/quitter/{i}"))));
    tokio::time::sleep(Duration::from_millis(300)).await;
    for q in &quitters {
        q.abort(); // drops the connection: the client went away
    }
    // Long past the turns those ten would have had.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(origin.paths(), vec!["/first".to_string()]);
    // They spent no tokens: the next request goes at once.
    let start = Instant::now();
    assert_eq!(
        courtesy.client().get(&origin.url("/next")).await.status,
        200
    );
    assert!(
        start.elapsed() < Duration::from_millis(500),
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_answers_503_at_once_with_retry_after_and_proxy_status() {
    let origin = Origin::ok("127.0.0.1").await;
    let config = format!("{}max_queue = 2\n", pacing(0.2, 1, 1));
    let courtesy = Courtesy::start(&config).await;
    assert_eq!(courtesy.client().get(&origin.url("/")).await.status, 200);
    let waiting = courtesy.client().spawn_gets(vec![origin.url("/"); 2]);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let start = Instant::now();
    let got = courtesy.client().get(&origin.url("/")).await;
    assert!(start.elapsed() < Duration::from_millis(500));
    assert_eq!(got.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(got.header("retry-after").parse::<u64>().unwrap() >= 1);
    let status = got.header("proxy-status");
    assert!(
        status.starts_with("courtesy; error=connection_limit_reached"),
        "{status}"
    );
    assert!(status.contains("queue"), "{status}");
    for w in waiting {
        w.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_waits_past_max_wait_gets_503() {
    let origin = Origin::ok("127.0.0.1").await;
    let config = format!("{}max_wait_seconds = 1\n", pacing(0.1, 1, 1));
    let courtesy = Courtesy::start(&config).await;
    assert_eq!(courtesy.client().get(&origin.url("/")).await.status, 200);
    let start = Instant::now();
    let got = courtesy.client().get(&origin.url("/late")).await;
    let waited = start.elapsed();
    assert_eq!(got.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
    assert!(got.header("proxy-status").contains("max_wait_seconds"));
    assert_eq!(origin.count(), 1, "the late request never left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_finishes_in_flight_and_refuses_queued() {
    let origin = Origin::slow("127.0.0.1", Duration::from_millis(500), "done").await;
    let courtesy = Courtesy::start(&pacing(0.2, 1, 1)).await;
    let in_flight = courtesy.client().spawn_get(origin.url("/in-flight"));
    assert!(eventually(Duration::from_secs(2), || origin.count() == 1).await);
    let queued = courtesy.client().spawn_get(origin.url("/queued"));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let stopped = courtesy.begin_shutdown();
    let queued = queued.await.unwrap();
    assert_eq!(queued.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(queued.header("proxy-status").contains("shutting down"));
    let finished = in_flight.await.unwrap();
    assert_eq!(finished.status, StatusCode::OK);
    assert_eq!(&finished.body[..], b"done");
    assert!(stopped.await.unwrap().is_ok());
    assert_eq!(origin.count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_aimed_at_courtesy_itself_are_refused() {
    let courtesy = Courtesy::start(&pacing(100.0, 10, 10)).await;
    for url in [
        format!("http://{}/", courtesy.addr),
        format!("http://localhost:{}/", courtesy.addr.port()),
        format!("http://{}/healthz", courtesy.admin),
    ] {
        let got = courtesy.client().get(&url).await;
        assert_eq!(got.status, StatusCode::FORBIDDEN, "{url}");
        assert!(
            got.header("proxy-status")
                .contains("error=proxy_loop_detected"),
            "{url}: {}",
            got.header("proxy-status")
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn origin_form_requests_get_400() {
    let courtesy = Courtesy::start("").await;
    let got = courtesy.client().get("/not-absolute").await;
    assert_eq!(got.status, StatusCode::BAD_REQUEST);
    assert!(got
        .header("proxy-status")
        .contains("error=http_request_error"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_outside_allow_clients_are_closed_at_accept() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let origin = Origin::ok("127.0.0.1").await;
    let courtesy = Courtesy::start("[proxy]\nallow_clients = [\"10.0.0.0/8\"]\n").await;
    for listener in [courtesy.addr, courtesy.admin] {
        let mut stream = tokio::net::TcpStream::connect(listener).await.unwrap();
        let _ = stream
            .write_all(format!("GET {} HTTP/1.1\r\nHost: x\r\n\r\n", origin.url("/")).as_bytes())
            .await;
        let mut out = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut out)).await;
        assert!(read.is_ok(), "closed at once");
        assert!(
            out.is_empty(),
            "no answer: {}",
            String::from_utf8_lossy(&out)
        );
    }
    assert_eq!(origin.count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listening_beyond_loopback_without_allow_clients_refuses_to_start() {
    let config = courtesy::config::Config::parse("", "test.toml").unwrap();
    let proxy = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let admin = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let result = courtesy::run(courtesy::Listeners { proxy, admin }, config, async {}).await;
    let err = result.unwrap_err().to_string();
    assert!(err.contains("allow_clients"), "{err}");

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_courtesy"))
        .args([
            "run",
            "--listen",
            "0.0.0.0:0",
            "--admin-listen",
            "127.0.0.1:0",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("allow_clients"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hop_by_hop_headers_are_removed_both_ways_and_via_is_added() {
    let origin = Origin::start("127.0.0.1", |_req| async {
        Response::builder()
            .header("connection", "x-origin-hop")
            .header("x-origin-hop", "1")
            .header("keep-alive", "timeout=5")
            .header("x-end-to-end", "kept")
            .body(full("hello"))
            .unwrap()
    })
    .await;
    let courtesy = Courtesy::start(&pacing(100.0, 10, 10)).await;
    let req = Request::get(origin.url("/h"))
        .header("connection", "x-client-hop")
        .header("x-client-hop", "1")
        .header("proxy-authorization", "Basic c2VjcmV0")
        .header("proxy-connection", "keep-alive")
        .header("te", "trailers")
        .header("x-custom", "kept")
        .body(empty())
        .unwrap();
    let got = courtesy.client().send(req).await;
    assert_eq!(got.status, StatusCode::OK);
    assert!(got.headers.get("x-origin-hop").is_none());
    assert!(got.headers.get("keep-alive").is_none());
    assert_eq!(got.header("x-end-to-end"), "kept");
    assert!(got.header("via").contains("courtesy"), "{:?}", got.headers);
    let seen = &origin.arrivals()[0].headers;
    for hop in [
        "x-client-hop",
        "proxy-authorization",
        "proxy-connection",
        "te",
    ] {
        assert!(seen.get(hop).is_none(), "{hop} was forwarded");
    }
    assert_eq!(seen["x-custom"], "kept");
    assert!(seen["via"].to_str().unwrap().starts_with("1.1 courtesy"));
    assert_eq!(seen["host"], origin.addr.to_string().as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_serves_many_requests_on_one_connection() {
    let origin = Origin::ok("127.0.0.1").await;
    let courtesy = Courtesy::start(&pacing(1000.0, 100, 10)).await;
    let mut conn = courtesy.client().connect().await;
    for i in 0..50 {
        let got = conn.get(&origin.url(&format!("/{i}"))).await;
        assert_eq!(got.status, StatusCode::OK);
        assert_eq!(&got.body[..], b"ok");
    }
    assert_eq!(origin.count(), 50);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_failures_become_502_or_504_with_proxy_status() {
    let config = "[proxy]\nresponse_timeout_seconds = 0.5\n[defaults]\nrate = 100\nburst = 10\nconcurrency = 10\n";
    let courtesy = Courtesy::start(config).await;
    let client = courtesy.client();

    // Nothing listens on this port.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let closed_addr = closed.local_addr().unwrap();
    drop(closed);
    let got = client.get(&format!("http://{closed_addr}/")).await;
    assert_eq!(got.status, StatusCode::BAD_GATEWAY);
    assert!(
        got.header("proxy-status")
            .contains("error=connection_refused"),
        "{}",
        got.header("proxy-status")
    );

    let got = client.get("http://no-such-host.invalid/").await;
    assert_eq!(got.status, StatusCode::BAD_GATEWAY);
    assert!(
        got.header("proxy-status").contains("error=dns_error"),
        "{}",
        got.header("proxy-status")
    );

    let slow = Origin::slow("127.0.0.1", Duration::from_secs(3), "late").await;
    let start = Instant::now();
    let got = client.get(&slow.url("/")).await;
    assert_eq!(got.status, StatusCode::GATEWAY_TIMEOUT);
    assert!(got
        .header("proxy-status")
        .contains("error=http_response_timeout"));
    assert!(start.elapsed() < Duration::from_secs(2));

    // An origin that accepts and hangs up without answering.
    let rude = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let rude_addr = rude.local_addr().unwrap();
    let rude_task = tokio::spawn(async move {
        for _ in 0..4 {
            if let Ok((stream, _)) = rude.accept().await {
                drop(stream);
            }
        }
    });
    let got = client.get(&format!("http://{rude_addr}/")).await;
    assert_eq!(got.status, StatusCode::BAD_GATEWAY);
    assert!(
        got.header("proxy-status")
            .contains("error=connection_terminated"),
        "{}",
        got.header("proxy-status")
    );
    rude_task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_tunnels_are_paced_and_restricted_to_connect_ports() {
    // Blind tunnels (tunnel mode) are what connect_ports bounds.
    let courtesy = Courtesy::start(&format!("{}https = \"tunnel\"\n", pacing(100.0, 10, 10))).await;
    let (_stream, head) = open_tunnel(courtesy.addr, "127.0.0.1:22").await;
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("error=http_request_denied"),
        "{head}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_megabytes_each_way_stream_through_without_buffering() {
    const SIZE: usize = 50 * 1024 * 1024;
    const CHUNK: usize = 64 * 1024;
    // The origin counts the upload as it streams in and answers with a 50 MB streamed download.
    let origin = Origin::start(
        "127.0.0.1",
        |req: Request<hyper::body::Incoming>| async move {
            let mut body = req.into_body();
            let mut received = 0usize;
            while let Some(frame) = body.frame().await {
                if let Ok(data) = frame.unwrap().into_data() {
                    received += data.len();
                }
            }
            let chunks = futures_util::stream::iter(
                (0..SIZE / CHUNK)
                    .map(|_| Ok(hyper::body::Frame::data(Bytes::from(vec![7u8; CHUNK])))),
            );
            let body = http_body_util::StreamBody::new(chunks).boxed();
            Response::builder()
                .header("x-received", received.to_string())
                .body(body)
                .unwrap()
        },
    )
    .await;

    // Run the real binary so its memory can be measured on its own.
    let dir = temp_dir("mem");
    let ports = Ports::free();
    let config = dir.join("c.toml");
    ports.write_config(&config, &dir, "[defaults]\nrate = 100\nburst = 10\n");
    let mut child = spawn_courtesy_process(&config);
    let pid = child.id().unwrap();
    let client = ProxyClient {
        proxy: ports.proxy_addr(),
    };
    assert!(listening(client.proxy).await);
    // Warm up, then take the baseline.
    assert_eq!(client.get(&origin.url("/warm")).await.status, 200);
    let before = vm_hwm_kib(pid);

    let upload = futures_util::stream::iter((0..SIZE / CHUNK).map(|_| {
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>(hyper::body::Frame::data(Bytes::from(
            vec![1u8; CHUNK],
        )))
    }));
    let req = Request::post(origin.url("/big"))
        .body(http_body_util::StreamBody::new(upload).boxed())
        .unwrap();
    let mut conn = client.connect().await;
    let response = conn.send_streaming(req).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-received"], SIZE.to_string().as_str());
    let mut body = response.into_body();
    let mut downloaded = 0usize;
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.unwrap().into_data() {
            downloaded += data.len();
        }
    }
    assert_eq!(downloaded, SIZE);
    let after = vm_hwm_kib(pid);
    let _ = child.kill().await;
    let _ = std::fs::remove_dir_all(&dir);
    let grew_mib = (after.saturating_sub(before)) as f64 / 1024.0;
    assert!(before > 0, "could not read courtesy's memory");
    assert!(
        grew_mib < 16.0,
        "courtesy's peak memory grew by {grew_mib:.1} MiB for 100 MB streamed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_inside_a_connect_is_paced_request_by_request() {
    let origin = Origin::ok("127.0.0.1").await;
    let config = format!(
        "[proxy]\nconnect_ports = [{}]\n{}",
        origin.addr.port(),
        pacing(2.0, 1, 10)
    );
    let courtesy = Courtesy::start(&config).await;
    // One tunnel, three requests inside it (Node's undici sends http:// URLs this way).
    let target = origin.addr;
    let (stream, head) = open_tunnel(courtesy.addr, target).await;
    assert!(head.starts_with("HTTP/1.1 200"));
    let (_, mut conn) = {
        let (sender, conn) = hyper::client::conn::http1::handshake::<_, TestBody>(
            hyper_util::rt::TokioIo::new(stream),
        )
        .await
        .unwrap();
        (tokio::spawn(conn), sender)
    };
    for i in 0..3 {
        let req = Request::get(format!("/inside/{i}"))
            .header("host", target.to_string())
            .body(empty())
            .unwrap();
        conn.ready().await.unwrap();
        let response = match conn.send_request(req).await {
            Ok(r) => r,
            Err(e) => panic!("request {i} inside the tunnel failed: {e:?}"),
        };
        assert_eq!(response.status(), StatusCode::OK);
        assert!(response.headers()["via"]
            .to_str()
            .unwrap()
            .contains("courtesy"));
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"ok");
    }
    let at = origin.arrival_times();
    assert_eq!(at.len(), 3);
    // Rate 2/s, burst 1: the requests inside left at about 0, 0.5 and 1.0 s.
    let span = at[2].duration_since(at[0]);
    assert!(
        span >= Duration::from_millis(950) && span < Duration::from_secs(3),
        "{span:?}"
    );
}

/// An idle upstream connection is closed by courtesy within the pool's idle timeout
/// (min(90 s, idle_host_seconds)), not kept until the host is asked again: a crawl over many
/// hosts must not keep a socket per host it ever visited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_upstream_connections_are_closed() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    // One keep-alive answer, then wait for courtesy to hang up (bounded by a timeout).
    let origin = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut buf = vec![0u8; 4096];
        let mut got = Vec::new();
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = stream.read(&mut buf).await.unwrap();
            assert!(n > 0, "courtesy hung up before sending the request");
            got.extend_from_slice(&buf[..n]);
        }
        stream
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            .await
            .unwrap();
        let answered = Instant::now();
        let closed = tokio::time::timeout(Duration::from_secs(20), stream.read(&mut buf)).await;
        (closed.map(|r| r.unwrap_or(0)), answered.elapsed())
    });
    let courtesy = Courtesy::start(&format!(
        "[proxy]\nidle_host_seconds = 1\n{}",
        pacing(100.0, 10, 10)
    ))
    .await;
    let got = courtesy.client().get(&format!("http://{addr}/")).await;
    assert_eq!(got.status, StatusCode::OK);
    let (closed, after) = origin.await.unwrap();
    assert_eq!(
        closed,
        Ok(0),
        "the idle connection was still open after 20 s"
    );
    // Idle timeout 1 s, checked every second: closed after about 1–2 s (generous bound).
    assert!(
        after < Duration::from_secs(10),
        "closed only after {after:?}"
    );
}

/// Whether `line` is the line per response, as a running courtesy writes it at its default level
/// to a file or a pipe: timestamp, level, the request, the target, the message and its fields.
fn is_access_line(line: &str, origin_port: u16) -> bool {
    let Some((stamp, rest)) = line.split_once(' ') else {
        return false;
    };
    // 2026-12-07T09:30:00.123456Z
    let stamp_ok = stamp.len() == 27 && stamp.ends_with('Z') && stamp.as_bytes()[10] == b'T';
    let Some(rest) = rest.strip_prefix(" INFO request{client=127.0.0.1:") else {
        return false;
    };
    let Some((client_port, rest)) = rest.split_once(" job=\"") else {
        return false;
    };
    let Some((_job, rest)) = rest.split_once("\" method=GET host=") else {
        return false;
    };
    let head = format!(
        "127.0.0.1:{origin_port}}}: courtesy::proxy::send::judge: upstream response status=200 latency_ms="
    );
    let Some(rest) = rest.strip_prefix(&head) else {
        return false;
    };
    let numbers: Vec<&str> = rest.split([' ', '=']).collect();
    stamp_ok
        && client_port.parse::<u16>().is_ok()
        && numbers.len() == 7
        && numbers[0].parse::<u64>().is_ok()
        && numbers[1] == "wait_ms"
        && numbers[2].parse::<u64>().is_ok()
        && numbers[3] == "rate"
        && numbers[4].parse::<f64>().is_ok()
        && numbers[5] == "attempt"
        && numbers[6] == "0"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_courtesy_writes_a_line_per_response_that_names_the_request() {
    let origin = Origin::ok("127.0.0.1").await;
    let dir = temp_dir("access-line");
    let ports = Ports::free();
    let config = ports.config_in(&dir, &pacing(1000.0, 100, 100));
    let child = spawn_courtesy_logging(&config, None);
    assert!(listening(ports.proxy_addr()).await);
    let client = ProxyClient {
        proxy: ports.proxy_addr(),
    };
    let mut conn = client.connect().await;
    for i in 0..3 {
        let got = conn.get(&origin.url(&format!("/page/{i}"))).await;
        assert_eq!(got.status, StatusCode::OK);
    }
    let logged = stop_for_log(child).await;
    let port = origin.addr.port();
    let lines: Vec<&str> = logged
        .lines()
        .filter(|l| l.contains("upstream response"))
        .collect();
    assert_eq!(lines.len(), 3, "{logged}");
    for line in lines {
        assert!(is_access_line(line, port), "{line}");
    }
}
