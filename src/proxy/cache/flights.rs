//! One origin request for many (as Squid's `collapsed_forwarding` and nginx's `proxy_cache_lock`
//! do): the first of several identical requests in flight at once leads and goes to the origin;
//! the others follow, wait for the leader's answer and share it, taking no turn of the host's
//! budget. A leader that goes away unanswered, or whose answer may not be shared, sends its
//! followers on their own way; a follower waits at most its bound, then goes too.

use std::collections::hash_map::RandomState;
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::header::{
    HeaderName, ACCEPT, ACCEPT_ENCODING, ACCEPT_LANGUAGE, CACHE_CONTROL, COOKIE, IF_MATCH,
    IF_MODIFIED_SINCE, IF_NONE_MATCH, IF_UNMODIFIED_SINCE, PRAGMA, RANGE, SET_COOKIE, VARY,
};
use http::request::Parts;
use http::{response, HeaderMap, HeaderValue, Method, StatusCode};
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

/// The most keys going alone at once: past it, a key whose answer may not be shared leaves no
/// mark (its next requests lead flights of their own), so the table stays bounded at any rate
/// of distinct URLs.
const MAX_ALONE: usize = 65_536;

/// A key's entry: a flight in the air, or a key that goes alone until then.
#[derive(Debug)]
enum Slot<T> {
    /// A flight in the air: its number (so that its leader lands only its own), and the channel
    /// its followers wait on, made when the first one comes: a flight nobody follows (nearly
    /// all of them) makes no channel.
    Flying {
        flight: u64,
        followers: Option<watch::Sender<Landing<T>>>,
    },
    /// The key's answers may not be shared: its requests go alone until then.
    Alone(Instant),
}

/// Every flight by key, and the number of the last flight started.
#[derive(Debug)]
struct Slots<T> {
    by_key: HashMap<u64, Slot<T>>,
    started: u64,
    /// The keys going alone, in the order their marks end (every mark lasts [`ALONE_FOR`]):
    /// each new mark clears the ended ones from the front, so no request scans the table.
    marks: VecDeque<(Instant, u64)>,
}

impl<T> Slots<T> {
    /// Marks `key` to go alone from `now` for [`ALONE_FOR`], once the marks that ended are
    /// cleared; `false` (no mark) when [`MAX_ALONE`] keys already go alone.
    fn mark_alone(&mut self, key: u64, now: Instant) -> bool {
        while let Some(&(until, ended)) = self.marks.front().filter(|(until, _)| *until <= now) {
            self.marks.pop_front();
            // A key that leads a flight again, or was marked anew, is not this mark's to clear.
            if matches!(self.by_key.get(&ended), Some(Slot::Alone(u)) if *u == until) {
                self.by_key.remove(&ended);
            }
        }
        if self.marks.len() >= MAX_ALONE {
            return false;
        }
        let until = now + ALONE_FOR;
        self.marks.push_back((until, key));
        self.by_key.insert(key, Slot::Alone(until));
        true
    }
}

/// The table every flight is kept in.
type Table<T> = Arc<Mutex<Slots<T>>>;

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
            table: Arc::new(Mutex::new(Slots {
                by_key: HashMap::new(),
                started: 0,
                marks: VecDeque::new(),
            })),
            hasher: RandomState::new(),
        }
    }
}

impl<T> std::fmt::Debug for Flights<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Flights")
            .field("keys", &lock(&self.table).by_key.len())
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
        let keyed = keyed_values(head)?;
        let mut h = self.hasher.build_hasher();
        h.write(head.method.as_str().as_bytes());
        h.write_u8(0xff);
        h.write(store_key.as_bytes());
        for (name, seen) in KEYED.iter().zip(keyed) {
            h.write_u8(0xff);
            match seen {
                Seen::Absent => {}
                Seen::Once(value) => {
                    h.write(value.as_bytes());
                    h.write_u8(0xfe);
                }
                Seen::Repeated => {
                    for value in head.headers.get_all(name) {
                        h.write(value.as_bytes());
                        h.write_u8(0xfe);
                    }
                }
            }
        }
        Some(h.finish())
    }

    /// Joins the flight of `key`, leading it when there is none.
    pub(crate) fn join(&self, key: u64) -> Joined<T> {
        let mut table = lock(&self.table);
        match table.by_key.get_mut(&key) {
            // A flight stays in the table until it lands: it is always pending here.
            Some(Slot::Flying { followers, .. }) => {
                let landing = match followers {
                    Some(sender) => sender.subscribe(),
                    None => {
                        let (sender, landing) = watch::channel(Landing::Pending);
                        *followers = Some(sender);
                        landing
                    }
                };
                return Joined::Follow(Follow { landing });
            }
            Some(Slot::Alone(until)) if *until > Instant::now() => return Joined::Alone,
            _ => {}
        }
        table.started += 1;
        let flight = table.started;
        let followers = None;
        table.by_key.insert(key, Slot::Flying { flight, followers });
        Joined::Lead(Lead {
            table: self.table.clone(),
            key,
            flight,
            landed: false,
        })
    }

    /// How many keys are remembered (the tests check that each flight ends).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        lock(&self.table).by_key.len()
    }
}

/// The leader of a flight. Dropped without landing, it sends its followers on their own way.
#[derive(Debug)]
pub(crate) struct Lead<T> {
    table: Table<T>,
    key: u64,
    /// Its flight's number: the key's slot is this flight's while it holds this number.
    flight: u64,
    landed: bool,
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
        self.end(Landing::Alone, Some(Instant::now()));
    }

    /// Whether any request follows this one.
    pub(crate) fn followed(&self) -> bool {
        let table = lock(&self.table);
        matches!(table.by_key.get(&self.key),
            Some(Slot::Flying { flight, followers: Some(sender) })
                if *flight == self.flight && sender.receiver_count() > 0)
    }

    /// This lead back while a request follows it; else its flight ends here, with nothing to
    /// share (one look at the table, for the answer's head).
    pub(crate) fn if_followed(mut self) -> Option<Self> {
        let followed = {
            let mut table = lock(&self.table);
            match table.by_key.get(&self.key) {
                Some(Slot::Flying { flight, followers }) if *flight == self.flight => {
                    let waiting = followers.as_ref().is_some_and(|s| s.receiver_count() > 0);
                    if !waiting {
                        // No one waits (a follower past its bound may have left a channel).
                        table.by_key.remove(&self.key);
                    }
                    waiting
                }
                _ => false,
            }
        };
        if followed {
            return Some(self);
        }
        self.landed = true;
        None
    }

    /// Ends the flight with `landing` for its followers; with `alone_from`, its key goes alone
    /// from then.
    fn end(&mut self, landing: Landing<T>, alone_from: Option<Instant>) {
        if std::mem::replace(&mut self.landed, true) {
            return;
        }
        let followers = {
            let mut table = lock(&self.table);
            // Only this flight's entry: a later one under the same key is not ours to touch.
            let ours = matches!(table.by_key.get(&self.key),
                Some(Slot::Flying { flight, .. }) if *flight == self.flight);
            if !ours {
                return;
            }
            let slot = table.by_key.remove(&self.key);
            if let Some(now) = alone_from {
                table.mark_alone(self.key, now);
            }
            match slot {
                Some(Slot::Flying { followers, .. }) => followers,
                _ => None,
            }
        };
        if let Some(sender) = followers {
            sender.send_replace(landing);
        }
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
    keyed_values(head).is_some()
}

/// How often a request carries one of the [`KEYED`] headers.
#[derive(Debug, Clone, Copy)]
enum Seen<'a> {
    Absent,
    Once(&'a HeaderValue),
    Repeated,
}

/// The request's values of the [`KEYED`] headers, found in the one pass over its headers that
/// also decides whether it may join a flight at all ([`joins`]; `None` when it may not).
fn keyed_values(head: &Parts) -> Option<[Seen<'_>; 3]> {
    if !(head.method == Method::GET || head.method == Method::HEAD) {
        return None;
    }
    // One pass over the headers (standard names compare as numbers), not a lookup per name.
    let own = [
        COOKIE,
        IF_NONE_MATCH,
        IF_MODIFIED_SINCE,
        IF_MATCH,
        IF_UNMODIFIED_SINCE,
        RANGE,
    ];
    let mut directives = false;
    let mut seen = [Seen::Absent; 3];
    for (name, value) in &head.headers {
        if own.contains(name) {
            return None;
        }
        directives |= name == CACHE_CONTROL || name == PRAGMA;
        if let Some(i) = KEYED.iter().position(|keyed| keyed == name) {
            seen[i] = match seen[i] {
                Seen::Absent => Seen::Once(value),
                Seen::Once(_) | Seen::Repeated => Seen::Repeated,
            };
        }
    }
    if directives {
        let asked = Directives::of(&head.headers);
        if asked.no_cache || asked.no_store || asked.max_age == Some(0) {
            return None;
        }
    }
    Some(seen)
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

/// Whether an answer with `parts` (whose directives are `said`) may go to followers too: not
/// marked `private` or `no-store`, setting no cookie, and varying only on what the flight's key
/// holds.
pub(crate) fn shareable(parts: &response::Parts, said: &Directives) -> bool {
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
    pub(crate) fn start(
        lead: Lead<SharedAnswer>,
        parts: &response::Parts,
        said: &Directives,
    ) -> Option<Box<Share>> {
        if !shareable(parts, said) {
            lead.land_unshareable();
            return None;
        }
        let lead = lead.if_followed()?;
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
    if !shareable(parts, &Directives::of(&parts.headers)) {
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

    #[tokio::test(start_paused = true)]
    async fn keys_going_alone_stay_bounded_and_their_marks_end() {
        let flights = Flights::<&str>::default();
        let marked = MAX_ALONE as u64;
        for key in 0..marked + 100 {
            lead(flights.join(key)).land_unshareable();
        }
        // Past the bound a key leaves no mark; the first ones still go alone.
        assert_eq!(flights.len(), MAX_ALONE);
        assert!(matches!(flights.join(7), Joined::Alone));
        let _fresh = lead(flights.join(marked + 50));
        // Once the marks have ended, the next mark clears them: nothing is scanned per request.
        tokio::time::advance(ALONE_FOR).await;
        lead(flights.join(u64::MAX)).land_unshareable();
        assert_eq!(flights.len(), 2, "the new mark and the flight in the air");
        assert!(matches!(flights.join(u64::MAX), Joined::Alone));
        assert!(matches!(flights.join(7), Joined::Lead(_)));
    }

    #[test]
    fn the_key_is_the_same_whatever_the_order_of_the_headers() {
        let flights = Flights::<&str>::default();
        let one = request(
            Method::GET,
            &[
                ("accept", "text/html"),
                ("accept-language", "fr"),
                ("x-a", "1"),
            ],
        );
        let other = request(
            Method::GET,
            &[
                ("x-a", "1"),
                ("accept-language", "fr"),
                ("accept", "text/html"),
            ],
        );
        let key = |head: &Parts| flights.key(head, "http://a.test/");
        assert_eq!(key(&one), key(&other));
        let twice = request(Method::GET, &[("accept", "text/html"), ("accept", "*/*")]);
        assert!(key(&twice).is_some());
        let reversed = request(Method::GET, &[("accept", "*/*"), ("accept", "text/html")]);
        assert_ne!(
            key(&twice),
            key(&reversed),
            "values in another order are another request"
        );
        assert_ne!(
            key(&one),
            key(&request(Method::GET, &[("accept", "text/html")]))
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

    /// Whether an answer with these parts may be shared, its directives read as the answer phase
    /// reads them.
    fn shares(parts: &response::Parts) -> bool {
        shareable(parts, &Directives::of(&parts.headers))
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
        assert!(shares(&parts(&[
            ("cache-control", "max-age=60"),
            ("vary", "Accept-Encoding")
        ])));
        assert!(shares(&parts(&[])));
        for personal in [
            ("cache-control", "private"),
            ("cache-control", "no-store"),
            ("set-cookie", "a=1"),
            ("vary", "user-agent"),
            ("vary", "*"),
        ] {
            assert!(!shares(&parts(&[personal])), "{personal:?}");
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
        let mut share = Share::start(
            lead,
            &parts(&[("content-type", "text/plain")]),
            &Directives::default(),
        )
        .unwrap();
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
        let mut share = Share::start(lead, &parts(&[]), &Directives::default()).unwrap();
        assert!(!share.write(&vec![0; MAX_SHARED_BYTES + 1]));
        drop(share);
        assert!(follower.answer(Duration::from_secs(1)).await.is_none());
        // Nobody follows yet: nothing is copied, and the flight is over.
        let Joined::Lead(lead) = flights.join(3) else {
            panic!()
        };
        assert!(Share::start(lead, &parts(&[]), &Directives::default()).is_none());
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
