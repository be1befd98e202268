//! Real crawler clients through courtesy: curl with `-x`, and Python `requests` with HTTP_PROXY set.
//! Both must be installed (`.ci/run` installs them); a missing one fails the test rather than
//! skipping it silently.

mod support;

use std::time::Duration;

use support::*;
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_through_courtesy_is_paced() {
    let origin = Origin::ok("127.0.0.2").await;
    let courtesy = Courtesy::start("[defaults]\nrate = 4\nburst = 1\n").await;
    let proxy = format!("http://{}", courtesy.addr);
    let start = Instant::now();
    let out = run_to_success(
        client_command("curl")
            .args(["-sS", "-i", "-x", &proxy])
            .args((0..5).map(|i| origin.url(&format!("/curl/{i}")))),
    )
    .await;
    let elapsed = start.elapsed();
    let text = out.to_ascii_lowercase();
    assert_eq!(text.matches("http/1.1 200").count(), 5, "{text}");
    assert!(text.contains("via: 1.1 courtesy"), "{text}");
    assert_eq!(origin.count(), 5);
    // Five requests at 4/s with burst 1 need at least one second.
    assert!(elapsed >= Duration::from_millis(950), "{elapsed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_requests_with_http_proxy_set_goes_through_courtesy() {
    let origin = Origin::ok("127.0.0.3").await;
    let courtesy = Courtesy::start("[defaults]\nrate = 5\nburst = 2\n").await;
    let script = format!(
        r#"
import requests
s = requests.Session()
statuses = [s.get("{}").status_code for i in range(4)]
r = s.get("{}")
print(statuses, r.status_code, r.headers.get("Via"), r.text)
"#,
        origin.url("/py"),
        origin.url("/py/last")
    );
    let stdout = run_to_success(
        client_command("python3")
            .env("HTTP_PROXY", format!("http://{}", courtesy.addr))
            .args(["-c", &script]),
    )
    .await;
    assert!(
        stdout.starts_with("[200, 200, 200, 200] 200 1.1 courtesy"),
        "{stdout}"
    );
    assert!(stdout.trim_end().ends_with("ok"), "{stdout}");
    let arrivals = origin.arrivals();
    assert_eq!(arrivals.len(), 5);
    assert!(arrivals[0].headers["user-agent"]
        .to_str()
        .unwrap()
        .starts_with("python-requests"));
    // Burst 2 then 5/s: the fifth request left no earlier than 0.6 s after the first.
    let span = arrivals[4].at.duration_since(arrivals[0].at);
    assert!(span >= Duration::from_millis(550), "{span:?}");
}
