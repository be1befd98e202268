//! Many clients through courtesy at once, and what they got: the load that tests of a shared
//! per-host budget need.

use http::StatusCode;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::in_process::Courtesy;
use super::proxy_client::Got;

/// One client per URL, each on its own connection to courtesy, sending GETs back to back until
/// `end`; every answer must be 200.
pub async fn hammer_until(courtesy: &Courtesy, urls: Vec<String>, end: Instant) {
    let mut clients = Vec::new();
    for url in urls {
        let client = courtesy.client();
        clients.push(tokio::spawn(async move {
            let mut conn = client.connect().await;
            while Instant::now() < end {
                assert_eq!(conn.get(&url).await.status, StatusCode::OK);
            }
        }));
    }
    for c in clients {
        c.await.unwrap();
    }
}

/// Waits for each spawned request (see [`super::ProxyClient::spawn_gets`]) in the order it was
/// spawned; each answer must be 200.
pub async fn assert_each_ok(tasks: Vec<JoinHandle<Got>>) {
    for t in tasks {
        assert_eq!(t.await.unwrap().status, StatusCode::OK);
    }
}
