//! End-to-end: `GET /v1/events`, the stream of host-state changes on the admin listener
//! (`docs/see-and-steer.md`, "Hear when a host changes"): a cooldown's start and end on time,
//! `Last-Event-ID` replay and `missed`, the `?host=` filter, operator pauses, a block, robots.txt
//! fetched, a consumer that never reads dropped while memory stays bounded, and a cooldown learned
//! through another instance under `[shared]`.

use std::time::Duration;

use http::{Request, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::time::{timeout, Instant};

use crate::support::*;

/// The hub's bounds, as `docs/see-and-steer.md` documents them.
const QUEUE_BYTES: u64 = 64 * 1024;
const BUFFERED: u64 = 1024;

/// One event read from the stream: its `id:` line, `event:` line and `data:` JSON.
#[derive(Debug, Clone)]
struct Event {
    id: u64,
    kind: String,
    data: Value,
    /// When the test read it.
    at: Instant,
}

/// A client reading `GET /v1/events` as Server-Sent Events.
struct Stream {
    body: Incoming,
    text: String,
}

impl Stream {
    /// Opens `/v1/events` + `query` on `courtesy`'s admin listener, with `Last-Event-ID` if given.
    async fn open(courtesy: &Courtesy, query: &str, last: Option<u64>) -> Stream {
        let response = Stream::request(courtesy, query, last).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        assert_eq!(response.headers()["cache-control"], "no-store");
        Stream {
            body: response.into_body(),
            text: String::new(),
        }
    }

    async fn request(
        courtesy: &Courtesy,
        query: &str,
        last: Option<u64>,
    ) -> http::Response<Incoming> {
        let mut req = Request::get(courtesy.admin_url(&format!("/v1/events{query}")));
        if let Some(last) = last {
            req = req.header("last-event-id", last.to_string());
        }
        direct_client()
            .request(req.body(empty()).unwrap())
            .await
            .unwrap()
    }

    /// The next event within `limit` (keep-alive comments skipped), or `None`.
    async fn next(&mut self, limit: Duration) -> Option<Event> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(end) = self.text.find("\n\n") {
                let block: String = self.text.drain(..end + 2).collect();
                if let Some(event) = parse(&block) {
                    return Some(event);
                }
                continue;
            }
            let frame = timeout(
                deadline.saturating_duration_since(Instant::now()),
                self.body.frame(),
            )
            .await
            .ok()??
            .ok()?;
            if let Some(data) = frame.data_ref() {
                self.text.push_str(&String::from_utf8_lossy(data));
            }
        }
    }

    /// The next event of type `kind` within `limit`, others passed over.
    async fn next_of(&mut self, kind: &str, limit: Duration) -> Option<Event> {
        let deadline = Instant::now() + limit;
        loop {
            let event = self
                .next(deadline.saturating_duration_since(Instant::now()))
                .await?;
            if event.kind == kind {
                return Some(event);
            }
        }
    }
}

/// One SSE block (lines up to a blank line) as an event; `None` for a comment.
fn parse(block: &str) -> Option<Event> {
    let field = |name: &str| {
        block
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::to_string)
    };
    let id = field("id: ")?.parse().ok()?;
    let kind = field("event: ")?;
    let data: Value = serde_json::from_str(&field("data: ")?).expect("data is JSON");
    assert_eq!(data["id"], id, "{block}");
    assert_eq!(data["type"], kind.as_str(), "{block}");
    Some(Event {
        id,
        kind,
        data,
        at: Instant::now(),
    })
}

/// An operator's action on `key` through the admin API; it must succeed.
async fn operate(courtesy: &Courtesy, key: &str, action: &str) {
    let url = courtesy.admin_url(&format!("/hosts/{key}/{action}"));
    let (status, body) = admin_call("POST", &url, None, "").await;
    assert_eq!(status, StatusCode::OK, "{action}: {body}");
}

/// `GET /v1/events/stats`: what the hub holds.
async fn stats(courtesy: &Courtesy) -> Value {
    let (status, body) = admin_call("GET", &courtesy.admin_url("/v1/events/stats"), None, "").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    serde_json::from_str(&body).unwrap()
}

/// An origin that answers its first request 429 with `Retry-After: 3`, then 200.
async fn throttling_once() -> Origin {
    let answered = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    Origin::start("127.0.0.1", move |_req| {
        let n = answered.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        async move {
            if n == 0 {
                come_back_later(429, "3", "slow down")
            } else {
                http::Response::new(full("ok"))
            }
        }
    })
    .await
}

/// Rejected at once while cooling down and never retried by courtesy: the client hears the 429.
const REJECT: &str = "[defaults]\nrate = 50.0\non_cooldown = \"reject\"\nretry_idempotent = 0\n";

#[tokio::test]
async fn a_429_with_retry_after_3_is_told_at_once_and_its_end_3_s_later() {
    let origin = throttling_once().await;
    let courtesy = Courtesy::start(REJECT).await;
    let mut stream = Stream::open(&courtesy, "", None).await;
    let got = courtesy.client().get(&origin.url("/page")).await;
    assert_eq!(got.status, StatusCode::TOO_MANY_REQUESTS);
    let answered = Instant::now();
    let started = stream
        .next_of("cooldown_started", Duration::from_secs(1))
        .await
        .expect("cooldown_started within 1 s");
    assert!(started.at - answered < Duration::from_secs(1));
    let key = origin.addr.to_string();
    assert_eq!(started.data["host"], key.as_str());
    assert_eq!(started.data["cause"], "status:429");
    assert_eq!(started.data["source"], "local");
    let window = started.data["until_unix_ms"].as_u64().unwrap() as f64
        - started.data["at_unix_ms"].as_u64().unwrap() as f64;
    assert!((window - 3000.0).abs() <= 500.0, "until - at = {window} ms");
    let ended = stream
        .next_of("cooldown_ended", Duration::from_secs(5))
        .await
        .expect("cooldown_ended");
    let after = (ended.at - started.at).as_secs_f64();
    assert!(
        (after - 3.0).abs() <= 0.5,
        "ended {after} s after it started"
    );
    assert_eq!(ended.data["cause"], "status:429");
    assert!(ended.id > started.id);
}

#[tokio::test]
async fn a_reconnect_with_last_event_id_gets_what_it_missed_or_is_told_it_missed_some() {
    let courtesy = Courtesy::start("").await;
    let key = "replay.test:80";
    let mut stream = Stream::open(&courtesy, "", None).await;
    operate(&courtesy, key, "pause?seconds=60").await;
    let first = stream.next(Duration::from_secs(2)).await.expect("paused");
    assert_eq!(first.kind, "paused");
    drop(stream);
    operate(&courtesy, key, "resume").await;
    operate(&courtesy, key, "pause?seconds=30").await;
    let mut again = Stream::open(&courtesy, "", Some(first.id)).await;
    let missed: Vec<Event> = [
        again
            .next(Duration::from_secs(2))
            .await
            .expect("the resume"),
        again.next(Duration::from_secs(2)).await.expect("the pause"),
    ]
    .into();
    assert_eq!(missed[0].kind, "resumed");
    assert_eq!(missed[0].data["by"], "operator");
    assert_eq!(missed[1].kind, "paused");
    assert_eq!([missed[0].id, missed[1].id], [first.id + 1, first.id + 2]);
    drop(again);
    // More than the buffer holds: a reconnect from the first id hears `missed`, then the buffer.
    for _ in 0..BUFFERED + 20 {
        operate(&courtesy, key, "pause?seconds=60").await;
    }
    let mut late = Stream::open(&courtesy, "", Some(first.id)).await;
    let told = late.next(Duration::from_secs(2)).await.expect("missed");
    assert_eq!(told.kind, "missed");
    assert_eq!(told.data["last_event_id"], first.id);
    let oldest = told.data["oldest_id"].as_u64().unwrap();
    assert!(oldest > first.id + 2);
    let next = late
        .next(Duration::from_secs(2))
        .await
        .expect("the oldest kept");
    assert_eq!(next.id, oldest);
    // `?last_event_id=` does the same for clients that cannot send the header.
    let last = stats(&courtesy).await["published"].as_u64().unwrap();
    let mut polyfill = Stream::open(&courtesy, &format!("?last_event_id={}", last - 1), None).await;
    assert_eq!(
        polyfill.next(Duration::from_secs(2)).await.expect("one").id,
        last
    );
}

#[tokio::test]
async fn the_host_filter_passes_that_host_alone_in_any_spelling() {
    let courtesy = Courtesy::start("").await;
    let mut one = Stream::open(&courtesy, "?host=ONE.test.:80", None).await;
    let mut by_name = Stream::open(&courtesy, "?host=one.test", None).await;
    operate(&courtesy, "two.test:80", "pause?seconds=60").await;
    operate(&courtesy, "one.test:8080", "pause?seconds=60").await;
    operate(&courtesy, "one.test:80", "pause?seconds=60").await;
    let heard = one.next(Duration::from_secs(2)).await.expect("one.test:80");
    assert_eq!(heard.data["host"], "one.test:80");
    assert!(one.next(Duration::from_millis(300)).await.is_none());
    let hosts = [
        by_name.next(Duration::from_secs(2)).await.expect("8080"),
        by_name.next(Duration::from_secs(2)).await.expect("80"),
    ]
    .map(|e| e.data["host"].as_str().unwrap().to_string());
    assert_eq!(hosts, ["one.test:8080", "one.test:80"]);
    let (status, body) = admin_call(
        "GET",
        &courtesy.admin_url("/v1/events?host=bad:port:x"),
        None,
        "",
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
}

#[tokio::test]
async fn an_operator_pause_and_resume_are_told() {
    let courtesy = Courtesy::start("").await;
    let mut stream = Stream::open(&courtesy, "", None).await;
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as f64;
    operate(&courtesy, "op.test:443", "pause?seconds=120").await;
    operate(&courtesy, "op.test:443", "resume").await;
    let paused = stream.next(Duration::from_secs(2)).await.expect("paused");
    assert_eq!(paused.kind, "paused");
    assert_eq!(paused.data["by"], "operator");
    assert_eq!(paused.data["host"], "op.test:443");
    let until = paused.data["until_unix_ms"].as_u64().unwrap() as f64;
    assert!(
        (until - before - 120_000.0).abs() < 2_000.0,
        "{until} vs {before}"
    );
    let resumed = stream.next(Duration::from_secs(2)).await.expect("resumed");
    assert_eq!(resumed.kind, "resumed");
    assert_eq!(resumed.data["by"], "operator");
}

#[tokio::test]
async fn a_robots_fetch_is_told_with_what_it_asks() {
    let origin = Origin::start("127.0.0.1", |req: Request<Incoming>| async move {
        if req.uri().path() == "/robots.txt" {
            return http::Response::new(full(
                "User-agent: *\nDisallow: /private\nCrawl-delay: 2\n",
            ));
        }
        http::Response::new(full("page"))
    })
    .await;
    let courtesy = Courtesy::start("[defaults]\nobey_robots = true\n").await;
    let mut stream = Stream::open(&courtesy, "", None).await;
    let got = courtesy.client().get(&origin.url("/page")).await;
    assert_eq!(got.status, StatusCode::OK);
    let fetched = stream
        .next_of("robots_fetched", Duration::from_secs(2))
        .await
        .expect("robots_fetched");
    assert_eq!(fetched.data["host"], origin.addr.to_string().as_str());
    assert_eq!(fetched.data["status"], 200);
    assert_eq!(fetched.data["disallows_any"], true);
    assert_eq!(fetched.data["crawl_delay_s"], 2.0);
    let capped = stream
        .next_of("rate_changed", Duration::from_secs(2))
        .await
        .expect("the Crawl-delay's rate");
    assert_eq!(capped.data["why"], "robots");
    assert_eq!(capped.data["new"], 0.5);
}

#[tokio::test]
async fn a_block_is_told_detected_then_a_cooldown_and_a_pause_lifted_by_an_operator() {
    let origin = Origin::start("127.0.0.1", |_req| async {
        http::Response::builder()
            .status(403)
            .header("cf-mitigated", "challenge")
            .body(full("a challenge"))
            .unwrap()
    })
    .await;
    let courtesy = Courtesy::start("[defaults]\nrate = 50.0\n").await;
    let mut stream = Stream::open(&courtesy, "", None).await;
    let got = courtesy.client().get(&origin.url("/x")).await;
    assert_eq!(got.status, StatusCode::FORBIDDEN);
    let key = origin.addr.to_string();
    operate(&courtesy, &key, "resume").await;
    let mut told = Vec::new();
    while told.len() < 5 {
        let event = stream.next(Duration::from_secs(2)).await.expect("an event");
        if event.kind != "rate_changed" {
            told.push(event);
        }
    }
    let kinds: Vec<&str> = told.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "block_detected",
            "cooldown_started",
            "paused",
            "cooldown_ended",
            "resumed"
        ]
    );
    assert_eq!(told[0].data["signal"], "soft_block");
    assert_eq!(told[0].data["status"], 403);
    assert!(
        told[0].data["detail"]
            .as_str()
            .unwrap()
            .contains("challenge"),
        "{}",
        told[0].data
    );
    assert_eq!(told[1].data["cause"], "soft_block");
    assert_eq!(told[2].data["by"], "block");
    assert_eq!(told[3].data["cause"], "soft_block");
    assert_eq!(told[4].data["by"], "operator");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_refusals_for_a_full_queue_is_told_once_a_second() {
    let origin = Origin::ok("127.0.0.1").await;
    let courtesy = Courtesy::start(
        "[defaults]\nrate = 0.2\nburst = 1\nconcurrency = 1\nmax_queue = 1\nadaptive = false\n",
    )
    .await;
    let mut stream = Stream::open(&courtesy, "", None).await;
    assert_eq!(courtesy.client().get(&origin.url("/")).await.status, 200);
    let waiting = courtesy.client().spawn_gets(vec![origin.url("/")]);
    tokio::time::sleep(Duration::from_millis(200)).await;
    for _ in 0..20 {
        let got = courtesy.client().get(&origin.url("/")).await;
        assert_eq!(got.status, StatusCode::SERVICE_UNAVAILABLE);
    }
    let full = stream
        .next_of("queue_full", Duration::from_secs(2))
        .await
        .expect("queue_full");
    assert_eq!(full.data["max_queue"], 1);
    assert_eq!(full.data["host"], origin.addr.to_string().as_str());
    // Twenty refusals within a second or so: one more at most.
    let mut more = 0;
    while stream
        .next_of("queue_full", Duration::from_millis(300))
        .await
        .is_some()
    {
        more += 1;
    }
    assert!(more <= 1, "{more} more queue_full events");
    for w in waiting {
        w.abort();
    }
}

#[tokio::test]
async fn streams_past_half_the_admin_connections_get_a_503_with_retry_after() {
    // 8 admin connections: room for 4 streams, the other 4 kept for the API.
    let courtesy =
        Courtesy::start("[admin]\nmax_connections = 8\nmax_connections_per_client = 8\n").await;
    let mut open = Vec::new();
    for _ in 0..4 {
        open.push(Stream::open(&courtesy, "", None).await);
    }
    let refused = Stream::request(&courtesy, "", None).await;
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(refused.headers()["retry-after"], "10");
    let status = refused.headers()["proxy-status"].to_str().unwrap();
    assert!(status.contains("connection_limit_reached"), "{status}");
    // The API still answers beside the streams.
    assert_eq!(stats(&courtesy).await["subscribers"], 4);
}

#[tokio::test]
async fn a_consumer_that_never_reads_is_dropped_and_memory_stays_bounded() {
    let courtesy = Courtesy::start("").await;
    // A consumer that asks and never reads a byte, with a small receive buffer of its own.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stalled = socket.connect(courtesy.admin).await.unwrap();
    let head = format!(
        "GET /v1/events HTTP/1.1\r\nHost: {}\r\n\r\n",
        courtesy.admin
    );
    stalled.write_all(head.as_bytes()).await.unwrap();
    let mut reader = Stream::open(&courtesy, "", None).await;
    let deadline = Instant::now() + Duration::from_secs(2);
    while stats(&courtesy).await["subscribers"] != 2 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let reading = tokio::spawn(async move {
        let mut heard = 0u64;
        while reader.next(Duration::from_secs(5)).await.is_some() {
            heard += 1;
        }
        heard
    });
    // Wait for both subscribers, then flood the stream with pauses until the stalled one is
    // dropped, checking the hub's bound all along.
    let mut published = 0;
    let mut most_queued = 0;
    // A long name makes each event larger: the socket's buffers fill sooner.
    let label = "f".repeat(60);
    let flood = format!("{label}.{label}.{label}.{label}.test:80");
    let pause = courtesy.admin_url(&format!("/hosts/{flood}/pause?seconds=60"));
    let client = direct_client();
    let deadline = Instant::now() + Duration::from_secs(90);
    for round in 0.. {
        let now = stats(&courtesy).await;
        if round == 0 {
            assert_eq!(now["subscribers"], 2, "both consumers listen: {now}");
        }
        let queued = now["queued_bytes"].as_u64().unwrap();
        most_queued = most_queued.max(queued);
        assert!(queued <= 2 * QUEUE_BYTES, "{now}");
        assert!(
            now["buffered_bytes"].as_u64().unwrap() <= BUFFERED * 1024,
            "{now}"
        );
        if now["dropped"].as_u64().unwrap() >= 1 {
            assert_eq!(now["subscribers"], 1, "the reader keeps its place: {now}");
            published = now["published"].as_u64().unwrap();
            break;
        }
        if Instant::now() > deadline {
            break;
        }
        for _ in 0..100 {
            let request = Request::post(pause.as_str()).body(empty()).unwrap();
            let answer = client.request(request).await.unwrap();
            assert_eq!(answer.status(), StatusCode::OK);
            answer.into_body().collect().await.unwrap();
        }
    }
    assert!(
        published > 0,
        "the consumer that never reads was never dropped"
    );
    operate(&courtesy, &flood, "resume").await;
    // Shutting down ends the reader's stream; it heard every event: never slowed, never dropped.
    drop(stalled);
    courtesy.shutdown().await.unwrap();
    let heard = reading.await.unwrap();
    assert_eq!(
        heard,
        published + 1,
        "the reader heard {heard} of {published} + 1 events"
    );
    eprintln!(
        "queued at most {most_queued} bytes; the consumer that never read was dropped after \
         {published} events"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_announces_a_cooldown_learned_from_another() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let answered = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let origin = Origin::start("127.0.0.1", move |_req| {
        let n = answered.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        async move {
            if n == 1 {
                come_back_later(429, "3", "slow down")
            } else {
                http::Response::new(full("ok"))
            }
        }
    })
    .await;
    let all = instances_on(2, &redis.shared_section(""), REJECT).await;
    // The second instance knows the host (hints reach the hosts an instance knows).
    let known = all[1].client().get(&origin.url("/known")).await;
    assert_eq!(known.status, StatusCode::OK);
    let key = origin.addr.to_string();
    let mut stream = Stream::open(&all[1], &format!("?host={key}"), None).await;
    assert!(
        eventually(Duration::from_secs(5), || hint_listeners(&redis) >= 2).await,
        "both instances listen for hints"
    );
    let got = all[0].client().get(&origin.url("/throttled")).await;
    assert_eq!(got.status, StatusCode::TOO_MANY_REQUESTS);
    let started = stream
        .next_of("cooldown_started", Duration::from_secs(2))
        .await
        .expect("the cooldown learned through the store");
    assert_eq!(started.data["source"], "shared");
    assert_eq!(started.data["host"], key.as_str());
    let ended = stream
        .next_of("cooldown_ended", Duration::from_secs(5))
        .await
        .expect("its end");
    assert_eq!(ended.data["source"], "shared");
}

/// How many subscribers listen on the store's hints channel now.
fn hint_listeners(redis: &RedisServer) -> usize {
    let channels = redis.cli(&["PUBSUB", "CHANNELS", "*hints"]);
    let Some(channel) = channels.lines().next().filter(|c| !c.is_empty()) else {
        return 0;
    };
    redis
        .cli(&["PUBSUB", "NUMSUB", channel])
        .lines()
        .nth(1)
        .and_then(|l| l.trim().parse::<usize>().ok())
        .unwrap_or(0)
}
