//! End to end: asking before queueing (`GET`/`POST /v1/check`, `courtesy check-url`). For each
//! verdict, a URL in that state gets that verdict, and a proxied GET of it right after gets the
//! matching answer; a batch of 1,000 URLs over 20 hosts answers in under a second once robots.txt
//! is known, with one robots.txt fetch per host; `fetch=false` fetches nothing; a malformed URL
//! is a 400 alone and `denied` in a batch; the CLI verb prints the answer and exits 0, 1 or 2.

use std::time::{Duration, Instant};

use base64::Engine as _;
use http::{Request, Response, StatusCode};
use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
use serde_json::Value;

use crate::support::*;

/// The site's robots.txt: `/private` disallowed, and training refused (`Content-Signal`).
const ROBOTS: &str = "User-agent: *\nDisallow: /private\nContent-Signal: ai-train=no\n";

/// Every host obeys robots.txt and enforces stated preferences; a closed host's requests are
/// answered at once (`on_cooldown = "reject"`); images are skipped; one address is denied.
const CONFIG: &str = "[proxy]\ndeny_destinations = [\"127.0.0.77/32\"]\n\
    [defaults]\nrate = 50\nburst = 10\nconcurrency = 4\nobey_robots = true\n\
    on_cooldown = \"reject\"\nskip_resources = [\"image\"]\ncontent_preferences = \"enforce\"\n\
    [[job]]\nname = \"trainer\"\npurpose = \"ai-train\"\n\
    [[job]]\nname = \"capped\"\nmax_requests = 1\nper_seconds = 600\n";

/// An origin with [`ROBOTS`] (or a 404 for it when `robots` is false) and: `/challenge`, a
/// vendor's challenge (a block); `/trigger`, a 429 with `Retry-After: 300` (a cooldown);
/// `/cached`, a page fresh for ten minutes; anything else a plain page.
async fn site(robots: bool) -> Origin {
    Origin::start(
        "127.0.0.1",
        move |req: Request<hyper::body::Incoming>| async move {
            let answer = Response::builder();
            match req.uri().path() {
                "/robots.txt" if robots => Response::new(full(ROBOTS)),
                "/robots.txt" => answer.status(404).body(full("none")).unwrap(),
                "/challenge" => answer
                    .status(403)
                    .header("cf-mitigated", "challenge")
                    .body(full("challenge"))
                    .unwrap(),
                "/trigger" => come_back_later(429, "300", "slow down"),
                "/cached" => answer
                    .header("cache-control", "max-age=600")
                    .body(full("kept"))
                    .unwrap(),
                _ => Response::new(full("page")),
            }
        },
    )
    .await
}

/// `GET /v1/check` for `url` with the rest of the query (`&job=...`): its status and JSON.
async fn check(courtesy: &Courtesy, url: &str, rest: &str) -> (StatusCode, Value) {
    let url = utf8_percent_encode(url, NON_ALPHANUMERIC);
    let path = format!("/v1/check?url={url}{rest}");
    let (status, body) = admin_call("GET", &courtesy.admin_url(&path), None, "").await;
    let json = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    (status, json)
}

/// The verdict of a check of `url` (job by `rest`), asserted to be `verdict`; the answer.
async fn expect(courtesy: &Courtesy, url: &str, rest: &str, verdict: &str) -> Value {
    let (status, answer) = check(courtesy, url, rest).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["verdict"], verdict, "{url}: {answer:#}");
    assert_eq!(answer["url"], url);
    answer
}

/// A proxied GET of `url` as the tokenless job `job` (claimed from loopback).
async fn get_as(courtesy: &Courtesy, url: &str, job: &str) -> Got {
    let pair = base64::engine::general_purpose::STANDARD.encode(format!("{job}:"));
    let request = Request::get(url)
        .header("proxy-authorization", format!("Basic {pair}"))
        .body(empty())
        .unwrap();
    courtesy.client().send(request).await
}

fn robots_fetches(origin: &Origin) -> usize {
    origin
        .paths()
        .iter()
        .filter(|p| *p == "/robots.txt")
        .count()
}

/// A local answer of courtesy's: its status, and courtesy's `Proxy-Status`.
fn assert_local(got: &Got, status: u16, what: &str) {
    assert_eq!(got.status.as_u16(), status, "{what}: {got:?}");
    assert!(
        got.header("proxy-status").starts_with("courtesy"),
        "{what}: {got:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_verdict_before_the_turn_is_what_the_get_right_after_gets() {
    let origin = site(true).await;
    let courtesy = Courtesy::start(CONFIG).await;
    let client = courtesy.client();

    let page = origin.url("/page");
    let allowed = expect(&courtesy, &page, "", "allowed").await;
    assert_eq!(allowed["robots"], "allowed", "{allowed}");
    assert_eq!(allowed["job"], "default");
    assert_eq!(allowed["host"], origin.addr.to_string());
    assert!(
        allowed["wait_s"].as_f64().is_some_and(|w| w < 1.0),
        "{allowed}"
    );
    assert_eq!(robots_fetches(&origin), 1, "the check fetched robots.txt");
    assert_eq!(client.get(&page).await.status, StatusCode::OK);

    let private = origin.url("/private/a");
    let robots = expect(&courtesy, &private, "", "robots").await;
    assert_eq!(robots["robots"], "disallowed");
    assert!(robots["wait_s"].is_null(), "{robots}");
    assert_local(&client.get(&private).await, 403, "robots");

    let trained = expect(&courtesy, &page, "&job=trainer", "preferences").await;
    assert_eq!(trained["job"], "trainer");
    assert_local(
        &get_as(&courtesy, &page, "trainer").await,
        403,
        "preferences",
    );

    let logo = origin.url("/logo.png");
    expect(&courtesy, &logo, "", "skipped_resource").await;
    assert_local(&client.get(&logo).await, 403, "skipped");

    let denied = "http://127.0.0.77:9/x";
    expect(&courtesy, denied, "", "denied").await;
    assert_local(&client.get(denied).await, 403, "denied destination");

    let scheme = "ftp://a.test/file";
    expect(&courtesy, scheme, "", "denied").await;
    assert_eq!(robots_fetches(&origin), 1, "robots.txt fetched once in all");
    assert_eq!(
        origin
            .paths()
            .iter()
            .filter(|p| *p != "/robots.txt")
            .count(),
        1,
        "only the allowed page reached the site"
    );

    let (status, body) = admin_call(
        "GET",
        &courtesy.admin_url("/v1/check?url=not%20a%20url"),
        None,
        "",
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let error: Value = serde_json::from_str(&body).unwrap();
    assert!(error["error"].is_string(), "{body}");
}

/// An operator's pause, a cooldown the site asked for and a block pause: each host's check says
/// which, with when it opens, and the GET right after gets the local 429; a fresh stored answer
/// is served even so, and the check says that too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_closed_host_has_its_verdict_and_the_get_right_after_its_429() {
    let (paused, cooling, blocked) = (site(false).await, site(false).await, site(false).await);
    let courtesy = Courtesy::start(CONFIG).await;
    let client = courtesy.client();

    let cached = paused.url("/cached");
    assert_eq!(client.get(&cached).await.status, StatusCode::OK);
    let pause = format!("/hosts/{}/pause?seconds=300", paused.addr);
    let (status, body) = admin_call("POST", &courtesy.admin_url(&pause), None, "").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        client.get(&blocked.url("/challenge")).await.status,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        client.get(&cooling.url("/trigger")).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );

    for (origin, verdict) in [
        (&paused, "paused"),
        (&cooling, "cooling_down"),
        (&blocked, "blocked"),
    ] {
        let url = origin.url("/next");
        let answer = expect(&courtesy, &url, "", verdict).await;
        assert_eq!(answer["on_cooldown"], "reject", "{answer}");
        let retry = answer["retry_after_s"].as_f64().unwrap_or(0.0);
        assert!(retry > 0.5 && retry <= 3600.0, "{answer}");
        let got = client.get(&url).await;
        assert_local(&got, 429, verdict);
        assert!(!got.header("retry-after").is_empty(), "{got:?}");
    }

    let stored = expect(&courtesy, &cached, "", "allowed").await;
    assert_eq!(stored["stored"], true, "{stored}");
    assert_eq!(stored["wait_s"], 0.0, "{stored}");
    let got = client.get(&cached).await;
    assert_eq!(got.status, StatusCode::OK, "the stored answer, host paused");
    assert_eq!(&got.body[..], b"kept");
    assert!(paused.paths().iter().all(|p| p != "/next"));
}

/// A batch of 1,000 URLs over 20 hosts: each host's robots.txt fetched once, the answers in the
/// order asked, a malformed URL `denied`; asked again once robots.txt is known, in under a
/// second, with no fetch more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_a_thousand_urls_over_twenty_hosts_fetches_each_robots_txt_once() {
    let mut origins = Vec::new();
    for _ in 0..20 {
        origins.push(site(true).await);
    }
    let courtesy = Courtesy::start(CONFIG).await;
    let mut urls: Vec<String> = (0..1000)
        .map(|i| {
            let origin = &origins[i % 20];
            match i % 5 {
                0 => origin.url(&format!("/private/{i}")),
                _ => origin.url(&format!("/page/{i}")),
            }
        })
        .collect();
    urls[999] = "no scheme at all".into();
    let body = serde_json::to_string(&urls).unwrap();
    let post = |body: String| {
        let url = courtesy.admin_url("/v1/check");
        async move { admin_call("POST", &url, None, &body).await }
    };

    let (status, first) = post(body.clone()).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    for origin in &origins {
        assert_eq!(robots_fetches(origin), 1, "one robots.txt per host");
        assert_eq!(origin.count(), 1, "and nothing else");
    }

    let started = Instant::now();
    let (status, again) = post(body).await;
    let took = started.elapsed();
    assert_eq!(status, StatusCode::OK, "{again}");
    assert!(took < Duration::from_secs(1), "the batch took {took:?}");
    let answers: Vec<Value> = serde_json::from_str(&again).unwrap();
    assert_eq!(answers.len(), 1000);
    for (i, answer) in answers.iter().enumerate().take(999) {
        assert_eq!(answer["url"], urls[i].as_str(), "in order");
        let verdict = if i % 5 == 0 { "robots" } else { "allowed" };
        assert_eq!(answer["verdict"], verdict, "{answer}");
    }
    assert_eq!(answers[999]["verdict"], "denied", "{}", answers[999]);
    assert_eq!(answers[999]["url"], "no scheme at all");
    assert!(origins.iter().all(|o| robots_fetches(o) == 1));

    let too_many = serde_json::to_string(&vec!["http://a.test/"; 1001]).unwrap();
    let (status, refused) = post(too_many).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{refused}");
}

/// `fetch=false` decides on what is known and fetches nothing, alone or in a batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_false_fetches_nothing() {
    let origin = site(true).await;
    let courtesy = Courtesy::start(CONFIG).await;
    let url = origin.url("/private/x");
    let answer = expect(&courtesy, &url, "&fetch=false", "allowed").await;
    assert_eq!(answer["robots"], "unknown", "{answer}");
    let batch = serde_json::json!({ "urls": [url, origin.url("/page")], "fetch": false });
    let (status, body) = admin_call(
        "POST",
        &courtesy.admin_url("/v1/check"),
        None,
        &batch.to_string(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let answers: Vec<Value> = serde_json::from_str(&body).unwrap();
    assert!(answers.iter().all(|a| a["robots"] == "unknown"), "{body}");
    assert_eq!(origin.count(), 0, "nothing reached the site");
    // Once known (a check that may fetch), fetch=false reads it.
    expect(&courtesy, &url, "", "robots").await;
    let known = expect(&courtesy, &url, "&fetch=false", "robots").await;
    assert_eq!(known["robots"], "disallowed");
    assert_eq!(robots_fetches(&origin), 1);
}

/// `courtesy check-url` prints the answer and exits 0 when allowed, 1 otherwise, 2 when courtesy
/// cannot be reached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_url_prints_the_answer_and_exits_by_verdict() {
    let origin = site(true).await;
    let courtesy = Courtesy::start(CONFIG).await;
    let admin = courtesy.admin.to_string();
    let run = |args: Vec<String>| async move {
        tokio::process::Command::new(env!("CARGO_BIN_EXE_courtesy"))
            .arg("check-url")
            .args(args)
            .output()
            .await
            .unwrap()
    };
    let allowed = run(vec![origin.url("/page"), "--admin".into(), admin.clone()]).await;
    let text = String::from_utf8_lossy(&allowed.stdout);
    assert_eq!(allowed.status.code(), Some(0), "{text}");
    assert!(text.starts_with("allowed: "), "{text}");

    let args = vec![
        origin.url("/private/1"),
        "--admin".into(),
        admin.clone(),
        "--json".into(),
    ];
    let robots = run(args).await;
    assert_eq!(robots.status.code(), Some(1));
    let answer: Value = serde_json::from_slice(&robots.stdout).unwrap();
    assert_eq!(answer["verdict"], "robots", "{answer}");

    let closed = format!("127.0.0.1:{}", free_port());
    let args = vec![origin.url("/page"), "--admin".into(), closed];
    let unreached = run(args).await;
    assert_eq!(unreached.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&unreached.stderr).contains("cannot reach"));
}

/// A job past its quota is `denied` with when its window frees, and its GET right after gets the
/// quota's 429; another job is still allowed on the same host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_past_its_quota_is_denied_and_its_get_gets_the_quotas_429() {
    let origin = site(false).await;
    let courtesy = Courtesy::start(CONFIG).await;
    let page = origin.url("/page");
    expect(&courtesy, &page, "&job=capped", "allowed").await;
    assert_eq!(
        get_as(&courtesy, &page, "capped").await.status,
        StatusCode::OK
    );
    let denied = expect(&courtesy, &page, "&job=capped", "denied").await;
    let retry = denied["retry_after_s"].as_f64().unwrap_or(0.0);
    assert!(retry > 500.0 && retry <= 600.0, "{denied}");
    assert_local(&get_as(&courtesy, &page, "capped").await, 429, "quota");
    expect(&courtesy, &page, "", "allowed").await;
}

/// A report-only host (`enforce = false`) forwards everything at once: a disallowed path is
/// `allowed`, the reason naming what would have refused it, and its GET gets the site's page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_only_host_is_allowed_and_the_reason_names_the_refusal() {
    let origin = site(true).await;
    let courtesy =
        Courtesy::start(&CONFIG.replace("obey_robots", "enforce = false\nobey_robots")).await;
    let private = origin.url("/private/1");
    let answer = expect(&courtesy, &private, "", "allowed").await;
    let reason = answer["reason"].as_str().unwrap_or("");
    assert!(
        reason.contains("report-only") && reason.contains("robots"),
        "{answer}"
    );
    assert_eq!(answer["robots"], "disallowed");
    let got = courtesy.client().get(&private).await;
    assert_eq!(got.status, StatusCode::OK, "{got:?}");
}

/// With `[admin] token`, a check needs the token (401 without it, with a `Proxy-Status`), and
/// `courtesy check-url --token` sends it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_needs_the_admin_token_when_one_is_set() {
    let token = "check-token-0123456789abcdef";
    let origin = site(false).await;
    let courtesy = Courtesy::start(&format!("[admin]\ntoken = \"{token}\"\n{CONFIG}")).await;
    let url = utf8_percent_encode(&origin.url("/page"), NON_ALPHANUMERIC).to_string();
    let path = courtesy.admin_url(&format!("/v1/check?url={url}"));
    let (status, _) = admin_call("GET", &path, None, "").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, body) = admin_call("GET", &path, Some(token), "").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_courtesy"))
        .args(["check-url", &origin.url("/page"), "--admin"])
        .arg(courtesy.admin.to_string())
        .args(["--token", token, "--json"])
        .output()
        .await
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer["verdict"], "allowed");
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_courtesy"))
        .args(["check-url", &origin.url("/page"), "--admin"])
        .arg(courtesy.admin.to_string())
        .args(["--token", "wrong-token-0123456789abcdef"])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "refused by courtesy itself");
}

/// `user_agent` (query, or a batch's body) names the crawler's User-Agent: its product token
/// picks the robots.txt group, as it does for the crawler's own GET.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_crawlers_user_agent_picks_the_robots_group_as_for_its_get() {
    let origin = Origin::start(
        "127.0.0.1",
        |req: Request<hyper::body::Incoming>| async move {
            match req.uri().path() {
                "/robots.txt" => Response::new(full(
                    "User-agent: pickybot\nDisallow: /\n\nUser-agent: *\nAllow: /\n",
                )),
                _ => Response::new(full("page")),
            }
        },
    )
    .await;
    let courtesy = Courtesy::start(CONFIG).await;
    let page = origin.url("/page");
    let agent = "PickyBot/2.1 (+https://example.test/bot)";
    let rest = format!(
        "&user_agent={}",
        utf8_percent_encode(agent, NON_ALPHANUMERIC)
    );
    expect(&courtesy, &page, &rest, "robots").await;
    let with_agent = Request::get(&page)
        .header("user-agent", agent)
        .body(empty())
        .unwrap();
    assert_local(&courtesy.client().send(with_agent).await, 403, "its group");
    expect(&courtesy, &page, "", "allowed").await;
    assert_eq!(courtesy.client().get(&page).await.status, StatusCode::OK);
    let batch = serde_json::json!({ "urls": [page], "user_agent": agent });
    let (status, body) = admin_call(
        "POST",
        &courtesy.admin_url("/v1/check"),
        None,
        &batch.to_string(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let answers: Vec<Value> = serde_json::from_str(&body).unwrap();
    assert_eq!(answers[0]["verdict"], "robots", "{body}");
}

/// Outside robots.txt's Visit-time hours the host waits: the check that fetched robots.txt puts
/// the window in force as a GET would, says `cooling_down` with when it opens, and the GET right
/// after gets the local 429 (`on_cooldown = "reject"`) without reaching the site.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outside_its_visit_time_a_host_is_cooling_down_for_the_check_and_the_get() {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let minute = |at: u64| format!("{:02}{:02}", (at % 86_400) / 3600, (at % 3600) / 60);
    let window = format!("{}-{}", minute(now + 3600), minute(now + 7200));
    let robots = format!("User-agent: *\nVisit-time: {window}\n");
    let origin = Origin::start("127.0.0.1", move |req: Request<hyper::body::Incoming>| {
        let robots = robots.clone();
        async move {
            match req.uri().path() {
                "/robots.txt" => Response::new(full(robots)),
                _ => Response::new(full("page")),
            }
        }
    })
    .await;
    let courtesy = Courtesy::start(CONFIG).await;
    let page = origin.url("/a");
    let answer = expect(&courtesy, &page, "", "cooling_down").await;
    assert_eq!(answer["robots"], "allowed", "{answer}");
    let retry = answer["retry_after_s"].as_f64().unwrap_or(0.0);
    assert!((3000.0..=3700.0).contains(&retry), "{answer}");
    assert!(
        answer["reason"]
            .as_str()
            .unwrap_or("")
            .contains("Visit-time"),
        "{answer}"
    );
    assert_local(&courtesy.client().get(&page).await, 429, "Visit-time");
    assert_eq!(
        origin.paths(),
        vec!["/robots.txt"],
        "only robots.txt was asked"
    );
}
