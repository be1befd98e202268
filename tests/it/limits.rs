//! End-to-end: refused early, bounded everywhere. A client outside `allow_clients` is closed at
//! accept before a byte is read, so a flood of silent connections from it costs courtesy nothing
//! even under a low open file limit; connections per client and in total are capped, and one that
//! sends nothing is closed after `header_timeout_seconds`.

use std::net::SocketAddr;
use std::time::Duration;

use crate::support::*;
use http::{Request, StatusCode};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpSocket, TcpStream};
use tokio::task::JoinHandle;

/// This test process may hold as many descriptors as its hard limit allows.
fn raise_own_fd_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut limit = getrlimit(Resource::Nofile);
    limit.current = limit.maximum;
    let _ = setrlimit(Resource::Nofile, limit);
}

/// A connection to `to` from the loopback address `from`, sending nothing.
async fn silent_from(from: &str, to: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket
        .bind(SocketAddr::new(from.parse().unwrap(), 0))
        .unwrap();
    socket.connect(to).await.unwrap()
}

/// Whether courtesy closed `stream` (EOF or reset) within `limit`, and what it wrote first.
async fn closed_within(stream: &mut TcpStream, limit: Duration) -> Option<String> {
    let mut out = Vec::new();
    match tokio::time::timeout(limit, stream.read_to_end(&mut out)).await {
        Ok(_) => Some(String::from_utf8_lossy(&out).into_owned()),
        Err(_) => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_silent_connections_from_a_refused_address_leaves_allowed_clients_served() {
    raise_own_fd_limit();
    let origin = Origin::ok("127.0.0.1").await;
    let dir = temp_dir("fd-flood");
    let ports = Ports::free();
    let config = ports.config_in(
        &dir,
        "allow_clients = [\"127.0.0.1/32\"]\n[defaults]\nrate = 100\nburst = 10\n",
    );
    let _courtesy = tokio::process::Command::new("bash")
        .arg("-c")
        .arg(format!(
            "ulimit -n 1024 && exec {} run --config {}",
            env!("CARGO_BIN_EXE_courtesy"),
            config.display()
        ))
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    assert!(listening(ports.proxy_addr()).await);
    let admin = SocketAddr::from(([127, 0, 0, 1], ports.admin));

    let mut flood = Vec::new();
    for i in 0..1100 {
        let to = if i % 10 == 0 {
            admin
        } else {
            ports.proxy_addr()
        };
        flood.push(silent_from("127.0.0.2", to).await);
    }
    let client = ProxyClient {
        proxy: ports.proxy_addr(),
    };
    let served = tokio::time::timeout(Duration::from_secs(1), client.get(&origin.url("/ok")))
        .await
        .expect("an allowed client is served within 1 s of the flood");
    assert_eq!(served.status, StatusCode::OK);
    let health = tokio::time::timeout(
        Duration::from_secs(1),
        admin_call("GET", &format!("http://{admin}/healthz"), None, ""),
    )
    .await
    .expect("/healthz answers within 1 s of the flood");
    assert_eq!(health.0, StatusCode::OK);
    for stream in flood.iter_mut().step_by(97) {
        let said = closed_within(stream, Duration::from_secs(2))
            .await
            .expect("a refused client is closed at accept");
        assert_eq!(said, "", "closed before anything is read or written");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_per_client_are_capped_and_silent_ones_time_out() {
    use tokio::io::AsyncWriteExt as _;
    let origin = Origin::slow("127.0.0.2", Duration::from_secs(3), "slow").await;
    let courtesy = Courtesy::start(
        "[proxy]\nmax_connections_per_client = 3\nheader_timeout_seconds = 0.5\n\
         [admin]\nmax_connections_per_client = 2\n\
         [defaults]\nrate = 100\nburst = 10\nconcurrency = 4\nobey_robots = false\n",
    )
    .await;
    // Three connections each carrying a request: none is idle, so a fourth is refused.
    let mut carrying = Vec::new();
    for i in 0..3 {
        let mut stream = TcpStream::connect(courtesy.addr).await.unwrap();
        let url = origin.url(&format!("/{i}"));
        let head = format!("GET {url} HTTP/1.1\r\nHost: {}\r\n\r\n", origin.addr);
        stream.write_all(head.as_bytes()).await.unwrap();
        carrying.push(stream);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut over = TcpStream::connect(courtesy.addr).await.unwrap();
    let said = closed_within(&mut over, Duration::from_secs(2))
        .await
        .expect("the connection over the cap is closed");
    assert!(said.starts_with("HTTP/1.1 503"), "{said}");
    assert!(
        said.contains("proxy-status: courtesy; error=connection_limit_reached"),
        "{said}"
    );
    // Two silent admin connections at the admin cap: fresh ones are never closed to make room
    // (their client may be about to send), so a third is refused...
    let mut admins = Vec::new();
    for _ in 0..2 {
        admins.push(TcpStream::connect(courtesy.admin).await.unwrap());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut third = TcpStream::connect(courtesy.admin).await.unwrap();
    let said = closed_within(&mut third, Duration::from_secs(2))
        .await
        .expect("the connection over the admin cap is closed");
    assert!(said.starts_with("HTTP/1.1 503"), "{said}");
    // ...and nothing sent within header_timeout_seconds closes them, and the places come back.
    for silent in &mut admins {
        let said = closed_within(silent, Duration::from_secs(3))
            .await
            .expect("a silent connection is closed after header_timeout_seconds");
        assert_eq!(said, "", "closed before anything is read or written");
    }
    let newest = admin_call(
        "GET",
        &format!("http://{}/healthz", courtesy.admin),
        None,
        "",
    )
    .await;
    assert_eq!(newest.0, StatusCode::OK, "the places came back");
    // The carried requests are answered; their connections, idle now, make room for a new one.
    for stream in &mut carrying {
        let mut seen = Vec::new();
        let mut chunk = [0u8; 1024];
        while !String::from_utf8_lossy(&seen).contains("slow") {
            let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut chunk))
                .await
                .expect("the carried request is answered")
                .unwrap();
            assert_ne!(n, 0, "answered before the connection closes");
            seen.extend_from_slice(&chunk[..n]);
        }
        assert!(String::from_utf8_lossy(&seen).starts_with("HTTP/1.1 200"));
    }
    assert_eq!(courtesy.client().get(&origin.url("/")).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_upstream_table_is_a_local_503_never_held_against_the_host() {
    let (courtesy, _slow, other, holding) = upstream_table_held("").await;
    let client = courtesy.client();
    let refused = client.get(&other.url("/a")).await;
    assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        refused
            .header("proxy-status")
            .starts_with("courtesy; error=connection_limit_reached"),
        "{}",
        refused.header("proxy-status")
    );
    let (status, body) = courtesy.host_page(&other.addr.to_string()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let host: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_ne!(host["state"], "cooling_down", "{body}");
    assert!(host["cooldown"].is_null(), "no backoff: {body}");
    assert_eq!(host["rate"], 100.0, "no rate cut: {body}");
    assert_eq!(holding.await.unwrap().status, 200);
    assert_eq!(client.get(&other.url("/b")).await.status, 200);
    assert_eq!(other.paths(), ["/b"], "the refused request never left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_upstream_table_closes_the_connection_idle_longest_for_a_new_host() {
    // Two slots, three hosts: without closing an idle pooled connection, the third host would
    // wait out the 5 s connect timeout and get a 503 (the pool keeps idle connections 90 s).
    let origins = [
        Origin::ok("127.0.0.2").await,
        Origin::ok("127.0.0.3").await,
        Origin::ok("127.0.0.4").await,
    ];
    let courtesy = Courtesy::start(
        "[proxy]\nmax_upstream_connections = 2\nconnect_timeout_seconds = 5\n\
         [defaults]\nrate = 100\nburst = 10\nobey_robots = false\n",
    )
    .await;
    let client = courtesy.client();
    for (round, origin) in origins.iter().chain(&origins).enumerate() {
        let started = tokio::time::Instant::now();
        let got = client.get(&origin.url(&format!("/{round}"))).await;
        assert_eq!(
            got.status,
            200,
            "round {round}: {}",
            got.header("proxy-status")
        );
        assert!(
            started.elapsed() < Duration::from_millis(2500),
            "round {round} waited {:?} for an upstream slot",
            started.elapsed()
        );
    }
    for (i, origin) in origins.iter().enumerate() {
        assert_eq!(origin.count(), 2, "host {i} answered both of its requests");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_connection_does_not_hold_up_a_shutdown() {
    let courtesy = Courtesy::start("[proxy]\nshutdown_grace_seconds = 10\n").await;
    let _silent = TcpStream::connect(courtesy.addr).await.unwrap();
    let _admin = TcpStream::connect(courtesy.admin).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = tokio::time::Instant::now();
    tokio::time::timeout(Duration::from_secs(5), courtesy.shutdown())
        .await
        .expect("shut down at once")
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_robots_txt_fetch_that_finds_no_upstream_slot_is_not_the_hosts_robots_txt() {
    let (courtesy, _slow, other, holding) = upstream_table_held(
        "obey_robots = false\n[[host]]\nmatch = \"127.0.0.3\"\nobey_robots = true\n",
    )
    .await;
    let client = courtesy.client();
    let refused = client.get(&other.url("/a")).await;
    assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        refused
            .header("proxy-status")
            .contains("connection_limit_reached"),
        "{}",
        refused.header("proxy-status")
    );
    assert_eq!(holding.await.unwrap().status, 200);
    assert_eq!(
        client.get(&other.url("/b")).await.status,
        200,
        "robots.txt fetched now"
    );
    assert_eq!(other.paths(), ["/robots.txt", "/b"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_head_that_dribbles_in_is_cut_off_after_header_timeout_seconds() {
    use tokio::io::AsyncWriteExt;
    let courtesy = Courtesy::start("[proxy]\nheader_timeout_seconds = 0.5\n").await;
    let mut slow = TcpStream::connect(courtesy.addr).await.unwrap();
    slow.write_all(b"GET http://127.0.0.2/ HTTP/1.1\r\n")
        .await
        .unwrap();
    let started = tokio::time::Instant::now();
    // One header line every 200 ms: the head never completes in time.
    let dribble = async {
        for i in 0..20 {
            tokio::time::sleep(Duration::from_millis(200)).await;
            if slow
                .write_all(format!("x-{i}: y\r\n").as_bytes())
                .await
                .is_err()
            {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(5), dribble).await;
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(2), slow.read_to_end(&mut rest)).await;
    assert!(closed.is_ok(), "closed");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "cut off near the timeout, not after the whole dribble: {:?}",
        started.elapsed()
    );
}

/// An origin on 127.0.0.2 that answers after a second and closes the connection: each request
/// holds an upstream connection that long, and no pooled one is left behind.
async fn slow_closing_origin() -> Origin {
    Origin::start("127.0.0.2", |_req| async {
        tokio::time::sleep(Duration::from_millis(1000)).await;
        http::Response::builder()
            .header("connection", "close")
            .body(full("slow"))
            .unwrap()
    })
    .await
}

/// courtesy with an upstream table of one connection (and `defaults` added to its `[defaults]`),
/// that connection held by a request to [`slow_closing_origin`], and another origin, on
/// 127.0.0.3, that no connection is left for. The held request's task, and the slow origin that
/// must outlive it, come back with them.
async fn upstream_table_held(defaults: &str) -> (Courtesy, Origin, Origin, JoinHandle<Got>) {
    let slow = slow_closing_origin().await;
    let other = Origin::ok("127.0.0.3").await;
    let courtesy = Courtesy::start(&format!(
        "[proxy]\nmax_upstream_connections = 1\nconnect_timeout_seconds = 0.3\n\
         [defaults]\nrate = 100\nburst = 10\n{defaults}"
    ))
    .await;
    let holding = courtesy.client().spawn_get(slow.url("/hold"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    (courtesy, slow, other, holding)
}

/// The pacing of 50 quick loopback hosts: out of the way, so a crowd test measures connections.
const FAST_HOSTS: &str =
    "[defaults]\nrate = 1000\nburst = 1000\nconcurrency = 64\nobey_robots = false\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aiohttp_with_32_sessions_over_50_hosts_gets_every_answer() {
    raise_own_fd_limit();
    let mut origins = Vec::new();
    for _ in 0..50 {
        origins.push(Origin::ok("127.0.0.1").await);
    }
    let courtesy = Courtesy::start(FAST_HOSTS).await;
    let urls: Vec<String> = (0..2000)
        .map(|i| origins[i % 50].url(&format!("/page/{i}")))
        .collect();
    // 32 sessions, each keeping its idle connections per host (aiohttp's default connector),
    // 64 requests in flight at once, one in four a POST with a body: up to 1,600 idle kept-alive
    // connections wanted. On courtesy's defaults (a loopback listener: the caps sized from the
    // open file limit, all of it for the one client), none is closed under the client.
    let script = r#"
import asyncio, json, sys, aiohttp
urls = json.loads(sys.stdin.read())
async def main():
    sessions = [aiohttp.ClientSession(proxy="http://" + sys.argv[1]) for _ in range(32)]
    gate = asyncio.Semaphore(64)
    errors, statuses = [], {}
    async def fetch(i, url):
        async with gate:
            try:
                session = sessions[i % 32]
                send = session.post(url, data=b"x" * 512) if i % 4 == 0 else session.get(url)
                async with send as r:
                    await r.read()
                    statuses[r.status] = statuses.get(r.status, 0) + 1
            except Exception as e:
                errors.append(repr(e))
    await asyncio.wait_for(asyncio.gather(*(fetch(i, u) for i, u in enumerate(urls))), 120)
    for s in sessions:
        await s.close()
    print(json.dumps({"statuses": statuses, "errors": errors[:5], "error_count": len(errors)}))
asyncio.run(main())
"#;
    let mut cmd = client_command("python3");
    cmd.args(["-c", script, &courtesy.addr.to_string()]);
    let list = format!(
        "[{}]",
        urls.iter()
            .map(|u| format!("\"{u}\""))
            .collect::<Vec<_>>()
            .join(",")
    );
    let stdout = run_with_input(&mut cmd, list.as_bytes(), Duration::from_secs(150)).await;
    assert!(
        stdout.contains(r#"{"statuses": {"200": 2000}, "errors": [], "error_count": 0}"#),
        "{stdout}"
    );
    let served: usize = origins.iter().map(Origin::count).sum();
    assert_eq!(served, 2000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_idle_connections_then_requests_on_the_first_hundred_get_every_answer() {
    raise_own_fd_limit();
    let origin = Origin::ok("127.0.0.1").await;
    let courtesy = Courtesy::start(FAST_HOSTS).await;
    // A thousand connections from one address, opened before any request (a pool warmed up).
    let mut conns = Vec::new();
    for _ in 0..1000 {
        conns.push(TcpStream::connect(courtesy.addr).await.unwrap());
    }
    // Then one request on each of the first hundred: none of them was closed to make room.
    use tokio::io::AsyncWriteExt as _;
    for (i, stream) in conns.iter_mut().take(100).enumerate() {
        let url = origin.url(&format!("/{i}"));
        let head = format!(
            "GET {url} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            origin.addr
        );
        stream.write_all(head.as_bytes()).await.unwrap();
    }
    for (i, stream) in conns.iter_mut().take(100).enumerate() {
        let said = closed_within(stream, Duration::from_secs(10))
            .await
            .unwrap_or_default();
        assert!(said.starts_with("HTTP/1.1 200"), "request {i}: {said:?}");
    }
    // A new connection from the same address is served too.
    let served = tokio::time::timeout(
        Duration::from_secs(5),
        courtesy.client().get(&origin.url("/new")),
    )
    .await
    .expect("a new request from the same address is served within 5 s");
    assert_eq!(served.status, StatusCode::OK);
    assert_eq!(origin.count(), 101);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_a_cap_a_kept_alive_connection_makes_room_and_a_fresh_one_never_does() {
    let origin = Origin::ok("127.0.0.1").await;
    let courtesy = Courtesy::start(&format!(
        "[proxy]\nmax_connections_per_client = 50\n{}",
        FAST_HOSTS
    ))
    .await;
    let client = courtesy.client();
    // Ten kept alive after a request each, then forty that never send a byte: at the cap.
    let mut kept = Vec::new();
    for i in 0..10 {
        let mut conn = client.connect().await;
        assert_eq!(conn.get(&origin.url(&format!("/{i}"))).await.status, 200);
        kept.push(conn);
    }
    let mut silent = Vec::new();
    for _ in 0..40 {
        silent.push(TcpStream::connect(courtesy.addr).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    // A new request takes the place of a kept-alive one, never of a fresh one.
    let served = tokio::time::timeout(Duration::from_secs(5), client.get(&origin.url("/new")))
        .await
        .expect("a new request is served within 5 s");
    assert_eq!(served.status, StatusCode::OK);
    for stream in silent.iter_mut().step_by(7) {
        assert!(
            closed_within(stream, Duration::from_millis(200))
                .await
                .is_none(),
            "a fresh connection was closed to make room"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_heads_are_bounded_and_a_thousand_huge_heads_pin_no_memory() {
    use tokio::io::AsyncWriteExt as _;
    raise_own_fd_limit();
    let origin = Origin::ok("127.0.0.1").await;
    let dir = temp_dir("heads");
    let ports = Ports::free();
    let config = dir.join("c.toml");
    ports.write_config(
        &config,
        &dir,
        "max_connections_per_client = 2000\n\
         [defaults]\nrate = 1000\nburst = 100\nobey_robots = false\n",
    );
    let mut child = spawn_courtesy_process(&config);
    let pid = child.id().unwrap();
    assert!(listening(ports.proxy_addr()).await);
    let client = ProxyClient {
        proxy: ports.proxy_addr(),
    };
    // A head with a 32 KiB cookie (the large end of real ones) is served.
    let cookie = "c".repeat(32 * 1024);
    let req = Request::get(origin.url("/cookie"))
        .header("cookie", cookie.as_str())
        .body(empty())
        .unwrap();
    assert_eq!(client.send(req).await.status, StatusCode::OK);
    let before = vm_hwm_kib(pid);
    assert!(before > 0, "could not read courtesy's memory");

    // 1,000 connections each sending 390 KB of a head that never ends: each is refused with
    // 431 once max_request_head_bytes (64 KiB) is read, and closed.
    let start = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nx-pad: ",
        origin.url("/"),
        origin.addr
    );
    let pad = vec![b'a'; 390 * 1024];
    let mut streams = Vec::new();
    for _ in 0..1000 {
        let mut stream = TcpStream::connect(ports.proxy_addr()).await.unwrap();
        // courtesy stops reading at the bound: the rest of the write may fail, or wait.
        let _ = tokio::time::timeout(Duration::from_secs(5), async {
            stream.write_all(start.as_bytes()).await?;
            stream.write_all(&pad).await
        })
        .await;
        streams.push(stream);
    }
    for stream in streams.iter_mut().step_by(50) {
        let said = closed_within(stream, Duration::from_secs(5))
            .await
            .expect("a connection over the head limit is closed");
        assert!(said.starts_with("HTTP/1.1 431"), "{said}");
        assert!(said.contains("proxy-status: courtesy; error="), "{said}");
    }
    let after = vm_hwm_kib(pid);
    let grew_mib = after.saturating_sub(before) as f64 / 1024.0;
    println!("courtesy's peak memory grew by {grew_mib:.1} MiB for 1,000 heads of 390 KB");
    // Before the bound: 16 MB → 425 MB. Now at most 64 KiB per unfinished head.
    assert!(
        grew_mib < 96.0,
        "courtesy's peak memory grew by {grew_mib:.1} MiB for 1,000 heads of 390 KB"
    );
    assert_eq!(client.get(&origin.url("/after")).await.status, 200);
    let _ = child.kill().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// Sends `GET path` to `origin` inside the tunnel `stream` (plain HTTP/1.1, served by courtesy in
/// intercept mode) and reads the whole answer; returns its status line.
async fn get_inside(stream: &mut TcpStream, origin: SocketAddr, path: &str) -> String {
    use tokio::io::AsyncWriteExt;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {origin}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    // Origin::ok answers "ok" with a length: the answer ends with it.
    while !got.ends_with(b"ok") {
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf))
            .await
            .expect("an answer in time")
            .unwrap();
        assert!(n > 0, "closed before the answer's end");
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&got).into_owned();
    text.lines().next().unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_tunnel_is_closed_to_make_room_like_an_idle_kept_alive_connection() {
    let origin = Origin::ok("127.0.0.1").await;
    let courtesy = Courtesy::start(&format!(
        "[proxy]\nmax_connections_per_client = 2\n{FAST_HOSTS}"
    ))
    .await;
    // Two tunnels, each done with a request: both idle, neither carrying.
    let mut tunnels = Vec::new();
    for n in 0..2 {
        let (mut stream, head) = open_tunnel(courtesy.addr, origin.addr).await;
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        let status = get_inside(&mut stream, origin.addr, &format!("/inside{n}")).await;
        assert!(status.starts_with("HTTP/1.1 200"), "{status}");
        tunnels.push(stream);
    }
    // A tunnel stays held a second after its last request (back-to-back requests keep one
    // hold); then it is idle, and a new connection at the cap takes the place of the tunnel
    // idle longest.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let got = tokio::time::timeout(
        Duration::from_secs(5),
        courtesy.client().get(&origin.url("/new")),
    )
    .await
    .expect("served within 5 s");
    assert_eq!(got.status, StatusCode::OK, "{:?}", got.body);
    let (first, second) = tunnels.split_at_mut(1);
    let (first, second) = tokio::join!(
        closed_within(&mut first[0], Duration::from_secs(5)),
        closed_within(&mut second[0], Duration::from_secs(5))
    );
    assert!(
        first.is_some() || second.is_some(),
        "an idle tunnel was closed to make room"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_http11_session_inside_a_tunnel_ends_after_header_timeout_seconds() {
    let origin = Origin::ok("127.0.0.1").await;
    let courtesy = Courtesy::start(&format!(
        "[proxy]\nheader_timeout_seconds = 1\n{FAST_HOSTS}"
    ))
    .await;
    let (mut stream, head) = open_tunnel(courtesy.addr, origin.addr).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let status = get_inside(&mut stream, origin.addr, "/once").await;
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    let idle = tokio::time::Instant::now();
    assert!(
        closed_within(&mut stream, Duration::from_secs(10))
            .await
            .is_some(),
        "an idle tunnel ends"
    );
    let took = idle.elapsed();
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(8),
        "closed after {took:?}, not after header_timeout_seconds (1 s)"
    );
}

/// An h2 session (raw `h2`, ALPN h2) inside an intercepted CONNECT to `origin`, trusting
/// courtesy's CA; the connection's task ends when courtesy ends the session.
async fn h2_inside(
    courtesy: &Courtesy,
    origin: SocketAddr,
) -> (
    h2::client::SendRequest<bytes::Bytes>,
    JoinHandle<Result<(), h2::Error>>,
) {
    let (stream, head) = open_tunnel(courtesy.addr, origin).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let mut tls = client_tls_trusting(&courtesy.ca_path());
    tls.alpn_protocols = vec![b"h2".to_vec()];
    let name = rustls_pki_types::ServerName::IpAddress(origin.ip().into());
    let tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(tls))
        .connect(name, stream)
        .await
        .expect("TLS");
    let (sender, conn) = h2::client::handshake(tls).await.expect("h2 handshake");
    let task = tokio::spawn(conn);
    (sender, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_http2_session_inside_a_tunnel_gets_a_goaway_after_header_timeout_seconds() {
    let test_ca = TestCa::new();
    let origin = Origin::start_tls(
        "127.0.0.1",
        test_ca.server_config(&["127.0.0.1"]),
        |_| async { http::Response::new(full("ok")) },
    )
    .await;
    let dir = temp_dir("h2-idle");
    let trust = test_ca.write(&dir, "origin-ca.pem");
    let courtesy = Courtesy::start(&format!(
        "[proxy]\nheader_timeout_seconds = 1\nupstream_ca = \"{}\"\n{FAST_HOSTS}",
        trust.display()
    ))
    .await;
    let (sender, session) = h2_inside(&courtesy, origin.addr).await;
    let mut sender = sender.ready().await.expect("ready");
    let request = http::Request::get(format!("https://{}/one", origin.addr))
        .body(())
        .unwrap();
    let (answer, _) = sender.send_request(request, true).unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(10), answer)
        .await
        .expect("an answer in time")
        .unwrap();
    assert_eq!(answer.status(), 200);
    let mut body = answer.into_body();
    while let Some(chunk) = body.data().await {
        let _ = chunk.unwrap();
    }
    // No stream open from now on: the session ends within a few seconds, not never.
    let idle = tokio::time::Instant::now();
    let ended = tokio::time::timeout(Duration::from_secs(10), session)
        .await
        .expect("the idle session was ended (GOAWAY)")
        .unwrap();
    assert!(ended.is_ok(), "a graceful end: {ended:?}");
    let took = idle.elapsed();
    assert!(took >= Duration::from_millis(900), "{took:?}");
    drop(sender);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_inside_a_tunnel_is_offered_tunnel_max_streams_streams() {
    let origin = Origin::ok("127.0.0.1").await;
    let courtesy = Courtesy::start(&format!("[proxy]\ntunnel_max_streams = 7\n{FAST_HOSTS}")).await;
    let (stream, head) = open_tunnel(courtesy.addr, origin.addr).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let mut tls = client_tls_trusting(&courtesy.ca_path());
    tls.alpn_protocols = vec![b"h2".to_vec()];
    let name = rustls_pki_types::ServerName::IpAddress(origin.addr.ip().into());
    let tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(tls))
        .connect(name, stream)
        .await
        .expect("TLS");
    let (_sender, mut conn) = h2::client::handshake(tls).await.expect("h2 handshake");
    let mut ping = conn.ping_pong().expect("ping");
    let max = tokio::time::timeout(Duration::from_secs(10), async {
        use std::future::Future;
        let mut polled = std::pin::pin!(std::future::poll_fn(
            |cx| std::pin::Pin::new(&mut conn).poll(cx)
        ));
        tokio::select! {
            _ = ping.ping(h2::Ping::opaque()) => {}
            _ = &mut polled => panic!("the session ended"),
        }
    })
    .await;
    assert!(max.is_ok(), "the server's SETTINGS in time");
    assert_eq!(conn.max_concurrent_send_streams(), 7);
}
