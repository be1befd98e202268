//! Teams: jobs named by the proxy URL's username, a fair share of each host's turns per job,
//! priorities within a job, quotas, and what courtesy stamps on a job's requests. Over real
//! sockets, with tolerances; the scheduler's exact shares are the unit tests of `lanes`.

use std::time::{Duration, Instant};

use crate::support::*;
use base64::Engine as _;
use http::Request;
use tokio::io::AsyncWriteExt;

/// `Proxy-Authorization: Basic` for `user:token`, as a client makes it from its proxy URL.
fn basic(user: &str, token: &str) -> String {
    let pair = format!("{user}:{token}");
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(pair)
    )
}

/// A GET of `url` as job `user`.
fn get_as(url: &str, user: &str, token: &str) -> Request<TestBody> {
    Request::get(url)
        .header("proxy-authorization", basic(user, token))
        .body(empty())
        .unwrap()
}

/// Sends `req` through courtesy in a task of its own.
fn spawn_send(client: ProxyClient, req: Request<TestBody>) -> tokio::task::JoinHandle<Got> {
    tokio::spawn(async move { client.send(req).await })
}

/// The entry of job `name` in a `/jobs` page.
fn job_in(page: &serde_json::Value, name: &str) -> serde_json::Value {
    page["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["job"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no job {name} in {page}"))
}

const TOKEN_A: &str = "token-of-crawl-a-0123456789";
const TOKEN_B: &str = "token-of-crawl-b-0123456789";

fn jobs_section(extra_a: &str, extra_b: &str) -> String {
    format!(
        "[[job]]\nname = \"crawl-a\"\ntoken = \"{TOKEN_A}\"\n{extra_a}\n\
         [[job]]\nname = \"crawl-b\"\ntoken = \"{TOKEN_B}\"\n{extra_b}\n"
    )
}

/// The reproduction of the issue: job A queues 100 requests for a host at 5/s, then job B asks
/// for one page. With one FIFO per host B waited 19 s; with a fair share per job its answer
/// comes within two turns (0.4 s at 5/s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_asking_once_is_not_stuck_behind_another_jobs_queue() {
    let origin = Origin::ok("127.0.0.1").await;
    let courtesy = Courtesy::start(&format!(
        "[defaults]\nrate = 5.0\nburst = 1\nconcurrency = 1\n{}",
        jobs_section("", "")
    ))
    .await;
    let client = courtesy.client();
    let bulk: Vec<_> = (0..100)
        .map(|i| {
            spawn_send(
                client,
                get_as(&origin.url(&format!("/a/{i}")), "crawl-a", TOKEN_A),
            )
        })
        .collect();
    assert!(
        eventually(Duration::from_secs(5), || origin.count() >= 3).await,
        "job A's requests are flowing"
    );
    let asked = Instant::now();
    let b = client
        .send(get_as(&origin.url("/b/0"), "crawl-b", TOKEN_B))
        .await;
    let waited = asked.elapsed();
    eprintln!("job B's one request waited {waited:?} behind job A's 100");
    assert_eq!(b.status, 200);
    // Two turns at 5/s are 0.4 s; a busy 2-core machine gets room to 1 s (the FIFO took 19 s).
    assert!(
        waited < Duration::from_millis(1000),
        "job B waited {waited:?} behind job A's queue"
    );
    let before_b = origin
        .paths()
        .iter()
        .position(|p| p == "/b/0")
        .expect("B's request reached the origin");
    assert!(before_b <= origin.count(), "B arrived");
    // The host's budget holds: at most burst + rate x T in any window.
    assert!(origin.most_within_any(Duration::from_secs(1)) <= 6);
    for task in bulk {
        task.abort();
    }
}

/// Weights 3:1, both jobs always waiting: the turns go 3:1 (± 15 %), and the host sees no more
/// than its rate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weights_three_to_one_share_the_turns_three_to_one() {
    let origin = Origin::ok("127.0.0.1").await;
    let courtesy = Courtesy::start(&format!(
        "[defaults]\nrate = 10.0\nburst = 1\nconcurrency = 1\n{}",
        jobs_section("weight = 3.0", "weight = 1.0")
    ))
    .await;
    let client = courtesy.client();
    let mut tasks = Vec::new();
    for i in 0..160 {
        tasks.push(spawn_send(
            client,
            get_as(&origin.url(&format!("/a/{i}")), "crawl-a", TOKEN_A),
        ));
        tasks.push(spawn_send(
            client,
            get_as(&origin.url(&format!("/b/{i}")), "crawl-b", TOKEN_B),
        ));
    }
    // Let both queues fill before counting, then count 12 s of turns (120 at 10/s).
    assert!(eventually(Duration::from_secs(10), || origin.count() >= 5).await);
    let start = origin.count();
    tokio::time::sleep(Duration::from_secs(12)).await;
    let paths = origin.paths();
    let window = &paths[start..];
    let a = window.iter().filter(|p| p.starts_with("/a/")).count() as f64;
    let b = window.iter().filter(|p| p.starts_with("/b/")).count() as f64;
    assert!(a + b >= 60.0, "turns were handed out: {a} + {b}");
    let ratio = a / b.max(1.0);
    eprintln!("weights 3:1 gave {a}:{b} = {ratio:.2} over 12 s");
    assert!(
        (3.0 * 0.85..=3.0 * 1.15).contains(&ratio),
        "A:B = {a}:{b} = {ratio:.2}, want 3 ± 15 %"
    );
    assert!(origin.most_within_any(Duration::from_secs(1)) <= 11);
    for task in tasks {
        task.abort();
    }
}

/// Within one job, high goes before low, and a waiting low still gets a turn in four.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn within_a_job_high_goes_first_and_low_is_not_starved() {
    let origin = Origin::ok("127.0.0.1").await;
    let courtesy = Courtesy::start(&format!(
        "[defaults]\nrate = 8.0\nburst = 1\nconcurrency = 1\n{}",
        jobs_section("", "")
    ))
    .await;
    let client = courtesy.client();
    let with = |path: String, priority: &str| {
        Request::get(origin.url(&path))
            .header("proxy-authorization", basic("crawl-a", TOKEN_A))
            .header("courtesy-priority", priority)
            .body(empty())
            .unwrap()
    };
    let mut tasks: Vec<_> = (0..12)
        .map(|i| spawn_send(client, with(format!("/low/{i}"), "low")))
        .collect();
    assert!(eventually(Duration::from_secs(5), || origin.count() >= 2).await);
    let highs_at = origin.count();
    tasks.extend((0..6).map(|i| spawn_send(client, with(format!("/high/{i}"), "high"))));
    assert!(eventually(Duration::from_secs(10), || origin.count() >= highs_at + 9).await);
    let paths = origin.paths();
    // Give the highs a moment to be queued (they were spawned just after `highs_at`).
    let after: Vec<&String> = paths[highs_at + 1..highs_at + 9].iter().collect();
    let highs = after.iter().filter(|p| p.starts_with("/high/")).count();
    let lows = after.iter().filter(|p| p.starts_with("/low/")).count();
    assert!(highs >= 5, "high goes first: {after:?}");
    assert!(lows >= 2, "a waiting low gets a turn in four: {after:?}");
    assert!(
        origin
            .arrivals()
            .iter()
            .all(|a| !a.headers.contains_key("courtesy-priority")),
        "Courtesy-Priority is courtesy's, never the origin's"
    );
    for task in tasks {
        task.abort();
    }
}

/// client_auth = "required": the right credentials name the job and never reach the origin; a
/// wrong token, no credentials, or an unknown job get 407 with `Proxy-Authenticate`, on plain
/// requests and on CONNECT alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_name_the_job_never_reach_the_origin_and_bad_ones_get_407() {
    let origin = Origin::ok("127.0.0.1").await;
    let courtesy = Courtesy::start(&format!(
        "[proxy]\nclient_auth = \"required\"\n[defaults]\nrate = 100.0\nburst = 10\n{}",
        jobs_section("", "")
    ))
    .await;
    let client = courtesy.client();
    let ok = client
        .send(get_as(&origin.url("/ok"), "crawl-a", TOKEN_A))
        .await;
    assert_eq!(ok.status, 200);
    let seen = origin.arrivals();
    assert!(
        !seen[0].headers.contains_key("proxy-authorization"),
        "the credentials stay with courtesy"
    );
    for (req, why) in [
        (
            get_as(&origin.url("/x"), "crawl-a", "wrong-token-wrong-token"),
            "not accepted",
        ),
        (
            get_as(&origin.url("/x"), "nobody", "whatever-whatever-12"),
            "not accepted",
        ),
        (
            Request::get(origin.url("/x")).body(empty()).unwrap(),
            "are required",
        ),
    ] {
        let got = client.send(req).await;
        assert_eq!(got.status, 407, "{why}");
        assert_eq!(got.header("proxy-authenticate"), "Basic realm=\"courtesy\"");
        assert!(got.header("proxy-status").contains("courtesy"), "{why}");
        assert!(String::from_utf8_lossy(&got.body).contains(why), "{why}");
        assert!(!String::from_utf8_lossy(&got.body).contains("wrong-token"));
    }
    assert_eq!(origin.count(), 1, "nothing refused reached the origin");

    // CONNECT: without credentials 407, with them the tunnel opens.
    let (_stream, head) = open_tunnel(courtesy.addr, origin.addr).await;
    assert!(head.starts_with("HTTP/1.1 407"), "{head}");
    let mut stream = tokio::net::TcpStream::connect(courtesy.addr).await.unwrap();
    let target = origin.addr;
    stream
        .write_all(
            format!(
                "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\nProxy-Authorization: {}\r\n\r\n",
                basic("crawl-b", TOKEN_B)
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let mut buf = vec![0u8; 256];
    let n = tokio::io::AsyncReadExt::read(&mut stream, &mut buf)
        .await
        .unwrap();
    let head = String::from_utf8_lossy(&buf[..n]);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
}

/// A job past its quota gets local 429s with Retry-After until its window frees; nothing of them
/// reaches the origin; every answer says what is left in `RateLimit` headers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_past_its_quota_gets_local_429s_and_ratelimit_headers() {
    let origin = Origin::ok("127.0.0.1").await;
    let courtesy = Courtesy::start(&format!(
        "[defaults]\nrate = 100.0\nburst = 10\n{}",
        jobs_section("max_requests = 3\nper_seconds = 60", "")
    ))
    .await;
    let client = courtesy.client();
    for left in [2, 1, 0] {
        let got = client
            .send(get_as(&origin.url("/q"), "crawl-a", TOKEN_A))
            .await;
        assert_eq!(got.status, 200);
        assert_eq!(got.header("ratelimit-policy"), "\"courtesy\";q=3;w=60");
        assert!(
            got.header("ratelimit")
                .starts_with(&format!("\"courtesy\";r={left};t=")),
            "{}",
            got.header("ratelimit")
        );
    }
    let refused = client
        .send(get_as(&origin.url("/q"), "crawl-a", TOKEN_A))
        .await;
    assert_eq!(refused.status, 429);
    let retry: u64 = refused.header("retry-after").parse().unwrap();
    assert!((1..=60).contains(&retry), "Retry-After {retry}");
    assert!(refused
        .header("proxy-status")
        .contains("connection_limit_reached"));
    assert!(refused.header("ratelimit").starts_with("\"courtesy\";r=0;"));
    assert_eq!(
        origin.count(),
        3,
        "the refused request never reached the origin"
    );
    // Another job is not held by A's quota, and has no RateLimit headers of its own.
    let b = client
        .send(get_as(&origin.url("/q"), "crawl-b", TOKEN_B))
        .await;
    assert_eq!(b.status, 200);
    assert_eq!(b.header("ratelimit-policy"), "");
}

/// A job's User-Agent and From are stamped on its requests; a host rule's win over the job's;
/// robots.txt is obeyed for the stamped User-Agent's group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jobs_identity_is_stamped_and_a_host_rule_wins() {
    let origin = Origin::start("127.0.0.1", |req| async move {
        if req.uri().path() == "/robots.txt" {
            return http::Response::new(full(
                "User-agent: crawl-a-bot\nDisallow: /private\n\nUser-agent: *\nDisallow:\n",
            ));
        }
        http::Response::new(full("ok"))
    })
    .await;
    let other = Origin::ok("127.0.0.2").await;
    let courtesy = Courtesy::start(&format!(
        "[defaults]\nrate = 100.0\nburst = 10\nobey_robots = true\n\
         [[host]]\nmatch = \"127.0.0.2\"\nobey_robots = false\nuser_agent = \"site-rule/1.0\"\n{}",
        jobs_section(
            "user_agent = \"crawl-a-bot/2.0 (+https://example.org/bot)\"\nfrom = \"ops@example.org\"",
            ""
        )
    ))
    .await;
    let client = courtesy.client();
    let got = client
        .send(get_as(&origin.url("/page"), "crawl-a", TOKEN_A))
        .await;
    assert_eq!(got.status, 200);
    let page = origin
        .arrivals()
        .into_iter()
        .find(|a| a.path == "/page")
        .unwrap();
    assert_eq!(
        page.headers["user-agent"],
        "crawl-a-bot/2.0 (+https://example.org/bot)"
    );
    assert_eq!(page.headers["from"], "ops@example.org");
    // The robots group is the stamped agent's: /private is disallowed for crawl-a-bot only.
    let private = client
        .send(get_as(&origin.url("/private"), "crawl-a", TOKEN_A))
        .await;
    assert_eq!(private.status, 403);
    let b_private = client
        .send(get_as(&origin.url("/private"), "crawl-b", TOKEN_B))
        .await;
    assert_eq!(b_private.status, 200, "job B's agent falls under *");
    // A host rule's user_agent wins over the job's; the job's From still goes.
    client
        .send(get_as(&other.url("/x"), "crawl-a", TOKEN_A))
        .await;
    let seen = &other.arrivals()[0];
    assert_eq!(seen.headers["user-agent"], "site-rule/1.0");
    assert_eq!(seen.headers["from"], "ops@example.org");
}

/// What each job waits for and used, seen three ways: `/jobs`, `/metrics` with a bounded `job`
/// label (configured jobs, `anonymous`, `other`), and `courtesy status --jobs`; the host view
/// says which jobs wait for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_are_seen_in_the_admin_api_metrics_and_status() {
    let origin = Origin::ok("127.0.0.1").await;
    let courtesy = Courtesy::start(&format!(
        "[defaults]\nrate = 2.0\nburst = 1\nconcurrency = 1\n{}",
        jobs_section(
            "max_requests = 100\nper_seconds = 600\nweight = 2.0",
            "priority = \"low\""
        )
    ))
    .await;
    let client = courtesy.client();
    for _ in 0..2 {
        client
            .send(get_as(&origin.url("/seen"), "crawl-a", TOKEN_A))
            .await;
    }
    // A name no [[job]] gives, and no credentials at all.
    client
        .send(get_as(&origin.url("/seen"), "someone-else", "whatever"))
        .await;
    client.get(&origin.url("/seen")).await;
    // Requests of B left waiting, for the waiting counts.
    let waiting: Vec<_> = (0..4)
        .map(|i| {
            spawn_send(
                client,
                get_as(&origin.url(&format!("/w/{i}")), "crawl-b", TOKEN_B),
            )
        })
        .collect();
    assert!(
        eventually(Duration::from_secs(5), || origin.count() >= 5).await,
        "B started"
    );

    let (status, body) = admin_call("GET", &courtesy.admin_url("/jobs"), None, "").await;
    assert_eq!(status, 200, "{body}");
    let page: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(page["client_auth"], "optional");
    let job = |name: &str| job_in(&page, name);
    let a = job("crawl-a");
    assert_eq!(a["served"], 2);
    assert_eq!(a["weight"], 2.0);
    assert_eq!(a["quota"]["max_requests"], 100);
    assert_eq!(a["quota"]["remaining"], 98);
    let b = job("crawl-b");
    assert_eq!(b["priority"], "low");
    assert!(b["waiting"].as_u64().unwrap() >= 1, "{b}");
    assert_eq!(job("someone-else")["configured"], false);
    assert_eq!(job("anonymous")["served"], 1);

    let (_, host) = courtesy.host_page(&origin.addr.to_string()).await;
    assert!(
        host.contains("\"waiting_by_job\"") && host.contains("crawl-b"),
        "{host}"
    );

    let metrics = fetch_direct(&courtesy.admin_url("/metrics")).await;
    assert!(
        metrics.contains("courtesy_job_requests_total{job=\"crawl-a\",outcome=\"served\"} 2"),
        "{metrics}"
    );
    assert!(metrics.contains("courtesy_job_requests_total{job=\"other\",outcome=\"served\"} 1"));
    assert!(metrics.contains("courtesy_job_quota_remaining{job=\"crawl-a\"} 98"));
    assert!(
        !metrics.contains("someone-else"),
        "the job label is bounded"
    );

    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_courtesy"))
        .args(["status", "--jobs", "--admin"])
        .arg(courtesy.admin.to_string())
        .output()
        .await
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{table}");
    assert!(
        table.lines().nth(1).unwrap_or("").starts_with("JOB"),
        "{table}"
    );
    let a_row = table
        .lines()
        .find(|l| l.starts_with("crawl-a"))
        .unwrap_or("");
    assert!(a_row.contains("98/100"), "{table}");
    for task in waiting {
        task.abort();
    }
}

/// A report-only host forwards every job's requests at once, and says what each job's fair
/// share would have made it wait: the job that floods it, a lot; the job asking once, nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn report_only_hosts_say_what_fairness_would_have_done_per_job() {
    let origin = Origin::ok("127.0.0.1").await;
    let courtesy = Courtesy::start(&format!(
        "[defaults]\nrate = 2.0\nburst = 1\nconcurrency = 100\nenforce = false\n{}",
        jobs_section("", "")
    ))
    .await;
    let client = courtesy.client();
    let flood: Vec<_> = (0..10)
        .map(|i| {
            spawn_send(
                client,
                get_as(&origin.url(&format!("/a/{i}")), "crawl-a", TOKEN_A),
            )
        })
        .collect();
    for task in flood {
        assert_eq!(task.await.unwrap().status, 200, "report-only: nothing held");
    }
    let b = client
        .send(get_as(&origin.url("/b"), "crawl-b", TOKEN_B))
        .await;
    assert_eq!(b.status, 200);
    let (_, body) = admin_call("GET", &courtesy.admin_url("/jobs"), None, "").await;
    let page: serde_json::Value = serde_json::from_str(&body).unwrap();
    let job = |name: &str| job_in(&page, name);
    let a = job("crawl-a");
    // Ten at once at 2/s: nine would have waited, 0.5 s to 4.5 s (22.5 s in all).
    assert_eq!(a["shadow_would_wait"], 9, "{a}");
    let a_seconds = a["shadow_would_wait_seconds"].as_f64().unwrap();
    assert!((20.0..=23.0).contains(&a_seconds), "{a}");
    // B's one request: its own share, not the end of A's line.
    let b = job("crawl-b");
    assert!(
        b["shadow_would_wait_seconds"].as_f64().unwrap() <= 1.0,
        "{b}"
    );
    assert_eq!(origin.count(), 11);
}

/// Invariant 15, the reproduction: one client queues requests under 40 invented
/// usernames, then job B asks once. The names share the client's one share, so B's request gets
/// a turn within about two turns of the host (it waited behind 40 before, 19 s at 2/s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forty_invented_names_take_one_share_not_forty() {
    let origin = Origin::ok("127.0.0.1").await;
    let courtesy = Courtesy::start(&format!(
        "[defaults]\nrate = 5.0\nburst = 1\nconcurrency = 1\n{}",
        jobs_section("", "")
    ))
    .await;
    let client = courtesy.client();
    let mut crowd = Vec::new();
    for round in 0..3 {
        for name in 0..40 {
            let url = origin.url(&format!("/made-up/{name}/{round}"));
            crowd.push(spawn_send(
                client,
                get_as(&url, &format!("made-up-{name}"), "x"),
            ));
        }
    }
    assert!(
        eventually(Duration::from_secs(5), || origin.count() >= 3).await,
        "the invented names' requests are flowing"
    );
    // Give the crowd time to be queued (120 requests on a 2-core machine).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let turns_before = origin.count();
    let b = client
        .send(get_as(&origin.url("/b/0"), "crawl-b", TOKEN_B))
        .await;
    assert_eq!(b.status, 200);
    let at = origin
        .paths()
        .iter()
        .position(|p| p == "/b/0")
        .expect("B's request reached the origin");
    let turns = at.saturating_sub(turns_before);
    eprintln!("job B waited {turns} turns behind 40 invented names");
    assert!(
        turns <= 3,
        "B waited {turns} turns behind one client's invented names"
    );
    for task in crowd {
        task.abort();
    }
}

/// 1,000 pipelined requests, each with a new username, each answered 400 (a bad
/// `Courtesy-On-Cooldown`): none of the names enters the job table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_requests_with_new_names_leave_the_job_table_unchanged() {
    let origin = Origin::ok("127.0.0.1").await;
    let courtesy = Courtesy::start(&format!(
        "[defaults]\nrate = 100.0\nburst = 10\n{}",
        jobs_section("", "")
    ))
    .await;
    let jobs_before = admin_call("GET", &courtesy.admin_url("/jobs"), None, "")
        .await
        .1;
    let mut stream = tokio::net::TcpStream::connect(courtesy.addr).await.unwrap();
    let mut requests = String::new();
    for i in 0..1000 {
        requests.push_str(&format!(
            "GET {} HTTP/1.1\r\nHost: {}\r\nProxy-Authorization: {}\r\nCourtesy-On-Cooldown: bogus\r\n\r\n",
            origin.url(&format!("/x/{i}")),
            origin.addr,
            basic(&format!("new-name-{i}"), "x"),
        ));
    }
    stream.write_all(requests.as_bytes()).await.unwrap();
    let mut seen = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let read = tokio::time::timeout(
            Duration::from_secs(2),
            tokio::io::AsyncReadExt::read(&mut stream, &mut buf),
        )
        .await;
        match read {
            Ok(Ok(n)) if n > 0 => seen.extend_from_slice(&buf[..n]),
            _ => break,
        }
        if count_of(&seen, b"HTTP/1.1 ") >= 1000 {
            break;
        }
    }
    let answers = count_of(&seen, b"HTTP/1.1 ");
    assert!(answers >= 1, "some answers came");
    assert_eq!(count_of(&seen, b"HTTP/1.1 400"), answers, "every one a 400");
    eprintln!("{answers} pipelined requests answered 400");
    assert_eq!(origin.count(), 0);
    let jobs_after = admin_call("GET", &courtesy.admin_url("/jobs"), None, "")
        .await
        .1;
    assert!(!jobs_after.contains("new-name-"), "{jobs_after}");
    assert_eq!(jobs_before, jobs_after, "the table is unchanged");
}

fn count_of(haystack: &[u8], needle: &[u8]) -> usize {
    haystack
        .windows(needle.len())
        .filter(|w| *w == needle)
        .count()
}

/// Queue room is fair between jobs: job A fills `max_queue`; job B's single request is still
/// admitted and answered (it got an immediate 503 before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_filling_max_queue_leaves_room_for_another_jobs_request() {
    let origin = Origin::ok("127.0.0.1").await;
    let courtesy = Courtesy::start(&format!(
        // One turn every 2 s: the queue stays full while the test looks at it.
        "[defaults]\nrate = 0.5\nburst = 1\nconcurrency = 1\nmax_queue = 10\n{}",
        jobs_section("", "")
    ))
    .await;
    let client = courtesy.client();
    let bulk: Vec<_> = (0..30)
        .map(|i| {
            spawn_send(
                client,
                get_as(&origin.url(&format!("/a/{i}")), "crawl-a", TOKEN_A),
            )
        })
        .collect();
    // A has filled the queue once its own requests are being refused: wait until the queue
    // holds max_queue (the 30 requests arrive on their own connections, in their own time).
    let mut queued = 0;
    for _ in 0..400 {
        let (_, page) = courtesy.host_page(&origin.addr.to_string()).await;
        queued = serde_json::from_str::<serde_json::Value>(&page)
            .ok()
            .and_then(|v| v["queued"].as_u64())
            .unwrap_or(0);
        if queued >= 10 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(queued, 10, "A's requests fill max_queue");
    let a_refused = client
        .send(get_as(&origin.url("/a/more"), "crawl-a", TOKEN_A))
        .await;
    assert_eq!(a_refused.status, 503, "A alone fills the queue");
    let b = client
        .send(get_as(&origin.url("/b/0"), "crawl-b", TOKEN_B))
        .await;
    assert_eq!(b.status, 200, "B's request was admitted: {:?}", b.body);
    for task in bulk {
        task.abort();
    }
}

/// `Courtesy-Priority` is a configured job's: an anonymous request saying `high` keeps its
/// place in arrival order (it went ahead of every other anonymous request before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anonymous_high_priority_does_not_jump_the_queue() {
    let origin = Origin::ok("127.0.0.1").await;
    let courtesy = Courtesy::start("[defaults]\nrate = 8.0\nburst = 1\nconcurrency = 1\n").await;
    let client = courtesy.client();
    let mut tasks = Vec::new();
    for i in 0..8 {
        tasks.push(client.spawn_get(origin.url(&format!("/n/{i}"))));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(eventually(Duration::from_secs(5), || origin.count() >= 1).await);
    let high = Request::get(origin.url("/high"))
        .header("courtesy-priority", "high")
        .body(empty())
        .unwrap();
    let got = client.send(high).await;
    assert_eq!(got.status, 200);
    let paths = origin.paths();
    let at = paths.iter().position(|p| p == "/high").unwrap();
    assert!(at >= 6, "the anonymous high waited its turn: {paths:?}");
    for task in tasks {
        task.abort();
    }
}

/// Wrong tokens: each counted in `courtesy_auth_failures_total`, the answers to one address
/// slowed after a few, and the 407 the same for a wrong token and a name no job has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_tokens_are_counted_slowed_and_answered_alike() {
    let origin = Origin::ok("127.0.0.1").await;
    let courtesy = Courtesy::start(&format!(
        "[proxy]\nclient_auth = \"required\"\n{}",
        jobs_section("", "")
    ))
    .await;
    let mut conn = courtesy.client().connect().await;
    let unknown = conn
        .send(get_as(&origin.url("/x"), "nobody", "whatever-whatever-12"))
        .await;
    let started = Instant::now();
    let mut wrong = Vec::new();
    for _ in 0..6 {
        wrong.push(
            conn.send(get_as(
                &origin.url("/x"),
                "crawl-a",
                "wrong-token-wrong-token",
            ))
            .await,
        );
    }
    let took = started.elapsed();
    assert_eq!(unknown.status, 407);
    for got in &wrong {
        assert_eq!(got.status, 407);
        assert_eq!(got.body, unknown.body, "one text for both");
        assert_eq!(got.header("proxy-status"), unknown.header("proxy-status"));
    }
    // Failures 4 to 7 of the address are held 50 + 100 + 200 + 400 ms.
    assert!(took >= Duration::from_millis(700), "slowed: {took:?}");
    let metrics = fetch_direct(&courtesy.admin_url("/metrics")).await;
    assert!(
        metrics.contains("courtesy_auth_failures_total 7"),
        "{metrics}"
    );
    assert_eq!(origin.count(), 0);
}

/// Held 407s are capped per address (issue 47): past the brake's free strikes, at most four
/// wrong-token answers of one address are held at once; the rest are answered at once and their
/// connections closed, so a guesser on a shared NAT address cannot fill its connection slots.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_four_407s_of_one_address_are_held_at_once() {
    let origin = Origin::ok("127.0.0.1").await;
    let courtesy = Courtesy::start(&format!(
        "[proxy]
client_auth = \"required\"\n{}",
        jobs_section("", "")
    ))
    .await;
    // Ten failures in a row: the next ones of this address are held 3.2 s and more.
    let mut conn = courtesy.client().connect().await;
    for _ in 0..10 {
        let got = conn
            .send(get_as(
                &origin.url("/x"),
                "crawl-a",
                "wrong-token-wrong-token",
            ))
            .await;
        assert_eq!(got.status, 407);
    }
    let client = courtesy.client();
    let started = Instant::now();
    let guesses: Vec<_> = (0..12)
        .map(|_| {
            let url = origin.url("/x");
            tokio::spawn(async move {
                let got = client
                    .send(get_as(&url, "crawl-a", "wrong-token-wrong-token"))
                    .await;
                (got, started.elapsed())
            })
        })
        .collect();
    let mut at_once = 0;
    for guess in guesses {
        let (got, took) = guess.await.unwrap();
        assert_eq!(got.status, 407);
        if took < Duration::from_secs(1) {
            at_once += 1;
            assert_eq!(
                got.header("connection"),
                "close",
                "answered at once, closed"
            );
        }
    }
    assert!(
        at_once >= 8,
        "only four held at once: {at_once} answered at once"
    );
    assert_eq!(origin.count(), 0);
}

/// A job set to `on_cooldown = "reject"` gets the local 429 at once through a short window that
/// the defaults wait out for everyone else ("auto"), and its request's own header still wins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_set_to_reject_is_answered_at_once_while_the_others_are_held() {
    // The first request is answered 429 with Retry-After: 2; the rest are pages.
    let first = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let origin = Origin::start("127.0.0.1", move |_req| {
        let throttle = first.swap(false, std::sync::atomic::Ordering::SeqCst);
        async move {
            if throttle {
                come_back_later(429, "2", "slow down")
            } else {
                http::Response::new(full("a page"))
            }
        }
    })
    .await;
    let courtesy = Courtesy::start(&format!(
        "[defaults]\nobey_robots = false\nretry_idempotent = 0\n{}",
        jobs_section("on_cooldown = \"reject\"", "")
    ))
    .await;
    let client = courtesy.client();
    assert_eq!(client.get(&origin.url("/first")).await.status, 429);
    let started = Instant::now();
    let rejected = client
        .send(get_as(&origin.url("/a"), "crawl-a", TOKEN_A))
        .await;
    assert_eq!(rejected.status, 429);
    assert!(rejected.header("proxy-status").starts_with("courtesy"));
    assert!(started.elapsed() < Duration::from_millis(500));
    // The same job asking to be held is held; another job is held by the default.
    let mut asks = get_as(&origin.url("/a-held"), "crawl-a", TOKEN_A);
    asks.headers_mut().insert(
        "courtesy-on-cooldown",
        http::HeaderValue::from_static("hold"),
    );
    let (held, other) = tokio::join!(
        client.send(asks),
        client.send(get_as(&origin.url("/b"), "crawl-b", TOKEN_B))
    );
    assert_eq!((held.status.as_u16(), other.status.as_u16()), (200, 200));
    assert!(started.elapsed() >= Duration::from_millis(1500));
}
