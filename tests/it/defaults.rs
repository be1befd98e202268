//! Nothing lost on defaults (invariant 16): real clients on their own defaults, through courtesy on
//! its defaults, get every page of a site that answers 429 with `Retry-After` above 3 requests a
//! second (courtesy at 5 a second, burst 1, adaptive), and the site sees its budget and every
//! window it announced kept. Scrapy with its RetryMiddleware as shipped, `requests` in a plain
//! loop that never retries, and aiohttp gathering every page at once. A window too long to wait
//! is answered with the local 429 at once; a client that stops reading frees its host after
//! `send_timeout_seconds`. (Crawlee on its defaults: tests/it/crawlee.rs; the connection patterns:
//! tests/it/limits.rs.)

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::*;
use http::Response;
use tokio::time::Instant;

/// The site's name (courtesy's `hosts_file` puts it on 127.0.0.1).
const SITE: &str = "site.test";

/// The site: 40 pages, 429 with `Retry-After: 2` above 3 requests a second.
const SHAPE: SiteShape = SiteShape {
    pages: 40,
    per_second: 3,
    retry_after: 2,
};

/// The 40 URLs a crawler is given: `/` and `/p/1` … `/p/39` on `site`.
fn urls(origin: &Origin, scheme: &str) -> Vec<String> {
    let base = format!("{scheme}://{SITE}:{}", origin.addr.port());
    let mut urls = vec![format!("{base}/")];
    urls.extend((1..SHAPE.pages).map(|n| format!("{base}/p/{n}")));
    urls
}

/// The paths of [`urls`].
fn expected() -> Vec<String> {
    let mut paths = vec!["/".to_string()];
    paths.extend((1..SHAPE.pages).map(|n| format!("/p/{n}")));
    paths
}

/// The https site and courtesy in front of it on its defaults, but for the rate the issue's
/// crawls used (5/s, burst 1, adaptive: above what the site takes, so that it answers 429s).
/// `obey_robots = true` is the default, said because the harness turns robots.txt off in
/// configs that do not mention it.
async fn site_and_courtesy(
    ca: &TestCa,
    dir: &std::path::Path,
) -> (Origin, Arc<Mutex<SiteLimits>>, Courtesy) {
    let (origin, limits) = throttled_site(Some(ca), SITE, SHAPE).await;
    let hosts = dir.join("hosts");
    std::fs::write(&hosts, format!("127.0.0.1 {SITE}\n")).unwrap();
    let ca_file = ca.write(dir, "site-ca.pem");
    let courtesy = Courtesy::start(&format!(
        "[proxy]\nupstream_ca = {:?}\nhosts_file = {:?}\n\n[defaults]\nrate = 5\nburst = 1\nadaptive = true\nobey_robots = true\ncoalesce = true\n",
        ca_file.display().to_string(),
        hosts.display().to_string()
    ))
    .await;
    (origin, limits, courtesy)
}

/// A Python client run through `courtesy` (both proxy variables, courtesy's CA), with the URLs
/// on its standard input as one JSON list; its last line is a JSON report.
async fn python_crawl(courtesy: &Courtesy, script: &str, urls: &[String]) -> serde_json::Value {
    let proxy = format!("http://{}", courtesy.addr);
    let mut cmd = client_command("python3");
    cmd.args(["-c", script])
        .env("HTTP_PROXY", &proxy)
        .env("HTTPS_PROXY", &proxy)
        .env("http_proxy", &proxy)
        .env("https_proxy", &proxy)
        .env("REQUESTS_CA_BUNDLE", courtesy.ca_path())
        .env("SSL_CERT_FILE", courtesy.ca_path());
    let list = serde_json::to_string(urls).unwrap();
    let stdout = run_with_input(&mut cmd, list.as_bytes(), Duration::from_secs(240)).await;
    serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("the crawl's report ({e}): {stdout}"))
}

/// The URLs a report lists under `key`.
fn listed(report: &serde_json::Value, key: &str) -> Vec<String> {
    report[key]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// A report of URLs fetched (`got`) and anything else (`other`: none): every page once, and the
/// site kept (5/s, burst 1).
fn assert_got_every_page(
    report: &serde_json::Value,
    site: (&Origin, &Mutex<SiteLimits>),
    who: &str,
) {
    assert_eq!(report["other"], serde_json::json!([]), "{report}");
    assert_every_page_once_and_the_site_kept(
        &listed(report, "got"),
        &expected(),
        site,
        (5, 1),
        who,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scrapy_on_its_defaults_gets_every_page() {
    let ca = TestCa::new();
    let dir = temp_dir("defaults-scrapy");
    let (origin, limits, courtesy) = site_and_courtesy(&ca, &dir).await;
    // Scrapy as shipped, with the two settings the issue's crawl set: 16 at a time, no delay of
    // its own. RetryMiddleware untouched (a 429 retried at once, twice, then given up).
    let script = r#"
import json, sys
import scrapy
from scrapy.crawler import CrawlerProcess

urls = json.loads(sys.stdin.read())
items = []

class Pages(scrapy.Spider):
    name = "pages"
    start_urls = urls
    custom_settings = {"CONCURRENT_REQUESTS": 16, "DOWNLOAD_DELAY": 0, "LOG_LEVEL": "ERROR"}

    def parse(self, response):
        items.append(response.url)

process = CrawlerProcess()
crawler = process.create_crawler(Pages)
process.crawl(crawler)
process.start()
stats = {k: str(v) for k, v in crawler.stats.get_stats().items()}
# Pages Scrapy gave up on: retries exhausted, or an answer other than 200 dropped.
failed = [k for k in stats if k.startswith("retry/max_reached") or k.startswith("httperror/")]
print(json.dumps({"items": items, "failed": failed, "stats": stats}))
"#;
    let report = python_crawl(&courtesy, script, &urls(&origin, "https")).await;
    assert!(
        listed(&report, "failed").is_empty() && !listed(&report, "items").is_empty(),
        "Scrapy gave up on pages: {report}"
    );
    assert_every_page_once_and_the_site_kept(
        &listed(&report, "items"),
        &expected(),
        (&origin, &limits),
        (5, 1),
        "Scrapy, defaults",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_in_a_plain_loop_that_never_retries_gets_every_page() {
    let ca = TestCa::new();
    let dir = temp_dir("defaults-requests");
    let (origin, limits, courtesy) = site_and_courtesy(&ca, &dir).await;
    let script = r#"
import json, sys
import requests

urls = json.loads(sys.stdin.read())
got, other = [], []
for url in urls:
    r = requests.get(url)
    if r.status_code == 200:
        got.append(url)
    else:
        other.append([url, r.status_code, r.headers.get("Proxy-Status")])
print(json.dumps({"got": got, "other": other}))
"#;
    let report = python_crawl(&courtesy, script, &urls(&origin, "https")).await;
    assert_got_every_page(&report, (&origin, &limits), "requests, defaults");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aiohttp_gathering_every_page_at_once_gets_every_page() {
    let ca = TestCa::new();
    let dir = temp_dir("defaults-aiohttp");
    let (origin, limits, courtesy) = site_and_courtesy(&ca, &dir).await;
    // aiohttp on its defaults: one session reading the proxy variables, every page asked at once
    // (its connector's 100 connections), its 300 s total timeout.
    let script = r#"
import asyncio, json, sys
import aiohttp

urls = json.loads(sys.stdin.read())

async def main():
    got, other = [], []
    async with aiohttp.ClientSession(trust_env=True) as session:
        async def fetch(url):
            try:
                async with session.get(url) as r:
                    await r.read()
                    (got if r.status == 200 else other).append([url, r.status])
            except Exception as e:
                other.append([url, repr(e)])
        await asyncio.gather(*(fetch(u) for u in urls))
    print(json.dumps({"got": [u for u, _ in got], "other": other}))

asyncio.run(main())
"#;
    let report = python_crawl(&courtesy, script, &urls(&origin, "https")).await;
    assert_got_every_page(&report, (&origin, &limits), "aiohttp, defaults");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_of_an_hour_is_answered_with_the_local_429_at_once() {
    // The first request is answered 429 with Retry-After: 3600; everything after it is a page.
    let first = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let origin = Origin::start("127.0.0.1", move |_req| {
        let throttle = first.swap(false, std::sync::atomic::Ordering::SeqCst);
        async move {
            if throttle {
                come_back_later(429, "3600", "come back in an hour")
            } else {
                Response::new(full("a page"))
            }
        }
    })
    .await;
    let courtesy = Courtesy::start("[defaults]\nobey_robots = false\ncoalesce = true\n").await;
    let client = courtesy.client();
    // The site's own 429 is passed on at once: a window this long is not waited out, nor is the
    // request sent again after it.
    let started = Instant::now();
    let answered = client.get(&origin.url("/first")).await;
    assert_eq!(answered.status, 429);
    assert_eq!(answered.header("courtesy-tries"), "1");
    assert!(!answered.header("proxy-status").starts_with("courtesy"));
    // The next request gets courtesy's own 429 within a second, with the time left.
    let next = client.get(&origin.url("/next")).await;
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(next.status, 429);
    assert_eq!(next.header("courtesy-tries"), "0");
    assert!(
        next.header("proxy-status").starts_with("courtesy"),
        "{}",
        next.header("proxy-status")
    );
    let retry_after: u64 = next.header("retry-after").parse().unwrap_or(0);
    assert!(retry_after >= 500, "Retry-After: {retry_after}");
    assert_eq!(origin.count(), 1, "nothing was sent inside the window");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_window_is_waited_out_and_the_page_sent_again_for_the_client() {
    // Every request is answered 429 with Retry-After: 1 until two have been; then pages.
    let seen = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = seen.clone();
    let origin = Origin::start("127.0.0.1", move |_req| {
        let n = count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        async move {
            if n < 2 {
                come_back_later(429, "1", "slow down")
            } else {
                Response::new(full("a page"))
            }
        }
    })
    .await;
    let courtesy = Courtesy::start("[defaults]\nobey_robots = false\ncoalesce = true\n").await;
    let started = Instant::now();
    let answered = courtesy.client().get(&origin.url("/page")).await;
    assert_eq!(answered.status, 200);
    assert_eq!(
        answered.header("courtesy-tries"),
        "3",
        "two 429s, then the page"
    );
    // Each resend waited out the window its 429 announced.
    let times = origin.arrival_times();
    assert_eq!(times.len(), 3);
    for pair in times.windows(2) {
        let gap = pair[1].duration_since(pair[0]);
        assert!(gap >= Duration::from_millis(990), "{gap:?}");
    }
    assert!(started.elapsed() < Duration::from_secs(10));
    // A request with a body is never sent twice: the site's 429 is its answer.
    seen.store(0, std::sync::atomic::Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let post = http::Request::post(origin.url("/form"))
        .body(full("a=1"))
        .unwrap();
    let answered = courtesy.client().send(post).await;
    assert_eq!(answered.status, 429);
    assert_eq!(answered.header("courtesy-tries"), "1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_frees_its_host_after_send_timeout_seconds() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    // A large page: far more than the socket buffers hold between courtesy and a client that
    // reads nothing.
    let big = bytes::Bytes::from(vec![b'x'; 64 << 20]);
    let origin = Origin::start("127.0.0.1", move |req| {
        let big = big.clone();
        async move {
            if req.uri().path() == "/big" {
                Response::new(full(big))
            } else {
                Response::new(full("small"))
            }
        }
    })
    .await;
    let courtesy = Courtesy::start(
        "[proxy]\nsend_timeout_seconds = 2\n[defaults]\nrate = 100\nburst = 10\nconcurrency = 1\nobey_robots = false\nread_timeout_seconds = 3\n",
    )
    .await;
    // Client A asks for the large page, reads its first bytes, then stops reading.
    let mut a = tokio::net::TcpStream::connect(courtesy.addr).await.unwrap();
    let head = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\n\r\n",
        origin.url("/big"),
        origin.addr
    );
    a.write_all(head.as_bytes()).await.unwrap();
    let mut first = [0u8; 64];
    let n = a.read(&mut first).await.unwrap();
    assert!(String::from_utf8_lossy(&first[..n]).starts_with("HTTP/1.1 200"));
    // Client B, of another job (the username of its proxy URL), asks the same host, whose one
    // slot A's response holds.
    let started = Instant::now();
    let as_b = http::Request::get(origin.url("/small"))
        .header("proxy-authorization", "Basic Yjp4") // b:x
        .body(empty())
        .unwrap();
    let b = courtesy.client().send(as_b).await;
    let waited = started.elapsed();
    assert_eq!(b.status, 200, "{:?}", b.body);
    assert!(
        waited < Duration::from_secs(8),
        "B waited {waited:?} behind a client that stopped reading (send_timeout_seconds = 2)"
    );
    assert!(waited >= Duration::from_millis(1500), "{waited:?}");
    // The cut was the client's: counted as such, and the host was neither cooled nor slowed.
    let (_, metrics) = admin_call("GET", &courtesy.admin_url("/metrics"), None, "").await;
    assert!(
        metrics.contains("courtesy_client_send_timeouts_total 1"),
        "{metrics}"
    );
    let key = format!("127.0.0.1:{}", origin.addr.port());
    let (_, page) = courtesy.host_page(&key).await;
    let host: serde_json::Value = serde_json::from_str(&page).unwrap();
    assert!(host["cooldown"].is_null(), "{page}");
    assert_eq!(host["rate"].as_f64(), Some(100.0), "{page}");
    drop(a);
}
