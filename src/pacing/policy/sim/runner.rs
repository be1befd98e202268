//! The simulation's runner: drives the pure [`Pacing`] against a simulated [`Server`] with
//! polite clients, in simulated time (seconds as `f64`, mapped onto explicit instants), and
//! records every request. Minutes of simulated time take milliseconds.
//!
//! Clients behave like the seed article's crawler: each has one request at a time, sends the
//! next as soon as it has an answer, and after a 429 (the origin's, or courtesy's own while the
//! host cools down) sleeps for its `Retry-After`. Bursty demand switches the clients on and off.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::time::Instant;

use super::autothrottle::AutoThrottle;
use super::servers::{Server, WALL_START};
use crate::config::{Controller, HostPolicy};
use crate::pacing::feedback::Feedback;
use crate::pacing::policy::{Answer, Observation, Pacing};

/// Who moves the rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Driver {
    /// courtesy with one of its controllers.
    Courtesy(Controller),
    /// Scrapy's AutoThrottle rule moving the rate from outside (as an operator's rate), with
    /// courtesy's cooldowns still in force.
    AutoThrottle,
}

/// How many clients want pages, and when.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Demand {
    /// Clients, each with one request at a time.
    pub(super) clients: usize,
    /// Seconds on and off, or `None`: always on.
    pub(super) bursts: Option<(f64, f64)>,
}

impl Demand {
    fn on(&self, t: f64) -> bool {
        self.bursts.is_none_or(|(on, off)| t % (on + off) < on)
    }

    /// The next instant after `t` at which the clients switch on.
    fn next_on(&self, t: f64) -> f64 {
        match self.bursts {
            Some((on, off)) if !self.on(t) => (t / (on + off)).floor() * (on + off) + on + off,
            _ => t,
        }
    }
}

/// One request that reached the origin.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Sent {
    /// Seconds from the start when it left courtesy.
    pub(super) at: f64,
    /// What the origin said.
    pub(super) status: u16,
    /// Seconds to the response.
    pub(super) latency: f64,
    /// The rate courtesy paced the host at when it left.
    pub(super) rate: f64,
}

/// What a run saw.
#[derive(Debug, Clone)]
pub(super) struct Record {
    /// Every request that reached the origin, in sending order.
    pub(super) sent: Vec<Sent>,
    /// Arrivals strictly inside a window the origin announced.
    pub(super) inside: u32,
}

struct Client {
    /// When it next wants to send (its answer came, its sleep ended).
    ready: f64,
    busy: bool,
}

struct Flight {
    client: usize,
    sent: f64,
    done: f64,
    status: u16,
    latency: f64,
    retry_after: Option<f64>,
    limited: bool,
    rate: f64,
    headers: Vec<(&'static str, String)>,
}

/// The server's budget as courtesy reads it from the fields of a reply, at `t`.
fn budget(
    fields: &[(&'static str, String)],
    t: f64,
) -> Option<crate::pacing::feedback::ServerBudget> {
    let mut headers = http::HeaderMap::new();
    for (name, value) in fields {
        if let Ok(value) = http::HeaderValue::from_str(value) {
            headers.append(*name, value);
        }
    }
    let wall = Duration::from_secs(WALL_START) + Duration::from_secs_f64(t.max(0.0));
    crate::pacing::feedback::server_budget(&headers, std::time::SystemTime::UNIX_EPOCH + wall)
}

/// Runs `policy` (its controller replaced by `driver`'s) against `server` for `seconds`.
pub(super) fn run(
    policy: &HostPolicy,
    driver: Driver,
    server: Server,
    demand: Demand,
    seconds: f64,
    seed: u64,
) -> Record {
    let mut sim = Simulation::new(policy, driver, server, demand, seed);
    // Bounded: every turn of the loop sends, answers, or moves time forward.
    for _ in 0..10_000_000 {
        if sim.now >= seconds {
            break;
        }
        sim.take_answers_due();
        sim.hold_clients_while_cooling_down();
        let on = sim.demand.on(sim.now);
        sim.send_while_allowed(on);
        let next = sim.next_event(on, seconds);
        sim.now = next.max(sim.now + 1e-9);
    }
    Record {
        sent: sim.sent,
        inside: sim.server.inside,
    }
}

/// One run's state: the pacing under test, the server, the clients and what is in flight, at
/// simulated time `now` (seconds from `t0`).
struct Simulation {
    policy: HostPolicy,
    driver: Driver,
    throttle: AutoThrottle,
    pacing: Pacing,
    server: Server,
    demand: Demand,
    clients: Vec<Client>,
    flights: Vec<Flight>,
    sent: Vec<Sent>,
    rng: StdRng,
    t0: Instant,
    now: f64,
}

impl Simulation {
    /// The pacing made from `policy` with `driver`'s controller (AutoThrottle's rate set as an
    /// operator's), every client ready at 0.
    fn new(policy: &HostPolicy, driver: Driver, server: Server, demand: Demand, seed: u64) -> Self {
        let rng = StdRng::seed_from_u64(seed);
        let t0 = Instant::now();
        let mut policy = policy.clone();
        match driver {
            Driver::Courtesy(controller) => policy.adaptive.controller = controller,
            Driver::AutoThrottle => policy.adaptive.enabled = false,
        }
        let throttle = AutoThrottle::new(1.0 / policy.pacing.rate, 1.0 / policy.adaptive.max_rate);
        let mut pacing = Pacing::new(&policy, t0, std::time::UNIX_EPOCH);
        if driver == Driver::AutoThrottle {
            pacing.set_rate_override(Some(throttle.rate()), t0);
        }
        let clients = (0..demand.clients)
            .map(|_| Client {
                ready: 0.0,
                busy: false,
            })
            .collect();
        Simulation {
            policy,
            driver,
            throttle,
            pacing,
            server,
            demand,
            clients,
            flights: Vec::new(),
            sent: Vec::new(),
            rng,
            t0,
            now: 0.0,
        }
    }

    /// The instant `t` seconds from the start.
    fn at(&self, t: f64) -> Instant {
        self.t0 + Duration::from_secs_f64(t.max(0.0))
    }

    /// Every answer due by now, observed by the pacing (and AutoThrottle), its client freed
    /// after its `Retry-After`, the request recorded.
    fn take_answers_due(&mut self) {
        self.flights.sort_by(|a, b| a.done.total_cmp(&b.done));
        while self.flights.first().is_some_and(|f| f.done <= self.now) {
            let f = self.flights.remove(0);
            let obs = Observation {
                answer: Answer {
                    feedback: if f.status == 429 {
                        Feedback::Throttled
                    } else {
                        Feedback::Success
                    },
                    status: Some(f.status),
                    latency: Duration::from_secs_f64(f.latency),
                    retry_after: f.retry_after.map(Duration::from_secs_f64),
                    server: budget(&f.headers, f.done),
                },
                sent_at: self.at(f.sent),
                limited: f.limited,
                others_in_flight: self.flights.len() as u32,
            };
            let done = self.at(f.done);
            self.pacing
                .observe(&obs, &self.policy, done, self.rng.random());
            if self.driver == Driver::AutoThrottle {
                self.throttle.observe(f.status, f.latency);
                self.pacing
                    .set_rate_override(Some(self.throttle.rate()), done);
            }
            let client = &mut self.clients[f.client];
            client.busy = false;
            client.ready = f.done + f.retry_after.unwrap_or(0.0);
            self.sent.push(Sent {
                at: f.sent,
                status: f.status,
                latency: f.latency,
                rate: f.rate,
            });
        }
    }

    /// Courtesy's own 429s while the host cools down (on_cooldown = "reject"): every idle client
    /// ready now sleeps until the cooldown ends.
    fn hold_clients_while_cooling_down(&mut self) {
        let now = self.now;
        if let Some(block) = self.pacing.block(self.at(now)) {
            let left = block.until.duration_since(self.at(now)).as_secs_f64();
            for c in self
                .clients
                .iter_mut()
                .filter(|c| !c.busy && c.ready <= now)
            {
                c.ready = now + left.ceil().max(1.0);
            }
        }
    }

    /// Sends, first come first served, while a client is ready (and the demand `on`), a
    /// concurrency slot is free and the pacing gives a turn.
    fn send_while_allowed(&mut self, on: bool) {
        let now = self.now;
        loop {
            let waiting = self
                .clients
                .iter()
                .enumerate()
                .filter(|(_, c)| on && !c.busy && c.ready <= now)
                .min_by(|a, b| a.1.ready.total_cmp(&b.1.ready))
                .map(|(i, _)| i);
            let Some(i) = waiting else { break };
            if self.flights.len() as u32 >= self.policy.pacing.concurrency
                || !self.pacing.try_take(self.at(now), 0.0, 0.0)
            {
                break;
            }
            let reply = self.server.request(now, &mut self.rng);
            let limited = self.clients[i].ready < now - 1e-9;
            self.clients[i].busy = true;
            self.flights.push(Flight {
                client: i,
                sent: now,
                done: now + reply.latency,
                status: reply.status,
                latency: reply.latency,
                retry_after: reply.retry_after,
                limited,
                rate: self.pacing.pacing_rate(),
                headers: reply.headers,
            });
        }
    }

    /// The next event before `seconds`: an answer, a client waking (or its demand switching
    /// on), or the pacing's next turn for a waiting client.
    fn next_event(&mut self, on: bool, seconds: f64) -> f64 {
        let now = self.now;
        let mut next = seconds;
        if let Some(f) = self.flights.iter().map(|f| f.done).min_by(f64::total_cmp) {
            next = next.min(f);
        }
        let idle: Vec<f64> = self
            .clients
            .iter()
            .filter(|c| !c.busy)
            .map(|c| self.demand.next_on(c.ready.max(now)))
            .collect();
        if let Some(r) = idle
            .iter()
            .copied()
            .filter(|r| *r > now)
            .min_by(f64::total_cmp)
        {
            next = next.min(r);
        }
        let someone_waits = on && self.clients.iter().any(|c| !c.busy && c.ready <= now);
        if someone_waits && (self.flights.len() as u32) < self.policy.pacing.concurrency {
            let ready = self
                .pacing
                .ready_at(self.at(now))
                .duration_since(self.t0)
                .as_secs_f64();
            next = next.min(ready.max(now + 1e-6));
        }
        next
    }
}
