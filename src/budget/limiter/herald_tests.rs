//! The herald: what is told when the state meets what was told (pure), and the ends told on
//! time by the timer (tokio's paused clock).

use std::sync::Mutex;
use std::time::Duration;

use std::sync::Arc;
use std::time::SystemTime;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::herald::{changes, Closed, Herald, Look, Record};
use super::tests::limiter_with;
use super::{EventKind, HostEvent, Limiter, OperatorAction, PausedBy, Permit, ResumedBy, Source};
use crate::config::HostPolicy;
use crate::pacing::feedback::Feedback;
use crate::pacing::policy::Answer;
use crate::pacing::policy::{Cooldown, CooldownCause};

fn cooldown(started: Instant, until: Instant, cause: CooldownCause) -> Option<Cooldown> {
    Some(Cooldown {
        started,
        until,
        cause,
    })
}

fn kinds(events: &[(EventKind, Source)]) -> Vec<&'static str> {
    events
        .iter()
        .map(|(kind, _)| match kind {
            EventKind::CooldownStarted {
                extended: false, ..
            } => "cooldown_started",
            EventKind::CooldownStarted { extended: true, .. } => "cooldown_extended",
            EventKind::CooldownEnded { .. } => "cooldown_ended",
            EventKind::Paused {
                by: PausedBy::Operator,
                ..
            } => "paused_operator",
            EventKind::Paused {
                by: PausedBy::Block,
                ..
            } => "paused_block",
            EventKind::Resumed {
                by: ResumedBy::Operator,
            } => "resumed_operator",
            EventKind::Resumed {
                by: ResumedBy::Expired,
            } => "resumed_expired",
            _ => "other",
        })
        .collect()
}

#[test]
fn a_cooldown_is_told_when_it_starts_grows_a_second_and_ends() {
    let now = Instant::now();
    let wall = SystemTime::now();
    let why = (Look::Change, Source::Local);
    let mut record = Record::default();
    let status = CooldownCause::Status(429);
    let live = Closed {
        cooldown: cooldown(now, now + Duration::from_secs(3), status),
        operator: None,
        ..Closed::default()
    };
    let told = changes(&mut record, live, why, (now, wall));
    assert_eq!(kinds(&told), ["cooldown_started"]);
    let EventKind::CooldownStarted { until, .. } = &told[0].0 else {
        panic!("{told:?}")
    };
    assert_eq!(*until, wall + Duration::from_secs(3));
    // The same state again, or grown by less than a second: nothing new.
    assert!(changes(&mut record, live, why, (now, wall)).is_empty());
    let grown = Closed {
        cooldown: cooldown(now, now + Duration::from_millis(3900), status),
        operator: None,
        ..Closed::default()
    };
    assert!(changes(&mut record, grown, why, (now, wall)).is_empty());
    let longer = Closed {
        cooldown: cooldown(now, now + Duration::from_secs(5), status),
        operator: None,
        ..Closed::default()
    };
    let told = changes(&mut record, longer, why, (now, wall));
    assert_eq!(kinds(&told), ["cooldown_extended"]);
    assert_eq!(longer.end(), Some(now + Duration::from_secs(5)));
    let later = now + Duration::from_secs(5);
    let ended = changes(
        &mut record,
        Closed::default(),
        (Look::Timer, Source::Local),
        (later, wall),
    );
    assert_eq!(kinds(&ended), ["cooldown_ended"]);
    assert!(record.is_empty());
}

#[test]
fn a_new_cooldown_after_an_untold_end_is_an_end_then_a_start() {
    let now = Instant::now();
    let wall = SystemTime::now();
    let why = (Look::Change, Source::Local);
    let mut record = Record::default();
    let first = Closed {
        cooldown: cooldown(now, now + Duration::from_secs(1), CooldownCause::Failure),
        operator: None,
        ..Closed::default()
    };
    changes(&mut record, first, why, (now, wall));
    let then = now + Duration::from_secs(2);
    let second = Closed {
        cooldown: cooldown(then, then + Duration::from_secs(1), CooldownCause::Failure),
        operator: None,
        ..Closed::default()
    };
    let told = changes(&mut record, second, why, (then, wall));
    assert_eq!(kinds(&told), ["cooldown_ended", "cooldown_started"]);
}

#[test]
fn a_block_is_a_cooldown_and_a_pause_and_an_operator_lifts_both() {
    let now = Instant::now();
    let wall = SystemTime::now();
    let mut record = Record::default();
    let blocked = Closed {
        cooldown: cooldown(now, now + Duration::from_secs(60), CooldownCause::SoftBlock),
        operator: None,
        ..Closed::default()
    };
    let told = changes(
        &mut record,
        blocked,
        (Look::Change, Source::Local),
        (now, wall),
    );
    assert_eq!(kinds(&told), ["cooldown_started", "paused_block"]);
    let lifted = changes(
        &mut record,
        Closed::default(),
        (Look::Operator, Source::Local),
        (now, wall),
    );
    assert_eq!(kinds(&lifted), ["cooldown_ended", "resumed_operator"]);
}

#[test]
fn an_operator_pause_is_told_set_again_and_run_out() {
    let now = Instant::now();
    let wall = SystemTime::now();
    let mut record = Record::default();
    let why = (Look::Operator, Source::Shared);
    let paused = Closed {
        cooldown: None,
        operator: Some(now + Duration::from_secs(30)),
        ..Closed::default()
    };
    let told = changes(&mut record, paused, why, (now, wall));
    assert_eq!(kinds(&told), ["paused_operator"]);
    assert_eq!(told[0].1, Source::Shared);
    assert!(changes(&mut record, paused, why, (now, wall)).is_empty());
    let again = Closed {
        cooldown: None,
        operator: Some(now + Duration::from_secs(10)),
        ..Closed::default()
    };
    assert_eq!(
        kinds(&changes(&mut record, again, why, (now, wall))),
        ["paused_operator"]
    );
    let later = now + Duration::from_secs(10);
    let told = changes(
        &mut record,
        Closed::default(),
        (Look::Timer, Source::Local),
        (later, wall),
    );
    assert_eq!(kinds(&told), ["resumed_expired"]);
    // The end is told as learned: the pause came from another instance.
    assert_eq!(told[0].1, Source::Shared);
}

/// The events told, with when.
type Heard = Mutex<Vec<(Instant, HostEvent)>>;

/// A limiter whose told events are kept, with its end timer running.
fn heard(policy: HostPolicy) -> (Arc<Limiter>, Arc<Heard>, CancellationToken) {
    let limiter = limiter_with(policy, 1000);
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = events.clone();
    limiter
        .herald()
        .listen(move |e| sink.lock().expect("events").push((Instant::now(), e)));
    let stop = CancellationToken::new();
    tokio::spawn(limiter.clone().announce_ends(stop.clone()));
    (limiter, events, stop)
}

fn throttled(permit: &Permit, retry_after: Duration) {
    permit.report(&Answer {
        feedback: Feedback::Throttled,
        status: Some(429),
        latency: Duration::ZERO,
        retry_after: Some(retry_after),
        server: None,
    });
}

/// The cooldowns and pauses told so far (a 429's rate cut, `rate_changed`, left out).
fn names(events: &Heard) -> Vec<&'static str> {
    let events = events.lock().expect("events");
    let told: Vec<(EventKind, Source)> = events
        .iter()
        .map(|(_, e)| (e.kind.clone(), e.source))
        .collect();
    kinds(&told).into_iter().filter(|k| *k != "other").collect()
}

/// When each cooldown or pause event was told.
fn closing(events: &Heard) -> Vec<Instant> {
    let events = events.lock().expect("events");
    events
        .iter()
        .filter(|(_, e)| !matches!(e.kind, EventKind::RateChanged { .. }))
        .map(|(at, _)| *at)
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_cooldown_ends_on_time_and_a_grown_one_later() {
    let mut policy = HostPolicy::default();
    policy.adaptive.enabled = false;
    let (limiter, events, stop) = heard(policy);
    let start = Instant::now();
    let mut permit = limiter.admit(("cool.test", 80)).await.expect("a turn");
    permit.mark_sent();
    throttled(&permit, Duration::from_secs(3));
    assert_eq!(names(&events), ["cooldown_started"]);
    tokio::time::sleep(Duration::from_secs(2)).await;
    // Grown by 2 s before it ends: told again, and its end waits for the new one.
    throttled(&permit, Duration::from_secs(3));
    drop(permit);
    assert_eq!(names(&events), ["cooldown_started", "cooldown_extended"]);
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(
        names(&events),
        ["cooldown_started", "cooldown_extended", "cooldown_ended"]
    );
    let ended_at = closing(&events)[2];
    assert_eq!(ended_at - start, Duration::from_secs(5));
    assert_eq!(limiter.herald().pending().0, 0, "nothing left told");
    stop.cancel();
}

#[tokio::test(start_paused = true)]
async fn an_operator_pause_is_told_and_its_resume_by_whom() {
    let (limiter, events, stop) = heard(HostPolicy::default());
    let start = Instant::now();
    limiter
        .operate("op.test", 80, OperatorAction::Pause(Duration::from_secs(4)))
        .expect("paused");
    limiter
        .operate("op.test", 80, OperatorAction::Resume)
        .expect("resumed");
    limiter
        .operate("op.test", 80, OperatorAction::Pause(Duration::from_secs(2)))
        .expect("paused");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        names(&events),
        [
            "paused_operator",
            "resumed_operator",
            "paused_operator",
            "resumed_expired"
        ]
    );
    let expired_at = closing(&events)[3];
    assert_eq!(expired_at - start, Duration::from_secs(2));
    stop.cancel();
}

#[tokio::test(start_paused = true)]
async fn queue_full_is_told_at_most_once_a_second_a_host() {
    let herald = Herald::default();
    let told = Arc::new(Mutex::new(0));
    let count = told.clone();
    herald.listen(move |_| *count.lock().expect("count") += 1);
    let host: Arc<str> = Arc::from("full.test:80");
    let start = Instant::now();
    for i in 0..100 {
        herald.queue_full(&host, 8, start + Duration::from_millis(i * 25));
    }
    // 0 s, 1 s, 2 s of a 2.5 s flood.
    assert_eq!(*told.lock().expect("count"), 3);
}

#[tokio::test(start_paused = true)]
async fn a_healthy_host_costs_the_herald_nothing() {
    let (limiter, events, stop) = heard(HostPolicy::default());
    for _ in 0..10 {
        let mut permit = limiter.admit(("ok.test", 80)).await.expect("a turn");
        permit.mark_sent();
        permit.report(&Answer {
            feedback: Feedback::Success,
            status: Some(200),
            latency: Duration::from_millis(5),
            retry_after: None,
            server: None,
        });
    }
    assert!(names(&events).is_empty());
    assert_eq!(limiter.herald().pending(), (0, 0));
    stop.cancel();
}

#[tokio::test(start_paused = true)]
async fn a_cooldown_grown_by_less_than_a_second_ends_when_it_really_ends() {
    let mut policy = HostPolicy::default();
    policy.adaptive.enabled = false;
    let (limiter, events, stop) = heard(policy);
    let start = Instant::now();
    let mut permit = limiter.admit(("grown.test", 80)).await.expect("a turn");
    permit.mark_sent();
    throttled(&permit, Duration::from_secs(3));
    tokio::time::sleep(Duration::from_millis(2500)).await;
    // Half a second more: not told again, but the end is the new one.
    throttled(&permit, Duration::from_secs(1));
    drop(permit);
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(names(&events), ["cooldown_started", "cooldown_ended"]);
    let ended_at = closing(&events)[1];
    assert_eq!(ended_at - start, Duration::from_millis(3500));
    stop.cancel();
}

#[test]
fn the_rate_is_told_when_it_crosses_a_step_of_ten_percent() {
    use super::herald::rate_step;
    assert_eq!(rate_step(1.0), rate_step(1.05));
    assert_ne!(rate_step(1.0), rate_step(1.12));
    assert_ne!(rate_step(1.0), rate_step(0.95));
    assert_eq!(rate_step(100.0), rate_step(101.0));
    assert_eq!(rate_step(0.0), i64::MIN);
}

#[tokio::test(start_paused = true)]
async fn a_429_cut_is_told_as_backoff() {
    let (limiter, events, stop) = heard(HostPolicy::default());
    let mut permit = limiter.admit(("cut.test", 80)).await.expect("a turn");
    permit.mark_sent();
    throttled(&permit, Duration::from_secs(1));
    let told = events.lock().expect("events").clone();
    let cut = told
        .iter()
        .find_map(|(_, e)| match e.kind {
            EventKind::RateChanged { old, new, why } => Some((old, new, why)),
            _ => None,
        })
        .expect("rate_changed");
    assert!(cut.1 < cut.0, "{cut:?}");
    assert_eq!(cut.2, super::RateWhy::Backoff);
    stop.cancel();
}

#[tokio::test(start_paused = true)]
async fn a_cooldown_grown_again_and_again_keeps_one_timer() {
    let mut policy = HostPolicy::default();
    policy.adaptive.enabled = false;
    let (limiter, events, stop) = heard(policy);
    let mut permit = limiter.admit(("often.test", 80)).await.expect("a turn");
    permit.mark_sent();
    for _ in 0..100 {
        throttled(&permit, Duration::from_secs(3));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drop(permit);
    assert_eq!(
        limiter.herald().pending(),
        (1, 1),
        "one record, one end set"
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(names(&events), ["cooldown_started", "cooldown_ended"]);
    assert_eq!(limiter.herald().pending(), (0, 0));
    stop.cancel();
}

#[test]
fn visit_time_hours_are_a_cooldown_of_their_own() {
    let now = Instant::now();
    let wall = SystemTime::now();
    let why = (Look::Timer, Source::Local);
    let mut record = Record::default();
    let inside = Closed {
        visit_closes: Some(now + Duration::from_secs(60)),
        ..Closed::default()
    };
    assert!(changes(&mut record, inside, why, (now, wall)).is_empty());
    let outside = Closed {
        visit: Some(now + Duration::from_secs(3600)),
        ..Closed::default()
    };
    let told = changes(&mut record, outside, why, (now, wall));
    assert!(matches!(
        told[..],
        [(
            EventKind::CooldownStarted {
                cause: CooldownCause::VisitTime,
                ..
            },
            Source::Local
        )]
    ));
    let told = changes(&mut record, inside, why, (now, wall));
    assert!(matches!(
        told[..],
        [(
            EventKind::CooldownEnded {
                cause: CooldownCause::VisitTime
            },
            _
        )]
    ));
}

#[tokio::test(start_paused = true)]
async fn visit_time_hours_close_and_open_the_host_on_time() {
    use crate::pacing::robots_pacing::VisitWindow;
    let (limiter, events, stop) = heard(HostPolicy::default());
    // A one-minute window two minutes from now (UTC): outside it now.
    let minute = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs()
        / 60
        % 1440;
    let at = |m: u64| format!("{:02}{:02}", (m % 1440) / 60, m % 60);
    let text = format!("{}-{}", at(minute + 2), at(minute + 3));
    let window = VisitWindow::parse(&text).expect("a window");
    let key = crate::budget::keys::BudgetKey::of_host("visit.test", 80);
    let start = Instant::now();
    limiter.set_robots_pacing_for(&key, None, Some(window));
    assert_eq!(names(&events), ["cooldown_started"]);
    tokio::time::sleep(Duration::from_secs(240)).await;
    let kinds: Vec<String> = events
        .lock()
        .expect("events")
        .iter()
        .map(|(_, e)| match &e.kind {
            EventKind::CooldownStarted { cause, .. } => format!("started {}", cause.word()),
            EventKind::CooldownEnded { cause } => format!("ended {}", cause.word()),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "started visit_time",
            "ended visit_time",
            "started visit_time"
        ]
    );
    let times = closing(&events);
    let open = times[1] - start;
    let closed = times[2] - times[1];
    assert!(
        open > Duration::from_secs(60) && open <= Duration::from_secs(120),
        "{open:?}"
    );
    assert_eq!(closed, Duration::from_secs(60));
    stop.cancel();
}
