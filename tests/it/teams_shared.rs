//! Teams across instances: two courtesy instances on one `[shared]` Redis keep one budget for a
//! host, job A floods instance 1, and job B asks once on each instance. Within an instance the
//! host's queue is fair between jobs (`limiter::lanes`); across instances the store's waiting list
//! decides which instance takes the next turn. Neither may leave B's one request behind A's queue,
//! and the site sees one courtesy's budget throughout.

use std::time::Duration;

use crate::support::*;
use base64::Engine as _;
use http::Request;
use tokio::time::Instant;

const TOKEN_A: &str = "token-of-crawl-a-0123456789";
const TOKEN_B: &str = "token-of-crawl-b-0123456789";

/// The host's pace: 4 turns a second (a turn is 250 ms), burst 1, one request at a time.
const RATE: f64 = 4.0;

fn config() -> String {
    format!(
        "[defaults]\nrate = {RATE}\nburst = 1\nconcurrency = 1\nadaptive = false\n\
         max_wait_seconds = 60\nmax_queue = 1000\n\
         [[job]]\nname = \"crawl-a\"\ntoken = \"{TOKEN_A}\"\n\
         [[job]]\nname = \"crawl-b\"\ntoken = \"{TOKEN_B}\"\n"
    )
}

/// A GET of `url` as job `user`, its credentials as a client sends them from its proxy URL.
fn get_as(url: &str, user: &str, token: &str) -> Request<TestBody> {
    let pair = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{token}"));
    Request::get(url)
        .header("proxy-authorization", format!("Basic {pair}"))
        .body(empty())
        .unwrap()
}

/// Sends `req` through `client` in a task of its own; the task returns the answer and how long
/// it took, or `None` after 30 s (a request stuck that long fails the test, it does not hang it).
fn timed(
    client: ProxyClient,
    req: Request<TestBody>,
) -> tokio::task::JoinHandle<Option<(Got, Duration)>> {
    tokio::spawn(async move {
        let asked = Instant::now();
        let got = tokio::time::timeout(Duration::from_secs(30), client.send(req))
            .await
            .ok()?;
        Some((got, asked.elapsed()))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_request_of_another_job_is_not_stuck_behind_a_flood_on_either_instance() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let origin = Origin::ok("127.0.0.1").await;
    let all = instances_on(2, &redis.shared_section("instances = 2"), &config()).await;
    for (i, c) in all.iter().enumerate() {
        let deadline = Instant::now() + Duration::from_secs(10);
        while budget_mode(c).await != "shared" && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(
            budget_mode(c).await,
            "shared",
            "instance {i} keeps the shared budget"
        );
    }
    let (one, two) = (all[0].client(), all[1].client());

    // Job A queues 60 requests on instance 1: 15 s of turns at 4/s.
    let flood: Vec<_> = (0..60)
        .map(|i| {
            let req = get_as(&origin.url(&format!("/a/{i}")), "crawl-a", TOKEN_A);
            tokio::spawn(async move { one.send(req).await })
        })
        .collect();
    assert!(
        eventually(Duration::from_secs(10), || origin.count() >= 3).await,
        "job A's requests are flowing"
    );

    // Then job B asks once on each instance, at the same moment.
    let sent = Instant::now();
    let b_one = timed(one, get_as(&origin.url("/b/one"), "crawl-b", TOKEN_B));
    let b_two = timed(two, get_as(&origin.url("/b/two"), "crawl-b", TOKEN_B));
    let (b_one, b_two) = (b_one.await.unwrap(), b_two.await.unwrap());
    let a_meanwhile = origin
        .arrivals()
        .iter()
        .filter(|a| a.at >= sent && a.path.starts_with("/a/"))
        .count();
    let paths = origin.paths();
    let place = |p: &str| paths.iter().position(|x| x == p);
    let a_after_b_two = place("/b/two").map_or(0, |at| {
        paths[at..].iter().filter(|p| p.starts_with("/a/")).count()
    });
    eprintln!(
        "arrivals: B's at {:?} (instance 1) and {:?} (instance 2) of {}; \
         {a_after_b_two} of A's came after B's on instance 2",
        place("/b/one"),
        place("/b/two"),
        paths.len()
    );
    let wait_one = b_one.as_ref().map(|(_, w)| *w);
    let wait_two = b_two.as_ref().map(|(_, w)| *w);
    eprintln!(
        "job B waited {wait_one:?} on instance 1 and {wait_two:?} on instance 2 \
         behind job A's 60 on instance 1 (A got {a_meanwhile} turns meanwhile)"
    );
    let (got_one, wait_one) = b_one.expect("B's request on instance 1 was answered within 30 s");
    let (got_two, wait_two) = b_two.expect("B's request on instance 2 was answered within 30 s");
    assert_eq!(got_one.status, 200);
    assert_eq!(got_two.status, 200);

    // One budget for the site over both instances, A's flood included.
    tokio::time::sleep(Duration::from_secs(2)).await;
    eprintln!(
        "the origin saw at most {} in 1 s and {} in 5 s ({} requests in all)",
        origin.most_within_any(Duration::from_secs(1)),
        origin.most_within_any(Duration::from_secs(5)),
        origin.count()
    );
    assert_within_budget(&origin, RATE, 1, 0);
    // Instance 1 is fair among its own jobs: B's lane starts at the queue's virtual time, so its
    // request is at most one of A's turns away there (two turns, 0.5 s at 4/s), plus a turn that
    // instance 2's B may take first, plus store round trips: 2 s leaves room for a busy 2-core
    // machine while A's FIFO (the 57 or so still queued) would be 14 s.
    assert!(
        wait_one <= Duration::from_secs(2),
        "B waited {wait_one:?} on instance 1 behind A's queue"
    );
    // Instance 2 has only B's request: the store's waiting list should give it one of the next
    // few turns (fair across instances), not the turn after A's whole queue on instance 1.
    assert!(
        wait_two <= Duration::from_secs(3),
        "B waited {wait_two:?} on instance 2 while A's queue on instance 1 took the turns"
    );

    for task in flood {
        task.abort();
    }
}
