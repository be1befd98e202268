//! One origin request for many (as Squid's `collapsed_forwarding` and nginx's `proxy_cache_lock`
//! do): the first of several identical requests in flight at once leads and goes to the origin;
//! the others follow, wait for the leader's answer and share it, taking no turn of the host's
//! budget. A leader that goes away unanswered, or whose answer may not be shared, sends its
//! followers on their own way; a follower waits at most its bound, then goes too.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

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

/// The requests in flight that others may follow, by key (the request's method, URL, the part of
/// the store it may use, and the headers answers commonly vary on).
pub(crate) struct Flights<T> {
    table: Arc<Mutex<HashMap<String, watch::Receiver<Landing<T>>>>>,
}

impl<T> Default for Flights<T> {
    fn default() -> Self {
        Flights {
            table: Arc::new(Mutex::new(HashMap::new())),
        }
    }
}

impl<T> std::fmt::Debug for Flights<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Flights")
            .field("in_flight", &lock(&self.table).len())
            .finish()
    }
}

/// A request's place in a flight.
pub(crate) enum Joined<T> {
    /// The first: it asks the origin, then lands the flight ([`Lead::land`]).
    Lead(Lead<T>),
    /// Another is asking: wait for its answer ([`Follow::answer`]).
    Follow(Follow<T>),
}

impl<T> Flights<T> {
    /// Joins the flight of `key`, leading it when there is none.
    pub(crate) fn join(&self, key: String) -> Joined<T> {
        let mut table = lock(&self.table);
        if let Some(landing) = table.get(&key) {
            if matches!(*landing.borrow(), Landing::Pending) {
                return Joined::Follow(Follow {
                    landing: landing.clone(),
                });
            }
        }
        let (sender, landing) = watch::channel(Landing::Pending);
        table.insert(key.clone(), landing);
        Joined::Lead(Lead {
            table: self.table.clone(),
            key,
            sender: Some(sender),
        })
    }

    /// How many flights are in the air (the tests check that each one ends).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        lock(&self.table).len()
    }
}

/// The leader of a flight. Dropped without landing, it sends its followers on their own way.
pub(crate) struct Lead<T> {
    table: Arc<Mutex<HashMap<String, watch::Receiver<Landing<T>>>>>,
    key: String,
    sender: Option<watch::Sender<Landing<T>>>,
}

impl<T> Lead<T> {
    /// Ends the flight with `answer` for every follower (`None`: nothing to share, each asks for
    /// itself). Requests that come after it start a flight of their own.
    pub(crate) fn land(mut self, answer: Option<T>) {
        self.end(match answer {
            Some(answer) => Landing::Shared(Arc::new(answer)),
            None => Landing::Alone,
        });
    }

    /// Whether any request follows this one.
    pub(crate) fn followed(&self) -> bool {
        self.sender
            .as_ref()
            .is_some_and(|sender| sender.receiver_count() > 1)
    }

    fn end(&mut self, landing: Landing<T>) {
        let Some(sender) = self.sender.take() else {
            return;
        };
        {
            let mut table = lock(&self.table);
            // Only this flight's entry: a later one under the same key is not ours to remove.
            if table
                .get(&self.key)
                .is_some_and(|found| found.same_channel(&sender.subscribe()))
            {
                table.remove(&self.key);
            }
        }
        sender.send_replace(landing);
    }
}

impl<T> Drop for Lead<T> {
    fn drop(&mut self) {
        self.end(Landing::Alone);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn lead(joined: Joined<&'static str>) -> Lead<&'static str> {
        match joined {
            Joined::Lead(lead) => lead,
            Joined::Follow(_) => panic!("expected to lead"),
        }
    }

    fn follow(joined: Joined<&'static str>) -> Follow<&'static str> {
        match joined {
            Joined::Follow(follow) => follow,
            Joined::Lead(_) => panic!("expected to follow"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn one_leads_the_others_share_its_answer() {
        let flights = Flights::default();
        let leader = lead(flights.join("GET a".into()));
        assert!(!leader.followed());
        let followers: Vec<_> = (0..15)
            .map(|_| follow(flights.join("GET a".into())))
            .collect();
        assert!(leader.followed());
        // Another key is another flight.
        let other = lead(flights.join("GET b".into()));
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
        let _next = lead(flights.join("GET a".into()));
    }

    #[tokio::test(start_paused = true)]
    async fn followers_go_alone_when_there_is_nothing_to_share_or_the_leader_is_gone() {
        let flights = Flights::default();
        let leader = lead(flights.join("k".into()));
        let follower = follow(flights.join("k".into()));
        leader.land(None);
        assert_eq!(follower.answer(Duration::from_secs(60)).await, None);
        let leader = lead(flights.join("k".into()));
        let follower = follow(flights.join("k".into()));
        drop(leader);
        assert_eq!(follower.answer(Duration::from_secs(60)).await, None);
        assert_eq!(flights.len(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_follower_waits_at_most_its_bound() {
        let flights = Flights::default();
        let leader = lead(flights.join("k".into()));
        let follower = follow(flights.join("k".into()));
        let started = tokio::time::Instant::now();
        assert_eq!(follower.answer(Duration::from_secs(30)).await, None);
        assert_eq!(started.elapsed(), Duration::from_secs(30));
        // The leader, still in flight, is still followed by newcomers and still lands.
        let late = follow(flights.join("k".into()));
        leader.land(Some("late"));
        assert_eq!(
            late.answer(Duration::from_secs(1)).await.as_deref(),
            Some(&"late")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_old_leader_does_not_end_a_newer_flight() {
        let flights = Flights::default();
        let first = lead(flights.join("k".into()));
        // The first flight's entry is replaced only once it has landed; simulate a leader that
        // lands while a newer flight of the same key is in the air.
        first.land(Some("one"));
        let second = lead(flights.join("k".into()));
        let follower = follow(flights.join("k".into()));
        assert_eq!(flights.len(), 1);
        second.land(Some("two"));
        assert_eq!(
            follower.answer(Duration::from_secs(1)).await.as_deref(),
            Some(&"two")
        );
    }
}
