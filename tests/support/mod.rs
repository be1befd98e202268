//! Shared test harness: a scripted origin on a loopback address, courtesy started in-process on
//! `127.0.0.1:0`, and a client that talks to courtesy the way a crawler's HTTP_PROXY client does
//! (absolute-form requests).
#![allow(dead_code)]

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// A response body the origin or client can build: full, empty or streamed.
pub type TestBody = BoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;

/// Wraps bytes as a [`TestBody`].
pub fn full(data: impl Into<Bytes>) -> TestBody {
    Full::new(data.into()).map_err(|e| match e {}).boxed()
}

/// An empty [`TestBody`].
pub fn empty() -> TestBody {
    Empty::new().map_err(|e| match e {}).boxed()
}

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
}

type Handler = Arc<
    dyn Fn(Request<Incoming>) -> Pin<Box<dyn Future<Output = Response<TestBody>> + Send>>
        + Send
        + Sync,
>;

/// One client per URL, each on its own connection to courtesy, sending GETs back to back until
/// `end`; every answer must be 200.
pub async fn hammer_until(courtesy: &Courtesy, urls: Vec<String>, end: Instant) {
    let mut clients = Vec::new();
    for url in urls {
        let client = courtesy.client();
        clients.push(tokio::spawn(async move {
            let mut conn = client.connect().await;
            while Instant::now() < end {
                assert_eq!(conn.get(&url).await.status, StatusCode::OK);
            }
        }));
    }
    for c in clients {
        c.await.unwrap();
    }
}

/// A scripted HTTP/1.1 origin on a loopback address. It records every arrival and how many
/// requests it has in flight at most.
pub struct Origin {
    /// Where it listens.
    pub addr: SocketAddr,
    arrivals: Arc<Mutex<Vec<Arrival>>>,
    in_flight: Arc<AtomicUsize>,
    max_in_flight: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl Origin {
    /// An origin on `ip:0` that answers 200 "ok" to everything.
    pub async fn ok(ip: &str) -> Origin {
        Origin::start(ip, |_req| async { Response::new(full("ok")) }).await
    }

    /// An origin on `ip:0` whose answers come from `handler`.
    pub async fn start<F, Fut>(ip: &str, handler: F) -> Origin
    where
        F: Fn(Request<Incoming>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Response<TestBody>> + Send + 'static,
    {
        Origin::serve(ip, None, handler).await
    }

    /// An https origin on `ip:0` presenting `tls`'s certificate.
    pub async fn start_tls<F, Fut>(ip: &str, tls: Arc<rustls::ServerConfig>, handler: F) -> Origin
    where
        F: Fn(Request<Incoming>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Response<TestBody>> + Send + 'static,
    {
        Origin::serve(ip, Some(tokio_rustls::TlsAcceptor::from(tls)), handler).await
    }

    async fn serve<F, Fut>(ip: &str, tls: Option<tokio_rustls::TlsAcceptor>, handler: F) -> Origin
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
        let (a, i, m) = (arrivals.clone(), in_flight.clone(), max_in_flight.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
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
                            });
                            let now = i.fetch_add(1, Ordering::SeqCst) + 1;
                            m.fetch_max(now, Ordering::SeqCst);
                            let response = handler(req).await;
                            i.fetch_sub(1, Ordering::SeqCst);
                            Ok::<_, Infallible>(response)
                        }
                    });
                    let http = hyper::server::conn::http1::Builder::new();
                    match tls {
                        Some(acceptor) => {
                            if let Ok(stream) = acceptor.accept(stream).await {
                                let _ = http.serve_connection(TokioIo::new(stream), service).await;
                            }
                        }
                        None => {
                            let _ = http.serve_connection(TokioIo::new(stream), service).await;
                        }
                    }
                });
            }
        });
        Origin {
            addr,
            arrivals,
            in_flight,
            max_in_flight,
            task,
        }
    }

    /// `http://addr` + `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// Every arrival so far.
    pub fn arrivals(&self) -> Vec<Arrival> {
        self.arrivals.lock().unwrap().clone()
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

/// Turns robots.txt off in a test config that does not mention `obey_robots`: most tests count
/// what reaches their origin exactly, and a robots.txt fetch would be one more request. The tests
/// of robots.txt say `obey_robots = true`.
fn robots_off_unless_asked(
    mut config: courtesy::config::Config,
    text: &str,
) -> courtesy::config::Config {
    if text.contains("obey_robots") {
        return config;
    }
    let off = |p: &Arc<courtesy::config::HostPolicy>| {
        Arc::new(courtesy::config::HostPolicy {
            obey_robots: false,
            ..p.as_ref().clone()
        })
    };
    config.defaults = off(&config.defaults);
    for rule in &mut config.hosts {
        rule.policy = off(&rule.policy);
    }
    config
}

/// courtesy running in this test process.
pub struct Courtesy {
    /// The proxy port.
    pub addr: SocketAddr,
    /// The admin port.
    pub admin: SocketAddr,
    /// Where its CA lives.
    pub state_dir: std::path::PathBuf,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<anyhow::Result<()>>>,
}

impl Courtesy {
    /// Starts courtesy with `toml` as its config file (listen addresses are replaced by
    /// `127.0.0.1:0`; `state_dir` is a fresh temporary directory).
    pub async fn start(toml: &str) -> Courtesy {
        Courtesy::start_in(toml, &temp_dir("state")).await
    }

    /// Like [`Courtesy::start`], with state (the local CA) kept in `state_dir`.
    pub async fn start_in(toml: &str, state_dir: &std::path::Path) -> Courtesy {
        let config = courtesy::config::Config::parse(toml, "test.toml").expect("test config");
        Courtesy::start_with(robots_off_unless_asked(config, toml), state_dir).await
    }

    /// Starts courtesy from a config file (so that it can be reloaded), state in `state_dir`.
    pub async fn start_file(path: &std::path::Path, state_dir: &std::path::Path) -> Courtesy {
        let config = courtesy::config::Config::load(path).expect("test config file");
        let text = std::fs::read_to_string(path).unwrap();
        Courtesy::start_with(robots_off_unless_asked(config, &text), state_dir).await
    }

    async fn start_with(
        mut config: courtesy::config::Config,
        state_dir: &std::path::Path,
    ) -> Courtesy {
        config.proxy.state_dir = state_dir.to_path_buf();
        // Make the CA before returning, so tests can read ca.pem at once (run() then loads it).
        courtesy::tls::LocalCa::load_or_create(state_dir).expect("local CA");
        let proxy = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let admin = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (addr, admin_addr) = (proxy.local_addr().unwrap(), admin.local_addr().unwrap());
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(courtesy::run(
            courtesy::Listeners { proxy, admin },
            config,
            async move {
                let _ = stopped.await;
            },
        ));
        Courtesy {
            addr,
            admin: admin_addr,
            state_dir: state_dir.to_path_buf(),
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// The path of courtesy's CA certificate (what `courtesy ca` prints).
    pub fn ca_path(&self) -> std::path::PathBuf {
        self.state_dir.join("ca.pem")
    }

    /// Signals shutdown and returns the run's result.
    pub async fn shutdown(mut self) -> anyhow::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.task.take() {
            Some(task) => task.await.expect("courtesy task"),
            None => Ok(()),
        }
    }

    /// Signals shutdown without waiting; returns the task to await.
    pub fn begin_shutdown(mut self) -> JoinHandle<anyhow::Result<()>> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.take().expect("not yet shut down")
    }

    /// A client that sends its requests through this courtesy.
    pub fn client(&self) -> ProxyClient {
        ProxyClient { proxy: self.addr }
    }
}

impl Drop for Courtesy {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// A response as the client got it, body collected.
#[derive(Debug)]
pub struct Got {
    /// Status code.
    pub status: StatusCode,
    /// Headers.
    pub headers: HeaderMap,
    /// The whole body.
    pub body: Bytes,
}

impl Got {
    /// A header as a string ("" when missing).
    pub fn header(&self, name: &str) -> String {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    }
}

/// Sends requests through a proxy, as HTTP_PROXY clients do: absolute-form request lines.
#[derive(Debug, Clone, Copy)]
pub struct ProxyClient {
    /// The proxy's address.
    pub proxy: SocketAddr,
}

/// A kept-alive connection to the proxy.
pub struct ProxyConn {
    sender: hyper::client::conn::http1::SendRequest<TestBody>,
    task: JoinHandle<()>,
}

impl Drop for ProxyConn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ProxyClient {
    /// Opens a new connection to the proxy.
    pub async fn connect(&self) -> ProxyConn {
        let stream = TcpStream::connect(self.proxy).await.unwrap();
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        let task = tokio::spawn(async move {
            let _ = conn.await;
        });
        ProxyConn { sender, task }
    }

    /// GET `url` on a fresh connection.
    pub async fn get(&self, url: &str) -> Got {
        self.connect().await.get(url).await
    }

    /// Sends `req` on a fresh connection.
    pub async fn send(&self, req: Request<TestBody>) -> Got {
        self.connect().await.send(req).await
    }
}

impl ProxyConn {
    /// GET `url` on this connection.
    pub async fn get(&mut self, url: &str) -> Got {
        self.send(Request::get(url).body(empty()).unwrap()).await
    }

    /// Sends `req` on this connection and collects the response.
    pub async fn send(&mut self, req: Request<TestBody>) -> Got {
        self.sender.ready().await.unwrap();
        let response = self.sender.send_request(req).await.unwrap();
        let (parts, body) = response.into_parts();
        let body = body.collect().await.unwrap().to_bytes();
        Got {
            status: parts.status,
            headers: parts.headers,
            body,
        }
    }

    /// Sends `req` and returns the streaming response.
    pub async fn send_streaming(&mut self, req: Request<TestBody>) -> Response<Incoming> {
        self.sender.ready().await.unwrap();
        self.sender.send_request(req).await.unwrap()
    }
}

/// A plain client straight to an origin (no proxy), for comparisons.
pub fn direct_client(
) -> hyper_util::client::legacy::Client<hyper_util::client::legacy::connect::HttpConnector, TestBody>
{
    hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .build(hyper_util::client::legacy::connect::HttpConnector::new())
}

/// Sends `method` to `url` directly (no proxy) with an optional bearer token and body; returns the
/// status and body text.
pub async fn admin_call(
    method: &str,
    url: &str,
    token: Option<&str>,
    body: &str,
) -> (StatusCode, String) {
    let mut req = Request::builder().method(method).uri(url);
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let req = req.body(full(body.to_string())).unwrap();
    let response = direct_client().request(req).await.unwrap();
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// GETs `url` directly (no proxy) and returns the body as text.
pub async fn fetch_direct(url: &str) -> String {
    let response = direct_client().get(url.parse().unwrap()).await.unwrap();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8_lossy(&body).into_owned()
}

/// Waits up to `limit` for `cond`, checking every 10 ms (test code only).
pub async fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cond()
}

/// The RSS high-water mark of a process, in KiB, from /proc.
pub fn vm_hwm_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// A command for a real client program with the machine's proxy variables cleared (so neither
/// NO_PROXY nor an inherited HTTP_PROXY can bypass or redirect what the test sets), killed when
/// dropped.
pub fn client_command(program: &str) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(program);
    for var in [
        "NO_PROXY",
        "no_proxy",
        "HTTP_PROXY",
        "http_proxy",
        "HTTPS_PROXY",
        "https_proxy",
        "ALL_PROXY",
        "all_proxy",
    ] {
        cmd.env_remove(var);
    }
    cmd.kill_on_drop(true);
    cmd
}

/// Runs a client command (see [`client_command`]) to its end and returns its stdout; fails the
/// test, with both outputs, unless it exited successfully.
pub async fn run_to_success(cmd: &mut tokio::process::Command) -> String {
    let program = cmd.as_std().get_program().to_string_lossy().into_owned();
    let out = cmd.output().await.unwrap_or_else(|e| {
        panic!("cannot run {program} ({e}): `scripts/test` installs every client the tests use")
    });
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{program} failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// A fresh, empty temporary directory for one test.
pub fn temp_dir(tag: &str) -> std::path::PathBuf {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "courtesy-test-{tag}-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A certificate authority minted at test time, standing in for a public CA in front of test
/// https origins.
pub struct TestCa {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    /// The CA certificate in PEM.
    pub pem: String,
}

impl TestCa {
    /// A new CA.
    pub fn new() -> TestCa {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign];
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "courtesy test origin CA");
        let cert = params.self_signed(&key).unwrap();
        TestCa {
            pem: cert.pem(),
            issuer: rcgen::Issuer::new(params, key),
        }
    }

    /// Writes the CA certificate to `dir/name` and returns the path.
    pub fn write(&self, dir: &std::path::Path, name: &str) -> std::path::PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, &self.pem).unwrap();
        path
    }

    /// A server config for `names` (DNS names or IP literals), signed by this CA.
    pub fn server_config(&self, names: &[&str]) -> Arc<rustls::ServerConfig> {
        let key = rcgen::KeyPair::generate().unwrap();
        let params =
            rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let key = rustls_pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
        let config = rustls::ServerConfig::builder_with_provider(courtesy::tls::provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.der().clone()], key)
            .unwrap();
        Arc::new(config)
    }
}

/// A rustls client config trusting exactly the PEM certificate at `ca`.
pub fn client_tls_trusting(ca: &std::path::Path) -> rustls::ClientConfig {
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pki_types::CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    rustls::ClientConfig::builder_with_provider(courtesy::tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth()
}
