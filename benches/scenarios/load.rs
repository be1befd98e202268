//! The load the scenarios put on courtesy: connections that send requests back to back within a
//! bound in count and in time, and the tally of what they got back and how long it took.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use crate::common::client::Client;
use crate::common::percentile::percentile_at_fraction;

/// Converts a std instant to tokio's, for `timeout_at`.
pub fn tokio_at(at: Instant) -> tokio::time::Instant {
    tokio::time::Instant::from_std(at)
}

/// An absolute URL to address `ip` at `port` and its authority.
pub fn target(ip: Ipv4Addr, port: u16) -> (String, String) {
    let authority = format!("{ip}:{port}");
    (format!("http://{authority}/"), authority)
}

/// Answers counted by status; `0` counts requests that got no answer (connection errors). Also
/// how long each answered request took, from sending it to the end of its body.
#[derive(Default)]
pub struct Tally {
    statuses: Mutex<BTreeMap<u16, u64>>,
    latencies_us: Mutex<Vec<u32>>,
}

impl Tally {
    /// Counts one answer with `status` (`0`: none).
    pub fn add(&self, status: u16) {
        *self
            .statuses
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(status)
            .or_default() += 1;
    }

    /// Counts one answer with `status` that took `latency`.
    pub fn answered(&self, status: u16, latency: Duration) {
        self.add(status);
        let us = u32::try_from(latency.as_micros()).unwrap_or(u32::MAX);
        self.latencies_us
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(us);
    }

    /// The latencies of the answered requests at `fractions` (0.5: the median), in µs.
    pub fn latency_us(&self, fractions: &[f64]) -> Vec<Option<u32>> {
        let mut sorted = self
            .latencies_us
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        sorted.sort_unstable();
        fractions
            .iter()
            .map(|f| percentile_at_fraction(&sorted, *f))
            .collect()
    }

    /// How many answers had `status`.
    pub fn get(&self, status: u16) -> u64 {
        let map = self.statuses.lock().unwrap_or_else(|p| p.into_inner());
        map.get(&status).copied().unwrap_or(0)
    }

    /// How many requests were counted, answered or not.
    pub fn total(&self) -> u64 {
        let map = self.statuses.lock().unwrap_or_else(|p| p.into_inner());
        map.values().sum()
    }

    /// The counts for the report, such as "200: 600, no answer: 2".
    pub fn describe(&self) -> String {
        let map = self.statuses.lock().unwrap_or_else(|p| p.into_inner());
        if map.is_empty() {
            return "none".into();
        }
        map.iter()
            .map(|(s, n)| {
                if *s == 0 {
                    format!("no answer: {n}")
                } else {
                    format!("{s}: {n}")
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// One kept-alive connection to the proxy sending GETs to `targets` in turn, each as soon as the
/// previous one was answered, until `deadline` (a request still waiting then is dropped, which
/// cancels it) or `max_requests`. At most 20 connection errors, then it gives up.
pub async fn hammer(
    proxy: SocketAddr,
    targets: Arc<Vec<(String, String)>>,
    offset: usize,
    stride: usize,
    max_requests: usize,
    deadline: Instant,
    tally: Arc<Tally>,
) {
    let mut client: Option<Client> = None;
    let mut errors = 0;
    let mut sent = 0;
    while sent < max_requests && Instant::now() < deadline && errors < 20 {
        let mut conn = match client.take() {
            Some(c) => c,
            None => match tokio::time::timeout_at(tokio_at(deadline), Client::connect(proxy)).await
            {
                Ok(Ok(c)) => c,
                Ok(Err(_)) => {
                    errors += 1;
                    tally.add(0);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
                Err(_) => break,
            },
        };
        let (url, host) = &targets[(offset + sent * stride) % targets.len()];
        sent += 1;
        let asked = Instant::now();
        match tokio::time::timeout_at(tokio_at(deadline), conn.get(url, host)).await {
            Ok(Ok((status, _))) => {
                tally.answered(status, asked.elapsed());
                client = Some(conn);
            }
            Ok(Err(_)) => {
                errors += 1;
                tally.add(0);
            }
            Err(_) => break,
        }
    }
}

/// Waits for tasks, at most until `deadline`; aborts the ones still running then.
pub async fn join_all(tasks: Vec<JoinHandle<()>>, deadline: Instant) -> usize {
    let mut late = 0;
    for task in tasks {
        let abort = task.abort_handle();
        if tokio::time::timeout_at(tokio_at(deadline), task)
            .await
            .is_err()
        {
            abort.abort();
            late += 1;
        }
    }
    late
}
