//! End-to-end parent proxies (`upstream_proxy`) with real parents on loopback: Squid as an HTTP
//! parent (absolute-form for http targets, CONNECT for https ones, with basic authentication),
//! microsocks as a SOCKS5 parent (with and without a password). Pacing is measured where it
//! matters, at the origin, behind the parent; a parent's failures are answered with a
//! `Proxy-Status` naming it and never cool the target down; credentials show nowhere.
//! Timing asserts use tolerances: these run on a busy 2-core machine.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use crate::support::*;
use http::{Response, StatusCode};
use serde_json::Value;

const USER: &str = "crawler";
/// The password as Squid knows it, and as the URL writes it (percent-encoded).
const PASSWORD: &str = "hunter2@secret";
const PASSWORD_IN_URL: &str = "hunter2%40secret";

fn squid_url(squid: &ParentProxy, password: &str) -> String {
    format!("http://{USER}:{password}@127.0.0.1:{}", squid.port)
}

/// The cooldown `/hosts` shows for `key` (`host:port`): `Value::Null` when there is none.
async fn cooldown_of(courtesy: &Courtesy, key: &str) -> Value {
    let (status, body) = admin_call("GET", &courtesy.admin_url("/hosts"), None, "").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(
        !body.contains("hunter2"),
        "/hosts shows the password: {body}"
    );
    let page: Value = serde_json::from_str(&body).unwrap();
    let hosts = page["hosts"].as_array().cloned().unwrap_or_default();
    let host = hosts.iter().find(|h| h["host"] == key);
    host.map(|h| h["cooldown"].clone()).unwrap_or(Value::Null)
}

/// An https origin on 127.0.0.1 answering "secure", and the file of the CA that signed it.
async fn https_origin(dir: &Path) -> (Origin, std::path::PathBuf) {
    let ca = TestCa::new();
    let tls = ca.server_config(&["localhost", "127.0.0.1"]);
    let origin = Origin::start_tls("127.0.0.1", tls, |_req| async {
        Response::new(full("secure"))
    })
    .await;
    (origin, ca.write(dir, "origin-ca.pem"))
}

/// A client that sends everything through `courtesy` (CONNECT for https) and trusts its CA.
fn through(courtesy: &Courtesy) -> reqwest::Client {
    reqwest::Client::builder()
        .proxy(reqwest::Proxy::all(format!("http://{}", courtesy.addr)).unwrap())
        .tls_backend_preconfigured(client_tls_trusting(&courtesy.ca_path()))
        .build()
        .unwrap()
}

/// GET `https://{origin}{path}` on a fresh client through `courtesy`.
async fn get_https(courtesy: &Courtesy, origin: &Origin, path: &str) -> reqwest::Response {
    through(courtesy)
        .get(format!("https://{}{path}", origin.addr))
        .send()
        .await
        .unwrap()
}

/// Asserts that the origin's arrivals after the first are spaced at least `gap` apart (with 10%
/// slack for a busy machine). The first is left out: it also opened the connections through the
/// parent (and Squid asked its password helper), so it reached the origin later after leaving
/// courtesy than the rest did, and the next gap looks shorter than courtesy kept it.
fn assert_paced(times: &[tokio::time::Instant], gap: Duration) {
    let gaps: Vec<Duration> = times
        .windows(2)
        .skip(1)
        .map(|pair| pair[1].duration_since(pair[0]))
        .collect();
    assert!(
        gaps.iter().all(|between| *between >= gap.mul_f64(0.9)),
        "arrivals after the first {gaps:?} apart"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_through_squid_with_credentials_is_paced_at_the_origin() {
    let Some(squid) = ParentProxy::squid(Some((USER, PASSWORD))) else {
        return;
    };
    let origin = Origin::ok("127.0.0.1").await;
    let courtesy = Courtesy::start(&format!(
        "[proxy]\nupstream_proxy = \"{}\"\n[defaults]\nrate = 4\nburst = 1\n",
        squid_url(&squid, PASSWORD_IN_URL)
    ))
    .await;
    // A burst of five clients at once: courtesy holds them and lets one go per token.
    let burst = courtesy
        .client()
        .spawn_gets((0..5).map(|i| origin.url(&format!("/page/{i}"))));
    for got in burst {
        let got = got.await.unwrap();
        assert_eq!(got.status, StatusCode::OK, "{:?}", got.body);
    }
    assert_eq!(origin.count(), 5);
    assert_paced(&origin.arrival_times(), Duration::from_millis(250));
    for arrival in origin.arrivals() {
        let via = arrival.headers["via"].to_str().unwrap();
        assert!(via.contains("courtesy") && via.contains("squid"), "{via}");
        assert!(!arrival.headers.contains_key("proxy-authorization"));
    }
    // Squid writes its access log in batches.
    let logged = eventually(Duration::from_secs(10), || {
        squid.access_log().matches("TCP_MISS/200").count() == 5
    })
    .await;
    let log = squid.access_log();
    assert!(logged && log.contains(USER), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_through_squid_is_a_connect_tunnel_intercepted_and_paced() {
    let Some(squid) = ParentProxy::squid(Some((USER, PASSWORD))) else {
        return;
    };
    let (origin, origin_ca) = https_origin(&squid.dir).await;
    let courtesy = Courtesy::start(&format!(
        "[proxy]\nupstream_proxy = \"{}\"\nupstream_ca = \"{}\"\n[defaults]\nrate = 4\nburst = 1\n",
        squid_url(&squid, PASSWORD_IN_URL),
        origin_ca.display()
    ))
    .await;
    let client = through(&courtesy);
    for i in 0..5 {
        let got = client
            .get(format!("https://{}/s/{i}", origin.addr))
            .send()
            .await
            .unwrap();
        assert_eq!(got.status(), 200);
        assert_eq!(got.text().await.unwrap(), "secure");
    }
    assert_eq!(origin.count(), 5);
    assert_paced(&origin.arrival_times(), Duration::from_millis(250));
    // TLS went end to end through the parent: it saw a CONNECT to the target, nothing inside.
    // Squid logs a tunnel when it closes: courtesy's pooled connection closes at its shutdown.
    drop(client);
    courtesy.shutdown().await.unwrap();
    let connect = format!("CONNECT 127.0.0.1:{}", origin.addr.port());
    let logged = eventually(Duration::from_secs(10), || {
        squid.access_log().contains(&connect)
    })
    .await;
    let log = squid.access_log();
    assert!(logged, "{log}");
    assert!(!log.contains("/s/"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn socks5_parents_carry_http_and_https_with_and_without_a_password() {
    let Some(open) = ParentProxy::microsocks(None) else {
        return;
    };
    let Some(guarded) = ParentProxy::microsocks(Some(("ann", "pw-socks"))) else {
        return;
    };
    let dir = temp_dir("socks");
    let (https, origin_ca) = https_origin(&dir).await;
    let http = Origin::ok("127.0.0.1").await;
    for url in [
        format!("socks5h://127.0.0.1:{}", open.port),
        format!("socks5://ann:pw-socks@127.0.0.1:{}", guarded.port),
    ] {
        let courtesy = Courtesy::start(&format!(
            "[proxy]\nupstream_proxy = \"{url}\"\nupstream_ca = \"{}\"\n[defaults]\nrate = 100\n",
            origin_ca.display()
        ))
        .await;
        let got = courtesy.client().get(&http.url("/plain")).await;
        assert_eq!(got.status, StatusCode::OK, "{url}: {:?}", got.body);
        let got = get_https(&courtesy, &https, "/tls").await;
        assert_eq!(got.status(), 200, "{url}");
    }
    assert_eq!((http.count(), https.count()), (2, 2));

    // A wrong password: the parent's refusal, named, not the target's.
    let courtesy = Courtesy::start(&format!(
        "[proxy]\nupstream_proxy = \"socks5://ann:wrong@127.0.0.1:{}\"\n",
        guarded.port
    ))
    .await;
    let got = courtesy.client().get(&http.url("/refused")).await;
    assert_eq!(got.status, StatusCode::BAD_GATEWAY);
    let status = got.header("proxy-status");
    assert!(
        status.contains("error=proxy_configuration_error")
            && status.contains(&format!("next-hop=\"127.0.0.1:{}\"", guarded.port)),
        "{status}"
    );
    assert!(!status.contains("wrong"), "{status}");
    assert_eq!(
        cooldown_of(&courtesy, &http.addr.to_string()).await,
        Value::Null
    );
    assert_eq!(http.count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_direct_host_rule_bypasses_the_parent() {
    let Some(squid) = ParentProxy::squid(None) else {
        return;
    };
    let bypassed = Origin::ok("127.0.0.2").await;
    let proxied = Origin::ok("127.0.0.3").await;
    let courtesy = Courtesy::start(&format!(
        "[proxy]\nupstream_proxy = \"http://127.0.0.1:{}\"\n[defaults]\nrate = 100\n\
         [[host]]\nmatch = \"127.0.0.2\"\nupstream_proxy = \"direct\"\n",
        squid.port
    ))
    .await;
    let client = courtesy.client();
    assert_eq!(client.get(&bypassed.url("/b")).await.status, StatusCode::OK);
    assert_eq!(client.get(&proxied.url("/p")).await.status, StatusCode::OK);
    // Squid writes its access log in batches; the bypassed request went first.
    let proxied_url = proxied.url("/p");
    let logged = eventually(Duration::from_secs(10), || {
        squid.access_log().contains(&proxied_url)
    })
    .await;
    let log = squid.access_log();
    assert!(logged && !log.contains("127.0.0.2"), "{log}");
    let via = |o: &Origin| o.arrivals()[0].headers["via"].to_str().unwrap().to_string();
    assert!(!via(&bypassed).contains("squid") && via(&proxied).contains("squid"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_that_is_down_answers_502_naming_it_and_the_target_keeps_its_pace() {
    let down = free_port();
    let dir = temp_dir("parent-down");
    let (https, origin_ca) = https_origin(&dir).await;
    let http = Origin::ok("127.0.0.1").await;
    let courtesy = Courtesy::start(&format!(
        "[proxy]\nupstream_proxy = \"http://{USER}:{PASSWORD_IN_URL}@127.0.0.1:{down}\"\n\
         upstream_ca = \"{}\"\n",
        origin_ca.display()
    ))
    .await;
    let got = courtesy.client().get(&http.url("/x")).await;
    assert_eq!(got.status, StatusCode::BAD_GATEWAY);
    let status = got.header("proxy-status");
    assert!(
        status.starts_with(&format!(
            "courtesy; error=connection_refused; next-hop=\"127.0.0.1:{down}\"; details=\"parent proxy 127.0.0.1:{down} refused"
        )),
        "{status}"
    );
    let got = get_https(&courtesy, &https, "/y").await;
    assert_eq!(got.status(), 502);
    assert!(got.headers()["proxy-status"]
        .to_str()
        .unwrap()
        .contains(&format!("next-hop=\"127.0.0.1:{down}\"")));
    // A refused connection to the target itself would start a backoff; the parent's does not.
    for key in [http.addr.to_string(), https.addr.to_string()] {
        assert_eq!(cooldown_of(&courtesy, &key).await, Value::Null, "{key}");
    }
    let got = courtesy.client().get(&http.url("/again")).await;
    assert_eq!(got.status, StatusCode::BAD_GATEWAY, "not a local 429");
    let metrics = fetch_direct(&courtesy.admin_url("/metrics")).await;
    let line = format!(
        "courtesy_upstream_proxy_errors_total{{parent=\"127.0.0.1:{down}\",kind=\"unreachable\"}} 3"
    );
    assert!(metrics.contains(&line), "{metrics}");
    assert_eq!((http.count(), https.count()), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_credentials_are_a_502_naming_the_parent_not_a_cooldown() {
    let Some(squid) = ParentProxy::squid(Some((USER, PASSWORD))) else {
        return;
    };
    let (https, origin_ca) = https_origin(&squid.dir).await;
    let http = Origin::ok("127.0.0.1").await;
    let courtesy = Courtesy::start(&format!(
        "[proxy]\nupstream_proxy = \"{}\"\nupstream_ca = \"{}\"\n",
        squid_url(&squid, "not-the-password"),
        origin_ca.display()
    ))
    .await;
    let expect = |status: &str| {
        assert!(
            status.contains(&format!(
                "courtesy; error=proxy_configuration_error; next-hop=\"127.0.0.1:{}\"; received-status=407",
                squid.port
            )),
            "{status}"
        );
        assert!(!status.contains("not-the-password"), "{status}");
    };
    for path in ["/a", "/b"] {
        let got = courtesy.client().get(&http.url(path)).await;
        assert_eq!(got.status, StatusCode::BAD_GATEWAY, "{path}");
        assert!(got.headers.get("proxy-authenticate").is_none());
        expect(&got.header("proxy-status"));
    }
    let got = get_https(&courtesy, &https, "/c").await;
    assert_eq!(got.status(), 502);
    expect(got.headers()["proxy-status"].to_str().unwrap());
    for key in [http.addr.to_string(), https.addr.to_string()] {
        assert_eq!(cooldown_of(&courtesy, &key).await, Value::Null, "{key}");
    }
    assert_eq!((http.count(), https.count()), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_never_show_in_logs_pages_or_check() {
    let Some(squid) = ParentProxy::squid(Some((USER, PASSWORD))) else {
        return;
    };
    let http = Origin::ok("127.0.0.1").await;
    let dir = temp_dir("parent-secrets");
    let ports = Ports::free();
    let config = ports.config_in(
        &dir,
        &format!(
            "upstream_proxy = \"{}\"\n[defaults]\nrate = 100\nobey_robots = false\n\
             [[host]]\nmatch = \"127.0.0.9\"\nupstream_proxy = \"socks5://ann:hunter2-socks@127.0.0.1:1\"\n",
            squid_url(&squid, PASSWORD_IN_URL)
        ),
    );
    let check = std::process::Command::new(env!("CARGO_BIN_EXE_courtesy"))
        .arg("check")
        .arg(&config)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&check.stdout).into_owned()
        + &String::from_utf8_lossy(&check.stderr);
    assert!(check.status.success(), "{said}");
    assert!(
        said.contains(&format!("{USER}:***@127.0.0.1:{}", squid.port)),
        "{said}"
    );
    assert!(said.contains("socks5://ann:***@127.0.0.1:1"), "{said}");
    assert!(!said.contains("hunter2"), "{said}");

    let log_path = dir.join("courtesy.log");
    let mut process = tokio::process::Command::new(env!("CARGO_BIN_EXE_courtesy"))
        .args(["run", "--config"])
        .arg(&config)
        .env("RUST_LOG", "debug")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    assert!(listening(ports.proxy_addr()).await);
    let client = ProxyClient {
        proxy: ports.proxy_addr(),
    };
    assert_eq!(client.get(&http.url("/ok")).await.status, StatusCode::OK);
    // A failure through each parent, so that their errors are logged too.
    let mut wrong = std::fs::read_to_string(&config).unwrap();
    wrong = wrong.replace(PASSWORD_IN_URL, "hunter2-wrong");
    std::fs::write(&config, wrong).unwrap();
    let reload = admin_call(
        "POST",
        &format!("http://127.0.0.1:{}/reload", ports.admin),
        None,
        "",
    )
    .await;
    assert_eq!(reload.0, StatusCode::OK, "{}", reload.1);
    assert!(!reload.1.contains("hunter2"), "{}", reload.1);
    assert_eq!(
        client.get(&http.url("/wrong")).await.status,
        StatusCode::BAD_GATEWAY
    );
    assert_eq!(
        client.get("http://127.0.0.9:9/").await.status,
        StatusCode::BAD_GATEWAY
    );
    let (_, hosts) = admin_call(
        "GET",
        &format!("http://127.0.0.1:{}/hosts", ports.admin),
        None,
        "",
    )
    .await;
    assert!(!hosts.contains("hunter2"), "{hosts}");
    // The route shows, without user or password.
    let page: Value = serde_json::from_str(&hosts).unwrap();
    let routes: Vec<&str> = page["hosts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|h| h["policy"]["upstream_proxy"].as_str())
        .collect();
    let parent = format!("http://127.0.0.1:{}", squid.port);
    assert!(routes.contains(&parent.as_str()), "{routes:?}");
    assert!(!hosts.contains(&format!("{USER}:")), "{hosts}");
    // SIGTERM, so that the log writer flushes what it holds.
    if let Some(pid) = process.id() {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status();
    }
    let exited = tokio::time::timeout(Duration::from_secs(15), process.wait()).await;
    assert!(exited.is_ok(), "courtesy did not stop at SIGTERM");
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(
        log.contains("parent proxy"),
        "the failures were logged: {log}"
    );
    for secret in ["hunter2", "Y3Jhd2xlcjpodW50ZXIy"] {
        assert!(!log.contains(secret), "the log shows {secret}: {log}");
    }
}

#[test]
fn bad_upstream_proxy_values_are_reported_with_file_line_and_key() {
    let text = "[proxy]\nlisten = \"127.0.0.1:3128\"\nupstream_proxy = \"ftp://u:hunter2@p:21\"\n\
                [[host]]\nmatch = \"a.test\"\nupstream_proxy = \"http://p.corp\"\n\
                [[host]]\nmatch = \"b.test\"\nupstream_proxy = \"http://127.0.0.1:3128\"\n\
                [[host]]\nmatch = \"c.test\"\nupstream_proxy = \"socks5h://u:pw@[::1\"\n";
    let errors = courtesy::config::Config::parse(text, "test.toml")
        .unwrap_err()
        .errors;
    let expected = [
        "test.toml:3: [proxy]: upstream_proxy must use http://, socks5:// or socks5h://",
        "test.toml:6: host rule 1 (match = \"a.test\"): upstream_proxy needs a port",
        "test.toml:9: host rule 2 (match = \"b.test\"): upstream_proxy http://127.0.0.1:3128 is courtesy's own listen address",
        "test.toml:12: host rule 3 (match = \"c.test\"): upstream_proxy has an IPv6 address without its closing ]",
    ];
    assert_eq!(errors.len(), expected.len(), "{errors:#?}");
    for (error, want) in errors.iter().zip(expected) {
        assert!(error.starts_with(want), "{error}\nwanted {want}");
        assert!(
            !error.contains("hunter2") && !error.contains(":pw@"),
            "{error}"
        );
    }
    // `[defaults]` takes no upstream_proxy: it is `[proxy]`'s, overridden per `[[host]]`.
    let errors =
        courtesy::config::Config::parse("[defaults]\nupstream_proxy = \"direct\"\n", "test.toml")
            .unwrap_err()
            .errors;
    assert!(
        errors[0].starts_with("test.toml:2: [defaults] upstream_proxy"),
        "{errors:?}"
    );
    let ok = courtesy::config::Config::parse(
        "[proxy]\nupstream_proxy = \"socks5h://127.0.0.1\"\n[[host]]\nmatch = \"*.corp\"\nupstream_proxy = \"direct\"\n",
        "test.toml",
    )
    .unwrap();
    assert_eq!(
        ok.policy_for("a.test", 80).forward.upstream.to_string(),
        "socks5h://127.0.0.1:1080"
    );
    assert_eq!(
        ok.policy_for("x.corp", 443).forward.upstream.to_string(),
        "direct"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blind_tunnels_go_through_the_parent_too() {
    let Some(squid) = ParentProxy::squid(None) else {
        return;
    };
    let (origin, origin_ca) = https_origin(&squid.dir).await;
    let courtesy = Courtesy::start(&format!(
        "[proxy]\nupstream_proxy = \"http://127.0.0.1:{}\"\nconnect_ports = [{}]\n\
         [defaults]\nhttps = \"tunnel\"\n",
        squid.port,
        origin.addr.port()
    ))
    .await;
    // A blind tunnel: the client speaks TLS with the origin itself, trusting the origin's CA.
    let client = reqwest::Client::builder()
        .proxy(reqwest::Proxy::all(format!("http://{}", courtesy.addr)).unwrap())
        .tls_backend_preconfigured(client_tls_trusting(&origin_ca))
        .build()
        .unwrap();
    let got = client
        .get(format!("https://{}/blind", origin.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(got.text().await.unwrap(), "secure");
    drop(client);
    let connect = format!("CONNECT 127.0.0.1:{}", origin.addr.port());
    let logged = eventually(Duration::from_secs(10), || {
        squid.access_log().contains(&connect)
    })
    .await;
    assert!(logged, "{}", squid.access_log());
}
