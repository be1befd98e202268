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
    mut server: Server,
    demand: Demand,
    seconds: f64,
    seed: u64,
) -> Record {
    let mut rng = StdRng::seed_from_u64(seed);
    let t0 = Instant::now();
    let at = |t: f64| t0 + Duration::from_secs_f64(t.max(0.0));
    let policy = match driver {
        Driver::Courtesy(controller) => {
            let mut p = policy.clone();
            p.adaptive.controller = controller;
            p
        }
        Driver::AutoThrottle => {
            let mut p = policy.clone();
            p.adaptive.enabled = false;
            p
        }
    };
    let mut throttle = AutoThrottle::new(1.0 / policy.pacing.rate, 1.0 / policy.adaptive.max_rate);
    let mut pacing = Pacing::new(&policy, at(0.0), std::time::UNIX_EPOCH);
    if driver == Driver::AutoThrottle {
        pacing.set_rate_override(Some(throttle.rate()), at(0.0));
    }
    let mut clients: Vec<Client> = (0..demand.clients)
        .map(|_| Client {
            ready: 0.0,
            busy: false,
        })
        .collect();
    let mut flights: Vec<Flight> = Vec::new();
    let mut sent = Vec::new();
    let mut now = 0.0;
    // Bounded: every turn of the loop sends, answers, or moves time forward.
    for _ in 0..10_000_000 {
        if now >= seconds {
            break;
        }
        // Answers due.
        flights.sort_by(|a, b| a.done.total_cmp(&b.done));
        while flights.first().is_some_and(|f| f.done <= now) {
            let f = flights.remove(0);
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
                sent_at: at(f.sent),
                limited: f.limited,
                others_in_flight: flights.len() as u32,
            };
            pacing.observe(&obs, &policy, at(f.done), rng.random());
            if driver == Driver::AutoThrottle {
                throttle.observe(f.status, f.latency);
                pacing.set_rate_override(Some(throttle.rate()), at(f.done));
            }
            let client = &mut clients[f.client];
            client.busy = false;
            client.ready = f.done + f.retry_after.unwrap_or(0.0);
            sent.push(Sent {
                at: f.sent,
                status: f.status,
                latency: f.latency,
                rate: f.rate,
            });
        }
        // Courtesy's own 429s while the host cools down (on_cooldown = "reject").
        if let Some(block) = pacing.block(at(now)) {
            let left = block.until.duration_since(at(now)).as_secs_f64();
            for c in clients.iter_mut().filter(|c| !c.busy && c.ready <= now) {
                c.ready = now + left.ceil().max(1.0);
            }
        }
        // Sends, first come first served.
        let on = demand.on(now);
        loop {
            let waiting = clients
                .iter()
                .enumerate()
                .filter(|(_, c)| on && !c.busy && c.ready <= now)
                .min_by(|a, b| a.1.ready.total_cmp(&b.1.ready))
                .map(|(i, _)| i);
            let Some(i) = waiting else { break };
            if flights.len() as u32 >= policy.pacing.concurrency
                || !pacing.try_take(at(now), 0.0, 0.0)
            {
                break;
            }
            let reply = server.request(now, &mut rng);
            let limited = clients[i].ready < now - 1e-9;
            clients[i].busy = true;
            flights.push(Flight {
                client: i,
                sent: now,
                done: now + reply.latency,
                status: reply.status,
                latency: reply.latency,
                retry_after: reply.retry_after,
                limited,
                rate: pacing.pacing_rate(),
                headers: reply.headers,
            });
        }
        // The next event.
        let mut next = seconds;
        if let Some(f) = flights.iter().map(|f| f.done).min_by(f64::total_cmp) {
            next = next.min(f);
        }
        let idle: Vec<f64> = clients
            .iter()
            .filter(|c| !c.busy)
            .map(|c| demand.next_on(c.ready.max(now)))
            .collect();
        if let Some(r) = idle
            .iter()
            .copied()
            .filter(|r| *r > now)
            .min_by(f64::total_cmp)
        {
            next = next.min(r);
        }
        let someone_waits = on && clients.iter().any(|c| !c.busy && c.ready <= now);
        if someone_waits && (flights.len() as u32) < policy.pacing.concurrency {
            let ready = pacing.ready_at(at(now)).duration_since(t0).as_secs_f64();
            next = next.min(ready.max(now + 1e-6));
        }
        now = next.max(now + 1e-9);
    }
    Record {
        sent,
        inside: server.inside,
    }
}
