//! A site as real crawls meet it: a tree of linked HTML pages on an https (or plain http) origin
//! with its own limiter (above `per_second` requests in any second, a 429 with `Retry-After`)
//! and a robots.txt that disallows `/private/`; and the checks that a crawl through courtesy
//! got every allowed page once while the site saw its budget and every window it announced kept.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::Response;
use tokio::time::Instant;

use super::body::full;
use super::origin::{come_back_later, Origin};
use super::tls::TestCa;

/// How long after a 429 left a request may still arrive that was sent before it was seen.
pub const IN_FLIGHT_SLACK: Duration = Duration::from_millis(250);

/// What the site's limiter found: 429s it sent, and requests that came inside a Retry-After
/// window it had announced.
#[derive(Default, Debug)]
pub struct SiteLimits {
    /// When the last few requests came (the sliding one-second window).
    recent: Vec<Instant>,
    /// The window the last 429 announced (from the slack after it left, to its end).
    closed: Option<(Instant, Instant)>,
    /// 429s sent.
    pub throttled: usize,
    /// Requests that arrived inside an announced window (beyond the slack for requests that were
    /// already on their way when the 429 left).
    pub inside_window: Vec<String>,
}

/// How the site behaves.
#[derive(Debug, Clone, Copy)]
pub struct SiteShape {
    /// Pages: `/` and `/p/1` … `/p/{pages - 1}`, each linking to its ten children (and to a
    /// page under `/private/`, which robots.txt disallows).
    pub pages: usize,
    /// Requests in any second above which the site answers 429.
    pub per_second: usize,
    /// The `Retry-After` of its 429s, in seconds.
    pub retry_after: u64,
}

/// One page of the tree: links to its ten children and to a disallowed page.
fn site_page(n: usize, pages: usize) -> String {
    let mut links = String::new();
    for child in n * 10 + 1..=n * 10 + 10 {
        if child < pages {
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

/// The site on `name` (https, with a leaf of `ca`; or plain http without one), and what its
/// limiter finds.
pub async fn throttled_site(
    ca: Option<&TestCa>,
    name: &str,
    shape: SiteShape,
) -> (Origin, Arc<Mutex<SiteLimits>>) {
    let limits = Arc::new(Mutex::new(SiteLimits::default()));
    let seen = limits.clone();
    // Made once per site: the origin's answers take a `&'static str`.
    let retry_after: &'static str = Box::leak(shape.retry_after.to_string().into_boxed_str());
    let handler = move |req: http::Request<hyper::body::Incoming>| {
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
            let over = l.recent.len() > shape.per_second;
            if over {
                l.throttled += 1;
                l.closed = Some((
                    now + IN_FLIGHT_SLACK,
                    now + Duration::from_secs(shape.retry_after),
                ));
            }
            over
        };
        async move {
            if throttle {
                return come_back_later(429, retry_after, "too many requests, slow down");
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
                return html(site_page(0, shape.pages));
            }
            match path
                .strip_prefix("/p/")
                .and_then(|n| n.parse::<usize>().ok())
            {
                Some(n) if (1..shape.pages).contains(&n) => html(site_page(n, shape.pages)),
                _ => Response::builder()
                    .status(404)
                    .body(full("no such page"))
                    .unwrap(),
            }
        }
    };
    let origin = match ca {
        Some(ca) => Origin::start_tls("127.0.0.1", ca.server_config(&[name]), handler).await,
        None => Origin::start("127.0.0.1", handler).await,
    };
    (origin, limits)
}

/// The path of a URL (`https://site.test:1234/p/3` → `/p/3`).
fn path_of(url: &str) -> String {
    url.split_once("://")
        .and_then(|(_, rest)| rest.find('/').map(|i| rest[i..].to_string()))
        .unwrap_or_default()
}

/// Checks the site's side of a crawl: every path of `expected` handled exactly once (`handled`
/// are the URLs the crawler handled), no disallowed page reached the site, no request arrived
/// inside an announced window, and the site saw at most `rate`/s with a burst of `burst` (one
/// request of slack for the edges) in any window of 1, 5 and 10 s.
pub fn assert_every_page_once_and_the_site_kept(
    handled: &[String],
    expected: &[String],
    (origin, limits): (&Origin, &Mutex<SiteLimits>),
    (rate, burst): (usize, usize),
    who: &str,
) {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for url in handled {
        *counts.entry(path_of(url)).or_default() += 1;
    }
    let mut expected = expected.to_vec();
    expected.sort();
    let got: Vec<String> = counts.keys().cloned().collect();
    assert_eq!(
        got, expected,
        "{who}: every allowed page, and only those, handled"
    );
    let twice: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "{who}: pages handled twice: {twice:?}");
    let paths = origin.paths();
    let private: Vec<_> = origin
        .arrivals()
        .into_iter()
        .filter(|a| a.path.starts_with("/private/"))
        .map(|a| format!("{} {} {:?}", a.method, a.path, a.headers))
        .collect();
    assert!(
        private.is_empty(),
        "{who}: disallowed pages reached the site: {private:?}"
    );
    let l = limits.lock().unwrap();
    assert!(
        l.inside_window.is_empty(),
        "{who}: requests inside a Retry-After window: {:?}",
        l.inside_window
    );
    for secs in [1u64, 5, 10] {
        let most = origin.most_within_any(Duration::from_secs(secs));
        let bound = burst + rate * secs as usize + 1;
        assert!(
            most <= bound,
            "{who}: {most} requests within {secs} s (budget {bound})"
        );
    }
    eprintln!(
        "{who}: {} pages handled, {} requests at the site, {} answered 429 by it",
        handled.len(),
        paths.len(),
        l.throttled
    );
}
