//! End to end: the preferences sites state (robots.txt `Content-Signal` and `Content-Usage`, the
//! `Content-Usage` response header) against jobs of each purpose, under `content_preferences`
//! "enforce" (a local 403 that never leaves), "report" (forwarded, `Courtesy-Content-Preference`)
//! and "off" (nothing read); and priced pages (HTTP 402 with `crawler-price`), which are neither a
//! block nor overload. Over real sockets on loopback.

use std::time::{Duration, Instant};

use crate::support::*;
use base64::Engine as _;
use http::{Request, Response, StatusCode};

const TOKENS: [(&str, &str, &str); 3] = [
    ("searcher", "search", "token-of-the-searcher-0123"),
    ("grounder", "ai-input", "token-of-the-grounder-0123"),
    ("trainer", "ai-train", "token-of-the-trainer-01234"),
];

/// The three jobs, one per purpose.
fn jobs() -> String {
    TOKENS
        .iter()
        .map(|(name, purpose, token)| {
            format!("[[job]]\nname = \"{name}\"\ntoken = \"{token}\"\npurpose = \"{purpose}\"\n")
        })
        .collect()
}

fn config(mode: &str, obey: bool) -> String {
    format!(
        "[defaults]\nrate = 200\nburst = 20\nconcurrency = 4\nobey_robots = {obey}\nhard_block_after = 2\n\
         content_preferences = \"{mode}\"\n{}",
        jobs()
    )
}

/// A GET of `url` as the job of `purpose`.
fn get_as(url: &str, purpose: &str) -> Request<TestBody> {
    let (name, _, token) = TOKENS.iter().find(|(_, p, _)| *p == purpose).unwrap();
    let pair = base64::engine::general_purpose::STANDARD.encode(format!("{name}:{token}"));
    Request::get(url)
        .header("proxy-authorization", format!("Basic {pair}"))
        .header("user-agent", "prefbot/1.0")
        .body(empty())
        .unwrap()
}

/// An origin serving `robots` (404 when `None`) and pages, each page with `usage` as its
/// `Content-Usage` header when given.
async fn origin(robots: Option<&'static str>, usage: Option<&'static str>) -> Origin {
    Origin::start(
        "127.0.0.1",
        move |req: Request<hyper::body::Incoming>| async move {
            if req.uri().path() == "/robots.txt" {
                return match robots {
                    Some(txt) => Response::new(full(txt)),
                    None => Response::builder().status(404).body(full("no")).unwrap(),
                };
            }
            let mut page = Response::builder();
            if let Some(usage) = usage {
                page = page.header("content-usage", usage);
            }
            page.body(full("page")).unwrap()
        },
    )
    .await
}

fn arrived(origin: &Origin, path: &str) -> usize {
    origin.paths().iter().filter(|p| *p == path).count()
}

/// What courtesy names as the refusal (the report header), "" when none.
fn report(got: &Got) -> String {
    got.header("courtesy-content-preference")
}

/// The robots.txt signal refusing ai-train, under "enforce" and "report", for the three purposes.
async fn robots_signal(robots: &'static str, details: &str, source: &str) {
    for (mode, obey) in [("enforce", true), ("report", false), ("enforce", false)] {
        let origin = origin(Some(robots), None).await;
        let courtesy = Courtesy::start(&config(mode, obey)).await;
        let client = courtesy.client();
        for purpose in ["search", "ai-input"] {
            let got = client
                .send(get_as(&origin.url(&format!("/{purpose}")), purpose))
                .await;
            assert_eq!(got.status, StatusCode::OK, "{mode}: {purpose}");
            assert_eq!(report(&got), "", "{mode}: {purpose} is not refused");
        }
        let mut got = client.send(get_as(&origin.url("/train"), "ai-train")).await;
        if mode == "enforce" {
            // Local 403s in a row are courtesy's own: never a hard block (hard_block_after = 2).
            for _ in 0..3 {
                let again = client.send(get_as(&origin.url("/train"), "ai-train")).await;
                assert_eq!(again.status, StatusCode::FORBIDDEN);
            }
            let search = client.send(get_as(&origin.url("/after"), "search")).await;
            assert_eq!(search.status, StatusCode::OK, "the host is not paused");
            got = client.send(get_as(&origin.url("/train"), "ai-train")).await;
            assert_eq!(got.status, StatusCode::FORBIDDEN, "{mode}");
            let status = got.header("proxy-status");
            assert!(
                status.starts_with("courtesy; error=http_request_denied")
                    && status.contains(&format!("details=\"{details}\"")),
                "{status}"
            );
            assert_eq!(
                arrived(&origin, "/train"),
                0,
                "the refused request never left"
            );
        } else {
            assert_eq!(got.status, StatusCode::OK);
            assert_eq!(report(&got), format!("{details}; purpose=ai-train"));
            assert_eq!(arrived(&origin, "/train"), 1, "forwarded");
        }
        // robots.txt was read even where obey_robots = false, once.
        assert_eq!(arrived(&origin, "/robots.txt"), 1, "{mode}, obey {obey}");

        let trainer = job_page(&courtesy, "trainer").await;
        let (enforced, reported) = if mode == "enforce" { (5, 0) } else { (0, 1) };
        assert_eq!(trainer["purpose"], "ai-train");
        assert_eq!(trainer["preferences_enforced"], enforced, "{trainer}");
        assert_eq!(trainer["preferences_reported"], reported, "{trainer}");
        let metrics = fetch_direct(&courtesy.admin_url("/metrics")).await;
        let outcome = if mode == "enforce" {
            "enforced"
        } else {
            "reported"
        };
        let line = format!(
            "courtesy_content_preference_total{{job=\"trainer\",host=\"{}\",purpose=\"ai-train\",source=\"{source}\",outcome=\"{outcome}\"}} {}",
            origin.addr,
            enforced + reported
        );
        assert!(metrics.contains(&line), "missing {line} in\n{metrics}");
        assert!(
            !metrics.contains("courtesy_content_preference_total{job=\"searcher\""),
            "search was never refused"
        );
        // The local 403 is courtesy's own: no block, no pause.
        let (_, host) = courtesy.host_page(&origin.addr.to_string()).await;
        let host: serde_json::Value = serde_json::from_str(&host).unwrap();
        assert!(host["cooldown"].is_null(), "{host}");
        assert!(
            !metrics.contains("courtesy_blocks_total{"),
            "no block counted"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_signal_in_robots_txt_refuses_ai_train() {
    robots_signal(
        "User-agent: *\nContent-Signal: search=yes, ai-train=no\nAllow: /\n",
        "ai-train=no in robots.txt Content-Signal",
        "robots_content_signal",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_usage_in_robots_txt_refuses_ai_train() {
    robots_signal(
        "User-agent: *\nAllow: /\nContent-Usage: / train-ai=n\n",
        "train-ai=n in robots.txt Content-Usage",
        "robots_content_usage",
    )
    .await;
}

/// The `Content-Usage` header arrives after the request left: reported on that answer in both
/// modes, then remembered for the path, so that under "enforce" the next request for it is
/// refused locally.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_content_usage_header_is_reported_then_remembered() {
    let details = "train-ai=n in Content-Usage response header";
    for mode in ["enforce", "report"] {
        let origin = origin(None, Some("train-ai=n, search=y")).await;
        let courtesy = Courtesy::start(&config(mode, true)).await;
        let client = courtesy.client();
        let first = client
            .send(get_as(&origin.url("/doc?a=1"), "ai-train"))
            .await;
        assert_eq!(first.status, StatusCode::OK, "{mode}: it had left already");
        assert_eq!(report(&first), format!("{details}; purpose=ai-train"));
        let second = client
            .send(get_as(&origin.url("/doc?b=2"), "ai-train"))
            .await;
        if mode == "enforce" {
            assert_eq!(second.status, StatusCode::FORBIDDEN);
            assert!(
                second
                    .header("proxy-status")
                    .contains(&format!("details=\"{details}\"")),
                "{}",
                second.header("proxy-status")
            );
            assert_eq!(arrived(&origin, "/doc?b=2"), 0);
        } else {
            assert_eq!(second.status, StatusCode::OK);
            // Once, though both the memory and the answer say it.
            let reports: Vec<_> = second
                .headers
                .get_all("courtesy-content-preference")
                .iter()
                .collect();
            assert_eq!(reports.len(), 1, "{reports:?}");
        }
        // The other purposes are not refused, before or after the header is known.
        for purpose in ["search", "ai-input"] {
            let got = client.send(get_as(&origin.url("/doc"), purpose)).await;
            assert_eq!(got.status, StatusCode::OK);
            assert_eq!(report(&got), "", "{mode}: {purpose}");
        }
        // Another path is not refused before it leaves.
        let other = client.send(get_as(&origin.url("/other"), "ai-train")).await;
        assert_eq!(other.status, StatusCode::OK);
        let metrics = fetch_direct(&courtesy.admin_url("/metrics")).await;
        let reported = if mode == "enforce" { 2 } else { 3 };
        let line = format!(
            "courtesy_content_preference_total{{job=\"trainer\",host=\"{}\",purpose=\"ai-train\",source=\"content_usage_header\",outcome=\"reported\"}} {reported}",
            origin.addr
        );
        assert!(metrics.contains(&line), "missing {line} in\n{metrics}");
    }
}

/// `content_preferences = "off"`: nothing is read, and for a host with obey_robots = false,
/// robots.txt is not even fetched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn off_reads_nothing() {
    let origin = origin(
        Some("User-agent: *\nContent-Signal: ai-train=no\nContent-Usage: / train-ai=n\n"),
        Some("train-ai=n"),
    )
    .await;
    let courtesy = Courtesy::start(&config("off", false)).await;
    let client = courtesy.client();
    for _ in 0..2 {
        let got = client.send(get_as(&origin.url("/train"), "ai-train")).await;
        assert_eq!(got.status, StatusCode::OK);
        assert_eq!(report(&got), "");
    }
    assert_eq!(
        arrived(&origin, "/robots.txt"),
        0,
        "robots.txt never fetched"
    );
    assert_eq!(arrived(&origin, "/train"), 2);
}

/// A request without a purpose (no job's, no `[defaults]` one) is not checked; a `[defaults]`
/// purpose is anonymous traffic's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_defaults_purpose_is_anonymous_traffics() {
    let robots = Some("User-agent: *\nContent-Signal: ai-train=no\n");
    let origin_a = origin(robots, None).await;
    let courtesy =
        Courtesy::start("[defaults]\nrate = 100\nburst = 10\nobey_robots = false\n").await;
    let got = courtesy.client().get(&origin_a.url("/x")).await;
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(arrived(&origin_a, "/robots.txt"), 0, "nothing to check");

    let origin_b = origin(robots, None).await;
    let courtesy = Courtesy::start(
        "[defaults]\nrate = 100\nburst = 10\npurpose = \"ai-train\"\ncontent_preferences = \"enforce\"\n",
    )
    .await;
    let got = courtesy.client().get(&origin_b.url("/x")).await;
    assert_eq!(got.status, StatusCode::FORBIDDEN);
    assert_eq!(arrived(&origin_b, "/x"), 0);
}

/// A burst of priced answers (402 + crawler-price, and a page that looks like a challenge, with
/// 402 among the backoff statuses): no pause, no rate cut, no retry, the requests keep flowing at
/// the configured rate, each 402 reaches the client untouched, and the count and price show in
/// /jobs and /metrics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn priced_pages_are_counted_never_a_block() {
    let origin = Origin::start("127.0.0.1", |_req| async {
        Response::builder()
            .status(402)
            .header("crawler-price", "USD 0.01")
            .header("content-type", "text/html")
            .body(full(
                "<html><head><title>Just a moment...</title></head><body>Payment required</body></html>",
            ))
            .unwrap()
    })
    .await;
    let config = format!(
        "[defaults]\nrate = 20\nburst = 1\nconcurrency = 4\nobey_robots = false\n\
         backoff_statuses = [402, 500, 502, 503, 504]\nhard_block_after = 1\nretry_idempotent = 2\n{}",
        jobs()
    );
    let courtesy = Courtesy::start(&config).await;
    let client = courtesy.client();
    let started = Instant::now();
    let tasks: Vec<_> = (0..30)
        .map(|i| {
            let req = get_as(&origin.url(&format!("/p/{i}")), "ai-train");
            tokio::spawn(async move { client.send(req).await })
        })
        .collect();
    for task in tasks {
        let got = task.await.unwrap();
        assert_eq!(got.status, StatusCode::PAYMENT_REQUIRED);
        assert_eq!(got.header("crawler-price"), "USD 0.01");
        assert!(
            got.headers.get("proxy-status").is_none(),
            "the origin's own 402"
        );
        assert!(String::from_utf8_lossy(&got.body).contains("Payment required"));
    }
    let took = started.elapsed();
    // 30 at 20/s with a burst of 1: about 1.45 s; a pause or a cut rate would take far longer.
    assert!(
        took < Duration::from_secs(4),
        "30 priced pages took {took:?}"
    );
    let pages = origin
        .paths()
        .iter()
        .filter(|p| p.starts_with("/p/"))
        .count();
    assert_eq!(pages, 30, "no retries");
    assert!(origin.most_within_any(Duration::from_secs(1)) <= 21);

    let (_, host) = courtesy.host_page(&origin.addr.to_string()).await;
    let host: serde_json::Value = serde_json::from_str(&host).unwrap();
    assert!(host["cooldown"].is_null(), "no cooldown: {host}");
    assert!(
        host["own_rate"].as_f64().unwrap() >= 20.0,
        "no rate cut: {host}"
    );

    let trainer = job_page(&courtesy, "trainer").await;
    assert_eq!(
        trainer["priced"],
        serde_json::json!([{"host": origin.addr.to_string(), "count": 30, "last_price": "USD 0.01"}])
    );
    let metrics = fetch_direct(&courtesy.admin_url("/metrics")).await;
    let line = format!(
        "courtesy_priced_responses_total{{job=\"trainer\",host=\"{}\"}} 30",
        origin.addr
    );
    assert!(metrics.contains(&line), "missing {line} in\n{metrics}");
    assert!(
        !metrics.contains("courtesy_blocks_total{"),
        "no block counted"
    );
}

/// Inside an intercepted CONNECT, the tunnel's job (named on the CONNECT) is checked like a plain
/// request's: the trainer's request is refused locally, the searcher's goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn intercepted_https_requests_are_checked_for_the_tunnels_job() {
    let test_ca = TestCa::new();
    let tls = test_ca.server_config(&["localhost", "127.0.0.1"]);
    let origin = Origin::start_tls("127.0.0.1", tls, |req| async move {
        if req.uri().path() == "/robots.txt" {
            return Response::new(full("User-agent: *\nContent-Signal: ai-train=no\n"));
        }
        Response::new(full("secure"))
    })
    .await;
    let dir = temp_dir("preferences-https");
    let ca = test_ca.write(&dir, "origin-ca.pem");
    let courtesy = Courtesy::start(&format!(
        "[proxy]\nupstream_ca = \"{}\"\nconnect_ports = [{}]\n{}",
        ca.display(),
        origin.addr.port(),
        config("enforce", false)
    ))
    .await;
    let through = |purpose: &str| {
        let (name, _, token) = TOKENS.iter().find(|(_, p, _)| *p == purpose).unwrap();
        let proxy = format!("http://{name}:{token}@{}", courtesy.addr);
        reqwest::Client::builder()
            .proxy(reqwest::Proxy::all(proxy).unwrap())
            .tls_backend_preconfigured(client_tls_trusting(&courtesy.ca_path()))
            .build()
            .unwrap()
    };
    let url = |path: &str| format!("https://{}{path}", origin.addr);
    let refused = through("ai-train").get(url("/t")).send().await.unwrap();
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    let status = refused.headers()["proxy-status"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        status.contains("details=\"ai-train=no in robots.txt Content-Signal\""),
        "{status}"
    );
    let allowed = through("search").get(url("/s")).send().await.unwrap();
    assert_eq!(allowed.status(), StatusCode::OK);
    assert_eq!(arrived(&origin, "/t"), 0);
    assert_eq!(arrived(&origin, "/s"), 1);
}

/// The admin API's `/jobs` entry of the job `name`.
async fn job_page(courtesy: &Courtesy, name: &str) -> serde_json::Value {
    let (_, jobs) = admin_call("GET", &courtesy.admin_url("/jobs"), None, "").await;
    let jobs: serde_json::Value = serde_json::from_str(&jobs).unwrap();
    jobs["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["job"] == name)
        .cloned()
        .unwrap()
}

/// Issue 48: a robots.txt `License:` line (RSL 1.0) is read and reported, never enforced: on
/// every answer of the site (`Courtesy-Content-License`) and in `/hosts` (`licenses`), beside the
/// AI-use preferences, whatever the job's purpose; an origin's own header of that name goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_rsl_license_in_robots_txt_is_reported_never_enforced() {
    let robots = "User-agent: *\nAllow: /\nLicense: https://licenses.example/rsl.xml\n\
                  Content-Signal: ai-train=no\n";
    let origin = origin(Some(robots), None).await;
    let courtesy = Courtesy::start(&config("report", true)).await;
    let client = courtesy.client();
    for purpose in ["search", "ai-train"] {
        let got = client.send(get_as(&origin.url("/page"), purpose)).await;
        assert_eq!(got.status, 200, "never enforced: {purpose}");
        assert_eq!(
            got.header("courtesy-content-license"),
            "https://licenses.example/rsl.xml",
            "{purpose}"
        );
    }
    let (status, view) = courtesy.host_page(&origin.addr.to_string()).await;
    assert_eq!(status, 200, "{view}");
    let view: serde_json::Value = serde_json::from_str(&view).unwrap();
    assert_eq!(
        view["licenses"],
        serde_json::json!(["https://licenses.example/rsl.xml"]),
        "{view}"
    );
    // A site without a License line: nothing said, and an origin's own header does not pass.
    let unlicensed = Origin::start(
        "127.0.0.1",
        |req: Request<hyper::body::Incoming>| async move {
            if req.uri().path() == "/robots.txt" {
                return Response::new(full("User-agent: *\nAllow: /\n"));
            }
            Response::builder()
                .header("courtesy-content-license", "https://forged.example/")
                .body(full("page"))
                .unwrap()
        },
    )
    .await;
    let got = client
        .send(get_as(&unlicensed.url("/page"), "search"))
        .await;
    assert_eq!(got.status, 200);
    assert_eq!(got.header("courtesy-content-license"), "");
}
