//! Allowances (turns leased ahead from the shared store, `docs/several-instances.md`): a host with
//! room to spare is served without a round trip per request, and the site still sees one budget:
//! every window within `burst + rate × T` across instances that spend leased turns whenever they
//! like, and a cooldown heard by one instance stops the others' leased turns too. Every test
//! starts its own redis-server on a free loopback port.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;
use tokio::time::Instant;

use crate::support::*;

/// The store's count of script calls (`EVALSHA`), all instances together.
fn script_calls(redis: &RedisServer) -> u64 {
    let info = redis.cli(&["INFO", "commandstats"]);
    info.lines()
        .find_map(|line| line.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// `clients` closed-loop clients on each instance, GETting `url` until `end`; every answer must
/// be 200. Returns how many were answered.
async fn hammer(all: &[Courtesy], url: &str, clients: usize, end: Instant) -> usize {
    hammer_instances(
        all,
        &format!("{url}?"),
        clients,
        end,
        Duration::from_secs(10),
    )
    .await
}

/// Counts the looks at `courtesy`'s page of `key`, every 10 ms until `end`, that found an
/// allowance held.
fn leased_seen(courtesy: &Courtesy, key: &str, end: Instant) -> tokio::task::JoinHandle<usize> {
    let url = courtesy.admin_url(&format!("/hosts/{key}"));
    tokio::spawn(async move {
        let mut seen = 0;
        while Instant::now() < end {
            let (_, body) = admin_call("GET", &url, None, "").await;
            if serde_json::from_str::<serde_json::Value>(&body)
                .is_ok_and(|v| v["ahead"]["turns"].as_u64().is_some())
            {
                seen += 1;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        seen
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_roomy_host_is_served_from_allowances_with_few_round_trips() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let origin = Origin::ok("127.0.0.1").await;
    let all = instances_on(
        2,
        &redis.shared_section("instances = 2"),
        "[defaults]\nrate = 100000.0\nburst = 1000\nconcurrency = 200\nadaptive = false\n",
    )
    .await;
    let before = script_calls(&redis);
    let end = Instant::now() + Duration::from_secs(2);
    let answered = hammer(&all, &origin.url("/roomy"), 4, end).await;
    let calls = script_calls(&redis) - before;
    assert_eq!(origin.count(), answered);
    assert!(answered > 400, "only {answered} answered");
    // One round trip per allowance (a few a second per instance), not one per request.
    assert!(
        (calls as f64) < 0.1 * answered as f64,
        "{calls} script calls for {answered} requests"
    );
    // What is held is given back when the host goes quiet: nothing left in the store.
    let key = format!("courtesy:{{{}}}:b", origin.addr);
    let mut held = String::new();
    for _ in 0..100 {
        held = redis.cli(&["HMGET", &key, "ah", "as"]);
        if held.lines().all(|v| v.trim() == "0") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        held.lines().all(|v| v.trim() == "0"),
        "still held after the host went quiet: {held:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_spending_leased_turns_keep_one_budget() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let origin = Origin::slow("127.0.0.1", Duration::from_millis(5), "ok").await;
    // A deep bucket (allowances of up to half of it) at a modest rate: bursts served from
    // leased turns, then paced; twice, with a quiet spell for the bucket to fill again.
    let (rate, burst) = (100.0, 300);
    let all = instances_on(
        3,
        &redis.shared_section("instances = 3"),
        &format!(
            "[defaults]\nrate = {rate}\nburst = {burst}\nconcurrency = 100\nadaptive = false\nmax_wait_seconds = 30\n"
        ),
    )
    .await;
    let url = origin.url("/deep");
    let mut leased = 0;
    for _ in 0..2 {
        let end = Instant::now() + Duration::from_secs(3);
        let watch = leased_seen(&all[0], &origin.addr.to_string(), end);
        hammer(&all, &url, 5, end).await;
        leased += watch.await.unwrap();
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    assert!(leased > 0, "no allowance was ever held");
    // Arrival times at the origin lag the sends by a little: a couple of turns of slack.
    assert_within_budget(&origin, rate, burst, 2);
    assert!(origin.max_in_flight() <= 100);
    assert!(
        origin.count() >= 2 * (burst + 2 * rate as usize),
        "the budget was used: {} arrivals",
        origin.count()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cooldown_heard_by_one_instance_stops_every_instances_leased_turns() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let seen = Arc::new(AtomicUsize::new(0));
    let count = seen.clone();
    let origin = Origin::start("127.0.0.1", move |_req| {
        let n = count.fetch_add(1, Ordering::SeqCst);
        async move {
            if n == 300 {
                come_back_later(429, "2", "slow down")
            } else {
                http::Response::new(full("ok"))
            }
        }
    })
    .await;
    let all = instances_on(
        2,
        &redis.shared_section("instances = 2"),
        "[defaults]\nrate = 100000.0\nburst = 1000\nconcurrency = 200\nadaptive = false\non_cooldown = \"hold\"\nmax_wait_seconds = 30\n",
    )
    .await;
    let end = Instant::now() + Duration::from_secs(4);
    let mut tasks = Vec::new();
    for c in &all {
        for i in 0..4 {
            let client = c.client();
            let url = origin.url(&format!("/c{i}"));
            tasks.push(tokio::spawn(async move {
                let mut conn = client.connect().await;
                while Instant::now() < end {
                    let status = conn.get(&url).await.status;
                    assert!(
                        status == StatusCode::OK || status == StatusCode::TOO_MANY_REQUESTS,
                        "{status}"
                    );
                }
            }));
        }
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(15), t)
            .await
            .expect("no client hangs")
            .unwrap();
    }
    let times = origin.arrival_times();
    let storm = times[300];
    // Requests already on their way when the 429 was answered may still arrive; after that,
    // nothing from either instance until the window is over.
    let inside = times
        .iter()
        .filter(|t| {
            **t > storm + Duration::from_millis(150) && **t < storm + Duration::from_millis(1900)
        })
        .count();
    assert_eq!(inside, 0, "arrivals inside the Retry-After window");
    let after = times
        .iter()
        .filter(|t| **t > storm + Duration::from_secs(2))
        .count();
    assert!(after > 0, "the host was served again after the window");
}
