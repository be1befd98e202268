//! WebSockets through courtesy end to end (issue 39): an echo origin started here (plain and TLS,
//! tokio-tungstenite), reached in every form a client sends a handshake through a proxy
//! (absolute-form `GET ws://…` and `GET http://…` with `Upgrade`, `ws://` inside a CONNECT,
//! `wss://` inside an intercepted CONNECT, a blind tunnel in `tunnel` mode), by our own Rust
//! clients and by real ones (Python `websockets`, Node's `ws` behind `https-proxy-agent`,
//! Chromium through Playwright). The handshake is
//! paced, held by a pause while open sockets keep echoing, its slot freed after the `101`, the
//! socket's bytes charged to the host, and open sockets closed at shutdown after the grace.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::*;
use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::handshake::server::{Request, Response};
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

/// Bounds every wait of these tests.
const LIMIT: Duration = Duration::from_secs(20);

/// One handshake the origin accepted: when, for which path, and the `Via` it carried.
#[derive(Debug, Clone)]
struct Handshake {
    at: Instant,
    path: String,
    via: String,
}

/// A WebSocket echo origin on 127.0.0.1 (TLS when given a server config): every text or binary
/// message comes back as it was sent.
struct EchoOrigin {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Handshake>>>,
    task: tokio::task::JoinHandle<()>,
}

impl EchoOrigin {
    async fn start(tls: Option<Arc<rustls::ServerConfig>>) -> EchoOrigin {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        // Offering h2 as well, as most https servers do: a handshake must still reach it over
        // HTTP/1.1 (an `Upgrade` means nothing in HTTP/2; tungstenite would read the h2 preface
        // as a bad request and the test would fail).
        let tls = tls.map(|config| {
            let mut config = config.as_ref().clone();
            config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
            tokio_rustls::TlsAcceptor::from(Arc::new(config))
        });
        let record = seen.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (record, tls) = (record.clone(), tls.clone());
                tokio::spawn(async move {
                    match tls {
                        Some(tls) => {
                            if let Ok(stream) = tls.accept(stream).await {
                                echo(stream, record).await;
                            }
                        }
                        None => echo(stream, record).await,
                    }
                });
            }
        });
        EchoOrigin { addr, seen, task }
    }

    fn handshakes(&self) -> Vec<Handshake> {
        self.seen.lock().unwrap().clone()
    }

    fn count(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    /// The budget key of this origin.
    fn key(&self) -> String {
        self.addr.to_string()
    }
}

impl Drop for EchoOrigin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Accepts one handshake on `stream` (recording it) and echoes until the client closes.
// The callback's error type is tungstenite's own (`ErrorResponse`), large or not.
#[allow(clippy::result_large_err)]
async fn echo<S>(stream: S, record: Arc<Mutex<Vec<Handshake>>>)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let callback = |req: &Request, response: Response| {
        let via = req
            .headers()
            .get("via")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        record.lock().unwrap().push(Handshake {
            at: Instant::now(),
            path: req.uri().path().to_string(),
            via,
        });
        Ok(response)
    };
    let Ok(mut socket) = tokio_tungstenite::accept_hdr_async(stream, callback).await else {
        return;
    };
    while let Some(Ok(message)) = socket.next().await {
        if matches!(message, Message::Close(_)) {
            return;
        }
        let data = matches!(message, Message::Text(_) | Message::Binary(_));
        if data && socket.send(message).await.is_err() {
            return;
        }
    }
}

/// A client socket through courtesy.
type Socket<S> = WebSocketStream<S>;

/// Sends `text` and returns the echo.
async fn round_trip<S>(socket: &mut Socket<S>, text: &str) -> String
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    tokio::time::timeout(LIMIT, socket.send(Message::text(text)))
        .await
        .expect("send in time")
        .expect("sent");
    loop {
        let message = tokio::time::timeout(LIMIT, socket.next())
            .await
            .expect("an echo in time")
            .expect("the socket is open")
            .expect("a message");
        if let Message::Text(echo) = message {
            return echo.to_string();
        }
    }
}

/// Sends an absolute-form handshake for `url` (`ws://` or `http://`) to the proxy and reads the
/// answer's head; returns the stream (a socket when the head says 101) and the head.
async fn absolute_handshake(proxy: SocketAddr, url: &str) -> (TcpStream, String) {
    absolute_handshake_from("127.0.0.1", proxy, url).await
}

/// Reads a response head byte by byte (nothing after it is consumed).
async fn read_head(stream: &mut TcpStream) -> String {
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        let n = tokio::time::timeout(LIMIT, stream.read(&mut byte))
            .await
            .expect("a head in time")
            .unwrap();
        assert_eq!(n, 1, "closed before the end of the head: {head:?}");
        head.push(byte[0]);
    }
    String::from_utf8_lossy(&head).into_owned()
}

/// A WebSocket through an absolute-form handshake for `url`.
async fn absolute_socket(proxy: SocketAddr, url: &str) -> Socket<TcpStream> {
    let (stream, head) = absolute_handshake(proxy, url).await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    let lower = head.to_ascii_lowercase();
    assert!(lower.contains("upgrade: websocket"), "{head}");
    assert!(
        lower.contains("sec-websocket-accept: s3pplmbitxaq9kygzzhzrbk+xoo="),
        "{head}"
    );
    WebSocketStream::from_raw_socket(stream, Role::Client, None).await
}

/// A WebSocket to `ws://{origin}/{path}` inside a CONNECT to the origin.
async fn connect_socket(proxy: SocketAddr, origin: SocketAddr, path: &str) -> Socket<TcpStream> {
    let (stream, head) = open_tunnel(proxy, origin).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let url = format!("ws://{origin}/{path}");
    let (socket, response) =
        tokio::time::timeout(LIMIT, tokio_tungstenite::client_async(url, stream))
            .await
            .expect("a handshake in time")
            .expect("switched");
    assert_eq!(response.status(), 101);
    socket
}

/// A `wss://` WebSocket inside a CONNECT, TLS with a server trusted through `trust`.
async fn tls_socket(
    proxy: SocketAddr,
    origin: SocketAddr,
    trust: &std::path::Path,
) -> Socket<tokio_rustls::client::TlsStream<TcpStream>> {
    let (stream, head) = open_tunnel(proxy, origin).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let connector = tokio_rustls::TlsConnector::from(Arc::new(client_tls_trusting(trust)));
    let name = rustls_pki_types::ServerName::IpAddress(origin.ip().into());
    let tls = connector.connect(name, stream).await.expect("TLS");
    let url = format!("wss://{origin}/secure");
    let (socket, response) = tokio::time::timeout(LIMIT, tokio_tungstenite::client_async(url, tls))
        .await
        .expect("a handshake in time")
        .expect("switched");
    assert_eq!(response.status(), 101);
    socket
}

/// The host's view in `/hosts`.
async fn host_view(courtesy: &Courtesy, key: &str) -> Value {
    let (status, body) = courtesy.host_page(key).await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

/// The host's `counters.websockets_open` and `in_flight`.
async fn open_and_in_flight(courtesy: &Courtesy, key: &str) -> (u64, u64) {
    let view = host_view(courtesy, key).await;
    (
        view["counters"]["websockets_open"].as_u64().unwrap(),
        view["in_flight"].as_u64().unwrap(),
    )
}

/// Waits until the host shows `open` sockets; returns its view then.
async fn until_open(courtesy: &Courtesy, key: &str, open: u64) -> (u64, u64) {
    let end = Instant::now() + LIMIT;
    loop {
        let now = open_and_in_flight(courtesy, key).await;
        if now.0 == open || Instant::now() > end {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ws_echoes_in_every_plain_form_and_the_slot_is_free_while_open() {
    let origin = EchoOrigin::start(None).await;
    let courtesy = Courtesy::start("[defaults]\nrate = 100\nburst = 10\nconcurrency = 1\n").await;
    let key = origin.key();

    // Absolute form, `ws://` and `http://`: what a client without CONNECT sends to an HTTP proxy.
    let mut by_ws = absolute_socket(courtesy.addr, &format!("ws://{}/ws-url", origin.addr)).await;
    assert_eq!(round_trip(&mut by_ws, "one").await, "one");
    // concurrency = 1 and a socket open: the next handshake still goes, since the turn ended
    // with the 101.
    let mut by_http =
        absolute_socket(courtesy.addr, &format!("http://{}/http-url", origin.addr)).await;
    assert_eq!(round_trip(&mut by_http, "two").await, "two");
    // Plain HTTP inside a CONNECT (intercept mode serves it): Python's websockets, Node's ws
    // behind a proxy agent, and browsers send ws:// this way.
    let mut inside = connect_socket(courtesy.addr, origin.addr, "inside").await;
    assert_eq!(round_trip(&mut inside, "three").await, "three");
    assert_eq!(round_trip(&mut by_ws, "again").await, "again");

    assert_eq!(
        until_open(&courtesy, &key, 3).await,
        (3, 0),
        "open, no slot"
    );
    let metrics = fetch_direct(&courtesy.admin_url("/metrics")).await;
    assert!(
        metrics.contains("\ncourtesy_websockets_open 3\n"),
        "{metrics}"
    );
    let seen = origin.handshakes();
    let paths: Vec<&str> = seen.iter().map(|h| h.path.as_str()).collect();
    assert_eq!(paths, ["/ws-url", "/http-url", "/inside"]);
    assert!(seen.iter().all(|h| h.via.contains("courtesy")), "{seen:?}");

    for mut socket in [by_ws, by_http] {
        socket.close(None).await.unwrap();
    }
    inside.close(None).await.unwrap();
    drop(inside);
    assert_eq!(until_open(&courtesy, &key, 0).await.0, 0, "closed sockets");
    let view = host_view(&courtesy, &key).await;
    assert_eq!(view["counters"]["sent"], 3, "{view}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_socket_keeps_its_client_connection_place() {
    let origin = EchoOrigin::start(None).await;
    let courtesy = Courtesy::start(
        "[proxy]\nmax_connections_per_client = 2\n[defaults]\nrate = 100\nburst = 10\n",
    )
    .await;
    // Two sockets, one of each kind of client connection: at the cap, and never idle.
    let mut plain = absolute_socket(courtesy.addr, &format!("ws://{}/a", origin.addr)).await;
    let mut inside = connect_socket(courtesy.addr, origin.addr, "b").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    // A connection over the cap is answered at once and closed (nothing written: an unread
    // request would turn the close into a reset).
    let mut over = TcpStream::connect(courtesy.addr).await.unwrap();
    let mut said = Vec::new();
    let _ = tokio::time::timeout(LIMIT, over.read_to_end(&mut said)).await;
    let said = String::from_utf8_lossy(&said);
    assert!(said.starts_with("HTTP/1.1 503"), "{said}");
    assert!(said.contains("connection_limit_reached"), "{said}");
    // Neither socket was closed to make room.
    assert_eq!(round_trip(&mut plain, "a").await, "a");
    assert_eq!(round_trip(&mut inside, "b").await, "b");
    plain.close(None).await.unwrap();
    drop(plain);
    assert_eq!(until_open(&courtesy, &origin.key(), 1).await.0, 1);
    let mut again = absolute_socket(courtesy.addr, &format!("ws://{}/c", origin.addr)).await;
    assert_eq!(round_trip(&mut again, "c").await, "c");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_or_ordinary_answer_to_a_handshake_is_passed_on() {
    // An origin that is not a WebSocket server answers the handshake with a plain 200: the
    // client gets it as it came, and nothing is joined.
    let origin = Origin::ok("127.0.0.1").await;
    let courtesy = Courtesy::start("[defaults]\nrate = 100\nburst = 10\n").await;
    let (_stream, head) = absolute_handshake(courtesy.addr, &origin.url("/plain")).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(origin.count(), 1);
    let key = origin.addr.to_string();
    assert_eq!(until_open(&courtesy, &key, 0).await.0, 0);
}

/// courtesy trusting `ca`'s origins, with `extra` after `[proxy]`.
async fn courtesy_trusting(ca: &TestCa, extra: &str) -> Courtesy {
    let dir = temp_dir("ws-tls");
    let path = ca.write(&dir, "origin-ca.pem");
    Courtesy::start(&format!(
        "[proxy]\nupstream_ca = \"{}\"\n{extra}",
        path.display()
    ))
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wss_echoes_inside_an_intercepted_connect() {
    let test_ca = TestCa::new();
    let origin = EchoOrigin::start(Some(test_ca.server_config(&["127.0.0.1"]))).await;
    let courtesy = courtesy_trusting(&test_ca, "[defaults]\nrate = 100\nburst = 10\n").await;
    // The client trusts courtesy's CA: the TLS it speaks is courtesy's; courtesy speaks its own
    // TLS to the origin.
    let mut socket = tls_socket(courtesy.addr, origin.addr, &courtesy.ca_path()).await;
    for n in 0..3 {
        let text = format!("secure {n}");
        assert_eq!(round_trip(&mut socket, &text).await, text);
    }
    let seen = origin.handshakes();
    assert_eq!(seen.len(), 1);
    assert!(seen[0].via.contains("courtesy"), "{seen:?}");
    assert_eq!(until_open(&courtesy, &origin.key(), 1).await, (1, 0));
    socket.close(None).await.unwrap();
    drop(socket);
    assert_eq!(until_open(&courtesy, &origin.key(), 0).await.0, 0);
}

/// An h2 session (ALPN h2) inside a CONNECT to `origin`, trusting courtesy's CA.
async fn h2_session(
    courtesy: &Courtesy,
    origin: SocketAddr,
) -> hyper::client::conn::http2::SendRequest<TestBody> {
    let (stream, head) = open_tunnel(courtesy.addr, origin).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let mut tls = client_tls_trusting(&courtesy.ca_path());
    tls.alpn_protocols = vec![b"h2".to_vec()];
    let name = rustls_pki_types::ServerName::IpAddress(origin.ip().into());
    let tls = tokio_rustls::TlsConnector::from(Arc::new(tls))
        .connect(name, stream)
        .await
        .expect("TLS");
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tls),
    )
    .await
    .expect("h2 handshake");
    tokio::spawn(conn);
    sender
}

/// Sends an HTTP/2 extended CONNECT for a WebSocket at `path` (RFC 8441) on `sender`'s session
/// to `origin`; returns courtesy's answer.
async fn extended_connect_on(
    sender: &mut hyper::client::conn::http2::SendRequest<TestBody>,
    origin: SocketAddr,
    path: &str,
) -> http::Response<hyper::body::Incoming> {
    // The server's SETTINGS (with ENABLE_CONNECT_PROTOCOL) come right after the handshake.
    for _ in 0..50 {
        let mut req = http::Request::builder()
            .method("CONNECT")
            .uri(format!("https://{origin}{path}"))
            .header("sec-websocket-version", "13")
            .body(empty())
            .unwrap();
        req.extensions_mut()
            .insert(hyper::ext::Protocol::from_static("websocket"));
        sender.ready().await.expect("connection ready");
        match sender.send_request(req).await {
            Ok(response) => return response,
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    panic!("the extended CONNECT was never sent");
}

/// Sends an HTTP/2 extended CONNECT for a WebSocket at `path` (RFC 8441) on an h2 connection
/// inside a CONNECT to `origin`, trusting courtesy's CA; returns courtesy's answer.
async fn h2_extended_connect(
    courtesy: &Courtesy,
    origin: SocketAddr,
    path: &str,
) -> http::Response<hyper::body::Incoming> {
    let mut sender = h2_session(courtesy, origin).await;
    extended_connect_on(&mut sender, origin, path).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websockets_on_http2_streams_count_as_the_clients_connections() {
    let test_ca = TestCa::new();
    let origin = EchoOrigin::start(Some(test_ca.server_config(&["127.0.0.1"]))).await;
    let courtesy = courtesy_trusting(
        &test_ca,
        "max_connections_per_client = 4
[defaults]
rate = 100
burst = 20
",
    )
    .await;
    // One client connection: the tunnel (1), two sockets (2 more), and the third handshake's
    // own stream in flight (the 4th place): the third socket finds no place of its own.
    let mut sender = h2_session(&courtesy, origin.addr).await;
    let mut sockets = Vec::new();
    for path in ["/a", "/b"] {
        // The last handshake's own place is given back once courtesy has sent its answer, which
        // the client may read a moment before that (on a loaded machine): until then a new one
        // finds the places full, as it should.
        let mut response = extended_connect_on(&mut sender, origin.addr, path).await;
        for _ in 0..40 {
            if response.status() != 503 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            response = extended_connect_on(&mut sender, origin.addr, path).await;
        }
        assert_eq!(response.status(), 200, "{response:?}");
        let upgraded = hyper::upgrade::on(response).await.expect("the stream");
        let io = hyper_util::rt::TokioIo::new(upgraded);
        sockets.push(WebSocketStream::from_raw_socket(io, Role::Client, None).await);
    }
    let response = extended_connect_on(&mut sender, origin.addr, "/c").await;
    assert_eq!(response.status(), 503, "{response:?}");
    let status = response.headers()["proxy-status"].to_str().unwrap();
    assert!(
        status.contains("error=connection_limit_reached"),
        "{status}"
    );
    assert!(status.contains("max_connections_per_client"), "{status}");
    assert_eq!(origin.count(), 2);
    for socket in &mut sockets {
        assert_eq!(round_trip(socket, "still open").await, "still open");
    }
    // One closed: its place comes back.
    let mut closed = sockets.remove(0);
    closed.close(None).await.unwrap();
    drop(closed);
    assert_eq!(until_open(&courtesy, &origin.key(), 1).await.0, 1);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let response = extended_connect_on(&mut sender, origin.addr, "/d").await;
    assert_eq!(response.status(), 200, "{response:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_h2_extended_connect_answered_with_a_wrong_accept_is_a_502() {
    let test_ca = TestCa::new();
    let tls = tokio_rustls::TlsAcceptor::from(test_ca.server_config(&["127.0.0.1"]));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    // An origin whose 101 answers some other key.
    let origin = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let mut stream = tls.accept(stream).await.unwrap();
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let mut byte = [0u8; 1];
            if stream.read(&mut byte).await.unwrap() == 0 {
                break;
            }
            head.push(byte[0]);
        }
        let answer = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\
                      Connection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n";
        stream.write_all(answer.as_bytes()).await.unwrap();
        tokio::time::sleep(LIMIT).await;
        String::from_utf8_lossy(&head).into_owned()
    });
    let courtesy = courtesy_trusting(&test_ca, "[defaults]\nrate = 100\nburst = 10\n").await;
    let response = h2_extended_connect(&courtesy, addr, "/wrong").await;
    assert_eq!(response.status(), 502);
    let status = response.headers()["proxy-status"].to_str().unwrap();
    assert!(status.contains("error=http_protocol_error"), "{status}");
    let key = format!("127.0.0.1:{}", addr.port());
    assert_eq!(open_and_in_flight(&courtesy, &key).await, (0, 0));
    origin.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_h2_extended_connect_inside_interception_echoes() {
    let test_ca = TestCa::new();
    let origin = EchoOrigin::start(Some(test_ca.server_config(&["127.0.0.1"]))).await;
    let courtesy = courtesy_trusting(&test_ca, "[defaults]\nrate = 100\nburst = 10\n").await;
    let response = h2_extended_connect(&courtesy, origin.addr, "/h2").await;
    assert_eq!(response.status(), 200, "{response:?}");
    assert!(!response.headers().contains_key("sec-websocket-accept"));
    let upgraded = hyper::upgrade::on(response).await.expect("the stream");
    let io = hyper_util::rt::TokioIo::new(upgraded);
    let mut socket = WebSocketStream::from_raw_socket(io, Role::Client, None).await;
    for n in 0..3 {
        let text = format!("over h2 {n}");
        assert_eq!(round_trip(&mut socket, &text).await, text);
    }
    let seen = origin.handshakes();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].path, "/h2");
    assert_eq!(until_open(&courtesy, &origin.key(), 1).await, (1, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tunnel_mode_host_just_gets_the_tunnel() {
    let test_ca = TestCa::new();
    let origin = EchoOrigin::start(Some(test_ca.server_config(&["127.0.0.1"]))).await;
    let courtesy = Courtesy::start(&format!(
        "[proxy]\nconnect_ports = [{}]\n[defaults]\nrate = 100\nburst = 10\nhttps = \"tunnel\"\n",
        origin.addr.port()
    ))
    .await;
    // The client speaks TLS with the origin itself (it trusts the origin's CA, not courtesy's).
    let dir = temp_dir("ws-tunnel");
    let trust = test_ca.write(&dir, "origin-ca.pem");
    let mut socket = tls_socket(courtesy.addr, origin.addr, &trust).await;
    assert_eq!(round_trip(&mut socket, "blind").await, "blind");
    let seen = origin.handshakes();
    assert_eq!(seen.len(), 1);
    assert!(
        seen[0].via.is_empty(),
        "a blind tunnel adds nothing: {seen:?}"
    );
    // The tunnel holds its slot for its life (it paces connections), and is no WebSocket of
    // courtesy's.
    assert_eq!(open_and_in_flight(&courtesy, &origin.key()).await, (0, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handshakes_are_paced_at_the_hosts_rate() {
    let origin = EchoOrigin::start(None).await;
    let courtesy = Courtesy::start("[defaults]\nrate = 2\nburst = 1\nconcurrency = 1\n").await;
    let proxy = courtesy.addr;
    let started = Instant::now();
    let opened: Vec<_> = (0..4)
        .map(|n| {
            let url = format!("ws://{}/paced-{n}", origin.addr);
            tokio::spawn(async move {
                let mut socket = absolute_socket(proxy, &url).await;
                let echo = round_trip(&mut socket, &format!("paced {n}")).await;
                (socket, echo)
            })
        })
        .collect();
    let mut sockets = Vec::new();
    for (n, task) in opened.into_iter().enumerate() {
        let (socket, echo) = task.await.unwrap();
        assert_eq!(echo, format!("paced {n}"));
        sockets.push(socket);
    }
    let mut at: Vec<Instant> = origin.handshakes().iter().map(|h| h.at).collect();
    at.sort();
    assert_eq!(at.len(), 4);
    // rate 2, burst 1: one at once, then one every 0.5 s. The origin notes each when it reads
    // it, which a loaded machine may delay for one and not the next: a tolerance per gap, and
    // the three gaps together at least 1.3 s.
    for pair in at.windows(2) {
        let gap = pair[1].duration_since(pair[0]);
        assert!(
            gap >= Duration::from_millis(300),
            "handshakes {gap:?} apart"
        );
    }
    let span = at[3].duration_since(at[0]);
    assert!(
        span >= Duration::from_millis(1300),
        "{span:?} from first to last"
    );
    assert!(started.elapsed() >= Duration::from_millis(1200));
    // Each socket holds no slot: all four are open at concurrency 1.
    assert_eq!(until_open(&courtesy, &origin.key(), 4).await, (4, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_holds_new_handshakes_and_closes_open_sockets() {
    let origin = EchoOrigin::start(None).await;
    let courtesy =
        Courtesy::start("[defaults]\nrate = 100\nburst = 10\non_cooldown = \"hold\"\n").await;
    let key = origin.key();
    let mut open = absolute_socket(courtesy.addr, &format!("ws://{}/open", origin.addr)).await;
    assert_eq!(round_trip(&mut open, "before").await, "before");

    let pause = courtesy.admin_url(&format!("/hosts/{key}/pause?seconds=300"));
    let (status, body) = admin_call("POST", &pause, None, "").await;
    assert_eq!(status, 200, "{body}");
    let proxy = courtesy.addr;
    let url = format!("ws://{}/held", origin.addr);
    let held = tokio::spawn(async move { absolute_socket(proxy, &url).await });
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(
        origin.count(),
        1,
        "no handshake leaves while the host is paused"
    );
    assert!(!held.is_finished());
    // The open socket closed with the pause (issue 47: a paused host keeps no socket open).
    assert!(
        socket_ends(&mut open).await,
        "the pause closed the open socket"
    );
    let view = host_view(&courtesy, &key).await;
    assert_eq!(view["state"], "paused", "{view}");
    assert_eq!(view["queued"], 1, "{view}");

    let resume = courtesy.admin_url(&format!("/hosts/{key}/resume"));
    let (status, body) = admin_call("POST", &resume, None, "").await;
    assert_eq!(status, 200, "{body}");
    let mut held = tokio::time::timeout(LIMIT, held)
        .await
        .expect("the held handshake goes after the resume")
        .unwrap();
    assert_eq!(round_trip(&mut held, "after").await, "after");
    assert_eq!(origin.count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_host_in_reject_mode_refuses_the_handshake_with_proxy_status() {
    let origin = EchoOrigin::start(None).await;
    let courtesy = Courtesy::start("[defaults]\nrate = 100\nburst = 10\n").await;
    let key = origin.key();
    let pause = courtesy.admin_url(&format!("/hosts/{key}/pause?seconds=300"));
    assert_eq!(admin_call("POST", &pause, None, "").await.0, 200);
    let (_stream, head) =
        absolute_handshake(courtesy.addr, &format!("ws://{}/refused", origin.addr)).await;
    assert!(head.starts_with("HTTP/1.1 429"), "{head}");
    assert!(
        head.to_ascii_lowercase().contains("proxy-status: courtesy"),
        "{head}"
    );
    assert_eq!(origin.count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn socket_bytes_are_charged_to_the_hosts_byte_budget() {
    let origin = EchoOrigin::start(None).await;
    let courtesy = Courtesy::start(
        "[defaults]\nrate = 100\nburst = 10\nmax_bytes_per_second = 65536\nmax_bytes_burst = 0\n",
    )
    .await;
    let key = origin.key();
    let mut socket = absolute_socket(courtesy.addr, &format!("ws://{}/bytes", origin.addr)).await;
    let big = "x".repeat(100 * 1024);
    // Frames flow unpaced: 200 KiB each way at a 64 KiB/s budget, well under its 3 s.
    let started = Instant::now();
    for _ in 0..2 {
        assert_eq!(round_trip(&mut socket, &big).await.len(), big.len());
    }
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    let view = host_view(&courtesy, &key).await;
    let bytes = view["counters"]["response_bytes"].as_u64().unwrap();
    // Both ways, billed every 64 KiB: at least 3 x 64 KiB of the 400 KiB by now.
    assert!(bytes >= 3 * 64 * 1024, "{view}");
    assert!(view["byte_debt"].is_object(), "{view}");
    socket.close(None).await.unwrap();
    drop(socket);
    assert_eq!(until_open(&courtesy, &key, 0).await.0, 0);
    let view = host_view(&courtesy, &key).await;
    let bytes = view["counters"]["response_bytes"].as_u64().unwrap();
    assert!(bytes >= 4 * 100 * 1024, "all of it once closed: {view}");
    // The debt holds the host's next turn (a handshake like any request).
    let next = Instant::now();
    let mut again = absolute_socket(courtesy.addr, &format!("ws://{}/next", origin.addr)).await;
    assert!(
        next.elapsed() >= Duration::from_secs(2),
        "the next handshake waited {:?}",
        next.elapsed()
    );
    assert_eq!(round_trip(&mut again, "paid").await, "paid");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_sockets_are_closed_at_shutdown_after_the_grace() {
    let origin = EchoOrigin::start(None).await;
    let courtesy =
        Courtesy::start("[proxy]\nshutdown_grace_seconds = 1\n[defaults]\nrate = 100\n").await;
    let mut socket = absolute_socket(courtesy.addr, &format!("ws://{}/long", origin.addr)).await;
    assert_eq!(round_trip(&mut socket, "up").await, "up");
    let begun = Instant::now();
    let shutdown = courtesy.begin_shutdown();
    // Within the grace the socket still echoes.
    assert_eq!(round_trip(&mut socket, "still").await, "still");
    let end = tokio::time::timeout(LIMIT, socket.next())
        .await
        .expect("the socket ends after the grace");
    assert!(
        !matches!(end, Some(Ok(Message::Text(_)))),
        "ended, not another message: {end:?}"
    );
    let took = begun.elapsed();
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(10),
        "closed {took:?} after shutdown began"
    );
    tokio::time::timeout(LIMIT, shutdown)
        .await
        .expect("shutdown ends")
        .unwrap()
        .unwrap();
}

// ---- real clients ---------------------------------------------------------------------------

/// Runs `tests/python/websocket_echo.py` through `proxy` to `url`; returns its lines.
async fn python_echo(proxy: SocketAddr, url: &str, trust: Option<&std::path::Path>) -> Vec<String> {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/python/websocket_echo.py"
    );
    let mut cmd = client_command("python3");
    cmd.arg(script).arg(format!("http://{proxy}")).arg(url);
    if let Some(trust) = trust {
        cmd.arg(trust);
    }
    let out = tokio::time::timeout(Duration::from_secs(90), run_to_success(&mut cmd))
        .await
        .expect("python finishes");
    out.lines().map(str::to_string).collect()
}

/// Each of `origins` saw exactly one opening handshake, and it came through courtesy (its `Via`).
fn assert_each_opened_once_through_courtesy(origins: &[&EchoOrigin]) {
    for origin in origins {
        let seen = origin.handshakes();
        assert_eq!(seen.len(), 1, "{seen:?}");
        assert!(
            seen[0].via.contains("courtesy"),
            "through courtesy: {seen:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_websockets_echoes_ws_and_wss_through_courtesy() {
    let test_ca = TestCa::new();
    let plain = EchoOrigin::start(None).await;
    let secure = EchoOrigin::start(Some(test_ca.server_config(&["127.0.0.1"]))).await;
    let courtesy = courtesy_trusting(&test_ca, "[defaults]\nrate = 100\nburst = 10\n").await;
    let expected = ["python 0", "python 1", "python 2"];
    let ws = python_echo(courtesy.addr, &format!("ws://{}/py", plain.addr), None).await;
    assert_eq!(ws, expected);
    let ca = courtesy.ca_path();
    let wss = python_echo(
        courtesy.addr,
        &format!("wss://{}/py", secure.addr),
        Some(&ca),
    )
    .await;
    assert_eq!(wss, expected);
    assert_each_opened_once_through_courtesy(&[&plain, &secure]);
}

/// Runs `tests/node/websocket_ws.mjs` (Node's `ws` behind `https-proxy-agent`) through `proxy`
/// to `url`, trusting courtesy's CA `ca`; returns its lines.
async fn node_ws_echo(proxy: SocketAddr, url: &str, ca: &std::path::Path) -> Vec<String> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/node/websocket_ws.mjs");
    let mut cmd = client_command("node");
    cmd.current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/node"))
        .env("NODE_EXTRA_CA_CERTS", ca)
        .arg(script)
        .arg(format!("http://{proxy}"))
        .arg(url);
    let out = tokio::time::timeout(Duration::from_secs(60), run_to_success(&mut cmd))
        .await
        .expect("node finishes");
    out.lines().map(str::to_string).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_ws_behind_a_proxy_agent_echoes_ws_and_wss_through_courtesy() {
    let test_ca = TestCa::new();
    let plain = EchoOrigin::start(None).await;
    let names = ["localhost", "127.0.0.1"];
    let secure = EchoOrigin::start(Some(test_ca.server_config(&names))).await;
    let courtesy = courtesy_trusting(&test_ca, "[defaults]\nrate = 100\nburst = 10\n").await;
    let expected = ["node 0", "node 1", "node 2"];
    let ca = courtesy.ca_path();
    let ws = node_ws_echo(courtesy.addr, &format!("ws://{}/node", plain.addr), &ca).await;
    assert_eq!(ws, expected);
    // By name: https-proxy-agent checks a wss:// IP literal against "localhost" (ws hands it no
    // host name to check), a quirk of the client, not of the proxy.
    let port = secure.addr.port();
    let wss = node_ws_echo(courtesy.addr, &format!("wss://localhost:{port}/node"), &ca).await;
    assert_eq!(wss, expected);
    assert_each_opened_once_through_courtesy(&[&plain, &secure]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_echoes_ws_and_wss_through_courtesy() {
    let test_ca = TestCa::new();
    let plain = EchoOrigin::start(None).await;
    let secure = EchoOrigin::start(Some(test_ca.server_config(&["127.0.0.1"]))).await;
    let courtesy = courtesy_trusting(&test_ca, "[defaults]\nrate = 100\nburst = 10\n").await;
    // Chromium trusts courtesy's CA through its NSS database in a throwaway $HOME.
    let home = temp_dir("ws-chromium-home");
    trust_in_nss_home(&home, &courtesy.ca_path()).await;
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/node/websocket_chromium.mjs"
    );
    let urls = [
        format!("ws://{}/chromium", plain.addr),
        format!("wss://{}/chromium", secure.addr),
    ];
    let mut cmd = client_command("node");
    cmd.current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/node"))
        .env("HOME", &home)
        .arg(script)
        .arg(format!("http://{}", courtesy.addr))
        .args(&urls);
    let out = tokio::time::timeout(Duration::from_secs(90), run_to_success(&mut cmd))
        .await
        .expect("chromium finishes");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        [
            format!("echo {} chromium 0 chromium 1", urls[0]),
            format!("echo {} chromium 0 chromium 1", urls[1]),
        ],
        "{out}"
    );
    assert_each_opened_once_through_courtesy(&[&plain, &secure]);
}

/// The page of [`page_and_socket_origin`]: opens a WebSocket to its own origin, sends two
/// messages and puts both echoes in its title.
const PAGE: &str = "<!doctype html><title>waiting</title><script>\n\
    const socket = new WebSocket(`wss://${location.host}/echo`);\n\
    const echoes = [];\n\
    socket.onopen = () => { socket.send('page 0'); socket.send('page 1'); };\n\
    socket.onmessage = (e) => { echoes.push(e.data); \
      if (echoes.length === 2) { document.title = 'echo ' + echoes.join(' '); socket.close(); } };\n\
    socket.onerror = () => { document.title = 'failed socket'; };\n\
    </script>";

/// An https origin on 127.0.0.1 (HTTP/1.1, as courtesy speaks upstream) that answers a WebSocket
/// handshake on any path with an echo socket, and anything else with [`PAGE`]; records the
/// handshakes.
async fn page_and_socket_origin(tls: Arc<rustls::ServerConfig>) -> EchoOrigin {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let tls = tokio_rustls::TlsAcceptor::from(tls);
    let record = seen.clone();
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let (record, tls) = (record.clone(), tls.clone());
            tokio::spawn(async move {
                if let Ok(stream) = tls.accept(stream).await {
                    page_or_socket(stream, record, PAGE_ANSWER).await;
                }
            });
        }
    });
    EchoOrigin { addr, seen, task }
}

/// The answer of [`page_or_socket`] to a request for a page: `{PAGE}` is the page.
const PAGE_ANSWER: &str =
    "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {LENGTH}\r\n\r\n{PAGE}";

/// Serves requests on one connection: pages (`page`, with `{LENGTH}` and `{PAGE}` filled in)
/// until a WebSocket handshake, then the socket.
async fn page_or_socket<S>(mut stream: S, record: Arc<Mutex<Vec<Handshake>>>, page: &str)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    use base64::Engine as _;
    loop {
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let mut byte = [0u8; 1];
            match stream.read(&mut byte).await {
                Ok(1) => head.push(byte[0]),
                _ => return,
            }
        }
        let head = String::from_utf8_lossy(&head).into_owned();
        let header = |name: &str| {
            head.lines()
                .filter_map(|line| line.split_once(':'))
                .find(|(n, _)| n.trim().eq_ignore_ascii_case(name))
                .map(|(_, v)| v.trim().to_string())
        };
        let path = head.split(' ').nth(1).unwrap_or("/").to_string();
        let Some(key) = header("sec-websocket-key") else {
            let answer = page
                .replace("{LENGTH}", &PAGE.len().to_string())
                .replace("{PAGE}", PAGE);
            if stream.write_all(answer.as_bytes()).await.is_err() {
                return;
            }
            continue;
        };
        record.lock().unwrap().push(Handshake {
            at: Instant::now(),
            path,
            via: header("via").unwrap_or_default(),
        });
        let digest = ring::digest::digest(
            &ring::digest::SHA1_FOR_LEGACY_USE_ONLY,
            format!("{key}258EAFA5-E914-47DA-95CA-C5AB0DC85B11").as_bytes(),
        );
        let accept = base64::engine::general_purpose::STANDARD.encode(digest);
        let answer = format!(
            "HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: upgrade\r\n\
             sec-websocket-accept: {accept}\r\n\r\n"
        );
        if stream.write_all(answer.as_bytes()).await.is_err() {
            return;
        }
        let mut socket = WebSocketStream::from_raw_socket(stream, Role::Server, None).await;
        while let Some(Ok(message)) = socket.next().await {
            if matches!(message, Message::Close(_)) {
                return;
            }
            let data = matches!(message, Message::Text(_) | Message::Binary(_));
            if data && socket.send(message).await.is_err() {
                return;
            }
        }
        return;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_page_opens_a_socket_to_its_own_https_origin() {
    let test_ca = TestCa::new();
    let origin = page_and_socket_origin(test_ca.server_config(&["127.0.0.1"])).await;
    let courtesy = courtesy_trusting(&test_ca, "[defaults]\nrate = 100\nburst = 10\n").await;
    let home = temp_dir("ws-page-home");
    trust_in_nss_home(&home, &courtesy.ca_path()).await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/node/websocket_page.mjs");
    let mut cmd = client_command("node");
    cmd.current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/node"))
        .env("HOME", &home)
        .arg(script)
        .arg(format!("http://{}", courtesy.addr))
        .arg(format!("https://{}/", origin.addr));
    let out = tokio::time::timeout(Duration::from_secs(90), run_to_success(&mut cmd))
        .await
        .expect("chromium finishes");
    assert_eq!(out.trim(), "title echo page 0 page 1", "{out}");
    let seen = origin.handshakes();
    assert_eq!(seen.len(), 1, "{seen:?}");
    // Chromium opened the socket on the page's h2 connection (RFC 8441, since courtesy's h2
    // server allows it): courtesy's Via names the version it received, HTTP/2.
    assert!(seen[0].via.starts_with("2 courtesy"), "{seen:?}");
}

/// Whether `socket` ends (a close frame, EOF or a reset) within [`LIMIT`], reading past any
/// message still on its way.
async fn socket_ends<S>(socket: &mut Socket<S>) -> bool
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let end = Instant::now() + LIMIT;
    loop {
        match tokio::time::timeout_at(end, socket.next()).await {
            Err(_) => return false,
            Ok(None | Some(Err(_)) | Some(Ok(Message::Close(_)))) => return true,
            Ok(Some(Ok(_))) => {}
        }
    }
}

/// [`absolute_handshake`] from the loopback address `from`: another client to courtesy.
async fn absolute_handshake_from(from: &str, proxy: SocketAddr, url: &str) -> (TcpStream, String) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket
        .bind(SocketAddr::new(from.parse().unwrap(), 0))
        .unwrap();
    let mut stream = socket.connect(proxy).await.unwrap();
    let authority = url.split('/').nth(2).unwrap();
    let head = format!(
        "GET {url} HTTP/1.1\r\nHost: {authority}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let head = read_head(&mut stream).await;
    (stream, head)
}

/// Asserts `head` is courtesy's 503 for a socket over a cap, naming `cap`.
fn assert_over_cap(head: &str, cap: &str) {
    let lower = head.to_ascii_lowercase();
    assert!(head.starts_with("HTTP/1.1 503"), "{head}");
    assert!(
        lower.contains("proxy-status: courtesy; error=connection_limit_reached"),
        "{head}"
    );
    assert!(lower.contains("retry-after:"), "{head}");
    assert!(head.contains(cap), "{head}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sockets_are_capped_per_client_per_host_and_by_their_share_of_upstream_connections() {
    let a = EchoOrigin::start(None).await;
    let b = EchoOrigin::start(None).await;
    let page = Origin::ok("127.0.0.1").await;
    let courtesy = Courtesy::start(
        "[proxy]\nmax_websockets_per_client = 2\nmax_websockets_per_host = 3\n\
         max_upstream_connections = 8\nmax_upstream_sockets = 4\n\
         [defaults]\nrate = 100\nburst = 20\n",
    )
    .await;
    let proxy = courtesy.addr;
    let to = |origin: &EchoOrigin, path: &str| format!("ws://{}/{path}", origin.addr);
    let mut open = Vec::new();
    for path in ["one", "two"] {
        let (stream, head) = absolute_handshake_from("127.0.0.1", proxy, &to(&a, path)).await;
        assert!(head.starts_with("HTTP/1.1 101"), "{head}");
        open.push(stream);
    }
    // A third from the same client, to another host: the client's cap.
    let (_, head) = absolute_handshake_from("127.0.0.1", proxy, &to(&b, "three")).await;
    assert_over_cap(&head, "max_websockets_per_client");
    // Another client: the host's third is let in, the fourth is the host's cap.
    let (stream, head) = absolute_handshake_from("127.0.0.2", proxy, &to(&a, "four")).await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    open.push(stream);
    let (_, head) = absolute_handshake_from("127.0.0.3", proxy, &to(&a, "five")).await;
    assert_over_cap(&head, "max_websockets_per_host");
    // The fourth socket in all fills the share of upstream connections sockets may hold.
    let (stream, head) = absolute_handshake_from("127.0.0.3", proxy, &to(&b, "six")).await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    open.push(stream);
    let (_, head) = absolute_handshake_from("127.0.0.4", proxy, &to(&b, "seven")).await;
    assert_over_cap(&head, "max_upstream_sockets");
    // Plain requests still find upstream connections.
    for n in 0..4 {
        let got = courtesy.client().get(&page.url(&format!("/page{n}"))).await;
        assert_eq!(got.status, 200, "a bystander's request: {:?}", got.body);
    }
    assert_eq!(a.count() + b.count(), 4, "refused handshakes never left");
    // A socket that closes gives its places back.
    drop(open.remove(0));
    assert_eq!(until_open(&courtesy, &a.key(), 2).await.0, 2);
    let (_, head) = absolute_handshake_from("127.0.0.1", proxy, &to(&b, "again")).await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_socket_with_no_byte_either_way_closes_after_the_idle_timeout() {
    let origin = EchoOrigin::start(None).await;
    let courtesy = Courtesy::start(
        "[proxy]\nsocket_idle_timeout_seconds = 1\n[defaults]\nrate = 100\nburst = 10\n",
    )
    .await;
    let mut socket = absolute_socket(courtesy.addr, &format!("ws://{}/idle", origin.addr)).await;
    // Talking every 400 ms keeps it open for well past the timeout.
    for n in 0..6 {
        tokio::time::sleep(Duration::from_millis(400)).await;
        let text = format!("alive {n}");
        assert_eq!(round_trip(&mut socket, &text).await, text);
    }
    let quiet = Instant::now();
    assert!(socket_ends(&mut socket).await, "an idle socket is closed");
    let took = quiet.elapsed();
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(10),
        "{took:?}"
    );
    assert_eq!(until_open(&courtesy, &origin.key(), 0).await.0, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_closes_a_hosts_sockets_and_others_stay_open() {
    let origin = EchoOrigin::start(None).await;
    let other = EchoOrigin::start(None).await;
    let courtesy = Courtesy::start("[defaults]\nrate = 100\nburst = 10\n").await;
    let mut first = absolute_socket(courtesy.addr, &format!("ws://{}/1", origin.addr)).await;
    let mut second = connect_socket(courtesy.addr, origin.addr, "2").await;
    let mut elsewhere = absolute_socket(courtesy.addr, &format!("ws://{}/3", other.addr)).await;
    assert_eq!(until_open(&courtesy, &origin.key(), 2).await.0, 2);
    let close = courtesy.admin_url(&format!("/hosts/{}/close-sockets", origin.key()));
    let (status, body) = admin_call("POST", &close, None, "").await;
    assert_eq!(status, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["closed"], 2, "{body}");
    assert!(socket_ends(&mut first).await);
    assert!(socket_ends(&mut second).await);
    assert_eq!(round_trip(&mut elsewhere, "still").await, "still");
    assert_eq!(until_open(&courtesy, &origin.key(), 0).await.0, 0);
}

/// An origin on 127.0.0.1 that answers the first request head of every connection with
/// `answer`, then keeps whatever else the connection brings (for a test to see that nothing
/// came through). Counts its connections.
struct ScriptedOrigin {
    addr: SocketAddr,
    after: Arc<Mutex<Vec<u8>>>,
    connections: Arc<Mutex<usize>>,
    task: tokio::task::JoinHandle<()>,
}

impl ScriptedOrigin {
    async fn start(answer: &'static str) -> ScriptedOrigin {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let after = Arc::new(Mutex::new(Vec::new()));
        let connections = Arc::new(Mutex::new(0));
        let (kept, counted) = (after.clone(), connections.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                *counted.lock().unwrap() += 1;
                let kept = kept.clone();
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    while !head.ends_with(b"\r\n\r\n") {
                        let mut byte = [0u8; 1];
                        match stream.read(&mut byte).await {
                            Ok(1) => head.push(byte[0]),
                            _ => return,
                        }
                    }
                    if stream.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = stream.read(&mut buf).await {
                        if n == 0 {
                            return;
                        }
                        kept.lock().unwrap().extend_from_slice(&buf[..n]);
                    }
                });
            }
        });
        ScriptedOrigin {
            addr,
            after,
            connections,
            task,
        }
    }

    fn after(&self) -> String {
        String::from_utf8_lossy(&self.after.lock().unwrap()).into_owned()
    }

    fn connections(&self) -> usize {
        *self.connections.lock().unwrap()
    }
}

impl Drop for ScriptedOrigin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Sends a WebSocket handshake for `path` to `origin` through the proxy with five plain
/// requests pipelined after it; returns courtesy's answer head.
async fn handshake_with_pipelined_requests(
    proxy: SocketAddr,
    origin: SocketAddr,
    head: &str,
) -> String {
    let mut stream = TcpStream::connect(proxy).await.unwrap();
    let mut sent = head.replace("{origin}", &origin.to_string());
    for n in 0..5 {
        sent.push_str(&format!(
            "GET http://{origin}/pipelined{n} HTTP/1.1\r\nHost: {origin}\r\n\r\n"
        ));
    }
    stream.write_all(sent.as_bytes()).await.unwrap();
    read_head(&mut stream).await
}

/// Asserts `head` is courtesy's 502 for a 101 it refused.
fn assert_refused_switch(head: &str) {
    assert!(head.starts_with("HTTP/1.1 502"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("proxy-status: courtesy; error=http_protocol_error"),
        "{head}"
    );
}

const WS_HANDSHAKE: &str = "GET http://{origin}/ws HTTP/1.1\r\nHost: {origin}\r\n\
    Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
    Sec-WebSocket-Version: 13\r\n\r\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_101_that_does_not_answer_the_clients_key_is_a_502_and_nothing_is_joined() {
    // The accept of some other key: the origin did not read this handshake.
    let origin = ScriptedOrigin::start(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Accept: AAAAAAAAAAAAAAAAAAAAAAAAAAA=\r\n\r\n",
    )
    .await;
    let courtesy = Courtesy::start("[defaults]\nrate = 0.5\nburst = 1\n").await;
    let head = handshake_with_pipelined_requests(courtesy.addr, origin.addr, WS_HANDSHAKE).await;
    assert_refused_switch(&head);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        origin.after(),
        "",
        "nothing reached the origin through a pipe"
    );
    let key = format!("127.0.0.1:{}", origin.addr.port());
    assert_eq!(open_and_in_flight(&courtesy, &key).await.0, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsolicited_101_or_one_to_h2c_is_a_502() {
    let plain_get = "GET http://{origin}/page HTTP/1.1\r\nHost: {origin}\r\n\r\n";
    let unsolicited =
        ScriptedOrigin::start("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n")
            .await;
    let courtesy = Courtesy::start("[defaults]\nrate = 100\nburst = 10\n").await;
    let head = handshake_with_pipelined_requests(courtesy.addr, unsolicited.addr, plain_get).await;
    assert_refused_switch(&head);
    let h2c = ScriptedOrigin::start(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n",
    )
    .await;
    let head = handshake_with_pipelined_requests(courtesy.addr, h2c.addr, WS_HANDSHAKE).await;
    assert_refused_switch(&head);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(unsolicited.after(), "");
    assert_eq!(h2c.after(), "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handshake_answered_otherwise_leaves_its_connection_out_of_the_pool() {
    let origin = ScriptedOrigin::start(
        "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nok",
    )
    .await;
    let courtesy = Courtesy::start("[defaults]\nrate = 100\nburst = 10\n").await;
    let (_stream, head) =
        absolute_handshake(courtesy.addr, &format!("ws://{}/not-a-socket", origin.addr)).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let got = courtesy
        .client()
        .get(&format!("http://{}/next", origin.addr))
        .await;
    assert_eq!(got.status, 200);
    assert_eq!(
        origin.connections(),
        2,
        "the next request went out on a new connection"
    );
    assert_eq!(
        origin.after(),
        "",
        "nothing more was sent on the handshake's"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_closes_the_hosts_open_sockets() {
    // Pages are Cloudflare's challenge; the socket is a socket.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(page_or_socket(
                stream,
                Arc::new(Mutex::new(Vec::new())),
                "HTTP/1.1 403 Forbidden\r\ncf-mitigated: challenge\r\ncontent-length: 0\r\n\r\n",
            ));
        }
    });
    let courtesy =
        Courtesy::start("[defaults]\nrate = 100\nburst = 10\nobey_robots = false\n").await;
    let mut socket = absolute_socket(courtesy.addr, &format!("ws://{addr}/feed")).await;
    assert_eq!(round_trip(&mut socket, "before").await, "before");
    let page = courtesy.client().get(&format!("http://{addr}/page")).await;
    assert_eq!(page.status, 403);
    assert!(
        socket_ends(&mut socket).await,
        "the block closed the open socket"
    );
    let key = format!("127.0.0.1:{}", addr.port());
    assert_eq!(
        host_view(&courtesy, &key).await["state"],
        "cooling_down",
        "paused for the block"
    );
    task.abort();
}
