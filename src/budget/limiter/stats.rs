//! Per-host counters: what was sent, what came back, what was refused locally.
//!
//! Kept next to the host's pacing state (same lock, updated where the events happen) so that
//! `/hosts` and `/metrics` read one consistent picture without a second lock on the request path.

use super::verdicts::Refusal;
use crate::pacing::policy::CooldownCause;

/// How many recent statuses a host remembers.
pub(super) const LAST_STATUSES: usize = 10;
const _: () = assert!(LAST_STATUSES < 16, "the ring's counts are nibbles");

/// Counters of one host since it was first seen (or last forgotten). 32-bit and saturating: they
/// are for people reading `/hosts` (the Prometheus counters are separate), and every byte of a
/// host counts when a crawl knows a million of them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostStats {
    /// Requests sent upstream (answered or failed).
    pub sent: u32,
    /// Responses by class: 1xx/2xx, 3xx, 4xx, 5xx.
    pub by_class: [u32; 4],
    /// Requests that got no response (connect error, reset, timeout).
    pub failed: u32,
    /// Local refusals: queue full.
    pub refused_queue_full: u32,
    /// Local refusals: waited `max_wait_seconds`.
    pub refused_waited_too_long: u32,
    /// Local refusals: the host was cooling down.
    pub refused_cooling_down: u32,
    /// Local refusals: an operator paused the host.
    pub refused_paused: u32,
    /// Local refusals: courtesy was shutting down.
    pub refused_shutting_down: u32,
    /// Response body bytes received from the host and passed on to clients (upstream responses
    /// only, not blind tunnels): the low 32 bits. A 48-bit count in two fields fills what was
    /// padding, where a `u64` would align the counters to 8 bytes and grow every host (see
    /// [`HostStats::response_bytes`]).
    bytes_low: u32,
    /// The high 16 bits of the response byte count.
    bytes_high: u16,
    /// The last statuses in a ring (see [`HostStats::last_statuses`]).
    last: [u16; LAST_STATUSES],
    /// How many of `last` are filled (high nibble) and where the next status goes (low nibble):
    /// one byte, so that [`HostStats::protocol`] fits in what was padding.
    last_ring: u8,
    /// The HTTP version the host's last answer came over, or why it fell back to HTTP/1.1.
    protocol: UpstreamProtocol,
}

/// The HTTP version courtesy speaks to a host's origin, as `/hosts` shows it; a fallback is also
/// what keeps the host on HTTP/1.1 (`upstream_http2`, docs/https.md "HTTP/2 to origins").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum UpstreamProtocol {
    /// Nothing answered yet.
    #[default]
    Unknown,
    /// HTTP/1.1 (offered alone, or the origin's pick).
    Http11,
    /// HTTP/2, picked by the origin over ALPN.
    H2,
    /// HTTP/1.1 after the origin answered 421 (Misdirected Request) over HTTP/2.
    FellBackMisdirected,
    /// HTTP/1.1 after an HTTP/2 protocol error.
    FellBackProtocolError,
}

impl UpstreamProtocol {
    /// The version's name as ALPN spells it (`h2`, `http/1.1`; `None`: nothing answered yet).
    pub fn name(self) -> Option<&'static str> {
        match self {
            UpstreamProtocol::Unknown => None,
            UpstreamProtocol::H2 => Some("h2"),
            _ => Some("http/1.1"),
        }
    }

    /// Why the host fell back to HTTP/1.1, in words (`None`: it did not).
    pub fn fell_back(self) -> Option<&'static str> {
        match self {
            UpstreamProtocol::FellBackMisdirected => {
                Some("the origin answered 421 (Misdirected Request) over h2")
            }
            UpstreamProtocol::FellBackProtocolError => Some("an HTTP/2 protocol error"),
            _ => None,
        }
    }

    /// Whether the host is kept on HTTP/1.1 after a fallback.
    pub fn is_fallback(self) -> bool {
        self.fell_back().is_some()
    }
}

impl HostStats {
    /// Whether an answer of any status came back (not only failures to connect or to be answered).
    pub fn has_answered(&self) -> bool {
        self.by_class.iter().any(|&n| n > 0)
    }

    /// Counts an upstream answer (`None`: no response).
    pub fn answered(&mut self, status: Option<u16>) {
        self.sent = self.sent.saturating_add(1);
        match status {
            Some(s) => {
                let class = match s {
                    0..=299 => 0,
                    300..=399 => 1,
                    400..=499 => 2,
                    _ => 3,
                };
                self.by_class[class] = self.by_class[class].saturating_add(1);
            }
            None => self.failed = self.failed.saturating_add(1),
        }
        let (len, next) = self.ring();
        self.last[next] = status.unwrap_or(0);
        let (len, next) = ((len + 1).min(LAST_STATUSES), (next + 1) % LAST_STATUSES);
        self.last_ring = ((len as u8) << 4) | next as u8;
    }

    /// The last statuses, oldest first; 0 for a request that got no response. Kept in a fixed
    /// ring inside the host's state: no allocation per host.
    pub fn last_statuses(&self) -> Vec<u16> {
        let (len, next) = self.ring();
        let start = (next + LAST_STATUSES - len) % LAST_STATUSES;
        (0..len)
            .map(|i| self.last[(start + i) % LAST_STATUSES])
            .collect()
    }

    /// How many of the last statuses are filled, and where the next one goes.
    fn ring(&self) -> (usize, usize) {
        (
            usize::from(self.last_ring >> 4),
            usize::from(self.last_ring & 0x0f),
        )
    }

    /// Response body bytes received from the host and passed on to clients.
    pub fn response_bytes(&self) -> u64 {
        (u64::from(self.bytes_high) << 32) | u64::from(self.bytes_low)
    }

    /// Counts `bytes` more of response body (saturating at 2^48 - 1, 256 TiB).
    pub fn add_response_bytes(&mut self, bytes: u64) {
        let total = self
            .response_bytes()
            .saturating_add(bytes)
            .min((1 << 48) - 1);
        self.bytes_high = (total >> 32) as u16;
        self.bytes_low = total as u32;
    }

    /// The version the host's answers come over, or its fallback.
    pub fn protocol(&self) -> UpstreamProtocol {
        self.protocol
    }

    /// Notes the version an answer came over; a fallback, once noted, stays (the host is kept
    /// on HTTP/1.1 while courtesy knows it).
    pub fn note_protocol(&mut self, protocol: UpstreamProtocol) {
        if !self.protocol.is_fallback() || protocol.is_fallback() {
            self.protocol = protocol;
        }
    }

    /// Counts a local refusal.
    pub fn refused(&mut self, refusal: &Refusal) {
        match refusal {
            Refusal::QueueFull { .. } => {
                self.refused_queue_full = self.refused_queue_full.saturating_add(1)
            }
            Refusal::WaitedTooLong { .. } => {
                self.refused_waited_too_long = self.refused_waited_too_long.saturating_add(1)
            }
            Refusal::ShuttingDown => {
                self.refused_shutting_down = self.refused_shutting_down.saturating_add(1)
            }
            Refusal::CoolingDown {
                cause: CooldownCause::Operator,
                ..
            } => self.refused_paused = self.refused_paused.saturating_add(1),
            Refusal::CoolingDown { .. } => {
                self.refused_cooling_down = self.refused_cooling_down.saturating_add(1)
            }
        }
    }

    /// The refusal reason names and counts, for /hosts and /metrics.
    pub fn refusals(&self) -> [(&'static str, u32); 5] {
        [
            ("queue_full", self.refused_queue_full),
            ("waited_too_long", self.refused_waited_too_long),
            ("cooling_down", self.refused_cooling_down),
            ("paused", self.refused_paused),
            ("shutting_down", self.refused_shutting_down),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn answers_and_refusals_are_counted() {
        let mut s = HostStats::default();
        for status in [200, 204, 301, 404, 429, 503] {
            s.answered(Some(status));
        }
        s.answered(None);
        assert_eq!((s.sent, s.by_class, s.failed), (7, [2, 1, 2, 1], 1));
        s.refused(&Refusal::ShuttingDown);
        s.refused(&Refusal::CoolingDown {
            remaining: Duration::from_secs(1),
            cause: CooldownCause::Operator,
        });
        s.refused(&Refusal::CoolingDown {
            remaining: Duration::from_secs(1),
            cause: CooldownCause::Status(429),
        });
        assert_eq!(s.refused_paused, 1);
        assert_eq!(s.refused_cooling_down, 1);
        assert_eq!(s.refused_shutting_down, 1);
        assert_eq!(s.last_statuses(), vec![200, 204, 301, 404, 429, 503, 0]);
        for i in 0..20 {
            s.answered(Some(200 + i));
        }
        assert_eq!(s.last_statuses(), (210..220).collect::<Vec<u16>>());
    }

    #[test]
    fn a_fallback_to_http11_stays_once_noted() {
        let mut s = HostStats::default();
        assert_eq!(s.protocol().name(), None);
        s.note_protocol(UpstreamProtocol::H2);
        assert_eq!(s.protocol().name(), Some("h2"));
        s.note_protocol(UpstreamProtocol::FellBackMisdirected);
        s.note_protocol(UpstreamProtocol::Http11);
        s.note_protocol(UpstreamProtocol::H2);
        assert_eq!(s.protocol(), UpstreamProtocol::FellBackMisdirected);
        assert_eq!(s.protocol().name(), Some("http/1.1"));
        assert!(s.protocol().fell_back().is_some_and(|w| w.contains("421")));
    }

    #[test]
    fn response_bytes_count_past_32_bits_and_saturate_at_48() {
        let mut s = HostStats::default();
        s.add_response_bytes(u64::from(u32::MAX));
        s.add_response_bytes(2);
        assert_eq!(s.response_bytes(), (1 << 32) + 1);
        s.add_response_bytes(u64::MAX);
        assert_eq!(s.response_bytes(), (1 << 48) - 1);
    }
}
