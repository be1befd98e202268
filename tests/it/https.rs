//! End-to-end HTTPS: interception with courtesy's CA, pacing inside kept-alive TLS connections,
//! verified upstreams, the CA's life cycle, tunnel mode, and real clients (reqwest, curl, Python
//! requests and httpx). Origins present certificates from a test CA minted at run time, which
//! courtesy trusts through `[proxy] upstream_ca`.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use crate::support::*;
use http::Response;
use tokio::time::Instant;

/// A megabyte of bytes that are not all the same.
fn big_body() -> Vec<u8> {
    (0..1024 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect()
}

struct Https {
    origin: Origin,
    test_ca: TestCa,
    dir: std::path::PathBuf,
}

/// An https origin on 127.0.0.1 answering `/big` with [`big_body`], `/created` with 201, and
/// everything else with "secure".
async fn https_origin() -> Https {
    let test_ca = TestCa::new();
    let tls = test_ca.server_config(&["localhost", "127.0.0.1"]);
    let origin = Origin::start_tls("127.0.0.1", tls, |req| async move {
        match req.uri().path() {
            "/big" => Response::new(full(big_body())),
            "/created" => Response::builder().status(201).body(full("made")).unwrap(),
            _ => Response::new(full("secure")),
        }
    })
    .await;
    Https {
        origin,
        test_ca,
        dir: temp_dir("https"),
    }
}

impl Https {
    /// courtesy trusting this origin's CA, with `extra` appended to its config.
    async fn courtesy(&self, extra: &str) -> Courtesy {
        let ca = self.test_ca.write(&self.dir, "origin-ca.pem");
        let config = format!(
            "[proxy]\nupstream_ca = \"{}\"\nconnect_ports = [{}]\n{extra}",
            ca.display(),
            self.origin.addr.port()
        );
        Courtesy::start(&config).await
    }

    fn url(&self, path: &str) -> String {
        format!("https://{}{}", self.origin.addr, path)
    }
}

fn reqwest_client(courtesy: &Courtesy, http2: bool) -> reqwest::Client {
    let mut tls = client_tls_trusting(&courtesy.ca_path());
    if http2 {
        tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    }
    reqwest::Client::builder()
        .proxy(reqwest::Proxy::all(format!("http://{}", courtesy.addr)).unwrap())
        .tls_backend_preconfigured(tls)
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reqwest_and_curl_get_byte_identical_bodies_through_interception() {
    let https = https_origin().await;
    let courtesy = https
        .courtesy("[defaults]\nrate = 100\nburst = 10\nconcurrency = 4\n")
        .await;
    for http2 in [false, true] {
        let client = reqwest_client(&courtesy, http2);
        let got = client.get(https.url("/big")).send().await.unwrap();
        assert_eq!(got.status(), 200);
        if http2 {
            assert_eq!(
                got.version(),
                http::Version::HTTP_2,
                "the client offered h2 by ALPN"
            );
        }
        assert!(got.headers()["via"].to_str().unwrap().contains("courtesy"));
        assert!(
            got.bytes().await.unwrap()[..] == big_body()[..],
            "body differs (http2: {http2})"
        );
        let created = client.get(https.url("/created")).send().await.unwrap();
        assert_eq!(created.status(), 201);
    }

    let out_file = https.dir.join("curl-body");
    run_to_success(
        client_command("curl")
            .args(["-sS", "--fail", "--cacert"])
            .arg(courtesy.ca_path())
            .args(["-x", &format!("http://{}", courtesy.addr), "-o"])
            .arg(&out_file)
            .arg(https.url("/big")),
    )
    .await;
    assert!(
        std::fs::read(&out_file).unwrap() == big_body(),
        "curl's body differs"
    );
    assert_eq!(https.origin.count(), 5);
    // Every request carried the Host of the CONNECT target.
    for a in https.origin.arrivals() {
        assert_eq!(a.headers["host"], https.origin.addr.to_string().as_str());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_inside_one_kept_alive_tls_connection_are_paced() {
    let https = https_origin().await;
    let courtesy = https.courtesy("[defaults]\nrate = 2\nburst = 1\n").await;
    let client = reqwest_client(&courtesy, false);
    for i in 0..10 {
        let got = client
            .get(https.url(&format!("/page/{i}")))
            .send()
            .await
            .unwrap();
        assert_eq!(got.status(), 200);
        got.bytes().await.unwrap();
    }
    let at = https.origin.arrival_times();
    assert_eq!(at.len(), 10);
    let span = at[9].duration_since(at[0]);
    // Nine gaps of 0.5 s: the bucket, not the tunnel, paced these.
    assert!(
        span >= Duration::from_millis(4400),
        "10 requests in {span:?}"
    );
    // Invariant 1 in every window, rather than gap by gap: one arrival the scheduler of a busy
    // machine delays brings the next one closer to it without anything having left early.
    for (window, most) in [(1000, 1 + 2), (2000, 1 + 4), (3000, 1 + 6)] {
        let seen = https.origin.most_within_any(Duration::from_millis(window));
        assert!(seen <= most, "{seen} requests within {window} ms");
    }
    let admin = fetch_direct(&courtesy.admin_url("/metrics")).await;
    // reqwest may open a second connection while the first goes back to its pool; its CONNECT
    // then finds the leaf in the cache: one key generation however many CONNECTs.
    assert!(
        admin.contains("courtesy_leaf_certificates_minted_total 1\n"),
        "{admin}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_over_https_cools_the_host_down_as_over_http() {
    let test_ca = TestCa::new();
    let tls = test_ca.server_config(&["127.0.0.1"]);
    let origin = Origin::start_tls("127.0.0.1", tls, |_req| async {
        come_back_later(429, "20", "slow down")
    })
    .await;
    let https = Https {
        origin,
        test_ca,
        dir: temp_dir("https429"),
    };
    // "reject": a window this short (20 s) is otherwise waited out (on_cooldown = "auto").
    let courtesy = https
        .courtesy("[defaults]\nrate = 50\nburst = 5\non_cooldown = \"reject\"\n")
        .await;
    let client = reqwest_client(&courtesy, false);
    let first = client.get(https.url("/a")).send().await.unwrap();
    assert_eq!(first.status(), 429);
    let asked = Instant::now();
    let local = client.get(https.url("/b")).send().await.unwrap();
    assert!(asked.elapsed() < Duration::from_millis(200));
    assert_eq!(local.status(), 429);
    let status = local.headers()["proxy-status"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        status.contains("cooling down") && status.contains("answered 429"),
        "{status}"
    );
    let retry_after: u64 = local.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((19..=20).contains(&retry_after));
    assert_eq!(https.origin.count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_certificate_no_root_trusts_is_a_502_and_no_request_leaves() {
    let https = https_origin().await;
    // No upstream_ca: the test CA is trusted by nobody.
    let config = format!(
        "[proxy]\nconnect_ports = [{}]\n[defaults]\nrate = 50\n",
        https.origin.addr.port()
    );
    let courtesy = Courtesy::start(&config).await;
    let client = reqwest_client(&courtesy, false);
    let got = client.get(https.url("/secret")).send().await.unwrap();
    assert_eq!(got.status(), 502);
    let status = got.headers()["proxy-status"].to_str().unwrap().to_string();
    assert!(status.contains("error=tls_certificate_error"), "{status}");
    assert!(status.contains("details="), "{status}");
    assert_eq!(
        https.origin.count(),
        0,
        "no request may reach an unverified upstream"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ca_is_created_once_and_reused_after_a_restart() {
    let dir = temp_dir("ca-restart");
    let first = Courtesy::start_in("", &dir).await;
    let pem = std::fs::read_to_string(dir.join("ca.pem")).unwrap();
    let mode = std::fs::metadata(dir.join("ca-key.pem"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let served = fetch_direct(&first.admin_url("/ca.pem")).await;
    assert_eq!(served, pem, "the admin port serves the certificate");
    first.shutdown().await.unwrap();
    let second = Courtesy::start_in("", &dir).await;
    assert_eq!(std::fs::read_to_string(dir.join("ca.pem")).unwrap(), pem);
    assert_eq!(fetch_direct(&second.admin_url("/ca.pem")).await, pem);
    assert!(!pem.contains("PRIVATE"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_requests_and_httpx_work_with_the_ca_as_courtesy_ca_says() {
    let https = https_origin().await;
    let courtesy = https.courtesy("[defaults]\nrate = 50\nburst = 5\n").await;
    let script = r#"
import os, sys, requests, httpx
url = sys.argv[1]
r = requests.get(url)
print("requests", r.status_code, r.text, r.headers.get("Via"))
with httpx.Client() as c:
    r = c.get(url)
    print("httpx", r.status_code, r.text)
"#;
    let ca = courtesy.ca_path();
    let stdout = run_to_success(
        client_command("python3")
            .env("HTTPS_PROXY", format!("http://{}", courtesy.addr))
            .env("REQUESTS_CA_BUNDLE", &ca)
            .env("SSL_CERT_FILE", &ca)
            .args(["-c", script, &https.url("/py")]),
    )
    .await;
    assert!(
        stdout.contains("requests 200 secure 1.1 courtesy"),
        "{stdout}"
    );
    assert!(stdout.contains("httpx 200 secure"), "{stdout}");
    assert_eq!(https.origin.count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tunnel_mode_paces_connects_not_requests() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // A TCP echo origin that records when each connection arrives.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let acc = accepted.clone();
    let echo = tokio::spawn(async move {
        for _ in 0..3 {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            acc.lock().unwrap().push(Instant::now());
            tokio::spawn(async move {
                let mut buf = [0u8; 64];
                while let Ok(n) = s.read(&mut buf).await {
                    if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    let config = format!(
        "[proxy]\nconnect_ports = [{}]\n[defaults]\nrate = 2\nburst = 1\nconcurrency = 5\nhttps = \"tunnel\"\n",
        addr.port()
    );
    let courtesy = Courtesy::start(&config).await;
    let mut streams = Vec::new();
    for _ in 0..3 {
        let (mut s, head) = open_tunnel(courtesy.addr, addr).await;
        assert!(head.starts_with("HTTP/1.1 200"));
        // TLS-looking bytes: in tunnel mode they are copied, not decrypted.
        s.write_all(b"\x16\x03\x01hello").await.unwrap();
        streams.push(s);
    }
    for s in &mut streams {
        let mut buf = [0u8; 8];
        s.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"\x16\x03\x01hello");
    }
    let at = accepted.lock().unwrap().clone();
    assert_eq!(at.len(), 3);
    let span = at[2].duration_since(at[0]);
    assert!(
        span >= Duration::from_millis(950) && span < Duration::from_secs(3),
        "{span:?}"
    );
    echo.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_undici_proxy_agent_works_for_http_and_https() {
    let https = https_origin().await;
    let plain = Origin::ok("127.0.0.1").await;
    let config = format!(
        "[proxy]\nupstream_ca = \"{}\"\nconnect_ports = [{}, {}]\n[defaults]\nrate = 2\nburst = 1\n",
        https.test_ca.write(&https.dir, "origin-ca.pem").display(),
        https.origin.addr.port(),
        plain.addr.port()
    );
    let courtesy = Courtesy::start(&config).await;
    let lines = undici_through(
        courtesy.addr,
        &courtesy.ca_path(),
        &[plain.url("/a"), plain.url("/b"), https.url("/c")],
    )
    .await;
    assert_eq!(lines, vec!["200 2", "200 2", "200 6"]);
    // undici tunnels http:// through CONNECT too: courtesy still paced each request.
    let at = plain.arrival_times();
    assert_eq!(at.len(), 2);
    assert!(at[1].duration_since(at[0]) >= Duration::from_millis(450));
    assert_eq!(https.origin.count(), 1);
}
