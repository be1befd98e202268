//! Several courtesy instances on one shared store, the way the shared budget's tests start and
//! judge them: started in-process with one `[shared]` section, asked which budget they keep, and
//! the bound the site must see over every window.

use std::time::Duration;

use super::direct::admin_call;
use super::in_process::Courtesy;
use super::origin::Origin;

/// `n` in-process instances, each with the `[shared]` section `shared` (any store URL: one
/// server, a cluster, Sentinel) followed by `config`.
pub async fn instances_on(n: usize, shared: &str, config: &str) -> Vec<Courtesy> {
    let mut all = Vec::new();
    for _ in 0..n {
        all.push(instance_on(shared, config).await);
    }
    all
}

/// One in-process instance with the `[shared]` section `shared` followed by `config`: an instance
/// that joins the others later, or one with a store of its own.
pub async fn instance_on(shared: &str, config: &str) -> Courtesy {
    Courtesy::start(&format!("{shared}\n{config}")).await
}

/// `/readyz` of `courtesy`: its status and the budget it keeps (`local`, `shared`, `fallback`).
pub async fn readiness(courtesy: &Courtesy) -> (http::StatusCode, String) {
    let (status, body) = admin_call("GET", &courtesy.admin_url("/readyz"), None, "").await;
    let mode = serde_json::from_str::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v["budget"].as_str().map(str::to_string))
        .unwrap_or_default();
    (status, mode)
}

/// The budget `courtesy` keeps (`shared`, `fallback`), as `/readyz` says.
pub async fn budget_mode(courtesy: &Courtesy) -> String {
    readiness(courtesy).await.1
}

/// The store calls `courtesy` counted as failed: every `courtesy_shared_errors_total` series
/// above zero (every operation has a series from the start, at zero).
pub async fn failed_store_calls(courtesy: &Courtesy) -> Vec<String> {
    let (_, metrics) = admin_call("GET", &courtesy.admin_url("/metrics"), None, "").await;
    failed_store_calls_in(&metrics)
}

/// [`failed_store_calls`] in a `/metrics` text already fetched.
pub fn failed_store_calls_in(metrics: &str) -> Vec<String> {
    metrics
        .lines()
        .filter(|l| l.starts_with("courtesy_shared_errors_total{"))
        .filter(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) != Some(0.0))
        .map(str::to_string)
        .collect()
}

/// The origin never saw more than `burst + rate × T` (plus `slack`) in any window of 0.5, 1, 2
/// and 5 s.
pub fn assert_within_budget(origin: &Origin, rate: f64, burst: usize, slack: usize) {
    for secs in [0.5, 1.0, 2.0, 5.0] {
        let window = Duration::from_secs_f64(secs);
        let most = origin.most_within_any(window);
        let bound = burst + (rate * secs).ceil() as usize + slack;
        assert!(
            most <= bound,
            "{most} arrivals at {} within {secs} s; the budget allows {bound}",
            origin.url("")
        );
    }
}

/// `clients` closed-loop clients on each instance, each GETting `{url}{i}` (its own index) until
/// `end`; every answer must be 200, and every client done within `grace` after `end` (no client
/// hangs). Returns how many were answered.
pub async fn hammer_instances(
    all: &[Courtesy],
    url: &str,
    clients: usize,
    end: tokio::time::Instant,
    grace: Duration,
) -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let answered = std::sync::Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for c in all {
        for i in 0..clients {
            let client = c.client();
            let url = format!("{url}{i}");
            let answered = answered.clone();
            tasks.push(tokio::spawn(async move {
                let mut conn = client.connect().await;
                while tokio::time::Instant::now() < end {
                    assert_eq!(conn.get(&url).await.status, http::StatusCode::OK);
                    answered.fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
    }
    let all_done = async {
        for t in tasks {
            t.await.unwrap();
        }
    };
    tokio::time::timeout(
        end.saturating_duration_since(tokio::time::Instant::now()) + grace,
        all_done,
    )
    .await
    .expect("no client hangs");
    answered.load(Ordering::Relaxed)
}

/// Waits (at most 5 s) until every instance of `all` has counted them all live on the store, so
/// that none keeps to a part of each budget while it waits for the others to show up.
pub async fn all_seen(all: &[Courtesy]) {
    for c in all {
        let url = c.admin_url("/hosts");
        let mut seen = 0;
        for _ in 0..250 {
            let (_, body) = admin_call("GET", &url, None, "").await;
            seen = serde_json::from_str::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v["budget"]["instances_seen"].as_u64())
                .unwrap_or(0);
            if seen >= all.len() as u64 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(
            seen >= all.len() as u64,
            "{} instances seen of {}",
            seen,
            all.len()
        );
    }
}
