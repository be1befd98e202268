//! The shared budget on the store's other shapes: a Redis Cluster (`redis+cluster://`), a master
//! under Redis Sentinel that fails over (`redis+sentinel://`), a TLS store that asks for a client
//! certificate, a store user with the minimum ACL, and `/readyz` that tells the truth about the
//! fallback. Every test starts its own servers on free loopback ports.

use std::time::Duration;

use http::StatusCode;
use tokio::time::Instant;

use crate::support::*;

/// The minimum ACL of courtesy's store user (the README shows the same line), for `user` with
/// `password` and the default `key_prefix`.
fn acl_line(user: &str, password: &str) -> Vec<String> {
    format!(
        "ACL SETUSER {user} reset on >{password} ~courtesy:* &courtesy:hints \
         +evalsha +script|load +time +hset +hget +hmget +hdel +pexpire +pttl \
         +zadd +zrem +zrange +zcard +zremrangebyscore +zrangebyscore +zcount +publish +subscribe +info"
    )
    .split(' ')
    .map(str::to_string)
    .collect()
}

/// Clients on every instance sending GETs to `url` back to back until `end`; each request must
/// be answered within 20 s, by 200 or by courtesy's own 503 (with Proxy-Status). Returns how
/// many got 200.
async fn hammer_answered(all: &[Courtesy], urls: &[String], end: Instant) -> usize {
    let mut tasks = Vec::new();
    for c in all {
        for url in urls {
            let client = c.client();
            let url = url.clone();
            tasks.push(tokio::spawn(async move {
                let mut ok = 0;
                let mut conn = client.connect().await;
                while Instant::now() < end {
                    let got = tokio::time::timeout(Duration::from_secs(20), conn.get(&url))
                        .await
                        .expect("no request hangs");
                    match got.status {
                        StatusCode::OK => ok += 1,
                        StatusCode::SERVICE_UNAVAILABLE => {
                            assert!(
                                !got.header("proxy-status").is_empty(),
                                "a 503 from courtesy says why"
                            );
                            conn = client.connect().await;
                        }
                        other => panic!("unexpected {other}"),
                    }
                }
                ok
            }));
        }
    }
    let mut ok = 0;
    for t in tasks {
        ok += t.await.unwrap();
    }
    ok
}

const PACED: &str = "[defaults]\nrate = 10.0\nburst = 3\nconcurrency = 8\nadaptive = false\nmax_wait_seconds = 15\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_keeps_one_budget_per_host_whichever_node_holds_it() {
    let Some(cluster) = RedisCluster::start() else {
        return;
    };
    // Origins (one host each) until three hosts' keys land on three different nodes.
    let mut origins: Vec<Origin> = Vec::new();
    let mut nodes = Vec::new();
    for _ in 0..60 {
        let origin = Origin::ok("127.0.0.1").await;
        let node = cluster.node_of(&format!("{{{}}}", origin.addr));
        if !nodes.contains(&node) {
            nodes.push(node);
            origins.push(origin);
        }
        if origins.len() == 3 {
            break;
        }
    }
    assert_eq!(origins.len(), 3, "three hosts on three nodes");
    let shared = format!(
        "[shared]\nredis_url = \"{}\"\ninstances = 3\n",
        cluster.url()
    );
    let all = instances_on(3, &shared, PACED).await;
    let urls: Vec<String> = origins.iter().map(|o| o.url("/c")).collect();
    let started = Instant::now();
    let ok = tokio::time::timeout(
        Duration::from_secs(30),
        hammer_answered(&all, &urls, started + Duration::from_secs(4)),
    )
    .await
    .expect("nothing hangs");
    for c in &all {
        assert_eq!(budget_mode(c).await, "shared");
    }
    for (origin, node) in origins.iter().zip(&nodes) {
        // The host's budget lives on the node of its slot, and the site saw one budget.
        let key = format!("courtesy:{{{}}}:b", origin.addr);
        assert_eq!(cli_at(*node, &["EXISTS", &key]), "1", "{key} on {node}");
        assert!(
            origin.count() >= 30,
            "{} served only {}",
            origin.url(""),
            origin.count()
        );
        assert_within_budget(origin, 10.0, 3, 0);
    }
    assert!(ok >= 90, "only {ok} answered 200");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_whose_slot_moves_mid_run_keeps_one_budget() {
    let Some(cluster) = RedisCluster::start() else {
        return;
    };
    let origin = Origin::ok("127.0.0.1").await;
    let shared = format!(
        "[shared]\nredis_url = \"{}\"\ninstances = 3\n",
        cluster.url()
    );
    let all = instances_on(3, &shared, PACED).await;
    let url = origin.url("/r");
    let end = Instant::now() + Duration::from_secs(6);
    let hammer = hammer_answered(&all, std::slice::from_ref(&url), end);
    let tag = format!("{{{}}}", origin.addr);
    let reshard = async {
        tokio::time::sleep(Duration::from_secs(2)).await;
        // redis-cli runs a few times: off the runtime's worker for that while.
        let moved_to = tokio::task::block_in_place(|| cluster.move_slot_of(&tag));
        let key = format!("courtesy:{tag}:b");
        (moved_to, key)
    };
    let (ok, (moved_to, key)) = tokio::join!(hammer, reshard);
    assert!(ok >= 40, "only {ok} answered 200");
    assert_eq!(
        cli_at(moved_to, &["EXISTS", &key]),
        "1",
        "{key} moved with its slot"
    );
    assert_within_budget(&origin, 10.0, 3, 0);
    let after = origin
        .arrival_times()
        .into_iter()
        .filter(|t| *t > end - Duration::from_secs(2))
        .count();
    assert!(after >= 10, "only {after} arrivals after the reshard");
    let mut failed = Vec::new();
    for c in &all {
        assert_eq!(budget_mode(c).await, "shared");
        failed.extend(failed_store_calls(c).await);
    }
    // MOVED is followed inside the call: no call failed over the reshard.
    assert!(failed.is_empty(), "calls failed: {failed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_url_to_a_cluster_node_is_refused_at_start() {
    let Some(cluster) = RedisCluster::start() else {
        return;
    };
    let url = format!("redis://127.0.0.1:{}/0", cluster.ports()[0]);
    let courtesy = Courtesy::start(&format!("[shared]\nredis_url = \"{url}\"\n")).await;
    let result = tokio::time::timeout(Duration::from_secs(10), courtesy.shutdown())
        .await
        .expect("the start-up check ends");
    let err = format!(
        "{:#}",
        result.expect_err("a cluster node on redis:// is refused")
    );
    assert!(err.contains("redis+cluster://"), "{err}");
    assert!(err.contains("Redis Cluster node"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_failover_brings_every_instance_back_on_the_shared_budget_within_ten_seconds() {
    let Some(mut sentinels) = RedisSentinels::start() else {
        return;
    };
    let origin = Origin::ok("127.0.0.1").await;
    let shared = format!(
        "[shared]\nredis_url = \"{}\"\ninstances = 3\ntimeout_ms = 200\n",
        sentinels.url()
    );
    let all = instances_on(3, &shared, PACED).await;
    let url = origin.url("/s");
    let start = Instant::now();
    let end = start + Duration::from_secs(30);
    let hammer = {
        let urls = vec![url.clone(), url.clone()];
        let all = &all;
        async move { hammer_answered(all, &urls, end).await }
    };
    let watch = async {
        tokio::time::sleep(Duration::from_secs(3)).await;
        for c in &all {
            assert_eq!(
                budget_mode(c).await,
                "shared",
                "on the shared budget before"
            );
        }
        let old = sentinels.kill_master();
        let killed = Instant::now();
        // The promotion: a sentinel names another master.
        let promoted = loop {
            if sentinels.master_port().is_some_and(|p| p != old) {
                break Instant::now();
            }
            assert!(killed.elapsed() < Duration::from_secs(20), "no promotion");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let mut back = Vec::new();
        for c in &all {
            loop {
                if budget_mode(c).await == "shared" {
                    back.push(promoted.elapsed());
                    break;
                }
                assert!(
                    promoted.elapsed() < Duration::from_secs(12),
                    "an instance was not shared again within 10 s of the promotion"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        eprintln!(
            "Sentinel failover: promoted {:?} after the kill; every instance shared again {:?} after the promotion",
            promoted - killed,
            back.iter().max()
        );
    };
    let (ok, ()) = tokio::join!(hammer, watch);
    assert!(ok >= 100, "only {ok} answered 200");
    // The shares in fallback (1/3 of the rate, one token each) and the shared budget after the
    // failover add up to one budget; one turn of slack for the instant of the switch.
    assert_within_budget(&origin, 10.0, 3, 1);
    for c in &all {
        assert_eq!(budget_mode(c).await, "shared");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_asks_for_a_client_certificate_is_shared_with_cert_file_and_key_file() {
    let ca = TestCa::new();
    let dir = temp_dir("mtls");
    let (cert, key) = ca.server_files(&dir, &["127.0.0.1"]);
    // Another folder: `server_files` names its files server.pem and server-key.pem.
    let client_dir = temp_dir("mtls-client");
    let (client_cert, client_key) = ca.server_files(&client_dir, &["courtesy-client"]);
    let ca_file = ca.write(&dir, "ca.pem");
    let Some(redis) = TlsRedis::start(&cert, &key, &ca_file) else {
        return;
    };
    let origin = Origin::ok("127.0.0.1").await;
    let with = Courtesy::start(&format!(
        "[shared]\nredis_url = \"{}\"\nca_file = \"{}\"\ncert_file = \"{}\"\nkey_file = \"{}\"\n",
        redis.url(),
        ca_file.display(),
        client_cert.display(),
        client_key.display()
    ))
    .await;
    assert_eq!(
        with.client().get(&origin.url("/m")).await.status,
        StatusCode::OK
    );
    assert!(
        eventually(Duration::from_secs(5), || !redis
            .keys("courtesy:*")
            .is_empty())
        .await,
        "the budget is kept in the store"
    );
    assert_eq!(budget_mode(&with).await, "shared");
    let without = Courtesy::start(&format!(
        "[shared]\nredis_url = \"{}\"\nca_file = \"{}\"\n",
        redis.url(),
        ca_file.display()
    ))
    .await;
    assert_eq!(
        without.client().get(&origin.url("/n")).await.status,
        StatusCode::OK
    );
    assert_eq!(budget_mode(&without).await, "fallback");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_minimum_acl_is_enough_and_a_user_without_time_fails_loudly() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let line = acl_line("courtesy", "pw-courtesy");
    let args: Vec<&str> = line.iter().map(String::as_str).collect();
    assert_eq!(redis.cli(&args), "OK");
    let origin = Origin::ok("127.0.0.1").await;
    let url = format!("redis://courtesy:pw-courtesy@127.0.0.1:{}/0", redis.port);
    let shared = format!("[shared]\nredis_url = \"{url}\"\ninstances = 2\n");
    let all = vec![
        Courtesy::start(&format!("{shared}\n{PACED}")).await,
        Courtesy::start(&format!("{shared}\n{PACED}")).await,
    ];
    let ok = hammer_answered(
        &all,
        &[origin.url("/a")],
        Instant::now() + Duration::from_secs(3),
    )
    .await;
    assert!(ok >= 25, "only {ok} answered 200");
    assert_within_budget(&origin, 10.0, 3, 0);
    for c in &all {
        assert_eq!(budget_mode(c).await, "shared", "the minimum ACL is enough");
        let failed = failed_store_calls(c).await;
        assert!(failed.is_empty(), "no call failed: {failed:?}");
    }
    assert!(
        redis.cli(&["ACL", "LOG"]).is_empty(),
        "no ACL denial logged"
    );

    // The same user without +time: the scripts cannot read the store's clock.
    let mut line = acl_line("notime", "pw-notime");
    line.retain(|w| w != "+time");
    let args: Vec<&str> = line.iter().map(String::as_str).collect();
    assert_eq!(redis.cli(&args), "OK");
    let dir = temp_dir("acl");
    let ports = Ports::free();
    let config = ports.config_in(
        &dir,
        &format!(
            "[shared]\nredis_url = \"redis://notime:pw-notime@127.0.0.1:{}/0\"\ninstances = 2\n",
            redis.port
        ),
    );
    let log = dir.join("stderr.log");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_courtesy"))
        .args(["run", "--config"])
        .arg(&config)
        .env("RUST_LOG", "warn")
        .env("NO_COLOR", "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    assert!(listening(ports.proxy_addr()).await);
    let admin = format!("http://127.0.0.1:{}/readyz", ports.admin);
    let mut mode = String::new();
    for _ in 0..50 {
        let (_, body) = admin_call("GET", &admin, None, "").await;
        mode = serde_json::from_str::<serde_json::Value>(&body).unwrap()["budget"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if mode == "fallback" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(mode, "fallback", "a user without +time is not shared");
    // The cause reaches the log (first, or within ten seconds when a timeout on a busy machine
    // came first).
    let mut text = String::new();
    for _ in 0..150 {
        text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("NOPERM") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = child.kill().await;
    assert!(
        text.contains("NOPERM") && text.to_lowercase().contains("time"),
        "the fallback's cause is logged: {text}"
    );
    assert!(!text.contains("pw-notime"), "no password in the log");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_answers_503_in_fallback_when_ready_in_fallback_is_false() {
    let Some(mut redis) = RedisServer::start() else {
        return;
    };
    let strict =
        Courtesy::start(&redis.shared_section("ready_in_fallback = false\ninstances = 1")).await;
    let lenient = Courtesy::start(&redis.shared_section("instances = 1")).await;
    let origin = Origin::ok("127.0.0.1").await;
    assert_eq!(
        strict.client().get(&origin.url("/r")).await.status,
        StatusCode::OK
    );
    assert_eq!(readiness(&strict).await, (StatusCode::OK, "shared".into()));
    redis.kill();
    // A request finds the store gone; the heartbeat too, within a beat.
    let _ = strict.client().get(&origin.url("/r2")).await;
    let mut seen = (StatusCode::OK, String::new());
    for _ in 0..40 {
        seen = readiness(&strict).await;
        if seen.1 == "fallback" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(seen, (StatusCode::SERVICE_UNAVAILABLE, "fallback".into()));
    // The default keeps answering 200 in fallback (the budget field says which).
    let mut lenient_seen = (StatusCode::OK, String::new());
    for _ in 0..40 {
        lenient_seen = readiness(&lenient).await;
        if lenient_seen.1 == "fallback" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(lenient_seen, (StatusCode::OK, "fallback".into()));
    // Requests are still served in fallback: readiness is advice to a load balancer.
    assert_eq!(
        strict.client().get(&origin.url("/r3")).await.status,
        StatusCode::OK
    );
}
