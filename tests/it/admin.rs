//! End-to-end: see and steer. Metrics after known traffic, the host API, operator overrides taking
//! effect on the next request, state surviving a restart, reload (API and SIGHUP) with requests
//! queued, bad reloads rejected, the admin token, and `courtesy status`.

use std::time::Duration;

use crate::support::*;
use http::StatusCode;
use serde_json::Value;
use tokio::time::Instant;

async fn hosts(courtesy: &Courtesy) -> Value {
    let (status, body) = admin_call("GET", &courtesy.admin_url("/hosts"), None, "").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    serde_json::from_str(&body).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_the_host_api_show_known_traffic() {
    let origin = Origin::ok("127.0.0.2").await;
    let throttling = Origin::start("127.0.0.3", |_req| async {
        come_back_later(429, "60", "no")
    })
    .await;
    let courtesy = Courtesy::start("[defaults]\nrate = 100\nburst = 10\n").await;
    let client = courtesy.client();
    for i in 0..3 {
        assert_eq!(client.get(&origin.url(&format!("/{i}"))).await.status, 200);
    }
    assert_eq!(client.get(&throttling.url("/")).await.status, 429);
    assert_eq!(client.get(&throttling.url("/again")).await.status, 429); // local

    let (status, metrics) = admin_call("GET", &courtesy.admin_url("/metrics"), None, "").await;
    assert_eq!(status, StatusCode::OK);
    let ok = origin.addr.to_string();
    let slow = throttling.addr.to_string();
    for line in [
        format!("courtesy_requests_total{{host=\"{ok}\",outcome=\"upstream_2xx\"}} 3"),
        format!("courtesy_requests_total{{host=\"{slow}\",outcome=\"upstream_4xx\"}} 1"),
        format!("courtesy_requests_total{{host=\"{slow}\",outcome=\"local_cooling_down\"}} 1"),
        format!("courtesy_upstream_latency_seconds_count{{host=\"{ok}\"}} 3"),
        format!("courtesy_queue_wait_seconds_count{{host=\"{ok}\"}} 3"),
        format!("courtesy_host_queue_depth{{host=\"{ok}\"}} 0"),
        format!("courtesy_host_rate{{host=\"{ok}\"}} 100.0"),
        "courtesy_hosts_known 2".to_string(),
    ] {
        assert!(metrics.contains(&line), "missing {line:?} in\n{metrics}");
    }
    let cooldown_line = metrics
        .lines()
        .find(|l| {
            l.starts_with(&format!(
                "courtesy_host_cooldown_remaining_seconds{{host=\"{slow}\"}}"
            ))
        })
        .unwrap();
    let left: f64 = cooldown_line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!((55.0..=60.0).contains(&left), "{cooldown_line}");

    let all = hosts(&courtesy).await;
    let list = all["hosts"].as_array().unwrap();
    assert_eq!(list.len(), 2);
    let one = list.iter().find(|h| h["host"] == ok.as_str()).unwrap();
    assert_eq!(one["state"], "idle");
    assert_eq!(one["counters"]["sent"], 3);
    assert_eq!(one["counters"]["2xx"], 3);
    assert_eq!(one["last_statuses"], serde_json::json!([200, 200, 200]));
    assert_eq!(one["policy"]["rate"], 100.0);
    // Three bodies of "ok"; the 429's "no" makes 8 in all.
    assert_eq!(one["counters"]["response_bytes"], 6);
    let other = list.iter().find(|h| h["host"] == slow.as_str()).unwrap();
    assert_eq!(other["state"], "cooling_down");
    assert_eq!(other["counters"]["refused"]["cooling_down"], 1);
    assert!(other["cooldown"]["cause"].as_str().unwrap().contains("429"));
    assert_eq!(
        all["total"],
        serde_json::json!({ "hosts": 2, "in_flight": 0, "queued": 0, "cooling_down": 1, "paused": 0, "response_bytes": 8 })
    );

    // `limit` keeps the hosts that most need an operator's eye; the totals still count them all.
    let (status, body) = admin_call("GET", &courtesy.admin_url("/hosts?limit=1"), None, "").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let limited: Value = serde_json::from_str(&body).unwrap();
    let list = limited["hosts"].as_array().unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["host"], slow.as_str());
    assert_eq!(limited["total"]["hosts"], 2);
    let (status, body) = admin_call("GET", &courtesy.admin_url("/hosts?limit=0"), None, "").await;
    assert_eq!(status, StatusCode::OK);
    let none: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(none["hosts"], serde_json::json!([]));
    assert_eq!(none["total"]["cooling_down"], 1);
    let (status, body) = admin_call("GET", &courtesy.admin_url("/hosts?limit=all"), None, "").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body.contains("limit"), "{body}");

    let (status, single) = courtesy.host_page(&ok).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        serde_json::from_str::<Value>(&single).unwrap()["host"],
        ok.as_str()
    );
    let (status, _) = courtesy.host_page("nowhere.test:80").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_resume_and_rate_take_effect_on_the_next_request() {
    let origin = Origin::ok("127.0.0.4").await;
    let courtesy = Courtesy::start("[defaults]\nrate = 1\nburst = 1\n").await;
    let key = origin.addr.to_string();
    let client = courtesy.client();

    let (status, body) = admin_call(
        "POST",
        &courtesy.admin_url(&format!("/hosts/{key}/pause?seconds=300")),
        None,
        "",
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["state"],
        "paused"
    );
    let got = client.get(&origin.url("/paused")).await;
    assert_eq!(got.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(
        got.header("proxy-status").contains("operator paused it"),
        "{}",
        got.header("proxy-status")
    );
    assert_eq!(origin.count(), 0);

    let (status, _) = admin_call(
        "POST",
        &courtesy.admin_url(&format!("/hosts/{key}/resume")),
        None,
        "",
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(client.get(&origin.url("/resumed")).await.status, 200);

    // Above the configured ceiling (rate 1) only when forced.
    let rate_url = courtesy.admin_url(&format!("/hosts/{key}/rate"));
    let (status, body) = admin_call("PUT", &rate_url, None, "20").await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(body.contains("force"));
    let (status, _) = admin_call("PUT", &rate_url, None, "not a number").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, body) = admin_call("PUT", &format!("{rate_url}?force=true"), None, "20").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let view: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (
            view["operator"]["rate"].as_f64(),
            view["operator"]["forced"].as_bool()
        ),
        (Some(20.0), Some(true))
    );
    // At 20/s five more requests take about 0.2 s instead of 4 s at the configured 1/s.
    let start = Instant::now();
    for i in 0..5 {
        assert_eq!(
            client.get(&origin.url(&format!("/fast/{i}"))).await.status,
            200
        );
    }
    assert!(
        start.elapsed() < Duration::from_millis(1500),
        "{:?}",
        start.elapsed()
    );
    let (status, _) = admin_call("DELETE", &rate_url, None, "").await;
    assert_eq!(status, StatusCode::OK);
    let snapshot = hosts(&courtesy).await;
    assert_eq!(snapshot["hosts"][0]["operator"]["rate"], Value::Null);
    assert_eq!(snapshot["hosts"][0]["rate"], 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_keeps_a_cooldown() {
    let origin = Origin::start("127.0.0.5", |_req| async {
        come_back_later(429, "120", "later")
    })
    .await;
    let dir = temp_dir("restart");
    let first = Courtesy::start_in("[defaults]\nrate = 10\n", &dir).await;
    assert_eq!(first.client().get(&origin.url("/")).await.status, 429);
    first.shutdown().await.unwrap();
    assert!(dir.join("state.json").exists(), "state saved at shutdown");

    let second = Courtesy::start_in("[defaults]\nrate = 10\n", &dir).await;
    let got = second.client().get(&origin.url("/after-restart")).await;
    assert_eq!(got.status, StatusCode::TOO_MANY_REQUESTS);
    let retry_after: u64 = got.header("retry-after").parse().unwrap();
    assert!(
        (110..=120).contains(&retry_after),
        "Retry-After {retry_after}"
    );
    assert!(
        got.header("proxy-status").contains("answered 429"),
        "{}",
        got.header("proxy-status")
    );
    assert_eq!(
        origin.count(),
        1,
        "nothing reached the origin after the restart"
    );

    // A corrupt state file is a warning and a fresh start, never a crash.
    second.shutdown().await.unwrap();
    std::fs::write(dir.join("state.json"), "{ this is not json").unwrap();
    let third = Courtesy::start_in("[defaults]\nrate = 10\n", &dir).await;
    assert_eq!(third.client().get(&origin.url("/fresh")).await.status, 429);
    assert_eq!(origin.count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_applies_to_queued_requests_and_a_bad_config_is_rejected() {
    let origin = Origin::ok("127.0.0.6").await;
    let dir = temp_dir("reload");
    let file = dir.join("courtesy.toml");
    std::fs::write(&file, "[defaults]\nrate = 0.1\nburst = 1\n").unwrap();
    let courtesy = Courtesy::start_file(&file, &dir).await;
    let client = courtesy.client();
    assert_eq!(client.get(&origin.url("/first")).await.status, 200);
    let queued = client.spawn_gets((0..3).map(|i| origin.url(&format!("/queued/{i}"))));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(hosts(&courtesy).await["hosts"][0]["queued"], 3);

    // A bad new config is rejected with its errors, and the old one stays.
    std::fs::write(&file, "[defaults]\nrate = -5\nburst = 1\n").unwrap();
    let (status, body) = admin_call("POST", &courtesy.admin_url("/reload"), None, "").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body.contains("courtesy.toml:2") && body.contains("rate"),
        "{body}"
    );
    assert_eq!(hosts(&courtesy).await["hosts"][0]["policy"]["rate"], 0.1);
    assert_eq!(
        hosts(&courtesy).await["hosts"][0]["queued"],
        3,
        "nothing queued was dropped"
    );

    std::fs::write(&file, "[defaults]\nrate = 20\nburst = 1\n").unwrap();
    let start = Instant::now();
    let (status, body) = admin_call("POST", &courtesy.admin_url("/reload"), None, "").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_each_ok(queued).await;
    // At 0.1/s the three would have needed 30 s.
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(origin.count(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_api_wants_its_token() {
    let token = "s3cret-token-0123456789";
    let courtesy = Courtesy::start(&format!("[admin]\ntoken = \"{token}\"\n")).await;
    // The dashboard page holds no data and is served without the token (it reads it from #token=).
    let (status, page) = admin_call("GET", &courtesy.admin_url("/"), None, "").await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("Bearer"));
    for path in ["/hosts", "/hosts/a.test:80", "/metrics", "/ca.pem"] {
        let (status, _) = admin_call("GET", &courtesy.admin_url(path), None, "").await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}");
        let (status, _) = admin_call(
            "GET",
            &courtesy.admin_url(path),
            Some("wrong-token-000000000"),
            "",
        )
        .await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}");
        let (status, _) = admin_call("GET", &courtesy.admin_url(path), Some(token), "").await;
        assert_ne!(status, StatusCode::UNAUTHORIZED, "{path}");
    }
    // The probes tell nothing but "up" and "ready": a kubelet reaches them without the token.
    let (status, body) = admin_call("GET", &courtesy.admin_url("/healthz"), None, "").await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "ok\n"));
    let (status, body) = admin_call("GET", &courtesy.admin_url("/readyz"), None, "").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let ready: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(ready["ready"], true, "{body}");
    assert_eq!(ready["budget"], "local", "{body}");
    // Bound beyond loopback, the token is required at start-up.
    let err = courtesy::config::Config::parse(
        "[proxy]\nadmin_listen = \"0.0.0.0:3129\"\nallow_clients = [\"10.0.0.0/8\"]\n",
        "t.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("[admin] token is required"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_and_courtesy_status_prints_the_table() {
    let origin = Origin::ok("127.0.0.7").await;
    let dir = temp_dir("sighup");
    let ports = Ports::free();
    let file = dir.join("c.toml");
    let write = |rate: &str| {
        std::fs::write(
            &file,
            format!("{}[defaults]\nrate = {rate}\n", ports.proxy_section(&dir)),
        )
        .unwrap()
    };
    write("2");
    let mut child = spawn_courtesy_process(&file);
    let proxy = ProxyClient {
        proxy: ports.proxy_addr(),
    };
    assert!(listening(proxy.proxy).await);
    assert_eq!(proxy.get(&origin.url("/")).await.status, 200);
    let admin = format!("http://127.0.0.1:{}", ports.admin);
    let rate_of = |body: String| -> f64 {
        let v: Value = serde_json::from_str(&body).unwrap();
        v["hosts"][0]["policy"]["rate"].as_f64().unwrap()
    };
    assert_eq!(rate_of(fetch_direct(&format!("{admin}/hosts")).await), 2.0);

    write("4");
    let pid = child.id().unwrap().to_string();
    let kill = std::process::Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .unwrap();
    assert!(kill.success());
    let mut reloaded = false;
    for _ in 0..50 {
        if rate_of(fetch_direct(&format!("{admin}/hosts")).await) == 4.0 {
            reloaded = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(reloaded, "SIGHUP did not reload the config");

    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_courtesy"))
        .args(["status", "--config"])
        .arg(&file)
        .output()
        .await
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{table}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(table.starts_with("HOST"), "{table}");
    let row = table.lines().nth(1).unwrap_or_default();
    assert!(
        row.contains(&origin.addr.to_string()) && row.contains("idle") && row.contains("200"),
        "{table}"
    );
    assert!(
        !table.contains('\x1b'),
        "no colours when stdout is not a terminal"
    );

    // SIGTERM: a clean exit that saves the state.
    let kill = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(kill.success());
    let status = tokio::time::timeout(Duration::from_secs(15), child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "courtesy exited with {status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_come_in_pages_after_a_cursor_and_status_reads_them_all() {
    let origin_a = Origin::ok("127.0.0.2").await;
    let origin_b = Origin::ok("127.0.0.3").await;
    let origin_c = Origin::ok("127.0.0.4").await;
    let courtesy = Courtesy::start("[defaults]\nrate = 100\nburst = 10\n").await;
    for origin in [&origin_a, &origin_b, &origin_c] {
        assert_eq!(courtesy.client().get(&origin.url("/")).await.status, 200);
    }
    let mut after = String::new();
    let mut seen = Vec::new();
    loop {
        let url = courtesy.admin_url(&format!("/hosts?limit=1&after={after}"));
        let (status, body) = admin_call("GET", &url, None, "").await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let page: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(page["total"]["hosts"], 3);
        let hosts = page["hosts"].as_array().unwrap();
        assert!(hosts.len() <= 1);
        seen.extend(
            hosts
                .iter()
                .map(|h| h["host"].as_str().unwrap().to_string()),
        );
        match page["next"].as_str() {
            Some(next) => after = next.replace('[', "%5B").replace(']', "%5D"),
            None => break,
        }
    }
    let mut expected: Vec<String> = [&origin_a, &origin_b, &origin_c]
        .iter()
        .map(|o| o.addr.to_string())
        .collect();
    expected.sort();
    assert_eq!(seen, expected, "each host once, in key order");
    let (status, body) =
        admin_call("GET", &courtesy.admin_url("/hosts?limit=10001"), None, "").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let page = courtesy::status::fetch_hosts(courtesy.admin, None)
        .await
        .unwrap();
    assert_eq!(page.hosts.len(), 3);
}
