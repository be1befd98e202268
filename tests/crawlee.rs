//! Crawlee, the other big crawler family, through courtesy as its users run it (`docs/clients.md`):
//! a real crawl by Crawlee for Node (`CheerioCrawler`) and by Crawlee for Python
//! (`BeautifulSoupCrawler`) of a 200-page https site that answers 429 with `Retry-After` above 3
//! requests a second and disallows `/private/` in robots.txt, through courtesy at 5 requests a
//! second. Crawlee treats 401, 403 and 429 as "session blocked" (it retires the session and sends
//! the request again at once), so courtesy's own local answers must never reach it: every allowed
//! page is handled once, no request fails or is retried, no session is retired, and the site sees
//! the budget kept and every Retry-After window honoured.

mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::Response;
use tokio::time::Instant;

use support::*;

/// The site's pages: `/` and `/p/1` … `/p/199`, each linking to its ten children in a tree (and to
/// a page under `/private/`, which robots.txt disallows).
const PAGES: usize = 200;

/// What the site's limiter found: 429s it sent, and requests that came inside a Retry-After
/// window it had announced.
#[derive(Default)]
struct Limits {
    /// When the last few requests came (the sliding one-second window).
    recent: Vec<Instant>,
    /// The window the last 429 announced (from the slack after it left, to its end).
    closed: Option<(Instant, Instant)>,
    /// 429s sent.
    throttled: usize,
    /// Requests that arrived inside an announced window (beyond the slack for requests that were
    /// already on their way when the 429 left).
    inside_window: Vec<String>,
}

/// The site's name (courtesy's `hosts_file` puts it on 127.0.0.1): real crawls go to names, and
/// Crawlee's HTTP/2 client checks the name it connected to against the certificate's.
const SITE: &str = "site.test";

/// How long after a 429 left a request may still arrive that was sent before it was seen.
const IN_FLIGHT_SLACK: Duration = Duration::from_millis(250);

fn page(n: usize) -> String {
    let mut links = String::new();
    for child in n * 10 + 1..=n * 10 + 10 {
        if child < PAGES {
            links.push_str(&format!(
                "<li><a href=\"/p/{child}\">page {child}</a></li>\n"
            ));
        }
    }
    links.push_str(&format!(
        "<li><a href=\"/private/{n}\">staff only</a></li>\n"
    ));
    format!("<!doctype html><html><head><title>page {n}</title></head><body><h1>page {n}</h1><ul>\n{links}</ul></body></html>")
}

/// The 200-page site on https://site.test, with its limiter: above 3 requests in any second, a
/// 429 with `Retry-After: 1`.
async fn throttling_site(ca: &TestCa) -> (Origin, Arc<Mutex<Limits>>) {
    let limits = Arc::new(Mutex::new(Limits::default()));
    let seen = limits.clone();
    let tls = ca.server_config(&[SITE]);
    let origin = Origin::start_tls("127.0.0.1", tls, move |req| {
        let path = req.uri().path().to_string();
        let now = Instant::now();
        let throttle = {
            let mut l = seen.lock().unwrap();
            if let Some((from, until)) = l.closed {
                if from <= now && now < until {
                    l.inside_window.push(path.clone());
                }
            }
            l.recent
                .retain(|t| now.duration_since(*t) < Duration::from_secs(1));
            l.recent.push(now);
            let over = l.recent.len() > 3;
            if over {
                l.throttled += 1;
                l.closed = Some((now + IN_FLIGHT_SLACK, now + Duration::from_secs(1)));
            }
            over
        };
        async move {
            if throttle {
                return come_back_later(429, "1", "too many requests, slow down");
            }
            let html = |body: String| {
                Response::builder()
                    .header("content-type", "text/html; charset=utf-8")
                    .body(full(body))
                    .unwrap()
            };
            if path == "/robots.txt" {
                return Response::builder()
                    .header("content-type", "text/plain")
                    .body(full("User-agent: *\nDisallow: /private/\n"))
                    .unwrap();
            }
            if path == "/" {
                return html(page(0));
            }
            match path
                .strip_prefix("/p/")
                .and_then(|n| n.parse::<usize>().ok())
            {
                Some(n) if (1..PAGES).contains(&n) => html(page(n)),
                _ => Response::builder()
                    .status(404)
                    .body(full("no such page"))
                    .unwrap(),
            }
        }
    })
    .await;
    (origin, limits)
}

/// What a crawler script printed: the URLs it handled and Crawlee's own counts.
#[derive(serde::Deserialize, Debug)]
#[serde(rename_all = "camelCase")]
struct Crawl {
    handled: Vec<String>,
    refused: Vec<String>,
    failed: u64,
    retries: u64,
    sessions_retired: u64,
    errors: Vec<String>,
}

/// courtesy at 5 requests a second (over the site's 3) in front of the site, set up as
/// docs/clients.md tells a Crawlee user to: held through cooldowns, origin 429s retried by courtesy.
async fn courtesy_for(dir: &std::path::Path, ca_file: &std::path::Path) -> Courtesy {
    let hosts = dir.join("hosts");
    std::fs::write(&hosts, format!("127.0.0.1 {SITE}\n")).unwrap();
    Courtesy::start(&format!(
        "[proxy]\nupstream_ca = {:?}\nhosts_file = {:?}\n\n[defaults]\nrate = 5\nburst = 1\nobey_robots = true\n\
         on_cooldown = \"hold\"\nretry_idempotent = 2\n",
        ca_file.display().to_string(),
        hosts.display().to_string()
    ))
    .await
}

/// Checks a finished crawl against the site: every allowed page handled once, nothing failed,
/// retried or retired, nothing disallowed fetched, the budget and every window kept.
fn assert_polite_and_complete(crawl: &Crawl, origin: &Origin, limits: &Mutex<Limits>, who: &str) {
    let mut handled: BTreeMap<String, usize> = BTreeMap::new();
    for url in &crawl.handled {
        let path = url
            .split_once("://")
            .and_then(|(_, rest)| rest.find('/').map(|i| rest[i..].to_string()))
            .unwrap_or_default();
        *handled.entry(path).or_default() += 1;
    }
    let mut expected: Vec<String> = (1..PAGES).map(|n| format!("/p/{n}")).collect();
    expected.push("/".to_string());
    expected.sort();
    let got: Vec<String> = handled.keys().cloned().collect();
    assert_eq!(
        got, expected,
        "{who}: every allowed page, and only those, handled"
    );
    let twice: Vec<_> = handled.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "{who}: pages handled twice: {twice:?}");
    assert_eq!(
        (crawl.failed, crawl.retries, crawl.sessions_retired),
        (0, 0, 0),
        "{who}: no failure, retry or retired session: {:?}",
        crawl.errors
    );
    assert!(
        !crawl.refused.is_empty() && crawl.refused.iter().all(|u| u.contains("/private/")),
        "{who}: courtesy refused the disallowed pages, and only those: {:?}",
        crawl.refused
    );
    let paths = origin.paths();
    assert!(
        !paths.iter().any(|p| p.starts_with("/private/")),
        "{who}: a disallowed page reached the site"
    );
    let l = limits.lock().unwrap();
    assert!(
        l.inside_window.is_empty(),
        "{who}: requests inside a Retry-After window: {:?}",
        l.inside_window
    );
    // The budget, 5/s with a burst of 1, in any window (one request of slack for the edges).
    for secs in [1u64, 5, 10] {
        let most = origin.most_within_any(Duration::from_secs(secs));
        let bound = 1 + 5 * secs as usize + 1;
        assert!(
            most <= bound,
            "{who}: {most} requests within {secs} s (budget {bound})"
        );
    }
    eprintln!(
        "{who}: {} pages handled, {} requests at the site, {} answered 429 by it",
        crawl.handled.len(),
        paths.len(),
        l.throttled
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crawlee_for_node_crawls_every_page_once_through_courtesy() {
    let ca = TestCa::new();
    let dir = temp_dir("crawlee-node");
    let (origin, limits) = throttling_site(&ca).await;
    let courtesy = courtesy_for(&dir, &ca.write(&dir, "site-ca.pem")).await;
    let out = run_to_success(
        client_command("node")
            .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/node"))
            .arg("crawlee.mjs")
            .env("PROXY_URL", format!("http://{}", courtesy.addr))
            .env(
                "START_URL",
                format!("https://{SITE}:{}/", origin.addr.port()),
            )
            .env("NODE_EXTRA_CA_CERTS", courtesy.ca_path())
            .env("CRAWLEE_STORAGE_DIR", dir.join("storage")),
    )
    .await;
    let crawl: Crawl = serde_json::from_str(out.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("the crawl's report ({e}): {out}"));
    assert_polite_and_complete(&crawl, &origin, &limits, "Crawlee for Node");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crawlee_for_python_crawls_every_page_once_through_courtesy() {
    let ca = TestCa::new();
    let dir = temp_dir("crawlee-python");
    let (origin, limits) = throttling_site(&ca).await;
    let courtesy = courtesy_for(&dir, &ca.write(&dir, "site-ca.pem")).await;
    let out = run_to_success(
        client_command("python3")
            .current_dir(&dir)
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/python/crawlee_crawl.py"
            ))
            .env("PROXY_URL", format!("http://{}", courtesy.addr))
            .env(
                "START_URL",
                format!("https://{SITE}:{}/", origin.addr.port()),
            )
            .env("SSL_CERT_FILE", courtesy.ca_path())
            .env("CRAWLEE_STORAGE_DIR", dir.join("storage")),
    )
    .await;
    let crawl: Crawl = serde_json::from_str(out.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("the crawl's report ({e}): {out}"));
    assert_polite_and_complete(&crawl, &origin, &limits, "Crawlee for Python");
}
