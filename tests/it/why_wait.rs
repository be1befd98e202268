//! End-to-end: every answer says how long courtesy held the request and why, in `Server-Timing`
//! (`courtesy-wait;dur=…;desc="<reason>"`, and `courtesy-upstream;dur=…` when the origin
//! answered), after the origin's own entries; a client's `Server-Timing` never reaches the origin,
//! nor do courtesy's. Over real sockets, with tolerances.

use std::time::Duration;

use crate::support::*;
use http::{Request, Response};

/// The entries of courtesy's `Server-Timing` line(s) in `got`: `(name, dur ms, desc)`.
fn courtesy_entries(got: &Got) -> Vec<(String, f64, String)> {
    let mut entries = Vec::new();
    for value in got.headers.get_all("server-timing") {
        for entry in value.to_str().unwrap().split(',') {
            let mut parts = entry.trim().split(';');
            let name = parts.next().unwrap_or("").to_string();
            if !name.starts_with("courtesy-") {
                continue;
            }
            let (mut dur, mut desc) = (f64::NAN, String::new());
            for param in parts {
                match param.split_once('=') {
                    Some(("dur", d)) => dur = d.parse().unwrap(),
                    Some(("desc", d)) => desc = d.trim_matches('"').to_string(),
                    _ => {}
                }
            }
            entries.push((name, dur, desc));
        }
    }
    entries
}

/// courtesy's wait entry: (ms, reason).
fn wait_of(got: &Got) -> (f64, String) {
    courtesy_entries(got)
        .into_iter()
        .find(|(name, ..)| name == "courtesy-wait")
        .map(|(_, dur, desc)| (dur, desc))
        .unwrap_or_else(|| panic!("no courtesy-wait in {:?}", got.headers))
}

#[tokio::test]
async fn a_forwarded_answer_carries_the_wait_and_the_origins_time_after_the_origins_own() {
    let origin = Origin::start("127.0.0.1", |_req| async {
        tokio::time::sleep(Duration::from_millis(40)).await;
        Response::builder()
            .header("server-timing", "db;dur=53, app;dur=47.2")
            .body(full("ok"))
            .unwrap()
    })
    .await;
    let courtesy = Courtesy::start("[defaults]\nrate = 100.0\nburst = 5\n").await;
    let req = Request::get(origin.url("/a"))
        .header("server-timing", "client;dur=1")
        .body(empty())
        .unwrap();
    let got = courtesy.client().send(req).await;
    assert_eq!(got.status, 200);
    let lines = got.header_lines("server-timing");
    assert_eq!(
        lines[0], "db;dur=53, app;dur=47.2",
        "the origin's own first: {lines:?}"
    );
    assert!(lines.iter().all(|l| !l.contains("client;")), "{lines:?}");
    let entries = courtesy_entries(&got);
    assert_eq!(entries.len(), 2, "{entries:?}");
    assert_eq!(entries[0].0, "courtesy-wait");
    assert_eq!(entries[0].2, "none", "nothing held it: {entries:?}");
    assert!(entries[0].1 < 50.0, "{entries:?}");
    assert_eq!(entries[1].0, "courtesy-upstream");
    assert!(
        entries[1].1 >= 39.0 && entries[1].1 < 2000.0,
        "the origin took 40 ms: {entries:?}"
    );
    // Nothing of the client's or courtesy's Server-Timing went upstream.
    let arrival = &origin.arrivals()[0];
    assert!(
        arrival.headers.get("server-timing").is_none(),
        "{arrival:?}"
    );
}

#[tokio::test]
async fn a_request_paced_by_the_rate_says_rate_and_about_how_long() {
    let origin = Origin::ok("127.0.0.1").await;
    let courtesy =
        Courtesy::start("[defaults]\nrate = 2.0\nburst = 1\nconcurrency = 4\nadaptive = false\n")
            .await;
    let client = courtesy.client();
    let first = client.get(&origin.url("/1")).await;
    let second = client.get(&origin.url("/2")).await;
    assert_eq!(wait_of(&first).1, "none");
    let (ms, reason) = wait_of(&second);
    assert_eq!(reason, "rate");
    assert!(
        (350.0..1500.0).contains(&ms),
        "a turn every 500 ms, got {ms} ms"
    );
    // /metrics counts the turns by the same reasons, every reason's series there from the start.
    let (_, metrics) = admin_call("GET", &courtesy.admin_url("/metrics"), None, "").await;
    for line in [
        "courtesy_turns_total{reason=\"none\"} 1",
        "courtesy_turns_total{reason=\"rate\"} 1",
        "courtesy_turns_total{reason=\"job_share\"} 0",
    ] {
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }
    let rate_seconds: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("courtesy_turn_wait_seconds_total{reason=\"rate\"} "))
        .unwrap()
        .parse()
        .unwrap();
    assert!((0.35..1.5).contains(&rate_seconds), "{rate_seconds}");
}

#[tokio::test]
async fn requests_behind_their_own_jobs_requests_say_queue() {
    let origin = Origin::ok("127.0.0.1").await;
    let courtesy =
        Courtesy::start("[defaults]\nrate = 5.0\nburst = 1\nconcurrency = 4\nadaptive = false\n")
            .await;
    let client = courtesy.client();
    let tasks = client.spawn_gets((0..6).map(|i| origin.url(&format!("/{i}"))));
    let mut reasons = Vec::new();
    for task in tasks {
        let got = task.await.unwrap();
        assert_eq!(got.status, 200);
        reasons.push(wait_of(&got));
    }
    reasons.sort_by(|a, b| a.0.total_cmp(&b.0));
    // Six at once at 5/s: the longest waiter stood about 0.8 s behind the others and waited 0.2 s
    // for the rate at the front.
    let (ms, reason) = reasons.last().unwrap().clone();
    assert_eq!(reason, "queue", "{reasons:?}");
    assert!((700.0..2500.0).contains(&ms), "{reasons:?}");
    assert!(
        reasons.iter().filter(|(_, r)| r == "rate").count() >= 1,
        "{reasons:?}"
    );
}

#[tokio::test]
async fn local_answers_carry_courtesy_wait_too() {
    let origin = Origin::start("127.0.0.1", |_req| async {
        come_back_later(429, "30", "slow down")
    })
    .await;
    let courtesy = Courtesy::start(
        "[defaults]\nrate = 100.0\nburst = 5\non_cooldown = \"reject\"\nretry_idempotent = 0\n",
    )
    .await;
    let client = courtesy.client();
    let origins = client.get(&origin.url("/a")).await;
    assert_eq!(origins.status, 429);
    assert!(
        origins.header("proxy-status").is_empty(),
        "the origin's own 429"
    );
    assert_eq!(wait_of(&origins).1, "none");
    let local = client.get(&origin.url("/b")).await;
    assert_eq!(local.status, 429);
    assert!(local.header("proxy-status").starts_with("courtesy"));
    // Refused at once: no wait but the instant the refusal took (a fraction of a millisecond, more
    // when a busy machine preempts the task), against the 30 s the cooldown has left.
    let (ms, reason) = wait_of(&local);
    assert_eq!(reason, "cooldown");
    assert!(ms < 50.0, "{ms} ms");
    assert_eq!(origin.count(), 1);

    // A 407 of courtesy's own, and a refused CONNECT.
    let auth = Courtesy::start(
        "[proxy]\nclient_auth = \"required\"\n[[job]]\nname = \"a\"\ntoken = \"t0ken-of-a-long-enough-kind\"\n",
    )
    .await;
    let refused = auth.client().get(&origin.url("/c")).await;
    assert_eq!(refused.status, 407);
    assert_eq!(
        refused.header("server-timing"),
        "courtesy-wait;dur=0.0;desc=\"none\""
    );
}

#[tokio::test]
async fn a_request_held_through_a_cooldown_says_cooldown() {
    let origin = Origin::start("127.0.0.1", |req| async move {
        if req.uri().path() == "/first" {
            come_back_later(503, "1", "busy")
        } else {
            Response::new(full("ok"))
        }
    })
    .await;
    let courtesy = Courtesy::start(
        "[defaults]\nrate = 100.0\nburst = 5\non_cooldown = \"hold\"\nretry_idempotent = 0\n",
    )
    .await;
    let client = courtesy.client();
    assert_eq!(client.get(&origin.url("/first")).await.status, 503);
    let held = client.get(&origin.url("/second")).await;
    assert_eq!(held.status, 200);
    let (ms, reason) = wait_of(&held);
    assert_eq!(reason, "cooldown");
    assert!((700.0..3000.0).contains(&ms), "{ms}");
}

#[tokio::test]
async fn the_setting_turns_courtesys_entries_off_and_leaves_the_origins() {
    let origin = Origin::start("127.0.0.1", |_req| async {
        Response::builder()
            .header("server-timing", "db;dur=53")
            .body(full("ok"))
            .unwrap()
    })
    .await;
    let courtesy =
        Courtesy::start("[proxy]\nserver_timing = false\n[defaults]\nrate = 100.0\n").await;
    let got = courtesy.client().get(&origin.url("/a")).await;
    let lines: Vec<_> = got.headers.get_all("server-timing").iter().collect();
    assert_eq!(lines, ["db;dur=53"]);
}

#[tokio::test]
async fn requests_inside_a_connect_tunnel_carry_it_too() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let origin = Origin::ok("127.0.0.1").await;
    let courtesy = Courtesy::start("[defaults]\nrate = 100.0\n").await;
    let (mut tunnel, head) = open_tunnel(courtesy.addr, origin.addr).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        !head.to_ascii_lowercase().contains("server-timing"),
        "{head}"
    );
    tunnel
        .write_all(format!("GET /in HTTP/1.1\r\nHost: {}\r\n\r\n", origin.addr).as_bytes())
        .await
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(10), tunnel.read(&mut buf))
        .await
        .unwrap()
        .unwrap();
    let answer = String::from_utf8_lossy(&buf[..n]).to_ascii_lowercase();
    assert!(answer.starts_with("http/1.1 200"), "{answer}");
    assert!(
        answer.contains("server-timing: courtesy-wait;dur="),
        "{answer}"
    );
    assert!(answer.contains("courtesy-upstream;dur="), "{answer}");
}

/// `explain` of `/hosts/<key>`, looked up until `want` is in it (bounded), then returned.
async fn explain_until(courtesy: &Courtesy, key: &str, want: &str) -> String {
    let mut last = String::new();
    for _ in 0..100 {
        let (status, body) = courtesy.host_page(key).await;
        if status == 200 {
            let view: serde_json::Value = serde_json::from_str(&body).unwrap();
            last = view["explain"].as_str().unwrap_or_default().to_string();
            if last.contains(want) {
                return last;
            }
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    panic!("{key}: {want:?} never in {last:?}");
}

/// `HH:MM:SS.mmm UTC` somewhere in `text`.
fn has_clock(text: &str) -> bool {
    text.split(' ').any(|w| {
        let b = w.as_bytes();
        b.len() == 12 && b[2] == b':' && b[5] == b':' && b[8] == b'.'
    }) && text.contains(" UTC")
}

#[tokio::test]
async fn the_host_page_says_in_words_what_the_host_waits_for_and_until_when() {
    // Slots: one in flight for 1.5 s, two waiting.
    let slow = Origin::slow("127.0.0.1", Duration::from_millis(1500), "ok").await;
    let paced = Origin::ok("127.0.0.1").await;
    let throttling = Origin::start("127.0.0.1", |_req| async {
        come_back_later(429, "30", "no")
    })
    .await;
    let courtesy = Courtesy::start(
        "[defaults]\nrate = 100.0\nburst = 1\nconcurrency = 1\nadaptive = false\n\
         on_cooldown = \"reject\"\nretry_idempotent = 0\n\
         [[host]]\nmatch = \"127.0.0.1\"\nrate = 100.0\n",
    )
    .await;
    let client = courtesy.client();
    let key = slow.addr.to_string();
    let waiting = client.spawn_gets((0..3).map(|i| slow.url(&format!("/{i}"))));
    let words = explain_until(&courtesy, &key, "2 requests queued").await;
    assert_eq!(
        words,
        "2 requests queued; the next waits for a free concurrency slot (1 of 1 in flight)"
    );
    for task in waiting {
        assert_eq!(task.await.unwrap().status, 200);
    }
    let words = explain_until(&courtesy, &key, "idle").await;
    assert_eq!(words, "idle; a new request would leave at once");

    // The rate: an operator's 0.2/s, one request sent, the next queued.
    let key = paced.addr.to_string();
    assert_eq!(client.get(&paced.url("/0")).await.status, 200);
    let (status, body) = admin_call(
        "PUT",
        &courtesy.admin_url(&format!("/hosts/{key}/rate")),
        None,
        "0.2",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(client.get(&paced.url("/1")).await.status, 200);
    let next = client.spawn_get(paced.url("/2"));
    let words = explain_until(&courtesy, &key, "queued").await;
    assert!(
        words.starts_with("1 request queued; the next waits for its next token at ")
            && words.ends_with("(rate 0.200/s)")
            && has_clock(&words),
        "{words}"
    );
    assert_eq!(next.await.unwrap().status, 200);

    // A cooldown after a 429 with Retry-After 30.
    let key = throttling.addr.to_string();
    assert_eq!(client.get(&throttling.url("/")).await.status, 429);
    let words = explain_until(&courtesy, &key, "cooling down").await;
    assert!(
        words.starts_with("cooling down until ")
            && words.contains("because the host answered 429; a window of 30.0 s")
            && has_clock(&words),
        "{words}"
    );

    // An operator's pause.
    let (status, body) = admin_call(
        "POST",
        &courtesy.admin_url(&format!("/hosts/{}/pause?seconds=60", slow.addr)),
        None,
        "",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let words = explain_until(&courtesy, &slow.addr.to_string(), "paused").await;
    assert!(
        words.starts_with("paused by an operator until ") && words.contains("left)"),
        "{words}"
    );

    // `courtesy status <host>` prints the same words.
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_courtesy"))
        .args(["status", "--admin", &courtesy.admin.to_string(), &key])
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.starts_with(&format!("{key}: cooling_down")), "{text}");
    assert!(text.contains("cooling down until "), "{text}");
}
