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
