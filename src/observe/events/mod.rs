//! The event hub of `GET /v1/events`: host events (`crate::budget::limiter::HostEvent`, told by
//! the limiter's herald) numbered, kept in a bounded buffer for `Last-Event-ID` replay, and handed
//! to each subscriber's bounded queue. Records, decides nothing.
//!
//! | file | owns |
//! |---|---|
//! | `mod.rs` | [`Hub`]: the numbering, the replay buffer, the subscribers and their queues, the bounds |
//! | `frame.rs` | one event as SSE writes it (`id:`, `event:`, `data:` JSON) |
//! | `stream.rs` | [`EventStream`]: a subscriber's response body, with its keep-alive |
//!
//! **Bounds** (every one a constant, documented in `docs/see-and-steer.md`): the buffer holds the
//! last [`BUFFERED`] events; at most [`MAX_SUBSCRIBERS`] streams are open, and at most half the
//! admin listener's connections (the next gets a 503);
//! each subscriber's queue holds at most [`QUEUE_EVENTS`] events and [`QUEUE_BYTES`] bytes. A
//! subscriber that falls behind (its queue full when an event comes) is dropped there and then:
//! its queue is emptied at once and its stream ends, so a consumer that never reads costs at most
//! one full queue, and only until the next event. Publishing never awaits and never blocks: it
//! takes the hub's lock (and each subscriber's, in turn) for a copy of a reference-counted frame.
//! Emitting many events never slows a request: the herald's sink is this, and nothing waits on a
//! reader.
//!
//! Not a `tokio::sync::broadcast`: a broadcast channel keeps its own ring and a receiver learns
//! it lagged only when it next polls, which a consumer that never reads never does, so it would
//! hold its place among the subscribers for as long as its connection lives. Here the publisher
//! sees a full queue and drops the subscriber at once.

mod frame;
mod stream;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Waker;
use std::time::Duration;

use bytes::Bytes;

use crate::budget::limiter::HostEvent;
use crate::util::locks::lock;
pub(crate) use stream::EventStream;

/// Events kept for replay to a client that reconnects with `Last-Event-ID`.
pub(crate) const BUFFERED: usize = 1024;
/// Streams open at once, at most; the next is answered 503 with a `Retry-After`. Never more than
/// half of the admin listener's connections (`[admin] max_connections`, 64 by default, so 32
/// streams): the rest keep room for `/healthz`, `/metrics` and the API ([`Hub::for_admin`]).
pub(crate) const MAX_SUBSCRIBERS: usize = 64;
/// Events waiting in one subscriber's queue; one more and the subscriber is dropped.
pub(crate) const QUEUE_EVENTS: usize = 256;
/// Bytes waiting in one subscriber's queue; past them the subscriber is dropped.
pub(crate) const QUEUE_BYTES: usize = 64 * 1024;
/// How often an idle stream says `: keep-alive`.
pub(crate) const KEEP_ALIVE_EVERY: Duration = Duration::from_secs(15);

/// Which hosts a subscriber hears of (`?host=`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Filter {
    /// Every host.
    All,
    /// One budget key (`host:port`, a domain, an address), as events name it.
    Key(String),
    /// A bare name: the budgets keyed by it, or `name:port` on any port.
    Name(String),
}

impl Filter {
    /// Whether an event about the budget `key` passes.
    fn matches(&self, key: &str) -> bool {
        match self {
            Filter::All => true,
            Filter::Key(k) => k == key,
            Filter::Name(name) => host_part(key) == name,
        }
    }

    /// The host the filter names, for the `missed` event.
    fn label(&self) -> Option<&str> {
        match self {
            Filter::All => None,
            Filter::Key(k) | Filter::Name(k) => Some(k),
        }
    }
}

/// The host part of a `host:port` key, or the key itself when it has no port (a domain, an
/// address); an IPv6 address without its brackets.
fn host_part(key: &str) -> &str {
    let host = match key.rsplit_once(':') {
        Some((host, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => key,
    };
    host.trim_start_matches('[').trim_end_matches(']')
}

/// Why a subscription was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// [`MAX_SUBSCRIBERS`] streams are open.
    Full,
    /// courtesy is shutting down.
    ShuttingDown,
}

/// One event as the buffer keeps it.
#[derive(Debug, Clone)]
struct Buffered {
    id: u64,
    host: Arc<str>,
    frame: Bytes,
}

/// One subscriber's queue, shared by the hub (which fills it) and its stream (which empties it).
#[derive(Debug, Default)]
struct Mailbox {
    queue: Mutex<Queue>,
}

/// What waits for a subscriber.
#[derive(Debug, Default)]
struct Queue {
    frames: VecDeque<Bytes>,
    bytes: usize,
    /// Dropped (fell behind) or the hub closed: the stream ends once it has sent what it holds.
    closed: bool,
    /// The stream's task, woken by the next frame.
    waker: Option<Waker>,
}

/// A subscriber as the hub knows it.
#[derive(Debug)]
struct Subscriber {
    filter: Filter,
    mailbox: Arc<Mailbox>,
}

/// The hub's state, behind its lock.
#[derive(Debug)]
struct Inner {
    /// The id of the next event (the first is 1).
    next_id: u64,
    ring: VecDeque<Buffered>,
    ring_bytes: usize,
    subscribers: Vec<Subscriber>,
    /// Streams open at once, at most.
    max_subscribers: usize,
    /// Subscribers dropped for falling behind, since start.
    dropped: u64,
    closed: bool,
}

/// Numbers host events, keeps the last [`BUFFERED`] and hands each to the subscribers it passes.
#[derive(Debug)]
pub(crate) struct Hub {
    inner: Mutex<Inner>,
    /// Bytes waiting in every subscriber's queue together.
    queued: AtomicUsize,
}

/// What the hub holds, for `GET /v1/events/stats` and the tests of its bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub(crate) struct HubStats {
    /// Streams open.
    pub(crate) subscribers: usize,
    /// Bytes waiting in their queues together.
    pub(crate) queued_bytes: usize,
    /// Events in the replay buffer.
    pub(crate) buffered: usize,
    /// Their bytes.
    pub(crate) buffered_bytes: usize,
    /// Events published since start (the id of the last).
    pub(crate) published: u64,
    /// Subscribers dropped for falling behind, since start.
    pub(crate) dropped: u64,
}

impl Default for Hub {
    fn default() -> Self {
        Hub::with_room(MAX_SUBSCRIBERS)
    }
}

impl Hub {
    /// A hub for an admin listener of `admin_connections` connections: at most half of them
    /// streams (at least 1, at most [`MAX_SUBSCRIBERS`]).
    pub(crate) fn for_admin(admin_connections: usize) -> Self {
        Hub::with_room((admin_connections / 2).clamp(1, MAX_SUBSCRIBERS))
    }

    /// A hub of at most `max_subscribers` streams.
    fn with_room(max_subscribers: usize) -> Self {
        Hub {
            inner: Mutex::new(Inner {
                next_id: 1,
                ring: VecDeque::new(),
                ring_bytes: 0,
                subscribers: Vec::new(),
                max_subscribers,
                dropped: 0,
                closed: false,
            }),
            queued: AtomicUsize::new(0),
        }
    }

    /// Streams open at once, at most.
    pub(crate) fn max_subscribers(&self) -> usize {
        lock(&self.inner).max_subscribers
    }

    /// Numbers `event`, buffers it and puts it in the queue of every subscriber it passes; a
    /// subscriber whose queue is full is dropped. Never awaits, never blocks on a reader.
    pub(crate) fn publish(&self, event: &HostEvent) {
        let mut inner = lock(&self.inner);
        if inner.closed {
            return;
        }
        let id = inner.next_id;
        inner.next_id += 1;
        let frame = frame::render(id, event);
        if inner.ring.len() >= BUFFERED {
            if let Some(old) = inner.ring.pop_front() {
                inner.ring_bytes -= old.frame.len();
            }
        }
        inner.ring_bytes += frame.len();
        inner.ring.push_back(Buffered {
            id,
            host: event.host.clone(),
            frame: frame.clone(),
        });
        let mut wake = Vec::new();
        let mut dropped = 0;
        inner.subscribers.retain(|sub| {
            if !sub.filter.matches(&event.host) {
                return true;
            }
            let kept = self.deliver(&sub.mailbox, &frame, &mut wake);
            dropped += u64::from(!kept);
            kept
        });
        inner.dropped += dropped;
        drop(inner);
        for waker in wake {
            waker.wake();
        }
    }

    /// Puts `frame` in `mailbox`, or closes it when it is full (or closed already); `false` when
    /// the subscriber is gone. Its waker goes into `wake`.
    fn deliver(&self, mailbox: &Mailbox, frame: &Bytes, wake: &mut Vec<Waker>) -> bool {
        let mut queue = lock(&mailbox.queue);
        if queue.closed {
            return false;
        }
        let full = queue.frames.len() >= QUEUE_EVENTS || queue.bytes + frame.len() > QUEUE_BYTES;
        if full {
            self.close_queue(&mut queue);
        } else {
            queue.bytes += frame.len();
            self.queued.fetch_add(frame.len(), Ordering::Relaxed);
            queue.frames.push_back(frame.clone());
        }
        wake.extend(queue.waker.take());
        !full
    }

    /// Empties and closes a subscriber's queue: its stream ends at its next poll.
    fn close_queue(&self, queue: &mut Queue) {
        self.queued.fetch_sub(queue.bytes, Ordering::Relaxed);
        queue.frames = VecDeque::new();
        queue.bytes = 0;
        queue.closed = true;
    }

    /// A new subscriber hearing of the hosts `filter` passes. With `last_event_id`, it first gets
    /// what the buffer still holds after that id: a `missed` event before them when the buffer
    /// no longer reaches back to it (or the id is from another run: ids start at 1 with each).
    pub(crate) fn subscribe(
        self: &Arc<Self>,
        filter: Filter,
        last_event_id: Option<u64>,
    ) -> Result<Subscription, Refused> {
        let mut inner = lock(&self.inner);
        if inner.closed {
            return Err(Refused::ShuttingDown);
        }
        if inner.subscribers.len() >= inner.max_subscribers {
            return Err(Refused::Full);
        }
        let mut replay = VecDeque::new();
        if let Some(last) = last_event_id {
            let oldest = inner.ring.front().map_or(inner.next_id, |b| b.id);
            let other_run = last >= inner.next_id;
            if other_run || last.saturating_add(1) < oldest {
                replay.push_back(frame::missed(last, oldest, filter.label()));
            }
            let after = if other_run { 0 } else { last };
            replay.extend(
                inner
                    .ring
                    .iter()
                    .filter(|b| b.id > after && filter.matches(&b.host))
                    .map(|b| b.frame.clone()),
            );
        }
        let mailbox = Arc::new(Mailbox::default());
        inner.subscribers.push(Subscriber {
            filter,
            mailbox: mailbox.clone(),
        });
        Ok(Subscription {
            hub: self.clone(),
            mailbox,
            replay,
        })
    }

    /// Ends every stream and refuses new ones (courtesy shuts down).
    pub(crate) fn close(&self) {
        let mut inner = lock(&self.inner);
        inner.closed = true;
        let subscribers = std::mem::take(&mut inner.subscribers);
        drop(inner);
        for sub in subscribers {
            let mut queue = lock(&sub.mailbox.queue);
            queue.closed = true;
            let waker = queue.waker.take();
            drop(queue);
            if let Some(waker) = waker {
                waker.wake();
            }
        }
    }

    /// What the hub holds now.
    pub(crate) fn stats(&self) -> HubStats {
        let inner = lock(&self.inner);
        HubStats {
            subscribers: inner.subscribers.len(),
            queued_bytes: self.queued.load(Ordering::Relaxed),
            buffered: inner.ring.len(),
            buffered_bytes: inner.ring_bytes,
            published: inner.next_id - 1,
            dropped: inner.dropped,
        }
    }

    /// Forgets a subscriber whose stream is gone.
    fn unsubscribe(&self, mailbox: &Arc<Mailbox>) {
        lock(&self.inner)
            .subscribers
            .retain(|s| !Arc::ptr_eq(&s.mailbox, mailbox));
        let mut queue = lock(&mailbox.queue);
        self.close_queue(&mut queue);
    }
}

/// One subscriber's side: what to replay, then its queue. Dropping it unsubscribes.
#[derive(Debug)]
pub(crate) struct Subscription {
    hub: Arc<Hub>,
    mailbox: Arc<Mailbox>,
    replay: VecDeque<Bytes>,
}

/// What a subscription has for its stream now.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// Frames to send (replayed or queued, in order).
    Frames(Bytes),
    /// Nothing yet: the waker is kept for the next event.
    Nothing,
    /// The stream ends: dropped for falling behind, or courtesy shuts down.
    End,
}

impl Subscription {
    /// The frames waiting (all of them, as one chunk), else the end, else nothing (and `waker`
    /// is woken by the next event).
    pub(crate) fn next(&mut self, waker: &Waker) -> Next {
        if !self.replay.is_empty() {
            let chunk: Vec<u8> = self.replay.drain(..).flat_map(|b| b.to_vec()).collect();
            return Next::Frames(Bytes::from(chunk));
        }
        let mut queue = lock(&self.mailbox.queue);
        if !queue.frames.is_empty() {
            let frames = std::mem::take(&mut queue.frames);
            let bytes = std::mem::take(&mut queue.bytes);
            drop(queue);
            self.hub.queued.fetch_sub(bytes, Ordering::Relaxed);
            let mut chunk = Vec::with_capacity(bytes);
            for frame in frames {
                chunk.extend_from_slice(&frame);
            }
            return Next::Frames(Bytes::from(chunk));
        }
        if queue.closed {
            return Next::End;
        }
        queue.waker = Some(waker.clone());
        Next::Nothing
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.hub.unsubscribe(&self.mailbox);
    }
}

#[cfg(test)]
mod tests;
