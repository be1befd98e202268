//! The hub's numbering, replay, filters and bounds, and the stream's keep-alive on tokio's paused
//! clock.

use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, SystemTime};

use super::*;
use crate::budget::limiter::{EventKind, HostEvent, Source};

fn event(host: &str, max_queue: usize) -> HostEvent {
    HostEvent {
        host: Arc::from(host),
        source: Source::Local,
        at: SystemTime::now(),
        kind: EventKind::QueueFull { max_queue },
    }
}

/// The ids in a chunk of frames, in order (`missed` included).
fn ids(chunk: &[u8]) -> Vec<u64> {
    String::from_utf8_lossy(chunk)
        .lines()
        .filter_map(|l| l.strip_prefix("id: "))
        .filter_map(|id| id.parse().ok())
        .collect()
}

/// The event types in a chunk of frames.
fn types(chunk: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(chunk)
        .lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .map(str::to_string)
        .collect()
}

/// What the subscription has now, all of it.
fn drain(sub: &mut Subscription) -> Vec<u8> {
    let mut out = Vec::new();
    while let Next::Frames(chunk) = sub.next(Waker::noop()) {
        out.extend_from_slice(&chunk);
    }
    out
}

#[test]
fn ids_start_at_one_and_grow_by_one() {
    let hub = Arc::new(Hub::default());
    let mut sub = hub.subscribe(Filter::All, None).expect("room");
    for _ in 0..3 {
        hub.publish(&event("a.test:80", 1));
    }
    assert_eq!(ids(&drain(&mut sub)), [1, 2, 3]);
    assert_eq!(hub.stats().published, 3);
}

#[test]
fn a_reconnect_gets_what_it_missed_from_the_buffer() {
    let hub = Arc::new(Hub::default());
    for _ in 0..5 {
        hub.publish(&event("a.test:80", 1));
    }
    let mut sub = hub.subscribe(Filter::All, Some(2)).expect("room");
    hub.publish(&event("a.test:80", 1));
    let chunk = drain(&mut sub);
    assert_eq!(ids(&chunk), [3, 4, 5, 6]);
    assert!(!types(&chunk).contains(&"missed".to_string()));
    // Up to date: nothing replayed, and no `missed`.
    let mut current = hub.subscribe(Filter::All, Some(6)).expect("room");
    assert!(drain(&mut current).is_empty());
}

#[test]
fn a_reconnect_older_than_the_buffer_hears_missed_first() {
    let hub = Arc::new(Hub::default());
    for _ in 0..BUFFERED + 10 {
        hub.publish(&event("a.test:80", 1));
    }
    let mut sub = hub.subscribe(Filter::All, Some(3)).expect("room");
    let chunk = drain(&mut sub);
    let kinds = types(&chunk);
    assert_eq!(kinds[0], "missed");
    assert_eq!(kinds.len(), BUFFERED + 1);
    let ids = ids(&chunk);
    // `missed` is numbered just before the oldest kept, then the buffer follows in order.
    assert_eq!(ids[0], 10);
    assert_eq!(ids[1], 11);
    assert_eq!(*ids.last().expect("some"), (BUFFERED + 10) as u64);
    let text = String::from_utf8_lossy(&chunk).to_string();
    assert!(text.contains("\"last_event_id\":3"), "{text}");
    assert!(text.contains("\"oldest_id\":11"), "{text}");
}

#[test]
fn an_id_from_another_run_hears_missed_and_the_whole_buffer() {
    let hub = Arc::new(Hub::default());
    hub.publish(&event("a.test:80", 1));
    hub.publish(&event("a.test:80", 1));
    let mut sub = hub.subscribe(Filter::All, Some(900)).expect("room");
    let chunk = drain(&mut sub);
    assert_eq!(types(&chunk), ["missed", "queue_full", "queue_full"]);
    assert_eq!(ids(&chunk), [0, 1, 2]);
}

#[test]
fn filters_pass_a_key_or_every_port_of_a_name() {
    let hub = Arc::new(Hub::default());
    let mut key = hub
        .subscribe(Filter::Key("a.test:443".into()), None)
        .expect("room");
    let mut name = hub
        .subscribe(Filter::Name("a.test".into()), None)
        .expect("room");
    let mut v6 = hub
        .subscribe(Filter::Name("::1".into()), None)
        .expect("room");
    for host in [
        "a.test:443",
        "a.test:80",
        "b.test:443",
        "[::1]:80",
        "aa.test:443",
    ] {
        hub.publish(&event(host, 1));
    }
    assert_eq!(ids(&drain(&mut key)), [1]);
    assert_eq!(ids(&drain(&mut name)), [1, 2]);
    assert_eq!(ids(&drain(&mut v6)), [4]);
    // Replay is filtered too.
    let mut again = hub
        .subscribe(Filter::Key("b.test:443".into()), Some(0))
        .expect("room");
    assert_eq!(ids(&drain(&mut again)), [3]);
}

#[test]
fn a_slow_subscriber_is_dropped_and_its_queue_freed_while_others_keep_receiving() {
    let hub = Arc::new(Hub::default());
    let mut slow = hub.subscribe(Filter::All, None).expect("room");
    let mut reader = hub.subscribe(Filter::All, None).expect("room");
    let mut read = Vec::new();
    for i in 0..QUEUE_EVENTS * 4 {
        hub.publish(&event("a.test:80", i));
        read.extend(ids(&drain(&mut reader)));
        let stats = hub.stats();
        // Never more waiting than one full queue (the reader's is emptied each time).
        assert!(stats.queued_bytes <= QUEUE_BYTES, "{stats:?}");
    }
    assert_eq!(read.len(), QUEUE_EVENTS * 4, "the reader heard every event");
    let stats = hub.stats();
    assert_eq!(stats.subscribers, 1, "{stats:?}");
    assert_eq!(stats.dropped, 1);
    assert_eq!(stats.queued_bytes, 0);
    // The slow one's stream ends; what it had queued is gone.
    assert_eq!(slow.next(Waker::noop()), Next::End);
}

#[test]
fn queues_are_bounded_in_bytes_too() {
    let hub = Arc::new(Hub::default());
    let _slow = hub.subscribe(Filter::All, None).expect("room");
    let long = "h".repeat(250);
    for _ in 0..QUEUE_EVENTS {
        hub.publish(&event(&format!("{long}.test:80"), 1));
        assert!(hub.stats().queued_bytes <= QUEUE_BYTES);
    }
    assert_eq!(hub.stats().subscribers, 0, "dropped on the byte bound");
}

#[test]
fn the_buffer_keeps_the_last_events_only() {
    let hub = Arc::new(Hub::default());
    for _ in 0..BUFFERED * 3 {
        hub.publish(&event("a.test:80", 1));
    }
    let stats = hub.stats();
    assert_eq!(stats.buffered, BUFFERED);
    assert!(stats.buffered_bytes < BUFFERED * 400, "{stats:?}");
}

#[test]
fn subscribers_are_bounded_and_a_dropped_stream_frees_its_place() {
    let hub = Arc::new(Hub::default());
    let mut subs: Vec<Subscription> = (0..MAX_SUBSCRIBERS)
        .map(|_| hub.subscribe(Filter::All, None).expect("room"))
        .collect();
    assert_eq!(hub.subscribe(Filter::All, None).err(), Some(Refused::Full));
    subs.pop();
    assert!(hub.subscribe(Filter::All, None).is_ok());
    // Half the admin listener's connections, at least one, at most the bound.
    assert_eq!(Hub::for_admin(64).max_subscribers(), 32);
    assert_eq!(Hub::for_admin(1).max_subscribers(), 1);
    assert_eq!(Hub::for_admin(1000).max_subscribers(), MAX_SUBSCRIBERS);
}

#[test]
fn closing_the_hub_ends_every_stream_and_refuses_new_ones() {
    let hub = Arc::new(Hub::default());
    let mut sub = hub.subscribe(Filter::All, None).expect("room");
    hub.close();
    assert_eq!(sub.next(Waker::noop()), Next::End);
    assert_eq!(
        hub.subscribe(Filter::All, None).err(),
        Some(Refused::ShuttingDown)
    );
    hub.publish(&event("a.test:80", 1));
    assert_eq!(hub.stats().published, 0);
}

#[tokio::test(start_paused = true)]
async fn an_idle_stream_says_keep_alive_every_fifteen_seconds() {
    let hub = Arc::new(Hub::default());
    let mut stream = EventStream::new(hub.subscribe(Filter::All, None).expect("room"));
    let poll = |stream: &mut EventStream| {
        let mut cx = Context::from_waker(Waker::noop());
        match stream.poll_frame(&mut cx) {
            Poll::Ready(Some(Ok(frame))) => Some(frame.into_data().expect("data")),
            Poll::Ready(_) => panic!("the stream ended"),
            Poll::Pending => None,
        }
    };
    assert_eq!(poll(&mut stream), None);
    tokio::time::advance(KEEP_ALIVE_EVERY - Duration::from_millis(10)).await;
    assert_eq!(poll(&mut stream), None);
    // An event moves the keep-alive on.
    hub.publish(&event("a.test:80", 1));
    assert_eq!(ids(&poll(&mut stream).expect("the event")), [1]);
    tokio::time::advance(KEEP_ALIVE_EVERY - Duration::from_millis(10)).await;
    assert_eq!(poll(&mut stream), None);
    tokio::time::advance(Duration::from_millis(20)).await;
    let keep_alive = poll(&mut stream).expect("a keep-alive");
    assert_eq!(&keep_alive[..], b": keep-alive\n\n");
    hub.close();
    let mut cx = Context::from_waker(Waker::noop());
    assert!(matches!(stream.poll_frame(&mut cx), Poll::Ready(None)));
    assert!(stream.is_end_stream());
}
