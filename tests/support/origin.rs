//! The scripted origin: an HTTP/1.1 (or https, or HTTP/2 over TLS) server on a loopback address
//! whose answers come from the test, and which records what reached it (and over which HTTP
//! version, and how many connections it accepted), so that tests can check what courtesy let
//! through and when.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{HeaderMap, Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::body::{full, TestBody};

/// One request as the origin saw it.
#[derive(Debug, Clone)]
pub struct Arrival {
    /// When it arrived.
    pub at: Instant,
    /// Method.
    pub method: String,
    /// Path and query.
    pub path: String,
    /// Headers as received.
    pub headers: HeaderMap,
    /// The HTTP version it came over.
    pub version: http::Version,
}

/// What an https origin speaks, and offers by ALPN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Speaks {
    /// HTTP/1.1 only: `start_tls` offers no ALPN (what every https origin of the tests spoke
    /// before HTTP/2), `start_speaking` picks `http/1.1` by ALPN.
    Http1,
    /// HTTP/2 only (ALPN `h2` alone: a client that offers only `http/1.1` is refused), with
    /// this SETTINGS_MAX_CONCURRENT_STREAMS if set.
    H2 { max_streams: Option<u32> },
    /// Both (ALPN `h2`, `http/1.1`): the client's pick.
    Both,
}

type Handler = Arc<
    dyn Fn(Request<Incoming>) -> Pin<Box<dyn Future<Output = Response<TestBody>> + Send>>
        + Send
        + Sync,
>;

/// A scripted HTTP/1.1 origin on a loopback address. It records every arrival and how many
/// requests it has in flight at most.
pub struct Origin {
    /// Where it listens.
    pub addr: SocketAddr,
    arrivals: Arc<Mutex<Vec<Arrival>>>,
    max_in_flight: Arc<AtomicUsize>,
    connections: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl Origin {
    /// An origin on `ip:0` that answers 200 "ok" to everything.
    pub async fn ok(ip: &str) -> Origin {
        Origin::start(ip, |_req| async { Response::new(full("ok")) }).await
    }

    /// An origin on `ip:0` that answers 200 `body` to everything, each answer `delay` late: a
    /// slow host that keeps requests in flight.
    pub async fn slow(ip: &str, delay: Duration, body: &'static str) -> Origin {
        Origin::start(ip, move |_req| async move {
            tokio::time::sleep(delay).await;
            Response::new(full(body))
        })
        .await
    }

    /// An origin on `ip:0` whose answers come from `handler`.
    pub async fn start<F, Fut>(ip: &str, handler: F) -> Origin
    where
        F: Fn(Request<Incoming>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Response<TestBody>> + Send + 'static,
    {
        Origin::serve(ip, None, Speaks::Http1, handler).await
    }

    /// An https origin on `ip:0` presenting `tls`'s certificate.
    pub async fn start_tls<F, Fut>(ip: &str, tls: Arc<rustls::ServerConfig>, handler: F) -> Origin
    where
        F: Fn(Request<Incoming>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Response<TestBody>> + Send + 'static,
    {
        Origin::serve(
            ip,
            Some(tokio_rustls::TlsAcceptor::from(tls)),
            Speaks::Http1,
            handler,
        )
        .await
    }

    /// An https origin on `ip:0` presenting `tls`'s certificate and speaking what `speaks` says
    /// (its ALPN list set to match).
    pub async fn start_speaking<F, Fut>(
        ip: &str,
        tls: Arc<rustls::ServerConfig>,
        speaks: Speaks,
        handler: F,
    ) -> Origin
    where
        F: Fn(Request<Incoming>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Response<TestBody>> + Send + 'static,
    {
        let mut tls = (*tls).clone();
        tls.alpn_protocols = match speaks {
            Speaks::Http1 => vec![b"http/1.1".to_vec()],
            Speaks::H2 { .. } => vec![b"h2".to_vec()],
            Speaks::Both => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
        };
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
        Origin::serve(ip, Some(acceptor), speaks, handler).await
    }

    async fn serve<F, Fut>(
        ip: &str,
        tls: Option<tokio_rustls::TlsAcceptor>,
        speaks: Speaks,
        handler: F,
    ) -> Origin
    where
        F: Fn(Request<Incoming>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Response<TestBody>> + Send + 'static,
    {
        let handler: Handler = Arc::new(move |req| Box::pin(handler(req)));
        let listener = TcpListener::bind(format!("{ip}:0")).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let arrivals = Arc::new(Mutex::new(Vec::new()));
        let in_flight = Arc::new(AtomicUsize::new(0));
        let max_in_flight = Arc::new(AtomicUsize::new(0));
        let connections = Arc::new(AtomicUsize::new(0));
        let (a, i, m) = (arrivals.clone(), in_flight, max_in_flight.clone());
        let accepted = connections.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                accepted.fetch_add(1, Ordering::SeqCst);
                let (handler, a, i, m) = (handler.clone(), a.clone(), i.clone(), m.clone());
                let tls = tls.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req: Request<Incoming>| {
                        let (handler, a, i, m) = (handler.clone(), a.clone(), i.clone(), m.clone());
                        async move {
                            a.lock().unwrap().push(Arrival {
                                at: Instant::now(),
                                method: req.method().to_string(),
                                path: req
                                    .uri()
                                    .path_and_query()
                                    .map(|p| p.to_string())
                                    .unwrap_or_default(),
                                headers: req.headers().clone(),
                                version: req.version(),
                            });
                            let now = i.fetch_add(1, Ordering::SeqCst) + 1;
                            m.fetch_max(now, Ordering::SeqCst);
                            let response = handler(req).await;
                            i.fetch_sub(1, Ordering::SeqCst);
                            Ok::<_, Infallible>(response)
                        }
                    });
                    let http = hyper::server::conn::http1::Builder::new();
                    let exec = hyper_util::rt::TokioExecutor::new();
                    match (tls, speaks) {
                        (Some(acceptor), Speaks::Http1) => {
                            if let Ok(stream) = acceptor.accept(stream).await {
                                let _ = http.serve_connection(TokioIo::new(stream), service).await;
                            }
                        }
                        (Some(acceptor), Speaks::H2 { max_streams }) => {
                            if let Ok(stream) = acceptor.accept(stream).await {
                                let mut h2 = hyper::server::conn::http2::Builder::new(exec);
                                h2.max_concurrent_streams(max_streams);
                                let _ = h2.serve_connection(TokioIo::new(stream), service).await;
                            }
                        }
                        (Some(acceptor), Speaks::Both) => {
                            if let Ok(stream) = acceptor.accept(stream).await {
                                let auto = hyper_util::server::conn::auto::Builder::new(exec);
                                let _ = auto.serve_connection(TokioIo::new(stream), service).await;
                            }
                        }
                        (None, _) => {
                            let _ = http.serve_connection(TokioIo::new(stream), service).await;
                        }
                    }
                });
            }
        });
        Origin {
            addr,
            arrivals,
            max_in_flight,
            connections,
            task,
        }
    }

    /// `https://addr` + `path`.
    pub fn https_url(&self, path: &str) -> String {
        format!("https://{}{}", self.addr, path)
    }

    /// How many TCP connections it accepted so far (each an https origin's TLS handshake).
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// The HTTP version of each request so far, in order of arrival.
    pub fn versions(&self) -> Vec<http::Version> {
        self.arrivals().into_iter().map(|a| a.version).collect()
    }

    /// `http://addr` + `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// Every arrival so far.
    pub fn arrivals(&self) -> Vec<Arrival> {
        self.arrivals.lock().unwrap().clone()
    }

    /// When each request so far arrived, in order: what pacing tests measure.
    pub fn arrival_times(&self) -> Vec<Instant> {
        self.arrivals().iter().map(|a| a.at).collect()
    }

    /// The path (and query) of each request so far, in order of arrival.
    pub fn paths(&self) -> Vec<String> {
        self.arrivals().into_iter().map(|a| a.path).collect()
    }

    /// How many requests arrived less than `window` after the first one: what a limit per
    /// window counts. (There must have been a first one.)
    pub fn count_within(&self, window: Duration) -> usize {
        let arrivals = self.arrivals();
        let first = arrivals[0].at;
        arrivals
            .iter()
            .filter(|a| a.at.duration_since(first) < window)
            .count()
    }

    /// The most requests that arrived within any `window` (from one arrival on): what
    /// "at most `burst + rate × T` in any window T" bounds.
    pub fn most_within_any(&self, window: Duration) -> usize {
        let times = self.arrival_times();
        (0..times.len())
            .map(|i| {
                times[i..]
                    .iter()
                    .take_while(|t| t.duration_since(times[i]) < window)
                    .count()
            })
            .max()
            .unwrap_or(0)
    }

    /// How many requests arrived so far.
    pub fn count(&self) -> usize {
        self.arrivals.lock().unwrap().len()
    }

    /// The most requests it ever had in flight at once.
    pub fn max_in_flight(&self) -> usize {
        self.max_in_flight.load(Ordering::SeqCst)
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// An answer that tells the client to come back later: `status` (a 429 or 503) with
/// `Retry-After: retry_after` and `body`, the way a throttling server answers.
pub fn come_back_later(status: u16, retry_after: &str, body: &'static str) -> Response<TestBody> {
    Response::builder()
        .status(status)
        .header("retry-after", retry_after)
        .body(full(body))
        .unwrap()
}

/// Reads a request head (to the blank line) from a raw origin's connection, a byte at a time so
/// that nothing after it is taken; `None` when the connection ends first.
pub async fn read_request_head<S: tokio::io::AsyncRead + Unpin>(stream: &mut S) -> Option<String> {
    use tokio::io::AsyncReadExt as _;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte).await {
            Ok(1) => head.push(byte[0]),
            _ => return None,
        }
    }
    Some(String::from_utf8_lossy(&head).into_owned())
}
