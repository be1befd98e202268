//! Crawlee, the other big crawler family, through courtesy as its users run it (`docs/clients.md`):
//! a real crawl by Crawlee for Node (`CheerioCrawler`) and by Crawlee for Python
//! (`BeautifulSoupCrawler`) of a 200-page https site that answers 429 with `Retry-After` above 3
//! requests a second and disallows `/private/` in robots.txt, through courtesy at 5 requests a
//! second. Crawlee treats 401, 403 and 429 as "session blocked" (it retires the session and sends
//! the request again at once), so a 429 must never reach it.
//!
//! On both sides' defaults (no recipe), every allowed page is handled once and no error comes
//! from a 429: courtesy waits out the short cooldowns and sends again what the site asked it to
//! send later; only the disallowed pages fail, on courtesy's 403. With the recipe of
//! docs/clients.md, nothing fails, is retried or retired at all. Either way the site sees the
//! budget kept and every Retry-After window honoured.

use std::sync::Mutex;

use crate::support::*;

/// The site's pages: `/` and `/p/1` … `/p/199`, each linking to its ten children in a tree (and to
/// a page under `/private/`, which robots.txt disallows).
const PAGES: usize = 200;

/// The site's name (courtesy's `hosts_file` puts it on 127.0.0.1): real crawls go to names, and
/// Crawlee's HTTP/2 client checks the name it connected to against the certificate's.
const SITE: &str = "site.test";

/// The 200-page site on https://site.test, with its limiter: above 3 requests in any second, a
/// 429 with `Retry-After: retry_after`.
async fn throttling_site(
    ca: &TestCa,
    retry_after: u64,
) -> (Origin, std::sync::Arc<Mutex<SiteLimits>>) {
    let shape = SiteShape {
        pages: PAGES,
        per_second: 3,
        retry_after,
    };
    throttled_site(Some(ca), SITE, shape).await
}

/// Every page a crawl should handle: `/` and `/p/1` … `/p/199`.
fn allowed_pages() -> Vec<String> {
    let mut expected: Vec<String> = (1..PAGES).map(|n| format!("/p/{n}")).collect();
    expected.push("/".to_string());
    expected
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

/// courtesy at 5 requests a second (over the site's 3) in front of the site, with `rest` added
/// to its `[defaults]`; otherwise on its defaults (the site's name and CA are plumbing;
/// `obey_robots = true` and `coalesce = true` are defaults, said because the harness turns
/// robots.txt and coalescing off in configs that do not mention them).
async fn courtesy_for(dir: &std::path::Path, ca_file: &std::path::Path, rest: &str) -> Courtesy {
    let hosts = dir.join("hosts");
    std::fs::write(&hosts, format!("127.0.0.1 {SITE}\n")).unwrap();
    Courtesy::start(&format!(
        "[proxy]\nupstream_ca = {:?}\nhosts_file = {:?}\n\n[defaults]\nrate = 5\nburst = 1\nobey_robots = true\ncoalesce = true\n{rest}",
        ca_file.display().to_string(),
        hosts.display().to_string()
    ))
    .await
}

/// Checks a finished crawl of the recipe (docs/clients.md) against the site: every allowed page
/// handled once, nothing failed, retried or retired, nothing disallowed fetched, the budget and
/// every window kept.
fn assert_polite_and_complete(
    crawl: &Crawl,
    origin: &Origin,
    limits: &Mutex<SiteLimits>,
    who: &str,
) {
    assert_every_page_once_and_the_site_kept(
        &crawl.handled,
        &allowed_pages(),
        (origin, limits),
        (5, 1),
        who,
    );
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
}

/// What a crawl on Crawlee's defaults printed: the URLs handled and failed, and Crawlee's counts.
#[derive(serde::Deserialize, Debug)]
#[serde(rename_all = "camelCase")]
struct DefaultsCrawl {
    handled: Vec<String>,
    failed_urls: Vec<String>,
    retries: u64,
    sessions_retired: u64,
    errors: Vec<String>,
}

/// Checks a crawl on both sides' defaults: every allowed page handled once, no error of
/// Crawlee's came from a 429 (local or the site's: courtesy held and retried for it), only the
/// pages robots.txt disallows failed (Crawlee takes courtesy's 403 for a blocked session, and
/// gives the page up: it is refused, and that is right), and the site kept.
fn assert_nothing_lost_on_defaults(
    crawl: &DefaultsCrawl,
    origin: &Origin,
    limits: &Mutex<SiteLimits>,
    who: &str,
) {
    assert_every_page_once_and_the_site_kept(
        &crawl.handled,
        &allowed_pages(),
        (origin, limits),
        (5, 1),
        who,
    );
    // The message after the URL: a port of the site's may hold "429" too.
    let message = |e: &String| {
        e.split_once(": ")
            .map_or(e.as_str(), |(_, m)| m)
            .to_string()
    };
    let on_429: Vec<_> = crawl
        .errors
        .iter()
        .filter(|e| message(e).contains("429"))
        .collect();
    assert!(on_429.is_empty(), "{who}: errors on a 429: {on_429:?}");
    assert!(
        crawl.failed_urls.iter().all(|u| u.contains("/private/")),
        "{who}: only disallowed pages failed: {:?}",
        crawl.failed_urls
    );
    eprintln!(
        "{who}: {} disallowed pages failed after {} retries and {} retired sessions, all on courtesy's 403",
        crawl.failed_urls.len(),
        crawl.retries,
        crawl.sessions_retired
    );
}

/// A crawl of the site (its 429s announcing `retry_after` seconds) by the script `script` makes
/// (given the test's directory), through courtesy with `rest` in its `[defaults]`; its JSON
/// report, and the site with what its limiter found.
async fn crawl<T: serde::de::DeserializeOwned>(
    name: &str,
    (retry_after, rest): (u64, &str),
    script: impl FnOnce(&std::path::Path) -> tokio::process::Command,
) -> (T, Origin, std::sync::Arc<Mutex<SiteLimits>>) {
    let ca = TestCa::new();
    let dir = temp_dir(name);
    let (origin, limits) = throttling_site(&ca, retry_after).await;
    let courtesy = courtesy_for(&dir, &ca.write(&dir, "site-ca.pem"), rest).await;
    let mut cmd = script(&dir);
    let out = run_to_success(
        cmd.env("PROXY_URL", format!("http://{}", courtesy.addr))
            .env(
                "START_URL",
                format!("https://{SITE}:{}/", origin.addr.port()),
            )
            .env("NODE_EXTRA_CA_CERTS", courtesy.ca_path())
            .env("SSL_CERT_FILE", courtesy.ca_path())
            .env("CRAWLEE_STORAGE_DIR", dir.join("storage")),
    )
    .await;
    let report = serde_json::from_str(out.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("the crawl's report ({e}): {out}"));
    (report, origin, limits)
}

/// The Node crawl `script` (in tests/node).
fn node(script: &str) -> tokio::process::Command {
    let mut cmd = client_command("node");
    cmd.current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/node"))
        .arg(script);
    cmd
}

/// The Python crawl `script` (in tests/python), run in `dir`.
fn python(script: &str, dir: &std::path::Path) -> tokio::process::Command {
    let mut cmd = client_command("python3");
    cmd.current_dir(dir).arg(format!(
        "{}/tests/python/{script}",
        env!("CARGO_MANIFEST_DIR")
    ));
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crawlee_for_node_on_its_defaults_gets_every_page_through_courtesy_on_its_defaults() {
    let (crawl, origin, limits): (DefaultsCrawl, _, _) =
        crawl("crawlee-node-defaults", (2, "adaptive = true\n"), |_| {
            node("crawlee_defaults.mjs")
        })
        .await;
    assert_nothing_lost_on_defaults(&crawl, &origin, &limits, "Crawlee for Node, defaults");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crawlee_for_python_on_its_defaults_gets_every_page_through_courtesy_on_its_defaults() {
    let (crawl, origin, limits): (DefaultsCrawl, _, _) =
        crawl("crawlee-python-defaults", (2, "adaptive = true\n"), |dir| {
            python("crawlee_defaults.py", dir)
        })
        .await;
    assert_nothing_lost_on_defaults(&crawl, &origin, &limits, "Crawlee for Python, defaults");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crawlee_for_node_with_the_recipe_crawls_every_page_once_with_no_retry() {
    let (crawl, origin, limits): (Crawl, _, _) =
        crawl("crawlee-node", (1, ""), |_| node("crawlee.mjs")).await;
    assert_polite_and_complete(&crawl, &origin, &limits, "Crawlee for Node, recipe");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crawlee_for_python_with_the_recipe_crawls_every_page_once_with_no_retry() {
    let (crawl, origin, limits): (Crawl, _, _) = crawl("crawlee-python", (1, ""), |dir| {
        python("crawlee_crawl.py", dir)
    })
    .await;
    assert_polite_and_complete(&crawl, &origin, &limits, "Crawlee for Python, recipe");
}
