//! Headless Chromium through courtesy, trusting courtesy's CA the way `courtesy ca` says, from a
//! home directory that has never seen Chromium (no NSS database yet). A browser that was not told
//! to trust the CA refuses the same page, so the trust is what makes it load.

use std::time::Duration;

use crate::support::*;
use http::Response;

/// Runs `node tests/node/trust.mjs url proxy` with `home` as `$HOME`; returns its one line.
async fn chromium_loads(home: &std::path::Path, url: &str, proxy: &str) -> String {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/node/trust.mjs");
    let mut cmd = client_command("node");
    cmd.current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/node"))
        .env("HOME", home)
        .args([script, url, proxy]);
    let out = tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .expect("trust.mjs finishes within 60 s")
        .expect("node must be installed");
    let stdout = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        stdout.starts_with("loaded") || stdout.starts_with("failed"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_trusts_the_ca_with_the_commands_courtesy_ca_prints_from_a_fresh_home() {
    let test_ca = TestCa::new();
    let origin = Origin::start_tls(
        "127.0.0.2",
        test_ca.server_config(&["127.0.0.2"]),
        |_req| async {
            Response::builder()
                .header("content-type", "text/html")
                .body(full("<html><body>intercepted and trusted</body></html>"))
                .unwrap()
        },
    )
    .await;
    let dir = temp_dir("browser");
    let courtesy = Courtesy::start(&format!(
        "[proxy]\nupstream_ca = \"{}\"\nconnect_ports = [{}]\n[defaults]\nrate = 50\nburst = 10\n",
        test_ca.write(&dir, "origin-ca.pem").display(),
        origin.addr.port()
    ))
    .await;
    let url = format!("https://{}/", origin.addr);
    let proxy = format!("http://{}", courtesy.addr);

    let untrusting = dir.join("home-untrusting");
    std::fs::create_dir_all(&untrusting).unwrap();
    let refused = chromium_loads(&untrusting, &url, &proxy).await;
    assert!(refused.starts_with("failed"), "without the CA: {refused}");
    assert!(refused.contains("CERT"), "a certificate error: {refused}");

    let home = dir.join("home-fresh");
    std::fs::create_dir_all(&home).unwrap();
    trust_in_nss_home(&home, &courtesy.ca_path()).await;
    let loaded = chromium_loads(&home, &url, &proxy).await;
    assert_eq!(loaded, "loaded 200 intercepted and trusted");
    let pages = origin.paths().iter().filter(|p| p.as_str() == "/").count();
    assert_eq!(
        pages, 1,
        "only the trusting browser's request reached the origin"
    );
}
