//! Report-only (shadow) mode, `enforce = false`: every request is forwarded at once, and what
//! courtesy would have done (waits, refusals, arrivals inside announced windows) is counted in
//! `/metrics` (series with `shadow` in their names) and `/hosts`.

use std::time::Duration;

use crate::support::*;
use http::{Response, StatusCode};
use tokio::time::Instant;

/// The value of the `/metrics` sample whose line starts with `series` (0 when absent).
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_only_host_gets_everything_at_once_and_is_told_what_would_have_waited() {
    let shadowed = Origin::ok("127.0.0.15").await;
    let enforced = Origin::ok("127.0.0.16").await;
    let courtesy = Courtesy::start(
        "[defaults]\nrate = 1.0\nburst = 1\nconcurrency = 8\n\n\
         [[host]]\nmatch = \"127.0.0.15\"\nenforce = false\n",
    )
    .await;
    let started = Instant::now();
    let shadow_urls = (0..6).map(|i| shadowed.url(&format!("/s/{i}")));
    assert_each_ok(courtesy.client().spawn_gets(shadow_urls)).await;
    let took = started.elapsed();
    assert_eq!(shadowed.count(), 6);
    assert!(
        took < Duration::from_millis(900),
        "nothing waited: {took:?}"
    );
    // The enforced host beside it is paced as usual.
    let started = Instant::now();
    assert_each_ok(
        courtesy
            .client()
            .spawn_gets((0..2).map(|i| enforced.url(&format!("/e/{i}")))),
    )
    .await;
    assert!(started.elapsed() >= Duration::from_millis(900));

    let metrics = fetch_direct(&courtesy.admin_url("/metrics")).await;
    let host = shadowed.addr.to_string();
    let waits = sample(
        &metrics,
        &format!("courtesy_shadow_would_wait_total{{host=\"{host}\"}}"),
    );
    let seconds = sample(
        &metrics,
        &format!("courtesy_shadow_would_wait_seconds_total{{host=\"{host}\"}}"),
    );
    // At 1/s with burst 1, six at once: five would have waited 1 + 2 + 3 + 4 + 5 = 15 s.
    assert_eq!(waits, 5.0, "{metrics}");
    assert!((14.5..=15.5).contains(&seconds), "{seconds}");
    let enforced_key = enforced.addr.to_string();
    assert!(!metrics.contains(&format!(
        "courtesy_shadow_would_wait_total{{host=\"{enforced_key}\"}}"
    )));
    let (_, body) = courtesy.host_page(&host).await;
    let view: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(view["policy"]["enforce"], false, "{body}");
    assert_eq!(view["shadow"]["would_wait"], 5, "{body}");
    let (_, body) = courtesy.host_page(&enforced_key).await;
    let view: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(view["shadow"].is_null(), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cooldown_and_robots_hold_nothing_back_and_are_counted() {
    let origin = Origin::start("127.0.0.17", move |req| {
        let path = req.uri().path().to_string();
        async move {
            if path == "/robots.txt" {
                Response::new(full("User-agent: *\nDisallow: /private/\n"))
            } else if path == "/throttled" {
                come_back_later(429, "30", "slow down")
            } else {
                Response::new(full("page"))
            }
        }
    })
    .await;
    let courtesy = Courtesy::start(
        "[defaults]\nrate = 50.0\nburst = 5\nobey_robots = true\nenforce = false\n\
         retry_idempotent = 2\n",
    )
    .await;
    let client = courtesy.client();
    let first = client.get(&origin.url("/first")).await;
    assert_eq!(first.status, StatusCode::OK);
    let throttled = client.get(&origin.url("/throttled")).await;
    assert_eq!(throttled.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        origin.paths().iter().filter(|p| *p == "/throttled").count(),
        1,
        "no retries of courtesy's own for a report-only host"
    );
    // Inside the 30 s window (reject mode) and a path robots.txt disallows: forwarded all the same.
    for path in ["/after/1", "/after/2", "/private/page"] {
        assert_eq!(
            client.get(&origin.url(path)).await.status,
            StatusCode::OK,
            "{path}"
        );
    }
    let paths = origin.paths();
    assert!(paths.contains(&"/private/page".to_string()), "{paths:?}");
    let metrics = fetch_direct(&courtesy.admin_url("/metrics")).await;
    let host = origin.addr.to_string();
    let refused = |reason: &str| {
        sample(
            &metrics,
            &format!("courtesy_shadow_would_refuse_total{{host=\"{host}\",reason=\"{reason}\"}}"),
        )
    };
    assert_eq!(refused("cooling_down"), 2.0, "{metrics}");
    assert_eq!(refused("robots"), 1.0, "{metrics}");
    assert_eq!(
        sample(
            &metrics,
            &format!("courtesy_shadow_inside_window_total{{host=\"{host}\"}}")
        ),
        3.0,
        "{metrics}"
    );
}
