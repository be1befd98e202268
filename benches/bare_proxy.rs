//! The floor of the load benches (issue 40): a bare hyper 1.x forward proxy with nothing of
//! courtesy in it, so that `benches/load.sh` and `benches/https_load.sh` can show what hyper's
//! HTTP/1 machinery alone costs beside nginx, Squid and courtesy.
//!
//! What it does, and nothing more: a tokio accept loop, hyper's http1 server, absolute-form
//! requests forwarded to the origin through hyper-util's pooled legacy `Client` with the body
//! streamed both ways, hop-by-hop headers dropped, `Via: 1.1 bare-hyper` on the response (the
//! benches check each case's Via to know the requests really went through it). With `--ca-dir`
//! it also intercepts `CONNECT`: it answers 200, does TLS with a leaf certificate for the CONNECT
//! host minted from the CA in that directory (courtesy's `state_dir`: `ca.pem`, `ca-key.pem`; one
//! ECDSA P-256 leaf key, leaves cached per host, as courtesy does), serves http1 inside and sends
//! each request to `https://HOST:PORT` through the same pooled client (rustls with ring; the
//! roots are `--upstream-ca` when given, else the webpki roots).
//!
//! Usage: `bare_proxy --listen 127.0.0.1:18170 [--ca-dir DIR] [--upstream-ca ca.pem]`
//! (`cargo bench --bench bare_proxy -- ARGS` runs it too). It runs until killed.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::{anyhow, Context as _};
use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode, Uri};
use http_body_util::{Either, Empty};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rcgen::{CertificateParams, Issuer, KeyPair};
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

mod common;

type Body = Either<Incoming, Empty<Bytes>>;
type Pool = Client<HttpsConnector<HttpConnector>, Incoming>;

/// The interception half: the CA, the one leaf key, and the TLS configurations per host.
struct Interceptor {
    issuer: Issuer<'static, KeyPair>,
    leaf_key: KeyPair,
    leaves: Mutex<HashMap<String, Arc<ServerConfig>>>,
}

impl Interceptor {
    fn load(dir: &std::path::Path) -> anyhow::Result<Self> {
        let key = KeyPair::from_pem(&std::fs::read_to_string(dir.join("ca-key.pem"))?)?;
        let cert = CertificateDer::from_pem_file(dir.join("ca.pem"))?;
        let issuer = Issuer::from_ca_cert_der(&cert, key)?;
        let leaf_key = KeyPair::generate()?;
        let leaves = Mutex::new(HashMap::new());
        Ok(Self {
            issuer,
            leaf_key,
            leaves,
        })
    }

    /// The TLS server configuration for `host`, minted on its first CONNECT.
    fn config_for(&self, host: &str) -> anyhow::Result<Arc<ServerConfig>> {
        let mut leaves = self.leaves.lock().map_err(|_| anyhow!("poisoned"))?;
        if let Some(config) = leaves.get(host) {
            return Ok(config.clone());
        }
        let cert = CertificateParams::new(vec![host.to_string()])?
            .signed_by(&self.leaf_key, &self.issuer)?;
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.leaf_key.serialize_der()));
        let mut config = ServerConfig::builder_with_provider(ring_provider())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(vec![cert.der().clone()], key)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let config = Arc::new(config);
        leaves.insert(host.to_string(), config.clone());
        Ok(config)
    }
}

fn ring_provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Headers meaningful for one hop only (RFC 9110 section 7.6.1), and those `Connection` names.
fn drop_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in [
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    ] {
        headers.remove(name);
    }
}

/// Sends `req` to `uri` through the pool and relays the answer, its body streamed.
async fn forward(pool: &Pool, mut req: Request<Incoming>, uri: Uri) -> Response<Body> {
    *req.uri_mut() = uri;
    drop_hop_by_hop(req.headers_mut());
    match pool.request(req).await {
        Ok(response) => {
            let mut response = response.map(Either::Left);
            drop_hop_by_hop(response.headers_mut());
            response
                .headers_mut()
                .insert(header::VIA, HeaderValue::from_static("1.1 bare-hyper"));
            response
        }
        Err(_) => status(StatusCode::BAD_GATEWAY),
    }
}

fn status(code: StatusCode) -> Response<Body> {
    let mut response = Response::new(Either::Right(Empty::new()));
    *response.status_mut() = code;
    response
}

/// The outer connection's requests: absolute-form forwarded, CONNECT intercepted.
async fn outer(
    pool: Pool,
    tls: Option<Arc<Interceptor>>,
    req: Request<Incoming>,
) -> Response<Body> {
    if req.method() != Method::CONNECT {
        let uri = req.uri().clone();
        return match uri.scheme_str() {
            Some("http") => forward(&pool, req, uri).await,
            _ => status(StatusCode::BAD_REQUEST),
        };
    }
    let (Some(tls), Some(authority)) = (tls, req.uri().authority().cloned()) else {
        return status(StatusCode::METHOD_NOT_ALLOWED);
    };
    let Ok(config) = tls.config_for(authority.host()) else {
        return status(StatusCode::BAD_GATEWAY);
    };
    tokio::spawn(async move {
        let Ok(upgraded) = hyper::upgrade::on(req).await else {
            return;
        };
        let Ok(stream) = TlsAcceptor::from(config)
            .accept(TokioIo::new(upgraded))
            .await
        else {
            return;
        };
        let service = service_fn(move |req: Request<Incoming>| {
            let (pool, authority) = (pool.clone(), authority.clone());
            async move {
                let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
                match Uri::builder()
                    .scheme("https")
                    .authority(authority)
                    .path_and_query(path)
                    .build()
                {
                    Ok(uri) => Ok::<_, hyper::Error>(forward(&pool, req, uri).await),
                    Err(_) => Ok(status(StatusCode::BAD_REQUEST)),
                }
            }
        });
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(TokioIo::new(stream), service)
            .await;
    });
    status(StatusCode::OK)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let (mut listen, mut ca_dir, mut upstream_ca) = (None, None, None);
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
    while let Some(arg) = args.next() {
        let value = args.next().ok_or_else(|| anyhow!("{arg} needs a value"))?;
        match arg.as_str() {
            "--listen" => {
                listen = Some(
                    value
                        .parse::<SocketAddr>()
                        .context("--listen: not IP:port")?,
                )
            }
            "--ca-dir" => ca_dir = Some(PathBuf::from(value)),
            "--upstream-ca" => upstream_ca = Some(PathBuf::from(value)),
            _ => return Err(anyhow!("unknown argument {arg}")),
        }
    }
    let listen = listen.ok_or_else(|| anyhow!("--listen IP:port is required"))?;
    let tls = ca_dir
        .map(|dir| Interceptor::load(&dir).map(Arc::new))
        .transpose()?;
    let mut roots = RootCertStore::from_iter(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if let Some(file) = upstream_ca {
        for cert in CertificateDer::pem_file_iter(&file)? {
            roots.add(cert?)?;
        }
    }
    let client_tls = ClientConfig::builder_with_provider(ring_provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(client_tls)
        .https_or_http()
        .enable_http1()
        .build();
    let pool: Pool = Client::builder(TokioExecutor::new()).build(connector);
    let listener = TcpListener::bind(listen).await?;
    loop {
        let stream = common::accept::next_connection(&listener).await;
        let (pool, tls) = (pool.clone(), tls.clone());
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let (pool, tls) = (pool.clone(), tls.clone());
                async move { Ok::<_, hyper::Error>(outer(pool, tls, req).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades()
                .await;
        });
    }
}
