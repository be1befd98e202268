//! Budgets keyed by host, registrable domain or address (`key`): names that are one server to be
//! polite to share one budget (its rate, its cooldowns, its `/hosts` entry, its place in the
//! shared store), and names that are different sites under one public suffix do not.

use std::time::Duration;

use http::StatusCode;
use tokio::time::Instant;

use crate::support::*;

/// A `hosts_file` naming every test host on loopback, and the `[proxy]` line that uses it.
fn hosts_file(lines: &str) -> String {
    let dir = temp_dir("keys");
    let path = dir.join("hosts");
    std::fs::write(&path, lines).unwrap();
    format!("[proxy]\nhosts_file = {:?}\n", path.display().to_string())
}

/// Every arrival at `origins`, in time order.
fn arrivals_at(origins: &[&Origin]) -> Vec<Instant> {
    let mut all: Vec<Instant> = origins.iter().flat_map(|o| o.arrival_times()).collect();
    all.sort();
    all
}

/// `/hosts/{key}` as JSON.
async fn host_view(courtesy: &Courtesy, key: &str) -> serde_json::Value {
    let (status, body) = courtesy.host_page(key).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    serde_json::from_str(&body).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_names_for_one_address_share_one_budget() {
    let origin = Origin::ok("127.0.0.1").await;
    let port = origin.addr.port();
    let courtesy = Courtesy::start(
        "[defaults]\nrate = 4.0\nburst = 1\nconcurrency = 4\nkey = \"ip\"\nmax_wait_seconds = 30\n",
    )
    .await;
    let urls = (0..8).map(|i| {
        let name = if i % 2 == 0 { "localhost" } else { "127.0.0.1" };
        format!("http://{name}:{port}/{i}")
    });
    assert_each_ok(courtesy.client().spawn_gets(urls)).await;
    let times = origin.arrival_times();
    assert_eq!(times.len(), 8);
    // One budget of 4/s for both names: 8 requests span at least 7 × 250 ms (two budgets would
    // have needed 3 × 250 ms).
    let span = times[7].duration_since(times[0]);
    assert!(span >= Duration::from_millis(1600), "{span:?}");
    assert!(origin.most_within_any(Duration::from_millis(200)) <= 1);

    let view = host_view(&courtesy, "127.0.0.1").await;
    assert_eq!(view["host"], "127.0.0.1");
    assert_eq!(view["key_by"], "ip");
    let names: Vec<String> = serde_json::from_value(view["names"].clone()).unwrap();
    assert!(names.contains(&format!("localhost:{port}")), "{names:?}");
    assert!(names.contains(&format!("127.0.0.1:{port}")), "{names:?}");
    assert_eq!(view["counters"]["sent"], 8);
    // Either name finds the budget in the admin API.
    let by_name = host_view(&courtesy, &format!("localhost:{port}")).await;
    assert_eq!(by_name["host"], "127.0.0.1");
    courtesy.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subdomains_share_their_domain_and_public_suffixes_keep_sites_apart() {
    // Two subdomains on two ports (the port is ignored), and two sites under github.io (a public
    // suffix: each user's site is its own registrable domain).
    let shop_a = Origin::ok("127.0.0.21").await;
    let shop_b = Origin::ok("127.0.0.21").await;
    let pages = Origin::ok("127.0.0.22").await;
    let config = format!(
        "{}[defaults]\nrate = 4.0\nburst = 1\nconcurrency = 4\nkey = \"domain\"\nmax_wait_seconds = 30\n",
        hosts_file(
            "127.0.0.21 a.shop.example.co.uk b.shop.example.co.uk\n\
             127.0.0.22 alice.github.io bob.github.io\n"
        )
    );
    let courtesy = Courtesy::start(&config).await;
    let mut urls = Vec::new();
    for i in 0..4 {
        urls.push(format!(
            "http://a.shop.example.co.uk:{}/{i}",
            shop_a.addr.port()
        ));
        urls.push(format!(
            "http://b.shop.example.co.uk:{}/{i}",
            shop_b.addr.port()
        ));
    }
    let started = Instant::now();
    let shops = courtesy.client().spawn_gets(urls);
    let sites = courtesy.client().spawn_gets((0..2).flat_map(|i| {
        let port = pages.addr.port();
        [
            format!("http://alice.github.io:{port}/{i}"),
            format!("http://bob.github.io:{port}/{i}"),
        ]
    }));
    assert_each_ok(sites).await;
    let sites_took = started.elapsed();
    assert_each_ok(shops).await;

    let shop_times = arrivals_at(&[&shop_a, &shop_b]);
    assert_eq!((shop_a.count(), shop_b.count()), (4, 4));
    let span = shop_times[7].duration_since(shop_times[0]);
    assert!(
        span >= Duration::from_millis(1600),
        "one 4/s budget for example.co.uk: {span:?}"
    );
    // alice and bob: two budgets of 4/s, two requests each, so about 250 ms (one budget would
    // have taken 750 ms).
    assert_eq!(pages.count(), 4);
    let pages_times = pages.arrival_times();
    let pages_span = pages_times[3].duration_since(pages_times[0]);
    assert!(
        pages_span < Duration::from_millis(650),
        "{pages_span:?} (in all {sites_took:?})"
    );

    let view = host_view(&courtesy, "example.co.uk").await;
    assert_eq!(view["key_by"], "domain");
    let names: Vec<String> = serde_json::from_value(view["names"].clone()).unwrap();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names.iter().any(|n| n.starts_with("a.shop.example.co.uk:")));
    assert!(names.iter().any(|n| n.starts_with("b.shop.example.co.uk:")));
    for site in ["alice.github.io", "bob.github.io"] {
        let view = host_view(&courtesy, site).await;
        assert_eq!(view["counters"]["sent"], 2, "{site}: {view}");
    }
    // /metrics counts by the key too.
    let metrics = fetch_direct(&courtesy.admin_url("/metrics")).await;
    let series = "courtesy_requests_total{host=\"example.co.uk\",outcome=\"upstream_2xx\"} 8";
    assert!(metrics.contains(series), "{metrics}");
    courtesy.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cooldown_one_name_earned_holds_every_name_of_the_domain() {
    let origin = Origin::start("127.0.0.23", |req| async move {
        if req.uri().path() == "/limited" {
            come_back_later(429, "30", "slow down")
        } else {
            http::Response::new(full("ok"))
        }
    })
    .await;
    let port = origin.addr.port();
    let config = format!(
        "{}[defaults]\nrate = 20.0\nburst = 1\nkey = \"domain\"\n\n\
         [[host]]\nmatch = \"*.other.test\"\nkey = \"host\"\n",
        hosts_file("127.0.0.23 www.shop.test api.shop.test x.other.test y.other.test\n")
    );
    let courtesy = Courtesy::start(&config).await;
    let client = courtesy.client();
    let throttled = client
        .get(&format!("http://www.shop.test:{port}/limited"))
        .await;
    assert_eq!(throttled.status, StatusCode::TOO_MANY_REQUESTS);
    let arrived = origin.count();
    let held = client.get(&format!("http://api.shop.test:{port}/")).await;
    assert_eq!(
        held.status,
        StatusCode::TOO_MANY_REQUESTS,
        "api.shop.test shares the cooldown"
    );
    assert!(
        held.header("proxy-status").contains("courtesy"),
        "{:?}",
        held.headers
    );
    let retry_after: u64 = held.header("retry-after").parse().unwrap();
    assert!((28..=30).contains(&retry_after), "{retry_after}");
    assert_eq!(
        origin.count(),
        arrived,
        "nothing reached the cooling domain"
    );
    // The rule for *.other.test keys by host: its names stay apart, and outside the cooldown.
    for name in ["x.other.test", "y.other.test"] {
        let got = client.get(&format!("http://{name}:{port}/")).await;
        assert_eq!(got.status, StatusCode::OK, "{name}");
    }
    let view = host_view(&courtesy, "shop.test").await;
    assert_eq!(view["state"], "cooling_down", "{view}");
    assert_eq!(
        host_view(&courtesy, &format!("x.other.test:{port}")).await["key_by"],
        "host"
    );
    // An operator's resume through either name reaches the one budget.
    let url = courtesy.admin_url(&format!("/hosts/api.shop.test:{port}/pause?seconds=60"));
    assert_eq!(admin_call("POST", &url, None, "").await.0, StatusCode::OK);
    let view = host_view(&courtesy, "shop.test").await;
    assert!(view["operator"]["paused_until_unix_ms"].is_u64(), "{view}");
    courtesy.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_domain_budget_is_kept_across_a_restart() {
    let origin = Origin::ok("127.0.0.24").await;
    let port = origin.addr.port();
    let state = temp_dir("keys-state");
    let config = format!(
        "{}[defaults]\nkey = \"domain\"\n",
        hosts_file("127.0.0.24 a.keep.test b.keep.test\n")
    );
    let courtesy = Courtesy::start_in(&config, &state).await;
    let url = courtesy.admin_url(&format!("/hosts/a.keep.test:{port}/pause?seconds=600"));
    assert_eq!(admin_call("POST", &url, None, "").await.0, StatusCode::OK);
    courtesy.shutdown().await.unwrap();

    let again = Courtesy::start_in(&config, &state).await;
    let got = again
        .client()
        .get(&format!("http://b.keep.test:{port}/"))
        .await;
    assert_eq!(
        got.status,
        StatusCode::TOO_MANY_REQUESTS,
        "the pause of keep.test survived"
    );
    assert_eq!(origin.count(), 0);
    let view = host_view(&again, "keep.test").await;
    assert_eq!(
        (view["key_by"].as_str(), view["state"].as_str()),
        (Some("domain"), Some("paused"))
    );
    again.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_sharing_a_store_keep_one_budget_per_domain() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let origin = Origin::ok("127.0.0.25").await;
    let port = origin.addr.port();
    let config = format!(
        "{}\n{}[defaults]\nrate = 4.0\nburst = 1\nkey = \"domain\"\nmax_wait_seconds = 30\n",
        redis.shared_section(""),
        hosts_file("127.0.0.25 a.pool.test b.pool.test\n")
    );
    let first = Courtesy::start(&config).await;
    let second = Courtesy::start(&config).await;
    let a = first
        .client()
        .spawn_gets((0..4).map(|i| format!("http://a.pool.test:{port}/a{i}")));
    let b = second
        .client()
        .spawn_gets((0..4).map(|i| format!("http://b.pool.test:{port}/b{i}")));
    assert_each_ok(a).await;
    assert_each_ok(b).await;
    let times = origin.arrival_times();
    assert_eq!(times.len(), 8);
    let span = times[7].duration_since(times[0]);
    assert!(
        span >= Duration::from_millis(1600),
        "one 4/s budget on the store: {span:?}"
    );
    assert!(origin.most_within_any(Duration::from_millis(200)) <= 1);
    first.shutdown().await.unwrap();
    second.shutdown().await.unwrap();
}

// One host, one name: every spelling a resolver reads as one host (case, a trailing dot, IPv6
// forms, IPv4-mapped IPv6) reaches that host's one budget, rule, rate and pause, on plain http
// and through CONNECT alike.

/// Pauses the budget named `key` for a minute through the admin API.
async fn pause(courtesy: &Courtesy, key: &str) {
    let url = courtesy.admin_url(&format!("/hosts/{key}/pause?seconds=60"));
    let (status, body) = admin_call("POST", &url, None, "").await;
    assert_eq!(status, StatusCode::OK, "{key}: {body}");
}

/// Opens a CONNECT tunnel to `target`, sends one plain `GET /plain` inside it and returns the
/// head of the answer.
async fn request_in_tunnel(proxy: std::net::SocketAddr, target: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (mut stream, head) = open_tunnel(proxy, target).await;
    assert!(head.starts_with("HTTP/1.1 200"), "CONNECT {target}: {head}");
    stream
        .write_all(format!("GET /plain HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf))
        .await
        .unwrap_or_else(|_| panic!("no answer inside the tunnel to {target}"))
        .unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_holds_every_spelling_of_its_host() {
    let v4 = Origin::ok("127.0.0.1").await;
    let v6 = Origin::ok("[::1]").await;
    let (p, q) = (v4.addr.port(), v6.addr.port());
    let courtesy = Courtesy::start(&format!(
        "[proxy]\nconnect_ports = [{p}, {q}]\n[defaults]\nrate = 50.0\nburst = 5\n"
    ))
    .await;
    pause(&courtesy, &format!("localhost:{p}")).await;
    pause(&courtesy, &format!("127.0.0.1:{p}")).await;
    pause(&courtesy, &format!("[::1]:{q}")).await;
    let client = courtesy.client();
    let spellings = [
        format!("localhost:{p}"),
        format!("LOCALHOST:{p}"),
        format!("localhost.:{p}"),
        format!("LocalHost.:{p}"),
        format!("127.0.0.1.:{p}"),
        format!("[::ffff:127.0.0.1]:{p}"),
        format!("[::1]:{q}"),
        format!("[0:0:0:0:0:0:0:1]:{q}"),
        format!("[::0001]:{q}"),
        format!("[0000::0:1]:{q}"),
    ];
    for target in &spellings {
        let got = client.get(&format!("http://{target}/plain")).await;
        assert_eq!(
            got.status,
            StatusCode::TOO_MANY_REQUESTS,
            "http://{target}/"
        );
        assert!(
            got.header("proxy-status").contains("operator paused it"),
            "{target}: {}",
            got.header("proxy-status")
        );
        // Through CONNECT: the tunnel opens (intercept mode), and the request inside it meets
        // the same pause.
        let inside = request_in_tunnel(courtesy.addr, target).await;
        assert!(
            inside.starts_with("HTTP/1.1 429"),
            "CONNECT {target}: {inside}"
        );
    }
    assert_eq!(
        (v4.count(), v6.count()),
        (0, 0),
        "no spelling got past the pause"
    );
    courtesy.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_rule_and_its_rate_are_one_for_every_spelling() {
    let origin = Origin::ok("127.0.0.1").await;
    let port = origin.addr.port();
    let dir = temp_dir("spellings");
    let file = dir.join("courtesy.toml");
    std::fs::write(
        &file,
        format!(
            "{}[defaults]\nrate = 50.0\nburst = 5\n\n\
             [[host]]\nmatch = \"slow.test\"\nrate = 0.5\nburst = 1\nmax_wait_seconds = 30\n",
            hosts_file("127.0.0.1 slow.test\n")
        ),
    )
    .unwrap();
    // `courtesy check --host` finds the rule under any spelling.
    for spelling in [
        format!("slow.test.:{port}"),
        format!("SLOW.Test:{port}"),
        format!("slow.test:{port}"),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_courtesy"))
            .args(["check", file.to_str().unwrap(), "--host", &spelling])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{spelling}: {text}");
        assert!(
            text.contains(&format!("slow.test:{port}: host rule 1")),
            "{spelling}: {text}"
        );
        assert!(text.contains("rate=0.5/s"), "{spelling}: {text}");
    }
    let courtesy = Courtesy::start_file(&file, &temp_dir("state")).await;
    let client = courtesy.client();
    // Three spellings, one after the other: one budget of 0.5/s paces them 2 s apart (three
    // budgets, or the defaults' rate, would let them through at once).
    for (i, name) in ["slow.test", "slow.test.", "SLOW.TEST."].iter().enumerate() {
        let got = client.get(&format!("http://{name}:{port}/{i}")).await;
        assert_eq!(got.status, StatusCode::OK, "{name}");
    }
    // And through CONNECT, a fourth spelling spends the same budget.
    let inside = request_in_tunnel(courtesy.addr, &format!("Slow.Test.:{port}")).await;
    assert!(inside.starts_with("HTTP/1.1 200"), "{inside}");
    let times = origin.arrival_times();
    assert_eq!(times.len(), 4);
    for pair in times.windows(2) {
        let gap = pair[1].duration_since(pair[0]);
        assert!(gap >= Duration::from_millis(1700), "{gap:?}");
    }
    // One entry in /hosts, under the canonical name.
    let view = host_view(&courtesy, &format!("slow.test.:{port}")).await;
    assert_eq!(view["host"], format!("slow.test:{port}"), "{view}");
    assert_eq!(view["counters"]["sent"], 4, "{view}");
    courtesy.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unicode_name_and_its_a_label_are_one_host_and_bad_names_get_400() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let origin = Origin::ok("127.0.0.1").await;
    let port = origin.addr.port();
    let courtesy = Courtesy::start(&format!(
        "{}[defaults]\nrate = 50.0\nburst = 5\n",
        hosts_file("127.0.0.1 xn--bcher-kva.test\n")
    ))
    .await;
    // Paused by its Unicode name (percent-encoded in the path), refused by its A-label.
    pause(&courtesy, &format!("B%C3%BCcher.test.:{port}")).await;
    let client = courtesy.client();
    let got = client
        .get(&format!("http://XN--BCHER-KVA.test.:{port}/plain"))
        .await;
    assert_eq!(got.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(got.header("proxy-status").contains("operator paused it"));
    // Names that are not hosts: a 400 naming why, never a budget of their own.
    for bad in ["a..b.test", "a.test..", "xn--a.test"] {
        let got = client.get(&format!("http://{bad}:{port}/")).await;
        assert_eq!(got.status, StatusCode::BAD_REQUEST, "{bad}");
        assert!(
            got.header("proxy-status").contains("not a valid host name"),
            "{bad}: {}",
            got.header("proxy-status")
        );
    }
    // A raw UTF-8 host never reaches courtesy's code (hyper refuses the request line), but its
    // 400 still carries Proxy-Status.
    let mut stream = tokio::net::TcpStream::connect(courtesy.addr).await.unwrap();
    stream
        .write_all(
            format!("GET http://bücher.test:{port}/ HTTP/1.1\r\nHost: bücher.test\r\n\r\n")
                .as_bytes(),
        )
        .await
        .unwrap();
    let mut buf = vec![0u8; 2048];
    let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf))
        .await
        .unwrap()
        .unwrap();
    let head = String::from_utf8_lossy(&buf[..n]).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 400"), "{head}");
    assert!(head.contains("proxy-status: "), "{head}");
    assert_eq!(origin.count(), 0);
    courtesy.shutdown().await.unwrap();
}
