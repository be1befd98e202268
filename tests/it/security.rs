//! End-to-end: what courtesy refuses to untrusted clients. The loop guard judged on addresses (every
//! spelling of its own listeners, plain and through CONNECT), `deny_destinations` on the resolved
//! address (plain, CONNECT, blind tunnels, the robots.txt fetch), with nothing dialed.

use std::time::Duration;

use crate::support::*;
use http::{Request, StatusCode};

/// A `hosts_file` with `lines`, and the `[proxy]` lines that use it (plus `extra`).
fn proxy_section(lines: &str, extra: &str) -> String {
    let dir = temp_dir("security-hosts");
    let path = dir.join("hosts");
    std::fs::write(&path, lines).unwrap();
    format!(
        "[proxy]\nhosts_file = {:?}\n{extra}\n",
        path.display().to_string()
    )
}

/// Every way of writing 127.0.0.1 (or an address the kernel reaches as loopback) that clients
/// and resolvers accept (with the IPv6 forms that carry it: NAT64, IPv4-compatible, 6to4), and
/// names that resolve to it.
const SPELLINGS: [&str; 14] = [
    "127.0.0.1",
    "0.0.0.0",
    "0",
    "127.1",
    "0x7f000001",
    "2130706433",
    "017700000001",
    "[::ffff:127.0.0.1]",
    "[64:ff9b::7f00:1]",
    "[::127.0.0.1]",
    "[2002:7f00:1::1]",
    "localhost",
    "admin.loop.test",
    "LOOP.test.",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_spelling_of_its_own_listeners_is_a_loop_plain_and_through_connect() {
    let courtesy =
        Courtesy::start(&proxy_section("127.0.0.1 admin.loop.test loop.test\n", "")).await;
    let client = courtesy.client();
    for port in [courtesy.admin.port(), courtesy.addr.port()] {
        for host in SPELLINGS {
            let url = format!("http://{host}:{port}/hosts/example.org:443/pause?seconds=2592000");
            let got = client
                .send(Request::post(&url).body(empty()).unwrap())
                .await;
            assert_eq!(got.status, StatusCode::FORBIDDEN, "{url}");
            assert!(
                got.header("proxy-status")
                    .starts_with("courtesy; error=proxy_loop_detected"),
                "{url}: {}",
                got.header("proxy-status")
            );
            assert_connect_refused(
                &courtesy,
                &format!("{host}:{port}"),
                "proxy_loop_detected",
                &format!("CONNECT {host}:{port}"),
            )
            .await;
        }
    }
    let (status, body) = courtesy.host_page("example.org:443").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "nothing was paused: {body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_origin_on_a_listeners_address_but_another_port_is_served() {
    let origin = Origin::ok("127.0.0.1").await;
    let courtesy = Courtesy::start("").await;
    for host in ["127.0.0.1", "127.1", "0x7f000001", "localhost"] {
        let url = format!("http://{host}:{}/x", origin.addr.port());
        assert_eq!(courtesy.client().get(&url).await.status, 200, "{url}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denied_destinations_are_refused_on_the_resolved_address_and_never_dialed() {
    let origin = Origin::ok("127.0.0.1").await;
    let port = origin.addr.port();
    for https in ["intercept", "tunnel"] {
        let courtesy = Courtesy::start(&proxy_section(
            "127.0.0.1 internal.test\n::ffff:127.0.0.1 mapped.test\n",
            &format!(
                "deny_destinations = [\"127.0.0.0/8\", \"169.254.0.0/16\"]\n\
                 connect_ports = [{port}]\n\
                 [defaults]\nhttps = \"{https}\"\n"
            ),
        ))
        .await;
        for host in [
            "127.0.0.1",
            "127.1",
            "2130706433",
            "internal.test",
            "mapped.test",
        ] {
            assert_denied(&courtesy, host, port, https).await;
        }
    }
    assert_eq!(origin.count(), 0, "nothing was dialed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ipv4_address_inside_an_ipv6_one_is_denied_as_that_ipv4_address() {
    let origin = Origin::ok("127.0.0.2").await;
    let port = origin.addr.port();
    let courtesy = Courtesy::start(&proxy_section(
        "64:ff9b::7f00:2 nat64.test\n2002:7f00:2::1 sixtofour.test\n",
        &format!(
            "deny_destinations = [\"127.0.0.2/32\"]\n\
             connect_ports = [{port}]\n"
        ),
    ))
    .await;
    for host in [
        "[::ffff:127.0.0.2]",
        "[64:ff9b::7f00:2]",
        "[64:ff9b:1::7f00:2]",
        "[::127.0.0.2]",
        "[2002:7f00:2::1]",
        "nat64.test",
        "sixtofour.test",
    ] {
        assert_denied(&courtesy, host, port, "tunnel").await;
    }
    assert_eq!(origin.count(), 0, "nothing was dialed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_robots_txt_redirect_into_a_denied_range_is_never_fetched() {
    let inside = Origin::ok("127.0.0.2").await;
    let target = format!("http://127.0.0.2:{}/robots.txt", inside.addr.port());
    let origin = Origin::start("127.0.0.1", move |req| {
        let target = target.clone();
        async move {
            if req.uri().path() == "/robots.txt" {
                http::Response::builder()
                    .status(301)
                    .header("location", target)
                    .body(empty())
                    .unwrap()
            } else {
                http::Response::new(full("page"))
            }
        }
    })
    .await;
    let courtesy = Courtesy::start(
        "[proxy]\ndeny_destinations = [\"127.0.0.0/8\"]\nallow_destinations = [\"127.0.0.1/32\"]\n\
         [defaults]\nobey_robots = true\n",
    )
    .await;
    let got = courtesy.client().get(&origin.url("/page")).await;
    assert_ne!(
        got.status,
        StatusCode::OK,
        "robots.txt unreachable: {got:?}"
    );
    assert_eq!(inside.count(), 0, "the denied address was never dialed");
    assert_eq!(
        origin.paths(),
        ["/robots.txt"],
        "only robots.txt reached the allowed origin"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_listen_on_the_command_line_beyond_loopback_needs_the_token_too() {
    let dir = temp_dir("admin-listen-flag");
    let config = dir.join("courtesy.toml");
    std::fs::write(
        &config,
        format!(
            "[proxy]\nallow_clients = [\"127.0.0.0/8\"]\nstate_dir = {:?}\n",
            dir.join("state").display().to_string()
        ),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_courtesy"))
        .args([
            "run",
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "0.0.0.0:0",
            "--config",
        ])
        .arg(&config)
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "started an admin API open to the network"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("[admin] token"), "{stderr}");
    assert!(stderr.contains("--admin-listen"), "{stderr}");
}

/// `method url` straight to the admin listener with `headers`; the status and Proxy-Status.
async fn admin_with(method: &str, url: &str, headers: &[(&str, &str)]) -> (StatusCode, String) {
    let mut req = Request::builder().method(method).uri(url);
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let response = direct_client()
        .request(req.body(empty()).unwrap())
        .await
        .unwrap();
    let proxy_status = response
        .headers()
        .get("proxy-status")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    (response.status(), proxy_status)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_token_cross_site_and_rebound_admin_writes_are_refused() {
    let courtesy = Courtesy::start("").await;
    let pause = courtesy.admin_url("/hosts/example.org:443/pause?seconds=60");
    let own_host = courtesy.admin.to_string();
    for headers in [
        vec![("origin", "https://evil.example")],
        vec![("origin", "null")],
        vec![("host", "rebound.evil.example")],
        vec![("host", "rebound.evil.example:80")],
        vec![(
            "host",
            &format!("evil.example:{}", courtesy.admin.port()) as &str,
        )],
        vec![("sec-fetch-site", "cross-site")],
    ] {
        for method in ["POST", "PUT", "DELETE"] {
            let (status, proxy_status) = admin_with(method, &pause, &headers).await;
            assert_eq!(status, StatusCode::FORBIDDEN, "{method} {headers:?}");
            assert!(
                proxy_status.starts_with("courtesy; error=http_request_denied"),
                "{method} {headers:?}: {proxy_status}"
            );
        }
    }
    let (status, body) = courtesy.host_page("example.org:443").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "nothing was paused: {body}");
    let own_origin = format!("http://{own_host}");
    let (status, _) = admin_with("POST", &pause, &[("origin", &own_origin)]).await;
    assert_eq!(status, StatusCode::OK, "the dashboard's own origin");
    let (status, _) = admin_with("POST", &pause, &[]).await;
    assert_eq!(status, StatusCode::OK, "a tool sends no Origin");
    let localhost = format!("localhost:{}", courtesy.admin.port());
    let (status, _) = admin_with("POST", &pause, &[("host", &localhost)]).await;
    assert_eq!(status, StatusCode::OK, "localhost is this listener too");
}

/// A check may send robots.txt fetches to the sites it names, so without a token a web page may
/// not ask for one (GET or POST), as it may not steer courtesy; a tool, which sends neither
/// `Origin` nor `Sec-Fetch-Site`, may.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_token_a_web_page_cannot_ask_for_a_check() {
    let courtesy = Courtesy::start("").await;
    let one = courtesy.admin_url("/v1/check?url=http%3A%2F%2Fexample.org%2Fa");
    let batch = courtesy.admin_url("/v1/check");
    for headers in [
        vec![("origin", "https://evil.example")],
        vec![("sec-fetch-site", "cross-site")],
    ] {
        for (method, url) in [("GET", &one), ("POST", &batch)] {
            let (status, proxy_status) = admin_with(method, url, &headers).await;
            assert_eq!(status, StatusCode::FORBIDDEN, "{method} {headers:?}");
            assert!(
                proxy_status.starts_with("courtesy; error=http_request_denied"),
                "{method} {headers:?}: {proxy_status}"
            );
        }
    }
    let (status, _) = admin_with("GET", &one, &[]).await;
    assert_eq!(status, StatusCode::OK, "a tool sends no Origin");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_token_rebound_admin_reads_are_refused_and_probes_answer() {
    let courtesy = Courtesy::start("").await;
    let port = courtesy.admin.port();
    let rebound = format!("rebound.evil.example:{port}");
    let reads = [
        "/",
        "/jobs",
        "/hosts",
        "/hosts/example.org:443",
        "/metrics",
        "/ca.pem",
    ];
    for path in reads {
        let url = courtesy.admin_url(path);
        for method in ["GET", "HEAD"] {
            let (status, proxy_status) = admin_with(method, &url, &[("host", &rebound)]).await;
            assert_eq!(status, StatusCode::FORBIDDEN, "{method} {path}");
            assert!(
                proxy_status.starts_with("courtesy; error=http_request_denied"),
                "{method} {path}: {proxy_status}"
            );
        }
        // Its own address in any spelling, and localhost, still read (a scraper, the dashboard).
        let localhost = format!("localhost:{port}");
        for host in [courtesy.admin.to_string(), localhost] {
            let (status, _) = admin_with("GET", &url, &[("host", &host)]).await;
            assert_ne!(status, StatusCode::FORBIDDEN, "{path} under {host}");
        }
    }
    for probe in ["/healthz", "/readyz"] {
        let url = courtesy.admin_url(probe);
        let (status, _) = admin_with("GET", &url, &[("host", &rebound)]).await;
        assert_eq!(status, StatusCode::OK, "{probe} says only up");
    }

    // With a token, the token decides: a rebound page cannot send it, a remote scraper can.
    let token = "0123456789abcdef-token";
    let guarded = Courtesy::start(&format!("[admin]\ntoken = \"{token}\"\n")).await;
    let metrics = guarded.admin_url("/metrics");
    let elsewhere = [("host", "courtesy.internal.example:9090")];
    assert_eq!(
        admin_with("GET", &metrics, &elsewhere).await.0,
        StatusCode::UNAUTHORIZED
    );
    let bearer = format!("Bearer {token}");
    let with_token = [elsewhere[0], ("authorization", &bearer)];
    assert_eq!(
        admin_with("GET", &metrics, &with_token).await.0,
        StatusCode::OK
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_token_writes_need_it_in_any_case_of_the_scheme() {
    let token = "0123456789abcdef-token";
    let courtesy = Courtesy::start(&format!("[admin]\ntoken = \"{token}\"\n")).await;
    let pause = courtesy.admin_url("/hosts/example.org:443/pause?seconds=60");
    let (status, _) = admin_with("POST", &pause, &[]).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    for scheme in ["Bearer", "bearer", "BEARER"] {
        let auth = format!("{scheme} {token}");
        let (status, _) = admin_with("POST", &pause, &[("authorization", &auth)]).await;
        assert_eq!(status, StatusCode::OK, "{scheme}");
    }
}

/// GET `url` through `courtesy` with `headers`; the body and whether the cache answered.
async fn get_with(courtesy: &Courtesy, url: &str, headers: &[(&str, &str)]) -> (String, bool) {
    let mut req = Request::get(url);
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let got = courtesy.client().send(req.body(empty()).unwrap()).await;
    assert_eq!(got.status, StatusCode::OK, "{url}");
    let hit = got.header("x-courtesy-cache").starts_with("hit");
    (String::from_utf8_lossy(&got.body).into_owned(), hit)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dev_cache_keeps_one_clients_authorized_answers_from_another_and_honours_vary() {
    let origin = Origin::start("127.0.0.1", |req| async move {
        let header = |name: &str| {
            req.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("-")
                .to_string()
        };
        let body = format!(
            "{} for {} in {}",
            req.uri().path(),
            header("authorization"),
            header("accept-language")
        );
        let mut response = http::Response::builder();
        if req.uri().path() == "/public" {
            response = response.header("cache-control", "public, max-age=60");
        }
        if req.uri().path() == "/vary" {
            response = response.header("vary", "Accept-Language");
        }
        response.body(full(body)).unwrap()
    })
    .await;
    let courtesy = Courtesy::start("[defaults]\ncache = \"dev\"\nrate = 100\nburst = 10\n").await;
    let alice = [("authorization", "Bearer alice-secret")];
    let bob = [("authorization", "Bearer bob-secret")];

    // RFC 9111 3.5: not stored at all without public / s-maxage / must-revalidate.
    let private = origin.url("/private");
    assert_eq!(
        get_with(&courtesy, &private, &alice).await,
        ("/private for Bearer alice-secret in -".into(), false)
    );
    assert_eq!(
        get_with(&courtesy, &private, &bob).await,
        ("/private for Bearer bob-secret in -".into(), false)
    );
    assert!(!get_with(&courtesy, &private, &alice).await.1, "not stored");
    assert_eq!(
        get_with(&courtesy, &private, &[]).await,
        ("/private for - in -".into(), false)
    );

    // A shareable answer to Alice is Alice's alone.
    let public = origin.url("/public");
    assert!(!get_with(&courtesy, &public, &alice).await.1);
    assert_eq!(
        get_with(&courtesy, &public, &alice).await,
        ("/public for Bearer alice-secret in -".into(), true)
    );
    assert_eq!(
        get_with(&courtesy, &public, &bob).await,
        ("/public for Bearer bob-secret in -".into(), false)
    );
    assert_eq!(
        get_with(&courtesy, &public, &[]).await,
        ("/public for - in -".into(), false)
    );

    // Vary: a stored answer is served only to a request that sends the same.
    let vary = origin.url("/vary");
    assert!(
        !get_with(&courtesy, &vary, &[("accept-language", "en")])
            .await
            .1
    );
    assert_eq!(
        get_with(&courtesy, &vary, &[("accept-language", "en")]).await,
        ("/vary for - in en".into(), true)
    );
    assert_eq!(
        get_with(&courtesy, &vary, &[("accept-language", "fr")]).await,
        ("/vary for - in fr".into(), false)
    );
    assert_eq!(
        get_with(&courtesy, &vary, &[]).await,
        ("/vary for - in -".into(), false)
    );

    // Every file only courtesy's user can read.
    use std::os::unix::fs::PermissionsExt as _;
    let dir = courtesy.state_dir.join("cache");
    assert_eq!(
        std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
        0o700
    );
    let mut files = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let entry = entry.unwrap();
        // A store write still in flight renames its temporary file away under us: skip it.
        let (Ok(meta), Ok(text)) = (entry.metadata(), std::fs::read(entry.path())) else {
            continue;
        };
        let mode = meta.permissions().mode();
        assert_eq!(mode & 0o077, 0, "{:?} is {:o}", entry.path(), mode);
        assert!(
            !String::from_utf8_lossy(&text).contains("Bearer alice-secret\""),
            "no credentials in the stored head"
        );
        files += 1;
    }
    assert!(files >= 4, "{files} files");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dev_cache_never_stores_or_replays_a_cookie_or_a_set_cookie() {
    let origin = Origin::start("127.0.0.1", |req| async move {
        let cookie = req
            .headers()
            .get("cookie")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("-")
            .to_string();
        let mut response = http::Response::builder().header("cache-control", "public, max-age=60");
        if req.uri().path() == "/login" {
            response = response.header("set-cookie", "session=alice-session");
        }
        response
            .body(full(format!("{} for {cookie}", req.uri().path())))
            .unwrap()
    })
    .await;
    let courtesy = Courtesy::start("[defaults]\ncache = \"dev\"\nrate = 100\nburst = 10\n").await;
    let alice = [("cookie", "session=alice-session")];

    // A personalised answer to Alice's cookie: never stored, so never anyone else's.
    let me = origin.url("/me");
    for _ in 0..2 {
        assert_eq!(
            get_with(&courtesy, &me, &alice).await,
            ("/me for session=alice-session".into(), false)
        );
    }
    assert_eq!(
        get_with(&courtesy, &me, &[]).await,
        ("/me for -".into(), false),
        "a client without the cookie gets its own answer"
    );
    // Now stored without a cookie: a client with one still asks the origin.
    assert!(
        get_with(&courtesy, &me, &[]).await.1,
        "a plain answer is stored"
    );
    assert_eq!(
        get_with(&courtesy, &me, &alice).await,
        ("/me for session=alice-session".into(), false)
    );

    // An answer that sets a cookie is never stored nor replayed, even marked public.
    let login = origin.url("/login");
    for _ in 0..2 {
        assert_eq!(
            get_with(&courtesy, &login, &[]).await,
            ("/login for -".into(), false)
        );
    }
    let asked = origin.paths();
    let asked = asked.iter().filter(|p| !p.starts_with("/robots.txt"));
    assert_eq!(
        asked.count(),
        6,
        "every personal exchange reached the origin"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_in_a_bad_config_are_not_echoed() {
    let dir = temp_dir("secret-echo");
    for (text, secret) in [
        (
            "[admin]\ntoken = 1234567890123456789\n",
            "1234567890123456789",
        ),
        (
            "[admin]\ntoken = [\"s3cr3t-in-a-list-0123\"]\n",
            "s3cr3t-in-a-list",
        ),
        (
            "[alerts]\nwebhook = \"htps://hooks.example/T0/s3cr3t-path\"\n",
            "s3cr3t-path",
        ),
        ("[alerts]\nwebhook = 12345678901234\n", "12345678901234"),
    ] {
        let path = dir.join("courtesy.toml");
        std::fs::write(&path, text).unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_courtesy"))
            .arg("check")
            .arg(&path)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{text}");
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(said.contains("courtesy.toml:2"), "{said}");
        assert!(!said.contains(secret), "{text} echoed: {said}");
    }
}

#[test]
fn check_warns_of_weak_and_published_tokens_and_of_a_listener_without_a_deny_list() {
    let said = |path: &std::path::Path| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_courtesy"))
            .arg("check")
            .arg(path)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let dir = temp_dir("check-secrets");
    let path = dir.join("courtesy.toml");
    std::fs::write(
        &path,
        "[proxy]\nlisten = \"0.0.0.0:3128\"\nallow_clients = [\"10.0.0.0/8\"]\n\
         [admin]\ntoken = \"aaaaaaaaaaaaaaaa\"\n\
         [[job]]\nname = \"crawl-a\"\n\
         token_sha256 = \"dbb592e5b38c4ded208b00c3fdd7f4edcc869782b18ed935c6ffc90f5d6e0837\"\n",
    )
    .unwrap();
    let out = said(&path);
    for warning in [
        "warning: [proxy] listen 0.0.0.0:3128 is not a loopback address and [proxy] \
         deny_destinations is empty",
        "warning: [admin] token is guessable",
        "warning: [[job]] crawl-a token_sha256 is a shipped example's",
    ] {
        assert!(out.contains(warning), "{warning}\n{out}");
    }
    assert!(!out.contains("aaaaaaaa"), "the token is not shown: {out}");
    // The example itself says so of its own hashes.
    let team = said(std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/config/team.toml"
    )));
    assert!(
        team.contains("warning: [[job]] crawl-a token_sha256 is a shipped example's"),
        "{team}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_state_dir_is_made_private_and_an_allow_everyone_list_draws_a_warning() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = temp_dir("state-open");
    let state = dir.join("state");
    let first = Courtesy::start_in("", &state).await;
    first.shutdown().await.unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o755)).unwrap();
    let second = Courtesy::start_in("", &state).await;
    assert!(
        eventually(Duration::from_secs(5), || {
            std::fs::metadata(&state).unwrap().permissions().mode() & 0o777 == 0o700
        })
        .await,
        "the state directory is 0700 again"
    );
    drop(second);

    let ports = Ports::free();
    let config = dir.join("courtesy.toml");
    ports.write_config(
        &config,
        &dir.join("state2"),
        "allow_clients = [\"0.0.0.0/0\"]\n",
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_courtesy"))
        .arg("check")
        .arg(&config)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("warning: [proxy] allow_clients has 0.0.0.0/0"),
        "{said}"
    );
    let child = spawn_courtesy_logging(&config, Some("warn"));
    assert!(listening(ports.proxy_addr()).await);
    // Serving (so the signal handler is in place): /healthz answers.
    let health = format!("http://127.0.0.1:{}/healthz", ports.admin);
    assert_eq!(admin_call("GET", &health, None, "").await.0, StatusCode::OK);
    let logged = stop_for_log(child).await;
    assert!(logged.contains("allow_clients has 0.0.0.0/0"), "{logged}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_dir_another_user_owns_is_refused_at_start_and_by_ca() {
    let dir = temp_dir("state-foreign");
    let state = dir.join("state");
    std::fs::create_dir_all(&state).unwrap();
    // `nobody` owns it: only root may give it away (tests run as root in CI).
    if let Err(e) = std::os::unix::fs::chown(&state, Some(65534), Some(65534)) {
        assert!(std::env::var_os("CI").is_none(), "cannot chown: {e}");
        eprintln!("skipped: cannot chown ({e}); run as root");
        return;
    }
    let config = Ports::free().config_in(&dir, "");
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_courtesy"))
        .args(["run", "--config"])
        .arg(&config)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let out = tokio::time::timeout(Duration::from_secs(20), child.wait_with_output())
        .await
        .expect("courtesy refuses to start, it does not serve")
        .unwrap();
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains(&state.display().to_string()), "{said}");
    assert!(said.contains("owned by uid 65534"), "{said}");
    assert!(
        !state.join("ca-key.pem").exists(),
        "no CA key written into it"
    );
    // `courtesy ca` refuses it too, with or without --regenerate.
    for args in [&["ca"][..], &["ca", "--regenerate"]] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_courtesy"))
            .args(args)
            .arg("--config")
            .arg(&config)
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}: {said}");
        assert!(said.contains("owned by uid 65534"), "{args:?}: {said}");
        assert!(
            !state.join("ca-key.pem").exists(),
            "{args:?}: no CA key written into it"
        );
    }
}

/// A plain GET of `host:port` and a CONNECT to it are both answered 403
/// `destination_ip_prohibited`; `https` names the case in the message.
async fn assert_denied(courtesy: &Courtesy, host: &str, port: u16, https: &str) {
    let url = format!("http://{host}:{port}/secret");
    let got = courtesy.client().get(&url).await;
    assert_eq!(got.status, StatusCode::FORBIDDEN, "{url}");
    assert!(
        got.header("proxy-status")
            .starts_with("courtesy; error=destination_ip_prohibited"),
        "{url}: {}",
        got.header("proxy-status")
    );
    assert_connect_refused(
        courtesy,
        &format!("{host}:{port}"),
        "destination_ip_prohibited",
        &format!("{https} CONNECT {host}"),
    )
    .await;
}

/// A CONNECT to `target` through `courtesy` is answered 403 with `error=<error>`; `context` names
/// the case in the message.
async fn assert_connect_refused(courtesy: &Courtesy, target: &str, error: &str, context: &str) {
    let (_stream, head) = open_tunnel(courtesy.addr, target).await;
    assert!(head.starts_with("HTTP/1.1 403"), "{context}: {head}");
    assert!(
        head.contains(&format!("error={error}")),
        "{context}: {head}"
    );
}
