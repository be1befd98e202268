//! The RateLimit fields as the draft writes them (draft-ietf-httpapi-ratelimit-headers -10 and
//! later), end to end over loopback: each named policy on its own, by its quota unit
//! (`content-bytes` slows bytes and not requests, `concurrency` caps requests in flight), the
//! stricter of two request policies obeyed, and the partition key shown in `/hosts`. Timings are
//! measured at the origin with tolerances: these run on a busy 2-core machine.

use std::time::Duration;

use crate::support::*;
use http::{Response, StatusCode};

const KIB: usize = 1024;

/// The arrivals' span from first to last, in seconds.
fn span(times: &[tokio::time::Instant]) -> f64 {
    match (times.first(), times.last()) {
        (Some(a), Some(b)) => b.duration_since(*a).as_secs_f64(),
        _ => 0.0,
    }
}

/// GETs `paths` of `origin` one after the other on one connection; each body read whole.
async fn fetch_in_turn(courtesy: &Courtesy, origin: &Origin, paths: &[String]) -> usize {
    let mut conn = courtesy.client().connect().await;
    let mut bytes = 0;
    for path in paths {
        let got = conn.get(&origin.url(path)).await;
        assert_eq!(got.status, StatusCode::OK, "{path}");
        bytes += got.body.len();
    }
    bytes
}

/// The host's `/hosts` view as JSON.
async fn host_view(courtesy: &Courtesy, origin: &Origin) -> serde_json::Value {
    let (status, page) = courtesy.host_page(&origin.addr.to_string()).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    serde_json::from_str(&page).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_content_bytes_policy_slows_bytes_not_requests() {
    // 128 KiB a second of content; `/big` answers 64 KiB, `/small` 100 bytes.
    let origin = Origin::start("127.0.0.21", |req| async move {
        let size = if req.uri().path().starts_with("/big") {
            64 * KIB
        } else {
            100
        };
        Response::builder()
            .header(
                "ratelimit-policy",
                "\"bytes\";q=131072;w=1;qu=\"content-bytes\";pk=:Ynl0ZXM=:",
            )
            .body(full(vec![b'x'; size]))
            .unwrap()
    })
    .await;
    let courtesy =
        Courtesy::start("[defaults]\n[[host]]\nmatch = \"127.0.0.21\"\nrate = 20\nburst = 1\n")
            .await;

    // Small answers: the request rate (20/s) alone paces them; the byte quota takes nothing.
    let small: Vec<String> = (0..11).map(|i| format!("/small/{i}")).collect();
    fetch_in_turn(&courtesy, &origin, &small).await;
    let small_span = span(&origin.arrival_times());
    eprintln!("11 small answers under 128 KiB/s of content: {small_span:.2} s");
    // 10 turns at 20/s are 0.5 s.
    assert!(
        (0.4..=1.3).contains(&small_span),
        "the request rate is unchanged: {small_span:.2} s"
    );

    // Large answers: the bytes are bounded at about 128 KiB/s (one second saved up), whatever
    // the request rate allows (20 of these a second would be 1.25 MiB/s).
    let before = origin.count();
    let big: Vec<String> = (0..8).map(|i| format!("/big/{i}")).collect();
    let bytes = fetch_in_turn(&courtesy, &origin, &big).await;
    assert_eq!(bytes, 8 * 64 * KIB);
    let times: Vec<_> = origin.arrival_times()[before..].to_vec();
    let big_span = span(&times);
    // 512 KiB over 128 KiB/s with 128 KiB of credit (part of it refilled during the small
    // phase): the eighth starts when the first seven's bytes beyond the credit are paid,
    // (448 − 128) / 128 = 2.5 s after the first.
    let per_second = (7 * 64 * KIB) as f64 / big_span.max(1e-3);
    eprintln!(
        "8 x 64 KiB under 128 KiB/s of content: {big_span:.2} s, {:.0} KiB/s",
        per_second / KIB as f64
    );
    assert!(
        (2.0..=4.5).contains(&big_span),
        "the bytes are slowed: {big_span:.2} s"
    );
    assert!(per_second <= 230.0 * KIB as f64, "{per_second:.0} B/s");

    // /hosts shows the policy as the server wrote it, and the debt it made.
    let view = host_view(&courtesy, &origin).await;
    let policies = &view["ratelimit_policies"];
    assert_eq!(policies[0]["name"], "bytes", "{view}");
    assert_eq!(policies[0]["qu"], "content-bytes", "{view}");
    assert_eq!(policies[0]["q"], 131072, "{view}");
    assert_eq!(policies[0]["pk"], "Ynl0ZXM=", "{view}");
    assert_eq!(
        view["rate"], 20.0,
        "no request cap from a byte quota: {view}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_named_policies_the_stricter_is_obeyed_and_each_pk_shown() {
    // 100 a second and 2 a second: the second is obeyed. Each has its own partition key.
    let origin = Origin::start("127.0.0.22", |_req| async move {
        Response::builder()
            .header(
                "ratelimit-policy",
                "\"burst\";q=100;w=1;pk=:YnVyc3Q=:, \"steady\";q=2;w=1;qu=\"request\";pk=:c3RlYWR5:",
            )
            .body(full("ok"))
            .unwrap()
    })
    .await;
    let courtesy =
        Courtesy::start("[defaults]\n[[host]]\nmatch = \"127.0.0.22\"\nrate = 20\nburst = 1\n")
            .await;
    let paths: Vec<String> = (0..6).map(|i| format!("/{i}")).collect();
    fetch_in_turn(&courtesy, &origin, &paths).await;
    let gaps: Vec<f64> = origin
        .arrival_times()
        .windows(2)
        .map(|w| w[1].duration_since(w[0]).as_secs_f64())
        .collect();
    eprintln!("gaps under \"burst\" 100/s and \"steady\" 2/s: {gaps:?}");
    // The first answer teaches the policies: from the second turn on, 2 a second.
    for gap in &gaps[1..] {
        // 2/s is 0.5 s apart (20/s would be 0.05 s): wide bounds for a busy machine.
        assert!((0.3..=1.5).contains(gap), "the stricter policy: {gaps:?}");
    }
    let view = host_view(&courtesy, &origin).await;
    assert_eq!(view["rate"], 2.0, "{view}");
    let policies = view["ratelimit_policies"].as_array().unwrap();
    let shown: Vec<(&str, &str, &str)> = policies
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap_or(""),
                p["qu"].as_str().unwrap_or(""),
                p["pk"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        shown,
        [
            ("burst", "request", "YnVyc3Q="),
            ("steady", "request", "c3RlYWR5")
        ],
        "{view}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spent_counter_of_one_policy_holds_the_host_until_its_own_reset() {
    // "minute" still has 50 left; "second" is spent and resets in 2 s: the host waits 2 s (not
    // the 50 s of the other's reset, and not at once).
    let origin = Origin::start("127.0.0.23", |req| async move {
        let counters = if req.uri().path() == "/0" {
            "\"minute\";r=50;t=50, \"second\";r=0;t=2"
        } else {
            "\"minute\";r=49;t=48, \"second\";r=4;t=1"
        };
        Response::builder()
            .header(
                "ratelimit-policy",
                "\"minute\";q=100;w=60, \"second\";q=5;w=1",
            )
            .header("ratelimit", counters)
            .body(full("ok"))
            .unwrap()
    })
    .await;
    let courtesy =
        Courtesy::start(
        "[defaults]\n[[host]]\nmatch = \"127.0.0.23\"\nrate = 20\nburst = 1\non_cooldown = \"hold\"\n",
    )
            .await;
    let paths: Vec<String> = (0..2).map(|i| format!("/{i}")).collect();
    fetch_in_turn(&courtesy, &origin, &paths).await;
    let gap = span(&origin.arrival_times());
    eprintln!("after a spent \"second\" counter (t=2): {gap:.2} s");
    assert!((1.8..=3.5).contains(&gap), "{gap:.2} s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrency_policy_caps_requests_in_flight_at_the_origin() {
    // Every answer takes 300 ms and says: at most 2 at once.
    let origin = Origin::start("127.0.0.24", |_req| async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        Response::builder()
            .header("ratelimit-policy", "\"parallel\";q=2;qu=\"concurrency\"")
            .body(full("ok"))
            .unwrap()
    })
    .await;
    let courtesy = Courtesy::start(
        "[defaults]\n[[host]]\nmatch = \"127.0.0.24\"\nrate = 100\nburst = 20\nconcurrency = 8\n",
    )
    .await;
    // The first answer teaches the policy.
    let first = courtesy.client().get(&origin.url("/first")).await;
    assert_eq!(first.status, StatusCode::OK);
    let client = courtesy.client();
    let urls: Vec<String> = (0..10).map(|i| origin.url(&format!("/{i}"))).collect();
    for got in client.spawn_gets(urls) {
        assert_eq!(got.await.unwrap().status, StatusCode::OK);
    }
    eprintln!(
        "most in flight at the origin under a concurrency policy of 2 (configured 8): {}",
        origin.max_in_flight()
    );
    assert_eq!(origin.max_in_flight(), 2);
    let view = host_view(&courtesy, &origin).await;
    assert_eq!(view["ratelimit_policies"][0]["qu"], "concurrency", "{view}");
    assert_eq!(view["policy"]["concurrency"], 8, "{view}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_field_is_ignored_for_pacing_and_passed_on_untouched() {
    // Read member by member, this would cap the host at 1 per 100 s; as a structured field it is
    // malformed (a trailing comma), so it says nothing.
    let origin = Origin::start("127.0.0.25", |_req| async move {
        Response::builder()
            .header("ratelimit-policy", "\"slow\";q=1;w=100,")
            .header("ratelimit", "\"slow\";r=0;t=100,")
            .body(full("ok"))
            .unwrap()
    })
    .await;
    let courtesy =
        Courtesy::start("[defaults]\n[[host]]\nmatch = \"127.0.0.25\"\nrate = 20\nburst = 1\n")
            .await;
    let mut conn = courtesy.client().connect().await;
    for i in 0..5 {
        let got = conn.get(&origin.url(&format!("/{i}"))).await;
        assert_eq!(got.status, StatusCode::OK);
        assert_eq!(got.header("ratelimit-policy"), "\"slow\";q=1;w=100,");
    }
    let took = span(&origin.arrival_times());
    assert!(
        took < 1.5,
        "paced by the configured rate alone: {took:.2} s"
    );
    let view = host_view(&courtesy, &origin).await;
    assert_eq!(view["rate"], 20.0, "{view}");
    assert!(view.get("ratelimit_policies").is_none(), "{view}");
}
