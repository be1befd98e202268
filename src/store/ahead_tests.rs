//! Allowances (turns leased ahead, `scripts::RESERVE`) against a real `redis-server` on a free
//! loopback port, with an injected `now`: when one is granted, what settling it charges and gives
//! back, late copies, expiry, the `yield` hint, and the aggregate bound over a long random mix of
//! allowances spent late and turns reserved one at a time.

use redis::aio::MultiplexedConnection;

use super::calls::ReserveCall;
use super::tests::server::RedisServer as TestRedis;
use super::tests::{connect, reservation, reserve_fields, run};
use super::AheadAsk;

/// A Unix time in µs with all 16 digits in use, as `TIME` gives.
const T0: i64 = 1_764_590_000_123_456;

/// A host's limits as the instances send them.
#[derive(Clone, Copy)]
struct Limits {
    rate: f64,
    burst: u32,
    concurrency: u32,
    /// How long a lease (and an allowance without news) lasts, µs.
    lease: i64,
}

const ROOMY: Limits = Limits {
    rate: 1_000_000.0,
    burst: 1_000_000,
    concurrency: 1000,
    lease: 60_000_000,
};

/// One call of instance `who`: `(kind, µs, tat or tokens, interval or slots, start)`.
async fn call(
    conn: &mut MultiplexedConnection,
    host: &str,
    limits: Limits,
    now: i64,
    who: &str,
    ahead: &str,
    want: u32,
) -> (String, i64, String, i64, i64) {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let member = format!("{who}:{n}");
    // The allowance as `seq|spent|tokens wanted|slots wanted|slots in use`, `''`: none.
    let numbers: Vec<u64> = ahead.split('|').filter_map(|x| x.parse().ok()).collect();
    let ask = match numbers[..] {
        [seq, spent, tokens, slots, in_use] => Some(AheadAsk {
            seq,
            spent,
            want_tokens: tokens as u32,
            want_slots: slots as u32,
            in_use: in_use as u32,
        }),
        _ => None,
    };
    let call = ReserveCall {
        mine: limits.rate,
        configured_rate: limits.rate,
        burst: limits.burst,
        concurrency: limits.concurrency,
        lease_us: limits.lease,
        horizon_us: 1_000_000,
        want,
        who,
        ask,
        ..reservation(host, &member, now)
    };
    let reply = run(conn, &call).await;
    let ((kind, micros, _, _, _, tat, interval, start), ..) = reserve_fields(&reply);
    (kind, micros, tat, interval, start)
}

/// The budget hash's field `field`.
fn field(redis: &TestRedis, host: &str, field: &str) -> String {
    redis.cli(&["HGET", &format!("t:{{{host}}}:b"), field])
}

#[tokio::test]
async fn an_allowance_is_granted_only_with_room_to_spare_and_nobody_waiting() {
    let Some(redis) = TestRedis::start() else {
        return;
    };
    let mut conn = connect(&redis).await;
    let (kind, _, tokens, slots, _) =
        call(&mut conn, "roomy.test:80", ROOMY, T0, "a", "1|0|64|8|0", 1).await;
    assert_eq!((kind.as_str(), tokens.as_str(), slots), ("ahead", "64", 8));
    assert_eq!(field(&redis, "roomy.test:80", "ah"), "64");
    assert_eq!(field(&redis, "roomy.test:80", "as"), "8");
    assert_eq!(field(&redis, "roomy.test:80", "a:a"), "64|8|0|1");
    // A burst of 40 holds 20 to lease at most: 20 of the 64 wanted.
    let small = Limits { burst: 40, ..ROOMY };
    let (kind, _, tokens, ..) =
        call(&mut conn, "small.test:80", small, T0, "a", "1|0|64|8|0", 1).await;
    assert_eq!((kind.as_str(), tokens.as_str()), ("ahead", "20"));
    // A burst of 30 holds fewer than 16 to lease: a turn of its own instead.
    let tiny = Limits { burst: 30, ..ROOMY };
    let (kind, ..) = call(&mut conn, "tiny.test:80", tiny, T0, "a", "1|0|64|8|0", 1).await;
    assert_eq!(kind, "go");
    // 8 slots wanted of 12: not twice as many free.
    let tight = Limits {
        concurrency: 12,
        ..ROOMY
    };
    let (kind, ..) = call(&mut conn, "tight.test:80", tight, T0, "a", "1|0|64|8|0", 1).await;
    assert_eq!(kind, "go");
    // Someone waits for a slot (answered busy): no allowance until a release.
    let one = Limits {
        concurrency: 1,
        ..ROOMY
    };
    let host = "waited.test:80";
    assert_eq!(call(&mut conn, host, one, T0, "b", "", 1).await.0, "go");
    assert_eq!(call(&mut conn, host, one, T0, "c", "", 1).await.0, "busy");
    let wide = Limits {
        concurrency: 100,
        ..ROOMY
    };
    let (kind, ..) = call(&mut conn, host, wide, T0 + 1, "a", "1|0|64|8|0", 1).await;
    assert_eq!(kind, "go", "c is listed and waits");
}

#[tokio::test]
async fn settling_charges_what_was_spent_and_gives_the_rest_back() {
    let Some(redis) = TestRedis::start() else {
        return;
    };
    let mut conn = connect(&redis).await;
    let host = "settle.test:80";
    let limits = Limits {
        rate: 100.0,
        burst: 200,
        ..ROOMY
    };
    let (kind, _, tokens, ..) = call(&mut conn, host, limits, T0, "a", "1|0|64|8|0", 1).await;
    assert_eq!((kind.as_str(), tokens.as_str()), ("ahead", "64"));
    // While a holds 64, another caller's bucket is 200 - 64 deep: 136 back to back, then paced.
    for i in 0..136 {
        let (kind, wait, ..) = call(&mut conn, host, limits, T0 + 1, "b", "", 1).await;
        assert_eq!((kind.as_str(), wait), ("go", 0), "turn {i}");
    }
    let (kind, wait, ..) = call(&mut conn, host, limits, T0 + 1, "b", "", 1).await;
    assert_eq!((kind.as_str(), wait), ("go", 10_000), "one interval later");
    // a spent 10 and has 3 in flight: the 10 are charged now, 54 given back, 3 slots kept.
    let tat = field(&redis, host, "tat").parse::<i64>().unwrap();
    let (kind, ..) = call(&mut conn, host, limits, T0 + 2, "a", "2|10|0|0|3", 0).await;
    assert_eq!(kind, "settled");
    assert_eq!(field(&redis, host, "ah"), "0");
    assert_eq!(field(&redis, host, "as"), "3");
    assert_eq!(field(&redis, host, "a:a"), "0|3|10|2");
    assert_eq!(
        field(&redis, host, "tat").parse::<i64>().unwrap(),
        tat + 10 * 10_000,
        "ten turns charged"
    );
    // A late copy of an older call changes nothing.
    let (kind, ..) = call(&mut conn, host, limits, T0 + 3, "a", "1|0|64|8|0", 1).await;
    assert_ne!(kind, "ahead", "a late copy grants nothing");
    assert_eq!(field(&redis, host, "a:a"), "0|3|10|2");
    assert_eq!(field(&redis, host, "as"), "3");
    // The last slots come free.
    call(&mut conn, host, limits, T0 + 4, "a", "3|10|0|0|0", 0).await;
    assert_eq!(field(&redis, host, "as"), "0");
}

#[tokio::test]
async fn an_allowance_nobody_settles_runs_out_and_counts_as_spent() {
    let Some(redis) = TestRedis::start() else {
        return;
    };
    let mut conn = connect(&redis).await;
    let host = "gone.test:80";
    let limits = Limits {
        rate: 100.0,
        burst: 200,
        lease: 1_000_000,
        ..ROOMY
    };
    let (kind, ..) = call(&mut conn, host, limits, T0, "a", "1|0|50|8|0", 1).await;
    assert_eq!(kind, "ahead");
    // After its lease, the next caller finds it gone: its 50 tokens charged, its slots freed.
    let (kind, wait, ..) = call(&mut conn, host, limits, T0 + 1_000_001, "b", "", 1).await;
    assert_eq!(kind, "go");
    assert_eq!(field(&redis, host, "ah"), "0");
    assert_eq!(field(&redis, host, "as"), "0");
    assert_eq!(field(&redis, host, "a:a"), "");
    // Charged from its expiry: the bucket (200 deep) owes 50 + this turn.
    let tat = field(&redis, host, "tat").parse::<i64>().unwrap();
    assert_eq!(tat, T0 + 1_000_001 + 51 * 10_000);
    assert_eq!(wait, 0);
}

#[tokio::test]
async fn a_caller_refused_while_others_hold_allowances_asks_them_to_yield() {
    let Some(redis) = TestRedis::start() else {
        return;
    };
    let mut conn = connect(&redis).await;
    let mut pubsub = redis::Client::open(redis.url().as_str())
        .unwrap()
        .get_async_pubsub()
        .await
        .unwrap();
    pubsub.subscribe("t:hints").await.unwrap();
    let host = "yield.test:80";
    let limits = Limits {
        concurrency: 16,
        ..ROOMY
    };
    let (kind, _, _, slots, _) = call(&mut conn, host, limits, T0, "a", "1|0|64|8|0", 1).await;
    assert_eq!((kind.as_str(), slots), ("ahead", 8));
    for _ in 0..8 {
        assert_eq!(call(&mut conn, host, limits, T0, "b", "", 1).await.0, "go");
    }
    assert_eq!(
        call(&mut conn, host, limits, T0, "b", "", 1).await.0,
        "busy"
    );
    let mut messages = futures_util::StreamExt::boxed(pubsub.on_message());
    let message = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        futures_util::StreamExt::next(&mut messages),
    )
    .await
    .unwrap()
    .unwrap();
    let text: String = message.get_payload().unwrap();
    assert_eq!(text, format!("yield {host} b"));
    assert_eq!(
        super::Hint::parse(&text),
        Some(super::Hint::Yield(host.into(), "b".into()))
    );
}

/// A small deterministic generator, so that a failing mix can be run again.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, below: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % below
    }
}

/// An instance that spends allowances, at its own pace: whenever it likes within the span,
/// often late.
struct Holder {
    name: &'static str,
    tokens: u32,
    spent: u64,
    seq: u64,
    granted_at: i64,
    /// Spends only after this (late spending), µs.
    spend_from: i64,
    /// Stopped calling (as if it crashed) from this time on.
    gone_at: i64,
}

/// Over a long random mix of three instances (two spending allowances, at random and often at
/// the end of their span, one of them going silent with tokens left; one reserving single turns
/// as fast as the store gives them), the site's arrivals stay within `burst + rate × T` in every
/// window.
#[tokio::test]
async fn allowances_spent_late_keep_every_window_within_the_budget() {
    let Some(redis) = TestRedis::start() else {
        return;
    };
    let mut conn = connect(&redis).await;
    for seed in [7, 11, 23, 42] {
        mix(&redis, &mut conn, seed, &format!("mix{seed}.test:80")).await;
    }
}

impl Holder {
    /// An instance named `name` with no allowance yet, going silent at `gone_at`.
    fn new(name: &'static str, gone_at: i64) -> Self {
        Holder {
            name,
            tokens: 0,
            spent: 0,
            seq: 0,
            granted_at: 0,
            spend_from: 0,
            gone_at,
        }
    }

    /// One moment of the mix at `now` for this instance: it spends a token of its allowance
    /// (a send), or with none left or its span over now and then asks for a new one. `true`
    /// when it was granted one.
    async fn step(
        &mut self,
        (conn, host, limits): (&mut MultiplexedConnection, &str, Limits),
        now: i64,
        rng: &mut Lcg,
        sends: &mut Vec<i64>,
    ) -> bool {
        if now >= self.gone_at {
            return false;
        }
        let span_over = now - self.granted_at > 250_000;
        if self.tokens > 0 && !span_over && now >= self.spend_from && rng.next(3) == 0 {
            self.tokens -= 1;
            self.spent += 1;
            sends.push(now);
            return false;
        }
        if !((self.tokens == 0 || span_over) && rng.next(40) == 0) {
            return false;
        }
        self.seq += 1;
        let ahead = format!("{}|{}|{}|8|0", self.seq, self.spent, 16 + rng.next(32));
        let (kind, wait, tokens, _, _) = call(conn, host, limits, now, self.name, &ahead, 1).await;
        self.tokens = 0;
        match kind.as_str() {
            "ahead" => {
                self.tokens = tokens.parse().unwrap();
                self.granted_at = now;
                // Half the time, everything is spent at the very end of the span.
                self.spend_from = if rng.next(2) == 0 { now } else { now + 240_000 };
                return true;
            }
            "go" => sends.push(now + wait),
            _ => {}
        }
        false
    }
}

/// b takes everything the bucket holds at once: turns until one is not at once.
async fn b_takes_all(
    (conn, host, limits): (&mut MultiplexedConnection, &str, Limits),
    now: i64,
    sends: &mut Vec<i64>,
) {
    loop {
        let (kind, wait, ..) = call(conn, host, limits, now, "b", "", 1).await;
        if kind != "go" {
            break;
        }
        sends.push(now + wait);
        if wait > 0 {
            break;
        }
    }
}

/// One random mix (see above) from `seed`, on `host`.
async fn mix(redis: &TestRedis, conn: &mut MultiplexedConnection, seed: u64, host: &str) {
    let _ = redis;
    let limits = Limits {
        rate: 200.0,
        burst: 60,
        concurrency: 1000,
        lease: 400_000,
    };
    let mut rng = Lcg(seed);
    let mut holders = [Holder::new("a", i64::MAX), Holder::new("c", T0 + 2_500_000)];
    let mut sends: Vec<i64> = Vec::new();
    let mut b_next = T0;
    let mut now = T0;
    let end = T0 + 6_000_000;
    let mut grants = 0;
    while now < end {
        now += rng.next(3_000) as i64;
        for holder in holders.iter_mut() {
            if holder
                .step((conn, host, limits), now, &mut rng, &mut sends)
                .await
            {
                grants += 1;
            }
        }
        // Now and then b takes everything the bucket holds at once.
        if rng.next(150) == 0 {
            b_takes_all((conn, host, limits), now, &mut sends).await;
        }
        // b comes now and then, and takes a turn.
        if now >= b_next && rng.next(8) == 0 {
            let (kind, wait, ..) = call(conn, host, limits, now, "b", "", 1).await;
            if kind == "go" {
                sends.push(now + wait);
                b_next = now + wait;
            } else {
                b_next = now + wait.max(1);
            }
        }
    }
    assert!(
        grants >= 5,
        "seed {seed}: the mix had allowances in it: {grants}"
    );
    within_the_budget(seed, &mut sends, limits, end);
}

/// Every window of the arrivals `sends` holds at most `burst + rate × T`, and the budget was
/// used (most of `rate × T` over the run that ended at `end`).
fn within_the_budget(seed: u64, sends: &mut [i64], limits: Limits, end: i64) {
    sends.sort_unstable();
    let (rate, burst) = (limits.rate, f64::from(limits.burst));
    for i in 0..sends.len() {
        for j in i..sends.len() {
            let window = (sends[j] - sends[i]) as f64 / 1e6;
            if window > 2.0 {
                break;
            }
            let count = (j - i + 1) as f64;
            assert!(
                count <= burst + rate * window + 1e-9,
                "seed {seed}: {count} arrivals in {window} s (from {} µs): more than {burst} + {rate} × T",
                sends[i] - T0
            );
        }
    }
    // The budget was used, not only kept: most of rate × T over the run.
    let used = sends.iter().filter(|&&t| t < end).count() as f64;
    assert!(
        used >= 0.6 * rate * 6.0,
        "seed {seed}: {used} arrivals in 6 s at {rate}/s"
    );
}
