//! The crawler's side of the conversation (docs/clients.md, "Filter before you queue, pause on a
//! cooldown"), run for real: the scripts the doc shows, each checked against it line for line.
//!
//! - Crawlee for Node, Crawlee for Python and Scrapy crawl a 60-page site whose robots.txt
//!   disallows `/private/` (every page links to a page there), started on the site and on a second
//!   name of it that an operator paused for an hour. Each asks courtesy (`POST /v1/check`) before
//!   it queues: every allowed page is handled once, and nothing disallowed or paused ever reaches
//!   courtesy, not even to be refused. That is counted between the crawler and courtesy, by a
//!   relay that keeps every request line the crawler sent (the site is plain http, so the lines
//!   are readable; a disallowed page asked through it afterwards is seen, the control), and at
//!   the site.
//! - The SSE consumer (`GET /v1/events`) closes a host in its frontier when a 429 with
//!   `Retry-After: 3` starts a cooldown (within a second) and opens it when the cooldown ends (3 s
//!   later, ±0.5 s); cut off meanwhile, it reconnects with `Last-Event-ID` and hears the end it
//!   missed. An operator's pause closes the host until the operator resumes it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::Response;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::client_snippets::{clients_doc, snippets};
use crate::support::*;

/// The site's name (courtesy's `hosts_file` puts it on 127.0.0.1).
const SITE: &str = "site.test";

/// A second name of the site, paused by the operator for an hour before the crawl.
const PAUSED: &str = "paused.test";

/// The site: 60 pages, no limit of its own that a crawl at 20/s would meet.
const SHAPE: SiteShape = SiteShape {
    pages: 60,
    per_second: 1000,
    retry_after: 1,
};

/// The admin token of the events tests (the consumer reaches the admin listener through a relay,
/// under a `Host` that is not the listener's own: the token decides).
const TOKEN: &str = "frontier-clients-events-token";

/// The doc's section these tests run.
const SECTION: &str = "## Filter before you queue, pause on a cooldown";

/// The scripts the section shows, each in an `<!-- excerpt: FILE -->` block.
const SCRIPTS: [&str; 4] = [
    "tests/node/frontier_filter.mjs",
    "tests/python/frontier_filter.py",
    "tests/python/frontier_scrapy.py",
    "tests/python/cooldown_pause.py",
];

/// A TCP relay in front of one of courtesy's listeners, as the network between a crawler and
/// courtesy: it keeps every byte each client connection sent, and can cut every connection open
/// and hold new ones for a while (a dropped network).
struct Relay {
    addr: SocketAddr,
    /// What each connection sent, in the order they were relayed.
    sent: Arc<Mutex<Vec<Vec<u8>>>>,
    /// The cut count, and until when new connections are held.
    cuts: watch::Sender<(u64, Instant)>,
    task: tokio::task::JoinHandle<()>,
}

impl Relay {
    async fn start(target: SocketAddr) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let sent = Arc::new(Mutex::new(Vec::new()));
        let (cuts, watching) = watch::channel((0, Instant::now()));
        let log = sent.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(relay_one(client, target, log.clone(), watching.clone()));
            }
        });
        Relay {
            addr,
            sent,
            cuts,
            task,
        }
    }

    /// Cuts every connection open now; the next ones wait until `until` before they are relayed.
    fn cut_and_hold(&self, until: Instant) {
        self.cuts.send_modify(|(count, hold)| {
            *count += 1;
            *hold = until;
        });
    }

    /// What each connection sent, as text.
    fn sent(&self) -> Vec<String> {
        let sent = self.sent.lock().unwrap();
        sent.iter()
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .collect()
    }

    /// The target of every HTTP/1 request line the clients sent.
    fn request_targets(&self) -> Vec<String> {
        let mut targets = Vec::new();
        for text in self.sent() {
            for line in text.split("\r\n") {
                let parts: Vec<&str> = line.split(' ').collect();
                if let [method, target, version] = parts.as_slice() {
                    if version.starts_with("HTTP/1.")
                        && !method.is_empty()
                        && method.bytes().all(|b| b.is_ascii_uppercase())
                    {
                        targets.push(target.to_string());
                    }
                }
            }
        }
        targets
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Relays one client connection to `target` (after the hold in force when it came), keeping what
/// the client sent, until either side closes or the relay cuts it.
async fn relay_one(
    mut client: TcpStream,
    target: SocketAddr,
    log: Arc<Mutex<Vec<Vec<u8>>>>,
    mut cuts: watch::Receiver<(u64, Instant)>,
) {
    let (cut_count, hold) = *cuts.borrow_and_update();
    tokio::time::sleep_until(hold).await;
    let Ok(mut server) = TcpStream::connect(target).await else {
        return;
    };
    let index = {
        let mut log = log.lock().unwrap();
        log.push(Vec::new());
        log.len() - 1
    };
    let (mut from_client, mut to_client) = client.split();
    let (mut from_server, mut to_server) = server.split();
    let upstream = async {
        let mut buf = vec![0u8; 16 * 1024];
        while let Ok(n @ 1..) = from_client.read(&mut buf).await {
            log.lock().unwrap()[index].extend_from_slice(&buf[..n]);
            if to_server.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = to_server.shutdown().await;
    };
    let downstream = async {
        let _ = tokio::io::copy(&mut from_server, &mut to_client).await;
        let _ = to_client.shutdown().await;
    };
    let cut = async {
        while cuts.changed().await.is_ok() {
            if cuts.borrow().0 != cut_count {
                return;
            }
        }
        std::future::pending::<()>().await
    };
    tokio::select! {
        _ = async { tokio::join!(upstream, downstream) } => {}
        _ = cut => {}
    }
}

/// The site, courtesy in front of it (20/s, burst 5, robots.txt obeyed), the second name paused
/// for an hour, and the relay the crawler reaches courtesy through.
struct Crawl {
    origin: Origin,
    limits: Arc<Mutex<SiteLimits>>,
    courtesy: Courtesy,
    relay: Relay,
    dir: PathBuf,
}

async fn crawl_setup(tag: &str) -> Crawl {
    let dir = temp_dir(tag);
    let (origin, limits) = throttled_site(None, SITE, SHAPE).await;
    let hosts = dir.join("hosts");
    std::fs::write(&hosts, format!("127.0.0.1 {SITE}\n127.0.0.1 {PAUSED}\n")).unwrap();
    let courtesy = Courtesy::start(&format!(
        "[proxy]\nhosts_file = {:?}\n\n[defaults]\nrate = 20\nburst = 5\nobey_robots = true\ncoalesce = true\n",
        hosts.display().to_string()
    ))
    .await;
    let paused = format!("{PAUSED}:{}", origin.addr.port());
    let (status, body) = admin_call(
        "POST",
        &courtesy.admin_url(&format!("/hosts/{paused}/pause?seconds=3600")),
        None,
        "",
    )
    .await;
    assert_eq!(status, 200, "the operator's pause: {body}");
    let relay = Relay::start(courtesy.addr).await;
    Crawl {
        origin,
        limits,
        courtesy,
        relay,
        dir,
    }
}

/// A URL a crawl set aside, with courtesy's verdict on it.
#[derive(serde::Deserialize, Debug)]
struct SetAside {
    url: String,
    verdict: String,
}

/// What a filtering crawl printed (Crawlee's counts, or Scrapy's pages given up).
#[derive(serde::Deserialize, Debug)]
#[serde(rename_all = "camelCase")]
struct Report {
    handled: Vec<String>,
    set_aside: Vec<SetAside>,
    refused: Vec<String>,
    #[serde(default)]
    failed: u64,
    #[serde(default)]
    retries: u64,
    #[serde(default)]
    errors: Vec<String>,
    #[serde(default)]
    gave_up: Vec<String>,
}

/// Runs a crawl script through the relay, started on the site and on its paused name; its report.
async fn run_crawl(setup: &Crawl, mut cmd: tokio::process::Command) -> Report {
    let port = setup.origin.addr.port();
    let proxy = format!("http://{}", setup.relay.addr);
    // The checks must go straight to the admin listener even with the proxy in the environment:
    // through courtesy they would be refused (and seen by the relay).
    for var in ["PROXY_URL", "HTTP_PROXY", "http_proxy"] {
        cmd.env(var, &proxy);
    }
    cmd.env("COURTESY_ADMIN", setup.courtesy.admin_url(""))
        .env(
            "START_URLS",
            format!("http://{SITE}:{port}/ http://{PAUSED}:{port}/"),
        )
        .env("CRAWLEE_STORAGE_DIR", setup.dir.join("storage"));
    let out = tokio::time::timeout(Duration::from_secs(240), run_to_success(&mut cmd))
        .await
        .expect("the crawl ends within 240 s");
    serde_json::from_str(out.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("the crawl's report ({e}): {out}"))
}

/// Every page a crawl should handle: `/` and `/p/1` … `/p/59`.
fn allowed_pages() -> Vec<String> {
    let mut pages: Vec<String> = (1..SHAPE.pages).map(|n| format!("/p/{n}")).collect();
    pages.push("/".to_string());
    pages
}

/// Checks a filtering crawl: every allowed page handled once and the site kept; every
/// disallowed link and the paused start set aside on courtesy's word; nothing failed, retried or
/// refused; and no request for a disallowed or paused URL reached courtesy at all.
fn assert_filtered(report: &Report, setup: &Crawl, who: &str) {
    assert_every_page_once_and_the_site_kept(
        &report.handled,
        &allowed_pages(),
        (&setup.origin, &setup.limits),
        (20, 5),
        who,
    );
    assert!(
        report.refused.is_empty() && report.errors.is_empty() && report.gave_up.is_empty(),
        "{who}: nothing refused by courtesy, no error: {report:?}"
    );
    assert_eq!(
        (report.failed, report.retries),
        (0, 0),
        "{who}: no failure, no retry"
    );
    let private: std::collections::BTreeSet<&str> = report
        .set_aside
        .iter()
        .filter(|s| s.url.contains("/private/"))
        .map(|s| s.url.as_str())
        .collect();
    assert_eq!(
        private.len(),
        SHAPE.pages,
        "{who}: the link to /private/ of every page set aside: {:?}",
        report.set_aside
    );
    for s in &report.set_aside {
        let expected = if s.url.contains(PAUSED) {
            "paused"
        } else {
            "robots"
        };
        assert!(
            s.verdict == expected && (s.url.contains(PAUSED) || s.url.contains("/private/")),
            "{who}: {} set aside as {:?}",
            s.url,
            s.verdict
        );
    }
    assert!(
        report.set_aside.iter().any(|s| s.url.contains(PAUSED)),
        "{who}: the paused host's start URL set aside: {:?}",
        report.set_aside
    );
    let targets = setup.relay.request_targets();
    let leaked: Vec<&String> = targets
        .iter()
        .filter(|t| t.contains("/private/") || t.contains(PAUSED))
        .collect();
    assert!(
        leaked.is_empty(),
        "{who}: disallowed or paused URLs reached courtesy: {leaked:?}"
    );
    let pages = targets.iter().filter(|t| t.contains("/p/")).count();
    assert!(
        pages >= SHAPE.pages - 1,
        "{who}: the relay saw the crawl ({pages} requests): {targets:?}"
    );
    eprintln!(
        "{who}: {} pages handled, {} URLs set aside on courtesy's word, {} requests to courtesy, none disallowed",
        report.handled.len(),
        report.set_aside.len(),
        targets.len()
    );
}

/// The control of [`assert_filtered`]'s count: a request for a disallowed page sent through the
/// relay is seen there (and refused by courtesy with its 403), so that none seen means none sent.
async fn assert_the_relay_sees_what_is_sent(setup: &Crawl) {
    let url = format!("http://{SITE}:{}/private/0", setup.origin.addr.port());
    let got = ProxyClient {
        proxy: setup.relay.addr,
    }
    .get(&url)
    .await;
    assert_eq!(got.status, 403, "courtesy refuses the disallowed page");
    assert!(
        setup.relay.request_targets().contains(&url),
        "the relay saw the request for {url}"
    );
}

/// The repository's `path`.
fn in_repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crawlee_for_node_queues_only_what_courtesy_would_send() {
    let setup = crawl_setup("frontier-crawlee-node").await;
    let mut cmd = client_command("node");
    cmd.current_dir(in_repo("tests/node"))
        .arg("frontier_filter.mjs");
    let report = run_crawl(&setup, cmd).await;
    assert_filtered(&report, &setup, "Crawlee for Node, filtered");
    assert_the_relay_sees_what_is_sent(&setup).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crawlee_for_python_queues_only_what_courtesy_would_send() {
    let setup = crawl_setup("frontier-crawlee-python").await;
    let mut cmd = client_command("python3");
    cmd.current_dir(&setup.dir)
        .arg(in_repo("tests/python/frontier_filter.py"));
    let report = run_crawl(&setup, cmd).await;
    assert_filtered(&report, &setup, "Crawlee for Python, filtered");
    assert_the_relay_sees_what_is_sent(&setup).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scrapy_schedules_only_what_courtesy_would_send() {
    let setup = crawl_setup("frontier-scrapy").await;
    let mut cmd = client_command("python3");
    cmd.current_dir(&setup.dir)
        .arg(in_repo("tests/python/frontier_scrapy.py"));
    let report = run_crawl(&setup, cmd).await;
    assert_filtered(&report, &setup, "Scrapy, filtered");
    assert_the_relay_sees_what_is_sent(&setup).await;
}

/// An origin whose first answer is a 429 with `Retry-After: 3`, and 200 after; courtesy in front
/// of it with an admin token.
async fn cooldown_setup() -> (Origin, Courtesy) {
    let answered = Arc::new(AtomicUsize::new(0));
    let origin = Origin::start("127.0.0.1", move |_req| {
        let first = answered.fetch_add(1, Ordering::SeqCst) == 0;
        async move {
            if first {
                come_back_later(429, "3", "slow down")
            } else {
                Response::new(full("ok"))
            }
        }
    })
    .await;
    let courtesy = Courtesy::start(&format!(
        "[admin]\ntoken = \"{TOKEN}\"\n\n[defaults]\nrate = 10\nburst = 2\n"
    ))
    .await;
    (origin, courtesy)
}

/// The SSE consumer of the doc (tests/python/cooldown_pause.py) following the admin listener at
/// `admin`; each JSON line it prints, with when the test read it.
struct Consumer {
    lines: mpsc::UnboundedReceiver<(Instant, serde_json::Value)>,
    _child: tokio::process::Child,
}

impl Consumer {
    fn start(admin: SocketAddr) -> Consumer {
        let mut cmd = client_command("python3");
        cmd.arg(in_repo("tests/python/cooldown_pause.py"))
            .env("COURTESY_ADMIN", format!("http://{admin}"))
            .env("COURTESY_TOKEN", TOKEN)
            .stdout(std::process::Stdio::piped());
        let mut child = cmd.spawn().unwrap_or_else(|e| {
            panic!("cannot run python3 ({e}): `scripts/test` installs every client the tests use")
        });
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut reader = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                if let Ok(value) = serde_json::from_str(&line) {
                    let _ = tx.send((Instant::now(), value));
                }
            }
        });
        Consumer {
            lines,
            _child: child,
        }
    }

    /// The next line `wanted` accepts, within `limit` (the lines before it are passed over).
    async fn next(
        &mut self,
        limit: Duration,
        what: &str,
        wanted: impl Fn(&serde_json::Value) -> bool,
    ) -> (Instant, serde_json::Value) {
        let deadline = Instant::now() + limit;
        loop {
            match tokio::time::timeout_at(deadline, self.lines.recv()).await {
                Ok(Some((at, line))) if wanted(&line) => return (at, line),
                Ok(Some(_)) => {}
                Ok(None) => panic!("the consumer ended before it printed {what}"),
                Err(_) => panic!("the consumer printed no {what} within {limit:?}"),
            }
        }
    }
}

/// Whether a consumer's line says the frontier's host was closed (`false`) or opened (`true`).
fn host_line(open: bool) -> impl Fn(&serde_json::Value) -> bool {
    move |line| line["open"] == serde_json::json!(open)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sse_consumer_closes_a_host_on_a_429_and_opens_it_when_retry_after_ends() {
    let (origin, courtesy) = cooldown_setup().await;
    let mut consumer = Consumer::start(courtesy.admin);
    let opened = |l: &serde_json::Value| l["stream"] == "open";
    consumer
        .next(Duration::from_secs(20), "its stream opened", opened)
        .await;
    let fetch = courtesy.client().spawn_get(origin.url("/"));
    let (closed_at, closed) = consumer
        .next(Duration::from_secs(5), "a host closed", host_line(false))
        .await;
    let first = origin.arrival_times()[0];
    assert!(
        closed["host"]
            .as_str()
            .is_some_and(|h| h.ends_with(&format!(":{}", origin.addr.port()))),
        "the origin's host closed: {closed}"
    );
    let heard = closed_at.duration_since(first);
    assert!(
        heard < Duration::from_secs(1),
        "closed {heard:?} after the 429"
    );
    let (opened_at, _) = consumer
        .next(Duration::from_secs(8), "the host opened", host_line(true))
        .await;
    let after = opened_at.duration_since(first);
    assert!(
        after >= Duration::from_millis(2500) && after <= Duration::from_millis(3500),
        "opened {after:?} after a 429 with Retry-After: 3"
    );
    let got = fetch.await.unwrap();
    assert_eq!(
        got.status, 200,
        "courtesy sent the page again after the window"
    );
    eprintln!("closed {heard:?} after the 429, opened {after:?} after it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sse_consumer_reconnects_with_last_event_id_and_hears_the_end_it_missed() {
    let (origin, courtesy) = cooldown_setup().await;
    let relay = Relay::start(courtesy.admin).await;
    let mut consumer = Consumer::start(relay.addr);
    let opened = |l: &serde_json::Value| l["stream"] == "open";
    consumer
        .next(Duration::from_secs(20), "its stream opened", opened)
        .await;
    let _fetch = courtesy.client().spawn_get(origin.url("/"));
    consumer
        .next(Duration::from_secs(5), "a host closed", host_line(false))
        .await;
    // The network drops until well after the cooldown ends (3 s after the 429).
    let first = origin.arrival_times()[0];
    let back = first + Duration::from_millis(4500);
    relay.cut_and_hold(back);
    let (opened_at, _) = consumer
        .next(Duration::from_secs(10), "the host opened", host_line(true))
        .await;
    assert!(
        opened_at >= back && opened_at < back + Duration::from_secs(2),
        "opened {:?} after the network came back",
        opened_at.checked_duration_since(back)
    );
    let sent = relay.sent();
    let asked_with = |text: &String| text.to_ascii_lowercase().contains("\r\nlast-event-id: ");
    assert!(
        sent.len() >= 2 && !asked_with(&sent[0]) && sent[1..].iter().all(asked_with),
        "the first request asks from now, every reconnection from the last event it heard: {sent:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sse_consumer_closes_a_host_an_operator_pauses_until_it_is_resumed() {
    let (origin, courtesy) = cooldown_setup().await;
    let mut consumer = Consumer::start(courtesy.admin);
    let opened = |l: &serde_json::Value| l["stream"] == "open";
    consumer
        .next(Duration::from_secs(20), "its stream opened", opened)
        .await;
    let host = format!("127.0.0.1:{}", origin.addr.port());
    let operate = |action: &str| courtesy.admin_url(&format!("/hosts/{host}/{action}"));
    let (status, body) = admin_call("POST", &operate("pause?seconds=3600"), Some(TOKEN), "").await;
    assert_eq!(status, 200, "the operator's pause: {body}");
    let (_, closed) = consumer
        .next(Duration::from_secs(5), "a host closed", host_line(false))
        .await;
    assert_eq!(closed["host"], serde_json::json!(host), "{closed}");
    // An hour's pause: the host stays closed until the operator lifts it.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        consumer.lines.try_recv().is_err(),
        "nothing opens the host before the resume"
    );
    let (status, body) = admin_call("POST", &operate("resume"), Some(TOKEN), "").await;
    assert_eq!(status, 200, "the operator's resume: {body}");
    let (_, opened) = consumer
        .next(Duration::from_secs(5), "the host opened", host_line(true))
        .await;
    assert_eq!(opened["host"], serde_json::json!(host), "{opened}");
}

#[test]
fn the_frontier_snippets_are_lines_of_the_scripts_the_tests_run() {
    let doc = clients_doc();
    let section = doc
        .split_once(SECTION)
        .map(|(_, rest)| rest.split("\n## ").next().unwrap_or_default())
        .unwrap_or_else(|| panic!("docs/clients.md has a section {SECTION:?}"));
    let shown: Vec<_> = snippets(section)
        .into_iter()
        .filter(|s| s.kind == "excerpt")
        .collect();
    for script in SCRIPTS {
        assert!(
            shown.iter().any(|s| s.name == script),
            "the section shows {script}"
        );
    }
    for snippet in shown {
        let file = in_repo(&snippet.name);
        let text =
            std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        for line in snippet
            .code
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
        {
            assert!(
                lines.contains(&line),
                "docs/clients.md shows `{line}` from {}, which has no such line",
                snippet.name
            );
        }
    }
}
