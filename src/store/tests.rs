//! The scripts' time arithmetic against a real `redis-server` on a free loopback port, with an
//! injected `now`, and compared with the local token bucket (`crate::pacing::policy::Bucket`) fed the same
//! events.

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use tokio::time::Instant;

use super::calls::{
    BillCall, Call, EndedTurn, ReleaseCall, ReportCall, ReserveCall, ReserveReply, WithdrawCall,
};
use super::hints::Hint;
use super::scripts::script;
use super::Reservation;
use crate::pacing::policy::{Bucket, CooldownCause};

#[path = "../../tests/support/redis.rs"]
#[allow(dead_code, unreachable_pub)]
pub(super) mod server;

use server::RedisServer as TestRedis;

/// A reservation reply's first eight fields as the script's string has them: kind, µs, cause,
/// learned rate, operator rate, tat (an allowance's tokens), interval (its slots), start.
pub(super) type ReserveTuple = (String, i64, String, String, String, String, i64, i64);

/// A reservation reply's further turns: the `tat` each wrote, and its start.
pub(super) type FurtherTurns = Vec<(String, i64)>;

/// A typed reservation reply (`calls::ReserveReply`) back in the script's fields, for the
/// arithmetic tests written against them: its first eight fields, the further turns, the clock.
pub(super) fn reserve_fields(reply: &ReserveReply) -> (ReserveTuple, FurtherTurns, i64) {
    let none = || (String::new(), 0, 0);
    let us = |d: &Duration| i64::try_from(d.as_micros()).unwrap_or(i64::MAX);
    let (micros, cause, (tat, interval, start), more, view) = match &reply.reservation {
        Reservation::Go {
            wait,
            lease,
            more,
            view,
        } => (
            us(wait),
            String::new(),
            (lease.tat.to_string(), lease.interval, lease.start),
            more.iter()
                .map(|(_, t)| (t.tat.to_string(), t.start))
                .collect(),
            Some(view),
        ),
        Reservation::Ahead {
            tokens,
            slots,
            view,
        } => (
            0,
            String::new(),
            (tokens.to_string(), i64::from(*slots), reply.now),
            Vec::new(),
            Some(view),
        ),
        Reservation::Cool {
            remaining,
            cause,
            view,
        } => (us(remaining), cause.word(), none(), Vec::new(), Some(view)),
        // A stale call reads as a retry in a millisecond: the script said 0.
        Reservation::Later { .. } if reply.word == "stale" => {
            (0, String::new(), none(), Vec::new(), None)
        }
        Reservation::Busy { retry_in } | Reservation::Later { retry_in } => {
            (us(retry_in), String::new(), none(), Vec::new(), None)
        }
        Reservation::Settled => (0, String::new(), none(), Vec::new(), None),
    };
    let first = (
        reply.word.clone(),
        micros,
        cause,
        view.map(|v| v.rate.to_string()).unwrap_or_default(),
        view.and_then(|v| v.rate_override)
            .map(|r| r.to_string())
            .unwrap_or_default(),
        tat,
        interval,
        start,
    );
    (first, more, reply.now)
}

/// The first eight fields of a reservation's reply.
fn fields(reply: &ReserveReply) -> ReserveTuple {
    reserve_fields(reply).0
}

/// Runs `call` on the test's Redis (`EVAL`) and reads its reply.
pub(super) async fn run<C: Call>(conn: &mut MultiplexedConnection, call: &C) -> C::Reply {
    let script = script(C::SCRIPT);
    let mut invocation = script.prepare_invoke();
    call.write(&mut invocation);
    let value: redis::Value = invocation.invoke_async(conn).await.unwrap();
    C::read(value).expect("a reply of the script's shape")
}

/// A reservation of `host` at `now` µs with the tests' usual settings: one turn wanted, rate
/// 1/s, burst and concurrency 1, leases of 60 s, a horizon of 1,000 s, keys living an hour, and no
/// instance id (so no waiting list and no allowance), deadline, byte budget or ended turns.
pub(super) fn reservation<'a>(host: &'a str, member: &'a str, now: i64) -> ReserveCall<'a> {
    ReserveCall {
        prefix: "t",
        now: Some(now),
        mine: 1.0,
        configured_rate: 1.0,
        burst: 1,
        concurrency: 1,
        lease_us: 60_000_000,
        member,
        horizon_us: 1_000_000_000,
        rejoin: false,
        idle_ttl_us: 3_600_000_000,
        channel: "t:hints",
        host,
        want: 1,
        who: "",
        waited_us: 0,
        deadline_us: 0,
        waiting_place_us: 2_000_000,
        ask: None,
        byte_rate: None,
        byte_burst: None,
        ended: Vec::new(),
    }
}

/// A release of `member` (`scripts::RELEASE`) of `host`.
fn release_call<'a>(
    host: &'a str,
    member: &'a str,
    refund: bool,
    tat: &str,
    interval: i64,
) -> ReleaseCall<'a> {
    ReleaseCall {
        prefix: "t",
        now: None,
        member,
        refund,
        tat: tat.parse().unwrap_or(0),
        interval,
        channel: "t:hints",
        host,
    }
}

/// A connection of the test's own to `redis`.
pub(super) async fn connect(redis: &TestRedis) -> MultiplexedConnection {
    redis::Client::open(redis.url().as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// One reservation at `now` µs: `(kind, µs, tat, interval, start)`.
async fn reserve(
    conn: &mut MultiplexedConnection,
    host: &str,
    now: i64,
    rate: f64,
    burst: u32,
    concurrency: u32,
    rejoin: bool,
) -> (String, i64, String, i64, i64, String) {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let member = format!(
        "m{}",
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let call = ReserveCall {
        mine: rate,
        configured_rate: rate,
        burst,
        concurrency,
        rejoin,
        ..reservation(host, &member, now)
    };
    let reply = run(conn, &call).await;
    let (kind, micros, _cause, _rate, _ovr, tat, interval, start) = fields(&reply);
    (kind, micros, tat, interval, start, member)
}

/// What one report tells the store, with the fields a test varies.
struct Told<'a> {
    now: i64,
    cooldown_us: i64,
    cause: &'a str,
    rate: (&'a str, &'a str),
    started: i64,
    cap: &'a str,
}

/// One report (`scripts::REPORT`) for `host`: min rate 0.5, ceiling 10, configured rate 10,
/// burst 5; returns `(learned rate, cooldown µs left)`.
async fn report(conn: &mut MultiplexedConnection, host: &str, told: Told<'_>) -> (f64, i64) {
    let call = ReportCall {
        prefix: "t",
        now: Some(told.now),
        cooldown_us: told.cooldown_us,
        cause: told.cause.to_string(),
        rate_before: told.rate.0.parse().unwrap(),
        rate_after: told.rate.1.parse().unwrap(),
        started_us: told.started,
        min_rate: 0.5,
        ceiling: 10.0,
        configured_rate: 10.0,
        burst: 5,
        cap: Some(told.cap)
            .filter(|c| !c.is_empty())
            .map(|c| c.parse().unwrap()),
        cap_us: 3_600_000_000,
        channel: "t:hints",
        host,
        idle_ttl_us: 3_600_000_000,
    };
    let reply = run(conn, &call).await;
    (reply.rate, reply.cooldown_left_us)
}

/// A Unix time in µs with all 16 digits in use, as `TIME` gives.
const T0: i64 = 1_764_590_000_123_456;

#[tokio::test]
async fn reservations_start_when_the_local_bucket_would_let_them() {
    let Some(redis) = TestRedis::start() else {
        return;
    };
    let mut conn = connect(&redis).await;
    // Arrivals bunched and spread, at 7/s with a burst of 3: each request, reserved on arrival,
    // starts when the local bucket (taking in arrival order) would have let it go.
    let arrivals: Vec<i64> = vec![
        0, 0, 0, 0, 10_000, 400_000, 405_000, 2_000_000, 2_000_001, 2_100_000,
    ];
    let (rate, burst) = (7.0, 3);
    let epoch = Instant::now();
    let mut bucket = Bucket::new(rate, burst, epoch);
    let mut free_at = 0_i64;
    for (i, at) in arrivals.iter().enumerate() {
        let (kind, wait, ..) =
            reserve(&mut conn, "gcra.test:80", T0 + at, rate, burst, 100, false).await;
        assert_eq!(kind, "go", "request {i}");
        let start = at + wait;
        // The bucket's turn: not before the arrival, nor before the previous request's start.
        let mut when = (*at).max(free_at);
        let instant = |us: i64| epoch + Duration::from_micros(us as u64);
        let ready = bucket.ready_at(instant(when));
        when = ready.duration_since(epoch).as_micros() as i64;
        assert!(bucket.try_take(instant(when), 0.0, 0.0));
        free_at = when;
        // Intervals are whole microseconds rounded up in the script: at most 1 µs per turn late.
        assert!(
            (start - when).abs() <= i as i64 + 1,
            "request {i}: script starts it at {start} µs, the bucket at {when} µs"
        );
    }
}

#[tokio::test]
async fn a_refund_undoes_only_the_last_reservation() {
    let Some(redis) = TestRedis::start() else {
        return;
    };
    let mut conn = connect(&redis).await;
    let host = "refund.test:80";
    let (_, _, tat1, interval, _, first) = reserve(&mut conn, host, T0, 2.0, 1, 10, false).await;
    let (_, wait2, tat2, _, _, second) = reserve(&mut conn, host, T0, 2.0, 1, 10, false).await;
    assert_eq!(wait2, 500_000);
    let removed_of = |reply: super::calls::ReleaseReply| i64::from(reply.removed);
    // A lease that is not in the set refunds nothing.
    let removed: i64 = removed_of(
        run(
            &mut conn,
            &release_call(host, "nobody", true, &tat2, interval),
        )
        .await,
    );
    assert_eq!(removed, 0);
    // The last reservation, never used, is given back: the next request takes its turn.
    let removed: i64 = removed_of(
        run(
            &mut conn,
            &release_call(host, &second, true, &tat2, interval),
        )
        .await,
    );
    assert_eq!(removed, 1);
    let (_, wait3, tat3, ..) = reserve(&mut conn, host, T0 + 1, 2.0, 1, 10, false).await;
    assert_eq!(wait3, 499_999, "the refunded turn is taken again");
    // An earlier reservation with a later one on top cannot be undone without freeing a turn
    // twice: its release gives back nothing.
    let removed: i64 = removed_of(
        run(
            &mut conn,
            &release_call(host, &first, true, &tat1, interval),
        )
        .await,
    );
    assert_eq!(removed, 1, "the lease is freed");
    let (_, wait4, ..) = reserve(&mut conn, host, T0 + 2, 2.0, 1, 10, false).await;
    assert_eq!(wait4, 999_998, "no token came back");
    assert_ne!(tat1, tat3);
}

#[tokio::test]
async fn a_cooldown_closes_the_host_and_lets_one_request_go_at_its_end() {
    let Some(redis) = TestRedis::start() else {
        return;
    };
    let mut conn = connect(&redis).await;
    let host = "cool.test:80";
    let (kind, ..) = reserve(&mut conn, host, T0, 10.0, 5, 10, false).await;
    assert_eq!(kind, "go");
    // A 429 with Retry-After: 3 s.
    let told = Told {
        now: T0 + 1_000,
        cooldown_us: 3_000_000,
        cause: "status:429",
        rate: ("10", "5"),
        started: T0,
        cap: "",
    };
    assert_eq!(report(&mut conn, host, told).await, (5.0, 3_000_000));
    let (kind, wait, ..) = reserve(&mut conn, host, T0 + 2_000_000, 10.0, 5, 10, false).await;
    assert_eq!((kind.as_str(), wait), ("cool", 1_001_000));
    // At its end one request goes at once, the next a full interval later: no burst.
    let end = T0 + 3_001_000;
    let (kind, wait, ..) = reserve(&mut conn, host, end, 5.0, 5, 10, false).await;
    assert_eq!((kind.as_str(), wait), ("go", 0));
    let (_, wait, ..) = reserve(&mut conn, host, end, 5.0, 5, 10, false).await;
    assert_eq!(wait, 200_000);
}

#[tokio::test]
async fn one_storm_seen_by_several_instances_cuts_the_rate_once() {
    let Some(redis) = TestRedis::start() else {
        return;
    };
    let mut conn = connect(&redis).await;
    let host = "wave.test:80";
    let cut = |now: i64, started: i64| Told {
        now,
        cooldown_us: 0,
        cause: "",
        rate: ("8", "4"),
        started,
        cap: "",
    };
    // Four instances answer 429 to requests that all started before the first cut.
    let mut rates = Vec::new();
    for i in 0..4 {
        rates.push(report(&mut conn, host, cut(T0 + 1_000 + i, T0)).await.0);
    }
    // The shared rate starts at the configured 10; the instances cut 8 → 4, so it halves once.
    assert_eq!(rates, vec![5.0, 5.0, 5.0, 5.0]);
    // A request that started after the cut and met a 429 again cuts again.
    let (rate, _) = report(&mut conn, host, cut(T0 + 10_000, T0 + 5_000)).await;
    assert_eq!(rate, 2.5);
}

#[tokio::test]
async fn every_slot_taken_is_busy_until_a_lease_runs_out() {
    let Some(redis) = TestRedis::start() else {
        return;
    };
    let mut conn = connect(&redis).await;
    let host = "busy.test:80";
    for _ in 0..2 {
        let (kind, ..) = reserve(&mut conn, host, T0, 1000.0, 10, 2, false).await;
        assert_eq!(kind, "go");
    }
    let (kind, wait, ..) = reserve(&mut conn, host, T0 + 1_000, 1000.0, 10, 2, false).await;
    assert_eq!(kind, "busy");
    // Leases last 60 s from their turn's start (the test's lease time).
    assert!((59_000_000..=60_000_000).contains(&wait), "{wait}");
    // Someone waits now: the next release says so on the hint channel, once.
    let waits = |conn: &mut MultiplexedConnection| {
        let mut cmd = redis::cmd("HGET");
        cmd.arg(format!("t:{{{host}}}:b")).arg("w");
        let mut conn = conn.clone();
        async move { cmd.query_async::<Option<String>>(&mut conn).await.unwrap() }
    };
    assert_eq!(waits(&mut conn).await.as_deref(), Some("1"));
    let (kind, ..) = reserve(&mut conn, host, T0 + 60_000_001, 1000.0, 10, 2, false).await;
    assert_eq!(kind, "go", "the leases ran out");
    let (.., member) = reserve(&mut conn, host, T0 + 60_000_002, 1000.0, 10, 2, false).await;
    let freed: i64 = i64::from(
        run(&mut conn, &release_call(host, &member, false, "", 0))
            .await
            .removed,
    );
    assert_eq!(freed, 1);
    assert_eq!(
        waits(&mut conn).await,
        None,
        "the hint went out and the flag with it"
    );
}

#[tokio::test]
async fn a_rejoining_instance_starts_with_an_empty_bucket() {
    let Some(redis) = TestRedis::start() else {
        return;
    };
    let mut conn = connect(&redis).await;
    let host = "rejoin.test:80";
    let (kind, wait, ..) = reserve(&mut conn, host, T0, 4.0, 10, 100, true).await;
    assert_eq!((kind.as_str(), wait), ("go", 0));
    let (_, wait, ..) = reserve(&mut conn, host, T0, 4.0, 10, 100, false).await;
    assert_eq!(wait, 250_000, "one request, then the rate: no burst");
}

#[test]
fn hints_read_back_what_the_scripts_publish() {
    assert_eq!(
        Hint::parse("cool shop.test:443 3000 status:429"),
        Some(Hint::Cool(
            "shop.test:443".into(),
            Duration::from_secs(3),
            CooldownCause::Status(429)
        ))
    );
    assert_eq!(
        Hint::parse("free [::1]:80"),
        Some(Hint::Free("[::1]:80".into(), None))
    );
    assert_eq!(
        Hint::parse("free a.test:80 0123abcd"),
        Some(Hint::Free("a.test:80".into(), Some("0123abcd".into())))
    );
    assert_eq!(
        Hint::parse("rate a.test:80 2.5"),
        Some(Hint::Rate("a.test:80".into(), Some(2.5)))
    );
    assert_eq!(
        Hint::parse("rate a.test:80 -"),
        Some(Hint::Rate("a.test:80".into(), None))
    );
    assert_eq!(Hint::parse("rate a.test:80 NaN"), None);
    assert_eq!(Hint::parse("pause a.test:80"), None);
    assert_eq!(Hint::parse(""), None);
}

#[tokio::test]
async fn a_cap_taught_by_one_instance_paces_every_reservation() {
    let Some(redis) = TestRedis::start() else {
        return;
    };
    let mut conn = connect(&redis).await;
    let host = "cap.test:80";
    // One instance read Crawl-delay: 2 (0.5/s); its lesson carries the cap for an hour.
    let told = Told {
        now: T0,
        cooldown_us: 0,
        cause: "",
        rate: ("10", "10"),
        started: T0,
        cap: "0.5",
    };
    report(&mut conn, host, told).await;
    // Another instance, which knows no cap (it would go at 10/s), is paced at 0.5/s.
    let (_, first, ..) = reserve(&mut conn, host, T0 + 1, 10.0, 1, 10, false).await;
    let (_, second, ..) = reserve(&mut conn, host, T0 + 1, 10.0, 1, 10, false).await;
    assert_eq!((first, second), (0, 2_000_000));
    // An hour later the cap has run out.
    let later = T0 + 3_600_000_002;
    let (_, a, ..) = reserve(&mut conn, host, later, 10.0, 1, 10, false).await;
    let (_, b, ..) = reserve(&mut conn, host, later, 10.0, 1, 10, false).await;
    assert_eq!((a, b), (0, 100_000));
}

/// A reservation carries the turns of its host that ended: they are released first, atomically,
/// refunds included (the latest first), so a busy host needs no round trip per release.
#[tokio::test]
async fn a_reservation_releases_the_ended_turns_it_carries_first() {
    let Some(redis) = TestRedis::start() else {
        return;
    };
    let mut conn = connect(&redis).await;
    let host = "carry.test:80";
    // Concurrency 1: a second turn is busy while the first is in flight.
    let (kind, _, tat1, interval, _, first) = reserve(&mut conn, host, T0, 2.0, 1, 1, false).await;
    assert_eq!(kind, "go");
    let (kind, ..) = reserve(&mut conn, host, T0, 2.0, 1, 1, false).await;
    assert_eq!(kind, "busy");
    // The first turn never left (refund): carried by the next reservation, it frees the slot and
    // gives its token back, so the new turn is free at once.
    // No waiting list, no deadline.
    let shared = conn.clone();
    let carried = |now: i64, member: String, refund: &str, tat: &str| {
        let (refund, tat) = (refund == "1", tat.parse().unwrap_or(0));
        let mut conn = shared.clone();
        async move {
            let next = format!("next-{now}");
            let call = ReserveCall {
                mine: 2.0,
                configured_rate: 2.0,
                ended: vec![EndedTurn {
                    member: &member,
                    refund,
                    tat,
                    interval,
                }],
                ..reservation(host, &next, now)
            };
            run(&mut conn, &call).await
        }
    };
    let (kind, wait, ..) = fields(&carried(T0 + 10, first.clone(), "1", &tat1).await);
    assert_eq!(
        (kind.as_str(), wait),
        ("go", 0),
        "slot freed and token refunded"
    );
    // A turn that was sent gives no token back: carried, it frees the slot only.
    let (kind, wait, _, _, _, tat2, ..) =
        fields(&carried(T0 + 20, "nobody".into(), "0", "0").await);
    assert_eq!(
        kind, "busy",
        "the turn just reserved still holds the one slot"
    );
    assert!(wait > 0);
    assert_eq!(tat2, "");
    let (kind, wait, ..) = fields(&carried(T0 + 30, format!("next-{}", T0 + 10), "0", "0").await);
    assert_eq!(kind, "go");
    assert_eq!(
        wait,
        500_000 - 20,
        "one interval after the turn that took the refunded one's place, at T0 + 10"
    );
}

/// A reservation for several waiting requests reserves their turns in a row, each by the rule
/// for one (the GCRA spacing, the concurrency cap, the horizon), while they start within 2 ms.
#[tokio::test]
async fn one_call_reserves_several_turns_in_a_row_within_the_caps() {
    let Some(redis) = TestRedis::start() else {
        return;
    };
    let mut conn = connect(&redis).await;
    let shared = conn.clone();
    let many =
        |host: &'static str, now: i64, rate: &str, concurrency: u32, want: u32, horizon: i64| {
            let rate: f64 = rate.parse().unwrap();
            let mut conn = shared.clone();
            async move {
                let member = format!("m-{host}-{now}");
                let call = ReserveCall {
                    mine: rate,
                    configured_rate: rate,
                    concurrency,
                    horizon_us: horizon,
                    want,
                    ..reservation(host, &member, now)
                };
                run(&mut conn, &call).await
            }
        };
    // 1000/s, burst 1, room for 10: the turns within 2 ms of now (at 0, 1 and 2 ms), and the tat
    // past the third.
    let reply = many("many.test:80", T0, "1000", 10, 5, 10_000_000).await;
    let further = |reply: &ReserveReply| reserve_fields(reply).1.len();
    let (first, more, _) = reserve_fields(&reply);
    assert_eq!(more.len(), 2, "{reply:?}");
    assert_eq!(first.7, T0, "the first starts now");
    let starts: Vec<i64> = more.iter().map(|(_, start)| *start).collect();
    assert_eq!(starts, [T0 + 1_000, T0 + 2_000]);
    assert_eq!(
        more[1].0,
        (T0 + 3_000).to_string(),
        "the tat the third wrote"
    );
    // 2/s: turns half a second apart are not reserved ahead of time, one per call.
    let reply = many("slow.test:80", T0, "2", 10, 4, 10_000_000).await;
    assert_eq!(further(&reply), 0, "{reply:?}");
    let (_, wait, ..) = reserve(&mut conn, "slow.test:80", T0, 2.0, 1, 10, false).await;
    assert_eq!(
        wait, 500_000,
        "the next single reservation comes one interval later"
    );
    // Concurrency 2 stops at two turns; a horizon of 1.5 ms at two as well.
    let reply = many("cap.test:80", T0, "1000000", 2, 5, 10_000_000).await;
    assert_eq!(further(&reply), 1, "{reply:?}");
    let reply = many("near.test:80", T0, "1000", 10, 5, 1_500).await;
    assert_eq!(further(&reply), 1, "{reply:?}");
}

/// One reservation with every argument of an instance's (the waiting list, its age, a deadline):
/// `(kind, µs)`.
#[allow(clippy::too_many_arguments)]
async fn ask(
    conn: &mut MultiplexedConnection,
    host: &str,
    now: i64,
    rate: &str,
    concurrency: u32,
    who: &str,
    waited_us: i64,
    deadline: i64,
    ended: &[&str],
) -> (String, i64) {
    let rate: f64 = rate.parse().unwrap();
    let member = format!("{who}:{now}");
    // No allowance, no byte budget.
    let call = ReserveCall {
        mine: rate,
        configured_rate: rate,
        concurrency,
        horizon_us: 500_000,
        who,
        waited_us,
        deadline_us: deadline,
        ended: ended
            .iter()
            .map(|member| EndedTurn {
                member,
                refund: false,
                tat: 0,
                interval: 0,
            })
            .collect(),
        ..reservation(host, &member, now)
    };
    let reply = run(conn, &call).await;
    let (kind, micros, ..) = fields(&reply);
    (kind, micros)
}

/// A reservation the store runs after its deadline (the instance gave up on it) takes no slot
/// and no turn; the turns it carried are released all the same.
#[tokio::test]
async fn a_reservation_past_its_deadline_reserves_nothing() {
    let Some(redis) = TestRedis::start() else {
        return;
    };
    let mut conn = connect(&redis).await;
    let host = "late.test:80";
    let (kind, _) = ask(&mut conn, host, T0, "10", 1, "a", 0, T0 + 1_000, &[]).await;
    assert_eq!(kind, "go");
    let tat_before = redis.cli(&["HGET", &format!("t:{{{host}}}:b"), "tat"]);
    // The next call carries the first turn's end but runs 1 µs past its deadline.
    let member = format!("a:{T0}");
    let (kind, _) = ask(
        &mut conn,
        host,
        T0 + 200_000,
        "10",
        1,
        "a",
        0,
        T0 + 199_999,
        &[&member],
    )
    .await;
    assert_eq!(kind, "stale");
    assert_eq!(
        redis.cli(&["ZCARD", &format!("t:{{{host}}}:l")]),
        "0",
        "no lease taken, and the carried one released"
    );
    assert_eq!(
        redis.cli(&["HGET", &format!("t:{{{host}}}:b"), "tat"]),
        tat_before,
        "no turn taken"
    );
    // Without a deadline (0) the same call reserves.
    let (kind, _) = ask(&mut conn, host, T0 + 200_000, "10", 1, "a", 0, 0, &[]).await;
    assert_eq!(kind, "go");
}

/// What the store answers `who` asking for one turn of `host` (one slot, a rate too fast to
/// pace) at `now` for a request `waited_us` old, ending the turn `ended` if any.
async fn fair_ask(
    conn: &mut MultiplexedConnection,
    host: &str,
    (now, who, waited_us): (i64, &str, i64),
    ended: Option<&str>,
) -> String {
    let ended: Vec<&str> = ended.into_iter().collect();
    ask(conn, host, now, "1000000", 1, who, waited_us, 0, &ended)
        .await
        .0
}

/// With one slot, the instance that frees it and asks again at once comes after the instance
/// that has waited longer; an instance whose queue emptied gives its place up; a place whose
/// instance stopped asking is forgotten after its TTL.
#[tokio::test]
async fn a_freed_slot_goes_to_the_instance_that_waited_longest() {
    let Some(redis) = TestRedis::start() else {
        return;
    };
    let mut conn = connect(&redis).await;
    let host = "fair.test:80";
    the_longest_waiting_goes_first(&mut conn, host).await;
    a_place_is_withdrawn_or_runs_out(&mut conn, host).await;
}

/// a, b and c take turns of the one slot: the one whose request waited longest goes first,
/// never the one that freed it only because it asks again first.
async fn the_longest_waiting_goes_first(conn: &mut MultiplexedConnection, host: &str) {
    assert_eq!(fair_ask(conn, host, (T0, "a", 0), None).await, "go");
    // b's oldest request has waited 100 ms: every slot is taken, it is listed.
    let (kind, retry) = ask(conn, host, T0 + 1_000, "1000000", 1, "b", 100_000, 0, &[]).await;
    assert_eq!(kind, "busy");
    assert!(
        retry <= 500_000,
        "a listed instance renews its place: {retry}"
    );
    // a frees its slot and asks again for a request 10 ms old: b waited longer.
    let a_turn = format!("a:{T0}");
    let kind = fair_ask(conn, host, (T0 + 2_000, "a", 10_000), Some(&a_turn)).await;
    assert_eq!(kind, "behind");
    assert_eq!(
        fair_ask(conn, host, (T0 + 3_000, "b", 102_000), None).await,
        "go"
    );
    // b's turn ends; a (now the oldest listed) goes before c, whose request is younger.
    let b_turn = format!("b:{}", T0 + 3_000);
    let kind = fair_ask(conn, host, (T0 + 4_000, "c", 1_000), Some(&b_turn)).await;
    assert_eq!(kind, "behind", "c's request is younger than a's");
    assert_eq!(
        fair_ask(conn, host, (T0 + 5_000, "a", 13_000), None).await,
        "go"
    );
}

/// After [`the_longest_waiting_goes_first`]: c is listed; an instance whose queue empties
/// withdraws, and one that stops asking loses its place after the place's TTL.
async fn a_place_is_withdrawn_or_runs_out(conn: &mut MultiplexedConnection, host: &str) {
    // c is listed; when its queue empties it withdraws, and d goes without waiting for it.
    let a_turn = format!("a:{}", T0 + 5_000);
    assert_eq!(
        fair_ask(conn, host, (T0 + 6_000, "c", 50_000), Some(&a_turn)).await,
        "go"
    );
    let c_turn = format!("c:{}", T0 + 6_000);
    assert_eq!(
        fair_ask(conn, host, (T0 + 7_000, "e", 90_000), None).await,
        "busy"
    );
    let withdraw = WithdrawCall {
        prefix: "t",
        who: "e",
        channel: "t:hints",
        host,
    };
    run(conn, &withdraw).await;
    assert_eq!(
        fair_ask(conn, host, (T0 + 8_000, "d", 1_000), Some(&c_turn)).await,
        "go",
        "e withdrew"
    );
    // f is listed and then stops asking: after the place's TTL (2 s) g goes.
    let d_turn = format!("d:{}", T0 + 8_000);
    assert_eq!(
        fair_ask(conn, host, (T0 + 9_000, "f", 90_000), None).await,
        "busy"
    );
    assert_eq!(
        fair_ask(conn, host, (T0 + 10_000, "g", 1_000), Some(&d_turn)).await,
        "behind"
    );
    assert_eq!(
        fair_ask(conn, host, (T0 + 2_100_000, "g", 1_000), None).await,
        "go",
        "f's place ran out"
    );
}

/// A paced host's next turn goes to the instance whose request waited longest, even when a
/// younger one asks first.
#[tokio::test]
async fn a_paced_turn_goes_to_the_instance_that_waited_longest() {
    let Some(redis) = TestRedis::start() else {
        return;
    };
    let mut conn = connect(&redis).await;
    let host = "paced.test:80";
    // 1/s with a horizon of 0.5 s: a's turn now, b's next is a second away (later: listed).
    assert_eq!(
        ask(&mut conn, host, T0, "1", 10, "a", 0, 0, &[]).await.0,
        "go"
    );
    let (kind, retry) = ask(&mut conn, host, T0 + 10_000, "1", 10, "b", 300_000, 0, &[]).await;
    assert_eq!((kind.as_str(), retry), ("later", 490_000));
    // At the horizon a asks first, for a request 50 ms old: b waited longer.
    assert_eq!(
        ask(&mut conn, host, T0 + 600_000, "1", 10, "a", 50_000, 0, &[])
            .await
            .0,
        "behind"
    );
    let (kind, wait) = ask(&mut conn, host, T0 + 601_000, "1", 10, "b", 891_000, 0, &[]).await;
    assert_eq!((kind.as_str(), wait), ("go", 399_000));
}

/// Response bytes billed by any instance hold every instance's next turn until the byte debt is
/// paid (`BILL`, and the reservation's byte budget), the byte burst being credit.
#[tokio::test]
async fn billed_bytes_hold_the_next_turn_until_their_debt_is_paid() {
    let Some(redis) = TestRedis::start() else {
        return;
    };
    let mut conn = connect(&redis).await;
    let host = "bytes.test:80";
    let bill = |now: i64, bytes: u64| BillCall {
        prefix: "t",
        host,
        now: Some(now),
        bytes,
        byte_rate: 262_144,
        idle_ttl_us: 3_600_000_000,
    };
    let shared = conn.clone();
    let turn = |now: i64, burst: u64| {
        let mut conn = shared.clone();
        async move {
            let member = format!("m{now}-{burst}");
            let call = ReserveCall {
                mine: 100.0,
                configured_rate: 100.0,
                concurrency: 10,
                horizon_us: 1_000_000,
                want: 4,
                byte_rate: Some(262_144),
                byte_burst: Some(burst),
                ..reservation(host, &member, now)
            };
            run(&mut conn, &call).await
        }
    };
    // 1 MiB at 256 KiB/s: paid 4 s after it was billed.
    let bt: String = run(&mut conn, &bill(T0, 1 << 20))
        .await
        .paid_at_us
        .to_string();
    assert_eq!(bt, (T0 + 4_000_000).to_string());
    let (kind, wait, ..) = fields(&turn(T0 + 1, 0).await);
    assert_eq!(kind, "later", "4 s is beyond the 1 s horizon");
    assert_eq!(wait, 3_000_000 - 1);
    let reply = turn(T0 + 3_500_000, 0).await;
    let (kind, wait, ..) = fields(&reply);
    assert_eq!((kind.as_str(), wait), ("go", 500_000));
    assert!(
        reserve_fields(&reply).1.is_empty(),
        "one turn at a time: the next one's bytes are not known yet"
    );
    // With a byte burst of 256 KiB, a second of the debt is credit: the turn comes a second early.
    run(&mut conn, &bill(T0 + 4_000_000, 1 << 20)).await;
    let (kind, wait, ..) = fields(&turn(T0 + 4_000_000, 262_144).await);
    assert_eq!((kind.as_str(), wait), ("later", 2_000_000));
}
