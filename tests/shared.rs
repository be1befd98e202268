//! Several instances on one Redis keep one budget per host (invariants 8 and 9 of
//! `docs/ARCHITECTURE.md`): the site sees one courtesy, and when the store goes away each instance
//! keeps its share, never unlimited, never a hung client. Every test starts its own redis-server on
//! a free loopback port.

mod support;

use std::time::Duration;

use tokio::time::Instant;

use support::*;

/// `n` in-process instances on `redis`, each with `config` (and the `[shared]` section).
async fn instances(n: usize, redis: &RedisServer, shared: &str, config: &str) -> Vec<Courtesy> {
    let mut all = Vec::new();
    for _ in 0..n {
        all.push(Courtesy::start(&format!("{}\n{config}", redis.shared_section(shared))).await);
    }
    all
}

/// Sends `per_instance` GETs through each instance at once; every one must be answered 200.
async fn spread_gets(all: &[Courtesy], url: &str, per_instance: usize) {
    let mut tasks = Vec::new();
    for c in all {
        tasks.extend(
            c.client()
                .spawn_gets((0..per_instance).map(|i| format!("{url}?{i}"))),
        );
    }
    assert_each_ok(tasks).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_keep_one_rate_and_one_concurrency_cap() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let origin = Origin::slow("127.0.0.1", Duration::from_millis(30), "ok").await;
    let all = instances(
        3,
        &redis,
        "",
        "[defaults]\nrate = 20.0\nburst = 2\nconcurrency = 2\nadaptive = false\nmax_wait_seconds = 30\n",
    )
    .await;
    let started = Instant::now();
    spread_gets(&all, &origin.url("/page"), 20).await;
    let took = started.elapsed();
    assert_eq!(origin.count(), 60);
    // 60 requests at 20/s with a burst of 2: at least (60 - 2) / 20 = 2.9 s for all instances
    // together, not a third of it.
    assert!(took >= Duration::from_millis(2800), "took {took:?}");
    for window in [
        Duration::from_millis(500),
        Duration::from_secs(1),
        Duration::from_secs(2),
    ] {
        let most = origin.most_within_any(window);
        let bound = 2 + (20.0 * window.as_secs_f64()).ceil() as usize;
        assert!(
            most <= bound,
            "{most} requests within {window:?}; the budget allows {bound}"
        );
    }
    assert!(
        origin.max_in_flight() <= 2,
        "in flight at once: {}",
        origin.max_in_flight()
    );
}
