//! End-to-end HTTP/2 to origins (`upstream_http2`, issue 39): what version reaches an h2-only, an
//! h1-only and a both-ways origin, one connection carrying many requests, the fallback to
//! HTTP/1.1 after a 421 (remembered), REFUSED_STREAM and GOAWAY as overload feedback with one
//! resend, SETTINGS_MAX_CONCURRENT_STREAMS as a ceiling, and the pacing invariants (rate,
//! concurrency, FIFO, cooldown) over HTTP/1.1 and h2 alike. Clients reach the https origins
//! through interception, as crawlers do.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::support::*;
use http::{Response, Version};
use tokio::time::Instant;

/// A test CA, the origin's server config from it, and where courtesy finds the CA.
struct Tls {
    ca: TestCa,
    dir: PathBuf,
}

impl Tls {
    fn new() -> Tls {
        Tls {
            ca: TestCa::new(),
            dir: temp_dir("http2"),
        }
    }

    fn server(&self) -> Arc<rustls::ServerConfig> {
        self.ca.server_config(&["localhost", "127.0.0.1"])
    }

    /// An h2-only origin on 127.0.0.1 with this CA's certificate, answering with `handler`.
    async fn h2_origin<F, Fut>(&self, handler: F) -> Origin
    where
        F: Fn(http::Request<hyper::body::Incoming>) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Response<TestBody>> + Send + 'static,
    {
        let h2 = Speaks::H2 { max_streams: None };
        Origin::start_speaking("127.0.0.1", self.server(), h2, handler).await
    }

    /// courtesy trusting the test CA, allowing CONNECT to `port`, with `extra` appended.
    async fn courtesy(&self, port: u16, extra: &str) -> Courtesy {
        let ca = self.ca.write(&self.dir, "origin-ca.pem");
        let config = format!(
            "[proxy]\nupstream_ca = \"{}\"\nconnect_ports = [{port}]\n{extra}",
            ca.display()
        );
        Courtesy::start(&config).await
    }
}

/// A client that goes through courtesy (HTTP/1.1 to it, interception for https).
fn client(courtesy: &Courtesy) -> reqwest::Client {
    let tls = client_tls_trusting(&courtesy.ca_path());
    reqwest::Client::builder()
        .proxy(reqwest::Proxy::all(format!("http://{}", courtesy.addr)).unwrap())
        .tls_backend_preconfigured(tls)
        .build()
        .unwrap()
}

/// GETs `url` and returns its status and body.
async fn get(client: &reqwest::Client, url: &str) -> (u16, String) {
    let got = client.get(url).send().await.unwrap();
    let status = got.status().as_u16();
    (status, got.text().await.unwrap())
}

/// GETs every url at once, each answer asserted 200.
async fn get_all_ok(client: &reqwest::Client, urls: Vec<String>) {
    let tasks: Vec<_> = urls
        .into_iter()
        .map(|url| {
            let client = client.clone();
            tokio::spawn(async move { get(&client, &url).await })
        })
        .collect();
    for task in tasks {
        let (status, body) = task.await.unwrap();
        assert_eq!(status, 200, "{body}");
    }
}

/// The host's `protocol` in `/hosts`: its version and why it fell back, if it did.
async fn protocol_shown(courtesy: &Courtesy, key: &str) -> (String, Option<String>) {
    let (status, page) = courtesy.host_page(key).await;
    assert_eq!(status, 200, "{page}");
    let view: serde_json::Value = serde_json::from_str(&page).unwrap();
    let protocol = &view["protocol"];
    (
        protocol["version"].as_str().unwrap_or_default().to_string(),
        protocol["fell_back"].as_str().map(str::to_string),
    )
}

const ROOMY: &str = "[defaults]\nrate = 1000\nburst = 100\nconcurrency = 8\nobey_robots = false\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_h2_only_origin_gets_every_request_over_one_h2_connection() {
    let tls = Tls::new();
    let origin = tls
        .h2_origin(|_req| async { Response::new(full("ok")) })
        .await;
    let courtesy = tls.courtesy(origin.addr.port(), ROOMY).await;
    let client = client(&courtesy);
    // The first request makes the connection; the next fifty, eight at a time, share it.
    assert_eq!(get(&client, &origin.https_url("/first")).await.0, 200);
    let urls = (0..50)
        .map(|i| origin.https_url(&format!("/{i}")))
        .collect();
    get_all_ok(&client, urls).await;
    assert_eq!(origin.count(), 51);
    assert!(
        origin.versions().iter().all(|v| *v == Version::HTTP_2),
        "{:?}",
        origin.versions()
    );
    assert_eq!(
        origin.connections(),
        1,
        "one connection carries the streams"
    );
    // RFC 9113 8.3.1: the host in `:authority` alone (nginx refuses a `Host` beside it).
    assert!(origin
        .arrivals()
        .iter()
        .all(|a| !a.headers.contains_key("host")));
    let key = origin.addr.to_string();
    assert_eq!(
        protocol_shown(&courtesy, &key).await,
        ("h2".to_string(), None)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_h1_only_origin_and_upstream_http2_off_stay_on_http11() {
    let tls = Tls::new();
    let h1 = Origin::start_speaking("127.0.0.1", tls.server(), Speaks::Http1, |_req| async {
        Response::new(full("ok"))
    })
    .await;
    let courtesy = tls.courtesy(h1.addr.port(), ROOMY).await;
    let urls = (0..4).map(|i| h1.https_url(&format!("/{i}"))).collect();
    get_all_ok(&client(&courtesy), urls).await;
    assert!(h1.versions().iter().all(|v| *v == Version::HTTP_11));
    // Offered h2 and answered over HTTP/1.1, the request still names its host in `Host`.
    for a in h1.arrivals() {
        assert_eq!(a.headers["host"], h1.addr.to_string().as_str());
    }
    let key = h1.addr.to_string();
    assert_eq!(
        protocol_shown(&courtesy, &key).await,
        ("http/1.1".to_string(), None)
    );

    // An origin that speaks both: auto gets h2 (the origin's pick), off stays on HTTP/1.1.
    for (setting, expected) in [("auto", Version::HTTP_2), ("off", Version::HTTP_11)] {
        let both = Origin::start_speaking("127.0.0.1", tls.server(), Speaks::Both, |_req| async {
            Response::new(full("ok"))
        })
        .await;
        let extra =
            format!("{ROOMY}[[host]]\nmatch = \"127.0.0.1\"\nupstream_http2 = \"{setting}\"\n");
        let courtesy = tls.courtesy(both.addr.port(), &extra).await;
        let urls = (0..4).map(|i| both.https_url(&format!("/{i}"))).collect();
        get_all_ok(&client(&courtesy), urls).await;
        assert_eq!(
            both.versions(),
            vec![expected; 4],
            "upstream_http2 = {setting}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_421_over_h2_falls_back_to_http11_resends_and_is_remembered() {
    let tls = Tls::new();
    // A site that opts out of HTTP/2 the way Google's crawler docs describe: 421 over h2.
    let origin =
        Origin::start_speaking("127.0.0.1", tls.server(), Speaks::Both, |req| async move {
            if req.version() == Version::HTTP_2 {
                Response::builder()
                    .status(421)
                    .body(full("not here"))
                    .unwrap()
            } else {
                Response::new(full("over h1"))
            }
        })
        .await;
    let courtesy = tls.courtesy(origin.addr.port(), ROOMY).await;
    let client = client(&courtesy);
    assert_eq!(
        get(&client, &origin.https_url("/a")).await,
        (200, "over h1".to_string()),
        "the request that met the 421 went again over HTTP/1.1"
    );
    assert_eq!(origin.versions(), [Version::HTTP_2, Version::HTTP_11]);
    for path in ["/b", "/c"] {
        assert_eq!(get(&client, &origin.https_url(path)).await.0, 200);
    }
    assert_eq!(
        origin.versions(),
        [
            Version::HTTP_2,
            Version::HTTP_11,
            Version::HTTP_11,
            Version::HTTP_11
        ],
        "the fallback is remembered"
    );
    let (version, why) = protocol_shown(&courtesy, &origin.addr.to_string()).await;
    assert_eq!(version, "http/1.1");
    assert!(why.is_some_and(|w| w.contains("421")));
}

/// The origin refuses the first request's stream (`goaway` false) or sends GOAWAY on the first
/// connection before reading it (`goaway` true), then answers; courtesy cools the host down (1 s,
/// no Retry-After) and sends the request once more after it. Returns when the origin accepted
/// each request it processed.
async fn first_request_refused(goaway: bool) {
    let tls = Tls::new();
    let origin = ScriptedH2::start("127.0.0.1", tls.server(), goaway, move |n| {
        if n == 0 && !goaway {
            H2Move::Refuse
        } else {
            H2Move::Answer(200)
        }
    })
    .await;
    let config = "[defaults]\nrate = 100\nburst = 10\nobey_robots = false\n\
                  backoff_initial_seconds = 1.0\n";
    let courtesy = tls.courtesy(origin.addr.port(), config).await;
    let client = client(&courtesy);
    let started = Instant::now();
    let (status, body) = get(&client, &origin.url("/a")).await;
    assert_eq!(status, 200, "goaway {goaway}: {body}");
    let at = origin.arrival_times();
    // The GOAWAY's request was never accepted by the origin: only its resend was.
    let sent = if goaway { 1 } else { 2 };
    assert_eq!(at.len(), sent, "goaway {goaway}: sent once more, only once");
    let waited = at[sent - 1].duration_since(started);
    assert!(
        waited >= Duration::from_millis(950),
        "goaway {goaway}: the resend waited out the cooldown, not {waited:?}"
    );
    assert_eq!(origin.connections(), if goaway { 2 } else { 1 });
    let (_, page) = courtesy.host_page(&origin.addr.to_string()).await;
    let view: serde_json::Value = serde_json::from_str(&page).unwrap();
    assert_eq!(view["counters"]["failed"], 1, "goaway {goaway}: {page}");
    // Overload, not a fallback: the host stays on h2.
    assert_eq!(view["protocol"]["version"], "h2", "goaway {goaway}: {page}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_stream_is_overload_feedback_and_the_request_goes_once_more() {
    first_request_refused(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn goaway_is_overload_feedback_and_the_request_goes_once_more() {
    first_request_refused(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_h2_protocol_error_falls_back_to_http11_and_the_request_goes_again() {
    let tls = Tls::new();
    let origin = ScriptedH2::start("127.0.0.1", tls.server(), false, |_| H2Move::Break).await;
    let courtesy = tls.courtesy(origin.addr.port(), ROOMY).await;
    let client = client(&courtesy);
    assert_eq!(
        get(&client, &origin.url("/a")).await,
        (200, "h1".to_string()),
        "sent again over HTTP/1.1"
    );
    assert_eq!(
        get(&client, &origin.url("/b")).await,
        (200, "h1".to_string())
    );
    assert_eq!(
        origin.arrival_times().len(),
        3,
        "one h2 stream, then HTTP/1.1"
    );
    let (version, why) = protocol_shown(&courtesy, &origin.addr.to_string()).await;
    assert_eq!(version, "http/1.1");
    assert!(why.is_some_and(|w| w.contains("protocol error")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_origins_max_concurrent_streams_is_a_ceiling_on_concurrency() {
    let tls = Tls::new();
    let origin = Origin::start_speaking(
        "127.0.0.1",
        tls.server(),
        Speaks::H2 {
            max_streams: Some(2),
        },
        |_req| async {
            tokio::time::sleep(Duration::from_millis(200)).await;
            Response::new(full("slow"))
        },
    )
    .await;
    let courtesy = tls.courtesy(origin.addr.port(), ROOMY).await;
    let client = client(&courtesy);
    assert_eq!(get(&client, &origin.https_url("/first")).await.0, 200);
    let urls = (0..8).map(|i| origin.https_url(&format!("/{i}"))).collect();
    get_all_ok(&client, urls).await;
    assert_eq!(origin.count(), 9);
    assert_eq!(
        origin.max_in_flight(),
        2,
        "concurrency 8, the origin allows 2 streams"
    );
    assert_eq!(origin.connections(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_goes_end_to_end_through_a_socks5_and_an_http_parents_tunnel() {
    let (Some(socks), Some(squid)) = (ParentProxy::microsocks(None), ParentProxy::squid(None))
    else {
        assert!(
            std::env::var_os("CI").is_none(),
            "microsocks or squid is missing"
        );
        return;
    };
    let tls = Tls::new();
    let origin = tls
        .h2_origin(|_req| async { Response::new(full("ok")) })
        .await;
    for parent in [
        format!("socks5h://127.0.0.1:{}", socks.port),
        format!("http://127.0.0.1:{}", squid.port),
    ] {
        let before = (origin.count(), origin.connections());
        let extra =
            format!("{ROOMY}[[host]]\nmatch = \"127.0.0.1\"\nupstream_proxy = \"{parent}\"\n");
        let courtesy = tls.courtesy(origin.addr.port(), &extra).await;
        let client = client(&courtesy);
        assert_eq!(
            get(&client, &origin.https_url("/first")).await.0,
            200,
            "{parent}"
        );
        let urls = (0..10)
            .map(|i| origin.https_url(&format!("/{i}")))
            .collect();
        get_all_ok(&client, urls).await;
        assert_eq!(origin.count() - before.0, 11, "{parent}");
        assert_eq!(
            origin.connections() - before.1,
            1,
            "{parent}: one tunnel carries the streams"
        );
    }
    assert!(origin.versions().iter().all(|v| *v == Version::HTTP_2));
}

/// The pacing invariants over an origin that speaks `speaks`: the rate (1), the concurrency cap
/// (2), a cooldown after a 503 without Retry-After (3), FIFO order (4), requests whose client went
/// away never sent (5), and every request answered (6).
async fn pacing_invariants_over(speaks: Speaks) {
    let tls = Tls::new();
    let slow = Duration::from_millis(600);
    let origin = Origin::start_speaking("127.0.0.1", tls.server(), speaks, move |req| async move {
        match req.uri().path() {
            "/busy" => Response::builder().status(503).body(full("busy")).unwrap(),
            "/slow" => {
                tokio::time::sleep(slow).await;
                Response::new(full("slow"))
            }
            _ => Response::new(full("ok")),
        }
    })
    .await;
    let expected = match speaks {
        Speaks::Http1 => Version::HTTP_11,
        _ => Version::HTTP_2,
    };
    let config = "[defaults]\nrate = 5\nburst = 1\nconcurrency = 2\nobey_robots = false\n\
                  backoff_initial_seconds = 1.0\non_cooldown = \"hold\"\n";
    let courtesy = tls.courtesy(origin.addr.port(), config).await;
    let client = client(&courtesy);

    // The host's leaf certificate is minted before the clock matters.
    assert_eq!(get(&client, &origin.https_url("/warm")).await.0, 200);
    // Rate: 10 requests at 5/s with burst 1 span at least 9 intervals of 200 ms.
    let mut tasks = Vec::new();
    for i in 0..10 {
        let (client, url) = (client.clone(), origin.https_url(&format!("/order/{i}")));
        tasks.push(tokio::spawn(async move { get(&client, &url).await }));
        // FIFO: each request (its tunnel and TLS handshake with courtesy included) reaches
        // courtesy before the next is sent, and they still come faster than the rate.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for task in tasks {
        assert_eq!(task.await.unwrap().0, 200);
    }
    let ordered: Vec<Arrival> = origin
        .arrivals()
        .into_iter()
        .filter(|a| a.path.starts_with("/order/"))
        .collect();
    let span = ordered[9].at.duration_since(ordered[0].at);
    assert!(
        span >= Duration::from_millis(1700),
        "{speaks:?}: 10 at 5/s took {span:?}"
    );
    let paths: Vec<&str> = ordered.iter().map(|a| a.path.as_str()).collect();
    let expected_paths: Vec<String> = (0..10).map(|i| format!("/order/{i}")).collect();
    assert_eq!(paths, expected_paths, "{speaks:?}: FIFO");

    // Concurrency: eight slow requests, never more than two at the origin.
    let urls = vec![origin.https_url("/slow"); 8];
    get_all_ok(&client, urls).await;
    assert_eq!(origin.max_in_flight(), 2, "{speaks:?}: concurrency");

    // Cooldown: a 503 without Retry-After holds the next request for backoff_initial_seconds.
    assert_eq!(get(&client, &origin.https_url("/busy")).await.0, 503);
    let before = Instant::now();
    assert_eq!(get(&client, &origin.https_url("/after")).await.0, 200);
    assert!(
        before.elapsed() >= Duration::from_millis(900),
        "{speaks:?}: the next request waited out the cooldown, not {:?}",
        before.elapsed()
    );

    // Cancellation: a request whose client went away before its turn is never sent. A second
    // courtesy at 1/s in front of the same origin: after the warm-up's turn, two kept requests
    // take the turns at 1 s and 2 s, and three more queue behind them and are dropped by their
    // client long before any turn of theirs could come.
    let slow_courtesy = tls
        .courtesy(
            origin.addr.port(),
            "[defaults]\nrate = 1\nburst = 1\nobey_robots = false\n",
        )
        .await;
    let slow_client = self::client(&slow_courtesy);
    assert_eq!(
        get(&slow_client, &origin.https_url("/warm-again")).await.0,
        200
    );
    let mut kept = Vec::new();
    for i in 0..2 {
        let (c, url) = (slow_client.clone(), origin.https_url(&format!("/kept/{i}")));
        kept.push(tokio::spawn(async move { get(&c, &url).await }));
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut dropped = Vec::new();
    for i in 0..3 {
        let (c, url) = (
            slow_client.clone(),
            origin.https_url(&format!("/dropped/{i}")),
        );
        dropped.push(tokio::spawn(async move { get(&c, &url).await }));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    for task in &dropped {
        task.abort();
    }
    for task in kept {
        assert_eq!(task.await.unwrap().0, 200, "{speaks:?}: nothing lost");
    }
    // Past the turns the dropped requests would have had.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let paths = origin.paths();
    assert!(
        !paths.iter().any(|p| p.starts_with("/dropped/")),
        "{speaks:?}: a request whose client went away was sent: {paths:?}"
    );
    assert_eq!(
        paths.iter().filter(|p| p.starts_with("/kept/")).count(),
        2,
        "{speaks:?}: {paths:?}"
    );
    assert!(
        origin.versions().iter().all(|v| *v == expected),
        "{speaks:?}: {:?}",
        origin.versions()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pacing_invariants_hold_over_http11() {
    pacing_invariants_over(Speaks::Http1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pacing_invariants_hold_over_h2() {
    pacing_invariants_over(Speaks::H2 { max_streams: None }).await;
}

/// Issue 47, finding 6, over interception and HTTP/2: an h2 origin's own `Proxy-Status:
/// courtesy; ...` member never reaches the client (who would take it for courtesy's refusal);
/// its other member does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_h2_origins_courtesy_member_never_reaches_the_client_through_interception() {
    let tls = Tls::new();
    let origin = tls
        .h2_origin(|_req| async {
            Response::builder()
                .status(403)
                .header(
                    "proxy-status",
                    "courtesy; error=http_request_denied; details=\"robots.txt\", cdn; error=dns_timeout",
                )
                .body(full("no"))
                .unwrap()
        })
        .await;
    let courtesy = tls.courtesy(origin.addr.port(), ROOMY).await;
    let got = client(&courtesy)
        .get(origin.https_url("/planted"))
        .send()
        .await
        .unwrap();
    assert_eq!(got.status(), 403);
    let fields: Vec<_> = got.headers().get_all("proxy-status").iter().collect();
    assert_eq!(fields, ["cdn; error=dns_timeout"]);
    assert_eq!(origin.versions(), [Version::HTTP_2]);
}
