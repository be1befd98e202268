//! Paused-clock tests of why a request waited: each reason the limiter knows, and the rule when
//! several held one request (the longest wins; a tie goes to the last).

use std::time::Duration;

use tokio::time::{sleep, Instant};

use super::lanes::{JobTag, Priority};
use super::*;
use crate::config::HostPolicy;
use crate::pacing::feedback::Feedback;
use crate::pacing::policy::Answer;

fn limiter(rate: f64, burst: u32, concurrency: u32, max_in_flight: usize) -> Arc<Limiter> {
    let mut p = HostPolicy::default();
    p.pacing.rate = rate;
    p.pacing.burst = burst;
    p.pacing.concurrency = concurrency;
    p.adaptive.enabled = false;
    limiter_of(p, max_in_flight)
}

use super::tests::limiter_with as limiter_of;

/// Admits one request to `host` (held through a cooldown) and returns how long it waited and why.
async fn wait_of(limiter: &Arc<Limiter>, host: &'static str) -> (Duration, WaitReason) {
    let key = BudgetKey::of_host(host, 80);
    let admission = Admission::of(&key).on_cooldown(Some(crate::config::OnCooldown::Hold));
    let mut permit = limiter.admit(admission).await.unwrap();
    permit.mark_sent();
    (permit.waited(), permit.wait_reason())
}

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

#[tokio::test(start_paused = true)]
async fn a_request_paced_by_the_rate_waits_for_the_rate() {
    let limiter = limiter(1.0, 1, 10, 100);
    assert_eq!(
        wait_of(&limiter, "r.test").await,
        (Duration::ZERO, WaitReason::None)
    );
    assert_eq!(
        wait_of(&limiter, "r.test").await,
        (secs(1.0), WaitReason::Rate)
    );
}

#[tokio::test(start_paused = true)]
async fn a_full_host_waits_for_a_concurrency_slot() {
    let limiter = limiter(1000.0, 1000, 1, 100);
    let first = limiter.admit(("c.test", 80)).await.unwrap();
    tokio::spawn(async move {
        sleep(secs(0.5)).await;
        drop(first);
    });
    assert_eq!(
        wait_of(&limiter, "c.test").await,
        (secs(0.5), WaitReason::Concurrency)
    );
}

#[tokio::test(start_paused = true)]
async fn the_global_cap_is_named_when_another_host_holds_the_last_slot() {
    let limiter = limiter(1000.0, 1000, 10, 1);
    let other = limiter.admit(("a.test", 80)).await.unwrap();
    tokio::spawn(async move {
        sleep(secs(0.3)).await;
        drop(other);
    });
    assert_eq!(
        wait_of(&limiter, "b.test").await,
        (secs(0.3), WaitReason::GlobalCap)
    );
}

#[tokio::test(start_paused = true)]
async fn a_held_request_waits_for_the_cooldown_a_429_started() {
    let limiter = limiter(1000.0, 1000, 10, 100);
    let mut first = limiter.admit(("h.test", 80)).await.unwrap();
    first.mark_sent();
    first.report(&Answer {
        feedback: Feedback::Throttled,
        status: Some(429),
        latency: Duration::ZERO,
        retry_after: Some(secs(2.0)),
        server: None,
    });
    drop(first);
    let (waited, reason) = wait_of(&limiter, "h.test").await;
    assert_eq!(reason, WaitReason::Cooldown);
    assert!(waited >= secs(2.0) && waited < secs(2.1), "{waited:?}");
}

#[tokio::test(start_paused = true)]
async fn an_operators_pause_and_a_block_pause_have_their_own_words() {
    let mut p = HostPolicy::default();
    p.pacing.rate = 1000.0;
    p.pacing.burst = 1000;
    p.blocks.pause = secs(2.0);
    let limiter = limiter_of(p, 100);
    limiter
        .operate("p.test", 80, OperatorAction::Pause(secs(1.5)))
        .unwrap();
    assert_eq!(
        wait_of(&limiter, "p.test").await,
        (secs(1.5), WaitReason::Paused)
    );
    let mut seen = limiter.admit(("s.test", 80)).await.unwrap();
    seen.mark_sent();
    let pause = seen
        .soft_block("a test's block", 200)
        .expect("a new block pause");
    drop(seen);
    assert_eq!(
        wait_of(&limiter, "s.test").await,
        (pause, WaitReason::Block)
    );
}

#[tokio::test(start_paused = true)]
async fn a_crawl_delay_below_the_rate_is_named() {
    let limiter = limiter(10.0, 1, 10, 100);
    assert!(limiter.set_robots_cap("d.test", 80, Some(0.5)));
    wait_of(&limiter, "d.test").await;
    assert_eq!(
        wait_of(&limiter, "d.test").await,
        (secs(2.0), WaitReason::CrawlDelay)
    );
}

#[tokio::test(start_paused = true)]
async fn a_byte_debt_is_named() {
    let mut p = HostPolicy::default();
    p.pacing.rate = 100.0;
    p.pacing.concurrency = 4;
    p.pacing.max_bytes_per_second = Some(1000);
    p.pacing.max_bytes_burst = Some(0);
    let limiter = limiter_of(p, 64);
    let mut permit = limiter.admit(("b.test", 80)).await.unwrap();
    permit.mark_sent();
    permit.count_bytes(3000);
    drop(permit);
    assert_eq!(
        wait_of(&limiter, "b.test").await,
        (secs(3.0), WaitReason::ByteBudget)
    );
}

/// Four requests at 1/s at once: the second and third wait for the rate (the third 1 s behind
/// the second and 1 s at the front: a tie, the last reason wins), the fourth stands 2 s behind
/// its own job's requests: the queue held it longest.
#[tokio::test(start_paused = true)]
async fn behind_its_own_jobs_requests_a_request_waits_for_the_queue() {
    let limiter = limiter(1.0, 1, 10, 100);
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let limiter = limiter.clone();
            tokio::spawn(async move { wait_of(&limiter, "q.test").await })
        })
        .collect();
    let mut got = Vec::new();
    for task in tasks {
        got.push(task.await.unwrap());
    }
    assert_eq!(
        got,
        vec![
            (Duration::ZERO, WaitReason::None),
            (secs(1.0), WaitReason::Rate),
            (secs(2.0), WaitReason::Rate),
            (secs(3.0), WaitReason::Queue),
        ]
    );
}

/// A request of job B behind job A's request that waits 2 s for a slot: B waits 2 s for A's turn
/// (another job's share), then 0.1 s for the slot A's request then holds.
#[tokio::test(start_paused = true)]
async fn behind_another_jobs_request_a_request_waits_for_its_share() {
    let limiter = limiter(1000.0, 1000, 1, 100);
    let a = JobTag::new("a", 1.0);
    let b = JobTag::new("b", 1.0);
    let key = BudgetKey::of_host("j.test", 80);
    let first = limiter
        .admit(Admission::of(&key).job(a.clone(), Priority::Normal))
        .await
        .unwrap();
    let second = {
        let limiter = limiter.clone();
        let (key, a) = (key.clone(), a.clone());
        tokio::spawn(async move {
            let permit = limiter
                .admit(Admission::of(&key).job(a, Priority::Normal))
                .await
                .unwrap();
            let got = (permit.waited(), permit.wait_reason());
            sleep(secs(0.1)).await;
            got
        })
    };
    tokio::task::yield_now().await;
    let third = {
        let limiter = limiter.clone();
        let (key, b) = (key.clone(), b.clone());
        tokio::spawn(async move {
            let permit = limiter
                .admit(Admission::of(&key).job(b, Priority::Normal))
                .await
                .unwrap();
            (permit.waited(), permit.wait_reason())
        })
    };
    sleep(secs(2.0)).await;
    drop(first);
    assert_eq!(second.await.unwrap(), (secs(2.0), WaitReason::Concurrency));
    assert_eq!(third.await.unwrap(), (secs(2.1), WaitReason::JobShare));
}

#[tokio::test(start_paused = true)]
async fn a_request_refused_at_its_deadline_says_what_held_it() {
    let mut p = HostPolicy::default();
    p.pacing.rate = 1000.0;
    p.pacing.concurrency = 1;
    p.pacing.max_wait = secs(3.0);
    let limiter = limiter_of(p, 100);
    let _first = limiter.admit(("w.test", 80)).await.unwrap();
    let started = Instant::now();
    let refused = limiter.admit(("w.test", 80)).await.unwrap_err();
    assert_eq!(
        refused,
        Refusal::WaitedTooLong {
            waited: secs(3.0),
            reason: WaitReason::Concurrency
        }
    );
    assert_eq!(refused.wait_reason(), WaitReason::Concurrency);
    assert_eq!(started.elapsed(), secs(3.0));
}
