//! End-to-end hardening: answers that keep client connections usable, and malformed requests
//! blamed on the client.

use std::time::Duration;

use crate::support::*;
use http::{Request, Response};

/// courtesy in reject mode in front of an origin that answers 429 with a long Retry-After, with the
/// host already cooling down.
async fn cooling_host() -> (Origin, Courtesy) {
    let origin = Origin::start("127.0.0.1", |_req| async {
        come_back_later(429, "60", "slow down")
    })
    .await;
    let courtesy =
        Courtesy::start("[defaults]\nrate = 50\nburst = 5\non_cooldown = \"reject\"\n").await;
    let first = courtesy.client().get(&origin.url("/start")).await;
    assert_eq!(first.status, 429);
    (origin, courtesy)
}

fn post(url: &str, size: usize) -> Request<TestBody> {
    Request::post(url)
        .header("content-type", "application/octet-stream")
        .body(full(vec![b'x'; size]))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_answer_to_a_small_unread_body_keeps_the_connection_usable() {
    let (origin, courtesy) = cooling_host().await;
    for size in [32 * 1024, 64 * 1024] {
        let mut conn = courtesy.client().connect().await;
        let refused = conn.send(post(&origin.url("/upload"), size)).await;
        assert_eq!(refused.status, 429, "{size} bytes");
        assert!(refused.header("proxy-status").contains("cooling down"));
        assert_ne!(refused.header("connection"), "close", "{size} bytes");
        // The same connection carries the client's next request.
        let next = tokio::time::timeout(Duration::from_secs(5), conn.get(&origin.url("/next")))
            .await
            .expect("an answer on the same connection");
        assert_eq!(next.status, 429, "{size} bytes");
    }
    assert_eq!(origin.count(), 1, "nothing left for the cooling host");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_answer_to_a_large_unread_body_says_connection_close() {
    let (origin, courtesy) = cooling_host().await;
    let mut conn = courtesy.client().connect().await;
    let refused = conn.send(post(&origin.url("/upload"), 1024 * 1024)).await;
    assert_eq!(refused.status, 429);
    assert_eq!(refused.header("connection"), "close");
    assert_eq!(origin.count(), 1);
}

/// Sends `raw` to courtesy on a fresh connection and returns what came back within 5 s.
async fn raw_exchange(courtesy: &Courtesy, raw: String) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(courtesy.addr).await.unwrap();
    stream.write_all(raw.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_are_the_clients_error() {
    let origin = Origin::start("127.0.0.1", |req| async move {
        use http_body_util::BodyExt;
        let _ = req.into_body().collect().await;
        Response::new(full("ok"))
    })
    .await;
    let courtesy = Courtesy::start("[defaults]\nrate = 100\nburst = 10\n").await;
    let host = origin.addr;
    let bad_chunk = raw_exchange(
        &courtesy,
        format!(
            "POST http://{host}/chunks HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n\r\n\
             5\r\nhello\r\nZZZZ\r\nnot a chunk\r\n0\r\n\r\n"
        ),
    )
    .await;
    assert!(bad_chunk.starts_with("HTTP/1.1 400"), "{bad_chunk}");
    assert!(
        bad_chunk.contains("error=http_request_error"),
        "{bad_chunk}"
    );
    let overflow = raw_exchange(
        &courtesy,
        format!(
            "POST http://{host}/chunks HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n\r\n\
             FFFFFFFFFFFFFFFFFFFF\r\nx\r\n0\r\n\r\n"
        ),
    )
    .await;
    assert!(overflow.starts_with("HTTP/1.1 400"), "{overflow}");
    let both = raw_exchange(
        &courtesy,
        format!(
            "POST http://{host}/both HTTP/1.1\r\nHost: {host}\r\nContent-Length: 5\r\n\
             Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
        ),
    )
    .await;
    // hyper frames such a request by Transfer-Encoding alone, drops Content-Length, and closes
    // the connection after the answer: nothing can be smuggled behind the body.
    assert!(
        both.to_ascii_lowercase().contains("connection: close"),
        "{both}"
    );
    let credentials = courtesy
        .client()
        .get(&format!("http://user:secret@{host}/private"))
        .await;
    assert_eq!(credentials.status, 400);
    assert!(credentials.header("proxy-status").contains("credentials"));
    let paths = origin.paths();
    assert!(!paths.iter().any(|p| p == "/private"), "{paths:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cooldown_survives_a_kill_right_after_the_429() {
    let origin = Origin::start("127.0.0.1", |_req| async {
        come_back_later(429, "120", "slow down")
    })
    .await;
    let dir = temp_dir("kill-after-429");
    let ports = Ports::free();
    let config = ports.config_in(
        &dir,
        "[defaults]\nrate = 50\nburst = 5\non_cooldown = \"reject\"\nobey_robots = false\n",
    );
    let client = ProxyClient {
        proxy: ports.proxy_addr(),
    };

    let mut first = spawn_courtesy_process(&config);
    assert!(listening(ports.proxy_addr()).await);
    let throttled = client.get(&origin.url("/a")).await;
    assert_eq!(throttled.status, 429);
    assert_eq!(throttled.header("proxy-status"), "", "the origin's own 429");
    // Killed (SIGKILL: no shutdown, no final save) a moment after the 429 reached the client.
    tokio::time::sleep(Duration::from_millis(100)).await;
    first.kill().await.unwrap();

    let _second = spawn_courtesy_process(&config);
    assert!(listening(ports.proxy_addr()).await);
    let after = client.get(&origin.url("/b")).await;
    assert_eq!(after.status, 429);
    assert!(
        after.header("proxy-status").contains("cooling down"),
        "the restarted courtesy still holds the Retry-After window: {}",
        after.header("proxy-status")
    );
    assert_eq!(
        origin.count(),
        1,
        "nothing reached the host inside its window"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_come_in_the_format_the_scraper_asks_for() {
    use http_body_util::BodyExt;
    let courtesy = Courtesy::start("").await;
    let scrape = |accept: Option<&'static str>| {
        let url = courtesy.admin_url("/metrics");
        async move {
            let mut req = Request::get(url);
            if let Some(accept) = accept {
                req = req.header("accept", accept);
            }
            let response = direct_client()
                .request(req.body(full("")).unwrap())
                .await
                .unwrap();
            let kind = response.headers()["content-type"]
                .to_str()
                .unwrap()
                .to_string();
            let body = response.into_body().collect().await.unwrap().to_bytes();
            (kind, String::from_utf8_lossy(&body).into_owned())
        }
    };
    let (kind, text) = scrape(Some(
        "application/openmetrics-text;version=1.0.0;q=0.9,text/plain;version=0.0.4;q=0.5",
    ))
    .await;
    assert!(kind.starts_with("application/openmetrics-text"), "{kind}");
    assert!(text.ends_with("# EOF\n"));
    let (kind, text) = scrape(Some("text/plain;version=0.0.4")).await;
    assert!(kind.starts_with("text/plain; version=0.0.4"), "{kind}");
    assert!(!text.contains("# EOF"));
    assert!(
        text.contains("# TYPE courtesy_leaf_certificates_minted_total counter\n"),
        "{text}"
    );
    let (kind, _) = scrape(None).await;
    assert!(kind.starts_with("application/openmetrics-text"), "{kind}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_certificate_under_obey_robots_is_a_502_and_no_back_off() {
    let test_ca = TestCa::new();
    let origin = Origin::start_tls(
        "127.0.0.1",
        test_ca.server_config(&["127.0.0.1"]),
        |_req| async { Response::new(full("secret")) },
    )
    .await;
    // No upstream_ca: nobody trusts the origin's CA. robots.txt is obeyed.
    let courtesy = Courtesy::start(&format!(
        "[proxy]\nconnect_ports = [{}]\n[defaults]\nrate = 50\nburst = 5\nobey_robots = true\n\
         on_cooldown = \"reject\"\n",
        origin.addr.port()
    ))
    .await;
    let client = courtesy.intercepted_client();
    let url = format!("https://{}/page", origin.addr);
    for attempt in 0..2 {
        let got = client.get(&url).send().await.unwrap();
        assert_eq!(got.status(), 502, "attempt {attempt}");
        let status = got.headers()["proxy-status"].to_str().unwrap().to_string();
        assert!(status.contains("error=tls_certificate_error"), "{status}");
        assert!(!status.contains("robots.txt"), "{status}");
    }
    let (_, host) = courtesy.host_page(&origin.addr.to_string()).await;
    let host: serde_json::Value = serde_json::from_str(&host).unwrap();
    assert_eq!(
        host["state"], "idle",
        "a local trust problem backs nothing off: {host}"
    );
    assert!(host["cooldown"].is_null(), "{host}");
    assert_eq!(origin.count(), 0);
}

/// An origin that answers the first request on each connection and, on the second, reads it and
/// closes the connection without a word: what a kept-alive connection that the origin closed at
/// the moment of sending looks like. Returns its address and the request lines it read.
async fn closing_origin() -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::Mutex<Vec<String>>>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        for _ in 0..20 {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            let log = log.clone();
            tokio::spawn(async move {
                for answered in [true, false] {
                    let Some(text) = read_request_head(&mut stream).await else {
                        return;
                    };
                    log.lock()
                        .unwrap()
                        .push(text.lines().next().unwrap_or("").to_string());
                    if !answered {
                        return; // closes the connection, unanswered
                    }
                    let length = text
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length: ")
                                .map(str::to_string)
                        })
                        .and_then(|n| n.trim().parse::<usize>().ok())
                        .unwrap_or(0);
                    let mut body = vec![0u8; length];
                    let _ = stream.read_exact(&mut body).await;
                    let _ = stream
                        .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                        .await;
                }
            });
        }
    });
    (addr, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_pooled_connection_is_retried_fresh_for_idempotent_requests_only() {
    let (origin, seen) = closing_origin().await;
    let courtesy =
        Courtesy::start("[defaults]\nrate = 50\nburst = 10\non_cooldown = \"reject\"\n").await;
    let client = courtesy.client();
    assert_eq!(client.get(&format!("http://{origin}/a")).await.status, 200);
    // /b goes out on the kept-alive connection, which the origin closes: sent once more.
    let b = client.get(&format!("http://{origin}/b")).await;
    assert_eq!(b.status, 200, "{}", b.header("proxy-status"));
    // /c is a POST: never sent twice, so the client hears of the failure.
    let c = client.send(post(&format!("http://{origin}/c"), 1)).await;
    assert_eq!(c.status, 502);
    assert!(c.header("proxy-status").contains("connection_terminated"));
    let lines = seen.lock().unwrap().clone();
    let count = |path: &str| {
        lines
            .iter()
            .filter(|l| l.contains(&format!(" {path} ")))
            .count()
    };
    assert_eq!(
        (count("/a"), count("/b"), count("/c")),
        (1, 2, 1),
        "{lines:?}"
    );
    // Neither stale connection backed the host off.
    let after = client.get(&format!("http://{origin}/d")).await;
    assert_eq!(after.status, 200, "{}", after.header("proxy-status"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undici_reaches_http_on_any_port_through_connect_and_other_bytes_are_refused() {
    let plain = Origin::ok("127.0.0.1").await;
    // Default connect_ports ([443, 80]): the origin's port is not in it.
    let courtesy = Courtesy::start("[defaults]\nrate = 2\nburst = 1\n").await;
    let lines = undici_through(
        courtesy.addr,
        &courtesy.ca_path(),
        &[plain.url("/a"), plain.url("/b")],
    )
    .await;
    assert_eq!(lines, vec!["200 2", "200 2"]);
    let at = plain.arrival_times();
    assert_eq!(at.len(), 2);
    assert!(
        at[1].duration_since(at[0]) >= Duration::from_millis(450),
        "paced per request"
    );

    // Bytes that are neither TLS nor HTTP open no blind tunnel in intercept mode.
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let ssh = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (mut stream, head) = open_tunnel(courtesy.addr, ssh.local_addr().unwrap()).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    stream.write_all(b"SSH-2.0-OpenSSH_9.2\r\n").await.unwrap();
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut rest)).await;
    assert!(
        matches!(read, Ok(Ok(0)) | Ok(Err(_))),
        "closed, nothing relayed"
    );
    let dialed = tokio::time::timeout(Duration::from_millis(200), ssh.accept()).await;
    assert!(dialed.is_err(), "no connection to the SSH port was made");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_listeners_bound_a_request_head_at_max_request_head_bytes() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    for max in [65_536usize, 100_000] {
        let courtesy = Courtesy::start(&format!("[proxy]\nmax_request_head_bytes = {max}\n")).await;
        let admin = courtesy.admin;
        for (listener, target) in [
            (admin, "/healthz".to_string()),
            (courtesy.addr, format!("http://{admin}/healthz")),
        ] {
            for (size, fits) in [
                (max - 500, true),
                (max + 100, false),
                (max * 6 / 5, false),
                (max * 3 / 2, false),
            ] {
                let start = format!("GET {target} HTTP/1.1\r\nHost: {admin}\r\nx-pad: ");
                let mut head = start.into_bytes();
                head.resize(size - 4, b'a');
                head.extend_from_slice(b"\r\n\r\n");
                let mut stream = tokio::net::TcpStream::connect(listener).await.unwrap();
                // courtesy may stop reading at the bound: the rest of the write may fail.
                let (mut reader, mut writer) = stream.split();
                let write = async {
                    let _ = writer.write_all(&head).await;
                };
                let mut said = vec![0u8; 64];
                let read = tokio::time::timeout(Duration::from_secs(5), reader.read(&mut said));
                let (_, got) = tokio::join!(write, read);
                let n = got.ok().and_then(Result::ok).unwrap_or(0);
                let said = String::from_utf8_lossy(&said[..n]).into_owned();
                let context = format!("max {max}, a head of {size} bytes to {listener}: {said}");
                assert!(said.starts_with("HTTP/1.1 "), "{context}");
                assert_eq!(!said.starts_with("HTTP/1.1 431"), fits, "{context}");
            }
        }
    }
}
