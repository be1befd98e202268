//! Asking less (docs/robots-blocks-cache.md): the default RFC 9111 cache (`cache = "http"`),
//! identical requests in flight coalesced into one, `min_refetch_seconds`, and robots.txt's
//! every delay (Crawl-delay of any length, Request-rate, Visit-time), kept as its own
//! Cache-Control says and past a failed refresh. Over real loopback sockets; counts are exact,
//! times have tolerances.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::support::*;
use http::{Request, Response, StatusCode};

/// A response with `body` and the header lines of `headers`.
fn answer(body: &'static str, headers: &[(&'static str, String)]) -> Response<TestBody> {
    let mut response = Response::builder();
    for (name, value) in headers {
        response = response.header(*name, value.as_str());
    }
    response.body(full(body)).unwrap()
}

/// A GET of `url` with `headers`.
fn get_with(url: &str, headers: &[(&str, &str)]) -> Request<TestBody> {
    let mut request = Request::get(url);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.body(empty()).unwrap()
}

/// The arrivals of `path` at `origin`.
fn hits(origin: &Origin, path: &str) -> usize {
    origin.arrivals().iter().filter(|a| a.path == path).count()
}

/// The `Server-Timing` entry courtesy names its own answers with.
fn told(got: &Got) -> String {
    got.header_lines("server-timing").join(", ")
}

const FAST: &str = "[defaults]\nrate = 100\nburst = 20\nconcurrency = 16\ncoalesce = true\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_identical_gets_from_four_clients_make_one_origin_request() {
    let origin = Origin::slow("127.0.0.2", Duration::from_millis(600), "the page").await;
    let courtesy = Courtesy::start(FAST).await;
    let url = origin.url("/article?id=7");
    let mut waiting = Vec::new();
    for client in 0..4 {
        for _ in 0..4 {
            let request = get_with(&url, &[("user-agent", &format!("crawler-{client}/1.0"))]);
            let proxy = courtesy.client();
            waiting.push(tokio::spawn(async move { proxy.send(request).await }));
        }
    }
    let mut coalesced = 0;
    for waiter in waiting {
        let got = waiter.await.unwrap();
        assert_eq!(got.status, StatusCode::OK);
        assert_eq!(&got.body[..], b"the page");
        coalesced += usize::from(told(&got).contains("coalesced"));
    }
    assert_eq!(
        origin.count(),
        1,
        "16 identical GETs in flight at once, one origin request"
    );
    assert_eq!(coalesced, 15, "every follower says it was coalesced");
    let metrics = fetch_direct(&courtesy.admin_url("/metrics")).await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("courtesy_requests_not_sent_total")
                && l.contains("how=\"coalesced\"")
                && l.ends_with(" 15")),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_answer_is_served_from_the_store_and_a_client_s_no_cache_reaches_the_origin() {
    let origin = Origin::start("127.0.0.3", |_req| async {
        answer(
            "fresh",
            &[
                ("cache-control", "max-age=60".into()),
                ("etag", "\"v1\"".into()),
            ],
        )
    })
    .await;
    let courtesy = Courtesy::start("[defaults]\nrate = 100\nburst = 20\n").await;
    let client = courtesy.client();
    let url = origin.url("/style.css");
    assert_eq!(client.get(&url).await.body, "fresh");
    let stored = client.get(&url).await;
    assert_eq!(
        (stored.status, &stored.body[..]),
        (StatusCode::OK, &b"fresh"[..])
    );
    assert!(told(&stored).contains("stored"), "{}", told(&stored));
    assert!(
        !stored.header("age").is_empty(),
        "a stored answer carries Age"
    );
    assert_eq!(
        origin.count(),
        1,
        "a fresh answer is served without asking the origin"
    );
    // The client's own validator matching the fresh entry: a local 304.
    let revalidated = client
        .send(get_with(&url, &[("if-none-match", "\"v1\"")]))
        .await;
    assert_eq!(revalidated.status, StatusCode::NOT_MODIFIED);
    assert_eq!(origin.count(), 1);
    // no-cache, max-age=0 and Pragma: no-cache always reach the origin.
    for (name, value) in [
        ("cache-control", "no-cache"),
        ("cache-control", "max-age=0"),
        ("pragma", "no-cache"),
    ] {
        let before = origin.count();
        let got = client.send(get_with(&url, &[(name, value)])).await;
        assert_eq!(got.status, StatusCode::OK);
        assert_eq!(
            origin.count(),
            before + 1,
            "{name}: {value} reaches the origin"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn personal_answers_are_never_served_to_another_client_or_job() {
    let served = Arc::new(AtomicUsize::new(0));
    let count = served.clone();
    let origin = Origin::start("127.0.0.4", move |req| {
        let n = count.fetch_add(1, Ordering::SeqCst);
        async move {
            let body: &'static str = Box::leak(format!("answer {n}").into_boxed_str());
            let fresh = ("cache-control", "max-age=600".to_string());
            match req.uri().path() {
                "/private" => answer(body, &[("cache-control", "private, max-age=600".into())]),
                "/no-store" => answer(body, &[("cache-control", "no-store, max-age=600".into())]),
                "/cookie" => answer(body, &[fresh, ("set-cookie", "session=1".into())]),
                _ => answer(body, &[fresh]),
            }
        }
    })
    .await;
    let courtesy = Courtesy::start(FAST).await;
    let client = courtesy.client();
    for path in ["/private", "/no-store", "/cookie"] {
        let first = client.get(&origin.url(path)).await;
        let second = client.get(&origin.url(path)).await;
        assert_ne!(
            first.body, second.body,
            "{path} is never answered from the store"
        );
    }
    // Requests with credentials or cookies: never answered from another's entry.
    let url = origin.url("/account");
    let alice = client
        .send(get_with(&url, &[("authorization", "Bearer alice")]))
        .await;
    let bob = client
        .send(get_with(&url, &[("authorization", "Bearer bob")]))
        .await;
    assert_ne!(alice.body, bob.body);
    let cookie = client
        .send(get_with(&url, &[("cookie", "session=a")]))
        .await;
    assert_ne!(cookie.body, bob.body);
    let anonymous = client.get(&url).await;
    assert_ne!(anonymous.body, alice.body);
    assert_ne!(anonymous.body, cookie.body);
    // Nor coalesced: concurrent requests for a private answer each reach the origin.
    let before = origin.count();
    let waiting = client.spawn_gets((0..4).map(|_| origin.url("/private")));
    for waiter in waiting {
        assert_eq!(waiter.await.unwrap().status, StatusCode::OK);
    }
    assert_eq!(origin.count(), before + 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_refetch_seconds_answers_a_repeat_from_the_store_even_when_stale() {
    let origin = Origin::start("127.0.0.5", |req| async move {
        match req.uri().path() {
            "/never" => answer("secret", &[("cache-control", "no-store".into())]),
            _ => answer("page", &[("etag", "\"e\"".into())]),
        }
    })
    .await;
    let courtesy =
        Courtesy::start("[defaults]\nrate = 100\nburst = 20\nmin_refetch_seconds = 30\n").await;
    let client = courtesy.client();
    for _ in 0..3 {
        assert_eq!(client.get(&origin.url("/page")).await.body, "page");
        assert_eq!(client.get(&origin.url("/never")).await.body, "secret");
    }
    assert_eq!(
        hits(&origin, "/page"),
        1,
        "repeats within 30 s come from the store"
    );
    assert_eq!(
        hits(&origin, "/never"),
        3,
        "a no-store answer is never stored"
    );
    let hosts = fetch_direct(&courtesy.admin_url("/hosts")).await;
    assert!(hosts.contains("\"not_sent\""), "{hosts}");
}

/// A page with only a validator (`ETag`, `Last-Modified`: a static file with no `Cache-Control`)
/// or a freshness of zero is not stored where no repeat is answered unasked: each repeat is a
/// plain GET the origin answers in full, never a revalidation served from the store's files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_with_only_a_validator_or_no_freshness_is_not_stored_by_default() {
    let conditional = Arc::new(AtomicUsize::new(0));
    let seen = conditional.clone();
    let origin = Origin::start("127.0.0.6", move |req| {
        if req.headers().contains_key("if-none-match") {
            seen.fetch_add(1, Ordering::SeqCst);
        }
        async move {
            match req.uri().path() {
                "/zero" => answer(
                    "zero",
                    &[
                        ("cache-control", "max-age=0".into()),
                        ("etag", "\"z\"".into()),
                    ],
                ),
                _ => answer(
                    "static",
                    &[
                        ("etag", "\"s\"".into()),
                        ("last-modified", "Mon, 07 Dec 2026 00:00:00 GMT".into()),
                    ],
                ),
            }
        }
    })
    .await;
    let courtesy = Courtesy::start("[defaults]\nrate = 100\nburst = 20\n").await;
    let client = courtesy.client();
    for _ in 0..3 {
        for (path, body) in [("/static.css", "static"), ("/zero", "zero")] {
            let got = client.get(&origin.url(path)).await;
            assert_eq!(
                (got.status, &got.body[..]),
                (StatusCode::OK, body.as_bytes())
            );
            assert_eq!(got.header("x-courtesy-cache"), "", "{path}: {got:?}");
        }
    }
    assert_eq!(hits(&origin, "/static.css"), 3);
    assert_eq!(hits(&origin, "/zero"), 3);
    assert_eq!(
        conditional.load(Ordering::SeqCst),
        0,
        "nothing was revalidated"
    );
}

/// An origin whose robots.txt is `robots` (with `headers`) and whose pages answer "page".
async fn robots_site(ip: &str, robots: &'static str) -> Origin {
    Origin::start(ip, move |req| async move {
        match req.uri().path() {
            "/robots.txt" => answer(robots, &[]),
            _ => answer("page", &[]),
        }
    })
    .await
}

/// The delay robots.txt set on the host `key`, as `/hosts/<key>` shows it, once it shows one.
async fn crawl_delay_of(courtesy: &Courtesy, key: &str) -> serde_json::Value {
    let end = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (status, body) = courtesy.host_page(key).await;
        if status == StatusCode::OK {
            let host: serde_json::Value = serde_json::from_str(&body).unwrap();
            if !host["crawl_delay"].is_null() {
                return host["crawl_delay"].clone();
            }
        }
        assert!(
            tokio::time::Instant::now() < end,
            "no crawl_delay on {key}: {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crawl_delay_of_120_is_honoured_whole_and_request_rate_like_it() {
    let origin = robots_site("127.0.0.6", "User-agent: *\nCrawl-delay: 120\n").await;
    let courtesy = Courtesy::start("[defaults]\nrate = 5\nobey_robots = true\n").await;
    // The page waits its turn 120 s after robots.txt's own fetch: it is left waiting.
    let waiting = courtesy.client().spawn_get(origin.url("/a"));
    let delay = crawl_delay_of(&courtesy, &origin.addr.to_string()).await;
    assert_eq!(delay["seconds"], 120.0, "{delay}");
    assert_eq!(delay["capped"], false, "{delay}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(hits(&origin, "/a"), 0, "no second request within 120 s");
    waiting.abort();
    // The slower of Crawl-delay and Request-rate wins; an operator's cap says so.
    let slower = robots_site(
        "127.0.0.7",
        "User-agent: *\nCrawl-delay: 2\nRequest-rate: 1/10\n",
    )
    .await;
    let waiting = courtesy.client().spawn_get(slower.url("/a"));
    let delay = crawl_delay_of(&courtesy, &slower.addr.to_string()).await;
    assert_eq!(delay["seconds"], 10.0, "{delay}");
    waiting.abort();
    let capped =
        Courtesy::start("[defaults]\nrate = 5\nobey_robots = true\nmax_crawl_delay_seconds = 30\n")
            .await;
    let waiting = capped.client().spawn_get(origin.url("/b"));
    let delay = crawl_delay_of(&capped, &origin.addr.to_string()).await;
    assert_eq!(
        (delay["seconds"].as_f64(), delay["capped"].as_bool()),
        (Some(30.0), Some(true))
    );
    waiting.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outside_its_visit_time_a_host_waits_and_says_why() {
    // A window that closed an hour ago and opens in 23 hours or so.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let minute = |at: u64| format!("{:02}{:02}", (at % 86_400) / 3600, (at % 3600) / 60);
    let window = format!("{}-{}", minute(now + 3600), minute(now + 7200));
    let robots: &'static str =
        Box::leak(format!("User-agent: *\nVisit-time: {window}\n").into_boxed_str());
    let origin = robots_site("127.0.0.8", robots).await;
    let courtesy = Courtesy::start("[defaults]\nrate = 5\nobey_robots = true\n").await;
    let got = courtesy.client().get(&origin.url("/a")).await;
    assert_eq!(
        got.status,
        StatusCode::TOO_MANY_REQUESTS,
        "{}",
        String::from_utf8_lossy(&got.body)
    );
    let retry_after: u64 = got.header("retry-after").parse().unwrap();
    assert!(
        (3000..=3700).contains(&retry_after),
        "Retry-After {retry_after}"
    );
    assert!(
        got.header("proxy-status").contains("Visit-time"),
        "{}",
        got.header("proxy-status")
    );
    assert_eq!(hits(&origin, "/a"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn robots_txt_is_kept_as_its_cache_control_says_and_past_a_failed_refresh() {
    let fetched = Arc::new(AtomicUsize::new(0));
    let count = fetched.clone();
    let origin = Origin::start("127.0.0.9", move |req| {
        let robots_fetch =
            (req.uri().path() == "/robots.txt").then(|| count.fetch_add(1, Ordering::SeqCst));
        async move {
            match robots_fetch {
                Some(0) => answer(
                    "User-agent: *\nDisallow: /private\n",
                    &[("cache-control", "max-age=5".into())],
                ),
                Some(_) => Response::builder().status(503).body(full("down")).unwrap(),
                None => answer("page", &[]),
            }
        }
    })
    .await;
    let courtesy = Courtesy::start("[defaults]\nrate = 50\nobey_robots = true\n").await;
    let client = courtesy.client();
    assert_eq!(
        client.get(&origin.url("/page")).await.status,
        StatusCode::OK
    );
    assert_eq!(
        client.get(&origin.url("/private")).await.status,
        StatusCode::FORBIDDEN
    );
    assert_eq!(fetched.load(Ordering::SeqCst), 1);
    tokio::time::sleep(Duration::from_millis(5_500)).await;
    // Stale: fetched again; the 503 leaves the last good rules in force.
    assert_eq!(
        client.get(&origin.url("/page")).await.status,
        StatusCode::OK
    );
    assert!(
        eventually(Duration::from_secs(5), || fetched.load(Ordering::SeqCst)
            == 2)
        .await
    );
    assert_eq!(
        client.get(&origin.url("/page2")).await.status,
        StatusCode::OK
    );
    assert_eq!(
        client.get(&origin.url("/private")).await.status,
        StatusCode::FORBIDDEN
    );
    assert_eq!(hits(&origin, "/private"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_crawl_of_pages_sharing_static_files_asks_once_for_each() {
    const PAGES: usize = 30;
    const STATICS: usize = 10;
    let origin = Origin::start("127.0.0.10", |req| async move {
        let path = req.uri().path().to_string();
        if let Some(page) = path.strip_prefix("/page/") {
            let mut html = format!("<html><head><title>page {page}</title>");
            for s in 0..STATICS {
                html.push_str(&format!(
                    "<link rel=\"stylesheet\" href=\"/static/{s}.css\">"
                ));
            }
            html.push_str("</head><body>page</body></html>");
            let body: &'static str = Box::leak(html.into_boxed_str());
            return answer(body, &[("content-type", "text/html".into())]);
        }
        if path.starts_with("/static/") {
            return answer(
                "body{}",
                &[
                    ("content-type", "text/css".into()),
                    ("cache-control", "public, max-age=3600".into()),
                ],
            );
        }
        Response::builder()
            .status(404)
            .header("cache-control", "max-age=3600")
            .body(full(""))
            .unwrap()
    })
    .await;
    let courtesy = Courtesy::start("[defaults]\nrate = 200\nburst = 50\nconcurrency = 16\n").await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/node/cached_crawl.mjs");
    let mut cmd = client_command("node");
    cmd.current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/node"))
        .args([
            script,
            &origin.url("/page/"),
            &format!("http://{}", courtesy.addr),
            &PAGES.to_string(),
        ]);
    let out = tokio::time::timeout(Duration::from_secs(120), cmd.output())
        .await
        .expect("the crawl finishes within 120 s")
        .expect("node must be installed");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!("loaded {PAGES}")),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for page in 0..PAGES {
        assert_eq!(hits(&origin, &format!("/page/{page}")), 1, "page {page}");
    }
    for s in 0..STATICS {
        assert_eq!(
            hits(&origin, &format!("/static/{s}.css")),
            1,
            "static file {s}"
        );
    }
}
