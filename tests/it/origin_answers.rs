//! End-to-end: an origin's answer reaches the client only as RFC 9112 frames it and with no
//! `Proxy-Status` member that reads as courtesy's own (issue 47, finding 6). The origin is a raw
//! TCP one that writes the bad bytes itself, and says on which connection each request came.

use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use crate::support::*;
use http::StatusCode;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

/// What the raw origin saw: (connection number, request path), in order.
type Seen = Arc<Mutex<Vec<(usize, String)>>>;

/// A raw HTTP/1.1 origin on 127.0.0.1: each connection serves requests one after another,
/// answering a path from `answers` with its bytes as written, any other with `200 ok`.
async fn raw_origin(answers: Vec<(&'static str, Vec<u8>)>) -> (SocketAddr, Seen) {
    raw_origin_over(answers, None).await
}

/// [`raw_origin`], over TLS with `tls` (HTTP/1.1 by ALPN) when given.
async fn raw_origin_over(
    answers: Vec<(&'static str, Vec<u8>)>,
    tls: Option<Arc<rustls::ServerConfig>>,
) -> (SocketAddr, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen: Seen = Arc::default();
    let log = seen.clone();
    let answers = Arc::new(answers);
    let acceptor = tls.map(|tls| {
        let mut tls = (*tls).clone();
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        tokio_rustls::TlsAcceptor::from(Arc::new(tls))
    });
    tokio::spawn(async move {
        for number in 0.. {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let (log, answers, acceptor) = (log.clone(), answers.clone(), acceptor.clone());
            tokio::spawn(async move {
                match acceptor {
                    Some(acceptor) => {
                        if let Ok(stream) = acceptor.accept(stream).await {
                            serve_raw(stream, number, &log, &answers).await;
                        }
                    }
                    None => serve_raw(stream, number, &log, &answers).await,
                }
            });
        }
    });
    (addr, seen)
}

/// Serves the requests of one connection, connection `number`, as [`raw_origin`] says.
async fn serve_raw<S>(mut stream: S, number: usize, log: &Seen, answers: &[(&'static str, Vec<u8>)])
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    while let Some(text) = read_request_head(&mut stream).await {
        let path = text.split(' ').nth(1).unwrap_or("").to_string();
        log.lock().unwrap().push((number, path.clone()));
        let answer = answers
            .iter()
            .find(|(p, _)| *p == path)
            .map(|(_, bytes)| bytes.clone())
            .unwrap_or_else(|| b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok".to_vec());
        if stream.write_all(&answer).await.is_err() {
            return;
        }
        let _ = stream.flush().await;
    }
}

/// The connection number the request for `path` came on (the first such request).
fn connection_of(seen: &Seen, path: &str) -> usize {
    let seen = seen.lock().unwrap();
    seen.iter()
        .find(|(_, p)| p == path)
        .map(|(n, _)| *n)
        .unwrap_or_else(|| panic!("{path} never reached the origin: {seen:?}"))
}

/// `body` in HTTP/1.1 chunked coding, as one chunk and the last.
fn chunked(body: &[u8]) -> Vec<u8> {
    let mut out = format!("{:x}\r\n", body.len()).into_bytes();
    out.extend_from_slice(body);
    out.extend_from_slice(b"\r\n0\r\n\r\n");
    out
}

/// `Content-Length: 5` beside `Transfer-Encoding: chunked`, and an 11-byte chunked body.
fn both_lengths() -> Vec<u8> {
    let mut both = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 5\r\n\
        transfer-encoding: chunked\r\n\r\n"
        .to_vec();
    both.extend(chunked(b"hello world"));
    both
}

const CONFIG: &str = "[defaults]\nrate = 50\nburst = 10\n";

/// After the suspect answer to `suspect`: `/after` is answered, on another upstream connection.
async fn assert_after_comes_on_a_new_connection(
    client: ProxyClient,
    origin: SocketAddr,
    seen: &Seen,
    suspect: &str,
) {
    let after = client.get(&format!("http://{origin}/after")).await;
    assert_eq!(
        after.status,
        StatusCode::OK,
        "{}",
        after.header("proxy-status")
    );
    assert_eq!(after.body.as_ref(), b"ok");
    assert_ne!(
        connection_of(seen, suspect),
        connection_of(seen, "/after"),
        "the connection that carried {suspect} carries nothing more: {:?}",
        seen.lock().unwrap()
    );
}

/// `Content-Length: 5` beside `Transfer-Encoding: chunked` and an 11-byte chunked body: the
/// client gets the 11 bytes without the origin's length, and the upstream connection that carried
/// it carries nothing more (the next request comes on a new one, where an ordinary answer's
/// connection is reused). Before, the client got `Content-Length: 5` and the connection stayed
/// in the pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_both_lengths_the_transfer_coding_wins_and_the_connection_is_not_reused() {
    let (origin, seen) = raw_origin(vec![("/both", both_lengths())]).await;
    let courtesy = Courtesy::start(CONFIG).await;
    let client = courtesy.client();
    assert_eq!(
        client.get(&format!("http://{origin}/first")).await.status,
        200
    );
    let got = client.get(&format!("http://{origin}/both")).await;
    assert_eq!(got.status, StatusCode::OK);
    assert_ne!(
        got.header("content-length"),
        "5",
        "the origin's length went"
    );
    assert_eq!(got.body.as_ref(), b"hello world");
    assert_eq!(
        connection_of(&seen, "/first"),
        connection_of(&seen, "/both"),
        "an ordinary answer's connection is reused: {:?}",
        seen.lock().unwrap()
    );
    assert_after_comes_on_a_new_connection(client, origin, &seen, "/both").await;
}

/// The same answer from an `https://` origin, through interception (the upstream connection is
/// TLS, which the connection table sees only as ciphertext): the length goes, and the connection
/// carries nothing more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_both_lengths_over_intercepted_tls_the_connection_is_not_reused_either() {
    let ca = TestCa::new();
    let (origin, seen) = raw_origin_over(
        vec![("/both", both_lengths())],
        Some(ca.server_config(&["127.0.0.1"])),
    )
    .await;
    let ca_file = ca.write(&temp_dir("origin-answers"), "origin-ca.pem");
    let courtesy = Courtesy::start(&format!(
        "[proxy]\nupstream_ca = {:?}\nconnect_ports = [{}]\n{CONFIG}",
        ca_file.display().to_string(),
        origin.port()
    ))
    .await;
    let client = courtesy.intercepted_client();
    let mut bodies = Vec::new();
    for path in ["/first", "/both", "/after"] {
        let got = client
            .get(format!("https://{origin}{path}"))
            .send()
            .await
            .unwrap();
        assert_eq!(got.status(), 200, "{path}");
        assert_ne!(
            got.headers().get("content-length").map(|v| v.as_bytes()),
            Some(&b"5"[..]),
            "{path}"
        );
        bodies.push(got.text().await.unwrap());
    }
    assert_eq!(bodies, ["ok", "hello world", "ok"]);
    let connections = |path| connection_of(&seen, path);
    assert_eq!(
        connections("/first"),
        connections("/both"),
        "{:?}",
        seen.lock().unwrap()
    );
    assert_ne!(
        connections("/both"),
        connections("/after"),
        "{:?}",
        seen.lock().unwrap()
    );
}

/// `Transfer-Encoding: gzip, chunked`: courtesy takes off `chunked` alone, so the gzip bytes would
/// reach the client labelled as identity. A 502 with courtesy's `Proxy-Status` instead, and the
/// connection is not reused. Before, the client got a 200 with gzip bytes and no coding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transfer_coding_other_than_chunked_is_a_502_never_relabelled() {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(b"hello world").unwrap();
    let mut coded = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\
        transfer-encoding: gzip, chunked\r\n\r\n"
        .to_vec();
    coded.extend(chunked(&gz.finish().unwrap()));
    let (origin, seen) = raw_origin(vec![("/gzip", coded)]).await;
    let courtesy = Courtesy::start(CONFIG).await;
    let client = courtesy.client();
    let got = client.get(&format!("http://{origin}/gzip")).await;
    assert_eq!(got.status, StatusCode::BAD_GATEWAY);
    let status = got.header("proxy-status");
    assert!(
        status.starts_with("courtesy; error=http_protocol_error; details=")
            && status.contains("gzip, chunked"),
        "{status}"
    );
    assert_after_comes_on_a_new_connection(client, origin, &seen, "/gzip").await;
}

/// An origin's own `Proxy-Status: courtesy; ...` (in a list with another member, and on a line of
/// its own) never reaches the client, where it would read as courtesy's refusal; the other
/// member does. Before, the client got the origin's field as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_origins_proxy_status_named_like_courtesys_never_reaches_the_client() {
    let planted = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\
        proxy-status: courtesy; error=http_request_denied; details=\"robots.txt, it says\", \
        cdn; error=dns_timeout\r\nproxy-status: \"Courtesy\"; error=connection_limit_reached\r\n\
        \r\nok"
        .to_vec();
    let (origin, _) = raw_origin(vec![("/planted", planted)]).await;
    let courtesy = Courtesy::start(CONFIG).await;
    let got = courtesy
        .client()
        .get(&format!("http://{origin}/planted"))
        .await;
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(got.header_lines("proxy-status"), ["cdn; error=dns_timeout"]);
    assert_eq!(got.body.as_ref(), b"ok");
}
