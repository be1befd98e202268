//! The admin listener's live dashboard (`GET /`, the page in `src/admin/dashboard.html`): a self-contained
//! HTML page, and a real browser showing the hosts courtesy paces.
//!
//! The browser check runs `tests/node/dashboard.mjs` (playwright-core driving the system's
//! `/usr/bin/chromium`); it needs `apt-get install -y chromium` and `npm ci` in `tests/node`, which
//! `scripts/test` does. A missing browser fails the test rather than skipping it silently.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::*;
use http::StatusCode;
use http_body_util::BodyExt;

const CHROMIUM: &str = "/usr/bin/chromium";

/// GET `url` straight to the admin listener: status, content type and body text.
async fn admin_get(url: &str) -> (StatusCode, String, String) {
    let response = tokio::time::timeout(
        Duration::from_secs(10),
        direct_client().get(url.parse().unwrap()),
    )
    .await
    .expect("the admin listener answers within 10 s")
    .expect("GET on the admin listener");
    let status = response.status();
    let content_type = response
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        content_type,
        String::from_utf8_lossy(&body).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_is_one_self_contained_html_page() {
    let courtesy = Courtesy::start("[defaults]\nrate = 10\n").await;
    let (status, content_type, page) = admin_get(&courtesy.admin_url("/")).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(content_type.starts_with("text/html"), "{content_type}");
    assert!(page.contains("<canvas"), "the charts are canvases");
    assert!(page.contains("data-host"), "rows are keyed by host");
    assert!(
        page.contains("\"hosts\""),
        "the page polls the relative URL `hosts`"
    );
    let lower = page.to_ascii_lowercase();
    for outside in [
        "http://",
        "https://",
        "cdn",
        "googleapis",
        "<script src",
        "rel=\"stylesheet\"",
        "@import",
        "url(",
    ] {
        assert!(
            !lower.contains(outside),
            "the page must not load anything from elsewhere, but it contains {outside:?}"
        );
    }
}

/// Where the checks are: the crate's root, its node tests and the screenshot.
fn paths() -> (PathBuf, PathBuf, PathBuf) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf();
    let node = root.join("tests").join("node");
    let screenshot = root.join("target").join("dashboard.png");
    (root, node, screenshot)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_shows_the_hosts_on_the_dashboard() {
    assert!(
        Path::new(CHROMIUM).exists(),
        "{CHROMIUM} is missing: the dashboard test needs Chromium; install it with \
         `apt-get install -y chromium` (scripts/test does)"
    );
    let (root, node, screenshot) = paths();
    assert!(
        node.join("node_modules").join("playwright-core").exists(),
        "tests/node/node_modules/playwright-core is missing: run `npm ci` in tests/node \
         (scripts/test does)"
    );
    std::fs::create_dir_all(screenshot.parent().unwrap()).unwrap();
    let _ = std::fs::remove_file(&screenshot);

    // Three hosts in three states: one answered a few requests, one answered 429 and cools down,
    // one is slow, so a request is in flight and others wait behind it.
    let origin = Origin::ok("127.0.0.1").await;
    let throttling = Origin::start("127.0.0.1", |_req| async {
        come_back_later(429, "120", "slow down")
    })
    .await;
    let slow = Origin::slow("127.0.0.1", Duration::from_secs(60), "late").await;
    let courtesy = Courtesy::start("[defaults]\nrate = 20\nburst = 5\n").await;
    let client = courtesy.client();
    for i in 0..4 {
        let got = client.get(&origin.url(&format!("/page/{i}"))).await;
        assert_eq!(got.status, StatusCode::OK);
    }
    let got = client.get(&throttling.url("/list")).await;
    assert_eq!(got.status, StatusCode::TOO_MANY_REQUESTS);
    let waiting = client.spawn_gets((0..3).map(|i| slow.url(&format!("/report/{i}"))));
    assert!(
        eventually(Duration::from_secs(5), || slow.count() == 1).await,
        "the slow origin got its first request"
    );

    let host = origin.addr.to_string();
    let url = courtesy.admin_url("/");
    // The browser must talk to the admin listener directly, whatever this machine's proxy settings.
    let mut cmd = client_command("node");
    cmd.current_dir(&root)
        .arg(node.join("dashboard.mjs"))
        .args([&url, &host])
        .arg(&screenshot);
    let out = tokio::time::timeout(Duration::from_secs(90), cmd.output())
        .await
        .expect("tests/node/dashboard.mjs finishes within 90 s")
        .expect("node must be installed");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the dashboard check failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(stdout.contains("dashboard ok"), "{stdout}\n{stderr}");
    // The default sort puts hosts in trouble first: the cooling host above the healthy one.
    let order = stdout
        .lines()
        .find_map(|l| l.strip_prefix("rows in order: "))
        .unwrap_or_default();
    let position = |key: String| order.split(' ').position(|k| k == key);
    let (cooling, healthy) = (
        position(throttling.addr.to_string()),
        position(host.clone()),
    );
    assert!(
        cooling.is_some() && cooling < healthy,
        "trouble first: {order}"
    );
    let png = std::fs::read(&screenshot).expect("the screenshot was written");
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n"),
        "{} is a PNG",
        screenshot.display()
    );
    println!("{}", stdout.trim_end());

    for task in waiting {
        task.abort();
    }
}
