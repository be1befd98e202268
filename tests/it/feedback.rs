//! End-to-end: courtesy listens to what servers say (429, 503, Retry-After, latency, RateLimit
//! headers) for every client at once. Origins here log arrival times and the windows they announce.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use crate::support::*;
use http::{Method, Request, Response, StatusCode};
use tokio::time::Instant;

/// An origin that allows `limit` requests per fixed one-second window in total and answers 429
/// with `Retry-After` (seconds, or an HTTP-date) beyond that. It records the windows it announced.
struct LimitedOrigin {
    origin: Origin,
    windows: Arc<Mutex<Vec<(Instant, Instant)>>>,
    throttled: Arc<Mutex<usize>>,
}

async fn limited_origin(ip: &str, limit: usize, http_date: bool) -> LimitedOrigin {
    let start = Instant::now();
    let windows = Arc::new(Mutex::new(Vec::new()));
    let throttled = Arc::new(Mutex::new(0usize));
    let counts = Arc::new(Mutex::new((0u64, 0usize)));
    let (w, t) = (windows.clone(), throttled.clone());
    let origin = Origin::start(ip, move |_req| {
        let (w, t, counts) = (w.clone(), t.clone(), counts.clone());
        async move {
            let now = Instant::now();
            let elapsed = now.duration_since(start);
            let second = elapsed.as_secs();
            let allowed = {
                let mut c = counts.lock().unwrap();
                if c.0 != second {
                    *c = (second, 0);
                }
                c.1 += 1;
                c.1 <= limit
            };
            if allowed {
                return Response::new(full("ok"));
            }
            *t.lock().unwrap() += 1;
            let (value, until) = if http_date {
                // Two whole seconds ahead on the wall clock (HTTP-dates have one-second resolution).
                let wall = SystemTime::now() + Duration::from_secs(2);
                let date = httpdate::fmt_http_date(wall);
                let trunc = httpdate::parse_http_date(&date).unwrap();
                let ahead = trunc.duration_since(SystemTime::now()).unwrap_or_default();
                (date, now + ahead)
            } else {
                ("1".to_string(), now + Duration::from_secs(1))
            };
            w.lock().unwrap().push((now, until));
            Response::builder()
                .status(429)
                .header("retry-after", value)
                .body(full("slow down"))
                .unwrap()
        }
    })
    .await;
    LimitedOrigin {
        origin,
        windows,
        throttled,
    }
}

/// Asserts that no arrival fell strictly inside an announced window (5 ms of slack at its end for
/// clock reads on two sides of a socket).
fn assert_nothing_inside_windows(origin: &Origin, windows: &[(Instant, Instant)]) {
    for a in origin.arrivals() {
        for (from, until) in windows {
            let inside = a.at > *from && a.at + Duration::from_millis(5) < *until;
            assert!(
                !inside,
                "a request reached the origin {:?} into a window of {:?}",
                a.at.duration_since(*from),
                until.duration_since(*from)
            );
        }
    }
}

/// A crawler that respects Retry-After on 429s: it sleeps that long and goes on. Returns how many
/// answers it got (every request gets one).
async fn polite_client(client: ProxyClient, url: String, end: Instant) -> (usize, usize) {
    let mut conn = client.connect().await;
    let (mut sent, mut answered) = (0, 0);
    // Bounded by count and time.
    while Instant::now() < end && sent < 2000 {
        sent += 1;
        let got = conn.get(&url).await;
        answered += 1;
        if got.status == StatusCode::TOO_MANY_REQUESTS {
            let wait: u64 = got.header("retry-after").parse().unwrap_or(1);
            let until = (Instant::now() + Duration::from_secs(wait)).min(end);
            tokio::time::sleep_until(until).await;
        }
    }
    (sent, answered)
}

/// The seed article's Practice exercise through courtesy with `config` for 30 s: 8 polite
/// clients against an origin allowing 5 requests per second in total. Asserts that every request
/// was answered, that none reached the origin inside a window it announced, that the rate over
/// the last third is within `rates`, and that fewer than `share_429` of the origin's answers
/// were 429.
async fn practice(ip: &str, config: &str, rates: (f64, f64), share_429: f64) {
    let limited = limited_origin(ip, 5, false).await;
    let courtesy = Courtesy::start(config).await;
    let start = Instant::now();
    let duration = Duration::from_secs(30);
    let end = start + duration;
    let mut clients = Vec::new();
    for _ in 0..8 {
        let url = limited.origin.url("/practice");
        clients.push(tokio::spawn(polite_client(courtesy.client(), url, end)));
    }
    for c in clients {
        let (sent, answered) = c.await.unwrap();
        assert_eq!(sent, answered, "every client request got an answer");
    }
    let arrivals = limited.origin.arrivals();
    let total = arrivals.len();
    let throttled = *limited.throttled.lock().unwrap();
    let last_third = arrivals
        .iter()
        .filter(|a| a.at >= start + duration * 2 / 3 && a.at < end)
        .count();
    let rate_last_third = last_third as f64 / (duration.as_secs_f64() / 3.0);
    eprintln!("origin saw {total} requests, {throttled} answered 429, {rate_last_third:.2}/s over the last third");
    assert!(
        rate_last_third <= rates.1,
        "{rate_last_third:.2}/s over the last third"
    );
    assert!(
        rate_last_third >= rates.0,
        "courtesy starved the host: {rate_last_third:.2}/s"
    );
    assert!(
        (throttled as f64) < share_429 * total as f64,
        "{throttled} of {total} origin answers were 429"
    );
    assert_nothing_inside_windows(&limited.origin, &limited.windows.lock().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seed_practice_exercise_on_defaults_uses_nearly_all_the_server_allows() {
    // The exercise's own settings (10/s, adaptive), everything else as shipped: the default
    // controller, the learned limit. Ten seconds touch eleven of the origin's whole seconds: at
    // most 55 arrivals.
    let config = "[defaults]\nrate = 10\nadaptive = true\nmax_rate = 10\n";
    practice("127.0.0.2", config, (4.3, 5.5), 0.02).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aimd_stays_selectable_and_converges_below_the_servers_limit() {
    let config = "[defaults]\nrate = 10\nburst = 1\nadaptive = true\nmax_rate = 10\n\
                  controller = \"aimd\"\n";
    practice("127.0.0.15", config, (2.0, 5.0), 0.05).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_as_an_http_date_is_honoured() {
    let limited = limited_origin("127.0.0.3", 3, true).await;
    let config = "[defaults]\nrate = 20\nburst = 1\n";
    let courtesy = Courtesy::start(config).await;
    let end = Instant::now() + Duration::from_secs(6);
    let mut clients = Vec::new();
    for _ in 0..3 {
        let url = limited.origin.url("/date");
        clients.push(tokio::spawn(polite_client(courtesy.client(), url, end)));
    }
    for c in clients {
        c.await.unwrap();
    }
    let windows = limited.windows.lock().unwrap().clone();
    assert!(!windows.is_empty(), "the origin never throttled");
    assert!(windows
        .iter()
        .all(|(f, u)| u.duration_since(*f) >= Duration::from_secs(1)));
    assert_nothing_inside_windows(&limited.origin, &windows);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_503_without_retry_after_backs_off_exponentially() {
    let served = Arc::new(Mutex::new(0usize));
    let s = served.clone();
    let origin = Origin::start("127.0.0.4", move |_req| {
        let s = s.clone();
        async move {
            let n = {
                let mut n = s.lock().unwrap();
                *n += 1;
                *n
            };
            let status = if n <= 2 { 503 } else { 200 };
            Response::builder().status(status).body(full("x")).unwrap()
        }
    })
    .await;
    let config =
        "[defaults]\nrate = 50\nburst = 1\non_cooldown = \"hold\"\nbackoff_initial_seconds = 0.5\nretry_idempotent = 0\n";
    let courtesy = Courtesy::start(config).await;
    let mut conn = courtesy.client().connect().await;
    let statuses = [
        conn.get(&origin.url("/1")).await.status,
        conn.get(&origin.url("/2")).await.status,
        conn.get(&origin.url("/3")).await.status,
        conn.get(&origin.url("/4")).await.status,
    ];
    assert_eq!(statuses.map(|s| s.as_u16()), [503, 503, 200, 200]);
    let at = origin.arrival_times();
    let gaps: Vec<f64> = at
        .windows(2)
        .map(|w| w[1].duration_since(w[0]).as_secs_f64())
        .collect();
    // 0.5 s after the first 503, 1 s after the second (jitter only lengthens, by up to a quarter).
    assert!(gaps[0] >= 0.49 && gaps[0] < 1.0, "{gaps:?}");
    assert!(gaps[1] >= 0.99 && gaps[1] < 1.8, "{gaps:?}");
    // A healthy answer ends the backoff: the next request goes at the resumed rate.
    assert!(gaps[2] < 0.3, "{gaps:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rising_latency_lowers_the_rate_without_any_error() {
    let start = Instant::now();
    let origin = Origin::start("127.0.0.5", move |_req| async move {
        // Healthy for a second, then every answer takes 300 ms.
        if start.elapsed() > Duration::from_secs(1) {
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        Response::new(full("x"))
    })
    .await;
    let config = "[defaults]\nrate = 5\nburst = 1\nconcurrency = 8\nadaptive = true\nslow_response_ms = 200\n";
    let courtesy = Courtesy::start(config).await;
    let end = start + Duration::from_secs(8);
    hammer_until(&courtesy, vec![origin.url("/"); 8], end).await;
    let arrivals = origin.arrivals();
    let late: Vec<Instant> = arrivals
        .iter()
        .map(|a| a.at)
        .filter(|at| *at >= start + Duration::from_secs(5))
        .collect();
    let rate = (late.len().saturating_sub(1)) as f64
        / late.last().unwrap().duration_since(late[0]).as_secs_f64();
    assert!(
        rate < 4.0,
        "the rate stayed at {rate:.2}/s although the host slowed down"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reject_answers_at_once_during_a_cooldown_and_other_hosts_are_unaffected() {
    let throttling = Origin::start("127.0.0.6", |_req| async {
        come_back_later(429, "10", "no")
    })
    .await;
    let other = Origin::ok("127.0.0.7").await;
    let courtesy =
        Courtesy::start("[defaults]\nrate = 100\nburst = 5\non_cooldown = \"reject\"\n").await;
    let client = courtesy.client();
    let got = client.get(&throttling.url("/a")).await;
    assert_eq!(got.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(
        got.headers.get("proxy-status").is_none(),
        "the origin's own 429 passes through"
    );

    let asked = Instant::now();
    let local = client.get(&throttling.url("/b")).await;
    assert!(
        asked.elapsed() < Duration::from_millis(50),
        "{:?}",
        asked.elapsed()
    );
    assert_eq!(local.status, StatusCode::TOO_MANY_REQUESTS);
    let retry_after: u64 = local.header("retry-after").parse().unwrap();
    assert!((9..=10).contains(&retry_after), "{retry_after}");
    let status = local.header("proxy-status");
    assert!(
        status.contains("error=http_request_denied") && status.contains("cooling down"),
        "{status}"
    );
    assert_eq!(throttling.count(), 1);

    assert_eq!(client.get(&other.url("/")).await.status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reject_also_answers_requests_already_queued() {
    let origin = Origin::start("127.0.0.8", |_req| async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        come_back_later(503, "30", "busy")
    })
    .await;
    let courtesy = Courtesy::start("[defaults]\nrate = 1\nburst = 1\n").await;
    let first = courtesy.client().spawn_get(origin.url("/first"));
    assert!(eventually(Duration::from_secs(2), || origin.count() == 1).await);
    let queued = courtesy.client().spawn_get(origin.url("/queued"));
    assert_eq!(first.await.unwrap().status, StatusCode::SERVICE_UNAVAILABLE);
    let queued = tokio::time::timeout(Duration::from_secs(1), queued)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(queued.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(queued.header("proxy-status").contains("answered 503"));
    assert_eq!(origin.count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hold_lets_only_the_origins_own_429s_through_without_retries() {
    let limited = limited_origin("127.0.0.9", 3, false).await;
    let config = "[defaults]\nrate = 20\nburst = 1\non_cooldown = \"hold\"\n";
    let courtesy = Courtesy::start(config).await;
    // A naive client: no retry logic at all.
    let mut tasks = Vec::new();
    for i in 0..3 {
        let client = courtesy.client();
        let url = limited.origin.url(&format!("/hold/{i}"));
        tasks.push(tokio::spawn(async move {
            let mut conn = client.connect().await;
            let mut statuses = Vec::new();
            for _ in 0..4 {
                statuses.push(conn.get(&url).await.status);
            }
            statuses
        }));
    }
    let mut upstream_429s_seen_by_clients = 0;
    for t in tasks {
        for status in t.await.unwrap() {
            if status != StatusCode::OK {
                upstream_429s_seen_by_clients += 1;
            }
        }
    }
    // Only the origin's own 429s (the ones that start a cooldown) can reach a client; none are
    // local. With retry_idempotent those too would be retried; here there is at most one per wave.
    let windows = limited.windows.lock().unwrap().clone();
    assert!(upstream_429s_seen_by_clients <= windows.len());
    assert_nothing_inside_windows(&limited.origin, &windows);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hold_with_retries_gives_only_200s() {
    let limited = limited_origin("127.0.0.10", 3, false).await;
    let config = "[defaults]\nrate = 20\nburst = 1\non_cooldown = \"hold\"\nretry_idempotent = 2\n";
    let courtesy = Courtesy::start(config).await;
    let mut conn = courtesy.client().connect().await;
    for i in 0..8 {
        let got = conn.get(&limited.origin.url(&format!("/r/{i}"))).await;
        assert_eq!(got.status, StatusCode::OK, "request {i}");
    }
    let windows = limited.windows.lock().unwrap().clone();
    assert!(!windows.is_empty());
    assert_nothing_inside_windows(&limited.origin, &windows);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_are_for_idempotent_bodiless_requests_only() {
    let origin = Origin::start("127.0.0.11", |_req| async {
        come_back_later(429, "1", "no")
    })
    .await;
    let config = "[defaults]\nrate = 50\nretry_idempotent = 1\non_cooldown = \"hold\"\n";
    let courtesy = Courtesy::start(config).await;
    let post = Request::builder()
        .method(Method::POST)
        .uri(origin.url("/post"))
        .body(full("form=1"))
        .unwrap();
    let got = courtesy.client().send(post).await;
    assert_eq!(got.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(origin.count(), 1, "a POST is never retried");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let start = Instant::now();
    let got = courtesy.client().get(&origin.url("/get")).await;
    assert_eq!(
        got.status,
        StatusCode::TOO_MANY_REQUESTS,
        "after N retries the last answer passes"
    );
    assert_eq!(origin.count(), 3, "one GET, retried once");
    assert!(start.elapsed() >= Duration::from_millis(950));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ratelimit_header_budget_is_never_overspent() {
    // An honest origin: 4 requests per 10 s window opened by the first request, announced with the
    // IETF draft fields on every answer.
    let window: Arc<Mutex<Option<(Instant, u64)>>> = Arc::new(Mutex::new(None));
    let w = window.clone();
    let origin = Origin::start("127.0.0.12", move |_req| {
        let w = w.clone();
        async move {
            let now = Instant::now();
            let (opened, used) = {
                let mut w = w.lock().unwrap();
                let (opened, used) = match *w {
                    Some((o, u)) if now.duration_since(o) < Duration::from_secs(10) => (o, u + 1),
                    _ => (now, 1),
                };
                *w = Some((opened, used));
                (opened, used)
            };
            let left = 10u64
                .saturating_sub(now.duration_since(opened).as_secs())
                .max(1);
            let remaining = 4u64.saturating_sub(used);
            let status = if used > 4 { 429 } else { 200 };
            Response::builder()
                .status(status)
                .header("ratelimit", format!("\"default\";r={remaining};t={left}"))
                .header("ratelimit-policy", "\"default\";q=4;w=10")
                .body(full("x"))
                .unwrap()
        }
    })
    .await;
    let config = "[defaults]\nrate = 20\nburst = 5\nconcurrency = 1\non_cooldown = \"hold\"\nmax_wait_seconds = 30\n";
    let courtesy = Courtesy::start(config).await;
    let end = Instant::now() + Duration::from_secs(10);
    let mut clients = Vec::new();
    for _ in 0..4 {
        let client = courtesy.client();
        let url = origin.url("/api");
        clients.push(tokio::spawn(async move {
            let mut conn = client.connect().await;
            let mut statuses = Vec::new();
            while Instant::now() < end && statuses.len() < 100 {
                statuses.push(conn.get(&url).await.status);
            }
            statuses
        }));
    }
    let mut all = Vec::new();
    for c in clients {
        all.extend(c.await.unwrap());
    }
    let in_window = origin.count_within(Duration::from_secs(10));
    assert!(
        in_window <= 4,
        "the origin got {in_window} requests in its 10 s window of 4"
    );
    assert!(
        all.iter().all(|s| *s == StatusCode::OK),
        "courtesy overspent the announced budget: {all:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hold_saves_the_page_for_a_client_that_retries_at_once_like_scrapy() {
    let limited = limited_origin("127.0.0.13", 3, false).await;
    let config = "[defaults]\nrate = 20\nburst = 1\non_cooldown = \"hold\"\n";
    let courtesy = Courtesy::start(config).await;
    let mut tasks = Vec::new();
    for c in 0..3 {
        let client = courtesy.client();
        let base = limited.origin.url(&format!("/scrapy/{c}/"));
        tasks.push(tokio::spawn(async move {
            let mut conn = client.connect().await;
            let mut lost = 0;
            for page in 0..5 {
                let url = format!("{base}{page}");
                // Scrapy's RetryMiddleware: a 429 is retried at once, at most twice.
                let mut got = conn.get(&url).await.status;
                for _ in 0..2 {
                    if got != StatusCode::TOO_MANY_REQUESTS {
                        break;
                    }
                    got = conn.get(&url).await.status;
                }
                if got != StatusCode::OK {
                    lost += 1;
                }
            }
            lost
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), 0, "a page was lost");
    }
    let windows = limited.windows.lock().unwrap().clone();
    assert!(!windows.is_empty(), "the origin never throttled");
    assert_nothing_inside_windows(&limited.origin, &windows);
}

/// A GET of `url` through `client` carrying `Courtesy-On-Cooldown: choice`.
async fn get_choosing(client: &ProxyClient, url: &str, choice: &str) -> Got {
    let req = Request::builder()
        .uri(url)
        .header("courtesy-on-cooldown", choice)
        .body(empty())
        .unwrap();
    client.send(req).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_asks_to_be_held_waits_out_the_cooldown_while_others_are_rejected() {
    let answered = Arc::new(Mutex::new(0usize));
    let seen = answered.clone();
    let origin = Origin::start("127.0.0.12", move |_req| {
        let first = {
            let mut n = seen.lock().unwrap();
            *n += 1;
            *n == 1
        };
        async move {
            if first {
                come_back_later(429, "1", "slow down")
            } else {
                Response::new(full("ok"))
            }
        }
    })
    .await;
    // The host rejects on a cooldown; one client asks to be held instead.
    let courtesy =
        Courtesy::start("[defaults]\nrate = 50\nburst = 5\non_cooldown = \"reject\"\n").await;
    let client = courtesy.client();
    assert_eq!(
        client.get(&origin.url("/first")).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    let window_ends = origin.arrival_times()[0] + Duration::from_secs(1);
    let held = {
        let url = origin.url("/held");
        tokio::spawn(async move { get_choosing(&client, &url, "hold").await })
    };
    // Queued beside it, a plain request and one that says reject are answered at once.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let plain = client.get(&origin.url("/plain")).await;
    assert_eq!(plain.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(plain.header("proxy-status").contains("cooling down"));
    let rejecting = get_choosing(&client, &origin.url("/rejecting"), "REJECT").await;
    assert_eq!(rejecting.status, StatusCode::TOO_MANY_REQUESTS);
    let held = held.await.unwrap();
    assert_eq!(held.status, StatusCode::OK);
    let arrivals = origin.arrivals();
    assert_eq!(arrivals.len(), 2);
    assert_eq!(arrivals[1].path, "/held");
    assert!(arrivals[1].at + Duration::from_millis(5) >= window_ends);
    assert!(
        !arrivals[1].headers.contains_key("courtesy-on-cooldown"),
        "the choice is courtesy's, never forwarded"
    );
    // A word courtesy does not know is the client's mistake, said as such.
    let bad = get_choosing(&client, &origin.url("/bad"), "maybe").await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert!(bad.header("proxy-status").contains("Courtesy-On-Cooldown"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_holds_rejects_a_client_that_asks_for_it() {
    let origin = Origin::start("127.0.0.13", |_req| async {
        come_back_later(503, "30", "busy")
    })
    .await;
    let courtesy =
        Courtesy::start("[defaults]\nrate = 50\non_cooldown = \"hold\"\nmax_wait_seconds = 60\nretry_idempotent = 0\n")
            .await;
    let client = courtesy.client();
    assert_eq!(
        client.get(&origin.url("/first")).await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );
    let asked = Instant::now();
    let got = get_choosing(&client, &origin.url("/second"), "reject").await;
    assert_eq!(got.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(
        asked.elapsed() < Duration::from_secs(1),
        "{:?}",
        asked.elapsed()
    );
    assert_eq!(origin.count(), 1);
}
