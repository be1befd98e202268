//! One origin request for many (as Squid's `collapsed_forwarding` and nginx's `proxy_cache_lock`
//! do): the first of several identical requests in flight at once leads and goes to the origin;
//! the others follow, wait for the leader's answer and share it, taking no turn of the host's
//! budget. A leader that goes away unanswered, or whose answer may not be shared, sends its
//! followers on their own way; a follower waits at most its bound, then goes too.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::header::{
    HeaderName, ACCEPT, ACCEPT_ENCODING, ACCEPT_LANGUAGE, CACHE_CONTROL, COOKIE, IF_MATCH,
    IF_MODIFIED_SINCE, IF_NONE_MATCH, IF_UNMODIFIED_SINCE, PRAGMA, RANGE, SET_COOKIE, VARY,
};
use http::request::Parts;
use http::{response, HeaderMap, Method, StatusCode};
use tokio::sync::watch;
use tokio::time::Instant;

use super::freshness::Directives;
use crate::util::locks::lock;

/// Where a flight stands, as its followers see it.
#[derive(Debug)]
enum Landing<T> {
    /// The leader's request is in flight.
    Pending,
    /// The answer, for every follower.
    Shared(Arc<T>),
    /// No answer to share: each follower asks for itself.
    Alone,
}

impl<T> Clone for Landing<T> {
    fn clone(&self) -> Self {
        match self {
            Landing::Pending => Landing::Pending,
            Landing::Shared(answer) => Landing::Shared(answer.clone()),
            Landing::Alone => Landing::Alone,
        }
    }
}

/// How long a key whose answer may not be shared goes without flights: its requests go on
/// alone at once rather than each waiting for a leader's answer that will not be shared.
pub(crate) const ALONE_FOR: Duration = Duration::from_secs(10);

/// The most keys remembered (flights and keys going alone) before the expired marks are swept.
const SWEEP_ABOVE: usize = 4096;

/// A key's entry: a flight in the air, or a key that goes alone until then.
#[derive(Debug)]
enum Slot<T> {
    Flying(watch::Receiver<Landing<T>>),
    Alone(Instant),
}

/// The table every flight is kept in.
type Table<T> = Arc<Mutex<HashMap<u64, Slot<T>>>>;

/// The requests in flight that others may follow, by key: a hash of the request's method, its
/// store key (the URL, and a hash of any credentials) and the headers answers commonly vary on,
/// so that a request costs no allocation to be keyed. The hash is SipHash under keys this process
/// draws at random: no one can make two requests collide on purpose, and two requests in flight
/// at one moment collide by chance with a probability of about one in 2^64.
pub(crate) struct Flights<T> {
    table: Table<T>,
    hasher: RandomState,
}

impl<T> Default for Flights<T> {
    fn default() -> Self {
        Flights {
            table: Arc::new(Mutex::new(HashMap::new())),
            hasher: RandomState::new(),
        }
    }
}

impl<T> std::fmt::Debug for Flights<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Flights")
            .field("keys", &lock(&self.table).len())
            .finish()
    }
}

/// A request's place in a flight.
pub(crate) enum Joined<T> {
    /// The first: it asks the origin, then lands the flight ([`Lead::land`]).
    Lead(Lead<T>),
    /// Another is asking: wait for its answer ([`Follow::answer`]).
    Follow(Follow<T>),
    /// Its key's answers may not be shared: it goes on by itself.
    Alone,
}

impl<T> Flights<T> {
    /// The flight key of a request with `head` and `store_key`, if it may join a flight (see
    /// [`joins`]).
    pub(crate) fn key(&self, head: &Parts, store_key: &str) -> Option<u64> {
        if !joins(head) {
            return None;
        }
        let mut h = self.hasher.build_hasher();
        h.write(head.method.as_str().as_bytes());
        h.write_u8(0xff);
        h.write(store_key.as_bytes());
        for name in &KEYED {
            h.write_u8(0xff);
            for value in head.headers.get_all(name) {
                h.write(value.as_bytes());
                h.write_u8(0xfe);
            }
        }
        Some(h.finish())
    }

    /// Joins the flight of `key`, leading it when there is none.
    pub(crate) fn join(&self, key: u64) -> Joined<T> {
        let mut table = lock(&self.table);
        match table.get(&key) {
            Some(Slot::Flying(landing)) if matches!(*landing.borrow(), Landing::Pending) => {
                return Joined::Follow(Follow {
                    landing: landing.clone(),
                });
            }
            Some(Slot::Alone(until)) if *until > Instant::now() => return Joined::Alone,
            _ => {}
        }
        if table.len() >= SWEEP_ABOVE {
            let now = Instant::now();
            table.retain(|_, slot| !matches!(slot, Slot::Alone(until) if *until <= now));
        }
        let (sender, landing) = watch::channel(Landing::Pending);
        table.insert(key, Slot::Flying(landing));
        Joined::Lead(Lead {
            table: self.table.clone(),
            key,
            sender: Some(sender),
        })
    }

    /// How many keys are remembered (the tests check that each flight ends).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        lock(&self.table).len()
    }
}

/// The leader of a flight. Dropped without landing, it sends its followers on their own way.
#[derive(Debug)]
pub(crate) struct Lead<T> {
    table: Table<T>,
    key: u64,
    sender: Option<watch::Sender<Landing<T>>>,
}

impl<T> Lead<T> {
    /// Ends the flight with `answer` for every follower (`None`: nothing to share, each asks for
    /// itself). Requests that come after it start a flight of their own.
    pub(crate) fn land(mut self, answer: Option<T>) {
        let landing = match answer {
            Some(answer) => Landing::Shared(Arc::new(answer)),
            None => Landing::Alone,
        };
        self.end(landing, None);
    }

    /// Ends the flight with an answer that may not be shared: the followers ask for themselves,
    /// and the key's requests go alone for [`ALONE_FOR`].
    pub(crate) fn land_unshareable(mut self) {
        self.end(Landing::Alone, Some(Instant::now() + ALONE_FOR));
    }

    /// Whether any request follows this one.
    pub(crate) fn followed(&self) -> bool {
        self.sender
            .as_ref()
            .is_some_and(|sender| sender.receiver_count() > 1)
    }

    fn end(&mut self, landing: Landing<T>, alone_until: Option<Instant>) {
        let Some(sender) = self.sender.take() else {
            return;
        };
        {
            let mut table = lock(&self.table);
            // Only this flight's entry: a later one under the same key is not ours to touch.
            let ours = matches!(table.get(&self.key),
                Some(Slot::Flying(found)) if found.same_channel(&sender.subscribe()));
            if ours {
                match alone_until {
                    Some(until) => table.insert(self.key, Slot::Alone(until)),
                    None => table.remove(&self.key),
                };
            }
        }
        sender.send_replace(landing);
    }
}

impl<T> Drop for Lead<T> {
    fn drop(&mut self) {
        self.end(Landing::Alone, None);
    }
}

/// A request following a flight.
pub(crate) struct Follow<T> {
    landing: watch::Receiver<Landing<T>>,
}

impl<T> Follow<T> {
    /// The leader's answer, once it lands; `None` when there is none to share, or when `bound`
    /// passes first (the follower then asks for itself).
    pub(crate) async fn answer(mut self, bound: Duration) -> Option<Arc<T>> {
        let landed = tokio::time::timeout(
            bound,
            self.landing
                .wait_for(|landing| !matches!(landing, Landing::Pending)),
        )
        .await;
        match landed {
            Ok(Ok(landing)) => match &*landing {
                Landing::Shared(answer) => Some(answer.clone()),
                Landing::Pending | Landing::Alone => None,
            },
            // Timed out, or the leader is gone without a word (it always says one).
            Ok(Err(_)) | Err(_) => None,
        }
    }
}

/// The request headers answers commonly vary on: part of a flight's key, so that followers send
/// what the leader sent. An answer that varies on anything else is not shared.
const KEYED: [HeaderName; 3] = [ACCEPT, ACCEPT_ENCODING, ACCEPT_LANGUAGE];

/// The largest body shared with followers (as the store's largest entry); a larger one lands
/// with nothing to share and the followers ask for themselves.
pub(crate) const MAX_SHARED_BYTES: usize = super::store::MAX_ENTRY_BYTES as usize;

/// Whether a request with `head` may join a flight: a bodiless GET or HEAD without cookies,
/// conditions of its own, a range, or a `no-cache`/`no-store`/`max-age=0` (those must reach the
/// origin).
pub(crate) fn joins(head: &Parts) -> bool {
    if !(head.method == Method::GET || head.method == Method::HEAD) {
        return false;
    }
    // One pass over the names (standard ones compare as numbers), not a lookup per name.
    let own = [
        COOKIE,
        IF_NONE_MATCH,
        IF_MODIFIED_SINCE,
        IF_MATCH,
        IF_UNMODIFIED_SINCE,
        RANGE,
    ];
    let mut directives = false;
    for name in head.headers.keys() {
        if own.contains(name) {
            return false;
        }
        directives |= name == CACHE_CONTROL || name == PRAGMA;
    }
    if !directives {
        return true;
    }
    let asked = Directives::of(&head.headers);
    !asked.no_cache && !asked.no_store && asked.max_age != Some(0)
}

/// An answer a leader shares with its followers, its body whole.
#[derive(Debug)]
pub(crate) struct SharedAnswer {
    /// The origin's status.
    pub status: StatusCode,
    /// Its headers, as the leader's client got them.
    pub headers: HeaderMap,
    /// Its whole body.
    pub body: Bytes,
}

/// Whether an answer with `parts` may go to followers too: not marked `private` or `no-store`,
/// setting no cookie, and varying only on what the flight's key holds.
pub(crate) fn shareable(parts: &response::Parts) -> bool {
    let said = Directives::of(&parts.headers);
    let varies_within_key = parts.headers.get_all(VARY).iter().all(|value| {
        value.to_str().is_ok_and(|list| {
            list.split(',')
                .map(str::trim)
                .filter(|name| !name.is_empty())
                .all(|name| KEYED.iter().any(|k| k.as_str().eq_ignore_ascii_case(name)))
        })
    });
    !parts.status.is_informational()
        && !said.private
        && !said.no_store
        && !parts.headers.contains_key(SET_COOKIE)
        && varies_within_key
}

/// A leader's answer collected as it streams to the leader's client, for its followers: landed
/// with the whole body when it ends, with nothing when it fails, grows past
/// [`MAX_SHARED_BYTES`] or is dropped unfinished.
#[derive(Debug)]
pub struct Share {
    lead: Lead<SharedAnswer>,
    status: StatusCode,
    headers: HeaderMap,
    body: BytesMut,
}

impl Share {
    /// Collects the answer with `parts` for `lead`'s followers; `None` (the flight landed with
    /// nothing to share) when no one follows yet, or the answer may not be shared. A flight
    /// nobody follows by the time its answer's head arrives ends there, so an answer nobody
    /// waits for is never copied.
    pub(crate) fn start(lead: Lead<SharedAnswer>, parts: &response::Parts) -> Option<Box<Share>> {
        if !shareable(parts) {
            lead.land_unshareable();
            return None;
        }
        if !lead.followed() {
            lead.land(None);
            return None;
        }
        Some(Box::new(Share {
            lead,
            status: parts.status,
            headers: parts.headers.clone(),
            body: BytesMut::new(),
        }))
    }

    /// Adds a chunk of the body; `false` when the body grew too large to share (then drop this).
    pub(crate) fn write(&mut self, data: &[u8]) -> bool {
        if self.body.len() + data.len() > MAX_SHARED_BYTES {
            return false;
        }
        self.body.extend_from_slice(data);
        true
    }

    /// The body ended: every follower gets the answer.
    pub(crate) fn finish(self) {
        let Share {
            lead,
            status,
            headers,
            body,
        } = self;
        lead.land(Some(SharedAnswer {
            status,
            headers,
            body: body.freeze(),
        }));
    }
}

/// Lands `lead`'s flight with a whole local answer (the stored 200 after a revalidation).
pub(crate) fn land_whole(lead: Lead<SharedAnswer>, parts: &response::Parts, body: &Bytes) {
    if !shareable(parts) {
        lead.land_unshareable();
    } else if lead.followed() {
        lead.land(Some(SharedAnswer {
            status: parts.status,
            headers: parts.headers.clone(),
            body: body.clone(),
        }));
    } else {
        lead.land(None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lead_of<T>(joined: Joined<T>) -> Lead<T> {
        match joined {
            Joined::Lead(lead) => lead,
            Joined::Follow(_) | Joined::Alone => panic!("expected to lead"),
        }
    }

    fn lead(joined: Joined<&'static str>) -> Lead<&'static str> {
        lead_of(joined)
    }

    fn follow(joined: Joined<&'static str>) -> Follow<&'static str> {
        match joined {
            Joined::Follow(follow) => follow,
            Joined::Lead(_) | Joined::Alone => panic!("expected to follow"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn one_leads_the_others_share_its_answer() {
        let flights = Flights::default();
        let leader = lead(flights.join(1));
        assert!(!leader.followed());
        let followers: Vec<_> = (0..15).map(|_| follow(flights.join(1))).collect();
        assert!(leader.followed());
        // Another key is another flight.
        let other = lead(flights.join(2));
        let waiting: Vec<_> = followers
            .into_iter()
            .map(|f| tokio::spawn(f.answer(Duration::from_secs(60))))
            .collect();
        tokio::task::yield_now().await;
        leader.land(Some("the page"));
        for waiter in waiting {
            assert_eq!(waiter.await.unwrap().as_deref(), Some(&"the page"));
        }
        assert_eq!(flights.len(), 1);
        drop(other);
        assert_eq!(flights.len(), 0);
        // After landing, the next request leads a new flight.
        let _next = lead(flights.join(1));
    }

    #[tokio::test(start_paused = true)]
    async fn followers_go_alone_when_there_is_nothing_to_share_or_the_leader_is_gone() {
        let flights = Flights::default();
        let leader = lead(flights.join(3));
        let follower = follow(flights.join(3));
        leader.land(None);
        assert_eq!(follower.answer(Duration::from_secs(60)).await, None);
        let leader = lead(flights.join(3));
        let follower = follow(flights.join(3));
        drop(leader);
        assert_eq!(follower.answer(Duration::from_secs(60)).await, None);
        assert_eq!(flights.len(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_follower_waits_at_most_its_bound() {
        let flights = Flights::default();
        let leader = lead(flights.join(3));
        let follower = follow(flights.join(3));
        let started = tokio::time::Instant::now();
        assert_eq!(follower.answer(Duration::from_secs(30)).await, None);
        assert_eq!(started.elapsed(), Duration::from_secs(30));
        // The leader, still in flight, is still followed by newcomers and still lands.
        let late = follow(flights.join(3));
        leader.land(Some("late"));
        assert_eq!(
            late.answer(Duration::from_secs(1)).await.as_deref(),
            Some(&"late")
        );
    }

    fn parts(headers: &[(&str, &str)]) -> response::Parts {
        let mut response = http::Response::new(());
        for (name, value) in headers {
            response.headers_mut().append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                http::HeaderValue::from_str(value).unwrap(),
            );
        }
        response.into_parts().0
    }

    fn request(method: Method, headers: &[(&str, &str)]) -> Parts {
        let mut request = http::Request::builder()
            .method(method)
            .uri("http://a.test/x");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.body(()).unwrap().into_parts().0
    }

    #[test]
    fn only_plain_reads_join_a_flight_keyed_by_what_answers_vary_on() {
        let flights = Flights::<()>::default();
        let key = |m, h: &[(&str, &str)]| flights.key(&request(m, h), "http://a.test/x");
        let plain = key(Method::GET, &[("accept", "text/html"), ("user-agent", "a")]);
        assert!(plain.is_some());
        assert_eq!(
            plain,
            key(Method::GET, &[("accept", "text/html"), ("user-agent", "b")])
        );
        assert_ne!(plain, key(Method::GET, &[("accept", "application/json")]));
        assert_ne!(plain, key(Method::HEAD, &[("accept", "text/html")]));
        for own in [
            ("cookie", "a=1"),
            ("if-none-match", "\"x\""),
            ("if-modified-since", "Sat, 01 Jan 2000 00:00:00 GMT"),
            ("range", "bytes=0-10"),
            ("cache-control", "no-cache"),
            ("cache-control", "max-age=0"),
            ("pragma", "no-cache"),
        ] {
            assert_eq!(key(Method::GET, &[own]), None, "{own:?}");
        }
        assert_eq!(key(Method::POST, &[]), None);
        let other = flights.key(&request(Method::GET, &[]), "http://a.test/y");
        assert_ne!(other, key(Method::GET, &[]));
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_whose_answer_may_not_be_shared_goes_alone_for_a_while() {
        let flights = Flights::<()>::default();
        let lead = lead_of(flights.join(7));
        let Joined::Follow(follower) = flights.join(7) else {
            panic!()
        };
        lead.land_unshareable();
        assert!(follower.answer(Duration::from_secs(1)).await.is_none());
        assert!(matches!(flights.join(7), Joined::Alone));
        tokio::time::advance(ALONE_FOR).await;
        assert!(matches!(flights.join(7), Joined::Lead(_)));
    }

    #[test]
    fn private_personal_or_unkeyed_varying_answers_are_not_shared() {
        assert!(shareable(&parts(&[
            ("cache-control", "max-age=60"),
            ("vary", "Accept-Encoding")
        ])));
        assert!(shareable(&parts(&[])));
        for personal in [
            ("cache-control", "private"),
            ("cache-control", "no-store"),
            ("set-cookie", "a=1"),
            ("vary", "user-agent"),
            ("vary", "*"),
        ] {
            assert!(!shareable(&parts(&[personal])), "{personal:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_share_lands_the_whole_body_or_nothing() {
        let flights = Flights::default();
        let Joined::Lead(lead) = flights.join(3) else {
            panic!()
        };
        let Joined::Follow(follower) = flights.join(3) else {
            panic!()
        };
        let mut share = Share::start(lead, &parts(&[("content-type", "text/plain")])).unwrap();
        assert!(share.write(b"hello "));
        assert!(share.write(b"world"));
        share.finish();
        let answer = follower.answer(Duration::from_secs(1)).await.unwrap();
        assert_eq!(&answer.body[..], b"hello world");
        assert_eq!(answer.headers["content-type"], "text/plain");
        // Too large: the share is dropped and the followers go alone.
        let Joined::Lead(lead) = flights.join(3) else {
            panic!()
        };
        let Joined::Follow(follower) = flights.join(3) else {
            panic!()
        };
        let mut share = Share::start(lead, &parts(&[])).unwrap();
        assert!(!share.write(&vec![0; MAX_SHARED_BYTES + 1]));
        drop(share);
        assert!(follower.answer(Duration::from_secs(1)).await.is_none());
        // Nobody follows yet: nothing is copied, and the flight is over.
        let Joined::Lead(lead) = flights.join(3) else {
            panic!()
        };
        assert!(Share::start(lead, &parts(&[])).is_none());
        assert_eq!(flights.len(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn an_old_leader_does_not_end_a_newer_flight() {
        let flights = Flights::default();
        let first = lead(flights.join(3));
        // The first flight's entry is replaced only once it has landed; simulate a leader that
        // lands while a newer flight of the same key is in the air.
        first.land(Some("one"));
        let second = lead(flights.join(3));
        let follower = follow(flights.join(3));
        assert_eq!(flights.len(), 1);
        second.land(Some("two"));
        assert_eq!(
            follower.answer(Duration::from_secs(1)).await.as_deref(),
            Some(&"two")
        );
    }
}
