//! One host's waiting line, fair between jobs: [`Lanes`] hands the host's turns to the jobs that
//! have requests waiting in proportion to their weights, so that one job queuing a hundred
//! requests no longer makes another job's single request wait behind all of them.
//!
//! # Between jobs: stride scheduling (start-time fair queuing with unit-cost turns)
//!
//! Every job with items waiting has a *lane* holding a `pass` (virtual time). The next turn goes
//! to the lane with the lowest pass; ties go to the lane that started waiting first. Serving a
//! lane adds `1 / weight` to its pass. The queue's virtual time is the pass at which the last
//! turn was served (it never goes back); a job that starts waiting (had nothing waiting) starts at
//! the virtual time, so it cannot claim credit for the time it was idle, and is not penalised
//! for it either. A job that waits alone gets every turn. A job with nothing waiting keeps no
//! lane: memory is bounded by the number of items waiting.
//!
//! **Fairness bound.** Every waiting lane's pass lies in `[vtime, vtime + 1/weight]` of its own
//! weight, so for two jobs `i`, `j` both waiting throughout any stretch of turns,
//! `|served_i / w_i - served_j / w_j| <= 1 / w_i + 1 / w_j`: a job is never more than about one
//! turn away from its exact share, however long the stretch.
//!
//! **Cost.** Finding the next lane is a linear scan over the lanes waiting (`O(jobs waiting)`),
//! and so is finding a job's lane on a push. A heap would make the pop `O(log n)`, but a push
//! would still need a name index to avoid the scan, and either one costs memory in every one of
//! possibly a million idle hosts and pushes [`Lanes`] past the 32 bytes of the `VecDeque` it replaces (the `Host` of every known host must stay within 320 bytes). Jobs per host are few (a
//! handful of crawl jobs), the scan reads one small array, and with one job it is a single
//! comparison: the common case costs about what a `VecDeque` push and pop cost
//! (`benches/LANES_RESULTS.md` has the figures for 1, 10 and 1,000 jobs).
//!
//! # Within a job: priority classes that cannot starve
//!
//! A job's turns go to its classes High, then Normal, then Low, FIFO within a class, except that
//! a class that waits is never passed over more than 3 turns of its job in a row. Precisely:
//! each waiting Normal or Low class counts the turns of its job served to *other* classes since
//! it last got one (or since it started waiting); its *slack* is `3 - count`. At each turn of the
//! job, the waiting lower classes are ordered by slack (ties: Normal first); the first of them is
//! served if its slack is 0, or if both wait and the second's slack is at most 1 (so that both
//! deadlines can be met); otherwise the highest waiting class is served. Hence every waiting
//! class gets at least 1 of every 4 consecutive turns of its job (a higher class takes at most 3
//! of 4): behind an endless High stream a waiting Low class gets every fourth turn, and with all
//! three classes backlogged the turns run High, High, Normal, Low. Priority only orders a job's
//! own turns: it never gives a job more than its share against other jobs.
//!
//! Taking an item without a turn (`discard_front`, `remove_first`) charges nothing: neither the
//! job's pass nor the classes' counts move.

use std::collections::VecDeque;
use std::sync::Arc;

pub use crate::config::Priority;

/// The job of requests that name none (`crate::budget::jobs` names jobs; the queue needs only this one).
pub const ANONYMOUS: &str = "anonymous";

/// The slot of a priority class in a lane (0 is served first).
fn index(priority: Priority) -> usize {
    match priority {
        Priority::High => 0,
        Priority::Normal => 1,
        Priority::Low => 2,
    }
}

/// A job as the queue sees it: who shares the host's turns, and how large its share is.
#[derive(Debug, Clone, PartialEq)]
pub struct JobTag {
    /// The job's identity: two tags with the same name are the same job.
    pub name: Arc<str>,
    /// The job's share relative to the other jobs waiting (the latest push's weight wins).
    pub weight: f64,
}

impl JobTag {
    /// The smallest and largest weights honoured: beyond them a pass would stop moving in `f64`
    /// (a job taking every turn) or leap out of reach.
    const WEIGHT_RANGE: (f64, f64) = (1.0 / 1024.0, 1024.0);

    /// A tag for the job `name` with share `weight`.
    pub fn new(name: impl Into<Arc<str>>, weight: f64) -> JobTag {
        JobTag {
            name: name.into(),
            weight,
        }
    }

    /// How far a turn moves the job's pass: `1 / weight`, a weight that is not a positive finite
    /// number counting as 1 and the weight kept within `WEIGHT_RANGE`.
    fn stride(&self) -> f64 {
        let weight = if self.weight.is_finite() && self.weight > 0.0 {
            self.weight
                .clamp(Self::WEIGHT_RANGE.0, Self::WEIGHT_RANGE.1)
        } else {
            1.0
        };
        1.0 / weight
    }
}

/// The turns a class may be passed over in a row while it waits (so it gets 1 turn in 4).
const MAX_PASSED_OVER: u8 = 3;

/// One job's waiting items and its place in the schedule; exists only while the job has items
/// waiting.
#[derive(Debug)]
struct Lane<T> {
    /// The job's virtual time: the lowest pass gets the next turn.
    pass: f64,
    /// When the job last got a turn of this host while waiting (`None`: not since its lane
    /// began): how long the job has waited for its next turn, for the store's waiting list.
    served_at: Option<tokio::time::Instant>,
    /// Order of arrival among the lanes waiting: breaks ties of `pass`.
    seq: u64,
    /// `1 / weight`: what a turn adds to `pass`.
    stride: f64,
    name: Arc<str>,
    /// The job's items by class (High, Normal, Low), FIFO within each.
    classes: [VecDeque<T>; 3],
    /// For Normal and Low: turns of this job served to other classes while it waited.
    passed_over: [u8; 2],
}

impl<T> Lane<T> {
    fn len(&self) -> usize {
        self.classes.iter().map(VecDeque::len).sum()
    }

    fn is_empty(&self) -> bool {
        self.classes.iter().all(VecDeque::is_empty)
    }

    /// The class whose front item gets the job's next turn (see the module's rule).
    fn next_class(&self) -> Option<usize> {
        let top = self.classes.iter().position(|q| !q.is_empty())?;
        // Lower classes waiting, as (slack, class); at most two.
        let mut lower = [(u8::MAX, 0usize); 2];
        let mut n = 0;
        for c in (top + 1)..3 {
            if !self.classes[c].is_empty() {
                lower[n] = (MAX_PASSED_OVER.saturating_sub(self.passed_over[c - 1]), c);
                n += 1;
            }
        }
        if n == 0 {
            return Some(top);
        }
        if n == 2 && lower[1].0 < lower[0].0 {
            lower.swap(0, 1);
        }
        if lower[0].0 == 0 || (n == 2 && lower[1].0 <= 1) {
            Some(lower[0].1)
        } else {
            Some(top)
        }
    }

    /// Counts a turn served to class `served` against the other lower classes waiting.
    fn count_turn(&mut self, served: usize) {
        for c in 1..3 {
            let count = &mut self.passed_over[c - 1];
            if c == served || self.classes[c].is_empty() {
                *count = 0;
            } else {
                *count = count.saturating_add(1);
            }
        }
    }

    /// Forgets the count of class `c` if it has nothing waiting any more.
    fn settle(&mut self, c: usize) {
        if c > 0 && self.classes[c].is_empty() {
            self.passed_over[c - 1] = 0;
        }
    }
}

/// A host's waiting items, handed out fairly between jobs by weight and by priority within a
/// job (see the module's documentation for the exact rules and bound). Replaces the host's plain
/// FIFO; an empty one, after [`Lanes::shrink`], holds no heap memory.
#[derive(Debug)]
pub struct Lanes<T> {
    /// The jobs with items waiting, in no particular order (`Lane::seq` keeps the arrival order).
    lanes: Vec<Lane<T>>,
    /// The pass at which the last turn was served; where a job that starts waiting starts.
    vtime: f64,
}

impl<T> Default for Lanes<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Lanes<T> {
    /// An empty queue; allocates nothing.
    pub fn new() -> Self {
        Lanes {
            lanes: Vec::new(),
            vtime: 0.0,
        }
    }

    /// Puts `item` at the back of `job`'s class `priority`; a job that had nothing waiting starts
    /// at the current virtual time.
    pub fn push(&mut self, job: &JobTag, priority: Priority, item: T) {
        let stride = job.stride();
        let mut next_seq = 0;
        let mut found = None;
        for (i, lane) in self.lanes.iter().enumerate() {
            if Arc::ptr_eq(&lane.name, &job.name) || *lane.name == *job.name {
                found = Some(i);
                break;
            }
            next_seq = next_seq.max(lane.seq + 1);
        }
        let lane = match found {
            Some(i) => &mut self.lanes[i],
            None => {
                self.lanes.push(Lane {
                    pass: self.vtime,
                    served_at: None,
                    seq: next_seq,
                    stride,
                    name: job.name.clone(),
                    classes: [VecDeque::new(), VecDeque::new(), VecDeque::new()],
                    passed_over: [0; 2],
                });
                let last = self.lanes.len() - 1;
                &mut self.lanes[last]
            }
        };
        lane.stride = stride;
        lane.classes[index(priority)].push_back(item);
    }

    /// Whether `job` has items waiting (a lane exists only while it has).
    pub fn waiting_for(&self, job: &JobTag) -> bool {
        self.lanes
            .iter()
            .any(|lane| Arc::ptr_eq(&lane.name, &job.name) || *lane.name == *job.name)
    }

    /// Where the next turn goes: (lane, class).
    fn pick(&self) -> Option<(usize, usize)> {
        let mut best = 0;
        let mut best_lane = self.lanes.first()?;
        for (i, lane) in self.lanes.iter().enumerate().skip(1) {
            if lane.pass < best_lane.pass
                || (lane.pass == best_lane.pass && lane.seq < best_lane.seq)
            {
                best = i;
                best_lane = lane;
            }
        }
        Some((best, best_lane.next_class()?))
    }

    /// The item [`Lanes::pop_front`] would return now.
    pub fn front(&self) -> Option<&T> {
        let (lane, class) = self.pick()?;
        self.lanes[lane].classes[class].front()
    }

    /// The item whose turn is next, with when its job last got a turn while waiting (`None`:
    /// not since its lane began). The item has waited for its job's turn since the later of that
    /// and its own arrival; across instances on a shared store an instance is placed by that wait,
    /// so that a job flooding one instance does not hold back another job's request on another.
    pub fn front_with_served_at(&self) -> Option<(&T, Option<tokio::time::Instant>)> {
        let (lane, class) = self.pick()?;
        let lane = &self.lanes[lane];
        Some((lane.classes[class].front()?, lane.served_at))
    }

    /// Takes the item whose turn it is, charging its job one turn.
    pub fn pop_front(&mut self) -> Option<T> {
        let (i, class) = self.pick()?;
        let lane = &mut self.lanes[i];
        let item = lane.classes[class].pop_front()?;
        self.vtime = self.vtime.max(lane.pass);
        lane.pass += lane.stride;
        lane.served_at = Some(tokio::time::Instant::now());
        lane.count_turn(class);
        self.took(i);
        Some(item)
    }

    /// Takes the item whose turn it is without charging its job (a waiter whose client went
    /// away is dropped this way: it used no turn).
    pub fn discard_front(&mut self) -> Option<T> {
        let (i, class) = self.pick()?;
        let lane = &mut self.lanes[i];
        let item = lane.classes[class].pop_front()?;
        lane.settle(class);
        self.took(i);
        Some(item)
    }

    /// Takes the first item matching `pred`, of any job and class, without charging its job
    /// (a waiting request cancelled by id). "First" is in storage order, not serving order.
    pub fn remove_first(&mut self, mut pred: impl FnMut(&T) -> bool) -> Option<T> {
        for i in 0..self.lanes.len() {
            let lane = &mut self.lanes[i];
            for class in 0..3 {
                if let Some(pos) = lane.classes[class].iter().position(&mut pred) {
                    let item = lane.classes[class].remove(pos)?;
                    lane.settle(class);
                    self.took(i);
                    return Some(item);
                }
            }
        }
        None
    }

    /// Room for one more item of `job` in a queue of at most `room` items that is full: the
    /// lane of the job holding the most over its weighted share, if `job` itself holds less than
    /// its own (invariant 15: queue room is shared like turns). The shares are of `room`, by
    /// weight, among the jobs waiting and `job`; a job alone may fill the queue. `None`: `job` is
    /// at or over its share, or nobody else is over theirs, and the newcomer is the one refused.
    pub fn over_share(&self, job: &JobTag, room: usize) -> Option<usize> {
        let newcomer_weight = 1.0 / job.stride();
        let mut total_weight = 0.0;
        let mut newcomer_held = 0usize;
        let mut newcomer_waits = false;
        for lane in &self.lanes {
            total_weight += 1.0 / lane.stride;
            if Arc::ptr_eq(&lane.name, &job.name) || *lane.name == *job.name {
                newcomer_held = lane.len();
                newcomer_waits = true;
            }
        }
        if !newcomer_waits {
            total_weight += newcomer_weight;
        }
        let share = |weight: f64| room as f64 * weight / total_weight;
        if (newcomer_held + 1) as f64 > share(newcomer_weight) {
            return None;
        }
        let mut most: Option<(usize, f64)> = None;
        for (i, lane) in self.lanes.iter().enumerate() {
            let over = lane.len() as f64 / share(1.0 / lane.stride);
            if over > 1.0 && most.is_none_or(|(_, m)| over > m) {
                most = Some((i, over));
            }
        }
        most.map(|(i, _)| i)
    }

    /// Takes the item of lane `lane` that would be served last (the back of its lowest class
    /// waiting), without charging its job: the place a job over its share of the queue gives up.
    pub fn pop_back_of(&mut self, lane: usize) -> Option<T> {
        let l = self.lanes.get_mut(lane)?;
        let class = (0..3).rev().find(|&c| !l.classes[c].is_empty())?;
        let item = l.classes[class].pop_back()?;
        l.settle(class);
        self.took(lane);
        Some(item)
    }

    /// Takes every item matching `pred`, of any job and class, without charging any job (the
    /// requests a cooldown refuses); the rest keep their places and their order.
    pub fn take_where(&mut self, mut pred: impl FnMut(&T) -> bool) -> Vec<T> {
        let mut taken = Vec::new();
        for lane in &mut self.lanes {
            for class in 0..3 {
                if !lane.classes[class].iter().any(&mut pred) {
                    continue;
                }
                let items = std::mem::take(&mut lane.classes[class]);
                for item in items {
                    if pred(&item) {
                        taken.push(item);
                    } else {
                        lane.classes[class].push_back(item);
                    }
                }
                lane.settle(class);
            }
        }
        self.lanes.retain(|lane| !lane.is_empty());
        if self.lanes.is_empty() {
            self.vtime = 0.0;
        }
        taken
    }

    /// Bookkeeping after an item left lane `i`: an emptied lane goes, an emptied queue forgets
    /// its virtual time (nobody waits to be compared with).
    fn took(&mut self, i: usize) {
        if self.lanes[i].is_empty() {
            self.lanes.swap_remove(i);
            if self.lanes.is_empty() {
                self.vtime = 0.0;
            }
        }
    }

    /// Takes every item (shutdown refuses them all), in no particular order, and gives back the
    /// buffers.
    pub fn drain(&mut self) -> Vec<T> {
        let lanes = std::mem::take(&mut self.lanes);
        let mut items = Vec::with_capacity(lanes.iter().map(Lane::len).sum());
        for lane in lanes {
            for class in lane.classes {
                items.extend(class);
            }
        }
        self.vtime = 0.0;
        items
    }

    /// Items waiting, all jobs together (a sum over the jobs waiting: one, mostly).
    pub fn len(&self) -> usize {
        self.lanes.iter().map(Lane::len).sum()
    }

    /// Whether nothing waits (a lane exists only while its job has items waiting).
    pub fn is_empty(&self) -> bool {
        self.lanes.is_empty()
    }

    /// Every item waiting, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &T> + '_ {
        self.lanes
            .iter()
            .flat_map(|lane| lane.classes.iter().flat_map(VecDeque::iter))
    }

    /// Each job with items waiting and how many (for the admin page), in no particular order.
    pub fn waiting_by_job(&self) -> impl Iterator<Item = (&str, usize)> + '_ {
        self.lanes.iter().map(|lane| (&*lane.name, lane.len()))
    }

    /// Gives back spare buffers: all of them once the queue is empty (a million idle hosts must
    /// cost no heap), the slack of each buffer otherwise.
    pub fn shrink(&mut self) {
        if self.lanes.is_empty() {
            self.lanes = Vec::new();
        } else {
            self.lanes.shrink_to_fit();
            for lane in &mut self.lanes {
                for class in &mut lane.classes {
                    class.shrink_to_fit();
                }
            }
        }
    }

    /// Whether the queue holds any heap memory (false for a new queue, and for an empty one after
    /// [`Lanes::shrink`] or [`Lanes::drain`]).
    pub fn holds_memory(&self) -> bool {
        self.lanes.capacity() > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ConfigWord as _;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use std::collections::HashMap;

    fn job(name: &str, weight: f64) -> JobTag {
        JobTag::new(name, weight)
    }

    /// Pops `n` items and counts them by job, the item being `(job name, seq)`.
    fn pop_counts(q: &mut Lanes<(&'static str, u32)>, n: usize) -> HashMap<&'static str, usize> {
        let mut counts = HashMap::new();
        for _ in 0..n {
            let front = q.front().copied();
            let item = q.pop_front().expect("backlogged");
            assert_eq!(front, Some(item), "front() is what pop_front() returns");
            *counts.entry(item.0).or_insert(0) += 1;
        }
        counts
    }

    /// Keeps each named job backlogged with `depth` Normal items.
    fn refill(q: &mut Lanes<(&'static str, u32)>, jobs: &[(&'static str, f64)], depth: usize) {
        for &(name, w) in jobs {
            let tag = job(name, w);
            let have = q
                .waiting_by_job()
                .find(|(n, _)| *n == name)
                .map_or(0, |(_, k)| k);
            for i in have..depth {
                q.push(&tag, Priority::Normal, (name, i as u32));
            }
        }
    }

    #[test]
    fn priority_words_round_trip() {
        assert_eq!(Priority::from_header(" HIGH "), Some(Priority::High));
        assert_eq!(Priority::from_header("Normal"), Some(Priority::Normal));
        assert_eq!(Priority::from_header("low\t"), Some(Priority::Low));
        assert_eq!(Priority::from_header("urgent"), None);
        assert_eq!(Priority::from_header(""), None);
        assert_eq!(Priority::default(), Priority::Normal);
        for p in [Priority::High, Priority::Normal, Priority::Low] {
            assert_eq!(Priority::from_header(p.word()), Some(p));
        }
    }

    #[test]
    fn bad_weights_count_as_one_and_extremes_are_clamped() {
        assert_eq!(job("a", f64::NAN).stride(), 1.0);
        assert_eq!(job("a", f64::INFINITY).stride(), 1.0);
        assert_eq!(job("a", 0.0).stride(), 1.0);
        assert_eq!(job("a", -3.0).stride(), 1.0);
        assert_eq!(job("a", 4.0).stride(), 0.25);
        assert_eq!(job("a", 1e300).stride(), 1.0 / 1024.0);
        assert_eq!(job("a", 1e-300).stride(), 1024.0);
    }

    #[test]
    fn small_and_empty_holds_no_memory() {
        assert!(std::mem::size_of::<Lanes<u64>>() <= 32);
        assert!(std::mem::size_of::<Lanes<[u64; 8]>>() <= 32);
        let q: Lanes<u64> = Lanes::new();
        assert!(!q.holds_memory());
    }

    #[test]
    fn one_job_is_fifo_like_a_vecdeque() {
        let mut q = Lanes::new();
        let mut model = VecDeque::new();
        let a = job("a", 1.0);
        let mut rng = StdRng::seed_from_u64(1);
        let mut next = 0u32;
        for _ in 0..2_000 {
            if rng.random_bool(0.6) {
                q.push(&a, Priority::Normal, next);
                model.push_back(next);
                next += 1;
            } else {
                assert_eq!(q.front(), model.front());
                assert_eq!(q.pop_front(), model.pop_front());
            }
            assert_eq!(q.len(), model.len());
        }
        let rest: Vec<u32> = std::iter::from_fn(|| q.pop_front()).collect();
        assert_eq!(rest, model.into_iter().collect::<Vec<_>>());
    }

    #[test]
    fn a_late_single_request_is_not_stuck_behind_a_burst() {
        let mut q = Lanes::new();
        for i in 0..100 {
            q.push(&job("a", 1.0), Priority::Normal, ("a", i));
        }
        q.push(&job("b", 1.0), Priority::Normal, ("b", 0));
        let first_two = [q.pop_front(), q.pop_front()];
        assert!(first_two.contains(&Some(("b", 0))), "{first_two:?}");
        // ... and then A gets every turn, in its own order.
        for i in 1..100 {
            assert_eq!(q.pop_front(), Some(("a", i)));
        }
        assert!(q.is_empty());
    }

    #[test]
    fn weights_three_to_one_split_exactly() {
        let mut q = Lanes::new();
        let jobs = [("a", 3.0), ("b", 1.0)];
        refill(&mut q, &jobs, 10);
        let mut a = 0;
        for _ in 0..400 {
            if q.pop_front().expect("backlogged").0 == "a" {
                a += 1;
            }
            refill(&mut q, &jobs, 10);
        }
        assert!((298..=302).contains(&a), "a got {a} of 400");
        // Over every window of 4 turns, stride gives exactly 3 to A (within one turn).
        let mut window = VecDeque::new();
        for _ in 0..400 {
            window.push_back(q.pop_front().expect("backlogged").0);
            refill(&mut q, &jobs, 10);
            if window.len() > 8 {
                window.pop_front();
            }
            if window.len() == 8 {
                let a = window.iter().filter(|n| **n == "a").count();
                assert!((5..=7).contains(&a), "{window:?}");
            }
        }
    }

    #[test]
    fn three_jobs_one_one_two_and_a_job_that_returns_is_neither_paid_nor_fined() {
        let mut q = Lanes::new();
        let all = [("a", 1.0), ("b", 1.0), ("c", 2.0)];
        refill(&mut q, &all, 20);
        let mut counts = HashMap::new();
        for _ in 0..400 {
            let item = q.pop_front().expect("backlogged");
            *counts.entry(item.0).or_insert(0) += 1;
            refill(&mut q, &all, 20);
        }
        assert!((98..=102).contains(&counts["a"]), "{counts:?}");
        assert!((98..=102).contains(&counts["b"]), "{counts:?}");
        assert!((198..=202).contains(&counts["c"]), "{counts:?}");

        // C leaves: its items are cancelled one by one.
        while q.remove_first(|item| item.0 == "c").is_some() {}
        assert!(q.iter().all(|item| item.0 != "c"));
        let ab = [("a", 1.0), ("b", 1.0)];
        let mut away = HashMap::new();
        for _ in 0..300 {
            let item = q.pop_front().expect("backlogged");
            *away.entry(item.0).or_insert(0) += 1;
            refill(&mut q, &ab, 20);
        }
        assert!((149..=151).contains(&away["a"]), "{away:?}");
        assert!(!away.contains_key("c"));

        // C comes back: from the first turn on it gets its half, no burst for the 300 turns
        // it was away and no penalty either.
        refill(&mut q, &all, 20);
        let mut back = HashMap::new();
        let mut first_c = None;
        for t in 0..40 {
            let item = q.pop_front().expect("backlogged");
            if item.0 == "c" && first_c.is_none() {
                first_c = Some(t);
            }
            *back.entry(item.0).or_insert(0) += 1;
            refill(&mut q, &all, 20);
        }
        assert!(
            first_c.is_some_and(|t| t <= 2),
            "c's first turn {first_c:?}"
        );
        assert!((19..=21).contains(&back["c"]), "{back:?}");
        assert!((9..=11).contains(&back["a"]), "{back:?}");
        assert!((9..=11).contains(&back["b"]), "{back:?}");
    }

    #[test]
    fn a_job_alone_gets_every_turn_and_weight_of_latest_push_wins() {
        let mut q = Lanes::new();
        for i in 0..10 {
            q.push(&job("a", 0.01), Priority::Normal, ("a", i));
        }
        assert_eq!(pop_counts(&mut q, 10)["a"], 10);
        // B's weight goes from 1 to 3 with its latest push: from then on it gets 3 of 4.
        let jobs = [("a", 1.0), ("b", 3.0)];
        refill(&mut q, &[("a", 1.0), ("b", 1.0)], 10);
        refill(&mut q, &jobs, 11);
        let mut b = 0;
        for _ in 0..200 {
            if q.pop_front().expect("backlogged").0 == "b" {
                b += 1;
            }
            refill(&mut q, &jobs, 11);
        }
        assert!((148..=152).contains(&b), "b got {b} of 200");
    }

    #[test]
    fn within_a_job_high_then_normal_then_low_fifo_per_class() {
        let mut q = Lanes::new();
        let a = job("a", 1.0);
        q.push(&a, Priority::Low, "low1");
        q.push(&a, Priority::Normal, "normal1");
        q.push(&a, Priority::High, "high1");
        q.push(&a, Priority::Normal, "normal2");
        q.push(&a, Priority::High, "high2");
        let order: Vec<_> = std::iter::from_fn(|| q.pop_front()).collect();
        // Low has waited 3 turns (high1, high2, normal1): the fourth is its own.
        assert_eq!(order, ["high1", "high2", "normal1", "low1", "normal2"]);

        q.push(&a, Priority::Low, "low");
        q.push(&a, Priority::Normal, "normal");
        q.push(&a, Priority::High, "high");
        let order: Vec<_> = std::iter::from_fn(|| q.pop_front()).collect();
        assert_eq!(order, ["high", "normal", "low"]);

        // FIFO within each class, whatever the interleaving.
        for i in 0..30 {
            let p = [Priority::High, Priority::Normal, Priority::Low][i % 3];
            q.push(&a, p, ["h", "n", "l"][i % 3]);
        }
        let mut seen = Vec::new();
        while let Some(front) = q.front().copied() {
            seen.push(front);
            q.pop_front();
        }
        assert_eq!(seen.len(), 30);
        assert_eq!(&seen[..4], ["h", "h", "n", "l"]);
    }

    #[test]
    fn fifo_within_each_class() {
        let mut q = Lanes::new();
        let a = job("a", 1.0);
        for i in 0..60u32 {
            let p = [Priority::High, Priority::Normal, Priority::Low][(i % 3) as usize];
            q.push(&a, p, (i % 3, i));
        }
        let mut last = [None; 3];
        while let Some((class, i)) = q.pop_front() {
            assert!(last[class as usize] < Some(i), "class {class} out of order");
            last[class as usize] = Some(i);
        }
    }

    #[test]
    fn a_waiting_low_gets_one_of_every_four_turns_behind_endless_high() {
        let mut q = Lanes::new();
        let a = job("a", 1.0);
        for i in 0..10 {
            q.push(&a, Priority::Low, ("low", i));
        }
        let mut high = 0;
        let mut served = Vec::new();
        for _ in 0..40 {
            while q.iter().filter(|i| i.0 == "high").count() < 5 {
                q.push(&a, Priority::High, ("high", high));
                high += 1;
            }
            served.push(q.pop_front().expect("waiting").0);
        }
        for w in served.windows(4) {
            assert_eq!(w.iter().filter(|c| **c == "low").count(), 1, "{served:?}");
        }
        assert_eq!(served.iter().filter(|c| **c == "low").count(), 10);
    }

    #[test]
    fn three_classes_backlogged_run_high_high_normal_low() {
        let mut q = Lanes::new();
        let a = job("a", 1.0);
        let mut served = Vec::new();
        for _ in 0..80 {
            for (p, name) in [
                (Priority::High, "H"),
                (Priority::Normal, "N"),
                (Priority::Low, "L"),
            ] {
                if !q.iter().any(|c| *c == name) {
                    q.push(&a, p, name);
                }
            }
            served.push(q.pop_front().expect("waiting"));
        }
        // Every waiting lower class gets at least one turn in every 4.
        for w in served.windows(4) {
            assert!(w.contains(&"N") && w.contains(&"L"), "{served:?}");
        }
        assert_eq!(served.iter().filter(|c| **c == "H").count(), 40);
        assert_eq!(served.iter().filter(|c| **c == "N").count(), 20);
        assert_eq!(served.iter().filter(|c| **c == "L").count(), 20);
        assert_eq!(served[..4], ["H", "H", "N", "L"]);
    }

    #[test]
    fn priority_never_takes_another_jobs_share() {
        let mut q = Lanes::new();
        let (a, b) = (job("a", 1.0), job("b", 1.0));
        let mut counts = HashMap::new();
        for i in 0..400 {
            while q.iter().filter(|x: &&(&str, u32)| x.0 == "a").count() < 5 {
                q.push(&a, Priority::High, ("a", i));
            }
            while q.iter().filter(|x| x.0 == "b").count() < 5 {
                q.push(&b, Priority::Low, ("b", i));
            }
            *counts.entry(q.pop_front().expect("waiting").0).or_insert(0) += 1;
        }
        assert_eq!(counts["a"], 200, "{counts:?}");
        assert_eq!(counts["b"], 200, "{counts:?}");
    }

    #[test]
    fn queue_room_is_shared_by_weight_and_a_job_alone_fills_it() {
        let mut q: Lanes<(&'static str, u32)> = Lanes::new();
        let (a, b, c) = (job("a", 1.0), job("b", 1.0), job("c", 2.0));
        // Alone, a job may fill the room (8): there is nobody else to give it to.
        for i in 0..8 {
            assert_eq!(q.over_share(&a, 8), None, "a alone");
            q.push(&a, Priority::Normal, ("a", i));
        }
        // B's share of 8 is 4 (weights 1:1): A, over its share, gives up its last place.
        let over = q.over_share(&b, 8).expect("A is over its share");
        assert_eq!(q.pop_back_of(over), Some(("a", 7)));
        q.push(&b, Priority::Normal, ("b", 0));
        // A is over its share while B waits: it gets no more room.
        assert_eq!(q.over_share(&a, 8), None);
        // C (weight 2) is due half of the room among three jobs: 4 places.
        for i in 0..4 {
            let over = q.over_share(&c, 8).expect("A is over its share");
            assert_eq!(q.pop_back_of(over).map(|x| x.0), Some("a"));
            q.push(&c, Priority::Normal, ("c", i));
        }
        assert_eq!(q.over_share(&c, 8), None, "C holds its share");
        let held: HashMap<_, _> = q.waiting_by_job().collect();
        assert_eq!(held, HashMap::from([("a", 3), ("b", 1), ("c", 4)]));
        // Giving up places charged nothing: A, B and C still take turns by weight.
        assert_eq!(q.len(), 8);
    }

    #[test]
    fn the_place_given_up_is_the_last_to_be_served() {
        let mut q: Lanes<u32> = Lanes::new();
        let a = job("a", 1.0);
        q.push(&a, Priority::High, 1);
        q.push(&a, Priority::Low, 2);
        q.push(&a, Priority::Normal, 3);
        q.push(&a, Priority::Low, 4);
        assert_eq!(q.pop_back_of(0), Some(4));
        assert_eq!(q.pop_back_of(0), Some(2));
        assert_eq!(q.pop_back_of(0), Some(3));
        assert_eq!(q.pop_back_of(0), Some(1));
        assert!(q.is_empty());
        assert_eq!(q.pop_back_of(0), None);
    }

    #[test]
    fn discard_and_remove_charge_nothing() {
        // Reference: A and B alternate exactly.
        let jobs = [("a", 1.0), ("b", 1.0)];
        let mut q = Lanes::new();
        refill(&mut q, &jobs, 10);
        // Throw away 50 of A's items from the front and cancel 30 of B's: no turns used.
        let mut discarded = 0;
        while discarded < 50 {
            if q.front().is_some_and(|i| i.0 == "a") {
                let front = q.front().copied();
                assert_eq!(q.discard_front(), front);
                discarded += 1;
            } else {
                assert!(q.remove_first(|i| i.0 == "b").is_some());
            }
            refill(&mut q, &jobs, 10);
        }
        for _ in 0..30 {
            assert!(q.remove_first(|i| i.0 == "b").is_some());
            refill(&mut q, &jobs, 10);
        }
        // The shares afterwards are still exactly 1:1, A first (no one was charged).
        let mut served = Vec::new();
        for _ in 0..100 {
            served.push(q.pop_front().expect("backlogged").0);
            refill(&mut q, &jobs, 10);
        }
        assert_eq!(served.iter().filter(|n| **n == "a").count(), 50);
        for pair in served.chunks(2) {
            assert!(pair.contains(&"a") && pair.contains(&"b"), "{served:?}");
        }
    }

    #[test]
    fn discard_does_not_use_a_priority_turn() {
        let mut q = Lanes::new();
        let a = job("a", 1.0);
        q.push(&a, Priority::Low, "low");
        for _ in 0..10 {
            q.push(&a, Priority::High, "high");
        }
        assert_eq!(q.pop_front(), Some("high"));
        assert_eq!(q.pop_front(), Some("high"));
        // Two discards of High are no turns: Low still comes after the third served High.
        assert_eq!(q.discard_front(), Some("high"));
        assert_eq!(q.discard_front(), Some("high"));
        assert_eq!(q.pop_front(), Some("high"));
        assert_eq!(q.pop_front(), Some("low"));
    }

    fn served_at<T>(q: &Lanes<T>) -> Option<tokio::time::Instant> {
        q.front_with_served_at().and_then(|(_, at)| at)
    }

    #[tokio::test(start_paused = true)]
    async fn the_next_jobs_last_turn_is_known() {
        let mut q = Lanes::new();
        q.push(&job("a", 1.0), Priority::Normal, 1);
        q.push(&job("a", 1.0), Priority::Normal, 2);
        assert_eq!(served_at(&q), None, "not served since it began waiting");
        tokio::time::advance(std::time::Duration::from_secs(3)).await;
        let served = tokio::time::Instant::now();
        q.pop_front();
        assert_eq!(served_at(&q), Some(served));
        // B starts waiting at the virtual time A has passed: its turn is next, and it has had none.
        q.push(&job("b", 1.0), Priority::Normal, 3);
        assert_eq!(q.front(), Some(&3));
        assert_eq!(served_at(&q), None, "b has not been served yet");
    }

    #[test]
    fn take_where_takes_the_matching_and_keeps_the_order_of_the_rest() {
        let mut q = Lanes::new();
        for i in 0..6u32 {
            q.push(&job("a", 1.0), Priority::Normal, i);
            q.push(&job("b", 1.0), Priority::Low, 10 + i);
        }
        let mut taken = q.take_where(|x| x % 2 == 0);
        taken.sort_unstable();
        assert_eq!(taken, [0, 2, 4, 10, 12, 14]);
        assert_eq!(q.len(), 6);
        let mut a = Vec::new();
        while let Some(x) = q.pop_front() {
            if x < 10 {
                a.push(x);
            }
        }
        assert_eq!(a, [1, 3, 5]);
        assert!(q.take_where(|_| true).is_empty() && q.is_empty());
    }

    #[test]
    fn remove_first_finds_any_job_and_class() {
        let mut q = Lanes::new();
        q.push(&job("a", 1.0), Priority::High, 1);
        q.push(&job("b", 1.0), Priority::Low, 2);
        q.push(&job("b", 1.0), Priority::Normal, 3);
        assert_eq!(q.remove_first(|i| *i == 2), Some(2));
        assert_eq!(q.remove_first(|i| *i == 2), None);
        assert_eq!(q.len(), 2);
        let mut by_job: Vec<_> = q.waiting_by_job().collect();
        by_job.sort();
        assert_eq!(by_job, [("a", 1), ("b", 1)]);
    }

    #[test]
    fn drain_returns_everything_and_shrink_gives_back_memory() {
        let mut q = Lanes::new();
        for i in 0..300u32 {
            let name = ["a", "b", "c"][i as usize % 3];
            let p = [Priority::High, Priority::Normal, Priority::Low][i as usize % 7 % 3];
            q.push(&job(name, 1.0), p, i);
        }
        assert_eq!(q.len(), 300);
        let mut all = q.drain();
        all.sort_unstable();
        assert_eq!(all, (0..300).collect::<Vec<_>>());
        assert!(q.is_empty());
        assert_eq!(q.len(), 0);
        assert!(!q.holds_memory(), "drain gives the buffers back");

        for i in 0..50 {
            q.push(&job(&format!("j{i}"), 1.0), Priority::Normal, i);
        }
        while q.pop_front().is_some() {}
        assert!(q.holds_memory(), "popping keeps the buffer for reuse");
        q.shrink();
        assert!(!q.holds_memory());
        assert_eq!(q.lanes.capacity(), 0);
        q.push(&job("a", 1.0), Priority::Normal, 1);
        assert_eq!(q.pop_front(), Some(1));
    }

    #[test]
    fn randomized_against_a_model() {
        let mut rng = StdRng::seed_from_u64(0x1a2e5);
        for round in 0..20 {
            let mut q: Lanes<u64> = Lanes::new();
            let mut model: HashMap<u64, usize> = HashMap::new();
            let mut next = 0u64;
            let jobs = 1 + round % 7;
            for _ in 0..3_000 {
                match rng.random_range(0..10) {
                    0..=4 => {
                        let j = rng.random_range(0..jobs);
                        let tag = job(&format!("j{j}"), rng.random_range(0.0..4.0));
                        let p = [Priority::High, Priority::Normal, Priority::Low]
                            [rng.random_range(0..3)];
                        q.push(&tag, p, next);
                        model.insert(next, j);
                        next += 1;
                    }
                    5..=6 => {
                        let front = q.front().copied();
                        let got = q.pop_front();
                        assert_eq!(got, front);
                        if let Some(id) = got {
                            assert!(model.remove(&id).is_some(), "duplicate {id}");
                        }
                    }
                    7 => {
                        let front = q.front().copied();
                        let got = q.discard_front();
                        assert_eq!(got, front);
                        if let Some(id) = got {
                            assert!(model.remove(&id).is_some(), "duplicate {id}");
                        }
                    }
                    8 => {
                        let target = rng.random_range(0..next.max(1));
                        let got = q.remove_first(|i| *i == target);
                        assert_eq!(got.is_some(), model.remove(&target).is_some());
                    }
                    _ => q.shrink(),
                }
                assert_eq!(q.len(), model.len());
                assert_eq!(q.is_empty(), model.is_empty());
                assert_eq!(q.iter().count(), model.len());
                let by_job: usize = q.waiting_by_job().map(|(_, n)| n).sum();
                assert_eq!(by_job, model.len());
                assert!(q.waiting_by_job().all(|(_, n)| n > 0));
                if q.is_empty() {
                    q.shrink();
                    assert!(!q.holds_memory());
                }
            }
            let mut rest = q.drain();
            rest.sort_unstable();
            let mut expected: Vec<u64> = model.into_keys().collect();
            expected.sort_unstable();
            assert_eq!(rest, expected);
        }
    }
}
