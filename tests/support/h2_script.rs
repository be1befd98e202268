//! An HTTP/2 origin over TLS written on the `h2` crate, for what hyper's server does not do on
//! demand: refusing a chosen request's stream (REFUSED_STREAM), or sending GOAWAY on its first
//! connection before it reads any request (so that the request in flight on it was not
//! processed), or resetting one with PROTOCOL_ERROR. A client that offers only http/1.1 is
//! answered "h1" over HTTP/1.1. It records each request it accepted and counts the connections.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::Response;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// What the origin does with one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum H2Move {
    /// Answers this status with a short body.
    Answer(u16),
    /// Resets the stream with REFUSED_STREAM (RFC 9113 8.7: not processed).
    Refuse,
    /// Resets the stream with PROTOCOL_ERROR.
    Break,
}

/// A scripted HTTP/2 origin: the `n`th request (from 0) gets what the script says.
pub struct ScriptedH2 {
    /// Where it listens.
    pub addr: std::net::SocketAddr,
    arrivals: Arc<Mutex<Vec<(Instant, String)>>>,
    connections: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl ScriptedH2 {
    /// An origin on `ip:0` presenting `tls`'s certificate (ALPN `h2` alone), moving as `script`
    /// says for each request; with `goaway_first`, its first connection sends GOAWAY
    /// (ENHANCE_YOUR_CALM, last stream 0) as soon as the HTTP/2 handshake is done.
    pub async fn start(
        ip: &str,
        tls: Arc<rustls::ServerConfig>,
        goaway_first: bool,
        script: impl Fn(usize) -> H2Move + Send + Sync + 'static,
    ) -> ScriptedH2 {
        let mut tls = (*tls).clone();
        // h2 first; a client that offers only http/1.1 gets "h1" answers over HTTP/1.1.
        tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
        let listener = TcpListener::bind(format!("{ip}:0")).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let arrivals = Arc::new(Mutex::new(Vec::new()));
        let connections = Arc::new(AtomicUsize::new(0));
        let script = Arc::new(script);
        let (seen, accepted) = (arrivals.clone(), connections.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let nth = accepted.fetch_add(1, Ordering::SeqCst);
                let (acceptor, seen, script) = (acceptor.clone(), seen.clone(), script.clone());
                tokio::spawn(async move {
                    let Ok(stream) = acceptor.accept(stream).await else {
                        return;
                    };
                    if stream.get_ref().1.alpn_protocol() != Some(b"h2") {
                        serve_http1(stream, seen).await;
                        return;
                    }
                    let Ok(mut conn) = h2::server::handshake(stream).await else {
                        return;
                    };
                    if goaway_first && nth == 0 {
                        // No frame after the preface read yet: GOAWAY names stream 0 as the
                        // last processed, so the request in flight was not.
                        conn.abrupt_shutdown(h2::Reason::ENHANCE_YOUR_CALM);
                    }
                    while let Some(Ok((req, mut respond))) = conn.accept().await {
                        let n = {
                            let mut seen = seen.lock().unwrap();
                            seen.push((Instant::now(), req.uri().path().to_string()));
                            seen.len() - 1
                        };
                        match script(n) {
                            H2Move::Answer(status) => {
                                let head = Response::builder().status(status).body(()).unwrap();
                                if let Ok(mut body) = respond.send_response(head, false) {
                                    let _ = body.send_data(Bytes::from_static(b"h2"), true);
                                }
                            }
                            H2Move::Refuse => respond.send_reset(h2::Reason::REFUSED_STREAM),
                            H2Move::Break => respond.send_reset(h2::Reason::PROTOCOL_ERROR),
                        }
                    }
                    if goaway_first && nth == 0 {
                        // As a server does, the socket stays open a moment after the GOAWAY, so
                        // that the client reads it rather than a reset of what it still writes.
                        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                    }
                    drop(conn);
                });
            }
        });
        ScriptedH2 {
            addr,
            arrivals,
            connections,
            task,
        }
    }

    /// `https://addr` + `path`.
    pub fn url(&self, path: &str) -> String {
        format!("https://{}{}", self.addr, path)
    }

    /// When each request arrived, in order.
    pub fn arrival_times(&self) -> Vec<Instant> {
        self.arrivals.lock().unwrap().iter().map(|a| a.0).collect()
    }

    /// How many TCP connections it accepted.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

/// Answers "h1" to every request of an HTTP/1.1 connection, recording each.
async fn serve_http1(
    stream: tokio_rustls::server::TlsStream<tokio::net::TcpStream>,
    seen: Arc<Mutex<Vec<(Instant, String)>>>,
) {
    let service = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
        seen.lock()
            .unwrap()
            .push((Instant::now(), req.uri().path().to_string()));
        async { Ok::<_, std::convert::Infallible>(Response::new(super::body::full("h1"))) }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
        .await;
}

impl Drop for ScriptedH2 {
    fn drop(&mut self) {
        self.task.abort();
    }
}
